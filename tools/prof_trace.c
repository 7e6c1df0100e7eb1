/* kiln profile's pictures (prof.h): the latest run as a Chrome trace (trace-event format, "X"
 * events in microseconds: one per node on the calling thread, one per node per pool worker
 * that did part of it), and a self-contained HTML page (inline SVG, no script, no network):
 * a timeline of the latest run per thread, the time per op type, the roofline with every node
 * that does floating-point work, the slowest nodes and the advice. */
#include <math.h>
#include <string.h>

#include "prof.h"

/* Start of the latest run: the earliest node start. */
static double run_start(const prof_data *d) {
  double t0 = 0;
  for (size_t i = 0; i < d->n; i++)
    if (d->nodes[i].p.runs && (t0 == 0 || d->nodes[i].p.last_start_ms < t0)) t0 = d->nodes[i].p.last_start_ms;
  return t0;
}

static void trace_event(FILE *f, int *first, const prof_node *q, int tid, double ts_ms, double dur_ms) {
  fprintf(f, "%s\n{\"name\": ", *first ? "" : ",");
  *first = 0;
  prof_json_str(f, q->p.name);
  fprintf(f, ", \"cat\": ");
  prof_json_str(f, q->p.op_type);
  fprintf(f, ", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"op\": ", tid,
          ts_ms * 1e3, dur_ms * 1e3);
  prof_json_str(f, q->p.op_type);
  fprintf(f, ", \"output\": ");
  prof_json_str(f, q->p.shape);
  fprintf(f, ", \"flops\": %.0f, \"bytes\": %.0f, \"ms_per_run\": %.6f, \"efficiency\": %.4f}}", q->p.flops,
          q->p.bytes, q->ms, q->eff);
}

int prof_trace(FILE *f, const prof_data *d) {
  double t0 = run_start(d);
  int first = 1;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
  fprintf(f, "\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": ");
  prof_json_str(f, d->model);
  fprintf(f, "}}");
  for (int t = 0; t < d->threads; t++)
    fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": "
               "\"%s %d\"}}", t, t ? "worker" : "caller", t);
  first = 0;
  for (size_t i = 0; i < d->n; i++) {
    const prof_node *q = &d->nodes[i];
    if (!q->p.runs) continue;
    trace_event(f, &first, q, 0, q->p.last_start_ms - t0, q->p.last_ms);
    for (int t = 1; q->thr && t < q->p.threads; t++)
      if (q->thr[t].last_busy_ms > 0 && q->thr[t].last_start_ms > 0)
        trace_event(f, &first, q, t, q->thr[t].last_start_ms - t0, q->thr[t].last_busy_ms);
  }
  fprintf(f, "\n]}\n");
  return ferror(f) ? CLI_ERR : CLI_OK;
}

/* ---- HTML ---- */

