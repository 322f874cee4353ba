/* nvcuda::wmma for the CUDA emulator (included by emu.h): the warp matrix
 * functions of the CUDA C++ Programming Guide ("Warp Matrix Functions"),
 * shape m16n16k16 only, matrix_a/matrix_b of __half or __nv_bfloat16 and
 * float accumulators, which is what the kernels of cuda/ use.
 *
 * The guide's preconditions, each checked (exit 99, the kernel named):
 *  - load_matrix_sync, store_matrix_sync and mma_sync are warp-collective:
 *    "must be called by all threads in the warp", with the same mptr, ldm,
 *    layout and template parameters in every lane.  They meet at a warp
 *    rendezvous (OP_WMMA_* of emu.cc's warp operations), which reports a
 *    lane that never arrives or arrives elsewhere; the collective then
 *    compares the lanes' arguments;
 *  - mptr "must be a 256-bit aligned pointer" (32 bytes) and ldm "a
 *    multiple of 8 for __half element type or multiple of 4 for float"
 *    (16 bytes either way);
 *  - each element's load or store goes through rule ACCESS and the byte
 *    counter as ld()/st() do (shared memory is checked, not counted).
 *
 * "The mapping of matrix elements into fragment internal storage is
 * unspecified": here each lane holds 8 elements of the 16 x 16 tile,
 * scattered by a permutation that differs between matrix_a, matrix_b and
 * the accumulator, so code that reads x[i] as a given row or column, or
 * moves an accumulator's x[] into a matrix_a fragment, gets wrong results,
 * while elementwise work on every x[i] (scaling, fill) stays right.
 * After the rendezvous each lane loads or stores its own elements, as a
 * GPU's lanes do: a lane that reads what another lane's store_matrix_sync
 * wrote, without a __syncwarp() between, can read it unwritten.
 *
 * mma_sync: D = A B + C with exact products (bf16 and fp16 products are
 * exact in fp32) summed in fp32, k ascending, each add rounded to nearest.
 * A tensor core sums in its own order and grouping, and may not round
 * each add (it may align the addends to the largest and truncate), so a
 * GPU's result can differ in the last bits: the tests' tolerances are in
 * units of the storage type's rounding, far above that. */
#ifndef CUDA_EMU_WMMA_H
#define CUDA_EMU_WMMA_H

#include <type_traits>

namespace cuda_emu {

/* one lane's arguments of a warp matrix function, passed to the warp
 * rendezvous by address; run is called once, when all 32 lanes arrived */
struct WmmaReq {
    void (*run)(WmmaReq *const *lanes, const char *what);
    const void *ptr;
    unsigned ldm;
    int layout, elem;   /* row (0) or column (1) major; element bytes */
    void *d;
    const void *a, *b, *c;
    const char *file;
    int line;
};
/* the rendezvous (emu.cc): every lane of the warp, at one call site */
void wmma_meet(int op, WmmaReq *r);
/* run: the lanes' pointer, ldm and layout agree and meet the guide's rules */
void wmma_check_args(WmmaReq *const *lanes, const char *what);
/* an element's access: counted (device memory) and checked (rule ACCESS) */
void wmma_access(const void *p, size_t n, bool write);

/* lane `lane`'s element i of a fragment of kind u (0 matrix_a, 1 matrix_b,
 * 2 accumulator): its row * 16 + column in the tile (odd multipliers, so
 * each kind's map is a permutation of 0..255) */
inline int wmma_slot(int u, int lane, int i)
{
    static const int mul[3] = { 167, 91, 205 }, add[3] = { 89, 13, 57 };
    return ((lane * 8 + i) * mul[u] + add[u]) & 255;
}

} // namespace cuda_emu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int m, int n, int k, typename T, typename Layout = void> class fragment {
    static_assert(m == 16 && n == 16 && k == 16, "the emulator's wmma has the shape m16n16k16 only");
    static_assert(std::is_same<Use, accumulator>::value
                      ? std::is_same<T, float>::value && std::is_void<Layout>::value
                      : (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) &&
                            (std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value),
                  "the emulator's wmma: matrix_a/b of __half or __nv_bfloat16 (row_major or col_major), "
                  "float accumulators");

  public:
    enum { num_elements = 8 };
    T x[num_elements];
    static constexpr int kind = std::is_same<Use, matrix_a>::value ? 0 : std::is_same<Use, matrix_b>::value ? 1 : 2;
};

