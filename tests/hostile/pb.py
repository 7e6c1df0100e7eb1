"""A minimal protobuf writer for hostile ONNX models: sizes no generator library would build
(nesting 10,000 deep, millions of nodes, giant strings) written straight to the wire format,
in linear time and without recursion."""
import struct


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wt):
    return varint(field << 3 | wt)


def vint(field, v):
    return key(field, 0) + varint(v)


def ld(field, payload):
    """A length-delimited field (bytes, string or an encoded message)."""
    if isinstance(payload, str):
        payload = payload.encode()
    return key(field, 2) + varint(len(payload)) + payload


def ld_head(field, length):
    """The key and length of a length-delimited field whose payload follows separately."""
    return key(field, 2) + varint(length)


def f32(field, v):
    return key(field, 5) + struct.pack("<f", v)


# ONNX field numbers (onnx.proto)
FLOAT, UINT8, INT64, STRING, BOOL = 1, 2, 7, 8, 9
ATTR_FLOAT, ATTR_INT, ATTR_STRING, ATTR_TENSOR, ATTR_GRAPH, ATTR_INTS, ATTR_STRINGS = 1, 2, 3, 4, 5, 7, 8


def tensor_type(elem, dims):
    shape = b"".join(ld(1, vint(1, d) if isinstance(d, int) else ld(2, d)) for d in dims or ())
    return ld(1, vint(1, elem) + (ld(2, shape) if dims is not None else b""))


def value_info(name, elem, dims):
    return ld(1, name) + ld(2, tensor_type(elem, dims))


def node(op, ins, outs, attrs=(), name=""):
    b = b"".join(ld(1, i) for i in ins) + b"".join(ld(2, o) for o in outs)
    if name:
        b += ld(3, name)
    b += ld(4, op)
    return b + b"".join(ld(5, a) for a in attrs)


def attr_int(name, v):
    return ld(1, name) + vint(20, ATTR_INT) + vint(3, v)


def attr_ints(name, vs):
    return ld(1, name) + vint(20, ATTR_INTS) + ld(8, b"".join(varint(v) for v in vs))


def attr_string(name, s):
    return ld(1, name) + vint(20, ATTR_STRING) + ld(4, s)


def tensor(name, elem, dims, raw):
    return b"".join(vint(1, d) for d in dims) + vint(2, elem) + ld(8, name) + ld(9, raw)


def attr_tensor(name, t):
    return ld(1, name) + vint(20, ATTR_TENSOR) + ld(5, t)


def graph(nodes, inputs, outputs, inits=(), name="g"):
    return (b"".join(ld(1, n) for n in nodes) + ld(2, name) + b"".join(ld(5, t) for t in inits)
            + b"".join(ld(11, v) for v in inputs) + b"".join(ld(12, v) for v in outputs))


def model(graph_bytes, opset=13):
    return vint(1, 8) + ld(8, vint(2, opset)) + ld(7, graph_bytes)
