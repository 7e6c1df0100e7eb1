/* Signal processing operators (opset 17): DFT, STFT, HannWindow, HammingWindow,
 * BlackmanWindow, MelWeightMatrix.
 *
 * Transforms run in double precision: a radix-2 FFT for power-of-two lengths and Bluestein's
 * chirp-z algorithm (built on the radix-2 FFT) for every other length, so any length costs
 * O(n log n). Complex values are the trailing dimension of size 2 (real, imaginary); real
 * input has a trailing dimension of size 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

static const double PI = 3.14159265358979323846;

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

/* ---- FFT ---- */

/* In-place radix-2 FFT of length n (a power of two); tw[k] = exp(sign*2*pi*i*k/n), k < n/2. */
static void fft_pow2(double *re, double *im, int64_t n, const double *tw_re, const double *tw_im) {
  for (int64_t i = 1, j = 0; i < n; i++) {
    int64_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      double t = re[i];
      re[i] = re[j];
      re[j] = t;
      t = im[i];
      im[i] = im[j];
      im[j] = t;
    }
  }
  for (int64_t len = 2; len <= n; len <<= 1) {
    int64_t half = len >> 1, step = n / len;
    for (int64_t s = 0; s < n; s += len) {
      for (int64_t k = 0; k < half; k++) {
        double wr = tw_re[k * step], wi = tw_im[k * step];
        int64_t a = s + k, b = a + half;
        double xr = re[b] * wr - im[b] * wi, xi = re[b] * wi + im[b] * wr;
        re[b] = re[a] - xr;
        im[b] = im[a] - xi;
        re[a] += xr;
        im[a] += xi;
      }
    }
  }
}

/* A transform of one length and direction, reusable across lines. */
typedef struct dft_plan {
  int64_t n, m;          /* length; FFT size (n when n is a power of two) */
  double sign;           /* -1 forward, +1 inverse */
  double *tw_re, *tw_im; /* m/2 twiddles for the size-m FFT */
  double *ch_re, *ch_im; /* Bluestein chirp exp(sign*pi*i*k^2/n), k < n */
  double *b_re, *b_im;   /* FFT of the conjugate chirp filter */
  double *w_re, *w_im;   /* work, m each */
  double *mem;
} dft_plan;

static bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

static bool plan_init(dft_plan *p, int64_t n, bool inverse) {
  memset(p, 0, sizeof *p);
  p->n = n;
  p->sign = inverse ? 1.0 : -1.0;
  int64_t m = 1;
  if (is_pow2(n)) {
    m = n;
  } else {
    while (m < 2 * n - 1) m <<= 1;
  }
  p->m = m;
  size_t total = (size_t)m / 2 + 1 + (size_t)m + (is_pow2(n) ? 0 : (size_t)n + (size_t)m);
  if (!(p->mem = malloc(total * 2 * sizeof(double)))) return false;
  double *q = p->mem;
  p->tw_re = q; q += m / 2 + 1;
  p->tw_im = q; q += m / 2 + 1;
  p->w_re = q; q += m;
  p->w_im = q; q += m;
  for (int64_t k = 0; k < m / 2; k++) {
    double a = p->sign * 2 * PI * (double)k / (double)m;
    p->tw_re[k] = cos(a);
    p->tw_im[k] = sin(a);
  }
  if (is_pow2(n)) return true;
  p->ch_re = q; q += n;
  p->ch_im = q; q += n;
  p->b_re = q; q += m;
  p->b_im = q;
  /* k^2 mod 2n, updated as (k+1)^2 = k^2 + 2k + 1, keeps the angle small and exact. */
  for (int64_t k = 0, k2 = 0; k < n; k2 = (k2 + 2 * k + 1) % (2 * n), k++) {
    double a = p->sign * PI * (double)k2 / (double)n;
    p->ch_re[k] = cos(a);
    p->ch_im[k] = sin(a);
  }
  for (int64_t k = 0; k < m; k++) p->b_re[k] = p->b_im[k] = 0;
  for (int64_t k = 0; k < n; k++) {
    p->b_re[k] = p->ch_re[k];
    p->b_im[k] = -p->ch_im[k];
    if (k) {
      p->b_re[m - k] = p->ch_re[k];
      p->b_im[m - k] = -p->ch_im[k];
    }
  }
  fft_pow2(p->b_re, p->b_im, m, p->tw_re, p->tw_im);
  return true;
}

