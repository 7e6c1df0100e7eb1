"""The supported range, said honestly: kiln info --ops lists the opsets and operators; a model
beyond them is refused naming the op, its domain and the opset. And an If branch that reads a
value computed by a node listed after the If runs after that node; IsNaN/IsInf-20 on float8;
LpNormalization against numpy."""
import os

import onnx

from kilntest import *

# ---- kiln info --ops ----------------------------------------------------------------------
rc, text = kiln("info", "--ops")
check(rc == 0 and "ai.onnx opsets: 1 to 26" in text, "kiln info --ops gives the opset range: " + text[:200])
for op in ("CenterCropPad", "Col2Im", "BitwiseAnd", "BitwiseNot", "GridSample", "Resize"):
    check(any(line.split()[:1] == [op] for line in text.splitlines()), f"kiln info --ops lists {op}")
check(any(line.split() == ["GroupNormalization", "18,", "21"] for line in text.splitlines()),
      "GroupNormalization shows its two entries (18: per-group scale, 21: per-channel)")
check("ai.kiln" in text, "the fused domain is listed")


def model(nodes, opset, inputs, outputs, name, domain_opsets=()):
    g = helper.make_graph(nodes, name, inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, v) for d, v in domain_opsets])
    m.ir_version = 8
    return save(m, name + ".onnx")


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])

# ---- refusals name what is missing ---------------------------------------------------------
p = model([helper.make_node("Relu", ["x"], ["y"])], 27, [X], [Y], "opset27")
rc, text = kiln("run", p)
check(rc == 1 and "opset 27" in text and "1 to 26" in text, "opset 27 is refused with the range: " + text)

p = model([helper.make_node("NoSuchOp", ["x"], ["y"])], 22, [X], [Y], "unknown_op")
rc, text = kiln("run", p)
check(rc == 1 and "'NoSuchOp'" in text and "'ai.onnx'" in text and "opset 22" in text,
      "an unknown op is named with its domain and opset: " + text)

p = model([helper.make_node("BitwiseNot", ["x"], ["y"])], 17, [X], [Y], "too_old")
rc, text = kiln("run", p)
check(rc == 1 and "'BitwiseNot'" in text and "opset 17" in text,
      "an op used below its first opset names the op and the opset: " + text)

# ---- the opsets 19-22 run ------------------------------------------------------------------
p = model([helper.make_node("Relu", ["x"], ["y"])], 22, [X], [Y], "opset22")
rc, text = kiln("run", p)
check(rc == 0, "a model importing opset 22 runs: " + text)

# ---- an If branch reading a value produced by a node listed after the If -------------------
C = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
then_g = helper.make_graph([helper.make_node("Identity", ["v"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
else_g = helper.make_graph([helper.make_node("Neg", ["v"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Add", ["x", "x"], ["v"])]  # v is made after the If in file order
p = model(nodes, 22, [C, X], [Y], "if_outer_later")
np.save(os.path.join(TMP, "x.npy"), np.array([1.5, -2.0], np.float32))
np.save(os.path.join(TMP, "c.npy"), np.array(True))
out = os.path.join(TMP, "if_out")
rc, text = kiln("run", p, "--input", "x=" + os.path.join(TMP, "x.npy"), "--input",
                "c=" + os.path.join(TMP, "c.npy"), "--output-dir", out, "--level", "0")
y = numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "output_0.pb"))) if rc == 0 else None
check(rc == 0 and y is not None and np.array_equal(y, np.array([3.0, -4.0], np.float32)),
      f"the If runs after the node its branch reads (y = 2x): rc {rc} {text} {y}")

# ---- IsNaN / IsInf-20 take float8 -----------------------------------------------------------
F8E5M2 = 19  # TensorProto.FLOAT8E5M2 (the onnx package here predates it)
codes = bytes([0x3C, 0x7C, 0xFC, 0x7F])  # 1.0, +inf, -inf, NaN
xin = onnx.TensorProto(name="x", data_type=F8E5M2, dims=[4], raw_data=codes)
xf = os.path.join(TMP, "f8.pb")
with open(xf, "wb") as fh:
    fh.write(xin.SerializeToString())
XF8 = helper.make_tensor_value_info("x", F8E5M2, [4])
YB = helper.make_tensor_value_info("y", TensorProto.BOOL, [4])
for op, attrs, want in [("IsNaN", {}, [0, 0, 0, 1]), ("IsInf", {}, [0, 1, 1, 0]),
                        ("IsInf", {"detect_negative": 0}, [0, 1, 0, 0])]:
    p = model([helper.make_node(op, ["x"], ["y"], **attrs)], 20, [XF8], [YB], "f8_" + op)
    out = os.path.join(TMP, "f8_out_" + op + str(len(attrs)))
    rc, text = kiln("run", p, "--input", "x=" + xf, "--output-dir", out, "-q")
    y = numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "output_0.pb"))) if rc == 0 else None
    check(y is not None and [int(v) for v in y] == want, f"{op}{attrs} on float8e5m2 at opset 20: {y} {text}")
p = model([helper.make_node("IsNaN", ["x"], ["y"])], 19, [XF8], [YB], "f8_isnan19")
rc, text = kiln("run", p, "--input", "x=" + xf, "-q")
check(rc == 1 and "float8e5m2" in text, "IsNaN-19 does not take float8: " + text)

# ---- LpNormalization against numpy (a zero-norm slice stays 0, as ONNX Runtime) ------------
xv = np.array([[3, -4, 0], [0, 0, 0], [1, 2, 2]], np.float32)
np.save(os.path.join(TMP, "lpx.npy"), xv)
X33 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
Y33 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])
for pn, axis in [(2, -1), (1, 0)]:
    norm = np.linalg.norm(xv, ord=pn, axis=axis, keepdims=True)
    want = np.where(norm > 0, xv / np.where(norm > 0, norm, 1), 0)
    p = model([helper.make_node("LpNormalization", ["x"], ["y"], p=pn, axis=axis)], 22, [X33], [Y33], f"lpn{pn}")
    out = os.path.join(TMP, f"lpn_out{pn}")
    rc, text = kiln("run", p, "--input", "x=" + os.path.join(TMP, "lpx.npy"), "--output-dir", out, "-q")
    y = numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "output_0.pb"))) if rc == 0 else None
    check(y is not None and np.allclose(y, want, atol=1e-6), f"LpNormalization p={pn} axis={axis}: {y} vs {want} {text}")
finish("test_opset_range")
