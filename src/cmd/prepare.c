/* `transformer prepare`: validates the parallel text files (in C, so that
 * every problem is one line naming the file and line), learns ONE shared BPE
 * vocabulary for both languages with SentencePiece's spm_train (section 5.1:
 * "a shared source-target vocabulary of about 37000 tokens"), encodes every
 * file with spm_encode, drops training pairs longer than max_len, and writes
 * the dataset with dataset_write() (temp name + rename).  The tools run via
 * posix_spawnp with redirected stdio, never through a shell. */
#include "prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "dataset.h"
#include "sha256.h"
#include "util.h"

extern char **environ;

typedef struct {
    const char *name;
    const char *src, *tgt;
} SplitArg;

typedef struct {
    const char *out;
    SplitArg *args;
    int n_args;
    double coverage;
    long long sentence_size;
    int byte_fallback;
    int jobs;
    int id_bits;        /* --id-bits: 16, 32, or 0 (the narrowest that fits) */
    /* the numeric options' words, read by prep_numbers after parsing */
    const char *coverage_arg, *sentences_arg, *byte_fallback_arg, *jobs_arg, *id_bits_arg;
} PrepOpts;

/* ---------- command line ---------- */

/* --split NAME SRC TGT (repeatable): three words, none of them an option */
static int prep_split(PrepOpts *o, int argc, char **argv, int *i)
{
    for (int k = 1; k <= 3; k++)
        if (*i + k >= argc || !strncmp(argv[*i + k], "--", 2)) {
            fprintf(stderr, "error: prepare: --split needs 3 arguments, NAME SRC TGT (see 'transformer prepare --help')\n");
            return 2;
        }
    o->args = xrealloc(o->args, sizeof(SplitArg) * (o->n_args + 1));
    o->args[o->n_args++] = (SplitArg){ argv[*i + 1], argv[*i + 2], argv[*i + 3] };
    *i += 3;
    return 1;
}

static int prep_extra(void *ctx, int argc, char **argv, int *i)
{
    PrepOpts *o = ctx;
    const char *a = argv[*i];
    if (!strcmp(a, "--split")) return prep_split(o, argc, argv, i);
    const char **dst = !strcmp(a, "--out") ? &o->out : !strcmp(a, "--character-coverage") ? &o->coverage_arg
                     : !strcmp(a, "--sentences") ? &o->sentences_arg : !strcmp(a, "--byte-fallback") ? &o->byte_fallback_arg
                     : !strcmp(a, "--jobs") ? &o->jobs_arg : !strcmp(a, "--id-bits") ? &o->id_bits_arg : NULL;
    if (!dst) return 0;
    return cli_option("prepare", argc, argv, i, dst) ? 2 : 1;
}

/* the numeric options, after parsing (each given at most once) */
static int prep_numbers(PrepOpts *o)
{
    long long x;
    if (o->coverage_arg) {
        char *end;
        o->coverage = strtod(o->coverage_arg, &end);
        if (end == o->coverage_arg || *end || !(o->coverage > 0 && o->coverage <= 1)) {
            fprintf(stderr, "error: prepare: --character-coverage '%s' must be in (0, 1]\n", o->coverage_arg);
            return 2;
        }
    }
    if (o->sentences_arg) {
        if (cli_int("prepare", "--sentences", o->sentences_arg, 0, LLONG_MAX, &x)) return 2;
        o->sentence_size = x;
    }
    if (o->byte_fallback_arg) {
        if (cli_int("prepare", "--byte-fallback", o->byte_fallback_arg, 0, 1, &x)) return 2;
        o->byte_fallback = (int)x;
    }
    if (o->jobs_arg) {   /* 0: as many as the allocation has CPUs */
        if (cli_int("prepare", "--jobs", o->jobs_arg, 0, 4096, &x)) return 2;
        o->jobs = (int)x;
    }
    if (o->id_bits_arg) {
        if (strcmp(o->id_bits_arg, "16") && strcmp(o->id_bits_arg, "32")) {
            fprintf(stderr, "error: prepare: --id-bits '%s' must be 16 or 32\n", o->id_bits_arg);
            return 2;
        }
        o->id_bits = atoi(o->id_bits_arg);
    }
    return 0;
}

