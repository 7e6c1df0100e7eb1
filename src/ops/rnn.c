/* Recurrent operators: RNN, GRU, LSTM (all versions; layout from opset 14).
 *
 * One driver handles the three cells: inputs are converted to double once, each direction and
 * each batch item is run independently (they share nothing, and per-item sequence_lens make the
 * time range differ per item), and results are written to Y / Y_h / Y_c in the chosen layout.
 * Gate order follows the spec: GRU z,r,h; LSTM i,o,f,c (peepholes i,o,f). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ops/op.h"

enum { CELL_RNN, CELL_GRU, CELL_LSTM };

/* ---- activation functions ---- */

typedef enum {
  ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKY_RELU, ACT_THRESHOLDED_RELU,
  ACT_SCALED_TANH, ACT_HARD_SIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS
} act_kind;

typedef struct {
  act_kind k;
  double a, b;
} act;

static const struct {
  const char *name;
  act_kind k;
  int n_params;  /* how many of alpha, beta it takes from the attribute lists */
  double a, b;   /* defaults */
} ACTS[] = {
    {"Sigmoid", ACT_SIGMOID, 0, 0, 0},         {"Tanh", ACT_TANH, 0, 0, 0},
    {"Relu", ACT_RELU, 0, 0, 0},               {"Affine", ACT_AFFINE, 2, 1.0, 0.0},
    {"LeakyRelu", ACT_LEAKY_RELU, 1, 0.01, 0}, {"ThresholdedRelu", ACT_THRESHOLDED_RELU, 1, 1.0, 0},
    {"ScaledTanh", ACT_SCALED_TANH, 2, 1.0, 1.0}, {"HardSigmoid", ACT_HARD_SIGMOID, 2, 0.2, 0.5},
    {"Elu", ACT_ELU, 1, 1.0, 0},               {"Softsign", ACT_SOFTSIGN, 0, 0, 0},
    {"Softplus", ACT_SOFTPLUS, 0, 0, 0},
};

static double act_apply(const act *f, double x) {
  switch (f->k) {
    case ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case ACT_TANH: return tanh(x);
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_AFFINE: return f->a * x + f->b;
    case ACT_LEAKY_RELU: return x >= 0 ? x : f->a * x;
    case ACT_THRESHOLDED_RELU: return x > f->a ? x : 0;
    case ACT_SCALED_TANH: return f->a * tanh(f->b * x);
    case ACT_HARD_SIGMOID: {
      double v = f->a * x + f->b;
      return v < 0 ? 0 : v > 1 ? 1 : v;
    }
    case ACT_ELU: return x >= 0 ? x : f->a * (exp(x) - 1);
    case ACT_SOFTSIGN: return x / (1 + fabs(x));
    case ACT_SOFTPLUS: return x > 30 ? x : log1p(exp(x));
  }
  return x;
}

/* ---- the shared driver ---- */

typedef struct {
  int cell, G, n_acts;           /* gates per cell, activations per direction */
  int64_t seq, batch, in, H;
  int nd, layout;
  bool reverse_only, lbr, input_forget;
  double clip;                   /* <= 0: none */
  act acts[2][3];
  double *x, *w, *r, *b, *p, *h0, *c0; /* inputs as double; b/p/h0/c0 may be NULL */
  int64_t *lens;                 /* per batch item */
} rnn;

static double clipv(const rnn *m, double v) {
  if (m->clip > 0) v = v < -m->clip ? -m->clip : v > m->clip ? m->clip : v;
  return v;
}

/* Input i converted to a double array of its numel, or NULL when omitted. */
static kiln_code to_f64(kiln_kctx *c, size_t i, double **out) {
  const kiln_tensor *t = kiln_in(c, i);
  *out = NULL;
  if (!t) return KILN_OK;
  if (t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_float(t->dtype))
    return kiln_kfail(c, "input %zu must be a floating-point tensor", i);
  double *d = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *d);
  if (!d) return kiln_kfail(c, "out of memory");
  if (t->dtype == KILN_FLOAT)
    for (int64_t k = 0; k < t->numel; k++) d[k] = ((const float *)t->data)[k];
  else
    for (int64_t k = 0; k < t->numel; k++) d[k] = kiln_get_f64(t, k);
  *out = d;
  return KILN_OK;
}

