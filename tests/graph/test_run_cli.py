"""kiln run --runs (and --inter-op): planned runs (after the first, which measures the memory plan) must repeat
the first run's outputs byte for byte, including a Concat whose inputs the plan lays out in
place; bad counts are usage errors."""
import os

from kilntest import *
import onnx
from onnx import numpy_helper

rng = np.random.default_rng(0)
W1 = const("W1", rng.standard_normal((16, 8, 1, 1)).astype(np.float32))
W3 = const("W3", rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
# a squeezenet fire module: two convolutions of one input concatenated along channels
m = model([helper.make_node("Conv", ["x", "W1"], ["e1"]),
           helper.make_node("Relu", ["e1"], ["r1"]),
           helper.make_node("Conv", ["x", "W3"], ["e3"], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["e3"], ["r3"]),
           helper.make_node("Concat", ["r1", "r3"], ["c"], axis=1),
           helper.make_node("Sigmoid", ["c"], ["y"])],
          [vi("x", [1, 8, 12, 12])], [vi("y", [1, 32, 12, 12])], [W1, W3])
path = save(m, "run_fire")
x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
xin = os.path.join(TMP, "fire_x.npy")
np.save(xin, x)

def expected():

    def conv(x, w, pad):
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        k = w.shape[2]
        out = np.zeros((1, w.shape[0], 12, 12), np.float64)
        for i in range(k):
            for j in range(k):
                out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 12, j:j + 12], w[:, :, i, j])
        return out
    a = np.maximum(conv(x, numpy_helper.to_array(W1), 0), 0)
    b = np.maximum(conv(x, numpy_helper.to_array(W3), 1), 0)
    return 1 / (1 + np.exp(-np.concatenate([a, b], axis=1)))

for level in ["0", "2"]:
    for threads in ["1", "2", "2 --inter-op"]:
        out = os.path.join(TMP, f"fire_out_{level}_{threads.replace(' ', '')}")
        rc, text = kiln("run", path, "--input", f"x={xin}", "--runs", "4", "--level", level,
                        "--threads", *threads.split(), "--quiet", "--output-dir", out)
        check(rc == 0, f"level {level}, {threads} threads: 4 runs agree: {text[-300:]}")
        if rc == 0:
            y = numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "output_0.pb")))
            err = float(np.max(np.abs(y - expected())))
            check(err < 1e-5, f"level {level}, {threads} threads: last run matches numpy (max abs {err})")

rc, text = kiln("run", path, "--runs", "0")
check(rc == 2 and "--runs" in text, f"--runs 0 is a usage error: {rc} {text}")
rc, text = kiln("run", "--help")
check(rc == 0 and "--runs" in text, "run --help mentions --runs")
finish("test_run_cli")
