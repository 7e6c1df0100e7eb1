"""kiln serve: every endpoint of the v2 protocol and every error it answers, on loopback.

Proves: health/metadata/ready answers; JSON and binary infer give the model's exact values for
every v2 datatype kiln runs (BYTES included); outputs selection and id echo; each kind of bad
request gets its 4xx naming the problem and the server keeps serving; limits on body, tensor
elements, JSON depth, header size and slow clients hold; the repository API needs its token;
/metrics passes promtool; request logs in text and JSON."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import (Server, affine_model, binary_request, check, finish, json_input,  # noqa: E402
                        parse_binary_response, save_model, KILN)

TYPES = [("FP32", TensorProto.FLOAT, np.float32), ("FP64", TensorProto.DOUBLE, np.float64),
         ("FP16", TensorProto.FLOAT16, np.float16), ("INT8", TensorProto.INT8, np.int8),
         ("INT16", TensorProto.INT16, np.int16), ("INT32", TensorProto.INT32, np.int32),
         ("INT64", TensorProto.INT64, np.int64), ("UINT8", TensorProto.UINT8, np.uint8),
         ("UINT16", TensorProto.UINT16, np.uint16), ("UINT32", TensorProto.UINT32, np.uint32),
         ("UINT64", TensorProto.UINT64, np.uint64), ("BOOL", TensorProto.BOOL, np.bool_)]


def types_model(path):
    """One Identity per v2 datatype: X_<T>[N, 3] -> Y_<T>, and X_BYTES -> Y_BYTES."""
    nodes, ins, outs = [], [], []
    for name, tp, _ in TYPES + [("BYTES", TensorProto.STRING, None)]:
        nodes.append(helper.make_node("Identity", ["X_" + name], ["Y_" + name]))
        ins.append(helper.make_tensor_value_info("X_" + name, tp, ["N", 3]))
        outs.append(helper.make_tensor_value_info("Y_" + name, tp, ["N", 3]))
    save_model(nodes, ins, outs, path)


def make_repo(root):
    os.makedirs(os.path.join(root, "affine", "1"))
    affine_model(os.path.join(root, "affine", "1", "model.onnx"))
    with open(os.path.join(root, "affine", "config.json"), "w") as f:
        json.dump({"max_batch_size": 8, "max_queue_delay_us": 200}, f)
    os.makedirs(os.path.join(root, "types", "1"))
    types_model(os.path.join(root, "types", "1", "model.onnx"))


def sample(np_t, rng):
    if np_t == np.bool_:
        return rng.integers(0, 2, (2, 3)).astype(np.bool_)
    if np.issubdtype(np_t, np.floating):
        v = rng.standard_normal((2, 3)).astype(np_t)
        v[0, 0] = np.float32(1.0) / 3  # not exact in binary: must survive the round trip
        return v
    info = np.iinfo(np_t)
    top = min(int(info.max), 2**63 - 1)  # JSON integers stop at INT64's maximum (binary carries all)
    return np.array([[info.min, top, 0], [1, 2, 3]], dtype=np_t)


def test_health_and_metadata(s):
    check(s.get_json("/v2/health/live")[0] == 200, "GET /v2/health/live is 200")
    check(s.get_json("/v2/health/ready")[0] == 200, "GET /v2/health/ready is 200")
    check(s.get_json("/health")[0] == 200, "GET /health is 200")
    st, _, meta = s.get_json("/v2")
    check(st == 200 and meta["name"] == "kiln" and "binary_tensor_data" in meta["extensions"],
          "GET /v2: server metadata with the binary_tensor_data extension")
    st, _, m = s.get_json("/v2/models/affine")
    check(st == 200 and m["versions"] == ["1"] and m["inputs"][0] == {"name": "X", "datatype": "FP32", "shape": [-1, 4]},
          "GET /v2/models/affine: versions, inputs with datatype and shape")
    check(s.get_json("/v2/models/affine/versions/1")[0] == 200, "GET /v2/models/affine/versions/1 is 200")
    st, _, e = s.get_json("/v2/models/affine/versions/9")
    check(st == 404 and "version 9" in e["error"], "an unknown version is 404 naming it")
    st, _, e = s.get_json("/v2/models/nope")
    check(st == 404 and "unknown model 'nope'" in e["error"], "an unknown model is 404 naming it")
    st, _, r = s.get_json("/v2/models/affine/ready")
    check(st == 200 and r["ready"], "GET /v2/models/affine/ready is 200")
    check(s.get_json("/v2/models/affine/versions/1/ready")[0] == 200, "GET .../versions/1/ready is 200")
    check(s.get_json("/v2/models/nope/ready")[0] == 404, "ready of an unknown model is 404")


def test_infer_json(s):
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 7
    st, _, r = s.post_json("/v2/models/affine/infer", {"id": "req-7", "inputs": [json_input("X", x)]})
    y = np.array(r["outputs"][0]["data"], dtype=np.float32).reshape(r["outputs"][0]["shape"]) if st == 200 else None
    check(st == 200 and r["id"] == "req-7" and r["model_name"] == "affine" and r["model_version"] == "1",
          "JSON infer: 200, id echoed, model name and version")
    check(y is not None and np.array_equal(y, x * np.float32(2) + np.float32(1)), "JSON infer: exact float32 values")
    nested = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 4], "data": x.tolist()}]}
    st, _, r2 = s.post_json("/v2/models/affine/versions/1/infer", nested)
    check(st == 200 and r2["outputs"][0]["data"] == r["outputs"][0]["data"], "nested JSON data and a version path")
    st, _, r3 = s.post_json("/v2/models/affine/infer", {"inputs": [json_input("X", x)],
                                                          "parameters": {"note": 1}, "outputs": [{"name": "Y"}]})
    check(st == 200 and len(r3["outputs"]) == 1, "parameters and an outputs list are accepted")


def test_dtypes(s, rng):
    inputs = [("X_" + n, sample(t, rng)) for n, _, t in TYPES]
    strings = [["a", "", "héllo"], ["x y", "\"q\"", "z"]]
    body = {"inputs": [json_input(n, x) for n, x in inputs] +
            [{"name": "X_BYTES", "datatype": "BYTES", "shape": [2, 3], "data": sum(strings, [])}]}
    st, _, r = s.post_json("/v2/models/types/infer", body)
    check(st == 200, "JSON infer with every datatype: 200 (%s)" % (r if st != 200 else ""))
    if st != 200:
        return
    got = {o["name"]: o for o in r["outputs"]}
    for n, x in inputs:
        o = got["Y_" + n[2:]]
        y = np.array(o["data"], dtype=x.dtype).reshape(o["shape"])
        check(o["datatype"] == n[2:] and np.array_equal(y, x), "JSON round trip of %s" % n[2:])
    check(got["Y_BYTES"]["data"] == sum(strings, []), "JSON round trip of BYTES")
    body, headers = binary_request(inputs, outputs=["Y_" + n[2:] for n, _ in inputs],
                                   extra_inputs=[{"name": "X_BYTES", "datatype": "BYTES", "shape": [2, 3], "data": sum(strings, [])}])
    st, h, b = s.request("POST", "/v2/models/types/infer", body, headers)
    check(st == 200 and h.get("content-type") == "application/octet-stream", "binary infer: 200, octet-stream (%d %s)" % (st, b[:300]))
    if st == 200:
        _, out = parse_binary_response(h, b)
        for n, x in inputs:
            check(np.array_equal(out["Y_" + n[2:]], x) and out["Y_" + n[2:]].dtype == x.dtype,
                  "binary round trip of %s" % n[2:])
    # BYTES in binary: 4-byte little-endian length, then the bytes
    raw = b"".join(len(v.encode()).to_bytes(4, "little") + v.encode() for v in sum(strings, []))
    hdr = {"inputs": [{"name": "X_BYTES", "datatype": "BYTES", "shape": [2, 3],
                       "parameters": {"binary_data_size": len(raw)}}] +
           [json_input(n, x) for n, x in inputs],
           "outputs": [{"name": "Y_BYTES", "parameters": {"binary_data": True}}, {"name": "Y_INT8"}]}
    j = json.dumps(hdr).encode()
    st, h, b = s.request("POST", "/v2/models/types/infer", j + raw, {"Inference-Header-Content-Length": str(len(j))})
    n = int(h.get("inference-header-content-length", 0))
    meta = json.loads(b[:n]) if st == 200 else {}
    check(st == 200 and b[n:] == raw and [o["name"] for o in meta["outputs"]] == ["Y_BYTES", "Y_INT8"],
          "binary BYTES round trip, outputs selected in the requested order, JSON and binary mixed")


def expect_400(s, body, needle, what, headers=None, path="/v2/models/affine/infer", code=400):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    st, h, b = s.request("POST", path, body, headers)
    try:
        err = json.loads(b).get("error", "")
    except ValueError:
        err = ""
    check(st == code and needle in err, "%s -> %d naming the problem (%d: %s)" % (what, code, st, err))


def test_errors(s):
    x = np.ones((1, 4), np.float32)
    good = json_input("X", x)
    expect_400(s, {"inputs": [dict(good, datatype="FP64")]}, "datatype FP64", "wrong datatype")
    expect_400(s, {"inputs": [dict(good, datatype="FLOAT")]}, "must be one of", "unknown datatype")
    expect_400(s, {"inputs": [dict(good, shape=[4])]}, "1 dims", "wrong rank")
    expect_400(s, {"inputs": [dict(good, shape=[1, 5], data=[1] * 5)]}, "dim 1 is 5", "wrong fixed dim")
    expect_400(s, {"inputs": [dict(good, name="Z")]}, "unknown input 'Z'", "wrong input name")
    expect_400(s, {"inputs": []}, "missing input 'X'", "missing input")
    expect_400(s, {"inputs": [good, good]}, "twice", "an input given twice")
    expect_400(s, b'{"inputs": [', "malformed JSON", "truncated JSON")
    expect_400(s, b"not json", "malformed JSON", "not JSON at all")
    expect_400(s, {"inputs": [dict(good, data=[1, 2])]}, "has 2 values", "too few values")
    expect_400(s, {"inputs": [dict(good, data=["a"] * 4)]}, "not a valid FP32", "a string for a float")
    expect_400(s, {"inputs": [good], "outputs": [{"name": "nope"}]}, "unknown output 'nope'", "unknown output")
    expect_400(s, {"inputs": [dict(good, shape=[1, -4])]}, "not a non-negative", "negative dim")
    expect_400(s, {"inputs": [good], "id": 5}, "\"id\"", "id not a string")
    expect_400(s, {"inputs": "x"}, "\"inputs\" array", "inputs not an array")
    deep = b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": ' + b"[" * 40 + b"1" + b"]" * 40 + b"}]}"
    expect_400(s, deep, "deep", "JSON nested too deep")
    expect_400(s, {"inputs": [dict(good, shape=[100000, 4], data=[])]}, "max-tensor-elements", "too many elements")
    raw = b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": %s}]}'
    for data in (b"[1,,2,3]", b"[1 2 3 4]", b"[1,2,3,4,]", b"[01,2,3,4]", b"[1.,2,3,4]", b"[1e,2,3,4]",
                 b"[-,2,3,4]", b"[[1,2],[3,4]", b"[1,2,3,4]]", b"[nan,2,3,4]"):
        expect_400(s, raw % data, "malformed JSON", "data %s" % data.decode())
    st, _, r = s.post_json("/v2/models/affine/infer", json.loads(raw % b"[[1, 2e0], [ 3.5E-1 ,-0]]"))
    want = np.array([1, 2, 0.35, 0], np.float32) * np.float32(2) + np.float32(1)
    check(st == 200 and np.array_equal(np.array(r["outputs"][0]["data"], np.float32), want),
          "numbers in every JSON form, nested")
    expect_400(s, raw % b"[true,2,3,4]", "not a valid FP32", "a boolean for a float")
    body, headers = binary_request([("X", x)])
    expect_400(s, body[:-4], "binary_data_size 16 is more", "binary data cut short", headers)
    expect_400(s, body + b"xx", "2 bytes of binary data follow", "binary data left over", headers)
    hdr = dict(headers, **{"Inference-Header-Content-Length": str(len(body) + 5)})
    expect_400(s, body, "more than the body", "Inference-Header-Content-Length past the body", hdr)
    hdr = dict(headers, **{"Inference-Header-Content-Length": "12x"})
    expect_400(s, body, "not a byte count", "Inference-Header-Content-Length not a number", hdr)
    j = json.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 12}}]}).encode()
    expect_400(s, j + b"\0" * 12, "need 16", "binary_data_size wrong for the shape",
               {"Inference-Header-Content-Length": str(len(j))})
    ints = {"inputs": [json_input("X_" + n, np.zeros((1, 3), t)) for n, _, t in TYPES] +
            [{"name": "X_BYTES", "datatype": "BYTES", "shape": [1, 3], "data": ["", "", ""]}]}
    ints["inputs"][3]["data"] = [1, 2, 300]  # INT8
    expect_400(s, ints, "out of range for INT8", "an INT8 value out of range", path="/v2/models/types/infer")
    ints["inputs"][3]["data"] = [1, 2, 3]
    ints["inputs"][5]["data"] = [1, 2.5, 3]  # INT32
    expect_400(s, ints, "not a valid INT32", "a fraction for an INT32", path="/v2/models/types/infer")
    ints["inputs"][5]["data"] = [1, 2, 3]
    ints["inputs"][10]["data"] = [1, 2, 18446744073709551615]  # UINT64 past int64: binary only
    expect_400(s, ints, "out of range for UINT64", "a UINT64 past int64 in JSON", path="/v2/models/types/infer")
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    c.sendall(b"POST /v2/models/affine/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
    reply = c.recv(4096).decode(errors="replace")
    c.close()
    check(reply.startswith("HTTP/1.1 413") and "max-body-bytes" in reply,
          "a Content-Length over --max-body-bytes is 413 before the body is read")
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    c.sendall(b"POST /v2/models/affine/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    try:
        for _ in range(40):
            c.sendall(b"10000\r\n" + b" " * 0x10000 + b"\r\n")
        c.sendall(b"0\r\n\r\n")
        reply = c.recv(4096).decode(errors="replace")
    except OSError:
        reply = ""
    c.close()
    check(reply.startswith("HTTP/1.1 413"), "a chunked body growing over --max-body-bytes is 413")
    st, _, _ = s.request("GET", "/v2/nothing/here")
    check(st == 404, "an unknown endpoint is 404")
    st, _, _ = s.request("PUT", "/v2/models/affine/infer", b"{}")
    check(st == 405, "a wrong method is 405")
    st, _, _ = s.request("GET", "/v2/models/affine/infer")
    check(st == 404, "GET on infer is 404")


def test_mutations(s, rng):
    """Valid requests with bytes flipped, cut or inserted: each answered 200 or 4xx, never a crash."""
    x = np.ones((1, 4), np.float32)
    seeds = [json.dumps({"id": "m", "inputs": [json_input("X", x)], "outputs": [{"name": "Y"}]}).encode()]
    body, headers = binary_request([("X", x)])
    seeds.append(body)
    bad = []
    for i in range(300):
        b = bytearray(seeds[i % 2])
        for _ in range(1 + i % 4):
            k = int(rng.integers(0, len(b)))
            op = i % 3
            if op == 0:
                b[k] = int(rng.integers(0, 256))
            elif op == 1:
                del b[k:k + int(rng.integers(1, 8))]
            else:
                b[k:k] = bytes(rng.choice(list(b'[]{}",:0123456789-e.truefalsenul\\'), 4).tolist())
        st, _, _ = s.request("POST", "/v2/models/affine/infer", bytes(b), headers if i % 2 else None)
        if not (st == 200 or 400 <= st < 500):
            bad.append(st)
    check(not bad, "300 mutated requests: each 200 or 4xx (%s)" % bad[:5])


def test_limits(s):
    st, _, _ = s.request("GET", "/v2/health/live", headers={"X-Big": "a" * 100000})
    check(st in (413, 414, 431), "a header over --max-header-bytes is refused (%d)" % st)
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    c.sendall(b"POST /v2/models/affine/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    t0 = time.time()
    try:
        data = c.recv(100)
    except socket.timeout:
        data = None
    check(data == b"" and time.time() - t0 < 8, "a stalled client is disconnected after --conn-timeout-s")
    c.close()
    check(s.get_json("/v2/health/ready")[0] == 200, "the server still serves after every bad request")


def test_repository_api(s, token):
    st, _, e = s.post_json("/v2/repository/index", {})
    check(st == 401 and "Bearer" in e["error"], "repository index without the token is 401")
    st, _, _ = s.post_json("/v2/repository/index", {}, headers={"Authorization": "Bearer wrong"})
    check(st == 401, "repository index with a wrong token is 401")
    st, _, idx = s.post_json("/v2/repository/index", {}, headers={"Authorization": "Bearer " + token})
    names = sorted((e["name"], e.get("version"), e["state"]) for e in idx) if st == 200 else []
    check(names == [("affine", "1", "READY"), ("types", "1", "READY")], "repository index lists the versions: %s" % names)
    st, _, _ = s.post_json("/v2/repository/models/nope/load", {}, headers={"Authorization": "Bearer " + token})
    check(st == 404, "loading an unknown model is 404")


def test_metrics(s):
    st, h, b = s.request("GET", "/metrics")
    text = b.decode()
    p = subprocess.run(["promtool", "check", "metrics"], input=b, capture_output=True, timeout=60)
    check(st == 200 and p.returncode == 0, "promtool check metrics passes: %s" % p.stderr.decode().strip())
    for needle in ['kiln_request_duration_seconds_bucket{model="affine",version="1",le="+Inf"}',
                   "kiln_queue_duration_seconds_bucket", "kiln_compute_duration_seconds_bucket",
                   "kiln_batch_size_bucket", 'kiln_inference_requests_total{model="affine",version="1",outcome="success"}',
                   'kiln_http_responses_total{code="400"}', 'kiln_http_responses_total{code="413"}',
                   "kiln_queue_depth{", "kiln_inflight_requests", "kiln_fused_node_fallbacks{",
                   'kiln_model_load_failures_total{model="affine"} 0', "process_resident_memory_bytes"]:
        check(needle in text, "metrics have " + needle)


def loop_model(path):
    """Y = Loop(M, X): the body passes X[N, 4] through M times (M an int64 input)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["x_in"], ["x_out"]), helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, ["N", 4])])
    save_model([helper.make_node("Loop", ["M", "", "X"], ["Y"], body=body)],
               [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
                helper.make_tensor_value_info("M", TensorProto.INT64, [])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])], path)


