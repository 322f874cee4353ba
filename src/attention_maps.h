/* Attention maps in HDF5 (format in docs/attention.md): for chosen sentence
 * pairs, every head of every layer of encoder self-attention, decoder
 * self-attention and encoder-decoder attention, teacher-forced on the
 * reference (and optionally on the model's own greedy translation), with
 * the tokens as strings.  `transformer attention` splits the sentences over
 * MPI ranks and writes one file collectively (MPI-IO); training writes the
 * maps of a fixed probe set every attn_steps steps (attention_probe_*). */
#ifndef ATTENTION_MAPS_H
#define ATTENTION_MAPS_H

#include "batch.h"
#include "model.h"

#define ATTN_PROBE_SENTENCES 4   /* the first dev pairs */

/* Append the maps of the first ATTN_PROBE_SENTENCES pairs of dev (after
 * step `step`) to run_dir/attention_probe.h5 as group /step_<8 digits>.
 * Called on one rank; holds the HDF5 lock while writing. */
void attention_probe_write(Model *m, const Corpus *dev, const char *run_dir, int step);

int cmd_attention(int argc, char **argv);

#endif
