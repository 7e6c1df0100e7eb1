"""fold_shapes, cse and fuse_transpose: graphs where they must apply, where they must not, and
validation of every rewritten graph against the original on several input shapes."""
import os

from kilntest import *

I64 = TensorProto.INT64
rng = np.random.default_rng(1)


def i64(name, v):
    return const(name, np.asarray(v, np.int64))


def f32(name, v):
    return const(name, np.asarray(v, np.float32))


def validate_dims(path, level, dims_list, what):
    """kiln validate at `level` for each --dim assignment in dims_list."""
    for dims in dims_list:
        args = ["--level", str(level)]
        for k, v in dims.items():
            args += ["--dim", f"{k}={v}"]
        ok, text = validate(path, *args)
        check(ok, f"{what} validates at level {level} with {dims}: {text}")


def shape_chain(src, idx, out, p):
    """Shape(src) -> Gather(idx) -> Unsqueeze(0): the exporter's way of reading one dim."""
    return [helper.make_node("Shape", [src], [p + "_s"]),
            helper.make_node("Gather", [p + "_s", p + "_i"], [p + "_g"], axis=0),
            helper.make_node("Unsqueeze", [p + "_g", "ax0"], [out])], [i64(p + "_i", idx)]


SYM = [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 16}]

# ---- fold_shapes ----

# Shape of a static tensor feeds Reshape: the target becomes a constant, Shape goes.
m = model([helper.make_node("Shape", ["y"], ["s"]),
           helper.make_node("Reshape", ["x", "s"], ["r"]),
           helper.make_node("Add", ["r", "y"], ["z"])],
          [vi("x", [6, 4]), vi("y", [2, 3, 4])], [vi("z", [2, 3, 4])])
p = save(m, "static_shape")
ops, text = optimized_ops(p, "--level", "1")
check(ops == {"Reshape": 1, "Add": 1}, f"static Shape folded: {ops} {text}")
validate_dims(p, 1, [{}], "static_shape")

# Head split with symbolic batch/seq: [b, s, 256] -> [b, s, 4, 64] computed from Shape(x):
# the Gathers of dims 0 and 1 match x's own dims (0 = copy), 4 and 64 come from a static dim.
nodes, inits = [], [i64("ax0", [0]), i64("c4", 4)]
for k, (idx, nm) in enumerate([(0, "d0"), (1, "d1")]):
    n, i = shape_chain("x", idx, nm, f"p{k}")
    nodes += n
    inits += i
nodes += [helper.make_node("Shape", ["x"], ["sx"]),
          helper.make_node("Gather", ["sx", "i2"], ["g2"], axis=0),
          helper.make_node("Div", ["g2", "c4"], ["hd"]),
          helper.make_node("Unsqueeze", ["hd", "ax0"], ["d3"]),
          helper.make_node("Concat", ["d0", "d1", "heads", "d3"], ["tgt"], axis=0),
          helper.make_node("Reshape", ["x", "tgt"], ["y"])]
inits += [i64("i2", 2), i64("heads", [4])]
m = model(nodes, [vi("x", ["batch", "seq", 256])], [vi("y", ["batch", "seq", 4, 64])], inits)
p = save(m, "head_split")
ops, text = optimized_ops(p, "--level", "1")
check(ops == {"Reshape": 1}, f"head split target folds to a constant: {ops} {text}")
validate_dims(p, 1, SYM, "head_split")

# Merge the last dims back: [b, s, 4, 64] -> [b, s, 256], 256 = dim2 * dim3 folded.
nodes, inits = [], [i64("ax0", [0])]
for k, (idx, nm) in enumerate([(0, "d0"), (1, "d1"), (2, "d2"), (3, "d3")]):
    n, i = shape_chain("x", idx, nm, f"q{k}")
    nodes += n
    inits += i
