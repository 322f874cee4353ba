/* Finite-difference and double-precision checks of every op of ops.h on the
 * CPU backend.  Each op with a backward is checked as: L = sum_i w_i out_i
 * (random weights w, L accumulated in double over the float32 op's output);
 * the backward op fed with dL/dout = w must give the central difference of L
 * with respect to every input element.  GEMMs, Adam and log_softmax have no
 * backward op; they are compared with straightforward double loops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "ops.h"
#include "philox.h"

static Backend *be;

#define RTOL 2e-3
#define ATOL 5e-4
#define H 1e-3
/* LayerNorm sums d float outputs per perturbed input: a larger step keeps
 * their rounding noise below the tolerance (LN is smooth, so the O(h^2)
 * truncation error stays tiny) */
#define H_LN 5e-3

/* ------------------------------------------------------------------ gemm */

/* element (i, j) of op(X) for row-major X with leading dimension ld */
static double at(const float *X, int ld, int trans, int i, int j)
{
    return trans ? X[(size_t)j * ld + i] : X[(size_t)i * ld + j];
}

static void check_gemm(void)
{
    /* all transposes, leading dimensions larger than the rows (as for the
     * packed Q|K|V activations), alpha and beta != 0/1 */
    int M = 5, N = 7, K = 4, pad = 3;
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++) {
            int ar = tA ? K : M, ac = tA ? M : K, br = tB ? N : K, bc = tB ? K : N;
            int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
            float *A = malloc(sizeof(float) * ar * lda), *B = malloc(sizeof(float) * br * ldb);
            float *C = malloc(sizeof(float) * M * ldc), *C0 = malloc(sizeof(float) * M * ldc);
            gc_fill(A, (size_t)ar * lda, 1);
            gc_fill(B, (size_t)br * ldb, 1);
            gc_fill(C0, (size_t)M * ldc, 1);
            memcpy(C, C0, sizeof(float) * M * ldc);
            float alpha = 0.7f, beta = -1.3f;
            be->gemm(be, tA, tB, M, N, K, alpha, act_f32(A), lda, act_f32(B), ldb, beta, act_f32(C), ldc);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < ldc; j++) {
                    double ref = C0[i * ldc + j];
                    if (j < N) {
                        double s = 0;
                        for (int k = 0; k < K; k++) s += at(A, lda, tA, i, k) * at(B, ldb, tB, k, j);
                        ref = alpha * s + beta * ref;
                    }
                    /* columns beyond N (the padding of ldc) must be untouched */
                    gc_compare("gemm", i * ldc + j, C[i * ldc + j], ref, 1e-5, 1e-5);
                }
            free(A); free(B); free(C); free(C0);
        }
}

