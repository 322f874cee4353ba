/* make gpu-model: the GPU cost model of a training step, without a GPU
 * (docs/gpu-model.md).
 *
 *   bin/tests/gpu_model [--model base|big] [--batch B] [--len L]
 *                       [--trace CSV | --write-trace CSV] [--measured TOK/S] [--by-call]
 *                       [--range [--calibration TRACE TOK/S]]
 *                       [--write-timing CSV | --fit CSV] [key=value ...]
 *   bin/tests/gpu_model ... --run-steps N [--time-calls CSV [--write-trace CSV]]
 *   bin/tests/gpu_model ... --gemm-sweep CSV [--reps R] [--real]
 *   bin/tests/gpu_model [--config FILE] ... --graphs
 *   bin/tests/gpu_model ... --anchor TRACE TIMING [--changed K,...] [--range]
 *
 * Runs one training step of the CUDA backend (as train.c's step: zero the
 * gradients, forward and backward of one batch, Adam, sync) under the
 * emulator in dry-run mode, after one unlogged warm-up step, with the cost
 * log on (cuda/cost.h): every launch, cuBLAS call, copy and sync with its
 * declared bytes and FLOPs.  Prices each call on H100, A100 and V100
 * (roofline.c) and prints, per op class and in total: calls, bytes, FLOPs
 * and predicted milliseconds; then the step's tokens/s and MFU.  The batch
 * is gpu-bench's: B sentences of L tokens on both sides, no padding,
 * vocabulary 37000.  --trace prices a logged step read back from a CSV
 * (e.g. of an older commit, tests/gpu/calibration/) instead of running one;
 * --measured compares the H100 prediction with a measured throughput;
 * --by-call reports per kernel or library call instead of per op.
 * key=value sets a config key, or a setting of the roofline (SETTINGS in
 * roofline.c, e.g. hbm_frac=0.7).  --range prints the floor, each guessed
 * setting's sensitivity and the range (model_range.c); --write-timing
 * writes the per-call timing CSV the model predicts, --fit refits the
 * settings to a measured one (fit.c); --run-steps runs N real steps and
 * --time-calls times each call of them (call_timing.c); --gemm-sweep times
 * each GEMM class of the step (gemm_sweep.c).  --graphs prices the step
 * under its CUDA Graphs (cuda/graph.cuh) beside the same step without, and
 * counts the host's launches of an eager and a replayed step on the
 * emulator; --config FILE takes a config file (e.g. Table 3's scaled base,
 * input/table3-m30k/base.cfg) instead of input/table3/MODEL.cfg.  It
 * also prints the max_tokens that max_tokens = 0 would pick on the
 * emulated device (CUDA_EMU_MEMORY, else 80 GiB) for the config's max_len.
 * --anchor prices the step with a GPU's per-call times wherever it makes
 * the calls the GPU timed, the model pricing the rest (anchor.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/cost.h"
#include "../gradcheck_model.h"
#include "auto_tokens.h"
#include "batch.h"
#include "config.h"
#include "gpu_model.h"
#include "model.h"
#include "roofline.h"
#include "util.h"

/* the emulator's dry run and counters; absent from a GPU build
 * (bin/gpu/gpu_model), which logs a real step */
#pragma weak cuda_emu_dry_run
void cuda_emu_work_counts(long *submits, long *graph_launches, long *replayed);
#pragma weak cuda_emu_work_counts

/* ------------------------------------------------------------ the step */

/* B pairs of L-1 random tokens each side (EOS and BOS make L) */
void make_batch(Batch *b, int B, int L, int vocab, uint64_t seed)
{
    int *lens = xmalloc(sizeof(int) * B), *idx = xmalloc(sizeof(int) * B);
    for (int i = 0; i < B; i++) lens[i] = L - 1, idx[i] = i;
    Corpus c;
    gc_make_corpus(&c, lens, lens, B);   /* the layout; the symbols over the whole vocabulary: */
    for (size_t i = 0; i < (size_t)B * (L - 1); i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        c.src_tok[i] = TOK_FIRST_SYMBOL + (int32_t)((seed >> 33) % (uint64_t)(vocab - TOK_FIRST_SYMBOL));
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        c.tgt_tok[i] = TOK_FIRST_SYMBOL + (int32_t)((seed >> 33) % (uint64_t)(vocab - TOK_FIRST_SYMBOL));
    }
    batch_build(b, &c, idx, B, L + 1);
    free(lens);
    free(idx);
    corpus_free(&c);
}

