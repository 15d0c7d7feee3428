/* json.h -- a small JSON reader for the data module (COCO annotation files): the whole text
 * into a tree of Json values, each with its line and column for error messages. Strict
 * RFC 8259 (no comments, no trailing commas); numbers are doubles. Not a writer. */
#ifndef TRAINER_DATA_JSON_H
#define TRAINER_DATA_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct Json {
    JsonType type;
    int line, col;    // where the value starts, 1-based
    bool boolean;     // JSON_BOOL
    double number;    // JSON_NUMBER
    char *string;     // JSON_STRING, UTF-8, NUL-terminated (an embedded \u0000 ends it)
    int n;            // JSON_ARRAY, JSON_OBJECT: the number of items
    struct Json *items;
    char **keys;      // JSON_OBJECT: keys[i] names items[i], in file order
} Json;

// Parses text (len bytes) into *root. name prefixes errors: "<name>:<line>:<col>: expected
// ...". Returns 0, or -1 with the message in err (nothing to free).
int json_parse(Json *root, const char *name, const char *text, size_t len, char *err,
               size_t errlen);
void json_free(Json *v);

// The member `key` of an object (the last one if repeated), NULL if absent or not an object.
const Json *json_get(const Json *obj, const char *key);
// "number", "an array", ... for messages.
const char *json_type_name(JsonType t);

#endif
