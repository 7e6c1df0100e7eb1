#!/usr/bin/python3
"""Score a labelled stream with a trained model (PyTorch weights, as kiln-anomaly scores it) or
with a kiln-anomaly `--scores` dump, and with a per-channel z-score detector calibrated by the
same rule (same held-out rows, quantile, margin, smoothing), and print the metrics side by side.

Usage: evaluate.py MODEL_DIR TEST.csv --train CLEAN.csv [--labels label] [--kinds KINDS.csv]
                   [--scores ROWS.csv]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scoring  # noqa: E402


def true_events(labels):
    return scoring.events(labels > 0, 0)


def metrics(flags, labels, pred_ev, true_ev, kinds):
    tp = int((flags & (labels > 0)).sum())
    fp = int((flags & (labels == 0)).sum())
    fn = int((~flags & (labels > 0)).sum())
    m = {"point_precision": tp / max(tp + fp, 1), "point_recall": tp / max(tp + fn, 1),
         "false_alarm_rate": fp / max(int((labels == 0).sum()), 1)}
    m["point_f1"] = f1(m["point_precision"], m["point_recall"])

    def hit(a, evs):
        return any(e[0] <= a[1] and a[0] <= e[1] for e in evs)
    ep = sum(hit(p, true_ev) for p in pred_ev) / max(len(pred_ev), 1)
    er = sum(hit(t, pred_ev) for t in true_ev) / max(len(true_ev), 1)
    m.update(event_precision=ep, event_recall=er, event_f1=f1(ep, er), events=len(pred_ev))
    per = {}
    for kind, s, e in kinds:
        d = per.setdefault(kind, [0, 0])
        d[0] += hit((s, e), pred_ev)
        d[1] += 1
    m["kinds"] = per
    return m


def f1(p, r):
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def detect(score_rows, thr, merge_gap, flat=None):
    flags = (score_rows / thr).max(axis=1) > 1
    if flat is not None:
        flags |= flat
    return flags, scoring.events(flags, merge_gap)


def zscore_rows(x, mean, std, smooth):
    return scoring.smooth(((x - mean) / std) ** 2, smooth)


def model_rows(model_dir, cfg, xn):
    import torch
    import train
    model = train.ARCHS[cfg["training"]["arch"]](cfg["window"], len(cfg["channels"]))
    model.load_state_dict(torch.load(os.path.join(model_dir, "weights.pt")))
    model.eval()
    return train.row_scores(model, xn, cfg["window"], cfg["stride"], cfg["smooth"])


def show(name, m):
    print(f"{name:12s} point P {m['point_precision']:.3f} R {m['point_recall']:.3f} "
          f"F1 {m['point_f1']:.3f} false alarms {m['false_alarm_rate'] * 100:.2f}% | "
          f"events {m['events']} P {m['event_precision']:.3f} R {m['event_recall']:.3f} "
          f"F1 {m['event_f1']:.3f}")
    print("             per kind: " + ", ".join(
        f"{k} {d[0]}/{d[1]}" for k, d in sorted(m["kinds"].items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("test")
    ap.add_argument("--train", required=True)
    ap.add_argument("--labels", default="label")
    ap.add_argument("--kinds")
    ap.add_argument("--scores", help="kiln-anomaly --scores dump (row, then one column per channel)")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model_dir, "config.json")))
    _, names, x, labels = scoring.read_csv(a.test, a.labels)
    mean, std = np.array(cfg["mean"]), np.array(cfg["std"])
    xn = (x - mean) / std
    kinds = []
    if a.kinds:
        for line in open(a.kinds).read().splitlines()[1:]:
            k, _, s, e = line.split(",")
            kinds.append((k, int(s), int(e)))
    tev = [(s, e) for _, s, e in kinds] or true_events(labels)
    rule = cfg["threshold_rule"]
    gap = cfg["merge_gap"]
    if a.scores:
        rows = np.loadtxt(a.scores, delimiter=",", skiprows=1)[:, 1:]
    else:
        rows = model_rows(a.model_dir, cfg, xn)
    flat = (scoring.flat_runs(x) >= np.array(cfg["flat_limit"])).any(axis=1)
    fl, ev = detect(rows, np.array(cfg["threshold"]), gap, flat)
    m = metrics(fl, labels, ev, tev, kinds)
    show("autoencoder", m)
    # z-score baseline: calibrated on the same held-out clean rows by the same rule
    _, _, xt, _ = scoring.read_csv(a.train)
    split = rule["training_rows"]
    zm, zs = xt[:split].mean(axis=0), np.maximum(xt[:split].std(axis=0), 1e-6)
    cal = zscore_rows(xt[split:], zm, zs, cfg["smooth"])
    zthr = np.quantile(cal, rule["quantile"], axis=0) * rule["margin"]
    fl, ev = detect(zscore_rows(x, zm, zs, cfg["smooth"]), zthr, gap)
    mz = metrics(fl, labels, ev, tev, kinds)
    show("z-score", mz)
    # the z-score detector again, its thresholds scaled (knowing the labels: in its favour) to
    # the largest false-alarm rate not above the autoencoder's
    zrows = zscore_rows(x, zm, zs, cfg["smooth"])
    best = None
    for scale in np.geomspace(0.01, 10, 200):
        fl, ev = detect(zrows, zthr * scale, gap)
        mm = metrics(fl, labels, ev, tev, kinds)
        if mm["false_alarm_rate"] <= m["false_alarm_rate"] and (best is None or mm["point_f1"] > best["point_f1"]):
            best = mm
    if best:
        show("z-score@FA", best)


if __name__ == "__main__":
    main()
