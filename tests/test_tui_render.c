/* test_tui_render.c -- the views as pure functions: the hand-built field report at the moment
 * of the hang (tests/tui_fixture.h) rendered at 80x24 into a Screen, each view's text checked:
 * the hang banner, rank 0 errored and rank 1 waiting in #12, rank 0's bucket 0 marked as the
 * one that blocks (26/69), the 43 parameters grouped as model.28.dec_bbox_head.{0..5}... and
 * reported by rank 1, the collectives diverging at #12, the timeline, the diagnosis hook, the
 * teaching mode's explanations; then the keys (views, search, drill-down, iteration scrubber,
 * help, quit), the parameter grouping on its own, and every view at many sizes (nothing but
 * printable ASCII, nothing drawn outside the screen). No terminal. Last, the first screen on
 * the recorded field report (traces/examples/field_report, through model.c and the diagnosis):
 * at 80x24 and at 160x48 it opens on the root cause, naming the never-reported parameters
 * grouped, the bucket that never launched, the collective rank 1 waited in and the top fix.
 *
 * tui/ is not in the library the tests link, so the files under test are compiled in here. */
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

#include "tests/expect.h"
#include "tests/tui_fixture.h"
#include "tui/diagnosis/rootcause.h"

static const char *DEC_BBOX = "model.28.dec_bbox_head.{0..5}.layers.{0..2}.{weight,bias}";

// Renders ui's view of m at cols x rows into s; on a failed EXPECT the caller dumps it.
static void render(Screen *s, const Model *m, Ui *ui, int cols, int rows) {
    screen_resize(s, rows, cols);
    ui_render(s, m, ui);
}

static void dump(const Screen *s, const char *what) {
    char *text = screen_text(s);
    fprintf(stderr, "---- %s:\n%s----\n", what, text);
    free(text);
}

// The text of row y trimmed on the right, into buf (>= cols + 1 bytes).
static const char *row_text(const Screen *s, int y, char *buf) {
    screen_row_text(s, y, buf);
    for (int n = (int)strlen(buf); n > 0 && buf[n - 1] == ' '; n--)
        buf[n - 1] = 0;
    return buf;
}

// The style of the first cell of needle on the screen, or -1.
static int style_of(const Screen *s, const char *needle) {
    int y = screen_find(s, needle);
    if (y < 0) return -1;
    char buf[1024];
    screen_row_text(s, y, buf);
    return s->cells[(size_t)y * (size_t)s->cols + (size_t)(strstr(buf, needle) - buf)].style;
}

static void test_grouping(const Model *m) {
    int idx[FIX_UNUSED], n = 0;
    for (int p = 0; p < FIX_PARAMS; p++)
        if (fix_is_unused(p)) idx[n++] = p;
    ParamGroup *g;
    int ng = paramgroup_build(m->param_names, idx, n, &g);
    EXPECT(ng == 3, "43 field-report parameters: %d groups", ng);
    if (ng == 3) {
        EXPECT(!strcmp(g[0].pattern, DEC_BBOX) && g[0].n == 36, "group 0: %s (%d)", g[0].pattern,
               g[0].n);
        EXPECT(!strcmp(g[1].pattern, "model.28.enc_bbox_head.layers.{0..2}.{weight,bias}") &&
                   g[1].n == 6,
               "group 1: %s (%d)", g[1].pattern, g[1].n);
        EXPECT(!strcmp(g[2].pattern, "model.28.denoising_class_embed.weight") && g[2].n == 1 &&
                   g[2].members[0] == 510,
               "group 2: %s (%d)", g[2].pattern, g[2].n);
        EXPECT(g[0].members[0] == 539 && g[0].members[35] == 574, "group 0 members %d..%d",
               g[0].members[0], g[0].members[35]);
    }
    paramgroup_free(g, ng);

    // a set that is not a full product stays exact: a.0.w a.1.w a.0.b -> two groups, 3 names
    char *names[] = {"a.0.w", "a.1.w", "a.0.b", "x.3.y", "x.5.y", "x.7.y", "x.8.y", "x.9.y", "top"};
    int all[9] = {8, 0, 1, 2, 3, 4, 5, 6, 7};
    ng = paramgroup_build(names, all, 9, &g);
    int total = 0;
    for (int i = 0; i < ng; i++)
        total += g[i].n;
    EXPECT(total == 9, "every name in exactly one group: %d", total);
    bool x = false, a0 = false;
    for (int i = 0; i < ng; i++) {
        x |= !strcmp(g[i].pattern, "x.{3,5,7..9}.y") && g[i].n == 5;
        a0 |= (!strcmp(g[i].pattern, "a.0.{w,b}") || !strcmp(g[i].pattern, "a.{0,1}.w")) &&
              g[i].n == 2;
    }
    EXPECT(x, "x.{3,5,7..9}.y grouped");
    EXPECT(a0, "a.* grouped exactly");
    EXPECT(ng == 4, "4 groups, got %d", ng);
    paramgroup_free(g, ng);
    // words merge only in the last position: two modules stay two groups
    char *mods[] = {"m.enc_score_head.weight", "m.dec_score_head.weight"};
    int two[2] = {0, 1};
    ng = paramgroup_build(mods, two, 2, &g);
    EXPECT(ng == 2, "different modules: %d groups", ng);
    paramgroup_free(g, ng);
    EXPECT(paramgroup_build(mods, two, 0, &g) == 0 && g == NULL, "no names, no group");
}

