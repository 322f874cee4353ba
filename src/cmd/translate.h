#ifndef TRANSLATE_H
#define TRANSLATE_H

/* `transformer translate`: beam search over a dataset split or raw text */
int cmd_translate(int argc, char **argv);

#endif
