/* ui.c -- the frame (header, banner, tabs, the active view, status line, help overlay) and what
 * every key does (ui.h). The views themselves are the view_*.c files (views.h). */
#include "tui/views/ui.h"

#include <stdio.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX
#include "tui/views/facts.h"
#include "tui/teach/teach.h"
#include "tui/views/views.h"

static const char *view_names[VIEW_COUNT] = {"Ranks",    "Buckets",   "Parameters", "Collectives",
                                             "Timeline", "Diagnosis", "Teach"};
static const char *view_short[VIEW_COUNT] = {"Ranks", "Bucket", "Params", "Colls",
                                             "Time",  "Diag",   "Teach"};

static int n_views(const Ui *ui) {
    return ui->teach_mode ? VIEW_COUNT : VIEW_TEACH;
}

int64_t ui_time(const Ui *ui, const Model *m) {
    return ui->t_ns < m->t1_ns ? ui->t_ns : INT64_MAX;
}

// ---- shared view helpers (views.h) -----------------------------------------------------------

void view_clamp(UiCursor *c, int n, int page) {
    page = MAX(page, 1);
    c->n = n, c->page = page;
    c->sel = n ? MIN(MAX(c->sel, 0), n - 1) : 0;
    if (c->sel < c->top) c->top = c->sel;
    if (c->sel >= c->top + page) c->top = c->sel - page + 1;
    c->top = MAX(0, MIN(c->top, MAX(n - page, 0)));
}

Rect view_side_title(Screen *s, Rect side, const char *title) {
    screen_fill(s, rect_make(side.y, side.x, MIN(side.h, 1), side.w), ' ', ST_TAB);
    rect_put_fit(s, side, 0, 1, side.w - 2, ST_TAB, title);
    return rect_below(side, 1);
}

int view_para(Screen *s, Rect r, int row, Style style, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return row + rect_wrap(s, r, row, 0, style, buf);
}

Rect view_context(Screen *s, Rect r, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    rect_put_fit(s, r, 0, 0, r.w, ST_BOLD, buf);
    return rect_below(r, 1);
}

// ---- state --------------------------------------------------------------------------------------

// The newest iteration in which some rank ran backward and did not finalize: where a missing
// gradient shows. -1 when every backward finalized.
static int64_t unfinished_iteration(const Model *m, int *rank) {
    int64_t best = -1;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *rk = &m->ranks[r];
        for (int i = rk->n_iters - 1; i >= 0; i--) {
            const ModelIter *it = &rk->iters[i];
            if (it->t_backward_ns && !it->finalized && it->iter > best) {
                best = it->iter;
                break;
            }
        }
    }
    // the rank that holds the others up: a blocking bucket, else the fewest parameters marked
    int who = -1, fewest = 1 << 30;
    for (int r = 0; best >= 0 && r < m->world; r++) {
        const ModelIter *it = model_rank_iter(&m->ranks[r], best);
        if (!it || !it->t_backward_ns) continue;
        int score = facts_blocking_bucket(&m->ranks[r], it) >= 0 ? -1 : it->n_marked;
        if (score < fewest) fewest = score, who = r;
    }
    *rank = who;
    return best;
}

void ui_init(Ui *ui, const Model *m, bool live, Teach *teach) {
    *ui = (Ui){0};
    ui->teach = teach;
    ui->teach_mode = teach != NULL;
    ui->view = ui->back_view = teach ? VIEW_TEACH : VIEW_RANKS;
    ui->live = live;
    ui->t_ns = INT64_MAX;
    ui->now_ns = m->t1_ns;
    ui->expanded = ui->params_group = -1;
    ui->stuck_iter = -1;
    ui->iter_follow = live;
    int rank = -1;
    int64_t it = unfinished_iteration(m, &rank);
    ui->iter = it >= 0 && !live ? it : m->max_iter;
    if (rank < 0)
        for (int r = 0; r < m->world && rank < 0; r++)
            if (m->ranks[r].state == RANK_ERRORED) rank = r;
    ui->rank = MAX(rank, 0);
    ui->cur[VIEW_RANKS].sel = ui->rank;
    ui->cur[VIEW_BUCKETS].sel = ui->rank;
}

void ui_model_changed(Ui *ui, const Model *m) {
    if (ui->iter_follow) {
        int holder = -1;
        int64_t u = unfinished_iteration(m, &holder);
        bool stuck = u >= 0 && u < m->max_iter;
        ui->iter = stuck ? u : m->max_iter;
        if (stuck && u != ui->stuck_iter && holder >= 0) {
            ui->rank = holder;
            ui->cur[VIEW_RANKS].sel = ui->cur[VIEW_BUCKETS].sel = holder;
        }
        ui->stuck_iter = stuck ? u : -1;
    }
    ui->iter = MIN(MAX(ui->iter, m->min_iter), m->max_iter);
    ui->rank = MIN(MAX(ui->rank, 0), MAX(m->world - 1, 0));
}

