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
#include "corpus.h"
#include "dataset.h"
#include "dist.h"
#include "h5io.h"
#include "run_files.h"
#include "greedy.h"
#include "synthetic.h"
#include "util.h"

/* ---------------------------------------------------------------- tokens */


void vocab_build(Vocab *v, int vocab_size, char **pieces)
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

void vocab_free(Vocab *v)
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
    const ModelConfig *c = &m->cfg;
    size_t h = c->n_heads, S = b->S, T = b->T;
    for (int l = 0; l < c->n_layers; l++) {
        if (enc) m->be->download_act(m->be, enc + l * h * S * S, m->enc[l].P, h * S * S);
        m->be->download_act(m->be, dec + l * h * T * T, m->dec[l].P, h * T * T);
        m->be->download_act(m->be, crs + l * h * T * S, m->dec[l].P2, h * T * S);
    }
}

/* tokens of pair idx of c (reference) */
void sent_tokens(Sent *s, const Corpus *c, int idx, int max_len)
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

void sent_compute(Model *m, Sent *s, int greedy, int max_len_a)
{
    const ModelConfig *c = &m->cfg;
    size_t L = c->n_layers, h = c->n_heads, S = s->S, T = s->T;
    s->enc = xmalloc(sizeof(float) * L * h * S * S);
    s->dec = xmalloc(sizeof(float) * L * h * T * T);
    s->crs = xmalloc(sizeof(float) * L * h * T * S);
    Batch b = {0};
    one_pair_batch(&b, s, s->tout, s->T - 1, c->max_len);
    forward_maps(m, &b, s->enc, s->dec, s->crs);
    if (greedy) {
        /* the model's own translation (max length: input + max_len_a, 6.1) */
        int max_out = (s->S - 1) + max_len_a;
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

void sent_free(Sent *s)
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
int write_sentences(hid_t parent, Sent *s, int n, int greedy, const ModelConfig *c, const Vocab *v)
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

void attention_probe_write(Model *m, const Corpus *dev, const char *data, const char *run_dir, int step)
{
    int n = dev->n < ATTN_PROBE_SENTENCES ? dev->n : ATTN_PROBE_SENTENCES;
    Sent *s = xcalloc(n ? n : 1, sizeof(Sent));
    for (int k = 0; k < n; k++) {
        sent_tokens(&s[k], dev, k, m->cfg.max_len);
        sent_compute(m, &s[k], 0, 0);
    }
    Vocab v;
    char **pieces = NULL;
    hdf5_lock();   /* the dataset's vocabulary is read with HDF5 too */
    DatasetVocab dv = {0};
    if (!corpus_is_synthetic(data) && dataset_load_vocab(data, &dv) == 0 && dv.vocab_size == m->cfg.vocab_size)
        pieces = dv.pieces;
    vocab_build(&v, m->cfg.vocab_size, pieces);
    if (dv.pieces) dataset_vocab_free(&dv);
    char path[4200], grp[32];
    snprintf(path, sizeof path, "%s/" RUN_FILE_PROBE, run_dir);
    snprintf(grp, sizeof grp, "step_%08d", step);
    /* rewritten whole and renamed into place (h5io.h) */
    char msg[4400];
    int created;
    H5Mem mem;
    hid_t f = h5io_open_log(&mem, path, "transformer-attention-probe", NULL, &created, msg, sizeof msg) ? -1 : mem.id;
    if (f >= 0 && created) {
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