static void test_facts(const Model *m) {
    const ModelIter *it0 = model_rank_iter(&m->ranks[0], 1), *it1 = model_rank_iter(&m->ranks[1], 1);
    EXPECT(it0 && it0->iter == 1 && !model_rank_iter(&m->ranks[1], 2), "model_rank_iter");
    EXPECT(facts_blocking_bucket(&m->ranks[0], it0) == 0, "rank 0's bucket 0 blocks");
    EXPECT(facts_blocking_bucket(&m->ranks[1], it1) == -1, "nothing blocks on rank 1");
    int pending[69];
    EXPECT(facts_pending(&m->ranks[0], it0, 0, pending, 69) == FIX_UNUSED && pending[0] == 510,
           "43 pending in bucket 0, the first 510");
    char why[256];
    EXPECT(facts_first_divergence(m, INT64_MAX, why, sizeof why) == 12, "divergence at #12: %s",
           why);
    EXPECT(strstr(why, "rank 0 never issued #12 (allreduce bucket 0)"), "why: %s", why);
    RankNow now = facts_rank_now(m, 1, INT64_MAX);
    EXPECT(now.state == RANK_WAITING && now.wait_seq == 12 && now.wait && now.wait->bucket == 0,
           "rank 1 waits in #12");
    now = facts_rank_now(m, 1, FIX_T0 + 2600000000); // in iteration 1's backward
    EXPECT(now.state == RANK_RUNNING && now.iter == 1 && now.phase == PROBE_PHASE_BACKWARD &&
               now.coll_seq == 11,
           "rank 1 at +2.6 s: %s iter %lld phase %d coll %lld", model_state_name(now.state),
           (long long)now.iter, now.phase, (long long)now.coll_seq);
    now = facts_rank_now(m, 1, FIX_T0 + 2001000000); // inside the bucket_indices broadcast
    EXPECT(now.state == RANK_WAITING && now.wait_seq == 8, "rank 1 at +2.001 s waits in #8: %lld",
           (long long)now.wait_seq);
    char banner[512];
    EXPECT(facts_banner(m, INT64_MAX, m->t1_ns, banner, sizeof banner) == BANNER_HANG,
           "hang banner: %s", banner);
    EXPECT(strstr(banner, "rank 1 waits in collective #12 (allreduce bucket 0) for 31s") &&
               strstr(banner, "rank 0 never issued it: its bucket 0 waits for 43 parameters"),
           "banner: %s", banner);
    // 3 s into the wait nothing is a hang yet, but rank 0 has errored
    EXPECT(facts_banner(m, INT64_MAX, FIX_T0 + 6000000000, banner, sizeof banner) == BANNER_HANG,
           "the HANG record alone makes it a hang: %s", banner);
    char buf[64];
    EXPECT(!strcmp(facts_fmt_ranks((int[]){0, 1, 2, 3, 5, 7, 8}, 7, buf, sizeof buf), "0-3,5,7-8"),
           "ranks %s", buf);
    EXPECT(!strcmp(facts_fmt_count(32814296, buf, sizeof buf), "32.8M"), "count %s", buf);
    EXPECT(!strcmp(facts_fmt_age(125000000000, buf, sizeof buf), "2m05s"), "age %s", buf);
    // offsets from the trace's start carry one sign: events before it (the first layout) too
    EXPECT(!strcmp(facts_fmt_at(-2000000, 1000000000, buf, sizeof buf), "-0.002s"), "at %s", buf);
    EXPECT(!strcmp(facts_fmt_at(-200000, 1000000000, buf, sizeof buf), "+0.000s"), "at %s", buf);
    EXPECT(!strcmp(facts_fmt_at(312000000, 1000000000, buf, sizeof buf), "+0.312s"), "at %s", buf);
    EXPECT(!strcmp(facts_fmt_at(-125000000000, 300000000000, buf, sizeof buf), "-2m05s"), "at %s",
           buf);
}

