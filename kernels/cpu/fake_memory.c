/* fake_memory.c -- protected regions for the fake device (fake_memory.h). */
#include "kernels/cpu/fake_memory.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/base.h"

typedef struct Region {
    char *base;
    size_t size; // page-rounded
} Region;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Region *regions;
static size_t n_regions, cap_regions, live_bytes;
static int open_depth; // > 0: every region is PROT_READ|PROT_WRITE
static bool handler_installed;

static void protect_all(int prot) {
    for (size_t i = 0; i < n_regions; i++)
        CHECK(mprotect(regions[i].base, regions[i].size, prot) == 0, "mprotect: %s",
              strerror(errno));
}

static long region_of(const void *p) {
    const char *c = p;
    for (size_t i = 0; i < n_regions; i++)
        if (c >= regions[i].base && c < regions[i].base + regions[i].size) return (long)i;
    return -1;
}

// Async-signal-safe enough for a crash: write(2) and backtrace_symbols_fd only.
static void on_segv(int sig, siginfo_t *si, void *uctx) {
    (void)uctx;
    if (region_of(si->si_addr) >= 0) {
        static const char msg[] = "fake device: host code touched device memory outside a kernel "
                                  "call or a to_host/to_device copy; the faulting frame is the "
                                  "line that skipped the backend:\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        void *frames[32];
        int n = backtrace(frames, 32);
        backtrace_symbols_fd(frames, n, STDERR_FILENO);
    }
    signal(sig, SIG_DFL); // returning re-runs the access, which now takes the default action
}

static void install_handler(void) {
    if (handler_installed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    handler_installed = true;
}

void *fake_memory_alloc(size_t nbytes) {
    CHECK(nbytes > 0, "fake_memory_alloc(0)");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = (nbytes + page - 1) / page * page;
    pthread_mutex_lock(&lock);
    install_handler();
    void *p = mmap(NULL, size, open_depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) DIE(1, "fake device: out of memory allocating %zu bytes", nbytes);
    if (n_regions == cap_regions) {
        cap_regions = cap_regions ? 2 * cap_regions : 64;
        regions = xrealloc(regions, sizeof *regions * cap_regions);
    }
    regions[n_regions++] = (Region){p, size};
    live_bytes += size;
    pthread_mutex_unlock(&lock);
    return p;
}

void fake_memory_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&lock);
    long i = region_of(p);
    CHECK(i >= 0 && regions[i].base == p, "fake_memory_free(%p): not a fake-device allocation",
          p);
    CHECK(munmap(regions[i].base, regions[i].size) == 0, "munmap: %s", strerror(errno));
    live_bytes -= regions[i].size;
    regions[i] = regions[--n_regions];
    pthread_mutex_unlock(&lock);
}

void fake_memory_open(void) {
    pthread_mutex_lock(&lock);
    if (open_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&lock);
}

void fake_memory_close(void) {
    pthread_mutex_lock(&lock);
    CHECK(open_depth > 0, "fake_memory_close without an open");
    if (--open_depth == 0) protect_all(PROT_NONE);
    pthread_mutex_unlock(&lock);
}

bool fake_memory_contains(const void *p) {
    pthread_mutex_lock(&lock);
    bool in = region_of(p) >= 0;
    pthread_mutex_unlock(&lock);
    return in;
}

size_t fake_memory_bytes(void) {
    pthread_mutex_lock(&lock);
    size_t b = live_bytes;
    pthread_mutex_unlock(&lock);
    return b;
}
