/* A shared library that is not a kiln plugin: it exports no kiln_register_ops. */
#include "kiln/kiln_op.h"

KILN_PLUGIN_EXPORT int not_a_plugin(void);
KILN_PLUGIN_EXPORT int not_a_plugin(void) { return 42; }
