/* CUDA backend: the op interface of src/ops.h on one GPU, name for name with
 * the CPU reference src/ops_cpu.c.
 *
 * - GEMMs go to cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx).  The
 *   interface is row-major and cuBLAS column-major: a row-major C = op(A)
 *   op(B) is the column-major C^T = op(B)^T op(A)^T, so the operands are
 *   swapped and every transpose stays an operand flag (nothing is copied).
 * - precision: fp32 (IEEE sgemm), tf32 (tensor cores, 10-bit mantissa
 *   inputs) or bf16 (tensor cores with bf16 inputs, fp32 accumulation):
 *   chosen by the cuBLAS compute type.  Parameters, Adam state and
 *   activations stay fp32 in memory (see docs/gpu-roofline.md for what bf16
 *   storage would add).
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

#include <vector>

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
    std::vector<int32_t> h_tok, h_seg;
    /* gradient allreduce (allreduce_* hooks of ops.h) */
    MPI_Comm comm;
    int nranks;
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

static void cuda_free(Backend *be, void *p)
{
    (void)be;
    if (p) CK(cudaFree(p));
}

static void cuda_upload(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, IMPL(be)->stream));
    CK(cudaStreamSynchronize(IMPL(be)->stream));   /* the caller may reuse src at once */
}

static void cuda_download(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, IMPL(be)->stream));
    CK(cudaStreamSynchronize(IMPL(be)->stream));
}

static void cuda_zero(Backend *be, void *p, size_t n)
{
    if (n) CK(cudaMemsetAsync(p, 0, n, IMPL(be)->stream));
}

static void cuda_copy(Backend *be, void *dst, const void *src, size_t n)
{
    if (n && dst != src) CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, IMPL(be)->stream));
}

static void cuda_sync(Backend *be) { CK(cudaStreamSynchronize(IMPL(be)->stream)); }

/* ----------------------------------------------------------------- GEMM */

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

static void cuda_gemm(Backend *be, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    CudaImpl *I = IMPL(be);
    if (M <= 0 || N <= 0) return;
    /* row-major C[M,N] = column-major C^T[N,M] = op(B)^T op(A)^T */
    CKB(cublasGemmEx(I->blas, op(tB), op(tA), N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                     CUDA_R_32F, ldc, I->compute, CUBLAS_GEMM_DEFAULT));
}

static void cuda_gemm_batched(Backend *be, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                              long sAo, long sAi, const float *B, int ldb, long sBo, long sBi, float beta, float *C,
                              int ldc, long sCo, long sCi, int n_outer, int n_inner)
{
    CudaImpl *I = IMPL(be);
    if (M <= 0 || N <= 0 || n_outer <= 0 || n_inner <= 0) return;
    /* one strided-batched call when the (outer, inner) grid is a single
     * stride for all three operands.  Otherwise a loop over the shorter of
     * the two dimensions, batching the other: attention (outer = sentence,
     * inner = head at stride d_k within a row) makes h calls of B matrices
     * each, not B launches (a 25k-token batch has ~1000 sentences). */
    if (n_outer == 1 || (sAo == n_inner * sAi && sBo == n_inner * sBi && sCo == n_inner * sCi)) {
        CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, B, CUDA_R_32F, ldb, sBi, A,
                                       CUDA_R_32F, lda, sAi, &beta, C, CUDA_R_32F, ldc, sCi, n_outer * n_inner,
                                       I->compute, CUBLAS_GEMM_DEFAULT));
        return;
    }
    if (n_outer <= n_inner) {
        for (int o = 0; o < n_outer; o++)
            CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, B + o * sBo, CUDA_R_32F, ldb,
                                           sBi, A + o * sAo, CUDA_R_32F, lda, sAi, &beta, C + o * sCo, CUDA_R_32F,
                                           ldc, sCi, n_inner, I->compute, CUBLAS_GEMM_DEFAULT));
    } else {
        for (int i = 0; i < n_inner; i++)
            CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, B + i * sBi, CUDA_R_32F, ldb,
                                           sBo, A + i * sAi, CUDA_R_32F, lda, sAo, &beta, C + i * sCi, CUDA_R_32F,
                                           ldc, sCo, n_outer, I->compute, CUBLAS_GEMM_DEFAULT));
    }
}

