/* Per-call timings (docs/gpu-model.md, "Per-call timing CSV" and "Fit"):
 * gpu_model --write-timing writes the CSV the model predicts for a step,
 * in the format the per-call timing mode writes on a GPU; gpu_model --fit
 * reads such a CSV, joins it row by row with the logged step, and refits
 * the model's guessed settings per class of call:
 * - host costs: per kernel launch, per cuBLAS call (the mean host time of
 *   their rows: least squares of a constant), per sync (its host time less
 *   its wait for the device on the timeline);
 * - memory-bound kernels (kernels, memsets, device copies): the bandwidth
 *   fraction by grid search, the device cost per launch by least squares;
 * - GEMMs: the tile rate and fixed cost jointly, then the 16-bit overlap,
 *   tile edge and split-K depth by grid search in turns, the device cost
 *   per call by least squares; then each GEMM shape class's own tile rate.
 * Events around a call measure its device time plus the device's wait for
 * the host before it; the fit takes the wait out (measured_waits) and
 * compares the rest with the model's device time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_model.h"
#include "util.h"

/* the model's per-call timing: device (with the wait before it) and host */
static void predict(const Achieved *a, const CostCall *calls, size_t n, double *dev, double *host)
{
    double *idle = xmalloc(sizeof(double) * (n + 1));
    roofline_timeline(&GPUS[0], a, calls, n, dev, idle, host);
    for (size_t i = 0; i < n; i++) dev[i] += idle[i];
    free(idle);
}

void write_timing(const char *path, const Achieved *a, const CostCall *calls, size_t n)
{
    double *dev = xmalloc(sizeof(double) * (n + 1)), *host = xmalloc(sizeof(double) * (n + 1));
    predict(a, calls, n, dev, host);
    FILE *f = fopen(path, "w");
    if (!f) die(1, "%s: cannot write", path);
    fprintf(f, TIMING_HEADER "\n");
    for (size_t i = 0; i < n; i++) {
        const CostCall *c = &calls[i];
        fprintf(f, "%zu,%s,%s,%s,%.0f,%.0f,%.0f,%.0f,%.4f,%.4f\n", i, c->op, c->call, KIND[c->kind], c->m, c->n, c->k,
                c->batch, 1e6 * dev[i], 1e6 * host[i]);
    }
    if (fclose(f)) die(1, "%s: write failed", path);
    free(dev);
    free(host);
}

/* one row of a timing CSV, checked against call i of the step */
static void join_row(const char *path, int ln, char *line, size_t i, const CostCall *c, double *dev, double *host)
{
    char op[128], call[128], kind[16];
    size_t idx;
    double m, nn, k, b;
    int got = sscanf(line, "%zu,%127[^,],%127[^,],%15[^,],%lf,%lf,%lf,%lf,%lf,%lf", &idx, op, call, kind, &m, &nn, &k,
                     &b, dev, host);
    if (got != 10) die(2, "%s:%d: not a row of a per-call timing CSV (%s)", path, ln, TIMING_HEADER);
    if (idx != i || strcmp(op, c->op) || strcmp(call, c->call) || strcmp(kind, KIND[c->kind]) || m != c->m ||
        nn != c->n || k != c->k || b != c->batch)
        die(2, "%s:%d: row %zu (%s %s %s %gx%gx%gx%g) does not join the step's call %zu (%s %s %s %gx%gx%gx%g): a timing "
            "of another step", path, ln, idx, op, call, kind, m, nn, k, b, i, c->op, c->call, KIND[c->kind], c->m, c->n,
            c->k, c->batch);
    *dev *= 1e-6;
    *host *= 1e-6;
}

