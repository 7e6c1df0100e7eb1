"""Float reductions against NumPy in double: every Reduce* kind over axes that form one block of
the input (the contiguous paths: whole rows in 8 lanes, four rows side by side, runs of
columns longer than one pass) and over axes that do not (the general walk), with dims of size
1 inside and around the block, keepdims 0 and 1, row lengths that leave tails, a NaN, and an
empty reduced axis; row sums (four rows at a time in SIMD) byte-equal at every ISA level."""
import os

import onnx

from kilntest import *

rng = np.random.default_rng(5)
KINDS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


def ref(kind, x, axes, keep):
    x = x.astype(np.float64)
    ax = tuple(axes) if axes else None
    with np.errstate(all="ignore"):
        if kind == "ReduceSum":
            r = x.sum(ax, keepdims=keep)
        elif kind == "ReduceMean":
            r = x.mean(ax, keepdims=keep)
        elif kind == "ReduceMax":
            r = x.max(ax, keepdims=keep)
        elif kind == "ReduceMin":
            r = x.min(ax, keepdims=keep)
        elif kind == "ReduceProd":
            r = x.prod(ax, keepdims=keep)
        elif kind == "ReduceSumSquare":
            r = (x * x).sum(ax, keepdims=keep)
        elif kind == "ReduceL1":
            r = np.abs(x).sum(ax, keepdims=keep)
        elif kind == "ReduceL2":
            r = np.sqrt((x * x).sum(ax, keepdims=keep))
        elif kind == "ReduceLogSum":
            r = np.log(x.sum(ax, keepdims=keep))
        else:
            m = x.max(ax, keepdims=True)
            r = np.log(np.exp(x - m).sum(ax, keepdims=True)) + m
            if not keep:
                r = r.reshape(np.asarray(x.sum(ax)).shape)
    return np.asarray(r)


