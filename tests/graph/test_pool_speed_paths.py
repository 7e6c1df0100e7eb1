"""The fast paths of MaxPool and Concat against NumPy, exactly, at 1 and 2 threads and every
ISA level (KILN_ISA): MaxPool's 3-wide stride-2 kernel (pairs of loads, two vectors at a time,
two output rows at a time sharing an input row; whole unpadded planes by column maxima first,
which hand planes holding a NaN or a -0.0 back to the rows,
every tail width 1..16 of the vectorised columns, NaN as the first tap of a window's first and
later rows, ties, -inf) next to the other x strides and dilations; Concat's copy split over
threads by output bytes (several inputs of unequal sizes, axes 0..3, 1- and 2-byte types
whose pieces do not end on cache lines, an empty input); GlobalAveragePool's 4-plane AVX-512 sums
byte-equal to the scalar ones."""
import itertools
import os

import onnx

from kilntest import *

rng = np.random.default_rng(11)
ISAS = ["scalar", "avx2", "avx512"]


def run(path, feeds, tag, threads, isa):
    args = ["run", path, "--quiet", "--output-dir", os.path.join(TMP, tag), "--threads", str(threads)]
    for name, arr in feeds.items():
        f = os.path.join(TMP, f"{tag}_{name}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    rc, text = kiln(*args, env={"KILN_ISA": isa})
    if rc != 0:
        return None, text
    t = onnx.load_tensor(os.path.join(TMP, tag, "output_0.pb"))
    return numpy_helper.to_array(t), text


# (h, w, kernel, strides, pads [t, l, b, r], dilations, ceil_mode)
cases = [((9, 2 * n + 1), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 0) for n in range(1, 17)]  # tails 1..16
cases += [
    ((111, 111), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),   # SqueezeNet: 32 + 16 + 7 columns
    ((13, 67), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 0),     # 32 + 1
    ((12, 130), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),    # padded: edges scalar, 2 x 32
    ((8, 77), (3, 3), (2, 2), (0, 1, 2, 0), (1, 1), 1),      # asymmetric, ceil
    ((10, 70), (3, 3), (2, 2), (1, 1, 1, 1), (2, 2), 0),     # dilated: the general taps
    ((9, 41), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0),      # 2-wide at stride 2
    ((7, 45), (3, 5), (1, 2), (0, 2, 0, 2), (1, 1), 0),      # 5-wide at stride 2
    ((9, 40), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),      # stride 1
    ((1, 3), (1, 3), (1, 2), (0, 0, 0, 0), (1, 1), 0),       # one window
]
for i, (hw, k, s, pads, d, ceil) in enumerate(cases):
    shape = [2, 5, hw[0], hw[1]]
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(s),
                            pads=list(pads), dilations=list(d), ceil_mode=ceil)
    path = save(model([node], [vi("x", shape)], [vi("y", None)], opset=12), f"mp{i}")
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :3] = np.nan                        # first tap of the first row
    if hw[0] > 2 and hw[1] > 6:
        x[0, 1, 1, 4] = np.nan                     # first tap of a window's later row
        x[0, 1, 1, 6] = 7.0                        # ... whose other taps still count
        x[1, 3, 2, 1:4] = np.nan                   # later taps
        x[0, 2, 2, 4] = np.nan                     # row shared by two output rows of stride 2
        x[0, 2, 2, 5] = 9.0
        x[1, 0, 3, 5] = np.nan                     # later taps, in the fourth row of a pair
    x[0, 3, -1, 0] = np.nan                        # the last row (of a plane's windows, where H is odd)
    x[1, 2, -1, -2:] = -np.inf
    x[1, 1, 0, ::2] = x[1, 1, 0, 0]                # ties
    x[1, 4, -1, 1::2] = -0.0
    x[1, 4, -1, 0::2] = 0.0                        # signed zeros: the first one wins
    want = maxpool_ref(x, k, s, pads, d, ceil)
    for threads, isa in itertools.product((1, 2), ISAS):
        got, text = run(path, {"x": x}, f"mp{i}_{threads}_{isa}", threads, isa)
        same = got is not None and got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
        if same:
            same = np.array_equal(np.signbit(got), np.signbit(want))
        check(same, f"MaxPool {hw} k{k} s{s} p{pads} d{d} ceil{ceil} threads {threads} {isa}: {text}")

# Concat: large enough to be split over 2 threads (>= 512 KiB of output) and small ones
concats = [
    (1, [(1, 64, 55, 55), (1, 64, 55, 55)], TensorProto.FLOAT, np.float32),        # SqueezeNet fire
    (1, [(1, 30, 41, 43), (1, 7, 41, 43), (1, 0, 41, 43), (1, 61, 41, 43)], TensorProto.FLOAT, np.float32),
    (0, [(3, 5, 97, 101), (1, 5, 97, 101)], TensorProto.FLOAT, np.float32),
    (3, [(2, 300, 101, 3), (2, 300, 101, 5)], TensorProto.FLOAT, np.float32),      # many short runs
    (2, [(1, 3, 333, 257), (1, 3, 111, 257)], TensorProto.FLOAT16, np.float16),     # 2-byte pieces
    (1, [(1, 177, 61, 59), (1, 151, 61, 59)], TensorProto.UINT8, np.uint8),         # odd byte counts
    (1, [(1, 5, 7, 9), (1, 3, 7, 9)], TensorProto.FLOAT, np.float32),               # one thread
]
for i, (axis, shapes, et, nt) in enumerate(concats):
    names = [f"x{j}" for j in range(len(shapes))]
    node = helper.make_node("Concat", names, ["y"], axis=axis)
    path = save(model([node], [vi(n, list(sh), et) for n, sh in zip(names, shapes)],
                      [vi("y", None, et)]), f"cat{i}")
    feeds = {n: (rng.standard_normal(sh) * 50).astype(nt) for n, sh in zip(names, shapes)}
    want = np.concatenate([feeds[n] for n in names], axis)
    for threads, isa in itertools.product((1, 2), ISAS):
        got, text = run(path, feeds, f"cat{i}_{threads}_{isa}", threads, isa)
        check(got is not None and got.shape == want.shape and np.array_equal(got, want),
              f"Concat {i} axis {axis} {shapes} threads {threads} {isa}: {text}")

# GlobalAveragePool: 4 planes at a time in AVX-512, the same sums as the scalar lanes (bytes)
for i, shape in enumerate([(2, 7, 13, 13), (1, 1280, 7, 7), (1, 5, 1, 3), (3, 3, 4, 4), (1, 9, 17, 1)]):
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    path = save(model([node], [vi("x", list(shape))], [vi("y", None)]), f"gap{i}")
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    outs = {}
    for threads, isa in itertools.product((1, 2), ISAS):
        got, text = run(path, {"x": x}, f"gap{i}_{threads}_{isa}", threads, isa)
        ok = got is not None and got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-6)
        check(ok, f"GlobalAveragePool {shape} threads {threads} {isa}: {text}")
        if got is not None:
            outs[(threads, isa)] = got.tobytes()
    check(len(set(outs.values())) == 1, f"GlobalAveragePool {shape}: results differ by ISA or threads")

finish("test_pool_speed_paths")
