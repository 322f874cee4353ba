/* Prints the OpenBLAS kernel ("core") this process runs, after checking
 * that an sgemm with it gives the right result on this CPU: a kernel forced
 * through OPENBLAS_CORETYPE that the CPU cannot run (SkylakeX without
 * AVX-512) dies here or exits 1 instead of being reported.  tests/check.sh
 * uses it to rerun the training tests under a second kernel. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>

char *openblas_get_corename(void);

int main(void)
{
    enum { N = 67 };   /* odd size: the kernels' edge paths run too */
    static float a[N * N], b[N * N], c[N * N];
    for (int i = 0; i < N * N; i++) {
        a[i] = (float)((i * 7) % 13) - 6.0f;
        b[i] = (float)((i * 5) % 11) - 5.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;   /* small integers: every sum is exact in float */
            for (int k = 0; k < N; k++) s += (double)a[i * N + k] * b[k * N + j];
            if (fabs(s - c[i * N + j]) > 0) {
                fprintf(stderr, "blas_core: %s: wrong sgemm result\n", openblas_get_corename());
                return 1;
            }
        }
    printf("%s\n", openblas_get_corename());
    return 0;
}
