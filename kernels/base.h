/* base.h -- the few helpers every layer may use: CHECK, DIE, LOG_*, xmalloc, xvasprintf,
 * CEIL_DIV, mkdir_p.
 * Header-only, libc only. CHECK is for broken invariants (bugs): it aborts.
 * DIE is for fatal user-facing conditions: it prints and exits with the given status.
 * Not a logging framework: messages go to stderr, one line each. */
#ifndef KERNELS_BASE_H
#define KERNELS_BASE_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// Always on. Prints "file:line: CHECK(cond) failed: message" and aborts (core dump, backtrace).
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

// Prints one line (plus the caller's own HINT line if it wants one) and exits with `status`
// (1 runtime error, 2 bad input / usage). No core dump: the user did nothing wrong to the code.
#define DIE(status, ...)                                                                           \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(status);                                                                              \
    } while (0)

#define LOG_INFO(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))
#define LOG_WARN(...) (fprintf(stderr, "warning: " __VA_ARGS__), fputc('\n', stderr))
#define LOG_ERROR(...) (fprintf(stderr, "error: " __VA_ARGS__), fputc('\n', stderr))

// Host allocation failure is fatal and names the size. Zero-byte requests are a bug.
static inline void *xmalloc(size_t n) {
    CHECK(n > 0, "xmalloc(0)");
    void *p = malloc(n);
    if (!p) DIE(1, "out of memory allocating %zu bytes", n);
    return p;
}

static inline void *xcalloc(size_t count, size_t size) {
    CHECK(count > 0 && size > 0, "xcalloc(%zu, %zu)", count, size);
    void *p = calloc(count, size);
    if (!p) DIE(1, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

static inline void *xrealloc(void *old, size_t n) {
    CHECK(n > 0, "xrealloc(.., 0)");
    void *p = realloc(old, n);
    if (!p) DIE(1, "out of memory reallocating to %zu bytes", n);
    return p;
}

static inline char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = (char *)xmalloc(n);
    memcpy(p, s, n);
    return p;
}

// The formatted text in a fresh malloc'd string (vasprintf; the build defines _GNU_SOURCE).
static inline char *xvasprintf(const char *fmt, va_list ap) {
    char *p = NULL;
    if (vasprintf(&p, fmt, ap) < 0) DIE(1, "out of memory formatting '%s'", fmt);
    return p;
}

// mkdir -p, mode 0777 (the umask decides). Returns 0, or the errno of the first component that
// failed (ENOTDIR when it exists and is not a folder, ENAMETOOLONG for a path over 4 KiB,
// ENOENT for ""), and
// that component's path in failed[0..len) when failed is not NULL.
static inline int mkdir_p(const char *path, char *failed, size_t len) {
    char buf[4096];
    if (!path[0]) return ENOENT;
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return ENAMETOOLONG;
    for (char *p = buf + 1;; p++) {
        int end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        struct stat st;
        int e = mkdir(buf, 0777) != 0 && errno != EEXIST ? errno : 0;
        if (!e && (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))) e = ENOTDIR;
        if (e) {
            if (failed && len) snprintf(failed, len, "%s", buf);
            return e;
        }
        if (end) return 0;
        *p = '/';
    }
}

#endif