static void html_str(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

static const char *color_of(const char *op) {
  static const char *const pal[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                                    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#d62728"};
  unsigned h = 5381;
  for (; *op; op++) h = h * 33 + (unsigned char)*op;
  return pal[h % (sizeof pal / sizeof pal[0])];
}

static void timeline(FILE *f, const prof_data *d) {
  double t0 = run_start(d), end = 0;
  for (size_t i = 0; i < d->n; i++)
    if (d->nodes[i].p.runs && d->nodes[i].p.last_start_ms + d->nodes[i].p.last_ms - t0 > end)
      end = d->nodes[i].p.last_start_ms + d->nodes[i].p.last_ms - t0;
  if (end <= 0) end = 1;
  int lanes = d->threads, W = 1100, L = 90, H = 26;
  fprintf(f, "<h2>Timeline of the latest run (%.3f ms)</h2>\n<svg id=\"timeline\" width=\"%d\" height=\"%d\" "
             "xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">\n", end, W, lanes * H + 30);
  for (int t = 0; t < lanes; t++)
    fprintf(f, "<text x=\"4\" y=\"%d\">%s %d</text>\n", t * H + 17, t ? "worker" : "caller", t);
  double sx = (W - L - 10) / end;
  for (size_t i = 0; i < d->n; i++) {
    const prof_node *q = &d->nodes[i];
    if (!q->p.runs) continue;
    for (int t = 0; t < lanes; t++) {
      double s = t ? (q->thr && t < q->p.threads ? q->thr[t].last_start_ms : 0) : q->p.last_start_ms;
      double w = t ? (q->thr && t < q->p.threads ? q->thr[t].last_busy_ms : 0) : q->p.last_ms;
      if (w <= 0 || s <= 0) continue;
      fprintf(f, "<rect class=\"node\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>",
              L + (s - t0) * sx, t * H + 4, w * sx > 0.5 ? w * sx : 0.5, H - 6, color_of(q->p.op_type));
      html_str(f, q->p.name);
      fprintf(f, " (");
      html_str(f, q->p.op_type);
      fprintf(f, ") %.3f ms</title></rect>\n", w);
    }
  }
  for (int k = 0; k <= 5; k++)
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"#555\">%.2f ms</text>\n", L + k * (W - L - 60) / 5.0, lanes * H + 22,
            end * k / 5);
  fprintf(f, "</svg>\n");
}

static void op_bars(FILE *f, const prof_data *d) {
  size_t n = d->n_ops < 20 ? d->n_ops : 20;
  int W = 1100, L = 200, H = 22;
  double max = n ? d->ops[0].ms : 1;
  if (max <= 0) max = 1;
  fprintf(f, "<h2>Time per op type (ms per run)</h2>\n<svg id=\"optime\" width=\"%d\" height=\"%zu\" "
             "xmlns=\"http://www.w3.org/2000/svg\" font-size=\"12\">\n", W, n * H + 10);
  for (size_t i = 0; i < n; i++) {
    const prof_op *o = &d->ops[i];
    double w = (W - L - 160) * o->ms / max;
    fprintf(f, "<text x=\"4\" y=\"%zu\">", i * H + 16);
    html_str(f, o->op);
    fprintf(f, " (%zu)</text><rect class=\"bar\" x=\"%d\" y=\"%zu\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>"
               "<text x=\"%.1f\" y=\"%zu\">%.3f ms, %.1f%%</text>\n", o->nodes, L, i * H + 4, w > 1 ? w : 1, H - 6,
            color_of(o->op), L + w + 6, i * H + 16, o->ms, d->node_ms > 0 ? 100 * o->ms / d->node_ms : 0);
  }
  fprintf(f, "</svg>\n");
}

/* Log-log roofline: x = flop/byte in [1/16, 1024], y = GFLOP/s in [peak/4096, 2 x peak]. */
static void roofline_plot(FILE *f, const prof_data *d) {
  int W = 700, H = 460, L = 70, B = 50, T = 20, R = 170;
  double x0 = log10(1.0 / 16), x1 = log10(1024), peak = d->peak > 0 ? d->peak : 1;
  double y1 = log10(2 * peak), y0 = y1 - log10(8192);
#define PX(v) (L + (log10(v) - x0) / (x1 - x0) * (W - L - R))
#define PY(v) (H - B - (log10(v) - y0) / (y1 - y0) * (H - B - T))
  fprintf(f, "<h2>Roofline (%s, %d thread(s))</h2>\n<svg id=\"roofline\" width=\"%d\" height=\"%d\" "
             "xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">\n", d->ceil.cpu, d->threads, W, H);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", L, T, W - L - R,
          H - B - T);
  for (double v = 1.0 / 16; v <= 1024; v *= 4)
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", PX(v), H - B + 15, v);
  for (double v = pow(10, ceil(y0)); v <= 2 * peak; v *= 10)
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 4, PY(v) + 4, v);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">arithmetic intensity (flop/byte)</text>\n",
          (W - R + L) / 2, H - 12);
  fprintf(f, "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">GFLOP/s</text>\n",
          (H - B + T) / 2, (H - B + T) / 2);
  for (int l = CEIL_L3; l <= CEIL_DRAM; l++) { /* the memory roofs up to the ridge */
    double bw = d->bw[l], xa = 1.0 / 16, xr = peak / bw;
    if (bw <= 0) continue;
    if (xr > 1024) xr = 1024;
    double ya = xa * bw > pow(10, y0) ? xa * bw : pow(10, y0);
    xa = ya / bw;
    fprintf(f, "<line class=\"roof\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s %.1f GB/s</text>\n", PX(xa), PY(ya), PX(xr), PY(xr * bw),
            l == CEIL_L3 ? "#59a14f" : "#e15759", PX(xr) + 4, PY(xr * bw) + (l == CEIL_L3 ? -4 : 12),
            l == CEIL_L3 ? "#59a14f" : "#e15759", ceil_level_names[l], bw);
  }
  fprintf(f, "<line class=\"roof\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-width=\"2\"/>"
             "<text x=\"%.1f\" y=\"%.1f\">FMA peak %.1f GFLOP/s</text>\n", PX(peak / d->bw[CEIL_L3]), PY(peak),
          PX(1024.0), PY(peak), PX(1024.0) + 4, PY(peak) + 4, peak);
  for (size_t i = 0; i < d->n; i++) {
    const prof_node *q = &d->nodes[i];
    if (q->intensity <= 0 || q->gflops <= 0) continue;
    double x = q->intensity < 1.0 / 16 ? 1.0 / 16 : q->intensity > 1024 ? 1024 : q->intensity;
    double y = q->gflops < pow(10, y0) ? pow(10, y0) : q->gflops;
    double r = 3 + 9 * sqrt(d->node_ms > 0 ? q->ms / d->node_ms : 0);
    fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" fill-opacity=\"0.7\"><title>",
            PX(x), PY(y), r, color_of(q->p.op_type));
    html_str(f, q->p.name);
    fprintf(f, " (");
    html_str(f, q->p.op_type);
    fprintf(f, "): %.1f GFLOP/s at %.2f flop/B, %.0f%% of roof, %.3f ms</title></circle>\n", q->gflops, q->intensity,
            100 * q->eff, q->ms);
  }
