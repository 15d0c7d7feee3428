/* fuzz_seeds.c -- not a fuzz target: writes the seed inputs of the two targets that read
 * binary files the probe makes, so that the corpus starts from real ones (`make fuzz` runs it):
 *   fuzz_seeds RING_DIR TRACE_DIR
 *   RING_DIR/fresh.ring    a 64-record ring: metadata, a parameter, an iteration's events, an
 *                          error whose text continues in TEXT records; nothing stored yet
 *   RING_DIR/wrapped.ring  the same ring after 150 events, the writer's tail at 128: its head
 *                          has gone round, old slots reused
 *   TRACE_DIR/small.db     fresh.ring drained into a new trace, VACUUMed at 512-byte pages so
 *                          that the whole database is a few kilobytes */
#include <sqlite3.h>

#include "probe/probe.h"
#include "probe/ring.h" // ring_set_tail: stands in for the writer thread
#include "tests/fuzz_util.h"

static ProbeRing *new_ring(const char *dir, const char *name) {
    char path[FUZZ_PATH_MAX], err[FUZZ_PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ProbeRing *ring = probe_ring_create(path, 64, 1, err, sizeof err);
    FUZZ_CHECK(ring, "%s", err);
    return ring;
}

// One iteration as the trainer records it, with an error long enough for 3 TEXT records.
static void emit_iteration(ProbeRing *ring, int64_t iter) {
    static const char error[] = "Expected to have finished reduction in the prior iteration";
    probe_ring_emit(ring, PROBE_FORWARD_BEGIN, 0, iter, 0, 0, 0, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_BATCH, 0, iter, 5, 2, 0, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_FORWARD_END, 0, iter, 0, 0, 0, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_BACKWARD_BEGIN, 0, iter, 0, 0, 0, 0, NULL, 0);
    // parameter 1 a hook that marked it at once, parameter 0 a mark of its own after its hook
    probe_ring_emit(ring, PROBE_GRAD_READY, PROBE_FLAG_MARKED, iter, 1, 0, 1, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_GRAD_READY, 0, iter, 0, 1, 1, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_MARK_READY, 0, iter, 0, 0, 0, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_BUCKET_READY, 0, iter, 0, 0, 0, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_COLL_LAUNCH, 0, iter, PROBE_OP_ALLREDUCE, 0, 2 * iter + 1, 128,
                    "bucket", 6);
    probe_ring_emit(ring, PROBE_COLL_DONE, PROBE_FLAG_OK, iter, PROBE_OP_ALLREDUCE, 0,
                    2 * iter + 1, 128, "bucket", 6);
    probe_ring_emit(ring, PROBE_ERROR, 0, iter, 0, 0, 0, 0, error, sizeof error - 1);
}

static void emit_start(ProbeRing *ring) {
    static const char args[] = "args=train model=rtdetr-tiny.yaml imgsz=96 batch=1";
    probe_ring_emit(ring, PROBE_META, 0, -1, 0, 0, 0, 0, "rank=1", 6);
    probe_ring_emit(ring, PROBE_META, 0, -1, 0, 0, 0, 0, args, sizeof args - 1);
    probe_ring_emit(ring, PROBE_PARAM, 0, -1, 0, 1, 64, 0, "model.0.conv.weight 64", 22);
    probe_ring_emit(ring, PROBE_PARAM, 0, -1, 1, 0, 1, 0, "model.0.bn.bias ", 16);
    probe_ring_emit(ring, PROBE_LAYOUT, 0, -1, 0, 0, 1, 0, NULL, 0);
    probe_ring_emit(ring, PROBE_LAYOUT, 0, -1, 0, 0, 0, 1, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_seeds RING_DIR TRACE_DIR\n");
        return 2;
    }
    ProbeRing *fresh = new_ring(argv[1], "fresh.ring");
    emit_start(fresh);
    emit_iteration(fresh, 0);
    probe_ring_close(fresh);

    ProbeRing *wrapped = new_ring(argv[1], "wrapped.ring");
    emit_start(wrapped);
    for (int64_t iter = 0; probe_ring_state(wrapped).head <= 150; iter++) {
        emit_iteration(wrapped, iter);
        uint64_t claimed = probe_ring_state(wrapped).head - 1;
        ring_set_tail(wrapped, claimed > 16 ? claimed - 16 : 0);
    }
    ring_set_tail(wrapped, 128);
    probe_ring_close(wrapped);

    char ring[FUZZ_PATH_MAX], db[FUZZ_PATH_MAX], err[2 * FUZZ_PATH_MAX + 512];
    snprintf(ring, sizeof ring, "%s/fresh.ring", argv[1]);
    snprintf(db, sizeof db, "%s/small.db", argv[2]);
    fuzz_remove_db(db);
    FUZZ_CHECK(!probe_drain(ring, db, NULL, err, sizeof err), "%s", err);
    sqlite3 *s;
    FUZZ_CHECK(sqlite3_open(db, &s) == SQLITE_OK, "%s: %s", db, sqlite3_errmsg(s));
    FUZZ_CHECK(sqlite3_exec(s, "PRAGMA page_size = 512; VACUUM;", NULL, NULL, NULL) == SQLITE_OK,
               "%s: %s", db, sqlite3_errmsg(s));
    sqlite3_close(s);
    FUZZ_CHECK(!probe_db_check(db, err, sizeof err), "%s", err);
    return 0;
}
