/* checkpoint.c -- writes and reads the checkpoint file (format in checkpoint.h).
 *
 * Writing streams each section twice through the same put_* function: once into a byte
 * counter (to learn the section's length for its header), once into the file. Reading makes
 * two passes over the file with the same read_* functions: the first validates everything
 * (magic, version, section tags and lengths, layout against the caller's model, checksum,
 * exact end) and copies nothing; only then the second copies the values into place. */
#include "trainer/checkpoint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kernels/base.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are little-endian; this build writes host order"
#endif

static const char MAGIC[8] = {'D', 'D', 'P', 'D', 'B', 'G', 'C', 'K'};
#define BYTE_ORDER_MARK 0x01020304u
#define TAG_LEN 8
#define MAX_NAME 1024

// ---- FNV-1a 64 over 8-byte words, independent of how the stream is split into calls ----
typedef struct Hash {
    uint64_t h, total;
    uint8_t pending[8];
    int n_pending;
} Hash;

static void hash_init(Hash *x) { *x = (Hash){.h = 0xcbf29ce484222325ull}; }

static void hash_word(Hash *x, uint64_t w) { x->h = (x->h ^ w) * 0x100000001b3ull; }

static void hash_bytes(Hash *x, const void *data, size_t n) {
    const uint8_t *p = data;
    x->total += n;
    while (n > 0 && x->n_pending > 0) { // finish a started word
        x->pending[x->n_pending++] = *p++;
        n--;
        if (x->n_pending == 8) {
            uint64_t w;
            memcpy(&w, x->pending, 8);
            hash_word(x, w);
            x->n_pending = 0;
        }
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        hash_word(x, w);
    }
    while (n-- > 0) x->pending[x->n_pending++] = *p++;
}

static uint64_t hash_value(const Hash *x) {
    Hash y = *x;
    for (int i = 0; i < y.n_pending; i++) hash_word(&y, y.pending[i]);
    hash_word(&y, y.total);
    return y.h;
}

// ---- writing ----
typedef struct Out {
    FILE *f;        // NULL: only count bytes
    uint64_t bytes; // written (or counted)
    Hash hash;
    bool failed;
} Out;

static void put(Out *o, const void *p, size_t n) {
    o->bytes += n;
    if (!o->f || n == 0) return;
    hash_bytes(&o->hash, p, n);
    if (fwrite(p, 1, n, o->f) != n) o->failed = true;
}
static void put_u8(Out *o, uint8_t v) { put(o, &v, 1); }
static void put_u32(Out *o, uint32_t v) { put(o, &v, 4); }
static void put_i64(Out *o, int64_t v) { put(o, &v, 8); }
static void put_u64(Out *o, uint64_t v) { put(o, &v, 8); }
static void put_f64(Out *o, double v) { put(o, &v, 8); }
static void put_floats(Out *o, const float *p, int64_t n) { put(o, p, sizeof(float) * (size_t)n); }
// A tensor's data, copied to the host through the backend (only when writing, not counting).
static void put_tensor(Out *o, const Tensor *t) {
    if (!o->f) {
        o->bytes += sizeof(float) * (size_t)t->n;
        return;
    }
    float *h = tensor_host_copy(t);
    put_floats(o, h, t->n);
    free(h);
}
static void put_str(Out *o, const char *s) {
    size_t n = strlen(s);
    CHECK(n <= MAX_NAME, "name too long for a checkpoint: %s", s);
    put_u32(o, (uint32_t)n);
    put(o, s, n);
}
static void put_shape(Out *o, int ndim, const int64_t *shape) {
    put_u32(o, (uint32_t)ndim);
    for (int d = 0; d < ndim; d++) put_i64(o, shape[d]);
}

static void put_header(Out *o, const Checkpoint *c) {
    put_str(o, c->model_name);
    put_i64(o, c->nc);
    const CheckpointProgress *p = &c->progress;
    put_i64(o, p->epoch);
    put_i64(o, p->iteration);
    put_i64(o, p->last_opt_step);
    put_i64(o, p->accumulate);
    put_i64(o, p->scheduler_last_epoch);
    put_f64(o, p->best_fitness);
}

