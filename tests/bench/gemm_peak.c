/* Measured single-precision GEMM peak of this machine through the same
 * OpenBLAS the trainer uses: best GFLOP/s of square sgemm over sizes, for a
 * given thread count.  usage: gemm_peak THREADS
 * Three rounds over the sizes, ~1 s each: on a shared VM one round has read
 * 10% low, which inflates every "% of peak" computed from it. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    int sizes[] = { 512, 1024, 2048 };
    double best = 0;
    for (int round = 0; round < 3; round++)
    for (int s = 0; s < 3; s++) {
        int n = sizes[s];
        float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
        for (long i = 0; i < (long)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; c[i] = 0; }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        int reps = 0;
        double t0 = now(), t;
        do {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
            reps++;
            t = now() - t0;
        } while (t < 1.0);
        double gf = 2.0 * n * n * (double)n * reps / t / 1e9;
        if (gf > best) best = gf;
        free(a); free(b); free(c);
    }
    printf("gemm_peak threads %d gflops %.1f\n", threads, best);
    return 0;
}
