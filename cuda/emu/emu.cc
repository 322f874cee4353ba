/* CUDA emulator: fiber scheduler for kernels and the runtime calls the
 * backend uses (memory, copies, streams, events) on host memory.  See emu.h.
 *
 * Fibers: each CUDA thread of a block runs on its own mmap'd stack (guard
 * page below).  A fiber is entered the first time with setcontext() after a
 * single makecontext(), then switched with _setjmp/_longjmp (no signal mask
 * syscall).  On x86-64 outside the sanitizer builds (which intercept
 * _setjmp/_longjmp) a fiber instead starts on a prepared stack and is
 * switched by cuda_emu_fiber_switch below, six pushes and pops: glibc's _longjmp
 * also walks the thread's cancellation handlers (_longjmp_unwind), a fifth
 * of an emulated training step's time (perf, 2026-12-07).  The fiber's
 * entry function loops: run the kernel body, mark DONE, yield; so fibers
 * are reused for every block and launch. */
#undef _FORTIFY_SOURCE   /* __longjmp_chk rejects jumps between stacks */
#include "emu.h"
#include "../cost.h"
#pragma weak cuda_cost_seen   /* defined by the backend; tests of the emulator alone run without it */
#pragma weak cuda_cost_shape

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <cerrno>
#include <dirent.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if defined(__x86_64__) && !EMU_ASAN && !defined(__SANITIZE_THREAD__)
#define EMU_FIBER_SWITCH 1
/* cuda_emu_fiber_switch(save, to): pushes the callee-saved registers of the System V
 * x86-64 ABI (rbp, rbx, r12-r15), stores the stack pointer in *save, loads
 * `to` and pops the same registers from there: the switch of a cooperative
 * thread, where the compiler already saved every caller-saved register
 * around the call */
extern "C" void cuda_emu_fiber_switch(void **save, void *to);
asm(".text\n"
    ".p2align 4\n"
    ".type cuda_emu_fiber_switch,@function\n"
    "cuda_emu_fiber_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size cuda_emu_fiber_switch, .-cuda_emu_fiber_switch\n");
#else
#define EMU_FIBER_SWITCH 0
#endif

static void release_guards();   /* rule PINNED, below */
static unsigned long long splitmix(unsigned long long z);

