/* The public options' defaults (kiln_options_init, kiln.h): read by every layer that takes
 * options (the reader's limits, the optimizer's level, the runtime), so they live at the bottom. */
#include <string.h>

#include "kiln/kiln.h"

void kiln_options_init(kiln_options *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->opt_level = 2;
  o->threads = 0;
}
