"""kiln serve: dynamic batching, admission and instances.

Proves: 16 concurrent clients sending 1 to 3 rows each to a batchable model get exactly their own
rows back (Y = 2X + 1, each client's values distinct), while the batch-size histogram shows runs
of several requests; a request with more rows than max_batch_size runs alone and is right; a full
queue answers 503 with Retry-After and the others are served; two instances share one compiled
model; a failing model run answers 500 and the server keeps serving."""
import os
import shutil
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import (Server, affine_model, binary_request, check, finish, in_threads,  # noqa: E402
                        json_input, metric, save_model, slow_model)


def client(s, i):
    rows = 1 + i % 3
    x = (np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) + 100 * i) / 8
    st, _, r = s.post_json("/v2/models/affine/infer", {"id": str(i), "inputs": [json_input("X", x)]})
    if st != 200:
        return "client %d: %d %s" % (i, st, r)
    y = np.array(r["outputs"][0]["data"], np.float32).reshape(r["outputs"][0]["shape"])
    if r["id"] != str(i) or not np.array_equal(y, x * 2 + 1):
        return "client %d got other rows: %s" % (i, y.tolist())
    return None


def test_batching(root):
    path = os.path.join(root, "affine.onnx")
    affine_model(path)
    s = Server([path, "--model-name", "affine", "--max-batch-size", "8", "--preferred-batch-sizes", "4,8",
                "--max-queue-delay-us", "100000", "--drain-s", "0", "--log-format", "off", "--http-threads", "2"])
    try:
        for rnd in range(3):
            res = in_threads(lambda i: client(s, i + 16 * rnd), 16)
            bad = [r for r in res if r is not None]
            check(not bad, "round %d: 16 concurrent clients each got exactly their rows %s" % (rnd, bad[:3]))
        runs, rows = metric(s, "kiln_batch_size_count"), metric(s, "kiln_batch_size_sum")
        reqs = metric(s, 'kiln_inference_requests_total{model="affine",version="1",outcome="success"}')
        check(reqs == 48 and rows == sum(1 + i % 3 for i in range(48)), "every request and row counted once (%d, %d)" % (reqs, rows))
        check(runs < reqs / 2, "requests were coalesced: %d runs for %d requests" % (runs, reqs))
        def mixed(i):  # routing from many HTTP threads at once (it once shared strtok's state)
            paths = ["/v2/models/affine", "/v2/health/ready", "/v2/models/affine/versions/1/ready", "/v2"]
            for k in range(40):
                st = s.request("GET", paths[(i + k) % 4])[0] if k % 2 else (0 if client(s, i) else 200)
                if st != 200:
                    return "request %d of client %d: %s" % (k, i, st)
            return None
        bad = [r for r in in_threads(mixed, 16) if r is not None]
        check(not bad, "16 clients mixing metadata, health and infer requests: all 200 %s" % bad[:3])
        x = np.ones((20, 4), np.float32)
        st, _, r = s.post_json("/v2/models/affine/infer", {"inputs": [json_input("X", x)]})
        check(st == 200 and r["outputs"][0]["shape"] == [20, 4] and r["outputs"][0]["data"] == [3.0] * 80,
              "a request over max_batch_size runs alone and is right")
    finally:
        s.stop()


def test_queue_full_and_instances(root):
    path = os.path.join(root, "slow.onnx")
    slow_model(path)
    s = Server([path, "--max-queue-size", "1", "--instances", "2", "--threads", "1", "--drain-s", "0",
                "--log-format", "off", "--http-threads", "2"])
    try:
        st, _, meta = s.get_json("/v2/models/slow")
        check(st == 200 and meta["parameters"]["instances"] == 2, "two instances of one compiled model")
        x = np.ones((256, 768), np.float32)  # about 2.4 GFLOP a run: the 24 requests arrive during it
        body, headers = binary_request([("X", x)], binary_outputs=True)

        def one(_):
            st, h, b = s.request("POST", "/v2/models/slow/infer", body, headers)
            return st, h.get("retry-after"), b
        res = in_threads(one, 24)
        codes = [r[0] for r in res if isinstance(r, tuple)]
        full = [r for r in res if isinstance(r, tuple) and r[0] == 503]
        check(codes.count(200) >= 2 and len(full) >= 1 and codes.count(200) + len(full) == 24,
              "a full queue: 503s and 200s only (%d ok, %d full)" % (codes.count(200), len(full)))
        check(all(r[1] == "1" and b"queue full" in r[2] for r in full), "each 503 has Retry-After and says the queue is full")
        check(metric(s, 'kiln_inference_requests_total{model="slow",version="1",outcome="rejected"}') == len(full),
              "rejections counted in kiln_inference_requests_total{outcome=\"rejected\"}")
        check(s.request("POST", "/v2/models/slow/infer", body, headers)[0] == 200, "served again once the queue drains")
    finally:
        s.stop()


def test_failing_run(root):
    path = os.path.join(root, "reshape.onnx")
    save_model([helper.make_node("Reshape", ["X", "S"], ["Y"])],
               [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
                helper.make_tensor_value_info("S", TensorProto.INT64, [2])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], path)
    s = Server([path, "--drain-s", "0", "--log-format", "off", "--warmup-runs", "0"])
    try:
        x = np.ones((1, 4), np.float32)
        st, _, r = s.post_json("/v2/models/reshape/infer", {"inputs": [json_input("X", x), json_input("S", np.array([3, 3]))]})
        check(st == 500 and "model run failed" in r.get("error", ""), "a failing run is 500 naming it (%d %s)" % (st, r))
        st, _, r = s.post_json("/v2/models/reshape/infer", {"inputs": [json_input("X", x), json_input("S", np.array([2, 2]))]})
        check(st == 200 and r["outputs"][0]["shape"] == [2, 2], "the server keeps serving after a failed run")
    finally:
        s.stop()


def main():
    root = tempfile.mkdtemp(prefix="kiln-serve-batch-")
    try:
        test_batching(root)
        test_queue_full_and_instances(root)
        test_failing_run(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
