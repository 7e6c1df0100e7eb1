/* Sequence and optional operators: SequenceConstruct/Empty/At/Insert/Erase/Length,
 * SplitToSequence, ConcatFromSequence, SequenceMap, Optional, OptionalHasElement,
 * OptionalGetElement.
 *
 * A sequence is a kiln_tensor of kind KILN_KIND_SEQUENCE owning its items; an empty optional
 * is kind KILN_KIND_NONE, and an optional holding a value is simply that value. Kernels never
 * modify their inputs, so every "modifying" op builds a new sequence of cloned items. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"


/* ---- helpers ---- */

/* The code of the error a helper just set (err may be NULL: the caller did not ask for text). */
static kiln_code errcode(const kiln_kctx *c) {
  return c->err && c->err->code ? c->err->code : KILN_ERR_NOMEM;
}

static kiln_code need_seq(kiln_kctx *c, const kiln_tensor *s, const char *what) {
  if (!s || s->kind != KILN_KIND_SEQUENCE)
    return kiln_kfail(c, "%s must be a sequence", what);
  return KILN_OK;
}

static kiln_code need_tensor(kiln_kctx *c, const kiln_tensor *t, const char *what) {
  if (!t || t->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "%s must be a tensor", what);
  return KILN_OK;
}

/* A scalar (or one-element) integer position input. */
static kiln_code read_pos(kiln_kctx *c, const kiln_tensor *t, int64_t *pos) {
  if (need_tensor(c, t, "position")) return KILN_ERR_RUN;
  if (t->dtype != KILN_INT32 && t->dtype != KILN_INT64)
    return kiln_kfail(c, "position must be int32 or int64, got %s", kiln_dtype_name(t->dtype));
  if (t->numel != 1) return kiln_kfail(c, "position must be a scalar");
  *pos = kiln_get_i64(t, 0);
  return KILN_OK;
}

/* A new sequence of element type `dtype` holding clones of src's items (empty when src is NULL). */
static kiln_tensor *seq_copy(kiln_kctx *c, const kiln_tensor *src, kiln_dtype dtype) {
  kiln_tensor *s = NULL;
  if (kiln_sequence_create(dtype, &s, c->err)) return NULL;
  for (size_t i = 0; src && i < src->n_items; i++) {
    kiln_tensor *it = kiln_tensor_clone(src->items[i], c->err);
    if (!it || kiln_sequence_append(s, it, c->err)) {
      kiln_tensor_free(it);
      kiln_tensor_free(s);
      return NULL;
    }
  }
  return s;
}

/* Append a clone of `t` to `s`; on failure s is left intact and an error is set. */
static kiln_code seq_push_clone(kiln_kctx *c, kiln_tensor *s, const kiln_tensor *t) {
  kiln_tensor *it = kiln_tensor_clone(t, c->err);
  if (!it) return errcode(c);
  kiln_code rc = kiln_sequence_append(s, it, c->err);
  if (rc) kiln_tensor_free(it);
  return rc;
}

static void infer_seq(kiln_ictx *c, size_t i, kiln_dtype dtype) {
  if (i >= c->n_out || !c->out[i]) return;
  kiln_type *t = c->out[i];
  kiln_type_clear(t);
  t->kind = KILN_T_SEQUENCE;
  t->inner = KILN_T_TENSOR;
  t->dtype = dtype;
  t->rank = -1;
}

/* Element type of a sequence input's type, or UNDEFINED. */
static kiln_dtype seq_dtype(const kiln_type *t) {
  return t && t->kind == KILN_T_SEQUENCE ? t->dtype : KILN_UNDEFINED;
}

/* ---- SequenceConstruct / SequenceEmpty ---- */

static kiln_code construct_infer(kiln_ictx *c) {
  const kiln_type *t = c->in[0];
  if (t && t->kind == KILN_T_TENSOR) infer_seq(c, 0, t->dtype);
  return KILN_OK;
}