static void prepare_help(void)
{
    printf("usage: transformer prepare --out DATA.h5 --split NAME SRC TGT [--split NAME SRC TGT ...]\n"
           "                           [--character-coverage X] [--sentences N] [--byte-fallback 0|1]\n"
           "                           [--jobs N] [--id-bits 16|32] [--config FILE] [vocab_size=N] [max_len=N]\n"
           "                           [seed=N]\n\n"
           "Validates the parallel text files (UTF-8, one sentence per line, equal line counts),\n"
           "learns one shared BPE vocabulary of vocab_size pieces with spm_train on the 'train'\n"
           "split (both sides), encodes every split with spm_encode, drops training pairs that\n"
           "do not fit max_len positions (with EOS/BOS), and writes one HDF5 dataset\n"
           "(docs/dataset.md).  A split given several times is concatenated in order.\n"
           "  --character-coverage X  spm_train character coverage (default 1.0)\n"
           "  --sentences N           spm_train samples at most N lines (default 0: all)\n"
           "  --byte-fallback 0|1     unseen characters become UTF-8 byte pieces, not <unk> (default 1)\n"
           "  --jobs N                workers: each file is encoded in N pieces, N spm_encode\n"
           "                          processes at once, and spm_train's threads; the output does not\n"
           "                          depend on N (default: SLURM_CPUS_PER_TASK, else the CPUs this\n"
           "                          process may run on, sched_getaffinity)\n"
           "  --id-bits 16|32         width of the stored ids (default: 16 when vocab_size <= 65536)\n");
}

/* ---------- validation ---------- */

typedef struct {
    char *data;
    size_t len;
    long long lines;
    char sha[65];
    int n_cut;           /* pieces encoded apart (cut_text) */
    long long *cut;      /* [n_cut+1] byte offsets of the pieces, at line starts */
    long long *cut_lines;/* [n_cut] lines of each piece */
} TextFile;

static int read_text(const char *path, TextFile *t)
{
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "error: %s: cannot open: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 2;
    }
    if (!S_ISREG(st.st_mode)) { fprintf(stderr, "error: %s: not a regular file\n", path); close(fd); return 2; }
    if (st.st_size == 0) { fprintf(stderr, "error: %s: empty file\n", path); close(fd); return 2; }
    t->len = (size_t)st.st_size;
    t->data = xmalloc(t->len);
    size_t got = 0;
    while (got < t->len) {
        ssize_t r = read(fd, t->data + got, t->len - got);
        if (r <= 0) {
            fprintf(stderr, "error: %s: read failed: %s\n", path, r < 0 ? strerror(errno) : "file shrank");
            close(fd); free(t->data); t->data = NULL;
            return 2;
        }
        got += (size_t)r;
    }
    close(fd);
    sha256_hex(t->data, t->len, t->sha);
    /* line by line: UTF-8 and counting ('\n' ends a line; a last line
     * without '\n' still counts) */
    size_t i = 0;
    while (i < t->len) {
        char *nl = memchr(t->data + i, '\n', t->len - i);
        size_t e = nl ? (size_t)(nl - t->data) : t->len;
        t->lines++;
        size_t bad = utf8_bad((const unsigned char *)t->data + i, e - i);
        if (bad < e - i) {
            fprintf(stderr, "error: %s: line %lld: %s at byte %zu of the line\n", path, t->lines,
                    t->data[i + bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
            free(t->data); t->data = NULL;
            return 2;
        }
        i = e + 1;
    }
    return 0;
}

/* Cut t into at most pieces byte ranges of about equal size that start at
 * line starts, so that spm_encode can encode them at the same time; each
 * line is encoded alone, so the ids do not depend on the cuts. */
static void cut_text(TextFile *t, int pieces)
{
    t->cut = xmalloc(sizeof(long long) * (pieces + 1));
    t->cut_lines = xmalloc(sizeof(long long) * pieces);
    t->n_cut = 0;
    size_t at = 0;
    for (int j = 1; j <= pieces && at < t->len; j++) {
        size_t end = j == pieces ? t->len : (size_t)((double)t->len * j / pieces);
        if (end < at) end = at;
        if (end < t->len) {   /* to the end of the line that holds byte end - 1 */
            const char *nl = end > at ? memchr(t->data + end - 1, '\n', t->len - (end - 1)) : NULL;
            end = nl ? (size_t)(nl - t->data) + 1 : (end > at ? t->len : at);
        }
        if (end == at) continue;
        long long lines = 0;
        for (const char *q = t->data + at, *e = t->data + end; (q = memchr(q, '\n', (size_t)(e - q))) != NULL; q++) lines++;
        if (end == t->len && t->data[t->len - 1] != '\n') lines++;   /* a last line without '\n' */
        t->cut[t->n_cut] = (long long)at;
        t->cut_lines[t->n_cut++] = lines;
        at = end;
    }
    t->cut[t->n_cut] = (long long)t->len;
}

/* ---------- running the SentencePiece tools ---------- */

/* start argv with the file actions fa (destroyed here); its pid, or -1
 * after one error line */
static pid_t spawn_with(char *const argv[], posix_spawn_file_actions_t *fa)
{
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(fa);
    if (rc) {
        fprintf(stderr, "error: %s: cannot run: %s%s\n", argv[0], strerror(rc),
                rc == ENOENT ? " (install the Debian package 'sentencepiece')" : "");
        return -1;
    }
    return pid;
}

/* spawn argv with stdin/stdout/stderr redirected to files (NULL: inherit) */
static pid_t spawn(char *const argv[], const char *in, const char *out, const char *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in) posix_spawn_file_actions_addopen(&fa, 0, in, O_RDONLY, 0);
    if (out) posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err) posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    return spawn_with(argv, &fa);
}

