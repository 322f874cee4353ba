/* Token embeddings and positional encodings (sections 3.4, 3.5). */
#pragma once

#include "memory.cuh"

/* ------------------------------------------------------------ embeddings */

/* PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section
 * 3.5), in double on the host as the CPU backend computes it */
static const float *sinusoids(Backend *be, int n_pos, int d)
{
    CudaImpl *I = IMPL(be);
    if (I->sin_table && I->sin_d == d && I->sin_n >= n_pos) return I->sin_table;
    int n = n_pos > 2 * I->sin_n ? n_pos : 2 * I->sin_n;
    if (I->sin_d != d) n = n_pos;
    std::vector<float> h((size_t)n * d);
    for (int pos = 0; pos < n; pos++)
        for (int j = 0; j < d; j++) {
            double rate = pow(10000.0, (double)(j & ~1) / d);
            double a = pos / rate;
            h[(size_t)pos * d + j] = (float)((j & 1) ? cos(a) : sin(a));
        }
    graph_realloc(I, I->sin_table != NULL);
    stream_sync(I, "embed_forward");
    if (I->sin_table) CK(cudaFree(I->sin_table));
    CK(cudaMalloc((void **)&I->sin_table, h.size() * sizeof(float)));
    /* on the backend's stream: a cudaMemcpy on the legacy default stream is
     * not ordered before the non-blocking stream's kernels that read the
     * table; the host waits before h goes out of scope */
    copy_async(I, "embed_forward", I->sin_table, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
    stream_sync(I, "embed_forward");
    I->sin_d = d;
    I->sin_n = n;
    return I->sin_table;
}

template <typename A>
static __global__ void k_embed_forward(A *out, const float *E, const float *pos, const int32_t *tokens,
                                       const uint32_t *sent_id, int T, int d, long n, float scale, int pos_offset,
                                       float p, float ks, DropArg key_arg)
{
    const DropoutKey key = drop_key(key_arg);
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        long i = idx / d;
        int j = (int)(idx % d), b = (int)(i / T), t = (int)(i % T), ps = t + pos_offset;
        float v = ld(E, (size_t)ld(tokens, i) * d + j) * scale + ld(pos, (size_t)ps * d + j);
        st(out, idx, drop_apply(v, p, ks, key, p > 0.0f ? ld(sent_id, b) : 0, (uint32_t)ps, (uint32_t)j));
    }
}

/* The same four features a thread (d a multiple of 4, E and the positions
 * 16-byte aligned): a 16-byte load of E's row and of the positions, and
 * one Philox call (dropout_keep4) for the four dropout decisions where the
 * kernel above makes one per feature, ten rounds of 32-bit multiplies for
 * each element it writes (issue 44: the H200 of cf63d2a ran it at 0.4
 * TB/s of its bytes, 120 us a call for base's 25,010 tokens) */
template <typename A>
static __global__ void k_embed_forward4(A *out, const float *E, const float *pos, const int32_t *tokens,
                                        const uint32_t *sent_id, int T, int d, long n4, float scale, int pos_offset,
                                        float p, float ks, DropArg key_arg)
{
    const DropoutKey key = drop_key(key_arg);
    int q = d / 4;
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n4; idx += (long)gridDim.x * blockDim.x) {
        long i = idx / q;
        int j = (int)(idx % q) * 4, b = (int)(i / T), t = (int)(i % T), ps = t + pos_offset;
        Pack<float> e = ldp(E + (size_t)ld(tokens, i) * d + j), pe = ldp(pos + (size_t)ps * d + j);
        unsigned keep = p > 0.0f ? dropout_keep4(key, p, ld(sent_id, b), (uint32_t)ps, (uint32_t)j / 4) : 15u;
        for (int k = 0; k < 4; k++) {
            float v = e.v[k] * scale + pe.v[k];
            st(out, i * d + j + k, p > 0.0f ? ((keep >> k) & 1 ? v * ks : 0.0f) : v);
        }
    }
}

