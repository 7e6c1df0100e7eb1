/* The adapter from the public op description (kiln_op.h) to kiln's internal kiln_op_schema:
 * checks a description, infers through the op's callback, runs its kernel lifecycle, and
 * gives fused plugin nodes the same fallback to their original chain as kiln's own. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "plugin/internal.h"


/* Element types a plugin tensor may have. */
#define DT_VALID                                                                                 \
  (KILN_DT_BIT(KILN_DT_FLOAT) | KILN_DT_BIT(KILN_DT_UINT8) | KILN_DT_BIT(KILN_DT_INT8) |         \
   KILN_DT_BIT(KILN_DT_UINT16) | KILN_DT_BIT(KILN_DT_INT16) | KILN_DT_BIT(KILN_DT_INT32) |       \
   KILN_DT_BIT(KILN_DT_INT64) | KILN_DT_BIT(KILN_DT_BOOL) | KILN_DT_BIT(KILN_DT_FLOAT16) |       \
   KILN_DT_BIT(KILN_DT_DOUBLE) | KILN_DT_BIT(KILN_DT_UINT32) | KILN_DT_BIT(KILN_DT_UINT64) |     \
   KILN_DT_BIT(KILN_DT_BFLOAT16))

/* The size of kiln_op_desc in ABI 1.0 (fields up to and including `flags`). */
#define DESC_V1_SIZE (offsetof(kiln_op_desc, flags) + sizeof(uint32_t))

enum { IO_CAP = 64 };

/* ---- small helpers ---------------------------------------------------------------------- */

kiln_code kiln_code_from_status(kiln_status st) {
  switch (st) {
    case KILN_STATUS_OK: return KILN_OK;
    case KILN_STATUS_INVALID_ARG: return KILN_ERR_INVALID_ARG;
    case KILN_STATUS_UNSUPPORTED:
    case KILN_STATUS_ABI_MISMATCH: return KILN_ERR_UNSUPPORTED;
    case KILN_STATUS_NOMEM: return KILN_ERR_NOMEM;
    default: return KILN_ERR_RUN;
  }
}

kiln_status kiln_status_from_code(kiln_code rc) {
  switch (rc) {
    case KILN_OK: return KILN_STATUS_OK;
    case KILN_ERR_INVALID_ARG: return KILN_STATUS_INVALID_ARG;
    case KILN_ERR_UNSUPPORTED: return KILN_STATUS_UNSUPPORTED;
    case KILN_ERR_NOMEM: return KILN_STATUS_NOMEM;
    default: return KILN_STATUS_ERROR;
  }
}

const char *kiln_status_text(kiln_status st) {
  switch (st) {
    case KILN_STATUS_OK: return "ok";
    case KILN_STATUS_ERROR: return "error";
    case KILN_STATUS_INVALID_ARG: return "invalid argument";
    case KILN_STATUS_UNSUPPORTED: return "unsupported";
    case KILN_STATUS_NOMEM: return "out of memory";
    case KILN_STATUS_ABI_MISMATCH: return "ABI version mismatch";
    case KILN_STATUS_NOT_FOUND: return "not found";
  }
  return "unknown status";
}

const char *kiln_op_label(const char *domain, const char *name, char *buf, size_t len) {
  bool dflt = !domain || !*domain;
  snprintf(buf, len, "%s%s%s", dflt ? "" : domain, dflt ? "" : "::", name ? name : "<unnamed>");
  return buf;
}

static const char *dtype_list(uint32_t mask, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (int t = 1; t <= KILN_DT_BFLOAT16; t++)
    if (mask & KILN_DT_BIT(t)) {
      int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", kiln_dtype_name((kiln_dtype)t));
      if (w < 0 || (size_t)w >= len - at) break;
      at += (size_t)w;
    }
  return buf;
}

static const kiln_op_io *io_at(const kiln_op_io *ios, uint32_t n, size_t i) {
  if (n == 0) return NULL;
  if (i < n) return &ios[i];
  return (ios[n - 1].flags & KILN_OP_IO_VARIADIC) ? &ios[n - 1] : NULL;
}

static bool dtype_allowed(const kiln_op_io *io, int32_t dt) {
  if (dt == KILN_STRING || dt < 0 || dt > KILN_DT_BFLOAT16 || !(DT_VALID & KILN_DT_BIT(dt)))
    return false;
  return !io || io->dtypes == 0 || (io->dtypes & KILN_DT_BIT(dt));
}

const kiln_op_attr *kiln_adapted_attr(const kiln_adapted_op *op, const char *name) {
  for (uint32_t i = 0; op && i < op->d.n_attrs; i++)
    if (!strcmp(op->d.attrs[i].name, name)) return &op->d.attrs[i];
  return NULL;
}

