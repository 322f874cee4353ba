/* max_tokens = 0: the micro-batch size from free device memory
 * (auto_tokens.h). */
#include "auto_tokens.h"
#include "device_peers.h"

#include <stdio.h>

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define MAX_TOKENS_LIMIT 100000000L   /* the key's upper bound (config.c) */

/* Kept free: max(1 GiB, 10% of the free memory), at most half of it.
 * What the reservation does not show is allocated later or lazily: the
 * cuBLAS workspace (on the first GEMM; up to 32 MiB per handle on
 * Hopper), NCCL's buffers (NCCL_BUFFSIZE, 4 MiB per channel and peer:
 * hundreds of MiB on a node), the bf16/fp16 GEMM conversion scratch (as
 * large as the widest fp32 operand converted), the column sums' partials
 * held back during a backward (cuda/gemm.cuh's sums arena: about 2% of
 * base's activations at 25,000 tokens), greedy decoding's logits,
 * kernels loaded on first use (CUDA lazy loading) and allocation rounding
 * and fragmentation (2 MiB pages).  The CUDA context itself already exists
 * when free memory is read.  The half cap is for small devices (a MIG
 * slice, the emulator's CUDA_EMU_MEMORY): there 1 GiB would leave nothing,
 * and the models that fit are small enough for half to hold those. */
static size_t headroom(size_t free_bytes)
{
    size_t h = free_bytes / 10 > GIB ? free_bytes / 10 : GIB;
    return h > free_bytes / 2 ? free_bytes / 2 : h;
}

/* B rounded down to 4 significant bits (a multiple of 2^(floor(log2 B) - 3)):
 * at most 1/8 of the budget unused, and a few MiB more or less free memory
 * rarely moves it */
static long round_sentences(long B)
{
    long top = 1;
    while (top * 2 <= B) top *= 2;
    long step = top >= 8 ? top / 8 : 1;
    return B - B % step;
}

/* bytes of the logits buffer for a batch of nt target tokens: one chunk
 * of model_logits_rows rows, which stops growing once nt reaches it */
static long long logits_bytes(const Model *m, long long nt)
{
    size_t rows = model_logits_rows(&m->cfg, nt > 0 ? (size_t)nt : 0);
    return (long long)(rows * (size_t)m->cfg.vocab_size * dtype_size(m->be->act_dtype));
}

/* the most sentences of L tokens whose activations fit avail bytes: per
 * sentence, plus the logits chunk, which grows with the first sentences
 * only (model_logits_rows): either the chunk is full (B*L >= its rows) or
 * all B*L rows are one chunk */
static long fit_sentences(const Model *m, long long avail, long long per, int L)
{
    long long full = logits_bytes(m, MAX_TOKENS_LIMIT), row = logits_bytes(m, 1);
    long long rows = full / row;
    long B = avail - full > 0 ? (long)((avail - full) / per) : 0;
    if ((long long)B * L >= rows) return B;
    return avail > 0 ? (long)(avail / (per + row * L)) : 0;
}

/* the measurement; the budget is 1/sharers of the free memory, headroom
 * included (each rank keeps its own for what it allocates later) */
