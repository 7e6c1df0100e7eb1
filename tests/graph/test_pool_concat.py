"""MaxPool (float NCHW, the vectorised path for x strides 1 and 2 and the scalar edges) against
a NumPy reference with the same tie and NaN rule (first valid tap, then any greater one), and
Concat / Flatten / Add writing outputs that are not zero-filled first (kiln_out_uninit): run
twice in one session-like sequence with different values, every element must be exact."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(7)


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
