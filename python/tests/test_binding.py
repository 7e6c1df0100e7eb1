"""kiln's Python binding: outputs against `kiln run`, dtypes, sequences and optionals, errors,
options, threads, cancellation, zero-copy outputs and memory over 10,000 runs."""
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kt  # noqa: E402
from kt import TensorProto, check, helper, np, raises, vi  # noqa: E402

import kiln  # noqa: E402
from kiln_cli import kiln_run_outputs  # noqa: E402


def test_against_cli():
    rng = np.random.default_rng(1)
    s = kiln.InferenceSession(kt.TINY_CNN, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        got = s.run(None, {"image": x})
        want = kiln_run_outputs(kt.TINY_CNN, {"image": x})
        check(len(got) == len(want) == 1, "tiny_cnn output count")
        check(np.array_equal(got[0], want[0]), "tiny_cnn batch %d equals kiln run" % batch)
    # a model made with onnx.helper: MatMul + Add + Tanh at levels 0 and 2
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 5], rng.standard_normal(20).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [5], rng.standard_normal(5).astype(np.float32))
    m = kt.model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
                  helper.make_node("Tanh", ["a"], ["y"])],
                 [vi("x", TensorProto.FLOAT, ["N", 4])], [vi("y", TensorProto.FLOAT, ["N", 5])], initializer=[w, b])
    with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
        f.write(m)
        f.flush()
        x = rng.standard_normal((6, 4)).astype(np.float32)
        want = kiln_run_outputs(f.name, {"x": x})[0]
        for level in (kiln.GraphOptimizationLevel.ORT_DISABLE_ALL, kiln.GraphOptimizationLevel.ORT_ENABLE_ALL):
            so = kiln.SessionOptions()
            so.graph_optimization_level = level
            got = kiln.InferenceSession(f.name, so).run(["y"], {"x": x})[0]
            check(np.allclose(got, want, atol=1e-6), "matmul model at level %d" % level)
        ref = np.tanh(x @ kt.onnx.numpy_helper.to_array(w) + kt.onnx.numpy_helper.to_array(b))
        check(np.allclose(want, ref, atol=1e-5), "matmul model against numpy")
        got = kiln.InferenceSession(m).run(None, {"x": x})[0]  # from bytes
        check(np.allclose(got, want, atol=1e-6), "session from bytes")


def test_io_info_and_meta():
    m = kt.model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.INT64, ["batch", 3, None])],
                 [vi("y", TensorProto.INT64, None)], doc_string="graph doc")
    s = kiln.InferenceSession(m)
    i = s.get_inputs()[0]
    check(i.name == "x" and i.type == "tensor(int64)", "input name/type: %r" % i)
    check(i.shape == ["batch", 3, None], "input shape %r" % (i.shape,))
    meta = s.get_modelmeta()
    check(meta.producer_name == "kt" and meta.graph_name == "g" and meta.graph_description == "graph doc",
          "metadata %r" % vars(meta))
    check(s.get_providers() == ["CPUExecutionProvider"] and kiln.get_device() == "CPU", "providers/device")
    check(kiln.get_available_providers() == ["CPUExecutionProvider"], "available providers")


