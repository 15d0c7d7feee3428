/* test_probe_abi.c -- libddpdbg_probe.so as a foreign process loads it (dlopen, as Python's
 * ctypes does): every symbol of probe/abi.h is exported, the ABI version is 1, each call lands
 * in the rank's trace as the trainer's probe would write it (PARAM into params with shapes,
 * LAYOUT into layouts, a batch of events in order with their own times, a long text whole, a
 * phase event and the live phase), kinds that are not kinds are dropped, a probe that cannot
 * open is NULL and every call on NULL is a no-op, and a clean close removes the ring. */
#include "probe/abi.h"
#include "probe/probe.h"

#include "tests/expect.h"
#include "tests/sqlite_query.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PROBE_SO_PATH
#define PROBE_SO_PATH "build/cpu/lib/libddpdbg_probe.so"
#endif

typedef struct Abi {
    int (*version)(void);
    DdpdbgProbe *(*open)(const char *, int, int, int);
    void (*close)(DdpdbgProbe *);
    void (*meta)(DdpdbgProbe *, const char *, const char *);
    void (*params)(DdpdbgProbe *, int, int, const char *const *, const int32_t *, const int64_t *,
                   const int64_t *);
    void (*layout)(DdpdbgProbe *, int64_t, int, int, const int32_t *, const int32_t *,
                   const int64_t *);
    void (*emit_many)(DdpdbgProbe *, int, const int64_t *);
    void (*emit_text)(DdpdbgProbe *, int, int, int64_t, int32_t, int32_t, int64_t, int64_t,
                      const char *, int64_t);
    void (*phase)(DdpdbgProbe *, int, int, int64_t);
    int (*on)(DdpdbgProbe *);
} Abi;

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    EXPECT(f != NULL, "%s is not exported by %s", name, PROBE_SO_PATH);
    return f;
}

int main(void) {
    void *lib = dlopen(PROBE_SO_PATH, RTLD_NOW | RTLD_LOCAL);
    EXPECT(lib != NULL, "dlopen %s: %s", PROBE_SO_PATH, dlerror());
    if (!lib) return expect_report();
    Abi abi = {sym(lib, "ddpdbg_abi_version"), sym(lib, "ddpdbg_open"), sym(lib, "ddpdbg_close"),
               sym(lib, "ddpdbg_meta"),        sym(lib, "ddpdbg_params"), sym(lib, "ddpdbg_layout"),
               sym(lib, "ddpdbg_emit_many"),   sym(lib, "ddpdbg_emit_text"),
               sym(lib, "ddpdbg_phase"),       sym(lib, "ddpdbg_on")};
    if (expect_failures) return expect_report();
    EXPECT(abi.version() == DDPDBG_ABI_VERSION && DDPDBG_ABI_VERSION == 1, "version %d",
           abi.version());

    // a probe that cannot open: NULL (one warning), and NULL makes every call a no-op
    DdpdbgProbe *none = abi.open("/proc/ddpdbg-no/such", 0, 0, 0);
    EXPECT(none == NULL, "an unwritable folder gives NULL");
    abi.meta(NULL, "k", "v");
    abi.emit_many(NULL, 1, (int64_t[8]){0, PROBE_FORWARD_BEGIN});
    abi.phase(NULL, PROBE_FORWARD_BEGIN, PROBE_PHASE_FORWARD, 0);
    abi.close(NULL);
    EXPECT(abi.on(NULL) == 0, "NULL is off");

    char dir[] = "/tmp/ddpdbg-abi-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    DdpdbgProbe *p = abi.open(dir, 3, 0, 1);
    EXPECT(p != NULL && abi.on(p), "open %s", dir);
    if (!p) return expect_report();
    abi.meta(p, "program", "python");
    const char *names[] = {"backbone.0.weight", "head.bias"};
    abi.params(p, 0, 2, names, (int32_t[]){4, 1}, (int64_t[]){8, 3, 3, 3, 4},
               (int64_t[]){216, 4});
    abi.layout(p, -1, 0, 2, (int32_t[]){0, 0}, (int32_t[]){1, 0}, (int64_t[]){0, 4});
    int64_t t = 1700000000123456789;
    int64_t events[4 * DDPDBG_EVENT_WORDS] = {
        t,     PROBE_GRAD_READY, PROBE_FLAG_MARKED, 0, 1, 0, 1, 0, // hook of param 1, marked
        t + 5, 0,                0,                 0, 0, 0, 0, 0, // kind 0: not a kind, dropped
        0,     PROBE_TEXT,       0,                 0, 0, 0, 0, 0, // TEXT is the ring's own
        t + 9, PROBE_BUCKET_READY, 0,               0, 0, 0, 0, 0, // bucket 0
    };
    abi.emit_many(p, 4, events);
    char text[200];
    memset(text, 'x', sizeof text);
    memcpy(text, "Expected to", 11);
    abi.emit_text(p, PROBE_ERROR, 0, 1, 0, 0, 0, 0, text, sizeof text);
    abi.phase(p, PROBE_FORWARD_BEGIN, PROBE_PHASE_FORWARD, 2);
    abi.close(p);

    char path[128];
    snprintf(path, sizeof path, "%s/rank3.db", dir);
    sqlite3 *db = db_open(path);
    EXPECT(q_int(db, "SELECT count(*) FROM meta WHERE key = 'program' AND value = 'python'") == 1,
           "META");
    EXPECT(q_int(db, "SELECT count(*) FROM params WHERE idx = 0 AND name = 'backbone.0.weight' "
                     "AND shape = '8x3x3x3' AND numel = 216") == 1 &&
               q_int(db, "SELECT count(*) FROM params WHERE idx = 1 AND shape = '4'") == 1,
           "PARAM rows with their shapes");
    EXPECT(q_int(db, "SELECT count(*) FROM layouts WHERE generation = 0 AND bucket = 0 AND "
                     "((pos = 0 AND param = 1 AND offset = 0) OR (pos = 1 AND param = 0 AND "
                     "offset = 4))") == 2,
           "LAYOUT rows in their order");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = 8 AND a = 1 AND flags = 2 AND "
                     "c = 1 AND t_ns = %lld",
                 (long long)t) == 1,
           "the hook with its own time");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind IN (0, 19)") == 0,
           "no row for the kinds that are none");
    EXPECT(q_int(db, "SELECT (SELECT seq FROM events WHERE kind = 10) - (SELECT seq FROM events "
                     "WHERE kind = 8)") == 1,
           "the batch's order kept");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = 16 AND length(text) = 200 AND "
                     "text LIKE 'Expected to%%'") == 1,
           "the long text whole");
    EXPECT(q_int(db, "SELECT count(*) FROM events WHERE kind = 4 AND iter = 2") == 1,
           "the phase's event");
    EXPECT(q_int(db, "SELECT count(*) FROM meta WHERE key = 'closed' AND value = 'clean'") == 1,
           "closed clean");
    sqlite3_close(db);
    snprintf(path, sizeof path, "%s/rank3.ring", dir);
    EXPECT(access(path, F_OK) != 0, "the ring removed at a clean close");
    snprintf(path, sizeof path, "rm -rf %s", dir);
    EXPECT(system(path) == 0, "cleanup");
    dlclose(lib);
    return expect_report();
}
