/* The roofline of roofline.h: published figures of each GPU, the achieved
 * fractions, and the price of a call and of a step. */
#include "roofline.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* Published figures, dense (no sparsity): NVIDIA's H100 SXM5, A100 SXM4
 * 80 GB and V100 SXM2 data sheets.  V100 has no bf16 and no TF32: 16-bit
 * GEMMs are fp16 (precision=fp16), TF32 falls back to fp32.  PCIe: Gen5,
 * Gen4, Gen3 x16 per direction. */
const Gpu GPUS[] = {
    { "H100-SXM", 3.35e12, 989.4e12, 494.7e12, 66.9e12, 64e9, 132 },
    { "A100-SXM", 2.039e12, 312e12, 156e12, 19.5e12, 32e9, 108 },
    { "V100-SXM", 0.90e12, 125e12, 0, 15.7e12, 16e9, 80 },
};
const int N_GPUS = sizeof GPUS / sizeof GPUS[0];

/* Achieved fractions and fixed costs.  Measured on the H100 of
 * docs/performance.md where a measurement exists (bin/gpu/gemm_peak,
 * 2026-11-23, n = 8192: bf16 827.7 of 989.4 TFLOP/s, tf32 457.2 of 494.7,
 * fp32 52.2 of 66.9), assumed the same elsewhere:
 * - streaming kernels reach 0.85 of the memory bandwidth when they keep
 *   enough bytes in flight; what one keeps in flight is its resident
 *   threads (at most 2048 and 32 blocks per SM) times the bytes each loads
 *   per iteration, and over a latency of 600 ns under load that bounds its
 *   bandwidth (Little's law: scalar 2-byte loads in 64-thread blocks reach
 *   a fraction of what 16-byte loads do);
 * - pageable host copies 0.4 of the link (staged by the driver);
 * - device: 1 us per kernel and 2 us per cuBLAS call between the end of one
 *   and the start of the next; host: 3 us to issue a kernel, 8 us a cuBLAS
 *   call, 10 us to wake up after a synchronisation;
 * - under CUDA Graphs (cuda/graph.cuh; calls with a graph segment): the
 *   host launches each segment once, 4 us whatever its nodes (a
 *   straight-line graph's launch costs about as much as one kernel's), and
 *   each node costs the device 0.7 us instead of 1 (a cuBLAS call 1.4
 *   instead of 2): guesses, until a GPU window measures them;
 * - GEMM tiles of 128 x 128 outputs, one per SM at a time: a GEMM whose
 *   tiles do not fill the last wave wastes its idle SMs.  Fewer tiles than
 *   SMs with a long K (the weight gradients, K = tokens) are split along K
 *   as cuBLAS's split-K and Hopper's stream-K kernels do, into pieces at
 *   least 4 tiles deep (splitk_depth), and the fp32 partial sums cost a
 *   write and a read;
 * - a tile also pays a fixed cost, filling the shared-memory pipeline
 *   before its K loop and writing C after it, worth 256 steps of K: a GEMM
 *   with K = 512 runs at 2/3 of the rate of a long one.  The measured peaks
 *   (K = 8192) include 8192 / 8448 of it, so the fractions below are the
 *   measured ones divided by that;
 * - the backend's own tensor-core kernels (wmma 16 x 16 x 16 tiles staged
 *   through shared memory, the fused attention of cuda/attention_tc.cuh)
 *   reach 0.2 of the 16-bit peak on their tensor FLOPs, added to their
 *   CUDA-core FLOPs' time: a guess (short K loops of 64, a barrier per
 *   chunk, no asynchronous copies), until a GPU window measures them. */
