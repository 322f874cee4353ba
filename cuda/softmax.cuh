/* Attention softmax (eq. 1, with padding and causal masks) and the
 * log-softmax of decoding. */
#pragma once

#include "common.cuh"

/* --------------------------------------------------------------- softmax */

/* one block per row of S (eq. 1 with the padding and causal masks) */
static __global__ void k_softmax_forward(TP S, const int32_t *key_len, float scale, int nh, int Tq, int Tk,
                                         int causal, int q_offset)
{
    DYNAMIC_SHARED(float, sh);
    long r = blockIdx.x;
    int b = (int)(r / ((long)nh * Tq)), q = (int)(r % Tq);
    int n = key_len[b];
    if (causal && q + q_offset + 1 < n) n = q + q_offset + 1;
    if (n > Tk) n = Tk;
    TP s = at(S, r * Tk);
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < n; k += blockDim.x) mx = fmaxf(mx, ld(s, k) * scale);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) sum += expf(ld(s, k) * scale - mx);
    sum = block_sum(sum, sh);
    float inv = n > 0 ? 1.0f / sum : 0.0f;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) st(s, k, k < n ? expf(ld(s, k) * scale - mx) * inv : 0.0f);
}

static void cuda_softmax_forward(Backend *be, float *S, const int32_t *key_len, float scale, int nb, int nh, int Tq,
                                 int Tk, int causal, int q_offset)
{
    long rows = (long)nb * nh * Tq;
    if (rows <= 0 || Tk <= 0) return;
    LAUNCH(k_softmax_forward, (unsigned)rows, row_threads(Tk), RED_SMEM, IMPL(be)->stream, R(be, S), key_len, scale, nh,
           Tq, Tk, causal, q_offset);
    CKL();
}

static __global__ void k_softmax_backward(TP dP, TP P, float scale, int Tk)
{
    DYNAMIC_SHARED(float, sh);
    TP d = at(dP, (long)blockIdx.x * Tk), p = at(P, (long)blockIdx.x * Tk);
    float dot = 0.0f;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) dot += ld(p, k) * ld(d, k);
    dot = block_sum(dot, sh);
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) st(d, k, scale * ld(p, k) * (ld(d, k) - dot));
}

static void cuda_softmax_backward(Backend *be, float *dP, const float *P, float scale, int nb, int nh, int Tq, int Tk)
{
    long rows = (long)nb * nh * Tq;
    if (rows <= 0 || Tk <= 0) return;
    LAUNCH(k_softmax_backward, (unsigned)rows, row_threads(Tk), RED_SMEM, IMPL(be)->stream, R(be, dP), R(be, P), scale,
           Tk);
    CKL();
}

/* ----------------------------------------------------------- log_softmax */

static __global__ void k_log_softmax(TP x, int cols)
{
    DYNAMIC_SHARED(float, sh);
    TP z = at(x, (long)blockIdx.x * cols);
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) mx = fmaxf(mx, ld(z, k));
    mx = block_max(mx, sh);
    float se = 0.0f;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) se += expf(ld(z, k) - mx);
    se = block_sum(se, sh);
    float lse = mx + logf(se);
    for (int k = threadIdx.x; k < cols; k += blockDim.x) st(z, k, ld(z, k) - lse);
}

static void cuda_log_softmax(Backend *be, float *x, int rows, int cols)
{
    if (rows <= 0 || cols <= 0) return;
    LAUNCH(k_log_softmax, rows, row_threads(cols), RED_SMEM, IMPL(be)->stream, R(be, x), cols);
    CKL();
}
