/* Memory and precision: device allocation, the typed activation storage and
 * the bf16 shadow of the weights, host transfers, copies and conversions,
 * and the per-type load/store helpers and launch dispatch of the kernels. */
#pragma once

#include "cost.cuh"

/* ---------------------------------------------------------- bf16 storage
 *
 * With precision=bf16 the model's activations (everything it allocates with
 * alloc_act, see ops.h) are stored as bf16 (8-bit mantissa, fp32's exponent
 * range: no loss scaling needed), halving their memory and the bytes every
 * elementwise kernel moves; parameters, gradients, Adam moments, LayerNorm
 * statistics and losses stay fp32 (mixed precision as in Micikevicius et
 * al. 2018, with bf16 instead of fp16).  precision=fp16 is the same with
 * __half storage (the paper's own type, for GPUs without bf16: V100, T4),
 * plus dynamic loss scaling in train.c (loss_scale.h).
 *
 * Every activation argument of an op is a typed view (Act: device address +
 * DType).  Kernels are templates over the activation element type T; they
 * load and store through ld()/st(), overloaded per type (conversion to and
 * from fp32, round to nearest even), and compute in fp32.  An op checks
 * that its activation arguments share one type and picks the kernel's
 * instantiation once per launch (dispatch below): a new storage type (as
 * fp16 was) is one more overload of ld/st and one more case of dispatch,
 * not a branch in every kernel.
 *
 * GEMMs: when either input is bf16 both are given to cuBLAS as bf16 (the
 * weights through a bf16 shadow copy of the parameters, refreshed lazily
 * after anything writes the parameters: Adam, upload, copy, zero), with
 * fp32 accumulation (CUBLAS_COMPUTE_32F) and C stored bf16 (activations) or
 * fp32 (weight gradients, accumulated with beta = 1 in fp32). */

/* the storage types' conversions to and from fp32 (round to nearest even) */
static __host__ __device__ __forceinline__ float to_float(float v) { return v; }
static __host__ __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
/* fp16: a value past 65504 rounds to inf, which the loss scaler sees in the
 * gradients (any_nonfinite) and answers by skipping the step */
static __host__ __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T> static __host__ __device__ __forceinline__ T from_float(float v);
template <> __host__ __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __host__ __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

/* element i of storage type T, as fp32, and back (the emulator counts the
 * access for the cost model, cost.cuh) */
template <typename T> static __host__ __device__ __forceinline__ float ld(const T *p, size_t i)
{
    EMU_SEEN(p + i, sizeof *p, false);
    return to_float(p[i]);
}
template <typename T> static __host__ __device__ __forceinline__ void st(T *p, size_t i, float v)
{
    EMU_SEEN(p + i, sizeof *p, true);
    p[i] = from_float<T>(v);
}
/* the kernels' integer arrays (ids, lengths, segments, flags) and pointer
 * arrays go through the same helpers, so that the emulator counts every
 * byte a kernel moves (cost.cuh) */
static __host__ __device__ __forceinline__ int32_t ld(const int32_t *p, size_t i)
{
    EMU_SEEN(p + i, sizeof *p, false);
    return p[i];
}
static __host__ __device__ __forceinline__ uint32_t ld(const uint32_t *p, size_t i)
{
    EMU_SEEN(p + i, sizeof *p, false);
    return p[i];
}
static __host__ __device__ __forceinline__ void st(int32_t *p, size_t i, int32_t v)
{
    EMU_SEEN(p + i, sizeof *p, true);
    p[i] = v;
}
static __host__ __device__ __forceinline__ void st(void **p, size_t i, void *v)
{
    EMU_SEEN(p + i, sizeof *p, true);
    p[i] = v;
}

/* ---------------------------------------------------- 16-byte accesses
 *
 * A memory-bound kernel reaches the memory bandwidth only with enough
 * bytes in flight (Little's law, docs/gpu-model.md): a scalar 2-byte load
 * per thread keeps an eighth of what a 16-byte one does.  Pack<T> is 16
 * bytes of T, loaded and stored in one instruction by ldp/stp (counted by
 * the emulator element by element, like ld/st).  row_split() cuts the
 * elements [0, n) of rows into a scalar head up to 16-byte alignment, whole
 * packs and a scalar tail, the same for every array of a row when they are
 * equally aligned (else all scalar). */
template <typename T> struct alignas(16) Pack {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};

template <typename T> static __device__ __forceinline__ Pack<T> ldp(const T *p)
{
    EMU_ALIGNED(p, sizeof(Pack<T>), false);
    for (int e = 0; e < Pack<T>::N; e++) EMU_SEEN(p + e, sizeof(T), false);
    return *reinterpret_cast<const Pack<T> *>(p);
}