/* ------------------------------------------------------------------ bias */

static __global__ void k_bias_forward(float *Y, const float *bias, long n, int cols, int relu)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = Y[i] + bias[i % cols];
        Y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

static void cuda_bias_forward(Backend *be, float *Y, const float *bias, int rows, int cols, int relu)
{
    long n = (long)rows * cols;
    if (n <= 0) return;
    LAUNCH(k_bias_forward, nblocks(n, 256), 256, 0, IMPL(be)->stream, Y, bias, n, cols, relu);
    CKL();
}

static __global__ void k_relu_mask(float *dY, const float *Y, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        if (!(Y[i] > 0.0f)) dY[i] = 0.0f;
}

/* Deterministic column sums in two stages.  Stage 1: block (32, 8) owns 32
 * columns and a chunk of rows; thread row ty adds rows ty, ty+8, ... of the
 * chunk, then the 8 partials are added in order.  Stage 2 adds the chunk
 * partials in chunk order into the output.  Optionally a second quantity
 * (LayerNorm: dgamma from dy*xhat next to dbeta from dy). */
#define CS_X 32
#define CS_Y 8
#define CS_ROWS 256   /* rows per chunk */

static __global__ void k_colsum_partial(const float *X, const float *R, const float *mean, const float *rstd,
                                        int rows, int cols, float *part_a, float *part_b)
{
    DYNAMIC_SHARED(float, sh);   /* [2][CS_Y][CS_X] */
    int c = blockIdx.x * CS_X + threadIdx.x, chunk = blockIdx.y;
    int r0 = chunk * CS_ROWS, r1 = r0 + CS_ROWS < rows ? r0 + CS_ROWS : rows;
    float a = 0.0f, b = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += CS_Y) {
            float x = X[(size_t)r * cols + c];
            b += x;
            if (R) a += x * (R[(size_t)r * cols + c] - mean[r]) * rstd[r];
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
        if (R) part_a[(size_t)chunk * cols + c] = sa;
    }
}

static __global__ void k_colsum_final(const float *part, int chunks, int cols, float *out)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += part[(size_t)k * cols + c];
    out[c] += s;
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

/* out_b += column sums of X; with R: out_a += column sums of X*(R-mean)*rstd */
static void colsums(Backend *be, const float *X, const float *R, const float *mean, const float *rstd, int rows,
                    int cols, float *out_a, float *out_b)
{
    if (rows <= 0 || cols <= 0) return;
    cudaStream_t s = IMPL(be)->stream;
    int chunks = (rows + CS_ROWS - 1) / CS_ROWS;
    float *part = part_buffer(be, (size_t)chunks * cols * 2);
    float *pb = part, *pa = part + (size_t)chunks * cols;
    dim3 grid((cols + CS_X - 1) / CS_X, chunks), block(CS_X, CS_Y);
    LAUNCH(k_colsum_partial, grid, block, 2 * CS_X * CS_Y * sizeof(float), s, X, R, mean, rstd, rows, cols, pa, pb);
    CKL();
    LAUNCH(k_colsum_final, (cols + 127) / 128, 128, 0, s, pb, chunks, cols, out_b);
    CKL();
    if (R) {
        LAUNCH(k_colsum_final, (cols + 127) / 128, 128, 0, s, pa, chunks, cols, out_a);
        CKL();
    }
}

static void cuda_bias_backward(Backend *be, float *dY, float *dbias, const float *Y, int rows, int cols, int relu)
{
    long n = (long)rows * cols;
    if (n <= 0) return;
    if (relu) {
        LAUNCH(k_relu_mask, nblocks(n, 256), 256, 0, IMPL(be)->stream, dY, Y, n);
        CKL();
    }
    colsums(be, dY, NULL, NULL, NULL, rows, cols, NULL, dbias);
}

/* --------------------------------------------------------------- softmax */

