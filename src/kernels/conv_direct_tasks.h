/* The row and pooling tasks of the direct convolution (conv_direct.h), written once for every
 * ISA: an ISA's file defines its leaves, then includes this file with
 *   DIR_TASK_ATTR   the tasks' target attribute and linkage (e.g. `T512 static`, or empty)
 *   DIR_LEAF_ATTR   the same for the file's own helpers (`T512 static`, or `static`)
 *   DIR_ROW_TASK    the row task's name, DIR_POOL_TASK the pooling task's name
 * and static functions phase_row(dst, src, a, b, t, sw) (t elements: dst[i] = src[i * sw] for
 * i in [a, b), 0 elsewhere), row_block(d, reg, oy0, i, b, yb, ys, yr) (one output row of one
 * channel block) and
 * pool_band(pc, nn, q0, q1, cb, r0, tmp) (pooled rows from the convolution rows in cb).
 * Internal to src/kernels; no include guard, by design. */

/* Fill a thread's region with the phase rows that output rows [oy0, oy0 + nr) of image nn
 * read: local row r of channel ci holds padded row oy0 * sh + r, i.e. input row
 * oy0 * sh + r - pt; phase ph at [ph * t, ph * t + t): element i is input column
 * i * sw + ph - pl (0 outside). */
DIR_LEAF_ATTR void fill_rows(const kiln_dir_ctx *d, float *reg, int64_t nn, int64_t oy0, int64_t nr) {
  const kiln_conv2d_f32_params *p = d->p;
  int64_t rows = conv_in_rows(p, nr);
  for (int64_t ci = 0; ci < p->c; ci++)
    for (int64_t r = 0; r < rows; r++) {
      int64_t iy = oy0 * p->sh + r - p->pt;
      float *dst = reg + (ci * d->hp + r) * p->sw * d->t;
      if (iy < 0 || iy >= p->h) {
        memset(dst, 0, sizeof(float) * (size_t)(p->sw * d->t));
        continue;
      }
      const float *src = d->x + ((nn * p->c + ci) * p->h + iy) * p->w;
      for (int64_t ph = 0; ph < p->sw; ph++) {
        int64_t off = ph - p->pl, a, b;
        col_range(off, p->sw, p->w, d->t, &a, &b);
        phase_row(dst + ph * d->t, src + off, a, b, d->t, (int)p->sw);
      }
    }
}

/* Task index: an output row (n * oh + oy). The thread fills its own region with the input
 * rows of up to `cap` output rows of one image, then computes them: one loop per convolution,
 * so a worker that joins late (still waking up) only leaves its rows to the others. */
DIR_TASK_ATTR void DIR_ROW_TASK(void *ctx, size_t begin, size_t end, int ti) {
  const kiln_dir_ctx *d = ctx;
  const int64_t oh = d->p->oh;
  float *reg = d->xb + (size_t)ti * d->region;
  const size_t pass = (size_t)d->rows_per_pass;
  for (size_t s0 = begin; s0 < end;) {
    int64_t nn = (int64_t)s0 / oh, oy0 = (int64_t)s0 % oh;
    size_t s1 = (size_t)((nn + 1) * oh); /* the image's end */
    if (s1 > end) s1 = end;
    if (s1 - s0 > (size_t)d->cap) s1 = s0 + (size_t)d->cap;
    fill_rows(d, reg, nn, oy0, (int64_t)(s1 - s0));
    for (size_t i0 = s0; i0 < s1; i0 += pass) {
      size_t i1 = s1 - i0 < pass ? s1 : i0 + pass;
      for (int64_t b = 0; b < d->mb; b++)
        for (size_t i = i0; i < i1; i++)
          row_block(d, reg, oy0, (int64_t)i, b, d->y + nn * d->p->m * d->ys, d->ys, (int64_t)i % oh - d->yr0);
    }
    s0 = s1;
  }
}

/* A thread's bands in order: the convolution rows a band shares with the one before (kh - sh
 * of them) are moved to the front of each channel's rows, not computed again. */
DIR_TASK_ATTR void DIR_POOL_TASK(void *ctx, size_t begin, size_t end, int ti) {
  const kiln_dir_pool_ctx *pc = ctx;
  const kiln_dir_ctx *d = &pc->d;
  const kiln_conv2d_f32_params *p = d->p;
  const kiln_pool2d_params *q = pc->q;
  const int64_t ow = p->ow, ys = pc->rows_cap * ow;
  float *reg = d->xb + (size_t)ti * d->region;
  float *cb = reg + (size_t)(p->c * d->hp * p->sw * d->t); /* after the region's input rows */
  cb = (float *)(void *)(((uintptr_t)cb + 63) & ~(uintptr_t)63);
  float *tmp = cb + (size_t)(p->m * ys);
  int64_t have_n = -1, have0 = 0, have1 = 0; /* rows [have0, have1) of image have_n are in cb */
  for (size_t task = begin; task < end; task++) {
    int64_t nn = (int64_t)task / pc->tasks_per_image, tb = (int64_t)task % pc->tasks_per_image;
    int64_t q0 = tb * pc->band, q1 = q0 + pc->band < q->oh ? q0 + pc->band : q->oh;
    int64_t r0 = q0 * q->sh - q->pt, r1 = (q1 - 1) * q->sh - q->pt + q->kh;
    if (r0 < 0) r0 = 0;
    if (r1 > p->oh) r1 = p->oh;
    int64_t c0 = r0; /* the first row to compute */
    if (have_n == nn && have0 <= r0 && r0 < have1) {
      if (r0 > have0)
        for (int64_t co = 0; co < p->m; co++)
          memmove(cb + co * ys, cb + co * ys + (r0 - have0) * ow, sizeof(float) * (size_t)((have1 - r0) * ow));
      c0 = have1 < r1 ? have1 : r1;
    }
    if (c0 < r1) {
      fill_rows(d, reg, nn, c0, r1 - c0);
      for (int64_t i0 = c0; i0 < r1; i0 += d->rows_per_pass) {
        int64_t i1 = r1 - i0 < d->rows_per_pass ? r1 : i0 + d->rows_per_pass;
        for (int64_t b = 0; b < d->mb; b++)
          for (int64_t i = i0; i < i1; i++) row_block(d, reg, c0, nn * p->oh + i, b, cb, ys, i - r0);
      }
    }
    have_n = nn, have0 = r0, have1 = r1;
    pool_band(pc, nn, q0, q1, cb, r0, tmp);
  }
}
