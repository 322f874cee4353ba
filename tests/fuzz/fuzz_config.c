/* Fuzz target: config text and key=value overrides -> the config loader and
 * validation (src/config.c).  Input: a config file's text, then optionally
 * a line "--" followed by one key=value override per line (the command
 * line's).  Every input must end in 0 or a one-line error with 2: never a
 * crash, a sanitizer report, or a config that validates with a value out of
 * its documented range (checked below). */
#include "fuzz_common.h"
#include "../../src/config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_mpi();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *sep = memmem(data, size, "\n--\n", 4);
    size_t text = sep ? (size_t)((const uint8_t *)sep - data) + 1 : size;
    Config c;
    config_defaults(&c);
    int rc = config_load_file(&c, fuzz_file(data, text, ".cfg"));
    if (!rc && sep) {   /* overrides, as the command line gives them */
        char *ov = strndup(sep + 4, size - text - 3);
        for (char *line = strtok(ov, "\n"); line && !rc; line = strtok(NULL, "\n")) {
            char *eq = strchr(line, '=');
            if (!eq) continue;
            *eq = '\0';
            rc = config_set(&c, "command line", 0, line, eq + 1);
        }
        free(ov);
    }
    if (!rc && config_validate(&c, fuzz_path) == 0) {
        /* what validation promises the rest of the program */
        if (c.n_layers < 1 || c.d_model < 1 || c.n_heads < 1 || c.d_k < 1 || c.d_v < 1 || c.vocab_size < 1 ||
            c.max_len < 2 || c.max_tokens < 0 || (c.max_tokens == 0 && c.device != DEVICE_CUDA) || !(c.dropout >= 0 && c.dropout < 1))
            abort();
        char buf[16384];
        if (config_to_string(&c, buf, sizeof buf) < 0) abort();
    }
    return 0;
}
