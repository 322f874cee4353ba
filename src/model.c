/* The Transformer, forward and backward, over the op interface.
 * Equation and section numbers refer to Vaswani et al. (2017). */
#include "model.h"
#include "attention.h"
#include "head_mask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---------------------------------------------------------------- params */

static size_t add_tensor(ParamTable *pt, int *cap, const char *name, int rows, int cols, int init)
{
    if (pt->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        pt->t = xrealloc(pt->t, sizeof(ParamInfo) * *cap);
    }
    ParamInfo *p = &pt->t[pt->n++];
    snprintf(p->name, PARAM_NAME, "%s", name);
    p->rows = rows;
    p->cols = cols;
    p->offset = pt->total;
    p->numel = (size_t)rows * cols;
    p->init = init;
    pt->total += p->numel;
    return p->offset;
}

static void add_attention(ParamTable *pt, int *cap, const char *prefix, const ModelConfig *c, AttnOffsets *a)
{
    char n[PARAM_NAME];
    int d = c->d_model, hk = c->n_heads * c->d_k, hv = c->n_heads * c->d_v;
    /* W^Q, W^K, W^V of all heads (section 3.2.2), adjacent so one GEMM projects them */
    snprintf(n, sizeof n, "%s/W_q", prefix); a->Wq = add_tensor(pt, cap, n, hk, d, PARAM_INIT_XAVIER);
    snprintf(n, sizeof n, "%s/W_k", prefix); a->Wk = add_tensor(pt, cap, n, hk, d, PARAM_INIT_XAVIER);
    snprintf(n, sizeof n, "%s/W_v", prefix); a->Wv = add_tensor(pt, cap, n, hv, d, PARAM_INIT_XAVIER);
    snprintf(n, sizeof n, "%s/W_o", prefix); a->Wo = add_tensor(pt, cap, n, d, hv, PARAM_INIT_XAVIER);
}

static void add_norm(ParamTable *pt, int *cap, const char *prefix, const ModelConfig *c, NormOffsets *o)
{
    char n[PARAM_NAME];
    snprintf(n, sizeof n, "%s/gamma", prefix); o->gamma = add_tensor(pt, cap, n, c->d_model, 1, PARAM_INIT_ONE);
    snprintf(n, sizeof n, "%s/beta", prefix); o->beta = add_tensor(pt, cap, n, c->d_model, 1, PARAM_INIT_ZERO);
}

static void add_ffn(ParamTable *pt, int *cap, const char *prefix, const ModelConfig *c, FfnOffsets *f)
{
    char n[PARAM_NAME];
    /* FFN(x) = max(0, x W1 + b1) W2 + b2  (eq. 2) */
    snprintf(n, sizeof n, "%s/W_1", prefix); f->W1 = add_tensor(pt, cap, n, c->d_ff, c->d_model, PARAM_INIT_XAVIER);
    snprintf(n, sizeof n, "%s/b_1", prefix); f->b1 = add_tensor(pt, cap, n, c->d_ff, 1, PARAM_INIT_ZERO);
    snprintf(n, sizeof n, "%s/W_2", prefix); f->W2 = add_tensor(pt, cap, n, c->d_model, c->d_ff, PARAM_INIT_XAVIER);
    snprintf(n, sizeof n, "%s/b_2", prefix); f->b2 = add_tensor(pt, cap, n, c->d_model, 1, PARAM_INIT_ZERO);
}

void param_table_build(ParamTable *pt, const ModelConfig *c)
{
    memset(pt, 0, sizeof *pt);
    int cap = 0, N = c->n_layers;
    char p[32], q[64];
    pt->enc = xcalloc(N, sizeof(LayerOffsets));
    pt->dec = xcalloc(N, sizeof(LayerOffsets));
    /* reverse layer order: the order in which backward finalises gradients */
    for (int l = N - 1; l >= 0; l--) {
        LayerOffsets *L = &pt->dec[l];
        snprintf(p, sizeof p, "decoder/layer_%02d", l);
        snprintf(q, sizeof q, "%s/self_attention", p); add_attention(pt, &cap, q, c, &L->self_attn);
        snprintf(q, sizeof q, "%s/self_attention_norm", p); add_norm(pt, &cap, q, c, &L->ln1);
        snprintf(q, sizeof q, "%s/cross_attention", p); add_attention(pt, &cap, q, c, &L->cross_attn);
        snprintf(q, sizeof q, "%s/cross_attention_norm", p); add_norm(pt, &cap, q, c, &L->ln2);
        snprintf(q, sizeof q, "%s/ffn", p); add_ffn(pt, &cap, q, c, &L->ffn);
        snprintf(q, sizeof q, "%s/ffn_norm", p); add_norm(pt, &cap, q, c, &L->ln3);
    }
    pt->enc_begin = pt->total;
    for (int l = N - 1; l >= 0; l--) {
        LayerOffsets *L = &pt->enc[l];
        snprintf(p, sizeof p, "encoder/layer_%02d", l);
        snprintf(q, sizeof q, "%s/self_attention", p); add_attention(pt, &cap, q, c, &L->self_attn);
        snprintf(q, sizeof q, "%s/self_attention_norm", p); add_norm(pt, &cap, q, c, &L->ln1);
        snprintf(q, sizeof q, "%s/ffn", p); add_ffn(pt, &cap, q, c, &L->ffn);
        snprintf(q, sizeof q, "%s/ffn_norm", p); add_norm(pt, &cap, q, c, &L->ln3);
    }
    pt->emb_begin = pt->total;
    pt->has_pos = c->positional == POSITIONAL_LEARNED;
    if (pt->has_pos)
        pt->pos_embedding = add_tensor(pt, &cap, "positional_embedding", c->max_len, c->d_model, PARAM_INIT_NORMAL);
    /* one matrix for source and target embeddings and the pre-softmax
     * projection (section 3.4) */
    pt->embedding = add_tensor(pt, &cap, "shared_embedding", c->vocab_size, c->d_model, PARAM_INIT_NORMAL);
}

void param_table_free(ParamTable *pt)
{
    free(pt->t);
    free(pt->enc);
    free(pt->dec);
    memset(pt, 0, sizeof *pt);
}

