/* Every op of the CUDA backend (cuda/ops_cuda.cu, run by the CPU emulator of
 * cuda/emu/) against the CPU reference (src/ops_cpu.c), on shapes that are
 * not multiples of any block size, with dropout on, under the three thread
 * orders of the emulator (forward, reverse, random): a kernel that depends
 * on the order threads run between barriers fails under one of them.
 * fp32 within a tight relative tolerance (only the order of float
 * summation differs); the tf32 and bf16 GEMM paths within their rounding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

Backend *backend_cuda_create(const char *precision, int local_rank);
/* the emulator's thread-order switch; absent (NULL) in the real-GPU build of
 * this test (make gpu-test) */
int cuda_emu_set_order(const char *spec) __attribute__((weak));
static void set_order(const char *spec)
{
    if (cuda_emu_set_order) cuda_emu_set_order(spec);
}

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

/* the same host data on both backends */
typedef struct { float *c, *g; size_t n; } Pair;
static Pair pair_from(const float *h, size_t n)
{
    Pair p = { cpu->alloc(cpu, 4 * n), gpu->alloc(gpu, 4 * n), n };
    cpu->upload(cpu, p.c, h, 4 * n);
    gpu->upload(gpu, p.g, h, 4 * n);
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
static void pair_free(Pair p) { cpu->free(cpu, p.c); gpu->free(gpu, p.g); }

/* |gpu - cpu| <= rtol*|cpu| + atol*max|cpu| for every element */
static void compare(const char *what, Pair p, double rtol, double atol)
{
    float *a = malloc(4 * p.n), *b = malloc(4 * p.n);
    cpu->download(cpu, a, p.c, 4 * p.n);
    gpu->download(gpu, b, p.g, 4 * p.n);
    double mx = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < p.n; i++) mx = fmax(mx, fabs(a[i]));
    int bad = 0;
    for (size_t i = 0; i < p.n; i++) {
        double e = fabs((double)a[i] - b[i]), lim = rtol * fabs(a[i]) + atol * mx + 1e-30;
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

/* attention-shaped: outer = sentence, inner = head with stride d_k inside a row */
static void test_gemm_batched_shape(int nb, int h)
{
    int T = 11, S = 13, dk = 7, ldq = 3 * h * dk;
    Pair Q = pair_rand((size_t)nb * T * ldq, 1), Kt = pair_rand((size_t)nb * S * ldq, 1);
    Pair P = pair_rand((size_t)nb * h * T * S, 1);
    long sP = (long)h * T * S, sPi = (long)T * S;
    cpu->gemm_batched(cpu, 0, 1, T, S, dk, 0.5f, Q.c, ldq, (long)T * ldq, dk, Kt.c, ldq, (long)S * ldq, dk, 0.0f, P.c, S,
                      sP, sPi, nb, h);
    gpu->gemm_batched(gpu, 0, 1, T, S, dk, 0.5f, Q.g, ldq, (long)T * ldq, dk, Kt.g, ldq, (long)S * ldq, dk, 0.0f, P.g, S,
                      sP, sPi, nb, h);
    compare(nb <= h ? "gemm_batched Q K^T (loop over sentences)" : "gemm_batched Q K^T (loop over heads)", P, FP32);
    Pair ctx = pair_rand((size_t)nb * T * ldq, 1);
    cpu->gemm_batched(cpu, 0, 0, T, dk, S, 1.0f, P.c, S, sP, sPi, Kt.c, ldq, (long)S * ldq, dk, 1.0f, ctx.c, ldq,
                      (long)T * ldq, dk, nb, h);
    gpu->gemm_batched(gpu, 0, 0, T, dk, S, 1.0f, P.g, S, sP, sPi, Kt.g, ldq, (long)S * ldq, dk, 1.0f, ctx.g, ldq,
                      (long)T * ldq, dk, nb, h);
    compare("gemm_batched P V (beta=1)", ctx, FP32);
    /* contiguous strides: one strided-batched call over all nb*h */
    /* contiguous strides: one strided-batched call over all nb*h */
    Pair D2 = pair_rand((size_t)nb * h * S * S, 1);
    long sD = (long)h * S * S, sDi = (long)S * S;
    cpu->gemm_batched(cpu, 1, 0, S, S, T, 1.0f, P.c, S, sP, sPi, P.c, S, sP, sPi, 0.0f, D2.c, S, sD, sDi, nb, h);
    gpu->gemm_batched(gpu, 1, 0, S, S, T, 1.0f, P.g, S, sP, sPi, P.g, S, sP, sPi, 0.0f, D2.g, S, sD, sDi, nb, h);
    compare("gemm_batched P^T P (single strided call)", D2, FP32);
    pair_free(Q); pair_free(Kt); pair_free(P); pair_free(ctx); pair_free(D2);
}

static void test_gemm_batched(void)
{
    test_gemm_batched_shape(3, 4);   /* fewer sentences than heads */
    test_gemm_batched_shape(5, 2);   /* more sentences than heads */
}

static void test_gemm_lowp(const char *prec, double rtol, double atol)
{
    Backend *g = backend_cuda_create(prec, 0), *save = gpu;
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
    int rows = 300, cols = 45;   /* > 256 rows: two row chunks */
    for (int relu = 0; relu < 2; relu++) {
        Pair Y = pair_rand((size_t)rows * cols, 1), b = pair_rand(cols, 0.5f);
        cpu->bias_forward(cpu, Y.c, b.c, rows, cols, relu);
        gpu->bias_forward(gpu, Y.g, b.g, rows, cols, relu);
        compare(relu ? "bias_forward relu" : "bias_forward", Y, 0, 0);
        Pair dY = pair_rand((size_t)rows * cols, 1), db = pair_rand(cols, 1);
        cpu->bias_backward(cpu, dY.c, db.c, Y.c, rows, cols, relu);
        gpu->bias_backward(gpu, dY.g, db.g, Y.g, rows, cols, relu);
        compare(relu ? "bias_backward relu: dbias" : "bias_backward: dbias", db, FP32);
        compare(relu ? "bias_backward relu: dY masked" : "bias_backward: dY", dY, 0, 0);
        pair_free(Y); pair_free(b); pair_free(dY); pair_free(db);
    }
}

static void test_softmax(void)
{
    int nb = 4, nh = 2, Tq = 5, Tk = 70;
    int32_t klen[4] = { 70, 33, 1, 0 };
    int32_t *kc = dev_copy(cpu, klen, sizeof klen), *kg = dev_copy(gpu, klen, sizeof klen);
    size_t n = (size_t)nb * nh * Tq * Tk;
    for (int causal = 0; causal < 2; causal++) {
        float *h = rand_host(n, 4);
        Pair S = pair_from(h, n);
        int qo = causal ? 2 : 0;
        cpu->softmax_forward(cpu, S.c, kc, 0.3f, nb, nh, Tq, Tk, causal, qo);
        gpu->softmax_forward(gpu, S.g, kg, 0.3f, nb, nh, Tq, Tk, causal, qo);
        compare(causal ? "softmax_forward causal q_offset=2" : "softmax_forward padding mask", S, FP32);
        Pair dP = pair_rand(n, 1);
        cpu->softmax_backward(cpu, dP.c, S.c, 0.3f, nb, nh, Tq, Tk);
        gpu->softmax_backward(gpu, dP.g, S.g, 0.3f, nb, nh, Tq, Tk);
        compare("softmax_backward", dP, FP32);
        free(h);
        pair_free(S); pair_free(dP);
    }
    cpu->free(cpu, kc);
    gpu->free(gpu, kg);
}

static void test_residual_ln(void)
{
    int B = 3, T = 7, d = 77, rows = B * T;
    uint32_t sid[3] = { 5, 900, 77777 };
    uint32_t *sc = dev_copy(cpu, sid, sizeof sid), *sg = dev_copy(gpu, sid, sizeof sid);
    DropoutKey key = { 0x1234567890ull, 17, 42 };
    size_t n = (size_t)rows * d;
    for (int alias = 0; alias < 2; alias++) {
        float p = alias ? 0.0f : 0.1f;
        Pair x = pair_rand(n, 1), sub = pair_rand(n, 2), g = pair_rand(d, 1), b = pair_rand(d, 1);
        Pair y = pair_rand(n, 1), r = pair_rand(n, 1), mu = pair_rand(rows, 1), rs = pair_rand(rows, 1);
        cpu->residual_ln_forward(cpu, y.c, r.c, mu.c, rs.c, x.c, sub.c, g.c, b.c, rows, d, 1e-6f, p, key, sc, T);
        gpu->residual_ln_forward(gpu, y.g, r.g, mu.g, rs.g, x.g, sub.g, g.g, b.g, rows, d, 1e-6f, p, key, sg, T);
        compare(p > 0 ? "residual_ln_forward p=0.1: r (dropout mask)" : "residual_ln_forward p=0: r", r, FP32);
        compare("residual_ln_forward: y", y, FP32);
        compare("residual_ln_forward: mean", mu, FP32);
        compare("residual_ln_forward: rstd", rs, FP32);
        Pair dy = pair_rand(n, 1), dx = pair_rand(n, 1), ds = pair_rand(n, 1), dg = pair_rand(d, 1), db = pair_rand(d, 1);
        float *dxc = alias ? dy.c : dx.c, *dxg = alias ? dy.g : dx.g;
        cpu->residual_ln_backward(cpu, dxc, ds.c, dg.c, db.c, dy.c, r.c, mu.c, rs.c, g.c, rows, d, p, key, sc, T);
        gpu->residual_ln_backward(gpu, dxg, ds.g, dg.g, db.g, dy.g, r.g, mu.g, rs.g, g.g, rows, d, p, key, sg, T);
        compare(alias ? "residual_ln_backward: dx (aliasing dy)" : "residual_ln_backward: dx", alias ? dy : dx, 1e-4, 1e-6);
        compare("residual_ln_backward: dsub", ds, 1e-4, 1e-6);
        compare("residual_ln_backward: dgamma", dg, FP32);
        compare("residual_ln_backward: dbeta", db, FP32);
        pair_free(x); pair_free(sub); pair_free(g); pair_free(b); pair_free(y); pair_free(r); pair_free(mu);
        pair_free(rs); pair_free(dy); pair_free(dx); pair_free(ds); pair_free(dg); pair_free(db);
    }
    cpu->free(cpu, sc);
    gpu->free(gpu, sg);
}

static void test_embed(void)
{
    int B = 3, T = 9, d = 45, V = 50, maxlen = 16;
    int32_t tok[27];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + (i % 3)) % 10 + (i % 5 == 0 ? 40 : 0);   /* repeats */
    uint32_t sid[3] = { 3, 1, 4 };
    int32_t *tc = dev_copy(cpu, tok, sizeof tok), *tg = dev_copy(gpu, tok, sizeof tok);
    uint32_t *sc = dev_copy(cpu, sid, sizeof sid), *sg = dev_copy(gpu, sid, sizeof sid);
    DropoutKey key = { 99, 3, 1 };
    Pair E = pair_rand((size_t)V * d, 1), pos = pair_rand((size_t)maxlen * d, 1);
    for (int learned = 0; learned < 2; learned++) {
        size_t n = (size_t)B * T * d;
        Pair out = pair_rand(n, 1);
        cpu->embed_forward(cpu, out.c, E.c, learned ? pos.c : NULL, tc, sc, B, T, d, 6.7f, 3, 0.1f, key);
        gpu->embed_forward(gpu, out.g, E.g, learned ? pos.g : NULL, tg, sg, B, T, d, 6.7f, 3, 0.1f, key);
        compare(learned ? "embed_forward learned positions" : "embed_forward sinusoids, pos_offset 3", out, FP32);
        Pair dout = pair_rand(n, 1), dE = pair_rand((size_t)V * d, 1), dpos = pair_rand((size_t)maxlen * d, 1);
        cpu->embed_backward(cpu, dE.c, learned ? dpos.c : NULL, dout.c, tc, sc, B, T, d, V, 6.7f, 0.1f, key);
        gpu->embed_backward(gpu, dE.g, learned ? dpos.g : NULL, dout.g, tg, sg, B, T, d, V, 6.7f, 0.1f, key);
        compare("embed_backward: dE (token segments, no atomics)", dE, FP32);
        if (learned) compare("embed_backward: dpos", dpos, FP32);
        pair_free(out); pair_free(dout); pair_free(dE); pair_free(dpos);
    }
    pair_free(E); pair_free(pos);
    cpu->free(cpu, tc); gpu->free(gpu, tg); cpu->free(cpu, sc); gpu->free(gpu, sg);
}

static void test_xent(void)
{
    int rows = 9, V = 301;
    int32_t tgt[9] = { 5, 0, 300, 1, 0, 77, 2, 150, 4 };
    int32_t *tc = dev_copy(cpu, tgt, sizeof tgt), *tg = dev_copy(gpu, tgt, sizeof tgt);
    for (int grad = 0; grad < 2; grad++) {
        Pair z = pair_rand((size_t)rows * V, 5), loss = pair_rand(rows, 1), nll = pair_rand(rows, 1);
        cpu->xent_forward_backward(cpu, z.c, tc, rows, V, 0.1f, grad ? 0.5f : 0.0f, loss.c, nll.c);
        gpu->xent_forward_backward(gpu, z.g, tg, rows, V, 0.1f, grad ? 0.5f : 0.0f, loss.g, nll.g);
        compare("xent: smoothed row loss", loss, 1e-5, 1e-6);
        compare("xent: row nll", nll, 1e-5, 1e-6);
        compare(grad ? "xent: fused softmax gradient" : "xent: logits untouched (grad_scale 0)", z, 1e-5, 1e-6);
        pair_free(z); pair_free(loss); pair_free(nll);
    }
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
    cpu->upload(cpu, v.c, h, 4 * n);
    gpu->upload(gpu, v.g, h, 4 * n);
    free(h);
    cpu->adam(cpu, p.c, g.c, m.c, v.c, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 3, 0.25f);
    gpu->adam(gpu, p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 3, 0.25f);
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

int main(void)
{
    cpu = backend_cpu_create(1);
    gpu = backend_cuda_create("fp32", 0);
    if (!cpu || !gpu) return 1;
    const char *orders[] = { "forward", "reverse", "random:12345" };
    /* CUDA_TEST_SUBSET=sync: only the kernels where threads communicate
     * (shared memory, barriers, shuffles), one order: for the pthread
     * backend under ThreadSanitizer */
    const char *subset = getenv("CUDA_TEST_SUBSET");
#ifdef CUDA_TEST_TSAN
    cuda_emu_set_backend("pthread");
    subset = "sync";
#endif
    if (subset && !strcmp(subset, "sync")) {
        test_softmax();         /* block reductions: shuffles + shared memory */
        test_residual_ln();     /* the same, and the two-stage column sums */
        test_xent();
        printf("%d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
    }
    int n_orders = cuda_emu_set_order ? 3 : 1;   /* a real GPU has its own order */
    for (int o = 0; o < n_orders; o++) {
        order_name = cuda_emu_set_order ? orders[o] : "gpu";
        set_order(orders[o]);
        test_gemm();
        test_gemm_batched();
        test_bias();
        test_softmax();
        test_residual_ln();
        test_embed();
        test_xent();
        test_adam_logsoftmax();
    }
    set_order("forward");
    test_gemm_lowp("tf32", 3e-3, 3e-3);
    test_gemm_lowp("bf16", 2e-2, 2e-2);
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
