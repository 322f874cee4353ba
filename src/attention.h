/* The multi-head attention core (eq. 1 and section 3.2.2) over projected
 * Q, K, V, written against the op interface of ops.h: the training step
 * (model.c) and the op tests (tests/cuda/test_cuda_kernels.c) call the same
 * code. */
#ifndef ATTENTION_H
#define ATTENTION_H

#include "ops.h"

/* AttnShape (B sentences, h heads, d_k, d_v) is declared in ops.h */

/* 1/sqrt(d_k) of eq. 1, applied as the score GEMM's alpha */
float attention_scale(int dk);

/* ctx[b, t, head*d_v ..] = softmax(Q K^T / sqrt(d_k)) V, with Q, K, V stored
 * with row strides ldq, ldkv.  Returns 1 where P keeps the weights for
 * backward; with stats ([B, h, Tq, 2] fp32, or NULL) a fused backend may
 * keep only the rows' softmax statistics there and leave P as it was
 * (returns 0; backward then recomputes the weights: ops.h) */
int attention_core_forward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act Vv, int ldkv, Act P, float *stats,
                           Act ctx, int Tq, int Tk, const int32_t *key_len, int causal);

/* from dctx, write dQ, dK, dV (with the same strides as Q, K, V); dP is
 * scratch of P's size.  stats: the forward's where it returned 0, else
 * NULL (P holds the weights); key_len and causal as the forward's */
void attention_core_backward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act Vv, int ldkv, Act P,
                             const float *stats, const int32_t *key_len, int causal, Act dP, Act dctx, Act dQ,
                             Act dK, Act dV, int Tq, int Tk);

#endif
