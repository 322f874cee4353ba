/* The fused attention core on tensor cores (issue 44, section 1) for
 * 16-bit storage: the products Q K^T, P V and those of backward as
 * nvcuda::wmma 16 x 16 x 16 tiles (bf16 or fp16 inputs, fp32
 * accumulators), the softmax and its statistics in fp32, as
 * attention.cuh's kernels on the CUDA cores, which fp32 keeps (the exact
 * reference, no 16-bit inputs to round to).  Same masks, outputs and
 * limits as attention.cuh, and the same blocks but for the one-kernel
 * backward of short sentences (below); deterministic, no atomics.
 *
 * What differs from the CUDA-core kernels in 16-bit: the tensor cores
 * multiply 16-bit inputs, so P is rounded to T before P V (the GEMM path
 * rounds it too: it stores P and reads it back), and so is dS before dQ
 * and dK (as attention.cuh does).  The products are exact in fp32 and the
 * sums fp32, in an order that differs from the CPU's.
 *
 * Shared memory holds 16-bit tiles padded to multiples of 16 (zeros past
 * the lengths, so a partial tile adds nothing), with rows of TC_SKEW more
 * elements (wmma wants ldm a multiple of 16 bytes and 32-byte aligned
 * tiles; the skew also spreads a tile's rows over the banks).  At the
 * limits (d_k = d_v = 128, 256 keys) the forward and the dQ kernel use
 * 16*136*2 + 16*260*4 + 16*264*2 + 64*136*2 = 46,848 bytes, the dK, dV
 * kernel 2*64*24*2 + 2*64*136*2 = 40,960: under the 48 KiB of a block
 * without the opt-in.  Backward is one kernel, a block per (sentence,
 * head), where Tq, Tk, d_k and d_v are all at most TC_BWD_MAX = 64
 * (3*64*72*2 + 64*68*4 = 45,056 bytes there: k_attention_backward_tc),
 * the dQ kernel and the dK, dV kernel beyond. */
#pragma once

#ifndef CUDA_EMULATION
#include <mma.h>   /* the emulator's is cuda/emu/wmma.h */
#endif

#define TC_QT 16    /* queries per block (one tile row) */
#define TC_KC 64    /* keys (forward, dQ) or queries (dK, dV) per staged chunk: a tile per warp */
#define TC_KB 16    /* keys per block of the dK, dV kernel */
#define TC_SKEW 8   /* extra elements per 16-bit shared row */
#define TC_FSKEW 4  /* extra floats per fp32 shared row */
#define TC_TILES 4  /* output tiles a warp holds at most: (128 + 128) / 16 / FA_WARPS */

/* bf16 tensor-core instructions exist from sm_80; an sm_75 build's bf16
 * kernels are empty (the backend refuses bf16 before 8.0, rule CC) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TC_HAS(T) (!std::is_same<T, __nv_bfloat16>::value)
#else
#define TC_HAS(T) true
#endif

static __host__ __device__ __forceinline__ int tc_up(int n) { return (n + 15) & ~15; }

namespace wmma = nvcuda::wmma;
namespace tc {
template <typename T> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major>;
template <typename T> using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
}

/* rows [0, rows) x cols [0, cols) of shared s (row stride ss) from a
 * strided matrix, zero past nr rows and nc columns; FA_DEEP loads in
 * flight per thread as fa_stage */
template <typename T>
static __device__ __forceinline__ void tc_stage(T *s, int ss, const T *g, long ldg, int rows, int nr, int cols, int nc)
{
    int n = rows * cols;
    for (int i0 = threadIdx.x; i0 < n; i0 += FA_DEEP * blockDim.x) {
        float v[FA_DEEP];
UNROLL
        for (int u = 0; u < FA_DEEP; u++) {
            int i = i0 + u * blockDim.x, r = i / cols, c = i % cols;
            v[u] = i < n && r < nr && c < nc ? ld(g, r * ldg + c) : 0.0f;
        }
UNROLL
        for (int u = 0; u < FA_DEEP; u++) {
            int i = i0 + u * blockDim.x;
            if (i < n) s[i / cols * ss + i % cols] = from_float<T>(v[u]);
        }
    }
}

/* out[0..16)[k0 + 16 w ..] = a (16 x d, row major) times the transpose of
 * the staged chunk's key tile w (chunk rows are keys): each warp one tile
 * of TC_KC / 16 */
