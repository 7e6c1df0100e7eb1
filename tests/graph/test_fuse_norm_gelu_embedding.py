"""LayerNorm, GELU and embedding fusions: where they must apply, where they must not, and
fused-vs-original agreement on random inputs of several shapes (and the forced fallback)."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(7)
F, D64 = TensorProto.FLOAT, TensorProto.DOUBLE
H = 16


def f32(*shape, scale=1.0, offset=0.0):
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


def npy(name, arr):
    path = os.path.join(TMP, name + ".npy")
    np.save(path, arr)
    return path


def agree(path, inputs=None, dims=None, atol="1e-4", rtol="1e-4", env=None):
    """kiln validate (level 0 vs 2) on given .npy inputs or random ones; returns (ok, text)."""
    args = ["validate", path, "--atol", atol, "--rtol", rtol]
    for k, v in (inputs or {}).items():
        args += ["--input", f"{k}={npy(os.path.basename(path) + '_' + k, v)}"]
    for k, v in (dims or {}).items():
        args += ["--dim", f"{k}={v}"]
    rc, text = kiln(*args, env=env)
    return rc == 0, text


def fused_attrs(path, op):
    out = os.path.join(TMP, os.path.basename(path) + ".attrs.onnx")
    rc, _ = kiln("optimize", path, out)
    if rc:
        return []
    m = onnx.load(out)
    return [{a.name: helper.get_attribute_value(a) for a in n.attribute if a.name != "original"}
            | {"n_out": len(n.output), "inputs": list(n.input)}
            for n in m.graph.node if n.op_type == op]


# ---------------------------------------------------------------- LayerNorm

def ln_nodes(x, y, pre="ln", square="Pow", gamma="g", beta="b", axes=(-1,), eps_after_sqrt=False,
             opset18=False, keepdims=1, sub_swapped=False, axes2=None):
    """The opset-13 decomposition torch exports for nn.LayerNorm."""
    a2 = axes if axes2 is None else axes2
    def rmean(i, o, ax):
        if opset18:
            return helper.make_node("ReduceMean", [i, pre + "_axes" + ("2" if ax is not axes else "")], [o],
                                    keepdims=keepdims)
        return helper.make_node("ReduceMean", [i], [o], axes=list(ax), keepdims=keepdims)
    n = [rmean(x, pre + "_mean", axes),
         helper.make_node("Sub", [pre + "_mean", x] if sub_swapped else [x, pre + "_mean"], [pre + "_d"])]
    if square == "Pow":
        n.append(helper.make_node("Pow", [pre + "_d", pre + "_two"], [pre + "_sq"]))
    else:
        n.append(helper.make_node("Mul", [pre + "_d", pre + "_d"], [pre + "_sq"]))
    n.append(rmean(pre + "_sq", pre + "_var", a2))
    if eps_after_sqrt:
        n += [helper.make_node("Sqrt", [pre + "_var"], [pre + "_std0"]),
              helper.make_node("Add", [pre + "_std0", pre + "_eps"], [pre + "_std"])]
    else:
        n += [helper.make_node("Add", [pre + "_var", pre + "_eps"], [pre + "_ve"]),
              helper.make_node("Sqrt", [pre + "_ve"], [pre + "_std"])]
    last = pre + "_norm"
    n.append(helper.make_node("Div", [pre + "_d", pre + "_std"], [last if (gamma or beta) else y]))
    if gamma:
        o = pre + "_scaled" if beta else y
        n.append(helper.make_node("Mul", [last, gamma], [o]))
        last = o
    if beta:
        n.append(helper.make_node("Add", [last, beta], [y]))
    return n


def ln_consts(pre="ln", shape=(H,), axes=(-1,), dtype=np.float32, axes2=None):
    c = [const(pre + "_two", np.array(2.0, dtype)), const(pre + "_eps", np.array(1e-5, dtype)),
         const("g", (1 + 0.1 * rng.standard_normal(shape)).astype(dtype)),
         const("b", (0.1 * rng.standard_normal(shape)).astype(dtype)),
         const(pre + "_axes", np.array(axes, np.int64))]
    if axes2 is not None:
        c.append(const(pre + "_axes2", np.array(axes2, np.int64)))
    return c


def ln_model(name, shape=("N", "S", H), out_shape=None, opset=13, dtype=F, extra_nodes=(),
             extra_outputs=(), extra_inits=(), inputs=None, **kw):
    nodes = ln_nodes("x", "y", **kw) + list(extra_nodes)
    inits = ln_consts(axes=kw.get("axes", (-1,)), dtype=np.float64 if dtype == D64 else np.float32,
                      axes2=kw.get("axes2"))
    ins = inputs or [vi("x", list(shape), dtype)]
    m = model(nodes, ins, [vi("y", None, dtype), *extra_outputs], [*inits, *extra_inits], opset=opset)
    return save(m, name)


# 1. The torch export: fused to one LayerNorm, agreeing on several shapes, also far from 0.
p = ln_model("ln_pow")
ops, text = optimized_ops(p)
check(ops == {"LayerNorm": 1}, f"decomposed LayerNorm fuses: {ops} {text}")
at = fused_attrs(p, "LayerNorm")
check(at and abs(at[0]["epsilon"] - 1e-5) < 1e-9 and at[0]["axis"] == -1 and len(at[0]["inputs"]) == 3,
      f"LayerNorm attributes: {at}")
for shape in [(1, 1, H), (2, 7, H), (3, 64, H)]:
    for off in (0.0, 1000.0):
        ok, text = agree(p, {"x": f32(*shape, scale=3.0, offset=off)}, atol="1e-4", rtol="1e-4")
        check(ok, f"LayerNorm agrees on {shape} offset {off}: {text}")
ok, text = agree(p, env={"KILN_FUSION_FAIL": "LayerNorm"}, dims={"N": 2, "S": 5})
check(ok and "forced to fail" in text, "LayerNorm fallback agrees: " + text)

# 2. Variants: Mul(d, d); without gamma / beta; the last two axes; opset 18 axes inputs;
#    a standard LayerNormalization (opset 17).
variants = [
    ("ln_mul", dict(square="Mul"), {"LayerNorm": 1}),
    ("ln_plain", dict(gamma=None, beta=None), {"LayerNorm": 1}),
    ("ln_gamma", dict(beta=None), {"LayerNorm": 1}),
    ("ln_beta", dict(gamma=None), {"LayerNorm": 1}),
    ("ln_opset18", dict(opset18=True, opset=18), {"LayerNorm": 1}),
]
for name, kw, want in variants:
    p = ln_model(name, **kw)
    ops, text = optimized_ops(p)
    check(ops == want, f"{name} fuses: {ops} {text}")
    ok, text = agree(p, {"x": f32(2, 9, H, scale=2.0, offset=5.0)})
    check(ok, f"{name} agrees: {text}")

# Two normalised axes: gamma/beta over [4, H].
nodes = ln_nodes("x", "y", axes=(-2, -1))
inits = [const("ln_two", np.array(2.0, np.float32)), const("ln_eps", np.array(1e-5, np.float32)),
         const("g", f32(4, H)), const("b", f32(4, H))]
p = save(model(nodes, [vi("x", ["N", 4, H])], [vi("y", None)], inits), "ln_two_axes")
ops, _ = optimized_ops(p)
at = fused_attrs(p, "LayerNorm")
check(ops == {"LayerNorm": 1} and at and at[0]["axis"] == -2, f"two-axis LayerNorm fuses: {ops} {at}")
for n in (1, 3):
    ok, text = agree(p, {"x": f32(n, 4, H, offset=2.0)})
    check(ok, f"two-axis LayerNorm agrees (N={n}): {text}")

m = model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-6)],
          [vi("x", ["N", 8, H])], [vi("y", None)], [const("g", f32(H)), const("b", f32(H))], opset=17)
p = save(m, "ln_standard")
ops, _ = optimized_ops(p)
check(ops == {"LayerNorm": 1}, f"standard LayerNormalization becomes the fused kernel: {ops}")
ok, text = agree(p, {"x": f32(3, 8, H, offset=-4.0)})
check(ok, "standard LayerNormalization agrees: " + text)

# 3. Residual Add before it: SkipLayerNorm; the sum read elsewhere becomes output 1.
res = [helper.make_node("Add", ["a", "r"], ["x"])]
ins = [vi("a", ["N", "S", H]), vi("r", ["N", "S", H])]
p = save(model(res + ln_nodes("x", "y"), ins, [vi("y", None)], ln_consts()), "skip_ln")
ops, _ = optimized_ops(p)
check(ops == {"SkipLayerNorm": 1}, f"residual Add + LayerNorm -> SkipLayerNorm: {ops}")
for shape in [(1, 3), (4, 33)]:
    ok, text = agree(p, {"a": f32(*shape, H), "r": f32(*shape, H, offset=3.0)})
    check(ok, f"SkipLayerNorm agrees on {shape}: {text}")
m = model(res + ln_nodes("x", "y") + [helper.make_node("Relu", ["x"], ["z"])], ins,
          [vi("y", None), vi("z", None)], ln_consts())
p = save(m, "skip_ln_sum")
ops, _ = optimized_ops(p)
at = fused_attrs(p, "SkipLayerNorm")
check(ops == {"SkipLayerNorm": 1, "Relu": 1} and at and at[0]["n_out"] == 2,
      f"the residual sum read elsewhere is SkipLayerNorm's second output: {ops} {at}")
ok, text = agree(p, {"a": f32(2, 5, H), "r": f32(2, 5, H)})
check(ok, "SkipLayerNorm with its sum output agrees: " + text)
# The residual is also a graph output, and one addend broadcasts over the rows (a bias).
m = model([helper.make_node("Add", ["a", "bias"], ["x"])] + ln_nodes("x", "y"), [vi("a", ["N", H])],
          [vi("y", None), vi("x", None)], ln_consts() + [const("bias", f32(H))])
p = save(m, "skip_ln_graph_output")
ops, _ = optimized_ops(p)
check(ops == {"SkipLayerNorm": 1}, f"sum as a graph output: {ops}")
ok, text = agree(p, {"a": f32(6, H)})
check(ok, "SkipLayerNorm with a broadcast addend agrees: " + text)
ok, text = agree(p, {"a": f32(6, H)}, env={"KILN_FUSION_FAIL": "SkipLayerNorm"})
check(ok and "forced to fail" in text, "SkipLayerNorm fallback agrees: " + text)

# An addend with one value per row broadcasts inside the kernel; one that broadcasts over part
# of the normalised dims is not absorbed (the LayerNorm alone fuses).
m = model(res + ln_nodes("x", "y"), [vi("a", ["N", "S", H]), vi("r", ["N", "S", 1])], [vi("y", None)], ln_consts())
p = save(m, "skip_ln_row_scalar")
ops, _ = optimized_ops(p)
check(ops == {"SkipLayerNorm": 1}, f"per-row scalar addend absorbed: {ops}")
ok, text = agree(p, {"a": f32(2, 3, H), "r": f32(2, 3, 1, offset=5.0)})
check(ok, "SkipLayerNorm with a per-row scalar addend agrees: " + text)
nodes = res + ln_nodes("x", "y", axes=(-2, -1), gamma=None, beta=None)
m = model(nodes, [vi("a", ["N", 4, H]), vi("r", ["N", 4, 1])], [vi("y", None)], ln_consts()[:2])
p = save(m, "skip_ln_partial")
ops, _ = optimized_ops(p)
check(ops == {"Add": 1, "LayerNorm": 1}, f"partly broadcast addend not absorbed: {ops}")
ok, text = agree(p, {"a": f32(2, 4, H), "r": f32(2, 4, 1)})
check(ok, "partly broadcast addend agrees: " + text)

# 4. Must not fuse.
def no_ln(name, what, p, allow_partial=False):
    ops, text = optimized_ops(p)
    check(ops is not None and ops.get("ReduceMean", 0) == 2 and "LayerNorm" not in ops and
          "SkipLayerNorm" not in ops, f"{what}: not fused: {ops} {text}")
    ok, text = agree(p, dims={"N": 2, "S": 3})
    check(ok, f"{what}: still agrees: {text}")


no_ln("ln_fanout_d", "Sub output read twice",
      ln_model("ln_fanout_d", extra_nodes=[helper.make_node("Abs", ["ln_d"], ["z"])], extra_outputs=[vi("z", None)]))
no_ln("ln_fanout_mean", "mean read twice",
      ln_model("ln_fanout_mean", extra_nodes=[helper.make_node("Neg", ["ln_mean"], ["z"])], extra_outputs=[vi("z", None)]))
no_ln("ln_var_out", "variance is a graph output", ln_model("ln_var_out", extra_outputs=[vi("ln_var", None)]))
no_ln("ln_wrong_axis", "reduction over axis 1", ln_model("ln_wrong_axis", axes=(1,), gamma=None, beta=None))
no_ln("ln_axes_differ", "the two reductions over different axes",
      ln_model("ln_axes_differ", shape=("N", H, H), axes=(-1,), axes2=(-2,), gamma=None, beta=None))
no_ln("ln_eps_after_sqrt", "epsilon added after the Sqrt", ln_model("ln_eps_after_sqrt", eps_after_sqrt=True))
no_ln("ln_sub_swapped", "Sub(mean, x)", ln_model("ln_sub_swapped", sub_swapped=True))
no_ln("ln_keepdims0", "keepdims=0", ln_model("ln_keepdims0", keepdims=0, shape=(H, H), gamma=None, beta=None))
no_ln("ln_double", "double data (float32 kernels only)", ln_model("ln_double", dtype=D64))
m = model(ln_nodes("x", "y"), [vi("x", ["N", "S", H])], [vi("y", None)],
          [const("ln_eps", np.full((1, 1, 1, 1), 1e-5, np.float32))] + ln_consts()[:1] + ln_consts()[2:4])
no_ln("ln_eps_rank4", "an epsilon of higher rank than x", save(m, "ln_eps_rank4"))

# Non-constant gamma / beta: the normalisation fuses, the Mul and Add stay.
m = model(ln_nodes("x", "y", gamma="gi", beta="bi"), [vi("x", ["N", H]), vi("gi", [H]), vi("bi", [H])],
          [vi("y", None)], ln_consts())
p = save(m, "ln_dynamic_gamma")
ops, _ = optimized_ops(p)
# (the elementwise fusion may then take the Mul and Add: either way they are not in the LayerNorm)
check(ops in ({"LayerNorm": 1, "Mul": 1, "Add": 1}, {"LayerNorm": 1, "FusedElementwise": 1}),
      f"non-constant gamma/beta stay outside: {ops}")
ok, text = agree(p, dims={"N": 4})
check(ok, "LayerNorm with dynamic gamma agrees: " + text)
# A gamma that broadcasts the wrong way ([H, 1] against [N, H, H]) stays outside too.
nodes = ln_nodes("x", "y", beta=None)
m = model(nodes, [vi("x", ["N", H, H])], [vi("y", None)], ln_consts()[:2] + [const("g", f32(H, 1))])
p = save(m, "ln_gamma_column")
ops, _ = optimized_ops(p)
check(ops == {"LayerNorm": 1, "Mul": 1}, f"column gamma not absorbed: {ops}")
ok, text = agree(p, dims={"N": 2})
check(ok, "column gamma agrees: " + text)

# ---------------------------------------------------------------- GELU

C = {"sqrt2": np.float32(1.4142135), "isqrt2": np.float32(0.70710678), "one": np.float32(1.0),
     "half": np.float32(0.5), "k": np.float32(0.044715), "c": np.float32(0.7978845608),
     "three": np.float32(3.0)}
GC = [const(k, np.array(v)) for k, v in C.items()]


def gelu_erf(x, y, form="T1", scale="Div", half="half"):
    s = (helper.make_node("Div", [x, "sqrt2"], ["g_s"]) if scale == "Div"
         else helper.make_node("Mul", ["isqrt2", x], ["g_s"]))
    n = [s, helper.make_node("Erf", ["g_s"], ["g_e"]), helper.make_node("Add", ["one", "g_e"], ["g_a"])]
    if form == "T1":   # x * (1 + erf) * 0.5   (torch)
        n += [helper.make_node("Mul", [x, "g_a"], ["g_m"]), helper.make_node("Mul", ["g_m", half], [y])]
    elif form == "T2":  # (0.5 * x) * (1 + erf)
        n += [helper.make_node("Mul", [half, x], ["g_h"]), helper.make_node("Mul", ["g_a", "g_h"], [y])]
    else:               # x * (0.5 * (1 + erf))
        n += [helper.make_node("Mul", ["g_a", half], ["g_m"]), helper.make_node("Mul", [x, "g_m"], [y])]
    return n


def gelu_tanh(x, y, form="T3", cube="Pow"):
    if cube == "Pow":
        n = [helper.make_node("Pow", [x, "three"], ["t_3"])]
    else:
        n = [helper.make_node("Mul", [x, x], ["t_2"]), helper.make_node("Mul", [x, "t_2"], ["t_3"])]
    n += [helper.make_node("Mul", ["k", "t_3"], ["t_k"]), helper.make_node("Add", [x, "t_k"], ["t_in"]),
          helper.make_node("Mul", ["t_in", "c"], ["t_c"]), helper.make_node("Tanh", ["t_c"], ["t_t"]),
          helper.make_node("Add", ["t_t", "one"], ["t_a"])]
    if form == "T3":    # torch: x * (0.5 * (1 + tanh))
        n += [helper.make_node("Mul", ["t_a", "half"], ["t_m"]), helper.make_node("Mul", [x, "t_m"], [y])]
    else:               # GPT-2: 0.5 * x * (1 + tanh)
        n += [helper.make_node("Mul", ["half", x], ["t_h"]), helper.make_node("Mul", ["t_h", "t_a"], [y])]
    return n


def gelu_model(name, nodes, shape=("N", 32), dtype=F, extra_inits=(), inputs=None, outputs=None):
    consts = GC if dtype == F else [const(k, np.array(v, np.float64)) for k, v in C.items()]
    m = model(nodes, inputs or [vi("x", list(shape), dtype)], outputs or [vi("y", None, dtype)],
              [*consts, *extra_inits])
    return save(m, name)


wide = f32(64, 32, scale=4.0)  # into the tails, where 1 + erf / 1 + tanh cancel in the chain
cases = [("gelu_erf_t1", gelu_erf("x", "y"), "none"), ("gelu_erf_t2", gelu_erf("x", "y", "T2"), "none"),
         ("gelu_erf_t3", gelu_erf("x", "y", "T3"), "none"),
         ("gelu_erf_mul", gelu_erf("x", "y", scale="Mul"), "none"),
         ("gelu_tanh_pow", gelu_tanh("x", "y"), "tanh"), ("gelu_tanh_mul", gelu_tanh("x", "y", "T2", "Mul"), "tanh")]
for name, nodes, approx in cases:
    p = gelu_model(name, nodes)
    ops, text = optimized_ops(p)
    at = fused_attrs(p, "Gelu")
    check(ops == {"Gelu": 1} and at and at[0]["approximate"] == approx.encode(), f"{name} fuses: {ops} {at} {text}")
    # accurate against the chain to ~1e-6 (erf / tanh accurate to 1e-6 relative)
    ok, text = agree(p, {"x": wide}, atol="2e-6", rtol="2e-6")
    check(ok, f"{name} agrees to 2e-6: {text}")
    for shape in [(1, 32), (7, 32)]:
        ok, text = agree(p, {"x": f32(*shape)}, atol="1e-6", rtol="1e-6")
        check(ok, f"{name} agrees on {shape}: {text}")
ok, text = agree(gelu_model("gelu_fb", gelu_erf("x", "y")), {"x": wide}, env={"KILN_FUSION_FAIL": "Gelu"})
check(ok and "forced to fail" in text, "Gelu fallback agrees: " + text)

# Bias + GELU -> BiasGelu; MatMul(const W) + bias + GELU -> FusedMatMul(activation Gelu).
bias = const("bias", f32(32))
p = gelu_model("bias_gelu", [helper.make_node("Add", ["x", "bias"], ["xb"])] + gelu_erf("xb", "y"),
               extra_inits=[bias])
ops, _ = optimized_ops(p)
check(ops == {"BiasGelu": 1}, f"bias + GELU -> BiasGelu: {ops}")
ok, text = agree(p, {"x": f32(9, 32, scale=3.0)}, atol="1e-6", rtol="1e-6")
check(ok, "BiasGelu agrees: " + text)
ok, text = agree(p, {"x": f32(9, 32)}, env={"KILN_FUSION_FAIL": "BiasGelu"})
check(ok and "forced to fail" in text, "BiasGelu fallback agrees: " + text)
W = const("W", f32(16, 32, scale=0.5))
for name, act, nodes in [("mm_gelu", "Gelu", gelu_erf("xb", "y")), ("mm_gelu_tanh", "GeluTanh", gelu_tanh("xb", "y"))]:
    p = gelu_model(name, [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["xb"])] + nodes,
                   shape=("N", "S", 16), extra_inits=[bias, W])
    ops, _ = optimized_ops(p)
    at = fused_attrs(p, "FusedMatMul")
    check(ops == {"FusedMatMul": 1} and at and at[0]["activation"] == act.encode(),
          f"{name}: MatMul + bias + GELU -> FusedMatMul: {ops} {at}")
    for shape in [(1, 1, 16), (3, 5, 16)]:
        ok, text = agree(p, {"x": f32(*shape)})
        check(ok, f"{name} agrees on {shape}: {text}")
# Non-constant weights: the MatMul stays, bias + GELU still fuse.
p = gelu_model("mm_dyn_gelu", [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["xb"])]
               + gelu_erf("xb", "y"), inputs=[vi("x", ["N", 16]), vi("w", [16, 32])], extra_inits=[bias])
ops, _ = optimized_ops(p)
check(ops == {"MatMul": 1, "BiasGelu": 1}, f"dynamic weights: MatMul + BiasGelu: {ops}")
ok, text = agree(p, dims={"N": 3})
check(ok, "MatMul + BiasGelu agrees: " + text)

# A Gelu / BiasGelu fused in an earlier round still takes in the bias Add and the MatMul.
for name, nodes, ins in [
        ("kiln_gelu_refuse", [helper.make_node("Add", ["mm", "bias"], ["xb"]),
                              helper.make_node("Gelu", ["xb"], ["y"], domain="ai.kiln", approximate="tanh")], ["mm", "bias"]),
        ("kiln_bias_gelu_refuse", [helper.make_node("BiasGelu", ["mm", "bias"], ["y"], domain="ai.kiln")], [])]:
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["mm"])] + nodes, "g", [vi("x", ["N", 16])],
                          [vi("y", None)], [bias, W])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.kiln", 1)])
    m.ir_version = 8
    p = save(m, name)
    ops, text = optimized_ops(p)
    at = fused_attrs(p, "FusedMatMul")
    check(ops == {"FusedMatMul": 1} and at and at[0]["activation"] in (b"Gelu", b"GeluTanh"),
          f"{name}: absorbed into FusedMatMul: {ops} {at} {text}")
    ok, text = agree(p, dims={"N": 5})
    check(ok, f"{name} agrees: {text}")

# Must not fuse.
def no_gelu(name, what, p, want_gone=("Gelu", "BiasGelu")):
    ops, text = optimized_ops(p)
    check(ops is not None and not any(k in ops for k in want_gone), f"{what}: not fused: {ops} {text}")
    ok, text = agree(p, dims={"N": 3})
    check(ok, f"{what}: still agrees: {text}")


no_gelu("gelu_fanout", "Erf output read twice",
        gelu_model("gelu_fanout", gelu_erf("x", "y"), outputs=[vi("y", None), vi("g_e", None)]))
no_gelu("gelu_fanout_half", "Mul(x, 0.5) read twice",
        gelu_model("gelu_fanout_half", gelu_erf("x", "y", "T2") + [helper.make_node("Neg", ["g_h"], ["z"])],
                   outputs=[vi("y", None), vi("z", None)]))
bad = [const("sqrt2", np.array(1.5, np.float32))] + [c for c in GC if c.name != "sqrt2"]
no_gelu("gelu_bad_scale", "Div by 1.5", save(model(gelu_erf("x", "y"), [vi("x", ["N", 32])], [vi("y", None)], bad), "gelu_bad_scale"))
no_gelu("gelu_bad_half", "Mul by 0.25 at the end",
        gelu_model("gelu_bad_half", gelu_erf("x", "y", half="q"), extra_inits=[const("q", np.array(0.25, np.float32))]))
no_gelu("gelu_other_x", "the outer Mul reads another tensor",
        gelu_model("gelu_other_x", gelu_erf("x", "g_m0")[:3] + [helper.make_node("Mul", ["x2", "g_a"], ["g_m"]),
                   helper.make_node("Mul", ["g_m", "half"], ["y"])], inputs=[vi("x", ["N", 32]), vi("x2", ["N", 32])]))
no_gelu("gelu_double", "double data", gelu_model("gelu_double", gelu_erf("x", "y"), dtype=D64))
no_gelu("gelu_half_rank3", "a 0.5 of higher rank than x",
        save(model(gelu_erf("x", "y"), [vi("x", ["N", 32])], [vi("y", None)],
                   [const("half", np.full((1, 1, 1), 0.5, np.float32))] + [c for c in GC if c.name != "half"]),
             "gelu_half_rank3"))
no_gelu("gelu_tanh_bad_k", "tanh form with 0.04 instead of 0.044715",
        save(model(gelu_tanh("x", "y"), [vi("x", ["N", 32])], [vi("y", None)],
                   [const("k", np.array(0.04, np.float32))] + [c for c in GC if c.name != "k"]), "gelu_tanh_bad_k"))
# A non-constant bias: GELU fuses, the Add stays.
p = gelu_model("gelu_dyn_bias", [helper.make_node("Add", ["x", "bi"], ["xb"])] + gelu_erf("xb", "y"),
               inputs=[vi("x", ["N", 32]), vi("bi", [32])])
ops, _ = optimized_ops(p)
check(ops == {"Add": 1, "Gelu": 1}, f"non-constant bias stays outside: {ops}")

# ---------------------------------------------------------------- Embedding

V, E, S = 50, 24, 12
word, ptab = const("word", f32(V, E)), const("ptab", f32(S, E))
ln_e = [const("ln_two", np.array(2.0, np.float32)), const("ln_eps", np.array(1e-5, np.float32)),
        const("g", f32(E)), const("b", f32(E))]
I64 = TensorProto.INT64


def ids_of(*shape, hi=V):
    return rng.integers(0, hi, size=shape).astype(np.int64)


# Gather + constant position rows + decomposed LayerNorm (a folded pos[:, :S] slice).
nodes = [helper.make_node("Gather", ["word", "ids"], ["we"]), helper.make_node("Add", ["we", "pos"], ["x"])]
p = save(model(nodes + ln_nodes("x", "y"), [vi("ids", ["B", S], I64)], [vi("y", None)],
               [word, const("pos", f32(1, S, E))] + ln_e), "emb_const_ln")
ops, text = optimized_ops(p)
check(ops == {"FusedEmbedding": 1}, f"Gather + pos + LayerNorm -> FusedEmbedding: {ops} {text}")
for b in (1, 3):
    ok, text = agree(p, {"ids": ids_of(b, S)})
    check(ok, f"FusedEmbedding agrees (B={b}): {text}")
ok, text = agree(p, {"ids": ids_of(2, S)}, env={"KILN_FUSION_FAIL": "FusedEmbedding"})
check(ok and "forced to fail" in text, "FusedEmbedding fallback agrees: " + text)

# Pre-norm: the sum also feeds a residual -> second output. Same with fuse_layernorm disabled.
m = model(nodes + ln_nodes("x", "y") + [helper.make_node("Add", ["x", "y"], ["z"])], [vi("ids", ["B", S], I64)],
          [vi("z", None)], [word, const("pos", f32(S, E))] + ln_e)
p = save(m, "emb_prenorm")
for extra in ((), ("--disable", "fuse_layernorm")):
    ops, text = optimized_ops(p, *extra)
    at = fused_attrs(p, "FusedEmbedding") if not extra else None
    check(ops == {"FusedEmbedding": 1, "Add": 1} and (extra or (at and at[0]["n_out"] == 2)),
          f"pre-norm embedding {extra}: {ops} {at} {text}")
ok, text = agree(p, {"ids": ids_of(2, S)})
check(ok, "pre-norm FusedEmbedding agrees: " + text)

# Position rows from a Gather by position ids, then Relu, no LayerNorm; int32 ids.
nodes = [helper.make_node("Gather", ["word", "ids"], ["we"]), helper.make_node("Gather", ["ptab", "pids"], ["pe"]),
         helper.make_node("Add", ["pe", "we"], ["x"]), helper.make_node("Relu", ["x"], ["y"])]
p = save(model(nodes, [vi("ids", ["B", "T"], TensorProto.INT32), vi("pids", [1, "T"], I64)], [vi("y", None)],
               [word, ptab]), "emb_gather_relu")
ops, _ = optimized_ops(p)
at = fused_attrs(p, "FusedEmbedding")
check(ops == {"FusedEmbedding": 1} and at and at[0].get("relu") == 1, f"Gather-position + Relu: {ops} {at}")
for b, t in [(1, 1), (3, 7), (2, S)]:
    ok, text = agree(p, {"ids": ids_of(b, t).astype(np.int32), "pids": np.arange(t, dtype=np.int64)[None]})
    check(ok, f"Gather-position embedding agrees ({b}, {t}): {text}")

# Dynamic pos[:, :T] slice (T = Shape(ids)[1]) + standard LayerNormalization.
nodes = [helper.make_node("Gather", ["word", "ids"], ["we"]), helper.make_node("Shape", ["ids"], ["sh"]),
         helper.make_node("Gather", ["sh", "one_i"], ["t"], axis=0),
         helper.make_node("Slice", ["ptab3", "zero_i", "t", "one_i"], ["pe"]),
         helper.make_node("Add", ["we", "pe"], ["x"]),
         helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"])]
inits = [word, const("ptab3", f32(1, S, E)), const("zero_i", np.array([0], np.int64)),
         const("one_i", np.array([1], np.int64)), const("g", f32(E)), const("b", f32(E))]
p = save(model(nodes, [vi("ids", ["B", "T"], I64)], [vi("y", None)], inits, opset=17), "emb_slice_ln")
ops, text = optimized_ops(p)
at = fused_attrs(p, "FusedEmbedding")
check(ops is not None and ops.get("FusedEmbedding") == 1 and "Slice" not in ops and "Add" not in ops and
      "LayerNormalization" not in ops and at and list(at[0]["pos_axes"]) == [1],
      f"sliced position table + LayerNormalization: {ops} {at} {text}")
for b, t in [(1, 1), (2, 5), (3, S)]:
    ok, text = agree(p, {"ids": ids_of(b, t)})
    check(ok, f"sliced-position embedding agrees ({b}, {t}): {text}")

# Must not fuse.
def no_emb(name, what, p, dims=None, inputs=None):
    ops, text = optimized_ops(p)
    check(ops is not None and "FusedEmbedding" not in ops, f"{what}: not fused: {ops} {text}")
    ok, text = agree(p, inputs=inputs, dims=dims)
    check(ok, f"{what}: still agrees: {text}")


base = [helper.make_node("Gather", ["word", "ids"], ["we"]), helper.make_node("Add", ["we", "pos"], ["y"])]
ids_in = {"ids": ids_of(2, S)}
no_emb("emb_fanout", "Gather output read twice",
       save(model(base + [helper.make_node("Neg", ["we"], ["z"])], [vi("ids", ["B", S], I64)],
                  [vi("y", None), vi("z", None)], [word, const("pos", f32(S, E))]), "emb_fanout"), inputs=ids_in)
no_emb("emb_dyn_table", "non-constant word table",
       save(model(base, [vi("ids", ["B", S], I64), vi("word", [V, E])], [vi("y", None)], [const("pos", f32(S, E))]),
            "emb_dyn_table"), inputs=ids_in | {"word": f32(V, E)})
no_emb("emb_axis1", "Gather on axis 1",
       save(model([helper.make_node("Gather", ["word", "ids"], ["we"], axis=1), helper.make_node("Add", ["we", "pos"], ["y"])],
                  [vi("ids", ["B", S], I64)], [vi("y", None)], [const("word", f32(E, V)), const("pos", f32(1, 1, S))]),
            "emb_axis1"), inputs={"ids": ids_of(2, S, hi=V)})
no_emb("emb_pos_column", "position term with last dim 1",
       save(model(base, [vi("ids", ["B", S], I64)], [vi("y", None)], [word, const("pos", f32(S, 1))]), "emb_pos_column"),
       inputs=ids_in)
no_emb("emb_double", "double tables",
       save(model(base, [vi("ids", ["B", S], I64)], [vi("y", None, D64)],
                  [const("word", rng.standard_normal((V, E))), const("pos", rng.standard_normal((S, E)))]), "emb_double"),
       inputs=ids_in)
nodes = [helper.make_node("Gather", ["word", "ids"], ["we"]), helper.make_node("Shape", ["ids"], ["sh"]),
         helper.make_node("Gather", ["sh", "one_i"], ["t"], axis=0),
         helper.make_node("Add", ["t", "one_i"], ["t1"]),
         helper.make_node("Slice", ["ptab3", "one_i", "t1", "one_i"], ["pe"]),
         helper.make_node("Add", ["we", "pe"], ["y"])]
no_emb("emb_slice_from_1", "a slice that does not start at 0",
       save(model(nodes, [vi("ids", ["B", "T"], I64)], [vi("y", None)], inits[:4], opset=17), "emb_slice_from_1"),
       inputs={"ids": ids_of(2, 5)})

finish("test_fuse_norm_gelu_embedding")
