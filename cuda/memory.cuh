/* Memory and precision: device allocation, the bf16 activation storage and
 * the bf16 shadow of the weights, host transfers, copies and conversions. */
#pragma once

#include "common.cuh"

/* ---------------------------------------------------------- bf16 storage
 *
 * With precision=bf16 the model's activations (everything it allocates with
 * alloc_act, see ops.h) are stored as bf16 (8-bit mantissa, fp32's exponent
 * range: no loss scaling needed), halving their memory and the bytes every
 * elementwise kernel moves; parameters, gradients, Adam moments, LayerNorm
 * statistics and losses stay fp32 (mixed precision as in Micikevicius et
 * al. 2018, with bf16 instead of fp16).
 *
 * model.c is unchanged: it does float-pointer arithmetic on activation
 * buffers (a->qkv + hk), so alloc_act returns a *handle*, an address in a
 * host range reserved PROT_NONE with the fp32 size (never touched: any
 * host access faults), and cudaMallocs the bf16 storage.  Element index =
 * (float *)p - (float *)base.  Every op resolves each pointer argument to a
 * typed device pointer (TP: pointer + element type); kernels load and store
 * through ld()/st(), which convert to and from fp32 (round to nearest even)
 * with a branch that is uniform over the launch, and compute in fp32.
 * Pointers that are not handles (parameters, gradients, buffers the
 * decoders allocate with plain alloc) resolve to fp32 as before, so the ops
 * accept any mix, and precision=fp32/tf32 runs exactly the code of before.
 *
 * GEMMs: when either input is bf16 both are given to cuBLAS as bf16 (the
 * weights through a bf16 shadow copy of the parameters, refreshed lazily
 * after anything writes the parameters: Adam, upload, copy, zero), with
 * fp32 accumulation (CUBLAS_COMPUTE_32F) and C stored bf16 (activations) or
 * fp32 (weight gradients, accumulated with beta = 1 in fp32). */

/* typed device pointer */
struct TP {
    void *p;
    int bf;   /* 1: __nv_bfloat16 elements, 0: float */
};

static __device__ __forceinline__ float ld(TP t, size_t i)
{
    return t.bf ? __bfloat162float(((const __nv_bfloat16 *)t.p)[i]) : ((const float *)t.p)[i];
}

static __device__ __forceinline__ void st(TP t, size_t i, float v)
{
    if (t.bf)
        ((__nv_bfloat16 *)t.p)[i] = __float2bfloat16_rn(v);
    else
        ((float *)t.p)[i] = v;
}

/* t advanced by i elements */
static __host__ __device__ __forceinline__ TP at(TP t, size_t i)
{
    TP r = { (char *)t.p + i * (t.bf ? 2 : 4), t.bf };
    return r;
}

static const ActRange *find_act(CudaImpl *I, const void *p)
{
    uintptr_t u = (uintptr_t)p;
    auto it = std::upper_bound(I->acts.begin(), I->acts.end(), u,
                               [](uintptr_t v, const ActRange &r) { return v < r.base; });
    if (it == I->acts.begin()) return NULL;
    --it;
    return u - it->base < it->bytes ? &*it : NULL;
}

/* the device storage behind a pointer argument of an op */
static TP R(Backend *be, const void *p)
{
    CudaImpl *I = IMPL(be);
    TP t = { (void *)p, 0 };
    if (!I->bf16 || !p) return t;
    const ActRange *a = find_act(I, p);
    if (!a) return t;
    size_t off = (uintptr_t)p - a->base;
    if (off % sizeof(float)) die(1, "cuda: activation pointer %p is not float-aligned within its buffer", p);
    t.p = (char *)a->dev + off / 2;
    t.bf = 1;
    return t;
}

static bool in_params(CudaImpl *I, const void *p, size_t bytes)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)I->params, e = b + I->n_params * sizeof(float);
    return I->params && u < e && u + bytes > b;
}

/* anything that writes the master weights makes the bf16 shadow stale */
static void touch(CudaImpl *I, const void *p, size_t bytes)
{
    if (I->shadow && in_params(I, p, bytes)) I->shadow_stale = true;
}

static __global__ void k_convert(TP dst, TP src, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        st(dst, i, ld(src, i));
}

static void convert(Backend *be, TP dst, TP src, long n)
{
    if (n <= 0) return;
    LAUNCH(k_convert, nblocks(n, 256), 256, 0, IMPL(be)->stream, dst, src, n);
    CKL();
}

/* ---------------------------------------------------------------- memory */

static void *cuda_alloc(Backend *be, size_t bytes)
{
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    CK(cudaMemsetAsync(p, 0, n, IMPL(be)->stream));
    return p;
}

