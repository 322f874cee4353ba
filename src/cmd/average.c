/* `transformer average`: the element-wise mean of the parameters of several
 * checkpoints of one architecture, as the paper does for its final models
 * (section 6.1: the last 5 checkpoints for base, 20 for big). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "average.h"
#include "checkpoint.h"
#include "cli.h"
#include "util.h"

static void average_help(void)
{
    printf("usage: transformer average --output AVG.h5 CKPT.h5...\n"
           "       transformer average --output AVG.h5 --last K [--upto-best] RUN_DIR\n\n"
           "Writes the element-wise mean of the parameters of the given checkpoints (or of\n"
           "the newest K checkpoints of RUN_DIR) as a checkpoint without Adam moments,\n"
           "loadable by every command that takes --checkpoint. All inputs must have the\n"
           "same architecture. The output keeps the config of the newest input, and the\n"
           "attribute 'averaged_from' lists the inputs.\n\n"
           "--last K takes the checkpoints that the run keeps for averaging: with\n"
           "ckpt_steps > 0 those at multiples of ckpt_steps and the final one (not the\n"
           "ones written by wall time or on preemption), else all; fewer than K is an\n"
           "error. Section 6.1: base averages the last 5, big the last 20\n"
           "(input/table3: ckpt_steps 1500 and 600, the paper's 10 minutes).\n\n"
           "--upto-best (with --last K) takes the newest K of those at or before the best\n"
           "dev evaluation's step (the attribute best_step of the run's newest checkpoint),\n"
           "the best checkpoint itself included: a run that stopped by patience averages\n"
           "the checkpoints up to its best one, not the ones after it. A run trained with\n"
           "keep_best=1 keeps keep_ckpts of them (docs/training.md).\n");
}


/* everything cmd_average holds; average_free releases it on every path */
typedef struct {
    const char *out, *run_dir;
    int last;          /* --last K */
    int upto_best;     /* --upto-best: the newest K at or before the best dev step */
    char **in;         /* the checkpoints to average, oldest first */
    int n;
    char **listed;     /* --last: the run directory's checkpoints */
    int64_t *steps;
    int nlisted;
    Config ref;        /* the newest input's config and state, kept in the output */
    CkptState st;
    ParamTable pt;
    int have_pt;
    float *buf;
    double *sum;
    char *from;        /* 'averaged_from': the inputs, one a line */
} Average;

static void average_free(Average *a)
{
    free(a->from);
    free(a->sum);
    free(a->buf);
    if (a->have_pt) param_table_free(&a->pt);
    for (int i = 0; i < a->nlisted; i++) free(a->listed[i]);
    free(a->listed);
    free(a->steps);
    free(a->in);
}

/* 0, 1 for --help (printed), or 2 (error printed) */
static int average_parse(Average *a, int argc, char **argv)
{
    a->in = xcalloc(argc, sizeof(char *));
    const char *last_arg = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { average_help(); return 1; }
        if (!strcmp(argv[i], "--upto-best")) { a->upto_best = 1; continue; }
        if (!strcmp(argv[i], "--output")) {
            if (cli_option("average", argc, argv, &i, &a->out)) return 2;
        } else if (!strcmp(argv[i], "--last")) {
            if (cli_option("average", argc, argv, &i, &last_arg)) return 2;
            char *end;
            long k = strtol(last_arg, &end, 10);   /* (int) of 2^32 + 1 was 1 */
            a->last = k >= 1 && k <= INT_MAX ? (int)k : 0;
            if (*end || end == last_arg || a->last < 1) { fprintf(stderr, "error: average: --last '%s': not an integer from 1 to %d\n", last_arg, INT_MAX); return 2; }
            if (i + 1 < argc && !strcmp(argv[i + 1], "--upto-best")) { a->upto_best = 1; i++; }
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) {
                fprintf(stderr, "error: average: --last K needs a run directory\n");
                return 2;
            }
            a->run_dir = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "error: average: unknown option '%s' (see 'transformer average --help')\n", argv[i]);
            return 2;
        } else a->in[a->n++] = argv[i];
    }
    if (a->upto_best && !a->run_dir) { fprintf(stderr, "error: average: --upto-best needs --last K RUN_DIR\n"); return 2; }
    return 0;
}

/* --last K RUN_DIR: the newest K interval checkpoints (checkpoint.h), by
 * the config of the run's newest checkpoint, oldest first */
static int list_run_dir(Average *a)
{
    const char *run_dir = a->run_dir;
    if (a->n) { fprintf(stderr, "error: average: give either checkpoint files or --last K RUN_DIR\n"); return 2; }
    struct stat sd;
    if (stat(run_dir, &sd) || !S_ISDIR(sd.st_mode)) {
        fprintf(stderr, "error: %s: --last K needs a run directory: %s\n", run_dir,
                stat(run_dir, &sd) ? strerror(errno) : "not a directory");
        return 2;
    }
    a->nlisted = checkpoint_list(run_dir, &a->listed, &a->steps);
    if (a->nlisted == 0) { fprintf(stderr, "error: %s: no checkpoints (ckpt_*.h5)\n", run_dir); return 2; }
    Config run_cfg;
    CkptState st;
    if (checkpoint_read_config(a->listed[a->nlisted - 1], &run_cfg, &st)) return 2;
    if (a->upto_best && st.best_step <= 0) {
        fprintf(stderr, "error: %s: --upto-best: %s records no best dev evaluation (train with eval_steps > 0)\n", run_dir,
                a->listed[a->nlisted - 1]);
        return 2;
    }
    for (int i = a->nlisted - 1; i >= 0 && a->n < a->last; i--) {   /* newest first */
        int take = a->upto_best ? checkpoint_upto_best(a->steps[i], st.best_step, run_cfg.ckpt_steps, run_cfg.train_steps)
                                : checkpoint_on_interval(a->steps[i], run_cfg.ckpt_steps, run_cfg.train_steps);
        if (take) a->in[a->n++] = a->listed[i];
    }
    if (a->n < a->last) {
        fprintf(stderr, "error: %s: --last %d%s asks for more checkpoints than the run kept (%d%s%s; keep_ckpts=%d)\n",
                run_dir, a->last, a->upto_best ? " --upto-best" : "", a->n,
                run_cfg.ckpt_steps > 0 ? " at multiples of ckpt_steps or the final step" : "",
                a->upto_best ? " up to the best step" : "", run_cfg.keep_ckpts);
        return 2;
    }
    for (int i = 0; i < a->n / 2; i++) {   /* oldest first, as given on a command line */
        char *t = a->in[i]; a->in[i] = a->in[a->n - 1 - i]; a->in[a->n - 1 - i] = t;
    }
    return 0;
}

