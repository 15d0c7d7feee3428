/* fr_import.h -- `ddpdbg import-fr DIR [--out OUT] [--prefix P] [--pg NAME]`: PyTorch's NCCL
 * Flight Recorder dumps (flightrec.h; one per rank, named TORCH_NCCL_DEBUG_INFO_TEMP_FILE's
 * prefix followed by the rank: DIR/nccl_trace_rank_0, ...) into a ddpdbg trace directory OUT
 * (default DIR/ddpdbg-trace) that `report`, `tui` and `export` read like a recorded run's.
 *
 * Each dump becomes OUT/rank<R>.db, written through the probe's writer (probe_db_write): the
 * collectives of one process group only (the default group unless --pg names another by name
 * or description), as COLL_LAUNCH at their time_created_ns with their collective_seq_id, op,
 * elements and "<dtype> [<sizes>]", and COLL_DONE when completed; no parameters, iterations or
 * hooks (a dump has none; every collective is at iteration -1). Point-to-point entries and
 * other groups are counted and left out. When a rank waits in a collective that is not
 * completed, every trace also gets a HANG record like the launcher watchdog's: "Flight
 * Recorder: rank 0 waits in collective #12 (...), which rank 1 never joined", then a line per
 * rank (enqueued and completed up to, timed out by its watchdog, no dump) and who waits for
 * whom. So `report OUT` names the first collective that differs (a mismatch), the ranks that
 * never joined, and who waits for whom.
 *
 * Exit status 0; 2 with one line on stderr for bad usage, no dumps, or a dump that cannot be
 * read (a foreign or damaged pickle: see pickle.h; nothing in it is executed). */
#ifndef TUI_POSTMORTEM_FR_IMPORT_H
#define TUI_POSTMORTEM_FR_IMPORT_H

// Runs `ddpdbg import-fr ARGS...` (argv[0] is "import-fr"); returns the exit status.
int import_fr_command(int argc, char **argv);

#endif
