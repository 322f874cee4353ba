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
 * with row strides ldq, ldkv; P keeps the weights for backward */
void attention_core_forward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act Vv, int ldkv,
                            Act P, Act ctx, int Tq, int Tk, const int32_t *key_len, int causal);

/* from dctx, write dQ, dK, dV (with the same strides as Q, K, V); dP is
 * scratch of P's size */
void attention_core_backward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act Vv, int ldkv,
                             Act P, Act dP, Act dctx, Act dQ, Act dK, Act dV, int Tq, int Tk);

#endif