/* ---- descriptions ----------------------------------------------------------------------- */

static char *dup_or_null(const char *s, bool *oom) {
  if (!s) return NULL;
  char *p = kiln_strdup(s);
  if (!p) *oom = true;
  return p;
}

void kiln_adapted_op_clear(kiln_adapted_op *op) {
  if (!op) return;
  if (op->owned) {
    free((char *)op->d.domain);
    free((char *)op->d.name);
    for (uint32_t i = 0; op->d.inputs && i < op->d.n_inputs; i++) free((char *)op->d.inputs[i].name);
    for (uint32_t i = 0; op->d.outputs && i < op->d.n_outputs; i++) free((char *)op->d.outputs[i].name);
    for (uint32_t i = 0; op->d.attrs && i < op->d.n_attrs; i++) {
      free((char *)op->d.attrs[i].name);
      free((char *)op->d.attrs[i].default_string);
    }
    free((void *)op->d.inputs);
    free((void *)op->d.outputs);
    free((void *)op->d.attrs);
  }
  memset(op, 0, sizeof *op);
}

static kiln_code copy_ios(const kiln_op_io *src, uint32_t n, const kiln_op_io **dst, bool *oom) {
  kiln_op_io *a = kiln_calloc(n, sizeof *a);
  if (!a) return *oom = true, KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    a[i] = src[i];
    a[i].name = dup_or_null(src[i].name, oom);
  }
  *dst = a;
  return *oom ? KILN_ERR_NOMEM : KILN_OK;
}

static kiln_code check_ios(const kiln_op_io *ios, uint32_t n, const char *what, const char *lbl,
                           int *min, int *max, kiln_error *err) {
  *min = 0;
  *max = (int)n;
  if (n > IO_CAP)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': %u %ss (at most %d)",
                     lbl, n, what, IO_CAP);
  if (n && !ios)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': n_%ss is %u but %ss is NULL",
                     lbl, what, n, what);
  bool optional_seen = false;
  for (uint32_t i = 0; i < n; i++) {
    const kiln_op_io *io = &ios[i];
    if (!io->name || !*io->name)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': %s %u has no name",
                       lbl, what, i);
    if (io->flags & ~(uint32_t)(KILN_OP_IO_OPTIONAL | KILN_OP_IO_VARIADIC))
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': %s %u ('%s') has unknown flags 0x%x",
                       lbl, what, i, io->name, io->flags);
    if (io->dtypes & ~(uint32_t)DT_VALID)
      return kiln_fail(err, KILN_ERR_INVALID_ARG,
                       "invalid description of op '%s': %s %u ('%s') allows element types kiln cannot pass to a plugin "
                       "(mask 0x%x; strings and complex numbers are not supported)",
                       lbl, what, i, io->name, io->dtypes & ~(uint32_t)DT_VALID);
    if ((io->flags & KILN_OP_IO_VARIADIC) && i + 1 != n)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': only the last %s may be variadic ('%s' is %s %u of %u)",
                       lbl, what, io->name, what, i, n);
    if (io->flags & KILN_OP_IO_OPTIONAL)
      optional_seen = true;
    else if (optional_seen)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': required %s '%s' follows an optional one",
                       lbl, what, io->name);
    else
      *min = (int)i + 1;
    if (io->flags & KILN_OP_IO_VARIADIC) *max = KILN_VARIADIC;
  }
  return KILN_OK;
}

static kiln_code adapter_infer(kiln_ictx *c);
static kiln_code adapter_run(kiln_kctx *c);