/* Unnormalised transform of re/im (length n, in place). */
static void plan_run(dft_plan *p, double *re, double *im) {
  int64_t n = p->n, m = p->m;
  if (n <= 1) return;
  if (m == n) {
    fft_pow2(re, im, n, p->tw_re, p->tw_im);
    return;
  }
  double *wr = p->w_re, *wi = p->w_im;
  for (int64_t k = 0; k < m; k++) wr[k] = wi[k] = 0;
  for (int64_t k = 0; k < n; k++) {
    wr[k] = re[k] * p->ch_re[k] - im[k] * p->ch_im[k];
    wi[k] = re[k] * p->ch_im[k] + im[k] * p->ch_re[k];
  }
  fft_pow2(wr, wi, m, p->tw_re, p->tw_im);
  /* pointwise product, then an inverse FFT through conjugation */
  for (int64_t k = 0; k < m; k++) {
    double r = wr[k] * p->b_re[k] - wi[k] * p->b_im[k];
    double i = wr[k] * p->b_im[k] + wi[k] * p->b_re[k];
    wr[k] = r;
    wi[k] = -i;
  }
  fft_pow2(wr, wi, m, p->tw_re, p->tw_im);
  for (int64_t k = 0; k < n; k++) {
    double r = wr[k] / (double)m, i = -wi[k] / (double)m;
    re[k] = r * p->ch_re[k] - i * p->ch_im[k];
    im[k] = r * p->ch_im[k] + i * p->ch_re[k];
  }
}

static double get_f(const kiln_tensor *t, int64_t i) {
  return t->dtype == KILN_FLOAT ? ((const float *)t->data)[i] : kiln_get_f64(t, i);
}

static void set_f(kiln_tensor *t, int64_t i, double v) {
  if (t->dtype == KILN_FLOAT) ((float *)t->data)[i] = (float)v;
  else kiln_set_f64(t, i, v);
}

/* An integer scalar input (shape [] or [1]); false with c->err set when invalid. */
static bool int_scalar(kiln_kctx *c, const kiln_tensor *t, const char *what, int64_t *v) {
  if (!is_tensor(t) || t->numel != 1 || !kiln_dtype_is_int(t->dtype)) {
    kiln_kfail(c, "%s must be an integer scalar", what);
    return false;
  }
  *v = kiln_get_i64(t, 0);
  return true;
}

/* Integer scalar from a constant input at load time, or -1. */
static int64_t const_int(const kiln_ictx *c, size_t i) {
  const kiln_tensor *t = i < c->n_in ? c->cin[i] : NULL;
  if (!t || t->kind != KILN_KIND_TENSOR || t->numel != 1 || !kiln_dtype_is_int(t->dtype)) return -1;
  return kiln_get_i64(t, 0);
}

/* ---- DFT ---- */

/* The transformed axis: an attribute (default 1) up to opset 19, an optional input (default
 * -2) from opset 20. Negative values count from the back. */
static int64_t dft_axis_value(const kiln_node *n, int opset, const kiln_tensor *in, bool *known) {
  *known = true;
  if (opset < 20) return kiln_attr_int(n, "axis", 1);
  if (!in) return -2;
  if (in->kind != KILN_KIND_TENSOR || in->numel != 1 || !kiln_dtype_is_int(in->dtype)) {
    *known = false;
    return 0;
  }
  return kiln_get_i64(in, 0);
}

static kiln_code dft_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  bool known;
  const kiln_tensor *ain = c->n_in > 2 && c->in[2] ? c->cin[2] : NULL;
  int64_t axis = dft_axis_value(c->node, c->opset, ain, &known);
  if (c->opset >= 20 && c->n_in > 2 && c->in[2] && !ain) known = false;
  if (x->rank < 0 || !known) {
    kiln_infer_tensor(c, 0, x->dtype, x->rank, NULL);
    return KILN_OK;
  }
  int64_t given = axis;
  if (axis < 0) axis += x->rank;
  if (x->rank < 3 || axis < (c->opset >= 20 ? 0 : 1) || axis > x->rank - 2)
    return kiln_ifail(c, "axis %lld is not a signal dimension of a rank-%d input",
                      (long long)given, x->rank);
  int64_t last = x->dims[x->rank - 1];
  if (last >= 0 && last != 1 && last != 2)
    return kiln_ifail(c, "the last dimension must be 1 (real) or 2 (complex), got %lld",
                      (long long)last);
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  int64_t n = c->n_in > 1 && c->in[1] ? const_int(c, 1) : x->dims[axis];
  if (n >= 0 && kiln_attr_int(c->node, "onesided", 0)) n = n / 2 + 1;
  dims[axis] = n;
  dims[x->rank - 1] = 2;
  kiln_infer_tensor(c, 0, x->dtype, x->rank, dims);
  return KILN_OK;
}

