/* fuzz_log.c -- libFuzzer target: the log scanner of `ddpdbg explain`
 * (tui/postmortem/logscan.h, log_scan) on arbitrary bytes, as a pasted log may hold anything.
 * Beyond "no crash, leak or undefined behaviour" it checks what explain relies on: line
 * numbers within the log, ranks in [-1, max_rank], lists whose counts match their arrays, a cut
 * list's partial token a string, the per-rank tables sized by max_rank. Seeds: the logs of
 * tests/fixtures/postmortem/ (real PyTorch 1.13 runs, the seed report). */
#include "tests/fuzz_util.h"
#include "tui/postmortem/logscan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    LogScan s;
    log_scan((const char *)data, size, &s);
    FUZZ_CHECK(s.n >= 0 && s.n_lines >= 0 && (size_t)s.n_lines <= size + 1, "%d lines", s.n_lines);
    for (int i = 0; i < s.n; i++) {
        const LogError *e = &s.errors[i];
        FUZZ_CHECK(e->line >= 1 && e->line <= s.n_lines, "error %d at line %d of %d", i, e->line,
                   s.n_lines);
        FUZZ_CHECK(e->rank >= -1 && e->rank <= s.max_rank, "error %d: rank %d, max %d", i, e->rank,
                   s.max_rank);
        FUZZ_CHECK(e->kind >= 0 && e->kind < LOG_KIND_COUNT && e->count >= 1, "error %d: kind %d",
                   i, (int)e->kind);
        FUZZ_CHECK(e->names.n >= 0 && (e->names.n == 0 || e->names.names), "error %d: names", i);
        FUZZ_CHECK(e->indices.n >= 0 && (e->indices.n == 0 || e->indices.values),
                   "error %d: indices", i);
        for (int k = 0; k < e->names.n; k++)
            FUZZ_CHECK(e->names.names[k][0], "error %d: empty name %d", i, k);
        FUZZ_CHECK(memchr(e->names.partial, 0, sizeof e->names.partial) &&
                       memchr(e->first, 0, sizeof e->first),
                   "error %d: unterminated text", i);
    }
    for (int r = 0; r <= s.max_rank; r++)
        FUZZ_CHECK(s.boxes[r] >= -1 && s.n_info_names[r] >= 0, "rank %d", r);
    log_scan_free(&s);
    return 0;
}