namespace cuda_emu {

thread_local Ctx *cur;

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct Fiber {
    Ctx ctx;
    jmp_buf jb;
    ucontext_t uc;
    void *sp;   /* its saved stack pointer (EMU_FIBER_SWITCH) */
    char *map;
    size_t map_size;
    char *stack_lo;
    size_t stack_size;
    bool started;
    State st;
    int linear;
    const char *file;   /* site of the barrier / warp op it waits at */
    int line;
    int op, arg, width;
    unsigned mask;
    uint64_t val, res;
    void *asan_fake;
};

static const char *op_names[] = { "__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync",
                                  "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                                  "wmma::load_matrix_sync", "wmma::store_matrix_sync", "wmma::mma_sync" };

enum Order { FORWARD, REVERSE, RANDOM };

struct Emu {
    std::vector<Fiber *> pool;
    jmp_buf sched_jb;
    void *sched_sp;   /* the scheduler's (EMU_FIBER_SWITCH) */
    const std::function<void()> *body = nullptr;
    Order order = FORWARD;
    std::mt19937_64 rng{1};
    bool order_set = false;
    /* dynamic shared memory with red zones */
    unsigned char *smem_buf = nullptr;
    size_t smem_cap = 0, smem_size = 0;
    /* current launch, for messages */
    const char *kname = "";
    const char *kfile = "";
    int kline = 0;
    dim3 grid, block;
    uint3 bidx;
    /* ASan fiber bookkeeping */
    void *sched_fake = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    /* rule SHARED: the running kernel's static __shared__ variables */
    const std::vector<std::pair<char *, size_t>> *statics = nullptr;
    /* device allocations: start -> size */
    std::map<uintptr_t, size_t> allocs;
    size_t dev_bytes = 0;   /* their sum, against CUDA_EMU_MEMORY */
    long nonblocking_streams = 0;   /* created and not destroyed */
    long launches = 0;
};
static Emu E;
static thread_local Fiber *cur_fiber;
static bool use_pthreads;   /* the pthread backend, below */
static void pt_syncthreads(const char *file, int line);
static uint64_t pt_warp_op(int op, unsigned mask, uint64_t val, int arg, int width, const char *file, int line);
static void pt_launch(unsigned long nt);

static const size_t RED = 64;     /* red-zone bytes on each side of shared memory */
static const unsigned char RED_BYTE = 0xA5;

void fail(const char *fmt, ...)
{
    fflush(stdout);
    fprintf(stderr, "cuda-emu: error: ");
    if (E.kname && *E.kname) {
        fprintf(stderr, "kernel %s (launched at %s:%d) block (%u,%u,%u)", E.kname, E.kfile, E.kline, E.bidx.x,
                E.bidx.y, E.bidx.z);
        const Ctx *c = cur_fiber ? &cur_fiber->ctx : cur;
        if (c) fprintf(stderr, " thread (%u,%u,%u)", c->tid.x, c->tid.y, c->tid.z);
        fprintf(stderr, ": ");
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    _exit(99);
}

/* ---------------------------------------------------------------- order */

static void set_order_spec(const char *s)
{
    if (!s || !*s || !strcmp(s, "forward")) { E.order = FORWARD; return; }
    if (!strcmp(s, "reverse")) { E.order = REVERSE; return; }
    if (!strncmp(s, "random", 6)) {
        E.order = RANDOM;
        unsigned long long seed = 1;
        if (s[6] == ':') seed = strtoull(s + 7, nullptr, 10);
        E.rng.seed(seed);
        return;
    }
    fprintf(stderr, "cuda-emu: error: CUDA_EMU_ORDER '%s' is not forward, reverse or random[:seed]\n", s);
    _exit(99);
}

static void init_order()
{
    if (E.order_set) return;
    E.order_set = true;
    set_order_spec(getenv("CUDA_EMU_ORDER"));
}

static bool backend_set;
static void init_backend()
{
    if (backend_set) return;
    backend_set = true;
    const char *b = getenv("CUDA_EMU_BACKEND");
    if (b && !strcmp(b, "pthread")) use_pthreads = true;
}

/* --------------------------------------------------------------- fibers */

#if EMU_ASAN
#define ASAN_START(fake, lo, size) __sanitizer_start_switch_fiber(fake, lo, size)
#define ASAN_FINISH(fake, lo, size) __sanitizer_finish_switch_fiber(fake, lo, size)
#else
#define ASAN_START(fake, lo, size) ((void)0)
#define ASAN_FINISH(fake, lo, size) ((void)0)
#endif

static size_t stack_bytes()
{
    const char *s = getenv("CUDA_EMU_STACK_KB");
    size_t kb = s ? strtoul(s, nullptr, 10) : (EMU_ASAN ? 512 : 64);
    if (kb < 16) kb = 16;
    return kb * 1024;
}

static void yield_to_sched(Fiber *f)
{
#if EMU_FIBER_SWITCH
    cuda_emu_fiber_switch(&f->sp, E.sched_sp);
#else
    ASAN_START(&f->asan_fake, E.main_bottom, E.main_size);
    if (!_setjmp(f->jb)) _longjmp(E.sched_jb, 1);
    ASAN_FINISH(f->asan_fake, &E.main_bottom, &E.main_size);
#endif
}

static void fiber_entry()
{
    ASAN_FINISH(nullptr, &E.main_bottom, &E.main_size);
    for (;;) {
        (*E.body)();
        Fiber *f = cur_fiber;
        f->st = DONE;
        yield_to_sched(f);
    }
}

static Fiber *new_fiber(int linear)
{
    Fiber *f = new Fiber();
    long page = sysconf(_SC_PAGESIZE);
    f->stack_size = stack_bytes();
    f->map_size = f->stack_size + (size_t)page;
    void *m = mmap(nullptr, f->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map a fiber stack");
    f->map = (char *)m;
    /* guard page: a stack overflow faults instead of corrupting a neighbour */
    if (mprotect(f->map, (size_t)page, PROT_NONE)) fail("mprotect of a guard page failed");
    f->stack_lo = f->map + page;
#if EMU_FIBER_SWITCH
    /* for cuda_emu_fiber_switch: fiber_entry's address to return to, below
     * it a null return address of its own (it never returns, and its entry
     * sees the stack 8 bytes past a 16-byte boundary, as after a call), six
     * zero registers to pop */
    void **sp = (void **)(((uintptr_t)f->stack_lo + f->stack_size) & ~(uintptr_t)15);
    *--sp = nullptr;
    *--sp = (void *)fiber_entry;
    for (int i = 0; i < 6; i++) *--sp = nullptr;
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, fiber_entry, 0);
#endif
    f->linear = linear;
    return f;
}

static void resume(Fiber *f)
{
    cur_fiber = f;
    cur = &f->ctx;
#if EMU_FIBER_SWITCH
    f->started = true;
    cuda_emu_fiber_switch(&E.sched_sp, f->sp);
#else
    ASAN_START(&E.sched_fake, f->stack_lo, f->stack_size);
    if (!_setjmp(E.sched_jb)) {
        if (!f->started) {
            f->started = true;
            setcontext(&f->uc);
        }
        _longjmp(f->jb, 1);
    }
    ASAN_FINISH(E.sched_fake, nullptr, nullptr);
#endif
    cur_fiber = nullptr;
    cur = nullptr;
}

/* ------------------------------------------------------- sync primitives */

static Fiber *me(const char *what)
{
    if (!cur_fiber) fail("%s called outside a kernel", what);
    return cur_fiber;
}

void syncthreads(const char *file, int line)
{
    if (use_pthreads) return pt_syncthreads(file, line);
    Fiber *f = me("__syncthreads");
    f->st = AT_BARRIER;
    f->file = file;
    f->line = line;
    yield_to_sched(f);
}

uint64_t warp_op(int op, unsigned mask, uint64_t val, int arg, int width, const char *file, int line)
{
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fail("%s at %s:%d: width %d is not a power of 2 in [1, 32]", op_names[op], file, line, width);
    if (use_pthreads) return pt_warp_op(op, mask, val, arg, width, file, line);
    Fiber *f = me(op_names[op]);
    f->st = AT_WARP;
    f->op = op;
    f->mask = mask;
    f->val = val;
    f->arg = arg;
    f->width = width;
    f->file = file;
    f->line = line;
    yield_to_sched(f);
    return f->res;
}

void *dynamic_shared()
{
    if (!use_pthreads) me("dynamic shared memory");
    return E.smem_buf + RED;
}

static const char *where(const Fiber *g, char *buf, size_t n)
{
    switch (g->st) {
    case DONE: snprintf(buf, n, "has exited"); break;
    case AT_BARRIER: snprintf(buf, n, "waits at __syncthreads() at %s:%d", g->file, g->line); break;
    case AT_WARP: snprintf(buf, n, "waits at %s(mask 0x%08x) at %s:%d", op_names[g->op], g->mask, g->file, g->line); break;
    default: snprintf(buf, n, "is running"); break;
    }
    return buf;
}

struct LaneReq {
    int op, arg, width;
    unsigned mask;
    uint64_t val;
    const char *file;
    int line;
};

/* results of one warp operation for every lane of mask m (CUDA's rules for
 * out-of-segment sources); a source lane outside the mask is an error */
static void warp_results(unsigned m, const LaneReq *req, uint64_t *res)
{
    if (m == 0xffffffffu && req[0].op >= OP_WMMA_LOAD) {   /* wmma.h: the collective, once */
        WmmaReq *lanes[32];
        for (int b = 0; b < 32; b++) lanes[b] = (WmmaReq *)(uintptr_t)req[b].val;
        lanes[0]->run(lanes, op_names[req[0].op]);
        for (int b = 0; b < 32; b++) res[b] = 0;
        return;
    }
    uint64_t ballot = 0;
    for (int b = 0; b < 32; b++)
        if ((m >> b) & 1u) ballot |= (uint64_t)(req[b].val != 0) << b;
    for (int b = 0; b < 32; b++) {
        if (!((m >> b) & 1u)) continue;
        const LaneReq &g = req[b];
        int wd = g.width, seg = b & ~(wd - 1), src = b;
        switch (g.op) {
        case OP_IDX: src = seg + (g.arg & (wd - 1)); break;
        case OP_XOR: src = b ^ g.arg; if (src < seg || src >= seg + wd) src = b; break;
        case OP_DOWN: src = b + g.arg; if (src >= seg + wd) src = b; break;
        case OP_UP: src = b - g.arg; if (src < seg) src = b; break;
        default: break;
        }
        switch (g.op) {
        case OP_IDX: case OP_XOR: case OP_DOWN: case OP_UP:
            if (src < 0 || src > 31 || !((m >> src) & 1u))
                fail("%s at %s:%d: lane %d reads lane %d, outside the mask 0x%08x", op_names[g.op], g.file, g.line, b,
                     src, m);
            res[b] = req[src].val;
            break;
        case OP_BALLOT: res[b] = ballot; break;
        case OP_ANY: res[b] = ballot != 0; break;
        case OP_ALL: res[b] = ballot == m; break;
        default: res[b] = 0; break;
        }
    }
}

/* Complete every warp operation whose lanes have all arrived; returns
 * whether any thread became runnable. */
static bool resolve_warps(int n)
{
    bool progressed = false;
    char buf[256];
    for (int w0 = 0; w0 < n; w0 += 32) {
        for (int l = 0; l < 32 && w0 + l < n; l++) {
            Fiber *f = E.pool[w0 + l];
            if (f->st != AT_WARP) continue;
            cur_fiber = f;
            unsigned m = f->mask;
            if (!((m >> l) & 1u))
                fail("%s at %s:%d: mask 0x%08x does not include the calling lane %d", op_names[f->op], f->file,
                     f->line, m, l);
            /* every lane of the mask must wait at the same operation with the same mask */
            for (int b = 0; b < 32; b++) {
                if (!((m >> b) & 1u)) continue;
                if (w0 + b >= n)
                    fail("%s at %s:%d: mask 0x%08x names lane %d, which does not exist (block of %d threads)",
                         op_names[f->op], f->file, f->line, m, b, n);
                Fiber *g = E.pool[w0 + b];
                if (g->st != AT_WARP || g->op != f->op || g->mask != m || g->file != f->file || g->line != f->line)
                    fail("%s at %s:%d with mask 0x%08x: lane %d of the mask never arrives (it %s)", op_names[f->op],
                         f->file, f->line, m, b, where(g, buf, sizeof buf));
            }
            LaneReq req[32];
            uint64_t res[32];
            for (int b = 0; b < 32; b++)
                if ((m >> b) & 1u) {
                    Fiber *g = E.pool[w0 + b];
                    req[b] = LaneReq{ g->op, g->arg, g->width, g->mask, g->val, g->file, g->line };
                }
            cur = &f->ctx;   /* a wmma collective's accesses are checked as the thread's */
            warp_results(m, req, res);
            cur = nullptr;
            for (int b = 0; b < 32; b++)
                if ((m >> b) & 1u) E.pool[w0 + b]->res = res[b];
            for (int b = 0; b < 32; b++)
                if ((m >> b) & 1u) E.pool[w0 + b]->st = RUNNABLE;
            progressed = true;
        }
    }
    cur_fiber = nullptr;
    return progressed;
}

static void check_red_zones()
{
    unsigned char *lo = E.smem_buf, *hi = E.smem_buf + RED + E.smem_size;
    for (size_t i = 0; i < RED; i++) {
        if (lo[i] != RED_BYTE)
            fail("shared memory written out of bounds at byte offset %ld (dynamic shared memory is %zu bytes)",
                 (long)i - (long)RED, E.smem_size);
        if (hi[i] != RED_BYTE)
            fail("shared memory written out of bounds at byte offset %zu (dynamic shared memory is %zu bytes)",
                 E.smem_size + i, E.smem_size);
    }
}

/* rule SHARED: static __shared__ variables start each block as dynamic
 * shared memory does, 0xFF (a NaN pattern), not as the zeros or the
 * previous block's values a static keeps */
static void poison_statics()
{
    if (E.statics)
        for (const auto &v : *E.statics) memset(v.first, 0xFF, v.second);
}

static void run_block(int n)
{
    std::vector<int> ord(n);
    for (int i = 0; i < n; i++) {
        Fiber *f = E.pool[i];
        f->st = RUNNABLE;
        f->ctx.bid = E.bidx;
        f->ctx.bdim = E.block;
        f->ctx.gdim = E.grid;
        f->ctx.tid = make_uint3(i % E.block.x, (i / E.block.x) % E.block.y, i / (E.block.x * E.block.y));
    }
    memset(E.smem_buf, RED_BYTE, RED);
    memset(E.smem_buf + RED, 0xFF, E.smem_size);
    memset(E.smem_buf + RED + E.smem_size, RED_BYTE, RED);
    poison_statics();
    char buf[256];
    for (;;) {
        for (int i = 0; i < n; i++) ord[i] = E.order == REVERSE ? n - 1 - i : i;
        if (E.order == RANDOM) std::shuffle(ord.begin(), ord.end(), E.rng);
        for (int i : ord)
            if (E.pool[i]->st == RUNNABLE) resume(E.pool[i]);
        if (resolve_warps(n)) continue;
        Fiber *bar = nullptr, *done = nullptr, *warp = nullptr;
        for (int i = 0; i < n; i++) {
            Fiber *f = E.pool[i];
            if (f->st == AT_BARRIER && !bar) bar = f;
            if (f->st == DONE && !done) done = f;
            if (f->st == AT_WARP && !warp) warp = f;
        }
        if (!bar && !warp) break;   /* every thread exited */
        if (warp) { cur_fiber = warp; fail("deadlock: %s", where(warp, buf, sizeof buf)); }
        if (done) {
            cur_fiber = done;
            fail("thread exited while thread (%u,%u,%u) waits at __syncthreads() at %s:%d", bar->ctx.tid.x,
                 bar->ctx.tid.y, bar->ctx.tid.z, bar->file, bar->line);
        }
        for (int i = 0; i < n; i++) {
            Fiber *f = E.pool[i];
            if (f->file != bar->file || f->line != bar->line) {
                cur_fiber = f;
                fail("threads reach different barriers: this thread __syncthreads() at %s:%d, thread (%u,%u,%u) at %s:%d",
                     f->file, f->line, bar->ctx.tid.x, bar->ctx.tid.y, bar->ctx.tid.z, bar->file,
                     bar->line);
            }
        }
        for (int i = 0; i < n; i++) E.pool[i]->st = RUNNABLE;
    }
    check_red_zones();
}

/* Rule BLOCKORDER: a GPU runs the blocks of a launch in no set order, many
 * at once, so a block that reads what another block of the same launch
 * wrote (without a grid-wide synchronisation) reads it or not by chance.
 * Ascending order, always, would hide that: under the rule each launch
 * runs its blocks reversed or shuffled, drawn from CUDA_EMU_SEED and the
 * launch's number. */
static unsigned long long emu_seed();
static unsigned long long block_launches;
template <class F> static void for_each_block(dim3 g, F &&f)
{
    unsigned long nb = (unsigned long)g.x * g.y * g.z;
    std::vector<unsigned long> ord;
    if (nb > 1 && strict("BLOCKORDER")) {
        unsigned long long r = splitmix(emu_seed() * 0x9E3779B97F4A7C15ULL + ++block_launches);
        ord.resize(nb);
        for (unsigned long i = 0; i < nb; i++) ord[i] = r & 1 ? nb - 1 - i : i;
        if (!(r & 1)) std::shuffle(ord.begin(), ord.end(), std::mt19937_64(r));
    }
    for (unsigned long i = 0; i < nb; i++) {
        unsigned long b = ord.empty() ? i : ord[i];
        f(make_uint3((unsigned)(b % g.x), (unsigned)(b / g.x % g.y), (unsigned)(b / ((unsigned long)g.x * g.y))));
    }
}

/* ------------------------------------------------------------------ wmma */

/* the warp matrix functions' rendezvous (wmma.h): all 32 lanes, one call
 * site; a lane elsewhere or gone is reported by the warp operations' checks */
void wmma_meet(int op, WmmaReq *r)
{
    warp_op(op, 0xffffffffu, (uint64_t)(uintptr_t)r, 0, 32, r->file, r->line);
}

static const char *wmma_layout(const WmmaReq *r) { return r->layout ? "column major" : "row major"; }

/* the guide's rules for mptr and ldm, and the same arguments in every lane */
void wmma_check_args(WmmaReq *const *lanes, const char *what)
{
    const WmmaReq *r = lanes[0];
    for (int b = 1; b < 32; b++) {
        const WmmaReq *g = lanes[b];
        if (g->ptr != r->ptr || g->ldm != r->ldm || g->layout != r->layout)
            fail("%s at %s:%d: the lanes' arguments differ: lane 0 passes %p, ldm %u, %s; lane %d %p, ldm %u, %s "
                 "(each must be the same in every lane of the warp)",
                 what, r->file, r->line, r->ptr, r->ldm, wmma_layout(r), b, g->ptr, g->ldm, wmma_layout(g));
    }
    if ((uintptr_t)r->ptr & 31)
        fail("%s at %s:%d: pointer %p is not 32-byte (256-bit) aligned", what, r->file, r->line, r->ptr);
    if ((r->ldm * (unsigned)r->elem) % 16)
        fail("%s at %s:%d: ldm %u is not a multiple of %d elements of %d bytes (16 bytes)", what, r->file, r->line,
             r->ldm, 16 / r->elem, r->elem);
}

void wmma_access(const void *p, size_t n, bool write)
{
    if ((counting || tracking) && is_device_range(p, n)) seen(p, n, write);
    else if (checking) check_access(p, n, write);
}

/* ------------------------------------------------------ pthread backend */

/* CUDA_EMU_BACKEND=pthread (or cuda_emu_set_backend("pthread")): every CUDA
 * thread of a block is an OS thread, barriers and warp operations are
 * mutex/condition-variable rendezvous.  Slower than the fibers and without
 * a chosen order, but ThreadSanitizer then sees the real happens-before
 * relation: shared or global memory touched by two threads without a
 * barrier between them is reported as a data race. */

struct PtWarp {
    int arrived;
    unsigned long gen;
    unsigned mask;
    int op, line;          /* the operation being gathered */
    const char *file;
    LaneReq req[32];
    uint64_t res[32];
};

struct Pt {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int nt = 0;          /* threads of the current block; workers [nt, pool) sit it out */
    int pool = 0;        /* workers started (kept for later launches) */
    Ctx ctx[1024];
    char exited[1024];
    PtWarp warps[32];
    int arrived = 0, n_exited = 0, done = 0;
    unsigned long gen = 0, block_gen = 0;
    const char *file = nullptr;
    int line = 0;
};
static Pt P;
static thread_local int pt_index = -1;

static void pt_wait(unsigned long *genp, unsigned long g, const char *what, const char *file, int line)
{
    while (*genp == g) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 20;
        if (pthread_cond_timedwait(&P.cv, &P.mu, &ts) != 0 && *genp == g)
            fail("deadlock: %s at %s:%d waited 20 s for the other threads", what, file, line);
    }
}

static void pt_syncthreads(const char *file, int line)
{
    pthread_mutex_lock(&P.mu);
    if (P.n_exited) fail("__syncthreads() at %s:%d reached after another thread of the block exited", file, line);
    if (P.arrived == 0) {
        P.file = file;
        P.line = line;
    } else if (P.file != file || P.line != line) {
        fail("threads reach different barriers: this thread __syncthreads() at %s:%d, another at %s:%d", file, line,
             P.file, P.line);
    }
    unsigned long g = P.gen;
    if (++P.arrived == P.nt) {
        P.arrived = 0;
        P.gen++;
        pthread_cond_broadcast(&P.cv);
    } else {
        pt_wait(&P.gen, g, "__syncthreads()", file, line);
    }
    pthread_mutex_unlock(&P.mu);
}

static uint64_t pt_warp_op(int op, unsigned mask, uint64_t val, int arg, int width, const char *file, int line)
{
    pthread_mutex_lock(&P.mu);
    int i = pt_index, lane = i & 31, w0 = i - lane;
    PtWarp &W = P.warps[i / 32];
    if (!((mask >> lane) & 1u))
        fail("%s at %s:%d: mask 0x%08x does not include the calling lane %d", op_names[op], file, line, mask, lane);
    for (int b = 0; b < 32; b++)
        if (((mask >> b) & 1u) && w0 + b >= P.nt)
            fail("%s at %s:%d: mask 0x%08x names lane %d, which does not exist (block of %d threads)", op_names[op],
                 file, line, mask, b, P.nt);
    if (W.arrived == 0) {
        W.mask = mask;
        W.op = op;
        W.file = file;
        W.line = line;
    } else if (W.mask != mask || W.op != op || W.file != file || W.line != line) {
        fail("%s at %s:%d with mask 0x%08x: lanes of the warp wait at different warp operations", op_names[op], file,
             line, mask);
    }
    for (int b = 0; b < 32; b++)
        if (((mask >> b) & 1u) && P.exited[w0 + b])
            fail("%s at %s:%d with mask 0x%08x: lane %d of the mask never arrives (it has exited)", op_names[op], file,
                 line, mask, b);
    W.req[lane] = LaneReq{ op, arg, width, mask, val, file, line };
    unsigned long g = W.gen;
    if (++W.arrived == __builtin_popcount(mask)) {
        warp_results(mask, W.req, W.res);
        W.arrived = 0;
        W.gen++;
        pthread_cond_broadcast(&P.cv);
    } else {
        pt_wait(&W.gen, g, op_names[op], file, line);
    }
    uint64_t r = W.res[lane];
    pthread_mutex_unlock(&P.mu);
    return r;
}

struct PtStart {
    int index;
    unsigned long gen;   /* block generation when created: run every later block */
};

static void *pt_worker(void *arg)
{
    PtStart st = *(PtStart *)arg;
    delete (PtStart *)arg;
    int i = st.index;
    pt_index = i;
    unsigned long seen = st.gen;
    pthread_mutex_lock(&P.mu);
    for (;;) {
        while (P.block_gen == seen) pthread_cond_wait(&P.cv, &P.mu);
        seen = P.block_gen;
        if (i >= P.nt) continue;
        cur = &P.ctx[i];
        pthread_mutex_unlock(&P.mu);
        (*E.body)();
        pthread_mutex_lock(&P.mu);
        cur = nullptr;
        int lane = i & 31;
        PtWarp &W = P.warps[i / 32];
        if (W.arrived && ((W.mask >> lane) & 1u))
            fail("%s at %s:%d with mask 0x%08x: lane %d of the mask never arrives (it has exited)", op_names[W.op],
                 W.file, W.line, W.mask, lane);
        if (P.arrived) fail("thread exited while others wait at __syncthreads() at %s:%d", P.file, P.line);
        P.exited[i] = 1;
        P.n_exited++;
        if (++P.done == P.nt) pthread_cond_broadcast(&P.cv);
        if (P.done > P.nt) fail("pthread backend: %d threads finished a block of %d", P.done, P.nt);
    }
    return nullptr;
}

/* a forked child has none of the parent's workers */
static void pt_after_fork_child()
{
    pthread_mutex_init(&P.mu, nullptr);
    pthread_cond_init(&P.cv, nullptr);
    P.pool = 0;
}

static void pt_launch(unsigned long nt)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, [] { pthread_atfork(nullptr, nullptr, pt_after_fork_child); });
    pthread_mutex_lock(&P.mu);
    while ((unsigned long)P.pool < nt) {
        pthread_t th;
        if (pthread_create(&th, nullptr, pt_worker, new PtStart{ P.pool, P.block_gen })) fail("pthread_create failed");
        pthread_detach(th);
        P.pool++;
    }
    for (unsigned long i = 0; i < nt; i++) {
        P.ctx[i].tid = make_uint3(i % E.block.x, (i / E.block.x) % E.block.y, i / (E.block.x * E.block.y));
        P.ctx[i].bdim = E.block;
        P.ctx[i].gdim = E.grid;
    }
    for (PtWarp &W : P.warps) W.arrived = 0;
    pthread_mutex_unlock(&P.mu);
    /* CUDA_EMU_SPURIOUS_WAKEUPS=1: wake every worker here, between the
     * launch's set-up and its first block, and give them time to look (a
     * condition variable may wake its waiters at any time, POSIX says): a
     * worker must still run only the blocks it belongs to */
    static const bool spurious = getenv("CUDA_EMU_SPURIOUS_WAKEUPS") && atoi(getenv("CUDA_EMU_SPURIOUS_WAKEUPS"));
    if (spurious) {
        pthread_cond_broadcast(&P.cv);
        usleep(2000);
    }
    for_each_block(E.grid, [nt](uint3 b) {
        pthread_mutex_lock(&P.mu);
        E.bidx = b;
        for (unsigned long i = 0; i < nt; i++) P.ctx[i].bid = E.bidx;
        memset(E.smem_buf, RED_BYTE, RED);
        memset(E.smem_buf + RED, 0xFF, E.smem_size);
        memset(E.smem_buf + RED + E.smem_size, RED_BYTE, RED);
        poison_statics();
        memset(P.exited, 0, sizeof P.exited);
        P.n_exited = P.done = P.arrived = 0;
        /* the block's thread count changes with its generation, in one
         * critical section: a worker that slept through the last block of
         * the previous launch (it was not one of its threads) and wakes
         * between the two must not count itself in, or it runs the body
         * early with a stale block index and its done++ lets the block end
         * before one of its threads has run (seen under load: one thread's
         * elements of k_bias_forward added twice) */
        P.nt = (int)nt;
        P.block_gen++;
        pthread_cond_broadcast(&P.cv);
        while (P.done < P.nt) pthread_cond_wait(&P.cv, &P.mu);
        pthread_mutex_unlock(&P.mu);
        check_red_zones();
    });
}

