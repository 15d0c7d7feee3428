/* logscan.c -- DDP errors in a pasted log (logscan.h): lines, rank streams, phrases found with
 * the spaces squeezed out, lists read from the lines as printed. */
#include "tui/postmortem/logscan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xrealloc, xstrdup, MIN, MAX

#define MAX_RANK 65535

typedef struct Line {
    char *s; // the content after the prefix, NUL-terminated (in Scanner.buf)
    int len;
    int width; // characters of the line as the log shows it, prefix and trailing spaces included
    bool trailing_space; // it ended in spaces (a fold there cut at a space, not in a word)
    int rank;            // its stream's rank (-1: lines without a prefix before any prefixed one)
    int boxes; // the box count of the last Ultralytics progress line of its stream up to it
} Line;

// One rank's lines joined ("text", T) and the same without spaces and line breaks (S).
typedef struct Stream {
    int rank;
    int *lines; // indices into Scanner.lines
    int n;
    char *t;           // the lines joined by '\n'
    uint32_t *t_start; // per line k of the stream: where it starts in t
    size_t t_len;
    char *s;       // t without whitespace
    uint32_t *s2t; // per byte of s: its offset in t (a log is under 4 GiB: explain's limit)
    size_t s_len;
} Stream;

typedef struct Scanner {
    LogScan *out;
    char *buf;
    Line *lines;
    int n_lines;
    Stream *streams;
    int n_streams;
} Scanner;

const char *log_kind_name(LogKind kind) {
    static const char *names[LOG_KIND_COUNT] = {[LOG_UNFINISHED_REDUCTION] = "unfinished_reduction",
                                                [LOG_MARKED_TWICE] = "marked_twice",
                                                [LOG_GRAPH_CHANGED] = "graph_changed",
                                                [LOG_PARAM_COUNT] = "param_count",
                                                [LOG_PARAM_SHAPE] = "param_shape",
                                                [LOG_GLOO_TIMEOUT] = "gloo_timeout",
                                                [LOG_PEER_CLOSED] = "peer_closed",
                                                [LOG_NCCL_WATCHDOG] = "nccl_watchdog",
                                                [LOG_MONITORED_BARRIER] = "monitored_barrier",
                                                [LOG_COLLECTIVES_DIFFER] = "collectives_differ"};
    return kind >= 0 && kind < LOG_KIND_COUNT ? names[kind] : "?";
}

// ---- lines ---------------------------------------------------------------------------------

static bool is_name_char(int c) {
    return isalnum(c) || c == '_' || c == '.';
}

// Skips a torchrun prefix "[rankN]:" or "[defaultN]:" at p; its rank, or -1 when none.
static int prefix_rank(const char **p) {
    const char *q = *p;
    while (*q == ' ')
        q++;
    if (*q != '[') return -1;
    q++;
    if (!strncmp(q, "rank", 4))
        q += 4;
    else if (!strncmp(q, "default", 7))
        q += 7;
    else
        return -1;
    if (!isdigit((unsigned char)*q)) return -1;
    long r = 0;
    while (isdigit((unsigned char)*q) && r <= MAX_RANK)
        r = r * 10 + (*q++ - '0');
    if (r > MAX_RANK || q[0] != ']' || q[1] != ':') return -1;
    *p = q + 2;
    return (int)r;
}

