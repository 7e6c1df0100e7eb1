/* Public run options: a terminate flag that stops runs between nodes, and a time limit
 * (kiln_session_run_with). The options reach the executor through the thread starting the run:
 * the main graph's kiln_graph_run turns them, with the session's max_run_ms, into the run's
 * kiln_run_stop, which its frame and every frame below it (subgraphs, inter-op pool threads)
 * check before each node. */
#include <stdlib.h>
#include <time.h>

#include "base/status.h"
#include "runtime/session.h"

struct kiln_run_options {
  int terminate; /* atomic */
  int64_t timeout_ms;
};

static _Thread_local const kiln_run_options *current_ro;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kiln_run_stop_begin(kiln_run_stop *st, const kiln_session *s) {
  const kiln_run_options *ro = current_ro;
  st->flag = ro ? &ro->terminate : NULL;
  st->limit_ms = ro && ro->timeout_ms ? ro->timeout_ms : s ? s->opts.max_run_ms : 0;
  if (st->limit_ms < 0) st->limit_ms = 0;
  /* a limit too large for the clock is no limit */
  st->deadline_ns = st->limit_ms && st->limit_ms < INT64_MAX / 2000000 ? now_ns() + st->limit_ms * 1000000 : 0;
  if (!st->deadline_ns) st->limit_ms = 0;
}

kiln_code kiln_run_stop_check(const kiln_run_stop *st, kiln_error *err) {
  if (!st) return KILN_OK;
  if (st->flag && __atomic_load_n(st->flag, __ATOMIC_RELAXED))
    return kiln_fail(err, KILN_ERR_CANCELLED, "the run was cancelled: its run options' terminate flag is set");
  if (st->deadline_ns && now_ns() > st->deadline_ns)
    return kiln_fail(err, KILN_ERR_CANCELLED,
                     "the run passed its time limit of %lld ms; raise it with the session option "
                     "kiln_options.max_run_ms (kiln run --limit max_run_ms=N) or "
                     "kiln_run_options_set_timeout_ms",
                     (long long)st->limit_ms);
  return KILN_OK;
}

kiln_code kiln_run_options_create(kiln_run_options **out, kiln_error *err) {
  if (!out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_run_options_create: missing argument");
  *out = calloc(1, sizeof **out);
  return *out ? KILN_OK : kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
}

void kiln_run_options_free(kiln_run_options *ro) { free(ro); }

void kiln_run_options_set_terminate(kiln_run_options *ro, int terminate) {
  if (ro) __atomic_store_n(&ro->terminate, terminate ? 1 : 0, __ATOMIC_RELAXED);
}

int kiln_run_options_terminate(const kiln_run_options *ro) {
  return ro ? __atomic_load_n(&ro->terminate, __ATOMIC_RELAXED) : 0;
}

void kiln_run_options_set_timeout_ms(kiln_run_options *ro, int64_t ms) {
  if (ro) ro->timeout_ms = ms;
}

kiln_code kiln_session_run_with(kiln_session *s, const kiln_run_options *ro, size_t n_inputs,
                                const char *const *input_names, const kiln_tensor *const *inputs,
                                size_t n_outputs, const char *const *output_names,
                                kiln_tensor **outputs, kiln_error *err) {
  if (kiln_run_options_terminate(ro)) {
    for (size_t i = 0; outputs && i < n_outputs; i++) outputs[i] = NULL;
    return kiln_fail(err, KILN_ERR_CANCELLED, "the run was cancelled: its run options' terminate flag is set");
  }
  const kiln_run_options *saved = current_ro; /* a run started from inside a run (a plugin's) keeps its own */
  current_ro = ro;
  kiln_code rc = kiln_session_run(s, n_inputs, input_names, inputs, n_outputs, output_names, outputs, err);
  current_ro = saved;
  return rc;
}
