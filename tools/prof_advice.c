/* kiln profile's advice (prof.h): rules over the roofline figures, each with the gain it
 * expects and what to do (a flag, a fusion level, a plugin pattern, a kernel that is missing).
 *
 * Rules, in order: the op type that dominates; chains of nodes one of kiln's fusion patterns
 * covers that ran unfused (consecutive in execution order; bytes saved = the intermediate
 * written once and read once, time saved = those bytes at the measured bandwidth of the level
 * they live in); nodes over 2% of the run under 30% of their roof (gain: the time at the
 * roof); layout and data movement over 5%; idle worker threads (measured busy time); first-run
 * costs; per-node overhead; fused nodes that fell back. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prof.h"

typedef struct sink {
  void (*emit)(const char *line, void *ctx);
  void *ctx;
  int n;
} sink;

__attribute__((format(printf, 2, 3))) static void say(sink *s, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->emit(line, s->ctx);
  s->n++;
}

static int is_op(const char *op, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(op, *list)) return 1;
  return 0;
}

static const char *const elementwise[] = {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Erf", "Exp",
                                          "Sqrt", "Pow", "Neg", "Abs", "Clip", "LeakyRelu", "HardSigmoid",
                                          "HardSwish", "Min", "Max", NULL};
static const char *const movement[] = {"Transpose", "Reshape", "Concat", "Slice", "Split", "Pad", "Gather", "Expand",
                                       "Tile", "Cast", "Identity", "Squeeze", "Unsqueeze", "Flatten", "Shape",
                                       "ConcatFromSequence", "DepthToSpace", "SpaceToDepth", NULL};

/* The fusion pattern that covers node a followed by node b, or NULL. */
static const char *pattern_of(const char *a, const char *b) {
  static const char *const conv_tail[] = {"BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid",
                                          "HardSigmoid", "HardSwish", "Add", NULL};
  static const char *const mm_tail[] = {"Add", "Relu", "Erf", "Mul", "Div", "Sigmoid", "Tanh", NULL};
  if ((!strcmp(a, "Conv") || !strcmp(a, "FusedConv")) && !strcmp(b, "MaxPool")) return "Conv+MaxPool -> FusedConvMaxPool";
  if (!strcmp(a, "Conv") && is_op(b, conv_tail)) return "Conv+BatchNormalization/activation/Add -> FusedConv";
  if ((!strcmp(a, "MatMul") || !strcmp(a, "Gemm")) && !strcmp(b, "Softmax")) return "MatMul+Softmax+MatMul -> Attention";
  if ((!strcmp(a, "MatMul") || !strcmp(a, "Gemm")) && is_op(b, mm_tail)) return "MatMul/Gemm+bias/activation -> FusedMatMul/FusedGemm";
  if (!strcmp(a, "ReduceMean") && !strcmp(b, "Sub")) return "ReduceMean/Sub/Pow/Sqrt/Div -> LayerNorm";
  if (!strcmp(a, "Gather") && !strcmp(b, "Add")) return "Gather+Add -> FusedEmbedding";
  if (is_op(a, elementwise) && is_op(b, elementwise)) return "elementwise chain -> FusedElementwise";
  return NULL;
}

/* Bytes of a "float[1,64,56,56]" output (0 when not a tensor). */
static double shape_bytes(const char *shape) {
  static const struct { const char *name; double size; } dt[] = {
      {"float16", 2}, {"bfloat16", 2}, {"float", 4}, {"double", 8}, {"int64", 8}, {"uint64", 8}, {"int32", 4},
      {"uint32", 4}, {"int16", 2}, {"uint16", 2}, {"int8", 1}, {"uint8", 1}, {"bool", 1}};
  const char *br = strchr(shape, '[');
  if (!br) return 0;
  double size = 0, e = 1;
  for (size_t i = 0; i < sizeof dt / sizeof dt[0] && !size; i++)
    if ((size_t)(br - shape) == strlen(dt[i].name) && !strncmp(shape, dt[i].name, (size_t)(br - shape))) size = dt[i].size;
  for (char *p = (char *)br + 1; *p && *p != ']';) {
    char *end;
    e *= strtod(p, &end);
    if (end == p) return 0;
    p = *end == ',' ? end + 1 : end;
  }
  return size * e;
}

