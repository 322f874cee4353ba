/* Training metrics appended to an HDF5 log, run_dir/metrics.h5 (format in
 * docs/metrics.md): one extendible 1-D dataset per column in /train (one row
 * per log interval), /dev (one row per evaluation) and, with loss scaling,
 * /loss_scale (one row per log interval).  Rows are buffered
 * and appended at every log interval; the file is closed after each append,
 * so a killed run leaves a readable log. */
#ifndef METRICS_H
#define METRICS_H

typedef struct Metrics Metrics;

/* open (creating if absent) run_dir/metrics.h5; rows with step > keep_upto
 * (logged after the checkpoint a run resumes from) are dropped. */
Metrics *metrics_open(const char *run_dir, long keep_upto);
/* tokens: the target tokens (all ranks) of the log interval ending at step */
void metrics_train(Metrics *m, long step, double loss, double lr, double tokens, double tokens_per_s, double elapsed);
void metrics_dev(Metrics *m, long step, double loss, double ppl, long tokens, double elapsed);
/* with loss scaling (loss_scale.h): the scale S at a logged step and the
 * steps skipped so far; group /loss_scale, created with its first row */
void metrics_loss_scale(Metrics *m, long step, double scale, long skipped);
/* how the run ended, as attributes of the log's root group (docs/metrics.md):
 * stopped_by ("patience" or "train_steps"), stop_step, and with a dev
 * evaluation best_step and best_dev_nll (best_step 0: none).  Written with
 * the next flush; a run that resumes (metrics_open) removes them. */
void metrics_end(Metrics *m, const char *stopped_by, long stop_step, long best_step, double best_nll);
/* append buffered rows; if block is 0 and a checkpoint write holds the HDF5
 * lock, keep them for the next flush instead of waiting */
void metrics_flush(Metrics *m, int block);
void metrics_close(Metrics *m);

#endif
