/* Planted bugs: the CUDA emulator (cuda/emu/) must catch each of them.
 * Compiled like the backend (g++ -x c++ -DCUDA_EMULATION).
 *  - a missing __syncthreads(): wrong results under some thread order
 *    (here forward order hides it, reverse and random find it);
 *  - an out-of-bounds write to dynamic shared memory;
 *  - a shuffle reading a lane outside its mask;
 *  - a lane of a shuffle's mask that never arrives;
 *  - threads reaching different barriers; a thread exiting while others
 *    wait at a barrier;
 *  - a launch on a GPU the build has no kernel image for (rule CC);
 *  - rule QUERY: an event poll that does not clear the not-ready answer,
 *    then a CKL()-style cudaGetLastError() check after the next launch;
 *  - rule STREAMS: a kernel on one stream reading what a kernel on another
 *    stream writes, without an event between them: stale values, and under
 *    rule RACE a reported race (also for a memset and a copy);
 *  - rule PINNED: the host reading a pinned buffer before it waited for
 *    the copy into it;
 *  - rule ELAPSED: cudaEventElapsedTime of events the host has not waited
 *    for (the per-call timing mode of cuda/cost.cuh reads them after a
 *    stream synchronisation);
 *  - rule BLOCKORDER: a last block summing the other blocks' partials of
 *    the same launch (no grid-wide synchronisation): wrong sums;
 *  - rules LAUNCH_BOUNDS and REGISTERS: a launch of more threads than the
 *    kernel's __launch_bounds__, or than its registers let a block have;
 *  - rule ACCESS: a load past an allocation's end, one crossing it, a
 *    misaligned scalar and a misaligned 16-byte vector access;
 *  - rule PINNED_SRC: the host refilling the pinned source of a queued
 *    host-to-device copy before waiting for it;
 *  - rule SHARED: a static __shared__ variable read before any write (0xFF
 *    in each block, not zero nor the previous block's value), and static
 *    plus dynamic shared memory over 48 KiB;
 *  - nvcuda::wmma (cuda/emu/wmma.h): a lane missing from mma_sync, lanes
 *    passing different pointers or ldm, an ldm that is no multiple of 16
 *    bytes, a pointer not 32-byte aligned, a tile read past shared memory;
 *    code that assumes a fragment's element layout, and a lane reading
 *    another lane's store_matrix_sync without __syncwarp(): wrong values.
 * Misuse makes the emulator exit 99 with a "cuda-emu: error:" line; each
 * planted kernel runs in a forked child and the message is checked. */
#include "cuda_compat.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" int cuda_emu_set_order(const char *spec);

static int failures;

/* out[t] = in-block neighbour t-1's value, passed through shared memory */
static __global__ void k_neighbour(int *out, int with_barrier)
{
    DYNAMIC_SHARED(int, sh);
    int t = threadIdx.x;
    sh[t] = 10 * t + 1;
    if (with_barrier) __syncthreads();
    out[t] = t > 0 ? sh[t - 1] : 0;
}

static __global__ void k_oob_shared(int *out)
{
    DYNAMIC_SHARED(int, sh);
    sh[threadIdx.x + 1] = 1;   /* the last thread writes one past the end */
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x];
}

static __global__ void k_shfl_outside_mask(int *out)
{
    int lane = threadIdx.x & 31, v = lane;
    if (lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 16);   /* lane ^ 16 is not in the mask */
    out[threadIdx.x] = v;
}

static __global__ void k_shfl_missing_lane(int *out)
{
    int lane = threadIdx.x & 31, v = lane;
    if (lane != 7) v = __shfl_xor_sync(0xffffffffu, v, 1);   /* lane 7 never calls */
    out[threadIdx.x] = v;
}

static __global__ void k_shfl_ok(int *out)
{
    int lane = threadIdx.x & 31, v = lane;
    v = __shfl_xor_sync(0xffffffffu, v, 1);
    unsigned b = __ballot_sync(0xffffffffu, lane & 1);
    int s = __shfl_down_sync(0xffffffffu, lane, 3);
    out[threadIdx.x] = v * 1000000 + (int)(b == 0xaaaaaaaau) * 1000 + s;
}

static __global__ void k_divergent_barrier(int *out)
{
    if (threadIdx.x & 1) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1;
}

static __global__ void k_early_exit(int *out)
{
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

/* run fn in a child; expect exit 99 and `msg` in its stderr */
static void expect_caught(const char *what, void (*fn)(int *), int *buf, const char *msg)
{
    int fd[2];
    if (pipe(fd)) { perror("pipe"); failures++; return; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn(buf);
        _exit(0);   /* not caught */
    }
    close(fd[1]);
    char err[2048] = "";
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd[0], err + n, sizeof err - 1 - n)) > 0) n += (size_t)r;
    err[n] = '\0';
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 99 && strstr(err, msg) != NULL;
    printf("%s %s: %s", ok ? "ok  " : "FAIL", what, n ? err : "(nothing reported)\n");
    if (!ok) failures++;
}

