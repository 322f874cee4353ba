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
        graph_realloc(I, I->gscratch[k] != NULL);
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
 * plus what a cuBLASLt epilogue reads (bias, ReLU mask) and writes (the
 * mask); 2 M N K FLOPs per matrix on the tensor cores of the precision
 * (none for precision=fp32, which is IEEE sgemm on the CUDA cores) */
static void declare_gemm(CudaImpl *I, const char *op, const char *call, int M, int N, int K, long batch,
                         const GemmOps &g, float beta, double extra_rd = 0, double extra_wr = 0)
{
    if (!cost_on) return;
    double mats = (double)batch, mk = (double)M * K, kn = (double)K * N, mn = (double)M * N;
    double rd = mats * (mk * dtype_size(g.a.dtype) + kn * dtype_size(g.b.dtype)) + extra_rd;
    if (beta != 0.0f) rd += mats * mn * dtype_size(g.c.dtype);
    double fl = 2.0 * mats * mn * K;
    TensorCore tc = I->precision == PRECISION_FP32 ? TC_NONE : I->precision == PRECISION_TF32 ? TC_TF32 : TC_16BIT;
    double wr = mats * mn * dtype_size(g.c.dtype) + extra_wr;
    declare(op, call, COST_GEMM, rd, wr, tc == TC_NONE ? 0 : fl, tc == TC_NONE ? fl : 0, tc);
    declare_shape(M, N, K, batch, dtype_size(g.a.dtype));
}

/* one cublasGemmEx on operands gemm_ops prepared, declared as part of op */
static void gemm_call(CudaImpl *I, const char *op_name, const GemmOps &g, int tA, int tB, int M, int N, int K,
                      float alpha, int lda, int ldb, float beta, int ldc)
{
    /* row-major C[M,N] = column-major C^T[N,M] = op(B)^T op(A)^T */
    declare_gemm(I, op_name, "cublasGemmEx", M, N, K, 1, g, beta);
    GEMM_CALL(CKB(cublasGemmEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.data, dtype(g.b), ldb, g.a.data, dtype(g.a), lda,
                               &beta, g.c.data, dtype(g.c), ldc, g.ct, CUBLAS_GEMM_DEFAULT)));
}

static void cuda_gemm(Backend *be, int tA, int tB, int M, int N, int K, float alpha, Act A, int lda, Act B, int ldb,
                      float beta, Act C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    GemmOps g = gemm_ops(be, A, tA ? span(K, M, lda) : span(M, K, lda), B, tB ? span(N, K, ldb) : span(K, N, ldb), C,
                         span(M, N, ldc), beta);
    gemm_call(IMPL(be), "gemm", g, tA, tB, M, N, K, alpha, lda, ldb, beta, ldc);
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
        GEMM_CALL(CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.data, tb, ldb, sBi, g.a.data, ta,
                                                 lda, sAi, &beta, g.c.data, tc, ldc, sCi, (int)n, g.ct, CUBLAS_GEMM_DEFAULT)));
    } else if (n_inner == 1) {
        declare_gemm(I, "gemm_batched", "cublasGemmStridedBatchedEx", M, N, K, n_outer, g, beta);
        GEMM_CALL(CKB(cublasGemmStridedBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, g.b.data, tb, ldb, sBo, g.a.data, ta,
                                                 lda, sAo, &beta, g.c.data, tc, ldc, sCo, n_outer, g.ct, CUBLAS_GEMM_DEFAULT)));
    } else {
        if ((size_t)(3 * n) > I->gptrs_cap) {
            graph_realloc(I, I->gptrs != NULL);
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
        GEMM_CALL(CKB(cublasGemmBatchedEx(I->blas, op(tB), op(tA), N, M, K, &alpha, (const void *const *)(I->gptrs + n), tb, ldb,
                                          (const void *const *)I->gptrs, ta, lda, &beta, I->gptrs + 2 * n, tc, ldc, (int)n, g.ct,
                                          CUBLAS_GEMM_DEFAULT)));
    }
    gemm_done(be, g);
}

