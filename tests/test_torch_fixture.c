/* Agreement with an independent PyTorch implementation of the paper's model
 * (tests/torch_reference/make_fixtures.py, float64, committed fixtures in
 * tests/torch_reference/fixtures.h5), for sinusoidal and learned positions:
 *  - the parameter table (names, offsets, shapes) and param_init_host's
 *    initial weights equal the fixture's (the script re-implements Philox);
 *  - with dropout on (same counter-based masks) the summed loss agrees to
 *    1e-5 relative and every gradient tensor to 1e-4 relative (norm-wise);
 *  - the losses of 10 Adam steps (dropout off, eq. 3 schedule, warmup 4)
 *    agree to 1e-5 relative.
 * Regenerate the fixtures with /usr/bin/python3 tests/torch_reference/make_fixtures.py. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "config.h"
#include "model.h"

static int failures = 0;

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); failures++; } } while (0)

static void die_h5(const char *what) { fprintf(stderr, "error: fixture: cannot read %s\n", what); exit(1); }

static double attr_f64(hid_t g, const char *name)
{
    double v;
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) die_h5(name);
    H5Aclose(a);
    return v;
}

static long attr_i64(hid_t g, const char *name)
{
    long long v;
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_LLONG, &v) < 0) die_h5(name);
    H5Aclose(a);
    return (long)v;
}

static unsigned long long attr_u64(hid_t g, const char *name)
{
    unsigned long long v;
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_ULLONG, &v) < 0) die_h5(name);
    H5Aclose(a);
    return v;
}

/* reads a whole dataset converted to mem_type; returns the element count */
static size_t read_ds(hid_t g, const char *name, hid_t mem_type, size_t elem, void **out)
{
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0) die_h5(name);
    hid_t s = H5Dget_space(d);
    hssize_t n = H5Sget_simple_extent_npoints(s);
    *out = malloc(elem * (n > 0 ? (size_t)n : 1));
    if (H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) die_h5(name);
    H5Sclose(s);
    H5Dclose(d);
    return (size_t)n;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* the fixture group's model and training hyperparameters */
static Config fixture_config(hid_t g, const char *group)
{
    Config c;
    config_defaults(&c);
    c.n_layers = (int)attr_i64(g, "n_layers");
    c.d_model = (int)attr_i64(g, "d_model");
    c.n_heads = (int)attr_i64(g, "n_heads");
    c.d_k = (int)attr_i64(g, "d_k");
    c.d_v = (int)attr_i64(g, "d_v");
    c.d_ff = (int)attr_i64(g, "d_ff");
    c.vocab_size = (int)attr_i64(g, "vocab_size");
    c.max_len = (int)attr_i64(g, "max_len");
    c.warmup = (int)attr_i64(g, "warmup");
    c.ln_eps = (float)attr_f64(g, "ln_eps");
    c.dropout = (float)attr_f64(g, "dropout");
    c.label_smoothing = (float)attr_f64(g, "label_smoothing");
    c.lr_factor = (float)attr_f64(g, "lr_factor");
    c.adam_beta1 = (float)attr_f64(g, "adam_beta1");
    c.adam_beta2 = (float)attr_f64(g, "adam_beta2");
    c.adam_eps = (float)attr_f64(g, "adam_eps");
    c.seed = attr_u64(g, "seed");
    if (config_set(&c, "fixture", 0, "positional", group)) exit(2);
    return c;
}

/* parameter table layout: names, offsets and shapes as the fixture's */
static void check_param_table(hid_t g, const char *group, const Model *m)
{
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, 96);
    char *names;
    long long *offs, *shapes;
    size_t nt = read_ds(g, "tensor_names", st, 96, (void **)&names);
    read_ds(g, "tensor_offsets", H5T_NATIVE_LLONG, sizeof(long long), (void **)&offs);
    read_ds(g, "tensor_shapes", H5T_NATIVE_LLONG, sizeof(long long), (void **)&shapes);
    H5Tclose(st);
    CHECK((int)nt == m->pt.n, "[%s] %zu tensors in the fixture, %d in the model", group, nt, m->pt.n);
    for (int t = 0; t < m->pt.n && t < (int)nt; t++) {
        char nm[97];
        memcpy(nm, names + 96 * t, 96);
        nm[96] = 0;
        const ParamInfo *pi = &m->pt.t[t];
        CHECK(!strcmp(nm, pi->name) && (size_t)offs[t] == pi->offset && shapes[2 * t] == pi->rows
                  && shapes[2 * t + 1] == pi->cols,
              "[%s] tensor %d: fixture %s @%lld [%lld,%lld], model %s @%zu [%d,%d]", group, t, nm, offs[t],
              shapes[2 * t], shapes[2 * t + 1], pi->name, pi->offset, pi->rows, pi->cols);
    }
    free(names); free(offs); free(shapes);
}

