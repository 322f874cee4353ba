/* Run configuration: every hyperparameter of the paper's Table 3 and every
 * setting of a run is one key of this struct.  Files hold `key = value`
 * lines ('#' starts a comment); `key=value` words on the command line
 * override them.  Errors name the file, line and key and exit with code 2. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdint.h>

#define CFG_STR 256
#define CFG_TEXT 4096   /* long string keys (mask_heads) */
#define CFG_MAX_KEYS 128
/* the value of key data that names the synthetic task (corpus_is_synthetic) */
#define DATA_SYNTHETIC "synthetic"

/* Keys with a fixed set of choices: parsed once, by the key table
 * (config.c), into these; config_choice names them back. */
typedef enum { POSITIONAL_SINUSOID, POSITIONAL_LEARNED } Positional;
typedef enum { DEVICE_CPU, DEVICE_CUDA } Device;
typedef enum { PRECISION_FP32, PRECISION_TF32, PRECISION_BF16, PRECISION_FP16 } Precision;
typedef enum { ALLREDUCE_AUTO, ALLREDUCE_NCCL, ALLREDUCE_MPI } Allreduce;
typedef enum { LOSS_SCALE_AUTO, LOSS_SCALE_DYNAMIC, LOSS_SCALE_OFF } LossScaleMode;
typedef enum { TASK_REVERSE, TASK_COPY, TASK_SORT } Task;
/* after warmup: eq. 3's step^-0.5 (rsqrt), or a linear or cosine decay to
 * lr_final at train_steps (model_lrate) */
typedef enum { LR_DECAY_RSQRT, LR_DECAY_LINEAR, LR_DECAY_COSINE } LrDecay;

/* What the model and its checkpoint need: the architecture (Table 3
 * columns; must match on resume), the regularisation and optimisation its
 * training step applies (sections 5.3, 5.4) and its head gates.  A Model
 * holds these alone; the run's settings (devices, batches, files,
 * decoding) stay in Config.  One list, so that ModelConfig and Config's
 * first members are the same sequence. */
#define MODEL_CONFIG_FIELDS                                                                        \
    int n_layers;        /* N: encoder layers = decoder layers */                                  \
    int d_model;                                                                                    \
    int d_ff;                                                                                       \
    int n_heads;         /* h */                                                                    \
    int d_k;             /* independent of d_model/h (Table 3 row B) */                            \
    int d_v;                                                                                        \
    int vocab_size;      /* shared source/target vocabulary */                                     \
    int max_len;         /* maximum positions (tokens incl. BOS/EOS) */                            \
    Positional positional; /* sinusoid or learned (row E) */                                       \
    float ln_eps;                                                                                   \
    float dropout;       /* P_drop */                                                               \
    float label_smoothing; /* eps_ls */                                                             \
    int warmup;          /* warmup_steps */                                                         \
    float lr_factor;     /* multiplies the paper's lrate (1 = paper) */                            \
    float lr_peak;       /* > 0: eq. 3's shape with this peak rate at step = warmup, whatever      \
                          * d_model and lr_factor (0: off) */                                      \
    LrDecay lr_decay;    /* after warmup: rsqrt (eq. 3), linear or cosine */                        \
    float lr_final;      /* linear, cosine: the rate at step train_steps */                        \
    int train_steps;     /* steps of the run (linear, cosine: where the decay ends) */             \
    float adam_beta1, adam_beta2, adam_eps;                                                         \
    uint64_t seed;                                                                                  \
    int logits_chunk;    /* target tokens per chunk of the pre-softmax projection and              \
                          * cross-entropy (0: as many as keep its logits <= 2^27 elements) */      \
    char mask_heads[CFG_TEXT]; /* heads whose gate is 0 (head_mask.h): "enc:3:5,cross:0:*" */

typedef struct ModelConfig {
    MODEL_CONFIG_FIELDS
} ModelConfig;