/* ------------------------------------------------------- byte counting */

bool counting, dry_run;

/* per element address touched by the running launch: its size, whether it
 * was read from memory (before this launch wrote it) and whether written */
struct Touch {
    uint32_t size;
    bool rd, wr;
};
static std::unordered_map<uintptr_t, Touch> touched;
static double rd_all, wr_all;

void access(const void *p, size_t n, bool write);

/* Rule ACCESS: each load and store of a kernel through ld()/st()/ldp()/
 * stp() (memory.cuh) lies in one cudaMalloc'd allocation, the block's
 * shared memory (dynamic, or the kernel's statics), pinned host memory or
 * the thread's own stack, and is naturally aligned (a GPU faults on a
 * misaligned access: cudaErrorMisalignedAddress).  A read past a tensor's
 * end that crosses its allocation's end, which the GPU's rounding or a
 * neighbouring allocation would let pass, is reported with the
 * allocation and the offset. */
bool checking;
uintptr_t acc_lo = 1, acc_hi = 0;   /* the allocation of the last access */

static bool in_range(uintptr_t a, size_t n, const void *lo, size_t bytes)
{
    return a >= (uintptr_t)lo && a + n <= (uintptr_t)lo + bytes;
}
static bool in_block_memory(uintptr_t a, size_t n)
{
    if (in_range(a, n, E.smem_buf + RED, E.smem_size)) return true;
    if (E.statics)
        for (const auto &v : *E.statics)
            if (in_range(a, n, v.first, v.second)) return true;
    return cur_fiber && in_range(a, n, cur_fiber->stack_lo, cur_fiber->stack_size);
}
static bool is_pinned(const void *p, size_t n);

[[noreturn]] static void bad_access(uintptr_t a, size_t n, bool write)
{
    const char *what = write ? "store" : "load";
    auto it = E.allocs.upper_bound(a);
    if (it != E.allocs.begin()) {
        --it;
        size_t off = a - it->first;
        if (off < it->second)
            fail("%s of %zu bytes at %p crosses the end of the allocation %p of %zu bytes (offset %zu)", what, n,
                 (void *)a, (void *)it->first, it->second, off);
        if (off < it->second + 4096)
            fail("%s of %zu bytes at %p, %zu bytes past the end of the allocation %p of %zu bytes (offset %zu)", what,
                 n, (void *)a, off - it->second, (void *)it->first, it->second, off);
    }
    fail("%s of %zu bytes at %p: not in any device allocation or shared memory", what, n, (void *)a);
}

void check_access(const void *p, size_t n, bool write)
{
    uintptr_t a = (uintptr_t)p;
    if (!cur) return;   /* host code using the same ld()/st() helpers */
    if ((n & (n - 1)) == 0 && (a & (n - 1)))
        fail("%s of %zu bytes at %p: not %zu-byte aligned (cudaErrorMisalignedAddress on a GPU)",
             write ? "store" : "load", n, p, n);
    if (a >= acc_lo && a + n <= acc_hi) return;
    auto it = E.allocs.upper_bound(a);
    if (it != E.allocs.begin() && in_range(a, n, (const void *)std::prev(it)->first, std::prev(it)->second)) {
        acc_lo = std::prev(it)->first;
        acc_hi = acc_lo + std::prev(it)->second;
        return;
    }
    if (!in_block_memory(a, n) && !is_pinned(p, n)) bad_access(a, n, write);
}

void check_aligned(const void *p, size_t n, bool write)
{
    if (cur && ((uintptr_t)p & (n - 1)))
        fail("%s of a %zu-byte vector at %p: not %zu-byte aligned (cudaErrorMisalignedAddress on a GPU)",
             write ? "store" : "load", n, p, n);
}

void seen(const void *p, size_t n, bool write)
{
    if (!cur) return;   /* host code using the same ld()/st() helpers */
    if (checking) check_seen(p, n, write);
    if (tracking) access(p, n, write);
    if (!counting) return;
    Touch &t = touched[(uintptr_t)p];
    if (n > t.size) t.size = (uint32_t)n;
    if (write) {
        t.wr = true;
        wr_all += n;
    } else {
        rd_all += n;
        if (!t.wr) t.rd = true;   /* a read of what this launch wrote comes from cache */
    }
}

void report(const char *call, double rd, double wr, double ra, double wa)
{
    if (counting && cuda_cost_seen) cuda_cost_seen(call, rd, wr, ra, wa);
}

/* the counts of the launch that just ended, reported and cleared */
static void report_launch(const char *name)
{
    double rd = 0, wr = 0;
    for (const auto &kv : touched) {
        if (kv.second.rd) rd += kv.second.size;
        if (kv.second.wr) wr += kv.second.size;
    }
    report(name, rd, wr, rd_all, wr_all);
    touched.clear();
    rd_all = wr_all = 0;
}

/* Rule CC.  A GPU runs a kernel from the build's SASS for its major
 * version with a minor at most its own, or JIT-compiles the PTX of the
 * build's last architecture if that is not newer than the GPU (CUDA C++
 * Programming Guide, "Binary Compatibility" and "PTX Compatibility");
 * otherwise the launch fails with cudaErrorNoKernelImageForDevice.  The
 * build's list: the Makefile's CUDA_ARCH ("75 80 90" with CUDA 13's nvcc,
 * which has no sm_70), passed as CUDA_ARCH_LIST with '_' for spaces. */
#ifndef CUDA_ARCH_LIST
#define CUDA_ARCH_LIST "70_80_90"
#endif
static bool build_runs_on(int cc)
{
    std::string list = CUDA_ARCH_LIST;
    if (list == "native") return true;   /* built for the build machine's GPU */
    int last = 0;
    for (size_t i = 0; i < list.size();) {
        size_t j = list.find_first_of("_ ", i);
        if (j == std::string::npos) j = list.size();
        int a = atoi(list.substr(i, j - i).c_str());
        if (a / 10 == cc / 10 && a % 10 <= cc % 10) return true;
        if (a) last = a;
        i = j + 1;
    }
    return last && cc >= last;
}
/* the last error is per host thread, as in the CUDA runtime: a not-ready
 * query on gradsync's progress thread is not the main thread's error */
static thread_local cudaError_t last_error = cudaSuccess;

static cudaError_t set_err(cudaError_t e)
{
    if (e != cudaSuccess) last_error = e;
    return e;
}