template <typename T> static __device__ __forceinline__ void stp(T *p, const Pack<T> &v)
{
    EMU_ALIGNED(p, sizeof(Pack<T>), true);
    for (int e = 0; e < Pack<T>::N; e++) EMU_SEEN(p + e, sizeof(T), true);
    *reinterpret_cast<Pack<T> *>(p) = v;
}

struct RowSplit {
    int head;    /* scalar elements [0, head) */
    int packs;   /* then packs of Pack<T>::N elements */
    int tail;    /* scalar elements [tail, n) */
};

/* the scalar elements before the first 16-byte boundary of the arrays p,
 * when they are all equally aligned; else n (all scalar) */
template <typename T> static __device__ __forceinline__ long pack_head(long n, std::initializer_list<const T *> p)
{
    uintptr_t mis = (uintptr_t)*p.begin() & 15;
    for (const T *q : p)
        if (((uintptr_t)q & 15) != mis) return n;
    long head = (long)((16 - mis) & 15) / (long)sizeof(T);
    return head < n ? head : n;
}

/* the split of rows of n elements of T starting at p[0], p[1], ... */
template <typename T> static __device__ __forceinline__ RowSplit row_split(int n, std::initializer_list<const T *> p)
{
    int head = (int)pack_head<T>(n, p), packs = (n - head) / Pack<T>::N;
    return RowSplit{ head, packs, head + packs * Pack<T>::N };
}

/* this thread's share of a row of n elements split as s: one(k) for each
 * scalar element, pack(k0) for each pack starting at element k0 */
template <typename One, typename PackF>
static __device__ __forceinline__ void row_for(const RowSplit &s, int n, int N, One &&one, PackF &&pack)
{
    for (int k = threadIdx.x; k < s.head; k += blockDim.x) one(k);
    for (int q = threadIdx.x; q < s.packs; q += blockDim.x) pack(s.head + q * N);
    for (int k = s.tail + threadIdx.x; k < n; k += blockDim.x) one(k);
}

/* f(k, z[k]) for this thread's share of the row z[0, n) */
template <typename T, typename F> static __device__ __forceinline__ void row_read(const T *z, int n, F &&f)
{
    constexpr int N = Pack<T>::N;
    row_for(row_split<T>(n, { z }), n, N, [&](int k) { f(k, ld(z, k)); },
            [&](int k0) {
                Pack<T> v = ldp(z + k0);
                for (int e = 0; e < N; e++) f(k0 + e, to_float(v.v[e]));
            });
}

/* z[k] = f(k, z[k]) for this thread's share of the row z[0, n) */
template <typename T, typename F> static __device__ __forceinline__ void row_update(T *z, int n, F &&f)
{
    constexpr int N = Pack<T>::N;
    row_for(row_split<T>(n, { z }), n, N, [&](int k) { st(z, k, f(k, ld(z, k))); },
            [&](int k0) {
                Pack<T> v = ldp(z + k0);
                for (int e = 0; e < N; e++) v.v[e] = from_float<T>(f(k0 + e, to_float(v.v[e])));
                stp(z + k0, v);
            });
}

/* z[k] = f(k) for this thread's share of the row z[0, n), z not read */
template <typename T, typename F> static __device__ __forceinline__ void row_store(T *z, int n, F &&f)
{
    constexpr int N = Pack<T>::N;
    row_for(row_split<T>(n, { z }), n, N, [&](int k) { st(z, k, f(k)); },
            [&](int k0) {
                Pack<T> v;
                for (int e = 0; e < N; e++) v.v[e] = from_float<T>(f(k0 + e));
                stp(z + k0, v);
            });
}

/* The same over a whole array of n elements, grid-stride as the
 * elementwise kernels run: one(i) for the scalar head and tail, pack(i0)
 * for each pack starting at element i0; all scalar unless the arrays p are
 * equally aligned */
template <typename T, typename One, typename PackF>
static __device__ __forceinline__ void grid_for(long n, std::initializer_list<const T *> p, One &&one, PackF &&pack)
{
    constexpr int N = Pack<T>::N;
    long stride = (long)gridDim.x * blockDim.x, t = blockIdx.x * (long)blockDim.x + threadIdx.x;
    long head = pack_head<T>(n, p), packs = (n - head) / N, tail = head + packs * N;
    for (long i = t; i < head; i += stride) one(i);
    for (long q = t; q < packs; q += stride) pack(head + q * N);
    for (long i = tail + t; i < n; i += stride) one(i);
}

