/* Every op of the CUDA backend (cuda/ops_cuda.cu, run by the CPU emulator of
 * cuda/emu/) against the CPU reference (src/ops_cpu.c), on shapes that are
 * not multiples of any block size, with dropout on, under the three thread
 * orders of the emulator (forward, reverse, random): a kernel that depends
 * on the order threads run between barriers fails under one of them.
 * fp32 within a tight relative tolerance (only the order of float
 * summation differs); the tf32 and bf16 GEMM paths within their rounding.
 * Then every op again with precision=bf16 storage, and with precision=fp16
 * (test_lowp_ops below: the same tests, tolerances in units of the type's
 * rounding). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../cuda/cost.h"   /* launch grids (check_embed_gpu), which kernels ran (fa_kernels_were) */
#include "attention.h"
#include "ops.h"
#include "util.h"   /* now_seconds: the sync subset's parts timed */

#include <cublas_v2.h>   /* the type-combination checks of test_cublas_types */
#include <cublasLt.h>    /* the argument checks of test_cublaslt_args */

/* the CUDA backend of precision prec, named as the config key names it
 * ("fp32", "bf16", ...: the checks loop over and print these names), with
 * the ReLU bit-mask on (TRANSFORMER_RELU_MASK=1): the feed-forward checks
 * pass a mask or none, so both backward paths run */
static Backend *cuda_backend(const char *prec)
{
    setenv("TRANSFORMER_RELU_MASK", "1", 1);
    return backend_cuda_create((Precision)config_choice_value("precision", prec), ALLREDUCE_AUTO, 0);
}
/* the emulator's thread-order switch; absent (NULL) in the real-GPU build of
 * this test (make gpu-test) */
int cuda_emu_set_order(const char *spec) __attribute__((weak));
static void set_order(const char *spec)
{
    if (cuda_emu_set_order) cuda_emu_set_order(spec);
}
/* the emulator's cap on the grids of the elementwise kernels (cuda/common.cuh
 * nblocks; 1M blocks on a GPU), lowered to 2 blocks of 256 threads for the
 * whole test: every shape here is larger, so a capped kernel that is not a
 * grid-stride loop leaves elements unwritten */
void cuda_emu_set_grid_cap(long blocks) __attribute__((weak));

#ifdef __SANITIZE_ADDRESS__
/* OpenMP and OpenBLAS keep thread pools alive at exit */
const char *__asan_default_options(void) { return "detect_leaks=0"; }
#endif

static Backend *cpu, *gpu;
static int failures, checks;
static const char *order_name = "";
#ifdef CUDA_TEST_TSAN
int cuda_emu_set_backend(const char *name);
#endif

static uint64_t rng = 88172645463325252ull;
static float frand(void)   /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rand_host(size_t n, float scale)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = scale * frand();
    return h;
}

/* the same host data on both backends, as typed views (fp32 unless made
 * with pair_bf); F() is the fp32 memory of a view, for the arguments the ops
 * take as float * (parameters, gradients, statistics, losses) */
typedef struct { Act c, g; size_t n; } Pair;
#define F(a) ((float *)(a).data)
static Pair pair_from(const float *h, size_t n)
{
    Pair p = { act_f32(cpu->alloc(cpu, 4 * n)), act_f32(gpu->alloc(gpu, 4 * n)), n };
    cpu->upload_act(cpu, p.c, h, n);
    gpu->upload_act(gpu, p.g, h, n);
    return p;
}
static Pair pair_rand(size_t n, float scale)
{
    float *h = rand_host(n, scale);
    Pair p = pair_from(h, n);
    free(h);
    return p;
}
static void *dev_copy(Backend *be, const void *h, size_t bytes)
{
    void *d = be->alloc(be, bytes);
    be->upload(be, d, h, bytes);
    return d;
}
static void pair_free(Pair p) { cpu->free(cpu, p.c.data); gpu->free(gpu, p.g.data); }

/* |gpu - cpu| <= rtol*mag + atol*max|cpu| for every element, mag = |cpu|
 * (compare: bias NULL), or with a bias, |cpu| + (|cpu| + |bias of its
 * column|): the result's rounding and that of the product before the
 * bias, |product| = |cpu - bias| <= |cpu| + |bias| */
static void compare_biased(const char *what, Pair p, const float *bias, int cols, double rtol, double atol)
{
    float *a = malloc(4 * p.n), *b = malloc(4 * p.n);
    cpu->download_act(cpu, a, p.c, p.n);
    gpu->download_act(gpu, b, p.g, p.n);
    double mx = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < p.n; i++) mx = fmax(mx, fabs(a[i]));
    int bad = 0;
    for (size_t i = 0; i < p.n; i++) {
        double mag = fabs(a[i]) + (bias ? fabs(a[i]) + fabs(bias[i % (size_t)cols]) : 0.0);
        double e = fabs((double)a[i] - b[i]), lim = rtol * mag + atol * mx + 1e-30;
        if (!(e <= lim)) bad++;
        if (!(e / lim <= worst)) { worst = e / lim; wi = i; }
    }
    checks++;
    if (bad) {
        failures++;
        printf("FAIL [%s] %s: %d of %zu elements off; worst [%zu] cpu %.9g cuda %.9g\n", order_name, what, bad, p.n, wi,
               a[wi], b[wi]);
    } else {
        printf("ok   [%s] %-44s max|ref| %.3g  worst err/tol %.3f\n", order_name, what, mx, worst);
    }
    free(a);
    free(b);
}
static void compare(const char *what, Pair p, double rtol, double atol) { compare_biased(what, p, NULL, 1, rtol, atol); }

#define FP32 1e-5, 1e-6

static void test_gemm(void)
{
    int M = 37, N = 45, K = 29;
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++) {
            int lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 1, ldc = N + 2;
            Pair A = pair_rand((size_t)(tA ? K : M) * lda, 1), B = pair_rand((size_t)(tB ? N : K) * ldb, 1);
            Pair C = pair_rand((size_t)M * ldc, 1);
            cpu->gemm(cpu, tA, tB, M, N, K, 0.7f, A.c, lda, B.c, ldb, 0.3f, C.c, ldc);
            gpu->gemm(gpu, tA, tB, M, N, K, 0.7f, A.g, lda, B.g, ldb, 0.3f, C.g, ldc);
            char name[64];
            snprintf(name, sizeof name, "gemm tA=%d tB=%d", tA, tB);
            compare(name, C, FP32);
            pair_free(A); pair_free(B); pair_free(C);
        }
}

static void test_gemm_batched_shape(int nb, int h, int bf16);

static void test_gemm_batched(void)
{
    test_gemm_batched_shape(3, 4, 0);   /* fewer sentences than heads */
    test_gemm_batched_shape(5, 2, 0);   /* more sentences than heads */
    test_gemm_batched_shape(4, 1, 0);   /* one head */
    test_gemm_batched_shape(67, 3, 0);  /* pointer arrays beyond one 256-thread block, grown once */
}

/* a backend of precision prec; NULL after a "skip" line where a real GPU
 * refuses it (bf16 and tf32 below sm_80: the backend said why), a
 * failure under the emulator, which runs every precision */
static Backend *lowp_backend(const char *prec)
{
    Backend *b = cuda_backend(prec);
    if (!b && cuda_emu_set_order) failures++;
    else if (!b) printf("skip precision=%s: not available on this GPU\n", prec);
    return b;
}

static void test_gemm_lowp(const char *prec, double rtol, double atol)
{
    Backend *g = lowp_backend(prec), *save = gpu;
    if (!g) return;
    gpu = g;
    int M = 33, N = 17, K = 300;
    Pair A = pair_rand((size_t)M * K, 1), B = pair_rand((size_t)N * K, 1), C = pair_rand((size_t)M * N, 1);
    cpu->gemm(cpu, 0, 1, M, N, K, 1.0f, A.c, K, B.c, K, 0.0f, C.c, N);
    gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, A.g, K, B.g, K, 0.0f, C.g, N);
    char name[64];
    snprintf(name, sizeof name, "gemm precision=%s", prec);
    compare(name, C, rtol, atol);
    pair_free(A); pair_free(B); pair_free(C);
    gpu = save;
    g->destroy(g);
}

static void test_bias(void)
{
    /* > 256 rows: two row chunks; > 32 x 256 rows: the column sums' lanes
     * each add several chunks */
    int shapes[2][2] = { { 300, 45 }, { 9000, 13 } };
    for (int t = 0; t < 4; t++) {
        int relu = t & 1, rows = shapes[t / 2][0], cols = shapes[t / 2][1];
        Pair Y = pair_rand((size_t)rows * cols, 1), b = pair_rand(cols, 0.5f);
        cpu->bias_forward(cpu, Y.c, F(b.c), rows, cols, relu);
        gpu->bias_forward(gpu, Y.g, F(b.g), rows, cols, relu);
        compare(relu ? "bias_forward relu" : "bias_forward", Y, 0, 0);
        Pair dY = pair_rand((size_t)rows * cols, 1), db = pair_rand(cols, 1);
        float *ref = malloc(sizeof(float) * cols), *h = malloc(sizeof(float) * rows * cols);
        cpu->download_act(cpu, ref, db.c, cols);
        cpu->bias_backward(cpu, dY.c, F(db.c), Y.c, rows, cols, relu);
        gpu->bias_backward(gpu, dY.g, F(db.g), Y.g, rows, cols, relu);
        compare(relu ? "bias_backward relu: dY masked" : "bias_backward: dY", dY, 0, 0);
        /* dbias against its sum in double, not the CPU's: the CPU adds the
         * rows one after the other in fp32, whose rounding (a random walk)
         * over 9000 rows of [-1, 1) reached 6.3e-6 of max|dbias| (rms
         * 9e-7) in 3000 simulated data sets, beyond FP32's 1e-6; its bound
         * n 2^-24 sum|x| is 5e-2 of max.  The GPU's chunked sums (serial
         * chains of at most 32 + 8 + 2 + 5 adds) stayed within 0.25 of
         * FP32's tolerance of the double sum there; a lost or doubled row
         * is O(1) */
        cpu->download_act(cpu, h, dY.c, (size_t)rows * cols);   /* masked */
        for (int c = 0; c < cols; c++) {
            double s = ref[c];
            for (int r = 0; r < rows; r++) s += h[(size_t)r * cols + c];
            ref[c] = (float)s;
        }
        cpu->upload_act(cpu, db.c, ref, cols);
        compare(relu ? "bias_backward relu: dbias (vs double)" : "bias_backward: dbias (vs double)", db, FP32);
        free(ref); free(h);
        pair_free(Y); pair_free(b); pair_free(dY); pair_free(db);
    }
}

/* The fused feed-forward ops (cuBLASLt epilogues on CUDA) against the
 * CPU's unfused sequences: the forward with and without ReLU, keeping the
 * ReLU mask or not, then the backward through that ReLU into the next
 * linear map (W2 [in2, in] here), from the mask or unfused. */
static void test_linear_bias(void)
{
    int rows = 37, in = 29, out = 45, in2 = 23;
    char name[96];
    for (int t = 0; t < 3; t++) {
        int relu = t > 0, keep = t == 2;
        Pair X = pair_rand((size_t)rows * in, 1), W = pair_rand((size_t)out * in, 1), b = pair_rand(out, 0.5f);
        Pair Y = pair_rand((size_t)rows * out, 1);
        void *mask = keep ? gpu->alloc(gpu, gpu->relu_mask_bytes(gpu, rows, out)) : NULL;
        cpu->linear_bias_forward(cpu, Y.c, X.c, W.c, F(b.c), rows, in, out, relu, NULL);
        gpu->linear_bias_forward(gpu, Y.g, X.g, W.g, F(b.g), rows, in, out, relu, mask);
        snprintf(name, sizeof name, "linear_bias_forward%s%s", relu ? " relu" : "", keep ? ", mask kept" : "");
        compare(name, Y, FP32);
        if (relu) {
            Pair dZ = pair_rand((size_t)rows * in2, 1), W2 = pair_rand((size_t)in2 * out, 1);
            Pair dY = pair_rand((size_t)rows * out, 1), db = pair_rand(out, 1);
            cpu->linear_relu_backward(cpu, dY.c, F(db.c), dZ.c, W2.c, Y.c, NULL, rows, out, in2);
            gpu->linear_relu_backward(gpu, dY.g, F(db.g), dZ.g, W2.g, Y.g, mask, rows, out, in2);
            snprintf(name, sizeof name, "linear_relu_backward%s: dX", keep ? " (mask)" : "");
            compare(name, dY, FP32);
            snprintf(name, sizeof name, "linear_relu_backward%s: dbias", keep ? " (mask)" : "");
            compare(name, db, FP32);
            pair_free(dZ); pair_free(W2); pair_free(dY); pair_free(db);
        }
        if (mask) gpu->free(gpu, mask);
        pair_free(X); pair_free(W); pair_free(b); pair_free(Y);
    }
}

/* head gates (issue #23): gated copy exact; the gates' gradient sums in a
 * fixed order (fp32 block sum on the GPU, double on the CPU) */
static void test_head_gates(void)
{
    int rows = 70, nh = 3, dv = 5;
    size_t n = (size_t)rows * nh * dv;
    float gate_h[3] = { 0.0f, 1.0f, -0.75f };
    Pair ctx = pair_rand(n, 1), out = pair_rand(n, 1), gate = pair_from(gate_h, 3);
    cpu->head_gate_forward(cpu, out.c, ctx.c, F(gate.c), rows, nh, dv);
    gpu->head_gate_forward(gpu, out.g, ctx.g, F(gate.g), rows, nh, dv);
    compare("head_gate_forward", out, 0, 0);
    Pair dctx = pair_rand(n, 1), dgate = pair_rand(3, 1);
    cpu->head_gate_backward(cpu, F(dgate.c), dctx.c, ctx.c, F(gate.c), rows, nh, dv);
    gpu->head_gate_backward(gpu, F(dgate.g), dctx.g, ctx.g, F(gate.g), rows, nh, dv);
    compare("head_gate_backward: dgate", dgate, 1e-5, 1e-5);
    compare("head_gate_backward: dctx", dctx, 0, 0);
    pair_free(ctx); pair_free(out); pair_free(gate); pair_free(dctx); pair_free(dgate);
}

/* rows of 70 keys (a warp per row) and of 300 (past the warp kernels'
 * 256: a block per row), with padding masks and causal */
static void test_softmax(void)
{
    for (int t = 0; t < 4; t++) {
        int nb = 4, nh = 2, Tq = 5, Tk = t < 2 ? 70 : 300, causal = t & 1, qo = causal ? 2 : 0;
        int32_t klen[4] = { Tk, 33, 1, 0 };
        int32_t *kc = dev_copy(cpu, klen, sizeof klen), *kg = dev_copy(gpu, klen, sizeof klen);
        size_t n = (size_t)nb * nh * Tq * Tk;
        float *h = rand_host(n, 4);
        Pair S = pair_from(h, n);
        char name[80];
        snprintf(name, sizeof name, "softmax_forward Tk=%d %s", Tk, causal ? "causal q_offset=2" : "padding mask");
        cpu->softmax_forward(cpu, S.c, kc, 0.3f, nb, nh, Tq, Tk, causal, qo);
        gpu->softmax_forward(gpu, S.g, kg, 0.3f, nb, nh, Tq, Tk, causal, qo);
        compare(name, S, FP32);
        Pair dP = pair_rand(n, 1);
        cpu->softmax_backward(cpu, dP.c, S.c, 0.3f, nb, nh, Tq, Tk);
        gpu->softmax_backward(gpu, dP.g, S.g, 0.3f, nb, nh, Tq, Tk);
        snprintf(name, sizeof name, "softmax_backward Tk=%d", Tk);
        compare(name, dP, FP32);
        free(h);
        pair_free(S); pair_free(dP);
        cpu->free(cpu, kc);
        gpu->free(gpu, kg);
    }
}

