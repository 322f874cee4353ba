"""Failure verdict of one training run from its curves (docs/results.md,
"Verdicts"): healthy, diverged, stuck or unstable, with a one-line reason.

Computed by row_result.py when it writes a row's result file; the rules
and their thresholds are the constants below.  Margins measured on real
curves are in docs/results.md.  The first rule that fires wins, in the
order diverged, stuck, unstable."""

import math

import numpy as np

VERDICTS = ("healthy", "diverged", "stuck", "unstable")

# diverged: dev NLL at the end this far above its minimum (nats) ...
DIVERGE_DEV_NATS = 0.5
# ... or the training loss (moving average over TRAIN_SMOOTH logged points)
# this far above its minimum
DIVERGE_TRAIN_NATS = 1.0
TRAIN_SMOOTH = 3
# stuck: at the first dev evaluation at or after this fraction of the run ...
STUCK_FRACTION = 0.4
# ... the dev NLL is not this far below the plateau reference: the unigram
# cross-entropy of the dev targets (a model that predicts piece frequencies),
# or, without it, the first dev evaluation's NLL.  On Multi30k with 2000
# pieces the unigram is 5.94 nats (PPL 380); runs that sat on the plateau sat
# at PPL 170-200, 0.64-0.80 nats below it.
STUCK_NATS_BELOW_PLATEAU = 1.0
# unstable: in the last UNSTABLE_FRACTION of the run the dev NLL rises this
# far above its running minimum ...
UNSTABLE_FRACTION = 0.25
UNSTABLE_DEV_NATS = 0.1
# ... and the training loss (smoothed) rises this far above its own running
# minimum in the same window; a dev rise while the training loss keeps
# falling is overfitting, which a healthy run may show (reported in the reason)
UNSTABLE_TRAIN_NATS = 0.1
# stuck and unstable judge a curve, which needs two points: a run with
# one dev evaluation (a smoke test of a few steps, e.g. the Slurm tests'
# sweeps, evaluated only at its end) is 'unknown' unless it diverged
MIN_DEV_EVALS = 2


def smooth(y, k=TRAIN_SMOOTH):
    """Trailing moving average over k points (the first k-1 average fewer)."""
    y = np.asarray(y, float)
    if len(y) == 0 or k <= 1:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    n = np.minimum(np.arange(1, len(y) + 1), k)
    return (c[1:] - c[np.arange(1, len(y) + 1) - n]) / n


def late_rise(steps, y, start):
    """Largest rise of y above its running minimum (over the whole curve) at
    points with step >= start, and the step where it happens."""
    if len(y) == 0:
        return 0.0, None
    rise = y - np.minimum.accumulate(y)
    late = np.flatnonzero(np.asarray(steps) >= start)
    if not len(late):
        return 0.0, None
    i = late[np.argmax(rise[late])]
    return float(rise[i]), int(steps[i])


def diverged(c):
    """The diverged rule: a reason, or None."""
    for key, what in (("train_loss", "training loss"), ("dev_nll", "dev NLL"), ("dev_loss", "dev loss")):
        bad = np.flatnonzero(~np.isfinite(c[key]))
        if len(bad):
            steps = c["train_step" if key == "train_loss" else "dev_step"]
            return f"non-finite {what} at step {int(steps[bad[0]])}"
    nll = c["dev_nll"]
    if len(nll) and nll[-1] > nll.min() + DIVERGE_DEV_NATS:
        return (f"final dev NLL {nll[-1]:.3f} is {nll[-1] - nll.min():.2f} nats above its minimum "
                f"{nll.min():.3f} (> {DIVERGE_DEV_NATS})")
    tl = smooth(c["train_loss"])
    if len(tl) and tl[-1] > tl.min() + DIVERGE_TRAIN_NATS:
        return (f"training loss {tl[-1]:.3f} is {tl[-1] - tl.min():.2f} nats above its minimum "
                f"{tl.min():.3f} (> {DIVERGE_TRAIN_NATS})")
    return None


def plateau_reference(c, unigram_nll):
    """(the plateau NLL, what it is)"""
    if unigram_nll is not None and math.isfinite(unigram_nll):
        return float(unigram_nll), "the unigram NLL"
    return float(c["dev_nll"][0]), "the first dev NLL"


