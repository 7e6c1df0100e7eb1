"""kiln profile: help, per-node JSON whose flops follow from the shapes, the op-type table,
advice, and exit codes."""
import json
import os
import tempfile

from kilntest import *

# ceilings in a cache of this test's own, measured quickly once
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kiln_xdg_")
rc, text = kiln("calibrate", "--quick")
check(rc == 0, f"calibrate --quick: {text[-300:]}")

rng = np.random.default_rng(0)
Wc = const("Wc", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
Wm = const("Wm", rng.standard_normal((8 * 6 * 6, 10)).astype(np.float32))
shape = const("shape", np.array([1, -1], dtype=np.int64))
m = model([helper.make_node("Conv", ["x", "Wc"], ["c"], kernel_shape=[3, 3]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("Reshape", ["r", "shape"], ["f"]),
           helper.make_node("MatMul", ["f", "Wm"], ["y"])],
          [vi("x", [1, 3, 8, 8])], [vi("y", [1, 10])], [Wc, Wm, shape])
path = save(m, "profile_model")
out = os.path.join(TMP, "profile.json")

rc, text = kiln("profile", "--help")
check(rc == 0 and "usage: kiln profile" in text, "profile --help exits 0 with usage: " + text[:200])
for opt in ["--inputs", "--warmup", "--repeat", "--threads", "--level", "--top", "--json"]:
    check(opt in text, f"--help mentions {opt}")

for level in ["0", "2"]:
    if os.path.exists(out):
        os.remove(out)
    rc, text = kiln("profile", path, "--level", level, "--threads", "1", "--warmup", "1", "--repeat", "5",
                    "--json", out)
    check(rc == 0, f"level {level}: profile exits 0: {text[-400:]}")
    check("op type" in text and "slowest nodes" in text and "advice" in text,
          f"level {level}: report has the op-type table, slowest nodes and advice: {text[:600]}")
    with open(out) as f:
        r = json.load(f)
    check(r["runs"] == 5 and r["threads"] == 1 and r["median_ms"] > 0, f"level {level}: header fields: {r}")
    nodes = {n["op_type"]: n for n in r["nodes"]}
    conv = nodes.get("Conv") or nodes.get("FusedConv")
    check(conv is not None, f"level {level}: a conv node is listed: {list(nodes)}")
    # 8 output channels x 6 x 6 pixels, each 3*3*3 multiply-adds
    check(conv and conv["flops"] == 2 * 8 * 6 * 6 * 27, f"level {level}: conv flops: {conv}")
    check(conv and conv["output"] == "float[1,8,6,6]", f"level {level}: conv output shape: {conv}")
    mm = nodes.get("MatMul") or nodes.get("FusedMatMul")
    check(mm and mm["flops"] == 2 * 10 * 288, f"level {level}: matmul flops: {mm}")
    check(all(n["ms_per_run"] >= 0 and n["bytes"] > 0 for n in r["nodes"] if n["op_type"] != "Reshape"),
          f"level {level}: every node has a time and moves bytes")
    # the Reshape of the Relu's output is planned over it (a view op in place): it moves nothing
    check(all(n["bytes"] == 0 for n in r["nodes"] if n["op_type"] == "Reshape"),
          f"level {level}: the Reshape in place moves no bytes: {[n for n in r['nodes'] if n['op_type'] == 'Reshape']}")
    # nodes are timed inside the runs: the sum of their mean times is at most the mean run (the
    # median may be far lower under load)
    check(sum(n["ms_per_run"] for n in r["nodes"]) <= r["mean_ms"] * 1.02 + 0.01,
          f"level {level}: node times add up to at most the mean run: {r['node_ms']} {r['mean_ms']}")
    if level == "0":
        check("--level 2" in text, "advice at level 0 suggests --level 2")


# --trace: Chrome trace events, one per node on the caller (plus workers that took part)
trace = os.path.join(TMP, "trace.json")
html = os.path.join(TMP, "report.html")
rc, text = kiln("profile", path, "--level", "0", "--threads", "2", "--repeat", "3", "--trace", trace, "--html", html)
check(rc == 0, f"--trace/--html exit 0: {text[-300:]}")
ev = json.load(open(trace))["traceEvents"] if rc == 0 else []
xs = [e for e in ev if e.get("ph") == "X"]
check({e["name"] for e in xs if e["tid"] == 0} >= set(), "trace has node events")
check(len([e for e in xs if e["tid"] == 0]) == 4, f"one caller event per node: {len(xs)}")
check(all(e["dur"] >= 0 and e["ts"] >= 0 and "flops" in e["args"] and "output" in e["args"] for e in xs),
      "events carry time, FLOPs and shapes")
check(any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev), "threads are named")
conv_ev = [e for e in xs if e["cat"] in ("Conv", "FusedConv")]
check(conv_ev and conv_ev[0]["args"]["flops"] == 2 * 8 * 6 * 6 * 27, f"trace conv flops: {conv_ev[:1]}")

# --html: self-contained, and Chromium renders its three charts
page = open(html).read() if rc == 0 else ""
check("<svg id=\"timeline\"" in page and "<svg id=\"optime\"" in page and "<svg id=\"roofline\"" in page,
      "the page has the timeline, the op-type bars and the roofline")
check("http://" not in page.replace("http://www.w3.org/2000/svg", "") and "<script" not in page,
      "the page needs no network and no script")
chromium = "/usr/bin/chromium"
if os.path.exists(chromium):
    import subprocess
    prof_dir = tempfile.mkdtemp(prefix="kiln_chromium_")
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--user-data-dir=" + prof_dir, "--dump-dom", "file://" + html],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    check("id=\"roofline\"" in dom and "id=\"timeline\"" in dom and "id=\"optime\"" in dom,
          f"Chromium renders the charts: {r.returncode} {r.stderr[-300:]}")
    check(dom.count("class=\"bar\"") >= 3 and dom.count("class=\"pt\"") >= 2 and dom.count("class=\"node\"") >= 4,
          "the DOM has the bars, roofline points and timeline boxes")
