/* Col2Im (opset 18): the inverse of im2col. Input [N, C * prod(block_shape), L] holds, for each
 * of the L sliding-block positions over the padded image, the block's pixels; the output
 * [N, C, image_shape...] sums every block pixel back onto the image position it came from.
 * dilations, pads (begin..., end...) and strides are as in Conv. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

typedef struct c2i_geom {
  int r;                                   /* spatial axes */
  int64_t img[KILN_MAX_RANK], blk[KILN_MAX_RANK], dil[KILN_MAX_RANK], st[KILN_MAX_RANK];
  int64_t pb[KILN_MAX_RANK], pe[KILN_MAX_RANK], pos[KILN_MAX_RANK]; /* block positions per axis */
  int64_t nblk, npos, nimg;                /* products */
} c2i_geom;

static const char *attr_list(const kiln_node *nd, const char *name, size_t want, int64_t def,
                             int64_t min, int64_t *out) {
  size_t n = 0;
  const int64_t *v = kiln_attr_ints(nd, name, &n);
  for (size_t i = 0; i < want; i++) out[i] = def;
  if (!v) return NULL;
  if (n != want) return "dilations, pads or strides has the wrong number of values";
  for (size_t i = 0; i < n; i++) {
    if (v[i] < min) return "dilations and strides must be positive, pads not negative";
    out[i] = v[i];
  }
  return NULL;
}

static const char *c2i_geometry(const kiln_node *nd, const int64_t *img, const int64_t *blk, int r,
                                c2i_geom *g) {
  int64_t pads[2 * KILN_MAX_RANK];
  const char *e;
  g->r = r;
  if ((e = attr_list(nd, "dilations", (size_t)r, 1, 1, g->dil)) ||
      (e = attr_list(nd, "strides", (size_t)r, 1, 1, g->st)) ||
      (e = attr_list(nd, "pads", 2 * (size_t)r, 0, 0, pads)))
    return e;
  g->nblk = g->npos = g->nimg = 1;
  for (int d = 0; d < r; d++) {
    g->img[d] = img[d];
    g->blk[d] = blk[d];
    g->pb[d] = pads[d];
    g->pe[d] = pads[d + r];
    const int64_t big = (int64_t)1 << 31;
    if (img[d] < 1 || blk[d] < 1 || img[d] > big || blk[d] > big || g->dil[d] > big ||
        g->st[d] > big || g->pb[d] > big || g->pe[d] > big)
      return "image_shape and block_shape must be positive (and below 2^31)";
    int64_t extent = g->dil[d] * (blk[d] - 1) + 1, span = img[d] + g->pb[d] + g->pe[d] - extent;
    if (span < 0) return "a block does not fit the padded image";
    g->pos[d] = span / g->st[d] + 1;
    if (!kiln_mul_ok(g->nblk, blk[d], &g->nblk) || !kiln_mul_ok(g->npos, g->pos[d], &g->npos) ||
        !kiln_mul_ok(g->nimg, img[d], &g->nimg) || g->nimg > ((int64_t)1 << 40))
      return "image_shape or block_shape is too large";
  }
  return NULL;
}

static bool read_pair(kiln_kctx *c, int64_t *img, int64_t *blk, int *r) {
  size_t ni = 0, nb = 0;
  if (kiln_read_ints(c, c->in[1], img, KILN_MAX_RANK, &ni) ||
      kiln_read_ints(c, c->in[2], blk, KILN_MAX_RANK, &nb))
    return false;
  if (ni != nb || ni < 1 || ni + 2 > KILN_MAX_RANK) {
    kiln_kfail(c, "image_shape and block_shape must list the same 1 to %d axes", KILN_MAX_RANK - 2);
    return false;
  }
  *r = (int)ni;
  return true;
}