static void run_oob(int *b) { LAUNCH(k_oob_shared, 1, 64, 64 * sizeof(int), 0, b); }
static void run_shfl_mask(int *b) { LAUNCH(k_shfl_outside_mask, 1, 32, 0, 0, b); }
static void run_shfl_missing(int *b) { LAUNCH(k_shfl_missing_lane, 1, 32, 0, 0, b); }
static void run_divergent(int *b) { LAUNCH(k_divergent_barrier, 1, 64, 0, 0, b); }
static void run_early(int *b) { LAUNCH(k_early_exit, 1, 64, 0, 0, b); }
static void run_partial_warp(int *b) { LAUNCH(k_shfl_ok, 1, 48, 0, 0, b); }   /* full mask, 16-lane warp */

/* `race` / `norace`: only the neighbour exchange without / with its
 * barrier, once, on the pthread backend: built with ThreadSanitizer, which
 * must report the first as a data race and stay silent on the second
 * (tests/test_cuda_emu.sh) */
extern "C" int cuda_emu_set_backend(const char *name);
static int race_mode(int with_barrier)
{
    int *d = NULL;
    if (cudaMalloc((void **)&d, 64 * sizeof(int)) != cudaSuccess) return 1;
    cuda_emu_set_backend("pthread");
    LAUNCH(k_neighbour, 1, 64, 64 * sizeof(int), 0, d, with_barrier);
    cudaFree(d);
    return 0;
}

/* `launches`: blocks of alternating sizes on the pthread backend, each
 * thread counting its own run; every (block, thread) of every launch must
 * run exactly once.  With CUDA_EMU_SPURIOUS_WAKEUPS=1 every worker wakes
 * between a launch's set-up and its first block: a worker that slept
 * through the last block of a smaller launch once counted itself into the
 * next launch there, ran its body early with a stale block index, and let a
 * block end before one of its threads ran (tests/test_cuda_emu.sh) */
static __global__ void k_count_runs(int *count)
{
    __atomic_fetch_add(&count[blockIdx.x * blockDim.x + threadIdx.x], 1, __ATOMIC_RELAXED);
}

static int launch_sequence(void)
{
    const int sizes[] = { 256, 32, 256, 64, 512, 16 }, iters = 20, n = 2 * 512;
    int *d = NULL, h[2 * 512], wrong = 0;
    if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess) return 1;
    cuda_emu_set_backend("pthread");
    for (int it = 0; it < iters; it++)
        for (int s = 0; s < 6; s++) {
            cudaMemset(d, 0, sizeof h);
            LAUNCH(k_count_runs, 2, sizes[s], 0, 0, d);
            cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
            for (int i = 0; i < n; i++)
                if (h[i] != (i < 2 * sizes[s])) {
                    if (wrong++ < 5)
                        printf("launch %d of %d threads a block: thread %d of block %d ran %d times\n", 6 * it + s,
                               sizes[s], i % sizes[s], i / sizes[s], h[i]);
                }
        }
    cudaFree(d);
    printf("%d thread runs of %d launches other than once\n", wrong, 6 * iters);
    return wrong ? 1 : 0;
}

/* Rule CC: a kernel launched on an emulated GPU the build has no code for
 * (CUDA_ARCH_LIST: SASS of the same major with a minor at most the GPU's,
 * or PTX of the last entry not newer than it) fails with
 * cudaErrorNoKernelImageForDevice and runs nothing.  6.0: no build has
 * it; 7.0: none built by CUDA 13's nvcc (75 80 90); 9.0 always runs. */
#ifndef CUDA_ARCH_LIST
#define CUDA_ARCH_LIST "70_80_90"
#endif
static void check_kernel_image(int *d)
{
    int has70 = strncmp(CUDA_ARCH_LIST, "70", 2) == 0 || strstr(CUDA_ARCH_LIST, "_70") != NULL;
    static const struct { const char *cc, *rule; int runs; } cases[] = {
        { "60", "1", 0 }, { "70", "1", -1 }, { "90", "1", 1 }, { "60", "0", 1 },
    };
    for (int i = 0; i < 4; i++) {
        int want = cases[i].runs < 0 ? has70 : cases[i].runs, h[32];
        setenv("CUDA_EMU_CC", cases[i].cc, 1);
        setenv("CUDA_EMU_STRICT_CC", cases[i].rule, 1);
        cudaMemset(d, 0, 32 * sizeof(int));
        LAUNCH(k_shfl_ok, 1, 32, 0, 0, d);
        cudaError_t e = cudaGetLastError();
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        int ran = h[0] != 0;
        char w[160];
        snprintf(w, sizeof w, "sm_%s, build %s, rule CC %s: launch %s (%s)", cases[i].cc, CUDA_ARCH_LIST,
                 cases[i].rule[0] == '1' ? "on" : "off", ran ? "ran" : "refused", cudaGetErrorString(e));
        check(want ? ran && e == cudaSuccess : !ran && e == cudaErrorNoKernelImageForDevice, w);
    }
    unsetenv("CUDA_EMU_CC");
    unsetenv("CUDA_EMU_STRICT_CC");
}

