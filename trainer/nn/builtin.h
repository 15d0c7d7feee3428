/* builtin.h -- the model yaml files compiled into the binary (trainer/models/<name>.yaml, embedded
 * by trainer/models/embed.sh at build time). */
#ifndef TRAINER_NN_BUILTIN_H
#define TRAINER_NN_BUILTIN_H

typedef struct BuiltinFile {
    const char *name; // file name, e.g. "rtdetr-l.yaml"
    const char *text; // its whole content
} BuiltinFile;

extern const BuiltinFile builtin_models[];
extern const int n_builtin_models;

#endif
