/* kiln serve: the entry point the `kiln serve` command calls (the kiln_serve library). */
#ifndef KILN_SERVE_KILN_SERVE_H
#define KILN_SERVE_KILN_SERVE_H

/* Parse the arguments (argv[0] is "serve") and the KILN_* environment, serve until SIGTERM or
 * SIGINT, drain, and return the process exit code: 0 after a clean drain, 1 on an error, 2 on
 * a usage error. */
int kiln_serve_main(int argc, char **argv);

#endif
