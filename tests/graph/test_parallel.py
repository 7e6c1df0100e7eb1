"""The fused and memory-bound kernels that run on the session's thread pool (Attention,
LayerNorm, SkipLayerNorm, Gelu, BiasGelu, FusedEmbedding, FusedElementwise, Softmax, pooling)
give byte-identical outputs at 1 and 2 threads, on shapes large enough to be split."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def same_at_1_and_2(path, what, level="0"):
    outs = []
    for t in ("1", "2"):
        d = os.path.join(TMP, os.path.basename(path) + ".t" + t)
        os.makedirs(d, exist_ok=True)
        rc, text = kiln("run", path, "--threads", t, "--output-dir", d, "--level", level, "--quiet")
        check(rc == 0, f"{what}: kiln run --threads {t}: {text}")
        if rc:
            return
        files = sorted(f for f in os.listdir(d) if f.endswith(".pb"))
        outs.append({f: open(os.path.join(d, f), "rb").read() for f in files})
    check(len(outs[0]) > 0 and outs[0] == outs[1], f"{what}: outputs at 1 and 2 threads are identical")
    for f, b in outs[0].items():
        t = onnx.TensorProto()
        t.ParseFromString(b)
        a = numpy_helper.to_array(t)
        check(a.size > 0 and np.isfinite(a).any(), f"{what}: {f} holds values")


H = 768
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)

# Attention: batch/head axes broadcast (K and V shared across heads), Sq not a multiple of the
# query tile, Dv not a multiple of the vector padding, an additive mask; and a causal cond.
att = [
    helper.make_node("Attention", ["q", "k", "v", "mask"], ["att"], domain=K, scale=0.125),
    helper.make_node("Attention", ["q", "k", "v", "", "cond"], ["att_c"], domain=K, scale=0.125),
]
causal = np.tril(np.ones((203, 203), bool))
p = save(kmodel(att, [vi("q", [2, 4, 203, 64]), vi("k", [2, 1, 64, 203]), vi("v", [2, 1, 203, 48]),
                      vi("mask", [203, 203])], [vi("att", None), vi("att_c", None)],
                [const("cond", causal)]), "par_attention")
same_at_1_and_2(p, "Attention")

# LayerNorm, SkipLayerNorm (with its sum output), Gelu (erf and tanh), BiasGelu
norm = [
    helper.make_node("LayerNorm", ["x", "g", "b"], ["ln"], domain=K, epsilon=1e-5, axis=-1),
    helper.make_node("SkipLayerNorm", ["x", "x2", "g", "b"], ["sln", "sum"], domain=K, epsilon=1e-5),
    helper.make_node("SkipLayerNorm", ["x", "res", "g"], ["sln_b"], domain=K, epsilon=1e-5),
    helper.make_node("Gelu", ["x"], ["gelu"], domain=K),
    helper.make_node("Gelu", ["x"], ["gelu_t"], domain=K, approximate="tanh"),
    helper.make_node("BiasGelu", ["x", "g"], ["bgelu"], domain=K),
]
p = save(kmodel(norm, [vi("x", [4, 37, H]), vi("x2", [4, 37, H])],
                [vi(n, None) for n in ("ln", "sln", "sum", "sln_b", "gelu", "gelu_t", "bgelu")],
                [const("g", f32(H)), const("b", f32(H)), const("res", f32(37, H))]), "par_norm")
same_at_1_and_2(p, "LayerNorm/SkipLayerNorm/Gelu/BiasGelu")

# FusedEmbedding with Relu and LayerNorm, and its pre-norm output
ids = rng.integers(-500, 500, (3, 61)).astype(np.int64)
emb = [helper.make_node("FusedEmbedding", ["ids", "word", "pos", "", "", "g", "b"], ["emb", "pre"], domain=K,
                        relu=1, layernorm=1, epsilon=1e-5)]
p = save(kmodel(emb, [], [vi("emb", None), vi("pre", None)],
                [const("ids", ids), const("word", f32(500, H)), const("pos", f32(61, H)),
                 const("g", f32(H)), const("b", f32(H))]), "par_embedding")
same_at_1_and_2(p, "FusedEmbedding")

# FusedElementwise: (x * y + c) -> Sigmoid -> * x, with a per-channel and a scalar input;
# 300001 elements (not a multiple of the block)
prog = [2, 0, 1,  0, 3, 2,  17, 4, -1,  2, 5, 0,  28, 6, -1]
few = [helper.make_node("FusedElementwise", ["x", "y", "c"], ["ew"], domain=K, program=prog,
                        params=[0.0] * 8 + [-3.0, 3.0])]
p = save(kmodel(few, [vi("x", [7, 42857, 1]), vi("y", [7, 42857, 1])], [vi("ew", None)],
                [const("c", np.array([0.5], np.float32))]), "par_ew")
same_at_1_and_2(p, "FusedElementwise")

# Softmax: float rows (fast path), an inner axis (generic path), LogSoftmax, Hardmax
sm = [helper.make_node("Softmax", ["s"], ["sm"], axis=-1), helper.make_node("Softmax", ["s"], ["sm1"], axis=1),
      helper.make_node("LogSoftmax", ["s"], ["lsm"], axis=-1), helper.make_node("Hardmax", ["s"], ["hm"], axis=-1)]
p = save(kmodel(sm, [vi("s", [16, 33, 1000])], [vi(n, None) for n in ("sm", "sm1", "lsm", "hm")]), "par_softmax")
same_at_1_and_2(p, "Softmax")

# Pooling on NCHW planes
pl = [helper.make_node("MaxPool", ["i"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
      helper.make_node("AveragePool", ["i"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
      helper.make_node("AveragePool", ["i"], ["ap2"], kernel_shape=[2, 2], strides=[2, 2]),
      helper.make_node("GlobalAveragePool", ["i"], ["gap"])]
p = save(kmodel(pl, [vi("i", [2, 24, 57, 61])], [vi(n, None) for n in ("mp", "ap", "ap2", "gap")]), "par_pool")
same_at_1_and_2(p, "MaxPool/AveragePool/GlobalAveragePool")

finish("test_parallel")
