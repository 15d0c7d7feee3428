/* comm_gloo.cc -- the Gloo backend of comm.h (its PgOps table, pg_gloo_ops): a
 * gloo::rendezvous::Store adapter over our TCP Store, a full-mesh TCP context, and one worker
 * thread per group that runs queued collectives in launch order. The only C++ in the project;
 * every entry in the table catches every exception, turning it into the one-line error comm.h
 * promises. Not a Gloo wrapper in general: float sum, broadcast, byte allgather and barrier. */
// store.h is plain C without extern "C" guards; its functions have C linkage.
extern "C" {
#include "trainer/dist/store.h"
}
#include "trainer/dist/comm.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// Adapts our Store to Gloo's rendezvous interface, prefixing every key with the group's name.
// Our store bounds every call by its own timeout, so Gloo's per-call timeout is not needed.
class StoreAdapter : public gloo::rendezvous::Store {
  public:
    StoreAdapter(::Store *store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}

    void set(const std::string &key, const std::vector<char> &data) override {
        if (store_set(store_, (prefix_ + key).c_str(), data.data(), data.size()) != 0)
            throw std::runtime_error(std::string("store set: ") + store_error(store_));
    }

    std::vector<char> get(const std::string &key) override {
        void *value = nullptr;
        size_t len = 0;
        if (store_get(store_, (prefix_ + key).c_str(), &value, &len) != 0)
            throw std::runtime_error(std::string("store get: ") + store_error(store_));
        std::vector<char> out((char *)value, (char *)value + len);
        free(value);
        return out;
    }

    void wait(const std::vector<std::string> &keys) override {
        std::vector<std::string> full;
        std::vector<const char *> ptrs;
        for (const std::string &k : keys) full.push_back(prefix_ + k);
        for (const std::string &k : full) ptrs.push_back(k.c_str());
        if (store_wait(store_, ptrs.data(), (int)ptrs.size()) != 0)
            throw std::runtime_error(std::string("store wait: ") + store_error(store_));
    }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override {
        wait(keys);
    }

  private:
    ::Store *store_;
    std::string prefix_;
};

void copy_error(char *err, size_t errlen, const std::string &msg) {
    if (err && errlen > 0) snprintf(err, errlen, "%s", msg.c_str());
}

// Gloo messages span lines (file:line, then the reason); comm.h promises one line.
std::string one_line(const char *what) {
    std::string s(what);
    for (char &c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

// The local address this machine would use to reach master (a UDP connect sends nothing; it
// only asks the kernel for the route), into *out. PyTorch binds the hostname's address, which
// on many machines is 127.0.1.1 or 127.0.0.1 from /etc/hosts: then ranks on other nodes try to
// reach us at loopback and fail only after several connect timeouts.
bool route_source(const char *master, std::string *out) {
    struct addrinfo hints = {}, *ai = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(master, "9", &hints, &ai) != 0 || !ai) return false;
    bool ok = false;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in local = {};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN];
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&local, &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) {
        *out = text;
        ok = true;
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return ok;
}

// Which address the device binds: see pg_new_gloo in comm.h.
gloo::transport::tcp::attr device_attr() {
    gloo::transport::tcp::attr attr;
    const char *iface = getenv("GLOO_SOCKET_IFNAME");
    const char *master = getenv("MASTER_ADDR");
    if (iface && *iface) {
        attr.iface = iface;
    } else if (!master || !*master || !strcmp(master, "localhost") ||
               !strncmp(master, "127.", 4)) {
        attr.hostname = "127.0.0.1";
    } else if (!route_source(master, &attr.hostname)) {
        // the hostname, as PyTorch does, when no route to the master can be found
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        attr.hostname = host;
    }
    return attr;
}

} // namespace

// One queued collective; shared by the queue and the caller's handle so either may finish first.
struct WorkState {
    std::function<void()> run;
    uint64_t seq = 0; // comm.c's number for it, named in its error
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error; // empty on success
};

struct GlooGroup {
    int rank = 0, world = 0;
    std::chrono::milliseconds timeout{0};
    std::unique_ptr<StoreAdapter> store;
    std::shared_ptr<gloo::transport::Device> device;
    std::shared_ptr<gloo::rendezvous::Context> context;

