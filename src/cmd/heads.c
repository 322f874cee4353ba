/* `transformer heads`: which attention heads the model needs.
 *
 * For every head of every layer and kind (encoder self-attention, decoder
 * self-attention, encoder-decoder attention) it measures, over a split:
 * - importance I_h = mean over sentences of |dL_s/dxi_h|, the gradient of
 *   sentence s's NLL per target token with respect to the head's gate xi_h
 *   (Michel, Levy and Neubig 2019, eq. 2; gates at 1, dropout off, no label
 *   smoothing), and the same normalised per layer by its l2 norm (their
 *   section 4.1).  The absolute value is taken per sentence, a true
 *   per-example gradient: a batch's gradient sums signed per-sentence
 *   gradients, which cancel near an optimum (--per batch keeps that older
 *   score).  Per token would not be a gradient of one loss: the decoder's
 *   gate at position t acts on the losses of t and every later position.
 *   Estimated by default on a seeded sample of 5000 training pairs (their
 *   section 4.1 uses training data), never on the split the pruning
 *   curves are scored on (analysis/prune_heads.py refuses that);
 * - confidence: the mean over query positions of the largest attention
 *   weight (Voita et al. 2019, section 4.1);
 * - the fraction of query positions whose largest weight falls on the
 *   previous token, the next token and the token itself (Voita et al.'s
 *   positional heads).
 * Batches go to ranks round robin; every batch's figures travel to rank 0,
 * which sums them in batch order: the file is the same for any number of
 * ranks.  The format is in docs/attention.md. */
#include "heads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "corpus.h"
#include "h5io.h"
#include "head_mask.h"
#include "inference.h"
#include "philox.h"
#include "run.h"
#include "util.h"

/* per head and batch: |dL/dxi|, then sums over query positions of the
 * largest weight and of the argmax on the previous / next / same position,
 * and the number of query positions */
enum { ST_IMP, ST_CONF, ST_PREV, ST_NEXT, ST_SELF, ST_QUERIES, N_STATS };
/* per batch after the heads' figures: NLL sum and target tokens */
enum { BT_NLL, BT_TOKENS, N_BATCH_STATS };

typedef struct {
    const char *ckpt, *data, *split, *out;
    char **over;   /* key=value overrides */
    int n_over;
    int per_sentence;   /* --per sentence (1, default) or batch (0) */
    long sample;        /* --sample N: a seeded sample of N pairs; 0: all */
    long sample_seed;   /* --sample-seed S: the same sample for every model */
} HeadsArgs;

/* Michel et al. estimate on training data; 5000 sentences put the standard
 * error of a head's mean |dL_s/dxi| at about 1.4% of its per-sentence
 * spread (1/sqrt(5000)), well below the spread between heads */
enum { HEADS_DEFAULT_SAMPLE = 5000 };

typedef struct {
    HeadsArgs a;
    TrainRun *r;
    CkptState st;
    Corpus corp;
    BatchPlan plan;
    int n_heads_total;   /* HEAD_KINDS * n_layers * n_heads */
    int width;           /* doubles per batch: n_heads_total * N_STATS + N_BATCH_STATS */
    double *per_batch;   /* [n_batches][width], each row filled by one rank */
    float *host_grad;    /* one batch's dL/dxi, downloaded */
    float *host_P;       /* one layer's attention weights, downloaded */
} Heads;

static void heads_help(void)
{
    printf("usage: transformer heads --checkpoint CKPT --data DATA.h5|synthetic [--split train]\n"
           "                         [--sample 5000] [--sample-seed 1] [--per sentence|batch]\n"
           "                         --output HEADS.h5\n"
           "                         [key=value ...]\n\n"
           "Writes, per kind (enc, dec_self, cross), layer and head: importance (mean over the\n"
           "sentences of |dL_s/dxi_h|, L_s a sentence's reference NLL per target token, xi_h the\n"
           "head's gate; Michel et al. 2019; --per batch: over batches, the older score), on a\n"
           "sample of --sample pairs of the split (0: all; default 5000 of train; the same\n"
           "pairs for every model of the same data, drawn by --sample-seed),\n"
           "importance normalised per layer, confidence (mean largest\n"
           "attention weight) and the fractions of query positions attending most to the\n"
           "previous, next and same position (Voita et al. 2019).  Dropout off.  Under mpirun\n"
           "the batches are split over the ranks; the file does not depend on their number.\n"
           "key=value may set non-architecture keys (threads, max_tokens, mask_heads;\n"
           "max_tokens=0 with device=cuda: from the free device memory).\n"
           "Pruning curves: analysis/prune_heads.py HEADS.h5 (docs/attention.md).\n");
}

