/* test_probe.c -- the flight recorder end to end, on real files in a temporary directory:
 * conservation (4 threads, then 4 forked ranks, 200 iterations of 600 events: every event in
 * the database exactly once, in order; a tiny ring drops and counts exactly what it drops),
 * a rank SIGKILLed mid-stream and drained (nothing it committed is lost), the table routing
 * of META/PARAM/LAYOUT and long text, heartbeats and a HANG added by another mapping, and the
 * failures a user meets: truncated ring, truncated or corrupt database, a newer schema, a hot
 * journal left by a rank killed inside a transaction, an unwritable directory and a full disk
 * (the probe turns off with one warning). */
#include "probe/probe.h"
#include "probe/tracedb.h"

#include "tests/expect.h"
#include "tests/sqlite_query.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PRODUCERS 4
#define ITERS 200
#define PER_ITER 600
#define EVENTS (ITERS * PER_ITER) // per producer
#define TEXT_EVERY 97             // every 97th event is an ERROR with a long text

static char tmp[64];

static const char *at(const char *name) {
    static char paths[8][256];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 256, "%s/%s", tmp, name);
    return p;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

// ---- small helpers over sqlite3 (and tests/sqlite_query.h) ---------------------------------

// The first column of the first row of sql, as text copied into out ("" on error or no row).
static const char *q_text(sqlite3 *db, char *out, size_t n, const char *sql) {
    sqlite3_stmt *s;
    out[0] = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) return out;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return out;
}

// stderr into a file while the test provokes a warning; returns what was written.
static int saved_stderr = -1;
static void capture_stderr(const char *path) {
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}
static const char *captured(const char *path, char *buf, size_t n) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(buf, 1, n - 1, f) : 0;
    buf[len] = 0;
    if (f) fclose(f);
    return buf;
}
static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

// ---- the producer shared by the conservation tests ----------------------------------------

static void error_text(char *buf, size_t n, int producer, int64_t i) {
    snprintf(buf, n,
             "producer %d event %lld: Expected to have finished reduction in the prior iteration",
             producer, (long long)i);
}

// ITERS iterations of PER_ITER events, a = producer, c = its running count (1..EVENTS).
static void produce(Probe *p, int producer) {
    int64_t i = 0;
    char text[128];
    for (int it = 0; it < ITERS; it++) {
        for (int k = 0; k < PER_ITER; k++) {
            i++;
            if (i % TEXT_EVERY == 0) {
                error_text(text, sizeof text, producer, i);
                probe_emit(p, PROBE_ERROR, it, producer, k, i, 0, text);
            } else {
                probe_emit(p, k == 0 ? PROBE_FORWARD_BEGIN : PROBE_GRAD_READY, it, producer, k, i,
                           k % 2, NULL);
            }
        }
    }
}

// TEXT records one long text adds to the ring.
static int64_t parts_of(size_t len) {
    return len > PROBE_TEXT_BYTES
               ? (int64_t)((len - PROBE_TEXT_BYTES + PROBE_TEXT_BYTES - 1) / PROBE_TEXT_BYTES)
               : 0;
}

// Every event of the producers 0..n_producers-1 is in db exactly once, in the order produced,
// with its text; seqs account for every ring record.
static void expect_conserved(const char *path, int first_producer, int n_producers) {
    char err[512];
    EXPECT(probe_db_check(path, err, sizeof err) == 0, "%s", err);
    sqlite3 *db = db_open(path);
    if (!db) return;
    int64_t parts = 0;
    for (int pr = first_producer; pr < first_producer + n_producers; pr++) {
        sqlite3_stmt *s;
        sqlite3_prepare_v2(db, "SELECT c, kind, text FROM events WHERE a = ?1 ORDER BY seq", -1, &s,
                           NULL);
        sqlite3_bind_int(s, 1, pr);
        int64_t want = 0, bad_order = 0, bad_text = 0;
        char text[128];
        while (sqlite3_step(s) == SQLITE_ROW) {
            int64_t c = sqlite3_column_int64(s, 0);
            bad_order += c != ++want;
            if (c % TEXT_EVERY == 0) {
                error_text(text, sizeof text, pr, c);
                const char *got = (const char *)sqlite3_column_text(s, 2);
                bad_text += sqlite3_column_int(s, 1) != PROBE_ERROR || !got || strcmp(got, text);
                parts += parts_of(strlen(text));
            }
        }
        sqlite3_finalize(s);
        EXPECT(want == EVENTS && bad_order == 0,
               "%s: producer %d: %lld events, %lld out of order or repeated", path, pr,
               (long long)want, (long long)bad_order);
        EXPECT(bad_text == 0, "%s: producer %d: %lld texts differ", path, pr, (long long)bad_text);
    }
    int64_t rows = q_int(db, "SELECT count(*) FROM events");
    EXPECT(rows == (int64_t)n_producers * EVENTS, "%s: %lld rows", path, (long long)rows);
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'records'") == rows + parts,
           "%s: meta records %lld, want %lld rows + %lld text parts", path,
           (long long)q_int(db, "SELECT value FROM meta WHERE key = 'records'"), (long long)rows,
           (long long)parts);
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'overruns'") == 0, "%s: no overrun", path);
    char mode[32];
    EXPECT(!strcmp(q_text(db, mode, sizeof mode, "PRAGMA journal_mode"), "delete"),
           "%s: a closed trace is one file (journal_mode %s)", path, mode);
    sqlite3_close(db);
}

