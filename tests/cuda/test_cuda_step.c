/* A whole training step of the CUDA backend (run by the CPU emulator of
 * cuda/emu/) against the CPU backend: the same model, batch and dropout
 * masks; forward, backward with the bucketed gradient allreduce of
 * dist.c, then Adam.  Compares the loss, every named gradient tensor and
 * every parameter after the update.  Run with 1 rank (make test) and with
 * 2 ranks (tests/test_cuda_step_mpi.sh): each rank takes its own sentences,
 * so the gradients compared are the allreduced sums.
 * Both positional encodings (sinusoid, learned), d_k != d_v != d_model/h.
 *
 * Then the same with precision=bf16 (bf16 activations and GEMM inputs, fp32
 * master weights, gradients and Adam moments), with tolerances from bf16's
 * rounding (see check_lowp): the loss, each gradient tensor by its relative
 * norm error, the Adam update of each tensor (which bf16 master weights
 * could not even represent at lr ~2e-6), and the activation memory, which
 * must be exactly half that of precision=fp32.
 *
 * Then precision=fp16 the same way, with the loss scaled by S = 1024 before
 * backward (model.loss_scale, as train.c does) and Adam dividing by it
 * again: the gradients compared are the scaled ones divided by S, with
 * tolerances from fp16's rounding (see check_lowp); and an fp16 step whose
 * attention scores pass 65504 before the 1/sqrt(d_k) scale (check_big_scores).
 *
 * Arguments: allreduce=nccl|mpi (the gradient sums), big-scores (also
 * check_big_scores), positional=sinusoid|learned (that encoding alone: the
 * runs of tests/test_cuda_emu.sh that vary a path the encoding does not
 * reach, the allreduce or the GEMM epilogues, each take half the time). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "dist.h"
#include "model.h"
#include "small_model.h"
#include "synthetic.h"
#include "util.h"

/* the emulator's thread-order switch; absent (NULL) in the real-GPU build of
 * this test (make gpu-test) */
int cuda_emu_set_order(const char *spec) __attribute__((weak));
static void set_order(const char *spec)
{
    if (cuda_emu_set_order) cuda_emu_set_order(spec);
}

typedef struct {
    double loss, nll;
    long ntok;
    float *grads, *params, *init;   /* init: parameters before Adam */
    size_t act_bytes;               /* the backend's activation bytes */
    long pad_rows, pad_nonzero;     /* embed_backward's rows of dout at padding, and those not all zero */
} StepOut;

/* embed_backward interposed: the rows of dout at padding counted, and
 * those with any element not exactly zero.  The CUDA backend leaves them
 * out of dE[0] because backward makes them zero (cuda/embed.cuh); the
 * CPU adds them. */
typedef void (*EmbedBackwardFn)(Backend *, float *, float *, Act, const int32_t *, const int32_t *, const uint32_t *,
                                int, int, int, int, float, float, DropoutKey);
static EmbedBackwardFn embed_backward_orig;
static long pad_rows, pad_nonzero;
static void embed_backward_padcheck(Backend *be, float *dE, float *dpos, Act dout, const int32_t *tokens,
                                    const int32_t *host_tokens, const uint32_t *sent_id, int B, int T, int d,
                                    int vocab, float scale, float p, DropoutKey key)
{
    if (!host_tokens) die(1, "test_cuda_step: embed_backward without the host's token ids");
    size_t n = (size_t)B * T * d;
    float *h = xmalloc(sizeof(float) * n);
    be->download_act(be, h, dout, n);
    for (int i = 0; i < B * T; i++) {
        if (host_tokens[i] != TOK_PAD) continue;
        pad_rows++;
        int nz = 0;
        for (int j = 0; j < d; j++) nz |= h[(size_t)i * d + j] != 0.0f;
        pad_nonzero += nz;
    }
    free(h);
    embed_backward_orig(be, dE, dpos, dout, tokens, host_tokens, sent_id, B, T, d, vocab, scale, p, key);
}
/* where set, run_step's parameters instead of the initial ones */
static const float *params_override;

/* one step; backward differentiates loss_scale x the loss, and the
 * gradients returned are divided by it again (exact: a power of two) */
