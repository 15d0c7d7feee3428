/* fuzz_trace.c -- libFuzzer target: the trace reader's gate, probe_db_check (probe/probe.h),
 * on arbitrary bytes written as a rank<R>.db, and, for a file it accepts, the launcher's drain
 * of a small good ring into it (probe_drain opens an existing trace read-write). Beyond "no
 * crash, leak or undefined behaviour": a rejected file gets one message naming its path; a
 * drain into an accepted file either fails with a message or leaves a file that
 * probe_db_check still accepts. Seed: a small real trace (build/fuzz/fuzz_seeds). */
#include "probe/probe.h"
#include "tests/fuzz_util.h"

static char ring_path[FUZZ_PATH_MAX];

// The good ring every accepted trace gets drained from: a few committed events, one with text
// long enough to continue in TEXT records.
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char err[512];
    fuzz_path(ring_path, "good.ring");
    ProbeRing *ring = probe_ring_create(ring_path, 64, 0, err, sizeof err);
    FUZZ_CHECK(ring, "%s", err);
    static const char args[] = "args=train model=rtdetr-tiny.yaml imgsz=96 batch=1";
    probe_ring_emit(ring, PROBE_META, 0, -1, 0, 0, 0, 0, args, sizeof args - 1);
    probe_ring_emit(ring, PROBE_PARAM, 0, -1, 0, 1, 64, 0, "model.0.conv.weight 64", 22);
    probe_ring_emit(ring, PROBE_FORWARD_BEGIN, 0, 0, 0, 0, 0, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_GRAD_READY, 0, 0, 0, 0, 1, 0, NULL, 0);
    probe_ring_close(ring);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[FUZZ_PATH_MAX], err[FUZZ_PATH_MAX + 512] = "";
    fuzz_path(path, "trace.db");
    fuzz_remove_db(path);
    fuzz_write_file(path, data, size);
    if (probe_db_check(path, err, sizeof err)) {
        FUZZ_CHECK(err[0] && strstr(err, path) && !strchr(err, '\n'),
                   "rejected without one line naming the file: '%s'", err);
        return 0;
    }
    ProbeDrainReport rep;
    if (probe_drain(ring_path, path, &rep, err, sizeof err)) {
        FUZZ_CHECK(err[0], "the drain failed without a message");
        return 0;
    }
    FUZZ_CHECK(!probe_db_check(path, err, sizeof err),
               "an accepted trace, drained into, is rejected: %s", err);
    return 0;
}
