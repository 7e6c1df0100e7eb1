"""MaxPool (float NCHW, the vectorised path for x strides 1 and 2 and the scalar edges) against
a NumPy reference with the same tie and NaN rule (first valid tap, then any greater one), and
Concat / Flatten / Add writing outputs that are not zero-filled first (kiln_out_uninit): run
twice in one session-like sequence with different values, every element must be exact."""
import itertools
import math
import os

import onnx

from kilntest import *

rng = np.random.default_rng(7)


def maxpool_ref(x, k, s, pads, d, ceil):
    n, c, h, w = x.shape
    out = []
    for ax, size in enumerate((h, w)):
        span = size + pads[ax] + pads[ax + 2] - ((k[ax] - 1) * d[ax] + 1)
        o = (math.ceil(span / s[ax]) if ceil else span // s[ax]) + 1
        if ceil and (o - 1) * s[ax] >= size + pads[ax]:
            o -= 1
        out.append(o)
    y = np.empty((n, c, out[0], out[1]), np.float32)
    for oh, ow in itertools.product(range(out[0]), range(out[1])):
        m = None
        for a, b in itertools.product(range(k[0]), range(k[1])):
            iy, ix = oh * s[0] - pads[0] + a * d[0], ow * s[1] - pads[1] + b * d[1]
            if not (0 <= iy < h and 0 <= ix < w):
                continue
            v = x[:, :, iy, ix]
            m = v.copy() if m is None else np.where(v > m, v, m)
        y[:, :, oh, ow] = m if m is not None else -np.inf
    return y


def run_model(path, feeds, tag):
    args = ["run", path, "--quiet", "--output-dir", os.path.join(TMP, tag), "--threads", "1"]
    for name, arr in feeds.items():
        f = os.path.join(TMP, f"{tag}_{name}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    rc, text = kiln(*args)
    if rc != 0:
        return None, text
    t = onnx.load_tensor(os.path.join(TMP, tag, "output_0.pb"))
    return numpy_helper.to_array(t), text


# (h, w, kernel, strides, pads [t, l, b, r], dilations, ceil_mode)
cases = [
    ((55, 55), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),   # SqueezeNet
    ((111, 111), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),
    ((112, 112), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),  # ResNet stem
    ((9, 40), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),     # stride 1, padded
    ((7, 37), (2, 3), (1, 2), (0, 2, 0, 1), (1, 1), 0),     # asymmetric
    ((10, 50), (3, 3), (2, 2), (1, 1, 1, 1), (2, 2), 1),    # dilated, ceil
    ((6, 33), (2, 2), (2, 3), (0, 0, 0, 0), (1, 1), 0),     # x stride 3: scalar only
    ((5, 4), (3, 5), (1, 1), (1, 2, 1, 2), (1, 1), 0),      # kernel wider than the row
]
for i, (hw, k, s, pads, d, ceil) in enumerate(cases):
    shape = [2, 3, hw[0], hw[1]]
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(s),
                            pads=list(pads), dilations=list(d), ceil_mode=ceil)
    path = save(model([node], [vi("x", shape)], [vi("y", None)], opset=12), f"maxpool{i}")
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :3] = np.nan                  # NaN as first tap and as a later tap
    x[1, 2, -1, -2:] = -np.inf
    x[1, 1, 1, ::3] = x[1, 1, 1, 0]          # ties
    want = maxpool_ref(x, k, s, pads, d, ceil)
    got, text = run_model(path, {"x": x}, f"maxpool{i}")
    check(got is not None and got.shape == want.shape and
          np.array_equal(got, want, equal_nan=True), f"MaxPool case {i} {hw} k{k} s{s}: {text}")

# Concat of two convolution-like branches, Flatten and Add: outputs not zero-filled first.
a, b = vi("a", [1, 5, 7, 9]), vi("b", [1, 3, 7, 9])
nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
         helper.make_node("Add", ["c", "c"], ["d"]),
         helper.make_node("Flatten", ["d"], ["y"], axis=1)]
path = save(model(nodes, [a, b], [vi("y", None)]), "concat_add_flatten")
for r in range(2):
    fa = rng.standard_normal((1, 5, 7, 9)).astype(np.float32)
    fb = rng.standard_normal((1, 3, 7, 9)).astype(np.float32)
    want = (np.concatenate([fa, fb], 1) * 2).reshape(1, -1)
    got, text = run_model(path, {"a": fa, "b": fb}, f"cat{r}")
    check(got is not None and np.array_equal(got, want), f"Concat/Add/Flatten run {r}: {text}")

finish("test_pool_concat")
