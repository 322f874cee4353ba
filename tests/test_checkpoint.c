/* checkpoint_open_model (the entry point of translate/eval/attention):
 * a written checkpoint loads back bitwise into a model built from the stored
 * config (non-default architecture, learned positions), and a truncated or
 * missing file gives 2; checkpoint_prune keeps what checkpoint.h says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "philox.h"
#include "util.h"

#define CHECK(c, ...) do { if (!(c)) { printf("FAIL: " __VA_ARGS__); printf("\n"); return 1; } } while (0)

/* a written checkpoint (non-default architecture, learned positions) loads
 * back bitwise: parameters, Adam moments, config and state; leaves it at path */
static int test_round_trip(const char *path, Backend *be)
{
    Config c;
    config_defaults(&c);
    c.n_layers = 3; c.d_model = 40; c.d_ff = 72; c.n_heads = 2; c.d_k = 12; c.d_v = 10;
    c.positional = POSITIONAL_LEARNED;
    c.seed = 77;
    ParamTable pt;
    param_table_build(&pt, &c.model);
    size_t P = pt.total;
    float *p = xmalloc(sizeof(float) * P), *mo = xmalloc(sizeof(float) * P), *vo = xmalloc(sizeof(float) * P);
    for (size_t i = 0; i < P; i++) {
        philox_ctr ctr = {{ (uint32_t)i, 1, 2, 3 }};
        philox_ctr r = philox4x32(ctr, 5, 6);
        p[i] = (float)((int)r.v[0] % 10000) / 777.0f;
        mo[i] = (float)r.v[1] * 1e-9f;
        vo[i] = (float)r.v[2] * 1e-12f;
    }
    char text[16384], msg[512];
    config_to_string(&c, text, sizeof text);
    CkptState st = { .step = 7, .elapsed = 1.5, .seed = 77, .ranks = 1, .update_freq = 1 };
    CHECK(checkpoint_write(path, &pt, p, mo, vo, text, &st, NULL, msg, sizeof msg) == 0, "write: %s", msg);

    Model m;
    Config got;
    CHECK(checkpoint_open_model(path, &got, NULL, &m, be) == 0, "open_model");
    CHECK(got.n_layers == 3 && got.d_model == 40 && got.d_k == 12 && got.seed == 77 && got.positional == POSITIONAL_LEARNED,
          "stored config not restored");
    CHECK(m.pt.total == P, "param count %zu vs %zu", m.pt.total, P);
    float *back = xmalloc(sizeof(float) * P);
    be->download(be, back, m.params, sizeof(float) * P);
    CHECK(!memcmp(back, p, sizeof(float) * P), "parameters differ after load");
    float *m2 = xmalloc(sizeof(float) * P), *v2 = xmalloc(sizeof(float) * P);
    CHECK(checkpoint_read_tensors(path, &pt, back, m2, v2) == 0, "read tensors");
    CHECK(!memcmp(m2, mo, sizeof(float) * P) && !memcmp(v2, vo, sizeof(float) * P), "Adam moments differ");
    CkptState s2;
    CHECK(checkpoint_read_config(path, &got, &s2) == 0 && s2.step == 7 && s2.elapsed == 1.5, "state attributes");
    model_free(&m);
    printf("ok: round trip of %zu parameters + Adam moments, config restored\n", P);
    free(p); free(mo); free(vo); free(back); free(m2); free(v2);
    param_table_free(&pt);
    return 0;
}

/* a copy of path cut to 3/4 of its bytes, and a missing file: both 2 */
static int test_truncated(const char *dir, const char *path, Backend *be)
{
    char trunc[300];
    snprintf(trunc, sizeof trunc, "%s/trunc.h5", dir);
    FILE *f = fopen(path, "rb"), *g = fopen(trunc, "wb");
    CHECK(f && g, "open %s, %s", path, trunc);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = xmalloc(n);
    CHECK(fread(buf, 1, n, f) == (size_t)n, "read");
    fwrite(buf, 1, n * 3 / 4, g);
    fclose(f); fclose(g);
    free(buf);
    Model m;
    Config got;
    CHECK(checkpoint_open_model(trunc, &got, NULL, &m, be) == 2, "truncated file accepted");
    CHECK(checkpoint_open_model("/nonexistent/x.h5", &got, NULL, &m, be) == 2, "missing file accepted");
    printf("ok: truncated and missing files rejected with 2\n");
    unlink(trunc);
    return 0;
}

/* checkpoint_prune on ckpt_1..11 (names only), keep 2 */
static int test_pruning(const char *dir)
{
    static const struct { int every, last, best; const char *want; } prune[] = {
        { 3, 100, 0, "6 9 11" },    /* interval 3, 6, 9: the newest two, and 11, the newest */
        { 0, 100, 0, "10 11" },     /* wall time only: every checkpoint counts */
        { 4, 10, 0, "8 10 11" },    /* 10 is the final step of train_steps=10 */
        { 5, 100, 0, "5 10 11" },
        { 11, 100, 0, "11" },       /* the newest is also an interval one */
        /* keep_best: the best and the newest 2 interval-or-best ones up to it */
        { 0, 100, 4, "3 4 10 11" },
        { 3, 100, 4, "3 4 6 9 11" },   /* 4 is off the interval, kept as the best; 3 before it */
        { 3, 100, 1, "1 6 9 11" },     /* nothing before the best */
        { 3, 100, 9, "6 9 11" },       /* the best among the newest: nothing more kept */
    };
    char path[256];
    for (size_t k = 0; k < sizeof prune / sizeof prune[0]; k++) {
        for (int i = 1; i <= 11; i++) {
            checkpoint_path(path, sizeof path, dir, i);
            FILE *e = fopen(path, "w");
            CHECK(e, "create %s", path);
            fclose(e);
        }
        checkpoint_prune(dir, 2, prune[k].every, prune[k].last, prune[k].best);
        char **paths, left[64] = "";
        int64_t *steps;
        int nl = checkpoint_list(dir, &paths, &steps);
        for (int i = 0; i < nl; i++) {
            snprintf(left + strlen(left), sizeof left - strlen(left), "%s%lld", i ? " " : "", (long long)steps[i]);
            unlink(paths[i]);
            free(paths[i]);
        }
        free(paths);
        free(steps);
        CHECK(!strcmp(left, prune[k].want), "prune keep 2, ckpt_steps %d, train_steps %d, best %d: left %s, want %s",
              prune[k].every, prune[k].last, prune[k].best, left, prune[k].want);
    }
    printf("ok: pruning keeps the newest interval checkpoints and the newest one, and with a best step the best and "
           "the newest interval ones up to it\n");
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/test_ckptXXXXXX", path[256];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "%s/ckpt_00000007.h5", dir);
    Backend *be = backend_cpu_create(1);
    int rc = test_round_trip(path, be) || test_truncated(dir, path, be);
    unlink(path);
    rc = rc || test_pruning(dir);
    rmdir(dir);
    be->destroy(be);
    return rc;
}
