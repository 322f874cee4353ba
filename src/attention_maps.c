/* Attention maps to HDF5 (attention_maps.h, docs/attention.md). */
#include "attention_maps.h"

#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dist.h"
#include "h5io.h"
#include "greedy.h"
#include "synthetic.h"
#include "train.h"
#include "util.h"

#if defined(__has_include)
#if __has_include("dataset.h")
#include "dataset.h"
#define HAVE_DATASET 1
#endif
#endif

/* one sentence pair: tokens (known on every rank) and maps (owner only) */
typedef struct {
    int64_t index;            /* pair index in the split */
    int S, T;                 /* source tokens incl. EOS; target positions BOS y.. */
    int32_t *src, *tin, *tout;
    float *enc, *dec, *crs;   /* [L, h, S, S], [L, h, T, T], [L, h, T, S] */
    int Tg;                   /* greedy: decoder positions (hyp + BOS) */
    int32_t *gin, *gout;
    float *gdec, *gcrs;
} Sent;

/* ---------------------------------------------------------------- tokens */

typedef struct {
    int n;
    char **name;   /* [vocab_size] */
    size_t width;  /* longest name: fixed-length string type size */
} Vocab;

static void vocab_build(Vocab *v, int vocab_size, char **pieces)
{
    static const char *special[4] = { "<pad>", "<s>", "</s>", "<unk>" };
    v->n = vocab_size;
    v->name = xmalloc(sizeof(char *) * vocab_size);
    v->width = 1;
    char buf[32];
    for (int i = 0; i < vocab_size; i++) {
        if (pieces && pieces[i]) v->name[i] = strdup(pieces[i]);
        else if (i < 4) v->name[i] = strdup(special[i]);
        else { snprintf(buf, sizeof buf, "%d", i); v->name[i] = strdup(buf); }   /* synthetic symbols: their ids */
        size_t L = strlen(v->name[i]);
        if (L > v->width) v->width = L;
    }
}

static void vocab_free(Vocab *v)
{
    for (int i = 0; i < v->n; i++) free(v->name[i]);
    free(v->name);
}

/* ------------------------------------------------------------- computing */

static void forward_maps(Model *m, const Batch *b, float *enc, float *dec, float *crs)
{
    model_upload_batch(m, b);
    Act e = model_encode(m, 0, 0);
    model_decode(m, e, 0, 0);
    const Config *c = &m->cfg;
    size_t h = c->n_heads, S = b->S, T = b->T;
    for (int l = 0; l < c->n_layers; l++) {
        if (enc) m->be->download_act(m->be, enc + l * h * S * S, m->enc[l].P, h * S * S);
        m->be->download_act(m->be, dec + l * h * T * T, m->dec[l].P, h * T * T);
        m->be->download_act(m->be, crs + l * h * T * S, m->dec[l].P2, h * T * S);
    }
}

/* tokens of pair idx of c (reference) */
static void sent_tokens(Sent *s, const Corpus *c, int idx, int max_len)
{
    Batch b = {0};
    batch_build(&b, c, &idx, 1, max_len);
    s->index = idx;
    s->S = b.S;
    s->T = b.T;
    s->src = xmalloc(sizeof(int32_t) * s->S);
    s->tin = xmalloc(sizeof(int32_t) * s->T);
    s->tout = xmalloc(sizeof(int32_t) * s->T);
    memcpy(s->src, b.src, sizeof(int32_t) * s->S);
    memcpy(s->tin, b.tgt_in, sizeof(int32_t) * s->T);
    memcpy(s->tout, b.tgt_out, sizeof(int32_t) * s->T);
    batch_free(&b);
}

/* a one-pair batch with the source of s and target y[0..n) */
static void one_pair_batch(Batch *b, const Sent *s, const int32_t *y, int n, int max_len)
{
    Corpus c = {0};
    int64_t so[2] = { 0, s->S - 1 }, to[2] = { 0, n };
    c.n = 1;
    c.src_off = so;
    c.tgt_off = to;
    c.src_tok = s->src;   /* without the EOS at S-1 */
    c.tgt_tok = (int32_t *)y;
    int idx = 0;
    batch_build(b, &c, &idx, 1, max_len);
}

