/* RotaryEmbedding (opset 23): rotary position embedding of each head's first
 * rotary_embedding_dim values (0: the whole head).
 *
 *   X            (B, num_heads, S, head_size), or (B, S, num_heads * head_size) with the
 *                num_heads attribute
 *   cos, sin     (B, S, rd / 2), or (max_position + 1, rd / 2) read at position_ids (B, S)
 *   pairs        (x[i], x[i + rd/2]) for i < rd/2, or (x[2i], x[2i + 1]) when interleaved:
 *                (a, b) -> (a cos - b sin, a sin + b cos); values past rd are copied.
 * float32, and float16 / bfloat16 / double through double arithmetic. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

typedef struct rope {
  int64_t b, s, h, d, rd, half;
  bool four_d, inter;
} rope;

/* Element offset of head h of token (b, s) in X. */
static int64_t head_at(const rope *r, int64_t b, int64_t s, int64_t h) {
  return r->four_d ? ((b * r->h + h) * r->s + s) * r->d : (b * r->s + s) * r->h * r->d + h * r->d;
}

static kiln_code rope_shape(kiln_kctx *c, const kiln_tensor *x, rope *r) {
  int64_t nh = kiln_attr_int(c->node, "num_heads", 0);
  r->inter = kiln_attr_int(c->node, "interleaved", 0) != 0;
  r->four_d = x->rank == 4;
  if (x->rank == 4) {
    r->b = x->dims[0], r->h = x->dims[1], r->s = x->dims[2], r->d = x->dims[3];
    if (nh && nh != r->h) return kiln_kfail(c, "num_heads %lld but X has %lld heads", (long long)nh, (long long)r->h);
  } else if (x->rank == 3) {
    if (nh <= 0) return kiln_kfail(c, "a 3-D input needs the num_heads attribute");
    if (x->dims[2] % nh) return kiln_kfail(c, "hidden size %lld is not a multiple of num_heads %lld",
                                           (long long)x->dims[2], (long long)nh);
    r->b = x->dims[0], r->s = x->dims[1], r->h = nh, r->d = x->dims[2] / nh;
  } else {
    return kiln_kfail(c, "X must have rank 3 or 4, not %d", x->rank);
  }
  r->rd = kiln_attr_int(c->node, "rotary_embedding_dim", 0);
  if (r->rd == 0) r->rd = r->d;
  if (r->rd < 0 || r->rd > r->d || r->rd % 2)
    return kiln_kfail(c, "rotary_embedding_dim %lld must be even and at most the head size %lld", (long long)r->rd,
                      (long long)r->d);
  r->half = r->rd / 2;
  return KILN_OK;
}

/* Row offsets into the caches for every token (b, s): B * S values. */
static kiln_code cache_rows(kiln_kctx *c, const rope *r, const kiln_tensor *cs, const kiln_tensor *sn,
                            const kiln_tensor *pos, int64_t *rows) {
  if (!kiln_same_shape(cs, sn)) return kiln_kfail(c, "cos_cache and sin_cache differ in shape");
  if (cs->rank < 1 || cs->dims[cs->rank - 1] != r->half)
    return kiln_kfail(c, "the caches' last dim must be rotary_embedding_dim / 2 = %lld", (long long)r->half);
  if (!pos) {
    if (cs->rank != 3 || cs->dims[0] != r->b || cs->dims[1] != r->s)
      return kiln_kfail(c, "without position_ids the caches must be (batch %lld, sequence %lld, %lld)",
                        (long long)r->b, (long long)r->s, (long long)r->half);
    for (int64_t t = 0; t < r->b * r->s; t++) rows[t] = t;
    return KILN_OK;
  }
  if (!kiln_dtype_is_int(pos->dtype) || pos->rank != 2 || pos->dims[0] != r->b || pos->dims[1] != r->s)
    return kiln_kfail(c, "position_ids must be integers of shape (batch %lld, sequence %lld)", (long long)r->b,
                      (long long)r->s);
  if (cs->rank != 2) return kiln_kfail(c, "with position_ids the caches must be 2-D (positions, %lld)", (long long)r->half);
  for (int64_t t = 0; t < r->b * r->s; t++) {
    int64_t p = kiln_get_i64(pos, t);
    if (p < 0 || p >= cs->dims[0])
      return kiln_kfail(c, "position id %lld outside the caches' %lld positions", (long long)p, (long long)cs->dims[0]);
    rows[t] = p;
  }
  return KILN_OK;
}

