/* CUDA backend: the op interface of src/ops.h on one GPU, name for name with
 * the CPU reference src/ops_cpu.c.
 *
 * - GEMMs go to cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx).  The
 *   interface is row-major and cuBLAS column-major: a row-major C = op(A)
 *   op(B) is the column-major C^T = op(B)^T op(A)^T, so the operands are
 *   swapped and every transpose stays an operand flag (nothing is copied).
 * - precision: fp32 (IEEE sgemm) or tf32 (tensor cores, 10-bit mantissa
 *   inputs), chosen by the cuBLAS compute type, with everything stored
 *   fp32; or bf16 mixed precision (section "bf16 storage" below):
 *   activations and GEMM inputs stored bf16, every op accumulating in fp32,
 *   fp32 master weights, gradients and Adam state.
 * - Every other op is a kernel below.  Reductions are block-level tree sums
 *   with a fixed shape, so results are deterministic run to run; no kernel
 *   uses atomics.  Dropout masks come from the same Philox counter as the
 *   CPU (philox.h), so both backends drop exactly the same elements.
 * - All work is issued on one stream; upload/download synchronise it.
 *
 * The file also compiles with g++ -DCUDA_EMULATION against cuda/emu/, which
 * runs the kernels on the CPU in the tests. */
#include "cuda_compat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <sched.h>
#include <sys/mman.h>
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

enum { PREC_FP32, PREC_TF32, PREC_BF16 };

/* One alloc_act buffer.  bf16: [base, base + bytes) is a PROT_NONE host
 * reservation (a handle, sized as fp32) and dev the bf16 storage of
 * bytes/4 elements; fp32: base == dev, recorded only to count act_bytes. */
struct ActRange {
    uintptr_t base;
    size_t bytes;
    void *dev;
};

struct CudaImpl {
    int device;
    int precision;
    cublasComputeType_t compute;
    cudaStream_t stream;
    cublasHandle_t blas;
    /* sinusoid table of section 3.5 for (sin_d, sin_n positions), computed on
     * the host in double exactly as the CPU backend does */
    float *sin_table;
    int sin_d, sin_n;
    /* scratch: column-sum partials, embedding-gradient segments */
    float *part;
    size_t part_cap;
    int32_t *seg;
    size_t seg_cap;
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
    bool use_nccl;
    cudaStream_t comm_stream;
    cudaEvent_t ev_ready, ev_done;
#if USE_NCCL
    ncclComm_t nccl;
#endif
    /* MPI fallback: host staging per started bucket */
    std::vector<std::vector<float>> stage;
    std::vector<float *> stage_dst;
    std::vector<MPI_Request> reqs;
    /* bf16 storage (precision=bf16; see "bf16 storage" below) */
    bool bf16;
    std::vector<ActRange> acts;   /* sorted by base */
    const float *params;                 /* fp32 master weights (set_params) */
    size_t n_params;
    __nv_bfloat16 *shadow;               /* bf16 copy of params for GEMM inputs */
    bool shadow_stale;
    void *gscratch[3];                   /* GEMM operand conversions: A, B, C */
    size_t gscratch_cap[3];
};

static CudaImpl *IMPL(Backend *be) { return (CudaImpl *)be->impl; }

static unsigned nblocks(long n, int threads)
{
    long b = (n + threads - 1) / threads;
    if (b > 65535L * 16) b = 65535L * 16;   /* kernels are grid-stride loops */
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

/* ---------------------------------------------------------- bf16 storage
 *
 * With precision=bf16 the model's activations (everything it allocates with
 * alloc_act, see ops.h) are stored as bf16 (8-bit mantissa, fp32's exponent
 * range: no loss scaling needed), halving their memory and the bytes every
 * elementwise kernel moves; parameters, gradients, Adam moments, LayerNorm
 * statistics and losses stay fp32 (mixed precision as in Micikevicius et
 * al. 2018, with bf16 instead of fp16).
 *
 * model.c is unchanged: it does float-pointer arithmetic on activation
 * buffers (a->qkv + hk), so alloc_act returns a *handle*, an address in a
 * host range reserved PROT_NONE with the fp32 size (never touched: any
 * host access faults), and cudaMallocs the bf16 storage.  Element index =
 * (float *)p - (float *)base.  Every op resolves each pointer argument to a
 * typed device pointer (TP: pointer + element type); kernels load and store
 * through ld()/st(), which convert to and from fp32 (round to nearest even)
 * with a branch that is uniform over the launch, and compute in fp32.
 * Pointers that are not handles (parameters, gradients, buffers the
 * decoders allocate with plain alloc) resolve to fp32 as before, so the ops
 * accept any mix, and precision=fp32/tf32 runs exactly the code of before.
 *
 * GEMMs: when either input is bf16 both are given to cuBLAS as bf16 (the
 * weights through a bf16 shadow copy of the parameters, refreshed lazily
 * after anything writes the parameters: Adam, upload, copy, zero), with
 * fp32 accumulation (CUBLAS_COMPUTE_32F) and C stored bf16 (activations) or
 * fp32 (weight gradients, accumulated with beta = 1 in fp32). */

/* typed device pointer */
struct TP {
    void *p;
    int bf;   /* 1: __nv_bfloat16 elements, 0: float */
};

static __device__ __forceinline__ float ld(TP t, size_t i)
{
    return t.bf ? __bfloat162float(((const __nv_bfloat16 *)t.p)[i]) : ((const float *)t.p)[i];
}

static __device__ __forceinline__ void st(TP t, size_t i, float v)
{
    if (t.bf)
        ((__nv_bfloat16 *)t.p)[i] = __float2bfloat16_rn(v);
    else
        ((float *)t.p)[i] = v;
}

/* t advanced by i elements */
static __host__ __device__ __forceinline__ TP at(TP t, size_t i)
{
    TP r = { (char *)t.p + i * (t.bf ? 2 : 4), t.bf };
    return r;
}

static const ActRange *find_act(CudaImpl *I, const void *p)
{
    uintptr_t u = (uintptr_t)p;
    auto it = std::upper_bound(I->acts.begin(), I->acts.end(), u,
                               [](uintptr_t v, const ActRange &r) { return v < r.base; });
    if (it == I->acts.begin()) return NULL;
    --it;
    return u - it->base < it->bytes ? &*it : NULL;
}

/* the device storage behind a pointer argument of an op */
static TP R(Backend *be, const void *p)
{
    CudaImpl *I = IMPL(be);
    TP t = { (void *)p, 0 };
    if (!I->bf16 || !p) return t;
    const ActRange *a = find_act(I, p);
    if (!a) return t;
    size_t off = (uintptr_t)p - a->base;
    if (off % sizeof(float)) die(1, "cuda: activation pointer %p is not float-aligned within its buffer", p);
    t.p = (char *)a->dev + off / 2;
    t.bf = 1;
    return t;
}

static bool in_params(CudaImpl *I, const void *p, size_t bytes)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)I->params, e = b + I->n_params * sizeof(float);
    return I->params && u < e && u + bytes > b;
}

