/* CUDA Graphs of the training step, the gate every device call passes
 * (LAUNCH, GEMM_CALL, memset_async, copy_on, stream_sync in cost.cuh).
 *
 * A step graph (step_graph.cuh: the cache, and the graph_begin/graph_end
 * hooks of ops.h that the model brackets a step's forward and backward
 * with) runs in one of three modes:
 *  - EAGER: the run's first step, a warm-up: every call is issued as
 *    without graphs, so that the libraries and the buffers the backend
 *    sizes lazily (GEMM scratch, column-sum partials, pointer arrays,
 *    cuBLASLt workspaces) are set up outside a capture, which must not
 *    allocate (a later reallocation ends the segment: graph_realloc);
 *  - CAPTURE: a shape's first step after it: the calls are captured into
 *    graphs, one graph per segment, and each graph is launched as its
 *    segment ends;
 *  - REPLAY: every later step of the shape: the host code of the step runs
 *    as always, but each device call is skipped, and at the end of each
 *    segment the segment's graph is launched in its place.
 * A segment ends where the step needs the host (graph_break): a host copy
 * or synchronisation, an allocation, the gradient hook of the allreduce
 * (its bucket starts eagerly, NCCL or MPI), and the eager parts of the
 * step (GraphEager: the embedding backward, whose grid and segment table
 * come from the batch's tokens on the host).
 *
 * A graph replays its kernels' arguments as they were captured.  So each
 * call is hashed (a kernel's function, grid, block, shared memory and
 * every argument converted to its parameter type; a cuBLAS call its call
 * site; a memset or copy its addresses and size), and a replayed segment
 * whose calls hash differently from its capture (a pointer or scalar the
 * step key does not cover) ends the run with one line instead of training
 * on stale arguments.  The dropout step, which changes every step, is read
 * from device memory under a step graph (DropArg, common.cuh). */
#pragma once

#include "common.cuh"
#include "cost.h"

#include <tuple>

enum { GRAPH_EAGER, GRAPH_CAPTURE, GRAPH_REPLAY };

/* one captured segment of a step */
struct GraphSeg {
    cudaGraphExec_t exec;
    uint64_t hash;
    long calls;
};

/* the graphs of one step shape (step_graph.cuh's cache) */
struct StepGraph {
    std::vector<GraphSeg> segs;
    bool captured;   /* segs hold a whole step */
    long last_use;
};

/* the step in progress (one host thread issues a step's work) */
struct GraphRun {
    CudaImpl *I;       /* NULL: no step graph */
    int mode;
    StepGraph *g;
    size_t seg;        /* segments ended so far */
    bool open;         /* a segment has calls */
    int eager;         /* inside GraphEager */
    uint64_t hash;
    long calls;
    long gen0;         /* I->mem_gen at the start */
};
static GraphRun grun;

static uint64_t graph_mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;   /* FNV-1a */
    return h;
}

/* the call (hash h) on the step graph's stream: true to issue it now
 * (eager, or into the capture), false to skip it (replay) */
static bool graph_call(uint64_t h)
{
    GraphRun &r = grun;
    if (r.eager) return true;
    if (!r.open) {   /* (EAGER: the segments are counted all the same, for the cost log) */
        if (r.mode == GRAPH_CAPTURE) CK(cudaStreamBeginCapture(r.I->stream, cudaStreamCaptureModeThreadLocal));
        r.open = true;
        r.hash = 14695981039346656037ULL;
        r.calls = 0;
    }
    r.hash = graph_mix(r.hash, &h, sizeof h);
    r.calls++;
    return r.mode != GRAPH_REPLAY;
}

static bool graph_stream(cudaStream_t s) { return grun.I && s == grun.I->stream; }