/* initial weights: param_init_host against the script's Philox port;
 * returns the fixture's weights (P floats), which the later stages start from */
static float *check_initial_weights(hid_t g, const char *group, const Model *m, const Config *c)
{
    size_t P = m->pt.total;
    float *p_fix, *p_c = malloc(sizeof(float) * P);
    size_t np_ = read_ds(g, "params", H5T_NATIVE_FLOAT, sizeof(float), (void **)&p_fix);
    CHECK(np_ == P, "[%s] fixture has %zu parameters, model %zu", group, np_, P);
    if (np_ != P) exit(1);   /* the later stages would read past the fixture's weights */
    param_init_host(&m->pt, &c->model, p_c);
    double init_err = 0;
    for (size_t i = 0; i < P; i++) init_err = fmax(init_err, fabs((double)p_c[i] - p_fix[i]));
    CHECK(init_err <= 1e-6, "[%s] param_init_host differs from the fixture by %.3g", group, init_err);
    printf("[%s] %zu parameters; initial weights: max |C - fixture| = %.3g\n", group, P, init_err);
    free(p_c);
    return p_fix;
}

static Batch read_fixture_batch(hid_t g, const char *group)
{
    Batch b = {0};
    size_t B = read_ds(g, "src_len", H5T_NATIVE_INT32, 4, (void **)&b.src_len);
    size_t ns = read_ds(g, "src", H5T_NATIVE_INT32, 4, (void **)&b.src);
    size_t ntt = read_ds(g, "tgt_in", H5T_NATIVE_INT32, 4, (void **)&b.tgt_in);
    read_ds(g, "tgt_out", H5T_NATIVE_INT32, 4, (void **)&b.tgt_out);
    read_ds(g, "tgt_len", H5T_NATIVE_INT32, 4, (void **)&b.tgt_len);
    read_ds(g, "sent_id", H5T_NATIVE_UINT32, 4, (void **)&b.sent_id);
    b.B = (int)B;
    b.S = (int)(ns / B);
    b.T = (int)(ntt / B);
    for (size_t k = 0; k < B; k++) { b.n_src_tokens += b.src_len[k]; b.n_tgt_tokens += b.tgt_len[k]; }
    long ntok = attr_i64(g, "n_tokens");
    CHECK(b.n_tgt_tokens == ntok, "[%s] %ld target tokens, fixture %ld", group, b.n_tgt_tokens, ntok);
    return b;
}

/* every gradient tensor against the fixture's, norm-wise relative */
static void check_grads(hid_t g, const char *group, Model *m, Backend *be)
{
    size_t P = m->pt.total;
    float *gc = malloc(sizeof(float) * P);
    double *gf;
    read_ds(g, "grads", H5T_NATIVE_DOUBLE, sizeof(double), (void **)&gf);
    be->download(be, gc, m->grads, sizeof(float) * P);
    double worst = 0;
    const char *worst_name = "";
    for (int t = 0; t < m->pt.n; t++) {
        const ParamInfo *pi = &m->pt.t[t];
        double num = 0, den = 0;
        for (size_t i = pi->offset; i < pi->offset + pi->numel; i++) {
            num += ((double)gc[i] - gf[i]) * ((double)gc[i] - gf[i]);
            den += gf[i] * gf[i];
        }
        /* learned positions beyond the longest sentence get no gradient */
        double e = den > 0 ? sqrt(num / den) : sqrt(num);
        CHECK(e < 1e-4, "[%s] gradient of %s: relative error %.3g (|g| %.3g)", group, pi->name, e, sqrt(den));
        if (e > worst) { worst = e; worst_name = pi->name; }
    }
    printf("[%s] gradients: worst tensor relative error %.2e (%s)\n", group, worst, worst_name);
    free(gc); free(gf);
}

/* loss with dropout on (the same counter-based masks), then the eval loss
 * (dropout off), then the gradients of the dropout-on pass */