static void cuda_embed_forward(Backend *be, Act out, const float *E, const float *pos_table, const int32_t *tokens,
                               const uint32_t *sent_id, int B, int T, int d, float scale, int pos_offset, float p,
                               DropoutKey key)
{
    long n = (long)B * T * d;
    if (n <= 0) return;
    const float *pos = pos_table ? pos_table : sinusoids(be, pos_offset + T, d);
    dispatch(out.dtype, [&](auto z) {
        using A = decltype(z);
        /* a row of E gathered per token (a token repeated in the batch is
         * declared again: from L2 at best), the T x d positions once, the
         * ids; FLOPs: the dropout decision is a Philox call per element */
        double rows = (double)B * T;
        double rd = n * sizeof(float) + (double)T * d * sizeof(float) + rows * sizeof(int32_t) +
                    (p > 0 ? B * sizeof(uint32_t) : 0);
        if (d % 4 == 0 && !(((uintptr_t)E | (uintptr_t)pos) & 15)) {
            DECLARE_KERNEL(k_embed_forward4<A>, "embed_forward", 2 * 16, rd, n * sizeof(A),
                           2.0 * n + (p > 0 ? 25.0 * n : 0));
            LAUNCH(k_embed_forward4<A>, nblocks(n / 4, 256), 256, 0, IMPL(be)->stream, tp<A>(out), E, pos, tokens,
                   sent_id, T, d, n / 4, scale, pos_offset, p, drop_scale(p), drop_arg(IMPL(be), key));
        } else {
            DECLARE_KERNEL(k_embed_forward<A>, "embed_forward", 2 * sizeof(float), rd, n * sizeof(A),
                           2.0 * n + (p > 0 ? 100.0 * n : 0));
            LAUNCH(k_embed_forward<A>, nblocks(n, 256), 256, 0, IMPL(be)->stream, tp<A>(out), E, pos, tokens,
                   sent_id, T, d, n, scale, pos_offset, p, drop_scale(p), drop_arg(IMPL(be), key));
        }
    });
    CKL();
}

/* Occurrences of a token summed by one thread per column serially, at most
 * EMBED_CHUNK of them: a token's occurrences are one chain of dependent
 * adds, and BOS and EOS occur once per sentence (610 times in base's
 * batch; padding, now skipped, more often still in real batches): one
 * chain of 610 took 416 us a call on the H200 (issue 44; the measured
 * batch had no padding).  A longer segment is cut into chunks whose sums
 * are added in chunk order by k_embed_backward_combine: chains of at most
 * 32 and 610 / 32 = 20 there (sqrt(610) = 25 would balance them). */
#define EMBED_CHUNK 32

/* One block row per chunk of a token's positions: cstart[c..c+1) indexes
 * order[], ctok[c] is the token.  A token of one chunk adds to dE
 * directly, its positions in ascending order, the same order (and the
 * same float operations) as the CPU backend; a longer token's chunk c
 * writes its sum to partial row cslot[c] (>= 0) for the combine.  Every
 * sum has a fixed order whatever the schedule: deterministic, no atomics. */
template <typename A>
static __global__ void k_embed_backward_tokens(float *dE, float *partial, const A *dout, const int32_t *order,
                                               const int32_t *cstart, const int32_t *ctok, const int32_t *cslot,
                                               const uint32_t *sent_id, int T, int d, float scale, float p, float ks,
                                               DropArg key_arg)
{
    const DropoutKey key = drop_key(key_arg);
    int c = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= d) return;
    int slot = ld(cslot, c);
    size_t e = slot < 0 ? (size_t)ld(ctok, c) * d + j : (size_t)slot * d + j;
    float acc = slot < 0 ? ld(dE, e) : 0.0f;
    for (int k = ld(cstart, c), end = ld(cstart, c + 1); k < end; k++) {
        int i = ld(order, k), b = i / T, t = i % T;
        float v = drop_apply(ld(dout, (size_t)i * d + j), p, ks, key, p > 0.0f ? ld(sent_id, b) : 0, (uint32_t)t,
                             (uint32_t)j);
        acc = __fadd_rn(acc, __fmul_rn(v, scale));
    }
    st(slot < 0 ? dE : partial, e, acc);
}