static kiln_code dft_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || !kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "input must be a floating-point tensor");
  int r = x->rank;
  bool known;
  int64_t axis = dft_axis_value(c->node, c->opset, kiln_in(c, 2), &known), given = axis;
  if (!known) return kiln_kfail(c, "axis must be an integer scalar");
  if (axis < 0) axis += r;
  if (r < 3 || axis < (c->opset >= 20 ? 0 : 1) || axis > r - 2)
    return kiln_kfail(c, "axis %lld is not a signal dimension of a rank-%d input",
                      (long long)given, r);
  int64_t cplx = x->dims[r - 1];
  if (cplx != 1 && cplx != 2) return kiln_kfail(c, "the last dimension must be 1 or 2");
  bool inverse = kiln_attr_int(c->node, "inverse", 0) != 0;
  bool onesided = kiln_attr_int(c->node, "onesided", 0) != 0;
  if (inverse && onesided) return kiln_kunsup(c, "onesided inverse transforms are not supported");
  int64_t len = x->dims[axis], n = len;
  if (kiln_in(c, 1) && !int_scalar(c, kiln_in(c, 1), "dft_length", &n)) return KILN_ERR_RUN;
  if (n < 1) return kiln_kfail(c, "dft_length must be positive, got %lld", (long long)n);
  int64_t nout = onesided ? n / 2 + 1 : n;
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = nout;
  dims[r - 1] = 2;
  kiln_tensor *y = kiln_out(c, 0, x->dtype, r, dims);
  if (!y) return KILN_ERR_NOMEM;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = (int)axis + 1; d < r - 1; d++) inner *= x->dims[d];
  dft_plan p;
  double *buf = malloc((size_t)n * 2 * sizeof *buf);
  if (!buf || !plan_init(&p, n, inverse)) {
    free(buf);
    return kiln_kfail(c, "out of memory");
  }
  double *re = buf, *im = buf + n, scale = inverse ? 1.0 / (double)n : 1.0;
  int64_t take = len < n ? len : n; /* zero-pad or truncate to n */
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t k = 0; k < n; k++) {
        int64_t at = ((o * len + k) * inner + i) * cplx;
        re[k] = k < take ? get_f(x, at) : 0;
        im[k] = k < take && cplx == 2 ? get_f(x, at + 1) : 0;
      }
      plan_run(&p, re, im);
      for (int64_t k = 0; k < nout; k++) {
        int64_t at = ((o * nout + k) * inner + i) * 2;
        set_f(y, at, re[k] * scale);
        set_f(y, at + 1, im[k] * scale);
      }
    }
  }
  free(p.mem);
  free(buf);
  return KILN_OK;
}

/* ---- STFT ---- */

static kiln_code stft_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank >= 0 && x->rank != 3)
    return kiln_ifail(c, "signal must have shape [batch, length, 1 or 2], got rank %d", x->rank);
  int64_t dims[4] = {x->rank == 3 ? x->dims[0] : -1, -1, -1, 2};
  int64_t step = const_int(c, 1), flen = const_int(c, 3);
  const kiln_type *w = c->n_in > 2 ? c->in[2] : NULL;
  if (flen < 0 && w && w->kind == KILN_T_TENSOR && w->rank == 1) flen = w->dims[0];
  int64_t slen = x->rank == 3 ? x->dims[1] : -1;
  if (flen > 0 && step > 0 && slen >= flen) dims[1] = (slen - flen) / step + 1;
  if (flen > 0) dims[2] = kiln_attr_int(c->node, "onesided", 1) ? flen / 2 + 1 : flen;
  kiln_infer_tensor(c, 0, x->dtype, 4, dims);
  return KILN_OK;
}

