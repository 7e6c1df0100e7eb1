#!/usr/bin/env python3
"""The benchmark models at opset 13 and re-exported at later opsets, side by side: the fused
graph `kiln optimize` leaves, and `kiln bench` medians, the variants alternating within each
round (several rounds; the median of the rounds' medians is reported, with the ratio to opset 13).

    /usr/bin/python3 bench/opset_compare.py [--models a,b] [--rounds 3] [--repeat 30] [--threads 2]

Variants (bench/opset_upgrade.py): "20" the same operators at opset 20, "23s" opset 23 with the
standard Gelu and LayerNormalization, and for the `attention` micro-model "23a" the standard
Attention op (opset 23) in place of its Transpose-MatMul-Div-Softmax-MatMul chain. Needs
bench/models (bench/make_models.py) and a release build (build/kiln).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import opset_upgrade  # noqa: E402

DEFAULT = "bert_encoder,gpt_decoder,resnet18,squeezenet1_1,mlp_autoencoder,attention,layernorm,gelu"


def attention_standard(src, dst):
    """The attention micro-model (softmax(q k^T / sqrt(d)) v on (1, 4, S, 64)) as one Attention."""
    m = onnx.load(src)
    g = m.graph
    ins = [i.name for i in g.input]
    node = helper.make_node("Attention", ins, [g.output[0].name])
    graph = helper.make_graph([node], "attention", list(g.input), list(g.output))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, dst)


def fused_ops(kiln, path):
    out = path[:-5] + ".opt.onnx"
    r = subprocess.run([kiln, "optimize", path, out], capture_output=True, text=True, check=True)
    ops, on = {}, False
    for line in r.stdout.splitlines():
        f = line.split()
        if f and f[0] == "op":
            on = True
            continue
        if on and (not f or f[0] == "total"):
            break
        if on and len(f) == 3 and int(f[2]) > 0:
            ops[f[0]] = int(f[2])
    return ops


def bench(kiln, path, inputs, a):
    args = [kiln, "bench", path, "--threads", str(a.threads), "--repeat", str(a.repeat), "--warmup", "5",
            "--json", "-", "--quiet"]
    for n, f in inputs.items():
        args += ["--input", f"{n}={f}"]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kiln", default=os.path.join(HERE, "..", "build", "kiln"))
    ap.add_argument("--dir", default=os.path.join(HERE, "models"))
    a = ap.parse_args()
    with open(os.path.join(a.dir, "manifest.json")) as f:
        manifest = json.load(f)
    rows = []
    for name in a.models.split(","):
        d = os.path.join(a.dir, name)
        base = os.path.join(d, "model.onnx")
        inputs = {i["name"]: os.path.join(d, "inputs", i["name"] + ".npy") for i in manifest[name]["inputs"]}
        variants = {"13": base}
        for tag, opset, std in (("20", 20, False), ("23s", 23, True)):
            p = os.path.join(d, f"model_opset{tag}.onnx")
            onnx.save(opset_upgrade.upgrade(onnx.load(base), opset, std)[0], p)
            variants[tag] = p
        if name == "attention":
            variants["23a"] = os.path.join(d, "model_opset23a.onnx")
            attention_standard(base, variants["23a"])
        fused = {t: fused_ops(a.kiln, p) for t, p in variants.items()}
        times = {t: [] for t in variants}
        for r in range(a.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for t in order:
                times[t].append(bench(a.kiln, variants[t], inputs, a))
        med = {t: float(np.median(v)) for t, v in times.items()}
        for t in variants:
            rows.append((name, t, fused[t] == fused["13"], med[t], med[t] / med["13"],
                         ", ".join(f"{k} {v}" for k, v in sorted(fused[t].items()))))
            print(f"{name} opset {t}: {med[t]:.3f} ms, {med[t] / med['13']:.3f}x, same fusions {fused[t] == fused['13']}",
                  file=sys.stderr)
    print("| model | opset | same fused graph as opset 13 | median ms | vs opset 13 | fused graph |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, t, same, ms, ratio, ops in rows:
        print(f"| {name} | {t} | {'yes' if same else 'no'} | {ms:.3f} | {ratio:.3f} | {ops} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
