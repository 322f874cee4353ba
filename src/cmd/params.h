/* `transformer params`: the exact parameter count of a config. */
#ifndef PARAMS_H
#define PARAMS_H

int cmd_params(int argc, char **argv);

#endif