void param_init_host(const ParamTable *pt, const ModelConfig *c, float *host)
{
    for (int ti = 0; ti < pt->n; ti++) {
        const ParamInfo *p = &pt->t[ti];
        float *w = host + p->offset;
        uint32_t k0 = (uint32_t)c->seed ^ 0x5EED1A17u, k1 = (uint32_t)(c->seed >> 32) + (uint32_t)ti;
        switch (p->init) {
        case PARAM_INIT_ZERO: memset(w, 0, sizeof(float) * p->numel); break;
        case PARAM_INIT_ONE: for (size_t i = 0; i < p->numel; i++) w[i] = 1.0f; break;
        case PARAM_INIT_XAVIER: {
            /* Glorot uniform, as tensor2tensor and fairseq initialise linear maps */
            float a = sqrtf(6.0f / (float)(p->rows + p->cols));
            for (size_t i = 0; i < p->numel; i += 4) {
                philox_ctr ctr = {{ (uint32_t)(i >> 2), (uint32_t)(i >> 34), 0x1417u, 0 }};
                philox_ctr r = philox4x32(ctr, k0, k1);
                for (size_t j = 0; j < 4 && i + j < p->numel; j++)
                    w[i + j] = a * (2.0f * philox_uniform(r.v[j]) - 1.0f);
            }
            break;
        }
        case PARAM_INIT_NORMAL: {
            /* N(0, d_model^-1/2): with the sqrt(d_model) scale of section 3.4
             * embeddings start at unit variance */
            float sd = 1.0f / sqrtf((float)c->d_model);
            for (size_t i = 0; i < p->numel; i += 2) {
                philox_ctr ctr = {{ (uint32_t)(i >> 2), (uint32_t)(i >> 34), 0x2417u, 0 }};
                philox_ctr r = philox4x32(ctr, k0, k1);
                int o = (int)(i & 2);
                double u1 = ((r.v[o] >> 8) + 1.0) / 16777217.0, u2 = (r.v[o + 1] >> 8) / 16777216.0;
                double rad = sqrt(-2.0 * log(u1));
                w[i] = (float)(sd * rad * cos(2 * M_PI * u2));
                if (i + 1 < p->numel) w[i + 1] = (float)(sd * rad * sin(2 * M_PI * u2));
            }
            break;
        }
        }
    }
}

/* ----------------------------------------------------------- head gates */

static size_t n_gates(const ModelConfig *c) { return (size_t)HEAD_KINDS * c->n_layers * c->n_heads; }

void model_set_head_gates(Model *m, const float *host_gates)
{
    size_t bytes = sizeof(float) * n_gates(&m->cfg);
    if (!m->gates && !(m->gates = m->be->alloc(m->be, bytes))) die(1, "%s: out of device memory for head gates", m->be->name);
    m->be->upload(m->be, m->gates, host_gates, bytes);
}

void model_track_gate_grads(Model *m)
{
    size_t n = n_gates(&m->cfg);
    if (!m->gates) {
        float *ones = xmalloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
        model_set_head_gates(m, ones);
        free(ones);
    }
    if (!m->gate_grad && !(m->gate_grad = m->be->alloc(m->be, sizeof(float) * n)))
        die(1, "%s: out of device memory for head gate gradients", m->be->name);
    m->be->zero(m->be, m->gate_grad, sizeof(float) * n);
}

/* the gates of (kind, layer) on the device, NULL for a plain model */
static const float *layer_gates(const Model *m, int kind, int l)
{
    return m->gates ? m->gates + head_index(kind, l, 0, m->cfg.n_layers, m->cfg.n_heads) : NULL;
}

static float *layer_gate_grad(const Model *m, int kind, int l)
{
    return m->gate_grad ? m->gate_grad + head_index(kind, l, 0, m->cfg.n_layers, m->cfg.n_heads) : NULL;
}

int model_mask_heads(Model *m, const char *spec, const char *origin)
{
    const ModelConfig *c = &m->cfg;
    float *g = xmalloc(sizeof(float) * n_gates(c));
    char why[256];
    int rc = head_mask_parse(spec, c->n_layers, c->n_heads, g, why, sizeof why);
    if (rc) fprintf(stderr, "error: %s: key 'mask_heads': %s\n", origin, why);
    else {
        if (spec != m->cfg.mask_heads) snprintf(m->cfg.mask_heads, sizeof m->cfg.mask_heads, "%s", spec);
        /* a model without gates stays without them when nothing is masked */
        if (spec[0] || m->gates) model_set_head_gates(m, g);
    }
    free(g);
    return rc ? 2 : 0;
}

/* ------------------------------------------------------------- lifecycle */

void positional_sinusoids(float *host, int max_len, int d)
{
    for (int pos = 0; pos < max_len; pos++)
        for (int j = 0; j < d; j++) {
            double a = pos / pow(10000.0, (double)(j & ~1) / d);
            host[(size_t)pos * d + j] = (float)((j & 1) ? cos(a) : sin(a));
        }
}

/* lr_decay linear or cosine, after warmup: from eq. 3's peak (at step =
 * warmup) down to lr_final at train_steps, and lr_final after it:
 *   linear: lr_final + (peak - lr_final) (1 - u)
 *   cosine: lr_final + (peak - lr_final) (1 + cos(pi u)) / 2  (Loshchilov and Hutter 2017)
 * with u = (step - warmup) / (train_steps - warmup) */
static float decayed_lrate(const ModelConfig *c, int step)
{
    double w = c->warmup, peak = c->lr_peak > 0 ? c->lr_peak : c->lr_factor * pow((double)c->d_model, -0.5) / sqrt(w);
    double u = (step - w) / (double)(c->train_steps - c->warmup);
    if (u > 1) u = 1;
    double shape = c->lr_decay == LR_DECAY_LINEAR ? 1 - u : 0.5 * (1 + cos(M_PI * u));
    return (float)(c->lr_final + (peak - c->lr_final) * shape);
}

