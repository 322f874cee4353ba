/* Fuzz target: a `translate --input` file of token ids (the synthetic task's
 * text) -> count_lines and read_id_lines of src/cmd/translate.c (included for
 * its static functions).  Either every line becomes ids in [0, vocab) with
 * offsets that add up, or the reader names a bad line. */
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
    int n = count_lines(path);
    if (n < 0) abort();
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
