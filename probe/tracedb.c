/* tracedb.c -- a rank's SQLite trace: creation from the compiled-in schema, the prepared
 * inserts the writer and the drain share, and the reader's check (version, tables, integrity).
 * Not a query layer: readers (the TUI, the sqlite3 CLI) write their own SQL against
 * traces/schema.sql. */
#include "probe/tracedb.h"

#include "kernels/base.h" // CHECK, xmalloc

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

// Events per INSERT statement: one statement step costs about as much as the rows it adds, so
// 32 rows a step nearly double the writer's rate (measured: 0.6 -> 1.1 M rows/s).
#define ROWS_PER_INSERT 32
#define EVENT_COLUMNS 10

struct TraceDb {
    sqlite3 *db;
    sqlite3_stmt *begin, *commit, *event, *events, *meta, *param, *layout, *max_seq;
    // Events waiting for a full multi-row INSERT (or the commit), with copies of their text.
    ProbeRecord pending[ROWS_PER_INSERT];
    char *pending_text[ROWS_PER_INSERT];
    size_t pending_len[ROWS_PER_INSERT], pending_cap[ROWS_PER_INSERT];
    int n_pending;
    char err[4608]; // paths are up to PATH_MAX
    char path[];
};

// The tables a trace must have; the rest of the schema (kinds, ops, phases, view) is help.
static const char *const required_tables[] = {"meta", "kinds", "params", "layouts", "events"};

static int fail(TraceDb *db, const char *what) {
    snprintf(db->err, sizeof db->err, "%s: %s: %s", db->path, what, sqlite3_errmsg(db->db));
    return -1;
}

const char *tracedb_error(const TraceDb *db) {
    return db->err;
}

const char *tracedb_path(const TraceDb *db) {
    return db->path;
}

static int exec(TraceDb *db, const char *sql, const char *what) {
    char *msg = NULL;
    if (sqlite3_exec(db->db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
    snprintf(db->err, sizeof db->err, "%s: %s: %s", db->path, what,
             msg ? msg : sqlite3_errmsg(db->db));
    sqlite3_free(msg);
    return -1;
}

// Runs a statement that returns one integer (a PRAGMA, a count) into *out.
static int query_int(sqlite3 *db, const char *sql, int64_t *out) {
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0), rc = SQLITE_OK;
    else if (rc == SQLITE_DONE)
        *out = 0, rc = SQLITE_OK;
    sqlite3_finalize(s);
    return rc;
}

static int prepare(TraceDb *db, sqlite3_stmt **s, const char *sql) {
    if (sqlite3_prepare_v3(db->db, sql, -1, SQLITE_PREPARE_PERSISTENT, s, NULL) == SQLITE_OK)
        return 0;
    return fail(db, "preparing a statement");
}

// SQLite keeps process-wide memory statistics behind a global mutex on every malloc; the probe
// has no use for them and they cost the writer ~15 %. Only possible before SQLite's first use.
static void tune_sqlite(void) {
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); // SQLITE_MISUSE if SQLite was used already: fine
}