/* The LayerNorm's widths (cuda/norm.cuh, ln_rows_fit): rows of d elements
 * in 16-byte packs of N go to the warp-per-row kernels (narrow up to 64
 * packs, wide up to 128), whose backward adds up dgamma and dbeta itself;
 * other widths (d % N != 0, or more packs) to the block-per-row kernels
 * and colsums.  3 x T rows: at T = 25, 19 blocks of 4 rows, the last
 * partial, forward and backward (a row a warp); at T = 1401, 4203 rows,
 * the backward's warps walk 2 rows each (chunks of 8, the last partial). */
typedef struct {
    int d;
    const char *kernel;   /* suffix of k_residual_ln_forward, _backward */
    int T;
} LnCase;
#define LN_BLOCK ""
#define LN_ROWS "_rows"
#define LN_WIDE "_rows_wide"
/* the 4203-row case costs the sanitizer builds minutes (ten times the
 * rest of the LayerNorm cases) and holds no communication the 75-row
 * cases do not: they repeat the 75-row narrow case instead */
#if defined(CUDA_TEST_TSAN) || defined(__SANITIZE_ADDRESS__)
#define LN_LONG_CASE { 40, LN_ROWS, 25 }
#else
#define LN_LONG_CASE { 40, LN_ROWS, 1401 }
#endif
static void ln_kernel_was(const char *op, const char *want);
static void test_residual_ln_d(int d, const char *kernel, int T, float amp);

static void test_residual_ln(void)
{
    static const LnCase cases[] = { { 77, LN_BLOCK, 25 }, { 40, LN_ROWS, 25 }, { 264, LN_WIDE, 25 },
                                    { 520, LN_BLOCK, 25 }, LN_LONG_CASE };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        test_residual_ln_d(cases[k].d, cases[k].kernel, cases[k].T, 1.0f);
    /* rows of amplitude 1e-3: a variance (~2e-6) of the order of the
     * LayerNorm's eps 1e-6, where eps sets a third of rstd.  At amplitude 1
     * eps moves rstd by ~1e-6 relative, within fp32's tolerance: a kernel
     * that dropped eps, or took 2 eps, passed there */
    for (size_t k = 0; k < 3; k++) test_residual_ln_d(cases[k].d, cases[k].kernel, cases[k].T, 1e-3f);
}

static void test_residual_ln_d(int d, const char *kernel, int T, float amp)
{
    int B = 3, rows = B * T;
    uint32_t sid[3] = { 5, 900, 77777 };
    uint32_t *sc = dev_copy(cpu, sid, sizeof sid), *sg = dev_copy(gpu, sid, sizeof sid);
    DropoutKey key = { 0x1234567890ull, 17, 42 };
    size_t n = (size_t)rows * d;
    printf("     residual_ln d = %d, %d rows of amplitude %g (kernels k_residual_ln_*%s)\n", d, rows, (double)amp,
           kernel);
    for (int alias = 0; alias < 2; alias++) {
        float p = alias ? 0.0f : 0.1f;
        Pair x = pair_rand(n, amp), sub = pair_rand(n, 2 * amp), g = pair_rand(d, 1), b = pair_rand(d, 1);
        Pair y = pair_rand(n, 1), r = pair_rand(n, 1), mu = pair_rand(rows, 1), rs = pair_rand(rows, 1);
        cpu->residual_ln_forward(cpu, y.c, r.c, F(mu.c), F(rs.c), x.c, sub.c, F(g.c), F(b.c), rows, d, 1e-6f, p, key,
                                 sc, T);
        cuda_cost_log(1);
        gpu->residual_ln_forward(gpu, y.g, r.g, F(mu.g), F(rs.g), x.g, sub.g, F(g.g), F(b.g), rows, d, 1e-6f, p, key,
                                 sg, T);
        ln_kernel_was("residual_ln_forward", kernel);
        compare(p > 0 ? "residual_ln_forward p=0.1: r (dropout mask)" : "residual_ln_forward p=0: r", r, FP32);
        compare("residual_ln_forward: y", y, FP32);
        compare("residual_ln_forward: mean", mu, FP32);
        compare("residual_ln_forward: rstd", rs, FP32);
        Pair dy = pair_rand(n, 1), dx = pair_rand(n, 1), ds = pair_rand(n, 1), dg = pair_rand(d, 1), db = pair_rand(d, 1);
        Pair dbs = pair_rand(d, 1);   /* dsub's column sums (the FFN's b2): asked for without the alias */
        Act dxc = alias ? dy.c : dx.c, dxg = alias ? dy.g : dx.g;
        cpu->residual_ln_backward(cpu, dxc, ds.c, F(dg.c), F(db.c), alias ? NULL : F(dbs.c), dy.c, r.c, F(mu.c),
                                  F(rs.c), F(g.c), rows, d, p, key, sc, T);
        cuda_cost_log(1);
        gpu->residual_ln_backward(gpu, dxg, ds.g, F(dg.g), F(db.g), alias ? NULL : F(dbs.g), dy.g, r.g, F(mu.g),
                                  F(rs.g), F(g.g), rows, d, p, key, sg, T);
        ln_kernel_was("residual_ln_backward", kernel);
        compare(alias ? "residual_ln_backward: dx (aliasing dy)" : "residual_ln_backward: dx", alias ? dy : dx, 1e-4, 1e-6);
        compare("residual_ln_backward: dsub", ds, 1e-4, 1e-6);
        /* over 4203 rows the CPU's own serial fp32 sums drift: its rms
         * error ~ sqrt(n) 2^-24 times the partial sums (~50 here), ~2e-4,
         * so atol 1e-5 of max|ref| (~8e-4) there; FP32 at 75 rows */
        double lat = rows > 1000 ? 1e-5 : 1e-6;
        compare("residual_ln_backward: dgamma", dg, 1e-5, lat);
        compare("residual_ln_backward: dbeta", db, 1e-5, lat);
        compare(alias ? "residual_ln_backward: no dbias_sub asked, untouched" : "residual_ln_backward: dbias_sub",
                dbs, 1e-5, lat);
        pair_free(x); pair_free(sub); pair_free(g); pair_free(b); pair_free(y); pair_free(r); pair_free(mu);
        pair_free(rs); pair_free(dy); pair_free(dx); pair_free(ds); pair_free(dg); pair_free(db); pair_free(dbs);
    }
    cpu->free(cpu, sc);
    gpu->free(gpu, sg);
}

/* The embedding-gradient batch: EB_B sentences of EB_T positions, the
 * real tokens first and padding (0) after, 163 real positions: token 7
 * 70 times (cuda/embed.cuh's chunks of EMBED_CHUNK = 32: 32, 32, 6),
 * token 9 33 times (32, 1), token 11 32 times (one chunk), and 28 of
 * tokens 12..30 once or twice, scattered over the sentences */
#define EB_B 4
#define EB_T 48
#define EB_V 50
static void embed_batch(int32_t *tok)
{
    static const int len[EB_B] = { 48, 45, 40, 30 };
    int32_t vals[163];
    int k = 0;
    for (; k < 70; k++) vals[k] = 7;
    for (; k < 103; k++) vals[k] = 9;
    for (; k < 135; k++) vals[k] = 11;
    for (; k < 163; k++) vals[k] = 12 + k % 19;
    for (int b = 0, r = 0; b < EB_B; b++)
        for (int t = 0; t < EB_T; t++) tok[b * EB_T + t] = t < len[b] ? vals[(r++ * 37) % 163] : 0;
}

/* the rows of dout at padding set to v on both sides (0: what backward
 * gives them, which test_cuda_step checks) */
static void pad_rows(Pair p, const int32_t *tok, int n, int d, float v)
{
    float *h = malloc(4 * p.n);
    for (int side = 0; side < 2; side++) {
        Backend *be = side ? gpu : cpu;
        Act a = side ? p.g : p.c;
        be->download_act(be, h, a, p.n);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < d && tok[i] == 0; j++) h[(size_t)i * d + j] = v;
        be->upload_act(be, a, h, p.n);
    }
    free(h);
}

/* the CUDA embed_backward (no learned positions) from dE = dE0, into out */
static void gpu_embed_backward(float *out, const float *dE0, Act dout, const int32_t *tok, const uint32_t *sid,
                               int d, DropoutKey key)
{
    float *dE = dev_copy(gpu, dE0, sizeof(float) * EB_V * d);
    int32_t *tg = dev_copy(gpu, tok, sizeof(int32_t) * EB_B * EB_T);
    gpu->embed_backward(gpu, dE, NULL, dout, tg, tok, sid, EB_B, EB_T, d, EB_V, 6.7f, 0.1f, key);
    gpu->download(gpu, out, dE, sizeof(float) * EB_V * d);
    gpu->free(gpu, dE);
    gpu->free(gpu, tg);
}

static void check(int ok, const char *what)
{
    checks++;
    failures += !ok;
    printf("%s [%s] %s\n", ok ? "ok  " : "FAIL", order_name, what);
}

/* the kernel of op (residual_ln_forward or _backward) logged since
 * cuda_cost_log(1) was k_<op><suffix><A> */
static void ln_kernel_was(const char *op, const char *suffix)
{
    const CostCall *c;
    size_t n = cuda_cost_calls(&c);
    const char *got = "none";
    char want[80], msg[200];
    snprintf(want, sizeof want, "k_%s%s<A>", op, suffix);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(c[i].op, op) && !strncmp(c[i].call, "k_residual_ln_", 14)) got = c[i].call;
    cuda_cost_log(0);
    snprintf(msg, sizeof msg, "%s: ran %s (want %s)", op, got, want);
    check(!strcmp(got, want), msg);
}

/* The CUDA embedding gradient beyond its agreement with the CPU: padding
 * skipped (dout's pad rows made non-zero change nothing, bitwise: the CPU
 * would add them to dE[0]); the frequent tokens cut into chunks (the
 * launch grids: a chunk per block, a combine per token of several);
 * with orders, the same bits under every thread order of the emulator */
static void check_embed_gpu(Pair dout, const float *dE0, const int32_t *tok, const uint32_t *sid, int d,
                            DropoutKey key, int orders)
{
    size_t nE = (size_t)EB_V * d;
    float *ref = malloc(4 * nE), *got = malloc(4 * nE);
    cuda_cost_log(1);
    gpu_embed_backward(ref, dE0, dout.g, tok, sid, d, key);
    cuda_cost_log(0);
    const CostCall *calls;
    size_t nc = cuda_cost_calls(&calls);
    double chunk_blocks = 0, combine_blocks = 0;
    for (size_t i = 0; i < nc; i++) {
        if (!strncmp(calls[i].call, "k_embed_backward_tokens", 23)) chunk_blocks = calls[i].blocks;
        if (!strcmp(calls[i].call, "k_embed_backward_combine")) combine_blocks = calls[i].blocks;
    }
    /* chunks: 3 + 2 + 1 of tokens 7, 9, 11 and one for each of 19 others */
    check(chunk_blocks == 25 && combine_blocks == 2,
          "embed_backward: 25 chunks of <= 32 positions, 2 tokens combined, padding in none");
    if (orders) {
        static const char *o[] = { "forward", "reverse", "random:777" };
        int same = 1;
        for (int k = 0; k < 3; k++) {
            set_order(o[k]);
            gpu_embed_backward(got, dE0, dout.g, tok, sid, d, key);
            same &= !memcmp(got, ref, 4 * nE);
        }
        set_order(order_name);
        check(same, "embed_backward: dE bitwise the same under 3 thread orders");
    }
    pad_rows(dout, tok, EB_B * EB_T, d, 0.75f);
    gpu_embed_backward(got, dE0, dout.g, tok, sid, d, key);
    check(!memcmp(got, ref, 4 * nE), "embed_backward: non-zero pad rows of dout change no bit of dE (skipped)");
    free(ref);
    free(got);
}

static void embed_forward_at(int d, int bf);

static void test_embed(void)
{
    embed_forward_at(45, 0);
    embed_forward_at(48, 0);
    int B = EB_B, T = EB_T, d = 45, V = EB_V, maxlen = 64;
    int32_t tok[EB_B * EB_T];
    embed_batch(tok);
    uint32_t sid[EB_B] = { 3, 1, 4, 15 };
    int32_t *tc = dev_copy(cpu, tok, sizeof tok), *tg = dev_copy(gpu, tok, sizeof tok);
    uint32_t *sc = dev_copy(cpu, sid, sizeof sid), *sg = dev_copy(gpu, sid, sizeof sid);
    DropoutKey key = { 99, 3, 1 };
    for (int learned = 0; learned < 2; learned++) {   /* (the forward: embed_forward_at above) */
        size_t n = (size_t)B * T * d;
        float *dE0 = rand_host((size_t)V * d, 1);
        Pair dout = pair_rand(n, 1), dE = pair_from(dE0, (size_t)V * d), dpos = pair_rand((size_t)maxlen * d, 1);
        pad_rows(dout, tok, B * T, d, 0.0f);
        cpu->embed_backward(cpu, F(dE.c), learned ? F(dpos.c) : NULL, dout.c, tc, NULL, sc, B, T, d, V, 6.7f, 0.1f,
                            key);
        /* the ids read back from the device, or (learned) the caller's host
         * copy */
        gpu->embed_backward(gpu, F(dE.g), learned ? F(dpos.g) : NULL, dout.g, tg, learned ? tok : NULL, sg, B, T, d,
                            V, 6.7f, 0.1f, key);
        compare(learned ? "embed_backward: dE (chunked token segments from host ids, no atomics)"
                        : "embed_backward: dE (chunked token segments, ids read back, no atomics)", dE, FP32);
        if (learned) compare("embed_backward: dpos", dpos, FP32);
        else check_embed_gpu(dout, dE0, tok, sg, d, key, cuda_emu_set_order != NULL);
        pair_free(dout); pair_free(dE); pair_free(dpos);
        free(dE0);
    }
    cpu->free(cpu, tc); gpu->free(gpu, tg); cpu->free(cpu, sc); gpu->free(gpu, sg);
}

static void test_xent(void)
{
    int rows = 9, V = 301;
    int32_t tgt[9] = { 5, 0, 300, 1, 0, 77, 2, 150, 4 };
    int32_t *tc = dev_copy(cpu, tgt, sizeof tgt), *tg = dev_copy(gpu, tgt, sizeof tgt);
    for (int grad = 0; grad < 2; grad++) {
        Pair z = pair_rand((size_t)rows * V, 5), loss = pair_rand(rows, 1), nll = pair_rand(rows, 1);
        cpu->xent_forward_backward(cpu, z.c, tc, rows, V, 0.1f, grad ? 0.5f : 0.0f, F(loss.c), F(nll.c));
        gpu->xent_forward_backward(gpu, z.g, tg, rows, V, 0.1f, grad ? 0.5f : 0.0f, F(loss.g), F(nll.g));
        compare("xent: smoothed row loss", loss, 1e-5, 1e-6);
        compare("xent: row nll", nll, 1e-5, 1e-6);
        compare(grad ? "xent: fused softmax gradient" : "xent: logits untouched (grad_scale 0)", z, 1e-5, 1e-6);
        pair_free(z); pair_free(loss); pair_free(nll);
    }
    /* logits rising along the row: each pack a thread reads raises its
     * running max, so the online normaliser rescales its sum every time */
    int Vr = 4099;
    float *h = rand_host((size_t)rows * Vr, 0.5f);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < Vr; k++) h[(size_t)r * Vr + k] += 12.0f * k / Vr;
    Pair z = pair_from(h, (size_t)rows * Vr), loss = pair_rand(rows, 1), nll = pair_rand(rows, 1);
    cpu->xent_forward_backward(cpu, z.c, tc, rows, Vr, 0.1f, 0.5f, F(loss.c), F(nll.c));
    gpu->xent_forward_backward(gpu, z.g, tg, rows, Vr, 0.1f, 0.5f, F(loss.g), F(nll.g));
    compare("xent, rising logits: smoothed row loss", loss, 1e-5, 1e-6);
    compare("xent, rising logits: row nll", nll, 1e-5, 1e-6);
    compare("xent, rising logits: fused softmax gradient", z, 1e-5, 1e-6);
    pair_free(z); pair_free(loss); pair_free(nll);
    free(h);
    cpu->free(cpu, tc);
    gpu->free(gpu, tg);
}