static void *cuda_alloc_act(Backend *be, size_t bytes)
{
    CudaImpl *I = IMPL(be);
    ActRange a;
    size_t held;
    if (!I->bf16) {
        a.dev = cuda_alloc(be, bytes);
        if (!a.dev) return NULL;
        a.base = (uintptr_t)a.dev;
        held = bytes;
    } else {
        size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
        if (!n) n = 1;
        /* NORESERVE: only address space, no memory, is taken on the host */
        void *h = mmap(NULL, n * sizeof(float), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (h == MAP_FAILED) return NULL;
        a.dev = cuda_alloc(be, n * sizeof(__nv_bfloat16));   /* zero bits = bf16 0.0 */
        if (!a.dev) {
            munmap(h, n * sizeof(float));
            return NULL;
        }
        a.base = (uintptr_t)h;
        held = n * sizeof(__nv_bfloat16);
    }
    a.bytes = bytes ? bytes : 1;
    auto it = std::upper_bound(I->acts.begin(), I->acts.end(), a.base,
                               [](uintptr_t v, const ActRange &r) { return v < r.base; });
    I->acts.insert(it, a);
    be->act_bytes += held;
    return (void *)a.base;
}

static void cuda_free(Backend *be, void *p)
{
    CudaImpl *I = IMPL(be);
    if (!p) return;
    const ActRange *a = find_act(I, p);
    if (a && a->base == (uintptr_t)p) {
        size_t i = a - I->acts.data();
        ActRange r = *a;
        I->acts.erase(I->acts.begin() + i);
        if (r.dev != p) {   /* bf16: the handle's reservation and the storage */
            size_t n = (r.bytes + sizeof(float) - 1) / sizeof(float);
            munmap(p, n * sizeof(float));
            be->act_bytes -= n * sizeof(__nv_bfloat16);
            CK(cudaFree(r.dev));
            return;
        }
        be->act_bytes -= r.bytes;
    }
    CK(cudaFree(p));
}

static void cuda_set_params(Backend *be, float *params, size_t n)
{
    CudaImpl *I = IMPL(be);
    I->params = params;
    I->n_params = n;
    if (I->shadow) CK(cudaFree(I->shadow));
    I->shadow = NULL;
    if (I->bf16 && n) CK(cudaMalloc((void **)&I->shadow, n * sizeof(__nv_bfloat16)));
    I->shadow_stale = true;
}

/* the weights as a bf16 GEMM operand: the shadow, converted if stale */
static TP shadow_of(Backend *be, const void *p)
{
    CudaImpl *I = IMPL(be);
    if (I->shadow_stale) {
        TP d = { I->shadow, 1 }, s = { (void *)I->params, 0 };
        convert(be, d, s, (long)I->n_params);
        I->shadow_stale = false;
    }
    TP t = { I->shadow, 1 };
    return at(t, (const float *)p - I->params);
}

static void cuda_upload(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CudaImpl *I = IMPL(be);
    TP d = R(be, dst);
    touch(I, dst, n);
    if (d.bf) {   /* fp32 host data into bf16 storage: convert on the host */
        size_t k = n / sizeof(float);
        std::vector<__nv_bfloat16> h(k);
        for (size_t i = 0; i < k; i++) h[i] = __float2bfloat16_rn(((const float *)src)[i]);
        CK(cudaMemcpyAsync(d.p, h.data(), k * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, I->stream));
        CK(cudaStreamSynchronize(I->stream));
        return;
    }
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, I->stream));
    CK(cudaStreamSynchronize(I->stream));   /* the caller may reuse src at once */
}

static void cuda_download(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CudaImpl *I = IMPL(be);
    TP s = R(be, src);
    if (s.bf) {   /* e.g. attention weights P for the maps: widen on the host */
        size_t k = n / sizeof(float);
        std::vector<__nv_bfloat16> h(k);
        CK(cudaMemcpyAsync(h.data(), s.p, k * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost, I->stream));
        CK(cudaStreamSynchronize(I->stream));
        for (size_t i = 0; i < k; i++) ((float *)dst)[i] = __bfloat162float(h[i]);
        return;
    }
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, I->stream));
    CK(cudaStreamSynchronize(I->stream));
}

static void cuda_zero(Backend *be, void *p, size_t n)
{
    if (!n) return;
    TP t = R(be, p);
    touch(IMPL(be), p, n);
    CK(cudaMemsetAsync(t.p, 0, t.bf ? n / 2 : n, IMPL(be)->stream));
}

static void cuda_copy(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n || dst == src) return;
    TP d = R(be, dst), s = R(be, src);
    touch(IMPL(be), dst, n);
    if (d.bf != s.bf) {   /* between bf16 and fp32 storage: convert */
        convert(be, d, s, (long)(n / sizeof(float)));
        return;
    }
    CK(cudaMemcpyAsync(d.p, s.p, d.bf ? n / 2 : n, cudaMemcpyDeviceToDevice, IMPL(be)->stream));
}

static void cuda_sync(Backend *be) { CK(cudaStreamSynchronize(IMPL(be)->stream)); }
