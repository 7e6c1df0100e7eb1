"""Elementwise fusion (ai.kiln::FusedElementwise): where it must apply, where it must not, the
fallback, and validation against the original chain on several input shapes."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(2)
F64 = TensorProto.DOUBLE


def f32(name, v):
    return const(name, np.asarray(v, np.float32))


def n(op, ins, out, **kw):
    return helper.make_node(op, ins, [out], **kw)


def fused_groups(path):
    """Op lists of the FusedElementwise nodes after optimisation (their 'original' chains)."""
    out = os.path.join(TMP, os.path.basename(path) + ".ew.onnx")
    rc, _ = kiln("optimize", path, out)
    if rc:
        return None
    groups = []
    for node in onnx.load(out).graph.node:
        if node.op_type == "FusedElementwise":
            orig = [a.g for a in node.attribute if a.name == "original"][0]
            groups.append([x.op_type for x in orig.node])
    return groups


def validate_dims(path, dims_list, what, *extra):
    for dims in dims_list:
        args = list(extra)
        for k, v in dims.items():
            args += ["--dim", f"{k}={v}"]
        ok, text = validate(path, *args)
        check(ok, f"{what} validates with {dims}: {text}")


# Bias (broadcast over the last dim) -> Relu -> scale -> + residual -> Clip: one node.
m = model([n("Add", ["x", "bias"], "a"), n("Relu", ["a"], "b"), n("Mul", ["b", "s"], "c"),
           n("Add", ["c", "r"], "d"), n("Clip", ["d", "lo", "hi"], "y")],
          [vi("x", ["batch", "seq", 16]), vi("r", ["batch", "seq", 16])], [vi("y", ["batch", "seq", 16])],
          [f32("bias", rng.standard_normal(16)), f32("s", 0.5), f32("lo", -1.0), f32("hi", 1.5)])
p = save(m, "ew_chain5")
ops, text = optimized_ops(p)
check(ops == {"FusedElementwise": 1}, f"5-op chain fused into one node: {ops} {text}")
validate_dims(p, [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 9}, {"batch": 3, "seq": 100}], "ew_chain5")
rc, text = kiln("validate", p, "--dim", "batch=2", "--dim", "seq=5", env={"KILN_FUSION_FAIL": "FusedElementwise"})
check(rc == 0 and "forced to fail" in text, "forced fallback agrees and is reported: " + text)

# Swish x*sigmoid(x) (x read twice from outside) and a tree (a*b)+(c*d) -> Tanh.
m = model([n("Sigmoid", ["x"], "s"), n("Mul", ["x", "s"], "y")], [vi("x", [4, 33])], [vi("y", [4, 33])])
p = save(m, "ew_swish")
check(fused_groups(p) == [["Sigmoid", "Mul"]], f"swish fused: {fused_groups(p)}")
validate_dims(p, [{}], "ew_swish")
m = model([n("Mul", ["a", "b"], "ab"), n("Mul", ["c", "d"], "cd"), n("Add", ["ab", "cd"], "e"), n("Tanh", ["e"], "y")],
          [vi(k, [5, 7]) for k in "abcd"], [vi("y", [5, 7])])
p = save(m, "ew_tree")
g = fused_groups(p)
check(g is not None and len(g) == 1 and sorted(g[0]) == ["Add", "Mul", "Mul", "Tanh"], f"tree fused: {g}")
validate_dims(p, [{}], "ew_tree")

# Every supported op, each in its own group op -> Add, so each shows in an output.
un = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Erf", "Floor", "Ceil", "Softsign", "Sin", "Cos",
      "HardSwish", "Softplus"]
pos = ["Log", "Sqrt", "Reciprocal", "Abs"]  # (Abs of xs would merge with ax in cse)
nodes = [n("Mul", ["x", "k"], "xs"), n("Abs", ["xs"], "ax"), n("Add", ["ax", "one"], "pb")]
terms = [n(op, ["xs"], f"u{i}") for i, op in enumerate(un)] + [n(op, ["pb"], f"w{i}") for i, op in enumerate(pos)]
terms += [n("Pow", ["pb", "ex"], "pw"), n("Max", ["xs", "ax"], "mx"), n("Min", ["xs", "ax"], "mn"),
          n("Div", ["xs", "pb"], "dv"), n("Sub", ["xs", "pb"], "sb"), n("LeakyRelu", ["xs"], "lr", alpha=0.2),
          n("Elu", ["xs"], "el", alpha=0.7), n("HardSigmoid", ["xs"], "hs", alpha=0.3, beta=0.4),
          n("PRelu", ["xs", "slope"], "pr"), n("Clip", ["xs", "lo", "hi"], "cl")]
nodes += terms + [n("Add", [t.output[0], "one"], f"y{i}") for i, t in enumerate(terms)]
m = model(nodes, [vi("x", [3, 50])], [vi(f"y{i}", [3, 50]) for i in range(len(terms))],
          [f32("k", 2.5), f32("one", 1.0), f32("ex", 1.7), f32("slope", rng.standard_normal(50) * 0.1),
           f32("lo", -0.5), f32("hi", 0.75)], opset=14)
p = save(m, "ew_allops")
g = fused_groups(p)
check(g is not None and sorted(grp[0] for grp in g) == sorted(t.op_type for t in terms),
      f"every op fused with its Add: {g}")
ok, text = validate(p, "--seeds", "5", "--atol", "1e-5", "--rtol", "1e-5")
check(ok, "ew_allops validates on 5 seeds (atol 1e-5, rtol 1e-5): " + text)

# Broadcasts the loop can index: per-channel [C,1,1] over [N,C,H,W]; an intermediate
# smaller than the output ([3,1] then + [1,4]); a scalar graph input.
m = model([n("Add", ["x", "b"], "a"), n("Relu", ["a"], "y")],
          [vi("x", ["n", 3, 5, 6])], [vi("y", ["n", 3, 5, 6])], [f32("b", rng.standard_normal((3, 1, 1)))])
p = save(m, "ew_channel")
check(fused_groups(p) == [["Add", "Relu"]], f"per-channel bias fused: {fused_groups(p)}")
validate_dims(p, [{"n": 1}, {"n": 4}], "ew_channel")
m = model([n("Relu", ["x"], "a"), n("Add", ["a", "z"], "b"), n("Sigmoid", ["b"], "y")],
          [vi("x", [3, 1]), vi("z", [1, 4])], [vi("y", [3, 4])])
p = save(m, "ew_grow")
check(fused_groups(p) == [["Relu", "Add", "Sigmoid"]], f"growing broadcast fused: {fused_groups(p)}")
validate_dims(p, [{}], "ew_grow")
m = model([n("Mul", ["x", "k"], "a"), n("Exp", ["a"], "y")], [vi("x", [2, 8]), vi("k", [])], [vi("y", [2, 8])])
p = save(m, "ew_scalar_input")
check(fused_groups(p) == [["Mul", "Exp"]], f"scalar graph input fused: {fused_groups(p)}")
validate_dims(p, [{}], "ew_scalar_input")

# Symbolic dims of the same name are equal: [n, m] + [m] fuses; [a, b] + [c] does not
# (c may be 1 or b at run time: the analysis cannot tell).
m = model([n("Add", ["x", "v"], "a"), n("Tanh", ["a"], "y")], [vi("x", ["n", "m"]), vi("v", ["m"])], [vi("y", ["n", "m"])])
p = save(m, "ew_sym_same")
check(fused_groups(p) == [["Add", "Tanh"]], f"same-name symbolic broadcast fused: {fused_groups(p)}")
validate_dims(p, [{"n": 3, "m": 5}], "ew_sym_same")
m = model([n("Add", ["x", "v"], "a"), n("Tanh", ["a"], "y")], [vi("x", ["a", "b"]), vi("v", ["c"])], [vi("y", None)])
p = save(m, "ew_sym_other")
check(fused_groups(p) == [], f"unprovable symbolic broadcast not fused: {fused_groups(p)}")
validate_dims(p, [{"a": 3, "b": 5, "c": 5}, {"a": 3, "b": 5, "c": 1}], "ew_sym_other")

# Must not: a broadcast the loop cannot index ([2,1,4] over [2,3,4]: two separate runs).
m = model([n("Add", ["x", "z"], "a"), n("Relu", ["a"], "y")], [vi("x", [2, 1, 4]), vi("z", [2, 3, 4])], [vi("y", [2, 3, 4])])
p = save(m, "ew_gap")
check(fused_groups(p) == [], f"gapped broadcast not fused: {fused_groups(p)}")
validate_dims(p, [{}], "ew_gap")

# Must not: an intermediate with two consumers.
m = model([n("Add", ["x", "c"], "a"), n("Relu", ["a"], "y"), n("Sigmoid", ["a"], "z")],
          [vi("x", [4, 4])], [vi("y", [4, 4]), vi("z", [4, 4])], [f32("c", 0.3)])
p = save(m, "ew_fanout")
check(fused_groups(p) == [], f"fan-out blocks fusion: {fused_groups(p)}")

# Must not: a graph output in the middle; the rest of the chain still fuses.
m = model([n("Relu", ["x"], "a"), n("Sigmoid", ["a"], "b"), n("Mul", ["b", "c"], "y")],
          [vi("x", [4, 4])], [vi("y", [4, 4]), vi("a", [4, 4])], [f32("c", 2.0)])
p = save(m, "ew_output_mid")
check(fused_groups(p) == [["Sigmoid", "Mul"]], f"graph output stays outside: {fused_groups(p)}")
validate_dims(p, [{}], "ew_output_mid")

# Must not: mixed dtypes (integer exponent), double chains.
m = model([n("Pow", ["x", "e"], "a"), n("Relu", ["a"], "y")], [vi("x", [4])], [vi("y", [4])],
          [const("e", np.asarray(2, np.int64))])
check(fused_groups(save(m, "ew_mixed")) == [], "integer exponent not fused")
m = model([n("Relu", ["x"], "a"), n("Sigmoid", ["a"], "y")], [vi("x", [4], F64)], [vi("y", [4], F64)])
check(fused_groups(save(m, "ew_double")) == [], "double chain not fused")

# Must not: LayerNorm and softmax pieces (next to reductions), GELU.
m = model([n("ReduceMean", ["x"], "mu", axes=[-1]), n("Sub", ["x", "mu"], "d"), n("Pow", ["d", "two"], "d2"),
           n("ReduceMean", ["d2"], "var", axes=[-1]), n("Add", ["var", "eps"], "ve"), n("Sqrt", ["ve"], "sd"),
           n("Div", ["d", "sd"], "nrm"), n("Mul", ["nrm", "g"], "sc"), n("Add", ["sc", "b"], "y")],
          [vi("x", [2, 5, 8])], [vi("y", [2, 5, 8])],
          [f32("two", 2.0), f32("eps", 1e-5), f32("g", rng.standard_normal(8)), f32("b", rng.standard_normal(8))])
p = save(m, "ew_layernorm")
g = fused_groups(p)
check(g is not None and all(op not in ("Sub", "Pow", "Sqrt", "Div") for grp in g for op in grp),
      f"layernorm statistics are not swallowed: {g}")
validate_dims(p, [{}], "ew_layernorm")
m = model([n("ReduceMax", ["x"], "mx", axes=[-1]), n("Sub", ["x", "mx"], "d"), n("Exp", ["d"], "e"),
           n("ReduceSum", ["e", "ax"], "s"), n("Div", ["e", "s"], "y")],
          [vi("x", [3, 6])], [vi("y", [3, 6])], [const("ax", np.asarray([-1], np.int64))])
p = save(m, "ew_softmax")
check(fused_groups(p) == [], f"softmax pieces not fused: {fused_groups(p)}")
m = model([n("Div", ["x", "r2"], "a"), n("Erf", ["a"], "b"), n("Add", ["b", "one"], "c"),
           n("Mul", ["x", "c"], "d"), n("Mul", ["d", "half"], "y")],
          [vi("x", [4, 16])], [vi("y", [4, 16])], [f32("r2", 1.4142135), f32("one", 1.0), f32("half", 0.5)])
p = save(m, "ew_gelu")
g = fused_groups(p)
check(g is not None and not any("Erf" in grp for grp in g), f"GELU not swallowed: {g}")
validate_dims(p, [{}], "ew_gelu")

# A chain longer than one fused node holds: split into several, still exact.
nodes, prev = [], "x"
for k in range(30):
    nodes.append(n("Mul" if k % 2 else "Add", [prev, f"c{k % 3}"], f"t{k}"))
    prev = f"t{k}"
nodes.append(n("Tanh", [prev], "y"))
m = model(nodes, [vi("x", [64])], [vi("y", [64])], [f32("c0", 0.25), f32("c1", 0.9), f32("c2", -0.1)])
p = save(m, "ew_long")
g = fused_groups(p)
check(g is not None and len(g) >= 2 and all(len(x) <= 16 for x in g) and sum(map(len, g)) == 31,
      f"long chain split into fused nodes of at most 16 ops: {g}")
validate_dims(p, [{}], "ew_long")

# Level 1 never fuses.
ops, _ = optimized_ops(save(m, "ew_level1"), "--level", "1")
check(ops is not None and "FusedElementwise" not in ops, f"no fusion at level 1: {ops}")

finish("test_fuse_elementwise")
