/* CPU backend: the reference implementation of ops.h.  GEMMs go to OpenBLAS
 * (OpenMP build); every other loop is OpenMP-parallel.  Reductions over rows
 * (bias, LayerNorm and embedding gradients) are parallel over columns and
 * sum rows in order, so results do not depend on the thread count. */
#include "ops.h"
#include "util.h"
#include "vecmath.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS extension, declared here to avoid depending on its header's variant */
void openblas_set_num_threads(int);

static void *cpu_alloc(Backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    if (posix_memalign(&p, 64, n)) return NULL;
    memset(p, 0, n);
    return p;
}
static void cpu_free(Backend *be, void *p) { (void)be; free(p); }
static void cpu_upload(Backend *be, void *dst, const void *src, size_t n) { (void)be; if (n) memcpy(dst, src, n); }
static void cpu_download(Backend *be, void *dst, const void *src, size_t n) { (void)be; if (n) memcpy(dst, src, n); }
static void cpu_zero(Backend *be, void *p, size_t n) { (void)be; if (n) memset(p, 0, n); }
static void cpu_copy(Backend *be, void *dst, const void *src, size_t n) { (void)be; if (n) memmove(dst, src, n); }
static void cpu_sync(Backend *be) { (void)be; }

/* Activations are fp32 on the CPU (alloc_act); a view of another element
 * type (a CUDA bf16 buffer passed by mistake) is refused, not misread. */
static float *F(Act a, const char *op)
{
    if (a.data && a.dtype != DT_F32)
        die(1, "cpu %s: activation of element type %d; the CPU backend computes fp32 only", op, (int)a.dtype);
    return (float *)a.data;
}

static Act cpu_alloc_act(Backend *be, size_t n)
{
    Act a = { cpu_alloc(be, n * sizeof(float)), DT_F32 };
    return a;
}
static void cpu_upload_act(Backend *be, Act dst, const float *src, size_t n)
{
    cpu_upload(be, F(dst, "upload_act"), src, n * sizeof(float));
}
static void cpu_download_act(Backend *be, float *dst, Act src, size_t n)
{
    cpu_download(be, dst, F(src, "download_act"), n * sizeof(float));
}
static void cpu_zero_act(Backend *be, Act p, size_t n) { cpu_zero(be, F(p, "zero_act"), n * sizeof(float)); }
static void cpu_copy_act(Backend *be, Act dst, Act src, size_t n)
{
    cpu_copy(be, F(dst, "copy_act"), F(src, "copy_act"), n * sizeof(float));
}

static void cpu_gemm(Backend *be, int tA, int tB, int M, int N, int K, float alpha,
                     Act Av, int lda, Act Bv, int ldb, float beta, Act Cv, int ldc)
{
    (void)be;
    const float *A = F(Av, "gemm"), *B = F(Bv, "gemm");
    float *C = F(Cv, "gemm");
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cpu_gemm_batched(Backend *be, int tA, int tB, int M, int N, int K, float alpha,
                             Act Av, int lda, long sAo, long sAi,
                             Act Bv, int ldb, long sBo, long sBi, float beta,
                             Act Cv, int ldc, long sCo, long sCi, int n_outer, int n_inner)
{
    (void)be;
    const float *A = F(Av, "gemm_batched"), *B = F(Bv, "gemm_batched");
    float *C = F(Cv, "gemm_batched");
    /* one small GEMM per (sentence, head); OpenBLAS runs single-threaded
     * inside the parallel region */
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int o = 0; o < n_outer; o++)
        for (int i = 0; i < n_inner; i++)
            cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans,
                        M, N, K, alpha, A + o * sAo + i * sAi, lda, B + o * sBo + i * sBi, ldb,
                        beta, C + o * sCo + i * sCi, ldc);
}