nodes += [helper.make_node("Mul", ["d2", "d3"], ["hid"]),
          helper.make_node("Concat", ["d0", "d1", "hid"], ["tgt"], axis=0),
          helper.make_node("Reshape", ["x", "tgt"], ["y"])]
m = model(nodes, [vi("x", ["batch", "seq", 4, 64])], [vi("y", ["batch", "seq", 256])], inits)
p = save(m, "head_merge")
ops, text = optimized_ops(p, "--level", "1")
check(ops == {"Reshape": 1}, f"head merge target folds: {ops} {text}")
validate_dims(p, 1, SYM, "head_merge")

# Split a merged dim back into [b, s, 256] from another tensor's dims: not expressible with
# 0/-1 (two symbolic dims not at the input's positions), so the target becomes Shape(t).
W = f32("W", rng.standard_normal((256, 256)))
nodes, inits = [helper.make_node("Reshape", ["t", "flat"], ["f"]),
                helper.make_node("MatMul", ["f", "W"], ["mm"])], [W, i64("flat", [-1, 256]), i64("ax0", [0])]
for k, (idx, nm) in enumerate([(0, "d0"), (1, "d1")]):
    n, i = shape_chain("t", idx, nm, f"r{k}")
    nodes += n
    inits += i
nodes += [helper.make_node("Shape", ["mm"], ["smm"]),
          helper.make_node("Gather", ["smm", "one"], ["hid"], axis=0),
          helper.make_node("Unsqueeze", ["hid", "ax0"], ["d2"]),
          helper.make_node("Concat", ["d0", "d1", "d2"], ["tgt"], axis=0),
          helper.make_node("Reshape", ["mm", "tgt"], ["u"]),
          helper.make_node("Add", ["u", "t"], ["y"])]
inits += [i64("one", 1)]
m = model(nodes, [vi("t", ["batch", "seq", 256])], [vi("y", ["batch", "seq", 256])], inits)
p = save(m, "split_back")
ops, text = optimized_ops(p, "--level", "1")
check(ops == {"Reshape": 2, "MatMul": 1, "Shape": 1, "Add": 1},
      f"unexpressible target rebuilt as Shape(t): {ops} {text}")
validate_dims(p, 1, SYM, "split_back")

# A static dim read from a tensor whose other dims are symbolic: Gather folds, and so does
# what only depends on it (Cast, Div), leaving the float arithmetic.
m = model([helper.make_node("Shape", ["x"], ["s"]),
           helper.make_node("Gather", ["s", "i2"], ["g"], axis=0),
           helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT),
           helper.make_node("Div", ["x", "gf"], ["y"])],
          [vi("x", ["batch", "seq", 8])], [vi("y", ["batch", "seq", 8])], [i64("i2", 2)])
p = save(m, "static_dim_of_symbolic")
ops, text = optimized_ops(p, "--level", "1")
check(ops == {"Div": 1}, f"static dim of a symbolic shape folds: {ops} {text}")
validate_dims(p, 1, SYM, "static_dim_of_symbolic")

# Must not: the target is a graph input (data, not shapes): the Reshape keeps it.
m = model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
          [vi("x", [2, 3, 4]), vi("shape", [3], I64)], [vi("y", None)])
ops, _ = optimized_ops(save(m, "data_target"), "--level", "1")
check(ops == {"Reshape": 1}, f"a data target stays: {ops}")

# Must not use 0 with allowzero=1 (opset 14): two symbolic dims -> minimal rebuild, valid.
nodes, inits = [], [i64("ax0", [0]), i64("tail", [4, 64])]
for k, (idx, nm) in enumerate([(0, "d0"), (1, "d1")]):
    n, i = shape_chain("x", idx, nm, f"z{k}")
    nodes += n
    inits += i
nodes += [helper.make_node("Concat", ["d0", "d1", "tail"], ["tgt"], axis=0),
          helper.make_node("Reshape", ["x", "tgt"], ["y"], allowzero=1)]
