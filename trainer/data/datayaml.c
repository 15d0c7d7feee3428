/* datayaml.c -- the Ultralytics data yaml (path, train, val, names, nc) and the image list of
 * a split, as check_det_dataset and img2label_paths build them (dataset.h). libyaml's
 * document API gives every node its line for the error messages. */
#include <dirent.h>
#include <errno.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/data/dataset.h"

typedef struct Ctx {
    const char *file;
    yaml_document_t *doc;
    char *err;
    size_t errlen;
} Ctx;

static int fail(Ctx *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(Ctx *c, const yaml_node_t *n, const char *fmt, ...) {
    int off = n ? snprintf(c->err, c->errlen, "%s:%d: ", c->file, (int)n->start_mark.line + 1)
                : snprintf(c->err, c->errlen, "%s: ", c->file);
    if (off >= 0 && (size_t)off < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + off, c->errlen - (size_t)off, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const char *scalar(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

// rel against base: absolute paths and a "." base are kept as they are, "." and "./" dropped.
static char *path_join(const char *base, const char *rel) {
    while (rel[0] == '.' && rel[1] == '/') rel += 2;
    if (rel[0] == '/' || !base[0] || strcmp(base, ".") == 0) return xstrdup(rel);
    if (!rel[0] || strcmp(rel, ".") == 0) return xstrdup(base);
    size_t n = strlen(base) + strlen(rel) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s%s%s", base, base[strlen(base) - 1] == '/' ? "" : "/", rel);
    return p;
}

static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return xstrdup(".");
    if (slash == path) return xstrdup("/");
    char *d = xstrdup(path);
    d[slash - path] = '\0';
    return d;
}

// A split's entries: one scalar or a list of scalars, each resolved against root.
static int read_split(Ctx *c, const yaml_node_t *v, const char *key, const char *root,
                      char ***out, int *n) {
    const char *s = scalar(v);
    if (s) {
        *out = xmalloc(sizeof(char *));
        (*out)[0] = path_join(root, s);
        *n = 1;
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top == v->data.sequence.items.start)
        return fail(c, v, "%s: expected a folder, a .txt list, or a list of those", key);
    int count = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    *out = xcalloc((size_t)count, sizeof(char *));
    *n = count;
    for (int i = 0; i < count; i++) {
        const yaml_node_t *item = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        if (!scalar(item)) return fail(c, item, "%s: expected a path", key);
        (*out)[i] = path_join(root, scalar(item));
    }
    return 0;
}

static int read_names(Ctx *c, const yaml_node_t *v, DataYaml *y) {
    if (v->type == YAML_SEQUENCE_NODE) {
        int count = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (count == 0) return fail(c, v, "names: expected at least one class name");
        y->names = xcalloc((size_t)count, sizeof(char *));
        y->nc = count;
        for (int i = 0; i < count; i++) {
            const yaml_node_t *item =
                yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
            if (!scalar(item)) return fail(c, item, "names: expected a class name");
            y->names[i] = xstrdup(scalar(item));
        }
        return 0;
    }
    if (v->type != YAML_MAPPING_NODE || v->data.mapping.pairs.top == v->data.mapping.pairs.start)
        return fail(c, v, "names: expected a list or a mapping of class names");
    int count = (int)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    y->names = xcalloc((size_t)count, sizeof(char *));
    y->nc = count;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        const yaml_node_t *name = yaml_document_get_node(c->doc, p->value);
        const char *ks = scalar(k);
        char *end = NULL;
        long idx = ks ? strtol(ks, &end, 10) : -1;
        if (!ks || !*ks || *end || idx < 0 || idx >= count || y->names[idx])
            return fail(c, k, "names: expected the class indices 0..%d as keys, got '%s'",
                        count - 1, ks ? ks : "(not a scalar)");
        if (!scalar(name)) return fail(c, name, "names: expected a class name");
        y->names[idx] = xstrdup(scalar(name));
    }
    return 0;
}

static int read_root(Ctx *c, const yaml_node_t *root, const char *yaml_path, DataYaml *y) {
    if (!root || root->type != YAML_MAPPING_NODE)
        return fail(c, root, "expected a mapping with train, val and names");
    const yaml_node_t *path = NULL, *train = NULL, *val = NULL, *names = NULL, *nc = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        const char *k = scalar(yaml_document_get_node(c->doc, p->key));
        const yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        if (!k) continue;
        if (!strcmp(k, "path")) path = v;
        if (!strcmp(k, "train")) train = v;
        if (!strcmp(k, "val")) val = v;
        if (!strcmp(k, "names")) names = v;
        if (!strcmp(k, "nc")) nc = v;
    }
    char *folder = folder_of(yaml_path);
    if (path && !scalar(path)) {
        free(folder);
        return fail(c, path, "path: expected the dataset root folder");
    }
    y->root = path_join(folder, path ? scalar(path) : ".");
    free(folder);
    if (!train) return fail(c, NULL, "missing 'train' (a folder, a .txt list, or a list of those)");
    if (!val) return fail(c, NULL, "missing 'val' (a folder, a .txt list, or a list of those)");
    if (read_split(c, train, "train", y->root, &y->train, &y->n_train) ||
        read_split(c, val, "val", y->root, &y->val, &y->n_val))
        return -1;
    long nc_value = 0;
    if (nc) {
        char *end = NULL;
        const char *s = scalar(nc);
        nc_value = s ? strtol(s, &end, 10) : 0;
        if (!s || !*s || *end || nc_value < 1 || nc_value > 100000)
            return fail(c, nc, "nc: expected a positive integer, got '%s'", s ? s : "(not a scalar)");
    }
    if (names) {
        if (read_names(c, names, y)) return -1;
        if (nc && nc_value != y->nc)
            return fail(c, nc, "nc is %ld but names has %d entries", nc_value, y->nc);
    } else if (nc) {
        y->nc = (int)nc_value;
        y->names = xcalloc((size_t)y->nc, sizeof(char *));
        for (int i = 0; i < y->nc; i++) {
            char name[32];
            snprintf(name, sizeof name, "class%d", i);
            y->names[i] = xstrdup(name);
        }
    } else
        return fail(c, NULL, "missing 'names' (a list or a mapping of class names)");
    return 0;
}

void data_yaml_free(DataYaml *y) {
    for (int i = 0; i < y->n_train; i++) free(y->train[i]);
    for (int i = 0; i < y->n_val; i++) free(y->val[i]);
    for (int i = 0; i < y->nc; i++) free(y->names[i]);
    free(y->train), free(y->val), free(y->names), free(y->root);
    memset(y, 0, sizeof *y);
}

int data_yaml_load(DataYaml *y, const char *yaml_path, char *err, size_t errlen) {
    memset(y, 0, sizeof *y);
    FILE *f = fopen(yaml_path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", yaml_path, strerror(errno));
        return -1;
    }
    Ctx c = {.file = yaml_path, .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc;
    CHECK(yaml_parser_initialize(&parser), "yaml_parser_initialize failed");
    yaml_parser_set_input_file(&parser, f);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%d: malformed yaml: %s", yaml_path,
                 (int)parser.problem_mark.line + 1, parser.problem ? parser.problem : "parse error");
        rc = -1;
    } else {
        c.doc = &doc;
        rc = read_root(&c, yaml_document_get_root_node(&doc), yaml_path, y);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    fclose(f);
    if (rc) data_yaml_free(y);
    return rc;
}

// ---- the image list of a split ----
typedef struct PathList {
    char **p;
    int n, cap;
} PathList;

static void list_push(PathList *l, char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->p = xrealloc(l->p, sizeof(char *) * (size_t)l->cap);
    }
    l->p[l->n++] = path;
}

