"""Hostile models, one per limit kiln enforces (src/onnx/limits.h, runtime/mem_check.h), each
written straight to protobuf bytes (pb.py) so sizes no ONNX tool would build cost seconds:

  deep_if(n)          If nested n levels deep in then_branch (max_subgraph_depth)
  deep_type(n)        an input of type sequence(sequence(... tensor)) n deep (max_subgraph_depth)
  chain(n)            n Relu nodes in a chain (max_nodes; below the limit it must run)
  big_string(n)       a node whose string attribute is n bytes (max_string_bytes)
  big_ints(n)         a node whose ints attribute has n one-byte values (max_attribute_bytes)
  huge_input(dims)    an input declaring these dims (max_memory_bytes, or an overflow)
  expand_plan(dims)   x float[1] Expanded to these static dims, then ReduceSum (the plan)
  expand_pair(dims)   two such Expands live at once (the plan's peak, not one value)
  expand_dynamic()    the same with the shape fed at run time (checked as the node runs)
  expand_strings(d)   a string[1] constant Expanded to dims d, or to a shape fed at run time
                      (strings count their pointers: 8 bytes an element at the least)
  deep_sequence(n)    an input value (.pb): a SequenceProto nested n deep, and a model taking it
  loop_forever(node)  a Loop of 2^63 - 1 iterations, its body an Identity or empty (max_run_ms)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pb import (ATTR_GRAPH, BOOL, FLOAT, INT64, STRING, attr_ints, attr_string, attr_tensor, graph,  # noqa: E402
                key, ld, ld_head, model, node, tensor, value_info, varint, vint)


def _write(path, chunks):
    with open(path, "wb") as f:
        f.writelines(chunks)
    return path


def _const_graph(out, value, name):
    t = tensor("v", FLOAT, [], bytes(__import__("struct").pack("<f", value)))
    return graph([node("Constant", [], [out], [attr_tensor("value", t)])], [], [value_info(out, FLOAT, [])],
                 name=name)


def deep_if(path, depth):
    """Main graph: y = If(c) whose then_branch is an If whose then_branch ... (depth levels);
    the innermost then_branch gives 1.0, every else_branch 0.0. With c true, y = 1."""
    else_attr = ld(1, "else_branch") + vint(20, ATTR_GRAPH) + ld(6, _const_graph("e", 0.0, "e"))
    inner = _const_graph(f"y{depth}", 1.0, f"g{depth}")
    # lengths bottom-up: graph_k = head_k + node_k, node_k = nhead_k + attr_k, attr_k = ahead_k + graph_{k+1}
    heads = []
    glen = len(inner)
    for k in range(depth - 1, -1, -1):
        ahead = ld(1, "then_branch") + vint(20, ATTR_GRAPH) + ld_head(6, glen)
        alen = len(ahead) + glen
        nhead = ld(1, "c") + ld(2, f"y{k}") + ld(4, "If") + ld(5, else_attr) + ld_head(5, alen)
        nlen = len(nhead) + alen
        gname = "main" if k == 0 else f"g{k}"
        ins = ld(11, value_info("c", BOOL, [])) if k == 0 else b""
        ghead = ld(2, gname) + ins + ld(12, value_info(f"y{k}", FLOAT, [])) + ld_head(1, nlen)
        glen = len(ghead) + nlen
        heads.append(ghead + nhead + ahead)
    heads.reverse()
    top = vint(1, 8) + ld(8, vint(2, 13)) + ld_head(7, glen)
    return _write(path, [top] + heads + [inner])


def deep_type(path, depth):
    """Input s: sequence(sequence(... float[1])) `depth` levels; output its length."""
    t = ld(1, vint(1, FLOAT))  # TypeProto{tensor_type{elem_type}}
    for _ in range(depth):
        t = ld(4, ld(1, t))      # TypeProto{sequence_type{elem_type: t}}
    vi = ld(1, "s") + ld(2, t)
    g = graph([node("SequenceLength", ["s"], ["n"])], [], [value_info("n", INT64, [])])
    g = ld(11, vi) + g
    return _write(path, [model(g)])


def chain(path, n, op="Relu"):
    """x float[2] -> n nodes -> y: names v0 .. v{n}."""
    nodes = [ld(1, node(op, [f"v{i}"], [f"v{i + 1}"])) for i in range(n)]
    g = b"".join(nodes) + ld(2, "chain") + ld(11, value_info("v0", FLOAT, [2])) + ld(12, value_info(f"v{n}", FLOAT, [2]))
    return _write(path, [model(g)])


def _one_node_model(path, attrs):
    n = node("Relu", ["x"], ["y"], attrs)
    g = graph([n], [value_info("x", FLOAT, [2])], [value_info("y", FLOAT, [2])])
    return _write(path, [model(g)])


def big_string(path, nbytes):
    return _one_node_model(path, [attr_string("note", b"a" * nbytes)])


def big_ints(path, count):
    a = ld(1, "pads") + vint(20, 7) + key(8, 2) + varint(count) + b"\x01" * count
    return _one_node_model(path, [a])


def huge_input(path, dims):
    g = graph([node("Relu", ["x"], ["y"])], [value_info("x", FLOAT, dims)], [value_info("y", FLOAT, None)])
    return _write(path, [model(g)])


def expand_plan(path, dims):
    shape = tensor("shape", INT64, [len(dims)], b"".join(d.to_bytes(8, "little") for d in dims))
    g = graph([node("Expand", ["x", "shape"], ["big"]), node("ReduceSum", ["big"], ["y"], [])],
              [value_info("x", FLOAT, [1])], [value_info("y", FLOAT, None)], [shape])
    return _write(path, [model(g)])


def expand_pair(path, dims):
    """Two Expands of x to `dims` added: both live at once, so the plan holds two of them."""
    shape = tensor("shape", INT64, [len(dims)], b"".join(d.to_bytes(8, "little") for d in dims))
    g = graph([node("Expand", ["x", "shape"], ["a"]), node("Expand", ["x", "shape"], ["b"]),
               node("Add", ["a", "b"], ["c"]), node("ReduceSum", ["c"], ["y"], [])],
              [value_info("x", FLOAT, [1])], [value_info("y", FLOAT, None)], [shape])
    return _write(path, [model(g)])


def expand_dynamic(path):
    g = graph([node("Expand", ["x", "shape"], ["big"]), node("ReduceSum", ["big"], ["y"], [])],
              [value_info("x", FLOAT, [1]), value_info("shape", INT64, [2])], [value_info("y", FLOAT, None)])
    return _write(path, [model(g)])


def expand_strings(path, dims=None):
    s = b"".join(vint(1, d) for d in [1]) + vint(2, STRING) + ld(6, b"a") + ld(8, "s")
    nodes = [node("Constant", [], ["s"], [attr_tensor("value", s)])]
    inputs, inits = [], []
    if dims is None:
        inputs.append(value_info("shape", INT64, [2]))
    else:
        inits.append(tensor("shape", INT64, [len(dims)], b"".join(d.to_bytes(8, "little") for d in dims)))
    nodes += [node("Expand", ["s", "shape"], ["big"]), node("Shape", ["big"], ["y"])]
    g = graph(nodes, inputs, [value_info("y", INT64, None)], inits)
    return _write(path, [model(g)])


def deep_sequence(path, depth):
    """SequenceProto{sequence_values{... {elem_type TENSOR}}} `depth` deep, written to `path`;
    returns (value path, a model whose input s is a sequence of float tensors)."""
    inner = vint(2, 1)
    heads, length = [], len(inner)
    for _ in range(depth):
        h = vint(2, 3) + ld_head(5, length)
        length += len(h)
        heads.append(h)
    heads.reverse()
    _write(path, heads + [inner])
    seq = ld(1, "s") + ld(2, ld(4, ld(1, ld(1, vint(1, FLOAT)))))
    g = ld(11, seq) + graph([node("SequenceLength", ["s"], ["n"])], [], [value_info("n", INT64, [])])
    return path, _write(path + ".onnx", [model(g)])


def loop_forever(path, body_node=True):
    """y = Loop(M = 2^63 - 1, x float[1]) whose body passes x through (an Identity, or no node)."""
    out = "x_out" if body_node else "x_in"
    nodes = [node("Identity", ["x_in"], ["x_out"])] if body_node else []
    body = graph(nodes, [value_info("i", INT64, []), value_info("c", BOOL, []), value_info("x_in", FLOAT, [1])],
                 [value_info("c", BOOL, []), value_info(out, FLOAT, [1])], name="body")
    m = tensor("M", INT64, [], (2**63 - 1).to_bytes(8, "little"))
    loop = node("Loop", ["M", "", "x"], ["y"], [ld(1, "body") + vint(20, ATTR_GRAPH) + ld(6, body)])
    g = graph([loop], [value_info("x", FLOAT, [1])], [value_info("y", FLOAT, [1])], [m])
    return _write(path, [model(g)])
