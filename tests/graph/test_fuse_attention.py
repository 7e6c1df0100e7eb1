"""Attention fusion: where it must apply (with and without head split/merge and projections,
masks of several shapes, causal Where, scales on Q/K/scores), where it must not, and fused vs
original on random inputs of several shapes."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(0)
F, D64 = TensorProto.FLOAT, TensorProto.DOUBLE


def sdpa(q, k, v, out="y", kt=True, scale=("Div", 8.0), mask=None, where=None, axis=-1,
         prefix="", k_perm=None):
    """Nodes for softmax(scale(Q K^T) [+mask] [where]) V. kt: K comes as a Transpose of K
    (perm k_perm, default swapping the last two axes of a rank-4 K); else K is pre-transposed."""
    p = prefix
    nodes, inits = [], []
    kin = k
    if kt:
        nodes.append(helper.make_node("Transpose", [k], [p + "kt"], perm=k_perm or [0, 1, 3, 2]))
        kin = p + "kt"
    nodes.append(helper.make_node("MatMul", [q, kin], [p + "s0"]))
    s = p + "s0"
    if scale:
        op, val = scale
        inits.append(const(p + "scale", np.array(val, np.float32)))
        nodes.append(helper.make_node(op, [s, p + "scale"], [p + "s1"]))
        s = p + "s1"
    if where is not None:
        cond, fill, keep_true = where
        inits.append(const(p + "fill", np.array(fill, np.float32)))
        ins = [cond, s, p + "fill"] if keep_true else [cond, p + "fill", s]
        nodes.append(helper.make_node("Where", ins, [p + "s2"]))
        s = p + "s2"
    if mask is not None:
        nodes.append(helper.make_node("Add", [s, mask], [p + "s3"]))
        s = p + "s3"
    nodes.append(helper.make_node("Softmax", [s], [p + "pr"], axis=axis))
    nodes.append(helper.make_node("MatMul", [p + "pr", v], [out]))
    return nodes, inits


def qkv(b, h, s, d, sk=None):
    sk = s if sk is None else sk
    return [vi("q", [b, h, s, d]), vi("k", [b, h, sk, d]), vi("v", [b, h, sk, d])]


def fused(path):
    ops, text = optimized_ops(path)
    return ops, text


def expect(name, m, want, *extra, val=True):
    p = save(m, name)
    ops, text = fused(p)
    check(ops == want, f"{name}: expected {want}, got {ops} {text if ops is None else ''}")
    if val:
        ok, text = validate(p, *extra)
        check(ok, f"{name} validates: {text}")
    return p


# ---- must apply: rank 4, several shapes, K^T as a Transpose of K ----
for s in (1, 7, 128, 256):
    for d in (16, 64):
        nodes, inits = sdpa("q", "k", "v", scale=("Div", float(np.sqrt(d))))
        m = model(nodes, qkv(2, 3, s, d), [vi("y", [2, 3, s, d])], inits)
        expect(f"attn4_s{s}_d{d}", m, {"Attention": 1})

# Cross attention (Sq != Sk), Dv != D, scale as Mul.
nodes, inits = sdpa("q", "k", "v", scale=("Mul", 0.2))
m = model(nodes, [vi("q", [1, 2, 5, 16]), vi("k", [1, 2, 70, 16]), vi("v", [1, 2, 70, 24])],
          [vi("y", [1, 2, 5, 24])], inits)
expect("attn_cross", m, {"Attention": 1})

# ---- rank 3 (B*H, S, D) with K already transposed (B*H, D, S) ----
for s in (1, 7, 128):
    nodes, inits = sdpa("q", "kt_in", "v", kt=False, scale=("Mul", 0.25))
    m = model(nodes, [vi("q", [6, s, 16]), vi("kt_in", [6, 16, s]), vi("v", [6, s, 16])],
              [vi("y", [6, s, 16])], inits)
    expect(f"attn3_pret_s{s}", m, {"Attention": 1})

# No scale at all; rank 2 (single head, no batch).
nodes, inits = sdpa("q", "k", "v", scale=None, k_perm=[1, 0])
m = model(nodes, [vi("q", [9, 8]), vi("k", [9, 8]), vi("v", [9, 8])], [vi("y", [9, 8])], inits)
expect("attn2_noscale", m, {"Attention": 1})

# ---- masks: (Sq, Sk), (B, 1, 1, Sk), (Sk,), causal constant, Where causal ----
for name, shape in [("mask_ss", [37, 37]), ("mask_b11s", [2, 1, 1, 37]), ("mask_s", [37]),
                    ("mask_bh_ss", [2, 3, 37, 37])]:
    nodes, inits = sdpa("q", "k", "v", mask="mask")
    m = model(nodes, qkv(2, 3, 37, 16) + [vi("mask", shape)], [vi("y", [2, 3, 37, 16])], inits)
    expect(f"attn_{name}", m, {"Attention": 1})

for s in (7, 256):
    causal = np.triu(np.full((s, s), -np.inf, np.float32), 1)
    nodes, inits = sdpa("q", "k", "v", mask="causal")
    m = model(nodes, qkv(1, 2, s, 64), [vi("y", [1, 2, s, 64])], inits + [const("causal", causal)])
    expect(f"attn_causal_add_s{s}", m, {"Attention": 1})
    tril = np.tril(np.ones((s, s), bool))
    nodes, inits = sdpa("q", "k", "v", where=("tril", -np.inf, True))
    m = model(nodes, qkv(1, 2, s, 64), [vi("y", [1, 2, s, 64])], inits + [const("tril", tril)])
    expect(f"attn_causal_where_s{s}", m, {"Attention": 1})
    # the inverse condition (keep where false) with a finite fill, plus an additive mask after it
    nodes, inits = sdpa("q", "k", "v", where=("triu", -1e4, False), mask="pad")
    m = model(nodes, qkv(1, 2, s, 16) + [vi("pad", [1, 1, 1, s])], [vi("y", [1, 2, s, 16])],
              inits + [const("triu", ~tril)])
    expect(f"attn_where_add_s{s}", m, {"Attention": 1})

# Scale on Q and on K (sqrt scaling), none on the scores.
ns = [helper.make_node("Mul", ["q", "c"], ["qs"]),
      helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
      helper.make_node("Mul", ["kt", "c"], ["kts"]),
      helper.make_node("MatMul", ["qs", "kts"], ["s"]),
      helper.make_node("Softmax", ["s"], ["p"], axis=3),
      helper.make_node("MatMul", ["p", "v"], ["y"])]
m = model(ns, qkv(1, 4, 33, 16), [vi("y", [1, 4, 33, 16])], [const("c", np.array(0.5, np.float32))])
expect("attn_qk_scales", m, {"Attention": 1})

# Softmax opset 11 with axis = last (2-D coercion over the last axis only).
nodes, inits = sdpa("q", "k", "v", axis=3)
m = model(nodes, qkv(1, 2, 9, 8), [vi("y", [1, 2, 9, 8])], inits, opset=11)
expect("attn_opset11", m, {"Attention": 1})


# ---- head split/merge and projections (BERT-style), with computed and with constant shapes ----
def bert_block(b, s, e, h, dynamic):
    d = e // h
    W = {n: const(n, (rng.standard_normal((e, e)) / np.sqrt(e)).astype(np.float32))
         for n in ("wq", "wk", "wv", "wo")}
    B = {n: const(n, (0.1 * rng.standard_normal(e)).astype(np.float32)) for n in ("bq", "bk", "bv")}
    nodes, inits = [], list(W.values()) + list(B.values())
    inits += [const("split", np.array([0, 0, h, d], np.int64)), const("merge", np.array([0, 0, e], np.int64))]
    split, merge = "split", "merge"
    if dynamic:  # Shape -> Gather -> Unsqueeze -> Concat, as exporters write it
        inits += [const("i0", np.array(0, np.int64)), const("i1", np.array(1, np.int64)),
                  const("ax0", np.array([0], np.int64)), const("hd", np.array([h, d], np.int64)),
                  const("ee", np.array([e], np.int64))]
        nodes += [helper.make_node("Shape", ["x"], ["xs"]),
                  helper.make_node("Gather", ["xs", "i0"], ["xb"], axis=0),
                  helper.make_node("Gather", ["xs", "i1"], ["xl"], axis=0),
                  helper.make_node("Unsqueeze", ["xb", "ax0"], ["xb1"]),
                  helper.make_node("Unsqueeze", ["xl", "ax0"], ["xl1"]),
                  helper.make_node("Concat", ["xb1", "xl1", "hd"], ["dsplit"], axis=0),
                  helper.make_node("Concat", ["xb1", "xl1", "ee"], ["dmerge"], axis=0)]
        split, merge = "dsplit", "dmerge"
    for t in "qkv":
        nodes += [helper.make_node("MatMul", ["x", "w" + t], [t + "m"]),
                  helper.make_node("Add", [t + "m", "b" + t], [t + "a"]),
                  helper.make_node("Reshape", [t + "a", split], [t + "r"])]
    nodes += [helper.make_node("Transpose", ["qr"], ["qt"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["vr"], ["vt"], perm=[0, 2, 1, 3])]
    # K^T directly from the split: perm (0, 2, 3, 1)
    a_nodes, a_inits = sdpa("qt", "kr", "vt", out="o", scale=("Div", float(np.sqrt(d))),
                            mask="mask", k_perm=[0, 2, 3, 1])
    nodes += a_nodes
    inits += a_inits
    nodes += [helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", merge], ["om"]),
              helper.make_node("MatMul", ["om", "wo"], ["y"])]
    bs = ["batch", "seq"] if dynamic else [b, s]
    return model(nodes, [vi("x", bs + [e]), vi("mask", [bs[0], 1, 1, bs[1]])], [vi("y", bs + [e])], inits)


m = bert_block(2, 128, 64, 4, False)
# the head split Reshapes (constant shapes) and the merge Reshape are absorbed as views too
expect("bert_block_static", m, {"Attention": 1, "FusedMatMul": 3, "MatMul": 1})
m = bert_block(2, 128, 64, 4, True)
p = save(m, "bert_block_dynamic")
ops, text = fused(p)
check(ops is not None and ops.get("Attention") == 1 and "Transpose" not in ops and "Softmax" not in ops,
      f"bert_block_dynamic: one Attention, Transposes absorbed: {ops}")
for dims in (["--dim", "batch=1", "--dim", "seq=1"], ["--dim", "batch=2", "--dim", "seq=7"],
             ["--dim", "batch=1", "--dim", "seq=256"]):
    ok, text = validate(p, *dims)
    check(ok, f"bert_block_dynamic {dims} validates: {text}")

# Forced kernel failure falls back to the chain and still agrees.
nodes, inits = sdpa("q", "k", "v", mask="mask")
m = model(nodes, qkv(1, 2, 16, 8) + [vi("mask", [16, 16])], [vi("y", [1, 2, 16, 8])], inits)
p = save(m, "attn_forced")
rc, text = kiln("validate", p, env={"KILN_FUSION_FAIL": "Attention"})
check(rc == 0 and "forced to fail" in text, "forced Attention fallback agrees: " + text)

# A mask whose shape is only known at run time and turns out not to fit: the kernel refuses,
# the chain runs instead (same answer).
nodes, inits = sdpa("q", "k", "v", mask="mask")
m = model(nodes, [vi("q", [1, 2, "n", 8]), vi("k", [1, 2, 6, 8]), vi("v", [1, 2, 6, 8]), vi("mask", ["m", 6])],
          [vi("y", [1, 2, "m", 8])], inits)
p = save(m, "attn_runtime_mask")
ops, _ = fused(p)
check(ops == {"Attention": 1}, f"runtime-checked mask fuses: {ops}")
rc, text = kiln("validate", p, "--dim", "n=1", "--dim", "m=3")
check(rc == 0 and "running the chain" in text, "mask growing Sq at run time falls back: " + text)
rc, text = kiln("validate", p, "--dim", "n=3", "--dim", "m=3")
check(rc == 0 and "running the chain" not in text, "fitting runtime mask runs fused: " + text)

# A Transpose also read elsewhere stays, the attention still fuses around it.
nodes, inits = sdpa("qt", "k", "v")
nodes = [helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
         helper.make_node("Relu", ["qt"], ["z"])] + nodes
m = model(nodes, [vi("q", [1, 5, 2, 8]), vi("k", [1, 2, 5, 8]), vi("v", [1, 2, 5, 8])],
          [vi("y", [1, 2, 5, 8]), vi("z", [1, 2, 5, 8])], inits)
expect("attn_shared_transpose", m, {"Attention": 1, "Transpose": 1, "Relu": 1})

# ---- fused output vs a numpy reference on peaked scores (validate's inputs are in [-1, 1)) ----
def run_np(path, feeds, level="2"):
    d = os.path.join(TMP, os.path.basename(path) + ".io")
    os.makedirs(d, exist_ok=True)
    args = ["run", path, "--quiet", "--level", level, "--output-dir", d]
    for k, a in feeds.items():
        np.save(os.path.join(d, k + ".npy"), a)
        args += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    rc, text = kiln(*args)
    if rc != 0:
        return None, text
    return numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "output_0.pb"))), text


def ref_sdpa(q, k, v, scale, mask=None):
    s = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


for (b, h, sq, sk, d, dv) in [(1, 3, 5, 300, 20, 12), (2, 2, 130, 130, 64, 64), (1, 1, 1, 77, 16, 16)]:
    causal = np.triu(np.full((sq, sk), -np.inf, np.float32), 1 + sk - sq)
    nodes, inits = sdpa("q", "k", "v", scale=("Mul", 0.3), mask="mask")
    m = model(nodes, [vi("q", [b, h, sq, d]), vi("k", [b, h, sk, d]), vi("v", [b, h, sk, dv]),
                      vi("mask", [sq, sk])], [vi("y", [b, h, sq, dv])], inits)
    p = save(m, f"np_{sq}_{sk}_{d}_{dv}")
    feeds = {"q": (3 * rng.standard_normal((b, h, sq, d))).astype(np.float32),
             "k": rng.standard_normal((b, h, sk, d)).astype(np.float32),
             "v": rng.standard_normal((b, h, sk, dv)).astype(np.float32), "mask": causal}
    y, text = run_np(p, feeds)
    want = ref_sdpa(feeds["q"], feeds["k"], feeds["v"], 0.3, causal)
    err = np.abs(y - want).max() if y is not None else None
    check(y is not None and err < 1e-4 and "running the chain" not in text,
          f"np_{sq}_{sk}_{d}_{dv}: max err {err} {text}")
    # a row masked out completely is NaN, as in the chain
    feeds["mask"] = causal.copy()
    feeds["mask"][0, :] = -np.inf
    y, text = run_np(p, feeds)
    check(y is not None and np.isnan(y[..., 0, :]).all() and not np.isnan(y[..., 1:, :]).any(),
          f"np_{sq}_{sk}: fully masked row gives NaN: {text}")

# The layout PyTorch's MultiheadAttention exports: (S, B*H, D) blocks transposed to (B*H, S, D),
# K^T by perm (1, 2, 0), the output transposed back; all absorbed, read in place.
S, BH, Dh = 50, 6, 16
ns = [helper.make_node("Transpose", ["q"], ["qt"], perm=[1, 0, 2]),
      helper.make_node("Div", ["qt", "c"], ["qd"]),
      helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 2, 0]),
      helper.make_node("Transpose", ["v"], ["vt"], perm=[1, 0, 2]),
      helper.make_node("MatMul", ["qd", "kt"], ["s"]),
      helper.make_node("Softmax", ["s"], ["p"], axis=-1),
      helper.make_node("MatMul", ["p", "vt"], ["o"]),
      helper.make_node("Transpose", ["o"], ["y"], perm=[1, 0, 2])]
m = model(ns, [vi(n, [S, BH, Dh]) for n in "qkv"], [vi("y", [S, BH, Dh])], [const("c", np.array(4.0, np.float32))])
p = expect("attn_torch_layout", m, {"Attention": 1})
feeds = {n: (2 * rng.standard_normal((S, BH, Dh))).astype(np.float32) for n in "qkv"}
y, text = run_np(p, feeds)
t = lambda a: a.transpose(1, 0, 2)
want = t(ref_sdpa(t(feeds["q"]), t(feeds["k"]), t(feeds["v"]), 0.25))
check(y is not None and np.abs(y - want).max() < 1e-4, f"torch layout vs numpy: {text}")

# Q, K and V all the same tensor (no projections): the fused node reads one value three times;
# its saved form reloads and falls back correctly.
ns = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
      helper.make_node("MatMul", ["x", "xt"], ["s"]),
      helper.make_node("Softmax", ["s"], ["p"], axis=-1),
      helper.make_node("MatMul", ["p", "x"], ["y"])]
p = expect("attn_same_qkv", model(ns, [vi("x", [2, 9, 8])], [vi("y", [2, 9, 8])]), {"Attention": 1})
rc, text = kiln("validate", p + ".opt.onnx", env={"KILN_FUSION_FAIL": "Attention"})
check(rc == 0 and "forced to fail" in text, "saved fused model falls back: " + text)

# Two Transposes in a row on every side (and a scale between them on Q): the permutations compose.
# (B, S, H, D) = (2, 5, 3, 4) inputs; 12 nodes, the most one fusion takes.
T = lambda i, o, perm: helper.make_node("Transpose", [i], [o], perm=perm)
ns = [T("q", "q1", [0, 2, 1, 3]), helper.make_node("Mul", ["q1", "c"], ["q2"]), T("q2", "q3", [1, 0, 2, 3]),
      T("k", "k1", [0, 2, 3, 1]), T("k1", "k2", [1, 0, 2, 3]),
      T("v", "v1", [0, 2, 1, 3]), T("v1", "v2", [1, 0, 2, 3]),
      helper.make_node("MatMul", ["q3", "k2"], ["s"]),
      helper.make_node("Softmax", ["s"], ["p"], axis=-1),
      helper.make_node("MatMul", ["p", "v2"], ["o"]),
      T("o", "o1", [1, 0, 2, 3]), T("o1", "y", [0, 2, 1, 3])]
m = model(ns, [vi(n, [2, 5, 3, 4]) for n in "qkv"], [vi("y", [2, 5, 3, 4])], [const("c", np.array(0.7, np.float32))])
p = expect("attn_composed_perms", m, {"Attention": 1})
feeds = {n: (2 * rng.standard_normal((2, 5, 3, 4))).astype(np.float32) for n in "qkv"}
y, text = run_np(p, feeds)
t = lambda a: a.transpose(0, 2, 1, 3)
want = t(ref_sdpa(t(feeds["q"]), t(feeds["k"]), t(feeds["v"]), 0.7))
check(y is not None and np.abs(y - want).max() < 1e-4, f"composed perms vs numpy: {text}")

# ---- must not apply ----
base = qkv(1, 2, 8, 8)
# Softmax over another axis.
nodes, inits = sdpa("q", "k", "v", axis=2)
m = model(nodes, base, [vi("y", [1, 2, 8, 8])], inits)
ops, _ = fused(save(m, "no_axis"))
check(ops is not None and "Attention" not in ops and ops.get("Softmax") == 1, f"softmax axis 2: {ops}")

# A mask that would broadcast the scores to more query rows (Sq = 1, mask (4, 8)).
nodes, inits = sdpa("q", "k", "v", mask="mask")
m = model(nodes, [vi("q", [1, 2, 1, 8]), vi("k", [1, 2, 8, 8]), vi("v", [1, 2, 8, 8]), vi("mask", [4, 8])],
          [vi("y", [1, 2, 4, 8])], inits)
ops, _ = fused(save(m, "no_mask_grows"))
check(ops is not None and "Attention" not in ops, f"mask growing the scores: {ops}")
# A mask that does not broadcast at all: the model is refused, nothing is fused.
m = model(nodes, base + [vi("mask", [8, 5])], [vi("y", [1, 2, 8, 8])], inits)
ops, text = fused(save(m, "no_mask_bad"))
check(ops is None or "Attention" not in ops, f"non-broadcasting mask: {ops} {text}")

# The scores (or probabilities) read elsewhere: fan-out.
for inner in ("s1", "pr", "s0"):
    nodes, inits = sdpa("q", "k", "v")
    m = model(nodes, base, [vi("y", [1, 2, 8, 8]), vi(inner, [1, 2, 8, 8])], inits)
    ops, _ = fused(save(m, f"no_fanout_{inner}"))
    check(ops is not None and "Attention" not in ops, f"fan-out at {inner}: {ops}")
nodes, inits = sdpa("q", "k", "v")
nodes.append(helper.make_node("ReduceMax", ["s1"], ["z"], axes=[3]))
m = model(nodes, base, [vi("y", [1, 2, 8, 8]), vi("z", [1, 2, 8, 1])], inits)
ops, _ = fused(save(m, "no_fanout_node"))
check(ops is not None and "Attention" not in ops, f"scores read by another node: {ops}")

# Non-constant scale.
nodes, inits = sdpa("q", "k", "v", scale=None)
nodes.insert(2, helper.make_node("Div", ["s0", "t"], ["s0d"]))
nodes[3].input[0] = "s0d"
m = model(nodes, base + [vi("t", [])], [vi("y", [1, 2, 8, 8])], inits)
ops, _ = fused(save(m, "no_dynamic_scale"))
check(ops is not None and "Attention" not in ops, f"non-constant scale: {ops}")
# Non-scalar constant scale (per-head factors) is not a scale either.
nodes, inits = sdpa("q", "k", "v", scale=("Mul", 1.0))
inits = [const("scale", np.array([[[[0.5]], [[0.25]]]], np.float32))]
m = model(nodes, base, [vi("y", [1, 2, 8, 8])], inits)
ops, _ = fused(save(m, "no_vector_scale"))
check(ops is not None and "Attention" not in ops, f"per-head scale: {ops}")

# Mixed dtypes: a Cast in the chain; a double attention.
nodes, inits = sdpa("q", "k", "v")
nodes[-1].input[0] = "pr16"
nodes.insert(-1, helper.make_node("Cast", ["pr"], ["pr16"], to=TensorProto.FLOAT16))
m = model(nodes, [vi("q", [1, 2, 8, 8]), vi("k", [1, 2, 8, 8]), vi("v", [1, 2, 8, 8], TensorProto.FLOAT16)],
          [vi("y", [1, 2, 8, 8], TensorProto.FLOAT16)], inits)
ops, _ = fused(save(m, "no_cast"))
check(ops is not None and "Attention" not in ops, f"cast in chain: {ops}")
nodes, _ = sdpa("q", "k", "v")
m = model(nodes, [vi(n, [1, 2, 8, 8], D64) for n in "qkv"], [vi("y", [1, 2, 8, 8], D64)],
          [const("scale", np.array(8.0, np.float64))])
ops, _ = fused(save(m, "no_double"))
check(ops is not None and "Attention" not in ops, f"double attention: {ops}")

# Scale applied after the mask is not the fused form.
ns = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
      helper.make_node("MatMul", ["q", "kt"], ["s"]),
      helper.make_node("Add", ["s", "mask"], ["sm"]),
      helper.make_node("Mul", ["sm", "c"], ["sc"]),
      helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
      helper.make_node("MatMul", ["p", "v"], ["y"])]
m = model(ns, base + [vi("mask", [8, 8])], [vi("y", [1, 2, 8, 8])], [const("c", np.array(0.3, np.float32))])
ops, _ = fused(save(m, "no_scale_after_mask"))
check(ops is not None and "Attention" not in ops, f"scale after mask: {ops}")

finish("test_fuse_attention")
