/* The state of a run and the evaluation of a corpus (run.h). */
#include "run.h"

#include <math.h>

EvalStats evaluate(TrainRun *r, const Corpus *c)
{
    BatchPlan bp;
    double sums[3] = {0, 0, 0}, tot[3];
    if (batchplan_build(&bp, c, r->cfg.max_tokens, r->cfg.max_len, r->cfg.seed) == 0) {
        Batch b = {0};
        for (int k = r->dist.rank; k < bp.n_batches; k += r->dist.size) {
            batch_build(&b, c, bp.idx + bp.start[k], bp.start[k + 1] - bp.start[k], r->cfg.max_len);
            LossStats st = model_forward_backward(&r->model, &b, 0, 0, 0, NULL, NULL);
            sums[0] += st.loss_sum; sums[1] += st.nll_sum; sums[2] += st.n_tokens;
        }
        batch_free(&b);
        batchplan_free(&bp);
    }
    MPI_Allreduce(sums, tot, 3, MPI_DOUBLE, MPI_SUM, r->dist.comm);
    EvalStats e = { 0, 0, 0, (long)tot[2] };
    e.loss_ls = tot[2] > 0 ? tot[0] / tot[2] : 0.0;
    e.nll = tot[2] > 0 ? tot[1] / tot[2] : 0.0;
    /* per-wordpiece perplexity from the unsmoothed NLL (Table 3, PPL) */
    e.ppl = tot[2] > 0 ? exp(e.nll) : 0.0;
    return e;
}
