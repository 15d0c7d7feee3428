/* tracedb.h -- one rank's SQLite trace (probe/ only): created from traces/schema.sql (compiled
 * in), written through prepared statements in one transaction per batch, WAL while the run
 * lives. Which kinds also land in tables meta, params and layouts: tracedb_insert. Failures
 * return -1 and tracedb_error() says why in one line naming the file. */
#ifndef PROBE_TRACEDB_H
#define PROBE_TRACEDB_H

#include "probe/probe.h"

// The text of traces/schema.sql, generated at build time by probe/embed_schema.sh.
extern const char probe_schema_sql[];

typedef struct TraceDb TraceDb;

// Creates a fresh trace at path (an old one and its -wal/-shm files are removed first), in WAL
// mode. NULL with err on failure.
TraceDb *tracedb_create(const char *path, char *err, size_t errlen);
// Opens an existing trace read-write after probe_db_check's tests with integrity_check in place
// of quick_check (an index that disagrees with its table is refused: writing through it would
// corrupt the table), or creates it when path does not exist. NULL with err on failure.
TraceDb *tracedb_open(const char *path, char *err, size_t errlen);
// Closes; self_contained first leaves WAL mode, so that the result is one file that any
// reader (even on read-only media) can open. NULL is a no-op.
void tracedb_close(TraceDb *db, bool self_contained);

int tracedb_begin(TraceDb *db);
int tracedb_commit(TraceDb *db);
// Stores one event, inside a transaction: a row of events with text (len bytes, NULL when len
// is 0; the text is copied), and also META "key=value" -> meta, PARAM "name shape" -> params,
// LAYOUT -> layouts. Rows of events are buffered and inserted 32 at a time; tracedb_commit
// inserts the rest first.
int tracedb_insert(TraceDb *db, const ProbeRecord *rec, const char *text, size_t len);
// Sets meta(key) to value (replacing).
int tracedb_set_meta(TraceDb *db, const char *key, const char *value);
int tracedb_set_meta_int(TraceDb *db, const char *key, int64_t value);
// The highest seq in events (0 when empty) in *seq.
int tracedb_max_seq(TraceDb *db, uint64_t *seq);
const char *tracedb_error(const TraceDb *db);
const char *tracedb_path(const TraceDb *db);

#endif
