#!/usr/bin/python3
"""Generalisation check on a real recording kiln did not generate: the monthly Pacific sea
surface temperature (El Nino region, 1950-2010, NOAA) that Debian's python3-statsmodels ships as
statsmodels/datasets/elnino/elnino.csv. The recording has no anomaly labels, so anomalies are
injected into its later part (spikes, level shifts, stuck sensor), and the clean earlier part
trains the model. Writes, into OUT: elnino_train.csv (1950-1986), elnino_test.csv (1987-2010
with a label column) and elnino_test.kinds.csv. Then train.py, kiln-anomaly and evaluate.py
(the z-score baseline) run on them as on the bundled plant.

The data file is not committed: pass its path (e.g. from `apt-get download python3-statsmodels`
and `dpkg-deb -x`, or an installed python3-statsmodels).

Usage: real_elnino.py ELNINO.csv OUT [--seed S]
"""
import argparse
import csv
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("elnino")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    rows = list(csv.reader(open(a.elnino)))[1:]
    ts, v = [], []
    for r in rows:
        for m in range(12):
            ts.append(f"{int(float(r[0]))}-{m + 1:02d}")
            v.append(float(r[m + 1]))
    v = np.array(v)
    split = ts.index("1987-01")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "elnino_train.csv"), "w") as f:
        f.write("month,sst_c\n")
        f.writelines(f"{t},{x:.3f}\n" for t, x in zip(ts[:split], v[:split]))
    rng = np.random.default_rng(a.seed)
    test, tts = v[split:].copy(), ts[split:]
    label = np.zeros(len(test), dtype=int)
    sd = v[:split].std()
    kinds = []
    slots = np.linspace(12, len(test) - 24, 9).astype(int)
    for i, s in enumerate(slots):
        kind = ["spike", "level_shift", "stuck_sensor"][i % 3]
        n = {"spike": 1, "level_shift": 12, "stuck_sensor": 12}[kind]
        if kind == "spike":
            test[s] += rng.choice([-1, 1]) * 3 * sd
        elif kind == "level_shift":
            test[s:s + n] += rng.choice([-1, 1]) * 1.0 * sd
        else:
            test[s:s + n] = test[s]
        label[s:s + n] = 1
        kinds.append((kind, s, s + n - 1))
    with open(os.path.join(a.out, "elnino_test.csv"), "w") as f:
        f.write("month,sst_c,label\n")
        f.writelines(f"{t},{x:.3f},{y}\n" for t, x, y in zip(tts, test, label))
    with open(os.path.join(a.out, "elnino_test.kinds.csv"), "w") as f:
        f.write("kind,channel,start_row,end_row\n")
        f.writelines(f"{k},sst_c,{s},{e}\n" for k, s, e in kinds)
    print(f"real_elnino: {split} training months, {len(test)} test months, {len(kinds)} injected anomalies")


if __name__ == "__main__":
    main()
