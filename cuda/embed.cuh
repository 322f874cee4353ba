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
    graph_realloc(I);
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
        DECLARE_KERNEL(k_embed_forward<A>, "embed_forward", 2 * sizeof(float),
                       n * sizeof(float) + (double)T * d * sizeof(float) + rows * sizeof(int32_t) +
                           (p > 0 ? B * sizeof(uint32_t) : 0),
                       n * sizeof(A), 2.0 * n + (p > 0 ? 100.0 * n : 0));
        LAUNCH(k_embed_forward<A>, nblocks(n, 256), 256, 0, IMPL(be)->stream, tp<A>(out), E, pos, tokens, sent_id, T,
               d, n, scale, pos_offset, p, drop_scale(p), drop_arg(IMPL(be), key));
    });
    CKL();
}

/* One block row per distinct token: seg[0..nu] are segment starts into
 * order[], seg_tok[u] the token.  Positions of a token are added in
 * ascending order, the same order (and the same float operations) as the
 * CPU backend, so the result is deterministic and matches it. */
template <typename A>
static __global__ void k_embed_backward_tokens(float *dE, const A *dout, const int32_t *order, const int32_t *seg,
                                               const int32_t *seg_tok, const uint32_t *sent_id, int T, int d,
                                               float scale, float p, float ks, DropArg key_arg)
{
    const DropoutKey key = drop_key(key_arg);
    int u = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= d) return;
    size_t e = (size_t)ld(seg_tok, u) * d + j;
    float acc = ld(dE, e);
    for (int k = ld(seg, u), end = ld(seg, u + 1); k < end; k++) {
        int i = ld(order, k), b = i / T, t = i % T;
        float v = drop_apply(ld(dout, (size_t)i * d + j), p, ks, key, p > 0.0f ? ld(sent_id, b) : 0, (uint32_t)t,
                             (uint32_t)j);
        acc = __fadd_rn(acc, __fmul_rn(v, scale));
    }
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

static void cuda_embed_backward(Backend *be, float *dE, float *dpos, Act dout, const int32_t *tokens,
                                const int32_t *host_tokens, const uint32_t *sent_id, int B, int T, int d, int vocab,
                                float scale, float p, DropoutKey key)
{
    CudaImpl *I = IMPL(be);
    int n = B * T;
    if (n <= 0 || d <= 0) return;
    /* outside a step graph: the grid and the segments come from the host */
    GraphEager eager;
    /* group positions by token: a stable counting sort of the B*T ids on the
     * host (tens of microseconds), so that the device needs no atomics.  The
     * ids come from the caller's host copy; only without one are they read
     * back, which waits for the stream. */
    const int32_t *tok = host_tokens;
    if (!tok) {
        I->h_tok.resize(n);
        cuda_download(be, I->h_tok.data(), tokens, sizeof(int32_t) * n);
        tok = I->h_tok.data();
    }
    std::vector<int32_t> &count = I->count;
    count.assign((size_t)vocab + 1, 0);
    for (int i = 0; i < n; i++) {
        int t = tok[i];
        if (t < 0 || t >= vocab) die(1, "cuda embed_backward: token %d outside the vocabulary of %d", t, vocab);
        count[t + 1]++;
    }
    int nu = 0;
    for (int t = 0; t < vocab; t++) nu += count[t + 1] > 0;
    for (int t = 0; t < vocab; t++) count[t + 1] += count[t];
    /* layout: order[n] | seg[nu+1] | seg_tok[nu], staged in pinned memory
     * and copied asynchronously (no host-device synchronisation) */
    size_t need = (size_t)n + 2 * nu + 1;
    int k = I->seg_turn;
    I->seg_turn ^= 1;
    CK(cudaEventSynchronize(I->seg_copied[k]));   /* the last copy out of this buffer is done */
    if (need > I->seg_host_cap[k]) {
        if (I->seg_host[k]) CK(cudaFreeHost(I->seg_host[k]));
        I->seg_host_cap[k] = need * 2;
        CK(cudaMallocHost((void **)&I->seg_host[k], I->seg_host_cap[k] * sizeof(int32_t)));
    }
    int32_t *order = I->seg_host[k], *seg = order + n, *seg_tok = seg + nu + 1;
    for (int i = 0; i < n; i++) order[count[tok[i]]++] = i;   /* count[t] ends at the end of t's segment */
    int u = 0;
    for (int t = 0, start = 0; t < vocab; t++)
        if (count[t] > start) {
            seg[u] = start;
            seg_tok[u] = t;
            u++;
            start = count[t];
        }
    seg[nu] = n;
    if (need > I->seg_cap) {
        graph_realloc(I);
        stream_sync(I, "embed_backward");
        if (I->seg) CK(cudaFree(I->seg));
        I->seg_cap = need * 2;
        CK(cudaMalloc((void **)&I->seg, I->seg_cap * sizeof(int32_t)));
    }
    /* stream order: this copy runs after the kernel that read I->seg last */
    copy_async(I, "embed_backward", I->seg, order, need * sizeof(int32_t), cudaMemcpyHostToDevice);
    CK(cudaEventRecord(I->seg_copied[k], I->stream));
    float ks = drop_scale(p);
    dim3 grid(nu, (d + 127) / 128);
    dispatch(dout.dtype, [&](auto z) {
        using A = decltype(z);
        /* dout once, the rows of dE of the nu distinct tokens read and
         * written, the segments; a Philox call per element with dropout */
        double e = (double)n * d;
        DECLARE_KERNEL(k_embed_backward_tokens<A>, "embed_backward", 4 * (sizeof(A) + sizeof(int32_t)),
                       e * sizeof(A) + (double)nu * d * sizeof(float) + need * sizeof(int32_t) +
                           (p > 0 ? B * sizeof(uint32_t) : 0),
                       (double)nu * d * sizeof(float), 2 * e + (p > 0 ? 100 * e : 0));
        LAUNCH(k_embed_backward_tokens<A>, grid, 128, 0, I->stream, dE, tp<A>(dout), I->seg, I->seg + n,
               I->seg + n + nu + 1, sent_id, T, d, scale, p, ks, drop_arg(I, key));
        CKL();
        if (dpos) {
            DECLARE_KERNEL(k_embed_backward_pos<A>, "embed_backward", 4 * sizeof(A),
                           e * sizeof(A) + (double)T * d * sizeof(float) + (p > 0 ? B * sizeof(uint32_t) : 0),
                           (double)T * d * sizeof(float), e + (p > 0 ? 100 * e : 0));
            LAUNCH(k_embed_backward_pos<A>, nblocks((long)T * d, 256), 256, 0, I->stream, dpos, tp<A>(dout), sent_id,
                   B, T, d, p, ks, drop_arg(I, key));
            CKL();
        }
    });
}
