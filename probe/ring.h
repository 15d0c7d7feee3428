/* ring.h -- the consumer's side of the ring (probe/ only): reading committed events in seq
 * order, with their text reassembled, and advancing the tail. One consumer per ring: the
 * rank's writer thread while it lives, the launcher's drain after it died. */
#ifndef PROBE_RING_H
#define PROBE_RING_H

#include "probe/probe.h"

// A growable text buffer; data is NUL-terminated once anything was read.
typedef struct TextBuf {
    char *data;
    size_t len, cap;
} TextBuf;
void textbuf_free(TextBuf *t);

typedef enum RingRead {
    RING_READ_OK,        // *head, text and *n_records describe the event at seq
    RING_READ_IN_FLIGHT, // the slot for seq holds no record with that seq (not yet committed)
    RING_READ_ORPHAN,    // seq is a committed TEXT part; *head is it (its head is elsewhere)
    RING_READ_CORRUPT,   // the head promises TEXT parts that are not there
} RingRead;

// Reads the event whose first record is seq: copies the head record into *head (flags without
// PROBE_FLAG_CONTINUED), its full text into text (len 0 when none), and sets *n_records to
// the ring records it spans (1 + its TEXT parts). seq must be above the tail, so that no
// producer can be reusing the slot.
RingRead ring_read(const ProbeRing *ring, uint64_t seq, ProbeRecord *head, TextBuf *text,
                   uint64_t *n_records);
// Records claimed and not yet stored (two relaxed loads: a hint for waking the writer).
uint64_t ring_unstored(const ProbeRing *ring);
// Declares every record up to seq stored (release): their slots may be reused.
void ring_set_tail(ProbeRing *ring, uint64_t seq);
// Marks the ring as closed cleanly: the writer stored everything.
void ring_mark_closed(ProbeRing *ring);
const char *ring_path(const ProbeRing *ring);

#endif