/* anything that writes the master weights makes the bf16 shadow stale */
static void touch(CudaImpl *I, const void *p, size_t bytes)
{
    if (I->shadow && in_params(I, p, bytes)) I->shadow_stale = true;
}

static __global__ void k_convert(TP dst, TP src, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        st(dst, i, ld(src, i));
}

static void convert(Backend *be, TP dst, TP src, long n)
{
    if (n <= 0) return;
    LAUNCH(k_convert, nblocks(n, 256), 256, 0, IMPL(be)->stream, dst, src, n);
    CKL();
}

/* ---------------------------------------------------------------- memory */

static void *cuda_alloc(Backend *be, size_t bytes)
{
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    CK(cudaMemsetAsync(p, 0, n, IMPL(be)->stream));
    return p;
}

static void *cuda_alloc_act(Backend *be, size_t bytes)
{
    CudaImpl *I = IMPL(be);
    ActRange a;
    size_t held;
    if (!I->bf16) {
        a.dev = cuda_alloc(be, bytes);
        if (!a.dev) return NULL;
        a.base = (uintptr_t)a.dev;
        held = bytes;
    } else {
        size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
        if (!n) n = 1;
        /* NORESERVE: only address space, no memory, is taken on the host */
        void *h = mmap(NULL, n * sizeof(float), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (h == MAP_FAILED) return NULL;
        a.dev = cuda_alloc(be, n * sizeof(__nv_bfloat16));   /* zero bits = bf16 0.0 */
        if (!a.dev) {
            munmap(h, n * sizeof(float));
            return NULL;
        }
        a.base = (uintptr_t)h;
        held = n * sizeof(__nv_bfloat16);
    }
    a.bytes = bytes ? bytes : 1;
    auto it = std::upper_bound(I->acts.begin(), I->acts.end(), a.base,
                               [](uintptr_t v, const ActRange &r) { return v < r.base; });
    I->acts.insert(it, a);
    be->act_bytes += held;
    return (void *)a.base;
}

static void cuda_free(Backend *be, void *p)
{
    CudaImpl *I = IMPL(be);
    if (!p) return;
    const ActRange *a = find_act(I, p);
    if (a && a->base == (uintptr_t)p) {
        size_t i = a - I->acts.data();
        ActRange r = *a;
        I->acts.erase(I->acts.begin() + i);
        if (r.dev != p) {   /* bf16: the handle's reservation and the storage */
            size_t n = (r.bytes + sizeof(float) - 1) / sizeof(float);
            munmap(p, n * sizeof(float));
            be->act_bytes -= n * sizeof(__nv_bfloat16);
            CK(cudaFree(r.dev));
            return;
        }
        be->act_bytes -= r.bytes;
    }
    CK(cudaFree(p));
}

static void cuda_set_params(Backend *be, float *params, size_t n)
{
    CudaImpl *I = IMPL(be);
    I->params = params;
    I->n_params = n;
    if (I->shadow) CK(cudaFree(I->shadow));
    I->shadow = NULL;
    if (I->bf16 && n) CK(cudaMalloc((void **)&I->shadow, n * sizeof(__nv_bfloat16)));
    I->shadow_stale = true;
}

/* the weights as a bf16 GEMM operand: the shadow, converted if stale */
static TP shadow_of(Backend *be, const void *p)
{
    CudaImpl *I = IMPL(be);
    if (I->shadow_stale) {
        TP d = { I->shadow, 1 }, s = { (void *)I->params, 0 };
        convert(be, d, s, (long)I->n_params);
        I->shadow_stale = false;
    }
    TP t = { I->shadow, 1 };
    return at(t, (const float *)p - I->params);
}

static void cuda_upload(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CudaImpl *I = IMPL(be);
    TP d = R(be, dst);
    touch(I, dst, n);
    if (d.bf) {   /* fp32 host data into bf16 storage: convert on the host */
        size_t k = n / sizeof(float);
        std::vector<__nv_bfloat16> h(k);
        for (size_t i = 0; i < k; i++) h[i] = __float2bfloat16_rn(((const float *)src)[i]);
        CK(cudaMemcpyAsync(d.p, h.data(), k * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, I->stream));
        CK(cudaStreamSynchronize(I->stream));
        return;
    }
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, I->stream));
    CK(cudaStreamSynchronize(I->stream));   /* the caller may reuse src at once */
}

static void cuda_download(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CudaImpl *I = IMPL(be);
    TP s = R(be, src);
    if (s.bf) {   /* e.g. attention weights P for the maps: widen on the host */
        size_t k = n / sizeof(float);
        std::vector<__nv_bfloat16> h(k);
        CK(cudaMemcpyAsync(h.data(), s.p, k * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost, I->stream));
        CK(cudaStreamSynchronize(I->stream));
        for (size_t i = 0; i < k; i++) ((float *)dst)[i] = __bfloat162float(h[i]);
        return;
    }
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, I->stream));
    CK(cudaStreamSynchronize(I->stream));
}

static void cuda_zero(Backend *be, void *p, size_t n)
{
    if (!n) return;
    TP t = R(be, p);
    touch(IMPL(be), p, n);
    CK(cudaMemsetAsync(t.p, 0, t.bf ? n / 2 : n, IMPL(be)->stream));
}

static void cuda_copy(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n || dst == src) return;
    TP d = R(be, dst), s = R(be, src);
    touch(IMPL(be), dst, n);
    if (d.bf != s.bf) {   /* between bf16 and fp32 storage: convert */
        convert(be, d, s, (long)(n / sizeof(float)));
        return;
    }
    CK(cudaMemcpyAsync(d.p, s.p, d.bf ? n / 2 : n, cudaMemcpyDeviceToDevice, IMPL(be)->stream));
}

static void cuda_sync(Backend *be) { CK(cudaStreamSynchronize(IMPL(be)->stream)); }

/* ----------------------------------------------------------------- GEMM */

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }
static cudaDataType dtype(TP t) { return t.bf ? CUDA_R_16BF : CUDA_R_32F; }