float model_lrate(const ModelConfig *c, int step)
{
    if (step < 1) step = 1;
    if (c->lr_decay != LR_DECAY_RSQRT && step > c->warmup && c->train_steps > c->warmup) return decayed_lrate(c, step);
    /* eq. 3 (and the warmup of every decay) */
    double s = step, w = c->warmup;
    double a = 1.0 / sqrt(s), b = s * pow(w, -1.5);
    /* lr_peak: the same warmup and inverse-square-root decay, scaled so that
     * the peak (at step = warmup, where eq. 3 gives d_model^-0.5 warmup^-0.5)
     * is lr_peak for every d_model, so that rows of a scaled-down Table 3
     * that change d_model do not also change their learning rate */
    if (c->lr_peak > 0) return (float)(c->lr_peak * sqrt(w) * (a < b ? a : b));
    return (float)(c->lr_factor * pow((double)c->d_model, -0.5) * (a < b ? a : b));
}

static int model_setup(Model *m, const ModelConfig *c, Backend *be, int draw_params);

int model_init(Model *m, const ModelConfig *c, Backend *be) { return model_setup(m, c, be, 1); }

int model_init_undrawn(Model *m, const ModelConfig *c, Backend *be) { return model_setup(m, c, be, 0); }

static int model_setup(Model *m, const ModelConfig *c, Backend *be, int draw_params)
{
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->be = be;
    m->loss_scale = 1.0f;
    param_table_build(&m->pt, c);
    size_t bytes = sizeof(float) * m->pt.total;
    m->params = be->alloc(be, bytes);
    m->grads = be->alloc(be, bytes);
    m->adam_m = be->alloc(be, bytes);
    m->adam_v = be->alloc(be, bytes);
    if (!m->params || !m->grads || !m->adam_m || !m->adam_v) return -1;
    /* a backend with narrow GEMM inputs keeps a shadow copy of the weights */
    if (be->set_params) be->set_params(be, m->params, m->pt.total);
    if (draw_params) {
        float *host = xmalloc(bytes);
        param_init_host(&m->pt, c, host);
        be->upload(be, m->params, host, bytes);
        free(host);
    }
    if (!m->pt.has_pos) {
        size_t n = (size_t)model_positions(m) * c->d_model;
        float *pe = xmalloc(sizeof(float) * n);
        positional_sinusoids(pe, model_positions(m), c->d_model);
        m->sinusoid = be->alloc(be, sizeof(float) * n);
        if (!m->sinusoid) { free(pe); return -1; }
        be->upload(be, m->sinusoid, pe, sizeof(float) * n);
        free(pe);
    }
    m->enc = xcalloc(c->n_layers, sizeof(LayerActs));
    m->dec = xcalloc(c->n_layers, sizeof(LayerActs));
    /* config_validate has checked mask_heads against this architecture */
    if (model_mask_heads(m, c->mask_heads, "config")) return -1;
    return 0;
}

#define FREE(p) do { if (p) m->be->free(m->be, p); (p) = NULL; } while (0)
#define FREE_ACT(a) do { if ((a).data) m->be->free(m->be, (a).data); (a) = act_none(); } while (0)

static void free_acts(Model *m)
{
    int N = m->cfg.n_layers;
    /* step graphs hold these buffers' addresses (ops.h graph_begin) */
    if (m->be->graph_reset) m->be->graph_reset(m->be);
    for (int l = 0; l < N; l++) {
        LayerActs *A[2] = { &m->enc[l], &m->dec[l] };
        for (int k = 0; k < 2; k++) {
            LayerActs *a = A[k];
            FREE_ACT(a->qkv); FREE_ACT(a->P); FREE_ACT(a->ctx); FREE_ACT(a->r1); FREE(a->m1); FREE(a->s1);
            FREE_ACT(a->x1); FREE_ACT(a->q2); FREE_ACT(a->kv2); FREE_ACT(a->P2); FREE_ACT(a->ctx2);
            FREE_ACT(a->r2); FREE(a->m2); FREE(a->s2); FREE_ACT(a->x2);
            FREE_ACT(a->hid); FREE(a->relu_mask); FREE_ACT(a->r3); FREE(a->m3); FREE(a->s3); FREE_ACT(a->x3);
            FREE(a->Pst); FREE(a->P2st);
        }
    }
    FREE_ACT(m->enc_in); FREE_ACT(m->dec_in); FREE_ACT(m->logits); FREE(m->row_loss); FREE(m->row_nll);
    FREE_ACT(m->g_x); FREE_ACT(m->g_sub); FREE_ACT(m->g_big); FREE_ACT(m->g_ctx); FREE_ACT(m->g_P);
    FREE_ACT(m->g_hid); FREE_ACT(m->g_enc);
    FREE(m->d_batch);
    m->d_src = m->d_tgt_in = m->d_tgt_out = m->d_src_len = m->d_tgt_len = NULL;
    m->d_sent_id = NULL;
    free(m->h_row_loss); free(m->h_row_nll); free(m->h_batch);
    m->h_row_loss = m->h_row_nll = NULL;
    m->h_batch = NULL;
}

void model_release_acts(Model *m)
{
    free_acts(m);
    m->cap_ns = m->cap_nt = m->cap_pss = m->cap_ptt = m->cap_pts = m->cap_B = 0;
}

void model_free(Model *m)
{
    if (!m->be) return;
    free_acts(m);
    FREE(m->params); FREE(m->grads); FREE(m->adam_m); FREE(m->adam_v); FREE(m->sinusoid);
    FREE(m->gates); FREE(m->gate_grad);
    free(m->enc);
    free(m->dec);
    param_table_free(&m->pt);
    m->be = NULL;
}

static size_t max3(size_t a, size_t b, size_t c) { size_t m = a > b ? a : b; return m > c ? m : c; }

/* one activation buffer of model_reserve; a failed device allocation is
 * fatal here, naming the buffer, rather than a NULL the first op trips on */
static void reserve_fail(Backend *be, size_t bytes, const char *name, int layer)
{
    if (layer >= 0)
        die(1, "%s: out of device memory allocating %s of layer %d (%zu bytes)", be->name, name, layer, bytes);
    die(1, "%s: out of device memory allocating %s (%zu bytes)", be->name, name, bytes);
}

/* The batch's six arrays packed one after the other, each starting on a
 * 256-byte boundary (the kernels' vector loads, the emulator's alignment
 * rule): their offsets and lengths in int32s into off[6] and len[6] (unless
 * NULL) for B sentences and ns, nt source and target tokens; returns the
 * ints the block spans.
 * The offsets depend on the batch's shape only, so a step's CUDA Graph of
 * that shape reads them where its capture did. */
