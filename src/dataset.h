/* Binarized parallel datasets: one self-contained HDF5 file per dataset
 * (format in docs/dataset.md) holding, per split, the source and target
 * token ids (concatenated, with offsets), the shared SentencePiece BPE
 * vocabulary and model bytes, and the provenance of the text it came from.
 * Written by `transformer prepare` (prepare.c); read by train and eval. */
#ifndef DATASET_H
#define DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

#define DATASET_FORMAT "transformer-dataset"
#define DATASET_FORMAT_VERSION 1

/* Load split (e.g. "train", "dev", "test2016") into out.  Returns 0, or
 * prints one line "error: PATH: ..." on stderr and returns 2 (missing file,
 * truncated or foreign HDF5 file, unknown split, inconsistent offsets). */
int dataset_load(const char *path, const char *split, Corpus *out);
/* Like dataset_load, for the big training split: the offsets and ids are
 * mapped read-only from the file where it stores them contiguous and
 * uncompressed (prepare writes them so), so that every process of a node
 * shares one copy in the page cache; 16-bit ids stay 16-bit (src_tok16).
 * Arrays that cannot be mapped (an older, compressed file; a host that is
 * not little-endian) are read into private memory, 16-bit ones still
 * narrow.  corpus_free() unmaps.  Why a mapping and not an MPI shared
 * window: docs/dataset.md. */
int dataset_map(const char *path, const char *split, Corpus *out);

typedef struct {
    int vocab_size;
    char **pieces;              /* [vocab_size] UTF-8 pieces; id = index */
    unsigned char *spm_model;   /* the SentencePiece .model file, byte for byte */
    size_t spm_model_len;
} DatasetVocab;

int dataset_load_vocab(const char *path, DatasetVocab *v);   /* 0, or one-line error and 2 */
/* FNV-1a of the pieces in id order (each with its NUL): two datasets whose
 * ids mean the same pieces have the same fingerprint; never 0.  Checkpoints
 * record it (vocab_hash) so a model is not run on another vocabulary of the
 * same size. */
uint64_t dataset_vocab_hash(const DatasetVocab *v);
/* the fingerprint of path's vocabulary: 0, or one-line error and 2 */
int dataset_vocab_hash_of(const char *path, uint64_t *hash);
void dataset_vocab_free(DatasetVocab *v);
/* vocabulary size recorded in the file (0 + one-line error on failure) */
int dataset_vocab_size(const char *path);

/* ---- writing (prepare.c) ---- */

typedef struct {
    const char *path;
    long long bytes;
    long long lines;
    char sha256[65];
} DatasetFile;

typedef struct {
    const char *name;
    Corpus corpus;
    long long n_lines;          /* input pairs before filtering */
    long long n_dropped;        /* pairs removed by the max_len filter */
    int n_files;                /* src[k] pairs with tgt[k] */
    DatasetFile *src, *tgt;
} DatasetSplit;

typedef struct {
    int n_splits;
    DatasetSplit *splits;
    DatasetVocab vocab;
    const char *spm_options;    /* spm_train command line */
    const char *command;        /* the prepare command line */
    int max_len;
    int id_bits;                /* 16 or 32; 0: 16 when vocab_size <= 65536 */
} DatasetWrite;

/* the width ids are stored with: requested (16 or 32), or for 0 the
 * narrowest that holds every id of the vocabulary */
int dataset_id_bits(int vocab_size, int requested);

/* Write d to path via a temporary file in the same directory, fsync and
 * rename: path appears only when complete.  0, or one-line error and 2. */
int dataset_write(const char *path, const DatasetWrite *d);

#endif
