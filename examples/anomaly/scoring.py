"""The anomaly score, in NumPy: what kiln-anomaly computes in C (anomaly_score.c), used by
train.py to calibrate the threshold and by evaluate.py. Keep the two in step.

For a stream of normalised rows x (n, C) and the autoencoder's reconstructions of the windows
starting at rows 0, s, 2s, ... (each (W, C)):
  err[r, c]   mean over the windows covering row r of (x[r, c] - xhat[r, c])^2
  sm[r, c]    smooth_rule "min" (what train.py writes): the smallest mean of err over the
              `smooth`-row stretches that contain r (fewer rows at the stream's ends); "mean"
              (models written before the rule existed): err averaged over the `smooth` rows
              centred on r
  z[r, c]     sm[r, c] / threshold[c]; a row is anomalous when max_c z[r, c] > 1
Rows no window covers (a tail shorter than a stride) get err 0.

A stuck sensor repeats one value exactly; an autoencoder trained on noisy data reconstructs such
a flat line well (measured: most stuck channels scored below their threshold), so the score has
a second part: a row is also anomalous on channel c when it lies in a run of at least
flat_limit[c] identical consecutive values of c (the limit calibrated on clean data: twice the
longest run seen there, plus 2).

With "edge_threshold" in the config, a row flagged by its score is checked again on the windows
that hold no other flagged row (edge_recheck, below): the rows beside an anomaly and at the
stream's start keep only windows in which they sit near an edge.
"""
import csv

import numpy as np


