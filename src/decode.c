/* Beam search with incremental decoding over the op interface (decode.h
 * states the search rules).  Section numbers refer to Vaswani et al. 2017. */
#include "decode.h"
#include "attention.h"
#include "head_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct Decoder {
    Model *m;
    /* capacities of the buffers below */
    int cap_n, cap_sent, cap_S, cap_T;
    /* current problem */
    int K, n_sent, S, T;          /* T = positions cached per hypothesis */
    /* activations: fp32 views (the decoder's own buffers are fp32 in every
     * precision; the GEMMs convert the encoder output where it is bf16) */
    Act *self_kv[2];              /* [layer] -> [hyp, T, hk+hv]: K|V of positions 0..t */
    int cur;                      /* which self_kv buffer is current */
    Act *cross_kv;                /* [layer] -> [sentence, S, hk+hv] from the encoder output */
    Act xa, xb, x1, x2, q, P, P2, ctx, sub, r, hid, logits;
    float *mean, *rstd;
    int32_t *d_tok, *d_self_len, *d_src_len;
    uint32_t *d_sent_id;
    int32_t *h_src_len;
};

#define PRM(off) (m->params + (off))
#define W(off) act_f32(PRM(off))   /* a weight as a GEMM operand */

void decode_opts_from_config(DecodeOpts *o, const Config *c)
{
    o->beam = c->beam;
    o->len_alpha = c->len_alpha;
    o->max_len_a = c->max_len_a;
    o->max_out = 0;
}

double decode_length_penalty(int n, float alpha)
{
    /* lp(Y) = ((5+|Y|)/6)^alpha  (Wu et al. 2016, as used in section 6.1) */
    return pow((5.0 + n) / 6.0, (double)alpha);
}

int decode_max_out(const Model *m, const DecodeOpts *o, int src_tokens)
{
    long L = (long)src_tokens + o->max_len_a;
    /* BOS + L tokens must fit the model's positions */
    if (L > model_positions(m) - 1) L = model_positions(m) - 1;
    if (o->max_out > 0 && L > o->max_out) L = o->max_out;
    return L < 0 ? 0 : (int)L;
}

Decoder *decoder_create(Model *m)
{
    Decoder *d = xcalloc(1, sizeof *d);
    d->m = m;
    int N = m->cfg.n_layers;
    d->self_kv[0] = xcalloc(N, sizeof(Act));
    d->self_kv[1] = xcalloc(N, sizeof(Act));
    d->cross_kv = xcalloc(N, sizeof(Act));
    return d;
}

#define DFREE(p) do { if (p) be->free(be, p); (p) = NULL; } while (0)
#define DFREE_ACT(a) do { if ((a).data) be->free(be, (a).data); (a) = act_none(); } while (0)

static void release(Decoder *d)
{
    Backend *be = d->m->be;
    for (int l = 0; l < d->m->cfg.n_layers; l++) {
        DFREE_ACT(d->self_kv[0][l]); DFREE_ACT(d->self_kv[1][l]); DFREE_ACT(d->cross_kv[l]);
    }
    DFREE_ACT(d->xa); DFREE_ACT(d->xb); DFREE_ACT(d->x1); DFREE_ACT(d->x2); DFREE_ACT(d->q); DFREE_ACT(d->P);
    DFREE_ACT(d->P2); DFREE_ACT(d->ctx); DFREE_ACT(d->sub); DFREE_ACT(d->r); DFREE(d->mean); DFREE(d->rstd);
    DFREE_ACT(d->hid); DFREE_ACT(d->logits);
    DFREE(d->d_tok); DFREE(d->d_self_len); DFREE(d->d_src_len); DFREE(d->d_sent_id);
    free(d->h_src_len);
    d->h_src_len = NULL;
    d->cap_n = d->cap_sent = d->cap_S = d->cap_T = 0;
}

void decoder_free(Decoder *d)
{
    if (!d) return;
    release(d);
    free(d->self_kv[0]); free(d->self_kv[1]); free(d->cross_kv);
    free(d);
}

static int imax(int a, int b) { return a > b ? a : b; }