    std::thread worker;
    std::mutex mu; // guards queue, stopping, broken
    std::condition_variable cv;
    std::deque<std::shared_ptr<WorkState>> queue;
    bool stopping = false;
    std::string broken; // the first failure; later collectives fail with it
};

struct GlooWork {
    std::shared_ptr<WorkState> state;
};

static void finish(WorkState &w, std::string error) {
    std::lock_guard<std::mutex> lock(w.mu);
    w.error = std::move(error);
    w.done = true;
    w.cv.notify_all();
}

static void worker_loop(GlooGroup *g) {
    for (;;) {
        std::shared_ptr<WorkState> w;
        std::string broken;
        {
            std::unique_lock<std::mutex> lock(g->mu);
            g->cv.wait(lock, [g] { return g->stopping || !g->queue.empty(); });
            if (g->queue.empty()) return;
            w = g->queue.front();
            g->queue.pop_front();
            broken = g->broken;
        }
        if (!broken.empty()) {
            finish(*w, broken);
            continue;
        }
        std::string error;
        try {
            w->run();
        } catch (const std::exception &e) {
            error = one_line(e.what());
        } catch (...) {
            error = "unknown exception in a Gloo collective";
        }
        if (!error.empty()) {
            error = "rank " + std::to_string(g->rank) + " collective #" + std::to_string(w->seq) +
                    " failed: " + error;
            std::lock_guard<std::mutex> lock(g->mu);
            if (g->broken.empty()) g->broken = error;
        }
        w->run = nullptr; // drop captured state before the waiter sees completion
        finish(*w, error);
    }
}

// Queues fn; the returned work completes once the worker has run it. The tag (seq - 1, so 0
// first) keeps collectives apart on the wire, as PyTorch's Gloo group does.
static std::shared_ptr<WorkState> enqueue(GlooGroup *g, uint64_t seq,
                                          std::function<void(uint32_t)> fn) {
    uint32_t tag = (uint32_t)(seq - 1);
    auto w = std::make_shared<WorkState>();
    w->seq = seq;
    w->run = [fn, tag] { fn(tag); };
    std::lock_guard<std::mutex> lock(g->mu);
    g->queue.push_back(w);
    g->cv.notify_one();
    return w;
}

static int wait_work(WorkState &w, char *err, size_t errlen) {
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait(lock, [&w] { return w.done; });
    if (w.error.empty()) return 0;
    copy_error(err, errlen, w.error);
    return -1;
}

static int run_blocking(GlooGroup *g, uint64_t seq, std::function<void(uint32_t)> fn, char *err,
                        size_t errlen) {
    try {
        std::shared_ptr<WorkState> w = enqueue(g, seq, std::move(fn));
        return wait_work(*w, err, errlen);
    } catch (const std::exception &e) {
        copy_error(err, errlen, one_line(e.what()));
        return -1;
    }
}

// ---- the table's entries: arguments arrive checked (see PgOps in comm.h) ----------------------

static void *gloo_open(Store *store, int rank, int world, const PgOptions *opts, int group_id,
                       char *err, size_t errlen) {
    int timeout_ms = opts->timeout_ms; // opts->memory is comm.c's: it stages device data
    GlooGroup *g = nullptr;
    try {
        g = new GlooGroup;
        g->rank = rank, g->world = world;
        g->timeout = std::chrono::milliseconds(timeout_ms);
        g->store.reset(new StoreAdapter(store, "pg" + std::to_string(group_id) + "/"));
        g->device = gloo::transport::tcp::CreateDevice(device_attr());
        g->context = std::make_shared<gloo::rendezvous::Context>(rank, world);
        g->context->setTimeout(g->timeout);
        g->context->connectFullMesh(*g->store, g->device);
        g->worker = std::thread(worker_loop, g);
        return g;
    } catch (const std::exception &e) {
        copy_error(err, errlen,
                   "rank " + std::to_string(rank) + " joining the Gloo group: " +
                       one_line(e.what()));
    } catch (...) {
        copy_error(err, errlen, "rank " + std::to_string(rank) + " joining the Gloo group failed");
    }
    delete g;
    return nullptr;
}

