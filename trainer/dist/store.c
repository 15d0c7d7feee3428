/* store.c -- the TCP store: a poll() server thread holding the key-value table, and the client
 * every rank uses. Wire format, both directions length-prefixed, integers big-endian:
 *   request  = op:u8 key_len:u32 value_len:u32 key value
 *   response = status:u8 len:u32 payload
 * The first request of a connection is HELLO carrying the run's token. Not a general
 * key-value server: one table, linear lookup (a run has tens of keys), no persistence. */
#include "trainer/dist/store.h"

#include "kernels/base.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { OP_HELLO = 1, OP_SET, OP_GET, OP_ADD };
enum { ST_OK = 0, ST_MISSING, ST_ERROR, ST_REFUSED };
enum { REQUEST_HEADER = 9, RESPONSE_HEADER = 5 };
#define KEY_MAX 4096u
#define VALUE_MAX (64u << 20)

typedef struct Entry {
    char *key;
    uint8_t *value;
    uint32_t len;
} Entry;

typedef struct Peer {
    int fd;
    bool authed;
    uint8_t *buf;
    size_t len, cap;
} Peer;

typedef struct Server {
    int listen_fd;
    int wake[2]; // writing wake[1] stops the thread
    pthread_t thread;
    const char *token, *where;
    Entry *entries;
    int n_entries, cap_entries;
    Peer *peers;
    int n_peers, cap_peers;
} Server;

struct Store {
    char where[300]; // "host:port", for messages
    char *token;
    int fd; // -1 once the connection is lost
    int timeout_ms, world_size, barrier_seq;
    bool joined; // the handshake succeeded: store_close announces or awaits the leaving
    Server *server;
    char err[512];
};

