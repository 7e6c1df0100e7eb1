#!/usr/bin/env python3
"""Build the example plugins' models (onnx.helper) and their expected outputs (numpy).

    python3 examples/plugins/make_models.py                 # the small, checked-in models
    python3 examples/plugins/make_models.py --large DIR     # a large Gather->Add->Relu model to time

Writes into examples/plugins/models/:
  embedding_dense_grad.onnx       two my.ops::EmbeddingDenseGrad nodes (padding_idx, and
                                  scale_grad_by_freq) on the same inputs
  embedding_dense_grad/           grad.npy, indices.npy (inputs), table.npy, table_scaled.npy
  gather_add_relu.onnx            two Gather -> Add -> Relu chains in plain ONNX (a positional
                                  table and a bias), which the fused_gather_add_relu plugin's
                                  pattern turns into my.ops::FusedGatherAddRelu at level 2
  gather_add_relu/                indices.npy (input), out.npy, out_bias.npy
The reference outputs are plain numpy: np.add.at for the scatter-add, fancy indexing for Gather.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def save_model(nodes, inputs, outputs, inits, path, custom=True):
    g = helper.make_graph(nodes, os.path.basename(path), inputs, outputs, inits)
    ops = [helper.make_opsetid("", 13)]
    if custom:
        ops.append(helper.make_opsetid("my.ops", 1))
    m = helper.make_model(g, opset_imports=ops, producer_name="kiln examples/plugins/make_models.py")
    m.ir_version = 8
    onnx.save(m, path)


def embedding_dense_grad_ref(grad, indices, num_weights, padding_idx=-1, scale_grad_by_freq=False):
    """PyTorch's embedding_dense_backward, in float32, summing in index-position order."""
    dim = grad.shape[-1]
    g = grad.reshape(-1, dim).astype(np.float32)
    idx = indices.reshape(-1)
    table = np.zeros((num_weights, dim), np.float32)
    keep = idx != padding_idx if padding_idx >= 0 else np.ones_like(idx, bool)
    if scale_grad_by_freq:
        counts = np.bincount(idx[keep], minlength=num_weights)
        scale = (np.float32(1) / counts[idx].astype(np.float32))[:, None]
        g = (g * scale).astype(np.float32)
    np.add.at(table, idx[keep], g[keep])
    return table


def gather_add_relu_ref(data, indices, other):
    return np.maximum(data[indices] + other, 0).astype(np.float32)


def make_embedding(out_dir, rng):
    V, B, S, D = 10, 2, 6, 4
    grad = rng.standard_normal((B, S, D)).astype(np.float32)
    indices = rng.integers(0, V, (B, S)).astype(np.int64)
    indices[0, :3] = [3, 3, 0]  # a repeated index, and the padding index
    d = os.path.join(out_dir, "embedding_dense_grad")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "grad.npy"), grad)
    np.save(os.path.join(d, "indices.npy"), indices)
    np.save(os.path.join(d, "table.npy"), embedding_dense_grad_ref(grad, indices, V, padding_idx=0))
    np.save(os.path.join(d, "table_scaled.npy"),
            embedding_dense_grad_ref(grad, indices, V, scale_grad_by_freq=True))
    nodes = [
        helper.make_node("EmbeddingDenseGrad", ["grad", "indices"], ["table"], name="edg",
                         domain="my.ops", num_weights=V, padding_idx=0),
        helper.make_node("EmbeddingDenseGrad", ["grad", "indices"], ["table_scaled"], name="edg_scaled",
                         domain="my.ops", num_weights=V, scale_grad_by_freq=1),
    ]
    save_model(nodes,
               [helper.make_tensor_value_info("grad", TensorProto.FLOAT, ["B", "S", D]),
                helper.make_tensor_value_info("indices", TensorProto.INT64, ["B", "S"])],
               [helper.make_tensor_value_info("table", TensorProto.FLOAT, [V, D]),
                helper.make_tensor_value_info("table_scaled", TensorProto.FLOAT, [V, D])],
               [], os.path.join(out_dir, "embedding_dense_grad.onnx"))


def gather_add_relu_model(V, B, S, D, rng, path, data_dir=None, bias_chain=True):
    """Token table `data` + positional table `pos`, and (bias_chain) a second table + bias."""
    data = rng.standard_normal((V, D)).astype(np.float32)
    pos = (0.5 * rng.standard_normal((S, D))).astype(np.float32)
    indices = rng.integers(-V, V, (B, S)).astype(np.int64)  # Gather allows negative indices
    nodes = [
        helper.make_node("Gather", ["data", "indices"], ["g"], axis=0),
        helper.make_node("Add", ["g", "pos"], ["a"]),
        helper.make_node("Relu", ["a"], ["out"]),
    ]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", S, D])]
    inits = [numpy_helper.from_array(data, "data"), numpy_helper.from_array(pos, "pos")]
    if bias_chain:
        data2 = rng.standard_normal((V, D)).astype(np.float32)
        bias = (0.5 * rng.standard_normal(D)).astype(np.float32)
        nodes += [helper.make_node("Gather", ["data2", "indices"], ["g2"]),
                  helper.make_node("Add", ["bias", "g2"], ["a2"]),  # the Gather on the right
                  helper.make_node("Relu", ["a2"], ["out_bias"])]
        outputs.append(helper.make_tensor_value_info("out_bias", TensorProto.FLOAT, ["B", S, D]))
        inits += [numpy_helper.from_array(data2, "data2"), numpy_helper.from_array(bias, "bias")]
    save_model(nodes, [helper.make_tensor_value_info("indices", TensorProto.INT64, ["B", S])], outputs,
               inits, path, custom=False)
    if data_dir:
        os.makedirs(data_dir, exist_ok=True)
        np.save(os.path.join(data_dir, "indices.npy"), indices)
        np.save(os.path.join(data_dir, "out.npy"), gather_add_relu_ref(data, indices, pos))
        if bias_chain:
            np.save(os.path.join(data_dir, "out_bias.npy"), gather_add_relu_ref(data2, indices, bias))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", metavar="DIR", help="write DIR/gather_add_relu_large.onnx (and its indices.npy)")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    if args.large:
        os.makedirs(args.large, exist_ok=True)
        # 50000 x 256 table (51 MB), indices [64, 512]: the output is 8M floats (32 MB)
        gather_add_relu_model(50000, 64, 512, 256, rng, os.path.join(args.large, "gather_add_relu_large.onnx"),
                              bias_chain=False)
        idx = rng.integers(0, 50000, (64, 512)).astype(np.int64)
        np.save(os.path.join(args.large, "indices.npy"), idx)
        print("wrote", os.path.join(args.large, "gather_add_relu_large.onnx"))
        return
    out_dir = os.path.join(HERE, "models")
    os.makedirs(out_dir, exist_ok=True)
    make_embedding(out_dir, rng)
    gather_add_relu_model(20, 3, 5, 8, rng, os.path.join(out_dir, "gather_add_relu.onnx"),
                          os.path.join(out_dir, "gather_add_relu"))
    print("wrote", out_dir)


if __name__ == "__main__":
    main()