static void test_views(const Model *m) {
    Screen s = {0};
    Ui ui;
    char row[256];
    ui_init(&ui, m, false, NULL);
    EXPECT(ui.iter == 1 && ui.rank == 0, "starts at the unfinished iteration 1, rank 0: %lld, %d",
           (long long)ui.iter, ui.rank);

    // Ranks
    render(&s, m, &ui, 80, 24);
    int bad = expect_failures;
    EXPECT(screen_find(&s, "HANG  rank 1 waits in collective #12") == 1, "hang banner on row 1");
    EXPECT(style_of(&s, "HANG") == ST_BANNER, "banner style");
    EXPECT(screen_has(&s, "1 Ranks") && style_of(&s, "1 Ranks") == ST_TAB_ACTIVE,
           "Ranks tab active");
    EXPECT(strstr(row_text(&s, 4, row), "   0  errored      2 forward") == row,
           "rank 0's row: '%s'", row);
    EXPECT(screen_has(&s, "   1  waiting      1 in coll") &&
               screen_has(&s, "in allreduce #12 (bucket 0) for 31s"),
           "rank 1 waits in #12 for 31 s");
    EXPECT(screen_has(&s, "bucket 0 blocks every later bucket: 43 parameters pending"),
           "side: rank 0's blocker");
    EXPECT(screen_find(&s, " q quit  ? help") == 23, "status line");
    if (expect_failures > bad) dump(&s, "ranks");

    // Buckets
    ui_key(&ui, m, '2');
    render(&s, m, &ui, 80, 24);
    bad = expect_failures;
    EXPECT(screen_has(&s, "iteration 1: 6 buckets (layout generation 1)"), "buckets context");
    int y0 = screen_find(&s, "    0   26/69  *");
    EXPECT(y0 > 0, "rank 0: bucket 0 26/69, marked as the blocker");
    EXPECT(y0 > 0 && strstr(row_text(&s, y0, row), "176/176 R"),
           "rank 0: bucket 1 ready, not launched: %s", row);
    EXPECT(style_of(&s, "26/69  *") == ST_SELECT, "the selected cell is rank 0's bucket 0");
    EXPECT(screen_has(&s, "    1   69/69 L  176/176 L"), "rank 1: launched");
    EXPECT(screen_has(&s, "blocks every later bucket: buckets launch strictly in index order"),
           "side: blocker");
    EXPECT(screen_has(&s, DEC_BBOX) && screen_has(&s, "36 tensors"), "side: dec_bbox_head grouped");
    if (expect_failures > bad) dump(&s, "buckets");
    ui_key(&ui, m, 'j'); // rank 1: its bucket 0 is in flight
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "allreduce #12 launched at +3.0s, never completed"),
           "rank 1's bucket 0 in #12");
    ui_key(&ui, m, 'k');

    // Parameters, through Enter from Buckets
    ui_key(&ui, m, UI_KEY_ENTER);
    EXPECT(ui.view == VIEW_PARAMS, "Enter on Buckets opens Parameters");
    render(&s, m, &ui, 80, 24);
    bad = expect_failures;
    EXPECT(screen_has(&s, "rank 0, iteration 1: 43 of 575 parameters never reported"),
           "params context");
    int yd = screen_find(&s, DEC_BBOX);
    EXPECT(yd > 0 && strstr(row_text(&s, yd, row), "  36            1"),
           "dec_bbox_head: 36, reported by 1: '%s'", row);
    EXPECT(screen_has(&s, "model.28.enc_bbox_head.layers.{0..2}.{weight,bias}"),
           "enc_bbox_head grouped");
    EXPECT(screen_has(&s, "model.28.denoising_class_embed.weight"), "denoising_class_embed");
    EXPECT(screen_has(&s, "rank 0's batch at iteration 1: 1 image, 0 ground-truth boxes"),
           "side: no box");
    EXPECT(screen_has(&s, "36 tensors, 1.2M elements, in bucket 0; reported by rank 1"),
           "side: group details");
    if (expect_failures > bad) dump(&s, "params");
    ui_key(&ui, m, UI_KEY_ENTER); // open the group
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "    539 model.28.dec_bbox_head.0.layers.0.weight"),
           "expanded: the group's members");
    if (!screen_has(&s, "    539 model.28")) dump(&s, "expanded");
    ui_key(&ui, m, 'j'), ui_key(&ui, m, UI_KEY_ENTER); // on a member: closes the group
    render(&s, m, &ui, 80, 24);
    EXPECT(!screen_has(&s, "    539 model.28.dec_bbox_head.0.layers.0.weight") &&
               ui.cur[VIEW_PARAMS].sel == 0,
           "closed again, back on the group");
    ui_key(&ui, m, 'l'); // rank 1 reported everything
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "rank 1, iteration 1: all 575 parameters reported"),
           "rank 1: all reported");
    ui_key(&ui, m, 'h');
    // search
    const char *q = "/ENC_bbox\n";
    for (const char *p = q; *p; p++)
        ui_key(&ui, m, *p == '\n' ? UI_KEY_ENTER : *p);
    render(&s, m, &ui, 80, 24);
    bad = expect_failures;
    EXPECT(!ui.searching && !strcmp(ui.search, "ENC_bbox"), "search kept: '%s'", ui.search);
    EXPECT(screen_has(&s, "6 of 575 parameters match \"ENC_bbox\""), "case-insensitive search");
    EXPECT(screen_has(&s, "  521  model.28.enc_bbox_head.layers.0.weight") && screen_has(&s, "NO"),
           "match, not reported");
    if (expect_failures > bad) dump(&s, "search");
    ui_key(&ui, m, UI_KEY_ESC);
    EXPECT(!ui.search[0], "Esc clears the search");

    // Collectives
    ui_key(&ui, m, '4');
    render(&s, m, &ui, 80, 24);
    bad = expect_failures;
    EXPECT(screen_has(&s, "first divergence at #12: rank 0 never issued #12 (allreduce bucket 0)"),
           "divergence");
    int y12 = screen_find(&s, ">  12   1 -");
    EXPECT(y12 > 0 && strstr(row_text(&s, y12, row), "allred  bucket 0"), "row #12: '%s'", row);
    EXPECT(screen_has(&s, "    7   0 allred  bucket 0"), "#7 on both ranks");
    EXPECT(screen_has(&s, "rank 0    never issued"), "side: rank 0 never issued the selected #12");
    if (expect_failures > bad) dump(&s, "collectives");
    ui_key(&ui, m, UI_KEY_ENTER);
    EXPECT(ui.view == VIEW_BUCKETS && ui.iter == 1 && ui.bucket == 0, "Enter on #12: its bucket");

    // Timeline
    ui_key(&ui, m, '5');
    render(&s, m, &ui, 80, 24);
    bad = expect_failures;
    EXPECT(screen_has(&s, "r0    cpu") && screen_has(&s, "r1    cpu") &&
               screen_has(&s, "      net"),
           "timeline rows");
    EXPECT(screen_has(&s, "X") && screen_has(&s, "!"), "error and open collective marks");
    EXPECT(screen_has(&s, "zoom 1x"), "whole trace");
    if (expect_failures > bad) dump(&s, "timeline");
    ui_key(&ui, m, '+'), ui_key(&ui, m, '+');
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "zoom 4x"), "zoomed in twice");
    ui_key(&ui, m, '-'), ui_key(&ui, m, '-');

    // Diagnosis: without the engine, then with findings
    ui_key(&ui, m, '6');
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "not linked") && screen_has(&s, "bucket 0 blocks every later bucket"),
           "diagnosis fallback");
    UiFinding f[1] = {
        {"parameters unused on rank 0", "find_unused_parameters=True: marks them ready.", 2}};
    ui.findings = f, ui.n_findings = 1;
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "1. parameters unused on rank 0") &&
               style_of(&s, "1. parameters") == ST_BAD,
           "a finding");
    EXPECT(screen_has(&s, "  find_unused_parameters=True: marks them ready."), "its body");
    ui.findings = NULL, ui.n_findings = 0;

    // help, tabs, iteration scrubber, time cursor, quit
    ui_key(&ui, m, '?');
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "help: keys") && screen_has(&s, "q F10      quit"), "help overlay");
    ui_key(&ui, m, 'x');
    render(&s, m, &ui, 80, 24);
    EXPECT(!screen_has(&s, "help: keys"), "any key closes the help");
    ViewId before = ui.view;
    ui_key(&ui, m, UI_KEY_TAB);
    EXPECT(ui.view == (before + 1) % VIEW_TEACH, "Tab: next view");
    ui_key(&ui, m, UI_KEY_BTAB);
    EXPECT(ui.view == before, "Shift-Tab: back");
    ui_key(&ui, m, '3'), ui_key(&ui, m, '[');
    render(&s, m, &ui, 80, 24);
    EXPECT(ui.iter == 0 && screen_has(&s, "rank 0, iteration 0: all 575 parameters reported"),
           "[ : iteration 0");
    ui_key(&ui, m, '['), ui_key(&ui, m, ']'), ui_key(&ui, m, ']'), ui_key(&ui, m, ']'),
        ui_key(&ui, m, ']');
    EXPECT(ui.iter == 2, "the scrubber stops at the last iteration: %lld", (long long)ui.iter);
    ui_key(&ui, m, '<');
    render(&s, m, &ui, 80, 24);
    EXPECT(ui.t_ns < m->t1_ns && screen_has(&s, "at +33."), "< : the time cursor moves back");
    ui_key(&ui, m, '.');
    EXPECT(ui.t_ns == INT64_MAX, ". : back to the end");
    EXPECT(ui_key(&ui, m, 'q') == UI_QUIT, "q quits");

    // live: following, the view goes to the iteration rank 0 never finished, and to rank 0
    ui_init(&ui, m, true, NULL);
    EXPECT(ui.iter == 2 && ui.iter_follow, "live: starts at the newest iteration");
    ui.rank = 1;
    ui_model_changed(&ui, m);
    EXPECT(ui.iter == 1 && ui.rank == 0, "live: follows the stuck iteration 1, rank 0: %lld, %d",
           (long long)ui.iter, ui.rank);
    ui.rank = 1;
    ui_model_changed(&ui, m);
    EXPECT(ui.iter == 1 && ui.rank == 1, "live: the rank is chosen once, then the user's");
    ui.now_ns = m->t1_ns + 2000000000; // ages against the wall clock
    render(&s, m, &ui, 80, 24);
    EXPECT(screen_has(&s, "LIVE") && screen_has(&s, "for 33s"), "live header and ages");

    // too small
    render(&s, m, &ui, 30, 7);
    EXPECT(screen_has(&s, "terminal too small: 30x7"), "too small");
    screen_free(&s);
}

