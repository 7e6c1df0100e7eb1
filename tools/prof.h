/* kiln profile's model of one profiled session: every node with its time, work, roofline
 * figures and fusion facts, the per-op-type totals and the run's summary. cmd_profile.c
 * collects it; prof_report.c prints the table, JSON and advice; prof_trace.c writes the
 * Chrome trace and the HTML report. */
#ifndef KILN_TOOLS_PROF_H
#define KILN_TOOLS_PROF_H

#include <stdio.h>

#include "ceilings.h"
#include "cli.h"

enum { BOUND_NONE, BOUND_COMPUTE, BOUND_MEMORY };

typedef struct prof_node {
  kiln_node_profile p;
  double ms;          /* per run: total_ms / runs */
  double gflops, gbs; /* achieved */
  double intensity;   /* flops per byte (0 when no flops) */
  double roof;        /* GFLOP/s at that intensity (memory-only ops: GB/s roof of their level) */
  int level;          /* CEIL_L3 or CEIL_DRAM: where its bytes live */
  int bound;          /* BOUND_*: which roof limits it */
  double eff;         /* achieved / roof, 0..1 (0: unknown) */
  size_t replaced;    /* fused nodes: how many nodes they replaced (0: not fused) */
  double saved_bytes; /* fused nodes: intermediate bytes no longer stored */
  int fallen_back;
  kiln_thread_profile *thr; /* p.threads entries, or NULL */
  char label[24];     /* "#12" for a node without a name (p.name then points here) */
} prof_node;

typedef struct prof_op {
  const char *op;
  size_t nodes;
  double ms, flops, bytes;
} prof_op;

typedef struct prof_data {
  const char *model;
  int level, threads, inter_op;
  long warmup, repeat;
  double run_ms;        /* median run */
  double mean_ms;       /* mean run: what the nodes' per-run times (means) add up to */
  double first_ms;      /* the first run (packing, page faults, plan) */
  double node_ms;       /* per run, summed over nodes */
  double load_ms;
  ceilings ceil;
  double peak, bw[CEIL_LEVELS]; /* roofs at this thread count */
  size_t n;
  prof_node *nodes;
  size_t *order;        /* node indices, slowest first */
  prof_op *ops;         /* slowest first */
  size_t n_ops;
  size_t fallbacks;
} prof_data;

/* Roofline figures of every node and the op totals (after the nodes' p and ms are set). */
void prof_analyze(prof_data *d);
void prof_report(FILE *f, const prof_data *d, long top);
int prof_json(FILE *f, const prof_data *d);
void prof_advise(FILE *f, const prof_data *d);
int prof_trace(FILE *f, const prof_data *d);
int prof_html(FILE *f, const prof_data *d);
/* The advice as lines (for the HTML): calls emit(line, ctx) for each. */
void prof_advice_lines(const prof_data *d, void (*emit)(const char *line, void *ctx), void *ctx);
void prof_json_str(FILE *f, const char *s);

#endif