/* ------------------------------------------------- GEMM + bias epilogue */

/* gemm_scratch slots beyond A, B, C */
#define GS_BIAS 3    /* a bias vector converted to D's type, or realigned */
#define GS_LT_WS 4   /* cuBLASLt workspace */
/* "NVIDIA Hopper Architecture: 32 MiB" is the workspace the cuBLAS docs
 * recommend (cublasSetWorkspace); the heuristic may pick split-K or
 * stream-K algorithms up to this much, and the buffer grows to the
 * largest workspaceSize a plan asks for, not to the maximum */
#define LT_WS_BYTES ((size_t)32 << 20)

/* The cuBLASLt handle and its one matmul preference: the workspace it may
 * use, and split-K partials reduced only in the compute type (fp32): not
 * OUTPUT_TYPE, and not INPLACE, which reduces "using the output buffer (and
 * output data type)" (cublasLt.h), bf16/fp16 partial sums that can
 * overflow fp16 (the counterpart of the cuBLAS handle's
 * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) */
static void lt_create(CudaImpl *I)
{
    CKB(cublasLtCreate(&I->lt));
    CKB(cublasLtMatmulPreferenceCreate(&I->lt_pref));
    uint64_t ws = LT_WS_BYTES;
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CKB(cublasLtMatmulPreferenceSetAttribute(I->lt_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CKB(cublasLtMatmulPreferenceSetAttribute(I->lt_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
}

/* the alignment cuBLASLt may assume for p: its largest power of two, at
 * most 256 (the preference's default, which a weight at an odd offset in
 * the parameters, or its shadow, does not meet) */
static uint32_t lt_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

/* an epilogue and its vectors: bias (m elements of D's type: cublasLt.h,
 * CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, "the same type as the elements of
 * output matrix (Dtype)" for these kernels) and the ReLU bit-mask (aux,
 * ld in bits, a multiple of 128) */
struct LtEpilogue {
    cublasLtEpilogue_t epi;
    Act bias;
    void *aux;
    int64_t aux_ld;
};

/* A cuBLASLt plan: the descriptors and the heuristic's algorithm for one
 * shape, types, transposition, epilogue and operand alignment, made once
 * per backend instead of a heuristic query and descriptor create/destroy
 * on every GEMM.  ok = false: cuBLASLt has no algorithm for it (the
 * heuristic answered NOT_SUPPORTED or found none: cuBLASLt "does not
 * guarantee the support of all possible sizes and configurations"), and
 * the caller runs the unfused GEMM and bias/ReLU kernels instead. */
struct LtPlan {
    bool ok;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t h;
};

/* the epilogue's vectors on the plan's descriptor (they change per call) */
static void lt_set_vectors(cublasLtMatmulDesc_t d, const LtEpilogue &e)
{
    if (e.bias.data)
        CKB(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias.data, sizeof e.bias.data));
    if (e.aux) {
        CKB(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux));
        CKB(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e.aux_ld, sizeof e.aux_ld));
    }
}

/* a new plan for column-major D[m, n] = epilogue(op(A) B) (lt_plan) */
static LtPlan *lt_plan_new(CudaImpl *I, const GemmOps &g, int tA, int m, int n, int k, int lda, int ldb,
                           const LtEpilogue &e, const uint32_t align[4])
{
    LtPlan *p = new LtPlan();
    int32_t ta = tA ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epi = e.epi;
    CKB(cublasLtMatmulDescCreate(&p->desc, g.ct, CUDA_R_32F));
    CKB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    lt_set_vectors(p->desc, e);
    CKB(cublasLtMatrixLayoutCreate(&p->la, dtype(g.a), tA ? k : m, tA ? m : k, lda));
    CKB(cublasLtMatrixLayoutCreate(&p->lb, dtype(g.b), k, n, ldb));
    CKB(cublasLtMatrixLayoutCreate(&p->lc, dtype(g.c), m, n, m));
    for (int i = 0; i < 4; i++)
        CKB(cublasLtMatmulPreferenceSetAttribute(
            I->lt_pref, (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
            &align[i], sizeof align[i]));
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(I->lt, p->desc, p->la, p->lb, p->lc, p->lc, I->lt_pref, 1,
                                                      &p->h, &found);
    if (s != CUBLAS_STATUS_NOT_SUPPORTED) CKB(s);
    p->ok = s == CUBLAS_STATUS_SUCCESS && found > 0;
    return p;
}

/* the plan of column-major D[m, n] = epilogue(op(A) B), A stored k x m
 * (tA) or m x k with ld lda, B k x n (ldb), D with ld m; made on first use
 * (the key: everything the heuristic's choice depends on but the
 * pointers), with e's vectors set on its descriptor */
static LtPlan *lt_plan(CudaImpl *I, const GemmOps &g, int tA, int m, int n, int k, int lda, int ldb,
                       const LtEpilogue &e)
{
    uint32_t al[4] = { lt_align(g.a.data), lt_align(g.b.data), lt_align(g.c.data), lt_align(g.c.data) };
    std::vector<int64_t> key = { m, n, k, lda, ldb, tA, dtype(g.a), dtype(g.b), dtype(g.c), g.ct, e.epi,
                                 al[0], al[1], al[2] };
    auto it = I->lt_plans.find(key);
    if (it != I->lt_plans.end()) {
        lt_set_vectors(it->second->desc, e);
        return it->second;
    }
    return I->lt_plans[key] = lt_plan_new(I, g, tA, m, n, k, lda, ldb, e, al);
}

static void lt_plans_destroy(CudaImpl *I)
{
    for (auto &kv : I->lt_plans) {
        LtPlan *p = kv.second;
        cublasLtMatrixLayoutDestroy(p->lc);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatmulDescDestroy(p->desc);
        delete p;
    }
    I->lt_plans.clear();
}

/* the plan's matmul on g's operands (cuBLASLt's A, B and D), with the
 * workspace its algorithm asks for (cudaMalloc: 256-byte aligned) */
static void lt_run(Backend *be, const LtPlan *p, const GemmOps &g)
{
    CudaImpl *I = IMPL(be);
    size_t wsz = p->h.workspaceSize;
    void *ws = wsz ? gemm_scratch(be, GS_LT_WS, wsz) : NULL;
    float one = 1.0f, zero = 0.0f;
    GEMM_CALL(CKB(cublasLtMatmul(I->lt, p->desc, &one, g.a.data, p->la, g.b.data, p->lb, &zero, g.c.data, p->lc, g.c.data,
                                 p->lc, &p->h.algo, ws, wsz, I->stream)));
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

/* Y = bias (+ ReLU) applied to the fp32 product acc and rounded once into
 * Y's type: the unfused stand-in for a cuBLASLt bias epilogue (which works
 * on the fp32 accumulator), equal to it where a 16-bit Y would otherwise
 * be rounded twice (after the GEMM, after the bias) */
template <typename T>
static __global__ void k_bias_store(T *Y, const float *acc, const float *bias, long n, int cols, int relu)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = ld(acc, i) + ld(bias, i % cols);
        st(Y, i, relu ? (v > 0.0f ? v : 0.0f) : v);
    }
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

/* Stage 1 of the bias gradient behind the FFN's ReLU (eq. 2): dY = 0 where
 * the forward's ReLU was off (!(Y > 0): a NaN is off), and the chunk
 * partials of the masked dY's column sums, in one pass over dY and Y
 * instead of a masking pass and k_colsum_partial's second read of dY
 * (issue 44: fewer memory-bound passes).  With chunks of CS_ROWS the
 * same threads add the same rows in the same order as k_colsum_partial:
 * the partials are bitwise those of the two-pass path; small batches take
 * shorter chunks (relu_colsums). */
template <typename T>
static __global__ void k_relu_colsum_partial(T *dY, const T *Y, int rows, int cols, int chunk_rows, float *part)
{
    DYNAMIC_SHARED(float, sh);   /* [CS_Y][CS_X] */
    int c = blockIdx.x * CS_X + threadIdx.x, chunk = blockIdx.y;
    int r0 = chunk * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    float b = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += CS_Y) {
            size_t i = (size_t)r * cols + c;
            float y = ld(Y, i), v = ld(dY, i);   /* whole: about half of a row is off, so DRAM */
            v = y > 0.0f ? v : 0.0f;              /* moves nearly every sector of dY both ways */
            st(dY, i, v);
            b += v;
        }
    sh[threadIdx.y * CS_X + threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float sb = 0.0f;
        for (int y = 0; y < CS_Y; y++) sb += sh[y * CS_X + threadIdx.x];
        st(part, (size_t)chunk * cols + c, sb);
    }
}

#define CF_COLS 8   /* columns (warps) per block of k_colsum_final */

/* out2 (and out3): a second (third) set of partials right after the
 * first (chunks x cols floats on), into out2 (out3), in the same launch
 * (the LayerNorm's dgamma, dbeta and the FFN's b2: launches fewer) */
static __global__ void k_colsum_final(const float *part, int chunks, int cols, float *out, float *out2, float *out3)
{
    int c = blockIdx.x * CF_COLS + threadIdx.y, set = c / cols;   /* out3 only with out2 (colsum_final) */
    if (set > 2) return;   /* the whole warp: c is the warp's */
    out = set == 0 ? out : set == 1 ? out2 : out3;
    if (!out) return;
    part += (size_t)set * chunks * cols;
    c -= set * cols;
    float s = 0.0f;
    for (int k = threadIdx.x; k < chunks; k += 32) s += ld(part, (size_t)k * cols + c);
    s = warp_sum(s);
    if (threadIdx.x == 0) st(out, c, ld(out, c) + s);
}

/* The last stages held back (issue 44, fewer launches).  A step's
 * backward ends 42 column sums (base: each LayerNorm's dgamma, dbeta and
 * the FFN's b2, each FFN's b1) with a launch of k_colsum_final each, a
 * kernel that is little more than its launch.  While defer_sums is on (the
 * model turns it on for a backward: ops.h), each partial kernel writes
 * into a slot of its own in the sums arena and its last stage waits in
 * sums_pending, and one launch of k_colsum_final_list runs them all where
 * the model releases them, before anything reads a gradient (the
 * gradient hook, the end of backward).  Each column is summed by the same
 * warp arithmetic as k_colsum_final's: the gradients are bitwise those of
 * the launches one by one. */
static __global__ void k_colsum_final_list(SumsList L)
{
    int c = blockIdx.x * CF_COLS + threadIdx.y, i = 0;
    if (c >= L.col_start[L.n]) return;   /* the whole warp: c is the warp's */
    while (c >= L.col_start[i + 1]) i++;
    const SumsEntry &e = L.e[i];
    c -= L.col_start[i];
    int set = c / e.cols;
    c -= set * e.cols;
    const float *part = e.part + (size_t)set * e.chunks * e.cols;
    float s = 0.0f;
    for (int k = threadIdx.x; k < e.chunks; k += 32) s += ld(part, (size_t)k * e.cols + c);
    s = warp_sum(s);
    if (threadIdx.x == 0) st(e.out[set], c, ld(e.out[set], c) + s);
}

/* the held-back last stages, in one launch (nothing pending: none) */
static void sums_flush(Backend *be)
{
    CudaImpl *I = IMPL(be);
    size_t n = I->sums_pending.size();
    if (!n) return;
    SumsList L;
    memset(&L, 0, sizeof L);   /* hashed byte for byte under graphs: no stray bytes */
    double rd = 0, wr = 0;
    for (size_t i = 0; i < n; i++) {
        const SumsEntry &e = I->sums_pending[i];
        L.e[i] = e;
        L.col_start[i + 1] = L.col_start[i] + e.sets * e.cols;
        rd += ((double)e.chunks + 1) * e.sets * e.cols * sizeof(float);
        wr += (double)e.sets * e.cols * sizeof(float);
    }
    L.n = (int)n;
    int cols = L.col_start[n];
    dim3 fgrid((cols + CF_COLS - 1) / CF_COLS), fblock(32, CF_COLS);
    DECLARE_KERNEL(k_colsum_final_list, "colsums", 4 * sizeof(float), rd, wr, rd / sizeof(float));
    LAUNCH(k_colsum_final_list, fgrid, fblock, 0, I->stream, L);
    CKL();
    I->sums_pending.clear();
}

/* n floats of the sums arena for one held-back column sum's partials;
 * where it is full, the pending last stages run first and it grows to
 * twice what has been asked since the last release (sums_asked), so that
 * the next step fits whole: a growth drops the step's graphs */
static float *sums_slot(Backend *be, size_t n)
{
    CudaImpl *I = IMPL(be);
    n = (n + 3) & ~(size_t)3;   /* 16-byte aligned slots */
    I->sums_asked += n;
    if (I->sums_used + n > I->sums_cap) {
        sums_flush(be);
        size_t want = 2 * I->sums_asked;
        graph_realloc(I, I->sums_arena != NULL);
        if (I->sums_arena) {
            stream_sync(I, "colsums");   /* the flush above reads the old arena */
            CK(cudaFree(I->sums_arena));
        }
        I->sums_arena = NULL;
        CK(cudaMalloc((void **)&I->sums_arena, want * sizeof(float)));
        I->sums_cap = want;
        I->sums_used = 0;
    }
    float *p = I->sums_arena + I->sums_used;
    I->sums_used += n;
    return p;
}

/* Backend.defer_sums (ops.h): on, the column sums' last stages wait;
 * off, they run now (one launch) and the arena is free again.
 * TRANSFORMER_DEFER_SUMS=0 (tests) keeps every last stage a launch of its
 * own, for the bitwise comparison */
static void cuda_defer_sums(Backend *be, int on)
{
    CudaImpl *I = IMPL(be);
    static const bool off = getenv("TRANSFORMER_DEFER_SUMS") && !strcmp(getenv("TRANSFORMER_DEFER_SUMS"), "0");
    if (!on || off) {
        sums_flush(be);
        I->sums_used = I->sums_asked = 0;
    }
    I->defer_sums = on && !off;
}

/* the column sums' partial-sum scratch of at least n floats, for op (the
 * cost log's name of a sync that grows it); it grows to twice the need, as
 * the other scratch does, so that batches creeping up in length do not
 * regrow it (each growth drops the captured CUDA Graphs: graph_realloc).
 * While the last stages are held back, a slot of the sums arena instead */
static float *part_buffer(Backend *be, size_t n, const char *op)
{
    CudaImpl *I = IMPL(be);
    if (I->defer_sums) return sums_slot(be, n);
    if (n > I->part_cap) {
        graph_realloc(I, I->part != NULL);
        if (I->part) {
            stream_sync(I, op);   /* as gemm_scratch */
            CK(cudaFree(I->part));
        }
        I->part = NULL;
        CK(cudaMalloc((void **)&I->part, 2 * n * sizeof(float)));
        I->part_cap = 2 * n;
    }
    return I->part;
}

/* out += the column sums of chunks rows of partials (stage 2); with out2,
 * out2 += those of the chunks rows after them, and with out3 too, out3 +=
 * those of the third set, in the same launch; held back (sums_pending)
 * while defer_sums is on */
static void colsum_final(Backend *be, const float *part, int chunks, int cols, float *out, float *out2 = NULL,
                         float *out3 = NULL)
{
    CudaImpl *I = IMPL(be);
    int sets = 1 + (out2 != NULL) + (out2 && out3);
    if (I->defer_sums) {
        if (I->sums_pending.size() == SUMS_MAX) sums_flush(be);
        I->sums_pending.push_back(SumsEntry{ part, { out, out2, out3 }, chunks, cols, sets, 0 });
        return;
    }
    /* the partials, and out read and written */
    int n = sets * cols;
    dim3 fgrid((n + CF_COLS - 1) / CF_COLS), fblock(32, CF_COLS);
    DECLARE_KERNEL(k_colsum_final, "colsums", 4 * sizeof(float), ((double)chunks + 1) * n * sizeof(float),
                   n * sizeof(float), (double)chunks * n);
    LAUNCH(k_colsum_final, fgrid, fblock, 0, I->stream, part, chunks, cols, out, out2, out3);
    CKL();
}

/* out_b += column sums of X; with Rr: out_a += column sums of X*(Rr-mean)*rstd */
static void colsums(Backend *be, Act X, Act Rr, const float *mean, const float *rstd, int rows, int cols,
                    float *out_a, float *out_b)
{
    if (rows <= 0 || cols <= 0) return;
    cudaStream_t s = IMPL(be)->stream;
    int chunks = (rows + CS_ROWS - 1) / CS_ROWS;
    float *part = part_buffer(be, (size_t)chunks * cols * 2, "colsums");
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
    colsum_final(be, pb, chunks, cols, out_b);
    if (Rr.data) colsum_final(be, pa, chunks, cols, out_a);
}

/* dY = 0 where the ReLU was off (!(Y > 0)), dbias += column sums of dY:
 * k_relu_colsum_partial, then the final stage as colsums' */
static void relu_colsums(Backend *be, Act dY, Act Y, int rows, int cols, float *dbias)
{
    if (rows <= 0 || cols <= 0) return;
    /* chunks of CS_ROWS rows, shorter where that leaves fewer than 4 blocks
     * an SM of an H100 (Table 3's base': 1960 x 512, 128 blocks at 256) */
    int cblocks = (cols + CS_X - 1) / CS_X, chunk_rows = CS_ROWS;
    while (chunk_rows > 4 * CS_Y && (long)cblocks * ((rows + chunk_rows - 1) / chunk_rows) < 4 * 132) chunk_rows /= 2;
    int chunks = (rows + chunk_rows - 1) / chunk_rows;
    float *part = part_buffer(be, (size_t)chunks * cols, "bias_backward");
    dim3 grid((cols + CS_X - 1) / CS_X, chunks), block(CS_X, CS_Y);
    dispatch(act_type("bias_backward", { dY, Y }), [&](auto z) {
        using T = decltype(z);
        /* Y and dY read, dY written, the partials of each chunk */
        double n = (double)rows * cols;
        DECLARE_KERNEL(k_relu_colsum_partial<T>, "bias_backward", 4 * 2 * sizeof(T), 2 * n * sizeof(T),
                       n * sizeof(T) + (double)chunks * cols * sizeof(float), 2 * n);
        LAUNCH(k_relu_colsum_partial<T>, grid, block, CS_X * CS_Y * sizeof(float), IMPL(be)->stream, tp<T>(dY),
               tp<T>(Y), rows, cols, chunk_rows, part);
    });
    CKL();
    colsum_final(be, part, chunks, cols, dbias);
}

static void cuda_bias_backward(Backend *be, Act dY, float *dbias, Act Y, int rows, int cols, int relu)
{
    if (relu) relu_colsums(be, dY, Y, rows, cols, dbias);
    else colsums(be, dY, act_none(), NULL, NULL, rows, cols, NULL, dbias);
}

/* ------------------------------------------ feed-forward with cuBLASLt */

/* the ReLU bit-mask of a rows x cols activation: a bit per element, each
 * row of the activation (a column of cuBLASLt's column-major D) padded to
 * a multiple of 128 bits (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) */
static int64_t mask_ld(int cols) { return ((int64_t)cols + 127) / 128 * 128; }
static size_t cuda_relu_mask_bytes(Backend *be, int rows, int cols)
{
    (void)be;
    return (size_t)(mask_ld(cols) / 8) * (size_t)(rows > 0 ? rows : 0);
}
/* the bytes of it that a matmul writes or reads (the padding is not) */
static double mask_traffic(int rows, int cols) { return (double)((cols + 7) / 8) * rows; }

/* the bias of a cuBLASLt epilogue: n elements in D's type t (the weights'
 * shadow, or converted) at a 16-byte boundary, as the epilogue reads it in
 * 16-byte vectors.  Parameters are packed without padding (checkpoints
 * and the CPU share the layout), so a bias after a tensor whose size is
 * not a multiple of 4 floats (8 16-bit elements), e.g. d_ff = 50, is not
 * aligned: it is copied (converted) into scratch, a few hundred bytes
 * next to the GEMM; the Transformer's own sizes (multiples of 8) never
 * need it. */
static Act lt_bias(Backend *be, const float *bias, int n, DType t)
{
    Act b = as_narrow(be, act_f32((float *)bias), n, t, GS_BIAS);
    if (((uintptr_t)b.data & 15) == 0) return b;
    Act s = { gemm_scratch(be, GS_BIAS, (size_t)n * dtype_size(t) + 2), t };
    if (t == DT_F32) copy_async(IMPL(be), "linear_bias_forward", s.data, bias, (size_t)n * sizeof(float),
                                cudaMemcpyDeviceToDevice);
    else convert(be, s, act_f32((float *)bias), n);
    return s;
}

/* linear_bias_forward without cuBLASLt: the GEMM (operands g) into an
 * fp32 product, then k_bias_store rounds once into Y (in place by
 * k_bias_forward for an fp32 Y) */
static void linear_bias_unfused(Backend *be, GemmOps g, Act Y, const float *bias, int rows, int in, int out,
                                int relu)
{
    CudaImpl *I = IMPL(be);
    long n = (long)rows * out;
    if (Y.dtype == DT_F32) {
        gemm_call(I, "linear_bias_forward", g, 0, 1, rows, out, in, 1.0f, in, in, 0.0f, out);
        return cuda_bias_forward(be, Y, bias, rows, out, relu);
    }
    if (g.c.dtype != DT_F32) g.c = Act{ gemm_scratch(be, 2, n * sizeof(float) + 4), DT_F32 };
    gemm_call(I, "linear_bias_forward", g, 0, 1, rows, out, in, 1.0f, in, in, 0.0f, out);
    dispatch(Y.dtype, [&](auto z) {
        using T = decltype(z);
        if constexpr (!std::is_same<T, float>::value) {   /* (not compiled for fp32: never launched) */
            DECLARE_KERNEL(k_bias_store<T>, "linear_bias_forward", sizeof(float) + sizeof(T),
                           n * sizeof(float) + out * sizeof(float), n * sizeof(T), (relu ? 2 : 1) * n);
            LAUNCH(k_bias_store<T>, nblocks(n, 256), 256, 0, I->stream, tp<T>(Y), tp<float>(g.c), bias, n, out,
                   relu);
        }
    });
    CKL();
}

/* Y = X W^T + bias (relu: then max(0, .), eq. 2) as one cuBLASLt matmul
 * with the BIAS or RELU_BIAS epilogue: the bias and ReLU are applied to the
 * fp32 accumulator before the one rounding to Y's type, and Y is written
 * once instead of written, read and written again by k_bias_forward; with
 * a mask, RELU_AUX_BIAS also writes the ReLU bit-mask for the backward's
 * DRELU.  Column-major, as cuda_gemm: Y^T[out, rows] = W X^T with W the
 * stored [in, out] matrix transposed.  A bf16/fp16 Y takes the bias in its
 * own type (the shadow of the fp32 master bias, as for the weights).
 * Where cuBLASLt has no algorithm (lt_plan), the unfused GEMM and
 * k_bias_forward, and the mask is not written: lt_mask_written tells the
 * backward which of the two ran. */
static void cuda_linear_bias_forward(Backend *be, Act Y, Act X, Act W, const float *bias, int rows, int in, int out,
                                     int relu, void *mask)
{
    CudaImpl *I = IMPL(be);
    if (rows <= 0 || out <= 0) return;
    GemmOps g = gemm_ops(be, X, (long)rows * in, W, (long)out * in, Y, (long)rows * out, 0.0f);
    Act b = lt_bias(be, bias, out, g.c.dtype);
    mask = relu && I->relu_mask ? mask : NULL;
    cublasLtEpilogue_t epi = !relu ? CUBLASLT_EPILOGUE_BIAS : mask ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS
                                                                   : CUBLASLT_EPILOGUE_RELU_BIAS;
    LtEpilogue e = { epi, b, mask, mask_ld(out) };
    std::swap(g.a, g.b);   /* cuBLASLt's A is W, its B is X */
    const LtPlan *p = lt_plan(I, g, 1, out, rows, in, in, in, e);
    if (p->ok) {
        declare_gemm(I, "linear_bias_forward", "cublasLtMatmul", rows, out, in, 1, g, 0.0f,
                     (double)out * dtype_size(b.dtype), mask ? mask_traffic(rows, out) : 0);
        lt_run(be, p, g);
    }
    std::swap(g.a, g.b);
    if (mask) I->lt_mask_written[mask] = p->ok;
    if (p->ok) gemm_done(be, g);
    else linear_bias_unfused(be, g, Y, bias, rows, in, out, relu);
}

/* whether the last forward into mask wrote it (its fused matmul ran) */
static bool lt_mask_written(CudaImpl *I, const void *mask)
{
    auto it = I->lt_mask_written.find(mask);
    return it != I->lt_mask_written.end() && it->second;
}

/* dX = (dY W) where the forward's ReLU was on, dbias += column sums of dX.
 * With the forward's mask: one cuBLASLt matmul with the DRELU epilogue,
 * which zeroes dX from the bit-mask as it stores it, instead of a GEMM and
 * the masking in k_relu_colsum_partial's pass over X and dX.  DRELU_BGRAD
 * would also give the bias gradient, but it writes it (it does not add
 * into the gradient that micro-batches accumulate), in dX's type (bf16:
 * not the fp32 of the master gradient) and in an order of its own: the
 * deterministic fp32 column sums stay.  Without a mask (none kept, or the
 * forward fell back and did not write it) or without a DRELU algorithm: a
 * plain GEMM, then the masked column sums (cuda_bias_backward). */
static void cuda_linear_relu_backward(Backend *be, Act dX, float *dbias, Act dY, Act W, Act X, const void *mask,
                                      int rows, int in, int out)
{
    CudaImpl *I = IMPL(be);
    if (rows <= 0 || in <= 0) return;
    GemmOps g = gemm_ops(be, dY, (long)rows * out, W, (long)out * in, dX, (long)rows * in, 0.0f);
    const LtPlan *p = NULL;
    if (mask && lt_mask_written(I, mask)) {
        LtEpilogue e = { CUBLASLT_EPILOGUE_DRELU, act_none(), (void *)mask, mask_ld(in) };
        std::swap(g.a, g.b);   /* column-major dX^T[in, rows] = W^T dY^T: A is W as stored, B is dY */
        p = lt_plan(I, g, 0, in, rows, out, in, out, e);
        if (p->ok) {
            declare_gemm(I, "linear_relu_backward", "cublasLtMatmul", rows, in, out, 1, g, 0.0f,
                         mask_traffic(rows, in));
            lt_run(be, p, g);
        }
        std::swap(g.a, g.b);
    }
    if (p && p->ok) {
        gemm_done(be, g);
        colsums(be, dX, act_none(), NULL, NULL, rows, in, NULL, dbias);
        return;
    }
    gemm_call(I, "linear_relu_backward", g, 0, 0, rows, in, out, 1.0f, out, in, 0.0f, in);
    gemm_done(be, g);
    cuda_bias_backward(be, dX, dbias, X, rows, in, 1);
}
