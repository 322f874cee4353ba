/* A checkpoint opened for inference, one way for every command that runs
 * one (eval, heads, translate, attention): its config with the command
 * line's settings, the data's vocabulary checked against it, the backend
 * and the model with its head masks. */
#ifndef INFERENCE_H
#define INFERENCE_H

#include "checkpoint.h"
#include "dataset.h"
#include "dist.h"

typedef struct {
    const char *cmd;        /* names the command in errors */
    const char *ckpt;
    const char *data;       /* a dataset file or "synthetic" */
    char *const *over;      /* KEY=VALUE words: non-architecture keys */
    int n_over;
    /* the backend keys (device, precision, allreduce, threads) from the
     * command line and the defaults, not from the checkpoint's config
     * (translate, attention); else from the checkpoint (eval, heads) */
    int backend_from_command_line;
    /* the command computes on the CPU in fp32 whatever the job's device
     * (attention: maps that do not depend on the device) */
    int cpu_fp32;
    int auto_tokens;        /* max_tokens = 0: from the free device memory (collective) */
} InferenceArgs;

/* The checkpoint's config (and state) with the settings of a->over (an
 * architecture key is refused: it comes from the checkpoint), validated,
 * and the vocabulary of a->data checked (inference_check_vocab; voc, if
 * not NULL, gets the dataset's).  0, or 2 after a one-line error. */
int inference_read_config(const InferenceArgs *a, Config *c, CkptState *st, DatasetVocab *voc);

/* The data's vocabulary is the one the checkpoint was trained with: for
 * "synthetic", a checkpoint of the synthetic task; for a dataset, as many
 * pieces, the same fingerprint, and for an older checkpoint without one
 * the same pieces as its training data where that file is at hand.  voc,
 * if not NULL, gets the dataset's vocabulary.  0, or 2 after one line. */
int inference_check_vocab(const InferenceArgs *a, const Config *c, const CkptState *st, DatasetVocab *voc);


/* Every rank, with the c of inference_read_config: the backend c names,
 * the checkpoint's model with c's head masks; max_tokens = 0 resolved if
 * a->auto_tokens (the run's settings stay in c: the model holds none); the
 * rank's CPUs pinned as train's are (dist_bind_cpu, collective over the
 * node) and c->threads set to its thread count.  *be is set once created
 * (destroy it on error too).  0, or 2 after a one-line error. */
int inference_open(const InferenceArgs *a, Dist *D, Config *c, Model *m, Backend **be);

#endif
