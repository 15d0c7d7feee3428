/* paramgroup.c -- parameter names as brace patterns (paramgroup.h). Each group is a cartesian
 * product of per-part sets; two groups merge when they have the same number of parts and
 * differ in exactly one part that is the last one or numeric in both. Merging runs from the
 * last part towards the first and repeats until nothing changes. */
#include "tui/model/paramgroup.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xrealloc, xstrdup

// One part of a group: the set of words seen there, in first-seen order.
typedef struct Part {
    char **words;
    int n;
    bool numeric; // every word is all digits
} Part;

typedef struct Group {
    Part *parts;
    int n_parts;
    int first;    // lowest index of a name in it
    int count;    // names in it
    int *members; // their parameter indices
    bool dead;    // merged into another group
    char *key;    // scratch: the group without the part being merged
} Group;

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

static int cmp_words(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    if (all_digits(x) && all_digits(y)) {
        long long u = atoll(x), v = atoll(y);
        return (u > v) - (u < v);
    }
    return strcmp(x, y);
}

// A part as printed: "weight", "{weight,bias}", "{0..5}", "{0,1}", "{0..2,5}".
static void part_text(const Part *p, char *out, size_t len) {
    if (p->n == 1) {
        snprintf(out, len, "%s", p->words[0]);
        return;
    }
    char **w = xcalloc((size_t)p->n, sizeof(char *));
    memcpy(w, p->words, sizeof(char *) * (size_t)p->n);
    if (p->numeric) qsort(w, (size_t)p->n, sizeof(char *), cmp_words);
    size_t at = (size_t)snprintf(out, len, "{");
    for (int i = 0; i < p->n && at < len;) {
        int j = i;
        if (p->numeric)
            while (j + 1 < p->n && atoll(w[j + 1]) == atoll(w[j]) + 1)
                j++;
        if (j - i >= 2) {
            at += (size_t)snprintf(out + at, len - at, "%s%s..%s", i ? "," : "", w[i], w[j]);
            i = j + 1;
        } else {
            at += (size_t)snprintf(out + at, len - at, "%s%s", i ? "," : "", w[i]);
            i++;
        }
    }
    if (at < len) snprintf(out + at, len - at, "}");
    free(w);
}

// The group's parts but `skip`, sorted sets, as one string: groups with equal keys differ
// only in part `skip`.
static char *group_key(const Group *g, int skip) {
    size_t cap = 64, at = 0;
    char *key = xcalloc(cap, 1);
    at += (size_t)snprintf(key, cap, "%d|", g->n_parts);
    for (int k = 0; k < g->n_parts; k++) {
        char **w = xcalloc((size_t)g->parts[k].n, sizeof(char *));
        memcpy(w, g->parts[k].words, sizeof(char *) * (size_t)g->parts[k].n);
        qsort(w, (size_t)g->parts[k].n, sizeof(char *), cmp_words);
        for (int i = 0; i <= g->parts[k].n; i++) {
            const char *s = k == skip ? "*" : i < g->parts[k].n ? w[i] : "|";
            size_t n = strlen(s) + 2;
            if (at + n >= cap) key = xrealloc(key, cap = 2 * (at + n));
            at += (size_t)snprintf(key + at, cap - at, "%s,", s);
            if (k == skip) break;
        }
        free(w);
    }
    return key;
}

static int cmp_by_key(const void *a, const void *b) {
    const Group *x = *(Group *const *)a, *y = *(Group *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->first > y->first) - (x->first < y->first);
}

// Merges the part `from_end` places before the last wherever allowed; true if any merged.
static bool merge_pass(Group *g, int n, int from_end) {
    Group **live = xcalloc((size_t)n, sizeof(Group *));
    int n_live = 0;
    for (int i = 0; i < n; i++)
        if (!g[i].dead && g[i].n_parts > from_end) {
            g[i].key = group_key(&g[i], g[i].n_parts - 1 - from_end);
            live[n_live++] = &g[i];
        }
    qsort(live, (size_t)n_live, sizeof(Group *), cmp_by_key);
    bool merged = false;
    for (int i = 0; i < n_live;) {
        int j = i + 1;
        while (j < n_live && !strcmp(live[j]->key, live[i]->key))
            j++;
        Group *into = live[i];
        int at = into->n_parts - 1 - from_end;
        for (int k = i + 1; k < j; k++) {
            Group *o = live[k];
            if (from_end != 0 && !(into->parts[at].numeric && o->parts[at].numeric)) continue;
            Part *p = &into->parts[at];
            p->words = xrealloc(p->words, sizeof(char *) * (size_t)(p->n + o->parts[at].n));
            for (int w = 0; w < o->parts[at].n; w++)
                p->words[p->n++] = o->parts[at].words[w];
            o->parts[at].n = 0; // its words moved
            p->numeric &= o->parts[at].numeric;
            into->members = xrealloc(into->members, sizeof(int) * (size_t)(into->count + o->count));
            memcpy(into->members + into->count, o->members, sizeof(int) * (size_t)o->count);
            into->count += o->count;
            into->first = into->first < o->first ? into->first : o->first;
            o->dead = merged = true;
        }
        i = j;
    }
    for (int i = 0; i < n_live; i++) {
        free(live[i]->key);
        live[i]->key = NULL;
    }
    free(live);
    return merged;
}