static void test_adam_logsoftmax(void)
{
    size_t n = 1001;
    Pair p = pair_rand(n, 1), g = pair_rand(n, 3), m = pair_rand(n, 0.1f), v = pair_rand(n, 0.1f);
    /* v >= 0 */
    float *h = rand_host(n, 0.01f);
    for (size_t i = 0; i < n; i++) h[i] = fabsf(h[i]);
    cpu->upload_act(cpu, v.c, h, n);
    gpu->upload_act(gpu, v.g, h, n);
    free(h);
    cpu->adam(cpu, F(p.c), F(g.c), F(m.c), F(v.c), n, 1e-3f, 0.9f, 0.98f, 1e-9f, 3, 0.25f);
    gpu->adam(gpu, F(p.g), F(g.g), F(m.g), F(v.g), n, 1e-3f, 0.9f, 0.98f, 1e-9f, 3, 0.25f);
    compare("adam: params", p, FP32);
    compare("adam: m", m, FP32);
    compare("adam: v", v, FP32);
    pair_free(p); pair_free(g); pair_free(m); pair_free(v);
    Pair x = pair_rand(5 * 301, 4);
    cpu->log_softmax(cpu, x.c, 5, 301);
    gpu->log_softmax(gpu, x.g, 5, 301);
    compare("log_softmax", x, FP32);
    pair_free(x);
}

/* ------------------------------------------------------ precision=bf16
 *
 * The same ops on a precision=bf16 backend, with the model's buffer kinds:
 * activations from alloc_act (bf16 views), weights,
 * gradients and statistics from alloc (fp32).  Inputs are rounded to bf16
 * on the host first, so both backends see exactly the same values and the
 * comparison isolates what the bf16 kernels add (where an op's input is an
 * earlier bf16 result, sync_pair gives the CPU the GPU's rounded values):
 *   BF_OUT  a bf16 result: one rounding to nearest even (8 significant
 *           bits: relative error <= 2^-8 = 3.9e-3 of the element), plus
 *           fp32 summation order: rtol 8e-3 (twice the bound), atol 1e-5
 *           of the largest entry;
 *   BF_F32  an fp32 result (weight/bias gradients, LayerNorm mean, losses)
 *           computed from bf16-exact inputs with fp32 accumulation: only
 *           the summation order differs, as in the fp32 tests.
 * Derived cases are explained where they occur. */
/* fp16: the same tests with U = 2^-11 (11 significant bits) instead of
 * bf16's 2^-8; every tolerance below is written in units of U.  Test data
 * stay far below fp16's largest value (65504); entries that land among the
 * subnormals (< 6.1e-5) carry an absolute error <= 2^-25, far inside every
 * atol. */
static double U = 1.0 / 256;   /* relative rounding of one 16-bit store */
static float fp16_round(float x) { return (float)(_Float16)x; }   /* round to nearest even */

static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {   /* finite: round to nearest even */
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
    }
    memcpy(&x, &u, 4);
    return x;
}

static float (*lp_round)(float) = bf16_round;   /* the 16-bit type under test */

#define BF_OUT (2 * U), 1e-5
#define BF_BIASED (2 * U), 1e-5   /* with compare_biased: see test_bf16_linear_bias */
#define BF_F32 2e-5, 2e-6

/* bf16-exact random data on both backends; on the GPU an activation
 * (act = 1) or a plain fp32 buffer */
static Pair pair_bf(size_t n, float scale, int act)
{
    float *h = rand_host(n, scale);
    for (size_t i = 0; i < n; i++) h[i] = lp_round(h[i]);
    Pair p = { act_f32(cpu->alloc(cpu, 4 * n)), act ? gpu->alloc_act(gpu, n) : act_f32(gpu->alloc(gpu, 4 * n)), n };
    cpu->upload_act(cpu, p.c, h, n);
    gpu->upload_act(gpu, p.g, h, n);
    free(h);
    return p;
}

/* embed_forward at width d against the CPU (16-bit storage: bf), and the
 * kernel that ran: four features a thread where d is a multiple of 4
 * (cuda/embed.cuh), one elsewhere */
static void embed_forward_at(int d, int bf)
{
    int B = EB_B, T = EB_T, V = EB_V, maxlen = 64;
    int32_t tok[EB_B * EB_T];
    embed_batch(tok);
    uint32_t sid[EB_B] = { 3, 1, 4, 15 };
    int32_t *tc = dev_copy(cpu, tok, sizeof tok), *tg = dev_copy(gpu, tok, sizeof tok);
    uint32_t *sc = dev_copy(cpu, sid, sizeof sid), *sg = dev_copy(gpu, sid, sizeof sid);
    DropoutKey key = { 99, 3, 1 };
    Pair E = bf ? pair_bf((size_t)V * d, 1, 0) : pair_rand((size_t)V * d, 1);
    Pair pos = bf ? pair_bf((size_t)maxlen * d, 1, 0) : pair_rand((size_t)maxlen * d, 1);
    for (int learned = 0; learned < 2; learned++) {
        size_t n = (size_t)B * T * d;
        Pair out = bf ? pair_bf(n, 1, 1) : pair_rand(n, 1);
        char name[96];
        cpu->embed_forward(cpu, out.c, F(E.c), learned ? F(pos.c) : NULL, tc, sc, B, T, d, 6.7f, 3, 0.1f, key);
        cuda_cost_log(1);
        gpu->embed_forward(gpu, out.g, F(E.g), learned ? F(pos.g) : NULL, tg, sg, B, T, d, 6.7f, 3, 0.1f, key);
        const CostCall *c;
        size_t nc = cuda_cost_calls(&c);
        const char *want = d % 4 ? "k_embed_forward<A>" : "k_embed_forward4<A>", *got = "none";
        for (size_t k = 0; k < nc; k++)
            if (!strcmp(c[k].op, "embed_forward") && !strncmp(c[k].call, "k_embed_forward", 15)) got = c[k].call;
        cuda_cost_log(0);
        snprintf(name, sizeof name, "%sembed_forward d %d: ran %s (want %s)", bf ? "16-bit " : "", d, got, want);
        check(!strcmp(got, want), name);
        snprintf(name, sizeof name, "%sembed_forward d %d %s", bf ? "16-bit " : "", d,
                 learned ? "learned positions" : "sinusoids, pos_offset 3");
        if (bf) compare(name, out, BF_OUT);
        else compare(name, out, FP32);
        pair_free(out);
    }
    pair_free(E); pair_free(pos);
    cpu->free(cpu, tc); gpu->free(gpu, tg); cpu->free(cpu, sc); gpu->free(gpu, sg);
}

/* the CPU side takes the GPU's (bf16-rounded) values */
static void sync_pair(Pair p)
{
    float *h = malloc(4 * p.n);
    gpu->download_act(gpu, h, p.g, p.n);
    cpu->upload_act(cpu, p.c, h, p.n);
    free(h);
}

static void test_bf16_gemm(void)
{
    int M = 37, N = 45, K = 29;
    char name[96];
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++) {
            int lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 1, ldc = N + 2;
            size_t nA = (size_t)(tA ? K : M) * lda, nB = (size_t)(tB ? N : K) * ldb, nC = (size_t)M * ldc;
            /* activation x weights (the bf16 shadow of the parameters) -> activation */
            Pair A = pair_bf(nA, 1, 1), W = pair_bf(nB, 1, 0), C = pair_bf(nC, 1, 1);
            gpu->set_params(gpu, F(W.g), nB);
            cpu->gemm(cpu, tA, tB, M, N, K, 0.7f, A.c, lda, W.c, ldb, 0.3f, C.c, ldc);
            gpu->gemm(gpu, tA, tB, M, N, K, 0.7f, A.g, lda, W.g, ldb, 0.3f, C.g, ldc);
            snprintf(name, sizeof name, "16-bit gemm act x weights -> act tA=%d tB=%d", tA, tB);
            compare(name, C, BF_OUT);
            /* activation x activation -> fp32 gradient, beta = 1 */
            Pair B = pair_bf(nB, 1, 1), G = pair_bf(nC, 1, 0);
            cpu->gemm(cpu, tA, tB, M, N, K, 1.0f, A.c, lda, B.c, ldb, 1.0f, G.c, ldc);
            gpu->gemm(gpu, tA, tB, M, N, K, 1.0f, A.g, lda, B.g, ldb, 1.0f, G.g, ldc);
            snprintf(name, sizeof name, "16-bit gemm act x act -> fp32 += tA=%d tB=%d", tA, tB);
            compare(name, G, BF_F32);
            /* activation x a plain fp32 buffer (converted to bf16 scratch) -> activation */
            Pair F = pair_bf(nB, 1, 0);
            cpu->gemm(cpu, tA, tB, M, N, K, 1.0f, A.c, lda, F.c, ldb, 0.0f, C.c, ldc);
            gpu->gemm(gpu, tA, tB, M, N, K, 1.0f, A.g, lda, F.g, ldb, 0.0f, C.g, ldc);
            snprintf(name, sizeof name, "16-bit gemm act x fp32 buffer -> act tA=%d tB=%d", tA, tB);
            compare(name, C, BF_OUT);
            /* two fp32 buffers -> activation (through an fp32 scratch C), beta != 0 */
            Pair A32 = pair_bf(nA, 1, 0);
            sync_pair(C);
            cpu->gemm(cpu, tA, tB, M, N, K, 1.0f, A32.c, lda, F.c, ldb, -0.5f, C.c, ldc);
            gpu->gemm(gpu, tA, tB, M, N, K, 1.0f, A32.g, lda, F.g, ldb, -0.5f, C.g, ldc);
            snprintf(name, sizeof name, "16-bit gemm fp32 x fp32 -> act tA=%d tB=%d", tA, tB);
            compare(name, C, BF_OUT);
            pair_free(A); pair_free(W); pair_free(C); pair_free(B); pair_free(G); pair_free(F); pair_free(A32);
        }
    /* the weight shadow follows Adam: lr 0.1 moves every weight by ~0.1, so
     * a stale shadow is off by ~10%; a fresh one only by the rounding of
     * the (no longer bf16-exact) weights, 2^-8 relative per product:
     * rtol/atol 2.5 U (1e-2 for bf16) */
    size_t nW = (size_t)N * K;
    Pair A = pair_bf((size_t)M * K, 1, 1), W = pair_bf(nW, 1, 0), C = pair_bf((size_t)M * N, 1, 1);
    Pair g = pair_bf(nW, 1, 0), m = pair_bf(nW, 0, 0), v = pair_bf(nW, 0, 0);
    gpu->set_params(gpu, F(W.g), nW);
    gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, A.g, K, W.g, K, 0.0f, C.g, N);   /* converts the shadow */
    cpu->adam(cpu, F(W.c), F(g.c), F(m.c), F(v.c), nW, 0.1f, 0.9f, 0.98f, 1e-9f, 1, 1.0f);
    gpu->adam(gpu, F(W.g), F(g.g), F(m.g), F(v.g), nW, 0.1f, 0.9f, 0.98f, 1e-9f, 1, 1.0f);
    compare("16-bit adam: fp32 master weights", W, FP32);
    cpu->gemm(cpu, 0, 1, M, N, K, 1.0f, A.c, K, W.c, K, 0.0f, C.c, N);
    gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, A.g, K, W.g, K, 0.0f, C.g, N);
    compare("16-bit gemm after adam: shadow refreshed", C, 2.5 * U, 2.5 * U);
    /* a copy into the weights (checkpoint averaging, resume) also refreshes it */
    Pair W2 = pair_bf(nW, 1, 0);
    cpu->copy_act(cpu, W.c, W2.c, nW);
    gpu->copy_act(gpu, W.g, W2.g, nW);
    cpu->gemm(cpu, 0, 1, M, N, K, 1.0f, A.c, K, W.c, K, 0.0f, C.c, N);
    gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, A.g, K, W.g, K, 0.0f, C.g, N);
    compare("16-bit gemm after copy into weights", C, BF_OUT);
    gpu->set_params(gpu, NULL, 0);
    pair_free(A); pair_free(W); pair_free(C); pair_free(g); pair_free(m); pair_free(v); pair_free(W2);
}

/* attention-shaped: outer = sentence, inner = head with stride d_k inside a
 * row of Q/K; fp32, or (bf16) activations of a precision=bf16 backend with
 * bf16-exact inputs */
static Pair batched_pair(size_t n, int bf16) { return bf16 ? pair_bf(n, 1, 1) : pair_rand(n, 1); }

static void compare_batched(const char *what, Pair p, int bf16)
{
    char name[96];
    snprintf(name, sizeof name, "%s%s", bf16 ? "16-bit " : "", what);
    if (bf16) compare(name, p, BF_OUT);
    else compare(name, p, FP32);
}

static void test_gemm_batched_shape(int nb, int h, int bf16)
{
    int T = 11, S = 13, dk = 7, ldq = 3 * h * dk;
    Pair Q = batched_pair((size_t)nb * T * ldq, bf16), Kt = batched_pair((size_t)nb * S * ldq, bf16);
    Pair P = batched_pair((size_t)nb * h * T * S, bf16), ctx = batched_pair((size_t)nb * T * ldq, bf16);
    long sP = (long)h * T * S, sPi = (long)T * S;
    cpu->gemm_batched(cpu, 0, 1, T, S, dk, 0.5f, Q.c, ldq, (long)T * ldq, dk, Kt.c, ldq, (long)S * ldq, dk, 0.0f, P.c, S,
                      sP, sPi, nb, h);
    gpu->gemm_batched(gpu, 0, 1, T, S, dk, 0.5f, Q.g, ldq, (long)T * ldq, dk, Kt.g, ldq, (long)S * ldq, dk, 0.0f, P.g, S,
                      sP, sPi, nb, h);
    compare_batched(h == 1 ? "gemm_batched Q K^T (one head: strided over sentences)"
                           : "gemm_batched Q K^T (pointer arrays built on the device)", P, bf16);
    /* P V with beta = 1; in bf16 on the bf16-rounded P of both sides */
    if (bf16) sync_pair(P);
    cpu->gemm_batched(cpu, 0, 0, T, dk, S, 1.0f, P.c, S, sP, sPi, Kt.c, ldq, (long)S * ldq, dk, 1.0f, ctx.c, ldq,
                      (long)T * ldq, dk, nb, h);
    gpu->gemm_batched(gpu, 0, 0, T, dk, S, 1.0f, P.g, S, sP, sPi, Kt.g, ldq, (long)S * ldq, dk, 1.0f, ctx.g, ldq,
                      (long)T * ldq, dk, nb, h);
    compare_batched("gemm_batched P V (beta=1)", ctx, bf16);
    /* contiguous strides: one strided-batched call over all nb*h */
    Pair D2 = batched_pair((size_t)nb * h * S * S, bf16);
    long sD = (long)h * S * S, sDi = (long)S * S;
    cpu->gemm_batched(cpu, 1, 0, S, S, T, 1.0f, P.c, S, sP, sPi, P.c, S, sP, sPi, 0.0f, D2.c, S, sD, sDi, nb, h);
    gpu->gemm_batched(gpu, 1, 0, S, S, T, 1.0f, P.g, S, sP, sPi, P.g, S, sP, sPi, 0.0f, D2.g, S, sD, sDi, nb, h);
    compare_batched("gemm_batched P^T P (single strided call)", D2, bf16);
    pair_free(Q); pair_free(Kt); pair_free(P); pair_free(ctx); pair_free(D2);
}

