/* gpu_model --anchor TRACE TIMING [--changed K,...] (docs/gpu-model.md,
 * "Anchored to a measurement"): the step priced with the times a GPU
 * measured wherever the step still makes those calls.
 *
 * TRACE and TIMING are a step logged and timed per call on a GPU
 * (--write-trace, --time-calls; e.g. tests/gpu/calibration/cf63d2a-h200/).
 * A call of this step whose class the anchor has (op, call, kind, shape,
 * declared bytes and FLOPs: the same work) takes the mean measured device
 * time of the anchor's calls of that class, with the device's waits for
 * the host taken out (fit.c's measured_waits).  Every other call is priced
 * by the model at the given settings, and so is a kernel named in
 * --changed: one whose body changed since the anchor's commit while its
 * declaration did not (a pass fewer over the same bytes).  The host's
 * costs come from the settings.  A lever's predicted gain then rests on
 * the model only for the calls the lever changes, not on the model's error
 * over the rest of the step, which the H200 showed to be 34% (section 4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_model.h"
#include "util.h"

typedef struct {
    const CostCall *c;   /* the class's first call */
    double sum;          /* device seconds: measured (waits out) in the anchor, or priced here */
    double anchor;       /* priced classes: the anchor's measured seconds of the same class (0: none) */
    long calls, used;    /* calls; for an anchor class, this step's calls that took its time */
    int why;             /* priced classes: 0 no such class in the anchor, 1 changed since it */
} Class;

static int same_class(const CostCall *a, const CostCall *b)
{
    return a->kind == b->kind && !strcmp(a->op, b->op) && !strcmp(a->call, b->call) && a->m == b->m &&
           a->n == b->n && a->k == b->k && a->batch == b->batch && a->rd == b->rd && a->wr == b->wr &&
           a->flop_tc == b->flop_tc && a->flop == b->flop && a->tc == b->tc && a->operand == b->operand;
}

/* the class of c in cl[0..ncl), or NULL */
static Class *find_class(Class *cl, int ncl, const CostCall *c)
{
    for (int k = 0; k < ncl; k++)
        if (same_class(cl[k].c, c)) return &cl[k];
    return NULL;
}

/* the class of c in cl[0..*ncl), added if new */
static Class *class_for(Class *cl, int *ncl, const CostCall *c)
{
    Class *k = find_class(cl, *ncl, c);
    if (k) return k;
    cl[*ncl] = (Class){ .c = c };
    return &cl[(*ncl)++];
}

/* is the call's name, less any template part, in the comma-separated list? */
static int is_changed(const char *list, const char *call)
{
    size_t len = strcspn(call, "<");
    while (list && *list) {
        size_t k = strcspn(list, ",");
        if (k == len && !strncmp(list, call, len)) return 1;
        list += k + (list[k] == ',');
    }
    return 0;
}

/* every name of the --changed list is a kernel of this step (a misspelt
 * one would leave the kernel it meant at its old measured time) */
static void check_changed(const char *list, const CostCall *calls, size_t n)
{
    while (list && *list) {
        size_t k = strcspn(list, ","), i = 0;
        while (i < n && !(strcspn(calls[i].call, "<") == k && !strncmp(calls[i].call, list, k))) i++;
        if (i == n) die(2, "gpu-model: --changed %.*s: no call of this step has that name", (int)k, list);
        list += k + (list[k] == ',');
    }
}

static int timed(const CostCall *c) { return c->kind != COST_SYNC && c->kind != COST_COMM; }

/* the anchor's classes with their measured device seconds; *given0 the
 * anchor's own calls at those times (its anchored timeline) */
static Class *anchor_classes(const Args *a, CostCall **trace, size_t *nt, int *ncl, double **given0)
{
    CostCall *t = read_trace(a->anchor_trace, nt);
    size_t n = *nt;
    double *meas = xmalloc(sizeof(double) * (n + 1)), *host = xmalloc(sizeof(double) * (n + 1));
    double *wait = xmalloc(sizeof(double) * (n + 1));
    read_timing(a->anchor_timing, t, n, meas, host);
    measured_waits(t, n, meas, host, wait);
    Class *cl = xmalloc(sizeof(Class) * (n + 1));
    *ncl = 0;
    for (size_t i = 0; i < n; i++) {
        if (!timed(&t[i])) continue;
        Class *k = class_for(cl, ncl, &t[i]);
        k->sum += meas[i] - wait[i];
        k->calls++;
    }
    *given0 = xmalloc(sizeof(double) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        Class *k = timed(&t[i]) ? class_for(cl, ncl, &t[i]) : NULL;
        (*given0)[i] = k ? k->sum / k->calls : -1;
    }
    free(meas), free(host), free(wait);
    *trace = t;
    return cl;
}