def _stuck_at(c, i, unigram_nll, where_said):
    """The stuck rule applied to dev evaluation i: a reason, or None.
    where_said(nll, step) names the evaluation in the reason."""
    nll, steps = c["dev_nll"], c["dev_step"]
    ref, what = plateau_reference(c, unigram_nll)
    if nll[i] <= ref - STUCK_NATS_BELOW_PLATEAU:
        return None
    gap = ref - nll[i]
    where = f"only {gap:.2f} nats below" if gap >= 0 else f"{-gap:.2f} nats above"
    return (f"{where_said(nll[i], int(steps[i]))} {where} {what} {ref:.3f} "
            f"(stuck: less than {STUCK_NATS_BELOW_PLATEAU} below)")


def stuck(c, total, unigram_nll):
    """The stuck rule: a reason, or None."""
    at = np.flatnonzero(c["dev_step"] >= STUCK_FRACTION * total)
    if not len(at) or not len(c["dev_nll"]):
        return None
    return _stuck_at(c, at[0], unigram_nll,
                     lambda nll, step: f"dev NLL {nll:.3f} at step {step} ({step / total:.0%} of the run) is")


def stuck_at_best(c, unigram_nll):
    """The stuck rule of a run that stopped by patience (early stopping): it
    ended when its dev NLL stopped improving, so its length says nothing of
    its schedule; stuck if its best dev NLL is not STUCK_NATS_BELOW_PLATEAU
    below the plateau.  A reason, or None."""
    return _stuck_at(c, int(np.argmin(c["dev_nll"])), unigram_nll,
                     lambda nll, step: f"stopped by patience with its best dev NLL {nll:.3f} (step {step})")


def unstable(c, total):
    """The unstable rule: (verdict or None, reason or None); an overfitting
    dev rise gives (None, a note)."""
    start = (1.0 - UNSTABLE_FRACTION) * total
    rise, at = late_rise(c["dev_step"], c["dev_nll"], start)
    if rise <= UNSTABLE_DEV_NATS:
        return None, None
    trise, tat = late_rise(c["train_step"], smooth(c["train_loss"]), start)
    what = f"dev NLL rises {rise:.2f} nats above its running minimum at step {at} (> {UNSTABLE_DEV_NATS})"
    if len(c["train_loss"]) and trise <= UNSTABLE_TRAIN_NATS:
        return None, f"overfitting: {what} while the training loss falls"
    return "unstable", what + (f", training loss {trise:.2f} nats at step {tat}" if tat is not None else "")


def as_curves(c):
    """The curves as float arrays; missing ones empty."""
    keys = ("train_step", "train_loss", "dev_step", "dev_loss", "dev_nll")
    return {k: np.asarray(c.get(k, ()), float).reshape(-1) for k in keys}


def verdict(curves, unigram_nll=None, total_steps=None, stopped_at=None, best_step=None):
    """(verdict, reason) of a run from its curves: dict of 1-D arrays
    train_step, train_loss, dev_step, dev_loss, dev_nll (as row_result.py
    stores them).  total_steps: the run's length (default: the last logged
    step).  stopped_at: the step where early stopping (patience) ended the
    run: ending before total_steps is then no failure; the run is judged
    over the steps it ran, and stuck by its best dev NLL (stuck_at_best).
    ('unknown', why) without a dev curve."""
    c = as_curves(curves)
    if not len(c["dev_nll"]) and not len(c["train_loss"]):
        return "unknown", "no curves logged"
    why = diverged(c)
    if why:
        return "diverged", why
    if not len(c["dev_nll"]):
        return "unknown", "no dev evaluation logged"
    evals = len(np.unique(c["dev_step"]))
    if evals < MIN_DEV_EVALS:
        return "unknown", f"too short to judge: {evals} dev evaluation(s), fewer than {MIN_DEV_EVALS}"
    last = max(c["dev_step"].max(), c["train_step"].max() if len(c["train_step"]) else 0)
    total = float(stopped_at or total_steps or last)
    why = stuck_at_best(c, unigram_nll) if stopped_at else stuck(c, total, unigram_nll)
    if why:
        return "stuck", why
    v, why = unstable(c, total)
    if v:
        return v, why
    nll = c["dev_nll"]
    note = f"; {why}" if why else ""
    if stopped_at:
        # the trainer's best step counts only a fall of more than patience_delta;
        # the lowest logged NLL may come later by less (C1 of the converged sweep)
        low = int(c["dev_step"][int(np.argmin(nll))])
        best = int(best_step) if best_step is not None and best_step >= 0 else low
        note += f"; stopped by patience at step {int(stopped_at)} (best step {best}"
        note += f", lowest dev NLL at step {low})" if low != best else ")"
    return "healthy", f"dev NLL {nll[0]:.3f} -> {nll[-1]:.3f} (min {nll.min():.3f}){note}"
