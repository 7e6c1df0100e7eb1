#!/usr/bin/env python3
"""kiln vs ONNX Runtime, side by side, on the benchmark models (bench/make_models.py).

    /usr/bin/python3 bench/compare_ort.py [--kiln build/kiln] [--only NAME,...] [--threads 1,2]
                                          [--rounds 5] [--warmup 10] [--repeat 100] [--budget 1]
                                          [--pin auto] [--json results.json]

Installs ONNX Runtime from npm into bench/peer/node_modules when it is missing, makes the models
when bench/models has none. Then, for every model and thread count, alternates rounds of
`kiln bench MODEL --input NAME=FILE.npy ... --json` (A) and `node bench/peer/ort_bench.js`
(B) as A B A B ..., each a fresh process fed the same .npy inputs with the same warmup and repeat
counts (ORT: intraOpNumThreads N, interOpNumThreads 1, all graph optimisations). A model's
latency is the median of its rounds' medians; its peak RSS the median of its rounds' peaks (one
process per round, so every peak belongs to one model). Prints a markdown table with the ratio
kiln/ORT per row (and, for noisy machines, the ratio of the fastest rounds) and the geometric
mean of the ratios, then kiln at --level 0 against --level 2 (same alternation) on the fusion
micro-models (--fusion all: on every model). --report RAW.json prints the tables of an earlier
run's --json again without measuring. Every table names the ISA level kiln ran at and AMX
on or off (`kiln --version`; set KILN_ISA=avx2 or KILN_AMX=0 to measure a lower level).
Both runtimes run on the same CPUs: a T-thread row on the first T this process may use unless
that is all of them (--pin; bench/pinning.py says why: logical CPUs of a shared VM can differ
in speed by a third).

Repeat counts: --repeat is the most timed runs; slow models get fewer, so one process spends
about --budget seconds timing (at least 5 runs); warmup is at most a tenth of that, at least 2.
The counts used are in the table. Exit status 1 when a run failed (its row says so).
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import pinning

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(HERE, "peer")
MIB = 1048576.0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ensure_ort():
    if os.path.isdir(os.path.join(PEER, "node_modules", "onnxruntime-node")):
        return
    log("installing onnxruntime-node into bench/peer/node_modules ...")
    env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=PEER, env=env,
                   check=True)


def ensure_models(models_dir):
    if not os.path.exists(os.path.join(models_dir, "manifest.json")):
        log(f"making the benchmark models into {models_dir} ...")
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_models.py"), models_dir],
                       check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(models_dir, "manifest.json")) as f:
        return json.load(f)


def input_args(models_dir, name, manifest):
    d = os.path.join(models_dir, name, "inputs")
    args = []
    for i in manifest[name]["inputs"]:
        args += ["--input", f"{i['name']}={os.path.join(d, i['name'] + '.npy')}"]
    return args


def run_json(cmd, out, cpus=None):
    """Run a bench command that writes JSON to `out`, pinned to `cpus` (None: not pinned);
    returns (dict or None, error text)."""
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pinning.preexec(cpus))
    if r.returncode != 0 or not os.path.exists(out):
        return None, (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
    with open(out) as f:
        return json.load(f), None


class Runner:
    def __init__(self, a, manifest, tmp):
        self.a, self.manifest, self.tmp = a, manifest, tmp

    def model_path(self, name):
        return os.path.join(self.a.models, name, "model.onnx")

    def kiln(self, name, threads, warmup, repeat, level=2, binary=None):
        out = os.path.join(self.tmp, "kiln.json")
        cmd = [binary or self.a.kiln, "bench", self.model_path(name), *input_args(self.a.models, name, self.manifest),
               "--threads", str(threads), "--level", str(level), "--warmup", str(warmup),
               "--repeat", str(repeat), "--quiet", "--json", out]
        return run_json(cmd, out, pinning.cpus_for(self.a.pin, threads))

    def ort(self, name, threads, warmup, repeat):
        out = os.path.join(self.tmp, "ort.json")
        cmd = ["node", os.path.join(PEER, "ort_bench.js"), self.model_path(name),
               os.path.join(self.a.models, name, "inputs"), "--threads", str(threads),
               "--warmup", str(warmup), "--repeat", str(repeat), "--json", out]
        return run_json(cmd, out, pinning.cpus_for(self.a.pin, threads))

    def counts(self, name):
        """(warmup, repeat) for a model, from one probe run of kiln (the slower runtime today)."""
        r, err = self.kiln(name, 1, 1, 2)
        if r is None:
            return None, err
        per_run = max(r["median_ms"], 1e-3)
        repeat = int(max(5, min(self.a.repeat, self.a.budget * 1000.0 / per_run)))
        warmup = int(max(2, min(self.a.warmup, repeat // 10)))
        return (warmup, repeat), None

    def alternate(self, runs):
        """runs: list of (label, fn) -> {label: [results]} or {label: error}; rounds A B A B."""
        res = {label: [] for label, _ in runs}
        for _ in range(self.a.rounds):
            for label, fn in runs:
                if isinstance(res[label], str):
                    continue
                r, err = fn()
                res[label] = " ".join(err) if r is None else res[label] + [r]
        return res


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def kiln_isa(kiln):
    """The ISA level and AMX state kiln runs at here (`kiln --version`'s cpu line; the
    environment's KILN_ISA and KILN_AMX apply)."""
    r = subprocess.run([kiln, "--version"], capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("cpu: ")), "")
    isa = line[5:].split(" ", 1)[0] if line else "unknown"
    amx = "on" if line.endswith("amx on") else "off" if line.endswith("amx off") else "unknown"
    env = " ".join(f"{k}={os.environ[k]}" for k in ("KILN_ISA", "KILN_AMX") if k in os.environ)
    return {"isa": isa, "amx": amx, "cpu_line": line[5:], "env": env}