def test_dtypes():
    # every numeric dtype through Identity, zero-copy output owning kiln's memory
    for elem, dt in [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.INT8, np.int8),
                     (TensorProto.UINT8, np.uint8), (TensorProto.INT16, np.int16), (TensorProto.UINT16, np.uint16),
                     (TensorProto.INT32, np.int32), (TensorProto.UINT32, np.uint32), (TensorProto.INT64, np.int64),
                     (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_), (TensorProto.FLOAT16, np.float16)]:
        s = kiln.InferenceSession(kt.model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", elem, [2, 3])],
                                           [vi("y", elem, [2, 3])]))
        x = (np.arange(6).reshape(2, 3) % 2 == 1) if dt is np.bool_ else np.arange(6, dtype=dt).reshape(2, 3)
        y = s.run(None, {"x": x})[0]
        check(y.dtype == dt and np.array_equal(y, x), "identity %s" % np.dtype(dt).name)
        check(y.base is not None and type(y.base).__name__ == "PyCapsule", "output owns kiln's memory (%s)" % dt)
        check(not np.shares_memory(x, y), "output is not the input (%s)" % dt)
        # lists and scalars are converted to the model's type
        y = s.run(None, {"x": x.tolist()})[0]
        check(y.dtype == dt and np.array_equal(y, x), "list input %s" % np.dtype(dt).name)
    # no silent cast: wrong numpy dtype raises
    s = kiln.InferenceSession(kt.model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, [2])],
                                       [vi("y", TensorProto.FLOAT, [2])]))
    raises(lambda: s.run(None, {"x": np.zeros(2, np.float64)}), kiln.InvalidArgument,
           "Unexpected input data type. Actual: (tensor(double)) , expected: (tensor(float))", "double for float")
    check(s.run(None, {"x": [1, 2]})[0].dtype == np.float32, "int list to float")
    # non-contiguous input (a layout copy, not a cast)
    x = np.arange(4, dtype=np.float32)[::2]
    check(np.array_equal(s.run(None, {"x": x})[0], x), "strided input")
    xb = np.array([1.5, -2], dtype=">f4")
    check(np.array_equal(s.run(None, {"x": xb})[0], xb.astype(np.float32)), "big-endian float input")
    # scalar
    s0 = kiln.InferenceSession(kt.model([helper.make_node("Neg", ["x"], ["y"])], [vi("x", TensorProto.INT32, [])],
                                        [vi("y", TensorProto.INT32, [])]))
    y = s0.run(None, {"x": 5})[0]
    check(y.shape == () and y == -5 and y.dtype == np.int32, "scalar input %r" % y)
    # strings
    ss = kiln.InferenceSession(kt.model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.STRING, [3])],
                                        [vi("y", TensorProto.STRING, [3])]))
    for x in (np.array(["a", "héllo", ""], dtype=object), np.array(["a", "héllo", ""]), ["a", "héllo", ""]):
        y = ss.run(None, {"x": x})[0]
        check(y.dtype == object and list(y) == ["a", "héllo", ""], "strings %r" % (y,))
    # bfloat16 as uint16 bits: Cast float -> bfloat16 -> float
    sb = kiln.InferenceSession(kt.model([helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
                                         helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)],
                                        [vi("x", TensorProto.FLOAT, [3])],
                                        [vi("b", TensorProto.BFLOAT16, [3]), vi("y", TensorProto.FLOAT, [3])]))
    b, y = sb.run(None, {"x": np.array([1.0, -2.5, 3.14159], np.float32)})
    check(b.dtype == np.uint16 and list(b) == [0x3F80, 0xC020, 0x4049], "bfloat16 bits %r" % [hex(v) for v in b])
    check(np.allclose(y, [1.0, -2.5, 3.140625]), "bfloat16 values %r" % y)
    sb2 = kiln.InferenceSession(kt.model([helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)],
                                         [vi("b", TensorProto.BFLOAT16, [2])], [vi("y", TensorProto.FLOAT, [2])]))
    y = sb2.run(None, {"b": np.array([0x3F80, 0xC020], np.uint16)})[0]
    check(list(y) == [1.0, -2.5], "bfloat16 input as uint16 %r" % y)
    check(sb2.get_inputs()[0].type == "tensor(bfloat16)", "bfloat16 type name")


def test_sequences_optionals():
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    s = kiln.InferenceSession(kt.model([helper.make_node("SequenceConstruct", ["a", "b"], ["s"])],
                                       [vi("a", TensorProto.FLOAT, [2]), vi("b", TensorProto.FLOAT, [3])],
                                       [helper.make_value_info("s", seq_t)]))
    check(s.get_outputs()[0].type == "seq(tensor(float))", "sequence type %s" % s.get_outputs()[0].type)
    out = s.run(None, {"a": np.ones(2, np.float32), "b": np.arange(3, dtype=np.float32)})[0]
    check(isinstance(out, list) and len(out) == 2 and list(out[1]) == [0, 1, 2], "sequence output %r" % (out,))
    s2 = kiln.InferenceSession(kt.model([helper.make_node("SequenceLength", ["s"], ["n"]),
                                         helper.make_node("SequenceAt", ["s", "i"], ["t"])],
                                        [helper.make_value_info("s", seq_t), vi("i", TensorProto.INT64, [])],
                                        [vi("n", TensorProto.INT64, []), vi("t", TensorProto.FLOAT, None)]))
    n, t = s2.run(None, {"s": [np.zeros(2, np.float32), np.full(4, 7, np.float32)], "i": np.array(1)})
    check(n == 2 and list(t) == [7, 7, 7, 7], "sequence input: %r %r" % (n, t))
    raises(lambda: s2.run(None, {"s": np.zeros(2, np.float32), "i": np.array(1)}), kiln.InvalidArgument,
           "sequence", "array for a sequence")
    d = "/usr/share/libonnx-testdata/data/node/"
    so = kiln.InferenceSession(d + "test_optional_has_element/model.onnx")
    check(so.get_inputs()[0].type == "optional(tensor(float))", "optional type %s" % so.get_inputs()[0].type)
    check(so.run(None, {"optional_input": np.ones(4, np.float32)})[0] == True, "optional with a value")  # noqa: E712
    check(so.run(None, {"optional_input": None})[0] == False, "empty optional")  # noqa: E712
    check(so.run(None, {})[0] == False, "optional not given")  # noqa: E712
    sq = kiln.InferenceSession(d + "test_optional_get_element_sequence/model.onnx")
    check(sq.get_inputs()[0].type == "optional(seq(tensor(int32)))", "optional seq type %s" % sq.get_inputs()[0].type)
    out = sq.run(None, {"optional_input": [np.arange(4, dtype=np.int32)]})[0]
    check(isinstance(out, list) and list(out[0]) == [0, 1, 2, 3], "optional sequence %r" % (out,))


