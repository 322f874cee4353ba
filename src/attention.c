/* The multi-head attention core (eq. 1 and section 3.2.2); see attention.h */
#include "attention.h"

#include <math.h>

#include "util.h"

float attention_scale(int dk) { return 1.0f / sqrtf((float)dk); }

int attention_core_forward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act Vv, int ldkv, Act P, float *stats,
                           Act ctx, int Tq, int Tk, const int32_t *key_len, int causal)
{
    int kept = be->attention_forward ? be->attention_forward(be, s, Q, ldq, K, Vv, ldkv, P, stats, ctx, Tq, Tk,
                                                             key_len, causal)
                                     : ATTN_DECLINED;
    if (kept != ATTN_DECLINED) return kept == ATTN_KEPT_P;
    int B = s.B, h = s.h, dk = s.dk, dv = s.dv, hv = h * dv;
    /* scaled as the GEMM stores the scores (alpha), not in the softmax:
     * 16-bit scores then overflow only where softmax's own argument would
     * (fp16: 65504), not sqrt(d_k) times sooner */
    be->gemm_batched(be, 0, 1, Tq, Tk, dk, attention_scale(dk), Q, ldq, (long)Tq * ldq, dk, K, ldkv, (long)Tk * ldkv, dk,
                     0.0f, P, Tk, (long)h * Tq * Tk, (long)Tq * Tk, B, h);
    be->softmax_forward(be, P, key_len, 1.0f, B, h, Tq, Tk, causal, 0);
    be->gemm_batched(be, 0, 0, Tq, dv, Tk, 1.0f, P, Tk, (long)h * Tq * Tk, (long)Tq * Tk, Vv, ldkv,
                     (long)Tk * ldkv, dv, 0.0f, ctx, hv, (long)Tq * hv, dv, B, h);
    return 1;
}

void attention_core_backward(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act Vv, int ldkv, Act P,
                             const float *stats, const int32_t *key_len, int causal, Act dP, Act dctx, Act dQ,
                             Act dK, Act dV, int Tq, int Tk)
{
    if (be->attention_backward && be->attention_backward(be, s, Q, ldq, K, Vv, ldkv, P, stats, key_len, causal, dP,
                                                         dctx, dQ, dK, dV, Tq, Tk))
        return;
    if (stats) die(1, "attention backward: the forward kept only the softmax statistics, and the backend declined "
                   "to recompute the weights from them");
    int B = s.B, h = s.h, dk = s.dk, dv = s.dv, hv = h * dv;
    long sP = (long)h * Tq * Tk, sPi = (long)Tq * Tk;
    /* dP = dctx V^T ; dV = P^T dctx */
    be->gemm_batched(be, 0, 1, Tq, Tk, dv, 1.0f, dctx, hv, (long)Tq * hv, dv, Vv, ldkv, (long)Tk * ldkv, dv,
                     0.0f, dP, Tk, sP, sPi, B, h);
    be->gemm_batched(be, 1, 0, Tk, dv, Tq, 1.0f, P, Tk, sP, sPi, dctx, hv, (long)Tq * hv, dv,
                     0.0f, dV, ldkv, (long)Tk * ldkv, dv, B, h);
    be->softmax_backward(be, dP, P, 1.0f, B, h, Tq, Tk);
    /* dQ = dS K / sqrt(d_k) ; dK = dS^T Q / sqrt(d_k): the forward's alpha */
    be->gemm_batched(be, 0, 0, Tq, dk, Tk, attention_scale(dk), dP, Tk, sP, sPi, K, ldkv, (long)Tk * ldkv, dk,
                     0.0f, dQ, ldq, (long)Tq * ldq, dk, B, h);
    be->gemm_batched(be, 1, 0, Tk, dk, Tq, attention_scale(dk), dP, Tk, sP, sPi, Q, ldq, (long)Tq * ldq, dk,
                     0.0f, dK, ldkv, (long)Tk * ldkv, dk, B, h);
}
