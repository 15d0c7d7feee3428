/* comm_gloo.cc -- the process group of comm.h on Gloo: a gloo::rendezvous::Store adapter over
 * our TCP Store, a full-mesh TCP context, and one worker thread per group that runs queued
 * collectives in launch order. The only C++ in the project; every entry point is extern "C"
 * and catches every exception, turning it into the one-line error comm.h promises. Not a
 * Gloo wrapper in general: float sum, broadcast, byte allgather and barrier only. */
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
    } else {
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        attr.hostname = host;
    }
    return attr;
}

std::atomic<int> groups_created{0};

} // namespace

// One queued collective; shared by the queue and the caller's handle so either may finish first.
struct WorkState {
    std::function<void()> run;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error; // empty on success
};

struct ProcessGroup {
    int rank = 0, world = 0;
    std::chrono::milliseconds timeout{0};
    std::unique_ptr<StoreAdapter> store;
    std::shared_ptr<gloo::transport::Device> device;
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::atomic<uint64_t> seq{0};

    std::thread worker;
    std::mutex mu; // guards queue, stopping, broken
    std::condition_variable cv;
    std::deque<std::shared_ptr<WorkState>> queue;
    bool stopping = false;
    std::string broken; // the first failure; later collectives fail with it
};

struct PgWork {
    std::shared_ptr<WorkState> state;
};

static void finish(WorkState &w, std::string error) {
    std::lock_guard<std::mutex> lock(w.mu);
    w.error = std::move(error);
    w.done = true;
    w.cv.notify_all();
}

static void worker_loop(ProcessGroup *pg) {
    for (;;) {
        std::shared_ptr<WorkState> w;
        std::string broken;
        {
            std::unique_lock<std::mutex> lock(pg->mu);
            pg->cv.wait(lock, [pg] { return pg->stopping || !pg->queue.empty(); });
            if (pg->queue.empty()) return;
            w = pg->queue.front();
            pg->queue.pop_front();
            broken = pg->broken;
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
            error = "rank " + std::to_string(pg->rank) + " collective #" +
                    std::to_string(pg->seq.load()) + " failed: " + error;
            std::lock_guard<std::mutex> lock(pg->mu);
            if (pg->broken.empty()) pg->broken = error;
        }
        w->run = nullptr; // drop captured state before the waiter sees completion
        finish(*w, error);
    }
}

// Queues fn; the returned work completes once the worker has run it. The tag (the sequence
// number) keeps collectives apart on the wire, as PyTorch's Gloo group does.
static std::shared_ptr<WorkState> enqueue(ProcessGroup *pg, std::function<void(uint32_t)> fn) {
    uint32_t tag = (uint32_t)pg->seq.fetch_add(1);
    auto w = std::make_shared<WorkState>();
    w->run = [fn, tag] { fn(tag); };
    std::lock_guard<std::mutex> lock(pg->mu);
    pg->queue.push_back(w);
    pg->cv.notify_one();
    return w;
}

static int wait_work(WorkState &w, char *err, size_t errlen) {
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait(lock, [&w] { return w.done; });
    if (w.error.empty()) return 0;
    copy_error(err, errlen, w.error);
    return -1;
}

static int run_blocking(ProcessGroup *pg, std::function<void(uint32_t)> fn, char *err,
                        size_t errlen) {
    try {
        std::shared_ptr<WorkState> w = enqueue(pg, std::move(fn));
        return wait_work(*w, err, errlen);
    } catch (const std::exception &e) {
        copy_error(err, errlen, one_line(e.what()));
        return -1;
    }
}