/* elements spanned by a row-major rows x cols matrix with leading dimension ld */
static long span(int rows, int cols, int ld) { return rows > 0 && cols > 0 ? (long)(rows - 1) * ld + cols : 0; }

static void *gemm_scratch(Backend *be, int k, size_t bytes)
{
    CudaImpl *I = IMPL(be);
    if (bytes > I->gscratch_cap[k]) {
        if (I->gscratch[k]) CK(cudaFree(I->gscratch[k]));
        I->gscratch_cap[k] = bytes * 5 / 4;
        CK(cudaMalloc(&I->gscratch[k], I->gscratch_cap[k]));
    }
    return I->gscratch[k];
}

/* The storage a GEMM runs on (see "bf16 storage"): A, B and C resolved; if
 * either input is bf16 both become bf16 (weights: the shadow; any other
 * fp32 operand: converted into scratch) and cuBLAS accumulates in fp32.
 * fp32 inputs into a bf16 C (no such cuBLAS type combination) go through
 * an fp32 scratch C.  precision=fp32/tf32: everything fp32, the plain call. */
struct GemmOps {
    TP a, b, c, c_dst;
    long c_n;   /* > 0: c is scratch, converted into c_dst afterwards */
    cublasComputeType_t ct;
};

static GemmOps gemm_ops(Backend *be, const void *A, long nA, const void *B, long nB, void *C, long nC, float beta)
{
    CudaImpl *I = IMPL(be);
    GemmOps g = { R(be, A), R(be, B), R(be, C), { NULL, 0 }, 0, I->compute };
    if (g.a.bf || g.b.bf) {
        TP *t[2] = { &g.a, &g.b };
        const void *raw[2] = { A, B };
        long n[2] = { nA, nB };
        for (int k = 0; k < 2; k++) {
            if (t[k]->bf) continue;
            const float *p = (const float *)raw[k];
            if (I->shadow && p >= I->params && p + n[k] <= I->params + I->n_params) {
                *t[k] = shadow_of(be, p);
            } else {
                TP s = { gemm_scratch(be, k, n[k] * sizeof(__nv_bfloat16) + 2), 1 };
                convert(be, s, *t[k], n[k]);
                *t[k] = s;
            }
        }
        g.ct = CUBLAS_COMPUTE_32F;
    } else if (g.c.bf) {
        TP s = { gemm_scratch(be, 2, nC * sizeof(float) + 4), 0 };
        if (beta != 0.0f) convert(be, s, g.c, nC);
        g.c_dst = g.c;
        g.c = s;
        g.c_n = nC;
    }
    return g;
}

static void gemm_done(Backend *be, const GemmOps &g)
{
    if (g.c_n) convert(be, g.c_dst, g.c, g.c_n);
}

static void cuda_gemm(Backend *be, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    CudaImpl *I = IMPL(be);
    if (M <= 0 || N <= 0) return;
    GemmOps g = gemm_ops(be, A, tA ? span(K, M, lda) : span(M, K, lda), B, tB ? span(N, K, ldb) : span(K, N, ldb), C,
                         span(M, N, ldc), beta);
    /* row-major C[M,N] = column-major C^T[N,M] = op(B)^T op(A)^T */
    CKB(cublasGemmEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.p, dtype(g.b), ldb, g.a.p, dtype(g.a), lda, &beta,
                     g.c.p, dtype(g.c), ldc, g.ct, CUBLAS_GEMM_DEFAULT));
    gemm_done(be, g);
}

/* pointers to matrix (o, i) of A, B and C for cublasGemmBatchedEx: out[idx],
 * out[n + idx], out[2n + idx] with idx = o * n_inner + i */
static __global__ void k_gemm_ptrs(void **out, TP a, TP b, TP c, long sAo, long sAi, long sBo, long sBi, long sCo,
                                   long sCi, int n_inner, long n)
{
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        long o = idx / n_inner, i = idx % n_inner;
        out[idx] = at(a, o * sAo + i * sAi).p;
        out[n + idx] = at(b, o * sBo + i * sBi).p;
        out[2 * n + idx] = at(c, o * sCo + i * sCi).p;
    }
}

static void cuda_gemm_batched(Backend *be, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                              long sAo, long sAi, const float *B, int ldb, long sBo, long sBi, float beta, float *C,
                              int ldc, long sCo, long sCi, int n_outer, int n_inner)
{
    CudaImpl *I = IMPL(be);
    if (M <= 0 || N <= 0 || n_outer <= 0 || n_inner <= 0) return;
    long last_o = n_outer - 1, last_i = n_inner - 1;
    long nA = (tA ? span(K, M, lda) : span(M, K, lda)), nB = (tB ? span(N, K, ldb) : span(K, N, ldb));
    if (nA) nA += last_o * sAo + last_i * sAi;
    if (nB) nB += last_o * sBo + last_i * sBi;
    GemmOps g = gemm_ops(be, A, nA, B, nB, C, span(M, N, ldc) + last_o * sCo + last_i * sCi, beta);
    cudaDataType ta = dtype(g.a), tb = dtype(g.b), tc = dtype(g.c);
    /* One strided-batched call when the (outer, inner) grid is a single
     * stride for all three operands (or one of its sides is 1).  Otherwise
     * (attention: outer = sentence, inner = head at stride d_k within a row
     * of Q/K/V, but at stride Tq*Tk in P) one cublasGemmBatchedEx over
     * pointer arrays that a small kernel writes on the device: two launches
     * instead of one per head (~1000 per base step, ~2000 per big step, each
     * a few microseconds of launch for a few microseconds of work). */
    long n = (long)n_outer * n_inner;
    if (n_outer == 1 || (sAo == n_inner * sAi && sBo == n_inner * sBi && sCo == n_inner * sCi)) {
        CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.p, tb, ldb, sBi, g.a.p, ta, lda,
                                       sAi, &beta, g.c.p, tc, ldc, sCi, (int)n, g.ct, CUBLAS_GEMM_DEFAULT));
    } else if (n_inner == 1) {
        CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.p, tb, ldb, sBo, g.a.p, ta, lda,
                                       sAo, &beta, g.c.p, tc, ldc, sCo, n_outer, g.ct, CUBLAS_GEMM_DEFAULT));
    } else {
        if ((size_t)(3 * n) > I->gptrs_cap) {
            CK(cudaStreamSynchronize(I->stream));   /* the old arrays may still be read */
            if (I->gptrs) CK(cudaFree(I->gptrs));
            I->gptrs_cap = (size_t)(3 * n) * 2;
            CK(cudaMalloc((void **)&I->gptrs, I->gptrs_cap * sizeof(void *)));
        }
        /* stream order: these arrays are written after the last batched GEMM read them */
        LAUNCH(k_gemm_ptrs, nblocks(n, 256), 256, 0, I->stream, I->gptrs, g.a, g.b, g.c, sAo, sAi, sBo, sBi, sCo, sCi,
               n_inner, n);
        CKL();
        CKB(cublasGemmBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, (const void *const *)(I->gptrs + n), tb, ldb,
                                (const void *const *)I->gptrs, ta, lda, &beta, I->gptrs + 2 * n, tc, ldc, (int)n, g.ct,
                                CUBLAS_GEMM_DEFAULT));
    }
    gemm_done(be, g);
}