typedef struct ThreadArg {
    Probe *p;
    int producer;
} ThreadArg;

static void *producer_thread(void *arg) {
    ThreadArg *t = arg;
    produce(t->p, t->producer);
    return NULL;
}

static void test_threads_conserved(void) {
    ProbeConfig cfg = {.dir = at("threads"), .rank = 0, .capacity = 1u << 20};
    Probe *p = probe_open(&cfg);
    EXPECT(p, "probe_open %s", cfg.dir);
    if (!p) return;
    pthread_t th[PRODUCERS];
    ThreadArg args[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        args[i] = (ThreadArg){p, i};
        pthread_create(&th[i], NULL, producer_thread, &args[i]);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    ProbeStats st = probe_stats(p);
    EXPECT(st.on && st.overruns == 0, "on %d, %llu overruns", st.on,
           (unsigned long long)st.overruns);
    probe_close(p);
    expect_conserved(at("threads/rank0.db"), 0, PRODUCERS);
    EXPECT(access(at("threads/rank0.ring"), F_OK) != 0, "a clean close removes the ring");
}

static void test_processes_conserved(void) {
    pid_t pids[PRODUCERS];
    for (int r = 0; r < PRODUCERS; r++) {
        fflush(stdout);
        if ((pids[r] = fork()) == 0) {
            ProbeConfig cfg = {.dir = at("ranks"), .rank = r, .capacity = 1u << 18};
            Probe *p = probe_open(&cfg);
            if (!p) _exit(1);
            produce(p, r);
            ProbeStats st = probe_stats(p);
            probe_close(p);
            _exit(st.on && st.overruns == 0 ? 0 : 2);
        }
    }
    for (int r = 0; r < PRODUCERS; r++) {
        int status;
        waitpid(pids[r], &status, 0);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d: status 0x%x", r, status);
        char name[32];
        snprintf(name, sizeof name, "ranks/rank%d.db", r);
        expect_conserved(at(name), r, 1);
    }
}

// A ring of 64 records polled every 20 ms overflows: what it stores plus what it counts as
// dropped is what was emitted, the count lands in meta and the close says so.
static void test_overrun_counted(void) {
    ProbeConfig cfg = {.dir = at("tiny"), .rank = 3, .capacity = 64, .flush_ms = 20};
    capture_stderr(at("tiny.err"));
    Probe *p = probe_open(&cfg);
    const int64_t n = 200000;
    for (int64_t i = 1; i <= n; i++)
        probe_emit(p, PROBE_GRAD_READY, i / 600, 0, 0, i, 0, NULL);
    ProbeStats st = probe_stats(p);
    probe_close(p);
    char out[2048];
    captured(at("tiny.err"), out, sizeof out);
    EXPECT(p && st.overruns > 0, "a 64-record ring dropped %llu of %lld",
           (unsigned long long)st.overruns, (long long)n);
    EXPECT(st.claimed + st.overruns == (uint64_t)n, "claimed %llu + dropped %llu != %lld",
           (unsigned long long)st.claimed, (unsigned long long)st.overruns, (long long)n);
    sqlite3 *db = db_open(at("tiny/rank3.db"));
    int64_t rows = q_int(db, "SELECT count(*) FROM events");
    int64_t meta = q_int(db, "SELECT value FROM meta WHERE key = 'overruns'");
    EXPECT(rows + meta == n && meta == (int64_t)st.overruns,
           "%lld rows + %lld dropped, %lld emitted", (long long)rows, (long long)meta,
           (long long)n);
    EXPECT(q_int(db,
                 "SELECT count(*) FROM (SELECT c, lag(c) OVER (ORDER BY seq) AS prev FROM events)"
                 " WHERE prev >= c") == 0,
           "stored events keep their order");
    sqlite3_close(db);
    char want[64];
    snprintf(want, sizeof want, "%llu events were dropped", (unsigned long long)st.overruns);
    EXPECT(strstr(out, want) && count_lines(out) == 1, "the close reports the overrun once: '%s'",
           out);
}

// ---- kill -9 --------------------------------------------------------------------------------

typedef struct Shared {
    int64_t committed; // the child's last event whose probe_emit returned
} Shared;

// A burst between two of the writer's flushes: 4096 events into a 1024-record ring whose
// writer waits 10 s between flushes. The emit that finds the ring half full wakes the writer,
// so nothing is dropped; and probe_close wakes it too, rather than waiting out its 10 s.
static void test_burst_wakes_writer(void) {
    ProbeConfig cfg = {.dir = at("burst"), .rank = 0, .capacity = 1024, .flush_ms = 10000};
    Probe *p = probe_open(&cfg);
    EXPECT(p, "probe_open");
    if (!p) return;
    usleep(100000); // the writer's first flush is done: it waits now
    const int n = 4096, per_burst = 64;
    for (int i = 0; i < n; i++) {
        probe_emit(p, PROBE_GRAD_READY, i / 512, i % 512, i, 1, 0, NULL);
        if (i % per_burst == per_burst - 1) usleep(1000);
    }
    ProbeStats st = probe_stats(p);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    probe_close(p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double close_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    EXPECT(st.overruns == 0, "%llu of %d events dropped: the writer slept through the burst",
           (unsigned long long)st.overruns, n);
    EXPECT(close_s < 5, "probe_close took %.1f s: it waited out the writer's 10 s", close_s);
    sqlite3 *db = db_open(at("burst/rank0.db"));
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = 8") == n, "%d events stored", n);
    sqlite3_close(db);
}

static void test_kill9_drained(void) {
    Shared *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    sh->committed = 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        // The writer polls every 50 ms, so the kill finds events only the ring holds.
        ProbeConfig cfg = {.dir = at("kill"), .rank = 1, .capacity = 1u << 20, .flush_ms = 50};
        Probe *p = probe_open(&cfg);
        if (!p) _exit(1);
        char text[128];
        for (int64_t i = 1;; i++) {
            if (i % TEXT_EVERY == 0) {
                error_text(text, sizeof text, 1, i);
                probe_emit(p, PROBE_ERROR, i / PER_ITER, 1, 0, i, 0, text);
            } else {
                probe_emit(p, i % PER_ITER ? PROBE_GRAD_READY : PROBE_BACKWARD_BEGIN, i / PER_ITER,
                           1, 0, i, 0, NULL);
            }
            __atomic_store_n(&sh->committed, i, __ATOMIC_RELEASE);
            if (i % PER_ITER == 0) usleep(1000); // a backward's worth, then a pause
        }
    }
    while (__atomic_load_n(&sh->committed, __ATOMIC_ACQUIRE) < 60000)
        usleep(1000);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    int64_t committed = __atomic_load_n(&sh->committed, __ATOMIC_ACQUIRE);
    EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child was killed: status 0x%x",
           status);

    char err[512];
    ProbeDrainReport rep;
    int rc = probe_drain(at("kill/rank1.ring"), at("kill/rank1.db"), &rep, err, sizeof err);
    EXPECT(rc == 0, "drain: %s", err);
    EXPECT(rep.inserted > 0 && rep.in_flight <= 1 + (uint64_t)parts_of(128) && rep.lost == 0 &&
               rep.overruns == 0,
           "drain: db had up to %llu, ring up to %llu; inserted %llu, in flight %llu, lost %llu, "
           "overruns %llu",
           (unsigned long long)rep.db_max_seq, (unsigned long long)rep.ring_last,
           (unsigned long long)rep.inserted, (unsigned long long)rep.in_flight,
           (unsigned long long)rep.lost, (unsigned long long)rep.overruns);
    printf("kill -9 after %lld committed events: the db had seq <= %llu, the ring <= %llu; the "
           "drain inserted"
           " %llu events, %llu records in flight\n",
           (long long)committed, (unsigned long long)rep.db_max_seq,
           (unsigned long long)rep.ring_last, (unsigned long long)rep.inserted,
           (unsigned long long)rep.in_flight);
    EXPECT(probe_db_check(at("kill/rank1.db"), err, sizeof err) == 0, "%s", err);
    sqlite3 *db = db_open(at("kill/rank1.db"));
    int64_t have =
        q_int(db, "SELECT count(DISTINCT c) FROM events WHERE c <= %lld", (long long)committed);
    int64_t rows = q_int(db, "SELECT count(*) FROM events WHERE c <= %lld", (long long)committed);
    EXPECT(have == committed && rows == committed,
           "the child committed %lld events; the drained db has %lld (%lld rows)",
           (long long)committed, (long long)have, (long long)rows);
    EXPECT(
        q_int(
            db,
            "SELECT count(*) FROM events WHERE kind = %d AND length(text) != length('producer 1 "
            "event ')"
            " + length(c) + length(': Expected to have finished reduction in the prior iteration')",
            PROBE_ERROR) == 0,
        "every drained text is whole");
    char closed[32];
    EXPECT(!strcmp(q_text(db, closed, sizeof closed, "SELECT value FROM meta WHERE key = 'closed'"),
                   "drained"),
           "meta closed = %s", closed);
    sqlite3_close(db);
    // A second drain finds nothing new.
    EXPECT(probe_drain(at("kill/rank1.ring"), at("kill/rank1.db"), &rep, err, sizeof err) == 0 &&
               rep.inserted == 0,
           "second drain inserted %llu", (unsigned long long)rep.inserted);
    munmap(sh, 4096);
}