/* polls e until ready, without clearing the not-ready answers; how many */
static int poll_uncleared(cudaEvent_t e)
{
    int not_ready = 0;
    for (int i = 0; i < 1000 && cudaEventQuery(e) == cudaErrorNotReady; i++) not_ready++;
    return not_ready;
}

static void *poll_thread(void *e)
{
    poll_uncleared((cudaEvent_t)e);
    return NULL;
}

/* rule QUERY: cudaEventQuery answers not ready for a seeded share of the
 * calls and keeps it as the calling thread's last error, as the runtime
 * does; a poller must clear it (the backend's event_ready) */
static void query_rule(int *d)
{
    setenv("CUDA_EMU_STRICT_QUERY", "1", 1);
    cudaStream_t s;
    cudaEvent_t e;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    (void)cudaGetLastError();
    int n = 0;
    for (int i = 0; i < 20 && n == 0; i++) {   /* (the answer is seeded: some polls see ready at once) */
        LAUNCH(k_shfl_ok, 1, 32, 0, s, d);
        cudaEventRecord(e, s);
        n = poll_uncleared(e);
    }
    LAUNCH(k_shfl_ok, 1, 32, 0, s, d);
    check(n > 0 && cudaGetLastError() == cudaErrorNotReady,
          "QUERY: an uncleared not-ready poll fails the next launch's cudaGetLastError() check");
    n = 0;
    for (int i = 0; i < 20 && n == 0; i++) {
        cudaEventRecord(e, s);
        while (cudaEventQuery(e) == cudaErrorNotReady) n++, (void)cudaGetLastError();
    }
    LAUNCH(k_shfl_ok, 1, 32, 0, s, d);
    check(n > 0 && cudaGetLastError() == cudaSuccess, "QUERY: a poll that clears each not-ready leaves no error");
    /* the last error is per host thread */
    cudaEventRecord(e, s);
    pthread_t th;
    pthread_create(&th, NULL, poll_thread, (void *)e);
    pthread_join(th, NULL);
    check(cudaGetLastError() == cudaSuccess, "QUERY: another thread's not-ready poll is not this thread's error");
    setenv("CUDA_EMU_STRICT_QUERY", "0", 1);
    cudaDeviceSynchronize();
    check(poll_uncleared(e) == 0, "QUERY off: a finished event is ready at once");
    cudaEventDestroy(e);
    cudaStreamDestroy(s);
}

static __global__ void k_fill(int *p, int v) { p[threadIdx.x] = v; }
static __global__ void k_copy(int *dst, const int *src) { dst[threadIdx.x] = src[threadIdx.x]; }

/* rounds of: stream a fills d[0..32) with the round's number, stream b
 * copies it to d[32..64) (after an event of a's fill, or not), the host
 * reads b's copy; how many rounds read a wrong value */
static int producer_consumer(int *d, int with_event)
{
    cudaStream_t a, b;
    cudaEvent_t e;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    int wrong = 0, h[32];
    for (int round = 1; round <= 20; round++) {
        LAUNCH(k_fill, 1, 32, 0, a, d, round);
        if (with_event) {
            cudaEventRecord(e, a);
            cudaStreamWaitEvent(b, e, 0);
        }
        LAUNCH(k_copy, 1, 32, 0, b, d + 32, (const int *)d);
        cudaMemcpyAsync(h, d + 32, sizeof h, cudaMemcpyDeviceToHost, b);   /* pageable: returns when done */
        int bad = 0;
        for (int t = 0; t < 32; t++) bad |= h[t] != round;
        wrong += bad;
        cudaDeviceSynchronize();
    }
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    return wrong;
}

/* the same with their accesses reported, as memory.cuh's ld()/st() do */
static __global__ void k_fill_seen(int *p, int v)
{
    EMU_SEEN(p + threadIdx.x, sizeof(int), true);
    p[threadIdx.x] = v;
}
static __global__ void k_copy_seen(int *dst, const int *src)
{
    EMU_SEEN(src + threadIdx.x, sizeof(int), false);
    EMU_SEEN(dst + threadIdx.x, sizeof(int), true);
    dst[threadIdx.x] = src[threadIdx.x];
}

/* 0: no ordering; 1: an event; 2: the host waits for stream a first */
static void two_streams(int *d, int order)
{
    cudaStream_t a, b;
    cudaEvent_t e;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    LAUNCH(k_fill_seen, 1, 32, 0, a, d, 5);
    cudaEventRecord(e, a);
    if (order == 1) cudaStreamWaitEvent(b, e, 0);
    if (order == 2) cudaStreamSynchronize(a);
    LAUNCH(k_copy_seen, 1, 32, 0, b, d + 32, (const int *)d);
    cudaDeviceSynchronize();
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}
static void race_kernels(int *d) { two_streams(d, 0); }
static void race_copies(int *d)
{
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaMemsetAsync(d, 0, 64 * sizeof(int), a);
    cudaMemcpyAsync(d + 64, d + 16, 16 * sizeof(int), cudaMemcpyDeviceToDevice, b);
    cudaDeviceSynchronize();
}

