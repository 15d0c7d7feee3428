/* test_pickle.c -- the pickle reader (tui/postmortem/pickle.h) on hand-made opcode strings:
 * every opcode of the subset, the memo (shared and cyclic values), Python's protocol 5 framing,
 * and one line of error for code, a truncated file, a bad memo, a wide integer; then the
 * Flight Recorder reader (flightrec.h) on the dumps tests/fixtures/postmortem/make_fr_dumps.py
 * makes from PyTorch's format: the fields of an entry, the groups, and what it says of a
 * pickle that is not a dump. */
#include <stdlib.h>
#include <string.h>

#include "tests/expect.h"
#include "tui/postmortem/flightrec.h"
#include "tui/postmortem/pickle.h"
#include "tui/postmortem/readall.h"

#define P(s) (const uint8_t *)(s), sizeof(s) - 1

static char err[1024];

// Reads the bytes, expecting success; NULL (a failure recorded) otherwise.
static Pickle *ok(const uint8_t *data, size_t len, const char *what) {
    err[0] = '\0';
    Pickle *p = pickle_read(data, len, err, sizeof err);
    EXPECT(p, "%s: %s", what, err);
    return p;
}

// Reads the bytes, expecting one line of error containing want.
static void bad(const uint8_t *data, size_t len, const char *want) {
    err[0] = '\0';
    Pickle *p = pickle_read(data, len, err, sizeof err);
    EXPECT(!p, "accepted, expected '%s'", want);
    EXPECT(strstr(err, want) && !strchr(err, '\n'), "error '%s', expected one line with '%s'", err,
           want);
    pickle_free(p);
}

static void test_values(void) {
    // {"a": [1, 300, -2, 2**40, -2**40, 1.5, True, False, None, "hé"], "b": ("x", "x")}
    // as torch::jit::Pickler writes it: PROTO 2, memoized strings, LONG1 with 8 bytes.
    static const char dump[] = "\x80\x02}(X\x01\x00\x00\x00"
                               "aq\x00]("
                               "K\x01"
                               "M\x2c\x01"
                               "J\xfe\xff\xff\xff"
                               "\x8a\x08\x00\x00\x00\x00\x00\x01\x00\x00"
                               "\x8a\x08\x00\x00\x00\x00\x00\xff\xff\xff"
                               "G\x3f\xf8\x00\x00\x00\x00\x00\x00"
                               "\x88\x89N"
                               "X\x03\x00\x00\x00h\xc3\xa9q\x01"
                               "eX\x01\x00\x00\x00"
                               "bq\x02X\x01\x00\x00\x00xq\x03h\x03\x86u.";
    Pickle *p = ok(P(dump), "jit-style values");
    if (!p) return;
    const PickleValue *root = pickle_root(p), *a = pickle_get(root, "a"),
                      *b = pickle_get(root, "b");
    EXPECT(root->type == PICKLE_DICT && root->n == 4, "root %s with %d",
           pickle_type_name(root->type), root->n);
    EXPECT(a && a->type == PICKLE_LIST && a->n == 10, "a");
    if (a && a->n == 10) {
        EXPECT(a->items[0]->i == 1 && a->items[1]->i == 300 && a->items[2]->i == -2,
               "ints %lld %lld %lld", (long long)a->items[0]->i, (long long)a->items[1]->i,
               (long long)a->items[2]->i);
        EXPECT(a->items[3]->i == (int64_t)1 << 40 && a->items[4]->i == -((int64_t)1 << 40),
               "LONG1 %lld %lld", (long long)a->items[3]->i, (long long)a->items[4]->i);
        EXPECT(a->items[5]->type == PICKLE_FLOAT && a->items[5]->f == 1.5, "float");
        EXPECT(a->items[6]->type == PICKLE_BOOL && a->items[6]->b && !a->items[7]->b, "bools");
        EXPECT(a->items[8]->type == PICKLE_NONE, "None");
        EXPECT(!strcmp(a->items[9]->s, "h\xc3\xa9") && a->items[9]->len == 3, "utf-8 string");
    }
    EXPECT(b && b->type == PICKLE_TUPLE && b->n == 2 && b->items[0] == b->items[1],
           "TUPLE2 of one memoized string (BINGET gives the same value)");
    EXPECT(!pickle_get(root, "c") && !pickle_get(a, "a"), "missing key, not a dict");
    pickle_free(p);

    // LONG1 of fewer bytes sign-extends: Python writes -1 as LONG1 1 0xff, 255 as LONG1 2 ff 00.
    p = ok(P("\x80\x02](\x8a\x01\xff\x8a\x02\xff\x00\x8a\x00"
             "e."),
           "short LONG1");
    if (p) {
        const PickleValue *l = pickle_root(p);
        EXPECT(l->n == 3 && l->items[0]->i == -1 && l->items[1]->i == 255 && l->items[2]->i == 0,
               "LONG1 -1 255 0");
        pickle_free(p);
    }
}

