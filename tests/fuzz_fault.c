/* fuzz_fault.c -- libFuzzer target: the fault-spec parser (trainer/fault.h, fault_parse) on
 * arbitrary text, as it comes after `fault=` on the command line (the bytes up to the first
 * NUL). Beyond "no crash, leak or undefined behaviour" it checks fault_parse's contract: a
 * rejected spec gets one message "fault=...: ..."; an accepted one has every key its kind
 * requires, in range (rank in [0, 65536], iter >= 0 where the kind takes one, batches >= 1,
 * ms in [0, 3600000], mb in (0, 1e6], a known phase, a non-empty parameter pattern), and
 * fault_hits finds it. Seeds: one spec of each kind, from the Makefile. */
#include "tests/fuzz_util.h"
#include "trainer/fault.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *spec = malloc(size + 1);
    FUZZ_CHECK(spec, "out of memory");
    memcpy(spec, data, size);
    spec[size] = '\0';
    Fault f;
    char err[1024] = "";
    if (fault_parse(spec, &f, err, sizeof err)) {
        FUZZ_CHECK(!strncmp(err, "fault=", 6) && strstr(err, ": "),
                   "rejected without a 'fault=...: ...' message: '%s'", err);
        free(spec);
        return 0;
    }
    FUZZ_CHECK(f.kind >= FAULT_NOGT && f.kind <= FAULT_SHAPE, "kind %d", (int)f.kind);
    FUZZ_CHECK(f.rank >= 0 && f.rank <= 1 << 16, "'%s': rank %d", spec, f.rank);
    bool takes_iter = f.kind == FAULT_NOGT || f.kind == FAULT_SKIP_BACKWARD ||
                      f.kind == FAULT_NO_SYNC || f.kind == FAULT_KILL;
    FUZZ_CHECK(takes_iter ? f.iter >= 0 : f.iter == -1, "'%s': iter %lld", spec,
               (long long)f.iter);
    if (f.kind == FAULT_UNEVEN) FUZZ_CHECK(f.batches >= 1, "'%s': batches %lld", spec,
                                           (long long)f.batches);
    if (f.kind == FAULT_SLOW)
        FUZZ_CHECK(f.ms >= 0 && f.ms <= 3600 * 1000, "'%s': ms %lld", spec, (long long)f.ms);
    if (f.kind == FAULT_BUCKET_CAP) FUZZ_CHECK(f.mb > 0 && f.mb <= 1e6, "'%s': mb %g", spec, f.mb);
    if (f.kind == FAULT_KILL)
        FUZZ_CHECK(f.phase == FAULT_PHASE_FORWARD || f.phase == FAULT_PHASE_BACKWARD ||
                       f.phase == FAULT_PHASE_ALLREDUCE,
                   "'%s': phase %d", spec, (int)f.phase);
    if (f.kind == FAULT_UNUSED)
        FUZZ_CHECK(f.param[0] && memchr(f.param, '\0', sizeof f.param), "'%s': param pattern",
                   spec);
    FUZZ_CHECK(fault_hits(&f, 1, f.kind, f.rank, f.iter), "'%s': fault_hits misses it", spec);
    free(spec);
    return 0;
}