// 1: an image we decode, 0: not an image, -1: an image format we cannot decode.
static int image_kind(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return 0;
    static const char *ours[] = {"png", "jpg", "jpeg"};
    static const char *others[] = {"bmp", "dng", "mpo", "tif", "tiff", "webp", "pfm", "heic"};
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
        if (!strcasecmp(dot + 1, ours[i])) return 1;
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        if (!strcasecmp(dot + 1, others[i])) return -1;
    return 0;
}

static int add_image(PathList *l, char *path, char *err, size_t errlen) {
    int kind = image_kind(path);
    if (kind < 0) {
        snprintf(err, errlen, "%s: unsupported image format (expected .png, .jpg or .jpeg)", path);
        free(path);
        return -1;
    }
    if (kind == 0) free(path);
    else list_push(l, path);
    return 0;
}

static int walk_folder(PathList *l, const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot open folder: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *p = path_join(dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = walk_folder(l, p, err, errlen);
            free(p);
        } else
            rc = add_image(l, p, err, errlen);
    }
    closedir(d);
    return rc;
}

static int read_list_file(PathList *l, const char *list, char *err, size_t errlen) {
    FILE *f = fopen(list, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", list, strerror(errno));
        return -1;
    }
    char *folder = folder_of(list), *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (!rc && getline(&line, &cap, f) >= 0) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0]) rc = add_image(l, path_join(folder, line), err, errlen);
    }
    free(line);
    free(folder);
    fclose(f);
    return rc;
}

