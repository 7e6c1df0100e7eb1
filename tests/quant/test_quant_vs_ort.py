"""Quantized operators against ONNX Runtime on generated models (a property-style test): random
shapes, zero points (per tensor, per channel / row / column), scales, pads, strides, dilations,
groups and uint8/int8 mixes for ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul,
QuantizeLinear / DequantizeLinear (per tensor and per axis), DynamicQuantizeLinear, and the
chain ONNX Runtime's dynamic quantizer writes (DynamicQuantizeLinear -> ConvInteger -> Cast ->
Mul -> Add). Integer outputs must be equal, requantized ones within 1 (rounding of the float
scale), float ones within 1e-5 relative to the output's range. A case ONNX Runtime itself
refuses (a type combination it has no kernel for) is counted, not compared.

    /usr/bin/python3 tests/quant/test_quant_vs_ort.py KILN [--cases N] [--seed S] [--keep DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
NP2T = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int32: TensorProto.INT32,
        np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64}


def qrange(dt):
    return (0, 255) if dt == np.uint8 else (-128, 127)


class Gen:
    def __init__(self, rng):
        self.r = rng

    def q(self, dt, shape):
        lo, hi = qrange(dt)
        return self.r.integers(lo, hi + 1, size=shape).astype(dt)

    def zp(self, dt, n=None):
        lo, hi = qrange(dt)
        return np.array(self.r.integers(lo, hi + 1) if n is None else self.r.integers(lo, hi + 1, size=n)).astype(dt)

    def dt(self):
        return [np.uint8, np.int8][self.r.integers(2)]

    def conv_geom(self):
        r = self.r
        g = int(r.choice([1, 1, 2, 3]))
        big = r.integers(4) == 0  # a real layer's sizes: the kernels' blocked paths
        cin, m = g * int(r.integers(1, 17 if big else 4)), g * int(r.integers(1, 17 if big else 4))
        if r.integers(5) == 0:  # depthwise: one input and one output channel per group
            g = cin = m = int(r.integers(1, 17))
        k = [int(r.integers(1, 4)), int(r.integers(1, 4))]
        d = [int(r.integers(1, 3)), int(r.integers(1, 3))]
        s = [int(r.integers(1, 3)), int(r.integers(1, 3))]
        p = [int(r.integers(0, 3)) for _ in range(4)]
        hw = [int(r.integers(max(1, (k[i] - 1) * d[i] + 1 - p[i] - p[i + 2]), 41 if big else 9)) for i in range(2)]
        n = int(r.integers(1, 3))
        attrs = dict(group=g, kernel_shape=k, dilations=d, strides=s, pads=p)
        if r.integers(5) == 0:  # padding from auto_pad instead of pads (dilations 1: ORT's rule)
            del attrs["pads"]
            attrs["dilations"] = [1, 1]
            attrs["auto_pad"] = str(r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
            hw = [max(h, kk) for h, kk in zip(hw, k)]
        elif r.integers(4) == 0:  # kernel_shape left to W's shape
            del attrs["kernel_shape"]
        return n, cin, m, hw, k, attrs

    def convinteger(self):
        n, cin, m, hw, k, attrs = self.conv_geom()
        xd, wd = self.dt(), self.dt()
        x, w = self.q(xd, (n, cin) + tuple(hw)), self.q(wd, (m, cin // attrs["group"]) + tuple(k))
        per = self.r.integers(2) == 1
        inits = [("w", w), ("xz", self.zp(xd)), ("wz", self.zp(wd, m if per else None))]
        node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
        return f"ConvInteger x {xd.__name__} w {wd.__name__} {'per-channel' if per else 'scalar'} zp {attrs}", \
            [node], {"x": x}, inits, 10, 0

    def matmulinteger(self):
        r = self.r
        mdim, kdim, ndim = (int(v) for v in r.integers(1, 9, size=3))
        batch = [int(v) for v in r.integers(1, 3, size=int(r.integers(0, 2)))]
        ad, bd = self.dt(), self.dt()
        a, b = self.q(ad, tuple(batch) + (mdim, kdim)), self.q(bd, (kdim, ndim))
        azp = self.zp(ad, mdim if r.integers(3) == 0 else None)
        bzp = self.zp(bd, ndim if r.integers(2) == 0 else None)
        node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
        return f"MatMulInteger a {ad.__name__}{list(a.shape)} zp{azp.shape} b {bd.__name__}{list(b.shape)} zp{bzp.shape}", \
            [node], {"a": a}, [("b", b), ("az", azp), ("bz", bzp)], 10, 0

    def scale(self, n=None):
        return np.array(np.exp(self.r.uniform(-6, -1, size=n)), np.float32)

    def qlinearconv(self):
        n, cin, m, hw, k, attrs = self.conv_geom()
        xd, wd = self.dt(), self.dt()
        yd = xd if self.r.integers(4) else self.dt()  # ONNX Runtime has kernels for y of x's type
        x, w = self.q(xd, (n, cin) + tuple(hw)), self.q(wd, (m, cin // attrs["group"]) + tuple(k))
        per = self.r.integers(2) == 1
        inits = [("xs", self.scale()), ("xz", self.zp(xd)), ("w", w), ("ws", self.scale(m if per else None)),
                 ("wz", self.zp(wd, m if per else None) if per and wd == np.int8 and False else self.zp(wd)),
                 ("ys", np.array(self.r.uniform(0.001, 0.05), np.float32)), ("yz", self.zp(yd))]
        names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
        if self.r.integers(2):
            inits.append(("b", self.r.integers(-2000, 2000, size=m).astype(np.int32)))
            names.append("b")
        node = helper.make_node("QLinearConv", names, ["y"], **attrs)
        return f"QLinearConv x {xd.__name__} w {wd.__name__} y {yd.__name__} {'per-channel' if per else 'scalar'} scale {attrs}", \
            [node], {"x": x}, inits, 10, 1

    def qlinearmatmul(self):
        r = self.r
        mdim, kdim, ndim = (int(v) for v in r.integers(1, 9, size=3))
        ad, bd = self.dt(), self.dt()
        yd = ad if r.integers(4) else self.dt()
        a, b = self.q(ad, (mdim, kdim)), self.q(bd, (kdim, ndim))
        inits = [("as", self.scale()), ("az", self.zp(ad)), ("b", b), ("bs", self.scale()), ("bz", self.zp(bd)),
                 ("ys", np.array(r.uniform(0.001, 0.05), np.float32)), ("yz", self.zp(yd))]
        node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
        return f"QLinearMatMul a {ad.__name__} b {bd.__name__} y {yd.__name__} [{mdim},{kdim}]x[{kdim},{ndim}]", \
            [node], {"a": a}, inits, 10, 1

    def quantize(self):
        r = self.r
        rank = int(r.integers(1, 5))
        shape = tuple(int(v) for v in r.integers(1, 5, size=rank))
        axis = int(r.integers(-rank, rank))
        per = r.integers(2) == 1
        yd = self.dt()
        n = shape[axis] if per else None
        x = (r.standard_normal(shape) * 3).astype(np.float32)
        node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis)
        dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)
        return f"QuantizeLinear/DequantizeLinear {yd.__name__} {shape} axis {axis} {'per-axis' if per else 'per-tensor'}", \
            [node, dq], {"x": x}, [("s", np.array(np.exp(r.uniform(-4, 0, size=n)), np.float32)), ("z", self.zp(yd, n))], \
            13, 1

    def dynquant(self):
        r = self.r
        shape = tuple(int(v) for v in r.integers(1, 6, size=int(r.integers(1, 4))))
        x = (r.standard_normal(shape) * r.uniform(0.1, 10) + r.uniform(-3, 3)).astype(np.float32)
        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])
        return f"DynamicQuantizeLinear {shape}", [node], {"x": x}, [], 11, 1

    def dynamic_chain(self):
        """What onnxruntime.quantization.quantize_dynamic writes for a Conv with uint8 weights."""
        n, cin, m, hw, k, attrs = self.conv_geom()
        r = self.r
        wd = [np.uint8, np.int8][r.integers(2)]
        x = (r.standard_normal((n, cin) + tuple(hw)) * r.uniform(0.5, 4)).astype(np.float32)
        w = self.q(wd, (m, cin // attrs["group"]) + tuple(k))
        per = r.integers(2) == 1
        ws = self.scale(m if per else None)
        wshape = [1, m, 1, 1] if per else []
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                 helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], **attrs),
                 helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["xs", "wsr"], ["sc"]),
                 helper.make_node("Mul", ["accf", "sc"], ["yf"]),
                 helper.make_node("Add", ["yf", "bias"], ["y"])]
        inits = [("w", w), ("wz", self.zp(wd, m if per else None)), ("wsr", ws.reshape(wshape)),
                 ("bias", (r.standard_normal((1, m, 1, 1)) * 0.1).astype(np.float32))]
        return f"dynamic chain w {wd.__name__} {'per-channel' if per else 'scalar'} {attrs}", nodes, {"x": x}, inits, 11, 2

    # ---- the 8-bit tensors between quantized layers: pooling, resampling, concatenation ----
    def maxpool8(self):
        r = self.r
        xd = self.dt()
        k = [int(r.integers(1, 4)), int(r.integers(1, 4))]
        s = [int(r.integers(1, 3)), int(r.integers(1, 3))]
        d = [int(r.integers(1, 3)), int(r.integers(1, 3))] if r.integers(3) == 0 else [1, 1]
        p = [int(r.integers(0, kk)) for kk in k] * 2
        attrs = dict(kernel_shape=k, strides=s, pads=p, dilations=d, ceil_mode=int(r.integers(2)))
        if r.integers(4) == 0:  # auto_pad: dilations 1, where ONNX Runtime's SAME sizes follow the spec
            del attrs["pads"]
            attrs["auto_pad"] = str(r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
            attrs["dilations"] = d = [1, 1]
        hw = [int(r.integers((k[i] - 1) * d[i] + 1, 13)) for i in range(2)]
        x = self.q(xd, (int(r.integers(1, 3)), int(r.integers(1, 5))) + tuple(hw))
        return f"MaxPool {xd.__name__} {attrs}", [helper.make_node("MaxPool", ["x"], ["y"], **attrs)], {"x": x}, [], 12, 0

    def resize8(self):
        r = self.r
        xd = self.dt()
        x = self.q(xd, (1, int(r.integers(1, 4)), int(r.integers(1, 9)), int(r.integers(1, 9))))
        mode = str(r.choice(["nearest", "linear"]))  # ONNX Runtime has no 8-bit cubic
        ctm = str(r.choice(["half_pixel", "asymmetric", "pytorch_half_pixel"] + (["align_corners"] if mode != "nearest" else [])))
        attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
        if mode == "nearest":
            attrs["nearest_mode"] = str(r.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
        inits = [("roi", np.array([], np.float32))]
        if r.integers(2):
            inits.append(("scales", np.array([1, 1, float(r.choice([0.5, 1.0, 2.0, 3.0])),
                                              float(r.choice([0.5, 1.0, 2.0, 3.0]))], np.float32)))
            names = ["x", "roi", "scales"]
            if ctm == "align_corners":  # where ONNX's reference and ONNX Runtime agree: see test_f16_vs_ort.py
                inits[-1] = ("scales", np.array([1, 1, 2.0, 2.0], np.float32))
        else:
            inits.append(("sizes", np.array([1, x.shape[1], int(r.integers(1, 17)), int(r.integers(1, 17))], np.int64)))
            names = ["x", "roi", "", "sizes"]
        return f"Resize {xd.__name__} {attrs} {inits[-1][0]} {inits[-1][1].tolist()} of {list(x.shape)}", \
            [helper.make_node("Resize", names, ["y"], **attrs)], {"x": x}, inits, 13, 1

    def concat8(self):
        r = self.r
        xd = self.dt()
        shape = [int(v) for v in r.integers(1, 5, size=4)]
        axis = int(r.integers(-4, 4))
        s2 = list(shape)
        s2[axis] = int(r.integers(1, 5))
        return f"Concat {xd.__name__} axis {axis}", [helper.make_node("Concat", ["a", "b"], ["y"], axis=axis)], \
            {"a": self.q(xd, tuple(shape)), "b": self.q(xd, tuple(s2))}, [], 13, 0

    def static_seg(self):
        """A small segmentation net as ONNX Runtime's static quantizer (QOperator format) writes it:
        QuantizeLinear -> QLinearConv -> MaxPool (8-bit) -> QLinearConv -> Resize (8-bit) ->
        Concat with the skip connection (same scale) -> QLinearConv -> DequantizeLinear."""
        r = self.r
        xd = self.dt()
        wd = self.dt()
        c, m, h = int(r.integers(1, 4)), int(r.integers(1, 9)), 2 * int(r.integers(2, 9))
        mode = str(r.choice(["nearest", "linear"]))
        lo, hi = qrange(xd)
        zp = lambda: np.array(r.integers(lo + 50, hi - 50), xd)  # noqa: E731
        s1 = np.array(r.uniform(0.01, 0.05), np.float32)
        inits = [("xs", np.array(0.02, np.float32)), ("xz", zp()), ("s1", s1), ("z1", zp()), ("s2", s1), ("z2", None),
                 ("s3", np.array(r.uniform(0.01, 0.05), np.float32)), ("z3", zp()), ("sc", np.array([1, 1, 2, 2], np.float32))]
        inits[5] = ("z2", inits[3][1])  # the skip and the upsampled path share scale and zero point
        for i, (ci, co) in enumerate([(c, m), (m, m), (2 * m, m)]):
            inits += [(f"w{i}", self.q(wd, (co, ci, 3, 3))), (f"ws{i}", self.scale(co if r.integers(2) else None)),
                      (f"wz{i}", self.zp(wd)), (f"b{i}", r.integers(-500, 500, size=co).astype(np.int32))]
        conv = lambda i, x, s, z, ys, yz, y: helper.make_node(  # noqa: E731
            "QLinearConv", [x, s, z, f"w{i}", f"ws{i}", f"wz{i}", ys, yz, f"b{i}"], [y], kernel_shape=[3, 3], pads=[1] * 4)
        nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
                 conv(0, "xq", "xs", "xz", "s1", "z1", "c0"),
                 helper.make_node("MaxPool", ["c0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
                 conv(1, "p0", "s1", "z1", "s2", "z2", "c1"),
                 helper.make_node("Resize", ["c1", "", "sc"], ["u1"], mode=mode),
                 helper.make_node("Concat", ["c0", "u1"], ["cat"], axis=1),
                 conv(2, "cat", "s1", "z1", "s3", "z3", "c2"),
                 helper.make_node("DequantizeLinear", ["c2", "s3", "z3"], ["y"])]
        x = (r.standard_normal((1, c, h, h)) * 1.5).astype(np.float32)
        return f"static segmentation net x {xd.__name__} w {wd.__name__} {mode} [{c},{m},{h}]", nodes, {"x": x}, inits, 13, 1

    def dynamic_seg(self):
        """The same net as ONNX Runtime's dynamic quantizer writes it: each Conv a chain
        DynamicQuantizeLinear -> ConvInteger (8-bit weights and zero points) -> Cast -> Mul -> Add,
        with Relu, MaxPool, Resize and Concat in float between them."""
        r = self.r
        wd = self.dt()
        c, m, h = int(r.integers(1, 4)), int(r.integers(1, 9)), 2 * int(r.integers(2, 9))
        nodes, inits = [], []

        def conv(i, x, ci, co, y):
            per = False  # ONNX Runtime's ConvInteger takes one weight zero point (its quantizer writes one)
            inits.extend([(f"w{i}", self.q(wd, (co, ci, 3, 3))), (f"wz{i}", self.zp(wd, co if per else None)),
                          (f"ws{i}", self.scale(co if per else None).reshape([1, co, 1, 1] if per else [])),
                          (f"b{i}", (r.standard_normal((1, co, 1, 1)) * 0.1).astype(np.float32))])
            nodes.extend([helper.make_node("DynamicQuantizeLinear", [x], [f"{x}_q", f"{x}_s", f"{x}_z"]),
                          helper.make_node("ConvInteger", [f"{x}_q", f"w{i}", f"{x}_z", f"wz{i}"], [f"{y}_i"], pads=[1] * 4),
                          helper.make_node("Cast", [f"{y}_i"], [f"{y}_f"], to=TensorProto.FLOAT),
                          helper.make_node("Mul", [f"{x}_s", f"ws{i}"], [f"{y}_sc"]),
                          helper.make_node("Mul", [f"{y}_f", f"{y}_sc"], [f"{y}_m"]),
                          helper.make_node("Add", [f"{y}_m", f"b{i}"], [f"{y}_b"]),
                          helper.make_node("Relu", [f"{y}_b"], [y])])

        conv(0, "x", c, m, "c0")
        nodes.append(helper.make_node("MaxPool", ["c0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]))
        conv(1, "p0", m, m, "c1")
        inits.append(("sc", np.array([1, 1, 2, 2], np.float32)))
        nodes.append(helper.make_node("Resize", ["c1", "", "sc"], ["u1"], mode=str(r.choice(["nearest", "linear"]))))
        nodes.append(helper.make_node("Concat", ["c0", "u1"], ["cat"], axis=1))
        conv(2, "cat", 2 * m, m, "y")
        x = (r.standard_normal((1, c, h, h)) * 1.5).astype(np.float32)
        return f"dynamic segmentation net w {wd.__name__} [{c},{m},{h}]", nodes, {"x": x}, inits, 13, 2


def make_model(nodes, feeds, inits, opset):
    ins = [helper.make_tensor_value_info(k, NP2T[v.dtype.type], list(v.shape)) for k, v in feeds.items()]
    outs = [onnx.ValueInfoProto(name=o) for o in nodes[-1].output]  # types left to inference
    g = helper.make_graph(nodes, "g", ins, outs, [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def compare(got, want, mode):
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if mode == 0 and not np.array_equal(got, want):
        d = np.abs(got.astype(np.int64) - want.astype(np.int64))
        return f"{int((d > 0).sum())} of {d.size} differ, max {int(d.max())}"
    if mode == 1:
        if got.dtype.kind in "iu":
            d = np.abs(got.astype(np.int64) - want.astype(np.int64))
            if d.max(initial=0) > 1:
                return f"{int((d > 1).sum())} of {d.size} off by more than 1, max {int(d.max())}"
        elif not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            return f"max abs diff {float(np.abs(got - want).max())}"
    if mode == 2:
        rng = float(np.abs(want).max(initial=0)) or 1.0
        err = float(np.abs(got.astype(np.float64) - want).max(initial=0)) / rng
        if err > 1e-5:
            return f"max error {err:.3g} of the output's range"
    return None


def run_kiln(kiln, d, n_outputs, level=None, env=None):
    """Run kiln on the case in directory d (model.onnx, in/NAME.npy): (outputs, None), or
    (None, the reason it failed)."""
    kout = os.path.join(d, "kiln")
    args = [kiln, "run", os.path.join(d, "model.onnx"), "--quiet", "--output-dir", kout]
    if level is not None:
        args += ["--level", level]
    for f in sorted(os.listdir(os.path.join(d, "in"))):
        args += ["--input", f"{f[:-4]}={os.path.join(d, 'in', f)}"]
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, "kiln failed: " + (r.stdout + r.stderr).strip()[-300:]
    outs = []
    for i in range(n_outputs):
        t = onnx.TensorProto()
        with open(os.path.join(kout, f"output_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        outs.append(numpy_helper.to_array(t))
    return outs, None


def finish(name, total, failed, root, keep, extra=""):
    """The last line of a property test and its exit status (1 if any case failed or none ran)."""
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{name}: {total} cases compared, {failed} failed{extra}")
    return 1 if failed or total == 0 else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--cases", type=int, default=25, help="cases per generator")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", default=None, help="keep the case folders here")
    ap.add_argument("--level", default="2")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(HERE, "..", "..", "bench", "peer", "node_modules", "onnxruntime-node")):
        print("test_quant_vs_ort: bench/peer/node_modules/onnxruntime-node missing; "
              "run scripts/install-deps.sh --test")
        return 1
    root = a.keep or tempfile.mkdtemp(prefix="kiln_quant_")
    gen = Gen(np.random.default_rng(a.seed))
    kinds = ["convinteger", "matmulinteger", "qlinearconv", "qlinearmatmul", "quantize", "dynquant", "dynamic_chain",
             "maxpool8", "resize8", "concat8", "static_seg", "dynamic_seg"]
    cases = {}
    for kind in kinds:
        for i in range(a.cases):
            desc, nodes, feeds, inits, opset, mode = getattr(gen, kind)()
            d = os.path.join(root, f"{kind}_{i:03d}")
            os.makedirs(os.path.join(d, "in"), exist_ok=True)
            onnx.save(make_model(nodes, feeds, inits, opset), os.path.join(d, "model.onnx"))
            for k, v in feeds.items():
                np.save(os.path.join(d, "in", k + ".npy"), v)
            cases[d] = (kind, desc, list(nodes[-1].output), mode)
    subprocess.run(["node", os.path.join(HERE, "ort_batch.js"), root], check=True, stderr=subprocess.DEVNULL)
    stats = {k: [0, 0, 0] for k in kinds}  # compared, failed, refused by ORT
    failed = 0
    for d, (kind, desc, outs, mode) in cases.items():
        if os.path.exists(os.path.join(d, "ort_error.txt")):
            stats[kind][2] += 1
            continue
        stats[kind][0] += 1
        got, problem = run_kiln(a.kiln, d, len(outs), a.level)
        if got is not None:
            for o, y in zip(outs, got):
                problem = compare(y, np.load(os.path.join(d, "ort", o + ".npy")), mode)
                if problem:
                    problem = f"output {o}: {problem}"
                    break
        if problem:
            failed += 1
            stats[kind][1] += 1
            print(f"FAIL {os.path.basename(d)}: {desc}: {problem}")
    for k in kinds:
        c, f, refused = stats[k]
        print(f"{k:16s} {c:4d} compared, {f:3d} failed, {refused:3d} refused by ONNX Runtime")
    return finish("test_quant_vs_ort", sum(s[0] for s in stats.values()), failed, root, a.keep)


if __name__ == "__main__":
    sys.exit(main())
