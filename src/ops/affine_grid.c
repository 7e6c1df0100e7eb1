/* AffineGrid (opset 20): the sampling grid of affine transforms theta, for GridSample.
 *
 * theta (N, 2, 3) with size (N, C, H, W) gives grid (N, H, W, 2); theta (N, 3, 4) with size
 * (N, C, D, H, W) gives grid (N, D, H, W, 3). Each grid point is theta[n] applied to the
 * normalised base coordinates (x along W, y along H, z along D, then 1): with align_corners
 * the base runs from -1 to 1 through the corner pixels' centres (a single pixel sits at -1,
 * as numpy's linspace(-1, 1, 1)), without it through pixel centres: (2i + 1) / S - 1.
 * Arithmetic is in double; the grid has theta's element type. */
#include <string.h>

#include "ops/op.h"

static double base_coord(int64_t i, int64_t s, bool align) {
  if (align) return s > 1 ? -1.0 + 2.0 * (double)i / (double)(s - 1) : -1.0;
  return (2.0 * (double)i + 1.0) / (double)s - 1.0;
}

static kiln_code grid_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *theta = kiln_in(c, 0), *size = kiln_in(c, 1);
  if (!kiln_dtype_is_float(theta->dtype)) return kiln_kfail(c, "theta must be a float tensor");
  int64_t sz[5];
  size_t n = 0;
  if ((rc = kiln_read_ints(c, size, sz, 5, &n))) return rc;
  if (n != 4 && n != 5) return kiln_kfail(c, "size must have 4 (N, C, H, W) or 5 (N, C, D, H, W) values, not %zu", n);
  const int nd = (int)n - 2; /* spatial dims: 2 or 3 */
  if (theta->rank != 3 || theta->dims[0] != sz[0] || theta->dims[1] != nd || theta->dims[2] != nd + 1)
    return kiln_kfail(c, "theta must have shape (N, %d, %d) with N = %lld, not %s", nd, nd + 1,
                      (long long)sz[0], kiln_shape_str(theta, (char[128]){0}, 128));
  for (size_t i = 0; i < n; i++)
    if (sz[i] < 0) return kiln_kfail(c, "size[%zu] = %lld is negative", i, (long long)sz[i]);
  const bool align = kiln_attr_int(c->node, "align_corners", 0) != 0;
  int64_t D = nd == 3 ? sz[2] : 1, H = sz[n - 2], W = sz[n - 1];
  int64_t dims[5] = {sz[0]};
  int r = 1;
  if (nd == 3) dims[r++] = D;
  dims[r++] = H;
  dims[r++] = W;
  dims[r++] = nd;
  kiln_tensor *g = kiln_out(c, 0, theta->dtype, r, dims);
  if (!g) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  int64_t o = 0;
  for (int64_t b = 0; b < sz[0]; b++) {
    double th[12];
    for (int k = 0; k < nd * (nd + 1); k++) th[k] = kiln_get_f64(theta, b * nd * (nd + 1) + k);
    for (int64_t d = 0; d < D; d++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          const double base[4] = {base_coord(w, W, align), base_coord(h, H, align),
                                  nd == 3 ? base_coord(d, D, align) : 1.0, 1.0};
          for (int row = 0; row < nd; row++) {
            double v = 0;
            for (int k = 0; k <= nd; k++) v += th[row * (nd + 1) + k] * base[k];
            kiln_set_f64(g, o++, v);
          }
        }
  }
  return KILN_OK;
}

static kiln_code grid_infer(kiln_ictx *c) {
  kiln_dtype dt = kiln_idtype(c, 0);
  int64_t sz[5];
  size_t n = 0;
  if (kiln_iconst_ints(c, 1, sz, 5, &n) && (n == 4 || n == 5)) {
    int64_t dims[5] = {sz[0]};
    int r = 1;
    for (size_t i = 2; i < n; i++) dims[r++] = sz[i];
    dims[r++] = (int64_t)n - 2;
    kiln_infer_tensor(c, 0, dt, r, dims);
    return KILN_OK;
  }
  int64_t len = kiln_ilist_len(c, 1);
  if (len == 4 || len == 5) {
    int64_t dims[5] = {-1, -1, -1, -1, -1};
    dims[len - 1] = len - 2;
    kiln_infer_tensor(c, 0, dt, (int)len, dims);
  } else {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_affine_grid[] = {
    {.domain = "", .name = "AffineGrid", .since = 20, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = grid_infer, .run = grid_run},
    {0},
};
