/* The backend-neutral op interface.  The model (model.c) is written only in
 * terms of these calls; the CPU backend (ops_cpu.c) is the reference and the
 * CUDA backend (cuda/ops_cuda.cu) implements the same table name for name.
 *
 * Conventions
 * - Every pointer argument is memory of the backend ("device memory"); only
 *   upload/download cross to the host.
 * - Matrices are row-major.  gemm computes C = alpha*op(A)*op(B) + beta*C with
 *   op(A) of shape MxK and op(B) KxN; transposes are expressed through the
 *   operands, never copied.
 * - Token activations are [rows = B*T, features], row b*T+t is position t of
 *   sentence b.  Sequences are right-padded; key_len[b] keys of sentence b are
 *   real, the rest padding.
 * - Dropout masks are recomputed from (DropoutKey, sentence id, position,
 *   feature) in backward: no mask is stored (see philox.h).
 * - Activations are typed views (Act: device address + element type), so
 *   that the element type is visible where an activation is used; the
 *   model offsets them with act_at.  Parameters, gradients, Adam moments,
 *   LayerNorm statistics and losses are plain fp32 (float *).  Every op
 *   computes in fp32 whatever the storage type.
 */
#ifndef OPS_H
#define OPS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "philox.h"

typedef struct Backend Backend;

/* attention over B sentences, h heads, key and value widths d_k and d_v
 * (attention.h) */
typedef struct { int B, h, dk, dv; } AttnShape;

/* what a fused attention forward kept for backward (Backend.attention_forward) */
enum { ATTN_DECLINED = 0, ATTN_KEPT_P = 1, ATTN_KEPT_STATS = 2 };

/* element type of an activation's storage: fp32, bf16 (CUDA
 * precision=bf16: fp32's exponent range with an 8-bit mantissa, half the
 * bytes) or fp16 (CUDA precision=fp16: an 11-bit significand but a range
 * of only 6e-8 .. 65504, hence loss scaling, loss_scale.h); ops load them
 * to fp32 and round stores to nearest even */
typedef enum { DT_F32, DT_BF16, DT_F16 } DType;

/* a typed view of activation memory: data is device memory of the backend
 * holding elements of type dtype (never dereferenced on the host) */
typedef struct {
    void *data;
    DType dtype;
} Act;

static inline size_t dtype_size(DType t) { return t == DT_F32 ? 4 : 2; }
/* fp32 memory (a parameter, gradient or plain buffer) as an operand */
static inline Act act_f32(float *p)
{
    Act a = { p, DT_F32 };
    return a;
}
/* the view elems elements further on */
static inline Act act_at(Act a, size_t elems)
{
    if (a.data) a.data = (char *)a.data + elems * dtype_size(a.dtype);
    return a;
}
static inline Act act_none(void)
{
    Act a = { NULL, DT_F32 };
    return a;
}

struct Backend {
    const char *name;
    void *impl;                 /* backend-private state */

