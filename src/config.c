#include "config.h"
#include "head_mask.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { T_INT, T_FLOAT, T_U64, T_STR, T_TEXT, T_ENUM };   /* T_TEXT: char[CFG_TEXT]; T_ENUM: one of choices */

/* a key's class on resume (config_arch_mismatch, config_setting_changes):
 * ARCH must match the checkpoint; SAID may change, and the change is said;
 * FREE may change silently (the reasons are above config_setting_changes) */
enum { ARCH, SAID, FREE };

typedef struct {
    const char *key;
    int type;
    size_t off;
    double lo, hi;   /* accepted range for numbers */
    int resume;      /* ARCH, SAID or FREE: what a resume with another value does */
    const char *const *choices;   /* T_ENUM: the names of the values 0, 1, ..., NULL-terminated */
} KeyDesc;

/* the names of the enum keys' values, in the order of config.h's enums */
static const char *const POSITIONALS[] = { "sinusoid", "learned", NULL };
static const char *const DEVICES[] = { "cpu", "cuda", NULL };
static const char *const PRECISIONS[] = { "fp32", "tf32", "bf16", "fp16", NULL };
static const char *const ALLREDUCES[] = { "auto", "nccl", "mpi", NULL };
static const char *const LOSS_SCALES[] = { "auto", "dynamic", "off", NULL };
static const char *const TASKS[] = { "reverse", "copy", "sort", NULL };
static const char *const LR_DECAYS[] = { "rsqrt", "linear", "cosine", NULL };

#define K(name, type, lo, hi, resume) { #name, type, offsetof(Config, name), lo, hi, resume, NULL }
#define E(name, choices, resume) { #name, T_ENUM, offsetof(Config, name), 0, 0, resume, choices }
static const KeyDesc KEYS[] = {
    K(n_layers, T_INT, 1, 64, ARCH),
    K(d_model, T_INT, 1, 65536, ARCH),
    K(d_ff, T_INT, 1, 1 << 20, ARCH),
    K(n_heads, T_INT, 1, 1024, ARCH),
    K(d_k, T_INT, 1, 65536, ARCH),
    K(d_v, T_INT, 1, 65536, ARCH),
    K(vocab_size, T_INT, 5, 1 << 24, ARCH),
    K(max_len, T_INT, 2, 1 << 16, ARCH),
    E(positional, POSITIONALS, ARCH),
    K(ln_eps, T_FLOAT, 1e-12, 1, ARCH),
    K(dropout, T_FLOAT, 0, 0.99, SAID),
    K(label_smoothing, T_FLOAT, 0, 0.99, SAID),
    K(warmup, T_INT, 1, 1e9, SAID),
    K(lr_factor, T_FLOAT, 0, 1e6, SAID),   /* 0 with lr_peak 0 trains at rate 0: validate_schedule */
    K(lr_peak, T_FLOAT, 0, 1, SAID),   /* 0: eq. 3's peak (model_lrate) */
    E(lr_decay, LR_DECAYS, SAID),
    K(lr_final, T_FLOAT, 0, 1, SAID),
    K(adam_beta1, T_FLOAT, 0, 0.999999, SAID),
    K(adam_beta2, T_FLOAT, 0, 0.999999, SAID),
    K(adam_eps, T_FLOAT, 0, 1, SAID),
    K(seed, T_U64, 0, 0, SAID),
    K(train_steps, T_INT, 0, 1e9, SAID),   /* 0: no step, for --dump-params of the initial parameters */
    K(max_tokens, T_INT, 0, 1e8, SAID),   /* 0: from the device's free memory (auto_tokens.h) */
    K(logits_chunk, T_INT, 0, 1e8, FREE),   /* 0: from the vocabulary (model_logits_rows) */
    K(update_freq, T_INT, 1, 1e6, SAID),
    K(batch_tokens, T_INT, 0, 1e9, SAID),
    K(log_steps, T_INT, 1, 1e9, FREE),
    K(eval_steps, T_INT, 0, 1e9, FREE),
    K(patience, T_INT, 0, 1e6, FREE),
    K(patience_delta, T_FLOAT, 0, 100, FREE),
    K(keep_best, T_INT, 0, 1, FREE),
    K(threads, T_INT, 0, 4096, FREE),
    K(bucket_kb, T_INT, 1, 1 << 22, FREE),
    K(progress_us, T_INT, 0, 1e6, FREE),
    K(allreduce_timeout, T_INT, 0, 604800, FREE),
    E(device, DEVICES, FREE),
    E(precision, PRECISIONS, SAID),
    E(allreduce, ALLREDUCES, FREE),
    K(cuda_graphs, T_INT, 0, 1, FREE),
    K(cuda_graph_cache, T_INT, 1, 1 << 16, FREE),
    E(loss_scale, LOSS_SCALES, SAID),
    K(loss_scale_init, T_FLOAT, 1e-30, 1e30, FREE),
    K(loss_scale_window, T_INT, 1, 1e9, SAID),
    K(loss_scale_min, T_FLOAT, 0, 1e30, SAID),
    K(run_dir, T_STR, 0, 0, FREE),
    K(ckpt_steps, T_INT, 0, 1e9, FREE),
    K(ckpt_minutes, T_FLOAT, 0, 1e9, FREE),
    K(keep_ckpts, T_INT, 1, 1e6, FREE),
    K(lock_wait, T_INT, 0, 86400, FREE),
    K(attn_steps, T_INT, 0, 1e9, FREE),
    K(data, T_STR, 0, 0, SAID),
    E(task, TASKS, SAID),
    K(synth_vocab, T_INT, 2, 1 << 20, SAID),
    K(synth_min_len, T_INT, 1, 1 << 16, SAID),
    K(synth_max_len, T_INT, 1, 1 << 16, SAID),
    K(synth_train, T_INT, 1, 1e9, SAID),
    K(synth_dev, T_INT, 1, 1e9, SAID),
    K(beam, T_INT, 1, 1024, FREE),
    K(len_alpha, T_FLOAT, 0, 100, FREE),
    K(max_len_a, T_INT, 0, 1 << 16, FREE),
    K(paper_ppl, T_FLOAT, 0, 1e9, FREE),
    K(paper_bleu, T_FLOAT, 0, 100, FREE),
    K(paper_params_m, T_FLOAT, 0, 1e9, FREE),
    K(row, T_STR, 0, 0, FREE),
    K(mask_heads, T_TEXT, 0, 0, SAID),
};
#undef K
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))
_Static_assert(NKEYS <= CFG_MAX_KEYS, "raise CFG_MAX_KEYS in config.h");

