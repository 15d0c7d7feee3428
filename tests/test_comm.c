/* test_comm.c -- the Gloo process group across real processes on 127.0.0.1 (2 and 3 ranks):
 * allreduce sums, two async allreduces in flight, broadcast from a non-zero root, allgather,
 * barrier, sequence numbers that agree across ranks, and a peer that exits early making the
 * survivor's wait fail with a message instead of hanging. Ranks are fork()ed before any
 * store or Gloo thread exists; each child reports through its exit status. */
#include "trainer/dist/comm.h"

#include "tests/ddp_harness.h" // harness_free_port
#include "tests/expect.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "comm-test"
#define TIMEOUT_MS 5000

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}


// Forks world ranks, each opening the store and a group, then running body; returns how many
// ranks failed. body frees the group itself (the early-exit case must not).
static int run_ranks(int world, int timeout_ms, void (*body)(ProcessGroup *, Store *)) {
    int port = harness_free_port();
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            signal(SIGPIPE, SIG_IGN); // comm.h: a dead peer must be an error, not a signal
            char err[512];
            Store *s = store_open("127.0.0.1", port, r == 0, world, TOKEN, TIMEOUT_MS, err,
                                  sizeof err);
            EXPECT(s, "rank %d store: %s", r, err);
            if (s) {
                ProcessGroup *pg = pg_new_gloo(s, r, world, timeout_ms, err, sizeof err);
                EXPECT(pg, "rank %d group: %s", r, err);
                if (pg) body(pg, s);
                store_close(s);
            }
            fflush(stdout);
            _exit(expect_failures ? 1 : 0);
        }
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int status;
        waitpid(pids[r], &status, 0);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (WIFSIGNALED(status)) fprintf(stderr, "rank %d: signal %d\n", r, WTERMSIG(status));
        failed += !ok;
    }
    return failed;
}

static void collectives(ProcessGroup *pg, Store *s) {
    (void)s;
    int rank = pg_rank(pg), world = pg_world(pg);
    char err[512];
    EXPECT(pg_seq(pg) == 0, "fresh group seq %llu", (unsigned long long)pg_seq(pg));

    // Sum of rank*10 + i over ranks: exact in float for small integers.
    enum { N = 1000 };
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = (float)(rank * 10 + i), b[i] = (float)(rank + 1) * -1.0f;
    PgWork *wa = pg_allreduce_sum(pg, a, N);
    PgWork *wb = pg_allreduce_sum(pg, b, N); // both in flight before either wait
    EXPECT(pg_work_wait(wb, err, sizeof err) == 0, "allreduce b: %s", err);
    EXPECT(pg_work_test(wa), "a launched first, so it is done once b is");
    EXPECT(pg_work_wait(wa, err, sizeof err) == 0, "allreduce a: %s", err);
    pg_work_free(wa);
    pg_work_free(wb);
    float rank_sum = (float)(world * (world - 1) / 2);
    int bad_a = 0, bad_b = 0;
    for (int i = 0; i < N; i++) {
        bad_a += a[i] != rank_sum * 10 + (float)(world * i);
        bad_b += b[i] != -(rank_sum + (float)world);
    }
    EXPECT(bad_a == 0 && bad_b == 0, "rank %d: %d / %d wrong sums (a[7] = %g)", rank, bad_a,
           bad_b, a[7]);

    float c[5];
    for (int i = 0; i < 5; i++) c[i] = (float)(100 * rank + i);
    EXPECT(pg_broadcast(pg, c, 5, 1, err, sizeof err) == 0, "broadcast: %s", err);
    EXPECT(c[0] == 100 && c[4] == 104, "rank %d after broadcast from 1: %g %g", rank, c[0], c[4]);
    EXPECT(pg_broadcast(pg, c, 5, world, err, sizeof err) == -1 && strstr(err, "root"),
           "root out of range: %s", err);

    int mine[2] = {rank * 7, -rank}, all[16] = {0};
    EXPECT(pg_allgather(pg, mine, sizeof mine, all, err, sizeof err) == 0, "allgather: %s", err);
    int bad_gather = 0;
    for (int r = 0; r < world; r++) bad_gather += all[2 * r] != r * 7 || all[2 * r + 1] != -r;
    EXPECT(bad_gather == 0, "rank %d: %d wrong allgather slots", rank, bad_gather);

    // Rank 0 arrives late; no rank may leave the barrier before it arrives.
    if (rank == 0) usleep(200000);
    double t0 = now_s();
    EXPECT(pg_barrier(pg, err, sizeof err) == 0, "barrier: %s", err);
    if (rank > 0) EXPECT(now_s() - t0 > 0.1, "rank %d left the barrier early", rank);

    // Every rank launched the same 5 collectives: seq agrees, checked through an allgather.
    uint64_t seq = pg_seq(pg), seqs[8] = {0};
    EXPECT(seq == 5, "seq %llu after 5 collectives (the rejected broadcast is not one)",
           (unsigned long long)seq);
    EXPECT(pg_allgather(pg, &seq, sizeof seq, seqs, err, sizeof err) == 0, "allgather: %s", err);
    for (int r = 0; r < world; r++) EXPECT(seqs[r] == 5, "rank %d saw seq %llu", r,
                                           (unsigned long long)seqs[r]);
    pg_free(pg);
}

// Rank 1 leaves without a word (its process exits, closing its sockets); rank 0's allreduce
// must fail with a message well within the timeout, and so must every later collective.
// Rank 1 waits until rank 0's group is up: leaving mid-rendezvous is a different failure.
static void peer_exits(ProcessGroup *pg, Store *s) {
    if (pg_rank(pg) == 1) {
        void *ready = NULL;
        EXPECT(store_get(s, "group-up", &ready, NULL) == 0, "%s", store_error(s));
        free(ready);
        return; // the process exits after closing its store client
    }
    EXPECT(store_set(s, "group-up", "", 0) == 0, "%s", store_error(s));
    char err[512] = "";
    float x[4] = {1, 2, 3, 4};
    double t0 = now_s();
    PgWork *w = pg_allreduce_sum(pg, x, 4);
    EXPECT(pg_work_wait(w, err, sizeof err) == -1, "allreduce with a dead peer succeeded");
    double took = now_s() - t0;
    EXPECT(took < 3.5, "failure took %.2f s (timeout 3 s)", took);
    EXPECT(strstr(err, "rank 0") && !strchr(err, '\n'), "one-line error naming the rank: '%s'",
           err);
    pg_work_free(w);
    char again[512] = "";
    EXPECT(pg_barrier(pg, again, sizeof again) == -1 && !strcmp(again, err),
           "a broken group fails later collectives with the first reason: '%s'", again);
    pg_free(pg);
}

int main(void) {
    EXPECT(run_ranks(2, TIMEOUT_MS, collectives) == 0, "2 ranks");
    EXPECT(run_ranks(3, TIMEOUT_MS, collectives) == 0, "3 ranks");
    EXPECT(run_ranks(2, 3000, peer_exits) == 0, "peer exits early");

    char err[512] = "";
    EXPECT(!pg_new_gloo(NULL, 2, 2, 1000, err, sizeof err) && strstr(err, "rank 2"),
           "rank out of range: '%s'", err);
    return expect_report();
}
