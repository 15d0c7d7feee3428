/* ddp_harness.h -- what the DDP tests share: world ranks fork()ed over 127.0.0.1 (each with
 * its own store client and Gloo group), and the tiny reference network of
 * tests/golden/ddp/README.md (Linear a 4->8, b 8->8, c 8->2, d 8->2; d is the branch that can
 * go unused), in the same parameter order as the PyTorch scripts. */
#ifndef TESTS_DDP_HARNESS_H
#define TESTS_DDP_HARNESS_H

#include <stdbool.h>

#include "trainer/dist/ddp.h"

// A fresh TCP port on loopback (bound once, then released).
int harness_free_port(void);

typedef struct RankCtx {
    int rank, world;
    Store *store;
    ProcessGroup *pg;
    void *user;
} RankCtx;

// Forks world ranks; each opens the store and a Gloo group with pg_timeout_ms, runs body and
// exits with its return value (0 ok). A rank that hangs past limit_s is killed. Returns the
// number of ranks that failed; status[r] (may be NULL) gets rank r's exit code (-signal if
// killed). body may leave the group unfreed (a rank that "raises"): the harness _exits.
int harness_run(int world, int pg_timeout_ms, int limit_s, int (*body)(RankCtx *), void *user,
                int *status);

// The reference network: its registry holds a.weight a.bias b.weight ... d.bias (indices 0-7).
typedef struct Net {
    Arena params, host, step;
    Rng rng;
    Registry reg;
    Linear a, b, c, d;
    Tape tape;
} Net;
void net_init(Net *n);
void net_free(Net *n);
// y = c(h) (+ d(h) when use_d), h = relu(b(relu(a(x)))), x (rows, 4) -> (rows, 2).
Tensor *net_forward(Net *n, Tensor *x, bool use_d);
// mean(y * y)
Tensor *net_loss(Net *n, Tensor *y);
// p -= lr * grad for every parameter whose grad is defined, then grad = None (set_to_none).
void net_sgd_step(Net *n, float lr);

#endif
