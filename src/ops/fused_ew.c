/* ai.kiln::FusedElementwise (see fused_ew.h for the node's contract).
 *
 * Why it is faster than the chain: the chain writes and re-reads one full tensor per op; this
 * kernel reads each input once and writes the output once. It walks the output in blocks of
 * BLK elements; each instruction is one loop over the block between small buffers that stay
 * in L1, and those loops are branch-free so the compiler vectorises them. exp (and so
 * sigmoid, tanh, softplus, elu) uses a vectorisable polynomial with about 1 ulp of error
 * instead of a libm call per element. Results differ from the chain (which rounds every
 * intermediate to float and computes in double) by a few ulp. */
#include "kernels/fused_ew.h"
#include "ops/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/vec_f32.h"
#include "ops/fused.h"
#include "base/threadpool.h"

/* The loops below select between computed values (clamps, NaN checks, piecewise formulas).
 * GCC only if-converts, and so vectorises, those when FP operations may be speculated; kiln
 * never reads FP exception flags nor errno, so allow that here (sqrtf then vectorises too).
 * Clang vectorises these loops as they are. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

/* BLK elements per block; the pool is used from PAR_MIN output elements, in tasks of PAR_BLKS
 * blocks (16K elements: far above the ~1 us a task costs to hand out) */
enum { BLK = 512, MAX_PROG = 64, PAR_BLKS = 32, PAR_MIN = 1 << 15 };

static const char *const op_names[KILN_EW_END] = {
    [KILN_EW_ADD] = "Add", [KILN_EW_SUB] = "Sub", [KILN_EW_MUL] = "Mul", [KILN_EW_DIV] = "Div",
    [KILN_EW_POW] = "Pow", [KILN_EW_MAX] = "Max", [KILN_EW_MIN] = "Min", [KILN_EW_PRELU] = "PRelu",
    [KILN_EW_RELU] = "Relu", [KILN_EW_SIGMOID] = "Sigmoid", [KILN_EW_TANH] = "Tanh",
    [KILN_EW_EXP] = "Exp", [KILN_EW_LOG] = "Log", [KILN_EW_ABS] = "Abs", [KILN_EW_NEG] = "Neg",
    [KILN_EW_SQRT] = "Sqrt", [KILN_EW_ERF] = "Erf", [KILN_EW_RECIPROCAL] = "Reciprocal",
    [KILN_EW_FLOOR] = "Floor", [KILN_EW_CEIL] = "Ceil", [KILN_EW_CLIP] = "Clip",
    [KILN_EW_LEAKYRELU] = "LeakyRelu", [KILN_EW_ELU] = "Elu", [KILN_EW_HARDSIGMOID] = "HardSigmoid",
    [KILN_EW_HARDSWISH] = "HardSwish", [KILN_EW_SOFTPLUS] = "Softplus",
    [KILN_EW_SOFTSIGN] = "Softsign", [KILN_EW_SIN] = "Sin", [KILN_EW_COS] = "Cos"};

const char *kiln_ew_op_name(int op) { return op >= 0 && op < KILN_EW_END ? op_names[op] : NULL; }

int kiln_ew_op_code(const char *name) {
  for (int k = 0; k < KILN_EW_END; k++)
    if (op_names[k] && !strcmp(op_names[k], name)) return k;
  return -1;
}

/* ---- inputs: how each maps onto the output ---- */

typedef struct ew_in {
  const float *p;
  int64_t inner, n; /* element i of the output reads p[(i / inner) % n] */
  bool full;        /* same shape as the output: read in place */
} ew_in;

/* Input t broadcast to the output shape (rank, dims), when expressible as (i / inner) % n:
 * the output dims the input spans (same size, > 1) must not enclose a dim it is broadcast
 * along (input 1 or missing, output > 1). Output dims of size 1 do not matter. */
static bool map_input(const kiln_tensor *t, int rank, const int64_t *dims, int64_t total, ew_in *m) {
  m->p = t->data;
  m->full = t->numel == total;
  m->inner = 1;
  m->n = t->numel;
  if (m->full || t->numel == 1) return true;
  int off = rank - t->rank, first = -1, last = -1;
  bool gap = false;
  for (int p = 0; p < rank; p++) {
    int64_t d = p < off ? 1 : t->dims[p - off];
    if (dims[p] == 1) continue;
    if (d == dims[p]) {
      if (first >= 0 && gap) return false;
      if (first < 0) first = p;
      last = p;
    } else if (d == 1) {
      gap = first >= 0;
    } else {
      return false;
    }
  }
  for (int p = last + 1; p < rank; p++) m->inner *= dims[p];
  return true;
}

/* Block [i0, i0 + len) of input m into buf (or a pointer into the input). */
static const float *load(const ew_in *m, int64_t i0, int len, float *buf) {
  if (m->full) return m->p + i0;
  if (m->n == 1) return buf; /* filled once */
  int64_t q = i0 / m->inner, r = i0 % m->inner, j = q % m->n;
  for (int k = 0; k < len;) {
    int64_t run = m->inner - r;
    if (run > len - k) run = len - k;
    if (m->inner == 1) { /* contiguous pieces of the input, wrapping at n */
      run = m->n - j;
      if (run > len - k) run = len - k;
      memcpy(buf + k, m->p + j, (size_t)run * sizeof *buf);
      j = (j + run) % m->n;
      k += (int)run;
      continue;
    }
    float v = m->p[j];
    for (int64_t e = 0; e < run; e++) buf[k + e] = v;
    k += (int)run;
    r = 0;
    if (++j == m->n) j = 0;
  }
  return buf;
}