def run_case(tag, shape, axes, keep, kinds=KINDS, nan=False, prod_scale=True):
    x = rng.standard_normal(shape).astype(np.float32)
    if nan and x.size:
        x.reshape(-1)[x.size // 3] = np.nan
    xp = (1.0 + 0.01 * x).astype(np.float32) if prod_scale else x  # products that stay finite
    xpos = np.abs(x) + 0.5                                            # LogSum of positive sums
    inits = [const("axes", np.array(axes, np.int64))] if axes else []
    nodes, outs = [], []
    for k in kinds:
        src = {"ReduceProd": "xp", "ReduceLogSum": "xpos"}.get(k, "x")
        ins = [src, "axes"] if axes else [src]
        nodes.append(helper.make_node(k, ins, [f"y_{k}"], keepdims=int(keep)))
        outs.append(vi(f"y_{k}", None))
    path = save(model(nodes, [vi("x", list(shape)), vi("xp", list(shape)), vi("xpos", list(shape))],
                      outs, inits, opset=18), tag)
    args = ["run", path, "--quiet", "--output-dir", os.path.join(TMP, tag)]
    for name, arr in (("x", x), ("xp", xp), ("xpos", xpos)):
        f = os.path.join(TMP, f"{tag}_{name}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    rc, text = kiln(*args)
    check(rc == 0, f"{tag}: kiln run failed: {text}")
    if rc != 0:
        return
    for i, k in enumerate(kinds):
        src = {"ReduceProd": xp, "ReduceLogSum": xpos}.get(k, x)
        want = ref(k, src, axes, keep)
        got = numpy_helper.to_array(onnx.load_tensor(os.path.join(TMP, tag, f"output_{i}.pb")))
        ok = got.shape == want.shape and np.allclose(got, want, rtol=2e-6, atol=1e-5, equal_nan=True)
        if ok and k in ("ReduceMax", "ReduceMin"):  # exact: a float32 input's own value
            ok = np.array_equal(got, want.astype(np.float32), equal_nan=True)
        check(ok, f"{tag} {k} {shape} axes {axes} keepdims {keep}: got {got.reshape(-1)[:4]} "
                  f"want {want.reshape(-1)[:4]}")


run_case("rows", (5, 37, 2501), [2], True)            # whole rows: 185 rows (4 + 1 left), tail 5
run_case("rows_k0", (5, 37, 2501), [-1], False)
run_case("all", (3, 7, 1001), [], True)               # everything: one row of 21021
run_case("all_axes", (3, 7, 1001), [0, 1, 2], False)
run_case("first", (5, 3, 2100), [0], True)            # columns: 6300 per pass of 2048 and a rest
run_case("middle", (6, 37, 2100), [1], False)
run_case("two_middle", (4, 3, 5, 700), [1, 2], True)  # a block of two axes
run_case("ones", (3, 1, 7, 1, 9), [1, 2, 3], True)    # dims of 1 inside and around the block
run_case("ones_out", (1, 6, 1, 50), [1], False)
run_case("not_block", (4, 5, 6, 7), [0, 2], True)     # kept axes between: the general walk
run_case("not_block2", (4, 5, 6, 7), [1, 3], False)
run_case("nan_rows", (9, 40), [1], True, nan=True)
run_case("nan_cols", (9, 40), [0], True, nan=True)
run_case("empty_axis", (3, 0, 4), [1], True, kinds=["ReduceSum", "ReduceProd", "ReduceL1"])

# Row sums: four rows at a time in SIMD where the CPU has it, the rest in C, the same bytes at
# every ISA level (KILN_ISA), in the documented order: lane l of 8 adds the values i + l, the
# tail goes to lane 0, then the lanes in order, in double. Row 0 is built so that another
# order gives another float (2^53 + 1 rounds away in lane 0 before -2^53 cancels it).


def lane_sum(row):
    lanes = [0.0] * 8
    n8 = len(row) // 8 * 8
    for i in range(n8):
        lanes[i % 8] += float(row[i])
    for i in range(n8, len(row)):
        lanes[0] += float(row[i])
    acc = 0.0
    for v in lanes:
        acc += v
    return acc


x = (rng.standard_normal((7, 1003)) * 100).astype(np.float32)
x[0, :] = 0
x[0, 0], x[0, 1], x[0, 2], x[0, 1000] = 2.0 ** 53, 1.0, -(2.0 ** 53), 1.0
xf = os.path.join(TMP, "isa_x.npy")
np.save(xf, x)
nodes = [helper.make_node(k, ["x", "axes"], [f"y{i}"], keepdims=0)
         for i, k in enumerate(["ReduceSum", "ReduceMean", "ReduceLogSum"])]
path = save(model(nodes, [vi("x", [7, 1003])], [vi(f"y{i}", None) for i in range(3)],
                  [const("axes", np.array([1], np.int64))], opset=18), "isa_rows")
outs = {}
for isa in ("scalar", "avx2", "avx512"):
    rc, text = kiln("run", path, "--quiet", "--output-dir", os.path.join(TMP, f"isa_{isa}"),
                    "--input", f"x={xf}", env={"KILN_ISA": isa})
    check(rc == 0, f"row sums at {isa}: {text}")
    if rc == 0:
        outs[isa] = b"".join(open(os.path.join(TMP, f"isa_{isa}", f"output_{i}.pb"), "rb").read()
                             for i in range(3))
check(len(outs) == 3 and len(set(outs.values())) == 1, "row sums differ between ISA levels")
got = numpy_helper.to_array(onnx.load_tensor(os.path.join(TMP, "isa_scalar", "output_0.pb")))
want = np.array([lane_sum(r) for r in x], np.float32)
check(np.array_equal(got, want), f"row sums in lane order: got {got[:2]} want {want[:2]}")
check(np.allclose(got[1:], x[1:].astype(np.float64).sum(1), rtol=1e-6, atol=1e-3), "row sums against NumPy")

finish("test_reduce_paths")
