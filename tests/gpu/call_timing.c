/* gpu_model --run-steps N [--time-calls CSV] (docs/gpu-model.md section
 * 7): N real training steps, as the model logs one (gpu_model.c's
 * train_step on gpu-bench's batch), after two warm-up steps.  With
 * --time-calls, every declared call of each step is timed with CUDA
 * events (cuda_cost_time, cuda/cost.cuh) and the CSV gets one row per
 * call of the step in issue order: the median over the N steps of its
 * device and host microseconds, in the format gpu_model --fit reads, joined
 * row by row with --write-trace's trace of the same config.  Each timed
 * step must issue the same calls as the first.  Both ways it prints a hash
 * of the parameters after the steps, so that a test sees the timing leave
 * the results bitwise as they were.  Built against the emulator
 * (bin/tests/gpu_model: the plumbing, no meaningful times) and against
 * the CUDA runtime (bin/gpu/gpu_model: the GPU's per-call truth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_model.h"
#include "util.h"

static int same_call(const CostCall *a, const CostCall *b)
{
    return !strcmp(a->op, b->op) && !strcmp(a->call, b->call) && a->kind == b->kind && a->m == b->m && a->n == b->n &&
           a->k == b->k && a->batch == b->batch;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* the median of v[0], v[stride], ... (n values; gpu_model.h) */
double median_of(const double *v, int n, size_t stride)
{
    double *w = xmalloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) w[i] = v[(size_t)i * stride];
    qsort(w, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? w[n / 2] : 0.5 * (w[n / 2 - 1] + w[n / 2]);
    free(w);
    return m;
}

/* the timed calls of step s (0-based) checked against the first's, their
 * times into dev/host row s */
static CostCall *take_step(CostCall *first, size_t *n, int s, double *dev, double *host)
{
    const CostCall *calls;
    size_t k = cuda_cost_calls(&calls);
    if (s == 0) {
        *n = k;
        first = xmalloc(sizeof(CostCall) * (k ? k : 1));
        memcpy(first, calls, sizeof(CostCall) * k);
    } else {
        if (k != *n) die(1, "gpu-model: timed step %d issued %zu calls, the first %zu", s + 1, k, *n);
        for (size_t i = 0; i < k; i++)
            if (!same_call(&calls[i], &first[i]))
                die(1, "gpu-model: timed step %d: call %zu is %s %s, in the first %s %s", s + 1, i, calls[i].op,
                    calls[i].call, first[i].op, first[i].call);
    }
    cuda_cost_times(dev, host, k);
    return first;
}

static void write_call_times(const char *path, const CostCall *c, size_t n, int steps, const double *dev,
                             const double *host)
{
    FILE *f = fopen(path, "w");
    if (!f) die(1, "%s: cannot write", path);
    fprintf(f, TIMING_HEADER "\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%zu,%s,%s,%s,%.0f,%.0f,%.0f,%.0f,%.4f,%.4f\n", i, c[i].op, c[i].call, KIND[c[i].kind], c[i].m,
                c[i].n, c[i].k, c[i].batch, median_of(dev + i, steps, n), median_of(host + i, steps, n));
    if (fclose(f)) die(1, "%s: write failed", path);
}

static double host_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* FNV-1a of the parameters' bytes */
static unsigned long long params_hash(Model *m)
{
    size_t bytes = sizeof(float) * m->pt.total;
    unsigned char *p = xmalloc(bytes);
    m->be->download(m->be, p, m->params, bytes);
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ULL;
    free(p);
    return h;
}

void run_steps(const Config *c, const Args *a)
{
    int steps = a->run_steps > 0 ? a->run_steps : 5;
    Backend *be = backend_cuda_create(c->precision, c->allreduce, 0);
    if (!be) die(1, "gpu-model: cannot create the CUDA backend");
    Model m;
    if (model_init(&m, &c->model, be)) die(1, "gpu-model: model_init failed");
    m.loss_scale = c->precision == PRECISION_FP16 ? 1024.0f : 1.0f;
    be->graph_shapes = a->graphs ? c->cuda_graph_cache : 0;
    Batch b = {0};
    make_batch(&b, a->B, a->L, c->vocab_size, 1);
    /* warm-up: buffers grown, plans made; with --graphs the second step is
     * the capture, then every timed step replays (two without too, so that
     * the parameters' hash compares) */
    train_step(&m, &b, 1, c->precision == PRECISION_FP16);
    train_step(&m, &b, 2, c->precision == PRECISION_FP16);
    double t0 = host_seconds();
    CostCall *first = NULL;
    size_t n = 0;
    double *dev = NULL, *host = NULL;
    for (int s = 0; s < steps; s++) {
        if (a->time_calls) cuda_cost_log(1), cuda_cost_time(1);
        train_step(&m, &b, 3 + s, c->precision == PRECISION_FP16);
        if (!a->time_calls) continue;
        cuda_cost_time(0);
        cuda_cost_log(0);
        if (s == 0) {
            const CostCall *calls;
            size_t k = cuda_cost_calls(&calls);
            dev = xmalloc(sizeof(double) * (k + 1) * (size_t)steps);
            host = xmalloc(sizeof(double) * (k + 1) * (size_t)steps);
        }
        first = take_step(first, &n, s, dev + (size_t)s * n, host + (size_t)s * n);
    }
    double per_step = (host_seconds() - t0) / steps;   /* each step ends in a sync */
    if (a->time_calls) {
        write_call_times(a->time_calls, first, n, steps, dev, host);
        if (a->write_trace) write_trace(a->write_trace, first, n);
        printf("time-calls: %zu calls per step, the median of %d timed steps: %s\n", n, steps, a->time_calls);
    }
    printf("run-steps: %s, %d steps of %d x %d after 2 warm-up steps%s; %.3f ms/step, %.0f tok/s (wall clock%s); parameters "
           "fnv1a %016llx\n", a->model, steps, a->B, a->L, a->graphs ? " (the second the capture), CUDA Graphs" : "", 1e3 * per_step,
           a->B * a->L / per_step, a->time_calls ? ", with the timing's events" : "", params_hash(&m));
    free(first), free(dev), free(host);
    batch_free(&b);
    model_free(&m);
    be->destroy(be);
}
