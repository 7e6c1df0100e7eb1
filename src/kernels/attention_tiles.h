/* The hot path of ai.kiln::Attention, included once per vector width by attention_portable.c,
 * attention_avx2.c and attention_avx512.c (each compiled with its own ISA flags):
 *   AT_FN(name)  the name of this instance's function     AT_VW      floats per vector (4, 8, 16)
 * GNU C vectors (gcc and clang) are used explicitly: the auto-vectoriser picks the wrong loop of
 * these nests, and 8-float vectors without AVX are kept in memory by gcc. Loads and stores go
 * through memcpy (unaligned, no aliasing assumptions), and vectors are never passed by value
 * (that changes the ABI between the instances). A tile covers AT_QB rows and NCI = 2 vectors
 * of columns, so 2 * AT_QB accumulators live in registers. Not a public header. */

#define AT_NCI (2 * AT_VW)
#define AT_VF AT_FN(vf)
#define AT_VI AT_FN(vi)
#define AT_VU AT_FN(vu)
typedef float AT_VF __attribute__((vector_size(AT_VW * 4)));
typedef int32_t AT_VI __attribute__((vector_size(AT_VW * 4)));
typedef uint32_t AT_VU __attribute__((vector_size(AT_VW * 4)));
#define AT_LOAD(dst, p) memcpy(&(dst), (p), sizeof(AT_VF))
#define AT_STORE(p, v) memcpy((p), &(v), sizeof(AT_VF))
/* x in every lane. Adding to a vector of -0.0 (not +0.0) is an exact identity the compiler may
 * fold, so this is one broadcast load; `{0} + x` costs a scalar add before the broadcast. */
#define AT_SPLAT(x) ((AT_VF)((AT_VU){0} + 0x80000000u) + (x))
/* acc += a * b, fused when the instance has FMA (gcc does not contract a*b+c under -std=c11) */
#ifndef AT_FMA
#define AT_FMA(acc, a, b) ((acc) += (a) * (b))
#define AT_FMA_DEFAULT 1
#endif
/* e = e * r + c (the exp polynomial's Horner step), fused where the instance has FMA */
#ifdef AT_FMA_DEFAULT
#define AT_MULADD(e, r, c) ((e) = (e) * (r) + (c))
#else
#define AT_MULADD(e, r, c) AT_FMA_SPLAT(e, r, c)
#endif

/* s[r][j] = sum_d q[r][d] * kp[d][j] for AT_QB rows and columns [0, ncols), ncols a multiple
 * of AT_NCI: the AT_QB x AT_NCI tile stays in registers over the whole d loop (the fixed-count
 * row loops are unrolled, so the accumulator arrays are registers). */
static void AT_FN(qk_tile)(const float *restrict q, int64_t D, const float *restrict kp,
                                     int64_t ncols, float *restrict s) {
  for (int64_t j0 = 0; j0 < ncols; j0 += AT_NCI) {
    AT_VF a[AT_QB], b[AT_QB], ka, kb;
#pragma GCC unroll 8
    for (int r = 0; r < AT_QB; r++) a[r] = b[r] = AT_SPLAT(0.0f);
    for (int64_t d = 0; d < D; d++) {
      const float *kr = kp + d * BK + j0;
      AT_LOAD(ka, kr);
      AT_LOAD(kb, kr + AT_VW);
#pragma GCC unroll 8
      for (int r = 0; r < AT_QB; r++) {
        AT_VF x = AT_SPLAT(q[r * D + d]);
        AT_FMA(a[r], x, ka);
        AT_FMA(b[r], x, kb);
      }
    }
    float *o = s + j0;
#pragma GCC unroll 8
    for (int r = 0; r < AT_QB; r++) {
      AT_STORE(o + r * BK, a[r]);
      AT_STORE(o + r * BK + AT_VW, b[r]);
    }
  }
}

/* acc[r][c] += sum_j p[r][j] * v[j][c] for j < nk, c < dvp (a multiple of AT_NCI); rows of v
 * vs floats apart. */