/* 16-bit fused GEMM + bias: weights and bias one parameter block (their
 * narrow shadow, as in training), then the bias outside it (converted);
 * the CPU is exact fp32 and rounds once.  cuBLASLt may round the product
 * to the 16-bit type before it adds the bias (an H200 with cuBLAS 13.0 did,
 * make gpu-accept 2026-11-26: errors up to half a 16-bit unit of the
 * product where the bias cancels it; the emulator does the same), so the
 * bound is two roundings, U of |product| <= U (|y| + |bias|) and U of |y|,
 * twice over as in BF_OUT: BF_BIASED.  The backward from
 * the kept mask on the GPU's (rounded) forward output: dX one rounding
 * apart, dbias the fp32 column sums of the GPU's dX (BF_F32). */
static void test_bf16_linear_bias(void)
{
    int rows = 33, in = 300, out = 17, in2 = 21;
    size_t nW = (size_t)out * in;
    for (int t = 0; t < 4; t++) {
        int relu = t & 1, shadow = t < 2;
        Pair X = pair_bf((size_t)rows * in, 1, 1), P = pair_bf(nW + out, 0.2f, 0);
        Pair Y = pair_bf((size_t)rows * out, 1, 1);
        Pair b = pair_bf(out, 0.5f, 0);
        void *mask = gpu->alloc(gpu, gpu->relu_mask_bytes(gpu, rows, out));
        gpu->set_params(gpu, F(P.g), shadow ? nW + out : nW);
        float *bc = shadow ? F(P.c) + nW : F(b.c), *bg = shadow ? F(P.g) + nW : F(b.g);
        cpu->linear_bias_forward(cpu, Y.c, X.c, P.c, bc, rows, in, out, relu, NULL);
        gpu->linear_bias_forward(gpu, Y.g, X.g, P.g, bg, rows, in, out, relu, mask);
        char name[96];
        snprintf(name, sizeof name, "16-bit linear_bias_forward%s, bias %s", relu ? " relu" : "",
                 shadow ? "shadowed" : "converted");
        compare_biased(name, Y, bc, out, BF_BIASED);
        if (relu) {
            sync_pair(Y);
            Pair dZ = pair_bf((size_t)rows * in2, 1, 1), W2 = pair_bf((size_t)in2 * out, 1, 0);
            Pair dY = pair_bf((size_t)rows * out, 1, 1), db = pair_bf(out, 1, 0);
            float *db0 = cpu->alloc(cpu, sizeof(float) * out);
            cpu->copy(cpu, db0, F(db.c), sizeof(float) * out);
            gpu->set_params(gpu, F(W2.g), (size_t)in2 * out);
            cpu->linear_relu_backward(cpu, dY.c, F(db.c), dZ.c, W2.c, Y.c, NULL, rows, out, in2);
            gpu->linear_relu_backward(gpu, dY.g, F(db.g), dZ.g, W2.g, Y.g, mask, rows, out, in2);
            compare(shadow ? "16-bit linear_relu_backward (mask): dX" : "16-bit linear_relu_backward (mask): dX, again",
                    dY, BF_OUT);
            /* dbias: fp32 sums of the GPU's dX on both sides (the roundings
             * of dX add up over the rows otherwise) */
            sync_pair(dY);
            cpu->bias_backward(cpu, dY.c, db0, act_none(), rows, out, 0);
            Pair ref = { act_f32(db0), db.g, (size_t)out };
            compare("16-bit linear_relu_backward (mask): dbias (fp32)", ref, BF_F32);
            cpu->free(cpu, db0);
            pair_free(dZ); pair_free(W2); pair_free(dY); pair_free(db);
        }
        gpu->free(gpu, mask);
        pair_free(X); pair_free(P); pair_free(Y); pair_free(b);
    }
}

static void test_bf16_gemm_batched(void)
{
    test_gemm_batched_shape(3, 4, 1);
    test_gemm_batched_shape(5, 2, 1);
}

static void test_bf16_elementwise(void)
{
    /* bias */
    int rows = 300, cols = 45;
    for (int relu = 0; relu < 2; relu++) {
        Pair Y = pair_bf((size_t)rows * cols, 1, 1), b = pair_bf(cols, 0.5f, 0);
        cpu->bias_forward(cpu, Y.c, F(b.c), rows, cols, relu);
        gpu->bias_forward(gpu, Y.g, F(b.g), rows, cols, relu);
        compare(relu ? "16-bit bias_forward relu" : "16-bit bias_forward", Y, BF_OUT);
        /* backward on fresh bf16-exact Y (the forward results differ by rounding) */
        Pair Y2 = pair_bf((size_t)rows * cols, 1, 1), dY = pair_bf((size_t)rows * cols, 1, 1), db = pair_bf(cols, 1, 0);
        cpu->bias_backward(cpu, dY.c, F(db.c), Y2.c, rows, cols, relu);
        gpu->bias_backward(gpu, dY.g, F(db.g), Y2.g, rows, cols, relu);
        compare(relu ? "16-bit bias_backward relu: dbias (fp32)" : "16-bit bias_backward: dbias (fp32)", db, BF_F32);
        compare("16-bit bias_backward: dY (exact)", dY, 0, 0);
        pair_free(Y); pair_free(b); pair_free(Y2); pair_free(dY); pair_free(db);
    }
    /* softmax */
    int nb = 4, nh = 2, Tq = 5, Tk = 70;
    int32_t klen[4] = { 70, 33, 1, 0 };
    int32_t *kc = dev_copy(cpu, klen, sizeof klen), *kg = dev_copy(gpu, klen, sizeof klen);
    size_t n = (size_t)nb * nh * Tq * Tk;
    for (int causal = 0; causal < 2; causal++) {
        Pair S = pair_bf(n, 4, 1);
        cpu->softmax_forward(cpu, S.c, kc, 0.3f, nb, nh, Tq, Tk, causal, causal ? 2 : 0);
        gpu->softmax_forward(gpu, S.g, kg, 0.3f, nb, nh, Tq, Tk, causal, causal ? 2 : 0);
        compare(causal ? "16-bit softmax_forward causal" : "16-bit softmax_forward padding mask", S, BF_OUT);
        Pair P = pair_bf(n, 1, 1), dP = pair_bf(n, 1, 1);
        cpu->softmax_backward(cpu, dP.c, P.c, 0.3f, nb, nh, Tq, Tk);
        gpu->softmax_backward(gpu, dP.g, P.g, 0.3f, nb, nh, Tq, Tk);
        compare("16-bit softmax_backward", dP, BF_OUT);
        pair_free(S); pair_free(P); pair_free(dP);
    }
    cpu->free(cpu, kc);
    gpu->free(gpu, kg);
    /* xent over bf16 logits; losses fp32, the gradient written back as bf16 */
    int xr = 9, V = 301;
    int32_t tgt[9] = { 5, 0, 300, 1, 0, 77, 2, 150, 4 };
    int32_t *tc = dev_copy(cpu, tgt, sizeof tgt), *tg = dev_copy(gpu, tgt, sizeof tgt);
    Pair z = pair_bf((size_t)xr * V, 5, 1), loss = pair_bf(xr, 1, 0), nll = pair_bf(xr, 1, 0);
    cpu->xent_forward_backward(cpu, z.c, tc, xr, V, 0.1f, 0.5f, F(loss.c), F(nll.c));
    gpu->xent_forward_backward(gpu, z.g, tg, xr, V, 0.1f, 0.5f, F(loss.g), F(nll.g));
    compare("16-bit xent: smoothed row loss (fp32)", loss, 1e-5, 1e-6);
    compare("16-bit xent: row nll (fp32)", nll, 1e-5, 1e-6);
    compare("16-bit xent: fused softmax gradient", z, BF_OUT);
    cpu->free(cpu, tc);
    gpu->free(gpu, tg);
    pair_free(z); pair_free(loss); pair_free(nll);
    Pair x = pair_bf(5 * 301, 4, 1);
    cpu->log_softmax(cpu, x.c, 5, 301);
    gpu->log_softmax(gpu, x.g, 5, 301);
    compare("16-bit log_softmax", x, BF_OUT);
    pair_free(x);
}

static void test_bf16_residual_ln_d(int d, const char *kernel, int T, uint32_t *sc, uint32_t *sg)
{
    int B = 3, rows = B * T;
    DropoutKey key = { 0x1234567890ull, 17, 42 };
    size_t n = (size_t)rows * d;
    printf("     16-bit residual_ln d = %d, %d rows (kernels k_residual_ln_*%s)\n", d, rows, kernel);
    for (int alias = 0; alias < 2; alias++) {
        float p = alias ? 0.0f : 0.1f;
        Pair x = pair_bf(n, 1, 1), sub = pair_bf(n, 2, 1), g = pair_bf(d, 1, 0), b = pair_bf(d, 1, 0);
        Pair y = pair_bf(n, 1, 1), r = pair_bf(n, 1, 1), mu = pair_bf(rows, 1, 0), rs = pair_bf(rows, 1, 0);
        cpu->residual_ln_forward(cpu, y.c, r.c, F(mu.c), F(rs.c), x.c, sub.c, F(g.c), F(b.c), rows, d, 1e-6f, p, key,
                                 sc, T);
        cuda_cost_log(1);
        gpu->residual_ln_forward(gpu, y.g, r.g, F(mu.g), F(rs.g), x.g, sub.g, F(g.g), F(b.g), rows, d, 1e-6f, p, key,
                                 sg, T);
        ln_kernel_was("residual_ln_forward", kernel);
        compare("16-bit residual_ln_forward: r", r, BF_OUT);
        compare("16-bit residual_ln_forward: mean (fp32)", mu, BF_F32);
        /* rstd and y are computed from the rounded r: each r_j moves by
         * <= 2^-8 |r_j|, so the variance by <= 2^-7 relative and rstd by
         * <= 2^-8; y = (r - mean) rstd gamma + beta then carries ~2^-8 of
         * |r| rstd |gamma| (|r| ~ |r - mean| here) on top of its own
         * rounding: rtol 5 U, atol 2 U of max|y| (bf16: 2e-2, 8e-3) */
        compare("16-bit residual_ln_forward: rstd (fp32, from rounded r)", rs, 2 * U, 1e-6);
        compare("16-bit residual_ln_forward: y", y, 5 * U, 2 * U);
        sync_pair(rs);   /* backward below: the same statistics on both sides */
        Pair dy = pair_bf(n, 1, 1), dx = pair_bf(n, 1, 1), ds = pair_bf(n, 1, 1), dg = pair_bf(d, 1, 0);
        Pair db = pair_bf(d, 1, 0), r2 = pair_bf(n, 1, 1), dbs = pair_bf(d, 1, 0);
        Act dxc = alias ? dy.c : dx.c, dxg = alias ? dy.g : dx.g;
        cpu->residual_ln_backward(cpu, dxc, ds.c, F(dg.c), F(db.c), NULL, dy.c, r2.c, F(mu.c), F(rs.c), F(g.c), rows,
                                  d, p, key, sc, T);
        cuda_cost_log(1);
        gpu->residual_ln_backward(gpu, dxg, ds.g, F(dg.g), F(db.g), alias ? NULL : F(dbs.g), dy.g, r2.g, F(mu.g),
                                  F(rs.g), F(g.g), rows, d, p, key, sg, T);
        ln_kernel_was("residual_ln_backward", kernel);
        compare(alias ? "16-bit residual_ln_backward: dx (aliasing dy)" : "16-bit residual_ln_backward: dx",
                alias ? dy : dx, BF_OUT);
        compare("16-bit residual_ln_backward: dsub", ds, BF_OUT);
        double lat = rows > 1000 ? 1e-5 : 2e-6;   /* as test_residual_ln_d's */
        compare("16-bit residual_ln_backward: dgamma (fp32)", dg, 2e-5, lat);
        compare("16-bit residual_ln_backward: dbeta (fp32)", db, 2e-5, lat);
        /* dbias_sub sums dsub as stored (rounded, what the GEMMs read): the
         * reference is the CPU's column sums of the GPU's dsub */
        sync_pair(ds);
        if (!alias) cpu->bias_backward(cpu, ds.c, F(dbs.c), act_none(), rows, d, 0);
        compare(alias ? "16-bit residual_ln_backward: no dbias_sub asked, untouched"
                      : "16-bit residual_ln_backward: dbias_sub (fp32, of the rounded dsub)", dbs, 2e-5, lat);
        pair_free(x); pair_free(sub); pair_free(g); pair_free(b); pair_free(y); pair_free(r); pair_free(mu);
        pair_free(rs); pair_free(dy); pair_free(dx); pair_free(ds); pair_free(dg); pair_free(db); pair_free(r2);
        pair_free(dbs);
    }
}


static void test_bf16_residual_ln_embed(void)
{
    static const LnCase cases[] = { { 77, LN_BLOCK, 25 }, { 40, LN_ROWS, 25 }, { 520, LN_WIDE, 25 },
                                    { 1032, LN_BLOCK, 25 }, LN_LONG_CASE };
    uint32_t sid[3] = { 5, 900, 77777 };
    uint32_t *sc = dev_copy(cpu, sid, sizeof sid), *sg = dev_copy(gpu, sid, sizeof sid);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        test_bf16_residual_ln_d(cases[k].d, cases[k].kernel, cases[k].T, sc, sg);
    cpu->free(cpu, sc);
    gpu->free(gpu, sg);

    embed_forward_at(45, 1);
    embed_forward_at(48, 1);
    int Bt = EB_B, Tt = EB_T, de = 45, V = EB_V, maxlen = 64;
    int32_t tok[EB_B * EB_T];
    embed_batch(tok);
    uint32_t sid2[EB_B] = { 3, 1, 4, 15 };
    int32_t *tc = dev_copy(cpu, tok, sizeof tok), *tg = dev_copy(gpu, tok, sizeof tok);
    uint32_t *s2c = dev_copy(cpu, sid2, sizeof sid2), *s2g = dev_copy(gpu, sid2, sizeof sid2);
    DropoutKey k2 = { 99, 3, 1 };
    for (int learned = 0; learned < 2; learned++) {   /* (the forward: embed_forward_at above) */
        size_t ne = (size_t)Bt * Tt * de;
        Pair dout = pair_bf(ne, 1, 1), dE = pair_bf((size_t)V * de, 1, 0), dpos = pair_bf((size_t)maxlen * de, 1, 0);
        float *dE0 = malloc(sizeof(float) * V * de);
        gpu->download(gpu, dE0, F(dE.g), sizeof(float) * V * de);
        pad_rows(dout, tok, Bt * Tt, de, 0.0f);
        cpu->embed_backward(cpu, F(dE.c), learned ? F(dpos.c) : NULL, dout.c, tc, NULL, s2c, Bt, Tt, de, V, 6.7f,
                            0.1f, k2);
        gpu->embed_backward(gpu, F(dE.g), learned ? F(dpos.g) : NULL, dout.g, tg, tok, s2g, Bt, Tt, de, V, 6.7f, 0.1f,
                            k2);
        compare("16-bit embed_backward: dE (fp32)", dE, BF_F32);
        if (learned) compare("16-bit embed_backward: dpos (fp32)", dpos, BF_F32);
        else check_embed_gpu(dout, dE0, tok, s2g, de, k2, 0);
        pair_free(dout); pair_free(dE); pair_free(dpos);
        free(dE0);
    }
    cpu->free(cpu, tc); gpu->free(gpu, tg); cpu->free(cpu, s2c); gpu->free(gpu, s2g);
}

