/* test_logscan.c -- the log scanner (tui/postmortem/logscan.h) on the ways a pasted log differs
 * from what PyTorch printed: ranks' lines interleaved, no prefixes, colours and carriage
 * returns, lines folded at a fixed width (inside a word, inside a number), lists wrapped or cut
 * at the end of the log, the same error printed twice, and the other texts and context it reads
 * (the construction checks, Gloo and NCCL timeouts, DDP's summary, Ultralytics' progress).
 * The real logs (tests/fixtures/postmortem/logs/) go through `ddpdbg explain` in
 * tests/cli/explain.sh. */
#include <stdlib.h>
#include <string.h>

#include "tests/expect.h"
#include "tui/postmortem/logscan.h"

#define UNFINISHED                                                                                 \
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a "  \
    "new one. This error indicates that your module has parameters that were not used in "         \
    "producing loss. You can enable unused parameter detection by passing the keyword argument "   \
    "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by \n"      \
    "making sure all `forward` function outputs participate in calculating loss. \n"               \
    "If you already have done the above, then the distributed data parallel module wasn't able "   \
    "to locate the output tensors in the return value of your module's `forward` function.\n"

static LogScan scan(const char *text) {
    LogScan s;
    log_scan(text, strlen(text), &s);
    return s;
}

// The log with every line prefixed by "[rankR]:" (R from ranks, cycling line by line when two).
static char *prefixed(const char *text, int rank) {
    size_t n = strlen(text), at = 0;
    char *out = calloc(2 * n + 64, 1);
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        at += (size_t)sprintf(out + at, "[rank%d]:%.*s\n", rank, (int)len, p);
        p += len + (p[len] == '\n');
    }
    return out;
}

// Folds every line at width characters, as `fold -w` or a mail client does.
static char *folded(const char *text, int width) {
    size_t n = strlen(text), at = 0;
    char *out = calloc(2 * n + 64, 1);
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        for (size_t k = 0; k < len; k += (size_t)width)
            at += (size_t)sprintf(out + at, "%.*s\n",
                                  (int)(len - k < (size_t)width ? len - k : (size_t)width), p + k);
        if (!len) out[at++] = '\n';
        p += len + (p[len] == '\n');
    }
    return out;
}

static void test_off_and_info(void) {
    LogScan s =
        scan("Epoch 3 ...\n" UNFINISHED
             "Parameter indices which did not receive grad for rank 1: 3 5 7 510 521\n"
             " In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to "
             "either INFO or DETAIL to print out information\n");
    EXPECT(s.n == 1 && s.errors[0].kind == LOG_UNFINISHED_REDUCTION, "%d errors", s.n);
    if (s.n) {
        const LogError *e = &s.errors[0];
        EXPECT(e->rank == 1 && e->line == 2 && e->variant == VARIANT_DEFAULT && e->debug_off_suffix,
               "rank %d line %d", e->rank, e->line);
        EXPECT(e->indices.n == 5 && e->indices.values[3] == 510 && e->indices.values[4] == 521 &&
                   !e->indices.cut && !e->names.present,
               "indices %d", e->indices.n);
    }
    log_scan_free(&s);

    s = scan(UNFINISHED "Parameters which did not receive grad for rank 0: b.weight, a.b_c.0.bias\n"
                        "Parameter indices which did not receive grad for rank 0: 4 9\n");
    EXPECT(s.n == 1 && s.errors[0].names.n == 2 &&
               !strcmp(s.errors[0].names.names[1], "a.b_c.0.bias") && !s.errors[0].names.cut &&
               s.errors[0].indices.n == 2,
           "INFO names and indices");
    log_scan_free(&s);
}

