/* Quality against labels: point-wise (every row) and event-level (an event is found when a
 * predicted event overlaps it; a predicted event is right when it overlaps a true one), and,
 * with a sidecar of anomaly kinds, the detection rate per kind. No point adjustment. */
#include <stdlib.h>
#include <string.h>

#include "anomaly.h"

typedef struct span {
  long a, b;
  char kind[32];
} span;

typedef struct spans {
  span *v;
  size_t n, cap;
} spans;

struct am_eval {
  long tp, fp, fn, tn;
  spans pred, truth, kinds;
  int in_true; /* the previous row was labelled anomalous */
  int have_kinds;
};

static void push(spans *s, long a, long b, const char *kind) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 64;
    s->v = realloc(s->v, s->cap * sizeof(span));
  }
  span *p = &s->v[s->n++];
  p->a = a;
  p->b = b;
  snprintf(p->kind, sizeof(p->kind), "%s", kind ? kind : "");
}

am_eval *am_eval_create(void) { return calloc(1, sizeof(am_eval)); }

void am_eval_row(am_eval *e, long file_row, int label, int flagged) {
  if (label < 0) return;
  if (label && flagged) e->tp++;
  else if (!label && flagged) e->fp++;
  else if (label) e->fn++;
  else e->tn++;
  if (label && e->in_true) e->truth.v[e->truth.n - 1].b = file_row;
  else if (label) push(&e->truth, file_row, file_row, NULL);
  e->in_true = label == 1;
}

void am_eval_event(am_eval *e, long start_row, long end_row) {
  push(&e->pred, start_row, end_row, NULL);
}

int am_eval_load_kinds(am_eval *e, const char *path, char *err) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, AM_ERR_LEN, "%s: cannot open", path);
    return -1;
  }
  char line[512];
  long n = 0;
  while (fgets(line, sizeof(line), f)) {
    char kind[32], chan[128];
    long a, b;
    if (++n == 1) continue; /* header */
    if (sscanf(line, "%31[^,],%127[^,],%ld,%ld", kind, chan, &a, &b) != 4 || a > b) {
      snprintf(err, AM_ERR_LEN, "%s: line %ld: expected kind,channel,start_row,end_row", path, n);
      fclose(f);
      return -1;
    }
    push(&e->kinds, a, b, kind);
  }
  fclose(f);
  e->have_kinds = 1;
  return 0;
}

static int overlaps(const span *x, const spans *set) {
  for (size_t i = 0; i < set->n; i++)
    if (set->v[i].a <= x->b && x->a <= set->v[i].b) return 1;
  return 0;
}

static double f1(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0; }

static void report_kinds(const am_eval *e, FILE *out) {
  fprintf(out, "  %-20s %8s %8s %9s\n", "anomaly kind", "injected", "detected", "rate");
  char seen[64][32];
  int nseen = 0;
  for (size_t i = 0; i < e->kinds.n && nseen < 64; i++) {
    const char *k = e->kinds.v[i].kind;
    int dup = 0;
    for (int j = 0; j < nseen; j++) dup |= strcmp(seen[j], k) == 0;
    if (dup) continue;
    snprintf(seen[nseen++], 32, "%s", k);
    int total = 0, found = 0;
    for (size_t j = 0; j < e->kinds.n; j++) {
      if (strcmp(e->kinds.v[j].kind, k) != 0) continue;
      total++;
      found += overlaps(&e->kinds.v[j], &e->pred);
    }
    fprintf(out, "  %-20s %8d %8d %8.1f%%\n", k, total, found, 100.0 * found / total);
  }
}

void am_eval_report(const am_eval *e, FILE *out) {
  long pos = e->tp + e->fn, neg = e->fp + e->tn;
  double p = e->tp + e->fp ? (double)e->tp / (double)(e->tp + e->fp) : 0;
  double r = pos ? (double)e->tp / (double)pos : 0;
  fprintf(out, "point-wise: precision %.3f recall %.3f F1 %.3f, false alarms %ld of %ld clean "
          "rows (%.2f%%)\n", p, r, f1(p, r), e->fp, neg, neg ? 100.0 * (double)e->fp / (double)neg : 0);
  const spans *truth = e->have_kinds ? &e->kinds : &e->truth;
  size_t right = 0, found = 0;
  for (size_t i = 0; i < e->pred.n; i++) right += overlaps(&e->pred.v[i], truth);
  for (size_t i = 0; i < truth->n; i++) found += overlaps(&truth->v[i], &e->pred);
  double ep = e->pred.n ? (double)right / (double)e->pred.n : 0;
  double er = truth->n ? (double)found / (double)truth->n : 0;
  fprintf(out, "event-level: precision %.3f recall %.3f F1 %.3f (%zu events predicted, %zu of %zu "
          "anomalies found%s)\n", ep, er, f1(ep, er), e->pred.n, found, truth->n,
          e->have_kinds ? "" : "; truth: runs of the label column");
  if (e->have_kinds) report_kinds(e, out);
}

void am_eval_free(am_eval *e) {
  if (!e) return;
  free(e->pred.v);
  free(e->truth.v);
  free(e->kinds.v);
  free(e);
}
