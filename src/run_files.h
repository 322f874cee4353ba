/* The files training keeps in a run directory besides its checkpoints
 * (ckpt_<step>.h5, checkpoint.h): one name each, for the code that writes
 * them and for checkpoint_check_run_output, which refuses them as any
 * command's output. */
#ifndef RUN_FILES_H
#define RUN_FILES_H

#define RUN_FILE_BEST "best.h5"              /* the best dev checkpoint (checkpoint.c) */
#define RUN_FILE_METRICS "metrics.h5"        /* the training log (metrics.c) */
#define RUN_FILE_PROBE "attention_probe.h5"  /* attention during training (attention_maps.c) */
#define RUN_FILE_LOCK ".lock"                /* one run a directory (resume.c) */

#endif
