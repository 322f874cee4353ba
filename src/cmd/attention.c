/* `transformer attention`: the attention maps of chosen sentences of a
 * checkpoint to HDF5 (attention_maps.h, docs/attention.md). */
#include "attention.h"

#include <ctype.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_maps.h"
#include "checkpoint.h"
#include "cli.h"
#include "corpus.h"
#include "dist.h"
#include "h5io.h"
#include "inference.h"
#include "util.h"

static void attention_help(void)
{
    printf("usage: transformer attention --checkpoint CKPT --data DATA.h5|synthetic [--split dev]\n"
           "                             --sentences LIST|--sample K --output ATTN.h5 [--greedy]\n"
           "                             [mask_heads=KIND:LAYER:HEAD,...]\n\n"
           "Writes every head of every layer of encoder self-attention, decoder\n"
           "self-attention and encoder-decoder attention of the chosen sentence pairs,\n"
           "teacher-forced on the reference (with --greedy also on the model's own greedy\n"
           "translation), with source and target tokens as strings (docs/attention.md).\n"
           "LIST: pair indices of the split, e.g. 0,5,10-19.  --sample K: K pairs spread\n"
           "evenly over the split (index floor(i n / K), i < K, of its n pairs; all of them\n"
           "if K >= n): the same pairs for every model of the same data (the Table 3\n"
           "sweep's attention stage).  With data=synthetic the\n"
           "pairs are the checkpoint's synthetic task and tokens are named by their ids.\n"
           "Under mpirun the sentences are split over the ranks and gathered on rank 0,\n"
           "which writes the file.  mask_heads: heads whose output is zeroed before W^O\n"
           "(docs/attention.md).\n");
}

/* "0,5,10-19" -> indices; returns count or -1 */
#define MAX_SENTENCES 100000   /* one group per sentence: beyond this, a typo */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "0,5,10-19" -> indices in the order given: n, -1 malformed, -2 more than
 * MAX_SENTENCES, -3 an index listed twice (*dup set) */
static int parse_list(const char *s, int64_t **out, int64_t *dup)
{
    int n = 0, cap = 16;
    *out = xmalloc(sizeof(int64_t) * cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        /* digits only: strtoll alone would take leading blanks and a sign */
        if (!isdigit((unsigned char)*p)) return -1;
        long long a = strtoll(p, &end, 10), b;
        if (a > INT_MAX || errno) return -1;   /* pair indices are ints */
        b = a;
        p = end;
        if (*p == '-') {
            errno = 0;
            if (!isdigit((unsigned char)p[1])) return -1;
            b = strtoll(p + 1, &end, 10);
            if (b < a || b > INT_MAX || errno) return -1;
            p = end;
        }
        if (b - a >= MAX_SENTENCES - n) return -2;
        for (long long i = a; i <= b; i++) {
            if (n == cap) { cap *= 2; *out = xrealloc(*out, sizeof(int64_t) * cap); }
            (*out)[n++] = i;
        }
        if (*p == ',' && p[1]) p++;
        else if (*p) return -1;   /* also a trailing comma: "1," is no list */
    }
    int64_t *sorted = xmalloc(sizeof(int64_t) * (n ? n : 1));
    memcpy(sorted, *out, sizeof(int64_t) * n);
    qsort(sorted, n, sizeof(int64_t), cmp_i64);
    for (int i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1]) { *dup = sorted[i]; n = -3; break; }
    free(sorted);
    return n;
}

typedef struct {
    const char *ckpt, *data, *split, *list, *out;
    const char *sample;       /* --sample K, or NULL */
    char *mask_heads;         /* the word mask_heads=LIST, or NULL */
    int greedy;
} AttnArgs;