kiln_code kiln_adapt_op(const kiln_op_desc *desc, bool copy, kiln_adapted_op *out, kiln_error *err) {
  char lbl[300];
  memset(out, 0, sizeof *out);
  if (!desc) return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description: register_op was given NULL");
  if (desc->size < 2 * sizeof(uint32_t))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description: size %u is too small to be a kiln_op_desc",
                     desc->size);
  uint32_t v = desc->abi_version;
  if (KILN_OP_ABI_MAJOR_OF(v) != KILN_OP_ABI_MAJOR || KILN_OP_ABI_MINOR_OF(v) > KILN_OP_ABI_MINOR)
    return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                     "ABI version mismatch: an op is described for kiln op ABI %u.%u, but this kiln implements "
                     "ABI %u.%u (same major, minor at most %u); rebuild the plugin against this kiln's kiln_op.h",
                     KILN_OP_ABI_MAJOR_OF(v), KILN_OP_ABI_MINOR_OF(v), KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR,
                     KILN_OP_ABI_MINOR);
  if (desc->size < DESC_V1_SIZE)
    return kiln_fail(err, KILN_ERR_INVALID_ARG,
                     "invalid description: size %u is smaller than kiln_op_desc of ABI %u.0 (%zu bytes); set size = sizeof(kiln_op_desc)",
                     desc->size, KILN_OP_ABI_MAJOR, (size_t)DESC_V1_SIZE);
  kiln_op_desc d;
  memset(&d, 0, sizeof d);
  memcpy(&d, desc, desc->size < sizeof d ? desc->size : sizeof d);
  kiln_op_label(d.domain, d.name, lbl, sizeof lbl);
  if (!d.name || !*d.name)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description: an op in domain '%s' has no name",
                     d.domain ? d.domain : "");
  if (!d.domain)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': domain is NULL (use \"\" for ai.onnx)", lbl);
  if (copy && !strcmp(d.domain, KILN_FUSED_DOMAIN))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': domain '%s' is reserved for kiln's own ops",
                     lbl, KILN_FUSED_DOMAIN);
  if (d.since_version < 1 || (d.until_version != 0 && d.until_version < d.since_version))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': opset range %d..%d is empty "
                     "(since_version >= 1, until_version 0 or >= since_version)", lbl, d.since_version, d.until_version);
  if (!d.compute)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': compute is NULL", lbl);
  if (d.create && !d.destroy)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': create is given without destroy", lbl);
  if (d.flags & ~(uint32_t)KILN_OP_FLAG_OPEN_ATTRS)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': unknown flags 0x%x", lbl, d.flags);
  int min_in, max_in, min_out, max_out;
  kiln_code rc = check_ios(d.inputs, d.n_inputs, "input", lbl, &min_in, &max_in, err);
  if (!rc) rc = check_ios(d.outputs, d.n_outputs, "output", lbl, &min_out, &max_out, err);
  if (rc) return rc;
  if (d.n_outputs == 0)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': it has no outputs", lbl);
  if (d.n_attrs && !d.attrs)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': n_attrs is %u but attrs is NULL", lbl, d.n_attrs);
  for (uint32_t i = 0; i < d.n_attrs; i++) {
    const kiln_op_attr *a = &d.attrs[i];
    if (!a->name || !*a->name)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': attribute %u has no name", lbl, i);
    if (!strcmp(a->name, "original"))
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': attribute name 'original' is reserved "
                       "(fused nodes keep their chain in it)", lbl);
    if (a->type < KILN_OP_ATTR_INT || a->type > KILN_OP_ATTR_FLOATS)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': attribute '%s' has unknown type %u",
                       lbl, a->name, a->type);
    if (a->required > 1)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': attribute '%s': required must be 0 or 1",
                       lbl, a->name);
    for (uint32_t j = 0; j < i; j++)
      if (!strcmp(d.attrs[j].name, a->name))
        return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid description of op '%s': attribute '%s' is declared twice",
                         lbl, a->name);
  }
  out->d = d;
  out->d.size = sizeof out->d;
  if (copy) {
    bool oom = false;
    out->owned = true;
    out->d.domain = dup_or_null(d.domain, &oom);
    out->d.name = dup_or_null(d.name, &oom);
    out->d.inputs = NULL;
    out->d.outputs = NULL;
    out->d.attrs = NULL;
    if (!oom) copy_ios(d.inputs, d.n_inputs, &out->d.inputs, &oom);
    if (!oom) copy_ios(d.outputs, d.n_outputs, &out->d.outputs, &oom);
    if (!oom) {
      kiln_op_attr *a = kiln_calloc(d.n_attrs, sizeof *a);
      if (!a) oom = true;
      for (uint32_t i = 0; a && i < d.n_attrs; i++) {
        a[i] = d.attrs[i];
        a[i].name = dup_or_null(d.attrs[i].name, &oom);
        a[i].default_string = dup_or_null(d.attrs[i].default_string, &oom);
      }
      out->d.attrs = a;
    }
    if (oom) {
      kiln_adapted_op_clear(out);
      return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    }
  }
  out->schema = (kiln_op_schema){.domain = out->d.domain, .name = out->d.name, .since = d.since_version,
                                 .inputs = {min_in, max_in}, .outputs = {min_out, max_out},
                                 .infer = adapter_infer, .run = adapter_run};
  return KILN_OK;
}

const kiln_adapted_op *kiln_adapted_from_schema(const kiln_op_schema *s) {
  if (!s || s->run != adapter_run) return NULL;
  return (const kiln_adapted_op *)(const void *)s; /* schema is the first member */
}

/* ---- attributes ------------------------------------------------------------------------- */

static const char *attr_kind_name(kiln_attr_kind k) {
  switch (k) {
    case KILN_ATTR_INT: return "int";
    case KILN_ATTR_FLOAT: return "float";
    case KILN_ATTR_STRING: return "string";
    case KILN_ATTR_INTS: return "ints";
    case KILN_ATTR_FLOATS: return "floats";
    case KILN_ATTR_GRAPH: return "graph";
    case KILN_ATTR_TENSOR: return "tensor";
    default: return "other";
  }
}

