/* `transformer eval --checkpoint CKPT --data DATA.h5 [--split dev]`: loads the
 * model with the configuration stored in the checkpoint (checkpoint.h), and
 * prints the split's loss and per-wordpiece perplexity, both WITHOUT label
 * smoothing and without dropout (the PPL column of Table 3 is "per-wordpiece,
 * according to our byte-pair encoding").  Runs data-parallel under mpirun
 * like train (evaluate() in train.c sums over ranks). */
#include "eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "train.h"
#include "util.h"

#if defined(__has_include)
#if __has_include("checkpoint.h")
#include "checkpoint.h"
#define HAVE_CHECKPOINT 1
#endif
#endif

static void eval_help(void)
{
    printf("usage: transformer eval --checkpoint CKPT.h5 --data DATA.h5 [--split dev] [key=value ...]\n\n"
           "Prints the loss and per-wordpiece perplexity of the checkpoint's model on a split of\n"
           "a dataset (no label smoothing, no dropout), on a line\n"
           "  eval <split> loss <nll per token> ppl <exp(loss)> tokens <N> pairs <n>\n"
           "The model configuration comes from the checkpoint; key=value may override\n"
           "non-architecture keys (device, precision, threads, max_tokens).\n");
}

int cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL, *data = NULL, *split = "dev";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { eval_help(); return 0; }
    }
#ifndef HAVE_CHECKPOINT
    (void)ckpt; (void)data; (void)split;
    fprintf(stderr, "error: eval: this build has no HDF5 checkpoint support (src/checkpoint.h); "
                    "train reports dev loss/PPL every eval_steps\n");
    return 2;
#else
    TrainRun *r = xcalloc(1, sizeof *r);
    dist_init(&r->dist, &argc, &argv);
    dist_install_abort(&r->dist);
    Dist *D = &r->dist;
    int n_over = 0;
    char **over = xmalloc(sizeof(char *) * (size_t)argc);
    int rc = 0;
    for (int i = 2; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--checkpoint") || !strcmp(a, "--data") || !strcmp(a, "--split")) {
            if (i + 1 >= argc) { fprintf(stderr, "error: eval: %s needs a value\n", a); rc = 2; break; }
            if (!strcmp(a, "--checkpoint")) ckpt = argv[++i];
            else if (!strcmp(a, "--data")) data = argv[++i];
            else split = argv[++i];
        } else if (a[0] != '-' && strchr(a, '=')) over[n_over++] = argv[i];
        else { fprintf(stderr, "error: eval: unknown argument '%s' (see 'transformer eval --help')\n", a); rc = 2; }
    }
    if (!rc && (!ckpt || !data)) { fprintf(stderr, "error: eval: --checkpoint and --data are required\n"); rc = 2; }
    Config *c = &r->cfg;
    /* the stored config, then the overrides (architecture keys must not change) */
    CkptState st;
    if (!rc && D->rank == 0) rc = checkpoint_read_config(ckpt, c, &st);
    for (int k = 0; k < n_over && !rc && D->rank == 0; k++) {
        char key[128];
        const char *eq = strchr(over[k], '=');
        size_t kl = (size_t)(eq - over[k]) < sizeof key - 1 ? (size_t)(eq - over[k]) : sizeof key - 1;
        memcpy(key, over[k], kl);
        key[kl] = '\0';
        if (config_is_arch_key(key)) {
            fprintf(stderr, "error: eval: key '%s' is an architecture key; it comes from %s\n", key, ckpt);
            rc = 2;
        } else rc = config_set(c, "command line", 0, key, eq + 1);
    }
    if (!rc && D->rank == 0 && n_over) rc = config_validate(c, "command line");
    if (!rc && D->rank == 0) {
        int v = dataset_vocab_size(data);
        if (v <= 0) rc = 2;
        else if (v != c->vocab_size) {
            fprintf(stderr, "error: %s: dataset vocabulary has %d pieces but the model in %s has vocab_size %d\n",
                    data, v, ckpt, c->vocab_size);
            rc = 2;
        } else rc = checkpoint_check_vocab(ckpt, &st, data);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, D->comm);
    if (rc) { free(over); dist_finalize(D); free(r); return 2; }
    MPI_Bcast(c, sizeof *c, MPI_BYTE, 0, D->comm);
    Config keep = *c;
    int threads = c->threads > 0 ? c->threads : (int)(sysconf(_SC_NPROCESSORS_ONLN) / (D->local_size > 0 ? D->local_size : 1));
    if (threads < 1) threads = 1;
    r->be = backend_create(c->device, c->precision, c->allreduce, threads, D->local_rank);
    if (!r->be) die(2, "rank %d: cannot create backend '%s'", D->rank, c->device);
    if (checkpoint_open_model(ckpt, c, NULL, &r->model, r->be)) {
        if (util_abort_hook) util_abort_hook(2);
        return 2;
    }
    /* keep the overrides that only evaluation uses */
    c->max_tokens = keep.max_tokens;
    Corpus corp;
    if (dataset_load(data, split, &corp)) { if (util_abort_hook) util_abort_hook(2); return 2; }
    int skipped = 0;
    for (int i = 0; i < corp.n; i++)
        skipped += corpus_src_len(&corp, i) + 1 > c->max_len || corpus_tgt_len(&corp, i) + 1 > c->max_len;
    double t0 = now_seconds(), loss, ppl;
    long ntok;
    evaluate(r, &corp, &loss, &ppl, &ntok);
    int rc_out = 0;
    if (ntok == 0) {
        if (D->rank == 0)
            fprintf(stderr, "error: %s: split '%s' has no pair that fits max_len=%d (%d pairs): nothing to evaluate\n",
                    data, split, c->max_len, corp.n);
        rc_out = 2;
    } else if (D->rank == 0) {
        /* unsmoothed: ppl = exp(NLL / target tokens), so its log is the loss */
        printf("eval %s loss %.4f ppl %.3f tokens %ld pairs %d", split, ntok > 0 ? log(ppl) : 0.0, ppl, ntok,
               corp.n - skipped);
        if (skipped) printf(" (skipped %d longer than max_len=%d)", skipped, c->max_len);
        printf(" time %.1fs\n", now_seconds() - t0);
        fflush(stdout);
    }
    corpus_free(&corp);
    model_free(&r->model);
    r->be->destroy(r->be);
    free(over);
    dist_finalize(D);
    free(r);
    return rc_out;
#endif
}