typedef struct ew_job {
  const ew_in *in;
  const int64_t *prog;
  const float *params;
  size_t ni, nops;
  int64_t total;
  float *out, *mem;
  size_t per; /* floats of scratch per thread */
} ew_job;

/* Tasks are groups of PAR_BLKS blocks of BLK elements. */
static void ew_task(void *ctx, size_t begin, size_t end, int thread) {
  const ew_job *j = ctx;
  const float *ops[2 * MAX_PROG];
  float *mem = j->mem + (size_t)thread * j->per;
  int64_t stop = (int64_t)end * PAR_BLKS * BLK < j->total ? (int64_t)end * PAR_BLKS * BLK : j->total;
  for (int64_t i0 = (int64_t)begin * PAR_BLKS * BLK; i0 < stop; i0 += BLK) {
    int len = stop - i0 < BLK ? (int)(stop - i0) : BLK;
    for (size_t i = 0; i < j->ni; i++) ops[i] = load(&j->in[i], i0, len, mem + i * BLK);
    for (size_t k = 0; k < j->nops; k++) {
      float *o = k + 1 == j->nops ? j->out + i0 : mem + (j->ni + k) * BLK;
      const int64_t *ins = &j->prog[3 * k];
      kiln_ew_block_f32((int)ins[0], o, ops[ins[1]], ins[2] >= 0 ? ops[ins[2]] : NULL, len, j->params[2 * k],
                        j->params[2 * k + 1]);
      ops[j->ni + k] = o;
    }
  }
}

static kiln_code fused_ew_run(kiln_kctx *c) {
  size_t np, nf;
  const int64_t *prog = kiln_attr_ints(c->node, "program", &np);
  const float *params = kiln_attr_floats(c->node, "params", &nf);
  size_t ni = c->n_in, nops = np / 3;
  if (!prog || np % 3 || nops == 0 || nops > MAX_PROG || nf != 2 * nops || ni == 0 || ni > MAX_PROG)
    return kiln_kfail(c, "malformed program (%zu ints, %zu params)", np, nf);
  for (size_t k = 0; k < nops; k++) {
    int64_t op = prog[3 * k], a = prog[3 * k + 1], b = prog[3 * k + 2];
    bool bin = kiln_ew_is_binary((int)op);
    if (!kiln_ew_op_name((int)op) || a < 0 || a >= (int64_t)(ni + k) || (bin && (b < 0 || b >= (int64_t)(ni + k))) ||
        (!bin && b != -1))
      return kiln_kfail(c, "malformed instruction %zu", k);
  }
  /* output shape: broadcast of all inputs */
  int rank = 0;
  int64_t dims[KILN_MAX_RANK] = {0};
  for (size_t i = 0; i < ni; i++) {
    const kiln_tensor *t = c->in[i];
    if (!t || t->kind != KILN_KIND_TENSOR || t->dtype != KILN_FLOAT)
      return kiln_kunsup(c, "input %zu is not a float tensor", i);
    int64_t prev[KILN_MAX_RANK];
    memcpy(prev, dims, sizeof prev);
    if (!kiln_broadcast_shape(rank, prev, t->rank, t->dims, &rank, dims))
      return kiln_kfail(c, "input shapes cannot be broadcast");
  }
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, rank, dims); /* ew_task writes every element */
  if (!y) return c->err->code;
  int64_t total = y->numel;
  ew_in in[MAX_PROG];
  for (size_t i = 0; i < ni; i++)
    if (!map_input(c->in[i], rank, dims, total, &in[i]))
      return kiln_kunsup(c, "input %zu's broadcast is not one run of the output's dims", i);
  if (total == 0) return KILN_OK;
  /* buffers, per thread: one per input that is not read in place, one per instruction but
   * the last. Threads take groups of PAR_BLKS blocks; every element is computed the same way
   * whichever thread runs it, so the output does not depend on the thread count. */
  kiln_threadpool *pool = total >= PAR_MIN ? kiln_kpool(c) : NULL;
  size_t nthr = (size_t)kiln_threadpool_size(pool), per = (ni + nops) * BLK + 16; /* + a line apart */
  float *mem = malloc(nthr * per * sizeof *mem);
  if (!mem) return kiln_kfail(c, "out of memory");
  for (size_t t = 0; t < nthr; t++)
    for (size_t i = 0; i < ni; i++)
      if (!in[i].full && in[i].n == 1)
        for (int k = 0; k < BLK; k++) mem[t * per + i * BLK + k] = in[i].p[0];
  ew_job j = {in, prog, params, ni, nops, total, y->data, mem, per};
  int64_t nblk = (total + BLK - 1) / BLK;
  kiln_parallel_for(pool, (size_t)((nblk + PAR_BLKS - 1) / PAR_BLKS), ew_task, &j, 1);
  free(mem);
  return KILN_OK;
}

static kiln_code fused_ew_infer(kiln_ictx *c) { return kiln_infer_broadcast(c, KILN_FLOAT); }

const kiln_op_schema kiln_ops_fused_ew[] = {
    {.domain = KILN_FUSED_DOMAIN, .name = "FusedElementwise", .since = 1,
     .inputs = {1, KILN_VARIADIC}, .outputs = {1, 1},
     .infer = fused_ew_infer, .run = fused_ew_run, .flow = KILN_FLOW_BROADCAST, .cost = kiln_cost_fused_elementwise},
    {0},
};
