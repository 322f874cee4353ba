/* `transformer translate`: translate a split of a dataset file or raw text
 * with the beam search of decode.c (section 6.1), batched over sentences of
 * similar length, split across MPI ranks and gathered in input order.
 *
 * Raw text is tokenised with the dataset's own SentencePiece model
 * (spm_encode --output_format=id; the dataset's ids are SentencePiece's:
 * pad 0, bos 1, eos 2, unk 3) and every output is detokenised with
 * spm_decode.  Both tools run as child processes (posix_spawn), on rank 0.
 *
 * Bad input: an empty line gives an empty output line (nothing is decoded);
 * a source longer than the model's positions (max_len - 1 tokens plus EOS)
 * is truncated to fit, with one warning line for the whole run; a checkpoint
 * whose vocabulary differs from the dataset's is a one-line error. */
#include "translate.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "batch.h"
#include "config.h"
#include "decode.h"
#include "dist.h"
#include "greedy.h"
#include "model.h"
#include "util.h"

#include "checkpoint.h"
#include "cli.h"
#include "corpus.h"
#include "dataset.h"
#include "inference.h"

extern char **environ;

#define TR_PATH 1024   /* the temporary directory's path, at most */

typedef struct {
    const char *ckpt, *data, *split, *input, *output, *reference;
    int batch, recompute;
    int n_over;
    char **over;      /* key=value overrides */
} Opts;

static void help(void)
{
    printf("usage: transformer translate --checkpoint CKPT --data DATA.h5 (--split NAME | --input FILE)\n"
           "                             --output OUT.txt [--batch-size N] [key=value ...]\n\n"
           "Translates the source side of split NAME of DATA.h5 (e.g. test2016), or the raw text\n"
           "lines of FILE (tokenised with the dataset's SentencePiece model), with beam search\n"
           "(section 6.1 of the paper) and writes one detokenised line per input line, in order.\n"
           "Under mpirun the sentences are split across ranks and gathered on rank 0.\n"
           "  --batch-size N   sentences decoded together (default 64)\n"
           "  --reference REF  also write the split's reference translations (detokenised)\n"
           "--data synthetic: the embedded task of the checkpoint's config (splits train, dev,\n"
           "test); inputs and outputs are lines of token ids, and the exact-match rate is printed.\n"
           "  --recompute      greedy decoding by full recomputation of the decoder each step\n"
           "                   (the slow reference, for benchmarks; implies beam=1)\n"
           "Decoding keys: beam (4; 1 = greedy), len_alpha (0.6: length penalty\n"
           "((5+|Y|)/6)^alpha), max_len_a (50: max output = input length + max_len_a);\n"
           "device (default: a visible GPU, else cpu; said on stdout) and threads select the\n"
           "backend; mask_heads=LIST masks attention heads\n"
           "(docs/attention.md).  Architecture keys come from the checkpoint.\n"
           "Empty lines give empty lines; lines longer than the model's max_len positions are\n"
           "truncated (one warning line).  Prints sentences/s and target tokens/s.\n");
}

