#ifndef GREEDY_H
#define GREEDY_H

#include <stdint.h>

#include "batch.h"
#include "model.h"

/* Greedy decoding of the sources of b (dropout off), recomputing the decoder
 * over the whole prefix each step: the simple reference that the incremental
 * beam search of decode.c is tested against.  out[k*max_out ..] receives
 * sentence k's tokens (without EOS), out_len[k] their count. */
void greedy_decode(Model *m, const Batch *b, int max_out, int32_t *out, int *out_len);

#endif
