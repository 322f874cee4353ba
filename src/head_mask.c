#include "head_mask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const head_kind_name[HEAD_KINDS] = { "enc", "dec_self", "cross" };

/* "*" (-1), or a number in [0, n); -2 if neither */
static int parse_index(const char *s, int n)
{
    if (!strcmp(s, "*")) return -1;
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 6) return -2;
    int v = atoi(s);
    return v < n ? v : -2;
}

static void mask(float *gates, int kind, int layer, int head, int n_layers, int n_heads)
{
    if (!gates) return;
    for (int l = layer < 0 ? 0 : layer; l < (layer < 0 ? n_layers : layer + 1); l++)
        for (int h = head < 0 ? 0 : head; h < (head < 0 ? n_heads : head + 1); h++)
            gates[head_index(kind, l, h, n_layers, n_heads)] = 0.0f;
}

/* one KIND:LAYER:HEADS entry (modified in place) */
static int parse_entry(char *e, int n_layers, int n_heads, float *gates, char *err, size_t cap)
{
    char *c1 = strchr(e, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || strchr(c2 + 1, ':')) {
        snprintf(err, cap, "'%s' is not KIND:LAYER:HEAD", e);
        return -1;
    }
    *c1 = *c2 = '\0';
    int kind = -1;
    for (int k = 0; k < HEAD_KINDS; k++)
        if (!strcmp(e, head_kind_name[k])) kind = k;
    if (kind < 0) {
        snprintf(err, cap, "kind '%s' is not enc, dec_self or cross", e);
        return -1;
    }
    int layer = parse_index(c1 + 1, n_layers);
    if (layer == -2) {
        snprintf(err, cap, "%s: layer '%s' is not '*' or in 0..%d", e, c1 + 1, n_layers - 1);
        return -1;
    }
    for (char *h = c2 + 1, *next; h; h = next) {
        next = strchr(h, '+');
        if (next) *next++ = '\0';
        int head = parse_index(h, n_heads);
        if (head == -2) {
            snprintf(err, cap, "%s:%s: head '%s' is not '*' or in 0..%d", e, c1 + 1, h, n_heads - 1);
            return -1;
        }
        mask(gates, kind, layer, head, n_layers, n_heads);
    }
    return 0;
}

int head_mask_parse(const char *spec, int n_layers, int n_heads, float *gates, char *err, size_t cap)
{
    if (gates)
        for (size_t i = 0; i < (size_t)HEAD_KINDS * n_layers * n_heads; i++) gates[i] = 1.0f;
    char *copy = strdup(spec), *save = NULL;
    int rc = 0;
    if (!copy) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    if (*copy && (copy[0] == ',' || copy[strlen(copy) - 1] == ',' || strstr(copy, ",,"))) {
        snprintf(err, cap, "empty entry in '%s'", spec);
        rc = -1;
    }
    for (char *e = rc ? NULL : strtok_r(copy, ",", &save); e && !rc; e = strtok_r(NULL, ",", &save))
        rc = parse_entry(e, n_layers, n_heads, gates, err, cap);
    free(copy);
    return rc;
}