static void set_view(Ui *ui, ViewId v) {
    if (v == ui->view) return;
    ui->back_view = ui->view;
    ui->view = v;
}

static void step_time(Ui *ui, const Model *m, int dir) {
    int64_t span = MAX(m->t1_ns - m->t0_ns, 1), step = MAX(span / 50, 1000000);
    int64_t t = ui->t_ns < m->t1_ns ? ui->t_ns : m->t1_ns;
    t += dir * step;
    ui->t_ns = t >= m->t1_ns ? INT64_MAX : MAX(t, m->t0_ns);
}

static void step_iter(Ui *ui, const Model *m, int dir) {
    int64_t it = ui->iter + dir;
    ui->iter = MIN(MAX(it, m->min_iter), m->max_iter);
    ui->iter_follow = ui->live && dir > 0 && it > m->max_iter;
    ui->expanded = -1;
}

// Timeline zoom: factor < 1 zooms in around the window's centre.
static void zoom(Ui *ui, const Model *m, double factor) {
    int64_t whole = MAX(m->t1_ns - m->t0_ns, 1);
    int64_t span = ui->tl_span_ns ? ui->tl_span_ns : whole;
    int64_t end = ui->tl_end_ns ? ui->tl_end_ns : m->t1_ns;
    int64_t centre = end - span / 2;
    span = (int64_t)((double)span * factor);
    span = MIN(MAX(span, 100000), whole); // 0.1 ms .. the whole trace
    end = MIN(centre + span / 2, m->t1_ns);
    ui->tl_span_ns = span == whole ? 0 : span;
    ui->tl_end_ns = span == whole ? 0 : MAX(end, m->t0_ns + span);
}

static void pan(Ui *ui, const Model *m, int dir) {
    if (!ui->tl_span_ns) return;
    int64_t end = (ui->tl_end_ns ? ui->tl_end_ns : m->t1_ns) + dir * ui->tl_span_ns / 8;
    ui->tl_end_ns = MIN(MAX(end, m->t0_ns + ui->tl_span_ns), m->t1_ns);
}

static UiAction search_key(Ui *ui, int key) {
    size_t len = strlen(ui->search);
    if (key == UI_KEY_ENTER)
        ui->searching = false;
    else if (key == UI_KEY_ESC)
        ui->searching = false, ui->search[0] = 0;
    else if (key == UI_KEY_BACKSPACE || key == 127 || key == 8) {
        if (len) ui->search[len - 1] = 0;
    } else if (key >= 32 && key < 127 && len + 1 < sizeof ui->search) {
        ui->search[len] = (char)key, ui->search[len + 1] = 0;
    }
    ui->cur[VIEW_PARAMS].sel = ui->cur[VIEW_PARAMS].top = 0;
    ui->expanded = -1;
    return UI_CONTINUE;
}

// j/k/h/l and friends on the active view's cursor.
static void move(Ui *ui, const Model *m, int dy, int dx) {
    UiCursor *c = &ui->cur[ui->view];
    switch (ui->view) {
    case VIEW_RANKS:
        c->sel += dy;
        c->sel = MIN(MAX(c->sel, 0), MAX(m->world - 1, 0));
        ui->rank = c->sel;
        break;
    case VIEW_BUCKETS:
        c->sel = MIN(MAX(c->sel + dy, 0), MAX(m->world - 1, 0));
        ui->rank = c->sel;
        ui->bucket = MAX(ui->bucket + dx, 0);
        break;
    case VIEW_PARAMS:
        c->sel += dy;
        if (dx) ui->rank = MIN(MAX(ui->rank + dx, 0), MAX(m->world - 1, 0)), ui->expanded = -1;
        break;
    case VIEW_COLLECTIVES:
        c->sel += dy;
        c->col = MIN(MAX(c->col + dx, 0), MAX(m->world - 1, 0));
        break;
    case VIEW_TIMELINE:
        c->top = MIN(MAX(c->top + dy, 0), MAX(m->world - 1, 0));
        pan(ui, m, dx);
        break;
    case VIEW_DIAGNOSIS:
    case VIEW_TEACH:
        c->top = MAX(c->top + dy, 0);
        break;
    default:
        break;
    }
}