/* rule RACE: accesses of two streams to the same memory, one a write,
 * without an event or a host synchronisation between them */
static void race_rule(int *d)
{
    setenv("CUDA_EMU_STRICT_STREAMS", "1", 1);
    setenv("CUDA_EMU_STRICT_RACE", "1", 1);
    expect_caught("RACE: a kernel reads another stream's output without an event", race_kernels, d,
                  "without an event between them");
    expect_caught("RACE: a copy reads what a memset on another stream writes", race_copies, d,
                  "race: cudaMem");
    int h[32];
    two_streams(d, 1);
    memcpy(h, d + 32, sizeof h);   /* (emulated device memory is host memory) */
    check(h[0] == 5 && h[31] == 5, "RACE: with the event no race, and the copy reads the fill");
    two_streams(d, 2);
    check(1, "RACE: a host synchronisation between the streams orders them too");
}

/* a download into pinned memory on a stream, read by the host after
 * waiting for the stream, or (early) before */
static int pinned_read(int *d, int early)
{
    cudaStream_t a;
    int *h = NULL;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaMallocHost((void **)&h, 32 * sizeof(int));
    LAUNCH(k_fill, 1, 32, 0, a, d, 7);
    cudaMemcpyAsync(h, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, a);
    if (!early) cudaStreamSynchronize(a);
    int v = *(volatile int *)h;
    cudaFreeHost(h);
    cudaStreamDestroy(a);
    return v;
}
static void pinned_early(int *d) { pinned_read(d, 1); }

/* rule PINNED */
static void pinned_rule(int *d)
{
    setenv("CUDA_EMU_STRICT_STREAMS", "1", 1);
    setenv("CUDA_EMU_STRICT_PINNED", "1", 1);
    expect_caught("PINNED: the host reads a pinned download before waiting for it", pinned_early, d,
                  "host access to pinned memory");
    check(pinned_read(d, 0) == 7, "PINNED: after cudaStreamSynchronize the host reads the download");
}

/* two events around a launch on a stream, read with or without waiting
 * for the second first: the answer of cudaEventElapsedTime */
static cudaError_t elapsed(int *d, int wait, float *ms)
{
    cudaStream_t a;
    cudaEvent_t e0, e1;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, a);
    LAUNCH(k_fill, 1, 32, 0, a, d, 3);
    cudaEventRecord(e1, a);
    if (wait) cudaEventSynchronize(e1);
    cudaError_t r = cudaEventElapsedTime(ms, e0, e1);
    cudaGetLastError();
    cudaStreamSynchronize(a);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(a);
    return r;
}
static void elapsed_unwaited(int *d)
{
    float ms;
    elapsed(d, 0, &ms);
}

/* rule ELAPSED; and the answers a GPU gives: not ready while queued, an
 * invalid handle for an event made without timing */
static void elapsed_rule(int *d)
{
    float ms = -1;
    setenv("CUDA_EMU_STRICT_STREAMS", "1", 1);
    check(elapsed(d, 0, &ms) == cudaErrorNotReady, "ELAPSED: queued work: cudaErrorNotReady, as on a GPU");
    check(elapsed(d, 1, &ms) == cudaSuccess && ms >= 0, "ELAPSED: after cudaEventSynchronize: the time");
    setenv("CUDA_EMU_STRICT_STREAMS", "0", 1);   /* the work runs at the call: done, but not waited for */
    setenv("CUDA_EMU_STRICT_ELAPSED", "1", 1);
    expect_caught("ELAPSED: the host reads events it has not waited for", elapsed_unwaited, d,
                  "has not waited for");
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventRecord(e, 0);
    cudaEventSynchronize(e);
    check(cudaEventElapsedTime(&ms, e, e) == cudaErrorInvalidResourceHandle,
          "ELAPSED: an event made with cudaEventDisableTiming: cudaErrorInvalidResourceHandle");
    cudaGetLastError();
    cudaEventDestroy(e);
}

/* rule BLOCKORDER: each block writes its partial, and the last block (by
 * index) sums them all, relying on running last: right in ascending
 * order, wrong wherever the blocks run in another */
static __global__ void k_last_block_sums(int *partial, int *sum)
{
    if (threadIdx.x) return;
    partial[blockIdx.x] = (int)blockIdx.x + 1;
    if (blockIdx.x != gridDim.x - 1) return;
    int s = 0;
    for (unsigned b = 0; b < gridDim.x; b++) s += partial[b];
    *sum = s;
}

/* launches of 8 blocks whose sum is wrong (of 10) */
static int last_block_wrong(int *d)
{
    int wrong = 0;
    for (int i = 0; i < 10; i++) {
        cudaMemset(d, 0xFF, 9 * sizeof(int));
        LAUNCH(k_last_block_sums, 8, 32, 0, 0, d, d + 8);
        int sum;
        cudaMemcpy(&sum, d + 8, sizeof sum, cudaMemcpyDeviceToHost);
        wrong += sum != 36;
    }
    return wrong;
}

