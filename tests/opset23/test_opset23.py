"""The operators of opsets 23-26 (ONNX 1.18-1.20), tested from their specification: models built
with onnx.helper, expected values from the numpy references in refs.py, kiln run at optimisation
levels 0 and 2 against them; with --ort, ONNX Runtime (bench/peer/node_modules) runs the same
models and kiln is compared with it too (a case ONNX Runtime refuses is counted, not compared).

    /usr/bin/python3 tests/opset23/test_opset23.py KILN [--ort] [--keep DIR] [-k SUBSTRING]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, mapping, numpy_helper

import cases

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_BATCH = os.path.join(HERE, "..", "quant", "ort_batch.js")


def make_model(c):
    ins = [helper.make_tensor_value_info(k, mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(v.dtype)], list(v.shape))
           for k, v in c.feeds.items()]
    outs = [onnx.ValueInfoProto(name=o) for o in c.outputs]  # types left to inference
    inits = [numpy_helper.from_array(v, k) for k, v in c.inits.items()]
    g = helper.make_graph(c.nodes, "g", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", c.opset)])
    m.ir_version = 10  # the IR of ONNX 1.16; ONNX Runtime 1.30 and kiln read it with any opset
    return m


def compare(got, want, c):
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if want.dtype.kind in "iub":
        if not np.array_equal(got, want):
            return f"{int((got != want).sum())} of {got.size} differ"
        return None
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    if not np.allclose(g64, w64, rtol=c.rtol, atol=c.atol, equal_nan=True):
        return f"max abs diff {float(np.nanmax(np.abs(g64 - w64)))} (atol {c.atol}, rtol {c.rtol})"
    return None


def run_kiln(kiln, d, c, level):
    kout = os.path.join(d, f"kiln{level}")
    args = [kiln, "run", os.path.join(d, "model.onnx"), "--quiet", "--level", str(level), "--output-dir", kout]
    for k in c.feeds:
        args += ["--input", f"{k}={os.path.join(d, 'in', k + '.npy')}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, "kiln failed: " + (r.stdout + r.stderr).strip()[-400:]
    got = []
    for i in range(len(c.outputs)):
        t = onnx.TensorProto()
        with open(os.path.join(kout, f"output_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        got.append(numpy_helper.to_array(t))
    return got, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--ort", action="store_true", help="also compare with ONNX Runtime")
    ap.add_argument("--keep", default=None, help="keep the case folders here")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    a = ap.parse_args()
    if a.ort and not os.path.isdir(os.path.join(HERE, "..", "..", "bench", "peer", "node_modules", "onnxruntime-node")):
        print("test_opset23: bench/peer/node_modules/onnxruntime-node missing; run scripts/install-deps.sh --test")
        return 1
    root = a.keep or tempfile.mkdtemp(prefix="kiln_opset23_")
    all_cases = [c for c in cases.all_cases() if a.k in c.name]
    dirs = {}
    for c in all_cases:
        d = os.path.join(root, c.name)
        os.makedirs(os.path.join(d, "in"), exist_ok=True)
        onnx.save(make_model(c), os.path.join(d, "model.onnx"))
        for k, v in c.feeds.items():
            np.save(os.path.join(d, "in", k + ".npy"), v)
        dirs[c.name] = d
    if a.ort:
        subprocess.run(["node", ORT_BATCH, root], check=True, stderr=subprocess.DEVNULL, timeout=600)
    failed, stats = 0, {}
    for c in all_cases:
        d = dirs[c.name]
        op = c.name.split("_")[0]
        st = stats.setdefault(op, [0, 0, 0, 0])  # cases, kiln vs numpy failures, ORT compared, ORT disagreements
        st[0] += 1
        problems = []
        got = None
        for level in (0, 2):
            got, err = run_kiln(a.kiln, d, c, level)
            if err:
                problems.append(f"level {level}: {err}")
                break
            for o, gv, wv in zip(c.outputs, got, c.expected):
                p = compare(gv, wv, c)
                if p:
                    problems.append(f"level {level} output {o} vs numpy: {p}")
        if problems:
            st[1] += 1
        if a.ort and got is not None:
            if os.path.exists(os.path.join(d, "ort_error.txt")):
                with open(os.path.join(d, "ort_error.txt")) as f:
                    print(f"  {c.name}: refused by ONNX Runtime: {f.read().strip()[:160]}")
            else:
                st[2] += 1
                for o, gv in zip(c.outputs, got):
                    p = compare(gv, np.load(os.path.join(d, "ort", o + ".npy")), c)
                    if p:
                        problems.append(f"output {o} vs ONNX Runtime: {p}")
                        st[3] += 1
                        break
        if problems:
            failed += 1
            print(f"FAIL {c.name}: " + "; ".join(problems))
    for c, want in cases.bad_cases() if not a.k else []:
        d = os.path.join(root, c.name)
        os.makedirs(os.path.join(d, "in"), exist_ok=True)
        onnx.save(make_model(c), os.path.join(d, "model.onnx"))
        for k, v in c.feeds.items():
            np.save(os.path.join(d, "in", k + ".npy"), v)
        got, err = run_kiln(a.kiln, d, c, 2)
        if got is not None or want not in err or "Sanitizer" in err:
            failed += 1
            print(f"FAIL {c.name}: expected an error naming '{want}', got: {err or 'success'}")
    for op, (n, f, oc, od) in sorted(stats.items()):
        line = f"{op:18s} {n:3d} cases, {f:2d} differ from numpy"
        if a.ort:
            line += f", {oc:3d} compared with ONNX Runtime, {od:2d} differ"
        print(line)
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"test_opset23: {len(all_cases)} cases, {failed} failed")
    return 1 if failed or not all_cases else 0


if __name__ == "__main__":
    sys.exit(main())
