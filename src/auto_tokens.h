/* max_tokens = 0 (device=cuda): the micro-batch size, in tokens per rank,
 * from the device memory left free once the model (parameters, gradients,
 * Adam moments) is in place.
 *
 * The activations model_reserve makes grow linearly with the sentences of
 * a batch at a fixed length; for a given token budget the attention
 * weights (heads x sentences x length^2) are largest when the sentences
 * are longest, so B sentences of max_len tokens on both sides are the
 * worst case of any batch of B x max_len tokens.  The free memory is read
 * before and after model_reserve for 1 and for 2 such sentences: the
 * difference is the bytes per sentence, the rest a fixed part (allocation
 * rounding).  The logits are the exception: one chunk of at most
 * model_logits_rows target rows, which grows with the first sentences
 * only, so they are counted apart, once.  B is what fits the free memory less a headroom, rounded
 * down to 4 significant bits, so that free memory a few MiB either way
 * does not change it; max_tokens = B x max_len, the least over the ranks.
 * Ranks on one device (same UUID) measure it in turn and divide its free
 * memory among them (auto_tokens.c measure_shared). */
#ifndef AUTO_TOKENS_H
#define AUTO_TOKENS_H

#include <stddef.h>

#include "dist.h"
#include "model.h"

typedef struct {
    size_t device_free;    /* free device memory before any activation */
    int sharers;           /* ranks that share the device (auto_tokens_measure: 1) */
    size_t free_bytes;     /* this rank's part of it: device_free / sharers */
    size_t per_sentence;   /* activation bytes per sentence of max_len tokens, less the logits */
    size_t fixed;          /* bytes of a reservation that do not grow with it */
    size_t headroom;       /* kept free for what is allocated later */
    long sentences;        /* B: sentences of max_len tokens that fit (rounded) */
} TokenBudget;

/* Measure this rank's device with m's activations (m holds none after it).
 * 0, or -1 if the backend cannot say how much memory is free. */
int auto_tokens_measure(Model *m, TokenBudget *tb);
/* Collective: the max_tokens every rank uses (the least over the ranks);
 * rank 0 prints "max_tokens: N from free device memory (...)".  0 after a
 * one-line error (rank 0) when not one sentence of max_len fits a rank. */
int auto_tokens_resolve(Model *m, Dist *D);

#endif
