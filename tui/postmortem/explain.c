/* explain.c -- `ddpdbg explain` (explain.h): read the log, give its parameters names and
 * indices where it or --model can, make the findings (explain_rules.c), print them as the
 * report does. */
#include "tui/postmortem/explain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"         // xcalloc, xrealloc, xstrdup, MAX
#include "tui/diagnosis/report.h" // report_finding_text, report_json_findings, json_string
#include "tui/postmortem/explain_rules.h"
#include "tui/postmortem/readall.h"
#include "tui/postmortem/registry.h"

#define MAX_LOG_BYTES ((size_t)128 << 20) // logscan keeps about 8 bytes per byte of log

// ---- the parameter space -----------------------------------------------------------------------

static int name_index(char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

// The INFO lines' names complete an error's list when the list is cut or absent.
static bool use_info(const LogScan *s, const LogError *e) {
    return e->kind == LOG_UNFINISHED_REDUCTION && e->rank >= 0 && e->rank <= s->max_rank &&
           s->n_info_names[e->rank] > 0 && (e->names.cut || !e->names.present);
}

// Whether the model's registry fits every name and index the log gives; else why not, in note.
static bool model_fits(const LogScan *s, char **reg, int n_reg, const char *model, char *note,
                       size_t len) {
    for (int i = 0; i < s->n; i++) {
        const LogError *e = &s->errors[i];
        for (int k = 0; k < e->indices.n; k++)
            if (e->indices.values[k] >= n_reg) {
                snprintf(note, len,
                         "index %lld (line %d) is beyond %s's %d parameters: the log is "
                         "of another model",
                         (long long)e->indices.values[k], e->indices.line, model, n_reg);
                return false;
            }
        if (e->kind == LOG_PARAM_SHAPE && e->a >= n_reg) {
            snprintf(note, len,
                     "parameter %lld (line %d) is beyond %s's %d parameters: the log is "
                     "of another model",
                     (long long)e->a, e->line, model, n_reg);
            return false;
        }
        for (int k = 0; k < e->names.n; k++) {
            int idx = name_index(reg, n_reg, e->names.names[k]);
            if (idx < 0) {
                snprintf(note, len,
                         "'%.200s' (line %d) is not a parameter of %s: the log is of "
                         "another model",
                         e->names.names[k], e->names.line, model);
                return false;
            }
            if (e->kind == LOG_MARKED_TWICE && e->indices.n && e->indices.values[0] != idx) {
                snprintf(note, len,
                         "%s's parameter %lld is not %s (line %d): the log is of "
                         "another model",
                         model, (long long)e->indices.values[0], e->names.names[k], e->line);
                return false;
            }
        }
    }
    return true;
}

// Adds idx to p's parameters (build_space sorts them and drops repeats when all are in).
static void add_param(ErrorParams *p, int idx) {
    p->params = xrealloc(p->params, sizeof(int) * (size_t)(p->n + 1));
    p->params[p->n++] = idx;
}

static int cmp_int(const void *a, const void *b) {
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void sort_unique(ErrorParams *p) {
    if (!p->n) return;
    qsort(p->params, (size_t)p->n, sizeof(int), cmp_int);
    int kept = 1;
    for (int k = 1; k < p->n; k++)
        if (p->params[k] != p->params[kept - 1]) p->params[kept++] = p->params[k];
    p->n = kept;
}

// A name's index in the space, adding it when the space is the log's own names.
static int space_index(ExplainLog *log, const char *name, bool grow) {
    int idx = name_index(log->m.param_names, log->m.n_params, name);
    if (idx >= 0 || !grow) return idx;
    log->m.param_names =
        xrealloc(log->m.param_names, sizeof(char *) * (size_t)(log->m.n_params + 1));
    log->m.param_names[log->m.n_params] = xstrdup(name);
    return log->m.n_params++;
}

static void build_space(ExplainLog *log, char **reg, int n_reg) {
    LogScan *s = &log->scan;
    bool names = false;
    for (int i = 0; i < s->n; i++)
        names |= s->errors[i].names.n > 0 || use_info(s, &s->errors[i]);
    log->n_params_model = s->n_params;
    if (reg) {
        log->m.param_names = reg;
        log->m.n_params = n_reg;
        log->n_params_model = n_reg;
    }
    log->indices = reg || !names;
    bool grow = !reg; // without a model the space is the log's names, in order first seen
    log->params = xcalloc((size_t)s->n + 1, sizeof(ErrorParams));
    for (int i = 0; i < s->n; i++) {
        const LogError *e = &s->errors[i];
        ErrorParams *p = &log->params[i];
        const LogList *cut = e->names.cut ? &e->names : e->indices.cut ? &e->indices : NULL;
        p->cut = cut != NULL;
        if (cut) snprintf(p->partial, sizeof p->partial, "%s", cut->partial);
        p->n_listed = MAX(e->names.n, e->indices.n);
        for (int k = 0; k < e->names.n; k++) {
            int idx = space_index(log, e->names.names[k], grow);
            if (idx >= 0) add_param(p, idx);
        }
        if (log->indices) {
            for (int k = 0; k < e->indices.n; k++)
                add_param(p, (int)e->indices.values[k]);
            if (e->kind == LOG_PARAM_SHAPE && e->a >= 0) add_param(p, (int)e->a);
        }
        if (reg && e->names.cut && e->names.partial[0] && // a cut name that is whole after all
            name_index(reg, n_reg, e->names.partial) >= 0)
            add_param(p, name_index(reg, n_reg, e->names.partial));
        sort_unique(p);
        if (use_info(s, e) && (reg || names)) {
            int before = p->n;
            for (int k = 0; k < s->n_info_names[e->rank]; k++) {
                int idx = space_index(log, s->info_names[e->rank][k], grow);
                if (idx >= 0) add_param(p, idx);
            }
            sort_unique(p);
            p->from_info = p->n > before;
            if (p->from_info) p->cut = false;
        }
    }
}

// ---- output ------------------------------------------------------------------------------------

static void print_header(FILE *out, const ExplainLog *log, int n_findings) {
    const LogScan *s = &log->scan;
    fprintf(out, "log %s: %d %s", log->path, s->n_lines, s->n_lines == 1 ? "line" : "lines");
    if (s->n_prefix_ranks) {
        char who[256];
        ranks_text(who, sizeof who, s->prefix_ranks, s->n_prefix_ranks);
        fprintf(out, ", lines of %s (torchrun's [rankN]: prefixes)", who);
    }
    if (s->world) fprintf(out, ", %d ranks (%s)", s->world, s->world_from);
    if (!s->n) {
        fprintf(out, ": no DDP error found\n  (explain looks for PyTorch's DDP errors: the "
                     "unfinished reduction, marked ready twice, a changed static graph, the "
                     "construction checks of the model, Gloo's timeouts and closed connections, "
                     "the NCCL watchdog, DETAIL's checks)\n");
        return;
    }
    fprintf(out, ": %d DDP %s\n", s->n, s->n == 1 ? "error" : "errors");
    for (int i = 0; i < s->n; i++) {
        const LogError *e = &s->errors[i];
        char who[32];
        fprintf(out, "  %s, line %d: %.120s%s", explain_rank(e->rank, who, sizeof who), e->line,
                e->first, strlen(e->first) > 120 ? "..." : "");
        if (e->count > 1) fprintf(out, " (%d times)", e->count);
        fputc('\n', out);
        const LogList *cut = e->names.cut ? &e->names : e->indices.cut ? &e->indices : NULL;
        if (cut)
            fprintf(out, "    the log ends inside its list of %s (line %d): %d read%s%s%s\n",
                    cut == &e->names ? "parameter names" : "parameter indices", cut->line, cut->n,
                    cut->partial[0] ? ", '" : "", cut->partial, cut->partial[0] ? "' cut off" : "");
    }
    if (log->model_note[0]) fprintf(out, "  --model set aside: %s\n", log->model_note);
    fputc('\n', out);
    (void)n_findings;
}

static void json_list(FILE *out, const LogList *l) {
    if (!l->present) {
        fputs("null", out);
        return;
    }
    fputc('[', out);
    for (int k = 0; k < l->n; k++) {
        if (k) fputs(", ", out);
        if (l->names)
            json_string(out, l->names[k]);
        else
            fprintf(out, "%lld", (long long)l->values[k]);
    }
    fputc(']', out);
}

static void print_json(FILE *out, const ExplainLog *log, const Finding *f, int n) {
    const LogScan *s = &log->scan;
    fprintf(out, "{\n  \"format\": \"ddpdbg-explain\",\n  \"version\": 1,\n  \"log\": ");
    json_string(out, log->path);
    fprintf(out, ",\n  \"lines\": %d,\n  \"model\": ", s->n_lines);
    json_string(out, log->model);
    fprintf(out, ",\n  \"indices\": %s,\n  \"world\": ", log->indices ? "true" : "false");
    if (s->world || s->n_prefix_ranks)
        fprintf(out, "%d", s->world ? s->world : s->max_rank + 1);
    else
        fputs("null", out);
    fprintf(out, ",\n  \"status\": \"%s\",\n  \"errors\": [", s->n ? "findings" : "no_ddp_error");
    for (int i = 0; i < s->n; i++) {
        const LogError *e = &s->errors[i];
        fprintf(out,
                "%s\n    {\"rank\": %d, \"line\": %d, \"kind\": \"%s\", \"count\": %d, \"text\": ",
                i ? "," : "", e->rank, e->line, log_kind_name(e->kind), e->count);
        json_string(out, e->first);
        fputs(", \"names\": ", out);
        json_list(out, &e->names);
        fputs(", \"indices\": ", out);
        json_list(out, &e->indices);
        fputs(", \"cut\": ", out);
        const LogList *cut = e->names.cut ? &e->names : e->indices.cut ? &e->indices : NULL;
        if (cut) {
            fprintf(out, "{\"list\": \"%s\", \"read\": %d, \"partial\": ",
                    cut == &e->names ? "names" : "indices", cut->n);
            json_string(out, cut->partial);
            fputc('}', out);
        } else {
            fputs("null", out);
        }
        fputc('}', out);
    }
    fprintf(out, "\n  ],\n  \"findings\": ");
    report_json_findings(out, &log->m, f, n);
    fprintf(out, "\n}\n");
}

// ---- the command -------------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg explain FILE|- [--model M] [--json]\n"
               "finds the DDP errors in a training log (FILE, or - for standard input) as users\n"
               "paste it: torchrun's [rankN]: prefixes or none, wrapped or cut lines, any other\n"
               "text around them; and explains each as ddpdbg report does: the ranks, the\n"
               "parameters grouped by module, what it means in DDP's reducer, the likely causes\n"
               "and the fixes with their cost. --model M (a built-in model or a yaml path) names\n"
               "parameters the log gives by index (TORCH_DISTRIBUTED_DEBUG=OFF). --json: the same\n"
               "as JSON (format: tui/postmortem/explain.h).\n"
               "exit status: 0 no DDP error found, 1 findings, 2 bad usage or an unreadable log\n");
}