#undef PX
#undef PY
  fprintf(f, "</svg>\n");
}

static void node_rows(FILE *f, const prof_data *d) {
  fprintf(f, "<h2>Slowest nodes</h2>\n<table id=\"nodes\"><tr><th>ms/run</th><th>share</th><th>GFLOP/s</th>"
             "<th>GB/s</th><th>flop/B</th><th>roof</th><th>bound</th><th>eff</th><th>op</th><th>node</th>"
             "<th>output</th><th>replaced</th></tr>\n");
  size_t n = d->n < 40 ? d->n : 40;
  for (size_t k = 0; k < n; k++) {
    const prof_node *q = &d->nodes[d->order[k]];
    fprintf(f, "<tr><td>%.3f</td><td>%.1f%%</td><td>%.1f</td><td>%.1f</td><td>%.2f</td><td>%.1f %s</td><td>%s</td>"
               "<td>%.0f%%</td><td>", q->ms, d->node_ms > 0 ? 100 * q->ms / d->node_ms : 0, q->gflops, q->gbs,
            q->intensity, q->roof, q->p.flops > 0 ? "GFLOP/s" : "GB/s",
            q->bound == BOUND_COMPUTE ? "compute" : q->bound == BOUND_MEMORY ? "memory" : "-", 100 * q->eff);
    html_str(f, q->p.op_type);
    fprintf(f, "</td><td>");
    html_str(f, q->p.name);
    fprintf(f, "</td><td>");
    html_str(f, q->p.shape);
    fprintf(f, "</td><td>%zu</td></tr>\n", q->replaced);
  }
  fprintf(f, "</table>\n");
}

static void advice_item(const char *line, void *ctx) {
  FILE *f = ctx;
  fprintf(f, "<li>");
  html_str(f, line);
  fprintf(f, "</li>\n");
}

int prof_html(FILE *f, const prof_data *d) {
  fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kiln profile: ");
  html_str(f, d->model);
  fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse;"
             "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}td:nth-child(n+9)"
             "{text-align:left}h2{font-size:16px;margin-top:24px}li{margin:4px 0;font-size:13px}</style>\n"
             "</head><body>\n<h1>kiln profile: ");
  html_str(f, d->model);
  fprintf(f, "</h1>\n<p>%d thread(s), level %d, %ld timed runs: median run %.3f ms, mean %.3f ms, nodes %.3f ms "
             "per run; first run %.3f ms. Ceilings of %s (%s): FMA peak %.1f GFLOP/s, L3 %.1f GB/s, DRAM %.1f GB/s.</p>\n",
          d->threads, d->level, d->repeat, d->run_ms, d->mean_ms, d->node_ms, d->first_ms, d->ceil.cpu, d->ceil.isa, d->peak,
          d->bw[CEIL_L3], d->bw[CEIL_DRAM]);
  timeline(f, d);
  op_bars(f, d);
  roofline_plot(f, d);
  fprintf(f, "<h2>Advice</h2>\n<ul id=\"advice\">\n");
  prof_advice_lines(d, advice_item, f);
  fprintf(f, "</ul>\n");
  node_rows(f, d);
  fprintf(f, "</body></html>\n");
  return ferror(f) ? CLI_ERR : CLI_OK;
}