m = model(nodes, [vi("x", ["batch", "seq", 256])], [vi("y", ["batch", "seq", 4, 64])], inits, opset=14)
p = save(m, "allowzero")
ops, text = optimized_ops(p, "--level", "1")
check(ops is not None and ops.get("Gather", 0) == 0 and ops.get("Unsqueeze", 0) == 0,
      f"allowzero target rebuilt without Gather/Unsqueeze: {ops} {text}")
validate_dims(p, 1, SYM, "allowzero")

# Symbolic dims with different names are not assumed equal: [a, b] reshaped with b's and a's
# dims swapped has no constant form; it must still validate (and keep a Shape).
nodes, inits = [], [i64("ax0", [0])]
for k, (idx, nm) in enumerate([(1, "d0"), (0, "d1")]):
    n, i = shape_chain("x", idx, nm, f"w{k}")
    nodes += n
    inits += i
nodes += [helper.make_node("Concat", ["d0", "d1"], ["tgt"], axis=0),
          helper.make_node("Reshape", ["x", "tgt"], ["y"])]
m = model(nodes, [vi("x", ["a", "b"])], [vi("y", ["b", "a"])], inits)
p = save(m, "swapped_dims")
ops, text = optimized_ops(p, "--level", "1")
check(ops is not None and ops.get("Shape", 0) >= 1, f"swapped symbolic dims keep a Shape: {ops} {text}")
validate_dims(p, 1, [{"a": 2, "b": 5}, {"a": 4, "b": 3}], "swapped_dims")

# ---- cse ----

m = model([helper.make_node("Relu", ["x"], ["r1"]),
           helper.make_node("Relu", ["x"], ["r2"]),
           helper.make_node("MatMul", ["r1", "W1"], ["m1"]),
           helper.make_node("MatMul", ["r2", "W2"], ["m2"]),
           helper.make_node("Add", ["m1", "m2"], ["y"])],
          [vi("x", [3, 4])], [vi("y", [3, 5])],
          [f32("W1", np.arange(20).reshape(4, 5) / 7), f32("W2", np.arange(20).reshape(4, 5) / 7)])
p = save(m, "cse_chain")
ops, text = optimized_ops(p, "--level", "1")
check(ops == {"Relu": 1, "MatMul": 1, "Add": 1},
      f"duplicate initializers merged, then the duplicate Relu and MatMul: {ops} {text}")
validate_dims(p, 1, [{}], "cse_chain")

# Must not: random ops, different attributes, graph outputs.
m = model([helper.make_node("RandomNormalLike", ["x"], ["n1"], seed=1.0),
           helper.make_node("RandomNormalLike", ["x"], ["n2"], seed=1.0),
           helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
           helper.make_node("Transpose", ["x"], ["t2"], perm=[0, 1]),
           helper.make_node("Sigmoid", ["x"], ["o1"]),
           helper.make_node("Sigmoid", ["x"], ["o2"])],
          [vi("x", [3, 3])],
          [vi(n, [3, 3]) for n in ["n1", "n2", "t1", "t2", "o1", "o2"]])
ops, _ = optimized_ops(save(m, "cse_not"), "--level", "1", "--disable", "eliminate")
check(ops == {"RandomNormalLike": 2, "Transpose": 2, "Sigmoid": 2},
      f"random ops, other attributes and graph outputs are not merged: {ops}")

# Initializers with equal bytes but another dtype or shape stay apart.
m = model([helper.make_node("Add", ["x", "a"], ["y"]),
           helper.make_node("Add", ["x2", "b"], ["z"])],
          [vi("x", [4]), vi("x2", [2, 2])], [vi("y", [4]), vi("z", [2, 2])],
          [f32("a", [1, 2, 3, 4]), const("b", np.asarray([[1, 2], [3, 4]], np.float32))])
ops, text = optimized_ops(save(m, "cse_shapes"), "--level", "1")
check(ops == {"Add": 2}, f"initializers of different shapes are not merged: {ops} {text}")

