/* Head gates (issue #23, Michel et al. 2019): each head's output is
 * multiplied by a gate xi_h before W^O.
 *
 * 1. Gates at 1 leave the model bitwise unchanged: loss and every parameter
 *    gradient of the gated path equal those of the plain model.
 * 2. dL/dxi_h matches central differences of the loss, with gates away
 *    from 1 (some 0), dropout and label smoothing on, in every kind of
 *    attention (encoder self, decoder self, encoder-decoder).
 * 3. An independent identity: scaling head h's gate by t is scaling head
 *    h's columns of W_o by t, so xi_h * dL/dxi_h = sum over those columns
 *    of W_o * dL/dW_o (the W_o gradient is checked by test_grad_model).
 * 4. Masking every head of a layer gives the loss of that layer's W_o set
 *    to zero, bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "config.h"
#include "gradcheck.h"
#include "gradcheck_model.h"
#include "head_mask.h"
#include "model.h"
#include "util.h"

#define STEP 3
#define FD_STEP 2e-3

static Backend *be;

static void small_config(Config *cfg)
{
    config_defaults(cfg);
    cfg->n_layers = 2;
    cfg->d_model = 8;
    cfg->n_heads = 3;
    cfg->d_k = 3;
    cfg->d_v = 5;   /* d_k != d_v != d_model/h (section 3.2.2) */
    cfg->d_ff = 12;
    cfg->vocab_size = 11;
    cfg->max_len = 10;
    cfg->dropout = 0.2f;
    cfg->label_smoothing = 0.1f;
    cfg->seed = 11;
}

/* summed training loss; with grads != NULL also the parameter gradients */
static double loss_and_grads(Model *m, const Batch *b, float *grads, uint64_t *pattern)
{
    if (grads) be->zero(be, m->grads, sizeof(float) * m->pt.total);
    double L = model_forward_backward(m, b, STEP, 1, grads != NULL, NULL, NULL).loss_sum;
    if (grads) be->download(be, grads, m->grads, sizeof(float) * m->pt.total);
    if (pattern) *pattern = gc_relu_pattern(be, m);
    return L;
}

/* 1: the gated path with gates at 1 against the plain model */
static void check_unit_gates(Model *m, const Batch *b)
{
    size_t P = m->pt.total;
    float *g0 = malloc(sizeof(float) * P), *g1 = malloc(sizeof(float) * P);
    double L0 = loss_and_grads(m, b, g0, NULL);
    model_track_gate_grads(m);   /* gates at 1, gate ops on */
    double L1 = loss_and_grads(m, b, g1, NULL);
    gc_checks++;
    if (L0 != L1 || memcmp(g0, g1, sizeof(float) * P)) {
        fprintf(stderr, "FAIL gates at 1 change the model: loss %.9g vs %.9g\n", L0, L1);
        gc_failures++;
    }
    printf("gates at 1: loss %.6f and %zu gradients bitwise equal to the plain model\n", L1, P);
    free(g0);
    free(g1);
}