/* the architecture and its regularisation (section 5.4) */
static void model_defaults(Config *c)
{
    /* a small model that learns the synthetic task on 2 cores in minutes */
    c->n_layers = 2;
    c->d_model = 64;
    c->d_ff = 256;
    c->n_heads = 4;
    c->d_k = 16;
    c->d_v = 16;
    c->vocab_size = 24;
    c->max_len = 64;
    c->positional = POSITIONAL_SINUSOID;
    c->ln_eps = 1e-6f;
    c->dropout = 0.1f;
    c->label_smoothing = 0.1f;
}

/* the optimiser, schedule and batches (section 5) */
static void training_defaults(Config *c)
{
    /* eq. 3 with the paper's factor but a short warmup: the default run
     * (reverse 4-12 random symbols) reaches dev greedy exact match 0.995,
     * ppl 1.085 in 2000 steps (about 7 minutes on one loaded core; the
     * paper's warmup of 4000 left it at 0.71 after 1000 steps).  Table 3
     * configs set warmup = 4000. */
    c->warmup = 200;
    c->lr_factor = 1.0f;
    c->lr_decay = LR_DECAY_RSQRT;   /* eq. 3 */
    c->adam_beta1 = 0.9f;
    c->adam_beta2 = 0.98f;
    c->adam_eps = 1e-9f;
    c->seed = 1;
    c->train_steps = 2000;
    c->max_tokens = 2048;
    c->update_freq = 1;
    c->log_steps = 100;
    c->eval_steps = 0;
}

