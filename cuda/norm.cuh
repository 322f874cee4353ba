/* Residual connection, dropout and LayerNorm (sections 3.1 and 5.4):
 * the post-norm sub-layer output y = LayerNorm(x + dropout(sub)). */
#pragma once

#include "gemm.cuh"   /* colsums */

/* ------------------------------------------- residual + dropout + LayerNorm */

/* One block per row, in 16-byte packs of the row (row_split, memory.cuh)
 * where x, sub, r and y are equally aligned.  With bf16 r, each thread
 * re-reads (only) its own rounded r[j]: the mean is of the unrounded sums,
 * variance and y of what backward will see. */
template <typename A>
static __global__ void k_residual_ln_forward(A *y, A *r, float *mean, float *rstd, const A *x, const A *sub,
                                             const float *gamma, const float *beta, int d, float eps, float p,
                                             float ks, DropArg key_arg, const uint32_t *sent_id, int T)
{
    constexpr int N = Pack<A>::N;
    DYNAMIC_SHARED(float, sh);
    const DropoutKey key = drop_key(key_arg);
    long i = blockIdx.x;
    const A *xi = x + i * d, *si = sub + i * d;
    A *ri = r + i * d, *yi = y + i * d;
    unsigned char *keep = (unsigned char *)(sh + 33);
    if (p > 0.0f) {   /* uniform over the launch */
        drop_mask_row(keep, d, p, key, ld(sent_id, i / T), (uint32_t)(i % T));
        __syncthreads();
    }
    RowSplit rs_ = row_split<A>(d, { xi, si, ri, yi });
    auto resid = [&](int j, float xv, float sv) { return xv + (p > 0.0f ? (keep[j] ? sv * ks : 0.0f) : sv); };
    float sum = 0.0f;
    row_for(rs_, d, N,
            [&](int j) {
                float v = resid(j, ld(xi, j), ld(si, j));
                st(ri, j, v);
                sum += v;
            },
            [&](int j0) {
                Pack<A> xv = ldp(xi + j0), sv = ldp(si + j0), rv;
                for (int e = 0; e < N; e++) {
                    float v = resid(j0 + e, to_float(xv.v[e]), to_float(sv.v[e]));
                    rv.v[e] = from_float<A>(v);
                    sum += v;
                }
                stp(ri + j0, rv);
            });
    float mu = block_sum(sum, sh) / d;
    float var = 0.0f;
    auto dev2 = [&](float v) { var += (v - mu) * (v - mu); };
    row_for(rs_, d, N, [&](int j) { dev2(ld(ri, j)); },
            [&](int j0) {
                Pack<A> rv = ldp(ri + j0);
                for (int e = 0; e < N; e++) dev2(to_float(rv.v[e]));
            });
    var = block_sum(var, sh);
    float rs = 1.0f / sqrtf(var / d + eps);
    if (threadIdx.x == 0) {
        st(mean, i, mu);
        st(rstd, i, rs);
    }
    auto norm = [&](int j, float v) { return (v - mu) * rs * ld(gamma, j) + ld(beta, j); };
    row_for(rs_, d, N, [&](int j) { st(yi, j, norm(j, ld(ri, j))); },
            [&](int j0) {
                Pack<A> rv = ldp(ri + j0), yv;
                for (int e = 0; e < N; e++) yv.v[e] = from_float<A>(norm(j0 + e, to_float(rv.v[e])));
                stp(yi + j0, yv);
            });
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
        DECLARE_KERNEL(k_residual_ln_forward<A>, "residual_ln_forward", 2 * 16,
                       2 * e * sizeof(A) + 2.0 * d * sizeof(float) + (p > 0 ? rows / T * sizeof(uint32_t) : 0),
                       2 * e * sizeof(A) + 2.0 * rows * sizeof(float), 8 * e + (p > 0 ? 25 * e : 0));
        LAUNCH(k_residual_ln_forward<A>, rows, row_threads(d / Pack<A>::N), row_drop_smem(d, p), IMPL(be)->stream, tp<A>(y),
               tp<A>(r), mean, rstd, tp<A>(x), tp<A>(sub), gamma, beta, d, eps, p, drop_scale(p), drop_arg(IMPL(be), key), sent_id, T);
    });
    CKL();
}

