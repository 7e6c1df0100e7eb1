"""`kiln run` outputs for given inputs: the C API through the command line, as the reference."""
import os
import subprocess
import tempfile

import kt
from kt import np


def kiln_run_outputs(path, feeds):
    """Outputs of `kiln run` (the C API through the command line) for the same inputs."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [kt.KILN_BIN, "run", path, "--output-dir", d]
        for name, arr in feeds.items():
            np.save(os.path.join(d, name + ".npy"), arr)
            cmd += ["--input", "%s=%s" % (name, os.path.join(d, name + ".npy"))]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        outs, i = [], 0
        while os.path.exists(os.path.join(d, "output_%d.pb" % i)):
            outs.append(kt.onnx.numpy_helper.to_array(kt.onnx.load_tensor(os.path.join(d, "output_%d.pb" % i))))
            i += 1
        return outs
