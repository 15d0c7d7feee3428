/* logscan.h -- the DDP errors in a training log as users paste it: torchrun's "[rankN]:" (or
 * "[defaultN]:") line prefixes or none, the ranks' lines interleaved, tracebacks and other
 * output around the errors, terminal colours, lines folded at a fixed width or wrapped by a
 * mail client or blog (mid-word too), Chinese or any other text before and after, and the log
 * cut anywhere, even inside a list of parameter names.
 *
 * How: each line goes to its rank's stream (a line without a prefix to the stream of the
 * prefixed line above it, else to the stream of unprefixed lines, rank -1). Errors are found
 * by their phrases with every space and line break taken out, so a phrase folded in the middle
 * of a word is still found. The lists in them (names, indices) are read from the lines as
 * printed: PyTorch prints each list on one line, so a line break inside one is a wrap, joined
 * without a space where it cut a word (a number that would break the list's ascending order,
 * a line exactly as long as the log's fold width). A list that does not end as PyTorch ends
 * it (names are followed by the indices line) was cut: what was read is kept, the partial last
 * token is set apart.
 *
 * What is found, PyTorch's texts (../shared/docs/ddp-reducer.md §4, §6): the unfinished
 * reduction (with find_unused_parameters off or on, static_graph, or before 1.9), with the
 * names (TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL) and the indices; the reducer's INFO lines
 * naming each parameter that got no gradient; "marked ready twice"; the static graph's "graph
 * has changed"; the construction checks of the parameter count and shapes; Gloo's timeouts
 * and "Connection closed by peer"; the NCCL watchdog's timeout with its sequence number, op
 * and elements; DETAIL's monitored barrier and collective mismatch. Also the context a log may
 * hold: DDP's construction summary (world size, parameter tensors, find_unused_parameters,
 * the debug level) and the box count of the last Ultralytics progress line before an error. */
#ifndef TUI_POSTMORTEM_LOGSCAN_H
#define TUI_POSTMORTEM_LOGSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum LogKind {
    LOG_UNFINISHED_REDUCTION, // "Expected to have finished reduction in the prior iteration ..."
    LOG_MARKED_TWICE,         // "Expected to mark a variable ready only once. ..."
    LOG_GRAPH_CHANGED,        // "Your training graph has changed in this iteration, ..."
    LOG_PARAM_COUNT,   // "DDP expects same model across all ranks, but Rank R has N params, ..."
    LOG_PARAM_SHAPE,   // "[R]: params[P] in this process with sizes [..] appears not to match ..."
    LOG_GLOO_TIMEOUT,  // "Timed out waiting Nms for recv operation to complete"
    LOG_PEER_CLOSED,   // "Connection closed by peer [addr]:port"
    LOG_NCCL_WATCHDOG, // "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=...)"
    LOG_MONITORED_BARRIER,  // "... monitoredBarrier ..." (TORCH_DISTRIBUTED_DEBUG=DETAIL)
    LOG_COLLECTIVES_DIFFER, // "Detected mismatch between collectives on ranks. ..." (DETAIL)
    LOG_KIND_COUNT
} LogKind;

// The unfinished reduction's text (ddp-reducer.md §4.1).
typedef enum LogVariant {
    VARIANT_DEFAULT,     // (a) find_unused_parameters=False
    VARIANT_FIND_UNUSED, // (b) "Since `find_unused_parameters=True` is enabled, ..."
    VARIANT_STATIC,      // (c) "... your training graph has changed ... static_graph set to True."
    VARIANT_OLD,         // PyTorch <= 1.8: "(1) passing the keyword argument ...", no list
} LogVariant;

// A list of parameters as the log prints it.
typedef struct LogList {
    bool present;    // the text has this list
    char **names;    // names, as printed (unordered_map order), for the names list
    int64_t *values; // indices, as printed (ascending), for the indices list
    int n;
    bool cut;          // it does not end as PyTorch ends it: the log was cut inside it
    char partial[128]; // the cut token ("model.28.dec_bbox"), "" when none
    int line;          // where it starts (1-based line of the log)
} LogList;

typedef struct LogError {
    LogKind kind;
    int rank;        // the rank it happened on: the text's, else the line prefix's; -1 unknown
    int line;        // the log's line where it starts (1-based)
    int count;       // times the log holds it (the same error printed again counts once)
    char first[256]; // its first sentence as printed, spaces squeezed
    LogVariant variant;
    LogList names, indices; // the unfinished reduction's; marked twice: one of each, at most
    bool debug_off_suffix;  // "In addition, you can set ... TORCH_DISTRIBUTED_DEBUG ..."
    int other_rank;         // the other rank the text names (count mismatch, monitored barrier), -1
    int64_t a, b;           // count mismatch: this rank's and the other's counts; shape: the index;
                            // NCCL: the sequence number and NumelIn; Gloo timeout: the ms
    int64_t timeout_ms, ran_ms, last_enqueued, last_completed; // NCCL watchdog (-1: absent)
    char what[96]; // shape: "[5, 8]"; NCCL: "ALLREDUCE"; peer closed: "[127.0.0.1]:29500";
                   // Gloo timeout: "recv"
} LogError;

typedef struct LogScan {
    LogError *errors; // in the order the log first shows them
    int n;
    int n_lines;
    int *prefix_ranks; // the ranks of the [rankN]: prefixes seen, ascending
    int n_prefix_ranks;
    int max_rank;        // highest rank seen in a prefix or an error (-1: none)
    int world;           // from DDP's summary ("world_size: 2") or torchrun's --nproc_per_node; 0
    char world_from[24]; // "DDP's summary", "--nproc_per_node"
    int n_params;        // DDP's summary "num_parameter_tensors: N"; 0 when absent
    int debug;           // DDP's summary "torch_distributed_debug": 0 OFF, 1 INFO, 2 DETAIL; -1
    int find_unused;     // DDP's summary find_unused_parameters: 0, 1; -1 absent
    int fold_width;      // lines of exactly this width were folded (0: no fold seen)
    bool ends_in_line;   // the log does not end with a line break
    // per rank (0..max_rank): the reducer's INFO lines "[Rank R] Parameter: NAME did not get
    // gradient in backwards pass." and the box count of the last Ultralytics progress line
    // before the rank's first error (-1: none)
    char ***info_names;
    int *n_info_names;
    int *boxes;
} LogScan;

// Scans text[0..len) (any bytes). Never fails; a log without DDP errors gives n == 0.
void log_scan(const char *text, size_t len, LogScan *out);
void log_scan_free(LogScan *s);

// "unfinished_reduction", "marked_twice", ...: stable names (JSON, tests).
const char *log_kind_name(LogKind kind);

#endif
