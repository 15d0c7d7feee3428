/* tensor.c -- Arena (chunked bump allocator) and tensor constructors. */
#include "trainer/tensor.h"

#include "kernels/base.h"

struct ArenaChunk {
    ArenaChunk *next;
    char *mem;
    size_t size, off;
};

// ---- given-back data blocks, reused until the next reset ----
// The free lists live on the host (the blocks are backend memory, which host code may not
// touch). Two kinds:
// - small blocks (under POOL_FIT_MIN): per size in bytes, a stack of block pointers; a request
//   takes a block of its own size only;
// - large blocks: one list sorted by address, neighbours merged when a block comes back; a
//   request takes the smallest block that holds it, from its start, and the rest stays free.
//   Carving and merging let the forward reuse what tape_drop released in earlier, larger
//   layers, and backward reuse it again for gradients of other sizes.
// arena_reset empties both (their blocks are the arena's) but keeps their storage.
#define POOL_SLOTS 1024 // open addressing; distinct small sizes of one model are far fewer
#define POOL_FIT_MIN ((size_t)64 << 10)

typedef struct PoolStack {
    void **blocks;
    int64_t n, cap;
} PoolStack;

typedef struct FreeBlock {
    char *at;
    size_t nbytes;
} FreeBlock;

struct ArenaPool {
    size_t nbytes[POOL_SLOTS]; // 0 = empty slot
    PoolStack small[POOL_SLOTS];
    FreeBlock *large;          // sorted by address, none adjacent to the next
    int64_t n_large, cap_large;
};

static size_t rounded(size_t nbytes) { return (MAX(nbytes, (size_t)1) + 63) & ~(size_t)63; }

static int64_t pool_slot(ArenaPool *p, size_t nbytes) {
    uint64_t h = (uint64_t)nbytes * 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < POOL_SLOTS; i++) {
        int64_t s = (int64_t)((h + (uint64_t)i) % POOL_SLOTS);
        if (p->nbytes[s] == nbytes || p->nbytes[s] == 0) return s;
    }
    return -1; // full: the block is not reused
}

static void *take_small(ArenaPool *p, size_t nbytes) {
    int64_t s = pool_slot(p, nbytes);
    if (s < 0 || p->nbytes[s] != nbytes || !p->small[s].n) return NULL;
    return p->small[s].blocks[--p->small[s].n];
}

static void give_small(ArenaPool *p, void *block, size_t nbytes) {
    int64_t s = pool_slot(p, nbytes);
    if (s < 0) return;
    p->nbytes[s] = nbytes;
    PoolStack *st = &p->small[s];
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 8;
        st->blocks = xrealloc(st->blocks, sizeof(void *) * (size_t)st->cap);
    }
    st->blocks[st->n++] = block;
}

static void *take_large(ArenaPool *p, size_t nbytes) {
    int64_t best = -1;
    for (int64_t i = 0; i < p->n_large; i++)
        if (p->large[i].nbytes >= nbytes && (best < 0 || p->large[i].nbytes < p->large[best].nbytes))
            best = i;
    if (best < 0) return NULL;
    FreeBlock *b = &p->large[best];
    char *at = b->at;
    b->at += nbytes;
    b->nbytes -= nbytes;
    if (!b->nbytes) {
        memmove(b, b + 1, sizeof *b * (size_t)(p->n_large - best - 1));
        p->n_large--;
    }
    return at;
}

static void give_large(ArenaPool *p, char *at, size_t nbytes) {
    int64_t lo = 0, hi = p->n_large; // the first block above `at`
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (p->large[mid].at < at) lo = mid + 1;
        else hi = mid;
    }
    bool joins_prev = lo > 0 && p->large[lo - 1].at + p->large[lo - 1].nbytes == at;
    bool joins_next = lo < p->n_large && at + nbytes == p->large[lo].at;
    if (joins_prev && joins_next) {
        p->large[lo - 1].nbytes += nbytes + p->large[lo].nbytes;
        memmove(&p->large[lo], &p->large[lo + 1], sizeof(FreeBlock) * (size_t)(p->n_large - lo - 1));
        p->n_large--;
    } else if (joins_prev) {
        p->large[lo - 1].nbytes += nbytes;
    } else if (joins_next) {
        p->large[lo].at = at;
        p->large[lo].nbytes += nbytes;
    } else {
        if (p->n_large == p->cap_large) {
            p->cap_large = p->cap_large ? 2 * p->cap_large : 64;
            p->large = xrealloc(p->large, sizeof(FreeBlock) * (size_t)p->cap_large);
        }
        memmove(&p->large[lo + 1], &p->large[lo], sizeof(FreeBlock) * (size_t)(p->n_large - lo));
        p->large[lo] = (FreeBlock){at, nbytes};
        p->n_large++;
    }
}