static void cpu_bias_forward(Backend *be, Act Yv, const float *bias, int rows, int cols, int relu)
{
    float *Y = F(Yv, "bias_forward");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *y = Y + (size_t)r * cols;
        if (relu)
            for (int c = 0; c < cols; c++) { float v = y[c] + bias[c]; y[c] = v > 0.0f ? v : 0.0f; }
        else
            for (int c = 0; c < cols; c++) y[c] += bias[c];
    }
}

/* the reference definitions of the fused ops: the unfused sequences (the
 * ReLU mask is X > 0 itself: none kept) */
static void cpu_linear_bias_forward(Backend *be, Act Y, Act X, Act W, const float *bias, int rows, int in, int out,
                                    int relu, void *mask)
{
    (void)mask;
    cpu_gemm(be, 0, 1, rows, out, in, 1.0f, X, in, W, in, 0.0f, Y, out);
    cpu_bias_forward(be, Y, bias, rows, out, relu);
}

#define COL_BLOCK 64

static void cpu_bias_backward(Backend *be, Act dYv, float *dbias, Act Yv, int rows, int cols, int relu)
{
    float *dY = F(dYv, "bias_backward");
    const float *Y = F(Yv, "bias_backward");
    (void)be;
    if (relu) {
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            float *d = dY + (size_t)r * cols;
            const float *y = Y + (size_t)r * cols;
            for (int c = 0; c < cols; c++) d[c] = y[c] > 0.0f ? d[c] : 0.0f;
        }
    }
    int nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int bk = 0; bk < nblk; bk++) {
        int c0 = bk * COL_BLOCK, c1 = c0 + COL_BLOCK < cols ? c0 + COL_BLOCK : cols;
        float acc[COL_BLOCK] = {0};
        for (int r = 0; r < rows; r++) {
            const float *d = dY + (size_t)r * cols;
            for (int c = c0; c < c1; c++) acc[c - c0] += d[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
}

static void cpu_linear_relu_backward(Backend *be, Act dX, float *dbias, Act dY, Act W, Act X, const void *mask,
                                     int rows, int in, int out)
{
    (void)mask;
    cpu_gemm(be, 0, 0, rows, in, out, 1.0f, dY, out, W, in, 0.0f, dX, in);
    cpu_bias_backward(be, dX, dbias, X, rows, in, 1);
}

static void cpu_softmax_forward(Backend *be, Act Sv, const int32_t *key_len, float scale,
                                int nb, int nh, int Tq, int Tk, int causal, int q_offset)
{
    float *S = F(Sv, "softmax_forward");
    (void)be;
    long rows = (long)nb * nh * Tq;
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        int b = (int)(r / ((long)nh * Tq));
        int q = (int)(r % Tq);
        int n = key_len[b];
        if (causal && q + q_offset + 1 < n) n = q + q_offset + 1;
        if (n > Tk) n = Tk;
        float *s = S + r * Tk;
        if (n > 0) {
            for (int k = 0; k < n; k++) s[k] *= scale;
            float sum = vm_row_exp_affine(s, n, vm_row_max(s, n), 1.0f, 0.0f);
            float inv = 1.0f / sum;
            for (int k = 0; k < n; k++) s[k] *= inv;
        }
        for (int k = n; k < Tk; k++) s[k] = 0.0f;
    }
}

static void cpu_softmax_backward(Backend *be, Act dPv, Act Pv, float scale,
                                 int nb, int nh, int Tq, int Tk)
{
    float *dP = F(dPv, "softmax_backward");
    const float *P = F(Pv, "softmax_backward");
    (void)be;
    long rows = (long)nb * nh * Tq;
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        float *d = dP + r * Tk;
        const float *p = P + r * Tk;
        float dot = 0.0f;
        #pragma omp simd reduction(+:dot)
        for (int k = 0; k < Tk; k++) dot += p[k] * d[k];
        for (int k = 0; k < Tk; k++) d[k] = scale * p[k] * (d[k] - dot);
    }
}

static inline float drop_scale(float p) { return p > 0.0f ? 1.0f / (1.0f - p) : 1.0f; }

