/* The state of a training run (also what eval and heads hold), and the
 * evaluation of a corpus: loss and perplexity summed over the ranks. */
#ifndef RUN_H
#define RUN_H

#include "batch.h"
#include "batcher.h"
#include "config.h"
#include "dist.h"
#include "loss_scale.h"
#include "model.h"

/* The best dev evaluation so far, for early stopping (patience) and the
 * best checkpoint (keep_best); saved in checkpoints, so that a resumed run
 * stops where an uninterrupted one does. */
typedef struct {
    int best_step;          /* step of the best evaluation (0: none yet) */
    double best_nll;        /* its dev NLL (nats per target token) */
    int bad_evals;          /* evaluations since, none better by more than patience_delta */
} DevBest;

/* The label-smoothed loss and target tokens summed (over the ranks) since
 * the last log line; saved in checkpoints, so that a run resumed from a
 * checkpoint between two log lines logs the next one as an uninterrupted
 * run does. */
typedef struct {
    double loss, tokens;
} LogInterval;

/* Everything a training run holds; resume.c saves and restores it (through checkpoint.c). */
typedef struct {
    Config cfg;
    Dist dist;
    Backend *be;
    Model model;
    Corpus train, dev;
    BatchPlan plan;
    GradSync sync;
    LossScaler scaler;      /* fp16: dynamic loss scaling (off: factor 1) */
    DevBest best;           /* early stopping and the best checkpoint */
    LogInterval log;        /* the training loss since the last log line */
    int step;               /* completed optimiser steps */
    double elapsed;         /* training wall time, summed over resumes */
    uint64_t vocab_hash;    /* rank 0: the dataset's vocabulary fingerprint (0: synthetic) */
} TrainRun;

/* the figures of an evaluation, per target token (EOS included), under the
 * names every log line prints them with */
typedef struct {
    double loss_ls;   /* label-smoothed loss: what training minimises (section 5.4) */
    double nll;       /* unsmoothed negative log-likelihood */
    double ppl;       /* per-wordpiece perplexity exp(nll): Table 3's PPL */
    long tokens;      /* target tokens */
} EvalStats;

/* loss_ls, nll and ppl of c without dropout, summed over all ranks */
EvalStats evaluate(TrainRun *r, const Corpus *c);

#endif
