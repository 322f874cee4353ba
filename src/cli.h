/* Command-line handling shared by the commands: --config FILE and
 * key=value overrides into a Config. */
#ifndef CLI_H
#define CLI_H

#include "config.h"

/* options shared by commands: --config FILE and key=value overrides */
int parse_config_args(Config *c, int argc, char **argv, int first, const char *cmd,
                      int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx);

#endif
