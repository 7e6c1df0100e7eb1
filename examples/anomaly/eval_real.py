#!/usr/bin/python3
"""Generalisation check on real recordings kiln did not generate (data/real/, public domain, see
data/real/README.md): the model is trained by train.py on the first part of each recording, and
kiln-anomaly scores the rest, into which anomalies are injected (the recordings have no labels):
spikes, level shifts, stuck sensors and, on the multichannel weather recording, swapped
channels. Beside it, the per-channel z-score detector of evaluate.py, calibrated by the same
rule on the same held-out clean rows, with the same stuck-sensor check and event merging.

  elnino  NOAA's monthly sea-surface temperature of the Nino 1+2 region, 1950-2010 (one
          channel): trained on 1950-1986, 9 anomalies injected into 1987-2010.
  macro   US macroeconomic quarterly data 1959-2009 (FRED, BLS; nine channels: growth of real
          GDP, consumption, investment, government spending, disposable income and M1,
          inflation, change of the unemployment rate and the T-bill rate): trained on
          1959-1989, 6 anomalies injected into 1990-2009 (which also holds real recessions,
          unlabelled: what either detector flags there counts as a false alarm).
  seattle  NOAA's daily weather records at Seattle 2012-2015 (four channels: precipitation,
          highest and lowest temperature, wind): trained on 2012-2014, 12 anomalies injected
          into 2015 (3 each of spikes, level shifts, stuck sensors on a random temperature or
          wind channel, and the two temperature channels swapped for a week: every value stays
          in its usual range, only the relation between the channels breaks).
  sunspots  NOAA NGDC's yearly sunspot numbers 1700-2008 (one channel): trained on 1700-1900,
          6 anomalies injected into 1901-2008.

Prints two tables. The first: one row per detector and recording at the thresholds of the rule
(and the z-score's best, knowing the labels), and whether the autoencoder beats the z-score
detector there (point F1 above both the same-rule z-score's and the best z-score's at a
false-alarm rate no higher; false alarms no more than the same-rule z-score's). The second: both
detectors at matched false-alarm rates (evaluate.matched): each one's best point F1 with at most
0, 1, 2, 5 % false alarms, and each one at thresholds that flag 1 % and 5 % of its own held-out
clean rows; the autoencoder beats the z-score there when its F1 is no lower at every budget
both reach and higher at one. Exits 1 when kiln-anomaly's own metrics differ from the Python
recomputation from its --scores dump (evaluate.py); with --require-beat also when it does not
beat it at the rule's thresholds, with --require-matched NAME when it does not beat it at
matched rates on NAME.

Usage: eval_real.py BUILD_DIR OUT_DIR [--only NAME] [--seed S] [--require-beat]
                    [--require-matched NAME ...]
"""
import argparse
import csv
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import evaluate  # noqa: E402
import scoring  # noqa: E402


def write_csv(path, header, ts, x, label=None):
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for i, t in enumerate(ts):
            cells = [t] + [f"{v:.6g}" for v in x[i]] + ([str(label[i])] if label is not None else [])
            f.write(",".join(cells) + "\n")


def inject(test, sd, slots, plan, rng):
    """plan: [(kind, rows, channel)]; returns (test, labels, kinds)."""
    label = np.zeros(len(test), dtype=int)
    kinds = []
    for s, (kind, n, c) in zip(slots, plan):
        if kind == "spike":
            test[s, c] += rng.choice([-1, 1]) * 3 * sd[c]
        elif kind == "level_shift":
            test[s:s + n, c] += rng.choice([-1, 1]) * 1.0 * sd[c]
        elif kind == "swapped_channels":
            a, b = c
            test[s:s + n, [a, b]] = test[s:s + n, [b, a]]
        else:
            test[s:s + n, c] = test[s, c]
        label[s:s + n] = 1
        kinds.append((kind, c, s, s + n - 1))
    return test, label, kinds


def make_elnino(out, seed):
    rows = list(csv.reader(open(os.path.join(HERE, "data/real/elnino.csv"))))[1:]
    ts, v = [], []
    for r in rows:
        for m in range(12):
            ts.append(f"{int(float(r[0]))}-{m + 1:02d}")
            v.append(float(r[m + 1]))
    x = np.array(v)[:, None]
    split = ts.index("1987-01")
    test = x[split:].copy()
    slots = np.linspace(12, len(test) - 24, 9).astype(int)
    plan = [(["spike", "level_shift", "stuck_sensor"][i % 3], [1, 12, 12][i % 3], 0) for i in range(9)]
    return ["month", "sst_c"], ts, x, split, test, slots, plan, seed