/* y[i] = f(i, y[i]) for i in [0, n), in 16-byte packs over the whole grid */
template <typename T, typename F> static __device__ __forceinline__ void grid_update(T *y, long n, F &&f)
{
    constexpr int N = Pack<T>::N;
    grid_for<T>(n, { y }, [&](long i) { st(y, i, f(i, ld(y, i))); },
                [&](long i0) {
                    Pack<T> v = ldp(y + i0);
                    for (int e = 0; e < N; e++) v.v[e] = from_float<T>(f(i0 + e, to_float(v.v[e])));
                    stp(y + i0, v);
                });
}

/* f(T()) with T the C++ type of elements of type t: the one place where an
 * op's launch turns its DType into a kernel instantiation */
template <typename F> static void dispatch(DType t, F &&f)
{
    switch (t) {
    case DT_F32: f(float()); break;
    case DT_BF16: f(__nv_bfloat16()); break;
    case DT_F16: f(__half()); break;
    default: die(1, "cuda: activation element type %d unknown", (int)t);
    }
}

/* the common element type of an op's activation arguments (those with data;
 * the ops compute on one storage type per launch) */
static DType act_type(const char *op, std::initializer_list<Act> acts)
{
    int t = -1;
    for (const Act &a : acts) {
        if (!a.data) continue;
        if (t >= 0 && (int)a.dtype != t)
            die(1, "cuda %s: activations of different element types (%d, %d)", op, t, (int)a.dtype);
        t = (int)a.dtype;
    }
    return t < 0 ? DT_F32 : (DType)t;
}

/* the view's data as elements of T (after dispatch on its dtype) */
template <typename T> static T *tp(Act a) { return (T *)a.data; }

static bool in_params(CudaImpl *I, const void *p, size_t bytes)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)I->params, e = b + I->n_params * sizeof(float);
    return I->params && u < e && u + bytes > b;
}

/* anything that writes the master weights makes the narrow shadow stale */
static void touch(CudaImpl *I, const void *p, size_t bytes)
{
    if (I->shadow && in_params(I, p, bytes)) I->shadow_stale = true;
}

/* fp32 <-> T: every conversion goes through fp32 (round to nearest even) */
template <typename T> static __global__ void k_narrow(T *dst, const float *src, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        st(dst, i, ld(src, i));
}

template <typename T> static __global__ void k_widen(float *dst, const T *src, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        st(dst, i, ld(src, i));
}

/* n elements between storage types, one of them fp32 (the fp32 -> fp32
 * instantiations are never launched, so they are not compiled) */
static void convert(Backend *be, Act dst, Act src, long n)
{
    if (n <= 0) return;
    cudaStream_t s = IMPL(be)->stream;
    if (src.dtype == DT_F32 && dst.dtype != DT_F32)
        dispatch(dst.dtype, [&](auto z) {
            using T = decltype(z);
            if constexpr (!std::is_same<T, float>::value) {
                DECLARE_KERNEL(k_narrow<T>, "convert", sizeof(float), n * sizeof(float), n * sizeof(T), 0);
                LAUNCH(k_narrow<T>, nblocks(n, 256), 256, 0, s, tp<T>(dst), tp<float>(src), n);
            }
        });
    else if (dst.dtype == DT_F32 && src.dtype != DT_F32)
        dispatch(src.dtype, [&](auto z) {
            using T = decltype(z);
            if constexpr (!std::is_same<T, float>::value) {
                DECLARE_KERNEL(k_widen<T>, "convert", sizeof(T), n * sizeof(T), n * sizeof(float), 0);
                LAUNCH(k_widen<T>, nblocks(n, 256), 256, 0, s, tp<float>(dst), tp<T>(src), n);
            }
        });
    else
        die(1, "cuda: no conversion from element type %d to %d", (int)src.dtype, (int)dst.dtype);
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
    memset_async(IMPL(be), "alloc", p, n);
    return p;
}

static Act cuda_alloc_act(Backend *be, size_t n)
{
    CudaImpl *I = IMPL(be);
    size_t bytes = (n ? n : 1) * dtype_size(I->act_dtype);
    Act a = { cuda_alloc(be, bytes), I->act_dtype };   /* zero bits = 0.0 in fp32 and bf16 */
    if (!a.data) return a;
    I->act_size[a.data] = bytes;
    be->act_bytes += bytes;
    return a;
}

