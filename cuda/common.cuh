/* Shared by every part of the CUDA backend: headers, error checks, the
 * backend state (CudaImpl), launch sizing, block reductions and the dropout
 * helpers of the kernels. */
#pragma once

#include "cuda_compat.h"

#include <cublasLt.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include <mpi.h>
#if defined(HAVE_NCCL) || defined(CUDA_EMULATION)
#define USE_NCCL 1
#include <nccl.h>
#else
#define USE_NCCL 0
#endif

extern "C" {
#include "../src/ops.h"
#include "../src/util.h"
#include "../src/device_peers.h"
}

#define CK(call)                                                                                      \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) die(1, "cuda: %s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define CKB(call)                                                                                        \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) die(1, "cublas: %s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
    } while (0)
#define CKL() CK(cudaGetLastError())

/* Has the work before e completed?  A query answers cudaErrorNotReady while
 * it runs, and the runtime also keeps that answer as the thread's last
 * error: cleared here, or the next CKL() would take it for a failed launch
 * (PyTorch's CUDAEvent::query does the same).  Any other error is fatal. */
static bool event_ready(cudaEvent_t e)
{
    cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
    }
    CK(q);
    return true;
}

/* a column sum whose last stage is held back (defer_sums, gemm.cuh): its
 * chunk partials (sets x chunks x cols floats, in the sums arena) and the
 * gradients they add into; no padding, as a launch's arguments are hashed
 * byte for byte under CUDA Graphs (graph.cuh) */
struct SumsEntry {
    const float *part;
    float *out[3];
    int chunks, cols, sets, pad;
};
#define SUMS_MAX 48   /* entries one final launch takes (its argument: 2.5 KB of the 4 KB) */
struct SumsList {
    SumsEntry e[SUMS_MAX];
    int col_start[SUMS_MAX + 2];   /* entry i's columns (sets x cols) start at col_start[i] */
    int n, pad;
};

struct CudaImpl {
    int device;
    Precision precision;   /* the config key's (config.h) */
    cublasComputeType_t compute;
    cudaStream_t stream;
    cublasHandle_t blas;
    /* sinusoid table of section 3.5 for (sin_d, sin_n positions), computed on
     * the host in double exactly as the CPU backend does */
    float *sin_table;
    int sin_d, sin_n;
    /* scratch: column-sum partials, embedding-gradient segments and chunk
     * sums (apart from part: embed.cuh embed_partial says why) */
    float *part;
    size_t part_cap;
    int32_t *seg;
    size_t seg_cap;
    float *embed_part;
    size_t embed_part_cap;
    /* held-back column sums (defer_sums, gemm.cuh): while defer_sums is
     * on, the partials go to sums_arena (bump-allocated: sums_used of
     * sums_cap floats; sums_asked since the last release) and their last
     * stages wait in sums_pending */
    bool defer_sums;
    float *sums_arena;
    size_t sums_cap, sums_used, sums_asked;
    std::vector<SumsEntry> sums_pending;
    /* device pointer arrays of cublasGemmBatchedEx (A | B | C) */
    void **gptrs;
    size_t gptrs_cap;
    std::vector<int32_t> h_tok, count;
    /* pinned staging of the embedding-gradient segments, two used in turn
     * (a step's target and source calls): a call refills one while the
     * copy out of the other may still be queued on the stream */
    int32_t *seg_host[2];
    size_t seg_host_cap[2];
    cudaEvent_t seg_copied[2];
    int seg_turn;
    /* gradient allreduce (allreduce_* hooks of ops.h) */
    MPI_Comm comm;
    int nranks;
    bool want_nccl;   /* key allreduce=nccl (the default) */
    bool need_nccl;   /* allreduce=nccl given explicitly: no fallback */
    bool use_nccl;
    cudaStream_t comm_stream;
    cudaEvent_t ev_ready, ev_done;
#if USE_NCCL
    ncclComm_t nccl;
#endif
    /* MPI fallback: a bucket's pinned staging, kept from update to update
     * (the buckets are the same each time), and its request; buckets
     * [0, n_posted) have their MPI_Iallreduce posted, [n_posted, n_staged)
     * wait for their download */
    struct Staged {
        float *host;          /* cudaMallocHost'd, cap floats */
        size_t cap, n;
        float *dst;           /* the bucket in device memory */
        cudaEvent_t copied;   /* after the download on comm_stream */
    };
    std::vector<Staged> staged;
    std::vector<MPI_Request> reqs;   /* one per staged[] entry (MPI_Testall takes an array) */
    size_t n_staged, n_posted;
    /* activation storage (alloc_act): element type, and the bytes of each
     * buffer by address, for act_bytes and to free what the caller left */
    DType act_dtype;
    std::unordered_map<void *, size_t> act_size;
    /* precision=bf16/fp16: the weights' narrow shadow (memory.cuh) */
    const float *params;                 /* fp32 master weights (set_params) */
    size_t n_params;
    void *shadow;                        /* act_dtype copy of params for GEMM inputs */
    bool shadow_stale;
    /* GEMM operand conversions: A, B, C, and a bias vector or the cuBLASLt
     * workspace (GS_BIAS, GS_LT_WS, gemm.cuh) */
    void *gscratch[5];
    size_t gscratch_cap[5];
    /* cuBLASLt for the GEMMs with a fused bias / ReLU epilogue (gemm.cuh) */
    cublasLtHandle_t lt;
    cublasLtMatmulPreference_t lt_pref;
    /* its plans by shape, types, epilogue and alignment (gemm.cuh LtPlan),
     * and whether the last forward into each ReLU mask wrote it (fused) */
    std::map<std::vector<int64_t>, struct LtPlan *> lt_plans;
    std::unordered_map<const void *, bool> lt_mask_written;
    /* whether the FFN forward writes the ReLU bit-mask for the DRELU
     * backward (TRANSFORMER_RELU_MASK, cuda/device.cuh) */
    bool relu_mask = false;
    int *flag;                           /* any_nonfinite's result on the device */
    /* CUDA Graphs of the training step (graph.cuh): the cached graphs, the
     * step number the dropout kernels read under them, a count of the
     * allocations of scratch (a capture during one is not kept) and of the
     * frees of scratch that graphs may hold the address of (every cached
     * graph is dropped) */
    struct StepGraphs *graphs;
    uint32_t *d_step;
    uint32_t graph_step;
    long mem_gen, freed_gen;
};

