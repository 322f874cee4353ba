/* Label-smoothed cross-entropy (section 5.4), fused with its gradient. */
#pragma once

#include "memory.cuh"

/* ------------------------------------------ label-smoothed cross-entropy */

/* one block per row: loss of section 5.4 and, fused, the gradient of the
 * softmax + cross-entropy written over the logits.  The row is read in
 * 16-byte packs (row_read, memory.cuh): [tokens x 37000] logits are the
 * largest tensor of the step, and scalar 2-byte loads left this kernel at
 * a quarter of the memory bandwidth (docs/gpu-model.md). */
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
    float mx = -INFINITY;
    row_read(z, V, [&](int, float x) { mx = fmaxf(mx, x); });
    mx = block_max(mx, sh);
    float se = 0.0f, sz = 0.0f;
    row_read(z, V, [&](int, float x) {
        se += expf(x - mx);
        sz += x;
    });
    se = block_sum(se, sh);
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
        /* every row's logits read once (three passes, from cache after the
         * first) and, with a gradient, written once; rows of padding only
         * write (data-dependent, not subtracted) */
        double e = (double)rows * V;
        DECLARE_KERNEL(k_xent<A>, "xent", 16, e * sizeof(A) + rows * sizeof(int32_t),
                       (grad_scale != 0.0f ? e * sizeof(A) : 0) + 2.0 * rows * sizeof(float),
                       (grad_scale != 0.0f ? 9 : 5) * e);
        LAUNCH(k_xent<A>, rows, row_threads(V), RED_SMEM, IMPL(be)->stream, tp<A>(logits), target, V, eps, grad_scale,
               row_loss, row_nll);
    });
    CKL();
}
