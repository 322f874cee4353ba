/* Finite-difference helpers that need the model (header-only, included by
 * tests/test_grad_model.c and tests/test_grad_heads.c): a small corpus, and
 * the ReLU-pattern guard of central differences. */
#ifndef GRADCHECK_MODEL_H
#define GRADCHECK_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "gradcheck.h"
#include "model.h"
#include "util.h"

/* n sentence pairs of the given lengths (without BOS/EOS), random symbols
 * among the first 7 (vocab_size >= TOK_FIRST_SYMBOL + 7) */
static inline void gc_make_corpus(Corpus *c, const int *src_len, const int *tgt_len, int n)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->src_off = calloc(n + 1, sizeof(int64_t));
    c->tgt_off = calloc(n + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        c->src_off[i + 1] = c->src_off[i] + src_len[i];
        c->tgt_off[i + 1] = c->tgt_off[i] + tgt_len[i];
    }
    c->src_tok = malloc(sizeof(int32_t) * c->src_off[n]);
    c->tgt_tok = malloc(sizeof(int32_t) * c->tgt_off[n]);
    for (int i = 0; i < c->src_off[n]; i++) c->src_tok[i] = TOK_FIRST_SYMBOL + (int)((gc_rand() + 1) * 3.5);
    for (int i = 0; i < c->tgt_off[n]; i++) c->tgt_tok[i] = TOK_FIRST_SYMBOL + (int)((gc_rand() + 1) * 3.5);
}

/* Hash of the ReLU pattern (which hidden units of eq. 2 are active) of the
 * last forward: a central difference whose two sides differ in it crossed a
 * kink of max(0, .) and is not a derivative; it is redone with a smaller
 * step. */
static inline uint64_t gc_relu_pattern(Backend *be, Model *m)
{
    uint64_t h = 0;
    int dff = m->cfg.d_ff;
    size_t ns = (size_t)m->B * m->S * dff, nt = (size_t)m->B * m->T * dff;
    float *buf = malloc(sizeof(float) * (ns > nt ? ns : nt));
    unsigned char *bit = malloc(ns > nt ? ns : nt);
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int k = 0; k < 2; k++) {
            size_t n = k ? nt : ns;
            be->download_act(be, buf, k ? m->dec[l].hid : m->enc[l].hid, n);
            for (size_t i = 0; i < n; i++) bit[i] = buf[i] > 0.0f;
            h = fnv1a64(bit, n, h);
        }
    free(buf);
    free(bit);
    return h;
}

#endif
