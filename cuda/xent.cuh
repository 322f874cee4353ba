/* Label-smoothed cross-entropy (section 5.4), fused with its gradient. */
#pragma once

#include "memory.cuh"

/* ------------------------------------------ label-smoothed cross-entropy */

/* Online normaliser (Milakov & Gimelshein 2018, "Online normalizer
 * calculation for softmax"): add cnt values x[] to a running max m and a
 * sum s of exp(x - m), rescaling s once per group whose max raises m.  A
 * group of -inf values adds exp(-inf) = 0 and is skipped, so that a thread
 * whose values so far are all -inf never computes exp(-inf - -inf). */
static __device__ __forceinline__ void lse_add(float &m, float &s, const float *x, int cnt)
{
    float pm = x[0];
    for (int e = 1; e < cnt; e++) pm = fmaxf(pm, x[e]);
    if (pm == -INFINITY) return;
    if (pm > m) {
        s *= expf(m - pm);   /* m = -inf (nothing added yet): s = 0 stays 0 */
        m = pm;
    }
    for (int e = 0; e < cnt; e++) s += expf(x[e] - m);
}

/* one block per row: loss of section 5.4 and, fused, the gradient of the
 * softmax + cross-entropy written over the logits.  Two passes over the
 * row, not three: the max and the sum of exponentials in one (lse_add,
 * each thread's running pair rescaled to the block's max before the
 * block sum), then the gradient.  [tokens x 37000] logits are the
 * largest tensor of the step, and each pass over them cost ~0.7 ms of
 * base's step on the H200 (issue 44).  The row is read in 16-byte packs
 * (row_for, memory.cuh): scalar 2-byte loads left this kernel at a
 * quarter of the memory bandwidth (docs/gpu-model.md). */
template <typename A>
static __global__ void k_xent(A *logits, const int32_t *target, int V, float eps, float gs, float *row_loss,
                              float *row_nll)
{
    DYNAMIC_SHARED(float, sh);
    long r = blockIdx.x;
    A *z = logits + r * V;
    int y = ld(target, r);
    if (y == 0) {
        if (threadIdx.x == 0) {
            st(row_loss, r, 0.0f);
            st(row_nll, r, 0.0f);
        }
        if (gs != 0.0f) row_store(z, V, [](int) { return 0.0f; });
        return;
    }
    float zy = ld(z, y);   /* read before any thread overwrites the row */
    constexpr int N = Pack<A>::N;
    float m = -INFINITY, se = 0.0f, sz = 0.0f;
    row_for(row_split<A>(V, { z }), V, N,
            [&](int k) {
                float x = ld(z, k);
                lse_add(m, se, &x, 1);
                sz += x;
            },
            [&](int k0) {
                Pack<A> v = ldp(z + k0);
                float x[N];
                for (int e = 0; e < N; e++) {
                    x[e] = to_float(v.v[e]);
                    sz += x[e];
                }
                lse_add(m, se, x, N);
            });
    float mx = block_max(m, sh);
    /* a thread that added nothing (m = -inf, se = 0) adds 0 */
    se = block_sum(m == -INFINITY ? 0.0f : se * expf(m - mx), sh);
    sz = block_sum(sz, sh);
    float lse = mx + logf(se);
    if (threadIdx.x == 0) {
        float nll = lse - zy, smooth = lse - sz / V;
        st(row_nll, r, nll);
        st(row_loss, r, (1.0f - eps) * nll + eps * smooth);
    }
    if (gs != 0.0f) {
        float u = eps / V;
        row_update(z, V, [&](int k, float x) {
            float g = gs * (expf(x - lse) - u);
            return k == y ? g - gs * (1.0f - eps) : g;
        });
    }
}

static void cuda_xent_forward_backward(Backend *be, Act logits, const int32_t *target, int rows, int V, float eps,
                                       float grad_scale, float *row_loss, float *row_nll)
{
    if (rows <= 0) return;
    dispatch(logits.dtype, [&](auto z) {
        using A = decltype(z);
        /* every row's logits read once (two passes, the second from cache)
         * and, with a gradient, written once; rows of padding only write
         * (data-dependent, not subtracted) */
        double e = (double)rows * V;
        DECLARE_KERNEL(k_xent<A>, "xent", 16, e * sizeof(A) + rows * sizeof(int32_t),
                       (grad_scale != 0.0f ? e * sizeof(A) : 0) + 2.0 * rows * sizeof(float),
                       (grad_scale != 0.0f ? 9 : 5) * e);
        LAUNCH(k_xent<A>, rows, row_threads(V), RED_SMEM, IMPL(be)->stream, tp<A>(logits), target, V, eps, grad_scale,
               row_loss, row_nll);
    });
    CKL();
}
