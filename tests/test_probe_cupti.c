/* test_probe_cupti.c -- GPU activity in the trace (probe/cupti.h). Everywhere: synthetic
 * activity records through probe/gpu_activity (the path every CUPTI record takes) into a real
 * trace: NCCL kernels tied to their collective by stream and launch order, whatever their
 * correlation ids (as from NCCL's own thread), on two streams at once, an NCCL kernel with no
 * collective waiting counted untied, the per-step bound on other rows (counted by step start,
 * records arriving late and out of step order, a stream of collectives exempt), the bound
 * from DDPDBG_GPU_ROWS_PER_STEP; then, with tracing off
 * (a NULL probe) start succeeds and records nothing, and correlate push/pop and stop do nothing
 * before a start; then, in a child (the parent never touches CUDA: a context does not survive
 * fork), start on a real probe fails with its documented line and one warning when the build
 * has no CUPTI or no GPU is visible, the training-side calls stay no-ops and the trace closes
 * clean with no GPU rows; then exit 77. With a GPU: a memset and a copy each way through the
 * CUDA runtime are recorded with their bytes and host-clock times inside the window the test
 * saw on CLOCK_REALTIME, and two NCCL ranks (forked as in test_comm_nccl.c) allreduce
 * ROUNDS times: rank 0's trace ties, through GPU_CORRELATION, each round's staging copies to
 * its sequence number, and exactly one NCCL kernel to each round by stream order (an earlier
 * round may launch from NCCL's own thread while it connects, which no correlation reaches),
 * none left untied. */
#include "probe/cupti.h"
#include "probe/gpu_activity.h"
#include "probe/probe.h"
#include "trainer/dist/comm.h"

#include "tests/ddp_harness.h" // harness_free_port
#include "tests/expect.h"
#include "tests/sqlite_query.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef DDPDBG_HAVE_CUPTI
#include <cuda_runtime.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(UNDER_ASAN)
// CUDA maps memory where ASan keeps its shadow gap: without this, CUDA fails under make debug.
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

#define TOKEN "probe-cupti-test"
#define STORE_TIMEOUT_MS 30000 // covers CUDA and NCCL start-up on every rank
#define PG_TIMEOUT_MS 20000
// The probe child's exit status when start failed as documented (no CUPTI or no GPU).
#define PROBE_NO_GPU 3
// Bytes of the test's own memset and copies: a size NCCL's own copies do not have.
#define TEST_BYTES 77777
#define ROUNDS 3              // allreduces, seq 1..ROUNDS
#define ALLREDUCE_NUMEL 65536 // floats per allreduce
// How far outside the test's window a GPU time may fall, beyond the clock move's bound:
// CUPTI's own fit of the GPU timer onto the host clock (microseconds in practice).
#define SLACK_NS 1000000

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

static bool starts_with(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

static const char *read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(buf, 1, n - 1, f) : 0;
    buf[len] = 0;
    if (f) fclose(f);
    return buf;
}

