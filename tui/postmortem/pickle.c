/* pickle.c -- the pickle subset of pickle.h: a loop over opcodes with a value stack (NULL
 * entries are MARKs) and a memo, every read bounds-checked. */
#include "tui/postmortem/pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xrealloc, xmalloc

struct Pickle {
    PickleValue **all; // every value made, for pickle_free
    int n_all, cap_all;
    PickleValue *root;
};

typedef struct Reader {
    const uint8_t *data;
    size_t len, at, op_at; // op_at: where the current opcode began
    Pickle *p;
    PickleValue **stack; // NULL entries are marks
    int n_stack, cap_stack;
    PickleValue **memo;
    size_t n_memo, cap_memo;
    char *err;
    size_t errlen;
} Reader;

static int fail(Reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Reader *r, const char *fmt, ...) {
    int n = snprintf(r->err, r->errlen, "byte %zu: ", r->op_at);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < r->errlen) vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static PickleValue *new_value(Reader *r, PickleType type) {
    Pickle *p = r->p;
    if (p->n_all == p->cap_all)
        p->all = xrealloc(p->all, sizeof(PickleValue *) *
                                      (size_t)(p->cap_all = p->cap_all ? 2 * p->cap_all : 64));
    PickleValue *v = xcalloc(1, sizeof *v);
    v->type = type;
    p->all[p->n_all++] = v;
    return v;
}

static void push(Reader *r, PickleValue *v) {
    if (r->n_stack == r->cap_stack)
        r->stack =
            xrealloc(r->stack, sizeof(PickleValue *) *
                                   (size_t)(r->cap_stack = r->cap_stack ? 2 * r->cap_stack : 64));
    r->stack[r->n_stack++] = v;
}

// The top value (not a mark), or NULL after an error.
static PickleValue *top(Reader *r, const char *op) {
    if (r->n_stack == 0 || !r->stack[r->n_stack - 1]) {
        fail(r, "%s needs a value on the stack, found %s", op, r->n_stack ? "a MARK" : "none");
        return NULL;
    }
    return r->stack[r->n_stack - 1];
}

static PickleValue *pop(Reader *r, const char *op) {
    PickleValue *v = top(r, op);
    if (v) r->n_stack--;
    return v;
}

// The stack index just above the newest mark, or -1 after an error.
static int mark_base(Reader *r, const char *op) {
    for (int k = r->n_stack - 1; k >= 0; k--)
        if (!r->stack[k]) return k + 1;
    return fail(r, "%s without a MARK before it", op);
}

static void add_item(PickleValue *seq, PickleValue *item) {
    if (seq->n == seq->cap)
        seq->items = xrealloc(seq->items, sizeof(PickleValue *) *
                                              (size_t)(seq->cap = seq->cap ? 2 * seq->cap : 8));
    seq->items[seq->n++] = item;
}

// Items stack[base..] appended to the list (APPEND, APPENDS, LIST) or, in pairs, set in the
// dict (SETITEM, SETITEMS, DICT) below them; the mark at base - 1 is dropped when marked.
static int fill(Reader *r, PickleValue *into, int base, bool marked, const char *op) {
    int n = r->n_stack - base;
    if (into->type == PICKLE_DICT) {
        if (n % 2) return fail(r, "%s with an odd number of keys and values (%d)", op, n);
        for (int k = base; k < r->n_stack; k += 2) {
            if (r->stack[k]->type == PICKLE_LIST || r->stack[k]->type == PICKLE_DICT)
                return fail(r, "%s: a %s is not a valid dict key", op,
                            pickle_type_name(r->stack[k]->type));
            add_item(into, r->stack[k]);
            add_item(into, r->stack[k + 1]);
        }
    } else if (into->type == PICKLE_LIST) {
        for (int k = base; k < r->n_stack; k++)
            add_item(into, r->stack[k]);
    } else {
        return fail(r, "%s on a %s, expected a %s", op, pickle_type_name(into->type),
                    op[0] == 'S' || op[0] == 'D' ? "dict" : "list");
    }
    r->n_stack = base - (marked ? 1 : 0);
    return 0;
}