static int wait_ok(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* the reason SentencePiece gives on failure: the last line before
 * "Program terminated", from its last "] " on */
static void spm_reason(const char *errfile, char *msg, size_t cap)
{
    snprintf(msg, cap, "spm_train failed (see no message)");
    FILE *f = fopen(errfile, "r");
    if (!f) return;
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "Program terminated")) break;
        line[strcspn(line, "\n")] = '\0';
        if (line[0]) snprintf(last, sizeof last, "%s", line);
    }
    fclose(f);
    const char *p = last, *q;
    while ((q = strstr(p, "] ")) != NULL) p = q + 2;
    if (*p) snprintf(msg, cap, "%s", p);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = xmalloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    *len = got;
    return buf;
}

/* parse spm_encode --output_format=id output: one line of ids per input
 * line; appends to the growing token array, of int32 or (elem 2) of
 * uint16 ids: the width the dataset stores, so that prepare holds no more */
static int parse_ids(const char *path, long long expect_lines, int vocab, int64_t **off, void **tok, size_t elem,
                     long long *n, long long *ntok, long long *cap_tok)
{
    size_t len;
    char *buf = slurp(path, &len);
    if (!buf) { fprintf(stderr, "error: %s: cannot read spm_encode output\n", path); return 2; }
    long long lines = 0;
    char *p = buf, *end = buf + len;
    *off = xrealloc(*off, sizeof(int64_t) * (*n + expect_lines + 1));
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        if (lines == expect_lines) { lines++; break; }
        while (p < nl) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p || v < 0 || v >= vocab) { free(buf); fprintf(stderr, "error: %s: bad id output at line %lld\n", path, lines + 1); return 2; }
            if (*ntok == *cap_tok) { *cap_tok = *cap_tok * 2 + 1024; *tok = xrealloc(*tok, elem * *cap_tok); }
            if (elem == 2) ((uint16_t *)*tok)[(*ntok)++] = (uint16_t)v;
            else ((int32_t *)*tok)[(*ntok)++] = (int32_t)v;
            p = e;
            while (p < nl && *p == ' ') p++;
        }
        (*off)[++*n] = *ntok;
        lines++;
        p = nl + 1;
    }
    free(buf);
    if (lines != expect_lines) {
        fprintf(stderr, "error: %s: spm_encode wrote %lld lines for %lld input lines\n", path, lines, expect_lines);
        return 2;
    }
    return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

/* ---------- the command ---------- */

/* everything cmd_prepare owns; prepare_cleanup frees it on every path */
typedef struct {
    PrepOpts o;
    Config cfg;
    int nf;              /* number of --split arguments */
    TextFile *src, *tgt; /* per --split: size, lines, sha256 (texts freed after validation) */
    char work[4096];     /* work directory next to the output, "" while none */
    DatasetWrite dw;
    char *spm_cmd;       /* spm_train options, for provenance */
    char *command;       /* the command line, for provenance */
} Prepare;

