"""float16 and mixed-precision models against ONNX Runtime (a property-style test): random shapes
and attributes, seeded, for every operator kiln runs in float16 (Conv, ConvTranspose, MatMul,
Gemm, the elementwise and activation ops, Softmax, LayerNormalization, BatchNormalization,
InstanceNormalization, Resize, the pools, reductions, data movement) and for mixed graphs (a
float32 model converted to float16: Casts at its edges, float16 weights, a chain of ops inside).

The reference is ONNX Runtime on the float16 model itself. Where ONNX Runtime has no float16
kernel for an op (its CPU provider lacks many), the reference is ONNX Runtime on the model's
float32 twin: every node computed in float32 between Casts, its float16 outputs rounded to
float16 again, which is what a float16 kernel computing in float32 must give. Outputs must agree
within ONNX Runtime's own float16 tolerance (its test checker: |got - want| <= 0.0025 + 0.001 *
|want|, onnxruntime/test/providers/checkers.cc), float32 outputs of mixed graphs likewise.

    /usr/bin/python3 tests/quant/test_f16_vs_ort.py KILN [--cases N] [--seed S] [--keep DIR] [--level L]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_quant_vs_ort import Gen as QuantGen, finish, run_kiln  # noqa: E402  (the convolution geometry)

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
ATOL, RTOL = 0.0025, 0.001  # ONNX Runtime's default float16 tolerance


class Gen:
    def __init__(self, rng):
        self.r = rng
        self.q = QuantGen(rng)

    def x(self, shape, lo=None):
        v = self.r.standard_normal(shape)
        if lo is not None:
            v = np.abs(v) + lo
        return v.astype(np.float16)

    def shape(self, rank=None, hi=6):
        rank = int(self.r.integers(1, 5)) if rank is None else rank
        return tuple(int(v) for v in self.r.integers(1, hi, size=rank))

    def bshape(self, shape):
        """A shape that broadcasts against shape: some dims 1, some leading ones dropped."""
        s = [d if self.r.integers(3) else 1 for d in shape]
        return tuple(s[int(self.r.integers(0, len(s) + 1)):]) or (1,)

    # ---- compute ops ----
    def conv(self):
        n, cin, m, hw, k, attrs = self.q.conv_geom()
        x, w = self.x((n, cin) + tuple(hw)), (self.x((m, cin // attrs["group"]) + tuple(k)) * 0.5).astype(np.float16)
        names, inits = ["x", "w"], [("w", w)]
        if self.r.integers(2):
            inits.append(("b", self.x((m,))))
            names.append("b")
        return f"Conv {attrs}", [helper.make_node("Conv", names, ["y"], **attrs)], {"x": x}, inits, 13

    def convtranspose(self):
        r = self.r
        g = int(r.choice([1, 1, 2]))
        cin, m = g * int(r.integers(1, 5)), g * int(r.integers(1, 5))
        k = [int(r.integers(1, 4)), int(r.integers(1, 4))]
        s = [int(r.integers(1, 3)), int(r.integers(1, 3))]
        p = [int(r.integers(0, kk)) for kk in k] * 2
        hw = [int(r.integers(1, 7)) for _ in range(2)]
        p = [pp if s[i % 2] * (hw[i % 2] - 1) + k[i % 2] - 2 * pp > 0 else 0 for i, pp in enumerate(p)]
        attrs = dict(group=g, kernel_shape=k, strides=s, pads=p)
        if r.integers(3) == 0:
            attrs["output_padding"] = [int(r.integers(0, ss)) for ss in s]
        x, w = self.x((1, cin) + tuple(hw)), self.x((cin, m // g) + tuple(k))
        return f"ConvTranspose {attrs}", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": x}, \
            [("w", w)], 13

    def matmul(self):
        r = self.r
        mdim, kdim, ndim = (int(v) for v in r.integers(1, 33, size=3))
        batch = tuple(int(v) for v in r.integers(1, 4, size=int(r.integers(0, 3))))
        bb = batch[int(r.integers(0, len(batch) + 1)):] if batch else ()
        a, b = self.x(batch + (mdim, kdim)), self.x(bb + (kdim, ndim))
        feeds, inits = {"a": a}, [("b", b)]
        if r.integers(2):  # both inputs at run time
            feeds["b"], inits = b, []
        return f"MatMul {list(a.shape)} x {list(b.shape)}", [helper.make_node("MatMul", ["a", "b"], ["y"])], \
            feeds, inits, 13

    def gemm(self):
        r = self.r
        mdim, kdim, ndim = (int(v) for v in r.integers(1, 33, size=3))
        ta, tb = int(r.integers(2)), int(r.integers(2))
        a = self.x((kdim, mdim) if ta else (mdim, kdim))
        b = self.x((ndim, kdim) if tb else (kdim, ndim))
        attrs = dict(transA=ta, transB=tb, alpha=float(r.choice([1.0, 0.5, 2.0])), beta=float(r.choice([1.0, 0.25])))
        names, inits = ["a", "b"], [("b", b)]
        if r.integers(3):
            inits.append(("c", self.x([(ndim,), (1, ndim), (mdim, 1), (mdim, ndim)][int(r.integers(4))])))
            names.append("c")
        return f"Gemm {attrs} c {inits[-1][1].shape if len(names) == 3 else None}", \
            [helper.make_node("Gemm", names, ["y"], **attrs)], {"a": a}, inits, 13

    # ---- elementwise ----
    def binary(self):
        r = self.r
        op = str(r.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"]))
        sa = self.shape()
        sb = self.bshape(sa)
        if r.integers(2):
            sa, sb = sb, sa
        if op == "PRelu":  # the slope broadcasts to x (unidirectional)
            sa = tuple(np.broadcast_shapes(sa, sb))
        a = self.x(sa, 0.1) if op == "Pow" else self.x(sa)
        b = self.x(sb, 0.5) if op == "Div" else self.x(sb)
        if op == "Pow":
            b = (b * 0.5).astype(np.float16)
        return f"{op} {sa} {sb}", [helper.make_node(op, ["a", "b"], ["y"])], {"a": a, "b": b}, [], 16

    def unary(self):
        r = self.r
        ops = {"Relu": {}, "Sigmoid": {}, "Tanh": {}, "Exp": {}, "Abs": {}, "Neg": {}, "Sqrt": {}, "Erf": {},
               "LeakyRelu": {"alpha": 0.1}, "Elu": {"alpha": 0.7}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
               "Softplus": {}, "Log": {}, "Reciprocal": {}, "Floor": {}, "Ceil": {}, "Round": {}, "Sin": {},
               "Cos": {}, "HardSwish": {}, "Selu": {}, "Gelu": {}, "Sign": {}, "Mish": {}, "Identity": {}}
        op = str(r.choice(sorted(ops)))
        positive = op in ("Sqrt", "Log", "Reciprocal")
        x = self.x(self.shape(), 0.1 if positive else None)
        return op, [helper.make_node(op, ["x"], ["y"], **ops[op])], {"x": x}, [], 20 if op == "Gelu" else 18

    def clip(self):
        x = (self.x(self.shape()) * 3).astype(np.float16)
        names, inits = ["x"], []
        lo, hi = sorted(self.r.uniform(-2, 2, size=2))
        if self.r.integers(3):
            names.append("lo")
            inits.append(("lo", np.array(lo, np.float16)))
        if self.r.integers(3):
            names += [""] if len(names) == 1 else []
            names.append("hi")
            inits.append(("hi", np.array(hi, np.float16)))
        return f"Clip {names}", [helper.make_node("Clip", names, ["y"])], {"x": x}, inits, 13

    def where(self):
        s = self.shape()
        c = self.r.integers(2, size=self.bshape(s)).astype(bool)
        return "Where", [helper.make_node("Where", ["c", "a", "b"], ["y"])], \
            {"c": c, "a": self.x(s), "b": self.x(self.bshape(s))}, [], 16

    # ---- normalisation ----
    def softmax(self):
        r = self.r
        s = self.shape(hi=9)
        axis = int(r.integers(-len(s), len(s)))
        op = str(r.choice(["Softmax", "LogSoftmax"]))
        x = (self.x(s) * 3).astype(np.float16)
        return f"{op} {s} axis {axis}", [helper.make_node(op, ["x"], ["y"], axis=axis)], {"x": x}, [], 13

    def layernorm(self):
        r = self.r
        s = self.shape(int(r.integers(2, 5)), hi=9)
        axis = int(r.integers(-len(s), len(s)))
        ns = s[axis:]
        names, inits = ["x", "g"], [("g", self.x(ns))]
        if r.integers(2):
            names.append("b")
            inits.append(("b", self.x(ns)))
        x = (self.x(s) * 2 + 1).astype(np.float16)
        eps = float(r.choice([1e-5, 1e-3]))
        return f"LayerNormalization {s} axis {axis} eps {eps}", \
            [helper.make_node("LayerNormalization", names, ["y"], axis=axis, epsilon=eps)], {"x": x}, inits, 17

    def batchnorm(self):
        n, c, hw = int(self.r.integers(1, 3)), int(self.r.integers(1, 9)), self.shape(int(self.r.integers(0, 3)))
        inits = [("s", self.x((c,))), ("b", self.x((c,))), ("m", self.x((c,))), ("v", self.x((c,), 0.2))]
        return f"BatchNormalization {(n, c) + hw}", \
            [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)], \
            {"x": self.x((n, c) + hw)}, inits, 15

    def instancenorm(self):
        n, c, hw = int(self.r.integers(1, 3)), int(self.r.integers(1, 9)), self.shape(int(self.r.integers(1, 3)), hi=9)
        return f"InstanceNormalization {(n, c) + hw}", \
            [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)], \
            {"x": self.x((n, c) + hw)}, [("s", self.x((c,))), ("b", self.x((c,)))], 6

    # ---- spatial ----
    def resize(self):
        r = self.r
        n, c, h, w = 1, int(r.integers(1, 4)), int(r.integers(1, 9)), int(r.integers(1, 9))
        mode = str(r.choice(["nearest", "linear", "cubic"]))
        ctm = str(r.choice(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]))
        attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
        if mode == "nearest":
            attrs["nearest_mode"] = str(r.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
        if mode == "cubic":
            attrs["cubic_coeff_a"] = float(r.choice([-0.75, -0.5]))
        inits = [("roi", np.array([], np.float32))]
        if r.integers(2):
            sc = [float(r.choice([0.5, 1.5, 2.0, 3.0])) for _ in range(2)]
            if ctm == "align_corners":
                # ONNX's reference (and so its conformance data) aligns corners on length * scale,
                # ONNX Runtime on the output's integer length; kiln follows the reference, so the
                # generated scales keep length * scale whole, where the two agree
                sc = [v if (v * L) % 1 == 0 else 2.0 for v, L in zip(sc, (h, w))]
            sc = np.array([1, 1] + sc, np.float32)
            inits.append(("scales", sc))
            names = ["x", "roi", "scales"]
        else:
            inits.append(("sizes", np.array([n, c, int(r.integers(1, 17)), int(r.integers(1, 17))], np.int64)))
            names = ["x", "roi", "", "sizes"]
        return f"Resize {attrs} {inits[-1][0]} {inits[-1][1].tolist()}", \
            [helper.make_node("Resize", names, ["y"], **attrs)], {"x": self.x((n, c, h, w))}, inits, 13

    def pool(self):
        r = self.r
        op = str(r.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
        n, c = int(r.integers(1, 3)), int(r.integers(1, 5))
        if op.startswith("Global"):
            return op, [helper.make_node(op, ["x"], ["y"])], {"x": self.x((n, c) + self.shape(2, hi=10))}, [], 13
        k = [int(r.integers(1, 4)), int(r.integers(1, 4))]
        s = [int(r.integers(1, 3)), int(r.integers(1, 3))]
        p = [int(r.integers(0, kk)) for kk in k] * 2
        attrs = dict(kernel_shape=k, strides=s, pads=p, ceil_mode=int(r.integers(2)))
        if op == "MaxPool" and r.integers(3) == 0:
            attrs["dilations"] = [int(r.integers(1, 3)), int(r.integers(1, 3))]
        if op == "AveragePool":
            attrs["count_include_pad"] = int(r.integers(2))
        ek = [(k[i] - 1) * attrs.get("dilations", [1, 1])[i] + 1 for i in range(2)]
        # the smallest input with a window: ceil_mode keeps one that overhangs the end
        lo = [max(1, ek[i] - p[i] - p[i + 2] - (s[i] - 1 if attrs["ceil_mode"] else 0)) for i in range(2)]
        hw = [int(r.integers(lo[i], 12)) for i in range(2)]
        return f"{op} {attrs}", [helper.make_node(op, ["x"], ["y"], **attrs)], {"x": self.x((n, c) + tuple(hw))}, [], 18

    def reduce(self):
        r = self.r
        op = str(r.choice(["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare"]))
        s = self.shape(hi=7)
        axes = sorted(set(int(a) % len(s) for a in r.integers(-len(s), len(s), size=int(r.integers(1, len(s) + 1)))))
        axes = [a - len(s) if r.integers(2) else a for a in axes]  # negative axes too
        keep = int(r.integers(2))
        return f"{op} {s} axes {axes} keepdims {keep}", \
            [helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep)], {"x": self.x(s)}, \
            [("axes", np.array(axes, np.int64))], 18

    def movement(self):
        r = self.r
        op = str(r.choice(["Concat", "Transpose", "Slice", "Pad", "Flatten", "Split"]))
        s = self.shape(int(r.integers(2, 5)))
        x = self.x(s)
        if op == "Concat":
            axis = int(r.integers(0, len(s)))
            s2 = list(s)
            s2[axis] = int(r.integers(1, 5))
            return f"Concat axis {axis}", [helper.make_node("Concat", ["x", "x2"], ["y"], axis=axis)], \
                {"x": x, "x2": self.x(tuple(s2))}, [], 13
        if op == "Transpose":
            perm = [int(v) for v in r.permutation(len(s))]
            return f"Transpose {perm}", [helper.make_node("Transpose", ["x"], ["y"], perm=perm)], {"x": x}, [], 13
        if op == "Slice":
            st = [int(r.integers(0, d)) for d in s]
            en = [int(r.integers(a + 1, d + 1)) for a, d in zip(st, s)]
            return f"Slice {st}:{en}", [helper.make_node("Slice", ["x", "st", "en"], ["y"])], {"x": x}, \
                [("st", np.array(st, np.int64)), ("en", np.array(en, np.int64))], 13
        if op == "Pad":
            mode = str(r.choice(["constant", "reflect", "edge"]))
            pads = [int(r.integers(0, min(d, 3))) if mode == "reflect" else int(r.integers(0, 3)) for d in s] * 2
            names, inits = ["x", "pads"], [("pads", np.array(pads, np.int64))]
            if mode == "constant":
                names.append("cv")
                inits.append(("cv", np.array(r.uniform(-1, 1), np.float16)))
            return f"Pad {mode} {pads}", [helper.make_node("Pad", names, ["y"], mode=mode)], {"x": x}, inits, 13
        if op == "Flatten":
            axis = int(r.integers(0, len(s) + 1))
            return f"Flatten {axis}", [helper.make_node("Flatten", ["x"], ["y"], axis=axis)], {"x": x}, [], 13
        return "Split", [helper.make_node("Split", ["x"], ["y", "y2"], axis=0, num_outputs=2)], \
            {"x": self.x((2 * s[0],) + s[1:])}, [], 18

    def misc(self):
        """The other ops a float16 model meets: index, scan, shape and normalisation ops."""
        r = self.r
        op = str(r.choice(["TopK", "ArgMax", "CumSum", "Expand", "Tile", "Gather", "GatherElements",
                           "DepthToSpace", "SpaceToDepth", "MeanVarianceNormalization",
                           "Hardmax", "Trilu", "Einsum", "ReduceLogSumExp", "ReduceProd",
                           "GridSample", "LSTM", "GRU", "Equal", "Less", "IsNaN", "Mean", "Sum", "Shrink",
                           "ThresholdedRelu", "LRN", "ConstantOfShape", "Unsqueeze"]))
        s = self.shape(int(r.integers(2, 5)))
        x = self.x(s)
        one = [helper.make_node(op, ["x"], ["y"])]
        if op == "TopK":
            axis = int(r.integers(-len(s), len(s)))
            kk = int(r.integers(1, s[axis] + 1))
            return f"TopK {s} k {kk} axis {axis}", [helper.make_node(op, ["x", "k"], ["y", "i"], axis=axis)], \
                {"x": x}, [("k", np.array([kk], np.int64))], 13
        if op == "ArgMax":
            return f"ArgMax {s}", [helper.make_node(op, ["x"], ["y"], axis=int(r.integers(0, len(s))))], {"x": x}, [], 13
        if op == "CumSum":
            return f"CumSum {s}", [helper.make_node(op, ["x", "ax"], ["y"], exclusive=int(r.integers(2)),
                                                    reverse=int(r.integers(2)))], {"x": x}, \
                [("ax", np.array(int(r.integers(0, len(s))), np.int64))], 14
        if op == "Expand":
            return "Expand", [helper.make_node(op, ["x", "sh"], ["y"])], {"x": self.x(self.bshape(s))}, \
                [("sh", np.array(s, np.int64))], 13
        if op == "Tile":
            return "Tile", [helper.make_node(op, ["x", "rep"], ["y"])], {"x": x}, \
                [("rep", r.integers(1, 3, size=len(s)).astype(np.int64))], 13
        if op in ("Gather", "GatherElements"):
            axis = int(r.integers(0, len(s)))
            ishape = (3,) if op == "Gather" else s
            idx = r.integers(-s[axis], s[axis], size=ishape).astype(np.int64)
            return f"{op} axis {axis}", [helper.make_node(op, ["x", "idx"], ["y"], axis=axis)], {"x": x}, \
                [("idx", idx)], 13
        if op in ("DepthToSpace", "SpaceToDepth"):
            b = int(r.integers(1, 3))
            shp = (1, 4 * b * b, 3, 2) if op == "DepthToSpace" else (1, 2, 2 * b, 4 * b)
            attrs = dict(blocksize=b)
            if op == "DepthToSpace":
                attrs["mode"] = str(r.choice(["DCR", "CRD"]))
            return f"{op} {attrs}", [helper.make_node(op, ["x"], ["y"], **attrs)], {"x": self.x(shp)}, [], 13
        if op == "MeanVarianceNormalization":
            return op, one, {"x": self.x((2, 3, 4, 5))}, [], 13
        if op == "Hardmax":
            return op, [helper.make_node(op, ["x"], ["y"], axis=-1)], {"x": x}, [], 13
        if op == "Trilu":
            return op, [helper.make_node(op, ["x"], ["y"], upper=int(r.integers(2)))], {"x": x}, [], 14
        if op == "Einsum":
            return op, [helper.make_node(op, ["a", "b"], ["y"], equation="bij,bjk->bik")], \
                {"a": self.x((2, 3, 4)), "b": self.x((2, 4, 5))}, [], 12
        if op in ("ReduceLogSumExp", "ReduceProd"):
            return op, [helper.make_node(op, ["x"], ["y"], keepdims=1)], {"x": (x * 0.5).astype(np.float16)}, [], 18
        if op == "GridSample":
            return op, [helper.make_node(op, ["x", "grid"], ["y"], align_corners=int(r.integers(2)))], \
                {"x": self.x((1, 2, 4, 5)), "grid": (self.x((1, 3, 3, 2)) * 0.6).astype(np.float16)}, [], 16
        if op in ("LSTM", "GRU"):
            g = 4 if op == "LSTM" else 3
            return op, [helper.make_node(op, ["x", "w", "r"], ["y"], hidden_size=3)], {"x": self.x((4, 2, 5))}, \
                [("w", (self.x((1, g * 3, 5)) * 0.3).astype(np.float16)),
                 ("r", (self.x((1, g * 3, 3)) * 0.3).astype(np.float16))], 14
        if op in ("Equal", "Less"):
            y = x.copy()
            y.flat[::2] = 0
            return op, [helper.make_node(op, ["x", "x2"], ["y"])], {"x": x, "x2": y}, [], 13
        if op == "IsNaN":
            x.flat[::3] = np.nan
            return op, one, {"x": x}, [], 13
        if op in ("Mean", "Sum"):
            return op, [helper.make_node(op, ["x", "x2", "x3"], ["y"])], \
                {"x": x, "x2": self.x(self.bshape(s)), "x3": self.x(s)}, [], 13
        if op in ("Shrink", "ThresholdedRelu"):
            return op, one, {"x": x}, [], 13
        if op == "LRN":
            return op, [helper.make_node(op, ["x"], ["y"], size=3)], {"x": self.x((1, 5, 3, 3))}, [], 13
        if op == "ConstantOfShape":
            return op, [helper.make_node(op, ["sh"], ["y"], value=numpy_helper.from_array(np.array([1.5], np.float16)))], \
                {"sh": np.array(s, np.int64)}, [], 13
        return op, [helper.make_node(op, ["x", "ax"], ["y"])], {"x": x}, [("ax", np.array([0, -1], np.int64))], 13

    # ---- mixed precision: a float32 model converted to float16 ----
    def mixed(self):
        """float32 input -> Cast to float16 -> Conv (float16 weights) -> a few float16 ops ->
        Cast back to float32, as converters (onnxconverter-common's float16 pass) write them."""
        r = self.r
        c, h, w = int(r.integers(1, 5)), int(r.integers(4, 13)), int(r.integers(4, 13))
        m = int(r.integers(1, 9))
        k = int(r.choice([1, 3]))
        nodes = [helper.make_node("Cast", ["x"], ["x16"], to=F16),
                 helper.make_node("Conv", ["x16", "w", "b"], ["c"], kernel_shape=[k, k], pads=[k // 2] * 4)]
        inits = [("w", (self.x((m, c, k, k)) * 0.5).astype(np.float16)), ("b", self.x((m,)))]
        prev, desc = "c", ["Conv"]
        for i in range(int(r.integers(1, 5))):
            op = str(r.choice(["Relu", "Add", "Mul", "Sigmoid", "MaxPool", "Resize", "Concat", "BatchNormalization",
                               "Clip", "GlobalAveragePool", "Softmax"]))
            out = f"t{i}"
            if op in ("Relu", "Sigmoid"):
                nodes.append(helper.make_node(op, [prev], [out]))
            elif op in ("Add", "Mul"):
                inits.append((f"k{i}", self.x((1, m, 1, 1))))
                nodes.append(helper.make_node(op, [prev, f"k{i}"], [out]))
            elif op == "MaxPool":
                nodes.append(helper.make_node(op, [prev], [out], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1))
            elif op == "Resize":
                inits.append((f"s{i}", np.array([1, 1, 2, 2], np.float32)))
                nodes.append(helper.make_node(op, [prev, "", f"s{i}"], [out], mode=str(r.choice(["nearest", "linear"]))))
            elif op == "Concat":
                nodes.append(helper.make_node(op, [prev, prev], [out], axis=1))
                m *= 2
            elif op == "BatchNormalization":
                inits += [(f"bs{i}", self.x((m,))), (f"bb{i}", self.x((m,))), (f"bm{i}", self.x((m,))),
                          (f"bv{i}", self.x((m,), 0.5))]
                nodes.append(helper.make_node(op, [prev, f"bs{i}", f"bb{i}", f"bm{i}", f"bv{i}"], [out]))
            elif op == "Clip":
                inits += [(f"lo{i}", np.array(0, np.float16)), (f"hi{i}", np.array(6, np.float16))]
                nodes.append(helper.make_node(op, [prev, f"lo{i}", f"hi{i}"], [out]))
            elif op == "GlobalAveragePool":
                nodes.append(helper.make_node(op, [prev], [out]))
            else:
                nodes.append(helper.make_node(op, [prev], [out], axis=1))
            prev = out
            desc.append(op)
        nodes.append(helper.make_node("Cast", [prev], ["y"], to=F32))
        x = r.standard_normal((1, c, h, w)).astype(np.float32)
        return "mixed " + " -> ".join(desc), nodes, {"x": x}, inits, 13


NP2T = {np.float16: F16, np.float32: F32, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}


def make_model(nodes, feeds, inits, opset):
    ins = [helper.make_tensor_value_info(k, NP2T[v.dtype.type], list(v.shape)) for k, v in feeds.items()]
    outs = [onnx.ValueInfoProto(name=o) for o in nodes[-1].output]
    g = helper.make_graph(nodes, "g", ins, outs, [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def float32_twin(model):
    """Every non-Cast node computed in float32: its float16 inputs Cast to float32, its float16
    outputs computed as float32 and Cast back (rounded to float16 once, after the op)."""
    inf = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output)}
    g = model.graph
    inits = []
    for t in g.initializer:
        a = numpy_helper.to_array(t)
        inits.append(numpy_helper.from_array(a.astype(np.float32), t.name) if a.dtype == np.float16 else t)
        types[t.name] = t.data_type
    init_names, nodes = {t.name for t in g.initializer}, []
    for k, n in enumerate(g.node):
        if n.op_type == "Cast":
            nodes.append(n)
            continue
        ins = []
        for i in n.input:
            if i and types.get(i) == F16 and i not in init_names:
                nodes.append(helper.make_node("Cast", [i], [f"{i}__in{k}"], to=F32))
                ins.append(f"{i}__in{k}")
            else:
                ins.append(i)
        outs = []
        for o in n.output:
            # a function op's output may be left untyped by inference: the type of its first input
            if types.get(o) == F16 or (not types.get(o) and n.input and types.get(n.input[0]) == F16):
                outs.append(o + "__out")
            else:
                outs.append(o)
        nn = helper.make_node(n.op_type, ins, outs, domain=n.domain)
        nn.attribute.extend(n.attribute)
        nodes.append(nn)
        for o, o32 in zip(n.output, outs):
            if o32 != o:
                nodes.append(helper.make_node("Cast", [o32], [o], to=F16))
    tg = helper.make_graph(nodes, "twin", list(g.input), list(g.output), inits)
    t = helper.make_model(tg, opset_imports=list(model.opset_import))
    t.ir_version = model.ir_version
    return t


def compare(got, want):
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.dtype}{got.shape} vs {want.dtype}{want.shape}", 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    fin = np.isfinite(w)
    if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)]):
        return "NaN/infinity differ", 0.0
    d = np.abs(g[fin] - w[fin])
    allowed = ATOL + RTOL * np.abs(w[fin])
    worst = float((d / allowed).max(initial=0))
    if worst > 1:
        return f"{int((d > allowed).sum())} of {d.size} outside tolerance, max abs diff {float(d.max()):.4g}", worst
    return None, worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kiln")
    ap.add_argument("--cases", type=int, default=20, help="cases per generator")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", default=None, help="keep the case folders here")
    ap.add_argument("--level", default="2")
    ap.add_argument("--isa", default=None, help="KILN_ISA for kiln's runs (avx512, avx2, scalar)")
    a = ap.parse_args()
    env = dict(os.environ, **({"KILN_ISA": a.isa} if a.isa else {}))
    if not os.path.isdir(os.path.join(HERE, "..", "..", "bench", "peer", "node_modules", "onnxruntime-node")):
        print("test_f16_vs_ort: bench/peer/node_modules/onnxruntime-node missing; run scripts/install-deps.sh --test")
        return 1
    root = a.keep or tempfile.mkdtemp(prefix="kiln_f16_")
    gen = Gen(np.random.default_rng(a.seed))
    kinds = ["conv", "convtranspose", "matmul", "gemm", "binary", "unary", "clip", "where", "softmax", "layernorm",
             "batchnorm", "instancenorm", "resize", "pool", "reduce", "movement", "misc", "mixed"]
    cases = {}
    for kind in kinds:
        for i in range(a.cases):
            desc, nodes, feeds, inits, opset = getattr(gen, kind)()
            m = make_model(nodes, feeds, inits, opset)
            for sub, model in (("f16", m), ("twin", float32_twin(m))):
                d = os.path.join(root, sub, f"{kind}_{i:03d}")
                os.makedirs(os.path.join(d, "in"), exist_ok=True)
                onnx.save(model, os.path.join(d, "model.onnx"))
                for k, v in feeds.items():
                    np.save(os.path.join(d, "in", k + ".npy"), v)
            cases[f"{kind}_{i:03d}"] = (kind, desc, list(nodes[-1].output))
    for sub in ("f16", "twin"):
        subprocess.run(["node", os.path.join(HERE, "ort_batch.js"), os.path.join(root, sub)], check=True,
                       stderr=subprocess.DEVNULL)
    # compared, failed, only against the twin, worst error / tolerance against the reference and the twin
    stats = {k: [0, 0, 0, 0.0, 0.0] for k in kinds}
    failed = 0
    for c, (kind, desc, outs) in cases.items():
        d, twin = os.path.join(root, "f16", c), os.path.join(root, "twin", c)
        ref = d
        if os.path.exists(os.path.join(d, "ort_error.txt")):
            ref = twin
            if os.path.exists(os.path.join(twin, "ort_error.txt")):
                failed += 1
                stats[kind][1] += 1
                print(f"FAIL {c}: {desc}: ONNX Runtime refuses both the model and its float32 twin: "
                      + open(os.path.join(twin, "ort_error.txt")).read()[:200])
                continue
            stats[kind][2] += 1
        stats[kind][0] += 1
        ys, problem = run_kiln(a.kiln, d, len(outs), a.level, env)
        if ys is not None:
            for o, got in zip(outs, ys):
                for rd in dict.fromkeys([ref, twin]):  # the float16 model's result, then the twin's
                    if not os.path.exists(os.path.join(rd, "ort", o + ".npy")):
                        continue
                    problem, worst = compare(got, np.load(os.path.join(rd, "ort", o + ".npy")))
                    stats[kind][3 if rd == ref else 4] = max(stats[kind][3 if rd == ref else 4], worst)
                    if problem:
                        problem = f"output {o} (vs ORT on the {'twin' if rd == twin else 'float16 model'}): {problem}"
                        break
                if problem:
                    break
        if problem:
            failed += 1
            stats[kind][1] += 1
            print(f"FAIL {c}: {desc}: {problem}")
    print(f"{'kind':14s} compared failed twin-only  worst error / ORT's tolerance: vs reference, vs twin")
    for k in kinds:
        n, f, tw, worst, wtwin = stats[k]
        print(f"{k:14s} {n:8d} {f:6d} {tw:9d}  {worst:.3f} {wtwin:.3f}")
    return finish("test_f16_vs_ort", sum(s[0] for s in stats.values()), failed, root, a.keep)


if __name__ == "__main__":
    sys.exit(main())
