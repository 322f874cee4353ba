/* The GPU cost model's declarations (docs/gpu-model.md).  Every kernel
 * launch, cuBLAS call, device copy and stream synchronisation of the backend
 * states, next to the call, what it costs the device: bytes read and
 * written in device memory and FLOPs, split into tensor-core and other.
 * While a log is on (cuda_cost_log) each declaration becomes a CostCall;
 * tests/gpu/gpu_model.c prices the calls of one training step with a
 * roofline per call, and the emulator counts the bytes each launch really
 * loads and stores (cuda_cost_seen) so that a test holds the declarations
 * to within 10% of what the kernels do.
 *
 * Declared bytes are device-memory traffic: every element a kernel needs
 * once, although a kernel may load it several times (LayerNorm reads its
 * row three times, served by L1/L2).  The emulator's distinct-byte count is
 * the same quantity; its every-access count is the no-cache bound. */
#pragma once

#include "common.cuh"
#include "cost.h"

static std::vector<CostCall> cost_calls;
static bool cost_on;

extern "C" void cuda_cost_log(int on)
{
    cost_on = on != 0;
    if (cost_on) cost_calls.clear();
}

extern "C" size_t cuda_cost_calls(const CostCall **calls)
{
    *calls = cost_calls.data();
    return cost_calls.size();
}

/* The emulator reports each launch, GEMM and copy after it ran: it must
 * match the last declaration, or the call had none */
extern "C" void cuda_cost_seen(const char *call, double rd, double wr, double rd_all, double wr_all)
{
    if (!cost_on) return;
    CostCall *c = cost_calls.empty() ? NULL : &cost_calls.back();
    if (!c || c->seen_rd >= 0 || strcmp(c->call, call) != 0)
        die(1, "cost model: %s ran without a declared cost (last declared: %s)", call, c ? c->call : "none");
    c->seen_rd = rd;
    c->seen_wr = wr;
    c->seen_rd_all = rd_all;
    c->seen_wr_all = wr_all;
}

/* the emulator reports each launch's grid and block before it runs (a GPU
 * build logs no shapes: the model runs under the emulator) */
extern "C" void cuda_cost_shape(const char *call, double blocks, double threads)
{
    if (!cost_on || cost_calls.empty() || strcmp(cost_calls.back().call, call) != 0) return;   /* cuda_cost_seen complains */
    cost_calls.back().blocks = blocks;
    cost_calls.back().threads = threads;
}

static void declare(const char *op, const char *call, CostKind kind, double rd, double wr, double flop_tc,
                    double flop, TensorCore tc)
{
    if (!cost_on) return;
    cost_calls.push_back(CostCall{ op, call, kind, rd, wr, flop_tc, flop, tc, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1 });
}

/* the shape of the GEMM just declared */
static void declare_shape(int m, int n, int k, long batch, size_t operand)
{
    if (!cost_on) return;
    CostCall &c = cost_calls.back();
    c.m = m;
    c.n = n;
    c.k = k;
    c.batch = (double)batch;
    c.operand = (double)operand;
}

/* a kernel of op `op`: the bytes one thread loads per iteration with
 * independent loads (e.g. 2 * sizeof(A) for x and sub of a LayerNorm: what
 * it keeps in flight, which bounds the bandwidth a kernel reaches, see
 * tests/gpu/roofline.c; nvcc unrolls loops of constant stride by 4, the
 * PTX of `nvcc -ptx` shows it, while loops striding by blockDim or the
 * grid stay one load deep), bytes read, bytes written, FLOPs on the CUDA
 * cores.  The kernel is named as the LAUNCH that follows names it. */
#define DECLARE_KERNEL(kernel, op, per_thread, rd, wr, flop)                                                 \
    do {                                                                                                    \
        if (!cost_on) break; /* the arguments are evaluated only while logging */                           \
        declare((op), #kernel, COST_KERNEL, (double)(rd), (double)(wr), 0.0, (double)(flop), TC_NONE);        \
        cost_calls.back().inflight = (double)(per_thread);                                                  \
    } while (0)

/* ------------------------------------------- copies, memsets and syncs */

static void memset_async(CudaImpl *I, const char *op, void *p, size_t n)
{
    declare(op, "cudaMemsetAsync", COST_COPY, 0, (double)n, 0, 0, TC_NONE);
    CK(cudaMemsetAsync(p, 0, n, I->stream));
}

/* a copy on stream s, declared as `ck`: COST_COMM for one on the
 * communication stream, which overlaps the compute stream's work (the model
 * is of the compute stream) */
static void copy_on(cudaStream_t s, CostKind ck, const char *op, void *dst, const void *src, size_t n,
                    cudaMemcpyKind kind)
{
    declare(op, "cudaMemcpyAsync", ck, kind == cudaMemcpyHostToDevice ? 0 : (double)n,
            kind == cudaMemcpyDeviceToHost ? 0 : (double)n, 0, 0, TC_NONE);
    CK(cudaMemcpyAsync(dst, src, n, kind, s));
}

/* a copy on the backend's stream: device to device moves n bytes each way
 * in device memory, the others cross PCIe */
static void copy_async(CudaImpl *I, const char *op, void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    copy_on(I->stream, kind == cudaMemcpyDeviceToDevice ? COST_COPY : COST_HOST, op, dst, src, n, kind);
}

/* the host waits for the stream: the GPU runs dry until the next launch */
static void stream_sync(CudaImpl *I, const char *op)
{
    declare(op, "cudaStreamSynchronize", COST_SYNC, 0, 0, 0, 0, TC_NONE);
    CK(cudaStreamSynchronize(I->stream));
}