static bool kernel_image_for_device(const char *name)
{
    (void)name;
    if (!strict("CC") || build_runs_on(device_cc())) return true;
    set_err(cudaErrorNoKernelImageForDevice);
    return false;
}

/* Rule LAUNCH_BOUNDS.  __launch_bounds__(N) left N nops before the
 * kernel's entry and their address in __patchable_function_entries (emu.h):
 * N is the distance from the nearest such address below the entry, when
 * only nops lie between (0: no bound). */
extern "C" const uintptr_t __start___patchable_function_entries[] __attribute__((weak));
extern "C" const uintptr_t __stop___patchable_function_entries[] __attribute__((weak));
static unsigned long launch_bound(const void *fn)
{
    uintptr_t f = (uintptr_t)fn, best = 0;
    for (const uintptr_t *e = __start___patchable_function_entries; e && e < __stop___patchable_function_entries; e++)
        if (*e < f && *e > best) best = *e;
    if (!best || f - best > 1024) return 0;
    for (const unsigned char *c = (const unsigned char *)best; c < (const unsigned char *)f; c++)
        if (*c != 0x90) return 0;
    return (unsigned long)(f - best);
}

/* Rule REGISTERS: the registers per thread nvcc gave each kernel
 * (cuda/resource-usage.txt, from ptxas -v, compiled in; CUDA_EMU_RESOURCES
 * names another table), the most over its instantiations and
 * architectures, by the kernel's name without template arguments */
static const char resource_table[] =
#include "resource-usage.inc"
    "";
static std::map<std::string, int> read_registers(const char *f)
{
    std::string text = resource_table;
    if (f) {
        FILE *fp = fopen(f, "r");
        if (!fp) fail("CUDA_EMU_RESOURCES=%s: %s", f, strerror(errno));
        text.clear();
        for (int c; (c = fgetc(fp)) != EOF;) text += (char)c;
        fclose(fp);
    }
    std::map<std::string, int> m;
    char arch[32], kernel[256];
    int r;
    for (size_t i = 0; i < text.size();) {
        size_t j = text.find('\n', i);
        if (j == std::string::npos) j = text.size();
        std::string line = text.substr(i, j - i);
        i = j + 1;
        if (line[0] == '#' || sscanf(line.c_str(), "%31s %255s %d", arch, kernel, &r) != 3) continue;
        std::string base(kernel, strcspn(kernel, "<"));
        m[base] = std::max(m[base], r);
    }
    return m;
}
static int kernel_registers(const char *name)
{
    static std::string file = "-";   /* the table read (none yet) */
    static std::map<std::string, int> regs;
    const char *f = getenv("CUDA_EMU_RESOURCES");
    if (file != (f ? f : "")) {
        regs = read_registers(f);
        file = f ? f : "";
    }
    auto it = regs.find(std::string(name, strcspn(name, "<( ")));
    return it == regs.end() ? 0 : it->second;
}

/* A block's threads must fit the kernel's bound and, at its register
 * count (allocated per warp, 8 registers per thread at a time), the 64K
 * registers of an SM; a GPU refuses the launch otherwise
 * (cudaErrorInvalidValue past the bound, cudaErrorLaunchOutOfResources) */
static void check_launch_resources(const char *name, const void *fn, unsigned long nt)
{
    unsigned long bound = strict("LAUNCH_BOUNDS") ? launch_bound(fn) : 0;
    if (bound && nt > bound)
        fail("launch of %lu threads per block, over the kernel's __launch_bounds__(%lu) (a GPU refuses it)", nt, bound);
    int r = strict("REGISTERS") ? kernel_registers(name) : 0;
    unsigned long need = (nt + 31) / 32 * 32 * (unsigned long)((r + 7) / 8 * 8);
    if (need > 65536)
        fail("%lu threads per block x %d registers (cuda/resource-usage.txt) need %lu registers, over the 65536 of a "
             "block (cudaErrorLaunchOutOfResources on a GPU)", nt, r, need);
}

/* Rule SHARED: a kernel's static __shared__ variables are the writable
 * function-local statics of its symbol (emu.h's __shared__ is `static`),
 * found in this program's symbol table (.symtab of /proc/self/exe) once:
 * kernel entry -> (address, bytes) of each */
typedef std::vector<std::pair<char *, size_t>> Statics;
static uintptr_t exe_bias;
static std::map<uintptr_t, Statics> read_statics(FILE *f)
{
    std::map<uintptr_t, Statics> out;
    Elf64_Ehdr eh;
    if (fread(&eh, sizeof eh, 1, f) != 1 || memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64)
        return out;
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    if (fseek(f, (long)eh.e_shoff, SEEK_SET) || fread(sh.data(), sizeof(Elf64_Shdr), sh.size(), f) != sh.size())
        return out;
    for (const Elf64_Shdr &s : sh) {
        if (s.sh_type != SHT_SYMTAB || s.sh_link >= sh.size()) continue;
        std::vector<Elf64_Sym> sym(s.sh_size / sizeof(Elf64_Sym));
        std::string str(sh[s.sh_link].sh_size, '\0');
        if (fseek(f, (long)s.sh_offset, SEEK_SET) || fread(sym.data(), sizeof(Elf64_Sym), sym.size(), f) != sym.size() ||
            fseek(f, (long)sh[s.sh_link].sh_offset, SEEK_SET) || fread(&str[0], 1, str.size(), f) != str.size())
            return out;
        std::map<std::string, const Elf64_Sym *> locals;   /* "_ZZ<function>E<name>" */
        for (const Elf64_Sym &y : sym)
            if (ELF64_ST_TYPE(y.st_info) == STT_OBJECT && y.st_name < str.size() && y.st_shndx < sh.size() &&
                (sh[y.st_shndx].sh_flags & SHF_WRITE) && !strncmp(&str[y.st_name], "_ZZ", 3))
                locals[&str[y.st_name]] = &y;
        for (const Elf64_Sym &y : sym) {
            if (ELF64_ST_TYPE(y.st_info) != STT_FUNC || y.st_name >= str.size() || strncmp(&str[y.st_name], "_Z", 2))
                continue;
            std::string key = "_ZZ" + std::string(&str[y.st_name] + 2) + "E";
            for (auto it = locals.lower_bound(key); it != locals.end() && !it->first.compare(0, key.size(), key); ++it)
                out[exe_bias + y.st_value].emplace_back((char *)(exe_bias + it->second->st_value), it->second->st_size);
        }
    }
    return out;
}
static const Statics *kernel_statics(const void *fn)
{
    static std::map<uintptr_t, Statics> all = [] {
        dl_iterate_phdr([](struct dl_phdr_info *i, size_t, void *) { exe_bias = i->dlpi_addr; return 1; }, nullptr);
        FILE *f = fopen("/proc/self/exe", "rb");
        std::map<uintptr_t, Statics> m;
        if (f) m = read_statics(f);
        if (f) fclose(f);
        return m;
    }();
    auto it = all.find((uintptr_t)fn);
    return it == all.end() ? nullptr : &it->second;
}

/* its static and dynamic shared memory against the 48 KiB a block gets
 * without the cudaFuncAttributeMaxDynamicSharedMemorySize opt-in */
static const Statics *check_shared(const void *fn, size_t smem)
{
    const Statics *st = strict("SHARED") ? kernel_statics(fn) : nullptr;
    size_t bytes = 0;
    if (st)
        for (const auto &v : *st) bytes += v.second;
    if (smem + bytes > 48 * 1024)
        fail("%zu bytes of static and %zu of dynamic shared memory exceed the default limit of 48 KiB", bytes, smem);
    return st;
}

/* a kernel's blocks, when its stream gets to it */
static void run_launch(const char *name, const Statics *statics, dim3 grid, dim3 block, size_t smem,
                       const std::function<void()> &body, const char *file, int line)
{
    E.statics = statics;
    E.kname = name;
    E.kfile = file;
    E.kline = line;
    E.bidx = make_uint3(0, 0, 0);
    unsigned long nt = (unsigned long)block.x * block.y * block.z;
    while (E.pool.size() < nt) E.pool.push_back(new_fiber((int)E.pool.size()));
    if (E.smem_cap < smem + 2 * RED) {
        free(E.smem_buf);
        E.smem_cap = smem + 2 * RED;
        E.smem_buf = (unsigned char *)aligned_alloc(64, (E.smem_cap + 63) & ~(size_t)63);
    }
    E.smem_size = smem;
    E.grid = grid;
    E.block = block;
    E.body = &body;
    if (dry_run) {
        report(name, 0, 0, 0, 0);
    } else if (use_pthreads) {
        pt_launch(nt);
    } else {
        checking = strict("ACCESS");
        for_each_block(grid, [nt](uint3 b) {
            E.bidx = b;
            run_block((int)nt);
        });
        checking = false;
        if (counting) report_launch(name);
    }
    E.body = nullptr;
    E.kname = "";
    E.statics = nullptr;
}

/* the launch's checks now (a GPU refuses a bad configuration at the
 * launch), its blocks as the next work of `stream` (by value: the
 * arguments were converted at the call) */
void launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            std::function<void()> body, const char *file, int line)
{
    if (cur_fiber || cur) fail("kernel %s launched from inside a kernel", name);
    init_order();
    init_backend();
    E.kname = name;
    E.kfile = file;
    E.kline = line;
    E.bidx = make_uint3(0, 0, 0);
    unsigned long nt = (unsigned long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
        fail("invalid block (%u,%u,%u)", block.x, block.y, block.z);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu)
        fail("invalid grid (%u,%u,%u)", grid.x, grid.y, grid.z);
    if (smem > 48 * 1024) fail("%zu bytes of dynamic shared memory exceed the default limit of 48 KiB", smem);
    if (counting && use_pthreads) fail("byte counting needs the fiber backend");
    check_launch_resources(name, fn, nt);
    const Statics *statics = check_shared(fn, smem);
    E.kname = "";
    if (!kernel_image_for_device(name)) return;
    if (cuda_cost_shape) cuda_cost_shape(name, (double)grid.x * grid.y * grid.z, (double)nt);
    E.launches++;
    enqueue(stream, name,
            [=, body = std::move(body)] { run_launch(name, statics, grid, block, smem, body, file, line); });
}

/* ------------------------------------------------------------- streams */

/* Rule STREAMS: the work of a stream the program created (kernels, copies,
 * memsets, cuBLAS and cuBLASLt calls, NCCL collectives) is queued, not run,
 * and runs where the program synchronises (stream, event and device
 * synchronisation, a synchronous copy or memset, cudaFree, cudaFreeHost,
 * one operation per query of unfinished work), one operation at a time in
 * an order drawn from CUDA_EMU_SEED that keeps each stream's order and its
 * cudaStreamWaitEvent waits: an order a GPU may run them in.  A missing
 * wait then shows as work run too early or too late: wrong numbers.  The
 * legacy default stream (stream 0, a cuBLAS handle without a stream) runs
 * its work at once, after the blocking streams' queued work, which it
 * waits for.  Without the rule, and in the cost modes (byte counting, dry
 * run), every operation runs at once. */

struct Stream;
/* the host's monotonic clock in milliseconds (the emulator's event times) */
static double mono_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}
typedef std::map<int, long> Clock;   /* stream id -> its operations known to have run (rule RACE) */
/* a position in a stream (cudaEventRecord): done once the work queued
 * before it has run */
struct Mark {
    Stream *s;
    bool done;
    Clock vc;
    double ms;   /* when it was done (host monotonic clock), for cudaEventElapsedTime */
};
struct Op {
    std::function<void()> run;    /* the work (or its start); empty for a record or a wait */
    std::shared_ptr<Mark> wait;   /* cudaStreamWaitEvent: runs once this is done */
    std::shared_ptr<Mark> mark;   /* cudaEventRecord: done when this runs */
    std::function<bool()> poll;   /* started work (a collective): finished yet? */
    bool started;
    const char *what;
    Clock host;                   /* the host's clock at the call */
};
struct Capture;
struct Stream {
    std::deque<Op> q;
    bool nonblocking;
    int id;                       /* for messages: 0 the legacy stream, then 1, 2, ... */
    long seq;                     /* operations started */
    Clock vc;
    Capture *cap = nullptr;       /* cudaStreamBeginCapture: its work is recorded, not queued */
};
struct Event {
    std::shared_ptr<Mark> last;   /* the latest record; null before the first */
    bool timing = true;           /* not cudaEventDisableTiming */
};