static kiln_code construct_run(kiln_kctx *c) {
  for (size_t i = 0; i < c->n_in; i++) {
    if (need_tensor(c, c->in[i], "every input")) return KILN_ERR_RUN;
    if (c->in[i]->dtype != c->in[0]->dtype)
      return kiln_kfail(c, "input %zu is %s but input 0 is %s", i,
                        kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(c->in[0]->dtype));
  }
  kiln_tensor *s = seq_copy(c, NULL, c->in[0]->dtype);
  if (!s) return errcode(c);
  for (size_t i = 0; i < c->n_in; i++)
    if (seq_push_clone(c, s, c->in[i])) {
      kiln_tensor_free(s);
      return errcode(c);
    }
  kiln_set_out(c, 0, s);
  return KILN_OK;
}

static kiln_code empty_infer(kiln_ictx *c) {
  infer_seq(c, 0, (kiln_dtype)kiln_attr_int(c->node, "dtype", KILN_FLOAT));
  return KILN_OK;
}

static kiln_code empty_run(kiln_kctx *c) {
  int64_t dt = kiln_attr_int(c->node, "dtype", KILN_FLOAT);
  if (dt <= 0 || dt > KILN_BFLOAT16 || !kiln_dtype_size((kiln_dtype)dt))
    return kiln_kfail(c, "dtype %lld is not a supported tensor element type", (long long)dt);
  kiln_tensor *s = seq_copy(c, NULL, (kiln_dtype)dt);
  if (!s) return errcode(c);
  kiln_set_out(c, 0, s);
  return KILN_OK;
}

/* ---- SequenceAt / SequenceInsert / SequenceErase / SequenceLength ---- */

static kiln_code at_infer(kiln_ictx *c) {
  if (c->in[0] && c->in[0]->kind == KILN_T_SEQUENCE && c->in[0]->inner != KILN_T_SEQUENCE &&
      c->in[0]->inner != KILN_T_OPTIONAL && c->in[0]->inner != KILN_T_MAP)
    kiln_infer_tensor(c, 0, seq_dtype(c->in[0]), -1, NULL);
  return KILN_OK;
}

static kiln_code at_run(kiln_kctx *c) {
  const kiln_tensor *s = c->in[0];
  int64_t pos = 0;
  if (need_seq(c, s, "input_sequence") || read_pos(c, c->in[1], &pos)) return KILN_ERR_RUN;
  int64_t n = (int64_t)s->n_items;
  if (pos < -n || pos >= n)
    return kiln_kfail(c, "position %lld is out of range for a sequence of %lld items",
                      (long long)pos, (long long)n);
  if (pos < 0) pos += n;
  kiln_tensor *t = kiln_tensor_clone(s->items[pos], c->err);
  if (!t) return errcode(c);
  kiln_set_out(c, 0, t);
  return KILN_OK;
}

static kiln_code same_seq_infer(kiln_ictx *c) {
  if (c->in[0] && c->in[0]->kind == KILN_T_SEQUENCE) infer_seq(c, 0, c->in[0]->dtype);
  return KILN_OK;
}

static kiln_code insert_run(kiln_kctx *c) {
  const kiln_tensor *s = c->in[0], *t = c->in[1];
  if (need_seq(c, s, "input_sequence") || need_tensor(c, t, "tensor")) return KILN_ERR_RUN;
  /* an empty sequence (e.g. a loaded file, whose element type is a guess) takes any type */
  if (s->n_items && s->dtype && t->dtype != s->dtype)
    return kiln_kfail(c, "cannot insert a %s tensor into a sequence of %s",
                      kiln_dtype_name(t->dtype), kiln_dtype_name(s->dtype));
  int64_t n = (int64_t)s->n_items, pos = n;
  if (kiln_in(c, 2) && read_pos(c, c->in[2], &pos)) return KILN_ERR_RUN;
  if (pos < -n || pos > n)
    return kiln_kfail(c, "position %lld is out of range for inserting into %lld items",
                      (long long)pos, (long long)n);
  if (pos < 0) pos += n;
  kiln_tensor *o = seq_copy(c, NULL, t->dtype);
  if (!o) return errcode(c);
  for (int64_t i = 0; i <= n; i++) {
    kiln_code rc = KILN_OK;
    if (i == pos) rc = seq_push_clone(c, o, t);
    if (!rc && i < n) rc = seq_push_clone(c, o, s->items[i]);
    if (rc) {
      kiln_tensor_free(o);
      return rc;
    }
  }
  kiln_set_out(c, 0, o);
  return KILN_OK;
}

