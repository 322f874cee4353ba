/* GEMMs on cuBLAS (plain, strided-batched and pointer-array batched), their
 * bias and ReLU epilogue (eq. 2) and the deterministic column sums that give
 * the bias gradient (and LayerNorm's, norm.cuh). */
#pragma once

#include "memory.cuh"

/* ----------------------------------------------------------------- GEMM */

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }
static cudaDataType dtype(Act t)
{
    return t.dtype == DT_BF16 ? CUDA_R_16BF : t.dtype == DT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* elements spanned by a row-major rows x cols matrix with leading dimension ld */
static long span(int rows, int cols, int ld) { return rows > 0 && cols > 0 ? (long)(rows - 1) * ld + cols : 0; }

static void *gemm_scratch(Backend *be, int k, size_t bytes)
{
    CudaImpl *I = IMPL(be);
    if (bytes > I->gscratch_cap[k]) {
        /* queued work may still read the old buffer: cudaFree happens to
         * wait for the device, cudaFreeAsync or a pool would not */
        if (I->gscratch[k]) {
            stream_sync(I, "gemm");
            CK(cudaFree(I->gscratch[k]));
        }
        I->gscratch_cap[k] = bytes * 5 / 4;
        CK(cudaMalloc(&I->gscratch[k], I->gscratch_cap[k]));
    }
    return I->gscratch[k];
}

/* The storage a GEMM runs on (see "bf16 storage", memory.cuh): if either
 * input is narrow (bf16 or fp16) both become that type (weights: the
 * shadow; any other fp32 operand: converted into scratch) and cuBLAS
 * accumulates in fp32.  fp32 inputs into a narrow C (no such cuBLAS type
 * combination) go through an fp32 scratch C.  precision=fp32/tf32:
 * everything fp32, the plain call. */
struct GemmOps {
    Act a, b, c, c_dst;
    long c_n;   /* > 0: c is scratch, converted into c_dst afterwards */
    cublasComputeType_t ct;
};

/* n elements of x as a narrow operand: itself, the weights' shadow, or
 * converted into scratch slot k */
static Act as_narrow(Backend *be, Act x, long n, DType narrow, int k)
{
    CudaImpl *I = IMPL(be);
    if (x.dtype == narrow) return x;
    const float *p = (const float *)x.data;
    if (I->shadow && narrow == I->act_dtype && p >= I->params && p + n <= I->params + I->n_params)
        return shadow_of(be, p);
    Act s = { gemm_scratch(be, k, n * dtype_size(narrow) + 2), narrow };
    convert(be, s, x, n);
    return s;
}

static GemmOps gemm_ops(Backend *be, Act A, long nA, Act B, long nB, Act C, long nC, float beta)
{
    CudaImpl *I = IMPL(be);
    GemmOps g = { A, B, C, act_none(), 0, I->compute };
    if (A.dtype != DT_F32 || B.dtype != DT_F32) {
        DType narrow = act_type("gemm", { A.dtype != DT_F32 ? A : act_none(), B.dtype != DT_F32 ? B : act_none() });
        g.a = as_narrow(be, A, nA, narrow, 0);
        g.b = as_narrow(be, B, nB, narrow, 1);
        g.ct = CUBLAS_COMPUTE_32F;
    } else if (C.dtype != DT_F32) {
        Act s = { gemm_scratch(be, 2, nC * sizeof(float) + 4), DT_F32 };
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

/* a GEMM's cost: A, B (and C when beta != 0) read once, C written once,
 * 2 M N K FLOPs per matrix on the tensor cores of the precision (none for
 * precision=fp32, which is IEEE sgemm on the CUDA cores) */
static void declare_gemm(CudaImpl *I, const char *op, const char *call, int M, int N, int K, long batch,
                         const GemmOps &g, float beta)
{
    if (!cost_on) return;
    double mats = (double)batch, mk = (double)M * K, kn = (double)K * N, mn = (double)M * N;
    double rd = mats * (mk * dtype_size(g.a.dtype) + kn * dtype_size(g.b.dtype));
    if (beta != 0.0f) rd += mats * mn * dtype_size(g.c.dtype);
    double fl = 2.0 * mats * mn * K;
    TensorCore tc = I->precision == PREC_FP32 ? TC_NONE : I->precision == PREC_TF32 ? TC_TF32 : TC_16BIT;
    declare(op, call, COST_GEMM, rd, mats * mn * dtype_size(g.c.dtype), tc == TC_NONE ? 0 : fl, tc == TC_NONE ? fl : 0, tc);
    declare_shape(M, N, K, batch, dtype_size(g.a.dtype));
}

static void cuda_gemm(Backend *be, int tA, int tB, int M, int N, int K, float alpha, Act A, int lda, Act B, int ldb,
                      float beta, Act C, int ldc)
{
    CudaImpl *I = IMPL(be);
    if (M <= 0 || N <= 0) return;
    GemmOps g = gemm_ops(be, A, tA ? span(K, M, lda) : span(M, K, lda), B, tB ? span(N, K, ldb) : span(K, N, ldb), C,
                         span(M, N, ldc), beta);
    /* row-major C[M,N] = column-major C^T[N,M] = op(B)^T op(A)^T */
    declare_gemm(I, "gemm", "cublasGemmEx", M, N, K, 1, g, beta);
    CKB(cublasGemmEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.data, dtype(g.b), ldb, g.a.data, dtype(g.a), lda,
                     &beta, g.c.data, dtype(g.c), ldc, g.ct, CUBLAS_GEMM_DEFAULT));
    gemm_done(be, g);
}

/* pointers to matrix (o, i) of A, B and C for cublasGemmBatchedEx: out[idx],
 * out[n + idx], out[2n + idx] with idx = o * n_inner + i; the strides are
 * in elements of ea, eb, ec bytes (the operands' types may differ) */
static __global__ void k_gemm_ptrs(void **out, char *a, char *b, char *c, int ea, int eb, int ec, long sAo, long sAi,
                                   long sBo, long sBi, long sCo, long sCi, int n_inner, long n)
{
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        long o = idx / n_inner, i = idx % n_inner;
        st(out, idx, a + (o * sAo + i * sAi) * ea);
        st(out, n + idx, b + (o * sBo + i * sBi) * eb);
        st(out, 2 * n + idx, c + (o * sCo + i * sCi) * ec);
    }
}

static void cuda_gemm_batched(Backend *be, int tA, int tB, int M, int N, int K, float alpha, Act A, int lda,
                              long sAo, long sAi, Act B, int ldb, long sBo, long sBi, float beta, Act C, int ldc,
                              long sCo, long sCi, int n_outer, int n_inner)
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
        declare_gemm(I, "gemm_batched", "cublasGemmStridedBatchedEx", M, N, K, n, g, beta);
        CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.data, tb, ldb, sBi, g.a.data, ta,
                                       lda, sAi, &beta, g.c.data, tc, ldc, sCi, (int)n, g.ct, CUBLAS_GEMM_DEFAULT));
    } else if (n_inner == 1) {
        declare_gemm(I, "gemm_batched", "cublasGemmStridedBatchedEx", M, N, K, n_outer, g, beta);
        CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.data, tb, ldb, sBo, g.a.data, ta,
                                       lda, sAo, &beta, g.c.data, tc, ldc, sCo, n_outer, g.ct, CUBLAS_GEMM_DEFAULT));
    } else {
        if ((size_t)(3 * n) > I->gptrs_cap) {
            stream_sync(I, "gemm_batched");   /* the old arrays may still be read */
            if (I->gptrs) CK(cudaFree(I->gptrs));
            I->gptrs_cap = (size_t)(3 * n) * 2;
            CK(cudaMalloc((void **)&I->gptrs, I->gptrs_cap * sizeof(void *)));
        }
        /* stream order: these arrays are written after the last batched GEMM read them */
        DECLARE_KERNEL(k_gemm_ptrs, "gemm_batched", 3 * sizeof(void *), 0, 3 * n * sizeof(void *), 0);
        LAUNCH(k_gemm_ptrs, nblocks(n, 256), 256, 0, I->stream, I->gptrs, (char *)g.a.data, (char *)g.b.data,
               (char *)g.c.data, (int)dtype_size(g.a.dtype), (int)dtype_size(g.b.dtype), (int)dtype_size(g.c.dtype),
               sAo, sAi, sBo, sBi, sCo, sCi, n_inner, n);
        CKL();
        declare_gemm(I, "gemm_batched", "cublasGemmBatchedEx", M, N, K, n, g, beta);
        CKB(cublasGemmBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, (const void *const *)(I->gptrs + n), tb, ldb,
                                (const void *const *)I->gptrs, ta, lda, &beta, I->gptrs + 2 * n, tc, ldc, (int)n, g.ct,
                                CUBLAS_GEMM_DEFAULT));
    }
    gemm_done(be, g);
}