/* train.c's step without the communication and the checks (one rank) */
void train_step(Model *m, const Batch *b, int step, int fp16)
{
    Backend *be = m->be;
    be->zero(be, m->grads, sizeof(float) * m->pt.total);
    LossStats st = model_forward_backward(m, b, (uint32_t)step, 1, 1, NULL, NULL);
    if (fp16) be->any_nonfinite(be, m->grads, m->pt.total);
    model_adam_step(m, step, (float)(1.0 / (st.n_tokens > 0 ? st.n_tokens : 1) / m->loss_scale));
    be->sync(be);
}

/* what max_tokens = 0 picks on the emulated device (CUDA_EMU_MEMORY bytes,
 * else 80 GiB), measured as train.c does: after model_init, before a step */
static void report_auto_tokens(Model *m)
{
    TokenBudget tb;
    if (auto_tokens_measure(m, &tb)) die(1, "gpu-model: the backend cannot report its free memory");
    printf("max_tokens=0: %ld tokens (%ld sentences of max_len %d; %.4g GiB free, %.4g MiB per sentence, "
           "%.4g MiB fixed)\n", tb.sentences * m->cfg.max_len, tb.sentences, m->cfg.max_len,
           tb.free_bytes / 1073741824.0, tb.per_sentence / 1048576.0, tb.fixed / 1048576.0);
}

/* the calls of one logged step, copied out of the backend's log */
static CostCall *log_step(const Config *c, const Args *a, size_t *n, size_t *act_bytes)
{
    if (cuda_emu_dry_run) cuda_emu_dry_run(1);
    Backend *be = backend_cuda_create(c->precision, c->allreduce, 0);
    if (!be) die(1, "gpu-model: cannot create the (emulated) CUDA backend");
    Model m;
    /* a dry run reads no parameter: not drawn (a real GPU's run is) */
    if ((cuda_emu_dry_run ? model_init_undrawn : model_init)(&m, &c->model, be))
        die(1, "gpu-model: model_init failed");
    m.loss_scale = c->precision == PRECISION_FP16 ? 1024.0f : 1.0f;
    /* --graphs: the logged step runs eagerly, its calls marked with the
     * graph segment they are nodes of (cuda/cost.h graph) */
    be->graph_shapes = a->graphs ? c->cuda_graph_cache : 0;
    report_auto_tokens(&m);
    Batch b = {0};
    make_batch(&b, a->B, a->L, c->vocab_size, 1);
    train_step(&m, &b, 1, c->precision == PRECISION_FP16);   /* warm-up: buffers grown, weight shadow made */
    cuda_cost_log(1);
    train_step(&m, &b, 2, c->precision == PRECISION_FP16);
    cuda_cost_log(0);
    const CostCall *calls;
    *n = cuda_cost_calls(&calls);
    CostCall *out = xmalloc(sizeof(CostCall) * (*n ? *n : 1));
    memcpy(out, calls, sizeof(CostCall) * *n);
    *act_bytes = be->act_bytes;
    batch_free(&b);
    model_free(&m);
    return out;
}

/* --graphs on the emulator: the host's launches of a replayed step (the
 * third: a warm-up, the capture, the replay) and of the same step without
 * graphs (the fourth), counted by the emulator (cuda_emu_work_counts), in
 * a dry run */
static void count_launches(const Config *c, const Args *a)
{
    if (!cuda_emu_work_counts || !a->graphs) return;
    cuda_emu_dry_run(1);
    Backend *be = backend_cuda_create(c->precision, c->allreduce, 0);
    if (!be) die(1, "gpu-model: cannot create the (emulated) CUDA backend");
    be->graph_shapes = c->cuda_graph_cache;
    Model m;
    if (model_init_undrawn(&m, &c->model, be)) die(1, "gpu-model: model_init failed");
    Batch b = {0};
    make_batch(&b, a->B, a->L, c->vocab_size, 1);
    long s[5][3];
    cuda_emu_work_counts(&s[0][0], &s[0][1], &s[0][2]);
    for (int step = 1; step <= 4; step++) {
        if (step == 4) be->graph_shapes = 0;
        train_step(&m, &b, step, c->precision == PRECISION_FP16);
        cuda_emu_work_counts(&s[step][0], &s[step][1], &s[step][2]);
    }
    long eager = s[4][0] - s[3][0], host = s[3][0] - s[2][0], graphs = s[3][1] - s[2][1], nodes = s[3][2] - s[2][2];
    printf("emulator: host launches per step: %ld eager; %ld replayed (%ld graph launches + %ld calls between "
           "them; %ld operations replayed)\n", eager, host + graphs, graphs, host, nodes);
    batch_free(&b);
    model_free(&m);
    be->destroy(be);
}

