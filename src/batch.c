#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

void batch_free(Batch *b)
{
    free(b->src); free(b->tgt_in); free(b->tgt_out);
    free(b->src_len); free(b->tgt_len); free(b->sent_id);
    memset(b, 0, sizeof *b);
}

void corpus_free(Corpus *c)
{
    void *arrays[6] = { c->src_off, c->tgt_off, c->src_tok, c->tgt_tok, c->src_tok16, c->tgt_tok16 };
    const char *lo = c->map, *hi = c->map ? lo + c->map_len : NULL;
    for (int k = 0; k < 6; k++)
        if (!c->map || (const char *)arrays[k] < lo || (const char *)arrays[k] >= hi) free(arrays[k]);
    if (c->map) munmap(c->map, c->map_len);
    memset(c, 0, sizeof *c);
}

/* n ids of one side from position at, widened to 32 bits */
static void copy_ids(int32_t *dst, const int32_t *w, const uint16_t *h, int64_t at, int n)
{
    if (w) memcpy(dst, w + at, sizeof(int32_t) * n);
    else for (int k = 0; k < n; k++) dst[k] = h[at + k];
}

void batch_build(Batch *b, const Corpus *c, const int *idx, int n, int max_len)
{
    int S = 1, T = 1;
    for (int k = 0; k < n; k++) {
        int ls = corpus_src_len(c, idx[k]) + 1, lt = corpus_tgt_len(c, idx[k]) + 1;
        if (ls > max_len) ls = max_len;
        if (lt > max_len) lt = max_len;
        if (ls > S) S = ls;
        if (lt > T) T = lt;
    }
    if (n > b->cap_B || (long)n * S > (long)b->cap_B * b->cap_S || (long)n * T > (long)b->cap_B * b->cap_T
        || S > b->cap_S || T > b->cap_T) {
        int cB = n > b->cap_B ? n : b->cap_B, cS = S > b->cap_S ? S : b->cap_S, cT = T > b->cap_T ? T : b->cap_T;
        b->src = xrealloc(b->src, sizeof(int32_t) * cB * cS);
        b->tgt_in = xrealloc(b->tgt_in, sizeof(int32_t) * cB * cT);
        b->tgt_out = xrealloc(b->tgt_out, sizeof(int32_t) * cB * cT);
        b->src_len = xrealloc(b->src_len, sizeof(int32_t) * cB);
        b->tgt_len = xrealloc(b->tgt_len, sizeof(int32_t) * cB);
        b->sent_id = xrealloc(b->sent_id, sizeof(uint32_t) * cB);
        b->cap_B = cB; b->cap_S = cS; b->cap_T = cT;
    }
    b->B = n; b->S = S; b->T = T;
    memset(b->src, 0, sizeof(int32_t) * n * S);
    memset(b->tgt_in, 0, sizeof(int32_t) * n * T);
    memset(b->tgt_out, 0, sizeof(int32_t) * n * T);
    b->n_src_tokens = b->n_tgt_tokens = 0;
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        int ls = corpus_src_len(c, i), lt = corpus_tgt_len(c, i);
        if (ls > max_len - 1) ls = max_len - 1;
        if (lt > max_len - 1) lt = max_len - 1;
        int32_t *s = b->src + (size_t)k * S, *ti = b->tgt_in + (size_t)k * T, *to = b->tgt_out + (size_t)k * T;
        copy_ids(s, c->src_tok, c->src_tok16, c->src_off[i], ls);
        s[ls] = TOK_EOS;
        ti[0] = TOK_BOS;
        copy_ids(ti + 1, c->tgt_tok, c->tgt_tok16, c->tgt_off[i], lt);
        memcpy(to, ti + 1, sizeof(int32_t) * lt);
        to[lt] = TOK_EOS;
        b->src_len[k] = ls + 1;
        b->tgt_len[k] = lt + 1;
        b->sent_id[k] = (uint32_t)i;
        b->n_src_tokens += ls + 1;
        b->n_tgt_tokens += lt + 1;
    }
}
