/* launch.c -- `ddpdbg run`, torchrun's job for one node: fork+execv N ranks of the rank
 * program with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
 * MASTER_PORT, DDPDBG_RUN_TOKEN and OMP_NUM_THREADS; read each rank's stdout and stderr
 * through pipes and print them line by line as "[rankN]:line" on the same stream; on the first
 * failed rank (or SIGINT/SIGTERM to us) send SIGTERM to the rest, SIGKILL after a grace period,
 * and print one summary line. Tracing: every rank gets DDPDBG_TRACE_DIR (--trace DIR, default
 * traces/<time>-<model>/) and its probe writes rank<R>.db there; the watchdog (watchdog.h)
 * watches the ranks' rings for hangs; at the end the ring of every rank that did not close its
 * probe (killed, crashed) is drained into its database, so nothing it recorded is lost.
 * Never runs a shell. Not the rendezvous and not the live view. */
#include "tui/launch/launch.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h> // O_CLOEXEC
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h> // getrandom: the run token
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/base.h" // CHECK, xcalloc, xrealloc
#include "probe/probe.h"  // probe_drain
#include "tui/diagnosis/rootcause.h" // report_print_root_cause: why a failed run failed
#include "tui/views/tui.h" // tui_live
#include "tui/launch/watchdog.h"
#include "tui/launch/foreign.h" // rank programs other than ddpdbg-train, torchrun commands

enum {
    MAX_PROC_PER_NODE = 1024,
    STOP_GRACE_MS = 5000,  // SIGTERM -> SIGKILL, as torchrun's default
    DRAIN_MS = 500,        // after the last rank exits: output still held by its children
    READ_CHUNK = 65536,
    MAX_LINE = 1 << 20,    // a longer line without '\n' is printed in pieces
};

typedef struct {
    int n_proc_per_node, n_nodes, node_rank, master_port;
    const char *master_addr;
    const char *trace_dir; // NULL: traces/<time>-<model>/
    int no_trace;
    double hang_timeout_s;  // the watchdog's threshold
    int on_hang_kill;       // --on-hang kill (1), wait (0), or -1: kill with --no-tui, wait live
    int no_tui;
    char **train_argv;     // the arguments after "--", NULL-terminated (argv's own storage)
    int train_argc;
} LaunchOptions;

// One pipe from a rank: bytes are kept until a '\n' completes the line.
typedef struct {
    int fd; // read end; -1 once at end of file
    FILE *out;
    char *buf;
    size_t len, cap;
} RankStream;

typedef struct {
    int rank; // global: node_rank * n_proc_per_node + local rank
    pid_t pid;
    int reaped, status; // status: waitpid's, valid once reaped
    int signalled_by_us; // we sent it SIGTERM or SIGKILL
    RankStream streams[2]; // stdout, stderr
} Rank;

static volatile sig_atomic_t child_exited, stop_signal;

static void on_child(int sig) { child_exited = 1; }
static void on_stop(int sig) { stop_signal = sig; }

void launch_print_usage(FILE *f) {
    fprintf(f,
            "usage: ddpdbg run [--nproc-per-node N] [--nnodes M --node-rank K --master-addr A\n"
            "                  --master-port P] [--trace DIR] [--no-tui] -- TRAIN-ARGS...\n"
            "starts N ranks of bin/ddpdbg-train TRAIN-ARGS (the ddpdbg-train next to this\n"
            "program, or $DDPDBG_TRAIN) with torchrun's environment: RANK = K*N + LOCAL_RANK,\n"
            "LOCAL_RANK, WORLD_SIZE = M*N, LOCAL_WORLD_SIZE = N, GROUP_RANK = K, MASTER_ADDR,\n"
            "MASTER_PORT, DDPDBG_RUN_TOKEN (random, or the one in the environment: give every\n"
            "node the same) and OMP_NUM_THREADS=1 unless set. Every output line is printed as\n"
            "\"[rankN]:line\". When a rank fails, the others get SIGTERM, then SIGKILL after %d s,\n"
            "and ddpdbg exits with the failed rank's status (128+signal); Ctrl-C stops every\n"
            "rank the same way (exit 130).\n"
            "  --nproc-per-node N   ranks on this node (default 1)\n"
            "  --nnodes M           nodes in the job (default 1)\n"
            "  --node-rank K        this node's index in [0, M) (default 0)\n"
            "  --master-addr A      rank 0's host (default 127.0.0.1)\n"
            "  --master-port P      rank 0's store port (default 29500)\n"
            "  --trace DIR          where the ranks write rank<R>.db (default\n"
            "                       traces/<time>-<model>/); --no-trace: none\n"
            "  --hang-timeout S     a rank waiting in a collective this long while no rank\n"
            "                       works is a hang: summary, HANG record (default 5)\n"
            "  --on-hang kill|wait  after a hang's summary, stop the ranks or wait (default:\n"
            "                       kill with --no-tui, wait in the live view)\n"
            "  --no-tui             plain prefixed output instead of the live view (the\n"
            "                       view opens when stdin and stdout are a terminal)\n"
            "any other program runs instead of ddpdbg-train (ddpdbg run -- python train.py ARGS);\n"
            "a Python one traces itself once it imports torch (python/sitecustomize.py on\n"
            "PYTHONPATH). torchrun commands are understood and started by ddpdbg itself:\n"
            "  ddpdbg run -- torchrun --nproc_per_node=2 train.py ARGS\n"
            "  ddpdbg run -- python -m torch.distributed.run --nproc-per-node 2 train.py ARGS\n"
            "example: ddpdbg run --nproc-per-node 2 -- train model=rtdetr-tiny.yaml "
            "data=d.yaml\n",
            STOP_GRACE_MS / 1000);
}

