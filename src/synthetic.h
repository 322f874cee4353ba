#ifndef SYNTHETIC_H
#define SYNTHETIC_H

#include "batch.h"
#include "config.h"

enum { SPLIT_TRAIN = 0, SPLIT_DEV = 1, SPLIT_TEST = 2 };

/* n pairs of the synthetic task cfg->task, a pure function of (seed, split) */
void synthetic_corpus(Corpus *c, const Config *cfg, int split, int n);

#endif