# Large initializers: equal ones merge; ones that differ in a single byte the hash does not
# sample (float 10 of 1000) stay apart, since every candidate pair is compared in full.
big = np.arange(1000, dtype=np.float32).reshape(100, 10) / 7
odd = big.copy()
odd.flat[10] += 1
for w2, want, what in [(big, {"MatMul": 1, "Add": 1}, "equal large initializers merge"),
                       (odd, {"MatMul": 2, "Add": 1}, "large initializers one float apart stay apart")]:
    m = model([helper.make_node("MatMul", ["x", "W1"], ["m1"]),
               helper.make_node("MatMul", ["x", "W2"], ["m2"]),
               helper.make_node("Add", ["m1", "m2"], ["y"])],
              [vi("x", [3, 100])], [vi("y", [3, 10])], [f32("W1", big), f32("W2", w2)])
    p = save(m, "cse_big")
    ops, text = optimized_ops(p, "--level", "1")
    check(ops == want, f"{what}: {ops} {text}")
    validate_dims(p, 1, [{}], "cse_big")

# ---- fuse_transpose (level 2) ----

L2 = ["--level", "2", "--disable", "fuse_elementwise"]


def relu_out(nodes, src, shape, inits=(), inputs=None):
    return model(nodes + [helper.make_node("Relu", [src], ["y"])], inputs, [vi("y", shape)], list(inits))


# Transpose pair cancelling; and a pair composing into one.
m = relu_out([helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1, 3])], "b", [2, 3, 4, 5],
             inputs=[vi("x", [2, 3, 4, 5])])
p = save(m, "transpose_cancel")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Relu": 1}, f"cancelling transposes removed: {ops}")
validate_dims(p, 2, [{}], "transpose_cancel")

m = relu_out([helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["a"], ["b"], perm=[3, 1, 0, 2])], "b", None,
             inputs=[vi("x", [2, 3, 4, 5])])
p = save(m, "transpose_compose")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Transpose": 1, "Relu": 1}, f"transposes composed: {ops}")
validate_dims(p, 2, [{}], "transpose_compose")

# Must not: the inner Transpose is read elsewhere and the pair is not the identity.
m = model([helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
           helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
           helper.make_node("Relu", ["a"], ["c"]),
           helper.make_node("Add", ["b", "x"], ["y"])],
          [vi("x", [3, 3])], [vi("y", [3, 3]), vi("c", [3, 3])])
p = save(m, "transpose_shared")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Transpose": 1, "Relu": 1, "Add": 1}, f"identity pair bypassed, shared inner kept: {ops}")
validate_dims(p, 2, [{}], "transpose_shared")
m = model([helper.make_node("Transpose", ["x"], ["a"], perm=[1, 2, 0]),
           helper.make_node("Transpose", ["a"], ["b"], perm=[1, 2, 0]),
           helper.make_node("Relu", ["a"], ["c"])],
          [vi("x", [2, 3, 4])], [vi("b", None), vi("c", None)])
ops, _ = optimized_ops(save(m, "transpose_shared2"), *L2)
check(ops == {"Transpose": 2, "Relu": 1}, f"non-identity pair with a shared inner stays: {ops}")

# Reshape -> Unsqueeze -> Reshape, and a Transpose that only moves a size-1 dim: one Reshape.
m = relu_out([helper.make_node("Reshape", ["x", "s1"], ["a"]),
              helper.make_node("Unsqueeze", ["a", "ax"], ["b"]),
              helper.make_node("Transpose", ["b"], ["c"], perm=[1, 0, 2, 3]),
              helper.make_node("Reshape", ["c", "s2"], ["d"])], "d", ["batch", 24],
             [i64("s1", [0, 6, 4]), i64("ax", [0]), i64("s2", [0, -1])],
             inputs=[vi("x", ["batch", 2, 12])])
