/* fuzz_ring.c -- libFuzzer target: the launcher's drain of a dead rank's flight recorder,
 * probe_drain (probe/probe.h: probe_ring_attach, then every committed record into a fresh
 * rank<R>.db), on arbitrary bytes written as the rank<R>.ring file. Beyond "no crash, hang,
 * leak or undefined behaviour" (a ring is a file any process could have scribbled on): a
 * rejected ring gets a message; a drained one accounts for no more records than the ring
 * claims (inserted + in flight + lost <= last seq) and leaves a trace probe_db_check accepts.
 * Seeds: small real rings, fresh and wrapped (build/fuzz/fuzz_seeds). */
#include "probe/probe.h"
#include "tests/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char ring[FUZZ_PATH_MAX], db[FUZZ_PATH_MAX], err[2 * FUZZ_PATH_MAX + 512] = "";
    fuzz_path(ring, "ring");
    fuzz_path(db, "trace.db");
    fuzz_write_file(ring, data, size);
    fuzz_remove_db(db);
    ProbeDrainReport rep;
    if (probe_drain(ring, db, &rep, err, sizeof err)) {
        FUZZ_CHECK(err[0] && !strchr(err, '\n'), "rejected without a one-line message: '%s'",
                   err);
        return 0;
    }
    FUZZ_CHECK(rep.db_max_seq == 0, "a fresh database had seq %llu",
               (unsigned long long)rep.db_max_seq);
    FUZZ_CHECK(rep.lost <= rep.ring_last && rep.inserted + rep.in_flight <= rep.ring_last - rep.lost,
               "drained %llu + %llu in flight + %llu lost of %llu records",
               (unsigned long long)rep.inserted, (unsigned long long)rep.in_flight,
               (unsigned long long)rep.lost, (unsigned long long)rep.ring_last);
    FUZZ_CHECK(!probe_db_check(db, err, sizeof err), "the drained trace is rejected: %s", err);
    return 0;
}
