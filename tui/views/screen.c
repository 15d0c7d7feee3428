/* screen.c -- the in-memory terminal (screen.h): cells, clipped text, word wrap, text dumps. */
#include "tui/views/screen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xmalloc, xrealloc, MIN, MAX

void screen_resize(Screen *s, int rows, int cols) {
    rows = MAX(rows, 0), cols = MAX(cols, 0);
    if (rows != s->rows || cols != s->cols || !s->cells) {
        size_t n = (size_t)rows * (size_t)cols;
        s->cells = xrealloc(s->cells, MAX(n, 1) * sizeof(Cell));
        s->rows = rows, s->cols = cols;
    }
    screen_clear(s);
}

void screen_free(Screen *s) {
    free(s->cells);
    *s = (Screen){0};
}

void screen_clear(Screen *s) {
    size_t n = (size_t)s->rows * (size_t)s->cols;
    for (size_t i = 0; i < n; i++)
        s->cells[i] = (Cell){' ', ST_NORMAL};
}

Rect rect_below(Rect r, int n) {
    n = MIN(MAX(n, 0), MAX(r.h, 0));
    return (Rect){r.y + n, r.x, r.h - n, r.w};
}

Cell *screen_at(Screen *s, int y, int x) {
    if (y < 0 || x < 0 || y >= s->rows || x >= s->cols) return NULL;
    return &s->cells[(size_t)y * (size_t)s->cols + (size_t)x];
}

void screen_fill(Screen *s, Rect r, char ch, Style style) {
    for (int y = MAX(r.y, 0); y < MIN(r.y + r.h, s->rows); y++)
        for (int x = MAX(r.x, 0); x < MIN(r.x + r.w, s->cols); x++)
            s->cells[(size_t)y * (size_t)s->cols + (size_t)x] = (Cell){ch, (uint8_t)style};
}

void screen_restyle(Screen *s, int y, int x, int w, Style style) {
    for (int i = 0; i < w; i++) {
        Cell *c = screen_at(s, y, x + i);
        if (c) c->style = (uint8_t)style;
    }
}

static char printable(unsigned char ch) {
    return ch >= 32 && ch < 127 ? (char)ch : ch == '\t' ? ' ' : '?';
}

// The shared body of rect_put and rect_put_fit: at most maxw characters.
static int put_clipped(Screen *s, Rect r, int row, int col, int maxw, Style style,
                       const char *text) {
    if (row < 0 || row >= r.h || !text) return col;
    int y = r.y + row;
    for (const unsigned char *p = (const unsigned char *)text; *p && *p != '\n' && maxw > 0;
         p++, maxw--) {
        if (col >= r.w) break;
        if (col >= 0) {
            Cell *c = screen_at(s, y, r.x + col);
            if (c) *c = (Cell){printable(*p), (uint8_t)style};
        }
        col++;
    }
    return col;
}

int rect_put(Screen *s, Rect r, int row, int col, Style style, const char *text) {
    return put_clipped(s, r, row, col, 1 << 30, style, text);
}

int rect_printf(Screen *s, Rect r, int row, int col, Style style, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return rect_put(s, r, row, col, style, buf);
}

int rect_put_fit(Screen *s, Rect r, int row, int col, int maxw, Style style, const char *text) {
    if (maxw <= 0) return col;
    size_t len = strcspn(text, "\n");
    if ((int)len <= maxw) return put_clipped(s, r, row, col, maxw, style, text);
    if (maxw <= 2) return put_clipped(s, r, row, col, maxw, style, "..");
    int end = put_clipped(s, r, row, col, maxw - 2, style, text);
    return put_clipped(s, r, row, end, 2, style, "..");
}

int rect_put_right(Screen *s, Rect r, int row, Style style, const char *text) {
    int col = MAX(r.w - (int)strcspn(text, "\n"), 0);
    rect_put(s, r, row, col, style, text);
    return col;
}

int rect_wrap(Screen *s, Rect r, int row, int skip, Style style, const char *text) {
    int width = MAX(r.w, 1), line = 0;
    const char *p = text;
    while (*p) {
        // one paragraph: up to the next '\n'
        const char *end = p + strcspn(p, "\n");
        if (end == p) line++; // a blank line
        while (p < end) {
            while (p < end && *p == ' ')
                p++;
            if (p == end) break;
            // the longest run of words that fits; a word longer than the width is cut
            const char *q = p, *brk = NULL;
            while (q < end && q - p < width) {
                if (*q == ' ') brk = q;
                q++;
            }
            const char *stop = (q == end || *q == ' ' || !brk) ? q : brk;
            int n = (int)(stop - p), out = line - skip;
            if (out >= 0 && row + out < r.h) {
                char buf[1024];
                n = MIN(n, (int)sizeof buf - 1);
                memcpy(buf, p, (size_t)n), buf[n] = 0;
                rect_put(s, r, row + out, 0, style, buf);
            }
            line++;
            p = stop;
        }
        p = *end ? end + 1 : end;
    }
    return line;
}

void rect_box(Screen *s, Rect r, Style style, const char *title) {
    if (r.h < 2 || r.w < 2) return;
    for (int x = 1; x < r.w - 1; x++) {
        rect_put(s, r, 0, x, style, "-");
        rect_put(s, r, r.h - 1, x, style, "-");
    }
    for (int y = 1; y < r.h - 1; y++) {
        rect_put(s, r, y, 0, style, "|");
        rect_put(s, r, y, r.w - 1, style, "|");
    }
    rect_put(s, r, 0, 0, style, "+"), rect_put(s, r, 0, r.w - 1, style, "+");
    rect_put(s, r, r.h - 1, 0, style, "+"), rect_put(s, r, r.h - 1, r.w - 1, style, "+");
    if (title && *title) {
        Rect top = {r.y, r.x + 2, 1, r.w - 4};
        int c = rect_put(s, top, 0, 0, style, " ");
        c = rect_put(s, top, 0, c, style, title);
        rect_put(s, top, 0, c, style, " ");
    }
}

void screen_row_text(const Screen *s, int y, char *buf) {
    int n = 0;
    if (y >= 0 && y < s->rows)
        for (; n < s->cols; n++)
            buf[n] = s->cells[(size_t)y * (size_t)s->cols + (size_t)n].ch;
    buf[n] = 0;
}

int screen_find(const Screen *s, const char *needle) {
    char *buf = xmalloc((size_t)s->cols + 1);
    int found = -1;
    for (int y = 0; y < s->rows && found < 0; y++) {
        screen_row_text(s, y, buf);
        if (strstr(buf, needle)) found = y;
    }
    free(buf);
    return found;
}

char *screen_text(const Screen *s) {
    char *out = xmalloc((size_t)s->rows * ((size_t)s->cols + 1) + 1), *p = out;
    for (int y = 0; y < s->rows; y++) {
        screen_row_text(s, y, p);
        int n = s->cols;
        while (n > 0 && p[n - 1] == ' ')
            n--;
        p[n] = '\n';
        p += n + 1;
    }
    *p = 0;
    return out;
}
