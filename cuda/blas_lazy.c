/* cuBLAS and cuBLASLt loaded when the CUDA backend first calls them, not
 * when bin/transformer starts.  Linked, libcublasLt (540 MB) alone cost every
 * process about 25,000 page faults, 0.15 CPU seconds and 210 MB of memory
 * at start-up (measured on the 2-core VM: `params` 0.15 -> 0.01 CPU s),
 * paid by CPU runs, data preparation and every command that never touches
 * a GPU.  Each function the backend calls is defined here under its cuBLAS
 * name with the CUDA headers' prototype (a mismatch does not compile) and
 * forwards to the library's own, found with dlsym on first use.  The
 * libraries are the headers' major version, found as -lcublas would find
 * them (LD_LIBRARY_PATH, then the binary's rpath to CUDA's lib64).  The
 * emulator (cuda/emu/) defines the same names itself and does not link
 * this file. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "blas_lazy.h"
#include "util.h"

#define STR_(x) #x
#define STR(x) STR_(x)
/* libcublas needs libcublasLt (its DT_NEEDED): opening it loads both */
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)
#define CUBLASLT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void *blas_lib, *blaslt_lib;
static char blas_error[512];

static void blas_open(void)
{
    blas_lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (blas_lib) blaslt_lib = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!blas_lib || !blaslt_lib) {
        const char *e = dlerror();
        snprintf(blas_error, sizeof blas_error, "%s", e ? e : "not found");
    }
}

const char *cuda_blas_load(void)
{
    pthread_once(&blas_once, blas_open);
    return blas_lib && blaslt_lib ? NULL : blas_error;
}

/* the address of NAME in its library; a library or symbol that is missing
 * ends the process with one line, as the dynamic loader would have at start */
static void *blas_symbol(const char *name, int lt)
{
    const char *err = cuda_blas_load();
    if (err) die(1, "cuda: cannot load cuBLAS (%s, %s): %s", CUBLAS_SONAME, CUBLASLT_SONAME, err);
    void *f = dlsym(lt ? blaslt_lib : blas_lib, name);
    if (!f) die(1, "cuda: %s has no %s", lt ? CUBLASLT_SONAME : CUBLAS_SONAME, name);
    return f;
}

/* FORWARD(LT, RET, NAME, PARAMS, ARGS): RET NAME PARAMS calling the
 * library's NAME; the address is looked up once (relaxed atomics: every
 * thread that looks it up finds the same one) */
#define FORWARD(lt, ret, name, params, args)                                    \
    ret CUBLASWINAPI name params                                                \
    {                                                                           \
        static ret (*fn) params;                                                \
        ret (*f) params = __atomic_load_n(&fn, __ATOMIC_RELAXED);               \
        if (!f) {                                                               \
            f = (ret (*) params)blas_symbol(#name, lt);                         \
            __atomic_store_n(&fn, f, __ATOMIC_RELAXED);                         \
        }                                                                       \
        return f args;                                                          \
    }
#define BLAS_FUNCTIONS(X)                                                                                  \
    X(0, cublasStatus_t, cublasCreate_v2, (cublasHandle_t *h), (h))                                        \
    X(0, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t h), (h))                                        \
    X(0, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))                   \
    X(0, cublasStatus_t, cublasSetMathMode, (cublasHandle_t h, cublasMath_t m), (h, m))                    \
    X(0, const char *, cublasGetStatusString, (cublasStatus_t s), (s))                                     \
    X(0, cublasStatus_t, cublasGemmEx,                                                                     \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,                 \
       const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,         \
       int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,            \
       cublasGemmAlgo_t algo),                                                                            \
      (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo))                 \
    X(0, cublasStatus_t, cublasGemmBatchedEx,                                                              \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,                 \
       const void *alpha, const void *const A[], cudaDataType at, int lda, const void *const B[],         \
       cudaDataType bt, int ldb, const void *beta, void *const C[], cudaDataType ct, int ldc, int count,  \
       cublasComputeType_t comp, cublasGemmAlgo_t algo),                                                  \
      (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, count, comp, algo))          \
    X(0, cublasStatus_t, cublasGemmStridedBatchedEx,                                                       \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,                 \
       const void *alpha, const void *A, cudaDataType at, int lda, long long int sa, const void *B,       \
       cudaDataType bt, int ldb, long long int sb, const void *beta, void *C, cudaDataType ct, int ldc,    \
       long long int sc, int count, cublasComputeType_t comp, cublasGemmAlgo_t algo),                    \
      (h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, count, comp,      \
       algo))                                                                                             \
    X(1, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t *h), (h))                                       \
    X(1, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h))                                       \
    X(1, cublasStatus_t, cublasLtMatmul,                                                                   \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,                      \
       cublasLtMatrixLayout_t ad, const void *B, cublasLtMatrixLayout_t bd, const void *beta,             \
       const void *C, cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,                      \
       const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s),                      \
      (h, d, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, ws_bytes, s))                             \
    X(1, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                                   \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t ad,                             \
       cublasLtMatrixLayout_t bd, cublasLtMatrixLayout_t cd, cublasLtMatrixLayout_t dd,                   \
       cublasLtMatmulPreference_t p, int want, cublasLtMatmulHeuristicResult_t results[], int *got),      \
      (h, d, ad, bd, cd, dd, p, want, results, got))                                                      \
    X(1, cublasStatus_t, cublasLtMatmulDescCreate,                                                         \
      (cublasLtMatmulDesc_t *d, cublasComputeType_t comp, cudaDataType_t scale), (d, comp, scale))        \
    X(1, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))                         \
    X(1, cublasStatus_t, cublasLtMatmulDescSetAttribute,                                                   \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n),              \
      (d, a, buf, n))                                                                                     \
    X(1, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t *p), (p))             \
    X(1, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))             \
    X(1, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                             \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n),  \
      (p, a, buf, n))                                                                                     \
    X(1, cublasStatus_t, cublasLtMatrixLayoutCreate,                                                       \
      (cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),          \
      (l, type, rows, cols, ld))                                                                          \
    X(1, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))

BLAS_FUNCTIONS(FORWARD)

/* every name above, in its library: tests/test_blas_lazy.sh resolves them
 * on a machine without a GPU (dlsym needs none) */
#define NAME_ENTRY(lt, ret, name, params, args) { #name, lt },
static const struct { const char *name; int lt; } BLAS_NAMES[] = { BLAS_FUNCTIONS(NAME_ENTRY) };

int cuda_blas_check(FILE *out)
{
    const char *err = cuda_blas_load();
    if (err) {
        fprintf(out, "FAIL cannot load %s, %s: %s\n", CUBLAS_SONAME, CUBLASLT_SONAME, err);
        return 1;
    }
    int missing = 0, n = (int)(sizeof BLAS_NAMES / sizeof BLAS_NAMES[0]);
    for (int i = 0; i < n; i++)
        if (!dlsym(BLAS_NAMES[i].lt ? blaslt_lib : blas_lib, BLAS_NAMES[i].name)) {
            fprintf(out, "FAIL %s has no %s\n", BLAS_NAMES[i].lt ? CUBLASLT_SONAME : CUBLAS_SONAME, BLAS_NAMES[i].name);
            missing++;
        }
    if (!missing) fprintf(out, "ok   %d functions found in %s and %s\n", n, CUBLAS_SONAME, CUBLASLT_SONAME);
    return missing ? 1 : 0;
}