static void explain_free(ExplainLog *log, Finding *f, int n) {
    findings_free(f, n);
    for (int i = 0; i < log->scan.n; i++)
        free(log->params[i].params);
    free(log->params);
    for (int i = 0; i < log->m.n_params; i++)
        free(log->m.param_names[i]);
    free(log->m.param_names);
    log_scan_free(&log->scan);
}

int explain_command(int argc, char **argv) {
    const char *path = NULL, *model = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ddpdbg explain: --model needs a model (a built-in name such as "
                                "rtdetr-l.yaml, or a yaml path)\n");
                return 2;
            }
            model = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr,
                    "ddpdbg explain: unknown option '%s' (expected --model or --json; see "
                    "ddpdbg explain --help)\n",
                    argv[i]);
            return 2;
        } else if (path) {
            fprintf(stderr, "ddpdbg explain: one log expected, got '%s' and '%s'\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "ddpdbg explain: expected a log file, or - for standard input (usage: "
                        "ddpdbg explain FILE|- [--model M] [--json])\n");
        return 2;
    }
    uint8_t *data;
    size_t len;
    char err[1024];
    if (read_all(path, MAX_LOG_BYTES, &data, &len, err, sizeof err) < 0) {
        fprintf(stderr, "ddpdbg explain: %s\n", err);
        return 2;
    }
    char **reg = NULL;
    int n_reg = 0;
    if (model && registry_names(model, &reg, &n_reg, err, sizeof err) < 0) {
        if (err[0]) fprintf(stderr, "ddpdbg explain: --model %s: %s\n", model, err);
        free(data);
        return 2;
    }
    ExplainLog log = {.path = path, .model = model};
    snprintf(log.m.dir, sizeof log.m.dir, "%s", path);
    log_scan((const char *)data, len, &log.scan);
    free(data);
    if (reg && !model_fits(&log.scan, reg, n_reg, model, log.model_note, sizeof log.model_note)) {
        registry_free(reg, n_reg);
        reg = NULL;
        log.model = NULL;
    }
    build_space(&log, reg, n_reg);
    Finding *f;
    int n = explain_findings(&log, &f);
    if (json) {
        print_json(stdout, &log, f, n);
    } else {
        print_header(stdout, &log, n);
        if (n) report_summary_line(stdout, f, n);
        for (int i = 0; i < n; i++)
            report_finding_text(stdout, &log.m, f, i);
    }
    int status = n ? 1 : 0;
    explain_free(&log, f, n);
    return status;
}