// ----------------------------------------------------------------------------------------------
// shared helpers

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_i64(uint8_t *p, int64_t v) {
    put_u32(p, (uint32_t)((uint64_t)v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static int64_t get_i64(const uint8_t *p) {
    return (int64_t)((uint64_t)get_u32(p) << 32 | get_u32(p + 4));
}

static void sleep_ms(int64_t ms) {
    if (ms <= 0) return;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&t, &t) < 0 && errno == EINTR) {}
}

// ----------------------------------------------------------------------------------------------
// server

static Entry *server_find(Server *sv, const uint8_t *key, uint32_t key_len) {
    for (int i = 0; i < sv->n_entries; i++)
        if (strlen(sv->entries[i].key) == key_len && !memcmp(sv->entries[i].key, key, key_len))
            return &sv->entries[i];
    return NULL;
}

static void server_put(Server *sv, const uint8_t *key, uint32_t key_len, const void *value,
                       uint32_t len) {
    Entry *e = server_find(sv, key, key_len);
    if (!e) {
        if (sv->n_entries == sv->cap_entries) {
            sv->cap_entries = sv->cap_entries ? 2 * sv->cap_entries : 16;
            sv->entries = xrealloc(sv->entries, (size_t)sv->cap_entries * sizeof(Entry));
        }
        e = &sv->entries[sv->n_entries++];
        e->key = xmalloc(key_len + 1);
        memcpy(e->key, key, key_len);
        e->key[key_len] = 0;
        e->value = NULL;
    }
    free(e->value);
    e->value = xmalloc(len + 1u);
    if (len) memcpy(e->value, value, len);
    ((char *)e->value)[len] = 0; // values are also read as text (ADD's decimal integer)
    e->len = len;
}

// Sends one response; false if the peer is gone (it is dropped then).
static bool peer_reply(Peer *p, uint8_t status, const void *payload, uint32_t len) {
    uint8_t head[RESPONSE_HEADER];
    head[0] = status;
    put_u32(head + 1, len);
    const uint8_t *parts[2] = {head, payload};
    size_t sizes[2] = {sizeof head, len};
    for (int k = 0; k < 2; k++)
        for (size_t off = 0; off < sizes[k];) {
            ssize_t n = send(p->fd, parts[k] + off, sizes[k] - off, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false; // includes SO_SNDTIMEO expiry: a peer that stopped reading
            off += (size_t)n;
        }
    return true;
}

static bool peer_reply_error(Peer *p, const char *message) {
    return peer_reply(p, ST_ERROR, message, (uint32_t)strlen(message));
}

// Handles one request; false drops the connection.
static bool server_handle(Server *sv, Peer *p, uint8_t op, const uint8_t *key, uint32_t key_len,
                          const uint8_t *value, uint32_t len) {
    if (!p->authed) {
        if (op != OP_HELLO) return false;
        if (len != strlen(sv->token) || memcmp(value, sv->token, len)) {
            LOG_WARN("store %s: refused a connection: wrong run token", sv->where);
            peer_reply(p, ST_REFUSED, NULL, 0);
            return false;
        }
        p->authed = true;
        return peer_reply(p, ST_OK, NULL, 0);
    }
    switch (op) {
    case OP_SET: server_put(sv, key, key_len, value, len); return peer_reply(p, ST_OK, NULL, 0);
    case OP_GET: {
        Entry *e = server_find(sv, key, key_len);
        return e ? peer_reply(p, ST_OK, e->value, e->len) : peer_reply(p, ST_MISSING, NULL, 0);
    }
    case OP_ADD: {
        if (len != 8) return false;
        Entry *e = server_find(sv, key, key_len);
        int64_t current = 0;
        if (e) {
            char *end;
            errno = 0;
            current = strtoll((const char *)e->value, &end, 10);
            if (e->len == 0 || errno || end != (const char *)e->value + e->len)
                return peer_reply_error(p, "add on a key whose value is not an integer");
        }
        int64_t sum = current + get_i64(value);
        char text[32];
        int n = snprintf(text, sizeof text, "%lld", (long long)sum);
        server_put(sv, key, key_len, text, (uint32_t)n);
        uint8_t out[8];
        put_i64(out, sum);
        return peer_reply(p, ST_OK, out, 8);
    }
    default: return false; // HELLO twice or an unknown op: not our client
    }
}

// Reads what the peer sent and handles every complete request; false drops it.
static bool peer_read(Server *sv, Peer *p) {
    if (p->cap - p->len < 65536) {
        p->cap = p->cap * 2 + 65536;
        p->buf = xrealloc(p->buf, p->cap);
    }
    ssize_t n = recv(p->fd, p->buf + p->len, p->cap - p->len, MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (n == 0) return false;
    p->len += (size_t)n;
    size_t off = 0;
    while (p->len - off >= REQUEST_HEADER) {
        const uint8_t *m = p->buf + off;
        uint32_t key_len = get_u32(m + 1), len = get_u32(m + 5);
        if (key_len > KEY_MAX || len > VALUE_MAX) return false;
        size_t total = REQUEST_HEADER + (size_t)key_len + len;
        if (p->len - off < total) break;
        if (!server_handle(sv, p, m[0], m + REQUEST_HEADER, key_len, m + REQUEST_HEADER + key_len,
                           len))
            return false;
        off += total;
    }
    memmove(p->buf, p->buf + off, p->len - off);
    p->len -= off;
    return true;
}

static void server_accept(Server *sv) {
    int fd = accept(sv->listen_fd, NULL, NULL);
    if (fd < 0) return; // the peer gave up between poll and accept, or out of fds: it retries
    struct timeval send_limit = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_limit, sizeof send_limit);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sv->n_peers == sv->cap_peers) {
        sv->cap_peers = sv->cap_peers ? 2 * sv->cap_peers : 8;
        sv->peers = xrealloc(sv->peers, (size_t)sv->cap_peers * sizeof(Peer));
    }
    sv->peers[sv->n_peers++] = (Peer){.fd = fd};
}

static void server_drop(Server *sv, int i) {
    close(sv->peers[i].fd);
    free(sv->peers[i].buf);
    sv->peers[i] = sv->peers[--sv->n_peers];
}

static void *server_main(void *arg) {
    Server *sv = arg;
    struct pollfd *fds = NULL;
    for (;;) {
        int n = sv->n_peers;
        fds = xrealloc(fds, (size_t)(n + 2) * sizeof *fds);
        fds[0] = (struct pollfd){.fd = sv->wake[0], .events = POLLIN};
        fds[1] = (struct pollfd){.fd = sv->listen_fd, .events = POLLIN};
        for (int i = 0; i < n; i++) fds[i + 2] = (struct pollfd){.fd = sv->peers[i].fd, .events = POLLIN};
        if (poll(fds, (nfds_t)n + 2, -1) < 0) {
            if (errno == EINTR) continue;
            LOG_ERROR("store %s: poll failed: %s; no longer serving", sv->where, strerror(errno));
            break;
        }
        if (fds[0].revents) break;
        if (fds[1].revents & POLLIN) server_accept(sv);
        // Descending, so a drop's swap-with-last only moves an already handled or new peer.
        for (int i = n - 1; i >= 0; i--)
            if (fds[i + 2].revents && !peer_read(sv, &sv->peers[i])) server_drop(sv, i);
    }
    free(fds);
    return NULL;
}

static void server_free(Server *sv) {
    while (sv->n_peers) server_drop(sv, sv->n_peers - 1);
    for (int i = 0; i < sv->n_entries; i++) free(sv->entries[i].key), free(sv->entries[i].value);
    free(sv->entries);
    free(sv->peers);
    close(sv->listen_fd);
    close(sv->wake[0]);
    close(sv->wake[1]);
    free(sv);
}

// Binds and listens in the caller's thread (so "address in use" is reported here), then serves.
static Server *server_start(Store *s, const char *host, int port, char *err, size_t errlen) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc) {
        snprintf(err, errlen, "cannot serve the store at %s: %s", s->where, gai_strerror(rc));
        return NULL;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); // TIME_WAIT only
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        if (e == EADDRINUSE)
            snprintf(err, errlen, "cannot serve the store at %s: address already in use "
                     "(another run on this port? choose another MASTER_PORT)", s->where);
        else
            snprintf(err, errlen, "cannot serve the store at %s: %s", s->where, strerror(e));
        return NULL;
    }
    freeaddrinfo(ai);
    Server *sv = xcalloc(1, sizeof *sv);
    sv->listen_fd = fd;
    sv->token = s->token;
    sv->where = s->where;
    CHECK(pipe2(sv->wake, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
    CHECK(pthread_create(&sv->thread, NULL, server_main, sv) == 0, "pthread_create failed");
    return sv;
}

static void server_stop(Server *sv) {
    CHECK(write(sv->wake[1], "x", 1) == 1, "store wake pipe: %s", strerror(errno));
    pthread_join(sv->thread, NULL);
    server_free(sv);
}

// ----------------------------------------------------------------------------------------------
// client

static int fail(Store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Store *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

// One non-blocking connect attempt bounded by wait_ms; returns the fd or -1 with errno set.
static int connect_once(const char *host, int port, int64_t wait_ms, int *gai_error) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    *gai_error = getaddrinfo(host, service, &hints, &ai);
    if (*gai_error) return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        int e = errno;
        if (e == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            socklen_t sl = sizeof e;
            if (poll(&pfd, 1, (int)MAX(wait_ms, 1)) <= 0) e = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0) e = errno;
        }
        if (e) close(fd), fd = -1, errno = e;
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

// Moves len bytes through the non-blocking fd before deadline; -1 with s->err set otherwise.
static int transfer(Store *s, bool sending, void *data, size_t len, int64_t deadline) {
    for (size_t off = 0; off < len;) {
        ssize_t n = sending ? send(s->fd, (uint8_t *)data + off, len - off, MSG_NOSIGNAL)
                            : recv(s->fd, (uint8_t *)data + off, len - off, 0);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return fail(s, "store at %s: connection lost (%s)", s->where,
                        n == 0 ? "the server closed it" : strerror(errno));
        int64_t left = deadline - now_ms();
        struct pollfd pfd = {.fd = s->fd, .events = sending ? POLLOUT : POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) == 0)
            return fail(s, "store at %s: no answer from the server within %d ms", s->where,
                        s->timeout_ms);
    }
    return 0;
}

