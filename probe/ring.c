/* ring.c -- the flight-recorder ring: a memory-mapped file shared by a rank's producers (any
 * thread), its writer thread and, after a crash, the launcher. Producers claim consecutive
 * seqs with a compare-and-swap on head, and only when the slots are free (their old records
 * stored: seq - capacity <= tail), so seqs stay dense and a full ring drops the new event and
 * counts it instead of overwriting or waiting. The slot's seq, stored last with release, is
 * the commit marker. Atomics are GCC/Clang __atomic builtins on plain fields because the
 * header is a file layout; every field is naturally aligned and lock-free on 64-bit targets. */
#include "probe/ring.h"

#include "kernels/base.h" // CHECK, CEIL_DIV, xmalloc, xrealloc

#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RING_MAGIC "DDPDBGR1"
#define RING_VERSION 1
#define RING_HEADER_BYTES 4096 // the records start on the second page
#define RING_MIN_CAPACITY 64

// The file's first page. head, tail and overruns each own a cache line: producers write head,
// the writer writes tail, and neither should slow the other.
typedef struct RingHeader {
    char magic[8]; // RING_MAGIC, written last at creation
    uint32_t version, record_size;
    uint64_t capacity, header_bytes;
    int32_t rank, pid;
    int64_t created_ns;
    int32_t closed; // 1 once the writer stored everything and closed
    int32_t phase;  // live state (probe_ring_set_phase)
    int64_t phase_iter, phase_t_ns;
    alignas(64) uint64_t head; // next seq to claim
    alignas(64) uint64_t tail; // highest seq stored by the writer
    alignas(64) uint64_t overruns;
} RingHeader;
static_assert(sizeof(RingHeader) <= RING_HEADER_BYTES, "the ring header fits its page");

struct ProbeRing {
    RingHeader *h;
    ProbeRecord *records;
    uint64_t mask; // capacity - 1
    size_t map_bytes;
    char path[];
};

int64_t probe_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t); // vDSO: no syscall
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void say(char *err, size_t errlen, const char *fmt, const char *path, const char *why) {
    if (err && errlen) snprintf(err, errlen, fmt, path, why);
}

static ProbeRing *ring_new(const char *path, void *map, size_t map_bytes) {
    size_t n = strlen(path) + 1;
    ProbeRing *r = xmalloc(sizeof *r + n);
    memcpy(r->path, path, n);
    r->h = map;
    r->records = (ProbeRecord *)((char *)map + RING_HEADER_BYTES);
    r->mask = r->h->capacity - 1;
    r->map_bytes = map_bytes;
    return r;
}

ProbeRing *probe_ring_create(const char *path, uint64_t capacity, int rank, char *err,
                             size_t errlen) {
    uint64_t cap = RING_MIN_CAPACITY;
    while (cap < capacity)
        cap <<= 1;
    size_t bytes = RING_HEADER_BYTES + cap * sizeof(ProbeRecord);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        say(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return NULL;
    }
    // Reserve the blocks now: a store into a hole of a mapped file on a full disk is a SIGBUS.
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(fd, (off_t)bytes) ? errno : 0;
    if (rc) {
        say(err, errlen, "cannot reserve %s: %s", path, strerror(rc));
        close(fd);
        unlink(path);
        return NULL;
    }
    // MAP_POPULATE: fault every page in now, not on the first pass of the producers.
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        say(err, errlen, "cannot map %s: %s", path, strerror(errno));
        unlink(path);
        return NULL;
    }
    RingHeader *h = map;
    h->version = RING_VERSION;
    h->record_size = sizeof(ProbeRecord);
    h->capacity = cap;
    h->header_bytes = RING_HEADER_BYTES;
    h->rank = rank;
    h->pid = (int32_t)getpid();
    h->created_ns = probe_now_ns();
    h->phase = PROBE_PHASE_STARTUP;
    h->phase_iter = -1;
    h->phase_t_ns = h->created_ns;
    h->head = 1;
    __atomic_store_n(&h->tail, 0, __ATOMIC_RELAXED);
    memcpy(h->magic, RING_MAGIC, 8); // last: a half-created ring has no magic
    return ring_new(path, map, bytes);
}

