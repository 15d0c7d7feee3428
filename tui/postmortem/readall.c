/* readall.c -- read_all (readall.h). */
#include "tui/postmortem/readall.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/base.h" // xmalloc, xrealloc

int read_all(const char *path, size_t max, uint8_t **data, size_t *len, char *err, size_t errlen) {
    int is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", name, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory, expected a file", name);
        if (!is_stdin) fclose(f);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = xmalloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > max) {
            snprintf(err, errlen, "%s: more than %zu bytes; this reader takes up to %zu", name, max,
                     max);
            goto fail;
        }
        if (got == 0) break;
        if (n == cap) buf = xrealloc(buf, (cap *= 2) + 1);
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", name, strerror(errno));
        goto fail;
    }
    if (!is_stdin) fclose(f);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
fail:
    if (!is_stdin) fclose(f);
    free(buf);
    return -1;
}