void ui_set_root_cause(Ui *ui, const char *text) {
    ui->root_cause = text;
    if (!text || ui->root_cause_seen) return;
    ui->root_cause_seen = true;
    if (ui->teach_mode) return;
    if (ui->view_chosen) return; // the status line says "6: root cause"
    set_view(ui, VIEW_DIAGNOSIS);
    ui->cur[VIEW_DIAGNOSIS].top = 0;
}

static UiAction key_action(Ui *ui, const Model *m, int key);

UiAction ui_key(Ui *ui, const Model *m, int key) {
    ViewId before = ui->view;
    bool choosing = !ui->searching && !ui->help &&
                    ((key >= '1' && key <= '7') || key == UI_KEY_TAB || key == UI_KEY_BTAB);
    UiAction a = key_action(ui, m, key);
    // a key that picks a view is a choice even when it picks the one on screen
    if (ui->view != before || choosing) ui->view_chosen = true;
    return a;
}

static UiAction key_action(Ui *ui, const Model *m, int key) {
    ui->message[0] = 0;
    if (ui->searching) return search_key(ui, key);
    if (ui->help) { // any key closes the help; q still quits
        ui->help = false;
        return key == 'q' || key == UI_KEY_F10 ? UI_QUIT : UI_CONTINUE;
    }
    UiCursor *c = &ui->cur[ui->view];
    if (ui->view == VIEW_TEACH && ui->teach && teach_key(ui->teach, m, key)) {
        ui->cur[VIEW_TEACH].top = 0; // the new event's explanation from its start
        return UI_CONTINUE;
    }
    switch (key) {
    case 'q':
    case UI_KEY_F10:
        return UI_QUIT;
    case '?':
    case UI_KEY_F1:
        ui->help = true;
        break;
    case UI_KEY_TAB:
        set_view(ui, (ViewId)((ui->view + 1) % n_views(ui)));
        break;
    case UI_KEY_BTAB:
        set_view(ui, (ViewId)((ui->view + n_views(ui) - 1) % n_views(ui)));
        break;
    case UI_KEY_ESC:
        if (ui->search[0])
            ui->search[0] = 0;
        else
            set_view(ui, ui->back_view);
        break;
    case '/':
        set_view(ui, VIEW_PARAMS);
        ui->searching = true;
        ui->search[0] = 0;
        break;
    case '[':
        step_iter(ui, m, -1);
        break;
    case ']':
        step_iter(ui, m, +1);
        break;
    case '<':
    case ',':
        step_time(ui, m, -1);
        break;
    case '>':
        step_time(ui, m, +1);
        break;
    case '.':
        ui->t_ns = INT64_MAX;
        break;
    case '+':
    case '=':
        if (ui->view == VIEW_TIMELINE) zoom(ui, m, 0.5);
        break;
    case '-':
    case '_':
        if (ui->view == VIEW_TIMELINE) zoom(ui, m, 2.0);
        break;
    case 'p':
        if (ui->live) {
            ui->paused = !ui->paused;
            snprintf(ui->message, sizeof ui->message, ui->paused ? "paused: p resumes" : "live");
        }
        break;
    case 'j':
    case UI_KEY_DOWN:
        move(ui, m, 1, 0);
        break;
    case 'k':
    case UI_KEY_UP:
        move(ui, m, -1, 0);
        break;
    case 'h':
    case UI_KEY_LEFT:
        move(ui, m, 0, -1);
        break;
    case 'l':
    case UI_KEY_RIGHT:
        move(ui, m, 0, 1);
        break;
    case UI_KEY_PGDN:
    case ' ':
        move(ui, m, MAX(c->page - 1, 1), 0);
        break;
    case UI_KEY_PGUP:
        move(ui, m, -MAX(c->page - 1, 1), 0);
        break;
    case 'g':
    case UI_KEY_HOME:
        move(ui, m, -(1 << 20), 0);
        break;
    case 'G':
    case UI_KEY_END:
        move(ui, m, 1 << 20, 0);
        break;
    case UI_KEY_ENTER:
        if (ui->view == VIEW_RANKS)
            view_ranks_enter(ui, m);
        else if (ui->view == VIEW_BUCKETS)
            view_buckets_enter(ui, m);
        else if (ui->view == VIEW_PARAMS)
            view_params_enter(ui, m);
        else if (ui->view == VIEW_COLLECTIVES)
            view_collectives_enter(ui, m);
        break;
    default:
        if (key >= '1' && key < '1' + n_views(ui)) set_view(ui, (ViewId)(key - '1'));
        break;
    }
    return UI_CONTINUE;
}

