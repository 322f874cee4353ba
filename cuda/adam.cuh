/* The Adam optimizer (section 5.3). */
#pragma once

#include "memory.cuh"

/* ------------------------------------------------------------------ Adam */

static __global__ void k_adam(float *param, const float *grad, float *m, float *v, long n, float lr, float b1,
                              float b2, float eps, float c1, float c2, float gs)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = ld(grad, i) * gs;
        float mi = b1 * ld(m, i) + (1.0f - b1) * g;
        float vi = b2 * ld(v, i) + (1.0f - b2) * g * g;
        st(m, i, mi);
        st(v, i, vi);
        st(param, i, ld(param, i) - lr * (mi / c1) / (sqrtf(vi / c2) + eps));
    }
}

static void cuda_adam(Backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr, float b1,
                      float b2, float eps, int t, float gs)
{
    if (!n) return;
    /* bias corrections on the host, in float as the CPU backend does */
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    /* weights, gradients and moments are fp32 in every precision (float *) */
    touch(IMPL(be), param, n * sizeof(float));
    /* param, grad, m, v read; param, m, v written */
    DECLARE_KERNEL(k_adam, "adam", 4 * sizeof(float), 16.0 * n, 12.0 * n, 14.0 * n);
    LAUNCH(k_adam, nblocks((long)n, 256), 256, 0, IMPL(be)->stream, param, grad, m, v, (long)n, lr, b1, b2, eps, c1,
           c2, gs);
    CKL();
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
