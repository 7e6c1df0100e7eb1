"""Input checking and small command-line rules: a declared scalar takes a one-element tensor
(shape [1] or [1, 1]) as ONNX Runtime does, and nothing else of another rank; a fixed dim must
match; --level takes 0, 1 or 2 only (exit 2); QLinearMatMul and QLinearConv refuse a zero
y_scale with an error naming the node instead of dividing by zero."""
import os

import onnx

from kilntest import *


def npy(name, arr):
    path = os.path.join(TMP, name + ".npy")
    np.save(path, arr)
    return path


def run(path, *args):
    d = os.path.join(TMP, "out_" + str(abs(hash((path,) + args))))
    os.makedirs(d, exist_ok=True)
    rc, text = kiln("run", path, "--quiet", "--output-dir", d, *args)
    outs = []
    if rc == 0:
        for i in range(8):
            p = os.path.join(d, f"output_{i}.pb")
            if not os.path.exists(p):
                break
            t = onnx.TensorProto()
            with open(p, "rb") as f:
                t.ParseFromString(f.read())
            outs.append(numpy_helper.to_array(t))
    return rc, text, outs


# A voice-activity model's sample-rate input: declared int64[] (a scalar).
scalar = save(model([helper.make_node("Mul", ["sr", "sr"], ["y"])],
                    [vi("sr", [], TensorProto.INT64)], [vi("y", None, TensorProto.INT64)]), "scalar_in")
for shape in [(), (1,), (1, 1)]:
    rc, text, outs = run(scalar, "--input", "sr=" + npy("sr" + str(len(shape)), np.full(shape, 16000, np.int64)))
    check(rc == 0, f"scalar input fed shape {shape}: {text}")
    check(rc == 0 and outs and outs[0].shape == () and outs[0] == 16000 * 16000,
          f"scalar fed {shape} runs as a scalar: {outs}")
rc, text, _ = run(scalar, "--input", "sr=" + npy("sr2", np.array([1, 2], np.int64)))
check(rc == 1 and "expects shape int64[]" in text, f"two elements for a scalar refused: {rc} {text}")

fixed = save(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1])], [vi("y", None)]), "fixed_in")
rc, text, _ = run(fixed, "--input", "x=" + npy("x0", np.array(1.5, np.float32)))
check(rc == 1 and "expects shape float[1]" in text, f"a scalar for a [1] input refused: {rc} {text}")
rc, text, _ = run(fixed, "--input", "x=" + npy("x2", np.ones(2, np.float32)))
check(rc == 1 and "dim 0" in text, f"a wrong fixed dim refused: {rc} {text}")

for cmd in (["run", fixed], ["validate", fixed], ["optimize", fixed, os.path.join(TMP, "o.onnx")],
            ["bench", fixed], ["profile", fixed]):
    for bad in ("abc", "3", "-1", ""):
        rc, text = kiln(*cmd, "--level", bad)
        check(rc == 2 and "--level" in text, f"kiln {cmd[0]} --level '{bad}': exit {rc}: {text[:200]}")


def qlinear_matmul(ys):
    inits = [const("as", np.array(0.1, np.float32)), const("az", np.array(0, np.uint8)),
             const("b", np.array([[1, 2], [3, 4]], np.uint8)),
             const("bs", np.array(0.1, np.float32)), const("bz", np.array(0, np.uint8)),
             const("ys", np.array(ys, np.float32)), const("yz", np.array(3, np.uint8))]
    n = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"], name="qmm")
    return save(model([n], [vi("a", [2, 2], TensorProto.UINT8)], [vi("y", None, TensorProto.UINT8)], inits),
                f"qmm_{ys}")


a = npy("qa", np.array([[1, 2], [3, 4]], np.uint8))
for level in ("0", "2"):
    rc, text, _ = run(qlinear_matmul(0.0), "--input", "a=" + a, "--level", level)
    check(rc == 1 and "qmm" in text and "y_scale" in text, f"QLinearMatMul y_scale 0 refused: {rc} {text}")
    rc, text, outs = run(qlinear_matmul(0.05), "--input", "a=" + a, "--level", level)
    want = np.clip(np.rint(np.array([[7, 10], [15, 22]]) * 0.01 / 0.05) + 3, 0, 255)
    check(rc == 0 and outs and np.array_equal(outs[0], want), f"QLinearMatMul result {outs} vs {want}: {text}")

qc_inits = [const("xs", np.array(0.1, np.float32)), const("xz", np.array(0, np.uint8)),
            const("w", np.ones((1, 1, 1, 1), np.uint8)), const("ws", np.array(0.1, np.float32)),
            const("wz", np.array(0, np.uint8)), const("ys", np.array(0.0, np.float32)),
            const("yz", np.array(0, np.uint8))]
qc = save(model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                  name="qconv")],
                [vi("x", [1, 1, 2, 2], TensorProto.UINT8)], [vi("y", None, TensorProto.UINT8)], qc_inits),
          "qconv_ys0")
rc, text, _ = run(qc)
check(rc == 1 and "qconv" in text and "y_scale" in text, f"QLinearConv y_scale 0 refused: {rc} {text}")

finish("test_input_rules")