// n bytes at the read position, or NULL (an error) when the data ends first.
static const uint8_t *take(Reader *r, uint64_t n, const char *what) {
    if (n > r->len - r->at) {
        fail(r, "the data ends inside %s (%llu bytes wanted, %zu left)", what,
             (unsigned long long)n, r->len - r->at);
        return NULL;
    }
    const uint8_t *b = r->data + r->at;
    r->at += (size_t)n;
    return b;
}

static uint64_t le(const uint8_t *b, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--)
        v = v << 8 | b[k];
    return v;
}

static int memo_put(Reader *r, uint64_t idx) {
    PickleValue *v = top(r, "a memo put");
    if (!v) return -1;
    // Picklers number the memo in order; a gap would make us keep sparse tables for nothing.
    if (idx > r->n_memo)
        return fail(r, "memo index %llu skips ahead (next is %zu)", (unsigned long long)idx,
                    r->n_memo);
    if (idx == r->n_memo) {
        if (r->n_memo == r->cap_memo)
            r->memo = xrealloc(r->memo, sizeof(PickleValue *) *
                                            (r->cap_memo = r->cap_memo ? 2 * r->cap_memo : 64));
        r->n_memo++;
    }
    r->memo[idx] = v;
    return 0;
}

static int memo_get(Reader *r, uint64_t idx) {
    if (idx >= r->n_memo)
        return fail(r, "memo index %llu was never stored", (unsigned long long)idx);
    push(r, r->memo[idx]);
    return 0;
}

static int string(Reader *r, uint64_t n, const char *op) {
    char what[48];
    snprintf(what, sizeof what, "a %s string", op);
    const uint8_t *b = take(r, n, what);
    if (!b) return -1;
    PickleValue *v = new_value(r, PICKLE_STR);
    v->s = xmalloc((size_t)n + 1);
    memcpy(v->s, b, (size_t)n);
    v->s[n] = '\0';
    v->len = (size_t)n;
    push(r, v);
    return 0;
}

static void integer(Reader *r, int64_t i) {
    PickleValue *v = new_value(r, PICKLE_INT);
    v->i = i;
    push(r, v);
}

// The opcodes that would run Python code: named in the error.
static const char *code_opcode(uint8_t op) {
    switch (op) {
    case 'c':
        return "GLOBAL";
    case 0x93:
        return "STACK_GLOBAL";
    case 'R':
        return "REDUCE";
    case 'b':
        return "BUILD";
    case 'i':
        return "INST";
    case 'o':
        return "OBJ";
    case 0x81:
        return "NEWOBJ";
    case 0x92:
        return "NEWOBJ_EX";
    case 'P':
        return "PERSID";
    case 'Q':
        return "BINPERSID";
    case 0x82:
        return "EXT1";
    case 0x83:
        return "EXT2";
    case 0x84:
        return "EXT4";
    default:
        return NULL;
    }
}

