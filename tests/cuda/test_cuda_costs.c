/* The GPU cost model's declarations (cuda/cost.cuh) against what the
 * kernels do: every launch, cuBLAS call and copy of a training step of a
 * small model, and of the ops a step does not use (log-softmax, head gates,
 * the overflow check, a widening copy), runs under the emulator with byte
 * counting on.  For each call the declared bytes (read + written) must be
 * within 10% of the distinct bytes the emulator saw it load and store
 * through ld()/st() (and cuBLAS's operands): the device-memory traffic when
 * caches serve every repeated access.  Every call must have a declaration
 * (the emulator stops at one without) and every declaration a call.
 *
 * The batch has no padding and no token twice within a side except BOS and
 * EOS: padding (softmax, cross-entropy) and repeated tokens (the embedding
 * gather) make real traffic smaller than declared, which the declarations
 * leave out as data-dependent.  The embedding gradient, which declares
 * what padding and repeats leave, runs again outside the step with both
 * (a token cut into chunks and combined).  The every-access count is printed per op
 * class: how much the caches absorb (LayerNorm reads its rows three times,
 * softmax and cross-entropy theirs three times, bias_forward its bias per
 * element; the step's FFN biases are fused into cuBLASLt GEMMs, so
 * bias_forward runs among the other ops). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/cost.h"
#include "../gradcheck_model.h"
#include "batch.h"
#include "model.h"
#include "small_model.h"
#include "util.h"

/* B pairs of L-1 tokens a side, all distinct within a side */
static void distinct_batch(Batch *b, int B, int L)
{
    int lens[64];
    for (int i = 0; i < B; i++) lens[i] = L - 1;
    Corpus c;
    gc_make_corpus(&c, lens, lens, B);
    for (int i = 0; i < B * (L - 1); i++) {
        c.src_tok[i] = TOK_FIRST_SYMBOL + i;
        c.tgt_tok[i] = TOK_FIRST_SYMBOL + B * (L - 1) - 1 - i;
    }
    int idx[64];
    for (int i = 0; i < B; i++) idx[i] = i;
    batch_build(b, &c, idx, B, L + 1);
    corpus_free(&c);
}

/* the ops outside the training step, on small shapes */
static void other_ops(Backend *be, int fp16)
{
    int rows = 10, nh = 3, dv = 11, n = rows * nh * dv;
    float host[330], gate[3] = { 1.0f, 0.0f, 0.5f };
    for (int i = 0; i < n; i++) host[i] = sinf((float)i);
    Act x = be->alloc_act(be, (size_t)n), y = be->alloc_act(be, (size_t)n);
    float *g = be->alloc(be, sizeof gate), *dg = be->alloc(be, sizeof gate), *f32 = be->alloc(be, sizeof(float) * n);
    be->upload(be, g, gate, sizeof gate);
    be->upload_act(be, x, host, (size_t)n);
    be->log_softmax(be, x, rows, nh * dv);
    be->head_gate_forward(be, y, x, g, rows, nh, dv);
    be->head_gate_backward(be, dg, y, x, g, rows, nh, dv);
    be->bias_forward(be, y, g, rows * nh * dv / 3, 3, 1);   /* the step fuses its biases into the GEMMs */
    if (x.dtype != DT_F32) be->copy_act(be, act_f32(f32), x, (size_t)n);   /* widening */
    if (fp16) be->any_nonfinite(be, f32, (size_t)n);
    /* the embedding gradient with padding and a token cut into chunks
     * (k_embed_backward_combine): the step's batch has neither */
    enum { EB = 2, ET = 40, ED = 36, EV = 97 };
    int32_t tok[EB * ET];
    for (int i = 0; i < EB * ET; i++) tok[i] = i % ET >= 35 ? 0 : i % 3 ? 5 : 6 + i;   /* token 5: 47 times */
    uint32_t sid[EB] = { 7, 9 };
    float eh[EB * ET * ED];
    for (int i = 0; i < EB * ET * ED; i++) eh[i] = cosf((float)i);
    Act dout = be->alloc_act(be, (size_t)EB * ET * ED);
    float *dE = be->alloc(be, sizeof(float) * EV * ED);
    int32_t *dtok = be->alloc(be, sizeof tok);
    uint32_t *dsid = be->alloc(be, sizeof sid);
    be->upload_act(be, dout, eh, (size_t)EB * ET * ED);
    be->upload(be, dtok, tok, sizeof tok);
    be->upload(be, dsid, sid, sizeof sid);
    be->zero(be, dE, sizeof(float) * EV * ED);
    be->embed_backward(be, dE, NULL, dout, dtok, tok, dsid, EB, ET, ED, EV, 6.0f, 0.1f, (DropoutKey){ 1, 2, 3 });
    be->free(be, dout.data);
    be->free(be, dE);
    be->free(be, dtok);
    be->free(be, dsid);
    be->free(be, x.data);
    be->free(be, y.data);
    be->free(be, g);
    be->free(be, dg);
    be->free(be, f32);
}

