"""Helpers for kiln serve's tests: start a server on a free loopback port, talk v2 to it, stop it.

Every server is started with --http-port 0 and found from its 'listening on' line; every wait
is bounded, so a test ends by itself even when the server misbehaves."""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

KILN = sys.argv[1] if len(sys.argv) > 1 else "build/kiln"
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAILURES = []


def check(cond, what):
    """Record a failed assertion (the test goes on, and fails at the end)."""
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        FAILURES.append(what)


def finish():
    if FAILURES:
        print("%d checks failed" % len(FAILURES))
        sys.exit(1)
    print("all checks passed")


class Server:
    def __init__(self, args, env=None, wait_ready=True):
        self.log = tempfile.TemporaryFile()
        self.err = tempfile.NamedTemporaryFile(delete=False)
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen([KILN, "serve", "--http-port", "0"] + args, stdout=self.log,
                                  stderr=self.err, env=e)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            if self.p.poll() is not None:
                raise RuntimeError("kiln serve exited %d: %s" % (self.p.returncode, self.stderr()))
            for line in self.stderr().splitlines():
                if "listening on http://" in line:
                    self.port = int(line.rsplit(":", 1)[1])
            time.sleep(0.05)
        if self.port is None:
            self.p.kill()
            raise RuntimeError("kiln serve did not start: " + self.stderr())

    def stderr(self):
        with open(self.err.name, "r", errors="replace") as f:
            return f.read()

    def stdout(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict (lower-case names), body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        h = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, h, data

    def get_json(self, path, **kw):
        s, h, b = self.request("GET", path, **kw)
        return s, h, json.loads(b) if b else None

    def post_json(self, path, body, **kw):
        s, h, b = self.request("POST", path, body, **kw)
        try:
            return s, h, json.loads(b)
        except ValueError:
            return s, h, b

    def signal(self, sig):
        self.p.send_signal(sig)

    def wait(self, timeout=60):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None

    def stop(self):
        """SIGTERM, and check the exit is clean (0: no sanitizer report, no leak)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            rc = self.wait(60)
            if rc != 0:
                print(self.stderr()[-4000:])
            check(rc == 0, "server exits 0 on SIGTERM (%s)" % rc)
        os.unlink(self.err.name)


def metric(s, prefix):
    """The sum of every /metrics sample whose line starts with prefix (all models and versions)."""
    b = s.request("GET", "/metrics")[2].decode()
    return sum(float(l.split()[-1]) for l in b.splitlines() if l.startswith(prefix))


V2_DTYPE = {np.float32: "FP32", np.float64: "FP64", np.float16: "FP16", np.int8: "INT8",
            np.int16: "INT16", np.int32: "INT32", np.int64: "INT64", np.uint8: "UINT8",
            np.uint16: "UINT16", np.uint32: "UINT32", np.uint64: "UINT64", np.bool_: "BOOL"}
NP_OF_V2 = {v: k for k, v in V2_DTYPE.items()}


def json_input(name, x):
    return {"name": name, "datatype": V2_DTYPE[x.dtype.type], "shape": list(x.shape),
            "data": x.flatten().tolist()}


def binary_request(inputs, outputs=None, binary_outputs=True, rid=None, extra_inputs=()):
    """(body bytes, headers) of a binary-extension request; inputs: list of (name, array)."""
    header = {"inputs": [], "parameters": {"binary_data_output": binary_outputs}}
    if rid:
        header["id"] = rid
    blobs = []
    for name, x in inputs:
        raw = np.ascontiguousarray(x).tobytes()
        header["inputs"].append({"name": name, "datatype": V2_DTYPE[x.dtype.type],
                                 "shape": list(x.shape), "parameters": {"binary_data_size": len(raw)}})
        blobs.append(raw)
    header["inputs"] += list(extra_inputs)
    if outputs:
        header["outputs"] = [{"name": o, "parameters": {"binary_data": binary_outputs}} for o in outputs]
    j = json.dumps(header).encode()
    return j + b"".join(blobs), {"Inference-Header-Content-Length": str(len(j)),
                                  "Content-Type": "application/octet-stream"}


def parse_binary_response(headers, body):
    """{name: array} of a response with binary outputs (JSON outputs decoded too)."""
    n = int(headers.get("inference-header-content-length", len(body)))
    meta = json.loads(body[:n])
    off = n
    out = {}
    for o in meta["outputs"]:
        dt = NP_OF_V2[o["datatype"]]
        if "parameters" in o and "binary_data_size" in o["parameters"]:
            size = o["parameters"]["binary_data_size"]
            out[o["name"]] = np.frombuffer(body[off:off + size], dtype=dt).reshape(o["shape"])
            off += size
        else:
            out[o["name"]] = np.array(o["data"], dtype=dt).reshape(o["shape"])
    return meta, out


def save_model(graph_nodes, inputs, outputs, path, initializers=(), opset=13):
    g = helper.make_graph(graph_nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)


def affine_model(path, scale=2.0, bias=1.0, width=4):
    """Y = X * scale + bias on float X[N, width]; a batchable model with a known answer."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", width])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", width])
    s = helper.make_tensor("s", TensorProto.FLOAT, [1], [scale])
    b = helper.make_tensor("b", TensorProto.FLOAT, [1], [bias])
    save_model([helper.make_node("Mul", ["X", "s"], ["T"]), helper.make_node("Add", ["T", "b"], ["Y"])],
               [x], [y], path, [s, b])


def slow_model(path, n=768, reps=8):
    """A float X[N, n] through `reps` MatMuls with an n x n weight: some milliseconds per row."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", TensorProto.FLOAT, [n, n], (rng.standard_normal((n, n)) * 0.01).astype(np.float32).flatten().tolist())
    nodes, prev = [], "X"
    for i in range(reps):
        nodes.append(helper.make_node("MatMul", [prev, "W"], ["M%d" % i]))
        prev = "M%d" % i
    nodes.append(helper.make_node("Identity", [prev], ["Y"]))
    save_model(nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n])], path, [w])


def in_threads(fn, n):
    """Run fn(i) for i < n on n threads at once; returns the results in order."""
    res = [None] * n
    def run(i):
        try:
            res[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported as the result
            res[i] = e
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return res
