/* cmd_train.h -- `ddpdbg-train train key=value ...`: single-process training (trainer/train.h)
 * with Ultralytics' argument names and defaults. argv holds the key=value arguments only. */
#ifndef TRAINER_CMD_TRAIN_H
#define TRAINER_CMD_TRAIN_H

// Exit status: 0 trained, 2 bad arguments or input (one line on stderr), 1 a loss term or the
// gradient norm became NaN or Inf (one line naming the iteration and the term).
int cmd_train(int argc, char **argv);

#endif