// Two ranks' lines interleaved (torchrun): each rank's lines read as its own text.
static void test_interleaved(void) {
    const char *log = "[rank0]:Traceback (most recent call last):\n"
                      "[rank1]:iteration 1\n"
                      "[rank0]:RuntimeError: Expected to have finished reduction in the prior "
                      "iteration before starting a new one. This error indicates\n"
                      "[rank1]:Parameters which did not receive grad for rank 5: not.this\n"
                      "[rank0]:Parameters which did not receive grad for rank 0: x.weight, \n"
                      "[rank1]:RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed "
                      "by peer [10.0.0.2]:29500\n"
                      "[rank0]:y.bias\n"
                      "[rank0]:Parameter indices which did not receive grad for rank 0: 1 2\n";
    LogScan s = scan(log);
    EXPECT(s.n == 2 && s.n_prefix_ranks == 2 && s.max_rank == 1, "%d errors, %d prefix ranks", s.n,
           s.n_prefix_ranks);
    if (s.n == 2) {
        const LogError *e = &s.errors[0];
        EXPECT(e->kind == LOG_UNFINISHED_REDUCTION && e->rank == 0 && e->line == 3,
               "rank %d line %d", e->rank, e->line);
        EXPECT(e->names.n == 2 && !strcmp(e->names.names[0], "x.weight") &&
                   !strcmp(e->names.names[1], "y.bias") && !e->names.cut,
               "rank 0's names, across rank 1's lines: %d", e->names.n);
        EXPECT(s.errors[1].kind == LOG_PEER_CLOSED && s.errors[1].rank == 1 &&
                   !strcmp(s.errors[1].what, "[10.0.0.2]:29500"),
               "closed: %s", s.errors[1].what);
    }
    log_scan_free(&s);
}

// Folded at 40 columns: phrases cut mid-word, a name cut in two, a number cut in two.
static void test_folded(void) {
    char text[4096];
    snprintf(
        text, sizeof text, "%s%s%s", UNFINISHED,
        "Parameters which did not receive grad for rank 2: model.28.dec_bbox_head.5.layers.2.bias, "
        "model.28.dec_bbox_head.5.layers.2.weight\n",
        "Parameter indices which did not receive grad for rank 2: 100 101 102 103 104 105 106 "
        "107 108 109 110 111 112 113 114 115\n");
    char *f = folded(text, 40);
    LogScan s = scan(f);
    EXPECT(s.fold_width == 40, "fold width %d", s.fold_width);
    EXPECT(s.n == 1 && s.errors[0].rank == 2, "%d errors", s.n);
    if (s.n) {
        const LogError *e = &s.errors[0];
        EXPECT(e->names.n == 2 &&
                   !strcmp(e->names.names[1], "model.28.dec_bbox_head.5.layers.2.weight"),
               "names: %d, second %s", e->names.n, e->names.n > 1 ? e->names.names[1] : "-");
        EXPECT(e->indices.n == 16 && e->indices.values[15] == 115, "indices: %d", e->indices.n);
        for (int k = 0; k < e->indices.n; k++)
            EXPECT(e->indices.values[k] == 100 + k, "index %d is %lld", k,
                   (long long)e->indices.values[k]);
        EXPECT(!strncmp(e->first,
                        "Expected to have finished reduction in the prior iteration before", 64),
               "first sentence across the fold: '%s'", e->first);
    }
    log_scan_free(&s);
    free(f);

    // A wrap that cut a number, no fold width: the indices' ascending order decides.
    s = scan(UNFINISHED "Parameter indices which did not receive grad for rank 0: 518 519 52\n"
                        "0 521 522\n");
    EXPECT(s.n == 1 && s.errors[0].indices.n == 5 && s.errors[0].indices.values[2] == 520,
           "518 519 520 521 522: %d", s.n ? s.errors[0].indices.n : -1);
    log_scan_free(&s);
}

// The log ends inside a list: what was read is kept, the cut token set apart.
static void test_cut(void) {
    char *p = prefixed(
        UNFINISHED "Parameters which did not receive grad for rank 0: "
                   "m.dec_bbox_head.5.layers.2.bias, m.dec_bbox_head.5.layers.2.weight, m.dec_bb",
        0);
    LogScan s = scan(p);
    EXPECT(s.n == 1 && s.errors[0].names.cut && s.errors[0].names.n == 2 &&
               !strcmp(s.errors[0].names.partial, "m.dec_bb") && s.errors[0].names.line == 4,
           "names cut: %d read, partial '%s'", s.n ? s.errors[0].names.n : -1,
           s.n ? s.errors[0].names.partial : "");
    log_scan_free(&s);
    free(p);
    // Chinese text after a names list that was cut: the list still ends there.
    s = scan(UNFINISHED "Parameters which did not receive grad for rank 0: a.weight, a.bi\n"
                        "\xe8\xaf\xb7\xe9\x97\xae\xe8\xbf\x99\xe6\x98\xaf\xe4\xbb\x80\xe4\xb9\x88"
                        "\xe5\x8e\x9f\xe5\x9b\xa0\n");
    EXPECT(s.n == 1 && s.errors[0].names.cut && s.errors[0].names.n == 1 &&
               !strcmp(s.errors[0].names.partial, "a.bi"),
           "cut before other text");
    log_scan_free(&s);
    // Indices cut: the log stops without a line break inside a number.
    s = scan(UNFINISHED "Parameter indices which did not receive grad for rank 0: 6 7 8 1");
    EXPECT(s.n == 1 && s.ends_in_line && s.errors[0].indices.cut && s.errors[0].indices.n == 3 &&
               !strcmp(s.errors[0].indices.partial, "1"),
           "indices cut");
    log_scan_free(&s);
}