/* threads, devices, communication, loss scaling */
static void runtime_defaults(Config *c)
{
    c->threads = 0;
    c->bucket_kb = 25600;   /* 25 MB: docs/scaling.md */
    c->progress_us = 200;
    c->allreduce_timeout = 600;   /* s: past any step, well before a time limit */
    c->device = DEVICE_CPU;
    c->precision = PRECISION_FP32;
    c->allreduce = ALLREDUCE_AUTO;
    /* a step graph per batch shape, a few MB of device memory each; 512
     * covers an epoch of Multi30k's shapes at 2000 tokens (docs/gpu-model.md) */
    c->cuda_graphs = 1;
    c->cuda_graph_cache = 512;
    /* dynamic loss scaling for precision=fp16 (loss_scale.h).  The loss is
     * summed over target tokens, not averaged, so the logits' gradient is
     * already O(1) per token; 2^10 leaves 2^6 of headroom below fp16's
     * 65504 for growth through the layers (the scaler finds the level) */
    c->loss_scale = LOSS_SCALE_AUTO;
    c->loss_scale_init = 1024.0f;
    c->loss_scale_window = 2000;
    c->loss_scale_min = 1e-4f;
}

/* checkpoints and what a run writes */
static void run_dir_defaults(Config *c)
{
    strcpy(c->run_dir, "");   /* empty: no checkpoints, no metrics log */
    c->ckpt_steps = 0;
    c->ckpt_minutes = 10.0f;
    c->keep_ckpts = 5;
    c->lock_wait = 300;   /* s: an NFS server releases a failed node's locks within minutes */
    c->attn_steps = 0;
}

/* the data and the beam search (section 6.1) */
static void data_and_decoding_defaults(Config *c)
{
    strcpy(c->data, DATA_SYNTHETIC);
    c->task = TASK_REVERSE;
    c->synth_vocab = 20;
    c->synth_min_len = 4;
    c->synth_max_len = 12;
    c->synth_train = 20000;
    c->synth_dev = 200;
    c->beam = 4;
    c->len_alpha = 0.6f;
    c->max_len_a = 50;
    strcpy(c->row, "");
}

void config_defaults(Config *c)
{
    memset(c, 0, sizeof *c);
    model_defaults(c);
    training_defaults(c);
    runtime_defaults(c);
    run_dir_defaults(c);
    data_and_decoding_defaults(c);
}

static const KeyDesc *find_key(const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].key, key) == 0) return &KEYS[i];
    return NULL;
}

/* edit distance of a and b, case-insensitive, counting a swap of two
 * adjacent characters as one edit (optimal string alignment, Damerau):
 * the usual typos d_modle, n_haeds are one edit away.  -1 when a string
 * is too long to compare. */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXL = 64 };
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la >= MAXL || lb >= MAXL) return -1;
    int d[MAXL][MAXL];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            char ca = (char)tolower((unsigned char)a[i - 1]), cb = (char)tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* the known key nearest to an unknown one, or NULL when none is within
 * max(2, length / 3) edits (further than that, a guess misleads) */
static const char *nearest_key(const char *key)
{
    int len = (int)strlen(key), limit = len / 3 > 2 ? len / 3 : 2, best = limit + 1;
    const char *near = NULL;
    for (int i = 0; i < NKEYS; i++) {
        int dist = edit_distance(key, KEYS[i].key);
        if (dist >= 0 && dist < best) { best = dist; near = KEYS[i].key; }
    }
    return near;
}

static void where(char *buf, size_t cap, const char *origin, int line)
{
    if (line > 0) snprintf(buf, cap, "%s:%d", origin, line);
    else snprintf(buf, cap, "%s", origin);
}

/* an enum key's value by its name, or one line naming the choices:
 * "key 'device': 'gpu' is not 'cpu' or 'cuda'" */
/* the index of name among k's choices, or -1 */
static int choice_index(const KeyDesc *k, const char *name)
{
    for (int i = 0; k->choices[i]; i++)
        if (!strcmp(k->choices[i], name)) return i;
    return -1;
}

static int set_choice(const KeyDesc *k, const char *at, const char *value, int *out)
{
    int v = choice_index(k, value);
    if (v >= 0) { *out = v; return 0; }
    fprintf(stderr, "error: %s: key '%s': '%s' is not ", at, k->key, value);
    for (int i = 0; k->choices[i]; i++)
        fprintf(stderr, "%s'%s'", i == 0 ? "" : !k->choices[i + 1] ? " or " : ", ", k->choices[i]);
    fputc('\n', stderr);
    return 2;
}