/* dx may alias dy: each thread reads dy[j] only for its own j (its own
 * packs), all reads of a row happen before the block barrier that precedes
 * the first write */
template <typename A>
static __global__ void k_residual_ln_backward(A *dx, A *dsub, const A *dy, const A *r, const float *mean,
                                              const float *rstd, const float *gamma, int d, float p, float ks,
                                              DropArg key_arg, const uint32_t *sent_id, int T)
{
    constexpr int N = Pack<A>::N;
    DYNAMIC_SHARED(float, sh);
    const DropoutKey key = drop_key(key_arg);
    long i = blockIdx.x;
    const A *dyi = dy + i * d, *ri = r + i * d;
    A *dxi = dx + i * d, *dsi = dsub + i * d;
    float mu = ld(mean, i), rs = ld(rstd, i);
    unsigned char *keep = (unsigned char *)(sh + 33);
    if (p > 0.0f) drop_mask_row(keep, d, p, key, ld(sent_id, i / T), (uint32_t)(i % T));   /* read after block_sum's barriers */
    RowSplit s = row_split<A>(d, { dyi, ri, dxi, dsi });
    float m1 = 0.0f, m2 = 0.0f;
    auto moments = [&](int j, float g_, float rv) {
        float g = g_ * ld(gamma, j), xh = (rv - mu) * rs;
        m1 += g;
        m2 += g * xh;
    };
    row_for(s, d, N, [&](int j) { moments(j, ld(dyi, j), ld(ri, j)); },
            [&](int j0) {
                Pack<A> gv = ldp(dyi + j0), rv = ldp(ri + j0);
                for (int e = 0; e < N; e++) moments(j0 + e, to_float(gv.v[e]), to_float(rv.v[e]));
            });
    m1 = block_sum(m1, sh) / d;
    m2 = block_sum(m2, sh) / d;
    auto grad = [&](int j, float g, float rv) { return rs * (g * ld(gamma, j) - m1 - (rv - mu) * rs * m2); };
    auto drop = [&](int j, float dr) { return p > 0.0f ? (keep[j] ? dr * ks : 0.0f) : dr; };
    row_for(s, d, N,
            [&](int j) {
                float dr = grad(j, ld(dyi, j), ld(ri, j));
                st(dxi, j, dr);
                st(dsi, j, drop(j, dr));
            },
            [&](int j0) {
                Pack<A> gv = ldp(dyi + j0), rv = ldp(ri + j0), xv, sv;
                for (int e = 0; e < N; e++) {
                    float dr = grad(j0 + e, to_float(gv.v[e]), to_float(rv.v[e]));
                    xv.v[e] = from_float<A>(dr);
                    sv.v[e] = from_float<A>(drop(j0 + e, dr));
                }
                stp(dxi + j0, xv);
                stp(dsi + j0, sv);
            });
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
        DECLARE_KERNEL(k_residual_ln_backward<A>, "residual_ln_backward", 2 * 16,
                       2 * e * sizeof(A) + 2.0 * rows * sizeof(float) + d * sizeof(float) +
                           (p > 0 ? rows / T * sizeof(uint32_t) : 0),
                       2 * e * sizeof(A), 12 * e + (p > 0 ? 25 * e : 0));
        LAUNCH(k_residual_ln_backward<A>, rows, row_threads(d / Pack<A>::N), row_drop_smem(d, p), IMPL(be)->stream, tp<A>(dx),
               tp<A>(dsub), tp<A>(dy), tp<A>(r), mean, rstd, gamma, d, p, drop_scale(p), drop_arg(IMPL(be), key), sent_id, T);
    });
    CKL();
}
