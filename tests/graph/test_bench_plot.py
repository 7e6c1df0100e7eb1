"""kiln bench --plot: one latency quantile curve per batch size in a well-formed SVG, and
--profile (nodes timed while benchmarking) still benchmarks."""
import os
import xml.etree.ElementTree as ET

from kilntest import *

m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", 64])], [vi("y", ["batch", 64])])
path = save(m, "plot_relu")
svg = os.path.join(TMP, "lat.svg")
rc, text = kiln("bench", path, "--batch", "1,4,16", "--repeat", "20", "--warmup", "2", "--plot", svg)
check(rc == 0 and os.path.exists(svg), f"bench --plot exits 0 and writes the file: {text[-300:]}")
root = ET.parse(svg).getroot() if os.path.exists(svg) else None
ns = "{http://www.w3.org/2000/svg}"
lines = root.findall(f"{ns}polyline") if root is not None else []
check(len(lines) == 3, f"one curve per batch size: {len(lines)}")
check(all(len(p.get("points").split()) == 20 for p in lines), "each curve has one point per timed run")
labels = [t.text for t in root.iter(f"{ns}text")] if root is not None else []
check(any(t and t.startswith("batch 16: p50") for t in labels), f"the legend gives p50 and p99: {labels}")
rc, text = kiln("bench", path, "--repeat", "5", "--profile")
check(rc == 0 and "median" in text, f"bench --profile runs: {text[-300:]}")
rc, text = kiln("bench", path, "--plot", "/proc/nope/x.svg", "--repeat", "2")
check(rc == 1 and "cannot write" in text, f"an unwritable plot path is an error: {rc} {text[-200:]}")
rc, text = kiln("bench", "--help")
check("--plot" in text and "--profile" in text, "--help mentions --plot and --profile")
finish("test_bench_plot")
