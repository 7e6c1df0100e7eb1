#!/usr/bin/python3
"""Send one KServe v2 inference request built from the model's own metadata, and check the answer.

usage: probe.py URL/v2/models/NAME[/versions/V]/infer [--field F] [--seed N]

Reads GET .../v2/models/NAME[/versions/V] for the inputs (name, datatype, shape; a dynamic dim,
-1, becomes 1), posts deterministic random values as JSON, and checks that the answer is 200
with every output's data finite and of the size its shape says. Prints the response's field F
(default: model_version) and exits 0, or prints the problem on stderr and exits 1.
Standard library only (used by deploy/rollout.sh on machines without numpy).
"""
import argparse
import json
import math
import random
import sys
import urllib.error
import urllib.request

INTS = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}


def fetch(url, data=None, timeout=10):
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def make_inputs(meta, seed):
    rng = random.Random(seed)
    inputs = []
    for spec in meta.get("inputs", []):
        shape = [d if d > 0 else 1 for d in spec["shape"]]
        n = math.prod(shape)
        dt = spec["datatype"]
        if dt == "BOOL":
            data = [rng.random() < 0.5 for _ in range(n)]
        elif dt in INTS:
            data = [rng.randrange(0, 4) for _ in range(n)]
        elif dt == "BYTES":
            data = ["probe"] * n
        else:
            data = [round(rng.random(), 4) for _ in range(n)]
        inputs.append({"name": spec["name"], "shape": shape, "datatype": dt, "data": data})
    return inputs


def check_outputs(body):
    outs = body.get("outputs")
    if not outs:
        return "the response has no outputs"
    for o in outs:
        data = o.get("data", [])
        if len(data) != math.prod(o.get("shape", [])):
            return f"output '{o.get('name')}': {len(data)} values for shape {o.get('shape')}"
        # JSON has no NaN or Inf: servers write them as strings ("NaN") or bare words
        if o.get("datatype", "").startswith("FP") and not all(
                isinstance(x, (int, float)) and math.isfinite(x) for x in data):
            bad = next(x for x in data if not (isinstance(x, (int, float)) and math.isfinite(x)))
            return f"output '{o.get('name')}' has non-finite values ({bad!r})"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("--field", default="model_version")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not a.url.endswith("/infer"):
        sys.exit("probe: the URL must end in /infer")
    code, raw = fetch(a.url[: -len("/infer")])
    if code != 200:
        print(f"probe: model metadata: HTTP {code}: {raw[:200].decode(errors='replace')}", file=sys.stderr)
        return 1
    meta = json.loads(raw)
    req = {"id": "probe", "inputs": make_inputs(meta, a.seed)}
    code, raw = fetch(a.url, json.dumps(req).encode())
    if code != 200:
        print(f"probe: infer: HTTP {code}: {raw[:300].decode(errors='replace')}", file=sys.stderr)
        return 1
    body = json.loads(raw)
    problem = check_outputs(body)
    if problem:
        print(f"probe: {problem}", file=sys.stderr)
        return 1
    print(body.get(a.field, ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
