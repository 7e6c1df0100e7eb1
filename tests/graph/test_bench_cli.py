"""kiln bench: help, JSON fields and their sanity, --batch sweeps, exit codes."""
import json
import os

from kilntest import *

rng = np.random.default_rng(0)
W = const("W", rng.standard_normal((8, 4)).astype(np.float32))
B = const("B", rng.standard_normal(4).astype(np.float32))
m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["hb"]),
           helper.make_node("Relu", ["hb"], ["y"])],
          [vi("x", ["N", 8])], [vi("y", ["N", 4])], [W, B])
dyn = save(m, "bench_dyn")
m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
          [vi("x", [2, 8])], [vi("y", [2, 4])], [W])
fixed = save(m, "bench_fixed")
FAST = ["--warmup", "1", "--repeat", "7"]
FIELDS = ["model", "batch", "threads", "level", "warmup", "repeat", "load_ms", "median_ms", "p90_ms",
          "p99_ms", "min_ms", "max_ms", "mean_ms", "stddev_ms", "throughput", "peak_rss_bytes",
          "arena_bytes", "nodes", "rewrites", "inputs", "first_run_ms", "prepacked_nodes"]


def bench_json(*args):
    out = os.path.join(TMP, "bench.json")
    if os.path.exists(out):
        os.remove(out)
    rc, text = kiln("bench", *args, "--json", out)
    if rc != 0 or not os.path.exists(out):
        return rc, None, text
    with open(out) as f:
        return rc, json.load(f), text


def sane(r, what):
    """Field presence and the orderings every result must satisfy."""
    missing = [k for k in FIELDS if k not in r]
    check(not missing, f"{what}: fields missing: {missing}")
    if missing:
        return
    check(isinstance(r["arena_bytes"], int) and isinstance(r["intermediate_bytes"], int)
          and 0 <= r["arena_bytes"] and (r["intermediate_bytes"] == 0 or r["arena_bytes"] <= r["intermediate_bytes"] + 64 * 64),
          f"{what}: arena_bytes is the planned arena, at most the intermediates it holds: {r['arena_bytes']} {r['intermediate_bytes']}")
    check(0 < r["min_ms"] <= r["median_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"],
          f"{what}: 0 < min <= median <= p90 <= p99 <= max: {r}")
    check(r["min_ms"] <= r["mean_ms"] <= r["max_ms"], f"{what}: min <= mean <= max")
    check(abs(r["throughput"] - r["batch"] * 1000.0 / r["median_ms"]) <= 1e-3 * r["throughput"],
          f"{what}: throughput = batch * 1000 / median: {r['throughput']} {r['batch']} {r['median_ms']}")
    check(r["peak_rss_bytes"] > 1 << 20, f"{what}: peak RSS is plausible: {r['peak_rss_bytes']}")
    check(r["load_ms"] >= 0, f"{what}: load_ms >= 0")


# --help
rc, text = kiln("bench", "--help")
check(rc == 0 and "usage: kiln bench" in text, "bench --help exits 0 with usage: " + text[:200])
for opt in ["--inputs", "--input", "--dim", "--batch", "--warmup", "--repeat", "--threads", "--level",
            "--json"]:
    check(opt in text, f"--help mentions {opt}")

# One result: an object, text report, no progress bar when stderr is not a terminal.
rc, r, text = bench_json(dyn, *FAST, "--threads", "1", "--level", "1")
check(rc == 0 and isinstance(r, dict), "bench --json writes one object: " + text)
if isinstance(r, dict):
    sane(r, "single")
    check(r["repeat"] == 7 and r["warmup"] == 1, f"counts recorded: {r['repeat']} {r['warmup']}")
    check(r["threads"] == 1 and r["level"] == 1 and r["batch"] == 1, f"options recorded: {r}")
    check(r["model"] == dyn, "model path recorded")
    check(r["inputs"] == [{"name": "x", "dtype": "float", "shape": [1, 8]}], f"inputs recorded: {r['inputs']}")
for word in ["median", "p90", "p99", "min", "inferences/s", "peak RSS", "load", "arena      batch"]:
    check(word in text, f"report mentions '{word}'")
check("\r" not in text and "[####" not in text, "no progress bar when stderr is not a terminal")

# Graph facts: level 0 keeps the three nodes, level 2 fuses MatMul+Add+Relu into one.
rc, r0, _ = bench_json(dyn, *FAST, "--level", "0")
rc, r2, _ = bench_json(dyn, *FAST, "--level", "2")
check(r0 and r2 and r0["nodes"] == 3 and r0["rewrites"] == 0 and r2["nodes"] == 1 and r2["rewrites"] >= 1,
      f"nodes and rewrites per level: {r0 and (r0['nodes'], r0['rewrites'])} {r2 and (r2['nodes'], r2['rewrites'])}")

