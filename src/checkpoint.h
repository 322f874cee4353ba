/* HDF5 checkpoints (docs/checkpoint.md): one dataset per parameter tensor
 * under /params/<ParamTable name>, the Adam moments under /adam_m/... and
 * /adam_v/..., and the run state (step, elapsed time, data position, seed,
 * config text, project version) as attributes of the root group.
 *
 * Files are written atomically (h5io.h): built in memory, written to a
 * hidden temporary name in the run directory, fsync'ed, then renamed and the
 * directory fsync'ed, so the newest ckpt_*.h5 is always complete.  During training the write runs
 * in a background thread from a host copy of the state (checkpoint_writer_*),
 * at most one write in flight. */
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "h5io.h"
#include "model.h"
#include "ops.h"

#define PROJECT_VERSION "0.1.0"
#define CKPT_FORMAT "transformer-checkpoint"
#define CKPT_FORMAT_VERSION 1

/* The run state stored with the tensors. */
typedef struct {
    int64_t step;             /* completed optimiser steps */
    double elapsed;           /* training wall time in seconds, summed over resumes */
    uint64_t seed;            /* keys dropout (Philox) and the batch shuffle */
    int ranks, update_freq;   /* with step: the data-loader position */
    int64_t data_position;    /* next position of the global batch sequence (batcher.h) */
    uint64_t plan_hash;       /* hash of the batch plan (composition of batches) */
    int n_batches;            /* batches per epoch */
    const char *averaged_from; /* averages: the source files, one per line (else NULL) */
    uint64_t vocab_hash;      /* dataset_vocab_hash of the training data; 0: synthetic, or an older file */
    double loss_scale;        /* dynamic loss scaling (loss_scale.h): S; 0: off, or an older file */
    int64_t loss_scale_good;  /* finite steps in a row since S last changed */
    int64_t loss_scale_skipped; /* steps skipped so far */
    int64_t best_step;        /* the best dev evaluation's step (run.h DevBest); 0: none, or an older file */
    double best_nll;          /* its dev NLL */
    int64_t bad_evals;        /* dev evaluations since it without improvement (patience) */
    double log_loss, log_tokens; /* the training loss and tokens since the last log line (run.h LogInterval); 0: none, or an older file */
} CkptState;

/* Read the stored config into cfg_out (and the run state into st, if not
 * NULL), model_init(m, cfg_out, be), load the parameters.  Returns 0, or
 * prints one line "error: PATH: ..." and returns 2 (not HDF5, truncated, not
 * a checkpoint, missing or misshapen tensor). */
int checkpoint_open_model(const char *path, Config *cfg_out, CkptState *st, Model *m, Backend *be);

/* 0 if the dataset at data_path has the vocabulary the checkpoint was
 * trained with (or the checkpoint does not record one), else a one-line
 * error naming both, and 2. */
int checkpoint_check_vocab(const char *ckpt_path, const CkptState *st, const char *data_path);

/* Read only the stored config (and state, if st is not NULL): 0, or after a
 * one-line error CKPT_DAMAGED (the file is damaged: not HDF5, truncated,
 * attributes missing or out of range, a tensor unreadable or failing its
 * checksum) or 2 (anything else: cannot open, a foreign file, another
 * format version, a config this build does not know, no Adam moments). */
#define CKPT_DAMAGED 3
int checkpoint_read_config(const char *path, Config *cfg_out, CkptState *st);
/* Load parameters (and, if adam is set, the Adam moments) into host buffers
 * laid out as pt (pt->total floats each; m_out/v_out may be NULL).  0,
 * CKPT_DAMAGED or 2, as above. */
int checkpoint_read_tensors(const char *path, const ParamTable *pt, float *params, float *m_out, float *v_out);

/* Write a complete checkpoint atomically to path (host buffers laid out as
 * pt; adam_m/adam_v may be NULL for parameter-only files such as averages).
 * cfg_text is config_to_string() output.  The file is built in memory taken
 * from and given back to reuse (h5io.h; NULL: allocated and freed here).
 * Returns 0, or -1 with msg set. */
int checkpoint_write(const char *path, const ParamTable *pt, const float *params, const float *adam_m,
                     const float *adam_v, const char *cfg_text, const CkptState *st, H5Buffer *reuse, char *msg,
                     int cap);

