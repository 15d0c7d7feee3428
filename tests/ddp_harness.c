/* ddp_harness.c -- forked ranks and the reference network (ddp_harness.h). */
#include "tests/ddp_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int harness_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &n) < 0) {
        perror("harness_free_port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

int harness_run(int world, int pg_timeout_ms, int limit_s, int (*body)(RankCtx *), void *user,
                int *status) {
    int port = harness_free_port();
    pid_t pids[16];
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            signal(SIGPIPE, SIG_IGN); // as the trainer's main: a dead peer is an error, not a signal
            char err[512];
            RankCtx ctx = {.rank = r, .world = world, .user = user};
            ctx.store = store_open("127.0.0.1", port, r == 0, world, "harness", 10000, err,
                                   sizeof err);
            if (!ctx.store) {
                fprintf(stderr, "rank %d store: %s\n", r, err);
                _exit(100);
            }
            ctx.pg = pg_new_gloo(ctx.store, r, world, pg_timeout_ms, err, sizeof err);
            if (!ctx.pg) {
                fprintf(stderr, "rank %d group: %s\n", r, err);
                _exit(101);
            }
            int rc = body(&ctx);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
    }
    int failed = 0;
    double deadline = (double)time(NULL) + limit_s;
    for (int r = 0; r < world; r++) {
        int st = 0;
        for (;;) {
            pid_t got = waitpid(pids[r], &st, WNOHANG);
            if (got == pids[r]) break;
            if ((double)time(NULL) > deadline) {
                fprintf(stderr, "harness: rank %d still running after %d s: killed\n", r, limit_s);
                kill(pids[r], SIGKILL);
                waitpid(pids[r], &st, 0);
                break;
            }
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        if (status) status[r] = code;
        failed += code != 0;
    }
    return failed;
}

void net_init(Net *n) {
    *n = (Net){0};
    arena_init(&n->params, DEV_CPU, 0);
    arena_init(&n->host, DEV_CPU, 0);
    arena_init(&n->step, DEV_CPU, 0);
    rng_init(&n->rng, 1);
    registry_init(&n->reg, &n->params, &n->host, &n->rng);
    linear_init(&n->a, &n->reg, "a", 4, 8);
    linear_init(&n->b, &n->reg, "b", 8, 8);
    linear_init(&n->c, &n->reg, "c", 8, 2);
    linear_init(&n->d, &n->reg, "d", 8, 2);
    tape_init(&n->tape, &n->step, 1);
}

void net_free(Net *n) {
    tape_free(&n->tape);
    registry_free(&n->reg);
    arena_free(&n->step);
    arena_free(&n->host);
    arena_free(&n->params);
}

Tensor *net_forward(Net *n, Tensor *x, bool use_d) {
    Tape *t = &n->tape;
    Tensor *h = op_relu(t, linear_forward(&n->a, t, x));
    h = op_relu(t, linear_forward(&n->b, t, h));
    Tensor *y = linear_forward(&n->c, t, h);
    if (use_d) y = op_add(t, y, linear_forward(&n->d, t, h));
    return y;
}

Tensor *net_loss(Net *n, Tensor *y) { return op_mean(&n->tape, op_mul(&n->tape, y, y)); }

void net_sgd_step(Net *n, float lr) {
    for (int i = 0; i < n->reg.n_params; i++) {
        Tensor *p = n->reg.params[i];
        if (!p->grad_defined) continue;
        for (int64_t e = 0; e < p->n; e++)
            p->data[e] += -lr * p->grad[e];
        p->grad_defined = false;
    }
}