static kiln_code c2i_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  if (x && x->rank >= 0 && x->rank != 3) return kiln_ifail(c, "input must be [N, C*prod(block), L]");
  int64_t img[KILN_MAX_RANK], blk[KILN_MAX_RANK], out[KILN_MAX_RANK];
  size_t ni = 0, nb = 0;
  int64_t nl = kiln_ilist_len(c, 1);
  if (kiln_iconst_ints(c, 1, img, KILN_MAX_RANK - 2, &ni)) nl = (int64_t)ni;
  if (nl < 1 || nl + 2 > KILN_MAX_RANK) return KILN_OK;
  for (int d = 0; d < nl + 2; d++) out[d] = -1;
  if (x && x->rank == 3) out[0] = x->dims[0];
  if (ni) memcpy(out + 2, img, ni * sizeof *img);
  if (ni && x && x->rank == 3 && x->dims[1] >= 0 && kiln_iconst_ints(c, 2, blk, KILN_MAX_RANK - 2, &nb) &&
      nb == ni) {
    int64_t p = 1;
    for (size_t d = 0; d < nb; d++) p *= blk[d] > 0 ? blk[d] : 1;
    if (x->dims[1] % p) return kiln_ifail(c, "input dim 1 is not a multiple of prod(block_shape)");
    out[1] = x->dims[1] / p;
  }
  kiln_infer_tensor(c, 0, x ? x->dtype : KILN_UNDEFINED, (int)nl + 2, out);
  return KILN_OK;
}

static kiln_code c2i_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  if (x->rank != 3) return kiln_kfail(c, "input must be [N, C*prod(block), L]");
  if (!kiln_dtype_is_float(x->dtype)) return kiln_kunsup(c, "Col2Im takes floating-point tensors");
  int64_t img[KILN_MAX_RANK], blk[KILN_MAX_RANK];
  int r;
  if (!read_pair(c, img, blk, &r)) return c->err->code ? c->err->code : KILN_ERR_RUN;
  c2i_geom g;
  const char *e = c2i_geometry(c->node, img, blk, r, &g);
  if (e) return kiln_kfail(c, "%s", e);
  if (x->dims[1] % g.nblk || x->dims[2] != g.npos)
    return kiln_kfail(c, "input [%lld, %lld, %lld] must be [N, C*%lld, %lld]", (long long)x->dims[0],
                      (long long)x->dims[1], (long long)x->dims[2], (long long)g.nblk, (long long)g.npos);
  const int64_t n = x->dims[0], ch = x->dims[1] / g.nblk;
  int64_t out[KILN_MAX_RANK] = {n, ch};
  memcpy(out + 2, img, (size_t)r * sizeof *img);
  kiln_tensor *y = kiln_out(c, 0, x->dtype, r + 2, out);
  if (!y) return c->err->code;
  double *acc = kiln_calloc((size_t)g.nimg, sizeof *acc);
  if (!acc && g.nimg) return kiln_kfail(c, "out of memory");
  for (int64_t bc = 0; bc < n * ch; bc++) {
    memset(acc, 0, (size_t)g.nimg * sizeof *acc);
    int64_t b[KILN_MAX_RANK] = {0};
    for (int64_t kb = 0; kb < g.nblk; kb++) {
      const int64_t row = (bc * g.nblk + kb) * g.npos; /* (n, c*nblk + kb, :) */
      int64_t l[KILN_MAX_RANK] = {0};
      for (int64_t lp = 0; lp < g.npos; lp++) {
        int64_t off = 0;
        for (int d = 0; d < r && off >= 0; d++) {
          int64_t p = l[d] * g.st[d] - g.pb[d] + b[d] * g.dil[d];
          off = p < 0 || p >= g.img[d] ? -1 : off * g.img[d] + p;
        }
        if (off >= 0) acc[off] += kiln_get_f64(x, row + lp);
        for (int d = r - 1; d >= 0 && ++l[d] == g.pos[d]; d--) l[d] = 0;
      }
      for (int d = r - 1; d >= 0 && ++b[d] == g.blk[d]; d--) b[d] = 0;
    }
    for (int64_t i = 0; i < g.nimg; i++) kiln_set_f64(y, bc * g.nimg + i, acc[i]);
  }
  free(acc);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_col2im[] = {
    {.domain = "", .name = "Col2Im", .since = 18, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = c2i_infer, .run = c2i_run},
    {0},
};