/* ------------------------------------------------------------------ bias */

static __global__ void k_bias_forward(TP Y, TP bias, long n, int cols, int relu)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = ld(Y, i) + ld(bias, i % cols);
        st(Y, i, relu ? (v > 0.0f ? v : 0.0f) : v);
    }
}

static void cuda_bias_forward(Backend *be, float *Y, const float *bias, int rows, int cols, int relu)
{
    long n = (long)rows * cols;
    if (n <= 0) return;
    LAUNCH(k_bias_forward, nblocks(n, 256), 256, 0, IMPL(be)->stream, R(be, Y), R(be, bias), n, cols, relu);
    CKL();
}

static __global__ void k_relu_mask(TP dY, TP Y, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        if (!(ld(Y, i) > 0.0f)) st(dY, i, 0.0f);
}

/* Deterministic column sums in two stages.  Stage 1: block (32, 8) owns 32
 * columns and a chunk of rows; thread row ty adds rows ty, ty+8, ... of the
 * chunk, then the 8 partials are added in order.  Stage 2 adds the chunk
 * partials in chunk order into the output.  Optionally a second quantity
 * (LayerNorm: dgamma from dy*xhat next to dbeta from dy). */
#define CS_X 32
#define CS_Y 8
#define CS_ROWS 256   /* rows per chunk */

static __global__ void k_colsum_partial(TP X, TP R, TP mean, TP rstd, int rows, int cols, float *part_a,
                                        float *part_b)
{
    DYNAMIC_SHARED(float, sh);   /* [2][CS_Y][CS_X] */
    int c = blockIdx.x * CS_X + threadIdx.x, chunk = blockIdx.y;
    int r0 = chunk * CS_ROWS, r1 = r0 + CS_ROWS < rows ? r0 + CS_ROWS : rows;
    float a = 0.0f, b = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += CS_Y) {
            float x = ld(X, (size_t)r * cols + c);
            b += x;
            if (R.p) a += x * (ld(R, (size_t)r * cols + c) - ld(mean, r)) * ld(rstd, r);
        }
    sh[threadIdx.y * CS_X + threadIdx.x] = b;
    sh[(CS_Y + threadIdx.y) * CS_X + threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float sb = 0.0f, sa = 0.0f;
        for (int y = 0; y < CS_Y; y++) {
            sb += sh[y * CS_X + threadIdx.x];
            sa += sh[(CS_Y + y) * CS_X + threadIdx.x];
        }
        part_b[(size_t)chunk * cols + c] = sb;
        if (R.p) part_a[(size_t)chunk * cols + c] = sa;
    }
}

static __global__ void k_colsum_final(const float *part, int chunks, int cols, TP out)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += part[(size_t)k * cols + c];
    st(out, c, ld(out, c) + s);
}

static float *part_buffer(Backend *be, size_t n)
{
    CudaImpl *I = IMPL(be);
    if (n > I->part_cap) {
        if (I->part) CK(cudaFree(I->part));
        I->part = NULL;
        CK(cudaMalloc((void **)&I->part, n * sizeof(float)));
        I->part_cap = n;
    }
    return I->part;
}

/* out_b += column sums of X; with Rr: out_a += column sums of X*(Rr-mean)*rstd */
static void colsums(Backend *be, const float *X, const float *Rr, const float *mean, const float *rstd, int rows,
                    int cols, float *out_a, float *out_b)
{
    if (rows <= 0 || cols <= 0) return;
    cudaStream_t s = IMPL(be)->stream;
    int chunks = (rows + CS_ROWS - 1) / CS_ROWS;
    float *part = part_buffer(be, (size_t)chunks * cols * 2);
    float *pb = part, *pa = part + (size_t)chunks * cols;
    dim3 grid((cols + CS_X - 1) / CS_X, chunks), block(CS_X, CS_Y);
    LAUNCH(k_colsum_partial, grid, block, 2 * CS_X * CS_Y * sizeof(float), s, R(be, X), R(be, Rr), R(be, mean),
           R(be, rstd), rows, cols, pa, pb);
    CKL();
    LAUNCH(k_colsum_final, (cols + 127) / 128, 128, 0, s, pb, chunks, cols, R(be, out_b));
    CKL();
    if (Rr) {
        LAUNCH(k_colsum_final, (cols + 127) / 128, 128, 0, s, pa, chunks, cols, R(be, out_a));
        CKL();
    }
}

static void cuda_bias_backward(Backend *be, float *dY, float *dbias, const float *Y, int rows, int cols, int relu)
{
    long n = (long)rows * cols;
    if (n <= 0) return;
    if (relu) {
        LAUNCH(k_relu_mask, nblocks(n, 256), 256, 0, IMPL(be)->stream, R(be, dY), R(be, Y), n);
        CKL();
    }
    colsums(be, dY, NULL, NULL, NULL, rows, cols, NULL, dbias);
}

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

static int row_threads(int n)
{
    /* a warp per 32 elements up to 256 threads; multiple of 32 always */
    int t = (n + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : t;
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

/* ------------------------------------------- residual + dropout + LayerNorm */

/* With bf16 r, each thread re-reads (only) its own rounded r[j]: the mean
 * is of the unrounded sums, variance and y of what backward will see. */
static __global__ void k_residual_ln_forward(TP y, TP r, TP mean, TP rstd, TP x, TP sub, TP gamma, TP beta, int d,
                                             float eps, float p, float ks, DropoutKey key, const uint32_t *sent_id,
                                             int T)
{
    DYNAMIC_SHARED(float, sh);
    long i = blockIdx.x;
    TP xi = at(x, i * d), si = at(sub, i * d), ri = at(r, i * d), yi = at(y, i * d);
    unsigned char *keep = (unsigned char *)(sh + 33);
    if (p > 0.0f) {   /* uniform over the launch */
        drop_mask_row(keep, d, p, key, sent_id[i / T], (uint32_t)(i % T));
        __syncthreads();
    }
    float sum = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float s = ld(si, j);
        if (p > 0.0f) s = keep[j] ? s * ks : 0.0f;
        float v = ld(xi, j) + s;
        st(ri, j, v);
        sum += v;
    }
    float mu = block_sum(sum, sh) / d;
    float var = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float c = ld(ri, j) - mu;
        var += c * c;
    }
    var = block_sum(var, sh);
    float rs = 1.0f / sqrtf(var / d + eps);
    if (threadIdx.x == 0) {
        st(mean, i, mu);
        st(rstd, i, rs);
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) st(yi, j, (ld(ri, j) - mu) * rs * ld(gamma, j) + ld(beta, j));
}