static void blockorder_rule(int *d)
{
    setenv("CUDA_EMU_STRICT_BLOCKORDER", "0", 1);
    check(last_block_wrong(d) == 0, "BLOCKORDER off: ascending blocks, the last block's sum of partials is right");
    setenv("CUDA_EMU_STRICT_BLOCKORDER", "1", 1);
    int wrong = last_block_wrong(d);
    printf("     blocks in a seeded order: %d of 10 launches sum partials not yet written\n", wrong);
    check(wrong > 0, "BLOCKORDER: a block reading other blocks' partials of the same launch gets wrong sums");
}

/* rules LAUNCH_BOUNDS and REGISTERS */
#define PLANTED_BOUND (2 * 32)
static __global__ void __launch_bounds__(PLANTED_BOUND) k_bounded(int *out) { out[threadIdx.x] = 1; }
template <typename T> static __global__ void __launch_bounds__(PLANTED_BOUND, 2) k_bounded_t(T *out)
{
    out[threadIdx.x] = 1;
}
static __global__ void k_heavy(int *out) { if (threadIdx.x < 32) out[threadIdx.x] = 2; }
static void run_over_bound(int *b) { LAUNCH(k_bounded, 1, 96, 0, 0, b); }
static void run_over_bound_t(int *b) { LAUNCH(k_bounded_t<int>, 1, 128, 0, 0, b); }
static void run_heavy(int *b) { LAUNCH(k_heavy, 1, 1024, 0, 0, b); }

static void launch_rules(int *d)
{
    setenv("CUDA_EMU_STRICT_LAUNCH_BOUNDS", "1", 1);
    setenv("CUDA_EMU_STRICT_REGISTERS", "1", 1);
    expect_caught("LAUNCH_BOUNDS: 96 threads for __launch_bounds__(2 * 32)", run_over_bound, d,
                  "kernel k_bounded (launched at");
    expect_caught("LAUNCH_BOUNDS: 128 threads for a template's __launch_bounds__(2 * 32, 2)", run_over_bound_t, d,
                  "over the kernel's __launch_bounds__(64)");
    LAUNCH(k_bounded, 1, PLANTED_BOUND, 0, 0, d);
    LAUNCH(k_bounded_t<int>, 1, PLANTED_BOUND, 0, 0, d);
    check(1, "LAUNCH_BOUNDS: launches of the bound's 64 threads run");
    /* k_heavy at 72 registers: 1024 threads need 73728 of the 65536 */
    char path[] = "/tmp/emu-resources-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) { perror("mkstemp"); failures++; return; }
    fprintf(f, "# arch kernel registers static_smem stack spill_stores spill_loads\nsm_90 k_heavy 72 0 0 0 0\n");
    fclose(f);
    setenv("CUDA_EMU_RESOURCES", path, 1);
    expect_caught("REGISTERS: 1024 threads x 72 registers", run_heavy, d, "need 73728 registers, over the 65536");
    LAUNCH(k_heavy, 1, 512, 0, 0, d);
    check(cudaGetLastError() == cudaSuccess, "REGISTERS: 512 threads x 72 registers fit");
    unsetenv("CUDA_EMU_RESOURCES");
    unlink(path);
}

/* rule ACCESS: accesses reported as memory.cuh's ld()/st()/ldp() do */
static __global__ void k_load_at(const int *p, long off, int bytes)
{
    const char *q = (const char *)p + off;
    if (bytes == 16) {
        EMU_ALIGNED(q, 16, false);
        for (int e = 0; e < 4; e++) EMU_SEEN(q + 4 * e, 4, false);
    } else {
        EMU_SEEN(q, bytes, false);
    }
}
static int *acc_buf;   /* 100 bytes */
static void load_past(int *) { LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 100L, 4); }
static void load_crossing(int *) { LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 96L, 8); }
static void load_misaligned(int *) { LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 2L, 4); }
static void load_vector_misaligned(int *) { LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 4L, 16); }

static void access_rule(int *)
{
    setenv("CUDA_EMU_STRICT_ACCESS", "1", 1);
    cudaMalloc((void **)&acc_buf, 100);
    expect_caught("ACCESS: a load one element past the end of an allocation", load_past, NULL,
                  "0 bytes past the end of the allocation");
    expect_caught("ACCESS: an 8-byte load crossing an allocation's end", load_crossing, NULL,
                  "crosses the end of the allocation");
    expect_caught("ACCESS: a 4-byte load at offset 2", load_misaligned, NULL, "not 4-byte aligned");
    expect_caught("ACCESS: a 16-byte vector load at offset 4", load_vector_misaligned, NULL,
                  "16-byte vector at");
    LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 80L, 16);
    LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 88L, 8);
    LAUNCH(k_load_at, 1, 1, 0, 0, acc_buf, 96L, 4);
    check(1, "ACCESS: aligned loads inside the allocation pass");
    cudaFree(acc_buf);
}

