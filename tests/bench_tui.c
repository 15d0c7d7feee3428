/* bench_tui.c -- one frame of every view (ui_render into a Screen: the views, the header's
 * banner, the layout; no terminal) on the field-report fixture (tests/tui_fixture.h) grown to
 * 256 ranks x 575 parameters, at 80x24 and 300x100: the median and the worst of 51 frames per
 * view and size. The target is a median of at most 16 ms (60 frames a second); it is printed,
 * not asserted (timings live in make bench). The teaching view replays rank 0's and rank 1's
 * iteration-1 backward (~1200 events); stepping back (b) replays from the start, so its cost is
 * timed too. Exit 1 only if a frame came out empty. */
#include "tui/views/facts.c"
#include "tui/views/layout.c"
#include "tui/model/paramgroup.c"
#include "tui/views/screen.c"
#include "tui/teach/teach.c"
#include "tui/views/ui.c"
#include "tui/views/view_buckets.c"
#include "tui/views/view_collectives.c"
#include "tui/views/view_diagnosis.c"
#include "tui/views/view_params.c"
#include "tui/views/view_ranks.c"
#include "tui/teach/view_teach.c"
#include "tui/views/view_timeline.c"

#include <time.h>

#include "tests/tui_fixture.h"

enum { FRAMES = 51, WORLD = 256 };

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Times FRAMES renders of ui's view; prints one line; returns the median in ms (or -1 when
// the frame was empty).
static double bench(const char *name, const Model *m, Ui *ui, int cols, int rows) {
    Screen s = {0};
    screen_resize(&s, rows, cols);
    double t[FRAMES];
    for (int i = 0; i < FRAMES; i++) {
        double t0 = now_ms();
        ui_render(&s, m, ui);
        t[i] = now_ms() - t0;
    }
    bool empty = !screen_has(&s, "ddpdbg") && !screen_has(&s, "HANG");
    screen_free(&s);
    qsort(t, FRAMES, sizeof(double), cmp_double);
    printf("  %-13s %3dx%-3d  median %7.3f ms  max %7.3f ms%s\n", name, cols, rows, t[FRAMES / 2],
           t[FRAMES - 1], t[FRAMES / 2] <= 16 ? "" : "  (over 16 ms)");
    return empty ? -1 : t[FRAMES / 2];
}

// As teach_load orders events: by time, then rank.
static int cmp_event_for_bench(const void *pa, const void *pb) {
    const TeachEvent *a = pa, *b = pb;
    if (a->t_ns != b->t_ns) return a->t_ns < b->t_ns ? -1 : 1;
    return a->rank - b->rank;
}

// Rank 0's and rank 1's iteration-1 backward as the teaching mode replays them.
static int teach_events(const Model *m, TeachEvent **out) {
    int cap = 4 * FIX_PARAMS + 16, n = 0;
    TeachEvent *ev = xcalloc((size_t)cap, sizeof(TeachEvent));
    for (int r = 0; r < 2; r++) {
        const ModelLayout *l = &m->ranks[r].layouts[1];
        int64_t t = FIX_T0 + 2500000000 + r;
        ev[n++] = (TeachEvent){.rank = r, .t_ns = t, .iter = 1, .kind = PROBE_BACKWARD_BEGIN};
        for (int k = FIX_PARAMS - 1; k >= 0; k--) {
            int p = l->vars[k], b = 0;
            while (k >= l->start[b + 1])
                b++;
            if (r == 0 && fix_is_unused(p)) continue;
            t += 2;
            ev[n++] = (TeachEvent){
                .rank = r, .t_ns = t, .iter = 1, .kind = PROBE_GRAD_READY, .a = p, .c = 1};
            ev[n++] = (TeachEvent){
                .rank = r, .t_ns = t, .iter = 1, .kind = PROBE_MARK_READY, .a = p, .b = b};
        }
        ev[n++] =
            (TeachEvent){.rank = r, .t_ns = t + 2, .iter = 1, .kind = PROBE_BUCKET_READY, .b = 3};
    }
    qsort(ev, (size_t)n, sizeof(TeachEvent), cmp_event_for_bench);
    *out = ev;
    return n;
}

int main(void) {
    Model m;
    fixture_field_report(&m, WORLD);
    printf("bench_tui: %d ranks x %d parameters, %d frames per view and size\n", m.world,
           m.n_params, FRAMES);
    static const int sizes[2][2] = {{80, 24}, {300, 100}};
    static const char *names[VIEW_COUNT] = {"ranks",    "buckets",   "parameters", "collectives",
                                            "timeline", "diagnosis", "teach"};
    TeachEvent *ev;
    int n = teach_events(&m, &ev);
    Teach teach;
    teach_init(&teach, &m, ev, n, 1, 1);
    teach_seek(&teach, &m, n - 1);
    double worst = 0;
    int status = 0;
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < VIEW_COUNT; v++) {
            Ui ui;
            ui_init(&ui, &m, false, v == VIEW_TEACH ? &teach : NULL);
            ui.view = (ViewId)v;
            double med = bench(names[v], &m, &ui, sizes[k][0], sizes[k][1]);
            if (med < 0) status = 1;
            worst = MAX(worst, med);
        }
    { // the Parameters view with a search over all 575 names, and the whole model's rank 200
        Ui ui;
        ui_init(&ui, &m, false, NULL);
        ui.view = VIEW_PARAMS;
        snprintf(ui.search, sizeof ui.search, "dec_");
        worst = MAX(worst, bench("params /dec_", &m, &ui, 300, 100));
        ui.search[0] = 0, ui.rank = 200;
        worst = MAX(worst, bench("params r200", &m, &ui, 300, 100));
    }
    double t0 = now_ms();
    teach_key(&teach, &m, 'b'); // a step back replays every event before
    printf("  teach: a step back replays %d events in %.3f ms\n", n - 1, now_ms() - t0);
    printf("bench_tui: slowest median %.3f ms (target <= 16 ms)\n", worst);
    teach_free(&teach);
    fixture_free(&m);
    return status;
}