template <typename T>
static __device__ __forceinline__ void tc_rows_by_chunk_t(float *out, int so, const T *a, int sa, const T *chunk, int sc,
                                                         int keys, int d)
{
    int w = threadIdx.x >> 5;
    if (16 * w >= keys) return;
    tc::Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int d0 = 0; d0 < d; d0 += 16) {
        tc::FragA<T> fa;
        tc::FragBt<T> fb;
        wmma::load_matrix_sync(fa, a + d0, sa);
        wmma::load_matrix_sync(fb, chunk + 16 * w * sc + d0, sc);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + 16 * w, acc, so, wmma::mem_row_major);
}

/* acc[i] (output column tile w + FA_WARPS i) += a[0..16)[0..keys) (row
 * major, from column k0) times the staged chunk (keys x d, row major) */
template <typename T>
static __device__ __forceinline__ void tc_rows_times_chunk(tc::Acc *acc, const T *a, int sa, const T *chunk, int sc,
                                                          int keys, int d)
{
    int w = threadIdx.x >> 5;
UNROLL
    for (int i = 0; i < 2; i++) {
        int t = w + FA_WARPS * i;
        if (16 * t >= d) continue;
        for (int k = 0; k < keys; k += 16) {
            tc::FragA<T> fa;
            tc::FragB<T> fb;
            wmma::load_matrix_sync(fa, a + k, sa);
            wmma::load_matrix_sync(fb, chunk + k * sc + 16 * t, sc);
            wmma::mma_sync(acc[i], fa, fb, acc[i]);
        }
    }
}

/* the warp's output tiles (as tc_rows_times_chunk's) through fp32 shared
 * memory (stride so) into rows [0, nr) x columns [0, nc) of g, times
 * scale; the caller syncs the block before (out is free) */
