/* test_fake_device.c -- the fake device (kernels/cpu/backend_fake.c, fake_memory.c) and the
 * arena layout it proves (trainer/tensor.h):
 * - the table: every field the CPU table fills is filled (a Backend field added without
 *   `make fake-table` fails here);
 * - kernels and copies reach the memory: fill, axpy, to_host/to_device round trips;
 * - a stray host read, and a stray host write, of device memory die by SIGSEGV in a child
 *   process, with the handler's line naming fake-device memory; the same read of host memory
 *   (a Tensor header, an op context) does not;
 * - an arena on the fake device: headers and host allocations readable, data not; tensor_read,
 *   tensor_write, tensor_item, tensor_fill and host_map/host_unmap move the values;
 * - device= parsing (trainer/device.h): cpu, fake, 0, cuda:1, lists by LOCAL_RANK, and the
 *   one-line errors (a CUDA device in a build without CUDA included). */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/base.h"
#include "kernels/cpu/fake_memory.h"
#include "tests/expect.h"
#include "trainer/device.h"
#include "trainer/tape.h"
#include "trainer/tensor.h"

// Runs fn(arg) in a child with stderr into a pipe. Returns the child's wait status; `said`
// gets the first bytes of its stderr.
static int in_child(void (*fn)(void *), void *arg, char *said, size_t len) {
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(fds[0], said + got, len - 1 - got)) > 0) got += (size_t)n;
    said[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static volatile float sink;

static void read_device(void *p) { sink = ((float *)p)[0]; }
static void write_device(void *p) { ((float *)p)[1] = 1.0f; }
static void read_tensor_data(void *t) { sink = ((Tensor *)t)->data[0]; }
static void read_tensor_header(void *t) { sink = (float)((Tensor *)t)->shape[0]; }
static void read_gradient(void *t) { sink = ((Tensor *)t)->grad[0]; }

static bool died_by_segv(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV; }

static void test_table(void) {
    const Backend *cpu = backend_get(DEV_CPU), *fake = backend_get(DEV_FAKE);
    EXPECT(fake && fake->dev == DEV_FAKE && !strcmp(fake->name, "fake"), "fake backend present");
    if (!fake) return;
    // Every slot from alloc to the end of the struct is a function pointer.
    size_t first = offsetof(Backend, alloc), n = (sizeof(Backend) - first) / sizeof(void (*)(void));
    int missing = 0;
    for (size_t k = 0; k < n; k++) {
        void (*c)(void), (*f)(void);
        memcpy(&c, (const char *)cpu + first + k * sizeof c, sizeof c);
        memcpy(&f, (const char *)fake + first + k * sizeof f, sizeof f);
        missing += c && !f;
        EXPECT(!c || c != f, "slot %zu: the fake table holds the CPU kernel itself (unprotected)",
               k);
    }
    EXPECT(missing == 0, "%d fields of the CPU table are NULL in the fake one (make fake-table)",
           missing);
}

static void test_kernels_and_copies(void) {
    const Backend *be = backend_need(DEV_FAKE);
    KernelCtx kc = {.n_threads = 1};
    float *d = be->alloc(sizeof(float) * 1000);
    EXPECT((uintptr_t)d % 64 == 0 && fake_memory_contains(d) && fake_memory_contains(d + 999),
           "aligned, registered");
    be->fill(&kc, d, 2.0f, 1000);
    float host[1000];
    for (int i = 0; i < 1000; i++) host[i] = (float)i;
    float *src = be->alloc(sizeof(float) * 1000);
    be->to_device(src, host, sizeof host);
    be->axpy(&kc, d, 0.5f, src, 1000); // d = 2 + i / 2
    memset(host, 0, sizeof host);
    be->to_host(host, d, sizeof host);
    int wrong = 0;
    for (int i = 0; i < 1000; i++) wrong += host[i] != 2.0f + 0.5f * (float)i;
    EXPECT(wrong == 0, "%d values wrong after fill, to_device, axpy, to_host", wrong);

    // A stray read and a stray write of device memory fault, naming the fake device.
    char said[4096];
    int st = in_child(read_device, d, said, sizeof said);
    EXPECT(died_by_segv(st), "a host read of device memory died by SIGSEGV (status %d)", st);
    EXPECT(strstr(said, "fake device: host code touched device memory") != NULL,
           "the handler says so: '%.200s'", said);
    st = in_child(write_device, d, said, sizeof said);
    EXPECT(died_by_segv(st), "a host write of device memory died by SIGSEGV (status %d)", st);
    // ... and the memory is still intact and usable after the children (they had copies).
    be->to_host(host, d, sizeof(float) * 2);
    EXPECT(host[0] == 2.0f && host[1] == 2.5f, "values kept: %g %g", host[0], host[1]);
    be->free(src);
    be->free(d);
    EXPECT(!fake_memory_contains(d), "freed region forgotten");
    be->free(NULL);
}

static void test_arena(void) {
    Arena a;
    arena_init(&a, DEV_FAKE, 1 << 16);
    Tensor *t = tensor_2d(&a, 3, 5);
    Tensor *leaf = tensor_leaf(&a, 1, (int64_t[]){4});
    EXPECT(!fake_memory_contains(t) && fake_memory_contains(t->data) &&
               fake_memory_contains(leaf->grad),
           "header on the host, data and grad on the device");
    float v[15];
    for (int i = 0; i < 15; i++) v[i] = (float)i * 0.25f;
    tensor_write(t, v);
    float back[15] = {0};
    tensor_read(t, back);
    EXPECT(!memcmp(v, back, sizeof v), "tensor_write then tensor_read");
    Tensor *s = tensor_scalar(&a, 7.5f);
    EXPECT(tensor_item(s) == 7.5f, "tensor_scalar / tensor_item: %g", tensor_item(s));
    tensor_fill(t, -1.0f);
    tensor_read(t, back);
    EXPECT(back[0] == -1.0f && back[14] == -1.0f, "tensor_fill");
    float *h = host_map(t->dev, t->data, t->n, true);
    EXPECT(h != t->data && h[3] == -1.0f, "host_map stages a copy off the CPU");
    h[3] = 42.0f;
    host_unmap(t->dev, t->data, h, t->n, true);
    tensor_read(t, back);
    EXPECT(back[3] == 42.0f && back[4] == -1.0f, "host_unmap wrote back");
    Tensor *z = tensor_zeros(&a, 1, (int64_t[]){9});
    float zs[9] = {1};
    tensor_read(z, zs);
    EXPECT(zs[0] == 0.0f && zs[8] == 0.0f, "tensor_zeros on the device");

    char said[4096];
    EXPECT(died_by_segv(in_child(read_tensor_data, t, said, sizeof said)),
           "reading t->data[0] on the host faults");
    EXPECT(died_by_segv(in_child(read_gradient, leaf, said, sizeof said)),
           "reading a gradient on the host faults");
    int st = in_child(read_tensor_header, t, said, sizeof said);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reading the header is fine (status %d)", st);

    // The step arena's halves: a reset keeps both usable; tape_alloc is host memory and
    // tape_alloc_data device memory.
    Tape tape;
    tape_init(&tape, &a, 1);
    int64_t *ctx = tape_alloc(&tape, sizeof(int64_t) * 4);
    ctx[0] = 5; // host: no fault
    EXPECT(!fake_memory_contains(ctx) && fake_memory_contains(tape_alloc_data(&tape, 8)),
           "tape_alloc on the host, tape_alloc_data on the device");
    tape_reset(&tape);
    EXPECT(a.data.used == 0 && a.host.used == 0 && a.data.peak > 0 && a.host.peak > 0,
           "reset: both halves empty, peaks kept");
    tape_free(&tape);
    arena_free(&a);
}

static void test_device_parse(void) {
    char err[512];
    DeviceChoice d;
    EXPECT(device_parse("cpu", 0, &d, err, sizeof err) == 0 && d.dev == DEV_CPU, "cpu");
    EXPECT(device_parse("FAKE", 3, &d, err, sizeof err) == 0 && d.dev == DEV_FAKE, "fake");
    EXPECT(device_parse("cpu,fake", 1, &d, err, sizeof err) == 0 && d.dev == DEV_FAKE,
           "a list: LOCAL_RANK 1 takes the second entry");
    EXPECT(device_parse("fake,cpu", 0, &d, err, sizeof err) == 0 && d.dev == DEV_FAKE,
           "a list: LOCAL_RANK 0 takes the first entry");
    EXPECT(device_parse("cpu,fake", 2, &d, err, sizeof err) == -1 &&
               !strcmp(err, "device=cpu,fake: LOCAL_RANK=2 but the list names 2 devices (one "
                            "per local rank expected)"),
           "a list too short: '%s'", err);
    EXPECT(device_parse("gpu", 0, &d, err, sizeof err) == -1 &&
               !strcmp(err, "device=gpu: 'gpu' is not a device; expected cpu, fake, a CUDA index "
                            "such as 0 or cuda:0, or a list such as 0,1"),
           "not a device: '%s'", err);
    EXPECT(device_parse("0,", 1, &d, err, sizeof err) == -1 && strstr(err, "empty"),
           "an empty entry: '%s'", err);
    bool cuda = backend_get(DEV_CUDA) != NULL;
    int rc = device_parse("cuda:1", 0, &d, err, sizeof err);
    if (cuda) {
        EXPECT(rc == 0 && d.dev == DEV_CUDA && d.index == 1, "cuda:1 in a CUDA build");
    } else {
        EXPECT(rc == -1 && !strcmp(err, "device=cuda:1: CUDA device 1 requested, but this build "
                                        "has no CUDA backend (build with `make CUDA=1`, run "
                                        "build/cuda/bin/ddpdbg-train)"),
               "cuda:1 in a CPU build: '%s'", err);
        EXPECT(device_parse("0,1", 1, &d, err, sizeof err) == -1 && strstr(err, "CUDA device 1"),
               "device=0,1 rank 1 in a CPU build: '%s'", err);
    }
    EXPECT(device_open((DeviceChoice){DEV_FAKE, 0}, err, sizeof err) == 0, "open fake");
    EXPECT(device_open((DeviceChoice){DEV_CPU, 2}, err, sizeof err) == -1 &&
               !strcmp(err, "device=cpu: device index 2: the host has only index 0"),
           "cpu index 2: '%s'", err);
    unsetenv("DDPDBG_DEVICE");
    EXPECT(!strcmp(device_default_spec(), "cpu"), "default cpu");
    setenv("DDPDBG_DEVICE", "fake", 1);
    EXPECT(!strcmp(device_default_spec(), "fake"), "DDPDBG_DEVICE");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_table();
    test_kernels_and_copies();
    test_arena();
    test_device_parse();
    return expect_report();
}