static int parse(Opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->batch = 64;
    o->over = xcalloc(argc, sizeof(char *));
    const char *batch = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--checkpoint") ? &o->ckpt : !strcmp(a, "--data") ? &o->data
                         : !strcmp(a, "--split") ? &o->split : !strcmp(a, "--input") ? &o->input
                         : !strcmp(a, "--output") ? &o->output : !strcmp(a, "--reference") ? &o->reference
                         : !strcmp(a, "--batch-size") ? &batch : NULL;
        if (dst) {
            if (cli_option("translate", argc, argv, &i, dst)) return 2;
        } else if (!strcmp(a, "--recompute")) o->recompute = 1;
        else if (cli_is_setting(a)) o->over[o->n_over++] = argv[i];
        else { fprintf(stderr, "error: translate: unknown argument '%s' (see 'transformer translate --help')\n", a); return 2; }
    }
    if (batch) {
        long long v;
        if (cli_int("translate", "--batch-size", batch, 1, 1000000, &v)) return 2;
        o->batch = (int)v;
    }
    if (!o->ckpt) { fprintf(stderr, "error: translate: --checkpoint CKPT is required\n"); return 2; }
    if (!o->data) { fprintf(stderr, "error: translate: --data DATA.h5 is required (its vocabulary and SentencePiece model)\n"); return 2; }
    if (!o->split == !o->input) { fprintf(stderr, "error: translate: give exactly one of --split NAME and --input FILE\n"); return 2; }
    if (!o->output) { fprintf(stderr, "error: translate: --output OUT.txt is required\n"); return 2; }
    if (o->reference && !o->split) { fprintf(stderr, "error: translate: --reference needs --split\n"); return 2; }
    const char *in[] = { o->ckpt, o->data, o->input };
    /* first: a --reference that is a link to the --output is named as such */
    if (cli_check_outputs_differ("translate", "--output", o->output, "--reference", o->reference)) return 2;
    if (cli_check_output("translate", "--output", o->output, in, 3)) return 2;
    if (cli_check_output("translate", "--reference", o->reference, in, 3)) return 2;
    /* nor a file training keeps beside the checkpoint (its log, a checkpoint) */
    if (checkpoint_check_output_beside("--output", o->output, o->ckpt)) return 2;
    return checkpoint_check_output_beside("--reference", o->reference, o->ckpt);
}

/* run argv[0] (PATH lookup) with stdin/stdout/stderr from/to files */
static int run_tool(char *const argv[], const char *in, const char *out, const char *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, in, O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void tool_error(const char *tool, const char *errpath)
{
    char line[256] = "";
    FILE *f = fopen(errpath, "r");
    if (f) {
        char buf[256];
        while (fgets(buf, sizeof buf, f)) if (buf[0] != '\n') snprintf(line, sizeof line, "%s", buf);
        fclose(f);
    }
    line[strcspn(line, "\n")] = '\0';
    die(2, "translate: %s failed (is sentencepiece installed?)%s%s", tool, *line ? ": " : "", line);
}

/* read lines of space-separated ids in [0, vocab) into a corpus (source
 * side only): 0, -1 if fewer than expect lines, or the 1-based number of a
 * line with something else on it */
static int read_id_lines(const char *path, Corpus *c, int expect, int vocab)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    memset(c, 0, sizeof *c);
    size_t cap = 1024, n = 0;
    c->src_tok = xmalloc(sizeof(int32_t) * cap);
    c->src_off = xmalloc(sizeof(int64_t) * (expect + 1));
    char *line = NULL;
    size_t lcap = 0;
    int k = 0, bad = 0;
    c->src_off[0] = 0;
    while (!bad && getline(&line, &lcap, f) >= 0 && k < expect) {
        char *p = line, *end;
        for (;;) {
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (errno || v < 0 || v >= vocab) { bad = k + 1; break; }
            if (n == cap) { cap *= 2; c->src_tok = xrealloc(c->src_tok, sizeof(int32_t) * cap); }
            c->src_tok[n++] = (int32_t)v;
            p = end;
        }
        while (isspace((unsigned char)*p)) p++;
        if (*p) bad = k + 1;
        c->src_off[++k] = (int64_t)n;
    }
    free(line);
    fclose(f);
    c->n = k;
    c->tgt_off = xcalloc(k + 1, sizeof(int64_t));
    c->tgt_tok = xmalloc(sizeof(int32_t));
    return bad ? bad : k == expect ? 0 : -1;
}

/* the lines of path (a last one without a newline counted), -1 if it
 * cannot be read; with copy, also copied there (-2 if that fails), so
 * that a pipe (--input /dev/stdin, <(...)), which reads only once, is
 * read once and what is tokenised is what was counted */
