/* Einsum: operands contracted pairwise, left to right: each step sums away labels no later
 * step needs, then packs both operands as [batch, rows, k] / [batch, k, cols] and runs the
 * reference GEMM (matmul.c), so its cost is that of the matrix products, not of the full
 * label space. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/matmul.h"
#include "ops/op.h"

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

/* ---- Einsum ------------------------------------------------------------------------------- */

/* Labels: 0-25 'A'-'Z', 26-51 'a'-'z' (so id order is numpy's character order), then one per
 * ellipsis dim, right-aligned across operands. */
enum { EIN_LETTERS = 52, EIN_LABELS = EIN_LETTERS + KILN_MAX_RANK };

typedef struct ein_spec {
  int nops;
  int rank[16];
  int lab[16][KILN_MAX_RANK]; /* label of each axis of each operand */
  int nout;
  int out[EIN_LABELS];
} ein_spec;

static int ein_letter(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + ch - 'a';
  return -1;
}

/* Parses one term into labels, expanding "..." to the dims the rank leaves over (ell dims, at
 * most `ell_max`). Returns the axis count or -1. For the output, rank < 0 means "use ell_max". */
static int ein_term(const char *s, size_t len, int rank, int ell_max, int *lab, char *msg,
                    size_t cap) {
  int letters = 0, n = 0;
  bool ell = false;
  for (size_t i = 0; i < len; i++) {
    if (ein_letter(s[i]) >= 0) {
      letters++;
    } else if (s[i] == '.' && i + 2 < len && s[i + 1] == '.' && s[i + 2] == '.' && !ell) {
      ell = true;
      i += 2;
    } else {
      snprintf(msg, cap, "bad character or ellipsis in term '%.*s'", (int)len, s);
      return -1;
    }
  }
  /* an explicit output without "..." sums the ellipsis dims away */
  int ell_dims = rank < 0 ? (ell ? ell_max : 0) : rank - letters;
  if (ell_dims < 0 || (!ell && ell_dims) || ell_dims > ell_max || letters + ell_dims > KILN_MAX_RANK) {
    snprintf(msg, cap, "term '%.*s' does not match an operand of rank %d", (int)len, s, rank);
    return -1;
  }
  for (size_t i = 0; i < len; i++) {
    int l = ein_letter(s[i]);
    if (l >= 0) {
      lab[n++] = l;
    } else {
      for (int e = 0; e < ell_dims; e++) lab[n++] = EIN_LETTERS + ell_max - ell_dims + e;
      i += 2;
    }
  }
  return n;
}

static bool ein_parse(const char *eq, int nops, const int *ranks, ein_spec *sp, char *msg,
                      size_t cap) {
  char buf[512];
  size_t n = 0;
  for (const char *p = eq; *p; p++)
    if (*p != ' ' && n + 1 < sizeof buf) buf[n++] = *p;
  buf[n] = 0;
  if (nops < 1 || nops > 16) {
    snprintf(msg, cap, "Einsum needs 1 to 16 inputs");
    return false;
  }
  char *arrow = strstr(buf, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - buf) : n;
  sp->nops = nops;
  int ell_max = 0;
  for (int i = 0; i < nops; i++) ell_max = ranks[i] > ell_max ? ranks[i] : ell_max;
  /* First pass: every operand's ellipsis width, to size the shared ellipsis labels. */
  int widths = 0;
  for (int pass = 0; pass < 2; pass++) {
    size_t start = 0;
    for (int i = 0; i < nops; i++) {
      size_t end = start;
      while (end < lhs_len && buf[end] != ',') end++;
      if (end == lhs_len && i != nops - 1) {
        snprintf(msg, cap, "equation has fewer terms than the %d inputs", nops);
        return false;
      }
      sp->rank[i] = ein_term(buf + start, end - start, ranks[i], pass ? widths : ell_max,
                             sp->lab[i], msg, cap);
      if (sp->rank[i] < 0) return false;
      if (!pass) {
        int letters = 0;
        for (size_t j = start; j < end; j++) letters += ein_letter(buf[j]) >= 0;
        if (ranks[i] - letters > widths) widths = ranks[i] - letters;
      }
      start = end + 1;
    }
    if (start < lhs_len + 1) {
      snprintf(msg, cap, "equation has more terms than the %d inputs", nops);
      return false;
    }
  }
  int count[EIN_LABELS] = {0};
  for (int i = 0; i < nops; i++)
    for (int j = 0; j < sp->rank[i]; j++) count[sp->lab[i][j]]++;
  sp->nout = 0;
  if (arrow) {
    int r = ein_term(arrow + 2, strlen(arrow + 2), -1, widths, sp->out, msg, cap);
    if (r < 0) return false;
    sp->nout = r;
    for (int j = 0; j < r; j++) {
      if (!count[sp->out[j]]) {
        snprintf(msg, cap, "output label %d does not occur in the inputs", j);
        return false;
      }
      for (int q = 0; q < j; q++)
        if (sp->out[q] == sp->out[j]) {
          snprintf(msg, cap, "output repeats a label");
          return false;
        }
    }
  } else { /* implicit: ellipsis dims, then labels seen once, in character order */
    for (int e = 0; e < widths; e++) sp->out[sp->nout++] = EIN_LETTERS + e;
    for (int l = 0; l < EIN_LETTERS; l++)
      if (count[l] == 1) sp->out[sp->nout++] = l;
  }
  return true;
}

