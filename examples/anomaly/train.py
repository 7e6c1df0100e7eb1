#!/usr/bin/python3
"""Train kiln-anomaly's model: an autoencoder over sliding windows of a clean sensor recording.

Reads a CSV whose first row is a header and whose first column is a timestamp (any text); every
other column is a numeric channel. Fits per-channel normalisation on the training part, trains
the autoencoder on windows of the first (1 - holdout) of the rows, then scores the held-out rest
(scoring.py, exactly as kiln-anomaly does) and sets each channel's threshold to a quantile of
those scores times a margin, and the edge re-check's thresholds by the same rule (per window
position range, scoring.edge_thresholds). Writes OUT/model.onnx (opset 17, input `window` (N, W, C), output
`reconstruction` (N, W, C), N symbolic) and OUT/config.json.

Usage: train.py --train CLEAN.csv --out MODEL_DIR [--window W] [--epochs E] [--seed S]
                [--arch mlp|conv] [--holdout F] [--quantile Q] [--margin M] [--smooth K]
                [--smooth-rule min|mean]
                [--merge-gap G] [--noise S] [--threads N] [--recalibrate] [--edge-check on|off]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scoring  # noqa: E402


class MlpAE(nn.Module):
    """Flatten the window, squeeze it through a bottleneck, expand it back (Gemm + Relu chains:
    kiln fuses each into one FusedGemm)."""

    def __init__(self, w, c, hidden=128, code=16):
        super().__init__()
        self.w, self.c = w, c
        self.enc = nn.Sequential(nn.Linear(w * c, hidden), nn.ReLU(), nn.Linear(hidden, code), nn.ReLU())
        self.dec = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, w * c))

    def forward(self, x):  # (N, W, C)
        y = self.dec(self.enc(torch.flatten(x, 1)))
        return y.reshape(-1, self.w, self.c)


class ConvAE(nn.Module):
    """Two 1-D convolutions along time (Conv + Relu: FusedConv), then a linear bottleneck."""

    def __init__(self, w, c, ch=32, code=16):
        super().__init__()
        self.w, self.c = w, c
        self.conv = nn.Sequential(nn.Conv1d(c, ch, 5, padding=2), nn.ReLU(),
                                  nn.Conv1d(ch, ch, 5, padding=2, stride=2), nn.ReLU())
        self.code = nn.Sequential(nn.Linear(ch * (w // 2), code), nn.ReLU())
        self.dec = nn.Sequential(nn.Linear(code, 128), nn.ReLU(), nn.Linear(128, w * c))

    def forward(self, x):
        h = self.conv(x.transpose(1, 2))
        y = self.dec(self.code(torch.flatten(h, 1)))
        return y.reshape(-1, self.w, self.c)


ARCHS = {"mlp": MlpAE, "conv": ConvAE}


def train(model, wins, epochs, batch, noise, seed):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    data = torch.from_numpy(wins)
    for ep in range(epochs):
        perm = torch.randperm(len(data), generator=g)
        total = 0.0
        for i in range(0, len(data), batch):
            xb = data[perm[i:i + batch]]
            inp = xb + noise * torch.randn(xb.shape, generator=g) if noise > 0 else xb
            loss = ((model(inp) - xb) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
        sched.step()
        if ep % 10 == 0 or ep == epochs - 1:
            print(f"train: epoch {ep + 1}/{epochs} loss {total / len(data):.5f}", file=sys.stderr)


def reconstruct(model, wins):
    with torch.no_grad():
        return np.concatenate([model(torch.from_numpy(wins[i:i + 1024])).numpy()
                               for i in range(0, len(wins), 1024)])


def row_scores(model, xn, w, stride, smooth, rule="min"):
    starts, wins = scoring.windows(xn, w, stride)
    return scoring.smooth(scoring.row_errors(xn, starts, reconstruct(model, wins)), smooth, rule)


def export(model, out, w, c):
    model.eval()
    path = os.path.join(out, "model.onnx")
    torch.onnx.export(model, torch.zeros(1, w, c), path, opset_version=17,
                      input_names=["window"], output_names=["reconstruction"],
                      dynamic_axes={"window": {0: "N"}, "reconstruction": {0: "N"}})
    return path


def edge_config(model, xcal, a):
    """config.json's "edge_threshold" (scoring.edge_recheck), from the held-out clean rows."""
    if a.edge_check == "off" or a.stride != 1:
        return {}
    _, wins = scoring.windows(xcal, a.window, 1)
    head, tail = scoring.edge_thresholds(scoring.window_sq_errors(wins, reconstruct(model, wins)),
                                         a.quantile, a.margin)
    return {"edge_threshold": {"head": head.tolist(), "tail": tail.tolist()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="clean CSV (header; timestamp first)")
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--stride", type=int, default=1, help="window step kiln-anomaly uses")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", choices=sorted(ARCHS), default="mlp")
    ap.add_argument("--holdout", type=float, default=0.25, help="fraction kept for calibration")
    ap.add_argument("--quantile", type=float, default=0.999)
    ap.add_argument("--margin", type=float, default=2.0)
    ap.add_argument("--smooth", type=int, default=3, help="rows of score smoothing")
    ap.add_argument("--smooth-rule", choices=["min", "mean"], default="min",
                    help="smallest mean over the stretches containing a row, or the centred mean")
    ap.add_argument("--merge-gap", type=int, default=16, help="rows joining two flagged runs")
    ap.add_argument("--noise", type=float, default=0.05, help="denoising input noise (std)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--edge-check", choices=["on", "off"], default="on",
                    help="re-check flagged rows on their anomaly-free windows (stride 1 only)")
    ap.add_argument("--recalibrate", action="store_true",
                    help="keep OUT/weights.pt (same --arch/--window), redo only the threshold")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    _, names, x, _ = scoring.read_csv(a.train)
    split = int(len(x) * (1 - a.holdout))
    if split < 4 * a.window or len(x) - split < 4 * a.window:
        sys.exit(f"train.py: {len(x)} rows are too few for window {a.window}")
    mean = x[:split].mean(axis=0)
    std = np.maximum(x[:split].std(axis=0), 1e-6)
    xn = (x - mean) / std
    _, wins = scoring.windows(xn[:split], a.window, 1)
    model = ARCHS[a.arch](a.window, len(names))
    if a.recalibrate:
        model.load_state_dict(torch.load(os.path.join(a.out, "weights.pt")))
    else:
        train(model, wins, a.epochs, 128, a.noise, a.seed)
    model.eval()

    cal = row_scores(model, xn[split:], a.window, a.stride, a.smooth, a.smooth_rule)
    q = np.quantile(cal, a.quantile, axis=0)
    thr = q * a.margin
    flagged = (cal / thr).max(axis=1) > 1
    os.makedirs(a.out, exist_ok=True)
    export(model, a.out, a.window, len(names))
    cfg = {
        "model": "model.onnx", "input": "window", "output": "reconstruction",
        "channels": names, "window": a.window, "stride": a.stride,
        "mean": [float(v) for v in mean], "std": [float(v) for v in std],
        "smooth": a.smooth, "smooth_rule": a.smooth_rule, "merge_gap": a.merge_gap, "flat_limit": scoring.flat_limits(x),
        "threshold": [float(v) for v in thr],
        **edge_config(model, xn[split:], a),
        "threshold_rule": {
            "method": "per-channel quantile of held-out clean row scores, times a margin",
            "quantile": a.quantile, "margin": a.margin,
            "calibration_rows": len(x) - split, "training_rows": split,
            "calibration_flagged_fraction": float(flagged.mean())},
        "training": {"arch": a.arch, "epochs": a.epochs, "seed": a.seed, "noise": a.noise,
                     "threads": a.threads,
                     "source": os.path.basename(a.train)},
    }
    torch.save(model.state_dict(), os.path.join(a.out, "weights.pt"))  # for evaluate.py
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"train: {a.arch}, {split} training rows, {len(x) - split} calibration rows, "
          f"{sum(p.numel() for p in model.parameters())} parameters, "
          f"calibration rows flagged {flagged.mean() * 100:.2f}%, {time.time() - t0:.1f} s "
          f"-> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