const Achieved ACHIEVED = {
    .hbm_frac = 0.85, .tc_frac = 0.84 * 8448 / 8192, .tf32_frac = 0.92 * 8448 / 8192, .fp32_frac = 0.78 * 8448 / 8192,
    .pcie_frac = 0.4,
    .latency_s = 800e-9, .threads_sm = 2048, .blocks_sm = 32,
    .dev_launch_s = 1e-6, .dev_gemm_s = 2e-6, .host_launch_s = 3e-6, .host_gemm_s = 8e-6, .host_sync_s = 10e-6,
    .host_graph_s = 4e-6, .dev_graph_s = 0.7e-6,
    .tile = 128, .k_fixed = 256, .splitk_depth = 4, .overlap32 = 0, .overlap16 = 1, .wmma_frac = 0.2,
};

#define AT(f) offsetof(Achieved, f)
/* Which settings were measured and which are guesses (docs/gpu-model.md
 * "Settings"), and each guess's plausible range.  Random-data bf16: an
 * 8192^3 product at 798 of 989.4 TFLOP/s (gpu-review notes); 0.9 of the
 * bandwidth is the 3.0 TB/s a copy kernel reaches on an H100. */
const Setting SETTINGS[] = {
    { "tc_frac", AT(tc_frac), 1, 1, { 798.0 / 989.4 * 8448 / 8192 },
      "bf16 tile rate, of the data sheet (gemm_peak, constant data; random data 798 TFLOP/s)" },
    { "tf32_frac", AT(tf32_frac), 1, 0, { 0 }, "TF32 tile rate (gemm_peak)" },
    { "fp32_frac", AT(fp32_frac), 1, 0, { 0 }, "fp32 rate (gemm_peak)" },
    { "latency_s", AT(latency_s), 2, 0, { 0 }, "memory latency under load (fitted to 122cb66)" },
    { "overlap32", AT(overlap32), 2, 0, { 0 }, "32-bit operand traffic hidden under compute (fitted to 122cb66)" },
    { "threads_sm", AT(threads_sm), 3, 0, { 0 }, "resident threads per SM (data sheet)" },
    { "blocks_sm", AT(blocks_sm), 3, 0, { 0 }, "resident blocks per SM (data sheet)" },
    { "hbm_frac", AT(hbm_frac), 0, 2, { 0.70, 0.90 }, "bandwidth a streaming kernel reaches, of the data sheet" },
    { "tile", AT(tile), 0, 2, { 256, 64 }, "GEMM output tile edge (wave quantisation)" },
    { "k_fixed", AT(k_fixed), 0, 2, { 512, 0 }, "GEMM tile's fixed cost, in K steps" },
    { "splitk_depth", AT(splitk_depth), 0, 2, { 0, 1 }, "split-K pieces at least this many tiles deep (0: none)" },
    { "overlap16", AT(overlap16), 0, 2, { 0.5, 0 }, "16-bit operand traffic hidden under compute" },
    { "dev_launch_s", AT(dev_launch_s), 0, 2, { 2e-6, 0.5e-6 }, "device cost per kernel" },
    { "dev_gemm_s", AT(dev_gemm_s), 0, 2, { 4e-6, 1e-6 }, "device cost per cuBLAS call" },
    { "host_launch_s", AT(host_launch_s), 0, 2, { 5e-6, 2e-6 }, "host cost per kernel launch" },
    { "host_gemm_s", AT(host_gemm_s), 0, 2, { 20e-6, 4e-6 }, "host cost per cuBLAS call" },
    { "host_sync_s", AT(host_sync_s), 0, 2, { 30e-6, 5e-6 }, "host wake-up after a sync" },
    { "pcie_frac", AT(pcie_frac), 0, 2, { 0.2, 0.8 }, "host link reached by pageable copies" },
    { "host_graph_s", AT(host_graph_s), 0, 2, { 10e-6, 2.5e-6 }, "host cost per CUDA Graph launch (--graphs)" },
    { "dev_graph_s", AT(dev_graph_s), 0, 2, { 1e-6, 0.4e-6 }, "device cost per kernel node of a graph (--graphs)" },
    { "wmma_frac", AT(wmma_frac), 0, 2, { 0.1, 0.4 }, "16-bit tensor rate of the backend's wmma kernels, of the data sheet" },
};
const int N_SETTINGS = sizeof SETTINGS / sizeof SETTINGS[0];

