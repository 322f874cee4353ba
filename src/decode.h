/* Batched beam search with incremental decoding (section 6.1 of Vaswani et
 * al. 2017): beam size, length penalty lp(Y) = ((5+|Y|)/6)^alpha (Wu et al.
 * 2016), maximum output length = input length + max_len_a, early stopping.
 * Greedy decoding is beam 1.  Written against the op interface only, so it
 * runs on any backend.
 *
 * The search, exactly:
 * - |Y| counts the output tokens including the final EOS; a hypothesis
 *   y_1..y_n EOS scores  log P(y_1..y_n EOS | x) / lp(n+1).
 * - At each step every live hypothesis is extended by every token except PAD
 *   and BOS, and the 2K best extensions by raw log-probability (K = beam) are
 *   taken, as in tensor2tensor's beam search (the paper's code): those ending
 *   in EOS are finished (the best finished one per sentence is kept), and the
 *   K best of the others are the live hypotheses of the next step.  A
 *   finished hypothesis therefore never takes a live one's place: K live
 *   hypotheses remain as long as K extensions without EOS exist.  K = 1 is
 *   greedy decoding (the best extension; EOS finishes the sentence), as in
 *   tensor2tensor; with K at least the number of extensions the search is
 *   exhaustive.
 * - A prefix with L = min(input tokens + max_len_a, max_len - 1) tokens may
 *   only be extended by EOS (the output never exceeds L tokens plus EOS and
 *   the decoder never exceeds the model's positions).
 * - Early termination (exact): log-probabilities are <= 0 and lp(n) grows with
 *   n for alpha >= 0, so a live prefix with log-probability s can finish with
 *   at most s / lp(L+1) (s / lp(current length + 1) if alpha < 0).  A sentence
 *   stops as soon as its best finished score is >= that bound for every live
 *   hypothesis, or when no hypothesis is live: no pruned search could find a
 *   better-scoring translation among the extensions of the beam.
 *
 * Incremental decoding: each decoder layer caches the keys and values of its
 * self-attention (one row per generated position, appended each step) and the
 * keys and values of the encoder-decoder attention (computed once from the
 * encoder output per sentence and shared by that sentence's K hypotheses:
 * the K queries of a sentence attend to it as a K-row query block).  A step
 * costs one position per hypothesis; the prefix is never recomputed.  Beam
 * reordering gathers the cached rows of the surviving parents, and finished
 * sentences are dropped from the batch. */
#ifndef DECODE_H
#define DECODE_H

#include <stdint.h>

#include "batch.h"
#include "model.h"

typedef struct {
    int beam;           /* K >= 1; 1 = greedy */
    float len_alpha;    /* alpha of the length penalty (0 = none) */
    int max_len_a;      /* max output tokens = input tokens + max_len_a */
    int max_out;        /* if > 0, also at most this many output tokens */
} DecodeOpts;

void decode_opts_from_config(DecodeOpts *o, const Config *c);
/* ((5+n)/6)^alpha */
double decode_length_penalty(int n, float alpha);
/* maximum output tokens (without EOS) for a source of src_tokens tokens
 * (without EOS) */
int decode_max_out(const Model *m, const DecodeOpts *o, int src_tokens);

typedef struct Decoder Decoder;

Decoder *decoder_create(Model *m);
void decoder_free(Decoder *d);

/* Translate every source of b (sources only are read).  Sentence k's tokens
 * (no EOS) go to out[k*out_stride ..], their count to out_len[k] (at most
 * out_stride), the normalised score to score[k] (may be NULL).  Returns the
 * number of decoder steps run. */
int decode_batch(Decoder *d, const Batch *b, const DecodeOpts *o, int32_t *out, int out_stride,
                 int *out_len, float *score);

/* Low-level incremental interface (used by decode_batch and by tests):
 * begin encodes b's sources and fills the cross-attention caches for K
 * hypotheses per sentence and up to t_max decoder positions; step feeds
 * token tok[r] of hypothesis r (r = sentence*K + j) at position t and
 * returns a view of the device's [n_sent*K, V] fp32 logits (log-probabilities if
 * log_probs); reorder makes new hypothesis r a copy of old hypothesis
 * parent[r] for positions 0..t, over the sentences keep[0..n_keep) (old
 * indices, increasing). */
void decoder_begin(Decoder *d, const Batch *b, int K, int t_max);
Act decoder_step(Decoder *d, const int32_t *tok, int t, int log_probs);
void decoder_reorder(Decoder *d, const int *parent, const int *keep, int n_keep, int t);

#endif
