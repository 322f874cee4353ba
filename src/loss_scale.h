/* Dynamic loss scaling for fp16 mixed precision (Micikevicius et al. 2018,
 * section 3.2): backward differentiates S x the loss, so that small
 * gradients stay above fp16's smallest subnormal (6e-8); Adam divides by S
 * again.  A step whose gradients overflowed (an inf or NaN on any rank) is
 * skipped on every rank -- parameters, Adam moments and the schedule's step
 * unchanged -- and S halves; after `window` finite steps in a row S doubles.
 * S below loss_scale_min stops the run.  S stays a power of two times
 * loss_scale_init, so scaling and unscaling are exact in binary floating
 * point: with scaling on, an fp32 run computes the same parameters as
 * without (barring overflow).
 *
 * Keys: loss_scale = auto (dynamic for precision=fp16, else off) | dynamic
 * | off; loss_scale_init, loss_scale_window, loss_scale_min
 * (docs/training.md).  S, the good-step counter and the count of skipped
 * steps are saved in checkpoints (docs/checkpoint.md). */
#ifndef LOSS_SCALE_H
#define LOSS_SCALE_H

#include "config.h"
#include "ops.h"

typedef struct {
    int enabled;
    double scale;        /* S */
    long good_steps;     /* finite steps in a row since S last changed */
    long skipped;        /* steps skipped over the whole run (resumes included) */
    int window;
    double min_scale;
    double last_loss;    /* per-token loss of the last step whose loss was finite (for the floor error) */
    /* test hook TRANSFORMER_GRAD_INF=RANK:STEP[:TIMES] */
    int inf_rank, inf_step, inf_times;
} LossScaler;

/* from the config (loss_scale, loss_scale_*) and the test hook's variable;
 * a malformed TRANSFORMER_GRAD_INF is one line on stderr and exit 2 */
void loss_scale_init(LossScaler *ls, const Config *c);
/* what backward multiplies the loss by: S, or 1 when off */
float loss_scale_factor(const LossScaler *ls);
/* test hook: writes +inf into grads[0] on the hook's rank at its step (the
 * first TIMES attempts of that step) */
void loss_scale_plant_inf(LossScaler *ls, Backend *be, float *grads, int rank, int step);
/* this rank's verdict on its gradients: 1 if any is inf or NaN (0 when off) */
int loss_scale_overflow(const LossScaler *ls, Backend *be, const float *grads, size_t n);

enum { LS_APPLY, LS_SKIP, LS_FLOOR };
/* after the step's overflow flag is summed over the ranks (overflow > 0:
 * some rank overflowed) and its loss known: LS_APPLY (update the weights,
 * maybe double S), LS_SKIP (S halved) or LS_FLOOR (S fell below
 * loss_scale_min: the caller stops the run, loss_scale_floor_error) */
int loss_scale_update(LossScaler *ls, int overflow, double loss_per_token);
/* the one-line error of LS_FLOOR on stderr */
void loss_scale_floor_error(const LossScaler *ls, int step);

#endif
