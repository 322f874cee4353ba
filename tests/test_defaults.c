/* The paper's hyperparameters as the program's defaults, and the beam
 * search's length penalty and output limit as section 6.1 states them,
 * each computed here on its own:
 *  - config_defaults: Adam beta1 0.9, beta2 0.98, eps 1e-9 (section 5.3),
 *    P_drop 0.1 and eps_ls 0.1 (5.4), eq. 3 (lr_factor 1, no decay),
 *    sinusoidal positions (3.5), beam 4, alpha 0.6, output limit input + 50
 *    (6.1), LayerNorm's eps 1e-6 (docs/training.md); the keys that a user's
 *    config or a Table 3 file need not give (test_torch_fixture and the
 *    other tests set their own values, so a changed default passed them);
 *  - decode_opts_from_config carries the config's beam, alpha and max_len_a
 *    to the search;
 *  - decode_length_penalty(n, alpha) = ((5 + n) / 6)^alpha (Wu et al. 2016)
 *    for n = 1..80 and alpha 0, 0.6, 1, 2: the tests of the beam search
 *    (test_decode) score their references with this same function, so a
 *    changed formula moved both sides together;
 *  - decode_max_out = source tokens + max_len_a, capped at the model's
 *    positions - 1 (BOS first), and by max_out when that is set. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "decode.h"
#include "model.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } } while (0)

/* a float default against the paper's decimal value: equal as floats */
#define DEFAULT_F(field, want, where) \
    CHECK(c.field == (float)(want), "default %s = %g, %s gives %g", #field, (double)c.field, where, (double)(want))
#define DEFAULT_I(field, want, where) \
    CHECK(c.field == (want), "default %s = %d, %s gives %d", #field, (int)c.field, where, (int)(want))

static void test_defaults(void)
{
    Config c;
    config_defaults(&c);
    DEFAULT_F(adam_beta1, 0.9, "section 5.3");
    DEFAULT_F(adam_beta2, 0.98, "section 5.3");
    DEFAULT_F(adam_eps, 1e-9, "section 5.3");
    DEFAULT_F(dropout, 0.1, "section 5.4 (P_drop)");
    DEFAULT_F(label_smoothing, 0.1, "section 5.4 (eps_ls)");
    DEFAULT_F(lr_factor, 1.0, "eq. 3");
    DEFAULT_F(lr_peak, 0.0, "eq. 3 (lr_peak off)");
    DEFAULT_I(lr_decay, LR_DECAY_RSQRT, "eq. 3 (inverse square root decay)");
    DEFAULT_F(ln_eps, 1e-6, "docs/training.md");
    DEFAULT_I(beam, 4, "section 6.1");
    DEFAULT_F(len_alpha, 0.6, "section 6.1");
    DEFAULT_I(max_len_a, 50, "section 6.1 (input length + 50)");
    /* sinusoidal positions: no learned position table (row E is learned) */
    ParamTable pt;
    param_table_build(&pt, &c.model);
    CHECK(!pt.has_pos, "the default positions are learned; section 3.5 uses sinusoids");
    param_table_free(&pt);

    /* the search takes the config's values (other than the defaults here) */
    c.beam = 7;
    c.len_alpha = 0.3f;
    c.max_len_a = 13;
    DecodeOpts o;
    decode_opts_from_config(&o, &c);
    CHECK(o.beam == 7 && o.len_alpha == 0.3f && o.max_len_a == 13 && o.max_out == 0,
          "decode_opts_from_config: beam %d alpha %g max_len_a %d max_out %d, not the config's 7, 0.3, 13, 0",
          o.beam, (double)o.len_alpha, o.max_len_a, o.max_out);
    printf("defaults: Adam (0.9, 0.98, 1e-9), dropout 0.1, eps_ls 0.1, eq. 3, sinusoids, beam 4, alpha 0.6, +50\n");
}

static void test_length_penalty(void)
{
    const float alphas[] = { 0.0f, 0.6f, 1.0f, 2.0f };
    double worst = 0;
    for (int a = 0; a < 4; a++) {
        double wa = 0, got_w = 0, want_w = 0;   /* this alpha's worst n, reported once */
        int nw = 0;
        for (int n = 1; n <= 80; n++) {
            /* ((5 + |Y|) / 6)^alpha as exp(alpha log(.)): another route than pow */
            double want = exp((double)alphas[a] * log((5.0 + n) / 6.0));
            double got = decode_length_penalty(n, alphas[a]);
            double r = fabs(got - want) / want;
            if (r > wa) { wa = r; nw = n; got_w = got; want_w = want; }
        }
        if (wa > worst) worst = wa;
        CHECK(wa < 1e-12, "alpha %g: lp(%d) = %.17g, ((5 + n) / 6)^alpha = %.17g (the worst of n = 1..80)",
              (double)alphas[a], nw, got_w, want_w);
    }
    /* the ranking it makes: with alpha 0.6 a longer hypothesis wins
     * against a shorter one whose log-probability is not much higher */
    double s_short = -2.0 / decode_length_penalty(3, 0.6f), s_long = -2.2 / decode_length_penalty(9, 0.6f);
    CHECK(s_long > s_short, "alpha 0.6: -2.2 over 9 tokens scores %g, below -2.0 over 3 tokens %g", s_long, s_short);
    printf("length penalty: ((5 + n) / 6)^alpha for n 1..80, alpha 0, 0.6, 1, 2 (worst relative %.1e)\n", worst);
}

static void test_max_out(void)
{
    Config c;
    config_defaults(&c);
    c.max_len = 100;
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = c.model;
    param_table_build(&m.pt, &c.model);   /* sinusoids: 2 * max_len positions (model_positions) */
    DecodeOpts o;
    decode_opts_from_config(&o, &c);
    int P = model_positions(&m);
    CHECK(P == 200, "model_positions: %d, 2 * max_len = 200 expected with sinusoids", P);
    for (int s = 0; s <= 180; s += 7) {
        int want = s + 50 < P - 1 ? s + 50 : P - 1;
        int got = decode_max_out(&m, &o, s);
        CHECK(got == want, "decode_max_out(%d source tokens) = %d, min(%d + 50, positions - 1) = %d", s, got, s, want);
    }
    o.max_out = 20;
    CHECK(decode_max_out(&m, &o, 10) == 20, "max_out 20: decode_max_out(10) = %d", decode_max_out(&m, &o, 10));
    o.max_out = 0;
    o.max_len_a = 10;
    CHECK(decode_max_out(&m, &o, 10) == 20, "max_len_a 10: decode_max_out(10) = %d", decode_max_out(&m, &o, 10));
    param_table_free(&m.pt);
    printf("decode_max_out: source + 50, capped at the positions - 1 and by max_out\n");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_defaults();
    test_length_penalty();
    test_max_out();
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures != 0;
}
