"""Shared helpers for the Python tests: check counting, models made with onnx.helper."""
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto, helper

failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("CHECK failed: %s" % what, file=sys.stderr)


def raises(fn, exc, text, what):
    try:
        fn()
    except exc as e:
        check(text in str(e), "%s: message %r lacks %r" % (what, str(e), text))
        return e
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %s(%s), expected %s" % (what, type(e).__name__, e, exc.__name__))
        return e
    check(False, "%s: did not raise" % what)


def finish(name):
    print("%s: %d checks, %d failed" % (name, checks, failures))
    sys.exit(1 if failures else 0)


def model(nodes, inputs, outputs, opset=18, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, **kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="kt")
    m.ir_version = 8
    return m.SerializeToString()


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN_BIN = os.environ.get("KILN_BIN", os.path.join(ROOT, "build", "kiln"))
TINY_CNN = os.path.join(ROOT, "examples", "models", "tiny_cnn.onnx")
__all__ = ["np", "onnx", "TensorProto", "helper"]
