/* Opening a checkpoint for inference (inference.h). */
#include "inference.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "auto_tokens.h"
#include "dataset.h"
#include "synthetic.h"
#include "util.h"

int eval_read_config(const char *cmd, const char *ckpt, const char *data, char *const *over, int n_over, Config *c,
                     CkptState *st)
{
    int rc = checkpoint_read_config(ckpt, c, st);
    for (int k = 0; k < n_over && !rc; k++) {
        const char *eq = strchr(over[k], '=');
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - over[k]), over[k]);
        if (config_is_arch_key(key)) {
            fprintf(stderr, "error: %s: key '%s' is an architecture key; it comes from %s\n", cmd, key, ckpt);
            rc = 2;
        } else rc = config_set(c, "command line", 0, key, eq + 1);
    }
    if (!rc && n_over) rc = config_validate(c, "command line");
    if (rc || !strcmp(data, "synthetic")) return rc;
    int v = dataset_vocab_size(data);
    if (v <= 0) return 2;
    if (v != c->vocab_size) {
        fprintf(stderr, "error: %s: dataset vocabulary has %d pieces but the model in %s has vocab_size %d\n", data, v,
                ckpt, c->vocab_size);
        return 2;
    }
    return checkpoint_check_vocab(ckpt, st, data);
}

int eval_open_model(TrainRun *r, const char *ckpt)
{
    Dist *D = &r->dist;
    Config *c = &r->cfg;
    Config keep = *c;
    int threads = c->threads > 0 ? c->threads : (int)(sysconf(_SC_NPROCESSORS_ONLN) / (D->local_size > 0 ? D->local_size : 1));
    if (threads < 1) threads = 1;
    r->be = backend_create(c->device, c->precision, c->allreduce, threads, D->local_rank);
    if (!r->be) die(2, "rank %d: cannot create backend '%s'", D->rank, c->device);
    if (checkpoint_open_model(ckpt, c, NULL, &r->model, r->be)) return 2;
    /* keep the overrides that only evaluation uses */
    c->max_tokens = keep.max_tokens;
    if (model_mask_heads(&r->model, keep.mask_heads, "command line")) return 2;
    /* max_tokens = 0 given here: from the free device memory (auto_tokens.h) */
    if (c->max_tokens == 0 && (c->max_tokens = auto_tokens_resolve(&r->model, D)) <= 0) return 2;
    r->model.cfg.max_tokens = c->max_tokens;
    return 0;
}

int eval_load_split(const char *data, const char *split, const Config *c, Corpus *corp)
{
    return !strcmp(data, "synthetic") ? synthetic_load_split(corp, c, split) : dataset_load(data, split, corp);
}
