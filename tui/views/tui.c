/* tui.c -- the terminal around the views (tui.h): `ddpdbg tui`, its --once snapshot, the
 * teaching mode, and tui_live. The only file that talks to ncurses: it turns ncurses keys into
 * UiKeys, blits the Screen that ui_render drew, and maps styles to colours (monochrome with
 * NO_COLOR or on a terminal without colours). */
#include "tui/views/tui.h"

#include <curses.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> // isatty

#include "kernels/base.h" // xcalloc, xmalloc, xstrdup, MIN, MAX
#include "tui/diagnosis/diagnose.h" // diagnose: the Diagnosis view's findings
#include "tui/diagnosis/rootcause.h" // rootcause_text: the first screen when there is one
#include "tui/model/model.h"
#include "tui/views/screen.h"
#include "tui/teach/teach.h"
#include "tui/views/ui.h"

enum {
    FRAME_MS = 50,      // getch's timeout: a frame at least every 50 ms
    REFRESH_MS = 200,   // live: model_refresh this often (5 times a second)
    DIAGNOSE_MS = 500,  // live: the diagnosis again this often (the root cause is on screen
                        // within the probe's 1 s commit + a refresh + this of being recorded)
    GONE_AFTER = 50,    // getch failing at once this many times in a row: the terminal is gone
};

typedef struct Session {
    Model model;
    bool loaded;
    Ui ui;
    Screen screen;
    Teach teach;
    bool teaching;
    Finding *findings;
    int n_findings;
    UiFinding *ui_findings;
    char *root_cause; // rootcause_text of the findings, NULL when none
} Session;

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tui_print_usage(FILE *f) {
    fprintf(f,
            "usage: ddpdbg tui [--teach] [--iters A:B] [--once [--size COLSxROWS] [--view N] "
            "[--keys KEYS]] DIR\n"
            "opens the views on the trace directory DIR (rank<R>.db files): 1 Ranks, 2 Buckets,\n"
            "3 Parameters, 4 Collectives, 5 Timeline, 6 Diagnosis (? lists the keys).\n"
            "  --teach        replay the trace event by event with explanations (view 7)\n"
            "  --iters A:B    the iterations --teach replays (default: around the first error)\n"
            "  --once         print one frame as text instead of opening the terminal\n"
            "  --size CxR     --once: the frame's size (default 80x24)\n"
            "  --view N       --once: the view to print (1-7)\n"
            "  --keys KEYS    --once: keys to press first (\\n Enter, \\t Tab, \\e Esc)\n");
}

// ---- the diagnosis, as the Diagnosis view shows it ---------------------------------------------

static void findings_clear(Session *s) {
    for (int i = 0; i < s->n_findings && s->ui_findings; i++)
        free(s->ui_findings[i].body);
    free(s->ui_findings);
    findings_free(s->findings, s->n_findings);
    s->findings = NULL, s->ui_findings = NULL, s->n_findings = 0;
    s->ui.root_cause = NULL;
    free(s->root_cause);
    s->root_cause = NULL;
}

static void findings_update(Session *s) {
    findings_clear(s);
    s->n_findings = diagnose(&s->model, &s->findings);
    s->ui_findings = xcalloc((size_t)MAX(s->n_findings, 1), sizeof(UiFinding));
    for (int i = 0; i < s->n_findings; i++) {
        const Finding *f = &s->findings[i];
        const char *fixes = f->fixes ? f->fixes : "";
        size_t n = strlen(f->explanation ? f->explanation : "") + 2 * strlen(fixes) + 64;
        char *body = xmalloc(n);
        size_t len = (size_t)snprintf(body, n, "%s", f->explanation ? f->explanation : "");
        if (*fixes) {
            len += (size_t)snprintf(body + len, n - len, "\nFixes:");
            for (const char *p = fixes; *p && len < n;) { // one per line, as "- fix"
                size_t l = strcspn(p, "\n");
                len += (size_t)snprintf(body + len, n - len, "\n- %.*s", (int)l, p);
                p += l + (p[l] == '\n');
            }
        }
        s->ui_findings[i] = (UiFinding){f->title, body, f->severity};
    }
    s->ui.findings = s->ui_findings;
    s->ui.n_findings = s->n_findings;
    s->root_cause = rootcause_text(&s->model, s->findings, s->n_findings);
    ui_set_root_cause(&s->ui, s->root_cause);
}

static void session_free(Session *s) {
    findings_clear(s);
    if (s->teaching) teach_free(&s->teach);
    if (s->loaded) model_free(&s->model);
    screen_free(&s->screen);
}

// ---- the terminal
// ---------------------------------------------------------------------------------