// A replay of rank 0's iteration 1 backward: the 532 reported parameters, bucket 3 ready but
// stuck behind bucket 0, the end of backward without finalize, and rank 1's #12 meanwhile.
static void test_teach(const Model *m) {
    int cap = 2 * FIX_PARAMS + 16, n = 0, k_seq = 0;
    TeachEvent *ev = xcalloc((size_t)cap, sizeof(TeachEvent));
    int64_t t = FIX_T0 + 2500000000;
    ev[n++] = (TeachEvent){
        .rank = 0, .seq = 1, .t_ns = t, .iter = 1, .kind = PROBE_BATCH, .a = 0, .b = 0};
    ev[n++] =
        (TeachEvent){.rank = 0, .seq = 2, .t_ns = ++t, .iter = 1, .kind = PROBE_BACKWARD_BEGIN};
    const ModelLayout *l = &m->ranks[0].layouts[1];
    for (int k = FIX_PARAMS - 1; k >= 0; k--) { // in reverse layout order: bucket 5 first
        int p = l->vars[k], b = 0;
        while (k >= l->start[b + 1])
            b++;
        if (fix_is_unused(p)) continue;
        ev[n++] = (TeachEvent){.rank = 0,
                               .seq = 100 + k_seq++,
                               .t_ns = ++t,
                               .iter = 1,
                               .kind = PROBE_MARK_READY,
                               .a = p,
                               .b = b};
    }
    int i_mark = n - 1; // the last hook: a decoder parameter of bucket 0
    int i_ready = n;
    ev[n++] = (TeachEvent){
        .rank = 0, .seq = 100 + k_seq++, .t_ns = ++t, .iter = 1, .kind = PROBE_BUCKET_READY, .b = 3};
    int i_launch = n;
    ev[n++] = (TeachEvent){.rank = 1,
                           .seq = 1,
                           .t_ns = FIX_T0 + 3000000000,
                           .iter = 1,
                           .kind = PROBE_COLL_LAUNCH,
                           .a = PROBE_OP_ALLREDUCE,
                           .b = 0,
                           .c = 12,
                           .d = 100};
    int i_end = n;
    ev[n++] = (TeachEvent){.rank = 0,
                           .seq = 100 + k_seq++,
                           .t_ns = FIX_T0 + 3800000000,
                           .iter = 1,
                           .kind = PROBE_BACKWARD_END};
    Teach tc;
    teach_init(&tc, m, ev, n, 1, 1);
    char text[8192];
    teach_explain(&tc, m, text, sizeof text);
    EXPECT(strstr(text, "Space steps to the first event"), "before the first event: %s", text);

    teach_key(&tc, m, ' ');
    teach_explain(&tc, m, text, sizeof text);
    EXPECT(tc.pos == 0 && strstr(text, "0 ground-truth boxes. No box at all"),
           "batch without boxes: %s", text);
    teach_seek(&tc, m, i_mark);
    teach_explain(&tc, m, text, sizeof text);
    EXPECT(strstr(text, "which now has 26 of 69 ready"), "bucket 0 at its last hook: %.300s", text);
    teach_seek(&tc, m, i_ready);
    teach_explain(&tc, m, text, sizeof text);
    EXPECT(strstr(text, "Bucket 3 has all its gradients but cannot launch yet") &&
               strstr(text, "bucket 0 has not launched: it still waits for 43 parameters") &&
               strstr(text, DEC_BBOX),
           "why bucket 3 cannot launch: %s", text);
    teach_seek(&tc, m, i_launch);
    teach_explain(&tc, m, text, sizeof text);
    EXPECT(strstr(text, "Rank 1 launches allreduce #12 of bucket 0") &&
               strstr(text, "not yet by 0"),
           "rank 1's #12: %s", text);
    teach_key(&tc, m, ' ');
    EXPECT(tc.pos == i_end, "space: the next event");
    teach_explain(&tc, m, text, sizeof text);
    EXPECT(
        strstr(text, "bucket 0 and every bucket after it never launched") &&
            strstr(
                text,
                "With find_unused_parameters=True they would have been marked ready as unused") &&
            strstr(text, "rank 1: allreduce #12 (bucket 0) in flight, waiting for rank 0") &&
            strstr(text, "never will"),
        "end of backward, and why rank 1 is blocked: %s", text);
    teach_key(&tc, m, 'b'), teach_key(&tc, m, 'b');
    EXPECT(tc.pos == i_ready && tc.ranks[0].next_bucket == 0 &&
               tc.ranks[0].pending[0] == FIX_UNUSED,
           "b steps back, replaying: pos %d, pending %d", tc.pos, tc.ranks[0].pending[0]);
    teach_key(&tc, m, 'g'), teach_key(&tc, m, 'n');
    EXPECT(tc.pos == 0, "n from the start: the batch (not a hook): %d", tc.pos);
    teach_key(&tc, m, 'n');
    EXPECT(tc.pos == 1, "n: backward begins: %d", tc.pos);
    teach_key(&tc, m, 'n');
    EXPECT(tc.pos == i_ready, "n skips the hooks: %d", tc.pos);
    // playback: 5 events/s, 1 s -> 5 events
    teach_key(&tc, m, 'g'), teach_key(&tc, m, 'p');
    EXPECT(teach_tick(&tc, m, 1000) && tc.pos == 4, "played 5 events in 1 s: pos %d", tc.pos);
    teach_key(&tc, m, '+');
    EXPECT(tc.speed == 10, "+ : faster: %d", tc.speed);

    // the view, at 80x24
    Ui ui;
    ui_init(&ui, m, false, &tc);
    Screen s = {0};
    teach_seek(&tc, m, i_ready);
    render(&s, m, &ui, 80, 24);
    int bad = expect_failures;
    EXPECT(ui.view == VIEW_TEACH && screen_has(&s, "7 Teach") &&
               style_of(&s, "7 Teach") == ST_TAB_ACTIVE,
           "teach tab");
    EXPECT(screen_has(&s, "> r0 it1 +2.") && screen_has(&s, "BUCKET_READY  bucket 3"),
           "the current event");
    EXPECT(screen_has(&s, "what happens here") &&
               screen_has(&s, "Bucket 3 has all its gradients but cannot"),
           "explanation panel");
    if (expect_failures > bad) dump(&s, "teach");
    ui_key(&ui, m, ' ');
    EXPECT(tc.pos == i_ready + 1, "space in the view steps");
    screen_free(&s);
    teach_free(&tc);
}

