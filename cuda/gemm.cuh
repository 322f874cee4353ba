/* GEMMs on cuBLAS (plain, strided-batched and pointer-array batched), their
 * bias and ReLU epilogue (eq. 2) and the deterministic column sums that give
 * the bias gradient (and LayerNorm's, norm.cuh). */
#pragma once

#include "common.cuh"

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
