#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* srun started several tasks, but each sees an MPI job of one rank: srun's
 * --mpi plugin does not match the MPI library (e.g. --mpi=none, or pmi2 with
 * an MPI that speaks only PMIx), so every task would train alone, all into
 * the same run directory.  Stop before anything is written.  mpirun inside
 * an allocation sets its own size variables and is left alone. */
static void refuse_singletons(const Dist *d)
{
    const char *n = getenv("SLURM_STEP_NUM_TASKS");
    if (d->size != 1 || !n || atoi(n) <= 1 || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) return;
    const char *procid = getenv("SLURM_PROCID");
    if (!procid || !strcmp(procid, "0"))
        fprintf(stderr, "error: srun started %s tasks, but MPI sees each as a job of 1 rank: srun's --mpi "
                        "does not match this MPI library (SRUN_MPI in jobs/cluster.env; try pmix)\n", n);
    MPI_Finalize();
    exit(2);
}

/* Open MPI puts its session directory under TMPDIR: where that is not a
 * directory, MPI_Init fails in some fifty lines of its own */
static void check_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    struct stat sb;
    if (!t || !*t) return;
    if (stat(t, &sb)) die(2, "TMPDIR=%s: %s (MPI keeps its session files there)", t, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) die(2, "TMPDIR=%s: not a directory (MPI keeps its session files there)", t);
}

void dist_init(Dist *d, int *argc, char ***argv)
{
    memset(d, 0, sizeof *d);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) check_tmpdir();
    int provided = MPI_THREAD_SINGLE;
    if (!inited) MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    else MPI_Query_thread(&provided);
    d->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    d->comm = MPI_COMM_WORLD;
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    /* device binding uses the rank within the node, not the global rank */
    MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &d->node);
    MPI_Comm_rank(d->node, &d->local_rank);
    MPI_Comm_size(d->node, &d->local_size);
    /* errors are reported by us, with the rank; never hang */
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_ARE_FATAL);
    refuse_singletons(d);
}

static int signal_from_name(const char *s)
{
    static const struct { const char *name; int sig; } T[] = {
        { "SEGV", SIGSEGV }, { "KILL", SIGKILL }, { "TERM", SIGTERM }, { "ABRT", SIGABRT },
        { "BUS", SIGBUS }, { "FPE", SIGFPE }, { "INT", SIGINT }, { "STOP", SIGSTOP },
    };
    if (!strncmp(s, "SIG", 3)) s += 3;
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(s, T[i].name)) return T[i].sig;
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v < 65 ? (int)v : -1;
}

void dist_install_abort(Dist *d)
{
    g_abort_dist = d;
    util_abort_hook = abort_hook;
    signal(SIGSEGV, fatal_signal);
    signal(SIGBUS, fatal_signal);
    signal(SIGFPE, fatal_signal);
    /* a test that must signal a run mid-way (Slurm's time-limit signal comes
     * up to 30 s late) makes every step last at least this long */
    const char *sl = getenv("TRANSFORMER_STEP_SLEEP_MS");
    d->step_sleep_ms = sl ? atoi(sl) : 0;
    const char *f = getenv("TRANSFORMER_FAIL_AT");
    if (f && *f) {
        char how[32] = "";
        int n = sscanf(f, "%d:%d:%31s", &d->fail_rank, &d->fail_step, how);
        d->fail_sig = n == 3 ? signal_from_name(how) : 0;
        if (n < 2 || d->fail_step < 1 || d->fail_sig < 0)
            die(2, "TRANSFORMER_FAIL_AT=%s: expected RANK:STEP[:SIGNAL], e.g. 1:5 or 1:5:SEGV", f);
    }
}

void dist_fault_point(Dist *d, int step)
{
    if (d->step_sleep_ms > 0) usleep((useconds_t)d->step_sleep_ms * 1000);
    if (d->fail_step != step || d->fail_rank != d->rank) return;
    if (d->fail_sig) {
        fprintf(stderr, "rank %d: raising signal %d at step %d (TRANSFORMER_FAIL_AT)\n", d->rank, d->fail_sig, step);
        fflush(stderr);
        raise(d->fail_sig);
    }
    die(1, "rank %d: injected failure at step %d (TRANSFORMER_FAIL_AT)", d->rank, step);
}

void dist_finalize(Dist *d)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (d->node != MPI_COMM_NULL && d->node != 0) MPI_Comm_free(&d->node);
    MPI_Finalize();
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

/* copy line `p` (up to '\n') into out */
static void line_copy(char *out, int cap, const char *p)
{
    int n = 0;
    while (p[n] && p[n] != '\n' && n < cap - 1) { out[n] = p[n]; n++; }
    out[n] = '\0';
}

