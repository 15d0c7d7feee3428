/* report.c -- `ddpdbg report` (report.h): load, diagnose, print. */
#include "tui/diagnosis/report.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, MAX
#include "tui/diagnosis/rootcause.h" // --short
#include "tui/model/paramgroup.h" // paramgroup_ints

#define WIDTH 100

// ---- text ----------------------------------------------------------------------------------

// Prints text wrapped at WIDTH: every line starts with indent spaces (the first with first
// instead, when given); '\n' in text starts a new paragraph. A word longer than a line is
// printed whole.
static void wrap(FILE *out, const char *text, int indent, const char *first) {
    int col = 0;
    bool line_start = true, first_line = true;
    for (const char *p = text; *p;) {
        if (*p == '\n') {
            if (!line_start) fputc('\n', out);
            line_start = true;
            p++;
            continue;
        }
        if (*p == ' ' && line_start) {
            p++;
            continue;
        }
        size_t n = strcspn(p, " \n");
        if (line_start) {
            if (first_line && first)
                col = fprintf(out, "%s", first);
            else
                col = fprintf(out, "%*s", indent, "");
            first_line = line_start = false;
        } else if (col + 1 + (int)n > WIDTH) {
            col = fprintf(out, "\n%*s", indent, "") - 1;
        } else {
            col += fprintf(out, " ");
        }
        col += fprintf(out, "%.*s", (int)n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
    if (!line_start) fputc('\n', out);
}

// A phase as the rank lines say it: "in forward", "waiting in a collective".
static const char *phase_prose(int phase) {
    switch (phase) {
    case 3:
        return "in forward";
    case 4:
        return "in backward";
    case 5:
        return "waiting in a collective";
    case 6:
        return "in the optimiser step";
    case 7:
        return "in validation";
    case 8:
        return "writing a checkpoint";
    case 9:
        return "done";
    case 2:
        return "loading data";
    default:
        return "starting up";
    }
}

static void rank_line(FILE *out, const ModelRank *r) {
    char line[1024];
    size_t at = 0;
#define ADD(...)                                                                                   \
    (at += at < sizeof line ? (size_t)snprintf(line + at, sizeof line - at, __VA_ARGS__) : 0)
    ADD("rank %d: ", r->rank);
    if (!r->present) {
        ADD("no trace: %s", r->load_error);
    } else {
        int64_t iter = r->n_iters ? r->iters[r->n_iters - 1].iter : -1;
        switch (r->state) {
        case RANK_FINISHED:
            ADD("finished");
            break;
        case RANK_ERRORED:
            ADD("errored at iteration %lld, %s", (long long)r->error_iter, phase_prose(r->phase));
            break;
        case RANK_DEAD:
            ADD("dead at iteration %lld, %s: stopped without an error (%s)", (long long)iter,
                phase_prose(r->phase), r->exit[0] ? r->exit : "its ring was drained");
            break;
        case RANK_WAITING: // iteration -1: a trace without iterations (ddpdbg import-fr)
            ADD("waiting");
            if (iter >= 0) ADD(" at iteration %lld", (long long)iter);
            ADD(" in collective #%lld", (long long)r->wait_seq);
            break;
        case RANK_RUNNING:
            ADD("running");
            if (iter >= 0) ADD(" at iteration %lld", (long long)iter);
            if (iter >= 0 || r->phase != 0) ADD(", %s", phase_prose(r->phase));
            break;
        }
        if (r->pending_seq && r->state != RANK_WAITING) {
            const ModelCollective *c = NULL;
            for (int k = 0; k < r->n_colls && !c; k++)
                if (r->colls[k].seq == r->pending_seq) c = &r->colls[k];
            if (c && c->bucket >= 0)
                ADD("; collective #%lld (%s of bucket %d, %lld elements) never completed",
                    (long long)c->seq, model_op_name(c->op), c->bucket, (long long)c->numel);
            else if (c)
                ADD("; collective #%lld (%s of %s, %lld elements) never completed",
                    (long long)c->seq, model_op_name(c->op), c->what, (long long)c->numel);
        }
    }
#undef ADD
    wrap(out, line, 4, "  ");
}

// The finding's parameters grouped by module; by index alone when the model has no names (the
// explain of a log with TORCH_DISTRIBUTED_DEBUG=OFF and no --model).
static void print_params(FILE *out, const Model *m, const Finding *f) {
    if (!f->n_params) return;
    if (!m->param_names) {
        char *ints = xcalloc((size_t)f->n_params * 12 + 8, 1);
        paramgroup_ints(f->params, f->n_params, ints, f->n_params * 12 + 8);
        fprintf(out, "    parameter indices (%d):\n", f->n_params);
        wrap(out, ints, 8, "      ");
        free(ints);
        return;
    }
    const char **names = xcalloc((size_t)f->n_params, sizeof(char *));
    for (int i = 0; i < f->n_params; i++)
        names[i] = f->params[i] < m->n_params ? m->param_names[f->params[i]] : "?";
    char **lines;
    int n = group_param_names(names, f->n_params, &lines);
    fprintf(out, "    parameters (%d):\n", f->n_params);
    for (int i = 0; i < n; i++)
        fprintf(out, "      %s\n", lines[i]);
    group_lines_free(lines, n);
    free(names);
}

// Each line of text (one per '\n'), wrapped, the first after first and the rest indented.
static void print_lines(FILE *out, const char *text, const char *first, int indent, bool numbered) {
    int k = 0;
    for (const char *p = text; *p; k++) {
        size_t len = strcspn(p, "\n");
        char *one = xcalloc(len + 1, 1), head[32];
        memcpy(one, p, len);
        snprintf(head, sizeof head, numbered ? "%s%d. " : "%s", first, k + 1);
        wrap(out, one, indent, head);
        free(one);
        p += len + (p[len] == '\n');
    }
}

void report_summary_line(FILE *out, const Finding *f, int n) {
    int n_err = 0, n_warn = 0, n_info = 0;
    for (int i = 0; i < n; i++) {
        n_err += f[i].severity == SEVERITY_ERROR;
        n_warn += f[i].severity == SEVERITY_WARNING;
        n_info += f[i].severity == SEVERITY_INFO;
    }
    fprintf(out, "%d %s: %d %s, %d %s, %d %s\n", n, n == 1 ? "finding" : "findings", n_err,
            n_err == 1 ? "error" : "errors", n_warn, n_warn == 1 ? "warning" : "warnings", n_info,
            n_info == 1 ? "note" : "notes");
}

void report_finding_text(FILE *out, const Model *m, const Finding *f, int i) {
    const Finding *g = &f[i];
    char head[320];
    // the first error that follows from nothing is the root cause, and the text says so
    snprintf(head, sizeof head, "[%d] %s%s: ", i + 1, finding_severity_name(g->severity),
             rootcause_find(f, i + 1) == i ? ", the root cause" : "");
    fputc('\n', out);
    char title[600];
    snprintf(title, sizeof title, "%s%s", head, g->title);
    wrap(out, title, 4, "");
    char where[512] = "";
    size_t at = 0;
#define ADD(...)                                                                                   \
    (at += at < sizeof where ? (size_t)snprintf(where + at, sizeof where - at, __VA_ARGS__) : 0)
    if (g->n_ranks) {
        ADD("%s ", g->n_ranks == 1 ? "rank" : "ranks");
        for (int k = 0; k < g->n_ranks; k++)
            ADD("%s%d", k ? ", " : "", g->ranks[k]);
    }
    if (g->iter >= 0) ADD("%siteration %lld", at ? "; " : "", (long long)g->iter);
    if (g->bucket >= 0) ADD("%sbucket %d", at ? "; " : "", g->bucket);
    if (g->seq > 0) ADD("%scollective #%lld", at ? "; " : "", (long long)g->seq);
    if (g->cause >= 0) ADD("%sfollows from [%d]", at ? "; " : "", g->cause + 1);
#undef ADD
    if (at) wrap(out, where, 4, NULL);
    if (g->explanation && *g->explanation) wrap(out, g->explanation, 4, NULL);
    if (g->causes && *g->causes) {
        fprintf(out, "    likely causes, most likely first:\n");
        print_lines(out, g->causes, "      ", 9, true);
    }
    print_params(out, m, g);
    if (g->fixes && *g->fixes) {
        fprintf(out, "    fixes:\n");
        print_lines(out, g->fixes, "      - ", 8, false);
    }
}

void report_text(FILE *out, const Model *m, const Finding *f, int n) {
    int64_t max_seq = 0;
    for (int r = 0; r < m->world; r++)
        if (m->ranks[r].present && m->ranks[r].n_colls)
            max_seq = MAX(max_seq, m->ranks[r].colls[m->ranks[r].n_colls - 1].seq);
    fprintf(out, "trace %s: %d %s, %d parameters, ", m->dir, m->world,
            m->world == 1 ? "rank" : "ranks", m->n_params);
    if (m->max_iter >= m->min_iter)
        fprintf(out, "iterations %lld..%lld\n", (long long)m->min_iter, (long long)m->max_iter);
    else
        fprintf(out, "no iteration recorded\n");
    for (int r = 0; r < m->world; r++)
        rank_line(out, &m->ranks[r]);
    fputc('\n', out);
    if (findings_max_severity(f, n) < SEVERITY_WARNING) {
        char line[256];
        snprintf(line, sizeof line,
                 "no problems found: every rank's parameters got their gradients and the ranks "
                 "issued the same %lld collectives%s",
                 (long long)max_seq, n ? "; notes:" : "");
        wrap(out, line, 2, "");
    } else
        report_summary_line(out, f, n);
    for (int i = 0; i < n; i++)
        report_finding_text(out, m, f, i);
}

// ---- JSON ----------------------------------------------------------------------------------

void json_string(FILE *out, const char *s) {
    if (!s) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

static void json_int_or_null(FILE *out, int64_t v, bool present) {
    if (present)
        fprintf(out, "%lld", (long long)v);
    else
        fputs("null", out);
}

void report_json(FILE *out, const Model *m, const Finding *f, int n) {
    fprintf(out, "{\n  \"format\": \"ddpdbg-report\",\n  \"version\": 1,\n  \"trace\": ");
    json_string(out, m->dir);
    fprintf(out,
            ",\n  \"world\": %d,\n  \"params\": %d,\n  \"iterations\": {\"first\": %lld, \"last\": "
            "%lld},\n",
            m->world, m->n_params, (long long)m->min_iter, (long long)m->max_iter);
    fprintf(out, "  \"status\": \"%s\",\n  \"ranks\": [",
            findings_max_severity(f, n) >= SEVERITY_WARNING ? "findings" : "healthy");
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        fprintf(out, "%s\n    {\"rank\": %d, \"present\": %s, \"load_error\": ", r ? "," : "", r,
                mr->present ? "true" : "false");
        json_string(out, mr->present ? NULL : mr->load_error);
        fprintf(out, ", \"state\": ");
        json_string(out, mr->present ? model_state_name(mr->state) : NULL);
        fprintf(out, ", \"phase\": ");
        json_string(out, mr->present ? model_phase_name(mr->phase) : NULL);
        fprintf(out, ", \"iteration\": ");
        json_int_or_null(out, mr->n_iters ? mr->iters[mr->n_iters - 1].iter : 0, mr->n_iters > 0);
        fprintf(out, ", \"pending_collective\": ");
        json_int_or_null(out, mr->pending_seq, mr->pending_seq > 0);
        fprintf(out, ", \"error\": ");
        json_string(out, mr->error);
        fprintf(out, "}");
    }
    fprintf(out, "\n  ],\n  \"findings\": ");
    report_json_findings(out, m, f, n);
    fprintf(out, "\n}\n");
}

// Each line of text as a JSON string, in an array.
static void json_lines(FILE *out, const char *text) {
    fputc('[', out);
    int k = 0;
    for (const char *p = text ? text : ""; *p; k++) {
        size_t len = strcspn(p, "\n");
        char *one = xcalloc(len + 1, 1);
        memcpy(one, p, len);
        fprintf(out, "%s", k ? ", " : "");
        json_string(out, one);
        free(one);
        p += len + (p[len] == '\n');
    }
    fputc(']', out);
}

void report_json_findings(FILE *out, const Model *m, const Finding *f, int n) {
    fprintf(out, "[");
    for (int i = 0; i < n; i++) {
        const Finding *g = &f[i];
        fprintf(out, "%s\n    {\"id\": %d, \"kind\": \"%s\", \"severity\": \"%s\", \"title\": ",
                i ? "," : "", i + 1, finding_kind_name(g->kind),
                finding_severity_name(g->severity));
        json_string(out, g->title);
        fprintf(out, ",\n     \"ranks\": [");
        for (int k = 0; k < g->n_ranks; k++)
            fprintf(out, "%s%d", k ? ", " : "", g->ranks[k]);
        fprintf(out, "], \"iteration\": ");
        json_int_or_null(out, g->iter, g->iter >= 0);
        fprintf(out, ", \"bucket\": ");
        json_int_or_null(out, g->bucket, g->bucket >= 0);
        fprintf(out, ", \"collective\": ");
        json_int_or_null(out, g->seq, g->seq > 0);
        fprintf(out, ",\n     \"parameters\": [");
        for (int k = 0; k < g->n_params; k++)
            fprintf(out, "%s%d", k ? ", " : "", g->params[k]);
        fprintf(out, "],\n     \"parameter_names\": [");
        int n_named = m->param_names ? g->n_params : 0; // none when only indices are known
        const char **names = n_named ? xcalloc((size_t)n_named, sizeof(char *)) : NULL;
        for (int k = 0; k < n_named; k++) {
            names[k] = g->params[k] < m->n_params ? m->param_names[g->params[k]] : "?";
            fprintf(out, "%s", k ? ", " : "");
            json_string(out, names[k]);
        }
        fprintf(out, "],\n     \"parameter_groups\": [");
        char **lines;
        int n_lines = group_param_names(names, n_named, &lines);
        for (int k = 0; k < n_lines; k++) {
            fprintf(out, "%s", k ? ", " : "");
            json_string(out, lines[k]);
        }
        group_lines_free(lines, n_lines);
        free(names);
        fprintf(out, "],\n     \"explanation\": ");
        json_string(out, g->explanation);
        fprintf(out, ",\n     \"fixes\": ");
        json_lines(out, g->fixes);
        if (g->causes) {
            fprintf(out, ",\n     \"causes\": ");
            json_lines(out, g->causes);
        }
        fprintf(out, ",\n     \"root_cause\": %s", rootcause_find(f, i + 1) == i ? "true" : "false");
        fprintf(out, ",\n     \"follows_from\": ");
        json_int_or_null(out, g->cause + 1, g->cause >= 0);
        fprintf(out, "}");
    }
    fprintf(out, "\n  ]");
}

// ---- the command ---------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(f,
            "usage: ddpdbg report DIR [--json | --short]\n"
            "diagnoses the trace directory DIR (rank<R>.db files written by ddpdbg run --trace):\n"
            "what went wrong, on which ranks, iteration, buckets, parameters and collectives,\n"
            "why, and how to fix it. --json: the same as JSON (format: tui/diagnosis/report.h).\n"
            "--short: the root cause alone, as the TUI's first screen and a failed run show it.\n"
            "exit status: 0 healthy, 1 findings, 2 unreadable trace or bad usage\n");
}

