/* Finite-difference check of the whole model: the gradient that
 * model_forward_backward accumulates must be the derivative of the summed
 * label-smoothed loss it returns, for every parameter tensor.
 *
 * Tiny config with d_k != d_v != d_model/h (section 3.2.2 does not tie them),
 * dropout on (masks are a pure function of (seed, step, site, sentence,
 * position, feature), so the perturbed forwards see the same mask), label
 * smoothing on, a batch with padding in source and target, and both
 * sinusoidal and learned positions (Table 3 row E), the latter with the
 * output projection and cross-entropy in chunks of 4 target rows.
 *
 * Per tensor: central differences of a few sampled elements, and of the
 * directional derivative along a random unit direction over the whole tensor
 * (every element contributes, so a wrong element anywhere shows).  Also:
 * padding must not change anything, i.e. the loss and gradient of the padded
 * batch equal the sums over the sentences run alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "config.h"
#include "gradcheck.h"
#include "gradcheck_model.h"
#include "model.h"
#include "util.h"

#define STEP 5
/* FD step: large enough that float32 rounding of the loss (~1e-6 relative)
 * stays small against the difference, small enough for the curvature */
#define FD_STEP 2e-3

static Backend *be;

typedef struct {
    Model *m;
    Batch *b;
    float *host;     /* host copy of the parameters */
} Ctx;

static double loss_of(Ctx *c, uint64_t *pattern)
{
    Model *m = c->m;
    be->upload(be, m->params, c->host, sizeof(float) * m->pt.total);
    LossStats st = model_forward_backward(m, c->b, STEP, 1, 0, NULL, NULL);
    if (pattern) *pattern = gc_relu_pattern(be, m);
    return st.loss_sum;
}

static int n_kink_retries = 0, n_kink_skips = 0;

/* Central difference of the loss along direction u (n floats of w; u NULL:
 * the single element w[0]), step h shrunk while the two sides lie on
 * different sides of a ReLU kink.  Returns 0 if no kink-free step was found. */
static int central(Ctx *c, float *w, const double *u, size_t n, double h, double *out)
{
    float *w0 = malloc(sizeof(float) * n);
    memcpy(w0, w, sizeof(float) * n);
    int found = 0;
    for (int attempt = 0; attempt < 4 && !found; attempt++, h /= 4) {
        uint64_t pp, pm;
        double dp = 0, dm = 0;
        for (size_t i = 0; i < n; i++) w[i] = (float)(w0[i] + h * (u ? u[i] : 1.0));
        if (!u) dp = (double)w[0] - w0[0];
        double Lp = loss_of(c, &pp);
        for (size_t i = 0; i < n; i++) w[i] = (float)(w0[i] - h * (u ? u[i] : 1.0));
        if (!u) dm = (double)w0[0] - w[0];
        double Lm = loss_of(c, &pm);
        memcpy(w, w0, sizeof(float) * n);
        if (pp != pm) { n_kink_retries++; continue; }
        *out = (Lp - Lm) / (u ? 2 * h : dp + dm);
        found = 1;
    }
    if (!found) n_kink_skips++;
    free(w0);
    return found;
}

static void grads_of(Model *m, const Batch *b, float *g)
{
    be->zero(be, m->grads, sizeof(float) * m->pt.total);
    model_forward_backward(m, b, STEP, 1, 1, NULL, NULL);
    be->download(be, g, m->grads, sizeof(float) * m->pt.total);
}

/* GradReadyFn contract (model.h): when ready(hi) is called, gradients in
 * [0, hi) are final, and hi only grows up to the total */
typedef struct { Model *m; float *snap; size_t last; int calls, bad; } ReadyCheck;

static void ready_cb(void *p, size_t hi)
{
    ReadyCheck *r = p;
    if (hi < r->last || hi > r->m->pt.total) r->bad++;
    else {
        be->download(be, r->snap + r->last, r->m->grads + r->last, sizeof(float) * (hi - r->last));
        r->last = hi;
    }
    r->calls++;
}

