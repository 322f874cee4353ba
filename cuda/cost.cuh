/* The GPU cost model's declarations (docs/gpu-model.md).  Every kernel
 * launch, cuBLAS call, device copy and stream synchronisation of the backend
 * states, next to the call, what it costs the device: bytes read and
 * written in device memory and FLOPs, split into tensor-core and other.
 * While a log is on (cuda_cost_log) each declaration becomes a CostCall;
 * tests/gpu/gpu_model.c prices the calls of one training step with a
 * roofline per call, and the emulator counts the bytes each launch really
 * loads and stores (cuda_cost_seen) so that a test holds the declarations
 * to within 10% of what the kernels do.
 *
 * Declared bytes are device-memory traffic: every element a kernel needs
 * once, although a kernel may load it several times (LayerNorm reads its
 * row three times, served by L1/L2).  The emulator's distinct-byte count is
 * the same quantity; its every-access count is the no-cache bound. */
#pragma once

#include "common.cuh"
#include "cost.h"
#include "graph.cuh"

#include <stdint.h>
#include <time.h>

static std::vector<CostCall> cost_calls;
static bool cost_on;
static bool cost_logging() { return cost_on; }

/* Per-call timing (cuda_cost_time, docs/gpu-model.md section 7): while it
 * and the log are on, each declared call i on the compute stream gets a
 * CUDA event recorded on that stream at its declaration, just before the
 * call is queued, and one at the next declaration (or when the log stops),
 * just after it: every call of the backend is declared, so nothing else is
 * queued between them.  The host time of call i runs from its start record
 * to the next declaration, the event calls themselves left out: the host
 * cost of the call and of the host code up to the next one, which is what
 * the model's host timeline charges.  Syncs and calls on the communication
 * stream get no events (measured 0).  Events are reused step after step;
 * cuda_cost_times reads them after synchronising the stream (CUDA Runtime
 * API: cudaEventElapsedTime answers cudaErrorNotReady before). */
typedef struct {
    cudaEvent_t start, end;
    double host0, host_s;   /* host clock at the start record; host seconds */
    bool timed;             /* events recorded */
} CallTime;
static std::vector<CallTime> cost_times;
static bool time_on;
static size_t time_open = SIZE_MAX;   /* the call whose end event is not yet recorded */
static cudaStream_t cost_stream;      /* the compute stream of the last backend created */
/* the GEMM sweep's (cuda_cost_sweep, below) */
static int sweep_reps;
static std::vector<double> sweep_ms;       /* per logged call: median ms of its repeats, -1 if none */
static std::vector<cudaEvent_t> sweep_ev;

static double host_now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the end of the open call: its host time, its end event */
static void time_close()
{
    if (time_open == SIZE_MAX) return;
    CallTime &t = cost_times[time_open];
    t.host_s = host_now() - t.host0;
    if (t.timed) CK(cudaEventRecord(t.end, cost_stream));
    time_open = SIZE_MAX;
}

/* the start of call i (just declared) */
static void time_start(size_t i, CostKind kind)
{
    while (cost_times.size() <= i) {
        CallTime t = {};
        CK(cudaEventCreate(&t.start));
        CK(cudaEventCreate(&t.end));
        cost_times.push_back(t);
    }
    CallTime &t = cost_times[i];
    t.timed = kind != COST_SYNC && kind != COST_COMM;
    t.host_s = 0;
    if (t.timed) CK(cudaEventRecord(t.start, cost_stream));
    t.host0 = host_now();
    time_open = i;
}

extern "C" void cuda_cost_time(int on)
{
    if (on && !cost_stream) die(1, "cost model: per-call timing before a CUDA backend was created");
    if (!on) time_close();
    time_on = on != 0;
}

/* the timing of the calls logged so far: device and host microseconds */
extern "C" size_t cuda_cost_times(double *dev_us, double *host_us, size_t max)
{
    time_close();
    if (cost_stream) CK(cudaStreamSynchronize(cost_stream));   /* before any elapsed time is read */
    size_t n = cost_calls.size() < max ? cost_calls.size() : max;
    for (size_t i = 0; i < n; i++) {
        float ms = 0;
        if (i < cost_times.size() && cost_times[i].timed) CK(cudaEventElapsedTime(&ms, cost_times[i].start, cost_times[i].end));
        dev_us[i] = 1e3 * ms;
        host_us[i] = i < cost_times.size() ? 1e6 * cost_times[i].host_s : 0;
    }
    return n;
}

