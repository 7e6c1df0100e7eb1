#!/usr/bin/python3
"""Run an ONNX conformance data set on ONNX Runtime (bench/peer's onnxruntime-node) and compare
with kiln_conformance on the same tests: how many ORT passes, how many kiln passes, and how
many of ORT's passes kiln matches.

usage: ort_conformance.py KILN_CONFORMANCE [--data DIR] [--suites a,b] [--out DIR]

Tensors are read with the onnx package and handed to ort_conformance.js; tests whose inputs
or outputs the onnxruntime-node binding cannot carry (sequences, optionals, bfloat16, float8,
int4) count as not run by ORT and are reported apart."""
import argparse, base64, json, os, subprocess, sys, tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "bench", "peer")
TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
         8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


class Unfit(Exception):
    pass


def encode(name, vi, path):
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None:
        raise Unfit("a non-tensor input or output (sequence, optional, map)")
    if tt.elem_type not in TYPES:
        raise Unfit(f"element type {onnx.TensorProto.DataType.Name(tt.elem_type)}")
    t = onnx.load_tensor(path)
    a = numpy_helper.to_array(t)
    d = {"name": name, "type": TYPES[tt.elem_type], "dims": list(a.shape)}
    if d["type"] == "string":
        d["strings"] = [x.decode() if isinstance(x, bytes) else str(x) for x in a.ravel()]
    else:
        if d["type"] == "float16":
            a = a.view(np.uint16)
        d["b64"] = base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()
    return d


def test_entry(suite, tdir):
    model = os.path.join(tdir, "model.onnx")
    e = {"name": f"{suite}/{os.path.basename(tdir)}", "model": model, "sets": []}
    try:
        m = onnx.load(model, load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        ins = [i for i in m.graph.input if i.name not in inits]
        for s in sorted(os.listdir(tdir)):
            if not s.startswith("test_data_set_"):
                continue
            sd = os.path.join(tdir, s)
            ni = len([f for f in os.listdir(sd) if f.startswith("input_")])
            no = len([f for f in os.listdir(sd) if f.startswith("output_")])
            e["sets"].append({
                "inputs": [encode(ins[i].name, ins[i], os.path.join(sd, f"input_{i}.pb")) for i in range(ni)],
                "outputs": [encode(m.graph.output[i].name, m.graph.output[i], os.path.join(sd, f"output_{i}.pb"))
                            for i in range(no)]})
    except Unfit as x:
        e = {"name": e["name"], "skip": f"not run through onnxruntime-node: {x}", "unfit": True}
    except Exception as x:  # a file the onnx package of this machine cannot read
        e = {"name": e["name"], "skip": f"not run: {type(x).__name__}: {x}", "unfit": True}
    return e


def light_entry(ldir, f):
    model = os.path.join(ldir, f)
    m = onnx.load(model)
    inits = {i.name for i in m.graph.initializer}
    vi = [i for i in m.graph.input if i.name not in inits][0]
    dims = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    n = int(np.prod(dims))
    x = (((np.arange(n, dtype=np.int64) * 7919) % 1000) / 1000.0).astype(np.float32).reshape(dims)
    inp = {"name": vi.name, "type": "float32", "dims": dims, "b64": base64.b64encode(x.tobytes()).decode()}
    out = encode(m.graph.output[0].name, m.graph.output[0], model[:-5] + "_output_0.pb")
    return {"name": "light/" + f[:-5], "model": model, "sets": [{"inputs": [inp], "outputs": [out]}]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kiln_conformance")
    ap.add_argument("--data", default="/var/cache/kiln/onnx-testdata/1.17.0/data")
    ap.add_argument("--suites", default="node,pytorch-converted,pytorch-operator,simple,light")
    ap.add_argument("--out", default=None, help="keep the results (ort.json, kiln failures) here")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="ort-conformance-")
    os.makedirs(out, exist_ok=True)
    tests = []
    for suite in a.suites.split(","):
        sdir = os.path.join(a.data, suite)
        if suite == "light":
            tests += [light_entry(sdir, f) for f in sorted(os.listdir(sdir))
                      if f.startswith("light_") and f.endswith(".onnx")]
        else:
            tests += [test_entry(suite, os.path.join(sdir, t)) for t in sorted(os.listdir(sdir)) if t.startswith("test_")]
        print(f"ort_conformance: {suite} read", file=sys.stderr)
    man, res = os.path.join(out, "manifest.json"), os.path.join(out, "ort.json")
    with open(man, "w") as f:
        json.dump(tests, f)
    subprocess.run(["node", os.path.join(PEER, "ort_conformance.js"), man, res], check=True)
    ort = json.load(open(res))
    kf = os.path.join(out, "kiln_failures.txt")
    subprocess.run([a.kiln_conformance, "--data", a.data, "--suites", a.suites, "--write-expected", kf],
                   check=False, stdout=subprocess.DEVNULL)
    kiln_fail = {l.split()[0] for l in open(kf) if l.strip() and not l.startswith("#")}
    unfit = {t["name"] for t in tests if t.get("unfit")}
    print(f"{'suite':20} {'tests':>6} {'ORT pass':>9} {'kiln pass':>10} {'both':>6} {'ORT only':>9} {'kiln only':>10} {'ORT not run':>12}")
    for suite in a.suites.split(","):
        names = [t["name"] for t in tests if t["name"].startswith(suite + "/")]
        op = {n for n in names if ort[n] == "pass"}
        kp = {n for n in names if n not in kiln_fail}
        print(f"{suite:20} {len(names):6} {len(op):9} {len(kp):10} {len(op & kp):6} {len(op - kp):9} "
              f"{len(kp - op):10} {len(unfit & set(names)):12}")
    with open(os.path.join(out, "ort_only.txt"), "w") as f:
        for n in sorted(ort):
            if ort[n] == "pass" and n in kiln_fail:
                f.write(n + "\n")
    with open(os.path.join(out, "ort_failures.txt"), "w") as f:
        for n in sorted(ort):
            if ort[n] != "pass":
                f.write(f"{n}  # {ort[n][:200]}\n")
    print(f"details in {out}: ort.json, ort_failures.txt, ort_only.txt (ORT passes, kiln does not)")


if __name__ == "__main__":
    main()
