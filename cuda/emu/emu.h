/* CUDA emulator (tests only): compiles a .cu file with g++ -x c++
 * -DCUDA_EMULATION and runs its kernels on the CPU.
 *
 * - The real CUDA headers give dim3, uint3, float4, cudaError_t, the bf16
 *   and fp16
 *   types and the runtime/cuBLAS prototypes (so a wrong signature in the
 *   emulated runtime, emu.cc, or cuBLAS, cublas_emu.cc, is a compile error).
 * - Each CUDA thread of a block is a fiber with its own small stack (guard
 *   page below it); blocks run one after another, in ascending order or,
 *   under rule BLOCKORDER, reversed or shuffled per launch (CUDA_EMU_SEED):
 *   a block reading another block's output of the same launch then reads
 *   it unwritten.  __syncthreads() is a
 *   barrier that fails loudly when threads reach different barriers or when
 *   some exited while others wait.  Warp intrinsics (shuffles, ballots,
 *   __syncwarp) are resolved per warp once every lane of the mask arrived,
 *   with mask checks; so are nvcuda::wmma's warp matrix functions, with
 *   the Programming Guide's rules on their arguments (wmma.h).
 * - Dynamic shared memory is refilled with 0xFF (a NaN pattern) before each
 *   block; red zones around it catch out-of-bounds writes.  Under rule
 *   SHARED static __shared__ variables (the kernel's function-local
 *   statics, found in the symbol table) are refilled so too, and static
 *   plus dynamic shared memory over 48 KiB fails the launch.
 * - Rule LAUNCH_BOUNDS refuses a launch of more threads per block than the
 *   kernel's __launch_bounds__ (kept below as patchable nops); rule
 *   REGISTERS one whose threads x registers (cuda/resource-usage.txt, or
 *   the table CUDA_EMU_RESOURCES names) pass the 64K registers of a block.
 * - Rule ACCESS checks each kernel load and store through ld()/st()/ldp()/
 *   stp() (memory.cuh): inside one cudaMalloc'd allocation (or shared,
 *   local or pinned memory) and naturally aligned (16 bytes for ldp/stp);
 *   the error names the kernel, the address, the allocation and the offset.
 * - The order in which threads run between two barriers is chosen at run
 *   time (CUDA_EMU_ORDER=forward|reverse|random[:seed], or
 *   cuda_emu_set_order): a missing barrier shows up under some order.
 * - CUDA_EMU_DEVICES=N plays N devices (default 1, 0: none) and
 *   CUDA_EMU_MEMORY=BYTES a device of that capacity (cudaMalloc past it
 *   fails with cudaErrorMemoryAllocation; cudaMemGetInfo reports total =
 *   CUDA_EMU_MEMORY, else 80 GiB, and free = total less the bytes
 *   cudaMalloc'd now, exactly: no rounding, no context); CUDA_EMU_CC=70 a device of
 *   compute capability 7.0 (default 90: 9.0) in cudaGetDeviceProperties;
 *   under rule CC a launch fails with cudaErrorNoKernelImageForDevice where
 *   the build (Makefile CUDA_ARCH) has no kernel for that capability, and
 *   bf16 operands in cuBLAS(Lt) before 8.0 are refused.
 *   Under CUDA_EMU_STRICT_DEVMEM the processes on one device (by UUID)
 *   share its memory, in 2 MiB pages plus a 500 MiB context each (both
 *   scaled down with CUDA_EMU_MEMORY), counted in /dev/shm (emu.cc).
 * - Under rule STREAMS (CUDA_EMU_STRICT) each created stream's work is
 *   queued and run where the program synchronises, in a seeded order that
 *   keeps stream order and cudaStreamWaitEvent (emu.cc); otherwise work
 *   runs at the call.  Rule RACE then checks the byte ranges each
 *   operation reads and writes against other streams' (vector clocks):
 *   an overlap with a write and no event between them is reported; rule
 *   PINNED guards a pinned buffer a copy writes until the host waited, rule
 *   PINNED_SRC keeps the pinned source of a queued upload read-only until
 *   then (a host refill fails, naming the copy).
 *   A cudaMemcpy or cudaMemset (legacy default stream) while a
 *   non-blocking stream exists, which races on a GPU, is a misuse.
 * - For the GPU cost model (cuda/cost.h): cuda_emu_count_bytes(1) counts
 *   the bytes every launch loads and stores through ld()/st() (memory.cuh)
 *   and every GEMM and copy moves, and reports them to cuda_cost_seen;
 *   cuda_emu_dry_run(1) skips kernel bodies, GEMM arithmetic and device
 *   copies, so that a full-size step is logged in seconds (and, its pages
 *   never touched, in little memory).
 * Any misuse prints "cuda-emu: error: ..." and exits with status 99. */
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>

