/* kiln serve: the HTTP inference server; its logic lives in src/serve (the kiln_serve library). */
#include "cli.h"
#include "kiln_serve.h"

int cmd_serve(int argc, char **argv) { return kiln_serve_main(argc, argv); }
