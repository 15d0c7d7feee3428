/* json.c -- recursive-descent JSON reader (json.h). Nesting is limited to JSON_MAX_DEPTH so
 * that a hostile file cannot exhaust the stack. */
#include "trainer/data/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>

#include "kernels/base.h" // xmalloc

enum { JSON_MAX_DEPTH = 64 };

typedef struct Parser {
    const char *name, *text, *end, *p;
    int line;
    const char *line_start;
    char *err;
    size_t errlen;
    bool failed;
} Parser;

static int fail(Parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Parser *ps, const char *fmt, ...) {
    if (ps->failed) return -1;
    ps->failed = true;
    int off = snprintf(ps->err, ps->errlen, "%s:%d:%d: ", ps->name, ps->line,
                       (int)(ps->p - ps->line_start) + 1);
    if (off >= 0 && (size_t)off < ps->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err + off, ps->errlen - (size_t)off, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void skip_space(Parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) {
        if (*ps->p == '\n') ps->line++, ps->line_start = ps->p + 1;
        ps->p++;
    }
}

// What is at the cursor, for "expected X, got Y" messages.
static const char *got(Parser *ps) {
    static char buf[16];
    if (ps->p >= ps->end) return "the end of the file";
    unsigned char ch = (unsigned char)*ps->p;
    if (ch >= 0x20 && ch < 0x7f) snprintf(buf, sizeof buf, "'%c'", ch);
    else snprintf(buf, sizeof buf, "byte 0x%02x", ch);
    return buf;
}

static bool literal(Parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return false;
    ps->p += n;
    return true;
}

static void put_utf8(char *out, size_t *n, unsigned cp) {
    if (cp < 0x80) out[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xe0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xf0 | cp >> 18);
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hex4(Parser *ps, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++, ps->p++) {
        char ch = ps->p < ps->end ? *ps->p : 0;
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "expected 4 hex digits after \\u, got %s", got(ps));
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

// The cursor is on the opening quote. A string never grows when unescaped (\uXXXX is 6
// bytes for at most 3, a surrogate pair 12 for 4), so the output is sized by the input.
static int parse_string(Parser *ps, char **out) {
    ps->p++;
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p != '"') ps->p += *ps->p == '\\' ? 2 : 1;
    if (ps->p >= ps->end) {
        ps->p = start - 1;
        return fail(ps, "unterminated string");
    }
    char *s = xmalloc((size_t)(ps->p - start) + 1);
    size_t n = 0;
    ps->p = start;
    while (*ps->p != '"') {
        unsigned char ch = (unsigned char)*ps->p;
        if (ch < 0x20) {
            free(s);
            return fail(ps, "control character in a string (expected \\n, \\t, ...)");
        }
        if (ch != '\\') {
            s[n++] = (char)ch, ps->p++;
            continue;
        }
        ps->p++;
        char e = *ps->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            s[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') {
            ps->p--;
            free(s);
            return fail(ps, "bad escape \\%c in a string", e);
        }
        unsigned cp, low;
        if (hex4(ps, &cp)) return free(s), -1;
        if (cp >= 0xd800 && cp < 0xdc00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
            ps->p[1] == 'u') {
            ps->p += 2;
            if (hex4(ps, &low)) return free(s), -1;
            if (low >= 0xdc00 && low < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            else put_utf8(s, &n, 0xfffd), cp = low;
        }
        if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
        put_utf8(s, &n, cp);
    }
    ps->p++;
    s[n] = '\0';
    *out = s;
    return 0;
}

static int parse_number(Parser *ps, double *v) {
    const char *q = ps->p;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) return fail(ps, "expected a value, got %s", got(ps));
    // strtod would accept more than JSON (hex, inf, leading '+'): the grammar is checked first.
    if (*q == '0') q++;
    else while (q < ps->end && *q >= '0' && *q <= '9') q++;
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) return fail(ps, "expected digits after '.'");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) return fail(ps, "expected an exponent");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[64];
    size_t n = (size_t)(q - ps->p);
    if (n >= sizeof buf) return fail(ps, "number too long");
    memcpy(buf, ps->p, n);
    buf[n] = '\0';
    *v = strtod(buf, NULL);
    if (!isfinite(*v)) return fail(ps, "number out of range: %s", buf);
    ps->p = q;
    return 0;
}

static int parse_value(Parser *ps, Json *v, int depth);

// Appends a parsed child; items grows by doubling (cap tracked by the caller).
static Json *push_item(Json *v, int *cap) {
    if (v->n == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        v->items = xrealloc(v->items, sizeof(Json) * (size_t)*cap);
        if (v->type == JSON_OBJECT) v->keys = xrealloc(v->keys, sizeof(char *) * (size_t)*cap);
    }
    memset(&v->items[v->n], 0, sizeof(Json));
    return &v->items[v->n++];
}

static int parse_container(Parser *ps, Json *v, int depth) {
    bool object = *ps->p == '{';
    char close = object ? '}' : ']';
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    if (depth >= JSON_MAX_DEPTH) return fail(ps, "nested deeper than %d levels", JSON_MAX_DEPTH);
    ps->p++;
    int cap = 0;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        skip_space(ps);
        char *key = NULL;
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, "expected a string key, got %s", got(ps));
            if (parse_string(ps, &key)) return -1;
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return fail(ps, "expected ':' after a key, got %s", got(ps));
            }
            ps->p++;
            skip_space(ps);
        }
        Json *item = push_item(v, &cap);
        if (object) v->keys[v->n - 1] = key;
        if (parse_value(ps, item, depth + 1)) return -1;
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, "expected ',' or '%c' in %s, got %s", close, object ? "an object" : "an array",
                    got(ps));
    }
}

static int parse_value(Parser *ps, Json *v, int depth) {
    skip_space(ps);
    memset(v, 0, sizeof *v);
    v->line = ps->line;
    v->col = (int)(ps->p - ps->line_start) + 1;
    if (ps->p >= ps->end) return fail(ps, "expected a value, got the end of the file");
    switch (*ps->p) {
    case '{':
    case '[': return parse_container(ps, v, depth);
    case '"': v->type = JSON_STRING; return parse_string(ps, &v->string);
    case 't':
    case 'f':
    case 'n':
        if (literal(ps, "null")) return 0;
        v->type = JSON_BOOL;
        if (literal(ps, "true")) return v->boolean = true, 0;
        if (literal(ps, "false")) return 0;
        return fail(ps, "expected a value, got %s", got(ps));
    default: v->type = JSON_NUMBER; return parse_number(ps, &v->number);
    }
}

int json_parse(Json *root, const char *name, const char *text, size_t len, char *err,
               size_t errlen) {
    Parser ps = {.name = name, .text = text, .end = text + len, .p = text, .line = 1,
                 .line_start = text, .err = err, .errlen = errlen};
    int rc = parse_value(&ps, root, 0);
    if (!rc) {
        skip_space(&ps);
        if (ps.p < ps.end) rc = fail(&ps, "expected the end of the file, got %s", got(&ps));
    }
    if (rc) json_free(root);
    return rc;
}

void json_free(Json *v) {
    for (int i = 0; i < v->n; i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const Json *json_get(const Json *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int i = obj->n - 1; i >= 0; i--)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

const char *json_type_name(JsonType t) {
    static const char *names[] = {"null", "a bool", "a number", "a string", "an array", "an object"};
    return names[t];
}