static kiln_attr_kind kind_of(uint32_t t) {
  switch (t) {
    case KILN_OP_ATTR_INT: return KILN_ATTR_INT;
    case KILN_OP_ATTR_FLOAT: return KILN_ATTR_FLOAT;
    case KILN_OP_ATTR_STRING: return KILN_ATTR_STRING;
    case KILN_OP_ATTR_INTS: return KILN_ATTR_INTS;
    default: return KILN_ATTR_FLOATS;
  }
}

/* The node's attributes against the declaration: declared types, required ones present, no
 * undeclared ones (but the fused node's "original"). */
static kiln_code check_node_attrs(const kiln_adapted_op *op, const kiln_node *n, kiln_ictx *c) {
  char lbl[300];
  kiln_op_label(op->d.domain, op->d.name, lbl, sizeof lbl);
  for (size_t i = 0; i < n->n_attrs; i++) {
    const kiln_attr *a = &n->attrs[i];
    const kiln_op_attr *d = kiln_adapted_attr(op, a->name);
    if (!d) {
      if ((!strcmp(a->name, "original") && a->kind == KILN_ATTR_GRAPH) || (op->d.flags & KILN_OP_FLAG_OPEN_ATTRS))
        continue;
      char names[512] = "";
      size_t at = 0;
      for (uint32_t k = 0; k < op->d.n_attrs && at < sizeof names; k++) {
        int w = snprintf(names + at, sizeof names - at, "%s%s", k ? ", " : "", op->d.attrs[k].name);
        if (w < 0) break;
        at += (size_t)w;
      }
      return kiln_ifail(c, "attribute '%s' is not declared by %s (declared: %s)", a->name, lbl,
                        op->d.n_attrs ? names : "none");
    }
    if (a->kind != kind_of(d->type))
      return kiln_ifail(c, "attribute '%s' is %s; %s declares it %s", a->name, attr_kind_name(a->kind), lbl,
                        attr_kind_name(kind_of(d->type)));
  }
  for (uint32_t k = 0; k < op->d.n_attrs; k++)
    if (op->d.attrs[k].required && !kiln_node_attr(n, op->d.attrs[k].name))
      return kiln_ifail(c, "%s requires attribute '%s'", lbl, op->d.attrs[k].name);
  return KILN_OK;
}

/* Look up attribute `name` expecting `type`: *a is the node's, or NULL with *d the declaration
 * whose default applies. */
static kiln_status find_attr(const kiln_op_attrs *at, const char *name, uint32_t type,
                             const kiln_attr **a, const kiln_op_attr **d) {
  *a = NULL;
  *d = NULL;
  if (!at || !name) return KILN_STATUS_INVALID_ARG;
  const kiln_attr *na = at->node ? kiln_node_attr(at->node, name) : NULL;
  if (na) {
    if (na->kind != kind_of(type)) return KILN_STATUS_INVALID_ARG;
    *a = na;
    return KILN_STATUS_OK;
  }
  const kiln_op_attr *decl = kiln_adapted_attr(at->op, name);
  if (!decl || decl->required) return KILN_STATUS_NOT_FOUND;
  if (decl->type != type) return KILN_STATUS_INVALID_ARG;
  *d = decl;
  return KILN_STATUS_OK;
}

static kiln_status api_attr_int(const kiln_op_attrs *at, const char *name, int64_t *out) {
  const kiln_attr *a;
  const kiln_op_attr *d;
  kiln_status st = find_attr(at, name, KILN_OP_ATTR_INT, &a, &d);
  if (st == KILN_STATUS_OK && out) *out = a ? a->i : d->default_int;
  return st;
}

static kiln_status api_attr_float(const kiln_op_attrs *at, const char *name, float *out) {
  const kiln_attr *a;
  const kiln_op_attr *d;
  kiln_status st = find_attr(at, name, KILN_OP_ATTR_FLOAT, &a, &d);
  if (st == KILN_STATUS_OK && out) *out = a ? a->f : (float)d->default_float;
  return st;
}

static kiln_status api_attr_string(const kiln_op_attrs *at, const char *name, const char **out) {
  const kiln_attr *a;
  const kiln_op_attr *d;
  kiln_status st = find_attr(at, name, KILN_OP_ATTR_STRING, &a, &d);
  if (st == KILN_STATUS_OK && out) *out = a ? (a->s ? a->s : "") : (d->default_string ? d->default_string : "");
  return st;
}

