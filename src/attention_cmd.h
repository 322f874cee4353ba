/* `transformer attention`: attention maps of chosen sentences of a
 * checkpoint to HDF5 (docs/attention.md). */
#ifndef ATTENTION_CMD_H
#define ATTENTION_CMD_H

int cmd_attention(int argc, char **argv);

#endif