else:
    check(False, "chromium is installed (scripts/install-deps.sh)")

# the per-node time is per run: the shares do not grow with the number of runs
shares = []
for reps in ["3", "40"]:
    rc, text = kiln("profile", path, "--threads", "1", "--repeat", reps, "--json", out)
    r = json.load(open(out))
    check(all(abs(n["ms_per_run"] * n["runs"] - n["ms_per_run"] * int(reps)) < 1e-9 for n in r["nodes"]),
          f"--repeat {reps}: every node ran once per run")
    # the upper bound against the mean run, as node times are means over the runs: a run of this
    # model takes tens of µs, so one run held up on a loaded machine lifts the node means well
    # past the median run (CI, AMD EPYC: 3.03 at 40 runs); nodes are timed inside runs, so the
    # sum of their means never passes the mean run. The lower bound against the median run,
    # which a run held up between two nodes (outside every node's time) does not lift
    node_sum = sum(n["ms_per_run"] for n in r["nodes"])
    shares.append((node_sum / r["median_ms"], node_sum / r["mean_ms"]))
check(all(lo > 0.3 and hi < 3 for lo, hi in shares), f"node times per run add up to about a run at 3 and 40 runs: {shares}")

# roofline bounds: a large MatMul is compute-bound, an Add memory-bound; an unfused Conv+BN+Relu
# chain is advice at level 0 that level 2 (which fuses it) no longer gives
Wb = const("Wb", rng.standard_normal((256, 256)).astype(np.float32))
bias = const("bias", rng.standard_normal((256,)).astype(np.float32))
mb = model([helper.make_node("MatMul", ["x", "Wb"], ["m"]), helper.make_node("Add", ["m", "bias"], ["y"])],
           [vi("x", [256, 256])], [vi("y", [256, 256])], [Wb, bias])