static int count_lines(const char *path, const char *copy)
{
    FILE *f = fopen(path, "r"), *w = NULL;
    if (!f) return -1;
    struct stat sb;
    if (fstat(fileno(f), &sb) || S_ISDIR(sb.st_mode)) { fclose(f); errno = EISDIR; return -1; }
    if (copy && !(w = fopen(copy, "w"))) { fclose(f); return -2; }
    int n = 0, ch, last = '\n', wbad = 0;
    while ((ch = getc(f)) != EOF) {
        if (ch == '\n') n++;
        last = ch;
        if (w && putc(ch, w) == EOF) wbad = 1;
    }
    int rbad = ferror(f);
    fclose(f);
    if (w && fclose(w)) wbad = 1;
    return rbad ? -1 : wbad ? -2 : n + (last != '\n');
}

/* the copy of a text --input is UTF-8 line by line, as prepare requires of
 * a corpus: spm_encode would turn a Latin-1 byte into U+FFFD and translate
 * the damaged line without a word */
static void check_utf8(const char *copy, const char *shown)
{
    FILE *f = fopen(copy, "rb");
    if (!f) die(2, "%s: cannot read: %s", copy, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (int k = 1; (len = getline(&line, &cap, f)) >= 0; k++) {
        size_t n = (size_t)len - (len > 0 && line[len - 1] == '\n');
        size_t bad = utf8_bad((const unsigned char *)line, n);
        if (bad < n)
            die(2, "%s: line %d: %s at byte %zu of the line (translate reads UTF-8 text)", shown, k,
                line[bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
    }
    free(line);
    fclose(f);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) die(2, "%s: cannot write", path);
}

/* the temporary directory of rank 0, removed at exit (also after die()) */
static char tmp_dir[TR_PATH];
static void remove_tmp_dir(void)
{
    static const char *names[] = { "spm.model", "in.txt", "out.txt", "err.txt" };
    char p[TR_PATH + 16];
    if (!tmp_dir[0]) return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp_dir, names[i]);
        unlink(p);
    }
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
}

static int rlen_or(const Corpus *c, int i) { return c->tgt_off ? corpus_tgt_len(c, i) : -1; }

/* write n lines of ids (len[i] tokens each, concatenated in tok) to dest,
 * detokenised with spm_decode unless raw, via a temporary file, fsync and
 * rename: dest appears only complete */
static void emit(const char *dest, int n, const int *len, const int32_t *tok, int raw, const char *spm_path,
                 const char *p_in, const char *p_out, const char *p_err, const DatasetVocab *voc)
{
    FILE *f = fopen(p_in, "w");
    if (!f) die(1, "%s: cannot write", p_in);
    long q = 0;
    for (int i = 0; i < n; i++) {
        int first = 1;
        for (int j = 0; j < len[i]; j++) {
            int32_t t = tok[q + j];
            /* byte-fallback pieces of line breaks would split the sentence's
             * line in spm_decode's output: one output line per sentence */
            if (!raw && voc && t >= 0 && t < voc->vocab_size &&
                (!strcmp(voc->pieces[t], "<0x0A>") || !strcmp(voc->pieces[t], "<0x0D>")))
                continue;
            fprintf(f, first ? "%d" : " %d", t);
            first = 0;
        }
        q += len[i];
        fputc('\n', f);
    }
    if (fclose(f)) die(1, "%s: cannot write", p_in);
    const char *text = p_in;
    if (!raw) {
        char mo[TR_PATH + 32];
        snprintf(mo, sizeof mo, "--model=%s", spm_path);
        char *av[] = { "spm_decode", mo, "--input_format=id", NULL };
        if (run_tool(av, p_in, p_out, p_err)) tool_error("spm_decode", p_err);
        int got = count_lines(p_out, NULL);
        if (got != n) die(1, "translate: spm_decode returned %d lines for %d sentences", got, n);
        text = p_out;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", dest, (int)getpid());
    FILE *in = fopen(text, "r"), *w = fopen(tmp, "w");
    if (!in || !w) die(2, "%s: cannot write", dest);
    char buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, r, w) != r) { unlink(tmp); die(2, "%s: write failed", dest); }
    fclose(in);
    if (fflush(w) || fsync(fileno(w)) || fclose(w)) { unlink(tmp); die(2, "%s: write failed", dest); }
    if (rename(tmp, dest)) { unlink(tmp); die(2, "%s: cannot rename %s into place", dest, tmp); }
}

