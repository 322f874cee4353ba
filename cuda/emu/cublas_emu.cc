/* cuBLAS for the CUDA emulator: the calls the backend uses, compiled against
 * the real cublas_v2.h (a wrong signature is a compile error), computed with
 * OpenBLAS, with the argument checks the cuBLAS documentation lists for
 * cublasGemmEx / cublasGemmStridedBatchedEx / cublasGemmBatchedEx
 * (CUBLAS_STATUS_INVALID_VALUE for
 * negative sizes, leading dimensions below the minimum, bad operations,
 * NULL scalars; NOT_INITIALIZED for a null handle; NOT_SUPPORTED for type
 * combinations cuBLAS does not support or the emulator does not implement).
 * Every matrix must lie inside one cudaMalloc'd allocation, as it must on a
 * GPU, and so must the pointer arrays of cublasGemmBatchedEx.
 *
 * Types (the cublasGemmEx table of the cuBLAS documentation, real types
 * with float scalars):
 *   CUBLAS_COMPUTE_32F / _32F_PEDANTIC: A, B, C all CUDA_R_32F, or A, B
 *     CUDA_R_16BF with C CUDA_R_16BF or CUDA_R_32F, or A, B CUDA_R_16F with
 *     C CUDA_R_16F or CUDA_R_32F (also 8I inputs in cuBLAS; not
 *     implemented here);
 *   CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_TF32 / _FAST_16F: only all
 *     CUDA_R_32F (fp32 storage, reduced-precision inputs inside).
 * Mixed input types (A fp32 with B bf16, ...) are rejected as cuBLAS does.
 * Arithmetic: CUBLAS_COMPUTE_32F is plain sgemm; _FAST_TF32 and _FAST_16BF
 * round the inputs to TF32 / bf16 (round to nearest even) first, as the
 * tensor cores do; bf16 and fp16 operands are widened exactly to fp32, and
 * a bf16 or fp16 C is read widened and written rounded to nearest even (an
 * fp16 C past 65504 becomes inf, as on the GPU); accumulation is fp32
 * throughout, so a 16-bit C requires the handle's math mode to hold
 * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (else cuBLAS may reduce
 * in 16 bits: reported as a misuse). */
#include "blas_common.h"

#include <algorithm>
#include <cblas.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    return handle_create(h, cublasContext{ nullptr, CUBLAS_DEFAULT_MATH });
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { return handle_destroy(h); }

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* one mode, optionally with the flag ORed in (cublas_api.h) */
    int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    default: return "CUBLAS_STATUS_(emulated error)";
    }
}

static int math_base(cublasHandle_t h) { return h->math & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION; }
static bool valid_op(cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; }

/* what cuBLAS checks before it launches anything: the handle, shapes and
 * leading dimensions, the type combination and the device's support of
 * it; and what a real GPU may do that the emulator does not (16-bit
 * split-K partials), which fails the run here */