static kiln_code stft_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *win = kiln_in(c, 2);
  if (!is_tensor(x) || !kiln_dtype_is_float(x->dtype) || x->rank != 3 ||
      (x->dims[2] != 1 && x->dims[2] != 2))
    return kiln_kfail(c, "signal must be a float tensor of shape [batch, length, 1 or 2]");
  int64_t step, flen = -1;
  if (!int_scalar(c, kiln_in(c, 1), "frame_step", &step)) return KILN_ERR_RUN;
  if (kiln_in(c, 3) && !int_scalar(c, kiln_in(c, 3), "frame_length", &flen)) return KILN_ERR_RUN;
  if (win) {
    if (!is_tensor(win) || win->rank != 1 || !kiln_dtype_is_float(win->dtype))
      return kiln_kfail(c, "window must be a 1-D float tensor");
    if (flen >= 0 && flen != win->dims[0])
      return kiln_kfail(c, "frame_length %lld differs from the window length %lld",
                        (long long)flen, (long long)win->dims[0]);
    flen = win->dims[0];
  }
  if (flen < 0) return kiln_kfail(c, "either window or frame_length must be given");
  int64_t batch = x->dims[0], slen = x->dims[1], cplx = x->dims[2];
  if (step < 1) return kiln_kfail(c, "frame_step must be positive");
  if (flen < 1 || flen > slen)
    return kiln_kfail(c, "frame length %lld does not fit the signal length %lld", (long long)flen,
                      (long long)slen);
  bool onesided = kiln_attr_int(c->node, "onesided", 1) != 0;
  if (onesided && cplx == 2) return kiln_kfail(c, "onesided output needs a real signal");
  int64_t frames = (slen - flen) / step + 1, bins = onesided ? flen / 2 + 1 : flen;
  int64_t dims[4] = {batch, frames, bins, 2};
  kiln_tensor *y = kiln_out(c, 0, x->dtype, 4, dims);
  if (!y) return KILN_ERR_NOMEM;
  dft_plan p;
  double *buf = malloc((size_t)flen * 2 * sizeof *buf);
  if (!buf || !plan_init(&p, flen, false)) {
    free(buf);
    return kiln_kfail(c, "out of memory");
  }
  double *re = buf, *im = buf + flen;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t f = 0; f < frames; f++) {
      for (int64_t k = 0; k < flen; k++) {
        int64_t at = (b * slen + f * step + k) * cplx;
        double w = win ? get_f(win, k) : 1.0;
        re[k] = get_f(x, at) * w;
        im[k] = cplx == 2 ? get_f(x, at + 1) * w : 0;
      }
      plan_run(&p, re, im);
      for (int64_t k = 0; k < bins; k++) {
        int64_t at = ((b * frames + f) * bins + k) * 2;
        set_f(y, at, re[k]);
        set_f(y, at + 1, im[k]);
      }
    }
  }
  free(p.mem);
  free(buf);
  return KILN_OK;
}

/* ---- window functions ---- */

static bool out_dtype_ok(int64_t dt) {
  return dt != KILN_STRING && dt != KILN_BOOL && dt >= KILN_FLOAT && dt <= KILN_BFLOAT16 &&
         dt != KILN_COMPLEX64 && dt != KILN_COMPLEX128;
}

static kiln_code window_infer(kiln_ictx *c) {
  int64_t dt = kiln_attr_int(c->node, "output_datatype", KILN_FLOAT);
  if (!out_dtype_ok(dt)) return kiln_ifail(c, "output_datatype %lld is not numeric", (long long)dt);
  int64_t n = const_int(c, 0);
  kiln_infer_tensor(c, 0, (kiln_dtype)dt, 1, &n);
  return KILN_OK;
}

/* Generalised cosine window a0 - a1 cos(2 pi k/N) + a2 cos(4 pi k/N); N is the size when
 * periodic, size - 1 when symmetric. */
static kiln_code window_run(kiln_kctx *c) {
  int64_t size, dt = kiln_attr_int(c->node, "output_datatype", KILN_FLOAT);
  if (!int_scalar(c, kiln_in(c, 0), "size", &size)) return KILN_ERR_RUN;
  if (size < 0) return kiln_kfail(c, "size must not be negative, got %lld", (long long)size);
  if (!out_dtype_ok(dt)) return kiln_kfail(c, "output_datatype %lld is not numeric", (long long)dt);
  double a0, a1, a2 = 0;
  const char *op = c->node->op_type;
  if (!strcmp(op, "HannWindow")) {
    a0 = 0.5;
    a1 = 0.5;
  } else if (!strcmp(op, "HammingWindow")) {
    a0 = 25.0 / 46.0;
    a1 = 21.0 / 46.0;
  } else {
    a0 = 0.42;
    a1 = 0.5;
    a2 = 0.08;
  }
  kiln_tensor *y = kiln_out(c, 0, (kiln_dtype)dt, 1, &size);
  if (!y) return KILN_ERR_NOMEM;
  double n = kiln_attr_int(c->node, "periodic", 1) ? (double)size : (double)(size - 1);
  for (int64_t k = 0; k < size; k++) {
    double v = n > 0 ? a0 - a1 * cos(2 * PI * (double)k / n) + a2 * cos(4 * PI * (double)k / n) : 1.0;
    kiln_set_f64(y, k, v);
  }
  return KILN_OK;
}

/* ---- MelWeightMatrix ---- */