static void check_gemm_batched(void)
{
    /* the attention layout: outer = sentence, inner = head, heads side by
     * side in the feature dimension (packed Q|K|V rows) */
    int nb = 3, nh = 2, Tq = 4, Tk = 5, dk = 3;
    int ldq = 2 * nh * dk + 1, ldk = ldq;
    for (int tB = 0; tB < 2; tB++) {
        size_t nQ = (size_t)nb * Tq * ldq, nK = (size_t)nb * Tk * ldk, nC = (size_t)nb * nh * Tq * Tk;
        float *Q = malloc(sizeof(float) * nQ), *Kx = malloc(sizeof(float) * nK);
        float *C = malloc(sizeof(float) * nC), *C0 = malloc(sizeof(float) * nC);
        gc_fill(Q, nQ, 1);
        gc_fill(Kx, nK, 1);
        gc_fill(C0, nC, 1);
        memcpy(C, C0, sizeof(float) * nC);
        const float *Kp = Kx + nh * dk;   /* K columns after the Q block */
        if (tB) /* S = Q K^T: [Tq, dk] x [dk, Tk] */
            be->gemm_batched(be, 0, 1, Tq, Tk, dk, 0.5f, act_f32(Q), ldq, (long)Tq * ldq, dk, act_f32((float *)Kp),
                             ldk, (long)Tk * ldk, dk,
                             0.25f, act_f32(C), Tk, (long)nh * Tq * Tk, (long)Tq * Tk, nb, nh);
        else    /* C = Q[:, :Tk-ish] with B = K^T laid out explicitly: use op(B)=B, B [dk, Tk] rows from K^T */
            be->gemm_batched(be, 0, 0, Tq, Tk, dk, 0.5f, act_f32(Q), ldq, (long)Tq * ldq, dk, act_f32((float *)Kp),
                             Tk, (long)dk * Tk + 1, 2,
                             0.25f, act_f32(C), Tk, (long)nh * Tq * Tk, (long)Tq * Tk, nb, nh);
        for (int b = 0; b < nb; b++)
            for (int h = 0; h < nh; h++)
                for (int q = 0; q < Tq; q++)
                    for (int k = 0; k < Tk; k++) {
                        double s = 0;
                        for (int j = 0; j < dk; j++) {
                            double a = Q[(size_t)b * Tq * ldq + (size_t)q * ldq + h * dk + j];
                            double bb = tB ? Kp[(size_t)b * Tk * ldk + (size_t)k * ldk + h * dk + j]
                                           : Kp[(size_t)b * (dk * Tk + 1) + h * 2 + (size_t)j * Tk + k];
                            s += a * bb;
                        }
                        size_t ci = (((size_t)b * nh + h) * Tq + q) * Tk + k;
                        gc_compare("gemm_batched", (long)ci, C[ci], 0.5 * s + 0.25 * C0[ci], 1e-5, 1e-5);
                    }
        free(Q); free(Kx); free(C); free(C0);
    }
}

/* ------------------------------------------------------------------ bias */

typedef struct {
    int rows, cols, relu;
    float *Y0, *bias, *Y, *w;
} BiasCtx;

static double bias_loss(void *p)
{
    BiasCtx *c = p;
    size_t n = (size_t)c->rows * c->cols;
    memcpy(c->Y, c->Y0, sizeof(float) * n);
    be->bias_forward(be, act_f32(c->Y), c->bias, c->rows, c->cols, c->relu);
    double L = 0;
    for (size_t i = 0; i < n; i++) L += (double)c->w[i] * c->Y[i];
    return L;
}

static void check_bias(int relu)
{
    /* cols > 64 exercises the column blocks of the reduction */
    BiasCtx c = { 6, 70, relu, NULL, NULL, NULL, NULL };
    size_t n = (size_t)c.rows * c.cols;
    c.Y0 = malloc(sizeof(float) * n); c.Y = malloc(sizeof(float) * n); c.w = malloc(sizeof(float) * n);
    c.bias = malloc(sizeof(float) * c.cols);
    gc_fill(c.Y0, n, 1); gc_fill(c.bias, c.cols, 0.5); gc_fill(c.w, n, 1);
    /* keep pre-activations away from the ReLU kink by more than the FD step */
    for (size_t i = 0; i < n; i++) {
        float v = c.Y0[i] + c.bias[i % c.cols];
        if (fabsf(v) < 0.05f) c.Y0[i] += v >= 0 ? 0.1f : -0.1f;
    }
    bias_loss(&c);
    /* forward against the definition */
    for (size_t i = 0; i < n; i++) {
        double v = (double)c.Y0[i] + c.bias[i % c.cols];
        if (relu && v < 0) v = 0;
        gc_compare(relu ? "bias_relu_fwd" : "bias_fwd", (long)i, c.Y[i], v, 1e-6, 1e-7);
    }
    float *dY = malloc(sizeof(float) * n), *db = malloc(sizeof(float) * c.cols);
    memcpy(dY, c.w, sizeof(float) * n);
    for (int j = 0; j < c.cols; j++) db[j] = 0.25f;   /* backward accumulates (+=) */
    be->bias_backward(be, act_f32(dY), db, act_f32(c.Y), c.rows, c.cols, relu);
    const char *nY = relu ? "bias_relu_dY" : "bias_dY", *nb = relu ? "bias_relu_db" : "bias_db";
    for (size_t i = 0; i < n; i++) gc_compare(nY, (long)i, dY[i], gc_central(&c.Y0[i], H, bias_loss, &c), RTOL, ATOL);
    for (int j = 0; j < c.cols; j++)
        gc_compare(nb, j, db[j] - 0.25f, gc_central(&c.bias[j], H, bias_loss, &c), RTOL, ATOL);
    free(c.Y0); free(c.Y); free(c.w); free(c.bias); free(dY); free(db);
}