/* the host's launches of a logged step (kernels, cuBLAS calls, copies and
 * memsets; not syncs): issued one by one, and under its CUDA Graphs (a
 * launch per graph segment, plus the calls between them) */
static int graph_only(const CostCall *c) { return !strcmp(c->op, "graph_step"); }   /* the step number's kernel */

static void launches(const CostCall *calls, size_t n, long *eager, long *graphed, long *segs)
{
    *eager = *graphed = *segs = 0;
    for (size_t i = 0; i < n; i++) {
        const CostCall *c = &calls[i];
        if (c->kind == COST_SYNC || c->kind == COST_COMM) continue;
        *eager += !graph_only(c);
        if (c->graph <= 0) ++*graphed;
        else if (i == 0 || calls[i - 1].graph != c->graph) ++*graphed, ++*segs;
    }
}

/* --graphs: the same step priced with and without its graphs */
static void report_graphs(const Args *a, const CostCall *calls, size_t n)
{
    long eager, graphed, segs;
    launches(calls, n, &eager, &graphed, &segs);
    if (!segs) return;
    CostCall *plain = xmalloc(sizeof(CostCall) * n);
    size_t np = 0;
    for (size_t i = 0; i < n; i++)
        if (!graph_only(&calls[i])) plain[np] = calls[i], plain[np++].graph = 0;
    printf("CUDA Graphs: host launches per step %ld without, %ld with (%ld graph launches + %ld calls between them)\n",
           eager, graphed, segs, graphed - segs);
    for (int g = 0; g < N_GPUS; g++) {
        double t0 = roofline_step(&GPUS[g], &a->ach, plain, np, NULL, NULL);
        double t1 = roofline_step(&GPUS[g], &a->ach, calls, n, NULL, NULL);
        printf("CUDA Graphs: %-9s %8.3f ms/step without, %8.3f ms/step with: %.2fx\n", GPUS[g].name, 1e3 * t0, 1e3 * t1,
               t0 / t1);
    }
    free(plain);
}

/* -------------------------------------------------------------- report */

#define MAX_CLASSES 64

typedef struct {
    const char *name;
    long calls;
    double bytes, flop_tc, flop, t[8];
} OpClass;

/* the op class a call is reported under: the backend op, with GEMMs over
 * the vocabulary (the shared pre-softmax projection) apart */
static const char *class_of(const CostCall *c, int vocab, int by_call)
{
    if (by_call) return c->call;
    if (c->kind == COST_GEMM && (c->m == vocab || c->n == vocab || c->k == vocab)) return "gemm (vocabulary)";
    if (c->kind == COST_SYNC) return "host sync";
    if (c->kind == COST_HOST) return "host copies";
    return c->op;
}

/* per class: calls, bytes, FLOPs, device seconds on each GPU; the
 * device's waits for the host go to a class of their own */
static int tally(OpClass *cl, int ncl, const Achieved *ach, const CostCall *calls, size_t n, int vocab, int by_call)
{
    double *dev[8], *idle[8];
    for (int g = 0; g < N_GPUS; g++) {
        dev[g] = xmalloc(sizeof(double) * (n + 1));
        idle[g] = xmalloc(sizeof(double) * (n + 1));
        roofline_step(&GPUS[g], ach, calls, n, dev[g], idle[g]);
    }
    cl[ncl++] = (OpClass){ .name = "(device waits for host)" };
    for (size_t i = 0; i < n; i++) {
        const CostCall *c = &calls[i];
        const char *name = class_of(c, vocab, by_call);
        int k = 0;
        while (k < ncl && strcmp(cl[k].name, name)) k++;
        if (k == ncl) {
            if (ncl == MAX_CLASSES) die(1, "gpu-model: more than %d op classes", MAX_CLASSES);
            cl[ncl++] = (OpClass){ .name = name };
        }
        cl[k].calls++;
        cl[k].bytes += c->kind == COST_HOST ? 0 : c->rd + c->wr;
        cl[k].flop_tc += c->flop_tc;
        cl[k].flop += c->flop;
        for (int g = 0; g < N_GPUS; g++) {
            cl[k].t[g] += dev[g][i];
            cl[0].t[g] += idle[g][i];
        }
    }
    for (int g = 0; g < N_GPUS; g++) {
        free(dev[g]);
        free(idle[g]);
    }
    return ncl;
}