/* --per VALUE, --sample VALUE and --sample-seed VALUE; 0, or 2 after one line */
static int heads_parse_unit(HeadsArgs *a, const char *opt, const char *v)
{
    if (!strcmp(opt, "--per")) {
        if (strcmp(v, "sentence") && strcmp(v, "batch")) {
            fprintf(stderr, "error: heads: --per '%s' is not sentence or batch\n", v);
            return 2;
        }
        a->per_sentence = !strcmp(v, "sentence");
        return 0;
    }
    char *end;
    long n = strtol(v, &end, 10);
    if (*v == '\0' || *end || n < 0) {
        fprintf(stderr, "error: heads: %s '%s' is not a number >= 0\n", opt, v);
        return 2;
    }
    *(!strcmp(opt, "--sample") ? &a->sample : &a->sample_seed) = n;
    return 0;
}

static int heads_parse(HeadsArgs *a, int argc, char **argv)
{
    a->over = xmalloc(sizeof(char *) * (size_t)argc);
    const char *per = NULL, *sample = NULL, *sample_seed = NULL;
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        const char **dst = !strcmp(o, "--checkpoint") ? &a->ckpt : !strcmp(o, "--data") ? &a->data
                         : !strcmp(o, "--split") ? &a->split : !strcmp(o, "--output") ? &a->out
                         : !strcmp(o, "--per") ? &per : !strcmp(o, "--sample") ? &sample
                         : !strcmp(o, "--sample-seed") ? &sample_seed : NULL;
        if (dst) {
            if (cli_option("heads", argc, argv, &i, dst)) return 2;
        } else if (cli_is_setting(o)) a->over[a->n_over++] = argv[i];
        else { fprintf(stderr, "error: heads: unknown argument '%s' (see 'transformer heads --help')\n", o); return 2; }
    }
    if ((per && heads_parse_unit(a, "--per", per)) || (sample && heads_parse_unit(a, "--sample", sample))
        || (sample_seed && heads_parse_unit(a, "--sample-seed", sample_seed)))
        return 2;
    if (!a->split) a->split = "train";
    if (!a->ckpt || !a->data || !a->out) {
        fprintf(stderr, "error: heads: --checkpoint, --data and --output are required\n");
        return 2;
    }
    const char *in[] = { a->ckpt, a->data };
    if (cli_check_output("heads", "--output", a->out, in, 2)) return 2;
    if (checkpoint_check_output_beside("--output", a->out, a->ckpt)) return 2;
    if (a->sample > 0 && !a->per_sentence) {
        fprintf(stderr, "error: heads: --sample needs --per sentence (a sample of pairs, one per batch)\n");
        return 2;
    }
    if (a->sample < 0) a->sample = a->per_sentence ? HEADS_DEFAULT_SAMPLE : 0;
    return 0;
}

/* one pair per batch, in the plan's order; with sample > 0 a sample of that
 * many pairs, drawn by a Fisher-Yates shuffle keyed by the seed (Philox),
 * so the sample does not depend on the number of ranks */
static void plan_sentences(BatchPlan *p, long sample, uint64_t seed)
{
    int n = p->start[p->n_batches];
    if (sample > 0 && sample < n) {
        uint32_t k0 = (uint32_t)seed ^ 0x4EAD5u, k1 = (uint32_t)(seed >> 32);
        for (int i = n - 1; i > 0; i--) {
            philox_ctr ctr = {{ (uint32_t)i, 0, 11, 0 }};
            int j = (int)(philox4x32(ctr, k0, k1).v[0] % (uint32_t)(i + 1));
            int t = p->idx[i]; p->idx[i] = p->idx[j]; p->idx[j] = t;
        }
        n = (int)sample;
    }
    p->start = xrealloc(p->start, sizeof(int) * ((size_t)n + 1));
    for (int k = 0; k <= n; k++) p->start[k] = k;
    p->n_batches = n;
    p->perm = xrealloc(p->perm, sizeof(int) * (size_t)n);
}

/* every rank alike: the model with gate gradients on, and the split's
 * batches; 2 after a one-line error */
