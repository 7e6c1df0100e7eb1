"""Conv 1x1 -> Relu|Clip -> depthwise Conv -> Relu|Clip -> Conv 1x1 [-> Add] -> FusedConvBlock
(MobileNetV2's inverted residual blocks: small planes whole, larger ones in bands of rows): which
chains fuse, and that the fused
node gives the bytes of the chain it replaced (the same sums in the same order, its inner tensors
kept channels-last), by default, at a symbolic batch of 2, and when it falls back to the chain.
Only AVX-512 CPUs without AMX (or with KILN_AMX=0) have the block kernel; elsewhere nothing fuses
and the chains run as they are."""
import os

from kilntest import *

rng = np.random.default_rng(11)
_flags = open("/proc/cpuinfo").read().split()
_level = os.environ.get("KILN_ISA", "auto")
_amx = "amx_tile" in _flags and os.environ.get("KILN_AMX", "1") != "0"
has_block = "avx512f" in _flags and _level not in ("scalar", "avx2") and not _amx


def act_node(kind, src, dst, inits, tag):
    if kind == "Clip":
        inits += [const(tag + "lo", np.array(0, np.float32)), const(tag + "hi", np.array(6, np.float32))]
        return helper.make_node("Clip", [src, tag + "lo", tag + "hi"], [dst])
    return helper.make_node(kind, [src], [dst])