/* broadcast the greedy hypotheses of sentence k from its owner */
static void share_greedy(Sent *s, int k, int owner, const Config *c, MPI_Comm comm, int rank)
{
    MPI_Bcast(&s->Tg, 1, MPI_INT, owner, comm);
    if (rank != owner) {
        s->gin = xmalloc(sizeof(int32_t) * s->Tg);
        s->gout = xmalloc(sizeof(int32_t) * s->Tg);
    }
    MPI_Bcast(s->gin, s->Tg, MPI_INT32_T, owner, comm);
    MPI_Bcast(s->gout, s->Tg, MPI_INT32_T, owner, comm);
    (void)k;
    (void)c;
}

/* everything attention_main holds; attention_free releases it */
typedef struct {
    Config cfg;
    Model m;
    Backend *be;
    CkptState st;
    DatasetVocab dv;   /* of a dataset file, have_dv */
    int have_dv;
    Corpus c;
    Vocab v;
    int64_t *idx;      /* the --sentences indices */
    int n;
    int64_t sample;    /* --sample K as asked (0: --sentences) */
    Sent *s;           /* per index: tokens and maps */
} Attention;

static void attention_free(Attention *at)
{
    if (at->s) for (int k = 0; k < at->n; k++) sent_free(&at->s[k]);
    free(at->s);
    free(at->idx);
    if (at->v.name) vocab_free(&at->v);
    corpus_free(&at->c);
    if (at->have_dv) dataset_vocab_free(&at->dv);
    model_free(&at->m);
    if (at->be) at->be->destroy(at->be);
}

/* --sample K: K indices spread evenly over the n pairs of the split, the
 * whole split when K >= n.  Evenly rather than the first K: a split in
 * some order (by source, by length) is then still covered end to end. */
static int sample_sentences(const char *arg, Attention *at)
{
    char *end;
    errno = 0;
    long long k = strtoll(arg, &end, 10);
    if (end == arg || *end || errno || k < 1 || k > MAX_SENTENCES) {
        fprintf(stderr, "error: --sample '%s': expected a number of pairs from 1 to %d\n", arg, MAX_SENTENCES);
        return 2;
    }
    int64_t n = at->c.n;
    at->sample = k;
    if (k > n) k = n;
    at->n = (int)k;
    at->idx = xmalloc(sizeof(int64_t) * (k ? k : 1));
    for (int64_t i = 0; i < k; i++) at->idx[i] = i * n / k;
    return 0;
}

/* --sentences: valid, distinct indices of pairs of the split */
static int list_sentences(const char *list, const char *split, Attention *at)
{
    int64_t dup = 0;
    int n = at->n = parse_list(list, &at->idx, &dup);
    if (n == -2) { fprintf(stderr, "error: --sentences '%s': more than %d sentences\n", list, MAX_SENTENCES); return 2; }
    if (n == -3) { fprintf(stderr, "error: --sentences '%s': sentence %lld is listed twice\n", list, (long long)dup); return 2; }
    if (n <= 0) { fprintf(stderr, "error: --sentences '%s': expected indices like 0,5,10-19\n", list); return 2; }
    for (int k = 0; k < n; k++)
        if (at->idx[k] >= at->c.n) {
            fprintf(stderr, "error: --sentences: index %lld is past the %d pairs of split '%s'\n",
                    (long long)at->idx[k], at->c.n, split);
            return 2;
        }
    return 0;
}

/* the pairs of the split to write: --sentences LIST or --sample K */
static int select_sentences(const AttnArgs *a, Attention *at)
{
    if (corpus_open(a->data, a->split, &at->cfg, &at->c)) return 2;
    vocab_build(&at->v, at->cfg.vocab_size, at->have_dv ? at->dv.pieces : NULL);
    if (at->c.n < 1) { fprintf(stderr, "error: %s: split '%s' has no pairs\n", a->data, a->split); return 2; }
    return a->sample ? sample_sentences(a->sample, at) : list_sentences(a->list, a->split, at);
}