static chtype style_attr[ST_COUNT];

static void styles_init(void) {
    bool colour = has_colors() && !getenv("NO_COLOR");
    if (colour) {
        start_color();
        use_default_colors();
        // pair: foreground, background (-1 the terminal's own)
        static const short pairs[ST_COUNT][2] = {
            [ST_TITLE] = {COLOR_BLACK, COLOR_CYAN},
            [ST_TAB] = {COLOR_WHITE, COLOR_BLUE},
            [ST_TAB_ACTIVE] = {COLOR_BLACK, COLOR_GREEN},
            [ST_OK] = {COLOR_GREEN, -1},
            [ST_WARN] = {COLOR_YELLOW, -1},
            [ST_BAD] = {COLOR_RED, -1},
            [ST_BANNER] = {COLOR_WHITE, COLOR_RED},
            [ST_ACCENT] = {COLOR_CYAN, -1},
            [ST_FWD] = {COLOR_BLUE, -1},
            [ST_BWD] = {COLOR_MAGENTA, -1},
            [ST_COMM] = {COLOR_CYAN, -1},
            [ST_OPTIM] = {COLOR_GREEN, -1},
        };
        for (int st = 0; st < ST_COUNT; st++)
            if (pairs[st][0] || pairs[st][1])
                init_pair((short)(st + 1), pairs[st][0], pairs[st][1]);
        for (int st = 0; st < ST_COUNT; st++)
            style_attr[st] = pairs[st][0] || pairs[st][1] ? COLOR_PAIR(st + 1) : A_NORMAL;
        style_attr[ST_TITLE] |= A_BOLD, style_attr[ST_TAB_ACTIVE] |= A_BOLD,
            style_attr[ST_BAD] |= A_BOLD;
        style_attr[ST_BANNER] |= A_BOLD, style_attr[ST_ACCENT] |= A_BOLD;
    } else {
        for (int st = 0; st < ST_COUNT; st++)
            style_attr[st] = A_NORMAL;
        style_attr[ST_TITLE] = style_attr[ST_TAB_ACTIVE] = style_attr[ST_BANNER] =
            A_REVERSE | A_BOLD;
        style_attr[ST_BAD] = style_attr[ST_WARN] = style_attr[ST_ACCENT] = A_BOLD;
    }
    style_attr[ST_DIM] = A_DIM;
    style_attr[ST_BOLD] = A_BOLD;
    style_attr[ST_SELECT] = A_REVERSE;
}

static SCREEN *terminal_open(char *err, size_t errlen) {
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        snprintf(err, errlen,
                 "stdin and stdout must be a terminal (--once prints a frame as text)");
        return NULL;
    }
    if (!getenv("ESCDELAY")) set_escdelay(25); // Esc acts at once, as nvtop does
    SCREEN *term = newterm(NULL, stdout, stdin);
    if (!term) {
        snprintf(err, errlen, "cannot open the terminal (TERM=%s)",
                 getenv("TERM") ? getenv("TERM") : "unset");
        return NULL;
    }
    set_term(term);
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(FRAME_MS);
    styles_init();
    return term;
}

static void terminal_close(SCREEN *term) {
    endwin();
    delscreen(term);
}

static void blit(const Screen *s) {
    for (int y = 0; y < s->rows; y++) {
        move(y, 0);
        for (int x = 0; x < s->cols; x++) {
            const Cell *c = &s->cells[(size_t)y * (size_t)s->cols + (size_t)x];
            // the bottom-right cell would scroll some terminals: leave it
            if (y == s->rows - 1 && x == s->cols - 1) break;
            addch((chtype)(unsigned char)c->ch | style_attr[c->style < ST_COUNT ? c->style : 0]);
        }
    }
    refresh();
}

static int key_from_curses(int ch) {
    switch (ch) {
    case KEY_UP:
        return UI_KEY_UP;
    case KEY_DOWN:
        return UI_KEY_DOWN;
    case KEY_LEFT:
        return UI_KEY_LEFT;
    case KEY_RIGHT:
        return UI_KEY_RIGHT;
    case KEY_PPAGE:
        return UI_KEY_PGUP;
    case KEY_NPAGE:
        return UI_KEY_PGDN;
    case KEY_HOME:
        return UI_KEY_HOME;
    case KEY_END:
        return UI_KEY_END;
    case KEY_ENTER:
    case '\n':
    case '\r':
        return UI_KEY_ENTER;
    case 27:
        return UI_KEY_ESC;
    case '\t':
        return UI_KEY_TAB;
    case KEY_BTAB:
        return UI_KEY_BTAB;
    case KEY_BACKSPACE:
    case 127:
    case 8:
        return UI_KEY_BACKSPACE;
    case KEY_RESIZE:
        return UI_KEY_RESIZE;
    }
    if (ch == KEY_F(1)) return UI_KEY_F1;
    if (ch == KEY_F(10)) return UI_KEY_F10;
    return ch >= 32 && ch < 127 ? ch : UI_KEY_NONE;
}

