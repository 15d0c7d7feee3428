/* yaml_model.c -- the Ultralytics model yaml reader (see yaml_model.h).
 *
 * libyaml's document API loads the whole file; every node keeps its start mark, so each error
 * names the line of the value that is wrong. Scalars are resolved as PyYAML (YAML 1.1 core:
 * null, bools, ints, floats) and then as parse_model does with strings: "nc" is the class
 * count and "None"/"True"/"False"/numbers are Python literals (ast.literal_eval). */
#include "trainer/nn/yaml_model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <unistd.h> // access
#include <yaml.h>

#include "kernels/base.h"       // xmalloc, MIN, MAX
#include "trainer/nn/builtin.h" // builtin_models

typedef struct Ctx {
    const char *file;
    yaml_document_t *doc;
    char *err;
    size_t errlen;
    int nc;
} Ctx;

static int node_line(const yaml_node_t *n) {
    return n ? (int)n->start_mark.line + 1 : 1;
}

static int fail(Ctx *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(Ctx *c, const yaml_node_t *n, const char *fmt, ...) {
    int off = snprintf(c->err, c->errlen, "%s:%d: ", c->file, node_line(n));
    if (off >= 0 && (size_t)off < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + off, c->errlen - (size_t)off, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// ---- scalar values ----
typedef enum { V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_SEQ, V_MAP } VKind;

typedef struct Val {
    VKind kind;
    long long i;
    double f; // V_FLOAT, and V_INT as a double
    bool b;
    const char *s;
} Val;

static const char *kind_name(VKind k) {
    static const char *names[] = {"None",     "a bool", "an int",   "a float",
                                  "a string", "a list", "a mapping"};
    return names[k];
}

static bool is_one_of(const char *s, const char *const *words) {
    for (; *words; words++)
        if (strcmp(s, *words) == 0) return true;
    return false;
}

// Parses s as a whole int or float literal; returns V_INT, V_FLOAT or V_STR.
static VKind number_of(const char *s, long long *i, double *f) {
    if (!*s) return V_STR;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end == '\0' && errno == 0) {
        *i = v;
        *f = (double)v;
        return V_INT;
    }
    if (!strpbrk(s, ".eE")) return V_STR;
    double d = strtod(s, &end);
    if (*end != '\0') return V_STR;
    *f = d;
    return V_FLOAT;
}

static Val value_of(Ctx *c, const yaml_node_t *n) {
    if (n->type == YAML_SEQUENCE_NODE) return (Val){.kind = V_SEQ};
    if (n->type == YAML_MAPPING_NODE) return (Val){.kind = V_MAP};
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    const char *s = (const char *)n->data.scalar.value;
    Val v = {.kind = V_STR, .s = s};
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) { // YAML's own resolution
        if (is_one_of(s, nulls)) return (Val){.kind = V_NULL, .s = s};
        if (is_one_of(s, trues)) return (Val){.kind = V_BOOL, .b = true, .s = s};
        if (is_one_of(s, falses)) return (Val){.kind = V_BOOL, .b = false, .s = s};
        v.kind = number_of(s, &v.i, &v.f);
        if (v.kind != V_STR) return v;
    }
    // parse_model: a string arg is a local variable (nc) or a Python literal, else itself.
    if (strcmp(s, "nc") == 0) return (Val){.kind = V_INT, .i = c->nc, .f = c->nc, .s = s};
    if (strcmp(s, "None") == 0) return (Val){.kind = V_NULL, .s = s};
    if (strcmp(s, "True") == 0 || strcmp(s, "False") == 0)
        return (Val){.kind = V_BOOL, .b = s[0] == 'T', .s = s};
    v.kind = number_of(s, &v.i, &v.f);
    return v;
}

// "'text'" for a scalar, "a list" / "a mapping" otherwise (for messages).
static const char *shown(const Val *v, char *buf, size_t n) {
    if (v->kind == V_SEQ || v->kind == V_MAP) return kind_name(v->kind);
    snprintf(buf, n, "'%s'", v->s ? v->s : "");
    return buf;
}

static yaml_node_t *item(Ctx *c, const yaml_node_t *seq, int j) {
    return yaml_document_get_node(c->doc, seq->data.sequence.items.start[j]);
}

static int seq_len(const yaml_node_t *seq) {
    return (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

static int get_int(Ctx *c, const yaml_node_t *n, const char *what, int lo, int *out) {
    Val v = value_of(c, n);
    char buf[96];
    if (v.kind != V_INT) return fail(c, n, "%s must be an int, got %s", what, shown(&v, buf, 96));
    if (v.i < lo || v.i > INT_MAX)
        return fail(c, n, "%s must be an int >= %d, got %lld", what, lo, v.i);
    *out = (int)v.i;
    return 0;
}

static int get_number(Ctx *c, const yaml_node_t *n, const char *what, double *out) {
    Val v = value_of(c, n);
    char buf[96];
    if (v.kind != V_INT && v.kind != V_FLOAT)
        return fail(c, n, "%s must be a number, got %s", what, shown(&v, buf, 96));
    *out = v.f;
    return 0;
}

// ---- module argument tables ----
typedef enum { T_INT, T_BOOL, T_FLOAT, T_INT_OR_NONE, T_NONE, T_STR } ArgType;

typedef struct ArgDef {
    const char *name;
    ArgType type;
    bool required;
    double def;          // T_INT, T_FLOAT, T_INT_OR_NONE (-1 = None)
    bool def_bool;       // T_BOOL
    const char *def_str; // T_STR
} ArgDef;

typedef struct Arg {
    long long i;
    double f;
    bool b, is_none;
    const char *s;
    const yaml_node_t *node; // NULL for a default
} Arg;

#define MAX_ARGS 14

// One row per argument, in order: name, type, required, then the default of an optional
// one (number, bool or string by type). A {0} row ends each table.
// clang-format off
static const ArgDef conv_defs[] = {
    {"c2", T_INT, true, 0, false, NULL},
    {"k", T_INT, false, 1, false, NULL},
    {"s", T_INT, false, 1, false, NULL},
    {"p", T_INT_OR_NONE, false, -1, false, NULL},
    {"g", T_INT, false, 1, false, NULL},
    {"d", T_INT, false, 1, false, NULL},
    {"act", T_BOOL, false, 0, true, NULL},
    {0},
};
static const ArgDef dwconv_defs[] = {
    {"c2", T_INT, true, 0, false, NULL},
    {"k", T_INT, false, 1, false, NULL},
    {"s", T_INT, false, 1, false, NULL},
    {"d", T_INT, false, 1, false, NULL},
    {"act", T_BOOL, false, 0, true, NULL},
    {0},
};
static const ArgDef hgstem_defs[] = {
    {"cm", T_INT, true, 0, false, NULL},
    {"c2", T_INT, true, 0, false, NULL},
    {0},
};
static const ArgDef hgblock_defs[] = {
    {"cm", T_INT, true, 0, false, NULL},
    {"c2", T_INT, true, 0, false, NULL},
    {"k", T_INT, false, 3, false, NULL},
    {"lightconv", T_BOOL, false, 0, false, NULL},
    {"shortcut", T_BOOL, false, 0, false, NULL},
    {0},
};
// parse_model reads args[3] (is_first) to infer the output channels, so four are required.
static const ArgDef resnet_defs[] = {
    {"c1", T_INT, true, 0, false, NULL},
    {"c2", T_INT, true, 0, false, NULL},
    {"s", T_INT, true, 0, false, NULL},
    {"is_first", T_BOOL, true, 0, false, NULL},
    {"n", T_INT, false, 1, false, NULL},
    {0},
};
static const ArgDef aifi_defs[] = {
    {"cm", T_INT, false, 2048, false, NULL},
    {"num_heads", T_INT, false, 8, false, NULL},
    {"dropout", T_FLOAT, false, 0, false, NULL},
    {0},
};
static const ArgDef repc3_defs[] = {
    {"c2", T_INT, true, 0, false, NULL},
    {"e", T_FLOAT, false, 1.0, false, NULL},
    {0},
};
static const ArgDef upsample_defs[] = {
    {"size", T_NONE, false, 0, false, NULL},
    {"scale_factor", T_INT, true, 0, false, NULL},
    {"mode", T_STR, false, 0, false, "nearest"},
    {0},
};
static const ArgDef concat_defs[] = {
    {"dimension", T_INT, false, 1, false, NULL},
    {0},
};
static const ArgDef decoder_defs[] = {
    {"nc", T_INT, true, 0, false, NULL},
    {"hd", T_INT, false, 256, false, NULL},
    {"nq", T_INT, false, 300, false, NULL},
    {"ndp", T_INT, false, 4, false, NULL},
    {"nh", T_INT, false, 8, false, NULL},
    {"ndl", T_INT, false, 6, false, NULL},
    {"d_ffn", T_INT, false, 1024, false, NULL},
    {"dropout", T_FLOAT, false, 0, false, NULL},
    {"act", T_STR, false, 0, false, "nn.ReLU()"},
    {"eval_idx", T_INT, false, -1, false, NULL},
    {"nd", T_INT, false, 100, false, NULL},
    {"label_noise_ratio", T_FLOAT, false, 0.5, false, NULL},
    {"box_noise_scale", T_FLOAT, false, 1.0, false, NULL},
    {"learnt_init_query", T_BOOL, false, 0, false, NULL},
    {0},
};
// clang-format on

typedef struct ModuleDef {
    const char *name;
    ModuleKind kind;
    const ArgDef *args;
} ModuleDef;

static const ModuleDef modules[] = {
    {"Conv", MOD_CONV, conv_defs},
    {"DWConv", MOD_DWCONV, dwconv_defs},
    {"HGStem", MOD_HGSTEM, hgstem_defs},
    {"HGBlock", MOD_HGBLOCK, hgblock_defs},
    {"ResNetLayer", MOD_RESNETLAYER, resnet_defs},
    {"AIFI", MOD_AIFI, aifi_defs},
    {"RepC3", MOD_REPC3, repc3_defs},
    {"nn.Upsample", MOD_UPSAMPLE, upsample_defs},
    {"Concat", MOD_CONCAT, concat_defs},
    {"RTDETRDecoder", MOD_RTDETRDECODER, decoder_defs},
};
#define N_MODULES ((int)(sizeof modules / sizeof modules[0]))

static int n_args(const ModuleDef *m) {
    int n = 0;
    while (m->args[n].name)
        n++;
    return n;
}

const char *module_kind_name(ModuleKind k) {
    for (int i = 0; i < N_MODULES; i++)
        if (modules[i].kind == k) return modules[i].name;
    return "?";
}

// "[cm, c2, k=3, lightconv=False]"
static void signature(const ModuleDef *m, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int j = 0; j < n_args(m) && off < n; j++) {
        const ArgDef *a = &m->args[j];
        const char *sep = j ? ", " : "";
        if (a->required)
            off += (size_t)snprintf(buf + off, n - off, "%s%s", sep, a->name);
        else if (a->type == T_BOOL)
            off += (size_t)snprintf(buf + off, n - off, "%s%s=%s", sep, a->name,
                                    a->def_bool ? "True" : "False");
        else if (a->type == T_NONE || (a->type == T_INT_OR_NONE && a->def < 0))
            off += (size_t)snprintf(buf + off, n - off, "%s%s=None", sep, a->name);
        else if (a->type == T_STR)
            off += (size_t)snprintf(buf + off, n - off, "%s%s=%s", sep, a->name, a->def_str);
        else
            off += (size_t)snprintf(buf + off, n - off, "%s%s=%g", sep, a->name, a->def);
    }
    if (off < n) snprintf(buf + off, n - off, "]");
}

// What each argument type accepts (a set of VKind bits), and how messages name it.
static const struct {
    const char *text;
    unsigned kinds;
} arg_types[] = {
    [T_INT] = {"an int", 1u << V_INT},
    [T_BOOL] = {"a bool (True/False)", 1u << V_BOOL},
    [T_FLOAT] = {"a number", 1u << V_INT | 1u << V_FLOAT},
    [T_INT_OR_NONE] = {"an int or None", 1u << V_INT | 1u << V_NULL},
    [T_NONE] = {"None", 1u << V_NULL},
    [T_STR] = {"a string", 1u << V_STR},
};

// Bounds of module arguments and of the depth/width multipliers.
#define ARG_INT_LIMIT (1 << 20)
#define ARG_FLOAT_LIMIT 1e6
#define MULTIPLIER_LIMIT 64.0

// Checks arity and types of `args` (a sequence node) against m, filling out[0..n_args-1].
static int parse_args(Ctx *c, const ModuleDef *m, const yaml_node_t *args, Arg *out) {
    int n = seq_len(args), n_req = 0;
    CHECK(n_args(m) <= MAX_ARGS, "%s: more than %d args in its table", m->name, MAX_ARGS);
    for (int j = 0; j < n_args(m); j++)
        n_req += m->args[j].required;
    if (n < n_req || n > n_args(m)) {
        char sig[256];
        signature(m, sig, sizeof sig);
        return fail(c, args, "%s takes args %s, got %d value%s", m->name, sig, n,
                    n == 1 ? "" : "s");
    }
    for (int j = 0; j < n_args(m); j++) {
        const ArgDef *d = &m->args[j];
        Arg *a = &out[j];
        memset(a, 0, sizeof *a);
        if (j >= n) {
            a->i = (long long)d->def;
            a->f = d->def;
            a->b = d->def_bool;
            a->s = d->def_str;
            a->is_none = d->type == T_NONE || (d->type == T_INT_OR_NONE && d->def < 0);
            continue;
        }
        a->node = item(c, args, j);
        Val v = value_of(c, a->node);
        bool ok = arg_types[d->type].kinds & 1u << v.kind;
        if (!ok) {
            char buf[96];
            return fail(c, a->node, "%s arg %d (%s) must be %s, got %s", m->name, j + 1, d->name,
                        arg_types[d->type].text, shown(&v, buf, sizeof buf));
        }
        // Channel counts, kernel sizes and ratios far beyond any model would overflow the
        // channel arithmetic (int): refused here, with the argument named.
        if ((v.kind == V_INT && (v.i < -ARG_INT_LIMIT || v.i > ARG_INT_LIMIT)) ||
            (v.kind == V_FLOAT && !(fabs(v.f) <= ARG_FLOAT_LIMIT))) {
            char buf[96];
            return fail(c, a->node, "%s arg %d (%s) must be within +-%d, got %s", m->name, j + 1,
                        d->name, v.kind == V_INT ? ARG_INT_LIMIT : (int)ARG_FLOAT_LIMIT,
                        shown(&v, buf, sizeof buf));
        }
        a->i = v.i;
        a->f = v.f;
        a->b = v.b;
        a->s = v.s;
        a->is_none = v.kind == V_NULL;
    }
    return 0;
}

// An int argument that must be >= lo.
static int arg_min(Ctx *c, const ModuleDef *m, const yaml_node_t *row, const Arg *a, int j,
                   long long lo) {
    if (a->i >= lo && a->i <= INT_MAX) return 0;
    return fail(c, a->node ? a->node : row, "%s arg %d (%s) must be >= %lld, got %lld", m->name,
                j + 1, m->args[j].name, lo, a->i);
}

// ---- channel rules ----
typedef struct Build {
    ModelSpec *s;
    int *ch; // ch[i]: output channels of layer i
} Build;

static int ch_of(const Build *b, int abs) {
    return abs < 0 ? 3 : b->ch[abs];
}

// parse_model's width rule for Conv-like modules: make_divisible(min(c2, max_ch) * width, 8),
// except when c2 equals nc.
static int scale_width(const ModelSpec *s, int c2) {
    if (c2 == s->nc) return c2;
    double v = (double)MIN(c2, s->max_channels) * s->width;
    return (int)(ceil(v / 8.0) * 8.0);
}

static int gcd(int a, int b) {
    while (b) {
        int r = a % b;
        a = b;
        b = r;
    }
    return a;
}

// One `from` entry of row i -> absolute index (-1 = the image).
static int resolve_from(Ctx *c, const yaml_node_t *n, int i, int *abs) {
    int f;
    Val v = value_of(c, n);
    char buf[96];
    if (v.kind != V_INT)
        return fail(c, n, "from must be an int or a list of ints, got %s", shown(&v, buf, 96));
    f = (int)MAX(MIN(v.i, INT_MAX / 2), INT_MIN / 2);
    if (i == 0) {
        if (f != -1)
            return fail(c, n, "from %d out of range for layer 0 (expected -1, the image)", f);
        *abs = -1;
        return 0;
    }
    if (f < -i || f >= i)
        return fail(c, n, "from %d out of range for layer %d (expected %d..%d)", f, i, -i, i - 1);
    *abs = f < 0 ? i + f : f;
    return 0;
}

static int layer_from_args(Ctx *c, Build *b, int i, const ModuleDef *m, const yaml_node_t *row,
                           int repeats, const Arg *a, LayerSpec *l);

static int parse_row(Ctx *c, Build *b, int i, const yaml_node_t *row, int n_layers) {
    LayerSpec *l = &b->s->layers[i];
    l->line = node_line(row);
    if (row->type != YAML_SEQUENCE_NODE || seq_len(row) != 4)
        return fail(c, row, "layer %d must be [from, repeats, module, args]", i);
    const yaml_node_t *from = item(c, row, 0), *rep = item(c, row, 1), *mod = item(c, row, 2),
                      *args = item(c, row, 3);

    Val mv = value_of(c, mod);
    const ModuleDef *m = NULL;
    for (int k = 0; k < N_MODULES && mv.kind == V_STR; k++)
        if (strcmp(mv.s, modules[k].name) == 0) m = &modules[k];
    if (!m) {
        char buf[96];
        return fail(c, mod,
                    "unknown module %s (expected Conv, DWConv, HGStem, HGBlock, ResNetLayer, "
                    "AIFI, RepC3, nn.Upsample, Concat or RTDETRDecoder)",
                    shown(&mv, buf, sizeof buf));
    }
    l->kind = m->kind;
    bool is_decoder = m->kind == MOD_RTDETRDECODER;
    if (is_decoder && i != n_layers - 1)
        return fail(c, mod, "RTDETRDecoder must be the last layer");
    if (!is_decoder && i == n_layers - 1)
        return fail(c, mod, "the last layer must be RTDETRDecoder, got %s", m->name);

    // from: an int, or a list for Concat and RTDETRDecoder (as parse_model indexes ch[f]).
    bool wants_list = m->kind == MOD_CONCAT || is_decoder;
    if (wants_list != (from->type == YAML_SEQUENCE_NODE))
        return fail(c, from, "%s takes from as %s", m->name,
                    wants_list ? "a list of layer indices" : "one layer index");
    if (wants_list) {
        l->n_from = seq_len(from);
        if (l->n_from < 1 || l->n_from > LAYER_MAX_FROM)
            return fail(c, from, "%s takes 1 to %d inputs, got %d", m->name, LAYER_MAX_FROM,
                        l->n_from);
        for (int j = 0; j < l->n_from; j++)
            if (resolve_from(c, item(c, from, j), i, &l->from[j])) return -1;
    } else {
        l->n_from = 1;
        if (resolve_from(c, from, i, &l->from[0])) return -1;
    }

    int repeats;
    if (get_int(c, rep, "repeats", 1, &repeats)) return -1;
    // parse_model: n = max(round(n * depth), 1) if n > 1 (Python rounds half to even, as rint).
    if (repeats > 1) repeats = (int)MAX(rint(repeats * b->s->depth), 1.0);
    if (repeats > 1 && m->kind != MOD_HGBLOCK && m->kind != MOD_REPC3)
        return fail(c, rep, "%s takes repeats 1 (only HGBlock and RepC3 repeat), got %d", m->name,
                    repeats);

    if (args->type != YAML_SEQUENCE_NODE) return fail(c, args, "%s args must be a list", m->name);
    Arg a[MAX_ARGS];
    if (parse_args(c, m, args, a)) return -1;
    if (layer_from_args(c, b, i, m, row, repeats, a, l)) return -1;
    b->ch[i] = l->c2;
    return 0;
}

static int layer_from_args(Ctx *c, Build *b, int i, const ModuleDef *m, const yaml_node_t *row,
                           int repeats, const Arg *a, LayerSpec *l) {
    const ModelSpec *s = b->s;
    int c1 = ch_of(b, l->from[0]);
    switch (m->kind) {
    case MOD_CONV:
    case MOD_DWCONV: {
        bool dw = m->kind == MOD_DWCONV;
        for (int j = 0; j < n_args(m); j++)
            if (m->args[j].type == T_INT && arg_min(c, m, row, &a[j], j, 1)) return -1;
        ConvArgs *v = &l->conv;
        v->c1 = c1;
        v->c2 = scale_width(s, (int)a[0].i);
        v->k = (int)a[1].i;
        v->s = (int)a[2].i;
        if (dw) {
            v->p = -1;
            v->g = gcd(c1, v->c2);
            v->d = (int)a[3].i;
            v->act = a[4].b;
        } else {
            if (!a[3].is_none && a[3].i < 0)
                return fail(c, a[3].node, "Conv arg 4 (p) must be None or >= 0, got %lld", a[3].i);
            v->p = a[3].is_none ? -1 : (int)a[3].i;
            v->g = (int)a[4].i;
            v->d = (int)a[5].i;
            v->act = a[6].b;
            if (c1 % v->g || v->c2 % v->g)
                return fail(c, a[4].node ? a[4].node : row,
                            "Conv groups %d must divide c1=%d and c2=%d", v->g, c1, v->c2);
        }
        l->c2 = v->c2;
        return 0;
    }
    case MOD_HGSTEM:
        if (arg_min(c, m, row, &a[0], 0, 2) || arg_min(c, m, row, &a[1], 1, 1)) return -1;
        l->hgstem = (HGStemArgs){c1, (int)a[0].i, (int)a[1].i};
        l->c2 = l->hgstem.c2;
        return 0;
    case MOD_HGBLOCK:
        if (arg_min(c, m, row, &a[0], 0, 1) || arg_min(c, m, row, &a[1], 1, 2) ||
            arg_min(c, m, row, &a[2], 2, 1))
            return -1;
        if (a[2].i % 2 == 0)
            return fail(c, a[2].node, "HGBlock arg 3 (k) must be odd, got %lld", a[2].i);
        l->hgblock =
            (HGBlockArgs){c1, (int)a[0].i, (int)a[1].i, (int)a[2].i, repeats, a[3].b, a[4].b};
        l->c2 = l->hgblock.c2;
        return 0;
    case MOD_RESNETLAYER:
        for (int j = 0; j < n_args(m); j++)
            if (m->args[j].type == T_INT && arg_min(c, m, row, &a[j], j, 1)) return -1;
        if (a[0].i != c1)
            return fail(c, a[0].node,
                        "ResNetLayer arg 1 (c1) is %lld but its input has %d channels", a[0].i, c1);
        l->resnet = (ResNetLayerArgs){c1, (int)a[1].i, (int)a[2].i, (int)a[4].i, a[3].b};
        l->c2 = a[3].b ? l->resnet.c2 : 4 * l->resnet.c2;
        return 0;
    case MOD_AIFI:
        if (arg_min(c, m, row, &a[0], 0, 1) || arg_min(c, m, row, &a[1], 1, 1)) return -1;
        if (a[2].f != 0.0)
            return fail(c, a[2].node,
                        "AIFI arg 3 (dropout) must be 0.0 (dropout is not implemented)");
        if (c1 % 4 || c1 % a[1].i)
            return fail(c, row, "AIFI needs c1 divisible by 4 and by num_heads=%lld, got c1=%d",
                        a[1].i, c1);
        l->aifi = (AifiArgs){c1, (int)a[0].i, (int)a[1].i};
        // parse_model leaves c2 at the previous row's value; the true output width is c1
        // (equal whenever from is -1, as in every shipped yaml).
        l->c2 = c1;
        return 0;
    case MOD_REPC3: {
        if (arg_min(c, m, row, &a[0], 0, 1)) return -1;
        int c2 = scale_width(s, (int)a[0].i);
        if (!(a[1].f > 0) || (int)(c2 * a[1].f) < 1)
            return fail(c, a[1].node ? a[1].node : row, "RepC3 arg 2 (e) must give int(c2*e) >= 1");
        l->repc3 = (RepC3Args){c1, c2, repeats, a[1].f};
        l->c2 = c2;
        return 0;
    }
    case MOD_UPSAMPLE:
        if (arg_min(c, m, row, &a[1], 1, 1)) return -1;
        if (strcmp(a[2].s, "nearest") != 0)
            return fail(c, a[2].node, "nn.Upsample arg 3 (mode) must be 'nearest', got '%s'",
                        a[2].s);
        l->upsample_scale = (int)a[1].i;
        l->c2 = c1;
        return 0;
    case MOD_CONCAT:
        if (a[0].i != 1)
            return fail(c, a[0].node, "Concat arg 1 (dimension) must be 1, got %lld", a[0].i);
        l->concat_dim = 1;
        l->c2 = 0;
        for (int j = 0; j < l->n_from; j++)
            l->c2 += ch_of(b, l->from[j]);
        return 0;
    case MOD_RTDETRDECODER: {
        for (int j = 0; j <= 6; j++) // nc, hd, nq, ndp, nh, ndl, d_ffn
            if (arg_min(c, m, row, &a[j], j, 1)) return -1;
        if (arg_min(c, m, row, &a[10], 10, 0)) return -1;
        DecoderArgs *d = &l->decoder;
        d->nc = (int)a[0].i;
        d->hd = (int)a[1].i;
        d->nq = (int)a[2].i;
        d->ndp = (int)a[3].i;
        d->nh = (int)a[4].i;
        d->ndl = (int)a[5].i;
        d->d_ffn = (int)a[6].i;
        d->eval_idx = (int)a[9].i;
        d->nd = (int)a[10].i;
        d->label_noise_ratio = a[11].f;
        d->box_noise_scale = a[12].f;
        d->learnt_init_query = a[13].b;
        if (d->hd % d->nh)
            return fail(c, a[4].node ? a[4].node : row,
                        "RTDETRDecoder hd=%d must be divisible by nh=%d", d->hd, d->nh);
        if (a[7].f != 0.0)
            return fail(c, a[7].node,
                        "RTDETRDecoder arg 8 (dropout) must be 0.0 (dropout is not implemented)");
        if (strcmp(a[8].s, "nn.ReLU()") != 0 && strcmp(a[8].s, "nn.ReLU") != 0)
            return fail(c, a[8].node, "RTDETRDecoder arg 9 (act) must be nn.ReLU(), got '%s'",
                        a[8].s);
        if (d->eval_idx < -d->ndl || d->eval_idx >= d->ndl)
            return fail(c, a[9].node, "RTDETRDecoder arg 10 (eval_idx) must be in %d..%d, got %d",
                        -d->ndl, d->ndl - 1, d->eval_idx);
        d->nl = l->n_from;
        for (int j = 0; j < d->nl; j++)
            d->ch[j] = ch_of(b, l->from[j]);
        l->c2 = d->hd;
        return 0;
    }
    }
    return fail(c, row, "internal: module %s has no rule", m->name);
}

// ---- top level ----
static const char *const top_keys[] = {
    "nc", "scales", "scale", "depth_multiple", "width_multiple", "backbone", "head", NULL};

static int parse_scales(Ctx *c, ModelSpec *s, const yaml_node_t *scales, const yaml_node_t *pick) {
    if (scales->type != YAML_MAPPING_NODE)
        return fail(c, scales, "scales must be a mapping of name: [depth, width, max_channels]");
    const char *want = NULL;
    if (pick) {
        Val v = value_of(c, pick);
        if (v.kind != V_STR) return fail(c, pick, "scale must be a scale name");
        want = v.s;
    }
    for (yaml_node_pair_t *p = scales->data.mapping.pairs.start; p < scales->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        if (k->type != YAML_SCALAR_NODE) return fail(c, k, "scale names must be strings");
        const char *name = (const char *)k->data.scalar.value;
        if (v->type != YAML_SEQUENCE_NODE || seq_len(v) != 3)
            return fail(c, v, "scale '%s' must be [depth, width, max_channels]", name);
        if (want && strcmp(want, name) != 0) continue;
        double mc;
        if (get_number(c, item(c, v, 0), "depth", &s->depth) ||
            get_number(c, item(c, v, 1), "width", &s->width) ||
            get_number(c, item(c, v, 2), "max_channels", &mc))
            return -1;
        if (!(s->depth > 0 && s->depth <= MULTIPLIER_LIMIT) ||
            !(s->width > 0 && s->width <= MULTIPLIER_LIMIT) || !(mc >= 1))
            return fail(c, v, "scale '%s' needs 0 < depth <= 64, 0 < width <= 64, max_channels >= 1",
                        name);
        s->max_channels = mc >= INT_MAX ? INT_MAX : (int)mc;
        snprintf(s->scale, sizeof s->scale, "%s", name);
        return 0;
    }
    if (want) return fail(c, pick, "scale '%s' is not in scales", want);
    return fail(c, scales, "scales is empty");
}

static int parse_root(Ctx *c, ModelSpec *s, const yaml_node_t *root, int nc_override) {
    if (root->type != YAML_MAPPING_NODE)
        return fail(c, root, "expected a mapping with nc, backbone and head");
    const yaml_node_t *val[8] = {0};
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        const char *key = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
        int j = 0;
        while (top_keys[j] && strcmp(top_keys[j], key) != 0)
            j++;
        if (!top_keys[j])
            return fail(c, k,
                        "unknown top-level key '%s' (expected nc, scales, scale, depth_multiple, "
                        "width_multiple, backbone, head)",
                        key);
        if (val[j]) return fail(c, k, "duplicate key '%s'", key);
        val[j] = yaml_document_get_node(c->doc, p->value);
    }
    const yaml_node_t *nc = val[0], *scales = val[1], *scale = val[2], *dm = val[3], *wm = val[4],
                      *backbone = val[5], *head = val[6];
    if (!nc) return fail(c, root, "missing key 'nc' (the number of classes)");
    if (get_int(c, nc, "nc", 1, &s->nc)) return -1;
    if (nc_override > 0) s->nc = nc_override;
    c->nc = s->nc;

    s->depth = s->width = 1.0;
    s->max_channels = INT_MAX;
    if (dm && get_number(c, dm, "depth_multiple", &s->depth)) return -1;
    if (wm && get_number(c, wm, "width_multiple", &s->width)) return -1;
    if (dm && !(s->depth > 0 && s->depth <= MULTIPLIER_LIMIT))
        return fail(c, dm, "depth_multiple must be in (0, 64], got %g", s->depth);
    if (wm && !(s->width > 0 && s->width <= MULTIPLIER_LIMIT))
        return fail(c, wm, "width_multiple must be in (0, 64], got %g", s->width);
    if (scale && !scales) return fail(c, scale, "scale given without scales");
    if (scales && parse_scales(c, s, scales, scale)) return -1;

    if (!backbone) return fail(c, root, "missing key 'backbone'");
    if (!head) return fail(c, root, "missing key 'head'");
    if (backbone->type != YAML_SEQUENCE_NODE) return fail(c, backbone, "backbone must be a list");
    if (head->type != YAML_SEQUENCE_NODE) return fail(c, head, "head must be a list");
    int nb = seq_len(backbone), nh = seq_len(head);
    s->n_layers = nb + nh;
    if (s->n_layers == 0) return fail(c, head, "the model has no layers");
    s->layers = xcalloc((size_t)s->n_layers, sizeof(LayerSpec));
    Build b = {s, xcalloc((size_t)s->n_layers, sizeof(int))};
    int rc = 0;
    for (int i = 0; i < s->n_layers && rc == 0; i++)
        rc =
            parse_row(c, &b, i, i < nb ? item(c, backbone, i) : item(c, head, i - nb), s->n_layers);
    free(b.ch);
    return rc;
}

int model_spec_parse(ModelSpec *s, const char *name, const char *text, size_t len, int nc,
                     char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    Ctx c = {.file = s->name, .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc;
    CHECK(yaml_parser_initialize(&parser), "yaml_parser_initialize failed");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        int line = (int)parser.problem_mark.line + 1;
        const char *problem = parser.problem ? parser.problem : "parse error";
        if (parser.context)
            snprintf(err, errlen, "%s:%d: malformed yaml: %s (%s that starts on line %d)", s->name,
                     line, problem, parser.context, (int)parser.context_mark.line + 1);
        else
            snprintf(err, errlen, "%s:%d: malformed yaml: %s", s->name, line, problem);
        yaml_parser_delete(&parser);
        return -1;
    }
    c.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root)
        rc = fail(&c, NULL, "empty yaml: expected a mapping with nc, backbone and head");
    else
        rc = parse_root(&c, s, root, nc);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc) model_spec_free(s);
    return rc;
}

