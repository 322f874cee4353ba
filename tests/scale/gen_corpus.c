/* Generated corpora shaped like WMT14 English-French, for the memory test
 * (tests/test_data_shared.sh) and the scale tool (tests/scale/enfr_scale.sh):
 *
 *   gen_corpus ids OUT.h5 PAIRS [VOCAB [SEED [ID_BITS]]]
 *       a dataset file written by dataset_write (the layout prepare
 *       writes): split train of PAIRS pairs, dev of 500, ids over VOCAB
 *       (default 32000, the paper's En-Fr vocabulary);
 *   gen_corpus text PAIRS SEED SRC TGT
 *       parallel text: words of a Zipf-distributed lexicon of 200000
 *       types, for prepare's throughput.
 *
 * Lengths: log-normal, median about 26 pieces (27 words) a side with a
 * long tail (WMT14 En-Fr after BPE averages about 30 pieces per sentence;
 * a few percent pass 80), the target about 1.1 times the source as French
 * runs longer than English.  Ids: log-uniform over the vocabulary (Zipf
 * with exponent 1).  Deterministic in SEED. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "util.h"

static uint64_t rng_state;
static double uniform(void)   /* (0, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()); }

/* a sentence length: log-normal, median 26, clipped to [1, 250] */
static int draw_len(double scale)
{
    double x = exp(log(26.0 * scale) + 0.55 * normal());
    return x < 1 ? 1 : x > 250 ? 250 : (int)x;
}
static int draw_id(int vocab)   /* log-uniform over [TOK_FIRST_SYMBOL, vocab) */
{
    int span = vocab - TOK_FIRST_SYMBOL;
    int r = (int)exp(uniform() * log((double)span)) - 1;
    return TOK_FIRST_SYMBOL + (r < 0 ? 0 : r >= span ? span - 1 : r);
}

static void make_split(Corpus *c, int n, int vocab)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->src_off = xmalloc(sizeof(int64_t) * (n + 1));
    c->tgt_off = xmalloc(sizeof(int64_t) * (n + 1));
    int *ls = xmalloc(sizeof(int) * n), *lt = xmalloc(sizeof(int) * n);
    c->src_off[0] = c->tgt_off[0] = 0;
    for (int i = 0; i < n; i++) {
        ls[i] = draw_len(1.0);
        lt[i] = (int)(ls[i] * (1.1 + 0.1 * normal()) + 0.5);
        if (lt[i] < 1) lt[i] = 1;
        if (lt[i] > 250) lt[i] = 250;
        c->src_off[i + 1] = c->src_off[i] + ls[i];
        c->tgt_off[i + 1] = c->tgt_off[i] + lt[i];
    }
    c->src_tok = xmalloc(sizeof(int32_t) * (c->src_off[n] + 1));
    c->tgt_tok = xmalloc(sizeof(int32_t) * (c->tgt_off[n] + 1));
    for (int64_t k = 0; k < c->src_off[n]; k++) c->src_tok[k] = draw_id(vocab);
    for (int64_t k = 0; k < c->tgt_off[n]; k++) c->tgt_tok[k] = draw_id(vocab);
    free(ls); free(lt);
}

static int write_ids(const char *out, int pairs, int vocab, int id_bits)
{
    DatasetSplit sp[2] = {0};
    DatasetFile f[2] = { { "generated.en", 0, pairs, "" }, { "generated.fr", 0, pairs, "" } };
    sp[0].name = "train"; make_split(&sp[0].corpus, pairs, vocab);
    sp[1].name = "dev"; make_split(&sp[1].corpus, 500, vocab);
    for (int k = 0; k < 2; k++) { sp[k].n_lines = sp[k].corpus.n; sp[k].n_files = 1; sp[k].src = &f[0]; sp[k].tgt = &f[1]; }
    DatasetWrite dw = { .n_splits = 2, .splits = sp, .spm_options = "generated", .command = "gen_corpus ids",
                        .max_len = 256, .id_bits = id_bits };
    dw.vocab.vocab_size = vocab;
    dw.vocab.pieces = xmalloc(sizeof(char *) * vocab);
    const char *special[4] = { "<pad>", "<s>", "</s>", "<unk>" };
    for (int i = 0; i < vocab; i++) {
        dw.vocab.pieces[i] = xmalloc(16);
        snprintf(dw.vocab.pieces[i], 16, "%s", i < 4 ? special[i] : "");
        if (i >= 4) snprintf(dw.vocab.pieces[i], 16, "\xe2\x96\x81p%d", i);
    }
    unsigned char model[1] = { 0 };
    dw.vocab.spm_model = model;
    dw.vocab.spm_model_len = 1;
    int rc = dataset_write(out, &dw);
    for (int i = 0; i < vocab; i++) free(dw.vocab.pieces[i]);
    free(dw.vocab.pieces);
    corpus_free(&sp[0].corpus); corpus_free(&sp[1].corpus);
    return rc;
}

/* a word of the lexicon: letters from the type number (deterministic) */
static void word(char *w, unsigned type, int side)
{
    uint64_t h = (uint64_t)type * 0x9E3779B97F4A7C15ull + (uint64_t)side * 0xC2B2AE3D27D4EB4Full;
    int len = 2 + (int)(h % 9) + (type > 1000) + (type > 20000);
    const char *letters = side ? "aeiouyrstnlcdmpvbfghjqxzAE" : "etaoinshrdlcumwfgypbvkjxqz";
    for (int k = 0; k < len; k++) { h = h * 6364136223846793005ull + 1442695040888963407ull; w[k] = letters[(h >> 33) % 26]; }
    w[len] = '\0';
}

static int write_text(int pairs, const char *src, const char *tgt)
{
    FILE *fs = fopen(src, "w"), *ft = fopen(tgt, "w");
    if (!fs || !ft) { fprintf(stderr, "error: cannot write %s / %s\n", src, tgt); return 2; }
    char w[32];
    for (int i = 0; i < pairs; i++) {
        int ns = draw_len(1.0 / 1.15), nt = (int)(ns * (1.1 + 0.1 * normal()) + 0.5);
        if (nt < 1) nt = 1;
        for (int k = 0; k < ns; k++) { word(w, (unsigned)exp(uniform() * log(200000.0)), 0); fprintf(fs, k ? " %s" : "%s", w); }
        for (int k = 0; k < nt; k++) { word(w, (unsigned)exp(uniform() * log(200000.0)), 1); fprintf(ft, k ? " %s" : "%s", w); }
        fputc('\n', fs); fputc('\n', ft);
    }
    int bad = fclose(fs) != 0;
    bad |= fclose(ft) != 0;
    if (bad) { fprintf(stderr, "error: writing %s / %s failed\n", src, tgt); return 2; }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "ids")) {
        int vocab = argc > 4 ? atoi(argv[4]) : 32000;
        rng_state = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
        return write_ids(argv[2], atoi(argv[3]), vocab, argc > 6 ? atoi(argv[6]) : 0);
    }
    if (argc == 6 && !strcmp(argv[1], "text")) {
        rng_state = strtoull(argv[3], NULL, 10);
        return write_text(atoi(argv[2]), argv[4], argv[5]);
    }
    fprintf(stderr, "usage: gen_corpus ids OUT.h5 PAIRS [VOCAB [SEED [ID_BITS]]]\n"
                    "       gen_corpus text PAIRS SEED SRC TGT\n");
    return 2;
}
