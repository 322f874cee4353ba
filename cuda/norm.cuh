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

/* the warp-per-row kernels: a warp a row, lanes owning packs lane + 32 q */
#define LNF_WARPS 4                      /* rows (warps) per block of the forward */
#define LNB_WARPS 4                      /* warps per block of the backward */
#define LNB_RPW 8                        /* rows a warp walks, at most (ln_rows_per_warp) */
#define LNB_MAXP 4                       /* packs per lane at most */

/* whether the warp-per-row kernels (forward and backward) take rows of d
 * elements of size e at these addresses: 16-byte packs, at most
 * LNB_MAXP per lane */
static bool ln_rows_fit(int d, size_t e, std::initializer_list<const void *> p)
{
    size_t n = 16 / e;
    if (d <= 0 || d % n || (size_t)d > 32 * LNB_MAXP * n) return false;
    for (const void *q : p)
        if ((uintptr_t)q & 15) return false;
    return true;
}

/* The same forward a warp per row (the backward's layout below: lanes
 * own packs lane + 32 q of the row), for rows that fit it (ln_rows_fit):
 * the row's sums are warp shuffles instead of the block barriers above,
 * the dropout keep-flags come from dropout_keep4 for the lane's own packs,
 * and the rounded r stays in registers for the variance and y.  The mean
 * is of the unrounded sums, as above. */
template <typename A, int P>
static __device__ __forceinline__ void ln_forward_rows(A *y, A *r, float *mean, float *rstd, const A *x, const A *sub,
                                                       const float *gamma, const float *beta, int rows, int d,
                                                       float eps, float p, float ks, DropArg key_arg,
                                                       const uint32_t *sent_id, int T)
{
    constexpr int N = Pack<A>::N;
    const DropoutKey key = drop_key(key_arg);
    int lane = threadIdx.x & 31, np = d / N;
    long i = (long)blockIdx.x * LNF_WARPS + (threadIdx.x >> 5);
    if (i >= rows) return;   /* warp-uniform; no barriers */
    uint32_t sent = p > 0.0f ? ld(sent_id, i / T) : 0, pos = (uint32_t)(i % T);
    Pack<A> rv[P];
    float sum = 0.0f;
UNROLL
    for (int q = 0; q < P; q++) {
        int j0 = (lane + 32 * q) * N;
        if (lane + 32 * q >= np) continue;
        Pack<A> xv = ldp(x + i * d + j0), sv = ldp(sub + i * d + j0);
        unsigned keep = 0;
        for (int e = 0; e < N; e++) {
            if (p > 0.0f && e % 4 == 0) keep = dropout_keep4(key, p, sent, pos, (uint32_t)(j0 + e) / 4);
            float s_ = to_float(sv.v[e]);
            float v = to_float(xv.v[e]) + (p > 0.0f ? ((keep >> (e % 4)) & 1 ? s_ * ks : 0.0f) : s_);
            rv[q].v[e] = from_float<A>(v);
            sum += v;
        }
        stp(r + i * d + j0, rv[q]);
    }
    float mu = warp_sum(sum) / d, var = 0.0f;
UNROLL
    for (int q = 0; q < P; q++)
        if (lane + 32 * q < np)
            for (int e = 0; e < N; e++) var += (to_float(rv[q].v[e]) - mu) * (to_float(rv[q].v[e]) - mu);
    float rs = 1.0f / sqrtf(warp_sum(var) / d + eps);
    if (lane == 0) {
        st(mean, i, mu);
        st(rstd, i, rs);
    }
UNROLL
    for (int q = 0; q < P; q++) {
        int j0 = (lane + 32 * q) * N;
        if (lane + 32 * q >= np) continue;
        Pack<A> yv;
        for (int e = 0; e < N; e++)
            yv.v[e] = from_float<A>((to_float(rv[q].v[e]) - mu) * rs * ld(gamma, j0 + e) + ld(beta, j0 + e));
        stp(y + i * d + j0, yv);
    }
}

#define LNF_KERNEL(name, P)                                                                                           \
    template <typename A>                                                                                            \
    static __global__ void __launch_bounds__(32 * LNF_WARPS)                                                         \
        name(A *y, A *r, float *mean, float *rstd, const A *x, const A *sub, const float *gamma, const float *beta, \
             int rows, int d, float eps, float p, float ks, DropArg key_arg, const uint32_t *sent_id, int T)       \
    {                                                                                                                \
        ln_forward_rows<A, P>(y, r, mean, rstd, x, sub, gamma, beta, rows, d, eps, p, ks, key_arg, sent_id, T);    \
    }
LNF_KERNEL(k_residual_ln_forward_rows, 2)
LNF_KERNEL(k_residual_ln_forward_rows_wide, LNB_MAXP)

