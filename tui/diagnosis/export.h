/* export.h -- `ddpdbg export DIR --chrome FILE`: the trace as Chrome trace-event JSON, which
 * ui.perfetto.dev and chrome://tracing open. One process per rank (pid = rank, named
 * "rank R" by process_name metadata), one clock: the trace's CLOCK_REALTIME nanoseconds as
 * microseconds after the earliest event of any rank (the absolute start is in
 * otherData.t0_ns). Threads per rank:
 *   tid 1 "steps"        complete events ("ph":"X") forward, backward, optimiser step, each
 *                        with args {iteration}; a phase that never ended lasts to the rank's
 *                        last event (args unfinished: true); instants "bucket B ready"
 *   tid 10.. "collectives" one complete event per collective from launch to completion, named
 *                        "allreduce bucket 0" / "broadcast buffers", args {seq, bucket, numel,
 *                        what, iteration, ok}; overlapping collectives go to the next thread
 *                        (tid 11, 12, ...) so that every track nests; one that never completed
 *                        lasts to the rank's last event (args completed: false)
 *   tid 100+S "GPU stream S" CUPTI kernels, copies and memsets, when the trace has them
 *   process-scoped instants ("ph":"i", "s":"p") for errors and hangs, args {text}. */
#ifndef TUI_EXPORT_H
#define TUI_EXPORT_H

#include <stdio.h>

#include "tui/model/model.h"

// Runs `ddpdbg export ARGS...` (argv[0] is "export"). Returns 0, or 2 with one line on stderr
// (bad usage, unreadable trace, unwritable FILE).
int export_command(int argc, char **argv);

// Writes m as Chrome trace JSON to out. Returns 0, or -1 when writing failed.
int export_chrome(const Model *m, FILE *out);

#endif