int dist_check_config(Dist *d, const char *text, char *msg, int cap)
{
    if (!dist_check_same(d, text, strlen(text), "the configuration", msg, cap)) return 0;
    /* rare path: tell the user which key differs */
    int len = (int)strlen(text) + 1;
    MPI_Bcast(&len, 1, MPI_INT, 0, d->comm);
    char *t0 = xmalloc((size_t)len);
    if (d->rank == 0) memcpy(t0, text, (size_t)len);
    MPI_Bcast(t0, len, MPI_CHAR, 0, d->comm);
    char local[512] = "";
    int bad = d->size;
    if (strcmp(t0, text)) {
        const char *a = t0, *b = text;
        for (;;) {   /* first differing line */
            const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
            size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
            if (la != lb || memcmp(a, b, la) || !ea || !eb) break;
            a = ea + 1;
            b = eb + 1;
        }
        char la[200], lb[200];
        line_copy(la, sizeof la, a);
        line_copy(lb, sizeof lb, b);
        snprintf(local, sizeof local, "ranks disagree on the configuration: rank %d has '%s', rank 0 has '%s'",
                 d->rank, lb, la);
        bad = d->rank;
    }
    free(t0);
    int first = d->size;
    MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, d->comm);
    if (first < d->size) {
        MPI_Bcast(local, sizeof local, MPI_CHAR, first, d->comm);
        snprintf(msg, cap, "%s", local);
    }
    return 1;
}

/* "0-3,8" style list of the CPUs in s */
static void cpu_list(const cpu_set_t *s, char *out, int cap)
{
    int n = 0;
    out[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && n < cap - 16; c++) {
        if (!CPU_ISSET(c, s)) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, s)) e++;
        n += snprintf(out + n, cap - n, n ? ",%d" : "%d", c);
        if (e > c) n += snprintf(out + n, cap - n, "-%d", e);
        c = e;
    }
}

/* Open MPI 4 binds each rank to one core when a job has at most 2 ranks and
 * the user asked for no binding: `mpirun -n 1` trains on one core of a
 * 64-core node, and two such jobs share core 0.  That default is told apart
 * from a binding the user chose by its environment: the launcher bound the
 * rank (OMPI_MCA_orte_bound_at_launch=1) with no policy passed down (any
 * --bind-to, or the MCA variable, sets OMPI_MCA_hwloc_base_binding_policy).
 * Then the CPUs the job was given are the launcher's own (mpirun or orted,
 * the rank's parent: a cgroup or taskset still applies), which the node's
 * ranks split as if they were unbound.  Returns 1 and sets *allowed to them. */
static int undo_default_binding(cpu_set_t *allowed)
{
    const char *bound = getenv("OMPI_MCA_orte_bound_at_launch");
    if (!bound || strcmp(bound, "1") || getenv("OMPI_MCA_hwloc_base_binding_policy")) return 0;
    cpu_set_t launcher;
    CPU_ZERO(&launcher);
    if (sched_getaffinity(getppid(), sizeof launcher, &launcher)) return 0;
    if (CPU_COUNT(&launcher) <= CPU_COUNT(allowed)) return 0;
    *allowed = launcher;
    return 1;
}

static const char OVERSUBSCRIBED[] = "oversubscribed, not pinned";

/* this rank's CPUs from the set it may run on: the whole set where the
 * launcher already gave each local rank its own (mpirun --bind-to, srun
 * --cpu-bind: the sets differ between ranks), else the rank's contiguous
 * slice of the shared set, else (more ranks than CPUs) the whole set,
 * unpinned, one thread unless asked (OVERSUBSCRIBED).  Returns how, for
 * the log line. */
static const char *rank_cpus(Dist *d, const cpu_set_t *allowed, int unbound, cpu_set_t *mine, int *threads)
{
    int n_allowed = CPU_COUNT(allowed);
    unsigned long long h = fnv1a64(allowed, sizeof *allowed, 0), hmin, hmax;
    MPI_Allreduce(&h, &hmin, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, d->node);
    MPI_Allreduce(&h, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, d->node);
    int shared = hmin == hmax && d->local_size > 1;
    if (shared && n_allowed >= d->local_size) {
        /* split the shared set: local rank r takes the r-th contiguous slice */
        int per = n_allowed / d->local_size, k = 0;
        CPU_ZERO(mine);
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, allowed)) {
                if (k / per == d->local_rank) CPU_SET(c, mine);
                k++;
            }
        if (sched_setaffinity(0, sizeof *mine, mine)) *mine = *allowed;
        return "own slice";
    }
    *mine = *allowed;
    if (unbound) sched_setaffinity(0, sizeof *mine, mine);
    if (!shared) return d->local_size > 1 ? "bound by launcher" : "all allowed";
    /* oversubscribed: more ranks than CPUs, leave scheduling to the OS */
    if (*threads <= 0) *threads = 1;
    return OVERSUBSCRIBED;
}

