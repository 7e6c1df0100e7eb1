"""Hostile models against kiln's limits: every class gets exit 1 and a message naming its limit,
within 4 GiB of address space and 20 s (under a sanitizer, which needs a larger address space
than that for its shadow memory, within the time alone); models just inside the limits run and
give the right answer. Usage: test_hostile.py KILN [--sanitized]"""
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_hostile as gen  # noqa: E402

KILN = sys.argv[1]
SANITIZED = "--sanitized" in sys.argv
TMP = tempfile.mkdtemp(prefix="kiln_hostile_")
AS_LIMIT, TIME_LIMIT = 4 << 30, 20
failures = checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("CHECK FAILED:", what)


def limit_as():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run(path, *args):
    t0 = time.monotonic()
    try:
        r = subprocess.run([KILN, "run", path, *args], capture_output=True, text=True, timeout=TIME_LIMIT,
                           preexec_fn=limit_as)
        rc, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        rc, text = "timeout", ""
    return rc, text, time.monotonic() - t0


def refused(name, path, needle, *args):
    rc, text, secs = run(path, *args)
    check(rc == 1 and needle in text and "raise it with the session option" in text,
          f"{name}: expected exit 1 naming {needle}, got {rc} in {secs:.1f} s: {text[-400:]}")
    print(f"{name}: exit {rc} in {secs:.2f} s: {text.strip().splitlines()[-1][:160] if text else ''}")


def runs(name, path, want, *args):
    rc, text, secs = run(path, "--quiet", "--output-dir", os.path.join(TMP, name), *args)
    check(rc == 0, f"{name}: expected to run, got {rc} in {secs:.1f} s: {text[-400:]}")
    if rc == 0 and want is not None:
        import onnx
        from onnx import numpy_helper
        t = onnx.TensorProto()
        with open(os.path.join(TMP, name, "output_0.pb"), "rb") as f:
            t.ParseFromString(f.read())
        got = numpy_helper.to_array(t)
        check(np.allclose(got, want), f"{name}: output {got} != {want}")
    print(f"{name}: exit {rc} in {secs:.2f} s")


def p(name):
    return os.path.join(TMP, name + ".onnx")


def npy(name, arr):
    path = os.path.join(TMP, name + ".npy")
    np.save(path, arr)
    return path


true = "c=" + npy("c", np.array(True))
# subgraph depth: at the default limit (64) it runs; 10,000 deep (once a stack overflow) is refused
runs("deep_if_64", gen.deep_if(p("deep_if_64"), 64), 1.0, "--input", true)
refused("deep_if_10000", gen.deep_if(p("deep_if_10000"), 10000), "max_subgraph_depth")
refused("deep_if_over_set_limit", p("deep_if_64"), "max_subgraph_depth", "--limit", "max_subgraph_depth=10")
refused("deep_type_10000", gen.deep_type(p("deep_type"), 10000), "max_subgraph_depth")
# node count: a long chain runs (nothing recurses per node), one node over the limit is refused
x = "v0=" + npy("x", np.array([-1.0, 2.0], np.float32))
runs("chain_20000", gen.chain(p("chain"), 20000), [0.0, 2.0], "--input", x)
refused("chain_over_set_limit", p("chain"), "max_nodes", "--limit", "max_nodes=19999")
refused("nodes_1000001", gen.chain(p("chain_big"), 1000001, op="Identity"), "max_nodes")
# strings and attributes
refused("string_16MiB_plus_1", gen.big_string(p("big_string"), (16 << 20) + 1), "max_string_bytes")
runs("string_1MiB", gen.big_string(p("string_ok"), 1 << 20), None)
refused("string_over_set_limit", p("string_ok"), "max_string_bytes", "--limit", "max_string_bytes=1000")
refused("ints_64MiB_plus_1", gen.big_ints(p("big_ints"), (64 << 20) + 1), "max_attribute_bytes")
refused("ints_over_set_limit", gen.big_ints(p("ints"), 5000), "max_attribute_bytes", "--limit", "max_attribute_bytes=4K")
# dims and memory
refused("input_dims_4TB", gen.huge_input(p("huge_in"), [10**6, 10**6]), "max_memory_bytes")
rc, text, _ = run(gen.huge_input(p("overflow_in"), [2**40, 2**40]))
check(rc == 1 and "overflows" in text, f"dims overflowing int64 bytes: {rc} {text[-300:]}")
refused("plan_1TB", gen.expand_plan(p("plan_big"), [500000, 500000]), "max_memory_bytes")
refused("plan_over_set_limit", gen.expand_plan(p("plan"), [4000, 4000]), "max_memory_bytes",
        "--limit", "max_memory_bytes=32M")
runs("plan_under_set_limit", p("plan"), 16e6, "--limit", "max_memory_bytes=128M",
     "--input", "x=" + npy("one", np.ones(1, np.float32)))
refused("plan_peak_over_set_limit", gen.expand_pair(p("pair"), [2000, 2000]), "the memory plan",
        "--level", "0", "--limit", "max_memory_bytes=40M")
dyn = gen.expand_dynamic(p("dynamic"))
refused("run_time_tensor_over_limit", dyn, "max_memory_bytes", "--limit", "max_memory_bytes=64M",
        "--input", "shape=" + npy("shape", np.array([30000, 30000], np.int64)))
# strings: their pointers count (a Tile of strings ran the fuzz campaign out of memory)
refused("string_plan_over_set_limit", gen.expand_strings(p("strings_plan"), [20000, 20000]), "max_memory_bytes",
        "--limit", "max_memory_bytes=1G")
refused("string_run_time_tensor_over_limit", gen.expand_strings(p("strings_dynamic")), "max_memory_bytes",
        "--limit", "max_memory_bytes=64M", "--input", "shape=" + npy("shape", np.array([30000, 30000], np.int64)))
runs("string_run_time_tensor_under_limit", p("strings_dynamic"), [300, 300], "--limit", "max_memory_bytes=64M",
     "--input", "shape=" + npy("shape_small", np.array([300, 300], np.int64)))

# input values: a SequenceProto nested 100,000 deep (the decoder recurses per level)
seq_pb, seq_model = gen.deep_sequence(os.path.join(TMP, "deep_seq.pb"), 100000)
rc, text, secs = run(seq_model, "--input", "s=" + seq_pb)
check(rc == 1 and "nested deeper than 64" in text, f"deep SequenceProto input: {rc} in {secs:.1f} s: {text[-300:]}")

# run time: a Loop of 2^63 - 1 iterations (a valid model) stops at the time limit
one = "x=" + npy("one", np.ones(1, np.float32))
for body_node in (True, False):
    name = "loop_forever" + ("" if body_node else "_empty_body")
    path = gen.loop_forever(p(name), body_node)
    refused(name, path, "time limit of 2000 ms", "--limit", "max_run_ms=2000", "--input", one)

print(f"test_hostile: {checks} checks, {failures} failed")
sys.exit(1 if failures or not checks else 0)