// Sends one request and reads its response. *payload (malloc'd, NUL-terminated) only when
// payload is non-NULL. Any failure loses the connection: a late answer would be misread.
static int request(Store *s, uint8_t op, const char *key, const void *value, size_t len,
                   int64_t deadline, uint8_t *status, uint8_t **payload, uint32_t *payload_len) {
    if (s->fd < 0) return fail(s, "store at %s: connection lost earlier", s->where);
    size_t key_len = strlen(key);
    if (key_len > KEY_MAX || len > VALUE_MAX)
        return fail(s, "store key '%.64s': %zu-byte key / %zu-byte value, at most %u / %u", key,
                    key_len, len, KEY_MAX, VALUE_MAX);
    uint8_t head[REQUEST_HEADER];
    head[0] = op;
    put_u32(head + 1, (uint32_t)key_len);
    put_u32(head + 5, (uint32_t)len);
    uint8_t reply[RESPONSE_HEADER];
    uint8_t *body = NULL;
    bool ok = !transfer(s, true, head, sizeof head, deadline) &&
              !transfer(s, true, (void *)key, key_len, deadline) &&
              !transfer(s, true, (void *)value, len, deadline) &&
              !transfer(s, false, reply, sizeof reply, deadline);
    uint32_t n = ok ? get_u32(reply + 1) : 0;
    if (ok && n > VALUE_MAX) ok = !fail(s, "store at %s: garbled response", s->where);
    if (ok) {
        body = xmalloc(n + 1u);
        ok = !transfer(s, false, body, n, deadline);
        body[n] = 0;
    }
    if (!ok) {
        free(body);
        close(s->fd);
        s->fd = -1;
        return -1;
    }
    *status = reply[0];
    if (payload_len) *payload_len = n;
    if (payload) *payload = body;
    else free(body);
    return 0;
}