static void cpu_residual_ln_forward(Backend *be, Act yv, Act rv, float *mean, float *rstd,
                                    Act xv, Act subv, const float *gamma, const float *beta,
                                    int rows, int d, float eps, float p, DropoutKey key,
                                    const uint32_t *sent_id, int T)
{
    float *y = F(yv, "residual_ln_forward"), *r = F(rv, "residual_ln_forward");
    const float *x = F(xv, "residual_ln_forward"), *sub = F(subv, "residual_ln_forward");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        const float *xi = x + (size_t)i * d, *si = sub + (size_t)i * d;
        float *ri = r + (size_t)i * d, *yi = y + (size_t)i * d;
        if (p > 0.0f) vm_dropout_row(key, p, sent_id[i / T], (uint32_t)(i % T), si, ri, d);
        else memcpy(ri, si, sizeof(float) * d);
        /* omp simd: the row sums run in vector partial sums */
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j < d; j++) { ri[j] += xi[j]; sum += ri[j]; }
        float mu = sum / d, var = 0.0f;
        #pragma omp simd reduction(+:var)
        for (int j = 0; j < d; j++) { float c = ri[j] - mu; var += c * c; }
        float rs = 1.0f / sqrtf(var / d + eps);
        mean[i] = mu;
        rstd[i] = rs;
        for (int j = 0; j < d; j++) yi[j] = (ri[j] - mu) * rs * gamma[j] + beta[j];
    }
}

static void cpu_residual_ln_backward(Backend *be, Act dxv, Act dsubv, float *dgamma, float *dbeta,
                                     float *dbias_sub, Act dyv, Act rv, const float *mean, const float *rstd,
                                     const float *gamma, int rows, int d, float p, DropoutKey key,
                                     const uint32_t *sent_id, int T)
{
    float *dx = F(dxv, "residual_ln_backward"), *dsub = F(dsubv, "residual_ln_backward");
    const float *dy = F(dyv, "residual_ln_backward"), *r = F(rv, "residual_ln_backward");
    (void)be;
    /* parameter gradients first, so that dx may alias dy */
    int nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int bk = 0; bk < nblk; bk++) {
        int c0 = bk * COL_BLOCK, c1 = c0 + COL_BLOCK < d ? c0 + COL_BLOCK : d;
        float ag[COL_BLOCK] = {0}, ab[COL_BLOCK] = {0};
        for (int i = 0; i < rows; i++) {
            const float *dyi = dy + (size_t)i * d, *ri = r + (size_t)i * d;
            float mu = mean[i], rs = rstd[i];
            for (int c = c0; c < c1; c++) {
                ag[c - c0] += dyi[c] * (ri[c] - mu) * rs;
                ab[c - c0] += dyi[c];
            }
        }
        for (int c = c0; c < c1; c++) { dgamma[c] += ag[c - c0]; dbeta[c] += ab[c - c0]; }
    }
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        const float *dyi = dy + (size_t)i * d, *ri = r + (size_t)i * d;
        float *dxi = dx + (size_t)i * d, *dsi = dsub + (size_t)i * d;
        float mu = mean[i], rs = rstd[i];
        float m1 = 0.0f, m2 = 0.0f;
        #pragma omp simd reduction(+:m1, m2)
        for (int j = 0; j < d; j++) {
            float g = dyi[j] * gamma[j], xh = (ri[j] - mu) * rs;
            m1 += g;
            m2 += g * xh;
        }
        m1 /= d;
        m2 /= d;
        for (int j = 0; j < d; j++) {
            float xh = (ri[j] - mu) * rs;
            dxi[j] = rs * (dyi[j] * gamma[j] - m1 - xh * m2);
        }
        if (p > 0.0f) vm_dropout_row(key, p, sent_id[i / T], (uint32_t)(i % T), dxi, dsi, d);
        else memcpy(dsi, dxi, sizeof(float) * d);
    }
    if (dbias_sub) cpu_bias_backward(be, dsubv, dbias_sub, act_none(), rows, d, 0);
}

/* PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)  (section 3.5) */
static inline float sinusoid(int pos, int j, int d)
{
    double rate = pow(10000.0, (double)(j & ~1) / d);
    double a = pos / rate;
    return (float)((j & 1) ? cos(a) : sin(a));
}

static void cpu_embed_forward(Backend *be, Act outv, const float *E, const float *pos_table,
                              const int32_t *tokens, const uint32_t *sent_id, int B, int T, int d,
                              float scale, int pos_offset, float p, DropoutKey key)
{
    float *out = F(outv, "embed_forward");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < B * T; i++) {
        int b = i / T, t = i % T, pos = t + pos_offset;
        const float *e = E + (size_t)tokens[i] * d;
        float *o = out + (size_t)i * d;
        if (pos_table) {
            const float *pe = pos_table + (size_t)pos * d;
            for (int j = 0; j < d; j++) o[j] = e[j] * scale + pe[j];
        } else
            for (int j = 0; j < d; j++) o[j] = e[j] * scale + sinusoid(pos, j, d);
        if (p > 0.0f) vm_dropout_row(key, p, sent_id[b], (uint32_t)pos, o, o, d);
    }
}

static void cpu_embed_backward(Backend *be, float *dE, float *dpos, Act doutv,
                               const int32_t *tokens, const int32_t *host_tokens, const uint32_t *sent_id, int B, int T,
                               int d, int vocab, float scale, float p, DropoutKey key)
{
    const float *dout = F(doutv, "embed_backward");
    (void)be;
    (void)vocab;
    (void)host_tokens;
    float ks = drop_scale(p);
    int nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
    /* each thread owns a block of feature columns and adds rows in order:
     * deterministic without atomics */
    #pragma omp parallel for schedule(static)
    for (int bk = 0; bk < nblk; bk++) {
        int c0 = bk * COL_BLOCK, c1 = c0 + COL_BLOCK < d ? c0 + COL_BLOCK : d;
        for (int i = 0; i < B * T; i++) {
            int b = i / T, t = i % T;
            const float *g = dout + (size_t)i * d;
            float *e = dE + (size_t)tokens[i] * d;
            for (int j = c0; j < c1; j += 4) {
                unsigned keep = p > 0.0f ? dropout_keep4(key, p, sent_id[b], (uint32_t)t, (uint32_t)j >> 2) : 0xFu;
                for (int q = 0; q < 4 && j + q < c1; q++) {
                    float v = (keep >> q & 1) ? g[j + q] * ks : 0.0f;   /* ks = 1 without dropout */
                    e[j + q] += v * scale;
                    if (dpos) dpos[(size_t)t * d + j + q] += v;
                }
            }
        }
    }
}

/* heads are the column blocks [h*d_v, (h+1)*d_v) of a [rows, n_heads*d_v] activation */
static void cpu_head_gate_forward(Backend *be, Act outv, Act ctxv, const float *gate, int rows, int nh, int dv)
{
    float *out = F(outv, "head_gate_forward");
    const float *ctx = F(ctxv, "head_gate_forward");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < dv; j++) {
                size_t i = (size_t)r * nh * dv + (size_t)h * dv + j;
                out[i] = gate[h] * ctx[i];
            }
}

/* dgate in double per head over rows in order: the sum does not depend on
 * the thread count */
static void cpu_head_gate_backward(Backend *be, float *dgate, Act dctxv, Act ctxv, const float *gate, int rows,
                                   int nh, int dv)
{
    float *dctx = F(dctxv, "head_gate_backward");
    const float *ctx = F(ctxv, "head_gate_backward");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < nh; h++) {
        double acc = 0.0;
        for (int r = 0; r < rows; r++) {
            float *d = dctx + (size_t)r * nh * dv + (size_t)h * dv;
            const float *x = ctx + (size_t)r * nh * dv + (size_t)h * dv;
            for (int j = 0; j < dv; j++) {
                acc += (double)d[j] * x[j];
                d[j] *= gate[h];
            }
        }
        if (dgate) dgate[h] += (float)acc;
    }
}