// A ring left by a rank that died while writing two events (one of them a long text): the
// drain stores everything else and counts the records it could not use. The file layout is
// probe.h's: a 4 KiB header, then 64-byte records whose first field is seq.
static void test_drain_in_flight(void) {
    char err[512];
    ProbeRing *r = probe_ring_create(at("dead.ring"), 256, 5, err, sizeof err);
    EXPECT(r, "create: %s", err);
    if (!r) return;
    const char *text = "a text of forty bytes, three TEXT parts";
    for (int64_t c = 1; c <= 9; c++)
        probe_ring_emit(r, c == 6 ? PROBE_ERROR : PROBE_GRAD_READY, 0, 0, 0, 0, c, 0,
                        c == 6 ? text : NULL, c == 6 ? strlen(text) : 0);
    probe_ring_close(r);
    // Seqs 1 2 3 4 5 6 [7 8 9: TEXT parts of 6] 10 11 12; un-commit 3 and the head 6.
    int fd = open(at("dead.ring"), O_WRONLY);
    uint64_t zero = 0;
    EXPECT(pwrite(fd, &zero, 8, 4096 + 2 * 64) == 8 && pwrite(fd, &zero, 8, 4096 + 5 * 64) == 8,
           "pwrite");
    close(fd);
    ProbeDrainReport rep;
    EXPECT(probe_drain(at("dead.ring"), at("dead.db"), &rep, err, sizeof err) == 0, "drain: %s",
           err);
    EXPECT(rep.ring_last == 12 && rep.inserted == 7 && rep.in_flight == 5 && rep.db_max_seq == 0,
           "ring up to %llu: inserted %llu, in flight %llu", (unsigned long long)rep.ring_last,
           (unsigned long long)rep.inserted, (unsigned long long)rep.in_flight);
    sqlite3 *db = db_open(at("dead.db"));
    char got[64];
    EXPECT(!strcmp(q_text(db, got, sizeof got,
                          "SELECT group_concat(c) FROM (SELECT c FROM events ORDER BY seq)"),
                   "1,2,4,5,7,8,9"),
           "drained events: %s", got);
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'drain_in_flight'") == 5,
           "meta drain_in_flight");
    sqlite3_close(db);
}

