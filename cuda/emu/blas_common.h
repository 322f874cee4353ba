/* Helpers shared by the emulated BLAS libraries (cublas_emu.cc,
 * cublaslt_emu.cc): element types, widening and rounding, matrix extents,
 * the device-memory check and the byte counting of the cost model. */
#pragma once

#include "emu.h"

#include <algorithm>
#include <cblas.h>
#include <vector>

/* the Create and Destroy of an emulated library's handle */
template <class T> cublasStatus_t handle_create(T **h, const T &init)
{
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new T(init);
    return CUBLAS_STATUS_SUCCESS;
}

template <class T> cublasStatus_t handle_destroy(T *h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

static inline int imax1(int a) { return a > 1 ? a : 1; }

static inline float round_bits(float x, int drop)
{
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {   /* finite: round to nearest even */
        uint32_t half = (1u << (drop - 1)) - 1 + ((u >> drop) & 1u);
        u = (u + half) & ~((1u << drop) - 1);
    }
    std::memcpy(&x, &u, 4);
    return x;
}

/* elements of a column-major matrix with `rows` x `cols` and leading dimension ld */
static inline size_t extent(int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0) return 0;
    return (size_t)(cols - 1) * ld + rows;
}

static inline bool is16(cudaDataType t) { return t == CUDA_R_16BF || t == CUDA_R_16F; }
static inline size_t elem_size(cudaDataType t) { return is16(t) ? 2 : sizeof(float); }

/* n elements of type t at p, widened to float */
static inline void widen(std::vector<float> &out, const void *p, cudaDataType t, size_t n)
{
    out.resize(n);
    if (t == CUDA_R_16BF)
        for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    else if (t == CUDA_R_16F)
        for (size_t i = 0; i < n; i++) out[i] = __half2float(((const __half *)p)[i]);
    else
        std::memcpy(out.data(), p, n * sizeof(float));
}

/* v rounded to nearest even into element i of an array of type t (an fp16
 * value past 65504 becomes inf, as on the GPU) */
static inline void store_as(void *p, cudaDataType t, size_t i, float v)
{
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == CUDA_R_16F) ((__half *)p)[i] = __float2half_rn(v);
    else ((float *)p)[i] = v;
}

/* v rounded to nearest even to type t's precision, kept as a float */
static inline float round_as(cudaDataType t, float v)
{
    if (t == CUDA_R_16BF) return __bfloat162float(__float2bfloat16_rn(v));
    if (t == CUDA_R_16F) return __half2float(__float2half_rn(v));
    return v;
}

/* the mantissa bits the tensor cores drop from fp32 inputs: FAST_16BF
 * rounds them to bf16, FAST_TF32 (or plain 32F on a handle in TF32 math
 * mode) to TF32; 0 for IEEE fp32 */
static inline int input_drop_bits(cublasComputeType_t ct, bool tf32_math)
{
    if (ct == CUBLAS_COMPUTE_32F_FAST_16BF) return 16;
    return ct == CUBLAS_COMPUTE_32F_FAST_TF32 || (ct == CUBLAS_COMPUTE_32F && tf32_math) ? 13 : 0;
}

/* c (fp32, column-major, ldc) = al op(A) op(B) + be c, with A and B widened
 * from their storage types (extents eA, eB) and rounded by drop bits as the
 * tensor cores take them; ra, rb: the caller's scratch.  From k = 16 on the
 * sum over k runs in two halves, the second added onto the first, as a
 * split-K algorithm does: cuBLAS sums in an order of its own, and an H200
 * (make gpu-accept, 2026-11-26) gave fp32 losses 2 units of the 7th digit
 * off the CPU's OpenBLAS.  Summing in the CPU's order here would let a
 * check that assumes the CPU's rounding pass here and fail on a GPU. */
static inline void sgemm_widened(bool nA, bool nB, int m, int n, int k, float al, const void *a, cudaDataType At,
                                 int lda, size_t eA, const void *b, cudaDataType Bt, int ldb, size_t eB, int drop,
                                 float be, float *c, int ldc, std::vector<float> &ra, std::vector<float> &rb)
{
    widen(ra, a, At, eA);
    widen(rb, b, Bt, eB);
    if (drop) {
        for (float &x : ra) x = round_bits(x, drop);
        for (float &x : rb) x = round_bits(x, drop);
    }
    CBLAS_TRANSPOSE opA = nA ? CblasNoTrans : CblasTrans, opB = nB ? CblasNoTrans : CblasTrans;
    int k1 = k >= 16 ? k / 2 : k;
    cblas_sgemm(CblasColMajor, opA, opB, m, n, k1, al, ra.data(), lda, rb.data(), ldb, be, c, ldc);
    if (k1 == k) return;
    /* op(A)'s columns k1.. and op(B)'s rows k1..: A's columns (nA) or rows, B's rows (nB) or columns */
    const float *a2 = ra.data() + (nA ? (size_t)k1 * lda : (size_t)k1);
    const float *b2 = rb.data() + (nB ? (size_t)k1 : (size_t)k1 * ldb);
    cblas_sgemm(CblasColMajor, opA, opB, m, n, k - k1, al, a2, lda, b2, ldb, 1.0f, c, ldc);
}

/* the type combinations of the cublasGemmEx table this emulator implements */
static inline bool types_supported(cudaDataType At, cudaDataType Bt, cudaDataType Ct, cublasComputeType_t ct)
{
    bool all32 = At == CUDA_R_32F && Bt == CUDA_R_32F && Ct == CUDA_R_32F;
    switch (ct) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        return all32 || (At == CUDA_R_16BF && Bt == CUDA_R_16BF && (Ct == CUDA_R_16BF || Ct == CUDA_R_32F))
            || (At == CUDA_R_16F && Bt == CUDA_R_16F && (Ct == CUDA_R_16F || Ct == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        return all32;
    default:
        return false;
    }
}

/* The bytes of one GEMM call for the cost model (cuda_emu_count_bytes):
 * each matrix is `cols` runs of `rows` elements, ld apart; distinct bytes
 * are the union of the runs (batched matrices may share memory) */
struct Runs {
    std::vector<std::pair<uintptr_t, uintptr_t>> v;
    double all = 0;
    void add(const void *p, int rows, int cols, int ld, size_t z)
    {
        for (int j = 0; j < cols; j++) {
            uintptr_t a = (uintptr_t)p + (size_t)j * ld * z;
            v.push_back({ a, a + (size_t)rows * z });
        }
        all += (double)rows * cols * z;
    }
    double distinct()
    {
        std::sort(v.begin(), v.end());
        double n = 0;
        uintptr_t end = 0;
        for (auto &r : v) {
            uintptr_t a = std::max(r.first, end);
            if (r.second > a) n += (double)(r.second - a);
            end = std::max(end, r.second);
        }
        return n;
    }
};

static inline void check_mem(const void *p, size_t bytes, const char *fn, const char *what)
{
    if (bytes && !cuda_emu::is_device_range(p, bytes))
        cuda_emu::fail("%s: matrix %s at %p (+%zu bytes) is not inside one device allocation", fn, what, p, bytes);
}
