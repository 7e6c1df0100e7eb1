#!/usr/bin/env python3
"""Micro-models for timing the attention fusion (ai.kiln::Attention) against the chain it
replaces: `kiln run`/a timing tool at --level 0 runs the chain, at --level 2 the fused kernel.

    /usr/bin/python3 bench/micro/make_attention.py OUT [--seq 256] [--heads 8] [--dim 64]

Writes OUT/attn_s{S}.onnx          Q, K, V (1, H, S, D) inputs; MatMul(Q, K^T)/sqrt(D), Softmax, MatMul V
       OUT/attn_causal_s{S}.onnx   the same with a constant causal additive mask
       OUT/mha_s{S}.onnx           a BERT-style block: projections, head split/merge, padding mask
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def vi(n, shape):
    return helper.make_tensor_value_info(n, F, shape)


def c(n, a):
    return numpy_helper.from_array(np.asarray(a), n)


def save(out, name, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, os.path.join(out, name + ".onnx"))


def chain(q, k, v, out, d, mask=None):
    nodes = [helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", [q, "kt"], ["s0"]),
             helper.make_node("Div", ["s0", "sqrt_d"], ["s1"])]
    s = "s1"
    if mask:
        nodes.append(helper.make_node("Add", [s, mask], ["s2"]))
        s = "s2"
    nodes += [helper.make_node("Softmax", [s], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", v], [out])]
    return nodes, [c("sqrt_d", np.array(np.sqrt(d), np.float32))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    s, h, d = a.seq, a.heads, a.dim
    e = h * d
    rng = np.random.default_rng(0)
    io = [vi(n, [1, h, s, d]) for n in "qkv"]
    nodes, inits = chain("q", "k", "v", "y", d)
    save(a.out, f"attn_s{s}", nodes, io, [vi("y", [1, h, s, d])], inits)
    nodes, inits = chain("q", "k", "v", "y", d, mask="causal")
    inits.append(c("causal", np.triu(np.full((s, s), -np.inf, np.float32), 1)))
    save(a.out, f"attn_causal_s{s}", nodes, io, [vi("y", [1, h, s, d])], inits)
    # BERT-style block on x (1, S, E) with a (1, 1, 1, S) padding mask
    inits = [c(n, (rng.standard_normal((e, e)) / np.sqrt(e)).astype(np.float32)) for n in ("wq", "wk", "wv", "wo")]
    inits += [c(n, (0.1 * rng.standard_normal(e)).astype(np.float32)) for n in ("bq", "bk", "bv")]
    inits += [c("split", np.array([0, 0, h, d], np.int64)), c("merge", np.array([0, 0, e], np.int64))]
    nodes = []
    for t in "qkv":
        nodes += [helper.make_node("MatMul", ["x", "w" + t], [t + "m"]),
                  helper.make_node("Add", [t + "m", "b" + t], [t + "a"]),
                  helper.make_node("Reshape", [t + "a", "split"], [t + "r"]),
                  helper.make_node("Transpose", [t + "r"], [t + "h"], perm=[0, 2, 1, 3])]
    cn, ci = chain("qh", "kh", "vh", "o", d, mask="mask")
    nodes += cn + [helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
                   helper.make_node("Reshape", ["ot", "merge"], ["om"]),
                   helper.make_node("MatMul", ["om", "wo"], ["y"])]
    save(a.out, f"mha_s{s}", nodes, [vi("x", [1, s, e]), vi("mask", [1, 1, 1, s])], [vi("y", [1, s, e])],
         inits + ci)
    print("models written to", a.out)


if __name__ == "__main__":
    main()
