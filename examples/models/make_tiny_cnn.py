#!/usr/bin/env python3
"""Make examples/models/tiny_cnn.onnx: the bundled example that `scripts/demo.sh` runs.

A small image classifier written with onnx.helper (fixed seed, so the file is reproducible):
Conv -> BatchNormalization -> Relu -> MaxPool -> Conv -> Relu -> GlobalAveragePool -> Flatten
-> Gemm -> Softmax, with a symbolic batch dim "N". Run with Debian's python3-onnx and numpy:
    /usr/bin/python3 examples/models/make_tiny_cnn.py examples/models/tiny_cnn.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def init(name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def main(path):
    inits = [
        init("w1", (8, 3, 3, 3)), init("b1", (8,), 0.1),
        numpy_helper.from_array((1 + 0.2 * rng.standard_normal(8)).astype(np.float32), "bn_scale"),
        init("bn_bias", (8,), 0.1), init("bn_mean", (8,), 0.1),
        numpy_helper.from_array((0.5 + rng.random(8)).astype(np.float32), "bn_var"),
        init("w2", (16, 8, 3, 3), 0.2), init("b2", (16,), 0.1),
        init("fc_w", (10, 16), 0.5), init("fc_b", (10,), 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn1"]),
        helper.make_node("Relu", ["bn1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="kiln-examples")
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny_cnn.onnx")