// ---- the command line ----------------------------------------------------------------------

// Parses an integer option value in [lo, hi]; on error prints one line and returns -1.
static int parse_int_option(const char *name, const char *text, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "ddpdbg run: %s must be an integer in [%ld, %ld], got '%s'\n", name, lo,
                hi, text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

// Fills opt from argv (argv[0] is "run"). Returns 0, 1 for --help (usage printed), or 2 after
// one line on stderr. "--opt value" and "--opt=value" both work, '_' may stand for '-'
// (torchrun spells --nproc_per_node).
static int parse_options(int argc, char **argv, LaunchOptions *opt) {
    *opt = (LaunchOptions){.n_proc_per_node = 1, .n_nodes = 1, .master_port = 29500,
                           .master_addr = "127.0.0.1", .hang_timeout_s = 5, .on_hang_kill = -1};
    int node_rank_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            opt->train_argv = argv + i + 1;
            opt->train_argc = argc - i - 1;
            break;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            launch_print_usage(stdout);
            return 1;
        }
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (strncmp(arg, "--", 2) != 0 || name_len >= sizeof name) {
            fprintf(stderr, "ddpdbg run: unexpected '%s' (options come first, then -- and the "
                            "ddpdbg-train arguments; see ddpdbg run --help)\n", arg);
            return 2;
        }
        for (size_t k = 0; k < name_len; k++)
            name[k] = arg[k] == '_' ? '-' : arg[k];
        name[name_len] = 0;
        if (strcmp(name, "--no-tui") == 0 && !eq) {
            opt->no_tui = 1;
            continue;
        }
        if (strcmp(name, "--no-trace") == 0 && !eq) {
            opt->no_trace = 1;
            continue;
        }
        int takes_value = !strcmp(name, "--nproc-per-node") || !strcmp(name, "--nnodes") ||
                          !strcmp(name, "--node-rank") || !strcmp(name, "--master-addr") ||
                          !strcmp(name, "--master-port") || !strcmp(name, "--trace") ||
                          !strcmp(name, "--hang-timeout") || !strcmp(name, "--on-hang");
        if (!takes_value) {
            fprintf(stderr, "ddpdbg run: unknown option '%s' (see ddpdbg run --help)\n", arg);
            return 2;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value || !*value) {
            fprintf(stderr, "ddpdbg run: %s needs a value\n", name);
            return 2;
        }
        int bad = 0;
        if (!strcmp(name, "--nproc-per-node"))
            bad = parse_int_option(name, value, 1, MAX_PROC_PER_NODE, &opt->n_proc_per_node);
        else if (!strcmp(name, "--nnodes"))
            bad = parse_int_option(name, value, 1, 1 << 16, &opt->n_nodes);
        else if (!strcmp(name, "--node-rank"))
            bad = parse_int_option(name, value, 0, (1 << 16) - 1, &opt->node_rank),
            node_rank_given = 1;
        else if (!strcmp(name, "--master-port"))
            bad = parse_int_option(name, value, 1, 65535, &opt->master_port);
        else if (!strcmp(name, "--master-addr"))
            opt->master_addr = value;
        else if (!strcmp(name, "--hang-timeout")) {
            char *end;
            errno = 0;
            opt->hang_timeout_s = strtod(value, &end);
            if (errno || end == value || *end || !(opt->hang_timeout_s > 0) ||
                opt->hang_timeout_s > 86400) {
                fprintf(stderr, "ddpdbg run: --hang-timeout must be seconds in (0, 86400], got "
                                "'%s'\n", value);
                return 2;
            }
        } else if (!strcmp(name, "--on-hang")) {
            if (strcmp(value, "kill") && strcmp(value, "wait")) {
                fprintf(stderr, "ddpdbg run: --on-hang must be kill or wait, got '%s'\n", value);
                return 2;
            }
            opt->on_hang_kill = !strcmp(value, "kill");
        } else
            opt->trace_dir = value;
        if (bad) return 2;
    }
    if (!opt->train_argv) {
        fprintf(stderr, "ddpdbg run: missing -- before the ddpdbg-train arguments (e.g. "
                        "ddpdbg run --nproc-per-node 2 -- train model=rtdetr-tiny.yaml ...)\n");
        return 2;
    }
    if (opt->train_argc == 0) {
        fprintf(stderr, "ddpdbg run: nothing after -- (expected ddpdbg-train arguments)\n");
        return 2;
    }
    if (node_rank_given && opt->node_rank >= opt->n_nodes) {
        fprintf(stderr, "ddpdbg run: --node-rank must be in [0, %d) for --nnodes %d, got %d\n",
                opt->n_nodes, opt->n_nodes, opt->node_rank);
        return 2;
    }
    if ((long)opt->n_nodes * opt->n_proc_per_node > INT_MAX / 2) {
        fprintf(stderr, "ddpdbg run: --nnodes %d x --nproc-per-node %d ranks is too many\n",
                opt->n_nodes, opt->n_proc_per_node);
        return 2;
    }
    return 0;
}

