/* cuBLAS and cuBLASLt, loaded when the CUDA backend first calls them
 * (cuda/blas_lazy.c), not when the program starts. */
#ifndef BLAS_LAZY_H
#define BLAS_LAZY_H
#include <stdio.h>

/* loads both libraries once; NULL when loaded, else the loader's reason */
const char *cuda_blas_load(void);
/* loads them and looks up every function the backend calls, one line per
 * missing one on out ("ok ..." when none is); 0 when all are there */
int cuda_blas_check(FILE *out);

#endif