/* a timing CSV, joined with the step's calls: measured device and host seconds */
void read_timing(const char *path, const CostCall *calls, size_t n, double *dev, double *host)
{
    FILE *f = fopen(path, "r");
    if (!f) die(2, "%s: cannot open the timing CSV", path);
    char line[1024];
    if (!fgets(line, sizeof line, f) || strncmp(line, TIMING_HEADER, strlen(TIMING_HEADER)))
        die(2, "%s:1: not a per-call timing CSV (header %s)", path, TIMING_HEADER);
    size_t i = 0;
    for (int ln = 2; fgets(line, sizeof line, f); ln++, i++) {
        if (i == n) die(2, "%s:%d: more rows than the step's %zu calls: a timing of another step", path, ln, n);
        join_row(path, ln, line, i, &calls[i], &dev[i], &host[i]);
    }
    fclose(f);
    if (i != n) die(2, "%s: %zu rows for the step's %zu calls: a timing of another step", path, i, n);
}

/* ------------------------------------------------------------- fitting */

/* the rows of one class of call and what the fit compares */
typedef struct {
    const CostCall *calls;
    const double *meas, *idle;   /* measured device seconds; the model's wait before each */
    const int *in;               /* in[i]: row i is in the class */
    size_t n;
    const Setting *base;         /* the per-call device cost fitted by least squares (NULL: none) */
} Rows;

/* squared error of the class at settings a, with its per-call cost set to
 * the least-squares constant (at least 0) */
static double class_sse(const Rows *r, Achieved *a)
{
    double sum = 0, cnt = 0, sse = 0;
    if (r->base) {   /* else the per-call cost stays as it is */
        double *base = setting_ptr(a, r->base);
        *base = 0;
        for (size_t i = 0; i < r->n; i++)
            if (r->in[i]) sum += r->meas[i] - r->idle[i] - roofline_call(&GPUS[0], a, &r->calls[i]), cnt++;
        *base = cnt > 0 ? fmax(0, sum / cnt) : 0;
    }
    for (size_t i = 0; i < r->n; i++)
        if (r->in[i]) {
            double e = r->meas[i] - r->idle[i] - roofline_call(&GPUS[0], a, &r->calls[i]);
            sse += e * e;
        }
    return sse;
}

/* grid search of one or two settings (key2 NULL: one) over [lo, hi] by
 * step; a tie keeps the values they had */
static double grid(const Rows *r, Achieved *a, const char *key1, double lo1, double hi1, double st1,
                   const char *key2, double lo2, double hi2, double st2)
{
    double *p1 = setting_ptr(a, setting_find(key1)), *p2 = key2 ? setting_ptr(a, setting_find(key2)) : NULL;
    double best = class_sse(r, a), b1 = *p1, b2 = p2 ? *p2 : 0, bbase = r->base ? *setting_ptr(a, r->base) : 0;
    for (double v1 = lo1; v1 <= hi1 + st1 / 2; v1 += st1)
        for (double v2 = lo2; v2 <= (p2 ? hi2 + st2 / 2 : lo2); v2 += p2 ? st2 : 1) {
            *p1 = v1;
            if (p2) *p2 = v2;
            double e = class_sse(r, a);
            if (e < best * (1 - 1e-12)) best = e, b1 = v1, b2 = v2, bbase = r->base ? *setting_ptr(a, r->base) : 0;
        }
    *p1 = b1;
    if (p2) *p2 = b2;
    if (r->base) *setting_ptr(a, r->base) = bbase;
    return best;
}

static int is_kernel(const CostCall *c) { return c->kind == COST_KERNEL || c->kind == COST_COPY; }

static void fit_kernels(Rows *r, Achieved *a, int *in)
{
    for (size_t i = 0; i < r->n; i++) in[i] = is_kernel(&r->calls[i]);
    r->base = setting_find("dev_launch_s");
    grid(r, a, "hbm_frac", 0.30, 1.00, 0.005, NULL, 0, 0, 0);
}

/* the GEMMs' rate key: the bf16 tile rate, or TF32's if no GEMM has
 * 16-bit operands (precision=tf32, or fp32 storage) */
static const char *gemm_rate_key(const CostCall *calls, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (calls[i].kind == COST_GEMM && calls[i].tc == TC_16BIT && calls[i].operand < 4) return "tc_frac";
    return "tf32_frac";
}

