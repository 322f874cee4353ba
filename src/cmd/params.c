/* `transformer params`: the exact parameter count of a config. */
#include "params.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "model.h"

static void params_help(void)
{
    printf("usage: transformer params [--config FILE] [key=value ...]\n\n"
           "Prints the exact parameter count on a line 'params <N>', then a breakdown.\n");
}

int cmd_params(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { params_help(); return 0; }
    Config c;
    if (parse_config_args(&c, argc, argv, 2, "params", NULL, NULL)) return 2;
    ParamTable pt;
    param_table_build(&pt, &c.model);
    printf("params %zu\n", pt.total);
    size_t emb = (size_t)c.vocab_size * c.d_model, pos = pt.has_pos ? (size_t)c.max_len * c.d_model : 0;
    size_t enc = pt.emb_begin - pt.enc_begin, dec = pt.enc_begin;
    printf("  shared_embedding     %12zu  (vocab %d x d_model %d)\n", emb, c.vocab_size, c.d_model);
    if (pos) printf("  positional_embedding %12zu  (max_len %d x d_model %d)\n", pos, c.max_len, c.d_model);
    printf("  encoder              %12zu  (%d layers x %zu)\n", enc, c.n_layers, enc / c.n_layers);
    printf("  decoder              %12zu  (%d layers x %zu)\n", dec, c.n_layers, dec / c.n_layers);
    param_table_free(&pt);
    return 0;
}
