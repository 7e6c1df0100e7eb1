#!/usr/bin/env python3
"""Make the 'real model' set kiln is checked against ONNX Runtime on.

PyTorch exports (random weights, fixed seeds, no constant folding) and models written the way
other exporters write them (unsorted node lists, hundreds of Constant nodes, empty dim names,
nested If, LSTM, integer scalar inputs, float16 weights behind Casts, dynamic quantization).
Each model gets a folder OUT/<name>/ with model.onnx and inputs/<input name>.npy.

    /usr/bin/python3 tests/real/make_models.py OUT
"""
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(1234)


def save(out, name, model, inputs):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for k, v in inputs.items():
        np.save(os.path.join(d, "inputs", k + ".npy"), v)


def torch_models(out):
    import torch
    import torch.nn as nn
    import torchvision

    torch.manual_seed(0)

    def export(name, module, args, names, dynamic=None, opset=13, training=None):
        module.eval()
        path = os.path.join(out, name)
        os.makedirs(os.path.join(path, "inputs"), exist_ok=True)
        kw = {}
        if training is not None:
            kw["training"] = training
        torch.onnx.export(module, args, os.path.join(path, "model.onnx"), opset_version=opset,
                          do_constant_folding=False, input_names=names, output_names=["output"],
                          dynamic_axes=dynamic, **kw)
        for n, a in zip(names, args):
            np.save(os.path.join(path, "inputs", n + ".npy"), a.numpy())

    def randomize_bn(m):
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.2, 0.2)

    r = torchvision.models.resnet18()
    randomize_bn(r)
    export("resnet18", r, (torch.randn(1, 3, 224, 224),), ["input"],
           training=torch.onnx.TrainingMode.PRESERVE)
    # fire modules: Concat of two conv outputs along channels (laid out in place by the planner)
    export("squeezenet1_1", torchvision.models.squeezenet1_1(), (torch.randn(1, 3, 224, 224),), ["input"])

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 256)
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True,
                                               activation="gelu")
            self.enc = nn.TransformerEncoder(layer, 4)

        def forward(self, ids):
            return self.enc(self.emb(ids))

    export("bert_encoder", Encoder(), (torch.randint(0, 1000, (1, 128)),), ["input_ids"],
           dynamic={"input_ids": {0: "batch", 1: "seq"}})

    class Decoder(nn.Module):
        def __init__(self, d=256, heads=4, layers=2, vocab=500):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(1, 64, d) * 0.02)
            self.blocks = nn.ModuleList(
                [nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                            norm_first=True) for _ in range(layers)])
            self.head = nn.Linear(d, vocab)
            self.register_buffer("causal", torch.triu(torch.full((64, 64), float("-inf")), 1))

        def forward(self, ids):
            s = ids.shape[1]
            x = self.emb(ids) + self.pos[:, :s]
            mask = self.causal[:s, :s]
            for b in self.blocks:
                x = b(x, src_mask=mask)
            return self.head(x)

    export("gpt_decoder", Decoder(), (torch.randint(0, 500, (1, 64)),), ["input_ids"])

    mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU(),
                        nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 64))
    export("mlp_autoencoder", mlp, (torch.randn(32, 64),), ["input"],
           dynamic={"input": {0: "batch"}})

    class Lstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(64, 4)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.fc(y[:, -1])

    export("lstm_classifier", Lstm(), (torch.randn(2, 10, 16),), ["input"])