/* A strided view over a double buffer: one stride per distinct label (repeated labels of an
 * input, i.e. diagonals, add their strides; broadcast size-1 axes have stride 0). */
typedef struct ein_view {
  int n;
  int lab[EIN_LABELS];
  int64_t stride[EIN_LABELS];
  double *data;
} ein_view;

static int64_t view_stride(const ein_view *v, int label) {
  for (int i = 0; i < v->n; i++)
    if (v->lab[i] == label) return v->stride[i];
  return 0;
}

/* dst[doff] += src[soff] over the index space dims, with separate strides (0 = not indexed). */
static void strided_add(int n, const int64_t *dims, const int64_t *ss, const int64_t *ds,
                        const double *src, double *dst) {
  int64_t total = 1, idx[EIN_LABELS] = {0}, so = 0, dof = 0;
  for (int i = 0; i < n; i++) total *= dims[i];
  if (total == 0) return;
  int64_t inner = n ? dims[n - 1] : 1, is = n ? ss[n - 1] : 0, id = n ? ds[n - 1] : 0;
  for (int64_t o = 0; o < total / inner; o++) {
    for (int64_t j = 0; j < inner; j++) dst[dof + j * id] += src[so + j * is];
    for (int d = n - 2; d >= 0; d--) {
      so += ss[d];
      dof += ds[d];
      if (++idx[d] < dims[d]) break;
      so -= ss[d] * dims[d];
      dof -= ds[d] * dims[d];
      idx[d] = 0;
    }
  }
}

/* A new contiguous view of v with labels `labs` in that order (others summed away). Labels of
 * labs missing from v are broadcast. */
static bool view_reshape(const ein_view *v, int nl, const int *labs, const int64_t *dim,
                         ein_view *out) {
  int64_t dims[EIN_LABELS], ss[EIN_LABELS], ds[EIN_LABELS], size = 1;
  int n = 0;
  for (int i = nl - 1; i >= 0; i--) size *= dim[labs[i]];
  out->n = nl;
  int64_t s = 1;
  for (int i = nl - 1; i >= 0; i--) {
    out->lab[i] = labs[i];
    out->stride[i] = s;
    s *= dim[labs[i]];
  }
  /* index space: the output labels, then v's labels not among them */
  for (int i = 0; i < nl; i++) {
    dims[n] = dim[labs[i]];
    ss[n] = view_stride(v, labs[i]);
    ds[n++] = out->stride[i];
  }
  for (int i = 0; i < v->n; i++) {
    bool kept = false;
    for (int j = 0; j < nl; j++) kept = kept || labs[j] == v->lab[i];
    if (!kept) {
      dims[n] = dim[v->lab[i]];
      ss[n] = v->stride[i];
      ds[n++] = 0;
    }
  }
  out->data = kiln_calloc((size_t)size, sizeof(double));
  if (!out->data) return false;
  strided_add(n, dims, ss, ds, v->data, out->data);
  return true;
}

static bool has_label(const int *labs, int n, int l) {
  for (int i = 0; i < n; i++)
    if (labs[i] == l) return true;
  return false;
}