static void put_layout(Out *o, const Checkpoint *c) {
    const Registry *r = c->model;
    put_u32(o, (uint32_t)r->n_params);
    for (int i = 0; i < r->n_params; i++) {
        put_str(o, r->names[i]);
        put_shape(o, r->params[i]->ndim, r->params[i]->shape);
    }
    put_u32(o, (uint32_t)r->n_buffers);
    for (int b = 0; b < r->n_buffers; b++) {
        const RegBuffer *rb = &r->buffers[b];
        put_str(o, rb->name);
        put_u8(o, rb->t == NULL); // 1: an int64 counter
        if (rb->t) put_shape(o, rb->t->ndim, rb->t->shape);
        else put_shape(o, 0, NULL);
    }
}

static void put_model(Out *o, const Checkpoint *c) {
    const Registry *r = c->model;
    for (int i = 0; i < r->n_params; i++) put_tensor(o, r->params[i]);
    for (int b = 0; b < r->n_buffers; b++) {
        const RegBuffer *rb = &r->buffers[b];
        if (rb->t) put_tensor(o, rb->t);
        else put_i64(o, *rb->count);
    }
}

static void put_optim(Out *o, const Checkpoint *c) {
    const Optimizer *op = c->opt;
    put_u8(o, (uint8_t)op->kind);
    put_u8(o, op->nesterov);
    put_f64(o, op->eps);
    for (int g = 0; g < OPTIM_N_GROUPS; g++) {
        const OptimGroup *gr = &op->groups[g];
        put_f64(o, gr->lr);
        put_f64(o, gr->initial_lr);
        put_f64(o, gr->weight_decay);
        put_f64(o, gr->momentum);
        put_f64(o, gr->beta2);
    }
    put_i64(o, op->numel);
    for (int i = 0; i < op->n_params; i++) {
        put_i64(o, op->step[i]);
        put_u8(o, op->has_state[i]);
    }
    if (op->kind == OPTIM_ADAMW) {
        put_floats(o, op->exp_avg, op->numel);
        put_floats(o, op->exp_avg_sq, op->numel);
    } else {
        put_floats(o, op->momentum_buffer, op->numel);
    }
}

static void put_ema(Out *o, const Checkpoint *c) {
    const Ema *e = c->ema;
    put_i64(o, e->updates);
    put_f64(o, e->decay);
    put_f64(o, e->tau);
    put_i64(o, e->n_param_floats);
    put_i64(o, e->n_buffer_floats);
    put_floats(o, e->params, e->n_param_floats);
    if (e->n_buffer_floats) put_floats(o, e->buffers, e->n_buffer_floats);
    for (int b = 0; b < e->n_buffers; b++) put_i64(o, e->counters[b]);
}

static void put_rng(Out *o, const Checkpoint *c) {
    put_u32(o, (uint32_t)c->n_rngs);
    for (int i = 0; i < c->n_rngs; i++)
        for (int k = 0; k < 4; k++) put_u64(o, c->rngs[i].s[k]);
}

typedef void (*PutFn)(Out *, const Checkpoint *);

static void put_section(Out *o, const char *tag, PutFn fn, const Checkpoint *c) {
    Out size = {0};
    fn(&size, c);
    char t[TAG_LEN] = {0};
    memcpy(t, tag, strlen(tag));
    put(o, t, TAG_LEN);
    put_u64(o, size.bytes);
    fn(o, c);
}

static void check_consistent(const Checkpoint *c) {
    CHECK(c->model && c->model_name, "a checkpoint needs a model and its name");
    CHECK(!c->opt || (c->opt->n_params == c->model->n_params && c->opt->params == c->model->params),
          "the optimizer is not over the model's parameters");
    CHECK(!c->ema || (c->ema->n_params == c->model->n_params && c->ema->n_buffers == c->model->n_buffers),
          "the EMA was made from another model");
    CHECK(c->n_rngs >= 0 && (c->n_rngs == 0 || c->rngs), "n_rngs %d", c->n_rngs);
}