// A ring whose header no writer could have left (head 0: seqs count from 1): the drain refuses
// it in one line naming the file and the header's values (README, "Bad input"), and stores
// nothing.
static void test_drain_damaged(void) {
    char err[512];
    ProbeRing *r = probe_ring_create(at("damaged.ring"), 256, 1, err, sizeof err);
    EXPECT(r, "create: %s", err);
    if (!r) return;
    for (int64_t c = 1; c <= 3; c++)
        probe_ring_emit(r, PROBE_GRAD_READY, 0, 0, 0, 0, c, 0, NULL, 0);
    probe_ring_close(r);
    // Zero the header after its identity and live state: head, tail and overruns (probe.h's
    // layout keeps them in the 4 KiB header's later cache lines).
    int fd = open(at("damaged.ring"), O_WRONLY);
    static const char zeros[4096 - 64];
    EXPECT(fd >= 0 && pwrite(fd, zeros, sizeof zeros, 64) == (ssize_t)sizeof zeros, "pwrite");
    close(fd);
    ProbeDrainReport rep;
    EXPECT(probe_drain(at("damaged.ring"), at("damaged.db"), &rep, err, sizeof err) == -1,
           "a damaged ring drains");
    char want[600];
    snprintf(want, sizeof want, "ring %s is damaged: its header says head 0, tail 0",
             at("damaged.ring"));
    EXPECT(!strcmp(err, want), "got '%s', expected '%s'", err, want);
}

// ---- tables, text, heartbeats, another process's HANG ---------------------------------------

