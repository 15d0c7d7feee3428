/* flightrec.h -- one rank's PyTorch NCCL Flight Recorder dump, read from its pickle
 * (pickle.h) into plain structs. The format is the one FlightRecorder.cpp /
 * NCCLTraceBuffer::dump writes (pytorch/pytorch torch/csrc/distributed/c10d; dump versions
 * "2.0" to "2.10" share what is read here): a dict with
 *   version    "2.4"
 *   pg_config  {pg name: {"name", "desc", "ranks": "[0, 1]"}}
 *   pg_status  {pg id as a string: {"last_enqueued_collective", "last_started_collective",
 *              "last_completed_collective"}} (from 2.3)
 *   entries    [{"record_id", "pg_id", "process_group": (name, desc), "collective_seq_id",
 *              "p2p_seq_id", "op_id", "profiling_name" ("nccl:all_reduce"), "time_created_ns",
 *              "duration_ms" (with TORCH_NCCL_ENABLE_TIMING), "input_sizes" [[d0, d1], ...],
 *              "input_dtypes" ["Float"], "output_sizes", "output_dtypes", "state" ("scheduled",
 *              "started", "completed"), "time_discovered_started_ns" and
 *              "time_discovered_completed_ns" (or None), "retired", "timeout_ms", "is_p2p",
 *              "frames" [{"name", "filename", "line"}]}], in the order recorded.
 * Required: version (2.x), entries (a list), and in each entry record_id, collective_seq_id,
 * profiling_name, state and time_created_ns; the rest may be missing (older versions). */
#ifndef TUI_POSTMORTEM_FLIGHTREC_H
#define TUI_POSTMORTEM_FLIGHTREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct FrEntry {
    int64_t record_id, pg_id, collective_seq_id, p2p_seq_id, op_id;
    char pg_name[64], pg_desc[64]; // process_group (name, desc); "" when absent
    char op[48];                   // profiling_name without its "nccl:" ("all_reduce")
    int64_t time_created_ns;
    int64_t time_started_ns, time_completed_ns; // discovered times; 0: None or absent
    double duration_ms;                         // < 0: absent
    int64_t timeout_ms;                         // 0: absent
    char state[16];                             // "scheduled", "started", "completed"
    bool retired; // the watchdog dropped it (not completed: timed out)
    bool is_p2p;
    int64_t numel_in, numel_out; // sums over the inputs (outputs) of their sizes' products
    char dtype[16];              // the first input's dtype ("Float"), "" without inputs
    char shape[48];              // the first input's sizes as "[1000]", "[2,3]"; "" without
    char site[160];              // the innermost frame outside torch/: "train (train.py:88)"
} FrEntry;

typedef struct FrGroup {
    char name[64], desc[64];
    int *ranks; // global ranks, as pg_config lists them
    int n_ranks;
    // from pg_status (-1: absent)
    int64_t last_enqueued, last_started, last_completed;
} FrGroup;

typedef struct FrDump {
    char version[16];
    FrEntry *entries;
    int n_entries;
    FrGroup *groups; // pg_config's groups, with pg_status matched by the entries' pg_id
    int n_groups;
} FrDump;

// Reads the pickle in data[0..len) as a dump. 0, or -1 with one line in err (the pickle's own
// error, or what the dump lacks: "entry 3: collective_seq_id is a str, expected an int").
int fr_dump_read(const uint8_t *data, size_t len, FrDump *out, char *err, size_t errlen);
void fr_dump_free(FrDump *d);

// The group named name (or with that desc) in d, or NULL.
const FrGroup *fr_group(const FrDump *d, const char *name);

#endif
