/* facts.h -- what the views read off a Model (tui/model/model.h): a rank's state as of a time, the
 * bucket that blocks all later ones, the parameters a bucket still waits for, a collective by
 * sequence number, the first divergence of the ranks' collective sequences, the banner, and the
 * number formats the views share. Pure functions of the Model; nothing here allocates. Lookups
 * and names come from the model's own accessors (model_rank_iter, model_op_name, ...:
 * model_fold.c, which needs no database), so the render tests still build a Model by hand. */
#ifndef TUI_FACTS_H
#define TUI_FACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tui/model/model.h"

enum {
    FACTS_HANG_WAIT_S = 5, // a rank waiting this long while no rank works is a hang
};

static inline int facts_bucket_size(const ModelLayout *l, int b) {
    return l->start[b + 1] - l->start[b];
}

// The Ranks view's short phase labels ("in coll" fits the column); elsewhere model_phase_name.
const char *facts_phase_name(int phase); // "backward"

// A rank as of time t_ns. At or after the rank's newest event these are the Model's own fields;
// before it they are reconstructed from the iteration and collective times (a rank is waiting
// when a synchronous collective, or any one after its backward ended, is in flight at t_ns).
typedef struct RankNow {
    bool missing; // no database for this rank: state is RANK_DEAD
    RankState state;
    int64_t iter;                // -1 before the first iteration
    int phase;                   // ProbePhase
    int64_t last_event_ns;       // newest event at or before t_ns (0: none)
    int64_t coll_seq;            // the last collective launched at or before t_ns (0: none)
    const ModelCollective *wait; // RANK_WAITING: the collective (NULL when not recorded)
    int64_t wait_seq, wait_since_ns;
    const ModelCollective *open; // where it is (or stopped): the oldest of its last 64 collectives
                                 // not completed by t_ns, or completed unsuccessfully
} RankNow;
RankNow facts_rank_now(const Model *m, int r, int64_t t_ns);

// The first bucket of it's layout not launched while a later bucket has all its parameters
// ready: the one that blocks every later bucket (buckets launch strictly in index order). -1
// when there is none (or the rank did not run backward in it).
int facts_blocking_bucket(const ModelRank *rk, const ModelIter *it);
// The first bucket of it's layout never launched, -1 when all were (or no layout, no backward).
int facts_first_unlaunched(const ModelRank *rk, const ModelIter *it);
// Parameters of bucket b that it never marked ready, in layout order: writes up to cap of
// them to out and returns how many there are.
int facts_pending(const ModelRank *rk, const ModelIter *it, int b, int *out, int cap);

// The smallest sequence number at which the ranks' collectives differ (op, what, bucket or
// numel), or at which a rank that has stopped (errored, dead, finished, waiting elsewhere)
// never issued what another rank did; 0 when they agree. why: one line ("rank 0 never issued
// #12 (allreduce bucket 0)").
int64_t facts_first_divergence(const Model *m, int64_t t_ns, char *why, size_t n);

typedef enum BannerKind { BANNER_NONE, BANNER_HANG, BANNER_ERROR, BANNER_DEAD } BannerKind;
// The banner as of t_ns, ages measured at now_ns: HANG when a rank has a HANG record or waits
// longer than FACTS_HANG_WAIT_S while no rank runs; ERROR when a rank errored; DEAD when a rank
// died. text: one line naming the ranks, the collective, and the bucket and parameters that
// hold it up.
BannerKind facts_banner(const Model *m, int64_t t_ns, int64_t now_ns, char *text, size_t n);

// Number formats: "0.4s" "12s" "3m05s"; "32.8M" "396.6k" "244"; rank lists "0-3,5,9".
char *facts_fmt_age(int64_t ns, char *buf, size_t n);
// A time offset with the precision a span of span_ns needs: "0.312s" (span under 2 s),
// "4.71s" (under 20 s), "47.1s", then as facts_fmt_age.
char *facts_fmt_offset(int64_t ns, int64_t span_ns, char *buf, size_t n);
// The same with its sign, for a moment relative to the trace's start: "+0.312s", "-0.002s"
// (events recorded before the first iteration, such as the initial bucket layout); a value
// that rounds to zero is "+0.000s".
char *facts_fmt_at(int64_t ns, int64_t span_ns, char *buf, size_t n);
char *facts_fmt_count(int64_t v, char *buf, size_t n);
char *facts_fmt_ranks(const int *ranks, int count, char *buf, size_t n);
// The first line (up to the first '\n' or ". ") of an error text, at most n - 1 bytes.
char *facts_first_sentence(const char *text, char *buf, size_t n);

#endif
