/* Fuzz target: dataset files (docs/dataset.md) -> the dataset readers
 * (dataset_load, and dataset_map that maps arrays from the file) and the
 * batcher.  The seed corpus holds valid small files; libFuzzer mutates
 * their bytes.  A file is
 * read into a corpus whose offsets and ids are consistent, or refused in
 * one line; a corpus that loads is then cut into batches and built. */
#include "fuzz_common.h"
#include "../../src/batcher.h"
#include "../../src/dataset.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_mpi();
    return 0;
}

/* what dataset_load and dataset_map promise: offsets from 0,
 * non-decreasing, ending at the number of ids; ids in [0, vocab_size),
 * 32-bit or (dataset_map) 16-bit, in memory or mapped from the file */
void fuzz_check_corpus(const Corpus *c, int vocab)
{
    if (c->n < 0 || c->src_off[0] != 0 || c->tgt_off[0] != 0) abort();
    if (!(c->src_tok || c->src_tok16) || !(c->tgt_tok || c->tgt_tok16)) abort();
    for (int i = 0; i < c->n; i++)
        if (c->src_off[i + 1] < c->src_off[i] || c->tgt_off[i + 1] < c->tgt_off[i]) abort();
    for (int64_t k = 0; k < c->src_off[c->n]; k++)
        if (corpus_src_id(c, k) < 0 || (vocab > 0 && corpus_src_id(c, k) >= vocab)) abort();
    for (int64_t k = 0; k < c->tgt_off[c->n]; k++)
        if (corpus_tgt_id(c, k) < 0 || (vocab > 0 && corpus_tgt_id(c, k) >= vocab)) abort();
}

/* the batcher over a loaded corpus: every batch built once */
void fuzz_batches(const Corpus *c)
{
    BatchPlan bp;
    if (batchplan_build(&bp, c, 256, 64, 1) == 0) {
        for (int k = 0; k < bp.n_batches && k < 64; k++) {
            Batch b = {0};
            batch_build(&b, c, bp.idx + bp.start[k], bp.start[k + 1] - bp.start[k], 64);
            batch_free(&b);
        }
        batchplan_free(&bp);
    }
}

void fuzz_dataset_file(const char *path)
{
    int vocab = dataset_vocab_size(path);
    static const char *splits[] = { "train", "dev", "nope" };
    for (int s = 0; s < 3; s++) {
        Corpus c;
        if (dataset_load(path, splits[s], &c) == 0) {
            fuzz_check_corpus(&c, vocab);
            fuzz_batches(&c);
            corpus_free(&c);
        }
        if (dataset_map(path, splits[s], &c) == 0) {   /* the training reader */
            fuzz_check_corpus(&c, vocab);
            fuzz_batches(&c);
            corpus_free(&c);
        }
    }
    DatasetVocab v;
    if (dataset_load_vocab(path, &v) == 0) {
        for (int i = 0; i < v.vocab_size; i++)
            if (!v.pieces[i]) abort();
        dataset_vocab_free(&v);
    }
}

#ifndef FUZZ_NO_MAIN_TARGET
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_dataset_file(fuzz_file(data, size, ".h5"));
    fuzz_done();
    return 0;
}
#endif