static void cuda_free(Backend *be, void *p)
{
    CudaImpl *I = IMPL(be);
    if (!p) return;
    auto it = I->act_size.find(p);
    if (it != I->act_size.end()) {
        be->act_bytes -= it->second;
        I->act_size.erase(it);
    }
    I->lt_mask_written.erase(p);   /* a later buffer at this address has no mask yet */
    CK(cudaFree(p));
}

static void cuda_set_params(Backend *be, float *params, size_t n)
{
    CudaImpl *I = IMPL(be);
    I->params = params;
    I->n_params = n;
    graph_realloc(I, true);   /* graphs hold the old parameters' addresses */
    if (I->shadow) {
        stream_sync(I, "set_params");   /* a queued GEMM may still read it */
        CK(cudaFree(I->shadow));
    }
    I->shadow = NULL;
    if (I->act_dtype != DT_F32 && n) CK(cudaMalloc(&I->shadow, n * dtype_size(I->act_dtype)));
    I->shadow_stale = true;
}

/* the weights at p as a narrow (bf16, fp16) GEMM operand: the shadow,
 * converted if stale */
static Act shadow_of(Backend *be, const float *p)
{
    CudaImpl *I = IMPL(be);
    Act sh = { I->shadow, I->act_dtype };
    if (I->shadow_stale) {
        convert(be, sh, act_f32((float *)I->params), (long)I->n_params);
        I->shadow_stale = false;
    }
    return act_at(sh, p - I->params);
}

/* the shadow converted now if stale (a step graph's prologue: the step's
 * GEMMs then never convert it, whatever ran between two steps) */
static void shadow_refresh(Backend *be)
{
    CudaImpl *I = IMPL(be);
    if (I->shadow && I->shadow_stale) shadow_of(be, I->params);
}

static void cuda_upload(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CudaImpl *I = IMPL(be);
    touch(I, dst, n);
    copy_async(I, "upload", dst, src, n, cudaMemcpyHostToDevice);
    stream_sync(I, "upload");   /* the caller may reuse src at once */
}

static void cuda_download(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    CudaImpl *I = IMPL(be);
    copy_async(I, "download", dst, src, n, cudaMemcpyDeviceToHost);
    stream_sync(I, "download");
}

static void cuda_zero(Backend *be, void *p, size_t n)
{
    if (!n) return;
    touch(IMPL(be), p, n);
    memset_async(IMPL(be), "zero", p, n);
}

static void cuda_copy(Backend *be, void *dst, const void *src, size_t n)
{
    if (!n || dst == src) return;
    touch(IMPL(be), dst, n);
    copy_async(IMPL(be), "copy", dst, src, n, cudaMemcpyDeviceToDevice);
}

static void cuda_sync(Backend *be) { stream_sync(IMPL(be), "sync"); }

/* fp32 host data into an activation: narrow storage is converted on the host */
static void cuda_upload_act(Backend *be, Act dst, const float *src, size_t n)
{
    if (dst.dtype == DT_F32) return cuda_upload(be, dst.data, src, n * sizeof(float));
    if (!n) return;
    CudaImpl *I = IMPL(be);
    dispatch(dst.dtype, [&](auto z) {
        using T = decltype(z);
        std::vector<T> h(n);
        for (size_t i = 0; i < n; i++) st(h.data(), i, src[i]);
        copy_async(I, "upload_act", dst.data, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
        stream_sync(I, "upload_act");
    });
}

/* an activation into fp32 host memory (e.g. attention weights P for the
 * maps): narrow storage is widened on the host */
static void cuda_download_act(Backend *be, float *dst, Act src, size_t n)
{
    if (src.dtype == DT_F32) return cuda_download(be, dst, src.data, n * sizeof(float));
    if (!n) return;
    CudaImpl *I = IMPL(be);
    dispatch(src.dtype, [&](auto z) {
        using T = decltype(z);
        std::vector<T> h(n);
        copy_async(I, "download_act", h.data(), src.data, n * sizeof(T), cudaMemcpyDeviceToHost);
        stream_sync(I, "download_act");
        for (size_t i = 0; i < n; i++) dst[i] = ld(h.data(), i);
    });
}

static void cuda_zero_act(Backend *be, Act p, size_t n) { cuda_zero(be, p.data, n * dtype_size(p.dtype)); }

/* between storage types: convert */
static void cuda_copy_act(Backend *be, Act dst, Act src, size_t n)
{
    if (dst.dtype == src.dtype) return cuda_copy(be, dst.data, src.data, n * dtype_size(dst.dtype));
    if (!n) return;
    touch(IMPL(be), dst.data, n * dtype_size(dst.dtype));
    convert(be, dst, src, (long)n);
}