static kiln_status api_attr_ints(const kiln_op_attrs *at, const char *name, const int64_t **out,
                                 size_t *count) {
  const kiln_attr *a;
  const kiln_op_attr *d;
  kiln_status st = find_attr(at, name, KILN_OP_ATTR_INTS, &a, &d);
  if (st == KILN_STATUS_OK) {
    if (out) *out = a ? a->ints : NULL;
    if (count) *count = a ? a->n : 0;
  }
  return st;
}

static kiln_status api_attr_floats(const kiln_op_attrs *at, const char *name, const float **out,
                                   size_t *count) {
  const kiln_attr *a;
  const kiln_op_attr *d;
  kiln_status st = find_attr(at, name, KILN_OP_ATTR_FLOATS, &a, &d);
  if (st == KILN_STATUS_OK) {
    if (out) *out = a ? a->floats : NULL;
    if (count) *count = a ? a->n : 0;
  }
  return st;
}

KILN_PRINTF(3, 4)
static kiln_status api_attrs_error(const kiln_op_attrs *at, kiln_status code, const char *fmt, ...) {
  if (code == KILN_STATUS_OK) code = KILN_STATUS_ERROR;
  if (!at) return code;
  char msg[700], lbl[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  kiln_code rc = kiln_code_from_status(code);
  if (at->code) *at->code = rc;
  kiln_fail(at->err, rc, "%s: %s", kiln_node_label(at->node, lbl, sizeof lbl), msg);
  return code;
}

/* ---- inference -------------------------------------------------------------------------- */

struct kiln_infer_ctx {
  kiln_ictx *c;
  const kiln_adapted_op *op;
  kiln_op_attrs attrs;
  bool failed;
};

static const kiln_type *in_type(const kiln_infer_ctx *c, size_t i) {
  return c && i < c->c->n_in && c->c->in[i] && c->c->in[i]->kind == KILN_T_TENSOR ? c->c->in[i] : NULL;
}

static size_t api_infer_input_count(const kiln_infer_ctx *c) { return c ? c->c->n_in : 0; }
static int32_t api_infer_input_dtype(const kiln_infer_ctx *c, size_t i) {
  const kiln_type *t = in_type(c, i);
  return t ? (int32_t)t->dtype : 0;
}
static int api_infer_input_rank(const kiln_infer_ctx *c, size_t i) {
  const kiln_type *t = in_type(c, i);
  return t ? t->rank : -1;
}
static int64_t api_infer_input_dim(const kiln_infer_ctx *c, size_t i, int d) {
  const kiln_type *t = in_type(c, i);
  if (!t || d < 0 || d >= t->rank || t->sym[d]) return -1;
  return t->dims[d];
}
static const kiln_op_tensor *api_infer_input_const(const kiln_infer_ctx *c, size_t i) {
  if (!c || i >= c->c->n_in || !c->c->cin[i] || c->c->cin[i]->kind != KILN_KIND_TENSOR ||
      c->c->cin[i]->dtype == KILN_STRING)
    return NULL;
  return (const kiln_op_tensor *)(const void *)c->c->cin[i];
}
static const kiln_op_attrs *api_infer_attrs(const kiln_infer_ctx *c) { return c ? &c->attrs : NULL; }

static kiln_status api_infer_set_output(kiln_infer_ctx *c, size_t i, int32_t dtype, int rank,
                                        const int64_t *dims) {
  if (!c || i >= c->c->n_out || rank > KILN_MAX_RANK || rank < -1) return KILN_STATUS_INVALID_ARG;
  if (dtype != 0 && !dtype_allowed(NULL, dtype)) return KILN_STATUS_INVALID_ARG;
  int64_t d[KILN_MAX_RANK];
  for (int k = 0; k < rank; k++) d[k] = dims && dims[k] >= 0 ? dims[k] : -1;
  kiln_infer_tensor(c->c, i, (kiln_dtype)dtype, rank, d);
  return KILN_STATUS_OK;
}

KILN_PRINTF(3, 4)
static kiln_status api_infer_error(kiln_infer_ctx *c, kiln_status code, const char *fmt, ...) {
  if (code == KILN_STATUS_OK) code = KILN_STATUS_ERROR;
  if (!c) return code;
  char msg[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  kiln_ifail(c->c, "%s", msg);
  c->failed = true;
  return code;
}

static kiln_code adapter_infer(kiln_ictx *c) {
  const kiln_adapted_op *op = kiln_adapted_from_schema(c->node->schema);
  if (!op) return kiln_ifail(c, "internal error: not an op described through kiln_op.h");
  char buf[200], lbl[300];
  kiln_op_label(op->d.domain, op->d.name, lbl, sizeof lbl);
  kiln_code rc = check_node_attrs(op, c->node, c);
  if (rc) return rc;
  for (size_t i = 0; i < c->n_in; i++) {
    const kiln_type *t = c->in[i];
    const kiln_op_io *io = io_at(op->d.inputs, op->d.n_inputs, i);
    if (!t || t->kind == KILN_T_UNKNOWN) continue;
    if (t->kind != KILN_T_TENSOR)
      return kiln_ifail(c, "input %zu ('%s') is not a tensor; %s takes tensors only", i, io ? io->name : "?", lbl);
    if (t->dtype && !dtype_allowed(io, t->dtype))
      return kiln_ifail(c, "input %zu ('%s') is %s; %s takes %s there", i, io ? io->name : "?",
                        kiln_dtype_name(t->dtype), lbl,
                        io && io->dtypes ? dtype_list(io->dtypes, buf, sizeof buf) : "numeric or bool tensors");
  }
  if (!op->d.infer) return KILN_OK;
  kiln_code attrs_rc = KILN_OK;
  kiln_infer_ctx ic = {c, op, {c->node, op, c->err, &attrs_rc}, false};
  kiln_status st = op->d.infer(&ic, kiln_plugin_api(), op->d.user);
  if (st != KILN_STATUS_OK) {
    if (!ic.failed) kiln_ifail(c, "shape inference of %s failed (%s) without a message", lbl, kiln_status_text(st));
    return KILN_ERR_MODEL;
  }
  if (attrs_rc) return attrs_rc;
  for (size_t i = 0; i < c->n_out; i++) {
    const kiln_op_io *io = io_at(op->d.outputs, op->d.n_outputs, i);
    const kiln_type *t = c->out[i];
    if (t && t->kind == KILN_T_TENSOR && t->dtype && !dtype_allowed(io, t->dtype))
      return kiln_ifail(c, "shape inference of %s gives output %zu ('%s') type %s, which its description does not allow (%s)",
                        lbl, i, io ? io->name : "?", kiln_dtype_name(t->dtype),
                        io && io->dtypes ? dtype_list(io->dtypes, buf, sizeof buf) : "any");
  }
  return KILN_OK;
}

/* ---- compute ---------------------------------------------------------------------------- */

struct kiln_kernel_ctx {
  kiln_kctx *c;
  const kiln_adapted_op *op;
  kiln_op_attrs attrs;
  int threads;
  bool failed;
  size_t n_scratch, cap_scratch;
  void **scratch;
};

kiln_kctx *kiln_kernel_ctx_internal(kiln_kernel_ctx *c) { return c ? c->c : NULL; }

static int32_t api_tensor_dtype(const kiln_op_tensor *t) {
  return t ? (int32_t)((const kiln_tensor *)(const void *)t)->dtype : 0;
}
static int api_tensor_rank(const kiln_op_tensor *t) {
  return t ? ((const kiln_tensor *)(const void *)t)->rank : -1;
}
static const int64_t *api_tensor_dims(const kiln_op_tensor *t) {
  return t ? ((const kiln_tensor *)(const void *)t)->dims : NULL;
}
static int64_t api_tensor_numel(const kiln_op_tensor *t) {
  return t ? ((const kiln_tensor *)(const void *)t)->numel : 0;
}
static const void *api_tensor_data(const kiln_op_tensor *t) {
  return t ? ((const kiln_tensor *)(const void *)t)->data : NULL;
}
static void *api_tensor_mutable_data(kiln_op_tensor *t) {
  return t ? ((kiln_tensor *)(void *)t)->data : NULL;
}

static size_t api_input_count(const kiln_kernel_ctx *c) { return c ? c->c->n_in : 0; }
static const kiln_op_tensor *api_input(const kiln_kernel_ctx *c, size_t i) {
  const kiln_tensor *t = c ? kiln_in(c->c, i) : NULL;
  return (const kiln_op_tensor *)(const void *)t;
}
static size_t api_output_count(const kiln_kernel_ctx *c) { return c ? c->c->n_out : 0; }
static int api_output_wanted(const kiln_kernel_ctx *c, size_t i) { return c && kiln_out_used(c->c, i); }
static const kiln_op_attrs *api_kernel_attrs(const kiln_kernel_ctx *c) { return c ? &c->attrs : NULL; }
static int api_thread_count(const kiln_kernel_ctx *c) {
  return c ? kiln_threadpool_size(kiln_kpool(c->c)) : 1;
}

KILN_PRINTF(3, 4)
static kiln_status api_kernel_error(kiln_kernel_ctx *c, kiln_status code, const char *fmt, ...) {
  if (code == KILN_STATUS_OK) code = KILN_STATUS_ERROR;
  if (!c) return code;
  char msg[800], lbl[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  /* a failing kernel is a run error (or unsupported input, or out of memory) */
  kiln_code rc = code == KILN_STATUS_UNSUPPORTED ? KILN_ERR_UNSUPPORTED
                 : code == KILN_STATUS_NOMEM     ? KILN_ERR_NOMEM
                                                 : KILN_ERR_RUN;
  kiln_fail(c->c->err, rc, "%s: %s", kiln_node_label(c->c->node, lbl, sizeof lbl), msg);
  c->failed = true;
  return code;
}

static kiln_op_tensor *api_allocate_output(kiln_kernel_ctx *c, size_t i, int32_t dtype, int rank,
                                           const int64_t *dims) {
  if (!c) return NULL;
  const kiln_op_io *io = io_at(c->op->d.outputs, c->op->d.n_outputs, i);
  if (i >= c->c->n_out) {
    api_kernel_error(c, KILN_STATUS_INVALID_ARG, "allocate_output: output %zu does not exist (the node has %zu)", i,
                     c->c->n_out);
    return NULL;
  }
  if (!dtype_allowed(io, dtype)) {
    api_kernel_error(c, KILN_STATUS_INVALID_ARG, "allocate_output: element type %d is not allowed for output %zu ('%s')",
                     dtype, i, io ? io->name : "?");
    return NULL;
  }
  if (rank < 0 || rank > KILN_MAX_RANK || (rank > 0 && !dims)) {
    api_kernel_error(c, KILN_STATUS_INVALID_ARG, "allocate_output: rank %d is invalid (0 to %d, dims given)", rank,
                     KILN_MAX_RANK);
    return NULL;
  }
  kiln_tensor *t = kiln_out(c->c, i, (kiln_dtype)dtype, rank, dims);
  if (!t) c->failed = true;
  return (kiln_op_tensor *)(void *)t;
}

static void *api_allocate(kiln_kernel_ctx *c, size_t bytes) {
  if (!c) return NULL;
  if (c->n_scratch == c->cap_scratch) {
    size_t cap = c->cap_scratch ? 2 * c->cap_scratch : 8;
    void **p = realloc(c->scratch, cap * sizeof *p);
    if (!p) return NULL;
    c->scratch = p;
    c->cap_scratch = cap;
  }
  size_t n = bytes ? bytes : 1;
  if (n > SIZE_MAX - 63) return NULL;
  n = (n + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, n);
  if (p) c->scratch[c->n_scratch++] = p;
  return p;
}

static void api_release(kiln_kernel_ctx *c, void *p) {
  if (!c || !p) return;
  for (size_t i = c->n_scratch; i-- > 0;)
    if (c->scratch[i] == p) {
      free(p);
      c->scratch[i] = c->scratch[--c->n_scratch];
      return;
    }
}

/* Plugin loops run on the session's thread pool, like built-in kernels. */
typedef struct pf_wrap {
  void (*fn)(void *user, size_t begin, size_t end);
  void *user;
} pf_wrap;

static void pf_task(void *ctx, size_t begin, size_t end, int thread_index) {
  (void)thread_index;
  const pf_wrap *w = ctx;
  w->fn(w->user, begin, end);
}

static void api_parallel_for(kiln_kernel_ctx *c, size_t n, void (*fn)(void *user, size_t begin, size_t end),
                             void *user) {
  if (!fn || n == 0) return;
  pf_wrap w = {fn, user};
  kiln_parallel_for(c ? kiln_kpool(c->c) : NULL, n, pf_task, &w, 0);
}

static const kiln_api API = {
    .size = sizeof(kiln_api),
    .abi_version = KILN_OP_ABI_VERSION,
    .register_op = kiln_api_register_op,
    .register_fusion = kiln_api_register_fusion,
    .registry_error = kiln_api_registry_error,
    .attr_int = api_attr_int,
    .attr_float = api_attr_float,
    .attr_string = api_attr_string,
    .attr_ints = api_attr_ints,
    .attr_floats = api_attr_floats,
    .attrs_error = api_attrs_error,
    .infer_input_count = api_infer_input_count,
    .infer_input_dtype = api_infer_input_dtype,
    .infer_input_rank = api_infer_input_rank,
    .infer_input_dim = api_infer_input_dim,
    .infer_input_const = api_infer_input_const,
    .infer_attrs = api_infer_attrs,
    .infer_set_output = api_infer_set_output,
    .infer_error = api_infer_error,
    .tensor_dtype = api_tensor_dtype,
    .tensor_rank = api_tensor_rank,
    .tensor_dims = api_tensor_dims,
    .tensor_numel = api_tensor_numel,
    .tensor_data = api_tensor_data,
    .tensor_mutable_data = api_tensor_mutable_data,
    .input_count = api_input_count,
    .input = api_input,
    .output_count = api_output_count,
    .output_wanted = api_output_wanted,
    .allocate_output = api_allocate_output,
    .kernel_attrs = api_kernel_attrs,
    .allocate = api_allocate,
    .release = api_release,
    .parallel_for = api_parallel_for,
    .thread_count = api_thread_count,
    .kernel_error = api_kernel_error,
    .match_step_count = kiln_api_match_step_count,
    .match_op_type = kiln_api_match_op_type,
    .match_attrs = kiln_api_match_attrs,
    .match_input_count = kiln_api_match_input_count,
    .match_chain_input = kiln_api_match_chain_input,
    .match_input_dtype = kiln_api_match_input_dtype,
    .match_input_rank = kiln_api_match_input_rank,
    .match_input_dim = kiln_api_match_input_dim,
    .match_input_const = kiln_api_match_input_const,
    .match_output_dtype = kiln_api_match_output_dtype,
    .match_output_rank = kiln_api_match_output_rank,
    .match_output_dim = kiln_api_match_output_dim,
    .match_set_attr_int = kiln_api_match_set_attr_int,
    .match_set_attr_float = kiln_api_match_set_attr_float,
    .match_set_attr_string = kiln_api_match_set_attr_string,
    .match_set_attr_ints = kiln_api_match_set_attr_ints,
};

const kiln_api *kiln_plugin_api(void) { return &API; }

/* One compute call: check inputs, find (or make) the state, run, check outputs. */
static kiln_code compute(kiln_kctx *c, const kiln_adapted_op *op) {
  char lbl[300], buf[200];
  kiln_op_label(op->d.domain, op->d.name, lbl, sizeof lbl);
  for (size_t i = 0; i < c->n_in; i++) {
    const kiln_tensor *t = c->in[i];
    const kiln_op_io *io = io_at(op->d.inputs, op->d.n_inputs, i);
    if (!t) continue;
    if (t->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input %zu is not a tensor; %s takes tensors only", i, lbl);
    if (!dtype_allowed(io, t->dtype))
      return kiln_kfail(c, "input %zu ('%s') is %s; %s takes %s there", i, io ? io->name : "?", kiln_dtype_name(t->dtype),
                        lbl, io && io->dtypes ? dtype_list(io->dtypes, buf, sizeof buf) : "numeric or bool tensors");
  }
  const kiln_plugin_set *ps = c->rt ? c->rt->plugins : NULL;
  void *state = NULL;
  bool temp = false;
  kiln_error_clear(c->err);
  if (op->d.create && !kiln_plugins_state(ps, c->node, &state)) {
    /* no state made at session creation (constant folding, or a node made later) */
    kiln_code arc = KILN_OK;
    kiln_op_attrs at = {c->node, op, c->err, &arc};
    kiln_status st = op->d.create(&at, kiln_plugin_api(), op->d.user, &state);
    if (st != KILN_STATUS_OK) {
      if (!arc) kiln_kfail(c, "create of %s failed (%s) without a message", lbl, kiln_status_text(st));
      return kiln_code_from_status(st);
    }
    temp = true;
  }
  kiln_kernel_ctx kc = {c, op, {c->node, op, c->err, NULL},
                        kiln_threadpool_size(kiln_kpool(c)),
                        false, 0, 0, NULL};
  kiln_status st = op->d.compute(&kc, kiln_plugin_api(), state);
  for (size_t i = 0; i < kc.n_scratch; i++) free(kc.scratch[i]);
  free(kc.scratch);
  if (temp) op->d.destroy(state, op->d.user);
  if (st != KILN_STATUS_OK) {
    if (c->err && !c->err->message[0])
      kiln_kfail(c, "compute of %s failed (%s) without a message", lbl, kiln_status_text(st));
    if (c->err && c->err->code) return c->err->code;
    return st == KILN_STATUS_UNSUPPORTED ? KILN_ERR_UNSUPPORTED : st == KILN_STATUS_NOMEM ? KILN_ERR_NOMEM : KILN_ERR_RUN;
  }
  for (size_t i = 0; i < c->n_out; i++) {
    if (!kiln_out_used(c, i)) continue;
    const kiln_op_io *io = io_at(op->d.outputs, op->d.n_outputs, i);
    if (!c->out[i])
      return kiln_kfail(c, "compute of %s returned OK without producing output %zu ('%s')", lbl, i, io ? io->name : "?");
  }
  return KILN_OK;
}

/* A plugin's fused node (one with an "original" chain) falls back in the executor, as kiln's
 * own fused nodes do. */
static kiln_code adapter_run(kiln_kctx *c) {
  const kiln_adapted_op *op = kiln_adapted_from_schema(c->node->schema);
  if (!op) return kiln_kfail(c, "internal error: not an op described through kiln_op.h");
  return compute(c, op);
}
