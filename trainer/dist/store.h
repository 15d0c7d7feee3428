/* store.h -- the TCP rendezvous store (PyTorch's TCPStore, in C): set, get, wait, add and
 * barrier on keys shared by every rank of a run. Rank 0 serves it from a background thread;
 * every rank, rank 0 included, is a client over TCP. It serves rendezvous, Gloo's store
 * interface, NCCL's unique id and barriers: small values at rendezvous rates, not a data path
 * (get and wait poll the server every few milliseconds until the key exists).
 * A connection must present the run's token first or it is refused. Every call ends within
 * the store's timeout; failures return -1 and store_error() says why in one line. */
#ifndef TRAINER_DIST_STORE_H
#define TRAINER_DIST_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Store Store;

// Opens the store at host:port. is_server: bind host:port (host "0.0.0.0" for every interface;
// the caller chooses, loopback is the safe default), serve in a background thread, then
// connect to it. Clients retry connecting until timeout_ms has passed. world_size counts the
// ranks a barrier waits for. token: the run's shared secret, sent first on the connection.
// On failure returns NULL with one line in err (address in use, unreachable master, wrong
// token), never exits.
Store *store_open(const char *host, int port, bool is_server, int world_size, const char *token,
                  int timeout_ms, char *err, size_t errlen);
// Sets key (a NUL-terminated string) to len bytes of value, replacing any older value.
int store_set(Store *s, const char *key, const void *value, size_t len);
// Blocks until key exists (or the timeout), then returns a malloc'd copy of its value in
// *value (one NUL byte past *len, so text values are C strings); the caller frees it.
int store_get(Store *s, const char *key, void **value, size_t *len);
// Blocks until every one of the n keys exists, all within one timeout.
int store_wait(Store *s, const char *const *keys, int n);
// Adds delta to the integer at key (missing: 0), atomically on the server, and returns the
// new value in *new_value. The value is kept as decimal text, as PyTorch does.
int store_add(Store *s, const char *key, int64_t delta, int64_t *new_value);
// Returns once world_size ranks have called store_barrier with this name. Barriers are
// numbered per store, so every rank must call them in the same order; a name may repeat.
int store_barrier(Store *s, const char *name);
// The one-line reason for the last failed call on s.
const char *store_error(const Store *s);
// Disconnects. A client first tells the server it is leaving; the server rank first waits
// (at most the store's timeout) until the other world_size - 1 ranks have left, then stops
// serving. So every rank simply calls store_close when done, in any order.
void store_close(Store *s);

#endif