static kiln_code erase_run(kiln_kctx *c) {
  const kiln_tensor *s = c->in[0];
  if (need_seq(c, s, "input_sequence")) return KILN_ERR_RUN;
  int64_t n = (int64_t)s->n_items, pos = n - 1;
  if (kiln_in(c, 1) && read_pos(c, c->in[1], &pos)) return KILN_ERR_RUN;
  if (pos < -n || pos >= n)
    return kiln_kfail(c, "position %lld is out of range for a sequence of %lld items",
                      (long long)pos, (long long)n);
  if (pos < 0) pos += n;
  kiln_tensor *o = seq_copy(c, NULL, s->dtype);
  if (!o) return errcode(c);
  for (int64_t i = 0; i < n; i++)
    if (i != pos && seq_push_clone(c, o, s->items[i])) {
      kiln_tensor_free(o);
      return errcode(c);
    }
  kiln_set_out(c, 0, o);
  return KILN_OK;
}

static kiln_code length_infer(kiln_ictx *c) {
  kiln_infer_tensor(c, 0, KILN_INT64, 0, NULL);
  return KILN_OK;
}

static kiln_code length_run(kiln_kctx *c) {
  if (need_seq(c, c->in[0], "input_sequence")) return KILN_ERR_RUN;
  kiln_tensor *o = kiln_out(c, 0, KILN_INT64, 0, NULL);
  if (!o) return errcode(c);
  ((int64_t *)o->data)[0] = (int64_t)c->in[0]->n_items;
  return KILN_OK;
}

/* ---- SplitToSequence / ConcatFromSequence ---- */

static kiln_code split_infer(kiln_ictx *c) {
  if (c->in[0] && c->in[0]->kind == KILN_T_TENSOR) infer_seq(c, 0, c->in[0]->dtype);
  return KILN_OK;
}

/* Items are slabs [lo, hi) of `axis`; outer/inner are the element counts around it. */
static kiln_tensor *split_piece(kiln_kctx *c, const kiln_tensor *x, int axis, int64_t lo,
                                int64_t hi, bool keep) {
  int64_t dims[KILN_MAX_RANK], outer = 1, inner = 1, len = hi - lo;
  int r = 0;
  for (int d = 0; d < x->rank; d++) {
    if (d < axis) outer *= x->dims[d];
    if (d > axis) inner *= x->dims[d];
    if (d != axis) dims[r++] = x->dims[d];
    else if (keep) dims[r++] = len;
  }
  kiln_error *err = c->err;
  kiln_tensor *t = kiln_tensor_new(x->dtype, r, dims, err);
  if (!t) return NULL;
  int64_t n = x->dims[axis];
  for (int64_t o = 0; o < outer; o++)
    kiln_copy_elems(t, o * len * inner, x, (o * n + lo) * inner, len * inner);
  return t;
}

