/* test_watchdog.c -- tui/launch/watchdog.c on two rings written here the way two ranks' probes
 * write them (no trainer, no database: the collectives are the ring's not yet stored records):
 * every rank waiting in collectives that cannot match -- the same number with a different op
 * and size, or different numbers -- is named a certain deadlock within 1 s, well before the
 * --hang-timeout; ranks waiting in the same collective (a slow transfer, maybe) are a hang only
 * after the timeout; a rank still working makes it no deadlock at all. */
#include "tui/launch/watchdog.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe/probe.h"
#include "tests/expect.h"

static char tmp[64];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

typedef struct Coll {
    int64_t seq;
    int op;
    int bucket;
    int64_t numel;
    const char *what;
} Coll;

// Rank r's ring in dir: collectives #2..#11 launched and done, then the given ones launched
// (not done), then phase (a ProbePhase) since now.
static ProbeRing *rank_ring(const char *dir, int r, const Coll *open, int n_open, int phase) {
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/rank%d.ring", dir, r);
    ProbeRing *ring = probe_ring_create(path, 4096, r, err, sizeof err);
    EXPECT(ring, "ring: %s", err);
    if (!ring) return NULL;
    for (int64_t s = 2; s <= 11; s++) {
        probe_ring_emit(ring, PROBE_COLL_LAUNCH, 0, 0, 2, -1, s, 100, "buffers", 7);
        probe_ring_emit(ring, PROBE_COLL_DONE, 1, 0, 2, -1, s, 100, NULL, 0);
    }
    for (int k = 0; k < n_open; k++)
        probe_ring_emit(ring, PROBE_COLL_LAUNCH, 0, 1, open[k].op, open[k].bucket, open[k].seq,
                        open[k].numel, open[k].what, strlen(open[k].what));
    probe_ring_set_phase(ring, (ProbePhase)phase, 1);
    return ring;
}

// Polls w every 50 ms for up to limit_s; returns the seconds it took to report (-1: never)
// and the report in out.
static double poll_until(Watchdog *w, double limit_s, char *out, size_t len) {
    bool exited[2] = {false, false};
    double t0 = now_s();
    while (now_s() - t0 < limit_s) {
        FILE *f = fmemopen(out, len, "w");
        bool hang = watchdog_poll(w, exited, f);
        fclose(f);
        if (hang) return now_s() - t0;
        usleep(50000);
    }
    out[0] = 0;
    return -1;
}

static Watchdog *two_ranks(const char *name, const Coll *a, int na, const Coll *b, int nb,
                           int phase_b, double timeout_s, ProbeRing **rings) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    EXPECT(system(cmd) == 0, "%s", cmd);
    rings[0] = rank_ring(dir, 0, a, na, PROBE_PHASE_COLLECTIVE);
    rings[1] = rank_ring(dir, 1, b, nb, phase_b);
    return watchdog_new(dir, (int[]){0, 1}, 2, timeout_s);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/test_watchdog.XXXXXX");
    if (!mkdtemp(tmp)) {
        EXPECT(0, "mkdtemp failed");
        return expect_report();
    }
    char out[8192];
    ProbeRing *rings[2];
    // skip_backward: rank 0 launched both buckets and waits in #12, rank 1 broadcasts buffers
    Coll r0[] = {{12, 1, 0, 264524, "bucket"}, {13, 1, 1, 823520, "bucket"}};
    Coll r1[] = {{12, 2, -1, 9264, "buffers"}};
    Watchdog *w = two_ranks("same_seq", r0, 2, r1, 1, PROBE_PHASE_COLLECTIVE, 30, rings);
    double t = poll_until(w, 5, out, sizeof out);
    EXPECT(t >= 0 && t <= 1.0, "#12 allreduce vs #12 broadcast: named within 1 s (took %.2f s)", t);
    EXPECT(strstr(out, "ddpdbg run: hang: certain deadlock: every rank waits, in collectives that "
                       "cannot match: rank 0 in #12 (allreduce of bucket 0, 264524 elements), "
                       "rank 1 in #12 (broadcast of buffers, 9264 elements)\n"),
           "the summary names the mismatch: %s", out);
    EXPECT(strstr(out, "  rank 0: waiting in a collective for "), "per-rank lines: %s", out);
    watchdog_free(w);
    probe_ring_close(rings[0]), probe_ring_close(rings[1]);

    // different numbers: rank 1 is one collective behind and waits in #11's successor... #14
    Coll d0[] = {{12, 1, 0, 1000, "bucket"}};
    Coll d1[] = {{12, 1, 0, 1000, "bucket"}, {14, 2, -1, 5, "stop"}};
    w = two_ranks("diff_seq", d0, 1, d1, 2, PROBE_PHASE_COLLECTIVE, 30, rings);
    // rank 1 completed #12 (its partner's too would have): only #14 is pending there
    probe_ring_emit(rings[1], PROBE_COLL_DONE, 1, 1, 1, 0, 12, 1000, NULL, 0);
    t = poll_until(w, 5, out, sizeof out);
    EXPECT(t >= 0 && t <= 1.0 && strstr(out, "rank 0 in #12 (allreduce of bucket 0, 1000 elements), "
                                            "rank 1 in #14 (broadcast of stop, 5 elements)"),
           "different numbers: a certain deadlock (%.2f s): %s", t, out);
    watchdog_free(w);
    probe_ring_close(rings[0]), probe_ring_close(rings[1]);

    // the same collective everywhere: maybe a slow transfer; a hang only after the timeout
    Coll s0[] = {{12, 1, 0, 264524, "bucket"}};
    w = two_ranks("slow", s0, 1, s0, 1, PROBE_PHASE_COLLECTIVE, 2, rings);
    t = poll_until(w, 5, out, sizeof out);
    EXPECT(t >= 1.9 && !strstr(out, "certain deadlock") &&
               strstr(out, "ddpdbg run: hang: rank 0 has waited "),
           "the same collective: a hang at the 2 s timeout, not certain (%.2f s): %s", t, out);
    watchdog_free(w);
    probe_ring_close(rings[0]), probe_ring_close(rings[1]);

    // a mismatch while rank 1 still computes: not (yet) a deadlock, not even at the timeout
    w = two_ranks("working", r0, 2, r1, 1, PROBE_PHASE_BACKWARD, 1, rings);
    t = poll_until(w, 2, out, sizeof out);
    EXPECT(t < 0, "rank 1 works: no hang (%.2f s): %s", t, out);
    watchdog_free(w);
    probe_ring_close(rings[0]), probe_ring_close(rings[1]);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return expect_report();
}