/* the tile rate and fixed cost jointly, for each 16-bit overlap in
 * [olo, ohi] by ost; the rate within rd of its value, k_fixed within kd */
static void grid_rate(const Rows *r, Achieved *a, const char *rate, double rd, double rst, double kd, double kst,
                      double olo, double ohi, double ost)
{
    double r0 = *setting_ptr(a, setting_find(rate)), k0 = a->k_fixed, best = class_sse(r, a);
    Achieved keep = *a;
    for (double o = fmax(0, olo); o <= fmin(1, ohi) + ost / 2; o += ost) {
        Achieved b = *a;
        b.overlap16 = o;
        double e = grid(r, &b, rate, fmax(0.05, r0 - rd), r0 + rd, rst, "k_fixed", fmax(0, k0 - kd), k0 + kd, kst);
        if (e < best * (1 - 1e-12)) best = e, keep = b;
    }
    *a = keep;
}

/* GEMMs: a coarse grid of rate, fixed cost and overlap; the tile edge and
 * split-K depth in turn (again while they move); then finer grids */
static void fit_gemms(Rows *r, Achieved *a, int *in)
{
    for (size_t i = 0; i < r->n; i++) in[i] = r->calls[i].kind == COST_GEMM;
    r->base = setting_find("dev_gemm_s");
    const char *rate = gemm_rate_key(r->calls, r->n);
    *setting_ptr(a, setting_find(rate)) = 0.7, a->k_fixed = 512;   /* the middle of the coarse grid */
    for (int sweep = 0; sweep < 4; sweep++) {
        double tile = a->tile, depth = a->splitk_depth;
        grid_rate(r, a, rate, 0.4, 0.02, 512, 64, 0, 1, 0.1);
        grid(r, a, "tile", 64, 256, 64, NULL, 0, 0, 0);
        grid(r, a, "splitk_depth", 0, 8, 1, NULL, 0, 0, 0);
        if (tile == a->tile && depth == a->splitk_depth) break;
    }
    grid_rate(r, a, rate, 0.02, 0.002, 64, 8, a->overlap16 - 0.1, a->overlap16 + 0.1, 0.02);
    grid_rate(r, a, rate, 0.002, 0.0002, 8, 1, a->overlap16 - 0.02, a->overlap16 + 0.02, 0.005);
}

/* The device's waits for the host, from the measurements alone: on the
 * model's timeline (roofline.c) the host has issued call i at H_i, the sum
 * of the host times so far, and the device frees at D_i, the sum of the
 * measured device times (each with its wait); call i waits max(0, H_i -
 * D_i-1).  wait[i] of a sync: how long the host waited for the device. */
void measured_waits(const CostCall *calls, size_t n, const double *meas, const double *host, double *wait)
{
    double H = 0, D = 0;
    for (size_t i = 0; i < n; i++) {
        if (calls[i].kind == COST_SYNC) {
            wait[i] = fmax(0, D - H);
            H += host[i];
            continue;
        }
        H += host[i];
        wait[i] = fmax(0, H - D);
        D += meas[i];
    }
}

/* host costs: per kernel and per cuBLAS call the mean host time; per sync
 * the mean less its wait for the device */
static void fit_host(const CostCall *calls, size_t n, const double *host, const double *wait, Achieved *a)
{
    double s[3] = {0}, cnt[3] = {0};
    for (size_t i = 0; i < n; i++) {
        CostKind k = calls[i].kind;
        int j = k == COST_GEMM ? 1 : k == COST_SYNC ? 2 : k == COST_COMM ? -1 : 0;
        if (j < 0) continue;
        s[j] += j == 2 ? host[i] - wait[i] : host[i];
        cnt[j]++;
    }
    if (cnt[0]) a->host_launch_s = s[0] / cnt[0];
    if (cnt[1]) a->host_gemm_s = s[1] / cnt[1];
    if (cnt[2]) a->host_sync_s = fmax(0, s[2] / cnt[2]);
}