/* --------------------------------------------------------------- softmax */

typedef struct {
    int nb, nh, Tq, Tk, causal, q_offset;
    float scale;
    int32_t *key_len;
    float *S0, *P, *w;
} SmCtx;

static double sm_loss(void *p)
{
    SmCtx *c = p;
    size_t n = (size_t)c->nb * c->nh * c->Tq * c->Tk;
    memcpy(c->P, c->S0, sizeof(float) * n);
    be->softmax_forward(be, act_f32(c->P), c->key_len, c->scale, c->nb, c->nh, c->Tq, c->Tk, c->causal, c->q_offset);
    double L = 0;
    for (size_t i = 0; i < n; i++) L += (double)c->w[i] * c->P[i];
    return L;
}

static void check_softmax(int causal, int q_offset)
{
    int32_t key_len[3] = { 5, 2, 4 };
    SmCtx c = { 3, 2, causal ? 5 : 3, 5, causal, q_offset, 0.6f, key_len, NULL, NULL, NULL };
    size_t n = (size_t)c.nb * c.nh * c.Tq * c.Tk;
    c.S0 = malloc(sizeof(float) * n); c.P = malloc(sizeof(float) * n); c.w = malloc(sizeof(float) * n);
    gc_fill(c.S0, n, 2); gc_fill(c.w, n, 1);
    sm_loss(&c);
    char name[64];
    snprintf(name, sizeof name, "softmax(causal=%d,q_offset=%d)", causal, q_offset);
    /* forward against a double softmax over the allowed keys */
    for (int b = 0; b < c.nb; b++)
        for (int h = 0; h < c.nh; h++)
            for (int q = 0; q < c.Tq; q++) {
                size_t r = (((size_t)b * c.nh + h) * c.Tq + q) * c.Tk;
                int lim = key_len[b];
                if (causal && q + q_offset + 1 < lim) lim = q + q_offset + 1;
                double mx = -1e30, s = 0;
                for (int k = 0; k < lim; k++) mx = fmax(mx, c.scale * c.S0[r + k]);
                for (int k = 0; k < lim; k++) s += exp(c.scale * c.S0[r + k] - mx);
                for (int k = 0; k < c.Tk; k++) {
                    double ref = k < lim ? exp(c.scale * c.S0[r + k] - mx) / s : 0.0;
                    if (k >= lim && c.P[r + k] != 0.0f) {   /* masked: exactly zero */
                        fprintf(stderr, "FAIL %s: masked weight [%zu] = %g\n", name, r + k, c.P[r + k]);
                        gc_failures++;
                    }
                    gc_compare(name, (long)(r + k), c.P[r + k], ref, 1e-5, 1e-7);
                }
            }
    float *dS = malloc(sizeof(float) * n);
    memcpy(dS, c.w, sizeof(float) * n);
    be->softmax_backward(be, act_f32(dS), act_f32(c.P), c.scale, c.nb, c.nh, c.Tq, c.Tk);
    strcat(name, " dS");
    for (size_t i = 0; i < n; i++) gc_compare(name, (long)i, dS[i], gc_central(&c.S0[i], H, sm_loss, &c), RTOL, ATOL);
    free(c.S0); free(c.P); free(c.w); free(dS);
}

/* ----------------------------------------------------- residual + LayerNorm */