// WAL: readers (the live TUI) never block the writer; synchronous=NORMAL: a commit survives
// the process dying (the case we care about), only a power cut may lose the last ones.
// NOMUTEX: a connection is used by one thread at a time (opened by probe_open, then the writer).
// cache_size 2 MiB: the writer appends, touching the last pages of each B-tree; a bigger cache
// would only grow each rank's memory with its trace (no faster: bench_probe).
static int connect(TraceDb *db, int flags) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tune_sqlite);
    if (sqlite3_open_v2(db->path, &db->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        return fail(db, "cannot open the trace database");
    sqlite3_busy_timeout(db->db, 5000);
    if (exec(db,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-2048;"
             " PRAGMA wal_autocheckpoint=4096;",
             "setting WAL mode") < 0)
        return -1;
    char many[64 + ROWS_PER_INSERT * 24] =
        "INSERT INTO events(seq, t_ns, iter, kind, a, b, c, d, flags, text) VALUES";
    for (int r = 0; r < ROWS_PER_INSERT; r++)
        strcat(many, r ? ",(?,?,?,?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?,?,?,?)");
    if (prepare(db, &db->begin, "BEGIN") < 0 || prepare(db, &db->commit, "COMMIT") < 0 ||
        prepare(db, &db->event,
                "INSERT INTO events(seq, t_ns, iter, kind, a, b, c, d, flags, text)"
                " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)") < 0 ||
        prepare(db, &db->events, many) < 0 ||
        prepare(db, &db->meta, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)") < 0 ||
        prepare(db, &db->param,
                "INSERT OR REPLACE INTO params(idx, name, ndim, shape, numel)"
                " VALUES(?1, ?2, ?3, ?4, ?5)") < 0 ||
        prepare(db, &db->layout,
                "INSERT INTO layouts(generation, bucket, pos, param, offset)"
                " VALUES(?1, ?2, (SELECT count(*) FROM layouts"
                " WHERE generation = ?1 AND bucket = ?2), ?3, ?4)") < 0 ||
        prepare(db, &db->max_seq, "SELECT coalesce(max(seq), 0) FROM events") < 0)
        return -1;
    return 0;
}

static TraceDb *db_new(const char *path) {
    size_t n = strlen(path) + 1;
    TraceDb *db = xcalloc(1, sizeof *db + n);
    memcpy(db->path, path, n);
    return db;
}

static TraceDb *give_up(TraceDb *db, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s", db->err);
    tracedb_close(db, false);
    return NULL;
}

TraceDb *tracedb_create(const char *path, char *err, size_t errlen) {
    TraceDb *db = db_new(path);
    char side[4200];
    const char *suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < 4; i++) {
        snprintf(side, sizeof side, "%s%s", path, suffixes[i]);
        if (unlink(side) < 0 && errno != ENOENT) {
            snprintf(db->err, sizeof db->err, "cannot replace %s: %s", side, strerror(errno));
            return give_up(db, err, errlen);
        }
    }
    if (sqlite3_open_v2(path, &db->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        fail(db, "cannot create the trace database");
        return give_up(db, err, errlen);
    }
    if (exec(db, "BEGIN", "creating the schema") < 0 ||
        exec(db, probe_schema_sql, "creating the schema") < 0 ||
        exec(db, "COMMIT", "creating the schema") < 0)
        return give_up(db, err, errlen);
    int64_t version = 0;
    CHECK(query_int(db->db, "PRAGMA user_version", &version) == SQLITE_OK &&
              version == PROBE_SCHEMA_VERSION,
          "traces/schema.sql sets user_version %lld, probe.h says %d", (long long)version,
          PROBE_SCHEMA_VERSION);
    sqlite3_close(db->db);
    db->db = NULL;
    if (connect(db, SQLITE_OPEN_READWRITE) < 0) return give_up(db, err, errlen);
    return db;
}

static int db_check(const char *path, bool for_writing, char *err, size_t errlen);

TraceDb *tracedb_open(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) < 0 && errno == ENOENT) return tracedb_create(path, err, errlen);
    if (db_check(path, true, err, errlen) < 0) return NULL;
    TraceDb *db = db_new(path);
    if (connect(db, SQLITE_OPEN_READWRITE) < 0) return give_up(db, err, errlen);
    return db;
}

void tracedb_close(TraceDb *db, bool self_contained) {
    if (!db) return;
    sqlite3_stmt *all[] = {db->begin, db->commit, db->event,  db->events,
                           db->meta,  db->param,  db->layout, db->max_seq};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        sqlite3_finalize(all[i]);
    for (int i = 0; i < ROWS_PER_INSERT; i++)
        free(db->pending_text[i]);
    // Leaving WAL needs the database to ourselves; a reader still attached keeps it in WAL,
    // which is fine for it and for the next reader.
    if (self_contained && db->db)
        sqlite3_exec(db->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    sqlite3_close(db->db);
    free(db);
}

static int step(TraceDb *db, sqlite3_stmt *s, const char *what) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return 0;
    return fail(db, what);
}