// The whole file, NUL-terminated, or NULL with the message in err.
static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        cap *= 2;
        buf = xrealloc(buf, cap);
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

int model_spec_load(ModelSpec *s, const char *model, int nc, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (strchr(model, '/') || access(model, F_OK) == 0) {
        size_t len;
        char *text = read_file(model, &len, err, errlen);
        if (!text) return -1;
        int rc = model_spec_parse(s, model, text, len, nc, err, errlen);
        free(text);
        return rc;
    }
    for (int i = 0; i < n_builtin_models; i++) {
        const char *bn = builtin_models[i].name;
        size_t n = strlen(model);
        if (strcmp(bn, model) == 0 || (strncmp(bn, model, n) == 0 && strcmp(bn + n, ".yaml") == 0))
            return model_spec_parse(s, bn, builtin_models[i].text, strlen(builtin_models[i].text),
                                    nc, err, errlen);
    }
    int off = snprintf(err, errlen, "%s: no such file, and not a built-in model (built-in:", model);
    for (int i = 0; i < n_builtin_models && off > 0 && (size_t)off < errlen; i++)
        off += snprintf(err + off, errlen - (size_t)off, " %s", builtin_models[i].name);
    if (off > 0 && (size_t)off < errlen) snprintf(err + off, errlen - (size_t)off, ")");
    return -1;
}

void model_spec_free(ModelSpec *s) {
    free(s->layers);
    s->layers = NULL;
    s->n_layers = 0;
}