/* 2 and 3, at the gates xi (host) */
static void check_gate_gradient(Model *m, const Batch *b, float *xi, int n)
{
    const ModelConfig *c = &m->cfg;
    float *dxi = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * m->pt.total);
    float *W = malloc(sizeof(float) * m->pt.total);
    model_set_head_gates(m, xi);
    model_track_gate_grads(m);
    loss_and_grads(m, b, g, NULL);
    be->download(be, dxi, m->gate_grad, sizeof(float) * n);
    be->download(be, W, m->params, sizeof(float) * m->pt.total);
    double worst = 0;
    int kinks = 0;
    for (int i = 0; i < n; i++) {
        double fd = 0, h = FD_STEP;
        int ok = 0;
        for (int attempt = 0; attempt < 4 && !ok; attempt++, h /= 4) {
            uint64_t pp, pm;
            float x0 = xi[i];
            xi[i] = (float)(x0 + h); model_set_head_gates(m, xi);
            double Lp = loss_and_grads(m, b, NULL, &pp);
            xi[i] = (float)(x0 - h); model_set_head_gates(m, xi);
            double Lm = loss_and_grads(m, b, NULL, &pm);
            xi[i] = x0;
            ok = pp == pm;
            kinks += !ok;
            fd = (Lp - Lm) / (2 * h);
        }
        model_set_head_gates(m, xi);
        if (ok) worst = fmax(worst, gc_compare("dL/dxi (central difference)", i, dxi[i], fd, 1e-2, 2e-3));
    }
    /* 3: xi_h dL/dxi_h = sum of W_o * dL/dW_o over head h's d_v columns */
    int N = c->n_layers, nh = c->n_heads, dv = c->d_v, hv = nh * dv;
    for (int kind = 0; kind < HEAD_KINDS; kind++)
        for (int l = 0; l < N; l++) {
            const LayerOffsets *L = kind == HEAD_ENC ? &m->pt.enc[l] : &m->pt.dec[l];
            size_t Wo = kind == HEAD_CROSS ? L->cross_attn.Wo : L->self_attn.Wo;
            for (int hd = 0; hd < nh; hd++) {
                double s = 0;
                for (int r = 0; r < c->d_model; r++)
                    for (int j = hd * dv; j < (hd + 1) * dv; j++) s += (double)W[Wo + (size_t)r * hv + j] * g[Wo + (size_t)r * hv + j];
                size_t i = head_index(kind, l, hd, N, nh);
                gc_compare("xi * dL/dxi vs sum W_o * dL/dW_o", (long)i, (double)xi[i] * dxi[i], s, 1e-4, 1e-6);
            }
        }
    printf("dL/dxi: %d gates against central differences (worst |diff| %.2e, %d kink retries) and W_o identity\n", n,
           worst, kinks);
    free(dxi); free(g); free(W);
}

/* 4: every head of decoder layer 1's cross-attention masked = its W_o zeroed */
static void check_mask_is_zero_wo(Model *m, const Batch *b)
{
    if (model_mask_heads(m, "cross:1:*", "test")) exit(1);
    double Lmask = model_forward_backward(m, b, STEP, 0, 0, NULL, NULL).loss_sum;
    if (model_mask_heads(m, "", "test")) exit(1);
    size_t Wo = m->pt.dec[1].cross_attn.Wo, n = (size_t)m->cfg.d_model * m->cfg.n_heads * m->cfg.d_v;
    be->zero(be, m->params + Wo, sizeof(float) * n);
    double Lzero = model_forward_backward(m, b, STEP, 0, 0, NULL, NULL).loss_sum;
    gc_checks++;
    if (Lmask != Lzero) {
        fprintf(stderr, "FAIL cross:1:* masked loss %.9g, W_o zeroed %.9g\n", Lmask, Lzero);
        gc_failures++;
    }
    printf("mask_heads=cross:1:* gives the loss of W_o zeroed: %.6f\n", Lmask);
}

int main(void)
{
    be = backend_cpu_create(1);
    Config cfg;
    small_config(&cfg);
    Model m;
    if (model_init(&m, &cfg.model, be)) { fprintf(stderr, "model_init failed\n"); return 1; }
    static const int src_len[3] = { 5, 2, 7 }, tgt_len[3] = { 4, 6, 2 };
    Corpus corp;
    gc_make_corpus(&corp, src_len, tgt_len, 3);
    Batch b = {0};
    int idx[3] = { 0, 1, 2 };
    batch_build(&b, &corp, idx, 3, cfg.max_len);

    check_unit_gates(&m, &b);
    int n = HEAD_KINDS * cfg.n_layers * cfg.n_heads;
    float *xi = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) xi[i] = i % 5 == 4 ? 0.0f : (float)(1.0 + 0.6 * gc_rand());
    check_gate_gradient(&m, &b, xi, n);
    check_mask_is_zero_wo(&m, &b);
    free(xi);
    batch_free(&b);
    corpus_free(&corp);
    model_free(&m);
    be->destroy(be);
    return gc_report("test_grad_heads");
}
