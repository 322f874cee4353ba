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

#include "attention_maps.h"
#include "cli.h"
#include "corpus.h"
#include "dataset.h"
#include "auto_tokens.h"
#include "greedy.h"
#include "resume.h"
#include "run.h"
#include "util.h"

/* parse_config_args on every rank, its errors printed once: by rank 0, or
 * (an MPMD launch with other arguments) by the first rank that fails.
 * ctx (ctx_size bytes) starts zeroed for each parse: an option seen by the
 * first would be "given twice" to the second.  Collective; 0 or 2 on every
 * rank. */
static int parse_config_args_once(Dist *D, Config *c, int argc, char **argv, const char *cmd,
                                  int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx, size_t ctx_size)
{
    memset(ctx, 0, ctx_size);
    int saved = D->rank != 0 ? stderr_quiet() : -1;   /* the other ranks quiet while parsing */
    int rc = parse_config_args(c, argc, argv, 2, cmd, extra, ctx);
    stderr_restore(saved);
    int mine = rc ? D->rank : D->size, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, D->comm);
    if (first == D->size) return 0;
    if (D->rank == first && first != 0) {   /* again, aloud */
        memset(ctx, 0, ctx_size);
        parse_config_args(c, argc, argv, 2, cmd, extra, ctx);
    }
    MPI_Barrier(D->comm);
    return 2;
}

/* the train and dev splits of the dataset or of the synthetic task */
static int open_corpora(const Config *c, Corpus *train, Corpus *dev)
{
    return corpus_open(c->data, "train", c, train) || corpus_open(c->data, "dev", c, dev) ? 2 : 0;
}

static int load_dataset(const Config *c, Corpus *train, Corpus *dev)
{
    int v = dataset_vocab_size(c->data);
    if (v <= 0) return 2;
    if (v != c->vocab_size) {
        fprintf(stderr, "error: %s: dataset vocabulary has %d pieces but vocab_size = %d (set vocab_size=%d)\n",
                c->data, v, c->vocab_size, v);
        return 2;
    }
    /* the training split mapped: one copy per node (dataset_map) */
    if (dataset_map(c->data, "train", train) || dataset_load(c->data, "dev", dev)) return 2;
    return 0;
}

static void load_corpora(TrainRun *r)
{
    const Config *c = &r->cfg;
    if (corpus_is_synthetic(c->data)) {
        open_corpora(c, &r->train, &r->dev);   /* a pure function of the config: cannot fail */
        return;
    }
    /* a dataset written by `transformer prepare` (dataset.h): rank 0 checks
     * it first so that a bad file gives one error line, not one per rank */
    int rc = 0;
    if (r->dist.rank == 0) rc = load_dataset(c, &r->train, &r->dev) || dataset_vocab_hash_of(c->data, &r->vocab_hash);
    MPI_Bcast(&rc, 1, MPI_INT, 0, r->dist.comm);
    if (rc) { dist_finalize(&r->dist); exit(2); }
    if (r->dist.rank != 0 && load_dataset(c, &r->train, &r->dev)) die(2, "%s: cannot load the dataset", c->data);
}

/* a dev line of the log: "dev step N" or "dev final", then the figures
 * under the names that `eval` prints them with */