def make_macro(out, seed):
    rows = list(csv.reader(open(os.path.join(HERE, "data/real/macrodata.csv"))))
    head, data = rows[0], np.array([[float(v) for v in r] for r in rows[1:]])
    col = {h: data[:, i] for i, h in enumerate(head)}
    growth = [(f"{n}_growth", 400 * np.diff(np.log(col[n]))) for n in
              ("realgdp", "realcons", "realinv", "realgovt", "realdpi", "m1")]
    chans = growth + [("infl", col["infl"][1:]), ("unemp_change", np.diff(col["unemp"])),
                      ("tbilrate_change", np.diff(col["tbilrate"]))]
    x = np.stack([c for _, c in chans], axis=1)
    ts = [f"{int(y)}Q{int(q)}" for y, q in zip(col["year"][1:], col["quarter"][1:])]
    split = ts.index("1990Q1")
    test = x[split:].copy()
    rng = np.random.default_rng(seed + 1)
    slots = np.linspace(4, len(test) - 10, 6).astype(int)
    plan = [(["spike", "level_shift", "stuck_sensor"][i % 3], [1, 4, 6][i % 3],
             int(rng.integers(len(chans)))) for i in range(6)]
    return ["quarter"] + [n for n, _ in chans], ts, x, split, test, slots, plan, seed


def make_sunspots(out, seed):
    rows = list(csv.reader(open(os.path.join(HERE, "data/real/sunspots.csv"))))[1:]
    ts = [str(int(float(r[0]))) for r in rows]
    x = np.array([[float(r[1])] for r in rows])
    split = ts.index("1901")
    test = x[split:].copy()
    slots = np.linspace(6, len(test) - 14, 6).astype(int)
    plan = [(["spike", "level_shift", "stuck_sensor"][i % 3], [1, 5, 6][i % 3], 0) for i in range(6)]
    return ["year", "sunspots"], ts, x, split, test, slots, plan, seed


def make_seattle(out, seed):
    rows = list(csv.reader(open(os.path.join(HERE, "data/real/seattle-weather.csv"))))
    ts = [r[0].replace("/", "-") for r in rows[1:]]
    x = np.array([[float(v) for v in r[1:5]] for r in rows[1:]])
    split = ts.index("2015-01-01")
    test = x[split:].copy()
    rng = np.random.default_rng(seed + 2)
    slots = np.linspace(10, len(test) - 20, 12).astype(int)
    kinds = ["spike", "level_shift", "stuck_sensor", "swapped_channels"]
    plan = [(kinds[i % 4], [1, 10, 10, 7][i % 4],
             (1, 2) if i % 4 == 3 else int(rng.integers(1, 4))) for i in range(12)]
    return ["date"] + rows[0][1:5], ts, x, split, test, slots, plan, seed


DATASETS = {
    "elnino": (make_elnino, ["--window", "12", "--epochs", "100"]),
    "macro": (make_macro, ["--window", "4", "--epochs", "100"]),
    "sunspots": (make_sunspots, ["--window", "11", "--epochs", "100"]),
    "seattle": (make_seattle, ["--window", "7", "--epochs", "100"]),
}


def chan_names(header, c):
    return "|".join(header[1 + i] for i in c) if isinstance(c, tuple) else header[1 + c]


def prepare(name, out, seed):
    header, ts, x, split, test, slots, plan, seed = DATASETS[name][0](out, seed)
    rng = np.random.default_rng(seed)
    test, label, kinds = inject(test, x[:split].std(axis=0), slots, plan, rng)
    paths = {k: os.path.join(out, f"{name}_{k}.csv") for k in ("train", "test", "kinds")}
    write_csv(paths["train"], header, ts[:split], x[:split])
    write_csv(paths["test"], header + ["label"], ts[split:], test, label)
    with open(paths["kinds"], "w") as f:
        f.write("kind,channel,start_row,end_row\n")
        f.writelines(f"{k},{chan_names(header, c)},{s},{e}\n" for k, c, s, e in kinds)
    print(f"{name}: {split} training rows, {len(test)} test rows, {len(kinds)} injected anomalies, "
          f"{x.shape[1]} channels", file=sys.stderr)
    return paths


def run(name, build, out, seed):
    paths = prepare(name, out, seed)
    model = os.path.join(out, f"{name}_model")
    subprocess.run([sys.executable, os.path.join(HERE, "train.py"), "--train", paths["train"],
                    "--out", model] + DATASETS[name][1], check=True)
    scores = os.path.join(out, f"{name}_scores.csv")
    r = subprocess.run([os.path.join(build, "kiln-anomaly"), model, "--input", paths["test"],
                        "--labels", "label", "--kinds", paths["kinds"], "--scores", scores,
                        "--events", os.path.join(out, f"{name}_events.jsonl")],
                       capture_output=True, text=True, check=True)
    cfg = json.load(open(os.path.join(model, "config.json")))
    ae = evaluate.AutoencoderScores.from_dump(cfg, scores)
    kinds = evaluate.read_kinds(paths["kinds"])
    res = evaluate.compare(cfg, paths["train"], paths["test"], ae, "label", kinds)
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("point-wise"))
    m = res["autoencoder"]
    want = (f"precision {m['point_precision']:.3f} recall {m['point_recall']:.3f} "
            f"F1 {m['point_f1']:.3f}")
    if want not in line:
        sys.exit(f"eval_real: {name}: kiln-anomaly says \"{line}\", evaluate.py \"{want}\"")
    _, _, x, _ = scoring.read_csv(paths["test"], "label")
    torch_ae = evaluate.model_scores(model, cfg, (x - np.array(cfg["mean"])) / np.array(cfg["std"]))
    flat = evaluate.stream(cfg, paths["test"], "label", kinds)[4]
    differ = np.flatnonzero(torch_ae.flags(flat) != ae.flags(flat))
    if len(differ):
        sys.exit(f"eval_real: {name}: kiln-anomaly and the PyTorch scoring flag rows differently: "
                 f"{differ[:10].tolist()}")
    mat = evaluate.matched(cfg, paths["train"], paths["test"], torch_ae,
                           calibration_rows(model, cfg, paths["train"]), "label", kinds)
    return res, mat, line