/* the backend whose stream the events are on is destroyed */
static void cost_time_release(cudaStream_t s)
{
    if (!s || s != cost_stream) return;
    cudaStreamSynchronize(s);
    for (CallTime &t : cost_times) {
        cudaEventDestroy(t.start);
        cudaEventDestroy(t.end);
    }
    cost_times.clear();
    for (cudaEvent_t e : sweep_ev) cudaEventDestroy(e);
    sweep_ev.clear();
    sweep_reps = 0;
    time_on = false;
    time_open = SIZE_MAX;
    cost_stream = NULL;
}

/* GEMM sweep (cuda_cost_sweep; gpu_model --gemm-sweep, docs/gpu-model.md
 * section 7): while it and the log are on, each cuBLAS/cuBLASLt call of
 * the backend (GEMM_CALL) runs once as usual and then `sweep_reps` times
 * more, back to back, each between two CUDA events on the compute stream:
 * the backend's own call with its types, transposes, leading dimensions,
 * epilogue and workspace, on the step's data (random weights and
 * tokens).  The call's time is the median of the repeats.  A repeat of a
 * GEMM with beta != 0 accumulates again: a swept step's results are not
 * a training step's (the sweep measures time only). */

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return a < b ? -1 : a > b;
}

template <typename F> static void sweep_repeat(F &&call)
{
    while (sweep_ev.size() < (size_t)sweep_reps + 1) {
        cudaEvent_t e;
        CK(cudaEventCreate(&e));
        sweep_ev.push_back(e);
    }
    CK(cudaEventRecord(sweep_ev[0], cost_stream));
    for (int r = 0; r < sweep_reps; r++) {
        call();
        CK(cudaEventRecord(sweep_ev[r + 1], cost_stream));
    }
    CK(cudaStreamSynchronize(cost_stream));   /* before the elapsed times are read */
    std::vector<float> ms(sweep_reps);
    for (int r = 0; r < sweep_reps; r++) CK(cudaEventElapsedTime(&ms[r], sweep_ev[r], sweep_ev[r + 1]));
    qsort(ms.data(), ms.size(), sizeof(float), cmp_float);
    int h = sweep_reps / 2;
    sweep_ms.resize(cost_calls.size(), -1);
    sweep_ms[cost_calls.size() - 1] = sweep_reps % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h]);
}

