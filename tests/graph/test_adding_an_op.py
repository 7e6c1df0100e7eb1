"""docs/adding-an-op.md followed as written: its standard op, fused op and fusion pass are
compiled against src/ with the project's warnings, linked with the kiln library and run: the
ops are registered (kiln_op_register_extra, as the layer above registers kiln's described
ops), the pass fuses Abs -> Neg in a model, and the optimised model runs through the public
API with the answer numpy gives. The list lines the page asks for have the lists' format."""
import os
import re
import subprocess

import numpy as np
from onnx import helper, numpy_helper, TensorProto

from kilntest import *
from kilntest import KILN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.dirname(os.path.abspath(KILN))
doc = open(os.path.join(ROOT, "docs", "adding-an-op.md")).read()
blocks = re.findall(r"```(\w+)\n(.*?)```", doc, re.S)
files = {}
for lang, body in blocks:
    m = re.match(r"/\* file: (\S+) \*/\n", body)
    if lang == "c" and m:
        files[m.group(1)] = body
lines = [l for lang, body in blocks if lang == "text" for l in body.splitlines() if l.strip()]
check(set(files) == {"src/ops/square.c", "src/ops/fused_abs_neg.c", "src/opt/fuse_abs_neg.c"},
      "the page shows the op, the fused op and the pass")

# the list lines: the macros the real lists use, naming what the files define
fam = open(os.path.join(ROOT, "src", "ops", "families.def")).read()
passes = open(os.path.join(ROOT, "src", "opt", "passes.def")).read()
for l in lines:
    m = re.fullmatch(r"KILN_OP_FAMILY\((\w+)\)", l)
    p = re.fullmatch(r'KILN_PASS\((\w+), "(\w+)", ([12])\)', l)
    check(m or p, f"list line {l!r} has a list's format")
    if m:
        check("KILN_OP_FAMILY(" in fam and any(f"kiln_ops_{m.group(1)}[]" in b for b in files.values()),
              f"{l}: families.def's macro, a table the page defines")
    if p:
        check("KILN_PASS(" in passes and any(f"kiln_pass_{p.group(1)}(" in b for b in files.values()),
              f"{l}: passes.def's macro, a pass the page defines")

harness = r'''
#include <stdio.h>
#include <kiln/kiln.h>
#include "onnx/reader.h"
#include "onnx/writer.h"
#include "ops/registry.h"
#include "opt/opt.h"
#include "plugin/plugin.h"
#include "runtime/session.h"
extern const kiln_op_schema kiln_ops_square[], kiln_ops_fused_abs_neg[];
kiln_code kiln_pass_fuse_abs_neg(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count);
int main(int argc, char **argv) {
  static const kiln_op_schema *mine[2];
  mine[0] = &kiln_ops_square[0], mine[1] = &kiln_ops_fused_abs_neg[0];
  (void)argc;
  kiln_builtin_ops_init();
  kiln_op_register_extra(mine, 2);
  kiln_error err = {0};
  kiln_ir_model *ir = NULL;
  kiln_opt_config cfg = {.level = 2};
  size_t count = 0;
  if (kiln_model_read_file(argv[1], NULL, &ir, &err) || kiln_graph_prepare(ir->graph, ir, &err)) goto fail;
  kiln_pass_ctx ctx = {ir, &cfg, &err};
  if (kiln_pass_fuse_abs_neg(&ctx, ir->graph, &count) || kiln_graph_prepare(ir->graph, ir, &err)) goto fail;
  printf("fused %zu\n", count);
  for (size_t i = 0; i < ir->graph->n_nodes; i++) printf("node %s\n", ir->graph->nodes[i].op_type);
  if (kiln_model_write_file(ir, argv[2], &err)) goto fail;
  kiln_ir_model_free(ir);
  kiln_options o;
  kiln_options_init(&o);
  o.opt_level = 0;
  kiln_session *s = NULL;
  if (kiln_session_create(argv[2], &o, &s, &err)) goto fail;
  int64_t dims[1] = {5};
  kiln_tensor *x = NULL, *y = NULL;
  kiln_tensor_create(KILN_FLOAT, 1, dims, &x, &err);
  float *p = kiln_tensor_data(x);
  for (int i = 0; i < 5; i++) p[i] = (float)i - 2.5f;
  const char *names[] = {"x"};
  if (kiln_session_run(s, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err)) goto fail;
  const float *q = kiln_tensor_cdata(y);
  for (int i = 0; i < 5; i++) printf("y %.6f\n", q[i]);
  kiln_tensor_free(x);
  kiln_tensor_free(y);
  kiln_session_free(s);
  return 0;
fail:
  fprintf(stderr, "%s\n", err.message);
  return 1;
}
'''
work = os.path.join(TMP, "adding_an_op")
os.makedirs(work, exist_ok=True)
srcs = []
for path, body in files.items():
    dst = os.path.join(work, os.path.basename(path))
    with open(dst, "w") as f:
        f.write(body)
    srcs.append(dst)
with open(os.path.join(work, "harness.c"), "w") as f:
    f.write(harness)
exe = os.path.join(work, "harness")
# a sanitizer build's library links only with its sanitizer
cache = open(os.path.join(BUILD, "CMakeCache.txt")).read() if os.path.exists(os.path.join(BUILD, "CMakeCache.txt")) else ""
san = (["-fsanitize=address,undefined"] if "KILN_SANITIZE:BOOL=ON" in cache else []) + \
      (["-fsanitize=thread"] if "KILN_TSAN:BOOL=ON" in cache else [])
cmd = ["cc", *san, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wstrict-prototypes",
       "-Werror", "-I" + os.path.join(ROOT, "src"),
       "-I" + os.path.join(ROOT, "include"), os.path.join(work, "harness.c"), *srcs,
       os.path.join(BUILD, "libkiln.a"), "-lprotobuf-c", "-lm", "-lpthread", "-ldl", "-o", exe]
r = subprocess.run(cmd, capture_output=True, text=True)
check(r.returncode == 0, "the page's files compile and link: " + r.stderr[-2000:])

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])
nodes = [helper.make_node("Square", ["x"], ["s"], name="sq"), helper.make_node("Abs", ["s"], ["a"], name="abs"),
         helper.make_node("Neg", ["a"], ["y"], name="neg")]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
src = save(m, "adding_an_op.onnx")
if r.returncode == 0:
    r = subprocess.run([exe, src, os.path.join(work, "fused.onnx")], capture_output=True, text=True)
    check(r.returncode == 0, "the harness runs: " + r.stderr)
    out = r.stdout.splitlines()
    check("fused 1" in out, "the pass fused Abs -> Neg once")
    check([l for l in out if l.startswith("node ")] == ["node Square", "node FusedAbsNeg"],
          "the graph is Square, FusedAbsNeg: " + " ".join(out))
    got = np.array([float(l.split()[1]) for l in out if l.startswith("y ")], dtype=np.float32)
    xs = np.arange(5, dtype=np.float32) - 2.5
    check(got.shape == (5,) and np.allclose(got, -np.abs(xs * xs)), f"y = -|x*x|: {got}")
finish("test_adding_an_op")