// A frame for a live run whose trace is not readable yet.
static void draw_waiting(Screen *scr, const char *dir, const char *why) {
    screen_clear(scr);
    Rect all = rect_make(0, 0, scr->rows, scr->cols);
    char text[4400];
    snprintf(text, sizeof text,
             "ddpdbg: waiting for the trace in %s\n%s\n\nq quits (and stops the run)", dir, why);
    rect_wrap(scr, all, MAX(scr->rows / 2 - 2, 0), 0, ST_NORMAL, text);
}

// The event loop for `ddpdbg tui` (run NULL) and tui_live. Returns a TuiLiveResult.
static int loop(Session *s, const char *dir, const TuiRun *run) {
    bool live = run != NULL, ended = !live;
    int64_t last_refresh = 0, last_diagnose = 0, last_tick = monotonic_ms();
    bool diagnose_due = true; // the next frame diagnoses first (the run's end: once more)
    int fast_errors = 0;
    char why[512] = "no rank database yet";
    for (;;) {
        int64_t now = monotonic_ms();
        if (live && !ended) {
            if (run->poll) run->poll(run->ctx);
            int status = 0;
            TuiRunState st = run->state(run->ctx, &status);
            if (st != TUI_RUN_GOING) {
                ended = true;
                if (st == TUI_RUN_INTERRUPTED) return TUI_LIVE_ENDED;
                if (s->loaded)
                    model_refresh(&s->model, why, sizeof why), ui_model_changed(&s->ui, &s->model);
                if (!run->linger) return TUI_LIVE_ENDED;
                snprintf(s->ui.run_status, sizeof s->ui.run_status,
                         "run ended: exit status %d; q leaves", status);
                s->ui.live = false;
                diagnose_due = true;
            }
        }
        if (live && !s->loaded && now - last_refresh >= REFRESH_MS) {
            last_refresh = now;
            if (model_load(&s->model, dir, why, sizeof why) == 0) {
                s->loaded = true;
                ui_init(&s->ui, &s->model, !ended, NULL);
                ui_model_changed(&s->ui, &s->model);
                snprintf(s->ui.run_status, sizeof s->ui.run_status, ended ? "run ended" : "live");
            }
        } else if (live && s->loaded && !ended && !s->ui.paused &&
                   now - last_refresh >= REFRESH_MS) {
            last_refresh = now;
            if (model_refresh(&s->model, why, sizeof why) == 0)
                ui_model_changed(&s->ui, &s->model);
            else
                snprintf(s->ui.message, sizeof s->ui.message, "%s", why);
        }
        if (s->loaded && (diagnose_due || (!ended && now - last_diagnose >= DIAGNOSE_MS))) {
            last_diagnose = now, diagnose_due = false;
            findings_update(s);
        }

        int rows, cols;
        getmaxyx(stdscr, rows, cols);
        screen_resize(&s->screen, rows, cols);
        if (!s->loaded)
            draw_waiting(&s->screen, dir, why);
        else {
            s->ui.now_ns = s->ui.live ? realtime_ns() : s->model.t1_ns;
            ui_render(&s->screen, &s->model, &s->ui);
        }
        blit(&s->screen);

        int64_t before = monotonic_ms();
        int ch = getch();
        // getch waits FRAME_MS for a key; returning at once without one, again and again, means
        // the terminal is gone (hung up): leave instead of spinning
        fast_errors = ch == ERR && monotonic_ms() - before < FRAME_MS / 4 ? fast_errors + 1 : 0;
        if (fast_errors > GONE_AFTER) return TUI_LIVE_NO_TERMINAL;
        int key = ch == ERR ? UI_KEY_NONE : key_from_curses(ch);
        if (!s->loaded) {
            if (key == 'q' || key == UI_KEY_F10) return TUI_LIVE_QUIT;
        } else if (key != UI_KEY_NONE && key != UI_KEY_RESIZE) {
            if (ui_key(&s->ui, &s->model, key) == UI_QUIT)
                return live && !ended ? TUI_LIVE_QUIT : TUI_LIVE_ENDED;
        }
        int64_t t = monotonic_ms();
        if (s->loaded) ui_tick(&s->ui, &s->model, (int)(t - last_tick));
        last_tick = t;
    }
}

