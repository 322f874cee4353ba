/* Helpers shared by the finite-difference tests (header-only, included by
 * tests/test_grad_*.c): a deterministic random source, a central-difference
 * comparison with an explicit tolerance, and a failure counter. */
#ifndef GRADCHECK_H
#define GRADCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

static uint64_t gc_state = 0x9E3779B97F4A7C15ull;
static int gc_failures = 0, gc_checks = 0;

/* splitmix64: uniform in [-1, 1) */
static inline double gc_rand(void)
{
    uint64_t z = (gc_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static inline void gc_fill(float *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * gc_rand());
}

/* Record one comparison of an analytic derivative `an` with a reference
 * `ref` (central difference or double-precision formula):
 * passes if |an - ref| <= atol + rtol * max(|an|, |ref|). */
static inline double gc_compare(const char *what, long idx, double an, double ref, double rtol, double atol)
{
    double err = fabs(an - ref), lim = atol + rtol * fmax(fabs(an), fabs(ref));
    gc_checks++;
    if (!(err <= lim)) {   /* also catches NaN */
        if (gc_failures < 40)
            fprintf(stderr, "FAIL %s[%ld]: analytic %.8g reference %.8g (|diff| %.3g > %.3g)\n", what, idx, an, ref,
                    err, lim);
        gc_failures++;
    }
    return err;
}

/* Perturb *x by +-h (h relative to |x|), evaluate f, restore; returns the
 * central difference computed with the actually representable step. */
static inline double gc_central(float *x, double h, double (*f)(void *), void *ctx)
{
    float x0 = *x;
    double step = h * fmax(1.0, fabs((double)x0));
    float xp = (float)(x0 + step), xm = (float)(x0 - step);
    *x = xp;
    double fp = f(ctx);
    *x = xm;
    double fm = f(ctx);
    *x = x0;
    return (fp - fm) / ((double)xp - (double)xm);
}

static inline int gc_report(const char *name)
{
    printf("%s: %d checks, %d failures\n", name, gc_checks, gc_failures);
    return gc_failures ? 1 : 0;
}

#endif