#define MAX_PATTERNS 8
typedef struct chain_count {
  const char *pattern;
  size_t pairs;
  double bytes;
} chain_count;

static void unfused_chains(sink *s, const prof_data *d) {
  chain_count found[MAX_PATTERNS];
  size_t n_found = 0;
  for (size_t i = 0; i + 1 < d->n; i++) {
    const char *pat = pattern_of(d->nodes[i].p.op_type, d->nodes[i + 1].p.op_type);
    if (!pat) continue;
    size_t k = 0;
    while (k < n_found && strcmp(found[k].pattern, pat)) k++;
    if (k == n_found) {
      if (n_found == MAX_PATTERNS) continue;
      found[n_found++] = (chain_count){pat, 0, 0};
    }
    found[k].pairs++;
    found[k].bytes += 2 * shape_bytes(d->nodes[i].p.shape); /* written, then read back */
  }
  for (size_t k = 0; k < n_found; k++) {
    double bw = d->bw[ceilings_level_of(&d->ceil, found[k].bytes, d->threads)];
    double ms = bw > 0 ? found[k].bytes / (bw * 1e6) : 0;
    say(s, "unfused chain (%s): %zu pair(s) of consecutive nodes store and reload %.2f MB per run; fusing them "
           "saves those bytes, about %.3f ms per run (%.1f%%) at the measured %.1f GB/s: %s", found[k].pattern,
        found[k].pairs, found[k].bytes * 1e-6, ms, d->run_ms > 0 ? 100 * ms / d->run_ms : 0, bw,
        d->level < 2 ? "--level 2 fuses this pattern." :
        "kiln's pass did not match this instance (shapes, fan-out or attributes): a plugin pattern (kiln_op.h) can.");
  }
}

static void below_roof(sink *s, const prof_data *d) {
  int listed = 0;
  for (size_t k = 0; k < d->n && listed < 4; k++) {
    const prof_node *q = &d->nodes[d->order[k]];
    if (q->ms <= 0 || q->ms < 0.02 * d->node_ms || q->eff <= 0 || q->eff >= 0.3) continue;
    double at_roof = q->ms * q->eff;
    const char *todo = q->bound == BOUND_COMPUTE
        ? "a compute kernel below its limit: a faster kernel for this shape is missing (blocking, packing, threads)"
        : q->p.flops > 0 ? "memory-bound but far from the bandwidth: the kernel does not stream (strided access, "
                           "scalar code); fuse it into its producer or vectorise it"
                         : "data movement far from the bandwidth: a strided copy; avoid the layout change or fuse it";
    say(s, "%s '%s' (%s) reaches %.0f%% of its %s roof (%.1f %s): at the roof it would take %.3f ms instead of "
           "%.3f (saves %.1f%% of the run): %s.", q->p.op_type, q->p.name, q->p.shape, 100 * q->eff,
        q->bound == BOUND_COMPUTE ? "compute" : "memory", q->roof, q->p.flops > 0 ? "GFLOP/s" : "GB/s", at_roof,
        q->ms, d->run_ms > 0 ? 100 * (q->ms - at_roof) / d->run_ms : 0, todo);
    listed++;
  }
}

static void data_movement(sink *s, const prof_data *d) {
  double move = 0;
  for (size_t i = 0; i < d->n; i++)
    if (is_op(d->nodes[i].p.op_type, movement)) move += d->nodes[i].ms;
  if (move > 0.05 * d->node_ms)
    say(s, "layout conversions and data movement (Transpose, Reshape, Concat, Slice, Gather, Cast ...) take %.0f%% "
           "of the node time (%.3f ms per run): %s", 100 * move / d->node_ms, move,
        d->level < 2 ? "--level 2 folds transposes into their consumers and fuses such chains." :
        "the model changes layout between kernels; export it in the layout its kernels use, or fuse the "
        "conversion with a plugin pattern.");
}