/* gpu-bench's model FLOPs of a step: 6 x matmul parameters x tokens plus
 * attention (QK^T and PV, forward and backward, three blocks per layer) */
double model_flops(const Config *c, int B, int L)
{
    double N = c->n_layers, d = c->d_model, dff = c->d_ff, V = c->vocab_size, tok = (double)B * L;
    double mm = N * (4 * d * d + 2 * d * dff) * tok + N * (8 * d * d + 2 * d * dff) * tok + V * d * tok;
    double att = N * 4.0 * L * L * d * B * 3;
    return 6 * mm + 3 * att;
}

static int by_time(const void *x, const void *y)
{
    double a = ((const OpClass *)x)->t[0], b = ((const OpClass *)y)->t[0];
    return a < b ? 1 : a > b ? -1 : 0;
}

static void report(const Config *c, const Args *a, const CostCall *calls, size_t n, size_t act_bytes)
{
    OpClass cl[MAX_CLASSES], total = { .name = "total" };
    int ncl = tally(cl, 0, &a->ach, calls, n, c->vocab_size, a->by_call);
    qsort(cl, (size_t)ncl, sizeof cl[0], by_time);
    long per_kind[COST_KINDS] = {0};
    for (size_t i = 0; i < n; i++) per_kind[calls[i].kind]++;
    double tok = (double)a->B * a->L, mf = model_flops(c, a->B, a->L);
    printf("gpu-model: %s, precision %s, batch %d x %d (%.0f target tokens)%s%s; %ld kernel launches, %ld cuBLAS calls, "
           "%ld memsets/copies, %ld host copies, %ld host syncs",
           a->model, config_choice("precision", c->precision), a->B, a->L, tok, a->trace ? " from the trace" : "",
           a->graphs ? ", under CUDA Graphs" : "", per_kind[COST_KERNEL],
           per_kind[COST_GEMM], per_kind[COST_COPY], per_kind[COST_HOST], per_kind[COST_SYNC]);
    if (act_bytes) printf("; activations %.2f GiB", act_bytes / 1073741824.0);
    printf("\n%-24s %6s %9s %9s %9s", "op class", "calls", "GB", "TFLOP tc", "TFLOP");
    for (int g = 0; g < N_GPUS; g++) printf(" %9s", GPUS[g].name);
    printf("   (ms)\n");
    for (int k = 0; k <= ncl; k++) {
        OpClass *o = k < ncl ? &cl[k] : &total;
        if (k < ncl) {
            total.calls += o->calls;
            total.bytes += o->bytes;
            total.flop_tc += o->flop_tc;
            total.flop += o->flop;
            for (int g = 0; g < N_GPUS; g++) total.t[g] += o->t[g];
        }
        printf("%-24s %6ld %9.2f %9.3f %9.3f", o->name, o->calls, o->bytes / 1e9, o->flop_tc / 1e12, o->flop / 1e12);
        for (int g = 0; g < N_GPUS; g++) printf(" %9.3f", 1e3 * o->t[g]);
        printf("\n");
    }
    for (int g = 0; g < N_GPUS; g++) {
        double t = total.t[g];
        printf("predicted %-9s %8.2f ms/step %10.0f tok/s  ", GPUS[g].name, 1e3 * t, tok / t);
        if (g == 0) print_mfu(mf, t);
        else printf("MFU %5.1f%% of the data sheet's %.0f TFLOP/s\n", 100 * mf / (t * GPUS[g].tc16), GPUS[g].tc16 / 1e12);
    }
    if (a->measured > 0) {
        double pred = tok / total.t[0];
        printf("calibration: %s predicted %.0f tok/s, measured %.0f tok/s: %+.1f%%\n", GPUS[0].name, pred, a->measured,
               100 * (pred / a->measured - 1));
    }
}

/* ---------------------------------------------------------------- main */