static void cuda_residual_ln_forward(Backend *be, Act y, Act r, float *mean, float *rstd, Act x, Act sub,
                                     const float *gamma, const float *beta, int rows, int d, float eps, float p,
                                     DropoutKey key, const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    bool fit = ln_rows_fit(d, dtype_size(x.dtype), { y.data, r.data, x.data, sub.data });
    dispatch(act_type("residual_ln_forward", { y, r, x, sub }), [&](auto z) {
        using A = decltype(z);
        /* x and sub read, r and y written, once each (r is re-read from
         * cache, or kept in registers); gamma, beta, the sentence ids; mean
         * and rstd written.  FLOPs: ~8 per element, and the dropout bits
         * (a Philox call of ~100 integer operations per 4 features) */
        double e = (double)rows * d, packs = std::min(LNB_MAXP, (d / Pack<A>::N + 31) / 32);
        double rd = 2 * e * sizeof(A) + 2.0 * d * sizeof(float) + (p > 0 ? rows / T * sizeof(uint32_t) : 0);
        double wr = 2 * e * sizeof(A) + 2.0 * rows * sizeof(float), flop = 8 * e + (p > 0 ? 25 * e : 0);
        unsigned blocks = (unsigned)((rows + LNF_WARPS - 1) / LNF_WARPS);
        if (fit && d / Pack<A>::N <= 64) {
            DECLARE_KERNEL(k_residual_ln_forward_rows<A>, "residual_ln_forward", packs * 2 * 16, rd, wr, flop);
            LAUNCH(k_residual_ln_forward_rows<A>, blocks, 32 * LNF_WARPS, 0, IMPL(be)->stream, tp<A>(y), tp<A>(r),
                   mean, rstd, tp<A>(x), tp<A>(sub), gamma, beta, rows, d, eps, p, drop_scale(p),
                   drop_arg(IMPL(be), key), sent_id, T);
        } else if (fit) {
            DECLARE_KERNEL(k_residual_ln_forward_rows_wide<A>, "residual_ln_forward", packs * 2 * 16, rd, wr, flop);
            LAUNCH(k_residual_ln_forward_rows_wide<A>, blocks, 32 * LNF_WARPS, 0, IMPL(be)->stream, tp<A>(y),
                   tp<A>(r), mean, rstd, tp<A>(x), tp<A>(sub), gamma, beta, rows, d, eps, p, drop_scale(p),
                   drop_arg(IMPL(be), key), sent_id, T);
        } else {
            DECLARE_KERNEL(k_residual_ln_forward<A>, "residual_ln_forward", 2 * 16, rd, wr, flop);
            LAUNCH(k_residual_ln_forward<A>, rows, row_threads(d / Pack<A>::N), row_drop_smem(d, p),
                   IMPL(be)->stream, tp<A>(y), tp<A>(r), mean, rstd, tp<A>(x), tp<A>(sub), gamma, beta, d, eps, p,
                   drop_scale(p), drop_arg(IMPL(be), key), sent_id, T);
        }
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

/* The same backward a warp per row, with the LayerNorm's parameter
 * gradients (dgamma = sum dy xhat, dbeta = sum dy over the rows) added up
 * on the way into the warp's column sums in shared memory, and one row of
 * chunk partials per block for colsum_final (gemm.cuh); with part_s also
 * the column sums of dsub as stored (the FFN's b2 gradient: colsums' pass
 * over dsub and its launches gone).  This replaces
 * colsums' second read of dy and r (k_colsum_partial, 51 MB a call for
 * base at 25,010 tokens; issue 44, fewer memory-bound passes).  The row's
 * reductions are warp shuffles, without the block barriers of the kernel
 * above; the dropout keep-flags come from dropout_keep4 for the lane's own
 * packs (the flags drop_mask_row gives).  The column sums sit in shared
 * memory, not registers: in registers they took 160-207 a thread (ptxas),
 * one block an SM.  Their layout [warp][dgamma, dbeta][e][pack] puts a
 * warp's 32 lanes on 32 banks.  Rows of d = N x (at most 32 LNB_MAXP)
 * elements in 16-byte packs, the arrays 16-byte aligned (ln_rows_fit); dx
 * may alias dy (a lane reads its packs of a row before it writes them). */
static size_t ln_rows_smem(int d, int sums) { return (size_t)LNB_WARPS * sums * d * sizeof(float); }

/* the block's row of chunk partials: the warps' column sums (dgamma,
 * dbeta and, with part_s, dsub's) added in warp order, deterministic */
template <int N>
static __device__ __forceinline__ void ln_rows_partials(const float *sh, int d, int sums, float *part_g,
                                                        float *part_b, float *part_s)
{
    int np = d / N;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        int at = j % N * np + j / N;   /* element e of pack k at e np + k */
        float g = 0.0f, b = 0.0f, s = 0.0f;
        for (int w = 0; w < LNB_WARPS; w++) {
            g += sh[(size_t)w * sums * d + at];
            b += sh[(size_t)w * sums * d + d + at];
            if (part_s) s += sh[(size_t)w * sums * d + 2 * d + at];
        }
        st(part_g, (size_t)blockIdx.x * d + j, g);
        st(part_b, (size_t)blockIdx.x * d + j, b);
        if (part_s) st(part_s, (size_t)blockIdx.x * d + j, s);
    }
}

template <typename A, int P>
static __device__ __forceinline__ void ln_backward_rows(A *dx, A *dsub, const A *dy, const A *r, const float *mean,
                                                        const float *rstd, const float *gamma, int rows, int d,
                                                        float p, float ks, DropArg key_arg, const uint32_t *sent_id,
                                                        int T, int rpw, float *part_g, float *part_b,
                                                        float *part_s)
{
    constexpr int N = Pack<A>::N;
    DYNAMIC_SHARED(float, sh);   /* [LNB_WARPS][sums: 2, or 3 with part_s][N][d / N] */
    const DropoutKey key = drop_key(key_arg);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, np = d / N, sums = part_s ? 3 : 2;
    /* this warp's sums (dgamma, dbeta, dsub): element e of pack k at e np + k */
    float *sg = sh + (size_t)warp * sums * d, *sb = sg + d, *ss = sg + 2 * d;
UNROLL
    for (int q = 0; q < P; q++)
        if (lane + 32 * q < np)
            for (int e = 0; e < N; e++) {
                sg[e * np + lane + 32 * q] = sb[e * np + lane + 32 * q] = 0.0f;
                if (part_s) ss[e * np + lane + 32 * q] = 0.0f;
            }
    for (int k = 0; k < rpw; k++) {
        long i = ((long)blockIdx.x * rpw + k) * LNB_WARPS + warp;
        if (i >= rows) break;   /* warp-uniform; no barrier inside the loop */
        float mu = ld(mean, i), rs = ld(rstd, i), m1 = 0.0f, m2 = 0.0f;
UNROLL
        for (int q = 0; q < P; q++) {
            int pk = lane + 32 * q, j0 = pk * N;
            if (pk >= np) continue;
            Pack<A> gv = ldp(dy + i * d + j0), rv = ldp(r + i * d + j0);
            for (int e = 0; e < N; e++) {
                float g = to_float(gv.v[e]), xh = (to_float(rv.v[e]) - mu) * rs, gg = g * ld(gamma, j0 + e);
                m1 += gg;
                m2 += gg * xh;
                sg[e * np + pk] += g * xh;
                sb[e * np + pk] += g;
            }
        }
        m1 = warp_sum(m1) / d;
        m2 = warp_sum(m2) / d;
        uint32_t sent = p > 0.0f ? ld(sent_id, i / T) : 0, pos = (uint32_t)(i % T);
UNROLL
        for (int q = 0; q < P; q++) {
            int pk = lane + 32 * q, j0 = pk * N;
            if (j0 >= d) continue;
            Pack<A> gv = ldp(dy + i * d + j0), rv = ldp(r + i * d + j0), xv, sv;   /* again, from cache */
            unsigned keep = 0;
            for (int e = 0; e < N; e++) {
                if (p > 0.0f && e % 4 == 0) keep = dropout_keep4(key, p, sent, pos, (uint32_t)(j0 + e) / 4);
                float xh = (to_float(rv.v[e]) - mu) * rs;
                float dr = rs * (to_float(gv.v[e]) * ld(gamma, j0 + e) - m1 - xh * m2);
                xv.v[e] = from_float<A>(dr);
                sv.v[e] = from_float<A>(p > 0.0f ? ((keep >> (e % 4)) & 1 ? dr * ks : 0.0f) : dr);
                if (part_s) ss[e * np + pk] += to_float(sv.v[e]);   /* the value the GEMMs read */
            }
            stp(dx + i * d + j0, xv);
            stp(dsub + i * d + j0, sv);
        }
    }
    __syncthreads();
    ln_rows_partials<N>(sh, d, sums, part_g, part_b, part_s);
}

/* P packs per lane at most: the narrow kernel for rows of up to 64 packs
 * (bf16 d_model 512), the wide one up to LNB_MAXP x 32 (d_model 1024):
 * ptxas gives each the registers of its own P */
#define LNB_KERNEL(name, P, B)                                                                                       \
    template <typename A>                                                                                           \
    static __global__ void __launch_bounds__(32 * LNB_WARPS, B)                                                     \
        name(A *dx, A *dsub, const A *dy, const A *r, const float *mean, const float *rstd, const float *gamma,    \
             int rows, int d, float p, float ks, DropArg key_arg, const uint32_t *sent_id, int T, int rpw,      \
             float *part_g, float *part_b, float *part_s)                                                           \
    {                                                                                                               \
        ln_backward_rows<A, P>(dx, dsub, dy, r, mean, rstd, gamma, rows, d, p, ks, key_arg, sent_id, T, rpw,      \
                               part_g, part_b, part_s);                                                             \
    }
LNB_KERNEL(k_residual_ln_backward_rows, 2, 6)
LNB_KERNEL(k_residual_ln_backward_rows_wide, LNB_MAXP, 1)

/* the warp-per-row backward and its parameter gradients (colsum_final of
 * the chunk partials; with dbias_sub also dsub's column sums) */
static void residual_ln_backward_rows(Backend *be, Act dx, Act dsub, float *dgamma, float *dbeta, float *dbias_sub,
                                      Act dy, Act r, const float *mean, const float *rstd, const float *gamma,
                                      int rows, int d, float p, DropoutKey key, const uint32_t *sent_id, int T)
{
    /* rows a warp walks: LNB_RPW where the rows fill the GPU anyway (base's
     * 25,010: 782 blocks), fewer for small batches (Table 3's base', ~2000
     * rows: 1 a warp, 490 blocks, not 62), so that a small step keeps
     * blocks on every SM; each block's rows are a chunk of partials */
    int rpw = std::max(1, std::min(LNB_RPW, rows / (LNB_WARPS * 512)));
    int chunk_rows = LNB_WARPS * rpw, chunks = (rows + chunk_rows - 1) / chunk_rows, sums = dbias_sub ? 3 : 2;
    float *part = part_buffer(be, sums * (size_t)chunks * d, "residual_ln_backward");
    float *pg = part, *pb = part + (size_t)chunks * d, *ps = dbias_sub ? part + 2 * (size_t)chunks * d : NULL;
    dispatch(act_type("residual_ln_backward", { dx, dsub, dy, r }), [&](auto z) {
        using A = decltype(z);
        /* dy and r read (the second pass re-reads a lane's packs from
         * cache), dx and dsub written (dx may be dy); mean, rstd, gamma;
         * the chunk partials of dgamma and dbeta (and dsub's sums).  In
         * flight: a lane's packs of dy and r */
        double e = (double)rows * d, packs = std::min(LNB_MAXP, (d / Pack<A>::N + 31) / 32);
        double rd = 2 * e * sizeof(A) + 2.0 * rows * sizeof(float) + d * sizeof(float) +
                    (p > 0 ? rows / T * sizeof(uint32_t) : 0);
        double wr = 2 * e * sizeof(A) + (double)sums * chunks * d * sizeof(float);
        double flop = (dbias_sub ? 17 : 16) * e + (p > 0 ? 25 * e : 0);
        if (d / Pack<A>::N <= 64) {
            DECLARE_KERNEL(k_residual_ln_backward_rows<A>, "residual_ln_backward", packs * 2 * 16, rd, wr, flop);
            LAUNCH(k_residual_ln_backward_rows<A>, chunks, 32 * LNB_WARPS, ln_rows_smem(d, sums), IMPL(be)->stream,
                   tp<A>(dx), tp<A>(dsub), tp<A>(dy), tp<A>(r), mean, rstd, gamma, rows, d, p, drop_scale(p),
                   drop_arg(IMPL(be), key), sent_id, T, rpw, pg, pb, ps);
        } else {
            DECLARE_KERNEL(k_residual_ln_backward_rows_wide<A>, "residual_ln_backward", packs * 2 * 16, rd, wr, flop);
            LAUNCH(k_residual_ln_backward_rows_wide<A>, chunks, 32 * LNB_WARPS, ln_rows_smem(d, sums),
                   IMPL(be)->stream, tp<A>(dx), tp<A>(dsub), tp<A>(dy), tp<A>(r), mean, rstd, gamma, rows, d, p,
                   drop_scale(p), drop_arg(IMPL(be), key), sent_id, T, rpw, pg, pb, ps);
        }
    });
    CKL();
    colsum_final(be, pg, chunks, d, dgamma, dbeta, dbias_sub);   /* pb follows pg, ps pb */
}

static void cuda_residual_ln_backward(Backend *be, Act dx, Act dsub, float *dgamma, float *dbeta, float *dbias_sub,
                                      Act dy, Act r, const float *mean, const float *rstd, const float *gamma,
                                      int rows, int d, float p, DropoutKey key, const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    if (ln_rows_fit(d, dtype_size(dy.dtype), { dx.data, dsub.data, dy.data, r.data })) {
        residual_ln_backward_rows(be, dx, dsub, dgamma, dbeta, dbias_sub, dy, r, mean, rstd, gamma, rows, d, p, key,
                                  sent_id, T);
        return;
    }
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
    if (dbias_sub) cuda_bias_backward(be, dsub, dbias_sub, act_none(), rows, d, 0);   /* as the CPU's */
}