typedef struct {
    const char *op;
    long calls;
    double declared, seen, seen_all;
} Tally;

/* one precision: returns the number of failures */
static int check_precision(const char *precision)
{
    Config c;
    small_model_config(&c);
    c.vocab_size = 97;   /* every token of a side distinct */
    if (config_set(&c, "test", 0, "precision", precision)) exit(2);
    Backend *be = backend_cuda_create(c.precision, ALLREDUCE_NCCL, 0);
    if (!be) die(1, "cannot create the emulated CUDA backend");
    Model m;
    if (model_init(&m, &c.model, be)) die(1, "model_init failed");
    int fp16 = !strcmp(precision, "fp16");
    m.loss_scale = fp16 ? 1024.0f : 1.0f;
    Batch b = {0};
    distinct_batch(&b, 3, 12);
    for (int step = 1; step <= 2; step++) {   /* step 1 grows the buffers, unlogged */
        if (step == 2) {
            cuda_emu_count_bytes(1);
            cuda_cost_log(1);
        }
        be->zero(be, m.grads, sizeof(float) * m.pt.total);
        LossStats st = model_forward_backward(&m, &b, (uint32_t)step, 1, 1, NULL, NULL);
        model_adam_step(&m, step, (float)(1.0 / st.n_tokens / m.loss_scale));
    }
    other_ops(be, fp16);
    cuda_cost_log(0);
    cuda_emu_count_bytes(0);
    const CostCall *calls;
    size_t n = cuda_cost_calls(&calls);
    int failures = 0, nt = 0;
    Tally t[64];
    for (size_t i = 0; i < n; i++) {
        const CostCall *k = &calls[i];
        if (k->kind == COST_SYNC || k->kind == COST_COMM) continue;   /* no bytes of their own */
        double dec = k->rd + k->wr, seen = k->seen_rd + k->seen_wr;
        if (k->seen_rd < 0) {
            printf("FAIL %s %s (%s): declared, never ran\n", precision, k->call, k->op);
            failures++;
            continue;
        }
        if (!(fabs(dec - seen) <= 0.10 * seen)) {
            printf("FAIL %s %s (%s): declared %.0f + %.0f bytes, counted %.0f + %.0f (%+.1f%%)\n", precision, k->call,
                   k->op, k->rd, k->wr, k->seen_rd, k->seen_wr, 100 * (dec / seen - 1));
            failures++;
        }
        int j = 0;
        while (j < nt && strcmp(t[j].op, k->op)) j++;
        if (j == nt && nt < 64) t[nt++] = (Tally){ k->op, 0, 0, 0, 0 };
        if (j < 64) {
            t[j].calls++;
            t[j].declared += dec;
            t[j].seen += seen;
            t[j].seen_all += k->seen_rd_all + k->seen_wr_all;
        }
    }
    for (int j = 0; j < nt; j++)
        printf("     %-5s %-22s %4ld calls: declared %9.0f bytes, counted %9.0f (%+5.1f%%), every access %9.0f (%.1fx)\n",
               precision, t[j].op, t[j].calls, t[j].declared, t[j].seen, 100 * (t[j].declared / t[j].seen - 1),
               t[j].seen_all, t[j].seen_all / t[j].seen);
    printf("%s %s: %zu calls, declared bytes within 10%% of the counted ones\n", failures ? "FAIL" : "ok  ", precision, n);
    batch_free(&b);
    model_free(&m);
    be->destroy(be);
    return failures;
}

int main(void)
{
    int failures = 0;
    const char *precisions[] = { "fp32", "bf16", "fp16" };
    for (int i = 0; i < 3; i++) failures += check_precision(precisions[i]);
    printf("%s\n", failures ? "test_cuda_costs: FAILED" : "test_cuda_costs: all passed");
    return failures ? 1 : 0;
}
