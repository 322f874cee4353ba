/* Logged steps as CSV (gpu_model --write-trace / --trace): one row per
 * call in issue order, the declared costs of cuda/cost.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_model.h"
#include "util.h"

/* ---------------------------------------------------------- CSV traces */

const char *const KIND[] = { "kernel", "gemm", "copy", "host", "sync", "comm" };
const char *const TC[] = { "none", "tf32", "16bit" };

int lookup(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return i;
    return -1;
}

void write_trace(const char *path, const CostCall *calls, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f) die(1, "%s: cannot write", path);
    fprintf(f, "op,call,kind,rd,wr,flop_tc,flop,tc,m,n,k,batch,operand,blocks,threads,inflight\n");
    for (size_t i = 0; i < n; i++) {
        const CostCall *c = &calls[i];
        fprintf(f, "%s,%s,%s,%.0f,%.0f,%.0f,%.0f,%s,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n", c->op, c->call,
                KIND[c->kind], c->rd, c->wr, c->flop_tc, c->flop, TC[c->tc], c->m, c->n, c->k, c->batch, c->operand,
                c->blocks, c->threads, c->inflight);
    }
    if (fclose(f)) die(1, "%s: write failed", path);
}

/* a trace written by write_trace */
CostCall *read_trace(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    if (!f) die(2, "%s: cannot open the trace", path);
    char line[1024];
    size_t cap = 1024, k = 0;
    CostCall *calls = xmalloc(sizeof(CostCall) * cap);
    for (int ln = 1; fgets(line, sizeof line, f); ln++) {
        if (ln == 1) continue;   /* header */
        char op[128], call[128], kind[16], tc[16];
        CostCall c = {0};
        int got = sscanf(line, "%127[^,],%127[^,],%15[^,],%lf,%lf,%lf,%lf,%15[^,],%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", op,
                         call, kind, &c.rd, &c.wr, &c.flop_tc, &c.flop, tc, &c.m, &c.n, &c.k, &c.batch, &c.operand,
                         &c.blocks, &c.threads, &c.inflight);
        int ki = lookup(KIND, COST_KINDS, kind), ti = lookup(TC, 3, tc);
        if (got != 16 || ki < 0 || ti < 0) die(2, "%s:%d: not a line of a cost trace (16 columns)", path, ln);
        c.kind = (CostKind)ki;
        c.tc = (TensorCore)ti;
        c.op = strdup(op);
        c.call = strdup(call);
        if (k == cap) calls = xrealloc(calls, sizeof(CostCall) * (cap *= 2));
        calls[k++] = c;
    }
    fclose(f);
    *n = k;
    return calls;
}