static void test_tables_and_text(void) {
    ProbeConfig cfg = {.dir = at("tables"), .rank = 2, .heartbeat_ms = 10, .keep_ring = true};
    Probe *p = probe_open(&cfg);
    EXPECT(p, "probe_open");
    if (!p) return;
    char long_value[301];
    memset(long_value, 'v', 300);
    long_value[300] = 0;
    probe_meta(p, "world", "%d", 4);
    probe_meta(p, "args", "%s", long_value);
    const int64_t shape[] = {256, 64, 3, 3};
    probe_param(p, 510, "model.28.dec_bbox_head.5.layers.2.bias", 1, shape + 1, 64);
    probe_param(p, 7, "model.0.stem1.conv.weight", 4, shape, 256 * 64 * 9);
    probe_emit(p, PROBE_LAYOUT, -1, 0, 1, 510, 0, NULL);
    probe_emit(p, PROBE_LAYOUT, -1, 0, 1, 7, 64, NULL);
    probe_emit(p, PROBE_LAYOUT, -1, 1, 0, 7, 0, NULL);
    const char *twelve = "abcdefghijkl", *thirteen = "abcdefghijklm",
               *twenty_four = "abcdefghijklmnopqrstuvwx";
    probe_emit(p, PROBE_COLL_LAUNCH, 3, PROBE_OP_ALLREDUCE, 1, 17, 1000, twelve);
    probe_emit_text(p, PROBE_COLL_DONE, PROBE_FLAG_OK, 3, PROBE_OP_ALLREDUCE, 1, 17, 1000, thirteen,
                    13);
    probe_emit(p, PROBE_ERROR, 3, 0, 0, 0, 0, twenty_four);
    probe_emitf(p, PROBE_ERROR, 3, 0, 0, 0, 0, "%s%s", twenty_four, "y");
    probe_set_phase(p, PROBE_PHASE_BACKWARD, 5);

    // The launcher's view of the live rank: its phase in the header, and a HANG it adds.
    char err[512];
    ProbeRing *other = probe_ring_attach(at("tables/rank2.ring"), err, sizeof err);
    EXPECT(other, "attach: %s", err);
    if (other) {
        ProbeRingState st = probe_ring_state(other);
        EXPECT(st.rank == 2 && st.pid == getpid() && st.phase == PROBE_PHASE_BACKWARD &&
                   st.phase_iter == 5 && !st.closed,
               "live state: rank %d pid %d phase %d iter %lld", st.rank, st.pid, st.phase,
               (long long)st.phase_iter);
        const char *hang = "rank 2 waits in allreduce seq 17 for rank 0 (backward, iteration 5)";
        EXPECT(probe_ring_emit(other, PROBE_HANG, 0, 5, 0, 0, 0, 0, hang, strlen(hang)),
               "HANG emitted");
        probe_ring_close(other);
    }
    usleep(60000);
    probe_close(p);

    sqlite3 *db = db_open(at("tables/rank2.db"));
    char text[512];
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'world'") == 4, "meta world");
    EXPECT(!strcmp(q_text(db, text, sizeof text, "SELECT value FROM meta WHERE key = 'args'"),
                   long_value),
           "a 300-byte META value is whole");
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'rank'") == 2, "meta rank");
    EXPECT(!strcmp(q_text(db, text, sizeof text,
                          "SELECT name || ' ' || shape || ' ' || numel || ' ' || ndim"
                          " FROM params WHERE idx = 510"),
                   "model.28.dec_bbox_head.5.layers.2.bias 64 64 1"),
           "params 510: %s", text);
    EXPECT(!strcmp(q_text(db, text, sizeof text, "SELECT shape FROM params WHERE idx = 7"),
                   "256x64x3x3"),
           "params 7 shape: %s", text);
    EXPECT(!strcmp(q_text(db, text, sizeof text,
                          "SELECT group_concat(generation || ':' || bucket || ':' || pos"
                          " || ':' || param || ':' || offset, ' ') FROM (SELECT * FROM layouts"
                          " ORDER BY generation, bucket, pos)"),
                   "0:1:0:510:0 0:1:1:7:64 1:0:0:7:0"),
           "layouts: %s", text);
    EXPECT(!strcmp(q_text(db, text, sizeof text,
                          "SELECT group_concat(text, '|') FROM (SELECT text FROM events"
                          " WHERE iter = 3 ORDER BY seq)"),
                   "abcdefghijkl|abcdefghijklm|abcdefghijklmnopqrstuvwx|abcdefghijklmnopqrstuvwxy"),
           "texts at the 12-byte boundaries: %s", text);
    EXPECT(q_int(db, "SELECT flags FROM events WHERE kind = %d", PROBE_COLL_DONE) == PROBE_FLAG_OK,
           "COLL_DONE ok flag");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d", PROBE_TEXT) == 0,
           "TEXT parts get no row");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND a = %d AND iter = 5",
                 PROBE_HEARTBEAT, PROBE_PHASE_BACKWARD) >= 2,
           "heartbeats carry the phase (%lld)",
           (long long)q_int(db, "SELECT count(*) FROM events WHERE kind = 17"));
    EXPECT(q_int(db, "SELECT count(*) FROM named_events WHERE kind = 'HANG' AND text LIKE 'rank 2 "
                     "waits%%'") == 1,
           "the HANG another mapping added is stored");
    // The names in the schema are the names in probe.h.
    for (int k = 1; k < PROBE_KIND_END; k++) {
        char sql[64];
        snprintf(sql, sizeof sql, "SELECT name FROM kinds WHERE kind = %d", k);
        EXPECT(!strcmp(q_text(db, text, sizeof text, sql), probe_kind_name(k)),
               "kind %d: schema says '%s', probe.h '%s'", k, text, probe_kind_name(k));
    }
    EXPECT(q_int(db, "SELECT count(*) FROM kinds") == PROBE_KIND_END - 1, "one kinds row per kind");
    EXPECT(q_int(db, "PRAGMA user_version") == PROBE_SCHEMA_VERSION, "user_version");
    sqlite3_close(db);
    EXPECT(access(at("tables/rank2.ring"), F_OK) == 0, "keep_ring keeps the ring");
}