/* a decoder buffer; out of device memory is fatal here, with the sizes,
 * rather than a NULL the first op trips on */
static void *dalloc(Backend *be, size_t bytes, int n_hyp, int T)
{
    void *p = be->alloc(be, bytes);
    if (!p)
        die(1, "decode: out of device memory allocating %zu bytes (batch of %d hypotheses, up to %d output "
            "positions; a smaller --batch-size needs less)", bytes, n_hyp, T);
    return p;
}

/* grow the buffers to n_sent sentences of K hypotheses, S source and T target positions */
static void reserve(Decoder *d, int n_sent, int K, int S, int T)
{
    int n = n_sent * K;
    if (n <= d->cap_n && n_sent <= d->cap_sent && S <= d->cap_S && T <= d->cap_T) return;
    int cn = imax(n, d->cap_n), cs = imax(n_sent, d->cap_sent), cS = imax(S, d->cap_S), cT = imax(T, d->cap_T);
    release(d);
    d->cap_n = cn; d->cap_sent = cs; d->cap_S = cS; d->cap_T = cT;
    Model *m = d->m;
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    size_t h = c->n_heads, dm = c->d_model, hk = h * c->d_k, hv = h * c->d_v, w2 = hk + hv;
    size_t N = (size_t)cn, F = sizeof(float);
#define A(x) dalloc(be, (x) * F, cn, cT)
#define X(x) act_f32(A(x))
    for (int l = 0; l < c->n_layers; l++) {
        d->self_kv[0][l] = X(N * cT * w2);
        d->self_kv[1][l] = X(N * cT * w2);
        d->cross_kv[l] = X((size_t)cs * cS * w2);
    }
    d->xa = X(N * dm); d->xb = X(N * dm); d->x1 = X(N * dm); d->x2 = X(N * dm);
    d->q = X(N * hk); d->P = X(N * h * cT); d->P2 = X(N * h * cS); d->ctx = X(N * hv);
    d->sub = X(N * dm); d->r = X(N * dm); d->mean = A(N); d->rstd = A(N);
    d->hid = X(N * c->d_ff); d->logits = X(N * c->vocab_size);
    d->d_tok = A(N); d->d_self_len = A(N); d->d_sent_id = A(N); d->d_src_len = A((size_t)cs);
#undef A
#undef X
    d->h_src_len = xcalloc(cs, sizeof(int32_t));
}

void decoder_begin(Decoder *d, const Batch *b, int K, int t_max)
{
    Model *m = d->m;
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int B = b->B, S = b->S;
    reserve(d, B, K, S, t_max);
    d->K = K; d->n_sent = B; d->S = S; d->T = t_max; d->cur = 0;

    /* encoder over the sources (model.c, dropout off); the target side of
     * the uploaded batch is a dummy single position */
    Batch w = *b;
    int32_t *dummy = xcalloc(B, sizeof(int32_t));
    int32_t *ones = xmalloc(sizeof(int32_t) * B);
    for (int k = 0; k < B; k++) ones[k] = 1;
    w.T = 1; w.tgt_in = dummy; w.tgt_out = dummy; w.tgt_len = ones;
    model_upload_batch(m, &w);
    Act enc = model_encode(m, 0, 0);
    free(dummy);
    free(ones);

    /* encoder-decoder attention keys and values, once per sentence
     * (section 3.2.3): W_k and W_v are adjacent, one GEMM */
    int hk = c->n_heads * c->d_k, hv = c->n_heads * c->d_v, w2 = hk + hv, dm = c->d_model;
    for (int l = 0; l < c->n_layers; l++)
        be->gemm(be, 0, 1, B * S, w2, dm, 1.0f, enc, dm, W(m->pt.dec[l].cross_attn.Wk), dm, 0.0f,
                 d->cross_kv[l], w2);
    memcpy(d->h_src_len, b->src_len, sizeof(int32_t) * B);
    be->upload(be, d->d_src_len, d->h_src_len, sizeof(int32_t) * B);
    int n = B * K;
    int32_t *len = xmalloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) len[i] = t_max;
    be->upload(be, d->d_self_len, len, sizeof(int32_t) * n);
    free(len);
    be->zero(be, d->d_sent_id, sizeof(uint32_t) * n);
}