static CudaImpl *IMPL(Backend *be) { return (CudaImpl *)be->impl; }

/* the grid of an elementwise kernel over n elements: capped, so every
 * kernel launched with it must be a grid-stride loop.  The emulator can
 * lower the cap (cuda_emu_set_grid_cap: test_cuda_kernels) so that a kernel
 * that is not one misses elements at the tests' sizes. */
static unsigned nblocks(long n, int threads)
{
    long b = (n + threads - 1) / threads, cap = 65535L * 16;
#ifdef CUDA_EMULATION
    cap = cuda_emu::grid_cap(cap);
#endif
    if (b > cap) b = cap;
    return (unsigned)(b > 0 ? b : 1);
}

/* ------------------------------------------------------- device helpers */

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max) over the block; blockDim.x a multiple of 32, sh >= 33 floats.
 * Every thread gets the result.  The closing barrier lets the caller reuse
 * sh right away. */
static __device__ float block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads();
    return r;
}

static __device__ float block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? sh[lane] : -INFINITY;
        t = warp_max(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads();
    return r;
}

#define RED_SMEM (33 * sizeof(float))

/* A dropout key as a kernel argument.  Under a step graph (graph.cuh) the
 * step is read from device memory (step, set before each replay): a graph
 * replays the arguments of its capture, and the step changes every step.
 * Otherwise step is NULL and key.step holds it. */
struct DropArg {
    DropoutKey key;
    const uint32_t *step;
};
static __device__ __forceinline__ DropoutKey drop_key(DropArg a)
{
    if (a.step) a.key.step = *a.step;
    return a.key;
}

static __device__ __forceinline__ float drop_apply(float v, float p, float ks, DropoutKey key, uint32_t sent,
                                                   uint32_t pos, uint32_t j)
{
    if (p > 0.0f) v = dropout_keep(key, p, sent, pos, j) ? v * ks : 0.0f;
    return v;
}

static float drop_scale(float p) { return p > 0.0f ? 1.0f / (1.0f - p) : 1.0f; }

/* The dropout keep-flags of one token row into shared memory, one Philox
 * call per 4 features (dropout_keep4), instead of one call per feature
 * through dropout_keep, which decides 1 of its 4 features: 10 rounds of
 * 32-bit multiplies per element would be more instructions than the memory
 * traffic of the LayerNorm kernels can hide.  The caller syncs before
 * reading keep[]. */
static __device__ __forceinline__ void drop_mask_row(unsigned char *keep, int d, float p, DropoutKey key,
                                                     uint32_t sent, uint32_t pos)
{
    for (int q = threadIdx.x; 4 * q < d; q += blockDim.x) {
        unsigned m = dropout_keep4(key, p, sent, pos, (uint32_t)q);
        int j = 4 * q;
        keep[j] = m & 1;
        if (j + 1 < d) keep[j + 1] = (m >> 1) & 1;
        if (j + 2 < d) keep[j + 2] = (m >> 2) & 1;
        if (j + 3 < d) keep[j + 3] = (m >> 3) & 1;
    }
}

/* dynamic shared memory of a row kernel with block reductions and, when
 * dropout is on, the row's keep-flags after the reduction scratch */
static size_t row_drop_smem(int d, float p) { return RED_SMEM + (p > 0.0f ? (size_t)d : 0); }


static int row_threads(int n)
{
    /* a warp per 32 elements up to 256 threads; multiple of 32 always */
    int t = (n + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : t;
}
