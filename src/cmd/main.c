/* bin/transformer <command> [options] [key=value ...] */
#include <stdio.h>
#include <string.h>

#include "attention.h"
#include "average.h"
#include "eval.h"
#include "heads.h"
#include "params.h"
#include "prepare.h"
#include "train.h"
#include "translate.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} Command;

static const Command COMMANDS[] = {
    { "train", cmd_train, "train a model (under mpirun/srun: data-parallel)" },
    { "params", cmd_params, "print the exact parameter count of a config" },
    { "translate", cmd_translate, "beam search over a dataset split or raw text (section 6.1)" },
    { "eval", cmd_eval, "dev/test loss and per-wordpiece perplexity of a checkpoint" },
    { "prepare", cmd_prepare, "parallel text -> BPE vocabulary + binarized HDF5 dataset" },
    { "average", cmd_average, "average the parameters of checkpoints (section 6.1)" },
    { "attention", cmd_attention, "write attention maps of chosen sentences to HDF5" },
    { "heads", cmd_heads, "head importance and attention statistics of a checkpoint to HDF5" },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: transformer <command> [options] [key=value ...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n'transformer <command> --help' describes each command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc, argv);
    fprintf(stderr, "error: unknown command '%s' (see 'transformer --help')\n", argv[1]);
    return 2;
}
