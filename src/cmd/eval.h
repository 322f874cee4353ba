/* `transformer eval`: dev/test loss and per-wordpiece perplexity of a
 * checkpoint on a dataset split (Table 3, PPL column). */
#ifndef EVAL_H
#define EVAL_H

int cmd_eval(int argc, char **argv);

#endif
