"""A script written for onnxruntime runs unchanged with `import kiln as onnxruntime`.

`ort_script` below uses only ONNX Runtime's Python API. It runs here on kiln, on tiny_cnn and on
bench models made by bench/make_models.py (the cheap ones, into a temporary folder), and its
outputs are compared within 1e-4 with ONNX Runtime's own (onnxruntime-node through
bench/peer/ort_run.js) where that peer is installed, else with `kiln run`'s."""
import glob
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kt  # noqa: E402
from kiln_cli import kiln_run_outputs  # noqa: E402

import kiln as onnxruntime  # noqa: E402

BENCH = "squeezenet1_1,bert_encoder,gpt_decoder,mlp_autoencoder,conv_bn_relu,matmul_add_relu,attention,embedding"


# ---- written for onnxruntime ----
def ort_script(onnxruntime, model_path, feeds):
    import numpy as np
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = onnxruntime.InferenceSession(model_path, sess_options=opts,
                                        providers=onnxruntime.get_available_providers())
    inputs = {}
    for inp in sess.get_inputs():
        value = feeds[inp.name]
        assert inp.type.startswith("tensor("), inp.type
        assert len(inp.shape) == value.ndim
        inputs[inp.name] = value
    names = [o.name for o in sess.get_outputs()]
    results = sess.run(names, inputs)
    again = sess.run(None, inputs, onnxruntime.RunOptions())
    assert all(np.array_equal(a, b) for a, b in zip(results, again))
    meta = sess.get_modelmeta()
    return names, results, (meta.producer_name, sess.get_providers(), onnxruntime.get_device())
# ---- end ----


def ort_outputs(model, feeds, names):
    """ONNX Runtime's outputs (onnxruntime-node), or None when the peer is not installed."""
    js = os.path.join(kt.ROOT, "bench", "peer", "ort_run.js")
    if not os.path.isdir(os.path.join(kt.ROOT, "bench", "peer", "node_modules", "onnxruntime-node")):
        return None
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "in"))
        os.makedirs(os.path.join(d, "out"))
        for n, v in feeds.items():
            kt.np.save(os.path.join(d, "in", n + ".npy"), v)
        subprocess.run(["node", js, model, os.path.join(d, "in"), os.path.join(d, "out")], check=True,
                       capture_output=True)
        return [kt.np.load(os.path.join(d, "out", n + ".npy")) for n in names]


def check_model(name, path, feeds):
    names, got, facts = ort_script(onnxruntime, path, feeds)
    kt.check(facts[1] == ["CPUExecutionProvider"] and facts[2] == "CPU", "providers/device %r" % (facts,))
    want, peer = ort_outputs(path, feeds, names), "onnxruntime"
    if want is None:
        want, peer = kiln_run_outputs(path, feeds), "kiln run"
    worst = 0.0
    for g, w in zip(got, want):
        scale = max(1.0, float(kt.np.abs(w).max())) if w.size else 1.0
        worst = max(worst, float(kt.np.abs(g.astype(kt.np.float64) - w).max()) / scale if w.size else 0.0)
    kt.check(len(got) == len(want) and worst <= 1e-4, "%s: %d outputs, max error %.3g relative" % (name, len(got), worst))
    print("%-16s %d outputs, max |kiln - %s| / max(1, |%s|) = %.2g" % (name, len(got), peer, peer, worst))


rng = kt.np.random.default_rng(0)
check_model("tiny_cnn", kt.TINY_CNN, {"image": rng.standard_normal((2, 3, 16, 16)).astype(kt.np.float32)})
with tempfile.TemporaryDirectory() as d:
    r = subprocess.run([sys.executable, os.path.join(kt.ROOT, "bench", "make_models.py"), d, "--only", BENCH],
                       capture_output=True, text=True)
    kt.check(r.returncode == 0, "bench/make_models.py: %s" % r.stderr[-1000:])
    for model in sorted(glob.glob(os.path.join(d, "*", "model.onnx"))):
        mdir = os.path.dirname(model)
        feeds = {os.path.basename(f)[:-4]: kt.np.load(f) for f in glob.glob(os.path.join(mdir, "inputs", "*.npy"))}
        check_model(os.path.basename(mdir), model, feeds)
kt.finish("test_ort_script")