static void idle_threads(sink *s, const prof_data *d) {
  if (d->threads < 2 || d->node_ms <= 0) return;
  double busy = 0, serial_ms = 0;
  int have = 0;
  const prof_node *worst = NULL;
  for (size_t i = 0; i < d->n; i++) {
    const prof_node *q = &d->nodes[i];
    if (!q->thr || !q->p.runs) continue;
    have = 1;
    double w = 0;
    for (int t = 1; t < q->p.threads; t++) w += q->thr[t].busy_ms / (double)q->p.runs;
    busy += w;
    if (w < 0.1 * q->ms) {
      serial_ms += q->ms;
      if (!worst || q->ms > worst->ms) worst = q;
    }
  }
  if (!have) return;
  double idle = 1 - busy / (d->node_ms * (d->threads - 1));
  if (idle <= 0.3) return;
  if (serial_ms > 0.1 * d->node_ms)
    say(s, "the %d worker thread(s) are idle %.0f%% of the node time (measured busy time); nodes that ran on one "
           "thread take %.3f ms per run (%.0f%%), the largest %s '%s': %s", d->threads - 1, 100 * idle, serial_ms,
        100 * serial_ms / d->node_ms, worst ? worst->p.op_type : "-", worst ? worst->p.name : "-",
        d->inter_op ? "its kernel has no parallel path: a multithreaded kernel for it is missing."
                    : "--inter-op runs independent branches on the idle threads; a serial kernel among them lacks a "
                      "parallel path (or the pool found its worker descheduled and ran the loop alone).");
  else
    say(s, "the %d worker thread(s) are idle %.0f%% of the node time although every large node runs in parallel: "
           "the kernels' serial parts, uneven pieces and dispatch (%.1f us per parallel loop, kiln calibrate) leave "
           "them waiting; larger batches give each loop more work.", d->threads - 1, 100 * idle,
        d->ceil.dispatch_us[1]);
}

static void first_run(sink *s, const prof_data *d) {
  double extra = d->first_ms - d->run_ms;
  if (d->run_ms > 0 && extra > 0.5 * d->run_ms)
    say(s, "the first run takes %.3f ms, %.3f ms more than a warm one (memory plan, page faults of the arena, "
           "weights packed on first use with --lazy-weights): keep the session alive and run one warm-up "
           "request; without --lazy-weights packing happens at load (load took %.1f ms).",
        d->first_ms, extra, d->load_ms);
}

void prof_advice_lines(const prof_data *d, void (*emit)(const char *line, void *ctx), void *ctx) {
  sink s = {emit, ctx, 0};
  if (d->n_ops && d->node_ms > 0 && d->ops[0].ms / d->node_ms > 0.5)
    say(&s, "%s takes %.0f%% of the node time (%zu nodes): it decides this model's speed.", d->ops[0].op,
        100 * d->ops[0].ms / d->node_ms, d->ops[0].nodes);
  unfused_chains(&s, d);
  below_roof(&s, d);
  data_movement(&s, d);
  idle_threads(&s, d);
  first_run(&s, d);
  double tiny = 0;
  size_t n_tiny = 0;
  for (size_t i = 0; i < d->n; i++)
    if (d->nodes[i].ms < 0.005) tiny += d->nodes[i].ms, n_tiny++;
  if (n_tiny > 20 && d->run_ms - d->node_ms + tiny > 0.15 * d->run_ms)
    say(&s, "%zu nodes take under 5 us each; per-node overhead and gaps are %.0f%% of the run: fewer, larger "
            "nodes (--level 2, batching) amortise it.", n_tiny, 100 * (d->run_ms - d->node_ms + tiny) / d->run_ms);
  if (d->level < 2)
    say(&s, "this run used --level %d; --level 2 fuses operator chains into single kernels.", d->level);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (d->threads == 1 && cores > 1)
    say(&s, "1 thread of %ld logical CPUs: --threads %ld may cut latency.", cores, cores);
  if (d->fallbacks)
    say(&s, "%zu fused node(s) fell back to their original chain (see the messages above): those run unfused.",
        d->fallbacks);
  if (!s.n) say(&s, "no single bottleneck: time is spread over many nodes near their roofs.");
}

static void print_line(const char *line, void *ctx) { fprintf(ctx, "  - %s\n", line); }

void prof_advise(FILE *f, const prof_data *d) {
  fprintf(f, "\nadvice\n");
  prof_advice_lines(d, print_line, f);
}