template <typename Use, typename T, typename L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, const T &v)
{
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;   /* per lane, no rendezvous (as on a GPU) */
}

/* element (r, c) of a tile at p: row major p[r * ldm + c], else p[c * ldm + r] */
template <typename T> inline T *wmma_at(T *p, unsigned ldm, int col_major, int r, int c)
{
    return col_major ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c;
}

template <typename F, typename T>
inline void wmma_load(F &f, const T *p, unsigned ldm, int col_major, const char *file, int line)
{
    cuda_emu::WmmaReq q = { cuda_emu::wmma_check_args, p, ldm, col_major, (int)sizeof(T), &f, 0, 0, 0, file, line };
    cuda_emu::wmma_meet(cuda_emu::OP_WMMA_LOAD, &q);
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
    for (int i = 0; i < f.num_elements; i++) {
        int s = cuda_emu::wmma_slot(F::kind, lane, i);
        const T *e = wmma_at(p, ldm, col_major, s / 16, s % 16);
        cuda_emu::wmma_access(e, sizeof(T), false);
        f.x[i] = *e;
    }
}

template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm,
                             const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    wmma_load(f, p, ldm, std::is_same<L, col_major>::value, file, line);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm, layout_t l,
                             const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    wmma_load(f, p, ldm, l == mem_col_major, file, line);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t l,
                              const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    cuda_emu::WmmaReq q = { cuda_emu::wmma_check_args, p, ldm, l == mem_col_major, 4, 0, &f, 0, 0, file, line };
    cuda_emu::wmma_meet(cuda_emu::OP_WMMA_STORE, &q);
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
    for (int i = 0; i < f.num_elements; i++) {
        int s = cuda_emu::wmma_slot(2, lane, i);
        float *e = wmma_at(p, ldm, l == mem_col_major, s / 16, s % 16);
        cuda_emu::wmma_access(e, sizeof(float), true);
        *e = f.x[i];
    }
}

inline float to_float_(__half v) { return __half2float(v); }
inline float to_float_(__nv_bfloat16 v) { return __bfloat162float(v); }

/* the collective of mma_sync: the tiles gathered from all lanes' fragments
 * (their registers, which no lane changes while it waits), D computed
 * once and each lane's part of it written to its d */
template <typename A, typename B> void wmma_mma_run(cuda_emu::WmmaReq *const *lanes, const char *)
{
    float ta[256], tb[256], tc[256];
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 8; i++) {
            ta[cuda_emu::wmma_slot(0, l, i)] = to_float_(((const A *)lanes[l]->a)->x[i]);
            tb[cuda_emu::wmma_slot(1, l, i)] = to_float_(((const B *)lanes[l]->b)->x[i]);
            tc[cuda_emu::wmma_slot(2, l, i)] = ((const fragment<accumulator, 16, 16, 16, float> *)lanes[l]->c)->x[i];
        }
    float td[256];
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float acc = tc[r * 16 + c];
            for (int k = 0; k < 16; k++) acc += ta[r * 16 + k] * tb[k * 16 + c];   /* exact product */
            td[r * 16 + c] = acc;
        }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 8; i++)
            ((fragment<accumulator, 16, 16, 16, float> *)lanes[l]->d)->x[i] = td[cuda_emu::wmma_slot(2, l, i)];
}

template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c,
                     bool satf = false, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    if (satf) cuda_emu::fail("wmma::mma_sync at %s:%d: satf is for __half accumulators, not float", file, line);
    cuda_emu::WmmaReq q = { wmma_mma_run<fragment<matrix_a, 16, 16, 16, T, LA>, fragment<matrix_b, 16, 16, 16, T, LB>>,
                            0, 0, 0, 0, &d, &a, &b, &c, file, line };
    cuda_emu::wmma_meet(cuda_emu::OP_WMMA_MMA, &q);
}

} // namespace wmma
} // namespace nvcuda

#endif