/* sentence k's maps on rank k % size; greedy hypotheses shared with all */
static void compute_maps(const AttnArgs *a, Attention *at, const Dist *D)
{
    int n = at->n;
    at->s = xcalloc(n, sizeof(Sent));
    for (int k = 0; k < n; k++) {
        sent_tokens(&at->s[k], &at->c, (int)at->idx[k], at->cfg.max_len);
        if (k % D->size == D->rank) sent_compute(&at->m, &at->s[k], a->greedy, at->cfg.max_len_a);
    }
    if (a->greedy)
        for (int k = 0; k < n; k++) share_greedy(&at->s[k], k, k % D->size, &at->cfg, D->comm, D->rank);
}

/* provenance attributes of the file (docs/attention.md) */
static void write_attrs(hid_t f, const AttnArgs *a, const Attention *at)
{
    char text[16384];
    config_to_string(&at->cfg, text, sizeof text);
    h5io_attr_str(f, "format", "transformer-attention");
    h5io_attr_str(f, "version", PROJECT_VERSION);
    h5io_attr_str(f, "checkpoint", a->ckpt);
    h5io_attr_i64(f, "checkpoint_step", at->st.step);
    h5io_attr_str(f, "data", a->data);
    h5io_attr_str(f, "split", a->split);
    h5io_attr_str(f, "mode", a->greedy ? "reference+greedy" : "reference");
    h5io_attr_i64(f, "sample", at->sample);
    h5io_attr_str(f, "config", text);
    h5io_attr_i64(f, "n_layers", at->cfg.n_layers);
    h5io_attr_i64(f, "n_heads", at->cfg.n_heads);
}

/* Sentence k's maps were computed by rank k % P: rank 0 receives them, so
 * that it alone writes the file.  A few MB, where collective MPI-IO was a
 * burden (and not safe on NFS) for no gain. */
static void gather_maps(Attention *at, const Dist *D, int greedy)
{
    size_t L = at->cfg.n_layers, h = at->cfg.n_heads;
    for (int k = 0; k < at->n && D->size > 1; k++) {
        Sent *x = &at->s[k];
        int owner = k % D->size;
        if (owner == 0 || (D->rank != 0 && D->rank != owner)) continue;
        size_t S = x->S, T = x->T, Tg = x->Tg;
        float **maps[5] = { &x->enc, &x->dec, &x->crs, &x->gdec, &x->gcrs };
        size_t n[5] = { L * h * S * S, L * h * T * T, L * h * T * S, L * h * Tg * Tg, L * h * Tg * S };
        for (int i = 0; i < (greedy ? 5 : 3); i++) {
            if (D->rank == owner) {
                MPI_Send(*maps[i], (int)n[i], MPI_FLOAT, 0, i, D->comm);
                continue;
            }
            if (!*maps[i]) *maps[i] = xmalloc(sizeof(float) * (n[i] ? n[i] : 1));
            MPI_Recv(*maps[i], (int)n[i], MPI_FLOAT, owner, i, D->comm, MPI_STATUS_IGNORE);
        }
    }
}

/* rank 0: the file built in memory and written whole to a temporary, then
 * renamed into place (h5io: fsync'ed, atomic); 0 or 1 after one line */
static int write_maps(const AttnArgs *a, const Attention *at)
{
    H5Mem mem;
    char msg[4400];
    if (h5io_create(&mem, (size_t)1 << 20, NULL)) {
        fprintf(stderr, "error: %s: cannot create the output in memory\n", a->out);
        return 1;
    }
    write_attrs(mem.id, a, at);
    hsize_t nn = at->n;
    int bad = h5io_write_ds(mem.id, "sentence_index", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &nn, at->idx) != 0;
    bad |= write_sentences(mem.id, at->s, at->n, a->greedy, &at->cfg.model, &at->v) != 0;
    if (bad) {
        h5io_discard(&mem);
        fprintf(stderr, "error: %s: writing the attention maps failed\n", a->out);
        return 1;
    }
    if (h5io_commit(&mem, a->out, msg, sizeof msg)) {
        fprintf(stderr, "error: %s\n", msg);
        return 1;
    }
    printf("attention: %d sentence(s), %d layers x %d heads -> %s\n", at->n, at->cfg.n_layers, at->cfg.n_heads, a->out);
    return 0;
}