static StepOut run_step(Dist *D, const Config *c, Backend *be, const Batch *b, float loss_scale)
{
    Model m;
    if (model_init(&m, &c->model, be)) die(1, "model_init failed");
    if (params_override) be->upload(be, m.params, params_override, sizeof(float) * m.pt.total);
    m.loss_scale = loss_scale;
    GradSync gs;
    gradsync_init(&gs, D, &m.pt, m.grads, 4096);   /* small buckets: many allreduces during backward */
    gradsync_use_backend(&gs, be);                  /* CUDA: (emulated) NCCL on device memory */
    /* as train does: the thread polls the MPI sums (CPU, CUDA's MPI fallback) */
    gradsync_start_progress(&gs, 50);
    be->zero(be, m.grads, sizeof(float) * m.pt.total);
    embed_backward_orig = be->embed_backward;
    be->embed_backward = embed_backward_padcheck;
    pad_rows = pad_nonzero = 0;
    LossStats st = model_forward_backward(&m, b, 3, 1, 1, D->size > 1 ? gradsync_ready : NULL, &gs);
    be->embed_backward = embed_backward_orig;
    gradsync_finish(&gs);
    double loc[3] = { st.loss_sum, st.nll_sum, (double)st.n_tokens }, glob[3];
    MPI_Allreduce(loc, glob, 3, MPI_DOUBLE, MPI_SUM, D->comm);
    StepOut o = { glob[0], glob[1], (long)glob[2], xmalloc(sizeof(float) * m.pt.total),
                  xmalloc(sizeof(float) * m.pt.total), xmalloc(sizeof(float) * m.pt.total), be->act_bytes, pad_rows,
                  pad_nonzero };
    if (be->any_nonfinite(be, m.grads, m.pt.total)) die(1, "%s: gradients overflowed at loss scale %g", be->name, loss_scale);
    be->download(be, o.grads, m.grads, sizeof(float) * m.pt.total);
    for (size_t i = 0; i < m.pt.total; i++) o.grads[i] /= loss_scale;
    be->download(be, o.init, m.params, sizeof(float) * m.pt.total);
    /* several Adam steps so that the update is well above rounding */
    for (int t = 1; t <= 3; t++) model_adam_step(&m, t, (float)(1.0 / glob[2] / loss_scale));
    be->download(be, o.params, m.params, sizeof(float) * m.pt.total);
    gradsync_free(&gs);
    model_free(&m);
    return o;
}

static void step_config(Config *c, const char *positional)
{
    small_model_config(c);
    c->synth_vocab = 30;
    c->vocab_size = 37;
    c->synth_max_len = 13;
    c->warmup = 4000;   /* lr ~2e-6 per step, as the parameter tolerance below assumes */
    if (config_set(c, "test", 0, "positional", positional)) exit(2);
}

static double norm_err(const float *ref, const float *got, size_t n, double *ref_norm)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        e += d * d;
        r += (double)ref[i] * ref[i];
    }
    *ref_norm = sqrt(r);
    return sqrt(e);
}

/* precision=bf16 against the CPU (fp32) step.  Every stored activation and
 * every GEMM input is rounded to bf16 (relative error <= 2^-8 = 0.4%).  In
 * this small model at initialisation many weight-gradient entries are sums
 * of terms of both signs over 45 tokens, so the relative error of a whole
 * tensor is far above 0.2%: measured 5-9% per tensor in 2-norm, and the same
 * with bf16 GEMM inputs alone (fp32 storage), so it is the rounding of the
 * GEMM inputs, not the storage, that sets it.  Tolerances: loss 1e-2
 * relative (measured ~1e-4); each gradient tensor 0.2 relative in 2-norm,
 * all gradients together 0.1 (measured 2-4%; a dropped, doubled or
 * misrouted term gives O(1)).  Adam must run on fp32 master weights and moments: the parameters
 * after 3 steps must equal a host fp32 Adam applied to the bf16 run's own
 * gradients (an update of ~2e-6 per step would be lost entirely on a bf16
 * weight of magnitude ~0.1, whose spacing is ~5e-4). */
/* precision=fp16: the same checks and tolerances.  fp16 rounds 8x finer
 * than bf16 (11 significant bits), and the tensors whose gradients do not
 * pass a ReLU in backward (the last decoder layer's W_2, b_2, ffn_norm)
 * are 6-8x closer than bf16's; the others are dominated by ReLU units whose
 * pre-activation lies within rounding of zero (a flipped mask drops a
 * whole term), which shrinks only like the square root of the rounding:
 * measured 1.8-2% overall, worst tensor 3-4% (bf16: 2-4%, 6-8%).  The
 * loss scale is exact: S = 1, 64, 1024 and 16384 give the same unscaled
 * gradients bit for bit; S = 32768 overflows the logits' gradient
 * (|dz| <= S > 65504 / 2), which run_step reports. */
