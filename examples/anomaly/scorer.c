/* The scorer: reconstructions of windows -> per-row scores -> flags -> events, exactly as
 * scoring.py defines them (see there). Rows live in a ring until they are final: their error
 * is final once every window covering them has been seen, their smoothed score once the rows
 * it reads ahead are final (smooth - 1 with the "min" rule, smooth / 2 with "mean"), their
 * stuck-sensor flag once each channel's current run of identical values has either ended or
 * reached its limit, and its verdict (with the edge re-check) once the rows a window ahead of
 * it are final. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "anomaly.h"

struct am_scorer {
  const am_config *cfg;
  am_sink sink;
  FILE *dump;
  int C;
  long cap, mask;
  long added, final_next, err_upto;
  double *err;   /* (cap, C): smallest squared error over the windows seen, INFINITY: none */
  double *raw;   /* (cap, C) */
  uint8_t *flat; /* (cap, C) */
  long *file_row;
  int *label;
  char **ts;
  long *run_start; /* per channel: accepted row where the current run of one value began */
  double *sm, *sm2; /* (C) scratch */
  /* finalised rows wait for the edge re-check (scoring.edge_recheck) until the rows a window
   * ahead are final; without it they are decided at once */
  long dec_next;
  double *smr;      /* (cap, C): each final row's smoothed error */
  double *z;        /* (cap): its score, largest over channels of smoothed error / threshold */
  uint8_t *sflag, *fflag; /* (cap): flagged by the score, by the stuck-sensor check */
  uint64_t *chs, *chf; /* (cap): channels over threshold, channels stuck */
  double *werr;     /* (wcap, W, C): squared errors of the recent windows, or NULL */
  long wmask;
  int ev_open;
  long ev_last;    /* accepted row of the open event's last flagged row */
  am_event ev;
};

static long pow2_at_least(long n) {
  long p = 64;
  while (p < n) p *= 2;
  return p;
}

am_scorer *am_scorer_create(const am_config *cfg, const am_sink *sink, FILE *scores_dump,
                            int max_batch) {
  am_scorer *s = calloc(1, sizeof(*s));
  s->cfg = cfg;
  s->sink = *sink;
  s->dump = scores_dump;
  s->C = cfg->channels;
  long maxflat = 0;
  for (int c = 0; c < s->C; c++) maxflat = cfg->flat_limit[c] > maxflat ? cfg->flat_limit[c] : maxflat;
  /* rows pending at once: a window, the smoothing span, an undecided run; main.c's batches add
   * at most AM_RING_ROWS more before their windows arrive */
  s->cap = pow2_at_least(2 * (cfg->window + cfg->smooth + maxflat) + (1L << 16));
  s->mask = s->cap - 1;
  size_t cells = (size_t)s->cap * (size_t)s->C;
  s->err = malloc(cells * sizeof(double));
  s->raw = malloc(cells * sizeof(double));
  s->flat = calloc(cells, 1);
  s->file_row = calloc((size_t)s->cap, sizeof(long));
  s->label = calloc((size_t)s->cap, sizeof(int));
  s->ts = calloc((size_t)s->cap, sizeof(char *));
  s->run_start = calloc((size_t)s->C, sizeof(long));
  s->sm = calloc((size_t)s->C, sizeof(double));
  s->sm2 = calloc((size_t)s->C, sizeof(double));
  s->smr = calloc(cells, sizeof(double));
  s->z = calloc((size_t)s->cap, sizeof(double));
  s->sflag = calloc((size_t)s->cap, 1);
  s->fflag = calloc((size_t)s->cap, 1);
  s->chs = calloc((size_t)s->cap, sizeof(uint64_t));
  s->chf = calloc((size_t)s->cap, sizeof(uint64_t));
  if (cfg->edge_head) {
    /* windows from a window behind the oldest undecided row to the newest: the batch added
     * before a flush, the rows final but undecided and those waiting for their smoothing or
     * stuck-sensor decision */
    long wcap = pow2_at_least((long)max_batch * cfg->stride + 2L * cfg->window + cfg->smooth + maxflat + 64);
    s->werr = malloc((size_t)wcap * (size_t)cfg->window * (size_t)s->C * sizeof(double));
    s->wmask = wcap - 1;
    if (!s->werr)
      fprintf(stderr, "kiln-anomaly: no memory for the edge re-check's %ld windows: it is off\n", wcap);
  }
  if (s->dump) {
    fprintf(s->dump, "row");
    for (int c = 0; c < s->C; c++) fprintf(s->dump, ",%s", cfg->names[c]);
    fprintf(s->dump, "%s\n", s->werr ? ",edge_cleared" : "");
  }
  return s;
}

/* Rows the ring can still take before the oldest needed one would be overwritten. */
static long room(const am_scorer *s) {
  long keep = s->final_next - s->cfg->smooth;
  if (s->dec_next - s->cfg->window < keep) keep = s->dec_next - s->cfg->window;
  if (keep < 0) keep = 0;
  return s->cap - (s->added - keep);
}

