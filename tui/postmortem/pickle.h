/* pickle.h -- a reader for the part of Python's pickle format that PyTorch's Flight Recorder
 * dumps are written in (torch::jit::Pickler, protocol 2; Python's own pickle module, protocols
 * 2 to 5, writes the same data with the same opcodes plus FRAME, SHORT_BINUNICODE and
 * MEMOIZE). It builds a tree of plain values -- None, bools, 64-bit integers, floats, strings,
 * lists, tuples, dicts -- and executes nothing: an opcode that would import or call Python
 * code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, EXT...) ends the read
 * with an error, as does any opcode outside the subset.
 *
 * The opcodes read: PROTO FRAME STOP MARK POP POP_MARK DUP, NONE NEWTRUE NEWFALSE, BININT
 * BININT1 BININT2 LONG1 (up to 8 bytes), BINFLOAT, BINUNICODE SHORT_BINUNICODE BINUNICODE8,
 * EMPTY_LIST EMPTY_DICT EMPTY_TUPLE LIST DICT TUPLE TUPLE1 TUPLE2 TUPLE3 APPEND APPENDS SETITEM
 * SETITEMS, BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET. The memo may make values shared,
 * even cyclic (a list that holds itself): walk the tree along the keys you expect, never
 * recursively over everything. Every length and index is checked against the input, so any
 * bytes give a value or one line of error, never a crash (tests/fuzz_pickle.c). */
#ifndef TUI_POSTMORTEM_PICKLE_H
#define TUI_POSTMORTEM_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum PickleType {
    PICKLE_NONE,
    PICKLE_BOOL,
    PICKLE_INT,
    PICKLE_FLOAT,
    PICKLE_STR,
    PICKLE_LIST,
    PICKLE_TUPLE,
    PICKLE_DICT,
} PickleType;

typedef struct PickleValue PickleValue;
struct PickleValue {
    PickleType type;
    bool b;              // PICKLE_BOOL
    int64_t i;           // PICKLE_INT
    double f;            // PICKLE_FLOAT
    char *s;             // PICKLE_STR: NUL-terminated copy (a NUL inside ends it early)
    size_t len;          // PICKLE_STR: bytes in the pickle
    PickleValue **items; // LIST, TUPLE: the items; DICT: keys and values alternating
    int n;               // LIST, TUPLE: items; DICT: 2 x entries
    int cap;
};

// Everything one read made; freeing it frees every value.
typedef struct Pickle Pickle;

// Reads the pickle in data[0..len) up to its STOP (bytes after it are ignored). Returns the
// values, or NULL with one line in err: "byte 17: opcode 0x63 (GLOBAL) would import and
// call Python code; ...", "byte 9: the data ends inside a BINUNICODE string of 300 bytes".
Pickle *pickle_read(const uint8_t *data, size_t len, char *err, size_t errlen);
const PickleValue *pickle_root(const Pickle *p);
void pickle_free(Pickle *p);

// The value of the entry whose key is the string key in dict (the last one, as Python keeps),
// or NULL when dict is not a dict or has no such key.
const PickleValue *pickle_get(const PickleValue *dict, const char *key);
// "None", "bool", "int", "float", "str", "list", "tuple", "dict".
const char *pickle_type_name(PickleType type);

#endif