typedef struct Config {
    union {
        ModelConfig model;   /* the same members, as one: what a Model is built from */
        struct {
            MODEL_CONFIG_FIELDS
        };
    };

    /* the run: training (train_steps is above: the schedule ends there) */
    int max_tokens;      /* per batch: source and target tokens, padding counted; 0 (device=cuda):
                          * from the device's free memory, resolved once (auto_tokens.h) */
    int update_freq;     /* micro-batches accumulated per update, per rank */
    int batch_tokens;    /* > 0: global batch target; sets update_freq from ranks x max_tokens */
    int log_steps;
    int eval_steps;      /* dev evaluation interval (0: only at the end) */
    int patience;        /* stop after this many dev evaluations without improvement (0: never) */
    float patience_delta; /* nats: an improvement lowers the best dev NLL by more than this */
    int keep_best;       /* 1: checkpoint the best dev evaluation and keep it (best.h5) */
    int threads;         /* OpenMP threads per rank (0: cores per rank) */
    int bucket_kb;       /* gradient allreduce bucket size */
    int progress_us;     /* MPI progress thread poll interval (0: none) */
    int allreduce_timeout; /* s a gradient allreduce may make no progress before the job ends (0: never) */
    Device device;           /* cpu or cuda */
    Precision precision;     /* fp32, tf32, bf16 or fp16 (the last three: cuda) */
    Allreduce allreduce;     /* cuda gradient sums: auto (NCCL if built with it, else MPI), nccl or mpi */
    int cuda_graphs;         /* 1: the cuda training step in CUDA Graphs (cuda/step_graph.cuh) */
    int cuda_graph_cache;    /* step shapes whose graphs are kept */
    LossScaleMode loss_scale; /* auto (dynamic for fp16, else off), dynamic or off */
    float loss_scale_init;   /* first loss scale S */
    int loss_scale_window;   /* good steps in a row after which S doubles */
    float loss_scale_min;    /* S below this stops the run */
    char run_dir[CFG_STR];
    int ckpt_steps;
    float ckpt_minutes;
    int lock_wait;       /* s to wait for a run-directory lock held by another host */
    int keep_ckpts;
    int attn_steps;

    /* data */
    char data[CFG_STR];  /* dataset HDF5 file, or DATA_SYNTHETIC */
    Task task;           /* synthetic task: reverse, copy or sort */
    int synth_vocab;     /* synthetic symbols (ids 4..synth_vocab+3) */
    int synth_min_len, synth_max_len;
    int synth_train;     /* synthetic training pairs */
    int synth_dev;

    /* decoding (section 6.1) */
    int beam;
    float len_alpha;
    int max_len_a;       /* max output length = input length + max_len_a */

    /* informational: the paper's Table 3 numbers for this row (0 = none) */
    float paper_ppl, paper_bleu, paper_params_m;
    char row[CFG_STR];   /* Table 3 row name, e.g. "base", "A1" */

    /* where each key was set, for error messages (not a key): line in
     * config_file (> 0), command line (-1) or default (0), by KEYS index */
    int key_line[CFG_MAX_KEYS];
    char config_file[CFG_STR];
} Config;

void config_defaults(Config *c);
/* Parse FILE into c (which already holds defaults).  Returns 0, or prints a
 * one-line error naming file, line and key and returns 2. */
int config_load_file(Config *c, const char *path);
/* Apply one "key=value" override (origin names where it came from). */
int config_set(Config *c, const char *origin, int line, const char *key, const char *value);
/* Cross-key consistency checks (one-line error, return 2). */
int config_validate(const Config *c, const char *origin);
/* Write all keys as "key = value" lines (checkpoints keep this text). */
int config_to_string(const Config *c, char *buf, int cap);
/* the name of choice v of the enum key (config_choice("device", DEVICE_CUDA)
 * is "cuda"); "?" for another key or value */
const char *config_choice(const char *key, int v);
/* the reverse: the value of choice name of the enum key
 * (config_choice_value("precision", "bf16") is PRECISION_BF16); -1 for
 * another key or name */
int config_choice_value(const char *key, const char *name);
/* 1 if key is an architecture key (must match on resume). */
int config_is_arch_key(const char *key);
/* Compare architecture keys; on mismatch write a message into msg and return 1. */
int config_arch_mismatch(const Config *a, const Config *b, char *msg, int cap);
/* The settings a run resumed from a checkpoint of config old changes in
 * now, other than architecture keys and those that only lengthen the run
 * or change its logging, checkpoints or machine use (config.c lists them
 * and says why): how many, and "key old->new, ..." in msg (KEYS order). */
int config_setting_changes(const Config *old, const Config *now, char *msg, int cap);
/* 1 if c trains with dynamic loss scaling (loss_scale.h): loss_scale =
 * dynamic, or auto in fp16 */
int config_loss_scaling(const Config *c);

#endif
