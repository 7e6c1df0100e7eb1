#!/usr/bin/python3
"""Tests of kiln-anomaly (CTest label `anomaly`): the pipeline on a short stream of the bundled
data (known anomalies found), every malformed-input case, stdin, the KServe v2 client against
a stub server, and the Prometheus endpoint.

Usage: test_anomaly.py PATH/TO/kiln-anomaly EXAMPLES_ANOMALY_DIR [PATH/TO/kiln]
With the kiln command given, --serve also runs end to end against `kiln serve`.
"""
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN, HERE = sys.argv[1], sys.argv[2]
KILN = sys.argv[3] if len(sys.argv) > 3 else None
MODEL = os.path.join(HERE, "model")
DATA = os.path.join(HERE, "data")
CFG = json.load(open(os.path.join(MODEL, "config.json")))
W, C = CFG["window"], len(CFG["channels"])
TMP = tempfile.mkdtemp(prefix="kiln_anomaly_test_")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(args, stdin=None, timeout=120):
    p = subprocess.run([BIN] + args, input=stdin, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def events_of(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def head_rows(n):
    lines = open(os.path.join(DATA, "plant_test.csv")).read().splitlines()
    return lines[0], lines[1:n + 1]


def kinds_within(n):
    out = []
    for line in open(os.path.join(DATA, "plant_test.kinds.csv")).read().splitlines()[1:]:
        kind, chan, s, e = line.split(",")
        if int(e) < n - W:
            out.append((kind, chan, int(s), int(e)))
    return out


def test_help():
    rc, out, _ = run(["--help"])
    check(rc == 0 and "--input" in out and "--serve" in out, "--help prints the usage")
    rc, _, err = run([MODEL])
    check(rc == 2 and "usage" in err, "no --input: usage error (exit 2)")


def test_pipeline():
    n = 2000
    header, rows = head_rows(n)
    path = os.path.join(TMP, "short.csv")
    open(path, "w").write(header + "\n" + "\n".join(rows) + "\n")
    kinds = os.path.join(TMP, "short.kinds.csv")
    known = kinds_within(n)
    open(kinds, "w").write("kind,channel,start_row,end_row\n" +
                           "".join(f"{k},{c},{s},{e}\n" for k, c, s, e in known))
    rc, out, err = run([MODEL, "--input", path, "--labels", "label"])
    ev = events_of(out)
    check(rc == 0, "short stream: exit 0")
    check(f"rows {n} " in err and f"windows {n - W + 1}," in err, "short stream: rows and windows counted")
    check("FusedGemm" in err or "FusedConv" in err, "short stream: the fusions are reported")
    check(all(set(e) == {"start_row", "end_row", "start", "end", "channels", "score"} for e in ev),
          "events have the documented fields")
    found = [k for k in known if any(e["start_row"] <= k[3] and k[2] <= e["end_row"] for e in ev)]
    check(len(known) >= 5 and len(found) == len(known),
          f"short stream: all {len(known)} known anomalies found ({len(found)})")
    false = [e for e in ev if not any(e["start_row"] <= k[3] and k[2] <= e["end_row"] for k in known)]
    check(len(false) <= 1, f"short stream: at most one false event ({len(false)})")
    for e in ev:
        ts = rows[e["start_row"]].split(",")[0]
        if ts != e["start"]:
            check(False, f"event start_row {e['start_row']} has timestamp {ts}, event says {e['start']}")
            break
    check("anomaly kind" in err and "event-level" in err and "point-wise" in err,
          "--labels with a kinds sidecar prints the quality table")
    return path, out


def same_events(a, b):
    """The same events, field for field, scores within 1e-4 relative: on a CPU with AMX the
    float GEMMs run in bf16x3 (within about 1e-5 of float32), whose rounding depends on how many
    windows a batch holds."""
    ea, eb = events_of(a), events_of(b)
    return len(ea) == len(eb) and all(
        {k: v for k, v in x.items() if k != "score"} == {k: v for k, v in y.items() if k != "score"}
        and abs(x["score"] - y["score"]) <= 1e-4 * max(abs(x["score"]), abs(y["score"]))
        for x, y in zip(ea, eb))


def test_stdin(path, expected_out):
    data = open(path).read()
    rc, out, err = run([MODEL, "--input", "-", "--batch", "7"], stdin=data)
    check(rc == 0 and same_events(out, expected_out), "stdin with --batch 7 gives the same events as the file")


def test_malformed():
    header, rows = head_rows(600)
    bad = list(rows)
    cases = {  # data-row index -> (line content, what stderr must say)
        100: (rows[100] + ",7", "fields"),
        150: (rows[150].rsplit(",", 3)[0] + ",abc," + ",".join(rows[150].split(",")[-2:]), "not a finite number"),
        200: (rows[200].replace(rows[200].split(",")[2], "NaN", 1), "not a finite number"),
        250: ("", "empty line"),
        300: ("2026-01-01T00:00:00," + "1" * (10 << 20), "longer than"),
        350: (rows[350].split(",")[0], "fields"),
        400: (rows[400].replace(rows[400].split(",")[3], "inf", 1), "not a finite number"),
        450: (rows[450][:-1] + "2", "label"),
    }
    for i, (line, _) in cases.items():
        bad[i] = line
    path = os.path.join(TMP, "bad.csv")
    with open(path, "w") as f:
        f.write(header + "\n" + "\n".join(bad) + "\n")
    rc, out, err = run([MODEL, "--input", path, "--labels", "label"])
    check(rc == 0, "malformed lines: the stream carries on (exit 0)")
    for i, (_, msg) in cases.items():
        line_no = i + 2
        hit = [ln for ln in err.splitlines() if f"line {line_no}:" in ln]
        check(bool(hit) and msg in hit[0] and "skipped" in hit[0],
              f"malformed line {line_no} ({msg}) reported: {hit[0][:90] if hit else 'nothing'}")
    check(f"rows {600 - len(cases)} (bad lines skipped {len(cases)})" in err,
          "malformed lines: the good rows are all processed")
    # a gap in the timestamps and a timestamp that is not a date at all: rows, no crash
    gap = [r if i < 300 else "2027-06-01T00:00:%02d" % (i % 60) + r[r.index(","):]
           for i, r in enumerate(rows)]
    gap[10] = "not-a-time" + gap[10][gap[10].index(","):]
    path = os.path.join(TMP, "gap.csv")
    open(path, "w").write(header + "\n" + "\n".join(gap) + "\n")
    rc, _, err = run([MODEL, "--input", path])
    check(rc == 0 and "rows 600 " in err, "timestamp gap and free-text timestamps: rows processed")


def test_headers():
    header, rows = head_rows(300)
    names = header.split(",")
    renamed = ",".join(["time"] + [f"s{i}" for i in range(C)] + ["label"])
    path = os.path.join(TMP, "renamed.csv")
    open(path, "w").write(renamed + "\n" + "\n".join(rows) + "\n")
    rc, _, err = run([MODEL, "--input", path, "--labels", "label"])
    check(rc == 0 and "line 1:" in err and "by position" in err and "rows 300 " in err,
          "header not naming the channels, right count: reported, columns by position")
    path = os.path.join(TMP, "noheader.csv")
    open(path, "w").write("\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    rc, _, err = run([MODEL, "--input", path])
    check(rc == 0 and "no header" in err and "rows 300 " in err,
          "no header line: reported, the first line is a row")
    path = os.path.join(TMP, "wrongheader.csv")
    open(path, "w").write(",".join(names[:3]) + "\n" + "\n".join(",".join(r.split(",")[:3]) for r in rows) + "\n")
    rc, _, err = run([MODEL, "--input", path])
    check(rc == 1 and "line 1:" in err and CFG["channels"][2] in err,
          "header missing channels: a clear error naming the channel (exit 1)")
    shuffled = [names[0]] + names[1:C + 1][::-1] + ["label"]
    path = os.path.join(TMP, "shuffled.csv")
    with open(path, "w") as f:
        f.write(",".join(shuffled) + "\n")
        for r in rows:
            v = r.split(",")
            f.write(",".join([v[0]] + v[1:C + 1][::-1] + [v[-1]]) + "\n")
    rc, out1, err = run([MODEL, "--input", path])
    head = os.path.join(TMP, "head.csv")
    open(head, "w").write(header + "\n" + "\n".join(rows) + "\n")
    _, out2, _ = run([MODEL, "--input", head])
    check(rc == 0 and out1 == out2, "channels in another column order: taken by name, same events")
    rc, _, err = run([MODEL, "--input", os.path.join(TMP, "missing.csv")])
    check(rc == 1 and "missing.csv" in err, "missing input file: clear error")
    open(os.path.join(TMP, "empty.csv"), "w").close()
    rc, _, err = run([MODEL, "--input", os.path.join(TMP, "empty.csv")])
    check(rc == 1 and "empty input" in err, "empty input: clear error")


class Stub(http.server.BaseHTTPRequestHandler):
    """A KServe v2 endpoint that checks the request and answers with a fixed reconstruction:
    the input itself (mode echo: every error 0), or 500."""
    mode = "echo"
    requests = []

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        jl = self.headers.get("Inference-Header-Content-Length")
        body = json.loads(raw[:int(jl)] if jl else raw)
        Stub.requests.append((self.path, body))
        inp = body["inputs"][0]
        if jl is not None:  # binary tensor data extension: echo the input's bytes
            size = inp["parameters"]["binary_data_size"]
            ok = (len(raw) == int(jl) + size and
                  body["outputs"][0]["parameters"]["binary_data"] is True)
            head = json.dumps({"outputs": [{"name": "reconstruction", "shape": inp["shape"],
                               "datatype": "FP32", "parameters": {"binary_data_size": size}}]}).encode()
            payload = head + raw[int(jl):] if ok else b'{"error":"bad binary request"}'
            self.send_response(200 if ok else 400)
            self.send_header("Inference-Header-Content-Length", str(len(head)))
        elif Stub.mode == "fail":
            self.send_response(500)
            payload = b'{"error":"model exploded"}'
        else:
            self.send_response(200)
            payload = json.dumps({"model_name": "anomaly", "outputs": [
                {"name": "reconstruction", "shape": inp["shape"], "datatype": "FP32",
                 "data": inp["data"]}]}).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *a):
        pass


def test_serve():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    header, rows = head_rows(400)
    path = os.path.join(TMP, "serve.csv")
    open(path, "w").write(header + "\n" + "\n".join(rows) + "\n")
    rc, out, err = run([MODEL, "--input", path, "--serve", url])
    reqs = Stub.requests
    ok = all(p == "/v2/models/anomaly/infer" and b["inputs"][0]["datatype"] == "FP32" and
             b["inputs"][0]["name"] == CFG["input"] and b["inputs"][0]["shape"][1:] == [W, C] and
             len(b["inputs"][0]["data"]) == b["inputs"][0]["shape"][0] * W * C for p, b in reqs)
    total = sum(b["inputs"][0]["shape"][0] for _, b in reqs)
    check(rc == 0 and ok and total == 400 - W + 1 and max(b["inputs"][0]["shape"][0] for _, b in reqs) == 32,
          f"--serve: {len(reqs)} v2 requests, well formed, batches of 32, every window sent")
    check(events_of(out) == [] and "served" in err,
          "--serve: a perfect reconstruction from the server gives no events")
    Stub.requests = []
    rc, out, err = run([MODEL, "--input", path, "--serve", url, "--binary"])
    total = sum(b["inputs"][0]["shape"][0] for _, b in Stub.requests)
    check(rc == 0 and events_of(out) == [] and total == 400 - W + 1 and "binary tensors" in err,
          f"--serve --binary: {len(Stub.requests)} binary-extension requests, every window, no events"
          + ("" if rc == 0 else ": " + err[-200:]))
    Stub.mode = "fail"
    rc, _, err = run([MODEL, "--input", path, "--serve", url])
    check(rc == 1 and "HTTP 500" in err and "model exploded" in err, "--serve: a server error is reported")
    srv.shutdown()
    srv.server_close()
    rc, _, err = run([MODEL, "--input", path, "--serve", url])
    check(rc == 1 and "connect" in err, "--serve: no server: a clear error")
    rc, _, err = run([MODEL, "--input", path, "--serve", "https://example.com"])
    check(rc == 1 and "http://" in err, "--serve: https refused with a clear error")


class KeepStub(http.server.BaseHTTPRequestHandler):
    """An HTTP/1.1 echo endpoint (JSON) that keeps connections open ("keep"), closes each one
    after its reply without saying so ("drop"), says Connection: close on every third reply
    ("close3"), or answers in chunks ("chunked"); counts connections and requests."""
    protocol_version = "HTTP/1.1"
    mode, connections, requests = "keep", 0, 0

    def setup(self):
        KeepStub.connections += 1
        super().setup()

    def do_POST(self):
        KeepStub.requests += 1
        inp = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"][0]
        payload = json.dumps({"outputs": [{"name": "reconstruction", "shape": inp["shape"],
                                           "datatype": "FP32", "data": inp["data"]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if KeepStub.mode == "close3" and KeepStub.requests % 3 == 0:
            self.send_header("Connection", "close")
            self.close_connection = True
        if KeepStub.mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = len(payload) // 2
            for part in (payload[:half], payload[half:], b""):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            return
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if KeepStub.mode == "drop":
            self.close_connection = True

    def log_message(self, *a):
        pass


def test_keep_alive():
    """--serve keeps one connection for all batches, and opens another when the server closes
    it (announced or not); a chunked reply is read."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), KeepStub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    header, rows = head_rows(400)
    path = os.path.join(TMP, "keep.csv")
    open(path, "w").write(header + "\n" + "\n".join(rows) + "\n")
    batches = -(-(400 - W + 1) // 32)
    for mode, conns in (("keep", 1), ("drop", batches), ("close3", -(-batches // 3)),
                        ("chunked", 1)):
        KeepStub.mode, KeepStub.connections, KeepStub.requests = mode, 0, 0
        rc, out, err = run([MODEL, "--input", path, "--serve", url])
        check(rc == 0 and events_of(out) == [] and KeepStub.requests == batches and
              KeepStub.connections == conns and f"{conns} HTTP connection(s)" in err,
              f"--serve, server {mode}: {KeepStub.requests} requests over {KeepStub.connections} "
              f"connection(s), {conns} expected" + ("" if rc == 0 else ": " + err[-200:]))
    srv.shutdown()
    srv.server_close()


def test_kiln_serve():
    """kiln-anomaly --serve against a real `kiln serve` of the same model: the same events as
    in-process."""
    if not KILN:
        print("skip --serve against kiln serve: no kiln command given")
        return
    p = subprocess.Popen([KILN, "serve", os.path.join(MODEL, "model.onnx"), "--http-port", "0",
                          "--model-name", "anomaly"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    port = None
    try:
        for line in p.stderr:
            if "listening on http://" in line:
                port = int(line.rsplit(":", 1)[1])
                break
        check(port is not None, "kiln serve started")
        if port is None:
            return
        threading.Thread(target=p.stderr.read, daemon=True).start()
        header, rows = head_rows(1500)
        path = os.path.join(TMP, "kserve.csv")
        open(path, "w").write(header + "\n" + "\n".join(rows) + "\n")
        rc1, local, _ = run([MODEL, "--input", path])
        for extra in ([], ["--binary"]):
            rc2, served, err = run([MODEL, "--input", path, "--serve", f"http://127.0.0.1:{port}"] + extra)
            check(rc1 == 0 and rc2 == 0 and served == local and len(events_of(local)) > 0 and
                  "1 HTTP connection(s)" in err,
                  f"--serve {' '.join(extra)} against kiln serve: the same {len(events_of(local))} events "
                  "as in-process, over one connection" + ("" if rc2 == 0 else ": " + err[-300:]))
    finally:
        p.terminate()
        p.wait(timeout=60)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_metrics():
    port = free_port()
    header, rows = head_rows(1500)
    p = subprocess.Popen([BIN, MODEL, "--input", "-", "--metrics-port", str(port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdin.write(header + "\n" + "\n".join(rows) + "\n")
    p.stdin.flush()
    text = ""
    for _ in range(100):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if "kiln_anomaly_windows_total 0\n" not in text and "kiln_anomaly_rows_total 0\n" not in text:
                break
        except OSError:
            pass
        time.sleep(0.1)
    p.stdin.close()
    p.wait(timeout=60)
    check("kiln_anomaly_windows_total" in text and 'kiln_anomaly_batch_seconds_bucket{le="+Inf"}' in text
          and "kiln_anomaly_row_score_count" in text and "kiln_anomaly_events_total" in text,
          "--metrics-port: counters and histograms served while the stream is open")
    if os.path.exists("/usr/bin/promtool"):
        r = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        check(r.returncode == 0, "--metrics-port: promtool accepts the exposition " + r.stderr.strip()[:200])
    check(p.returncode == 0, "--metrics-port: the run ends when stdin closes")


def model_with(tag, **changes):
    d = os.path.join(TMP, tag)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(MODEL, CFG["model"]), d)
    cfg = {k: v for k, v in dict(CFG, **changes).items() if v is not None}  # None: leave out
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return d


def test_smooth_rule(path):
    """The "min" rule never flags a row beside a one-row spike; "mean" (older configs) still
    loads; a rule of another name is refused."""
    header, rows = head_rows(180)  # the first injected anomaly starts at row 209
    cells = [r.split(",") for r in rows]
    spike = 100
    cells[spike][1] = str(float(cells[spike][1]) * 3)
    spiked = os.path.join(TMP, "spike.csv")
    open(spiked, "w").write(header + "\n" + "\n".join(",".join(c) for c in cells) + "\n")
    dump = os.path.join(TMP, "spike_scores.csv")
    rc, out, _ = run([model_with("smooth_min"), "--input", spiked, "--scores", dump])
    ev = [e for e in events_of(out) if e["start_row"] <= spike <= e["end_row"]]
    check(rc == 0 and len(ev) == 1 and ev[0]["start_row"] == spike and ev[0]["end_row"] == spike,
          f"smooth_rule min: a one-row spike is one flagged row ({ev})")
    rc, out, _ = run([model_with("smooth_mean", smooth_rule="mean", edge_threshold=None),
                      "--input", spiked])
    ev = [e for e in events_of(out) if e["start_row"] <= spike <= e["end_row"]]
    check(rc == 0 and len(ev) == 1 and ev[0]["start_row"] < spike < ev[0]["end_row"],
          f"smooth_rule mean: the centred mean spreads the spike to its neighbours ({ev})")
    rc, out, _ = run([model_with("smooth_mean_edge", smooth_rule="mean"), "--input", spiked])
    ev = [e for e in events_of(out) if e["start_row"] <= spike <= e["end_row"]]
    check(rc == 0 and len(ev) == 1 and ev[0]["start_row"] == spike and ev[0]["end_row"] == spike,
          f"edge re-check: the rows the centred mean raises beside a spike are cleared ({ev})")
    rc, _, err = run([model_with("smooth_bad", smooth_rule="median"), "--input", path])
    check(rc != 0 and "smooth_rule" in err and "median" in err,
          "smooth_rule of another name: refused, naming it")


def test_edge_config(path):
    """The edge re-check's thresholds: the --scores dump says which rows it cleared; a config
    without them still runs; a malformed or stride-2 one is refused, naming the field."""
    dump = os.path.join(TMP, "edge_scores.csv")
    rc, _, _ = run([MODEL, "--input", path, "--scores", dump, "--events", os.devnull])
    head = open(dump).readline().strip().split(",")
    check(rc == 0 and head[-1] == "edge_cleared" and head[1:-1] == CFG["channels"],
          "edge re-check: the scores dump ends with an edge_cleared column")
    rc, _, _ = run([model_with("edge_none", edge_threshold=None), "--input", path, "--scores", dump,
                    "--events", os.devnull])
    check(rc == 0 and "edge_cleared" not in open(dump).readline(),
          "a config without edge_threshold: runs without the re-check")
    bad = {"head": CFG["edge_threshold"]["head"][:-1], "tail": CFG["edge_threshold"]["tail"]}
    rc, _, err = run([model_with("edge_short", edge_threshold=bad), "--input", path])
    check(rc != 0 and "edge_threshold" in err and "head" in err,
          "edge_threshold with a row too few: refused, naming it")
    neg = {"head": CFG["edge_threshold"]["head"], "tail": [[-1] * C] * W}
    rc, _, err = run([model_with("edge_neg", edge_threshold=neg), "--input", path])
    check(rc != 0 and "edge_threshold" in err and "tail" in err and "> 0" in err,
          "edge_threshold with a negative threshold: refused, naming it")
    rc, _, err = run([model_with("edge_stride", stride=2), "--input", path])
    check(rc != 0 and "edge_threshold" in err and "stride" in err,
          "edge_threshold at stride 2: refused")


def main():
    test_help()
    path, out = test_pipeline()
    test_stdin(path, out)
    test_smooth_rule(path)
    test_edge_config(path)
    test_malformed()
    test_headers()
    test_serve()
    test_keep_alive()
    test_kiln_serve()
    test_metrics()
    print(f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