// ---- bad input ------------------------------------------------------------------------------

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "w");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void test_bad_ring(void) {
    char err[512];
    ProbeRing *r = probe_ring_create(at("bad.ring"), 256, 0, err, sizeof err);
    EXPECT(r, "create: %s", err);
    for (int i = 0; i < 10; i++)
        probe_ring_emit(r, PROBE_GRAD_READY, 0, 0, i, 0, 0, 0, NULL, 0);
    probe_ring_close(r);
    EXPECT(truncate(at("bad.ring"), 4096 + 100 * 64) == 0, "truncate");
    EXPECT(probe_drain(at("bad.ring"), at("bad_ring.db"), NULL, err, sizeof err) == -1 &&
               strstr(err, "is truncated") && strstr(err, "256 records"),
           "truncated ring: %s", err);
    EXPECT(truncate(at("bad.ring"), 100) == 0, "truncate");
    EXPECT(probe_drain(at("bad.ring"), at("bad_ring.db"), NULL, err, sizeof err) == -1 &&
               strstr(err, "truncated"),
           "ring shorter than its header: %s", err);
    char junk[8192];
    memset(junk, 'x', sizeof junk);
    write_file(at("junk.ring"), junk, sizeof junk);
    EXPECT(probe_drain(at("junk.ring"), at("bad_ring.db"), NULL, err, sizeof err) == -1 &&
               strstr(err, "not a ddpdbg ring"),
           "foreign ring: %s", err);
}

// A closed trace with enough rows to span many pages.
static void make_trace(const char *dir) {
    ProbeConfig cfg = {.dir = at(dir), .rank = 0};
    Probe *p = probe_open(&cfg);
    for (int i = 0; i < 20000; i++)
        probe_emit(p, PROBE_GRAD_READY, i / 500, i % 500, i, 1, 0, NULL);
    probe_close(p);
}

static void copy_file(const char *from, const char *to) {
    FILE *f = fopen(from, "rb");
    static char buf[1 << 22];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    write_file(to, buf, n);
}

static void test_bad_db(void) {
    char err[512], path[256];
    make_trace("good");
    snprintf(path, sizeof path, "%s", at("good/rank0.db"));
    EXPECT(probe_db_check(path, err, sizeof err) == 0, "a good trace: %s", err);
    struct stat st;
    stat(path, &st);
    EXPECT(st.st_size > 200000, "the trace spans many pages (%lld bytes)", (long long)st.st_size);

    copy_file(path, at("truncated.db"));
    EXPECT(truncate(at("truncated.db"), st.st_size / 2) == 0, "truncate");
    EXPECT(probe_db_check(at("truncated.db"), err, sizeof err) == -1 &&
               strstr(err, "truncated.db") && strstr(err, "corrupt or truncated"),
           "truncated db: %s", err);

    copy_file(path, at("corrupt.db"));
    int fd = open(at("corrupt.db"), O_WRONLY);
    char junk[8192];
    memset(junk, 0xab, sizeof junk);
    EXPECT(pwrite(fd, junk, sizeof junk, st.st_size / 2) == (ssize_t)sizeof junk, "pwrite");
    close(fd);
    EXPECT(probe_db_check(at("corrupt.db"), err, sizeof err) == -1 &&
               strstr(err, "corrupt or truncated"),
           "corrupt db: %s", err);

    write_file(at("text.db"), "not a database\n", 15);
    EXPECT(probe_db_check(at("text.db"), err, sizeof err) == -1 &&
               strstr(err, "not a readable SQLite database"),
           "a text file: %s", err);
    EXPECT(probe_db_check(at("missing.db"), err, sizeof err) == -1 && strstr(err, "No such file"),
           "missing: %s", err);

    copy_file(path, at("v99.db"));
    sqlite3 *db;
    sqlite3_open(at("v99.db"), &db);
    sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL);
    sqlite3_close(db);
    char want[512];
    snprintf(want, sizeof want, "trace %s has schema version 99, this ddpdbg reads up to %d",
             at("v99.db"), PROBE_SCHEMA_VERSION);
    EXPECT(probe_db_check(at("v99.db"), err, sizeof err) == -1 && !strcmp(err, want),
           "newer schema: %s", err);
    // The drain refuses to write into it too.
    ProbeRing *r = probe_ring_create(at("v99.ring"), 64, 0, err, sizeof err);
    probe_ring_emit(r, PROBE_GRAD_READY, 0, 0, 0, 0, 0, 0, NULL, 0);
    probe_ring_close(r);
    EXPECT(probe_drain(at("v99.ring"), at("v99.db"), NULL, err, sizeof err) == -1 &&
               !strcmp(err, want),
           "drain into a newer schema: %s", err);
}

