/* Fused attention core (eq. 1 with the padding and causal masks) for the
 * short sequences of translation, in place of attention.c's sequence of
 * pointer-array batched GEMMs and the separate softmax (issue 32, section 3).
 *
 * Forward, one kernel: a block per (sentence, head, tile of FA_QT queries)
 * stages its queries and, FA_KT keys at a time, K and then V in shared
 * memory; the scores Q K^T / sqrt(d_k) of its rows stay in shared memory
 * (fp32), are masked and normalised there (a warp per row), stored once as
 * P (backward reads it, and so do the attention maps), and multiplied by V
 * in registers.  The scores never go through device memory, and 16-bit
 * storage never rounds them (the GEMM path stores them bf16/fp16, then the
 * softmax reads them back).  In a training step (16-bit, where the
 * one-kernel backward takes the shape) only each row's maximum and 1/sum
 * are stored, and that backward recomputes P from Q and K, bit for bit
 * (attention_tc.cuh tc_recompute_p): P's write and read, 33 MB a layer
 * for base at 25,010 tokens, are gone (issue 44).
 *
 * Backward, two kernels and no atomics (results deterministic run to run,
 * as every kernel of the backend): per (sentence, head, query tile)
 * dP = dctx V^T, dS = P (dP - rowsum(P dP)) in shared memory, dS stored
 * (in the dP scratch) and dQ = dS K / sqrt(d_k); then per (sentence, head,
 * tile of FA_KB keys) dV = P^T dctx and dK = dS^T Q / sqrt(d_k), summed
 * over all queries in one block, so no two blocks add into one element.
 *
 * Arithmetic is fp32 on the CUDA cores; loads and stores go through
 * ld()/st() (memory.cuh).  They run for fp32 storage; bf16 and fp16 run
 * the tensor-core kernels of attention_tc.cuh (same outputs and blocks,
 * but backward in one kernel where Tq, Tk, d_k, d_v <= 64).
 * The CPU reference applies no dropout to the attention weights
 * (src/attention.c, ops_cpu.c): neither do these kernels.
 *
 * Limits: d_k, d_v <= FA_MAX_D and Tk <= FA_MAX_T keys (any number of
 * queries); beyond them the GEMM path runs, with a one-line note.  The
 * shared memory is then at most (16*128 + 16*256 + 32*129) * 4 = 41,088
 * bytes per block (forward, backward dQ) and 32*(2*16 + 2*128) * 4 = 36,864
 * (backward dK, dV): under the 48 KiB a block gets without opting in
 * (cudaFuncAttributeMaxDynamicSharedMemorySize), and well under an H100
 * SM's 228 KiB (CUDA C++ Programming Guide, "Compute Capabilities",
 * table "Technical Specifications per Compute Capability"), so several
 * blocks share an SM. */
#pragma once

#include "softmax.cuh"

extern "C" {
#include "../src/attention.h"   /* attention_scale: the CPU's 1/sqrt(d_k), bit for bit */
}

#define FA_MAX_D 128               /* d_k, d_v */
#define FA_MAX_T 256               /* keys per sentence */
#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)
#define FA_QT 16                   /* queries per block: FA_QT / FA_WARPS rows per warp */
#define FA_KT 32                   /* keys per staged tile: one per lane */
#define FA_KB 16                   /* keys per block of the dK, dV kernel */
#define FA_QC 32                   /* queries per staged chunk of the dK, dV kernel */
#define FA_RPW (FA_QT / FA_WARPS)  /* rows per warp (FA_KB / FA_WARPS too) */
#define FA_CPL (FA_MAX_D / 32)     /* columns per lane */
#define FA_STR_(x) #x
#define FA_STR(x) FA_STR_(x)

static __host__ __device__ __forceinline__ int fa_min(int a, int b) { return a < b ? a : b; }
static __host__ __device__ __forceinline__ int fa_max(int a, int b) { return a > b ? a : b; }

/* the keys query q of sentence b attends to (softmax_keys' masks) */
static __device__ __forceinline__ int fa_keys(const int32_t *key_len, int b, int q, int Tk, int causal)
{
    int n = ld(key_len, b);
    if (causal && q + 1 < n) n = q + 1;
    return n > Tk ? Tk : n < 0 ? 0 : n;
}