Act decoder_step(Decoder *d, const int32_t *tok, int t, int log_probs)
{
    Model *m = d->m;
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int K = d->K, ns = d->n_sent, n = ns * K, S = d->S, T = d->T;
    int h = c->n_heads, dk = c->d_k, dv = c->d_v, hk = h * dk, hv = h * dv, w2 = hk + hv;
    int dm = c->d_model, dff = c->d_ff, V = c->vocab_size;
    float scale = attention_scale(dk);   /* the score GEMMs' alpha, as in training */
    DropoutKey nokey = { 0, 0, 0 };
    if (t >= T) die(1, "decode: step %d beyond the %d cached positions", t, T);

    be->upload(be, d->d_tok, tok, sizeof(int32_t) * n);
    /* embedding * sqrt(d_model) + position t (sections 3.4, 3.5) */
    be->embed_forward(be, d->xa, PRM(m->pt.embedding), model_pos_table(m), d->d_tok,
                      d->d_sent_id, n, 1, dm, sqrtf((float)dm), t, 0.0f, nokey);
    Act x = d->xa, y = d->xb;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerOffsets *L = &m->pt.dec[l];
        Act kv = d->self_kv[d->cur][l];
        long sh = (long)T * w2;   /* one hypothesis' cache */
        /* masked self-attention: project q, append k|v at position t, attend
         * to positions 0..t (the causal mask is implicit: later positions do
         * not exist yet) */
        be->gemm(be, 0, 1, n, hk, dm, 1.0f, x, dm, W(L->self_attn.Wq), dm, 0.0f, d->q, hk);
        be->gemm(be, 0, 1, n, w2, dm, 1.0f, x, dm, W(L->self_attn.Wk), dm, 0.0f, act_at(kv, (size_t)t * w2), (int)sh);
        int tk = t + 1;
        be->gemm_batched(be, 0, 1, 1, tk, dk, scale, d->q, hk, hk, dk, kv, w2, sh, dk, 0.0f, d->P, tk,
                         (long)h * tk, tk, n, h);
        be->softmax_forward(be, d->P, d->d_self_len, 1.0f, n, h, 1, tk, 1, t);
        be->gemm_batched(be, 0, 0, 1, dv, tk, 1.0f, d->P, tk, (long)h * tk, tk, act_at(kv, hk), w2, sh, dv, 0.0f,
                         d->ctx, hv, hv, dv, n, h);
        model_attn_output(m, HEAD_DEC_SELF, l, d->ctx, d->ctx, L->self_attn.Wo, d->sub, n);
        be->residual_ln_forward(be, d->x1, d->r, d->mean, d->rstd, x, d->sub, PRM(L->ln1.gamma), PRM(L->ln1.beta),
                                n, dm, c->ln_eps, 0.0f, nokey, d->d_sent_id, 1);
        /* encoder-decoder attention: the K hypotheses of a sentence are a
         * K-row query block against that sentence's cached keys/values */
        Act ckv = d->cross_kv[l];
        be->gemm(be, 0, 1, n, hk, dm, 1.0f, d->x1, dm, W(L->cross_attn.Wq), dm, 0.0f, d->q, hk);
        be->gemm_batched(be, 0, 1, K, S, dk, scale, d->q, hk, (long)K * hk, dk, ckv, w2, (long)S * w2, dk, 0.0f,
                         d->P2, S, (long)h * K * S, (long)K * S, ns, h);
        be->softmax_forward(be, d->P2, d->d_src_len, 1.0f, ns, h, K, S, 0, 0);
        be->gemm_batched(be, 0, 0, K, dv, S, 1.0f, d->P2, S, (long)h * K * S, (long)K * S, act_at(ckv, hk), w2,
                         (long)S * w2, dv, 0.0f, d->ctx, hv, (long)K * hv, dv, ns, h);
        model_attn_output(m, HEAD_CROSS, l, d->ctx, d->ctx, L->cross_attn.Wo, d->sub, n);
        be->residual_ln_forward(be, d->x2, d->r, d->mean, d->rstd, d->x1, d->sub, PRM(L->ln2.gamma),
                                PRM(L->ln2.beta), n, dm, c->ln_eps, 0.0f, nokey, d->d_sent_id, 1);
        /* position-wise feed-forward (eq. 2) */
        be->linear_bias_forward(be, d->hid, d->x2, W(L->ffn.W1), PRM(L->ffn.b1), n, dm, dff, 1, NULL);
        be->linear_bias_forward(be, d->sub, d->hid, W(L->ffn.W2), PRM(L->ffn.b2), n, dff, dm, 0, NULL);
        be->residual_ln_forward(be, y, d->r, d->mean, d->rstd, d->x2, d->sub, PRM(L->ln3.gamma), PRM(L->ln3.beta),
                                n, dm, c->ln_eps, 0.0f, nokey, d->d_sent_id, 1);
        Act tmp = x; x = y; y = tmp;
    }
    /* pre-softmax projection with the shared embedding (section 3.4) */
    be->gemm(be, 0, 1, n, V, dm, 1.0f, x, dm, W(m->pt.embedding), dm, 0.0f, d->logits, V);
    if (log_probs) be->log_softmax(be, d->logits, n, V);
    return d->logits;
}