static size_t batch_layout(size_t B, size_t ns, size_t nt, size_t off[6], size_t len[6])
{
    const size_t align = 256 / sizeof(int32_t), n[6] = { ns, nt, nt, B, B, B };
    size_t o = 0;
    for (int k = 0; k < 6; k++) {
        if (off) off[k] = o;
        if (len) len[k] = n[k];
        o += (n[k] + align - 1) / align * align;
    }
    return o;
}

static void *reserve_alloc(Backend *be, size_t bytes, const char *name, int layer)
{
    void *p = be->alloc(be, bytes);
    if (!p) reserve_fail(be, bytes, name, layer);
    return p;
}

/* n activation elements in the backend's activation type */
static Act reserve_act(Backend *be, size_t n, const char *name, int layer)
{
    Act a = be->alloc_act(be, n);
    if (!a.data) reserve_fail(be, n * dtype_size(be->act_dtype), name, layer);
    return a;
}

size_t model_logits_rows(const ModelConfig *c, size_t nt)
{
    size_t rows = c->logits_chunk > 0 ? (size_t)c->logits_chunk : MODEL_LOGITS_ELEMS / (size_t)c->vocab_size;
    if (rows < 1) rows = 1;
    return rows < nt ? rows : nt;
}

/* X(): activations, typed views in the backend's activation type (bf16 on
 * CUDA with precision=bf16, see ops.h alloc_act); A(): fp32/int32 storage:
 * LayerNorm row statistics (mean, rstd), per-row losses, token ids and
 * lengths; M(): the feed-forward ReLU's mask where the backend keeps one.
 * Each names its buffer and layer (-1: none) if it fails; they expect `be`
 * and `layer` in scope. */