static void check_loss_and_grads(hid_t g, const char *group, Model *m, Backend *be, const float *p_fix,
                                 const Batch *b)
{
    size_t P = m->pt.total;
    uint32_t grad_step = (uint32_t)attr_i64(g, "grad_step");
    be->upload(be, m->params, p_fix, sizeof(float) * P);
    be->zero(be, m->grads, sizeof(float) * P);
    LossStats ls = model_forward_backward(m, b, grad_step, 1, 1, NULL, NULL);
    double ref = attr_f64(g, "loss_sum");
    CHECK(rel(ls.loss_sum, ref) < 1e-5, "[%s] loss_sum %.8f, fixture %.8f (rel %.3g)", group, ls.loss_sum, ref,
          rel(ls.loss_sum, ref));
    printf("[%s] loss_sum (dropout on) C %.8f torch %.8f rel %.2e\n", group, ls.loss_sum, ref, rel(ls.loss_sum, ref));
    LossStats le = model_forward_backward(m, b, grad_step, 0, 0, NULL, NULL);
    double ref_e = attr_f64(g, "eval_loss_sum");
    CHECK(rel(le.loss_sum, ref_e) < 1e-5, "[%s] eval loss_sum %.8f, fixture %.8f", group, le.loss_sum, ref_e);
    check_grads(g, group, m, be);
}

/* 10 Adam steps from the fixture's weights, dropout off, loss normalised by
 * the target tokens (eq. 3 schedule): each step's loss and the final one */
static void check_adam_steps(hid_t g, const char *group, Model *m, Backend *be, const float *p_fix,
                             const Batch *b)
{
    size_t P = m->pt.total;
    be->upload(be, m->params, p_fix, sizeof(float) * P);
    double *al;
    size_t nsteps = read_ds(g, "adam_losses", H5T_NATIVE_DOUBLE, sizeof(double), (void **)&al);
    double worst_adam = 0;
    for (size_t s = 1; s <= nsteps; s++) {
        be->zero(be, m->grads, sizeof(float) * P);
        LossStats st2 = model_forward_backward(m, b, (uint32_t)s, 0, 1, NULL, NULL);
        double loss = st2.loss_sum / st2.n_tokens;
        CHECK(rel(loss, al[s - 1]) < 1e-5, "[%s] Adam step %zu: loss %.8f, fixture %.8f (rel %.3g)", group, s, loss,
              al[s - 1], rel(loss, al[s - 1]));
        worst_adam = fmax(worst_adam, rel(loss, al[s - 1]));
        model_adam_step(m, (int)s, (float)(1.0 / st2.n_tokens));
    }
    double fin = model_forward_backward(m, b, 0, 0, 0, NULL, NULL).loss_sum / b->n_tgt_tokens;
    double ref_f = attr_f64(g, "adam_final_loss");
    CHECK(rel(fin, ref_f) < 1e-5, "[%s] loss after 10 Adam steps %.8f, fixture %.8f", group, fin, ref_f);
    worst_adam = fmax(worst_adam, rel(fin, ref_f));
    printf("[%s] %zu Adam steps: loss %.6f -> %.6f, worst relative error %.2e\n", group, nsteps, al[0], fin, worst_adam);
    free(al);
}

static void run_case(hid_t file, const char *group)
{
    hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    if (g < 0) die_h5(group);
    Config c = fixture_config(g, group);
    Backend *be = backend_cpu_create(1);
    Model m;
    if (model_init(&m, &c.model, be)) die_h5("model_init");
    check_param_table(g, group, &m);
    float *p_fix = check_initial_weights(g, group, &m, &c);
    Batch b = read_fixture_batch(g, group);
    check_loss_and_grads(g, group, &m, be, p_fix, &b);
    /* a fresh model: Adam's moments start at zero */
    model_free(&m);
    if (model_init(&m, &c.model, be)) die_h5("model_init");
    check_adam_steps(g, group, &m, be, p_fix, &b);
    free(p_fix);
    batch_free(&b);
    model_free(&m);
    be->destroy(be);
    H5Gclose(g);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/torch_reference/fixtures.h5";
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) { fprintf(stderr, "error: %s: cannot open the fixture file\n", path); return 1; }
    run_case(f, "sinusoid");
    run_case(f, "learned");
    H5Fclose(f);
    printf("test_torch_fixture: %d failures\n", failures);
    return failures ? 1 : 0;
}
