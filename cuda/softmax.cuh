/* Attention softmax (eq. 1, with padding and causal masks) and the
 * log-softmax of decoding. */
#pragma once

#include "memory.cuh"

/* --------------------------------------------------------------- softmax */

/* the valid keys of row r (padding and causal masks) */
static __device__ __forceinline__ int softmax_keys(const int32_t *key_len, long r, int nh, int Tq, int Tk, int causal,
                                                   int q_offset)
{
    int b = (int)(r / ((long)nh * Tq)), q = (int)(r % Tq);
    int n = ld(key_len, b);
    if (causal && q + q_offset + 1 < n) n = q + q_offset + 1;
    return n > Tk ? Tk : n;
}

/* one block per row of S (eq. 1 with the padding and causal masks).
 * Masked entries are never read and are stored as exact 0: no -inf or
 * large negative constant is ever stored, which fp16 (largest 65504)
 * could not hold; the -INFINITY of the max is an fp32 register. */
template <typename T>
static __global__ void k_softmax_forward(T *S, const int32_t *key_len, float scale, int nh, int Tq, int Tk,
                                         int causal, int q_offset)
{
    DYNAMIC_SHARED(float, sh);
    long r = blockIdx.x;
    int n = softmax_keys(key_len, r, nh, Tq, Tk, causal, q_offset);
    T *s = S + r * Tk;
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < n; k += blockDim.x) mx = fmaxf(mx, ld(s, k) * scale);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) sum += expf(ld(s, k) * scale - mx);
    sum = block_sum(sum, sh);
    float inv = n > 0 ? 1.0f / sum : 0.0f;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) st(s, k, k < n ? expf(ld(s, k) * scale - mx) * inv : 0.0f);
}

/* Rows of up to WARP_ROW_MAX keys (every row in training: max_len is 256
 * by default; the base step's are 41): a warp per row, SM_ROWS rows per
 * block, the row held in registers, so that every lane issues all its
 * loads before the first use (Tk / 32 loads in flight, not one) and the
 * reductions are warp shuffles with no block barrier.  The block kernels
 * above take longer rows. */
#define SM_ROWS 8
#define SM_REG 8
#define WARP_ROW_MAX (32 * SM_REG)

template <typename T>
static __global__ void k_softmax_forward_warp(T *S, const int32_t *key_len, float scale, int nh, int Tq, int Tk,
                                              int causal, int q_offset, long rows)
{
    long r = (long)blockIdx.x * SM_ROWS + threadIdx.y;
    if (r >= rows) return;   /* the whole warp: r is the warp's */
    int lane = threadIdx.x, n = softmax_keys(key_len, r, nh, Tq, Tk, causal, q_offset);
    T *s = S + r * Tk;
    float v[SM_REG], mx = -INFINITY, sum = 0.0f;
UNROLL
    for (int c = 0; c < SM_REG; c++) {
        int k = lane + 32 * c;
        v[c] = k < n ? ld(s, k) * scale : -INFINITY;
        mx = fmaxf(mx, v[c]);
    }
    mx = warp_max(mx);
UNROLL
    for (int c = 0; c < SM_REG; c++) {
        v[c] = lane + 32 * c < n ? expf(v[c] - mx) : 0.0f;
        sum += v[c];
    }
    sum = warp_sum(sum);
    float inv = n > 0 ? 1.0f / sum : 0.0f;
UNROLL
    for (int c = 0; c < SM_REG; c++)
        if (lane + 32 * c < Tk) st(s, lane + 32 * c, v[c] * inv);
}

template <typename T> static __global__ void k_softmax_backward_warp(T *dP, const T *P, float scale, int Tk, long rows)
{
    long r = (long)blockIdx.x * SM_ROWS + threadIdx.y;
    if (r >= rows) return;
    int lane = threadIdx.x;
    T *d = dP + r * Tk;
    const T *p = P + r * Tk;
    float pv[SM_REG], dv[SM_REG], dot = 0.0f;
UNROLL
    for (int c = 0; c < SM_REG; c++) {
        int k = lane + 32 * c;
        pv[c] = k < Tk ? ld(p, k) : 0.0f;
        dv[c] = k < Tk ? ld(d, k) : 0.0f;
        dot += pv[c] * dv[c];
    }
    dot = warp_sum(dot);
UNROLL
    for (int c = 0; c < SM_REG; c++)
        if (lane + 32 * c < Tk) st(d, lane + 32 * c, scale * pv[c] * (dv[c] - dot));
}

/* the keys the forward softmax reads, for the cost model: query q reads
 * q + q_offset + 1 of them under the causal mask, all Tk otherwise
 * (padding, data-dependent, is not subtracted) */
static double keys_read(int nb, int nh, int Tq, int Tk, int causal, int q_offset)
{
    if (!cost_on) return 0;
    double keys = 0;
    for (int q = 0; q < Tq; q++) keys += causal ? std::min(q + q_offset + 1, Tk) : Tk;
    return keys * nb * nh;
}

