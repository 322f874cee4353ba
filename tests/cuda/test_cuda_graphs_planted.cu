/* The CUDA emulator's stream capture and graphs (cuda/emu/emu.cc, "stream
 * capture"), with the mistakes a GPU punishes planted:
 *  - a scalar that changes between launches passed by value: the graph
 *    replays the value captured, so the result visibly differs from an
 *    eager launch; the same scalar read from device memory follows it;
 *  - nothing runs at capture time; a graph launched twice runs twice;
 *  - a synchronising call inside a capture (cudaMemcpy, cudaStreamSynchronize
 *    of the capturing stream, cudaMalloc, a copy from pageable memory):
 *    refused with cudaErrorStreamCaptureUnsupported, and the capture ends
 *    invalidated with no graph; under cudaStreamCaptureModeThreadLocal
 *    another thread's cudaMalloc is allowed, under Global it is not;
 *  - a capture of the legacy default stream: refused.
 * Compiled like the backend (g++ -x c++ -DCUDA_EMULATION). */
#include "cuda_compat.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern "C" void cuda_emu_work_counts(long *submits, long *graph_launches, long *replayed);

static int failures;

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

/* out[i] += a * (i + 1): the step's scalar a by value */
static __global__ void k_add_scalar(float *out, float a)
{
    out[threadIdx.x] += a * (float)(threadIdx.x + 1);
}

/* the same with a read from device memory, as the backend's step counter */
static __global__ void k_add_device(float *out, const float *a)
{
    out[threadIdx.x] += *a * (float)(threadIdx.x + 1);
}

static const int N = 32;

static float first(float *d, cudaStream_t s)
{
    float h[N];
    cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    return h[0] + h[N - 1] / N;   /* 2a for out = a (i + 1) */
}

static cudaGraphExec_t capture_add(cudaStream_t s, float *d, float a, const float *dev_a)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (dev_a) LAUNCH(k_add_device, 1, N, 0, s, d, dev_a);
    else LAUNCH(k_add_scalar, 1, N, 0, s, d, a);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&x, g, 0) != cudaSuccess) return NULL;
    cudaGraphDestroy(g);
    return x;
}

/* the planted stale argument: a captured by value, changed on the host */
static void stale_argument(cudaStream_t s, float *d, float *dev_a)
{
    float a = 1.0f;
    cudaMemsetAsync(d, 0, N * sizeof(float), s);
    cudaGraphExec_t x = capture_add(s, d, a, NULL);
    check(x && first(d, s) == 0.0f, "nothing runs at capture time");
    a = 2.0f;   /* the next step's value */
    cudaGraphLaunch(x, s);
    float replayed = first(d, s);
    cudaMemsetAsync(d, 0, N * sizeof(float), s);
    LAUNCH(k_add_scalar, 1, N, 0, s, d, a);
    float eager = first(d, s);
    printf("     scalar by value: replay gives %g, an eager launch %g\n", replayed, eager);
    check(replayed == 2.0f && eager == 4.0f, "a scalar captured by value replays its captured value (stale: visible)");
    cudaGraphExecDestroy(x);
    /* the fix: the scalar in device memory, set before each launch */
    cudaMemsetAsync(d, 0, N * sizeof(float), s);
    cudaMemcpyAsync(dev_a, &a, sizeof a, cudaMemcpyHostToDevice, s);
    x = capture_add(s, d, 0, dev_a);
    a = 3.0f;
    cudaMemcpyAsync(dev_a, &a, sizeof a, cudaMemcpyHostToDevice, s);
    cudaGraphLaunch(x, s);
    float v1 = first(d, s);
    cudaGraphLaunch(x, s);
    check(v1 == 6.0f && first(d, s) == 12.0f, "a scalar in device memory: each replay reads its current value");
    cudaGraphExecDestroy(x);
}

/* what a synchronising call does to a capture: its return code, and the
 * end of the capture */