static cublasStatus_t gemm_check_args(const char *fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                      int m, int n, int k, const void *alpha, cudaDataType At, int lda,
                                      cudaDataType Bt, int ldb, const void *beta, cudaDataType Ct, int ldc, int batch,
                                      cublasComputeType_t ct)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || !valid_op(ta) || !valid_op(tb) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool nA = ta == CUBLAS_OP_N, nB = tb == CUBLAS_OP_N;
    if (lda < imax1(nA ? m : k) || ldb < imax1(nB ? k : n) || ldc < imax1(m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!types_supported(At, Bt, Ct, ct)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (cuda_emu::cc_refuses_types(At, Bt, Ct)) return CUBLAS_STATUS_ARCH_MISMATCH;
    /* the emulator accumulates in fp32 throughout; cuBLAS may reduce (split-K
     * partials) in a bf16 C's type unless the handle forbids it */
    if (is16(Ct) && !(h->math & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
        cuda_emu::fail("%s: 16-bit C without CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION in the handle's math mode: "
                       "cuBLAS may accumulate partial sums in 16 bits", fn);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t gemm_common(const char *fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const void *alpha, const void *A, cudaDataType At, int lda,
                                  long long sA, const void *B, cudaDataType Bt, int ldb, long long sB,
                                  const void *beta, void *C, cudaDataType Ct, int ldc, long long sC, int batch,
                                  cublasComputeType_t ct, const void *const *Ap = NULL, const void *const *Bp = NULL,
                                  void *const *Cp = NULL)
{
    cublasStatus_t bad = gemm_check_args(fn, h, ta, tb, m, n, k, alpha, At, lda, Bt, ldb, beta, Ct, ldc, batch, ct);
    if (bad != CUBLAS_STATUS_SUCCESS) return bad;
    bool nA = ta == CUBLAS_OP_N, nB = tb == CUBLAS_OP_N;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    if (cuda_emu::dry_run) {   /* no arithmetic, and the pointer arrays were never written */
        cuda_emu::dry_submit();
        cuda_emu::report(fn, 0, 0, 0, 0);
        return CUBLAS_STATUS_SUCCESS;
    }
    /* the scalars are read now (host pointer mode), the matrices when the
     * handle's stream gets to the call */
    float al = *(const float *)alpha, be = *(const float *)beta;
    int mb = math_base(h);
    cuda_emu::enqueue(h->stream, fn, [=] {
        Runs reads, writes;
        size_t eA = extent(nA ? m : k, nA ? k : m, lda), eB = extent(nB ? k : n, nB ? n : k, ldb), eC = extent(m, n, ldc);
        int drop = input_drop_bits(ct, mb == CUBLAS_TF32_TENSOR_OP_MATH);
        size_t zA = elem_size(At), zB = elem_size(Bt), zC = elem_size(Ct);
        std::vector<float> ra, rb, rc;
        for (int i = 0; i < batch; i++) {
            /* matrix i: from the pointer arrays (cublasGemmBatchedEx) or strided */
            const char *a = Ap ? (const char *)Ap[i] : (const char *)A + i * sA * zA;
            const char *b = Bp ? (const char *)Bp[i] : (const char *)B + i * sB * zB;
            char *c = Cp ? (char *)Cp[i] : (char *)C + i * sC * zC;
            if (k > 0) {
                check_mem(a, eA * zA, fn, "A");
                check_mem(b, eB * zB, fn, "B");
            }
            check_mem(c, eC * zC, fn, "C");
            if (cuda_emu::tracking) {
                if (k > 0) {
                    cuda_emu::access(a, eA * zA, false);
                    cuda_emu::access(b, eB * zB, false);
                }
                cuda_emu::access(c, eC * zC, true);
            }
            if (cuda_emu::counting) {
                if (k > 0) {
                    reads.add(a, nA ? m : k, nA ? k : m, lda, zA);
                    reads.add(b, nB ? k : n, nB ? n : k, ldb, zB);
                }
                if (be != 0.0f) reads.add(c, m, n, ldc, zC);
                writes.add(c, m, n, ldc, zC);
            }
            /* C in fp32: in place, or a widened copy of a 16-bit C */
            float *cf = (float *)c;
            if (is16(Ct)) {
                widen(rc, c, Ct, eC);
                cf = rc.data();
            }
            if (k == 0) {   /* C = beta*C (cuBLAS does not read A, B) */
                for (int j = 0; j < n; j++)
                    for (int r = 0; r < m; r++) cf[(size_t)j * ldc + r] = be == 0.0f ? 0.0f : be * cf[(size_t)j * ldc + r];
            } else {
                sgemm_widened(nA, nB, m, n, k, al, a, At, lda, eA, b, Bt, ldb, eB, drop, be, cf, ldc, ra, rb);
            }
            /* only the m x n entries: the gaps of ldc stay untouched */
            for (int j = 0; j < n && is16(Ct); j++)
                for (int r = 0; r < m; r++) store_as(c, Ct, (size_t)j * ldc + r, cf[(size_t)j * ldc + r]);
        }
        if (cuda_emu::counting) cuda_emu::report(fn, reads.distinct(), writes.distinct(), reads.all, writes.all);
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType At, int lda, const void *B, cudaDataType Bt,
                            int ldb, const void *beta, void *C, cudaDataType Ct, int ldc, cublasComputeType_t ct,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm_common("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, At, lda, 0, B, Bt, ldb, 0, beta, C, Ct, ldc, 0, 1,
                       ct);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType At, int lda,
                                          long long sA, const void *B, cudaDataType Bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType Ct, int ldc, long long sC,
                                          int batch, cublasComputeType_t ct, cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm_common("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, At, lda, sA, B, Bt, ldb, sB, beta,
                       C, Ct, ldc, sC, batch, ct);
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *const Aarray[], cudaDataType At, int lda,
                                   const void *const Barray[], cudaDataType Bt, int ldb, const void *beta,
                                   void *const Carray[], cudaDataType Ct, int ldc, int batch, cublasComputeType_t ct,
                                   cublasGemmAlgo_t algo)
{
    (void)algo;
    /* the arrays of pointers are read by the GPU: they must be device memory */
    if (h && batch > 0 && m > 0 && n > 0) {
        if (k > 0) {
            check_mem(Aarray, sizeof(void *) * batch, "cublasGemmBatchedEx", "pointer array Aarray");
            check_mem(Barray, sizeof(void *) * batch, "cublasGemmBatchedEx", "pointer array Barray");
        }
        check_mem(Carray, sizeof(void *) * batch, "cublasGemmBatchedEx", "pointer array Carray");
    }
    return gemm_common("cublasGemmBatchedEx", h, ta, tb, m, n, k, alpha, NULL, At, lda, 0, NULL, Bt, ldb, 0, beta,
                       NULL, Ct, ldc, 0, batch, ct, Aarray, Barray, Carray);
}