/* ------------------------------------------------------------------ bias */

/* Y += bias (per column), then the ReLU of eq. 2; 16-byte packs of Y */
template <typename T> static __global__ void k_bias_forward(T *Y, const float *bias, long n, int cols, int relu)
{
    grid_update(Y, n, [&](long i, float y) {
        float v = y + ld(bias, i % cols);
        return relu ? (v > 0.0f ? v : 0.0f) : v;
    });
}

static void cuda_bias_forward(Backend *be, Act Y, const float *bias, int rows, int cols, int relu)
{
    long n = (long)rows * cols;
    if (n <= 0) return;
    dispatch(Y.dtype, [&](auto z) {
        using T = decltype(z);
        DECLARE_KERNEL(k_bias_forward<T>, "bias_forward", 16 + Pack<T>::N * sizeof(float), n * sizeof(T) + cols * sizeof(float), n * sizeof(T),
                       (relu ? 2 : 1) * n);
        LAUNCH(k_bias_forward<T>, nblocks(n, 256), 256, 0, IMPL(be)->stream, tp<T>(Y), bias, n, cols, relu);
    });
    CKL();
}

/* dY = 0 where the ReLU was off (Y <= 0).  In 16-byte packs when dY and Y
 * are equally aligned: a pack of dY is read and written back whole where
 * any of its Y is off, which costs more bytes than scalar stores but keeps
 * 8x the bytes in flight (and DRAM writes whole 32-byte sectors anyway) */
