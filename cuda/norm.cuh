/* Residual connection, dropout and LayerNorm (sections 3.1 and 5.4):
 * the post-norm sub-layer output y = LayerNorm(x + dropout(sub)). */
#pragma once

#include "gemm.cuh"   /* colsums */

/* ------------------------------------------- residual + dropout + LayerNorm */

/* With bf16 r, each thread re-reads (only) its own rounded r[j]: the mean
 * is of the unrounded sums, variance and y of what backward will see. */
template <typename A>
static __global__ void k_residual_ln_forward(A *y, A *r, float *mean, float *rstd, const A *x, const A *sub,
                                             const float *gamma, const float *beta, int d, float eps, float p,
                                             float ks, DropoutKey key, const uint32_t *sent_id, int T)
{
    DYNAMIC_SHARED(float, sh);
    long i = blockIdx.x;
    const A *xi = x + i * d, *si = sub + i * d;
    A *ri = r + i * d, *yi = y + i * d;
    unsigned char *keep = (unsigned char *)(sh + 33);
    if (p > 0.0f) {   /* uniform over the launch */
        drop_mask_row(keep, d, p, key, ld(sent_id, i / T), (uint32_t)(i % T));
        __syncthreads();
    }
    float sum = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float s = ld(si, j);
        if (p > 0.0f) s = keep[j] ? s * ks : 0.0f;
        float v = ld(xi, j) + s;
        st(ri, j, v);
        sum += v;
    }
    float mu = block_sum(sum, sh) / d;
    float var = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float c = ld(ri, j) - mu;
        var += c * c;
    }
    var = block_sum(var, sh);
    float rs = 1.0f / sqrtf(var / d + eps);
    if (threadIdx.x == 0) {
        st(mean, i, mu);
        st(rstd, i, rs);
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) st(yi, j, (ld(ri, j) - mu) * rs * ld(gamma, j) + ld(beta, j));
}

static void cuda_residual_ln_forward(Backend *be, Act y, Act r, float *mean, float *rstd, Act x, Act sub,
                                     const float *gamma, const float *beta, int rows, int d, float eps, float p,
                                     DropoutKey key, const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    dispatch(act_type("residual_ln_forward", { y, r, x, sub }), [&](auto z) {
        using A = decltype(z);
        /* x and sub read, r and y written, once each (r is re-read from
         * cache); gamma, beta, the sentence ids; mean and rstd written.
         * FLOPs: ~8 per element, and the dropout bits (a Philox call of
         * ~100 integer operations per 4 features) */
        double e = (double)rows * d;
        DECLARE_KERNEL(k_residual_ln_forward<A>, "residual_ln_forward", 2 * sizeof(A),
                       2 * e * sizeof(A) + 2.0 * d * sizeof(float) + (p > 0 ? rows / T * sizeof(uint32_t) : 0),
                       2 * e * sizeof(A) + 2.0 * rows * sizeof(float), 8 * e + (p > 0 ? 25 * e : 0));
        LAUNCH(k_residual_ln_forward<A>, rows, row_threads(d), row_drop_smem(d, p), IMPL(be)->stream, tp<A>(y),
               tp<A>(r), mean, rstd, tp<A>(x), tp<A>(sub), gamma, beta, d, eps, p, drop_scale(p), key, sent_id, T);
    });
    CKL();
}

/* dx may alias dy: each thread reads dy[j] only for its own j, all reads of
 * a row happen before the block barrier that precedes the first write */
template <typename A>
static __global__ void k_residual_ln_backward(A *dx, A *dsub, const A *dy, const A *r, const float *mean,
                                              const float *rstd, const float *gamma, int d, float p, float ks,
                                              DropoutKey key, const uint32_t *sent_id, int T)
{
    DYNAMIC_SHARED(float, sh);
    long i = blockIdx.x;
    const A *dyi = dy + i * d, *ri = r + i * d;
    A *dxi = dx + i * d, *dsi = dsub + i * d;
    float mu = ld(mean, i), rs = ld(rstd, i);
    unsigned char *keep = (unsigned char *)(sh + 33);
    if (p > 0.0f) drop_mask_row(keep, d, p, key, ld(sent_id, i / T), (uint32_t)(i % T));   /* read after block_sum's barriers */
    float m1 = 0.0f, m2 = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = ld(dyi, j) * ld(gamma, j), xh = (ld(ri, j) - mu) * rs;
        m1 += g;
        m2 += g * xh;
    }
    m1 = block_sum(m1, sh) / d;
    m2 = block_sum(m2, sh) / d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float xh = (ld(ri, j) - mu) * rs;
        float dr = rs * (ld(dyi, j) * ld(gamma, j) - m1 - xh * m2);
        st(dxi, j, dr);
        st(dsi, j, p > 0.0f ? (keep[j] ? dr * ks : 0.0f) : dr);
    }
}

static void cuda_residual_ln_backward(Backend *be, Act dx, Act dsub, float *dgamma, float *dbeta, Act dy, Act r,
                                      const float *mean, const float *rstd, const float *gamma, int rows, int d,
                                      float p, DropoutKey key, const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    /* parameter gradients first, so that dx may alias dy */
    colsums(be, dy, r, mean, rstd, rows, d, dgamma, dbeta);
    dispatch(act_type("residual_ln_backward", { dx, dsub, dy, r }), [&](auto z) {
        using A = decltype(z);
        /* dy and r read, dx and dsub written (dx may be dy); mean, rstd, gamma */
        double e = (double)rows * d;
        DECLARE_KERNEL(k_residual_ln_backward<A>, "residual_ln_backward", 2 * sizeof(A),
                       2 * e * sizeof(A) + 2.0 * rows * sizeof(float) + d * sizeof(float) +
                           (p > 0 ? rows / T * sizeof(uint32_t) : 0),
                       2 * e * sizeof(A), 12 * e + (p > 0 ? 25 * e : 0));
        LAUNCH(k_residual_ln_backward<A>, rows, row_threads(d), row_drop_smem(d, p), IMPL(be)->stream, tp<A>(dx),
               tp<A>(dsub), tp<A>(dy), tp<A>(r), mean, rstd, gamma, d, p, drop_scale(p), key, sent_id, T);
    });
    CKL();
}
