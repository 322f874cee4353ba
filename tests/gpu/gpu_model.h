/* The parts of bin/tests/gpu_model (tests/gpu/gpu_model.c) that its
 * other files share. */
#ifndef GPU_MODEL_H
#define GPU_MODEL_H

#include <stddef.h>

#include "../../cuda/cost.h"

/* the names of CostKind and TensorCore in a trace */
extern const char *const KIND[];
extern const char *const TC[];
/* the index of s in names[n], or -1 */
int lookup(const char *const *names, int n, const char *s);

/* a logged step as CSV (the columns of write_trace), and read back */
void write_trace(const char *path, const CostCall *calls, size_t n);
CostCall *read_trace(const char *path, size_t *n);

#endif
