/* cmd_dump.h -- `ddpdbg-train dump key=value ...`: one training step's weights, batch,
 * denoising noise, loss terms and gradients, written for another implementation to repeat
 * (trainer/cmd_dump.c has the file layout). argv holds the key=value arguments only. */
#ifndef TRAINER_CMD_DUMP_H
#define TRAINER_CMD_DUMP_H

// Exit status: 0 written, 2 bad arguments, input or an unwritable folder (one line on stderr).
int cmd_dump(int argc, char **argv);

#endif
