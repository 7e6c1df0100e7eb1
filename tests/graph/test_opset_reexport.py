"""The benchmark models re-exported at later opsets get the same fusions as at opset 13.

Small models from bench/make_models.py (PyTorch's opset-13 exports) are rewritten by
bench/opset_upgrade.py to opset 20 (the same operators, Reduce* axes as inputs) and to opset 23
with the standard operators a current exporter writes (Gelu, LayerNormalization). For each,
`kiln optimize` must leave the same fused graph (op type -> count) after the same fusion
rewrites, and `kiln run` at level 2 the same outputs as the opset-13 model.
"""
import json
import os
import re
import subprocess
import sys

from kilntest import KILN, TMP, check, finish, np, numpy_helper, onnx

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import opset_upgrade  # noqa: E402

MODELS = ["bert_encoder", "gpt_decoder", "conv_bn_relu", "mlp_autoencoder", "squeezenet1_1"]
VARIANTS = [("opset20", 20, False), ("opset23_standard_ops", 23, True)]


def optimized(path):
    """(op -> count after optimisation, fusion pass -> rewrites) from `kiln optimize`."""
    out = path[:-5] + ".opt.onnx"
    r = subprocess.run([KILN, "optimize", path, out], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"kiln optimize {path}: {r.stdout[-300:]} {r.stderr[-300:]}")
    ops, passes, section = {}, {}, None
    for line in r.stdout.splitlines():
        f = line.split()
        if not f:
            section = None
            continue
        if f[0] in ("op", "pass", "fused"):
            section = f[0]
            continue
        if section == "op" and len(f) == 3 and f[0] not in ("total", "initializers") and int(f[2]) > 0:
            ops[f[0]] = int(f[2])
        if section == "pass" and len(f) == 2 and f[0].startswith("fuse_"):
            passes[f[0]] = int(f[1])
    return ops, passes


def run(path, inputs):
    out = path[:-5] + "_out"
    args = [KILN, "run", path, "--quiet", "--output-dir", out]
    for name, f in inputs.items():
        args += ["--input", f"{name}={f}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"kiln run {path}: {r.stderr[-300:]}")
    vals = []
    for fn in sorted(f for f in os.listdir(out) if re.match(r"output_\d+\.pb$", f)) if r.returncode == 0 else []:
        t = onnx.TensorProto()
        with open(os.path.join(out, fn), "rb") as fh:
            t.ParseFromString(fh.read())
        vals.append(numpy_helper.to_array(t))
    return vals


def main():
    models = os.path.join(TMP, "models")
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "make_models.py"), models, "--only",
                        ",".join(MODELS)], capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"make_models: {r.stderr[-500:]}")
    if r.returncode:
        return
    with open(os.path.join(models, "manifest.json")) as f:
        manifest = json.load(f)
    for name in MODELS:
        d = os.path.join(models, name)
        base = os.path.join(d, "model.onnx")
        inputs = {i["name"]: os.path.join(d, "inputs", i["name"] + ".npy") for i in manifest[name]["inputs"]}
        ops13, passes13 = optimized(base)
        check(any(p > 0 for p in passes13.values()), f"{name}: some fusion applies at opset 13")
        want = run(base, inputs)
        for tag, opset, std in VARIANTS:
            m, counts = opset_upgrade.upgrade(onnx.load(base), opset, std)
            p = os.path.join(d, f"model_{tag}.onnx")
            onnx.save(m, p)
            ops, passes = optimized(p)
            check(ops == ops13, f"{name} {tag}: fused graph {ops} vs opset 13 {ops13}")
            check(passes == passes13, f"{name} {tag}: fusion rewrites {passes} vs opset 13 {passes13}")
            if std and name in ("bert_encoder", "gpt_decoder"):
                check(counts.get("Gelu", 0) > 0 and counts.get("LayerNormalization", 0) > 0,
                      f"{name}: the standard-ops rewrite wrote Gelu and LayerNormalization ({counts})")
            got = run(p, inputs)
            check(len(got) == len(want), f"{name} {tag}: {len(got)} outputs vs {len(want)}")
            for g, w in zip(got, want):
                err = float(np.abs(g.astype(np.float64) - w).max(initial=0)) / (float(np.abs(w).max(initial=0)) or 1)
                check(g.shape == w.shape and err < 1e-5, f"{name} {tag}: output differs by {err:.3g} of its range")
            fused = {k: v for k, v in passes.items() if v}
            print(f"{name:16s} {tag:22s} same fusions: {ops == ops13 and passes == passes13}  {fused}")


main()
finish("test_opset_reexport")