static void check_ready(Model *m, const Batch *b, const char *positional)
{
    size_t P = m->pt.total;
    ReadyCheck r = { m, malloc(sizeof(float) * P), 0, 0, 0 };
    float *g = malloc(sizeof(float) * P);
    be->zero(be, m->grads, sizeof(float) * P);
    model_forward_backward(m, b, STEP, 1, 1, ready_cb, &r);
    be->download(be, g, m->grads, sizeof(float) * P);
    gc_checks++;
    if (r.bad || r.last != P || r.calls < 2 * m->cfg.n_layers) {
        fprintf(stderr, "FAIL [%s] ready(): %d calls, %d out of order, last %zu of %zu\n", positional, r.calls, r.bad,
                r.last, P);
        gc_failures++;
    }
    size_t changed = 0;
    for (size_t i = 0; i < r.last; i++) changed += memcmp(&g[i], &r.snap[i], sizeof(float)) != 0;
    if (changed) {
        fprintf(stderr, "FAIL [%s] %zu gradients changed after ready() declared them final\n", positional, changed);
        gc_failures++;
    }
    printf("[%s] ready(): %d calls, gradients final when declared\n", positional, r.calls);
    free(r.snap);
    free(g);
}

/* d_k != d_v != d_model/h (section 3.2.2 does not tie them), dropout and
 * label smoothing on */
static Config tiny_config(const char *positional, int logits_chunk)
{
    Config cfg;
    config_defaults(&cfg);
    cfg.n_layers = 2;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.d_k = 3;
    cfg.d_v = 5;
    cfg.d_ff = 12;
    cfg.vocab_size = 11;
    cfg.max_len = 10;
    cfg.dropout = 0.2f;
    cfg.label_smoothing = 0.1f;
    cfg.seed = 7;
    cfg.logits_chunk = logits_chunk;
    if (config_set(&cfg, "test", 0, "positional", positional)) exit(2);
    return cfg;
}

/* move the LayerNorm gains and all biases away from their initial 1/0 so
 * that their gradients are generic; host receives the parameters */
static void perturb_ones_and_zeros(Model *m, float *host)
{
    size_t P = m->pt.total;
    be->download(be, host, m->params, sizeof(float) * P);
    for (int t = 0; t < m->pt.n; t++) {
        const ParamInfo *pi = &m->pt.t[t];
        if (pi->init == PARAM_INIT_ONE || pi->init == PARAM_INIT_ZERO)
            for (size_t i = 0; i < pi->numel; i++) host[pi->offset + i] += (float)(0.3 * gc_rand());
    }
    be->upload(be, m->params, host, sizeof(float) * P);
}

/* one tensor's gradient gt against central differences: (a) a few sampled
 * elements, (b) the directional derivative along a random unit vector u;
 * returns the worst sampled |analytic - fd| / (1 + max|g|) */
static double check_tensor_fd(Ctx *c, const ParamInfo *pi, const float *gt, const char *positional)
{
    char nm[160];
    float *w = c->host + pi->offset;
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < pi->numel; i++) gmax = fmax(gmax, fabs(gt[i]));
    if (gmax == 0 && strcmp(pi->name, "positional_embedding")) {
        fprintf(stderr, "FAIL %s: gradient is identically zero\n", pi->name);
        gc_failures++;
    }
    for (int k = 0; k < 4; k++) {
        size_t i = (size_t)((gc_rand() + 1) * 0.5 * pi->numel) % pi->numel;
        snprintf(nm, sizeof nm, "[%s] %s", positional, pi->name);
        double fd;
        if (!central(c, &w[i], NULL, 1, FD_STEP, &fd)) continue;
        double e = gc_compare(nm, (long)i, gt[i], fd, 1e-2, 2e-3 * (1 + gmax));
        worst = fmax(worst, e / (1 + gmax));
    }
    double *u = malloc(sizeof(double) * pi->numel), nu = 0, gu = 0;
    for (size_t i = 0; i < pi->numel; i++) { u[i] = gc_rand(); nu += u[i] * u[i]; }
    nu = sqrt(nu);
    for (size_t i = 0; i < pi->numel; i++) { u[i] /= nu; gu += u[i] * gt[i]; }
    double fd;
    snprintf(nm, sizeof nm, "[%s] %s (direction)", positional, pi->name);
    if (central(c, w, u, pi->numel, FD_STEP, &fd)) gc_compare(nm, 0, gu, fd, 1e-2, 2e-3 * (1 + gmax));
    free(u);
    return worst;
}

