/* Dynamic loss scaling (loss_scale.h). */
#include "loss_scale.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void parse_inf_hook(LossScaler *ls)
{
    const char *v = getenv("TRANSFORMER_GRAD_INF");
    ls->inf_step = 0;
    if (!v || !*v) return;
    char tail;
    ls->inf_times = 1;
    int n = sscanf(v, "%d:%d:%d%c", &ls->inf_rank, &ls->inf_step, &ls->inf_times, &tail);
    if (n < 2 || n > 3 || ls->inf_step < 1 || ls->inf_rank < 0 || ls->inf_times < 1)
        die(2, "TRANSFORMER_GRAD_INF=%s: expected RANK:STEP[:TIMES], e.g. 1:5 or 0:5:40", v);
}

void loss_scale_init(LossScaler *ls, const Config *c)
{
    memset(ls, 0, sizeof *ls);
    ls->enabled = config_loss_scaling(c);
    ls->scale = c->loss_scale_init;
    ls->window = c->loss_scale_window;
    ls->min_scale = c->loss_scale_min;
    ls->last_loss = NAN;
    parse_inf_hook(ls);
}

float loss_scale_factor(const LossScaler *ls) { return ls->enabled ? (float)ls->scale : 1.0f; }

void loss_scale_plant_inf(LossScaler *ls, Backend *be, float *grads, int rank, int step)
{
    if (ls->inf_step != step || ls->inf_rank != rank || ls->inf_times <= 0) return;
    ls->inf_times--;
    float inf = INFINITY;
    be->upload(be, grads, &inf, sizeof inf);   /* silent: the log line counts the skips */
}

int loss_scale_overflow(const LossScaler *ls, Backend *be, const float *grads, size_t n)
{
    return ls->enabled && be->any_nonfinite(be, grads, n);
}

int loss_scale_update(LossScaler *ls, int overflow, double loss_per_token)
{
    if (!ls->enabled) return LS_APPLY;
    if (isfinite(loss_per_token)) ls->last_loss = loss_per_token;
    if (overflow) {
        ls->skipped++;
        ls->good_steps = 0;
        ls->scale *= 0.5;
        return ls->scale < ls->min_scale ? LS_FLOOR : LS_SKIP;
    }
    /* S applies to this step's gradients; a doubling takes effect next step */
    if (++ls->good_steps >= ls->window) {
        ls->scale *= 2.0;
        ls->good_steps = 0;
    }
    return LS_APPLY;
}

void loss_scale_floor_error(const LossScaler *ls, int step)
{
    fprintf(stderr, "error: step %d: loss scale %g fell below loss_scale_min %g after %ld skipped steps (gradients "
            "overflow at every scale); last finite loss %.6f\n", step, ls->scale, ls->min_scale, ls->skipped,
            ls->last_loss);
}