static void *pool_take(ArenaPool *p, size_t nbytes) {
    if (!p) return NULL;
    return nbytes < POOL_FIT_MIN ? take_small(p, nbytes) : take_large(p, nbytes);
}

void arena_give_data(Arena *a, void *block, size_t nbytes) {
    if (!block) return;
    if (!a->pool) a->pool = xcalloc(1, sizeof(ArenaPool));
    size_t size = rounded(nbytes);
    if (size < POOL_FIT_MIN) give_small(a->pool, block, size);
    else give_large(a->pool, block, size);
}

// The host half's allocator: plain aligned host memory whatever the device.
static void *host_alloc(size_t nbytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (nbytes + 63) & ~(size_t)63) != 0)
        DIE(1, "out of memory allocating %zu host bytes", nbytes);
    return p;
}

typedef struct HalfAllocator {
    void *(*alloc)(size_t);
    void (*free)(void *);
} HalfAllocator;

static HalfAllocator data_allocator(const Arena *a) { return (HalfAllocator){a->be->alloc, a->be->free}; }
static HalfAllocator host_allocator(void) { return (HalfAllocator){host_alloc, free}; }

void arena_init(Arena *a, Device dev, size_t chunk_bytes) {
    memset(a, 0, sizeof *a);
    a->be = backend_need(dev);
    a->chunk_bytes = chunk_bytes ? chunk_bytes : ((size_t)64 << 20);
}

static void free_chunks(ArenaHalf *h, HalfAllocator al) {
    for (ArenaChunk *c = h->chunks, *next; c; c = next) {
        next = c->next;
        al.free(c->mem);
        free(c);
    }
    h->chunks = NULL;
    h->reserved = 0;
}

void arena_free(Arena *a) {
    if (!a->be) return;
    if (a->pool) {
        for (int s = 0; s < POOL_SLOTS; s++) free(a->pool->small[s].blocks);
        free(a->pool->large);
    }
    free(a->pool);
    a->pool = NULL;
    free_chunks(&a->data, data_allocator(a));
    free_chunks(&a->host, host_allocator());
    a->data.used = a->host.used = 0;
}

static void reset_half(ArenaHalf *h, HalfAllocator al) {
    // More than one chunk means the last step outgrew the block: replace them by one block of
    // the peak size plus an eighth, so the next step allocates nothing new even when its shapes
    // grow a little with the number of boxes (denoising queries, matcher and loss tensors).
    // Without the margin a step that grew by a few KiB regrew the block, and the step after it
    // faulted in every page of a fresh 1.5 GB block (rtdetr-l 320 px: 2.5-3x the median step).
    // On the CPU the margin costs no memory until touched: large blocks are mapped lazily.
    if (h->chunks && h->chunks->next) {
        size_t want = h->peak + h->peak / 8 + 64 * 1024;
        free_chunks(h, al);
        ArenaChunk *c = xcalloc(1, sizeof *c);
        c->mem = al.alloc(want);
        c->size = want;
        h->chunks = c;
        h->reserved = want;
    } else if (h->chunks) {
        h->chunks->off = 0;
    }
    h->used = 0;
}

void arena_reset(Arena *a) {
    if (a->pool) { // the blocks live in the chunks: forget them, keep the lists' storage
        for (int s = 0; s < POOL_SLOTS; s++) a->pool->small[s].n = 0;
        a->pool->n_large = 0;
    }
    reset_half(&a->data, data_allocator(a));
    reset_half(&a->host, host_allocator());
}

static void *half_alloc(ArenaHalf *h, HalfAllocator al, size_t chunk_bytes, size_t nbytes) {
    size_t need = rounded(nbytes);
    ArenaChunk *c = h->chunks;
    if (!c || c->off + need > c->size) {
        c = xcalloc(1, sizeof *c);
        c->size = MAX(need, chunk_bytes);
        c->mem = al.alloc(c->size);
        c->next = h->chunks;
        h->chunks = c;
        h->reserved += c->size;
    }
    void *p = c->mem + c->off;
    c->off += need;
    h->used += need;
    if (h->used > h->peak) h->peak = h->used;
    return p;
}

void *arena_alloc_data(Arena *a, size_t nbytes) {
    CHECK(a->be, "arena used before arena_init");
    void *given_back = pool_take(a->pool, rounded(nbytes));
    return given_back ? given_back : half_alloc(&a->data, data_allocator(a), a->chunk_bytes, nbytes);
}

void *arena_alloc_host(Arena *a, size_t nbytes) {
    CHECK(a->be, "arena used before arena_init");
    return half_alloc(&a->host, host_allocator(), MAX(a->chunk_bytes / 16, (size_t)4096), nbytes);
}