static int check_lowp(Dist *D, const Config *c, const ParamTable *pt, const char *pos, const char *prec,
                      const StepOut *r, const StepOut *g, const StepOut *g32)
{
    int failures = 0;
    double le = fabs(r->loss - g->loss) / fabs(r->loss);
    int ok = le < 1e-2 && r->ntok == g->ntok;
    failures += !ok;
    if (D->rank == 0)
        printf("%s ranks %d positional %s %s: loss cpu %.7f cuda-%s %.7f (rel %.1e)\n", ok ? "ok  " : "FAIL",
               D->size, pos, prec, r->loss / r->ntok, prec, g->loss / g->ntok, le);
    /* activations: exactly half the bytes of the fp32 backend */
    ok = g32->act_bytes > 0 && 2 * g->act_bytes == g32->act_bytes;
    failures += !ok;
    if (D->rank == 0)
        printf("%s ranks %d positional %s %s: activation memory %zu bytes, fp32 %zu bytes (ratio %.3f)\n",
               ok ? "ok  " : "FAIL", D->size, pos, prec, g->act_bytes, g32->act_bytes,
               (double)g->act_bytes / (double)(g32->act_bytes ? g32->act_bytes : 1));
    int bad = 0;
    double worst = 0, all_err = 0, all_ref = 0;
    const char *wname = "";
    for (int t = 0; t < pt->n; t++) {
        const ParamInfo *p = &pt->t[t];
        double rn, err = norm_err(r->grads + p->offset, g->grads + p->offset, p->numel, &rn);
        double rel = err / (rn > 0 ? rn : 1);
        all_err += err * err;
        all_ref += rn * rn;
        if (!(rel <= 0.2)) {
            bad++;
            if (D->rank == 0) printf("FAIL   %s grad %s: relative norm error %.3g (|ref| %.3g)\n", prec, p->name, rel, rn);
        }
        if (rel > worst) { worst = rel; wname = p->name; }
    }
    double all = sqrt(all_err / all_ref);
    bad += !(all <= 0.1);
    failures += bad > 0;
    if (D->rank == 0)
        printf("%s ranks %d positional %s %s: gradients of %d tensors, relative norm error %.2e overall, worst "
               "tensor %.2e (%s)\n", bad ? "FAIL" : "ok  ", D->size, pos, prec, pt->n, all, worst, wname);
    /* fp32 master weights: host fp32 Adam from the run's own gradients */
    size_t n = pt->total;
    float *p = xmalloc(sizeof(float) * n), *m = xcalloc(n, sizeof(float)), *v = xcalloc(n, sizeof(float));
    memcpy(p, g->init, sizeof(float) * n);
    float gs = (float)(1.0 / g->ntok);
    for (int t = 1; t <= 3; t++) {
        float lr = model_lrate(&c->model, t), b1 = c->adam_beta1, b2 = c->adam_beta2;
        float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
        for (size_t i = 0; i < n; i++) {
            float gi = g->grads[i] * gs;
            m[i] = b1 * m[i] + (1.0f - b1) * gi;
            v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
            p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + c->adam_eps);
        }
    }
    double err = 0, upd = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)p[i] - g->params[i]));
        upd = fmax(upd, fabs((double)p[i] - g->init[i]));
    }
    ok = upd > 0 && err <= 1e-3 * upd;
    failures += !ok;
    if (D->rank == 0)
        printf("%s ranks %d positional %s %s: parameters after 3 Adam steps = fp32 Adam on fp32 masters: max error "
               "%.2e of max update %.2e\n", ok ? "ok  " : "FAIL", D->size, pos, prec, err, upd);
    free(p);
    free(m);
    free(v);
    return failures;
}

/* every row of the embedding gradient at padding exactly zero, and some
 * such rows (the batch is padded) */