// What Python's pickle adds: protocol 5 frames, SHORT_BINUNICODE, MEMOIZE, single SETITEM and
// APPEND; and the older MARK ... LIST / DICT / TUPLE forms.
static void test_python_forms(void) {
    static const char p5[] = "\x80\x05\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01k\x94]\x94"
                             "K\x07"
                             "a"
                             "s"
                             ".";
    Pickle *p = ok(P(p5), "protocol 5");
    if (p) {
        const PickleValue *k = pickle_get(pickle_root(p), "k");
        EXPECT(k && k->type == PICKLE_LIST && k->n == 1 && k->items[0]->i == 7, "{'k': [7]}");
        pickle_free(p);
    }
    p = ok(P("\x80\x02(K\x01K\x02l(X\x01\x00\x00\x00zK\x03"
             "d(K\x04K\x05K\x06t\x87."),
           "LIST DICT TUPLE");
    if (p) {
        const PickleValue *t = pickle_root(p);
        EXPECT(t->type == PICKLE_TUPLE && t->n == 3, "TUPLE3");
        if (t->n == 3) {
            EXPECT(t->items[0]->type == PICKLE_LIST && t->items[0]->n == 2, "LIST");
            EXPECT(pickle_get(t->items[1], "z") && pickle_get(t->items[1], "z")->i == 3, "DICT");
            EXPECT(t->items[2]->type == PICKLE_TUPLE && t->items[2]->n == 3, "TUPLE");
        }
        pickle_free(p);
    }
    // A list that holds itself (memo): read, and freed once.
    p = ok(P("\x80\x02]q\x00(h\x00"
             "e."),
           "a cyclic list");
    if (p) {
        const PickleValue *l = pickle_root(p);
        EXPECT(l->n == 1 && l->items[0] == l, "the list holds itself");
        pickle_free(p);
    }
    // POP, POP_MARK, DUP
    p = ok(P("\x80\x02K\x01"
             "0(K\x02K\x03"
             "1K\x04"
             "2\x86."),
           "POP POP_MARK DUP");
    if (p) {
        const PickleValue *t = pickle_root(p);
        EXPECT(t->n == 2 && t->items[0]->i == 4 && t->items[1]->i == 4, "(4, 4)");
        pickle_free(p);
    }
}

static void test_errors(void) {
    // Code: a pickled datetime.date starts with GLOBAL; REDUCE and BUILD are named too.
    bad(P("\x80\x02"
          "cdatetime\ndate\nq\x00C\x04\x07\xe8\x0c\x01\x85R."),
        "opcode 0x63 (GLOBAL) would import and call Python code");
    bad(P("\x80\x02N)R."), "(REDUCE) would import and call Python code");
    bad(P("\x80\x02}N"
          "b."),
        "(BUILD)");
    bad(P("\x80\x04\x8c\x01m\x8c\x01n\x93."), "(STACK_GLOBAL)");
    bad(P("\x80\x02"
          "C\x01x."),
        "opcode 0x43 is not one Flight Recorder dumps use");
    bad(P("\x80\x06N."), "pickle protocol 6");
    bad(P("\x80\x02}(X\x05\x00\x00\x00"
          "ab"),
        "byte 4: the data ends inside a BINUNICODE string (5 bytes wanted, 2 left)");
    bad(P("\x80\x02]K\x01"), "byte 5: the pickle ends without its STOP opcode");
    bad(P("\x80\x02Nq\x05."), "memo index 5 skips ahead");
    bad(P("\x80\x02h\x00."), "memo index 0 was never stored");
    bad(P("\x80\x02K\x01"
          "e."),
        "APPENDS without a MARK");
    bad(P("\x80\x02(K\x01"
          "e."),
        "APPENDS needs a list below its MARK");
    bad(P("\x80\x02K\x01"
          "(K\x02"
          "e."),
        "APPENDS on a int, expected a list");
    bad(P("\x80\x02}(K\x01u."), "SETITEMS with an odd number of keys and values");
    bad(P("\x80\x02}(]K\x01u."), "a list is not a valid dict key");
    bad(P("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."), "a LONG1 integer of 9 bytes");
    bad(P("\x80\x02."), "STOP needs a value on the stack, found none");
    bad(P("\x80\x02(."), "STOP needs a value on the stack, found a MARK");
    bad(P("\x80\x02K\x01\x86."), "TUPLE2 needs 2 values, the stack holds 1");
}

