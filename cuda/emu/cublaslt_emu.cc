/* cuBLASLt for the CUDA emulator: the calls the backend uses (cuda/gemm.cuh
 * linear_bias), compiled against the real cublasLt.h, computed with
 * OpenBLAS through the helpers cublas_emu.cc uses (blas_common.h).
 *
 * Semantics (cublasLt.h, cublasLtMatmul and cublasLtEpilogue_t):
 *   D = epilogue(alpha * op(A) op(B) + beta * C), column-major, m x n with
 *   m, n the rows and columns of D's layout; CUBLASLT_EPILOGUE_BIAS adds a
 *   packed vector of m elements to every column "before applying final
 *   postprocessing", RELU_BIAS then takes max(x, 0).  The bias vector has
 *   D's element type unless CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE names
 *   another; for the real-type kernels here the header allows only Dtype
 *   (the exceptions are IMMA and fp8 kernels), so any other type is
 *   NOT_SUPPORTED.  The header does not say in which precision the bias
 *   is added: an H200 with cuBLAS 13.0 (make gpu-accept, 2026-11-26) gave
 *   a 16-bit D errors up to half a 16-bit unit of the product where the
 *   bias cancels it, as if the product were rounded to D's type first.
 *   The emulator does that for a 16-bit D (the less accurate reading, so
 *   that a tolerance that assumes one rounding fails here too) and adds
 *   the widened bias in fp32 to the fp32 accumulator for an fp32 D.
 * RELU_AUX(_BIAS) also write the ReLU bit-mask (aux: a bit per element of
 * D, set where the value before the ReLU is > 0, ld in bits); DRELU keeps
 * the product where the mask bit is set and writes 0 elsewhere.
 * Argument checks: a null handle is NOT_INITIALIZED; null descriptors or
 * scalars, shapes that do not chain (op(A) m x k, op(B) k x n, C and D
 * m x n), a leading dimension below the rows of its layout, a bias epilogue
 * without a bias pointer, an aux epilogue without a mask or with a mask ld
 * that is not a multiple of 128 or below m, and attribute buffers of the
 * wrong size are INVALID_VALUE; type combinations outside the cublasGemmEx
 * table (types_supported), C and D of different types, a scale type other
 * than CUDA_R_32F and the epilogues not implemented here (GELU, BGRAD) are
 * NOT_SUPPORTED.  A 16-bit D needs a preference that excludes
 * CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE (split-K partials reduced in 16
 * bits), else the heuristic query is reported as a misuse, as
 * cublas_emu.cc does for the handle's math mode; so is a matmul whose
 * operands are less aligned than the preference told the heuristic (256
 * bytes by default), which a GPU may fail on. */
#include "blas_common.h"

#include <cblas.h>
#include <cublasLt.h>

struct cublasLtContext {
    int unused;
};