static int heads_load(Heads *h, const InferenceArgs *ia)
{
    TrainRun *r = h->r;
    const Config *c = &r->cfg;
    if (inference_open(ia, &r->dist, &r->cfg, &r->model, &r->be) || corpus_open(h->a.data, h->a.split, c, &h->corp))
        return 2;
    /* L is the NLL of the reference: no label smoothing in its gradient */
    r->model.cfg.label_smoothing = 0.0f;
    model_track_gate_grads(&r->model);
    if (batchplan_build(&h->plan, &h->corp, c->max_tokens, c->max_len, c->seed)) {
        fprintf(stderr, "error: %s: split '%s' has no pair that fits max_len=%d\n", h->a.data, h->a.split, c->max_len);
        return 2;
    }
    if (h->a.per_sentence) plan_sentences(&h->plan, h->a.sample, (uint64_t)h->a.sample_seed);
    h->n_heads_total = HEAD_KINDS * c->n_layers * c->n_heads;
    h->width = h->n_heads_total * N_STATS + N_BATCH_STATS;
    h->per_batch = xcalloc((size_t)h->plan.n_batches * h->width, sizeof(double));
    h->host_grad = xmalloc(sizeof(float) * h->n_heads_total);
    return 0;
}

/* rank 0's config on every rank, then heads_load; its errors (the same on
 * every rank: a missing split, a bad mask) are printed once, by rank 0 */
static int heads_open(Heads *h, const InferenceArgs *ia)
{
    Dist *D = &h->r->dist;
    MPI_Bcast(&h->r->cfg, sizeof h->r->cfg, MPI_BYTE, 0, D->comm);
    int held = dist_hold_stderr(D);
    return dist_release_stderr(D, held, heads_load(h, ia));
}

/* confidence and positional counts of one layer's weights P [B, nh, Tq,
 * Tk] over the real query positions q < q_len[b], added into row (the
 * layer's first head) */
static void attention_stats(const float *P, const int32_t *q_len, int B, int nh, int Tq, int Tk, double *row)
{
    for (int b = 0; b < B; b++)
        for (int hd = 0; hd < nh; hd++) {
            double *s = row + (size_t)hd * N_STATS;
            for (int q = 0; q < q_len[b] && q < Tq; q++) {
                const float *p = P + (((size_t)b * nh + hd) * Tq + q) * Tk;
                int arg = 0;   /* the first of equal maxima */
                for (int k = 1; k < Tk; k++)
                    if (p[k] > p[arg]) arg = k;
                s[ST_CONF] += p[arg];
                s[ST_PREV] += arg == q - 1;
                s[ST_NEXT] += arg == q + 1;
                s[ST_SELF] += arg == q;
                s[ST_QUERIES] += 1;
            }
        }
}

/* the attention statistics of every layer and kind of the last forward */
static void batch_attention_stats(Heads *h, const Batch *b, double *row)
{
    Model *m = &h->r->model;
    const ModelConfig *c = &m->cfg;
    int N = c->n_layers, nh = c->n_heads, B = b->B, S = b->S, T = b->T;
    size_t need = (size_t)B * nh * (size_t)(S > T ? S : T) * (S > T ? S : T);
    h->host_P = xrealloc(h->host_P, sizeof(float) * (need ? need : 1));
    for (int l = 0; l < N; l++) {
        Act maps[HEAD_KINDS] = { m->enc[l].P, m->dec[l].P, m->dec[l].P2 };
        int Tq[HEAD_KINDS] = { S, T, T }, Tk[HEAD_KINDS] = { S, T, S };
        const int32_t *q_len[HEAD_KINDS] = { b->src_len, b->tgt_len, b->tgt_len };
        for (int kind = 0; kind < HEAD_KINDS; kind++) {
            m->be->download_act(m->be, h->host_P, maps[kind], (size_t)B * nh * Tq[kind] * Tk[kind]);
            attention_stats(h->host_P, q_len[kind], B, nh, Tq[kind], Tk[kind],
                            row + head_index(kind, l, 0, N, nh) * N_STATS);
        }
    }
}

/* one batch: forward and backward without dropout, |dL/dxi| of the
 * batch's NLL per target token, and the attention statistics */
