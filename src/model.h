/* The encoder-decoder Transformer of "Attention Is All You Need" (sections 3
 * and 5), written against the op interface of ops.h.
 *
 * Parameters live in one contiguous buffer described by a table of named
 * tensors; gradients and Adam moments use the same layout.  The buffer is
 * ordered as backward finalises gradients: decoder layers N-1..0, encoder
 * layers N-1..0, learned positions, then the shared embedding (the source
 * embedding, target embedding and pre-softmax projection all add into it, so
 * it is final last).  Gradient buckets are therefore contiguous ranges. */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "config.h"
#include "ops.h"

#define PARAM_NAME 96

typedef struct {
    char name[PARAM_NAME];   /* e.g. "decoder/layer_02/cross_attention/W_k" */
    int rows, cols;          /* cols == 1 for vectors */
    size_t offset, numel;    /* in floats, into the flat buffer */
    int init;                /* PARAM_INIT_* */
} ParamInfo;

enum { PARAM_INIT_XAVIER, PARAM_INIT_NORMAL, PARAM_INIT_ZERO, PARAM_INIT_ONE };

/* Offsets (in floats) of one attention sub-layer.  W_q, W_k, W_v are stored
 * adjacently as [h*d_k | h*d_k | h*d_v] x d_model rows, so one GEMM projects
 * all three (self-attention) or K and V (encoder-decoder attention). */
typedef struct { size_t Wq, Wk, Wv, Wo; } AttnOffsets;
typedef struct { size_t gamma, beta; } NormOffsets;
typedef struct { size_t W1, b1, W2, b2; } FfnOffsets;

typedef struct {
    AttnOffsets self_attn, cross_attn;   /* cross_attn unused in the encoder */
    NormOffsets ln1, ln2, ln3;           /* ln3 unused in the encoder */
    FfnOffsets ffn;
} LayerOffsets;

typedef struct {
    int n;
    ParamInfo *t;
    size_t total;            /* floats */
    LayerOffsets *enc, *dec; /* [N] */
    size_t embedding;        /* [V, d_model] shared (section 3.4) */
    size_t pos_embedding;    /* [max_len, d_model] when positional=learned */
    int has_pos;
    size_t enc_begin, emb_begin; /* buffer: [0,enc_begin) decoder, [enc_begin,emb_begin) encoder */
} ParamTable;

void param_table_build(ParamTable *pt, const ModelConfig *c);
void param_table_free(ParamTable *pt);
/* deterministic initialisation on the host from cfg->seed (Philox) */
void param_init_host(const ParamTable *pt, const ModelConfig *c, float *host);

/* Saved activations of one layer for backward (typed views, ops.h; bf16 on
 * CUDA with precision=bf16), and the fp32 LayerNorm row statistics m*
 * (mean) and s* (rstd) */
typedef struct {
    Act qkv, P, ctx, r1, x1;            /* self-attention */
    Act q2, kv2, P2, ctx2, r2, x2;      /* cross-attention (decoder) */
    Act hid, r3, x3;                    /* feed-forward */
    void *relu_mask;                    /* hid's ReLU mask (ops.h relu_mask_bytes) or NULL */
    float *m1, *s1, *m2, *s2, *m3, *s3;
    /* the attention softmax's row statistics [B, h, T, 2] (self: Pst,
     * cross: P2st), where a fused forward keeps them instead of P for a
     * backward that recomputes the weights (attention.h); P_kept, P2_kept:
     * whether the last forward stored P (1) or only these (0) */
    float *Pst, *P2st;
    int P_kept, P2_kept;
} LayerActs;

/* Called by backward whenever the gradients of buffer range [0, hi) are
 * final (hi only grows, up to pt.total); the MPI layer starts bucket
 * allreduces here while backward goes on. */
typedef void (*GradReadyFn)(void *ctx, size_t hi);

typedef struct Model {
    ModelConfig cfg;     /* what it is built from; the run's settings are not here */
    Backend *be;
    ParamTable pt;
    float *params, *grads, *adam_m, *adam_v;   /* device, pt.total floats each */
    float loss_scale;      /* backward differentiates loss_scale x the loss (loss_scale.h; 1 = off) */
    float *sinusoid;       /* [model_positions, d_model] fixed encodings (positional=sinusoid) */

    /* device copies of the current batch: views into d_batch, which one
     * upload fills from h_batch (model_upload_batch) */
    int B, S, T;
    int32_t *d_src, *d_tgt_in, *d_tgt_out, *d_src_len, *d_tgt_len;
    uint32_t *d_sent_id;
    int32_t *d_batch, *h_batch;   /* device; host staging, the same layout */

    /* activations, sized by model_reserve */
    size_t cap_ns, cap_nt, cap_pss, cap_ptt, cap_pts, cap_B;
    Act enc_in, dec_in;
    LayerActs *enc, *dec;
    int attn_stats;   /* 1 while a training forward runs: attention may keep row statistics for P */
    Act logits;   /* [logits_rows, V]: one chunk of target rows (model_logits_rows) */
    size_t logits_rows;
    float *row_loss, *row_nll;
    Act g_x, g_sub, g_big, g_ctx, g_P, g_hid;  /* backward scratch */
    Act g_enc;   /* dL/d(encoder output), summed over the decoder layers: fp32 always */
    float *h_row_loss, *h_row_nll;                              /* host */

    /* Head gates (head_mask.h layout), device fp32: gates multiplies each
     * head's output before W^O; gate_grad accumulates dL/dgate in backward
     * when allocated (model_track_gate_grads).  Both NULL for a plain
     * model: the attention blocks then skip the gate ops entirely. */
    float *gates, *gate_grad;
} Model;

