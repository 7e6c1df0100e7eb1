/* Linear algebra on batches of matrices: Det (LU decomposition with partial pivoting, in
 * double). */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

static kiln_code det_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank < 0) {
    kiln_infer_tensor(c, 0, x->dtype, -1, NULL);
    return KILN_OK;
  }
  if (x->rank < 2) return kiln_ifail(c, "X must have rank >= 2, got %d", x->rank);
  int64_t a = x->dims[x->rank - 2], b = x->dims[x->rank - 1];
  if (a >= 0 && b >= 0 && a != b) return kiln_ifail(c, "matrices must be square");
  kiln_infer_tensor(c, 0, x->dtype, x->rank - 2, x->dims);
  return KILN_OK;
}

static kiln_code det_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || !kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "X must be a floating-point tensor");
  if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
    return kiln_kfail(c, "X must have shape [*, M, M]");
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank - 2, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  int64_t m = x->dims[x->rank - 1], mm = m * m;
  double *a = malloc(((size_t)mm + 1) * sizeof *a);
  if (!a) return kiln_kfail(c, "out of memory");
  for (int64_t b = 0; b < y->numel; b++) {
    for (int64_t i = 0; i < mm; i++) a[i] = kiln_get_f64(x, b * mm + i);
    /* LU decomposition with partial pivoting: det = sign * prod(diag(U)). */
    double det = 1;
    for (int64_t k = 0; k < m && det != 0; k++) {
      int64_t p = k;
      for (int64_t i = k + 1; i < m; i++)
        if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
      if (a[p * m + k] == 0) {
        det = 0;
        break;
      }
      if (p != k) {
        for (int64_t j = 0; j < m; j++) {
          double t = a[k * m + j];
          a[k * m + j] = a[p * m + j];
          a[p * m + j] = t;
        }
        det = -det;
      }
      double piv = a[k * m + k];
      det *= piv;
      for (int64_t i = k + 1; i < m; i++) {
        double f = a[i * m + k] / piv;
        if (f == 0) continue;
        for (int64_t j = k + 1; j < m; j++) a[i * m + j] -= f * a[k * m + j];
      }
    }
    kiln_set_f64(y, b, det);
  }
  free(a);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_linalg[] = {
    {.domain = "", .name = "Det", .since = 11, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = det_infer, .run = det_run},
    {0},
};