/* Staging loads FA_DEEP elements per thread before storing any, so that
 * each thread keeps FA_DEEP independent loads in flight (the declared
 * per-thread bytes of cost.cuh): a loop striding by blockDim issues one
 * load at a time, and the stores into shared memory between them keep
 * the compiler from hoisting the next loads (it cannot tell that the
 * global and shared pointers do not alias) */
#define FA_DEEP 4

/* rows [0, nr) x cols [0, nc) of a strided matrix into shared memory with
 * row stride ss; rows past nr (up to rows) are zero-filled */
template <typename T>
static __device__ __forceinline__ void fa_stage(float *s, int ss, const T *g, long ldg, int rows, int nr, int nc)
{
    int n = rows * nc;
    for (int i0 = threadIdx.x; i0 < n; i0 += FA_DEEP * blockDim.x) {
        float v[FA_DEEP];
UNROLL
        for (int u = 0; u < FA_DEEP; u++) {
            int i = i0 + u * blockDim.x, r = i / nc, c = i % nc;
            v[u] = i < n && r < nr ? ld(g, r * ldg + c) : 0.0f;
        }
UNROLL
        for (int u = 0; u < FA_DEEP; u++) {
            int i = i0 + u * blockDim.x;
            if (i < n) s[i / nc * ss + i % nc] = v[u];
        }
    }
}

/* a padded shared row stride: odd, so that the lanes of a warp reading one
 * column of 32 rows hit 32 different banks */
static __host__ __device__ __forceinline__ int fa_stride(int d) { return d | 1; }

/* acc[i] (row warp + FA_WARPS*i of a tile) += sum over the tile's nk keys
 * of a[row][k] * b[k][lane + 32c]; a rows of stride sa, b of stride sb */
static __device__ __forceinline__ void fa_rows_times_tile(float (*acc)[FA_CPL], const float *a, int sa, int nr,
                                                          const float *b, int sb, int nk, int ncol)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int k = 0; k < nk; k++) {
        float bv[FA_CPL];
UNROLL
        for (int c = 0; c < FA_CPL; c++) bv[c] = lane + 32 * c < ncol ? b[k * sb + lane + 32 * c] : 0.0f;
UNROLL
        for (int i = 0; i < FA_RPW; i++) {
            int r = warp + FA_WARPS * i;
            float av = r < nr ? a[r * sa + k] : 0.0f;
UNROLL
            for (int c = 0; c < FA_CPL; c++) acc[i][c] += av * bv[c];
        }
    }
}

/* out[row][k0 + lane] = scale * dot(a[row], tile[lane]) for the warp's rows
 * (a: nr rows of width d, stride d; tile: nk keys of stride ts) */
static __device__ __forceinline__ void fa_scores(float *out, int so, int k0, const float *a, int nr, const float *tile,
                                                 int ts, int nk, int d, float scale)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc[FA_RPW] = {};
    if (lane < nk)
        for (int j = 0; j < d; j++) {
            float kv = tile[lane * ts + j];
UNROLL
            for (int i = 0; i < FA_RPW; i++) acc[i] += a[(warp + FA_WARPS * i) * d + j] * kv;
        }
UNROLL
    for (int i = 0; i < FA_RPW; i++) {
        int r = warp + FA_WARPS * i;
        if (r < nr && lane < nk) out[r * so + k0 + lane] = scale * acc[i];
    }
}

/* ---------------------------------------------------------------- forward */

/* grid (n_batch * n_heads, query tiles); shared: queries [FA_QT][dk],
 * scores [FA_QT][Tk], a K or V tile [FA_KT][fa_stride(fa_max(dk, dv))] */
