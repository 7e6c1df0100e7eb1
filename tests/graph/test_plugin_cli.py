"""Plugins through the command line: --plugin on every command, the example plugins against
numpy, determinism across thread counts, the fusion pattern where it must and must not apply,
fallback, and each broken plugin refused with its message and exit code 1."""
import os

from kilntest import *
from kilntest import KILN
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(os.path.dirname(os.path.abspath(KILN)), "plugins")
MODELS = os.path.join(ROOT, "examples", "plugins", "models")
EDG = os.path.join(PLUGINS, "embedding_dense_grad.so")
GAR = os.path.join(PLUGINS, "fused_gather_add_relu.so")


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def run_outputs(model, *args, env=None):
    """kiln run MODEL ARGS --output-dir D; returns (rc, text, [arrays])."""
    d = os.path.join(TMP, "out_%d" % run_outputs.n)
    run_outputs.n += 1
    rc, text = kiln("run", model, "--output-dir", d, "-q", *args, env=env)
    outs = []
    i = 0
    while rc == 0 and os.path.exists(os.path.join(d, "output_%d.pb" % i)):
        outs.append(load_pb(os.path.join(d, "output_%d.pb" % i)))
        i += 1
    return rc, text, outs


run_outputs.n = 0

# ---- EmbeddingDenseGrad: numpy reference, any thread count, bitwise ---------------------------
edg_model = os.path.join(MODELS, "embedding_dense_grad.onnx")
edg_in = ["--input", "grad=" + os.path.join(MODELS, "embedding_dense_grad", "grad.npy"),
          "--input", "indices=" + os.path.join(MODELS, "embedding_dense_grad", "indices.npy")]
want = [np.load(os.path.join(MODELS, "embedding_dense_grad", n)) for n in ("table.npy", "table_scaled.npy")]
first = None
for threads in ("1", "2", "3", "7"):
    rc, text, outs = run_outputs(edg_model, "--plugin", EDG, "--threads", threads, *edg_in)
    check(rc == 0 and len(outs) == 2, f"EmbeddingDenseGrad runs at {threads} threads: {text}")
    if rc == 0 and len(outs) == 2:
        for o, w in zip(outs, want):
            check(o.shape == w.shape and np.allclose(o, w, rtol=0, atol=1e-6), f"matches numpy at {threads} threads")
        if first is None:
            first = outs
        else:
            check(all(np.array_equal(a, b) for a, b in zip(first, outs)), f"bitwise equal at {threads} threads")

# larger, with many repeats: still deterministic across thread counts
rng = np.random.default_rng(3)
big_grad = rng.standard_normal((64, 128, 4)).astype(np.float32)
big_idx = rng.integers(0, 10, (64, 128)).astype(np.int64)  # num_weights is 10: heavy repetition
np.save(os.path.join(TMP, "g.npy"), big_grad)
np.save(os.path.join(TMP, "i.npy"), big_idx)
big_in = ["--input", "grad=" + os.path.join(TMP, "g.npy"), "--input", "indices=" + os.path.join(TMP, "i.npy")]
res = [run_outputs(edg_model, "--plugin", EDG, "--threads", t, *big_in) for t in ("1", "4")]
check(all(r[0] == 0 for r in res), "large EmbeddingDenseGrad runs: " + res[0][1] + res[1][1])
if all(r[0] == 0 for r in res):
    check(all(np.array_equal(a, b) for a, b in zip(res[0][2], res[1][2])), "large: bitwise equal at 1 and 4 threads")
    ref = np.zeros((10, 4), np.float32)
    keep = big_idx.reshape(-1) != 0
    np.add.at(ref, big_idx.reshape(-1)[keep], big_grad.reshape(-1, 4)[keep])
    check(np.allclose(res[0][2][0], ref, rtol=1e-5, atol=1e-4), "large: matches numpy")

# the plugin is needed, and named in the error
rc, text = kiln("run", edg_model, *edg_in)
check(rc == 1 and "unknown operator 'EmbeddingDenseGrad' in domain 'my.ops'" in text and "--plugin" in text,
      "without the plugin: " + text)
