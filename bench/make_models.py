#!/usr/bin/env python3
"""Make kiln's benchmark models with Debian's python3-torch / python3-torchvision.

    /usr/bin/python3 bench/make_models.py [OUT] [--only NAME,NAME...] [--list]

OUT defaults to bench/models (ignored by git). Each model gets OUT/<name>/model.onnx and
OUT/<name>/inputs/<input name>.npy (the inputs every benchmark feeds, to kiln and to ONNX
Runtime alike); OUT/manifest.json lists the models with their group ("model": whole networks,
"micro": one fusion pattern each), inputs and a one-line description.

All weights are random with fixed seeds (one seed per model, so models do not depend on each
other). Exports use opset 13, no constant folding, and TrainingMode.PRESERVE on modules in eval
mode, so BatchNormalization nodes stay in the graph (with non-trivial running statistics) rather
than being folded into the convolutions by the exporter: folding them is the runtime's job. Dim 0
of every input is symbolic ("batch") wherever the network allows it, so `kiln bench --batch`
can sweep it.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 13


def _torch():
    import torch  # noqa: F401  (imported lazily: --list needs no torch)
    return torch


def randomize_bn(module):
    """Non-trivial BatchNorm statistics and affine parameters (fresh ones are 0/1: a no-op)."""
    import torch.nn as nn
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)


def export(out, name, module, inputs, batch_dynamic=True, output_names=("output",)):
    """Export module(*inputs) to OUT/name/model.onnx; inputs is a list of (name, tensor)."""
    torch = _torch()
    module.eval()
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    names = [n for n, _ in inputs]
    args = tuple(t for _, t in inputs)
    dynamic = None
    if batch_dynamic:
        dynamic = {n: {0: "batch"} for n in names}
        dynamic.update({o: {0: "batch"} for o in output_names})
    # Not under torch.no_grad(): with gradients off, nn.TransformerEncoderLayer takes its fused
    # "fast path" (aten::_transformer_encoder_layer_fwd), which has no ONNX export.
    torch.onnx.export(module, args, os.path.join(d, "model.onnx"), opset_version=OPSET,
                      do_constant_folding=False, input_names=names,
                      output_names=list(output_names), dynamic_axes=dynamic,
                      training=torch.onnx.TrainingMode.PRESERVE)
    for n, t in inputs:
        np.save(os.path.join(d, "inputs", n + ".npy"), t.detach().numpy())
    return [{"name": n, "dtype": str(t.detach().numpy().dtype), "shape": list(t.shape)}
            for n, t in inputs]


# ---- whole networks ------------------------------------------------------------------------

def vision(tv_name):
    def make(out, name):
        torch = _torch()
        import torchvision
        torch.manual_seed(0)
        m = getattr(torchvision.models, tv_name)()
        randomize_bn(m)
        return export(out, name, m, [("input", torch.randn(1, 3, 224, 224))])
    return make


def bert_encoder(out, name):
    """BERT-style encoder: embedding, 4 post-norm layers, hidden 256, 4 heads, FFN 1024, GELU."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(1)

    class Encoder(nn.Module):
        def __init__(self, vocab=1000, d=256, heads=4, layers=4, seq=128):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
            self.norm = nn.LayerNorm(d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                               activation="gelu")
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        def forward(self, ids):
            return self.enc(self.norm(self.emb(ids) + self.pos))

    return export(out, name, Encoder(), [("input_ids", torch.randint(0, 1000, (1, 128)))])


def gpt_decoder(out, name):
    """GPT-style decoder: 4 pre-norm blocks with a causal mask, hidden 256, 4 heads, seq 128,
    tied-size LM head over a 1000-token vocabulary."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(2)

    class Decoder(nn.Module):
        def __init__(self, vocab=1000, d=256, heads=4, layers=4, seq=128):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
            self.blocks = nn.ModuleList(
                [nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                            norm_first=True, activation="gelu")
                 for _ in range(layers)])
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("causal", torch.triu(torch.full((seq, seq), float("-inf")), 1))

        def forward(self, ids):
            x = self.emb(ids) + self.pos
            for b in self.blocks:
                x = b(x, src_mask=self.causal)
            return self.head(self.norm(x))

    return export(out, name, Decoder(), [("input_ids", torch.randint(0, 1000, (1, 128)))])


def mlp_autoencoder(out, name):
    """784-512-256-64-256-512-784 autoencoder (Gemm + Relu, Sigmoid output), batch 64."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                      nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 256), nn.ReLU(),
                      nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 784), nn.Sigmoid())
    return export(out, name, m, [("input", torch.rand(64, 784))])


# ---- fusion micro-models -------------------------------------------------------------------

def conv_bn_relu(out, name):
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(10)
    m = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
    randomize_bn(m)
    return export(out, name, m, [("input", torch.randn(1, 64, 56, 56))])