// Every view at many sizes: only printable ASCII, and nothing crashes (ASan in make debug).
static void test_sizes(const Model *m) {
    static const int sizes[][2] = {{32, 8},   {40, 12},  {50, 15},  {80, 24},   {100, 30},
                                   {120, 40}, {132, 43}, {200, 60}, {300, 100}, {33, 100},
                                   {300, 8},  {1, 1},    {0, 0}};
    Screen s = {0};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int v = 0; v < VIEW_TEACH; v++) {
            Ui ui;
            ui_init(&ui, m, false, NULL);
            ui.view = (ViewId)v;
            ui.help = v == VIEW_RANKS;
            render(&s, m, &ui, sizes[k][0], sizes[k][1]);
            int bad = 0;
            for (int i = 0; i < s.rows * s.cols; i++)
                bad += s.cells[i].ch < 32 || s.cells[i].ch > 126 || s.cells[i].style >= ST_COUNT;
            EXPECT(!bad, "%dx%d view %d: %d bad cells", sizes[k][0], sizes[k][1], v, bad);
        }
    screen_free(&s);
}

static void test_screen(void) {
    Screen s = {0};
    screen_resize(&s, 3, 10);
    Rect r = rect_make(1, 2, 1, 5);
    int end = rect_put(&s, r, 0, 0, ST_BOLD, "abcdefgh\tx");
    char row[16];
    EXPECT(end == 5 && !strcmp(row_text(&s, 1, row), "  abcde"), "clipped to the rect: '%s' %d",
           row, end);
    rect_put_fit(&s, rect_make(0, 0, 1, 10), 0, 0, 6, ST_NORMAL, "abcdefghij");
    EXPECT(!strcmp(row_text(&s, 0, row), "abcd.."), "fit: '%s'", row);
    rect_put(&s, rect_make(2, 0, 1, 10), 0, -2, ST_NORMAL, "xy\x01z\n!");
    EXPECT(!strcmp(row_text(&s, 2, row), "?z"), "negative column, control character, newline: '%s'",
           row);
    screen_resize(&s, 4, 12);
    int lines = rect_wrap(&s, rect_make(0, 0, 4, 12), 0, 1, ST_NORMAL,
                          "one two three four five six\n\nseven");
    EXPECT(lines == 5 && !strcmp(row_text(&s, 0, row), "three four") &&
               !strcmp(row_text(&s, 2, row), "") && !strcmp(row_text(&s, 3, row), "seven"),
           "wrap: %d lines, row 0 '%s'", lines, row_text(&s, 0, row));
    screen_free(&s);
}

