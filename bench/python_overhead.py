"""Per-run overhead of kiln's Python binding on a tiny model: kiln.bench (InferenceSession.run
from Python) against `kiln bench` (kiln_session_run from C) and ONNX Runtime's node binding
(bench/peer/ort_bench.js), alternating, several rounds; prints medians.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [ROUNDS] [REPEAT]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import kiln

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
d = tempfile.mkdtemp()
model = os.path.join(d, "tiny_relu.onnx")
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
onnx.save(m, model)
x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
os.makedirs(os.path.join(d, "in"))
with open(os.path.join(d, "in", "input_0.pb"), "wb") as f:
    f.write(numpy_helper.from_array(x, "x").SerializeToString())
np.save(os.path.join(d, "in", "x.npy"), x)
kiln_bin = os.environ.get("KILN_BIN", os.path.join(root, "build", "kiln"))
ort_js = os.path.join(root, "bench", "peer", "ort_bench.js")
have_ort = os.path.isdir(os.path.join(root, "bench", "peer", "node_modules", "onnxruntime-node"))


def c_run():
    out = subprocess.run([kiln_bin, "bench", model, "--inputs", os.path.join(d, "in"), "--threads", "1",
                          "--warmup", "1000", "--repeat", str(repeat), "--json", "-", "--quiet"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["median_ms"] * 1000


def py_run():
    return kiln.bench(model, feeds={"x": x}, warmup=1000, repeat=repeat, threads=1)["median_ms"] * 1000


def ort_run():
    js = os.path.join(d, "ort.json")
    subprocess.run(["node", ort_js, model, os.path.join(d, "in"), "--threads", "1", "--warmup", "1000",
                    "--repeat", str(repeat), "--json", js], check=True, capture_output=True, text=True)
    with open(js) as f:
        return json.load(f)["median_ms"] * 1000


res = {"C (kiln bench)": [], "Python (kiln.bench)": [], "onnxruntime-node": []}
for r in range(rounds):
    res["C (kiln bench)"].append(c_run())
    res["Python (kiln.bench)"].append(py_run())
    if have_ort:
        res["onnxruntime-node"].append(ort_run())
    print("round %d: " % (r + 1) + ", ".join("%s %.2f us" % (k, v[-1]) for k, v in res.items() if v), flush=True)
med = {k: statistics.median(v) for k, v in res.items() if v}
print("median per run (us) over %d rounds of %d runs, 1 thread, Relu float[1,16]:" % (rounds, repeat))
for k, v in med.items():
    print("  %-22s %8.2f" % (k, v))
print("Python overhead over C: %.2f us" % (med["Python (kiln.bench)"] - med["C (kiln bench)"]))
if "onnxruntime-node" in med:
    print("onnxruntime-node / Python kiln: %.1fx" % (med["onnxruntime-node"] / med["Python (kiln.bench)"]))