static void sent_compute(Model *m, Sent *s, int greedy)
{
    const Config *c = &m->cfg;
    size_t L = c->n_layers, h = c->n_heads, S = s->S, T = s->T;
    s->enc = xmalloc(sizeof(float) * L * h * S * S);
    s->dec = xmalloc(sizeof(float) * L * h * T * T);
    s->crs = xmalloc(sizeof(float) * L * h * T * S);
    Batch b = {0};
    one_pair_batch(&b, s, s->tout, s->T - 1, c->max_len);
    forward_maps(m, &b, s->enc, s->dec, s->crs);
    if (greedy) {
        /* the model's own translation (max length: input + max_len_a, 6.1) */
        int max_out = (s->S - 1) + c->max_len_a;
        if (max_out > c->max_len - 1) max_out = c->max_len - 1;
        int32_t *out = xmalloc(sizeof(int32_t) * (max_out > 0 ? max_out : 1));
        int len = 0;
        greedy_decode(m, &b, max_out, out, &len);
        Batch g = {0};
        one_pair_batch(&g, s, out, len, c->max_len);
        s->Tg = g.T;
        s->gin = xmalloc(sizeof(int32_t) * g.T);
        s->gout = xmalloc(sizeof(int32_t) * g.T);
        memcpy(s->gin, g.tgt_in, sizeof(int32_t) * g.T);
        memcpy(s->gout, g.tgt_out, sizeof(int32_t) * g.T);
        size_t Tg = g.T;
        s->gdec = xmalloc(sizeof(float) * L * h * Tg * Tg);
        s->gcrs = xmalloc(sizeof(float) * L * h * Tg * S);
        forward_maps(m, &g, NULL, s->gdec, s->gcrs);
        batch_free(&g);
        free(out);
    }
    batch_free(&b);
}

static void sent_free(Sent *s)
{
    free(s->src); free(s->tin); free(s->tout); free(s->enc); free(s->dec); free(s->crs);
    free(s->gin); free(s->gout); free(s->gdec); free(s->gcrs);
}

/* --------------------------------------------------------------- writing */

static int write_tokens(hid_t g, const char *name, const int32_t *tok, int n, const Vocab *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, v->width);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char *buf = xcalloc((size_t)n * v->width, 1);
    for (int i = 0; i < n; i++) {
        const char *s = tok[i] >= 0 && tok[i] < v->n ? v->name[tok[i]] : "<?>";
        memcpy(buf + (size_t)i * v->width, s, strlen(s) < v->width ? strlen(s) : v->width);
    }
    hsize_t dim = n;
    int rc = h5io_write_ds(g, name, t, t, 1, &dim, buf);
    free(buf);
    H5Tclose(t);
    return rc;
}

