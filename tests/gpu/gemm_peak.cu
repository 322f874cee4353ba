/* Measured dense GEMM peak of this GPU (make gpu-bench): cublasGemmEx on
 * n x n x n with bf16 inputs and fp32 accumulation (the tensor-core rate the
 * bf16 backend uses), and fp32/TF32 for reference, on constant data (every
 * element the same small value, gpu-bench's MFU peak since 122cb66) and on
 * random data (uniform in [-1, 1)).  Constant operands run faster: the
 * tensor cores' power draw, and so the clock they hold, depends on how
 * many bits toggle (issue 32: 827.7 against 798 TFLOP/s at 8192^3 bf16 on
 * an H100), so random data is the peak a training step can reach.
 *   gemm_peak [n] [--constant | --random]        (default: both)
 * Prints lines
 *   gemm <kind> n <n> TFLOP/s <rate>             constant data
 *   gemm <kind> n <n> TFLOP/s <rate> random      random data
 * Built with nvcc (bin/gpu/gemm_peak) and against the emulator
 * (bin/tests/gemm_peak: the plumbing only, at a small n). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { if ((x) != 0) { fprintf(stderr, "error: gemm_peak: %s failed\n", #x); exit(1); } } while (0)

/* n values uniform in [-1, 1) as fp32 or bf16 (round to nearest even) */
static void *random_host(size_t n, size_t isz, uint64_t seed)
{
    void *h = malloc(n * isz);
    if (!h) { fprintf(stderr, "error: gemm_peak: out of host memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        float v = (float)((double)(seed >> 40) / (double)(1ULL << 23) - 1.0);
        uint32_t b;
        memcpy(&b, &v, 4);
        if (isz == 4) ((float *)h)[i] = v;
        else ((uint16_t *)h)[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
    }
    return h;
}

/* an n x n operand: constant (small nonzero values) or random */
static void *operand(int n, size_t isz, int random, uint64_t seed)
{
    void *d;
    size_t count = (size_t)n * n;
    CK(cudaMalloc(&d, count * isz));
    if (!random) {
        CK(cudaMemset(d, 0x3c, count * isz));
        return d;
    }
    void *h = random_host(count, isz, seed);
    CK(cudaMemcpy(d, h, count * isz, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static double run(cublasHandle_t h, int n, cudaDataType in, cudaDataType out, cublasComputeType_t ct, int iters,
                  int random)
{
    size_t isz = in == CUDA_R_16BF ? 2 : 4, osz = out == CUDA_R_16BF ? 2 : 4;
    void *A = operand(n, isz, random, 1), *B = operand(n, isz, random, 2), *C;
    CK(cudaMalloc(&C, (size_t)n * n * osz));
    float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++)
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, in, n, B, in, n, &zero, C, out, n, ct, CUBLAS_GEMM_DEFAULT));
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < iters; i++)
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, in, n, B, in, n, &zero, C, out, n, ct, CUBLAS_GEMM_DEFAULT));
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(A); cudaFree(B); cudaFree(C);
    return 2.0 * n * (double)n * n * iters / (ms * 1e-3) / 1e12;
}

static void peaks(cublasHandle_t h, int n, int random)
{
    const char *tag = random ? " random" : "";
    printf("gemm bf16 n %d TFLOP/s %.1f%s\n", n, run(h, n, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 50, random), tag);
    printf("gemm tf32 n %d TFLOP/s %.1f%s\n", n, run(h, n, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 20, random), tag);
    printf("gemm fp32 n %d TFLOP/s %.1f%s\n", n, run(h, n, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 5, random), tag);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int n = 8192, constant = 1, random = 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--constant")) random = 0;
        else if (!strcmp(argv[i], "--random")) constant = 0;
        else if ((n = atoi(argv[i])) < 1) { fprintf(stderr, "error: gemm_peak: '%s': expected n, --constant or --random\n", argv[i]); return 2; }
    cublasHandle_t h;
    CK(cublasCreate(&h));
    /* the backend's math mode (cuda/device.cuh): split-K partial sums never
     * in 16 bits (the emulator refuses a bf16 C without it) */
    CK(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    if (constant) peaks(h, n, 0);
    if (random) peaks(h, n, 1);
    cublasDestroy(h);
    return 0;
}