/* one block per row of S (eq. 1 with the padding and causal masks) */
static __global__ void k_softmax_forward(float *S, const int32_t *key_len, float scale, int nh, int Tq, int Tk,
                                         int causal, int q_offset)
{
    DYNAMIC_SHARED(float, sh);
    long r = blockIdx.x;
    int b = (int)(r / ((long)nh * Tq)), q = (int)(r % Tq);
    int n = key_len[b];
    if (causal && q + q_offset + 1 < n) n = q + q_offset + 1;
    if (n > Tk) n = Tk;
    float *s = S + r * Tk;
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < n; k += blockDim.x) mx = fmaxf(mx, s[k] * scale);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) sum += expf(s[k] * scale - mx);
    sum = block_sum(sum, sh);
    float inv = n > 0 ? 1.0f / sum : 0.0f;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) s[k] = k < n ? expf(s[k] * scale - mx) * inv : 0.0f;
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
    LAUNCH(k_softmax_forward, (unsigned)rows, row_threads(Tk), RED_SMEM, IMPL(be)->stream, S, key_len, scale, nh, Tq,
           Tk, causal, q_offset);
    CKL();
}

static __global__ void k_softmax_backward(float *dP, const float *P, float scale, int Tk)
{
    DYNAMIC_SHARED(float, sh);
    float *d = dP + (long)blockIdx.x * Tk;
    const float *p = P + (long)blockIdx.x * Tk;
    float dot = 0.0f;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) dot += p[k] * d[k];
    dot = block_sum(dot, sh);
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) d[k] = scale * p[k] * (d[k] - dot);
}

static void cuda_softmax_backward(Backend *be, float *dP, const float *P, float scale, int nb, int nh, int Tq, int Tk)
{
    long rows = (long)nb * nh * Tq;
    if (rows <= 0 || Tk <= 0) return;
    LAUNCH(k_softmax_backward, (unsigned)rows, row_threads(Tk), RED_SMEM, IMPL(be)->stream, dP, P, scale, Tk);
    CKL();
}

/* ------------------------------------------- residual + dropout + LayerNorm */

static __global__ void k_residual_ln_forward(float *y, float *r, float *mean, float *rstd, const float *x,
                                             const float *sub, const float *gamma, const float *beta, int d,
                                             float eps, float p, float ks, DropoutKey key, const uint32_t *sent_id,
                                             int T)
{
    DYNAMIC_SHARED(float, sh);
    long i = blockIdx.x;
    const float *xi = x + i * d, *si = sub + i * d;
    float *ri = r + i * d, *yi = y + i * d;
    uint32_t sent = sent_id[i / T], pos = (uint32_t)(i % T);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xi[j] + drop_apply(si[j], p, ks, key, sent, pos, (uint32_t)j);
        ri[j] = v;
        sum += v;
    }
    float mu = block_sum(sum, sh) / d;
    float var = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float c = ri[j] - mu;
        var += c * c;
    }
    var = block_sum(var, sh);
    float rs = 1.0f / sqrtf(var / d + eps);
    if (threadIdx.x == 0) {
        mean[i] = mu;
        rstd[i] = rs;
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) yi[j] = (ri[j] - mu) * rs * gamma[j] + beta[j];
}

static void cuda_residual_ln_forward(Backend *be, float *y, float *r, float *mean, float *rstd, const float *x,
                                     const float *sub, const float *gamma, const float *beta, int rows, int d,
                                     float eps, float p, DropoutKey key, const uint32_t *sent_id, int T)
{
    if (rows <= 0) return;
    LAUNCH(k_residual_ln_forward, rows, row_threads(d), RED_SMEM, IMPL(be)->stream, y, r, mean, rstd, x, sub, gamma,
           beta, d, eps, p, drop_scale(p), key, sent_id, T);
    CKL();
}

/* dx may alias dy: each thread reads dy[j] only for its own j, all reads of
 * a row happen before the block barrier that precedes the first write */