// Colours, carriage returns (progress bars, CRLF), the same error twice, no DDP error.
static void test_noise(void) {
    LogScan s =
        scan("\x1b[31mRuntimeError: Expected to mark a variable ready only once.\x1b[0m ...\r\n"
             "Parameter at index 3 with name enc.weight has been marked as ready twice.\r\n"
             "progress 10%\rprogress 50%\rRuntimeError: Expected to mark a variable ready only "
             "once. x\n");
    EXPECT(s.n == 1 && s.errors[0].kind == LOG_MARKED_TWICE && s.errors[0].count == 2, "%d errors",
           s.n);
    if (s.n) {
        EXPECT(s.errors[0].indices.n == 1 && s.errors[0].indices.values[0] == 3 &&
                   s.errors[0].names.n == 1 && !strcmp(s.errors[0].names.names[0], "enc.weight"),
               "index 3, enc.weight");
        EXPECT(!strcmp(s.errors[0].first, "Expected to mark a variable ready only once."), "'%s'",
               s.errors[0].first);
    }
    log_scan_free(&s);
    s = scan("loss 0.5\nTimed out waiting for clients. 1/2 clients joined.\nall good\n");
    EXPECT(s.n == 0 && s.n_lines == 3, "no DDP error: %d", s.n);
    log_scan_free(&s);
    s = scan("");
    EXPECT(s.n == 0 && s.n_lines == 0, "empty");
    log_scan_free(&s);
}

static void test_other_kinds(void) {
    LogScan s = scan(
        "[rank1]:RuntimeError: DDP expects same model across all ranks, but Rank 1 has 20 params, "
        "while rank 0 has inconsistent 18 params.\n"
        "[rank2]:RuntimeError: [2]: params[10] in this process with sizes [5, 8] appears not to "
        "match "
        "sizes of the same param in process 0.\n"
        "[rank3]:RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
        "1800000ms "
        "for recv operation to complete\n"
        "[rank4]:[E ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective operation "
        "timeout: "
        "WorkNCCL(SeqNum=456, OpType=ALLREDUCE, NumelIn=65297, NumelOut=65297, Timeout(ms)=600000) "
        "ran "
        "for 600054 milliseconds before timing out.\n"
        "[rank4]:[E ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank 4] Exception "
        "(either an error or timeout) detected by watchdog at work: 456, last enqueued NCCL work: "
        "456, "
        "last completed NCCL work: 455.\n"
        "[rank5]:RuntimeError: Your training graph has changed in this iteration, e.g., one "
        "parameter "
        "is unused in first iteration\n"
        "[rank6]:RuntimeError: Rank 6 successfully reached monitoredBarrier, but received errors "
        "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n");
    EXPECT(s.n == 6, "%d errors", s.n);
    for (int i = 0; i < s.n; i++) {
        const LogError *e = &s.errors[i];
        EXPECT(e->rank == i + 1 || (i == 5 && e->rank == 6), "error %d (%s) rank %d", i,
               log_kind_name(e->kind), e->rank);
    }
    if (s.n == 6) {
        EXPECT(s.errors[0].kind == LOG_PARAM_COUNT && s.errors[0].a == 20 && s.errors[0].b == 18 &&
                   s.errors[0].other_rank == 0,
               "count");
        EXPECT(s.errors[1].kind == LOG_PARAM_SHAPE && s.errors[1].a == 10 &&
                   !strcmp(s.errors[1].what, "[5, 8]"),
               "shape: %lld %s", (long long)s.errors[1].a, s.errors[1].what);
        EXPECT(s.errors[2].kind == LOG_GLOO_TIMEOUT && s.errors[2].a == 1800000 &&
                   !strcmp(s.errors[2].what, "recv"),
               "gloo");
        const LogError *n = &s.errors[3];
        EXPECT(n->kind == LOG_NCCL_WATCHDOG && n->a == 456 && n->b == 65297 &&
                   n->timeout_ms == 600000 && n->ran_ms == 600054 && n->last_enqueued == 456 &&
                   n->last_completed == 455 && !strcmp(n->what, "ALLREDUCE"),
               "nccl %lld %lld %s", (long long)n->a, (long long)n->b, n->what);
        EXPECT(s.errors[4].kind == LOG_GRAPH_CHANGED, "graph changed");
        EXPECT(s.errors[5].kind == LOG_MONITORED_BARRIER && s.errors[5].other_rank == 0, "barrier");
    }
    log_scan_free(&s);
}