static void prepare_cleanup(Prepare *p)
{
    if (p->work[0]) nftw(p->work, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    for (int k = 0; k < p->dw.n_splits; k++) {
        corpus_free(&p->dw.splits[k].corpus);
        free(p->dw.splits[k].src); free(p->dw.splits[k].tgt);
    }
    free(p->dw.splits);
    dataset_vocab_free(&p->dw.vocab);
    free(p->spm_cmd); free(p->command);
    for (int i = 0; i < p->nf && p->src && p->tgt; i++) {
        free(p->src[i].cut); free(p->src[i].cut_lines); free(p->tgt[i].cut); free(p->tgt[i].cut_lines);
    }
    free(p->src); free(p->tgt); free(p->o.args);
}

static int prepare_parse(Prepare *p, int argc, char **argv)
{
    PrepOpts *o = &p->o;
    const char *origin;
    if (parse_config_words(&p->cfg, argc, argv, 2, "prepare", prep_extra, o, &origin) || prep_numbers(o)) return 2;
    if (!o->out) { fprintf(stderr, "error: prepare: --out DATA.h5 is required\n"); return 2; }
    /* the settings describe the dataset being written, not the synthetic
     * task, whose limits (synth_max_len) would refuse a short max_len */
    snprintf(p->cfg.data, sizeof p->cfg.data, "%s", o->out);
    if (config_validate(&p->cfg, origin)) return 2;
    int has_train = 0;
    for (int i = 0; i < o->n_args; i++) {
        has_train |= !strcmp(o->args[i].name, "train");
        if (!o->args[i].name[0] || strchr(o->args[i].name, '/')) {
            fprintf(stderr, "error: prepare: bad split name '%s'\n", o->args[i].name);
            return 2;
        }
    }
    if (!has_train) { fprintf(stderr, "error: prepare: no '--split train SRC TGT' given\n"); return 2; }
    if (o->id_bits == 16 && p->cfg.vocab_size > 65536) {
        fprintf(stderr, "error: prepare: --id-bits 16 cannot hold the ids of vocab_size=%d\n", p->cfg.vocab_size);
        return 2;
    }
    for (int i = 0; i < o->n_args; i++) {
        const char *in[] = { o->args[i].src, o->args[i].tgt };
        if (cli_check_output("prepare", "--out", o->out, in, 2)) return 2;
    }
    p->nf = o->n_args;
    return 0;
}

/* 1. validate every file; collect provenance and the pieces to encode
 * apart (the texts are only needed for that, so each pair is freed as
 * soon as it is done) */
static int validate_inputs(Prepare *p)
{
    const SplitArg *args = p->o.args;
    int nf = p->nf, rc = 0;
    TextFile *src = p->src = xcalloc(nf, sizeof *src), *tgt = p->tgt = xcalloc(nf, sizeof *tgt);
    for (int i = 0; i < nf && !rc; i++) {
        rc = read_text(args[i].src, &src[i]);
        if (!rc) rc = read_text(args[i].tgt, &tgt[i]);
        if (!rc && src[i].lines != tgt[i].lines) {
            int tshort = tgt[i].lines < src[i].lines;
            const char *sh = tshort ? args[i].tgt : args[i].src, *lo = tshort ? args[i].src : args[i].tgt;
            long long ns = tshort ? tgt[i].lines : src[i].lines, nl = tshort ? src[i].lines : tgt[i].lines;
            fprintf(stderr, "error: %s: has %lld lines but %s has %lld: it ends before line %lld\n", sh, ns, lo, nl,
                    ns + 1);
            rc = 2;
        }
        for (int k = 0; k < 2 && !rc; k++) {
            const char *path = k ? args[i].tgt : args[i].src;
            if (strchr(path, ',') && !strcmp(args[i].name, "train")) {
                fprintf(stderr, "error: %s: spm_train cannot take file names with ',' (rename the file)\n", path);
                rc = 2;
            }
        }
        /* one pair of texts in memory at a time (WMT14 En-Fr's are ~10 GB in all) */
        if (!rc) { cut_text(&src[i], p->o.jobs); cut_text(&tgt[i], p->o.jobs); }
        free(src[i].data); free(tgt[i].data); src[i].data = tgt[i].data = NULL;
    }
    return rc;
}

/* work directory next to the output (the encoded text can be large) */
static int make_work_dir(Prepare *p)
{
    if (snprintf(p->work, sizeof p->work, "%s.work.XXXXXX", p->o.out) >= (int)sizeof p->work || !mkdtemp(p->work)) {
        fprintf(stderr, "error: %s: cannot create a work directory next to it: %s\n", p->o.out, strerror(errno));
        p->work[0] = '\0';
        return 2;
    }
    return 0;
}

/* "--input=SRC,TGT[,SRC,TGT...]": both sides of every train file */
static char *spm_input_arg(const Prepare *p)
{
    size_t cap = 64;
    for (int i = 0; i < p->nf; i++) cap += strlen(p->o.args[i].src) + strlen(p->o.args[i].tgt) + 2;
    char *input = xmalloc(cap);
    input[0] = '\0';
    strcat(input, "--input=");
    int first = 1;
    for (int i = 0; i < p->nf; i++) {
        if (strcmp(p->o.args[i].name, "train")) continue;
        if (!first) strcat(input, ",");
        strcat(input, p->o.args[i].src);
        strcat(input, ",");
        strcat(input, p->o.args[i].tgt);
        first = 0;
    }
    return input;
}

/* provenance: the spm_train options, with the model prefix but not the
 * work path (av[2] is the prefix) */
static char *spm_provenance(char *const av[])
{
    size_t sl = 0;
    for (int k = 0; av[k]; k++) sl += strlen(av[k]) + 1;
    char *cmd = xmalloc(sl + 1);
    cmd[0] = '\0';
    for (int k = 0; av[k]; k++) {
        if (k == 2) { strcat(cmd, "--model_prefix=spm"); }
        else strcat(cmd, av[k]);
        if (av[k + 1]) strcat(cmd, " ");
    }
    return cmd;
}

static void report_spm_train_failure(const Prepare *p, const char *errf)
{
    char why[1024];
    spm_reason(errf, why, sizeof why);
    const char *tr = NULL;
    for (int i = 0; i < p->nf && !tr; i++) if (!strcmp(p->o.args[i].name, "train")) tr = p->o.args[i].src;
    if (strstr(why, "Vocabulary size"))
        fprintf(stderr, "error: %s (train split): vocab_size=%d cannot be supported by this corpus: %s\n", tr,
                p->cfg.vocab_size, why);
    else
        fprintf(stderr, "error: %s (train split): spm_train failed: %s\n", tr, why);
}

/* 2. shared BPE vocabulary from both sides of the training split */
static int learn_vocab(Prepare *p)
{
    const Config *cfg = &p->cfg;
    char *input = spm_input_arg(p);
    char prefix[4200], vs[64], cov[64], thr[64], sss[64], bf[64], seed[64], errf[4200];
    snprintf(prefix, sizeof prefix, "--model_prefix=%s/spm", p->work);
    snprintf(vs, sizeof vs, "--vocab_size=%d", cfg->vocab_size);
    snprintf(cov, sizeof cov, "--character_coverage=%g", p->o.coverage);
    snprintf(thr, sizeof thr, "--num_threads=%d", cfg->threads > 0 ? cfg->threads : p->o.jobs);
    snprintf(sss, sizeof sss, "--input_sentence_size=%lld", p->o.sentence_size);
    snprintf(bf, sizeof bf, "--byte_fallback=%s", p->o.byte_fallback ? "true" : "false");
    snprintf(seed, sizeof seed, "--random_seed=%u", (unsigned)(cfg->seed & 0xffffffffu));
    char *av[] = { "spm_train", input, prefix, vs, "--model_type=bpe", "--pad_id=0", "--bos_id=1",
                   "--eos_id=2", "--unk_id=3", cov, bf, sss, "--shuffle_input_sentence=true", seed, thr, NULL };
    p->spm_cmd = spm_provenance(av);
    snprintf(errf, sizeof errf, "%s/spm_train.log", p->work);
    double ts = now_seconds();
    pid_t pid = spawn(av, "/dev/null", errf, errf);
    int ok = pid > 0 && wait_ok(pid);
    free(input);
    if (pid <= 0) return 2;
    if (!ok) { report_spm_train_failure(p, errf); return 2; }
    printf("prepare: spm_train: %d BPE pieces in %.1fs\n", cfg->vocab_size, now_seconds() - ts);
    return 0;
}

/* 3. vocabulary pieces (spm.vocab: "piece\tscore", line = id) and model bytes */
static int read_vocab(Prepare *p)
{
    DatasetVocab *v = &p->dw.vocab;
    int vocab_size = p->cfg.vocab_size;
    char path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/spm.model", p->work);
    v->spm_model = (unsigned char *)slurp(path, &v->spm_model_len);
    snprintf(path, sizeof path, "%s/spm.vocab", p->work);
    char *voc = slurp(path, &len);
    if (!voc || !v->spm_model) { fprintf(stderr, "error: %s: spm_train wrote no model\n", path); free(voc); return 2; }
    v->pieces = xcalloc(vocab_size, sizeof(char *));
    int n = 0;
    for (char *s = voc, *e; *s && n < vocab_size; s = e + 1) {
        e = strchr(s, '\n');
        if (!e) e = s + strlen(s);
        char *tab = e;
        while (tab > s && *tab != '\t') tab--;
        v->pieces[n++] = strndup(s, (size_t)(tab > s || *s == '\t' ? tab - s : e - s));
        if (!*e) break;
    }
    free(voc);
    v->vocab_size = vocab_size;
    if (n != vocab_size || strcmp(v->pieces[TOK_PAD], "<pad>") || strcmp(v->pieces[TOK_UNK], "<unk>")) {
        fprintf(stderr, "error: %s: spm_train wrote %d pieces, expected %d with <pad>=0 <unk>=3\n", path, n,
                vocab_size);
        return 2;
    }
    return 0;
}

/* input file of spm_encode job k: the source (even k) or target (odd k) of --split k/2 */
static const char *encode_input(const Prepare *p, int k)
{
    return k % 2 ? p->o.args[k / 2].tgt : p->o.args[k / 2].src;
}

/* the text of input file k: the source (even k) or target (odd k) of --split k/2 */
static const TextFile *encode_text(const Prepare *p, int k)
{
    return k % 2 ? &p->tgt[k / 2] : &p->src[k / 2];
}

/* one spm_encode run: piece c (cut_text) of input file k, fed through a
 * pipe by a thread of ours (spm_encode reads its stdin to the end) */
typedef struct {
    int k, c;
    pid_t pid;
    pthread_t feeder;
    int fd_in, fd_pipe;    /* the input file and the pipe's write end: the feeder's */
    long long from, len;   /* the byte range of the piece */
    int err;               /* errno of a failed read or write (EPIPE: spm_encode stopped) */
} EncodeJob;

static void *feed_piece(void *arg)
{
    EncodeJob *j = arg;
    char buf[1 << 16];
    for (long long done = 0; done < j->len && !j->err;) {
        size_t want = j->len - done < (long long)sizeof buf ? (size_t)(j->len - done) : sizeof buf;
        ssize_t r = pread(j->fd_in, buf, want, (off_t)(j->from + done));
        if (r <= 0) { j->err = r < 0 ? errno : EIO; break; }
        for (ssize_t w = 0; w < r && !j->err;) {
            ssize_t x = write(j->fd_pipe, buf + w, (size_t)(r - w));
            if (x < 0 && errno != EINTR) j->err = errno;
            if (x > 0) w += x;
        }
        done += r;
    }
    close(j->fd_pipe);
    close(j->fd_in);
    return NULL;
}

/* spawn argv with stdin from fd (a pipe's read end) and stdout/stderr to files */
static pid_t spawn_piped(char *const argv[], int fd, const char *out, const char *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    return spawn_with(argv, &fa);
}

/* start spm_encode on piece j->c of file j->k into work/K.C.ids; 0 or -1 */
static int start_piece(const Prepare *p, EncodeJob *j, char *model)
{
    const TextFile *t = encode_text(p, j->k);
    const char *in = encode_input(p, j->k);
    char outp[4200], errp[4200];
    snprintf(outp, sizeof outp, "%s/%d.%d.ids", p->work, j->k, j->c);
    snprintf(errp, sizeof errp, "%s/%d.%d.log", p->work, j->k, j->c);
    j->from = t->cut[j->c];
    j->len = t->cut[j->c + 1] - j->from;
    int fds[2];
    j->fd_in = open(in, O_RDONLY | O_CLOEXEC);
    if (j->fd_in < 0 || pipe2(fds, O_CLOEXEC)) {
        fprintf(stderr, "error: %s: cannot open for spm_encode: %s\n", in, strerror(errno));
        if (j->fd_in >= 0) close(j->fd_in);
        return -1;
    }
    char *av[] = { "spm_encode", model, "--output_format=id", NULL };
    j->pid = spawn_piped(av, fds[0], outp, errp);
    close(fds[0]);
    j->fd_pipe = fds[1];
    if (j->pid <= 0 || pthread_create(&j->feeder, NULL, feed_piece, j)) {
        close(fds[1]); close(j->fd_in);
        if (j->pid > 0) wait_ok(j->pid);
        return -1;
    }
    return 0;
}

/* a piece's spm_encode exited with status st: join its feeder; 0 or 1 */
static int finish_piece(const Prepare *p, EncodeJob *j, int st)
{
    pthread_join(j->feeder, NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "error: %s: spm_encode failed (exit %d)\n", encode_input(p, j->k),
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 1;
    }
    if (j->err) {
        fprintf(stderr, "error: %s: feeding spm_encode failed: %s\n", encode_input(p, j->k), strerror(j->err));
        return 1;
    }
    return 0;
}

/* 4. encode every piece of every file (cut_text: --jobs pieces a file), up
 * to jobs spm_encode processes at a time, into work/K.C.ids */
static int encode_files(Prepare *p)
{
    double ts = now_seconds();
    char model[4200];
    snprintf(model, sizeof model, "--model=%s/spm.model", p->work);
    int n = 0, running = 0, next = 0, failed = 0;
    for (int k = 0; k < 2 * p->nf; k++) n += encode_text(p, k)->n_cut;
    EncodeJob *jobs = xcalloc(n ? n : 1, sizeof *jobs);
    for (int k = 0, q = 0; k < 2 * p->nf; k++)
        for (int c = 0; c < encode_text(p, k)->n_cut; c++, q++) { jobs[q].k = k; jobs[q].c = c; }
    struct sigaction ign = { .sa_handler = SIG_IGN }, old;
    sigaction(SIGPIPE, &ign, &old);   /* a dead spm_encode is an error, not our death */
    while (next < n || running > 0) {
        if (next < n && running < p->o.jobs && !failed) {
            if (start_piece(p, &jobs[next++], model)) failed = 1;
            else running++;
            continue;
        }
        if (running == 0) break;
        int st;
        pid_t w = wait(&st);
        if (w < 0) { if (errno == EINTR) continue; break; }
        for (int q = 0; q < next; q++)
            if (jobs[q].pid == w) {
                running--;
                failed |= finish_piece(p, &jobs[q], st);
            }
    }
    sigaction(SIGPIPE, &old, NULL);
    free(jobs);
    if (failed || next < n) return 2;
    printf("prepare: spm_encode: %d files in %d pieces in %.1fs\n", 2 * p->nf, n, now_seconds() - ts);
    return 0;
}

/* 5a. splits in order of first appearance, each with its files' provenance */
static void collect_splits(Prepare *p)
{
    DatasetWrite *dw = &p->dw;
    dw->splits = xcalloc(p->nf, sizeof(DatasetSplit));
    for (int i = 0; i < p->nf; i++) {
        const SplitArg *a = &p->o.args[i];
        DatasetSplit *s = NULL;
        for (int k = 0; k < dw->n_splits; k++) if (!strcmp(dw->splits[k].name, a->name)) s = &dw->splits[k];
        if (!s) {
            s = &dw->splits[dw->n_splits++];
            s->name = a->name;
            s->src = xcalloc(p->nf, sizeof(DatasetFile));
            s->tgt = xcalloc(p->nf, sizeof(DatasetFile));
        }
        s->src[s->n_files] = (DatasetFile){ a->src, (long long)p->src[i].len, p->src[i].lines, "" };
        s->tgt[s->n_files] = (DatasetFile){ a->tgt, (long long)p->tgt[i].len, p->tgt[i].lines, "" };
        memcpy(s->src[s->n_files].sha256, p->src[i].sha, 65);
        memcpy(s->tgt[s->n_files].sha256, p->tgt[i].sha, 65);
        s->n_files++;
    }
}

/* 5c. keep pair i if its source + EOS and BOS + target fit max_len
 * positions; dev/test splits keep every pair (train/eval skip overlong
 * ones) so that test sets stay complete for BLEU.  Compacts c in place. */
static int filter_pairs(const Prepare *p, DatasetSplit *s)
{
    Corpus *c = &s->corpus;
    int max_len = p->cfg.max_len;
    int filter = !strcmp(s->name, "train");
    long long over = 0, m = 0, ms = 0, mt = 0, n = c->n;
    int64_t *soff = c->src_off, *toff = c->tgt_off;
    for (long long i = 0; i < n; i++) {
        long long a = soff[i + 1] - soff[i], b = toff[i + 1] - toff[i];
        int fits = a + 1 <= max_len && b + 1 <= max_len;
        if (!fits) over++;
        if (filter && !fits) continue;
        if (c->src_tok16) {   /* the ids as the dataset stores them (load_split) */
            memmove(c->src_tok16 + ms, c->src_tok16 + soff[i], sizeof(uint16_t) * a);
            memmove(c->tgt_tok16 + mt, c->tgt_tok16 + toff[i], sizeof(uint16_t) * b);
        } else {
            memmove(c->src_tok + ms, c->src_tok + soff[i], sizeof(int32_t) * a);
            memmove(c->tgt_tok + mt, c->tgt_tok + toff[i], sizeof(int32_t) * b);
        }
        soff[m] = ms; toff[m] = mt;   /* safe: m <= i and soff[i] read above */
        ms += a; mt += b; m++;
    }
    soff[m] = ms; toff[m] = mt;
    c->n = (int)m;
    if (filter) s->n_dropped = over;
    printf("prepare: %-10s %8lld pairs, %9lld + %9lld tokens", s->name, m, ms, mt);
    if (filter) printf(", %lld dropped (longer than max_len=%d)\n", over, max_len);
    else printf(over ? ", %lld longer than max_len=%d (kept)\n" : "\n", over, max_len);
    if (filter && m == 0) {
        fprintf(stderr, "error: %s: no training pair fits max_len=%d\n", p->o.args[0].src, max_len);
        return 2;
    }
    return 0;
}

/* the ids of one spm_encode piece (work/K.C.ids), parsed apart */
typedef struct {
    int k, c;
    int64_t *off;          /* [n+1] from 0 */
    void *tok;             /* int32 or uint16 ids (parse_ids) */
    long long n, ntok, cap;
    int rc;
} PieceIds;

/* append piece q to one side's arrays (offsets shifted) and free it: the
 * arrays grow by realloc, so the pieces and the split are not held twice */
static void append_piece(PieceIds *q, size_t elem, int64_t **off, void **tok, long long *n, long long *ntok)
{
    *off = xrealloc(*off, sizeof(int64_t) * (*n + q->n + 1));
    for (long long i = 1; i <= q->n; i++) (*off)[*n + i] = *ntok + q->off[i];
    *tok = xrealloc(*tok, elem * (*ntok + q->ntok + 1));
    if (q->ntok) memcpy((char *)*tok + elem * *ntok, q->tok, elem * q->ntok);
    *n += q->n;
    *ntok += q->ntok;
    free(q->off); free(q->tok);
    q->off = NULL; q->tok = NULL;
}

/* the pieces of split s's files, sources before targets, in file order */
static PieceIds *split_pieces(const Prepare *p, const DatasetSplit *s, int *np)
{
    int n = 0;
    PieceIds *q = xcalloc(2 * p->nf * (p->o.jobs + 1), sizeof *q);
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < p->nf; i++) {
            if (strcmp(p->o.args[i].name, s->name)) continue;
            for (int c = 0; c < encode_text(p, 2 * i + side)->n_cut; c++) { q[n].k = 2 * i + side; q[n++].c = c; }
        }
    *np = n;
    return q;
}

