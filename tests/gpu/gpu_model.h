/* The parts of bin/tests/gpu_model (tests/gpu/gpu_model.c) that its
 * other files share. */
#ifndef GPU_MODEL_H
#define GPU_MODEL_H

#include <stddef.h>

#include "../../cuda/cost.h"
#include "batch.h"
#include "config.h"
#include "model.h"
#include "roofline.h"

typedef struct {
    const char *model, *trace, *write_trace;
    const char *fit, *write_timing;   /* per-call timing CSVs (fit.c) */
    const char *cal_trace;            /* --calibration TRACE TOK/S, for --range */
    const char *time_calls;           /* --time-calls CSV: per-call timing of real steps (call_timing.c) */
    int run_steps;                    /* --run-steps N: N real steps after a warm-up (call_timing.c) */
    const char *gemm_sweep;           /* --gemm-sweep CSV: each GEMM class timed (gemm_sweep.c) */
    int reps;                         /* --reps R: its repeats per call */
    int real;                         /* --real: the emulator runs the swept step for real, not dry */
    int B, L, by_call, range;
    int graphs;                       /* --graphs: the step under CUDA Graphs (cuda/graph.cuh) */
    const char *config;               /* --config FILE instead of input/table3/MODEL.cfg */
    const char *anchor_trace, *anchor_timing;   /* --anchor: a step timed per call on a GPU (anchor.c) */
    const char *changed;              /* --changed K,...: kernels changed since the anchor (priced, not taken) */
    const double *given;              /* the anchored device seconds per call (-1: priced), for --range */
    double measured, cal_measured;
    Achieved ach;                     /* ACHIEVED with key=value overrides */
} Args;

/* the peaks MFU is stated against: the H100 SXM data sheet's dense bf16,
 * and measured with cuBLAS on an H100 (8192^3 bf16) on random data and on
 * gemm_peak's constant data (gpu-bench's MFU, the old figures) */
#define PEAK_SHEET 989.4e12
#define PEAK_RANDOM 798e12
#define PEAK_CONSTANT 827.7e12
/* "MFU a% of ..., b% of ..., c% of ..." (all three peaks, named), newline */
void print_mfu(double model_flop, double seconds);

/* gpu-bench's model FLOPs of a step of B sentences of L tokens */
double model_flops(const Config *c, int B, int L);

/* --range: the floor, the sensitivity of each guessed setting, the range */
void report_range(const Config *c, const Args *a, const CostCall *calls, size_t n);

/* --write-timing: the per-call timing CSV the model predicts; --fit: refit
 * the guessed settings to a measured one (docs/gpu-model.md) */
void write_timing(const char *path, const Achieved *a, const CostCall *calls, size_t n);
/* the header of a per-call timing CSV */
#define TIMING_HEADER "index,op,call,kind,m,n,k,batch,measured_us,host_us"
void fit_report(const char *path, const Achieved *a, const CostCall *calls, size_t n);
/* a timing CSV joined row by row with the step's calls (one line and exit
 * 2 where it does not join): measured device and host seconds per call */
void read_timing(const char *path, const CostCall *calls, size_t n, double *dev, double *host);
/* the device's wait for the host before each call, from the measurements
 * alone (for a sync: the host's wait for the device) */
void measured_waits(const CostCall *calls, size_t n, const double *meas, const double *host, double *wait);
/* --anchor TRACE TIMING [--changed K,...]: each call of the step whose
 * class the anchor measured takes that time, the rest are priced; prints
 * the anchored step, what was measured and what was priced, and returns
 * the given device seconds per call (-1: priced) for --range (anchor.c) */
double *anchor_step(const Args *a, const CostCall *calls, size_t n, double model_flop);

/* B pairs of L-1 random tokens each side; train.c's step on one rank */
void make_batch(Batch *b, int B, int L, int vocab, uint64_t seed);
void train_step(Model *m, const Batch *b, int step, int fp16);
/* the median of v[0], v[stride], ... (n values) */
double median_of(const double *v, int n, size_t stride);
/* --run-steps N [--time-calls CSV]: real steps, timed per call or not */
void run_steps(const Config *c, const Args *a);
/* --gemm-sweep CSV [--reps R]: every GEMM class of the step, timed */
void gemm_sweep(const Config *c, const Args *a);

/* the names of CostKind and TensorCore in a trace */
extern const char *const KIND[];
extern const char *const TC[];
/* the index of s in names[n], or -1 */
int lookup(const char *const *names, int n, const char *s);

/* a logged step as CSV (the columns of write_trace), and read back */
void write_trace(const char *path, const CostCall *calls, size_t n);
CostCall *read_trace(const char *path, size_t *n);

#endif
