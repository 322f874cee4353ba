/* Backend selection by the config key `device`. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "ops.h"

Backend *backend_create(const Config *c, int threads, int local_rank)
{
    if (c->device == DEVICE_CPU) {
        (void)local_rank;   /* the CPU backend sums with MPI in dist.c; config_validate kept it fp32 */
        return backend_cpu_create(threads);
    }
#ifdef HAVE_CUDA
    Backend *be = backend_cuda_create(c->precision, c->allreduce, local_rank);
    if (be) be->graph_shapes = c->cuda_graphs ? c->cuda_graph_cache : 0;   /* ops.h graph_begin */
    return be;
#else
    fprintf(stderr, "error: device=cuda: this build has no CUDA backend (nvcc was not found by make)\n");
    return NULL;
#endif
}

int backend_gpus_visible(void)
{
#ifdef HAVE_CUDA
    return backend_cuda_device_count();
#else
    return 0;
#endif
}