// tests/fixtures/hot_journal: rank 1's trace from a run of tests/cli/attach.sh's case (a)
// that CI once failed, taken as the run left it. The launcher's SIGTERM reached rank 1 inside
// its probe's last transaction (tracedb_close switching the trace out of WAL), after the
// journal's commit record was synced and before the journal was deleted: rank1.db-journal is
// hot, and a read-only reader can read nothing until SQLite rolls it back. Copied to dir; the
// extended code of a read-only read there, to show the fixture is what it claims.
static int copy_hot_journal(const char *dir) {
    char db_path[300], journal[300];
    snprintf(db_path, sizeof db_path, "%s/rank1.db", dir);
    snprintf(journal, sizeof journal, "%s/rank1.db-journal", dir);
    mkdir(dir, 0755);
    copy_file("tests/fixtures/hot_journal/rank1.db", db_path);
    copy_file("tests/fixtures/hot_journal/rank1.db-journal", journal);
    sqlite3 *db = db_open(db_path);
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s), sqlite3_finalize(s);
    rc = rc == SQLITE_ROW ? SQLITE_OK : sqlite3_extended_errcode(db);
    sqlite3_close(db);
    return rc;
}

// The hot journal: probe_db_check (every reader's first step) rolls it back, so the report
// reads every event rank 1 committed and its last commit (closed = clean); the drain, which
// checks before it writes, takes it too. Before, both failed with "attempt to write a readonly
// database": the launcher could not drain rank 1, and `ddpdbg report` dropped it and
// diagnosed the field report's case as unused on all ranks.
static void test_hot_journal(void) {
    char err[512], closed[32];
    EXPECT(copy_hot_journal(at("hot")) == SQLITE_READONLY_ROLLBACK,
           "the fixture: a hot journal a read-only reader cannot get past");
    EXPECT(probe_db_check(at("hot/rank1.db"), err, sizeof err) == 0, "probe_db_check: %s", err);
    EXPECT(access(at("hot/rank1.db-journal"), F_OK) != 0, "the journal is rolled back and gone");
    sqlite3 *db = db_open(at("hot/rank1.db"));
    EXPECT(q_int(db, "SELECT count(*) FROM events") == 118 &&
               q_int(db, "SELECT max(seq) FROM events") == 162,
           "every committed event is there");
    EXPECT(!strcmp(q_text(db, closed, sizeof closed, "SELECT value FROM meta WHERE key = 'closed'"),
                   "clean"),
           "rank 1's last commit: closed = %s", closed);
    sqlite3_close(db);

    EXPECT(copy_hot_journal(at("hot2")) == SQLITE_READONLY_ROLLBACK, "the fixture again");
    ProbeRing *r = probe_ring_create(at("hot2/rank1.ring"), 256, 1, err, sizeof err);
    EXPECT(r, "create: %s", err);
    if (!r) return;
    for (int64_t c = 1; c <= 163; c++) // seqs 1..163: the trace has up to 162
        probe_ring_emit(r, PROBE_GRAD_READY, 9, 0, 0, 0, c, 0, NULL, 0);
    probe_ring_close(r);
    ProbeDrainReport rep;
    EXPECT(probe_drain(at("hot2/rank1.ring"), at("hot2/rank1.db"), &rep, err, sizeof err) == 0 &&
               rep.inserted == 1,
           "the drain: %s (inserted %llu)", err, (unsigned long long)rep.inserted);
    db = db_open(at("hot2/rank1.db"));
    EXPECT(q_int(db, "SELECT count(*) FROM events") == 119 &&
               !strcmp(q_text(db, closed, sizeof closed,
                              "SELECT value FROM meta WHERE key = 'closed'"),
                       "drained"),
           "drained: 119 events, closed = %s", closed);
    sqlite3_close(db);
}