static kiln_code split_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0], *sp = kiln_in(c, 1);
  if (need_tensor(c, x, "input")) return KILN_ERR_RUN;
  if (x->rank < 1) return kiln_kfail(c, "input must have rank >= 1");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), x->rank);
  if (axis < 0) return KILN_ERR_RUN;
  bool keep = kiln_attr_int(c->node, "keepdims", 1) != 0;
  int64_t n = x->dims[axis];
  int64_t *cuts = NULL; /* piece boundaries, n_pieces + 1 of them */
  int64_t pieces = 0;
  if (!sp) {
    pieces = n;
    cuts = malloc((size_t)(n + 1) * sizeof *cuts);
    if (!cuts) return kiln_kfail(c, "out of memory");
    for (int64_t i = 0; i <= n; i++) cuts[i] = i;
  } else {
    keep = true; /* keepdims applies only without `split` */
    if (need_tensor(c, sp, "split")) return KILN_ERR_RUN;
    if (sp->dtype != KILN_INT32 && sp->dtype != KILN_INT64)
      return kiln_kfail(c, "split must be int32 or int64");
    if (sp->rank == 0) {
      int64_t size = kiln_get_i64(sp, 0);
      if (size <= 0) return kiln_kfail(c, "split size %lld must be positive", (long long)size);
      pieces = n / size + (n % size != 0);
      cuts = malloc((size_t)(pieces + 1) * sizeof *cuts);
      if (!cuts) return kiln_kfail(c, "out of memory");
      for (int64_t i = 0; i < pieces; i++) cuts[i] = i * size;
      cuts[pieces] = n;
    } else if (sp->rank == 1) {
      pieces = sp->numel;
      cuts = malloc((size_t)(pieces + 1) * sizeof *cuts);
      if (!cuts) return kiln_kfail(c, "out of memory");
      cuts[0] = 0;
      for (int64_t i = 0; i < pieces; i++) {
        int64_t v = kiln_get_i64(sp, i);
        if (v < 0 || v > n - cuts[i]) {
          free(cuts);
          return kiln_kfail(c, "split sizes do not add up to the axis length %lld", (long long)n);
        }
        cuts[i + 1] = cuts[i] + v;
      }
      int64_t sum = cuts[pieces];
      if (sum != n) {
        free(cuts);
        return kiln_kfail(c, "split sizes add up to %lld, the axis length is %lld",
                          (long long)sum, (long long)n);
      }
    } else {
      return kiln_kfail(c, "split must be a scalar or a 1-D tensor");
    }
  }
  kiln_tensor *s = seq_copy(c, NULL, x->dtype);
  kiln_code rc = s ? KILN_OK : errcode(c);
  for (int64_t i = 0; i < pieces && !rc; i++) {
    kiln_tensor *t = split_piece(c, x, axis, cuts[i], cuts[i + 1], keep);
    if (!t || kiln_sequence_append(s, t, c->err)) {
      kiln_tensor_free(t);
      rc = errcode(c);
    }
  }
  free(cuts);
  if (rc) {
    kiln_tensor_free(s);
    return rc;
  }
  kiln_set_out(c, 0, s);
  return KILN_OK;
}

static kiln_code concat_infer(kiln_ictx *c) {
  if (c->in[0] && c->in[0]->kind == KILN_T_SEQUENCE)
    kiln_infer_tensor(c, 0, c->in[0]->dtype, -1, NULL);
  return KILN_OK;
}

static kiln_code concat_run(kiln_kctx *c) {
  const kiln_tensor *s = c->in[0];
  if (need_seq(c, s, "input_sequence")) return KILN_ERR_RUN;
  if (s->n_items == 0) return kiln_kfail(c, "cannot concatenate an empty sequence");
  bool stack = kiln_attr_int(c->node, "new_axis", 0) != 0;
  const kiln_tensor *t0 = s->items[0];
  int r = t0->rank, orank = stack ? r + 1 : r;
  if (!stack && r == 0) return kiln_kfail(c, "cannot concatenate scalars without new_axis");
  if (orank > KILN_MAX_RANK) return kiln_kunsup(c, "result rank exceeds %d", KILN_MAX_RANK);
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), orank);
  if (axis < 0) return KILN_ERR_RUN;
  /* Check shapes: all equal except along `axis` when concatenating. */
  int64_t total = 0;
  for (size_t i = 0; i < s->n_items; i++) {
    const kiln_tensor *t = s->items[i];
    if (t->kind != KILN_KIND_TENSOR || t->dtype != t0->dtype || t->rank != r)
      return kiln_kfail(c, "item %zu differs in kind, type or rank from item 0", i);
    for (int d = 0; d < r; d++)
      if (t->dims[d] != t0->dims[d] && (stack || d != axis))
        return kiln_kfail(c, "item %zu has dim %d = %lld, item 0 has %lld", i, d,
                          (long long)t->dims[d], (long long)t0->dims[d]);
    total += stack ? 1 : t->dims[axis];
  }
  int64_t dims[KILN_MAX_RANK], outer = 1, inner = 1;
  for (int d = 0, k = 0; d < orank; d++) {
    if (stack && d == axis) {
      dims[d] = total;
      continue;
    }
    dims[d] = d == axis ? total : t0->dims[k];
    if (d < axis) outer *= t0->dims[k];
    if (d > axis) inner *= t0->dims[k];
    k++;
  }
  kiln_tensor *o = kiln_out(c, 0, t0->dtype, orank, dims);
  if (!o) return errcode(c);
  int64_t off = 0; /* position along the output axis */
  for (size_t i = 0; i < s->n_items; i++) {
    const kiln_tensor *t = s->items[i];
    int64_t len = stack ? 1 : t->dims[axis];
    for (int64_t q = 0; q < outer; q++)
      kiln_copy_elems(o, (q * total + off) * inner, t, q * len * inner, len * inner);
    off += len;
  }
  return KILN_OK;
}

