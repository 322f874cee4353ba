#include "dist.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static Dist *g_abort_dist;   /* the one communicator die() aborts */

static void abort_hook(int code)
{
    if (g_abort_dist && g_abort_dist->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

static void fatal_signal(int sig)
{
    /* async-signal-safe report, then take the whole job down */
    char buf[96];
    int rank = g_abort_dist ? g_abort_dist->rank : 0;
    int n = snprintf(buf, sizeof buf, "error: rank %d: killed by signal %d (%s)\n", rank, sig,
                     sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : "SIGABRT");
    if (n > 0) { ssize_t w = write(2, buf, (size_t)n); (void)w; }
    signal(sig, SIG_DFL);
    if (g_abort_dist && g_abort_dist->size > 1) MPI_Abort(MPI_COMM_WORLD, 128 + sig);
    raise(sig);
}

void dist_init(Dist *d, int *argc, char ***argv)
{
    memset(d, 0, sizeof *d);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(argc, argv);
    d->comm = MPI_COMM_WORLD;
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    MPI_Comm node;
    MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &d->local_rank);
    MPI_Comm_size(node, &d->local_size);
    MPI_Comm_free(&node);
    /* errors are reported by us, with the rank; never hang */
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_ARE_FATAL);
}

void dist_install_abort(Dist *d)
{
    g_abort_dist = d;
    util_abort_hook = abort_hook;
    signal(SIGSEGV, fatal_signal);
    signal(SIGBUS, fatal_signal);
    signal(SIGFPE, fatal_signal);
}

void dist_finalize(Dist *d)
{
    (void)d;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

int dist_check_same(Dist *d, const void *data, size_t n, const char *what, char *msg, int cap)
{
    unsigned long long h = fnv1a64(data, n, 0), hmin = 0, hmax = 0;
    MPI_Allreduce(&h, &hmin, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, d->comm);
    MPI_Allreduce(&h, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, d->comm);
    if (hmin == hmax) return 0;
    /* find the first rank that differs from rank 0 */
    unsigned long long h0 = h;
    MPI_Bcast(&h0, 1, MPI_UNSIGNED_LONG_LONG, 0, d->comm);
    int bad = h != h0 ? d->rank : d->size, first = 0;
    MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, d->comm);
    snprintf(msg, cap, "ranks disagree on %s: rank %d differs from rank 0", what, first);
    return 1;
}

void gradsync_init(GradSync *g, Dist *d, const ParamTable *pt, float *grads, size_t bucket_bytes)
{
    memset(g, 0, sizeof *g);
    g->dist = d;
    g->grads = grads;
    size_t bucket = bucket_bytes / sizeof(float);
    if (bucket == 0) bucket = 1;
    g->lo = xmalloc(sizeof(size_t) * (pt->n + 1));
    g->hi = xmalloc(sizeof(size_t) * (pt->n + 1));
    /* tensors are laid out in the order backward finalises them, so a
     * bucket is a contiguous run of whole tensors */
    size_t lo = 0;
    for (int i = 0; i < pt->n; i++) {
        size_t end = pt->t[i].offset + pt->t[i].numel;
        if (end - lo >= bucket || i == pt->n - 1) {
            g->lo[g->n_buckets] = lo;
            g->hi[g->n_buckets] = end;
            g->n_buckets++;
            lo = end;
        }
    }
    g->req = xmalloc(sizeof(MPI_Request) * g->n_buckets);
    for (int k = 0; k < g->n_buckets; k++) g->req[k] = MPI_REQUEST_NULL;
}

void gradsync_free(GradSync *g)
{
    free(g->lo);
    free(g->hi);
    free(g->req);
    memset(g, 0, sizeof *g);
}

void gradsync_use_backend(GradSync *g, Backend *be)
{
    if (!be->allreduce_start || g->dist->size == 1) return;
    be->allreduce_init(be, &g->dist->comm);
    g->be = be;
}

void gradsync_ready(void *ctx, size_t hi)
{
    GradSync *g = ctx;
    if (g->dist->size == 1) return;
    while (g->next < g->n_buckets && g->hi[g->next] <= hi) {
        int k = g->next++;
        g->bytes += (double)(g->hi[k] - g->lo[k]) * sizeof(float);
        if (g->be) {
            g->be->allreduce_start(g->be, g->grads + g->lo[k], g->hi[k] - g->lo[k]);
            continue;
        }
        MPI_Iallreduce(MPI_IN_PLACE, g->grads + g->lo[k], (int)(g->hi[k] - g->lo[k]), MPI_FLOAT, MPI_SUM,
                       g->dist->comm, &g->req[k]);
    }
    if (g->be) return;
    /* give MPI a chance to progress the buckets in flight */
    int flag;
    if (g->next > 0) MPI_Testall(g->next, g->req, &flag, MPI_STATUSES_IGNORE);
}

void gradsync_finish(GradSync *g)
{
    if (g->dist->size == 1) return;
    gradsync_ready(g, (size_t)-1);
    double t0 = now_seconds();
    if (g->be) g->be->allreduce_wait(g->be);
    else MPI_Waitall(g->n_buckets, g->req, MPI_STATUSES_IGNORE);
    g->t_wait += now_seconds() - t0;
    g->next = 0;
}