static __global__ void k_residual_ln_backward(float *dx, float *dsub, const float *dy, const float *r,
                                              const float *mean, const float *rstd, const float *gamma, int d,
                                              float p, float ks, DropoutKey key, const uint32_t *sent_id, int T)
{
    DYNAMIC_SHARED(float, sh);
    long i = blockIdx.x;
    const float *dyi = dy + i * d, *ri = r + i * d;
    float *dxi = dx + i * d, *dsi = dsub + i * d;
    float mu = mean[i], rs = rstd[i];
    float m1 = 0.0f, m2 = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = dyi[j] * gamma[j], xh = (ri[j] - mu) * rs;
        m1 += g;
        m2 += g * xh;
    }
    m1 = block_sum(m1, sh) / d;
    m2 = block_sum(m2, sh) / d;
    uint32_t sent = sent_id[i / T], pos = (uint32_t)(i % T);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float xh = (ri[j] - mu) * rs;
        float dr = rs * (dyi[j] * gamma[j] - m1 - xh * m2);
        dxi[j] = dr;
        dsi[j] = drop_apply(dr, p, ks, key, sent, pos, (uint32_t)j);
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
    LAUNCH(k_residual_ln_backward, rows, row_threads(d), RED_SMEM, IMPL(be)->stream, dx, dsub, dy, r, mean, rstd,
           gamma, d, p, drop_scale(p), key, sent_id, T);
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
    CK(cudaMemcpy(I->sin_table, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    I->sin_d = d;
    I->sin_n = n;
    return I->sin_table;
}

static __global__ void k_embed_forward(float *out, const float *E, const float *pos, const int32_t *tokens,
                                       const uint32_t *sent_id, int T, int d, long n, float scale, int pos_offset,
                                       float p, float ks, DropoutKey key)
{
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        long i = idx / d;
        int j = (int)(idx % d), b = (int)(i / T), t = (int)(i % T), ps = t + pos_offset;
        float v = E[(size_t)tokens[i] * d + j] * scale + pos[(size_t)ps * d + j];
        out[idx] = drop_apply(v, p, ks, key, sent_id[b], (uint32_t)ps, (uint32_t)j);
    }
}

static void cuda_embed_forward(Backend *be, float *out, const float *E, const float *pos_table, const int32_t *tokens,
                               const uint32_t *sent_id, int B, int T, int d, float scale, int pos_offset, float p,
                               DropoutKey key)
{
    long n = (long)B * T * d;
    if (n <= 0) return;
    const float *pos = pos_table ? pos_table : sinusoids(be, pos_offset + T, d);
    LAUNCH(k_embed_forward, nblocks(n, 256), 256, 0, IMPL(be)->stream, out, E, pos, tokens, sent_id, T, d, n, scale,
           pos_offset, p, drop_scale(p), key);
    CKL();
}

/* One block row per distinct token: seg[0..nu] are segment starts into
 * order[], seg_tok[u] the token.  Positions of a token are added in
 * ascending order, the same order (and the same float operations) as the
 * CPU backend, so the result is deterministic and matches it. */
static __global__ void k_embed_backward_tokens(float *dE, const float *dout, const int32_t *order, const int32_t *seg,
                                               const int32_t *seg_tok, const uint32_t *sent_id, int T, int d,
                                               float scale, float p, float ks, DropoutKey key)
{
    int u = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= d) return;
    float *e = dE + (size_t)seg_tok[u] * d + j;
    float acc = *e;
    for (int k = seg[u]; k < seg[u + 1]; k++) {
        int i = order[k], b = i / T, t = i % T;
        float v = drop_apply(dout[(size_t)i * d + j], p, ks, key, sent_id[b], (uint32_t)t, (uint32_t)j);
        acc = __fadd_rn(acc, __fmul_rn(v, scale));
    }
    *e = acc;
}

/* learned positions: dpos[t, j] += sum over sentences b in order */
static __global__ void k_embed_backward_pos(float *dpos, const float *dout, const uint32_t *sent_id, int B, int T,
                                            int d, float p, float ks, DropoutKey key)
{
    long n = (long)T * d;
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        int t = (int)(idx / d), j = (int)(idx % d);
        float acc = dpos[idx];
        for (int b = 0; b < B; b++)
            acc += drop_apply(dout[((size_t)b * T + t) * d + j], p, ks, key, sent_id[b], (uint32_t)t, (uint32_t)j);
        dpos[idx] = acc;
    }
}

