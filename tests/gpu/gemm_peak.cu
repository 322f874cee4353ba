/* Measured dense GEMM peak of this GPU (make gpu-bench): cublasGemmEx on
 * n x n x n with bf16 inputs and fp32 accumulation (the tensor-core rate the
 * bf16 backend uses), and fp32/TF32 for reference.  Prints lines
 *   gemm <kind> n <n> TFLOP/s <rate>                                     */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { if ((x) != 0) { fprintf(stderr, "error: gemm_peak: %s failed\n", #x); exit(1); } } while (0)

static double run(cublasHandle_t h, int n, cudaDataType in, cudaDataType out, cublasComputeType_t ct, int iters)
{
    size_t isz = in == CUDA_R_16BF ? 2 : 4, osz = out == CUDA_R_16BF ? 2 : 4;
    void *A, *B, *C;
    CK(cudaMalloc(&A, (size_t)n * n * isz));
    CK(cudaMalloc(&B, (size_t)n * n * isz));
    CK(cudaMalloc(&C, (size_t)n * n * osz));
    CK(cudaMemset(A, 0x3c, (size_t)n * n * isz));   /* small nonzero values */
    CK(cudaMemset(B, 0x3c, (size_t)n * n * isz));
    float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++)
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, in, n, B, in, n, &zero, C, out, n, ct, CUBLAS_GEMM_DEFAULT));
    cudaEventRecord(e0);
    for (int i = 0; i < iters; i++)
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, in, n, B, in, n, &zero, C, out, n, ct, CUBLAS_GEMM_DEFAULT));
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaFree(A); cudaFree(B); cudaFree(C);
    return 2.0 * n * (double)n * n * iters / (ms * 1e-3) / 1e12;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8192;
    cublasHandle_t h;
    CK(cublasCreate(&h));
    printf("gemm bf16 n %d TFLOP/s %.1f\n", n, run(h, n, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 50));
    printf("gemm tf32 n %d TFLOP/s %.1f\n", n, run(h, n, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 20));
    printf("gemm fp32 n %d TFLOP/s %.1f\n", n, run(h, n, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 5));
    cublasDestroy(h);
    return 0;
}