static int wait_child(pid_t pid) {
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) fprintf(stderr, "child %d: signal %d\n", (int)pid, WTERMSIG(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// ---- everywhere ---------------------------------------------------------------------------------

// Tracing off, and a real probe that never started recording: nothing happens, no CUDA is
// touched (the parent stays CUDA-free).
static void test_off_is_a_no_op(void) {
    char err[64] = "untouched";
    EXPECT(probe_cupti_start(NULL, err, sizeof err) == 0 && !strcmp(err, "untouched"),
           "tracing off: start is a no-op (err '%s')", err);
    probe_cupti_correlate_push(7);
    probe_cupti_correlate_pop();
    probe_cupti_correlate_pop(); // a pop without its push is ignored
    probe_cupti_stop(NULL);

    ProbeConfig cfg = {.dir = at("idle"), .rank = 0};
    Probe *p = probe_open(&cfg);
    EXPECT(p, "probe_open %s", cfg.dir);
    probe_cupti_stop(p); // not recording: writes nothing
    probe_close(p);
    sqlite3 *db = db_open(at("idle/rank0.db"));
    EXPECT(q_int(db, "SELECT count(*) FROM meta WHERE key LIKE 'cupti%%'") == 0,
           "a probe that never recorded GPU activity has no cupti meta");
    sqlite3_close(db);
}

// ---- everywhere: synthetic records through gpu_activity ------------------------------------------

enum { COMPUTE = 3, COMM_A = 7, COMM_B = 9, CAP = 4 };

static GpuRecord kernel(uint32_t stream, uint32_t corr, int64_t start, const char *name) {
    return (GpuRecord){.kind = GPU_RECORD_KERNEL, .correlation = corr, .stream = stream,
                       .start_ns = start, .end_ns = start + 10, .name = name};
}

static void test_synthetic_records(void) {
    ProbeConfig cfg = {.dir = at("synthetic"), .rank = 0};
    Probe *p = probe_open(&cfg);
    EXPECT(p, "probe_open %s", cfg.dir);
    GpuActivity *g = gpu_activity_new(p, CAP);
    const char *ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
    // Launch order: seq 0 (joining), 1, 2 on stream A; 3 on stream B.
    gpu_activity_collective(g, COMM_A, 0);
    gpu_activity_collective(g, COMM_A, 1);
    gpu_activity_collective(g, COMM_B, 3);
    gpu_activity_collective(g, COMM_A, 2);
    // A record before any step: charged to the time before the first step.
    GpuRecord r = kernel(COMPUTE, 10, 500, "conv_fwd_kernel");
    gpu_activity_record(g, &r);
    gpu_activity_step(g, 0, 1000);
    gpu_activity_step(g, 1, 2000);
    // Kernels of NCCL's thread: correlation ids no push reached, interleaved across streams.
    uint32_t corr_a[3] = {9001, 9002, 9005}, corr_b = 9003;
    for (int k = 0; k < 3; k++) {
        r = kernel(COMM_A, corr_a[k], 1100 + 300 * k, ar);
        gpu_activity_record(g, &r);
        if (k == 1) {
            r = kernel(COMM_B, corr_b, 1450, ar);
            gpu_activity_record(g, &r);
        }
    }
    r = kernel(COMM_A, 9006, 1900, ar); // a fourth NCCL kernel: no collective waits for it
    gpu_activity_record(g, &r);
    r = kernel(COMM_B + 1, 9007, 1950, ar); // NCCL work on a stream none of ours used
    gpu_activity_record(g, &r);
    // Staging copies on a collective's stream: never bounded.
    for (int k = 0; k < 3 * CAP; k++) {
        r = (GpuRecord){.kind = GPU_RECORD_MEMCPY, .correlation = 8000 + k, .stream = COMM_A,
                        .copy_kind = 1, .start_ns = 1200 + k, .end_ns = 1201 + k, .bytes = 64};
        gpu_activity_record(g, &r);
    }
    // Compute kernels: 10 in step 1 arrive first, then 10 of step 0 (late), and memsets.
    for (int k = 0; k < 10; k++) {
        r = kernel(COMPUTE, 100 + k, 2000 + 50 * k, "layernorm_fwd_kernel");
        gpu_activity_record(g, &r);
    }
    for (int k = 0; k < 10; k++) {
        r = kernel(COMPUTE, 200 + k, 1000 + 50 * k, "gemm_kernel");
        gpu_activity_record(g, &r);
    }
    r = (GpuRecord){.kind = GPU_RECORD_MEMSET, .correlation = 300, .stream = COMPUTE,
                    .device = 0, .start_ns = 2600, .end_ns = 2610, .bytes = 4096};
    gpu_activity_record(g, &r); // step 1 is full: filtered
    GpuActivityStats st = gpu_activity_stats(g);
    EXPECT(st.tied == 4 && st.nccl_untied == 2, "tied %llu, untied %llu",
           (unsigned long long)st.tied, (unsigned long long)st.nccl_untied);
    EXPECT(st.filtered == 6 + 6 + 1, "filtered %llu: 6 of each step's 10 kernels, the memset",
           (unsigned long long)st.filtered);
    EXPECT(st.rows == 1 + 5 + 1 + 3 * CAP + 2 * CAP, "rows %llu", (unsigned long long)st.rows);
    gpu_activity_free(g);
    probe_close(p);

    sqlite3 *db = db_open(at("synthetic/rank0.db"));
    // The README's query: each NCCL kernel with its collective.
    const char *tie = "SELECT x.c FROM events k JOIN events x ON x.kind = %d AND x.iter = k.iter "
                      "AND x.a = k.iter AND x.b = 1 WHERE k.kind = %d AND k.iter = %d";
    int64_t want[][2] = {{9001, 0}, {9002, 1}, {9005, 2}, {9003, 3}};
    for (int k = 0; k < 4; k++)
        EXPECT(q_int(db, tie, PROBE_GPU_CORRELATION, PROBE_GPU_KERNEL, (int)want[k][0]) ==
                   want[k][1],
               "NCCL kernel of correlation %lld: collective %lld by its stream's order",
               (long long)want[k][0], (long long)want[k][1]);
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND iter IN (9006, 9007)",
                 PROBE_GPU_CORRELATION) == 0 &&
               q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND iter IN (9006, 9007)",
                     PROBE_GPU_KERNEL) == 2,
           "untied NCCL kernels are written, with no tie");
    EXPECT(q_int(db, "SELECT count(*) FROM events x JOIN events k ON k.kind = %d AND k.iter = "
                     "x.iter WHERE x.kind = %d AND x.seq > k.seq",
                 PROBE_GPU_KERNEL, PROBE_GPU_CORRELATION) == 0,
           "every tie comes before its kernel's row");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND iter BETWEEN 100 AND 109",
                 PROBE_GPU_KERNEL) == CAP &&
               q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND iter BETWEEN 200 AND "
                         "209", PROBE_GPU_KERNEL) == CAP,
           "each step wrote %d compute kernels", CAP);
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND b = %d", PROBE_GPU_MEMCPY,
                 COMM_A) == 3 * CAP,
           "every copy on a collective's stream");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d", PROBE_GPU_MEMSET) == 0,
           "the memset past the bound is not written");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d AND iter = 10 AND c = 500 AND "
                     "d = 510 AND text = 'conv_fwd_kernel'", PROBE_GPU_KERNEL) == 1,
           "a kernel row's columns");
    sqlite3_close(db);

    // One stream of collectives: an NCCL kernel on another stream (NCCL's own) keeps its order.
    g = gpu_activity_new(NULL, 0);
    gpu_activity_collective(g, COMM_A, 5);
    gpu_activity_collective(g, COMM_A, 6);
    r = kernel(COMM_B, 1, 10, ar);
    gpu_activity_record(g, &r);
    r = kernel(COMM_A, 2, 20, ar);
    gpu_activity_record(g, &r);
    r = kernel(COMM_B, 3, 30, ar);
    gpu_activity_record(g, &r);
    st = gpu_activity_stats(g);
    EXPECT(st.tied == 2 && st.nccl_untied == 1, "one stream of collectives: tied %llu, untied %llu",
           (unsigned long long)st.tied, (unsigned long long)st.nccl_untied);
    gpu_activity_free(g);

    // No bound: everything; the environment's bound.
    g = gpu_activity_new(NULL, 0);
    gpu_activity_step(g, 0, 0);
    for (int k = 0; k < 50; k++) {
        r = kernel(COMPUTE, (uint32_t)k, 10 + k, "k");
        gpu_activity_record(g, &r);
    }
    EXPECT(gpu_activity_stats(g).rows == 50 && gpu_activity_stats(g).filtered == 0,
           "0: no bound");
    gpu_activity_free(g);
    unsetenv("DDPDBG_GPU_ROWS_PER_STEP");
    EXPECT(gpu_activity_rows_per_step_from_env() == GPU_ROWS_PER_STEP_DEFAULT, "default");
    setenv("DDPDBG_GPU_ROWS_PER_STEP", "0", 1);
    EXPECT(gpu_activity_rows_per_step_from_env() == 0, "0 from the environment");
    setenv("DDPDBG_GPU_ROWS_PER_STEP", "12", 1);
    EXPECT(gpu_activity_rows_per_step_from_env() == 12, "12 from the environment");
    setenv("DDPDBG_GPU_ROWS_PER_STEP", "many", 1);
    EXPECT(gpu_activity_rows_per_step_from_env() == GPU_ROWS_PER_STEP_DEFAULT,
           "not a count: the default (and a warning)");
    unsetenv("DDPDBG_GPU_ROWS_PER_STEP");
}

