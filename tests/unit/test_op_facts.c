/* The op descriptors carry the facts the runtime and the optimizer act on: flags, prepare
 * hooks, cost hooks and dim-flow rules, for standard ops, fused ops and the fused ops described
 * through the plugin ABI. */
#include <string.h>

#include "kiln/kiln.h"
#include "ops/cost.h"
#include "ops/registry.h"
#include "plugin/plugin.h"
#include "testutil.h"

static const kiln_op_schema *find(const char *domain, const char *name) {
  const kiln_op_schema *s = kiln_op_find(domain, name, 21);
  CHECK_MSG(s != NULL, "%s::%s is registered", domain, name);
  return s;
}

static void test_flags(void) {
  static const char *const in_place[] = {"Relu", "Sigmoid", "Exp", "Add", "Sub", "Mul", "Div"};
  for (size_t i = 0; i < sizeof in_place / sizeof in_place[0]; i++) {
    const kiln_op_schema *s = find("", in_place[i]);
    CHECK_MSG(s && (s->flags & KILN_OPF_IN_PLACE), "%s runs in place", in_place[i]);
  }
  static const char *const not_in_place[] = {"Not", "Pow", "MatMul", "Concat", "Softmax"};
  for (size_t i = 0; i < sizeof not_in_place / sizeof not_in_place[0]; i++) {
    const kiln_op_schema *s = find("", not_in_place[i]);
    CHECK_MSG(s && !(s->flags & KILN_OPF_IN_PLACE), "%s does not run in place", not_in_place[i]);
  }
  static const char *const random[] = {"RandomNormal", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"};
  for (size_t i = 0; i < sizeof random / sizeof random[0]; i++) {
    const kiln_op_schema *s = find("", random[i]);
    CHECK_MSG(s && (s->flags & KILN_OPF_RANDOM), "%s is random", random[i]);
  }
  const kiln_op_schema *s = find("", "Concat");
  CHECK(s && (s->flags & KILN_OPF_CONCAT));
  s = find("", "Loop");
  CHECK(s && (s->flags & KILN_OPF_LEADING_OPTIONAL));
  s = find("", "If");
  CHECK(s && !(s->flags & KILN_OPF_LEADING_OPTIONAL));
}

static void test_hooks(void) {
  const char *kiln = "ai.kiln";
  const kiln_op_schema *conv = find("", "Conv"), *fconv = find(kiln, "FusedConv");
  const kiln_op_schema *fmm = find(kiln, "FusedMatMul"), *fgemm = find(kiln, "FusedGemm");
  CHECK(conv && conv->prepare && conv->cost == kiln_cost_conv && conv->flow == KILN_FLOW_BATCH);
  CHECK(fconv && fconv->prepare == conv->prepare && fconv->cost == kiln_cost_conv);
  /* described through the plugin ABI, with the facts the ABI does not carry */
  CHECK(fmm && fmm->prepare && fmm->cost == kiln_cost_matmul && fmm->flow == KILN_FLOW_MATMUL);
  CHECK(fgemm && fgemm->prepare && fgemm->cost == kiln_cost_gemm && fgemm->flow == KILN_FLOW_GEMM);
  const kiln_op_schema *relu = find("", "Relu");
  CHECK(relu && !relu->prepare && relu->cost == kiln_cost_elementwise && relu->flow == KILN_FLOW_SAME);
  const kiln_op_schema *att = find(kiln, "Attention");
  CHECK(att && att->cost == kiln_cost_attention && att->flow == KILN_FLOW_NONE);
}

/* Dim-flow rules of standard and fused ops. */
static void test_flows(void) {
  const kiln_op_schema *s = find("", "Add");
  CHECK(s && s->flow == KILN_FLOW_ADD);
  s = find("", "Where");
  CHECK(s && s->flow == KILN_FLOW_BROADCAST);
  s = find("", "Cast");
  CHECK(s && s->flow == KILN_FLOW_COPY);
  s = find("", "ArgMax");
  CHECK(s && s->flow == KILN_FLOW_ARG_REDUCE);
  s = find("", "Shape");
  CHECK(s && s->flow == KILN_FLOW_SHAPE);
  s = find("ai.kiln", "FusedElementwise");
  CHECK(s && s->flow == KILN_FLOW_BROADCAST);
}

/* A Gemm of (4 x 8) by (8 x 3): 2 * 4 * 3 * 8 flops, bytes preset by the caller kept. */
static void test_cost(void) {
  kiln_error err = {0};
  int64_t da[2] = {4, 8}, db[2] = {8, 3}, dy[2] = {4, 3};
  kiln_tensor *a = kiln_tensor_new(KILN_FLOAT, 2, da, &err), *b = kiln_tensor_new(KILN_FLOAT, 2, db, &err);
  kiln_tensor *y = kiln_tensor_new(KILN_FLOAT, 2, dy, &err);
  kiln_node n = {.name = "g", .op_type = "Gemm", .domain = "", .n_in = 2, .n_out = 1};
  const kiln_tensor *in[2] = {a, b};
  kiln_tensor *out[1] = {y};
  kiln_kctx c = {.node = &n, .n_in = 2, .n_out = 1, .in = in, .out = out, .err = &err};
  double flops = 0, bytes = 7;
  kiln_cost_gemm(&c, &flops, &bytes);
  CHECK(flops == 2.0 * 4 * 3 * 8);
  CHECK(bytes == 7);
  kiln_tensor_free(a);
  kiln_tensor_free(b);
  kiln_tensor_free(y);
}

int main(void) {
  kiln_builtin_ops_init(); /* FusedGemm, FusedMatMul: described through the plugin ABI */
  test_flags();
  test_hooks();
  test_flows();
  test_cost();
  return kt_finish("test_op_facts");
}
