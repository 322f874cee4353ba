/* Token-budget batching (section 5.1) and its sharding over ranks:
 * - every pair that fits max_len appears exactly once per epoch, over all
 *   ranks and micro-batches (P = 1, 2, 3, 4; update_freq 1, 2, 3);
 * - no batch exceeds max_tokens source or target tokens, padding counted
 *   (checked on the padded Batch that batch_build makes);
 * - batches are maximal (balanced): adding the next pair of the length order
 *   would break the budget, so every batch but the last is nearly full;
 * - the same seed gives the same batches, another seed another order;
 * - ranks of one step get disjoint batches; epochs are reshuffled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "batcher.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

/* a corpus with a long-tailed length distribution like real text
 * (mostly 5-40 tokens, a few up to 120) */
static void make_corpus(Corpus *c, int n, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->src_off = malloc(sizeof(int64_t) * (n + 1));
    c->tgt_off = malloc(sizeof(int64_t) * (n + 1));
    uint64_t x = seed;
    int *ls = malloc(sizeof(int) * n), *lt = malloc(sizeof(int) * n);
    long ts = 0, tt = 0;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int r = (int)(x >> 33);
        ls[i] = 1 + r % 40 + ((r >> 8) % 10 == 0 ? (r >> 12) % 80 : 0);
        lt[i] = ls[i] + (r >> 20) % 7 - 3;
        if (lt[i] < 0) lt[i] = 0;
        ts += ls[i]; tt += lt[i];
    }
    c->src_tok = malloc(sizeof(int32_t) * (ts + 1));
    c->tgt_tok = malloc(sizeof(int32_t) * (tt + 1));
    c->src_off[0] = c->tgt_off[0] = 0;
    for (int i = 0; i < n; i++) {
        c->src_off[i + 1] = c->src_off[i] + ls[i];
        c->tgt_off[i + 1] = c->tgt_off[i] + lt[i];
        for (int k = 0; k < ls[i]; k++) c->src_tok[c->src_off[i] + k] = 4 + (i + k) % 50;
        for (int k = 0; k < lt[i]; k++) c->tgt_tok[c->tgt_off[i] + k] = 4 + (i * 7 + k) % 50;
    }
    free(ls); free(lt);
}

static int fits(const Corpus *c, int i, int max_len)
{
    return corpus_src_len(c, i) + 1 <= max_len && corpus_tgt_len(c, i) + 1 <= max_len;
}

/* budget on the real padded batches, and maximality */
static void check_budget(const Corpus *c, const BatchPlan *bp, int max_tokens, int max_len, int n_fit)
{
    Batch b = {0};
    long padded = 0;
    for (int k = 0; k < bp->n_batches; k++) {
        int cnt = bp->start[k + 1] - bp->start[k];
        CHECK(cnt > 0, "empty batch %d", k);
        batch_build(&b, c, bp->idx + bp->start[k], cnt, max_len);
        CHECK((long)b.B * b.S <= max_tokens && (long)b.B * b.T <= max_tokens,
              "batch %d: %d x (%d, %d) exceeds max_tokens %d", k, b.B, b.S, b.T, max_tokens);
        padded += (long)b.B * (b.S > b.T ? b.S : b.T);
        if (k + 1 < bp->n_batches) {
            int nx = bp->idx[bp->start[k + 1]];
            int S = b.S, T = b.T, s = corpus_src_len(c, nx) + 1, t = corpus_tgt_len(c, nx) + 1;
            if (s > S) S = s;
            if (t > T) T = t;
            CHECK((long)(b.B + 1) * S > max_tokens || (long)(b.B + 1) * T > max_tokens,
                  "batch %d is not maximal: the next pair would still fit", k);
        }
    }
    double fill = (double)padded / ((double)bp->n_batches * max_tokens);
    printf("  max_tokens %5d max_len %3d: %d pairs in %d batches, mean fill %.3f\n", max_tokens, max_len, n_fit,
           bp->n_batches, fill);
    CHECK(fill > 0.85, "batches are poorly filled (%.3f)", fill);
    batch_free(&b);
}

