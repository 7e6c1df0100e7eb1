/* kiln bench --plot FILE.svg: the latency distribution of each batch size as a quantile plot
 * (latency against the fraction of runs at or below it), with the median and p99 marked, so
 * tail latency shows at a glance. */
#include <math.h>
#include <stdio.h>

#include "cli.h"

static const char *const colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                                     "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

int bench_plot_svg(FILE *f, const char *model, const bench_series *s, int n) {
  int W = 760, H = 420, L = 70, R = 150, T = 40, B = 50;
  double hi = 0;
  for (int i = 0; i < n; i++)
    if (s[i].n && s[i].sorted[s[i].n - 1] > hi) hi = s[i].sorted[s[i].n - 1];
  hi = hi > 0 ? hi * 1.05 : 1;
  fprintf(f, "<svg id=\"latency\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
             "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
  fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\">kiln bench: latency distribution per batch size (", L);
  for (const char *p = model; *p; p++) fputs(*p == '<' ? "&lt;" : *p == '&' ? "&amp;" : (char[]){*p, 0}, f);
  fprintf(f, ")</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", L, T,
          W - L - R, H - T - B);
#define PX(q) (L + (q) * (W - L - R))
#define PY(ms) (H - B - (ms) / hi * (H - T - B))
  for (int k = 0; k <= 4; k++) {
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">p%d</text>\n", PX(k / 4.0), H - B + 14, k * 25);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", L - 4, PY(hi * k / 4) + 4, hi * k / 4);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">fraction of runs at or below (quantile)</text>\n",
          (L + W - R) / 2, H - 14);
  fprintf(f, "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">latency (ms)</text>\n",
          (T + H - B) / 2, (T + H - B) / 2);
  for (int i = 0; i < n; i++) {
    const bench_series *b = &s[i];
    const char *c = colors[i % 10];
    if (!b->n) continue;
    fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
    for (size_t k = 0; k < b->n; k++)
      fprintf(f, "%.1f,%.1f ", PX(b->n > 1 ? (double)k / (double)(b->n - 1) : 0.5), PY(b->sorted[k]));
    fprintf(f, "\"/>\n");
    double p50 = b->sorted[(b->n - 1) / 2], p99 = b->sorted[(size_t)floor(0.99 * (double)(b->n - 1))];
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
            PX(0.5), PY(p50), c, PX(0.99), PY(p99), c);
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">batch %lld: p50 %.3g, p99 %.3g ms</text>\n", W - R + 8,
            T + 14 + 16 * i, c, (long long)b->batch, p50, p99);
  }
#undef PX
#undef PY
  fprintf(f, "</svg>\n");
  return ferror(f) ? CLI_ERR : CLI_OK;
}
