/* sqlite_query.h -- what the tests that read a trace with plain SQL share (test_probe,
 * test_probe_cupti): open it read-only, and read one integer. Header-only, over tests/expect.h:
 * a failure is an EXPECT, never an abort. */
#ifndef TESTS_SQLITE_QUERY_H
#define TESTS_SQLITE_QUERY_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "tests/expect.h"

static inline sqlite3 *db_open(const char *path) {
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    EXPECT(rc == SQLITE_OK, "open %s: %s", path, sqlite3_errmsg(db));
    return db;
}

// The first column of the first row of a printf-formatted query, as an integer (-1 on error,
// no row or NULL).
static inline int64_t q_int(sqlite3 *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int64_t q_int(sqlite3 *db, const char *fmt, ...) {
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    sqlite3_stmt *s;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
        EXPECT(0, "%s: %s", sql, sqlite3_errmsg(db));
        return -1;
    }
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

#endif
