/* Data-loader cost per training step, measured alone: dataset_map of the
 * train split (once), then for STEPS steps what train.c does per micro-batch:
 * batchplan_global + batch_build.  Prints "load_s X per_step_us Y batches B".
 * Built and run by tests/bench/bench_data.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "batch.h"
#include "batcher.h"
#include "dataset.h"
#include "util.h"

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: loader_time DATA.h5 MAX_TOKENS MAX_LEN STEPS\n"); return 2; }
    int max_tokens = atoi(argv[2]), max_len = atoi(argv[3]), steps = atoi(argv[4]);
    double t0 = now_seconds();
    Corpus c;
    if (dataset_map(argv[1], "train", &c)) return 2;
    double t_load = now_seconds() - t0;
    BatchPlan bp;
    t0 = now_seconds();
    if (batchplan_build(&bp, &c, max_tokens, max_len, 1)) return 2;
    double t_plan = now_seconds() - t0;
    Batch b = {0};
    long tok = 0;
    t0 = now_seconds();
    for (int s = 1; s <= steps; s++) {
        int bi = batchplan_global(&bp, batchplan_position(s, 0, 0, 1, 1));
        batch_build(&b, &c, bp.idx + bp.start[bi], bp.start[bi + 1] - bp.start[bi], max_len);
        tok += b.n_tgt_tokens;
    }
    double per = (now_seconds() - t0) / steps;
    printf("load_s %.3f plan_s %.3f per_step_us %.1f batches %d tgt_tokens_per_batch %.0f\n", t_load, t_plan, per * 1e6,
           bp.n_batches, (double)tok / steps);
    batch_free(&b);
    batchplan_free(&bp);
    corpus_free(&c);
    return 0;
}
