/* Head gates (ops.h head_gate_forward/backward): the heads' outputs scaled
 * before W^O, and the gradient of the loss with respect to each gate
 * (Michel et al. 2019, head importance).  Used only by mask_heads and
 * `transformer heads`; the training step never calls them. */
#pragma once

#include "memory.cuh"

/* out[r, h*dv + j] = gate[h] * ctx[r, h*dv + j]; a grid-stride loop, as
 * nblocks caps the grid (issue 29: the elements past the cap were left
 * unwritten) */
template <typename T>
static __global__ void k_head_gate_forward(T *out, const T *ctx, const float *gate, long n, int nh, int dv)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        int h = (int)((i / dv) % nh);
        st(out, i, ld(gate, h) * ld(ctx, i));
    }
}

static void cuda_head_gate_forward(Backend *be, Act out, Act ctx, const float *gate, int rows, int nh, int dv)
{
    long n = (long)rows * nh * dv;
    if (n <= 0) return;
    dispatch(act_type("head_gate_forward", { out, ctx }), [&](auto z) {
        using T = decltype(z);
        DECLARE_KERNEL(k_head_gate_forward<T>, "head_gate_forward", sizeof(T), n * sizeof(T) + nh * sizeof(float), n * sizeof(T), n);
        LAUNCH(k_head_gate_forward<T>, nblocks(n, 256), 256, 0, IMPL(be)->stream, tp<T>(out), tp<T>(ctx), gate, n,
               nh, dv);
    });
    CKL();
}

/* One block per head: each thread sums dout * ctx over a fixed stride of
 * the head's rows x d_v elements and scales dout in place; the block sum
 * has a fixed order, so dgate is deterministic (no atomics).  n_heads
 * blocks leave most of a GPU idle, which is acceptable for an analysis
 * command that runs once per checkpoint. */
template <typename T>
static __global__ void k_head_gate_backward(float *dgate, T *dctx, const T *ctx, const float *gate, int rows, int nh,
                                            int dv)
{
    DYNAMIC_SHARED(float, sh);
    int h = blockIdx.x;
    long per_head = (long)rows * dv;
    float acc = 0.0f, g = ld(gate, h);
    for (long e = threadIdx.x; e < per_head; e += blockDim.x) {
        long i = (e / dv) * nh * dv + (long)h * dv + e % dv;
        float d = ld(dctx, i);
        acc += d * ld(ctx, i);
        st(dctx, i, g * d);
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0 && dgate) st(dgate, h, ld(dgate, h) + acc);
}

static void cuda_head_gate_backward(Backend *be, float *dgate, Act dctx, Act ctx, const float *gate, int rows,
                                    int nh, int dv)
{
    if ((long)rows * nh * dv <= 0) return;
    dispatch(act_type("head_gate_backward", { dctx, ctx }), [&](auto z) {
        using T = decltype(z);
        double n = (double)rows * nh * dv;
        DECLARE_KERNEL(k_head_gate_backward<T>, "head_gate_backward", 2 * sizeof(T),
                       2 * n * sizeof(T) + nh * sizeof(float) * (dgate ? 2 : 1), n * sizeof(T) + (dgate ? nh * sizeof(float) : 0),
                       3 * n);
        LAUNCH(k_head_gate_backward<T>, (unsigned)nh, 1024, RED_SMEM, IMPL(be)->stream, dgate, tp<T>(dctx), tp<T>(ctx),
               gate, rows, nh, dv);
    });
    CKL();
}
