/* The embedded default task: sequence transduction on random token strings,
 * generated in-process from the seed, so `train` runs with no data files.
 * reverse: y = x reversed; copy: y = x; sort: y = x sorted. */
#include "synthetic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "philox.h"
#include "util.h"

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void synthetic_corpus(Corpus *c, const Config *cfg, int split, int n)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->src_off = xmalloc(sizeof(int64_t) * (n + 1));
    c->tgt_off = xmalloc(sizeof(int64_t) * (n + 1));
    int span = cfg->synth_max_len - cfg->synth_min_len + 1;
    int *len = xmalloc(sizeof(int) * (n ? n : 1));
    int64_t total = 0;
    uint32_t k0 = (uint32_t)cfg->seed ^ 0x51A7E71Cu, k1 = (uint32_t)(cfg->seed >> 32) + (uint32_t)split;
    for (int i = 0; i < n; i++) {
        philox_ctr ctr = {{ (uint32_t)i, 0xFFFFFFFFu, 0, 0 }};
        len[i] = cfg->synth_min_len + (int)(philox4x32(ctr, k0, k1).v[0] % (uint32_t)span);
        c->src_off[i] = c->tgt_off[i] = total;
        total += len[i];
    }
    c->src_off[n] = c->tgt_off[n] = total;
    c->src_tok = xmalloc(sizeof(int32_t) * (total ? total : 1));
    c->tgt_tok = xmalloc(sizeof(int32_t) * (total ? total : 1));
    for (int i = 0; i < n; i++) {
        int32_t *x = c->src_tok + c->src_off[i], *y = c->tgt_tok + c->tgt_off[i];
        for (int j = 0; j < len[i]; j++) {
            philox_ctr ctr = {{ (uint32_t)i, (uint32_t)j, 1, 0 }};
            x[j] = TOK_FIRST_SYMBOL + (int32_t)(philox4x32(ctr, k0, k1).v[0] % (uint32_t)cfg->synth_vocab);
        }
        if (cfg->task == TASK_REVERSE)
            for (int j = 0; j < len[i]; j++) y[j] = x[len[i] - 1 - j];
        else {
            memcpy(y, x, sizeof(int32_t) * len[i]);
            if (cfg->task == TASK_SORT) qsort(y, len[i], sizeof(int32_t), cmp_i32);
        }
    }
    free(len);
}

int synthetic_load_split(Corpus *c, const Config *cfg, const char *split)
{
    int sp = !strcmp(split, "train") ? SPLIT_TRAIN : !strcmp(split, "dev") ? SPLIT_DEV
           : !strcmp(split, "test") ? SPLIT_TEST : -1;
    if (sp < 0) {
        fprintf(stderr, "error: --split '%s': synthetic data has train, dev and test\n", split);
        return 2;
    }
    synthetic_corpus(c, cfg, sp, sp == SPLIT_TRAIN ? cfg->synth_train : cfg->synth_dev);
    return 0;
}