/* 5b. one split's token ids from its files' spm_encode output (the pieces
 * parsed by --jobs threads at once, then joined in order), then filtered */
static int load_split(Prepare *p, DatasetSplit *s)
{
    int np, rc = 0;
    size_t elem = dataset_id_bits(p->cfg.vocab_size, p->o.id_bits) == 16 ? 2 : 4;
    PieceIds *q = split_pieces(p, s, &np);
    #pragma omp parallel for schedule(dynamic) num_threads(p->o.jobs)
    for (int j = 0; j < np; j++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%d.%d.ids", p->work, q[j].k, q[j].c);
        q[j].off = xcalloc(1, sizeof(int64_t));
        q[j].rc = parse_ids(path, encode_text(p, q[j].k)->cut_lines[q[j].c], p->cfg.vocab_size, &q[j].off, &q[j].tok,
                            elem, &q[j].n, &q[j].ntok, &q[j].cap);
    }
    int64_t *off[2] = { xcalloc(1, sizeof(int64_t)), xcalloc(1, sizeof(int64_t)) };
    void *tok[2] = { NULL, NULL };
    long long n[2] = { 0, 0 }, ntok[2] = { 0, 0 };
    for (int j = 0; j < np; j++) {
        if (!rc) rc = q[j].rc;
        if (!rc) append_piece(&q[j], elem, &off[q[j].k % 2], &tok[q[j].k % 2], &n[q[j].k % 2], &ntok[q[j].k % 2]);
        free(q[j].off); free(q[j].tok);
    }
    free(q);
    for (int i = 0; i < p->nf; i++) if (!strcmp(p->o.args[i].name, s->name)) s->n_lines += p->src[i].lines;
    if (!rc && n[0] > INT32_MAX) {
        fprintf(stderr, "error: %s: split '%s' has too many pairs\n", p->o.out, s->name);
        rc = 2;
    }
    if (rc) { free(off[0]); free(off[1]); free(tok[0]); free(tok[1]); return rc; }
    Corpus *c = &s->corpus;
    c->n = (int)n[0];
    c->src_off = off[0]; c->tgt_off = off[1];
    if (elem == 2) { c->src_tok16 = tok[0]; c->tgt_tok16 = tok[1]; }
    else { c->src_tok = tok[0]; c->tgt_tok = tok[1]; }
    return filter_pairs(p, s);
}