def test_errors_and_options():
    s = kiln.InferenceSession(kt.TINY_CNN)
    x = np.zeros((1, 3, 16, 16), np.float32)
    raises(lambda: s.run(None, {"imag": x}), kiln.InvalidArgument, "Invalid input name: imag", "unknown input")
    raises(lambda: s.run(None, {}), ValueError, "Required inputs (['image']) are missing", "missing input")
    raises(lambda: s.run(None, {"image": x[0]}), kiln.InvalidArgument, "Invalid rank for input: image Got: 3 Expected: 4",
           "rank")
    raises(lambda: s.run(None, {"image": x[:, :2]}), kiln.InvalidArgument, "index: 1 Got: 2 Expected: 3", "dims")
    raises(lambda: s.run(["nope"], {"image": x}), kiln.InvalidArgument, "no output named 'nope'", "unknown output")
    raises(lambda: s.run(None, [x]), TypeError, "input_feed must be a dict", "feed not a dict")
    check(s.run((n for n in ["probs", "probs"]), {"image": x})[1].shape == (1, 10), "output names from a generator")
    raises(lambda: kiln._kiln.Session.__new__(kiln._kiln.Session).info(), RuntimeError, "not created", "no session")
    raises(lambda: kiln.InferenceSession("/nonexistent.onnx"), kiln.NoSuchFile, "nonexistent.onnx", "missing file")
    raises(lambda: kiln.InferenceSession(b"\x08\x07garbage"), kiln.InvalidProtobuf, "protobuf", "garbage bytes")
    bad = kt.model([helper.make_node("NoSuchOp", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, [1])],
                   [vi("y", TensorProto.FLOAT, [1])])
    e = raises(lambda: kiln.InferenceSession(bad), kiln.KilnError, "NoSuchOp", "unknown op")
    check(isinstance(e, (kiln.NotImplemented, kiln.InvalidGraph)), "unknown op class %s" % type(e).__name__)
    from kiln.capi.onnxruntime_pybind11_state import InvalidArgument
    check(InvalidArgument is kiln.InvalidArgument, "capi exception path")
    # free dimension override, threads, profiling, optimized model file
    so = kiln.SessionOptions()
    so.add_free_dimension_override_by_name("N", 2)
    so.intra_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.optimized_model_filepath = os.path.join(d, "opt.onnx")
        so.profile_file_prefix = os.path.join(d, "prof")
        s2 = kiln.InferenceSession(kt.TINY_CNN, so)
        check(s2.get_inputs()[0].shape == [2, 3, 16, 16], "override shape %r" % s2.get_inputs()[0].shape)
        check(s2.kiln_info()["threads"] == 1, "intra_op_num_threads")
        raises(lambda: s2.run(None, {"image": x}), kiln.InvalidArgument, "index: 0 Got: 1 Expected: 2", "override enforced")
        s2.run(None, {"image": np.zeros((2, 3, 16, 16), np.float32)})
        check(os.path.getsize(so.optimized_model_filepath) > 0, "optimized_model_filepath written")
        prof = s2.end_profiling()
        import json
        ev = json.load(open(prof))
        check(len(ev) > 0 and all(e["ph"] == "X" and e["args"]["runs"] == 1 for e in ev), "chrome trace %s" % prof)
        x2 = np.zeros((2, 3, 16, 16), np.float32)
        check(kiln.InferenceSession(so.optimized_model_filepath).run(None, {"image": x2})[0].shape == (2, 10),
              "optimized model (N fixed to 2) loads")
    so = kiln.SessionOptions()
    so.add_free_dimension_override_by_name("M", 2)
    raises(lambda: kiln.InferenceSession(kt.TINY_CNN, so), kiln.InvalidArgument, "no input has a dim named 'M'",
           "unknown override")
    # plugins through register_custom_ops_library
    pdir = os.environ.get("KILN_PLUGIN_DIR", os.path.join(kt.ROOT, "build", "plugins"))
    plug = os.path.join(pdir, "fused_gather_add_relu.so")
    check(os.path.exists(plug) or "KILN_PLUGIN_DIR" not in os.environ, "plugin %s built" % plug)
    if os.path.exists(plug):
        so = kiln.SessionOptions()
        so.register_custom_ops_library(plug)
        kiln.InferenceSession(kt.TINY_CNN, so).run(None, {"image": x})
        so.register_custom_ops_library(os.path.join(pdir, "missing.so"))
        raises(lambda: kiln.InferenceSession(kt.TINY_CNN, so), kiln.KilnError, "missing.so", "missing plugin")
    # cancellation
    ro = kiln.RunOptions()
    ro.terminate = True
    check(ro.terminate is True, "terminate flag")
    raises(lambda: s.run(None, {"image": x}, ro), kiln.Fail, "terminate flag", "terminated run")
    ro.terminate = False
    check(s.run(None, {"image": x}, ro)[0].shape == (1, 10), "run after terminate cleared")
    # a time limit: a Loop of 2^62 iterations raises Fail naming the limit; 3 iterations run
    body = helper.make_graph([helper.make_node("Identity", ["x_in"], ["x_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
                             "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("x_in", TensorProto.FLOAT, [1])],
                             [vi("c_out", TensorProto.BOOL, []), vi("x_out", TensorProto.FLOAT, [1])])
    g = helper.make_graph([helper.make_node("Loop", ["M", "", "X"], ["Y"], body=body)], "loop",
                          [vi("X", TensorProto.FLOAT, [1]), vi("M", TensorProto.INT64, [])], [vi("Y", TensorProto.FLOAT, [1])])
    loop = kiln.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    ro = kiln.RunOptions()
    ro.timeout_ms = 100
    check(ro.timeout_ms == 100, "timeout_ms kept")
    one = np.ones(1, np.float32)
    check(loop.run(None, {"X": one, "M": np.array(3, np.int64)}, ro)[0][0] == 1.0, "a short loop runs under the limit")
    raises(lambda: loop.run(None, {"X": one, "M": np.array(2**62, np.int64)}, ro), kiln.Fail, "time limit of 100 ms",
           "a loop past timeout_ms")
    # log_severity_level: 1 (info) shows kiln's load diagnostics on stderr, 2 (default) does not
    code = ("import kiln, sys; so = kiln.SessionOptions(); so.log_severity_level = int(sys.argv[1]); "
            "kiln.InferenceSession(%r, so)" % kt.TINY_CNN)
    for level, shown in ((1, True), (2, False)):
        r = subprocess.run([sys.executable, "-c", code, str(level)], capture_output=True, text=True)
        check(r.returncode == 0 and ("kiln: model compiled" in r.stderr) == shown,
              "log_severity_level %d: %r" % (level, r.stderr[-300:]))
    # providers
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        kiln.InferenceSession(kt.TINY_CNN, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        check(any("CUDAExecutionProvider" in str(x.message) for x in w), "unavailable provider warns")


def test_threads():
    s = kiln.InferenceSession(kt.TINY_CNN)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(8)]
    want = [s.run(None, {"image": x})[0] for x in xs]
    bad = []

    def work(k):
        for r in range(100):
            i = (k + r) % len(xs)
            if not np.array_equal(s.run(None, {"image": xs[i]})[0], want[i]):
                bad.append((k, r))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not bad, "concurrent runs agree (%d mismatches)" % len(bad))


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_memory():
    s = kiln.InferenceSession(kt.model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, [1, 64])],
                                       [vi("y", TensorProto.FLOAT, [1, 64])]))
    x = np.ones((1, 64), np.float32)
    for _ in range(1000):
        s.run(None, {"x": x})
    before = rss_kb()
    for _ in range(10000):
        y = s.run(None, {"x": x})[0]
        y = s.run(["y"], {"x": x.tolist()})[0]
    after = rss_kb()
    check(after - before < 1024, "RSS grew %d KiB over 20,000 runs" % (after - before))
    check(float(y.sum()) == 64.0, "last output")


for t in (test_against_cli, test_io_info_and_meta, test_dtypes, test_sequences_optionals, test_errors_and_options,
          test_threads, test_memory):
    t()
kt.finish("test_binding")