static int check_pad_rows(Dist *D, const char *pos, const char *what, const StepOut *o)
{
    int ok = o->pad_rows > 0 && o->pad_nonzero == 0;
    if (D->rank == 0)
        printf("%s ranks %d positional %s %s: %ld rows of the embedding gradient at padding, %ld not exactly zero\n",
               ok ? "ok  " : "FAIL", D->size, pos, what, o->pad_rows, o->pad_nonzero);
    return !ok;
}

static void step_free(StepOut *o)
{
    free(o->grads);
    free(o->params);
    free(o->init);
}

/* The pre-softmax projection and cross-entropy in chunks of 7 target rows
 * (logits_chunk: 9 to 11 chunks of this batch) against one chunk (the default,
 * 2^27 / V rows), in fp32.  Each row's softmax needs only its own row, so
 * the losses and gradients are the same sums; but OpenBLAS (the CPU
 * backend, and the emulator's cuBLAS) and cuBLAS pick their kernel by the
 * GEMM's shape, and a 7-row GEMM takes edge kernels that round a row's
 * logits differently (an ulp, 6e-8), and dE += dlogits^T y sums the rows
 * chunk by chunk (beta = 1).  Tolerances: the loss 1e-6 relative, every
 * gradient tensor 1e-5 of its largest entry (measured: loss 2e-8, worst
 * tensor 7e-7); a row lost, doubled or at the wrong offset gives O(1). */
static int check_chunks(Dist *D, const Config *c, Backend *be, const Batch *b, const StepOut *one, const ParamTable *pt)
{
    Config cc = *c;
    cc.logits_chunk = 7;
    StepOut s = run_step(D, &cc, be, b, 1.0f);
    double le = fmax(fabs(s.loss - one->loss) / fabs(one->loss), fabs(s.nll - one->nll) / fabs(one->nll));
    int bad = !(le <= 1e-6);
    double worst = 0;
    for (int t = 0; t < pt->n; t++) {
        const ParamInfo *p = &pt->t[t];
        double mx = 0, err = 0;
        for (size_t i = 0; i < p->numel; i++) {
            mx = fmax(mx, fabs(one->grads[p->offset + i]));
            err = fmax(err, fabs((double)s.grads[p->offset + i] - one->grads[p->offset + i]));
        }
        double rel = err / (mx > 0 ? mx : 1);
        worst = fmax(worst, rel);
        if (rel <= 1e-5) continue;
        bad++;
        if (D->rank == 0) printf("FAIL   %s logits_chunk=7 grad %s: max error %.3g of max |ref| %.3g\n", be->name, p->name, err, mx);
    }
    if (D->rank == 0)
        printf("%s ranks %d %s logits_chunk=7 vs one chunk: loss rel error %.1e, gradients of %d tensors, worst relative "
               "error %.2e\n", bad ? "FAIL" : "ok  ", D->size, be->name, le, pt->n, worst);
    step_free(&s);
    return bad > 0;
}

/* fp16 attention scores past 65504 before the 1/sqrt(d_k) scale, in a
 * whole step (issue 44: the kernel test caught that defect, this step did
 * not, its scores being small).  Encoder layer 0's W_K is set to its W_Q,
 * so that a row's largest score is its own |q|^2 (Cauchy-Schwarz), and
 * both are scaled so that the largest over every rank's batch, padding
 * included, is 2 x 65504 unscaled: 49517 scaled (d_k = 7), inside fp16.
 * Scaled before storing (alpha of the score GEMM), the fp16 step is
 * finite and near the CPU's; scaled after, its scores are inf and its
 * loss NaN.  Dropout off, so that the bound is exact.  Tolerances: loss
 * 1e-2 relative, all gradients together 0.1 in 2-norm, as check_lowp. */
