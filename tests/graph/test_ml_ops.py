"""ai.onnx.ml operators against numpy: LabelEncoder (float, int and string keys, defaults,
opset 2 and 4), TreeEnsemble (every aggregate function and post-transform, a missing value
sent down the true branch), Binarizer and ArrayFeatureExtractor on shapes the conformance data
does not use."""
import math
import os

import onnx

from kilntest import *

ML = "ai.onnx.ml"


def run(nodes, inputs, outputs, feeds, name, ml_opset):
    g = helper.make_graph(nodes, name, inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22), helper.make_opsetid(ML, ml_opset)])
    m.ir_version = 8
    p = save(m, name + ".onnx")
    args = []
    for k, v in feeds.items():
        f = os.path.join(TMP, f"{name}_{k}.pb")
        with open(f, "wb") as fh:
            fh.write(numpy_helper.from_array(v, k).SerializeToString())
        args += ["--input", f"{k}={f}"]
    out = os.path.join(TMP, name + "_out")
    rc, text = kiln("run", p, "--output-dir", out, "-q", *args)
    if rc:
        return None, text
    return numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "output_0.pb"))), text


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


# ---- LabelEncoder ----------------------------------------------------------------------------
x = np.array([0.5, -1.0, np.nan, 2.0, 7.0], np.float32)
node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_floats=[0.5, 2.0, -1.0],
                        values_strings=["half", "two", "minus"], default_string="none")
y, text = run([node], [vi("x", TensorProto.FLOAT, [5])], [vi("y", TensorProto.STRING, [5])], {"x": x}, "le_f2s", 2)
exp = np.array(["half", "minus", "none", "two", "none"], object)
check(y is not None and list(y) == list(exp), f"LabelEncoder float -> string with a default: {y} {text}")

x = np.array([[3, 1], [4, 1]], np.int64)
node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_int64s=[1, 4], values_floats=[0.25, 4.5])
y, text = run([node], [vi("x", TensorProto.INT64, [2, 2])], [vi("y", TensorProto.FLOAT, [2, 2])], {"x": x}, "le_i2f", 2)
check(y is not None and np.array_equal(y, np.array([[-0.0, 0.25], [4.5, 0.25]], np.float32)) and math.copysign(1, y[0, 0]) < 0,
      f"LabelEncoder int -> float, the default -0.0: {y} {text}")

x = np.array([np.nan, 1.0], np.float64)
keys = numpy_helper.from_array(np.array([1.0, np.nan]), "keys_tensor")
vals = numpy_helper.from_array(np.array([10, 20], np.int16), "values_tensor")
node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_tensor=keys, values_tensor=vals,
                        default_tensor=numpy_helper.from_array(np.array([-7], np.int16), "default_tensor"))
y, text = run([node], [vi("x", TensorProto.DOUBLE, [2])], [vi("y", TensorProto.INT16, [2])], {"x": x}, "le_nan", 4)
check(y is not None and y.dtype == np.int16 and list(y) == [20, 10], f"LabelEncoder-4 maps a NaN key: {y} {text}")

# ---- TreeEnsemble ----------------------------------------------------------------------------
# two trees over 2 features, 3 targets:
#   tree 0: node0 x0 <= 0.5 ? leaf0 : node1;  node1 x1 > 2 ? leaf1 : leaf2  (x1 NaN goes true)
#   tree 1: node2 x1 in {1, 3} ? leaf3 : leaf4
nodes_kw = dict(nodes_featureids=[0, 1, 1], nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
                nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
                nodes_missing_value_tracks_true=[0, 1, 0],
                nodes_splits=numpy_helper.from_array(np.array([0.5, 2.0, 0.0], np.float32), "s"),
                nodes_modes=numpy_helper.from_array(np.array([0, 3, 6], np.uint8), "m"),
                membership_values=numpy_helper.from_array(np.array([1.0, 3.0, np.nan], np.float32), "mv"),
                tree_roots=[0, 2], leaf_targetids=[0, 1, 2, 1, 2],
                leaf_weights=numpy_helper.from_array(np.array([1.0, 2.0, 3.0, 0.5, -1.0], np.float32), "w"),
                n_targets=3)
X = np.array([[0.0, 1.0], [1.0, 3.0], [1.0, np.nan], [2.0, 0.0]], np.float32)


def leaves(r):
    t0 = 0 if r[0] <= 0.5 else (1 if (np.isnan(r[1]) or r[1] > 2) else 2)
    t1 = 3 if r[1] in (1.0, 3.0) else 4
    return [t0, t1]


W, T = [1.0, 2.0, 3.0, 0.5, -1.0], [0, 1, 2, 1, 2]