static int cmp_groups(const void *a, const void *b) {
    const Group *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return (x->first > y->first) - (x->first < y->first);
}

static int cmp_int(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

char *paramgroup_ints(const int *v, int n, char *buf, int cap) {
    if (cap <= 0) return buf;
    buf[0] = '\0';
    if (n == 1) snprintf(buf, (size_t)cap, "%d", v[0]);
    if (n <= 1) return buf;
    size_t at = (size_t)snprintf(buf, (size_t)cap, "{");
    for (int i = 0; i < n && at < (size_t)cap;) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        const char *sep = i ? "," : "";
        if (j - i >= 2)
            at += (size_t)snprintf(buf + at, (size_t)cap - at, "%s%d..%d", sep, v[i], v[j]);
        else if (j == i + 1)
            at += (size_t)snprintf(buf + at, (size_t)cap - at, "%s%d,%d", sep, v[i], v[j]);
        else
            at += (size_t)snprintf(buf + at, (size_t)cap - at, "%s%d", sep, v[i]);
        i = j + 1;
    }
    if (at < (size_t)cap) snprintf(buf + at, (size_t)cap - at, "}");
    return buf;
}

int paramgroup_build(char *const *names, const int *idx, int n, ParamGroup **out) {
    *out = NULL;
    if (n <= 0) return 0;
    Group *g = xcalloc((size_t)n, sizeof(Group));
    int max_parts = 0;
    for (int i = 0; i < n; i++) {
        g[i] = (Group){.first = idx[i], .count = 1};
        g[i].members = xcalloc(1, sizeof(int));
        g[i].members[0] = idx[i];
        const char *s = names[idx[i]];
        for (;;) {
            size_t len = strcspn(s, ".");
            g[i].parts = xrealloc(g[i].parts, sizeof(Part) * (size_t)(g[i].n_parts + 1));
            Part *p = &g[i].parts[g[i].n_parts++];
            p->words = xcalloc(1, sizeof(char *));
            p->words[0] = xcalloc(len + 1, 1);
            memcpy(p->words[0], s, len);
            p->n = 1;
            p->numeric = all_digits(p->words[0]);
            if (!s[len]) break;
            s += len + 1;
        }
        if (g[i].n_parts > max_parts) max_parts = g[i].n_parts;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int from_end = 0; from_end < max_parts; from_end++)
            changed |= merge_pass(g, n, from_end);
    }
    qsort(g, (size_t)n, sizeof(Group), cmp_groups);
    int n_groups = 0;
    for (int i = 0; i < n; i++)
        n_groups += !g[i].dead;
    ParamGroup *pg = xcalloc((size_t)n_groups, sizeof(ParamGroup));
    for (int i = 0, k = 0; i < n; i++) {
        if (g[i].dead) continue;
        size_t cap = 256, at = 0;
        char *pattern = xcalloc(cap, 1), part[4096];
        for (int p = 0; p < g[i].n_parts; p++) {
            part_text(&g[i].parts[p], part, sizeof part);
            size_t need = strlen(part) + 2;
            if (at + need >= cap) pattern = xrealloc(pattern, cap = 2 * (at + need));
            at += (size_t)snprintf(pattern + at, cap - at, "%s%s", p ? "." : "", part);
        }
        qsort(g[i].members, (size_t)g[i].count, sizeof(int), cmp_int);
        pg[k++] = (ParamGroup){.pattern = pattern, .n = g[i].count, .members = g[i].members};
        g[i].members = NULL;
    }
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < g[i].n_parts; p++) {
            for (int w = 0; w < g[i].parts[p].n; w++)
                free(g[i].parts[p].words[w]);
            free(g[i].parts[p].words);
        }
        free(g[i].parts);
        free(g[i].members);
    }
    free(g);
    *out = pg;
    return n_groups;
}

void paramgroup_free(ParamGroup *groups, int n) {
    for (int i = 0; i < n; i++) {
        free(groups[i].pattern);
        free(groups[i].members);
    }
    free(groups);
}