static int check_big_scores(Dist *D, Config c, const Batch *b, Allreduce ar)
{
    c.dropout = 0;
    ParamTable pt;
    param_table_build(&pt, &c.model);
    float *h = xmalloc(sizeof(float) * pt.total), *Wq = h + pt.enc[0].self_attn.Wq, *Wk = h + pt.enc[0].self_attn.Wk;
    param_init_host(&pt, &c.model, h);
    int d = c.d_model, dk = c.d_k, hk = c.n_heads * dk;
    memcpy(Wk, Wq, sizeof(float) * hk * d);
    double big = 0, all;
    for (int i = 0; i < b->B * b->S; i++) {
        const float *e = h + pt.embedding + (size_t)b->src[i] * d, *pos = h + pt.pos_embedding + (size_t)(i % b->S) * d;
        for (int hd = 0; hd < c.n_heads; hd++) {
            double n2 = 0;
            for (int j = hd * dk; j < (hd + 1) * dk; j++) {
                double q = 0;
                for (int k = 0; k < d; k++) q += (double)Wq[(size_t)j * d + k] * (e[k] * sqrt((double)d) + pos[k]);
                n2 += q * q;
            }
            big = fmax(big, n2);
        }
    }
    MPI_Allreduce(&big, &all, 1, MPI_DOUBLE, MPI_MAX, D->comm);
    float f = (float)sqrt(2 * 65504.0 / all);
    for (size_t i = 0; i < (size_t)hk * d; i++) Wq[i] *= f, Wk[i] *= f;
    Backend *cpu = backend_cpu_create(1), *g16 = backend_cuda_create(PRECISION_FP16, ar, D->local_rank);
    if (!g16) die(1, "test_cuda_step: no fp16 backend");
    params_override = h;
    StepOut r = run_step(D, &c, cpu, b, 1.0f), g = run_step(D, &c, g16, b, 1024.0f);
    params_override = NULL;
    double le = fabs(r.loss - g.loss) / fabs(r.loss), rn, err = norm_err(r.grads, g.grads, pt.total, &rn);
    int ok = le <= 1e-2 && err <= 0.1 * rn;
    if (D->rank == 0)
        printf("%s ranks %d fp16, scores up to %.0f before the 1/sqrt(d_k) scale: loss cpu %.7f cuda-fp16 %.7f "
               "(rel %.1e), gradients relative norm error %.2e\n", ok ? "ok  " : "FAIL", D->size, 2 * 65504.0,
               r.loss / r.ntok, g.loss / g.ntok, le, err / rn);
    step_free(&r);
    step_free(&g);
    g16->destroy(g16);
    cpu->destroy(cpu);
    free(h);
    param_table_free(&pt);
    return !ok;
}

/* the gradients of step 3 on batch f, after steps 1 and 2 on b (same
 * shape), on a CUDA backend keeping graphs of `shapes` step shapes (0:
 * none); the graph statistics into st */
static float *graph_steps(Dist *D, const Config *c, const Batch *b, const Batch *f, int shapes, long st[4])
{
    Backend *be = backend_cuda_create(PRECISION_FP32, ALLREDUCE_AUTO, D->local_rank);
    if (!be) die(1, "test_cuda_step: no CUDA backend");
    be->graph_shapes = shapes;
    Model m;
    if (model_init(&m, &c->model, be)) die(1, "model_init failed");
    for (uint32_t step = shapes ? 1 : 3; step <= 3; step++) {
        be->zero(be, m.grads, sizeof(float) * m.pt.total);
        model_forward_backward(&m, step < 3 ? b : f, step, 1, 1, NULL, NULL);
    }
    float *g = xmalloc(sizeof(float) * m.pt.total);
    be->download(be, g, m.grads, sizeof(float) * m.pt.total);
    be->graph_stats(be, st);
    model_free(&m);
    be->destroy(be);
    return g;
}

/* CUDA Graphs: a replayed step whose embedding gradient needs more rows of
 * chunk sums than any step before.  Batch f is b (so its step replays b's
 * graphs) with every word made one token, cut into many chunks of
 * EMBED_CHUNK = 32 positions.  Those rows grow with the batch's tokens,
 * between two segments of the step (the embedding backward runs eagerly);
 * in the column sums' scratch, which the captured encoder segment holds,
 * the replay ended the run ("segment 1 of a replayed step differs from its
 * capture").  The replayed step must equal the same step without graphs,
 * bitwise.  Rank-local (no allreduce). */
