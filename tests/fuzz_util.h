/* fuzz_util.h -- what the libFuzzer targets (tests/fuzz_<name>.c, built and run by `make
 * fuzz`) share: a private scratch folder for the inputs that the code under test reads from a
 * file, and FUZZ_CHECK for a broken contract (it aborts, so libFuzzer keeps the input that
 * broke it in build/fuzz/crash/<name>/). Header-only: a target is its own file plus the
 * sources it tests, compiled by clang with ASan and UBSan; nothing of the trainer's library. */
#ifndef TESTS_FUZZ_UTIL_H
#define TESTS_FUZZ_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// A contract the code under test broke on this input: one line, then abort.
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define FUZZ_PATH_MAX (PATH_MAX + 64)

static char fuzz_scratch[PATH_MAX];

// The files a target may keep in its scratch folder (fuzz_path): SQLite adds the side files.
static const char *const fuzz_scratch_files[] = {
    "input", "ring", "good.ring", "trace.db", "trace.db-wal", "trace.db-shm", "trace.db-journal",
    NULL};

static inline void fuzz_scratch_remove(void) {
    char file[FUZZ_PATH_MAX];
    for (int i = 0; fuzz_scratch_files[i]; i++) {
        snprintf(file, sizeof file, "%s/%s", fuzz_scratch, fuzz_scratch_files[i]);
        unlink(file);
    }
    rmdir(fuzz_scratch);
}

// Writes into path the name of file `name` (one of fuzz_scratch_files) in the target's scratch
// folder, made on first use under $TMPDIR, else /dev/shm, else /tmp, and removed at exit.
static inline void fuzz_path(char path[FUZZ_PATH_MAX], const char *name) {
    int known = 0;
    for (int i = 0; fuzz_scratch_files[i]; i++)
        known |= !strcmp(name, fuzz_scratch_files[i]);
    FUZZ_CHECK(known, "fuzz_path(%s): not in fuzz_scratch_files, so never removed", name);
    if (!fuzz_scratch[0]) {
        const char *base = getenv("TMPDIR");
        struct stat st;
        if (!base || !*base) base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                                        ? "/dev/shm" : "/tmp";
        snprintf(fuzz_scratch, sizeof fuzz_scratch, "%s/ddpdbg-fuzz-XXXXXX", base);
        FUZZ_CHECK(mkdtemp(fuzz_scratch), "mkdtemp %s: %s", fuzz_scratch, strerror(errno));
        atexit(fuzz_scratch_remove);
    }
    snprintf(path, FUZZ_PATH_MAX, "%s/%s", fuzz_scratch, name);
}

// Removes a trace database and SQLite's side files, so that the next input starts afresh.
static inline void fuzz_remove_db(const char *path) {
    char side[FUZZ_PATH_MAX + 16];
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < 4; i++) {
        snprintf(side, sizeof side, "%s%s", path, suffixes[i]);
        unlink(side);
    }
}

// Replaces the file at path with exactly the n bytes of data.
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FUZZ_CHECK(fd >= 0, "cannot create %s: %s", path, strerror(errno));
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, data + done, n - done);
        FUZZ_CHECK(w > 0, "cannot write %s: %s", path, strerror(errno));
        done += (size_t)w;
    }
    close(fd);
}

#endif