def read_csv(path, label_column=None):
    """(timestamps, channel names, values (n, C) float64, labels or None)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    lab_idx = header.index(label_column) if label_column else None
    chan_idx = [i for i in range(1, len(header)) if i != lab_idx]
    data = [r for r in rows[1:] if r]
    ts = [r[0] for r in data]
    x = np.array([[float(r[i]) for i in chan_idx] for r in data], dtype=np.float64)
    y = np.array([int(float(r[lab_idx])) for r in data]) if lab_idx is not None else None
    return ts, [header[i] for i in chan_idx], x, y


def windows(x, w, stride):
    starts = np.arange(0, len(x) - w + 1, stride)
    return starts, np.stack([x[s:s + w] for s in starts]).astype(np.float32)


AGG = "min"


def row_errors(x, starts, recon):
    n, c = x.shape
    w = recon.shape[1]
    if AGG == "mean":
        tot = np.zeros((n, c))
        cnt = np.zeros(n)
        for s, r in zip(starts, recon):
            tot[s:s + w] += (x[s:s + w] - r) ** 2
            cnt[s:s + w] += 1
        return tot / np.maximum(cnt, 1)[:, None]
    best = np.full((n, c), np.inf)
    for s, r in zip(starts, recon):
        best[s:s + w] = np.minimum(best[s:s + w], (x[s:s + w] - r) ** 2)
    best[np.isinf(best)] = 0
    return best


def smooth(err, k, rule="min"):
    """The row score from row errors (n, C). "min": the smallest mean over the k-row stretches
    containing the row, like the smallest error over the windows covering it: a row's score is
    raised only when every stretch around it is, so a one-row spike stays one row long (the
    centred mean spreads it over k rows: on a monthly series, two false alarms per spike), and
    the score is never raised outside the rows whose own error is. Inside a long anomaly it
    still averages over k rows."""
    if k <= 1:
        return err
    if rule == "min":
        n = len(err)
        cs = np.vstack([np.zeros((1, err.shape[1])), np.cumsum(err, axis=0)])
        out = np.full(err.shape, np.inf)
        for s in range(-(k - 1), n):
            lo, hi = max(s, 0), min(s + k, n)
            out[lo:hi] = np.minimum(out[lo:hi], (cs[hi] - cs[lo]) / (hi - lo))
        return out
    n = len(err)
    cs = np.vstack([np.zeros((1, err.shape[1])), np.cumsum(err, axis=0)])
    lo = np.clip(np.arange(n) - (k - 1) // 2, 0, n)
    hi = np.clip(np.arange(n) + k // 2 + 1, 0, n)
    return (cs[hi] - cs[lo]) / (hi - lo)[:, None]


def events(flags, merge_gap):
    """Runs of flagged rows, joined across gaps of at most merge_gap rows: [(first, last)]."""
    out = []
    idx = np.flatnonzero(flags)
    for r in idx:
        if out and r - out[-1][1] <= merge_gap + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return [tuple(e) for e in out]


def flat_runs(x):
    """(n, C): the length of the run of identical consecutive values each row lies in."""
    n, c = x.shape
    out = np.zeros((n, c), dtype=np.int64)
    for j in range(c):
        start = 0
        for r in range(1, n + 1):
            if r == n or x[r, j] != x[r - 1, j]:
                out[start:r, j] = r - start
                start = r
    return out


def flat_limits(x):
    return [int(2 * m + 2) for m in flat_runs(x).max(axis=0)]


def window_sq_errors(wins, recon):
    """(n_windows, W, C) squared reconstruction errors, from the float32 windows as kiln-anomaly
    computes them (double differences of the float values)."""
    return (wins.astype(np.float64) - recon.astype(np.float64)) ** 2


def edge_thresholds(sqerr, quantile, margin):
    """The thresholds of the edge re-check, from the windows (stride 1) of held-out clean rows:
    head[m - 1, c] is the quantile of the smallest squared error of a row over the windows in
    which it sits at positions 0..m-1 (the first m rows of each), times the margin; tail[m - 1]
    the same over positions W-m..W-1. Rows covered by all W windows only."""
    nw, w, _ = sqerr.shape
    rows = np.arange(w - 1, nw)
    e = np.stack([sqerr[rows - p, p] for p in range(w)], axis=1)  # (rows, W, C)
    head = np.quantile(np.minimum.accumulate(e, axis=1), quantile, axis=0) * margin
    tail = np.quantile(np.minimum.accumulate(e[:, ::-1], axis=1), quantile, axis=0) * margin
    return head, tail


def edge_recheck(score_flags, flat, sqerr, head, tail):
    """Rows flagged by their score (score_flags) that the edge re-check clears (bool (n,)).

    A row's score is the smallest error over the windows covering it, against a threshold set on
    rows that all W windows cover. A row next to a flagged row, or at the stream's start, has
    fewer windows free of anomalies: only those on one side, in which it sits near an edge,
    where every row reconstructs worse (a window that holds the anomaly reconstructs all its
    rows badly). So a flagged row is checked again on the windows that hold no other flagged row
    (by score or the stuck-sensor check): when those are not all W windows but at least one, its
    smallest error over them is compared with the threshold for the positions it holds there
    (head/tail of edge_thresholds; for a stretch of middle positions, the larger of the head and
    tail thresholds that contain it, both lower than its own); the row stays flagged when any
    channel exceeds it, else it is cleared."""
    nw, w, _ = sqerr.shape
    n = len(score_flags)
    flagged = np.flatnonzero(score_flags | flat)
    cleared = np.zeros(n, dtype=bool)
    for r in np.flatnonzero(score_flags):
        lo, hi = max(0, r - w + 1), min(nw - 1, r)
        i = np.searchsorted(flagged, r)
        left = flagged[i - 1] if i > 0 else -1
        right = flagged[i + 1] if i + 1 < len(flagged) else n + w
        a, b = max(lo, left + 1), min(hi, right - w)
        if a > b or (a == r - w + 1 and b == r):
            continue
        plo, phi = r - b, r - a
        if plo == 0:
            thr = head[phi]
        elif phi == w - 1:
            thr = tail[w - 1 - plo]
        else:
            thr = np.maximum(head[phi], tail[w - 1 - plo])
        e2 = np.min(np.stack([sqerr[s, r - s] for s in range(a, b + 1)]), axis=0)
        cleared[r] = not np.any(e2 > thr)
    return cleared
