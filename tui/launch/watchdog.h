/* watchdog.h -- the launcher's hang watchdog: reads every local rank's live phase from its
 * ring header (probe/probe.h) and, for the summary, its trace database. A hang is a rank
 * that has waited in a collective for longer than the timeout while no other rank of this
 * node is still working (each one waits in a collective too, or has exited). A rank waiting
 * while another still computes is a straggler: said once, not a hang. A certain deadlock is
 * named without waiting for the timeout: when every rank of this node has waited 0.5 s and
 * their pending collectives (the first launched and not completed, from the database and the
 * ring's not yet stored records) cannot pair up -- different sequence numbers, or one number
 * with a different op or size -- its summary starts "hang: certain deadlock: ...". Waits in
 * the same collective everywhere may still be a slow transfer: they keep the timeout. On a hang the watchdog
 * prints a summary (per rank: iteration, phase, last collective launched and completed, the
 * buckets not launched; who waits for whom) and appends it as a HANG record to every rank's
 * ring, so that it lands in each rank<R>.db. */
#ifndef TUI_WATCHDOG_H
#define TUI_WATCHDOG_H

#include <stdbool.h>
#include <stdio.h>

typedef struct Watchdog Watchdog;

// dir: the trace directory; ranks[0..n): the global ranks launched here; timeout_s > 0.
Watchdog *watchdog_new(const char *dir, const int *ranks, int n, double timeout_s);
void watchdog_free(Watchdog *w);

// One look, every few hundred ms: exited[i] says rank i (of ranks[]) has exited. Returns true
// once, the first time a hang is seen, after writing the summary to out and the HANG records.
bool watchdog_poll(Watchdog *w, const bool *exited, FILE *out);

#endif
