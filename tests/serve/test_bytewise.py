"""kiln serve answers bytewise what `kiln run` writes for the same inputs, in JSON and in binary.

Proves: on examples/models/tiny_cnn.onnx (batch 1 and 3) the HTTP outputs, decoded as float32,
have exactly the bytes of `kiln run --input ... --output-dir`'s output_0.pb, for JSON data (9
significant digits round-trip float32) and for binary_data_output; also with batching on, where
the request runs inside a batch with others."""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from onnx import numpy_helper, TensorProto

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import (KILN, SOURCE_DIR, Server, binary_request, check, finish, in_threads,  # noqa: E402
                        json_input, parse_binary_response)

MODEL = os.path.join(SOURCE_DIR, "examples", "models", "tiny_cnn.onnx")


def kiln_run(x, tmp):
    path = os.path.join(tmp, "image.npy")
    np.save(path, x)
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([KILN, "run", MODEL, "--input", "image=" + path, "--output-dir", out, "--quiet"],
                   check=True, timeout=120)
    t = TensorProto()
    with open(os.path.join(out, "output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def compare(s, x, ref, what):
    st, _, r = s.post_json("/v2/models/tiny_cnn/infer", {"inputs": [json_input("image", x)]})
    y = np.array(r["outputs"][0]["data"], dtype=np.float32).reshape(r["outputs"][0]["shape"]) if st == 200 else None
    check(y is not None and y.shape == ref.shape and y.tobytes() == ref.tobytes(),
          "%s: JSON outputs bytewise equal to kiln run's" % what)
    body, headers = binary_request([("image", x)])
    st, h, b = s.request("POST", "/v2/models/tiny_cnn/infer", body, headers)
    y = parse_binary_response(h, b)[1]["probs"] if st == 200 else None
    check(y is not None and y.shape == ref.shape and y.tobytes() == ref.tobytes(),
          "%s: binary outputs bytewise equal to kiln run's" % what)


def main():
    tmp = tempfile.mkdtemp(prefix="kiln-serve-bytes-")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((n, 3, 16, 16)).astype(np.float32) for n in (1, 3)]
    refs = [kiln_run(x, tmp) for x in xs]
    try:
        s = Server([MODEL, "--drain-s", "0", "--log-format", "off"])
        try:
            for x, ref in zip(xs, refs):
                compare(s, x, ref, "batch %d" % len(x))
        finally:
            s.stop()
        s = Server([MODEL, "--drain-s", "0", "--log-format", "off", "--max-batch-size", "8",
                    "--max-queue-delay-us", "20000"])
        try:
            res = in_threads(lambda i: compare(s, xs[i % 2], refs[i % 2], "batching on, client %d" % i), 6)
            check(all(r is None for r in res), "batched comparisons ran: %s" % [r for r in res if r])
            st, _, b = s.request("GET", "/metrics")
            sizes = [l for l in b.decode().splitlines() if l.startswith("kiln_batch_size_sum")]
            check(sizes and float(sizes[0].split()[-1]) > 0, "batch sizes recorded")
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
