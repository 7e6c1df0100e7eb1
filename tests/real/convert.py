"""The two conversions users apply to a float32 model before deploying it, written with onnx.helper
the way the usual tools write them (neither tool is a dependency here):

- quantize_dynamic: what onnxruntime.quantization.quantize_dynamic writes for each Conv whose
  weight is an initializer: DynamicQuantizeLinear on the activation, the weight quantized per
  tensor (uint8: asymmetric over [min(w, 0), max(w, 0)]; int8: symmetric), ConvInteger, Cast to
  float, Mul by the product of the two scales, and the bias added after a Reshape to [1, C, 1, 1].
  Every other op (Relu, MaxPool, Resize, Concat, ...) stays float.
- to_float16: what onnxconverter-common's convert_float_to_float16(keep_io_types=True) writes:
  every float initializer and Constant becomes float16 (except the inputs that must stay float32,
  Resize's roi and scales), float inputs are Cast to float16 and float outputs back to float32,
  Casts to float become Casts to float16.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _quantize_weight(w, dtype):
    if dtype == np.uint8:
        lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
        scale = (hi - lo) / 255 or 1.0
        zp = int(np.clip(np.round(-lo / scale), 0, 255))
        q = np.clip(np.round(w / scale) + zp, 0, 255).astype(np.uint8)
        return q, np.float32(scale), np.uint8(zp)
    scale = max(float(np.abs(w).max()), 1e-12) / 127
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), np.float32(scale), np.int8(0)


def quantize_dynamic(model, weight_type=np.uint8):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes, new_inits, used = [], [], set()
    for k, n in enumerate(g.node):
        if n.op_type != "Conv" or n.input[1] not in inits:
            nodes.append(n)
            continue
        x, wname = n.input[0], n.input[1]
        p = f"{n.name or 'conv'}_{k}"
        w = numpy_helper.to_array(inits[wname])
        q, scale, zp = _quantize_weight(w, weight_type)
        new_inits += [numpy_helper.from_array(q, p + "_w_q"), numpy_helper.from_array(np.array(scale), p + "_w_s"),
                      numpy_helper.from_array(np.array(zp), p + "_w_z")]
        used.add(wname)
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        out = n.output[0]
        has_bias = len(n.input) > 2 and n.input[2]
        scaled = p + "_scaled" if has_bias else out
        nodes += [helper.make_node("DynamicQuantizeLinear", [x], [p + "_x_q", p + "_x_s", p + "_x_z"]),
                  helper.make_node("ConvInteger", [p + "_x_q", p + "_w_q", p + "_x_z", p + "_w_z"], [p + "_i32"], **attrs),
                  helper.make_node("Cast", [p + "_i32"], [p + "_f"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [p + "_x_s", p + "_w_s"], [p + "_s"]),
                  helper.make_node("Mul", [p + "_f", p + "_s"], [scaled])]
        if has_bias:
            new_inits.append(numpy_helper.from_array(np.array([1, -1, 1, 1], np.int64), p + "_bias_shape"))
            nodes += [helper.make_node("Reshape", [n.input[2], p + "_bias_shape"], [p + "_bias"]),
                      helper.make_node("Add", [scaled, p + "_bias"], [out])]
    keep = [t for t in g.initializer if t.name not in used]
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    return model


def to_float16(model):
    g = model.graph
    keep32 = set()  # inputs that the ONNX spec types float32 whatever the data type
    for n in g.node:
        if n.op_type == "Resize":
            keep32.update(n.input[1:3])
    for t in list(g.initializer):
        if t.data_type == TensorProto.FLOAT and t.name not in keep32:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT and \
                    not any(n.output[0] == i for i in keep32):
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    # Casts at the edges: float inputs to float16, float16 results back to float outputs
    edge = []
    for i in g.input:
        if i.type.tensor_type.elem_type == TensorProto.FLOAT:
            edge.append(helper.make_node("Cast", [i.name], [i.name + "_fp16"], to=TensorProto.FLOAT16))
            for n in g.node:
                for j, v in enumerate(n.input):
                    if v == i.name:
                        n.input[j] = i.name + "_fp16"
    tail = []
    for o in g.output:
        if o.type.tensor_type.elem_type == TensorProto.FLOAT:
            for n in g.node:
                for j, v in enumerate(n.output):
                    if v == o.name:
                        n.output[j] = o.name + "_fp16"
            tail.append(helper.make_node("Cast", [o.name + "_fp16"], [o.name], to=TensorProto.FLOAT))
    nodes = edge + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # the float32 annotations no longer hold
    return model
