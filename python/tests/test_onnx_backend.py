"""ONNX's backend test runner (onnx.backend.test, Debian python3-onnx) against kiln.backend:
the node, simple and pytorch-operator model tests. Known failures are listed with their reasons
in onnx_backend_failures.txt; the test fails when a listed test passes or an unlisted one fails."""
import os
import sys
import unittest
import warnings

import numpy as np
import onnx.backend.test

# Debian 12 pairs onnx 1.12, whose runner compares with np.object, with numpy 1.24, which
# removed that alias: give it back for the runner.
if "object" not in np.__dict__:
    np.object = object

import kiln.backend

here = os.path.dirname(os.path.abspath(__file__))
known = {}
with open(os.path.join(here, "onnx_backend_failures.txt")) as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition("#")
            known[name.strip()] = why.strip()

warnings.simplefilter("ignore")
bt = onnx.backend.test.BackendTest(kiln.backend.KilnBackend, __name__)
bt.include(r"^test_.*_cpu$")
suite = unittest.TestSuite()
for cls_name, case in sorted(bt.test_cases.items()):
    if cls_name.endswith(("RealModelTest", "ConvertedModelTest")):  # large downloads / PyTorch models
        continue
    suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))


class Collect(unittest.TextTestResult):
    pass


all_ids = [t.id() for t in suite]  # the suite forgets its tests as they run
res = unittest.TextTestRunner(stream=open(os.devnull, "w"), resultclass=Collect, verbosity=0).run(suite)
failed, kinds = {}, {}
for test, tb in res.failures + res.errors:
    failed[test.id().split(".")[-1][:-len("_cpu")]] = tb.strip().splitlines()[-1][:300]
skipped = len(res.skipped)  # the other devices' variants (include keeps *_cpu)
ran = res.testsRun - skipped
skipped_ids = {t.id() for t, _ in res.skipped}
for tid in all_ids:
    if tid not in skipped_ids:
        kind = tid.split(".")[-2].replace("OnnxBackend", "").replace("ModelTest", "")
        name = tid.split(".")[-1][:-len("_cpu")]
        k = kinds.setdefault(kind, [0, 0])
        k[0] += 1
        k[1] += name not in failed
unexpected = sorted(set(failed) - set(known))
fixed = sorted(n for n in set(known) - set(failed) if "(may pass)" not in known[n])  # random draws may match
for n in unexpected:
    print("UNEXPECTED FAILURE %s: %s" % (n, failed[n]))
for n in fixed:
    print("LISTED BUT PASSES %s (remove it from onnx_backend_failures.txt)" % n)
for kind, (n, ok) in sorted(kinds.items()):
    print("  %-16s %4d of %4d passed" % (kind, ok, n))
print("onnx backend tests: %d run, %d passed, %d failed (%d known)"
      % (ran, ran - len(failed), len(failed), len(set(failed) & set(known))))
sys.exit(1 if unexpected or fixed else 0)