static void batch_stats(Heads *h, const Batch *b, double *row)
{
    Model *m = &h->r->model;
    Backend *be = m->be;
    int n = h->n_heads_total;
    be->zero(be, m->gate_grad, sizeof(float) * n);
    LossStats ls = model_forward_backward(m, b, 0, 0, 1, NULL, NULL);
    be->download(be, h->host_grad, m->gate_grad, sizeof(float) * n);
    for (int i = 0; i < n; i++) row[(size_t)i * N_STATS + ST_IMP] = fabs((double)h->host_grad[i]) / (double)ls.n_tokens;
    batch_attention_stats(h, b, row);
    row[(size_t)n * N_STATS + BT_NLL] = ls.nll_sum;
    row[(size_t)n * N_STATS + BT_TOKENS] = (double)ls.n_tokens;
}

/* batch k on rank k % P; then every row on every rank (one rank wrote each
 * row, the others hold zeros: the sum is exact) */
static void heads_measure(Heads *h)
{
    TrainRun *r = h->r;
    Batch b = {0};
    for (int k = r->dist.rank; k < h->plan.n_batches; k += r->dist.size) {
        batch_build(&b, &h->corp, h->plan.idx + h->plan.start[k], h->plan.start[k + 1] - h->plan.start[k],
                    r->cfg.max_len);
        batch_stats(h, &b, h->per_batch + (size_t)k * h->width);
    }
    batch_free(&b);
    MPI_Allreduce(MPI_IN_PLACE, h->per_batch, h->plan.n_batches * h->width, MPI_DOUBLE, MPI_SUM, r->dist.comm);
}

/* the figures of the file, per head (head_mask.h order) */
enum { OUT_IMP, OUT_IMP_NORM, OUT_CONF, OUT_PREV, OUT_NEXT, OUT_SELF, N_OUT };
static const char *const out_name[N_OUT] = { "importance", "importance_norm", "confidence",
                                             "frac_prev", "frac_next", "frac_self" };

/* rank 0: sums over batches in batch order, then the means */
static void heads_summarise(const Heads *h, double *out[N_OUT], double *nll, double *tokens)
{
    const Config *c = &h->r->cfg;
    int n = h->n_heads_total, nb = h->plan.n_batches;
    double *sum = xcalloc((size_t)h->width, sizeof(double));
    for (int k = 0; k < nb; k++)
        for (int i = 0; i < h->width; i++) sum[i] += h->per_batch[(size_t)k * h->width + i];
    for (int i = 0; i < n; i++) {
        const double *s = sum + (size_t)i * N_STATS;
        double q = s[ST_QUERIES] > 0 ? s[ST_QUERIES] : 1;
        out[OUT_IMP][i] = s[ST_IMP] / nb;
        out[OUT_CONF][i] = s[ST_CONF] / q;
        out[OUT_PREV][i] = s[ST_PREV] / q;
        out[OUT_NEXT][i] = s[ST_NEXT] / q;
        out[OUT_SELF][i] = s[ST_SELF] / q;
    }
    /* normalised by the l2 norm of each layer's importances (Michel et al., 4.1) */
    for (int g = 0; g < n; g += c->n_heads) {
        double norm = 0;
        for (int hd = 0; hd < c->n_heads; hd++) norm += out[OUT_IMP][g + hd] * out[OUT_IMP][g + hd];
        norm = sqrt(norm);
        for (int hd = 0; hd < c->n_heads; hd++) out[OUT_IMP_NORM][g + hd] = norm > 0 ? out[OUT_IMP][g + hd] / norm : 0;
    }
    *nll = sum[(size_t)n * N_STATS + BT_NLL];
    *tokens = sum[(size_t)n * N_STATS + BT_TOKENS];
    free(sum);
}

static int write_attrs(hid_t f, const Heads *h, double nll, double tokens)
{
    const Config *c = &h->r->cfg;
    char text[16384];
    config_to_string(c, text, sizeof text);
    int bad = h5io_attr_str(f, "format", "transformer-heads");
    bad |= h5io_attr_str(f, "version", PROJECT_VERSION);
    bad |= h5io_attr_str(f, "checkpoint", h->a.ckpt);
    bad |= h5io_attr_i64(f, "checkpoint_step", h->st.step);
    bad |= h5io_attr_str(f, "data", h->a.data);
    bad |= h5io_attr_str(f, "split", h->a.split);
    bad |= h5io_attr_str(f, "importance_per", h->a.per_sentence ? "sentence" : "batch");
    bad |= h5io_attr_i64(f, "sample", h->a.sample);
    bad |= h5io_attr_i64(f, "sample_seed", h->a.sample_seed);
    bad |= h5io_attr_str(f, "config", text);
    bad |= h5io_attr_str(f, "mask_heads", h->r->model.cfg.mask_heads);
    bad |= h5io_attr_i64(f, "n_layers", c->n_layers);
    bad |= h5io_attr_i64(f, "n_heads", c->n_heads);
    bad |= h5io_attr_i64(f, "n_batches", h->plan.n_batches);
    bad |= h5io_attr_i64(f, "n_pairs", h->plan.start[h->plan.n_batches]);
    bad |= h5io_attr_i64(f, "n_tokens", (int64_t)tokens);
    hsize_t one = 1;
    double mean = tokens > 0 ? nll / tokens : 0;
    bad |= h5io_write_ds(f, "nll", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &one, &mean);
    return bad;
}