/* the open segment ends: captured and launched, or its graph launched */
static void graph_break()
{
    GraphRun &r = grun;
    if (!r.I || !r.open) return;
    r.open = false;
    if (r.mode == GRAPH_EAGER) {
        r.seg++;
        return;
    }
    cudaGraphExec_t x;
    if (r.mode == GRAPH_CAPTURE) {
        cudaGraph_t g;
        CK(cudaStreamEndCapture(r.I->stream, &g));
        CK(cudaGraphInstantiate(&x, g, 0));
        CK(cudaGraphDestroy(g));
        r.g->segs.push_back(GraphSeg{ x, r.hash, r.calls });
    } else {
        if (r.seg >= r.g->segs.size() || r.g->segs[r.seg].hash != r.hash || r.g->segs[r.seg].calls != r.calls)
            die(1, "cuda graphs: segment %zu of a replayed step differs from its capture (%ld calls, captured %ld): "
                   "an argument that changes from step to step is not in the step's key (cuda_graphs=0 runs "
                   "without graphs)", r.seg, r.calls, r.seg < r.g->segs.size() ? r.g->segs[r.seg].calls : -1L);
        x = r.g->segs[r.seg].exec;
    }
    r.seg++;
    CK(cudaGraphLaunch(x, r.I->stream));
}

/* the cost log's graph field (cuda/cost.h) of a call of kind k declared
 * now: the segment it is a node of, 1-based, or 0 (issued by the host) */
static double graph_node_of(int k)
{
    const GraphRun &r = grun;
    if (!r.I || r.eager || (k != COST_KERNEL && k != COST_GEMM && k != COST_COPY)) return 0;
    return (double)r.seg + 1;
}

/* scratch is (re)allocated: a capture in progress ends its segment there
 * (no cudaMalloc inside a capture) and is not kept, since a replay, which
 * allocates nothing, would not break there.  frees: a buffer that captured
 * graphs may hold the address of is freed or replaced, so the graphs of
 * earlier captures are dropped too (step_graph.cuh); a first allocation
 * leaves them, as no graph can hold an address that did not exist */
static void graph_realloc(CudaImpl *I, bool frees)
{
    if (graph_stream(I->stream)) graph_break();
    I->mem_gen++;
    if (frees) I->freed_gen++;
}

/* the calls in its scope run eagerly in every mode (a segment ends before) */
struct GraphEager {
    GraphEager()
    {
        graph_break();
        if (grun.I) grun.eager++;
    }
    ~GraphEager()
    {
        if (grun.I) grun.eager--;
    }
};

/* a kernel launch's gate (LAUNCH, cuda_compat.h): its arguments converted
 * to the kernel's parameter types, as the launch converts them, hashed */
template <class... P, class... A>
static bool graph_gate_kernel(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, const A &...a)
{
    if (!graph_stream(s)) return true;
    uint64_t h = graph_mix(14695981039346656037ULL, &k, sizeof k);
    unsigned dims[6] = { grid.x, grid.y, grid.z, block.x, block.y, block.z };
    h = graph_mix(graph_mix(h, dims, sizeof dims), &smem, sizeof smem);
    std::tuple<typename std::decay<P>::type...> args(a...);
    std::apply([&h](const auto &...x) { ((h = graph_mix(h, &x, sizeof x)), ...); }, args);
    return graph_call(h);
}
#undef LAUNCH_GATE
#define LAUNCH_GATE(kernel, grid, block, smem, stream, ...) \
    graph_gate_kernel(kernel, dim3(grid), dim3(block), (size_t)(smem), (stream), __VA_ARGS__)

/* a library call (cuBLAS, cuBLASLt) on the compute stream: by call site */
static bool graph_gate_site(const char *site)
{
    if (!grun.I) return true;
    return graph_call(graph_mix(0, &site, sizeof site));
}

/* the dropout key of a launch: under a step graph its step is read from
 * I->d_step, which step_graph.cuh sets before the step's graphs run */
static DropArg drop_arg(CudaImpl *I, DropoutKey key)
{
    /* TRANSFORMER_GRAPH_STALE=1 (tests): the step stays in the argument too,
     * as a backend that forgot it changes would pass it */
    static const bool stale = getenv("TRANSFORMER_GRAPH_STALE") && !strcmp(getenv("TRANSFORMER_GRAPH_STALE"), "1");
    if (grun.I != I) return DropArg{ key, NULL };
    if (key.step != I->graph_step)
        die(1, "cuda graphs: a dropout key of step %u inside the graph of step %u", key.step, I->graph_step);
    if (!stale) key.step = 0;
    return DropArg{ key, I->d_step };
}