# --dim sets the symbolic dim of random inputs; batch follows it.
rc, r, text = bench_json(dyn, *FAST, "--dim", "N=6")
check(rc == 0 and r and r["batch"] == 6 and r["inputs"][0]["shape"] == [6, 8], f"--dim N=6: {r} {text}")

# --batch: a list, one object per size, inputs resized.
rc, r, text = bench_json(dyn, *FAST, "--batch", "1,3,16")
check(rc == 0 and isinstance(r, list) and len(r) == 3, "--batch gives a list of 3: " + text)
if isinstance(r, list) and len(r) == 3:
    check([x["batch"] for x in r] == [1, 3, 16], f"batches in order: {[x['batch'] for x in r]}")
    check([x["inputs"][0]["shape"][0] for x in r] == [1, 3, 16], "inputs follow the batch size")
    for x in r:
        sane(x, f"batch {x['batch']}")
    check(r[0]["peak_rss_bytes"] <= r[1]["peak_rss_bytes"] <= r[2]["peak_rss_bytes"],
          "peak RSS is a high-water mark")
    check(len({x["load_ms"] for x in r}) == 1, "one load for all batch sizes")

# --batch with an input file: rows repeat to fill the batch; a single size still gives a list.
x = os.path.join(TMP, "x.npy")
np.save(x, rng.standard_normal((2, 8)).astype(np.float32))
rc, r, text = bench_json(dyn, *FAST, "--input", f"x={x}", "--batch", "5")
check(rc == 0 and isinstance(r, list) and len(r) == 1 and r[0]["inputs"][0]["shape"] == [5, 8],
      f"file input tiled to batch 5: {r} {text}")
rc, r, text = bench_json(dyn, *FAST, "--input", f"x={x}")
check(rc == 0 and isinstance(r, dict) and r["batch"] == 2, f"batch of a file input is its dim 0: {r}")

# String inputs from --inputs DIR are tiled too.
m = model([helper.make_node("Identity", ["s"], ["t"])], [vi("s", ["N", 2], TensorProto.STRING)],
          [vi("t", ["N", 2], TensorProto.STRING)])
strs = save(m, "bench_strings")
sdir = os.path.join(TMP, "strings")
os.makedirs(sdir, exist_ok=True)
with open(os.path.join(sdir, "input_0.pb"), "wb") as f:
    f.write(numpy_helper.from_array(np.array([["a", "bb"], ["ccc", "d"]], dtype=object), "s").SerializeToString())
rc, r, text = bench_json(strs, *FAST, "--inputs", sdir, "--batch", "3")
check(rc == 0 and r and r[0]["inputs"][0]["shape"] == [3, 2], f"string input tiled to batch 3: {r} {text}")

# --json - writes JSON to stdout and the report to stderr; --quiet prints nothing else.
rc, text = kiln("bench", dyn, *FAST, "--quiet", "--json", "-")
try:
    ok = rc == 0 and isinstance(json.loads(text), dict)
except ValueError:
    ok = False
check(ok, "--quiet --json - prints only the JSON object: " + text[:300])

# Usage errors: exit 2.
for args in [[], ["--repeat", "5"], [dyn, "--repeat", "0"], [dyn, "--repeat", "x"],
             [dyn, "--warmup", "-1"], [dyn, "--batch", "0"], [dyn, "--batch", "1,,2"],
             [dyn, "--batch", "a"], [dyn, "--level", "7"], [dyn, "--threads", "-2"], [dyn, "--bogus"],
             [dyn, "--repeat"], [dyn, "--dim", "N"], [dyn, "--input", "nofile"], [dyn, "extra"]]:
    rc, text = kiln("bench", *args)
    check(rc == 2, f"bench {args} exits 2, got {rc}: {text[:200]}")

# Model and run errors: exit 1, and no JSON file left behind.
bad = os.path.join(TMP, "bad.onnx")
with open(bad, "wb") as f:
    f.write(b"this is not a model")
out = os.path.join(TMP, "none.json")
for args, what in [([bad], "corrupt model"), ([os.path.join(TMP, "missing.onnx")], "missing model"),
                   ([fixed, "--batch", "4"], "--batch without a symbolic dim 0"),
                   ([dyn, "--input", f"nosuch={x}"], "unknown input name"),
                   ([dyn, "--input", f"x={os.path.join(TMP, 'missing.npy')}"], "missing input file")]:
    rc, text = kiln("bench", *args, *FAST, "--json", out)
    check(rc == 1, f"{what}: exit 1, got {rc}: {text[:200]}")
    check(not os.path.exists(out), f"{what}: no JSON file written")
rc, text = kiln("bench", dyn, *FAST, "--json", os.path.join(TMP, "no", "such", "dir.json"))
check(rc == 1, f"unwritable --json path: exit 1, got {rc}")

finish("test_bench_cli")