static kiln_code einsum_run(kiln_kctx *c) {
  int nops = (int)c->n_in, ranks[16] = {0};
  if (nops < 1 || nops > 16) return kiln_kfail(c, "Einsum needs 1 to 16 inputs");
  for (int i = 0; i < nops; i++) {
    const kiln_tensor *t = c->in[i];
    if (!is_tensor(t) || !kiln_matmul_work_type(t->dtype) || t->dtype != c->in[0]->dtype)
      return kiln_kfail(c, "inputs must be numeric tensors of one type");
    ranks[i] = t->rank;
  }
  ein_spec sp;
  char msg[200];
  if (!ein_parse(kiln_attr_str(c->node, "equation", ""), nops, ranks, &sp, msg, sizeof msg))
    return kiln_kfail(c, "%s", msg);
  int64_t dim[EIN_LABELS];
  for (int l = 0; l < EIN_LABELS; l++) dim[l] = -1;
  for (int i = 0; i < nops; i++)
    for (int j = 0; j < sp.rank[i]; j++) {
      int64_t d = c->in[i]->dims[j], *cur = &dim[sp.lab[i][j]];
      if (*cur < 0 || *cur == 1) *cur = d;
      else if (d != 1 && d != *cur)
        return kiln_kfail(c, "label dims disagree: %lld vs %lld", (long long)d, (long long)*cur);
    }
  ein_view cur = {0}, next = {0}, tmp = {0};
  kiln_code rc = KILN_OK;
  for (int t = 0; t < nops && !rc; t++) {
    /* The input as a view (diagonals and broadcast axes through strides). */
    const kiln_tensor *x = c->in[t];
    ein_view in = {0};
    in.data = kiln_malloc(sizeof(double) * (size_t)x->numel);
    if (!in.data) {
      rc = kiln_kfail(c, "out of memory");
      break;
    }
    for (int64_t i = 0; i < x->numel; i++)
      in.data[i] = x->dtype == KILN_FLOAT ? ((const float *)x->data)[i] : kiln_get_f64(x, i);
    int64_t s = 1;
    for (int j = x->rank - 1; j >= 0; j--) {
      int l = sp.lab[t][j], q = 0;
      while (q < in.n && in.lab[q] != l) q++;
      if (q == in.n) in.lab[in.n++] = l, in.stride[q] = 0;
      if (x->dims[j] != 1) in.stride[q] += s;
      s *= x->dims[j];
    }
    /* Labels still needed after this operand: the output's and the later operands'. */
    int keep[EIN_LABELS], nk = 0;
    for (int j = 0; j < sp.nout; j++) keep[nk++] = sp.out[j];
    for (int u = t + 1; u < nops; u++)
      for (int j = 0; j < sp.rank[u]; j++)
        if (!has_label(keep, nk, sp.lab[u][j])) keep[nk++] = sp.lab[u][j];
    if (t == 0) {
      cur = in;
      continue;
    }
    /* Sum away what only one side has and nobody needs, then classify the rest. */
    int kc[EIN_LABELS], nkc = 0, kn[EIN_LABELS], nkn = 0;
    for (int i = 0; i < cur.n; i++)
      if (has_label(keep, nk, cur.lab[i]) || has_label(in.lab, in.n, cur.lab[i])) kc[nkc++] = cur.lab[i];
    for (int i = 0; i < in.n; i++)
      if (has_label(keep, nk, in.lab[i]) || has_label(cur.lab, cur.n, in.lab[i])) kn[nkn++] = in.lab[i];
    int bl[EIN_LABELS], ml[EIN_LABELS], nl_[EIN_LABELS], kl[EIN_LABELS], nb = 0, nm = 0, nn = 0, nkk = 0;
    for (int i = 0; i < nkc; i++) {
      if (!has_label(kn, nkn, kc[i])) ml[nm++] = kc[i];
      else if (has_label(keep, nk, kc[i])) bl[nb++] = kc[i];
      else kl[nkk++] = kc[i];
    }
    for (int i = 0; i < nkn; i++)
      if (!has_label(kc, nkc, kn[i])) nl_[nn++] = kn[i];
    int64_t B = 1, M = 1, N = 1, K = 1;
    int la[EIN_LABELS], lb[EIN_LABELS], na = 0, nbb = 0;
    for (int i = 0; i < nb; i++) B *= dim[bl[i]], la[na++] = bl[i], lb[nbb++] = bl[i];
    for (int i = 0; i < nm; i++) M *= dim[ml[i]], la[na++] = ml[i];
    for (int i = 0; i < nkk; i++) K *= dim[kl[i]], la[na++] = kl[i], lb[nbb++] = kl[i];
    for (int i = 0; i < nn; i++) N *= dim[nl_[i]], lb[nbb++] = nl_[i];
    ein_view pa = {0}, pb = {0};
    bool ok = view_reshape(&cur, na, la, dim, &pa) && view_reshape(&in, nbb, lb, dim, &pb);
    tmp.data = ok ? kiln_calloc((size_t)(B * M * N), sizeof(double)) : NULL;
    if (tmp.data) {
      for (int64_t bi = 0; bi < B; bi++)
        kiln_ref_gemm_f64(M, N, K, pa.data + bi * M * K, pb.data + bi * K * N, tmp.data + bi * M * N);
      int lr[EIN_LABELS], nr = 0;
      for (int i = 0; i < nb; i++) lr[nr++] = bl[i];
      for (int i = 0; i < nm; i++) lr[nr++] = ml[i];
      for (int i = 0; i < nn; i++) lr[nr++] = nl_[i];
      tmp.n = nr;
      int64_t st = 1;
      for (int i = nr - 1; i >= 0; i--) tmp.lab[i] = lr[i], tmp.stride[i] = st, st *= dim[lr[i]];
    } else {
      rc = kiln_kfail(c, "out of memory");
    }
    free(pa.data);
    free(pb.data);
    free(in.data);
    free(cur.data);
    cur = tmp;
    tmp.data = NULL;
  }
  if (!rc) {
    int64_t odims[KILN_MAX_RANK];
    if (sp.nout > KILN_MAX_RANK) rc = kiln_kfail(c, "output rank too large");
    for (int j = 0; !rc && j < sp.nout; j++) odims[j] = dim[sp.out[j]];
    kiln_tensor *y = rc ? NULL : kiln_out(c, 0, c->in[0]->dtype, sp.nout, odims);
    if (!rc && !y) rc = KILN_ERR_NOMEM;
    if (y) {
      if (!view_reshape(&cur, sp.nout, sp.out, dim, &next)) {
        rc = kiln_kfail(c, "out of memory");
      } else {
        for (int64_t i = 0; i < y->numel; i++) {
          if (y->dtype == KILN_FLOAT) ((float *)y->data)[i] = (float)next.data[i];
          else if (kiln_dtype_is_int(y->dtype)) kiln_set_i64(y, i, (int64_t)llround(next.data[i]));
          else kiln_set_f64(y, i, next.data[i]);
        }
      }
    }
  }
  free(cur.data);
  free(next.data);
  return rc;
}