int checkpoint_save(const char *path, const Checkpoint *c, char *err, size_t errlen) {
    check_consistent(c);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return -1;
    }
    Out o = {.f = fopen(tmp, "wb")};
    if (!o.f) {
        snprintf(err, errlen, "%s: cannot write %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    hash_init(&o.hash);
    put(&o, MAGIC, sizeof MAGIC);
    put_u32(&o, CHECKPOINT_VERSION);
    put_u32(&o, BYTE_ORDER_MARK);
    put_section(&o, "HEADER", put_header, c);
    put_section(&o, "LAYOUT", put_layout, c);
    put_section(&o, "MODEL", put_model, c);
    if (c->opt) put_section(&o, "OPTIM", put_optim, c);
    if (c->ema) put_section(&o, "EMA", put_ema, c);
    put_section(&o, "RNG", put_rng, c);
    char end[TAG_LEN] = "END";
    put(&o, end, TAG_LEN);
    put_u64(&o, 8);
    put_u64(&o, hash_value(&o.hash)); // everything before the checksum itself
    bool ok = !o.failed && fflush(o.f) == 0 && fsync(fileno(o.f)) == 0;
    int saved_errno = errno;
    if (fclose(o.f) != 0) ok = false;
    if (ok && rename(tmp, path) == 0) return 0;
    if (ok) saved_errno = errno;
    remove(tmp);
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(saved_errno ? saved_errno : EIO));
    return -1;
}

// ---- reading ----
typedef struct In {
    FILE *f;
    const char *path;
    uint64_t file_left;    // bytes not yet read from the file
    uint64_t section_left; // bytes of the current section's payload not yet read
    const char *section;   // its tag
    Hash hash;
    bool apply;            // second pass: copy values into the Checkpoint
    char *err;
    size_t errlen;
    bool failed;
} In;