def tool_models(out):
    f = TensorProto.FLOAT
    # Unsorted node list with hundreds of Constant nodes and an empty dim name.
    nodes, prev = [], "x"
    for i in range(150):
        c = f"c{i}"
        nodes.append(helper.make_node("Constant", [], [c], value=numpy_helper.from_array(
            np.full((1, 8), 0.01 * (i % 7), np.float32))))
        op = "Add" if i % 2 else "Mul"
        if op == "Mul":
            nodes.append(helper.make_node("Constant", [], [c + "m"], value=numpy_helper.from_array(
                np.full((1, 8), 1.0 + 0.001 * i, np.float32))))
            nodes.append(helper.make_node("Mul", [prev, c + "m"], [f"t{i}"]))
        else:
            nodes.append(helper.make_node("Add", [prev, c], [f"t{i}"]))
        prev = f"t{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    rng.shuffle(nodes)
    x = helper.make_tensor_value_info("x", f, [""] + [8])
    x.type.tensor_type.shape.dim[0].dim_param = ""
    g = helper.make_graph(nodes, "many_constants", [x], [helper.make_tensor_value_info("y", f, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    save(out, "unsorted_constants", m, {"x": rng.standard_normal((3, 8)).astype(np.float32)})

    # Nested If on an integer scalar input, float16 weights behind Casts.
    w16 = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float16), "w16")
    inner_then = helper.make_graph(
        [helper.make_node("Mul", ["h", "two"], ["o1"])], "inner_then", [],
        [helper.make_tensor_value_info("o1", f, None)],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    inner_else = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["o2"])], "inner_else", [],
        [helper.make_tensor_value_info("o2", f, None)])
    outer_then = helper.make_graph(
        [helper.make_node("Greater", ["k", "three"], ["c2"]),
         helper.make_node("If", ["c2"], ["o3"], then_branch=inner_then, else_branch=inner_else)],
        "outer_then", [], [helper.make_tensor_value_info("o3", f, None)],
        [numpy_helper.from_array(np.array(3, np.int64), "three")])
    outer_else = helper.make_graph(
        [helper.make_node("Sigmoid", ["h"], ["o4"])], "outer_else", [],
        [helper.make_tensor_value_info("o4", f, None)])
    g = helper.make_graph(
        [helper.make_node("Cast", ["w16"], ["w"], to=f),
         helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Greater", ["k", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=outer_then, else_branch=outer_else)],
        "nested_if_fp16",
        [helper.make_tensor_value_info("x", f, [4, 8]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", f, [4, 8])],
        [w16, numpy_helper.from_array(np.array(0, np.int64), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    save(out, "nested_if_fp16", m, {"x": rng.standard_normal((4, 8)).astype(np.float32),
                                    "k": np.array(5, np.int64)})

    # Dynamic quantization: DynamicQuantizeLinear -> ConvInteger and MatMulInteger.
    wq = rng.integers(0, 255, (4, 3, 3, 3), dtype=np.uint8)
    wm = rng.integers(0, 255, (36, 10), dtype=np.uint8)
    g = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
         helper.make_node("ConvInteger", ["xq", "wq", "xz", "wz"], ["ci"], pads=[0, 0, 0, 0]),
         helper.make_node("Cast", ["ci"], ["cf"], to=f),
         helper.make_node("Mul", ["cf", "xs"], ["cs"]),
         helper.make_node("Reshape", ["cs", "shape"], ["flat"]),
         helper.make_node("DynamicQuantizeLinear", ["flat"], ["fq", "fs", "fz"]),
         helper.make_node("MatMulInteger", ["fq", "wm", "fz", "wmz"], ["mi"]),
         helper.make_node("Cast", ["mi"], ["y"], to=f)],
        "dynamic_quant",
        [helper.make_tensor_value_info("x", f, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", f, [1, 10])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(128, np.uint8), "wz"),
         numpy_helper.from_array(wm, "wm"), numpy_helper.from_array(np.array(127, np.uint8), "wmz"),
         numpy_helper.from_array(np.array([1, 36], np.int64), "shape")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    save(out, "dynamic_quant", m, {"x": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)})


def converted_models(out):
    """Float32 exports converted the way users deploy them (tests/real/convert.py): quantized with
    ONNX Runtime's dynamic quantizer (uint8 weights) and converted to float16. A small
    segmentation net (Conv-BN-ReLU, MaxPool, bilinear and nearest Resize, Concat skips) and
    torchvision's LR-ASPP MobileNetV3 (depthwise convs, Hardswish, squeeze-excitation,
    Resize to the input's size)."""
    import torch
    import torch.nn as nn
    import torchvision

    from convert import quantize_dynamic, to_float16

    torch.manual_seed(1)

    def block(ci, co):
        return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1), nn.BatchNorm2d(co), nn.ReLU(),
                             nn.Conv2d(co, co, 3, padding=1), nn.ReLU())

    class SegNet(nn.Module):
        def __init__(self, classes=5):
            super().__init__()
            self.e1, self.e2, self.e3 = block(3, 16), block(16, 32), block(32, 64)
            self.pool = nn.MaxPool2d(2)
            self.d2, self.d1 = block(64 + 32, 32), block(32 + 16, 16)
            self.head = nn.Conv2d(16, classes, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(self.pool(a))
            c = self.e3(self.pool(b))
            u = nn.functional.interpolate(c, scale_factor=2.0, mode="bilinear", align_corners=False)
            d = self.d2(torch.cat([u, b], 1))
            u = nn.functional.interpolate(d, scale_factor=2.0, mode="nearest")
            return self.head(self.d1(torch.cat([u, a], 1)))

    seg = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)
    for name, module, shape in (("segnet", SegNet(), (1, 3, 64, 64)), ("lraspp_mobilenet_v3", seg, (1, 3, 128, 128))):
        module.eval()
        for mod in module.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
        x = torch.randn(*shape)
        path = os.path.join(out, name + ".f32.onnx")

        class Out(nn.Module):  # torchvision's segmentation models return a dict
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                y = self.m(x)
                return y["out"] if isinstance(y, dict) else y

        torch.onnx.export(Out(module), (x,), path, opset_version=13, input_names=["input"], output_names=["output"])
        base = onnx.load(path)
        os.remove(path)
        inputs = {"input": x.numpy()}
        save(out, name + "_dynquant", quantize_dynamic(onnx.load_from_string(base.SerializeToString())), inputs)
        # An activation's float error can move one value of the next DynamicQuantizeLinear by
        # one step: a thousandth of the range, where a wrong kernel is off by most of it.
        with open(os.path.join(out, name + "_dynquant", "tolerance.txt"), "w") as f:
            f.write("range 1e-3\n")
        save(out, name + "_fp16", to_float16(onnx.load_from_string(base.SerializeToString())), inputs)
        with open(os.path.join(out, name + "_fp16", "tolerance.txt"), "w") as f:
            f.write("element 0.0025 0.001\n")  # ONNX Runtime's float16 tolerance


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "build/real-models"
    os.makedirs(out, exist_ok=True)
    tool_models(out)
    converted_models(out)
    torch_models(out)
    print("models written to", out)
