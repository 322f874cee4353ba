/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11): a counter-based generator.  Every random number is a pure
 * function of (key, counter), so the CPU and CUDA backends, any number of
 * ranks and a resumed run draw exactly the same dropout masks and initial
 * weights.  Header-only; compiled by gcc and by nvcc (PHILOX_HD). */
#ifndef PHILOX_H
#define PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(CUDA_EMULATION)
#define PHILOX_HD __host__ __device__
#else
#define PHILOX_HD
#endif

typedef struct { uint32_t v[4]; } philox_ctr;

static inline PHILOX_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* the round multipliers and the key increments (Weyl sequence) */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline PHILOX_HD philox_ctr philox4x32(philox_ctr c, uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = philox_mulhilo(PHILOX_M0, c.v[0], &hi0);
        uint32_t lo1 = philox_mulhilo(PHILOX_M1, c.v[2], &hi1);
        philox_ctr n;
        n.v[0] = hi1 ^ c.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k1;
        n.v[3] = lo0;
        c = n;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return c;
}

/* uniform in [0, 1) with 24 random bits: exactly representable in float */
static inline PHILOX_HD float philox_uniform(uint32_t x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Dropout key: the mask of element (sentence, position, feature) at a given
 * training step and dropout site depends on nothing else, in particular not
 * on how sentences were batched or split over ranks. */
typedef struct {
    uint64_t seed;
    uint32_t step;
    uint32_t site;   /* which dropout in the network (layer, sub-layer) */
} DropoutKey;

/* the two key words of a dropout site's generator */
static inline PHILOX_HD uint32_t dropout_k0(DropoutKey k) { return (uint32_t)k.seed ^ (k.site * 0x85EBCA6Bu); }
static inline PHILOX_HD uint32_t dropout_k1(DropoutKey k) { return (uint32_t)(k.seed >> 32) + k.site; }

/* the four uniforms of features 4*j4 .. 4*j4+3 of token (sent, pos) */
static inline PHILOX_HD philox_ctr dropout_bits4(DropoutKey k, uint32_t sent, uint32_t pos, uint32_t j4)
{
    philox_ctr c = {{ j4, pos, sent, k.step }};
    return philox4x32(c, dropout_k0(k), dropout_k1(k));
}

/* keep flags of features 4*j4 .. 4*j4+3 of token (sent, pos): bit i set =
 * feature 4*j4+i kept.  The one place a word becomes a decision (the AVX2
 * lanes of vecmath.h make the same test). */
static inline PHILOX_HD unsigned dropout_keep4(DropoutKey k, float p, uint32_t sent, uint32_t pos, uint32_t j4)
{
    philox_ctr r = dropout_bits4(k, sent, pos, j4);
    return (unsigned)(philox_uniform(r.v[0]) >= p) | (unsigned)(philox_uniform(r.v[1]) >= p) << 1 |
           (unsigned)(philox_uniform(r.v[2]) >= p) << 2 | (unsigned)(philox_uniform(r.v[3]) >= p) << 3;
}

/* keep (1) or drop (0) feature j of token (sent, pos) */
static inline PHILOX_HD int dropout_keep(DropoutKey k, float p, uint32_t sent, uint32_t pos, uint32_t j)
{
    return (int)(dropout_keep4(k, p, sent, pos, j >> 2) >> (j & 3)) & 1;
}

/* out[j] = in[j] * (kept ? 1/(1-p) : 0) for features j0 <= j < d of one
 * token row (j0 a multiple of 4) */
static inline PHILOX_HD void dropout_cols(DropoutKey k, float p, uint32_t sent, uint32_t pos, const float *in,
                                          float *out, int j0, int d)
{
    float s = 1.0f / (1.0f - p);
    for (int j = j0; j < d; j += 4) {
        unsigned keep = dropout_keep4(k, p, sent, pos, (uint32_t)j >> 2);
        for (int i = 0; i < 4 && j + i < d; i++) out[j + i] = (keep >> i & 1) ? in[j + i] * s : 0.0f;
    }
}

/* the whole row */
static inline PHILOX_HD void dropout_row(DropoutKey k, float p, uint32_t sent, uint32_t pos, const float *in,
                                         float *out, int d)
{
    dropout_cols(k, p, sent, pos, in, out, 0, d);
}

#endif