const Setting *setting_find(const char *key)
{
    for (int i = 0; i < N_SETTINGS; i++)
        if (!strcmp(SETTINGS[i].key, key)) return &SETTINGS[i];
    return NULL;
}

/* ----------------------------------------------------------------- GEMMs */

static double gemm_tiles(const Achieved *a, const CostCall *c)
{
    return ceil(c->m / a->tile) * ceil(c->n / a->tile) * (c->batch > 0 ? c->batch : 1);
}

/* a GEMM's K split: into as many pieces as fill the SMs, each >= 4 tiles deep */
static double split_k(const Gpu *g, const Achieved *a, const CostCall *c, double tiles)
{
    if (tiles >= g->sms || a->splitk_depth <= 0) return 1;
    return fmax(1, fmin(floor(g->sms / tiles), floor(c->k / (a->splitk_depth * a->tile))));
}

/* the share of the SMs a GEMM's tiles keep busy over its waves */
static double wave_efficiency(const Gpu *g, const Achieved *a, const CostCall *c)
{
    if (c->m <= 0 || c->n <= 0) return 1.0;
    double tiles = gemm_tiles(a, c), s = split_k(g, a, c, tiles);
    return tiles * s / (ceil(tiles * s / g->sms) * g->sms);
}

/* the fp32 partial sums of a split-K GEMM, written and read back */
static double split_bytes(const Gpu *g, const Achieved *a, const CostCall *c)
{
    if (c->m <= 0 || c->n <= 0) return 0;
    double s = split_k(g, a, c, gemm_tiles(a, c));
    return s > 1 ? 2 * s * c->m * c->n * (c->batch > 0 ? c->batch : 1) * sizeof(float) : 0;
}

/* The tensor-core rate of a GEMM.  16-bit compute on 32-bit operands
 * (CUBLAS_COMPUTE_32F_FAST_16BF over fp32 storage, the code of 122cb66)
 * converts the operands on their way into shared memory, which runs at the
 * TF32 kernels' rate: measured bf16 = tf32 there within 0.4%. */
static double tensor_rate(const Gpu *g, const Achieved *a, const CostCall *c)
{
    int tf32 = c->tc == TC_TF32 || (c->tc == TC_16BIT && c->operand >= 4);
    if (tf32) return g->tf32 > 0 ? g->tf32 * a->tf32_frac : g->fp32 * a->fp32_frac;
    if (c->tc == TC_16BIT) return g->tc16 * a->tc_frac;
    return g->fp32 * a->fp32_frac;
}

static double gemm_time(const Gpu *g, const Achieved *a, const CostCall *c)
{
    double s = split_k(g, a, c, gemm_tiles(a, c)), depth = c->k / s;
    double eff = wave_efficiency(g, a, c) * depth / (depth + a->k_fixed);
    double mem = (c->rd + c->wr + split_bytes(g, a, c)) / (g->hbm * a->hbm_frac);
    double compute = (c->flop_tc + c->flop) / (tensor_rate(g, a, c) * eff);
    double overlap = c->operand >= 4 ? a->overlap32 : a->overlap16;
    return fmax(mem, compute) + (1 - overlap) * fmin(mem, compute) + a->dev_gemm_s;
}

/* --------------------------------------------------------------- kernels */

/* the bandwidth a kernel reaches: its bytes in flight over the latency,
 * at most the achieved streaming bandwidth */
static double kernel_bandwidth(const Gpu *g, const Achieved *a, const CostCall *c)
{
    double peak = g->hbm * a->hbm_frac;
    if (c->threads <= 0 || c->blocks <= 0 || c->inflight <= 0) return peak;
    double blocks_sm = fmin(a->blocks_sm, ceil(c->blocks / g->sms));
    double threads_sm = fmin(a->threads_sm, floor(a->threads_sm / c->threads) * c->threads);
    threads_sm = fmin(threads_sm, blocks_sm * c->threads);
    double busy_sms = fmin(g->sms, c->blocks);
    return fmin(peak, threads_sm * busy_sms * c->inflight / a->latency_s);
}