/* static __shared__: one static variable per kernel, which rule SHARED
 * finds in the symbol table (a function-local static of the kernel), fills
 * with 0xFF before each block and counts against 48 KiB (emu.cc) */
#undef __shared__
#define __shared__ static
/* __launch_bounds__(N): N nops placed before the kernel's entry (never
 * run), and their address in __patchable_function_entries, from which rule
 * LAUNCH_BOUNDS reads N back at each launch (emu.cc; a constant expression
 * such as FA_THREADS, in templates too, which a section name could not
 * carry) */
#undef __launch_bounds__
#define __launch_bounds__(n, ...) __attribute__((patchable_function_entry((n), (n))))

namespace cuda_emu {

struct Ctx {
    uint3 tid, bid;
    dim3 bdim, gdim;
};
extern thread_local Ctx *cur;

enum WarpOp { OP_IDX, OP_XOR, OP_DOWN, OP_UP, OP_BALLOT, OP_ANY, OP_ALL, OP_SYNC,
              OP_WMMA_LOAD, OP_WMMA_STORE, OP_WMMA_MMA };   /* the last three: wmma.h */

void syncthreads(const char *file, int line);
uint64_t warp_op(int op, unsigned mask, uint64_t val, int arg, int width, const char *file, int line);
void *dynamic_shared();
void launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            std::function<void()> body, const char *file, int line);
/* work as the next operation of stream s: queued under rule STREAMS
 * (emu.cc), else run now; with poll, work only starts it (an NCCL
 * collective), and it is done once poll() answers true */
void enqueue(cudaStream_t s, const char *what, std::function<void()> work, std::function<bool()> poll = nullptr);
/* rule RACE (emu.cc): while tracking, the running operation's accesses to
 * device memory, n bytes at p (any other memory is ignored) */
extern bool tracking;
void access(const void *p, size_t n, bool write);
/* CUDA_EMU_STRICT=1 (the default in `make test`) turns on every rule under
 * which the emulator fails where a real GPU, driver or library would, but a
 * lenient emulator would not (docs/testing.md lists them); each rule can be
 * switched alone with CUDA_EMU_STRICT_<RULE>=0|1, e.g.
 * CUDA_EMU_STRICT_QUERY=0, for the test that shows what it catches */
bool strict(const char *rule);
/* compute capability of the emulated device (CUDA_EMU_CC, default 90) */
int device_cc();
/* rule CC: the library calls and launches a real GPU of compute capability
 * device_cc() refuses (docs/testing.md): true where a cuBLAS(Lt) call of
 * these types must fail */
bool cc_refuses_types(cudaDataType a, cudaDataType b, cudaDataType c);
/* the grid cap of the backend's elementwise launches (cuda/common.cuh
 * nblocks): cap, or the lower one set by cuda_emu_set_grid_cap */
long grid_cap(long cap);
/* throws nothing: reports a misuse and exits 99 */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* is [p, p+bytes) inside one cudaMalloc'd allocation? */
bool is_device_range(const void *p, size_t bytes);
/* byte counting (cuda_emu_count_bytes): an access of n bytes at p by the
 * running kernel; rule ACCESS (checking): each such access must lie in one
 * allocation (or shared memory) and be naturally aligned */
extern bool counting, checking;
/* rule ACCESS: a vector access of n bytes at p must be n-byte aligned */
void check_aligned(const void *p, size_t n, bool write);
/* rule ACCESS: the check of one access; inline where it falls in the
 * allocation of the last one (the common case, kept cheap) */
extern uintptr_t acc_lo, acc_hi;
void check_access(const void *p, size_t n, bool write);
inline void check_seen(const void *p, size_t n, bool write)
{
    uintptr_t a = (uintptr_t)p;
    if (a < acc_lo || a + n > acc_hi || (a & (n - 1))) check_access(p, n, write);
}
extern bool dry_run;
void seen(const void *p, size_t n, bool write);
/* work the host submitted that a dry run does not queue (a GEMM, a
 * memset, a copy to the device): counted as queued work is
 * (cuda_emu_work_counts) */
void dry_submit();
/* a GEMM's or copy's bytes, reported to the cost log (cuda_cost_seen) */
void report(const char *call, double rd, double wr, double rd_all, double wr_all);

