"""Attention reading Q, K, V through Slice/Reshape views (x_slice, x_shape) and writing its
output through out_shape: the fusion of PyTorch MultiheadAttention's packed QKV projection
(Slice of the last axis, Reshape to (S, B*H, D), Transposes) and head merge Reshape; the
kernel's strided views and its copy when strides cannot express a view (batch > 1); results
identical at 1 and 2 threads; a linear Gemm (constant weights, bias vector) as FusedGemm."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(0)


def i64(name, vals):
    return const(name, np.array(vals, np.int64))


def mha(s, e, h, step=1, dyn_start=False, dyn_shape=False):
    """x (S, batch, E) -> packed QKV MatMul + bias -> 3 Slices of the last axis -> Reshape
    (S, -1, D) -> Transposes -> attention -> Transpose -> Reshape (-1, E) -> MatMul."""
    d = e // h
    inits = [const("w_in", (rng.standard_normal((e, 3 * e)) / np.sqrt(e)).astype(np.float32)),
             const("b_in", (0.1 * rng.standard_normal(3 * e)).astype(np.float32)),
             const("w_out", (rng.standard_normal((e, e)) / np.sqrt(e)).astype(np.float32)),
             i64("ax", [-1]), i64("split", [s, -1, d]), i64("merge", [-1, e]), i64("st", [step]),
             const("scale", np.array(np.sqrt(d), np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w_in"], ["qkv0"]),
             helper.make_node("Add", ["qkv0", "b_in"], ["qkv"])]
    inputs = [vi("x", [s, "batch", e])]
    for i, t in enumerate("qkv"):
        inits += [i64(t + "s", [i * e]), i64(t + "e", [(i + 1) * e])]
        start = t + "s"
        if dyn_start and t == "k":  # a start computed at run time: not a constant Slice
            inputs.append(vi("kstart", [1], TensorProto.INT64))
            start = "kstart"
        sl = [ "qkv", start, t + "e", "ax"] + (["st"] if step != 1 else [])
        nodes.append(helper.make_node("Slice", sl, [t + "sl"]))
        shape = "split"
        if dyn_shape and t == "v":  # a target computed at run time stays a Reshape
            inputs.append(vi("vshape", [3], TensorProto.INT64))
            shape = "vshape"
        nodes.append(helper.make_node("Reshape", [t + "sl", shape], [t + "r"]))
    nodes += [helper.make_node("Transpose", ["qr"], ["qt"], perm=[1, 0, 2]),
              helper.make_node("Transpose", ["kr"], ["kt"], perm=[1, 2, 0]),
              helper.make_node("Transpose", ["vr"], ["vt"], perm=[1, 0, 2]),
              helper.make_node("MatMul", ["qt", "kt"], ["s0"]),
              helper.make_node("Div", ["s0", "scale"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["pr"], axis=-1),
              helper.make_node("MatMul", ["pr", "vt"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[1, 0, 2]),
              helper.make_node("Reshape", ["ot", "merge"], ["om"]),
              helper.make_node("MatMul", ["om", "w_out"], ["y"])]
    return model(nodes, inputs, [vi("y", None)], inits)


def run_out(path, *args):
    d = os.path.join(TMP, os.path.basename(path) + ".out" + "_".join(a.replace("=", "") for a in args))
    os.makedirs(d, exist_ok=True)
    rc, text = kiln("run", path, "--quiet", "--output-dir", d, *args)
    if rc:
        return None, text
    return open(os.path.join(d, "output_0.pb"), "rb").read(), text


# ---- the packed QKV form: Slices, head split and merge Reshapes all absorbed ----
for (s, e, h) in [(128, 64, 4), (37, 48, 3)]:
    p = save(mha(s, e, h), f"mha_{s}_{e}_{h}")
    ops, text = optimized_ops(p)
    check(ops is not None and ops.get("Attention") == 1 and "Slice" not in ops and "Reshape" not in ops
          and "Transpose" not in ops, f"mha_{s}: Slices and Reshapes absorbed: {ops}")
    # batch 1: pure strided views; batch 3: the head split merges batch and heads, which
    # strides cannot express, so the kernel copies that view (no fallback to the chain)
    for b in ("1", "3"):
        ok, text = validate(p, "--dim", f"batch={b}")
        check(ok, f"mha_{s} batch {b} validates: {text}")
        outs = [run_out(p, "--dim", f"batch={b}", "--threads", t) for t in ("1", "2")]
        check(outs[0][0] is not None and outs[0][0] == outs[1][0],
              f"mha_{s} batch {b}: identical at 1 and 2 threads {outs[0][1]} {outs[1][1]}")
        rc, text = kiln("run", p, "--dim", f"batch={b}")
        check(rc == 0 and "chain" not in text, f"mha_{s} batch {b} runs fused: {text}")

# ---- what stays: a Slice with step 2, a Slice with a run-time start, a computed target ----
p = save(mha(16, 32, 2, step=2), "mha_step2")
ops, _ = optimized_ops(p)
check(ops is not None and ops.get("Attention") == 1 and ops.get("Slice") == 3,
      f"mha_step2: Slices with step 2 stay: {ops}")
p = save(mha(16, 32, 2, dyn_start=True), "mha_dyn_start")
ops, _ = optimized_ops(p)
check(ops is not None and ops.get("Attention") == 1 and ops.get("Slice") == 1,
      f"mha_dyn_start: the run-time Slice stays: {ops}")
p = save(mha(16, 32, 2, dyn_shape=True), "mha_dyn_shape")
ops, _ = optimized_ops(p)
check(ops is not None and ops.get("Attention") == 1 and ops.get("Reshape") == 1 and ops.get("Slice") == 1,
      f"mha_dyn_shape: the computed Reshape and its Slice stay: {ops}")


# ---- the kernel's views directly, against numpy, odd sizes ----
def ref_sdpa(q, k, v, scale):
    sc = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale
    ex = np.exp(sc - sc.max(-1, keepdims=True))
    return (ex / ex.sum(-1, keepdims=True)) @ v.astype(np.float64)


def run_feeds(path, feeds, *args, env=None):
    d = os.path.join(TMP, os.path.basename(path) + ".io" + "_".join(args) + str(env))
    os.makedirs(d, exist_ok=True)
    cmd = ["run", path, "--quiet", "--output-dir", d, *args]
    for k, a in feeds.items():
        np.save(os.path.join(d, k + ".npy"), a)
        cmd += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    rc, text = kiln(*cmd, env=env)
    if rc:
        return None, None, text
    raw = open(os.path.join(d, "output_0.pb"), "rb").read()
    return numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "output_0.pb"))), raw, text


# raw (S, B, 3E) -> views (S, B*H, D) per q/k/v; B = 1 (strided view) and B = 2 (copied view);
# S = 45 (not a multiple of the query tile, nor of the 8 x 8 K transpose), D = 20 (not a
# multiple of the vector padding: V packed), D = 32 and 64 (V read in place), S = 130 (a
# second key block of 2 keys); out_shape (-1, E) from (S, B*H, D) after out_perm (1, 0, 2)
for (b, s, h, d) in [(1, 45, 3, 20), (2, 45, 3, 20), (1, 45, 2, 32), (2, 45, 2, 32), (1, 130, 2, 64)]:
    e = h * d
    att = helper.make_node("Attention", ["qkv", "qkv", "qkv"], ["y"], domain=K, scale=0.3,
                           q_slice=[-1, 0, e], k_slice=[2, e, 2 * e], v_slice=[-1, 2 * e, 10 ** 9],
                           q_shape=[s, -1, d], k_shape=[0, -1, d], v_shape=[s, -1, d],
                           q_perm=[1, 0, 2], k_perm=[1, 2, 0], v_perm=[1, 0, 2], out_perm=[1, 0, 2],
                           out_shape=[-1, e])
    p = save(kmodel([att], [vi("qkv", [s, b, 3 * e])], [vi("y", None)]), f"views_b{b}_{s}_{d}")
    x = rng.standard_normal((s, b, 3 * e)).astype(np.float32)
    q, k, v = (x[..., i * e:(i + 1) * e].reshape(s, b * h, d).transpose(1, 0, 2) for i in range(3))
    want = ref_sdpa(q, k, v, 0.3).transpose(1, 0, 2).reshape(-1, e)
    outs = []
    for t in ("1", "2"):
        y, raw, text = run_feeds(p, {"qkv": x}, "--threads", t)
        err = np.abs(y - want).max() if y is not None else None
        check(y is not None and y.shape == want.shape and err < 1e-4,
              f"views_b{b}_{s}_{d} threads {t}: shape {None if y is None else y.shape}, max err {err} {text}")
        outs.append(raw)
    check(outs[0] is not None and outs[0] == outs[1], f"views_b{b}_{s}_{d}: identical at 1 and 2 threads")
    # every instance of the tiles: AVX2, portable vectors (and the AVX-512 one above)
    for env in ({"KILN_ISA": "avx2"}, {"KILN_ISA": "scalar"}):
        y, _, text = run_feeds(p, {"qkv": x}, "--threads", "2", env=env)
        check(y is not None and np.abs(y - want).max() < 1e-4, f"views_b{b}_{s}_{d} {env}: {text}")

# additive masks that end the keys early: causal (each query tile stops after its last query),
# one where the first row of every tile sees every key (the tile must not stop early), and a
# random band; Sk = 300 (three key blocks, the last partial)
def ref_masked(q, k, v, scale, mask):
    sc = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale + mask
    ex = np.exp(sc - sc.max(-1, keepdims=True))
    return (ex / ex.sum(-1, keepdims=True)) @ v.astype(np.float64)


n = 300
causal = np.triu(np.full((n, n), -np.inf, np.float32), 1)
first_rows = causal.copy()
first_rows[::8, :] = 0.0
band = np.where(np.abs(np.arange(n)[:, None] - np.arange(n)[None, :] - 20) < 30, 0.0, -np.inf).astype(np.float32)
band[band == 0] = rng.standard_normal(int((band == 0).sum())).astype(np.float32)
for name, mask in (("causal", causal), ("first_rows", first_rows), ("band", band)):
    att = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], domain=K, scale=0.2)
    p = save(kmodel([att], [vi("q", [2, n, 32]), vi("k", [2, 32, n]), vi("v", [2, n, 32]), vi("mask", [n, n])],
                    [vi("y", None)]), f"mask_{name}")
    feeds = {"q": rng.standard_normal((2, n, 32)).astype(np.float32),
             "k": rng.standard_normal((2, 32, n)).astype(np.float32),
             "v": rng.standard_normal((2, n, 32)).astype(np.float32), "mask": mask}
    want = ref_masked(feeds["q"], feeds["k"].transpose(0, 2, 1), feeds["v"], 0.2, mask)
    with np.errstate(invalid="ignore"):
        ok_rows = np.isfinite(want).all(-1)
    raws = []
    for t in ("1", "2"):
        y, raw, text = run_feeds(p, feeds, "--threads", t)
        err = np.abs(y - want)[ok_rows].max() if y is not None else None
        check(y is not None and err < 1e-4 and np.isnan(y[~ok_rows]).all(),
              f"mask_{name} threads {t}: max err {err} {text}")
        raws.append(raw)
    check(raws[0] is not None and raws[0] == raws[1], f"mask_{name}: identical at 1 and 2 threads")

# one session over several batch sizes: the node's cached work buffers change geometry
att = helper.make_node("Attention", ["q", "k", "v"], ["y"], domain=K, scale=0.25)
p = save(kmodel([att], [vi("q", ["b", 2, 33, 16]), vi("k", ["b", 2, 16, 40]), vi("v", ["b", 2, 40, 24])],
                [vi("y", None)]), "views_batches")
for t in ("1", "2"):
    rc, text = kiln("bench", p, "--batch", "1,3,2,1", "--warmup", "1", "--repeat", "3", "--quiet", "--threads", t)
    check(rc == 0, f"views_batches: bench over batch sizes 1,3,2,1 at {t} threads: {text}")

# a malformed slice fails the kernel and the chain-less node reports an error, not a crash
bad = helper.make_node("Attention", ["x", "x", "x"], ["y"], domain=K, q_slice=[5, 0, 1])
p = save(kmodel([bad], [vi("x", [4, 8])], [vi("y", None)]), "views_bad")
rc, text = kiln("run", p)
check(rc != 0, f"views_bad: refused: {text}")

# ---- a linear Gemm: FusedGemm with packed weights and the bias in the epilogue ----
def gemm_model(trans_b, bias=True, beta=1.0, const_b=True, alpha=1.0):
    w = (rng.standard_normal((24, 40) if trans_b else (40, 24)) / 6).astype(np.float32)
    inits = [const("c", (0.1 * rng.standard_normal(24)).astype(np.float32))] if bias else []
    inputs = [vi("a", [13, 40])]
    if const_b:
        inits.append(const("w", w))
    else:
        inputs.append(vi("w", list(w.shape)))
    node = helper.make_node("Gemm", ["a", "w"] + (["c"] if bias else []), ["y"], transB=trans_b, beta=beta,
                            alpha=alpha)
    return model([node], inputs, [vi("y", [13, 24])], inits)


for tb in (0, 1):
    for bias in (True, False):
        p = save(gemm_model(tb, bias, alpha=0.5 if tb else 1.0), f"gemm_lin_{tb}_{bias}")
        ops, text = optimized_ops(p)
        check(ops == {"FusedGemm": 1}, f"gemm_lin transB={tb} bias={bias}: {ops}")
        ok, text = validate(p)
        check(ok, f"gemm_lin transB={tb} bias={bias} validates: {text}")
p = save(gemm_model(1, beta=2.0), "gemm_beta2")
ops, _ = optimized_ops(p)
check(ops == {"Gemm": 1}, f"Gemm with beta 2 stays: {ops}")
p = save(gemm_model(1, const_b=False), "gemm_var_b")
ops, _ = optimized_ops(p)
check(ops == {"Gemm": 1}, f"Gemm with run-time weights stays: {ops}")

finish("test_attention_views")
