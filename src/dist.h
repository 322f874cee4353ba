/* Data parallelism over MPI: one rank per device.  Gradients are summed over
 * ranks in contiguous buckets whose nonblocking allreduces start during
 * backward, as soon as the bucket's last gradient is final (model.h orders
 * the buffer that way). */
#ifndef DIST_H
#define DIST_H

#include <mpi.h>
#include <pthread.h>
#include <stddef.h>

#include "model.h"

typedef struct {
    int rank, size;
    int local_rank, local_size;   /* within the node (MPI_Comm_split_type shared) */
    MPI_Comm comm;
    MPI_Comm node;                /* ranks sharing this node's memory */
    int thread_multiple;          /* MPI_THREAD_MULTIPLE granted */
    int fail_rank, fail_step, fail_sig;   /* TRANSFORMER_FAIL_AT (tests); fail_step 0 = off */
    int step_sleep_ms;                    /* TRANSFORMER_STEP_SLEEP_MS (tests): slows steps, same results */
} Dist;

void dist_init(Dist *d, int *argc, char ***argv);
void dist_finalize(Dist *d);
/* abort every rank when any of them dies with an error or a fatal signal;
 * also reads the fault-injection variable TRANSFORMER_FAIL_AT */
void dist_install_abort(Dist *d);
/* all ranks must hold the same bytes (config text, parameters): returns 0,
 * or 1 on every rank (message in msg) if they differ */
int dist_check_same(Dist *d, const void *data, size_t n, const char *what, char *msg, int cap);
/* like dist_check_same for "key = value" lines; the message names the first
 * rank that differs from rank 0 and its first differing line */
int dist_check_config(Dist *d, const char *text, char *msg, int cap);
/* A stage every rank runs alike (reading the command line, opening the
 * checkpoint and dataset), whose errors rank 0 alone should report: from
 * dist_hold_stderr, ranks > 0 write stderr to a temporary file; at
 * dist_release_stderr(rc) the ranks agree on the worst rc.  If rank 0
 * failed, the held messages are dropped (rank 0 printed the same line);
 * if it did not, a rank that failed prints what it held.  Returns the
 * maximum rc over the ranks. */
int dist_hold_stderr(Dist *d);
int dist_release_stderr(Dist *d, int held, int rc);
/* fault injection for tests: TRANSFORMER_FAIL_AT="RANK:STEP[:SIGNAL]" makes
 * rank RANK fail at the start of step STEP, with an error (die) or by raising
 * SIGNAL (e.g. SEGV, KILL) */
void dist_fault_point(Dist *d, int step);
/* pin this rank's OpenMP threads to its share of the node's cores and return
 * the thread count (threads > 0 forces the count).  desc receives a short
 * description such as "cpus 2-3". */
int dist_bind_cpu(Dist *d, int threads, char *desc, int cap);
/* rank 0 writes n floats to path atomically (temp, fsync, rename) after
 * checking that every rank holds the same values; returns 0 or 1 (message
 * printed by rank 0) */
int dist_dump_params(Dist *d, const float *host, size_t n, const char *path);

typedef struct {
    Dist *dist;
    float *grads;           /* host-addressable gradient buffer */
    size_t total;           /* floats */
    int n_buckets;
    size_t *lo, *hi;        /* bucket k = grads[lo[k], hi[k]) */
    MPI_Request *req;
    /* statuses, unread: MPICH's MPI_STATUSES_IGNORE ((MPI_Status *)1) makes
     * GCC warn of an out-of-bounds access (-Wstringop-overflow) */
    MPI_Status *status;
    int timeout_s;          /* allreduce_timeout: the watchdog of gradsync_finish (0: none) */
    int next;               /* first bucket not yet started */
    Backend *be;            /* set by gradsync_use_backend: its allreduce hooks do the work */
    /* statistics */
    double t_wait;          /* seconds this rank waited after backward; the least
                             * of any rank is communication that backward did not
                             * hide (the rest is imbalance) */
    double bytes;           /* bytes allreduced */
    long n_syncs;           /* completed gradsync_finish calls that communicated */
    long n_started;         /* bucket allreduces started */
    long n_early;           /* of those, started while backward was still running */
    /* Open MPI advances nonblocking collectives only inside MPI calls; a
     * thread polls the buckets in flight every poll_us so that they move
     * while backward computes (mu guards req and next, and the backend's
     * allreduce state between allreduce_start and allreduce_wait) */
    int poll_us, have_thread, active, stop;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} GradSync;

void gradsync_init(GradSync *g, Dist *d, const ParamTable *pt, float *grads, size_t bucket_bytes);
/* start the progress thread polling every poll_us (> 0; needs
 * MPI_THREAD_MULTIPLE and more than one rank, else nothing happens).  After
 * gradsync_use_backend: a backend whose sums progress by themselves (NCCL)
 * gets no thread, one with allreduce_progress is polled through it. */
void gradsync_start_progress(GradSync *g, int poll_us);
void gradsync_free(GradSync *g);
/* let the backend's allreduce hooks (ops.h) sum the buckets, e.g. NCCL on
 * device memory; no-op for a backend without them */
void gradsync_use_backend(GradSync *g, Backend *be);
/* GradReadyFn: start the allreduce of every bucket inside [0, hi) */
void gradsync_ready(void *g, size_t hi);
/* wait for every bucket (starting any not yet started) */
void gradsync_finish(GradSync *g);
/* nccl-tests convention: time `iters` blocking allreduces of the whole
 * gradient buffer (contents saved and restored); algbw = bytes / time,
 * busbw = algbw * 2(P-1)/P.  Collective; returns seconds per allreduce. */
double gradsync_measure(GradSync *g, int iters, double *algbw, double *busbw);

#endif
