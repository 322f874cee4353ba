/* Token-budget batches (section 5.1): pairs grouped by approximate length so
 * that a batch holds at most max_tokens source and max_tokens target tokens,
 * padding counted.  The composition of batches is fixed; their order is
 * reshuffled every epoch from the seed.  The global sequence of batches is
 * epoch 0's permutation, then epoch 1's, ...; batch g of that sequence goes to
 * step g / (P*u) + 1, rank (g / u) % P, micro-batch g % u (P ranks,
 * u = update_freq), so ranks get disjoint batches and the data position is
 * a pure function of the step (exact resume). */
#ifndef BATCHER_H
#define BATCHER_H

#include <stdint.h>

#include "batch.h"

typedef struct {
    int n_batches;
    int *start;   /* [n_batches+1] into idx */
    int *idx;     /* pair indices, batch k = idx[start[k] .. start[k+1]) */
    uint64_t seed;
    long perm_epoch;   /* epoch whose permutation is cached in perm */
    int *perm;
} BatchPlan;

/* Returns 0, or -1 if no pair fits (all longer than max_len). */
int batchplan_build(BatchPlan *bp, const Corpus *c, int max_tokens, int max_len, uint64_t seed);
/* the batch (index into the plan) at position g of the global sequence */
int batchplan_global(BatchPlan *bp, long g);
/* global sequence position of (step >= 1, rank, micro) */
static inline long batchplan_position(int step, int rank, int micro, int P, int u)
{
    return ((long)(step - 1) * P + rank) * u + micro;
}
void batchplan_free(BatchPlan *bp);

#endif