static void print_class(const Class *k, double ms, const char *note)
{
    const CostCall *c = k->c;
    char shape[96] = "";
    if (c->kind == COST_GEMM) snprintf(shape, sizeof shape, " %.0fx%.0fx%.0f%s", c->m, c->n, c->k, c->batch > 1 ? "xB" : "");
    printf("  %-22s %-30s%-18s %5ld %9.3f ms%s\n", c->op, c->call, shape, k->calls, ms, note);
}

/* the priced calls by class, and the anchor's classes this step dropped */
static void print_changes(const Class *cl, int ncl, const Class *pr, int npr)
{
    char note[96];
    printf("priced by the model (%d classes):\n", npr);
    for (int k = 0; k < npr; k++) {
        if (pr[k].why) snprintf(note, sizeof note, "  changed since the anchor (measured there: %.3f ms)", 1e3 * pr[k].anchor);
        else snprintf(note, sizeof note, "  not in the anchor");
        print_class(&pr[k], 1e3 * pr[k].sum, note);
    }
    printf("measured in the anchor, not called by this step:\n");
    for (int k = 0; k < ncl; k++)
        if (!cl[k].used) print_class(&cl[k], 1e3 * cl[k].sum, "");
}

static int by_seconds(const void *x, const void *y)
{
    double a = ((const Class *)x)->sum, b = ((const Class *)y)->sum;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* the anchored step's device seconds by op (each call measured or priced),
 * the largest first: where its time goes, the next lever's candidates */
static void print_ops(const CostCall *calls, size_t n, const double *given, const Achieved *ach)
{
    Class *op = xmalloc(sizeof(Class) * (n + 1));
    int nop = 0;
    for (size_t i = 0; i < n; i++) {
        if (!timed(&calls[i])) continue;
        int k = 0;
        while (k < nop && strcmp(op[k].c->op, calls[i].op)) k++;
        if (k == nop) op[nop++] = (Class){ .c = &calls[i] };
        double t = given[i] >= 0 ? given[i] : roofline_call(&GPUS[0], ach, &calls[i]);
        op[k].sum += t, op[k].calls++, op[k].used += given[i] >= 0;
        if (given[i] < 0) op[k].anchor += t;
    }
    qsort(op, (size_t)nop, sizeof op[0], by_seconds);
    printf("the anchored step by op (device ms; priced: the part the model priced):\n");
    for (int k = 0; k < nop; k++)
        printf("  %-22s %5ld calls %9.3f ms%s\n", op[k].c->op, op[k].calls, 1e3 * op[k].sum,
               op[k].anchor > 0 ? (op[k].used ? "  (part priced)" : "  (priced)") : "");
    free(op);
}

double *anchor_step(const Args *a, const CostCall *calls, size_t n, double model_flop)
{
    size_t nt;
    int ncl, npr = 0;
    CostCall *trace;
    double *given0, *given = xmalloc(sizeof(double) * (n + 1)), meas_s = 0, priced_s = 0;
    check_changed(a->changed, calls, n);
    Class *cl = anchor_classes(a, &trace, &nt, &ncl, &given0), *pr = xmalloc(sizeof(Class) * (n + 1));
    long taken = 0, priced = 0;
    for (size_t i = 0; i < n; i++) {
        given[i] = -1;
        if (!timed(&calls[i])) continue;
        Class *k = find_class(cl, ncl, &calls[i]);
        int chg = is_changed(a->changed, calls[i].call);
        if (k && !chg) {
            given[i] = k->sum / k->calls;
            k->used++, taken++, meas_s += given[i];
            continue;
        }
        if (k) k->used++;
        Class *p = class_for(pr, &npr, &calls[i]);
        double t = roofline_call(&GPUS[0], &a->ach, &calls[i]);
        p->sum += t, p->calls++, p->why = chg, p->anchor = k ? k->sum : 0;
        priced++, priced_s += t;
    }
    double t0 = roofline_timeline_given(&GPUS[0], &a->ach, trace, nt, given0, NULL, NULL, NULL);
    double t1 = roofline_timeline_given(&GPUS[0], &a->ach, calls, n, given, NULL, NULL, NULL);
    printf("\n== anchored to %s (per-call times measured on a GPU, the device's waits for the host taken out; "
           "docs/gpu-model.md \"Anchored\")\n", a->anchor_timing);
    printf("anchor: %zu calls of %d classes; its own step at those times: %.3f ms\n", nt, ncl, 1e3 * t0);
    printf("this step: %ld calls at their class's measured mean (%.3f ms), %ld priced by the model at the settings "
           "(%.3f ms)\n", taken, 1e3 * meas_s, priced, 1e3 * priced_s);
    print_changes(cl, ncl, pr, npr);
    print_ops(calls, n, given, &a->ach);
    printf("anchored step: %.3f ms (%.0f tok/s), %.3fx the anchor's %.3f ms; ", 1e3 * t1, a->B * (double)a->L / t1,
           t0 / t1, 1e3 * t0);
    print_mfu(model_flop, t1);
    free(cl), free(pr), free(given0);
    for (size_t i = 0; i < nt; i++) free((char *)trace[i].op), free((char *)trace[i].call);
    free(trace);
    return given;
}
