"""Conv [+ activation] + MaxPool -> FusedConvMaxPool (the stems of ResNets and SqueezeNet): which
chains fuse, and that the fused node gives the bytes of the chain it replaced (its convolution
takes the same direct kernel; a max of the same floats), by default, at a symbolic batch of 2,
and when it falls back to the chain. Without AVX2+FMA nothing fuses (the one-pass kernel is AVX2 or
AVX-512) and the chains run as they are."""
import os

from kilntest import *

rng = np.random.default_rng(7)
_flags = open("/proc/cpuinfo").read().split()
_level = os.environ.get("KILN_ISA", "auto")
one_pass = "avx2" in _flags and "fma" in _flags and _level not in ("scalar",)  # the one-pass kernel's levels


def stem(name, cin, k, s, pad, pool, act="Relu", batch=1, extra_out=False, pool_out2=False, bn=False):
    W = const("W", (rng.standard_normal((16, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))
    B = const("B", rng.standard_normal(16).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)]
    inits = [W, B]
    cur = "c"
    if bn:
        for nm, v in [("g", rng.uniform(0.5, 1.5, 16)), ("b", rng.standard_normal(16)),
                      ("mu", rng.standard_normal(16)), ("var", rng.uniform(0.5, 2, 16))]:
            inits.append(const(nm, v.astype(np.float32)))
        nodes.append(helper.make_node("BatchNormalization", [cur, "g", "b", "mu", "var"], ["n"]))
        cur = "n"
    if act:
        nodes.append(helper.make_node(act, [cur], ["a"]))
        cur = "a"
    pk, ps, pp, ceil = pool
    outs = ["y", "idx"] if pool_out2 else ["y"]
    nodes.append(helper.make_node("MaxPool", [cur], outs, kernel_shape=pk, strides=ps, pads=pp, ceil_mode=ceil))
    outputs = [vi("y", None)] + ([vi("idx", None, TensorProto.INT64)] if pool_out2 else [])
    if extra_out:
        outputs.append(vi(cur, None))
    dims = [batch if isinstance(batch, int) else batch, cin, 65, 71]
    return save(model(nodes, [vi("x", dims)], outputs, inits), name)


squeeze = ([3, 3], [2, 2], [0, 0, 0, 0], 1)  # SqueezeNet 1.1: 3x3/2, ceil
resnet = ([3, 3], [2, 2], [1, 1, 1, 1], 0)   # ResNet: 3x3/2, pad 1
cases = [("sq", stem("cp_sq", 3, 3, 2, 0, squeeze)),
         ("rn", stem("cp_rn", 3, 7, 2, 3, resnet)),
         ("k2", stem("cp_k2", 4, 5, 2, 2, ([2, 2], [2, 2], [0, 0, 0, 0], 0), act="Clip")),
         ("noact", stem("cp_noact", 2, 3, 1, 1, ([3, 3], [1, 2], [1, 1, 1, 1], 1), act=None)),
         ("batch", stem("cp_batch", 3, 3, 2, 0, squeeze, batch="N"))]
for tag, p in cases:
    ops, text = optimized_ops(p)
    want = {"FusedConvMaxPool": 1} if one_pass else None
    if one_pass:
        check(ops == want, f"{tag}: fused into one node: {ops} {text}")
    check_fused_bytes(p, tag, "FusedConvMaxPool", *(["--dim", "N=2"] if tag == "batch" else []))

# verify_fusions: the fused node is run against its chain and reported as agreeing
if one_pass:
    rc, text = kiln("validate", cases[0][1], "--per-fusion")
    check(rc == 0 and re.search(r"FusedConvMaxPool +3 +\S+ +\S+ +ok$", text, re.M), "per-fusion: " + text)

# BatchNormalization folded into the convolution first, then fused with the pooling
p = stem("cp_bn", 3, 7, 2, 3, resnet, bn=True)
ops, _ = optimized_ops(p)
if one_pass:
    check(ops == {"FusedConvMaxPool": 1}, f"conv + bn + relu + maxpool: {ops}")
ok, text = validate(p)
check(ok, "conv + bn + relu + maxpool validates: " + text)

# not fused: the pooling's indices wanted, the activation's output read elsewhere, eight input
# channels (not the direct kernel's), x stride 1, a 4-column window
not_fused = [stem("cp_idx", 3, 3, 2, 0, squeeze, pool_out2=True),
             stem("cp_fan", 3, 3, 2, 0, squeeze, extra_out=True),
             stem("cp_c8", 8, 3, 2, 0, squeeze),
             stem("cp_s1", 3, 3, 2, 0, ([3, 3], [2, 1], [0, 0, 0, 0], 0)),
             stem("cp_k4", 3, 3, 2, 0, ([3, 4], [2, 2], [0, 0, 0, 0], 0))]
for p in not_fused:
    ops, text = optimized_ops(p)
    check(ops is not None and "FusedConvMaxPool" not in ops, f"{os.path.basename(p)} stays apart: {ops}")
    ok, text = validate(p)
    check(ok, f"{os.path.basename(p)} validates: {text}")

# a FusedConvMaxPool written by hand with hostile pooling attributes: a clear error naming the
# node (it has no chain to fall back to), never a crash or an overflow
Wh = const("W", np.ones((8, 3, 3, 3), np.float32))
hostile = {"zero stride": dict(pool_kernel_shape=[3, 3], pool_strides=[0, 0]),
           "kernel past the input": dict(pool_kernel_shape=[500, 500], pool_strides=[2, 2]),
           "negative pads": dict(pool_kernel_shape=[3, 3], pool_strides=[2, 2], pool_pads=[-5, -5, 0, 0]),
           "huge pads": dict(pool_kernel_shape=[3, 3], pool_strides=[2, 2], pool_pads=[4 * 10**18] * 4),
           "huge stride": dict(pool_kernel_shape=[3, 3], pool_strides=[2**40, 2]),
           "one kernel dim": dict(pool_kernel_shape=[3], pool_strides=[2, 2]),
           "no kernel": dict(pool_strides=[2, 2])}
for what, attrs in hostile.items():
    n = helper.make_node("FusedConvMaxPool", ["x", "W"], ["y"], domain=K, name="cp", kernel_shape=[3, 3],
                         strides=[2, 2], **attrs)
    p = save(kmodel([n], [vi("x", [1, 3, 64, 64])], [vi("y", None)], [Wh]), "cp_hostile")
    rc, text = kiln("run", p, "--quiet")
    check(rc == 1 and "'cp' (FusedConvMaxPool)" in text, f"{what}: a clear error: {rc} {text}")

# the standard MaxPool shares the output-size rule: hostile pads are an error there too
n = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[3, 3], strides=[2, 2],
                     pads=[4 * 10**18] * 4)
p = save(model([n], [vi("x", [1, 3, 16, 16])], [vi("y", None)]), "mp_hostile")
rc, text = kiln("run", p, "--quiet")
check(rc == 1 and "'mp' (MaxPool)" in text, f"MaxPool with huge pads: a clear error: {rc} {text}")

finish("test_fuse_conv_pool")