def calibration_rows(model, cfg, train_csv):
    """The autoencoder's scores of the held-out clean rows, as train.py computed them to set the
    threshold (PyTorch, the weights train.py leaves beside the model)."""
    _, _, x, _ = scoring.read_csv(train_csv)
    xn = (x - np.array(cfg["mean"])) / np.array(cfg["std"])
    return evaluate.model_rows(model, cfg, xn[cfg["threshold_rule"]["training_rows"]:])


def cell(m):
    if m is None:
        return "- (none that low)"
    return f"{m['point_f1']:.3f} (R {m['point_recall']:.3f}, {m['false_alarm_rate'] * 100:.2f} %)"


def matched_rows(name, mat):
    """Table rows: the matched-rate comparison, and whether the autoencoder's F1 is at least the
    z-score's at every rate where both have a point and higher at one."""
    out, ge, gt = [], True, False
    for b, (ae, z) in mat["fa"].items():
        out.append(f"| {name} | best F1 at false alarms <= {b * 100:g} % (labels pick the "
                   f"threshold, for both) | {cell(ae)} | {cell(z)} |")
    for rate, (ae, z) in mat["cal"].items():
        out.append(f"| {name} | thresholds flag {rate * 100:g} % of the held-out clean rows "
                   f"(no labels) | {cell(ae)} | {cell(z)} |")
    for ae, z in list(mat["fa"].values()):
        if ae and z:
            ge = ge and ae["point_f1"] >= z["point_f1"]
            gt = gt or ae["point_f1"] > z["point_f1"]
        elif z and not ae:
            ge = False
    return out, ge and gt


def table_row(name, det, m):
    if m is None:
        return f"| {name} | {det} | - | - | - | - | never reaches the autoencoder's point F1 |"
    found = sum(d[0] for d in m["kinds"].values())
    total = sum(d[1] for d in m["kinds"].values())
    per = ", ".join(f"{k} {d[0]}/{d[1]}" for k, d in sorted(m["kinds"].items()))
    return (f"| {name} | {det} | {m['point_f1']:.3f} | {m['false_alarm_rate'] * 100:.2f} % | "
            f"{m['event_f1']:.3f} | {found} of {total} | {per} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--only", choices=sorted(DATASETS))
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--require-beat", action="store_true")
    ap.add_argument("--require-matched", action="append", default=[], choices=sorted(DATASETS),
                    help="exit 1 unless the autoencoder beats the z-score detector at matched "
                         "false-alarm rates on this recording (repeatable)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    lines = ["| recording | detector | point F1 | false alarms | event F1 | found | per kind |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    mlines = ["| recording | rate | autoencoder point F1 (recall, false alarms) | z-score |",
              "| --- | --- | --- | --- |"]
    ok = True
    for name in [a.only] if a.only else sorted(DATASETS):
        res, mat, kline = run(name, a.build, a.out, a.seed)
        print(f"{name}: kiln-anomaly {kline}", file=sys.stderr)
        labels = {"autoencoder": "autoencoder (kiln-anomaly)", "z-score": "z-score, same rule",
                  "z@FA": "z-score, best F1 at <= the autoencoder's false alarms",
                  "z@F1": "z-score, fewest false alarms at >= the autoencoder's F1"}
        for k, det in labels.items():
            lines.append(table_row(name, det, res[k]))
        ae, z, zfa = res["autoencoder"], res["z-score"], res["z@FA"]
        beats = (ae["point_f1"] > z["point_f1"] and ae["false_alarm_rate"] <= z["false_alarm_rate"]
                 and (zfa is None or ae["point_f1"] > zfa["point_f1"]))
        print(f"eval_real: {name}: the autoencoder {'beats' if beats else 'does not beat'} the "
              f"z-score detector", file=sys.stderr)
        ok = ok and (beats or not a.require_beat)
        ml, mbeat = matched_rows(name, mat)
        mlines += ml
        print(f"eval_real: {name}: at matched false-alarm rates the autoencoder "
              f"{'beats' if mbeat else 'does not beat'} the z-score detector", file=sys.stderr)
        ok = ok and (mbeat or name not in a.require_matched)
    print("\n".join(lines))
    print()
    print("\n".join(mlines))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
