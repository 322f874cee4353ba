/* `transformer prepare`: parallel text files -> one binarized HDF5 dataset
 * (validation, shared SentencePiece BPE vocabulary, encoding, max_len
 * filtering); see docs/dataset.md. */
#ifndef PREPARE_H
#define PREPARE_H

int cmd_prepare(int argc, char **argv);

#endif