extern "C" {

ProcessGroup *pg_new_gloo(Store *store, int rank, int world, int timeout_ms, char *err,
                          size_t errlen) {
    if (world < 1 || rank < 0 || rank >= world || timeout_ms <= 0) {
        copy_error(err, errlen,
                   "pg_new_gloo: rank " + std::to_string(rank) + " of world " +
                       std::to_string(world) + " with timeout " + std::to_string(timeout_ms) +
                       " ms: expected 0 <= rank < world and a positive timeout");
        return nullptr;
    }
    ProcessGroup *pg = nullptr;
    try {
        pg = new ProcessGroup;
        pg->rank = rank, pg->world = world;
        pg->timeout = std::chrono::milliseconds(timeout_ms);
        int group = groups_created.fetch_add(1);
        pg->store.reset(new StoreAdapter(store, "pg" + std::to_string(group) + "/"));
        pg->device = gloo::transport::tcp::CreateDevice(device_attr());
        pg->context = std::make_shared<gloo::rendezvous::Context>(rank, world);
        pg->context->setTimeout(pg->timeout);
        pg->context->connectFullMesh(*pg->store, pg->device);
        pg->worker = std::thread(worker_loop, pg);
        return pg;
    } catch (const std::exception &e) {
        copy_error(err, errlen,
                   "rank " + std::to_string(rank) + " joining the Gloo group: " +
                       one_line(e.what()));
    } catch (...) {
        copy_error(err, errlen, "rank " + std::to_string(rank) + " joining the Gloo group failed");
    }
    delete pg;
    return nullptr;
}

int pg_rank(const ProcessGroup *pg) { return pg->rank; }
int pg_world(const ProcessGroup *pg) { return pg->world; }
uint64_t pg_seq(const ProcessGroup *pg) { return pg->seq.load(); }

PgWork *pg_allreduce_sum(ProcessGroup *pg, float *data, int64_t n) {
    if (n < 0) {
        fprintf(stderr, "pg_allreduce_sum: negative count %lld\n", (long long)n);
        abort();
    }
    try {
        std::shared_ptr<gloo::Context> ctx = pg->context;
        std::chrono::milliseconds timeout = pg->timeout;
        auto w = enqueue(pg, [ctx, timeout, data, n](uint32_t tag) {
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
        return new PgWork{w};
    } catch (const std::exception &e) {
        fprintf(stderr, "pg_allreduce_sum: %s\n", one_line(e.what()).c_str());
        abort();
    }
}

int pg_work_wait(PgWork *w, char *err, size_t errlen) {
    return wait_work(*w->state, err, errlen);
}

bool pg_work_test(PgWork *w) {
    WorkState &work = *w->state;
    std::lock_guard<std::mutex> lock(work.mu);
    return work.done;
}

void pg_work_free(PgWork *w) {
    if (!w) return;
    wait_work(*w->state, nullptr, 0);
    delete w;
}

int pg_broadcast(ProcessGroup *pg, float *data, int64_t n, int root, char *err, size_t errlen) {
    if (root < 0 || root >= pg->world || n < 0) {
        copy_error(err, errlen,
                   "pg_broadcast: root " + std::to_string(root) + ", count " +
                       std::to_string(n) + ": expected 0 <= root < " +
                       std::to_string(pg->world) + " and a count >= 0");
        return -1;
    }
    std::shared_ptr<gloo::Context> ctx = pg->context;
    std::chrono::milliseconds timeout = pg->timeout;
    return run_blocking(
        pg,
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

int pg_allgather(ProcessGroup *pg, const void *in, size_t bytes, void *out, char *err,
                 size_t errlen) {
    std::shared_ptr<gloo::Context> ctx = pg->context;
    std::chrono::milliseconds timeout = pg->timeout;
    int rank = pg->rank, world = pg->world;
    return run_blocking(
        pg,
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

int pg_barrier(ProcessGroup *pg, char *err, size_t errlen) {
    std::shared_ptr<gloo::Context> ctx = pg->context;
    std::chrono::milliseconds timeout = pg->timeout;
    return run_blocking(
        pg,
        [ctx, timeout](uint32_t tag) {
            gloo::BarrierOptions opts(ctx);
            opts.setTag(tag);
            opts.setTimeout(timeout);
            gloo::barrier(opts);
        },
        err, errlen);
}

void pg_free(ProcessGroup *pg) {
    if (!pg) return;
    {
        std::lock_guard<std::mutex> lock(pg->mu);
        pg->stopping = true;
        pg->cv.notify_one();
    }
    if (pg->worker.joinable()) pg->worker.join();
    try {
        pg->context.reset();
        pg->device.reset();
    } catch (...) {
        // A peer already gone can make Gloo throw while closing its pairs; nothing to report.
    }
    delete pg;
}

} // extern "C"