ProbeRing *probe_ring_attach(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        say(err, errlen, "cannot open ring %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < RING_HEADER_BYTES) {
        if (err && errlen)
            snprintf(err, errlen,
                     "ring %s is truncated: %lld bytes, shorter than its %d-byte header", path,
                     (long long)st.st_size, RING_HEADER_BYTES);
        close(fd);
        return NULL;
    }
    RingHeader h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        say(err, errlen, "cannot read ring %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    const char *bad = memcmp(h.magic, RING_MAGIC, 8) ? "no DDPDBGR1 magic"
                      : h.version != RING_VERSION    ? "unknown ring version"
                      : h.record_size != sizeof(ProbeRecord) || h.header_bytes != RING_HEADER_BYTES
                          ? "unexpected record or header size"
                      : h.capacity < RING_MIN_CAPACITY || (h.capacity & (h.capacity - 1))
                          ? "capacity is not a power of two"
                          : NULL;
    if (bad) {
        if (err && errlen)
            snprintf(err, errlen,
                     "%s is not a ddpdbg ring: %s (version %u, record size %u, capacity %llu)",
                     path, bad, h.version, h.record_size, (unsigned long long)h.capacity);
        close(fd);
        return NULL;
    }
    uint64_t want = RING_HEADER_BYTES + h.capacity * sizeof(ProbeRecord);
    if ((uint64_t)st.st_size < want) {
        if (err && errlen)
            snprintf(err, errlen,
                     "ring %s is truncated: %lld bytes, its header says %llu records (%llu bytes)",
                     path, (long long)st.st_size, (unsigned long long)h.capacity,
                     (unsigned long long)want);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        say(err, errlen, "cannot map ring %s: %s", path, strerror(errno));
        return NULL;
    }
    return ring_new(path, map, want);
}

void probe_ring_close(ProbeRing *ring) {
    if (!ring) return;
    munmap(ring->h, ring->map_bytes);
    free(ring);
}

const char *ring_path(const ProbeRing *ring) {
    return ring->path;
}

// ---- producers ---------------------------------------------------------------------------

// Claims n consecutive seqs, first in *first, if all their slots are free. The acquire load of
// tail orders the writer's last reads of those slots before our stores into them.
static bool claim(RingHeader *h, uint64_t n, uint64_t capacity, uint64_t *first) {
    uint64_t head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE);
        if (head + n - 1 > tail + capacity) return false; // the oldest slot is not stored yet
        if (__atomic_compare_exchange_n(&h->head, &head, head + n, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            *first = head;
            return true;
        }
    }
}

bool probe_ring_emit(ProbeRing *ring, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a,
                     int32_t b, int64_t c, int64_t d, const char *text, size_t len) {
    return probe_ring_emit_at(ring, 0, kind, flags, iter, a, b, c, d, text, len);
}

// t_ns 0: now, read once the slots are claimed.
bool probe_ring_emit_at(ProbeRing *ring, int64_t t_ns, ProbeKind kind, uint16_t flags, int64_t iter,
                        int32_t a, int32_t b, int64_t c, int64_t d, const char *text, size_t len) {
    CHECK(!(flags & PROBE_FLAG_CONTINUED), "probe_ring_emit: flag 0x8000 is the ring's own");
    uint64_t n_parts =
        len > PROBE_TEXT_BYTES ? CEIL_DIV(len - PROBE_TEXT_BYTES, PROBE_TEXT_BYTES) : 0;
    uint64_t seq;
    if (n_parts >= ring->mask || !claim(ring->h, n_parts + 1, ring->mask + 1, &seq)) {
        __atomic_fetch_add(&ring->h->overruns, 1, __ATOMIC_RELAXED);
        return false;
    }
    int64_t t = t_ns ? t_ns : probe_now_ns();
    for (uint64_t i = 1; i <= n_parts; i++) {
        ProbeRecord *part = &ring->records[(seq + i - 1) & ring->mask];
        size_t at = i * PROBE_TEXT_BYTES, n = MIN(len - at, (size_t)PROBE_TEXT_BYTES);
        part->t_ns = t, part->iter = iter;
        part->c = (int64_t)len, part->d = (int64_t)seq;
        part->kind = PROBE_TEXT, part->flags = 0;
        part->a = (int32_t)i, part->b = (int32_t)n_parts;
        memset(part->text, 0, PROBE_TEXT_BYTES);
        memcpy(part->text, text + at, n);
        __atomic_store_n(&part->seq, seq + i, __ATOMIC_RELEASE);
    }
    ProbeRecord *r = &ring->records[(seq - 1) & ring->mask];
    r->t_ns = t, r->iter = iter;
    r->c = c, r->d = d;
    r->kind = (uint16_t)kind, r->flags = flags | (n_parts ? PROBE_FLAG_CONTINUED : 0);
    r->a = a, r->b = b;
    memset(r->text, 0, PROBE_TEXT_BYTES);
    if (len) memcpy(r->text, text, MIN(len, (size_t)PROBE_TEXT_BYTES));
    __atomic_store_n(&r->seq, seq, __ATOMIC_RELEASE); // last: the head commits the whole event
    return true;
}