/* ---- SequenceMap ---- */

static kiln_code map_run(kiln_kctx *c) {
  const kiln_attr *a = kiln_node_attr(c->node, "body");
  if (!a || !a->g) return kiln_kfail(c, "missing 'body' graph attribute");
  const kiln_graph *g = a->g;
  const kiln_tensor *s0 = c->in[0];
  if (need_seq(c, s0, "input_sequence")) return KILN_ERR_RUN;
  if (g->n_inputs != c->n_in || g->n_outputs != c->n_out)
    return kiln_kfail(c, "body takes %zu inputs and gives %zu outputs; the node has %zu and %zu",
                      g->n_inputs, g->n_outputs, c->n_in, c->n_out);
  size_t n = s0->n_items;
  for (size_t k = 1; k < c->n_in; k++)
    if (c->in[k] && c->in[k]->kind == KILN_KIND_SEQUENCE && c->in[k]->n_items != n)
      return kiln_kfail(c, "input %zu has %zu items, input_sequence has %zu", k,
                        c->in[k]->n_items, n);
  const kiln_tensor **ins = calloc(c->n_in, sizeof *ins);
  kiln_tensor **outs = calloc(c->n_out, sizeof *outs);
  kiln_code rc = ins && outs ? KILN_OK : kiln_kfail(c, "out of memory");
  for (size_t j = 0; j < c->n_out && !rc; j++) {
    /* element type from the body's declared output; fixed up from the first item */
    kiln_dtype dt = g->values[g->outputs[j]].type.dtype;
    if (kiln_sequence_create(dt, &outs[j], c->err)) rc = errcode(c);
  }
  kiln_tensor **res = calloc(c->n_out ? c->n_out : 1, sizeof *res);
  if (!res && !rc) rc = kiln_kfail(c, "out of memory");
  for (size_t i = 0; i < n && !rc; i++) {
    for (size_t k = 0; k < c->n_in; k++) {
      const kiln_tensor *v = c->in[k];
      ins[k] = v && v->kind == KILN_KIND_SEQUENCE ? v->items[i] : v;
    }
    rc = kiln_subgraph_run(c, g, c->n_in, ins, res);
    for (size_t j = 0; j < c->n_out && !rc; j++) {
      if (res[j]->kind != KILN_KIND_TENSOR) {
        rc = kiln_kfail(c, "body output %zu is not a tensor", j);
        break;
      }
      if (outs[j]->n_items == 0) outs[j]->dtype = res[j]->dtype;
      if (kiln_sequence_append(outs[j], res[j], c->err)) {
        rc = errcode(c);
        break;
      }
      res[j] = NULL;
    }
    for (size_t j = 0; j < c->n_out && res; j++) {
      kiln_tensor_free(res[j]);
      res[j] = NULL;
    }
  }
  for (size_t j = 0; j < c->n_out && outs; j++) {
    if (!rc) kiln_set_out(c, j, outs[j]);
    else kiln_tensor_free(outs[j]);
  }
  free(res);
  free(outs);
  free(ins);
  return rc;
}

static kiln_code map_infer(kiln_ictx *c) {
  const kiln_attr *a = kiln_node_attr(c->node, "body");
  if (!a || !a->g) return kiln_ifail(c, "missing 'body' graph attribute");
  if (a->g->n_inputs != c->n_in || a->g->n_outputs != c->n_out)
    return kiln_ifail(c, "body takes %zu inputs and gives %zu outputs; the node has %zu and %zu",
                      a->g->n_inputs, a->g->n_outputs, c->n_in, c->n_out);
  for (size_t j = 0; j < c->n_out; j++) {
    const kiln_type *t = &a->g->values[a->g->outputs[j]].type;
    infer_seq(c, j, t->kind == KILN_T_TENSOR ? t->dtype : KILN_UNDEFINED);
  }
  return KILN_OK;
}

/* ---- Optional / OptionalHasElement / OptionalGetElement ---- */