static FrDump dump(const char *name, int rank) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/postmortem/fr/%s/nccl_trace_rank_%d", name, rank);
    uint8_t *data;
    size_t len;
    FrDump d = {0};
    if (read_all(path, 1 << 20, &data, &len, err, sizeof err) < 0) {
        EXPECT(0, "%s", err);
        return d;
    }
    EXPECT(!fr_dump_read(data, len, &d, err, sizeof err), "%s: %s", path, err);
    free(data);
    return d;
}

static void test_flight_recorder(void) {
    FrDump d = dump("hang", 0); // torch::jit::Pickler's bytes
    EXPECT(!strcmp(d.version, "2.4") && d.n_entries == 12, "version %s, %d entries", d.version,
           d.n_entries);
    if (d.n_entries == 12) {
        const FrEntry *e = &d.entries[11];
        EXPECT(e->collective_seq_id == 12 && e->record_id == 11 && e->pg_id == 0, "seq %lld",
               (long long)e->collective_seq_id);
        EXPECT(!strcmp(e->op, "all_reduce") && !strcmp(e->state, "started") && e->retired, "%s %s",
               e->op, e->state);
        EXPECT(e->numel_in == 300 && !strcmp(e->dtype, "Float") && !strcmp(e->shape, "[300]"),
               "%lld %s %s", (long long)e->numel_in, e->dtype, e->shape);
        EXPECT(!strcmp(e->pg_name, "0") && !strcmp(e->pg_desc, "default_pg"), "pg %s %s",
               e->pg_name, e->pg_desc);
        EXPECT(e->timeout_ms == 600000 && e->time_completed_ns == 0 &&
                   e->time_started_ns > e->time_created_ns && e->duration_ms < 0,
               "times");
        EXPECT(!strcmp(e->site, "_do_train (trainer.py:381)"), "site '%s'", e->site);
        EXPECT(!strcmp(d.entries[0].op, "all_gather") && d.entries[0].numel_out == 2 &&
                   d.entries[0].duration_ms == 1.25,
               "the first entry");
    }
    const FrGroup *g = fr_group(&d, "default_pg");
    EXPECT(g && g->n_ranks == 2 && g->ranks[1] == 1 && g->last_enqueued == 12 &&
               g->last_completed == 11,
           "the default group");
    fr_dump_free(&d);

    d = dump("healthy", 1); // Python's pickle, protocol 5
    EXPECT(d.n_entries == 13 && !strcmp(d.entries[12].state, "completed"), "healthy: %d",
           d.n_entries);
    fr_dump_free(&d);
    d = dump("missing_rank", 0); // protocol 2
    g = fr_group(&d, "0");
    EXPECT(g && g->n_ranks == 3, "3 ranks in pg_config");
    fr_dump_free(&d);
    d = dump("mismatch", 1);
    EXPECT(d.n_groups == 2 && fr_group(&d, "barrier_pg") && d.n_entries == 13, "two groups");
    fr_dump_free(&d);

    struct {
        const uint8_t *bytes;
        size_t len;
        const char *want;
    } bads[] = {
        {P("\x80\x02](e."), "not a Flight Recorder dump: the pickle holds a list"},
        {P("\x80\x02}(X\x07\x00\x00\x00versionX\x03\x00\x00\x00"
           "3.0u."),
         "version 3.0; this ddpdbg reads versions 2.x"},
        {P("\x80\x02}(X\x07\x00\x00\x00versionX\x03\x00\x00\x00"
           "2.4X\x07\x00\x00\x00"
           "entriesK\x05u."),
         "entries is a int, expected a list"},
        {P("\x80\x02}(X\x07\x00\x00\x00versionK\x02u."), "version is a int, expected a str"},
        {P("\x80\x02}(X\x07\x00\x00\x00versionX\x03\x00\x00\x00"
           "2.4X\x07\x00\x00\x00"
           "entries](}(X\x09\x00\x00\x00"
           "record_idK\x00"
           "ueu."),
         "entry 0: collective_seq_id is missing"},
    };
    for (size_t k = 0; k < sizeof bads / sizeof *bads; k++) {
        FrDump x;
        err[0] = '\0';
        EXPECT(fr_dump_read(bads[k].bytes, bads[k].len, &x, err, sizeof err) < 0 &&
                   strstr(err, bads[k].want),
               "'%s', expected '%s'", err, bads[k].want);
    }
}

int main(void) {
    test_values();
    test_python_forms();
    test_errors();
    test_flight_recorder();
    return expect_report();
}
