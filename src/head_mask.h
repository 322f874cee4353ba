/* Head gates and the mask_heads key (Michel, Levy and Neubig 2019, "Are
 * Sixteen Heads Really Better than One?", section 2: each head's output is
 * multiplied by a gate xi_h before W^O; xi_h = 0 masks the head).
 *
 * The gates of a model are one array of HEAD_KINDS * n_layers * n_heads
 * floats, kind-major: gate (kind, layer, head) is at
 * (kind * n_layers + layer) * n_heads + head. */
#ifndef HEAD_MASK_H
#define HEAD_MASK_H

#include <stddef.h>

enum { HEAD_ENC, HEAD_DEC_SELF, HEAD_CROSS, HEAD_KINDS };

/* "enc", "dec_self", "cross": the names of mask_heads and of the groups of
 * `transformer heads` output */
extern const char *const head_kind_name[HEAD_KINDS];

static inline size_t head_index(int kind, int layer, int head, int n_layers, int n_heads)
{
    return ((size_t)kind * n_layers + layer) * n_heads + head;
}

/* Parse a mask_heads value: comma-separated KIND:LAYER:HEADS entries, KIND
 * one of head_kind_name, LAYER a number or '*' (every layer), HEADS a
 * number, '*' (every head) or numbers joined by '+' (enc:3:0+2+5).  An empty
 * spec masks nothing.  With gates (HEAD_KINDS * n_layers * n_heads floats)
 * sets them to 1 and the masked ones to 0.  0, or -1 with a one-phrase
 * reason in err. */
int head_mask_parse(const char *spec, int n_layers, int n_heads, float *gates, char *err, size_t cap);

#endif