template <class T> inline T shfl(int op, const char *f, int l, unsigned mask, T v, int arg, int width)
{
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    u = warp_op(op, mask, u, arg, width, f, l);
    T r;
    std::memcpy(&r, &u, sizeof r);
    return r;
}
template <class T> inline T shfl_at(const char *f, int l, unsigned m, T v, int src, int w = 32) { return shfl(OP_IDX, f, l, m, v, src, w); }
template <class T> inline T shfl_xor_at(const char *f, int l, unsigned m, T v, int x, int w = 32) { return shfl(OP_XOR, f, l, m, v, x, w); }
template <class T> inline T shfl_down_at(const char *f, int l, unsigned m, T v, unsigned d, int w = 32) { return shfl(OP_DOWN, f, l, m, v, (int)d, w); }
template <class T> inline T shfl_up_at(const char *f, int l, unsigned m, T v, unsigned d, int w = 32) { return shfl(OP_UP, f, l, m, v, (int)d, w); }
inline unsigned ballot_at(const char *f, int l, unsigned m, int p) { return (unsigned)warp_op(OP_BALLOT, m, p != 0, 0, 32, f, l); }
inline int any_at(const char *f, int l, unsigned m, int p) { return (int)warp_op(OP_ANY, m, p != 0, 0, 32, f, l); }
inline int all_at(const char *f, int l, unsigned m, int p) { return (int)warp_op(OP_ALL, m, p != 0, 0, 32, f, l); }
inline void syncwarp_at(const char *f, int l, unsigned m = 0xffffffffu) { warp_op(OP_SYNC, m, 0, 0, 32, f, l); }

/* a launch converts its arguments to the kernel's parameter types once (as
 * the CUDA runtime does) and keeps them by value until its stream runs it;
 * every thread then gets its own copy */
template <class... P, class... A>
inline void launch_kernel(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          const char *file, int line, void (*k)(P...), A &&...a)
{
    std::tuple<P...> args(std::forward<A>(a)...);
    launch(name, (const void *)k, grid, block, smem, stream, [k, args]() { std::apply(k, args); }, file, line);
}

} // namespace cuda_emu

#define threadIdx (cuda_emu::cur->tid)
#define blockIdx (cuda_emu::cur->bid)
#define blockDim (cuda_emu::cur->bdim)
#define gridDim (cuda_emu::cur->gdim)
#define warpSize 32

#define __syncthreads() cuda_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) cuda_emu::syncwarp_at(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_sync(...) cuda_emu::shfl_at(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) cuda_emu::shfl_xor_at(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) cuda_emu::shfl_down_at(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) cuda_emu::shfl_up_at(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(...) cuda_emu::ballot_at(__FILE__, __LINE__, __VA_ARGS__)
#define __any_sync(...) cuda_emu::any_at(__FILE__, __LINE__, __VA_ARGS__)
#define __all_sync(...) cuda_emu::all_at(__FILE__, __LINE__, __VA_ARGS__)

#ifndef LAUNCH_GATE
#define LAUNCH_GATE(...) true   /* cuda/cuda_compat.h */
#endif
#define LAUNCH(kernel, grid, block, smem, stream, ...)                                                       \
    do {                                                                                                   \
        if (LAUNCH_GATE(kernel, grid, block, smem, stream, __VA_ARGS__))                                   \
            cuda_emu::launch_kernel(#kernel, dim3(grid), dim3(block), (smem), (stream), __FILE__, __LINE__, \
                                    kernel, __VA_ARGS__);                                                  \
    } while (0)
#define DYNAMIC_SHARED(T, name) T *name = reinterpret_cast<T *>(cuda_emu::dynamic_shared())
#define EMU_SEEN(p, n, write)                                 \
    do {                                                      \
        if (cuda_emu::counting || cuda_emu::tracking) cuda_emu::seen((p), (n), (write)); \
        else if (cuda_emu::checking) cuda_emu::check_seen((p), (n), (write));          \
    } while (0)
#define EMU_ALIGNED(p, n, write)                                          \
    do {                                                                  \
        if (cuda_emu::checking) cuda_emu::check_aligned((p), (n), (write)); \
    } while (0)

/* device intrinsics on the host (IEEE versions: the emulator checks logic,
 * the tolerance of the tests covers the GPU's fast approximations) */
/* (__expf and __logf are glibc's) */
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }

/* atomics (the project's kernels avoid them for determinism; given for completeness) */
static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline int atomicMax(int *p, int v) { int o = *p; if (v > o) *p = v; return o; }

/* nvcuda::wmma, the tensor cores' warp matrix functions */
#include "wmma.h"

#endif
