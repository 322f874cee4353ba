/* Attention maps in HDF5 (format in docs/attention.md): for chosen sentence
 * pairs, every head of every layer of encoder self-attention, decoder
 * self-attention and encoder-decoder attention, teacher-forced on the
 * reference (and optionally on the model's own greedy translation), with
 * the tokens as strings.  `transformer attention` splits the sentences over
 * MPI ranks and rank 0 writes the file; training writes the
 * maps of a fixed probe set every attn_steps steps (attention_probe_*). */
#ifndef ATTENTION_MAPS_H
#define ATTENTION_MAPS_H

#include <hdf5.h>

#include "batch.h"
#include "model.h"

#define ATTN_PROBE_SENTENCES 4   /* the first dev pairs */

/* Append the maps of the first ATTN_PROBE_SENTENCES pairs of dev (after
 * step `step`; tokens named by the vocabulary of the dataset file data,
 * or by their ids) to run_dir/attention_probe.h5 as group /step_<8 digits>.
 * Called on one rank; holds the HDF5 lock while writing. */
void attention_probe_write(Model *m, const Corpus *dev, const char *data, const char *run_dir, int step);

/* The pieces the `attention` command shares with the probe.  One sentence
 * pair: tokens (known on every rank) and maps (owner only) */
typedef struct {
    int64_t index;            /* pair index in the split */
    int S, T;                 /* source tokens incl. EOS; target positions BOS y.. */
    int32_t *src, *tin, *tout;
    float *enc, *dec, *crs;   /* [L, h, S, S], [L, h, T, T], [L, h, T, S] */
    int Tg;                   /* greedy: decoder positions (hyp + BOS) */
    int32_t *gin, *gout;
    float *gdec, *gcrs;
} Sent;

typedef struct {
    int n;
    char **name;   /* [vocab_size] */
    size_t width;  /* longest name: fixed-length string type size */
} Vocab;

/* names of the vocab_size tokens: the dataset's pieces (NULL: the special
 * tokens, then the ids of the synthetic symbols) */
void vocab_build(Vocab *v, int vocab_size, char **pieces);
void vocab_free(Vocab *v);
/* pair idx of c as tokens, cut to max_len positions */
void sent_tokens(Sent *s, const Corpus *c, int idx, int max_len);
/* s's maps teacher-forced on the reference (and, greedy, on the greedy
 * output of at most input length + max_len_a tokens, section 6.1) */
void sent_compute(Model *m, Sent *s, int greedy, int max_len_a);
void sent_free(Sent *s);
/* one group per sentence under parent (docs/attention.md); 0, or
 * non-zero after a failed HDF5 call */
int write_sentences(hid_t parent, Sent *s, int n, int greedy, const ModelConfig *c, const Vocab *v);

#endif