/* ------------------------------------------------------------- report */

typedef struct {
    double meas, pred, sse;   /* seconds; squared seconds */
    long calls;
} Resid;

static void add_resid(Resid *r, double meas, double pred)
{
    r->meas += meas, r->pred += pred, r->sse += (meas - pred) * (meas - pred), r->calls++;
}

static void print_resid(const char *name, const char *fitted, Resid r)
{
    printf("  %-34s %5ld %11.1f %11.1f %+7.2f%% %9.3f  %s\n", name, r.calls, 1e6 * r.meas, 1e6 * r.pred,
           r.meas > 0 ? 100 * (r.pred / r.meas - 1) : 0.0, r.calls ? 1e6 * sqrt(r.sse / r.calls) : 0.0, fitted);
}

/* the residual of each class (host costs, memory-bound kernels, GEMMs) */
static void report_classes(const CostCall *calls, size_t n, const double *meas, const double *host,
                           const Achieved *a, const char *rate)
{
    double *pd = xmalloc(sizeof(double) * (n + 1)), *ph = xmalloc(sizeof(double) * (n + 1));
    predict(a, calls, n, pd, ph);
    Resid hr[3] = {{0}}, kr = {0}, gr = {0};
    for (size_t i = 0; i < n; i++) {
        CostKind k = calls[i].kind;
        if (k != COST_COMM) add_resid(&hr[k == COST_GEMM ? 1 : k == COST_SYNC ? 2 : 0], host[i], ph[i]);
        if (is_kernel(&calls[i])) add_resid(&kr, meas[i], pd[i]);
        if (k == COST_GEMM) add_resid(&gr, meas[i], pd[i]);
    }
    char v[160];
    printf("  %-34s %5s %11s %11s %8s %9s  %s\n", "class", "calls", "measured us", "fitted us", "", "rms us",
           "fitted settings");
    snprintf(v, sizeof v, "host_launch_s = %.3f us", 1e6 * a->host_launch_s);
    print_resid("host: kernel launches, copies", v, hr[0]);
    snprintf(v, sizeof v, "host_gemm_s = %.3f us", 1e6 * a->host_gemm_s);
    print_resid("host: cuBLAS calls", v, hr[1]);
    snprintf(v, sizeof v, "host_sync_s = %.3f us", 1e6 * a->host_sync_s);
    print_resid("host: syncs", v, hr[2]);
    snprintf(v, sizeof v, "hbm_frac = %.3f, dev_launch_s = %.3f us", a->hbm_frac, 1e6 * a->dev_launch_s);
    print_resid("device: memory-bound kernels", v, kr);
    snprintf(v, sizeof v, "%s = %.3f, k_fixed = %.0f, overlap16 = %.2f, tile = %.0f, splitk_depth = %.0f, "
             "dev_gemm_s = %.3f us", rate, *setting_ptr((Achieved *)a, setting_find(rate)), a->k_fixed, a->overlap16,
             a->tile, a->splitk_depth, 1e6 * a->dev_gemm_s);
    print_resid("device: GEMMs", v, gr);
    free(pd);
    free(ph);
}

/* each GEMM shape class (m, n, k, batch, operand bytes): its own tile rate
 * with every other setting as fitted, and the residuals with the common
 * rate and with its own */