def test_run_timeout(root):
    """--run-timeout-ms: a run of 2^62 iterations gets 504 naming the limit; the next request is served."""
    path = os.path.join(root, "loop.onnx")
    loop_model(path)
    s = Server([path, "--run-timeout-ms", "300", "--warmup-runs", "0", "--drain-s", "0"])
    try:
        x = np.ones((1, 4), np.float32)
        def infer(m):
            return s.post_json("/v2/models/loop/infer", {"inputs": [
                json_input("X", x), {"name": "M", "datatype": "INT64", "shape": [], "data": [m]}]})
        st, _, r = infer(3)
        check(st == 200 and r["outputs"][0]["data"] == [1.0] * 4, "a Loop of 3 iterations: 200")
        t0 = time.time()
        st, _, r = infer(2**62)
        check(st == 504 and "time limit of 300 ms" in r.get("error", ""), "a Loop of 2^62 iterations: 504 naming the limit")
        check(time.time() - t0 < 10, "... within seconds")
        st, _, r = infer(1)
        check(st == 200, "the next request is served")
    finally:
        s.stop()


def test_untyped_io(root):
    """A model whose input is float8 (no KServe v2 datatype) is refused at load, naming it."""
    g = helper.make_graph([helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.FLOAT)], "g",
                          [helper.make_tensor_value_info("X", 17, [2])],  # FLOAT8E4M3FN
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    path = os.path.join(root, "f8.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    r = subprocess.run([KILN, "serve", path, "--http-port", "0"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "input 'X' is float8e4m3fn, which the KServe v2 protocol has no datatype" in r.stderr,
          "a float8 input is refused at load: %d %r" % (r.returncode, r.stderr[-300:]))


