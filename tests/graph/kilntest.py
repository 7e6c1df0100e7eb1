"""Helpers for graph-level tests: build models with onnx.helper, run the kiln command line.

Each tests/graph/test_*.py is a CTest test: `python3 test_x.py PATH_TO_KILN`. Use check() for
assertions (all run, failures counted), and finish() at the end (exit 1 on any failure).
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np  # noqa: F401  (re-exported for tests)
import onnx
from onnx import TensorProto, helper, numpy_helper  # noqa: F401

KILN = sys.argv[1] if len(sys.argv) > 1 else "build/kiln"
TMP = tempfile.mkdtemp(prefix="kiln_graph_")
# the test's models go with it (KILN_KEEP_TMP=1 keeps them to look at a failure)
if os.environ.get("KILN_KEEP_TMP") != "1":
    atexit.register(shutil.rmtree, TMP, True)
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
    if _checks == 0:
        print(f"{name}: no checks ran: a test must assert something")
    sys.exit(1 if _failures or _checks == 0 else 0)


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


def run_bytes(path, tag, *extra, env=None):
    """The bytes of output 0 of `kiln run` on path (checked to exit 0)."""
    d = os.path.join(TMP, "rb_" + tag)
    rc, text = kiln("run", path, "--quiet", "--output-dir", d, *extra, env=env)
    check(rc == 0, f"run {tag}: {text}")
    with open(os.path.join(d, "output_0.pb"), "rb") as f:
        return f.read()


def check_fused_bytes(path, tag, op, *extra, level0=True):
    """A fusion's contract on one model: the optimised graph gives the bytes of level 0 (unless
    level0 is False), of the fused node `op` falling back to its chain, and validates."""
    fused = run_bytes(path, tag + "_2", *extra)
    if level0:
        check(fused == run_bytes(path, tag + "_0", "--level", "0", *extra), f"{tag}: the chain's bytes")
    check(fused == run_bytes(path, tag + "_f", *extra, env={"KILN_FUSION_FAIL": op}),
          f"{tag}: falling back to the chain gives the same bytes")
    ok, text = validate(path, *extra)
    check(ok, f"{tag}: validate: {text}")


def validate(path, *extra):
    rc, text = kiln("validate", path, *extra)
    return rc == 0, text


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


K = "ai.kiln"  # the domain of kiln's own ops


def kmodel(nodes, inputs, outputs, inits=()):
    """A model that imports ai.onnx 13 and kiln's own ops (domain K, version 1)."""
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(K, 1)])
    m.ir_version = 8
    return m


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


__all__ = ["check", "finish", "save", "kiln", "optimized_ops", "validate", "run_bytes", "check_fused_bytes", "model", "kmodel", "K",
           "vi", "const", "np", "helper", "TensorProto", "numpy_helper", "re", "TMP", "maxpool_ref"]


def maxpool_ref(x, k, s, pads, d, ceil):
    """MaxPool over NCHW x as ONNX defines it: the first valid tap of the window, then any
    greater one (so NaN only as the first tap sticks); windows with no valid tap give -inf."""
    import itertools
    import math
    n, c, h, w = x.shape
    out = []
    for ax, size in enumerate((h, w)):
        span = size + pads[ax] + pads[ax + 2] - ((k[ax] - 1) * d[ax] + 1)
        o = (math.ceil(span / s[ax]) if ceil else span // s[ax]) + 1
        if ceil and (o - 1) * s[ax] >= size + pads[ax]:
            o -= 1
        out.append(o)
    y = np.empty((n, c, out[0], out[1]), np.float32)
    for oh, ow in itertools.product(range(out[0]), range(out[1])):
        m = None
        for a, b in itertools.product(range(k[0]), range(k[1])):
            iy, ix = oh * s[0] - pads[0] + a * d[0], ow * s[1] - pads[1] + b * d[1]
            if not (0 <= iy < h and 0 <= ix < w):
                continue
            v = x[:, :, iy, ix]
            m = v.copy() if m is None else np.where(v > m, v, m)
        y[:, :, oh, ow] = m if m is not None else -np.inf
    return y