# the environment variable works like --plugin
rc, text, outs = run_outputs(edg_model, *edg_in, env={"KILN_PLUGINS": EDG})
check(rc == 0 and len(outs) == 2, "KILN_PLUGINS: " + text)

# ---- FusedGatherAddRelu: the pattern, numpy, validate, fallback --------------------------------
gar_model = os.path.join(MODELS, "gather_add_relu.onnx")
gar_in = ["--input", "indices=" + os.path.join(MODELS, "gather_add_relu", "indices.npy")]
gwant = [np.load(os.path.join(MODELS, "gather_add_relu", n)) for n in ("out.npy", "out_bias.npy")]
for level in ("0", "2"):
    for extra in ([], ["--plugin", GAR]):
        rc, text, outs = run_outputs(gar_model, "--level", level, *extra, *gar_in)
        check(rc == 0 and len(outs) == 2 and all(np.array_equal(o, w) for o, w in zip(outs, gwant)),
              f"gather_add_relu level {level} {extra}: {text}")
ops, text = optimized_ops(gar_model, "--plugin", GAR)
check(ops == {"FusedGatherAddRelu": 2}, f"both chains fused: {ops} {text}")
check("plugin_patterns" in text, "the plugin pass is listed: " + text)
# Without the plugin's pattern, kiln's own embedding fusion may take the chain; the plugin op
# must not appear.
ops, text = optimized_ops(gar_model, "--disable", "fuse_embedding,fuse_elementwise")
check(ops == {"Gather": 2, "Add": 2, "Relu": 2}, f"no plugin, no fusion: {ops}")
ops, text = optimized_ops(gar_model, "--plugin", GAR, "--disable", "plugin_patterns,fuse_embedding,fuse_elementwise")
check(ops == {"Gather": 2, "Add": 2, "Relu": 2}, f"--disable plugin_patterns: {ops} {text}")
ops, text = optimized_ops(gar_model)
check(ops is not None and "FusedGatherAddRelu" not in ops, f"no plugin, no plugin op: {ops}")
ok, text = validate(gar_model, "--plugin", GAR)
check(ok and "FusedGatherAddRelu" not in text, "validate with the plugin: " + text)
rc, text = kiln("validate", gar_model, "--plugin", GAR, env={"KILN_FUSION_FAIL": "FusedGatherAddRelu"})
check(rc == 0 and "forced to fail" in text, "forced fallback validates: " + text)

rng = np.random.default_rng(1)
data = const("data", rng.standard_normal((30, 8)).astype(np.float32))


def gar_chain(other_name, idx_shape, other_shape, other_init=None, axis=0, extra_nodes=(), extra_outputs=()):
    nodes = [helper.make_node("Gather", ["data", "idx"], ["g"], axis=axis),
             helper.make_node("Add", ["g", other_name], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]), *extra_nodes]
    inputs = [vi("idx", idx_shape, TensorProto.INT64)]
    inits = [data]
    if other_init is not None:
        inits.append(other_init)
    else:
        inputs.append(vi(other_name, other_shape))
    return model(nodes, inputs, [vi("y", None), *extra_outputs], inits)