def isa_label(raw):
    i = raw.get("kiln_isa")
    if not i:
        return "kiln ISA not recorded"
    return f"kiln ISA {i['isa']}, AMX {i['amx']}" + (f" ({i['env']})" if i["env"] else "")


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def measure(a, manifest, names, threads, raw):
    """Run everything, filling raw["peer"] and raw["fusion"]; progress goes to stderr."""
    with tempfile.TemporaryDirectory(prefix="kiln_bench_") as tmp:
        run = Runner(a, manifest, tmp)
        counts = {}
        for n in names:
            c, err = run.counts(n)
            counts[n] = c if c else " ".join(err)
        for n in names:
            for t in threads:
                c = counts[n]
                if isinstance(c, str):
                    raw["peer"].append({"model": n, "threads": t, "kiln": c, "ort": []})
                    continue
                w, r = c
                log(f"{n} threads {t}: {a.rounds} rounds of {w}+{r} runs")
                runs = [("kiln", lambda: run.kiln(n, t, w, r))]
                if a.baseline:  # the same model with another kiln binary, in the same rounds
                    runs.append(("base", lambda: run.kiln(n, t, w, r, binary=a.baseline)))
                res = run.alternate(runs + [("ort", lambda: run.ort(n, t, w, r))])
                raw["peer"].append({"model": n, "threads": t, "warmup": w, "repeat": r,
                                    "kiln": res["kiln"], "ort": res["ort"]})
                if a.baseline:
                    raw["peer"][-1]["base"] = res["base"]
        t = a.fusion_threads
        for n in names:
            if not (a.fusion == "all" or (a.fusion == "micro" and manifest[n]["group"] == "micro")):
                continue
            c = counts[n]
            if isinstance(c, str):
                raw["fusion"].append({"model": n, "threads": t, "level0": c, "level2": []})
                continue
            w, r = c
            log(f"{n} level 0 vs 2: {a.rounds} rounds of {w}+{r} runs")
            res = run.alternate([("l0", lambda: run.kiln(n, t, w, r, level=0)),
                                 ("l2", lambda: run.kiln(n, t, w, r, level=2))])
            raw["fusion"].append({"model": n, "threads": t, "warmup": w, "repeat": r,
                                  "level0": res["l0"], "level2": res["l2"]})


def best(rs):
    return min(r["median_ms"] for r in rs)