// In a child, stderr into a file: can this machine record GPU activity? Exits 0 (yes: start
// succeeded and stop ran), PROBE_NO_GPU (no, and it failed as documented), or 1.
static void probe_child(void) {
    int fd = open(at("probe.stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    ProbeConfig cfg = {.dir = at("probe"), .rank = 0};
    Probe *p = probe_open(&cfg);
    EXPECT(p, "probe_open %s", cfg.dir);
    char err[512] = "";
    int rc = probe_cupti_start(p, err, sizeof err);
    if (rc == 0) {
        probe_cupti_stop(p);
        probe_close(p);
        fflush(stdout);
        _exit(expect_failures ? 1 : 0);
    }
    printf("probe_cupti_start: %s\n", err);
    EXPECT(rc == -1 && !strchr(err, '\n'), "one line: '%s'", err);
#ifndef DDPDBG_HAVE_CUPTI
    EXPECT(!strcmp(err, PROBE_CUPTI_NO_CUPTI_LINE), "built without CUPTI: '%s'", err);
#else
    EXPECT(starts_with(err, PROBE_CUPTI_NO_DEVICE_PREFIX) && err[strlen(err) - 1] == ')',
           "built with CUPTI, the only documented failure here is no device: '%s'", err);
#endif
    // Training goes on: the collective hooks and stop are no-ops, the probe still records.
    probe_cupti_correlate_push(1);
    probe_emit(p, PROBE_FORWARD_BEGIN, 1, 0, 0, 0, 0, NULL);
    probe_cupti_correlate_pop();
    probe_cupti_stop(p);
    probe_close(p);
    fflush(stdout);
    _exit(expect_failures ? 1 : PROBE_NO_GPU);
}

// After a start that failed: one warning naming the reason, a clean trace without GPU rows.
static void expect_failed_start_harmless(void) {
    char text[2048];
    read_text(at("probe.stderr"), text, sizeof text);
    int lines = 0;
    for (const char *s = text; *s; s++)
        lines += *s == '\n';
    EXPECT(lines == 1 && starts_with(text, "warning: probe: GPU activity is off: ") &&
               strstr(text, "; training continues\n"),
           "one warning: '%s'", text);
    sqlite3 *db = db_open(at("probe/rank0.db"));
    EXPECT(q_int(db, "SELECT count(*) FROM meta WHERE key = 'closed' AND value = 'clean'") == 1,
           "the trace closed clean");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = %d", PROBE_FORWARD_BEGIN) == 1,
           "the probe kept recording");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind BETWEEN %d AND %d", PROBE_GPU_KERNEL,
                 PROBE_GPU_CORRELATION) == 0,
           "no GPU rows");
    EXPECT(q_int(db, "SELECT count(*) FROM meta WHERE key LIKE 'cupti%%'") == 0, "no cupti meta");
    sqlite3_close(db);
}

