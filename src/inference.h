/* Opening a checkpoint for inference: its config with the command line's
 * overrides, the backend and the model, and the corpus to run it on. */
#ifndef INFERENCE_H
#define INFERENCE_H

#include "checkpoint.h"
#include "run.h"

/* A checkpoint opened for evaluation (`transformer eval`, `heads`):
 * - rank 0: the checkpoint's config with key=value overrides (an
 *   architecture key is refused naming cmd), validated; a dataset (not
 *   "synthetic") must have the checkpoint's vocabulary;
 * - every rank, with the same r->cfg: the backend it names and the
 *   checkpoint's model, keeping r->cfg's evaluation keys (max_tokens,
 *   mask_heads; max_tokens = 0 is resolved from the free device memory,
 *   collectively, auto_tokens.h);
 * - a split of a dataset file or of the synthetic task.
 * Each returns 0, or 2 after a one-line error. */
int eval_read_config(const char *cmd, const char *ckpt, const char *data, char *const *over, int n_over, Config *c,
                     CkptState *st);
int eval_open_model(TrainRun *r, const char *ckpt);
int eval_load_split(const char *data, const char *split, const Config *c, Corpus *corp);

#endif