static struct {
    std::recursive_mutex mu;     /* gradsync's progress thread queries events */
    std::vector<Stream *> all;   /* created and not destroyed */
    std::mt19937_64 rng;
    bool have_owner = false;
    pthread_t owner;             /* the thread that queues work runs it (on its fibers) */
    std::map<uintptr_t, size_t> pinned;   /* cudaMallocHost'd: start -> size */
    Stream legacy{ {}, false, 0, 0, {} };  /* the legacy default stream, for clocks */
    int streams_made = 0;
    Clock host;                  /* what the host has synchronised with */
} Q;

static unsigned long long emu_seed()
{
    static const unsigned long long v = [] {
        const char *s = getenv("CUDA_EMU_SEED");
        return s && *s ? strtoull(s, nullptr, 10) : 1ULL;
    }();
    return v;
}

/* Rule RACE (with STREAMS): each queued operation's device accesses (the
 * kernels' through ld()/st() of memory.cuh, the byte ranges of copies,
 * memsets, GEMMs and collectives), as one byte range per allocation, read
 * or written, are checked against those of other streams' operations: an
 * overlap where one of the two writes, without an event (or a host
 * synchronisation before the later call) ordering them, is a race on a
 * GPU.  Vector clocks: a stream's counts every stream's operations known to
 * have run before its own; a record copies it into its mark, a wait joins
 * the mark's, a host synchronisation joins it into the host's, which each
 * later call carries. */
static void clock_join(Clock &a, const Clock &b)
{
    for (const auto &kv : b)
        if (a[kv.first] < kv.second) a[kv.first] = kv.second;
}
static long clock_of(const Clock &c, int sid)
{
    auto it = c.find(sid);
    return it == c.end() ? 0 : it->second;
}

/* one range of an operation in one allocation */
struct Range {
    uintptr_t alloc, lo, hi;
    bool write;
    int sid;   /* its stream (ids are never reused) */
    long seq;
    const char *what;
};
static struct {
    bool on;                  /* tracking the running operation */
    Stream *s;                /* its stream */
    long seq;
    const char *what;
    std::vector<Range> ranges;                           /* its accesses */
    uintptr_t a_lo = 1, a_hi = 0;                        /* the allocation of the last access */
    std::unordered_map<uintptr_t, std::vector<Range>> hist;   /* by allocation: earlier operations' */
} R;
bool tracking;

void access(const void *p, size_t n, bool write)
{
    uintptr_t a = (uintptr_t)p;
    if (a < R.a_lo || a + n > R.a_hi) {
        auto it = E.allocs.upper_bound(a);
        if (it == E.allocs.begin()) return;
        --it;
        if (a < it->first || a + n > it->first + it->second) return;   /* not device memory */
        R.a_lo = it->first;
        R.a_hi = it->first + it->second;
    }
    for (Range &r : R.ranges)
        if (r.alloc == R.a_lo && r.write == write) {
            r.lo = std::min(r.lo, a);
            r.hi = std::max(r.hi, a + n);
            return;
        }
    R.ranges.push_back(Range{ R.a_lo, a, a + n, write, R.s->id, R.seq, R.what });
}

/* an entry no stream can race with any more: every stream's clock has it */
static bool settled(const Range &h)
{
    for (Stream *s : Q.all)
        if (s->id != h.sid && clock_of(s->vc, h.sid) < h.seq) return false;
    return Q.legacy.id == h.sid || clock_of(Q.legacy.vc, h.sid) >= h.seq;
}

/* the running operation's ranges against the history, then into it */
static void check_ranges()
{
    const Clock &vc = R.s->vc;
    for (const Range &r : R.ranges) {
        std::vector<Range> &h = R.hist[r.alloc];
        for (const Range &o : h) {
            if (o.sid == r.sid || !(o.write || r.write) || o.hi <= r.lo || r.hi <= o.lo) continue;
            if (clock_of(vc, o.sid) >= o.seq) continue;
            fail("race: %s on stream %d %s device memory [%p, +%zu) that %s on stream %d %s, without an event "
                 "between them (cudaEventRecord + cudaStreamWaitEvent)", r.what, r.sid,
                 r.write ? "writes" : "reads", (void *)std::max(r.lo, o.lo),
                 (size_t)(std::min(r.hi, o.hi) - std::max(r.lo, o.lo)), o.what, o.sid,
                 o.write ? "wrote" : "read");
        }
        h.erase(std::remove_if(h.begin(), h.end(), [](const Range &o) { return settled(o); }), h.end());
        h.push_back(r);
    }
    R.ranges.clear();
}

/* an allocation freed: its history goes with it */
static void forget(uintptr_t alloc)
{
    R.hist.erase(alloc);
    R.a_lo = 1;
    R.a_hi = 0;
}

static bool deferring() { return !dry_run && !counting && strict("STREAMS"); }

static Stream *stream_of(cudaStream_t h)
{
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) return nullptr;
    Stream *s = (Stream *)h;
    if (std::find(Q.all.begin(), Q.all.end(), s) == Q.all.end())
        fail("stream %p was not created by cudaStreamCreate, or is destroyed", (void *)h);
    return s;
}

static bool is_owner() { return !Q.have_owner || pthread_equal(Q.owner, pthread_self()); }
static bool may_run(const Op &op) { return !op.wait || op.wait->done; }
static bool needed(const std::vector<Stream *> &need, Stream *s)
{
    return std::find(need.begin(), need.end(), s) != need.end();
}

/* the clock of an operation of s starting now */
static void tick(Stream *s, const Op &op)
{
    s->vc[s->id] = ++s->seq;
    clock_join(s->vc, op.host);
    if (op.wait) clock_join(s->vc, op.wait->vc);
    if (!s->nonblocking && s != &Q.legacy) clock_join(s->vc, Q.legacy.vc);   /* legacy stream semantics */
}

/* starts an operation of s, or polls it once started: true once it is done */
static bool advance(Stream *s, Op &op)
{
    if (!op.started) {
        op.started = true;
        tick(s, op);
        if (op.run) {
            R.on = tracking = deferring() && strict("RACE") && !use_pthreads;
            R.s = s;
            R.seq = s->seq;
            R.what = op.what;
            op.run();
            tracking = false;
            if (R.on) check_ranges();
            R.on = false;
        }
    }
    if (op.poll && !op.poll()) return false;
    if (op.mark) {
        op.mark->vc = s->vc;
        op.mark->done = true;
        op.mark->ms = mono_ms();
    }
    return true;
}

/* advances one queued operation: the head of a stream in `need` (grown by
 * the streams their heads wait for) or, one step in two, of any other
 * stream */
static void step(std::vector<Stream *> need)
{
    if (!is_owner()) fail("a host thread synchronises with work that another thread queued (not emulated)");
    for (size_t i = 0; i < need.size(); i++) {
        Stream *s = need[i];
        if (s->q.empty() || may_run(s->q.front())) continue;
        Stream *t = s->q.front().wait->s;
        if (t && !needed(need, t)) need.push_back(t);
    }
    std::vector<Stream *> cand;
    for (Stream *s : need)
        if (!s->q.empty() && may_run(s->q.front())) cand.push_back(s);
    if (Q.rng() & 1)
        for (Stream *s : Q.all)
            if (!needed(need, s) && !s->q.empty() && may_run(s->q.front()))
                cand.push_back(s);
    if (cand.empty()) fail("deadlock: queued work waits for an event that nothing queued completes");
    Stream *s = cand[Q.rng() % cand.size()];
    if (advance(s, s->q.front())) s->q.pop_front();
}

/* runs work until done(); the host then knows what `need` ran */
static void run_until(const std::function<bool()> &done, const std::vector<Stream *> &need)
{
    while (!done()) step(need);
    for (Stream *s : need) clock_join(Q.host, s->vc);
    release_guards();
}
static void drain(Stream *s) { run_until([s] { return s->q.empty(); }, { s }); }
static void drain_mark(const std::shared_ptr<Mark> &m)
{
    if (m && !m->done) run_until([&m] { return m->done; }, { m->s });
    if (m) clock_join(Q.host, m->vc);
    release_guards();
}
static bool empty(const std::vector<Stream *> &v)
{
    for (Stream *s : v)
        if (!s->q.empty()) return false;
    return true;
}
static void drain_all() { run_until([] { return empty(Q.all); }, Q.all); }
/* what the legacy default stream waits for */
static void drain_blocking()
{
    std::vector<Stream *> b;
    for (Stream *s : Q.all)
        if (!s->nonblocking) b.push_back(s);
    run_until([&b] { return empty(b); }, b);
}

/* stream capture (graphs, at the end of this file): op recorded into s's
 * capture, or refused; a legacy-stream op while a blocking stream captures */
static void capture_op(Stream *s, Op op);
static void capture_legacy_use(const char *what);
static void count_submit(const Op &op);
static void capture_drop(Stream *s);
/* an unsafe call (allocation, synchronous copy, device synchronisation)
 * from a thread a capture forbids it: the capture is invalidated, and the
 * call must answer cudaErrorStreamCaptureUnsupported without acting */
static bool capture_refuses(const char *what);
/* a synchronisation or query of a capturing stream (s; the legacy stream
 * as an unsafe call) */
static bool capture_refuses_sync(Stream *s, const char *what);
/* a copy a capture cannot record: from or to pageable host memory */
static bool capture_refuses_copy(cudaStream_t h, const void *src, void *dst, cudaMemcpyKind kind);

/* op as the next work of stream h: queued, or run now (above), or
 * recorded while h captures */
static void submit(cudaStream_t h, Op op)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    count_submit(op);
    if (s && s->cap) return capture_op(s, std::move(op));
    if (!s) capture_legacy_use(op.what);
    op.host = Q.host;
    if (s && deferring()) {
        if (!Q.have_owner) {
            Q.have_owner = true;
            Q.owner = pthread_self();
            Q.rng.seed(emu_seed());
        }
        s->q.push_back(std::move(op));
        return;
    }
    if (s) {
        drain(s);
    } else {
        drain_blocking();
        s = &Q.legacy;
        for (Stream *b : Q.all)
            if (!b->nonblocking) clock_join(s->vc, b->vc);
    }
    drain_mark(op.wait);
    while (!advance(s, op)) {}
}

void enqueue(cudaStream_t h, const char *what, std::function<void()> work, std::function<bool()> poll)
{
    submit(h, Op{ std::move(work), nullptr, nullptr, std::move(poll), false, what, {} });
}

/* the device's queued work, before a call that synchronises it */
static void device_sync()
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    drain_all();
}