/* sentences [lo, hi) of src sorted by length (longest first) in batches */
static const Corpus *cmp_corpus;
static int cmp_len_desc(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    int la = corpus_src_len(cmp_corpus, a), lb = corpus_src_len(cmp_corpus, b);
    return la != lb ? lb - la : a - b;
}

/* everything cmd_translate holds, freed by translate_free */
typedef struct {
    Dist D;
    Opts o;
    Config c;            /* the checkpoint's config with the command line's overrides */
    int threads;
    Backend *be;
    Model m;
    CkptState st;
    int synth;           /* --data synthetic: ids in and out, no SentencePiece */
    DatasetVocab voc;
    char tmpdir[TR_PATH];   /* rank 0's temporary directory (other ranks: the template) */
    char spm_path[TR_PATH + 16], p_in[TR_PATH + 16], p_out[TR_PATH + 16], p_err[TR_PATH + 16];
    Corpus src;
    DecodeOpts dopt;
    int lo, nl;          /* this rank's sentences [lo, lo + nl) */
    int stride;          /* tokens per output row: model_positions */
    int32_t *out;        /* nl rows of stride tokens, out_len[i] used */
    int *out_len;
    double t_dec;
    /* the outputs of all ranks in input order, on rank 0 */
    int *all_len;
    int32_t *all_tok;
    long ntok;
    double t_max;
} Translate;

/* the checkpoint's config with the command line's settings, the data's
 * vocabulary checked, the backend (from the command line's device and
 * threads) and the model (every rank alike: 2 after a one-line error,
 * reported by rank 0) */
static int open_model(Translate *t, int argc, char **argv)
{
    if (parse(&t->o, argc, argv)) { free(t->o.over); return 2; }
    const Opts *o = &t->o;
    InferenceArgs ia = { .cmd = "translate", .ckpt = o->ckpt, .data = o->data, .over = o->over, .n_over = o->n_over,
                         .backend_from_command_line = 1 };
    t->synth = corpus_is_synthetic(o->data);
    if (inference_read_config(&ia, &t->c, &t->st, t->synth ? NULL : &t->voc)) return 2;
    int rc = inference_open(&ia, &t->D, &t->c, &t->m, &t->be);
    t->threads = t->c.threads;
    return rc;
}

/* rank 0's temporary directory for the SentencePiece tools' files */
static void make_tmp_dir(Translate *t)
{
    /* in TMPDIR where set (a cluster's node-local scratch), else /tmp */
    const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (snprintf(t->tmpdir, sizeof t->tmpdir, "%s/transformer-translate-XXXXXX", base) >= (int)sizeof t->tmpdir)
        die(2, "%s: TMPDIR too long", base);
    if (t->D.rank == 0) {
        if (!mkdtemp(t->tmpdir)) die(1, "%s: cannot create a temporary directory: %s", base, strerror(errno));
        snprintf(tmp_dir, sizeof tmp_dir, "%s", t->tmpdir);
        atexit(remove_tmp_dir);
        util_cleanup_hook = remove_tmp_dir;   /* die() under mpirun: MPI_Abort skips atexit */
    }
    snprintf(t->spm_path, sizeof t->spm_path, "%s/spm.model", t->tmpdir);
    snprintf(t->p_in, sizeof t->p_in, "%s/in.txt", t->tmpdir);
    snprintf(t->p_out, sizeof t->p_out, "%s/out.txt", t->tmpdir);
    snprintf(t->p_err, sizeof t->p_err, "%s/err.txt", t->tmpdir);
    if (t->D.rank == 0 && !t->synth) write_file(t->spm_path, t->voc.spm_model, t->voc.spm_model_len);
}

/* rank 0: the lines of --input as token ids (the synthetic task's text is
 * its token ids; otherwise spm_encode with the dataset's model) */