/* every input once: a checkpoint given twice (by two overlapping globs,
 * as ./NAME or through a link) would count twice in the mean, silently */
static int check_distinct(const Average *a)
{
    struct stat si, sj;
    for (int i = 0; i < a->n; i++) {
        if (stat(a->in[i], &si)) continue;   /* a missing file: add_checkpoint names it */
        for (int j = i + 1; j < a->n; j++)
            if (!stat(a->in[j], &sj) && si.st_dev == sj.st_dev && si.st_ino == sj.st_ino) {
                fprintf(stderr, "error: %s: checkpoint given twice to average (also as %s): each counts once\n",
                        a->in[j], a->in[i]);
                return 2;
            }
    }
    return 0;
}

/* an output and at least one input, each once; the output is none of them,
 * nor a file of a run directory the inputs are read from (--last's, or a
 * checkpoint's own): `--output RUN/ckpt_00000002.h5 --last 1 RUN` replaced
 * a checkpoint the run resumes from with an average without Adam moments,
 * `--output RUN/metrics.h5` the training log */
static int check_inputs(const Average *a)
{
    if (!a->out) { fprintf(stderr, "error: average: --output AVG.h5 is required\n"); return 2; }
    if (a->n == 0) { fprintf(stderr, "error: average: no checkpoints given\n"); return 2; }
    if (check_distinct(a)) return 2;
    if (cli_check_output("average", "--output", a->out, (const char *const *)a->in, a->n)) return 2;
    for (int k = 0; k < a->n; k++)
        if (checkpoint_check_output_beside("--output", a->out, a->in[k])) return 2;
    return 0;
}

/* input k: same vocabulary and architecture as the newest; its parameters
 * added to the sum */
static int add_checkpoint(Average *a, int k)
{
    const char *newest = a->in[a->n - 1];
    Config c;
    CkptState sk;
    char msg[512];
    if (checkpoint_read_config(a->in[k], &c, &sk)) return 2;
    if (sk.vocab_hash && a->st.vocab_hash && sk.vocab_hash != a->st.vocab_hash) {
        fprintf(stderr, "error: %s: cannot average with %s: trained on another vocabulary\n", a->in[k], newest);
        return 2;
    }
    if (config_arch_mismatch(&c, &a->ref, msg, sizeof msg)) {
        fprintf(stderr, "error: %s: cannot average with %s: %s\n", a->in[k], newest, msg);
        return 2;
    }
    if (checkpoint_read_tensors(a->in[k], &a->pt, a->buf, NULL, NULL)) return 2;
    for (size_t i = 0; i < a->pt.total; i++) a->sum[i] += a->buf[i];
    strcat(a->from, a->in[k]);
    if (k + 1 < a->n) strcat(a->from, "\n");
    return 0;
}

/* the sum of every input's parameters, by the newest input's table */
static int sum_checkpoints(Average *a)
{
    if (checkpoint_read_config(a->in[a->n - 1], &a->ref, &a->st)) return 2;
    param_table_build(&a->pt, &a->ref.model);
    a->have_pt = 1;
    a->buf = xmalloc(sizeof(float) * a->pt.total);
    a->sum = xcalloc(a->pt.total, sizeof(double));
    size_t names = 1;
    for (int k = 0; k < a->n; k++) names += strlen(a->in[k]) + 1;
    a->from = xcalloc(names, 1);
    for (int k = 0; k < a->n; k++)
        if (add_checkpoint(a, k)) return 2;
    return 0;
}

static int write_average(Average *a)
{
    /* the mean in double, rounded once to float: averaging one
     * checkpoint reproduces it exactly */
    int n = a->n;
    for (size_t i = 0; i < a->pt.total; i++) a->buf[i] = (float)(a->sum[i] / n);
    char text[16384], msg[4600];
    config_to_string(&a->ref, text, sizeof text);
    a->st.averaged_from = a->from;
    if (checkpoint_write(a->out, &a->pt, a->buf, NULL, NULL, text, &a->st, NULL, msg, sizeof msg)) {
        fprintf(stderr, "error: %s\n", msg);
        return 2;
    }
    printf("average: %d checkpoint(s) -> %s (%zu parameters): %s%s%s\n", n, a->out, a->pt.total, a->in[0],
           n > 1 ? " .. " : "", n > 1 ? a->in[n - 1] : "");
    return 0;
}

int cmd_average(int argc, char **argv)
{
    Average a = {0};
    int rc = average_parse(&a, argc, argv);
    if (rc == 1) { average_free(&a); return 0; }   /* --help */
    if (!rc && a.run_dir) rc = list_run_dir(&a);
    if (!rc) rc = check_inputs(&a);
    if (!rc) rc = sum_checkpoints(&a);
    if (!rc) rc = write_average(&a);
    average_free(&a);
    return rc;
}