// The first screen: `ddpdbg tui` and the live view open on the root cause when there is one.
static void test_first_screen(void) {
    Model m;
    char err[512];
    if (model_load(&m, "traces/examples/field_report", err, sizeof err) < 0) {
        EXPECT(0, "the field report's example trace: %s", err);
        return;
    }
    Finding *f;
    int n = diagnose(&m, &f);
    char *root = rootcause_text(&m, f, n);
    EXPECT(root != NULL, "the field report has a root cause");
    static const char *const want[] = {
        "root cause [1]: rank 0 never marked 25 parameters ready at iteration 1",
        "never reported on rank 0 at iteration 1 (25 tensors):",
        "model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors",
        "model.27.enc_bbox_head.layers.{0..2}.{weight,bias}  6 tensors",
        "model.27.denoising_class_embed.weight  1 tensor",
        "bucket 0 never launched on rank 0: 91 of its 116 parameters were ready",
        "rank 1 waited in collective #12 (allreduce of bucket 0, 264524 elements)",
        "fix: find_unused_parameters=True: after every forward DDP searches",
    };
    static const int sizes[][2] = {{80, 24}, {160, 48}};
    Screen s = {0};
    for (int k = 0; k < 2; k++) {
        Ui ui;
        ui_init(&ui, &m, false, NULL);
        ui_set_root_cause(&ui, root);
        EXPECT(ui.view == VIEW_DIAGNOSIS, "opens on the Diagnosis view");
        render(&s, &m, &ui, sizes[k][0], sizes[k][1]);
        int bad = expect_failures;
        for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
            int y = screen_find(&s, want[w]);
            EXPECT(y >= 3 && y < s.rows - 1, "%dx%d: '%s' on screen (row %d)", sizes[k][0],
                   sizes[k][1], want[w], y);
        }
        EXPECT(style_of(&s, "root cause [1]") == ST_BAD, "the title in the error style");
        EXPECT(style_of(&s, "model.27.dec_bbox_head") == ST_ACCENT, "the names highlighted");
        if (expect_failures > bad) dump(&s, "first screen");
    }
    // live: no root cause yet, the Ranks view; it appears, the view goes to it, once
    Ui ui;
    ui_init(&ui, &m, true, NULL);
    ui_set_root_cause(&ui, NULL);
    EXPECT(ui.view == VIEW_RANKS, "live, nothing found yet: Ranks");
    ui_set_root_cause(&ui, root);
    EXPECT(ui.view == VIEW_DIAGNOSIS, "live: the root cause appears, the view goes to it");
    ui_key(&ui, &m, '1');
    ui_set_root_cause(&ui, root);
    EXPECT(ui.view == VIEW_RANKS, "once: later diagnoses leave the user's view alone");
    // a user who chose a view before the root cause appeared stays there, told where it is,
    // beside the run's status; pressing the key of the view on screen is a choice too
    for (int key = '3'; key >= '1'; key -= 2) {
        ui_init(&ui, &m, true, NULL);
        ui_key(&ui, &m, key);
        ui_set_root_cause(&ui, NULL);
        ui_set_root_cause(&ui, root);
        snprintf(ui.run_status, sizeof ui.run_status, "run ended: exit status 1; q leaves");
        render(&s, &m, &ui, 100, 30);
        EXPECT(ui.view == (ViewId)(key - '1') && screen_has(&s, " 6: root cause  run ended: exit status 1"),
               "key %c: the user's view is kept (%d), the status line points at the root cause",
               key, ui.view);
    }
    screen_free(&s);
    free(root);
    findings_free(f, n);
    model_free(&m);
}

int main(void) {
    Model m;
    fixture_field_report(&m, 2);
    test_screen();
    test_grouping(&m);
    test_facts(&m);
    test_views(&m);
    test_teach(&m);
    test_sizes(&m);
    fixture_free(&m);
    test_first_screen();
    return expect_report();
}
