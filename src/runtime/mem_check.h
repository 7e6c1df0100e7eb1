/* The memory a model asks for, checked against max_memory_bytes when it is compiled. */
#ifndef KILN_RUNTIME_MEM_CHECK_H
#define KILN_RUNTIME_MEM_CHECK_H

#include <stdint.h>

#include "ir/graph.h"

/* Refuses (KILN_ERR_MODEL, naming the value or the total and the option max_memory_bytes) a
 * main graph whose weights, or whose weights plus the peak of its statically shaped
 * intermediates taken in execution order, need more than `limit` bytes, or any value whose
 * static shape alone does (or overflows). This is a lower bound of what a run takes: values
 * whose shapes are known only at run time are checked one by one as they are made. */
kiln_code kiln_check_memory(const kiln_graph *g, int64_t limit, kiln_error *err);

#endif