void probe_ring_set_phase(ProbeRing *ring, ProbePhase phase, int64_t iter) {
    __atomic_store_n(&ring->h->phase_iter, iter, __ATOMIC_RELAXED);
    __atomic_store_n(&ring->h->phase_t_ns, probe_now_ns(), __ATOMIC_RELAXED);
    __atomic_store_n(&ring->h->phase, (int32_t)phase, __ATOMIC_RELAXED);
}

ProbeRingState probe_ring_state(const ProbeRing *ring) {
    const RingHeader *h = ring->h;
    return (ProbeRingState){
        .rank = h->rank,
        .pid = h->pid,
        .capacity = h->capacity,
        .created_ns = h->created_ns,
        .head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE),
        .tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE),
        .overruns = __atomic_load_n(&h->overruns, __ATOMIC_RELAXED),
        .closed = __atomic_load_n(&h->closed, __ATOMIC_ACQUIRE) != 0,
        .phase = (ProbePhase)__atomic_load_n(&h->phase, __ATOMIC_RELAXED),
        .phase_iter = __atomic_load_n(&h->phase_iter, __ATOMIC_RELAXED),
        .phase_t_ns = __atomic_load_n(&h->phase_t_ns, __ATOMIC_RELAXED),
    };
}

// ---- the consumer ------------------------------------------------------------------------

void textbuf_free(TextBuf *t) {
    free(t->data);
    *t = (TextBuf){0};
}

static void text_append(TextBuf *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        t->cap = MAX(2 * t->cap, t->len + n + 1);
        t->data = xrealloc(t->data, t->cap);
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = 0;
}

RingRead ring_read(const ProbeRing *ring, uint64_t seq, ProbeRecord *head, TextBuf *text,
                   uint64_t *n_records) {
    const ProbeRecord *r = &ring->records[(seq - 1) & ring->mask];
    *n_records = 1;
    text->len = 0;
    if (__atomic_load_n(&r->seq, __ATOMIC_ACQUIRE) != seq) return RING_READ_IN_FLIGHT;
    *head = *r;
    if (head->kind == PROBE_TEXT) return RING_READ_ORPHAN;
    if (!(head->flags & PROBE_FLAG_CONTINUED)) {
        text_append(text, head->text, strnlen(head->text, PROBE_TEXT_BYTES));
        return RING_READ_OK;
    }
    head->flags &= (uint16_t)~PROBE_FLAG_CONTINUED;
    text_append(text, head->text, PROBE_TEXT_BYTES); // a continued head is full

    // The head is committed after its parts, so they are visible now; check them all anyway.
    const ProbeRecord *first = &ring->records[seq & ring->mask];
    if (__atomic_load_n(&first->seq, __ATOMIC_ACQUIRE) != seq + 1) return RING_READ_CORRUPT;
    uint64_t n_parts = (uint64_t)first->b, len = (uint64_t)first->c;
    if (first->b < 1 || n_parts >= ring->mask || len <= PROBE_TEXT_BYTES ||
        n_parts != CEIL_DIV(len - PROBE_TEXT_BYTES, PROBE_TEXT_BYTES))
        return RING_READ_CORRUPT;
    for (uint64_t i = 1; i <= n_parts; i++) {
        const ProbeRecord *p = &ring->records[(seq + i - 1) & ring->mask];
        if (__atomic_load_n(&p->seq, __ATOMIC_ACQUIRE) != seq + i || p->kind != PROBE_TEXT ||
            p->a != (int32_t)i || p->b != first->b || p->d != (int64_t)seq)
            return RING_READ_CORRUPT;
        size_t at = i * PROBE_TEXT_BYTES;
        text_append(text, p->text, MIN(len - at, (size_t)PROBE_TEXT_BYTES));
    }
    *n_records = n_parts + 1;
    return RING_READ_OK;
}

uint64_t ring_unstored(const ProbeRing *ring) {
    return __atomic_load_n(&ring->h->head, __ATOMIC_RELAXED) - 1 -
           __atomic_load_n(&ring->h->tail, __ATOMIC_RELAXED);
}

void ring_set_tail(ProbeRing *ring, uint64_t seq) {
    __atomic_store_n(&ring->h->tail, seq, __ATOMIC_RELEASE);
}

void ring_mark_closed(ProbeRing *ring) {
    __atomic_store_n(&ring->h->closed, 1, __ATOMIC_RELEASE);
}
