/* A batch of sentence pairs on the host, right-padded with token 0.
 * Source rows are x_1..x_n EOS; decoder inputs BOS y_1..y_m; decoder targets
 * y_1..y_m EOS (teacher forcing, section 3). */
#ifndef BATCH_H
#define BATCH_H

#include <stddef.h>
#include <stdint.h>

enum { TOK_PAD = 0, TOK_BOS = 1, TOK_EOS = 2, TOK_UNK = 3, TOK_FIRST_SYMBOL = 4 };

typedef struct Batch {
    int B, S, T;            /* sentences, padded source / target length */
    int32_t *src;           /* [B*S] */
    int32_t *tgt_in;        /* [B*T] */
    int32_t *tgt_out;       /* [B*T] */
    int32_t *src_len;       /* [B] real source tokens incl. EOS */
    int32_t *tgt_len;       /* [B] real target tokens incl. EOS */
    uint32_t *sent_id;      /* [B] corpus index of the pair: keys dropout masks */
    long n_src_tokens, n_tgt_tokens;  /* real tokens (no padding) */
    int cap_B, cap_S, cap_T;
} Batch;

/* A parallel corpus in memory: pair i has source tokens
 * src_tok[src_off[i] .. src_off[i+1]) (no BOS/EOS), likewise target.
 * The ids of a side are 32-bit (src_tok) or, from a 16-bit dataset read by
 * dataset_map(), 16-bit (src_tok16, src_tok NULL): batch_build widens only
 * the pairs it takes (corpus_src_id).  Arrays that lie inside map (a
 * read-only mapping of the dataset file, shared by every process on the
 * node through the page cache) are not freed but unmapped. */
typedef struct Corpus {
    int n;
    int64_t *src_off, *tgt_off;   /* [n+1] */
    int32_t *src_tok, *tgt_tok;
    uint16_t *src_tok16, *tgt_tok16;
    void *map;                    /* mmap of the dataset file, or NULL */
    size_t map_len;
} Corpus;

static inline int corpus_src_len(const Corpus *c, int i) { return (int)(c->src_off[i + 1] - c->src_off[i]); }
static inline int corpus_tgt_len(const Corpus *c, int i) { return (int)(c->tgt_off[i + 1] - c->tgt_off[i]); }
/* pair i fits lim positions: its source plus EOS and its target plus BOS
 * (or EOS) each; the batches leave out the pairs that do not (batcher.c) */
static inline int corpus_pair_fits(const Corpus *c, int i, int lim)
{
    return corpus_src_len(c, i) + 1 <= lim && corpus_tgt_len(c, i) + 1 <= lim;
}
/* pairs of c that do not fit max_len, which the batches and the dev
 * evaluations leave out (train and eval say so) */
static inline int corpus_count_longer(const Corpus *c, int max_len)
{
    int n = 0;
    for (int i = 0; i < c->n; i++) n += !corpus_pair_fits(c, i, max_len);
    return n;
}
/* id k of the concatenated source (target) ids, whatever their width */
static inline int32_t corpus_src_id(const Corpus *c, int64_t k) { return c->src_tok ? c->src_tok[k] : c->src_tok16[k]; }
static inline int32_t corpus_tgt_id(const Corpus *c, int64_t k) { return c->tgt_tok ? c->tgt_tok[k] : c->tgt_tok16[k]; }

void batch_free(Batch *b);
/* Fill b with pairs idx[0..n) of c (reallocating as needed).  Sequences longer
 * than max_len-1 tokens are truncated (the caller filters beforehand). */
void batch_build(Batch *b, const Corpus *c, const int *idx, int n, int max_len);
/* Append batch src to dst (union of micro-batches) */
void corpus_free(Corpus *c);

#endif