static void print_dev_line(const char *when, const EvalStats *e)
{
    printf("dev %s loss_ls %.4f nll %.4f ppl %.3f tokens %ld\n", when, e->loss_ls, e->nll, e->ppl, e->tokens);
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
        /* a sentence is right only with its L tokens and EOS next: decoding
         * past the longest target's L + 1 tokens cannot change the count,
         * and an untrained model that never says EOS would otherwise cost
         * max_len recomputed steps (greedy_decode is quadratic) */
        int cap = 0;
        for (int j = 0; j < k; j++) {
            idx[j] = s + j;
            int L = corpus_tgt_len(c, s + j);
            if (L + 1 > cap) cap = L + 1;
        }
        if (cap > max_out) cap = max_out;
        batch_build(&b, c, idx, k, r->cfg.max_len);
        greedy_decode(m, &b, cap, out, len);
        for (int j = 0; j < k; j++) {
            int L = corpus_tgt_len(c, s + j);
            correct += len[j] == L && !memcmp(out + (size_t)j * cap, c->tgt_tok + c->tgt_off[s + j], sizeof(int32_t) * L);
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

typedef struct {
    int resume;               /* --resume */
    const char *dump_params;  /* --dump-params FILE */
} TrainArgs;

/* train-only options */
static int train_extra(void *ctx, int argc, char **argv, int *i)
{
    TrainArgs *a = ctx;
    if (!strcmp(argv[*i], "--resume")) { a->resume = 1; return 1; }
    if (strcmp(argv[*i], "--dump-params")) return 0;
    return cli_option("train", argc, argv, i, &a->dump_params) ? 2 : 1;
}

/* rank 0 prints what the gradient allreduce cost (make bench reads this) */
static void report_gradsync(TrainRun *r, int steps, double train_s)
{
    GradSync *g = &r->sync;
    Dist *D = &r->dist;
    if (D->size == 1 || steps <= 0) return;
    /* reduced here, not per update: no extra collective on the step's critical path */
    double wait = g->t_wait, wait_max, exposed;
    MPI_Allreduce(&wait, &wait_max, 1, MPI_DOUBLE, MPI_MAX, D->comm);
    MPI_Allreduce(&wait, &exposed, 1, MPI_DOUBLE, MPI_MIN, D->comm);
    if (train_s <= 0) train_s = 1e-9;
    double algbw, busbw, t = gradsync_measure(g, 3, &algbw, &busbw);
    if (D->rank != 0) return;
    printf("allreduce: %d buckets (bucket_kb %d, progress thread %s), %.2f MiB/update, %.2f bucket starts/update, %ld of %ld started "
           "during backward\n",
           g->n_buckets, r->cfg.bucket_kb, g->have_thread ? "on" : "off", g->total * 4.0 / 1048576, (double)g->n_started / steps, g->n_early,
           g->n_started);
    printf("allreduce: not hidden by backward %.3f s, %.2f ms/update, %.1f%% of training time; "
           "waiting for slower ranks %.3f s (%.1f%%)\n",
           exposed, 1e3 * exposed / steps, 100.0 * exposed / train_s, wait_max - exposed,
           100.0 * (wait_max - exposed) / train_s);
    printf("allreduce: blocking %.2f MiB x %d ranks: %.2f ms, algbw %.3f GB/s, busbw %.3f GB/s\n",
           g->total * 4.0 / 1048576, D->size, 1e3 * t, algbw / 1e9, busbw / 1e9);
}

/* how rank 0's micro-batches ran under CUDA Graphs (ops.h graph_stats) */
static void report_graphs(TrainRun *r)
{
    Backend *be = r->be;
    if (!be->graph_stats || be->graph_shapes <= 0 || r->dist.rank != 0) return;
    long st[4];
    be->graph_stats(be, st);
    printf("cuda graphs: %ld micro-batches replayed, %ld captured, %ld eager (warm-up), %ld shapes dropped "
           "(cuda_graph_cache %d)\n", st[2], st[1], st[0], st[3], be->graph_shapes);
}

static void train_help(void)
{
    printf("usage: transformer train [--config FILE] [key=value ...]\n\n"
           "Trains the Transformer (data-parallel under mpirun/srun: one rank per device).\n"
           "With no config and no data, trains the embedded synthetic task (reversal).\n"
           "Logs one line per log_steps: step, loss_ls (the label-smoothed loss per target\n"
           "token), lr, target tokens/s, elapsed time (with loss scaling, precision=fp16:\n"
           "also loss_scale S and the steps skipped so far); and every eval_steps and at the end\n"
           "'dev step N' / 'dev final' lines: loss_ls, nll (unsmoothed, per target token),\n"
           "ppl = exp(nll) and tokens, the names 'eval' prints them with.\n"
           "Every key of input/table3/base.cfg may be given as key=value.\n\n"
           "Run directory (run_dir=DIR; empty: nothing is written):\n"
           "  DIR/ckpt_<step>.h5  checkpoints (docs/checkpoint.md), every ckpt_steps steps,\n"
           "                      every ckpt_minutes minutes and at the end. Kept: the\n"
           "                      newest, and the last keep_ckpts of those at multiples of\n"
           "                      ckpt_steps and the final one (all if ckpt_steps=0); these\n"
           "                      are what 'average --last K' averages. Written atomically\n"
           "                      by rank 0 in the background while training goes on.\n"
           "  DIR/metrics.h5      step, loss_ls, lr, tokens/s, elapsed; dev loss_ls/ppl (docs/metrics.md)\n"
           "  DIR/attention_probe.h5  every attn_steps steps: attention maps of the first 4 dev\n"
           "                      pairs, one group per step (docs/attention.md)\n"
           "  --resume            continue from the newest complete checkpoint (an error if\n"
           "                      there is none); without it a run resumes automatically when\n"
           "                      DIR has checkpoints. Architecture keys must match; the resumed\n"
           "                      run is bitwise identical to an uninterrupted one. One run per\n"
           "                      DIR at a time (DIR/.lock).\n\n"
           "Early stopping (docs/training.md): patience=P stops after P dev evaluations\n"
           "(every eval_steps) in a row that do not lower the best dev nll by more than\n"
           "patience_delta nats: exit 0, a line 'early stop: stopped by patience at step N,\n"
           "best step M', the final checkpoint. keep_best=1 checkpoints each new best, keeps\n"
           "it whatever keep_ckpts drops and links it as DIR/best.h5 ('average --upto-best').\n"
           "lr_decay=linear|cosine: eq. 3's warmup, then a decay to lr_final at train_steps.\n\n"
           "Exit codes: 0 done (also stopped by patience); 1 a checkpoint could not be written (disk full: make room and\n"
           "run again to resume), the loss stopped being finite, or the loss scale fell below\n"
           "loss_scale_min (fp16: gradients overflow at any scale); 2 a bad input (config,\n"
           "data, checkpoint, run directory in use); 99 preempted after a checkpoint.\n\n"
           "Preemption: on SIGUSR1 or SIGTERM every rank finishes the current step, a checkpoint\n"
           "is written and the process exits with code 99 (under mpirun send SIGUSR1, which\n"
           "mpirun forwards; under srun the tasks get it from e.g. sbatch --signal=USR1@120\n"
           "or scancel --signal=USR1 JOBID).\n\n"
           "  --dump-params FILE  after the last step, check that all ranks hold the same\n"
           "                      parameters and write them (rank 0) as raw little-endian\n"
           "                      float32 in buffer order (see 'params'), atomically\n\n"
           "Under MPI each rank takes its share of the node's cores (threads=0) and pins\n"
           "one OpenMP thread per core unless OMP_PLACES/OMP_PROC_BIND are set.  A rank\n"
           "that fails takes the whole job down (MPI_Abort) with a message naming it.\n"
           "Gradients are allreduced in buckets of bucket_kb (default 25 MB) started\n"
           "during backward; a thread polls them every progress_us (0: no thread).  A\n"
           "rank that waits allreduce_timeout s (default 600; 0: forever) for its peers\n"
           "ends the job with a line saying so (a peer died or hangs).  At\n"
           "the end rank 0 prints 'allreduce:' lines: buckets, time not hidden by\n"
           "backward, and the bus bandwidth of a blocking allreduce (docs/scaling.md).\n"
           "batch_tokens=N (> 0) sets update_freq = ceil(N / (ranks x max_tokens)), so a\n"
           "config keeps the paper's global batch on any number of ranks (rank 0 warns\n"
           "where the step this makes exceeds N by more than a quarter).\n"
           "max_tokens=0 (device=cuda) takes the micro-batch size from the free device\n"
           "memory after the model (the least over the ranks; one line 'max_tokens: N from\n"
           "free device memory'); a resumed run keeps the value of its checkpoints.\n"
           "Tests: TRANSFORMER_FAIL_AT=RANK:STEP[:SIGNAL] makes RANK fail at STEP;\n"
           "TRANSFORMER_STEP_SLEEP_MS=N makes every step last at least N ms (same results);\n"
           "TRANSFORMER_GRAD_INF=RANK:STEP[:TIMES] puts an inf into RANK's gradients at STEP\n"
           "(its first TIMES attempts; loss scaling then skips the step on every rank).\n");
}

/* everything cmd_train holds besides the TrainRun; train_end is its one exit */
typedef struct {
    TrainRun *r;
    TrainArgs args;
    int threads;                /* OpenMP threads of this rank */
    char bind[160];             /* this rank's CPU binding */
    char *binds;                /* rank 0: every rank's binding, for the log */
    RunDir rd;
    int rd_open;
    Batch b;
    double t_start, t_log;
    int eval_step;              /* step of the last dev evaluation (-1: none) */
    EvalStats dev;              /* of the last dev evaluation */
} Training;

/* how the step loop ended (RUN_SKIPPED: a step left undone, loss_scale.h) */
enum { RUN_DONE, RUN_CKPT_FAILED, RUN_DIVERGED, RUN_PREEMPTED, RUN_SKIPPED, RUN_PATIENCE };

/* the one exit of cmd_train: a run that got as far as its run directory
 * closes it; a completed run (rc 0) frees what it holds; error exits
 * leave the rest to the process's exit */
static int train_end(Training *t, int rc)
{
    TrainRun *r = t->r;
    if (t->rd_open) rundir_close(&t->rd);
    if (rc == 0) {
        batch_free(&t->b);
        gradsync_free(&r->sync);
        batchplan_free(&r->plan);
        corpus_free(&r->train);
        corpus_free(&r->dev);
        model_free(&r->model);
        r->be->destroy(r->be);
    }
    dist_finalize(&r->dist);
    if (rc == 0) free(r);
    return rc;
}

/* a check that every rank ran: rank 0 prints msg, the ranks stop together */
static int train_reject(Training *t, const char *msg)
{
    if (t->r->dist.rank == 0) fprintf(stderr, "error: %s\n", msg);
    MPI_Barrier(t->r->dist.comm);
    return 2;
}

/* batch_tokens: the paper's global batch (~25000 target tokens, section
 * 5.1) on any number of ranks, by accumulating over enough micro-batches of
 * max_tokens.  Past batch_tokens / max_tokens ranks one micro-batch per rank
 * already exceeds it, and the global batch grows with the ranks: say so
 * (rank 0) with the max_tokens that would keep it. */
static void set_update_freq(Config *c, const Dist *D)
{
    long per_update = (long)D->size * c->max_tokens;
    c->update_freq = (int)((c->batch_tokens + per_update - 1) / per_update);
    long global = per_update * c->update_freq;
    if (D->rank == 0 && global > c->batch_tokens + c->batch_tokens / 4)
        fprintf(stderr, "warning: batch_tokens=%d, but %d ranks x max_tokens %d make %ld tokens per step (%.1fx): "
                "set max_tokens=%ld to keep the global batch\n", c->batch_tokens, D->size, c->max_tokens, global,
                (double)global / c->batch_tokens, c->batch_tokens / D->size > 0 ? (long)c->batch_tokens / D->size : 1L);
}

/* an existing file of run_dir: for --dump-params, whose run directory holds
 * what the jobs write beside training's own files (submit-train.sh's
 * slurm-<id>.out, avg5.h5), none of them a raw parameter dump */
static int exists_in_run_dir(const char *out, const char *run_dir)
{
    if (access(out, F_OK) || !cli_in_dir(out, run_dir)) return 0;
    fprintf(stderr, "error: %s: --dump-params is a file of the run directory %s: choose another name\n", out, run_dir);
    return 2;
}

/* --dump-params replaces its file (by rename) after the last step: given
 * the config, the dataset, a file training keeps in the run directory (a
 * checkpoint the run resumes from, its metrics: checkpoint_check_run_output,
 * existing or not) or any other existing file there it would destroy them.
 * Checked by rank 0, which writes it.  0, or 2 on every rank after one
 * line. */
static int dump_not_input(Training *t)
{
    const Config *c = &t->r->cfg;
    const char *out = t->args.dump_params;
    int rc = 0;
    if (out && t->r->dist.rank == 0) {
        const char *in[] = { c->config_file, c->data };
        rc = cli_check_output("train", "--dump-params", out, in, 2);
        if (!rc) rc = checkpoint_check_run_output("--dump-params", out, c->run_dir);
        if (!rc) rc = exists_in_run_dir(out, c->run_dir);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, t->r->dist.comm);
    return rc;
}

/* the config on every rank, the same on all */
static int train_parse(Training *t, int argc, char **argv)
{
    TrainRun *r = t->r;
    Dist *D = &r->dist;
    Config *c = &r->cfg;
    if (parse_config_args_once(D, c, argc, argv, "train", train_extra, &t->args, sizeof t->args)) return 2;
    char text[16384], msg[256];
    if (config_to_string(c, text, sizeof text) < 0) die(1, "config text too long");
    if (dist_check_config(D, text, msg, sizeof msg)) return train_reject(t, msg);
    return dump_not_input(t);
}

/* max_tokens = 0: a run that resumes takes the value its checkpoints were
 * trained with (the batch plan, hence bitwise resumption, depends on it),
 * a fresh one measures the device (auto_tokens.h); then batch_tokens sets
 * update_freq from the max_tokens now known.  0, or 1 after an error. */
static int resolve_batch(Training *t)
{
    TrainRun *r = t->r;
    Config *c = &r->cfg;
    if (c->max_tokens == 0) {
        char from[4200];
        int saved = rundir_saved_max_tokens(r, from, sizeof from);
        if (saved > 0 && r->dist.rank == 0) {
            printf("max_tokens: %d from %s (max_tokens = 0 resumes with the value the run chose)\n", saved, from);
            fflush(stdout);
        }
        c->max_tokens = saved > 0 ? saved : auto_tokens_resolve(&r->model, &r->dist);
        if (c->max_tokens <= 0) return 1;
    }
    if (c->batch_tokens > 0) set_update_freq(c, &r->dist);
    return 0;
}

/* pin the rank's threads, make its backend and the model; every rank
 * must start from the same parameters */
static int create_model(Training *t)
{
    TrainRun *r = t->r;
    Dist *D = &r->dist;
    const Config *c = &r->cfg;
    t->binds = D->rank == 0 ? xmalloc(sizeof t->bind * D->size) : NULL;
    t->threads = dist_bind_cpu(D, c->threads, t->bind, sizeof t->bind);
    MPI_Gather(t->bind, sizeof t->bind, MPI_CHAR, t->binds, sizeof t->bind, MPI_CHAR, 0, D->comm);
    r->be = backend_create(c, t->threads, D->local_rank);
    if (!r->be) die(2, "rank %d: cannot create backend '%s'", D->rank, config_choice("device", c->device));
    loss_scale_init(&r->scaler, c);
    if (model_init(&r->model, &c->model, r->be)) die(1, "rank %d: out of device memory for the parameters", D->rank);
    size_t bytes = sizeof(float) * r->model.pt.total;
    float *host = xmalloc(bytes);
    r->be->download(r->be, host, r->model.params, bytes);
    char msg[256];
    int bad = dist_check_same(D, host, bytes, "the initial parameters", msg, sizeof msg);
    free(host);
    return bad ? train_reject(t, msg) : 0;
}

/* Pairs longer than max_len (source or target plus EOS) are left out of
 * training (batchplan_build) and of every dev evaluation (evaluate): with
 * a max_len below the dataset's most of a corpus can go without a word.
 * One line with both counts, in eval's words, when any is. */
static void warn_skipped(const TrainRun *r)
{
    const Config *c = &r->cfg;
    int train_skipped = r->train.n - r->plan.start[r->plan.n_batches];
    int dev_skipped = corpus_count_longer(&r->dev, c->max_len);
    if (train_skipped || dev_skipped)
        fprintf(stderr, "warning: %s: skipped %d of %d train pairs and %d of %d dev pairs longer than max_len=%d\n",
                c->data, train_skipped, r->train.n, dev_skipped, r->dev.n, c->max_len);
}

/* data, batches, run directory (may resume), gradient allreduce */
static void open_inputs(Training *t)
{
    TrainRun *r = t->r;
    Dist *D = &r->dist;
    const Config *c = &r->cfg;
    Model *m = &r->model;
    load_corpora(r);
    if (batchplan_build(&r->plan, &r->train, c->max_tokens, c->max_len, c->seed))
        die(2, "%s: no training pair fits max_len=%d", c->data, c->max_len);
    if (D->rank == 0) warn_skipped(r);
    rundir_open(&t->rd, r, t->args.resume);
    t->rd_open = 1;
    gradsync_init(&r->sync, D, &m->pt, m->grads, (size_t)c->bucket_kb * 1024);
    gradsync_use_backend(&r->sync, r->be);   /* CUDA: NCCL on device memory */
    r->sync.timeout_s = r->be->allreduce_timeout_s = c->allreduce_timeout;
    gradsync_start_progress(&r->sync, c->progress_us);
    if (D->rank == 0)
        printf("train: %zu parameters, %d ranks x %d threads, %d batches/epoch, update_freq %d, backend %s\n",
               m->pt.total, D->size, t->threads, r->plan.n_batches, c->update_freq, r->be->name);
    for (int k = 0; D->rank == 0 && D->size > 1 && k < D->size && k < 8; k++)
        printf("rank %d: %s\n", k, t->binds + k * sizeof t->bind);
    /* what sums the gradients: a build without NCCL is visible here */
    if (D->rank == 0 && D->size > 1)
        printf("allreduce path: %s, buckets of %d kB\n", r->be->allreduce_path ? r->be->allreduce_path : "mpi (host buffers)",
               c->bucket_kb);
    free(t->binds);
    t->binds = NULL;
}

/* the step's figures summed over the ranks in one allreduce */
enum { G_LOSS, G_NLL, G_TOKENS, G_PREEMPT, G_CKPT_FAILED, G_OVERFLOW, G_N };

/* the verdict of the loss scaler on a step whose loss is finite: RUN_DONE
 * (apply the update), RUN_SKIPPED (every rank skips it: some rank's
 * gradients overflowed) or RUN_DIVERGED (the scale fell below its floor) */
static int scaler_verdict(Training *t, int step, const double glob[G_N])
{
    TrainRun *r = t->r;
    int v = loss_scale_update(&r->scaler, glob[G_OVERFLOW] > 0, glob[G_LOSS] / (glob[G_TOKENS] > 0 ? glob[G_TOKENS] : 1));
    if (v == LS_FLOOR) {
        if (r->dist.rank == 0) loss_scale_floor_error(&r->scaler, step);
        return RUN_DIVERGED;
    }
    return v == LS_SKIP ? RUN_SKIPPED : RUN_DONE;
}

/* one optimiser step over update_freq micro-batches.  glob gets the sums
 * over ranks of G_*: label-smoothed loss, nll, target tokens, preemption
 * flag, failed checkpoint write, ranks whose gradients overflowed. */
static int train_step(Training *t, int step, double glob[G_N])
{
    TrainRun *r = t->r;
    Dist *D = &r->dist;
    const Config *c = &r->cfg;
    Model *m = &r->model;
    dist_fault_point(D, step);
    r->be->zero(r->be, m->grads, sizeof(float) * m->pt.total);
    m->loss_scale = loss_scale_factor(&r->scaler);
    double loc[G_N] = {0};
    for (int k = 0; k < c->update_freq; k++) {
        int bi = batchplan_global(&r->plan, batchplan_position(step, D->rank, k, D->size, c->update_freq));
        batch_build(&t->b, &r->train, r->plan.idx + r->plan.start[bi], r->plan.start[bi + 1] - r->plan.start[bi],
                    c->max_len);
        int last = k == c->update_freq - 1;
        /* with accumulation, communicate only on the last micro-batch */
        LossStats st = model_forward_backward(m, &t->b, (uint32_t)step, 1, 1, last && D->size > 1 ? gradsync_ready : NULL,
                                              &r->sync);
        loc[G_LOSS] += st.loss_sum; loc[G_NLL] += st.nll_sum; loc[G_TOKENS] += st.n_tokens;
    }
    gradsync_finish(&r->sync);
    loss_scale_plant_inf(&r->scaler, r->be, m->grads, D->rank, step);
    /* the preemption flag, a failed checkpoint write (rank 0) and this
     * rank's gradient overflow travel with the loss sums: all ranks agree
     * to stop, or to skip the step */
    loc[G_PREEMPT] = preempt_pending();
    loc[G_CKPT_FAILED] = rundir_ckpt_failed(&t->rd);
    loc[G_OVERFLOW] = loss_scale_overflow(&r->scaler, r->be, m->grads, m->pt.total);
    MPI_Allreduce(loc, glob, G_N, MPI_DOUBLE, MPI_SUM, D->comm);
    if (glob[G_CKPT_FAILED] > 0) return RUN_CKPT_FAILED;   /* before the update: the state stays that of a complete step */
    if (!isfinite(glob[G_LOSS])) {
        /* diverged: every rank sees the same sums.  Stop before the
         * update, and write no checkpoint of a state that produced it */
        if (D->rank == 0)
            fprintf(stderr, "error: step %d: the training loss is %g (not finite): training stopped; %s "
                    "(a lower lr_factor or a longer warmup may help)\n", step, glob[G_LOSS],
                    t->rd.enabled ? "resume from the run directory's newest checkpoint" : "nothing was saved (run_dir is empty)");
        return RUN_DIVERGED;
    }
    int verdict = scaler_verdict(t, step, glob);
    if (verdict != RUN_DONE) return verdict;
    /* normalise by the target tokens of the whole global batch, and undo
     * the loss scale (a power of two: exact) */
    model_adam_step(m, step, (float)(1.0 / glob[G_TOKENS] / m->loss_scale));
    r->be->sync(r->be);
    r->step = step;
    return RUN_DONE;
}

/* every log_steps steps (and the last): the training loss line and metrics */
static void log_progress(Training *t, int step, const double glob[G_N])
{
    TrainRun *r = t->r;
    const Config *c = &r->cfg;
    LogInterval *li = &r->log;
    li->loss += glob[G_LOSS];
    li->tokens += glob[G_TOKENS];
    if (!(step % c->log_steps == 0 || step == c->train_steps)) return;
    double now = now_seconds(), log_tok_time = now - t->t_log;
    if (r->dist.rank == 0) {
        char scaling[64] = "";   /* with loss scaling: S and the steps skipped so far */
        if (r->scaler.enabled)
            snprintf(scaling, sizeof scaling, " loss_scale %g skipped %ld", r->scaler.scale, r->scaler.skipped);
        printf("step %d loss_ls %.6f lr %.3e tok/s %.0f elapsed %.1fs%s\n", step, li->loss / li->tokens,
               model_lrate(&c->model, step), li->tokens / (log_tok_time > 0 ? log_tok_time : 1e-9),
               r->elapsed + now - t->t_start, scaling);
        fflush(stdout);
        if (t->rd.metrics) {
            metrics_train(t->rd.metrics, step, li->loss / li->tokens, model_lrate(&c->model, step), li->tokens,
                          li->tokens / (log_tok_time > 0 ? log_tok_time : 1e-9), r->elapsed + now - t->t_start);
            if (r->scaler.enabled) metrics_loss_scale(t->rd.metrics, step, r->scaler.scale, r->scaler.skipped);
            metrics_flush(t->rd.metrics, 0);
        }
    }
    t->t_log = now;
    li->loss = li->tokens = 0;
}

/* every eval_steps steps: dev loss and perplexity */
static void evaluate_dev(Training *t, int step)
{
    TrainRun *r = t->r;
    t->dev = evaluate(r, &r->dev);
    t->eval_step = step;
    if (r->dist.rank == 0) {
        char when[32];
        snprintf(when, sizeof when, "step %d", step);
        print_dev_line(when, &t->dev);
        fflush(stdout);
    }
    if (t->rd.metrics)
        metrics_dev(t->rd.metrics, step, t->dev.loss_ls, t->dev.ppl, t->dev.tokens, r->elapsed + now_seconds() - t->t_start);
}

/* after the dev evaluation of step: a new best if its NLL is below the
 * best so far by more than patience_delta (the first evaluation always
 * is), else one more evaluation without improvement.  Every rank holds the
 * same allreduced figures, so every rank decides alike. */
static void track_dev_best(TrainRun *r, int step, double nll)
{
    DevBest *b = &r->best;
    if (b->best_step == 0 || nll < b->best_nll - r->cfg.patience_delta) {
        b->best_step = step;
        b->best_nll = nll;
        b->bad_evals = 0;
    } else
        b->bad_evals++;
}

/* early stopping: patience evaluations in a row without improvement */
static int patience_spent(const TrainRun *r)
{
    return r->cfg.patience > 0 && r->best.bad_evals >= r->cfg.patience;
}

/* steps r->step + 1 .. train_steps, unless stopped; returns how it ended.
 * A skipped step (loss scaling: its gradients overflowed) is tried again,
 * on the same batch, with the halved scale. */
static int train_loop(Training *t)
{
    TrainRun *r = t->r;
    const Config *c = &r->cfg;
    t->t_start = t->t_log = now_seconds();
    t->eval_step = -1;
    if (patience_spent(r)) return RUN_PATIENCE;   /* resumed from the checkpoint of a run that stopped */
    for (int step = r->step + 1; step <= c->train_steps; step++) {
        double glob[G_N];
        int how = train_step(t, step, glob);
        if (how == RUN_SKIPPED) {
            if (glob[G_PREEMPT] > 0) return RUN_PREEMPTED;
            step--;
            continue;
        }
        if (how != RUN_DONE) return how;
        log_progress(t, step, glob);
        if (c->eval_steps > 0 && step % c->eval_steps == 0) {
            evaluate_dev(t, step);
            track_dev_best(r, step, t->dev.nll);
        }
        if (c->attn_steps > 0 && step % c->attn_steps == 0 && t->rd.enabled && r->dist.rank == 0)
            attention_probe_write(&r->model, &r->dev, c->data, c->run_dir, step);   /* watch heads form */
        if (glob[G_PREEMPT] > 0) return RUN_PREEMPTED;
        rundir_after_step(&t->rd, r, step, r->elapsed + now_seconds() - t->t_start);
        if (patience_spent(r)) return RUN_PATIENCE;
    }
    return RUN_DONE;
}

/* the final checkpoint, allreduce report, --dump-params and dev figures */
static int publish_outputs(Training *t, int how)
{
    TrainRun *r = t->r;
    Dist *D = &r->dist;
    const Config *c = &r->cfg;
    r->elapsed += now_seconds() - t->t_start;
    if (how == RUN_DIVERGED || rundir_checkpoint_sync(&t->rd, r, r->elapsed)) return 1;
    if (how == RUN_PREEMPTED) {
        if (D->rank == 0) { printf("preempted: checkpoint of step %d written, exiting with code %d\n", r->step, EXIT_PREEMPTED); fflush(stdout); }
        return EXIT_PREEMPTED;
    }
    if (how == RUN_PATIENCE && D->rank == 0) {
        printf("early stop: stopped by patience at step %d, best step %d: %d dev evaluations without lowering "
               "the best dev nll %.4f by more than patience_delta %g (patience %d)\n", r->step, r->best.best_step,
               r->best.bad_evals, r->best.best_nll, c->patience_delta, c->patience);
        fflush(stdout);
    }
    report_gradsync(r, r->sync.n_syncs, now_seconds() - t->t_start);
    report_graphs(r);
    if (t->args.dump_params) {
        size_t bytes = sizeof(float) * r->model.pt.total;
        float *host = xmalloc(bytes);
        r->be->download(r->be, host, r->model.params, bytes);
        int bad = dist_dump_params(D, host, r->model.pt.total, t->args.dump_params);
        free(host);
        if (bad) die(1, "train: --dump-params %s failed", t->args.dump_params);
    }
    /* the final dev figures; not evaluated (and logged) twice when the
     * last step already had its periodic evaluation */
    if (t->eval_step != r->step) {
        t->dev = evaluate(r, &r->dev);
        if (t->rd.metrics) metrics_dev(t->rd.metrics, r->step, t->dev.loss_ls, t->dev.ppl, t->dev.tokens, r->elapsed);
    }
    if (D->rank == 0) print_dev_line("final", &t->dev);
    if (t->rd.metrics)
        metrics_end(t->rd.metrics, how == RUN_PATIENCE ? "patience" : "train_steps", r->step, r->best.best_step,
                    r->best.best_nll);
    rundir_close(&t->rd);
    t->rd_open = 0;
    if (corpus_is_synthetic(c->data)) {
        int n;
        double acc = greedy_accuracy(r, &r->dev, c->synth_dev, &n);
        if (D->rank == 0) printf("dev greedy exact match %.4f (%d sentences)\n", acc, n);
    }
    fflush(stdout);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { train_help(); return 0; }
    Training t = { .r = xcalloc(1, sizeof(TrainRun)) };
    dist_init(&t.r->dist, &argc, &argv);
    dist_install_abort(&t.r->dist);
    preempt_install();
    int rc = train_parse(&t, argc, argv);
    if (!rc) rc = create_model(&t);
    if (!rc) rc = resolve_batch(&t);
    if (rc) return train_end(&t, rc);
    open_inputs(&t);
    return train_end(&t, publish_outputs(&t, train_loop(&t)));
}
