/* The run directory of a training run: resume from its newest complete
 * checkpoint, the checkpoint schedule (every ckpt_steps steps and every
 * ckpt_minutes minutes, the last keep_ckpts kept), the metrics log and the
 * preemption contract (SIGUSR1/SIGTERM: finish the step, checkpoint, exit 99).
 * With run_dir empty nothing is written. */
#ifndef RESUME_H
#define RESUME_H

#include "checkpoint.h"
#include "metrics.h"
#include "run.h"

#define EXIT_PREEMPTED 99

typedef struct {
    int enabled;            /* run_dir set */
    CkptWriter *writer;     /* rank 0 */
    Metrics *metrics;       /* rank 0 */
    double t_last;          /* wall time of the last checkpoint */
    double time_interval;   /* seconds between checkpoints by time (ckpt_minutes, lengthened by slow writes) */
    int last_step;          /* step of the last checkpoint started */
    int said_window;        /* the line on where step checkpoints start is printed */
    int lock_fd;            /* rank 0: flock'ed run_dir/.lock, or -1 */
    char cfg_text[16384];
} RunDir;

/* Create run_dir, and resume from its newest complete checkpoint if it has
 * one (required if resume_flag).  Rank 0 holds an exclusive lock on
 * run_dir/.lock until rundir_close: a second run on the same directory is
 * refused (exit 2) instead of interleaving checkpoints with the first.  On resume r->step, r->elapsed, the
 * parameters and Adam moments are restored on every rank.  Errors (other
 * architecture, --resume without checkpoint) are one line, exit 2. */
void rundir_open(RunDir *rd, TrainRun *r, int resume_flag);
/* Collective, before rundir_open: the max_tokens stored in the config of
 * run_dir's newest checkpoint whose config reads (rank 0 reads it, its
 * path into from), or 0 if there is none.  A run with max_tokens = 0
 * resumes with it: the value its first part resolved. */
int rundir_saved_max_tokens(TrainRun *r, char *from, size_t cap);
/* after optimiser step `step`: start a checkpoint if one is due (ckpt_steps,
 * ckpt_minutes, or keep_best and step's dev evaluation is a new best) */
void rundir_after_step(RunDir *rd, TrainRun *r, int step, double elapsed_now);
/* rank 0: 1 once a checkpoint write has failed (disk full, quota, I/O
 * error); the training loop then stops on all ranks */
int rundir_ckpt_failed(const RunDir *rd);
/* write a checkpoint of the current state now and wait for it (end of the
 * run, preemption); skipped if the last one is of this step.  Collective.
 * Returns 1 on every rank if a checkpoint of this run failed (the error and
 * the checkpoint to resume from printed by rank 0), else 0. */
int rundir_checkpoint_sync(RunDir *rd, TrainRun *r, double elapsed_now);
void rundir_close(RunDir *rd);

/* SIGUSR1 / SIGTERM set a flag; the training loop agrees on it over ranks */
void preempt_install(void);
int preempt_pending(void);

#endif
