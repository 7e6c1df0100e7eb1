#!/usr/bin/python3
"""Score a labelled stream with a trained model (PyTorch weights, as kiln-anomaly scores it) or
with a kiln-anomaly `--scores` dump, and with a per-channel z-score detector calibrated by the
same rule (same held-out rows, quantile, margin, smoothing, stuck-sensor check), and print the
metrics side by side.

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


def detect(score_rows, thr, merge_gap, flat=None, cleared=None):
    """Flags and events: a row's score above the threshold on any channel (less the rows the
    edge re-check clears), or the stuck-sensor check."""
    flags = (score_rows / thr).max(axis=1) > 1
    if cleared is not None:
        flags &= ~cleared
    if flat is not None:
        flags |= flat
    return flags, scoring.events(flags, merge_gap)


class AutoencoderScores:
    """The autoencoder's row scores on a stream, with what the edge re-check needs: from a
    kiln-anomaly --scores dump (`cleared` as kiln-anomaly decided it, at the config's threshold
    only) or from PyTorch (`sqerr`: the re-check redone at any threshold multiple)."""

    def __init__(self, cfg, rows, cleared=None, sqerr=None):
        self.cfg, self.rows, self.cleared, self.sqerr = cfg, rows, cleared, sqerr
        self.thr = np.array(cfg["threshold"])
        edge = cfg.get("edge_threshold")
        self.head = np.array(edge["head"]) if edge else None
        self.tail = np.array(edge["tail"]) if edge else None

    @classmethod
    def from_dump(cls, cfg, path):
        with open(path) as f:
            header = f.readline().strip().split(",")
        data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        rows = data[:, [header.index(c) for c in cfg["channels"]]]
        cleared = data[:, header.index("edge_cleared")] > 0 if "edge_cleared" in header else None
        return cls(cfg, rows, cleared)

    def flags(self, flat, scale=1.0):
        """Flags at the thresholds times scale (the edge re-check needs sqerr unless scale is 1)."""
        thr = self.thr * scale
        score = (self.rows / thr).max(axis=1) > 1
        cleared = None
        if self.head is not None and self.sqerr is not None:
            cleared = scoring.edge_recheck(score, flat, self.sqerr, self.head * scale, self.tail * scale)
        elif self.head is not None and scale == 1.0:
            cleared = self.cleared
        return detect(self.rows, thr, self.cfg["merge_gap"], flat, cleared)[0]


def zscore_rows(x, mean, std, smooth, rule):
    return scoring.smooth(((x - mean) / std) ** 2, smooth, rule)


def load_model(model_dir, cfg):
    import torch
    import train
    model = train.ARCHS[cfg["training"]["arch"]](cfg["window"], len(cfg["channels"]))
    model.load_state_dict(torch.load(os.path.join(model_dir, "weights.pt")))
    model.eval()
    return model


def model_rows(model_dir, cfg, xn):
    import train
    return train.row_scores(load_model(model_dir, cfg), xn, cfg["window"], cfg["stride"],
                            cfg["smooth"], cfg.get("smooth_rule", "mean"))


def model_scores(model_dir, cfg, xn):
    """AutoencoderScores of the normalised stream xn, scored in PyTorch (weights.pt)."""
    import train
    model = load_model(model_dir, cfg)
    rows = train.row_scores(model, xn, cfg["window"], cfg["stride"], cfg["smooth"],
                            cfg.get("smooth_rule", "mean"))
    sqerr = None
    if cfg.get("edge_threshold"):
        _, wins = scoring.windows(xn, cfg["window"], cfg["stride"])
        sqerr = scoring.window_sq_errors(wins, train.reconstruct(model, wins))
    return AutoencoderScores(cfg, rows, sqerr=sqerr)


def show(name, m):
    print(f"{name:12s} point P {m['point_precision']:.3f} R {m['point_recall']:.3f} "
          f"F1 {m['point_f1']:.3f} false alarms {m['false_alarm_rate'] * 100:.2f}% | "
          f"events {m['events']} P {m['event_precision']:.3f} R {m['event_recall']:.3f} "
          f"F1 {m['event_f1']:.3f}")
    print("             per kind: " + ", ".join(
        f"{k} {d[0]}/{d[1]}" for k, d in sorted(m["kinds"].items())))


def read_kinds(path):
    kinds = []
    for line in open(path).read().splitlines()[1:]:
        k, _, s, e = line.split(",")
        kinds.append((k, int(s), int(e)))
    return kinds


def zscore_detector(cfg, train_csv, x):
    """The per-channel z-score detector of compare(): its row scores on the held-out clean rows
    of train_csv and on the stream x, and its thresholds (the autoencoder's rule: quantile of
    the held-out scores times the margin)."""
    rule = cfg["threshold_rule"]
    rule_s = cfg.get("smooth_rule", "mean")
    _, _, xt, _ = scoring.read_csv(train_csv)
    split = rule["training_rows"]
    zm, zs = xt[:split].mean(axis=0), np.maximum(xt[:split].std(axis=0), 1e-6)
    cal = zscore_rows(xt[split:], zm, zs, cfg["smooth"], rule_s)
    zthr = np.quantile(cal, rule["quantile"], axis=0) * rule["margin"]
    return cal, zscore_rows(x, zm, zs, cfg["smooth"], rule_s), zthr


SCALES = np.geomspace(0.001, 1000, 600)


def sweep(flags_at, labels, gap, tev, kinds):
    """The metrics of flags_at(k) (flags at the thresholds times k) for each k in SCALES."""
    out = []
    for k in SCALES:
        fl = flags_at(k)
        out.append(metrics(fl, labels, scoring.events(fl, gap), tev, kinds))
    return out


def best_at(ms, fa_budget):
    """The best point F1 among the sweep's metrics with a false-alarm rate <= fa_budget."""
    ok = [m for m in ms if m["false_alarm_rate"] <= fa_budget + 1e-12]
    return max(ok, key=lambda m: (m["point_f1"], -m["false_alarm_rate"])) if ok else None


