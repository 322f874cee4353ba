/* gpu_model --range: the prediction as a range (docs/gpu-model.md,
 * "Ranges").  The model's settings are partly measured and partly guessed
 * (roofline.c's SETTINGS); this prints, on the H100:
 * - the floor: every call at the measured peaks, no launch or host cost;
 * - the point estimate (the shipped settings);
 * - each guessed setting at its other plausible values, one at a time,
 *   with the calibration error at 122cb66 of the same settings;
 * - the range over all of these, and over those whose calibration stays
 *   within +-20%, and where the point estimate sits in it.
 * Guesses are moved one at a time, not all together: their corners
 * compound implausibly (256-edge tiles without split-K leave a weight
 * gradient's 4 tiles on 132 SMs, which cuBLAS's heuristics would not pick). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_model.h"
#include "util.h"

/* measured on an H100 SXM (gpu-review notes, gemm_peak): an 8192^3 bf16
 * product on random data, TF32 and fp32 (sgemm); a copy kernel's
 * bandwidth; the data sheet's CUDA-core fp32 and PCIe Gen5 x16 */
#define FLOOR_TF32 457.2e12
#define FLOOR_FP32_GEMM 52.2e12
#define FLOOR_HBM 3.0e12

void print_mfu(double mf, double t)
{
    printf("MFU %5.1f%% of the data sheet's %.0f TFLOP/s, %5.1f%% of the measured random-data %.0f "
           "(%5.1f%% of gemm_peak's constant-data %.1f)\n", 100 * mf / (t * PEAK_SHEET), PEAK_SHEET / 1e12,
           100 * mf / (t * PEAK_RANDOM), PEAK_RANDOM / 1e12, 100 * mf / (t * PEAK_CONSTANT), PEAK_CONSTANT / 1e12);
}

/* one call at the measured ceilings: the larger of its bytes at 3.0 TB/s
 * and its FLOPs at the measured rate of its type */
static double floor_call(const CostCall *c)
{
    const Gpu *h = &GPUS[0];
    double mem = (c->rd + c->wr) / FLOOR_HBM;
    switch (c->kind) {
    case COST_GEMM: {
        int tf32 = c->tc == TC_TF32 || (c->tc == TC_16BIT && c->operand >= 4);
        double rate = tf32 ? FLOOR_TF32 : c->tc == TC_16BIT ? PEAK_RANDOM : FLOOR_FP32_GEMM;
        return fmax(mem, (c->flop_tc + c->flop) / rate);
    }
    case COST_KERNEL: return fmax(mem, c->flop_tc / PEAK_RANDOM + c->flop / h->fp32);   /* wmma at the GEMMs' peak */
    case COST_COPY: return mem;
    case COST_HOST: return (c->rd + c->wr) / h->pcie;
    default: return 0;
    }
}

/* given (not NULL): the anchored calls' measured seconds (anchor.c) */
static double floor_step(const CostCall *calls, size_t n, const double *given)
{
    double t = 0;
    for (size_t i = 0; i < n; i++) t += given && given[i] >= 0 ? given[i] : floor_call(&calls[i]);
    return t;
}

typedef struct {
    const CostCall *calls, *cal;
    const double *given;   /* --anchor: measured seconds of the anchored calls, which no setting moves */
    size_t n, ncal;
    double mf, tok, cal_tok, cal_measured;
} Steps;

typedef struct {
    double t, cal_err;   /* step seconds; calibration error in % (NAN: none) */
} Priced;

static Priced price(const Steps *s, const Achieved *a)
{
    Priced p = { roofline_timeline_given(&GPUS[0], a, s->calls, s->n, s->given, NULL, NULL, NULL), NAN };
    if (s->cal) {
        double t = roofline_step(&GPUS[0], a, s->cal, s->ncal, NULL, NULL);
        p.cal_err = 100 * (s->cal_tok / t / s->cal_measured - 1);
    }
    return p;
}

/* a setting's value as it is read: seconds in microseconds */
static void print_value(char *buf, size_t len, const Setting *st, double v)
{
    size_t k = strlen(st->key);
    int us = k > 2 && !strcmp(st->key + k - 2, "_s");
    snprintf(buf, len, us ? "%g us" : "%g", us ? v * 1e6 : v);
}

static void print_row(const Steps *s, const char *name, const char *value, const char *kind, Priced p)
{
    printf("  %-14s %-9s %-9s %8.2f ms %6.1f%% %6.1f%%", name, value, kind, 1e3 * p.t,
           100 * s->mf / (p.t * PEAK_SHEET), 100 * s->mf / (p.t * PEAK_RANDOM));
    if (isnan(p.cal_err)) printf("\n");
    else printf("   %+6.1f%%%s\n", p.cal_err, fabs(p.cal_err) <= 20 ? "" : " (outside +-20%)");
}

static const char *KINDS[] = { "guessed", "measured", "fitted", "sheet" };