def matmul_add_relu(out, name):
    """nn.Linear on a rank-3 input exports as MatMul + Add (not Gemm), then Relu."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(11)
    m = nn.Sequential(nn.Linear(768, 768), nn.ReLU())
    return export(out, name, m, [("input", torch.randn(1, 128, 768))])


def attention(out, name):
    """softmax(q k^T / sqrt(64)) v on (1,4,256,64): Transpose, MatMul, Div, Softmax, MatMul."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(12)

    class Attn(nn.Module):
        def forward(self, q, k, v):
            return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 8.0, dim=-1), v)

    shape = (1, 4, 256, 64)
    return export(out, name, Attn(), [("q", torch.randn(*shape)), ("k", torch.randn(*shape)),
                                      ("v", torch.randn(*shape))])


def embedding(out, name):
    """Token embedding (Gather from an 8000x768 table) + learned positions (Add) + Relu."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(13)

    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8000, 768)
            self.pos = nn.Parameter(torch.randn(512, 768) * 0.1)

        def forward(self, ids):
            return torch.relu(self.emb(ids) + self.pos)

    return export(out, name, Emb(), [("input_ids", torch.randint(0, 8000, (1, 512)))])


def layernorm(out, name):
    """nn.LayerNorm(768) at opset 13 (no LayerNormalization op yet): ReduceMean, Sub, Pow,
    ReduceMean, Add, Sqrt, Div, Mul, Add on (64,128,768)."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(14)
    m = nn.LayerNorm(768)
    m.weight.data.uniform_(0.5, 1.5)
    m.bias.data.uniform_(-0.2, 0.2)
    return export(out, name, m, [("input", torch.randn(64, 128, 768))])


def gelu(out, name):
    """Exact GELU, x * 0.5 * (1 + erf(x / sqrt 2)): Div, Erf, Add, Mul, Mul on 8M floats."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(15)
    return export(out, name, nn.GELU(), [("input", torch.randn(8, 1024, 1024))])


def elementwise(out, name):
    """(x*2+1).sigmoid()*x on 8M floats: Mul, Add, Sigmoid, Mul."""
    torch = _torch()
    import torch.nn as nn
    torch.manual_seed(16)

    class Chain(nn.Module):
        def forward(self, x):
            return (x * 2 + 1).sigmoid() * x

    return export(out, name, Chain(), [("input", torch.randn(8, 1024, 1024))])


MODELS = [
    # name, group, maker, description
    ("resnet18", "model", vision("resnet18"), "torchvision ResNet-18, 1x3x224x224"),
    ("resnet50", "model", vision("resnet50"), "torchvision ResNet-50, 1x3x224x224"),
    ("mobilenet_v2", "model", vision("mobilenet_v2"), "torchvision MobileNetV2, 1x3x224x224"),
    ("squeezenet1_1", "model", vision("squeezenet1_1"), "torchvision SqueezeNet 1.1, 1x3x224x224"),
    ("bert_encoder", "model", bert_encoder, "BERT-style encoder, 4 layers, hidden 256, 4 heads, seq 128"),
    ("gpt_decoder", "model", gpt_decoder, "GPT-style decoder, 4 causal blocks, hidden 256, seq 128"),
    ("mlp_autoencoder", "model", mlp_autoencoder, "MLP autoencoder 784-512-256-64-256-512-784, batch 64"),
    ("conv_bn_relu", "micro", conv_bn_relu, "Conv 64->64 3x3 + BatchNorm + Relu on 1x64x56x56"),
    ("matmul_add_relu", "micro", matmul_add_relu, "MatMul 768x768 + Add + Relu on 1x128x768"),
    ("attention", "micro", attention, "MatMul-Div-Softmax-MatMul attention on 1x4x256x64"),
    ("embedding", "micro", embedding, "Gather (8000x768) + Add + Relu on 1x512 ids"),
    ("layernorm", "micro", layernorm, "LayerNorm(768) decomposition (opset 13) on 64x128x768"),
    ("gelu", "micro", gelu, "GELU erf decomposition on 8x1024x1024"),
    ("elementwise", "micro", elementwise, "(x*2+1).sigmoid()*x on 8x1024x1024"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=os.path.join(HERE, "models"))
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    a = ap.parse_args()
    if a.list:
        for name, group, _, desc in MODELS:
            print(f"{name:16s} {group:6s} {desc}")
        return 0
    only = set(a.only.split(",")) if a.only else None
    unknown = only - {m[0] for m in MODELS} if only else set()
    if unknown:
        print("unknown models:", ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    manifest_path = os.path.join(a.out, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    for name, group, make, desc in MODELS:
        if only and name not in only:
            continue
        print(f"{name} ...", flush=True)
        inputs = make(a.out, name)
        manifest[name] = {"group": group, "description": desc, "inputs": inputs}
    order = [m[0] for m in MODELS]
    manifest = {k: manifest[k] for k in sorted(manifest, key=lambda k: order.index(k) if k in order else 99)}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    print("models written to", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
