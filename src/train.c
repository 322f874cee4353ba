/* `transformer train`: data-parallel training (section 5) with Adam, the
 * warmup schedule of eq. 3, label smoothing, token-budget batches and
 * gradient accumulation. */
#include "train.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "greedy.h"
#include "synthetic.h"
#include "util.h"

int parse_config_args(Config *c, int argc, char **argv, int first, const char *cmd,
                      int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx)
{
    config_defaults(c);
    const char *file = NULL;
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) { fprintf(stderr, "error: %s: --config needs a file name\n", cmd); return 2; }
            file = argv[++i];
        }
    if (file && config_load_file(c, file)) return 2;
    for (int i = first; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--config")) { i++; continue; }
        if (extra) {
            int rc = extra(ctx, argc, argv, &i);
            if (rc == 1) continue;      /* consumed */
            if (rc > 1) return rc;
        }
        char *eq = strchr(a, '=');
        if (a[0] != '-' && eq) {
            char key[128];
            size_t kl = (size_t)(eq - a);
            if (kl >= sizeof key) kl = sizeof key - 1;
            memcpy(key, a, kl);
            key[kl] = '\0';
            if (config_set(c, "command line", 0, key, eq + 1)) return 2;
            continue;
        }
        fprintf(stderr, "error: %s: unknown argument '%s' (see '%s --help')\n", cmd, a, cmd);
        return 2;
    }
    return config_validate(c, file ? file : "command line");
}

static void load_corpora(TrainRun *r)
{
    const Config *c = &r->cfg;
    if (!strcmp(c->data, "synthetic")) {
        synthetic_corpus(&r->train, c, SPLIT_TRAIN, c->synth_train);
        synthetic_corpus(&r->dev, c, SPLIT_DEV, c->synth_dev);
        return;
    }
    die(2, "%s: dataset files are not supported by this build yet (use data=synthetic)", c->data);
}

void evaluate(TrainRun *r, const Corpus *c, double *loss, double *ppl, long *ntok)
{
    BatchPlan bp;
    double sums[3] = {0, 0, 0}, tot[3];
    if (batchplan_build(&bp, c, r->cfg.max_tokens, r->cfg.max_len, r->cfg.seed) == 0) {
        Batch b = {0};
        for (int k = r->dist.rank; k < bp.n_batches; k += r->dist.size) {
            batch_build(&b, c, bp.idx + bp.start[k], bp.start[k + 1] - bp.start[k], r->cfg.max_len);
            LossStats st = model_forward_backward(&r->model, &b, 0, 0, 0, NULL, NULL);
            sums[0] += st.loss_sum; sums[1] += st.nll_sum; sums[2] += st.n_tokens;
        }
        batch_free(&b);
        batchplan_free(&bp);
    }
    MPI_Allreduce(sums, tot, 3, MPI_DOUBLE, MPI_SUM, r->dist.comm);
    *ntok = (long)tot[2];
    *loss = tot[2] > 0 ? tot[0] / tot[2] : 0.0;
    /* per-wordpiece perplexity from the unsmoothed NLL (Table 3, PPL) */
    *ppl = tot[2] > 0 ? exp(tot[1] / tot[2]) : 0.0;
}

/* exact-match accuracy of greedy decoding on (the first n pairs of) c */
static double greedy_accuracy(TrainRun *r, const Corpus *c, int n, int *n_done)
{
    Model *m = &r->model;
    if (n > c->n) n = c->n;
    int chunk = 64, correct = 0, total = 0;
    int max_out = r->cfg.max_len - 1;
    int32_t *out = xmalloc(sizeof(int32_t) * chunk * max_out);
    int *len = xmalloc(sizeof(int) * chunk);
    int *idx = xmalloc(sizeof(int) * chunk);
    Batch b = {0};
    for (int s = r->dist.rank * chunk; s < n; s += chunk * r->dist.size) {
        int k = n - s < chunk ? n - s : chunk;
        for (int j = 0; j < k; j++) idx[j] = s + j;
        batch_build(&b, c, idx, k, r->cfg.max_len);
        greedy_decode(m, &b, max_out, out, len);
        for (int j = 0; j < k; j++) {
            int L = corpus_tgt_len(c, s + j);
            correct += len[j] == L && !memcmp(out + (size_t)j * max_out, c->tgt_tok + c->tgt_off[s + j], sizeof(int32_t) * L);
            total++;
        }
    }
    int loc[2] = { correct, total }, glob[2];
    MPI_Allreduce(loc, glob, 2, MPI_INT, MPI_SUM, r->dist.comm);
    batch_free(&b);
    free(out); free(len); free(idx);
    *n_done = glob[1];
    return glob[1] ? (double)glob[0] / glob[1] : 0.0;
}

static int threads_for_rank(const Config *c, const Dist *d)
{
    if (c->threads > 0) return c->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = (int)(cores / (d->local_size > 0 ? d->local_size : 1));
    return t > 0 ? t : 1;
}

static void train_help(void)
{
    printf("usage: transformer train [--config FILE] [key=value ...]\n\n"
           "Trains the Transformer (data-parallel under mpirun/srun: one rank per device).\n"
           "With no config and no data, trains the embedded synthetic task (reversal).\n"
           "Logs one line per log_steps: step, loss, lr, target tokens/s, elapsed time.\n"
           "Every key of input/table3/base.cfg may be given as key=value.\n");
}