typedef struct {
    int rows, d, T;
    float eps, p;
    DropoutKey key;
    uint32_t *sent;
    float *x, *sub, *gamma, *beta, *y, *r, *mean, *rstd, *w;
} LnCtx;

static double ln_loss(void *p)
{
    LnCtx *c = p;
    be->residual_ln_forward(be, act_f32(c->y), act_f32(c->r), c->mean, c->rstd, act_f32(c->x), act_f32(c->sub),
                            c->gamma, c->beta, c->rows, c->d,
                            c->eps, c->p, c->key, c->sent, c->T);
    double L = 0;
    for (size_t i = 0; i < (size_t)c->rows * c->d; i++) L += (double)c->w[i] * c->y[i];
    return L;
}

/* the central difference of the loss under a shift of column j of sub by
 * +-h: the gradient of a bias on the sublayer's output (the FFN's b2) */
static double ln_column_shift(LnCtx *c, int j, double h)
{
    float *col0 = malloc(sizeof(float) * c->rows);
    for (int i = 0; i < c->rows; i++) col0[i] = c->sub[(size_t)i * c->d + j];
    double f[2];
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < c->rows; i++) c->sub[(size_t)i * c->d + j] = (float)(col0[i] + (s ? -h : h));
        f[s] = ln_loss(c);
    }
    for (int i = 0; i < c->rows; i++) c->sub[(size_t)i * c->d + j] = col0[i];
    free(col0);
    return (f[0] - f[1]) / (2 * h);
}

