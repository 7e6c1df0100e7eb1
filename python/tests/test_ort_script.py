"""A script written for onnxruntime runs unchanged with `import kiln as onnxruntime`: the part
below the marker is plain ONNX Runtime API usage; its outputs are checked against `kiln run`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kt  # noqa: E402
from kiln_cli import kiln_run_outputs  # noqa: E402

import kiln as onnxruntime  # noqa: E402

# ---- written for onnxruntime ----
import numpy as np  # noqa: E402

opts = onnxruntime.SessionOptions()
opts.intra_op_num_threads = 2
opts.inter_op_num_threads = 1
opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
opts.log_severity_level = 3
opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
sess = onnxruntime.InferenceSession(kt.TINY_CNN, sess_options=opts, providers=onnxruntime.get_available_providers())
feeds = {}
for inp in sess.get_inputs():
    shape = [d if isinstance(d, int) else 2 for d in inp.shape]
    assert inp.type == "tensor(float)"
    feeds[inp.name] = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
out_names = [o.name for o in sess.get_outputs()]
results = sess.run(out_names, feeds)
results_all = sess.run(None, feeds, onnxruntime.RunOptions())
print(onnxruntime.get_device(), sess.get_providers(), [r.shape for r in results])
# ---- end ----

want = kiln_run_outputs(kt.TINY_CNN, feeds)
kt.check(len(results) == len(want), "output count")
for r, a, w in zip(results, results_all, want):
    kt.check(np.allclose(r, w, atol=1e-4) and np.array_equal(r, a), "outputs match kiln run within 1e-4")

# bench models, when bench/make_models.py has made them
bench = os.path.join(kt.ROOT, "bench", "models")
for name in sorted(os.listdir(bench)) if os.path.isdir(bench) else []:
    if not name.endswith(".onnx") or os.path.getsize(os.path.join(bench, name)) > 50 << 20:
        continue
    path = os.path.join(bench, name)
    sess = onnxruntime.InferenceSession(path)
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        dt = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}.get(inp.type)
        if dt is None:
            feeds = None
            break
        feeds[inp.name] = (rng.standard_normal(shape) if dt is np.float32 else rng.integers(0, 4, shape)).astype(dt)
    if feeds is None:
        continue
    got = sess.run(None, feeds)
    want = kiln_run_outputs(path, feeds)
    kt.check(all(np.allclose(g, w, atol=1e-4) for g, w in zip(got, want)), "bench model %s" % name)
    print("bench model %s: %d outputs agree" % (name, len(got)))
kt.finish("test_ort_script")