/* 5. build splits in order of first appearance; filter training pairs.
 * The stage holds every id at once: its own peak memory is printed (the
 * peak of the whole run is start-up's), for sizing a job's --mem and for
 * tests/test_data_parallel.sh's check of the --id-bits saving */
static int build_splits(Prepare *p)
{
    int measured = peak_rss_reset() == 0;
    collect_splits(p);
    int rc = 0;
    for (int k = 0; k < p->dw.n_splits && !rc; k++) rc = load_split(p, &p->dw.splits[k]);
    long kb = peak_rss_kb();
    if (!rc && measured && kb > 0)
        printf("prepare: building the splits peaked at %ld kB resident\n", kb);
    return rc;
}

/* 6. write the dataset (temp name + rename) with its provenance */
static int write_dataset(Prepare *p, int argc, char **argv, double t0)
{
    size_t cl = 1;
    for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 1;
    p->command = xmalloc(cl);
    p->command[0] = '\0';
    for (int i = 0; i < argc; i++) { strcat(p->command, argv[i]); if (i + 1 < argc) strcat(p->command, " "); }
    p->dw.spm_options = p->spm_cmd;
    p->dw.command = p->command;
    p->dw.max_len = p->cfg.max_len;
    p->dw.id_bits = p->o.id_bits;
    int rc = dataset_write(p->o.out, &p->dw);
    if (!rc)
        printf("prepare: wrote %s (vocab %d, %d-bit ids) in %.1fs\n", p->o.out, p->cfg.vocab_size,
               dataset_id_bits(p->cfg.vocab_size, p->o.id_bits), now_seconds() - t0);
    return rc;
}