/* rule PINNED_SRC: the host refills a pinned buffer that a queued
 * host-to-device copy reads, before or after waiting for the copy */
static int pinned_refill(int *d, int early)
{
    cudaStream_t a;
    int *h = NULL, got = 0;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaMallocHost((void **)&h, 32 * sizeof(int));
    h[0] = 11;
    cudaMemcpyAsync(d, h, 32 * sizeof(int), cudaMemcpyHostToDevice, a);
    if (!early) cudaStreamSynchronize(a);
    *(volatile int *)h = 12;   /* the next batch */
    cudaMemcpyAsync(&got, d, sizeof got, cudaMemcpyDeviceToHost, a);   /* pageable: returns when done */
    cudaFreeHost(h);
    cudaStreamDestroy(a);
    return got;
}
static void pinned_refill_early(int *d) { pinned_refill(d, 1); }

static void pinned_src_rule(int *d)
{
    setenv("CUDA_EMU_STRICT_STREAMS", "1", 1);
    setenv("CUDA_EMU_STRICT_PINNED_SRC", "1", 1);
    expect_caught("PINNED_SRC: the host refills a pinned upload's source before waiting for it", pinned_refill_early,
                  d, "the source of cudaMemcpyAsync(");
    check(pinned_refill(d, 0) == 11, "PINNED_SRC: refilled after cudaStreamSynchronize, the device has the upload");
    setenv("CUDA_EMU_STRICT_PINNED_SRC", "0", 1);
    int got = pinned_refill(d, 1);
    printf("     rule off: the early refill goes unreported, the device got %d (uploaded 11)\n", got);
    check(got == 12, "PINNED_SRC off: the queued copy reads the refilled value");
}

/* rule SHARED: a static __shared__ counter read before any write in the
 * block; a static array with dynamic shared memory over 48 KiB */
static __global__ void k_static_shared(int *out)
{
    __shared__ int count;
    __syncthreads();
    if (threadIdx.x == 0) {
        out[blockIdx.x] = count;
        count = 100 + (int)blockIdx.x;
    }
}
static __global__ void k_static_big(int *out)
{
    __shared__ float tile[64][65];   /* 16640 bytes */
    tile[threadIdx.x][0] = 1;
    out[threadIdx.x] = (int)tile[threadIdx.x][0];
}
static void run_static_big(int *b) { LAUNCH(k_static_big, 1, 32, 32 * 1024, 0, b); }

static void shared_rule(int *d)
{
    int h[4];
    setenv("CUDA_EMU_STRICT_BLOCKORDER", "0", 1);
    setenv("CUDA_EMU_STRICT_SHARED", "0", 1);
    LAUNCH(k_static_shared, 4, 32, 0, 0, d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    check(h[0] == 0 && h[1] == 100 && h[3] == 102, "SHARED off: static shared starts zero and keeps the last block's");
    setenv("CUDA_EMU_STRICT_SHARED", "1", 1);
    LAUNCH(k_static_shared, 4, 32, 0, 0, d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    check(h[0] == -1 && h[1] == -1 && h[3] == -1, "SHARED: static shared starts each block as 0xFF");
    expect_caught("SHARED: 16640 bytes static + 32 KiB dynamic", run_static_big, d,
                  "16640 bytes of static and 32768 of dynamic shared memory exceed");
    LAUNCH(k_static_big, 1, 32, 16 * 1024, 0, d);
    check(cudaGetLastError() == cudaSuccess, "SHARED: 16640 bytes static + 16 KiB dynamic fit");
    setenv("CUDA_EMU_STRICT_BLOCKORDER", "1", 1);
}

/* nvcuda::wmma: D = 2 (C + A B) for A 16 x 32 (row major, ldm 32), B
 * given as B^T 16 x 32 (so col_major with ldm 32), C row major and D
 * stored column major; small integers, so every backend is exact.  The
 * bad modes plant one misuse each (wmma_rule) */
enum { WM_OK, WM_MISSING, WM_PTR, WM_LDM, WM_ALIGN, WM_PAST, WM_STORE_LDM };
template <typename T>
static __global__ void k_wmma(const T *A, const T *Bt, const float *C, float *D, int mode)
{
    using namespace nvcuda;
    DYNAMIC_SHARED(T, sh);   /* 512 elements, for WM_PAST */
    int lane = threadIdx.x & 31;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, C, 16, wmma::mem_row_major);
    for (int k0 = 0; k0 < 32; k0 += 16) {
        const T *pa = A + k0 + (mode == WM_PTR && lane == 3 ? 16 : 0) + (mode == WM_ALIGN ? 8 : 0);
        wmma::load_matrix_sync(a, pa, mode == WM_LDM ? 20 : 32);
        if (mode == WM_PAST) wmma::load_matrix_sync(b, sh + 16, 64);   /* columns 8.. lie past the 512 */
        else wmma::load_matrix_sync(b, Bt + k0, 32);
        if (mode != WM_MISSING || lane != 7) wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 2.0f;   /* elementwise: no layout assumed */
    wmma::store_matrix_sync(D, acc, mode == WM_STORE_LDM && lane == 0 ? 32 : 16, wmma::mem_col_major);
}

/* the same product, then written out assuming lane l holds row l / 2,
 * columns 8 (l % 2) .. + 7 (a layout CUDA leaves unspecified), or read
 * back from shared memory by lanes other than the storing ones, with or
 * without __syncwarp() between */
static __global__ void k_wmma_layout(const __half *A, const __half *Bt, const float *C, float *D, int mode)
{
    using namespace nvcuda;
    DYNAMIC_SHARED(float, sh);
    int lane = threadIdx.x & 31;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, C, 16, wmma::mem_row_major);
    for (int k0 = 0; k0 < 32; k0 += 16) {
        wmma::load_matrix_sync(a, A + k0, 32);
        wmma::load_matrix_sync(b, Bt + k0, 32);
        wmma::mma_sync(acc, a, b, acc);
    }
    if (mode == 0) {
        for (int i = 0; i < 8; i++) D[(8 * (lane % 2) + i) * 16 + lane / 2] = 2.0f * acc.x[i];
        return;
    }
    wmma::store_matrix_sync(sh, acc, 16, wmma::mem_row_major);
    if (mode == 2) __syncwarp(0xffffffffu);
    for (int i = 0; i < 8; i++) {
        int e = lane * 8 + i, r = e / 16, c = e % 16;
        D[c * 16 + r] = 2.0f * sh[e];
    }
}

struct WmmaBufs {
    void *A, *Bt;
    float *C, *D, want[256];
};
static WmmaBufs wm;

template <typename T> static void wmma_upload(void)
{
    T a[512], b[512];
    float c[256];
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 32; k++) {
            a[r * 32 + k] = (T)(float)((r * 3 + k) % 7 - 3);
            b[r * 32 + k] = (T)(float)((r * 5 + 2 * k) % 9 - 4);
        }
    for (int i = 0; i < 256; i++) c[i] = (float)(i / 16 - i % 16);
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c[r * 16 + n];
            for (int k = 0; k < 32; k++) s += (float)a[r * 32 + k] * (float)b[n * 32 + k];
            wm.want[n * 16 + r] = 2.0f * s;
        }
    cudaMemcpy(wm.A, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(wm.Bt, b, sizeof b, cudaMemcpyHostToDevice);
    cudaMemcpy(wm.C, c, sizeof c, cudaMemcpyHostToDevice);
}