p = save(m, "reshape_chain")
ops, text = optimized_ops(p, *L2)
check(ops == {"Reshape": 1, "Relu": 1}, f"reshape-like chain collapsed: {ops} {text}")
validate_dims(p, 2, [{"batch": 1}, {"batch": 5}], "reshape_chain")

# Must not: rely on a shape only the model declares. Squeeze without axes drops the size-1 dims
# the run finds (batch 1 too), so this output is [3,6] at batch 1 whatever the wrong declaration
# [2,3,3] says; the reshape-chain fusion once made it a Reshape to [2,3,3].
m = model([helper.make_node("Unsqueeze", ["x", "ax"], ["a"]), helper.make_node("Squeeze", ["a"], ["y"])],
          [vi("x", ["batch", 3, 6])], [vi("y", [2, 3, 3])], [i64("ax", [3])])
p = save(m, "squeeze_declared_only")
for level in ("0", "2"):
    rc, text = kiln("run", p, "--level", level, "--dim", "batch=1")
    check(rc == 0 and "y: float[3,6]" in text, f"Squeeze of all size-1 dims at level {level} gives [3,6]: {text}")

# Must not: drop an Expand because a value_info declares its output with its input's shape:
# the shape comes from an input of unknown length, and [4,2,3] is what the run gives.
m = model([helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node("Relu", ["e"], ["y"])],
          [vi("x", [2, 3]), vi("s", ["n"], TensorProto.INT64)], [vi("y", None)])
m.graph.value_info.append(vi("e", [2, 3]))
p = save(m, "expand_declared_only")
s_path = os.path.join(TMP, "expand_shape.npy")
np.save(s_path, np.array([4, 2, 3], np.int64))
for level in ("0", "2"):
    rc, text = kiln("run", p, "--level", level, "--input", f"s={s_path}")
    check(rc == 0 and "y: float[4,2,3]" in text, f"Expand kept at level {level}: {text}")

# Must not: a Transpose that moves real dims is no reshape.
m = relu_out([helper.make_node("Reshape", ["x", "s1"], ["a"]),
              helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
              helper.make_node("Reshape", ["b", "s2"], ["c"])], "c", [24],
             [i64("s1", [4, 6]), i64("s2", [24])], inputs=[vi("x", [2, 12])])
p = save(m, "reshape_transpose")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Reshape": 2, "Transpose": 1, "Relu": 1}, f"real transpose between reshapes kept: {ops}")
validate_dims(p, 2, [{}], "reshape_transpose")

# Must not: symbolic dims the target cannot express ([n] -> [b, s] from other tensors).
nodes, inits = [helper.make_node("Reshape", ["t", "m1"], ["f"])], [i64("m1", [-1]), i64("ax0", [0])]
for k, (idx, nm) in enumerate([(0, "d0"), (1, "d1")]):
    n, i = shape_chain("t", idx, nm, f"v{k}")
    nodes += n
    inits += i
nodes += [helper.make_node("Concat", ["d0", "d1"], ["tgt"], axis=0),
          helper.make_node("Reshape", ["f", "tgt"], ["u"]),
          helper.make_node("Unsqueeze", ["u", "ax0"], ["w"]),
          helper.make_node("Relu", ["w"], ["y"])]
m = model(nodes, [vi("t", ["batch", "seq"])], [vi("y", [1, "batch", "seq"])], inits)
p = save(m, "reshape_symbolic")
ops, text = optimized_ops(p, *L2)
check(ops is not None and ops.get("Unsqueeze", 0) + ops.get("Reshape", 0) >= 1, f"symbolic reshape chain: {ops}")
validate_dims(p, 2, SYM, "reshape_symbolic")

# Slices on two axes merge; on one axis they compose.
m = relu_out([helper.make_node("Slice", ["x", "st1", "en1", "ax1"], ["a"]),
              helper.make_node("Slice", ["a", "st2", "en2", "ax2"], ["b"])], "b", None,
             [i64("st1", [1]), i64("en1", [5]), i64("ax1", [1]), i64("st2", [2]), i64("en2", [-1]), i64("ax2", [2])],
             inputs=[vi("x", [2, 6, 7])])
