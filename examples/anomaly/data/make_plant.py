#!/usr/bin/python3
"""Synthetic pump station: seven coupled sensor channels sampled once a second.

A hidden load setpoint moves between operating points (first-order lag, like a drive ramping);
the channels follow it through plant physics: shaft speed, motor current (with a slot ripple),
discharge pressure (with pump pulsation), flow (square root of the pressure head), bearing
temperature (slow thermal lag, the ambient temperature, which is logged too and follows a
compressed daily cycle, and a slow drift) and a raw vibration signal
whose frequency follows the shaft speed. Every channel has sensor noise.

Writes (fixed seeds, so the files are reproducible):
  plant_train.csv   clean operation, for training and threshold calibration
  plant_test.csv    a later stretch of the same plant with injected anomalies and a `label`
                    column (1 on anomalous rows)
  plant_test.kinds.csv  one line per injected anomaly: kind, channel, first and last row
                    (0-based data rows, inclusive)

Usage: make_plant.py [--out DIR] [--train-rows N] [--test-rows N] [--seed S] [--per-kind K]
"""
import argparse
import datetime as dt
import os

import numpy as np

CHANNELS = ["speed_rpm", "current_a", "pressure_bar", "flow_m3h", "ambient_temp_c", "bearing_temp_c",
            "vibration_g"]
KINDS = ["spike", "level_shift", "frequency_change", "stuck_sensor", "correlation_break"]
START = dt.datetime(2026, 3, 2, 6, 0, 0)


def load_profile(rng, n):
    """Operating points held for 2.5-8 minutes, reached through a first-order lag (tau 25 s).
    The points cycle through the whole operating range (45-100 % load) in shuffled order, so
    any stretch of a few thousand rows covers the envelope, as a training recording must."""
    target = np.empty(n)
    i = 0
    levels = []
    while i < n:
        if not levels:
            levels = list(rng.permutation(np.linspace(0.45, 1.0, 8)))
        hold = int(rng.integers(150, 480))
        target[i:i + hold] = np.clip(levels.pop() + rng.uniform(-0.03, 0.03), 0.45, 1.0)
        i += hold
    load = np.empty(n)
    x = target[0]
    for k in range(n):
        x += (target[k] - x) / 25.0
        load[k] = x
    return load


def lag(u, tau, x0):
    y = np.empty_like(u)
    x = x0
    for k in range(len(u)):
        x += (u[k] - x) / tau
        y[k] = x
    return y


def plant(rng, n, t0, load=None, vib_freq_scale=None, current_load=None):
    """Channel values (n, 7) for rows t0..t0+n-1. Optional overrides inject faults that change
    the physics (vibration frequency, the load the motor current sees)."""
    t = np.arange(t0, t0 + n, dtype=np.float64)
    if load is None:
        load = load_profile(rng, n)
    cur_load = load if current_load is None else current_load
    speed = 600.0 + 900.0 * load + rng.normal(0, 4.0, n)
    current = 12.0 + 38.0 * cur_load ** 1.5 + 1.2 * np.sin(2 * np.pi * t / 23.0) + rng.normal(0, 0.4, n)
    pressure = 1.5 + 4.5 * load ** 2 + 0.15 * np.sin(2 * np.pi * t / 11.0) + rng.normal(0, 0.04, n)
    flow = 40.0 * np.sqrt(np.maximum(pressure - 1.2, 0.0)) + rng.normal(0, 0.6, n)
    ambient = 22.0 + 4.0 * np.sin(2 * np.pi * t / 4800.0)  # a compressed "day" of 80 minutes
    drift = 0.8 * np.sin(2 * np.pi * t / 25000.0)         # slow fouling of the bearing
    temp = ambient + drift + lag(28.0 * load, 180.0, 28.0 * load[0]) + rng.normal(0, 0.08, n)
    # Vibration: a raw accelerometer at the shaft frequency (about 1/9 to 1/5 of the rate).
    f = (0.06 + 0.12 * load) * (1.0 if vib_freq_scale is None else vib_freq_scale)
    phase = 2 * np.pi * np.cumsum(f)
    vib = (0.4 + 0.6 * load) * np.sin(phase) + rng.normal(0, 0.05, n)
    amb = ambient + rng.normal(0, 0.05, n)
    return np.stack([speed, current, pressure, flow, amb, temp, vib], axis=1), load