/* elements of D unlike the reference */
static int wmma_wrong(void)
{
    float h[256];
    cudaMemcpy(h, wm.D, sizeof h, cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int i = 0; i < 256; i++) wrong += h[i] != wm.want[i];
    return wrong;
}

static void wmma_run(int mode)
{
    LAUNCH(k_wmma<__nv_bfloat16>, 1, 32, 1024, 0, (const __nv_bfloat16 *)wm.A, (const __nv_bfloat16 *)wm.Bt, wm.C,
           wm.D, mode);
}
static void wm_missing(int *) { wmma_run(WM_MISSING); }
static void wm_ptr(int *) { wmma_run(WM_PTR); }
static void wm_ldm(int *) { wmma_run(WM_LDM); }
static void wm_align(int *) { wmma_run(WM_ALIGN); }
static void wm_past(int *) { wmma_run(WM_PAST); }
static void wm_store_ldm(int *) { wmma_run(WM_STORE_LDM); }

static void wmma_rule(int *)
{
    cudaMalloc(&wm.A, 1024);
    cudaMalloc(&wm.Bt, 1024);
    cudaMalloc((void **)&wm.C, 1024);
    cudaMalloc((void **)&wm.D, 1024);
    wmma_upload<__half>();
    LAUNCH(k_wmma<__half>, 1, 32, 1024, 0, (const __half *)wm.A, (const __half *)wm.Bt, wm.C, wm.D, (int)WM_OK);
    check(!wmma_wrong(), "wmma: fp16 D = 2 (C + A B), 16x16x32, A row major, B column major, D stored column major");
    LAUNCH(k_wmma_layout, 1, 32, 1024, 0, (const __half *)wm.A, (const __half *)wm.Bt, wm.C, wm.D, 2);
    check(!wmma_wrong(), "wmma: store_matrix_sync, __syncwarp(), another lane reads it: right");
    LAUNCH(k_wmma_layout, 1, 32, 1024, 0, (const __half *)wm.A, (const __half *)wm.Bt, wm.C, wm.D, 1);
    int wrong = wmma_wrong();
    check(wrong > 0, "wmma: another lane reads a store_matrix_sync without __syncwarp(): wrong values");
    printf("     without __syncwarp(): %d of 256 wrong\n", wrong);
    LAUNCH(k_wmma_layout, 1, 32, 1024, 0, (const __half *)wm.A, (const __half *)wm.Bt, wm.C, wm.D, 0);
    wrong = wmma_wrong();
    check(wrong > 0, "wmma: code assuming an accumulator's element layout gets wrong values");
    printf("     layout assumed: %d of 256 wrong\n", wrong);
    wmma_upload<__nv_bfloat16>();
    wmma_run(WM_OK);
    check(!wmma_wrong(), "wmma: bf16 D = 2 (C + A B), the same shapes");
    setenv("CUDA_EMU_STRICT_ACCESS", "1", 1);
    expect_caught("wmma: lane 7 skips mma_sync", wm_missing, NULL, "lane 7 of the mask never arrives");
    expect_caught("wmma: lane 3 loads from another pointer", wm_ptr, NULL, "the lanes' arguments differ");
    expect_caught("wmma: lane 0 stores with another ldm", wm_store_ldm, NULL, "the lanes' arguments differ");
    expect_caught("wmma: ldm 20 of bf16 (40 bytes)", wm_ldm, NULL, "ldm 20 is not a multiple of 8 elements");
    expect_caught("wmma: a pointer 16 bytes past 32-byte alignment", wm_align, NULL, "is not 32-byte (256-bit) aligned");
    expect_caught("wmma: a tile read past shared memory", wm_past, NULL, "load of 2 bytes at");
    cudaFree(wm.A);
    cudaFree(wm.Bt);
    cudaFree(wm.C);
    cudaFree(wm.D);
}