#define A(p, n) ((p) = reserve_alloc(be, (n) * sizeof(float), #p, layer))
#define X(p, n) ((p) = reserve_act(be, (n), #p, layer))
#define M(p, r, c) \
    ((p) = be->relu_mask_bytes ? reserve_alloc(be, be->relu_mask_bytes(be, (int)(r), (int)(c)), #p, layer) : NULL)

/* one encoder and one decoder layer's activations for ns source and nt
 * target rows and the three attention-probability sizes */
static void reserve_layer(Model *m, int layer, size_t ns, size_t nt, size_t pss, size_t ptt, size_t pts)
{
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    size_t h = c->n_heads, d = c->d_model, dff = c->d_ff, hk = h * c->d_k, hv = h * c->d_v;
    size_t w3 = 2 * hk + hv, w2 = hk + hv;
    LayerActs *enc = &m->enc[layer];
    X(enc->qkv, ns * w3); X(enc->P, pss); A(enc->Pst, ns * h * 2); X(enc->ctx, ns * hv);
    X(enc->r1, ns * d); A(enc->m1, ns); A(enc->s1, ns); X(enc->x1, ns * d);
    X(enc->hid, ns * dff); M(enc->relu_mask, ns, dff);
    X(enc->r3, ns * d); A(enc->m3, ns); A(enc->s3, ns); X(enc->x3, ns * d);
    LayerActs *dec = &m->dec[layer];
    X(dec->qkv, nt * w3); X(dec->P, ptt); A(dec->Pst, nt * h * 2); X(dec->ctx, nt * hv);
    X(dec->r1, nt * d); A(dec->m1, nt); A(dec->s1, nt); X(dec->x1, nt * d);
    X(dec->q2, nt * hk); X(dec->kv2, ns * w2); X(dec->P2, pts); A(dec->P2st, nt * h * 2); X(dec->ctx2, nt * hv);
    X(dec->r2, nt * d); A(dec->m2, nt); A(dec->s2, nt); X(dec->x2, nt * d);
    X(dec->hid, nt * dff); M(dec->relu_mask, nt, dff);
    X(dec->r3, nt * d); A(dec->m3, nt); A(dec->s3, nt); X(dec->x3, nt * d);
}

/* the buffers every layer shares: embeddings, logits, gradient scratch,
 * the batch on the device */
static void reserve_shared(Model *m, size_t B, size_t ns, size_t nt, size_t pss, size_t ptt, size_t pts)
{
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    int layer = -1;
    size_t h = c->n_heads, d = c->d_model, dff = c->d_ff, hk = h * c->d_k, hv = h * c->d_v, V = c->vocab_size;
    size_t w3 = 2 * hk + hv, nmax = ns > nt ? ns : nt;
    X(m->enc_in, ns * d); X(m->dec_in, nt * d);
    /* the logits of one chunk of target rows (model_output_layer), not of
     * all nt: at 25,000 tokens and V = 37000 all would be 1.85 GB in bf16 */
    m->logits_rows = model_logits_rows(c, nt);
    X(m->logits, m->logits_rows * V); A(m->row_loss, nt); A(m->row_nll, nt);
    X(m->g_x, nmax * d); X(m->g_sub, nmax * d);
    X(m->g_big, nmax * w3 + nt * hk);   /* dqkv, or dkv (encoder side) followed by dq */
    X(m->g_ctx, nmax * hv); X(m->g_P, max3(pss, ptt, pts)); X(m->g_hid, nmax * dff);
    /* dL/d(encoder output) sums the cross-attention K/V gradients of all
     * decoder layers (beta = 1 GEMMs): fp32 in every precision, so that
     * the running sum is rounded once (into g_x, for the encoder's
     * backward), not once per decoder layer as bf16 storage would */
    m->g_enc = act_f32(reserve_alloc(be, ns * d * sizeof(float), "m->g_enc", layer));
    size_t batch_ints = batch_layout(B, ns, nt, NULL, NULL);
    A(m->d_batch, batch_ints);
    m->h_row_loss = xmalloc(nt * sizeof(float));
    m->h_row_nll = xmalloc(nt * sizeof(float));
    m->h_batch = xcalloc(batch_ints, sizeof(int32_t));   /* the gaps between the arrays: defined bytes */
}
#undef A
#undef X
#undef M

void model_reserve(Model *m, int B, int S, int T)
{
    size_t h = m->cfg.n_heads;
    size_t ns = (size_t)B * S, nt = (size_t)B * T;
    size_t pss = h * B * S * S, ptt = h * B * T * T, pts = h * B * T * S;
    if (ns <= m->cap_ns && nt <= m->cap_nt && pss <= m->cap_pss && ptt <= m->cap_ptt && pts <= m->cap_pts
        && (size_t)B <= m->cap_B)
        return;
    /* grow (rare: only when a batch shape exceeds every earlier one) */
    free_acts(m);
    if (ns < m->cap_ns) ns = m->cap_ns;
    if (nt < m->cap_nt) nt = m->cap_nt;
    if (pss < m->cap_pss) pss = m->cap_pss;
    if (ptt < m->cap_ptt) ptt = m->cap_ptt;
    if (pts < m->cap_pts) pts = m->cap_pts;
    if ((size_t)B < m->cap_B) B = (int)m->cap_B;
    m->cap_ns = ns; m->cap_nt = nt; m->cap_pss = pss; m->cap_ptt = ptt; m->cap_pts = pts; m->cap_B = B;
    for (int layer = 0; layer < m->cfg.n_layers; layer++) reserve_layer(m, layer, ns, nt, pss, ptt, pts);
    reserve_shared(m, (size_t)B, ns, nt, pss, ptt, pts);
}

/* the batch in one host-to-device copy (one launch and one wait for it,
 * not six: issue 44's launch-bound small models) */
void model_upload_batch(Model *m, const Batch *b)
{
    model_reserve(m, b->B, b->S, b->T);
    size_t B = (size_t)b->B, off[6], len[6];
    size_t ints = batch_layout(B, B * (size_t)b->S, B * (size_t)b->T, off, len);
    const int32_t *src[6] = { b->src, b->tgt_in, b->tgt_out, b->src_len, b->tgt_len, (const int32_t *)b->sent_id };
    for (int k = 0; k < 6; k++) memcpy(m->h_batch + off[k], src[k], len[k] * sizeof(int32_t));
    m->B = b->B; m->S = b->S; m->T = b->T;
    m->d_src = m->d_batch + off[0];
    m->d_tgt_in = m->d_batch + off[1];
    m->d_tgt_out = m->d_batch + off[2];
    m->d_src_len = m->d_batch + off[3];
    m->d_tgt_len = m->d_batch + off[4];
    m->d_sent_id = (uint32_t *)(m->d_batch + off[5]);
    m->be->upload(m->be, m->d_batch, m->h_batch, ints * sizeof(int32_t));
}

/* --------------------------------------------------------------- dropout */

enum { SITE_SRC_EMB = 1, SITE_TGT_EMB = 2, SITE_ENC = 16, SITE_DEC = 16 + 4 * 256 };

static DropoutKey drop_key(const Model *m, uint32_t step, uint32_t site)
{
    DropoutKey k = { m->cfg.seed, step, site };
    return k;
}

/* ------------------------------------------------------------- attention */

/* Multi-head attention core: attention.c, for the model's sizes */
static AttnShape attn_shape(const Model *m)
{
    AttnShape s = { m->B, m->cfg.n_heads, m->cfg.d_k, m->cfg.d_v };
    return s;
}

/* --------------------------------------------------------------- layers */

/* parameters and gradients: fp32; W/GW: the same as GEMM operands */
#define PRM(off) (m->params + (off))
#define GRD(off) (m->grads + (off))
#define W(off) act_f32(PRM(off))
#define GW(off) act_f32(GRD(off))

/* x_out = LayerNorm(x + Dropout(FFN(x)))  (eq. 2, section 5.4) */
static void ffn_block_forward(Model *m, const LayerOffsets *L, LayerActs *a, Act x, int rows, int T,
                              float p, DropoutKey key)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int d = c->d_model, dff = c->d_ff;
    Act sub = m->g_sub;   /* scratch in forward */
    be->linear_bias_forward(be, a->hid, x, W(L->ffn.W1), PRM(L->ffn.b1), rows, d, dff, 1, a->relu_mask);
    be->linear_bias_forward(be, sub, a->hid, W(L->ffn.W2), PRM(L->ffn.b2), rows, dff, d, 0, NULL);
    be->residual_ln_forward(be, a->x3, a->r3, a->m3, a->s3, x, sub, PRM(L->ln3.gamma), PRM(L->ln3.beta),
                            rows, d, c->ln_eps, p, key, m->d_sent_id, T);
}

/* in: m->g_x = dL/dx_out; out: m->g_x = dL/dx (input of the block) */
static void ffn_block_backward(Model *m, const LayerOffsets *L, LayerActs *a, Act x, int rows, int T,
                               float p, DropoutKey key)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int d = c->d_model, dff = c->d_ff;
    /* b2's gradient, the column sums of dsub, comes with the LayerNorm's */
    be->residual_ln_backward(be, m->g_x, m->g_sub, GRD(L->ln3.gamma), GRD(L->ln3.beta), GRD(L->ffn.b2), m->g_x,
                             a->r3, a->m3, a->s3, PRM(L->ln3.gamma), rows, d, p, key, m->d_sent_id, T);
    be->gemm(be, 1, 0, d, dff, rows, 1.0f, m->g_sub, d, a->hid, dff, 1.0f, GW(L->ffn.W2), dff);
    be->linear_relu_backward(be, m->g_hid, GRD(L->ffn.b1), m->g_sub, W(L->ffn.W2), a->hid, a->relu_mask, rows, dff,
                             d);
    be->gemm(be, 1, 0, dff, d, rows, 1.0f, m->g_hid, dff, x, d, 1.0f, GW(L->ffn.W1), d);
    be->gemm(be, 0, 0, rows, d, dff, 1.0f, m->g_hid, dff, W(L->ffn.W1), d, 1.0f, m->g_x, d);
}

/* ctx W_o^T, with ctx's heads scaled by their gates first when the model
 * has gates (the gated ctx goes to scratch; the saved ctx stays ungated for
 * the gates' gradient) */
static void attn_output_forward(Model *m, const float *gate, Act ctx, Act scratch, size_t Wo, Act out, int rows)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int d = c->d_model, hv = c->n_heads * c->d_v;
    if (gate) {
        be->head_gate_forward(be, scratch, ctx, gate, rows, c->n_heads, c->d_v);
        ctx = scratch;
    }
    be->gemm(be, 0, 1, rows, d, hv, 1.0f, ctx, hv, W(Wo), hv, 0.0f, out, d);
}

