"""An If whose branches read an outer value by name runs after that value's producer, even when
the If's own inputs are ready first (the branches' reads are edges of the topological sort).
"""
import os

from kilntest import TMP, TensorProto, check, finish, helper, kiln, np, numpy_helper, onnx, save


def branch(name, op):
    return helper.make_graph([helper.make_node(op, ["two", "df"], ["o_" + name])], name, [],
                             [helper.make_tensor_value_info("o_" + name, TensorProto.FLOAT, None)])


nodes = [helper.make_node("Mul", ["d", "two"], ["dm"]),
         helper.make_node("Add", ["dm", "two"], ["df"]),  # produced after the If is ready
         helper.make_node("If", ["c"], ["y"], then_branch=branch("t", "Div"), else_branch=branch("e", "Sub"))]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1]),
                                   helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                      [numpy_helper.from_array(np.array([2.0], np.float32), "two")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
path = save(m, "outer_order")
for cond, want in ((True, 2 / (3 * 2 + 2)), (False, 2 - (3 * 2 + 2))):
    feeds = {"d": numpy_helper.from_array(np.array([3.0], np.float32), "d"),
             "c": numpy_helper.from_array(np.array(cond), "c")}
    args = ["run", path, "--quiet", "--output-dir", os.path.join(TMP, f"out_{cond}")]
    for k, t in feeds.items():
        f = os.path.join(TMP, f"{k}_{cond}.pb")
        with open(f, "wb") as fh:
            fh.write(t.SerializeToString())
        args += ["--input", f"{k}={f}"]
    for level in ("0", "2"):
        rc, text = kiln(*args, "--level", level)
        check(rc == 0, f"If reading an outer value runs (cond {cond}, level {level}): {text[-300:]}")
        if rc == 0:
            t = onnx.TensorProto()
            with open(os.path.join(TMP, f"out_{cond}", "output_0.pb"), "rb") as fh:
                t.ParseFromString(fh.read())
            got = numpy_helper.to_array(t)
            check(abs(float(got[0]) - want) < 1e-6, f"cond {cond} level {level}: {got} vs {want}")
finish("test_outer_value_order")
