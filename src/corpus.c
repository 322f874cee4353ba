/* A dataset file or the synthetic task (corpus.h). */
#include "corpus.h"

#include <string.h>

#include "dataset.h"
#include "synthetic.h"

int corpus_is_synthetic(const char *data)
{
    return !strcmp(data, DATA_SYNTHETIC);
}

int corpus_open(const char *data, const char *split, const Config *c, Corpus *corp)
{
    return corpus_is_synthetic(data) ? synthetic_load_split(corp, c, split) : dataset_load(data, split, corp);
}
