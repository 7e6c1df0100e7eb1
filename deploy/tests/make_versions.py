#!/usr/bin/python3
"""Model versions for the roll-out tests, from examples/models/tiny_cnn.onnx.

usage: make_versions.py SRC.onnx OUT_DIR
Writes OUT_DIR/good/model.onnx (the same graph, a new version), OUT_DIR/corrupt/model.onnx (not
an ONNX model: the server must refuse to load it), OUT_DIR/nan/model.onnx (loads and runs, but
the bias of the graph's last node with an initializer is NaN, so outputs are NaN: the roll-out's
health check must catch it).
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def save(model, out, kind):
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))


def main():
    src, out = sys.argv[1], sys.argv[2]
    m = onnx.load(src)
    save(m, out, "good")
    os.makedirs(os.path.join(out, "corrupt"), exist_ok=True)
    with open(os.path.join(out, "corrupt", "model.onnx"), "wb") as f:
        f.write(open(src, "rb").read()[:200] + b"\xff" * 64)
    nan = onnx.load(src)
    inits = {t.name: t for t in nan.graph.initializer}
    last = [n for n in nan.graph.node if any(i in inits for i in n.input)][-1]
    init = inits[[i for i in last.input if i in inits][-1]]
    w = numpy_helper.to_array(init).copy()
    w.flat[0] = np.nan
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    save(nan, out, "nan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