int launch_rank_program(char *path, size_t size) {
    const char *override = getenv("DDPDBG_TRAIN");
    if (override && *override) {
        if (snprintf(path, size, "%s", override) >= (int)size) return -1;
    } else {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            fprintf(stderr, "ddpdbg run: cannot read /proc/self/exe: %s\n", strerror(errno));
            return -1;
        }
        self[n] = 0;
        char *slash = strrchr(self, '/');
        CHECK(slash, "/proc/self/exe is not absolute: %s", self);
        *slash = 0;
        if (snprintf(path, size, "%s/ddpdbg-train", self) >= (int)size) return -1;
    }
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "ddpdbg run: rank program %s: %s (expected ddpdbg-train next to ddpdbg, "
                        "or an executable in $DDPDBG_TRAIN)\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

// 32 hex digits from the kernel's generator, or the environment's DDPDBG_RUN_TOKEN, which
// every node of a multi-node job must share.
static void make_run_token(char token[33]) {
    const char *given = getenv("DDPDBG_RUN_TOKEN");
    if (given && *given) {
        snprintf(token, 33, "%s", given);
        return;
    }
    unsigned char bytes[16];
    ssize_t n = getrandom(bytes, sizeof bytes, 0);
    CHECK(n == (ssize_t)sizeof bytes, "getrandom: %s", strerror(errno));
    for (int i = 0; i < 16; i++)
        snprintf(token + 2 * i, 3, "%02x", bytes[i]);
}

// ---- the ranks -----------------------------------------------------------------------------

static void set_env_int(const char *name, int value) {
    char text[16];
    snprintf(text, sizeof text, "%d", value);
    setenv(name, text, 1);
}

// Forks one rank; in the child: the pipes as stdout/stderr, torchrun's variables, the
// launcher's signal mask undone, then execv. Returns the pid, or -1 after a line on stderr.
static pid_t spawn_rank(const LaunchOptions *opt, const char *program, const char *token,
                        int local_rank, const sigset_t *child_mask, int out_fd, int err_fd) {
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ddpdbg run: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid > 0) return pid;
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, child_mask, NULL);
    set_env_int("RANK", opt->node_rank * opt->n_proc_per_node + local_rank);
    set_env_int("LOCAL_RANK", local_rank);
    set_env_int("WORLD_SIZE", opt->n_nodes * opt->n_proc_per_node);
    set_env_int("LOCAL_WORLD_SIZE", opt->n_proc_per_node);
    set_env_int("GROUP_RANK", opt->node_rank);
    set_env_int("MASTER_PORT", opt->master_port);
    setenv("MASTER_ADDR", opt->master_addr, 1);
    setenv("DDPDBG_RUN_TOKEN", token, 1);
    setenv("OMP_NUM_THREADS", "1", 0);
    char **child_argv = xcalloc((size_t)opt->train_argc + 2, sizeof *child_argv);
    child_argv[0] = (char *)program;
    for (int i = 0; i < opt->train_argc; i++)
        child_argv[i + 1] = opt->train_argv[i];
    execv(program, child_argv);
    dprintf(STDERR_FILENO, "ddpdbg run: cannot execute %s: %s\n", program, strerror(errno));
    _exit(127);
}

