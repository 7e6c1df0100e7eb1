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
    check(all(n["ms_per_run"] >= 0 and n["bytes"] > 0 for n in r["nodes"]),
          f"level {level}: every node has a time and moves bytes")
    # nodes are timed inside the runs; the mean of their sums may exceed the median run under
    # load, so only a gross excess is an error
    check(sum(n["ms_per_run"] for n in r["nodes"]) <= r["median_ms"] * 5 + 1.0,
          f"level {level}: node times add up to about a run")
    if level == "0":
        check("--level 2" in text, "advice at level 0 suggests --level 2")

rc, text = kiln("profile", path, "--repeat", "0")
check(rc == 2 and "--repeat" in text, f"--repeat 0 is a usage error: {rc} {text}")
rc, text = kiln("profile", path, "--bogus", "1")
check(rc == 2 and "unknown option" in text, f"unknown option is a usage error: {rc} {text}")
rc, text = kiln("profile", os.path.join(TMP, "missing.onnx"))
check(rc == 1, f"a missing model exits 1: {rc} {text}")
finish("test_profile_cli")