/* The CPUs the allocation gives this process: Slurm's cpus-per-task (srun
 * -c), else the affinity mask (taskset, cgroups, a launcher's binding),
 * else the node's cores.  A login node or a job step must not get a worker
 * per core of the machine.  *from names the source, for the log. */
static int allocation_cpus(const char **from)
{
    const char *v = getenv("SLURM_CPUS_PER_TASK");
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (v && *end == '\0' && n > 0 && n < 1 << 20) {
        *from = "SLURM_CPUS_PER_TASK";
        return (int)n;
    }
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (!sched_getaffinity(0, sizeof allowed, &allowed) && CPU_COUNT(&allowed) > 0) {
        *from = "the CPUs this process may run on";
        return CPU_COUNT(&allowed);
    }
    *from = "the node's cores";
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 ? (int)cores : 1;
}

int cmd_prepare(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { prepare_help(); return 0; }
    double t0 = now_seconds();
    Prepare p = { .o = { .coverage = 1.0, .byte_fallback = 1, .jobs = 0 } };
    int rc = prepare_parse(&p, argc, argv);
    if (!rc && p.o.jobs <= 0) {
        const char *from;
        p.o.jobs = allocation_cpus(&from);
        printf("prepare: %d worker%s (%s; --jobs N to change)\n", p.o.jobs, p.o.jobs == 1 ? "" : "s", from);
    }
    if (!rc) rc = validate_inputs(&p);
    if (!rc) rc = make_work_dir(&p);
    if (!rc) rc = learn_vocab(&p);
    if (!rc) rc = read_vocab(&p);
    if (!rc) rc = encode_files(&p);
    if (!rc) rc = build_splits(&p);
    if (!rc) rc = write_dataset(&p, argc, argv, t0);
    prepare_cleanup(&p);
    return rc;
}