/* the groups of sentences s[0..n) under parent (rank 0, after gather_maps) */
static int write_sentences(hid_t parent, Sent *s, int n, int greedy, const Config *c, const Vocab *v)
{
    hid_t top = H5Gcreate2(parent, "sentences", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (top < 0) return -1;
    int bad = 0;
    hsize_t L = c->n_layers, h = c->n_heads;
    for (int k = 0; k < n && !bad; k++) {
        Sent *x = &s[k];
        char name[32];
        snprintf(name, sizeof name, "%06lld", (long long)x->index);
        hid_t g = H5Gcreate2(top, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) { bad = 1; break; }
        h5io_attr_i64(g, "index", x->index);
        h5io_attr_i64(g, "src_len", x->S);
        h5io_attr_i64(g, "tgt_len", x->T);
        bad |= write_tokens(g, "src_tokens", x->src, x->S, v);
        bad |= write_tokens(g, "tgt_tokens", x->tin, x->T, v);
        bad |= write_tokens(g, "tgt_out_tokens", x->tout, x->T, v);
        hsize_t de[4] = { L, h, (hsize_t)x->S, (hsize_t)x->S }, dd[4] = { L, h, (hsize_t)x->T, (hsize_t)x->T },
                dc[4] = { L, h, (hsize_t)x->T, (hsize_t)x->S };
        bad |= h5io_write_ds(g, "encoder_self", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, de, x->enc);
        bad |= h5io_write_ds(g, "decoder_self", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dd, x->dec);
        bad |= h5io_write_ds(g, "cross", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dc, x->crs);
        if (greedy) {
            hid_t gg = H5Gcreate2(g, "greedy", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            h5io_attr_i64(gg, "tgt_len", x->Tg);
            bad |= write_tokens(gg, "tgt_tokens", x->gin, x->Tg, v);
            bad |= write_tokens(gg, "tgt_out_tokens", x->gout, x->Tg, v);
            hsize_t gd[4] = { L, h, (hsize_t)x->Tg, (hsize_t)x->Tg }, gc[4] = { L, h, (hsize_t)x->Tg, (hsize_t)x->S };
            bad |= h5io_write_ds(gg, "decoder_self", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, gd, x->gdec);
            bad |= h5io_write_ds(gg, "cross", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, gc, x->gcrs);
            H5Gclose(gg);
        }
        H5Gclose(g);
    }
    H5Gclose(top);
    return bad ? -1 : 0;
}

/* --------------------------------------------------------- training probe */

void attention_probe_write(Model *m, const Corpus *dev, const char *run_dir, int step)
{
    int n = dev->n < ATTN_PROBE_SENTENCES ? dev->n : ATTN_PROBE_SENTENCES;
    Sent *s = xcalloc(n ? n : 1, sizeof(Sent));
    for (int k = 0; k < n; k++) {
        sent_tokens(&s[k], dev, k, m->cfg.max_len);
        sent_compute(m, &s[k], 0);
    }
    Vocab v;
    char **pieces = NULL;
    hdf5_lock();   /* the dataset's vocabulary is read with HDF5 too */
#ifdef HAVE_DATASET
    DatasetVocab dv = {0};
    if (strcmp(m->cfg.data, "synthetic") && dataset_load_vocab(m->cfg.data, &dv) == 0 && dv.vocab_size == m->cfg.vocab_size)
        pieces = dv.pieces;
#endif
    vocab_build(&v, m->cfg.vocab_size, pieces);
#ifdef HAVE_DATASET
    if (dv.pieces) dataset_vocab_free(&dv);
#endif
    char path[4200], grp[32];
    snprintf(path, sizeof path, "%s/attention_probe.h5", run_dir);
    snprintf(grp, sizeof grp, "step_%08d", step);
    /* rewritten whole and renamed into place (h5io.h) */
    char msg[4400];
    int created;
    H5Mem mem;
    hid_t f = h5io_open_log(&mem, path, &created, msg, sizeof msg) ? -1 : mem.id;
    if (f >= 0 && created) {
        h5io_attr_str(f, "format", "transformer-attention-probe");
        h5io_attr_str(f, "version", PROJECT_VERSION);
        h5io_attr_i64(f, "n_layers", m->cfg.n_layers);
        h5io_attr_i64(f, "n_heads", m->cfg.n_heads);
    }
    int bad = f < 0;
    if (!bad) {
        /* a resumed run recomputes steps after its checkpoint */
        if (H5Lexists(f, grp, H5P_DEFAULT) > 0) H5Ldelete(f, grp, H5P_DEFAULT);
        hid_t g = H5Gcreate2(f, grp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad = g < 0;
        if (!bad) {
            h5io_attr_i64(g, "step", step);
            bad = write_sentences(g, s, n, 0, &m->cfg, &v) != 0;
            H5Gclose(g);
        }
        if (bad) {
            h5io_discard(&mem);
            snprintf(msg, sizeof msg, "%s: HDF5 could not add the group", path);
        } else bad = h5io_commit(&mem, path, msg, sizeof msg) != 0;
    }
    hdf5_unlock();
    if (bad) fprintf(stderr, "warning: cannot write the attention probe of step %d: %s\n", step, msg);
    vocab_free(&v);
    for (int k = 0; k < n; k++) sent_free(&s[k]);
    free(s);
}

/* --------------------------------------------------------------- command */

static void attention_help(void)
{
    printf("usage: transformer attention --checkpoint CKPT --data DATA.h5|synthetic [--split dev]\n"
           "                             --sentences LIST --output ATTN.h5 [--greedy]\n"
           "                             [mask_heads=KIND:LAYER:HEAD,...]\n\n"
           "Writes every head of every layer of encoder self-attention, decoder\n"
           "self-attention and encoder-decoder attention of the chosen sentence pairs,\n"
           "teacher-forced on the reference (with --greedy also on the model's own greedy\n"
           "translation), with source and target tokens as strings (docs/attention.md).\n"
           "LIST: pair indices of the split, e.g. 0,5,10-19.  With data=synthetic the\n"
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
        long long a = strtoll(p, &end, 10), b;
        if (end == p || a < 0 || a > INT_MAX || errno) return -1;   /* pair indices are ints */
        b = a;
        p = end;
        if (*p == '-') {
            errno = 0;
            b = strtoll(p + 1, &end, 10);
            if (end == p + 1 || b < a || b > INT_MAX || errno) return -1;
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
    const char *mask_heads;   /* mask_heads=LIST, or NULL */
    int greedy;
} AttnArgs;

static int load_data(const AttnArgs *a, const Config *cfg, const CkptState *st, Corpus *c, Vocab *v)
{
    if (!strcmp(a->data, "synthetic")) {
        if (synthetic_load_split(c, cfg, a->split)) return 2;
        vocab_build(v, cfg->vocab_size, NULL);
        return 0;
    }
#ifdef HAVE_DATASET
    if (checkpoint_check_vocab(a->ckpt, st, a->data)) return 2;
    if (dataset_load(a->data, a->split, c)) return 2;
    DatasetVocab dv;
    if (dataset_load_vocab(a->data, &dv)) return 2;
    if (dv.vocab_size != cfg->vocab_size) {
        fprintf(stderr, "error: %s: vocabulary of %d pieces, the checkpoint's model has vocab_size %d\n", a->data,
                dv.vocab_size, cfg->vocab_size);
        dataset_vocab_free(&dv);
        return 2;
    }
    vocab_build(v, cfg->vocab_size, dv.pieces);
    dataset_vocab_free(&dv);
    return 0;
#else
    fprintf(stderr, "error: %s: dataset files are not supported by this build yet (use --data synthetic)\n", a->data);
    return 2;
#endif
}

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
    Corpus c;
    Vocab v;
    int64_t *idx;      /* the --sentences indices */
    int n;
    Sent *s;           /* per index: tokens and maps */
} Attention;

static void attention_free(Attention *at)
{
    if (at->s) for (int k = 0; k < at->n; k++) sent_free(&at->s[k]);
    free(at->s);
    free(at->idx);
    if (at->v.name) vocab_free(&at->v);
    corpus_free(&at->c);
    model_free(&at->m);
    at->be->destroy(at->be);
}

/* --sentences: valid, distinct indices of pairs of the split */
static int select_sentences(const AttnArgs *a, Attention *at)
{
    int64_t dup = 0;
    int n = at->n = parse_list(a->list, &at->idx, &dup);
    if (n == -2) { fprintf(stderr, "error: --sentences '%s': more than %d sentences\n", a->list, MAX_SENTENCES); return 2; }
    if (n == -3) { fprintf(stderr, "error: --sentences '%s': sentence %lld is listed twice\n", a->list, (long long)dup); return 2; }
    if (n <= 0) { fprintf(stderr, "error: --sentences '%s': expected indices like 0,5,10-19\n", a->list); return 2; }
    if (load_data(a, &at->cfg, &at->st, &at->c, &at->v)) return 2;
    for (int k = 0; k < n; k++)
        if (at->idx[k] >= at->c.n) {
            fprintf(stderr, "error: --sentences: index %lld is past the %d pairs of split '%s'\n",
                    (long long)at->idx[k], at->c.n, a->split);
            return 2;
        }
    return 0;
}

/* sentence k's maps on rank k % size; greedy hypotheses shared with all */
static void compute_maps(const AttnArgs *a, Attention *at, const Dist *D)
{
    int n = at->n;
    at->s = xcalloc(n, sizeof(Sent));
    for (int k = 0; k < n; k++) {
        sent_tokens(&at->s[k], &at->c, (int)at->idx[k], at->cfg.max_len);
        if (k % D->size == D->rank) sent_compute(&at->m, &at->s[k], a->greedy);
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
    bad |= write_sentences(mem.id, at->s, at->n, a->greedy, &at->cfg, &at->v) != 0;
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

static int attention_main(const AttnArgs *a, Dist *D)
{
    Attention at = {0};
    /* one thread: the maps do not depend on how many ranks share the cores */
    at.be = backend_create("cpu", "fp32", NULL, 1, D->local_rank);
    if (!at.be) return 2;
    if (checkpoint_open_model(a->ckpt, &at.cfg, &at.st, &at.m, at.be)) { at.be->destroy(at.be); return 2; }
    int rc = 2;
    if ((!a->mask_heads || model_mask_heads(&at.m, a->mask_heads, "command line") == 0) &&
        select_sentences(a, &at) == 0) {
        compute_maps(a, &at, D);
        gather_maps(&at, D, a->greedy);
        int bad = D->rank == 0 ? write_maps(a, &at) : 0;
        MPI_Bcast(&bad, 1, MPI_INT, 0, D->comm);
        rc = bad ? 2 : 0;
    }
    attention_free(&at);
    return rc;
}

int cmd_attention(int argc, char **argv)
{
    AttnArgs a = { NULL, "synthetic", "dev", NULL, NULL, NULL, 0 };
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { attention_help(); return 0; }
        if (!strcmp(o, "--greedy")) { a.greedy = 1; continue; }
        if (!strncmp(o, "mask_heads=", 11)) { a.mask_heads = o + 11; continue; }
        const char **dst = !strcmp(o, "--checkpoint") ? &a.ckpt : !strcmp(o, "--data") ? &a.data
                         : !strcmp(o, "--split") ? &a.split : !strcmp(o, "--sentences") ? &a.list
                         : !strcmp(o, "--output") ? &a.out : NULL;
        if (!dst) { fprintf(stderr, "error: attention: unknown argument '%s' (see 'transformer attention --help')\n", o); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "error: attention: %s needs a value\n", o); return 2; }
        *dst = argv[++i];
    }
    if (!a.ckpt || !a.out || !a.list) {
        fprintf(stderr, "error: attention: --checkpoint, --sentences and --output are required\n");
        return 2;
    }
    Dist D;
    dist_init(&D, &argc, &argv);
    int rc = attention_main(&a, &D);
    /* every rank reports the same rc: no abort needed */
    dist_finalize(&D);
    return rc;
}