static void check_residual_ln(float p, int d)
{
    uint32_t sent[2] = { 17, 3 };
    DropoutKey key = { 12345, 7, 33 };
    LnCtx c = { 6, d, 3, 1e-6f, p, key, sent, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    size_t n = (size_t)c.rows * d;
#define AL(v, k) v = malloc(sizeof(float) * (k))
    AL(c.x, n); AL(c.sub, n); AL(c.gamma, d); AL(c.beta, d); AL(c.y, n); AL(c.r, n); AL(c.mean, c.rows);
    AL(c.rstd, c.rows); AL(c.w, n);
    gc_fill(c.x, n, 1); gc_fill(c.sub, n, 1); gc_fill(c.gamma, d, 1); gc_fill(c.beta, d, 1); gc_fill(c.w, n, 1);
    for (int j = 0; j < d; j++) c.gamma[j] += 1.0f;
    ln_loss(&c);
    char name[64];
    snprintf(name, sizeof name, "residual_ln(p=%.1f,d=%d)", p, d);
    /* forward against the definition, with the mask drawn from philox.h */
    int dropped = 0;
    for (int i = 0; i < c.rows; i++) {
        double rr[128], mu = 0, var = 0;
        for (int j = 0; j < d; j++) {
            double s = c.sub[i * d + j];
            if (p > 0) {
                int keep = dropout_keep(key, p, sent[i / c.T], (uint32_t)(i % c.T), (uint32_t)j);
                dropped += !keep;
                s = keep ? s / (1.0 - p) : 0.0;
            }
            rr[j] = c.x[i * d + j] + s;
            mu += rr[j];
        }
        mu /= d;
        for (int j = 0; j < d; j++) var += (rr[j] - mu) * (rr[j] - mu);
        var /= d;
        for (int j = 0; j < d; j++)
            gc_compare(name, i * d + j, c.y[i * d + j], (rr[j] - mu) / sqrt(var + c.eps) * c.gamma[j] + c.beta[j],
                       1e-5, 1e-5);
    }
    if (p > 0 && (dropped == 0 || dropped == (int)n)) {
        fprintf(stderr, "FAIL %s: dropout dropped %d of %zu\n", name, dropped, n);
        gc_failures++;
    }
    float *dx, *dsub, *dg, *db, *dbs;
    AL(dx, n); AL(dsub, n); AL(dg, d); AL(db, d); AL(dbs, d);
    memset(dg, 0, sizeof(float) * d);
    memset(db, 0, sizeof(float) * d);
    for (int j = 0; j < d; j++) dbs[j] = 0.25f;   /* accumulated into */
    /* dx aliases dy, as in model.c */
    memcpy(dx, c.w, sizeof(float) * n);
    be->residual_ln_backward(be, act_f32(dx), act_f32(dsub), dg, db, dbs, act_f32(dx), act_f32(c.r), c.mean, c.rstd,
                             c.gamma, c.rows, d, p, key, sent, c.T);
    char nm[96];
    snprintf(nm, sizeof nm, "%s dx", name);
    for (size_t i = 0; i < n; i++) gc_compare(nm, (long)i, dx[i], gc_central(&c.x[i], H_LN, ln_loss, &c), RTOL, ATOL);
    snprintf(nm, sizeof nm, "%s dsub", name);
    for (size_t i = 0; i < n; i++) gc_compare(nm, (long)i, dsub[i], gc_central(&c.sub[i], H_LN, ln_loss, &c), RTOL, ATOL);
    snprintf(nm, sizeof nm, "%s dgamma", name);
    for (int j = 0; j < d; j++) gc_compare(nm, j, dg[j], gc_central(&c.gamma[j], H_LN, ln_loss, &c), RTOL, ATOL);
    snprintf(nm, sizeof nm, "%s dbeta", name);
    for (int j = 0; j < d; j++) gc_compare(nm, j, db[j], gc_central(&c.beta[j], H_LN, ln_loss, &c), RTOL, ATOL);
    snprintf(nm, sizeof nm, "%s dbias_sub", name);
    for (int j = 0; j < d; j++) gc_compare(nm, j, dbs[j] - 0.25f, ln_column_shift(&c, j, H_LN), RTOL, ATOL);
    free(c.x); free(c.sub); free(c.gamma); free(c.beta); free(c.y); free(c.r); free(c.mean); free(c.rstd);
    free(c.w); free(dx); free(dsub); free(dg); free(db); free(dbs);
}

/* ------------------------------------------------------------- embedding */

typedef struct {
    int B, T, d, V;
    float scale, p;
    DropoutKey key;
    uint32_t *sent;
    int32_t *tok;
    float *E, *pos, *out, *w;
} EmbCtx;

static double emb_loss(void *p)
{
    EmbCtx *c = p;
    be->embed_forward(be, act_f32(c->out), c->E, c->pos, c->tok, c->sent, c->B, c->T, c->d, c->scale, 0, c->p, c->key);
    double L = 0;
    for (size_t i = 0; i < (size_t)c->B * c->T * c->d; i++) L += (double)c->w[i] * c->out[i];
    return L;
}

static void check_embed(int learned, float p)
{
    /* repeated tokens (accumulation into the same row) and padding (id 0) */
    int32_t tok[8] = { 5, 1, 5, 0, 2, 5, 6, 0 };
    uint32_t sent[2] = { 4, 9 };
    DropoutKey key = { 99, 3, 1 };
    EmbCtx c = { 2, 4, 10, 7, 1.7f, p, key, sent, tok, NULL, NULL, NULL, NULL };
    size_t n = (size_t)c.B * c.T * c.d;
    AL(c.E, (size_t)c.V * c.d); AL(c.out, n); AL(c.w, n);
    gc_fill(c.E, (size_t)c.V * c.d, 1); gc_fill(c.w, n, 1);
    c.pos = NULL;
    if (learned) { AL(c.pos, (size_t)c.T * c.d); gc_fill(c.pos, (size_t)c.T * c.d, 1); }
    emb_loss(&c);
    char name[64];
    snprintf(name, sizeof name, "embed(%s,p=%.1f)", learned ? "learned" : "sinusoid", p);
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.T; t++)
            for (int j = 0; j < c.d; j++) {
                /* section 3.5: PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(...) */
                double ang = t / pow(10000.0, (double)(2 * (j / 2)) / c.d);
                double pe = learned ? c.pos[t * c.d + j] : (j % 2 == 0 ? sin(ang) : cos(ang));
                double v = c.E[tok[b * c.T + t] * c.d + j] * (double)c.scale + pe;
                if (p > 0) v = dropout_keep(key, p, sent[b], (uint32_t)t, (uint32_t)j) ? v / (1.0 - p) : 0.0;
                size_t i = ((size_t)b * c.T + t) * c.d + j;
                gc_compare(name, (long)i, c.out[i], v, 1e-5, 1e-6);
            }
    /* pos_offset shifts the positions (incremental decoding): row t of an
     * offset-2 call equals row t+2 of the full call (dropout off) */
    {
        float *o2 = malloc(sizeof(float) * n), *o0 = malloc(sizeof(float) * n);
        be->embed_forward(be, act_f32(o0), c.E, c.pos, tok, sent, c.B, c.T, c.d, c.scale, 0, 0.0f, key);
        be->embed_forward(be, act_f32(o2), c.E, c.pos, tok + 2, sent, 1, 2, c.d, c.scale, 2, 0.0f, key);
        for (int j = 0; j < 2 * c.d; j++) gc_compare("embed pos_offset", j, o2[j], o0[2 * c.d + j], 0, 0);
        free(o2); free(o0);
    }
    float *dE, *dpos = NULL;
    AL(dE, (size_t)c.V * c.d);
    memset(dE, 0, sizeof(float) * c.V * c.d);
    if (learned) { AL(dpos, (size_t)c.T * c.d); memset(dpos, 0, sizeof(float) * c.T * c.d); }
    be->embed_backward(be, dE, dpos, act_f32(c.w), tok, tok, sent, c.B, c.T, c.d, c.V, c.scale, p, key);
    char nm[96];
    snprintf(nm, sizeof nm, "%s dE", name);
    for (int i = 0; i < c.V * c.d; i++) gc_compare(nm, i, dE[i], gc_central(&c.E[i], H, emb_loss, &c), RTOL, ATOL);
    if (learned) {
        snprintf(nm, sizeof nm, "%s dpos", name);
        for (int i = 0; i < c.T * c.d; i++)
            gc_compare(nm, i, dpos[i], gc_central(&c.pos[i], H, emb_loss, &c), RTOL, ATOL);
    }
    free(c.E); free(c.out); free(c.w); free(c.pos); free(dE); free(dpos);
}