static void bind_text(sqlite3_stmt *s, int i, const char *text, size_t len) {
    if (len)
        sqlite3_bind_text(s, i, text, (int)len, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

// Binds event `row` of the pending ones to the columns of row `at` of statement s.
static void bind_event(TraceDb *db, sqlite3_stmt *s, int at, int row) {
    const ProbeRecord *r = &db->pending[row];
    int i = at * EVENT_COLUMNS;
    sqlite3_bind_int64(s, i + 1, (int64_t)r->seq);
    sqlite3_bind_int64(s, i + 2, r->t_ns);
    sqlite3_bind_int64(s, i + 3, r->iter);
    sqlite3_bind_int(s, i + 4, r->kind);
    sqlite3_bind_int(s, i + 5, r->a);
    sqlite3_bind_int(s, i + 6, r->b);
    sqlite3_bind_int64(s, i + 7, r->c);
    sqlite3_bind_int64(s, i + 8, r->d);
    sqlite3_bind_int(s, i + 9, r->flags);
    bind_text(s, i + 10, db->pending_text[row], db->pending_len[row]);
}

// Inserts the pending events: one multi-row step when they are a full set, else one by one.
static int flush_pending(TraceDb *db) {
    int n = db->n_pending;
    db->n_pending = 0;
    if (n == ROWS_PER_INSERT) {
        for (int row = 0; row < n; row++)
            bind_event(db, db->events, row, row);
        return step(db, db->events, "inserting events");
    }
    for (int row = 0; row < n; row++) {
        bind_event(db, db->event, 0, row);
        if (step(db, db->event, "inserting an event") < 0) return -1;
    }
    return 0;
}

int tracedb_begin(TraceDb *db) {
    db->n_pending = 0;
    return step(db, db->begin, "BEGIN");
}

int tracedb_commit(TraceDb *db) {
    if (flush_pending(db) < 0) return -1;
    return step(db, db->commit, "COMMIT");
}

int tracedb_insert(TraceDb *db, const ProbeRecord *r, const char *text, size_t len) {
    int row = db->n_pending++;
    db->pending[row] = *r;
    if (len + 1 > db->pending_cap[row]) {
        db->pending_cap[row] = MAX(len + 1, 64);
        db->pending_text[row] = xrealloc(db->pending_text[row], db->pending_cap[row]);
    }
    if (len) memcpy(db->pending_text[row], text, len);
    db->pending_len[row] = len;
    if (db->n_pending == ROWS_PER_INSERT && flush_pending(db) < 0) return -1;

    if (r->kind == PROBE_META) { // "key=value"; no '=': the whole text is the key
        const char *eq = len ? memchr(text, '=', len) : NULL;
        size_t klen = eq ? (size_t)(eq - text) : len;
        sqlite3_bind_text(db->meta, 1, len ? text : "", (int)klen, SQLITE_STATIC);
        sqlite3_bind_text(db->meta, 2, eq ? eq + 1 : "", eq ? (int)(len - klen - 1) : 0,
                          SQLITE_STATIC);
        return step(db, db->meta, "inserting into meta");
    }
    if (r->kind == PROBE_PARAM) { // "name shape"; names have no spaces
        size_t nlen = len;
        while (nlen > 0 && text[nlen - 1] != ' ')
            nlen--;
        size_t name_len = nlen ? nlen - 1 : len;
        sqlite3_bind_int(db->param, 1, r->a);
        sqlite3_bind_text(db->param, 2, len ? text : "", (int)name_len, SQLITE_STATIC);
        sqlite3_bind_int(db->param, 3, r->b);
        sqlite3_bind_text(db->param, 4, nlen ? text + nlen : "", nlen ? (int)(len - nlen) : 0,
                          SQLITE_STATIC);
        sqlite3_bind_int64(db->param, 5, r->c);
        return step(db, db->param, "inserting into params");
    }
    if (r->kind == PROBE_LAYOUT) {
        sqlite3_bind_int(db->layout, 1, r->a);
        sqlite3_bind_int(db->layout, 2, r->b);
        sqlite3_bind_int64(db->layout, 3, r->c);
        sqlite3_bind_int64(db->layout, 4, r->d);
        return step(db, db->layout, "inserting into layouts");
    }
    return 0;
}

int tracedb_set_meta(TraceDb *db, const char *key, const char *value) {
    sqlite3_bind_text(db->meta, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(db->meta, 2, value, -1, SQLITE_STATIC);
    return step(db, db->meta, "setting meta");
}

int tracedb_set_meta_int(TraceDb *db, const char *key, int64_t value) {
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)value);
    return tracedb_set_meta(db, key, text);
}

int tracedb_max_seq(TraceDb *db, uint64_t *seq) {
    int rc = sqlite3_step(db->max_seq);
    if (rc == SQLITE_ROW) *seq = (uint64_t)sqlite3_column_int64(db->max_seq, 0);
    sqlite3_reset(db->max_seq);
    return rc == SQLITE_ROW ? 0 : fail(db, "reading the last seq");
}

// ---- the reader's check --------------------------------------------------------------------

// Traces above this size skip the page check in probe_db_check and tracedb_open.
#define PROBE_QUICK_CHECK_MAX_BYTES ((off_t)64 << 20)

// A writer that died inside a rollback-journal transaction leaves a hot journal (path-journal)
// that SQLite rolls back at the next read, restoring the last commit; a read-only connection
// cannot, and fails every read with SQLITE_READONLY_ROLLBACK. The probe writes so in exactly
// one place: its close switches the trace out of WAL (tracedb_close), a one-page transaction
// that a rank killed at that moment (the launcher's SIGTERM after another rank failed) leaves
// half done. Every committed event is in the file; one read through a read-write connection
// rolls the switch back. Returns 0, or -1 with the reason in msg (no write access, ...).
static int roll_back_hot_journal(const char *path, char *msg, size_t len) {
    sqlite3 *db = NULL;
    int64_t version = 0;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) rc = query_int(db, "PRAGMA user_version", &version);
    if (rc != SQLITE_OK)
        snprintf(msg, len,
                 "trace %s: its writer died inside a transaction (%s-journal is left) and rolling "
                 "that back needs write access: %s",
                 path, path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

// Opens path read-only into *db and reads its user_version: SQLITE_OK, else SQLite's code
// (*db's extended code says more) with msg set when even the open failed.
static int open_read_only(const char *path, sqlite3 **db, int64_t *version, char *msg,
                          size_t len) {
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(msg, len, "trace %s cannot be opened: %s", path, sqlite3_errmsg(*db));
        return SQLITE_CANTOPEN;
    }
    return query_int(*db, "PRAGMA user_version", version);
}

// probe_db_check, and for a trace about to be written into (for_writing) integrity_check in
// place of quick_check: it also compares every index with its table. A reader survives an
// index that lacks rows (a query misses them); a write through one corrupts the table (an
// INSERT OR REPLACE that finds no duplicate), so the drain refuses such a trace. It costs
// about twice quick_check (0.26 s against 0.12 s on an 18 MB trace). Either way a hot journal
// is rolled back first (roll_back_hot_journal): the one write a reader makes.
static int db_check(const char *path, bool for_writing, char *err, size_t errlen) {
    char msg[512] = "";
    struct stat st;
    sqlite3 *db = NULL;
    int64_t version = 0, n = 0;
    if (stat(path, &st) < 0) {
        snprintf(msg, sizeof msg, "trace %s: %s", path, strerror(errno));
        goto done;
    }
    int rc = open_read_only(path, &db, &version, msg, sizeof msg);
    if (rc != SQLITE_OK && !msg[0] && sqlite3_extended_errcode(db) == SQLITE_READONLY_ROLLBACK) {
        sqlite3_close(db);
        db = NULL;
        if (roll_back_hot_journal(path, msg, sizeof msg) < 0) goto done;
        rc = open_read_only(path, &db, &version, msg, sizeof msg);
    }
    if (msg[0]) goto done;
    if (rc != SQLITE_OK) {
        snprintf(msg, sizeof msg, "trace %s %s: %s", path,
                 (rc & 0xff) == SQLITE_CORRUPT ? "is corrupt or truncated"
                                               : "is not a readable SQLite database",
                 sqlite3_errmsg(db));
        goto done;
    }
    if (version < 1) {
        snprintf(msg, sizeof msg,
                 "%s is not a ddpdbg trace: its schema version (user_version) is %lld", path,
                 (long long)version);
        goto done;
    }
    if (version > PROBE_SCHEMA_VERSION) {
        snprintf(msg, sizeof msg, "trace %s has schema version %lld, this ddpdbg reads up to %d",
                 path, (long long)version, PROBE_SCHEMA_VERSION);
        goto done;
    }
    for (size_t i = 0; i < sizeof required_tables / sizeof *required_tables; i++) {
        char sql[160];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'",
                 required_tables[i]);
        if (query_int(db, sql, &n) != SQLITE_OK) {
            snprintf(msg, sizeof msg, "trace %s is corrupt or truncated: %s", path,
                     sqlite3_errmsg(db));
            goto done;
        }
        if (n != 1) {
            snprintf(msg, sizeof msg, "trace %s has no table %s: not a ddpdbg trace", path,
                     required_tables[i]);
            goto done;
        }
    }
    // A truncated file: fewer bytes than the pages the database says it has (only without a
    // -wal beside it, whose pages may not be in the main file yet). Cheap at any size.
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    int64_t pages = 0, page_size = 0;
    struct stat wst;
    if (stat(wal, &wst) != 0 && query_int(db, "PRAGMA page_count", &pages) == SQLITE_OK &&
        query_int(db, "PRAGMA page_size", &page_size) == SQLITE_OK &&
        (int64_t)st.st_size < pages * page_size) {
        snprintf(msg, sizeof msg, "trace %s is truncated: %lld bytes of %lld", path,
                 (long long)st.st_size, (long long)(pages * page_size));
        goto done;
    }
    // quick_check reads every page: a damaged page shows here. It costs about a second per
    // 200 MB, so big traces skip it (report's budget): a damaged page there surfaces as SQLite's
    // "database disk image is malformed" when the reader reaches it.
    if (st.st_size > PROBE_QUICK_CHECK_MAX_BYTES) goto done;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, for_writing ? "PRAGMA integrity_check" : "PRAGMA quick_check", -1,
                           &s, NULL) != SQLITE_OK) {
        snprintf(msg, sizeof msg, "trace %s is corrupt or truncated: %s", path, sqlite3_errmsg(db));
        goto done;
    }
    rc = sqlite3_step(s);
    const char *first = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    if (rc != SQLITE_ROW)
        snprintf(msg, sizeof msg, "trace %s is corrupt or truncated: %s", path, sqlite3_errmsg(db));
    else if (!first || strcmp(first, "ok"))
        snprintf(msg, sizeof msg, "trace %s is corrupt or truncated: %s", path,
                 first ? first : "(no answer)");
    sqlite3_finalize(s);