static bool is_pinned(const void *p, size_t n)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    uintptr_t a = (uintptr_t)p;
    auto it = Q.pinned.upper_bound(a);
    if (it == Q.pinned.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

bool is_device_range(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    auto it = E.allocs.upper_bound(a);
    if (it == E.allocs.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

} // namespace cuda_emu

using namespace cuda_emu;

extern "C" int cuda_emu_set_order(const char *spec)
{
    E.order_set = true;
    set_order_spec(spec);
    return 0;
}

extern "C" long cuda_emu_launches(void) { return E.launches; }

/* test_cuda_kernels lowers the backend's grid cap to a few blocks, so that
 * its sizes exceed the grids and every capped kernel must loop */
static long grid_cap_blocks;
extern "C" void cuda_emu_set_grid_cap(long blocks) { grid_cap_blocks = blocks; }
long cuda_emu::grid_cap(long cap) { return grid_cap_blocks > 0 && grid_cap_blocks < cap ? grid_cap_blocks : cap; }

/* (the work queued so far runs first, under the mode it was queued in) */
extern "C" void cuda_emu_count_bytes(int on)
{
    device_sync();
    counting = on != 0;
}
extern "C" void cuda_emu_dry_run(int on)
{
    device_sync();
    dry_run = on != 0;
}

/* "fibers" (default) or "pthread" (for ThreadSanitizer) */
extern "C" int cuda_emu_set_backend(const char *name)
{
    backend_set = true;
    use_pthreads = name && !strcmp(name, "pthread");
    return 0;
}

bool cuda_emu::strict(const char *rule)
{
    char name[96];
    snprintf(name, sizeof name, "CUDA_EMU_STRICT_%s", rule);
    const char *v = getenv(name);
    if (!v || !*v) v = getenv("CUDA_EMU_STRICT");
    return v && *v && strcmp(v, "0") != 0;
}

/* ------------------------------------------------------------- runtime */


/* CUDA_EMU_MEMORY=BYTES plays a device of that capacity (default: no limit,
 * or 80 GiB under CUDA_EMU_STRICT_DEVMEM): a cudaMalloc past it fails with
 * cudaErrorMemoryAllocation */
static size_t device_capacity()
{
    static size_t cap = [] {
        const char *s = getenv("CUDA_EMU_MEMORY");
        return s && *s ? (size_t)strtoull(s, nullptr, 10) : SIZE_MAX;
    }();
    return cap;
}

/* ------------------------------------ device memory shared by processes */

/* CUDA_EMU_STRICT_DEVMEM: the processes that use one device share its
 * memory, as on a GPU, where cudaMemGetInfo reports the device's free
 * memory with every process's allocations and CUDA context taken off, and
 * cudaMalloc fails when the device is full, whoever filled it.  Each
 * process holds a slot (pid, bytes) in a small file per device UUID under
 * /dev/shm, locked with flock; a slot whose pid is gone (a rank killed, or
 * one that ended through fail()'s _exit) counts nothing, and the last
 * process to leave removes the file.  The file name carries a run token
 * (CUDA_EMU_SESSION, else mpirun's job id, else the parent's pid) so that
 * test runs side by side do not see each other's devices. */
struct DevSlot {
    int64_t pid;
    uint64_t bytes;
};
static const int DEV_SLOTS = 64;
struct DevShare {
    int fd = -1, slot = -1;
    std::string path;
};
static std::map<int, DevShare> dev_shares;   /* per device ordinal */
static std::map<uintptr_t, std::pair<int, size_t>> dev_charged;   /* allocation -> (device, bytes charged) */

/* an 80 GiB device (an H100) where CUDA_EMU_MEMORY is not set */
static const size_t H100_BYTES = (size_t)80 << 30;
static size_t reported_capacity() { return device_capacity() == SIZE_MAX ? H100_BYTES : device_capacity(); }

/* What a process costs the device beyond its bytes: allocations in 2 MiB
 * pages (the driver's large-page granularity) and a context of 500 MiB
 * (primary context with lazy loading: ~300 MiB per PyTorch's ptrblck,
 * pytorch#107667; 555 MiB on a 188-SM Blackwell, llama.cpp#23604; it grows
 * with the SM count, H100: 132).  On a device of CUDA_EMU_MEMORY bytes
 * (the tests' toy devices of a few MB) both shrink with it, an H100 scaled
 * down: a page at least 256 bytes, cudaMalloc's alignment. */
static size_t scaled(size_t h100_value)
{
    double f = (double)reported_capacity() / (double)H100_BYTES;
    return (size_t)((double)h100_value * (f < 1 ? f : 1));
}
static size_t dev_page()
{
    size_t want = scaled((size_t)2 << 20), g = 256;
    while (g < want) g *= 2;
    return g;
}
static size_t dev_context_bytes() { return scaled((size_t)500 << 20); }

static std::string dev_file(int dev)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) fail("device %d has no properties", dev);
    std::string uuid(prop.uuid.bytes, strnlen(prop.uuid.bytes, sizeof prop.uuid.bytes)), tok;
    if (const char *s = getenv("CUDA_EMU_SESSION")) tok = s;
    else if (const char *j = getenv("OMPI_MCA_ess_base_jobid")) tok = std::string("job") + j;
    else tok = "ppid" + std::to_string((long)getppid());
    for (char &c : tok) if (c == '/') c = '_';
    return "/dev/shm/cuda-emu-" + tok + "-" + uuid;
}

static void dev_read(const DevShare &d, DevSlot *s)
{
    memset(s, 0, sizeof(DevSlot) * DEV_SLOTS);
    if (pread(d.fd, s, sizeof(DevSlot) * DEV_SLOTS, 0) < 0) fail("%s: cannot read: %s", d.path.c_str(), strerror(errno));
}
static void dev_write(const DevShare &d, const DevSlot *s)
{
    if (pwrite(d.fd, s, sizeof(DevSlot) * DEV_SLOTS, 0) != (ssize_t)(sizeof(DevSlot) * DEV_SLOTS))
        fail("%s: cannot write: %s", d.path.c_str(), strerror(errno));
}
static bool pid_alive(int64_t pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

/* bytes of the device held by the live processes (lock held) */
static uint64_t dev_used(const DevSlot *s)
{
    uint64_t sum = 0;
    for (int i = 0; i < DEV_SLOTS; i++)
        if (pid_alive(s[i].pid)) sum += s[i].bytes;
    return sum;
}

static void dev_leave_all()
{
    for (auto &kv : dev_shares) {
        DevShare &d = kv.second;
        if (d.fd < 0) continue;
        DevSlot s[DEV_SLOTS];
        flock(d.fd, LOCK_EX);
        dev_read(d, s);
        if (s[d.slot].pid == (int64_t)getpid()) s[d.slot] = DevSlot{ 0, 0 };   /* not a forked child's */
        dev_write(d, s);
        bool last = true;
        for (int i = 0; i < DEV_SLOTS; i++)
            if (pid_alive(s[i].pid)) last = false;
        if (last) unlink(d.path.c_str());   /* under the lock: see dev_open */
        flock(d.fd, LOCK_UN);
        close(d.fd);
        d.fd = -1;
    }
}

/* open and lock the file; one that the last process out removed between
 * our open and our lock (it unlinks under the lock) is opened again */
static void dev_open(DevShare &d)
{
    for (;;) {
        d.fd = open(d.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (d.fd < 0) fail("%s: cannot open: %s", d.path.c_str(), strerror(errno));
        flock(d.fd, LOCK_EX);
        struct stat a, b;
        if (fstat(d.fd, &a) == 0 && stat(d.path.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            return;
        close(d.fd);
    }
}

/* files that only dead processes hold (runs killed or aborted: MPI_Abort
 * runs no atexit) are removed by the next process, so that /dev/shm does
 * not fill up over many test runs */
static void dev_sweep()
{
    DIR *dir = opendir("/dev/shm");
    if (!dir) return;
    while (struct dirent *e = readdir(dir)) {
        if (strncmp(e->d_name, "cuda-emu-", 9)) continue;
        DevShare d;
        d.path = std::string("/dev/shm/") + e->d_name;
        if ((d.fd = open(d.path.c_str(), O_RDWR | O_CLOEXEC)) < 0) continue;
        DevSlot s[DEV_SLOTS];
        flock(d.fd, LOCK_EX);
        dev_read(d, s);
        bool dead = true;
        for (int i = 0; i < DEV_SLOTS; i++)
            if (pid_alive(s[i].pid)) dead = false;
        struct stat a, b;   /* still the file of that name (see dev_open) */
        if (dead && fstat(d.fd, &a) == 0 && stat(d.path.c_str(), &b) == 0 && a.st_ino == b.st_ino)
            unlink(d.path.c_str());
        flock(d.fd, LOCK_UN);
        close(d.fd);
    }
    closedir(dir);
}

/* this process's slot on device dev, made on first use with the context's
 * bytes (a context exists once a process allocates or asks for free memory) */
static DevShare &dev_share(int dev)
{
    DevShare &d = dev_shares[dev];
    if (d.fd >= 0) return d;
    static bool swept;
    if (!swept) dev_sweep();
    swept = true;
    d.path = dev_file(dev);
    dev_open(d);
    DevSlot s[DEV_SLOTS];
    dev_read(d, s);
    for (int i = 0; i < DEV_SLOTS && d.slot < 0; i++)
        if (!pid_alive(s[i].pid)) d.slot = i;
    if (d.slot < 0) fail("%s: more than %d processes on one device", d.path.c_str(), DEV_SLOTS);
    s[d.slot] = DevSlot{ (int64_t)getpid(), dev_context_bytes() };
    dev_write(d, s);
    flock(d.fd, LOCK_UN);
    static bool registered;
    if (!registered) registered = atexit(dev_leave_all) == 0;
    return d;
}

/* add delta bytes to this process's slot on device dev; false (nothing
 * added) if the device's live processes would then hold more than its
 * capacity.  *free_b, if given: what the device has left. */
static bool dev_charge(int dev, int64_t delta, size_t *free_b)
{
    DevShare &d = dev_share(dev);
    DevSlot s[DEV_SLOTS];
    flock(d.fd, LOCK_EX);
    dev_read(d, s);
    uint64_t used = dev_used(s), cap = reported_capacity();
    bool ok = delta <= 0 || used + (uint64_t)delta <= cap;
    if (ok) {
        s[d.slot].bytes += delta;
        used += delta;
        dev_write(d, s);
    }
    flock(d.fd, LOCK_UN);
    if (free_b) *free_b = used < cap ? cap - used : 0;
    return ok;
}

/* a cudaMalloc of size bytes charged to the current device, in pages */
static bool dev_charge_alloc(size_t size, int *dev, size_t *charged)
{
    size_t page = dev_page();
    *charged = (size + page - 1) / page * page;
    cudaGetDevice(dev);
    return dev_charge(*dev, (int64_t)*charged, nullptr);
}

/* ------------------------------------------------------ memory functions */

cudaError_t cudaMalloc(void **p, size_t size)
{
    if (capture_refuses("cudaMalloc")) return set_err(cudaErrorStreamCaptureUnsupported);
    if (!p) return set_err(cudaErrorInvalidValue);
    bool shared = strict("DEVMEM");
    int dev = 0;
    size_t charged = 0;
    if (shared ? !dev_charge_alloc(size, &dev, &charged) : size > device_capacity() - E.dev_bytes)
        return set_err(cudaErrorMemoryAllocation);
    /* exactly `size` bytes (256-aligned like the GPU), so that ASan sees
     * an access past the end even where the GPU's rounding would hide it */
    size_t n = size ? size : 1;
    void *q = NULL;
    if (posix_memalign(&q, 256, n)) {
        if (shared) dev_charge(dev, -(int64_t)charged, nullptr);
        return set_err(cudaErrorMemoryAllocation);
    }
    if (shared) dev_charged[(uintptr_t)q] = std::make_pair(dev, charged);
    if (!dry_run) memset(q, 0xFF, n);   /* like the GPU: fresh memory is not zero */
    E.allocs[(uintptr_t)q] = size;
    E.dev_bytes += size;
    *p = q;
    return cudaSuccess;
}

/* total: CUDA_EMU_MEMORY, else 80 GiB (an H100's); free: under
 * CUDA_EMU_STRICT_DEVMEM what every process on the device left (above),
 * else total less the bytes this process cudaMalloc'd now, exactly (and
 * without CUDA_EMU_MEMORY cudaMalloc itself is then unlimited) */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    if (!free_b || !total) return set_err(cudaErrorInvalidValue);
    size_t cap = reported_capacity();
    *total = cap;
    int dev = 0;
    cudaGetDevice(&dev);
    if (strict("DEVMEM")) dev_charge(dev, 0, free_b);   /* every process's bytes and context */
    else *free_b = cap > E.dev_bytes ? cap - E.dev_bytes : 0;
    return cudaSuccess;
}

/* cudaFree and cudaFreeHost synchronise the device */
cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    if (capture_refuses("cudaFree")) return set_err(cudaErrorStreamCaptureUnsupported);
    device_sync();
    auto it = E.allocs.find((uintptr_t)p);
    if (it == E.allocs.end()) fail("cudaFree(%p): not a pointer returned by cudaMalloc", p);
    E.dev_bytes -= it->second;
    forget(it->first);
    acc_lo = 1;
    acc_hi = 0;
    E.allocs.erase(it);
    auto c = dev_charged.find((uintptr_t)p);
    if (c != dev_charged.end()) {   /* given back to the device it came from */
        dev_charge(c->second.first, -(int64_t)c->second.second, nullptr);
        dev_charged.erase(c);
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
    if (capture_refuses("cudaMallocHost")) return set_err(cudaErrorStreamCaptureUnsupported);
    if (!p) return set_err(cudaErrorInvalidValue);
    /* whole pages, for rule PINNED's guards */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (posix_memalign(p, page, ((size ? size : 1) + page - 1) / page * page)) return set_err(cudaErrorMemoryAllocation);
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Q.pinned[(uintptr_t)*p] = size ? size : 1;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p) return cudaSuccess;
    if (capture_refuses("cudaFreeHost")) return set_err(cudaErrorStreamCaptureUnsupported);
    device_sync();
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    if (!Q.pinned.erase((uintptr_t)p)) fail("cudaFreeHost(%p): not a pointer returned by cudaMallocHost", p);
    free(p);
    return cudaSuccess;
}

/* A synchronous copy or memset runs on the legacy default stream, which is
 * not ordered with non-blocking streams: on a GPU it races with their work
 * (the emulator, running everything in order, would hide that) */
static void check_legacy_stream(const char *what)
{
    if (E.nonblocking_streams > 0)
        fail("%s on the legacy default stream while %ld non-blocking stream(s) exist: not ordered with their "
             "work (use the Async call on the stream)", what, E.nonblocking_streams);
}

static void check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *what)
{
    bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dd && !is_device_range(dst, n)) fail("%s: destination %p (+%zu bytes) is not device memory", what, dst, n);
    if (sd && !is_device_range(src, n)) fail("%s: source %p (+%zu bytes) is not device memory", what, src, n);
    if (kind == cudaMemcpyHostToDevice && is_device_range(src, 1)) fail("%s: host-to-device copy from device memory", what);
    if (kind == cudaMemcpyDeviceToHost && is_device_range(dst, 1)) fail("%s: device-to-host copy into device memory", what);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    if (capture_refuses("cudaMemcpy")) return set_err(cudaErrorStreamCaptureUnsupported);
    check_legacy_stream("cudaMemcpy");
    if (!n) return cudaSuccess;
    check_copy(dst, src, n, kind, "cudaMemcpy");
    device_sync();
    memmove(dst, src, n);
    return cudaSuccess;
}