template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_forward(const T *Q, int ldq, const T *K, const T *V, int ldkv, T *P, T *ctx, const int32_t *key_len,
                        float scale, int nh, int dk, int dv, int Tq, int Tk, int causal)
{
    DYNAMIC_SHARED(float, sh);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, q0 = blockIdx.y * FA_QT, nq = fa_min(FA_QT, Tq - q0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ts = fa_stride(fa_max(dk, dv));
    float *qs = sh, *ss = qs + FA_QT * dk, *tile = ss + FA_QT * Tk;
    const T *Kb = K + (long)b * Tk * ldkv + hd * dk, *Vb = V + (long)b * Tk * ldkv + hd * dv;
    fa_stage(qs, dk, Q + ((long)b * Tq + q0) * ldq + hd * dk, ldq, FA_QT, nq, dk);
    for (int k0 = 0; k0 < Tk; k0 += FA_KT) {   /* scores, scaled as the GEMM's alpha scales them */
        int nk = fa_min(FA_KT, Tk - k0);
        __syncthreads();   /* the previous tile is read (and, first, the queries staged) */
        fa_stage(tile, ts, Kb + (long)k0 * ldkv, ldkv, nk, nk, dk);
        __syncthreads();
        fa_scores(ss, Tk, k0, qs, nq, tile, ts, nk, dk, scale);
    }
    __syncwarp(0xffffffffu);   /* each warp normalises the rows it scored */
    T *Pb = P + (((long)b * nh + hd) * Tq + q0) * Tk;
    for (int r = warp; r < nq; r += FA_WARPS) {   /* softmax over the valid keys; masked ones exact 0 */
        float *s = ss + r * Tk, mx = -INFINITY, sum = 0.0f;
        int n = fa_keys(key_len, b, q0 + r, Tk, causal);
        for (int k = lane; k < n; k += 32) mx = fmaxf(mx, s[k]);
        mx = warp_max(mx);
        for (int k = lane; k < n; k += 32) {
            s[k] = expf(s[k] - mx);
            sum += s[k];
        }
        sum = warp_sum(sum);
        float inv = n > 0 ? 1.0f / sum : 0.0f;
        for (int k = lane; k < Tk; k += 32) {
            s[k] = k < n ? s[k] * inv : 0.0f;
            st(Pb, (long)r * Tk + k, s[k]);
        }
    }
    float acc[FA_RPW][FA_CPL] = {};
    for (int k0 = 0; k0 < Tk; k0 += FA_KT) {   /* ctx = P V, P in fp32 */
        int nk = fa_min(FA_KT, Tk - k0);
        __syncthreads();   /* every warp done with the K tile (first) or the previous V tile */
        fa_stage(tile, ts, Vb + (long)k0 * ldkv, ldkv, nk, nk, dv);
        __syncthreads();
        fa_rows_times_tile(acc, ss + k0, Tk, nq, tile, ts, nk, dv);
    }
    int hv = nh * dv;
UNROLL
    for (int i = 0; i < FA_RPW; i++) {
        int r = warp + FA_WARPS * i;
UNROLL
        for (int c = 0; c < FA_CPL; c++)
            if (r < nq && lane + 32 * c < dv) st(ctx, ((long)b * Tq + q0 + r) * hv + hd * dv + lane + 32 * c, acc[i][c]);
    }
}

/* ------------------------------------------------------- backward: dS, dQ */

/* grid as the forward's; shared: dctx rows [FA_QT][dv], dP then dS
 * [FA_QT][Tk], a V or K tile.  dS is stored rounded to T, and dQ is
 * computed from the rounded values, so that dQ and dK (next kernel, from
 * the stored dS) are the gradients of one and the same dS */
template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_backward_dq(const T *K, const T *V, int ldkv, const T *P, T *dS, const T *dctx, T *dQ, int ldq,
                            float scale, int nh, int dk, int dv, int Tq, int Tk)
{
    DYNAMIC_SHARED(float, sh);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, q0 = blockIdx.y * FA_QT, nq = fa_min(FA_QT, Tq - q0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ts = fa_stride(fa_max(dk, dv)), hv = nh * dv;
    float *dcs = sh, *ds = dcs + FA_QT * dv, *tile = ds + FA_QT * Tk;
    const T *Kb = K + (long)b * Tk * ldkv + hd * dk, *Vb = V + (long)b * Tk * ldkv + hd * dv;
    fa_stage(dcs, dv, dctx + ((long)b * Tq + q0) * hv + hd * dv, hv, FA_QT, nq, dv);
    for (int k0 = 0; k0 < Tk; k0 += FA_KT) {   /* dP = dctx V^T */
        int nk = fa_min(FA_KT, Tk - k0);
        __syncthreads();
        fa_stage(tile, ts, Vb + (long)k0 * ldkv, ldkv, nk, nk, dv);
        __syncthreads();
        fa_scores(ds, Tk, k0, dcs, nq, tile, ts, nk, dv, 1.0f);
    }
    __syncwarp(0xffffffffu);
    long off = (((long)b * nh + hd) * Tq + q0) * Tk;
    for (int r = warp; r < nq; r += FA_WARPS) {   /* dS = P (dP - sum_k P dP) (softmax_backward) */
        float *d = ds + r * Tk, dot = 0.0f;
        for (int k = lane; k < Tk; k += 32) dot += ld(P, off + (long)r * Tk + k) * d[k];
        dot = warp_sum(dot);
        for (int k = lane; k < Tk; k += 32) {
            d[k] = to_float(from_float<T>(ld(P, off + (long)r * Tk + k) * (d[k] - dot)));
            st(dS, off + (long)r * Tk + k, d[k]);
        }
    }
    float acc[FA_RPW][FA_CPL] = {};
    for (int k0 = 0; k0 < Tk; k0 += FA_KT) {   /* dQ = dS K / sqrt(d_k) */
        int nk = fa_min(FA_KT, Tk - k0);
        __syncthreads();
        fa_stage(tile, ts, Kb + (long)k0 * ldkv, ldkv, nk, nk, dk);
        __syncthreads();
        fa_rows_times_tile(acc, ds + k0, Tk, nq, tile, ts, nk, dk);
    }
UNROLL
    for (int i = 0; i < FA_RPW; i++) {
        int r = warp + FA_WARPS * i;
UNROLL
        for (int c = 0; c < FA_CPL; c++)
            if (r < nq && lane + 32 * c < dk)
                st(dQ, ((long)b * Tq + q0 + r) * ldq + hd * dk + lane + 32 * c, scale * acc[i][c]);
    }
}

/* --------------------------------------------------- backward: dK and dV */

/* a chunk of nr query rows x the block's nk keys of a [Tq][Tk] matrix,
 * transposed into s[key][query] (stride FA_QC), zero-filled past nr */
template <typename T>
static __device__ __forceinline__ void fa_stage_t(float *s, const T *g, int Tk, int nr, int nk)
{
    int n = FA_QC * nk;
    for (int i0 = threadIdx.x; i0 < n; i0 += FA_DEEP * blockDim.x) {
        float v[FA_DEEP];
UNROLL
        for (int u = 0; u < FA_DEEP; u++) {
            int i = i0 + u * blockDim.x, q = i / nk, k = i % nk;
            v[u] = i < n && q < nr ? ld(g, (long)q * Tk + k) : 0.0f;
        }
UNROLL
        for (int u = 0; u < FA_DEEP; u++) {
            int i = i0 + u * blockDim.x;
            if (i < n) s[i % nk * FA_QC + i / nk] = v[u];
        }
    }
}

/* grid (n_batch * n_heads, key tiles of FA_KB); shared: P^T and dS^T
 * [FA_KB][FA_QC], dctx [FA_QC][dv] and Q [FA_QC][dk] of a query chunk */
template <typename T>
static __global__ void __launch_bounds__(FA_THREADS)
    k_attention_backward_dkv(const T *Q, int ldq, const T *P, const T *dS, const T *dctx, T *dK, T *dV, int ldkv,
                             float scale, int nh, int dk, int dv, int Tq, int Tk)
{
    DYNAMIC_SHARED(float, sh);
    int b = blockIdx.x / nh, hd = blockIdx.x % nh, k0 = blockIdx.y * FA_KB, nk = fa_min(FA_KB, Tk - k0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hv = nh * dv;
    float *pt = sh, *dst = pt + FA_KB * FA_QC, *dcs = dst + FA_KB * FA_QC, *qs = dcs + FA_QC * dv;
    long off = ((long)b * nh + hd) * Tq * Tk + k0;
    float accv[FA_RPW][FA_CPL] = {}, acck[FA_RPW][FA_CPL] = {};
    for (int q0 = 0; q0 < Tq; q0 += FA_QC) {
        int nq = fa_min(FA_QC, Tq - q0);
        __syncthreads();   /* the previous chunk is read */
        fa_stage_t(pt, P + off + (long)q0 * Tk, Tk, nq, nk);
        fa_stage_t(dst, dS + off + (long)q0 * Tk, Tk, nq, nk);
        fa_stage(dcs, dv, dctx + ((long)b * Tq + q0) * hv + hd * dv, hv, FA_QC, nq, dv);
        fa_stage(qs, dk, Q + ((long)b * Tq + q0) * ldq + hd * dk, ldq, FA_QC, nq, dk);
        __syncthreads();
        fa_rows_times_tile(accv, pt, FA_QC, nk, dcs, dv, nq, dv);   /* dV = P^T dctx */
        fa_rows_times_tile(acck, dst, FA_QC, nk, qs, dk, nq, dk);   /* dK = dS^T Q (/ sqrt(d_k) below) */
    }
UNROLL
    for (int i = 0; i < FA_RPW; i++) {
        int r = warp + FA_WARPS * i;
        long row = ((long)b * Tk + k0 + r) * ldkv;
UNROLL
        for (int c = 0; c < FA_CPL; c++) {
            int j = lane + 32 * c;
            if (r < nk && j < dv) st(dV, row + hd * dv + j, accv[i][c]);
            if (r < nk && j < dk) st(dK, row + hd * dk + j, scale * acck[i][c]);
        }
    }
}

#include "attention_tc.cuh"

/* ------------------------------------------------------------------ host */

/* why the fused kernels cannot take this call, or NULL where they can */
static const char *fa_unfit(AttnShape s, int Tq, int Tk, DType t, std::initializer_list<Act> acts)
{
    for (const Act &a : acts)
        if (a.dtype != t) return "activations of mixed element types";
    if (s.dk > FA_MAX_D || s.dv > FA_MAX_D) return "d_k or d_v above " FA_STR(FA_MAX_D);
    if (Tk > FA_MAX_T) return "more than " FA_STR(FA_MAX_T) " keys";
    if ((Tq + FA_QT - 1) / FA_QT > 65535 || (long)s.B * s.h > INT32_MAX) return "grid too large";
    return NULL;
}

/* a one-line note, once per reason and process, where the GEMM path runs
 * instead */
static bool fa_fits(AttnShape s, int Tq, int Tk, DType t, std::initializer_list<Act> acts)
{
    static std::vector<const char *> told;
    const char *why = fa_unfit(s, Tq, Tk, t, acts);
    if (!why) return true;
    if (std::find(told.begin(), told.end(), why) == told.end()) {
        told.push_back(why);
        fprintf(stderr, "cuda: fused attention: %s (d_k %d, d_v %d, %d keys): GEMM path instead\n", why, s.dk, s.dv,
                Tk);
    }
    return false;
}

static size_t fa_rows_smem(int width, int Tk, int dk, int dv)
{
    return sizeof(float) * ((size_t)FA_QT * width + (size_t)FA_QT * Tk + (size_t)FA_KT * fa_stride(std::max(dk, dv)));
}

/* whether a 16-bit forward keeps the row statistics instead of P: where
 * it is given them and k_attention_backward_tc, the one backward that
 * recomputes P, takes the shape (the same test in forward and backward) */
static bool tc_keeps_stats(const float *stats, AttnShape s, int Tq, int Tk)
{
    return stats && tc_bwd_fits(Tq, Tk, s.dk, s.dv);
}

/* 16-bit storage: the tensor-core kernels of attention_tc.cuh; their
 * tensor FLOPs are those of the padded 16 x 16 x 16 tiles they run.
 * ATTN_KEPT_STATS where the rows' statistics replace P (ops.h) */
template <typename T>
static int tc_attention_forward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act V, int ldkv, Act P,
                                float *stats, Act ctx, int Tq, int Tk, const int32_t *key_len, int causal)
{
    bool keep_stats = tc_keeps_stats(stats, s, Tq, Tk);
    double bh = (double)s.B * s.h, e = sizeof(T), tq = 16.0 * ((Tq + 15) / 16), tk = tc_up(Tk);
    double kept = keep_stats ? 2.0 * sizeof(float) : (double)Tk * e;   /* a row's statistics, or its weights */
    DECLARE_KERNEL_TC(k_attention_forward_tc<T>, "attention_forward", FA_DEEP * e,
                      bh * (Tq * s.dk + (double)Tk * (s.dk + s.dv)) * e + s.B * sizeof(int32_t),
                      bh * Tq * (kept + s.dv * e), bh * 2 * tq * tk * (tc_up(s.dk) + tc_up(s.dv)),
                      bh * Tq * Tk * 6.0);
    LAUNCH(k_attention_forward_tc<T>, dim3(s.B * s.h, (Tq + TC_QT - 1) / TC_QT), FA_THREADS,
           tc_rows_smem(s.dk, Tk, s.dk, s.dv), IMPL(be)->stream, tp<T>(Q), ldq, tp<T>(K), tp<T>(V), ldkv, tp<T>(P),
           keep_stats ? stats : NULL, tp<T>(ctx), key_len, attention_scale(s.dk), s.h, s.dk, s.dv, Tq, Tk, causal);
    return keep_stats ? ATTN_KEPT_STATS : ATTN_KEPT_P;
}

static int cuda_attention_forward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act V, int ldkv, Act P,
                                  float *stats, Act ctx, int Tq, int Tk, const int32_t *key_len, int causal)
{
    if (!fa_fits(s, Tq, Tk, Q.dtype, { K, V, P, ctx })) return ATTN_DECLINED;
    if ((long)s.B * s.h * Tq <= 0 || Tk <= 0) return ATTN_KEPT_P;
    int kept = ATTN_KEPT_P;
    dispatch(Q.dtype, [&](auto z) {
        using T = decltype(z);
        if constexpr (sizeof(T) == 2) {
            kept = tc_attention_forward<T>(be, s, Q, ldq, K, V, ldkv, P, stats, ctx, Tq, Tk, key_len, causal);
        } else {   /* fp32: P stored (the CUDA-core backward reads it) */
            double bh = (double)s.B * s.h, e = sizeof(T);
            DECLARE_KERNEL(k_attention_forward<T>, "attention_forward", FA_DEEP * e,
                           bh * (Tq * s.dk + (double)Tk * (s.dk + s.dv)) * e + s.B * sizeof(int32_t),
                           bh * Tq * ((double)Tk + s.dv) * e, bh * Tq * Tk * (2.0 * (s.dk + s.dv) + 6));
            LAUNCH(k_attention_forward<T>, dim3(s.B * s.h, (Tq + FA_QT - 1) / FA_QT), FA_THREADS,
                   fa_rows_smem(s.dk, Tk, s.dk, s.dv), IMPL(be)->stream, tp<T>(Q), ldq, tp<T>(K), tp<T>(V), ldkv,
                   tp<T>(P), tp<T>(ctx), key_len, attention_scale(s.dk), s.h, s.dk, s.dv, Tq, Tk, causal);
        }
    });
    CKL();
    return kept;
}

template <typename T>
static void tc_attention_backward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act V, int ldkv, Act P,
                                  const float *stats, const int32_t *key_len, int causal, Act dP, Act dctx, Act dQ,
                                  Act dK, Act dV, int Tq, int Tk)
{
    double bh = (double)s.B * s.h, e = sizeof(T), qk = (double)Tq * Tk, tq = 16.0 * ((Tq + 15) / 16);
    double tk = tc_up(Tk), tkb = 16.0 * ((Tk + TC_KB - 1) / TC_KB), dkv = tc_up(s.dk) + tc_up(s.dv);
    float scale = attention_scale(s.dk);
    if (tc_bwd_fits(Tq, Tk, s.dk, s.dv)) {
        /* one block per (sentence, head): reads Q, K, V, dctx and P once,
         * or with stats the rows' statistics (and key_len) for P, its
         * scores Q K^T one more product of the padded tiles (Q and K read
         * again, from cache: the block read them a moment before) */
        double weights = stats ? Tq * 2.0 * sizeof(float) : qk * e;
        DECLARE_KERNEL_TC(k_attention_backward_tc<T>, "attention_backward", FA_DEEP * e,
                          bh * ((Tq * s.dk + (double)Tk * (s.dk + s.dv) + (double)Tq * s.dv) * e + weights) +
                              (stats ? s.B * sizeof(int32_t) : 0),
                          bh * (Tq * s.dk + (double)Tk * (s.dk + s.dv)) * e,
                          bh * (4 * tq * tk * dkv + (stats ? 2 * tq * tk * tc_up(s.dk) : 0)),
                          bh * qk * (stats ? 7.0 : 4.0));
        LAUNCH(k_attention_backward_tc<T>, s.B * s.h, FA_THREADS, tc_bwd_smem(Tq, Tk, s.dk, s.dv), IMPL(be)->stream,
               tp<T>(Q), ldq, tp<T>(K), tp<T>(V), ldkv, tp<T>(P), stats, key_len, causal, tp<T>(dctx), tp<T>(dQ),
               tp<T>(dK), tp<T>(dV), scale, s.h, s.dk, s.dv, Tq, Tk);
        return;
    }
    DECLARE_KERNEL_TC(k_attention_backward_dq_tc<T>, "attention_backward", FA_DEEP * e,
                      bh * (Tq * s.dv + qk + (double)Tk * (s.dk + s.dv)) * e, bh * (qk + (double)Tq * s.dk) * e,
                      bh * 2 * tq * tk * dkv, bh * qk * 4.0);
    LAUNCH(k_attention_backward_dq_tc<T>, dim3(s.B * s.h, (Tq + TC_QT - 1) / TC_QT), FA_THREADS,
           tc_rows_smem(s.dv, Tk, s.dk, s.dv), IMPL(be)->stream, tp<T>(K), tp<T>(V), ldkv, tp<T>(P), tp<T>(dP),
           tp<T>(dctx), tp<T>(dQ), ldq, scale, s.h, s.dk, s.dv, Tq, Tk);
    CKL();
    DECLARE_KERNEL_TC(k_attention_backward_dkv_tc<T>, "attention_backward", FA_DEEP * e,
                      bh * (2 * qk + (double)Tq * (s.dk + s.dv)) * e, bh * Tk * (double)(s.dk + s.dv) * e,
                      bh * 2 * tkb * tq * dkv, 0);
    LAUNCH(k_attention_backward_dkv_tc<T>, dim3(s.B * s.h, (Tk + TC_KB - 1) / TC_KB), FA_THREADS,
           tc_dkv_smem(s.dk, s.dv), IMPL(be)->stream, tp<T>(Q), ldq, tp<T>(P), tp<T>(dP), tp<T>(dctx), tp<T>(dK),
           tp<T>(dV), ldkv, scale, s.h, s.dk, s.dv, Tq, Tk);
}