static int utf8_width(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

// Copies the raw line [b, e) cleaned into dst: what a terminal shows after the last carriage
// return, without colour escapes, control characters as spaces, trailing spaces dropped.
// Returns its length; *width gets its width in characters before the drop.
static int clean(const char *b, const char *e, char *dst, int *width) {
    const char *cr = NULL;
    for (const char *p = b; p < e; p++)
        if (*p == '\r' && p + 1 < e) cr = p;
    if (cr) b = cr + 1;
    int n = 0;
    for (const char *p = b; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == 0x1b && p + 1 < e && p[1] == '[') { // CSI ... final byte
            p += 2;
            while (p < e && !(*p >= '@' && *p <= '~'))
                p++;
            continue;
        }
        dst[n++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    dst[n] = '\0';
    *width = utf8_width(dst);
    while (n > 0 && dst[n - 1] == ' ')
        n--;
    dst[n] = '\0';
    return n;
}

static Stream *stream_of(Scanner *sc, int rank) {
    for (int i = 0; i < sc->n_streams; i++)
        if (sc->streams[i].rank == rank) return &sc->streams[i];
    sc->streams = xrealloc(sc->streams, sizeof(Stream) * (size_t)(sc->n_streams + 1));
    Stream *st = &sc->streams[sc->n_streams++];
    *st = (Stream){.rank = rank};
    return st;
}

// An Ultralytics progress header ("Epoch GPU_mem ... Instances Size"): the Instances column.
static int instances_column(const char *s) {
    int col = 0, epoch = -1;
    for (const char *p = s; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (!n) break;
        if (n == 5 && !strncmp(p, "Epoch", 5)) epoch = col;
        if (n == 9 && !strncmp(p, "Instances", 9) && epoch == 0) return col;
        col++;
        p += n;
    }
    return -1;
}

// A progress line ("  1/1  0G  0.81  30.6  0.98  0  96: 66% ..."): its column col, or -1.
static int progress_value(const char *s, int col) {
    int k = 0;
    for (const char *p = s; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (!n) break;
        if (k == 0) { // epoch "E/N"
            const char *slash = memchr(p, '/', n);
            if (!slash || slash == p || !isdigit((unsigned char)p[0]) ||
                !isdigit((unsigned char)slash[1]))
                return -1;
        }
        if (k == col) return isdigit((unsigned char)*p) ? atoi(p) : -1;
        k++;
        p += n;
    }
    return -1;
}

// Notes a rank seen in a line prefix (sorted when the scan ends).
static void add_prefix_rank(LogScan *o, int r) {
    for (int k = 0; k < o->n_prefix_ranks; k++)
        if (o->prefix_ranks[k] == r) return;
    o->prefix_ranks = xrealloc(o->prefix_ranks, sizeof(int) * (size_t)(o->n_prefix_ranks + 1));
    o->prefix_ranks[o->n_prefix_ranks++] = r;
}

static int cmp_int(const void *a, const void *b) {
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void split_lines(Scanner *sc, const char *text, size_t len) {
    sc->buf = xmalloc(len + 1);
    int cap = 64, max_width = 0;
    sc->lines = xcalloc((size_t)cap, sizeof(Line));
    char *dst = sc->buf;
    int rank = -1;
    int *col = NULL, n_col = 0; // per stream index: its Instances column
    for (const char *b = text; b < text + len;) {
        const char *e = memchr(b, '\n', (size_t)(text + len - b));
        if (!e) e = text + len;
        int width;
        int n = clean(b, e, dst, &width);
        const char *content = dst;
        int r = prefix_rank(&content);
        if (r >= 0) {
            rank = r;
            add_prefix_rank(sc->out, r);
            sc->out->max_rank = MAX(sc->out->max_rank, r);
        }
        if (sc->n_lines == cap) sc->lines = xrealloc(sc->lines, sizeof(Line) * (size_t)(cap *= 2));
        Line *l = &sc->lines[sc->n_lines];
        *l = (Line){.s = (char *)content,
                    .len = n - (int)(content - dst),
                    .width = width,
                    .trailing_space = utf8_width(dst) < width,
                    .rank = rank,
                    .boxes = -1};
        max_width = MAX(max_width, l->width);
        Stream *st = stream_of(sc, rank);
        int si = (int)(st - sc->streams);
        if (si >= n_col) {
            col = xrealloc(col, sizeof(int) * (size_t)(si + 1));
            while (n_col <= si)
                col[n_col++] = -1;
        }
        int c = instances_column(content);
        if (c >= 0) col[si] = c;
        int boxes = col[si] >= 0 ? progress_value(content, col[si]) : -1;
        l->boxes = boxes >= 0 ? boxes : st->n ? sc->lines[st->lines[st->n - 1]].boxes : -1;
        st->lines = xrealloc(st->lines, sizeof(int) * (size_t)(st->n + 1));
        st->lines[st->n++] = sc->n_lines++;
        dst += n + 1;
        b = e + 1;
    }
    free(col);
    if (sc->out->n_prefix_ranks)
        qsort(sc->out->prefix_ranks, (size_t)sc->out->n_prefix_ranks, sizeof(int), cmp_int);
    sc->out->n_lines = sc->n_lines;
    sc->out->ends_in_line = len > 0 && text[len - 1] != '\n';
    // A folded log: several lines exactly as wide as the widest.
    int at_max = 0;
    for (int i = 0; i < sc->n_lines; i++)
        at_max += sc->lines[i].width == max_width;
    if (max_width >= 40 && at_max >= 3) sc->out->fold_width = max_width;
}

static void join_stream(Scanner *sc, Stream *st) {
    size_t total = 1;
    for (int k = 0; k < st->n; k++)
        total += (size_t)sc->lines[st->lines[k]].len + 1;
    st->t = xmalloc(total);
    st->t_start = xcalloc((size_t)st->n + 1, sizeof(uint32_t));
    st->s = xmalloc(total);
    st->s2t = xcalloc(total, sizeof(uint32_t));
    for (int k = 0; k < st->n; k++) {
        const Line *l = &sc->lines[st->lines[k]];
        for (int i = 0; i <= l->len; i++) {
            char c = i < l->len ? l->s[i] : '\n';
            if (i == 0) st->t_start[k] = (uint32_t)st->t_len;
            if (c != ' ' && c != '\n' && c != '\t') {
                st->s2t[st->s_len] = (uint32_t)st->t_len;
                st->s[st->s_len++] = c;
            }
            st->t[st->t_len++] = c;
        }
    }
    st->t[st->t_len] = '\0';
    st->s[st->s_len] = '\0';
}

// ---- phrases -------------------------------------------------------------------------------

// text without its spaces and line breaks (as a stream's S), into out; may be text itself.
static const char *squeeze(const char *text, char *out, size_t len) {
    size_t n = 0;
    for (; *text && n + 1 < len; text++)
        if (*text != ' ' && *text != '\n' && *text != '\t') out[n++] = *text;
    out[n] = '\0';
    return out;
}

// The first S offset in [from, to) where phrase (spaces ignored) starts, or -1.
static long find(const Stream *st, size_t from, size_t to, const char *phrase) {
    char sq[256];
    squeeze(phrase, sq, sizeof sq);
    size_t n = strlen(sq);
    if (!n) return -1;
    if (to > st->s_len) to = st->s_len;
    for (size_t i = from; i + n <= to; i++) {
        const char *hit = memchr(st->s + i, sq[0], to - i);
        if (!hit) return -1;
        i = (size_t)(hit - st->s);
        if (i + n <= to && !memcmp(st->s + i, sq, n)) return (long)i;
    }
    return -1;
}

// The integer at S offset *at (after optional '#'), advancing past it; -1 when none.
static int64_t number(const Stream *st, size_t *at) {
    size_t i = *at;
    if (i < st->s_len && st->s[i] == '#') i++;
    if (i >= st->s_len || !isdigit((unsigned char)st->s[i])) return -1;
    int64_t v = 0;
    while (i < st->s_len && isdigit((unsigned char)st->s[i]) && v < (int64_t)1 << 50)
        v = v * 10 + (st->s[i++] - '0');
    *at = i;
    return v;
}

// A rank number at *at (advancing past it): 0..MAX_RANK, else -1.
static int rank_number(const Stream *st, size_t *at) {
    int64_t r = number(st, at);
    return r >= 0 && r <= MAX_RANK ? (int)r : -1;
}

// The number after phrase in [from, to) (S offsets), or -1.
static int64_t number_after(const Stream *st, size_t from, size_t to, const char *phrase) {
    long at = find(st, from, to, phrase);
    if (at < 0) return -1;
    char sq[256];
    size_t i = (size_t)at + strlen(squeeze(phrase, sq, sizeof sq));
    return number(st, &i);
}

// The line (index into Scanner.lines) holding t offset t_off: a binary search of the starts.
static int t_line(const Stream *st, size_t t_off) {
    int lo = 0, hi = st->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (st->t_start[mid] <= t_off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return st->n ? st->lines[lo] : 0;
}

static int line_of(const Stream *st, size_t s_off) {
    return t_line(st, st->s2t[MIN(s_off, st->s_len ? st->s_len - 1 : 0)]);
}

// ---- lists ---------------------------------------------------------------------------------

// The next line's content after t offset nl (a '\n'), leading spaces skipped; NULL at the end.
static const char *next_line(const Stream *st, size_t nl) {
    if (nl + 1 >= st->t_len) return NULL;
    const char *p = st->t + nl + 1;
    while (*p == ' ')
        p++;
    return p;
}

static bool list_like(const char *p, bool digits_only) {
    if (!*p || *p == '\n') return false;
    for (; *p && *p != '\n'; p++)
        if (!(digits_only ? isdigit((unsigned char)*p) || *p == ' '
                          : is_name_char((unsigned char)*p) || *p == ',' || *p == ' '))
            return false;
    return true;
}

static void push_name(LogList *l, const char *s, size_t n) {
    l->names = xrealloc(l->names, sizeof(char *) * (size_t)(l->n + 1));
    l->names[l->n] = xcalloc(n + 1, 1);
    memcpy(l->names[l->n++], s, n);
}

// The names list starting at t offset at ("a.weight, b.bias\n"), ending where PyTorch ends it
// (the next line says "Parameter indices which did not receive grad"), else cut.
static void read_names(const Stream *st, size_t at, const char *end_phrase, LogList *l) {
    char tok[1024];
    size_t n = 0;
    l->present = true;
    bool ended = false;
    for (size_t i = at; !ended; i++) {
        char c = st->t[i];
        if (c == '\0') break;
        if (is_name_char((unsigned char)c)) {
            if (n + 1 < sizeof tok) tok[n++] = c;
        } else if (c == ',' || c == ' ') {
            if (n) push_name(l, tok, n);
            if (c == ' ' && n) { // a space after a name: only a comma may follow in a list
                size_t k = i;
                while (st->t[k] == ' ')
                    k++;
                if (st->t[k] != ',' && st->t[k] != '\n') {
                    n = 0;
                    break;
                }
            }
            n = 0;
        } else if (c == '\n') {
            const char *next = next_line(st, i);
            char end[128], nsq[128] = "";
            squeeze(end_phrase, end, sizeof end);
            if (next) {
                snprintf(nsq, sizeof nsq, "%.100s", next);
                squeeze(nsq, nsq, sizeof nsq);
            }
            if (next && !strncmp(nsq, end, strlen(end))) {
                if (n) push_name(l, tok, n);
                n = 0;
                ended = true;
            } else if (!next || !list_like(next, false)) {
                break;
            }
            // else: a wrap; a word cut in two joins (n stays), the list goes on
            i = (size_t)(next - st->t) - 1;
        } else {
            break;
        }
    }
    if (!ended) {
        l->cut = true;
        snprintf(l->partial, sizeof l->partial, "%.*s", (int)MIN(n, sizeof l->partial - 1), tok);
    }
}

// The indices list at t offset at ("6 7 8 ... 17"), to the end of its line and the wrapped
// lines after it.
static void read_indices(const Scanner *sc, const Stream *st, size_t at, LogList *l) {
    l->present = true;
    int64_t cur = -1;
    int digits = 0;
    for (size_t i = at;; i++) {
        char c = st->t[i];
        if (isdigit((unsigned char)c) && digits < 15) {
            cur = (cur < 0 ? 0 : cur * 10) + (c - '0');
            digits++;
            continue;
        }
        bool wrap_joins = false;
        if (c == '\n' && digits) { // a wrap inside the list, maybe inside a number
            const char *next = next_line(st, i);
            if (next && next == st->t + i + 1 && isdigit((unsigned char)*next) &&
                list_like(next, true)) {
                int64_t first = atoll(next);
                const Line *here = &sc->lines[t_line(st, i)];
                bool folded = sc->out->fold_width && here->width == sc->out->fold_width &&
                              !here->trailing_space;
                int64_t prev = l->n ? l->values[l->n - 1] : -1;
                wrap_joins = folded || first <= cur || cur <= prev;
            }
        }
        if (wrap_joins) continue;
        if (digits) {
            if ((c == '\n' || c == '\0') && sc->out->ends_in_line &&
                t_line(st, i - 1) == sc->n_lines - 1) {
                l->cut = true; // the log stops in the middle of a number
                snprintf(l->partial, sizeof l->partial, "%lld", (long long)cur);
                return;
            }
            l->values = xrealloc(l->values, sizeof(int64_t) * (size_t)(l->n + 1));
            l->values[l->n++] = cur;
        }
        cur = -1;
        digits = 0;
        if (c == ' ') continue;
        if (c == '\n') {
            const char *next = next_line(st, i);
            if (next && list_like(next, true)) {
                i = (size_t)(next - st->t) - 1;
                continue;
            }
        }
        return;
    }
}

// ---- errors --------------------------------------------------------------------------------

static LogError *new_error(Scanner *sc, const Stream *st, LogKind kind, size_t s_at) {
    LogScan *o = sc->out;
    o->errors = xrealloc(o->errors, sizeof(LogError) * (size_t)(o->n + 1));
    LogError *e = &o->errors[o->n++];
    *e = (LogError){.kind = kind,
                    .rank = st->rank,
                    .count = 1,
                    .other_rank = -1,
                    .timeout_ms = -1,
                    .ran_ms = -1,
                    .last_enqueued = -1,
                    .last_completed = -1};
    e->line = line_of(st, s_at) + 1;
    // Its first sentence as printed: from the phrase to the first ". " or the line's end (a
    // line of the fold width goes on in the next).
    size_t t0 = st->s2t[s_at], k = 0;
    for (size_t i = t0; i < st->t_len && k + 1 < sizeof e->first; i++) {
        if (st->t[i] == '\n') {
            const Line *l = &sc->lines[t_line(st, i)];
            if (!o->fold_width || l->width != o->fold_width) break;
            if (l->trailing_space && k + 1 < sizeof e->first) e->first[k++] = ' ';
            continue;
        }
        e->first[k++] = st->t[i];
        if (st->t[i] == '.' && (st->t[i + 1] == ' ' || st->t[i + 1] == '\n')) break;
    }
    e->first[k] = '\0';
    return e;
}

// The S offset just past phrase at at.
static size_t past(long at, const char *phrase) {
    char sq[256];
    return (size_t)at + strlen(squeeze(phrase, sq, sizeof sq));
}

// The t offset after the ':' that follows "... for rank R" at S offset at (past its number).
static size_t list_start(const Stream *st, size_t s_after_number) {
    size_t i = s_after_number;
    if (i < st->s_len && st->s[i] == ':') i++;
    return i < st->s_len ? st->s2t[i] : st->t_len;
}

// The list after "<phrase> R:" in [from, end) of S: its t offset in *at_list, its line in l,
// the rank R into e. False when the phrase is not there.
static bool list_after(const Stream *st, size_t from, size_t end, const char *phrase, LogError *e,
                       LogList *l, size_t *at_list) {
    long at = find(st, from, end, phrase);
    if (at < 0) return false;
    size_t i = past(at, phrase);
    int r = rank_number(st, &i);
    if (r >= 0) e->rank = r;
    l->line = line_of(st, (size_t)at) + 1;
    *at_list = list_start(st, i);
    return true;
}

static void unfinished(Scanner *sc, Stream *st, long at, size_t end) {
    static const char *NAMES = "Parameters which did not receive grad for rank";
    static const char *INDICES = "Parameter indices which did not receive grad for rank";
    LogError *e = new_error(sc, st, LOG_UNFINISHED_REDUCTION, (size_t)at);
    size_t from = past(
        at, "Expected to have finished reduction in the prior iteration before starting a new one");
    size_t near = MIN(end, from + 800);
    if (find(st, from, near, "Since `find_unused_parameters=True` is enabled") >= 0)
        e->variant = VARIANT_FIND_UNUSED;
    else if (find(st, from, near, "your training graph has changed in this iteration") >= 0)
        e->variant = VARIANT_STATIC;
    else if (find(st, from, near, "(1) passing the keyword argument") >= 0)
        e->variant = VARIANT_OLD;
    size_t at_list;
    if (list_after(st, from, end, NAMES, e, &e->names, &at_list))
        read_names(st, at_list, INDICES, &e->names);
    if (list_after(st, from, end, INDICES, e, &e->indices, &at_list))
        read_indices(sc, st, at_list, &e->indices);
    e->debug_off_suffix =
        find(st, from, end,
             "In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG") >= 0;
}

static void marked_twice(Scanner *sc, Stream *st, long at, size_t end) {
    LogError *e = new_error(sc, st, LOG_MARKED_TWICE, (size_t)at);
    long p = find(st, (size_t)at, end, "Parameter at index");
    if (p < 0) return;
    size_t i = past(p, "Parameter at index");
    int64_t idx = number(st, &i);
    if (idx < 0) return;
    e->indices = (LogList){.present = true, .line = line_of(st, (size_t)p) + 1};
    e->indices.values = xcalloc(1, sizeof(int64_t));
    e->indices.values[e->indices.n++] = idx;
    long w = find(st, i, MIN(end, i + 8), "with name");
    if (w < 0) return;
    size_t k = past(w, "with name"), n = 0;
    while (k + n < st->s_len && is_name_char((unsigned char)st->s[k + n]) &&
           strncmp(st->s + k + n, "hasbeenmarked", 13))
        n++;
    if (!n) return;
    e->names = (LogList){.present = true, .line = e->indices.line};
    push_name(&e->names, st->s + k, n);
}

// Where the shape check's text begins, before its phrase at: "params[P]" (S offset), or with
// rank its "[R]:" before that; at itself when it is not there.
static long shape_start(const Stream *st, long at, bool rank) {
    long p = at;
    while (p > 0 && at - p < 40 && strncmp(st->s + p, "params[", 7))
        p--;
    if (strncmp(st->s + p, "params[", 7)) return at;
    if (!rank) return p;
    long r = p - 1;
    while (r > 0 && p - r < 12 && st->s[r] != '[')
        r--;
    return r >= 0 && st->s[r] == '[' ? r : p;
}

// What the other kinds' texts carry (see logscan.h's LogError).
static void details(Scanner *sc, Stream *st, LogError *e, long at, size_t end) {
    size_t i;
    switch (e->kind) {
    case LOG_PARAM_COUNT: // "... but Rank R has N params, while rank S has inconsistent M params."
        i = past(at, "DDP expects same model across all ranks, but Rank");
        e->rank = rank_number(st, &i);
        e->a = number_after(st, i, end, "has");
        {
            int64_t o = number_after(st, i, end, "while rank");
            e->other_rank = o >= 0 && o <= MAX_RANK ? (int)o : -1;
        }
        e->b = number_after(st, i, end, "has inconsistent");
        break;
    case LOG_PARAM_SHAPE: { // "[R]: params[P] in this process with sizes [5, 8] appears not ..."
        long p = shape_start(st, at, false);
        if (p == at) break;
        i = (size_t)p + 7;
        e->a = number(st, &i);
        long r = shape_start(st, at, true);
        size_t ri = (size_t)r + 1;
        if (r < p) e->rank = rank_number(st, &ri);
        size_t t = st->s2t[past(at, "in this process with sizes")], k = 0;
        while (t < st->t_len && st->t[t] == ' ')
            t++;
        for (; t < st->t_len && k + 1 < sizeof e->what && st->t[t] != '\n'; t++) {
            e->what[k++] = st->t[t];
            if (st->t[t] == ']') break;
        }
        e->what[k] = '\0';
        break;
    }
    case LOG_GLOO_TIMEOUT:
        i = past(at, "Timed out waiting");
        e->a = number(st, &i);
        snprintf(e->what, sizeof e->what, "%s",
                 find(st, i, i + 8, "msforsend") >= 0 ? "send" : "recv");
        break;
    case LOG_PEER_CLOSED: { // "[127.0.0.1]:29500"
        i = past(at, "Connection closed by peer");
        size_t k = i;
        if (k < st->s_len && st->s[k] == '[') {
            k++;
            while (k < st->s_len &&
                   (isxdigit((unsigned char)st->s[k]) || st->s[k] == '.' || st->s[k] == ':'))
                k++;
            if (k + 1 < st->s_len && st->s[k] == ']' && st->s[k + 1] == ':') {
                k += 2;
                while (k < st->s_len && isdigit((unsigned char)st->s[k]))
                    k++;
                snprintf(e->what, sizeof e->what, "%.*s", (int)MIN(k - i, sizeof e->what - 1),
                         st->s + i);
            }
        }
        break;
    }
    case LOG_NCCL_WATCHDOG: {
        long r = find(st, at > 12 ? (size_t)at - 12 : 0, (size_t)at, "[Rank");
        if (r >= 0) {
            size_t ri = past(r, "[Rank");
            e->rank = rank_number(st, &ri);
        }
        size_t to = MIN(end, (size_t)at + 400);
        e->a = number_after(st, (size_t)at, to, "SeqNum=");
        e->b = number_after(st, (size_t)at, to, "NumelIn=");
        e->timeout_ms = number_after(st, (size_t)at, to, "Timeout(ms)=");
        e->ran_ms = number_after(st, (size_t)at, to, "ran for");
        e->last_enqueued =
            number_after(st, (size_t)at, MIN(end, (size_t)at + 1200), "last enqueued NCCL work:");
        e->last_completed =
            number_after(st, (size_t)at, MIN(end, (size_t)at + 1200), "last completed NCCL work:");
        long op = find(st, (size_t)at, to, "OpType=");
        for (size_t k = 0, j = op >= 0 ? past(op, "OpType=") : st->s_len;
             j < st->s_len && isalnum((unsigned char)st->s[j]) && k + 1 < sizeof e->what; j++, k++)
            e->what[k] = st->s[j], e->what[k + 1] = '\0';
        break;
    }
    case LOG_MONITORED_BARRIER: {
        int64_t r = number_after(st, (size_t)at, MIN(end, (size_t)at + 200),
                                 "waiting for send/recv from rank");
        e->other_rank = r >= 0 && r <= MAX_RANK ? (int)r : -1;
        break;
    }
    default:
        break;
    }
}

typedef struct Phrase {
    LogKind kind;
    const char *text;
} Phrase;

static const Phrase PHRASES[] = {
    {LOG_UNFINISHED_REDUCTION,
     "Expected to have finished reduction in the prior iteration before starting a new one"},
    {LOG_MARKED_TWICE, "Expected to mark a variable ready only once"},
    {LOG_GRAPH_CHANGED, "Your training graph has changed in this iteration"},
    {LOG_PARAM_COUNT, "DDP expects same model across all ranks, but Rank"},
    {LOG_PARAM_SHAPE, "in this process with sizes"},
    {LOG_GLOO_TIMEOUT, "Timed out waiting"},
    {LOG_PEER_CLOSED, "Connection closed by peer"},
    {LOG_NCCL_WATCHDOG, "Watchdog caught collective operation timeout"},
    {LOG_MONITORED_BARRIER, "successfully reached monitoredBarrier, but received errors"},
    {LOG_MONITORED_BARRIER, "failed to pass monitoredBarrier"},
    {LOG_COLLECTIVES_DIFFER, "Detected mismatch between collectives on ranks"},
};
#define N_PHRASES (sizeof PHRASES / sizeof *PHRASES)

typedef struct Hit {
    size_t at;
    int phrase;
} Hit;

static int cmp_hit(const void *a, const void *b) {
    const Hit *x = a, *y = b;
    return (x->at > y->at) - (x->at < y->at);
}

static void scan_stream(Scanner *sc, Stream *st) {
    Hit *hits = NULL;
    int n = 0;
    for (size_t k = 0; k < N_PHRASES; k++)
        for (long at = 0; (at = find(st, (size_t)at, st->s_len, PHRASES[k].text)) >= 0; at++) {
            hits = xrealloc(hits, sizeof(Hit) * (size_t)(n + 1));
            hits[n++] = (Hit){(size_t)at, (int)k};
        }
    if (n) qsort(hits, (size_t)n, sizeof(Hit), cmp_hit);
    for (int h = 0; h < n; h++) {
        size_t end = h + 1 < n ? hits[h + 1].at : st->s_len;
        const Phrase *ph = &PHRASES[hits[h].phrase];
        if (ph->kind == LOG_UNFINISHED_REDUCTION) {
            unfinished(sc, st, (long)hits[h].at, end);
        } else if (ph->kind == LOG_MARKED_TWICE) {
            marked_twice(sc, st, (long)hits[h].at, end);
        } else {
            size_t i = past((long)hits[h].at, ph->text);
            if (ph->kind == LOG_GLOO_TIMEOUT &&
                (number(st, &i) < 0 || find(st, i, i + 2, "ms") < 0))
                continue; // another timeout ("Timed out waiting for clients")
            size_t start = ph->kind == LOG_PARAM_SHAPE
                               ? (size_t)shape_start(st, (long)hits[h].at, true)
                               : hits[h].at;
            LogError *e = new_error(sc, st, ph->kind, start);
            details(sc, st, e, (long)hits[h].at, end);
        }
    }
    free(hits);
}

// ---- context -------------------------------------------------------------------------------

// DDP's construction summary ("world_size: 2" lines), torchrun's --nproc_per_node, the
// reducer's INFO lines naming parameters without a gradient.
static void context(Scanner *sc) {
    LogScan *o = sc->out;
    for (int i = 0; i < sc->n_lines; i++) {
        const char *s = sc->lines[i].s;
        const char *p;
        if (!strncmp(s, "world_size: ", 12)) {
            o->world = MAX(o->world, MIN(atoi(s + 12), MAX_RANK + 1));
            snprintf(o->world_from, sizeof o->world_from, "DDP's summary");
        }
        if (!strncmp(s, "num_parameter_tensors: ", 23)) o->n_params = atoi(s + 23);
        if (!strncmp(s, "find_unused_parameters: ", 24)) o->find_unused = atoi(s + 24) != 0;
        if (!strncmp(s, "torch_distributed_debug: ", 25))
            o->debug = !strcmp(s + 25, "DETAIL") ? 2 : !strcmp(s + 25, "INFO") ? 1 : 0;
        if (!o->world &&
            ((p = strstr(s, "--nproc_per_node")) || (p = strstr(s, "--nproc-per-node")))) {
            p += 16;
            while (*p == '=' || *p == ' ')
                p++;
            o->world = MAX(0, MIN(atoi(p), MAX_RANK + 1));
            snprintf(o->world_from, sizeof o->world_from, "--nproc_per_node");
        }
        if ((p = strstr(s, "] Parameter: ")) &&
            strstr(p, " did not get gradient in backwards pass")) {
            const char *r = strstr(s, "[Rank ");
            int rank = r && r < p ? atoi(r + 6) : sc->lines[i].rank;
            if (rank < 0 || rank > o->max_rank) continue;
            p += 13;
            size_t n = strcspn(p, " ");
            o->info_names[rank] =
                xrealloc(o->info_names[rank], sizeof(char *) * (size_t)(o->n_info_names[rank] + 1));
            char *name = xcalloc(n + 1, 1);
            memcpy(name, p, n);
            o->info_names[rank][o->n_info_names[rank]++] = name;
        }
    }
}

// The same error printed again (by the rank, or by a launcher quoting it) counts once; the
// copy with the longer lists is kept.
static void dedupe(LogScan *o) {
    int kept = 0;
    for (int i = 0; i < o->n; i++) {
        LogError *e = &o->errors[i];
        int same = -1;
        for (int k = 0; k < kept && same < 0; k++)
            if (o->errors[k].kind == e->kind && o->errors[k].rank == e->rank) same = k;
        if (same < 0) {
            o->errors[kept++] = *e;
            continue;
        }
        LogError *into = &o->errors[same];
        into->count++;
        if (e->names.n + e->indices.n > into->names.n + into->indices.n) { // keep the fuller lists
            LogList names = into->names, indices = into->indices;
            into->names = e->names, into->indices = e->indices;
            e->names = names, e->indices = indices;
        }
        for (int k = 0; k < e->names.n; k++)
            free(e->names.names[k]);
        free(e->names.names);
        free(e->indices.values);
    }
    o->n = kept;
}

void log_scan(const char *text, size_t len, LogScan *out) {
    *out = (LogScan){.max_rank = -1, .debug = -1, .find_unused = -1};
    Scanner sc = {.out = out};
    split_lines(&sc, text, len);
    for (int i = 0; i < sc.n_streams; i++) {
        join_stream(&sc, &sc.streams[i]);
        scan_stream(&sc, &sc.streams[i]);
    }
    for (int i = 0; i < out->n; i++)
        out->max_rank = MAX(out->max_rank, MAX(out->errors[i].rank, out->errors[i].other_rank));
    int n_ranks = out->max_rank + 1;
    out->info_names = xcalloc((size_t)n_ranks + 1, sizeof(char **));
    out->n_info_names = xcalloc((size_t)n_ranks + 1, sizeof(int));
    out->boxes = xcalloc((size_t)n_ranks + 1, sizeof(int));
    for (int r = 0; r < n_ranks; r++)
        out->boxes[r] = -1;
    context(&sc);
    dedupe(out);
    for (int i = out->n - 1; i >= 0; i--) // the progress line before each rank's first error
        if (out->errors[i].rank >= 0 && out->errors[i].line >= 1)
            out->boxes[out->errors[i].rank] = sc.lines[out->errors[i].line - 1].boxes;
    for (int i = 0; i < sc.n_streams; i++) {
        Stream *st = &sc.streams[i];
        free(st->lines);
        free(st->t);
        free(st->t_start);
        free(st->s);
        free(st->s2t);
    }
    free(sc.streams);
    free(sc.lines);
    free(sc.buf);
}

void log_scan_free(LogScan *s) {
    for (int i = 0; i < s->n; i++) {
        for (int k = 0; k < s->errors[i].names.n; k++)
            free(s->errors[i].names.names[k]);
        free(s->errors[i].names.names);
        free(s->errors[i].indices.values);
    }
    free(s->errors);
    for (int r = 0; r <= s->max_rank; r++) {
        for (int k = 0; k < s->n_info_names[r]; k++)
            free(s->info_names[r][k]);
        free(s->info_names[r]);
    }
    free(s->info_names);
    free(s->n_info_names);
    free(s->boxes);
    free(s->prefix_ranks);
    *s = (LogScan){0};
}
