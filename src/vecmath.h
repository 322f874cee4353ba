/* Row kernels of the CPU backend's softmaxes (cross-entropy over the
 * vocabulary, attention weights, decoding's log-softmax) and of its dropout,
 * vectorised with AVX2+FMA (the Makefile builds for x86-64-v3).
 *
 * Why: glibc's expf is scalar unless the whole file is built with
 * -ffast-math, and gcc does not vectorise a float max or sum without
 * reassociation, so a 4000 x 8000 cross-entropy spent ~10% of a small
 * model's step in scalar expf and serial adds.  Here exp is the Cephes
 * single-precision polynomial (relative error < 2e-7, i.e. about 1 ulp of
 * float, against expf's 0.5 ulp), evaluated 8 lanes at a time, and sums run
 * in 8 partial sums.  The scalar tail uses the same polynomial, so every
 * element gets the same function and results are deterministic and
 * independent of the thread count.  Without AVX2 the scalar code runs. */
#ifndef VECMATH_H
#define VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "philox.h"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VM_AVX2 1
#else
#define VM_AVX2 0
#endif

/* exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in
 * [-ln2/2, ln2/2] (ln 2 split in two for an exact product), exp(r) by the
 * Cephes degree-7 polynomial.  x is clamped to [-87.3, 88.3] so 2^n stays a
 * normal float: exp(-87.3) = 1.2e-38 stands in for smaller results, which
 * changes no sum of softmax terms (each sum has a term 1). */
#define VM_EXP_LO (-87.3365f)
#define VM_EXP_HI 88.3762f
#define VM_LOG2E 1.44269504088896341f
#define VM_LN2_HI 0.693359375f
#define VM_LN2_LO (-2.12194440e-4f)
#define VM_P0 1.9875691500e-4f
#define VM_P1 1.3981999507e-3f
#define VM_P2 8.3334519073e-3f
#define VM_P3 4.1665795894e-2f
#define VM_P4 1.6666665459e-1f
#define VM_P5 5.0000001201e-1f

static inline float vm_exp(float x)
{
    x = x < VM_EXP_LO ? VM_EXP_LO : x > VM_EXP_HI ? VM_EXP_HI : x;
    float n = nearbyintf(x * VM_LOG2E);
    float r = fmaf(-n, VM_LN2_HI, x);
    r = fmaf(-n, VM_LN2_LO, r);
    float p = VM_P0;
    p = fmaf(p, r, VM_P1); p = fmaf(p, r, VM_P2); p = fmaf(p, r, VM_P3);
    p = fmaf(p, r, VM_P4); p = fmaf(p, r, VM_P5);
    float e = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return e * s;
}

#if VM_AVX2
static inline __m256 vm_exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(VM_EXP_LO)), _mm256_set1_ps(VM_EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(VM_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VM_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VM_LN2_LO), r);
    __m256 p = _mm256_set1_ps(VM_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VM_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VM_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VM_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VM_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VM_P5));
    __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
}

/* horizontal sum / max of 8 lanes, in a fixed order */
static inline float vm_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float vm_hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* max of z[0..n), n >= 1 */
static inline float vm_row_max(const float *z, int n)
{
    int k = 0;
    float mx = z[0];
#if VM_AVX2
    if (n >= 8) {
        __m256 m = _mm256_loadu_ps(z);
        for (k = 8; k + 8 <= n; k += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(z + k));
        mx = vm_hmax8(m);
    }
#endif
    for (; k < n; k++) mx = z[k] > mx ? z[k] : mx;
    return mx;
}

/* sum of exp(z[k] - shift); with sum_z, also the sum of z[k] */
static inline float vm_row_sum_exp(const float *z, int n, float shift, float *sum_z)
{
    int k = 0;
    float se = 0.0f, sz = 0.0f;
#if VM_AVX2
    __m256 vs = _mm256_setzero_ps(), vz = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift);
    for (; k + 8 <= n; k += 8) {
        __m256 v = _mm256_loadu_ps(z + k);
        vs = _mm256_add_ps(vs, vm_exp8(_mm256_sub_ps(v, sh)));
        vz = _mm256_add_ps(vz, v);
    }
    se = vm_hsum8(vs);
    sz = vm_hsum8(vz);
