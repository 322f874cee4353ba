/* Fuzz target: a `translate --input` file of token ids (the synthetic task's
 * text) -> count_lines and read_id_lines of src/cmd/translate.c (included for
 * its static functions).  count_lines copies the input (a pipe is read
 * once) and the copy holds the same bytes; either every line becomes ids in
 * [0, vocab) with offsets that add up, or the reader names a bad line. */
#include "../../src/cmd/translate.c"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_mpi();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".txt");
    char copy[160];
    snprintf(copy, sizeof copy, "%s.copy", path);
    int n = count_lines(path, copy);
    if (n < 0 || n != count_lines(path, NULL)) abort();
    FILE *cf = fopen(copy, "rb");
    if (!cf) abort();
    uint8_t *back = malloc(size + 1);
    if (fread(back, 1, size + 1, cf) != size || (size && memcmp(back, data, size))) abort();
    free(back);
    fclose(cf);
    unlink(copy);
    const int vocab = 24;
    Corpus c;
    memset(&c, 0, sizeof c);
    int bad = read_id_lines(path, &c, n, vocab);
    if (bad == 0) {
        if (c.n != n || c.src_off[0] != 0) abort();
        for (int i = 0; i < c.n; i++)
            if (c.src_off[i + 1] < c.src_off[i]) abort();
        for (int64_t k = 0; k < c.src_off[c.n]; k++)
            if (c.src_tok[k] < 0 || c.src_tok[k] >= vocab) abort();
    } else if (bad > n) abort();
    corpus_free(&c);
    return 0;
}
