/* cli.h -- the key=value command-line conventions every ddpdbg-train command shares
 * (Ultralytics style: `train model=rtdetr-l.yaml imgsz=640`). Every problem is one line on
 * stderr naming the command, the key and the bad text, and exit status 2. */
#ifndef TRAINER_CLI_H
#define TRAINER_CLI_H

// One accepted key; *value receives the text after '=' (left as it was when not given, so a
// caller may preset a default).
typedef struct KeyArg {
    const char *key;
    const char **value;
} KeyArg;

// Matches every argv entry against keys. A missing '=', an unknown or a repeated key is fatal;
// the unknown-key message lists every accepted key.
void cli_parse_keys(const char *cmd, int argc, char **argv, const KeyArg *keys, int n_keys);

// A decimal integer in [lo, hi], else fatal: "<cmd>: <key> must be an integer in [lo, hi]".
long long cli_parse_int(const char *cmd, const char *key, const char *text, long long lo,
                        long long hi);

// A number in [lo, hi] (strtod syntax), else fatal naming `what` (e.g. "a fraction in [0, 1]").
double cli_parse_double(const char *cmd, const char *key, const char *text, double lo, double hi,
                        const char *what);

#endif