/* padding invariance: the padded batch's loss L0 and gradient g equal the
 * sums over its sentences run alone (same sentence ids, hence the same
 * dropout masks) */
static void check_padding_invariance(Ctx *c, const Corpus *corp, const int *idx, int n, int max_len, double L0,
                                     const float *g, const char *positional)
{
    Model *m = c->m;
    size_t P = m->pt.total;
    Batch *padded = c->b;
    char nm[160];
    be->upload(be, m->params, c->host, sizeof(float) * P);
    float *gs = calloc(P, sizeof(float)), *g1 = malloc(sizeof(float) * P);
    double Lsum = 0;
    Batch one = {0};
    for (int k = 0; k < n; k++) {
        batch_build(&one, corp, &idx[k], 1, max_len);
        c->b = &one;
        Lsum += loss_of(c, NULL);
        grads_of(m, &one, g1);
        for (size_t i = 0; i < P; i++) gs[i] += g1[i];
    }
    c->b = padded;
    snprintf(nm, sizeof nm, "[%s] padded batch loss vs sentences alone", positional);
    gc_compare(nm, 0, L0, Lsum, 1e-5, 1e-5);
    double gmax = 0;
    for (size_t i = 0; i < P; i++) gmax = fmax(gmax, fabs(g[i]));
    snprintf(nm, sizeof nm, "[%s] padded batch gradient vs sentences alone", positional);
    for (size_t i = 0; i < P; i++) gc_compare(nm, (long)i, g[i], gs[i], 1e-4, 1e-5 * gmax);
    batch_free(&one);
    free(gs); free(g1);
}

static void run(const char *positional, int logits_chunk)
{
    Config cfg = tiny_config(positional, logits_chunk);
    Model m;
    if (model_init(&m, &cfg.model, be)) { fprintf(stderr, "model_init failed\n"); exit(1); }
    size_t P = m.pt.total;
    float *host = malloc(sizeof(float) * P);
    perturb_ones_and_zeros(&m, host);

    /* lengths without EOS/BOS: sources 4, 2, 6; targets 3, 5, 1 */
    static const int src_len[3] = { 4, 2, 6 }, tgt_len[3] = { 3, 5, 1 };
    Corpus corp;
    gc_make_corpus(&corp, src_len, tgt_len, 3);
    Batch b = {0};
    int idx[3] = { 0, 1, 2 };
    batch_build(&b, &corp, idx, 3, cfg.max_len);
    Ctx c = { &m, &b, host };

    float *g = malloc(sizeof(float) * P);
    grads_of(&m, &b, g);
    double L0 = loss_of(&c, NULL);
    printf("[%s] %zu parameters, %d tensors, batch %dx%d -> %dx%d, loss_sum %.6f over %ld tokens\n", positional, P,
           m.pt.n, b.B, b.S, b.B, b.T, L0, b.n_tgt_tokens);

    /* dropout must actually be active: the training loss differs from eval */
    be->upload(be, m.params, host, sizeof(float) * P);
    double Leval = model_forward_backward(&m, &b, STEP, 0, 0, NULL, NULL).loss_sum;
    if (fabs(Leval - L0) < 1e-4) { fprintf(stderr, "FAIL dropout has no effect\n"); gc_failures++; }

    check_ready(&m, &b, positional);
    double worst = 0;
    for (int t = 0; t < m.pt.n; t++)
        worst = fmax(worst, check_tensor_fd(&c, &m.pt.t[t], g + m.pt.t[t].offset, positional));
    printf("[%s] ReLU-kink retries %d, skipped %d\n", positional, n_kink_retries, n_kink_skips);
    printf("[%s] worst sampled |analytic - fd| / (1 + max|g|) = %.2e\n", positional, worst);
    check_padding_invariance(&c, &corp, idx, 3, cfg.max_len, L0, g, positional);

    batch_free(&b);
    corpus_free(&corp);
    free(g); free(host);
    model_free(&m);
}

int main(void)
{
    be = backend_cpu_create(1);
    run("sinusoid", 0);
    /* the pre-softmax projection and cross-entropy in chunks of 4 target
     * rows (model_output_layer): the batch's 18 rows in 5 */
    run("learned", 4);
    be->destroy(be);
    return gc_report("test_grad_model");
}