/* One thread per CPU when the threads fill the rank's set exactly; fewer
 * threads stay free to move within it (pinning them all to the first
 * CPUs would pile jobs that share a node onto the same cores), and
 * OMP_PLACES/OMP_PROC_BIND mean the user places threads.  1 if pinned. */
static int pin_threads(const cpu_set_t *mine, int threads)
{
    if (getenv("OMP_PLACES") || getenv("OMP_PROC_BIND") || threads != CPU_COUNT(mine)) return 0;
    int cpus[CPU_SETSIZE], k = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, mine)) cpus[k++] = c;
    int fails = 0;
#pragma omp parallel num_threads(threads) reduction(+ : fails)
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[omp_get_thread_num()], &one);
        fails += pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0;
    }
    return fails == 0;
}

int dist_bind_cpu(Dist *d, int threads, char *desc, int cap)
{
    cpu_set_t allowed, mine;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed)) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(desc, cap, "affinity unknown");
        int t = (int)(n / d->local_size);
        return threads > 0 ? threads : t > 0 ? t : 1;
    }
    int unbound = undo_default_binding(&allowed);
    const char *how = rank_cpus(d, &allowed, unbound, &mine, &threads);
    int n_mine = CPU_COUNT(&mine);
    if (threads <= 0) threads = n_mine > 0 ? n_mine : 1;
    int pinned = how != OVERSUBSCRIBED && pin_threads(&mine, threads);
    char list[128];
    cpu_list(&mine, list, sizeof list);
    snprintf(desc, cap, "cpus %s (%s)%s%s", list, how, pinned ? ", threads pinned" : "",
             unbound ? "; mpirun's default one-core binding undone" : "");
    return threads;
}

int dist_dump_params(Dist *d, const float *host, size_t n, const char *path)
{
    char msg[256];
    /* replicas must not drift apart: the same update on every rank */
    if (dist_check_same(d, host, n * sizeof(float), "the trained parameters", msg, sizeof msg)) {
        if (d->rank == 0) fprintf(stderr, "error: %s\n", msg);
        return 1;
    }
    int rc = 0;
    if (d->rank == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(host, sizeof(float), n, f) != n || fflush(f) || fsync(fileno(f))) {
            fprintf(stderr, "error: %s: cannot write: %s\n", path, strerror(errno));
            if (f) fclose(f);
            unlink(tmp);
            rc = 1;
        } else if (fclose(f) || rename(tmp, path)) {
            fprintf(stderr, "error: %s: cannot write: %s\n", path, strerror(errno));
            unlink(tmp);
            rc = 1;
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, d->comm);
    return rc;
}

/* whether the sums in flight move only when polled: MPI's, also through
 * the backend (CUDA's MPI fallback); NCCL's progress on their own stream */
static int sums_polled(const GradSync *g) { return !g->be || g->be->allreduce_progress; }

/* one poll of the sums in flight (Open MPI has no progress thread:
 * nonblocking collectives advance inside MPI calls): through the backend
 * (CUDA's MPI fallback), else this rank's MPI requests; 1 once every sum
 * started is done */
static int poll_sums(GradSync *g)
{
    if (g->be) return g->be->allreduce_progress(g->be);
    int flag = 1;
    if (g->next > 0) MPI_Testall(g->next, g->req, &flag, g->status);
    return flag;
}