#endif
    for (; k < n; k++) { se += vm_exp(z[k] - shift); sz += z[k]; }
    if (sum_z) *sum_z = sz;
    return se;
}

/* z[k] = a * exp(z[k] - shift) + b; returns the sum of exp(z[k] - shift) */
static inline float vm_row_exp_affine(float *z, int n, float shift, float a, float b)
{
    int k = 0;
    float se = 0.0f;
#if VM_AVX2
    __m256 vs = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift), va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (; k + 8 <= n; k += 8) {
        __m256 e = vm_exp8(_mm256_sub_ps(_mm256_loadu_ps(z + k), sh));
        vs = _mm256_add_ps(vs, e);
        _mm256_storeu_ps(z + k, _mm256_fmadd_ps(va, e, vb));
    }
    se = vm_hsum8(vs);
#endif
    for (; k < n; k++) {
        float e = vm_exp(z[k] - shift);
        se += e;
        z[k] = fmaf(a, e, b);
    }
    return se;
}

/* dropout_row of philox.h with 8 Philox4x32-10 streams in the 8 lanes of
 * AVX2 registers (counters j4 .. j4+7: 32 features a block), bit for bit
 * the same masks.  Why: one scalar Philox call per 4 features costs 20
 * 32x32->64 multiplies; a d_model 256 step recomputes ~8M of them (forward
 * and backward), ~8% of the step. */
#if VM_AVX2
/* lo and hi halves of the 32x32 products of the 8 lanes of a with m */
static inline void vm_mulhilo8(__m256i a, __m256i m, __m256i *lo, __m256i *hi)
{
    __m256i ev = _mm256_mul_epu32(a, m);                          /* lanes 0,2,4,6 -> 64 bits */
    __m256i od = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);   /* lanes 1,3,5,7 */
    *lo = _mm256_blend_epi32(ev, _mm256_slli_epi64(od, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(ev, 32), od, 0xAA);
}
#endif

static inline void vm_dropout_row(DropoutKey k, float p, uint32_t sent, uint32_t pos, const float *in, float *out,
                                  int d)
{
    int j = 0;
    float s = 1.0f / (1.0f - p);
#if VM_AVX2
    uint32_t k0 = dropout_k0(k), k1 = dropout_k1(k);
    const __m256i M0 = _mm256_set1_epi32((int)PHILOX_M0), M1 = _mm256_set1_epi32((int)PHILOX_M1);
    const __m256 vp = _mm256_set1_ps(p), scale24 = _mm256_set1_ps(1.0f / 16777216.0f);
    for (; j + 32 <= d; j += 32) {
        /* counter of lane l: (j/4 + l, pos, sent, step), as dropout_bits4 */
        __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(j >> 2), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256i c1 = _mm256_set1_epi32((int)pos), c2 = _mm256_set1_epi32((int)sent);
        __m256i c3 = _mm256_set1_epi32((int)k.step);
        uint32_t r0 = k0, r1 = k1;
        for (int r = 0; r < 10; r++) {
            __m256i lo0, hi0, lo1, hi1;
            vm_mulhilo8(c0, M0, &lo0, &hi0);
            vm_mulhilo8(c2, M1, &lo1, &hi1);
            c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)r0));
            c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)r1));
            c1 = lo1;
            c3 = lo0;
            r0 += PHILOX_W0;
            r1 += PHILOX_W1;
        }
        /* keep where (x >> 8) * 2^-24 >= p, exactly as philox_uniform */
        __m256i c[4] = { c0, c1, c2, c3 };
        uint32_t keep[4][8];
        for (int i = 0; i < 4; i++) {
            __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c[i], 8)), scale24);
            _mm256_storeu_si256((__m256i *)keep[i], _mm256_castps_si256(_mm256_cmp_ps(u, vp, _CMP_GE_OQ)));
        }
        for (int l = 0; l < 8; l++)
            for (int i = 0; i < 4; i++) out[j + 4 * l + i] = keep[i][l] ? in[j + 4 * l + i] * s : 0.0f;
    }
#endif
    /* the rest (d not a multiple of 32), or all of it without AVX2 */
    dropout_cols(k, p, sent, pos, in, out, j, d);
}

#endif
