/* The GPU cost model's pricing (docs/gpu-model.md).  Each call of a logged
 * training step (cuda/cost.h) takes, on the device, the larger of its
 * memory time and its compute time plus a per-launch cost; the host issues
 * the calls one after another at its own cost per call, and a call starts
 * on the device when both the host has issued it and the previous call has
 * finished.  The step ends when the device finishes its last call.  GPUs
 * from their published bandwidth and peaks, with the achieved fractions
 * stated in roofline.c. */
#ifndef ROOFLINE_H
#define ROOFLINE_H

#include <stddef.h>

#include "../../cuda/cost.h"

typedef struct {
    const char *name;
    double hbm;          /* device memory bandwidth, bytes/s (published) */
    double tc16, tf32;   /* dense tensor-core peaks, FLOP/s (bf16/fp16, TF32; 0: none) */
    double fp32;         /* CUDA-core fp32 peak, FLOP/s */
    double pcie;         /* host link, bytes/s per direction (published) */
    int sms;             /* streaming multiprocessors */
} Gpu;

/* achieved fractions and fixed costs: the model's parameters */
typedef struct {
    double hbm_frac;     /* of hbm, by a streaming kernel with enough bytes in flight */
    double tc_frac;      /* of tc16, by a large cuBLAS GEMM */
    double tf32_frac;    /* of tf32, likewise */
    double fp32_frac;    /* of fp32, by a large sgemm */
    double pcie_frac;    /* of pcie, by pageable copies */
    double latency_s;    /* device memory latency under load (Little's law) */
    double threads_sm, blocks_sm;   /* resident threads and blocks per SM at most */
    double dev_launch_s;  /* device: a kernel's start and drain */
    double dev_gemm_s;    /* device: a cuBLAS call's (up to 2 kernels) */
    double host_launch_s; /* host: issuing a kernel */
    double host_gemm_s;   /* host: a cuBLAS call (heuristics, argument checks) */
    double host_sync_s;   /* host: waking up after the stream drained */
    double host_graph_s;  /* host: launching a CUDA Graph (one segment of a step, cuda/graph.cuh) */
    double dev_graph_s;   /* device: a kernel node's start and drain inside a graph (a cuBLAS call: 2) */
    double tile;          /* GEMM output tile edge (wave quantisation) */
    double k_fixed;       /* GEMM: a tile's fixed cost (prologue, epilogue) in K steps */
    double splitk_depth;  /* GEMM split-K: pieces at least this many tiles deep (0: no split) */
    /* GEMM: the share of the shorter of its memory and compute times that
     * hides under the longer, with 32-bit and with 16-bit operands */
    double overlap32, overlap16;
    double wmma_frac;     /* of tc16, by the backend's own wmma kernels (cuda/attention_tc.cuh) */
} Achieved;

extern const Gpu GPUS[];
extern const int N_GPUS;
extern const Achieved ACHIEVED;

/* One setting of Achieved, by name (key=value on gpu_model's command
 * line, the sensitivity table, the fit): whether it was measured or
 * guessed, and other plausible values to try. */
typedef struct {
    const char *key;
    size_t offset;        /* of the double in Achieved */
    int measured;         /* 0: guessed, 1: measured, 2: fitted to the calibration, 3: data sheet */
    int n_alt;            /* plausible other values, for the sensitivity table */
    double alt[3];
    const char *what;
} Setting;

extern const Setting SETTINGS[];
extern const int N_SETTINGS;

/* the setting named key, or NULL */
const Setting *setting_find(const char *key);
static inline double *setting_ptr(Achieved *a, const Setting *s) { return (double *)((char *)a + s->offset); }

/* the device seconds of one call */
double roofline_call(const Gpu *g, const Achieved *a, const CostCall *c);
/* the step's seconds; dev[i] (if not NULL) gets call i's device seconds
 * and idle[i] the device's wait for the host before it */
double roofline_step(const Gpu *g, const Achieved *a, const CostCall *calls, size_t n, double *dev, double *idle);
/* the same, and host[i] (if not NULL) the host's seconds on call i: its
 * issue cost, and for a sync also its wait for the device */
double roofline_timeline(const Gpu *g, const Achieved *a, const CostCall *calls, size_t n, double *dev, double *idle,
                         double *host);
/* the same, with given[i] >= 0 (given not NULL) as call i's device seconds
 * in place of its price: a time measured on a GPU (gpu_model --anchor) */
double roofline_timeline_given(const Gpu *g, const Achieved *a, const CostCall *calls, size_t n, const double *given,
                               double *dev, double *idle, double *host);

#endif
