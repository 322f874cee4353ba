/* `transformer heads`: head importance (Michel et al. 2019) and attention
 * statistics (Voita et al. 2019) of a checkpoint on a split, to HDF5
 * (docs/attention.md). */
#ifndef HEADS_H
#define HEADS_H

int cmd_heads(int argc, char **argv);

#endif