static int check_graph_chunk_growth(Dist *D, const Config *c, const Corpus *corp)
{
    int B = 16, idx[16];
    for (int i = 0; i < B; i++) idx[i] = (D->rank * B + i) % corp->n;
    Batch b = { 0 }, f = { 0 };
    batch_build(&b, corp, idx, B, c->max_len);
    batch_build(&f, corp, idx, B, c->max_len);
    long word = 0;
    for (int i = 0; i < B * f.T; i++)
        if (f.tgt_in[i] >= TOK_FIRST_SYMBOL) f.tgt_in[i] = TOK_FIRST_SYMBOL, word++;
    for (int i = 0; i < B * f.S; i++)
        if (f.src[i] >= TOK_FIRST_SYMBOL) f.src[i] = TOK_FIRST_SYMBOL;
    /* the target's chunk rows against the column sums' largest need (2
     * quantities per column, 256 rows a chunk; cuda/gemm.cuh colsums) */
    int rows = B * (f.S > f.T ? f.S : f.T), cols = c->d_ff > c->d_model ? c->d_ff : c->d_model;
    long chunk_floats = (word + 31) / 32 * c->d_model, colsum_floats = 2L * ((rows + 255) / 256) * cols;
    long sg[4], se[4];
    float *gg = graph_steps(D, c, &b, &f, 4, sg), *ge = graph_steps(D, c, &b, &f, 0, se);
    ParamTable pt;
    param_table_build(&pt, &c->model);
    int same = !memcmp(gg, ge, sizeof(float) * pt.total);
    int ok = same && sg[0] == 1 && sg[1] == 1 && sg[2] == 1 && chunk_floats > colsum_floats;
    printf("%s rank %d graphs: a replayed step whose embedding gradient needs %ld floats of chunk sums (column sums "
           "%ld; steps eager/captured/replayed %ld/%ld/%ld): gradients %s the same step without graphs\n",
           ok ? "ok  " : "FAIL", D->rank, chunk_floats, colsum_floats, sg[0], sg[1], sg[2],
           same ? "bitwise equal to" : "differ from");
    free(gg);
    free(ge);
    param_table_free(&pt);
    batch_free(&b);
    batch_free(&f);
    return !ok;
}

/* fp32 CUDA against the CPU reference: the loss, then every gradient and
 * every parameter after the Adam steps, tensor by tensor */
static int check_fp32(const Dist *D, const char *pos, const ParamTable *pt, const StepOut *r, const StepOut *g)
{
    double le = fabs(r->loss - g->loss) / fabs(r->loss);
    int ok = le < 1e-5 && r->ntok == g->ntok, failures = !ok;
    if (D->rank == 0)
        printf("%s ranks %d positional %s: loss cpu %.7f cuda %.7f (rel %.1e), %ld target tokens\n",
               ok ? "ok  " : "FAIL", D->size, pos, r->loss / r->ntok, g->loss / g->ntok, le, r->ntok);
    for (int k = 0; k < 2; k++) {
        const float *A = k ? r->params : r->grads, *G = k ? g->params : g->grads;
        int bad = 0;
        double worst = 0;
        const char *wname = "";
        for (int t = 0; t < pt->n; t++) {
            const ParamInfo *p = &pt->t[t];
            double mx = 0, err = 0;
            for (size_t i = 0; i < p->numel; i++) {
                mx = fmax(mx, fabs(A[p->offset + i]));
                err = fmax(err, fabs((double)A[p->offset + i] - G[p->offset + i]));
            }
            /* gradients: relative to the tensor's largest entry.
             * Parameters: zero-initialised biases move by ~lr = 2e-6 per
             * step here, so the floor 1e-3 still resolves 0.1% of an update */
            double rel = err / (k ? fmax(mx, 1e-3) : (mx > 0 ? mx : 1));
            double tol = k ? 2e-6 : 1e-4;   /* GPU: FMA, other summation orders */
            if (!(rel <= tol)) {
                bad++;
                if (D->rank == 0) printf("FAIL   %s %s: max error %.3g of max |ref| %.3g\n", k ? "param" : "grad", p->name, err, mx);
            }
            if (rel > worst) { worst = rel; wname = p->name; }
        }
        failures += bad > 0;
        if (D->rank == 0)
            printf("%s ranks %d positional %s: %s of %d tensors, worst relative error %.2e (%s)\n", bad ? "FAIL" : "ok  ",
                   D->size, pos, k ? "parameters after 3 Adam steps" : "gradients", pt->n, worst, wname);
    }
    return failures;
}

/* One positional encoding: fp32, bf16 and fp16 CUDA steps against the CPU
 * step on the same batch.  Returns the failures, or minus the exit status
 * where the setup failed: -2 an invalid config, -1 a backend that must
 * exist could not be created */