static void AT_FN(pv_tile)(const float *restrict p, const float *restrict v, int64_t vs, int64_t nk,
                                     int64_t dvp, float *restrict acc) {
  for (int64_t c0 = 0; c0 < dvp; c0 += AT_NCI) {
    AT_VF a[AT_QB], b[AT_QB], va, vb;
    float *o = acc + c0;
#pragma GCC unroll 8
    for (int r = 0; r < AT_QB; r++) {
      AT_LOAD(a[r], o + r * dvp);
      AT_LOAD(b[r], o + r * dvp + AT_VW);
    }
    for (int64_t j = 0; j < nk; j++) {
      const float *vr = v + j * vs + c0;
      AT_LOAD(va, vr);
      AT_LOAD(vb, vr + AT_VW);
#pragma GCC unroll 8
      for (int r = 0; r < AT_QB; r++) {
        AT_VF x = AT_SPLAT(p[r * BK + j]);
        AT_FMA(a[r], x, va);
        AT_FMA(b[r], x, vb);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < AT_QB; r++) {
      AT_STORE(o + r * dvp, a[r]);
      AT_STORE(o + r * dvp + AT_VW, b[r]);
    }
  }
}

/* Max of x[0..n), skipping NaN as the chain's Softmax does (a NaN then poisons the sum). */
static float AT_FN(row_max)(const float *x, int64_t n) {
  AT_VF mv = AT_SPLAT(-INFINITY), v;
  int64_t j = 0;
  for (; j + AT_VW <= n; j += AT_VW) {
    AT_LOAD(v, x + j);
    AT_VI gt = v > mv;
    mv = (AT_VF)(((AT_VI)v & gt) | ((AT_VI)mv & ~gt));
  }
  /* lanes folded in halves (a tree, not a serial chain of AT_VW dependent compares); max is
   * exact, so the order does not matter */
  float t[AT_VW], m;
  memcpy(t, &mv, sizeof t);
  for (int w = AT_VW / 2; w >= 1; w /= 2)
    for (int c = 0; c < w; c++) t[c] = t[c + w] > t[c] ? t[c + w] : t[c];
  m = t[0];
  for (; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

/* x[j] = exp(x[j] - m) for j < n, returning the sum: kiln_exp_le0 (kernels/vmath.h) on
 * AT_VW lanes at a time, the tail with the scalar version. */
static float AT_FN(exp_sum)(float *x, int64_t n, float m) {
  const AT_VF lo = AT_SPLAT(-87.0f), shifter = AT_SPLAT(12582912.0f);
  AT_VF sum = AT_SPLAT(0.0f), v;
  int64_t j = 0;
  for (; j + AT_VW <= n; j += AT_VW) {
    AT_LOAD(v, x + j);
    v -= m;
    AT_VI under = v < lo; /* NaN compares false and stays NaN below */
    AT_VF xc = (AT_VF)(((AT_VI)lo & under) | ((AT_VI)v & ~under));
    AT_VF t = xc * 1.44269504088896341f + shifter;
    AT_VF k = t - shifter;
    AT_VF r = xc - k * 0.693145751953125f;
    r = r - k * 1.428606765330187045e-06f;
    AT_VF e = AT_SPLAT(1.0f / 720);
    AT_MULADD(e, r, 1.0f / 120);
    AT_MULADD(e, r, 1.0f / 24);
    AT_MULADD(e, r, 1.0f / 6);
    AT_MULADD(e, r, 0.5f);
    AT_MULADD(e, r, 1.0f);
    AT_MULADD(e, r, 1.0f);
    AT_VU bits = ((AT_VU)t - 0x4B400000u + 127u) << 23;
    AT_VF y = (AT_VF)((AT_VI)(e * (AT_VF)bits) & ~under);
    AT_STORE(x + j, y);
    sum += y;
  }
  float total = 0, t[AT_VW];
  for (; j < n; j++) {
    x[j] = kiln_exp_le0(x[j] - m);
    total += x[j];
  }
  /* lanes summed as a tree (log2 AT_VW dependent adds instead of AT_VW) */
  memcpy(t, &sum, sizeof t);
  for (int w = AT_VW / 2; w >= 1; w /= 2)
    for (int c = 0; c < w; c++) t[c] += t[c + w];
  return total + t[0];
}

/* One batch element, query rows [i_begin, i_end) (i_begin a multiple of AT_QB): Q rows through all
 * key blocks with the online softmax. */
void AT_FN(kiln_attend)(const attn_plan *p, attn_work *w, const float *q, const float *m,
                        const uint8_t *cd, float *y, int64_t i_begin, int64_t i_end) {
  int64_t qsr = p->q.stride[p->q.rank - 2], qsd = p->q.stride[p->q.rank - 1];
  int64_t msq = p->has_mask ? p->m.stride[p->m.rank - 2] : 0;
  int64_t csq = p->has_cond ? p->c.stride[p->c.rank - 2] : 0;
  int64_t ysr = p->o.stride[p->o.rank - 2], ysc = p->o.stride[p->o.rank - 1];
  for (int64_t i0 = i_begin; i0 < i_end; i0 += AT_QB) {
    int64_t nr = i_end - i0 < AT_QB ? i_end - i0 : AT_QB;
    float mx[AT_QB], l[AT_QB];
    for (int64_t r = 0; r < AT_QB; r++) {
      for (int64_t d = 0; d < p->d; d++) w->q[r * p->d + d] = r < nr ? p->scale * q[(i0 + r) * qsr + d * qsd] : 0.0f;
      mx[r] = -INFINITY;
      l[r] = 0;
    }
    memset(w->acc, 0, (size_t)AT_QB * (size_t)p->dvp * sizeof(float));
    const float *mrow = p->has_mask ? m + i0 * msq : NULL;
    const uint8_t *crow = p->has_cond ? cd + i0 * csq : NULL;
    for (int64_t kb = 0; kb < p->nkb; kb++) {
      int64_t j0 = kb * BK, nk = p->sk - j0 < BK ? p->sk - j0 : BK;
      if (p->causal) { /* the keys the tile's last row sees end here; later blocks see none */
        int64_t vis = i0 + nr + p->causal_off - j0;
        if (vis <= 0) break;
        if (vis < nk) nk = vis;
      }
      if (block_masked(p, mrow, crow, nr, j0, nk)) continue;
      nk = mask_extent(p, mrow, nr, j0, nk); /* > 0: the block is not masked out */
      AT_FN(qk_tile)(w->q, p->d, w->kp + kb * p->d * BK, (nk + AT_NCI - 1) / AT_NCI * AT_NCI, w->s);
      for (int64_t r = 0; r < AT_QB; r++) {
        float *s = w->s + r * BK;
        if (r >= nr) {
          memset(s, 0, BK * sizeof *s);
          continue;
        }
        if (p->causal)
          for (int64_t j = i0 + r + p->causal_off + 1 - j0 < 0 ? 0 : i0 + r + p->causal_off + 1 - j0; j < nk; j++)
            s[j] = -INFINITY;
        if (p->softcap > 0)
          for (int64_t j = 0; j < nk; j++) s[j] = p->softcap * tanhf(s[j] / p->softcap);
        if (p->has_cond && !p->where_after) apply_cond(p, s, crow + r * csq, j0, nk);
        if (p->has_mask) apply_mask(p, s, mrow + r * msq, j0, nk);
        if (p->has_cond && p->where_after) apply_cond(p, s, crow + r * csq, j0, nk);
        float bm = AT_FN(row_max)(s, nk);
        if (bm == -INFINITY) { /* nothing of this row survives in this block */
          for (int64_t j = 0; j < nk; j++)
            if (s[j] != s[j]) l[r] = NAN; /* unless a NaN score poisons the row, as in Softmax */
          memset(s, 0, BK * sizeof *s);
          continue;
        }
        if (bm > mx[r]) {
          if (mx[r] != -INFINITY) {
            float alpha = kiln_exp_le0(mx[r] - bm), *a = w->acc + r * p->dvp;
            for (int64_t c = 0; c < p->dvp; c++) a[c] *= alpha;
            l[r] *= alpha;
          }
          mx[r] = bm;
        }
        l[r] += AT_FN(exp_sum)(s, nk, mx[r]);
        for (int64_t j = nk; j < BK; j++) s[j] = 0;
      }
      AT_FN(pv_tile)(w->s, w->v + j0 * w->vs, w->vs, nk, p->dvp, w->acc);
    }
    for (int64_t r = 0; r < nr; r++) {
      const float *a = w->acc + r * p->dvp;
      float *yr = y + (i0 + r) * ysr;
      if (l[r] > 0) {
        float inv = 1.0f / l[r];
        for (int64_t c = 0; c < p->dv; c++) yr[c * ysc] = a[c] * inv;
      } else { /* every score was -inf (softmax is 0/0), or a NaN score */
        for (int64_t c = 0; c < p->dv; c++) yr[c * ysc] = NAN;
      }
    }
  }
}

#undef AT_NCI
#undef AT_VF
#undef AT_VI
#undef AT_VU
#undef AT_LOAD
#undef AT_STORE
#undef AT_SPLAT
#undef AT_MULADD
#ifdef AT_FMA_DEFAULT
#undef AT_FMA
#undef AT_FMA_DEFAULT
#endif