static void rotate_f32(const rope *r, const float *x, const float *cs, const float *sn, float *y,
                       const int64_t *rows) {
  for (int64_t b = 0; b < r->b; b++)
    for (int64_t s = 0; s < r->s; s++) {
      const float *co = cs + rows[b * r->s + s] * r->half, *si = sn + rows[b * r->s + s] * r->half;
      for (int64_t h = 0; h < r->h; h++) {
        int64_t o = head_at(r, b, s, h);
        const float *xh = x + o;
        float *yh = y + o;
        int64_t st = r->inter ? 2 : 1, j2 = r->inter ? 1 : r->half;
        for (int64_t i = 0; i < r->half; i++) {
          float a = xh[i * st], bb = xh[i * st + j2];
          yh[i * st] = a * co[i] - bb * si[i];
          yh[i * st + j2] = a * si[i] + bb * co[i];
        }
        if (r->rd < r->d) memcpy(yh + r->rd, xh + r->rd, (size_t)(r->d - r->rd) * sizeof *yh);
      }
    }
}

static void rotate_f64(const rope *r, const kiln_tensor *x, const kiln_tensor *cs, const kiln_tensor *sn, kiln_tensor *y,
                       const int64_t *rows) {
  for (int64_t b = 0; b < r->b; b++)
    for (int64_t s = 0; s < r->s; s++) {
      int64_t cr = rows[b * r->s + s] * r->half;
      for (int64_t h = 0; h < r->h; h++) {
        int64_t o = head_at(r, b, s, h), st = r->inter ? 2 : 1, j2 = r->inter ? 1 : r->half;
        for (int64_t i = 0; i < r->half; i++) {
          double a = kiln_load_f64(x, o + i * st), bb = kiln_load_f64(x, o + i * st + j2);
          double co = kiln_load_f64(cs, cr + i), si = kiln_load_f64(sn, cr + i);
          kiln_store_f64(y, o + i * st, a * co - bb * si);
          kiln_store_f64(y, o + i * st + j2, a * si + bb * co);
        }
        for (int64_t i = r->rd; i < r->d; i++) kiln_copy_elem(y, o + i, x, o + i);
      }
    }
}

static kiln_code rope_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0), *cs = kiln_in(c, 1), *sn = kiln_in(c, 2), *pos = kiln_in(c, 3);
  if (!kiln_dtype_is_float(x->dtype) || cs->dtype != x->dtype || sn->dtype != x->dtype)
    return kiln_kfail(c, "X, cos_cache and sin_cache must be float tensors of one type");
  rope r = {0};
  if ((rc = rope_shape(c, x, &r))) return rc;
  int64_t ntok = r.b * r.s;
  int64_t *rows = kiln_calloc((size_t)(ntok ? ntok : 1), sizeof *rows);
  if (!rows) return kiln_kfail(c, "out of memory");
  if (!(rc = cache_rows(c, &r, cs, sn, pos, rows))) {
    kiln_tensor *y = kiln_out_uninit(c, 0, x->dtype, x->rank, x->dims);
    if (!y) rc = c->err->code;
    else if (x->dtype == KILN_FLOAT) rotate_f32(&r, x->data, cs->data, sn->data, y->data, rows);
    else rotate_f64(&r, x, cs, sn, y, rows);
  }
  free(rows);
  return rc;
}

const kiln_op_schema kiln_ops_rotary[] = {
    {.domain = "", .name = "RotaryEmbedding", .since = 23, .inputs = {3, 4}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = rope_run, .flow = KILN_FLOW_SAME},
    {0},
};