// ---- the trace directory ---------------------------------------------------------------------

// traces/<YYYYmmdd-HHMMSS>-<model>, the model's file name without ".yaml" (or "run").
static void default_trace_dir(const LaunchOptions *opt, char *out, size_t len) {
    const char *model = "run";
    for (int i = 0; i < opt->train_argc; i++)
        if (!strncmp(opt->train_argv[i], "model=", 6) && opt->train_argv[i][6])
            model = opt->train_argv[i] + 6;
    const char *slash = strrchr(model, '/');
    if (slash) model = slash + 1;
    size_t n = strlen(model);
    if (n > 5 && !strcmp(model + n - 5, ".yaml")) n -= 5;
    char stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, len, "traces/%s-%.*s", stamp, (int)n, model);
}

// Drains the ring of every local rank that did not close its probe (killed, crashed): what it
// committed goes into its database. Prints one line per drained rank.
static void drain_rings(const char *dir, const Rank *ranks, int n, FILE *out) {
    for (int i = 0; i < n; i++) {
        char ring[PATH_MAX + 32], db[PATH_MAX + 32], err[512];
        snprintf(ring, sizeof ring, "%s/rank%d.ring", dir, ranks[i].rank);
        snprintf(db, sizeof db, "%s/rank%d.db", dir, ranks[i].rank);
        if (access(ring, F_OK) != 0) continue; // closed cleanly: the probe removed it
        ProbeDrainReport rep;
        if (probe_drain(ring, db, &rep, err, sizeof err)) {
            fprintf(out, "ddpdbg run: rank %d's trace: %s\n", ranks[i].rank, err);
            continue;
        }
        fprintf(out,
                "ddpdbg run: rank %d's ring drained into %s: %llu events recovered%s\n",
                ranks[i].rank, db, (unsigned long long)rep.inserted,
                rep.in_flight ? " (one being written when it died was incomplete)" : "");
        remove(ring);
    }
}

static void print_line(int rank, FILE *out, const char *text, size_t len) {
    fprintf(out, "[rank%d]:", rank);
    fwrite(text, 1, len, out);
    fputc('\n', out);
}

// Prints every complete line held by s (and, with flush_partial, the rest as a line).
static void emit_lines(int rank, RankStream *s, int flush_partial) {
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++)
        if (s->buf[i] == '\n') {
            print_line(rank, s->out, s->buf + start, i - start);
            start = i + 1;
        }
    if (s->len - start >= MAX_LINE || (flush_partial && s->len > start)) {
        print_line(rank, s->out, s->buf + start, s->len - start);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    fflush(s->out);
}

// One read from a ready pipe; at end of file, prints the partial last line and closes it.
static void read_stream(int rank, RankStream *s) {
    if (s->cap - s->len < READ_CHUNK) {
        s->cap = s->len + READ_CHUNK;
        s->buf = xrealloc(s->buf, s->cap);
    }
    ssize_t n = read(s->fd, s->buf + s->len, READ_CHUNK);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n > 0) {
        s->len += (size_t)n;
        emit_lines(rank, s, 0);
        return;
    }
    emit_lines(rank, s, 1);
    close(s->fd);
    s->fd = -1;
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void signal_live_ranks(Rank *ranks, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (ranks[i].pid > 0 && !ranks[i].reaped) {
            kill(ranks[i].pid, sig);
            ranks[i].signalled_by_us = 1;
        }
}