template <typename T> static __global__ void k_relu_mask(T *dY, const T *Y, long n)
{
    constexpr int N = Pack<T>::N;
    grid_for<T>(n, { dY, Y },
                [&](long i) {
                    if (!(ld(Y, i) > 0.0f)) st(dY, i, 0.0f);
                },
                [&](long i0) {
                    Pack<T> y = ldp(Y + i0);
                    bool off = false;
                    for (int e = 0; e < N; e++) off = off || !(to_float(y.v[e]) > 0.0f);
                    if (!off) return;
                    Pack<T> d = ldp(dY + i0);
                    for (int e = 0; e < N; e++)
                        if (!(to_float(y.v[e]) > 0.0f)) d.v[e] = from_float<T>(0.0f);
                    stp(dY + i0, d);
                });
}

/* Deterministic column sums in two stages.  Stage 1: block (32, 8) owns 32
 * columns and a chunk of rows; thread row ty adds rows ty, ty+8, ... of the
 * chunk, then the 8 partials are added in order.  Stage 2 adds the chunk
 * partials into the output, a warp per column: lane l adds chunks l, l+32,
 * ... in order, then the warp's fixed shuffle tree (a thread per column
 * walking ~100 chunks serially was latency-bound: 20 us per call, 84 calls
 * a step, docs/gpu-model.md).  Optionally a second quantity (LayerNorm:
 * dgamma from dy*xhat next to dbeta from dy). */
#define CS_X 32
#define CS_Y 8
#define CS_ROWS 256   /* rows per chunk */

template <typename T>
static __global__ void k_colsum_partial(const T *X, const T *R, const float *mean, const float *rstd, int rows,
                                        int cols, float *part_a, float *part_b)
{
    DYNAMIC_SHARED(float, sh);   /* [2][CS_Y][CS_X] */
    int c = blockIdx.x * CS_X + threadIdx.x, chunk = blockIdx.y;
    int r0 = chunk * CS_ROWS, r1 = r0 + CS_ROWS < rows ? r0 + CS_ROWS : rows;
    float a = 0.0f, b = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += CS_Y) {
            float x = ld(X, (size_t)r * cols + c);
            b += x;
            if (R) a += x * (ld(R, (size_t)r * cols + c) - ld(mean, r)) * ld(rstd, r);
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
        st(part_b, (size_t)chunk * cols + c, sb);
        if (R) st(part_a, (size_t)chunk * cols + c, sa);
    }
}

#define CF_COLS 8   /* columns (warps) per block of k_colsum_final */

