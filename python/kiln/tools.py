"""kiln-only helpers beside the ONNX Runtime API: optimize, bench, profile."""
import resource
import time

import numpy as np

from . import _kiln


def _random_feeds(sess, dims=None, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, kind, dtype, content, shape in sess.inputs():
        if kind != 0:
            raise ValueError("input '%s' is not a tensor: give feeds" % name)
        shp = [d if isinstance(d, int) else (dims or {}).get(d, 1) for d in (shape or [])]
        t = _kiln.dtype_name(dtype)
        if t in ("float", "double", "float16"):
            feeds[name] = rng.standard_normal(shp).astype({"float": np.float32, "double": np.float64,
                                                           "float16": np.float16}[t])
        elif t == "bool":
            feeds[name] = rng.integers(0, 2, shp).astype(np.bool_)
        elif t.startswith(("int", "uint")):
            feeds[name] = rng.integers(0, 4, shp).astype(getattr(np, t))
        else:
            raise ValueError("input '%s' of type %s: give feeds" % (name, t))
    return feeds


def optimize(model_in, model_out, level=2, disabled_passes=None):
    """Write the graph as kiln optimises it at `level` (0, 1, 2), like `kiln optimize`."""
    _kiln.Session(model_in, opt_level=level, threads=1, disabled_passes=disabled_passes).save(model_out)


def bench(model, feeds=None, warmup=10, repeat=100, threads=0, level=2, dims=None):
    """Time `repeat` runs of InferenceSession.run from Python after `warmup` untimed ones: the
    fields of `kiln bench --json` (latency in ms, timed with time.perf_counter_ns), so the two
    can be set side by side to see what the Python layer adds per run."""
    from . import InferenceSession, SessionOptions
    so = SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = threads
    t0 = time.perf_counter_ns()
    isess = InferenceSession(model, so)
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sess = isess._sess
    if feeds is None:
        feeds = _random_feeds(sess, dims)
    run = isess.run
    t0 = time.perf_counter_ns()
    run(None, feeds)
    first_ms = (time.perf_counter_ns() - t0) / 1e6
    for _ in range(warmup):
        run(None, feeds)
    times = np.empty(repeat)
    clock = time.perf_counter_ns
    for i in range(repeat):
        t0 = clock()
        run(None, feeds)
        times[i] = clock() - t0
    times /= 1e6
    info = sess.info()
    batch = next((v.shape[0] for v in feeds.values() if getattr(v, "ndim", 0)), 1)
    med = float(np.median(times))
    return {"model": str(model), "kiln_version": _kiln.version, "batch": int(batch), "threads": threads,
            "threads_used": info["threads"], "level": level,
            "warmup": warmup, "repeat": repeat, "load_ms": load_ms, "median_ms": med,
            "p90_ms": float(np.percentile(times, 90)), "p99_ms": float(np.percentile(times, 99)),
            "min_ms": float(times.min()), "max_ms": float(times.max()), "mean_ms": float(times.mean()),
            "stddev_ms": float(times.std()), "throughput": batch * 1000.0 / med if med else 0.0,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "arena_bytes": info["arena_bytes"], "intermediate_bytes": info["intermediate_bytes"],
            "first_run_ms": first_ms, "prepacked_nodes": info["prepacked_nodes"], "nodes": info["nodes"],
            "rewrites": info["rewrites"], "load_peak_rss_bytes": load_rss,
            "inputs": [{"name": n, "dtype": _kiln.dtype_name(dt), "shape": list(np.shape(feeds[n]))}
                       for n, _, dt, _, _ in sess.inputs() if n in feeds]}


def profile(model, feeds=None, runs=10, threads=0, level=2, dims=None):
    """Per-node times over `runs` runs (after one warm-up), slowest first: dicts with name,
    op_type, domain, runs, total_ms, flops, bytes, shape (as kiln_session_profile gives them)."""
    sess = _kiln.Session(model, opt_level=level, threads=threads, profile=1)
    if feeds is None:
        feeds = _random_feeds(sess, dims)
    sess.run(None, feeds)
    sess.profile_reset()
    for _ in range(runs):
        sess.run(None, feeds)
    return sorted(sess.profile(), key=lambda p: -p["total_ms"])


def validate(model, feeds=None, seeds=3, atol=1e-4, rtol=1e-3, level=2, dims=None):
    """The graph optimised at `level` against level 0 (the graph as written) on the same inputs,
    like `kiln validate`: one dict per (seed, output) with max_abs, max_rel and ok
    (|a - b| <= atol + rtol |b| everywhere)."""
    ref = _kiln.Session(model, opt_level=0, threads=1)
    opt = _kiln.Session(model, opt_level=level)
    names = [o[0] for o in ref.outputs()]
    results = []
    for seed in range(seeds if feeds is None else 1):
        f = feeds if feeds is not None else _random_feeds(ref, dims, seed)
        for name, a, b in zip(names, opt.run(None, f), ref.run(None, f)):
            a, b = np.asarray(a), np.asarray(b)
            if a.dtype.kind in "fc":
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
                max_abs = float(diff.max()) if diff.size else 0.0
                max_rel = float((diff / np.maximum(np.abs(b), 1e-30)).max()) if diff.size else 0.0
                ok = a.shape == b.shape and bool(np.all(diff <= atol + rtol * np.abs(b)))
            else:
                ok = a.shape == b.shape and bool(np.array_equal(a, b))
                max_abs = max_rel = 0.0 if ok else float("inf")
            results.append({"seed": seed, "output": name, "max_abs": max_abs, "max_rel": max_rel, "ok": ok})
    return results