/* memory operations on bf16 activations, and their byte count */
static void test_bf16_memory(void)
{
    size_t n = 1003, before = gpu->act_bytes;
    Pair a = pair_bf(n, 1, 1), b = pair_bf(n, 1, 1), f = pair_bf(n, 1, 0);
    if (gpu->act_bytes - before != 2 * 2 * n) {
        failures++;
        printf("FAIL [%s] bf16 act_bytes grew by %zu for 2 x %zu elements, not %zu\n", order_name,
               gpu->act_bytes - before, n, 4 * n);
    }
    checks++;
    cpu->copy_act(cpu, act_at(b.c, 1), act_at(a.c, 2), n - 2);   /* offsets inside the views */
    gpu->copy_act(gpu, act_at(b.g, 1), act_at(a.g, 2), n - 2);
    compare("16-bit copy act -> act (offsets)", b, 0, 0);
    cpu->copy_act(cpu, f.c, a.c, n);
    gpu->copy_act(gpu, f.g, a.g, n);
    compare("16-bit copy act -> fp32 (widening: exact)", f, 0, 0);
    float *h = rand_host(n, 3);   /* not bf16-exact: rounded by the upload */
    cpu->upload_act(cpu, f.c, h, n);
    gpu->upload_act(gpu, f.g, h, n);
    cpu->copy_act(cpu, a.c, f.c, n);
    gpu->copy_act(gpu, a.g, f.g, n);
    compare("16-bit copy fp32 -> act (rounding <= U)", a, U, 0);
    cpu->upload_act(cpu, act_at(b.c, 5), h, 100);
    gpu->upload_act(gpu, act_at(b.g, 5), h, 100);
    compare("16-bit upload into act at offset (rounding <= U)", b, U, 0);
    free(h);
    cpu->zero_act(cpu, act_at(a.c, 10), 50);
    gpu->zero_act(gpu, act_at(a.g, 10), 50);
    compare("16-bit zero act range", a, U, 0);
    pair_free(a); pair_free(b); pair_free(f);
    if (gpu->act_bytes != before) {
        failures++;
        printf("FAIL [%s] bf16 act_bytes %zu after free, %zu before\n", order_name, gpu->act_bytes, before);
    }
    checks++;
}

/* cublasGemmEx type combinations (cuBLAS documentation, cublasGemmEx):
 * with CUBLAS_COMPUTE_32F, A and B both fp32, both bf16 or both fp16, C
 * fp32 or (16-bit inputs) the inputs' type; the _FAST_ compute types only with all-fp32 storage; mixed
 * input types never.  The emulator must accept and reject exactly these.
 * Real cuBLAS 13.0 on an H200 (make gpu-accept, 2026-11-26) refused every
 * mixed combination but accepted the three _FAST_ ones with 16-bit storage
 * (undoc = 1) that the table leaves out: the library may do more than it
 * documents, so on a real GPU those print a note; the backend never uses
 * them, and the emulator refusing them keeps it from starting to. */
static void test_cublas_types(void)
{
    static const struct { cudaDataType a, b, c; cublasComputeType_t ct; int ok, undoc; } cases[] = {
        { CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 1, 0 },
        { CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 0 },
        { CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 1, 0 },
        { CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF, 1, 0 },
        { CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 0 },
        { CUDA_R_16BF, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0, 0 },
        { CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0, 0 },
        { CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F_FAST_16BF, 0, 1 },
        { CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 0, 1 },
        { CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 1, 0 },
        { CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 1, 0 },
        { CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 0 },
        { CUDA_R_32F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 0 },
        { CUDA_R_16F, CUDA_R_16F, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0, 0 },
        { CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F_FAST_16BF, 0, 1 },
    };
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        failures++;
        printf("FAIL cublasCreate\n");
        return;
    }
    /* the backend's math mode for fp32/bf16 (the emulator refuses a bf16 C
     * whose partial sums cuBLAS might reduce in bf16) */
    cublasStatus_t ms = cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    checks++;
    failures += ms != CUBLAS_STATUS_SUCCESS;
    printf("%s cublasSetMathMode(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION): %s\n",
           ms == CUBLAS_STATUS_SUCCESS ? "ok  " : "FAIL", cublasGetStatusString(ms));
    void *A = gpu->alloc(gpu, 4 * 64), *B = gpu->alloc(gpu, 4 * 64), *C = gpu->alloc(gpu, 4 * 64);
    /* the handle has no stream: the legacy default stream, which does not
     * wait for the backend's non-blocking stream that zeroes the buffers */
    gpu->sync(gpu);
    float one = 1.0f, zero = 0.0f;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, A, cases[i].a, 4, B, cases[i].b,
                                         4, &zero, C, cases[i].c, 4, cases[i].ct, CUBLAS_GEMM_DEFAULT);
        int ok = cases[i].ok ? st == CUBLAS_STATUS_SUCCESS : st == CUBLAS_STATUS_NOT_SUPPORTED;
        /* undocumented but accepted: a note on a real GPU, a failure of the emulator */
        int note = !ok && cases[i].undoc && st == CUBLAS_STATUS_SUCCESS && !cuda_emu_set_order;
        checks++;
        failures += !ok && !note;
        printf("%s cublasGemmEx types A=%d B=%d C=%d compute=%d: %s (expected %s)\n", note ? "note" : ok ? "ok  " : "FAIL",
               (int)cases[i].a, (int)cases[i].b, (int)cases[i].c, (int)cases[i].ct, cublasGetStatusString(st),
               cases[i].ok ? "success" : "not supported");
    }
    gpu->sync(gpu);
    gpu->free(gpu, A);
    gpu->free(gpu, B);
    gpu->free(gpu, C);
    cublasDestroy(h);
}

/* one 4x4x4 cublasLtMatmul (D = op(A)^T B, the backend's form) with the
 * arguments of case c, which differ from a valid call in one place */
typedef struct {
    const char *what;
    cudaDataType a, b, c, d;
    int lda, b_rows, null_handle, bias;
    uint32_t epi;
    int32_t bias_type;
    int64_t aux_ld;
    cublasStatus_t want;
} LtCase;

static cublasStatus_t lt_try(cublasLtHandle_t h, const LtCase *c, void *buf, void *aux)
{
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    int32_t tA = CUBLAS_OP_T;
    void *bias = c->bias ? buf : NULL;
    float one = 1.0f, zero = 0.0f;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c->bias_type, sizeof c->bias_type);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &c->aux_ld, sizeof c->aux_ld);
    if (c->aux_ld) cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    cublasLtMatrixLayoutCreate(&la, c->a, 4, 4, c->lda);
    cublasLtMatrixLayoutCreate(&lb, c->b, c->b_rows, 4, 8);
    cublasLtMatrixLayoutCreate(&lc, c->c, 4, 4, 4);
    cublasLtMatrixLayoutCreate(&ld, c->d, 4, 4, 4);
    cublasStatus_t st = cublasLtMatmul(c->null_handle ? NULL : h, d, &one, buf, la, buf, lb, &zero, buf, lc, buf, ld,
                                       NULL, NULL, 0, 0);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(d);
    return st;
}

/* The emulated cuBLASLt refuses what cublasLt.h documents as invalid
 * (emulator only: where the header is silent, e.g. an fp32 bias for a bf16
 * D, a real library may accept more than the emulator, which holds the
 * backend to the documented rules) */
static void test_cublaslt_args(void)
{
#define R32 CUDA_R_32F
#define BF CUDA_R_16BF
#define EB CUBLASLT_EPILOGUE_BIAS
    static const LtCase cases[] = {
        { "valid, bias", R32, R32, R32, R32, 4, 4, 0, 1, EB, -1, 0, CUBLAS_STATUS_SUCCESS },
        { "valid, relu + bias, bias type = D", BF, BF, BF, BF, 4, 4, 0, 1, CUBLASLT_EPILOGUE_RELU_BIAS, BF, 0,
          CUBLAS_STATUS_SUCCESS },
        { "no handle", R32, R32, R32, R32, 4, 4, 1, 1, EB, -1, 0, CUBLAS_STATUS_NOT_INITIALIZED },
        { "lda below rows", R32, R32, R32, R32, 3, 4, 0, 1, EB, -1, 0, CUBLAS_STATUS_INVALID_VALUE },
        { "k of A and B differ", R32, R32, R32, R32, 4, 5, 0, 1, EB, -1, 0, CUBLAS_STATUS_INVALID_VALUE },
        { "bias epilogue without bias", R32, R32, R32, R32, 4, 4, 0, 0, EB, -1, 0, CUBLAS_STATUS_INVALID_VALUE },
        { "fp32 bias for a bf16 D", BF, BF, BF, BF, 4, 4, 0, 1, EB, R32, 0, CUBLAS_STATUS_NOT_SUPPORTED },
        { "valid, relu + bias + mask", R32, R32, R32, R32, 4, 4, 0, 1, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, -1, 128,
          CUBLAS_STATUS_SUCCESS },
        { "valid, drelu from the mask", R32, R32, R32, R32, 4, 4, 0, 0, CUBLASLT_EPILOGUE_DRELU, -1, 128,
          CUBLAS_STATUS_SUCCESS },
        { "relu mask ld not a multiple of 128", R32, R32, R32, R32, 4, 4, 0, 1, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, -1,
          100, CUBLAS_STATUS_INVALID_VALUE },
        { "drelu without a mask", R32, R32, R32, R32, 4, 4, 0, 0, CUBLASLT_EPILOGUE_DRELU, -1, 0,
          CUBLAS_STATUS_INVALID_VALUE },
        { "drelu with bias gradient (not emulated)", R32, R32, R32, R32, 4, 4, 0, 1, CUBLASLT_EPILOGUE_DRELU_BGRAD, -1,
          128, CUBLAS_STATUS_NOT_SUPPORTED },
        { "A fp32 with B bf16", R32, BF, R32, R32, 4, 4, 0, 1, EB, -1, 0, CUBLAS_STATUS_NOT_SUPPORTED },
        { "C and D of different types", BF, BF, R32, BF, 4, 4, 0, 1, EB, -1, 0, CUBLAS_STATUS_NOT_SUPPORTED },
    };
#undef R32
#undef BF
#undef EB
    if (!cuda_emu_set_order) return;
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    void *buf = gpu->alloc(gpu, 4 * 64), *aux = gpu->alloc(gpu, 4 * 128 / 8);
    gpu->sync(gpu);   /* (stream 0 does not wait for the zeroing on the backend's stream) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cublasStatus_t st = lt_try(h, &cases[i], buf, aux);
        checks++;
        failures += st != cases[i].want;
        printf("%s cublasLtMatmul %s: %s (expected %s)\n", st == cases[i].want ? "ok  " : "FAIL", cases[i].what,
               cublasGetStatusString(st), cublasGetStatusString(cases[i].want));
    }
    /* an attribute of the wrong size */
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int64_t e = CUBLASLT_EPILOGUE_BIAS;
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    checks++;
    failures += st != CUBLAS_STATUS_INVALID_VALUE;
    printf("%s cublasLtMatmulDescSetAttribute epilogue of 8 bytes: %s\n",
           st == CUBLAS_STATUS_INVALID_VALUE ? "ok  " : "FAIL", cublasGetStatusString(st));
    cublasLtMatmulDescDestroy(d);
    gpu->sync(gpu);
    gpu->free(gpu, buf);
    gpu->free(gpu, aux);
    cublasLtDestroy(h);
}

/* ---------------------------------------- cuBLASLt under strict rules */

/* f() in a forked child with stderr captured: want != NULL expects the
 * emulator's misuse exit (99) with want in its message */