const char *config_choice(const char *key, int v)
{
    const KeyDesc *k = find_key(key);
    if (!k || k->type != T_ENUM || v < 0) return "?";
    for (int i = 0; k->choices[i]; i++)
        if (i == v) return k->choices[i];
    return "?";
}

int config_choice_value(const char *key, const char *name)
{
    const KeyDesc *k = find_key(key);
    return k && k->type == T_ENUM && name ? choice_index(k, name) : -1;
}

int config_set(Config *c, const char *origin, int line, const char *key, const char *value)
{
    char at[512];
    where(at, sizeof at, origin, line);
    const KeyDesc *k = find_key(key);
    if (!k) {
        const char *near = nearest_key(key);
        if (near) fprintf(stderr, "error: %s: unknown key '%s' (did you mean '%s'?)\n", at, key, near);
        else fprintf(stderr, "error: %s: unknown key '%s'\n", at, key);
        return 2;
    }
    c->key_line[k - KEYS] = line > 0 ? line : -1;
    if (line > 0) snprintf(c->config_file, CFG_STR, "%s", origin);
    char *p = (char *)c + k->off;
    if (k->type == T_ENUM) return set_choice(k, at, value, (int *)p);
    if (k->type == T_STR || k->type == T_TEXT) {
        int size = k->type == T_STR ? CFG_STR : CFG_TEXT;
        if (strlen(value) >= (size_t)size) {
            fprintf(stderr, "error: %s: key '%s': value longer than %d characters\n", at, key, size - 1);
            return 2;
        }
        strcpy(p, value);
        return 0;
    }
    if (*value == '\0') {
        fprintf(stderr, "error: %s: key '%s': empty value\n", at, key);
        return 2;
    }
    char *end;
    errno = 0;
    if (k->type == T_U64) {
        if (value[0] == '-') {
            fprintf(stderr, "error: %s: key '%s': '%s' is negative\n", at, key, value);
            return 2;
        }
        unsigned long long u = strtoull(value, &end, 10);
        if (*end || errno) {
            fprintf(stderr, "error: %s: key '%s': '%s' is not a non-negative integer\n", at, key, value);
            return 2;
        }
        *(uint64_t *)p = u;
        return 0;
    }
    double v = strtod(value, &end);
    if (*end || errno || !isfinite(v)) {
        fprintf(stderr, "error: %s: key '%s': '%s' is not a number\n", at, key, value);
        return 2;
    }
    if (k->type == T_INT && v != floor(v)) {
        fprintf(stderr, "error: %s: key '%s': '%s' is not an integer\n", at, key, value);
        return 2;
    }
    if (v < k->lo || v > k->hi) {
        fprintf(stderr, "error: %s: key '%s': %s is out of range [%g, %g]\n", at, key, value, k->lo, k->hi);
        return 2;
    }
    if (k->type == T_INT) *(int *)p = (int)v;
    else *(float *)p = (float)v;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

int config_load_file(Config *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "error: %s: cannot open config file: %s\n", path, strerror(errno));
        return 2;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "error: %s: is a directory, not a config file\n", path);
        fclose(f);
        return 2;
    }
    char buf[4096];
    int line = 0, rc = 0;
    while (!rc && (memset(buf, 0, sizeof buf), fgets(buf, sizeof buf, f))) {
        line++;
        /* a NUL byte ends the line early for the string functions below:
         * the bytes fgets stored reach past the string's end */
        const char *nl = memchr(buf, '\n', sizeof buf - 1);
        if ((nl && strlen(buf) < (size_t)(nl - buf)) || (!nl && strlen(buf) < sizeof buf - 1 && !feof(f))) {
            fprintf(stderr, "error: %s:%d: a NUL byte in the line (not a text file?)\n", path, line);
            rc = 2;
            break;
        }
        if (!nl && !feof(f)) {
            fprintf(stderr, "error: %s:%d: line longer than %zu characters\n", path, line, sizeof buf - 2);
            rc = 2;
            break;
        }
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        /* a UTF-8 byte order mark, as some editors write */
        char *s = trim(line == 1 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? buf + 3 : buf);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(stderr, "error: %s:%d: malformed line (expected key = value): '%s'\n", path, line, s);
            rc = 2;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (!*key) {
            fprintf(stderr, "error: %s:%d: malformed line (empty key)\n", path, line);
            rc = 2;
            break;
        }
        const KeyDesc *k = find_key(key);
        if (k && c->key_line[k - KEYS] > 0 && !strcmp(c->config_file, path)) {
            fprintf(stderr, "error: %s:%d: key '%s' set twice (first on line %d)\n", path, line, key,
                    c->key_line[k - KEYS]);
            rc = 2;
            break;
        }
        rc = config_set(c, path, line, key, val);
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "error: %s: read error: %s\n", path, strerror(errno));
        rc = 2;
    }
    fclose(f);
    return rc;
}