/* sharding: every pair once per epoch over all ranks/micro-batches */
static void check_sharding(const Corpus *c, BatchPlan *bp, int max_len)
{
    int *seen = calloc(c->n, sizeof(int));
    for (int P = 1; P <= 4; P++)
        for (int u = 1; u <= 3; u++) {
            for (int e = 0; e < 2; e++) {
                memset(seen, 0, sizeof(int) * c->n);
                long lo = (long)e * bp->n_batches, hi = lo + bp->n_batches;
                int steps = (int)((hi + P * u - 1) / (P * u)) + 1;
                for (int step = 1; step <= steps; step++) {
                    int *in_step = calloc(bp->n_batches, sizeof(int));
                    for (int r = 0; r < P; r++)
                        for (int m = 0; m < u; m++) {
                            long g = batchplan_position(step, r, m, P, u);
                            int bi = batchplan_global(bp, g);
                            /* disjoint batches within a step (P*u <= batches) */
                            CHECK(!in_step[bi], "P=%d u=%d step %d: batch %d twice", P, u, step, bi);
                            in_step[bi] = 1;
                            if (g < lo || g >= hi) continue;
                            for (int j = bp->start[bi]; j < bp->start[bi + 1]; j++) seen[bp->idx[j]]++;
                        }
                    free(in_step);
                }
                int bad = 0;
                for (int i = 0; i < c->n; i++) bad += seen[i] != (fits(c, i, max_len) ? 1 : 0);
                CHECK(bad == 0, "P=%d u=%d epoch %d: %d pairs not seen exactly once", P, u, e, bad);
            }
        }
    free(seen);
}

/* determinism and reshuffling */
static void check_determinism(const Corpus *c, BatchPlan *bp, int max_tokens, int max_len, uint64_t seed)
{
    BatchPlan b2, b3;
    batchplan_build(&b2, c, max_tokens, max_len, seed);
    batchplan_build(&b3, c, max_tokens, max_len, seed + 1);
    int same = 1, diff_seed = 0, diff_epoch = 0;
    for (long g = 0; g < 3L * bp->n_batches; g++) {
        int a = batchplan_global(bp, g), a2 = batchplan_global(&b2, g), a3 = batchplan_global(&b3, g);
        same &= a == a2 && !memcmp(bp->idx + bp->start[a], b2.idx + b2.start[a2], sizeof(int) * (bp->start[a + 1] - bp->start[a]));
        diff_seed |= a != a3;
        if (g < bp->n_batches) diff_epoch |= a != batchplan_global(&b2, g + bp->n_batches);
    }
    CHECK(same, "same seed, different batches");
    CHECK(diff_seed, "different seed, same order");
    CHECK(diff_epoch || bp->n_batches < 3, "epoch 1 has the same order as epoch 0");
    batchplan_free(&b2);
    batchplan_free(&b3);
}

static void check_plan(const Corpus *c, int max_tokens, int max_len, uint64_t seed)
{
    BatchPlan bp;
    CHECK(batchplan_build(&bp, c, max_tokens, max_len, seed) == 0, "plan failed");
    int n_fit = 0;
    for (int i = 0; i < c->n; i++) n_fit += fits(c, i, max_len);
    CHECK(bp.start[bp.n_batches] == n_fit, "plan holds %d pairs, %d fit max_len", bp.start[bp.n_batches], n_fit);

    check_budget(c, &bp, max_tokens, max_len, n_fit);
    check_sharding(c, &bp, max_len);
    check_determinism(c, &bp, max_tokens, max_len, seed);
    batchplan_free(&bp);
}

int main(void)
{
    Corpus c;
    make_corpus(&c, 5000, 42);
    check_plan(&c, 1024, 64, 1);
    check_plan(&c, 4096, 128, 7);
    check_plan(&c, 600, 130, 3);
    /* nothing fits */
    BatchPlan bp;
    CHECK(batchplan_build(&bp, &c, 1024, 1, 1) == -1, "max_len 1 should leave no pair");
    corpus_free(&c);
    if (failures) { printf("%d failures\n", failures); return 1; }
    printf("test_batcher: all checks passed\n");
    return 0;
}