// ---- with a GPU ---------------------------------------------------------------------------------

#ifdef DDPDBG_HAVE_CUPTI

// Before any NCCL call: ranks that must share the one GPU pose as separate hosts and talk over
// sockets on lo (NCCL refuses two ranks of one communicator on one GPU of one host).
static void nccl_env(int rank, int world) {
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && count < world) {
        char host[64];
        snprintf(host, sizeof host, "ddpdbg-test-host-%d", rank);
        setenv("NCCL_HOSTID", host, 1);
        setenv("NCCL_NET", "Socket", 0);
    }
}

static int64_t realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static bool cuda_ok(const char *call, cudaError_t e) {
    EXPECT(e == cudaSuccess, "%s: %s", call, cudaGetErrorString(e));
    return e == cudaSuccess;
}

// Rank 0's own CUDA work: a memset and a copy each way of TEST_BYTES (pinned host memory: one
// DMA each), the window it ran in recorded in meta (test_window_begin_ns, test_window_end_ns).
static void direct_cuda(Probe *p) {
    void *dev = NULL, *host = NULL;
    int64_t begin = realtime_ns();
    if (cuda_ok("cudaMalloc", cudaMalloc(&dev, TEST_BYTES)) &&
        cuda_ok("cudaMallocHost", cudaMallocHost(&host, TEST_BYTES))) {
        memset(host, 1, TEST_BYTES);
        cuda_ok("cudaMemset", cudaMemset(dev, 0, TEST_BYTES));
        cuda_ok("cudaMemcpy HtoD", cudaMemcpy(dev, host, TEST_BYTES, cudaMemcpyHostToDevice));
        cuda_ok("cudaMemcpy DtoH", cudaMemcpy(host, dev, TEST_BYTES, cudaMemcpyDeviceToHost));
        cuda_ok("cudaDeviceSynchronize", cudaDeviceSynchronize());
    }
    int64_t end = realtime_ns();
    cudaFreeHost(host);
    cudaFree(dev);
    probe_meta(p, "test_window_begin_ns", "%lld", (long long)begin);
    probe_meta(p, "test_window_end_ns", "%lld", (long long)end);
}

