/* Memory planner: intermediates of the main graph live in one arena per run, at offsets planned
 * from their sizes and lifetimes.
 *
 * The first run with a given input-shape signature records every intermediate's byte size
 * (shapes may depend on data, so sizes are measured rather than predicted); the plan is then
 * built (greedy by size, best-fit offsets among values whose lifetimes overlap, as in the
 * TensorFlow and ONNX Runtime planners) and later runs with the same signature allocate one
 * arena and hand out its slices. A value whose size differs from the plan falls back to its own
 * allocation. Plans are cached per signature, at most KILN_PLAN_CACHE of them (least recently
 * used evicted), so changing input shapes cannot grow memory without bound. Graph outputs,
 * values read by subgraphs and strings are never planned.
 *
 * Concat in place: when a Concat's inputs are intermediates read by it alone and, on the
 * recording run, each input turned out to be one contiguous block of the output (every axis
 * before the concat axis has size 1, e.g. channels of a batch-1 NCHW tensor) at a 64-byte
 * aligned position, the plan places each input inside the output's slot: the producers write
 * straight into the concatenated tensor and the Concat kernel finds nothing to copy. The
 * output's slot then lives from the first producer to the output's last reader.
 *
 * Elementwise in place: an op whose kernel may overwrite its input (kiln_op_in_place_ok) gets
 * the slot of an input of the same size that it alone reads; a chain of such ops shares one
 * slot. */
#ifndef KILN_RUNTIME_PLANNER_H
#define KILN_RUNTIME_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"

enum { KILN_PLAN_CACHE = 8 };

typedef struct kiln_planner kiln_planner;
typedef struct kiln_plan kiln_plan;

/* Per-run state handed to the executor. */
typedef struct kiln_run_mem {
  kiln_planner *planner;
  kiln_plan *plan;        /* NULL while recording */
  uint8_t *arena;
  size_t *recorded;       /* recording run: bytes per value id (0 = none) */
  bool *concat_ok;        /* recording run: per node, a Concat whose inputs may live in place */
  char *signature;
} kiln_run_mem;

/* `time` gives each node's step (NULL: its index): values live from their producer's step to
 * their last reader's, so nodes that share a step (run concurrently) never share memory. */
kiln_planner *kiln_planner_new(const kiln_graph *g, const int *time);
void kiln_planner_free(kiln_planner *p);

/* Start a run for the given input signature (any string identifying the input shapes). */
kiln_code kiln_planner_begin(kiln_planner *p, const char *signature, kiln_run_mem *rm,
                             kiln_error *err);
/* Arena memory for value `id` of `nbytes`, or NULL when it must be allocated on its own.
 * During a recording run, remembers the size. */
void *kiln_planner_slot(kiln_run_mem *rm, int id, size_t nbytes);
/* Whether node `node` is a Concat the planner could lay out in place (see above); the executor
 * then checks the run-time condition and reports it with kiln_planner_note_concat. */
bool kiln_planner_concat_candidate(const kiln_run_mem *rm, size_t node);
void kiln_planner_note_concat(kiln_run_mem *rm, size_t node, bool in_place);
/* Finish the run: a successful recording run builds and caches the plan. */
void kiln_planner_end(kiln_run_mem *rm, bool ok);

/* Bytes of the most recently built or used plan: the arena, and the sum of the intermediates
 * it holds (what allocation without reuse would take). Both 0 before any plan exists. */
void kiln_planner_stats(kiln_planner *p, size_t *arena_bytes, size_t *intermediate_bytes,
                        size_t *n_plans);

#endif
