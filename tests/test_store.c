/* test_store.c -- the TCP store across real processes on 127.0.0.1: set/get/add, a get that
 * blocks until another rank sets, wait on several keys, barriers, and the failures a user
 * meets (get timeout, wrong token, port in use, nobody listening). Ranks are fork()ed before
 * any store thread exists; each child reports through its exit status. */
#include "trainer/dist/store.h"

#include "tests/expect.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "run-7f3a"
#define TIMEOUT_MS 5000

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

// A socket bound to 127.0.0.1 on a port the kernel picked; listening if asked.
static int bound_socket(int *port, bool listening) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        (listening && listen(fd, 1) < 0) || getsockname(fd, (struct sockaddr *)&a, &n) < 0) {
        perror("bound_socket");
        exit(1);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int free_port(void) {
    int port;
    close(bound_socket(&port, false));
    return port;
}

static Store *open_rank(int rank, int world, int port) {
    char err[512];
    Store *s = store_open("127.0.0.1", port, rank == 0, world, TOKEN, TIMEOUT_MS, err, sizeof err);
    EXPECT(s, "rank %d: %s", rank, err);
    return s;
}

// Forks world ranks running body; returns how many of them failed.
static int run_ranks(int world, void (*body)(Store *, int rank, int world)) {
    int port = free_port();
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            if (r > 0) usleep(20000 * r); // clients usually start after the master: retried
            Store *s = open_rank(r, world, port);
            if (s) {
                body(s, r, world);
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
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed;
}

static void set_get_add(Store *s, int rank, int world) {
    char key[32], value[32];
    snprintf(key, sizeof key, "rank/%d", rank);
    int n = snprintf(value, sizeof value, "hello from %d", rank);
    EXPECT(store_set(s, key, value, (size_t)n) == 0, "%s", store_error(s));
    int64_t sum = 0;
    EXPECT(store_add(s, "counter", rank + 1, &sum) == 0, "%s", store_error(s));
    EXPECT(sum >= rank + 1 && sum <= 6, "partial sum %lld", (long long)sum);
    EXPECT(store_barrier(s, "after-add") == 0, "%s", store_error(s));
    for (int r = 0; r < world; r++) {
        snprintf(key, sizeof key, "rank/%d", r);
        snprintf(value, sizeof value, "hello from %d", r);
        void *got = NULL;
        size_t len = 0;
        EXPECT(store_get(s, key, &got, &len) == 0, "%s", store_error(s));
        EXPECT(got && len == strlen(value) && !strcmp(got, value), "%s: '%s'", key,
               got ? (char *)got : "(none)");
        free(got);
    }
    EXPECT(store_add(s, "counter", 0, &sum) == 0 && sum == 6, "counter %lld, want 1+2+3",
           (long long)sum);
    void *text = NULL;
    EXPECT(store_get(s, "counter", &text, NULL) == 0 && !strcmp(text, "6"), "add keeps decimal text");
    free(text);
    EXPECT(store_add(s, "rank/0", 1, NULL) == -1 && strstr(store_error(s), "not an integer"),
           "add on text: %s", store_error(s));
    EXPECT(store_barrier(s, "end") == 0, "%s", store_error(s));
}

static void get_blocks(Store *s, int rank, int world) {
    if (rank == 0) {
        usleep(300000);
        EXPECT(store_set(s, "late", "here", 4) == 0, "%s", store_error(s));
        return;
    }
    double t0 = now_s();
    void *got = NULL;
    EXPECT(store_get(s, "late", &got, NULL) == 0, "%s", store_error(s));
    double waited = now_s() - t0;
    EXPECT(got && !strcmp(got, "here"), "late value");
    EXPECT(waited > 0.2 && waited < 2.0, "get returned after %.3f s; the set came after ~0.3 s", waited);
    free(got);
}

static void wait_many(Store *s, int rank, int world) {
    const char *keys[] = {"a", "b", "c"};
    if (rank == 1) {
        usleep(100000);
        store_set(s, "a", "1", 1);
        usleep(100000);
        store_set(s, "b", "2", 1);
    } else if (rank == 2) {
        usleep(250000);
        store_set(s, "c", "3", 1);
    } else {
        double t0 = now_s();
        EXPECT(store_wait(s, keys, 3) == 0, "%s", store_error(s));
        double waited = now_s() - t0;
        EXPECT(waited > 0.15, "wait returned after %.3f s, before the last key was set", waited);
    }
}

static void barrier_four(Store *s, int rank, int world) {
    for (int round = 0; round < 2; round++) {
        usleep(60000 * (useconds_t)((rank + round) % world));
        int64_t before;
        EXPECT(store_add(s, "arrivals", 1, &before) == 0, "%s", store_error(s));
        EXPECT(store_barrier(s, "step") == 0, "%s", store_error(s));
        int64_t seen;
        EXPECT(store_add(s, "arrivals", 0, &seen) == 0 && seen >= 4 * (round + 1),
               "round %d: past the barrier with %lld arrivals", round, (long long)seen);
        EXPECT(store_barrier(s, "step-done") == 0, "%s", store_error(s)); // before next round's adds
    }
}

// A child serves; the parent tries the wrong token, then the right one on the same server.
static void test_wrong_token(void) {
    int port = free_port();
    pid_t server = fork();
    if (server == 0) {
        char err[512];
        Store *s = store_open("127.0.0.1", port, true, 2, TOKEN, TIMEOUT_MS, err, sizeof err);
        if (!s) _exit(1);
        const char *keys[] = {"good-client-done"};
        int rc = store_wait(s, keys, 1);
        store_close(s);
        _exit(rc ? 1 : 0);
    }
    char err[512] = "";
    Store *bad = store_open("127.0.0.1", port, false, 2, "not-the-token", TIMEOUT_MS, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "store at 127.0.0.1:%d refused this process: wrong run token", port);
    EXPECT(!bad && !strcmp(err, want), "wrong token: '%s'", err);
    Store *good = store_open("127.0.0.1", port, false, 2, TOKEN, TIMEOUT_MS, err, sizeof err);
    EXPECT(good, "right token after a refusal: %s", err);
    if (good) {
        void *got = NULL;
        EXPECT(store_set(good, "k", "v", 1) == 0 && store_get(good, "k", &got, NULL) == 0 &&
                   !strcmp(got, "v"),
               "%s", store_error(good));
        free(got);
        EXPECT(store_set(good, "good-client-done", "1", 1) == 0, "%s", store_error(good));
        store_close(good);
    }
    int status;
    waitpid(server, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server kept serving after a refusal");
}

static void test_get_timeout(void) {
    int port = free_port();
    pid_t pid = fork();
    if (pid == 0) {
        char err[512];
        Store *s = store_open("127.0.0.1", port, true, 1, TOKEN, 300, err, sizeof err);
        EXPECT(s, "%s", err);
        if (s) {
            double t0 = now_s();
            void *got = NULL;
            EXPECT(store_get(s, "never", &got, NULL) == -1, "get of a missing key succeeded");
            double waited = now_s() - t0;
            EXPECT(waited > 0.25 && waited < 1.5, "timed out after %.3f s, want ~0.3 s", waited);
            char want[128];
            snprintf(want, sizeof want, "timeout after 300 ms waiting for key 'never'");
            EXPECT(strstr(store_error(s), want), "message: %s", store_error(s));
            EXPECT(store_set(s, "after", "ok", 2) == 0, "store usable after a timeout: %s",
                   store_error(s));
            store_close(s);
        }
        _exit(expect_failures ? 1 : 0);
    }
    int status;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "get timeout child failed");
}

static void test_port_in_use(void) {
    int port;
    int fd = bound_socket(&port, true);
    char err[512] = "";
    Store *s = store_open("127.0.0.1", port, true, 1, TOKEN, 500, err, sizeof err);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    EXPECT(!s && strstr(err, where) && strstr(err, "address already in use"), "in use: '%s'", err);
    close(fd);
}

static void test_bad_port(void) {
    char err[512] = "";
    Store *s = store_open("127.0.0.1", 0, false, 2, TOKEN, 500, err, sizeof err);
    EXPECT(!s && strstr(err, "store port 0: expected 1..65535"), "port 0: '%s'", err);
}

static void test_nobody_listening(void) {
    int port = free_port();
    char err[512] = "";
    double t0 = now_s();
    Store *s = store_open("127.0.0.1", port, false, 2, TOKEN, 400, err, sizeof err);
    double waited = now_s() - t0;
    EXPECT(!s && strstr(err, "could not connect to MASTER_ADDR:MASTER_PORT") &&
               strstr(err, "within 0.4 s"),
           "nobody listening: '%s'", err);
    EXPECT(waited > 0.35 && waited < 2.0, "gave up after %.3f s, want ~0.4 s", waited);
}

int main(void) {
    EXPECT(run_ranks(3, set_get_add) == 0, "set/get/add across 3 processes");
    EXPECT(run_ranks(2, get_blocks) == 0, "get blocks until another process sets");
    EXPECT(run_ranks(3, wait_many) == 0, "wait on several keys");
    EXPECT(run_ranks(4, barrier_four) == 0, "barrier with 4 processes, twice");
    test_wrong_token();
    test_get_timeout();
    test_port_in_use();
    test_bad_port();
    test_nobody_listening();
    return expect_report();
}
