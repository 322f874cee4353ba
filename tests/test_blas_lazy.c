/* cuBLAS and cuBLASLt are opened on first use (cuda/blas_lazy.c): this
 * program, linked as bin/transformer is, has neither mapped when it starts;
 * the libraries of the CUDA headers' version open, every function the
 * backend calls is in them, and then they are mapped.  Needs no GPU
 * (dlopen and dlsym only); skipped in a build without CUDA. */
#include <stdio.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "../cuda/blas_lazy.h"

/* whether a library whose path contains name is mapped in this process */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    if (f) fclose(f);
    return found;
}

int main(void)
{
    if (mapped("libcublas")) {
        printf("FAIL cuBLAS is mapped before the backend asked for it (linked, not opened on first use)\n");
        return 1;
    }
    printf("ok   no cuBLAS library mapped at start-up\n");
    if (cuda_blas_check(stdout)) return 1;
    if (!mapped("libcublasLt") || !mapped("libcublas.")) {
        printf("FAIL cuBLAS and cuBLASLt opened but not mapped\n");
        return 1;
    }
    printf("ok   both mapped after the first use\n");
    return 0;
}
#else
int main(void)
{
    printf("skipped: built without CUDA (no nvcc): cuBLAS is not used\n");
    return 77;
}
#endif