static __global__ void k_colsum_final(const float *part, int chunks, int cols, float *out)
{
    int c = blockIdx.x * CF_COLS + threadIdx.y;
    if (c >= cols) return;   /* the whole warp: c is the warp's */
    float s = 0.0f;
    for (int k = threadIdx.x; k < chunks; k += 32) s += ld(part, (size_t)k * cols + c);
    s = warp_sum(s);
    if (threadIdx.x == 0) st(out, c, ld(out, c) + s);
}

static float *part_buffer(Backend *be, size_t n)
{
    CudaImpl *I = IMPL(be);
    if (n > I->part_cap) {
        if (I->part) {
            stream_sync(I, "colsums");   /* as gemm_scratch */
            CK(cudaFree(I->part));
        }
        I->part = NULL;
        CK(cudaMalloc((void **)&I->part, n * sizeof(float)));
        I->part_cap = n;
    }
    return I->part;
}

/* out_b += column sums of X; with Rr: out_a += column sums of X*(Rr-mean)*rstd */
static void colsums(Backend *be, Act X, Act Rr, const float *mean, const float *rstd, int rows, int cols,
                    float *out_a, float *out_b)
{
    if (rows <= 0 || cols <= 0) return;
    cudaStream_t s = IMPL(be)->stream;
    int chunks = (rows + CS_ROWS - 1) / CS_ROWS;
    float *part = part_buffer(be, (size_t)chunks * cols * 2);
    float *pb = part, *pa = part + (size_t)chunks * cols;
    dim3 grid((cols + CS_X - 1) / CS_X, chunks), block(CS_X, CS_Y);
    dispatch(act_type("colsums", { X, Rr }), [&](auto z) {
        using T = decltype(z);
        /* X (and R with mean, rstd) once; the partials of each chunk */
        DECLARE_KERNEL(k_colsum_partial<T>, "colsums", 4 * (Rr.data ? 2 * sizeof(T) + 2 * sizeof(float) : sizeof(T)),
                       (double)rows * cols * sizeof(T) * (Rr.data ? 2 : 1) + (Rr.data ? 2.0 * rows * sizeof(float) : 0),
                       (double)chunks * cols * sizeof(float) * (Rr.data ? 2 : 1), (double)rows * cols * (Rr.data ? 5 : 1));
        LAUNCH(k_colsum_partial<T>, grid, block, 2 * CS_X * CS_Y * sizeof(float), s, tp<T>(X), tp<T>(Rr), mean,
               rstd, rows, cols, pa, pb);
    });
    CKL();
    /* the partials, and out read and written */
    dim3 fgrid((cols + CF_COLS - 1) / CF_COLS), fblock(32, CF_COLS);
    DECLARE_KERNEL(k_colsum_final, "colsums", 4 * sizeof(float), ((double)chunks + 1) * cols * sizeof(float),
                   cols * sizeof(float), (double)chunks * cols);
    LAUNCH(k_colsum_final, fgrid, fblock, 0, s, pb, chunks, cols, out_b);
    CKL();
    if (Rr.data) {
        DECLARE_KERNEL(k_colsum_final, "colsums", 4 * sizeof(float), ((double)chunks + 1) * cols * sizeof(float),
                       cols * sizeof(float), (double)chunks * cols);
        LAUNCH(k_colsum_final, fgrid, fblock, 0, s, pa, chunks, cols, out_a);
        CKL();
    }
}

static void cuda_bias_backward(Backend *be, Act dY, float *dbias, Act Y, int rows, int cols, int relu)
{
    long n = (long)rows * cols;
    if (n <= 0) return;
    if (relu) {
        dispatch(act_type("bias_backward", { dY, Y }), [&](auto z) {
            using T = decltype(z);
            /* reads Y, and dY where a pack has a ReLU off: about half of the
             * hidden layer is off at any stage of training, so nearly every
             * pack of 8 (4 in fp32) has one; written back likewise */
            DECLARE_KERNEL(k_relu_mask<T>, "bias_backward", 2 * 16, 2.0 * n * sizeof(T), n * sizeof(T), n);
            LAUNCH(k_relu_mask<T>, nblocks(n, 256), 256, 0, IMPL(be)->stream, tp<T>(dY), tp<T>(Y), n);
        });
        CKL();
    }
    colsums(be, dY, act_none(), NULL, NULL, rows, cols, NULL, dbias);
}