rc, text = kiln("profile", save(mb, "profile_bounds"), "--level", "0", "--repeat", "3", "--json", out)
r = json.load(open(out)) if rc == 0 else {"nodes": []}
by = {n["op_type"]: n for n in r["nodes"]}
check(by.get("MatMul", {}).get("bound") == "compute", f"MatMul 256^3 is compute-bound: {by.get('MatMul')}")
check(by.get("Add", {}).get("bound") == "memory", f"Add is memory-bound: {by.get('Add')}")
check(all(n["roof"] > 0 and n["efficiency"] > 0 for n in r["nodes"]), f"every node has a roof: {r['nodes']}")
# nodes run inside the runs one after another: their mean times add up to at most the mean run,
# and to at least half the median run (a run held up between nodes lifts the mean, not them)
check(r.get("mean_ms", 0) > 0 and 0.5 * r["median_ms"] <= r["node_ms"] <= 1.02 * r["mean_ms"],
      f"node times add up to the run: {r.get('node_ms')} vs mean {r.get('mean_ms')}, median {r.get('median_ms')}")

C = 16
cw = const("cw", rng.standard_normal((C, C, 3, 3)).astype(np.float32))
bn = [const(nm, (np.abs(rng.standard_normal(C)) + 0.5).astype(np.float32)) for nm in ["s", "b", "mu", "var"]]
mc = model([helper.make_node("Conv", ["x", "cw"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "b", "mu", "var"], ["n"]),
            helper.make_node("Relu", ["n"], ["y"])],
           [vi("x", [1, C, 32, 32])], [vi("y", [1, C, 32, 32])], [cw] + bn)
pc = save(mc, "profile_cbr")
advice = {}
for level in ["0", "2"]:
    rc, text = kiln("profile", pc, "--level", level, "--repeat", "3", "--json", out)
    advice[level] = json.load(open(out))["advice"] if rc == 0 else []
chain = "unfused chain (Conv+BatchNormalization"
check(any(chain in a and "--level 2" in a for a in advice["0"]), f"level 0 advises fusing Conv+BN: {advice['0']}")
check(not any(chain in a for a in advice["2"]), f"the advice is gone at level 2: {advice['2']}")
rc, text = kiln("profile", pc, "--level", "2", "--repeat", "3")
check("fused nodes" in text and "FusedConv" in text, f"level 2 lists the fused node with what it replaced: {text[-800:]}")

# KILN_PROFILE_CLOCK=thread: node times are the thread's CPU time, positive and within the runs
rc, text = kiln("profile", path, "--threads", "1", "--repeat", "5", "--json", out,
                env={"KILN_PROFILE_CLOCK": "thread"})
check(rc == 0, f"profile with the thread clock exits 0: {text[-400:]}")
r = json.load(open(out))
node_ms = sum(n["ms_per_run"] for n in r["nodes"])
check(all(n["ms_per_run"] > 0 for n in r["nodes"] if n["op_type"] == "Conv" or n["op_type"] == "FusedConv"),
      f"thread clock: the convolution's time is positive: {r['nodes']}")
check(0 < node_ms <= r["mean_ms"] * 1.05 + 0.01,
      f"thread clock: node CPU time {node_ms} ms within the mean run {r['mean_ms']} ms")

rc, text = kiln("profile", path, "--repeat", "0")
check(rc == 2 and "--repeat" in text, f"--repeat 0 is a usage error: {rc} {text}")
rc, text = kiln("profile", path, "--bogus", "1")
check(rc == 2 and "unknown option" in text, f"unknown option is a usage error: {rc} {text}")
rc, text = kiln("profile", os.path.join(TMP, "missing.onnx"))
check(rc == 1, f"a missing model exits 1: {rc} {text}")
finish("test_profile_cli")
