/* `transformer average`: the element-wise mean of the parameters of several
 * checkpoints of one architecture, as the paper does for its final models
 * (section 6.1: the last 5 checkpoints for base, 20 for big). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
           "attribute 'averaged_from' lists the inputs.\n");
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
    int nlisted = 0;
    if (run_dir) {
        if (n) { fprintf(stderr, "error: average: give either checkpoint files or --last K RUN_DIR\n"); free(in); return 2; }
        nlisted = checkpoint_list(run_dir, &listed, &steps);
        if (nlisted == 0) { fprintf(stderr, "error: %s: no checkpoints (ckpt_*.h5)\n", run_dir); free(in); return 2; }
        if (nlisted < last)
            fprintf(stderr, "warning: %s: only %d checkpoints, averaging all of them\n", run_dir, nlisted);
        for (int i = nlisted > last ? nlisted - last : 0; i < nlisted; i++) in[n++] = listed[i];
    }
    int rc = 2;
    if (!out) { fprintf(stderr, "error: average: --output AVG.h5 is required\n"); goto done; }
    if (n == 0) { fprintf(stderr, "error: average: no checkpoints given\n"); goto done; }

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
        char msg[512];
        if (checkpoint_read_config(in[k], &c, NULL)) { bad = 1; break; }
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
        if (checkpoint_write(out, &pt, buf, NULL, NULL, text, &st, msg, sizeof msg)) {
            fprintf(stderr, "error: %s\n", msg);
        } else {
            printf("average: %d checkpoint(s) -> %s (%zu parameters)\n", n, out, pt.total);
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