static void refused(cudaStream_t s, float *d, const char *what, int call)
{
    float h[N], *p = NULL;
    cudaGetLastError();
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    LAUNCH(k_add_scalar, 1, N, 0, s, d, 1.0f);
    cudaError_t r = call == 0 ? cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost)
                  : call == 1 ? cudaStreamSynchronize(s)
                  : call == 2 ? cudaMalloc((void **)&p, 64)
                              : cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, s);
    cudaGraph_t g = (cudaGraph_t)1;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    char msg[160];
    snprintf(msg, sizeof msg, "%s inside a capture: refused (%d), the capture invalidated (%d), no graph", what, (int)r,
             (int)e);
    check(r == cudaErrorStreamCaptureUnsupported && e == cudaErrorStreamCaptureInvalidated && g == NULL && !p, msg);
    cudaGetLastError();
}

static cudaError_t other_thread_rc;
static void *alloc_elsewhere(void *)
{
    void *p = NULL;
    other_thread_rc = cudaMalloc(&p, 64);
    if (p) cudaFree(p);
    return NULL;
}

/* another thread's cudaMalloc during this thread's capture */
static cudaError_t other_thread(cudaStream_t s, float *d, cudaStreamCaptureMode mode, cudaError_t *end)
{
    cudaStreamBeginCapture(s, mode);
    LAUNCH(k_add_scalar, 1, N, 0, s, d, 1.0f);
    pthread_t t;
    pthread_create(&t, NULL, alloc_elsewhere, NULL);
    pthread_join(t, NULL);
    cudaGraph_t g = NULL;
    *end = cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    return other_thread_rc;
}

static void sync_rules(cudaStream_t s, float *d)
{
    refused(s, d, "cudaMemcpy", 0);
    refused(s, d, "cudaStreamSynchronize of the capturing stream", 1);
    refused(s, d, "cudaMalloc", 2);
    refused(s, d, "cudaMemcpyAsync from pageable memory", 3);
    cudaError_t end, r = other_thread(s, d, cudaStreamCaptureModeThreadLocal, &end);
    check(r == cudaSuccess && end == cudaSuccess, "ThreadLocal capture: another thread's cudaMalloc is allowed");
    r = other_thread(s, d, cudaStreamCaptureModeGlobal, &end);
    check(r == cudaErrorStreamCaptureUnsupported && end == cudaErrorStreamCaptureInvalidated,
          "Global capture: another thread's cudaMalloc is refused and invalidates the capture");
    check(cudaStreamBeginCapture(0, cudaStreamCaptureModeThreadLocal) == cudaErrorStreamCaptureUnsupported,
          "capturing the legacy default stream is refused");
    cudaGetLastError();
}

/* a graph counts as one host launch however many kernels it holds */
static void counts(cudaStream_t s, float *d)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int k = 0; k < 5; k++) LAUNCH(k_add_scalar, 1, N, 0, s, d, 1.0f);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&x, g, 0);
    long s0, g0, r0, s1, g1, r1;
    cuda_emu_work_counts(&s0, &g0, &r0);
    cudaGraphLaunch(x, s);
    cudaStreamSynchronize(s);
    cuda_emu_work_counts(&s1, &g1, &r1);
    check(s1 == s0 && g1 == g0 + 1 && r1 == r0 + 5, "a launched graph: 1 host launch, its 5 kernels replayed");
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
}

int main(void)
{
    cudaStream_t s;
    float *d = NULL, *dev_a = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
    if (cudaMalloc((void **)&d, N * sizeof(float)) != cudaSuccess) return 1;
    if (cudaMalloc((void **)&dev_a, sizeof(float)) != cudaSuccess) return 1;
    stale_argument(s, d, dev_a);
    sync_rules(s, d);
    counts(s, d);
    cudaStreamSynchronize(s);
    cudaFree(d);
    cudaFree(dev_a);
    cudaStreamDestroy(s);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