static int measure(Model *m, TokenBudget *tb, int sharers)
{
    Backend *be = m->be;
    int L = m->cfg.max_len;
    if (!be->device_free) return -1;
    model_release_acts(m);
    be->sync(be);
    long long f0 = (long long)be->device_free(be);
    model_reserve(m, 1, L, L);
    long long f1 = (long long)be->device_free(be), a1 = (long long)be->act_bytes;
    model_reserve(m, 2, L, L);   /* frees the first reservation, then makes this one */
    long long f2 = (long long)be->device_free(be), a2 = (long long)be->act_bytes;
    model_release_acts(m);
    if (f0 <= 0) return -1;
    /* the difference of free memory; never below the activation buffers'
     * own bytes, which allocation rounding on a GPU may hide for a tiny
     * model; less the logits' growth, which fit_sentences counts apart */
    long long per = f1 - f2 > a2 - a1 ? f1 - f2 : a2 - a1;
    per -= logits_bytes(m, 2LL * L) - logits_bytes(m, L);
    if (per < 1) per = 1;
    long long fixed = f0 - f1 - per - logits_bytes(m, L);
    tb->device_free = (size_t)f0;
    tb->sharers = sharers;
    tb->free_bytes = (size_t)f0 / (size_t)sharers;
    tb->per_sentence = (size_t)per;
    tb->fixed = fixed > 0 ? (size_t)fixed : 0;
    tb->headroom = headroom(tb->free_bytes);
    long B = fit_sentences(m, (long long)tb->free_bytes - (long long)tb->headroom - (long long)tb->fixed, per, L);
    if (B > MAX_TOKENS_LIMIT / L) B = MAX_TOKENS_LIMIT / L;
    tb->sentences = B > 0 ? round_sentences(B) : 0;
    return 0;
}

int auto_tokens_measure(Model *m, TokenBudget *tb) { return measure(m, tb, 1); }

/* Ranks that share a device (TRANSFORMER_SHARE_GPU=1) share its free
 * memory: each reading all of it would budget nearly all of it, k times
 * over.  They take turns, and each budgets 1/k of what it reads.  Turns,
 * because a measurement takes the device-wide free memory before and after
 * its own reservations: another rank reserving or releasing meanwhile would
 * pass for this rank's bytes per sentence.  The first barrier waits for
 * every rank on the device to hold its model, so that each reads the same
 * free memory, what the k models (and contexts) left; a rank that measured
 * has released its reservations before the next one starts.  0, or -1 as
 * auto_tokens_measure.  Collective over D->comm. */
static int measure_shared(Model *m, TokenBudget *tb, Dist *D)
{
    unsigned char uuid[16];
    int known = m->be->device_uuid && m->be->device_uuid(m->be, uuid) == 0, rc = -1;
    MPI_Comm dev;
    DevicePeers p = device_peers(D->comm, known ? uuid : NULL, &dev);
    MPI_Barrier(dev);
    for (int turn = 0; turn < p.count; turn++) {
        if (turn == p.index) rc = measure(m, tb, p.count);
        MPI_Barrier(dev);
    }
    MPI_Comm_free(&dev);
    return rc;
}

int auto_tokens_resolve(Model *m, Dist *D)
{
    TokenBudget tb = {0};
    int L = m->cfg.max_len;
    int ok = measure_shared(m, &tb, D) == 0;
    long mine = ok ? tb.sentences * L : 0, tokens;
    MPI_Allreduce(&mine, &tokens, 1, MPI_LONG, MPI_MIN, D->comm);
    if (D->rank != 0) return (int)tokens;
    if (!ok)
        fprintf(stderr, "error: max_tokens = 0: backend %s cannot report its free device memory: set max_tokens\n",
                m->be->name);
    else if (tokens <= 0)
        fprintf(stderr, "error: max_tokens = 0: one sentence of max_len %d tokens (%.3g MiB of activations) does not "
                "fit the free device memory of every rank (rank 0: %.3g MiB free, %.3g MiB kept free): use a smaller "
                "model or max_len\n", L, (double)tb.per_sentence / MIB, (double)tb.free_bytes / MIB,
                (double)tb.headroom / MIB);
    else if (tb.sharers > 1)
        printf("max_tokens: %ld from free device memory (%.3g GiB free, %.3g MiB per sentence of max_len tokens; "
               "1/%d of the %.3g GiB free on the GPU that %d ranks share)\n", tokens, (double)tb.free_bytes / GIB,
               (double)tb.per_sentence / MIB, tb.sharers, (double)tb.device_free / GIB, tb.sharers);
    else
        printf("max_tokens: %ld from free device memory (%.3g GiB free, %.3g MiB per sentence of max_len tokens)\n",
               tokens, (double)tb.free_bytes / GIB, (double)tb.per_sentence / MIB);
    fflush(stdout);
    return (int)tokens;
}
