/* Softmax, LogSoftmax and Hardmax.
 *
 * Before opset 13 the input is coerced to 2D at `axis` (default 1): dims [0, axis) form the
 * rows and dims [axis, rank) one long row the operation runs along. From opset 13 it runs
 * along the single dimension `axis` (default -1). Both are an (outer, len, inner) walk: the
 * old form is simply inner = 1 with len the product of the trailing dims.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/vec_f32.h"
#include "kernels/vmath.h"
#include "ops/cost.h"
#include "ops/op.h"
#include "base/threadpool.h"

/* Let GCC if-convert, and so vectorise, the float path's selects (max, exp's range checks):
 * kiln never reads FP exception flags nor errno. Values are unchanged. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

typedef enum smkind { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX } smkind;

static int64_t default_axis(int opset) { return opset < 13 ? 1 : -1; }

/* The session's pool is used from PAR_MIN values; a task is at least PAR_TASK values (whole
 * lines). Each line is computed by one task in a fixed order: results do not depend on the
 * thread count. */
enum { PAR_MIN = 1 << 15, PAR_TASK = 1 << 14 };

typedef struct sm_job {
  const kiln_tensor *x;
  kiln_tensor *y;
  smkind k;
  int64_t len, inner;
} sm_job;

/* Lines [begin, end): line t is (o, in) = (t / inner, t % inner). */
static void sm_task(void *ctx, size_t begin, size_t end, int thread) {
  const sm_job *jb = ctx;
  const kiln_tensor *x = jb->x;
  kiln_tensor *y = jb->y;
  int64_t len = jb->len, inner = jb->inner;
  (void)thread;
  for (int64_t t = (int64_t)begin; t < (int64_t)end; t++) {
    int64_t o = t / inner, in = t % inner;
    int64_t base = o * len * inner + in;
    /* First maximum: Hardmax's pick, and the shift that keeps exp() in range. */
    double mx = kiln_load_f64(x, base);
    int64_t arg = 0;
    for (int64_t j = 1; j < len; j++) {
      double v = kiln_load_f64(x, base + j * inner);
      if (v > mx) {
        mx = v;
        arg = j;
      }
    }
    if (jb->k == SM_HARDMAX) {
      kiln_store_f64(y, base + arg * inner, 1.0);
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < len; j++) sum += exp(kiln_load_f64(x, base + j * inner) - mx);
    if (jb->k == SM_SOFTMAX) {
      for (int64_t j = 0; j < len; j++) {
        int64_t i = base + j * inner;
        kiln_store_f64(y, i, exp(kiln_load_f64(x, i) - mx) / sum);
      }
    } else {
      double lse = log(sum);
      for (int64_t j = 0; j < len; j++) {
        int64_t i = base + j * inner;
        kiln_store_f64(y, i, kiln_load_f64(x, i) - mx - lse);
      }
    }
  }
}



/* Rows [begin, end) of a contiguous float softmax (kiln_softmax_rows_f32). */
static void sm_float_task(void *ctx, size_t begin, size_t end, int thread) {
  const sm_job *jb = ctx;
  int64_t len = jb->len;
  (void)thread;
  kiln_softmax_rows_f32((const float *)jb->x->data + (int64_t)begin * len, (float *)jb->y->data + (int64_t)begin * len,
                        (int64_t)(end - begin), len);
}

static kiln_code softmax_run(kiln_kctx *c, smkind k) {
  const kiln_tensor *x = c->in[0];
  if (!x || x->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input must be a tensor");
  if (!kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "input must be a floating-point tensor, got %s",
                      kiln_dtype_name(x->dtype));
  if (x->rank < 1) return kiln_kfail(c, "input must have rank >= 1");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", default_axis(c->opset)), x->rank);
  if (axis < 0) return KILN_ERR_RUN;

  int64_t outer = 1, len = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  if (c->opset < 13) {
    for (int d = axis; d < x->rank; d++) len *= x->dims[d];
  } else {
    len = x->dims[axis];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  }

  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return c->err->code;
  if (y->numel == 0 || len == 0) return KILN_OK;

  sm_job j = {x, y, k, len, inner};
  int64_t lines = outer * inner;
  kiln_threadpool *pool = y->numel >= PAR_MIN ? kiln_kpool(c) : NULL;
  size_t chunk = len >= PAR_TASK ? 1 : (size_t)(PAR_TASK / len);
  if (x->dtype == KILN_FLOAT && inner == 1 && k == SM_SOFTMAX)
    kiln_parallel_for(pool, (size_t)lines, sm_float_task, &j, chunk);
  else
    kiln_parallel_for(pool, (size_t)lines, sm_task, &j, chunk);
  return KILN_OK;
}

static kiln_code softmax_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank >= 0) {
    int64_t axis = kiln_attr_int(c->node, "axis", default_axis(c->opset));
    if (x->rank < 1) return kiln_ifail(c, "input must have rank >= 1");
    if (axis < -x->rank || axis >= x->rank)
      return kiln_ifail(c, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
  }
  kiln_infer_same(c, 0, 0);
  return KILN_OK;
}

static kiln_code sm_run(kiln_kctx *c) { return softmax_run(c, SM_SOFTMAX); }
static kiln_code lsm_run(kiln_kctx *c) { return softmax_run(c, SM_LOGSOFTMAX); }
static kiln_code hm_run(kiln_kctx *c) { return softmax_run(c, SM_HARDMAX); }

const kiln_op_schema kiln_ops_softmax[] = {
    {.domain = "", .name = "Softmax", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = softmax_infer, .run = sm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_softmax},
    {.domain = "", .name = "LogSoftmax", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = softmax_infer, .run = lsm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_softmax},
    {.domain = "", .name = "Hardmax", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = softmax_infer, .run = hm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_softmax},
    {0},
};
