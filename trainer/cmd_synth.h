/* cmd_synth.h -- `ddpdbg-train synth key=value ...`: writes the synthetic shapes dataset
 * (trainer/data/synth.h). argv holds the key=value arguments only (no command name). */
#ifndef TRAINER_CMD_SYNTH_H
#define TRAINER_CMD_SYNTH_H

// Exit status: 0 written, 2 bad arguments or an unwritable folder (one line on stderr).
int cmd_synth(int argc, char **argv);

#endif