def reference(agg, post):
    out = []
    for r in X:
        v, hit = [0.0] * 3, [False] * 3  # a target no leaf reaches stays 0 (as ONNX Runtime)
        for lf in leaves(r):
            t = T[lf]
            v[t] = W[lf] if not hit[t] else (v[t] + W[lf] if agg in (0, 1) else
                                             (min(v[t], W[lf]) if agg == 2 else max(v[t], W[lf])))
            hit[t] = True
        if agg == 0:
            v = [a / 2 for a in v]
        v = np.array(v, np.float64)
        if post == 1:
            e = np.exp(v - v.max()); v = e / e.sum()
        elif post == 2:
            v = 1 / (1 + np.exp(-v))
        elif post == 3:
            nz = v != 0; e = np.where(nz, np.exp(v - v[nz].max()), 0); v = e / e.sum()
        elif post == 4:
            from math import erf  # noqa: F401
            v = np.array([math.sqrt(2) * erfinv(2 * p - 1) for p in v])
        out.append(v)
    return np.array(out, np.float32)


def erfinv(y):
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.erf(mid) < y: lo = mid
        else: hi = mid
    return (lo + hi) / 2


for agg, post in [(1, 0), (0, 0), (2, 0), (3, 0), (1, 1), (1, 2), (1, 3)]:
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, aggregate_function=agg,
                            post_transform=post, **nodes_kw)
    y, text = run([node], [vi("X", TensorProto.FLOAT, [4, 2])], [vi("Y", TensorProto.FLOAT, [4, 3])], {"X": X},
                  f"te_{agg}_{post}", 5)
    ref = reference(agg, post)
    check(y is not None and np.allclose(y, ref, rtol=1e-5, atol=1e-6), f"TreeEnsemble agg {agg} post {post}: {y} vs {ref} {text}")

# PROBIT on weights inside (0, 1)
kw = dict(nodes_kw)
kw["leaf_weights"] = numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.05, 0.4], np.float32), "w")
W = [0.1, 0.2, 0.3, 0.05, 0.4]
node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, aggregate_function=3, post_transform=4, **kw)
X = np.array([[0.0, 1.0], [1.0, 3.0], [2.0, 0.0]], np.float32)
y, text = run([node], [vi("X", TensorProto.FLOAT, [3, 2])], [vi("Y", TensorProto.FLOAT, [3, 3])], {"X": X}, "te_probit", 5)
ref = reference(3, 0)
ref = np.array([[math.sqrt(2) * erfinv(2 * p - 1) if p > 0 else -np.inf for p in r] for r in ref], np.float32)
check(y is not None and np.allclose(y, ref, rtol=1e-4, atol=1e-5, equal_nan=True), f"TreeEnsemble PROBIT: {y} vs {ref} {text}")

# a cycle in the nodes is an error, not a hang
bad = dict(nodes_kw)
bad["nodes_trueleafs"], bad["nodes_falseleafs"], bad["nodes_truenodeids"], bad["nodes_falsenodeids"] = [0, 0, 1], [0, 0, 1], [1, 0, 3], [1, 0, 4]
node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, **bad)
y, text = run([node], [vi("X", TensorProto.FLOAT, [3, 2])], [vi("Y", TensorProto.FLOAT, [3, 3])], {"X": X}, "te_cycle", 5)
check(y is None and "cycle" in text, "a cycle in a tree is refused: " + text)

# ---- Binarizer and ArrayFeatureExtractor -----------------------------------------------------
x = np.array([-2, 0, 3, 5], np.int64)
node = helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=2.5)
y, text = run([node], [vi("x", TensorProto.INT64, [4])], [vi("y", TensorProto.INT64, [4])], {"x": x}, "bin", 1)
check(y is not None and list(y) == [0, 0, 1, 1], f"Binarizer on int64: {y} {text}")

x = np.arange(5, dtype=np.float32)
node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
y, text = run([node], [vi("x", TensorProto.FLOAT, [5]), vi("i", TensorProto.INT64, [3])],
              [vi("y", TensorProto.FLOAT, [1, 3])], {"x": x, "i": np.array([4, 0, 4], np.int64)}, "afe1", 1)
check(y is not None and y.shape == (1, 3) and list(y[0]) == [4, 0, 4], f"ArrayFeatureExtractor on 1-D gives [1, k]: {y} {text}")
y, text = run([node], [vi("x", TensorProto.FLOAT, [5]), vi("i", TensorProto.INT64, [1])],
              [vi("y", TensorProto.FLOAT, [1, 1])], {"x": x, "i": np.array([5], np.int64)}, "afe_bad", 1)
check(y is None and "outside" in text, "an index past the last axis is refused: " + text)
finish("test_ml_ops")