/* Checkpoints of a run directory, ckpt_<step>.h5, sorted by step (ascending).
 * Returns how many; *paths (caller frees each and the array). */
int checkpoint_list(const char *run_dir, char ***paths, int64_t **steps);
/* The checkpoints that are kept and averaged.  Section 6.1 averages "the
 * last 5 checkpoints, which were written at 10-minute intervals" (20 for
 * big); 10 minutes was ~1500 steps of the paper's hardware, so a run that
 * sets ckpt_steps gets the same spacing on any hardware: then the interval
 * checkpoints are those at multiples of ckpt_steps and the final one (step
 * train_steps), and the checkpoints written in between by wall time
 * (ckpt_minutes) or on preemption exist only to resume from.  With
 * ckpt_steps = 0 (checkpoints by wall time only) every checkpoint counts. */
int checkpoint_on_interval(int64_t step, int ckpt_steps, int train_steps);
/* Delete all but the newest keep interval checkpoints (above) and the
 * newest checkpoint of any kind, and any stale temporaries.  With
 * best_step > 0 (keep_best) also kept: the checkpoint of best_step and the
 * newest keep interval ones before it, which 'average --upto-best' takes. */
void checkpoint_prune(const char *run_dir, int keep, int ckpt_steps, int train_steps, int64_t best_step);
/* The checkpoints 'average --last K --upto-best' takes (and prune keeps):
 * at or before best_step, on the interval or best_step's own */
int checkpoint_upto_best(int64_t step, int64_t best_step, int ckpt_steps, int train_steps);
/* ckpt path of a step */
void checkpoint_path(char *buf, size_t cap, const char *run_dir, int64_t step);
/* out, the file of a command's output option opt, is none of the files
 * training reads and writes in the run directory run_dir, existing or not:
 * its checkpoints ckpt_<step>.h5 (a new one would be resumed from),
 * best.h5, metrics.h5, attention_probe.h5, .lock, and any of them moved
 * aside as NAME.bad.  Other files there (the jobs' avg5.h5, a second
 * average written over the first) are the user's.  0 (also for an empty
 * run_dir), or 2 after one line "error: OUT: OPT is a file of the run
 * directory RUN: choose another name" */
int checkpoint_check_run_output(const char *opt, const char *out, const char *run_dir);
/* the same for a command that reads the checkpoint ckpt: out is no file of
 * the run directory ckpt lies in (average, translate, attention, heads:
 * `--output RUN/metrics.h5` replaced the training log) */
int checkpoint_check_output_beside(const char *opt, const char *out, const char *ckpt);

/* Test hook TRANSFORMER_CKPT_STOP_STEP=S: 1 for step S, whose checkpoint
 * freezes the whole process (SIGSTOP) once in place, so that a test can
 * kill -9 or signal it at a known point (docs/checkpoint.md). */
int checkpoint_test_stop_step(int64_t step);

/* Background writer: snapshot into host memory, write in a thread. */
typedef struct CkptWriter CkptWriter;
/* keeps c->keep_ckpts interval checkpoints of c->run_dir (checkpoint_prune) */
CkptWriter *checkpoint_writer_create(const ParamTable *pt, const Config *c);
/* 1 while a write is in flight */
int checkpoint_writer_busy(CkptWriter *w);
/* Wait for the write in flight (if any); -1 if this or an earlier write
 * failed (the error already printed), else 0. */
int checkpoint_writer_wait(CkptWriter *w);
/* wait at most `seconds` for the write in flight; 1 if it is still running */
int checkpoint_writer_wait_for(CkptWriter *w, double seconds);
/* 1 once a write has failed (the error printed); sticky */
int checkpoint_writer_failed(CkptWriter *w);
/* seconds the last complete write took (0 while one runs or before any) */
double checkpoint_writer_last_seconds(CkptWriter *w);
/* Copy the model state (device -> host) and start writing it; waits for a
 * previous write first.  cfg_text is copied.  -1 (nothing started) if a
 * write has failed: a run that cannot checkpoint must stop, not go on
 * training what it cannot save. */
int checkpoint_writer_start(CkptWriter *w, const Model *m, const char *cfg_text, const CkptState *st);
void checkpoint_writer_free(CkptWriter *w);

#endif