static void track_flat(am_scorer *s, long seq, const double *raw) {
  for (int c = 0; c < s->C; c++) {
    long limit = s->cfg->flat_limit[c];
    if (limit <= 0) continue;
    if (seq == 0 || raw[c] != s->raw[((seq - 1) & s->mask) * s->C + c]) s->run_start[c] = seq;
    long len = seq - s->run_start[c] + 1;
    if (len == limit) {
      for (long r = s->run_start[c]; r <= seq; r++) s->flat[(r & s->mask) * s->C + c] = 1;
    } else if (len > limit) {
      s->flat[(seq & s->mask) * s->C + c] = 1;
    }
  }
}

int am_scorer_add_row(am_scorer *s, long file_row, const char *ts, int label, const double *raw) {
  if (room(s) <= 0) return -1;
  long i = s->added & s->mask;
  free(s->ts[i]);
  s->ts[i] = strdup(ts);
  s->file_row[i] = file_row;
  s->label[i] = label;
  for (int c = 0; c < s->C; c++) {
    s->err[i * s->C + c] = INFINITY;
    s->raw[i * s->C + c] = raw[c];
    s->flat[i * s->C + c] = 0;
  }
  track_flat(s, s->added, raw);
  s->added++;
  return 0;
}

void am_scorer_add_window(am_scorer *s, long start, const float *x, const float *xhat) {
  int C = s->C, W = s->cfg->window;
  double *we = s->werr ? &s->werr[(size_t)(start & s->wmask) * (size_t)W * (size_t)C] : NULL;
  for (int t = 0; t < W; t++) {
    double *e = &s->err[((start + t) & s->mask) * C];
    for (int c = 0; c < C; c++) {
      double d = (double)x[t * C + c] - (double)xhat[t * C + c];
      if (d * d < e[c]) e[c] = d * d;
      if (we) we[t * C + c] = d * d;
    }
  }
  if (start + s->cfg->stride > s->err_upto) s->err_upto = start + s->cfg->stride;
}

/* Mean error over rows [lo, hi) into out (C). */
static void stretch_mean(const am_scorer *s, long lo, long hi, double *out) {
  for (int c = 0; c < s->C; c++) out[c] = 0;
  for (long q = lo; q < hi; q++) {
    const double *e = &s->err[(q & s->mask) * s->C];
    for (int c = 0; c < s->C; c++) out[c] += isinf(e[c]) ? 0.0 : e[c];
  }
  for (int c = 0; c < s->C; c++) out[c] /= (double)(hi - lo);
}