/* One-line error for an inconsistent setting, naming where `key` was set:
 * "file:line" (config file), "command line" (override) or just the origin
 * when the key kept its default. */
static int validate_error(const Config *c, const char *origin, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int validate_error(const Config *c, const char *origin, const char *key, const char *fmt, ...)
{
    const KeyDesc *k = find_key(key);
    int line = k ? c->key_line[k - KEYS] : 0;
    if (line > 0) fprintf(stderr, "error: %s:%d: ", c->config_file[0] ? c->config_file : origin, line);
    else if (line < 0) fprintf(stderr, "error: command line: ");
    else fprintf(stderr, "error: %s: ", origin);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

/* the learning-rate decay and early stopping (docs/training.md) */
static int validate_schedule(const Config *c, const char *origin)
{
#define FAIL(key, ...) return validate_error(c, origin, key, __VA_ARGS__)
    const char *decay = config_choice("lr_decay", c->lr_decay);
    /* eq. 3's peak, at step = warmup (model_lrate) */
    double peak = c->lr_peak > 0 ? c->lr_peak : c->lr_factor / sqrt((double)c->d_model) / sqrt((double)c->warmup);
    /* eq. 3 scaled by 0 trained every step at rate 0 (exit 0); with lr_peak
     * set, lr_factor is unused and 0 harmless */
    if (c->lr_factor == 0 && c->lr_peak == 0)
        FAIL("lr_factor", "key 'lr_factor': 0 scales eq. 3's rate to 0 (every step): give lr_factor > 0, or lr_peak");
    if (c->lr_decay == LR_DECAY_RSQRT && c->lr_final > 0)
        FAIL("lr_final", "key 'lr_final': %g needs lr_decay=linear or cosine (eq. 3's rsqrt decay has no final rate)", c->lr_final);
    if (c->lr_decay != LR_DECAY_RSQRT && c->train_steps <= c->warmup)
        FAIL("lr_decay", "key 'lr_decay': %s decays from warmup %d to train_steps %d: train_steps must be larger", decay,
             c->warmup, c->train_steps);
    if (c->lr_decay != LR_DECAY_RSQRT && c->lr_final > peak)
        FAIL("lr_final", "key 'lr_final': %g is above the peak rate %g (step = warmup)", c->lr_final, peak);
    if (c->patience > 0 && c->eval_steps == 0)
        FAIL("patience", "key 'patience': %d counts dev evaluations: it needs eval_steps > 0", c->patience);
    if (c->keep_best && c->eval_steps == 0)
        FAIL("keep_best", "key 'keep_best': the best dev evaluation needs eval_steps > 0");
    return 0;
#undef FAIL
}

int config_validate(const Config *c, const char *origin)
{
#define FAIL(key, ...) return validate_error(c, origin, key, __VA_ARGS__)
    /* the enum keys' values were checked when they were set (set_choice) */
    if (c->precision != PRECISION_FP32 && c->device != DEVICE_CUDA)
        FAIL("precision", "key 'precision': %s needs device=cuda (the CPU backend is fp32)",
             config_choice("precision", c->precision));
    if (c->loss_scale_min > c->loss_scale_init)
        FAIL("loss_scale_min", "key 'loss_scale_min': %g is above loss_scale_init %g", c->loss_scale_min, c->loss_scale_init);
    if (validate_schedule(c, origin)) return 2;
    if (c->d_model % 2)
        FAIL("d_model", "key 'd_model': %d must be even (sinusoids pair sin and cos dimensions)", c->d_model);
    if (!c->data[0]) FAIL("data", "key 'data': empty (a dataset file, or %s)", DATA_SYNTHETIC);
    if (!strcmp(c->data, DATA_SYNTHETIC)) {
        if (c->synth_min_len > c->synth_max_len)
            FAIL("synth_min_len", "key 'synth_min_len': %d is larger than synth_max_len %d", c->synth_min_len, c->synth_max_len);
        if (c->synth_vocab + 4 > c->vocab_size)
            FAIL("vocab_size", "key 'vocab_size': %d is smaller than synth_vocab + 4 = %d", c->vocab_size, c->synth_vocab + 4);
        if (c->synth_max_len + 1 > c->max_len)
            FAIL("max_len", "key 'max_len': %d cannot hold synth_max_len + 1 = %d positions", c->max_len, c->synth_max_len + 1);
    }
    char why[256];
    if (head_mask_parse(c->mask_heads, c->n_layers, c->n_heads, NULL, why, sizeof why))
        FAIL("mask_heads", "key 'mask_heads': %s", why);
    if (c->max_tokens == 0 && c->device != DEVICE_CUDA)
        FAIL("max_tokens", "key 'max_tokens': 0 (from free device memory) needs device=cuda; set max_tokens >= max_len %d "
             "for device=%s", c->max_len, config_choice("device", c->device));
    if (c->max_tokens != 0 && c->max_tokens < c->max_len)
        FAIL("max_tokens", "key 'max_tokens': %d is smaller than max_len %d: a longest sentence would not fit a batch", c->max_tokens, c->max_len);
    return 0;
#undef FAIL
}

int config_to_string(const Config *c, char *buf, int cap)
{
    int n = 0;
    for (int i = 0; i < NKEYS; i++) {
        const KeyDesc *k = &KEYS[i];
        const char *p = (const char *)c + k->off;
        int w;
        switch (k->type) {
        case T_INT: w = snprintf(buf + n, cap - n, "%s = %d\n", k->key, *(const int *)p); break;
        case T_FLOAT: w = snprintf(buf + n, cap - n, "%s = %.9g\n", k->key, *(const float *)p); break;
        case T_U64: w = snprintf(buf + n, cap - n, "%s = %llu\n", k->key, (unsigned long long)*(const uint64_t *)p); break;
        case T_ENUM: w = snprintf(buf + n, cap - n, "%s = %s\n", k->key, config_choice(k->key, *(const int *)p)); break;
        default: w = snprintf(buf + n, cap - n, "%s = %s\n", k->key, p); break;
        }
        if (w < 0 || w >= cap - n) return -1;
        n += w;
    }
    return n;
}

/* key k's value in c (strings quoted); floats exact (as config_to_string
 * writes them) or as read (%g: 0.1, not 0.100000001) */
static void key_value(const KeyDesc *k, const Config *c, int exact, char *buf, size_t cap)
{
    const char *p = (const char *)c + k->off;
    switch (k->type) {
    case T_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case T_FLOAT: snprintf(buf, cap, exact ? "%.9g" : "%g", *(const float *)p); break;
    case T_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case T_ENUM: snprintf(buf, cap, "%s", config_choice(k->key, *(const int *)p)); break;
    default: snprintf(buf, cap, strlen(p) > 100 ? "'%.100s...'" : "'%s'", p); break;
    }
}

/* k's values in a and b are the same: numbers as exactly as key_value
 * prints them, texts in full (not cut to key_value's 100 characters) */
static int key_equal(const KeyDesc *k, const Config *a, const Config *b)
{
    if (k->type == T_STR || k->type == T_TEXT) return !strcmp((const char *)a + k->off, (const char *)b + k->off);
    char va[128], vb[128];
    key_value(k, a, 1, va, sizeof va);
    key_value(k, b, 1, vb, sizeof vb);
    return !strcmp(va, vb);
}

int config_loss_scaling(const Config *c)
{
    return c->loss_scale == LOSS_SCALE_DYNAMIC || (c->loss_scale == LOSS_SCALE_AUTO && c->precision == PRECISION_FP16);
}

/* 1 if key k has no effect on a run of a or of b: the synthetic task's
 * keys with a dataset, the loss-scaling keys without loss scaling, eq. 3's
 * factor where lr_peak sets the rate, and train_steps on what the steps
 * compute unless a linear or cosine decay ends at it */
static int key_unused(const KeyDesc *k, const Config *a, const Config *b)
{
    if (!strcmp(k->key, "train_steps")) return a->lr_decay == LR_DECAY_RSQRT && b->lr_decay == LR_DECAY_RSQRT;
    if (!strncmp(k->key, "synth_", 6) || !strcmp(k->key, "task"))
        return strcmp(a->data, DATA_SYNTHETIC) && strcmp(b->data, DATA_SYNTHETIC);
    if (!strncmp(k->key, "loss_scale", 10)) return !config_loss_scaling(a) && !config_loss_scaling(b);
    if (!strcmp(k->key, "lr_factor")) return a->lr_peak > 0 && b->lr_peak > 0;
    return 0;
}

/* The FREE keys of KEYS, which a resumed run may change without a word:
 * they only lengthen or shorten the run (train_steps, unless a linear or
 * cosine decay ends at it; patience and patience_delta, the stopping
 * rule); say where and how often it logs, evaluates, probes and
 * checkpoints (log_steps, eval_steps, attn_steps, ckpt_steps,
 * ckpt_minutes, keep_ckpts, keep_best, lock_wait, run_dir); say how it
 * runs on the machine rather than what it computes (threads, bucket_kb,
 * progress_us, allreduce_timeout, allreduce, device, cuda_graphs,
 * cuda_graph_cache, logits_chunk; loss_scale_init, as the checkpoint
 * carries the scale reached); or serve other commands and reports (beam,
 * len_alpha, max_len_a for translate; row, paper_*).  Every other key
 * sets what the remaining steps compute (schedule, optimiser,
 * regularisation, batches, data, precision, head mask): mixing two
 * values in one run is said.  Architecture keys are refused apart
 * (config_arch_mismatch). */
int config_setting_changes(const Config *old, const Config *now, char *msg, int cap)
{
    int n = 0, len = 0;
    msg[0] = '\0';
    for (int i = 0; i < NKEYS; i++) {
        const KeyDesc *k = &KEYS[i];
        /* ARCH: refused apart (config_arch_mismatch) */
        if (k->resume != SAID || key_unused(k, old, now) || key_equal(k, old, now)) continue;
        char va[128], vb[128];
        key_value(k, old, 0, va, sizeof va);
        key_value(k, now, 0, vb, sizeof vb);
        int w = snprintf(msg + len, cap - len, "%s%s %s->%s", n ? ", " : "", k->key, va, vb);
        if (w > 0 && w < cap - len) len += w;
        n++;
    }
    return n;
}

int config_is_arch_key(const char *key)
{
    const KeyDesc *k = find_key(key);
    return k && k->resume == ARCH;
}

int config_arch_mismatch(const Config *a, const Config *b, char *msg, int cap)
{
    for (int i = 0; i < NKEYS; i++) {
        const KeyDesc *k = &KEYS[i];
        if (k->resume != ARCH) continue;
        const char *pa = (const char *)a + k->off, *pb = (const char *)b + k->off;
        int differ;
        char va[64], vb[64];
        switch (k->type) {
        case T_INT: differ = *(const int *)pa != *(const int *)pb;
            snprintf(va, 64, "%d", *(const int *)pa); snprintf(vb, 64, "%d", *(const int *)pb); break;
        case T_FLOAT: differ = *(const float *)pa != *(const float *)pb;
            snprintf(va, 64, "%g", *(const float *)pa); snprintf(vb, 64, "%g", *(const float *)pb); break;
        case T_STR: differ = strcmp(pa, pb) != 0;
            snprintf(va, 64, "%s", pa); snprintf(vb, 64, "%s", pb); break;
        case T_ENUM: differ = *(const int *)pa != *(const int *)pb;
            snprintf(va, 64, "%s", config_choice(k->key, *(const int *)pa));
            snprintf(vb, 64, "%s", config_choice(k->key, *(const int *)pb)); break;
        default: differ = 0; va[0] = vb[0] = 0;
        }
        if (differ) {
            snprintf(msg, cap, "architecture key '%s' differs: %s vs %s", k->key, va, vb);
            return 1;
        }
    }
    return 0;
}