static void *progress_main(void *ctx)
{
    GradSync *g = ctx;
    struct timespec ts = { g->poll_us / 1000000, 1000L * (g->poll_us % 1000000) };
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        if (!g->active) { pthread_cond_wait(&g->cv, &g->mu); continue; }
        int flag = poll_sums(g);
        if (flag && g->next == g->n_buckets) g->active = 0;   /* all done: sleep until the next update */
        pthread_mutex_unlock(&g->mu);
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

void gradsync_init(GradSync *g, Dist *d, const ParamTable *pt, float *grads, size_t bucket_bytes)
{
    memset(g, 0, sizeof *g);
    g->dist = d;
    g->grads = grads;
    g->total = pt->total;
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
    g->status = xmalloc(sizeof(MPI_Status) * g->n_buckets);
    for (int k = 0; k < g->n_buckets; k++) g->req[k] = MPI_REQUEST_NULL;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

void gradsync_start_progress(GradSync *g, int poll_us)
{
    /* the backend's own collectives (NCCL) progress by themselves; those
     * of CUDA's MPI fallback are polled through allreduce_progress */
    if (g->have_thread || !sums_polled(g) || g->dist->size == 1 || poll_us <= 0 || !g->dist->thread_multiple) return;
    g->poll_us = poll_us;
    g->have_thread = pthread_create(&g->thread, NULL, progress_main, g) == 0;
}

void gradsync_free(GradSync *g)
{
    if (g->have_thread) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->lo);
    free(g->hi);
    free(g->req);
    free(g->status);
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
    pthread_mutex_lock(&g->mu);
    while (g->next < g->n_buckets && g->hi[g->next] <= hi) {
        int k = g->next++;
        g->bytes += (double)(g->hi[k] - g->lo[k]) * sizeof(float);
        g->n_started++;
        g->n_early += hi < g->total;   /* backward still has gradients to finish */
        if (g->be) {
            g->be->allreduce_start(g->be, g->grads + g->lo[k], g->hi[k] - g->lo[k]);
            continue;
        }
        MPI_Iallreduce(MPI_IN_PLACE, g->grads + g->lo[k], (int)(g->hi[k] - g->lo[k]), MPI_FLOAT, MPI_SUM,
                       g->dist->comm, &g->req[k]);
    }
    /* give the buckets in flight a chance to progress, unless the backend's
     * collectives progress on their own stream (NCCL) */
    int polled = sums_polled(g);
    if (polled && g->have_thread) {
        g->active = g->next > 0;
        pthread_cond_signal(&g->cv);
    } else if (polled) {
        poll_sums(g);
    }
    pthread_mutex_unlock(&g->mu);
}

/* MPI_Waitall with a watchdog: a peer that died or hangs would block this
 * rank until the job's time limit; polling costs at most the 20 us sleep */
static void wait_buckets(GradSync *g, double t0)
{
    struct timespec ts = { 0, 20000 };
    for (long polls = 0;; polls++) {
        int flag = 0;
        MPI_Testall(g->n_buckets, g->req, &flag, g->status);
        if (flag) return;
        if (polls % 1024 == 0) watchdog_check(t0, g->timeout_s, g->dist->rank, "the gradient allreduce");
        nanosleep(&ts, NULL);
    }
}

void gradsync_finish(GradSync *g)
{
    if (g->dist->size == 1) return;
    gradsync_ready(g, (size_t)-1);
    pthread_mutex_lock(&g->mu);
    g->active = 0;   /* the progress thread leaves req alone until the next update */
    pthread_mutex_unlock(&g->mu);
    double t0 = now_seconds();
    if (g->be) g->be->allreduce_wait(g->be);
    else wait_buckets(g, t0);
    g->t_wait += now_seconds() - t0;   /* reduced over ranks once, at the end (report) */
    g->next = 0;
    g->n_syncs++;
}

double gradsync_measure(GradSync *g, int iters, double *algbw, double *busbw)
{
    Dist *d = g->dist;
    size_t n = g->total;
    float *buf = xcalloc(n, sizeof(float));
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, d->comm);   /* warm-up */
    MPI_Barrier(d->comm);
    double t0 = now_seconds();
    for (int i = 0; i < iters; i++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, d->comm);
    double t = (now_seconds() - t0) / (iters > 0 ? iters : 1), tmax = t;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, d->comm);
    free(buf);
    double bytes = (double)n * sizeof(float), P = d->size;
    *algbw = tmax > 0 ? bytes / tmax : 0;
    *busbw = *algbw * 2.0 * (P - 1) / P;
    return tmax;
}

/* ------------------------------------------------- errors of alike stages */

int dist_hold_stderr(Dist *d)
{
    if (d->rank == 0) return -1;
    FILE *tmp = tmpfile();
    if (!tmp) return -1;   /* then this rank prints as before */
    int saved = stderr_divert(fileno(tmp));
    fclose(tmp);   /* fd 2 keeps the (unlinked) file open */
    return saved;
}

int dist_release_stderr(Dist *d, int held, int rc)
{
    int rc0 = d->rank == 0 ? rc : 0, worst = rc;
    MPI_Bcast(&rc0, 1, MPI_INT, 0, d->comm);
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, d->comm);
    if (held < 0) return worst;
    fflush(stderr);
    if (rc && !rc0 && lseek(2, 0, SEEK_SET) == 0) {   /* this rank's own failure: show it */
        char buf[4096];
        ssize_t n;
        while ((n = read(2, buf, sizeof buf)) > 0)
            if (write(held, buf, (size_t)n) < 0) break;
    }
    stderr_restore(held);
    return worst;
}
