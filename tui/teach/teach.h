/* teach.h -- the teaching mode (`ddpdbg tui --teach DIR`): the trace's reducer events, every
 * rank's merged by time, replayed one at a time (space step, b back, p play / pause, + - speed,
 * n the next event that is not a gradient hook), with an explanation of the current event in
 * plain words: why bucket k cannot launch yet, what the rebuild changed, what
 * find_unused_parameters does at this point, why a rank is now blocked. The replay state (per
 * rank: iteration, layout, parameters marked, buckets launched, collectives open) is rebuilt
 * from the first event whenever the position moves back. */
#ifndef TUI_TEACH_H
#define TUI_TEACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tui/model/model.h"

// One event of one rank: a row of its events table (traces/README.md).
typedef struct TeachEvent {
    int rank;
    int64_t seq, t_ns, iter;
    int kind; // ProbeKind
    int32_t a, b;
    int64_t c, d;
    uint16_t flags;
    char *text; // NULL when none
} TeachEvent;

enum { TEACH_MAX_OPEN = 64 }; // collectives a rank may have in flight at once, as replayed

// A rank as replayed up to the current event.
typedef struct TeachRank {
    int64_t iter;
    int last_kind; // ProbeKind of its latest event (0: none yet)
    int layout;    // index into the ModelRank's layouts, -1 when it has none
    int n_buckets;
    int *bucket_of;  // per parameter: its bucket in that layout, -1 none
    int *pending;    // per bucket: parameters not marked in this backward
    uint8_t *marked; // per parameter (bits): marked ready in this backward
    int next_bucket; // buckets [0, next_bucket) launched in this backward
    int n_marked, n_unused;
    bool in_backward, finalized, errored;
    bool unfinished;       // its last backward ended without finalizing
    int n_images, n_boxes; // this iteration's batch so far
    int n_open;
    int open[TEACH_MAX_OPEN]; // indices (into Teach.ev) of its launched, not completed collectives
} TeachRank;

typedef struct Teach {
    TeachEvent *ev; // every rank's events, by time (rank, then seq, on ties)
    int n;
    int64_t iter_lo, iter_hi; // the iterations loaded
    int pos;                  // events [0, pos] have happened; -1 before the first
    bool playing;
    int speed;        // events per second while playing
    int carry_ms;     // playback time not yet spent on an event
    bool find_unused; // some rank ran with find_unused_parameters=true
    int world, n_params;
    TeachRank *ranks; // world entries
} Teach;

// Reads the events of every present rank of m for iterations [iter_lo, iter_hi] from the
// databases in m->dir, read-only (SQLITE_OPEN_READONLY): every kind but META, PARAM, HEARTBEAT
// and TEXT, and of the LAYOUT records only each generation's first (the rebuild). Returns 0,
// or -1 with one line in err naming the database and the problem.
int teach_load(Teach *t, const Model *m, int64_t iter_lo, int64_t iter_hi, char *err,
               size_t errlen);
// The iterations teach_load should read by default: the two before the first error or hang
// and its own, else the first three.
void teach_default_range(const Model *m, int64_t *lo, int64_t *hi);
// Sets up a replay of ev[0..n) (sorted as Teach.ev says), taking ownership of ev; the
// position is before the first event. The tests build events by hand and call this directly.
void teach_init(Teach *t, const Model *m, TeachEvent *ev, int n, int64_t iter_lo, int64_t iter_hi);
void teach_free(Teach *t);

// Moves to pos (clamped to [-1, n)), replaying.
void teach_seek(Teach *t, const Model *m, int pos);
// The teaching keys: space, b, p, +, -, n. Returns true when the key was one of them.
bool teach_key(Teach *t, const Model *m, int key);
// Playback: advances by speed events per second. Returns true when the position moved.
bool teach_tick(Teach *t, const Model *m, int elapsed_ms);

// One line for event i: "r0 it1 +4.712s MARK_READY  model.28.dec_score_head.5.bias  b0 12/69".
void teach_describe(const Teach *t, const Model *m, int i, char *buf, size_t n);
// The explanation of the current event (paragraphs separated by '\n'), then "Now:" and one
// line per rank on what it is doing or waiting for.
void teach_explain(const Teach *t, const Model *m, char *buf, size_t n);

#endif
