/* test_comm_nccl.c -- the NCCL process group and pg_new's dispatch. Everywhere: backend names,
 * argument errors, a 1-rank Gloo group through pg_new, and that pg_new("nccl") fails with its
 * documented line when the build has no NCCL or no GPU is visible; then exit 77. With a GPU:
 * 2 ranks forked over a Store, as in test_comm.c: two allreduces in flight (one growing the
 * staging buffers), a zero-length one, broadcast from rank 1, allgather, a barrier, pg_seq;
 * a peer that exits makes the survivor's wait fail within the timeout; a peer that stays
 * alive but never launches gives PyTorch's watchdog line, naming the oldest collective.
 * The parent never touches CUDA (a CUDA context does not survive fork): even the probe for a
 * GPU runs in a child. With fewer GPUs than ranks both ranks use device 0; NCCL refuses two
 * ranks of one communicator on one GPU of one host, so there each rank claims a host of its
 * own through the opt-in (PgOptions.nccl_hostid_per_rank) and they talk over sockets on lo.
 * Tensor data in CUDA memory (PgMemory): 2 NCCL ranks reduce and broadcast device buffers in
 * place, each written by an asynchronous copy on the compute stream launched just before the
 * collective (the event ordering must make the collective see it); 3 Gloo ranks on the GPUs
 * there are (one, on the test machine) do the same through host staging. */
#include "trainer/dist/comm.h"

#include "tests/ddp_harness.h" // harness_free_port
#include "tests/expect.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef DDPDBG_HAVE_NCCL
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
const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
#endif

#define TOKEN "comm-nccl-test"
#define STORE_TIMEOUT_MS 30000 // covers CUDA and NCCL start-up on every rank
// A group's timeout also bounds its joining (NCCL's start-up: seconds on a cold machine), so
// even the timeout tests use several seconds.
#define TIMEOUT_MS 20000
#define NO_NCCL_LINE                                                                               \
    "backend=nccl: this build has no NCCL (built without CUDA; rebuild where /usr/local/cuda "   \
    "has nccl.h)"
#define NO_DEVICE_PREFIX "backend=nccl: no CUDA device visible (cudaGetDeviceCount: "
// The probe child's exit status when pg_new("nccl") failed as documented (no NCCL or no GPU).
#define PROBE_NO_GPU 3

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}


static bool starts_with(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

// Set in a rank's child by nccl_env: ranks share a GPU, so each claims a host of its own.
static bool share_gpu;
// Where a rank's tensor data lives (NULL: host arrays); set before run_ranks forks.
static const PgMemory *(*memory_of_rank)(int rank);

// In a rank's child, before any NCCL call: every rank of this test is on this host and lo is
// the one interface every machine has; ranks that must share a GPU pose as separate hosts.
static void nccl_env(int rank, int world) {
    (void)rank;
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
#ifdef DDPDBG_HAVE_NCCL
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && count < world) {
        share_gpu = true;
        setenv("NCCL_NET", "Socket", 0);
    }
#endif
}