// store_get with a caller's deadline: polls until the key exists. Each poll gets the full
// timeout of its own, so the wait running out never cuts a request (and the connection) short.
static int get_until(Store *s, const char *key, int64_t deadline, void **value, size_t *len) {
    for (int64_t backoff = 1;; backoff = MIN(2 * backoff, 10)) {
        uint8_t status, *body;
        uint32_t n;
        if (request(s, OP_GET, key, NULL, 0, now_ms() + s->timeout_ms, &status, &body, &n))
            return -1;
        if (status == ST_OK) {
            if (value) *value = body;
            else free(body);
            if (len) *len = n;
            return 0;
        }
        free(body);
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return fail(s, "store at %s: timeout after %d ms waiting for key '%s' (did every "
                        "rank reach this point?)", s->where, s->timeout_ms, key);
        sleep_ms(MIN(backoff, left));
    }
}

Store *store_open(const char *host, int port, bool is_server, int world_size, const char *token,
                  int timeout_ms, char *err, size_t errlen) {
    CHECK(host && token && world_size >= 1 && timeout_ms > 0 && err && errlen > 0,
          "store_open: host, token, err required; world_size %d, timeout_ms %d", world_size,
          timeout_ms);
    if (port < 1 || port > 65535) {
        snprintf(err, errlen, "store port %d: expected 1..65535 (MASTER_PORT)", port);
        return NULL;
    }
    Store *s = xcalloc(1, sizeof *s);
    snprintf(s->where, sizeof s->where, "%s:%d", host, port);
    s->token = xstrdup(token);
    s->timeout_ms = timeout_ms;
    s->world_size = world_size;
    s->fd = -1;
    if (is_server && !(s->server = server_start(s, host, port, err, errlen))) {
        store_close(s);
        return NULL;
    }
    // Retry until the deadline: the master may not be listening yet.
    int64_t deadline = now_ms() + timeout_ms;
    int e = 0, gai_error = 0;
    for (;;) {
        int64_t left = deadline - now_ms();
        s->fd = connect_once(host, port, MIN(left, 1000), &gai_error);
        if (s->fd >= 0) break;
        e = errno;
        left = deadline - now_ms();
        if (left <= 0) {
            snprintf(err, errlen, "could not connect to MASTER_ADDR:MASTER_PORT %s within %g s: %s",
                     s->where, timeout_ms / 1000.0, gai_error ? gai_strerror(gai_error) : strerror(e));
            store_close(s);
            return NULL;
        }
        sleep_ms(MIN(left, 50));
    }
    uint8_t status;
    if (request(s, OP_HELLO, "", token, strlen(token), now_ms() + timeout_ms, &status, NULL, NULL)) {
        snprintf(err, errlen, "%s", s->err);
        store_close(s);
        return NULL;
    }
    if (status != ST_OK) {
        if (status == ST_REFUSED)
            snprintf(err, errlen, "store at %s refused this process: wrong run token", s->where);
        else
            snprintf(err, errlen, "store at %s: handshake answered with status %d", s->where, status);
        store_close(s);
        return NULL;
    }
    s->joined = true;
    return s;
}

