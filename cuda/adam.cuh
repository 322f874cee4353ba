/* The Adam optimizer (section 5.3). */
#pragma once

#include "memory.cuh"

/* ------------------------------------------------------------------ Adam */

/* With a narrow shadow of the weights (precision=bf16/fp16, memory.cuh),
 * Adam writes the updated weight into it too: the same rounding the
 * conversion kernel would apply before the next forward's first GEMM, in
 * the pass that already holds the weight, instead of a pass that reads all
 * parameters again (0.95 ms of the big step in the cost model). */
template <typename S>
static __global__ void k_adam(float *param, S *shadow, const float *grad, float *m, float *v, long n, float lr,
                              float b1, float b2, float eps, float c1, float c2, float gs)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = ld(grad, i) * gs;
        float mi = b1 * ld(m, i) + (1.0f - b1) * g;
        float vi = b2 * ld(v, i) + (1.0f - b2) * g * g;
        st(m, i, mi);
        st(v, i, vi);
        float w = ld(param, i) - lr * (mi / c1) / (sqrtf(vi / c2) + eps);
        st(param, i, w);
        if (shadow) st(shadow, i, w);
    }
}

static void cuda_adam(Backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr, float b1,
                      float b2, float eps, int t, float gs)
{
    if (!n) return;
    /* bias corrections on the host, in float as the CPU backend does */
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    /* weights, gradients and moments are fp32 in every precision (float *) */
    CudaImpl *I = IMPL(be);
    touch(I, param, n * sizeof(float));
    bool all = I->shadow && param == I->params && n == I->n_params;   /* the model's whole buffer */
    dispatch(all ? I->act_dtype : DT_F32, [&](auto z) {
        using S = decltype(z);
        S *shadow = all ? (S *)I->shadow : NULL;
        /* param, grad, m, v read; param, m, v (and the shadow) written */
        DECLARE_KERNEL(k_adam<S>, "adam", 4 * sizeof(float), 16.0 * n, 12.0 * n + (shadow ? n * sizeof(S) : 0),
                       14.0 * n);
        LAUNCH(k_adam<S>, nblocks((long)n, 256), 256, 0, I->stream, param, shadow, grad, m, v, (long)n, lr, b1, b2,
               eps, c1, c2, gs);
    });
    CKL();
    if (all) I->shadow_stale = false;
}

/* --------------------------------------------------- overflow detection */

/* *flag = 1 where any x[i] is inf or NaN.  Every writer stores the same
 * value, so the unordered stores need no atomics; the flag is zeroed
 * before the launch. */
static __global__ void k_any_nonfinite(const float *x, long n, int *flag)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        if (!isfinite(ld(x, i))) st(flag, 0, 1);
}

static int cuda_any_nonfinite(Backend *be, const float *x, size_t n)
{
    CudaImpl *I = IMPL(be);
    if (!n) return 0;
    if (!I->flag) CK(cudaMalloc((void **)&I->flag, sizeof(int)));
    memset_async(I, "any_nonfinite", I->flag, sizeof(int));
    /* x read; the flag written only where something overflowed */
    DECLARE_KERNEL(k_any_nonfinite, "any_nonfinite", sizeof(float), 4.0 * n, 0, n);
    LAUNCH(k_any_nonfinite, nblocks((long)n, 256), 256, 0, I->stream, x, (long)n, I->flag);
    CKL();
    int h = 0;
    copy_async(I, "any_nonfinite", &h, I->flag, sizeof(int), cudaMemcpyDeviceToHost);
    stream_sync(I, "any_nonfinite");
    return h;
}
