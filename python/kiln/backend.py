"""kiln as an ONNX backend (onnx.backend.base.Backend), so ONNX's own backend test runner
(onnx.backend.test.BackendTest) runs against kiln:

    import kiln.backend
    outputs = kiln.backend.run_model(model_proto, [x])
"""
import os

import onnx
from onnx.backend.base import Backend, BackendRep

from . import InferenceSession, SessionOptions


class KilnRep(BackendRep):
    def __init__(self, sess):
        self._sess = sess
        self._names = [i.name for i in sess.get_inputs()]

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = inputs
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            if len(inputs) > len(self._names):
                raise ValueError("%d inputs given, the model takes %d" % (len(inputs), len(self._names)))
            feeds = dict(zip(self._names, inputs))
        return self._sess.run(None, feeds)


class KilnBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device):
        return device.upper().startswith("CPU")

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        """A representation ready to run: `model` is a ModelProto, serialised bytes or a path."""
        if not cls.supports_device(device):
            raise RuntimeError("kiln runs on the CPU only, not on %s" % device)
        so = SessionOptions()
        if "graph_optimization_level" in kwargs:
            so.graph_optimization_level = kwargs["graph_optimization_level"]
        if isinstance(model, onnx.ModelProto):
            model = model.SerializeToString()
        elif isinstance(model, (str, os.PathLike)) and not os.path.exists(model):
            raise FileNotFoundError(model)
        return KilnRep(InferenceSession(model, so))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """One node as a model: inputs and outputs typed from the given arrays (outputs_info, a
        list of (dtype, shape), when known)."""
        import numpy as np
        from onnx import helper, mapping
        ins = [helper.make_tensor_value_info(n, mapping.NP_TYPE_TO_TENSOR_TYPE[np.asarray(v).dtype],
                                             np.asarray(v).shape) for n, v in zip(node.input, inputs)]
        outs = [helper.make_empty_tensor_value_info(n) for n in node.output]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        graph = helper.make_graph([node], "run_node", ins, outs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", min(opset, 18))])
        model.ir_version = min(model.ir_version, 8)
        return cls.run_model(model, list(inputs), device, **kwargs)


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device
is_compatible = KilnBackend.is_compatible
