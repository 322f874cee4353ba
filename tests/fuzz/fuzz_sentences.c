/* Fuzz target: `attention --sentences` lists -> the range parser
 * (parse_list of src/cmd/attention.c, included for its static functions).
 * A list parses to at most MAX_SENTENCES distinct indices in [0, INT_MAX],
 * or is refused (-1 malformed, -2 too many, -3 a duplicate). */
#define main attention_maps_unused_main
#include "../../src/cmd/attention.c"
#undef main
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_mpi();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = strndup((const char *)data, size);
    int64_t *idx = NULL, dup = -1;
    int n = parse_list(s, &idx, &dup);
    if (n > MAX_SENTENCES || n < -3 || (n == -3 && dup < 0)) abort();
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] > INT_MAX) abort();
    if (n == 0 && *s) abort();   /* something that is not empty selects a sentence or is refused */
    free(idx);
    free(s);
    return 0;
}