int cmd_train(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { train_help(); return 0; }
    TrainRun *r = xcalloc(1, sizeof *r);
    dist_init(&r->dist, &argc, &argv);
    dist_install_abort(&r->dist);
    Dist *D = &r->dist;
    if (parse_config_args(&r->cfg, argc, argv, 2, "train", NULL, NULL)) {
        if (D->size > 1) MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    Config *c = &r->cfg;
    char text[16384], msg[256];
    if (config_to_string(c, text, sizeof text) < 0) die(1, "config text too long");
    if (dist_check_same(D, text, strlen(text), "the configuration", msg, sizeof msg)) {
        if (D->rank == 0) fprintf(stderr, "error: %s\n", msg);
        MPI_Barrier(D->comm);
        dist_finalize(D);
        return 2;
    }
    int threads = threads_for_rank(c, D);
    r->be = backend_create(c->device, c->precision, threads, D->local_rank);
    if (!r->be) die(2, "rank %d: cannot create backend '%s'", D->rank, c->device);
    if (model_init(&r->model, c, r->be)) die(1, "rank %d: out of device memory for the parameters", D->rank);
    Model *m = &r->model;
    size_t bytes = sizeof(float) * m->pt.total;
    {
        float *host = xmalloc(bytes);
        r->be->download(r->be, host, m->params, bytes);
        if (dist_check_same(D, host, bytes, "the initial parameters", msg, sizeof msg)) die(2, "%s", msg);
        free(host);
    }
    load_corpora(r);
    if (batchplan_build(&r->plan, &r->train, c->max_tokens, c->max_len, c->seed))
        die(2, "%s: no training pair fits max_len=%d", c->data, c->max_len);
    gradsync_init(&r->sync, D, &m->pt, m->grads, (size_t)c->bucket_kb * 1024);
    gradsync_use_backend(&r->sync, r->be);   /* CUDA: NCCL on device memory */
    if (D->rank == 0)
        printf("train: %zu parameters, %d ranks x %d threads, %d batches/epoch, update_freq %d, backend %s\n",
               m->pt.total, D->size, threads, r->plan.n_batches, c->update_freq, r->be->name);

    Batch b = {0};
    double t_start = now_seconds(), t_log = t_start;
    double log_loss = 0, log_tok = 0, log_tok_time = 0;
    for (int step = r->step + 1; step <= c->train_steps; step++) {
        r->be->zero(r->be, m->grads, bytes);
        double loc[3] = {0, 0, 0}, glob[3];
        for (int k = 0; k < c->update_freq; k++) {
            int bi = batchplan_global(&r->plan, batchplan_position(step, D->rank, k, D->size, c->update_freq));
            batch_build(&b, &r->train, r->plan.idx + r->plan.start[bi], r->plan.start[bi + 1] - r->plan.start[bi],
                        c->max_len);
            int last = k == c->update_freq - 1;
            /* with accumulation, communicate only on the last micro-batch */
            LossStats st = model_forward_backward(m, &b, (uint32_t)step, 1, 1, last && D->size > 1 ? gradsync_ready : NULL,
                                                  &r->sync);
            loc[0] += st.loss_sum; loc[1] += st.nll_sum; loc[2] += st.n_tokens;
        }
        gradsync_finish(&r->sync);
        MPI_Allreduce(loc, glob, 3, MPI_DOUBLE, MPI_SUM, D->comm);
        /* normalise by the target tokens of the whole global batch */
        model_adam_step(m, step, (float)(1.0 / glob[2]));
        r->be->sync(r->be);
        r->step = step;
        log_loss += glob[0];
        log_tok += glob[2];
        if (step % c->log_steps == 0 || step == c->train_steps) {
            double now = now_seconds();
            log_tok_time = now - t_log;
            if (D->rank == 0) {
                printf("step %d loss %.4f lr %.3e tok/s %.0f elapsed %.1fs\n", step, log_loss / log_tok,
                       model_lrate(c, step), log_tok / (log_tok_time > 0 ? log_tok_time : 1e-9),
                       r->elapsed + now - t_start);
                fflush(stdout);
            }
            t_log = now;
            log_loss = log_tok = 0;
        }
        if (c->eval_steps > 0 && step % c->eval_steps == 0) {
            double loss, ppl;
            long nt;
            evaluate(r, &r->dev, &loss, &ppl, &nt);
            if (D->rank == 0) { printf("dev step %d loss %.4f ppl %.3f tokens %ld\n", step, loss, ppl, nt); fflush(stdout); }
        }
    }
    r->elapsed += now_seconds() - t_start;
    double loss, ppl;
    long nt;
    evaluate(r, &r->dev, &loss, &ppl, &nt);
    if (D->rank == 0) printf("dev final loss %.4f ppl %.3f tokens %ld\n", loss, ppl, nt);
    if (!strcmp(c->data, "synthetic")) {
        int n;
        double acc = greedy_accuracy(r, &r->dev, c->synth_dev, &n);
        if (D->rank == 0) printf("dev greedy exact match %.4f (%d sentences)\n", acc, n);
    }
    fflush(stdout);
    batch_free(&b);
    gradsync_free(&r->sync);
    batchplan_free(&r->plan);
    corpus_free(&r->train);
    corpus_free(&r->dev);
    model_free(m);
    r->be->destroy(r->be);
    dist_finalize(D);
    free(r);
    return 0;
}

static void params_help(void)
{
    printf("usage: transformer params [--config FILE] [key=value ...]\n\n"
           "Prints the exact parameter count on a line 'params <N>', then a breakdown.\n");
}

int cmd_params(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { params_help(); return 0; }
    Config c;
    if (parse_config_args(&c, argc, argv, 2, "params", NULL, NULL)) return 2;
    ParamTable pt;
    param_table_build(&pt, &c);
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