static void cuda_embed_backward(Backend *be, float *dE, float *dpos, const float *dout, const int32_t *tokens,
                                const uint32_t *sent_id, int B, int T, int d, int vocab, float scale, float p,
                                DropoutKey key)
{
    CudaImpl *I = IMPL(be);
    int n = B * T;
    if (n <= 0 || d <= 0) return;
    /* group positions by token (a stable counting sort of at most B*T ids
     * on the host: a few microseconds, and no atomics on the device) */
    I->h_tok.resize(n);
    cuda_download(be, I->h_tok.data(), tokens, sizeof(int32_t) * n);
    std::vector<int32_t> count(vocab + 1, 0);
    for (int i = 0; i < n; i++) {
        int t = I->h_tok[i];
        if (t < 0 || t >= vocab) die(1, "cuda embed_backward: token %d outside the vocabulary of %d", t, vocab);
        count[t + 1]++;
    }
    int nu = 0;
    for (int t = 0; t < vocab; t++) nu += count[t + 1] > 0;
    for (int t = 0; t < vocab; t++) count[t + 1] += count[t];
    /* layout: order[n] | seg[nu+1] | seg_tok[nu] */
    I->h_seg.assign((size_t)n + 2 * nu + 1, 0);
    int32_t *order = I->h_seg.data(), *seg = order + n, *seg_tok = seg + nu + 1;
    {
        std::vector<int32_t> fill(count.begin(), count.end() - 1);
        for (int i = 0; i < n; i++) order[fill[I->h_tok[i]]++] = i;
        int u = 0;
        for (int t = 0; t < vocab; t++)
            if (count[t + 1] > count[t]) {
                seg[u] = count[t];
                seg_tok[u] = t;
                u++;
            }
        seg[nu] = n;
    }
    if (I->h_seg.size() > I->seg_cap) {
        CK(cudaStreamSynchronize(I->stream));
        if (I->seg) CK(cudaFree(I->seg));
        I->seg_cap = I->h_seg.size() * 2;
        CK(cudaMalloc((void **)&I->seg, I->seg_cap * sizeof(int32_t)));
    }
    cuda_upload(be, I->seg, I->h_seg.data(), I->h_seg.size() * sizeof(int32_t));
    float ks = drop_scale(p);
    dim3 grid(nu, (d + 127) / 128);
    LAUNCH(k_embed_backward_tokens, grid, 128, 0, I->stream, dE, dout, I->seg, I->seg + n, I->seg + n + nu + 1,
           sent_id, T, d, scale, p, ks, key);
    CKL();
    if (dpos) {
        LAUNCH(k_embed_backward_pos, nblocks((long)T * d, 256), 256, 0, I->stream, dpos, dout, sent_id, B, T, d, p, ks,
               key);
        CKL();
    }
}

/* ------------------------------------------ label-smoothed cross-entropy */

/* one block per row: loss of section 5.4 and, fused, the gradient of the
 * softmax + cross-entropy written over the logits */
static __global__ void k_xent(float *logits, const int32_t *target, int V, float eps, float gs, float *row_loss,
                              float *row_nll)
{
    DYNAMIC_SHARED(float, sh);
    long r = blockIdx.x;
    float *z = logits + r * V;
    int y = target[r];
    if (y == 0) {
        if (threadIdx.x == 0) row_loss[r] = row_nll[r] = 0.0f;
        if (gs != 0.0f)
            for (int k = threadIdx.x; k < V; k += blockDim.x) z[k] = 0.0f;
        return;
    }
    float zy = z[y];   /* read before any thread overwrites the row */
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < V; k += blockDim.x) mx = fmaxf(mx, z[k]);
    mx = block_max(mx, sh);
    float se = 0.0f, sz = 0.0f;
    for (int k = threadIdx.x; k < V; k += blockDim.x) {
        se += expf(z[k] - mx);
        sz += z[k];
    }
    se = block_sum(se, sh);
    sz = block_sum(sz, sh);
    float lse = mx + logf(se);
    if (threadIdx.x == 0) {
        float nll = lse - zy, smooth = lse - sz / V;
        row_nll[r] = nll;
        row_loss[r] = (1.0f - eps) * nll + eps * smooth;
    }
    if (gs != 0.0f) {
        float u = eps / V;
        for (int k = threadIdx.x; k < V; k += blockDim.x) {
            float g = gs * (expf(z[k] - lse) - u);
            if (k == y) g -= gs * (1.0f - eps);
            z[k] = g;
        }
    }
}