// One rank of the 2-rank run: rank 0 records GPU activity into tmp/gpu around its own CUDA work
// and ROUNDS allreduces (seq 1..ROUNDS); rank 1 only takes part in the allreduces.
static void gpu_rank(int rank, int port) {
    nccl_env(rank, 2);
    Probe *p = NULL;
    char err[512] = "";
    if (rank == 0) {
        ProbeConfig cfg = {.dir = at("gpu"), .rank = 0};
        p = probe_open(&cfg);
        EXPECT(p, "probe_open %s", cfg.dir);
        EXPECT(probe_cupti_start(p, err, sizeof err) == 0, "start: %s", err);
    }
    Store *s =
        store_open("127.0.0.1", port, rank == 0, 2, TOKEN, STORE_TIMEOUT_MS, err, sizeof err);
    EXPECT(s, "rank %d store: %s", rank, err);
    if (rank == 0) direct_cuda(p);
    ProcessGroup *pg = s ? pg_new("nccl", s, rank, 2, PG_TIMEOUT_MS, err, sizeof err) : NULL;
    EXPECT(!s || pg, "rank %d nccl group: %s", rank, err);
    for (int round = 1; pg && round <= ROUNDS; round++) {
        static float x[ALLREDUCE_NUMEL];
        for (int i = 0; i < ALLREDUCE_NUMEL; i++)
            x[i] = (float)(rank + round);
        PgWork *w = pg_allreduce_sum(pg, x, ALLREDUCE_NUMEL);
        float want = (float)(1 + 2 * round);
        EXPECT(pg_work_wait(w, err, sizeof err) == 0 && x[0] == want &&
                   x[ALLREDUCE_NUMEL - 1] == want,
               "rank %d allreduce %d: %s (%g)", rank, round, err, x[0]);
        pg_work_free(w);
    }
    if (pg) {
        EXPECT(pg_seq(pg) == ROUNDS, "seq %llu", (unsigned long long)pg_seq(pg));
        pg_free(pg);
    }
    if (s) store_close(s);
    probe_cupti_stop(p);
    probe_close(p);
    fflush(stdout);
    _exit(expect_failures ? 1 : 0);
}

static void run_gpu_ranks(void) {
    int port = harness_free_port();
    pid_t pids[2];
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0) gpu_rank(r, port);
    for (int r = 0; r < 2; r++)
        EXPECT(wait_child(pids[r]) == 0, "GPU rank %d failed", r);
}

// Every row of kind with text bytes (and a = copy_kind unless -1) lies in the window.
static void expect_in_window(sqlite3 *db, ProbeKind kind, int copy_kind, int64_t begin, int64_t end,
                             int64_t slack) {
    char where[200];
    if (copy_kind >= 0)
        snprintf(where, sizeof where, "kind = %d AND text = '%d' AND a = %d", kind, TEST_BYTES,
                 copy_kind);
    else
        snprintf(where, sizeof where, "kind = %d AND text = '%d'", kind, TEST_BYTES);
    int64_t n = q_int(db, "SELECT count(*) FROM events WHERE %s", where);
    EXPECT(n >= 1, "%s %s: %lld rows", probe_kind_name(kind), where, (long long)n);
    int64_t first = q_int(db, "SELECT min(c) FROM events WHERE %s", where);
    int64_t last = q_int(db, "SELECT max(d) FROM events WHERE %s", where);
    printf("%s (a %d): start %+.1f us after the window opened, end %+.1f us before it closed\n",
           probe_kind_name(kind), copy_kind, (first - begin) / 1e3, (end - last) / 1e3);
    EXPECT(
        q_int(db,
              "SELECT count(*) FROM events WHERE %s AND NOT (c >= %lld AND c <= d AND d <= %lld)",
              where, (long long)(begin - slack), (long long)(end + slack)) == 0,
        "%s: every start and end inside [%lld, %lld] +- %lld ns", where, (long long)begin,
        (long long)end, (long long)slack);
}