typedef struct {
    double loss_sum;   /* label-smoothed loss summed over target tokens */
    double nll_sum;    /* -log p(reference) summed (for perplexity) */
    long n_tokens;     /* non-padding target tokens */
} LossStats;

int model_init(Model *m, const ModelConfig *c, Backend *be);
/* model_init without drawing the initial parameters (their buffer holds what
 * the backend's allocation left): for the cost model's dry runs
 * (tests/gpu/gpu_model.c), where no value is read and drawing a big
 * model's 200M normals was most of a call's time */
int model_init_undrawn(Model *m, const ModelConfig *c, Backend *be);
void model_free(Model *m);
/* Forward (training if p_drop from cfg, or eval with dropout off), and with
 * do_backward accumulate (+=) the gradients of the *summed* loss (times m->loss_scale) into
 * m->grads.  The caller scales by 1/global target tokens (in Adam). */
LossStats model_forward_backward(Model *m, const Batch *b, uint32_t step, int train, int do_backward,
                                 GradReadyFn ready, void *ready_ctx);
/* lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (eq. 3),
 * times lr_factor, or scaled to peak at lr_peak; lr_decay linear or cosine
 * replace the step^-0.5 part by a decay to lr_final at train_steps */
float model_lrate(const ModelConfig *c, int step);
/* Adam update of all parameters with grads scaled by grad_scale */
void model_adam_step(Model *m, int step, float grad_scale);
/* PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(...)  (section 3.5) */
void positional_sinusoids(float *host, int max_len, int d);
/* Set the head gates from host values (HEAD_KINDS * n_layers * n_heads,
 * head_mask.h); model_init sets them from cfg.mask_heads when it masks a head */
void model_set_head_gates(Model *m, const float *host_gates);
/* Gates from a mask_heads value (head_mask.h): 0 for the masked heads, 1
 * for the others; also recorded in m->cfg.  0, or 2 after a one-line error
 * naming origin (a file, "command line"). */
int model_mask_heads(Model *m, const char *spec, const char *origin);
/* From now on backward adds dL/dgate into m->gate_grad (zeroed here) */
void model_track_gate_grads(Model *m);
/* the output projection of an attention sub-layer: out = gate(ctx) W_o^T,
 * ctx [rows, h*d_v], with the gates of (kind, layer) if the model has gates;
 * scratch holds the gated ctx (may be ctx itself: gated in place) */
void model_attn_output(Model *m, int kind, int layer, Act ctx, Act scratch, size_t Wo, Act out, int rows);
/* rows (target tokens) of one chunk of the pre-softmax projection and
 * cross-entropy for a batch of nt target tokens: at most nt, at most
 * logits_chunk, or (logits_chunk = 0) as many as keep the [rows, V] logits
 * within MODEL_LOGITS_ELEMS elements; at least 1 when nt >= 1.  2^27:
 * 256 MiB of bf16 logits, V = 37000 in chunks of 3627 tokens, which cost
 * a base step 1% more time (each chunk re-reads E and reads and writes
 * dE; docs/performance.md) where 2^26 would cost 1.8% */
#define MODEL_LOGITS_ELEMS ((size_t)1 << 27)
size_t model_logits_rows(const ModelConfig *c, size_t nt);

/* Pieces used by decoding (decode.c) and attention maps (attention.c) */
void model_upload_batch(Model *m, const Batch *b);
void model_reserve(Model *m, int B, int S, int T);
/* free every buffer model_reserve made (the next batch reserves afresh) */
void model_release_acts(Model *m);
/* positions of section 3.5: the learned table, or the sinusoids computed once
 * at model_init (ops would otherwise evaluate sin/cos per element) */
const float *model_pos_table(const Model *m);
/* rows of that table: max_len learned positions; twice that many sinusoids,
 * which extrapolate (section 3.5), so that decoding can run to the paper's
 * input length + 50 for inputs near max_len */
int model_positions(const Model *m);
/* encoder over the uploaded batch: output in m->enc[N-1].x3 (eval: no dropout) */
Act model_encode(Model *m, int train, uint32_t step);
/* decoder over the uploaded batch's tgt_in; returns the last layer output [B*T, d] */
Act model_decode(Model *m, Act enc_out, int train, uint32_t step);

#endif