// Process exit status for a waitpid status: the exit code, or 128 + the signal.
static int exit_status_of(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// How a rank ended: "exitcode 1", "signal 15 (SIGTERM, sent by ddpdbg)", "not started".
static void format_fate(const Rank *r, char *out, size_t len) {
    if (!r->reaped)
        snprintf(out, len, "not started");
    else if (WIFEXITED(r->status))
        snprintf(out, len, "exitcode %d", WEXITSTATUS(r->status));
    else {
        const char *abbrev = sigabbrev_np(WTERMSIG(r->status));
        snprintf(out, len, "signal %d (SIG%s%s)", WTERMSIG(r->status), abbrev ? abbrev : "?",
                 r->signalled_by_us ? ", sent by ddpdbg" : "");
    }
}

static void print_fate(FILE *f, const Rank *r) {
    char fate[96];
    format_fate(r, fate, sizeof fate);
    fputs(fate, f);
    if (r->pid > 0) fprintf(f, " (pid %d)", (int)r->pid);
}

// Writes into every local rank's trace how it ended (meta exit) and, on the rank that failed
// first, meta failed_first = 1: the post-mortem views read it.
static void record_fates(const char *dir, const Rank *ranks, int n, int first_failed) {
    for (int i = 0; i < n; i++) {
        char db[PATH_MAX + 32], fate[96], err[512];
        snprintf(db, sizeof db, "%s/rank%d.db", dir, ranks[i].rank);
        if (access(db, F_OK) != 0) continue;
        format_fate(&ranks[i], fate, sizeof fate);
        const char *keys[] = {"exit", "failed_first"}, *values[] = {fate, "1"};
        if (probe_db_set_meta(db, keys, values, i == first_failed ? 2 : 1, err, sizeof err))
            fprintf(stderr, "ddpdbg run: rank %d's trace: %s\n", ranks[i].rank, err);
    }
}

// The one summary line, like torchrun's ChildFailedError: the first failure, then the rest.
static void print_summary(const Rank *ranks, int n, int first_failed, int user_signal) {
    if (first_failed >= 0) {
        fprintf(stderr, "ddpdbg run: rank %d failed first: ", ranks[first_failed].rank);
        print_fate(stderr, &ranks[first_failed]);
    } else
        fprintf(stderr, "ddpdbg run: stopped by SIG%s", sigabbrev_np(user_signal));
    for (int i = 0; i < n; i++)
        if (i != first_failed) {
            fprintf(stderr, "; rank %d: ", ranks[i].rank);
            print_fate(stderr, &ranks[i]);
        }
    fputc('\n', stderr);
}

// Everything the launcher's loop holds: one step (launcher_step) reads what the ranks wrote,
// reaps them, handles stop requests and the watchdog; the plain mode loops on it, the live
// view calls it between frames.
typedef struct Launcher {
    const LaunchOptions *opt;
    Rank *ranks;
    int n;
    const sigset_t *wait_mask;
    int first_failed, user_signal, spawn_failed, hang;
    long long stop_deadline, drain_deadline; // -1: not started
    bool done;
    bool *exited;
    Watchdog *dog;
    FILE *messages; // the watchdog's summary and the launcher's own lines
    const char *live_dir; // the live view's trace: drained as soon as the run ends
    struct pollfd *pfds;
    RankStream **polled;
    int *polled_rank;
} Launcher;

static void stop_ranks(Launcher *L) {
    signal_live_ranks(L->ranks, L->n, SIGTERM);
    L->stop_deadline = now_ms() + STOP_GRACE_MS;
}

// One turn: waits at most max_wait_ms (-1: until something happens or a deadline). Returns true
// once every rank has exited and its output is drained.
static bool launcher_step(Launcher *L, long long max_wait_ms) {
    if (L->done) return true;
    Rank *ranks = L->ranks;
    int n = L->n, n_live = 0, n_polled = 0;
    for (int i = 0; i < n; i++) {
        n_live += ranks[i].pid > 0 && !ranks[i].reaped;
        for (int s = 0; s < 2; s++)
            if (ranks[i].streams[s].fd >= 0) {
                L->pfds[n_polled] = (struct pollfd){.fd = ranks[i].streams[s].fd, .events = POLLIN};
                L->polled[n_polled] = &ranks[i].streams[s];
                L->polled_rank[n_polled++] = ranks[i].rank;
            }
    }
    long long now = now_ms();
    if (n_live == 0 && L->drain_deadline < 0) L->drain_deadline = now + DRAIN_MS;
    if (n_live == 0 && (n_polled == 0 || now >= L->drain_deadline)) return L->done = true;
    long long wake = n_live == 0 ? L->drain_deadline : L->stop_deadline;
    if (L->dog && n_live > 0 && !L->hang && (wake < 0 || wake > now + 200))
        wake = now + 200; // the watchdog looks 5 times a second
    if (max_wait_ms >= 0 && (wake < 0 || wake > now + max_wait_ms)) wake = now + max_wait_ms;
    struct timespec timeout, *timeout_p = NULL;
    if (wake >= 0) {
        long long ms = wake > now ? wake - now : 0;
        timeout = (struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        timeout_p = &timeout;
    }
    int ready = ppoll(L->pfds, (nfds_t)n_polled, timeout_p, L->wait_mask);
    CHECK(ready >= 0 || errno == EINTR, "ppoll: %s", strerror(errno));
    for (int k = 0; ready > 0 && k < n_polled; k++)
        if (L->pfds[k].revents) read_stream(L->polled_rank[k], L->polled[k]);

    // A stop request first: ranks killed by the same Ctrl-C are not "the first failure".
    if (stop_signal) {
        int sig = stop_signal;
        stop_signal = 0;
        if (L->stop_deadline >= 0) { // asked twice: no more grace
            signal_live_ranks(ranks, n, SIGKILL);
        } else {
            if (L->first_failed < 0) L->user_signal = sig;
            stop_ranks(L);
        }
    }
    if (child_exited) {
        child_exited = 0;
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
            for (int i = 0; i < n; i++)
                if (ranks[i].pid == pid) {
                    ranks[i].reaped = 1;
                    ranks[i].status = status;
                    int failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
                    if (failed && L->first_failed < 0 && !L->user_signal && !L->spawn_failed &&
                        !(L->hang && L->opt->on_hang_kill)) {
                        L->first_failed = i;
                        stop_ranks(L);
                    }
                }
    }
    if (L->dog && !L->hang && n_live > 0) {
        for (int i = 0; i < n; i++)
            L->exited[i] = ranks[i].reaped || ranks[i].pid <= 0;
        if (watchdog_poll(L->dog, L->exited, L->messages)) {
            L->hang = 1;
            if (L->opt->on_hang_kill && L->stop_deadline < 0) {
                fprintf(L->messages, "ddpdbg run: stopping the ranks (--on-hang kill)\n");
                fflush(L->messages);
                stop_ranks(L);
            }
        }
    }
    if (L->stop_deadline >= 0 && now_ms() >= L->stop_deadline) {
        signal_live_ranks(ranks, n, SIGKILL);
        L->stop_deadline = LLONG_MAX / 2; // killed: nothing left to wait for but the reaping
    }
    return false;
}

// The run's exit status: the first failed rank's, 128 + the signal we were stopped by, 1 when a
// rank could not start, 124 after a hang the launcher stopped, else 0.
static int launcher_exit_status(const Launcher *L) {
    if (L->first_failed >= 0) return exit_status_of(L->ranks[L->first_failed].status);
    if (L->user_signal) return 128 + L->user_signal;
    if (L->spawn_failed) return 1;
    if (L->hang && L->opt->on_hang_kill) return 124;
    return 0;
}

static TuiRunState live_state(void *ctx, int *exit_status) {
    Launcher *L = ctx;
    if (L->user_signal) {
        *exit_status = 128 + L->user_signal;
        return TUI_RUN_INTERRUPTED;
    }
    if (!L->done) return TUI_RUN_GOING;
    if (L->live_dir) { // the view's last look includes what the stopped ranks left in their rings
        drain_rings(L->live_dir, L->ranks, L->n, L->messages);
        L->live_dir = NULL;
    }
    *exit_status = launcher_exit_status(L);
    return TUI_RUN_ENDED;
}

static void live_poll(void *ctx) { launcher_step(ctx, 0); }

// The live view while the ranks run; q stops them (as Ctrl-C would). Without a usable
// terminal the run goes on in plain mode (its output already goes to the log).
static void run_live(Launcher *L, const char *dir, FILE *log) {
    L->messages = log;
    L->live_dir = dir;
    TuiRun run = {.state = live_state, .poll = live_poll, .ctx = L, .linger = true};
    char err[512];
    int rc = tui_live(dir, &run, err, sizeof err);
    L->messages = stderr;
    if (rc == TUI_LIVE_NO_TERMINAL)
        fprintf(stderr, "ddpdbg run: no live view (%s); the ranks' output is in %s/output.log\n",
                err, dir);
    if (rc == TUI_LIVE_QUIT && !L->done) {
        fprintf(stderr, "ddpdbg run: stopping the ranks (q in the live view)\n");
        if (L->first_failed < 0) L->user_signal = SIGINT;
        stop_ranks(L);
    }
}

// torchrun's topology options (torchrun_args.h) as ours; one given both ways must agree.
// Returns 0, or -1 after one line.
static int apply_torchrun(LaunchOptions *opt, const TorchrunArgs *tr) {
    const LaunchOptions defaults = {.n_proc_per_node = 1, .n_nodes = 1, .master_port = 29500};
    struct { const char *name; int theirs, *ours, fallback; } ints[] = {
        {"--nproc-per-node", tr->nproc_per_node, &opt->n_proc_per_node, defaults.n_proc_per_node},
        {"--nnodes", tr->nnodes, &opt->n_nodes, defaults.n_nodes},
        {"--node-rank", tr->node_rank, &opt->node_rank, 0},
        {"--master-port", tr->master_port, &opt->master_port, defaults.master_port},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (ints[i].theirs < 0) continue;
        if (*ints[i].ours != ints[i].fallback && *ints[i].ours != ints[i].theirs) {
            fprintf(stderr, "ddpdbg run: %s is %d for ddpdbg but %d in the torchrun command\n",
                    ints[i].name, *ints[i].ours, ints[i].theirs);
            return -1;
        }
        *ints[i].ours = ints[i].theirs;
    }
    if (tr->master_addr) opt->master_addr = tr->master_addr;
    if (opt->node_rank >= opt->n_nodes) {
        fprintf(stderr, "ddpdbg run: --node-rank must be in [0, %d) for --nnodes %d, got %d\n",
                opt->n_nodes, opt->n_nodes, opt->node_rank);
        return -1;
    }
    return 0;
}

int launch_run_command(int argc, char **argv) {
    LaunchOptions opt;
    int parsed = parse_options(argc, argv, &opt);
    if (parsed) return parsed == 1 ? 0 : 2;
    char program[PATH_MAX];
    // $DDPDBG_TRAIN names the rank program (tests' stand-ins): the arguments are all its own
    const char *train_override = getenv("DDPDBG_TRAIN");
    bool foreign = !(train_override && *train_override) &&
                   !foreign_is_trainer_command(opt.train_argv[0]);
    char **torchrun_argv = NULL; // a rewritten torchrun command's argv (ours to free)
    if (foreign) {
        TorchrunArgs tr;
        int r = foreign_program(&opt.train_argc, &opt.train_argv, program, sizeof program, &tr);
        if (r == 1) torchrun_argv = tr.argv;
        if (r == 2 || (r == 1 && apply_torchrun(&opt, &tr))) {
            free(torchrun_argv);
            return 2;
        }
    } else if (launch_rank_program(program, sizeof program))
        return 2;
    char token[33];
    make_run_token(token);
    char trace_dir[PATH_MAX] = "";
    if (!opt.no_trace) {
        if (opt.trace_dir) snprintf(trace_dir, sizeof trace_dir, "%s", opt.trace_dir);
        else default_trace_dir(&opt, trace_dir, sizeof trace_dir);
        int e = mkdir_p(trace_dir, NULL, 0);
        if (e) {
            fprintf(stderr, "ddpdbg run: --trace %s: cannot create it: %s\n", trace_dir,
                    strerror(e));
            free(torchrun_argv);
            return 2;
        }
        setenv("DDPDBG_TRACE_DIR", trace_dir, 1); // every rank inherits it
        if (foreign) foreign_python_environment(program);
        fprintf(stderr, "ddpdbg run: tracing to %s\n", trace_dir);
    } else {
        unsetenv("DDPDBG_TRACE_DIR");
    }

    // SIGCHLD/SIGINT/SIGTERM stay blocked except inside ppoll, so none is lost between checks.
    sigset_t handled, launcher_mask, wait_mask;
    sigemptyset(&handled);
    sigaddset(&handled, SIGCHLD);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGTERM);
    sigprocmask(SIG_BLOCK, &handled, &launcher_mask);
    wait_mask = launcher_mask;
    sigdelset(&wait_mask, SIGCHLD);
    sigdelset(&wait_mask, SIGINT);
    sigdelset(&wait_mask, SIGTERM);
    struct sigaction sa = {0};
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_child;
    sigaction(SIGCHLD, &sa, NULL);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); // a closed reader of our output must not orphan the ranks

    int n = opt.n_proc_per_node;
    Rank *ranks = xcalloc((size_t)n, sizeof *ranks);
    int spawn_failed = 0;
    long long stop_deadline = -1; // -1: not started
    // The live view: a terminal on both ends, tracing on, not --no-tui. The ranks' output then
    // goes to DIR/output.log (nothing else may write to the terminal while the view runs).
    bool live = !opt.no_tui && trace_dir[0] && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    FILE *log = NULL;
    if (opt.on_hang_kill < 0) opt.on_hang_kill = !live; // the view shows a hang; plain mode stops it
    if (live) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/output.log", trace_dir);
        log = fopen(path, "w");
        if (!log) {
            fprintf(stderr, "ddpdbg run: %s: %s; no live view\n", path, strerror(errno));
            live = false;
        }
    }
    for (int i = 0; i < n; i++) {
        ranks[i].rank = opt.node_rank * n + i;
        ranks[i].streams[0].fd = ranks[i].streams[1].fd = -1;
    }
    for (int i = 0; i < n && !spawn_failed; i++) {
        Rank *r = &ranks[i];
        int fds[2][2];
        if (pipe2(fds[0], O_CLOEXEC)) {
            fprintf(stderr, "ddpdbg run: pipe: %s\n", strerror(errno));
            spawn_failed = 1;
            break;
        }
        if (pipe2(fds[1], O_CLOEXEC)) {
            fprintf(stderr, "ddpdbg run: pipe: %s\n", strerror(errno));
            close(fds[0][0]);
            close(fds[0][1]);
            spawn_failed = 1;
            break;
        }
        r->pid = spawn_rank(&opt, program, token, i, &launcher_mask, fds[0][1], fds[1][1]);
        close(fds[0][1]);
        close(fds[1][1]);
        r->streams[0] = (RankStream){.fd = fds[0][0], .out = log ? log : stdout};
        r->streams[1] = (RankStream){.fd = fds[1][0], .out = log ? log : stderr};
        if (r->pid < 0) spawn_failed = 1;
    }
    if (spawn_failed) {
        signal_live_ranks(ranks, n, SIGKILL);
        stop_deadline = now_ms();
    }

    Launcher L = {.opt = &opt,
                  .ranks = ranks,
                  .n = n,
                  .wait_mask = &wait_mask,
                  .first_failed = -1,
                  .spawn_failed = spawn_failed,
                  .stop_deadline = stop_deadline,
                  .drain_deadline = -1,
                  .messages = stderr};
    L.exited = xcalloc((size_t)n, sizeof(bool));
    L.pfds = xcalloc((size_t)2 * n, sizeof *L.pfds);
    L.polled = xcalloc((size_t)2 * n, sizeof *L.polled);
    L.polled_rank = xcalloc((size_t)2 * n, sizeof *L.polled_rank);
    if (trace_dir[0]) {
        int *global = xcalloc((size_t)n, sizeof(int));
        for (int i = 0; i < n; i++)
            global[i] = ranks[i].rank;
        L.dog = watchdog_new(trace_dir, global, n, opt.hang_timeout_s);
        free(global);
    }
    if (live) run_live(&L, trace_dir, log);
    while (!launcher_step(&L, -1)) {
    }
    for (int i = 0; i < n; i++)
        for (int s = 0; s < 2; s++) {
            RankStream *st = &ranks[i].streams[s];
            if (st->fd >= 0) {
                emit_lines(ranks[i].rank, st, 1);
                close(st->fd);
            }
            free(st->buf);
        }
    fflush(stdout);

    if (log) fclose(log);
    watchdog_free(L.dog);
    free(L.exited);
    if (trace_dir[0]) {
        drain_rings(trace_dir, ranks, n, stderr);
        record_fates(trace_dir, ranks, n, L.first_failed);
    }
    if (L.first_failed >= 0 || L.user_signal)
        print_summary(ranks, n, L.first_failed, L.user_signal);
    int exit_status = launcher_exit_status(&L);
    if (L.hang && opt.on_hang_kill && L.first_failed < 0 && !L.user_signal && !L.spawn_failed)
        fprintf(stderr, "ddpdbg run: stopped after a hang (exit 124)\n");
    if (live) fprintf(stderr, "ddpdbg run: the ranks' output is in %s/output.log\n", trace_dir);
    // A failed or hung run ends on why (the report's short form), after the ranks' errors, so
    // that a CI log or a cluster job's output says it; not after the user stopped it.
    if (trace_dir[0] && exit_status != 0 && !L.user_signal && !L.spawn_failed)
        report_print_root_cause(trace_dir, stderr);
    free(L.polled_rank);
    free(L.polled);
    free(L.pfds);
    free(ranks);
    free(torchrun_argv);
    return exit_status;
}