static void read_raw_input(Translate *t)
{
    const char *input = t->o.input;
    int vocab_size = t->c.vocab_size;
    int n = count_lines(input, t->p_in);   /* the copy is what is read from here on */
    if (n == -2) die(1, "%s: cannot write a copy of %s: %s", t->p_in, input, strerror(errno));
    if (n < 0) die(2, "%s: cannot read: %s", input, strerror(errno));
    if (t->synth) {
        int bad = read_id_lines(t->p_in, &t->src, n, vocab_size);
        if (bad > 0) die(2, "%s:%d: expected token ids in [0, %d) separated by spaces", input, bad, vocab_size);
        if (bad) die(2, "%s: cannot read", input);
    } else {
        check_utf8(t->p_in, input);
        char mo[TR_PATH + 32];
        snprintf(mo, sizeof mo, "--model=%s", t->spm_path);
        char *av[] = { "spm_encode", mo, "--output_format=id", NULL };
        if (run_tool(av, t->p_in, t->p_out, t->p_err)) tool_error("spm_encode", t->p_err);
        if (read_id_lines(t->p_out, &t->src, n, vocab_size))
            die(2, "%s: spm_encode returned fewer lines than the input's %d", input, n);
    }
}

/* raw text is tokenised on rank 0 and broadcast to the others */
static void load_raw_sources(Translate *t)
{
    Corpus *src = &t->src;
    long hdr[2] = { 0, 0 };
    if (t->D.rank == 0) {
        read_raw_input(t);
        hdr[0] = src->n;
        hdr[1] = src->src_off[src->n];
    }
    MPI_Bcast(hdr, 2, MPI_LONG, 0, t->D.comm);
    if (t->D.rank != 0) {
        memset(src, 0, sizeof *src);
        src->n = (int)hdr[0];
        src->src_off = xmalloc(sizeof(int64_t) * (hdr[0] + 1));
        src->src_tok = xmalloc(sizeof(int32_t) * (hdr[1] + 1));
        src->tgt_off = xcalloc(hdr[0] + 1, sizeof(int64_t));
        src->tgt_tok = xmalloc(sizeof(int32_t));
    }
    MPI_Bcast(src->src_off, (int)hdr[0] + 1, MPI_INT64_T, 0, t->D.comm);
    MPI_Bcast(src->src_tok, (int)hdr[1], MPI_INT32_T, 0, t->D.comm);
}

/* sources: a split of the dataset, or raw text tokenised on rank 0 */
static int load_sources(Translate *t)
{
    const Opts *o = &t->o;
    const Config *c = &t->c;
    if (o->split) {
        /* the same split on every rank: one error line, rank 0's */
        int held = dist_hold_stderr(&t->D);
        if (dist_release_stderr(&t->D, held, corpus_open(o->data, o->split, c, &t->src) ? 2 : 0)) return 2;
    } else
        load_raw_sources(t);
    const Corpus *src = &t->src;
    for (long i = 0; i < src->src_off[src->n]; i++)
        if (src->src_tok[i] < 0 || src->src_tok[i] >= c->vocab_size)
            die(2, "%s: token id %d outside the checkpoint's vocabulary of %d", o->input ? o->input : o->data,
                src->src_tok[i], c->vocab_size);

    /* truncation of over-long sources (documented in --help and README) */
    int max_src = c->max_len - 1, n_long = 0, first_long = -1;
    for (int i = 0; i < src->n; i++)
        if (corpus_src_len(src, i) > max_src) { n_long++; if (first_long < 0) first_long = i; }
    if (n_long && t->D.rank == 0)
        fprintf(stderr, "warning: %s: %d input line%s longer than the model's %d source tokens (max_len %d) truncated "
                "(first: line %d)\n", o->input ? o->input : o->split, n_long, n_long > 1 ? "s" : "", max_src,
                c->max_len, first_long + 1);
    return 0;
}

