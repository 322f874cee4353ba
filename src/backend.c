/* Backend selection by the config key `device`. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "ops.h"

#ifdef HAVE_CUDA
Backend *backend_cuda_create(const char *precision, const char *allreduce, int local_rank);
#endif

Backend *backend_create(const Config *c, int threads, int local_rank)
{
    if (c->device == DEVICE_CPU) {
        (void)local_rank;   /* the CPU backend sums with MPI in dist.c; config_validate kept it fp32 */
        return backend_cpu_create(threads);
    }
#ifdef HAVE_CUDA
    /* the CUDA backend's own interface names them (cuda/device.cuh) */
    return backend_cuda_create(config_choice("precision", c->precision), config_choice("allreduce", c->allreduce),
                               local_rank);
#else
    fprintf(stderr, "error: device=cuda: this build has no CUDA backend (nvcc was not found by make)\n");
    return NULL;
#endif
}