// One opcode; 1 at STOP, 0 to go on, -1 on error.
static int step(Reader *r) {
    r->op_at = r->at;
    if (r->at == r->len)
        return fail(r, "the pickle ends without its STOP opcode (a truncated file)");
    const uint8_t *b = take(r, 1, "an opcode");
    if (!b) return -1;
    uint8_t op = *b;
    PickleValue *v;
    int base;
    switch (op) {
    case 0x80: // PROTO
        if (!(b = take(r, 1, "PROTO"))) return -1;
        if (*b < 2 || *b > 5)
            return fail(r, "pickle protocol %d; this reader reads protocols 2 to 5", *b);
        return 0;
    case 0x95: // FRAME: a length hint
        return take(r, 8, "FRAME") ? 0 : -1;
    case '.': // STOP
        if (!(v = top(r, "STOP"))) return -1;
        r->p->root = v;
        return 1;
    case '(': // MARK
        push(r, NULL);
        return 0;
    case '0': // POP
        return pop(r, "POP") ? 0 : -1;
    case '1': // POP_MARK
        if ((base = mark_base(r, "POP_MARK")) < 0) return -1;
        r->n_stack = base - 1;
        return 0;
    case '2': // DUP
        if (!(v = top(r, "DUP"))) return -1;
        push(r, v);
        return 0;
    case 'N':
        push(r, new_value(r, PICKLE_NONE));
        return 0;
    case 0x88: // NEWTRUE
    case 0x89: // NEWFALSE
        v = new_value(r, PICKLE_BOOL);
        v->b = op == 0x88;
        push(r, v);
        return 0;
    case 'J': // BININT: signed 32 bits
        if (!(b = take(r, 4, "BININT"))) return -1;
        integer(r, (int32_t)(uint32_t)le(b, 4));
        return 0;
    case 'K': // BININT1
        if (!(b = take(r, 1, "BININT1"))) return -1;
        integer(r, b[0]);
        return 0;
    case 'M': // BININT2
        if (!(b = take(r, 2, "BININT2"))) return -1;
        integer(r, (int64_t)le(b, 2));
        return 0;
    case 0x8a: { // LONG1: n bytes, two's complement little-endian
        if (!(b = take(r, 1, "LONG1"))) return -1;
        int n = b[0];
        if (n > 8) return fail(r, "a LONG1 integer of %d bytes: wider than 64 bits", n);
        if (!(b = take(r, (uint64_t)n, "a LONG1 integer"))) return -1;
        uint64_t u = le(b, n);
        if (n > 0 && n < 8 && (b[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n); // sign-extend
        integer(r, (int64_t)u);
        return 0;
    }
    case 'G': { // BINFLOAT: big-endian IEEE 754
        if (!(b = take(r, 8, "BINFLOAT"))) return -1;
        uint64_t u = 0;
        for (int k = 0; k < 8; k++)
            u = u << 8 | b[k];
        v = new_value(r, PICKLE_FLOAT);
        memcpy(&v->f, &u, sizeof v->f);
        push(r, v);
        return 0;
    }
    case 'X': // BINUNICODE
        if (!(b = take(r, 4, "BINUNICODE"))) return -1;
        return string(r, le(b, 4), "BINUNICODE");
    case 0x8c: // SHORT_BINUNICODE
        if (!(b = take(r, 1, "SHORT_BINUNICODE"))) return -1;
        return string(r, b[0], "SHORT_BINUNICODE");
    case 0x8d: // BINUNICODE8
        if (!(b = take(r, 8, "BINUNICODE8"))) return -1;
        return string(r, le(b, 8), "BINUNICODE8");
    case ']': // EMPTY_LIST
        push(r, new_value(r, PICKLE_LIST));
        return 0;
    case '}': // EMPTY_DICT
        push(r, new_value(r, PICKLE_DICT));
        return 0;
    case ')': // EMPTY_TUPLE
        push(r, new_value(r, PICKLE_TUPLE));
        return 0;
    case 'l':   // LIST: MARK items LIST
    case 'd':   // DICT: MARK k v ... DICT
    case 't': { // TUPLE: MARK items TUPLE
        const char *name = op == 'l' ? "LIST" : op == 'd' ? "DICT" : "TUPLE";
        if ((base = mark_base(r, name)) < 0) return -1;
        v = new_value(r, op == 'l' ? PICKLE_LIST : op == 'd' ? PICKLE_DICT : PICKLE_TUPLE);
        if (op == 't') {
            for (int k = base; k < r->n_stack; k++)
                add_item(v, r->stack[k]);
            r->n_stack = base - 1;
        } else if (fill(r, v, base, true, name) < 0) {
            return -1;
        }
        push(r, v);
        return 0;
    }
    case 0x85:   // TUPLE1
    case 0x86:   // TUPLE2
    case 0x87: { // TUPLE3
        int n = op - 0x84;
        if (r->n_stack < n)
            return fail(r, "TUPLE%d needs %d values, the stack holds %d", n, n, r->n_stack);
        for (int k = r->n_stack - n; k < r->n_stack; k++)
            if (!r->stack[k])
                return fail(r, "TUPLE%d needs %d values, found a MARK among them", n, n);
        v = new_value(r, PICKLE_TUPLE);
        for (int k = r->n_stack - n; k < r->n_stack; k++)
            add_item(v, r->stack[k]);
        r->n_stack -= n;
        push(r, v);
        return 0;
    }
    case 'a': // APPEND: list item
    case 's': // SETITEM: dict key value
        base = r->n_stack - (op == 'a' ? 1 : 2);
        if (base < 1)
            return fail(r, "%s needs a %s below its item", op == 'a' ? "APPEND" : "SETITEM",
                        op == 'a' ? "list" : "dict");
        for (int k = base - 1; k < r->n_stack; k++)
            if (!r->stack[k])
                return fail(r, "%s found a MARK where it needs values",
                            op == 'a' ? "APPEND" : "SETITEM");
        return fill(r, r->stack[base - 1], base, false, op == 'a' ? "APPEND" : "SETITEM");
    case 'e':   // APPENDS: list MARK items
    case 'u': { // SETITEMS: dict MARK k v ...
        const char *name = op == 'e' ? "APPENDS" : "SETITEMS";
        if ((base = mark_base(r, name)) < 0) return -1;
        if (base < 2 || !r->stack[base - 2])
            return fail(r, "%s needs a %s below its MARK", name, op == 'e' ? "list" : "dict");
        return fill(r, r->stack[base - 2], base, true, name);
    }
    case 'q': // BINPUT
        if (!(b = take(r, 1, "BINPUT"))) return -1;
        return memo_put(r, b[0]);
    case 'r': // LONG_BINPUT
        if (!(b = take(r, 4, "LONG_BINPUT"))) return -1;
        return memo_put(r, le(b, 4));
    case 0x94: // MEMOIZE
        return memo_put(r, r->n_memo);
    case 'h': // BINGET
        if (!(b = take(r, 1, "BINGET"))) return -1;
        return memo_get(r, b[0]);
    case 'j': // LONG_BINGET
        if (!(b = take(r, 4, "LONG_BINGET"))) return -1;
        return memo_get(r, le(b, 4));
    default: {
        const char *code = code_opcode(op);
        if (code)
            return fail(r,
                        "opcode 0x%02x (%s) would import and call Python code; a Flight Recorder "
                        "dump holds only dicts, lists, strings and numbers, and ddpdbg executes "
                        "nothing from a pickle",
                        op, code);
        return fail(
            r, "opcode 0x%02x is not one Flight Recorder dumps use (not a dump, or a damaged one)",
            op);
    }
    }
}

Pickle *pickle_read(const uint8_t *data, size_t len, char *err, size_t errlen) {
    Pickle *p = xcalloc(1, sizeof *p);
    Reader r = {.data = data, .len = len, .p = p, .err = err, .errlen = errlen};
    int rc;
    while ((rc = step(&r)) == 0)
        ;
    free(r.stack);
    free(r.memo);
    if (rc < 0) {
        pickle_free(p);
        return NULL;
    }
    return p;
}

const PickleValue *pickle_root(const Pickle *p) {
    return p->root;
}

void pickle_free(Pickle *p) {
    if (!p) return;
    for (int i = 0; i < p->n_all; i++) {
        free(p->all[i]->s);
        free(p->all[i]->items);
        free(p->all[i]);
    }
    free(p->all);
    free(p);
}

const PickleValue *pickle_get(const PickleValue *dict, const char *key) {
    if (!dict || dict->type != PICKLE_DICT) return NULL;
    for (int k = dict->n - 2; k >= 0; k -= 2)
        if (dict->items[k]->type == PICKLE_STR && !strcmp(dict->items[k]->s, key))
            return dict->items[k + 1];
    return NULL;
}

const char *pickle_type_name(PickleType type) {
    static const char *names[] = {"None", "bool", "int", "float", "str", "list", "tuple", "dict"};
    return (unsigned)type < sizeof names / sizeof *names ? names[type] : "?";
}