static void cuda_residual_ln_forward(Backend *be, float *y, float *r, float *mean, float *rstd, const float *x,
                                     const float *sub, const float *gamma, const float *beta, int rows, int d,
                                     float eps, float p, DropoutKey key, const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    LAUNCH(k_residual_ln_forward, rows, row_threads(d), row_drop_smem(d, p), IMPL(be)->stream, R(be, y), R(be, r), R(be, mean),
           R(be, rstd), R(be, x), R(be, sub), R(be, gamma), R(be, beta), d, eps, p, drop_scale(p), key, sent_id, T);
    CKL();
}

/* dx may alias dy: each thread reads dy[j] only for its own j, all reads of
 * a row happen before the block barrier that precedes the first write */
static __global__ void k_residual_ln_backward(TP dx, TP dsub, TP dy, TP r, TP mean, TP rstd, TP gamma, int d,
                                              float p, float ks, DropoutKey key, const uint32_t *sent_id, int T)
{
    DYNAMIC_SHARED(float, sh);
    long i = blockIdx.x;
    TP dyi = at(dy, i * d), ri = at(r, i * d), dxi = at(dx, i * d), dsi = at(dsub, i * d);
    float mu = ld(mean, i), rs = ld(rstd, i);
    unsigned char *keep = (unsigned char *)(sh + 33);
    if (p > 0.0f) drop_mask_row(keep, d, p, key, sent_id[i / T], (uint32_t)(i % T));   /* read after block_sum's barriers */
    float m1 = 0.0f, m2 = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = ld(dyi, j) * ld(gamma, j), xh = (ld(ri, j) - mu) * rs;
        m1 += g;
        m2 += g * xh;
    }
    m1 = block_sum(m1, sh) / d;
    m2 = block_sum(m2, sh) / d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float xh = (ld(ri, j) - mu) * rs;
        float dr = rs * (ld(dyi, j) * ld(gamma, j) - m1 - xh * m2);
        st(dxi, j, dr);
        st(dsi, j, p > 0.0f ? (keep[j] ? dr * ks : 0.0f) : dr);
    }
}

static void cuda_residual_ln_backward(Backend *be, float *dx, float *dsub, float *dgamma, float *dbeta,
                                      const float *dy, const float *r, const float *mean, const float *rstd,
                                      const float *gamma, int rows, int d, float p, DropoutKey key,
                                      const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    /* parameter gradients first, so that dx may alias dy */
    colsums(be, dy, r, mean, rstd, rows, d, dgamma, dbeta);
    LAUNCH(k_residual_ln_backward, rows, row_threads(d), row_drop_smem(d, p), IMPL(be)->stream, R(be, dx), R(be, dsub), R(be, dy),
           R(be, r), R(be, mean), R(be, rstd), R(be, gamma), d, p, drop_scale(p), key, sent_id, T);
    CKL();
}

/* ------------------------------------------------------------ embeddings */

/* PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section
 * 3.5), in double on the host as the CPU backend computes it */
static const float *sinusoids(Backend *be, int n_pos, int d)
{
    CudaImpl *I = IMPL(be);
    if (I->sin_table && I->sin_d == d && I->sin_n >= n_pos) return I->sin_table;
    int n = n_pos > 2 * I->sin_n ? n_pos : 2 * I->sin_n;
    if (I->sin_d != d) n = n_pos;
    std::vector<float> h((size_t)n * d);
    for (int pos = 0; pos < n; pos++)
        for (int j = 0; j < d; j++) {
            double rate = pow(10000.0, (double)(j & ~1) / d);
            double a = pos / rate;
            h[(size_t)pos * d + j] = (float)((j & 1) ? cos(a) : sin(a));
        }
    CK(cudaStreamSynchronize(I->stream));
    if (I->sin_table) CK(cudaFree(I->sin_table));
    CK(cudaMalloc((void **)&I->sin_table, h.size() * sizeof(float)));
    /* on the backend's stream: a cudaMemcpy on the legacy default stream is
     * not ordered before the non-blocking stream's kernels that read the
     * table; the host waits before h goes out of scope */
    CK(cudaMemcpyAsync(I->sin_table, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, I->stream));
    CK(cudaStreamSynchronize(I->stream));
    I->sin_d = d;
    I->sin_n = n;
    return I->sin_table;
}

static __global__ void k_embed_forward(TP out, TP E, TP pos, const int32_t *tokens,
                                       const uint32_t *sent_id, int T, int d, long n, float scale, int pos_offset,
                                       float p, float ks, DropoutKey key)
{
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        long i = idx / d;
        int j = (int)(idx % d), b = (int)(i / T), t = (int)(i % T), ps = t + pos_offset;
        float v = ld(E, (size_t)tokens[i] * d + j) * scale + ld(pos, (size_t)ps * d + j);
        st(out, idx, drop_apply(v, p, ks, key, sent_id[b], (uint32_t)ps, (uint32_t)j));
    }
}

static void cuda_embed_forward(Backend *be, float *out, const float *E, const float *pos_table, const int32_t *tokens,
                               const uint32_t *sent_id, int B, int T, int d, float scale, int pos_offset, float p,
                               DropoutKey key)
{
    long n = (long)B * T * d;
    if (n <= 0) return;
    const float *pos = pos_table ? pos_table : sinusoids(be, pos_offset + T, d);
    LAUNCH(k_embed_forward, nblocks(n, 256), 256, 0, IMPL(be)->stream, R(be, out), R(be, E), R(be, pos), tokens,
           sent_id, T, d, n, scale, pos_offset, p, drop_scale(p), key);
    CKL();
}

/* One block row per distinct token: seg[0..nu] are segment starts into
 * order[], seg_tok[u] the token.  Positions of a token are added in
 * ascending order, the same order (and the same float operations) as the
 * CPU backend, so the result is deterministic and matches it. */