/* dE[ltok[u]] += the partial rows lfirst[u]..lfirst[u+1] of a token cut
 * into chunks, in chunk order */
static __global__ void k_embed_backward_combine(float *dE, const float *partial, const int32_t *lfirst,
                                                const int32_t *ltok, int d)
{
    int u = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= d) return;
    size_t e = (size_t)ld(ltok, u) * d + j;
    float acc = ld(dE, e);
    for (int s = ld(lfirst, u), end = ld(lfirst, u + 1); s < end; s++)
        acc = __fadd_rn(acc, ld(partial, (size_t)s * d + j));
    st(dE, e, acc);
}

/* learned positions: dpos[t, j] += sum over sentences b in order */
template <typename A>
static __global__ void k_embed_backward_pos(float *dpos, const A *dout, const uint32_t *sent_id, int B, int T, int d,
                                            float p, float ks, DropArg key_arg)
{
    const DropoutKey key = drop_key(key_arg);
    long n = (long)T * d;
    for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < n; idx += (long)gridDim.x * blockDim.x) {
        int t = (int)(idx / d), j = (int)(idx % d);
        float acc = ld(dpos, idx);
        for (int b = 0; b < B; b++)
            acc += drop_apply(ld(dout, ((size_t)b * T + t) * d + j), p, ks, key, p > 0.0f ? ld(sent_id, b) : 0,
                              (uint32_t)t, (uint32_t)j);
        st(dpos, idx, acc);
    }
}

/* the padding token (ops.h: token 0, as xent_forward_backward's target 0) */
#define PAD_TOKEN 0

/* The positions of a batch grouped by token and cut into chunks of at most
 * EMBED_CHUNK (k_embed_backward_tokens), as int32 words in one buffer:
 * order[n] | cstart[nc+1] | ctok[nc] | cslot[nc] | lfirst[nl+1] | ltok[nl] */
struct EmbedSegs {
    int n;        /* positions of tokens other than padding */
    int nc;       /* chunks */
    int nl;       /* tokens of more than one chunk */
    int nslots;   /* their chunks, each a row of partial sums */
    size_t need;  /* words of the buffer */
};

/* count[t + 1] = occurrences of token t, padding's set to 0 (not summed:
 * cuda_embed_backward says why), and the sizes of the layout */
static EmbedSegs embed_count(std::vector<int32_t> &count, const int32_t *tok, int n, int vocab)
{
    count.assign((size_t)vocab + 1, 0);
    for (int i = 0; i < n; i++) {
        int t = tok[i];
        if (t < 0 || t >= vocab) die(1, "cuda embed_backward: token %d outside the vocabulary of %d", t, vocab);
        count[t + 1]++;
    }
    count[PAD_TOKEN + 1] = 0;
    EmbedSegs g = {};
    for (int t = 0; t < vocab; t++) {
        int len = count[t + 1], k = (len + EMBED_CHUNK - 1) / EMBED_CHUNK;
        g.n += len;
        g.nc += k;
        if (k > 1) {
            g.nl++;
            g.nslots += k;
        }
    }
    g.need = (size_t)g.n + 3 * (size_t)g.nc + 2 * (size_t)g.nl + 2;
    return g;
}

/* the layout of g at buf: a stable counting sort of the positions by
 * token (count, from embed_count, becomes each segment's end), then the
 * chunks of each segment in token order */