static void *gloo_allreduce_sum(void *group, float *data, int64_t n, uint64_t seq) {
    GlooGroup *g = (GlooGroup *)group;
    try {
        std::shared_ptr<gloo::Context> ctx = g->context;
        std::chrono::milliseconds timeout = g->timeout;
        auto w = enqueue(g, seq, [ctx, timeout, data, n](uint32_t tag) {
            if (n == 0) return;
            gloo::AllreduceOptions opts(ctx);
            opts.setOutput(data, (size_t)n);
            opts.setReduceFunction(
                static_cast<void (*)(void *, const void *, const void *, size_t)>(
                    &gloo::sum<float>));
            opts.setTag(tag);
            opts.setTimeout(timeout);
            gloo::allreduce(opts);
        });
        return new GlooWork{w};
    } catch (const std::exception &e) {
        fprintf(stderr, "pg_allreduce_sum: %s\n", one_line(e.what()).c_str());
        abort();
    }
}

static int gloo_work_wait(void *work, char *err, size_t errlen) {
    return wait_work(*((GlooWork *)work)->state, err, errlen);
}

static bool gloo_work_test(void *work) {
    WorkState &state = *((GlooWork *)work)->state;
    std::lock_guard<std::mutex> lock(state.mu);
    return state.done;
}

static void gloo_work_free(void *work) {
    GlooWork *w = (GlooWork *)work;
    wait_work(*w->state, nullptr, 0);
    delete w;
}

static int gloo_broadcast(void *group, float *data, int64_t n, int root, uint64_t seq, char *err,
                          size_t errlen) {
    GlooGroup *g = (GlooGroup *)group;
    std::shared_ptr<gloo::Context> ctx = g->context;
    std::chrono::milliseconds timeout = g->timeout;
    return run_blocking(
        g, seq,
        [ctx, timeout, data, n, root](uint32_t tag) {
            if (n == 0) return;
            gloo::BroadcastOptions opts(ctx);
            opts.setOutput(data, (size_t)n);
            opts.setRoot(root);
            opts.setTag(tag);
            opts.setTimeout(timeout);
            gloo::broadcast(opts);
        },
        err, errlen);
}

static int gloo_allgather(void *group, const void *in, size_t bytes, void *out, uint64_t seq,
                          char *err, size_t errlen) {
    GlooGroup *g = (GlooGroup *)group;
    std::shared_ptr<gloo::Context> ctx = g->context;
    std::chrono::milliseconds timeout = g->timeout;
    int rank = g->rank, world = g->world;
    return run_blocking(
        g, seq,
        [ctx, timeout, in, bytes, out, rank, world](uint32_t tag) {
            if (bytes == 0) return;
            // Gloo's allgather reads this rank's slot of out when given no separate input.
            uint8_t *o = (uint8_t *)out;
            memmove(o + (size_t)rank * bytes, in, bytes);
            gloo::AllgatherOptions opts(ctx);
            opts.setOutput(o, bytes * (size_t)world);
            opts.setTag(tag);
            opts.setTimeout(timeout);
            gloo::allgather(opts);
        },
        err, errlen);
}

static int gloo_barrier(void *group, uint64_t seq, char *err, size_t errlen) {
    GlooGroup *g = (GlooGroup *)group;
    std::shared_ptr<gloo::Context> ctx = g->context;
    std::chrono::milliseconds timeout = g->timeout;
    return run_blocking(
        g, seq,
        [ctx, timeout](uint32_t tag) {
            gloo::BarrierOptions opts(ctx);
            opts.setTag(tag);
            opts.setTimeout(timeout);
            gloo::barrier(opts);
        },
        err, errlen);
}

static void gloo_free(void *group) {
    GlooGroup *g = (GlooGroup *)group;
    {
        std::lock_guard<std::mutex> lock(g->mu);
        g->stopping = true;
        g->cv.notify_one();
    }
    if (g->worker.joinable()) g->worker.join();
    try {
        g->context.reset();
        g->device.reset();
    } catch (...) {
        // A peer already gone can make Gloo throw while closing its pairs; nothing to report.
    }
    delete g;
}

// In PgOps's field order (C++17 has no designated initialisers).
extern "C" const PgOps pg_gloo_ops = {
    "gloo",
    gloo_open,
    gloo_allreduce_sum,
    gloo_work_wait,
    gloo_work_test,
    gloo_work_free,
    gloo_broadcast,
    gloo_allgather,
    gloo_barrier,
    gloo_free,
    nullptr, // allreduce_sum_device: comm.c stages device data through host memory
    nullptr, // broadcast_device
};
