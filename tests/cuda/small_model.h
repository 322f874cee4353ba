/* The small model the emulated-CUDA tests run (test_cuda_step,
 * test_cuda_costs): 2 layers, d_k != d_v != d_model/h and odd widths, so
 * that rows of 16-bit activations start at every alignment and the packed
 * kernels take their scalar heads and tails too. */
#ifndef SMALL_MODEL_H
#define SMALL_MODEL_H

#include "config.h"

static inline void small_model_config(Config *c)
{
    config_defaults(c);
    c->n_layers = 2;
    c->d_model = 36;
    c->d_ff = 50;
    c->n_heads = 3;
    c->d_k = 7;
    c->d_v = 11;
    c->max_len = 16;
    c->dropout = 0.1f;
    c->label_smoothing = 0.1f;
    c->seed = 1234;
}

#endif
