#!/usr/bin/env python3
"""Rewrite an opset-13 ONNX model (bench/make_models.py's exports) to a later ai.onnx opset with
onnx.helper, as a current exporter would write it. Debian's python3-torch (1.13) exports up to
opset 17 only, so this is how kiln's benchmark models are made at opset 20 and later.

    /usr/bin/python3 bench/opset_upgrade.py IN.onnx OUT.onnx --opset 23 [--standard-ops]

What changes from opset 13 to 26 for the operators these models use: the Reduce* ops other than
ReduceSum take their axes as an input from opset 18 (the attribute becomes an int64
initializer). With --standard-ops the chains a newer exporter writes as one operator become that
operator: the erf GELU chain (Div by sqrt 2, Erf, Add 1, Mul x, Mul 0.5) becomes Gelu (opset
20), the LayerNorm decomposition (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul
gamma, Add beta) becomes LayerNormalization (opset 17). Every other node is kept as it is.
"""
import argparse
import math
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

REDUCE_AXES_INPUT = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


class Graph:
    """The nodes of a graph with their producers, consumers and constant values."""

    def __init__(self, g):
        self.g = g
        self.nodes = list(g.node)
        self.consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        for n in self.nodes:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.refresh()

    def refresh(self):
        self.prod = {o: n for n in self.nodes for o in n.output}
        self.cons = {}
        for n in self.nodes:
            for i in n.input:
                self.cons.setdefault(i, []).append(n)
        outs = {o.name for o in self.g.output}
        for o in outs:
            self.cons.setdefault(o, []).append(None)

    def only_consumer(self, v, op):
        c = self.cons.get(v, [])
        return c[0] if len(c) == 1 and c[0] is not None and c[0].op_type == op else None

    def scalar(self, v):
        a = self.consts.get(v)
        return float(a.reshape(-1)[0]) if a is not None and a.size == 1 else None

    def other(self, n, v):
        """The input of binary n that is not v."""
        return n.input[1] if n.input[0] == v else n.input[0] if n.input[1] == v else None


def attr(n, name, default=None):
    for a in n.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def upgrade_reduce(g, n, new_inits):
    axes = attr(n, "axes")
    if n.op_type not in REDUCE_AXES_INPUT or axes is None:
        return
    name = f"{n.output[0]}__axes"
    new_inits.append(numpy_helper.from_array(np.array(axes, np.int64), name))
    keep = [a for a in n.attribute if a.name != "axes"]
    del n.attribute[:]
    n.attribute.extend(keep)
    n.input.append(name)


def match_gelu(G, div):
    """Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5): (x, nodes, output) or None."""
    if div.op_type != "Div" or not math.isclose(G.scalar(div.input[1]) or 0, math.sqrt(2), rel_tol=1e-5):
        return None
    x = div.input[0]
    erf = G.only_consumer(div.output[0], "Erf")
    add = erf and G.only_consumer(erf.output[0], "Add")
    if not add or G.scalar(G.other(add, erf.output[0])) != 1.0:
        return None
    mul = G.only_consumer(add.output[0], "Mul")
    if not mul or G.other(mul, add.output[0]) != x:
        return None
    half = G.only_consumer(mul.output[0], "Mul")
    if not half or G.scalar(G.other(half, mul.output[0])) != 0.5:
        return None
    return x, [div, erf, add, mul, half], half.output[0]


def match_layernorm(G, mean):
    """The opset-13 decomposition of nn.LayerNorm over the last axis starting at its first
    ReduceMean: (x, gamma, beta, eps, nodes, output) or None."""
    if mean.op_type != "ReduceMean" or list(attr(mean, "axes", [])) != [-1]:
        return None
    x = mean.input[0]
    subs = [c for c in G.cons.get(mean.output[0], []) if c is not None]
    if len(subs) != 1 or subs[0].op_type != "Sub" or list(subs[0].input) != [x, mean.output[0]]:
        return None
    sub = subs[0]
    users = G.cons.get(sub.output[0], [])
    pw = next((u for u in users if u is not None and u.op_type == "Pow"), None)
    dv = next((u for u in users if u is not None and u.op_type == "Div"), None)
    if len(users) != 2 or not pw or not dv or G.scalar(pw.input[1]) != 2.0:
        return None
    m2 = G.only_consumer(pw.output[0], "ReduceMean")
    add = m2 and G.only_consumer(m2.output[0], "Add")
    sq = add and G.only_consumer(add.output[0], "Sqrt")
    if not sq or list(attr(m2, "axes", [])) != [-1] or dv.input[1] != sq.output[0]:
        return None
    eps = G.scalar(G.other(add, m2.output[0]))
    mul = G.only_consumer(dv.output[0], "Mul")
    badd = mul and G.only_consumer(mul.output[0], "Add")
    if eps is None or not badd:
        return None
    gamma, beta = G.other(mul, dv.output[0]), G.other(badd, mul.output[0])
    return x, gamma, beta, eps, [mean, sub, pw, m2, add, sq, dv, mul, badd], badd.output[0]


def standard_ops(g):
    """Replace the GELU and LayerNorm chains by Gelu and LayerNormalization; returns the counts."""
    G = Graph(g)
    dead, made, counts = set(), {}, {"Gelu": 0, "LayerNormalization": 0}
    for n in G.nodes:
        if id(n) in dead:
            continue
        m = match_gelu(G, n)
        if m:
            x, chain, y = m
            made[id(chain[-1])] = helper.make_node("Gelu", [x], [y], name=f"{y}__gelu")
            counts["Gelu"] += 1
        else:
            m = match_layernorm(G, n)
            if not m:
                continue
            x, gamma, beta, eps, chain, y = m
            made[id(chain[-1])] = helper.make_node("LayerNormalization", [x, gamma, beta], [y], axis=-1,
                                                   epsilon=eps, name=f"{y}__layernorm")
            counts["LayerNormalization"] += 1
        dead.update(id(c) for c in chain)
    nodes = []
    for n in G.nodes:
        if id(n) in made:
            nodes.append(made[id(n)])
        elif id(n) not in dead:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    # Constant nodes nothing reads any more
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [n for n in g.node if n.op_type != "Constant" or n.output[0] in used]
    del g.node[:]
    g.node.extend(keep)
    return counts


def upgrade(model, opset, std_ops=False):
    """The model rewritten to ai.onnx `opset` (in place; returned)."""
    if opset < 18:
        raise ValueError("opset_upgrade writes opset 18 and later")
    counts = standard_ops(model.graph) if std_ops else {}
    new_inits = []
    for n in model.graph.node:
        if n.domain in ("", "ai.onnx"):
            upgrade_reduce(model.graph, n, new_inits)
    model.graph.initializer.extend(new_inits)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    model.ir_version = max(model.ir_version, 10)
    return model, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--opset", type=int, default=23)
    ap.add_argument("--standard-ops", action="store_true",
                    help="write GELU and LayerNorm chains as Gelu and LayerNormalization")
    a = ap.parse_args()
    m, counts = upgrade(onnx.load(a.src), a.opset, a.standard_ops)
    onnx.save(m, a.dst)
    extra = ", ".join(f"{v} {k}" for k, v in counts.items())
    print(f"{a.dst}: opset {a.opset}" + (f" ({extra})" if extra else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