static int check_positional(Dist *D, int pe, Allreduce allreduce, const char *allreduce_name, int big_scores)
{
    const char *pos = pe ? "learned" : "sinusoid";
    Config c;
    step_config(&c, pos);
    if (config_validate(&c, "test")) return -2;
    Corpus corp;
    synthetic_corpus(&corp, &c, SPLIT_TRAIN, 64);
    int B = 5, idx[5];
    for (int i = 0; i < B; i++) idx[i] = D->rank * B + i * 3;
    Batch b = { 0 };
    batch_build(&b, &corp, idx, B, c.max_len);

    Backend *cpu = backend_cpu_create(1), *gpu = backend_cuda_create(PRECISION_FP32, allreduce, D->local_rank);
    if (!gpu) return -1;
    if (D->rank == 0 && pe == 0) printf("allreduce=%s\n", allreduce_name ? allreduce_name : "(default)");
    set_order(pe ? "random:99" : "reverse");
    StepOut r = run_step(D, &c, cpu, &b, 1.0f), g = run_step(D, &c, gpu, &b, 1.0f);
    ParamTable pt;
    param_table_build(&pt, &c.model);
    int failures = check_fp32(D, pos, &pt, &r, &g);
    failures += check_pad_rows(D, pos, "cpu", &r) + check_pad_rows(D, pos, "cuda", &g);
    failures += check_chunks(D, &c, cpu, &b, &r, &pt) + check_chunks(D, &c, gpu, &b, &g, &pt);
    /* bf16 is refused below sm_80 (the backend says why): skipped on
     * such a GPU, a failure under the emulator, which runs it */
    Backend *gbf = backend_cuda_create(PRECISION_BF16, allreduce, D->local_rank);
    if (!gbf && cuda_emu_set_order) return -1;
    StepOut h = { 0 };
    if (gbf) {
        h = run_step(D, &c, gbf, &b, 1.0f);
        failures += check_lowp(D, &c, &pt, pos, "bf16", &r, &h, &g);
        failures += check_pad_rows(D, pos, "cuda-bf16", &h);
    } else if (D->rank == 0) printf("skip precision=bf16: not available on this GPU\n");
    Backend *gfp16 = backend_cuda_create(PRECISION_FP16, allreduce, D->local_rank);
    if (!gfp16) return -1;
    StepOut f = run_step(D, &c, gfp16, &b, 1024.0f);
    failures += check_lowp(D, &c, &pt, pos, "fp16", &r, &f, &g);
    failures += check_pad_rows(D, pos, "cuda-fp16", &f);
    gfp16->destroy(gfp16);
    if (pe == 1 && big_scores) failures += check_big_scores(D, c, &b, allreduce);
    if (pe == 0) failures += check_graph_chunk_growth(D, &c, &corp);
    param_table_free(&pt);
    step_free(&r); step_free(&g); step_free(&h); step_free(&f);
    batch_free(&b);
    corpus_free(&corp);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    if (gbf) gbf->destroy(gbf);
    return failures;
}

int main(int argc, char **argv)
{
    Dist D;
    dist_init(&D, &argc, &argv);
    /* optional argument allreduce=nccl|mpi: the CUDA backend's gradient sums */
    const char *allreduce_name = argc > 1 && !strncmp(argv[1], "allreduce=", 10) ? argv[1] + 10 : NULL;
    int allreduce = allreduce_name ? config_choice_value("allreduce", allreduce_name) : ALLREDUCE_AUTO;
    if (allreduce < 0) die(2, "test_cuda_step: allreduce '%s' is not auto, nccl or mpi", allreduce_name);
    /* argument big-scores: also check_big_scores (tests/test_cuda_emu.sh, once) */
    int big_scores = 0;
    for (int i = 1; i < argc; i++) big_scores |= !strcmp(argv[i], "big-scores");
    int only_pe = -1;   /* -1: both encodings */
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "positional=", 11)) {
            only_pe = config_choice_value("positional", argv[i] + 11);
            if (only_pe < 0) die(2, "test_cuda_step: positional '%s' is not sinusoid or learned", argv[i] + 11);
        }
    int failures = 0;
    for (int pe = 0; pe < 2; pe++) {   /* sinusoid, learned */
        if (only_pe >= 0 && pe != only_pe) continue;
        int f = check_positional(&D, pe, (Allreduce)allreduce, allreduce_name, big_scores);
        if (f < 0) return -f;
        failures += f;
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, D.comm);
    dist_finalize(&D);
    return all ? 1 : 0;
}