int store_set(Store *s, const char *key, const void *value, size_t len) {
    uint8_t status;
    if (request(s, OP_SET, key, value, len, now_ms() + s->timeout_ms, &status, NULL, NULL)) return -1;
    return status == ST_OK ? 0 : fail(s, "store at %s: set '%s' failed", s->where, key);
}

int store_get(Store *s, const char *key, void **value, size_t *len) {
    return get_until(s, key, now_ms() + s->timeout_ms, value, len);
}

int store_wait(Store *s, const char *const *keys, int n) {
    int64_t deadline = now_ms() + s->timeout_ms;
    for (int i = 0; i < n; i++)
        if (get_until(s, keys[i], deadline, NULL, NULL)) return -1;
    return 0;
}

int store_add(Store *s, const char *key, int64_t delta, int64_t *new_value) {
    uint8_t status, delta_bytes[8], *body;
    uint32_t n;
    put_i64(delta_bytes, delta);
    if (request(s, OP_ADD, key, delta_bytes, 8, now_ms() + s->timeout_ms, &status, &body, &n))
        return -1;
    int rc = 0;
    if (status == ST_OK && n == 8) {
        if (new_value) *new_value = get_i64(body);
    } else {
        rc = fail(s, "store at %s: add on '%s': %s", s->where, key,
                  status == ST_ERROR ? (const char *)body : "unexpected response");
    }
    free(body);
    return rc;
}

int store_barrier(Store *s, const char *name) {
    int seq = ++s->barrier_seq;
    char arrived[KEY_MAX], done[KEY_MAX];
    snprintf(arrived, sizeof arrived, "barrier/%s/%d/arrived", name, seq);
    snprintf(done, sizeof done, "barrier/%s/%d/done", name, seq);
    int64_t count;
    if (store_add(s, arrived, 1, &count)) return -1;
    if (count > s->world_size)
        return fail(s, "store barrier '%s': %lld ranks arrived, world_size is %d", name,
                    (long long)count, s->world_size);
    if (count == s->world_size && store_set(s, done, "1", 1)) return -1;
    if (!get_until(s, done, now_ms() + s->timeout_ms, NULL, NULL)) return 0;
    if (s->fd < 0) return -1;
    // Say how far the barrier got: the count names the missing ranks' number, not who.
    char reason[sizeof s->err];
    snprintf(reason, sizeof reason, "%s", s->err);
    void *seen = NULL;
    if (get_until(s, arrived, now_ms() + 1000, &seen, NULL)) return fail(s, "%s", reason);
    fail(s, "store at %s: barrier '%s' timed out after %d ms with %s of %d ranks arrived",
         s->where, name, s->timeout_ms, (char *)seen, s->world_size);
    free(seen);
    return -1;
}

const char *store_error(const Store *s) { return s->err; }

// The key every client adds 1 to as it closes.
#define LEFT_KEY "store/left"

// Server rank: waits, bounded by the store's timeout, until the world_size - 1 other ranks have
// closed, so that stopping the server never cuts a client off in the middle of a request.
static void await_leavers(Store *s) {
    int64_t deadline = now_ms() + s->timeout_ms, left = 0;
    while (store_add(s, LEFT_KEY, 0, &left) == 0 && left < s->world_size - 1 &&
           now_ms() < deadline)
        sleep_ms(5);
}

void store_close(Store *s) {
    if (!s) return;
    if (s->joined) {
        if (!s->server) (void)store_add(s, LEFT_KEY, 1, NULL);
        else if (s->world_size > 1) await_leavers(s);
    }
    if (s->fd >= 0) close(s->fd);
    if (s->server) server_stop(s->server);
    free(s->token);
    free(s);
}