void model_attn_output(Model *m, int kind, int layer, Act ctx, Act scratch, size_t Wo, Act out, int rows)
{
    attn_output_forward(m, layer_gates(m, kind, layer), ctx, scratch, Wo, out, rows);
}

/* Backward of attn_output_forward from dout (m->g_sub): dW_o += dout^T
 * gate(ctx); m->g_ctx = gate * (dout W_o), and dgate += the heads' sums of
 * (dout W_o) * ctx when dgate is not NULL */
static void attn_output_backward(Model *m, const float *gate, float *dgate, Act ctx, size_t Wo, int rows)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int d = c->d_model, hv = c->n_heads * c->d_v;
    Act gated = ctx;
    if (gate) {   /* the forward's gated ctx, recomputed in g_ctx before g_ctx is overwritten */
        be->head_gate_forward(be, m->g_ctx, ctx, gate, rows, c->n_heads, c->d_v);
        gated = m->g_ctx;
    }
    be->gemm(be, 1, 0, d, hv, rows, 1.0f, m->g_sub, d, gated, hv, 1.0f, GW(Wo), hv);
    be->gemm(be, 0, 0, rows, hv, d, 1.0f, m->g_sub, d, W(Wo), hv, 0.0f, m->g_ctx, hv);
    if (gate) be->head_gate_backward(be, dgate, m->g_ctx, ctx, gate, rows, c->n_heads, c->d_v);
}

/* x1 = LayerNorm(x + Dropout(SelfAttention(x)))  (section 3.2.3) */
static void self_attn_block_forward(Model *m, const LayerOffsets *L, LayerActs *a, Act x, int T,
                                    const int32_t *key_len, int causal, const float *gate, float p, DropoutKey key)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int rows = m->B * T, d = c->d_model, hk = c->n_heads * c->d_k, hv = c->n_heads * c->d_v, w3 = 2 * hk + hv;
    be->gemm(be, 0, 1, rows, w3, d, 1.0f, x, d, W(L->self_attn.Wq), d, 0.0f, a->qkv, w3);
    a->P_kept = attention_core_forward(m->be, attn_shape(m), a->qkv, w3, act_at(a->qkv, hk), act_at(a->qkv, 2 * hk),
                                       w3, a->P, m->attn_stats ? a->Pst : NULL, a->ctx, T, T, key_len, causal);
    attn_output_forward(m, gate, a->ctx, m->g_ctx, L->self_attn.Wo, m->g_sub, rows);
    be->residual_ln_forward(be, a->x1, a->r1, a->m1, a->s1, x, m->g_sub, PRM(L->ln1.gamma), PRM(L->ln1.beta),
                            rows, d, c->ln_eps, p, key, m->d_sent_id, T);
}

static void self_attn_block_backward(Model *m, const LayerOffsets *L, LayerActs *a, Act x, int T,
                                     const int32_t *key_len, int causal, const float *gate, float *dgate, float p,
                                     DropoutKey key)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int rows = m->B * T, d = c->d_model, hk = c->n_heads * c->d_k, w3 = 2 * hk + c->n_heads * c->d_v;
    be->residual_ln_backward(be, m->g_x, m->g_sub, GRD(L->ln1.gamma), GRD(L->ln1.beta), NULL, m->g_x, a->r1,
                             a->m1, a->s1, PRM(L->ln1.gamma), rows, d, p, key, m->d_sent_id, T);
    attn_output_backward(m, gate, dgate, a->ctx, L->self_attn.Wo, rows);
    Act dqkv = m->g_big;
    attention_core_backward(m->be, attn_shape(m), a->qkv, w3, act_at(a->qkv, hk), act_at(a->qkv, 2 * hk), w3,
                            a->P, a->P_kept ? NULL : a->Pst, key_len, causal, m->g_P, m->g_ctx, dqkv,
                            act_at(dqkv, hk), act_at(dqkv, 2 * hk), T, T);
    be->gemm(be, 1, 0, w3, d, rows, 1.0f, dqkv, w3, x, d, 1.0f, GW(L->self_attn.Wq), d);
    be->gemm(be, 0, 0, rows, d, w3, 1.0f, dqkv, w3, W(L->self_attn.Wq), d, 1.0f, m->g_x, d);
}

/* x2 = LayerNorm(x1 + Dropout(Attention(Q = x1, K = V = encoder output))) */
static void cross_attn_block_forward(Model *m, const LayerOffsets *L, LayerActs *a, Act enc_out,
                                     const float *gate, float p, DropoutKey key)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int T = m->T, S = m->S, nt = m->B * T, ns = m->B * S, d = c->d_model;
    int hk = c->n_heads * c->d_k, hv = c->n_heads * c->d_v, w2 = hk + hv;
    be->gemm(be, 0, 1, nt, hk, d, 1.0f, a->x1, d, W(L->cross_attn.Wq), d, 0.0f, a->q2, hk);
    be->gemm(be, 0, 1, ns, w2, d, 1.0f, enc_out, d, W(L->cross_attn.Wk), d, 0.0f, a->kv2, w2);
    a->P2_kept = attention_core_forward(m->be, attn_shape(m), a->q2, hk, a->kv2, act_at(a->kv2, hk), w2, a->P2,
                                        m->attn_stats ? a->P2st : NULL, a->ctx2, T, S, m->d_src_len, 0);
    attn_output_forward(m, gate, a->ctx2, m->g_ctx, L->cross_attn.Wo, m->g_sub, nt);
    be->residual_ln_forward(be, a->x2, a->r2, a->m2, a->s2, a->x1, m->g_sub, PRM(L->ln2.gamma), PRM(L->ln2.beta),
                            nt, d, c->ln_eps, p, key, m->d_sent_id, T);
}

