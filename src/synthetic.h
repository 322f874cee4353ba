#ifndef SYNTHETIC_H
#define SYNTHETIC_H

#include "batch.h"
#include "config.h"

enum { SPLIT_TRAIN = 0, SPLIT_DEV = 1, SPLIT_TEST = 2 };

/* n pairs of the synthetic task cfg->task, a pure function of (seed, split) */
void synthetic_corpus(Corpus *c, const Config *cfg, int split, int n);

/* split "train", "dev" or "test" of the task (synth_train or synth_dev
 * pairs); 0, or 2 after a one-line error for another name */
int synthetic_load_split(Corpus *c, const Config *cfg, const char *split);

#endif