/* rule STREAMS: queued work runs where the program synchronises, in a
 * seeded order that keeps stream order and event waits */
static void streams_rule(int *d)
{
    setenv("CUDA_EMU_STRICT_STREAMS", "1", 1);
    cudaStream_t a;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    int before = d[0];   /* (emulated device memory is host memory) */
    LAUNCH(k_fill, 1, 32, 0, a, d, before + 1);
    int queued = d[0] == before;
    cudaStreamSynchronize(a);
    check(queued && d[0] == before + 1, "STREAMS: a launch runs at the stream's synchronisation, not at the call");
    cudaStreamDestroy(a);
    int wrong = producer_consumer(d, 0);
    printf("     no event between the streams: %d of 20 rounds read a stale value\n", wrong);
    check(wrong > 0, "STREAMS: a read on one stream of another stream's write without an event gives wrong values");
    check(producer_consumer(d, 1) == 0, "STREAMS: with an event between them every round is right");
    setenv("CUDA_EMU_STRICT_STREAMS", "0", 1);
    check(producer_consumer(d, 0) == 0, "STREAMS off: work runs at the call, the missing event goes unseen");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "launches")) return launch_sequence();
    if (argc > 1) return race_mode(!strcmp(argv[1], "norace"));
    const int n = 96;
    int *d = NULL, h[96];
    if (cudaMalloc((void **)&d, n * sizeof(int)) != cudaSuccess) return 1;
    const char *orders[] = { "forward", "reverse", "random:7" };
    int found[3];
    for (int o = 0; o < 3; o++) {
        cuda_emu_set_order(orders[o]);
        for (int bug = 0; bug < 2; bug++) {
            LAUNCH(k_neighbour, 1, n, n * sizeof(int), 0, d, !bug);
            cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
            int wrong = 0;
            for (int t = 0; t < n; t++) wrong += h[t] != (t > 0 ? 10 * (t - 1) + 1 : 0);
            if (!bug) {
                char w[96];
                snprintf(w, sizeof w, "correct barrier: right result under %s order", orders[o]);
                check(!wrong, w);
            } else {
                found[o] = wrong > 0;
                printf("     missing barrier under %-9s order: %d of %d results wrong\n", orders[o], wrong, n);
            }
        }
    }
    check(found[1] && found[2], "missing __syncthreads() caught under reverse and random order");
    cuda_emu_set_order("forward");
    LAUNCH(k_shfl_ok, 1, 64, 0, 0, d);
    cudaMemcpy(h, d, 64 * sizeof(int), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int t = 0; t < 64; t++) {
        int lane = t & 31, s = lane + 3 < 32 ? lane + 3 : lane;
        wrong += h[t] != (lane ^ 1) * 1000000 + 1000 + s;
    }
    check(!wrong, "__shfl_xor_sync, __ballot_sync, __shfl_down_sync give CUDA's results");
    expect_caught("out-of-bounds shared-memory write", run_oob, d, "shared memory written out of bounds");
    expect_caught("shuffle outside its mask", run_shfl_mask, d, "outside the mask");
    expect_caught("lane of the mask that never arrives", run_shfl_missing, d, "never arrives");
    expect_caught("threads at different barriers", run_divergent, d, "different barriers");
    expect_caught("thread exits while others wait at a barrier", run_early, d, "exited while");
    expect_caught("full mask in a partial warp", run_partial_warp, d, "does not exist");
    check_kernel_image(d);
    query_rule(d);
    streams_rule(d);
    race_rule(d);
    pinned_rule(d);
    elapsed_rule(d);
    blockorder_rule(d);
    launch_rules(d);
    access_rule(d);
    pinned_src_rule(d);
    shared_rule(d);
    wmma_rule(d);
    cudaFree(d);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