/* ---------------------------------------------------------- cross-entropy */

typedef struct {
    int rows, V;
    float eps;
    int32_t *tgt;
    float *z0, *z, *loss, *nll;
} XeCtx;

static double xe_loss(void *p)
{
    XeCtx *c = p;
    memcpy(c->z, c->z0, sizeof(float) * c->rows * c->V);
    be->xent_forward_backward(be, act_f32(c->z), c->tgt, c->rows, c->V, c->eps, 0.0f, c->loss, c->nll);
    double L = 0;
    for (int r = 0; r < c->rows; r++) L += c->loss[r];
    return L;
}

static void check_xent(float eps)
{
    int32_t tgt[5] = { 3, 0, 6, 1, 0 };   /* rows 1 and 4 are padding */
    XeCtx c = { 5, 7, eps, tgt, NULL, NULL, NULL, NULL };
    size_t n = (size_t)c.rows * c.V;
    AL(c.z0, n); AL(c.z, n); AL(c.loss, c.rows); AL(c.nll, c.rows);
    gc_fill(c.z0, n, 3);
    xe_loss(&c);
    char name[64];
    snprintf(name, sizeof name, "xent(eps=%.1f)", eps);
    /* forward: -sum_k q_k log p_k with q = (1-eps) onehot + eps/V (section 5.4) */
    for (int r = 0; r < c.rows; r++) {
        double mx = -1e30, s = 0, L = 0;
        for (int k = 0; k < c.V; k++) mx = fmax(mx, c.z0[r * c.V + k]);
        for (int k = 0; k < c.V; k++) s += exp(c.z0[r * c.V + k] - mx);
        double lse = mx + log(s);
        for (int k = 0; k < c.V; k++) {
            double q = eps / c.V + (k == tgt[r] ? 1.0 - eps : 0.0);
            L -= q * (c.z0[r * c.V + k] - lse);
        }
        double nll = lse - c.z0[r * c.V + tgt[r]];
        if (tgt[r] == 0) L = nll = 0;
        gc_compare(name, r, c.loss[r], L, 1e-5, 1e-6);
        gc_compare("xent nll", r, c.nll[r], nll, 1e-5, 1e-6);
    }
    /* backward with grad_scale: overwrites the logits with scale * dL/dz */
    float gs = 0.375f;
    memcpy(c.z, c.z0, sizeof(float) * n);
    be->xent_forward_backward(be, act_f32(c.z), c.tgt, c.rows, c.V, c.eps, gs, c.loss, c.nll);
    float *g = malloc(sizeof(float) * n);
    memcpy(g, c.z, sizeof(float) * n);
    strcat(name, " dz");
    for (size_t i = 0; i < n; i++) gc_compare(name, (long)i, g[i] / gs, gc_central(&c.z0[i], H, xe_loss, &c), RTOL, ATOL);
    free(c.z0); free(c.z); free(c.loss); free(c.nll); free(g);
}

