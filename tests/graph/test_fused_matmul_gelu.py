"""FusedMatMul with activation Gelu (erf form): the GELU applied after the GEMM (rational erf,
src/ops/fused.c) against a float64 numpy reference, on odd sizes (vector tails), sizes split
over several tasks, with bias and residual, at every ISA level, byte-identical at 1 and 2
threads; and the fused BERT feed-forward chain still validates against its original ops."""
import math
import os

import onnx

from kilntest import *

rng = np.random.default_rng(0)
erf = np.vectorize(math.erf)


def run(path, feeds, threads, env):
    d = os.path.join(TMP, f"{os.path.basename(path)}.{threads}.{'_'.join(env.values())}")
    os.makedirs(d, exist_ok=True)
    cmd = ["run", path, "--quiet", "--output-dir", d, "--threads", threads]
    for k, a in feeds.items():
        np.save(os.path.join(d, k + ".npy"), a)
        cmd += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    rc, text = kiln(*cmd, env=env)
    if rc:
        return None, None, text
    f = os.path.join(d, "output_0.pb")
    return numpy_helper.to_array(onnx.load_tensor(f)), open(f, "rb").read(), text


# (rows, K, N): a 7 x 37 output (tails of every vector width), 3 x 129 x 300 (over 2 tasks)
for (lead, k, n, resid) in [((7,), 19, 37, False), ((3, 129), 64, 300, True), ((1, 128), 256, 1024, False)]:
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = (0.5 * rng.standard_normal(n)).astype(np.float32)
    ins = ["a", "w", "bias"] + (["r"] if resid else [])
    node = helper.make_node("FusedMatMul", ins, ["y"], domain=K, activation="Gelu")
    inputs = [vi("a", list(lead) + [k])] + ([vi("r", list(lead) + [n])] if resid else [])
    p = save(kmodel([node], inputs, [vi("y", None)], [const("w", w), const("bias", bias)]), f"mm_gelu_{n}")
    feeds = {"a": (2 * rng.standard_normal(lead + (k,))).astype(np.float32)}
    x = feeds["a"].astype(np.float64) @ w + bias
    if resid:
        feeds["r"] = rng.standard_normal(lead + (n,)).astype(np.float32)
        x = x + feeds["r"]
    want = 0.5 * x * (1 + erf(x / np.sqrt(2)))
    for env in ({"KILN_ISA": "scalar"}, {"KILN_ISA": "avx2"}, {"KILN_ISA": "avx512"}):
        raws = []
        for t in ("1", "2"):
            y, raw, text = run(p, feeds, t, env)
            err = np.abs(y - want).max() if y is not None else None
            check(y is not None and err < 2e-5 * max(1.0, np.abs(want).max()),
                  f"mm_gelu {lead}x{n} {env} threads {t}: max err {err} {text}")
            raws.append(raw)
        check(raws[0] is not None and raws[0] == raws[1], f"mm_gelu {lead}x{n} {env}: identical at 1 and 2 threads")

# The BERT feed-forward (MatMul, Add bias, x/sqrt2, Erf, +1, *x, *0.5) fuses and validates.
e, f = 48, 96
W = const("W", (rng.standard_normal((e, f)) / np.sqrt(e)).astype(np.float32))
B = const("B", (0.1 * rng.standard_normal(f)).astype(np.float32))
nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["h"]),
         helper.make_node("Div", ["h", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["er"]),
         helper.make_node("Add", ["er", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["g0"]),
         helper.make_node("Mul", ["g0", "half"], ["y"])]
m = model(nodes, [vi("x", ["b", 33, e])], [vi("y", ["b", 33, f])],
          [W, B, const("s2", np.array(np.sqrt(2), np.float32)), const("one", np.array(1, np.float32)),
           const("half", np.array(0.5, np.float32))])
p = save(m, "ffn_gelu")
ops, text = optimized_ops(p)
check(ops == {"FusedMatMul": 1}, f"ffn_gelu fused: {ops}")
for b in ("1", "3"):
    ok, text = validate(p, "--dim", f"b={b}")
    check(ok, f"ffn_gelu b={b} validates: {text}")

finish("test_fused_matmul_gelu")