namespace {
struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct Desc {
    cublasComputeType_t ct;
    cudaDataType_t scale;
    int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int32_t bias_type = -1;
    void *aux = nullptr;
    int64_t aux_ld = 0;
};
struct Pref {
    uint64_t workspace = 0;
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_MASK;
    uint32_t align[4] = { 256, 256, 256, 256 };   /* A, B, C, D: the header's default */
};
const uint64_t ALGO_TAG = 0x4c74456d75ull;   /* "LtEmu": an algo this emulator returned */

Layout *L(cublasLtMatrixLayout_t p) { return reinterpret_cast<Layout *>(p); }
Desc *D(cublasLtMatmulDesc_t p) { return reinterpret_cast<Desc *>(p); }
Pref *P(cublasLtMatmulPreference_t p) { return reinterpret_cast<Pref *>(p); }

/* copy an attribute of exactly sizeof(T) bytes (cublasLt.h: INVALID_VALUE
 * when buf is NULL or sizeInBytes does not match the attribute's storage) */
template <class T> cublasStatus_t set(T &dst, const void *buf, size_t n)
{
    if (!buf || n != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&dst, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(uint32_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) != 0; }
bool has_aux(uint32_t e) { return (e & 128) != 0; }   /* RELU_AUX, RELU_AUX_BIAS, DRELU (cublasLt.h) */
bool is_drelu(uint32_t e) { return e == CUBLASLT_EPILOGUE_DRELU; }
} // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { return handle_create(h, cublasLtContext{ 0 }); }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { return handle_destroy(h); }

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *m, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    if (!m) return CUBLAS_STATUS_INVALID_VALUE;
    *m = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{ type, rows, cols, ld });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t m)
{
    delete L(m);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t scale)
{
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    Desc *x = new Desc;
    x->ct = ct;
    x->scale = scale;
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(x);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete D(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n)
{
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    Desc *x = D(d);
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(x->ta, buf, n);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(x->tb, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(x->epi, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(x->bias, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(x->bias_type, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(x->aux, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(x->aux_ld, buf, n);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;   /* not implemented by the emulator */
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete P(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n)
{
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return set(P(p)->workspace, buf, n);
    if (a == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK) return set(P(p)->reduction, buf, n);
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return set(P(p)->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, n);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* the checks of the file comment, shared by the heuristic query and the matmul */
static cublasStatus_t check(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, cublasLtMatrixLayout_t a,
                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!dd || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
    const Desc &x = *D(dd);
    const Layout &A = *L(a), &B = *L(b), &C = *L(c), &Dl = *L(d);
    bool op_ok = (x.ta == CUBLAS_OP_N || x.ta == CUBLAS_OP_T) && (x.tb == CUBLAS_OP_N || x.tb == CUBLAS_OP_T);
    if (!op_ok) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m = Dl.rows, n = Dl.cols, k = x.ta == CUBLAS_OP_N ? A.cols : A.rows;
    uint64_t am = x.ta == CUBLAS_OP_N ? A.rows : A.cols;
    uint64_t bk = x.tb == CUBLAS_OP_N ? B.rows : B.cols, bn = x.tb == CUBLAS_OP_N ? B.cols : B.rows;
    if (am != m || bk != k || bn != n || C.rows != m || C.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
    for (const Layout *l : { &A, &B, &C, &Dl })
        if (l->ld < (int64_t)std::max<uint64_t>(l->rows, 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (has_bias(x.epi) && !x.bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (has_aux(x.epi) && (!x.aux || x.aux_ld % 128 != 0 || x.aux_ld < (int64_t)m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!types_supported(A.type, B.type, Dl.type, x.ct) || C.type != Dl.type || x.scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (has_bias(x.epi) && x.bias_type != -1 && x.bias_type != (int32_t)Dl.type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (cuda_emu::cc_refuses_types(A.type, B.type, Dl.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    uint32_t e = x.epi;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_RELU && e != CUBLASLT_EPILOGUE_BIAS
        && e != CUBLASLT_EPILOGUE_RELU_BIAS && e != CUBLASLT_EPILOGUE_RELU_AUX && e != CUBLASLT_EPILOGUE_RELU_AUX_BIAS
        && e != CUBLASLT_EPILOGUE_DRELU)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

/* Strict rules (cuda_emu::strict, docs/testing.md).
 * LT_HEURISTIC: cuBLASLt "does not guarantee the support of all possible
 * sizes and configurations" and the heuristic returns NOT_SUPPORTED "if no
 * heuristic function available" (cublasLt.h): a seeded fraction of distinct
 * plans (CUDA_EMU_LT_REFUSE percent, default 25, seed CUDA_EMU_SEED) gets
 * NOT_SUPPORTED or no result, so that a caller's fallback runs (not in a
 * dry run, whose cost log prices the fused path a GPU has).  Apart from
 * strict, CUDA_EMU_LT_NO_EPILOGUE=1 refuses every plan with an epilogue,
 * =forward those that write D from a bias (BIAS, RELU_BIAS, RELU_AUX_BIAS),
 * =drelu those with DRELU.
 * LT_ALIGN: the bias and ReLU-mask vectors are read and written in 16-byte
 * vectors: a pointer less aligned has no algorithm, and a matmul run on one
 * (a plan reused for another pointer) is a misuse.
 * LT_REDUCTION: INPLACE split-K reduces "using the output buffer (and
 * output data type)" (cublasLt.h), so for a 16-bit D it is as reduced in
 * precision as OUTPUT_TYPE: a preference allowing it is a misuse.
 * LT_WORKSPACE: the workspace of a matmul is at least its algorithm's
 * workspaceSize, in device memory, 256-byte aligned. */
static uint64_t fnv(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    return h;
}

static unsigned long long env_ull(const char *name, unsigned long long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, nullptr, 10) : dflt;
}

/* a hash of everything that defines a plan except the pointers */
static uint64_t plan_hash(const Desc &x, const Layout *const l[4], const Pref &p)
{
    uint64_t h = fnv(0xcbf29ce484222325ull, env_ull("CUDA_EMU_SEED", 1));
    for (uint64_t v : { (uint64_t)x.ct, (uint64_t)x.ta, (uint64_t)x.tb, (uint64_t)x.epi, (uint64_t)x.bias_type })
        h = fnv(h, v);
    for (int i = 0; i < 4; i++) {
        h = fnv(fnv(fnv(fnv(h, (uint64_t)l[i]->type), l[i]->rows), l[i]->cols), (uint64_t)l[i]->ld);
        h = fnv(h, p.align[i]);
    }
    return h;
}

/* LT_HEURISTIC and CUDA_EMU_LT_NO_EPILOGUE: NOT_SUPPORTED, or SUCCESS with
 * *count = 0 (both are documented answers), for a refused plan; -1 if not */
static bool no_epilogue(uint32_t epi)
{
    const char *s = getenv("CUDA_EMU_LT_NO_EPILOGUE");
    if (!s || !*s || !strcmp(s, "0") || epi == CUBLASLT_EPILOGUE_DEFAULT) return false;
    if (!strcmp(s, "forward")) return has_bias(epi);
    if (!strcmp(s, "drelu")) return is_drelu(epi);
    return true;
}

static int refused(const Desc &x, const Layout *const l[4], const Pref &p, int *count)
{
    bool refuse = no_epilogue(x.epi);
    uint64_t h = plan_hash(x, l, p);
    /* (not in a dry run: the cost model prices the GPU's fused path) */
    if (!refuse && !cuda_emu::dry_run && cuda_emu::strict("LT_HEURISTIC")) refuse = (h >> 8) % 100 < env_ull("CUDA_EMU_LT_REFUSE", 25);
    if (!refuse) return -1;
    *count = 0;
    return h & 1 ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}

static bool misaligned16(const void *p) { return ((uintptr_t)p & 15) != 0; }

/* LT_ALIGN: the epilogue vectors an algorithm reads or writes */
static bool vectors_misaligned(const Desc &x)
{
    return cuda_emu::strict("LT_ALIGN")
        && ((has_bias(x.epi) && misaligned16(x.bias)) || (has_aux(x.epi) && misaligned16(x.aux)));
}

/* the workspace the emulated algorithm asks for: up to 1 MiB of what the
 * preference allows, so that a caller must pass one */
static uint64_t algo_workspace(const Pref &p) { return std::min<uint64_t>(p.workspace, 1u << 20) / 256 * 256; }

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t results[], int *count)
{
    if (!pref || requested <= 0 || !results || !count) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = check(h, dd, a, b, c, d);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (is16(L(d)->type) && (P(pref)->reduction & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE))
        cuda_emu::fail("cublasLtMatmulAlgoGetHeuristic: 16-bit D with a preference that allows "
                       "CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE: split-K partials may be reduced in 16 bits");
    if (is16(L(d)->type) && (P(pref)->reduction & CUBLASLT_REDUCTION_SCHEME_INPLACE) && cuda_emu::strict("LT_REDUCTION"))
        cuda_emu::fail("cublasLtMatmulAlgoGetHeuristic: 16-bit D with a preference that allows "
                       "CUBLASLT_REDUCTION_SCHEME_INPLACE: split-K partials reduced in the output type (cublasLt.h)");
    const Layout *l[4] = { L(a), L(b), L(c), L(d) };
    int r = refused(*D(dd), l, *P(pref), count);
    if (r >= 0) return (cublasStatus_t)r;
    if (vectors_misaligned(*D(dd))) return CUBLAS_STATUS_NOT_SUPPORTED;
    std::memset(&results[0], 0, sizeof results[0]);
    /* the algorithm may assume the preference's alignments (cublasLt.h:
     * "exclude algorithms that can not work with matrix A that is not as
     * strictly aligned as they need"): cublasLtMatmul checks them */
    results[0].algo.data[0] = ALGO_TAG;
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = P(pref)->align[i];
    results[0].workspaceSize = algo_workspace(*P(pref));
    results[0].algo.data[5] = results[0].workspaceSize;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* bytes of one column of the ReLU bit-mask and the mask's ld in bytes:
 * bit r of column j is bit (r + j * aux_ld) of the buffer (the layout is
 * cuBLASLt's own business: only its DRELU reads what RELU_AUX wrote) */
static size_t mask_col_bytes(uint64_t m) { return (size_t)((m + 7) / 8); }

/* the bytes of one matmul for the cost model: A, B, C when beta != 0, the
 * bias vector and a DRELU's mask read; D and a RELU_AUX's mask written */
static void count(const Desc &x, const Layout &A, const void *a, const Layout &B, const void *b, const Layout &C,
                  const void *c, bool read_c, const Layout &Dl, void *d)
{
    Runs reads, writes;
    reads.add(a, (int)A.rows, (int)A.cols, (int)A.ld, elem_size(A.type));
    reads.add(b, (int)B.rows, (int)B.cols, (int)B.ld, elem_size(B.type));
    if (read_c) reads.add(c, (int)C.rows, (int)C.cols, (int)C.ld, elem_size(C.type));
    if (has_bias(x.epi)) reads.add(x.bias, (int)Dl.rows, 1, (int)Dl.rows, elem_size(Dl.type));
    if (has_aux(x.epi)) {
        Runs &r = is_drelu(x.epi) ? reads : writes;
        r.add(x.aux, (int)mask_col_bytes(Dl.rows), (int)Dl.cols, (int)(x.aux_ld / 8), 1);
    }
    writes.add(d, (int)Dl.rows, (int)Dl.cols, (int)Dl.ld, elem_size(Dl.type));
    cuda_emu::report("cublasLtMatmul", reads.distinct(), writes.distinct(), reads.all, writes.all);
}

/* D = epilogue(acc) in fp32, rounded into D's type: + bias (to the
 * product rounded to a 16-bit D's type first: see the top), then ReLU
 * (its mask: where the biased value is > 0), or DRELU: acc kept where the
 * forward's mask bit is set, else 0 */
static void epilogue_store(const Desc &x, const Layout &Dl, std::vector<float> &acc, void *d)
{
    std::vector<float> bias;
    if (has_bias(x.epi)) widen(bias, x.bias, Dl.type, Dl.rows);
    bool relu = (x.epi & CUBLASLT_EPILOGUE_RELU) != 0, aux = has_aux(x.epi), drelu = is_drelu(x.epi);
    uint8_t *mask = (uint8_t *)x.aux;
    bool narrow = Dl.type != CUDA_R_32F;
    for (uint64_t j = 0; j < Dl.cols; j++)
        for (uint64_t r = 0; r < Dl.rows; r++) {
            size_t i = j * (size_t)Dl.ld + r, bit = j * (size_t)x.aux_ld + r;
            float v = bias.empty() ? acc[i] : (narrow ? round_as(Dl.type, acc[i]) : acc[i]) + bias[r];
            if (drelu) v = (mask[bit / 8] >> (bit % 8)) & 1 ? v : 0.0f;
            if (relu && aux) mask[bit / 8] = (uint8_t)((mask[bit / 8] & ~(1u << (bit % 8))) | (v > 0.0f) << (bit % 8));
            if (relu) v = v > 0.0f ? v : 0.0f;
            store_as(d, Dl.type, i, v);
        }
}

/* the alignments the algorithm was chosen for (cublasLtMatmulAlgoGetHeuristic) */
static void check_alignment(const cublasLtMatmulAlgo_t *algo, const void *const p[4])
{
    static const char name[] = "ABCD";
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)p[i] % algo->data[1 + i])
            cuda_emu::fail("cublasLtMatmul: matrix %c at %p is not aligned to the %llu bytes its algorithm was chosen "
                           "for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES): cuBLASLt may fail or compute garbage",
                           name[i], p[i], (unsigned long long)algo->data[1 + i], name[i]);
}

/* LT_ALIGN and LT_WORKSPACE at the matmul */
static void check_strict(const Desc &x, const cublasLtMatmulAlgo_t *algo, const void *ws, size_t ws_bytes)
{
    if (vectors_misaligned(x))
        cuda_emu::fail("cublasLtMatmul: epilogue %u with bias %p / ReLU mask %p not 16-byte aligned: its algorithm "
                       "reads them in 16-byte vectors", x.epi, x.bias, x.aux);
    if (!algo || !cuda_emu::strict("LT_WORKSPACE")) return;
    size_t need = (size_t)algo->data[5];
    if (ws_bytes < need)
        cuda_emu::fail("cublasLtMatmul: workspace of %zu bytes for an algorithm that needs %zu (workspaceSize)",
                       ws_bytes, need);
    if ((uintptr_t)ws % 256)
        cuda_emu::fail("cublasLtMatmul: workspace %p not 256-byte aligned", ws);
    if (ws_bytes && !cuda_emu::is_device_range(ws, ws_bytes))
        cuda_emu::fail("cublasLtMatmul: workspace %p (+%zu bytes) is not inside one device allocation", ws, ws_bytes);
}

/* every operand inside one device allocation */
static void check_operands(const Desc &x, const Layout &A, const void *a, const Layout &B, const void *b,
                           const Layout &C, const void *c, const Layout &Dl, void *d)
{
    const char *fn = "cublasLtMatmul";
    check_mem(a, extent((int)A.rows, (int)A.cols, (int)A.ld) * elem_size(A.type), fn, "A");
    check_mem(b, extent((int)B.rows, (int)B.cols, (int)B.ld) * elem_size(B.type), fn, "B");
    check_mem(c, extent((int)C.rows, (int)C.cols, (int)C.ld) * elem_size(C.type), fn, "C");
    check_mem(d, extent((int)Dl.rows, (int)Dl.cols, (int)Dl.ld) * elem_size(Dl.type), fn, "D");
    if (has_bias(x.epi)) check_mem(x.bias, (size_t)Dl.rows * elem_size(Dl.type), fn, "bias");
    size_t mask = extent((int)mask_col_bytes(Dl.rows), (int)Dl.cols, (int)(x.aux_ld / 8));
    if (has_aux(x.epi)) check_mem(x.aux, mask, fn, "ReLU mask (aux)");
}

/* the operands' ranges, for the emulator's race check (rule RACE) */
static void track(const Desc &x, const Layout &A, const void *a, const Layout &B, const void *b, const Layout &C,
                  const void *c, const Layout &Dl, void *d)
{
    cuda_emu::access(a, extent((int)A.rows, (int)A.cols, (int)A.ld) * elem_size(A.type), false);
    cuda_emu::access(b, extent((int)B.rows, (int)B.cols, (int)B.ld) * elem_size(B.type), false);
    cuda_emu::access(c, extent((int)C.rows, (int)C.cols, (int)C.ld) * elem_size(C.type), false);
    cuda_emu::access(d, extent((int)Dl.rows, (int)Dl.cols, (int)Dl.ld) * elem_size(Dl.type), true);
    if (has_bias(x.epi)) cuda_emu::access(x.bias, (size_t)Dl.rows * elem_size(Dl.type), false);
    if (has_aux(x.epi))
        cuda_emu::access(x.aux, extent((int)mask_col_bytes(Dl.rows), (int)Dl.cols, (int)(x.aux_ld / 8)),
                         x.epi == CUBLASLT_EPILOGUE_RELU_AUX || x.epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t ad, const void *b, cublasLtMatrixLayout_t bd, const void *beta,
                              const void *c, cublasLtMatrixLayout_t cd, void *d, cublasLtMatrixLayout_t ddl,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t ws_bytes, cudaStream_t stream)
{
    cublasStatus_t s = check(h, dd, ad, bd, cd, ddl);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!alpha || !beta || (algo && algo->data[0] != ALGO_TAG)) return CUBLAS_STATUS_INVALID_VALUE;
    const Desc &x = *D(dd);
    const Layout &A = *L(ad), &B = *L(bd), &C = *L(cd), &Dl = *L(ddl);
    int m = (int)Dl.rows, n = (int)Dl.cols, k = (int)(x.ta == CUBLAS_OP_N ? A.cols : A.rows);
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (cuda_emu::dry_run) {
        cuda_emu::dry_submit();
        cuda_emu::report("cublasLtMatmul", 0, 0, 0, 0);
        return CUBLAS_STATUS_SUCCESS;
    }
    const void *ptrs[4] = { a, b, c, d };
    if (algo) check_alignment(algo, ptrs);
    check_strict(x, algo, workspace, ws_bytes);
    check_operands(x, A, a, B, b, C, c, Dl, d);
    /* the scalars are read now (host pointer mode), the descriptors copied
     * (the caller may destroy them), the matrices read when the stream gets
     * to the call */
    float al = *(const float *)alpha, be = *(const float *)beta;
    cuda_emu::enqueue(stream, "cublasLtMatmul", [=, x = x, A = A, B = B, C = C, Dl = Dl] {
        if (cuda_emu::tracking) track(x, A, a, B, b, C, c, Dl, d);
        /* the accumulator, laid out like D: beta * C, then + alpha op(A) op(B) */
        std::vector<float> acc(extent(m, n, (int)Dl.ld), 0.0f), ra, rb, rc;
        if (be != 0.0f) {
            widen(rc, c, C.type, extent(m, n, (int)C.ld));
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++) acc[(size_t)j * Dl.ld + r] = be * rc[(size_t)j * C.ld + r];
        }
        /* no handle math mode in cuBLASLt: the compute type alone says TF32 */
        if (k > 0)
            sgemm_widened(x.ta == CUBLAS_OP_N, x.tb == CUBLAS_OP_N, m, n, k, al, a, A.type, (int)A.ld,
                          extent((int)A.rows, (int)A.cols, (int)A.ld), b, B.type, (int)B.ld,
                          extent((int)B.rows, (int)B.cols, (int)B.ld), input_drop_bits(x.ct, false), 1.0f, acc.data(),
                          (int)Dl.ld, ra, rb);
        epilogue_store(x, Dl, acc, d);
        if (cuda_emu::counting) count(x, A, a, B, b, C, c, be != 0.0f, Dl, d);
    });
    return CUBLAS_STATUS_SUCCESS;
}