def inject(rng, n, per_kind):
    """Non-overlapping anomaly slots: (kind, channel index, first, last)."""
    lengths = {"spike": (1, 3), "level_shift": (40, 100), "frequency_change": (60, 120),
               "stuck_sensor": (60, 120), "correlation_break": (60, 120)}
    kinds = [k for k in KINDS for _ in range(per_kind)]
    rng.shuffle(kinds)
    slot = n // (len(kinds) + 1)
    out = []
    for i, kind in enumerate(kinds):
        lo, hi = lengths[kind]
        length = int(rng.integers(lo, hi + 1))
        start = slot * (i + 1) - length // 2 + int(rng.integers(-slot // 5, slot // 5))
        if kind == "frequency_change":
            ch = CHANNELS.index("vibration_g")
        elif kind == "correlation_break":
            ch = CHANNELS.index("current_a")
        else:
            ch = int(rng.integers(0, len(CHANNELS)))
        out.append((kind, ch, start, start + length - 1))
    return out


def make_test(rng, n, t0, per_kind):
    load = load_profile(rng, n)
    anomalies = inject(rng, n, per_kind)
    vib_scale = np.ones(n)
    cur_load = load.copy()
    for kind, ch, a, b in anomalies:
        if kind == "frequency_change":
            vib_scale[a:b + 1] = rng.choice([0.55, 1.7])
        elif kind == "correlation_break":
            # the motor draws current for a load the hydraulics do not show (a slipping coupling)
            other = np.clip(load[a:b + 1] + rng.choice([-0.35, 0.35]), 0.3, 1.1)
            cur_load[a:b + 1] = other
    x, _ = plant(rng, n, t0, load=load, vib_freq_scale=vib_scale, current_load=cur_load)
    scale = x.std(axis=0)
    label = np.zeros(n, dtype=np.int64)
    for kind, ch, a, b in anomalies:
        label[a:b + 1] = 1
        if kind == "spike":
            x[a:b + 1, ch] += rng.choice([-1, 1]) * rng.uniform(4.0, 7.0) * scale[ch]
        elif kind == "level_shift":
            x[a:b + 1, ch] += rng.choice([-1, 1]) * rng.uniform(0.8, 1.4) * scale[ch]
        elif kind == "stuck_sensor":
            x[a:b + 1, ch] = x[a, ch]
    return x, label, anomalies


def write_csv(path, t0, x, label=None):
    with open(path, "w") as f:
        f.write("timestamp," + ",".join(CHANNELS) + (",label" if label is not None else "") + "\n")
        for i in range(len(x)):
            ts = (START + dt.timedelta(seconds=int(t0 + i))).strftime("%Y-%m-%dT%H:%M:%S")
            vals = ",".join(f"{v:.4g}" if abs(v) >= 100 else f"{v:.4f}" for v in x[i])
            f.write(f"{ts},{vals}" + (f",{label[i]}" if label is not None else "") + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--train-rows", type=int, default=10000)
    ap.add_argument("--test-rows", type=int, default=8000)
    ap.add_argument("--per-kind", type=int, default=6)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--prefix", default="plant")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    train, _ = plant(rng, a.train_rows, 0)
    write_csv(os.path.join(a.out, f"{a.prefix}_train.csv"), 0, train)
    t0 = a.train_rows + 600
    test, label, anomalies = make_test(rng, a.test_rows, t0, a.per_kind)
    write_csv(os.path.join(a.out, f"{a.prefix}_test.csv"), t0, test, label)
    with open(os.path.join(a.out, f"{a.prefix}_test.kinds.csv"), "w") as f:
        f.write("kind,channel,start_row,end_row\n")
        for kind, ch, s, e in sorted(anomalies, key=lambda r: r[2]):
            f.write(f"{kind},{CHANNELS[ch]},{s},{e}\n")
    print(f"make_plant: {a.train_rows} training rows, {a.test_rows} test rows, "
          f"{len(anomalies)} anomalies ({int(label.sum())} anomalous rows), seed {a.seed}")


if __name__ == "__main__":
    main()
