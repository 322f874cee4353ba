/* src/vecmath.h against double-precision references: the vectorised exp
 * over its whole clamped range and at the clamp, and the row kernels (max,
 * sum of exp, exp with affine output) on lengths that are not multiples of
 * 8, so both the AVX2 body and the scalar tail are checked; the AVX2
 * Philox dropout against the scalar one, element for element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/philox.h"
#include "../src/vecmath.h"

static int fails, checks;

static void check(int ok, const char *what, double got, double want)
{
    checks++;
    if (!ok) {
        if (fails < 10) printf("FAIL %s: got %.9g want %.9g\n", what, got, want);
        fails++;
    }
}

/* exp: relative error against exp() in double, on a dense grid of the
 * range softmax uses (and beyond, up to the clamp) */
static void test_exp(void)
{
    double worst = 0.0, worst_x = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double e = exp((double)x), r = fabs(vm_exp(x) - e) / e;
        if (r > worst) { worst = r; worst_x = x; }
    }
    printf("vm_exp: worst relative error %.3g at x = %.6g (float epsilon 1.19e-7)\n", worst, worst_x);
    check(worst < 2.5e-7, "vm_exp relative error", worst, 2.5e-7);
    check(vm_exp(0.0f) == 1.0f, "vm_exp(0)", vm_exp(0.0f), 1.0);
    check(vm_exp(-1000.0f) > 0.0f && vm_exp(-1000.0f) < 2e-38f, "vm_exp clamps below", vm_exp(-1000.0f), 1.2e-38);
    check(isfinite(vm_exp(1000.0f)), "vm_exp clamps above", vm_exp(1000.0f), 2.4e38);
#if VM_AVX2
    /* the 8-lane version is the same function, lane for lane */
    int same = 1;
    for (int i = 0; i < 100000; i++) {
        float x[8], y[8];
        for (int k = 0; k < 8; k++) x[k] = -90.0f + 180.0f * (float)(i * 8 + k) / 800000.0f;
        _mm256_storeu_ps(y, vm_exp8(_mm256_loadu_ps(x)));
        for (int k = 0; k < 8; k++) same &= y[k] == vm_exp(x[k]);
    }
    check(same, "vm_exp8 == vm_exp lane for lane", same, 1);
#endif
}

/* the row kernels on lengths around the vector width */
static void test_row_kernels(void)
{
    int lens[] = { 1, 2, 7, 8, 9, 15, 16, 17, 63, 100, 8000, 8003 };
    for (unsigned li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        float *z = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
        for (int k = 0; k < n; k++) {
            philox_ctr c = {{ (uint32_t)k, (uint32_t)n, 7, 0 }};
            z[k] = 20.0f * (philox_uniform(philox4x32(c, 1, 2).v[0]) - 0.5f);
        }
        z[(n * 7) / 11] = 12.5f;   /* the maximum, somewhere inside */
        double mx = -INFINITY, se = 0.0, sz = 0.0;
        for (int k = 0; k < n; k++) mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < n; k++) { se += exp((double)z[k] - mx); sz += z[k]; }
        char what[64];
        snprintf(what, sizeof what, "vm_row_max n=%d", n);
        check(vm_row_max(z, n) == (float)mx, what, vm_row_max(z, n), mx);
        float got_sz;
        float got = vm_row_sum_exp(z, n, (float)mx, &got_sz);
        snprintf(what, sizeof what, "vm_row_sum_exp n=%d", n);
        check(fabs(got - se) <= 1e-6 * se, what, got, se);
        snprintf(what, sizeof what, "vm_row_sum_exp sum_z n=%d", n);
        check(fabs(got_sz - sz) <= 1e-6 * (fabs(sz) + n), what, got_sz, sz);
        /* the cross-entropy gradient form: a * exp(z - lse) + b */
        double lse = mx + log(se);
        float a = 0.25f, b = -1e-3f;
        for (int k = 0; k < n; k++) w[k] = z[k];
        float s2 = vm_row_exp_affine(w, n, (float)lse, a, b);
        double worst_row = 0.0;
        for (int k = 0; k < n; k++) {
            double e = exp((double)z[k] - lse), want = a * e + b;
            double err = fabs(w[k] - want) / (a * e + fabs(b));   /* relative to the terms' size */
            if (err > worst_row) worst_row = err;
        }
        snprintf(what, sizeof what, "vm_row_exp_affine n=%d", n);
        check(worst_row < 1e-6 && fabs(s2 - 1.0) < 1e-5, what, worst_row, 0.0);
        free(z);
        free(w);
    }
}

/* dropout: the vectorised Philox gives exactly dropout_row's masks and
 * values, for widths around the 32-feature block, several keys, steps,
 * sites, sentences, positions and rates (and in place) */
static void test_dropout(void)
{
    int widths[] = { 1, 3, 4, 31, 32, 33, 64, 100, 512, 1027 };
    float rates[] = { 0.1f, 0.3f, 0.5f };
    long mismatches = 0, dropped = 0, total = 0;
    for (unsigned wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        int d = widths[wi];
        float *in = malloc(sizeof(float) * d), *a = malloc(sizeof(float) * d), *b = malloc(sizeof(float) * d);
        for (int j = 0; j < d; j++) in[j] = 1.0f + 0.001f * j;
        for (int t = 0; t < 24; t++) {
            DropoutKey key = { 0x123456789ABCDEFull * (uint64_t)(t + 1), (uint32_t)(7 * t), (uint32_t)(t % 5) };
            float p = rates[t % 3];
            uint32_t sent = (uint32_t)(t * 977), pos = (uint32_t)(t % 11);
            dropout_row(key, p, sent, pos, in, a, d);
            vm_dropout_row(key, p, sent, pos, in, b, d);
            for (int j = 0; j < d; j++) { mismatches += a[j] != b[j]; dropped += b[j] == 0.0f; }
            total += d;
            memcpy(b, in, sizeof(float) * d);   /* in place, as embed_forward calls it */
            vm_dropout_row(key, p, sent, pos, b, b, d);
            for (int j = 0; j < d; j++) mismatches += a[j] != b[j];
        }
        free(in); free(a); free(b);
    }
    printf("vm_dropout_row: %ld elements, %ld mismatches against dropout_row, %.3f dropped (rates 0.1/0.3/0.5)\n",
           total, mismatches, (double)dropped / total);
    check(mismatches == 0, "vm_dropout_row == dropout_row", (double)mismatches, 0);
    check(dropped > total / 10 && dropped < total / 2, "vm_dropout_row drops about the rate", (double)dropped / total, 0.3);
}

int main(void)
{
    printf("vecmath: %s\n", VM_AVX2 ? "AVX2+FMA" : "scalar only");
    test_exp();
    test_row_kernels();
    test_dropout();
    printf("test_vecmath: %d checks, %d failures\n", checks, fails);
    return fails != 0;
}
