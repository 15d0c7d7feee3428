/* rendezvous.c -- the launcher's environment, the store and the join (rendezvous.h). */
#include "trainer/dist/rendezvous.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/base.h" // CHECK

// An integer variable in [lo, hi]; missing: fallback. -1 with err when malformed.
static int env_int(const char *name, int fallback, int lo, int hi, int *out, char *err,
                   size_t errlen) {
    const char *text = getenv(name);
    if (!text || !*text) {
        *out = fallback;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        snprintf(err, errlen, "%s=%s: expected an integer in [%d, %d]", name, text, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int dist_env_read(DistEnv *e, char *err, size_t errlen) {
    *e = (DistEnv){0};
    if (env_int("WORLD_SIZE", 1, 1, 1 << 16, &e->world, err, errlen)) return -1;
    if (env_int("RANK", 0, 0, e->world - 1, &e->rank, err, errlen)) return -1;
    if (env_int("LOCAL_WORLD_SIZE", e->world, 1, e->world, &e->local_world, err, errlen))
        return -1;
    if (env_int("LOCAL_RANK", e->rank % e->local_world, 0, e->local_world - 1, &e->local_rank,
                err, errlen))
        return -1;
    const char *addr = getenv("MASTER_ADDR");
    if (e->world > 1 && (!addr || !*addr)) {
        snprintf(err, errlen, "MASTER_ADDR is not set (WORLD_SIZE=%d): start the ranks with "
                              "`ddpdbg run` or set MASTER_ADDR and MASTER_PORT", e->world);
        return -1;
    }
    snprintf(e->master_addr, sizeof e->master_addr, "%s", addr && *addr ? addr : "127.0.0.1");
    int port;
    if (env_int("MASTER_PORT", e->world > 1 ? -1 : 29500, 1, 65535, &port, err, errlen)) return -1;
    if (port < 0) {
        snprintf(err, errlen, "MASTER_PORT is not set (WORLD_SIZE=%d): expected a port in "
                              "[1, 65535]", e->world);
        return -1;
    }
    e->master_port = port;
    // Ranks started by hand (torchrun style) share no secret; the store then accepts any
    // peer that knows the port, as PyTorch's TCPStore does.
    const char *token = getenv("DDPDBG_RUN_TOKEN");
    snprintf(e->token, sizeof e->token, "%s", token && *token ? token : "ddpdbg-no-token");
    return 0;
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// Every rank announces itself (rank/<r>/joined += 1, rank/<r>/world = WORLD_SIZE) and waits
// until all world ranks have; a rank started twice, or one that disagrees with rank 0 on the
// world size, is an error; waiting names the missing ranks every 5 s.
static int join(Dist *d, int timeout_ms, char *err, size_t errlen) {
    const DistEnv *e = &d->env;
    Store *s = d->store;
    char key[64];
    int64_t v;
    // world as decimal text, which store_add(key, 0) reads back (set: a duplicate rank must
    // not double it)
    char world_text[16];
    snprintf(world_text, sizeof world_text, "%d", e->world);
    snprintf(key, sizeof key, "ddpdbg/rank/%d/world", e->rank);
    if (store_set(s, key, world_text, strlen(world_text))) goto store_failed;
    snprintf(key, sizeof key, "ddpdbg/rank/%d/joined", e->rank);
    if (store_add(s, key, 1, &v)) goto store_failed;
    if (v > 1) {
        snprintf(err, errlen, "rank %d joined the run at %s:%d twice: two processes were "
                              "started with RANK=%d", e->rank, e->master_addr, e->master_port,
                 e->rank);
        return -1;
    }
    if (e->rank != 0) {
        // rank 0's world size (rank 0 announces before it waits, so this is short)
        int64_t deadline = now_ms() + timeout_ms, w0 = 0;
        while (w0 == 0 && now_ms() < deadline) {
            if (store_add(s, "ddpdbg/rank/0/world", 0, &w0)) goto store_failed;
            if (w0 == 0) nanosleep(&(struct timespec){0, 5000000}, NULL);
        }
        if (w0 != e->world) {
            snprintf(err, errlen, "WORLD_SIZE mismatch: rank %d has WORLD_SIZE=%d, but rank 0 "
                                  "(the store at %s:%d) has WORLD_SIZE=%lld",
                     e->rank, e->world, e->master_addr, e->master_port, (long long)w0);
            return -1;
        }
    }
    int64_t start = now_ms(), next_note = start + 5000;
    for (;;) {
        int missing = 0;
        char names[512] = "";
        size_t at = 0;
        for (int r = 0; r < e->world; r++) {
            snprintf(key, sizeof key, "ddpdbg/rank/%d/joined", r);
            if (store_add(s, key, 0, &v)) goto store_failed;
            if (v == 0) {
                if (missing < 16 && at < sizeof names)
                    at += (size_t)snprintf(names + at, sizeof names - at, "%s%d", missing ? ", " : "", r);
                missing++;
            } else if (r != e->rank) {
                snprintf(key, sizeof key, "ddpdbg/rank/%d/world", r);
                int64_t w;
                if (store_add(s, key, 0, &w)) goto store_failed;
                if (w != 0 && w != e->world) {
                    snprintf(err, errlen, "WORLD_SIZE mismatch: rank %d has WORLD_SIZE=%d, but "
                                          "rank %d has WORLD_SIZE=%lld",
                             e->rank, e->world, r, (long long)w);
                    // Rank 0 serves the store: it lingers a moment so the other rank can read
                    // its world size and say the same, instead of only losing the store.
                    if (e->rank == 0) nanosleep(&(struct timespec){1, 0}, NULL);
                    return -1;
                }
            }
        }
        if (missing == 0) return 0;
        int64_t t = now_ms();
        if (t - start >= timeout_ms) {
            snprintf(err, errlen, "rendezvous at %s:%d: ranks %s%s of WORLD_SIZE=%d did not join "
                                  "within %g s",
                     e->master_addr, e->master_port, names, missing > 16 ? ", ..." : "",
                     e->world, timeout_ms / 1000.0);
            return -1;
        }
        if (t >= next_note) {
            fprintf(stderr, "rank %d: waiting for ranks %s%s of %d to join at %s:%d (%.0f s)\n",
                    e->rank, names, missing > 16 ? ", ..." : "", e->world, e->master_addr,
                    e->master_port, (t - start) / 1000.0);
            next_note = t + 5000;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
store_failed: // rank 0 serves the store: losing it mostly means rank 0 stopped (see its error)
    snprintf(err, errlen, "rendezvous: %s (did rank 0 stop? its output says why)", store_error(s));
    return -1;
}

int dist_open(Dist *d, const DistEnv *e, const char *backend, int rdzv_timeout_ms,
              const PgOptions *pg, char *err, size_t errlen) {
    *d = (Dist){.env = *e};
    char why[1024];
    d->store = store_open(e->master_addr, e->master_port, e->rank == 0, e->world, e->token,
                          rdzv_timeout_ms, why, sizeof why);
    if (!d->store) {
        snprintf(err, errlen, "rank %d: %s", e->rank, why);
        return -1;
    }
    if (join(d, rdzv_timeout_ms, why, sizeof why)) {
        snprintf(err, errlen, "rank %d: %s", e->rank, why);
        return -1;
    }
    d->pg = pg_open(backend, d->store, e->rank, e->world, pg, why, sizeof why);
    if (!d->pg) {
        snprintf(err, errlen, "rank %d: process group (%s): %s", e->rank, backend, why);
        return -1;
    }
    return 0;
}

void dist_close(Dist *d, bool clean) {
    // Unclean: a rank that raised must not wait for peers that may be stuck in a collective
    // with it; its sockets close when the process exits, and the peers' waits then fail.
    if (!clean) return;
    if (d->pg) pg_free(d->pg);
    if (d->store) store_close(d->store);
    *d = (Dist){0};
}