static int compare_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dataset_load_yaml(Dataset *ds, const char *yaml_path, const char *split, char *err,
                      size_t errlen) {
    memset(ds, 0, sizeof *ds);
    CHECK(!strcmp(split, "train") || !strcmp(split, "val"), "split '%s'", split);
    DataYaml y;
    if (data_yaml_load(&y, yaml_path, err, errlen)) return -1;
    char **entries = split[0] == 't' ? y.train : y.val;
    int n_entries = split[0] == 't' ? y.n_train : y.n_val;
    PathList l = {0};
    int rc = 0;
    for (int i = 0; i < n_entries && !rc; i++) {
        struct stat st;
        if (stat(entries[i], &st) != 0) {
            snprintf(err, errlen, "%s: %s: '%s' does not exist", yaml_path, split, entries[i]);
            rc = -1;
        } else if (S_ISDIR(st.st_mode))
            rc = walk_folder(&l, entries[i], err, errlen);
        else
            rc = read_list_file(&l, entries[i], err, errlen);
    }
    if (!rc && l.n == 0) {
        snprintf(err, errlen, "%s: %s: no .png, .jpg or .jpeg images in '%s'", yaml_path, split,
                 entries[0]);
        rc = -1;
    }
    if (rc) {
        for (int i = 0; i < l.n; i++) free(l.p[i]);
        free(l.p);
        data_yaml_free(&y);
        return -1;
    }
    qsort(l.p, (size_t)l.n, sizeof(char *), compare_paths);
    ds->n_images = l.n;
    ds->image_paths = l.p;
    ds->nc = y.nc;
    ds->names = y.names;
    y.names = NULL;
    y.nc = 0;
    data_yaml_free(&y);
    ds->box_start = xcalloc((size_t)l.n + 1, sizeof(int));
    int cap = 0;
    for (int i = 0; i < l.n; i++) {
        char label[4096];
        label_path_for_image(l.p[i], label, sizeof label);
        Box *boxes;
        int n;
        if (labels_read(label, ds->nc, &boxes, &n, err, errlen)) {
            dataset_free(ds);
            return -1;
        }
        int start = ds->box_start[i];
        if (start + n > cap) {
            cap = MAX(2 * cap, start + n);
            ds->boxes = xrealloc(ds->boxes, sizeof(Box) * (size_t)cap);
        }
        if (n) memcpy(ds->boxes + start, boxes, sizeof(Box) * (size_t)n);
        free(boxes);
        ds->box_start[i + 1] = start + n;
    }
    return 0;
}
