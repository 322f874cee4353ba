/* `transformer attention`: attention maps of chosen sentences of a
 * checkpoint to HDF5 (docs/attention.md). */
#ifndef CMD_ATTENTION_H
#define CMD_ATTENTION_H

int cmd_attention(int argc, char **argv);

#endif