static long clampl(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The row's score per channel into s->sm, as scoring.smooth. */
static void smooth_row(am_scorer *s, long r, long total) {
  int k = s->cfg->smooth;
  if (!s->cfg->smooth_min) {
    stretch_mean(s, clampl(r - (k - 1) / 2, 0, total), clampl(r + k / 2 + 1, 0, total), s->sm);
    return;
  }
  for (int c = 0; c < s->C; c++) s->sm[c] = INFINITY;
  for (long st = r - k + 1; st <= r; st++) {
    stretch_mean(s, clampl(st, 0, total), clampl(st + k, 0, total), s->sm2);
    for (int c = 0; c < s->C; c++)
      if (s->sm2[c] < s->sm[c]) s->sm[c] = s->sm2[c];
  }
}

static void close_event(am_scorer *s) {
  if (!s->ev_open) return;
  if (s->sink.event) s->sink.event(s->sink.ctx, &s->ev);
  free(s->ev.start_ts);
  free(s->ev.end_ts);
  memset(&s->ev, 0, sizeof(s->ev));
  s->ev_open = 0;
}

static void event_row(am_scorer *s, long r, double score, uint64_t chans) {
  long i = r & s->mask;
  if (s->ev_open && r - s->ev_last > s->cfg->merge_gap + 1) close_event(s);
  if (!s->ev_open) {
    s->ev_open = 1;
    s->ev.start_row = s->file_row[i];
    s->ev.start_ts = strdup(s->ts[i]);
  }
  s->ev.end_row = s->file_row[i];
  free(s->ev.end_ts);
  s->ev.end_ts = strdup(s->ts[i]);
  s->ev.channels |= chans;
  if (score > s->ev.score) s->ev.score = score;
  s->ev_last = r;
}

/* Stage one: the row's smoothed score and stuck-sensor flag, kept for decide_row. */
static void finalize_row(am_scorer *s, long r, long total) {
  long i = r & s->mask;
  smooth_row(s, r, total);
  double score = 0;
  uint64_t chs = 0, chf = 0;
  for (int c = 0; c < s->C; c++) {
    double z = s->sm[c] / s->cfg->threshold[c];
    s->smr[i * s->C + c] = s->sm[c];
    if (z > score) score = z;
    if (z > 1 && c < 64) chs |= 1ULL << c;
    if (s->flat[i * s->C + c] && c < 64) chf |= 1ULL << c;
  }
  s->z[i] = score;
  s->sflag[i] = score > 1;
  s->chs[i] = chs;
  s->chf[i] = chf;
  int flat = 0;
  for (int c = 0; c < s->C; c++) flat |= s->flat[i * s->C + c];
  s->fflag[i] = (uint8_t)flat;
}

static int flagged1(const am_scorer *s, long q) {
  long i = q & s->mask;
  return s->sflag[i] || s->fflag[i];
}

/* The edge re-check of a score-flagged row r (scoring.edge_recheck): 1 when it clears the row,
 * with the row's largest ratio to the re-check's thresholds in *ratio. `final` rows are final,
 * `nw` windows known. */
static int edge_clears(am_scorer *s, long r, long final, long nw, double *ratio) {
  int W = s->cfg->window, C = s->C;
  long lo = r - W + 1 > 0 ? r - W + 1 : 0, hi = r < nw - 1 ? r : nw - 1;
  long a = lo, b = hi;
  for (long q = r - 1; q >= lo && q >= r - W + 1; q--)
    if (flagged1(s, q)) { a = q + 1; break; }
  for (long q = r + 1; q <= r + W - 1 && q < final; q++)
    if (flagged1(s, q)) { if (q - W < b) b = q - W; break; }
  if (a < lo) a = lo;
  if (a > b || (a == r - W + 1 && b == r)) return 0;
  long plo = r - b, phi = r - a;
  *ratio = 0;
  for (int c = 0; c < C; c++) {
    double thr;
    if (plo == 0) thr = s->cfg->edge_head[phi * C + c];
    else if (phi == W - 1) thr = s->cfg->edge_tail[(W - 1 - plo) * C + c];
    else {
      double h = s->cfg->edge_head[phi * C + c], t = s->cfg->edge_tail[(W - 1 - plo) * C + c];
      thr = h > t ? h : t;
    }
    double e2 = INFINITY;
    for (long st = a; st <= b; st++) {
      double e = s->werr[((size_t)(st & s->wmask) * (size_t)W + (size_t)(r - st)) * (size_t)C + (size_t)c];
      if (e < e2) e2 = e;
    }
    if (e2 > thr) return 0;
    if (e2 / thr > *ratio) *ratio = e2 / thr;
  }
  return 1;
}

/* Stage two: the edge re-check, then the row's verdict to the dump, the sink and the events. */
static void decide_row(am_scorer *s, long r, long final, long nw) {
  long i = r & s->mask;
  double score = s->z[i], ratio = 0;
  uint64_t chans = s->chs[i] | s->chf[i];
  int cleared = s->werr && s->sflag[i] && edge_clears(s, r, final, nw, &ratio);
  if (cleared) {
    score = ratio;
    chans = s->chf[i];
  }
  int flagged = (s->sflag[i] && !cleared) || s->fflag[i];
  if (s->dump) {
    fprintf(s->dump, "%ld", s->file_row[i]);
    for (int c = 0; c < s->C; c++) fprintf(s->dump, ",%.9g", s->smr[i * s->C + c]);
    if (s->werr) fprintf(s->dump, ",%d", cleared);
    fprintf(s->dump, "\n");
  }
  if (s->sink.row) s->sink.row(s->sink.ctx, s->file_row[i], s->label[i], flagged, score);
  if (flagged) event_row(s, r, score, chans);
  else if (s->ev_open && r - s->ev_last > s->cfg->merge_gap) close_event(s);
}

/* Rows below this have a decided stuck-sensor flag. */
static long flat_decided(const am_scorer *s) {
  long upto = s->added;
  for (int c = 0; c < s->C; c++) {
    long limit = s->cfg->flat_limit[c];
    if (limit <= 0 || s->added == 0) continue;
    long len = s->added - s->run_start[c];
    if (len < limit && s->run_start[c] < upto) upto = s->run_start[c];
  }
  return upto;
}

void am_scorer_flush(am_scorer *s, int eof) {
  long upto = s->added;
  if (!eof) {
    long e = s->err_upto - (s->cfg->smooth_min ? s->cfg->smooth - 1 : s->cfg->smooth / 2);
    long f = flat_decided(s);
    upto = e < upto ? e : upto;
    upto = f < upto ? f : upto;
  }
  while (s->final_next < upto) finalize_row(s, s->final_next++, s->added);
  /* a row is decided once the rows a window ahead are final (their flags bound its windows) */
  long dec = eof || !s->werr ? s->final_next : s->final_next - (s->cfg->window - 1);
  while (s->dec_next < dec) decide_row(s, s->dec_next++, s->final_next, s->err_upto);
  if (eof) close_event(s);
}

void am_scorer_free(am_scorer *s) {
  if (!s) return;
  close_event(s);
  for (long i = 0; i < s->cap; i++) free(s->ts[i]);
  free(s->ts);
  free(s->err);
  free(s->raw);
  free(s->flat);
  free(s->file_row);
  free(s->label);
  free(s->run_start);
  free(s->sm);
  free(s->sm2);
  free(s->smr);
  free(s->z);
  free(s->sflag);
  free(s->fflag);
  free(s->chs);
  free(s->chf);
  free(s->werr);
  free(s);
}
