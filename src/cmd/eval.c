/* `transformer eval --checkpoint CKPT --data DATA.h5 [--split dev]`: loads the
 * model with the configuration stored in the checkpoint (checkpoint.h), and
 * prints the split's label-smoothed loss (loss_ls), its unsmoothed NLL (nll)
 * and per-wordpiece perplexity exp(nll), without dropout (the PPL column of
 * Table 3 is "per-wordpiece, according to our byte-pair encoding").  Runs data-parallel under mpirun
 * like train (evaluate() in run.c sums over ranks). */
#include "eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "corpus.h"
#include "inference.h"
#include "run.h"
#include "util.h"

static void eval_help(void)
{
    printf("usage: transformer eval --checkpoint CKPT.h5 --data DATA.h5|synthetic [--split dev] [key=value ...]\n\n"
           "Prints the losses and per-wordpiece perplexity of the checkpoint's model on a split\n"
           "of a dataset (no dropout), on a line\n"
           "  eval <split> loss_ls <L> nll <NLL> ppl <exp(NLL)> tokens <N> pairs <n>\n"
           "per target token: loss_ls with the checkpoint's label smoothing, nll without; the\n"
           "names of train's 'dev' lines.\n"
           "The model configuration comes from the checkpoint; key=value may override\n"
           "non-architecture keys (device, precision, threads, max_tokens; max_tokens=0 with\n"
           "device=cuda: from the free device memory); mask_heads=LIST\n"
           "evaluates with those heads masked (docs/attention.md).\n");
}

/* everything cmd_eval holds; eval_end is its one exit */
typedef struct {
    TrainRun *r;
    const char *ckpt, *data, *split;
    char **over;       /* key=value overrides */
    int n_over;
    CkptState st;
    Corpus corp;
    int have_model, have_corp;
} Eval;

static int eval_end(Eval *e, int rc)
{
    if (e->have_corp) corpus_free(&e->corp);
    if (e->have_model) { model_free(&e->r->model); e->r->be->destroy(e->r->be); }
    free(e->over);
    dist_finalize(&e->r->dist);
    free(e->r);
    return rc;
}

static int eval_parse(Eval *e, int argc, char **argv)
{
    e->over = xmalloc(sizeof(char *) * (size_t)argc);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--checkpoint") ? &e->ckpt : !strcmp(a, "--data") ? &e->data
                         : !strcmp(a, "--split") ? &e->split : NULL;
        if (dst) {
            if (cli_option("eval", argc, argv, &i, dst)) return 2;
        } else if (cli_is_setting(a)) e->over[e->n_over++] = argv[i];
        else { fprintf(stderr, "error: eval: unknown argument '%s' (see 'transformer eval --help')\n", a); return 2; }
    }
    if (!e->ckpt || !e->data) { fprintf(stderr, "error: eval: --checkpoint and --data are required\n"); return 2; }
    if (!e->split) e->split = "dev";
    return 0;
}

/* the split's unsmoothed loss and perplexity, printed by rank 0 */
static int evaluate_split(Eval *e)
{
    TrainRun *r = e->r;
    const Config *c = &r->cfg;
    const Corpus *corp = &e->corp;
    int skipped = corpus_count_longer(corp, c->max_len);
    double t0 = now_seconds();
    EvalStats st = evaluate(r, corp);
    if (st.tokens == 0) {
        if (r->dist.rank == 0)
            fprintf(stderr, "error: %s: split '%s' has no pair that fits max_len=%d (%d pairs): nothing to evaluate\n",
                    e->data, e->split, c->max_len, corp->n);
        return 2;
    }
    if (r->dist.rank == 0) {
        /* the names of train's dev lines: ppl = exp(nll), the unsmoothed
         * NLL per target token; loss_ls is the label-smoothed loss */
        printf("eval %s loss_ls %.4f nll %.4f ppl %.3f tokens %ld pairs %d", e->split, st.loss_ls, st.nll, st.ppl,
               st.tokens, corp->n - skipped);
        if (skipped) printf(" (skipped %d longer than max_len=%d)", skipped, c->max_len);
        printf(" time %.1fs\n", now_seconds() - t0);
        fflush(stdout);
    }
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { eval_help(); return 0; }
    Eval e = { .r = xcalloc(1, sizeof(TrainRun)) };
    dist_init(&e.r->dist, &argc, &argv);
    dist_install_abort(&e.r->dist);
    /* the same arguments on every rank: one error line, rank 0's */
    int held = dist_hold_stderr(&e.r->dist);
    int rc = dist_release_stderr(&e.r->dist, held, eval_parse(&e, argc, argv));
    InferenceArgs ia = { .cmd = "eval", .ckpt = e.ckpt, .data = e.data, .over = e.over, .n_over = e.n_over,
                         .auto_tokens = 1 };
    if (!rc && e.r->dist.rank == 0) rc = inference_read_config(&ia, &e.r->cfg, &e.st, NULL);
    MPI_Bcast(&rc, 1, MPI_INT, 0, e.r->dist.comm);
    if (rc) return eval_end(&e, 2);
    /* rank 0's config on every rank; a failure past this point on one rank
     * takes the job down */
    MPI_Bcast(&e.r->cfg, sizeof e.r->cfg, MPI_BYTE, 0, e.r->dist.comm);
    rc = inference_open(&ia, &e.r->dist, &e.r->cfg, &e.r->model, &e.r->be);
    e.have_model = e.r->be != NULL;
    if (rc) {
        if (util_abort_hook) util_abort_hook(2);
        return 2;
    }
    held = dist_hold_stderr(&e.r->dist);   /* the same split on every rank: likewise */
    e.have_corp = !corpus_open(e.data, e.split, &e.r->cfg, &e.corp);
    if (dist_release_stderr(&e.r->dist, held, e.have_corp ? 0 : 2)) return eval_end(&e, 2);
    return eval_end(&e, evaluate_split(&e));
}