/* a queued copy, its device ranges seen by rule RACE */
static void copy_run(void *dst, const void *src, size_t n)
{
    if (tracking) {
        access(src, n, false);
        access(dst, n, true);
    }
    memmove(dst, src, n);
}

/* Rule PINNED (with STREAMS): a copy into pinned memory lands when its
 * stream gets there, so the host may read the buffer only after it waited
 * for the copy (an event or stream synchronisation).  The buffer's pages
 * are inaccessible from the call until the host's clock has the copy: a
 * premature host access faults and is reported. */
/* Rule PINNED_SRC (with STREAMS): the same for the source of a copy from
 * pinned memory to the device, read when its stream gets there: the host
 * must not refill it before it waited for the copy, so its pages are
 * read-only until then, and a host write faults and is reported, naming
 * the copy. */
struct Guard {
    uintptr_t lo, hi;          /* whole pages */
    std::shared_ptr<Mark> m;   /* after the copy */
    const void *src, *dst;     /* the copy, for messages; */
    size_t n;
    bool source;               /* its source (read-only), else its destination (no access) */
};
static std::vector<Guard> guards;

/* (a page both guards share gets the stricter, no access) */
static void protect_all()
{
    for (const Guard &g : guards)
        if (g.source) mprotect((void *)g.lo, g.hi - g.lo, PROT_READ);
    for (const Guard &g : guards)
        if (!g.source) mprotect((void *)g.lo, g.hi - g.lo, PROT_NONE);
}

static void on_segv(int sig, siginfo_t *si, void *)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (const Guard &g : guards)
        if (a >= g.lo && a < g.hi && !g.source)
            fail("host access to pinned memory %p before waiting for the cudaMemcpyAsync into it (an event or stream "
                 "synchronisation after the copy)", si->si_addr);
    for (const Guard &g : guards)
        if (a >= g.lo && a < g.hi)
            fail("host write to pinned memory %p, the source of cudaMemcpyAsync(%p, %p, %zu, cudaMemcpyHostToDevice), "
                 "before waiting for that copy (an event or stream synchronisation after it): the copy may read the "
                 "new values", si->si_addr, g.dst, g.src, g.n);
    signal(sig, SIG_DFL);   /* not ours: fault again, as without the rule */
}

/* pages of [p, p+n) guarded until the host knows m done (the copy's
 * source, else its destination) */
static void guard(const void *src, void *dst, size_t n, const std::shared_ptr<Mark> &m, bool source)
{
    static bool installed = [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, nullptr);
        return true;
    }();
    (void)installed;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)(source ? src : dst);
    guards.push_back(Guard{ a & ~(page - 1), (a + n + page - 1) & ~(page - 1), m, src, dst, n, source });
    protect_all();
}

/* the guards of copies the host has waited for are lifted */
static void release_guards()
{
    if (guards.empty()) return;
    size_t before = guards.size();
    auto known = [](const Guard &g) {
        return g.m->done && clock_of(Q.host, g.m->s->id) >= clock_of(g.m->vc, g.m->s->id);
    };
    for (const Guard &g : guards)
        if (known(g)) mprotect((void *)g.lo, g.hi - g.lo, PROT_READ | PROT_WRITE);
    guards.erase(std::remove_if(guards.begin(), guards.end(), known), guards.end());
    if (guards.size() != before) protect_all();
}

/* the copy itself reads and writes through the guards */
static void copy_into_guarded(void *dst, const void *src, size_t n)
{
    for (const Guard &g : guards) mprotect((void *)g.lo, g.hi - g.lo, PROT_READ | PROT_WRITE);
    copy_run(dst, src, n);
    protect_all();
}

/* A copy from pageable host memory is staged by the driver before the call
 * returns, one into pageable memory returns once it is done; only pinned
 * memory (cudaMallocHost) is copied when the stream gets there (CUDA
 * runtime API, "API synchronization behavior") */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s)
{
    if (!n) return cudaSuccess;
    check_copy(dst, src, n, kind, "cudaMemcpyAsync");
    if (capture_refuses_copy(s, src, dst, kind)) return set_err(cudaErrorStreamCaptureUnsupported);
    double dn = (double)n, rd = kind == cudaMemcpyHostToDevice ? 0 : dn, wr = kind == cudaMemcpyDeviceToHost ? 0 : dn;
    report("cudaMemcpyAsync", rd, wr, rd, wr);
    if (dry_run && kind != cudaMemcpyDeviceToHost) {
        dry_submit();
        return cudaSuccess;
    }
    if (kind == cudaMemcpyHostToDevice && !is_pinned(src, n)) {
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        enqueue(s, "cudaMemcpyAsync", [dst, staged, n] { copy_run(dst, staged->data(), n); });
    } else if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, n)) {
        std::lock_guard<std::recursive_mutex> g(Q.mu);
        auto m = std::make_shared<Mark>(Mark{ stream_of(s), false, {}, 0 });
        submit(s, Op{ [dst, src, n] { copy_run(dst, src, n); }, nullptr, m, nullptr, false, "cudaMemcpyAsync", {} });
        drain_mark(m);
    } else if (kind == cudaMemcpyDeviceToHost && stream_of(s) && deferring() && strict("PINNED")) {
        std::lock_guard<std::recursive_mutex> g(Q.mu);
        auto m = std::make_shared<Mark>(Mark{ stream_of(s), false, {}, 0 });
        submit(s, Op{ [dst, src, n] { copy_into_guarded(dst, src, n); }, nullptr, m, nullptr, false, "cudaMemcpyAsync", {} });
        guard(src, dst, n, m, false);
    } else if (kind == cudaMemcpyHostToDevice && stream_of(s) && deferring() && strict("PINNED_SRC")) {
        std::lock_guard<std::recursive_mutex> g(Q.mu);
        auto m = std::make_shared<Mark>(Mark{ stream_of(s), false, {}, 0 });
        submit(s, Op{ [dst, src, n] { copy_into_guarded(dst, src, n); }, nullptr, m, nullptr, false, "cudaMemcpyAsync", {} });
        guard(src, dst, n, m, true);
    } else {
        enqueue(s, "cudaMemcpyAsync", [dst, src, n] { copy_run(dst, src, n); });
    }
    return cudaSuccess;
}

static void check_memset(void *p, size_t n, const char *what)
{
    if (!is_device_range(p, n)) fail("%s: %p (+%zu bytes) is not device memory", what, p, n);
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (capture_refuses("cudaMemset")) return set_err(cudaErrorStreamCaptureUnsupported);
    check_legacy_stream("cudaMemset");
    if (!n) return cudaSuccess;
    check_memset(p, n, "cudaMemset");
    device_sync();
    if (!dry_run) memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    report("cudaMemsetAsync", 0, (double)n, 0, (double)n);
    if (!n) return cudaSuccess;
    check_memset(p, n, "cudaMemsetAsync");
    if (dry_run) dry_submit();
    else
        enqueue(s, "cudaMemsetAsync", [p, v, n] {
            if (tracking) access(p, n, true);
            memset(p, v, n);
        });
    return cudaSuccess;
}

/* streams and events: queued work (rule STREAMS, above) */
static cudaError_t new_stream(cudaStream_t *h, bool nonblocking)
{
    if (!h) return set_err(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = new Stream{ {}, nonblocking, ++Q.streams_made, 0, Q.host };
    Q.all.push_back(s);
    if (nonblocking) E.nonblocking_streams++;
    *h = (cudaStream_t)s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return new_stream(s, false); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f)
{
    return new_stream(s, (f & cudaStreamNonBlocking) != 0);
}
/* (a GPU finishes a destroyed stream's work: here it runs first) */
cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    capture_drop(s);   /* a capture still open ends with its stream */
    drain(s);
    if (s->nonblocking) E.nonblocking_streams--;
    Q.all.erase(std::find(Q.all.begin(), Q.all.end(), s));
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (capture_refuses_sync(s, "cudaStreamSynchronize")) return set_err(cudaErrorStreamCaptureUnsupported);
    if (s) drain(s);
    else drain_blocking();
    return cudaSuccess;
}

static Event *event_of(cudaEvent_t e)
{
    if (!e) fail("a null cudaEvent_t");
    return (Event *)e;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
{
    (void)f;
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    std::shared_ptr<Mark> m = event_of(e)->last;   /* the latest record now, as CUDA takes it */
    if (m) submit(s, Op{ nullptr, m, nullptr, nullptr, false, "cudaStreamWaitEvent", {} });
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    if (!e) return set_err(cudaErrorInvalidValue);
    *e = (cudaEvent_t) new Event();
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    cudaError_t r = cudaEventCreate(e);
    if (r == cudaSuccess) ((Event *)*e)->timing = !(f & cudaEventDisableTiming);
    return r;
}
/* (a record still queued keeps its mark) */
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    delete event_of(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    auto m = std::make_shared<Mark>(Mark{ stream_of(h), false, {}, 0 });
    event_of(e)->last = m;
    submit(h, Op{ nullptr, nullptr, m, nullptr, false, "cudaEventRecord", {} });
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    drain_mark(event_of(e)->last);
    return cudaSuccess;
}
/* The time between two completed records.  As on a GPU (CUDA Runtime API,
 * cudaEventElapsedTime): an event never recorded or made with
 * cudaEventDisableTiming is cudaErrorInvalidResourceHandle, one whose work
 * has not run cudaErrorNotReady.  Rule ELAPSED: the host must have waited
 * for both records (event or stream synchronisation, or a ready query)
 * before it reads them; a read that relies on the work having run by
 * chance answers cudaErrorNotReady on a GPU whenever the device is behind. */
static bool host_waited(const Mark &m)
{
    return !m.s || clock_of(Q.host, m.s->id) >= clock_of(m.vc, m.s->id);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Event *a = event_of(start), *b = event_of(end);
    if (!ms) return set_err(cudaErrorInvalidValue);
    if (!a->last || !b->last || !a->timing || !b->timing) return set_err(cudaErrorInvalidResourceHandle);
    if (!a->last->done || !b->last->done) return set_err(cudaErrorNotReady);
    if (strict("ELAPSED") && (!host_waited(*a->last) || !host_waited(*b->last)))
        fail("cudaEventElapsedTime of an event the host has not waited for (synchronise first: on a GPU the "
             "answer may be cudaErrorNotReady)");
    *ms = (float)(b->last->ms - a->last->ms);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (capture_refuses("cudaDeviceSynchronize")) return set_err(cudaErrorStreamCaptureUnsupported);
    device_sync();
    return cudaSuccess;
}

/* Rule QUERY: a GPU answers a query cudaErrorNotReady while the work is
 * running, and the runtime keeps that answer as the thread's last error
 * (PyTorch's CUDAEvent::query clears it with cudaGetLastError(), pytorch
 * PR #18584): here a seeded fraction of the queries (CUDA_EMU_SEED) answer
 * not ready even when the work is done, so that a caller which does not
 * clear it fails at its next launch check */
static unsigned long long splitmix(unsigned long long z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static bool query_not_ready()
{
    if (!strict("QUERY")) return false;
    static std::atomic<unsigned long long> calls{ 0 };
    return (splitmix(emu_seed() * 0x9E3779B97F4A7C15ULL + calls.fetch_add(1)) & 3) != 0;   /* three queries in four */
}

static cudaError_t query_answer() { return query_not_ready() ? set_err(cudaErrorNotReady) : cudaSuccess; }

/* unfinished work: one operation runs (if the querying thread queued the
 * work), and the answer is not ready while some is left */
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    std::shared_ptr<Mark> m = event_of(e)->last;
    if (m && !m->done) {
        if (is_owner()) step({ m->s });
        if (!m->done) return set_err(cudaErrorNotReady);
    }
    if (m) clock_join(Q.host, m->vc);
    release_guards();
    return query_answer();
}
cudaError_t cudaStreamQuery(cudaStream_t h)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (capture_refuses_sync(s, "cudaStreamQuery")) return set_err(cudaErrorStreamCaptureUnsupported);
    if (s && !s->q.empty()) {
        if (is_owner()) step({ s });
        if (!s->q.empty()) return set_err(cudaErrorNotReady);
    }
    if (s) clock_join(Q.host, s->vc);
    release_guards();
    return query_answer();
}

