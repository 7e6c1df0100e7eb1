"""Tile against numpy.tile on random shapes and repeats (rank 1-5, repeats 0-3, a zero-sized
input, strings): kiln writes a large output by doubling copies of the input's slices, so every
axis order of repeats is checked here.

    /usr/bin/python3 tests/graph/test_tile.py KILN
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    kiln = sys.argv[1]
    rng = np.random.default_rng(11)
    failed = n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(60):
            rank = int(rng.integers(1, 6))
            shape = tuple(int(v) for v in rng.integers(0 if case == 5 else 1, 4, size=rank))
            reps = [int(v) for v in rng.integers(0 if case % 9 == 0 else 1, 4, size=rank)]
            strings = case % 7 == 3
            x = np.array([f"s{i}" for i in range(int(np.prod(shape)))], dtype=object).reshape(shape) if strings \
                else rng.standard_normal(shape).astype(np.float32)
            et = TensorProto.STRING if strings else TensorProto.FLOAT
            g = helper.make_graph([helper.make_node("Tile", ["x", "r"], ["y"])], "tile", [],
                                  [helper.make_tensor_value_info("y", et, None)],
                                  [numpy_helper.from_array(x, "x"), numpy_helper.from_array(np.array(reps, np.int64), "r")])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            path = os.path.join(tmp, f"t{case}.onnx")
            onnx.save(m, path)
            out = os.path.join(tmp, f"o{case}")
            r = subprocess.run([kiln, "run", path, "--quiet", "--output-dir", out], capture_output=True, text=True)
            n += 1
            want = np.tile(x, reps)
            if r.returncode != 0:
                print(f"FAIL {shape} x {reps}: kiln failed: {r.stderr.strip()[-200:]}")
                failed += 1
                continue
            got = numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "output_0.pb")))
            if strings:
                got = got.astype(str).astype(object) if got.dtype != object else np.vectorize(
                    lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(got) if got.size else got
            if got.shape != want.shape or not np.array_equal(got, want):
                print(f"FAIL {shape} x {reps}: got {got.shape}, want {want.shape}")
                failed += 1
    print(f"test_tile: {n} cases, {failed} failed")
    return 1 if failed or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