int report_command(int argc, char **argv) {
    const char *dir = NULL;
    bool json = false, short_form = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--short"))
            short_form = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(
                stderr,
                "ddpdbg report: unknown option '%s' (expected --json or --short; see ddpdbg report --help)\n",
                argv[i]);
            return 2;
        } else if (dir) {
            fprintf(stderr, "ddpdbg report: one trace directory expected, got '%s' and '%s'\n", dir,
                    argv[i]);
            return 2;
        } else
            dir = argv[i];
    }
    if (!dir) {
        fprintf(stderr,
                "ddpdbg report: expected a trace directory (usage: ddpdbg report DIR [--json | --short])\n");
        return 2;
    }
    Model m;
    char err[512];
    if (model_load(&m, dir, err, sizeof err) < 0) {
        fprintf(stderr, "ddpdbg report: %s\n", err);
        return 2;
    }
    Finding *f;
    int n = diagnose(&m, &f);
    if (json && short_form) {
        fprintf(stderr, "ddpdbg report: --json and --short exclude each other\n");
        findings_free(f, n);
        model_free(&m);
        return 2;
    }
    char *root = short_form ? rootcause_text(&m, f, n) : NULL;
    if (root)
        rootcause_print(stdout, root, 100);
    else if (short_form) // no root cause: what there is, in one line
        report_summary_line(stdout, f, n);
    else if (json)
        report_json(stdout, &m, f, n);
    else
        report_text(stdout, &m, f, n);
    int status = findings_max_severity(f, n) >= SEVERITY_WARNING ? 1 : 0;
    free(root);
    findings_free(f, n);
    model_free(&m);
    return status;
}