static void expect_emu_error(const char *what, void (*f)(void), const char *want)
{
    int fd[2];
    if (pipe(fd)) { perror("pipe"); exit(1); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        f();
        _exit(0);
    }
    close(fd[1]);
    char msg[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof msg - 1 && (r = read(fd[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)r;
    msg[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1, ok = code == 99 && strstr(msg, want);
    char *nl = strchr(msg, '\n');
    if (nl) *nl = 0;
    checks++;
    failures += !ok;
    printf("%s %s: exit %d: %s\n", ok ? "ok  " : "FAIL", what, code, msg);
}

/* one 4x4x4 heuristic query (and matmul) with a planted defect in one place */
typedef struct {
    cudaDataType t;          /* A, B, C and D */
    uint32_t epi, reduction;
    int ld;                  /* of every layout (4 if 0): distinct plans */
    int bias_off, aux_off;   /* bytes past 16-byte boundaries, at the heuristic */
    int bias_moved;          /* bytes the bias moves between heuristic and matmul */
    int ws_off, ws_short;    /* workspace address offset; bytes below workspaceSize */
} LtStrict;

static char *lt_buf, *lt_aux, *lt_ws;   /* device memory of the cases */
static LtStrict lt_case;                /* the case a forked child runs */

static cublasStatus_t lt_strict(const LtStrict *c, int run, int *found)
{
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulPreference_t p;
    cublasLtMatmulHeuristicResult_t res;
    int32_t tA = CUBLAS_OP_T;
    int64_t aux_ld = 128, ld = c->ld ? c->ld : 4;
    uint64_t ws = 1 << 20;
    void *bias = lt_buf + 1024 + c->bias_off, *aux = lt_aux + c->aux_off;
    float one = 1.0f, zero = 0.0f;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    cublasLtMatrixLayoutCreate(&l, c->t, 4, 4, ld);
    cublasLtMatmulPreferenceCreate(&p);
    cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &c->reduction,
                                         sizeof c->reduction);
    *found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, l, l, l, l, p, 1, &res, found);
    if (st == CUBLAS_STATUS_SUCCESS && *found && run) {
        bias = (char *)bias + c->bias_moved;
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        st = cublasLtMatmul(h, d, &one, lt_buf, l, lt_buf, l, &zero, lt_buf + 2048, l, lt_buf + 2048, l, &res.algo,
                            lt_ws + c->ws_off, res.workspaceSize - c->ws_short, 0);
        gpu->sync(gpu);
    }
    cublasLtMatmulPreferenceDestroy(p);
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
    return st;
}

static void lt_child(void)
{
    int found;
    lt_strict(&lt_case, 1, &found);
}

/* a case run in this process: its status and whether an algorithm was found */
static void lt_expect(const char *what, const LtStrict *c, int run, cublasStatus_t want, int want_found)
{
    int found;
    cublasStatus_t st = lt_strict(c, run, &found);
    int ok = st == want && (st != CUBLAS_STATUS_SUCCESS || !found == !want_found);
    checks++;
    failures += !ok;
    printf("%s cuBLASLt %s: %s, %d found\n", ok ? "ok  " : "FAIL", what, cublasGetStatusString(st), found);
}

/* whether plan c is refused (NOT_SUPPORTED or nothing found) */
static int lt_refused(const LtStrict *c)
{
    int found;
    return lt_strict(c, 0, &found) != CUBLAS_STATUS_SUCCESS || !found;
}

#define EB CUBLASLT_EPILOGUE_BIAS
#define RED_C CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
#define RED_IC (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)

/* LT_REDUCTION: INPLACE reduces in D's type; LT_WORKSPACE */
static void test_lt_reduction_workspace(void)
{
    LtStrict ok16 = { CUDA_R_16BF, EB, RED_C, 0, 0, 0, 0, 0, 0 };
    lt_expect("bf16 D, reduction COMPUTE_TYPE only", &ok16, 1, CUBLAS_STATUS_SUCCESS, 1);
    lt_case = (LtStrict){ CUDA_R_16BF, EB, RED_IC, 0, 0, 0, 0, 0, 0 };
    expect_emu_error("LT_REDUCTION: bf16 D, reduction mask with INPLACE", lt_child, "REDUCTION_SCHEME_INPLACE");
    lt_case.t = CUDA_R_16F;
    expect_emu_error("LT_REDUCTION: fp16 D, reduction mask with INPLACE", lt_child, "REDUCTION_SCHEME_INPLACE");
    LtStrict f32 = { CUDA_R_32F, EB, RED_IC, 0, 0, 0, 0, 0, 0 };
    lt_expect("fp32 D, reduction mask with INPLACE", &f32, 0, CUBLAS_STATUS_SUCCESS, 1);
    setenv("CUDA_EMU_STRICT_LT_REDUCTION", "0", 1);
    lt_case.t = CUDA_R_16BF;
    lt_expect("bf16 D with INPLACE, LT_REDUCTION off", &lt_case, 0, CUBLAS_STATUS_SUCCESS, 1);
    setenv("CUDA_EMU_STRICT_LT_REDUCTION", "1", 1);
    LtStrict ws = { CUDA_R_32F, EB, RED_C, 0, 0, 0, 0, 0, 0 };
    lt_expect("workspace of workspaceSize, 256-byte aligned", &ws, 1, CUBLAS_STATUS_SUCCESS, 1);
    lt_case = ws;
    lt_case.ws_short = 256;
    expect_emu_error("LT_WORKSPACE: workspace below workspaceSize", lt_child, "workspace of");
    lt_case = ws;
    lt_case.ws_off = 128;
    expect_emu_error("LT_WORKSPACE: workspace not 256-byte aligned", lt_child, "not 256-byte aligned");
}

/* LT_ALIGN: bias and ReLU mask 16-byte aligned */
static void test_lt_align(void)
{
    uint32_t aux_epi = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    LtStrict c = { CUDA_R_32F, EB, RED_C, 0, 16, 0, 0, 0, 0 };
    lt_expect("bias at a 16-byte boundary", &c, 1, CUBLAS_STATUS_SUCCESS, 1);
    c.bias_off = 8;
    lt_expect("LT_ALIGN: bias 8 bytes past one (no algorithm)", &c, 0, CUBLAS_STATUS_NOT_SUPPORTED, 0);
    c = (LtStrict){ CUDA_R_32F, aux_epi, RED_C, 0, 0, 4, 0, 0, 0 };
    lt_expect("LT_ALIGN: ReLU mask 4 bytes past one (no algorithm)", &c, 0, CUBLAS_STATUS_NOT_SUPPORTED, 0);
    lt_case = (LtStrict){ CUDA_R_16BF, EB, RED_C, 0, 0, 0, 8, 0, 0 };
    expect_emu_error("LT_ALIGN: a plan run with a bias 8 bytes off", lt_child, "not 16-byte aligned");
    setenv("CUDA_EMU_STRICT_LT_ALIGN", "0", 1);
    c.aux_off = 4;
    lt_expect("ReLU mask 4 bytes off, LT_ALIGN off", &c, 1, CUBLAS_STATUS_SUCCESS, 1);
    setenv("CUDA_EMU_STRICT_LT_ALIGN", "1", 1);
}

/* LT_HEURISTIC: a seeded fraction of distinct plans refused, the same
 * ones each time; CUDA_EMU_LT_NO_EPILOGUE refuses epilogues by kind */
static void test_lt_heuristic(void)
{
    int n = 40, refused[2] = { 0, 0 }, same = 1, seed2 = 0;
    setenv("CUDA_EMU_STRICT_LT_HEURISTIC", "1", 1);
    for (int i = 0; i < n; i++) {
        LtStrict c = { CUDA_R_32F, EB, RED_C, 4 + i, 0, 0, 0, 0, 0 };
        int a = lt_refused(&c), b = lt_refused(&c);
        setenv("CUDA_EMU_SEED", "2", 1);
        seed2 += lt_refused(&c);
        unsetenv("CUDA_EMU_SEED");
        refused[0] += a;
        same = same && a == b;
    }
    int ok = refused[0] > 0 && refused[0] < n && same;
    checks++;
    failures += !ok;
    printf("%s LT_HEURISTIC: %d of %d distinct plans refused (seed 2: %d), the same on a second query\n",
           ok ? "ok  " : "FAIL", refused[0], n, seed2);
    setenv("CUDA_EMU_STRICT_LT_HEURISTIC", "0", 1);
    for (int i = 0; i < n; i++) {
        LtStrict c = { CUDA_R_32F, EB, RED_C, 4 + i, 0, 0, 0, 0, 0 };
        refused[1] += lt_refused(&c);
    }
    checks++;
    failures += refused[1] != 0;
    printf("%s LT_HEURISTIC off: %d of %d refused\n", refused[1] ? "FAIL" : "ok  ", refused[1], n);
    static const struct { const char *mode; int bias, drelu; } modes[] = {
        { "1", 1, 1 }, { "forward", 1, 0 }, { "drelu", 0, 1 }, { "0", 0, 0 } };
    for (int m = 0; m < 4; m++) {
        setenv("CUDA_EMU_LT_NO_EPILOGUE", modes[m].mode, 1);
        LtStrict b = { CUDA_R_32F, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, RED_C, 0, 0, 0, 0, 0, 0 };
        LtStrict d = { CUDA_R_32F, CUBLASLT_EPILOGUE_DRELU, RED_C, 0, 0, 0, 0, 0, 0 };
        int rb = lt_refused(&b), rd = lt_refused(&d);
        ok = rb == modes[m].bias && rd == modes[m].drelu;
        checks++;
        failures += !ok;
        printf("%s CUDA_EMU_LT_NO_EPILOGUE=%s: RELU_AUX_BIAS %s, DRELU %s\n", ok ? "ok  " : "FAIL", modes[m].mode,
               rb ? "refused" : "planned", rd ? "refused" : "planned");
    }
    unsetenv("CUDA_EMU_LT_NO_EPILOGUE");
}

#undef EB
#undef RED_C
#undef RED_IC

/* the strict cuBLASLt rules (emulator only), each on its own */
static void test_lt_strict(void)
{
    if (!cuda_emu_set_order) return;
    lt_buf = gpu->alloc(gpu, 4096);
    lt_aux = gpu->alloc(gpu, 4096);
    lt_ws = gpu->alloc(gpu, (1 << 20) + 256);
    /* the cases call cuBLASLt on the legacy stream: the backend's stream
     * must have zeroed the buffers first (rule RACE) */
    gpu->sync(gpu);
    /* each rule on whatever CUDA_EMU_STRICT says; no seeded refusals but
     * where tested; the caller's settings back afterwards */
    static const char *rules[4] = { "CUDA_EMU_STRICT_LT_REDUCTION", "CUDA_EMU_STRICT_LT_ALIGN",
                                    "CUDA_EMU_STRICT_LT_WORKSPACE", "CUDA_EMU_STRICT_LT_HEURISTIC" };
    char *saved[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(rules[i]);
        saved[i] = v ? strdup(v) : NULL;
        setenv(rules[i], i < 3 ? "1" : "0", 1);
    }
    test_lt_reduction_workspace();
    test_lt_align();
    test_lt_heuristic();
    for (int i = 0; i < 4; i++) {
        if (saved[i]) setenv(rules[i], saved[i], 1);
        else unsetenv(rules[i]);
        free(saved[i]);
    }
    gpu->sync(gpu);
    gpu->free(gpu, lt_buf);
    gpu->free(gpu, lt_aux);
    gpu->free(gpu, lt_ws);
}

/* what only fp16 needs: stores past 65504 become inf (no saturation that
 * would hide an overflow from the loss scaler), masked attention logits
 * are never read (huge values there change nothing), and any_nonfinite
 * finds one inf or NaN among many finite gradients on both backends */
static void test_fp16_range(void)
{
    float big[4] = { 70000.0f, -70000.0f, 65504.0f, 1.0f }, back[4];
    Act a = gpu->alloc_act(gpu, 4);
    gpu->upload_act(gpu, a, big, 4);
    gpu->download_act(gpu, back, a, 4);
    gpu->free(gpu, a.data);
    checks++;
    if (!(isinf(back[0]) && back[0] > 0 && isinf(back[1]) && back[1] < 0 && back[2] == 65504.0f && back[3] == 1.0f)) {
        failures++;
        printf("FAIL fp16 overflow: 70000, -70000, 65504, 1 stored as %g %g %g %g\n", back[0], back[1], back[2], back[3]);
    } else printf("ok   fp16 stores past 65504 become +-inf, 65504 is exact\n");
    int nb = 2, nh = 1, Tq = 3, Tk = 9;
    int32_t klen[2] = { 4, 0 };
    int32_t *kc = dev_copy(cpu, klen, sizeof klen), *kg = dev_copy(gpu, klen, sizeof klen);
    size_t n = (size_t)nb * nh * Tq * Tk;
    Pair S = pair_bf(n, 4, 1);
    float *h = malloc(sizeof(float) * n);
    gpu->download_act(gpu, h, S.g, n);
    for (size_t i = 0; i < n; i++)
        if ((int)(i % Tk) >= klen[i / ((size_t)nh * Tq * Tk)]) h[i] = 60000.0f;   /* masked: near fp16's max */
    cpu->upload_act(cpu, S.c, h, n);
    gpu->upload_act(gpu, S.g, h, n);
    free(h);
    cpu->softmax_forward(cpu, S.c, kc, 0.3f, nb, nh, Tq, Tk, 0, 0);
    gpu->softmax_forward(gpu, S.g, kg, 0.3f, nb, nh, Tq, Tk, 0, 0);
    compare("fp16 softmax: huge masked logits give exact 0", S, BF_OUT);
    cpu->free(cpu, kc);
    gpu->free(gpu, kg);
    pair_free(S);
    /* any_nonfinite over fp32 gradients */
    size_t ng = 1000;
    float *g = rand_host(ng, 100);
    float *gc = cpu->alloc(cpu, 4 * ng), *gg = gpu->alloc(gpu, 4 * ng);
    for (int k = 0; k < 3; k++) {
        if (k) g[777] = k == 1 ? INFINITY : NAN;
        cpu->upload(cpu, gc, g, 4 * ng);
        gpu->upload(gpu, gg, g, 4 * ng);
        int want = k > 0, c = cpu->any_nonfinite(cpu, gc, ng), d = gpu->any_nonfinite(gpu, gg, ng);
        checks++;
        failures += c != want || d != want;
        printf("%s any_nonfinite with %s: cpu %d, cuda %d\n", c == want && d == want ? "ok  " : "FAIL",
               k == 0 ? "finite values" : k == 1 ? "one inf" : "one NaN", c, d);
    }
    free(g);
    cpu->free(cpu, gc);
    gpu->free(gpu, gg);
}

/* host data (16-bit exact) as a 16-bit activation on the GPU, fp32 on the CPU */
static Pair pair_act(const float *h, size_t n)
{
    Pair p = { act_f32(cpu->alloc(cpu, 4 * n)), gpu->alloc_act(gpu, n), n };
    cpu->upload_act(cpu, p.c, h, n);
    gpu->upload_act(gpu, p.g, h, n);
    return p;
}

/* The fused attention core (cuda/attention.cuh, issue 32) through its
 * Backend hooks, which must take every shape here (return 1), against the
 * CPU's attention_core_forward/_backward (batched GEMMs and softmax in
 * fp32).  The shapes: lengths that are no multiple of the kernels' tiles
 * (16 queries, 32 and 16 keys), d_k != d_v, both at the limit of 128,
 * Tk at the limit of 256 keys, a sentence with no valid key (every row
 * masked: P and ctx exact 0), padding masks, and the decoder's causal mask
 * over Q, K, V interleaved in one buffer as the model stores them (so a
 * stray write into a neighbour's columns shows up; the cross-attention
 * case has row strides with unused columns, which must stay untouched).
 * In 16-bit storage the inputs are exact in the 16-bit type (pair_bf).
 * 16-bit backward runs in one kernel where Tq, Tk, d_k and d_v are all at
 * most 64 (cuda/attention_tc.cuh, TC_BWD_MAX), in the dQ and the dK, dV
 * kernels beyond: the cases put each of the four at 64 and at 65, and each
 * says which must run (one_kernel). */
typedef struct {
    const char *what;
    AttnShape s;
    int Tq, Tk, causal, self;
    int32_t klen[3];
    int one_kernel;   /* 16-bit backward: k_attention_backward_tc (1) or the dQ and dK, dV kernels (0) */
} FaCase;

/* every element that is exactly 0 on the CPU (masked: ops.h) is exactly 0
 * on the GPU */
static void fa_masked_zero(const char *what, Pair p)
{
    float *a = malloc(4 * p.n), *b = malloc(4 * p.n);
    cpu->download_act(cpu, a, p.c, p.n);
    gpu->download_act(gpu, b, p.g, p.n);
    size_t bad = 0, zeros = 0;
    for (size_t i = 0; i < p.n; i++)
        if (a[i] == 0.0f) {
            zeros++;
            bad += b[i] != 0.0f;
        }
    checks++;
    if (bad || !zeros) {
        failures++;
        printf("FAIL [%s] %s: %zu of %zu masked entries not exactly 0\n", order_name, what, bad, zeros);
    } else {
        printf("ok   [%s] %-44s %zu masked entries exactly 0\n", order_name, what, zeros);
    }
    free(a);
    free(b);
}

/* the attention kernels logged since cuda_cost_log(1) were the tensor-core
 * ones (cuda/attention_tc.cuh, named *_tc) for 16-bit storage and the
 * CUDA-core ones (cuda/attention.cuh) for fp32, and backward was
 * k_attention_backward_tc alone where the case says one_kernel (16-bit
 * only), else one dQ kernel and one dK, dV kernel */
static void fa_kernels_were(const FaCase *fc, int lowp)
{
    const CostCall *c;
    size_t n = cuda_cost_calls(&c), att = 0, wrong = 0, one = 0, dq = 0, dkv = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(c[i].call, "k_attention_")) {
            att++;
            wrong += (strstr(c[i].call, "_tc<") != NULL) != (lowp != 0);
            one += strstr(c[i].call, "k_attention_backward_tc<") != NULL;
            dq += strstr(c[i].call, "k_attention_backward_dq") != NULL;
            dkv += strstr(c[i].call, "k_attention_backward_dkv") != NULL;
        }
    cuda_cost_log(0);
    int want_one = lowp && fc->one_kernel;
    int bwd_ok = want_one ? one == 1 && dq == 0 && dkv == 0 : one == 0 && dq == 1 && dkv == 1;
    checks++;
    if (!att || wrong) {
        failures++;
        printf("FAIL [%s] fused attention %s: %zu of %zu attention kernels not the %s ones\n", order_name, fc->what,
               wrong, att, lowp ? "tensor-core" : "CUDA-core");
    } else if (!bwd_ok) {
        failures++;
        printf("FAIL [%s] fused attention %s: backward ran %zu one-kernel, %zu dQ and %zu dK, dV launches, not %s\n",
               order_name, fc->what, one, dq, dkv,
               want_one ? "k_attention_backward_tc alone" : "one dQ and one dK, dV");
    } else {
        printf("ok   [%s] fused attention %-34s ran the %s kernels, backward in %s\n", order_name, fc->what,
               lowp ? "tensor-core" : "CUDA-core", want_one ? "one" : "two");
    }
}

/* a new GPU activation of a's type holding a's n elements */
static Act gpu_clone(Act a, size_t n)
{
    Act c = a.dtype == DT_F32 ? act_f32(gpu->alloc(gpu, 4 * n)) : gpu->alloc_act(gpu, n);
    gpu->copy_act(gpu, c, a, n);
    return c;
}

/* the n elements of GPU activations a and b, bit for bit (16-bit values
 * widen to fp32 exactly), or (b.data NULL) all exactly 0 */
static int gpu_same_bits(Act a, Act b, size_t n)
{
    float *x = malloc(4 * n), *y = calloc(n, 4);
    gpu->download_act(gpu, x, a, n);
    if (b.data) gpu->download_act(gpu, y, b, n);
    int same = !memcmp(x, y, 4 * n);
    free(x);
    free(y);
    return same;
}

/* 16-bit: the forward given row statistics keeps them instead of P
 * exactly where the one-kernel backward takes the shape, leaves P as it
 * was (zeroed here) and writes the same ctx; that backward, recomputing
 * P from Q, K and the statistics, writes dQ, dK, dV bit for bit as from
 * the stored P.  ctx0, dQ0, dKV0: the outputs' contents before the first
 * run (so that a kernel writing nothing fails) */
static void fa_recompute_case(const FaCase *fc, Pair Q, Pair KV, Pair P, Pair ctx, Pair dctx, Pair dP, Pair dQ,
                              Pair dKV, Act ctx0, Act dQ0, Act dKV0, const int32_t *kg, int ldq, int ldkv)
{
    AttnShape s = fc->s;
    size_t ko = fc->self ? (size_t)s.h * s.dk : 0, vo = ko + (size_t)s.h * s.dk;
    float *stats = gpu->alloc(gpu, sizeof(float) * 2 * s.B * s.h * fc->Tq);
    Act Pz = gpu_clone(P.g, P.n);
    gpu->zero_act(gpu, Pz, P.n);
    int kept = gpu->attention_forward(gpu, s, Q.g, ldq, act_at(KV.g, ko), act_at(KV.g, vo), ldkv, Pz, stats, ctx0,
                                      fc->Tq, fc->Tk, kg, fc->causal);
    int want = fc->one_kernel ? ATTN_KEPT_STATS : ATTN_KEPT_P;
    int fwd_ok = kept == want && gpu_same_bits(ctx0, ctx.g, ctx.n) &&
                 gpu_same_bits(Pz, want == ATTN_KEPT_P ? P.g : act_none(), P.n);
    int bwd_ok = 1;
    if (kept == ATTN_KEPT_STATS) {
        int took = gpu->attention_backward(gpu, s, Q.g, ldq, act_at(KV.g, ko), act_at(KV.g, vo), ldkv, Pz, stats, kg,
                                           fc->causal, dP.g, dctx.g, dQ0, act_at(fc->self ? dQ0 : dKV0, ko),
                                           act_at(fc->self ? dQ0 : dKV0, vo), fc->Tq, fc->Tk);
        bwd_ok = took && gpu_same_bits(dQ0, dQ.g, dQ.n) && (fc->self || gpu_same_bits(dKV0, dKV.g, dKV.n));
    }
    checks++;
    if (!fwd_ok || !bwd_ok) {
        failures++;
        printf("FAIL [%s] fused attention %s with row statistics: kept %d (want %d), forward %s, backward %s\n",
               order_name, fc->what, kept, want, fwd_ok ? "same" : "differs", bwd_ok ? "same" : "differs");
    } else {
        printf("ok   [%s] fused attention %-34s %s\n", order_name, fc->what,
               want == ATTN_KEPT_STATS ? "P recomputed from row statistics: same bits" : "keeps P (two-kernel backward)");
    }
    gpu->free(gpu, stats);
    gpu->free(gpu, Pz.data);
}

/* Tolerances.  fp32: only the order of fp32 sums differs (FP32; measured
 * worst err/tol 0.16 for ctx, under 0.1 elsewhere).  16-bit (the tensor-core
 * kernels): the scores stay fp32 and P is rounded once when stored
 * (BF_OUT: 2 U relative; measured up to 0.49, the half-U rounding); ctx =
 * P V multiplies that rounded P on the tensor cores, each term off by up
 * to U/2 of itself, so after the cancellation in the sum over keys the
 * error is relative to sum |P V| <= max |V|, not to each element: atol
 * 2 U of the largest |ctx| on top of its own rounding (measured: worst
 * err/tol 0.31, bf16 and fp16); backward runs on the GPU's rounded P on both sides (sync_pair), so
 * dV = P^T dctx is again one rounding; dQ and dK are sums over keys
 * (queries) of dS rounded to 16 bits, each term off by up to U/2 of
 * itself, which after the cancellation in the sum is relative to the
 * largest |dQ| (|dK|), not to each element: atol 4 U of it (measured:
 * worst err/tol 0.13, bf16 and fp16). */
static void fa_case(const FaCase *fc, int lowp)
{
    AttnShape s = fc->s;
    int hk = s.h * s.dk, hv = s.h * s.dv, Tq = fc->Tq, Tk = fc->Tk;
    int ldq = fc->self ? 2 * hk + hv : hk + 3, ldkv = fc->self ? ldq : hk + hv + 1;
    size_t nq = (size_t)s.B * Tq * ldq, nkv = fc->self ? 0 : (size_t)s.B * Tk * ldkv;
    size_t nP = (size_t)s.B * s.h * Tq * Tk, nctx = (size_t)s.B * Tq * hv;
    int32_t *kc = dev_copy(cpu, fc->klen, sizeof(int32_t) * s.B), *kg = dev_copy(gpu, fc->klen, sizeof(int32_t) * s.B);
    Pair Q = batched_pair(nq, lowp), KV = fc->self ? Q : batched_pair(nkv, lowp);
    Pair P = batched_pair(nP, lowp), ctx = batched_pair(nctx, lowp), dctx = batched_pair(nctx, lowp);
    Pair dP = batched_pair(nP, lowp), dQ = batched_pair(nq, lowp), dKV = fc->self ? dQ : batched_pair(nkv, lowp);
    size_t ko = fc->self ? hk : 0, vo = ko + hk;
    char name[128];
    Act ctx0 = gpu_clone(ctx.g, nctx), dQ0 = gpu_clone(dQ.g, nq), dKV0 = fc->self ? act_none() : gpu_clone(dKV.g, nkv);
    cuda_cost_log(1);
    attention_core_forward(cpu, s, Q.c, ldq, act_at(KV.c, ko), act_at(KV.c, vo), ldkv, P.c, NULL, ctx.c, Tq, Tk, kc,
                           fc->causal);
    int took = gpu->attention_forward &&
               gpu->attention_forward(gpu, s, Q.g, ldq, act_at(KV.g, ko), act_at(KV.g, vo), ldkv, P.g, NULL, ctx.g, Tq,
                                      Tk, kg, fc->causal);
    checks++;
    if (!took) {
        failures++;
        printf("FAIL [%s] fused attention %s: the fused kernels did not take it\n", order_name, fc->what);
    }
    snprintf(name, sizeof name, "fused attention %s: P", fc->what);
    if (lowp) compare(name, P, BF_OUT); else compare(name, P, FP32);
    fa_masked_zero(name, P);
    snprintf(name, sizeof name, "fused attention %s: ctx", fc->what);
    if (lowp) compare(name, ctx, 2 * U, 2 * U); else compare(name, ctx, FP32);
    if (lowp) sync_pair(P);
    attention_core_backward(cpu, s, Q.c, ldq, act_at(KV.c, ko), act_at(KV.c, vo), ldkv, P.c, NULL, kc, fc->causal,
                            dP.c, dctx.c, dQ.c, act_at(dKV.c, ko), act_at(dKV.c, vo), Tq, Tk);
    took = gpu->attention_backward &&
           gpu->attention_backward(gpu, s, Q.g, ldq, act_at(KV.g, ko), act_at(KV.g, vo), ldkv, P.g, NULL, kg,
                                   fc->causal, dP.g, dctx.g, dQ.g, act_at(dKV.g, ko), act_at(dKV.g, vo), Tq, Tk);
    checks++;
    if (!took) {
        failures++;
        printf("FAIL [%s] fused attention backward %s: the fused kernels did not take it\n", order_name, fc->what);
    }
    fa_kernels_were(fc, lowp);
    snprintf(name, sizeof name, "fused attention backward %s: dQ%s", fc->what, fc->self ? ", dK, dV" : "");
    if (lowp) compare(name, dQ, 2 * U, 4 * U); else compare(name, dQ, FP32);
    if (!fc->self) {
        snprintf(name, sizeof name, "fused attention backward %s: dK, dV", fc->what);
        if (lowp) compare(name, dKV, 2 * U, 4 * U); else compare(name, dKV, FP32);
    }
    if (lowp) fa_recompute_case(fc, Q, KV, P, ctx, dctx, dP, dQ, dKV, ctx0, dQ0, dKV0, kg, ldq, ldkv);
    gpu->free(gpu, ctx0.data);
    gpu->free(gpu, dQ0.data);
    if (!fc->self) gpu->free(gpu, dKV0.data);
    cpu->free(cpu, kc);
    gpu->free(gpu, kg);
    pair_free(Q); pair_free(P); pair_free(ctx); pair_free(dctx); pair_free(dP); pair_free(dQ);
    if (!fc->self) { pair_free(KV); pair_free(dKV); }
}

/* beyond the kernels' limits the hooks decline (0, nothing done) and
 * attention.c's GEMM path gives the result */
static void fa_beyond_limits(void)
{
    AttnShape wide = { 1, 1, 130, 4 }, narrow = { 1, 1, 4, 4 };
    int32_t klen = 257;
    int32_t *kg = dev_copy(gpu, &klen, sizeof klen);
    Pair Q = batched_pair((size_t)3 * 130, 0), K = batched_pair((size_t)257 * 130, 0);
    Pair P = batched_pair((size_t)3 * 257, 0), ctx = batched_pair(3 * 4, 0);
    int have = gpu->attention_forward != NULL;
    int took_d = have && gpu->attention_forward(gpu, wide, Q.g, 130, K.g, K.g, 130, P.g, NULL, ctx.g, 3, 5, kg, 0);
    int took_t = have && gpu->attention_forward(gpu, narrow, Q.g, 4, K.g, K.g, 4, P.g, NULL, ctx.g, 3, 257, kg, 0);
    checks++;
    if (!have) {
        failures++;
        printf("FAIL [%s] no fused attention hooks\n", order_name);
    } else if (took_d || took_t) {
        failures++;
        printf("FAIL [%s] fused attention took d_k 130 (%d) or 257 keys (%d), beyond its limits\n", order_name, took_d,
               took_t);
    } else {
        printf("ok   [%s] fused attention declines d_k 130 and 257 keys (GEMM path)\n", order_name);
    }
    gpu->free(gpu, kg);
    pair_free(Q); pair_free(K); pair_free(P); pair_free(ctx);
}

static void test_fused_attention(int lowp)
{
    static const FaCase cases[] = {
        { "cross 37x45 d_k 7 d_v 11", { 3, 2, 7, 11 }, 37, 45, 0, 0, { 45, 20, 0 }, 1 },
        { "self causal 35 d_k 9 d_v 5", { 2, 3, 9, 5 }, 35, 35, 1, 1, { 35, 17 }, 1 },
        { "d_k = d_v = 128 (limit)", { 1, 2, 128, 128 }, 18, 40, 0, 0, { 33 }, 0 },
        { "256 keys (limit), d_k 16 d_v 24", { 1, 1, 16, 24 }, 17, 256, 0, 0, { 250 }, 0 },
        /* the one-kernel backward's limits: all four at 64, then each at 65 */
        { "64x64 d_k = d_v = 64 (1-kernel limit)", { 2, 2, 64, 64 }, 64, 64, 0, 0, { 64, 50 }, 1 },
        { "self causal 57 d_k 64 d_v 40", { 2, 2, 64, 40 }, 57, 57, 1, 1, { 57, 30 }, 1 },
        { "64x65 d_k = d_v = 64 (65 keys)", { 2, 2, 64, 64 }, 64, 65, 0, 0, { 65, 40 }, 0 },
        { "65x64 d_k 16 d_v 24 (65 queries)", { 1, 2, 16, 24 }, 65, 64, 0, 0, { 61 }, 0 },
        { "20x30 d_k 65 d_v 8", { 1, 2, 65, 8 }, 20, 30, 0, 0, { 27 }, 0 },
        { "self causal 30 d_k 24 d_v 65", { 1, 2, 24, 65 }, 30, 30, 1, 1, { 30 }, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fa_case(&cases[i], lowp);
    if (!lowp) fa_beyond_limits();
}

/* fp16 attention scores past 65504 before the 1/sqrt(d_k) scale, not after
 * it (issue 29, defect 6): Q K^T is stored scaled (alpha of the score GEMM),
 * so softmax(Q K^T / sqrt(d_k)) is finite wherever the scaled scores are.
 * d_k = 64: a query's first 32 entries are +-q (q = 45..55), the keys'
 * +-50 with the same signs and their last 32 entries (where the queries
 * are 0) random: every score of a row is q * 50 * 32 = 72000..88000
 * unscaled, 9000..11000 scaled, exact integers on both backends, so the
 * weights are uniform over the valid keys on both.  dQ's first 32
 * columns are K's +-50 times sum_k dS = 0: the fp16 rounding of dS leaves
 * about 50 U |dS| sqrt(Tk) there; their tolerance (0.1 of the largest
 * |dQ|) covers that (measured: worst err/tol 0.19). */
static void fp16_attention_scale_on(const char *path)
{
    char name[96];
    AttnShape sh = { 2, 2, 64, 16 };
    int Tq = 5, Tk = 7, hk = sh.h * sh.dk, w2 = hk + sh.h * sh.dv;
    int32_t klen[2] = { 7, 4 };
    int32_t *kc = dev_copy(cpu, klen, sizeof klen), *kg = dev_copy(gpu, klen, sizeof klen);
    size_t nq = (size_t)sh.B * Tq * hk, nkv = (size_t)sh.B * Tk * w2, nP = (size_t)sh.B * sh.h * Tq * Tk;
    size_t nctx = (size_t)sh.B * Tq * sh.h * sh.dv;
    float *q = calloc(nq, sizeof(float)), *kv = rand_host(nkv, 1);
    float sign[64];
    for (int d = 0; d < 32; d++) sign[d] = frand() < 0 ? -1.0f : 1.0f;
    for (size_t r = 0; r < (size_t)sh.B * Tq; r++)
        for (int c = 0; c < hk; c++)
            if (c % sh.dk < 32) q[r * hk + c] = (float)(45 + (int)(r * 7 + c) % 11) * sign[c % sh.dk];
    for (size_t r = 0; r < (size_t)sh.B * Tk; r++)
        for (int c = 0; c < w2; c++) {
            float *e = &kv[r * w2 + c];
            *e = c < hk && c % sh.dk < 32 ? 50.0f * sign[c % sh.dk] : lp_round(*e);
        }
    Pair Q = pair_act(q, nq), KV = pair_act(kv, nkv), P = pair_bf(nP, 1, 1), dP = pair_bf(nP, 1, 1);
    Pair ctx = pair_bf(nctx, 1, 1), dctx = pair_bf(nctx, 1, 1), dQ = pair_bf(nq, 1, 1), dKV = pair_bf(nkv, 1, 1);
    attention_core_forward(cpu, sh, Q.c, hk, KV.c, act_at(KV.c, hk), w2, P.c, NULL, ctx.c, Tq, Tk, kc, 0);
    attention_core_forward(gpu, sh, Q.g, hk, KV.g, act_at(KV.g, hk), w2, P.g, NULL, ctx.g, Tq, Tk, kg, 0);
    snprintf(name, sizeof name, "fp16 attention (%s), unscaled scores 88000: P", path);
    compare(name, P, BF_OUT);
    snprintf(name, sizeof name, "fp16 attention (%s), unscaled scores 88000: ctx", path);
    compare(name, ctx, BF_OUT);
    attention_core_backward(cpu, sh, Q.c, hk, KV.c, act_at(KV.c, hk), w2, P.c, NULL, kc, 0, dP.c, dctx.c, dQ.c,
                            dKV.c, act_at(dKV.c, hk), Tq, Tk);
    attention_core_backward(gpu, sh, Q.g, hk, KV.g, act_at(KV.g, hk), w2, P.g, NULL, kg, 0, dP.g, dctx.g, dQ.g,
                            dKV.g, act_at(dKV.g, hk), Tq, Tk);
    snprintf(name, sizeof name, "fp16 attention backward (%s): dQ", path);
    compare(name, dQ, 2 * U, 0.1);
    snprintf(name, sizeof name, "fp16 attention backward (%s): dK, dV", path);
    compare(name, dKV, 4 * U, 1e-3);
    cpu->free(cpu, kc);
    gpu->free(gpu, kg);
    free(q);
    free(kv);
    pair_free(Q); pair_free(KV); pair_free(P); pair_free(dP);
    pair_free(ctx); pair_free(dctx); pair_free(dQ); pair_free(dKV);
}

/* on both attention paths: the fused kernels (fp32 scores, never stored)
 * and, their hooks taken away, attention.c's scaled score GEMM */
static void test_fp16_attention_scale(void)
{
    fp16_attention_scale_on("fused");
    Backend hooks = *gpu;
    gpu->attention_forward = NULL;
    gpu->attention_backward = NULL;
    fp16_attention_scale_on("GEMM path");
    gpu->attention_forward = hooks.attention_forward;
    gpu->attention_backward = hooks.attention_backward;
}

/* The build's kernel list (Makefile CUDA_ARCH, '_' for spaces): a GPU runs
 * SASS of its major version with a minor at most its own, or the PTX of
 * the last entry if that is not newer (emulator rule CC, cuda/emu/emu.cc) */
#ifndef CUDA_ARCH_LIST
#define CUDA_ARCH_LIST "70_80_90"
#endif
static int build_has_sass(int cc)
{
    const char *list = CUDA_ARCH_LIST;
    char want[8];
    snprintf(want, sizeof want, "%d", cc);
    for (const char *p = list; (p = strstr(p, want)); p++)
        if ((p == list || p[-1] == '_') && (p[2] == '_' || !p[2])) return 1;
    return 0;
}

/* precision=bf16 and tf32 need compute capability 8.0: on an emulated T4
 * (CUDA_EMU_CC=75) backend creation refuses them, fp16 and fp32 run; on
 * an emulated V100 (70) the same where the build has sm_70, and every
 * precision is refused where it has not (CUDA 13's nvcc: CUDA_ARCH = 75
 * 80 90); on a 6.0 (no build has sm_60) always every precision */
static void test_compute_capability(void)
{
    if (!cuda_emu_set_order) return;   /* the real GPU's own capability */
    static const char *precs[] = { "bf16", "tf32", "fp16", "fp32" };
    static const char *ccs[] = { "75", "70", "60" };
    int has70 = build_has_sass(70);
    setenv("CUDA_EMU_STRICT_CC", "1", 1);
    for (int c = 0; c < 3; c++) {
        setenv("CUDA_EMU_CC", ccs[c], 1);
        int runs = c == 0 || (c == 1 && has70);
        for (int i = 0; i < 4; i++) {
            int want = runs && i >= 2;
            Backend *b = cuda_backend(precs[i]);
            checks++;
            failures += !b != !want;
            printf("%s sm_%s (build: %s): precision=%s %s\n", !b == !want ? "ok  " : "FAIL", ccs[c], CUDA_ARCH_LIST,
                   precs[i], b ? "accepted" : "refused");
            if (b) b->destroy(b);
        }
    }
    unsetenv("CUDA_EMU_CC");
    unsetenv("CUDA_EMU_STRICT_CC");
}

/* Rule CC where the backend does not refuse first (a planted misuse): bf16
 * operands in cublasGemmEx and cublasLtMatmul on an emulated 7.5 fail
 * (ARCH_MISMATCH, NOT_SUPPORTED), fp16 runs; with the rule off bf16 runs */
static void test_cc_library_refusal(void)
{
    if (!cuda_emu_set_order) return;
    cublasHandle_t h;
    cublasLtHandle_t lt;
    cublasCreate(&h);
    cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    cublasLtCreate(&lt);
    void *A = gpu->alloc(gpu, 4 * 64), *aux = gpu->alloc(gpu, 4 * 128 / 8);
    gpu->sync(gpu);   /* zeroed on the backend's stream; the calls below are on the legacy one */
    float one = 1.0f, zero = 0.0f;
    setenv("CUDA_EMU_CC", "75", 1);
    for (int rule = 1; rule >= 0; rule--) {
        setenv("CUDA_EMU_STRICT_CC", rule ? "1" : "0", 1);
        for (int bf = 1; bf >= 0; bf--) {
            cudaDataType t = bf ? CUDA_R_16BF : CUDA_R_16F;
            cublasStatus_t want = bf && rule ? CUBLAS_STATUS_ARCH_MISMATCH : CUBLAS_STATUS_SUCCESS;
            cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, A, t, 4, A, t, 4, &zero, A, t,
                                             4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            LtCase c = { "", t, t, t, t, 4, 4, 0, 1, CUBLASLT_EPILOGUE_BIAS, (int32_t)t, 0,
                         bf && rule ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS };
            cublasStatus_t lst = lt_try(lt, &c, A, aux);
            int ok = st == want && lst == c.want;
            checks++;
            failures += !ok;
            printf("%s sm_75, rule CC %s: %s cublasGemmEx %s, cublasLtMatmul %s\n", ok ? "ok  " : "FAIL",
                   rule ? "on" : "off", bf ? "bf16" : "fp16", cublasGetStatusString(st), cublasGetStatusString(lst));
        }
    }
    unsetenv("CUDA_EMU_CC");
    unsetenv("CUDA_EMU_STRICT_CC");
    gpu->sync(gpu);
    gpu->free(gpu, A);
    gpu->free(gpu, aux);
    cublasLtDestroy(lt);
    cublasDestroy(h);
}

static void test_lowp_ops(const char *prec)
{
    Backend *save = gpu;
    const char *save_order = order_name;
    char on[64];
    snprintf(on, sizeof on, "%s, %s", order_name, prec);
    order_name = on;
    int fp16 = !strcmp(prec, "fp16");
    U = fp16 ? 1.0 / 2048 : 1.0 / 256;
    lp_round = fp16 ? fp16_round : bf16_round;
    gpu = lowp_backend(prec);
    if (!gpu) {
        gpu = save;
        order_name = save_order;
        return;
    }
    test_bf16_gemm();
    test_bf16_gemm_batched();
    test_bf16_linear_bias();
    test_bf16_elementwise();
    test_bf16_residual_ln_embed();
    test_bf16_memory();
    if (fp16) test_fp16_range();
    if (fp16) test_fp16_attention_scale();
    test_fused_attention(1);
    gpu->destroy(gpu);
    gpu = save;
    order_name = save_order;
}

/* a 16-bit precision's tolerances and a fresh backend of it (cuBLASLt
 * plans are cached per backend); NULL where it is not available */
static Backend *lt_backend(const char *prec)
{
    int fp16 = !strcmp(prec, "fp16");
    U = fp16 ? 1.0 / 2048 : 1.0 / 256;
    lp_round = fp16 ? fp16_round : bf16_round;
    return strcmp(prec, "fp32") ? lowp_backend(prec) : cuda_backend("fp32");
}

/* Bias vectors at any 4-byte offset, as packed parameters put them: one
 * plan for the shape, made with the bias 16-byte aligned, then the bias
 * one element past (LT_ALIGN: a plan run on it is a misuse); the weights
 * and bias one parameter block (16-bit: their shadow).  No seeded
 * refusals, so that the plan exists. */
static void test_lt_bias_offsets(const char *prec)
{
    Backend *save = gpu;
    const char *save_order = order_name;
    if (!(gpu = lt_backend(prec))) {
        gpu = save;
        return;
    }
    char on[96], name[96];
    snprintf(on, sizeof on, "%s, %s", save_order, prec);
    order_name = on;
    const char *h = getenv("CUDA_EMU_STRICT_LT_HEURISTIC");
    char *saved = h ? strdup(h) : NULL;
    setenv("CUDA_EMU_STRICT_LT_HEURISTIC", "0", 1);
    int rows = 33, in = 16, out = 17, fp32 = !strcmp(prec, "fp32");
    size_t nW = (size_t)out * in;   /* a multiple of 8: the bias starts 16-byte aligned, in any type */
    Pair P = pair_bf(nW + out + 8, 0.2f, 0), X = pair_bf((size_t)rows * in, 1, 1), Y = pair_bf((size_t)rows * out, 1, 1);
    gpu->set_params(gpu, F(P.g), nW + out + 8);
    for (int off = 0; off < 2; off++) {
        cpu->linear_bias_forward(cpu, Y.c, X.c, P.c, F(P.c) + nW + off, rows, in, out, 1, NULL);
        gpu->linear_bias_forward(gpu, Y.g, X.g, P.g, F(P.g) + nW + off, rows, in, out, 1, NULL);
        snprintf(name, sizeof name, "linear_bias_forward, bias %s", off ? "one element past 16 bytes" : "aligned");
        if (fp32) compare(name, Y, FP32);
        else compare_biased(name, Y, F(P.c) + nW + off, out, BF_BIASED);   /* test_bf16_linear_bias */
    }
    pair_free(P); pair_free(X); pair_free(Y);
    if (saved) setenv("CUDA_EMU_STRICT_LT_HEURISTIC", saved, 1);
    else unsetenv("CUDA_EMU_STRICT_LT_HEURISTIC");
    free(saved);
    gpu->destroy(gpu);
    gpu = save;
    order_name = save_order;
}

/* The fused feed-forward ops where cuBLASLt has no algorithm
 * (CUDA_EMU_LT_NO_EPILOGUE): every epilogue refused; the forward's only,
 * so that its mask is not written and the backward must not read it;
 * DRELU's only, the backward unfused after a fused forward.  fp32, bf16
 * and fp16 against the CPU within the fused ops' tolerances. */
static void test_lt_fallbacks(void)
{
    static const char *modes[] = { "1", "forward", "drelu" }, *precs[] = { "fp32", "bf16", "fp16" };
    Backend *save = gpu;
    const char *save_order = order_name;
    char on[96];
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 3; p++) {
            setenv("CUDA_EMU_LT_NO_EPILOGUE", modes[m], 1);
            if (!(gpu = lt_backend(precs[p]))) continue;
            snprintf(on, sizeof on, "%s, %s, no epilogue %s", save_order, precs[p], modes[m]);
            order_name = on;
            if (p == 0) test_linear_bias();
            else test_bf16_linear_bias();
            gpu->destroy(gpu);
        }
    unsetenv("CUDA_EMU_LT_NO_EPILOGUE");
    gpu = save;
    order_name = save_order;
}

/* the seconds since the last call, printed after NAME: which part of the
 * sync subset the sanitizer builds spend their time in (docs/testing.md) */
static void sync_part_done(const char *name)
{
    static double last;
    double now = now_seconds();
    if (last > 0) printf("sync subset: %-30s %7.1f s\n", name, now - last);
    last = now;
}

/* CUDA_TEST_SUBSET=sync: only the kernels where threads communicate
 * (shared memory, barriers, shuffles), one order: for the pthread backend
 * under ThreadSanitizer.  Returns the exit status */
static int test_sync_subset(void)
{
    order_name = "sync subset";
    sync_part_done("start");
    test_softmax();         /* block reductions: shuffles + shared memory */
    sync_part_done("softmax");
    test_residual_ln();     /* the same, and the two-stage column sums */
    sync_part_done("residual + LayerNorm");
    test_xent();
    sync_part_done("cross-entropy");
    test_fused_attention(0);   /* shared tiles, barriers, shuffles */
    sync_part_done("fused attention fp32");
    /* the bf16 variants of the same kernels (bf16 loads and stores,
     * fp32 reductions; attention on the tensor cores, wmma's warp
     * rendezvous and the lanes' own loads and stores); their fp16
     * instantiations have the same barriers and shuffles, only ld/st
     * differ: not repeated here */
    Backend *fp32 = gpu;
    gpu = cuda_backend("bf16");
    if (!gpu) return 1;
    test_bf16_elementwise();
    sync_part_done("bf16 elementwise");
    test_bf16_residual_ln_embed();
    sync_part_done("bf16 residual + LN, embedding");
    test_fused_attention(1);
    sync_part_done("fused attention bf16 (wmma)");
    gpu->destroy(gpu);
    gpu = fp32;
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}

int main(void)
{
#ifdef CUDA_TEST_FMA
    /* test_cuda_kernels_fma: the emulated kernels contracted into FMA as
     * nvcc does by default (Makefile EMU_FMA_FLAGS: -mfma) */
    if (!__builtin_cpu_supports("fma")) {
        printf("skipped: this CPU has no FMA instructions (test_cuda_kernels_fma's kernels use them)\n");
        return 77;
    }
#endif
    if (cuda_emu_set_grid_cap) cuda_emu_set_grid_cap(2);
    /* the fused attention kernels, whatever the default (test_fused_attention
     * calls their hooks; the GEMM path's ops are tested on their own) */
    setenv("TRANSFORMER_ATTENTION", "fused", 1);
    cpu = backend_cpu_create(1);
    gpu = cuda_backend("fp32");
    if (!cpu || !gpu) return 1;
    const char *orders[] = { "forward", "reverse", "random:12345" };
    /* CUDA_TEST_SUBSET=sync (test_sync_subset) */
    const char *subset = getenv("CUDA_TEST_SUBSET");
#ifdef CUDA_TEST_TSAN
    cuda_emu_set_backend("pthread");
    subset = "sync";
#endif
    if (subset && !strcmp(subset, "sync")) return test_sync_subset();
    int n_orders = cuda_emu_set_order ? 3 : 1;   /* a real GPU has its own order */
    for (int o = 0; o < n_orders; o++) {
        order_name = cuda_emu_set_order ? orders[o] : "gpu";
        set_order(orders[o]);
        test_gemm();
        test_gemm_batched();
        test_bias();
        test_linear_bias();
        test_head_gates();
        test_softmax();
        test_residual_ln();
        test_embed();
        test_xent();
        test_adam_logsoftmax();
        test_fused_attention(0);
    }
    set_order("forward");
    test_gemm_lowp("tf32", 3e-3, 3e-3);
    test_gemm_lowp("bf16", 2e-2, 2e-2);
    test_cublas_types();
    test_cublaslt_args();
    test_lt_strict();
    if (cuda_emu_set_order) test_lt_fallbacks();   /* (a real cuBLASLt has its own algorithms) */
    for (int p = 0; p < 3; p++) test_lt_bias_offsets((const char *[]){ "fp32", "bf16", "fp16" }[p]);
    for (int o = 0; o < n_orders; o++) {
        order_name = cuda_emu_set_order ? orders[o] : "gpu";
        set_order(orders[o]);
        test_lowp_ops("bf16");
        test_lowp_ops("fp16");
    }
    test_compute_capability();
    test_cc_library_refusal();
    set_order("forward");
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
