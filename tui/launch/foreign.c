/* foreign.c -- rank programs other than ddpdbg-train (foreign.h). */
#include "tui/launch/foreign.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Where this build's Python package and probe library are: compiled in by the Makefile
// (absolute paths in the source tree), overridable by the environment.
#ifndef DDPDBG_PYTHON_DIR
#define DDPDBG_PYTHON_DIR "python"
#endif
#ifndef DDPDBG_PROBE_LIB
#define DDPDBG_PROBE_LIB "build/cpu/lib/libddpdbg_probe.so"
#endif

static const char *setting(const char *env, const char *built_in) {
    const char *v = getenv(env);
    return v && *v ? v : built_in;
}

bool foreign_is_trainer_command(const char *arg0) {
    static const char *const commands[] = {"train", "synth", "params", "dump", "help", "--help",
                                           "-h", NULL};
    for (const char *const *c = commands; *c; c++)
        if (!strcmp(arg0, *c)) return true;
    return strchr(arg0, '=') != NULL;
}

// Looks name up as execvp would: a name with a '/' as is, else each folder of PATH.
static int find_program(const char *name, char *out, size_t size) {
    if (strchr(name, '/')) {
        if (snprintf(out, size, "%s", name) >= (int)size) return -1;
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (snprintf(out, size, "%.*s%s%s", (int)len, len ? p : ".", "/", name) < (int)size &&
            access(out, X_OK) == 0)
            return 0;
        if (!colon) break;
        p = colon + 1;
    }
    return -1;
}

// The interpreter named by a #! line of the file at path, into out ("" when none).
static void shebang(const char *path, char *out, size_t size) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    if (fgets(line, sizeof line, f) && !strncmp(line, "#!", 2)) {
        char *s = line + 2;
        s += strspn(s, " \t");
        size_t n = strcspn(s, " \t\r\n");
        // "#!/usr/bin/env python3": the interpreter is the word after env
        if (n >= 4 && !strncmp(s + n - 4, "/env", 4)) {
            s += n;
            s += strspn(s, " \t");
            n = strcspn(s, " \t\r\n");
        }
        snprintf(out, size, "%.*s", (int)n, s);
    }
    fclose(f);
}

int foreign_program(int *argc, char ***argv, char *program, size_t size, TorchrunArgs *torchrun) {
    int rewritten = 0;
    char torchrun_path[PATH_MAX], python[PATH_MAX] = "";
    if (*argc > 0 && !strcmp(strrchr((*argv)[0], '/') ? strrchr((*argv)[0], '/') + 1 : (*argv)[0],
                             "torchrun") &&
        find_program((*argv)[0], torchrun_path, sizeof torchrun_path) == 0)
        shebang(torchrun_path, python, sizeof python); // the python torchrun itself would run
    int r = torchrun_rewrite(*argc, *argv, python, torchrun);
    if (r == 2) return 2;
    if (r == 1) {
        *argc = torchrun->argc;
        *argv = torchrun->argv;
        rewritten = 1;
    }
    if (find_program((*argv)[0], program, size) != 0) {
        fprintf(stderr, "ddpdbg run: %s: no such program (in PATH or as a path)\n", (*argv)[0]);
        return 2;
    }
    (*argc)--, (*argv)++; // the launcher passes program + the rest
    return rewritten;
}

static bool named_python(const char *path) {
    const char *b = strrchr(path, '/');
    return !strncmp(b ? b + 1 : path, "python", 6);
}

// PYTHONPATH with dir first.
static void prepend_pythonpath(const char *dir) {
    const char *old = getenv("PYTHONPATH");
    size_t n = strlen(dir) + (old ? strlen(old) : 0) + 2;
    char *value = malloc(n);
    if (!value) return;
    snprintf(value, n, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", value, 1);
    free(value);
}

bool foreign_python_environment(const char *program) {
    char interpreter[PATH_MAX];
    shebang(program, interpreter, sizeof interpreter);
    if (!named_python(program) && !named_python(interpreter)) {
        fprintf(stderr, "ddpdbg run: %s is not a Python program: its ranks run untraced (ddpdbg "
                        "traces PyTorch jobs and ddpdbg-train)\n", program);
        return false;
    }
    prepend_pythonpath(setting("DDPDBG_PYTHON_DIR", DDPDBG_PYTHON_DIR));
    setenv("DDPDBG_PROBE_LIB", setting("DDPDBG_PROBE_LIB", DDPDBG_PROBE_LIB), 1);
    return true;
}

// Prints 'value' as a single-quoted shell word.
static void shell_word(const char *value) {
    putchar('\'');
    for (const char *c = value; *c; c++)
        if (*c == '\'') fputs("'\\''", stdout);
        else putchar(*c);
    putchar('\'');
}

int env_command(int argc, char **argv) {
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ddpdbg env --trace DIR\n"
                   "prints the shell exports that make the Python ranks of a job started by\n"
                   "another launcher (torchrun, srun, a cluster scheduler, several nodes) trace\n"
                   "themselves into DIR/rank<R>.db; then: ddpdbg report DIR\n"
                   "example: eval \"$(ddpdbg env --trace runs/t1)\"; torchrun --nproc-per-node 2 "
                   "train.py\n");
            return 0;
        }
        if (!strcmp(argv[i], "--trace") && i + 1 < argc) dir = argv[++i];
        else if (!strncmp(argv[i], "--trace=", 8)) dir = argv[i] + 8;
        else {
            fprintf(stderr, "ddpdbg env: unexpected '%s' (expected --trace DIR)\n", argv[i]);
            return 2;
        }
    }
    if (!dir || !*dir) {
        fprintf(stderr, "ddpdbg env: missing --trace DIR (where the ranks write rank<R>.db)\n");
        return 2;
    }
    char cwd[PATH_MAX], abs_dir[2 * PATH_MAX + 2];
    if (dir[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(abs_dir, sizeof abs_dir, "%s/%s", cwd, dir);
    else
        snprintf(abs_dir, sizeof abs_dir, "%s", dir);
    const char *python_dir = setting("DDPDBG_PYTHON_DIR", DDPDBG_PYTHON_DIR);
    fputs("export DDPDBG_TRACE_DIR=", stdout);
    shell_word(abs_dir);
    fputs("\nexport DDPDBG_PROBE_LIB=", stdout);
    shell_word(setting("DDPDBG_PROBE_LIB", DDPDBG_PROBE_LIB));
    fputs("\nexport PYTHONPATH=", stdout);
    shell_word(python_dir);
    fputs("\"${PYTHONPATH:+:$PYTHONPATH}\"\n", stdout);
    return 0;
}
