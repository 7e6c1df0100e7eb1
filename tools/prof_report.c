/* kiln profile's roofline analysis, terminal table and JSON (prof.h). */
#include <stdlib.h>
#include <string.h>

#include "prof.h"

static const prof_data *g_sort; /* for the qsort comparators */

static int cmp_node_ms(const void *x, const void *y) {
  double a = g_sort->nodes[*(const size_t *)x].ms, b = g_sort->nodes[*(const size_t *)y].ms;
  return a < b ? 1 : a > b ? -1 : 0;
}

static int cmp_op_ms(const void *x, const void *y) {
  double a = ((const prof_op *)x)->ms, b = ((const prof_op *)y)->ms;
  return a < b ? 1 : a > b ? -1 : 0;
}

/* The roof of one node: min(peak, intensity x bandwidth of the level its bytes live in). */
static void roofline(const prof_data *d, prof_node *q) {
  q->level = ceilings_level_of(&d->ceil, q->p.bytes, d->threads);
  double bw = d->bw[q->level];
  if (q->ms > 0) {
    q->gflops = q->p.flops / (q->ms * 1e6);
    q->gbs = q->p.bytes / (q->ms * 1e6);
  }
  if (q->p.flops > 0 && q->p.bytes > 0) {
    q->intensity = q->p.flops / q->p.bytes;
    double mem = q->intensity * bw;
    q->bound = mem < d->peak ? BOUND_MEMORY : BOUND_COMPUTE;
    q->roof = mem < d->peak ? mem : d->peak;
    q->eff = q->roof > 0 ? q->gflops / q->roof : 0;
  } else if (q->p.bytes > 0) { /* pure data movement: the bandwidth is the roof */
    q->bound = BOUND_MEMORY;
    q->roof = bw;
    q->eff = bw > 0 ? q->gbs / bw : 0;
  }
}

void prof_analyze(prof_data *d) {
  d->peak = ceilings_peak(&d->ceil, d->threads);
  for (int l = 0; l < CEIL_LEVELS; l++) d->bw[l] = ceilings_bw(&d->ceil, l, d->threads);
  d->order = calloc(d->n ? d->n : 1, sizeof *d->order);
  d->ops = calloc(d->n ? d->n : 1, sizeof *d->ops);
  if (!d->order || !d->ops) return;
  for (size_t i = 0; i < d->n; i++) {
    prof_node *q = &d->nodes[i];
    roofline(d, q);
    d->order[i] = i;
    size_t k = 0;
    while (k < d->n_ops && strcmp(d->ops[k].op, q->p.op_type)) k++;
    if (k == d->n_ops) d->ops[d->n_ops++] = (prof_op){q->p.op_type, 0, 0, 0, 0};
    d->ops[k].nodes++;
    d->ops[k].ms += q->ms;
    d->ops[k].flops += q->p.flops;
    d->ops[k].bytes += q->p.bytes;
  }
  g_sort = d;
  qsort(d->order, d->n, sizeof *d->order, cmp_node_ms);
  qsort(d->ops, d->n_ops, sizeof *d->ops, cmp_op_ms);
}

static const char *bound_name(int b) { return b == BOUND_COMPUTE ? "compute" : b == BOUND_MEMORY ? "memory" : "-"; }

static void op_table(FILE *f, const prof_data *d) {
  fprintf(f, "\n%-22s %6s %10s %7s %9s %8s %8s\n", "op type", "nodes", "ms/run", "share", "GFLOP/s", "GB/s",
          "flop/B");
  for (size_t i = 0; i < d->n_ops; i++) {
    const prof_op *o = &d->ops[i];
    char g[16] = "-", b[16] = "-", ai[16] = "-";
    if (o->flops > 0 && o->ms > 0) snprintf(g, sizeof g, "%.1f", o->flops / (o->ms * 1e6));
    if (o->bytes > 0 && o->ms > 0) snprintf(b, sizeof b, "%.1f", o->bytes / (o->ms * 1e6));
    if (o->flops > 0 && o->bytes > 0) snprintf(ai, sizeof ai, "%.2f", o->flops / o->bytes);
    fprintf(f, "%-22.22s %6zu %10.3f %6.1f%% %9s %8s %8s\n", o->op, o->nodes, o->ms,
            d->node_ms > 0 ? 100 * o->ms / d->node_ms : 0, g, b, ai);
  }
}

static void node_table(FILE *f, const prof_data *d, long top) {
  size_t k_max = (size_t)top < d->n ? (size_t)top : d->n;
  fprintf(f, "\nslowest nodes (roof: GFLOP/s, or GB/s for nodes without flops)\n");
  fprintf(f, "%9s %6s %9s %8s %7s %9s %4s %-7s %5s  %-16s %-24s %s\n", "ms/run", "share", "GFLOP/s", "GB/s",
          "flop/B", "roof", "lvl", "bound", "eff", "op", "node", "output");
  for (size_t k = 0; k < k_max; k++) {
    const prof_node *q = &d->nodes[d->order[k]];
    char g[16] = "-", ai[16] = "-", eff[16] = "-";
    if (q->p.flops > 0) snprintf(g, sizeof g, "%.1f", q->gflops);
    if (q->intensity > 0) snprintf(ai, sizeof ai, "%.2f", q->intensity);
    if (q->eff > 0) snprintf(eff, sizeof eff, "%.0f%%", 100 * q->eff);
    fprintf(f, "%9.3f %5.1f%% %9s %8.1f %7s %9.1f %4s %-7s %5s  %-16.16s %-24.24s %s\n", q->ms,
            d->node_ms > 0 ? 100 * q->ms / d->node_ms : 0, g, q->gbs, ai, q->roof,
            ceil_level_names[q->level], bound_name(q->bound), eff, q->p.op_type, q->p.name, q->p.shape);
  }
}