/* rank 0: one group per kind with [n_layers, n_heads] datasets, built in
 * memory and written whole (h5io); 0, or 2 after one line */
static int heads_write(const Heads *h)
{
    const Config *c = &h->r->cfg;
    int n = h->n_heads_total, bad = 0;
    double *out[N_OUT], nll, tokens;
    for (int o = 0; o < N_OUT; o++) out[o] = xcalloc((size_t)n, sizeof(double));
    heads_summarise(h, out, &nll, &tokens);
    H5Mem mem;
    char msg[4400];
    if (h5io_create(&mem, (size_t)1 << 16, NULL)) die(2, "%s: cannot create the output in memory", h->a.out);
    bad |= write_attrs(mem.id, h, nll, tokens);
    hsize_t dims[2] = { (hsize_t)c->n_layers, (hsize_t)c->n_heads };
    for (int kind = 0; kind < HEAD_KINDS && !bad; kind++) {
        hid_t g = H5Gcreate2(mem.id, head_kind_name[kind], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        size_t first = head_index(kind, 0, 0, c->n_layers, c->n_heads);
        for (int o = 0; o < N_OUT && g >= 0; o++)
            bad |= h5io_write_ds(g, out_name[o], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, dims, out[o] + first);
        bad |= g < 0;
        if (g >= 0) H5Gclose(g);
    }
    for (int o = 0; o < N_OUT; o++) free(out[o]);
    if (bad) {
        h5io_discard(&mem);
        fprintf(stderr, "error: %s: writing the head statistics failed\n", h->a.out);
        return 2;
    }
    if (h5io_commit(&mem, h->a.out, msg, sizeof msg)) {
        fprintf(stderr, "error: %s\n", msg);
        return 2;
    }
    double mean = tokens > 0 ? nll / tokens : 0;
    printf("heads: %s %d %s, %.0f target tokens, nll %.4f ppl %.3f; %d layers x %d heads x 3 kinds -> %s\n",
           h->a.split, h->plan.n_batches, h->a.per_sentence ? "sentences" : "batches", tokens, mean, exp(mean), c->n_layers, c->n_heads, h->a.out);
    return 0;
}

static int heads_end(Heads *h, int rc)
{
    TrainRun *r = h->r;
    free(h->per_batch); free(h->host_grad); free(h->host_P); free(h->a.over);
    if (h->plan.start) batchplan_free(&h->plan);
    corpus_free(&h->corp);
    if (r->be) { model_free(&r->model); r->be->destroy(r->be); }
    dist_finalize(&r->dist);
    free(r);
    return rc;
}

int cmd_heads(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { heads_help(); return 0; }
    Heads h = { .a = { .per_sentence = 1, .sample = -1, .sample_seed = 1 },
                .r = xcalloc(1, sizeof(TrainRun)) };
    dist_init(&h.r->dist, &argc, &argv);
    dist_install_abort(&h.r->dist);
    /* the same arguments on every rank: one error line, rank 0's */
    int held = dist_hold_stderr(&h.r->dist);
    int rc = dist_release_stderr(&h.r->dist, held, heads_parse(&h.a, argc, argv));
    InferenceArgs ia = { .cmd = "heads", .ckpt = h.a.ckpt, .data = h.a.data, .over = h.a.over, .n_over = h.a.n_over,
                         .auto_tokens = 1 };
    if (!rc && h.r->dist.rank == 0) rc = inference_read_config(&ia, &h.r->cfg, &h.st, NULL);
    MPI_Bcast(&rc, 1, MPI_INT, 0, h.r->dist.comm);
    if (rc) return heads_end(&h, 2);
    if (heads_open(&h, &ia)) return heads_end(&h, 2);
    heads_measure(&h);
    rc = h.r->dist.rank == 0 ? heads_write(&h) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, h.r->dist.comm);
    return heads_end(&h, rc);
}