void decoder_reorder(Decoder *d, const int *parent, const int *keep, int n_keep, int t)
{
    Model *m = d->m;
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int K = d->K, S = d->S, T = d->T, n = n_keep * K;
    size_t w2 = (size_t)c->n_heads * (c->d_k + c->d_v);
    size_t sh = (size_t)T * w2, used = (size_t)(t + 1) * w2;
    int nxt = 1 - d->cur;
    for (int l = 0; l < c->n_layers; l++) {
        Act src = d->self_kv[d->cur][l], dst = d->self_kv[nxt][l];
        for (int r = 0; r < n; r++) be->copy_act(be, act_at(dst, r * sh), act_at(src, (size_t)parent[r] * sh), used);
        /* drop finished sentences: keep[] increases, so moving blocks down in
         * order never overwrites a block still to be moved */
        for (int i = 0; i < n_keep; i++)
            if (keep[i] != i)
                be->copy_act(be, act_at(d->cross_kv[l], (size_t)i * S * w2),
                             act_at(d->cross_kv[l], (size_t)keep[i] * S * w2), (size_t)S * w2);
    }
    d->cur = nxt;
    if (n_keep != d->n_sent) {
        for (int i = 0; i < n_keep; i++) d->h_src_len[i] = d->h_src_len[keep[i]];
        be->upload(be, d->d_src_len, d->h_src_len, sizeof(int32_t) * n_keep);
    }
    d->n_sent = n_keep;
}

/* ---------------------------------------------------------- the search */

typedef struct { double s; int j, v; } Cand;

/* insert (s, j, v) into the descending list top[0..*cnt) of at most K; ties
 * keep the earlier candidate (scan order: hypothesis, then EOS, then ids) */
static void cand_push(Cand *top, int *cnt, int K, double s, int j, int v)
{
    if (*cnt == K && !(s > top[K - 1].s)) return;
    int i = *cnt < K ? (*cnt)++ : K - 1;
    while (i > 0 && s > top[i - 1].s) { top[i] = top[i - 1]; i--; }
    top[i].s = s; top[i].j = j; top[i].v = v;
}

/* the state of one beam search over a batch: row r = i * K + j is
 * hypothesis j of active sentence slot i; the n* arrays are the next step's */
typedef struct {
    const DecodeOpts *o;
    int B, K, V, T, n_cand;
    int *Lmax;                  /* per sentence of b: maximum output length */
    int *act;                   /* active slot -> sentence of b */
    int *alive, *nalive;
    double *sc, *nsc;           /* log-probability of each hypothesis */
    int32_t *hist, *nhist;      /* each hypothesis' tokens, T per row */
    int32_t *tok, *ntok;        /* each hypothesis' last token */
    int *parent, *keep, *done;
    double *best;               /* per sentence: best finished score */
    float *lp;                  /* log-probabilities of the step, host copy */
    int32_t *out;               /* the caller's outputs */
    int out_stride, *out_len;
} BeamSearch;