static void cpu_xent_forward_backward(Backend *be, Act logitsv, const int32_t *target, int rows, int V,
                                      float eps, float grad_scale, float *row_loss, float *row_nll)
{
    float *logits = F(logitsv, "xent_forward_backward");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *z = logits + (size_t)r * V;
        int y = target[r];
        if (y == 0) {
            row_loss[r] = row_nll[r] = 0.0f;
            if (grad_scale != 0.0f) memset(z, 0, sizeof(float) * V);
            continue;
        }
        float mx = vm_row_max(z, V), sz;
        float lse = mx + logf(vm_row_sum_exp(z, V, mx, &sz));
        float nll = lse - z[y];
        /* -sum_k q_k log p_k with q = (1-eps) onehot + eps/V */
        float smooth = lse - sz / V;
        row_nll[r] = nll;
        row_loss[r] = (1.0f - eps) * nll + eps * smooth;
        if (grad_scale != 0.0f) {
            /* grad_scale * (p_k - q_k), p_k = exp(z_k - lse) */
            vm_row_exp_affine(z, V, lse, grad_scale, -grad_scale * (eps / V));
            z[y] -= grad_scale * (1.0f - eps);
        }
    }
}

static void cpu_adam(Backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                     float lr, float b1, float b2, float eps, int t, float gs)
{
    (void)be;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    }
}

static void cpu_log_softmax(Backend *be, Act xv, int rows, int cols)
{
    float *x = F(xv, "log_softmax");
    (void)be;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *z = x + (size_t)r * cols;
        float mx = vm_row_max(z, cols);
        float lse = mx + logf(vm_row_sum_exp(z, cols, mx, NULL));
        for (int k = 0; k < cols; k++) z[k] -= lse;
    }
}

static int cpu_any_nonfinite(Backend *be, const float *x, size_t n)
{
    (void)be;
    int bad = 0;
    #pragma omp parallel for reduction(|:bad) schedule(static)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    return bad;
}

static void cpu_destroy(Backend *be) { free(be); }

Backend *backend_cpu_create(int threads)
{
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    Backend *be = calloc(1, sizeof *be);
    if (!be) return NULL;
    be->name = "cpu";
    be->alloc = cpu_alloc;
    be->alloc_act = cpu_alloc_act;   /* activations are plain fp32 on the CPU */
    be->act_dtype = DT_F32;
    be->set_params = NULL;
    be->free = cpu_free;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->zero = cpu_zero;
    be->copy = cpu_copy;
    be->sync = cpu_sync;
    be->upload_act = cpu_upload_act;
    be->download_act = cpu_download_act;
    be->zero_act = cpu_zero_act;
    be->copy_act = cpu_copy_act;
    be->gemm = cpu_gemm;
    be->gemm_batched = cpu_gemm_batched;
    be->bias_forward = cpu_bias_forward;
    be->linear_bias_forward = cpu_linear_bias_forward;
    be->linear_relu_backward = cpu_linear_relu_backward;
    be->bias_backward = cpu_bias_backward;
    be->softmax_forward = cpu_softmax_forward;
    be->softmax_backward = cpu_softmax_backward;
    be->residual_ln_forward = cpu_residual_ln_forward;
    be->residual_ln_backward = cpu_residual_ln_backward;
    be->embed_forward = cpu_embed_forward;
    be->embed_backward = cpu_embed_backward;
    be->head_gate_forward = cpu_head_gate_forward;
    be->head_gate_backward = cpu_head_gate_backward;
    be->xent_forward_backward = cpu_xent_forward_backward;
    be->adam = cpu_adam;
    be->log_softmax = cpu_log_softmax;
    be->any_nonfinite = cpu_any_nonfinite;
    be->destroy = cpu_destroy;
    return be;
}