int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static Tensor *header(Arena *a, int ndim, const int64_t *shape) {
    CHECK(ndim >= 0 && ndim <= TENSOR_MAX_DIMS, "ndim %d out of range", ndim);
    Tensor *t = arena_alloc_host(a, sizeof *t);
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        CHECK(shape[i] >= 0, "negative dim %lld", (long long)shape[i]);
        t->shape[i] = shape[i];
    }
    t->n = shape_numel(ndim, shape);
    t->dev = a->be->dev;
    t->param_index = -1;
    return t;
}

Tensor *tensor_new(Arena *a, int ndim, const int64_t *shape) {
    Tensor *t = header(a, ndim, shape);
    t->data = arena_alloc_data(a, (size_t)t->n * sizeof(float));
    t->owns_data = true;
    return t;
}

Tensor *tensor_zeros(Arena *a, int ndim, const int64_t *shape) {
    Tensor *t = tensor_new(a, ndim, shape);
    tensor_fill(t, 0.0f);
    return t;
}

Tensor *tensor_scalar(Arena *a, float value) {
    Tensor *t = tensor_new(a, 0, NULL);
    tensor_write(t, &value);
    return t;
}

Tensor *tensor_like(Arena *a, const Tensor *like) { return tensor_new(a, like->ndim, like->shape); }

Tensor *tensor_view(Arena *a, float *data, int ndim, const int64_t *shape) {
    Tensor *t = header(a, ndim, shape);
    t->data = data;
    return t;
}

Tensor *tensor_1d(Arena *a, int64_t d0) { return tensor_new(a, 1, (int64_t[]){d0}); }
Tensor *tensor_2d(Arena *a, int64_t d0, int64_t d1) { return tensor_new(a, 2, (int64_t[]){d0, d1}); }
Tensor *tensor_3d(Arena *a, int64_t d0, int64_t d1, int64_t d2) {
    return tensor_new(a, 3, (int64_t[]){d0, d1, d2});
}
Tensor *tensor_4d(Arena *a, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return tensor_new(a, 4, (int64_t[]){d0, d1, d2, d3});
}

Tensor *tensor_leaf(Arena *a, int ndim, const int64_t *shape) {
    Tensor *t = tensor_zeros(a, ndim, shape);
    t->grad = arena_alloc_data(a, (size_t)MAX(t->n, 1) * sizeof(float));
    t->requires_grad = true;
    t->grad_defined = false;
    return t;
}

// Host-side kernel calls (fills outside a tape): one thread, the default stream.
static KernelCtx host_call_ctx = {.n_threads = 1, .stream = NULL};

void tensor_read(const Tensor *t, float *dst) {
    if (t->n) backend_need(t->dev)->to_host(dst, t->data, (size_t)t->n * sizeof(float));
}

void tensor_write(Tensor *t, const float *src) {
    if (t->n) backend_need(t->dev)->to_device(t->data, src, (size_t)t->n * sizeof(float));
}

float tensor_item(const Tensor *t) {
    CHECK(t->n == 1, "tensor_item of a tensor with %lld elements", (long long)t->n);
    float v;
    tensor_read(t, &v);
    return v;
}

void tensor_fill(Tensor *t, float value) {
    const Backend *be = backend_need(t->dev);
    KERNEL_CHECK(be, fill);
    if (t->n) be->fill(&host_call_ctx, t->data, value, t->n);
}

void tensor_copy(Tensor *dst, const Tensor *src) {
    CHECK(dst->n == src->n && dst->dev == src->dev, "tensor_copy: %lld to %lld elements",
          (long long)src->n, (long long)dst->n);
    const Backend *be = backend_need(dst->dev);
    KERNEL_CHECK(be, copy);
    if (dst->n) be->copy(&host_call_ctx, dst->data, src->data, dst->n);
}

float *host_map(Device dev, float *dev_ptr, int64_t n, bool read) {
    if (dev == DEV_CPU) return dev_ptr;
    float *h = xmalloc(sizeof(float) * (size_t)MAX(n, 1));
    if (read && n) backend_need(dev)->to_host(h, dev_ptr, sizeof(float) * (size_t)n);
    return h;
}

void host_unmap(Device dev, float *dev_ptr, float *host, int64_t n, bool write_back) {
    if (dev == DEV_CPU) return;
    if (write_back && n) backend_need(dev)->to_device(dev_ptr, host, sizeof(float) * (size_t)n);
    free(host);
}

float *tensor_host_copy(const Tensor *t) {
    float *h = xmalloc(sizeof(float) * (size_t)MAX(t->n, 1));
    tensor_read(t, h);
    return h;
}

bool tensor_same_shape(const Tensor *a, const Tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int64_t tensor_dim(const Tensor *t, int d) {
    if (d < 0) d += t->ndim;
    CHECK(d >= 0 && d < t->ndim, "dim %d out of range for a %d-d tensor", d, t->ndim);
    return t->shape[d];
}

char *tensor_shape_str(const Tensor *t, char *buf, size_t len) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? "x%lld" : "%lld", (long long)t->shape[i]);
    return buf;
}