static kiln_code mel_infer(kiln_ictx *c) {
  int64_t dt = kiln_attr_int(c->node, "output_datatype", KILN_FLOAT);
  if (!out_dtype_ok(dt)) return kiln_ifail(c, "output_datatype %lld is not numeric", (long long)dt);
  int64_t bins = const_int(c, 0), dft = const_int(c, 1);
  int64_t dims[2] = {dft >= 0 ? dft / 2 + 1 : -1, bins};
  kiln_infer_tensor(c, 0, (kiln_dtype)dt, 2, dims);
  return KILN_OK;
}

static double hz_to_mel(double hz) { return 2595.0 * log10(1.0 + hz / 700.0); }
static double mel_to_hz(double mel) { return 700.0 * (pow(10.0, mel / 2595.0) - 1.0); }

/* Triangular filters between mel-spaced points, following the ONNX reference: the mel range
 * is split into num_mel_bins + 2 steps and each point maps to the spectrogram bin
 * floor((dft_length + 1) * hz / sample_rate). */
static kiln_code mel_run(kiln_kctx *c) {
  int64_t nmel, dft, rate, dt = kiln_attr_int(c->node, "output_datatype", KILN_FLOAT);
  if (!int_scalar(c, kiln_in(c, 0), "num_mel_bins", &nmel) ||
      !int_scalar(c, kiln_in(c, 1), "dft_length", &dft) ||
      !int_scalar(c, kiln_in(c, 2), "sample_rate", &rate))
    return KILN_ERR_RUN;
  const kiln_tensor *lo_t = kiln_in(c, 3), *hi_t = kiln_in(c, 4);
  if (!is_tensor(lo_t) || lo_t->numel != 1 || !kiln_dtype_is_float(lo_t->dtype) ||
      !is_tensor(hi_t) || hi_t->numel != 1 || !kiln_dtype_is_float(hi_t->dtype))
    return kiln_kfail(c, "lower_edge_hertz and upper_edge_hertz must be float scalars");
  if (!out_dtype_ok(dt)) return kiln_kfail(c, "output_datatype %lld is not numeric", (long long)dt);
  double lo = kiln_get_f64(lo_t, 0), hi = kiln_get_f64(hi_t, 0);
  if (nmel < 1 || dft < 1 || rate < 1)
    return kiln_kfail(c, "num_mel_bins, dft_length and sample_rate must be positive");
  if (!(lo >= 0 && hi >= lo)) return kiln_kfail(c, "need 0 <= lower_edge_hertz <= upper_edge_hertz");
  int64_t nspec = dft / 2 + 1, dims[2] = {nspec, nmel};
  kiln_tensor *y = kiln_out(c, 0, (kiln_dtype)dt, 2, dims);
  if (!y) return KILN_ERR_NOMEM;
  int64_t *pt = malloc((size_t)(nmel + 2) * sizeof *pt);
  if (!pt) return kiln_kfail(c, "out of memory");
  double lmel = hz_to_mel(lo), step = (hz_to_mel(hi) - lmel) / (double)(nmel + 2);
  for (int64_t i = 0; i < nmel + 2; i++)
    pt[i] = (int64_t)floor((double)(dft + 1) * mel_to_hz((double)i * step + lmel) / (double)rate);
  for (int64_t i = 0; i < nmel; i++) {
    int64_t left = pt[i], center = pt[i + 1], right = pt[i + 2];
    if (center == left) {
      if (center >= 0 && center < nspec) kiln_set_f64(y, center * nmel + i, 1);
    } else {
      for (int64_t j = left; j <= center; j++)
        if (j >= 0 && j < nspec)
          kiln_set_f64(y, j * nmel + i, (double)(j - left) / (double)(center - left));
    }
    for (int64_t j = center; j < right; j++)
      if (j >= 0 && j < nspec)
        kiln_set_f64(y, j * nmel + i, (double)(right - j) / (double)(right - center));
  }
  free(pt);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_signal[] = {
    {.domain = "", .name = "DFT", .since = 17, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = dft_infer, .run = dft_run},
    {.domain = "", .name = "DFT", .since = 20, .inputs = {1, 3}, .outputs = {1, 1},
     .infer = dft_infer, .run = dft_run},
    {.domain = "", .name = "STFT", .since = 17, .inputs = {2, 4}, .outputs = {1, 1},
     .infer = stft_infer, .run = stft_run},
    {.domain = "", .name = "HannWindow", .since = 17, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = window_infer, .run = window_run},
    {.domain = "", .name = "HammingWindow", .since = 17, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = window_infer, .run = window_run},
    {.domain = "", .name = "BlackmanWindow", .since = 17, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = window_infer, .run = window_run},
    {.domain = "", .name = "MelWeightMatrix", .since = 17, .inputs = {5, 5}, .outputs = {1, 1},
     .infer = mel_infer, .run = mel_run},
    {0},
};
