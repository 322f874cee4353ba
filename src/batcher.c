#include "batcher.h"

#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "util.h"

/* Sort key: target length, then source length, then index (a total order,
 * so the plan does not depend on the qsort implementation). */
typedef struct { uint64_t len; int i; } SortKey;

static int by_key(const void *pa, const void *pb)
{
    const SortKey *a = pa, *b = pb;
    if (a->len != b->len) return (a->len > b->len) - (a->len < b->len);
    return (a->i > b->i) - (a->i < b->i);
}

int batchplan_build(BatchPlan *bp, const Corpus *c, int max_tokens, int max_len, uint64_t seed)
{
    memset(bp, 0, sizeof *bp);
    bp->seed = seed;
    bp->perm_epoch = -1;
    /* pairs that do not fit max_len (or alone exceed the token budget) are
     * left out of the plan */
    int lim = max_len < max_tokens ? max_len : max_tokens;
    int n = 0;
    SortKey *key = xmalloc(sizeof(SortKey) * (c->n ? c->n : 1));
    for (int i = 0; i < c->n; i++) {
        int s = corpus_src_len(c, i) + 1, t = corpus_tgt_len(c, i) + 1;
        if (corpus_pair_fits(c, i, lim)) key[n++] = (SortKey){ (uint64_t)t << 32 | (uint32_t)s, i };
    }
    if (n == 0) { free(key); return -1; }
    qsort(key, n, sizeof(SortKey), by_key);
    int *order = xmalloc(sizeof(int) * n);
    for (int k = 0; k < n; k++) order[k] = key[k].i;
    free(key);
    bp->idx = order;
    bp->start = xmalloc(sizeof(int) * (n + 1));
    int nb = 0, k = 0;
    while (k < n) {
        bp->start[nb++] = k;
        int S = 0, T = 0, cnt = 0;
        while (k < n) {
            int s = corpus_src_len(c, order[k]) + 1, t = corpus_tgt_len(c, order[k]) + 1;
            int nS = s > S ? s : S, nT = t > T ? t : T;
            if (cnt > 0 && ((long)(cnt + 1) * nS > max_tokens || (long)(cnt + 1) * nT > max_tokens)) break;
            S = nS; T = nT; cnt++; k++;
        }
    }
    bp->start[nb] = n;
    bp->n_batches = nb;
    bp->perm = xmalloc(sizeof(int) * nb);
    return 0;
}

int batchplan_global(BatchPlan *bp, long g)
{
    long epoch = g / bp->n_batches;
    if (epoch != bp->perm_epoch) {
        /* Fisher-Yates with Philox keyed by (seed, epoch) */
        for (int i = 0; i < bp->n_batches; i++) bp->perm[i] = i;
        uint32_t k0 = (uint32_t)bp->seed ^ 0xBA7C4E5u, k1 = (uint32_t)(bp->seed >> 32) ^ (uint32_t)epoch;
        for (int i = bp->n_batches - 1; i > 0; i--) {
            philox_ctr ctr = {{ (uint32_t)i, (uint32_t)(epoch >> 32), 7, 0 }};
            int j = (int)(philox4x32(ctr, k0, k1).v[0] % (uint32_t)(i + 1));
            int t = bp->perm[i]; bp->perm[i] = bp->perm[j]; bp->perm[j] = t;
        }
        bp->perm_epoch = epoch;
    }
    return bp->perm[g % bp->n_batches];
}

void batchplan_free(BatchPlan *bp)
{
    free(bp->start);
    free(bp->idx);
    free(bp->perm);
    memset(bp, 0, sizeof *bp);
}
