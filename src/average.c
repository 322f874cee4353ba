/* `transformer average`: the element-wise mean of the parameters of several
 * checkpoints of one architecture, as the paper does for its final models
 * (section 6.1: the last 5 checkpoints for base, 20 for big). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "util.h"

static void average_help(void)
{
    printf("usage: transformer average --output AVG.h5 CKPT.h5...\n"
           "       transformer average --output AVG.h5 --last K RUN_DIR\n\n"
           "Writes the element-wise mean of the parameters of the given checkpoints (or of\n"
           "the newest K checkpoints of RUN_DIR) as a checkpoint without Adam moments,\n"
           "loadable by every command that takes --checkpoint. All inputs must have the\n"
           "same architecture. The output keeps the config of the newest input, and the\n"
           "attribute 'averaged_from' lists the inputs.\n\n"
           "--last K takes the checkpoints that the run keeps for averaging: with\n"
           "ckpt_steps > 0 those at multiples of ckpt_steps and the final one (not the\n"
           "ones written by wall time or on preemption), else all; fewer than K is an\n"
           "error. Section 6.1: base averages the last 5, big the last 20\n"
           "(input/table3: ckpt_steps 1500 and 600, the paper's 10 minutes).\n");
}

int cmd_average(int argc, char **argv)
{
    const char *out = NULL, *run_dir = NULL;
    int last = 0, n = 0;
    char **in = xcalloc(argc, sizeof(char *));
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { average_help(); free(in); return 0; }
        if (!strcmp(argv[i], "--output") || !strcmp(argv[i], "--last")) {
            if (i + 1 >= argc) { fprintf(stderr, "error: average: %s needs a value\n", argv[i]); free(in); return 2; }
            if (argv[i][2] == 'o') out = argv[++i];
            else {
                char *end;
                last = (int)strtol(argv[++i], &end, 10);
                if (*end || last < 1) { fprintf(stderr, "error: average: --last '%s' is not a positive integer\n", argv[i]); free(in); return 2; }
                if (i + 1 >= argc) { fprintf(stderr, "error: average: --last K needs a run directory\n"); free(in); return 2; }
                run_dir = argv[++i];
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "error: average: unknown option '%s' (see 'transformer average --help')\n", argv[i]);
            free(in);
            return 2;
        } else in[n++] = argv[i];
    }
    char **listed = NULL;
    int64_t *steps = NULL;
    int nlisted = 0, rc = 2;
    if (run_dir) {
        if (n) { fprintf(stderr, "error: average: give either checkpoint files or --last K RUN_DIR\n"); goto done; }
        nlisted = checkpoint_list(run_dir, &listed, &steps);
        if (nlisted == 0) { fprintf(stderr, "error: %s: no checkpoints (ckpt_*.h5)\n", run_dir); goto done; }
        /* the newest K interval checkpoints (checkpoint.h), by the config of
         * the run's newest checkpoint */
        Config run_cfg;
        if (checkpoint_read_config(listed[nlisted - 1], &run_cfg, NULL)) goto done;
        for (int i = nlisted - 1; i >= 0 && n < last; i--)   /* newest first */
            if (checkpoint_on_interval(steps[i], run_cfg.ckpt_steps, run_cfg.train_steps)) in[n++] = listed[i];
        if (n < last) {
            fprintf(stderr, "error: %s: --last %d asks for more checkpoints than the run kept (%d%s; keep_ckpts=%d)\n",
                    run_dir, last, n, run_cfg.ckpt_steps > 0 ? " at multiples of ckpt_steps or the final step" : "",
                    run_cfg.keep_ckpts);
            goto done;
        }
        for (int i = 0; i < n / 2; i++) {   /* oldest first, as given on a command line */
            char *t = in[i]; in[i] = in[n - 1 - i]; in[n - 1 - i] = t;
        }
    }
    if (!out) { fprintf(stderr, "error: average: --output AVG.h5 is required\n"); goto done; }
    if (n == 0) { fprintf(stderr, "error: average: no checkpoints given\n"); goto done; }
    struct stat so, si;
    for (int k = 0; k < n && !stat(out, &so); k++)
        if (!stat(in[k], &si) && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            fprintf(stderr, "error: %s: --output is one of the checkpoints being averaged (%s): choose another name\n",
                    out, in[k]);
            goto done;
        }

    Config ref;
    CkptState st;
    if (checkpoint_read_config(in[n - 1], &ref, &st)) goto done;
    ParamTable pt;
    param_table_build(&pt, &ref);
    float *buf = xmalloc(sizeof(float) * pt.total);
    double *sum = xcalloc(pt.total, sizeof(double));
    size_t names = 1;
    for (int k = 0; k < n; k++) names += strlen(in[k]) + 1;
    char *from = xcalloc(names, 1);
    int bad = 0;
    for (int k = 0; k < n && !bad; k++) {
        Config c;
        CkptState sk;
        char msg[512];
        if (checkpoint_read_config(in[k], &c, &sk)) { bad = 1; break; }
        if (sk.vocab_hash && st.vocab_hash && sk.vocab_hash != st.vocab_hash) {
            fprintf(stderr, "error: %s: cannot average with %s: trained on another vocabulary\n", in[k], in[n - 1]);
            bad = 1;
            break;
        }
        if (config_arch_mismatch(&c, &ref, msg, sizeof msg)) {
            fprintf(stderr, "error: %s: cannot average with %s: %s\n", in[k], in[n - 1], msg);
            bad = 1;
            break;
        }
        if (checkpoint_read_tensors(in[k], &pt, buf, NULL, NULL)) { bad = 1; break; }
        for (size_t i = 0; i < pt.total; i++) sum[i] += buf[i];
        strcat(from, in[k]);
        if (k + 1 < n) strcat(from, "\n");
    }
    if (!bad) {
        /* the mean in double, rounded once to float: averaging one
         * checkpoint reproduces it exactly */
        for (size_t i = 0; i < pt.total; i++) buf[i] = (float)(sum[i] / n);
        char text[16384], msg[4600];
        config_to_string(&ref, text, sizeof text);
        st.averaged_from = from;
        if (checkpoint_write(out, &pt, buf, NULL, NULL, text, &st, NULL, msg, sizeof msg)) {
            fprintf(stderr, "error: %s\n", msg);
        } else {
            printf("average: %d checkpoint(s) -> %s (%zu parameters): %s%s%s\n", n, out, pt.total, in[0],
                   n > 1 ? " .. " : "", n > 1 ? in[n - 1] : "");
            rc = 0;
        }
    }
    free(from);
    free(sum);
    free(buf);
    param_table_free(&pt);
done:
    for (int i = 0; i < nlisted; i++) free(listed[i]);
    free(listed);
    free(steps);
    free(in);
    return rc;
}