static void embed_fill(int32_t *buf, const EmbedSegs &g, std::vector<int32_t> &count, const int32_t *tok, int n,
                       int vocab)
{
    int32_t *order = buf, *cstart = order + g.n, *ctok = cstart + g.nc + 1, *cslot = ctok + g.nc;
    int32_t *lfirst = cslot + g.nc, *ltok = lfirst + g.nl + 1;
    for (int t = 0; t < vocab; t++) count[t + 1] += count[t];   /* count[t]: t's segment's start */
    for (int i = 0; i < n; i++)
        if (tok[i] != PAD_TOKEN) order[count[tok[i]]++] = i;       /* count[t]: now its end */
    int c = 0, l = 0, slot = 0;
    for (int t = 0, start = 0; t < vocab; start = count[t], t++) {
        int len = count[t] - start, k = (len + EMBED_CHUNK - 1) / EMBED_CHUNK;
        if (k > 1) {
            lfirst[l] = slot;
            ltok[l++] = t;
        }
        for (int q = 0; q < k; q++, c++) {
            cstart[c] = start + q * EMBED_CHUNK;
            ctok[c] = t;
            cslot[c] = k > 1 ? slot++ : -1;
        }
    }
    cstart[g.nc] = g.n;
    lfirst[g.nl] = g.nslots;
}

/* the layout of g for tokens tok, staged in pinned memory and copied
 * asynchronously (no host-device synchronisation); its device address */
static const int32_t *embed_upload(CudaImpl *I, const EmbedSegs &g, const int32_t *tok, int n, int vocab)
{
    int k = I->seg_turn;
    I->seg_turn ^= 1;
    CK(cudaEventSynchronize(I->seg_copied[k]));   /* the last copy out of this buffer is done */
    if (g.need > I->seg_host_cap[k]) {
        if (I->seg_host[k]) CK(cudaFreeHost(I->seg_host[k]));
        I->seg_host_cap[k] = g.need * 2;
        CK(cudaMallocHost((void **)&I->seg_host[k], I->seg_host_cap[k] * sizeof(int32_t)));
    }
    embed_fill(I->seg_host[k], g, I->count, tok, n, vocab);
    if (g.need > I->seg_cap) {
        graph_realloc(I, I->seg != NULL);
        stream_sync(I, "embed_backward");
        if (I->seg) CK(cudaFree(I->seg));
        I->seg_cap = g.need * 2;
        CK(cudaMalloc((void **)&I->seg, I->seg_cap * sizeof(int32_t)));
    }
    /* stream order: this copy runs after the kernel that read I->seg last */
    copy_async(I, "embed_backward", I->seg, I->seg_host[k], g.need * sizeof(int32_t), cudaMemcpyHostToDevice);
    CK(cudaEventRecord(I->seg_copied[k], I->stream));
    return I->seg;
}

/* The rows of chunk sums of at least n floats.  Not part_buffer's scratch:
 * the column sums in a step's graphs hold its address, and these rows
 * follow the batch's tokens, not the step's shape, so a replayed step can
 * need more than any before; the embedding backward runs between two of
 * its segments, which would leave the next replaying a freed address
 * (graph.cuh's check ends the run there).  No graph holds this buffer: the
 * kernels that use it run eagerly (GraphEager). */
static float *embed_partial(CudaImpl *I, size_t n)
{
    if (n > I->embed_part_cap) {
        if (I->embed_part) {
            stream_sync(I, "embed_backward");   /* the last combine may still read it */
            CK(cudaFree(I->embed_part));
        }
        I->embed_part = NULL;
        CK(cudaMalloc((void **)&I->embed_part, n * sizeof(float)));
        I->embed_part_cap = n;
    }
    return I->embed_part;
}

/* dE += the token rows of dout: the chunks, then the combine of the tokens
 * cut into several (seg: embed_upload's device layout) */