/* a cuBLAS or cuBLASLt call of the backend, repeated while sweeping */
#define GEMM_CALL(call)                                                                                     \
    do {                                                                                                    \
        if (!graph_gate_site(#call)) break; /* replayed by a step graph (graph.cuh) */                      \
        call;                                                                                               \
        if (sweep_reps > 0 && cost_on) sweep_repeat([&] { call; });                                         \
    } while (0)

extern "C" void cuda_cost_sweep(int reps)
{
    if (reps > 0 && !cost_stream) die(1, "cost model: a GEMM sweep before a CUDA backend was created");
    sweep_reps = reps > 0 ? reps : 0;
    if (sweep_reps) sweep_ms.clear();
}

extern "C" size_t cuda_cost_sweep_ms(double *ms, size_t max)
{
    size_t n = cost_calls.size() < max ? cost_calls.size() : max;
    for (size_t i = 0; i < n; i++) ms[i] = i < sweep_ms.size() ? sweep_ms[i] : -1;
    return n;
}

extern "C" void cuda_cost_log(int on)
{
    if (!on && time_on) time_close();
    cost_on = on != 0;
    if (cost_on) cost_calls.clear();
}

extern "C" size_t cuda_cost_calls(const CostCall **calls)
{
    *calls = cost_calls.data();
    return cost_calls.size();
}

/* The emulator reports each launch, GEMM and copy after it ran: it must
 * match the last declaration, or the call had none */
extern "C" void cuda_cost_seen(const char *call, double rd, double wr, double rd_all, double wr_all)
{
    if (!cost_on) return;
    CostCall *c = cost_calls.empty() ? NULL : &cost_calls.back();
    if (!c || c->seen_rd >= 0 || strcmp(c->call, call) != 0)
        die(1, "cost model: %s ran without a declared cost (last declared: %s)", call, c ? c->call : "none");
    c->seen_rd = rd;
    c->seen_wr = wr;
    c->seen_rd_all = rd_all;
    c->seen_wr_all = wr_all;
}

/* each launch's grid and block, before it runs: from the emulator, and
 * from LAUNCH in a GPU build (cuda/cuda_compat.h) */
extern "C" void cuda_cost_shape(const char *call, double blocks, double threads)
{
    if (!cost_on || cost_calls.empty() || strcmp(cost_calls.back().call, call) != 0) return;   /* cuda_cost_seen complains */
    cost_calls.back().blocks = blocks;
    cost_calls.back().threads = threads;
}

static void declare(const char *op, const char *call, CostKind kind, double rd, double wr, double flop_tc,
                    double flop, TensorCore tc)
{
    if (!cost_on) return;
    if (time_on) time_close();
    cost_calls.push_back(CostCall{ op, call, kind, rd, wr, flop_tc, flop, tc, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1,
                                   graph_node_of(kind) });
    if (time_on) time_start(cost_calls.size() - 1, kind);
}

/* the shape of the GEMM just declared */
static void declare_shape(int m, int n, int k, long batch, size_t operand)
{
    if (!cost_on) return;
    CostCall &c = cost_calls.back();
    c.m = m;
    c.n = n;
    c.k = k;
    c.batch = (double)batch;
    c.operand = (double)operand;
}

/* a kernel of op `op`: the bytes one thread loads per iteration with
 * independent loads (e.g. 2 * sizeof(A) for x and sub of a LayerNorm: what
 * it keeps in flight, which bounds the bandwidth a kernel reaches, see
 * tests/gpu/roofline.c; nvcc unrolls loops of constant stride by 4, the
 * PTX of `nvcc -ptx` shows it, while loops striding by blockDim or the
 * grid stay one load deep), bytes read, bytes written, FLOPs on the CUDA
 * cores.  The kernel is named as the LAUNCH that follows names it. */
#define DECLARE_KERNEL(kernel, op, per_thread, rd, wr, flop)                                                 \
    do {                                                                                                    \
        if (!cost_on) break; /* the arguments are evaluated only while logging */                           \
        declare((op), #kernel, COST_KERNEL, (double)(rd), (double)(wr), 0.0, (double)(flop), TC_NONE);        \
        cost_calls.back().inflight = (double)(per_thread);                                                  \
    } while (0)

/* a kernel whose products run on the tensor cores (wmma, cuda/attention_tc.cuh):
 * flop_tc FLOPs of 16-bit tiles, which the model prices at the rate such
 * hand-written tiles reach (gpu_model's wmma_frac), and flop on the CUDA cores */
#define DECLARE_KERNEL_TC(kernel, op, per_thread, rd, wr, flop_tc, flop)                                            \
    do {                                                                                                           \
        if (!cost_on) break;                                                                                       \
        declare((op), #kernel, COST_KERNEL, (double)(rd), (double)(wr), (double)(flop_tc), (double)(flop), TC_16BIT); \
        cost_calls.back().inflight = (double)(per_thread);                                                         \
    } while (0)

/* ------------------------------------------- copies, memsets and syncs */

static void memset_async(CudaImpl *I, const char *op, void *p, size_t n)
{
    declare(op, "cudaMemsetAsync", COST_COPY, 0, (double)n, 0, 0, TC_NONE);
    const void *key[2] = { p, (const void *)n };
    if (graph_stream(I->stream) && !graph_call(graph_mix(1, key, sizeof key))) return;
    CK(cudaMemsetAsync(p, 0, n, I->stream));
}

/* a copy on stream s, declared as `ck`: COST_COMM for one on the
 * communication stream, which overlaps the compute stream's work (the model
 * is of the compute stream) */
static void copy_on(cudaStream_t s, CostKind ck, const char *op, void *dst, const void *src, size_t n,
                    cudaMemcpyKind kind)
{
    declare(op, "cudaMemcpyAsync", ck, kind == cudaMemcpyHostToDevice ? 0 : (double)n,
            kind == cudaMemcpyDeviceToHost ? 0 : (double)n, 0, 0, TC_NONE);
    /* a step graph holds device-to-device copies; one from or to the host
     * runs eagerly, the open segment ended before it */
    if (graph_stream(s) && kind != cudaMemcpyDeviceToDevice) graph_break();
    const void *key[3] = { dst, src, (const void *)n };
    if (graph_stream(s) && kind == cudaMemcpyDeviceToDevice && !graph_call(graph_mix(2, key, sizeof key))) return;
    CK(cudaMemcpyAsync(dst, src, n, kind, s));
}

/* a copy on the backend's stream: device to device moves n bytes each way
 * in device memory, the others cross PCIe */
static void copy_async(CudaImpl *I, const char *op, void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    copy_on(I->stream, kind == cudaMemcpyDeviceToDevice ? COST_COPY : COST_HOST, op, dst, src, n, kind);
}

/* the host waits for the stream: the GPU runs dry until the next launch */
static void stream_sync(CudaImpl *I, const char *op)
{
    declare(op, "cudaStreamSynchronize", COST_SYNC, 0, 0, 0, 0, TC_NONE);
    if (graph_stream(I->stream)) graph_break();   /* the step graph's open segment runs first */
    CK(cudaStreamSynchronize(I->stream));
}
