"""Conv and MatMul fusions: where they must apply, where they must not, and fallback."""
import os

from kilntest import *

rng = np.random.default_rng(0)
W = const("W", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
B = const("B", rng.standard_normal(4).astype(np.float32))
bn = [const(n, v.astype(np.float32)) for n, v in
      [("s", 1 + 0.1 * rng.standard_normal(4)), ("t", rng.standard_normal(4)),
       ("m", rng.standard_normal(4)), ("v", 0.5 + rng.random(4))]]

# Conv + BN + Relu: BN folds away, Conv+Relu becomes FusedConv.
m = model([helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["b"]),
           helper.make_node("Relu", ["b"], ["y"])],
          [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], [W, B, *bn])
p = save(m, "conv_bn_relu")
ops, text = optimized_ops(p)
check(ops == {"FusedConv": 1}, f"conv_bn_relu fused to one FusedConv: {ops} {text}")
ok, text = validate(p)
check(ok, "conv_bn_relu validates: " + text)

# The intermediate is read twice: no fusion of Conv with Relu.
m = model([helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["y"]),
           helper.make_node("Sigmoid", ["c"], ["z"])],
          [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8]), vi("z", [1, 4, 8, 8])], [W, B])
ops, _ = optimized_ops(save(m, "conv_fanout"))
check(ops is not None and ops.get("Conv") == 1 and "FusedConv" not in ops, f"fan-out blocks fusion: {ops}")

# Non-constant weights: no fusion.
m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
          [vi("x", [1, 3, 8, 8]), vi("w", [4, 3, 3, 3])], [vi("y", [1, 4, 6, 6])])
ops, _ = optimized_ops(save(m, "conv_dynamic_w"))
check(ops == {"Conv": 1, "Relu": 1}, f"non-constant weights block fusion: {ops}")

# MatMul + Add + Relu -> FusedMatMul; forced kernel failure falls back and still agrees.
Wm = const("Wm", rng.standard_normal((16, 8)).astype(np.float32))
bm = const("bm", rng.standard_normal(8).astype(np.float32))
m = model([helper.make_node("MatMul", ["x", "Wm"], ["a"]),
           helper.make_node("Add", ["a", "bm"], ["b"]),
           helper.make_node("Relu", ["b"], ["y"])],
          [vi("x", [2, 5, 16])], [vi("y", [2, 5, 8])], [Wm, bm])
p = save(m, "matmul_add_relu")
ops, _ = optimized_ops(p)
check(ops == {"FusedMatMul": 1}, f"matmul_add_relu fused: {ops}")
ok, text = validate(p)
check(ok, "matmul_add_relu validates: " + text)
rc, text = kiln("validate", p, env={"KILN_FUSION_FAIL": "FusedMatMul"})
check(rc == 0 and "forced to fail" in text, "forced fallback agrees and is reported: " + text)

# Bias over the wrong axis (rank-raising) is not fused.
bad = const("bad", rng.standard_normal((3, 1, 8)).astype(np.float32))
m = model([helper.make_node("MatMul", ["x", "Wm"], ["a"]), helper.make_node("Add", ["a", "bad"], ["y"])],
          [vi("x", [5, 16])], [vi("y", [3, 5, 8])], [Wm, bad])
ops, _ = optimized_ops(save(m, "matmul_bad_bias"))
check(ops is not None and "FusedMatMul" not in ops, f"rank-raising bias not fused: {ops}")

# Gemm(alpha=0.5) + LeakyRelu(alpha=0.2): the activation's alpha must not replace Gemm's.
Wg = const("Wg", rng.standard_normal((8, 16)).astype(np.float32))
Cg = const("Cg", rng.standard_normal(8).astype(np.float32))
m = model([helper.make_node("Gemm", ["x", "Wg", "Cg"], ["a"], alpha=0.5, beta=2.0, transB=1),
           helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.2)],
          [vi("x", [4, 16])], [vi("y", [4, 8])], [Wg, Cg])
p = save(m, "gemm_leaky")
ops, _ = optimized_ops(p)
check(ops == {"FusedGemm": 1}, f"gemm_leaky fused: {ops}")
ok, text = validate(p)
check(ok, "gemm + leaky relu validates (activation alpha kept apart from Gemm alpha): " + text)

# verify_fusions (validate --per-fusion): every fusion is compared with its chain; a fused
# kernel made to disagree (test hook KILN_FUSION_SKEW) is caught, disabled and reported.
p = save(model([helper.make_node("MatMul", ["x", "Wm"], ["a"]), helper.make_node("Add", ["a", "bm"], ["b"]),
                helper.make_node("Relu", ["b"], ["y"])], [vi("x", [2, 5, 16])], [vi("y", [2, 5, 8])], [Wm, bm]),
         "per_fusion")
rc, text = kiln("validate", p, "--per-fusion")
# the fused node's own row says ok, after the runs that follow the verifying one too
check(rc == 0 and re.search(r"FusedMatMul +\d+ +\S+ +\S+ +ok$", text, re.M), "per-fusion report: " + text)
rc, text = kiln("validate", p, "--per-fusion", env={"KILN_FUSION_SKEW": "FusedMatMul"})
check(rc == 1 and "DISAGREES" in text and "disagrees with its original chain" in text,
      "a disagreeing fusion is disabled and reported: " + text)

# Wide outputs: on a CPU with AMX the fused MatMul runs in bf16x3 (within about 1e-5 of the
# output's range of float32) while its chain's MatMul runs in float32; near-zero elements of an
# output in the thousands then differ by more than 1e-3 relatively. The range term of the
# tolerance (validate --range-tol, and verify_fusions) admits that and no fusion is disabled;
# without it (--range-tol 0) the same run may disagree, on an AMX machine.
Ww = const("Ww", (rng.standard_normal((256, 128)) * 100).astype(np.float32))
bw = const("bw", rng.standard_normal(128).astype(np.float32))
p = save(model([helper.make_node("MatMul", ["x", "Ww"], ["a"]), helper.make_node("Add", ["a", "bw"], ["y"])],
               [vi("x", [64, 256])], [vi("y", [64, 128])], [Ww, bw]), "wide_range")
rc, text = kiln("validate", p, "--per-fusion")
check(rc == 0 and "DISAGREE" not in text, "a wide-range fused MatMul validates and stays enabled: " + text)
rc, text = kiln("validate", p, "--range-tol", "0", env={"KILN_AMX": "0"})
check(rc == 0, "in float32 alone the same model meets the element-wise tolerance: " + text)

# strict_fp32 (--strict-fp32) is the float32 path whatever the CPU: the same bytes as with AMX
# turned off for the whole process (KILN_AMX=0).
outs = {}
for tag, extra, env in [("strict", ["--strict-fp32"], None), ("env", [], {"KILN_AMX": "0"})]:
    d = os.path.join(os.path.dirname(p), "wide_" + tag)
    rc, text = kiln("run", p, "--quiet", "--output-dir", d, *extra, env=env)
    check(rc == 0, f"run {tag}: {text}")
    with open(os.path.join(d, "output_0.pb"), "rb") as f:
        outs[tag] = f.read()
check(outs["strict"] == outs["env"], "--strict-fp32 gives the float32 bytes")

finish("test_fuse_conv_matmul")
