/* Resume, checkpoint schedule and preemption of a training run (resume.h). */
#include "resume.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "run_files.h"
#include "util.h"

/* ------------------------------------------------------------ preemption */

static volatile sig_atomic_t g_preempt;

static void on_preempt(int sig)
{
    (void)sig;
    g_preempt = 1;
}

void preempt_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_preempt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int preempt_pending(void) { return g_preempt != 0; }

/* ---------------------------------------------------------------- resume */

static int mkdir_p(const char *path)
{
    char buf[CFG_STR];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    struct stat sb;
    if (stat(buf, &sb)) return -1;
    if (!S_ISDIR(sb.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

static uint64_t plan_hash(const BatchPlan *bp)
{
    uint64_t h = fnv1a64(bp->start, sizeof(int) * (bp->n_batches + 1), 0);
    return fnv1a64(bp->idx, sizeof(int) * bp->start[bp->n_batches], h);
}

static void fill_state(CkptState *st, const TrainRun *r, double elapsed)
{
    memset(st, 0, sizeof *st);
    st->step = r->step;
    st->elapsed = elapsed;
    st->seed = r->cfg.seed;
    st->ranks = r->dist.size;
    st->update_freq = r->cfg.update_freq;
    st->data_position = batchplan_position(r->step + 1, 0, 0, r->dist.size, r->cfg.update_freq);
    st->plan_hash = plan_hash(&r->plan);
    st->n_batches = r->plan.n_batches;
    st->vocab_hash = r->vocab_hash;
    st->best_step = r->best.best_step;
    st->best_nll = r->best.best_nll;
    st->bad_evals = r->best.bad_evals;
    st->log_loss = r->log.loss;
    st->log_tokens = r->log.tokens;
    if (r->scaler.enabled) {
        st->loss_scale = r->scaler.scale;
        st->loss_scale_good = r->scaler.good_steps;
        st->loss_scale_skipped = r->scaler.skipped;
    }
}

/* the loss scaler continues where the checkpoint's run left it (rank 0
 * read it): the same S and good-step count make the resumed run bitwise
 * equal to an uninterrupted one.  A checkpoint without them (older, or of
 * a run without scaling) leaves the scaler at loss_scale_init. */
static void restore_loss_scale(TrainRun *r, const CkptState *st)
{
    double v[3] = { st->loss_scale, (double)st->loss_scale_good, (double)st->loss_scale_skipped };
    MPI_Bcast(v, 3, MPI_DOUBLE, 0, r->dist.comm);
    if (!r->scaler.enabled || v[0] <= 0) return;
    r->scaler.scale = v[0];
    r->scaler.good_steps = (long)v[1];
    r->scaler.skipped = (long)v[2];
}

/* the best dev evaluation and the patience count where the checkpoint's
 * run left them (rank 0 read them): the resumed run stops at the step an
 * uninterrupted one stops at.  An older checkpoint leaves none (step 0). */
static void restore_dev_best(TrainRun *r, const CkptState *st)
{
    double v[3] = { (double)st->best_step, st->best_nll, (double)st->bad_evals };
    MPI_Bcast(v, 3, MPI_DOUBLE, 0, r->dist.comm);
    r->best.best_step = (int)v[0];
    r->best.best_nll = v[1];
    r->best.bad_evals = (int)v[2];
}

/* the log interval's sums where the checkpoint's run left them (rank 0
 * read them): the first log line after a checkpoint between two log lines
 * covers the same steps as an uninterrupted run's.  An older checkpoint,
 * or one on a log line, leaves none. */
static void restore_log_interval(TrainRun *r, const CkptState *st)
{
    double v[2] = { st->log_loss, st->log_tokens };
    MPI_Bcast(v, 2, MPI_DOUBLE, 0, r->dist.comm);
    r->log.loss = v[0];
    r->log.tokens = v[1];
}

/* The checkpoint readers print their own error line.  While load_newest
 * tries a candidate, that line goes to a temporary file instead, so that a
 * damaged checkpoint it can skip becomes part of one warning (or of the one
 * error where none is intact) rather than an "error:" the run survives. */
typedef struct { FILE *f; int saved; } StderrCapture;

static void capture_begin(StderrCapture *c)
{
    c->f = tmpfile();
    c->saved = c->f ? stderr_divert(fileno(c->f)) : -1;   /* -1: stderr as it was */
    util_die_fd = c->saved;
}

/* the captured "error: " line into line (the first line where there is
 * none): HDF5 may print its own diagnostic stack above the reader's line */
static void capture_end(StderrCapture *c, char *line, int cap)
{
    util_die_fd = -1;
    stderr_restore(c->saved);
    line[0] = '\0';
    if (!c->f) return;
    rewind(c->f);
    char buf[1024];
    while (fgets(buf, sizeof buf, c->f)) {
        buf[strcspn(buf, "\n")] = '\0';
        if (!line[0] || !strncmp(buf, "error: ", 7)) snprintf(line, cap, "%s", buf);
        if (!strncmp(buf, "error: ", 7)) break;
    }
    fclose(c->f);
}

/* a reader's line "error: PATH: WHY" as WHY */
static const char *damage_reason(const char *line, const char *path)
{
    size_t n = strlen(path);
    if (!strncmp(line, "error: ", 7)) line += 7;
    if (!strncmp(line, path, n) && !strncmp(line + n, ": ", 2)) line += n + 2;
    return line;
}

/* read candidate path into host and st: 0, CKPT_DAMAGED (line holds the
 * reader's error), or exit 2 for a checkpoint that is intact but not this
 * run's to resume */
static int read_candidate(TrainRun *r, const char *path, float *host, CkptState *st, Config *ck, char *line, int cap)
{
    size_t N = r->model.pt.total;
    StderrCapture c;
    capture_begin(&c);   /* (die() reaches the user through util_die_fd) */
    int rc = checkpoint_read_config(path, ck, st);
    char msg[512];
    if (!rc && config_arch_mismatch(ck, &r->cfg, msg, sizeof msg))
        die(2, "%s: cannot resume: %s (checkpoint vs this run's config)", path, msg);
    if (!rc)
        rc = checkpoint_check_vocab(path, st, r->cfg.data) ? 2
           : checkpoint_read_tensors(path, &r->model.pt, host, host + N, host + 2 * N);
    capture_end(&c, line, cap);
    if (rc && rc != CKPT_DAMAGED) {   /* not damaged, but not ours to resume from: say so, lose nothing */
        fprintf(stderr, "%s\n", line);
        if (util_abort_hook) util_abort_hook(2);
        exit(2);
    }
    return rc;
}

/* rank 0: find the newest intact checkpoint and load it into host buffers;
 * returns 1 if found, 0 if the directory has none.  Damaged ones (truncated,
 * failed checksum: CKPT_DAMAGED) are skipped, and renamed to *.bad (.bad.1,
 * ... beside an earlier one, which is kept) once an
 * older one loads: left in place, the newest would count as the resume point
 * when the next checkpoint is pruned.  Anything else that stops a checkpoint
 * from loading (another architecture or vocabulary, another format version,
 * no permission) exits 2 rather than quietly resuming from an older one;
 * so does a directory none of whose checkpoints is intact. */
static int load_newest(TrainRun *r, float *host, CkptState *st, Config *ck, char *used, size_t cap)
{
    char **paths;
    int64_t *steps;
    int n = checkpoint_list(r->cfg.run_dir, &paths, &steps), found = -1;
    char (*why)[1024] = xcalloc(n ? n : 1, sizeof *why);
    for (int i = n - 1; i >= 0 && found < 0; i--)
        if (read_candidate(r, paths[i], host, st, ck, why[i], sizeof why[i]) == 0) {
            snprintf(used, cap, "%s", paths[i]);
            found = i;
        }
    if (n > 0 && found < 0)
        die(2, "%s: none of its %d checkpoints is intact (the newest, %s: %s): move them away to start afresh",
            r->cfg.run_dir, n, paths[n - 1], damage_reason(why[n - 1], paths[n - 1]));
    for (int i = found + 1; i < n; i++) {
        char bad[4300];
        if (file_move_aside(paths[i], bad, sizeof bad)) die(2, "%s: cannot move the unreadable checkpoint aside: %s", paths[i], strerror(errno));
        fprintf(stderr, "warning: %s: skipped (damaged: %s), moved to %s; resuming from %s\n", paths[i],
                damage_reason(why[i], paths[i]), bad, used);
    }
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    free(steps);
    free(why);
    return found >= 0;
}

/* the holder named in a lock file ("pid N on HOST"): 1 if it is another
 * host than this one */
static int held_elsewhere(int fd, char *who, size_t cap)
{
    ssize_t k = pread(fd, who, cap - 1, 0);
    who[k > 0 ? k : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
    char host[256] = "", mine[256] = "";
    gethostname(mine, sizeof mine - 1);
    return sscanf(who, "pid %*d on %255s", host) == 1 && strcmp(host, mine);
}

/* rank 0: one training run per run directory.  The lock goes with the
 * process (a kill -9 releases it); its file says who holds it.  A lock
 * held by another host is waited for up to lock_wait seconds: after a node
 * fails, an NFS server keeps its locks until their lease runs out, and the
 * requeued job would otherwise fail at once instead of resuming. */
static int lock_run_dir(const char *run_dir, int lock_wait)
{
    char path[CFG_STR + 16], who[64] = "";
    snprintf(path, sizeof path, "%s/" RUN_FILE_LOCK, run_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die(2, "%s: cannot create the run directory lock: %s", path, strerror(errno));
    double t0 = now_seconds();
    int said = 0;
    while (flock(fd, LOCK_EX | LOCK_NB)) {
        if (errno != EWOULDBLOCK) {
            /* a file system without flock (Lustre mounted noflock, some
             * FUSE ones): run unprotected rather than not at all */
            fprintf(stderr, "warning: %s: cannot lock the run directory (%s): another run on it would not be "
                    "detected\n", path, strerror(errno));
            return fd;
        }
        int elsewhere = held_elsewhere(fd, who, sizeof who);
        if (!elsewhere || now_seconds() - t0 >= lock_wait)
            die(2, "%s: another training run is using this run directory (%s)%s", run_dir,
                who[0] ? who : "lock held", elsewhere ? "; waited lock_wait seconds" : "");
        if (!said++) {
            fprintf(stderr, "warning: %s: the run directory is locked by %s; waiting up to %d s (lock_wait) for "
                    "the lock of a failed node to expire\n", run_dir, who, lock_wait);
            fflush(stderr);
        }
        sleep(1);
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    int len = snprintf(who, sizeof who, "pid %d on %.40s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)len, 0) != len) { /* informative only */ }
    return fd;
}

int rundir_saved_max_tokens(TrainRun *r, char *from, size_t cap)
{
    int v = 0;
    from[0] = '\0';
    if (r->dist.rank == 0 && r->cfg.run_dir[0]) {
        char **paths;
        int64_t *steps;
        int n = checkpoint_list(r->cfg.run_dir, &paths, &steps);
        /* quiet: rundir_open reports a damaged or foreign checkpoint */
        int saved = stderr_quiet();
        for (int i = n - 1; i >= 0 && v == 0; i--) {
            Config ck;
            if (checkpoint_read_config(paths[i], &ck, NULL) == 0) {
                v = ck.max_tokens;
                snprintf(from, cap, "%s", paths[i]);
            }
        }
        stderr_restore(saved);
        for (int i = 0; i < n; i++) free(paths[i]);
        free(paths);
        free(steps);
    }
    MPI_Bcast(&v, 1, MPI_INT, 0, r->dist.comm);
    return v;
}

/* the checkpoint's dataset (path old) is the one the run trains on now
 * (path cur): the same file, or, where old is relative to a working
 * directory the run no longer starts in, a dataset with the same vocabulary
 * fingerprint and the same batch plan (the composition of every batch), so
 * that a resume from another directory is not said to change the data */
static int same_dataset(const CkptState *st, const CkptState *now, const char *old, const char *cur)
{
    if (cli_same_file(old, cur)) return 1;
    return old[0] != '/' && st->vocab_hash && st->vocab_hash == now->vocab_hash && st->plan_hash == now->plan_hash;
}

/* rank 0, resuming from used (state st, config ck): one warning line naming
 * what makes the run differ from an uninterrupted one bitwise (seed, ranks,
 * update_freq, the batch plan), and one naming the other settings changed
 * (config_setting_changes: a changed schedule, optimiser or regularisation
 * mixes two runs in one), each said once; the same dataset under another
 * path is no change */
static void warn_resume_changes(const TrainRun *r, const CkptState *st, const Config *ck, const char *used, double el)
{
    CkptState now;
    fill_state(&now, r, el);
    char what[256] = "";
    int n = 0;
    if (st->seed != now.seed)
        n += snprintf(what + n, sizeof what - n, "seed %llu->%llu", (unsigned long long)st->seed,
                      (unsigned long long)now.seed);
    if (st->ranks != now.ranks) n += snprintf(what + n, sizeof what - n, "%sranks %d->%d", n ? ", " : "", st->ranks, now.ranks);
    if (st->update_freq != now.update_freq)
        n += snprintf(what + n, sizeof what - n, "%supdate_freq %d->%d", n ? ", " : "", st->update_freq, now.update_freq);
    if (st->plan_hash != now.plan_hash) snprintf(what + n, sizeof what - n, "%sthe batch plan", n ? ", " : "");
    if (what[0])
        fprintf(stderr, "warning: %s: changed from the checkpoint's: %s; training continues, not bitwise identical to "
                "an uninterrupted run\n", used, what);
    Config *old = xmalloc(sizeof *old);
    *old = *ck;
    old->seed = r->cfg.seed;   /* said above */
    old->update_freq = r->cfg.update_freq;
    if (same_dataset(st, &now, old->data, r->cfg.data)) memcpy(old->data, r->cfg.data, sizeof old->data);
    char changed[2048];
    if (config_setting_changes(old, &r->cfg, changed, sizeof changed))
        fprintf(stderr, "warning: %s: settings differ from the checkpoint's; the run continues with the new ones: %s\n",
                used, changed);
    free(old);
}

/* every rank takes the checkpoint rank 0 loaded (host: params | adam_m |
 * adam_v, rank 0's; others allocate it) and its state; says where the run
 * resumes, and warns where it will not continue bitwise */
static float *adopt_checkpoint(TrainRun *r, float *host, const CkptState *st, const Config *ck, const char *used)
{
    Dist *D = &r->dist;
    size_t N = r->model.pt.total;
    int64_t step = st->step;
    double el = st->elapsed;
    MPI_Bcast(&step, 1, MPI_INT64_T, 0, D->comm);
    MPI_Bcast(&el, 1, MPI_DOUBLE, 0, D->comm);
    if (!host) host = xmalloc(sizeof(float) * 3 * N);
    /* params | adam_m | adam_v, in pieces of 256 MiB: below the int
     * count limit, and within what MPI libraries and fabrics move well
     * in one message (4 GiB ones have failed on some) */
    const size_t piece = (size_t)64 << 20;   /* floats */
    for (size_t off = 0; off < 3 * N; off += piece) {
        size_t k = 3 * N - off < piece ? 3 * N - off : piece;
        MPI_Bcast(host + off, (int)k, MPI_FLOAT, 0, D->comm);
    }
    Model *m = &r->model;
    size_t bytes = sizeof(float) * N;
    r->be->upload(r->be, m->params, host, bytes);
    r->be->upload(r->be, m->adam_m, host + N, bytes);
    r->be->upload(r->be, m->adam_v, host + 2 * N, bytes);
    r->step = (int)step;
    r->elapsed = el;
    restore_loss_scale(r, st);
    restore_dev_best(r, st);
    restore_log_interval(r, st);
    if (D->rank == 0) {
        printf("resume: %s (step %lld, %.1fs trained)\n", used, (long long)step, el);
        warn_resume_changes(r, st, ck, used, el);
    }
    return host;
}

void rundir_open(RunDir *rd, TrainRun *r, int resume_flag)
{
    memset(rd, 0, sizeof *rd);
    rd->lock_fd = -1;
    Dist *D = &r->dist;
    const Config *c = &r->cfg;
    if (config_to_string(c, rd->cfg_text, sizeof rd->cfg_text) < 0) die(1, "config text too long");
    rd->enabled = c->run_dir[0] != '\0';
    if (!rd->enabled) {
        if (resume_flag) die(2, "train --resume: run_dir is empty (no checkpoints to resume from)");
        return;
    }
    int status = 0;   /* -1 error, 0 fresh, 1 resumed */
    float *host = NULL;
    CkptState st;
    memset(&st, 0, sizeof st);
    Config *ck = xcalloc(1, sizeof *ck);   /* rank 0: the checkpoint's config */
    char used[4200] = "";
    if (D->rank == 0) {
        struct stat sb;   /* --resume never creates the directory it resumes */
        if (resume_flag && stat(c->run_dir, &sb) && errno == ENOENT)
            die(2, "%s: --resume: no such run directory", c->run_dir);
        if (mkdir_p(c->run_dir)) die(2, "%s: cannot create run directory: %s", c->run_dir, strerror(errno));
        rd->lock_fd = lock_run_dir(c->run_dir, c->lock_wait);
        host = xmalloc(sizeof(float) * 3 * r->model.pt.total);
        status = load_newest(r, host, &st, ck, used, sizeof used);
        if (!status && resume_flag) die(2, "%s: --resume: no complete checkpoint in the run directory", c->run_dir);
    }
    MPI_Bcast(&status, 1, MPI_INT, 0, D->comm);
    if (status == 1) host = adopt_checkpoint(r, host, &st, ck, used);
    free(host);
    free(ck);
    rd->last_step = r->step;
    rd->t_last = now_seconds();
    if (D->rank == 0) {
        rd->writer = checkpoint_writer_create(&r->model.pt, c);
        rd->metrics = metrics_open(c->run_dir, r->step);
    }
}

static void start_ckpt(RunDir *rd, TrainRun *r, double elapsed_now)
{
    CkptState st;
    fill_state(&st, r, elapsed_now);
    /* the metrics rows logged so far reach the file first: a flush that met
     * the previous write's HDF5 lock left them pending, and a resume from
     * this checkpoint never logs them again (lost if the process then died) */
    metrics_flush(rd->metrics, 1);
    if (checkpoint_writer_start(rd->writer, &r->model, rd->cfg_text, &st)) return;
    rd->last_step = r->step;
    rd->t_last = now_seconds();
    /* the test hook's freeze comes at this step whatever the load: written
     * in the background, the loop could pass its next preemption check, or
     * its end, before the write is in place and the process stops */
    if (checkpoint_test_stop_step(r->step)) checkpoint_writer_wait(rd->writer);
}

int rundir_ckpt_failed(const RunDir *rd)
{
    return rd->writer && checkpoint_writer_failed(rd->writer);
}

/* A step checkpoint does not stall training behind the write before it:
 * that write gets CKPT_GRACE_S plus 5% of the time since it started to
 * finish, then this checkpoint is skipped (rank 0; nothing collective
 * waits on it).  The grace keeps the small writes that a loaded machine
 * delays by a second or two from being skipped: a verdict on which
 * checkpoints exist must not depend on load. */
#define CKPT_GRACE_S 5.0
static int step_ckpt_would_stall(RunDir *rd)
{
    if (!checkpoint_writer_busy(rd->writer)) return 0;
    double running = now_seconds() - rd->t_last;
    return checkpoint_writer_wait_for(rd->writer, CKPT_GRACE_S + 0.05 * running);
}

/* Checkpoints by time follow ckpt_minutes, as the paper's 10-minute
 * intervals (section 6.1), unless writing would take more than
 * CKPT_IO_SHARE of the time: a slow or shared file system, or a big model
 * on a fast GPU, then gets one checkpoint per write time / CKPT_IO_SHARE,
 * measured on the last write, said once each time it grows by more than a
 * tenth (so that a jittering write time does not re-say it).  Writes under
 * CKPT_IO_FLOOR_S are left alone: at any interval of a minute or more they
 * cost under 2% (and the tests' sub-second intervals stay as asked). */
#define CKPT_IO_SHARE 0.05
#define CKPT_IO_FLOOR_S 1.0
static double time_interval(RunDir *rd, const Config *c)
{
    double wanted = 60.0 * c->ckpt_minutes, write_s = checkpoint_writer_last_seconds(rd->writer);
    if (rd->time_interval < wanted) rd->time_interval = wanted;
    if (write_s >= CKPT_IO_FLOOR_S && write_s / CKPT_IO_SHARE > rd->time_interval * 1.1) {
        rd->time_interval = write_s / CKPT_IO_SHARE;
        printf("checkpoint: a write took %.1fs: checkpoints by time every %.1f min instead of ckpt_minutes %g "
               "(at most %.0f%% of the time writing)\n", write_s, rd->time_interval / 60.0, c->ckpt_minutes,
               100.0 * CKPT_IO_SHARE);
        fflush(stdout);
    }
    return rd->time_interval;
}

/* Step checkpoints exist for averaging (section 6.1: the last 5, or 20 for
 * big, at the paper's 10-minute spacing in steps), so with a fixed end
 * (no patience) only the last keep_ckpts of them are written; before those
 * the checkpoints by time (ckpt_minutes) are the resume points.  Every
 * step checkpoint of big's 300k steps would write 1.3 TB (issue 47). */
static int step_ckpt_wanted(RunDir *rd, const Config *c, int step)
{
    long first = (long)c->train_steps - (long)(c->keep_ckpts - 1) * c->ckpt_steps;
    first -= first % c->ckpt_steps;   /* the first multiple of ckpt_steps kept */
    if (c->ckpt_minutes <= 0 || c->patience > 0 || step >= first) return 1;
    if (!rd->said_window) {
        printf("checkpoint: step checkpoints from step %ld on (the last keep_ckpts %d, for averaging); until then one "
               "every ckpt_minutes %g min (for resuming)\n", first, c->keep_ckpts, c->ckpt_minutes);
        fflush(stdout);
        rd->said_window = 1;
    }
    return 0;
}

void rundir_after_step(RunDir *rd, TrainRun *r, int step, double elapsed_now)
{
    if (!rd->enabled || r->dist.rank != 0) return;
    const Config *c = &r->cfg;
    /* keep_best: the state of a new best dev evaluation, kept (best.h5) */
    int new_best = c->keep_best && r->best.best_step == step;
    if (new_best) {
        start_ckpt(rd, r, elapsed_now);   /* waits for a write still in flight: best.h5 must hold it */
        return;
    }
    if (c->ckpt_steps > 0 && step % c->ckpt_steps == 0 && step_ckpt_wanted(rd, c, step)) {
        if (!step_ckpt_would_stall(rd)) start_ckpt(rd, r, elapsed_now);
        else printf("checkpoint: step %d skipped: the write of step %d is still running (a slow file system or a "
                    "short ckpt_steps; the next is due at step %d)\n", step, rd->last_step, step + c->ckpt_steps);
        fflush(stdout);
        return;
    }
    /* by wall time: if the previous write is still going, try again next
     * step instead of waiting for it */
    if (c->ckpt_minutes > 0 && now_seconds() - rd->t_last >= time_interval(rd, c)
        && !checkpoint_writer_busy(rd->writer))
        start_ckpt(rd, r, elapsed_now);
}

int rundir_checkpoint_sync(RunDir *rd, TrainRun *r, double elapsed_now)
{
    if (!rd->enabled) return 0;
    int failed = 0;
    if (r->dist.rank == 0) {
        if (rd->last_step != r->step) start_ckpt(rd, r, elapsed_now);
        failed = checkpoint_writer_wait(rd->writer) != 0;
        if (failed) {
            char **paths;
            int64_t *steps;
            int n = checkpoint_list(r->cfg.run_dir, &paths, &steps);
            if (n) fprintf(stderr, "error: %s: training stopped after step %d because a checkpoint could not be written "
                           "(above); the newest complete one is %s: remove the cause and run again to resume from it\n",
                           r->cfg.run_dir, r->step, paths[n - 1]);
            else fprintf(stderr, "error: %s: training stopped after step %d because a checkpoint could not be written "
                         "(above); there is no complete checkpoint yet\n", r->cfg.run_dir, r->step);
            for (int i = 0; i < n; i++) free(paths[i]);
            free(paths);
            free(steps);
        }
    }
    /* no rank leaves before the file is in place, and all know how it went */
    MPI_Bcast(&failed, 1, MPI_INT, 0, r->dist.comm);
    return failed;
}

void rundir_close(RunDir *rd)
{
    if (rd->writer) checkpoint_writer_free(rd->writer);
    if (rd->metrics) metrics_close(rd->metrics);
    rd->writer = NULL;
    rd->metrics = NULL;
    if (rd->lock_fd >= 0) close(rd->lock_fd);   /* releases the lock */
    rd->lock_fd = -1;
}
