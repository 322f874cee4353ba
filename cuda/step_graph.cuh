/* CUDA Graphs of the training step: the cache of step graphs by shape and
 * the hooks of ops.h (graph_begin, graph_break, graph_end, graph_reset,
 * graph_stats).  The modes, the segments and the check of replayed
 * arguments are graph.cuh's.
 *
 * Batches vary in length (token-budget batches, batcher.h), so a graph is
 * captured per step shape: the model's key (batch B x S x T, the loss
 * scale, whether the gradient hook and the head gates are on, the model).
 * The shapes are not bucketed: padding a batch to a bucket would change
 * the sums' rounding, and graphs must not change results.  A batch plan
 * has a fixed set of batches, reshuffled every epoch, so from the second
 * epoch on every shape has been seen.  The run's first step runs eagerly
 * (a warm-up of the libraries and of the scratch the backend sizes
 * lazily); after it, a shape's first step is captured and its later ones
 * replayed.  A capture during which scratch was reallocated (graph_realloc
 * ends the segment, so the step itself runs right) is not kept: the next
 * sighting captures again.  At most graph_shapes shapes are kept
 * (cuda_graph_cache), the least recently used dropped first; all are
 * dropped when a buffer they use is freed (the model's graph_reset, the
 * backend's scratch freed to grow: a first allocation keeps them). */
#pragma once

#include "memory.cuh"

struct StepGraphs {
    std::map<std::vector<int64_t>, StepGraph> by_key;
    long clock = 0;
    long freed_gen = 0;   /* I->freed_gen the graphs were captured under */
    long stats[4] = { 0, 0, 0, 0 };   /* steps eager, captured, replayed; shapes dropped */
};

static void graph_drop(StepGraph &g)
{
    for (const GraphSeg &s : g.segs) CK(cudaGraphExecDestroy(s.exec));   /* in flight: freed when done */
    g.segs.clear();
    g.captured = false;
}

static void graphs_flush(StepGraphs &G)
{
    for (auto &kv : G.by_key) graph_drop(kv.second);
    G.stats[3] += (long)G.by_key.size();
    G.by_key.clear();
}

/* the entry of key, made (the least recently used dropped at the cap) */
static StepGraph &graph_entry(StepGraphs &G, const std::vector<int64_t> &key, int cap)
{
    auto it = G.by_key.find(key);
    if (it == G.by_key.end()) {
        if ((int)G.by_key.size() >= cap) {
            auto old = G.by_key.begin();
            for (auto j = G.by_key.begin(); j != G.by_key.end(); ++j)
                if (j->second.last_use < old->second.last_use) old = j;
            graph_drop(old->second);
            G.by_key.erase(old);
            G.stats[3]++;
        }
        it = G.by_key.emplace(key, StepGraph{}).first;
    }
    it->second.last_use = ++G.clock;
    return it->second;
}

/* step into d_step, the dropout kernels' (DropArg) */
static __global__ void k_set_step(uint32_t *d_step, uint32_t step)
{
    EMU_SEEN(d_step, sizeof *d_step, true);
    *d_step = step;
}

/* the step's prologue, issued eagerly before its graphs: the weights'
 * shadow and the step number */
static void graph_prologue(Backend *be, uint32_t step)
{
    CudaImpl *I = IMPL(be);
    shadow_refresh(be);
    if (!I->d_step) CK(cudaMalloc((void **)&I->d_step, sizeof(uint32_t)));
    DECLARE_KERNEL(k_set_step, "graph_step", 4, 0, sizeof(uint32_t), 0);
    LAUNCH(k_set_step, 1, 1, 0, I->stream, I->d_step, step);
    CKL();
    I->graph_step = step;
}

static void cuda_graph_begin(Backend *be, const int64_t *key, int n_key, uint32_t step)
{
    CudaImpl *I = IMPL(be);
    if (grun.I) die(1, "cuda graphs: a step graph begun inside another");
    if (be->graph_shapes <= 0) return;
    if (!I->graphs) I->graphs = new StepGraphs();
    StepGraphs &G = *I->graphs;
    if (G.freed_gen != I->freed_gen) graphs_flush(G);
    G.freed_gen = I->freed_gen;
    StepGraph &g = graph_entry(G, std::vector<int64_t>(key, key + n_key), be->graph_shapes);
    int mode = g.captured ? GRAPH_REPLAY : G.stats[GRAPH_EAGER] ? GRAPH_CAPTURE : GRAPH_EAGER;
    /* the cost model's logs time and count the calls one by one: eager,
     * their segments marked (cost.h graph) */
    if (cost_logging()) mode = GRAPH_EAGER;
    graph_prologue(be, step);
    grun = GraphRun{ I, mode, &g, 0, false, 0, 0, 0, I->mem_gen };
}

/* the gradient hook (model.c) is about to run: the segment ends */
static void cuda_graph_break(Backend *be)
{
    if (grun.I == IMPL(be)) graph_break();
}

static void cuda_graph_end(Backend *be)
{
    CudaImpl *I = IMPL(be);
    if (grun.I != I) return;
    graph_break();
    GraphRun r = grun;
    grun = GraphRun{};
    if (r.mode == GRAPH_REPLAY && r.seg != r.g->segs.size())
        die(1, "cuda graphs: a replayed step ended after %zu of its %zu segments (cuda_graphs=0 runs without graphs)",
            r.seg, r.g->segs.size());
    /* scratch reallocated during the capture: its graphs may hold freed
     * addresses, the next sighting captures again */
    if (r.mode == GRAPH_CAPTURE) {
        if (I->mem_gen == r.gen0) r.g->captured = true;
        else graph_drop(*r.g);
    }
    I->graphs->stats[r.mode]++;
}

/* buffers the graphs use are freed (model_reserve grows, model_free) */
static void cuda_graph_reset(Backend *be)
{
    CudaImpl *I = IMPL(be);
    if (I->graphs) graphs_flush(*I->graphs);
}

/* steps run eagerly (warm-up), captured, replayed; shapes dropped */
static void cuda_graph_stats(Backend *be, long stats[4])
{
    CudaImpl *I = IMPL(be);
    for (int k = 0; k < 4; k++) stats[k] = I->graphs ? I->graphs->stats[k] : 0;
}

static void graphs_destroy(CudaImpl *I)
{
    if (I->graphs) graphs_flush(*I->graphs);
    delete I->graphs;
    I->graphs = NULL;
    if (I->d_step) cudaFree(I->d_step);
}