// DETAIL's fingerprint check (ProcessGroupWrapper), as modelscope/ms-swift#9443 quotes it.
static void test_collectives_differ(void) {
    LogScan s = scan("[rank1]:RuntimeError: Detected mismatch between collectives on ranks. Rank 1 "
                     "is running collective: CollectiveFingerPrint(SequenceNumber=3104, "
                     "OpType=ALLREDUCE, TensorShape=[195812480]), but Rank 0 is running collective: "
                     "CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, "
                     "TensorShape=[51123456]).Collectives differ in the following aspects: \t "
                     "Tensor Tensor shapes: 195812480vs 51123456\n");
    EXPECT(s.n == 1 && s.errors[0].kind == LOG_COLLECTIVES_DIFFER && s.errors[0].rank == 1 &&
               !strcmp(s.errors[0].first, "Detected mismatch between collectives on ranks."),
           "%d errors", s.n);
    log_scan_free(&s);
}

// DDP's construction summary, torchrun's world size, the reducer's INFO lines, and the box
// count of the Ultralytics progress line before the error.
static void test_context(void) {
    LogScan s = scan(
        "[rank0]:I20261202 reducer.cpp:126] Reducer initialized\n"
        "[rank0]:world_size: 2\n[rank0]:num_parameter_tensors: 575\n"
        "[rank0]:find_unused_parameters: 0\n[rank0]:torch_distributed_debug: INFO\n"
        "[rank0]:      Epoch    GPU_mem  giou_loss   cls_loss    l1_loss  Instances       Size\n"
        "[rank0]:        1/1         0G      1.616       11.9      1.954          3         96: "
        "33%\n"
        "[rank0]:        1/1         0G     0.8079      30.56     0.9769          0         96: "
        "66%\n"
        "[rank0]:I20261202 reducer.cpp:1856] [Rank 0] Parameter: a.weight did not get gradient in "
        "backwards pass.\n"
        "[rank0]:RuntimeError: Expected to have finished reduction in the prior iteration before "
        "starting a new one.\n");
    EXPECT(s.world == 2 && !strcmp(s.world_from, "DDP's summary") && s.n_params == 575 &&
               s.find_unused == 0 && s.debug == 1,
           "summary: %d %d %d %d", s.world, s.n_params, s.find_unused, s.debug);
    EXPECT(s.n == 1 && s.boxes[0] == 0, "the progress line before the error: %d",
           s.max_rank >= 0 ? s.boxes[0] : -9);
    EXPECT(s.n_info_names[0] == 1 && !strcmp(s.info_names[0][0], "a.weight"), "INFO names");
    log_scan_free(&s);
    s = scan("$ python -m torch.distributed.run --nproc_per_node=3 main.py\n");
    EXPECT(s.world == 3 && !strcmp(s.world_from, "--nproc_per_node"), "world %d", s.world);
    log_scan_free(&s);
}

int main(void) {
    test_off_and_info();
    test_interleaved();
    test_folded();
    test_cut();
    test_noise();
    test_other_kinds();
    test_collectives_differ();
    test_context();
    return expect_report();
}
