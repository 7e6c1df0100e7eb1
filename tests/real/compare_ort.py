#!/usr/bin/env python3
"""Run each model folder (from make_models.py) on kiln and on ONNX Runtime and compare outputs.

    /usr/bin/python3 tests/real/compare_ort.py MODELS_DIR [--kiln build/kiln] [--rtol 1e-4]

kiln runs each model 3 times (the first run measures the memory plan, the later ones use it) and
must give the same bytes every time; the last run's outputs are compared. Prints one line per model with the max abs and relative error per output; exits 1 if any output
differs by more than rtol relative to the output's largest magnitude (plus a 1e-5 floor).
A model folder may hold tolerance.txt for a model whose precision is lower by design:
`range R` (R relative to the output's largest magnitude) or `element ATOL RTOL` (each element
within ATOL + RTOL * |expected|, ONNX Runtime's own test checker's form).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ORT = os.path.join(HERE, "..", "..", "bench", "peer", "ort_run.js")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--level", default="2")
    a = ap.parse_args()
    bad = 0
    for name in sorted(os.listdir(a.models)):
        d = os.path.join(a.models, name)
        model = os.path.join(d, "model.onnx")
        if not os.path.exists(model):
            continue
        ins = os.path.join(d, "inputs")
        with tempfile.TemporaryDirectory() as tmp:
            kout, oout = os.path.join(tmp, "kiln"), os.path.join(tmp, "ort")
            args = [a.kiln, "run", model, "--quiet", "--level", a.level, "--runs", "3", "--output-dir", kout]
            for f in sorted(os.listdir(ins)):
                args += ["--input", f"{f[:-4]}={os.path.join(ins, f)}"]
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name:22s} KILN ERROR: {r.stderr.strip()[:300]}")
                bad += 1
                continue
            r = subprocess.run(["node", ORT, model, ins, oout], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name:22s} ORT ERROR: {r.stderr.strip()[:300]}")
                bad += 1
                continue
            outs = [o.name for o in onnx.load(model, load_external_data=False).graph.output]
            tol = ["range", str(a.rtol)]
            if os.path.exists(os.path.join(d, "tolerance.txt")):
                tol = open(os.path.join(d, "tolerance.txt")).read().split()
            parts, ok = [], True
            for i, o in enumerate(outs):
                k = numpy_helper.to_array(onnx.load_tensor(os.path.join(kout, f"output_{i}.pb")))
                e = np.load(os.path.join(oout, o.replace("/", "_") + ".npy"))
                if k.shape != e.shape:
                    parts.append(f"{o}: shape {k.shape} vs {e.shape}")
                    ok = False
                    continue
                k64, e64 = k.astype(np.float64), e.astype(np.float64)
                diff = np.abs(k64 - e64)
                scale = max(np.abs(e64).max() if e64.size else 0.0, 1e-30)
                mabs = diff.max() if diff.size else 0.0
                rel = mabs / scale
                if tol[0] == "element":
                    ok &= bool((diff <= float(tol[1]) + float(tol[2]) * np.abs(e64)).all())
                else:
                    ok &= bool(mabs <= 1e-5 + float(tol[1]) * scale)
                parts.append(f"{o}: max abs {mabs:.3g} rel {rel:.3g}")
            print(f"{name:22s} {'ok  ' if ok else 'DIFF'} " + "; ".join(parts))
            bad += not ok
    print(f"{bad} models differ or fail")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