/* the search's arrays, one live hypothesis (BOS) per sentence; returns the
 * positions to cache (the longest output + 1) */
static int beam_begin(BeamSearch *s, const Model *m, const Batch *b, const DecodeOpts *o, int32_t *out,
                      int out_stride, int *out_len)
{
    int B = b->B, K = o->beam < 1 ? 1 : o->beam, V = m->cfg.vocab_size;
    int *Lmax = xmalloc(sizeof(int) * B);
    int T = 1;
    for (int k = 0; k < B; k++) {
        Lmax[k] = decode_max_out(m, o, b->src_len[k] - 1);
        if (Lmax[k] > out_stride) Lmax[k] = out_stride;
        if (Lmax[k] + 1 > T) T = Lmax[k] + 1;
        out_len[k] = 0;
    }
    int n = B * K;
    /* candidates per sentence and step: 2K, so that K live hypotheses remain
     * whatever number of them end in EOS (each live hypothesis contributes
     * at most one EOS); beam 1 is greedy decoding (decode.h) */
    *s = (BeamSearch){ .o = o, .B = B, .K = K, .V = V, .T = T, .n_cand = K > 1 ? 2 * K : 1, .Lmax = Lmax,
                       .out = out, .out_stride = out_stride, .out_len = out_len };
    s->act = xmalloc(sizeof(int) * B);
    s->alive = xcalloc(n, sizeof(int)); s->nalive = xcalloc(n, sizeof(int));
    s->sc = xcalloc(n, sizeof(double)); s->nsc = xcalloc(n, sizeof(double));
    s->hist = xcalloc((size_t)n * T, sizeof(int32_t)); s->nhist = xcalloc((size_t)n * T, sizeof(int32_t));
    s->tok = xmalloc(sizeof(int32_t) * n); s->ntok = xmalloc(sizeof(int32_t) * n);
    s->parent = xmalloc(sizeof(int) * n); s->keep = xmalloc(sizeof(int) * B); s->done = xcalloc(B, sizeof(int));
    s->best = xmalloc(sizeof(double) * B);
    s->lp = xmalloc(sizeof(float) * (size_t)n * V);
    for (int k = 0; k < B; k++) {
        s->act[k] = k;
        s->best[k] = -INFINITY;
        for (int j = 0; j < K; j++) {
            int r = k * K + j;
            s->alive[r] = j == 0;      /* one live hypothesis: BOS */
            s->tok[r] = TOK_BOS;
        }
    }
    return T;
}

static void beam_free(BeamSearch *s)
{
    free(s->Lmax); free(s->act); free(s->alive); free(s->nalive); free(s->sc); free(s->nsc); free(s->hist);
    free(s->nhist); free(s->tok); free(s->ntok); free(s->parent); free(s->keep); free(s->done); free(s->best);
    free(s->lp);
}

/* the best n_cand extensions of slot i's live hypotheses at step t, in
 * descending order; returns their number */
static int beam_candidates(const BeamSearch *s, int i, int t, int L, Cand *top)
{
    int K = s->K, V = s->V, n_cand = s->n_cand;
    int cnt = 0;
    for (int j = 0; j < K; j++) {
        int r = i * K + j;
        if (!s->alive[r]) continue;
        const float *row = s->lp + (size_t)r * V;
        cand_push(top, &cnt, n_cand, s->sc[r] + row[TOK_EOS], j, TOK_EOS);
        if (t >= L) continue;   /* the maximum length: only EOS */
        for (int v = TOK_EOS + 1; v < V; v++) cand_push(top, &cnt, n_cand, s->sc[r] + row[v], j, v);
    }
    return cnt;
}

/* step t of active slot i: finished candidates update the sentence's best
 * output, the others fill the next step's K slots; marks the sentence done
 * when no live hypothesis can beat its best */