static kiln_code einsum_infer(kiln_ictx *c) {
  const kiln_type *a = c->n_in ? c->in[0] : NULL;
  if (!a || a->kind != KILN_T_TENSOR) return KILN_OK;
  int ranks[16] = {0};
  if (c->n_in < 1 || c->n_in > 16) return KILN_OK;
  for (size_t i = 0; i < c->n_in; i++) {
    if (!c->in[i] || c->in[i]->kind != KILN_T_TENSOR || c->in[i]->rank < 0) {
      kiln_infer_tensor(c, 0, a->dtype, -1, NULL);
      return KILN_OK;
    }
    ranks[i] = c->in[i]->rank;
  }
  ein_spec sp;
  char msg[200];
  if (!ein_parse(kiln_attr_str(c->node, "equation", ""), (int)c->n_in, ranks, &sp, msg, sizeof msg))
    return kiln_ifail(c, "%s", msg);
  if (sp.nout > KILN_MAX_RANK) return kiln_ifail(c, "output rank too large");
  /* A label's size is known when some axis gives it a size > 1 or all agree on a known size. */
  int64_t dim[EIN_LABELS];
  bool unknown[EIN_LABELS] = {false};
  for (int l = 0; l < EIN_LABELS; l++) dim[l] = -1;
  for (int i = 0; i < sp.nops; i++)
    for (int j = 0; j < sp.rank[i]; j++) {
      int64_t d = c->in[i]->dims[j];
      int l = sp.lab[i][j];
      if (d < 0) unknown[l] = true;
      else if (d > dim[l]) dim[l] = d;
    }
  int64_t dims[KILN_MAX_RANK];
  for (int j = 0; j < sp.nout; j++) {
    int l = sp.out[j];
    dims[j] = unknown[l] && dim[l] <= 1 ? -1 : dim[l];
  }
  kiln_infer_tensor(c, 0, a->dtype, sp.nout, dims);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_einsum[] = {
    {.domain = "", .name = "Einsum", .since = 12, .inputs = {1, KILN_VARIADIC}, .outputs = {1, 1},
     .infer = einsum_infer, .run = einsum_run},
    {0},
};