// Forks world ranks, each opening the store and a group on backend, then running body;
// returns how many ranks failed. body frees the group itself (the early-exit case must not).
static int run_ranks(const char *backend, int world, int timeout_ms,
                     void (*body)(ProcessGroup *, Store *)) {
    int port = harness_free_port();
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            nccl_env(r, world);
            char err[512];
            Store *s = store_open("127.0.0.1", port, r == 0, world, TOKEN, STORE_TIMEOUT_MS, err,
                                  sizeof err);
            EXPECT(s, "rank %d store: %s", r, err);
            if (s) {
                PgOptions o = {.timeout_ms = timeout_ms,
                               .memory = memory_of_rank ? memory_of_rank(r) : NULL,
                               .nccl_hostid_per_rank = share_gpu};
                ProcessGroup *pg = pg_open(backend, s, r, world, &o, err, sizeof err);
                EXPECT(pg, "rank %d %s group: %s", r, backend, err);
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

// pg_new's dispatch reaches Gloo: one rank, two collectives counted.
static void gloo_alone(ProcessGroup *pg, Store *s) {
    (void)s;
    char err[512];
    EXPECT(!strcmp(pg_backend(pg), "gloo"), "backend '%s'", pg_backend(pg));
    float x[3] = {1, 2, 3};
    PgWork *w = pg_allreduce_sum(pg, x, 3);
    EXPECT(pg_work_wait(w, err, sizeof err) == 0 && x[2] == 3, "1-rank allreduce: %s", err);
    pg_work_free(w);
    EXPECT(pg_barrier(pg, err, sizeof err) == 0, "1-rank barrier: %s", err);
    EXPECT(pg_seq(pg) == 2, "seq %llu after 2 collectives", (unsigned long long)pg_seq(pg));
    pg_free(pg);
}

// In a child: can this machine open an NCCL group? Exits 0 (yes, and a 1-rank group works),
// PROBE_NO_GPU (no, with the documented line for this build), or 1 (anything else).
static void probe_nccl(void) {
    nccl_env(0, 1);
    char err[512] = "";
    Store *s =
        store_open("127.0.0.1", harness_free_port(), true, 1, TOKEN, STORE_TIMEOUT_MS, err, sizeof err);
    EXPECT(s, "probe store: %s", err);
    if (!s) _exit(1);
    ProcessGroup *pg = pg_new("nccl", s, 0, 1, TIMEOUT_MS, err, sizeof err);
    if (!pg) {
        printf("pg_new(\"nccl\"): %s\n", err);
        EXPECT(!strchr(err, '\n'), "one line: '%s'", err);
#ifndef DDPDBG_HAVE_NCCL
        EXPECT(!strcmp(err, NO_NCCL_LINE), "built without NCCL: '%s'", err);
#else
        EXPECT(starts_with(err, NO_DEVICE_PREFIX) && err[strlen(err) - 1] == ')',
               "built with NCCL, the only documented failure is no device: '%s'", err);
#endif
        store_close(s);
        fflush(stdout);
        _exit(expect_failures ? 1 : PROBE_NO_GPU);
    }
    EXPECT(!strcmp(pg_backend(pg), "nccl"), "backend '%s'", pg_backend(pg));
    float x[2] = {5, -1};
    PgWork *w = pg_allreduce_sum(pg, x, 2);
    EXPECT(pg_work_wait(w, err, sizeof err) == 0 && x[0] == 5 && x[1] == -1,
           "1-rank allreduce: %s (%g %g)", err, x[0], x[1]);
    pg_work_free(w);
    EXPECT(pg_seq(pg) == 1, "seq %llu", (unsigned long long)pg_seq(pg));
    pg_free(pg);
    store_close(s);
    fflush(stdout);
    _exit(expect_failures ? 1 : 0);
}

static int run_probe(void) {
    pid_t pid = fork();
    if (pid == 0) probe_nccl();
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) fprintf(stderr, "probe: signal %d\n", WTERMSIG(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// ---- with a GPU: 2 ranks -----------------------------------------------------------------------

static void collectives(ProcessGroup *pg, Store *s) {
    (void)s;
    int rank = pg_rank(pg), world = pg_world(pg);
    char err[512];
    EXPECT(!strcmp(pg_backend(pg), "nccl"), "backend '%s'", pg_backend(pg));
    EXPECT(pg_seq(pg) == 0, "fresh group seq %llu (joining's allreduce is not counted)",
           (unsigned long long)pg_seq(pg));

    // Sums of small integers: exact in float. big outgrows a and is launched while a is in
    // flight, so the staging buffers grow under a running collective.
    enum { N = 1000, BIG = 1 << 20 };
    static float a[N], big[BIG];
    for (int i = 0; i < N; i++) a[i] = (float)(rank * 10 + i);
    for (int i = 0; i < BIG; i++) big[i] = (float)(rank + 1 + i % 7);
    PgWork *wa = pg_allreduce_sum(pg, a, N);
    PgWork *wbig = pg_allreduce_sum(pg, big, BIG);
    float unused = 42;
    PgWork *wzero = pg_allreduce_sum(pg, &unused, 0);
    EXPECT(pg_work_wait(wbig, err, sizeof err) == 0, "allreduce big: %s", err);
    EXPECT(pg_work_test(wa), "a launched first, so it is done once big is");
    EXPECT(pg_work_wait(wa, err, sizeof err) == 0, "allreduce a: %s", err);
    EXPECT(pg_work_wait(wzero, err, sizeof err) == 0 && unused == 42, "zero-length: %s", err);
    pg_work_free(wa);
    pg_work_free(wbig);
    pg_work_free(wzero);
    float rank_sum = (float)(world * (world - 1) / 2);
    int bad_a = 0, bad_big = 0;
    for (int i = 0; i < N; i++) bad_a += a[i] != rank_sum * 10 + (float)(world * i);
    for (int i = 0; i < BIG; i++)
        bad_big += big[i] != rank_sum + (float)world * (float)(1 + i % 7);
    EXPECT(bad_a == 0 && bad_big == 0, "rank %d: %d / %d wrong sums (a[7] = %g, big[9] = %g)",
           rank, bad_a, bad_big, a[7], big[9]);

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
    if (rank == 0) usleep(300000);
    double t0 = now_s();
    EXPECT(pg_barrier(pg, err, sizeof err) == 0, "barrier: %s", err);
    if (rank > 0) EXPECT(now_s() - t0 > 0.2, "rank %d left the barrier early", rank);

    // 3 allreduces, broadcast, allgather, barrier: the rejected broadcast is not one.
    uint64_t seq = pg_seq(pg), seqs[8] = {0};
    EXPECT(seq == 6, "seq %llu after 6 collectives", (unsigned long long)seq);
    EXPECT(pg_allgather(pg, &seq, sizeof seq, seqs, err, sizeof err) == 0, "allgather: %s", err);
    for (int r = 0; r < world; r++)
        EXPECT(seqs[r] == 6, "rank %d saw seq %llu", r, (unsigned long long)seqs[r]);
    pg_free(pg);
}

// Rank 1 leaves without a word once both groups are up; rank 0's allreduce must fail with a
// one-line NCCL error (NCCL saw the peer go: sockets) or the watchdog's (it did not: P2P),
// within the timeout plus the abort, and every later collective with the same line.
#define EXIT_TIMEOUT_MS 5000
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
    EXPECT(took < EXIT_TIMEOUT_MS / 1000.0 + 5, "failure took %.2f s (timeout %d ms)", took,
           EXIT_TIMEOUT_MS);
    EXPECT(starts_with(err, "[Rank 0] ") && strstr(err, "WorkNCCL(SeqNum=1, OpType=ALLREDUCE") &&
               !strchr(err, '\n'),
           "one line naming the rank and the collective: '%s'", err);
    pg_work_free(w);
    char again[512] = "";
    EXPECT(pg_barrier(pg, again, sizeof again) == -1 && !strcmp(again, err),
           "a broken group fails later collectives with the first reason: '%s'", again);
    t0 = now_s();
    pg_free(pg);
    EXPECT(now_s() - t0 < 5, "pg_free of a broken group took %.2f s", now_s() - t0);
}

// The DDP hang: rank 1 stays alive but never launches the allreduce. Rank 0's two allreduces
// both fail with the watchdog's line for the first (the oldest), however they are waited for.
#define SKIP_TIMEOUT_MS 5000
static void peer_skips(ProcessGroup *pg, Store *s) {
    char err[512] = "";
    if (pg_rank(pg) == 1) {
        void *done = NULL;
        EXPECT(store_get(s, "rank0-failed", &done, NULL) == 0, "%s", store_error(s));
        free(done);
        double t0 = now_s();
        pg_free(pg); // its peer aborted: leaving must still be bounded
        EXPECT(now_s() - t0 < SKIP_TIMEOUT_MS / 1000.0 + 5, "rank 1 pg_free took %.2f s",
               now_s() - t0);
        return;
    }
    float x[4] = {1, 2, 3, 4}, y[2] = {5, 6};
    double t0 = now_s();
    PgWork *w1 = pg_allreduce_sum(pg, x, 4);
    PgWork *w2 = pg_allreduce_sum(pg, y, 2);
    EXPECT(!pg_work_test(w1) && !pg_work_test(w2), "done although rank 1 never launched");
    EXPECT(pg_work_wait(w2, err, sizeof err) == -1, "allreduce without rank 1 succeeded");
    double took = now_s() - t0;
    EXPECT(took >= SKIP_TIMEOUT_MS / 1000.0 && took < SKIP_TIMEOUT_MS / 1000.0 + 5,
           "timed out after %.2f s (timeout %d ms)", took, SKIP_TIMEOUT_MS);
    char head[256];
    snprintf(head, sizeof head,
             "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
             "OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=%d) ran for ",
             SKIP_TIMEOUT_MS);
    const char *tail = " milliseconds before timing out.";
    long ran = starts_with(err, head) ? strtol(err + strlen(head), NULL, 10) : -1;
    size_t len = strlen(err), tail_len = strlen(tail);
    EXPECT(ran >= SKIP_TIMEOUT_MS && len > tail_len && !strcmp(err + len - tail_len, tail),
           "the watchdog's line for the oldest collective: '%s'", err);
    char first[512] = "";
    EXPECT(pg_work_wait(w1, first, sizeof first) == -1 && !strcmp(first, err),
           "the first allreduce fails with the same line: '%s'", first);
    EXPECT(pg_seq(pg) == 2, "seq %llu", (unsigned long long)pg_seq(pg));
    pg_work_free(w1);
    pg_work_free(w2);
    EXPECT(store_set(s, "rank0-failed", "", 0) == 0, "%s", store_error(s));
    pg_free(pg);
}

// ---- with a GPU: tensor data in CUDA memory ---------------------------------------------------

#ifdef DDPDBG_HAVE_NCCL
static cudaStream_t compute; // the rank's compute stream

// As the trainer's CUDA backend copies: after the compute stream's work, before later work.
static void cuda_to_host(void *dst, const void *src, size_t bytes) {
    cudaStreamSynchronize(compute);
    EXPECT(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "to_host");
}
static void cuda_to_device(void *dst, const void *src, size_t bytes) {
    cudaStreamSynchronize(compute);
    EXPECT(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "to_device");
}
static void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    return cudaMallocHost(&p, bytes) == cudaSuccess ? p : NULL;
}
static void cuda_host_free(void *p) { cudaFreeHost(p); }

static PgMemory cuda_memory;
static const PgMemory *cuda_memory_of_rank(int rank) {
    int count = 1;
    cudaGetDeviceCount(&count);
    cudaSetDevice(rank % count);
    EXPECT(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess, "stream");
    cuda_memory = (PgMemory){.name = "cuda", .cuda = true, .cuda_device = rank % count,
                             .stream = compute, .to_host = cuda_to_host,
                             .to_device = cuda_to_device, .host_alloc = cuda_host_alloc,
                             .host_free = cuda_host_free};
    return &cuda_memory;
}

// An allreduce of device data written by an asynchronous copy on the compute stream launched
// just before it, a zero-length one, and a broadcast from rank 1; on either backend.
static void device_collectives(ProcessGroup *pg, Store *s) {
    (void)s;
    int rank = pg_rank(pg), world = pg_world(pg);
    char err[512];
    enum { N = 1 << 22 };
    float *dev = NULL, *host = NULL;
    EXPECT(cudaMalloc((void **)&dev, N * sizeof(float)) == cudaSuccess &&
               cudaMallocHost((void **)&host, N * sizeof(float)) == cudaSuccess,
           "rank %d: device and pinned buffers", rank);
    for (int round = 1; round <= 2; round++) {
        for (int i = 0; i < N; i++) host[i] = (float)(rank + round + i % 5);
        cudaMemcpyAsync(dev, host, N * sizeof(float), cudaMemcpyHostToDevice, compute);
        PgWork *w = pg_allreduce_sum_device(pg, dev, N); // must wait for the copy
        EXPECT(pg_work_wait(w, err, sizeof err) == 0, "rank %d %s allreduce: %s", rank,
               pg_backend(pg), err);
        pg_work_free(w);
        cudaStreamSynchronize(compute);
        cudaMemcpy(host, dev, N * sizeof(float), cudaMemcpyDeviceToHost);
        int bad = 0;
        float ranks = (float)(world * (world - 1) / 2);
        for (int i = 0; i < N; i++) bad += host[i] != ranks + (float)world * (round + i % 5);
        EXPECT(bad == 0, "rank %d %s round %d: %d wrong sums (host[3] = %g)", rank,
               pg_backend(pg), round, bad, host[3]);
    }
    PgWork *w0 = pg_allreduce_sum_device(pg, dev, 0);
    EXPECT(pg_work_wait(w0, err, sizeof err) == 0, "zero-length: %s", err);
    pg_work_free(w0);
    for (int i = 0; i < 8; i++) host[i] = (float)(100 * rank + i);
    cudaMemcpyAsync(dev, host, 8 * sizeof(float), cudaMemcpyHostToDevice, compute);
    EXPECT(pg_broadcast_device(pg, dev, 8, 1, err, sizeof err) == 0, "broadcast: %s", err);
    cudaStreamSynchronize(compute);
    cudaMemcpy(host, dev, 8 * sizeof(float), cudaMemcpyDeviceToHost);
    EXPECT(host[0] == 100 && host[7] == 107, "rank %d %s broadcast from 1: %g %g", rank,
           pg_backend(pg), host[0], host[7]);
    EXPECT(pg_seq(pg) == 4, "seq %llu", (unsigned long long)pg_seq(pg));
    pg_free(pg);
    cudaFree(dev);
    cudaFreeHost(host);
}
#endif

int main(void) {
    // Everywhere, touching no GPU: pg_new refuses before any backend runs.
    char err[512] = "";
    EXPECT(!pg_new("mpi", NULL, 0, 1, 1000, err, sizeof err) &&
               !strcmp(err, "backend=mpi: expected gloo or nccl"),
           "unknown backend: '%s'", err);
    EXPECT(!pg_new(NULL, NULL, 0, 1, 1000, err, sizeof err) && strstr(err, "expected gloo or nccl"),
           "no backend: '%s'", err);
    EXPECT(!pg_new("nccl", NULL, 2, 2, 1000, err, sizeof err) &&
               starts_with(err, "backend=nccl: rank 2 of world 2"),
           "rank out of range: '%s'", err);
    EXPECT(!pg_new("gloo", NULL, 0, 1, 0, err, sizeof err) && strstr(err, "positive timeout"),
           "zero timeout: '%s'", err);
    EXPECT(run_ranks("gloo", 1, TIMEOUT_MS, gloo_alone) == 0, "1-rank Gloo group via pg_new");

    int probe = run_probe();
    EXPECT(probe == 0 || probe == PROBE_NO_GPU, "probe exited %d", probe);
    if (probe != 0) {
        if (expect_failures) return expect_report();
        SKIP("pg_new(\"nccl\") fails as documented (no NCCL in this build, or no GPU); the "
             "2-rank NCCL checks need a GPU");
    }
    EXPECT(run_ranks("nccl", 2, TIMEOUT_MS, collectives) == 0, "2 ranks");
    EXPECT(run_ranks("nccl", 2, EXIT_TIMEOUT_MS, peer_exits) == 0, "peer exits early");
    EXPECT(run_ranks("nccl", 2, SKIP_TIMEOUT_MS, peer_skips) == 0, "peer skips a collective");
#ifdef DDPDBG_HAVE_NCCL
    memory_of_rank = cuda_memory_of_rank;
    EXPECT(run_ranks("nccl", 2, TIMEOUT_MS, device_collectives) == 0, "NCCL on device memory");
    EXPECT(run_ranks("gloo", 3, TIMEOUT_MS, device_collectives) == 0,
           "3 Gloo ranks staging device memory");
    memory_of_rank = NULL;
#endif
    return expect_report();
}