def main():
    root = tempfile.mkdtemp(prefix="kiln-serve-proto-")
    rng = np.random.default_rng(1)
    try:
        make_repo(root)
        token = "s3cret"
        s = Server(["--model-repository", root, "--admin-token", token, "--max-body-bytes", "1048576",
                    "--max-tensor-elements", "100000", "--conn-timeout-s", "2", "--max-header-bytes", "16384",
                    "--drain-s", "0"])
        try:
            test_health_and_metadata(s)
            test_infer_json(s)
            test_dtypes(s, rng)
            test_errors(s)
            test_mutations(s, rng)
            test_limits(s)
            test_repository_api(s, token)
            test_metrics(s)
            log = s.stdout()
            check("POST /v2/models/affine/infer 200" in log and "model=affine version=1" in log,
                  "request log lines on stdout")
        finally:
            s.stop()
        check(s.p.returncode == 0, "SIGTERM: exit 0")
        s = Server([os.path.join(root, "affine", "1", "model.onnx"), "--log-format", "json", "--drain-s", "0"])
        try:
            st, _, e = s.post_json("/v2/repository/index", {})
            check(st == 403 and "--admin-token" in e["error"], "without --admin-token the repository API is 403")
            check(s.get_json("/v2/models/model")[0] == 200, "kiln serve MODEL.onnx: the model is named after its file")
            time.sleep(0.3)  # the log line is written when the connection's request completes
            lines = [json.loads(l) for l in s.stdout().splitlines() if l.strip()]
            check(any(l.get("path") == "/v2/models/model" and l.get("status") == 200 for l in lines),
                  "--log-format json: one JSON object per request")
        finally:
            s.stop()
        test_run_timeout(root)
        test_untyped_io(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
