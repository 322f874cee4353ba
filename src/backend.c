/* Backend selection by the config key `device`. */
#include <stdio.h>
#include <string.h>

#include "ops.h"

#ifdef HAVE_CUDA
Backend *backend_cuda_create(const char *precision, const char *allreduce, int local_rank);
#endif

Backend *backend_create(const char *device, const char *precision, const char *allreduce, int threads,
                        int local_rank)
{
    if (!strcmp(device, "cpu")) {
        (void)precision;
        (void)allreduce;   /* the CPU backend sums with MPI in dist.c */
        (void)local_rank;
        return backend_cpu_create(threads);
    }
    if (!strcmp(device, "cuda")) {
#ifdef HAVE_CUDA
        return backend_cuda_create(precision, allreduce, local_rank);
#else
        fprintf(stderr, "error: device=cuda: this build has no CUDA backend (nvcc was not found by make)\n");
        return NULL;
#endif
    }
    fprintf(stderr, "error: unknown device '%s'\n", device);
    return NULL;
}