/* this rank's sentences, longest first, in batches of --batch-size */
static void decode_sentences(Translate *t)
{
    const Corpus *src = &t->src;
    int batch = t->o.batch, recompute = t->o.recompute, max_len = t->c.max_len;
    t->lo = (int)((long)src->n * t->D.rank / t->D.size);
    int hi = (int)((long)src->n * (t->D.rank + 1) / t->D.size), lo = t->lo, nl = t->nl = hi - t->lo;
    int *order = xmalloc(sizeof(int) * (nl > 0 ? nl : 1));
    for (int i = 0; i < nl; i++) order[i] = lo + i;
    cmp_corpus = src;
    qsort(order, nl, sizeof(int), cmp_len_desc);
    decode_opts_from_config(&t->dopt, &t->c);
    if (recompute) t->dopt.beam = 1;
    int stride = t->stride = model_positions(&t->m);
    t->out = xmalloc(sizeof(int32_t) * (size_t)(nl > 0 ? nl : 1) * stride);
    t->out_len = xcalloc(nl > 0 ? nl : 1, sizeof(int));
    Decoder *dec = decoder_create(&t->m);
    Batch b = {0};
    int *bidx = xmalloc(sizeof(int) * batch);
    int32_t *bo = xmalloc(sizeof(int32_t) * (size_t)batch * stride);
    int *bl = xmalloc(sizeof(int) * batch);
    double t0 = now_seconds();
    for (int s = 0; s < nl;) {
        int k = 0;
        while (s + k < nl && k < batch && corpus_src_len(src, order[s + k]) > 0) { bidx[k] = order[s + k]; k++; }
        if (k == 0) { s++; continue; }   /* empty line: empty output (out_len 0) */
        batch_build(&b, src, bidx, k, max_len);
        /* the reference path: one max_out for the batch (its longest source) */
        int bstride = recompute ? decode_max_out(&t->m, &t->dopt, b.S - 1) : stride;
        if (recompute) greedy_decode(&t->m, &b, bstride, bo, bl);
        else decode_batch(dec, &b, &t->dopt, bo, stride, bl, NULL);
        for (int j = 0; j < k; j++) {
            int li = bidx[j] - lo;
            t->out_len[li] = bl[j];
            memcpy(t->out + (size_t)li * stride, bo + (size_t)j * bstride, sizeof(int32_t) * bl[j]);
        }
        s += k;
    }
    t->be->sync(t->be);
    t->t_dec = now_seconds() - t0;
    free(bidx); free(bo); free(bl); free(order);
    batch_free(&b);
    decoder_free(dec);
}

/* gather in input order on rank 0 (ranks hold consecutive ranges) */
static void gather_outputs(Translate *t)
{
    const Dist *D = &t->D;
    int nl = t->nl;
    long ntok_loc = 0;
    for (int i = 0; i < nl; i++) ntok_loc += t->out_len[i];
    int32_t *packed = xmalloc(sizeof(int32_t) * (ntok_loc + 1));
    long p = 0;
    for (int i = 0; i < nl; i++) {
        memcpy(packed + p, t->out + (size_t)i * t->stride, sizeof(int32_t) * t->out_len[i]);
        p += t->out_len[i];
    }
    int *cnt_l = NULL, *dsp_l = NULL, *cnt_t = NULL, *dsp_t = NULL;
    int ntl = (int)ntok_loc;
    MPI_Reduce(&t->t_dec, &t->t_max, 1, MPI_DOUBLE, MPI_MAX, 0, D->comm);
    if (D->rank == 0) {
        cnt_l = xmalloc(sizeof(int) * D->size); dsp_l = xmalloc(sizeof(int) * D->size);
        cnt_t = xmalloc(sizeof(int) * D->size); dsp_t = xmalloc(sizeof(int) * D->size);
        t->all_len = xmalloc(sizeof(int) * (t->src.n + 1));
    }
    MPI_Gather(&nl, 1, MPI_INT, cnt_l, 1, MPI_INT, 0, D->comm);
    MPI_Gather(&ntl, 1, MPI_INT, cnt_t, 1, MPI_INT, 0, D->comm);
    if (D->rank == 0) {
        for (int r = 0; r < D->size; r++) {
            dsp_l[r] = r ? dsp_l[r - 1] + cnt_l[r - 1] : 0;
            dsp_t[r] = r ? dsp_t[r - 1] + cnt_t[r - 1] : 0;
        }
        t->ntok = dsp_t[D->size - 1] + cnt_t[D->size - 1];
        t->all_tok = xmalloc(sizeof(int32_t) * (t->ntok + 1));
    }
    MPI_Gatherv(t->out_len, nl, MPI_INT, t->all_len, cnt_l, dsp_l, MPI_INT, 0, D->comm);
    MPI_Gatherv(packed, ntl, MPI_INT32_T, t->all_tok, cnt_t, dsp_t, MPI_INT32_T, 0, D->comm);
    free(cnt_l); free(dsp_l); free(cnt_t); free(dsp_t); free(packed);
}