typedef struct {
    double lo, hi, lo_cal, hi_cal;   /* over every row; over rows within the calibration */
} Range;

static void widen(Range *r, Priced p)
{
    r->lo = fmin(r->lo, p.t), r->hi = fmax(r->hi, p.t);
    if (isnan(p.cal_err) || fabs(p.cal_err) <= 20) r->lo_cal = fmin(r->lo_cal, p.t), r->hi_cal = fmax(r->hi_cal, p.t);
}

/* each setting with other plausible values, one at a time */
static void sensitivity(const Steps *s, const Achieved *point, Range *r)
{
    char v[32];
    for (int i = 0; i < N_SETTINGS; i++) {
        const Setting *st = &SETTINGS[i];
        print_value(v, sizeof v, st, *setting_ptr((Achieved *)point, st));
        if (!st->n_alt) { printf("  %-14s %-9s %-9s (%s)\n", st->key, v, KINDS[st->measured], st->what); continue; }
        for (int k = 0; k < st->n_alt; k++) {
            Achieved a = *point;
            *setting_ptr(&a, st) = st->alt[k];
            Priced p = price(s, &a);
            print_value(v, sizeof v, st, st->alt[k]);
            print_row(s, st->key, v, KINDS[st->measured], p);
            widen(r, p);
        }
    }
}

void report_range(const Config *c, const Args *a, const CostCall *calls, size_t n)
{
    Steps s = { .calls = calls, .given = a->given, .n = n, .mf = model_flops(c, a->B, a->L), .tok = (double)a->B * a->L };
    if (a->cal_trace) {
        s.cal = read_trace(a->cal_trace, &s.ncal);
        s.cal_tok = 300.0 * 41, s.cal_measured = a->cal_measured;   /* gpu-bench's batch */
    }
    double fl = floor_step(calls, n, s.given);
    Priced pt = price(&s, &a->ach);
    printf("\n== range, %s, H100-SXM (docs/gpu-model.md \"Ranges\"); MFU of %.0f (data sheet) / %.0f (measured, random "
           "data) TFLOP/s%s\n", a->model, PEAK_SHEET / 1e12, PEAK_RANDOM / 1e12,
           s.given ? "; anchored: only the priced calls move" : "");
    printf("floor: every call at the measured peaks (%.0f TFLOP/s bf16, %.1f TB/s), no launch or host cost: %.2f ms  ",
           PEAK_RANDOM / 1e12, FLOOR_HBM / 1e12, 1e3 * fl);
    print_mfu(s.mf, fl);
    printf("point estimate: %.2f ms (%.2f x the floor)  ", 1e3 * pt.t, pt.t / fl);
    print_mfu(s.mf, pt.t);
    if (s.cal) {   /* the calibration's error, taken as a cost the model misses in proportion to the step */
        printf("point estimate with the calibration's %+.1f%% added: %.2f ms  ", pt.cal_err, 1e3 * pt.t * (1 + pt.cal_err / 100));
        print_mfu(s.mf, pt.t * (1 + pt.cal_err / 100));
    }
    printf("  %-14s %-9s %-9s %11s %7s %7s   %s\n", "setting", "value", "", "step", "MFU989", "MFU798",
           s.cal ? "calibration 122cb66" : "");
    print_row(&s, "(point)", "", "", pt);
    Range r = { pt.t, pt.t, pt.t, pt.t };
    sensitivity(&s, &a->ach, &r);
    printf("range %s: %.2f..%.2f ms (MFU %.1f..%.1f%% of %.0f, %.1f..%.1f%% of %.0f); point at %.0f%% of it from the "
           "fast end\n", a->model, 1e3 * r.lo, 1e3 * r.hi, 100 * s.mf / (r.hi * PEAK_SHEET),
           100 * s.mf / (r.lo * PEAK_SHEET), PEAK_SHEET / 1e12, 100 * s.mf / (r.hi * PEAK_RANDOM),
           100 * s.mf / (r.lo * PEAK_RANDOM), PEAK_RANDOM / 1e12, 100 * (pt.t - r.lo) / (r.hi - r.lo));
    if (s.cal)
        printf("range %s, settings within the +-20%% calibration: %.2f..%.2f ms (MFU %.1f..%.1f%% of %.0f, %.1f..%.1f%% "
               "of %.0f)\n", a->model, 1e3 * r.lo_cal, 1e3 * r.hi_cal, 100 * s.mf / (r.hi_cal * PEAK_SHEET),
               100 * s.mf / (r.lo_cal * PEAK_SHEET), PEAK_SHEET / 1e12, 100 * s.mf / (r.hi_cal * PEAK_RANDOM),
               100 * s.mf / (r.lo_cal * PEAK_RANDOM), PEAK_RANDOM / 1e12);
    printf("A100 and V100 are priced with the H100's fractions (guessed): their figures carry that guess too.\n");
    free((void *)s.cal);
}
