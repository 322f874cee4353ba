/* Command-line handling shared by the commands (cli.h). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int parse_config_args(Config *c, int argc, char **argv, int first, const char *cmd,
                      int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx)
{
    config_defaults(c);
    const char *file = NULL;
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) { fprintf(stderr, "error: %s: --config needs a file name\n", cmd); return 2; }
            if (file) { fprintf(stderr, "error: %s: --config given twice (%s, %s)\n", cmd, file, argv[i + 1]); return 2; }
            file = argv[++i];
        }
    if (file && config_load_file(c, file)) return 2;
    for (int i = first; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--config")) { i++; continue; }
        if (extra) {
            int rc = extra(ctx, argc, argv, &i);
            if (rc == 1) continue;      /* consumed */
            if (rc > 1) return rc;
        }
        char *eq = strchr(a, '=');
        if (a[0] != '-' && eq) {
            char key[128];
            size_t kl = (size_t)(eq - a);
            if (kl >= sizeof key) kl = sizeof key - 1;
            memcpy(key, a, kl);
            key[kl] = '\0';
            if (config_set(c, "command line", 0, key, eq + 1)) return 2;
            continue;
        }
        fprintf(stderr, "error: %s: unknown argument '%s' (see '%s --help')\n", cmd, a, cmd);
        return 2;
    }
    return config_validate(c, file ? file : "command line");
}