p = save(m, "slice_axes")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Slice": 1, "Relu": 1}, f"slices on two axes merged: {ops}")
validate_dims(p, 2, [{}], "slice_axes")
m = relu_out([helper.make_node("Slice", ["x", "st1", "en1", "ax1", "sp1"], ["a"]),
              helper.make_node("Slice", ["a", "st2", "en2", "ax1"], ["b"])], "b", None,
             [i64("st1", [1]), i64("en1", [100]), i64("ax1", [1]), i64("sp1", [2]), i64("st2", [1]), i64("en2", [-1])],
             inputs=[vi("x", [2, 11])])
p = save(m, "slice_compose")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Slice": 1, "Relu": 1}, f"slices on one axis composed: {ops}")
validate_dims(p, 2, [{}], "slice_compose")

# Must not: the inner slice is read twice.
m = model([helper.make_node("Slice", ["x", "st1", "en1", "ax1"], ["a"]),
           helper.make_node("Slice", ["a", "st2", "en2", "ax2"], ["b"]),
           helper.make_node("Relu", ["a"], ["c"])],
          [vi("x", [4, 4])], [vi("b", None), vi("c", None)],
          [i64("st1", [1]), i64("en1", [3]), i64("ax1", [0]), i64("st2", [0]), i64("en2", [2]), i64("ax2", [1])])
ops, _ = optimized_ops(save(m, "slice_shared"), *L2)
check(ops == {"Slice": 2, "Relu": 1}, f"shared inner slice kept: {ops}")

# Concat of slices re-assembling x -> x; adjacent slices -> one Slice; out of order: kept.
def concat_of_slices(name, bounds, dims):
    nodes, inits, parts = [], [i64("cax", [1])], []
    for k, (s, e) in enumerate(bounds):
        inits += [i64(f"s{k}", [s]), i64(f"e{k}", [e])]
        nodes.append(helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "cax"], [f"p{k}"]))
        parts.append(f"p{k}")
    nodes += [helper.make_node("Concat", parts, ["c"], axis=1), helper.make_node("Relu", ["c"], ["y"])]
    return save(model(nodes, [vi("x", dims)], [vi("y", None)], inits), name)


p = concat_of_slices("concat_whole", [(0, 2), (2, 5), (5, 1 << 62)], ["batch", 8])
ops, _ = optimized_ops(p, *L2)
check(ops == {"Relu": 1}, f"slices re-assembling x removed: {ops}")
validate_dims(p, 2, [{"batch": 1}, {"batch": 3}], "concat_whole")
p = concat_of_slices("concat_part", [(1, 3), (3, 6)], [2, 8])
ops, _ = optimized_ops(p, *L2)
check(ops == {"Slice": 1, "Relu": 1}, f"adjacent slices merged into one: {ops}")
validate_dims(p, 2, [{}], "concat_part")
p = concat_of_slices("concat_order", [(4, 8), (0, 4)], [2, 8])
ops, _ = optimized_ops(p, *L2)
check(ops == {"Slice": 2, "Concat": 1, "Relu": 1}, f"slices out of order kept: {ops}")
validate_dims(p, 2, [{}], "concat_order")

# Split then Concat of all parts on the same axis -> x.
m = model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1),
           helper.make_node("Concat", ["a", "b", "c"], ["d"], axis=1),
           helper.make_node("Relu", ["d"], ["y"])], [vi("x", [2, 6])], [vi("y", [2, 6])], opset=13)
p = save(m, "split_concat")
ops, _ = optimized_ops(p, *L2)
check(ops == {"Relu": 1}, f"split/concat removed: {ops}")
validate_dims(p, 2, [{}], "split_concat")

finish("test_basic_passes")
