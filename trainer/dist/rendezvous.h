/* rendezvous.h -- joining a run started by `ddpdbg run` or torchrun: reads the launcher's
 * environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * DDPDBG_RUN_TOKEN), opens the TCP store (rank 0 serves it at MASTER_ADDR:MASTER_PORT),
 * checks that every rank agrees on the world size and that no rank is started twice, and
 * creates the default process group. Start-up never hangs silently: a rank that waits for
 * missing peers says which ones every few seconds, and gives up after the rendezvous timeout
 * naming them. */
#ifndef TRAINER_DIST_RENDEZVOUS_H
#define TRAINER_DIST_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>

#include "trainer/dist/comm.h"

typedef struct DistEnv {
    int rank, world, local_rank, local_world;
    char master_addr[256];
    int master_port;
    char token[128];
} DistEnv;

// Reads the environment. WORLD_SIZE unset: one process (world 1, rank 0). Returns 0, or -1
// with one line in err naming the variable and what was expected.
int dist_env_read(DistEnv *e, char *err, size_t errlen);

typedef struct Dist {
    DistEnv env;
    Store *store;
    ProcessGroup *pg;
} Dist;

// Rendezvous then the process group. backend "gloo" or "nccl"; rdzv_timeout_ms bounds the
// store connection and the join; pg the process group (pg_open: its timeout bounds every later
// collective). -1 with err.
int dist_open(Dist *d, const DistEnv *e, const char *backend, int rdzv_timeout_ms,
              const PgOptions *pg, char *err, size_t errlen);
// clean: the run finished normally (the group is drained, the store closed in order); else
// the sockets are just dropped, as a process that raises does (peers then see errors).
void dist_close(Dist *d, bool clean);

#endif