static void cuda_softmax_forward(Backend *be, Act S, const int32_t *key_len, float scale, int nb, int nh, int Tq,
                                 int Tk, int causal, int q_offset)
{
    long rows = (long)nb * nh * Tq;
    if (rows <= 0 || Tk <= 0) return;
    dispatch(S.dtype, [&](auto z) {
        using T = decltype(z);
        /* the unmasked part of each row read, the whole row written */
        double keys = keys_read(nb, nh, Tq, Tk, causal, q_offset);
        double rd = keys * sizeof(T) + nb * sizeof(int32_t), wr = rows * Tk * sizeof(T);
        if (Tk <= WARP_ROW_MAX) {
            DECLARE_KERNEL(k_softmax_forward_warp<T>, "softmax_forward", (Tk + 31) / 32 * sizeof(T), rd, wr, 6 * keys);
            LAUNCH(k_softmax_forward_warp<T>, (unsigned)((rows + SM_ROWS - 1) / SM_ROWS), dim3(32, SM_ROWS), 0,
                   IMPL(be)->stream, tp<T>(S), key_len, scale, nh, Tq, Tk, causal, q_offset, rows);
            return;
        }
        DECLARE_KERNEL(k_softmax_forward<T>, "softmax_forward", sizeof(T), rd, wr, 6 * keys);
        LAUNCH(k_softmax_forward<T>, (unsigned)rows, row_threads(Tk), RED_SMEM, IMPL(be)->stream, tp<T>(S), key_len,
               scale, nh, Tq, Tk, causal, q_offset);
    });
    CKL();
}

template <typename T> static __global__ void k_softmax_backward(T *dP, const T *P, float scale, int Tk)
{
    DYNAMIC_SHARED(float, sh);
    T *d = dP + (long)blockIdx.x * Tk;
    const T *p = P + (long)blockIdx.x * Tk;
    float dot = 0.0f;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) dot += ld(p, k) * ld(d, k);
    dot = block_sum(dot, sh);
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) st(d, k, scale * ld(p, k) * (ld(d, k) - dot));
}

static void cuda_softmax_backward(Backend *be, Act dP, Act P, float scale, int nb, int nh, int Tq, int Tk)
{
    long rows = (long)nb * nh * Tq;
    if (rows <= 0 || Tk <= 0) return;
    dispatch(act_type("softmax_backward", { dP, P }), [&](auto z) {
        using T = decltype(z);
        if (Tk <= WARP_ROW_MAX) {
            DECLARE_KERNEL(k_softmax_backward_warp<T>, "softmax_backward", 2 * ((Tk + 31) / 32) * sizeof(T),
                           2.0 * rows * Tk * sizeof(T), rows * Tk * sizeof(T), 5.0 * rows * Tk);
            LAUNCH(k_softmax_backward_warp<T>, (unsigned)((rows + SM_ROWS - 1) / SM_ROWS), dim3(32, SM_ROWS), 0,
                   IMPL(be)->stream, tp<T>(dP), tp<T>(P), scale, Tk, rows);
            return;
        }
        DECLARE_KERNEL(k_softmax_backward<T>, "softmax_backward", 2 * sizeof(T), 2.0 * rows * Tk * sizeof(T), rows * Tk * sizeof(T),
                       5.0 * rows * Tk);
        LAUNCH(k_softmax_backward<T>, (unsigned)rows, row_threads(Tk), RED_SMEM, IMPL(be)->stream, tp<T>(dP), tp<T>(P),
               scale, Tk);
    });
    CKL();
}

/* ----------------------------------------------------------- log_softmax */

template <typename T> static __global__ void k_log_softmax(T *x, int cols)
{
    DYNAMIC_SHARED(float, sh);
    T *z = x + (long)blockIdx.x * cols;
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) mx = fmaxf(mx, ld(z, k));
    mx = block_max(mx, sh);
    float se = 0.0f;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) se += expf(ld(z, k) - mx);
    se = block_sum(se, sh);
    float lse = mx + logf(se);
    for (int k = threadIdx.x; k < cols; k += blockDim.x) st(z, k, ld(z, k) - lse);
}

static void cuda_log_softmax(Backend *be, Act x, int rows, int cols)
{
    if (rows <= 0 || cols <= 0) return;
    dispatch(x.dtype, [&](auto z) {
        using T = decltype(z);
        DECLARE_KERNEL(k_log_softmax<T>, "log_softmax", sizeof(T), (double)rows * cols * sizeof(T), (double)rows * cols * sizeof(T),
                       5.0 * rows * cols);
        LAUNCH(k_log_softmax<T>, rows, row_threads(cols), RED_SMEM, IMPL(be)->stream, tp<T>(x), cols);
    });
    CKL();
}