/* ------------------------------------------------- Adam and log_softmax */

static void check_adam(void)
{
    int n = 50;
    float *p, *g, *m, *v;
    AL(p, n); AL(g, n); AL(m, n); AL(v, n);
    double P[50], M[50] = {0}, Vv[50] = {0};
    gc_fill(p, n, 1);
    memset(m, 0, sizeof(float) * n);
    memset(v, 0, sizeof(float) * n);
    for (int i = 0; i < n; i++) P[i] = p[i];
    double b1 = 0.9, b2 = 0.98, eps = 1e-9, lr = 1e-2, gs = 0.5;
    for (int t = 1; t <= 5; t++) {
        gc_fill(g, n, 1);
        be->adam(be, p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, t, (float)gs);
        for (int i = 0; i < n; i++) {
            double gi = gs * g[i];
            M[i] = b1 * M[i] + (1 - b1) * gi;
            Vv[i] = b2 * Vv[i] + (1 - b2) * gi * gi;
            P[i] -= lr * (M[i] / (1 - pow(b1, t))) / (sqrt(Vv[i] / (1 - pow(b2, t))) + eps);
        }
    }
    for (int i = 0; i < n; i++) gc_compare("adam", i, p[i], P[i], 1e-5, 1e-6);
    free(p); free(g); free(m); free(v);
}

static void check_log_softmax(void)
{
    int rows = 3, cols = 9;
    float x[27], x0[27];
    gc_fill(x0, 27, 4);
    memcpy(x, x0, sizeof x);
    be->log_softmax(be, act_f32(x), rows, cols);
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int k = 0; k < cols; k++) s += exp((double)x0[r * cols + k]);
        for (int k = 0; k < cols; k++)
            gc_compare("log_softmax", r * cols + k, x[r * cols + k], x0[r * cols + k] - log(s), 1e-6, 1e-6);
    }
}

int main(void)
{
    be = backend_cpu_create(2);
    check_gemm();
    check_gemm_batched();
    check_bias(0);
    check_bias(1);
    check_softmax(0, 0);
    check_softmax(1, 0);
    check_softmax(1, 2);
    check_residual_ln(0.0f, 8);
    check_residual_ln(0.3f, 8);
    check_residual_ln(0.3f, 70);   /* > 64: column blocks of the gamma/beta reduction */
    check_embed(0, 0.0f);
    check_embed(0, 0.3f);
    check_embed(1, 0.3f);
    check_xent(0.0f);
    check_xent(0.1f);
    check_adam();
    check_log_softmax();
    be->destroy(be);
    return gc_report("test_grad_ops");
}