def render(raw, out=sys.stdout):
    """Print the tables of a raw result; returns the number of failed rows."""
    def p(*x):
        print(*x, file=out)
    failed = 0
    ort_version = next((r["runtime"] for e in raw["peer"] if isinstance(e["ort"], list)
                        for r in e["ort"]), "ONNX Runtime")
    p(f"# kiln vs ONNX Runtime ({isa_label(raw)})\n\n{raw['machine']}; {raw['date']}; kiln {raw.get('kiln_commit', '?')}; "
      f"{ort_version}; load average {raw.get('load_start', float('nan')):.2f} at the start, "
      f"{raw.get('load_end', float('nan')):.2f} at the end; {raw['rounds']} rounds A B A B per row. "
      "Latency, p90, load time and RSS: medians over the rounds; best: the ratio of the fastest "
      "rounds' medians." + (f" kiln's CPU line: {raw['kiln_isa']['cpu_line']}." if raw.get("kiln_isa") else "")
      + (" Both runtimes " + "; ".join(f"at {t} thread{'s' if t != '1' else ''}: {v}"
                                      for t, v in raw["pinning"].items()) + "."
         if raw.get("pinning") else "")
      + "\n")
    p("| model | threads | warmup+repeat | kiln ms | ORT ms | kiln/ORT | best kiln/ORT | kiln p90 | ORT p90 "
      "| kiln load ms | ORT load ms | kiln peak RSS MiB | ORT peak RSS MiB (net of Node) |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios, bests = {}, {}
    for e in raw["peer"]:
        n, t, k, o = e["model"], e["threads"], e["kiln"], e["ort"]
        ratios.setdefault(t, [])
        bests.setdefault(t, [])
        if isinstance(k, str) or isinstance(o, str):
            failed += 1
            which, why = ("kiln", k) if isinstance(k, str) else ("ORT", o)
            p(f"| {n} | {t} | {e.get('warmup', '')}+{e.get('repeat', '')} | {which} failed: {why} "
              "| | | | | | | | | |")
            continue
        km, om = med(k, "median_ms"), med(o, "median_ms")
        ratios[t].append(km / om)
        bests[t].append(best(k) / best(o))
        net = med(o, "peak_rss_bytes") - med(o, "baseline_rss_bytes")
        p(f"| {n} | {t} | {e['warmup']}+{e['repeat']} | {km:.3f} | {om:.3f} | {km / om:.2f} "
          f"| {best(k) / best(o):.2f} | {med(k, 'p90_ms'):.3f} | {med(o, 'p90_ms'):.3f} "
          f"| {med(k, 'load_ms'):.1f} | {med(o, 'load_ms'):.1f} | {med(k, 'peak_rss_bytes') / MIB:.1f} "
          f"| {med(o, 'peak_rss_bytes') / MIB:.1f} ({net / MIB:.1f}) |")
    p()
    for t in ratios:
        p(f"geometric mean kiln/ORT, {t} thread{'s' if t > 1 else ''}: {geomean(ratios[t]):.2f} "
          f"(best rounds: {geomean(bests[t]):.2f}) over {len(ratios[t])} models")
    p(f"geometric mean kiln/ORT, all rows: {geomean(sum(ratios.values(), [])):.2f} "
      f"(best rounds: {geomean(sum(bests.values(), [])):.2f})")
    failed += render_baseline(raw, p)
    cold = [e for e in raw["peer"] if not isinstance(e["kiln"], str) and not isinstance(e["ort"], str)
            and all("first_run_ms" in r for r in e["kiln"] + e["ort"])]
    if cold:
        p(f"\n# Cold start: load + first run (ms, medians over the rounds; {isa_label(raw)})\n")
        p("| model | threads | kiln load | kiln first run | ORT load | ORT first run | kiln/ORT (sum) |")
        p("|---|---:|---:|---:|---:|---:|---:|")
        for e in cold:
            k, o = e["kiln"], e["ort"]
            ks, os_ = med(k, "load_ms") + med(k, "first_run_ms"), med(o, "load_ms") + med(o, "first_run_ms")
            p(f"| {e['model']} | {e['threads']} | {med(k, 'load_ms'):.1f} | {med(k, 'first_run_ms'):.1f} "
              f"| {med(o, 'load_ms'):.1f} | {med(o, 'first_run_ms'):.1f} | {ks / os_:.2f} |")
    if raw["fusion"]:
        t = raw["fusion"][0]["threads"]
        p(f"\n# kiln fusion: --level 0 vs --level 2 ({t} thread{'s' if t > 1 else ''}; {isa_label(raw)})\n")
        p("| model | nodes level 0 -> 2 | warmup+repeat | level 0 ms | level 2 ms | speedup 0/2 "
          "| best speedup | level 0 peak RSS MiB | level 2 peak RSS MiB |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        speedups, bs = [], []
        for e in raw["fusion"]:
            n, l0, l2 = e["model"], e["level0"], e["level2"]
            if isinstance(l0, str) or isinstance(l2, str):
                failed += 1
                p(f"| {n} | | {e.get('warmup', '')}+{e.get('repeat', '')} | failed: "
                  f"{l0 if isinstance(l0, str) else l2} | | | | | |")
                continue
            m0, m2 = med(l0, "median_ms"), med(l2, "median_ms")
            speedups.append(m0 / m2)
            bs.append(best(l0) / best(l2))
            p(f"| {n} | {l0[0].get('nodes', '?')} -> {l2[0].get('nodes', '?')} | {e['warmup']}+{e['repeat']} "
              f"| {m0:.3f} | {m2:.3f} | {m0 / m2:.2f} | {best(l0) / best(l2):.2f} "
              f"| {med(l0, 'peak_rss_bytes') / MIB:.1f} | {med(l2, 'peak_rss_bytes') / MIB:.1f} |")
        p(f"\ngeometric mean speedup level 0 -> 2: {geomean(speedups):.2f} (best rounds: {geomean(bs):.2f}) "
          f"over {len(speedups)} models")
    return failed


def render_baseline(raw, p):
    """The --baseline table: kiln against the baseline binary, row by row; returns failed rows."""
    rows = [e for e in raw["peer"] if "base" in e]
    if not rows:
        return 0
    p(f"\n# kiln against the baseline binary ({raw.get('baseline', '?')}; same rounds; {isa_label(raw)})\n")
    p("| model | threads | baseline ms | kiln ms | kiln/baseline | best kiln/baseline | baseline p90 | kiln p90 "
      "| baseline peak RSS MiB | kiln peak RSS MiB |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    failed, ratios = 0, []
    for e in rows:
        k, b = e["kiln"], e["base"]
        if isinstance(k, str) or isinstance(b, str):
            failed += 1
            p(f"| {e['model']} | {e['threads']} | failed: {k if isinstance(k, str) else b} | | | | | | | |")
            continue
        km, bm = med(k, "median_ms"), med(b, "median_ms")
        ratios.append(km / bm)
        p(f"| {e['model']} | {e['threads']} | {bm:.3f} | {km:.3f} | {km / bm:.2f} | {best(k) / best(b):.2f} "
          f"| {med(b, 'p90_ms'):.3f} | {med(k, 'p90_ms'):.3f} | {med(b, 'peak_rss_bytes') / MIB:.1f} "
          f"| {med(k, 'peak_rss_bytes') / MIB:.1f} |")
    if ratios:
        p(f"\ngeometric mean kiln/baseline: {geomean(ratios):.2f} over {len(ratios)} rows")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--models", default=os.path.join(HERE, "models"))
    ap.add_argument("--only", help="comma-separated model names (default: all in the manifest)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--budget", type=float, default=1.0,
                    help="seconds of timed runs per process for slow models (default 1)")
    ap.add_argument("--fusion", default="micro", choices=["micro", "all", "none"],
                    help="models for the --level 0 vs 2 table (default: the micro-models)")
    ap.add_argument("--fusion-threads", type=int, default=1)
    ap.add_argument("--baseline", metavar="KILN",
                    help="another kiln binary (e.g. built at an earlier commit), run in the same rounds "
                         "as --kiln (A B C A B C with ONNX Runtime) and compared with it in a table of its own")
    ap.add_argument("--pin", default="auto",
                    help="CPUs both runtimes run on: 'auto' (default: a T-thread row on the first T "
                         "CPUs, unless that is all of them), 'none', or a list such as 0,1 "
                         "(bench/pinning.py: logical CPUs of a shared VM can differ in speed)")
    ap.add_argument("--json", help="write all raw results here")
    ap.add_argument("--report", metavar="RAW_JSON", help="only print the tables of an earlier --json")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            return 1 if render(json.load(f)) else 0
    if a.rounds < 1 or a.repeat < 1 or a.warmup < 0:
        ap.error("--rounds and --repeat must be >= 1, --warmup >= 0")
    threads = [int(t) for t in a.threads.split(",")]
    try:
        a.pin = pinning.parse(a.pin)
    except ValueError as e:
        ap.error(str(e))
    if not os.access(a.kiln, os.X_OK):
        ap.error(f"no kiln binary at {a.kiln} (build first, or pass --kiln)")
    if a.baseline and not os.access(a.baseline, os.X_OK):
        ap.error(f"no kiln binary at {a.baseline} (--baseline)")
    ensure_ort()
    manifest = ensure_models(a.models)
    names = list(manifest)
    if a.only:
        want = a.only.split(",")
        missing = [n for n in want if n not in manifest]
        if missing:
            ap.error("not in the manifest: " + ", ".join(missing))
        names = [n for n in names if n in want]
    raw = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "kiln_commit": git_commit(), "kiln_isa": kiln_isa(a.kiln), "load_start": os.getloadavg()[0], "rounds": a.rounds,
           "threads": threads, "command": sys.argv, "peer": [], "fusion": [],
           "pinning": {str(t): pinning.label(pinning.cpus_for(a.pin, t)) for t in threads}}
    if a.baseline:
        raw["baseline"] = a.baseline
    measure(a, manifest, names, threads, raw)
    raw["load_end"] = os.getloadavg()[0]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return 1 if render(raw) else 0


if __name__ == "__main__":
    sys.exit(main())