template <typename T>
static __device__ __forceinline__ void tc_store_rows(tc::Acc *acc, float *out, int so, T *g, long ldg, int nr, int nc,
                                                    int d, float scale)
{
    int w = threadIdx.x >> 5;
UNROLL
    for (int i = 0; i < 2; i++) {
        int t = w + FA_WARPS * i;
        if (16 * t < d) wmma::store_matrix_sync(out + 16 * t, acc[i], so, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nr * nc; i += blockDim.x)
        st(g, (long)(i / nc) * ldg + i % nc, scale * out[i / nc * so + i % nc]);
}

/* eq. 1's softmax of one raw score s (Q K^T, fp32) of a row whose largest
 * scaled score is mx: exp(scale s - mx); times the row's 1/sum it is the
 * weight.  The forward and the backward that recomputes P (stats) call
 * these two, so that both round the same fp32 value to T */
static __device__ __forceinline__ float tc_softmax_exp(float s, float scale, float mx) { return expf(scale * s - mx); }
template <typename T> static __device__ __forceinline__ T tc_weight(float e, float inv) { return from_float<T>(e * inv); }

/* ---------------------------------------------------------------- forward */

/* grid and masks as k_attention_forward; shared: Q [16][dkp+8] (T),
 * scores [16][tkp+4] (fp32), P [16][tkp+8] (T), a K or V chunk
 * [64][dmp+8] (T), where xp is x rounded up to 16.  With stats, each
 * row's maximum and 1/sum go there ([row][2]) and P is not stored: the
 * one-kernel backward recomputes it (tc_recompute_p) */
template <typename T>
static __device__ __forceinline__ void tc_forward(const T *Q, int ldq, const T *K, const T *V, int ldkv, T *P,
                                                  float *stats, T *ctx, const int32_t *key_len, float scale, int nh,
                                                  int dk, int dv, int Tq, int Tk, int causal)
{
    DYNAMIC_SHARED(unsigned char, sh);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, q0 = blockIdx.y * TC_QT, nq = fa_min(TC_QT, Tq - q0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, dkp = tc_up(dk), dvp = tc_up(dv), tkp = tc_up(Tk);
    int sq = dkp + TC_SKEW, sss = tkp + TC_FSKEW, sp = tkp + TC_SKEW, sc = fa_max(dkp, dvp) + TC_SKEW;
    T *qs = (T *)sh, *ps = qs + TC_QT * sq + TC_QT * 2 * sss, *chunk = ps + TC_QT * sp;
    float *ss = (float *)(qs + TC_QT * sq);
    const T *Kb = K + (long)b * Tk * ldkv + hd * dk, *Vb = V + (long)b * Tk * ldkv + hd * dv;
    tc_stage(qs, sq, Q + ((long)b * Tq + q0) * ldq + hd * dk, ldq, TC_QT, nq, dkp, dk);
    for (int c0 = 0; c0 < tkp; c0 += TC_KC) {   /* raw scores Q K^T, fp32 */
        __syncthreads();   /* the previous chunk is read (and, first, the queries staged) */
        tc_stage(chunk, sc, Kb + (long)c0 * ldkv, ldkv, TC_KC, Tk - c0, dkp, dk);
        __syncthreads();
        tc_rows_by_chunk_t(ss + c0, sss, qs, sq, chunk, sc, fa_min(TC_KC, tkp - c0), dkp);
    }
    __syncthreads();
    T *Pb = P + (((long)b * nh + hd) * Tq + q0) * Tk;
    for (int r = warp; r < TC_QT; r += FA_WARPS) {   /* softmax over the valid keys; masked ones exact 0 */
        float *s = ss + r * sss, mx = -INFINITY, sum = 0.0f;
        int n = r < nq ? fa_keys(key_len, b, q0 + r, Tk, causal) : 0;
        for (int k = lane; k < n; k += 32) mx = fmaxf(mx, scale * s[k]);
        mx = warp_max(mx);
        for (int k = lane; k < n; k += 32) {
            s[k] = tc_softmax_exp(s[k], scale, mx);
            sum += s[k];
        }
        sum = warp_sum(sum);
        float inv = n > 0 ? 1.0f / sum : 0.0f;
        for (int k = lane; k < tkp; k += 32) {
            T p = k < n ? tc_weight<T>(s[k], inv) : from_float<T>(0.0f);
            ps[r * sp + k] = p;
            if (!stats && r < nq && k < Tk) st(Pb, (long)r * Tk + k, to_float(p));
        }
        if (stats && r < nq && lane == 0) {
            long row = ((long)b * nh + hd) * Tq + q0 + r;
            st(stats, 2 * row, mx);
            st(stats, 2 * row + 1, inv);
        }
    }
    tc::Acc acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int c0 = 0; c0 < tkp; c0 += TC_KC) {   /* ctx = P V, P rounded to T */
        __syncthreads();   /* P written; every warp done with the K or the previous V chunk */
        tc_stage(chunk, sc, Vb + (long)c0 * ldkv, ldkv, TC_KC, Tk - c0, dvp, dv);
        __syncthreads();
        tc_rows_times_chunk(acc, ps + c0, sp, chunk, sc, fa_min(TC_KC, tkp - c0), dvp);
    }
    __syncthreads();   /* the fp32 staging of ctx runs over P and the chunk (16 (dvp + 4) floats fit) */
    tc_store_rows(acc, ss, dvp + TC_FSKEW, ctx + ((long)b * Tq + q0) * nh * dv + hd * dv, (long)nh * dv, nq, dv, dvp,
                  1.0f);
}

template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_forward_tc(const T *Q, int ldq, const T *K, const T *V, int ldkv, T *P, float *stats, T *ctx,
                           const int32_t *key_len, float scale, int nh, int dk, int dv, int Tq, int Tk, int causal)
{
    if constexpr (TC_HAS(T))
        tc_forward(Q, ldq, K, V, ldkv, P, stats, ctx, key_len, scale, nh, dk, dv, Tq, Tk, causal);
}

/* ------------------------------------------------------- backward: dS, dQ */

/* grid as the forward's; shared as the forward's with dctx [16][dvp+8] in
 * place of Q, dP in place of the scores and dS (T) in place of P.  dS is
 * stored rounded to T and dQ computed from the rounded values, so that dQ
 * and dK (next kernel) are the gradients of one dS (as attention.cuh) */
template <typename T>
static __device__ __forceinline__ void tc_backward_dq(const T *K, const T *V, int ldkv, const T *P, T *dS,
                                                      const T *dctx, T *dQ, int ldq, float scale, int nh, int dk,
                                                      int dv, int Tq, int Tk)
{
    DYNAMIC_SHARED(unsigned char, sh);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, q0 = blockIdx.y * TC_QT, nq = fa_min(TC_QT, Tq - q0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, dkp = tc_up(dk), dvp = tc_up(dv), tkp = tc_up(Tk);
    int sd = dvp + TC_SKEW, sss = tkp + TC_FSKEW, sp = tkp + TC_SKEW, sc = fa_max(dkp, dvp) + TC_SKEW, hv = nh * dv;
    T *dcs = (T *)sh, *dss = dcs + TC_QT * sd + TC_QT * 2 * sss, *chunk = dss + TC_QT * sp;
    float *dps = (float *)(dcs + TC_QT * sd);
    const T *Kb = K + (long)b * Tk * ldkv + hd * dk, *Vb = V + (long)b * Tk * ldkv + hd * dv;
    tc_stage(dcs, sd, dctx + ((long)b * Tq + q0) * hv + hd * dv, hv, TC_QT, nq, dvp, dv);
    for (int c0 = 0; c0 < tkp; c0 += TC_KC) {   /* dP = dctx V^T */
        __syncthreads();
        tc_stage(chunk, sc, Vb + (long)c0 * ldkv, ldkv, TC_KC, Tk - c0, dvp, dv);
        __syncthreads();
        tc_rows_by_chunk_t(dps + c0, sss, dcs, sd, chunk, sc, fa_min(TC_KC, tkp - c0), dvp);
    }
    __syncthreads();
    long off = (((long)b * nh + hd) * Tq + q0) * Tk;
    for (int r = warp; r < TC_QT; r += FA_WARPS) {   /* dS = P (dP - sum_k P dP) (softmax_backward) */
        float *d = dps + r * sss, dot = 0.0f;
        int n = r < nq ? Tk : 0;
        for (int k = lane; k < n; k += 32) dot += ld(P, off + (long)r * Tk + k) * d[k];
        dot = warp_sum(dot);
        for (int k = lane; k < tkp; k += 32) {
            T v = from_float<T>(k < n ? ld(P, off + (long)r * Tk + k) * (d[k] - dot) : 0.0f);
            dss[r * sp + k] = v;
            if (k < n) st(dS, off + (long)r * Tk + k, to_float(v));
        }
    }
    tc::Acc acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int c0 = 0; c0 < tkp; c0 += TC_KC) {   /* dQ = dS K / sqrt(d_k) */
        __syncthreads();
        tc_stage(chunk, sc, Kb + (long)c0 * ldkv, ldkv, TC_KC, Tk - c0, dkp, dk);
        __syncthreads();
        tc_rows_times_chunk(acc, dss + c0, sp, chunk, sc, fa_min(TC_KC, tkp - c0), dkp);
    }
    __syncthreads();   /* the fp32 staging of dQ runs over dS and the chunk */
    tc_store_rows(acc, dps, dkp + TC_FSKEW, dQ + ((long)b * Tq + q0) * ldq + hd * dk, ldq, nq, dk, dkp, scale);
}

template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_backward_dq_tc(const T *K, const T *V, int ldkv, const T *P, T *dS, const T *dctx, T *dQ, int ldq,
                               float scale, int nh, int dk, int dv, int Tq, int Tk)
{
    if constexpr (TC_HAS(T)) tc_backward_dq(K, V, ldkv, P, dS, dctx, dQ, ldq, scale, nh, dk, dv, Tq, Tk);
}

/* --------------------------------------------------- backward: dK and dV */

/* the warp's tiles of [dV | dK] (16 keys x (dvp + dkp), tile t = warp +
 * FA_WARPS i) += P^T dctx and dS^T Q over one staged chunk of nq16
 * queries: P and dS [query][key] are read column major as P^T, dS^T */
template <typename T>
static __device__ __forceinline__ void tc_dkv_chunk(tc::Acc *acc, const T *pts, const T *dsts, const T *dcs, int sd,
                                                    const T *qs, int sq, int nq16, int dvp, int dkp)
{
    int w = threadIdx.x >> 5, nvt = dvp / 16, nt = nvt + dkp / 16;
UNROLL
    for (int i = 0; i < TC_TILES; i++) {
        int t = w + FA_WARPS * i;
        if (t >= nt) continue;
        bool v = t < nvt;
        for (int q = 0; q < nq16; q += 16) {
            tc::FragAt<T> fa;
            tc::FragB<T> fb;
            wmma::load_matrix_sync(fa, (v ? pts : dsts) + q * (TC_KB + TC_SKEW), TC_KB + TC_SKEW);
            if (v) wmma::load_matrix_sync(fb, dcs + q * sd + 16 * t, sd);
            else wmma::load_matrix_sync(fb, qs + q * sq + 16 * (t - nvt), sq);
            wmma::mma_sync(acc[i], fa, fb, acc[i]);
        }
    }
}

/* grid (n_batch * n_heads, key tiles of 16); shared: P and dS of a chunk
 * of 64 queries x the block's 16 keys [64][24], dctx [64][dvp+8] and Q
 * [64][dkp+8] of the chunk (T) */
template <typename T>
static __device__ __forceinline__ void tc_backward_dkv(const T *Q, int ldq, const T *P, const T *dS, const T *dctx, T *dK,
                                                       T *dV, int ldkv, float scale, int nh, int dk, int dv, int Tq,
                                                       int Tk)
{
    DYNAMIC_SHARED(unsigned char, sh);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, k0 = blockIdx.y * TC_KB, nk = fa_min(TC_KB, Tk - k0);
    int w = threadIdx.x >> 5, dkp = tc_up(dk), dvp = tc_up(dv), hv = nh * dv, nvt = dvp / 16;
    int st_ = TC_KB + TC_SKEW, sd = dvp + TC_SKEW, sq = dkp + TC_SKEW;
    T *pts = (T *)sh, *dsts = pts + TC_KC * st_, *dcs = dsts + TC_KC * st_, *qs = dcs + TC_KC * sd;
    long off = ((long)b * nh + hd) * Tq * Tk + k0;
    tc::Acc acc[TC_TILES];
UNROLL
    for (int i = 0; i < TC_TILES; i++) wmma::fill_fragment(acc[i], 0.0f);
    for (int q0 = 0; q0 < Tq; q0 += TC_KC) {
        int nq = fa_min(TC_KC, Tq - q0);
        __syncthreads();   /* the previous chunk is read */
        tc_stage(pts, st_, P + off + (long)q0 * Tk, Tk, TC_KC, nq, TC_KB, nk);
        tc_stage(dsts, st_, dS + off + (long)q0 * Tk, Tk, TC_KC, nq, TC_KB, nk);
        tc_stage(dcs, sd, dctx + ((long)b * Tq + q0) * hv + hd * dv, hv, TC_KC, nq, dvp, dv);
        tc_stage(qs, sq, Q + ((long)b * Tq + q0) * ldq + hd * dk, ldq, TC_KC, nq, dkp, dk);
        __syncthreads();
        tc_dkv_chunk(acc, pts, dsts, dcs, sd, qs, sq, tc_up(nq), dvp, dkp);
    }
    __syncthreads();   /* fp32 staging: dV over dcs, dK over qs (16 (x + 4) floats fit in 64 (x + 8) T) */
    float *ov = (float *)dcs, *ok = (float *)qs;
UNROLL
    for (int i = 0; i < TC_TILES; i++) {
        int t = w + FA_WARPS * i;
        if (t < nvt) wmma::store_matrix_sync(ov + 16 * t, acc[i], dvp + TC_FSKEW, wmma::mem_row_major);
        else if (t < nvt + dkp / 16)
            wmma::store_matrix_sync(ok + 16 * (t - nvt), acc[i], dkp + TC_FSKEW, wmma::mem_row_major);
    }
    __syncthreads();
    long row = ((long)b * Tk + k0) * ldkv;
    for (int i = threadIdx.x; i < nk * dv; i += blockDim.x)
        st(dV, row + (long)(i / dv) * ldkv + hd * dv + i % dv, ov[i / dv * (dvp + TC_FSKEW) + i % dv]);
    for (int i = threadIdx.x; i < nk * dk; i += blockDim.x)
        st(dK, row + (long)(i / dk) * ldkv + hd * dk + i % dk, scale * ok[i / dk * (dkp + TC_FSKEW) + i % dk]);
}

template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_backward_dkv_tc(const T *Q, int ldq, const T *P, const T *dS, const T *dctx, T *dK, T *dV, int ldkv,
                                float scale, int nh, int dk, int dv, int Tq, int Tk)
{
    if constexpr (TC_HAS(T)) tc_backward_dkv(Q, ldq, P, dS, dctx, dK, dV, ldkv, scale, nh, dk, dv, Tq, Tk);
}

/* ----------------------------------- backward in one block per (b, head) */

/* Translation's sentences are short (tens of tokens) and the heads narrow
 * (d_k = d_v = 64 in the base and big models, section 3.2.2, Table 3):
 * there the two kernels above each read P and dctx, the second also dS,
 * which the first wrote for it, and each is a grid of small blocks that
 * stage their inputs for a few tiles' work.  Where a whole (sentence,
 * head) fits one block's shared memory, one block does it all: Q, K, V, P
 * and dctx read once, dS never leaves shared memory (nothing after
 * backward reads the dP scratch it went to: src/attention.c, model.c).
 *
 * Limits TC_BWD_MAX: Tq, Tk, d_k, d_v <= 64, padded to multiples of 16.
 * Shared memory (tc_bwd_layout), in 16-bit elements with rows of TC_SKEW
 * more, then floats with rows of TC_FSKEW more:
 *   A  dctx [tqp][dvp+8], then K [tkp][dkp+8]
 *   B  V [tkp][dvp+8], then Q [tqp][dkp+8]
 *   S  P [tqp][tkp+8], then dS in place (each row a warp's)
 *   F  dP [tqp][tkp+4], then the staging of dV [tkp][dvp+4], of dQ
 *      [tqp][dkp+4], of dK [tkp][dkp+4], one after the other
 * at the limits 3*64*72*2 + 64*68*4 = 45,056 bytes, under the 48 KiB of a
 * block without the opt-in; any one of the four at the next multiple of
 * 16, 80, takes 53,248 to 56,320 bytes.  A warp holds its output tiles of
 * dV (then dK), (64/16)^2 / FA_WARPS = TC_TILES accumulators at most. */
#define TC_BWD_MAX 64

struct TcBwd {
    int tqp, tkp, dkp, dvp;   /* the lengths padded to multiples of 16 */
    int na, nb, ns, nf;       /* elements of the regions A, B, S (T) and F (float) */
};

static constexpr __host__ __device__ int tc_cmax(int a, int b) { return a > b ? a : b; }

static constexpr __host__ __device__ TcBwd tc_bwd_layout(int Tq, int Tk, int dk, int dv)
{
    int tqp = (Tq + 15) & ~15, tkp = (Tk + 15) & ~15, dkp = (dk + 15) & ~15, dvp = (dv + 15) & ~15;
    int sk = dkp + TC_SKEW, sv = dvp + TC_SKEW;
    return TcBwd{ tqp,
                  tkp,
                  dkp,
                  dvp,
                  tc_cmax(tqp * sv, tkp * sk),
                  tc_cmax(tkp * sv, tqp * sk),
                  tqp * (tkp + TC_SKEW),
                  tc_cmax(tc_cmax(tqp * (tkp + TC_FSKEW), tkp * (dvp + TC_FSKEW)),
                          tc_cmax(tqp, tkp) * (dkp + TC_FSKEW)) };
}

/* dynamic shared memory of k_attention_backward_tc (bytes); every region
 * starts at a multiple of 32 bytes (its element count is one of 16), as
 * wmma's tile pointers must */
static constexpr __host__ __device__ size_t tc_bwd_smem(int Tq, int Tk, int dk, int dv)
{
    const TcBwd L = tc_bwd_layout(Tq, Tk, dk, dv);
    return 2 * ((size_t)L.na + L.nb + L.ns) + 4 * (size_t)L.nf;
}
static_assert(tc_bwd_smem(TC_BWD_MAX, TC_BWD_MAX, TC_BWD_MAX, TC_BWD_MAX) <= 48 * 1024,
              "k_attention_backward_tc at its limits needs more than 48 KiB of shared memory");
static_assert((TC_BWD_MAX / 16) * (TC_BWD_MAX / 16) <= FA_WARPS * TC_TILES,
              "a warp holds at most TC_TILES of dV's or dK's tiles");

/* the output tiles t = warp, warp + FA_WARPS, ... of an m/16 x nc grid,
 * each summed over n (k ascending) and stored into out (fp32, stride so)
 * as it completes: a (m x n, row major) times b, where b is n x 16 nc
 * row major or, with Fb = tc::FragBt<T>, its transpose (16 nc rows of n) */
template <typename Fb, typename T>
static __device__ __forceinline__ void tc_tiles_to(float *out, int so, const T *a, int sa, const T *b, int sb,
                                                   int ntiles, int nc, int n)
{
    constexpr bool bt = std::is_same<Fb, tc::FragBt<T>>::value;
    for (int t = threadIdx.x >> 5; t < ntiles; t += FA_WARPS) {
        int i = t / nc, j = t % nc;
        tc::Acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < n; k += 16) {
            tc::FragA<T> fa;
            Fb fb;
            wmma::load_matrix_sync(fa, a + 16 * i * sa + k, sa);
            wmma::load_matrix_sync(fb, bt ? b + 16 * j * sb + k : b + k * sb + 16 * j, sb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + 16 * i * so + 16 * j, acc, so, wmma::mem_row_major);
    }
}

/* acc[i] = tile t = warp + FA_WARPS i of a^T b (an m/16 x nc grid), summed
 * over the n rows of a (n x m, read column major as a^T) and b (n x 16 nc),
 * ascending; tiles past ntiles stay 0 */
template <typename T>
static __device__ __forceinline__ void tc_tiles_tn(tc::Acc *acc, const T *a, int sa, const T *b, int sb, int ntiles,
                                                   int nc, int n)
{
    int w = threadIdx.x >> 5;
UNROLL
    for (int i = 0; i < TC_TILES; i++) {
        int t = w + FA_WARPS * i;
        wmma::fill_fragment(acc[i], 0.0f);
        if (t >= ntiles) continue;
        for (int q = 0; q < n; q += 16) {
            tc::FragAt<T> fa;
            tc::FragB<T> fb;
            wmma::load_matrix_sync(fa, a + q * sa + 16 * (t / nc), sa);
            wmma::load_matrix_sync(fb, b + q * sb + 16 * (t % nc), sb);
            wmma::mma_sync(acc[i], fa, fb, acc[i]);
        }
    }
}

/* tc_tiles_tn's tiles into out (fp32, stride so); the caller syncs the
 * block before (out is free) and after */
static __device__ __forceinline__ void tc_tiles_store(const tc::Acc *acc, float *out, int so, int ntiles, int nc)
{
    int w = threadIdx.x >> 5;
UNROLL
    for (int i = 0; i < TC_TILES; i++) {
        int t = w + FA_WARPS * i;
        if (t < ntiles)
            wmma::store_matrix_sync(out + 16 * (t / nc) * so + 16 * (t % nc), acc[i], so, wmma::mem_row_major);
    }
}

/* rows [0, nr) x columns [0, nc) of the fp32 staging s (stride ss), times
 * scale, into g (row stride ldg) */
template <typename T>
static __device__ __forceinline__ void tc_write(T *g, long ldg, const float *s, int ss, int nr, int nc, float scale)
{
    for (int i = threadIdx.x; i < nr * nc; i += blockDim.x)
        st(g, (long)(i / nc) * ldg + i % nc, scale * s[i / nc * ss + i % nc]);
}

/* P of one (sentence, head) into ps (stride sp, zero past the lengths),
 * recomputed from the forward's row statistics as the forward computed
 * it: the scores Q K^T in the same 16 x 16 x 16 tile products summed over
 * d_k ascending (fp32, into fs, stride sf), then tc_softmax_exp and
 * tc_weight with the row's stored maximum and 1/sum, under the same masks
 * (fa_keys), so that every weight is the T value the forward would have
 * stored.  K and Q are staged in the A and B regions (ks, qs, stride sk),
 * which the caller refills after; the block syncs before it returns */
template <typename T>
static __device__ __forceinline__ void tc_recompute_p(T *ps, int sp, float *fs, int sf, T *ks, T *qs, int sk,
                                                      const T *Q, int ldq, const T *K, int ldkv, const float *stats,
                                                      const int32_t *key_len, int causal, float scale, int nh,
                                                      int dk, int Tq, int Tk, const TcBwd &L)
{
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nkt = L.tkp / 16;
    tc_stage(ks, sk, K + (long)b * Tk * ldkv + hd * dk, ldkv, L.tkp, Tk, L.dkp, dk);
    tc_stage(qs, sk, Q + (long)b * Tq * ldq + hd * dk, ldq, L.tqp, Tq, L.dkp, dk);
    __syncthreads();
    tc_tiles_to<tc::FragBt<T>>(fs, sf, qs, sk, ks, sk, L.tqp / 16 * nkt, nkt, L.dkp);   /* S = Q K^T */
    __syncthreads();
    for (int r = warp; r < L.tqp; r += FA_WARPS) {
        long row = ((long)b * nh + hd) * Tq + r;
        int n = r < Tq ? fa_keys(key_len, b, r, Tk, causal) : 0;
        float mx = n > 0 ? ld(stats, 2 * row) : 0.0f, inv = n > 0 ? ld(stats, 2 * row + 1) : 0.0f;
        for (int k = lane; k < L.tkp; k += 32)
            ps[r * sp + k] = k < n ? tc_weight<T>(tc_softmax_exp(fs[r * sf + k], scale, mx), inv) : from_float<T>(0.0f);
    }
    __syncthreads();   /* P written; K and Q read */
}

/* grid n_batch * n_heads; shared as tc_bwd_layout.  dS is rounded to T
 * before both products, as tc_backward_dq stores it, so that dQ and dK are
 * the gradients of one dS; each output element is the two kernels' sum of
 * the same tile products in the same order */
template <typename T>
static __device__ __forceinline__ void tc_backward(const T *Q, int ldq, const T *K, const T *V, int ldkv, const T *P,
                                                   const float *stats, const int32_t *key_len, int causal,
                                                   const T *dctx, T *dQ, T *dK, T *dV, float scale, int nh, int dk,
                                                   int dv, int Tq, int Tk)
{
    DYNAMIC_SHARED(unsigned char, sh);
    const TcBwd L = tc_bwd_layout(Tq, Tk, dk, dv);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hv = nh * dv;
    int tqp = L.tqp, tkp = L.tkp, dkp = L.dkp, dvp = L.dvp, nkt = tkp / 16, nvt = dvp / 16, nqt = dkp / 16;
    int sv = dvp + TC_SKEW, sk = dkp + TC_SKEW, sp = tkp + TC_SKEW, sf = tkp + TC_FSKEW;
    int sfv = dvp + TC_FSKEW, sfk = dkp + TC_FSKEW;
    T *dcs = (T *)sh, *vs = dcs + L.na, *ps = vs + L.nb, *ks = dcs, *qs = vs;
    float *fs = (float *)(ps + L.ns);
    long row_kv = (long)b * Tk * ldkv;
    if (stats) tc_recompute_p(ps, sp, fs, sf, ks, qs, sk, Q, ldq, K, ldkv, stats, key_len, causal, scale, nh, dk, Tq,
                              Tk, L);
    else tc_stage(ps, sp, P + ((long)b * nh + hd) * Tq * Tk, Tk, tqp, Tq, tkp, Tk);
    tc_stage(dcs, sv, dctx + (long)b * Tq * hv + hd * dv, hv, tqp, Tq, dvp, dv);
    tc_stage(vs, sv, V + row_kv + hd * dv, ldkv, tkp, Tk, dvp, dv);
    __syncthreads();
    tc_tiles_to<tc::FragBt<T>>(fs, sf, dcs, sv, vs, sv, tqp / 16 * nkt, nkt, dvp);   /* dP = dctx V^T */
    tc::Acc acc[TC_TILES];
    tc_tiles_tn(acc, ps, sp, dcs, sv, nkt * nvt, nvt, tqp);   /* dV = P^T dctx */
    __syncthreads();   /* dP complete; dctx and V read */
    tc_stage(ks, sk, K + row_kv + hd * dk, ldkv, tkp, Tk, dkp, dk);
    tc_stage(qs, sk, Q + (long)b * Tq * ldq + hd * dk, ldq, tqp, Tq, dkp, dk);
    for (int r = warp; r < tqp; r += FA_WARPS) {   /* dS = P (dP - sum_k P dP) (softmax_backward), over P */
        T *p = ps + r * sp;
        const float *d = fs + r * sf;
        float dot = 0.0f;
        int n = r < Tq ? Tk : 0;
        for (int k = lane; k < n; k += 32) dot += to_float(p[k]) * d[k];
        dot = warp_sum(dot);
        for (int k = lane; k < tkp; k += 32) p[k] = from_float<T>(k < n ? to_float(p[k]) * (d[k] - dot) : 0.0f);
    }
    __syncthreads();   /* dS written, dP read: F free; K, Q staged */
    tc_tiles_store(acc, fs, sfv, nkt * nvt, nvt);
    __syncthreads();
    tc_write(dV + row_kv + hd * dv, ldkv, fs, sfv, Tk, dv, 1.0f);
    tc_tiles_tn(acc, ps, sp, qs, sk, nkt * nqt, nqt, tqp);   /* dK = dS^T Q (/ sqrt(d_k) when written) */
    __syncthreads();   /* dV's staging read */
    tc_tiles_to<tc::FragB<T>>(fs, sfk, ps, sp, ks, sk, tqp / 16 * nqt, nqt, tkp);   /* dQ = dS K */
    __syncthreads();
    tc_write(dQ + (long)b * Tq * ldq + hd * dk, ldq, fs, sfk, Tq, dk, scale);
    __syncthreads();   /* dQ's staging read */
    tc_tiles_store(acc, fs, sfk, nkt * nqt, nqt);
    __syncthreads();
    tc_write(dK + row_kv + hd * dk, ldkv, fs, sfk, Tk, dk, scale);
}

template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_backward_tc(const T *Q, int ldq, const T *K, const T *V, int ldkv, const T *P, const float *stats,
                            const int32_t *key_len, int causal, const T *dctx, T *dQ, T *dK, T *dV, float scale,
                            int nh, int dk, int dv, int Tq, int Tk)
{
    if constexpr (TC_HAS(T))
        tc_backward(Q, ldq, K, V, ldkv, P, stats, key_len, causal, dctx, dQ, dK, dV, scale, nh, dk, dv, Tq, Tk);
}

/* ------------------------------------------------------------------ host */

/* dynamic shared memory of the forward and dQ kernels (width: Q's d_k or
 * dctx's d_v) and of the dK, dV kernel */
static size_t tc_rows_smem(int width, int Tk, int dk, int dv)
{
    size_t e = 2, tkp = tc_up(Tk);
    return e * TC_QT * (tc_up(width) + TC_SKEW) + 4 * TC_QT * (tkp + TC_FSKEW) + e * TC_QT * (tkp + TC_SKEW) +
           e * TC_KC * (tc_up(std::max(dk, dv)) + TC_SKEW);
}
static size_t tc_dkv_smem(int dk, int dv)
{
    return 2 * (size_t)TC_KC * (2 * (TC_KB + TC_SKEW) + tc_up(dv) + TC_SKEW + tc_up(dk) + TC_SKEW);
}

/* whether k_attention_backward_tc takes the shape (its limits above) */
static bool tc_bwd_fits(int Tq, int Tk, int dk, int dv)
{
    return Tq <= TC_BWD_MAX && Tk <= TC_BWD_MAX && dk <= TC_BWD_MAX && dv <= TC_BWD_MAX;
}
