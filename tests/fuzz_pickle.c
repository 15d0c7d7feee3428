/* fuzz_pickle.c -- libFuzzer target: the Flight Recorder reader (tui/postmortem/flightrec.h,
 * fr_dump_read, through the pickle reader pickle.h) on arbitrary bytes, as a dump file holds
 * them. Beyond "no crash, leak or undefined behaviour, and nothing executed" it checks the
 * contract: a rejected input gets one line of error; an accepted one is a 2.x dump whose
 * entries have a state and an op. Then the pickle reader alone: an accepted pickle has a root,
 * and a dict lookup on it never fails. Seeds: the dumps of
 * tests/fixtures/postmortem/make_fr_dumps.py (good and bad ones). */
#include "tests/fuzz_util.h"
#include "tui/postmortem/flightrec.h"
#include "tui/postmortem/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024] = "";
    FrDump d;
    if (fr_dump_read(data, size, &d, err, sizeof err)) {
        FUZZ_CHECK(err[0] && !strchr(err, '\n'), "rejected without one line of error: '%s'", err);
        FUZZ_CHECK(!d.entries && !d.groups && !d.n_entries, "rejected, but entries were returned");
    } else {
        FUZZ_CHECK(!strncmp(d.version, "2.", 2), "accepted version '%s'", d.version);
        for (int i = 0; i < d.n_entries; i++)
            FUZZ_CHECK(strlen(d.entries[i].state) < sizeof d.entries[i].state, "entry %d", i);
        for (int g = 0; g < d.n_groups; g++)
            FUZZ_CHECK(d.groups[g].n_ranks >= 0 && (d.groups[g].n_ranks == 0 || d.groups[g].ranks),
                       "group %d", g);
        fr_dump_free(&d);
    }
    Pickle *p = pickle_read(data, size, err, sizeof err);
    if (p) {
        FUZZ_CHECK(pickle_root(p), "accepted without a root");
        (void)pickle_get(pickle_root(p), "entries");
        pickle_free(p);
    }
    return 0;
}