static void cross_attn_block_backward(Model *m, const LayerOffsets *L, LayerActs *a, Act enc_out,
                                      const float *gate, float *dgate, float p, DropoutKey key)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int T = m->T, S = m->S, nt = m->B * T, ns = m->B * S, d = c->d_model;
    int hk = c->n_heads * c->d_k, hv = c->n_heads * c->d_v, w2 = hk + hv;
    be->residual_ln_backward(be, m->g_x, m->g_sub, GRD(L->ln2.gamma), GRD(L->ln2.beta), NULL, m->g_x, a->r2,
                             a->m2, a->s2, PRM(L->ln2.gamma), nt, d, p, key, m->d_sent_id, T);
    attn_output_backward(m, gate, dgate, a->ctx2, L->cross_attn.Wo, nt);
    Act dkv = m->g_big, dq = act_at(m->g_big, (size_t)ns * w2);
    attention_core_backward(m->be, attn_shape(m), a->q2, hk, a->kv2, act_at(a->kv2, hk), w2, a->P2,
                            a->P2_kept ? NULL : a->P2st, m->d_src_len, 0, m->g_P, m->g_ctx, dq, dkv,
                            act_at(dkv, hk), T, S);
    be->gemm(be, 1, 0, hk, d, nt, 1.0f, dq, hk, a->x1, d, 1.0f, GW(L->cross_attn.Wq), d);
    be->gemm(be, 0, 0, nt, d, hk, 1.0f, dq, hk, W(L->cross_attn.Wq), d, 1.0f, m->g_x, d);
    be->gemm(be, 1, 0, w2, d, ns, 1.0f, dkv, w2, enc_out, d, 1.0f, GW(L->cross_attn.Wk), d);
    be->gemm(be, 0, 0, ns, d, w2, 1.0f, dkv, w2, W(L->cross_attn.Wk), d, 1.0f, m->g_enc, d);
}

/* ---------------------------------------------------------- whole model */

static float pdrop(const Model *m, int train) { return train ? m->cfg.dropout : 0.0f; }

const float *model_pos_table(const Model *m)
{
    return m->pt.has_pos ? m->params + m->pt.pos_embedding : m->sinusoid;
}

int model_positions(const Model *m)
{
    return m->pt.has_pos ? m->cfg.max_len : 2 * m->cfg.max_len;
}

Act model_encode(Model *m, int train, uint32_t step)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int S = m->S, ns = m->B * S;
    float p = pdrop(m, train);
    be->embed_forward(be, m->enc_in, PRM(m->pt.embedding), model_pos_table(m), m->d_src, m->d_sent_id, m->B, S,
                      c->d_model, sqrtf((float)c->d_model), 0, p, drop_key(m, step, SITE_SRC_EMB));
    Act x = m->enc_in;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerOffsets *L = &m->pt.enc[l];
        LayerActs *a = &m->enc[l];
        self_attn_block_forward(m, L, a, x, S, m->d_src_len, 0, layer_gates(m, HEAD_ENC, l), p,
                                drop_key(m, step, SITE_ENC + 4 * l));
        ffn_block_forward(m, L, a, a->x1, ns, S, p, drop_key(m, step, SITE_ENC + 4 * l + 2));
        x = a->x3;
    }
    return x;
}

Act model_decode(Model *m, Act enc_out, int train, uint32_t step)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int T = m->T, nt = m->B * T;
    float p = pdrop(m, train);
    be->embed_forward(be, m->dec_in, PRM(m->pt.embedding), model_pos_table(m), m->d_tgt_in, m->d_sent_id, m->B, T,
                      c->d_model, sqrtf((float)c->d_model), 0, p, drop_key(m, step, SITE_TGT_EMB));
    Act x = m->dec_in;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerOffsets *L = &m->pt.dec[l];
        LayerActs *a = &m->dec[l];
        self_attn_block_forward(m, L, a, x, T, m->d_tgt_len, 1, layer_gates(m, HEAD_DEC_SELF, l), p,
                                drop_key(m, step, SITE_DEC + 4 * l));
        cross_attn_block_forward(m, L, a, enc_out, layer_gates(m, HEAD_CROSS, l), p,
                                 drop_key(m, step, SITE_DEC + 4 * l + 1));
        ffn_block_forward(m, L, a, a->x2, nt, T, p, drop_key(m, step, SITE_DEC + 4 * l + 2));
        x = a->x3;
    }
    return x;
}

/* The pre-softmax linear transformation with the shared embedding E
 * (section 3.4), the label-smoothed cross-entropy (5.4) and, with
 * do_backward, their gradients: dE += dlogits^T y and g_x = dlogits E.
 * Chunk by chunk of m->logits_rows target rows, so that only [rows, V]
 * logits exist, not [nt, V] (the step's largest activation): each row's
 * softmax needs only its own row, so each row's loss and g_x are the sums
 * of one chunk (a GEMM of another shape may round them otherwise); dE's
 * sum over the rows is taken chunk by chunk (beta = 1). */
static void model_output_layer(Model *m, Act y, int nt, int do_backward)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int d = c->d_model, V = c->vocab_size, rows = (int)m->logits_rows;
    Act E = W(m->pt.embedding);
    Act dE = do_backward ? act_f32(GRD(m->pt.embedding)) : act_none();   /* no gradients in eval */
    float grad_scale = do_backward ? m->loss_scale : 0.0f;
    for (int r0 = 0; r0 < nt; r0 += rows) {
        int n = nt - r0 < rows ? nt - r0 : rows;
        Act y_c = act_at(y, (size_t)r0 * d);
        be->gemm(be, 0, 1, n, V, d, 1.0f, y_c, d, E, d, 0.0f, m->logits, V);
        be->xent_forward_backward(be, m->logits, m->d_tgt_out + r0, n, V, c->label_smoothing, grad_scale,
                                  m->row_loss + r0, m->row_nll + r0);
        if (!do_backward) continue;
        be->gemm(be, 1, 0, V, d, n, 1.0f, m->logits, V, y_c, d, 1.0f, dE, d);
        be->gemm(be, 0, 0, n, d, V, 1.0f, m->logits, V, E, d, 0.0f, act_at(m->g_x, (size_t)r0 * d), d);
    }
}

static LossStats sum_row_losses(Model *m, const Batch *b)
{
    int nt = m->B * m->T;
    m->be->download(m->be, m->h_row_loss, m->row_loss, sizeof(float) * nt);
    m->be->download(m->be, m->h_row_nll, m->row_nll, sizeof(float) * nt);
    LossStats st = { 0, 0, b->n_tgt_tokens };
    for (int i = 0; i < nt; i++) {   /* in order: deterministic */
        st.loss_sum += m->h_row_loss[i];
        st.nll_sum += m->h_row_nll[i];
    }
    return st;
}

