"""docs/custom-ops.md's walk-through, run as written: its my_ops.c is compiled against include/
alone, its make_model.py and check.py run, and its shell commands run in order."""
import os
import re
import subprocess
import sys

from kilntest import *
from kilntest import KILN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
doc = open(os.path.join(ROOT, "docs", "custom-ops.md")).read()
blocks = re.findall(r"```(\w+)\n(.*?)```", doc, re.S)


def block(lang, first_line):
    for lg, body in blocks:
        if lg == lang and body.startswith(first_line):
            return body
    return None


files = {"my_ops.c": block("c", "/* my_ops.c"), "make_model.py": block("python", "# make_model.py"),
         "check.py": block("python", "# check.py")}
steps = block("sh", "# walk-through")
check(all(files.values()) and steps, "the walk-through's blocks are in docs/custom-ops.md")
work = os.path.join(TMP, "walkthrough")
os.makedirs(work, exist_ok=True)
for name, body in files.items():
    with open(os.path.join(work, name), "w") as f:
        f.write(body or "")

kiln_abs = os.path.abspath(KILN)
outputs = ""
for line in (steps or "").splitlines():
    if not line.strip() or line.startswith("#"):
        continue
    cmd = line.replace("build/kiln", kiln_abs).replace("-Iinclude", "-I" + os.path.join(ROOT, "include"))
    cmd = re.sub(r"^python3 ", sys.executable + " ", cmd)
    r = subprocess.run(cmd, shell=True, cwd=work, capture_output=True, text=True)
    outputs += r.stdout + r.stderr
    check(r.returncode == 0, f"walk-through step `{line}` exits 0: {r.stdout}{r.stderr}")
    if r.returncode:
        break
check("ScaledTanh OK" in outputs, "the plugin's output matches numpy: " + outputs)
check("ScaledTanh" in outputs and "my.ops=1" in outputs, "kiln info shows the op and domain: " + outputs)

# what the walk-through says happens without --plugin
rc, text = kiln("run", os.path.join(work, "scaled_tanh.onnx"), "--input", "x=" + os.path.join(work, "x.npy"))
check(rc == 1 and "unknown operator 'ScaledTanh' in domain 'my.ops' (if a plugin provides it, load it: --plugin "
      "PATH.so or KILN_PLUGINS)" in text, "without --plugin: " + text)
finish("test_plugin_docs")
