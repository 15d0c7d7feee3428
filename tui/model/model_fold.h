/* model_fold.h -- private to tui/model/model.c and tui/model/model_fold.c: the per-rank state the loader
 * keeps between refreshes, and the fold of one event into a ModelRank (iterations, bitmaps,
 * layouts, collectives, GPU records, state words). Not for the views: they read model.h. */
#ifndef TUI_MODEL_FOLD_H
#define TUI_MODEL_FOLD_H

#include <sqlite3.h>
#include <stdint.h>

#include "tui/model/model.h"

// What the loader keeps per rank between refreshes (ModelRank.loader).
typedef struct RankLoader {
    char path[4200];
    sqlite3 *db;
    sqlite3_stmt *others, *hook_iters, *hook_rows, *count_new; // read_rank's statements
    int64_t newest_seq;   // the newest event applied so far (hooks are applied out of order)
    int bitmap_bytes;     // size of each ModelIter bitmap
    int64_t *param_numel; // the rank's own params table (layout sizes), n_params entries
    // The LAYOUT records of the generation being read (they arrive bucket by bucket, in order).
    int building; // its generation, -1: none
    int64_t building_iter;
    int *b_bucket, *b_var;
    int n_b, cap_b;
    int *coll_by_seq; // seq -> index in colls + 1 (0: none)
    int64_t cap_seq;
    int cur;      // index of the ModelIter the last event went to, -1: none
    int hb_phase; // the newest HEARTBEAT's phase and when that phase began
    int64_t hb_phase_t;
    int ev_phase; // the phase the newest trainer event implies, and since when
    int64_t ev_phase_t;
    int64_t last_trainer_t;
    int last_kind; // kind of the newest trainer event
    // GPU records: kernel names interned, correlation ids mapped to collectives (open
    // addressing; sizes are powers of two, 0 marks a free slot).
    int *name_slots; // index into gpu_names + 1
    int cap_names;
    int64_t *corr_keys, *corr_seqs;
    int cap_corr, n_corr;
} RankLoader;

// One row of events, as the fold reads it.
typedef struct Event {
    int64_t seq, t, iter, c, d;
    int kind, a, b, flags;
    const char *text; // NULL unless the kind carries text the model keeps
} Event;

// Folds one event into r. Events come in seq order, except that hook rows (GRAD_READY,
// MARK_READY) may come after the other events of their read (the phase follows the newest).
void fold_event(ModelRank *r, RankLoader *L, const Event *e);
// Ends a layout whose LAYOUT records were the last events folded (a no-op otherwise).
void fold_finish_layout(ModelRank *r, RankLoader *L);
// The ModelIter of iteration iter, created (in order) when absent.
ModelIter *fold_iter(ModelRank *r, RankLoader *L, int64_t iter);
// Grows every iteration's bitmaps to bytes (params that arrived after iterations did).
void fold_grow_bitmaps(ModelRank *r, RankLoader *L, int bytes);
void fold_iter_free(ModelIter *it);
static inline void fold_set_bit(uint8_t *bits, int i) {
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

#endif
