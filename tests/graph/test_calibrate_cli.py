"""kiln calibrate: help, the measured ceilings and their cache (one entry per CPU model and ISA,
other machines' entries kept), --cached, kiln profile calibrating on first use, and errors.
Every run uses its own XDG_CACHE_HOME."""
import json
import os
import tempfile

from kilntest import *

rc, text = kiln("calibrate", "--help")
check(rc == 0 and "usage: kiln calibrate" in text, "calibrate --help exits 0 with usage: " + text[:200])
for word in ["--threads", "--quick", "--cached", "--json", "ceilings.json", "L1", "DRAM", "triad", "dispatch"]:
    check(word in text, f"--help mentions {word}")

cache = tempfile.mkdtemp(prefix="kiln_xdg_")
env = {"XDG_CACHE_HOME": cache}
path = os.path.join(cache, "kiln", "ceilings.json")
rc, text = kiln("calibrate", "--cached", env=env)
check(rc == 1 and "no cached ceilings" in text, f"--cached without a cache exits 1: {rc} {text}")

out = os.path.join(TMP, "ceil.json")
rc, text = kiln("calibrate", "--quick", "--threads", "2", "--json", out, env=env)
check(rc == 0, f"calibrate --quick exits 0: {text[-500:]}")
check("FMA peak" in text and "bandwidth" in text and "dispatch" in text, f"prints the ceilings: {text[:400]}")
check(os.path.exists(path), f"the cache is written to {path}")
entries = json.load(open(path)) if os.path.exists(path) else []
check(len(entries) == 1, f"one entry: {entries}")
e = entries[0] if entries else {}
check(e.get("threads") == 2 and e.get("cpu") and e.get("isa"), f"entry keyed by CPU and ISA, N = 2: {e}")
check(0 < e.get("seconds", 99) < 20, f"calibration takes under 20 s: {e.get('seconds')}")
check(e.get("L1_bytes", 0) > 0 and e.get("L2_bytes", 0) > e.get("L1_bytes", 0) and e.get("L3_bytes", 0) > 0,
      f"cache sizes read: {e}")
for lvl in ["L1", "L2", "L3", "DRAM"]:
    for kind in ["read", "copy", "triad"]:
        for t in ["1t", "nt"]:
            check(e.get(f"{lvl}_{kind}_gbs_{t}", 0) > 0, f"{lvl} {kind} bandwidth at {t}: {e.get(f'{lvl}_{kind}_gbs_{t}')}")
check(e.get("DRAM_buffer_bytes", 0) > e.get("L3_bytes", 0), "the DRAM buffer is larger than L3")
check(any(e.get(f"fma_{i}_gflops_1t", 0) > 0 for i in ["avx512", "avx2", "sse"]), f"an FMA peak: {e}")
check(all(e.get(f"fma_{i}_gflops_nt", 0) >= e.get(f"fma_{i}_gflops_1t", 0) for i in ["avx512", "avx2", "sse"]),
      "N-thread peaks are at least the 1-thread ones")
check(e.get("dispatch_us_nt", -1) >= 0, "dispatch latency measured")
check(json.load(open(out)).get("cpu") == e.get("cpu"), "--json writes the same ceilings")

# another machine's entry survives a recalibration; this machine's is replaced, not added
with open(path) as f:
    lines = f.read().splitlines()
other = dict(e, cpu="Other CPU 9000", isa="avx2")
lines.insert(1, json.dumps(other) + ",")
with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
rc, text = kiln("calibrate", "--quick", env=env)
entries = json.load(open(path))
check(rc == 0 and len(entries) == 2 and sorted(x["cpu"] for x in entries) == sorted(["Other CPU 9000", e["cpu"]]),
      f"recalibrating keeps the other machine and replaces this one: {[x['cpu'] for x in entries]}")
rc, text = kiln("calibrate", "--cached", env=env)
check(rc == 0 and "FMA peak" in text, f"--cached prints the cached ceilings: {rc} {text[:200]}")

# kiln profile uses the cache, and calibrates (with a progress line) when there is none
m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 64])], [vi("y", [1, 64])])
mp = save(m, "calib_relu")
rc, text = kiln("profile", mp, "--repeat", "2", env=env)
check(rc == 0 and "calibrating" not in text and e["cpu"] in text, f"profile uses the cached ceilings: {text[:300]}")
fresh = tempfile.mkdtemp(prefix="kiln_xdg_")
rc, text = kiln("profile", mp, "--repeat", "2", env={"XDG_CACHE_HOME": fresh})
check(rc == 0 and "calibrating" in text, f"profile calibrates on first use with a progress line: {text[:300]}")
check(os.path.exists(os.path.join(fresh, "kiln", "ceilings.json")), "and caches the result")

rc, text = kiln("calibrate", "--bogus")
check(rc == 2 and "unknown option" in text, f"unknown option is a usage error: {rc} {text}")
rc, text = kiln("calibrate", "--threads", "0")
check(rc == 2, f"--threads 0 is a usage error: {rc} {text}")
rc, text = kiln("calibrate", "--quick", env={"XDG_CACHE_HOME": "/proc/no/such/dir"})
check(rc == 1 and "cannot write" in text, f"an unwritable cache is an error, not a crash: {rc} {text[-200:]}")
finish("test_calibrate_cli")