static bool fail(In *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(In *in, const char *fmt, ...) {
    if (in->failed) return false; // keep the first message
    in->failed = true;
    int n = snprintf(in->err, in->errlen, "%s: ", in->path);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < in->errlen) vsnprintf(in->err + n, in->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

// Reads n bytes into dst (NULL: read and discard), within the current section.
static bool get(In *in, void *dst, size_t n) {
    if (in->failed) return false;
    if (n > in->section_left)
        return fail(in, "section %s is %llu bytes shorter than its contents (corrupt)", in->section,
                    (unsigned long long)(n - in->section_left));
    uint8_t scratch[1 << 16];
    size_t done = 0;
    while (done < n) {
        size_t chunk = dst ? n - done : MIN(n - done, sizeof scratch);
        uint8_t *p = dst ? (uint8_t *)dst + done : scratch;
        if (fread(p, 1, chunk, in->f) != chunk) return fail(in, "read error in section %s", in->section);
        hash_bytes(&in->hash, p, chunk);
        done += chunk;
    }
    in->section_left -= n;
    in->file_left -= n;
    return true;
}

static uint64_t get_u64(In *in) {
    uint64_t v = 0;
    get(in, &v, 8);
    return v;
}
static int64_t get_i64(In *in) { return (int64_t)get_u64(in); }
static uint32_t get_u32(In *in) {
    uint32_t v = 0;
    get(in, &v, 4);
    return v;
}
static uint8_t get_u8(In *in) {
    uint8_t v = 0;
    get(in, &v, 1);
    return v;
}
static double get_f64(In *in) {
    double v = 0;
    get(in, &v, 8);
    return v;
}
// A value that the second pass copies to *dst (the first pass only reads it).
static void get_f64_to(In *in, double *dst) {
    double v = get_f64(in);
    if (in->apply && !in->failed) *dst = v;
}
static void get_i64_to(In *in, int64_t *dst) {
    int64_t v = get_i64(in);
    if (in->apply && !in->failed) *dst = v;
}
static void get_floats_to(In *in, float *dst, int64_t n) {
    get(in, in->apply ? dst : NULL, sizeof(float) * (size_t)n);
}
// A tensor's data: read on the host and, in the second pass, copied to its device.
static void get_tensor_to(In *in, Tensor *t) {
    if (!in->apply) {
        get(in, NULL, sizeof(float) * (size_t)t->n);
        return;
    }
    float *h = xmalloc(sizeof(float) * (size_t)MAX(t->n, 1));
    get(in, h, sizeof(float) * (size_t)t->n);
    if (!in->failed) tensor_write(t, h);
    free(h);
}
static bool get_str(In *in, char *buf) { // buf: MAX_NAME + 1 bytes
    uint32_t n = get_u32(in);
    if (in->failed) return false;
    if (n > MAX_NAME) return fail(in, "a name of %u bytes in section %s (corrupt)", n, in->section);
    get(in, buf, n);
    buf[n] = 0;
    return !in->failed;
}
// Reads a shape; "d0xd1..." into text.
static bool get_shape(In *in, int *ndim, int64_t *shape, char *text, size_t len) {
    uint32_t nd = get_u32(in);
    if (in->failed) return false;
    if (nd > TENSOR_MAX_DIMS) return fail(in, "a %u-d shape in section %s (corrupt)", nd, in->section);
    *ndim = (int)nd;
    text[0] = 0;
    for (uint32_t d = 0; d < nd; d++) {
        shape[d] = get_i64(in);
        size_t at = strlen(text);
        snprintf(text + at, len - at, "%s%lld", d ? "x" : "", (long long)shape[d]);
    }
    return !in->failed;
}

static void shape_text(int ndim, const int64_t *shape, char *text, size_t len) {
    text[0] = 0;
    for (int d = 0; d < ndim; d++) {
        size_t at = strlen(text);
        snprintf(text + at, len - at, "%s%lld", d ? "x" : "", (long long)shape[d]);
    }
}

static void read_header(In *in, Checkpoint *c) {
    char name[MAX_NAME + 1];
    if (!get_str(in, name)) return;
    int64_t nc = get_i64(in);
    if (in->failed) return;
    if (strcmp(name, c->model_name) != 0 || nc != c->nc) {
        fail(in, "checkpoint of model %s nc %lld, this run is %s nc %d", name, (long long)nc,
             c->model_name, c->nc);
        return;
    }
    CheckpointProgress *p = &c->progress;
    get_i64_to(in, &p->epoch);
    get_i64_to(in, &p->iteration);
    get_i64_to(in, &p->last_opt_step);
    get_i64_to(in, &p->accumulate);
    get_i64_to(in, &p->scheduler_last_epoch);
    get_f64_to(in, &p->best_fitness);
}

static void read_layout(In *in, Checkpoint *c) {
    const Registry *r = c->model;
    char name[MAX_NAME + 1], got[128], want[128];
    int64_t shape[TENSOR_MAX_DIMS];
    int ndim;
    uint32_t n = get_u32(in);
    if (in->failed) return;
    if (n != (uint32_t)r->n_params) {
        fail(in, "checkpoint of another model: %u parameter tensors, this model has %d", n, r->n_params);
        return;
    }
    for (int i = 0; i < r->n_params; i++) {
        if (!get_str(in, name) || !get_shape(in, &ndim, shape, got, sizeof got)) return;
        const Tensor *p = r->params[i];
        shape_text(p->ndim, p->shape, want, sizeof want);
        if (strcmp(name, r->names[i]) != 0 || strcmp(got, want) != 0 || ndim != p->ndim) {
            fail(in, "checkpoint of another model: parameter %d is %s %s there, %s %s here", i, name,
                 got, r->names[i], want);
            return;
        }
    }
    n = get_u32(in);
    if (in->failed) return;
    if (n != (uint32_t)r->n_buffers) {
        fail(in, "checkpoint of another model: %u buffers, this model has %d", n, r->n_buffers);
        return;
    }
    for (int b = 0; b < r->n_buffers; b++) {
        const RegBuffer *rb = &r->buffers[b];
        if (!get_str(in, name)) return;
        bool is_counter = get_u8(in) != 0;
        if (!get_shape(in, &ndim, shape, got, sizeof got)) return;
        if (rb->t) shape_text(rb->t->ndim, rb->t->shape, want, sizeof want);
        else want[0] = 0;
        if (strcmp(name, rb->name) != 0 || is_counter != (rb->t == NULL) || strcmp(got, want) != 0) {
            fail(in, "checkpoint of another model: buffer %d is %s %s there, %s %s here", b, name,
                 is_counter ? "int64" : got, rb->name, rb->t ? want : "int64");
            return;
        }
    }
}

static void read_model(In *in, Checkpoint *c) {
    Registry *r = c->model;
    for (int i = 0; i < r->n_params; i++) get_tensor_to(in, r->params[i]);
    for (int b = 0; b < r->n_buffers; b++) {
        RegBuffer *rb = &r->buffers[b];
        if (rb->t) get_tensor_to(in, rb->t);
        else get_i64_to(in, rb->count);
    }
}

static void read_optim(In *in, Checkpoint *c) {
    Optimizer *o = c->opt;
    uint8_t kind = get_u8(in);
    if (in->failed) return;
    if (kind != (uint8_t)o->kind) {
        fail(in, "optimizer %s in the checkpoint, %s in this run",
             kind == OPTIM_SGD ? "SGD" : kind == OPTIM_ADAMW ? "AdamW" : "unknown", optim_kind_name(o->kind));
        return;
    }
    uint8_t nesterov = get_u8(in);
    if (in->apply) o->nesterov = nesterov != 0;
    get_f64_to(in, &o->eps);
    for (int g = 0; g < OPTIM_N_GROUPS; g++) {
        OptimGroup *gr = &o->groups[g];
        get_f64_to(in, &gr->lr);
        get_f64_to(in, &gr->initial_lr);
        get_f64_to(in, &gr->weight_decay);
        get_f64_to(in, &gr->momentum);
        get_f64_to(in, &gr->beta2);
    }
    int64_t numel = get_i64(in);
    if (!in->failed && numel != o->numel) {
        fail(in, "optimizer state for %lld elements, this model has %lld", (long long)numel, (long long)o->numel);
        return;
    }
    for (int i = 0; i < o->n_params; i++) {
        get_i64_to(in, &o->step[i]);
        uint8_t has = get_u8(in);
        if (in->apply) o->has_state[i] = has;
    }
    if (o->kind == OPTIM_ADAMW) {
        get_floats_to(in, o->exp_avg, o->numel);
        get_floats_to(in, o->exp_avg_sq, o->numel);
    } else {
        get_floats_to(in, o->momentum_buffer, o->numel);
    }
}

static void read_ema(In *in, Checkpoint *c) {
    Ema *e = c->ema;
    get_i64_to(in, &e->updates);
    get_f64_to(in, &e->decay);
    get_f64_to(in, &e->tau);
    int64_t np = get_i64(in), nb = get_i64(in);
    if (!in->failed && (np != e->n_param_floats || nb != e->n_buffer_floats)) {
        fail(in, "EMA of %lld + %lld floats, this model has %lld + %lld", (long long)np, (long long)nb,
             (long long)e->n_param_floats, (long long)e->n_buffer_floats);
        return;
    }
    get_floats_to(in, e->params, e->n_param_floats);
    if (e->n_buffer_floats) get_floats_to(in, e->buffers, e->n_buffer_floats);
    for (int b = 0; b < e->n_buffers; b++) get_i64_to(in, &e->counters[b]);
}

static void read_rng(In *in, Checkpoint *c) {
    uint32_t n = get_u32(in);
    if (in->failed) return;
    if (n != (uint32_t)c->n_rngs) {
        fail(in, "%u generator states in the checkpoint, this run has %d", n, c->n_rngs);
        return;
    }
    for (int i = 0; i < c->n_rngs; i++)
        for (int k = 0; k < 4; k++) {
            uint64_t v = get_u64(in);
            if (in->apply) c->rngs[i].s[k] = v;
        }
}

typedef void (*ReadFn)(In *, Checkpoint *);

// Reads the next section's tag and length (the bytes count against the file, not a section)
// and runs fn over exactly that many bytes.
static void read_section(In *in, const char *want, ReadFn fn, Checkpoint *c) {
    if (in->failed) return;
    char tag[TAG_LEN + 1] = {0};
    uint64_t len = 0;
    in->section = "header";
    in->section_left = TAG_LEN + 8;
    if (in->file_left < TAG_LEN + 8) {
        fail(in, "truncated: the file ends where section %s should begin", want);
        return;
    }
    get(in, tag, TAG_LEN);
    len = get_u64(in);
    if (in->failed) return;
    if (strncmp(tag, want, TAG_LEN) != 0) {
        bool extra = strcmp(tag, "OPTIM") == 0 || strcmp(tag, "EMA") == 0;
        bool missing = strcmp(want, "OPTIM") == 0 || strcmp(want, "EMA") == 0;
        if (extra) fail(in, "the checkpoint has %s state, this run has none", tag);
        else if (missing) fail(in, "the checkpoint has no %s state, this run needs it", want);
        else fail(in, "section '%.8s' where %s was expected (corrupt)", tag, want);
        return;
    }
    if (len > in->file_left) {
        fail(in, "truncated: section %s needs %llu bytes, %llu left", want, (unsigned long long)len,
             (unsigned long long)in->file_left);
        return;
    }
    in->section = want;
    in->section_left = len;
    fn(in, c);
    if (!in->failed && in->section_left != 0)
        fail(in, "section %s has %llu bytes more than its contents (corrupt)", want,
             (unsigned long long)in->section_left);
}

static int read_pass(In *in, Checkpoint *c) {
    if (fseek(in->f, 0, SEEK_END) != 0) return fail(in, "cannot seek: %s", strerror(errno)), -1;
    long size = ftell(in->f);
    rewind(in->f);
    if (size < 0) return fail(in, "cannot tell the size: %s", strerror(errno)), -1;
    in->file_left = (uint64_t)size;
    hash_init(&in->hash);
    in->section = "file header";
    char magic[8];
    if (in->file_left < 16) {
        if (in->file_left >= 8 && fread(magic, 1, 8, in->f) == 8 && memcmp(magic, MAGIC, 8) != 0)
            return fail(in, "not a ddpdbg checkpoint (bad magic)"), -1;
        return fail(in, "truncated: %llu bytes, not even a file header", (unsigned long long)in->file_left), -1;
    }
    in->section_left = 16;
    get(in, magic, 8);
    uint32_t version = get_u32(in), mark = get_u32(in);
    if (in->failed) return -1;
    if (memcmp(magic, MAGIC, 8) != 0) return fail(in, "not a ddpdbg checkpoint (bad magic)"), -1;
    if (version != CHECKPOINT_VERSION)
        return fail(in, "checkpoint version %u, this build reads version %d", version, CHECKPOINT_VERSION), -1;
    if (mark != BYTE_ORDER_MARK) return fail(in, "written with another byte order (mark 0x%08x)", mark), -1;
    read_section(in, "HEADER", read_header, c);
    read_section(in, "LAYOUT", read_layout, c);
    read_section(in, "MODEL", read_model, c);
    if (c->opt) read_section(in, "OPTIM", read_optim, c);
    if (c->ema) read_section(in, "EMA", read_ema, c);
    read_section(in, "RNG", read_rng, c);
    if (in->failed) return -1;
    // END: tag, length 8, then the checksum of every byte before it
    char tag[TAG_LEN + 1] = {0};
    in->section = "END";
    in->section_left = TAG_LEN + 16;
    if (in->file_left < TAG_LEN + 16) return fail(in, "truncated: the END section is missing"), -1;
    get(in, tag, TAG_LEN);
    uint64_t len = get_u64(in);
    uint64_t want = hash_value(&in->hash);
    uint64_t sum = get_u64(in);
    if (in->failed) return -1;
    if (strcmp(tag, "END") != 0 || len != 8) {
        bool extra = strcmp(tag, "OPTIM") == 0 || strcmp(tag, "EMA") == 0;
        if (extra) return fail(in, "the checkpoint has %s state, this run has none", tag), -1;
        return fail(in, "section '%.8s' where END was expected (corrupt)", tag), -1;
    }
    if (sum != want) return fail(in, "checksum mismatch: the file is corrupt"), -1;
    if (in->file_left != 0)
        return fail(in, "%llu trailing bytes after the END section", (unsigned long long)in->file_left), -1;
    return 0;
}

int checkpoint_load(const char *path, Checkpoint *c, char *err, size_t errlen) {
    check_consistent(c);
    In in = {.path = path, .err = err, .errlen = errlen};
    in.f = fopen(path, "rb");
    if (!in.f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = read_pass(&in, c); // validate, copy nothing
    if (rc == 0) {
        in.apply = true;
        rc = read_pass(&in, c);
        if (rc != 0) snprintf(err, errlen, "%s: changed while being read", path);
    }
    fclose(in.f);
    return rc;
}