static kiln_code optional_infer(kiln_ictx *c) {
  const kiln_type *in = c->n_in ? c->in[0] : NULL;
  if (c->n_out < 1 || !c->out[0]) return KILN_OK;
  kiln_type *t = c->out[0];
  const kiln_attr *a = kiln_node_attr(c->node, "type");
  const kiln_type *src = in ? in : (a && a->kind == KILN_ATTR_TYPE_PROTO ? &a->tp : NULL);
  if (!src || src->kind == KILN_T_UNKNOWN || src->kind == KILN_T_OPTIONAL) return KILN_OK;
  kiln_type_clear(t);
  t->kind = KILN_T_OPTIONAL;
  t->inner = src->kind;
  t->dtype = src->dtype;
  t->rank = -1;
  return KILN_OK;
}

static kiln_code optional_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  kiln_tensor *o = NULL;
  if (x) {
    if (!(o = kiln_tensor_clone(x, c->err))) return errcode(c);
  } else {
    const kiln_attr *a = kiln_node_attr(c->node, "type");
    if (!a || a->kind != KILN_ATTR_TYPE_PROTO)
      return kiln_kfail(c, "an Optional without input needs the 'type' attribute");
    if (kiln_none_create(a->tp.dtype, &o, c->err)) return errcode(c);
  }
  kiln_set_out(c, 0, o);
  return KILN_OK;
}

static kiln_code has_infer(kiln_ictx *c) {
  kiln_infer_tensor(c, 0, KILN_BOOL, 0, NULL);
  return KILN_OK;
}

static kiln_code has_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0); /* omitted input (opset 18) means "no element" */
  kiln_tensor *o = kiln_out(c, 0, KILN_BOOL, 0, NULL);
  if (!o) return errcode(c);
  ((uint8_t *)o->data)[0] = x && x->kind != KILN_KIND_NONE;
  return KILN_OK;
}

static kiln_code get_infer(kiln_ictx *c) {
  const kiln_type *t = c->in[0];
  if (!t) return KILN_OK;
  kiln_tkind k = t->kind == KILN_T_OPTIONAL ? t->inner : t->kind;
  if (k == KILN_T_TENSOR) kiln_infer_tensor(c, 0, t->dtype, t->kind == KILN_T_TENSOR ? t->rank : -1,
                                            t->kind == KILN_T_TENSOR ? t->dims : NULL);
  else if (k == KILN_T_SEQUENCE) infer_seq(c, 0, t->dtype);
  return KILN_OK;
}

static kiln_code get_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  if (!x || x->kind == KILN_KIND_NONE) return kiln_kfail(c, "the optional input is empty");
  kiln_tensor *o = kiln_tensor_clone(x, c->err);
  if (!o) return errcode(c);
  kiln_set_out(c, 0, o);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_sequence[] = {
    {.domain = "", .name = "SequenceConstruct", .since = 11, .inputs = {1, KILN_VARIADIC}, .outputs = {1, 1},
     .infer = construct_infer, .run = construct_run},
    {.domain = "", .name = "SequenceEmpty", .since = 11, .inputs = {0, 0}, .outputs = {1, 1},
     .infer = empty_infer, .run = empty_run},
    {.domain = "", .name = "SequenceAt", .since = 11, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = at_infer, .run = at_run},
    {.domain = "", .name = "SequenceInsert", .since = 11, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = same_seq_infer, .run = insert_run},
    {.domain = "", .name = "SequenceErase", .since = 11, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = same_seq_infer, .run = erase_run},
    {.domain = "", .name = "SequenceLength", .since = 11, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = length_infer, .run = length_run},
    {.domain = "", .name = "SplitToSequence", .since = 11, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = split_infer, .run = split_run},
    {.domain = "", .name = "ConcatFromSequence", .since = 11, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = concat_infer, .run = concat_run},
    {.domain = "", .name = "SequenceMap", .since = 17,
     .inputs = {1, KILN_VARIADIC}, .outputs = {1, KILN_VARIADIC},
     .infer = map_infer, .run = map_run},
    {.domain = "", .name = "Optional", .since = 15, .inputs = {0, 1}, .outputs = {1, 1},
     .infer = optional_infer, .run = optional_run},
    {.domain = "", .name = "OptionalHasElement", .since = 15, .inputs = {0, 1}, .outputs = {1, 1},
     .infer = has_infer, .run = has_run},
    {.domain = "", .name = "OptionalGetElement", .since = 15, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = get_infer, .run = get_run},
    {0},
};
