"""Helpers for graph-level tests: build models with onnx.helper, run the kiln command line.

Each tests/graph/test_*.py is a CTest test: `python3 test_x.py PATH_TO_KILN`. Use check() for
assertions (all run, failures counted), and finish() at the end (exit 1 on any failure).
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np  # noqa: F401  (re-exported for tests)
import onnx
from onnx import TensorProto, helper, numpy_helper  # noqa: F401

KILN = sys.argv[1] if len(sys.argv) > 1 else "build/kiln"
TMP = tempfile.mkdtemp(prefix="kiln_graph_")
_failures = 0
_checks = 0


def check(cond, what):
    global _failures, _checks
    _checks += 1
    if not cond:
        _failures += 1
        print("CHECK FAILED:", what)


def finish(name):
    print(f"{name}: {_checks} checks, {_failures} failed")
    sys.exit(1 if _failures else 0)


def save(model, name):
    path = os.path.join(TMP, name + ".onnx")
    onnx.save(model, path)
    return path


def kiln(*args, env=None):
    """Run kiln; returns (exit code, stdout+stderr)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    r = subprocess.run([KILN, *args], capture_output=True, text=True, env=e)
    return r.returncode, r.stdout + r.stderr


def optimized_ops(path, *extra):
    """Op histogram after `kiln optimize` (dict op -> count) and the optimize output."""
    out = os.path.join(TMP, os.path.basename(path) + ".opt.onnx")
    rc, text = kiln("optimize", path, out, *extra)
    if rc != 0:
        return None, text
    m = onnx.load(out)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return ops, text


def validate(path, *extra):
    rc, text = kiln("validate", path, *extra)
    return rc == 0, text


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


__all__ = ["check", "finish", "save", "kiln", "optimized_ops", "validate", "model", "vi", "const",
           "np", "helper", "TensorProto", "numpy_helper", "re", "TMP"]
