"""The package installs with pip from the source tree (no network, no build isolation) and
works from the install alone: pip install --target a temporary folder, then a fresh
interpreter with only that folder on its path runs tiny_cnn."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kt  # noqa: E402

with tempfile.TemporaryDirectory() as d:
    env = dict(os.environ, KILN_BUILD_DIR=os.environ.get("KILN_BUILD", os.path.join(kt.ROOT, "build")))
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                        "--quiet", "--target", d, os.path.join(kt.ROOT, "python")], env=env,
                       capture_output=True, text=True)
    kt.check(r.returncode == 0, "pip install failed: %s" % r.stderr[-2000:])
    code = ("import kiln, numpy as np; s = kiln.InferenceSession(%r); "
            "y = s.run(None, {'image': np.zeros((1, 3, 16, 16), np.float32)})[0]; "
            "print(kiln.__file__, y.shape, kiln.get_available_providers())" % kt.TINY_CNN)
    r = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=d), cwd=d, capture_output=True, text=True)
    kt.check(r.returncode == 0 and "(1, 10)" in r.stdout and r.stdout.startswith(d), "installed package: %s %s"
             % (r.stdout, r.stderr[-2000:]))
    so = [f for f in os.listdir(os.path.join(d, "kiln")) if f.startswith("_kiln")]
    kt.check(len(so) == 1, "one extension module %r" % so)
    if so:
        syms = subprocess.run(["nm", "-D", "--defined-only", os.path.join(d, "kiln", so[0])], capture_output=True,
                              text=True).stdout.split()
        kt.check("PyInit__kiln" in syms and not any(s.startswith(("onnx__", "kiln_")) for s in syms),
                 "the extension exports PyInit__kiln only")
    print(r.stdout.strip())
kt.finish("test_pip_install")
