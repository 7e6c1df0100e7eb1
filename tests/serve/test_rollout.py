"""kiln serve: versioned models, safe roll-out and rollback.

Proves: a broken new version (garbage bytes) loaded on SIGHUP leaves the old version serving,
with requests under way all answered 200 and readiness 200 throughout, the failure in the
repository index with its reason and in kiln_model_load_failures_total; a version that
disagrees with the serving one is refused by validate; a version over its latency budget is
refused; a good version switches traffic (load API) and the old one is retired; a directory not
yet renamed to its version number is never loaded; labels resolve to serving versions only;
unloading a required model turns readiness 503 and loading it back restores it; --poll-s
picks up a new version by itself."""
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Server, affine_model, binary_request, check, finish, json_input, slow_model  # noqa: E402

TOKEN = {"Authorization": "Bearer tok"}
X = np.arange(8, dtype=np.float32).reshape(2, 4)


def add_version(root, v, scale=2.0, broken=False):
    """Write DIR/m/.tmp-V, then rename it to DIR/m/V (the atomic step)."""
    tmp = os.path.join(root, "m", ".tmp-%d" % v)
    os.makedirs(tmp)
    path = os.path.join(tmp, "model.onnx")
    if broken:
        with open(path, "wb") as f:
            f.write(b"\x08\x07garbage, not a model" * 10)
    else:
        affine_model(path, scale=scale)
    os.rename(tmp, os.path.join(root, "m", str(v)))


def write_config(root, cfg):
    with open(os.path.join(root, "m", "config.json.tmp"), "w") as f:
        json.dump(cfg, f)
    os.rename(os.path.join(root, "m", "config.json.tmp"), os.path.join(root, "m", "config.json"))


def infer(s, version=None):
    path = "/v2/models/m/infer" if version is None else "/v2/models/m/versions/%s/infer" % version
    st, h, r = s.post_json(path, {"inputs": [json_input("X", X)]})
    return st, h, r


def index(s):
    return s.post_json("/v2/repository/index", {}, headers=TOKEN)[2]