/* every rank alike: the config, the model and the chosen pairs; 2 after
 * one line */
static int attention_open(const AttnArgs *a, Attention *at, Dist *D)
{
    char *over[1] = { a->mask_heads };
    InferenceArgs ia = { .cmd = "attention", .ckpt = a->ckpt, .data = a->data, .over = over,
                         .n_over = a->mask_heads != NULL, .backend_from_command_line = 1, .cpu_fp32 = 1 };
    int synth = corpus_is_synthetic(a->data);
    if (inference_read_config(&ia, &at->cfg, &at->st, synth ? NULL : &at->dv)) return 2;
    at->have_dv = !synth;
    /* one thread (and fp32 on the CPU, .cpu_fp32): the maps do not depend
     * on the device or on how many ranks share the cores */
    at->cfg.threads = 1;
    if (inference_open(&ia, D, &at->cfg, &at->m, &at->be)) return 2;
    return select_sentences(a, at);
}

static int attention_main(const AttnArgs *a, Dist *D)
{
    Attention at = {0};
    /* the same arguments and files on every rank: one error line, rank 0's */
    int held = dist_hold_stderr(D);
    int rc = dist_release_stderr(D, held, attention_open(a, &at, D));
    if (!rc) {
        compute_maps(a, &at, D);
        gather_maps(&at, D, a->greedy);
        int bad = D->rank == 0 ? write_maps(a, &at) : 0;
        MPI_Bcast(&bad, 1, MPI_INT, 0, D->comm);
        rc = bad ? 2 : 0;
    }
    attention_free(&at);
    return rc;
}

/* the command line into a; 0, or 2 after one line */
static int attention_parse(AttnArgs *a, int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--greedy")) { a->greedy = 1; continue; }
        if (!strncmp(o, "mask_heads=", 11)) { a->mask_heads = argv[i]; continue; }
        const char **dst = !strcmp(o, "--checkpoint") ? &a->ckpt : !strcmp(o, "--data") ? &a->data
                         : !strcmp(o, "--split") ? &a->split : !strcmp(o, "--sentences") ? &a->list
                         : !strcmp(o, "--sample") ? &a->sample : !strcmp(o, "--output") ? &a->out : NULL;
        if (!dst) { fprintf(stderr, "error: attention: unknown argument '%s' (see 'transformer attention --help')\n", o); return 2; }
        if (cli_option("attention", argc, argv, &i, dst)) return 2;
    }
    if (!a->ckpt || !a->out) { fprintf(stderr, "error: attention: --checkpoint and --output are required\n"); return 2; }
    if (!a->list == !a->sample) { fprintf(stderr, "error: attention: give exactly one of --sentences and --sample\n"); return 2; }
    if (!a->data) a->data = DATA_SYNTHETIC;
    if (!a->split) a->split = "dev";
    const char *in[] = { a->ckpt, a->data };
    if (cli_check_output("attention", "--output", a->out, in, 2)) return 2;
    return checkpoint_check_output_beside("--output", a->out, a->ckpt);
}

int cmd_attention(int argc, char **argv)
{
    AttnArgs a = { 0 };   /* data and split: defaults in attention_parse */
    if (cli_wants_help(argc, argv)) { attention_help(); return 0; }
    Dist D;
    dist_init(&D, &argc, &argv);
    int held = dist_hold_stderr(&D);
    int rc = dist_release_stderr(&D, held, attention_parse(&a, argc, argv));
    if (!rc) rc = attention_main(&a, &D);
    /* every rank reports the same rc: no abort needed */
    dist_finalize(&D);
    return rc;
}