static void cuda_xent_forward_backward(Backend *be, float *logits, const int32_t *target, int rows, int V, float eps,
                                       float grad_scale, float *row_loss, float *row_nll)
{
    if (rows <= 0) return;
    LAUNCH(k_xent, rows, row_threads(V), RED_SMEM, IMPL(be)->stream, logits, target, V, eps, grad_scale, row_loss,
           row_nll);
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
    LAUNCH(k_adam, nblocks((long)n, 256), 256, 0, IMPL(be)->stream, param, grad, m, v, (long)n, lr, b1, b2, eps, c1,
           c2, gs);
    CKL();
}

/* ----------------------------------------------------------- log_softmax */

static __global__ void k_log_softmax(float *x, int cols)
{
    DYNAMIC_SHARED(float, sh);
    float *z = x + (long)blockIdx.x * cols;
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) mx = fmaxf(mx, z[k]);
    mx = block_max(mx, sh);
    float se = 0.0f;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) se += expf(z[k] - mx);
    se = block_sum(se, sh);
    float lse = mx + logf(se);
    for (int k = threadIdx.x; k < cols; k += blockDim.x) z[k] -= lse;
}

static void cuda_log_softmax(Backend *be, float *x, int rows, int cols)
{
    if (rows <= 0 || cols <= 0) return;
    LAUNCH(k_log_softmax, rows, row_threads(cols), RED_SMEM, IMPL(be)->stream, x, cols);
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
 * its unique id broadcast over MPI.  TRANSFORMER_NCCL=0, or a build without
 * NCCL, sums through MPI on host copies instead. */
static void cuda_allreduce_init(Backend *be, const void *mpi_comm)
{
    CudaImpl *I = IMPL(be);
    I->comm = *(const MPI_Comm *)mpi_comm;
    int rank;
    MPI_Comm_size(I->comm, &I->nranks);
    MPI_Comm_rank(I->comm, &rank);
    const char *env = getenv("TRANSFORMER_NCCL");
    I->use_nccl = USE_NCCL && !(env && !strcmp(env, "0"));
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

static void cuda_allreduce_wait(Backend *be)
{
    CudaImpl *I = IMPL(be);
    if (I->use_nccl) {
        /* later work on the compute stream (Adam) waits for the sums */
        CK(cudaEventRecord(I->ev_done, I->comm_stream));
        CK(cudaStreamWaitEvent(I->stream, I->ev_done, 0));
        /* the host waits too, so that gradsync's timers see the
         * communication backward did not hide (nothing else is queued) */
        CK(cudaEventSynchronize(I->ev_done));
        return;
    }
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

extern "C" Backend *backend_cuda_create(const char *precision, int local_rank)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        fprintf(stderr, "error: device=cuda: no usable CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    int prec = !strcmp(precision, "bf16") ? PREC_BF16 : !strcmp(precision, "tf32") ? PREC_TF32 : PREC_FP32;
    if (strcmp(precision, "fp32") && prec == PREC_FP32) {
        fprintf(stderr, "error: device=cuda: precision '%s' is not fp32, tf32 or bf16\n", precision);
        return NULL;
    }
    /* one rank per GPU: the node-local rank picks the device */
    int dev = local_rank % n;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        fprintf(stderr, "error: device=cuda: cannot use GPU %d: %s\n", dev, cudaGetErrorString(e));
        return NULL;
    }
    CudaImpl *I = new CudaImpl();
    I->device = dev;
    I->precision = prec;
    I->compute = prec == PREC_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
               : prec == PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                   : CUBLAS_COMPUTE_32F;
    CK(cudaStreamCreateWithFlags(&I->stream, cudaStreamNonBlocking));
    CKB(cublasCreate(&I->blas));
    CKB(cublasSetStream(I->blas, I->stream));
    CKB(cublasSetMathMode(I->blas, prec == PREC_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    Backend *be = (Backend *)calloc(1, sizeof *be);
    if (!be) die(1, "out of memory");
    be->name = prec == PREC_BF16 ? "cuda-bf16" : prec == PREC_TF32 ? "cuda-tf32" : "cuda";
    be->impl = I;
    be->alloc = cuda_alloc;
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