# must not fuse: the Add raises the rank, Gather over axis 1, the gathered value read twice
m = gar_chain("o", [4, 5], None, const("o", rng.standard_normal((2, 1, 1, 8)).astype(np.float32)))
ops, _ = optimized_ops(save(m, "gar_rank_up"), "--plugin", GAR)
check(ops is not None and "FusedGatherAddRelu" not in ops, f"rank-raising Add not fused: {ops}")
data8 = const("data", rng.standard_normal((8, 8)).astype(np.float32))
m = model([helper.make_node("Gather", ["data", "idx"], ["g"], axis=1),
           helper.make_node("Add", ["g", "o"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
          [vi("idx", [3], TensorProto.INT64)], [vi("y", None)],
          [data8, const("o", np.ones(3, np.float32))])
ops, _ = optimized_ops(save(m, "gar_axis1"), "--plugin", GAR)
check(ops is not None and "FusedGatherAddRelu" not in ops, f"axis 1 not fused: {ops}")
m = gar_chain("o", [4, 5], None, const("o", np.ones(8, np.float32)),
              extra_nodes=[helper.make_node("Sigmoid", ["g"], ["z"])], extra_outputs=[vi("z", None)])
ops, _ = optimized_ops(save(m, "gar_fanout"), "--plugin", GAR)
check(ops is not None and "FusedGatherAddRelu" not in ops, f"fan-out not fused: {ops}")

# dynamic shapes: fused at load, and a run whose shapes the kernel cannot take falls back
m = gar_chain("o", ["B", "S"], ["N", 8])
p = save(m, "gar_dynamic")
ops, text = optimized_ops(p, "--plugin", GAR)
check(ops == {"FusedGatherAddRelu": 1}, f"symbolic dims: fused, checked at run time: {ops} {text}")
idx = rng.integers(0, 30, (2, 1)).astype(np.int64)
oth = rng.standard_normal((5, 8)).astype(np.float32)  # [2,1,8] + [5,8] grows to [2,5,8]
np.save(os.path.join(TMP, "idx.npy"), idx)
np.save(os.path.join(TMP, "oth.npy"), oth)
rc, text, outs = run_outputs(p, "--plugin", GAR, "--input", "idx=" + os.path.join(TMP, "idx.npy"),
                             "--input", "o=" + os.path.join(TMP, "oth.npy"))
ref = np.maximum(numpy_helper.to_array(data)[idx] + oth, 0)
check(rc == 0 and len(outs) == 1 and outs[0].shape == (2, 5, 8) and np.allclose(outs[0], ref),
      "kernel refuses the growing broadcast, the chain runs: " + text)
check("does not broadcast" in text and "running the chain it replaced" in text, "fallback reported: " + text)

# ---- broken plugins: exit code 1 and a message naming the plugin and the problem --------------
text_so = os.path.join(TMP, "text.so")
with open(text_so, "w") as f:
    f.write("not a library\n")
broken = [
    (os.path.join(TMP, "missing.so"), "cannot open it: No such file or directory"),
    (text_so, "is not a shared library kiln can load"),
    (os.path.join(PLUGINS, "no_entry.so"), "does not export the entry point kiln_register_ops"),
    (os.path.join(PLUGINS, "bad_abi_newer.so"), "ABI version mismatch"),
    (os.path.join(PLUGINS, "bad_abi_refused.so"), "ABI version mismatch: the plugin does not accept"),
    (os.path.join(PLUGINS, "bad_dup_builtin.so"), "a plugin may not override a built-in op"),
    (os.path.join(PLUGINS, "bad_dup_self.so"), "registered twice by this plugin"),
    (os.path.join(PLUGINS, "bad_no_compute.so"), "invalid description of op 'bad.ops::Copy': compute is NULL"),
    (os.path.join(PLUGINS, "bad_bad_pattern_op.so"), "invalid fusion pattern 'abs_neg'"),
    (os.path.join(PLUGINS, "bad_register_fails.so"), "cannot find its license file"),
]
for path, needle in broken:
    for cmd in (["run", gar_model], ["info", gar_model], ["validate", gar_model],
                ["optimize", gar_model, os.path.join(TMP, "o.onnx")]):
        rc, text = kiln(*cmd, "--plugin", path)
        check(rc == 1 and needle in text and "plugin '" + path + "'" in text and "Traceback" not in text,
              f"{cmd[0]} --plugin {os.path.basename(path)}: rc {rc}: {text}")
rc, text = kiln("run", gar_model, "--plugin", GAR, "--plugin", os.path.join(PLUGINS, "bad_dup_example.so"))
check(rc == 1 and "already registered by plugin '" + GAR + "'" in text, "duplicate across plugins: " + text)
rc, text = kiln("run", gar_model, "--plugin")
check(rc == 2 and "--plugin expects a path" in text, "--plugin without a path is a usage error: " + text)
rc, text = kiln("--help")
check(rc == 0 and "--plugin PATH.so" in text, "kiln --help mentions --plugin: " + text)

finish("test_plugin_cli")
