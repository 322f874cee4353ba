/* Data parallelism over MPI: one rank per device.  Gradients are summed over
 * ranks in contiguous buckets whose nonblocking allreduces start during
 * backward, as soon as the bucket's last gradient is final (model.h orders
 * the buffer that way). */
#ifndef DIST_H
#define DIST_H

#include <mpi.h>
#include <stddef.h>

#include "model.h"

typedef struct {
    int rank, size;
    int local_rank, local_size;   /* within the node (MPI_Comm_split_type shared) */
    MPI_Comm comm;
} Dist;

void dist_init(Dist *d, int *argc, char ***argv);
void dist_finalize(Dist *d);
/* abort every rank when any of them dies with an error */
void dist_install_abort(Dist *d);
/* all ranks must hold the same bytes (config text, parameters): returns 0,
 * or 1 on every rank (message in msg) if they differ */
int dist_check_same(Dist *d, const void *data, size_t n, const char *what, char *msg, int cap);

typedef struct {
    Dist *dist;
    float *grads;           /* host-addressable gradient buffer */
    int n_buckets;
    size_t *lo, *hi;        /* bucket k = grads[lo[k], hi[k]) */
    MPI_Request *req;
    int next;               /* first bucket not yet started */
    Backend *be;            /* set by gradsync_use_backend: its allreduce hooks do the work */
    double t_wait;          /* seconds spent waiting after backward */
    double bytes;
} GradSync;

void gradsync_init(GradSync *g, Dist *d, const ParamTable *pt, float *grads, size_t bucket_bytes);
void gradsync_free(GradSync *g);
/* let the backend's allreduce hooks (ops.h) sum the buckets, e.g. NCCL on
 * device memory; no-op for a backend without them */
void gradsync_use_backend(GradSync *g, Backend *be);
/* GradReadyFn: start the allreduce of every bucket inside [0, hi) */
void gradsync_ready(void *g, size_t hi);
/* wait for every bucket (starting any not yet started) */
void gradsync_finish(GradSync *g);

#endif
