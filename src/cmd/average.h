/* `transformer average`: the parameters of checkpoints averaged into one
 * (section 6.1). */
#ifndef AVERAGE_H
#define AVERAGE_H

int cmd_average(int argc, char **argv);

#endif
