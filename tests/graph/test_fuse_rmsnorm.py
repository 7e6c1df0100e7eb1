"""RMSNorm fusion (src/opt/fuse_rmsnorm.c): the decomposed root-mean-square normalisation of
older LLaMA-style exports becomes ai.kiln::RMSNorm, whose kernel is RMSNormalization's; the
result matches a numpy reference at levels 0 and 2. Chains that are not an RMSNorm (an
intermediate read elsewhere, a LayerNorm) are left alone or go to the LayerNorm fusion."""
import os

from kilntest import (TMP, check, const, finish, helper, kiln, model, np, numpy_helper, onnx,
                      optimized_ops, save, vi)

rng = np.random.default_rng(7)


def rms_ref(x, gamma, k, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt(np.mean(x64 * x64, axis=axes, keepdims=True) + eps)
    return (y * gamma if gamma is not None else y).astype(np.float32)


def chain(form, k, gamma, opset, extra_out=False):
    """x -> square -> ReduceMean(last k) -> Add eps -> Sqrt -> Div | Reciprocal+Mul -> [Mul gamma]."""
    axes = list(range(-k, 0))
    inits = [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-6, np.float32))]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"])]
    if opset >= 18:
        inits.append(const("axes", np.array(axes, np.int64)))
        nodes.append(helper.make_node("ReduceMean", ["sq", "axes"], ["ms"]))
    else:
        nodes.append(helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes))
    nodes += [helper.make_node("Add", ["ms", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"])]
    if form == "div":
        nodes.append(helper.make_node("Div", ["x", "s"], ["n"]))
    else:
        nodes += [helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Mul", ["x", "r"], ["n"])]
    out = "n"
    if gamma is not None:
        inits.append(const("gamma", gamma))
        nodes.append(helper.make_node("Mul", ["gamma", "n"], ["y"]))  # gamma first: either side works
        out = "y"
    outs = [vi(out, None)] + ([vi("ms", None)] if extra_out else [])
    return model(nodes, [vi("x", [2, 5, 3, 16])], outs, inits, opset=opset)


def run(path, level, x):
    xin = os.path.join(TMP, "x.npy")
    np.save(xin, x)
    outd = path + f".out{level}"
    rc, text = kiln("run", path, "--quiet", "--level", str(level), "--input", f"x={xin}", "--output-dir", outd)
    check(rc == 0, f"kiln run {path} level {level}: {text[-300:]}")
    if rc:
        return None
    t = onnx.TensorProto()
    with open(os.path.join(outd, "output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


x = (rng.standard_normal((2, 5, 3, 16)) * 3 + 0.5).astype(np.float32)
for form in ("div", "recip"):
    for k in (1, 2):
        for with_gamma in (True, False):
            for opset in (17, 18):
                gshape = (3, 16)[-k:] if k == 2 else (16,)
                gamma = rng.standard_normal(gshape).astype(np.float32) if with_gamma else None
                name = f"rms_{form}_k{k}_{'gamma' if with_gamma else 'plain'}_op{opset}"
                p = save(chain(form, k, gamma, opset), name)
                ops, text = optimized_ops(p)
                check(ops == {"RMSNorm": 1}, f"{name}: one RMSNorm after optimize, got {ops}: {text[-200:]}")
                want = rms_ref(x, gamma, k, 1e-6)
                for level in (0, 2):
                    got = run(p, level, x)
                    if got is not None:
                        check(got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6),
                              f"{name} level {level}: max diff {np.abs(got - want).max()}")

# the mean square read elsewhere: no fusion (the chain stays, and so do its values)
p = save(chain("div", 1, None, 17, extra_out=True), "rms_shared_intermediate")
ops, text = optimized_ops(p)
check(ops is not None and "RMSNorm" not in ops and ops.get("ReduceMean") == 1, f"shared intermediate: not fused, {ops}")

# a LayerNorm (x - mean first) is the LayerNorm fusion's, not RMSNorm's
inits = [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-5, np.float32))]
nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), helper.make_node("Sub", ["x", "m"], ["d"]),
         helper.make_node("Pow", ["d", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["v"], axes=[-1]),
         helper.make_node("Add", ["v", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"]),
         helper.make_node("Div", ["d", "s"], ["y"])]
p = save(model(nodes, [vi("x", [2, 5, 3, 16])], [vi("y", None)], inits, opset=17), "layernorm_not_rms")
ops, text = optimized_ops(p)
check(ops == {"LayerNorm": 1}, f"a LayerNorm chain becomes LayerNorm, not RMSNorm: {ops}")
finish("test_fuse_rmsnorm")