cudaError_t cudaGetDeviceCount(int *n)
{
    /* CUDA_EMU_DEVICES=0 plays a machine without a GPU */
    const char *s = getenv("CUDA_EMU_DEVICES");
    *n = s ? atoi(s) : 1;
    return *n > 0 ? cudaSuccess : set_err(cudaErrorNoDevice);
}

/* per host thread, as in CUDA: a thread starts on device 0 */
static thread_local int cur_device;
cudaError_t cudaSetDevice(int d)
{
    int n;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n) return set_err(cudaErrorInvalidDevice);
    cur_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { *d = cur_device; return cudaSuccess; }

int cuda_emu::device_cc()
{
    const char *cc = getenv("CUDA_EMU_CC");
    int v = cc && *cc ? atoi(cc) : 90;
    if (v < 10 || v > 199) fail("CUDA_EMU_CC=%s: expected a compute capability such as 70, 80 or 90", cc);
    return v;
}

/* Rule CC: bf16 storage in a cuBLAS or cuBLASLt call before compute
 * capability 8.0 (no bf16 tensor cores; cuBLAS answers ARCH_MISMATCH or
 * NOT_SUPPORTED, or runs it without tensor cores, depending on its version:
 * the backend must not rely on either, and refuses bf16 there itself) */
bool cuda_emu::cc_refuses_types(cudaDataType a, cudaDataType b, cudaDataType c)
{
    bool bf16 = a == CUDA_R_16BF || b == CUDA_R_16BF || c == CUDA_R_16BF;
    return bf16 && strict("CC") && device_cc() < 80;
}

/* emulated device d is the d-th entry of CUDA_VISIBLE_DEVICES where set (a
 * process bound to one GPU, as Slurm's --gpus-per-task=1 does, sees it as
 * device 0), else GPU d: "emu-ENTRY" stands for its UUID */
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int d)
{
    int n;
    cudaGetDeviceCount(&n);
    if (!prop) return set_err(cudaErrorInvalidValue);
    if (d < 0 || d >= n) return set_err(cudaErrorInvalidDevice);
    std::string entry = std::to_string(d);
    if (const char *v = getenv("CUDA_VISIBLE_DEVICES")) {
        std::vector<std::string> list(1);
        for (const char *c = v; *c; c++)
            if (*c == ',') list.emplace_back(); else list.back() += *c;
        if ((size_t)d < list.size()) entry = list[d];
    }
    /* only what the backend reads: the name, a UUID per physical device and
     * the compute capability, CUDA_EMU_CC (e.g. 70 for a V100; default 90) */
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "emulated GPU %s", entry.c_str());
    snprintf(prop->uuid.bytes, sizeof prop->uuid.bytes, "emu-%s", entry.c_str());
    int v = device_cc();
    prop->major = v / 10;
    prop->minor = v % 10;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    default: return "emulated CUDA error";
    }
}

/* ------------------------------------------------------ stream capture */

/* CUDA Graphs by stream capture (cudaStreamBeginCapture .. EndCapture,
 * cudaGraphInstantiate, cudaGraphLaunch).  While a stream captures, the
 * work submitted to it is recorded, not run: each operation as it would
 * have been queued, so a kernel keeps the arguments converted at the
 * launch, a cuBLAS call its pointers and scalars, a copy its addresses.
 * A launch of the graph queues exactly those operations again, every time:
 * a pointer or scalar that changed on the host since the capture is not
 * seen (it must live in device memory, or the graph be captured again),
 * as on a GPU.  The rules of the CUDA Runtime API that the emulator keeps:
 *  - the legacy default stream cannot capture; a capture ends on the
 *    stream and, unless relaxed, on the thread that began it;
 *  - an unsafe call (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost,
 *    cudaMemcpy, cudaMemset, cudaDeviceSynchronize) from the capturing
 *    thread (cudaStreamCaptureModeThreadLocal) or any thread (Global), a
 *    synchronisation or query of the capturing stream, a copy from or to
 *    pageable host memory into the capture, or the legacy stream used
 *    while a blocking stream captures: the call answers
 *    cudaErrorStreamCaptureUnsupported (the legacy stream
 *    cudaErrorStreamCaptureImplicit) and the capture is invalidated, so
 *    cudaStreamEndCapture answers cudaErrorStreamCaptureInvalidated with
 *    no graph;
 *  - not emulated (a misuse here): events recorded in a capture (forks and
 *    joins across streams) and collectives in a capture. */
namespace cuda_emu {

struct Capture {
    std::vector<Op> ops;
    cudaStreamCaptureMode mode;
    pthread_t thread;
    cudaError_t invalid = cudaSuccess;   /* why it is invalidated */
    const char *why = nullptr;
};
struct GraphOps {   /* a cudaGraph_t and a cudaGraphExec_t alike */
    std::vector<Op> ops;
};
static long n_submits, n_graph_launches, n_replayed;
static bool replaying;   /* cudaGraphLaunch's own submissions */

void dry_submit()
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    n_submits++;
}

static void count_submit(const Op &op)
{
    if (!op.run) return;   /* records and waits */
    if (replaying) n_replayed++;
    else n_submits++;
}

static void capture_drop(Stream *s)
{
    delete s->cap;
    s->cap = nullptr;
}

static void invalidate(Capture *c, cudaError_t why, const char *what)
{
    if (c->invalid != cudaSuccess) return;
    c->invalid = why;
    c->why = what;
}

static void capture_op(Stream *s, Op op)
{
    Capture *c = s->cap;
    if (op.mark) fail("%s into a capture: events recorded in a capture are not emulated", op.what);
    if (op.poll) fail("%s into a capture: collectives in a capture are not emulated", op.what);
    if (op.wait) {   /* an event recorded outside the capture */
        invalidate(c, cudaErrorStreamCaptureIsolation, op.what);
        set_err(cudaErrorStreamCaptureIsolation);
        return;
    }
    if (c->invalid != cudaSuccess) {
        set_err(cudaErrorStreamCaptureInvalidated);
        return;
    }
    c->ops.push_back(std::move(op));
}

/* does a capture forbid this thread's unsafe calls? */
static bool forbids(const Capture *c)
{
    if (c->mode == cudaStreamCaptureModeRelaxed) return false;
    return c->mode == cudaStreamCaptureModeGlobal || pthread_equal(c->thread, pthread_self());
}

static bool capture_refuses(const char *what)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    bool refused = false;
    for (Stream *s : Q.all)
        if (s->cap && forbids(s->cap)) {
            invalidate(s->cap, cudaErrorStreamCaptureUnsupported, what);
            refused = true;
        }
    return refused;
}

static bool capture_refuses_sync(Stream *s, const char *what)
{
    if (!s) return capture_refuses(what);
    if (!s->cap) return false;
    invalidate(s->cap, cudaErrorStreamCaptureUnsupported, what);
    return true;
}

static bool capture_refuses_copy(cudaStream_t h, const void *src, void *dst, cudaMemcpyKind kind)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (!s || !s->cap) return false;
    bool pageable = (kind == cudaMemcpyHostToDevice && !is_pinned(src, 1)) ||
                    (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, 1));
    if (kind == cudaMemcpyDeviceToHost && !pageable)
        fail("cudaMemcpyAsync into pinned memory in a capture: not emulated");
    if (pageable) invalidate(s->cap, cudaErrorStreamCaptureUnsupported, "cudaMemcpyAsync with pageable host memory");
    return pageable;
}

/* legacy-stream work waits for the blocking streams: a capturing one
 * would gain a dependency from outside its capture */
static void capture_legacy_use(const char *what)
{
    for (Stream *s : Q.all)
        if (s->cap && !s->nonblocking) {
            invalidate(s->cap, cudaErrorStreamCaptureImplicit, what);
            set_err(cudaErrorStreamCaptureImplicit);
        }
}

} // namespace cuda_emu

cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (!s) return set_err(cudaErrorStreamCaptureUnsupported);   /* the legacy stream */
    if (s->cap) return set_err(cudaErrorIllegalState);
    s->cap = new Capture();
    s->cap->mode = mode;
    s->cap->thread = pthread_self();
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus *st)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (!st) return set_err(cudaErrorInvalidValue);
    *st = !s || !s->cap ? cudaStreamCaptureStatusNone
        : s->cap->invalid != cudaSuccess ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *graph)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    Stream *s = stream_of(h);
    if (!graph) return set_err(cudaErrorInvalidValue);
    *graph = nullptr;
    if (!s || !s->cap) return set_err(cudaErrorStreamCaptureUnmatched);
    Capture *c = s->cap;
    if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self()))
        return set_err(cudaErrorStreamCaptureWrongThread);
    s->cap = nullptr;
    cudaError_t r = c->invalid == cudaSuccess ? cudaSuccess : cudaErrorStreamCaptureInvalidated;
    if (r == cudaSuccess) *graph = (cudaGraph_t) new GraphOps{ std::move(c->ops) };
    delete c;
    return set_err(r);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    if (!exec || !graph) return set_err(cudaErrorInvalidValue);
    *exec = (cudaGraphExec_t) new GraphOps(*(GraphOps *)graph);   /* a copy: the graph may be destroyed */
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    return cudaGraphInstantiate(exec, graph, flags);
}

/* the captured operations again, as captured */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    if (!exec) return set_err(cudaErrorInvalidValue);
    Stream *s = stream_of(h);
    if (s && s->cap) fail("cudaGraphLaunch into a capture: not emulated");
    n_graph_launches++;
    replaying = true;
    for (const Op &op : ((GraphOps *)exec)->ops) submit(h, Op{ op.run, nullptr, nullptr, nullptr, false, op.what, {} });
    replaying = false;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete (GraphOps *)exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete (GraphOps *)graph;
    return cudaSuccess;
}

/* the work the host has submitted to streams (kernel launches, library
 * calls, async copies and memsets, collectives; captured ones included),
 * the graphs it launched, and the operations those launches queued: a
 * step's host launches are the first two */
extern "C" void cuda_emu_work_counts(long *submits, long *graph_launches, long *replayed)
{
    std::lock_guard<std::recursive_mutex> g(Q.mu);
    *submits = n_submits;
    *graph_launches = n_graph_launches;
    *replayed = n_replayed;
}
