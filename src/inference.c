/* Opening a checkpoint for inference (inference.h). */
#include "inference.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "auto_tokens.h"
#include "cli.h"
#include "corpus.h"
#include "util.h"

/* translate and attention: the backend keys the command line gives, else the defaults */
static void backend_keys_from_defaults(Config *c)
{
    Config d;
    config_defaults(&d);
    c->device = d.device;
    c->precision = d.precision;
    c->allreduce = d.allreduce;
    c->threads = d.threads;
}

/* The device of this job, not of the checkpoint's training run nor the
 * defaults: a GPU where this build has CUDA and one is visible, else the
 * CPU (with fp32, the CPU backend's only precision).  device= on the
 * command line comes after and wins. */
static int gpus_of_this_job(Config *c)
{
    int gpus = backend_gpus_visible();
    c->device = gpus > 0 ? DEVICE_CUDA : DEVICE_CPU;
    if (!gpus) c->precision = PRECISION_FP32;
    return gpus;
}

/* key ("device=") is among the command line's key=value words */
static int on_command_line(const InferenceArgs *a, const char *key)
{
    for (int k = 0; k < a->n_over; k++)
        if (!strncmp(a->over[k], key, strlen(key))) return 1;
    return 0;
}

/* say where the command runs: on stdout, with the command's other reports
 * (its outputs go to files), so that an error later stays the one line
 * on stderr that a user or a script reads (issue 41: test_readers) */
static void say_device(const InferenceArgs *a, const Config *c, int gpus)
{
    const char *why = a->cpu_fp32 ? "this command computes on the CPU in fp32"
                      : on_command_line(a, "device=") ? "device= on the command line"
                      : gpus > 0 ? "a GPU is visible; device=cpu for the CPU"
                                 : "no GPU is visible to this build";
    printf("%s: device %s, precision %s (%s)\n", a->cmd, config_choice("device", c->device),
            config_choice("precision", c->precision), why);
}

int inference_read_config(const InferenceArgs *a, Config *c, CkptState *st, DatasetVocab *voc)
{
    int rc = checkpoint_read_config(a->ckpt, c, st);
    if (!rc && a->backend_from_command_line) backend_keys_from_defaults(c);
    int gpus = rc ? 0 : gpus_of_this_job(c);
    for (int k = 0; k < a->n_over && !rc; k++) rc = cli_set(c, a->cmd, a->over[k], a->ckpt);
    /* device=cpu given alone: the CPU's fp32, not a bf16 checkpoint's precision */
    if (!rc && c->device == DEVICE_CPU && !on_command_line(a, "precision=")) c->precision = PRECISION_FP32;
    if (!rc && a->cpu_fp32) {
        c->device = DEVICE_CPU;
        c->precision = PRECISION_FP32;
    }
    if (!rc && a->n_over) rc = config_validate(c, "command line");
    if (!rc) say_device(a, c, gpus);
    return rc ? rc : inference_check_vocab(a, c, st, voc);
}

/* an older checkpoint without the fingerprint, whose training data is at
 * hand: compare piece by piece */
static int same_pieces_as_training_data(const InferenceArgs *a, const Config *c, const DatasetVocab *voc)
{
    DatasetVocab tv;
    if (!c->data[0] || !strcmp(c->data, a->data) || access(c->data, R_OK) || dataset_load_vocab(c->data, &tv)) return 1;
    int same = tv.vocab_size == voc->vocab_size;
    for (int i = 0; same && i < tv.vocab_size; i++) same = !strcmp(tv.pieces[i], voc->pieces[i]);
    dataset_vocab_free(&tv);
    if (!same)
        fprintf(stderr, "error: %s: vocabulary differs from that of %s, the training data of checkpoint %s\n", a->data,
                c->data, a->ckpt);
    return same;
}

int inference_check_vocab(const InferenceArgs *a, const Config *c, const CkptState *st, DatasetVocab *voc)
{
    if (corpus_is_synthetic(a->data)) {
        if (corpus_is_synthetic(c->data)) return 0;
        fprintf(stderr, "error: %s: this checkpoint was trained on %s, not on the synthetic task\n", a->ckpt, c->data);
        return 2;
    }
    DatasetVocab own;
    if (!voc) voc = &own;
    if (dataset_load_vocab(a->data, voc)) return 2;
    int rc = 0;
    if (voc->vocab_size != c->vocab_size) {
        fprintf(stderr, "error: %s: dataset vocabulary has %d pieces but the model in %s has vocab_size %d\n", a->data,
                voc->vocab_size, a->ckpt, c->vocab_size);
        rc = 2;
    } else if (checkpoint_check_vocab(a->ckpt, st, a->data))
        rc = 2;
    else if (!st->vocab_hash && !same_pieces_as_training_data(a, c, voc))
        rc = 2;
    if (rc || voc == &own) dataset_vocab_free(voc);
    return rc;
}

int inference_open(const InferenceArgs *a, Dist *D, Config *c, Model *m, Backend **be)
{
    /* the rank's CPUs pinned as train's are; c->threads becomes the count */
    char cpus[160];   /* what train prints per rank; inference keeps it quiet */
    c->threads = dist_bind_cpu(D, c->threads, cpus, sizeof cpus);
    *be = backend_create(c, c->threads, D->local_rank);
    if (!*be) die(2, "rank %d: cannot create backend '%s'", D->rank, config_choice("device", c->device));
    Config stored;   /* the checkpoint's own, which c holds with the command line's settings */
    if (checkpoint_open_model(a->ckpt, &stored, NULL, m, *be)) return 2;
    if (model_mask_heads(m, c->mask_heads, "command line")) return 2;
    /* max_tokens = 0 given here: from the free device memory (auto_tokens.h) */
    if (a->auto_tokens && c->max_tokens == 0 && (c->max_tokens = auto_tokens_resolve(m, D)) <= 0) return 2;
    return 0;
}