static void beam_advance(BeamSearch *s, int i, int t)
{
    const DecodeOpts *o = s->o;
    int K = s->K, T = s->T, k = s->act[i], L = s->Lmax[k];
    int32_t *hist = s->hist, *nhist = s->nhist;
    double *best = s->best, *nsc = s->nsc;
    Cand top[s->n_cand];
    int cnt = beam_candidates(s, i, t, L, top);
    int live = 0;
    for (int c = 0; c < cnt; c++) {
        int pr = i * K + top[c].j;
        if (top[c].s == -INFINITY) continue;
        if (top[c].v != TOK_EOS && live == K) continue;   /* the beam is full */
        if (top[c].v == TOK_EOS) {
            /* finished: y_1..y_t EOS, |Y| = t + 1 */
            double sf = top[c].s / decode_length_penalty(t + 1, o->len_alpha);
            if (sf > best[k]) {
                best[k] = sf;
                s->out_len[k] = t;
                memcpy(s->out + (size_t)k * s->out_stride, hist + (size_t)pr * T, sizeof(int32_t) * t);
            }
            continue;
        }
        int r = i * K + live++;
        s->nalive[r] = 1;
        nsc[r] = top[c].s;
        s->parent[r] = pr;
        s->ntok[r] = top[c].v;
        memcpy(nhist + (size_t)r * T, hist + (size_t)pr * T, sizeof(int32_t) * t);
        nhist[(size_t)r * T + t] = top[c].v;
    }
    /* exact early stop (decode.h): the best any live prefix can
     * still reach is s / lp(L+1) (alpha >= 0) or s / lp(t+2) */
    double bound = -INFINITY;
    for (int j = 0; j < live; j++) {
        int n_fin = o->len_alpha >= 0 ? L + 1 : t + 2;
        double ub = nsc[i * K + j] / decode_length_penalty(n_fin, o->len_alpha);
        if (ub > bound) bound = ub;
    }
    s->done[i] = live == 0 || best[k] >= bound;
    for (int j = live; j < K; j++) {   /* empty slots: inert copies */
        int r = i * K + j;
        s->nalive[r] = 0;
        nsc[r] = -INFINITY;
        s->parent[r] = i * K;
        s->ntok[r] = TOK_EOS;
    }
}

/* compact: drop finished sentences, renumber the hypotheses; returns the
 * number of sentences kept (keep[] lists their old slots) */
static int beam_compact(BeamSearch *s, int n_act, int t)
{
    int K = s->K, T = s->T;
    int n_keep = 0;
    for (int i = 0; i < n_act; i++) {
        if (s->done[i]) continue;
        s->keep[n_keep] = i;
        for (int j = 0; j < K; j++) {
            int rn = n_keep * K + j, ro = i * K + j;
            s->alive[rn] = s->nalive[ro];
            s->sc[rn] = s->nsc[ro];
            s->tok[rn] = s->ntok[ro];
            s->parent[rn] = s->parent[ro];
            memcpy(s->hist + (size_t)rn * T, s->nhist + (size_t)ro * T, sizeof(int32_t) * (t + 1));
        }
        s->act[n_keep] = s->act[i];
        n_keep++;
    }
    return n_keep;
}

int decode_batch(Decoder *d, const Batch *b, const DecodeOpts *o, int32_t *out, int out_stride,
                 int *out_len, float *score)
{
    Model *m = d->m;
    Backend *be = m->be;
    int B = b->B, V = m->cfg.vocab_size;
    if (B == 0) return 0;
    BeamSearch s;
    int T = beam_begin(&s, m, b, o, out, out_stride, out_len), K = s.K;
    decoder_begin(d, b, K, T);
    int32_t *tok = s.tok;
    float *lp = s.lp;
    int n_act = B, t;
    for (t = 0; n_act > 0; t++) {
        int na = n_act * K;
        Act dl = decoder_step(d, tok, t, 1);
        be->download_act(be, lp, dl, (size_t)na * V);
        #pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < n_act; i++) beam_advance(&s, i, t);
        int n_keep = beam_compact(&s, n_act, t);
        if (n_keep > 0) decoder_reorder(d, s.parent, s.keep, n_keep, t);
        n_act = n_keep;
    }
    if (score)
        for (int k = 0; k < B; k++) score[k] = (float)s.best[k];
    beam_free(&s);
    return t;
}
