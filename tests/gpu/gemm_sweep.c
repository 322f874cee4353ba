/* gpu_model --gemm-sweep CSV [--reps R] (docs/gpu-model.md section 7):
 * every GEMM shape class of the model's step (op, library call, m x n x k
 * x batch, operand bytes: the classes --fit reports), each timed through
 * the backend's own cuBLAS / cuBLASLt call with its types, transposes and
 * epilogue on the step's random data: one step runs with cuda_cost_sweep
 * on (cuda/cost.cuh), which repeats each GEMM call R times more (default
 * 20) between CUDA events; a class's time is the median over its calls of
 * each call's median.  Beside it the model's prediction for the class.
 * On the emulator the step is a dry run (every shape of the full-size
 * step in seconds; the times are the emulator's) unless --real;
 * bin/gpu/gpu_model runs it on the GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_model.h"
#include "util.h"

#pragma weak cuda_emu_dry_run

static int same_class(const CostCall *a, const CostCall *b)
{
    return !strcmp(a->op, b->op) && !strcmp(a->call, b->call) && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->batch == b->batch && a->operand == b->operand;
}


/* the operands' type: 16-bit storage is the precision's own, 4 bytes
 * runs on TF32 tensor cores or plain fp32 */
static const char *dtype_name(const CostCall *c, const char *precision)
{
    if (c->operand == 2) return precision;
    return c->tc == TC_TF32 ? "tf32" : "fp32";
}

/* one row per class: calls, the median time, TFLOP/s, the prediction */
static void write_sweep(const char *path, const Config *cfg, const Args *a, const CostCall *calls, size_t n,
                        const double *ms, int reps)
{
    FILE *f = fopen(path, "w");
    if (!f) die(1, "%s: cannot write", path);
    fprintf(f, "model,op,call,m,n,k,batch,dtype,calls,reps,ms,tflops,predicted_ms,predicted_tflops\n");
    int *done = xcalloc(n + 1, sizeof(int));
    double *v = xmalloc(sizeof(double) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        const CostCall *c = &calls[i];
        if (c->kind != COST_GEMM || done[i]) continue;
        int k = 0;
        for (size_t j = i; j < n; j++)
            if (calls[j].kind == COST_GEMM && same_class(&calls[j], c)) done[j] = 1, v[k++] = ms[j];
        double med = median_of(v, k, 1);
        double fl = c->flop_tc + c->flop, pred = 1e3 * roofline_call(&GPUS[0], &a->ach, c);
        fprintf(f, "%s,%s,%s,%.0f,%.0f,%.0f,%.0f,%s,%d,%d,%.6f,%.2f,%.6f,%.2f\n", a->model, c->op, c->call, c->m, c->n,
                c->k, c->batch, dtype_name(c, config_choice("precision", cfg->precision)), k, reps, med, med > 0 ? fl / (med * 1e9) : 0.0, pred,
                pred > 0 ? fl / (pred * 1e9) : 0.0);
    }
    free(done);
    free(v);
    if (fclose(f)) die(1, "%s: write failed", path);
}

void gemm_sweep(const Config *c, const Args *a)
{
    int reps = a->reps > 0 ? a->reps : 20;
    if (cuda_emu_dry_run && !a->real) cuda_emu_dry_run(1);
    Backend *be = backend_cuda_create(c->precision, c->allreduce, 0);
    if (!be) die(1, "gpu-model: cannot create the CUDA backend");
    Model m;
    if (model_init(&m, &c->model, be)) die(1, "gpu-model: model_init failed");
    m.loss_scale = c->precision == PRECISION_FP16 ? 1024.0f : 1.0f;
    Batch b = {0};
    make_batch(&b, a->B, a->L, c->vocab_size, 1);
    train_step(&m, &b, 1, c->precision == PRECISION_FP16);   /* warm-up: buffers grown, plans made */
    cuda_cost_log(1);
    cuda_cost_sweep(reps);
    train_step(&m, &b, 2, c->precision == PRECISION_FP16);
    cuda_cost_sweep(0);
    cuda_cost_log(0);
    const CostCall *calls;
    size_t n = cuda_cost_calls(&calls);
    double *ms = xmalloc(sizeof(double) * (n + 1));
    cuda_cost_sweep_ms(ms, n);
    size_t gemms = 0;
    for (size_t i = 0; i < n; i++)
        if (calls[i].kind == COST_GEMM && ms[i] < 0) die(1, "gpu-model: GEMM call %zu (%s) was not swept", i, calls[i].call);
        else gemms += calls[i].kind == COST_GEMM;
    write_sweep(a->gemm_sweep, c, a, calls, n, ms, reps);
    printf("gemm-sweep: %s, %zu GEMM calls of the step, each repeated %d times: %s\n", a->model, gemms, reps,
           a->gemm_sweep);
    free(ms);
    batch_free(&b);
    model_free(&m);
    be->destroy(be);
}
