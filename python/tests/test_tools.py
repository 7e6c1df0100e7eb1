"""kiln-only extras: kiln.optimize, kiln.validate, kiln.bench, kiln.profile."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kt  # noqa: E402
from kt import check, np  # noqa: E402

import kiln  # noqa: E402

with tempfile.TemporaryDirectory() as d:
    for level in (0, 1, 2):
        out = os.path.join(d, "l%d.onnx" % level)
        kiln.optimize(kt.TINY_CNN, out, level=level)
        n = len(kt.onnx.load(out).graph.node)
        check(n > 0, "optimize level %d wrote %d nodes" % (level, n))
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    a = kiln.InferenceSession(os.path.join(d, "l0.onnx")).run(None, {"image": x})[0]
    b = kiln.InferenceSession(kt.TINY_CNN).run(None, {"image": x})[0]
    check(np.allclose(a, b, atol=1e-5), "level-0 optimised file runs like the model")
    check(len(kt.onnx.load(os.path.join(d, "l2.onnx")).graph.node) < len(kt.onnx.load(os.path.join(d, "l0.onnx")).graph.node),
          "level 2 fuses nodes")

v = kiln.validate(kt.TINY_CNN, seeds=2)
check(len(v) == 2 and all(r["ok"] and r["max_abs"] < 1e-4 for r in v), "validate %r" % v)

r = kiln.bench(kt.TINY_CNN, warmup=2, repeat=20, threads=1)
js = subprocess.run([kt.KILN_BIN, "bench", kt.TINY_CNN, "--warmup", "2", "--repeat", "20", "--threads", "1", "--json", "-",
                     "--quiet"], check=True, capture_output=True, text=True).stdout
c = json.loads(js)
missing = [k for k in ("model", "batch", "threads", "level", "warmup", "repeat", "load_ms", "median_ms", "p90_ms",
                       "p99_ms", "min_ms", "max_ms", "mean_ms", "stddev_ms", "throughput", "peak_rss_bytes",
                       "arena_bytes", "intermediate_bytes", "first_run_ms", "prepacked_nodes", "nodes", "rewrites",
                       "load_peak_rss_bytes", "inputs") if k not in r]
check(not missing, "bench lacks %s" % missing)
check(sorted(r) == sorted(c), "bench fields are kiln bench --json's: %s" % sorted(set(r) ^ set(c)))
check(r["inputs"] == c["inputs"] and r["rewrites"] == c["rewrites"], "bench inputs/rewrites %r" % r)
check(r["repeat"] == 20 and r["threads"] == 1 and r["nodes"] == c["nodes"] and 0 < r["min_ms"] <= r["median_ms"],
      "bench values %r" % r)
p = kiln.profile(kt.TINY_CNN, runs=3, threads=1)
check(len(p) == c["nodes"] and all(e["runs"] == 3 for e in p), "profile %r" % p[:2])
check(p[0]["total_ms"] >= p[-1]["total_ms"] and any(e["flops"] > 0 for e in p), "profile sorted, flops counted")
kt.finish("test_tools")
