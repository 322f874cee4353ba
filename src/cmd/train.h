/* `transformer train`: data-parallel training (section 5). */
#ifndef TRAIN_H
#define TRAIN_H

int cmd_train(int argc, char **argv);

#endif
