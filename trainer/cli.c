/* cli.c -- key=value argument parsing shared by the ddpdbg-train commands (see cli.h). */
#include "trainer/cli.h"

#include <errno.h>
#include <stdbool.h>

#include "kernels/base.h" // DIE

void cli_parse_keys(const char *cmd, int argc, char **argv, const KeyArg *keys, int n_keys) {
    bool given[64] = {false};
    CHECK(n_keys <= 64, "too many keys");
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) DIE(2, "ddpdbg-train %s: expected key=value, got '%s'", cmd, argv[i]);
        size_t len = (size_t)(eq - argv[i]);
        int k = 0;
        while (k < n_keys && (strlen(keys[k].key) != len || strncmp(keys[k].key, argv[i], len)))
            k++;
        if (k == n_keys) {
            char expected[512] = "";
            for (int j = 0; j < n_keys; j++)
                snprintf(expected + strlen(expected), sizeof expected - strlen(expected),
                         "%s%s=", j ? ", " : "", keys[j].key);
            DIE(2, "ddpdbg-train %s: unknown argument '%s' (expected %s)", cmd, argv[i], expected);
        }
        if (given[k]) DIE(2, "ddpdbg-train %s: '%s' given twice", cmd, keys[k].key);
        given[k] = true;
        *keys[k].value = eq + 1;
    }
}

long long cli_parse_int(const char *cmd, const char *key, const char *text, long long lo,
                        long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi)
        DIE(2, "ddpdbg-train %s: %s must be an integer in [%lld, %lld], got '%s'", cmd, key, lo, hi,
            text);
    return v;
}

double cli_parse_double(const char *cmd, const char *key, const char *text, double lo, double hi,
                        const char *what) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !(v >= lo && v <= hi))
        DIE(2, "ddpdbg-train %s: %s must be %s, got '%s'", cmd, key, what, text);
    return v;
}