bool ui_tick(Ui *ui, const Model *m, int elapsed_ms) {
    return ui->teach && teach_tick(ui->teach, m, elapsed_ms);
}

// ---- the frame
// ------------------------------------------------------------------------------------

static void draw_header(Screen *s, const Layout *l, const Model *m, const Ui *ui) {
    Rect h = l->header;
    char banner[512];
    BannerKind kind = facts_banner(m, ui_time(ui, m), ui->now_ns, banner, sizeof banner);
    if (h.h == 1 && kind != BANNER_NONE) { // no room for both: the banner wins
        screen_fill(s, h, ' ', ST_BANNER);
        rect_put_fit(s, h, 0, 1, h.w - 2, ST_BANNER, banner);
        return;
    }
    screen_fill(s, rect_make(h.y, h.x, 1, h.w), ' ', ST_TITLE);
    const char *base = strrchr(m->dir, '/');
    base = base && base[1] ? base + 1 : m->dir;
    char right[160], when[32] = "at the end", span[16];
    int64_t t = ui_time(ui, m);
    if (t != INT64_MAX)
        snprintf(when, sizeof when, "at %s",
                 facts_fmt_at(t - m->t0_ns, m->t1_ns - m->t0_ns, span, sizeof span));
    else if (ui->live)
        snprintf(when, sizeof when, ui->paused ? "PAUSED" : "LIVE");
    snprintf(right, sizeof right, " iter %lld of %lld..%lld  %s ", (long long)ui->iter,
             (long long)m->min_iter, (long long)m->max_iter, when);
    int rc = rect_put_right(s, h, 0, ST_TITLE, right);
    char left[320];
    snprintf(left, sizeof left, " ddpdbg  %.200s  %d ranks  %d params", base, m->world,
             m->n_params);
    rect_put_fit(s, h, 0, 0, rc - 1, ST_TITLE, left);
    if (h.h >= 2) {
        Rect b = rect_below(h, 1);
        if (kind != BANNER_NONE) {
            screen_fill(s, b, ' ', ST_BANNER);
            rect_put_fit(s, b, 0, 1, b.w - 2, ST_BANNER, banner);
        } else {
            int running = 0, finished = 0;
            for (int r = 0; r < m->world; r++) {
                RankNow now = facts_rank_now(m, r, t);
                running += now.state == RANK_RUNNING || now.state == RANK_WAITING;
                finished += now.state == RANK_FINISHED;
            }
            rect_printf(s, b, 0, 1, ST_OK,
                        "healthy: %d running, %d finished, no error or hang recorded", running,
                        finished);
        }
    }
}

static void draw_tabs(Screen *s, const Layout *l, const Ui *ui) {
    Rect t = l->tabs;
    int n = n_views(ui), total = 0;
    for (int v = 0; v < n; v++)
        total += (int)strlen(view_names[v]) + 4;
    const char **names = total <= t.w ? view_names : view_short;
    total = 0;
    for (int v = 0; v < n; v++)
        total += (int)strlen(view_short[v]) + 4;
    bool digits_only = names == view_short && total > t.w;
    int col = 0;
    for (int v = 0; v < n; v++) {
        char tab[32];
        if (digits_only)
            snprintf(tab, sizeof tab, " %d ", v + 1);
        else
            snprintf(tab, sizeof tab, " %d %s ", v + 1, names[v]);
        col = rect_put(s, t, 0, col, v == (int)ui->view ? ST_TAB_ACTIVE : ST_TAB, tab);
        col = rect_put(s, t, 0, col, ST_NORMAL, digits_only ? "" : " ");
    }
}

static const char *view_hint(ViewId v) {
    switch (v) {
    case VIEW_RANKS:
        return "j/k rank  Enter buckets";
    case VIEW_BUCKETS:
        return "j/k rank  h/l bucket  Enter params";
    case VIEW_PARAMS:
        return "j/k group  h/l rank  Enter expand  / search";
    case VIEW_COLLECTIVES:
        return "j/k seq  h/l ranks  Enter bucket";
    case VIEW_TIMELINE:
        return "+/- zoom  h/l pan  j/k ranks";
    case VIEW_DIAGNOSIS:
        return "j/k scroll";
    case VIEW_TEACH:
        return "space step  b back  p play  +/- speed  n next";
    default:
        return "";
    }
}

