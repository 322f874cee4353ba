/* A corpus by its name on the command line or in a config (`data`): a
 * dataset file written by `transformer prepare`, or "synthetic", the
 * embedded task.  The one place that tells the two apart. */
#ifndef CORPUS_H
#define CORPUS_H

#include "batch.h"
#include "config.h"

/* 1 if data names the embedded synthetic task */
int corpus_is_synthetic(const char *data);

/* split of data ("train", "dev", "test" for the synthetic task of c;
 * any split of a dataset file) into corp: 0, or 2 after a one-line error */
int corpus_open(const char *data, const char *split, const Config *c, Corpus *corp);

#endif