static int cuda_attention_backward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act V, int ldkv, Act P,
                                   const float *stats, const int32_t *key_len, int causal, Act dP, Act dctx, Act dQ,
                                   Act dK, Act dV, int Tq, int Tk)
{
    if (!fa_fits(s, Tq, Tk, Q.dtype, { K, V, P, dP, dctx, dQ, dK, dV })) return 0;
    if ((long)s.B * s.h <= 0 || Tq <= 0 || Tk <= 0) return 0;   /* (the GEMM path's zero-size handling) */
    /* stats only where this backend's forward kept them (tc_keeps_stats) */
    if (stats && (dtype_size(Q.dtype) != 2 || !tc_keeps_stats(stats, s, Tq, Tk))) return 0;
    dispatch(Q.dtype, [&](auto z) {
        using T = decltype(z);
        if constexpr (sizeof(T) == 2) {
            tc_attention_backward<T>(be, s, Q, ldq, K, V, ldkv, P, stats, key_len, causal, dP, dctx, dQ, dK, dV, Tq,
                                     Tk);
            return;
        } else {
            double bh = (double)s.B * s.h, e = sizeof(T), qk = (double)Tq * Tk;
            float scale = attention_scale(s.dk);
            DECLARE_KERNEL(k_attention_backward_dq<T>, "attention_backward", FA_DEEP * e,
                           bh * (Tq * s.dv + qk + (double)Tk * (s.dk + s.dv)) * e, bh * (qk + (double)Tq * s.dk) * e,
                           bh * qk * (2.0 * (s.dk + s.dv) + 4));
            LAUNCH(k_attention_backward_dq<T>, dim3(s.B * s.h, (Tq + FA_QT - 1) / FA_QT), FA_THREADS,
                   fa_rows_smem(s.dv, Tk, s.dk, s.dv), IMPL(be)->stream, tp<T>(K), tp<T>(V), ldkv, tp<T>(P),
                   tp<T>(dP), tp<T>(dctx), tp<T>(dQ), ldq, scale, s.h, s.dk, s.dv, Tq, Tk);
            CKL();
            DECLARE_KERNEL(k_attention_backward_dkv<T>, "attention_backward", FA_DEEP * e,
                           bh * (2 * qk + (double)Tq * (s.dk + s.dv)) * e, bh * Tk * (double)(s.dk + s.dv) * e,
                           bh * qk * 2.0 * (s.dk + s.dv));
            LAUNCH(k_attention_backward_dkv<T>, dim3(s.B * s.h, (Tk + FA_KB - 1) / FA_KB), FA_THREADS,
                   sizeof(float) * (2 * FA_KB * FA_QC + (size_t)FA_QC * (s.dk + s.dv)), IMPL(be)->stream, tp<T>(Q),
                   ldq, tp<T>(P), tp<T>(dP), tp<T>(dctx), tp<T>(dK), tp<T>(dV), ldkv, scale, s.h, s.dk, s.dv, Tq, Tk);
        }
    });
    CKL();
    return 1;
}