static void draw_status(Screen *s, const Layout *l, const Ui *ui) {
    Rect st = l->status;
    screen_fill(s, st, ' ', ST_TAB);
    if (ui->searching) {
        int c = rect_put(s, st, 0, 0, ST_ACCENT, "/");
        c = rect_put(s, st, 0, c, ST_TAB, ui->search);
        rect_put(s, st, 0, c, ST_SELECT, " ");
        rect_put_right(s, st, 0, ST_TAB, "Enter keep  Esc clear ");
        return;
    }
    const char *right = ui->message[0] ? ui->message : ui->run_status[0] ? ui->run_status : "";
    int rc = st.w;
    if (*right) {
        char buf[200];
        snprintf(buf, sizeof buf, " %s ", right);
        rc = rect_put_right(s, st, 0, ui->message[0] ? ST_ACCENT : ST_TAB, buf);
    }
    if (ui->root_cause && ui->view != VIEW_DIAGNOSIS) // the user is elsewhere: where it is
        rc = rect_put_right(s, rect_make(st.y, st.x, 1, MAX(rc, 0)), 0, ST_ACCENT, " 6: root cause ");
    char left[256];
    snprintf(left, sizeof left, " q quit  ? help  Tab view  [ ] iter  < > time  %s%s%s",
             view_hint(ui->view), ui->search[0] ? "  filter: " : "", ui->search);
    rect_put_fit(s, st, 0, 0, rc, ST_TAB, left);
}

static const char *help_lines[] = {
    "q F10      quit (live: stops the run)",   "? F1       this help; any key closes it",
    "Tab 1-6    switch views (7: teaching)",   "arrows hjkl  move; PgUp PgDn g G page",
    "Enter      drill down; Esc back",         "/          search parameter names",
    "[ ]        previous / next iteration",    "< > .      step the time cursor; . = now",
    "+ -        timeline zoom; teach speed",   "p          live: pause; teach: play",
    "space b n  teach: step, back, milestone", "",
    "Ranks: state, iteration, collective",     "Buckets: ready/total, L launched, D done,",
    "  * the bucket that blocks later ones",   "Parameters: never reported, grouped",
};

static void draw_help(Screen *s, const Layout *l) {
    int n = (int)(sizeof help_lines / sizeof *help_lines);
    int w = MIN(46, s->cols - 2), h = MIN(n + 2, s->rows - 2);
    Rect box = rect_make((s->rows - h) / 2, (s->cols - w) / 2, h, w);
    screen_fill(s, box, ' ', ST_NORMAL);
    rect_box(s, box, ST_ACCENT, "help: keys");
    Rect in = rect_make(box.y + 1, box.x + 2, box.h - 2, box.w - 4);
    for (int i = 0; i < n && i < in.h; i++)
        rect_put(s, in, i, 0, i < 11 ? ST_NORMAL : ST_DIM, help_lines[i]);
}

void ui_render(Screen *s, const Model *m, Ui *ui) {
    screen_clear(s);
    Layout l = layout_compute(s->rows, s->cols, ui->view);
    if (l.too_small) {
        char msg[96];
        snprintf(msg, sizeof msg, "terminal too small: %dx%d, need %dx%d", s->cols, s->rows,
                 LAYOUT_MIN_COLS, LAYOUT_MIN_ROWS);
        Rect all = rect_make(0, 0, s->rows, s->cols);
        rect_wrap(s, all, s->rows / 2 > 0 ? s->rows / 2 - 1 : 0, 0, ST_WARN, msg);
        return;
    }
    if (m->world <= 0) { // model_load refuses such a trace; a hand-built Model might not
        rect_put(s, rect_make(0, 0, s->rows, s->cols), 0, 0, ST_WARN, "no rank in this trace");
        return;
    }
    ui->iter = MIN(MAX(ui->iter, m->min_iter), m->max_iter);
    ui->rank = MIN(MAX(ui->rank, 0), MAX(m->world - 1, 0));
    draw_header(s, &l, m, ui);
    draw_tabs(s, &l, ui);
    switch (ui->view) {
    case VIEW_RANKS:
        view_ranks(s, &l, m, ui);
        break;
    case VIEW_BUCKETS:
        view_buckets(s, &l, m, ui);
        break;
    case VIEW_PARAMS:
        view_params(s, &l, m, ui);
        break;
    case VIEW_COLLECTIVES:
        view_collectives(s, &l, m, ui);
        break;
    case VIEW_TIMELINE:
        view_timeline(s, &l, m, ui);
        break;
    case VIEW_DIAGNOSIS:
        view_diagnosis(s, &l, m, ui);
        break;
    case VIEW_TEACH:
        view_teach(s, &l, m, ui);
        break;
    default:
        break;
    }
    draw_status(s, &l, ui);
    if (ui->help) draw_help(s, &l);
}