done:
    sqlite3_close(db);
    if (!msg[0]) return 0;
    for (char *q = msg; *q; q++) // SQLite's texts span lines (quick_check, quoted schema)
        if (*q == '\n' || *q == '\r') *q = ' ';
    if (err && errlen) snprintf(err, errlen, "%s", msg);
    return -1;
}

int probe_db_check(const char *path, char *err, size_t errlen) {
    return db_check(path, false, err, errlen);
}

int probe_db_set_meta(const char *path, const char *const *keys, const char *const *values, int n,
                      char *err, size_t errlen) {
    TraceDb *db = tracedb_open(path, err, errlen);
    if (!db) return -1;
    int rc = tracedb_begin(db);
    for (int i = 0; i < n && !rc; i++)
        rc = tracedb_set_meta(db, keys[i], values[i]);
    if (!rc) rc = tracedb_commit(db);
    if (rc) snprintf(err, errlen, "%s", tracedb_error(db));
    tracedb_close(db, true);
    return rc;
}

int probe_db_write(const char *path, const ProbeRecord *recs, const char *const *texts, size_t n,
                   char *err, size_t errlen) {
    TraceDb *db = tracedb_create(path, err, errlen);
    if (!db) return -1;
    int rc = tracedb_begin(db);
    for (size_t i = 0; i < n && !rc; i++)
        rc = tracedb_insert(db, &recs[i], texts[i], texts[i] ? strlen(texts[i]) : 0);
    if (!rc) rc = tracedb_commit(db);
    if (rc) snprintf(err, errlen, "%s", tracedb_error(db));
    tracedb_close(db, rc == 0);
    return rc;
}