static kiln_code check_shape(kiln_kctx *c, size_t i, int rank, const int64_t *want) {
  const kiln_tensor *t = kiln_in(c, i);
  if (!t) return KILN_OK;
  bool ok = t->kind == KILN_KIND_TENSOR && t->rank == rank;
  for (int d = 0; ok && d < rank; d++) ok = t->dims[d] == want[d];
  if (!ok) {
    char a[200], b[200];
    static const char *names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
    return kiln_kfail(c, "input %s is %s, expected shape %s", i < 8 ? names[i] : "?",
                      kiln_shape_str(t, a, sizeof a), kiln_dims_str(rank, want, b, sizeof b));
  }
  return KILN_OK;
}

static kiln_code read_acts(kiln_kctx *c, rnn *m) {
  static const act_kind defaults[3][3] = {
      {ACT_TANH}, {ACT_SIGMOID, ACT_TANH}, {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
  const kiln_attr *names = kiln_node_attr(c->node, "activations");
  size_t na = 0, nb = 0, ia = 0, ib = 0;
  const float *alpha = kiln_attr_floats(c->node, "activation_alpha", &na);
  const float *beta = kiln_attr_floats(c->node, "activation_beta", &nb);
  size_t n = names && names->kind == KILN_ATTR_STRINGS ? names->n : 0;
  if (n && n != (size_t)m->n_acts && n != (size_t)(m->n_acts * m->nd))
    return kiln_kfail(c, "'activations' has %zu entries; expected %d per direction", n, m->n_acts);
  for (int d = 0; d < m->nd; d++)
    for (int k = 0; k < m->n_acts; k++) {
      act *f = &m->acts[d][k];
      if (!n) {
        f->k = defaults[m->cell][k];
        continue;
      }
      /* a list for one direction serves both */
      const char *s = names->strings[(size_t)(d * m->n_acts + k) % n];
      size_t j = 0;
      while (j < sizeof ACTS / sizeof ACTS[0] && strcasecmp(ACTS[j].name, s)) j++;
      if (j == sizeof ACTS / sizeof ACTS[0])
        return kiln_kunsup(c, "activation function '%s' is not supported", s);
      /* alpha/beta lists hold values only for the functions that take them, in order */
      f->k = ACTS[j].k;
      f->a = ACTS[j].n_params >= 1 && ia < na ? alpha[ia++] : ACTS[j].a;
      f->b = ACTS[j].n_params >= 2 && ib < nb ? beta[ib++] : ACTS[j].b;
    }
  return KILN_OK;
}

/* Offsets of X[t, b, :] and Y[t, d, b, :] / Y_h[d, b, :] in the node's layout. */
static int64_t x_off(const rnn *m, int64_t t, int64_t b) {
  return (m->layout ? b * m->seq + t : t * m->batch + b) * m->in;
}
static int64_t y_off(const rnn *m, int64_t t, int d, int64_t b) {
  return (m->layout ? (b * m->seq + t) * m->nd + d : (t * m->nd + d) * m->batch + b) * m->H;
}
static int64_t h_off(const rnn *m, int d, int64_t b) {
  return (m->layout ? b * m->nd + d : d * m->batch + b) * m->H;
}

/* out[g*H + j] = bias + W[g*H + j, :] . v for rows [0, rows). */
static void matvec(double *out, const double *w, const double *v, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const double *wr = w + r * cols;
    double s = 0;
    for (int64_t k = 0; k < cols; k++) s += wr[k] * v[k];
    out[r] = s;
  }
}

/* One time step for batch item: x the input row, h/cs the state (updated in place). */
static void step(const rnn *m, int d, const double *x, double *h, double *cs, double *gx,
                 double *gh, double *tmp) {
  int64_t H = m->H, GH = m->G * H;
  const double *w = m->w + d * GH * m->in, *r = m->r + d * GH * H;
  const double *wb = m->b ? m->b + d * 2 * GH : NULL, *rb = wb ? wb + GH : NULL;
  const act *f = m->acts[d];
  matvec(gx, w, x, GH, m->in);
  if (m->cell == CELL_GRU && !m->lbr) {
    matvec(gh, r, h, 2 * H, H); /* z and r only: the h gate needs r first */
  } else {
    matvec(gh, r, h, GH, H);
  }
#define WB(k) (wb ? wb[k] : 0.0)
#define RB(k) (rb ? rb[k] : 0.0)
  if (m->cell == CELL_RNN) {
    for (int64_t j = 0; j < H; j++) h[j] = act_apply(&f[0], clipv(m, gx[j] + gh[j] + WB(j) + RB(j)));
  } else if (m->cell == CELL_GRU) {
    double *z = tmp, *rr = tmp + H, *rh = tmp + 2 * H;
    for (int64_t j = 0; j < H; j++) {
      z[j] = act_apply(&f[0], clipv(m, gx[j] + gh[j] + WB(j) + RB(j)));
      rr[j] = act_apply(&f[0], clipv(m, gx[H + j] + gh[H + j] + WB(H + j) + RB(H + j)));
    }
    if (!m->lbr) {
      for (int64_t j = 0; j < H; j++) rh[j] = rr[j] * h[j];
      matvec(gh + 2 * H, r + 2 * H * H, rh, H, H);
    }
    for (int64_t j = 0; j < H; j++) {
      int64_t k = 2 * H + j;
      double pre = m->lbr ? gx[k] + WB(k) + rr[j] * (gh[k] + RB(k)) : gx[k] + gh[k] + WB(k) + RB(k);
      double hh = act_apply(&f[1], clipv(m, pre));
      h[j] = (1 - z[j]) * hh + z[j] * h[j];
    }
  } else {
    const double *p = m->p ? m->p + d * 3 * H : NULL;
    for (int64_t j = 0; j < H; j++) {
      double g[4];
      for (int q = 0; q < 4; q++) g[q] = gx[q * H + j] + gh[q * H + j] + WB(q * H + j) + RB(q * H + j);
      double c_prev = cs[j];
      double ig = act_apply(&f[0], clipv(m, g[0] + (p ? p[j] * c_prev : 0)));
      double fg = m->input_forget ? 1 - ig
                                  : act_apply(&f[0], clipv(m, g[2] + (p ? p[2 * H + j] * c_prev : 0)));
      double cg = act_apply(&f[1], clipv(m, g[3]));
      double cn = fg * c_prev + ig * cg;
      double og = act_apply(&f[0], clipv(m, g[1] + (p ? p[H + j] * cn : 0)));
      cs[j] = cn;
      h[j] = og * act_apply(&f[2], cn);
    }
  }
#undef WB
#undef RB
}

static void store(kiln_tensor *t, int64_t off, const double *v, int64_t n) {
  if (t->dtype == KILN_FLOAT)
    for (int64_t k = 0; k < n; k++) ((float *)t->data)[off + k] = (float)v[k];
  else
    for (int64_t k = 0; k < n; k++) kiln_set_f64(t, off + k, v[k]);
}

static kiln_code rnn_run(kiln_kctx *c, int cell) {
  rnn m = {.cell = cell};
  m.G = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 3 : 4;
  m.n_acts = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 2 : 3;
  const kiln_tensor *X = c->in[0], *W = c->in[1], *R = c->in[2];
  if (!X || !W || !R || X->kind != KILN_KIND_TENSOR || W->kind != KILN_KIND_TENSOR ||
      R->kind != KILN_KIND_TENSOR || X->rank != 3 || W->rank != 3 || R->rank != 3)
    return kiln_kfail(c, "X, W and R must be tensors of rank 3");
  if (!kiln_dtype_is_float(X->dtype)) return kiln_kfail(c, "X must be a floating-point tensor");
  const char *dir = kiln_attr_str(c->node, "direction", "forward");
  if (!strcmp(dir, "bidirectional")) m.nd = 2;
  else if (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) m.nd = 1;
  else return kiln_kfail(c, "unknown direction '%s'", dir);
  m.reverse_only = !strcmp(dir, "reverse");
  m.layout = c->opset >= 14 ? (int)kiln_attr_int(c->node, "layout", 0) : 0;
  if (m.layout != 0 && m.layout != 1) return kiln_kfail(c, "layout must be 0 or 1");
  m.seq = X->dims[m.layout ? 1 : 0];
  m.batch = X->dims[m.layout ? 0 : 1];
  m.in = X->dims[2];
  m.H = kiln_attr_int(c->node, "hidden_size", R->dims[2]);
  if (m.H <= 0) return kiln_kfail(c, "hidden_size must be positive");
  m.lbr = cell == CELL_GRU && kiln_attr_int(c->node, "linear_before_reset", 0) != 0;
  m.input_forget = cell == CELL_LSTM && kiln_attr_int(c->node, "input_forget", 0) != 0;
  const kiln_attr *clip = kiln_node_attr(c->node, "clip");
  m.clip = clip ? clip->f : 0;
  if (clip && !(clip->f > 0)) return kiln_kfail(c, "clip must be positive");
  int64_t GH = m.G * m.H;
  int64_t wd[3] = {m.nd, GH, m.in}, rd[3] = {m.nd, GH, m.H}, bd[2] = {m.nd, 2 * GH};
  int64_t hd[3] = {m.nd, m.batch, m.H}, pd[2] = {m.nd, 3 * m.H};
  if (m.layout) {
    hd[0] = m.batch;
    hd[1] = m.nd;
  }
  kiln_code rc;
  if ((rc = check_shape(c, 1, 3, wd)) || (rc = check_shape(c, 2, 3, rd)) ||
      (rc = check_shape(c, 3, 2, bd)) || (rc = check_shape(c, 4, 1, &m.batch)) ||
      (rc = check_shape(c, 5, 3, hd)) || (cell == CELL_LSTM && (rc = check_shape(c, 6, 3, hd))) ||
      (cell == CELL_LSTM && (rc = check_shape(c, 7, 2, pd))))
    return rc;
  if ((rc = read_acts(c, &m))) return rc;

  /* outputs (zero-filled: padding past a short sequence stays 0) */
  int64_t yd[4] = {m.seq, m.nd, m.batch, m.H};
  if (m.layout) {
    yd[0] = m.batch;
    yd[1] = m.seq;
    yd[2] = m.nd;
  }
  kiln_tensor *Y = NULL, *Yh = NULL, *Yc = NULL;
  if (kiln_out_used(c, 0) && !(Y = kiln_out(c, 0, X->dtype, 4, yd))) return KILN_ERR_NOMEM;
  if (kiln_out_used(c, 1) && !(Yh = kiln_out(c, 1, X->dtype, 3, hd))) return KILN_ERR_NOMEM;
  if (cell == CELL_LSTM && kiln_out_used(c, 2) && !(Yc = kiln_out(c, 2, X->dtype, 3, hd)))
    return KILN_ERR_NOMEM;

  double *buf = NULL;
  m.lens = malloc((size_t)(m.batch ? m.batch : 1) * sizeof *m.lens);
  if (!m.lens) return kiln_kfail(c, "out of memory");
  const kiln_tensor *lens = kiln_in(c, 4);
  if (lens && !kiln_dtype_is_int(lens->dtype)) {
    rc = kiln_kfail(c, "sequence_lens must be an integer tensor");
    goto done;
  }
  for (int64_t b = 0; b < m.batch; b++) {
    m.lens[b] = lens ? kiln_get_i64(lens, b) : m.seq;
    if (m.lens[b] < 0 || m.lens[b] > m.seq) {
      rc = kiln_kfail(c, "sequence_lens[%lld] = %lld is out of range [0, %lld]", (long long)b,
                      (long long)m.lens[b], (long long)m.seq);
      goto done;
    }
  }
  if ((rc = to_f64(c, 0, &m.x)) || (rc = to_f64(c, 1, &m.w)) || (rc = to_f64(c, 2, &m.r)) ||
      (rc = to_f64(c, 3, &m.b)) || (rc = to_f64(c, 5, &m.h0)))
    goto done;
  if (cell == CELL_LSTM && ((rc = to_f64(c, 6, &m.c0)) || (rc = to_f64(c, 7, &m.p)))) goto done;
  /* scratch: h, c, gx, gh, tmp */
  int64_t H = m.H;
  buf = calloc((size_t)(2 * H + 2 * GH + 3 * H), sizeof *buf);
  if (!buf) {
    rc = kiln_kfail(c, "out of memory");
    goto done;
  }
  double *h = buf, *cs = buf + H, *gx = cs + H, *gh = gx + GH, *tmp = gh + GH;
  for (int d = 0; d < m.nd; d++) {
    bool rev = m.reverse_only || d == 1;
    for (int64_t b = 0; b < m.batch; b++) {
      int64_t ho = h_off(&m, d, b), len = m.lens[b];
      for (int64_t j = 0; j < H; j++) {
        h[j] = m.h0 ? m.h0[ho + j] : 0;
        cs[j] = m.c0 ? m.c0[ho + j] : 0;
      }
      for (int64_t s = 0; s < len; s++) {
        int64_t t = rev ? len - 1 - s : s;
        step(&m, d, m.x + x_off(&m, t, b), h, cs, gx, gh, tmp);
        if (Y) store(Y, y_off(&m, t, d, b), h, H);
      }
      if (Yh) store(Yh, ho, h, H);
      if (Yc) store(Yc, ho, cs, H);
    }
  }
done:
  free(buf);
  free(m.lens);
  free(m.x);
  free(m.w);
  free(m.r);
  free(m.b);
  free(m.p);
  free(m.h0);
  free(m.c0);
  return rc;
}

static kiln_code rnn_cell_run(kiln_kctx *c) { return rnn_run(c, CELL_RNN); }
static kiln_code gru_run(kiln_kctx *c) { return rnn_run(c, CELL_GRU); }
static kiln_code lstm_run(kiln_kctx *c) { return rnn_run(c, CELL_LSTM); }

/* Y: [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]); Y_h, Y_c: [dirs, batch, H]
 * (layout 1: [batch, dirs, H]). H comes from hidden_size or R's last dim. */
static kiln_code rnn_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0], *r = c->in[2];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank >= 0 && x->rank != 3) return kiln_ifail(c, "X must have rank 3, has %d", x->rank);
  int layout = c->opset >= 14 ? (int)kiln_attr_int(c->node, "layout", 0) : 0;
  const char *dir = kiln_attr_str(c->node, "direction", "forward");
  int64_t nd = !strcmp(dir, "bidirectional") ? 2 : 1;
  int64_t seq = x->rank == 3 ? x->dims[layout ? 1 : 0] : -1;
  int64_t batch = x->rank == 3 ? x->dims[layout ? 0 : 1] : -1;
  int64_t H = kiln_attr_int(c->node, "hidden_size", -1);
  if (H < 0 && r && r->kind == KILN_T_TENSOR && r->rank == 3) H = r->dims[2];
  if (H < 0) H = -1;
  int64_t yd[4] = {seq, nd, batch, H}, hd[3] = {nd, batch, H};
  if (layout) {
    yd[0] = batch;
    yd[1] = seq;
    yd[2] = nd;
    hd[0] = batch;
    hd[1] = nd;
  }
  kiln_infer_tensor(c, 0, x->dtype, 4, yd);
  for (size_t i = 1; i < c->n_out && i < 3; i++) kiln_infer_tensor(c, i, x->dtype, 3, hd);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_rnn[] = {
    {.domain = "", .name = "RNN", .since = 1, .inputs = {3, 6}, .outputs = {0, 2},
     .infer = rnn_infer, .run = rnn_cell_run},
    {.domain = "", .name = "GRU", .since = 1, .inputs = {3, 6}, .outputs = {0, 2},
     .infer = rnn_infer, .run = gru_run},
    {.domain = "", .name = "LSTM", .since = 1, .inputs = {3, 8}, .outputs = {0, 3},
     .infer = rnn_infer, .run = lstm_run},
    {0},
};