/* CUDA Graphs (ops.h graph_begin; cuda/step_graph.cuh) of a training
 * step's forward and backward: the key holds what the step's device calls
 * depend on besides the batch's contents (uploaded before) and the step
 * (which the backend passes through device memory): the shape, the loss
 * scale (xent's gradient scale), whether the gradient hook and the head
 * gates run, and which model.  1 if the step runs under graphs. */
static int step_graph_begin(Model *m, uint32_t step, int train, int do_backward, GradReadyFn ready)
{
    Backend *be = m->be;
    if (!be->graph_begin || be->graph_shapes <= 0 || !train || !do_backward) return 0;
    uint32_t scale;
    memcpy(&scale, &m->loss_scale, sizeof scale);
    int64_t key[] = { m->B, m->S, m->T, ready != NULL, scale, m->gates != NULL, m->gate_grad != NULL,
                      (int64_t)(intptr_t)m->params };
    be->graph_begin(be, key, (int)(sizeof key / sizeof key[0]), step);
    return 1;
}

/* gradients of [0, hi) are final: the gradient hook, which may start an
 * allreduce, runs between two of the step graph's segments */
static void grads_ready(Model *m, int graphed, GradReadyFn ready, void *ready_ctx, size_t hi)
{
    Backend *be = m->be;
    if (!ready) return;
    if (be->defer_sums) be->defer_sums(be, 0);   /* the pending column sums: the hook reads the gradients */
    if (graphed) be->graph_break(be);
    ready(ready_ctx, hi);
    if (be->defer_sums && hi < m->pt.total) be->defer_sums(be, 1);
}

LossStats model_forward_backward(Model *m, const Batch *b, uint32_t step, int train, int do_backward,
                                 GradReadyFn ready, void *ready_ctx)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    model_upload_batch(m, b);
    int N = c->n_layers, T = m->T, S = m->S, nt = m->B * T, ns = m->B * S, d = c->d_model, V = c->vocab_size;
    float p = pdrop(m, train);
    int graphed = step_graph_begin(m, step, train, do_backward, ready);
    m->attn_stats = do_backward;   /* a backward follows: the weights may be recomputed there (attention.h) */
    Act enc_out = model_encode(m, train, step);
    Act y = model_decode(m, enc_out, train, step);
    m->attn_stats = 0;   /* other forwards (the attention maps' among them) keep P */

    model_output_layer(m, y, nt, do_backward);
    /* the per-row losses are read back only after backward has been issued:
     * reading them here would make an asynchronous backend (CUDA) drain its
     * queue between forward and backward */
    if (!do_backward) return sum_row_losses(m, b);

    float *dE = GRD(m->pt.embedding);
    float *dpos = m->pt.has_pos ? GRD(m->pt.pos_embedding) : NULL;
    if (be->defer_sums) be->defer_sums(be, 1);   /* released before each gradient hook and the source embedding */
    be->zero_act(be, m->g_enc, (size_t)ns * d);
    for (int l = N - 1; l >= 0; l--) {
        const LayerOffsets *L = &m->pt.dec[l];
        LayerActs *a = &m->dec[l];
        Act x = l ? m->dec[l - 1].x3 : m->dec_in;
        ffn_block_backward(m, L, a, a->x2, nt, T, p, drop_key(m, step, SITE_DEC + 4 * l + 2));
        cross_attn_block_backward(m, L, a, enc_out, layer_gates(m, HEAD_CROSS, l), layer_gate_grad(m, HEAD_CROSS, l), p,
                                  drop_key(m, step, SITE_DEC + 4 * l + 1));
        self_attn_block_backward(m, L, a, x, T, m->d_tgt_len, 1, layer_gates(m, HEAD_DEC_SELF, l),
                                 layer_gate_grad(m, HEAD_DEC_SELF, l), p, drop_key(m, step, SITE_DEC + 4 * l));
        grads_ready(m, graphed, ready, ready_ctx, l ? m->pt.dec[l - 1].self_attn.Wq : m->pt.enc_begin);
    }
    be->embed_backward(be, dE, dpos, m->g_x, m->d_tgt_in, b->tgt_in, m->d_sent_id, m->B, T, d, V, sqrtf((float)d), p,
                       drop_key(m, step, SITE_TGT_EMB));
    be->copy_act(be, m->g_x, m->g_enc, (size_t)ns * d);
    for (int l = N - 1; l >= 0; l--) {
        const LayerOffsets *L = &m->pt.enc[l];
        LayerActs *a = &m->enc[l];
        Act x = l ? m->enc[l - 1].x3 : m->enc_in;
        ffn_block_backward(m, L, a, a->x1, ns, S, p, drop_key(m, step, SITE_ENC + 4 * l + 2));
        self_attn_block_backward(m, L, a, x, S, m->d_src_len, 0, layer_gates(m, HEAD_ENC, l),
                                 layer_gate_grad(m, HEAD_ENC, l), p, drop_key(m, step, SITE_ENC + 4 * l));
        grads_ready(m, graphed, ready, ready_ctx, l ? m->pt.enc[l - 1].self_attn.Wq : m->pt.emb_begin);
    }
    /* the last column sum is done: release them here, in the step graph's
     * segment before the source embedding's eager one */
    if (be->defer_sums) be->defer_sums(be, 0);
    be->embed_backward(be, dE, dpos, m->g_x, m->d_src, b->src, m->d_sent_id, m->B, S, d, V, sqrtf((float)d), p,
                       drop_key(m, step, SITE_SRC_EMB));
    grads_ready(m, graphed, ready, ready_ctx, m->pt.total);
    if (graphed) be->graph_end(be);
    return sum_row_losses(m, b);
}

void model_adam_step(Model *m, int step, float grad_scale)
{
    const ModelConfig *c = &m->cfg;
    m->be->adam(m->be, m->params, m->grads, m->adam_m, m->adam_v, m->pt.total, model_lrate(c, step),
                c->adam_beta1, c->adam_beta2, c->adam_eps, step, grad_scale);
}