static void report_shapes(Rows *r, const Achieved *a, int *in, const char *rate)
{
    int *done = xcalloc(r->n + 1, sizeof(int));
    printf("  GEMM shape classes (m x n x k [x batch], operand bytes): residual with the common %s, then its own\n", rate);
    for (size_t i = 0; i < r->n; i++) {
        const CostCall *c = &r->calls[i];
        if (c->kind != COST_GEMM || done[i]) continue;
        for (size_t j = i; j < r->n; j++) {
            const CostCall *d = &r->calls[j];
            in[j] = d->kind == COST_GEMM && d->m == c->m && d->n == c->n && d->k == c->k && d->batch == c->batch &&
                    d->operand == c->operand;
            done[j] |= in[j];
        }
        for (size_t j = 0; j < i; j++) in[j] = 0;
        Resid common = {0}, own = {0};
        Achieved b = *a;
        for (size_t j = 0; j < r->n; j++)
            if (in[j]) add_resid(&common, r->meas[j] - r->idle[j], roofline_call(&GPUS[0], a, &r->calls[j]));
        r->base = NULL;
        grid(r, &b, rate, 0.05, 1.50, 0.001, NULL, 0, 0, 0);
        for (size_t j = 0; j < r->n; j++)
            if (in[j]) add_resid(&own, r->meas[j] - r->idle[j], roofline_call(&GPUS[0], &b, &r->calls[j]));
        char name[96], v[96];
        snprintf(name, sizeof name, "%.0fx%.0fx%.0f%s%.0f, %.0fB", c->m, c->n, c->k, c->batch > 1 ? "x" : "",
                 c->batch > 1 ? c->batch : 0, c->operand);
        if (c->batch <= 1) snprintf(name, sizeof name, "%.0fx%.0fx%.0f, %.0fB", c->m, c->n, c->k, c->operand);
        snprintf(v, sizeof v, "own %s = %.3f: rms %.3f us, %+.2f%%", rate, *setting_ptr(&b, setting_find(rate)),
                 1e6 * sqrt(own.sse / own.calls), 100 * (own.pred / own.meas - 1));
        print_resid(name, v, common);
    }
    free(done);
}

static void print_settings(const char *label, const Achieved *a)
{
    printf("%s", label);
    for (int i = 0; i < N_SETTINGS; i++) printf(" %s=%.6g", SETTINGS[i].key, *setting_ptr((Achieved *)a, &SETTINGS[i]));
    printf("\n");
}

static double step_measured(const CostCall *calls, size_t n, const double *meas)
{
    double t = 0;
    for (size_t i = 0; i < n; i++)
        if (calls[i].kind != COST_SYNC && calls[i].kind != COST_COMM) t += meas[i];
    return t;
}

void fit_report(const char *path, const Achieved *a0, const CostCall *calls, size_t n)
{
    double *meas = xmalloc(sizeof(double) * (n + 1)), *host = xmalloc(sizeof(double) * (n + 1));
    double *idle = xmalloc(sizeof(double) * (n + 1));
    int *in = xmalloc(sizeof(int) * (n + 1));
    read_timing(path, calls, n, meas, host);
    const char *rate = gemm_rate_key(calls, n);
    Achieved a = *a0;
    Rows r = { .calls = calls, .meas = meas, .idle = idle, .in = in, .n = n };
    measured_waits(calls, n, meas, host, idle);
    fit_host(calls, n, host, idle, &a);
    fit_kernels(&r, &a, in);
    fit_gemms(&r, &a, in);
    printf("fit: %s, %zu calls joined with the step; H100-SXM\n", path, n);
    size_t unshaped = 0;
    for (size_t i = 0; i < n; i++) unshaped += calls[i].kind == COST_KERNEL && calls[i].blocks <= 0;
    if (unshaped)   /* a trace logged on a GPU before LAUNCH reported shapes there */
        printf("note: %zu kernel calls of the trace have no grid shape: priced without the bound of the loads in "
               "flight (roofline.c)\n", unshaped);
    printf("before, the model's settings:\n");
    report_classes(calls, n, meas, host, a0, rate);
    printf("after the fit:\n");
    report_classes(calls, n, meas, host, &a, rate);
    report_shapes(&r, &a, in, rate);
    printf("step: measured %.3f ms, predicted %.3f ms before the fit, %.3f ms after\n",
           1e3 * step_measured(calls, n, meas), 1e3 * roofline_step(&GPUS[0], a0, calls, n, NULL, NULL),
           1e3 * roofline_step(&GPUS[0], &a, calls, n, NULL, NULL));
    print_settings("fitted:", &a);
    free(meas), free(host), free(idle), free(in);
}
