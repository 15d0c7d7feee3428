/* base.h -- the few helpers every layer may use: CHECK, DIE, LOG_*, xmalloc, CEIL_DIV.
 * Header-only, libc only. CHECK is for broken invariants (bugs): it aborts.
 * DIE is for fatal user-facing conditions: it prints and exits with the given status.
 * Not a logging framework: messages go to stderr, one line each. */
#ifndef KERNELS_BASE_H
#define KERNELS_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