def stream(cfg, test_csv, label_column, kinds):
    _, _, x, labels = scoring.read_csv(test_csv, label_column)
    kinds = list(kinds)
    tev = [(s, e) for _, s, e in kinds] or true_events(labels)
    flat = (scoring.flat_runs(x) >= np.array(cfg["flat_limit"])).any(axis=1)
    return x, labels, kinds, tev, flat


def compare(cfg, train_csv, test_csv, ae, label_column="label", kinds=()):
    """The autoencoder's scores `ae` (AutoencoderScores) beside the z-score detector on one
    labelled stream. The z-score detector is calibrated on the same held-out clean rows by the
    same rule (quantile, margin, smoothing) and gets the same stuck-sensor run check and event
    merging; it is then also scaled (knowing the labels: in its favour) over the threshold
    multiples SCALES, for its best F1 at a false-alarm rate no higher than the autoencoder's
    ("z@FA") and its lowest false-alarm rate at a point F1 no lower than the autoencoder's
    ("z@F1", None when no scale reaches it). Returns {"autoencoder": m, "z-score": m, "z@FA": m,
    "z@F1": m or None}."""
    x, labels, kinds, tev, flat = stream(cfg, test_csv, label_column, kinds)
    gap = cfg["merge_gap"]
    fl = ae.flags(flat)
    out = {"autoencoder": metrics(fl, labels, scoring.events(fl, gap), tev, kinds)}
    m = out["autoencoder"]
    _, zrows, zthr = zscore_detector(cfg, train_csv, x)
    fl, ev = detect(zrows, zthr, gap, flat)
    out["z-score"] = metrics(fl, labels, ev, tev, kinds)
    zs = sweep(lambda k: detect(zrows, zthr * k, gap, flat)[0], labels, gap, tev, kinds)
    out["z@FA"] = best_at(zs, m["false_alarm_rate"])
    reach = [mm for mm in zs if mm["point_f1"] >= m["point_f1"]]
    out["z@F1"] = min(reach, key=lambda mm: mm["false_alarm_rate"]) if reach else None
    return out


def matched(cfg, train_csv, test_csv, ae, cal_rows, label_column="label", kinds=(),
            budgets=(0.0, 0.01, 0.02, 0.05), cal_rates=(0.01, 0.05)):
    """Both detectors at a matched false-alarm rate, two ways.
    "fa": for each budget, each detector's best point F1 over the threshold multiples SCALES
    with a false-alarm rate on the stream no higher than the budget (the labels choose the
    multiple, for both alike: one point of each detector's precision-recall curve).
    "cal": without the labels, each detector's thresholds scaled by one factor so that a
    fraction `rate` of the held-out clean rows (cal_rows for the autoencoder, the z-score's own
    for it) score above them, then scored on the stream (left out when cal_rows is None).
    The autoencoder's edge re-check is redone at each multiple when `ae` has the window errors
    (from PyTorch); from a dump it applies at the config's threshold only.
    Returns {"fa": {budget: (ae, z)}, "cal": {rate: (ae, z)}} (ae, z: metrics or None)."""
    x, labels, kinds, tev, flat = stream(cfg, test_csv, label_column, kinds)
    gap = cfg["merge_gap"]
    zcal, zrows, zthr = zscore_detector(cfg, train_csv, x)

    def zflags(k):
        return detect(zrows, zthr * k, gap, flat)[0]

    def aeflags(k):
        return ae.flags(flat, k)
    ae_s = sweep(aeflags, labels, gap, tev, kinds)
    z_s = sweep(zflags, labels, gap, tev, kinds)
    out = {"fa": {b: (best_at(ae_s, b), best_at(z_s, b)) for b in budgets}, "cal": {}}
    for rate in cal_rates if cal_rows is not None else ():
        pair = []
        for fn, c, t in ((aeflags, cal_rows, ae.thr), (zflags, zcal, zthr)):
            fl = fn(np.quantile((c / t).max(axis=1), 1 - rate))
            pair.append(metrics(fl, labels, scoring.events(fl, gap), tev, kinds))
        out["cal"][rate] = tuple(pair)
    return out


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
    if a.scores:
        ae = AutoencoderScores.from_dump(cfg, a.scores)
    else:
        _, _, x, _ = scoring.read_csv(a.test, a.labels)
        ae = model_scores(a.model_dir, cfg, (x - np.array(cfg["mean"])) / np.array(cfg["std"]))
    res = compare(cfg, a.train, a.test, ae, a.labels, read_kinds(a.kinds) if a.kinds else ())
    for name, m in res.items():
        if m:
            show(name, m)
        else:
            print(f"{name:12s} no threshold scale reaches the autoencoder's point F1")
    kinds = read_kinds(a.kinds) if a.kinds else ()
    if ae.head is not None and ae.sqerr is None:
        print("matched rates below: the edge re-check applies at the config's threshold only "
              "(a --scores dump); without --scores (weights.pt) it is redone at each multiple")
    for b, (m_ae, z) in matched(cfg, a.train, a.test, ae, None, a.labels, kinds).get("fa").items():
        print(f"best point F1 at false alarms <= {b * 100:g}%: autoencoder " +
              (f"{m_ae['point_f1']:.3f} ({m_ae['false_alarm_rate'] * 100:.2f}%)" if m_ae else "-") +
              ", z-score " + (f"{z['point_f1']:.3f} ({z['false_alarm_rate'] * 100:.2f}%)" if z else "-"))


if __name__ == "__main__":
    main()
