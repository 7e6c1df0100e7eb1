/* Public run options: a terminate flag that stops runs between nodes (kiln_session_run_with).
 * The flag reaches the executor through the thread starting the run: kiln_graph_run copies it
 * into the main graph's frame, from which subgraphs and inter-op pool threads read it. */
#include <stdlib.h>

#include "base/status.h"
#include "runtime/session.h"

struct kiln_run_options {
  int terminate; /* atomic */
};

static _Thread_local const int *current_flag;

const int *kiln_run_terminate_flag(void) { return current_flag; }

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

kiln_code kiln_session_run_with(kiln_session *s, const kiln_run_options *ro, size_t n_inputs,
                                const char *const *input_names, const kiln_tensor *const *inputs,
                                size_t n_outputs, const char *const *output_names,
                                kiln_tensor **outputs, kiln_error *err) {
  if (kiln_run_options_terminate(ro)) {
    for (size_t i = 0; outputs && i < n_outputs; i++) outputs[i] = NULL;
    return kiln_fail(err, KILN_ERR_CANCELLED, "the run was cancelled: its run options' terminate flag is set");
  }
  const int *saved = current_flag; /* a run started from inside a run (a plugin's) keeps its own */
  current_flag = ro ? &ro->terminate : NULL;
  kiln_code rc = kiln_session_run(s, n_inputs, input_names, inputs, n_outputs, output_names, outputs, err);
  current_flag = saved;
  return rc;
}
