/* test_comm_device.c -- tensor data on a device through the process group (comm.h's PgMemory),
 * on the CPU. The device here is fake: its memory is mapped PROT_NONE and opened only inside
 * its own to_host/to_device copies, so a collective that read or wrote device data without
 * them would die of SIGSEGV at that line. Over Gloo, 2 and 3 forked ranks: allreduces (two in
 * flight, an empty one, one completed through pg_work_test) and a broadcast from rank 1 reach
 * the device data only through one copy out and one copy back each, of exactly the data's
 * bytes; the staging buffers are reused (two allocations for any number of collectives with
 * two in flight) and all freed with the group; a peer that dies leaves the survivor's device
 * data untouched (no copy back of a failed collective); 3 ranks on the trainer's own fake
 * device backend (pg_memory_of_backend). Then what needs no peer: PyTorch's
 * default timeouts, the nccl_hostid option's values, NCCL's refusal of non-CUDA memory and of
 * a bad DDPDBG_NCCL_HOSTID (both before any CUDA call), and the NCCL join's id exchange,
 * whose ready time (the start of the joining deadline) comes after a slow store wait. */
#include "trainer/dist/comm.h"

#include "kernels/backend.h" // backend_need(DEV_FAKE): helper B1's fake device
#include "kernels/base.h"    // CHECK
#include "tests/ddp_harness.h" // harness_free_port
#include "tests/expect.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "comm-device-test"
#define TIMEOUT_MS 5000
#define DEVICE_BYTES (1 << 20)

// ---- the fake device: one PROT_NONE mapping, opened only while it copies ----------------------

static struct {
    uint8_t *base;
    size_t used;
    int to_host, to_device, host_allocs, host_frees;
    size_t bytes_to_host, bytes_to_device;
} dev;