def wait_for(cond, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def failure_reason(s, version):
    for e in index(s):
        if e.get("version") == str(version) and e["state"] == "UNAVAILABLE":
            return e.get("reason", "")
    return None


def load_failures(s):
    b = s.request("GET", "/metrics")[2].decode()
    return [float(l.split()[-1]) for l in b.splitlines() if l.startswith('kiln_model_load_failures_total{model="m"}')][0]


class Traffic:
    """Infer and readiness requests in a loop on another thread, recording every status."""
    def __init__(self, s):
        self.s, self.codes, self.ready, self.stop_ = s, [], [], False
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        while not self.stop_:
            self.codes.append(infer(self.s)[0])
            self.ready.append(self.s.get_json("/v2/health/ready")[0])

    def stop(self):
        self.stop_ = True
        self.t.join(60)


def test_rollback(root):
    os.makedirs(os.path.join(root, "m"))
    add_version(root, 1)
    write_config(root, {"validate": True})
    s = Server(["--model-repository", root, "--admin-token", "tok", "--drain-s", "0", "--log-format", "off"])
    try:
        st, _, r = infer(s)
        check(st == 200 and r["model_version"] == "1", "version 1 serves")
        traffic = Traffic(s)
        add_version(root, 2, broken=True)
        s.signal(signal.SIGHUP)
        check(wait_for(lambda: failure_reason(s, 2) is not None), "SIGHUP: the broken version 2 was tried")
        time.sleep(0.2)
        traffic.stop()
        check(traffic.codes and all(c == 200 for c in traffic.codes),
              "every request during the failed roll-out got 200 (%d requests)" % len(traffic.codes))
        check(traffic.ready and all(c == 200 for c in traffic.ready), "readiness stayed 200 during the reload")
        st, _, r = infer(s)
        check(st == 200 and r["model_version"] == "1", "after a failed load the old version keeps serving")
        reason = failure_reason(s, 2)
        check(reason and "garbage" not in reason and len(reason) > 10, "the index gives the failure's reason: %s" % reason)
        check(load_failures(s) == 1, "kiln_model_load_failures_total counts it")
        s.signal(signal.SIGHUP)
        time.sleep(0.5)
        check(load_failures(s) == 1, "an unchanged failed version is not retried on every scan")

        add_version(root, 3, scale=3.0)
        st, _, e = s.post_json("/v2/repository/models/m/load", {}, headers=TOKEN)
        check(st == 400 and "validation" in e.get("error", "") and "keeps serving" in e.get("error", ""),
              "load API: a version that disagrees with the serving one is refused (%s)" % e)
        check(infer(s)[2]["model_version"] == "1", "version 1 still serves after the refused validation")

        os.makedirs(os.path.join(root, "m", ".tmp-9"))
        affine_model(os.path.join(root, "m", ".tmp-9", "model.onnx"))  # never renamed: never loaded
        add_version(root, 4)
        st, _, e = s.post_json("/v2/repository/models/m/load", {}, headers=TOKEN)
        check(st == 200 and all(e.get("version") != "9" for e in index(s)), "a directory not renamed to its version is ignored")
        shutil.rmtree(os.path.join(root, "m", ".tmp-9"))
        st, _, r = infer(s)
        check(st == 200 and r["model_version"] == "4", "a good version 4 took the traffic")
        check(np.array_equal(np.array(r["outputs"][0]["data"], np.float32).reshape(2, 4), X * 2 + 1), "version 4's values")
        check(infer(s, 1)[0] == 404, "version 1 was retired (latest-1 policy)")
        write_config(root, {"validate": True, "labels": {"stable": 4, "canary": 9}})
        s.signal(signal.SIGHUP)
        check(wait_for(lambda: any("label 'canary'" in e.get("reason", "") for e in index(s)), 30),
              "a label naming a version that is not serving is refused, reason in the index")
        st, _, e = infer(s, "canary")
        check(st == 404 and "canary" in e["error"], "an unknown label is 404 naming it")
        write_config(root, {"validate": True, "labels": {"stable": 4}, "latency_budget_ms": 0.000001})
        s.signal(signal.SIGHUP)
        check(wait_for(lambda: infer(s, "stable")[0] == 200, 30), "a valid label is applied")
        st, _, r = infer(s, "stable")
        check(st == 200 and r["model_version"] == "4", "label 'stable' resolves to version 4")
        add_version(root, 5)
        st, _, e = s.post_json("/v2/repository/models/m/load", {}, headers=TOKEN)
        check(st == 400 and "budget" in e.get("error", ""), "a version over its latency budget is refused (%s)" % e)
        check(infer(s)[2]["model_version"] == "4", "version 4 keeps serving")

        st, _, _ = s.post_json("/v2/repository/models/m/unload", {}, headers=TOKEN)
        check(st == 200, "unload API: 200")
        st, h, _ = s.get_json("/v2/health/ready")
        check(st == 503 and h.get("retry-after"), "unloading a required model: readiness 503 with Retry-After")
        st, h, e = infer(s)
        check(st == 503 and "unloaded" in e["error"], "infer on an unloaded model: 503")
        check(any(x.get("reason") == "unloaded" for x in index(s)), "the index says unloaded")
        write_config(root, {})
        st, _, e = s.post_json("/v2/repository/models/m/load", {}, headers=TOKEN)
        check(st == 200 and s.get_json("/v2/health/ready")[0] == 200, "load API brings it back, ready again")
        check(infer(s)[2]["model_version"] == "5", "the newest version serves after the reload")
        check(infer(s, 4)[0] == 404, "version 4 retired by the latest-1 policy")
        write_config(root, {"labels": {"stable": 4}})
        s.signal(signal.SIGHUP)
        check(wait_for(lambda: infer(s, "stable")[0] == 200, 30), "a label loads the version it names")
        check(infer(s, "stable")[2]["model_version"] == "4" and infer(s)[2]["model_version"] == "5",
              "label 'stable' serves version 4 while the newest, 5, serves by default")
    finally:
        s.stop()


def test_poll(root):
    os.makedirs(os.path.join(root, "m"))
    add_version(root, 1)
    s = Server(["--model-repository", root, "--poll-s", "0.3", "--drain-s", "0", "--log-format", "off"])
    try:
        add_version(root, 2)
        check(wait_for(lambda: infer(s)[2].get("model_version") == "2", 30), "--poll-s: version 2 picked up by itself")
    finally:
        s.stop()


def test_switch_with_requests_in_flight(root):
    """The load API retires the old version while a request to it is in flight on the same HTTP
    thread: the switch must not wait for that request there (it would never end)."""
    for v in (1, 2):
        tmp = os.path.join(root, "m", ".tmp-%d" % v)
        os.makedirs(tmp)
        slow_model(os.path.join(tmp, "model.onnx"), reps=32)  # ~40 GFLOP a request: seen in flight on an idle machine
        if v == 1:
            os.rename(tmp, os.path.join(root, "m", "1"))
    s = Server(["--model-repository", root, "--admin-token", "tok", "--http-threads", "1", "--threads", "1",
                "--drain-s", "0", "--log-format", "off"])
    try:
        body, headers = binary_request([("X", np.ones((1024, 768), np.float32))])
        got = {}
        def slow(_):
            st, h, b = s.request("POST", "/v2/models/m/infer", body, headers, timeout=60)
            got["slow"] = (st, json.loads(b[:int(h.get("inference-header-content-length", len(b)))]) if st == 200 else b)
        t = threading.Thread(target=slow, args=(0,))
        t.start()
        def in_flight():
            b = s.request("GET", "/metrics")[2].decode()
            return any(l.startswith("kiln_inflight_requests ") and float(l.split()[1]) >= 1 for l in b.splitlines())
        check(wait_for(in_flight, 30), "a request to version 1 is in flight")
        os.rename(os.path.join(root, "m", ".tmp-2"), os.path.join(root, "m", "2"))
        t0 = time.time()
        try:
            st = s.post_json("/v2/repository/models/m/load", {}, headers=TOKEN, timeout=30)[0]
        except OSError as e:
            st = str(e)
        t.join(60)
        check(st == 200, "load API while a request to the old version is in flight: 200 in %.1f s (%s)" % (time.time() - t0, st))
        slow_st = got.get("slow", (None, None))
        check(slow_st[0] == 200 and slow_st[1]["model_version"] == "1", "the request in flight finished on version 1")
        check(infer_slow(s, body, headers) == "2", "new requests go to version 2")
    finally:
        s.stop()


def test_other_model_loads(root):
    """Loading one model never makes another unknown: requests for m stay 200 while b loads."""
    os.makedirs(os.path.join(root, "m"))
    add_version(root, 1)
    os.makedirs(os.path.join(root, "b", "1"))
    slow_model(os.path.join(root, "b", "1", "model.onnx"))
    with open(os.path.join(root, "b", "config.json"), "w") as f:
        json.dump({"warmup_runs": 8}, f)  # a load that takes a while
    s = Server(["--model-repository", root, "--admin-token", "tok", "--drain-s", "0", "--log-format", "off"])
    try:
        traffic = Traffic(s)
        for _ in range(4):
            s.post_json("/v2/repository/models/b/unload", {}, headers=TOKEN)
            s.post_json("/v2/repository/models/b/load", {}, headers=TOKEN)
        s.signal(signal.SIGHUP)
        time.sleep(0.3)
        traffic.stop()
        bad = [c for c in traffic.codes if c != 200]
        check(traffic.codes and not bad, "model m answered 200 to all %d requests while b loaded and unloaded (%s)"
              % (len(traffic.codes), bad[:5]))
    finally:
        s.stop()


def infer_slow(s, body, headers):
    st, h, b = s.request("POST", "/v2/models/m/infer", body, headers, timeout=60)
    return json.loads(b[:int(h["inference-header-content-length"])])["model_version"] if st == 200 else st


def main():
    for fn in (test_rollback, test_poll, test_switch_with_requests_in_flight, test_other_model_loads):
        root = tempfile.mkdtemp(prefix="kiln-serve-roll-")
        try:
            fn(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