static void parse(int argc, char **argv, Config *c, Args *a)
{
    *a = (Args){ .model = "base", .B = 300, .L = 41, .ach = ACHIEVED };
    config_defaults(c);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--model") && i + 1 < argc) a->model = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) a->B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--len") && i + 1 < argc) a->L = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) a->trace = argv[++i];
        else if (!strcmp(argv[i], "--write-trace") && i + 1 < argc) a->write_trace = argv[++i];
        else if (!strcmp(argv[i], "--measured") && i + 1 < argc) a->measured = atof(argv[++i]);
        else if (!strcmp(argv[i], "--by-call")) a->by_call = 1;
        else if (!strcmp(argv[i], "--range")) a->range = 1;
        else if (!strcmp(argv[i], "--calibration") && i + 2 < argc) a->cal_trace = argv[++i], a->cal_measured = atof(argv[++i]);
        else if (!strcmp(argv[i], "--fit") && i + 1 < argc) a->fit = argv[++i];
        else if (!strcmp(argv[i], "--write-timing") && i + 1 < argc) a->write_timing = argv[++i];
        else if (!strcmp(argv[i], "--time-calls") && i + 1 < argc) a->time_calls = argv[++i];
        else if (!strcmp(argv[i], "--run-steps") && i + 1 < argc) a->run_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gemm-sweep") && i + 1 < argc) a->gemm_sweep = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) a->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--real")) a->real = 1;
        else if (!strcmp(argv[i], "--graphs")) a->graphs = 1;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) a->config = a->model = argv[++i];
        else if (!strcmp(argv[i], "--anchor") && i + 2 < argc) a->anchor_trace = argv[++i], a->anchor_timing = argv[++i];
        else if (!strcmp(argv[i], "--changed") && i + 1 < argc) a->changed = argv[++i];
    char cfg[256];
    snprintf(cfg, sizeof cfg, "input/table3/%s.cfg", a->model);
    if (config_load_file(c, a->config ? a->config : cfg)) exit(2);
    for (int i = 1; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!strcmp(argv[i], "--by-call") || !strcmp(argv[i], "--range") || !strcmp(argv[i], "--real") ||
            !strcmp(argv[i], "--graphs"))
            continue;
        if (!strcmp(argv[i], "--calibration") || !strcmp(argv[i], "--anchor")) { i += 2; continue; }
        if (argv[i][0] == '-') { i += i + 1 < argc; continue; }
        if (!eq) die(2, "gpu-model: '%s': expected key=value or an option", argv[i]);
        *eq = 0;
        const Setting *st = setting_find(argv[i]);
        if (st) *setting_ptr(&a->ach, st) = atof(eq + 1);
        else if (config_set(c, "command line", 0, argv[i], eq + 1)) exit(2);
        *eq = '=';
    }
    if (a->B < 1 || a->L < 2) die(2, "gpu-model: --batch must be >= 1 and --len >= 2");
    if (a->anchor_trace && a->graphs) die(2, "gpu-model: --anchor with --graphs: the anchor's times were measured eagerly");
    if (a->changed && !a->anchor_trace) die(2, "gpu-model: --changed needs --anchor TRACE TIMING");
    c->max_len = a->L + 1 > c->max_len ? a->L + 1 : c->max_len;
    c->max_tokens = a->B * a->L;
}

int main(int argc, char **argv)
{
    Config c;
    Args a;
    parse(argc, argv, &c, &a);
    if (a.gemm_sweep) {
        gemm_sweep(&c, &a);
        return 0;
    }
    if (a.run_steps > 0 || a.time_calls) {
        run_steps(&c, &a);
        return 0;
    }
    size_t n, act = 0;
    CostCall *calls = a.trace ? read_trace(a.trace, &n) : log_step(&c, &a, &n, &act);
    if (a.write_trace) write_trace(a.write_trace, calls, n);
    if (a.write_timing) write_timing(a.write_timing, &a.ach, calls, n);
    if (a.fit) {
        fit_report(a.fit, &a.ach, calls, n);
        free(calls);
        return 0;
    }
    report(&c, &a, calls, n, act);
    report_graphs(&a, calls, n);
    if (!a.trace) count_launches(&c, &a);
    double *given = a.anchor_trace ? anchor_step(&a, calls, n, model_flops(&c, a.B, a.L)) : NULL;
    a.given = given;
    if (a.range) report_range(&c, &a, calls, n);
    free(given);
    free(calls);
    return 0;
}
