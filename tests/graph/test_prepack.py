"""Weights packed at session creation (kiln_options.lazy_weights = 0, the default): which nodes
pack (kiln bench's prepacked_nodes), and that the results are bytewise those of packing on the
first run (--lazy-weights), with AMX where the CPU has it and in strict float32."""
import json
import os

from kilntest import *

rng = np.random.default_rng(3)


def weights(name, shape):
    return const(name, (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32))


# A 3x3 convolution that takes Winograd (16 -> 32 channels on 16x16), a 1x1 one with K = 128
# (the AMX form where the CPU has it, else the GEMM on W in place), then a fused MatMul and a
# fused Gemm with constant weights. Batch symbolic: it does not decide any form.
W1, W2 = weights("W1", (128, 16, 3, 3)), weights("W2", (64, 128, 1, 1))
Wm, bm = weights("Wm", (16, 64)), const("bm", rng.standard_normal(64).astype(np.float32))
Wg, bg = weights("Wg", (32, 64)), const("bg", rng.standard_normal(32).astype(np.float32))
nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "W2"], ["c2"]),
         helper.make_node("Relu", ["c2"], ["r2"]),
         helper.make_node("Reshape", ["r2", "shape"], ["flat"]),
         helper.make_node("MatMul", ["flat", "Wm"], ["m"]),
         helper.make_node("Add", ["m", "bm"], ["ma"]),
         helper.make_node("Gemm", ["ma", "Wg", "bg"], ["y"], transB=1)]
shape = const("shape", np.array([-1, 16], dtype=np.int64))
p = save(model(nodes, [vi("x", ["N", 16, 16, 16])], [vi("y", [None, 32])],
               [W1, W2, Wm, bm, Wg, bg, shape]), "prepack")


def bench(*extra):
    out = os.path.join(TMP, "prepack.json")
    rc, text = kiln("bench", p, "--warmup", "0", "--repeat", "2", "--json", out, *extra)
    check(rc == 0, f"bench {extra}: {text}")
    with open(out) as f:
        return json.load(f)


r = bench()
# the Winograd conv, the 1x1 conv when it takes AMX (not without it: its GEMM reads W in
# place), the FusedMatMul and the FusedGemm
check(r["prepacked_nodes"] >= 3, f"nodes that pack their weights at load: {r['prepacked_nodes']}")
check(r["first_run_ms"] > 0, "first_run_ms is reported")
lazy = bench("--lazy-weights")
check(lazy["prepacked_nodes"] == 0, f"--lazy-weights packs nothing at load: {lazy['prepacked_nodes']}")
s = bench("--strict-fp32")
check(s["prepacked_nodes"] >= 3, f"strict float32 packs at load too: {s['prepacked_nodes']}")

# the same bytes either way, for two batch sizes, by default and in strict float32
for extra in [[], ["--strict-fp32"]]:
    for n in ["1", "3"]:
        outs = {}
        for tag, lw in [("eager", []), ("lazy", ["--lazy-weights"])]:
            d = os.path.join(TMP, f"prepack_{tag}_{n}_{len(extra)}")
            rc, text = kiln("run", p, "--quiet", "--dim", f"N={n}", "--output-dir", d, *extra, *lw)
            check(rc == 0, f"run {tag} N={n} {extra}: {text}")
            with open(os.path.join(d, "output_0.pb"), "rb") as f:
                outs[tag] = f.read()
        check(outs["eager"] == outs["lazy"], f"N={n} {extra}: packed at load gives the bytes of packing on first run")

# validate (fused against unfused) agrees with packs made at load
rc, text = kiln("validate", p, "--dim", "N=2")
check(rc == 0, "validate with weights packed at load: " + text)

finish("test_prepack")