/* rank 0: detokenise (ids -> spm_decode -> text), write atomically, report */
static void publish_outputs(Translate *t)
{
    const Opts *o = &t->o;
    const Corpus *src = &t->src;
    const DatasetVocab *voc = t->synth ? NULL : &t->voc;
    int *rlen = NULL;
    if (o->reference) {
        rlen = xmalloc(sizeof(int) * (src->n + 1));
        for (int i = 0; i < src->n; i++) rlen[i] = corpus_tgt_len(src, i);
    }
    emit(o->output, src->n, t->all_len, t->all_tok, t->synth, t->spm_path, t->p_in, t->p_out, t->p_err, voc);
    if (o->reference)
        emit(o->reference, src->n, rlen, src->tgt_tok, t->synth, t->spm_path, t->p_in, t->p_out, t->p_err, voc);
    if (t->synth && o->split) {
        long exact = 0, q = 0;
        for (int i = 0; i < src->n; i++) {
            exact += t->all_len[i] == rlen_or(src, i) &&
                     !memcmp(t->all_tok + q, src->tgt_tok + src->tgt_off[i], sizeof(int32_t) * t->all_len[i]);
            q += t->all_len[i];
        }
        printf("translate: exact match %.4f (%ld of %d)\n", (double)exact / (src->n ? src->n : 1), exact, src->n);
    }
    free(rlen);
    double t_max = t->t_max;
    printf("translate: %d sentences, %ld target tokens in %.2fs: %.1f sentences/s, %.0f target tokens/s "
           "(%s, beam %d, alpha %.2f, %d rank%s x %d threads, backend %s)\n",
           src->n, t->ntok, t_max, src->n / (t_max > 0 ? t_max : 1e-9), t->ntok / (t_max > 0 ? t_max : 1e-9),
           o->recompute ? "greedy by full recomputation" : "incremental", t->dopt.beam, t->dopt.len_alpha, t->D.size,
           t->D.size > 1 ? "s" : "", t->threads, t->be->name);
    fflush(stdout);
    remove_tmp_dir();
}

static void translate_free(Translate *t)
{
    free(t->all_len); free(t->all_tok);
    free(t->out); free(t->out_len); free(t->o.over);
    corpus_free(&t->src);
    if (!t->synth) dataset_vocab_free(&t->voc);
    model_free(&t->m);
    t->be->destroy(t->be);
    dist_finalize(&t->D);
}

int cmd_translate(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { help(); return 0; }
    Translate t;
    memset(&t, 0, sizeof t);
    dist_init(&t.D, &argc, &argv);
    dist_install_abort(&t.D);
    /* the same arguments and files on every rank: one error line, rank 0's */
    int held = dist_hold_stderr(&t.D);
    int rc = open_model(&t, argc, argv);
    if (dist_release_stderr(&t.D, held, rc)) {
        dist_finalize(&t.D);
        return 2;
    }
    make_tmp_dir(&t);
    if (load_sources(&t)) {   /* every rank alike, after one line */
        dist_finalize(&t.D);
        return 2;
    }
    decode_sentences(&t);
    gather_outputs(&t);
    if (t.D.rank == 0) publish_outputs(&t);
    translate_free(&t);
    return 0;
}