static void fused_table(FILE *f, const prof_data *d) {
  int any = 0;
  for (size_t i = 0; i < d->n; i++) {
    const prof_node *q = &d->nodes[i];
    if (!q->replaced) continue;
    if (!any++) fprintf(f, "\nfused nodes\n%9s %8s %12s  %-20s %s\n", "ms/run", "replaced", "bytes saved", "op", "node");
    fprintf(f, "%9.3f %8zu %12.0f  %-20.20s %s%s\n", q->ms, q->replaced, q->saved_bytes, q->p.op_type, q->p.name,
            q->fallen_back ? " (fell back to its chain)" : "");
  }
}

void prof_report(FILE *f, const prof_data *d, long top) {
  fprintf(f, "kiln profile %s: %d thread(s), level %d, %ld timed runs after %ld warm-up\n", d->model, d->threads,
          d->level, d->repeat, d->warmup);
  fprintf(f, "median run %.3f ms, mean %.3f ms; nodes %.3f ms per run (%.1f%% of the mean); first run %.3f ms; "
             "load %.1f ms\n", d->run_ms, d->mean_ms, d->node_ms, d->mean_ms > 0 ? 100 * d->node_ms / d->mean_ms : 0,
          d->first_ms, d->load_ms);
  fprintf(f, "ceilings (%s, %s, %d thread(s)): FMA peak %.1f GFLOP/s; L3 %.1f GB/s; DRAM %.1f GB/s\n",
          d->ceil.cpu, d->ceil.isa, d->threads, d->peak, d->bw[CEIL_L3], d->bw[CEIL_DRAM]);
  op_table(f, d);
  node_table(f, d, top);
  fused_table(f, d);
}

void prof_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void json_node(FILE *f, const prof_node *q) {
  fprintf(f, "  {\"name\": ");
  prof_json_str(f, q->p.name);
  fprintf(f, ", \"op_type\": ");
  prof_json_str(f, q->p.op_type);
  fprintf(f, ", \"domain\": ");
  prof_json_str(f, q->p.domain);
  fprintf(f, ", \"output\": ");
  prof_json_str(f, q->p.shape);
  fprintf(f, ", \"runs\": %llu, \"ms_per_run\": %.6f, \"flops\": %.0f, \"bytes\": %.0f, \"gflops\": %.3f,"
             " \"gbs\": %.3f, \"intensity\": %.4f, \"roof\": %.3f, \"level\": \"%s\", \"bound\": \"%s\","
             " \"efficiency\": %.4f, \"replaced\": %zu, \"bytes_saved\": %.0f",
          (unsigned long long)q->p.runs, q->ms, q->p.flops, q->p.bytes, q->gflops, q->gbs, q->intensity, q->roof,
          ceil_level_names[q->level], bound_name(q->bound), q->eff, q->replaced, q->saved_bytes);
  if (q->thr) {
    fprintf(f, ", \"thread_busy_ms\": [");
    for (int t = 0; t < q->p.threads; t++) fprintf(f, "%s%.6f", t ? ", " : "", q->thr[t].busy_ms / (double)(q->p.runs ? q->p.runs : 1));
    fprintf(f, "]");
  }
  fprintf(f, "}");
}

typedef struct json_list {
  FILE *f;
  int n;
} json_list;

static void json_advice(const char *line, void *ctx) {
  json_list *j = ctx;
  fprintf(j->f, "%s\n  ", j->n++ ? "," : "");
  prof_json_str(j->f, line);
}

int prof_json(FILE *f, const prof_data *d) {
  fprintf(f, "{\"model\": ");
  prof_json_str(f, d->model);
  fprintf(f, ", \"threads\": %d, \"level\": %d, \"runs\": %ld, \"median_ms\": %.6f, \"mean_ms\": %.6f, \"node_ms\": %.6f,"
             " \"first_ms\": %.6f, \"fma_peak_gflops\": %.1f,\n \"ceilings\": ",
          d->threads, d->level, d->repeat, d->run_ms, d->mean_ms, d->node_ms, d->first_ms, d->peak);
  ceilings_json(f, &d->ceil);
  fprintf(f, ",\n \"op_types\": [");
  for (size_t i = 0; i < d->n_ops; i++) {
    fprintf(f, "%s\n  {\"op_type\": ", i ? "," : "");
    prof_json_str(f, d->ops[i].op);
    fprintf(f, ", \"nodes\": %zu, \"ms_per_run\": %.6f, \"flops\": %.0f, \"bytes\": %.0f}", d->ops[i].nodes,
            d->ops[i].ms, d->ops[i].flops, d->ops[i].bytes);
  }
  fprintf(f, "],\n \"nodes\": [");
  for (size_t i = 0; i < d->n; i++) {
    fprintf(f, "%s\n", i ? "," : "");
    json_node(f, &d->nodes[i]);
  }
  fprintf(f, "\n],\n \"advice\": [");
  json_list ctx = {f, 0};
  prof_advice_lines(d, json_advice, &ctx);
  fprintf(f, "]}\n");
  return ferror(f) ? CLI_ERR : CLI_OK;
}