def block(name, c, ce, m, h, w, k=3, s=1, acts=("Clip", "Clip"), res=False, batch=1, mult=1, fan_out=False, bn=False,
          stem=None):
    """stem=(k, s, p): the expansion a KxK convolution (a network's first layer) of stride s, pads p."""
    ek, es, ep = stem or (1, 1, 0)
    We = const("We", (rng.standard_normal((ce, c, ek, ek)) / np.sqrt(c * ek * ek)).astype(np.float32))
    Be = const("Be", rng.standard_normal(ce).astype(np.float32))
    Wd = const("Wd", (rng.standard_normal((ce * mult, 1, k, k)) / k).astype(np.float32))
    Bd = const("Bd", rng.standard_normal(ce * mult).astype(np.float32))
    Wp = const("Wp", (rng.standard_normal((m, ce * mult, 1, 1)) / np.sqrt(ce)).astype(np.float32))
    inits = [We, Be, Wd, Bd, Wp]
    nodes = [helper.make_node("Conv", ["x", "We", "Be"], ["e"], kernel_shape=[ek, ek], strides=[es, es],
                              pads=[ep] * 4)]
    cur = "e"
    if bn:
        for nm, v in [("g", rng.uniform(0.5, 1.5, ce)), ("b", rng.standard_normal(ce)),
                      ("mu", rng.standard_normal(ce)), ("var", rng.uniform(0.5, 2, ce))]:
            inits.append(const(nm, v.astype(np.float32)))
        nodes.append(helper.make_node("BatchNormalization", [cur, "g", "b", "mu", "var"], ["en"]))
        cur = "en"
    nodes.append(act_node(acts[0], cur, "ea", inits, "e"))
    nodes.append(helper.make_node("Conv", ["ea", "Wd", "Bd"], ["d"], kernel_shape=[k, k], strides=[s, s],
                                  pads=[k // 2] * 4, group=ce))
    nodes.append(act_node(acts[1], "d", "da", inits, "d"))
    nodes.append(helper.make_node("Conv", ["da", "Wp"], ["p" if res else "y"], kernel_shape=[1, 1]))
    if res:
        nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
    outputs = [vi("y", None)] + ([vi("ea", None)] if fan_out else [])
    return save(model(nodes, [vi("x", [batch, c, h, w])], outputs, inits), name)


cases = [("r14", block("cb_r14", 64, 384, 64, 14, 14, res=True)),          # MobileNetV2, 14x14
         ("s2", block("cb_s2", 96, 576, 160, 14, 14, s=2)),                # to 7x7
         ("r7", block("cb_r7", 160, 960, 160, 7, 7, res=True)),
         ("relu", block("cb_relu", 24, 72, 40, 9, 13, k=5, acts=("Relu", "Relu"))),  # partial blocks of 16
         ("batch", block("cb_batch", 32, 96, 32, 8, 8, res=True, batch="N")),
         ("bn", block("cb_bn", 16, 64, 24, 10, 10, bn=True)),
         ("28", block("cb_28", 32, 192, 32, 28, 28, res=True)),            # bands of rows from here
         ("112s2", block("cb_112s2", 16, 96, 24, 112, 112, s=2)),
         ("56bn", block("cb_56bn", 24, 144, 24, 56, 56, res=True, batch="N", bn=True)),
         # the expansion a network's first layer: MobileNetV2's stem and first block (3 -> 32, 3x3
         # stride 2 on 224x224; depthwise; 32 -> 16), a 7x7 stem with relu at a symbolic batch, a
         # stem of stride 1 before a depthwise of stride 2
         ("stem", block("cb_stem", 3, 32, 16, 224, 224, stem=(3, 2, 1))),
         ("stem7", block("cb_stem7", 3, 16, 8, 61, 70, acts=("Relu", "Clip"), batch="N", stem=(7, 2, 3))),
         ("stem_s1", block("cb_stem_s1", 2, 8, 12, 24, 40, k=5, s=2, stem=(3, 1, 1)))]
for tag, p in cases:
    ops, text = optimized_ops(p)
    if has_block:
        check(ops == {"FusedConvBlock": 1}, f"{tag}: fused into one node: {ops} {text}")
    else:
        check(ops is not None and "FusedConvBlock" not in ops, f"{tag}: no block kernel here, not fused: {ops}")
    # level 0 keeps the BatchNormalization apart (other roundings)
    check_fused_bytes(p, tag, "FusedConvBlock", *(["--dim", "N=2"] if tag in ("batch", "56bn", "stem7") else []),
                      level0=tag not in ("bn", "56bn"))

# verify_fusions: the fused node is run against its chain and reported as agreeing
if has_block:
    rc, text = kiln("validate", cases[0][1], "--per-fusion")
    check(rc == 0 and re.search(r"FusedConvBlock +6 +\S+ +\S+ +ok$", text, re.M), "per-fusion: " + text)

# not fused: bands of rows one column wide out, the expansion's activation read elsewhere, a
# depthwise channel multiplier of 2, HardSwish (not applied in registers), spatial dims unknown
not_fused = [block("cb_narrow", 8, 32, 8, 300, 2, s=2),
             block("cb_fan", 16, 64, 16, 7, 7, fan_out=True),
             block("cb_mult", 16, 32, 16, 7, 7, mult=2),
             block("cb_hsig", 16, 64, 16, 7, 7, acts=("HardSigmoid", "Clip")),
             block("cb_dyn", 16, 64, 16, "H", "W"),
             # a first layer into a small plane (whole planes take 1x1 expansions only), or of 8
             # input channels (not a direct convolution)
             block("cb_stem_small", 3, 16, 8, 32, 32, stem=(3, 2, 1)),
             block("cb_stem_c8", 8, 16, 8, 64, 64, stem=(3, 2, 1))]
for p in not_fused:
    ops, text = optimized_ops(p)
    check(ops is not None and "FusedConvBlock" not in ops, f"{os.path.basename(p)} stays apart: {ops}")
    extra = ["--dim", "H=7", "--dim", "W=7"] if p.endswith("cb_dyn.onnx") else []
    ok, text = validate(p, *extra)
    check(ok, f"{os.path.basename(p)} validates: {text}")

# a FusedConvBlock written by hand with weights of the wrong shapes: a clear error naming the
# node (it has no chain to fall back to), never a crash
good = {"We": (64, 16, 1, 1), "Wd": (64, 1, 3, 3), "Wp": (16, 64, 1, 1)}
bad = {"expansion of other input channels": {"We": (64, 8, 1, 1)},
       "depthwise of other channels": {"Wd": (32, 1, 3, 3)},
       "projection of a 3x3 kernel": {"Wp": (16, 64, 3, 3)}}
for what, change in bad.items():
    shapes = dict(good, **change)
    inits = [const(k, np.ones(v, np.float32)) for k, v in shapes.items()]
    n = helper.make_node("FusedConvBlock", ["x", "We", "", "Wd", "", "Wp"], ["y"], domain=K, name="cb",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=shapes["Wd"][0])
    p = save(kmodel([n], [vi("x", [1, 16, 7, 7])], [vi("y", None)], inits), "cb_hostile")
    rc, text = kiln("run", p, "--quiet")
    check(rc == 1 and "'cb' (FusedConvBlock)" in text, f"{what}: a clear error: {rc} {text}")

# a KxK expansion written by hand with a zero stride or negative pads: a clear error naming the node
for what, attrs in {"expand_strides": {"expand_strides": [0, 2]},
                    "expand_pads": {"expand_strides": [2, 2], "expand_pads": [-2, 1, 1, 1]}}.items():
    n = helper.make_node("FusedConvBlock", ["x", "We", "", "Wd", "", "Wp"], ["y"], domain=K, name="cb",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16, **attrs)
    inits = [const("We", np.ones((16, 3, 3, 3), np.float32)), const("Wd", np.ones((16, 1, 3, 3), np.float32)),
             const("Wp", np.ones((8, 16, 1, 1), np.float32))]
    p = save(kmodel([n], [vi("x", [1, 3, 64, 64])], [vi("y", None)], inits), "cb_hostile_stem")
    rc, text = kiln("run", p, "--quiet")
    check(rc == 1 and "'cb' (FusedConvBlock)" in text and "expand_" in text, f"bad {what}: a clear error: {rc} {text}")

finish("test_fuse_conv_block")
