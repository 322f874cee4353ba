/* The declared device cost of every call of the CUDA backend (the GPU cost
 * model, docs/gpu-model.md): a C view of the log that cuda/cost.cuh keeps,
 * for the model's driver (tests/gpu/gpu_model.c) and the emulator's byte
 * counts (cuda/emu/emu.cc). */
#ifndef CUDA_COST_H
#define CUDA_COST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* what kind of device work a call is; the roofline prices each differently */
typedef enum {
    COST_KERNEL,   /* one of the backend's kernels */
    COST_GEMM,     /* a cuBLAS GEMM call (plain, strided or pointer-array batched) */
    COST_COPY,     /* cudaMemsetAsync / device-to-device cudaMemcpyAsync */
    COST_HOST,     /* a host <-> device copy (over PCIe) */
    COST_SYNC,     /* the host waits for the stream (the launch queue drains) */
    COST_COMM,     /* a collective (NCCL allreduce) */
    COST_KINDS
} CostKind;

/* the tensor-core input type of a GEMM, which sets its peak rate */
typedef enum { TC_NONE, TC_TF32, TC_16BIT } TensorCore;

typedef struct {
    const char *op;     /* the backend op of ops.h it belongs to, e.g. "residual_ln_forward" */
    const char *call;   /* kernel or library call, e.g. "k_residual_ln_forward" */
    CostKind kind;
    double rd, wr;      /* declared bytes read from / written to device memory */
    double flop_tc;     /* declared tensor-core FLOPs (2 per multiply-add) */
    double flop;        /* declared other FLOPs (CUDA cores) */
    TensorCore tc;      /* COST_GEMM: the rate flop_tc runs at */
    double m, n, k, batch;   /* COST_GEMM: its shape (C is m x n), for the wave quantisation */
    double operand;          /* COST_GEMM: bytes per element of A and B in memory */
    double blocks, threads;  /* COST_KERNEL: grid and block size (from the emulator) */
    double inflight;         /* COST_KERNEL: bytes a thread loads per iteration, independently */
    /* counted by the emulator while cuda_cost_count is on (else -1):
     * distinct bytes read and written (what reaches device memory when
     * caches serve every repeat) and every access (no cache at all) */
    double seen_rd, seen_wr, seen_rd_all, seen_wr_all;
    /* under a step's CUDA Graphs (cuda/graph.cuh; gpu_model --graphs): the
     * 1-based graph segment the call is a node of, which the host launches
     * once for all its nodes; 0: the host issues the call itself */
    double graph;
} CostCall;

/* start a fresh log (on = 1) or stop logging (on = 0) */
void cuda_cost_log(int on);
/* the calls logged so far; valid until the next cuda_cost_log */
size_t cuda_cost_calls(const CostCall **calls);

/* per-call timing while the log is on (1) or not (0): CUDA events around
 * every declared call on the compute stream of the last backend created,
 * and the host time of each (cuda/cost.cuh) */
void cuda_cost_time(int on);
/* the logged calls' device and host microseconds (synchronises the stream
 * first); at most max of them, the count returned */
size_t cuda_cost_times(double *dev_us, double *host_us, size_t max);

/* GEMM sweep while the log is on: each cuBLAS/cuBLASLt call repeated reps
 * times more, each repeat timed (0: off); the median ms of each logged
 * call's repeats (-1: not a GEMM), at most max of them, the count returned */
void cuda_cost_sweep(int reps);
size_t cuda_cost_sweep_ms(double *ms, size_t max);

/* emulator side: the launch or cuBLAS call that just ran was seen moving
 * these bytes (defined by the backend; weak in the emulator, which also
 * runs without it) */
void cuda_cost_seen(const char *call, double rd, double wr, double rd_all, double wr_all);
void cuda_cost_shape(const char *call, double blocks, double threads);
/* emulator: count the bytes of every launch and GEMM (1) or not (0) */
void cuda_emu_count_bytes(int on);
/* emulator: run no kernel body and no GEMM arithmetic (1): a step of any
 * size is logged in seconds, its results are garbage */
void cuda_emu_dry_run(int on);

#ifdef __cplusplus
}
#endif

#endif