int tui_live(const char *dir, const TuiRun *run, char *err, size_t errlen) {
    SCREEN *term = terminal_open(err, errlen);
    if (!term) return TUI_LIVE_NO_TERMINAL;
    Session s = {0};
    int result = loop(&s, dir, run);
    if (result == TUI_LIVE_NO_TERMINAL) snprintf(err, errlen, "the terminal went away");
    terminal_close(term);
    session_free(&s);
    return result;
}

// ---- ddpdbg tui -------------------------------------------------------------------------------

// --keys text to UiKeys: "\n" Enter, "\t" Tab, "\e" Esc, "\\" a backslash; a real newline or
// tab works too.
static int parse_keys(const char *text, int *keys, int cap) {
    int n = 0;
    for (const char *p = text; *p && n < cap; p++) {
        int k = (unsigned char)*p;
        if (*p == '\\' && p[1]) {
            p++;
            k = *p == 'n'   ? UI_KEY_ENTER
                : *p == 't' ? UI_KEY_TAB
                : *p == 'e' ? UI_KEY_ESC
                            : (unsigned char)*p;
        } else if (*p == '\n' || *p == '\r')
            k = UI_KEY_ENTER;
        else if (*p == '\t')
            k = UI_KEY_TAB;
        keys[n++] = k;
    }
    return n;
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "ddpdbg tui: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see ddpdbg tui --help)\n");
    return 2;
}

int tui_command(int argc, char **argv) {
    const char *dir = NULL, *keys = "", *iters = NULL;
    bool teach = false, once = false;
    int cols = 80, rows = 24, view = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tui_print_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--teach"))
            teach = true;
        else if (!strcmp(a, "--once"))
            once = true;
        else if (!strcmp(a, "--iters") && has_value)
            iters = argv[++i];
        else if (!strcmp(a, "--keys") && has_value)
            keys = argv[++i];
        else if (!strcmp(a, "--size") && has_value) {
            const char *v = argv[++i];
            if (sscanf(v, "%dx%d", &cols, &rows) != 2 || cols < 1 || rows < 1 || cols > 1000 ||
                rows > 1000)
                return usage_error("--size '%s': expected COLSxROWS, e.g. 80x24", v);
        } else if (!strcmp(a, "--view") && has_value) {
            const char *v = argv[++i];
            view = atoi(v);
            if (view < 1 || view > VIEW_COUNT)
                return usage_error("--view '%s': expected 1 to 7", v);
        } else if (a[0] == '-')
            return usage_error("unknown option '%s'", a);
        else if (dir)
            return usage_error("one trace directory expected, got a second one: '%s'", a);
        else
            dir = a;
    }
    if (!dir) return usage_error("%s", "no trace directory given");

    Session s = {0};
    char err[512];
    if (model_load(&s.model, dir, err, sizeof err) < 0) {
        fprintf(stderr, "ddpdbg tui: %s\n", err);
        return 2;
    }
    s.loaded = true;
    if (teach) {
        int64_t lo, hi;
        teach_default_range(&s.model, &lo, &hi);
        long long a, b;
        if (iters && (sscanf(iters, "%lld:%lld", &a, &b) != 2 || a > b)) {
            session_free(&s);
            return usage_error("--iters '%s': expected A:B with A <= B", iters);
        }
        if (iters) lo = a, hi = b;
        if (teach_load(&s.teach, &s.model, lo, hi, err, sizeof err) < 0) {
            fprintf(stderr, "ddpdbg tui: %s\n", err);
            session_free(&s);
            return 2;
        }
        s.teaching = true;
    }
    ui_init(&s.ui, &s.model, false, s.teaching ? &s.teach : NULL);
    findings_update(&s);

    if (once) { // one frame, as text: no terminal
        int pressed[256], n = parse_keys(keys, pressed, 256);
        if (view) s.ui.view = (ViewId)(view - 1);
        if (s.ui.view == VIEW_TEACH && !s.teaching) s.ui.view = VIEW_RANKS;
        screen_resize(&s.screen, rows, cols);
        for (int i = 0; i < n; i++) {
            ui_render(&s.screen, &s.model, &s.ui); // the keys act on what was on screen
            ui_key(&s.ui, &s.model, pressed[i]);
        }
        ui_render(&s.screen, &s.model, &s.ui);
        char *text = screen_text(&s.screen);
        fputs(text, stdout);
        free(text);
        session_free(&s);
        return 0;
    }
    SCREEN *term = terminal_open(err, sizeof err);
    if (!term) {
        fprintf(stderr, "ddpdbg tui: %s\n", err);
        session_free(&s);
        return 2;
    }
    loop(&s, dir, NULL);
    terminal_close(term);
    session_free(&s);
    return 0;
}