static double kernel_time(const Gpu *g, const Achieved *a, const CostCall *c)
{
    double mem = (c->rd + c->wr) / kernel_bandwidth(g, a, c);
    double tc = c->flop_tc > 0 ? c->flop_tc / (g->tc16 * a->wmma_frac) : 0;   /* wmma (V100: fp16) */
    return fmax(mem, tc + c->flop / (g->fp32 * a->fp32_frac)) + a->dev_launch_s;
}

double roofline_call(const Gpu *g, const Achieved *a, const CostCall *c)
{
    switch (c->kind) {
    case COST_KERNEL: return kernel_time(g, a, c);
    case COST_GEMM: return gemm_time(g, a, c);
    case COST_COPY: return (c->rd + c->wr) / (g->hbm * a->hbm_frac) + a->dev_launch_s;
    case COST_HOST: return (c->rd + c->wr) / (g->pcie * a->pcie_frac) + a->dev_launch_s;
    default: return 0;   /* syncs: host side; allreduce: one GPU is priced */
    }
}

/* a call's fixed device cost (in roofline_call) as a node of a CUDA
 * Graph: dev_graph_s per kernel, twice that per cuBLAS call */
static double graph_node_time(const Gpu *g, const Achieved *a, const CostCall *c)
{
    double t = roofline_call(g, a, c);
    if (c->kind == COST_GEMM) return t - a->dev_gemm_s + 2 * a->dev_graph_s;
    return t - a->dev_launch_s + a->dev_graph_s;
}

/* the host's cost of issuing call i: a graph's nodes cost one launch, at
 * the first node of the graph */
static double host_cost(const Achieved *a, const CostCall *calls, size_t i)
{
    const CostCall *c = &calls[i];
    if (c->graph > 0) return i > 0 && calls[i - 1].graph == c->graph ? 0 : a->host_graph_s;
    switch (c->kind) {
    case COST_GEMM: return a->host_gemm_s;
    case COST_SYNC: return a->host_sync_s;
    case COST_COMM: return 0;
    default: return a->host_launch_s;
    }
}

double roofline_timeline(const Gpu *g, const Achieved *a, const CostCall *calls, size_t n, double *dev, double *idle,
                         double *host_t)
{
    return roofline_timeline_given(g, a, calls, n, NULL, dev, idle, host_t);
}

/* a call's device seconds: given (measured, eager: gpu_model --anchor) or priced */
static double device_time(const Gpu *g, const Achieved *a, const CostCall *c, double given)
{
    if (given >= 0) return given;
    return c->graph > 0 ? graph_node_time(g, a, c) : roofline_call(g, a, c);
}

double roofline_timeline_given(const Gpu *g, const Achieved *a, const CostCall *calls, size_t n, const double *given,
                               double *dev, double *idle, double *host_t)
{
    double host = 0, device = 0;   /* when each is free */
    for (size_t i = 0; i < n; i++) {
        const CostCall *c = &calls[i];
        double host0 = host;
        host += host_cost(a, calls, i);
        if (c->kind == COST_SYNC) {   /* the host waits for the device */
            host = fmax(host, device + a->host_sync_s);
            if (dev) dev[i] = 0, idle[i] = 0;
            if (host_t) host_t[i] = host - host0;
            continue;
        }
        double t = device_time(g, a, c, given ? given[i] : -1), start = fmax(host, device);
        if (dev) dev[i] = t, idle[i] = start - device;
        if (host_t) host_t[i] = host - host0;
        device = start + t;
    }
    return device;
}

double roofline_step(const Gpu *g, const Achieved *a, const CostCall *calls, size_t n, double *dev, double *idle)
{
    return roofline_timeline(g, a, calls, n, dev, idle, NULL);
}