static __global__ void k_embed_backward_tokens(TP dE, TP dout, const int32_t *order, const int32_t *seg,
                                               const int32_t *seg_tok, const uint32_t *sent_id, int T, int d,
                                               float scale, float p, float ks, DropoutKey key)
{
    int u = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= d) return;
    size_t e = (size_t)seg_tok[u] * d + j;
    float acc = ld(dE, e);
    for (int k = seg[u]; k < seg[u + 1]; k++) {
        int i = order[k], b = i / T, t = i % T;
        float v = drop_apply(ld(dout, (size_t)i * d + j), p, ks, key, sent_id[b], (uint32_t)t, (uint32_t)j);
        acc = __fadd_rn(acc, __fmul_rn(v, scale));
    }
    st(dE, e, acc);
}

/* learned positions: dpos[t, j] += sum over sentences b in order */
static __global__ void k_embed_backward_pos(TP dpos, TP dout, const uint32_t *sent_id, int B, int T, int d, float p,
                                            float ks, DropoutKey key)
{
    long n = (long)T * d;
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        int t = (int)(idx / d), j = (int)(idx % d);
        float acc = ld(dpos, idx);
        for (int b = 0; b < B; b++)
            acc += drop_apply(ld(dout, ((size_t)b * T + t) * d + j), p, ks, key, sent_id[b], (uint32_t)t, (uint32_t)j);
        st(dpos, idx, acc);
    }
}

static void cuda_embed_backward(Backend *be, float *dE, float *dpos, const float *dout, const int32_t *tokens,
                                const int32_t *host_tokens, const uint32_t *sent_id, int B, int T, int d, int vocab,
                                float scale, float p, DropoutKey key)
{
    CudaImpl *I = IMPL(be);
    int n = B * T;
    if (n <= 0 || d <= 0) return;
    /* group positions by token: a stable counting sort of the B*T ids on the
     * host (tens of microseconds), so that the device needs no atomics.  The
     * ids come from the caller's host copy; only without one are they read
     * back, which waits for the stream. */
    const int32_t *tok = host_tokens;
    if (!tok) {
        I->h_tok.resize(n);
        cuda_download(be, I->h_tok.data(), tokens, sizeof(int32_t) * n);
        tok = I->h_tok.data();
    }
    std::vector<int32_t> &count = I->count;
    count.assign((size_t)vocab + 1, 0);
    for (int i = 0; i < n; i++) {
        int t = tok[i];
        if (t < 0 || t >= vocab) die(1, "cuda embed_backward: token %d outside the vocabulary of %d", t, vocab);
        count[t + 1]++;
    }
    int nu = 0;
    for (int t = 0; t < vocab; t++) nu += count[t + 1] > 0;
    for (int t = 0; t < vocab; t++) count[t + 1] += count[t];
    /* layout: order[n] | seg[nu+1] | seg_tok[nu], staged in pinned memory
     * and copied asynchronously (no host-device synchronisation) */
    size_t need = (size_t)n + 2 * nu + 1;
    int k = I->seg_turn;
    I->seg_turn ^= 1;
    CK(cudaEventSynchronize(I->seg_copied[k]));   /* the last copy out of this buffer is done */
    if (need > I->seg_host_cap[k]) {
        if (I->seg_host[k]) CK(cudaFreeHost(I->seg_host[k]));
        I->seg_host_cap[k] = need * 2;
        CK(cudaMallocHost((void **)&I->seg_host[k], I->seg_host_cap[k] * sizeof(int32_t)));
    }
    int32_t *order = I->seg_host[k], *seg = order + n, *seg_tok = seg + nu + 1;
    for (int i = 0; i < n; i++) order[count[tok[i]]++] = i;   /* count[t] ends at the end of t's segment */
    int u = 0;
    for (int t = 0, start = 0; t < vocab; t++)
        if (count[t] > start) {
            seg[u] = start;
            seg_tok[u] = t;
            u++;
            start = count[t];
        }
    seg[nu] = n;
    if (need > I->seg_cap) {
        CK(cudaStreamSynchronize(I->stream));
        if (I->seg) CK(cudaFree(I->seg));
        I->seg_cap = need * 2;
        CK(cudaMalloc((void **)&I->seg, I->seg_cap * sizeof(int32_t)));
    }
    /* stream order: this copy runs after the kernel that read I->seg last */
    CK(cudaMemcpyAsync(I->seg, order, need * sizeof(int32_t), cudaMemcpyHostToDevice, I->stream));
    CK(cudaEventRecord(I->seg_copied[k], I->stream));
    float ks = drop_scale(p);
    dim3 grid(nu, (d + 127) / 128);
    LAUNCH(k_embed_backward_tokens, grid, 128, 0, I->stream, R(be, dE), R(be, dout), I->seg, I->seg + n,
           I->seg + n + nu + 1, sent_id, T, d, scale, p, ks, key);
    CKL();
    if (dpos) {
        LAUNCH(k_embed_backward_pos, nblocks((long)T * d, 256), 256, 0, I->stream, R(be, dpos), R(be, dout), sent_id, B,
               T, d, p, ks, key);
        CKL();
    }
}

/* ------------------------------------------ label-smoothed cross-entropy */

/* one block per row: loss of section 5.4 and, fused, the gradient of the
 * softmax + cross-entropy written over the logits */
static __global__ void k_xent(TP logits, const int32_t *target, int V, float eps, float gs, TP row_loss, TP row_nll)
{
    DYNAMIC_SHARED(float, sh);
    long r = blockIdx.x;
    TP z = at(logits, r * V);
    int y = target[r];
    if (y == 0) {
        if (threadIdx.x == 0) {
            st(row_loss, r, 0.0f);
            st(row_nll, r, 0.0f);
        }
        if (gs != 0.0f)
            for (int k = threadIdx.x; k < V; k += blockDim.x) st(z, k, 0.0f);
        return;
    }
    float zy = ld(z, y);   /* read before any thread overwrites the row */
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < V; k += blockDim.x) mx = fmaxf(mx, ld(z, k));
    mx = block_max(mx, sh);
    float se = 0.0f, sz = 0.0f;
    for (int k = threadIdx.x; k < V; k += blockDim.x) {
        se += expf(ld(z, k) - mx);
        sz += ld(z, k);
    }
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
        for (int k = threadIdx.x; k < V; k += blockDim.x) {
            float g = gs * (expf(ld(z, k) - lse) - u);
            if (k == y) g -= gs * (1.0f - eps);
            st(z, k, g);
        }
    }
}

