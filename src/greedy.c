#include "greedy.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void greedy_decode(Model *m, const Batch *b, int max_out, int32_t *out, int *out_len)
{
    Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int B = b->B, d = c->d_model, V = c->vocab_size;
    if (max_out + 1 > model_positions(m)) max_out = model_positions(m) - 1;
    Batch w = {0};
    w.B = B; w.S = b->S; w.T = max_out + 1;
    w.src = b->src; w.src_len = b->src_len; w.sent_id = b->sent_id;
    w.tgt_in = xcalloc((size_t)B * w.T, sizeof(int32_t));
    w.tgt_out = xcalloc((size_t)B * w.T, sizeof(int32_t));
    w.tgt_len = xcalloc(B, sizeof(int32_t));
    model_reserve(m, B, w.S, w.T);
    int *done = xcalloc(B, sizeof(int));
    float *logit = xmalloc(sizeof(float) * V);
    Act dlog = act_f32(be->alloc(be, sizeof(float) * (size_t)B * V));   /* fp32 in every precision */
    if (!dlog.data)
        die(1, "greedy: out of device memory allocating %zu bytes of logits", sizeof(float) * (size_t)B * V);
    for (int k = 0; k < B; k++) { w.tgt_in[(size_t)k * w.T] = TOK_BOS; out_len[k] = 0; }
    int t;
    Act enc = act_none();
    for (t = 0; t < max_out; t++) {
        w.T = t + 1;
        /* repack tgt_in rows to the current width */
        int32_t *rows = xcalloc((size_t)B * w.T, sizeof(int32_t));
        for (int k = 0; k < B; k++) {
            rows[(size_t)k * w.T] = TOK_BOS;
            for (int j = 0; j < out_len[k] && j < t; j++) rows[(size_t)k * w.T + 1 + j] = out[(size_t)k * max_out + j];
            w.tgt_len[k] = w.T;
        }
        int32_t *save = w.tgt_in;
        w.tgt_in = rows;
        model_upload_batch(m, &w);
        w.tgt_in = save;
        free(rows);
        if (!enc.data) enc = model_encode(m, 0, 0);
        Act y = model_decode(m, enc, 0, 0);
        /* logits of the last position of every sentence: rows t, t+T, ... */
        be->gemm(be, 0, 1, B, V, d, 1.0f, act_at(y, (size_t)t * d), w.T * d, act_f32(m->params + m->pt.embedding), d,
                 0.0f, dlog, V);
        int all = 1;
        for (int k = 0; k < B; k++) {
            if (done[k]) continue;
            be->download_act(be, logit, act_at(dlog, (size_t)k * V), V);
            int best = TOK_EOS;
            for (int v = 0; v < V; v++)
                if (v != TOK_PAD && v != TOK_BOS && logit[v] > logit[best]) best = v;
            if (best == TOK_EOS) done[k] = 1;
            else out[(size_t)k * max_out + out_len[k]++] = best;
            if (out_len[k] == max_out) done[k] = 1;
            all &= done[k];
        }
        if (all) break;
    }
    be->free(be, dlog.data);
    free(logit);
    free(done);
    free(w.tgt_in);
    free(w.tgt_out);
    free(w.tgt_len);
}