static void expect_gpu_trace(void) {
    sqlite3 *db = db_open(at("gpu/rank0.db"));
    int64_t begin = q_int(db, "SELECT value FROM meta WHERE key = 'test_window_begin_ns'");
    int64_t end = q_int(db, "SELECT value FROM meta WHERE key = 'test_window_end_ns'");
    int64_t bound = q_int(db, "SELECT value FROM meta WHERE key = 'cupti_clock_bound_ns'");
    int64_t offset = q_int(db, "SELECT value FROM meta WHERE key = 'cupti_clock_offset_ns'");
    printf("clock move: offset %lld ns, bound %lld ns; window %.1f us\n", (long long)offset,
           (long long)bound, (end - begin) / 1e3);
    EXPECT(begin > 0 && end >= begin, "the window was recorded (%lld, %lld)", (long long)begin,
           (long long)end);
    EXPECT(bound >= 0 && bound < 1000000, "clock bound %lld ns", (long long)bound);
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'cupti_dropped'") == 0, "no drops");
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'cupti_events'") ==
               q_int(db, "SELECT count(*) FROM events WHERE kind BETWEEN %d AND %d",
                     PROBE_GPU_KERNEL, PROBE_GPU_CORRELATION),
           "cupti_events counts the GPU rows");
    int64_t slack = bound + SLACK_NS;
    expect_in_window(db, PROBE_GPU_MEMSET, -1, begin, end, slack);
    expect_in_window(db, PROBE_GPU_MEMCPY, 1, begin, end, slack); // CUPTI_ACTIVITY_MEMCPY_KIND_HTOD
    expect_in_window(db, PROBE_GPU_MEMCPY, 2, begin, end, slack); // DTOH

    // The allreduces: each round's copy in (on our thread) is tied to its seq; NCCL kernels.
    for (int seq = 1; seq <= ROUNDS; seq++) {
        EXPECT(q_int(db,
                     "SELECT count(*) FROM events m JOIN events x ON x.kind = %d AND x.iter = "
                     "m.iter AND x.a = m.iter AND x.c = %d WHERE m.kind = %d AND m.a = 1 AND "
                     "m.text = '%d'",
                     PROBE_GPU_CORRELATION, seq, PROBE_GPU_MEMCPY,
                     ALLREDUCE_NUMEL * (int)sizeof(float)) == 1,
               "collective %d: its host-to-device copy is tied to it", seq);
        // By stream order: exactly one NCCL kernel, whichever thread launched it.
        int64_t by_order = q_int(db,
                                 "SELECT count(*) FROM events k JOIN events x ON x.kind = %d AND "
                                 "x.iter = k.iter AND x.b = 1 AND x.c = %d WHERE k.kind = %d AND "
                                 "k.text LIKE 'nccl%%'",
                                 PROBE_GPU_CORRELATION, seq, PROBE_GPU_KERNEL);
        EXPECT(by_order == 1, "collective %d: %lld NCCL kernels tied by stream order", seq,
               (long long)by_order);
    }
    EXPECT(q_int(db, "SELECT value FROM meta WHERE key = 'cupti_nccl_untied'") == 0,
           "every NCCL kernel found its collective");
    int64_t kernels = q_int(db,
                            "SELECT count(*) FROM events WHERE kind = %d AND text LIKE "
                            "'%%nccl%%' AND c > 0 AND c <= d",
                            PROBE_GPU_KERNEL);
    EXPECT(kernels >= 1, "NCCL kernels with times: %lld", (long long)kernels);
    EXPECT(q_int(db,
                 "SELECT count(*) FROM events WHERE kind = %d AND text LIKE '\\_Z%%' ESCAPE '\\'",
                 PROBE_GPU_KERNEL) == 0,
           "kernel names are demangled");
    EXPECT(q_int(db,
                 "SELECT count(*) FROM events k JOIN events x ON x.kind = %d AND x.iter = k.iter"
                 " AND x.a = k.iter AND x.c = %d WHERE k.kind = %d AND k.text LIKE '%%nccl%%'",
                 PROBE_GPU_CORRELATION, ROUNDS, PROBE_GPU_KERNEL) >= 1,
           "an NCCL kernel is tied to collective %d (GPU_CORRELATION c = %d)", ROUNDS, ROUNDS);
    sqlite3_close(db);
}

#endif

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/test_probe_cupti.XXXXXX");
    REQUIRE(mkdtemp(tmp), "mkdtemp %s: %s", tmp, strerror(errno));
    test_off_is_a_no_op();
    test_synthetic_records();

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) probe_child();
    int probe = wait_child(pid);
    EXPECT(probe == 0 || probe == PROBE_NO_GPU, "probe child exited %d", probe);
    if (probe == PROBE_NO_GPU) expect_failed_start_harmless();
    if (probe != 0) {
        nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (expect_failures) return expect_report();
        SKIP("probe_cupti_start fails as documented (no CUPTI in this build, or no GPU); the "
             "GPU activity checks need a GPU");
    }
#ifdef DDPDBG_HAVE_CUPTI
    run_gpu_ranks();
    expect_gpu_trace();
#endif
    nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return expect_report();
}
