"""The 8- and 4-bit element types and the opset 19-21 operators against ONNX Runtime on
generated models: Cast float -> float8 (4 kinds, saturate on and off) / int4 / uint4 -> float
over every float8 code, the midpoints between neighbours, out-of-range values, infinities and
NaN; QuantizeLinear -> DequantizeLinear to float8, int4/uint4 (per tensor, per axis, blocked,
with and without a zero point) and int16/uint16; AffineGrid (2-D/3-D, align_corners) and
DeformConv (groups, offset groups, mask, bias, strides, pads, dilations). Models keep float
inputs and outputs (the low-bit values live inside), so any runtime can feed them. Cast and
quantize results must be bitwise equal (NaN matching NaN), the float ops within 1e-5 relative
to the output's range. A case ONNX Runtime refuses is counted, not compared.

Where ONNX Runtime departs from the ONNX specification and its reference, kiln follows ONNX and
the inputs concerned are counted, not compared: without saturation ONNX Runtime gives e4m3fn
448 for |x| in [480, 496) (ONNX: NaN, as |x| > 448) and e5m2 NaN for |x| in (61440, 65536)
(ONNX: Inf); it wraps out-of-range values cast to int4/uint4 (ONNX clips: -9 gives -8, as the
test data test_cast_FLOAT_to_INT4 says) and rounds their halves away from zero (the ONNX
reference: half to even, np.rint). AffineGrid with align_corners over a dimension of
size 1 is left undefined by ONNX (kiln: -1, numpy's linspace(-1, 1, 1); ONNX Runtime: +1;
PyTorch: 0), so the generator avoids it.

    /usr/bin/python3 tests/quant/test_lowbit_vs_ort.py KILN [--cases N] [--seed S] [--keep DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_quant_vs_ort import finish, run_kiln  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
F8 = {"E4M3FN": (17, 448.0), "E4M3FNUZ": (18, 240.0), "E5M2": (19, 57344.0), "E5M2FNUZ": (20, 57344.0)}
INT4, UINT4 = 22, 21


def f8_values(kind):
    """Every finite value of a float8 kind, from its bit layout."""
    m, e, bias = (3, 4, 7) if kind == "E4M3FN" else (3, 4, 8) if kind == "E4M3FNUZ" else \
        (2, 5, 15) if kind == "E5M2" else (2, 5, 16)
    vals = []
    for code in range(128):
        ex, man = code >> m, code & ((1 << m) - 1)
        v = man * 2.0 ** (1 - bias - m) if ex == 0 else (1 + man / 2 ** m) * 2.0 ** (ex - bias)
        if v <= F8[kind][1]:
            vals.append(v)
    return np.array(sorted(set(vals)))


def cast_inputs(kind, r):
    v = f8_values(kind)
    mids = (v[1:] + v[:-1]) / 2
    x = np.concatenate([v, mids, np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
                        np.nextafter(mids.astype(np.float32), np.float32(0)),
                        r.uniform(-1.3, 1.3, 200) * F8[kind][1],
                        [F8[kind][1] * 1.06, F8[kind][1] * 1.2, 1e9, np.inf, np.nan, 1e-30]])
    x = np.concatenate([x, -x]).astype(np.float32)
    return x


class Gen:
    def __init__(self, rng):
        self.r = rng

    def cast_f8(self, i):
        kind = list(F8)[i % 4]
        sat = (i // 4) % 2
        nodes = [helper.make_node("Cast", ["x"], ["q"], to=F8[kind][0], saturate=sat),
                 helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
        x = cast_inputs(kind, self.r)
        a = np.abs(x)
        skip = None
        if not sat and kind == "E4M3FN":
            skip = (a >= 480) & (a < 496)
        elif not sat and kind == "E5M2":
            skip = (a > 61440) & (a < 65536)
        return f"Cast float -> FLOAT8{kind} saturate={sat} -> float", nodes, {"x": x}, [], 19, 0, skip

    def cast_int4(self, i):
        to = [INT4, UINT4][i % 2]
        lo, hi = (-8, 7) if to == INT4 else (0, 15)
        x = np.concatenate([np.arange(lo - 0.5, hi + 0.5, 0.125), self.r.uniform(lo - 0.5, hi + 0.5, 100), [np.nan]])
        x = np.concatenate([x, [-30, 30, np.inf, -np.inf]]).astype(np.float32)
        finite = np.nan_to_num(x, posinf=0, neginf=0)
        skip = (x < lo - 0.5) | (x > hi + 0.5) | (np.abs(finite - np.trunc(finite)) == 0.5)
        nodes = [helper.make_node("Cast", ["x"], ["q"], to=to),
                 helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
        return f"Cast float -> {'INT4' if to == INT4 else 'UINT4'} -> float", nodes, {"x": x}, [], 21, 0, skip

    def qdq(self, i):
        r = self.r
        rank = int(r.integers(1, 4))
        shape = [int(v) for v in r.integers(1, 7, size=rank)]
        axis = int(r.integers(-rank, rank))
        types = [("INT4", INT4), ("UINT4", UINT4), ("INT16", TensorProto.INT16), ("UINT16", TensorProto.UINT16),
                 ("E4M3FN", 17), ("E5M2", 19), ("E4M3FNUZ", 18), ("E5M2FNUZ", 20)]
        name, dt = types[i % len(types)]
        mode = ["tensor", "axis", "block"][int(r.integers(3))]
        attrs = {"output_dtype": dt}
        if mode == "tensor":
            sshape = []
        elif mode == "axis":
            sshape = [shape[axis]]
            attrs["axis"] = axis
        else:
            b = int(r.integers(1, shape[axis] + 1))
            sshape = list(shape)
            sshape[axis] = -(-shape[axis] // b)
            attrs.update(axis=axis, block_size=b)
        ft = np.float16 if i % 3 == 2 else np.float32  # float16 x and scale: the quotient rounds to float16
        x = (r.standard_normal(shape) * r.uniform(1, 20)).astype(ft)
        s = np.exp(r.uniform(-3, 1, size=sshape)).astype(ft)
        if dt >= 17:
            s = np.exp(r.uniform(-8, -2, size=sshape)).astype(ft)  # big quotients: saturation
        inits = [("s", s)]
        ins = ["x", "s"]
        zp = None
        if dt in (INT4, UINT4) and r.integers(2):  # a zero point of the 4-bit type itself
            lo, hi = (-8, 7) if dt == INT4 else (0, 15)
            zp = r.integers(lo, hi + 1, size=sshape).astype(np.int8)
            ins.append("z")
        nodes = [helper.make_node("QuantizeLinear", ins, ["q"], **attrs),
                 helper.make_node("DequantizeLinear", ["q"] + ins[1:], ["y"],
                                  **{k: v for k, v in attrs.items() if k != "output_dtype"})]
        return f"QuantizeLinear/DequantizeLinear {name} {ft.__name__} {shape} {mode} {attrs} zp={zp is not None}", nodes, \
            {"x": x}, inits + ([("z", (zp, dt))] if zp is not None else []), 21, 0, None

    def affine_grid(self, i):
        r = self.r
        three = i % 2 == 1
        n = int(r.integers(1, 3))
        align = int(r.integers(2))
        size = [n, 1] + [int(v) for v in r.integers(1 + align, 6, size=3 if three else 2)]
        theta = r.standard_normal((n, 3, 4) if three else (n, 2, 3)).astype(np.float32)
        nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align)]
        return f"AffineGrid size {size} align_corners={align}", nodes, {"theta": theta}, \
            [("size", np.array(size, np.int64))], 20, 2, None

    def deform_conv(self, i):
        r = self.r
        group, ogroup = int(r.integers(1, 3)), int(r.integers(1, 3))
        c = group * ogroup * int(r.integers(1, 3))
        m = group * int(r.integers(1, 3))
        kh, kw = int(r.integers(1, 4)), int(r.integers(1, 4))
        h, w = int(r.integers(kh, 8)), int(r.integers(kw, 8))
        st, dl = [int(v) for v in r.integers(1, 3, 2)], [int(v) for v in r.integers(1, 3, 2)]
        pads = [int(v) for v in r.integers(0, 2, 4)]
        oh = (h + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
        ow = (w + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
        if oh < 1 or ow < 1:
            pads, st, dl = [1, 1, 1, 1], [1, 1], [1, 1]
            oh, ow = h + 2 - kh + 1, w + 2 - kw + 1
        n = int(r.integers(1, 3))
        feeds = {"x": r.standard_normal((n, c, h, w)).astype(np.float32),
                 "off": (r.standard_normal((n, ogroup * kh * kw * 2, oh, ow)) * 1.5).astype(np.float32)}
        ins = ["x", "w", "off"]
        inits = [("w", r.standard_normal((m, c // group, kh, kw)).astype(np.float32))]
        with_mask = bool(r.integers(2))
        if with_mask or r.integers(2):
            inits.append(("b", r.standard_normal(m).astype(np.float32)))
            ins.append("b")
        else:
            ins.append("")
        if with_mask:
            feeds["mask"] = r.uniform(0, 1, (n, ogroup * kh * kw, oh, ow)).astype(np.float32)
            ins.append("mask")
        while ins and ins[-1] == "":
            ins.pop()
        attrs = dict(kernel_shape=[kh, kw], strides=st, dilations=dl, pads=pads, group=group, offset_group=ogroup)
        return f"DeformConv x {list(feeds['x'].shape)} {attrs} mask={with_mask}", \
            [helper.make_node("DeformConv", ins, ["y"], **attrs)], feeds, inits, 19, 2, None


def init_tensor(name, v):
    if isinstance(v, tuple):  # (values, 4-bit type): packed two per byte, as ONNX stores it
        vals, dt = v
        flat = (vals.reshape(-1).astype(np.int64) & 0xF).astype(np.uint8)
        if flat.size % 2:
            flat = np.append(flat, 0)
        t = TensorProto(name=name, data_type=dt, dims=list(vals.shape))
        t.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
        return t
    return numpy_helper.from_array(v, name)


def make_model(nodes, feeds, inits, opset):
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT16 if v.dtype == np.float16 else TensorProto.FLOAT,
                                         list(v.shape)) for k, v in feeds.items()]
    outs = [onnx.ValueInfoProto(name="y")]
    g = helper.make_graph(nodes, "g", ins, outs, [init_tensor(k, v) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def compare(got, want, mode, skip):
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} vs {want.dtype}"
    if mode == 0:
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        if skip is not None:
            same |= skip
        if not same.all():
            k = int(np.argmin(same.reshape(-1)))
            return f"{int((~same).sum())} of {same.size} differ, first at {k}: {got.reshape(-1)[k]} vs {want.reshape(-1)[k]}"
        return None
    rng = float(np.abs(want).max(initial=0)) or 1.0
    err = float(np.abs(got.astype(np.float64) - want).max(initial=0)) / rng
    return f"max error {err:.3g} of the output's range" if err > 1e-5 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--cases", type=int, default=16, help="cases per generator")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", default=None, help="keep the case folders here")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(HERE, "..", "..", "bench", "peer", "node_modules", "onnxruntime-node")):
        print("test_lowbit_vs_ort: bench/peer/node_modules/onnxruntime-node missing; run scripts/install-deps.sh --test")
        return 1
    root = a.keep or tempfile.mkdtemp(prefix="kiln_lowbit_")
    gen = Gen(np.random.default_rng(a.seed))
    kinds = ["cast_f8", "cast_int4", "qdq", "affine_grid", "deform_conv"]
    cases = {}
    for kind in kinds:
        for i in range(a.cases):
            desc, nodes, feeds, inits, opset, mode, skip = getattr(gen, kind)(i)
            d = os.path.join(root, f"{kind}_{i:03d}")
            os.makedirs(os.path.join(d, "in"), exist_ok=True)
            onnx.save(make_model(nodes, feeds, inits, opset), os.path.join(d, "model.onnx"))
            for k, v in feeds.items():
                np.save(os.path.join(d, "in", k + ".npy"), v)
            cases[d] = (kind, desc, mode, skip)
    subprocess.run(["node", os.path.join(HERE, "ort_batch.js"), root], check=True, stderr=subprocess.DEVNULL)
    stats = {k: [0, 0, 0] for k in kinds}  # compared, failed, refused by ORT
    failed = skipped = 0
    for d, (kind, desc, mode, skip) in cases.items():
        if os.path.exists(os.path.join(d, "ort_error.txt")):
            stats[kind][2] += 1
            with open(os.path.join(d, "ort_error.txt")) as f:
                print(f"refused by ONNX Runtime {os.path.basename(d)}: {desc}: {f.read().strip()[:160]}")
            continue
        stats[kind][0] += 1
        got, problem = run_kiln(a.kiln, d, 1)
        if got is not None:
            problem = compare(got[0], np.load(os.path.join(d, "ort", "y.npy")), mode, skip)
            skipped += int(skip.sum()) if skip is not None else 0
        if problem:
            failed += 1
            stats[kind][1] += 1
            print(f"FAIL {os.path.basename(d)}: {desc}: {problem}")
    for k in kinds:
        c, f, refused = stats[k]
        print(f"{k:12s} {c:4d} compared, {f:3d} failed, {refused:3d} refused by ONNX Runtime")
    return finish("test_lowbit_vs_ort", sum(s[0] for s in stats.values()), failed, root, a.keep,
                  f" ({skipped} inputs where ONNX Runtime departs from ONNX not compared)")


if __name__ == "__main__":
    sys.exit(main())