template <typename A>
static void embed_launch_tokens(Backend *be, float *dE, Act dout, const EmbedSegs &g, const int32_t *seg,
                                const uint32_t *sent_id, int B, int T, int d, float scale, float p, DropoutKey key)
{
    CudaImpl *I = IMPL(be);
    const int32_t *order = seg, *cstart = order + g.n, *ctok = cstart + g.nc + 1, *cslot = ctok + g.nc;
    const int32_t *lfirst = cslot + g.nc, *ltok = lfirst + g.nl + 1;
    float *partial = g.nslots ? embed_partial(I, (size_t)g.nslots * d) : NULL;
    /* dout's rows of the n positions once, the rows of dE of the tokens of
     * one chunk read and written, the partial rows written, the chunk
     * tables; a Philox call per element with dropout */
    double e = (double)g.n * d, row = (double)d * sizeof(float), ones = g.nc - g.nslots;
    DECLARE_KERNEL(k_embed_backward_tokens<A>, "embed_backward", 4 * (sizeof(A) + sizeof(int32_t)),
                   e * sizeof(A) + ones * row + ((double)g.n + 3.0 * g.nc + 1) * sizeof(int32_t) +
                       (p > 0 ? B * sizeof(uint32_t) : 0),
                   (ones + g.nslots) * row, 2 * e + (p > 0 ? 100 * e : 0));
    LAUNCH(k_embed_backward_tokens<A>, dim3(g.nc, (d + 127) / 128), 128, 0, I->stream, dE, partial, tp<A>(dout),
           order, cstart, ctok, cslot, sent_id, T, d, scale, p, drop_scale(p), drop_arg(I, key));
    CKL();
    if (!g.nl) return;
    /* the partial rows and the long tokens' rows of dE read, those written */
    DECLARE_KERNEL(k_embed_backward_combine, "embed_backward", 4 * sizeof(float),
                   ((double)g.nslots + g.nl) * row + (2.0 * g.nl + 1) * sizeof(int32_t), (double)g.nl * row,
                   (double)g.nslots * d);
    LAUNCH(k_embed_backward_combine, dim3(g.nl, (d + 127) / 128), 128, 0, I->stream, dE, (const float *)partial,
           lfirst, ltok, d);
    CKL();
}

/* Padding's rows of dout are not summed into dE[PAD_TOKEN]: they are zero by
 * construction.  Every op on a row is row-wise (LayerNorm, feed-forward,
 * dropout) except attention, where pad keys are masked (probability 0, so
 * dV = P^T dO and dK = dS^T Q get nothing from them); so a pad position's
 * output reaches only the decoder's loss rows of padding, whose gradient
 * xent_forward_backward zeroes (target 0), and masked keys and values.
 * The CPU adds those zeros (test_cuda_step checks that they are zero on
 * every backend).  Without them padding was the longest segment. */
static void cuda_embed_backward(Backend *be, float *dE, float *dpos, Act dout, const int32_t *tokens,
                                const int32_t *host_tokens, const uint32_t *sent_id, int B, int T, int d, int vocab,
                                float scale, float p, DropoutKey key)
{
    CudaImpl *I = IMPL(be);
    int n = B * T;
    if (n <= 0 || d <= 0) return;
    /* outside a step graph: the grid and the segments come from the host */
    GraphEager eager;
    /* group positions by token on the host (tens of microseconds), so that
     * the device needs no atomics.  The ids come from the caller's host
     * copy; only without one are they read back, which waits for the
     * stream. */
    const int32_t *tok = host_tokens;
    if (!tok) {
        I->h_tok.resize(n);
        cuda_download(be, I->h_tok.data(), tokens, sizeof(int32_t) * n);
        tok = I->h_tok.data();
    }
    EmbedSegs g = embed_count(I->count, tok, n, vocab);
    const int32_t *seg = g.nc ? embed_upload(I, g, tok, n, vocab) : NULL;
    float ks = drop_scale(p);
    dispatch(dout.dtype, [&](auto z) {
        using A = decltype(z);
        if (g.nc) embed_launch_tokens<A>(be, dE, dout, g, seg, sent_id, B, T, d, scale, p, key);
        if (dpos) {
            double e = (double)n * d;
            DECLARE_KERNEL(k_embed_backward_pos<A>, "embed_backward", 4 * sizeof(A),
                           e * sizeof(A) + (double)T * d * sizeof(float) + (p > 0 ? B * sizeof(uint32_t) : 0),
                           (double)T * d * sizeof(float), e + (p > 0 ? 100 * e : 0));
            LAUNCH(k_embed_backward_pos<A>, nblocks((long)T * d, 256), 256, 0, I->stream, dpos, tp<A>(dout), sent_id,
                   B, T, d, p, ks, drop_arg(I, key));
            CKL();
        }
    });
}