    /* memory */
    void *(*alloc)(Backend *be, size_t bytes);            /* zero-filled */
    /* Activation storage for n elements (zero-filled), in the backend's
     * activation type act_dtype (CUDA precision=bf16: DT_BF16,
     * precision=fp16: DT_F16, else DT_F32); data is NULL on failure.  Freed with free(be, a.data). */
    Act (*alloc_act)(Backend *be, size_t n);
    DType act_dtype;
    /* Optional (NULL where unused): where the fp32 master weights live
     * (n floats at params), so that a backend with narrow GEMM inputs can
     * keep a converted shadow copy of them (CUDA bf16, fp16). */
    void (*set_params)(Backend *be, float *params, size_t n);
    /* device bytes currently held by alloc_act buffers (statistic for
     * tests and logs; 0 where the backend does not count) */
    size_t act_bytes;
    void (*free)(Backend *be, void *p);
    /* Optional (NULL where unknown, the CPU backend): free device memory
     * in bytes now (CUDA: cudaMemGetInfo), for max_tokens = 0 */
    size_t (*device_free)(Backend *be);
    /* Optional: the device's UUID (CUDA: cudaDeviceProp.uuid), so that the
     * ranks sharing one device find each other (device_peers.h); 0, or -1
     * where unknown */
    int (*device_uuid)(Backend *be, unsigned char uuid[16]);
    void (*upload)(Backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(Backend *be, void *host_dst, const void *src, size_t bytes);
    void (*zero)(Backend *be, void *p, size_t bytes);
    void (*copy)(Backend *be, void *dst, const void *src, size_t bytes);
    void (*sync)(Backend *be);
    /* the same for n elements of an activation, converting to/from the
     * host's fp32 (upload/download) or between element types (copy) */
    void (*upload_act)(Backend *be, Act dst, const float *host_src, size_t n);
    void (*download_act)(Backend *be, float *host_dst, Act src, size_t n);
    void (*zero_act)(Backend *be, Act p, size_t n);
    void (*copy_act)(Backend *be, Act dst, Act src, size_t n);

    /* C = alpha*op(A)*op(B) + beta*C (row-major); operands are activations
     * or fp32 weights/gradients (act_f32), in any mix of element types */
    void (*gemm)(Backend *be, int transA, int transB, int M, int N, int K,
                 float alpha, Act A, int lda, Act B, int ldb,
                 float beta, Act C, int ldc);
    /* n_outer*n_inner independent gemms; matrix (o,i) of X starts at
     * X + o*sX_outer + i*sX_inner (attention: outer = sentence, inner = head) */
    void (*gemm_batched)(Backend *be, int transA, int transB, int M, int N, int K, float alpha,
                         Act A, int lda, long sA_outer, long sA_inner,
                         Act B, int ldb, long sB_outer, long sB_inner, float beta,
                         Act C, int ldc, long sC_outer, long sC_inner, int n_outer, int n_inner);

    /* The feed-forward layer's GEMMs with their bias and ReLU (eq. 2),
     * which CUDA fuses into the GEMMs' epilogues (cuBLASLt); the CPU
     * backend's definitions are the unfused sequences named below.
     * Optional (NULL: none): the bytes of the ReLU mask that a rows x cols
     * linear_bias_forward with relu keeps for linear_relu_backward. */
    size_t (*relu_mask_bytes)(Backend *be, int rows, int cols);
    /* Y = X W^T + bias, with relu max(0, X W^T + bias): X [rows, in], W
     * [out, in] (fp32 weights), Y [rows, out], all packed; gemm(0, 1, ...)
     * then bias_forward.  mask: relu_mask_bytes of backend memory that
     * receives the ReLU mask, or NULL (none kept) */
    void (*linear_bias_forward)(Backend *be, Act Y, Act X, Act W, const float *bias, int rows, int in, int out,
                                int relu, void *mask);
    /* Backward through the ReLU output X of such a forward into the next
     * linear map: dX = (dY W) * (X > 0), dbias += column sums of dX; dY
     * [rows, out], W [out, in], dX and X [rows, in]; gemm(0, 0, ...) then
     * bias_backward with relu.  mask: the forward's, or NULL; it holds
     * where the fp32 value before the ReLU was > 0, which is X > 0 but
     * where a tiny positive value rounded to 0 in a 16-bit X */
    void (*linear_relu_backward)(Backend *be, Act dX, float *dbias, Act dY, Act W, Act X, const void *mask,
                                 int rows, int in, int out);
    /* Y[r,:] += bias; with relu: Y = max(0, Y + bias) (eq. 2) */
    void (*bias_forward)(Backend *be, Act Y, const float *bias, int rows, int cols, int relu);
    /* dbias += column sums of dY; with relu, first dY *= (Y > 0) in place
     * (Y unused without relu: act_none()) */
    void (*bias_backward)(Backend *be, Act dY, float *dbias, Act Y, int rows, int cols, int relu);

    /* Optional (NULL: none): the multi-head attention core of attention.c
     * (attention_core_forward / _backward, same arguments and results) in
     * fused kernels (CUDA: cuda/attention.cuh).  Each returns 0, having
     * done nothing, where the shape or the element types are beyond the
     * kernels' limits: the caller then runs the GEMM and softmax sequence.
     * Forward returns ATTN_KEPT_P when it stored the weights in P, or,
     * given stats ([B, h, Tq, 2] fp32, else NULL), ATTN_KEPT_STATS where
     * it stored only each row's softmax maximum and 1/sum there and its
     * backward recomputes P from Q, K and them (P is then left as it was:
     * issue 44, fewer memory-bound passes).  Backward with stats (the
     * forward's ATTN_KEPT_STATS) must run (it returns 1); without, it
     * reads P. */
    int (*attention_forward)(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act V, int ldkv, Act P, float *stats,
                             Act ctx, int Tq, int Tk, const int32_t *key_len, int causal);
    int (*attention_backward)(Backend *be, AttnShape s, Act Q, int ldq, Act K, Act V, int ldkv, Act P,
                              const float *stats, const int32_t *key_len, int causal, Act dP, Act dctx, Act dQ,
                              Act dK, Act dV, int Tq, int Tk);

    /* Attention weights, in place over S [n_batch, n_heads, Tq, Tk]:
     * P = softmax(scale*S) over keys k < key_len[b] (and k <= q + q_offset if
     * causal); masked entries are exactly 0.  (eq. 1) */
    void (*softmax_forward)(Backend *be, Act S, const int32_t *key_len, float scale,
                            int n_batch, int n_heads, int Tq, int Tk, int causal, int q_offset);
    /* dS = scale * P * (dP - sum_k P*dP), in place over dP */
    void (*softmax_backward)(Backend *be, Act dP, Act P, float scale,
                             int n_batch, int n_heads, int Tq, int Tk);

    /* r = x + dropout(sub); y = LayerNorm(r)*gamma + beta; keeps r, mean,
     * rstd for backward.  Row b*T+t uses dropout counter (sent_id[b], t).
     * (section 5.4, post-norm residual of section 3.1) */
    void (*residual_ln_forward)(Backend *be, Act y, Act r, float *mean, float *rstd,
                                Act x, Act sub, const float *gamma, const float *beta,
                                int rows, int d, float eps, float p_drop, DropoutKey key,
                                const uint32_t *sent_id, int T);
    /* dx = dr (residual path), dsub = dropout'(dr), dgamma/dbeta +=; dx may
     * alias dy.  dbias_sub (or NULL): += the column sums of dsub as stored,
     * the bias gradient of the sublayer's last linear map (the FFN's b2,
     * eq. 2), which CUDA sums in the same pass */
    void (*residual_ln_backward)(Backend *be, Act dx, Act dsub, float *dgamma, float *dbeta, float *dbias_sub,
                                 Act dy, Act r, const float *mean, const float *rstd,
                                 const float *gamma, int rows, int d, float p_drop, DropoutKey key,
                                 const uint32_t *sent_id, int T);
    /* Optional (NULL: every op's gradients are final when it returns).
     * defer_sums(be, 1): from now on the parameter gradients that the ops
     * above sum over rows (bias_backward, linear_relu_backward,
     * residual_ln_backward) may be left pending, to be added in one pass;
     * defer_sums(be, 0): add every pending sum into its gradient now, and
     * stop deferring.  The model defers during a backward and releases
     * before anything reads a gradient (the gradient hook, the end of
     * backward); the results are bitwise those without deferring. */
    void (*defer_sums)(Backend *be, int on);

    /* out[b,t] = dropout(E[tok]*scale + pos[t]) with pos the sinusoids of
     * section 3.5 (pos_table == NULL) or learned rows pos_table[t] */
    void (*embed_forward)(Backend *be, Act out, const float *E, const float *pos_table,
                          const int32_t *tokens, const uint32_t *sent_id, int B, int T, int d,
                          float scale, int pos_offset, float p_drop, DropoutKey key);
    /* dE[tok] += scale*dropout'(dout); dpos[t] += dropout'(dout) if learned;
     * deterministic (no atomics).  Rows of token 0 (padding) are zero in
     * the model's backward, so a backend may leave them out of dE[0]
     * (CUDA does: cuda/embed.cuh).  host_tokens: the same B*T ids in host
     * memory, or NULL; with them a backend can group positions by token
     * without reading device memory back (CUDA: no stream synchronisation) */
    void (*embed_backward)(Backend *be, float *dE, float *dpos, Act dout,
                           const int32_t *tokens, const int32_t *host_tokens, const uint32_t *sent_id, int B,
                           int T, int d, int vocab, float scale, float p_drop, DropoutKey key);

    /* Head gates (Michel et al. 2019): out[r, h*d_v + j] = gate[h] *
     * ctx[r, h*d_v + j], the heads' outputs scaled before W^O; out may alias
     * ctx.  gate: n_heads fp32 values.  x * 1.0f is exact, so gates at 1
     * leave the model bitwise unchanged. */
    void (*head_gate_forward)(Backend *be, Act out, Act ctx, const float *gate, int rows, int n_heads, int d_v);
    /* Backward of head_gate_forward, given dout (in dctx) and the ungated
     * ctx: dgate[h] += sum over rows and j of dout * ctx (if dgate is not
     * NULL; summed in a fixed order, deterministic), then dctx = gate[h] *
     * dout in place. */
    void (*head_gate_backward)(Backend *be, float *dgate, Act dctx, Act ctx, const float *gate, int rows,
                               int n_heads, int d_v);

    /* Label-smoothed cross-entropy (section 5.4) over logits [rows, V]:
     * q = (1-eps)*onehot(target) + eps/V.  Rows with target 0 (padding) give
     * 0.  Writes row_loss (smoothed) and row_nll (-log p(target)); if
     * grad_scale != 0 overwrites logits with grad_scale * (softmax - q). */
    void (*xent_forward_backward)(Backend *be, Act logits, const int32_t *target, int rows, int V,
                                  float eps, float grad_scale, float *row_loss, float *row_nll);

    /* Adam (section 5.3) with g = grad_scale*grad, bias-corrected at step t */
    void (*adam)(Backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                 float lr, float beta1, float beta2, float eps, int t, float grad_scale);

    /* decoding helpers: log_softmax of rows in place */
    void (*log_softmax)(Backend *be, Act x, int rows, int cols);

    /* 1 if any of the n floats at x is an inf or NaN, else 0 (loss
     * scaling: an overflowed gradient skips the step); synchronises */
    int (*any_nonfinite)(Backend *be, const float *x, size_t n);

    /* Optional data-parallel hooks, NULL where dist.c can run MPI on the
     * buffer itself (CPU).  allreduce_init(be, &mpi_comm) once;
     * allreduce_start sums n floats at p over the ranks, ordered after the
     * work issued so far and overlapping the work issued next (CUDA: NCCL on
     * a communication stream); allreduce_wait: every started sum is done
     * before any later op reads it.  allreduce_progress, where the sums
     * need polling to move (CUDA's MPI fallback; set by allreduce_init, NULL
     * for sums that progress by themselves): advances what was started and
     * returns 1 once all of it is done; dist.c calls it, never at the same
     * time as the other hooks, from its progress thread (which needs
     * MPI_THREAD_MULTIPLE) or else from gradsync_ready. */
    void (*allreduce_init)(Backend *be, const void *mpi_comm);
    void (*allreduce_start)(Backend *be, float *p, size_t n);
    void (*allreduce_wait)(Backend *be);
    int (*allreduce_progress)(Backend *be);
    int allreduce_timeout_s;   /* allreduce_wait's watchdog (watchdog_check; 0: none) */
    const char *allreduce_path; /* set by allreduce_init: what sums the gradients, in words */

    /* Optional (NULL: none; CUDA: cuda/graph.cuh, cuda/step_graph.cuh):
     * CUDA Graphs of a training step.  The model brackets a step's forward
     * and backward with graph_begin(key, step) .. graph_end: the device
     * work between them is run eagerly the first time key is seen,
     * captured the second, and replayed from the graphs later; key must
     * hold everything the step's calls depend on but the batch's contents
     * and the step, which the backend reads from device memory.
     * graph_break before the gradient hook (whose allreduce starts between
     * graphs); graph_reset when buffers a step used are freed;
     * graph_stats: steps eager, captured, replayed, shapes dropped.
     * graph_shapes: how many keys keep graphs (0: off; backend_create sets
     * it from cuda_graphs and cuda_graph_cache). */
    int graph_shapes;
    void (*graph_begin)(Backend *be, const int64_t *key, int n_key, uint32_t step);
    void (*graph_break)(Backend *be);
    void (*graph_end)(Backend *be);
    void (*graph_reset)(Backend *be);
    void (*graph_stats)(Backend *be, long stats[4]);

    void (*destroy)(Backend *be);
};

Backend *backend_cpu_create(int threads);
/* the CUDA backend (cuda/device.cuh; defined only in builds with nvcc):
 * the GPU of node-local rank local_rank, the config's precision and
 * gradient allreduce; NULL after a one-line message */
Backend *backend_cuda_create(Precision precision, Allreduce allreduce, int local_rank);
/* CUDA devices this process sees (0 on any error) */
int backend_cuda_device_count(void);
/* GPUs this process can use: 0 in a build without CUDA */
int backend_gpus_visible(void);
/* the backend c's device, precision and allreduce keys name; returns NULL
 * with a one-line message on failure */
Backend *backend_create(const Config *c, int threads, int local_rank);

#endif