static void device_open(void) {
    dev.base = mmap(NULL, DEVICE_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(dev.base != MAP_FAILED, "mmap");
}

static float *device_alloc(size_t n) {
    CHECK(dev.used + n * sizeof(float) <= DEVICE_BYTES, "fake device full");
    float *p = (float *)(dev.base + dev.used);
    dev.used += (n * sizeof(float) + 63) & ~(size_t)63;
    return p;
}

static bool on_device(const void *p) {
    return (const uint8_t *)p >= dev.base && (const uint8_t *)p < dev.base + DEVICE_BYTES;
}

static void fake_to_host(void *dst, const void *src, size_t bytes) {
    CHECK(on_device(src) && !on_device(dst), "to_host: from the device to the host");
    mprotect(dev.base, DEVICE_BYTES, PROT_READ);
    memcpy(dst, src, bytes);
    mprotect(dev.base, DEVICE_BYTES, PROT_NONE);
    dev.to_host++, dev.bytes_to_host += bytes;
}

static void fake_to_device(void *dst, const void *src, size_t bytes) {
    CHECK(on_device(dst) && !on_device(src), "to_device: from the host to the device");
    mprotect(dev.base, DEVICE_BYTES, PROT_READ | PROT_WRITE);
    memcpy(dst, src, bytes);
    mprotect(dev.base, DEVICE_BYTES, PROT_NONE);
    dev.to_device++, dev.bytes_to_device += bytes;
}

static void *fake_host_alloc(size_t bytes) {
    dev.host_allocs++;
    return malloc(bytes);
}

static void fake_host_free(void *p) {
    dev.host_frees++;
    free(p);
}

static const PgMemory fake_memory = {.name = "fake",
                                     .to_host = fake_to_host,
                                     .to_device = fake_to_device,
                                     .host_alloc = fake_host_alloc,
                                     .host_free = fake_host_free};

// The test's own view of device data (a copy, counted like any other: callers subtract).
static void peek(float *out, const float *device, int64_t n) {
    fake_to_host(out, device, (size_t)n * sizeof(float));
}

static void poke(float *device, const float *in, int64_t n) {
    fake_to_device(device, in, (size_t)n * sizeof(float));
}

// ---- ranks -------------------------------------------------------------------------------------

static PgMemory backend_memory;

// Forks world ranks that each open a store and a Gloo group and run body. on_backend: the
// group's memory is the trainer's fake device backend (pg_memory_of_backend), else this
// file's own fake device.
static int run_ranks(int world, int timeout_ms, bool on_backend,
                     void (*body)(ProcessGroup *, Store *)) {
    int port = harness_free_port();
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            signal(SIGPIPE, SIG_IGN); // comm.h: a dead peer must be an error, not a signal
            const PgMemory *m = &fake_memory;
            if (on_backend) {
                m = pg_memory_of_backend(backend_need(DEV_FAKE), -1, NULL, &backend_memory);
                EXPECT(m && !strcmp(m->name, "fake") && !m->cuda, "the fake backend's memory");
            } else {
                device_open();
            }
            char err[512];
            Store *s = store_open("127.0.0.1", port, r == 0, world, TOKEN, TIMEOUT_MS, err,
                                  sizeof err);
            EXPECT(s, "rank %d store: %s", r, err);
            if (s && m) {
                PgOptions o = {.timeout_ms = timeout_ms, .memory = m};
                ProcessGroup *pg = pg_open("gloo", s, r, world, &o, err, sizeof err);
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
        if (WIFSIGNALED(status)) fprintf(stderr, "rank %d: signal %d\n", r, WTERMSIG(status));
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed;
}

enum { SMALL = 1000, LARGE = 30000 };

static void collectives(ProcessGroup *pg, Store *s) {
    (void)s;
    int rank = pg_rank(pg), world = pg_world(pg);
    char err[512];
    float *a = device_alloc(SMALL), *b = device_alloc(LARGE), *c = device_alloc(SMALL);
    static float host[LARGE], got[LARGE];
    for (int i = 0; i < LARGE; i++) host[i] = (float)(rank * 10 + i % 97);
    poke(a, host, SMALL), poke(b, host, LARGE), poke(c, host, SMALL);
    dev.to_host = dev.to_device = 0, dev.bytes_to_host = dev.bytes_to_device = 0;

    // Two in flight, then one completed by test alone; each of three rounds.
    for (int round = 0; round < 3; round++) {
        PgWork *wa = pg_allreduce_sum_device(pg, a, SMALL);
        PgWork *wb = pg_allreduce_sum_device(pg, b, LARGE);
        EXPECT(pg_work_wait(wb, err, sizeof err) == 0, "rank %d wait b: %s", rank, err);
        EXPECT(pg_work_wait(wa, err, sizeof err) == 0, "rank %d wait a: %s", rank, err);
        pg_work_free(wa), pg_work_free(wb);
        PgWork *wc = pg_allreduce_sum_device(pg, c, SMALL);
        while (!pg_work_test(wc)) {
            struct timespec t = {0, 100000};
            nanosleep(&t, NULL);
        }
        pg_work_free(wc); // done and copied back by the test: free copies nothing more
    }
    int copies_out = dev.to_host, copies_in = dev.to_device;
    size_t out_bytes = dev.bytes_to_host, in_bytes = dev.bytes_to_device;
    EXPECT(copies_out == 9 && copies_in == 9,
           "rank %d: one copy out and one back per allreduce: %d and %d", rank, copies_out,
           copies_in);
    size_t want = 3 * (2 * SMALL + LARGE) * sizeof(float);
    EXPECT(out_bytes == want && in_bytes == want, "rank %d: bytes out %zu, back %zu, want %zu",
           rank, out_bytes, in_bytes, want);
    EXPECT(dev.host_allocs == 2, "rank %d: two staging buffers for two in flight, got %d", rank,
           dev.host_allocs);
    int ranks_sum = 10 * world * (world - 1) / 2;
    peek(got, b, LARGE);
    int bad = -1;
    for (int i = 0; i < LARGE && bad < 0; i++) {
        // Round 1 sums rank*10 + i%97 over ranks; rounds 2 and 3 multiply by world.
        double sum = (double)world * world * (ranks_sum + world * (i % 97));
        if (got[i] != (float)sum) bad = i;
    }
    EXPECT(bad < 0, "rank %d: b[%d] = %g", rank, bad, bad < 0 ? 0.0 : got[bad]);
    peek(got, c, SMALL);
    EXPECT(got[5] == got[5 + 97], "rank %d: c agrees with itself", rank);

    // An empty allreduce copies nothing; a broadcast from rank 1 reaches every rank's device.
    dev.to_host = dev.to_device = 0;
    PgWork *w0 = pg_allreduce_sum_device(pg, a, 0);
    EXPECT(pg_work_wait(w0, err, sizeof err) == 0, "rank %d empty: %s", rank, err);
    pg_work_free(w0);
    EXPECT(dev.to_host == 0 && dev.to_device == 0, "rank %d: an empty allreduce copies nothing",
           rank);
    for (int i = 0; i < SMALL; i++) host[i] = (float)(1000 * rank + i);
    poke(a, host, SMALL);
    dev.to_host = dev.to_device = 0;
    EXPECT(pg_broadcast_device(pg, a, SMALL, 1, err, sizeof err) == 0, "rank %d bcast: %s", rank,
           err);
    EXPECT(dev.to_host == (rank == 1) && dev.to_device == 1,
           "rank %d: broadcast copies out on the root only (%d) and back everywhere (%d)", rank,
           dev.to_host, dev.to_device);
    peek(got, a, SMALL);
    EXPECT(got[0] == 1000 && got[SMALL - 1] == 1000 + SMALL - 1,
           "rank %d: rank 1's data arrived: %g %g", rank, got[0], got[SMALL - 1]);
    EXPECT(pg_seq(pg) == 11, "rank %d seq %llu", rank, (unsigned long long)pg_seq(pg));
    int allocs = dev.host_allocs;
    pg_free(pg);
    EXPECT(dev.host_frees == allocs, "rank %d: %d staging buffers, %d freed", rank, allocs,
           dev.host_frees);
}

// Rank 1 exits after the first allreduce; rank 0's second fails and its device data stays.
static void peer_dies(ProcessGroup *pg, Store *s) {
    (void)s;
    int rank = pg_rank(pg);
    char err[512];
    float *a = device_alloc(SMALL), host[SMALL], got[SMALL];
    for (int i = 0; i < SMALL; i++) host[i] = 1.0f;
    poke(a, host, SMALL);
    PgWork *w = pg_allreduce_sum_device(pg, a, SMALL);
    EXPECT(pg_work_wait(w, err, sizeof err) == 0, "rank %d first: %s", rank, err);
    pg_work_free(w);
    if (rank == 1) _exit(expect_failures ? 1 : 0); // no pg_free: gone mid-run
    int back = dev.to_device;
    w = pg_allreduce_sum_device(pg, a, SMALL);
    EXPECT(pg_work_wait(w, err, sizeof err) == -1 && err[0], "survivor's wait fails: '%s'", err);
    pg_work_free(w);
    EXPECT(dev.to_device == back, "a failed allreduce copies nothing back");
    peek(got, a, SMALL);
    EXPECT(got[0] == 2.0f && got[SMALL - 1] == 2.0f, "device data as the first sum left it: %g",
           got[0]);
    pg_free(pg);
}

// The trainer's own fake device (kernels/cpu/backend_fake.c) through pg_memory_of_backend:
// the copies are the backend's, a stray host access faults there too.
static void backend_collectives(ProcessGroup *pg, Store *s) {
    (void)s;
    const Backend *b = backend_need(DEV_FAKE);
    int rank = pg_rank(pg), world = pg_world(pg);
    char err[512];
    enum { N = 5000 };
    static float host[N];
    float *data = b->alloc(N * sizeof(float));
    for (int i = 0; i < N; i++) host[i] = (float)(rank + i % 11);
    b->to_device(data, host, sizeof host);
    PgWork *w = pg_allreduce_sum_device(pg, data, N);
    EXPECT(pg_work_wait(w, err, sizeof err) == 0, "rank %d: %s", rank, err);
    pg_work_free(w);
    EXPECT(pg_broadcast_device(pg, data + 10, 5, 0, err, sizeof err) == 0, "bcast: %s", err);
    b->to_host(host, data, sizeof host);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += host[i] != (float)(world * (world - 1) / 2 + world * (i % 11));
    EXPECT(bad == 0, "rank %d: %d wrong sums on the fake backend (host[3] = %g)", rank, bad,
           host[3]);
    b->free(data);
    pg_free(pg);
}

// ---- without peers -------------------------------------------------------------------------------

static void options(void) {
    EXPECT(pg_default_timeout_ms("nccl") == 600000, "NCCL: PyTorch's 10 minutes");
    EXPECT(pg_default_timeout_ms("gloo") == 1800000, "Gloo: PyTorch's 30 minutes");
    bool on = true;
    char err[256] = "";
    EXPECT(pg_parse_nccl_hostid("x", NULL, &on, err, sizeof err) == 0 && !on, "unset: off");
    EXPECT(pg_parse_nccl_hostid("x", "off", &on, err, sizeof err) == 0 && !on, "off");
    EXPECT(pg_parse_nccl_hostid("x", "rank", &on, err, sizeof err) == 0 && on, "rank");
    EXPECT(pg_parse_nccl_hostid("nccl_hostid", "1", &on, err, sizeof err) == -1 &&
               !strcmp(err, "nccl_hostid=1: expected rank or off"),
           "a bad value: '%s'", err);

    // NCCL refuses memory it cannot read, and a bad opt-in, before touching CUDA (this process
    // forks ranks afterwards, so it must stay CUDA-free).
    PgOptions o = {.timeout_ms = 1000, .memory = &fake_memory};
    EXPECT(!pg_open("nccl", NULL, 0, 2, &o, err, sizeof err), "nccl on fake memory");
#ifdef DDPDBG_HAVE_NCCL
    EXPECT(!strcmp(err, "backend=nccl: tensors on fake memory: NCCL needs CUDA memory"),
           "nccl on fake memory: '%s'", err);
    PgMemory cuda_like = fake_memory;
    cuda_like.name = "cuda", cuda_like.cuda = true;
    o.memory = &cuda_like;
    setenv("DDPDBG_NCCL_HOSTID", "host", 1);
    EXPECT(!pg_open("nccl", NULL, 0, 2, &o, err, sizeof err) &&
               !strcmp(err, "DDPDBG_NCCL_HOSTID=host: expected rank or off"),
           "a bad DDPDBG_NCCL_HOSTID: '%s'", err);
    unsetenv("DDPDBG_NCCL_HOSTID");
#else
    EXPECT(strstr(err, "this build has no NCCL"), "no NCCL: '%s'", err);
#endif
}

// Rank 0 publishes the id DELAY_MS late; rank 1's ready time comes after that, so its joining
// deadline (ready + timeout) lies ahead even with a timeout shorter than the store wait.
static void share_id_after_store_wait(void) {
    enum { DELAY_MS = 600, JOIN_TIMEOUT_MS = 200 };
    int port = harness_free_port();
    pid_t pid = fork();
    if (pid == 0) {
        char err[256];
        Store *s = store_open("127.0.0.1", port, true, 2, TOKEN, TIMEOUT_MS, err, sizeof err);
        usleep(DELAY_MS * 1000);
        char id[128] = "the communicator's id";
        double ready = 0;
        int rc = s ? pg_share_id(s, "pg0/nccl_unique_id", 0, id, sizeof id, &ready, err,
                                 sizeof err)
                   : -1;
        usleep(200 * 1000); // the reader reads before the server goes
        store_close(s);
        _exit(rc == 0 ? 0 : 1);
    }
    char err[256] = "";
    double t0 = pg_now_ms();
    Store *s = store_open("127.0.0.1", port, false, 2, TOKEN, TIMEOUT_MS, err, sizeof err);
    EXPECT(s, "store: %s", err);
    char id[128] = "";
    double ready = 0;
    EXPECT(s && pg_share_id(s, "pg0/nccl_unique_id", 1, id, sizeof id, &ready, err,
                            sizeof err) == 0,
           "share: %s", err);
    double deadline = ready + JOIN_TIMEOUT_MS, now = pg_now_ms();
    EXPECT(!strcmp(id, "the communicator's id"), "the id arrived: '%s'", id);
    EXPECT(ready - t0 >= DELAY_MS - 50, "ready %.0f ms after the wait began, not before rank 0 "
           "published (%d ms)", ready - t0, DELAY_MS);
    EXPECT(deadline > now, "the join's %d ms start after the store wait: %.0f ms left",
           JOIN_TIMEOUT_MS, deadline - now);
    char small[8];
    EXPECT(pg_share_id(s, "pg0/nccl_unique_id", 1, small, sizeof small, &ready, err,
                       sizeof err) == -1 &&
               !strcmp(err, "store key pg0/nccl_unique_id holds 128 bytes: expected 8"),
           "a wrong size: '%s'", err);
    store_close(s);
    int status;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 0 published");
}

int main(void) {
    EXPECT(run_ranks(2, TIMEOUT_MS, false, collectives) == 0, "2 ranks");
    EXPECT(run_ranks(3, TIMEOUT_MS, false, collectives) == 0, "3 ranks");
    EXPECT(run_ranks(2, 3000, false, peer_dies) == 0, "a peer dies");
    EXPECT(run_ranks(3, TIMEOUT_MS, true, backend_collectives) == 0,
           "3 ranks on the trainer's fake device backend");
    PgMemory unused;
    EXPECT(!pg_memory_of_backend(backend_need(DEV_CPU), 0, NULL, &unused),
           "the CPU's tensors are host arrays");
    Backend cuda_like = *backend_need(DEV_FAKE); // CUDA's fields, without a GPU
    cuda_like.dev = DEV_CUDA, cuda_like.name = "cuda";
    int stream_stand_in;
    const PgMemory *m = pg_memory_of_backend(&cuda_like, 1, &stream_stand_in, &unused);
    EXPECT(m && m->cuda && m->cuda_device == 1 && m->stream == &stream_stand_in &&
               m->to_host == cuda_like.to_host && m->host_alloc == pg_pinned_alloc &&
               m->host_free == pg_pinned_free,
           "CUDA memory: NCCL's device and stream, page-locked staging");
#ifdef DDPDBG_HAVE_NCCL
    EXPECT(pg_pinned_alloc && pg_pinned_free, "a build with CUDA's runtime pins its staging");
#else
    EXPECT(!pg_pinned_alloc && !pg_pinned_free, "a build without CUDA's runtime mallocs");
#endif
    options();
    share_id_after_store_wait();
    return expect_report();
}
