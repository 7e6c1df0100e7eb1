"""Float reductions against NumPy in double: every Reduce* kind over axes that form one block of
the input (the contiguous paths: whole rows in 8 lanes, four rows side by side, runs of
columns longer than one pass) and over axes that do not (the general walk), with dims of size
1 inside and around the block, keepdims 0 and 1, row lengths that leave tails, a NaN, and an
empty reduced axis."""
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

finish("test_reduce_paths")