static void cuda_xent_forward_backward(Backend *be, float *logits, const int32_t *target, int rows, int V, float eps,
                                       float grad_scale, float *row_loss, float *row_nll)
{
    if (rows <= 0) return;
    LAUNCH(k_xent, rows, row_threads(V), RED_SMEM, IMPL(be)->stream, R(be, logits), target, V, eps, grad_scale,
           R(be, row_loss), R(be, row_nll));
    CKL();
}

/* ------------------------------------------------------------------ Adam */

static __global__ void k_adam(float *param, const float *grad, float *m, float *v, long n, float lr, float b1,
                              float b2, float eps, float c1, float c2, float gs)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    }
}

static void cuda_adam(Backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr, float b1,
                      float b2, float eps, int t, float gs)
{
    if (!n) return;
    /* bias corrections on the host, in float as the CPU backend does */
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    /* weights, gradients and moments are fp32 in every precision */
    if (R(be, param).bf || R(be, grad).bf || R(be, m).bf || R(be, v).bf)
        die(1, "cuda adam: parameters, gradients and moments must be fp32 storage, not activations");
    touch(IMPL(be), param, n * sizeof(float));
    LAUNCH(k_adam, nblocks((long)n, 256), 256, 0, IMPL(be)->stream, param, grad, m, v, (long)n, lr, b1, b2, eps, c1,
           c2, gs);
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

/* ------------------------------------------------- gradient allreduce */

#if USE_NCCL
#define CKN(call)                                                                                        \
    do {                                                                                                 \
        ncclResult_t r_ = (call);                                                                        \
        if (r_ != ncclSuccess) die(1, "nccl: %s:%d: %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
    } while (0)
#endif

/* NCCL on its own stream (so that the sums overlap the rest of backward),
 * its unique id broadcast over MPI.  allreduce=mpi (or the older switch
 * TRANSFORMER_NCCL=0), or a build without NCCL, sums through MPI on host
 * copies instead. */
static void cuda_allreduce_init(Backend *be, const void *mpi_comm)
{
    CudaImpl *I = IMPL(be);
    I->comm = *(const MPI_Comm *)mpi_comm;
    int rank;
    MPI_Comm_size(I->comm, &I->nranks);
    MPI_Comm_rank(I->comm, &rank);
    const char *env = getenv("TRANSFORMER_NCCL");
    I->use_nccl = USE_NCCL && I->want_nccl && !(env && !strcmp(env, "0"));
    CK(cudaStreamCreateWithFlags(&I->comm_stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&I->ev_ready, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&I->ev_done, cudaEventDisableTiming));
#if USE_NCCL
    if (I->use_nccl) {
        ncclUniqueId id;
        if (rank == 0) CKN(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, I->comm);
        CKN(ncclCommInitRank(&I->nccl, I->nranks, id, rank));
    }
#endif
}

static void cuda_allreduce_start(Backend *be, float *p, size_t n)
{
    CudaImpl *I = IMPL(be);
    if (!n) return;
#if USE_NCCL
    if (I->use_nccl) {
        /* the bucket's gradients are final once the compute stream gets here */
        CK(cudaEventRecord(I->ev_ready, I->stream));
        CK(cudaStreamWaitEvent(I->comm_stream, I->ev_ready, 0));
        CKN(ncclAllReduce(p, p, n, ncclFloat32, ncclSum, I->nccl, I->comm_stream));
        return;
    }
#endif
    size_t k = I->reqs.size();
    if (I->stage.size() <= k) I->stage.resize(k + 1);
    I->stage[k].resize(n);
    cuda_download(be, I->stage[k].data(), p, n * sizeof(float));
    I->stage_dst.push_back(p);
    I->reqs.push_back(MPI_REQUEST_NULL);
    MPI_Iallreduce(MPI_IN_PLACE, I->stage[k].data(), (int)n, MPI_FLOAT, MPI_SUM, I->comm, &I->reqs[k]);
}

#if USE_NCCL
/* An error NCCL meets while its kernels run (a peer that died, a network
 * failure) is not returned by any call: it is polled.  Fatal, one line. */
static void nccl_check_async(CudaImpl *I)
{
    ncclResult_t st = ncclSuccess;
    CKN(ncclCommGetAsyncError(I->nccl, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
        int rank;
        MPI_Comm_rank(I->comm, &rank);
        die(1, "nccl: rank %d: asynchronous error in the gradient allreduce: %s", rank, ncclGetErrorString(st));
    }
}
#endif

static void cuda_allreduce_wait(Backend *be)
{
    CudaImpl *I = IMPL(be);
#if USE_NCCL
    if (I->use_nccl) {
        /* later work on the compute stream (Adam) waits for the sums */
        CK(cudaEventRecord(I->ev_done, I->comm_stream));
        CK(cudaStreamWaitEvent(I->stream, I->ev_done, 0));
        /* the host waits too, so that gradsync's timers see the
         * communication backward did not hide (nothing else is queued);
         * polling NCCL's asynchronous error meanwhile: an allreduce that
         * failed may never complete */
        cudaError_t q;
        while ((q = cudaEventQuery(I->ev_done)) == cudaErrorNotReady) {
            nccl_check_async(I);
            sched_yield();
        }
        CK(q);
        nccl_check_async(I);
        return;
    }
#endif
    MPI_Waitall((int)I->reqs.size(), I->reqs.data(), MPI_STATUSES_IGNORE);
    for (size_t k = 0; k < I->reqs.size(); k++)
        CK(cudaMemcpyAsync(I->stage_dst[k], I->stage[k].data(), I->stage[k].size() * sizeof(float),
                           cudaMemcpyHostToDevice, I->stream));
    CK(cudaStreamSynchronize(I->stream));
    I->reqs.clear();
    I->stage_dst.clear();
}

/* ------------------------------------------------------------- lifecycle */

static void cuda_destroy(Backend *be)
{
    CudaImpl *I = IMPL(be);
    cudaStreamSynchronize(I->stream);
    if (I->sin_table) cudaFree(I->sin_table);
    if (I->part) cudaFree(I->part);
    if (I->seg) cudaFree(I->seg);
    if (I->gptrs) cudaFree(I->gptrs);
    for (int k = 0; k < 2; k++) {
        if (I->seg_host[k]) cudaFreeHost(I->seg_host[k]);
        cudaEventDestroy(I->seg_copied[k]);
    }
    if (I->shadow) cudaFree(I->shadow);
    for (int k = 0; k < 3; k++)
        if (I->gscratch[k]) cudaFree(I->gscratch[k]);
    /* activation buffers the caller did not free */
    for (const ActRange &a : I->acts) {
        cudaFree(a.dev);
        if ((void *)a.base != a.dev) munmap((void *)a.base, (a.bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float));
    }
    if (I->comm_stream) {
        cudaStreamSynchronize(I->comm_stream);
#if USE_NCCL
        if (I->use_nccl) ncclCommDestroy(I->nccl);
#endif
        cudaEventDestroy(I->ev_ready);
        cudaEventDestroy(I->ev_done);
        cudaStreamDestroy(I->comm_stream);
    }
    cublasDestroy(I->blas);
    cudaStreamDestroy(I->stream);
    delete I;
    free(be);
}

/* One rank per GPU: the node-local rank picks the device where every rank
 * sees all n GPUs of the node; where each sees only its own (Slurm
 * --gpus-per-task=1: n = 1), device 0.  More node-local ranks than visible
 * GPUs, or two ranks of a node on one GPU (compared by UUID over the
 * node's ranks: collective), is refused: the ranks would share a GPU's
 * memory and time.  TRANSFORMER_SHARE_GPU=1 allows it (tests on one GPU).
 * Returns the device, or -1 after a one-line error. */
static int pick_device(int local_rank, int n)
{
    const char *share_env = getenv("TRANSFORMER_SHARE_GPU");
    int share = share_env && !strcmp(share_env, "1");
    int dev = share ? local_rank % n : local_rank < n ? local_rank : n == 1 ? 0 : -1;
    int mpi = 0, rank = 0;
    MPI_Initialized(&mpi);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* which node-local rank holds the same GPU (-1: none) */
    int other = -1;
    if (mpi) {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        int me, size;
        MPI_Comm_rank(node, &me);
        MPI_Comm_size(node, &size);
        /* by UUID, not PCI bus id: MIG instances of one GPU share the bus
         * id but are separate devices.  Every rank takes part, sharing
         * allowed or not: the collective must not hang on some ranks. */
        unsigned char id[17] = {0};   /* uuid, then 1 if known */
        cudaDeviceProp prop;
        if (dev >= 0 && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
            memcpy(id, prop.uuid.bytes, 16);
            id[16] = 1;
        } else cudaGetLastError();   /* unknown: not compared */
        std::vector<unsigned char> ids((size_t)size * sizeof id);
        MPI_Allgather(id, sizeof id, MPI_BYTE, ids.data(), sizeof id, MPI_BYTE, node);
        for (int r = 0; r < me && id[16] && other < 0; r++)
            if (!memcmp(&ids[(size_t)r * sizeof id], id, sizeof id)) other = r;
        MPI_Comm_free(&node);
    }
    if (share) return dev;
    if (dev < 0) {
        fprintf(stderr, "error: device=cuda: rank %d on host %s: node-local rank %d but only %d GPUs visible; run one "
                        "rank per GPU\n", rank, host, local_rank, n);
        return -1;
    }
    if (other >= 0) {
        fprintf(stderr, "error: device=cuda: rank %d on host %s: node-local rank %d would share its GPU (%d visible) "
                        "with node-local rank %d; run one rank per GPU\n", rank, host, local_rank, n, other);
        return -1;
    }
    return dev;
}

extern "C" Backend *backend_cuda_create(const char *precision, const char *allreduce, int local_rank)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        fprintf(stderr, "error: device=cuda: no usable CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (allreduce && strcmp(allreduce, "nccl") && strcmp(allreduce, "mpi")) {
        fprintf(stderr, "error: device=cuda: allreduce '%s' is not nccl or mpi\n", allreduce);
        return NULL;
    }
    int prec = !strcmp(precision, "bf16") ? PREC_BF16 : !strcmp(precision, "tf32") ? PREC_TF32 : PREC_FP32;
    if (strcmp(precision, "fp32") && prec == PREC_FP32) {
        fprintf(stderr, "error: device=cuda: precision '%s' is not fp32, tf32 or bf16\n", precision);
        return NULL;
    }
    int dev = pick_device(local_rank, n);
    if (dev < 0) return NULL;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        fprintf(stderr, "error: device=cuda: cannot use GPU %d: %s\n", dev, cudaGetErrorString(e));
        return NULL;
    }
    CudaImpl *I = new CudaImpl();
    I->device = dev;
    I->precision = prec;
    I->bf16 = prec == PREC_BF16;
    I->want_nccl = !allreduce || !strcmp(allreduce, "nccl");
    /* (bf16: for GEMMs whose operands are all fp32 storage, e.g. the
     * decoders' own buffers; bf16-stored operands use CUBLAS_COMPUTE_32F) */
    I->compute = prec == PREC_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
               : prec == PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                   : CUBLAS_COMPUTE_32F;
    CK(cudaStreamCreateWithFlags(&I->stream, cudaStreamNonBlocking));
    for (int k = 0; k < 2; k++) CK(cudaEventCreateWithFlags(&I->seg_copied[k], cudaEventDisableTiming));
    CKB(cublasCreate(&I->blas));
    CKB(cublasSetStream(I->blas, I->stream));
    /* reductions (split-K partial sums) in the compute type, fp32, never in
     * a bf16 output's type: bf16 GEMMs accumulate in fp32 throughout */
    CKB(cublasSetMathMode(I->blas, (cublasMath_t)((prec == PREC_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)
                                                  | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    Backend *be = (Backend *)calloc(1, sizeof *be);
    if (!be) die(1, "out of memory");
    be->name = prec == PREC_BF16 ? "cuda-bf16" : prec == PREC_TF32 ? "cuda-tf32" : "cuda";
    be->impl = I;
    be->alloc = cuda_alloc;
    be->alloc_act = cuda_alloc_act;
    be->set_params = cuda_set_params;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->zero = cuda_zero;
    be->copy = cuda_copy;
    be->sync = cuda_sync;
    be->gemm = cuda_gemm;
    be->gemm_batched = cuda_gemm_batched;
    be->bias_forward = cuda_bias_forward;
    be->bias_backward = cuda_bias_backward;
    be->softmax_forward = cuda_softmax_forward;
    be->softmax_backward = cuda_softmax_backward;
    be->residual_ln_forward = cuda_residual_ln_forward;
    be->residual_ln_backward = cuda_residual_ln_backward;
    be->embed_forward = cuda_embed_forward;
    be->embed_backward = cuda_embed_backward;
    be->xent_forward_backward = cuda_xent_forward_backward;
    be->adam = cuda_adam;
    be->log_softmax = cuda_log_softmax;
    be->allreduce_init = cuda_allreduce_init;
    be->allreduce_start = cuda_allreduce_start;
    be->allreduce_wait = cuda_allreduce_wait;
    be->destroy = cuda_destroy;
    return be;
}