// A trace whose b-trees are sound (quick_check passes) but whose meta index lacks rows the
// table has (tests/fixtures/fuzz/trace/index_lacks_rows_1.db, found by make fuzz): a reader
// takes it; the drain refuses it, since its INSERT OR REPLACE through that index used to
// leave the meta table's rowids out of order, a trace that no reader would then open.
static void test_index_lacks_rows(void) {
    char err[512];
    copy_file("tests/fixtures/fuzz/trace/index_lacks_rows_1.db", at("index.db"));
    EXPECT(probe_db_check(at("index.db"), err, sizeof err) == 0, "a reader takes it: %s", err);
    ProbeRing *r = probe_ring_create(at("index.ring"), 64, 0, err, sizeof err);
    probe_ring_emit(r, PROBE_GRAD_READY, 0, 0, 0, 0, 0, 0, NULL, 0);
    probe_ring_close(r);
    EXPECT(probe_drain(at("index.ring"), at("index.db"), NULL, err, sizeof err) == -1 &&
               strstr(err, at("index.db")) && strstr(err, "missing from index"),
           "the drain refuses it: %s", err);
    EXPECT(probe_db_check(at("index.db"), err, sizeof err) == 0, "and leaves it as it was: %s",
           err);
}

static void test_unwritable_dir(void) {
    write_file(at("blocker"), "x", 1);
    char dir[256], out[2048];
    snprintf(dir, sizeof dir, "%s/traces", at("blocker"));
    capture_stderr(at("unwritable.err"));
    ProbeConfig cfg = {.dir = dir, .rank = 0};
    Probe *p = probe_open(&cfg);
    probe_emit(p, PROBE_GRAD_READY, 0, 0, 0, 0, 0, "ignored");
    probe_emitf(p, PROBE_ERROR, 0, 0, 0, 0, 0, "%s", "ignored");
    probe_meta(p, "k", "v");
    probe_set_phase(p, PROBE_PHASE_FORWARD, 0);
    probe_close(p);
    captured(at("unwritable.err"), out, sizeof out);
    EXPECT(!p, "probe_open returns NULL (off)");
    EXPECT(count_lines(out) == 1 && strstr(out, dir) && strstr(out, "Not a directory") &&
               strstr(out, "probe is off"),
           "one warning naming the directory and the reason: '%s'", out);
    EXPECT(!probe_stats(p).on, "an off probe reports off");

    if (geteuid() != 0) { // root writes anywhere: only a file in the way stops it
        mkdir(at("readonly"), 0555);
        snprintf(dir, sizeof dir, "%s", at("readonly"));
        capture_stderr(at("unwritable.err"));
        p = probe_open(&(ProbeConfig){.dir = dir});
        captured(at("unwritable.err"), out, sizeof out);
        EXPECT(!p && count_lines(out) == 1 && strstr(out, dir) && strstr(out, "Permission denied"),
               "'%s'", out);
    }
}

// The database's file may not grow past a limit (as on a full disk): the writer fails, the
// probe warns once and turns off, and the "training" goes on to its end.
static void test_disk_full(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); // the write then fails with EFBIG instead of killing us
        capture_stderr(at("full.err"));
        ProbeConfig cfg = {.dir = at("full"), .rank = 0, .flush_ms = 1};
        Probe *p = probe_open(&cfg);
        if (!p) _exit(3);
        struct rlimit lim = {256 * 1024, 256 * 1024};
        setrlimit(RLIMIT_FSIZE, &lim);
        char text[200];
        memset(text, 'e', sizeof text - 1);
        text[sizeof text - 1] = 0;
        for (int it = 0; it < 400; it++) {
            for (int k = 0; k < 20; k++)
                probe_emit(p, PROBE_ERROR, it, k, 0, 0, 0, text);
            usleep(500);
        }
        bool on = probe_stats(p).on;
        probe_close(p);
        char out[4096];
        captured(at("full.err"), out, sizeof out);
        int lines = count_lines(out);
        bool said = strstr(out, "rank0.db") && strstr(out, "probe is off");
        if (on || lines != 1 || !said) fprintf(stderr, "on %d, %d lines: %s", on, lines, out);
        _exit(on ? 4 : lines != 1 || !said ? 5 : 0);
    }
    int status;
    waitpid(pid, &status, 0);
    EXPECT(
        WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "a full disk turns the probe off with one warning and training ends normally (status 0x%x)",
        status);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/test_probe.XXXXXX");
    REQUIRE(mkdtemp(tmp), "mkdtemp %s: %s", tmp, strerror(errno));
    test_threads_conserved();
    test_processes_conserved();
    test_overrun_counted();
    test_burst_wakes_writer();
    test_kill9_drained();
    test_drain_in_flight();
    test_drain_damaged();
    test_tables_and_text();
    test_bad_ring();
    test_bad_db();
    test_index_lacks_rows();
    test_hot_journal();
    test_unwritable_dir();
    test_disk_full();
    nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return expect_report();
}
