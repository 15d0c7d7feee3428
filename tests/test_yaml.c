/* test_yaml.c -- the Ultralytics model yaml reader: parse_model's rules on the shipped files
 * (channel inference, repeats, AIFI's c1, the decoder's channel list), width/depth scaling
 * with Python's rounding, nc override, and every bad input in tests/fixtures/bad_yaml/
 * (X.yaml must fail with exactly the line in X.err), plus truncated files that must fail
 * cleanly or parse, never crash. Run from the repository root (as `make test` does). */
#include <dirent.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/nn/builtin.h"
#include "trainer/nn/yaml_model.h"

#define FIXTURES "tests/fixtures/bad_yaml"

static char err[1024];

static int parse(ModelSpec *s, const char *text, int nc) {
    return model_spec_parse(s, "inline.yaml", text, strlen(text), nc, err, sizeof err);
}

static void test_rtdetr_l(void) {
    ModelSpec s;
    EXPECT(model_spec_load(&s, "rtdetr-l.yaml", 0, err, sizeof err) == 0, "%s", err);
    if (s.n_layers != 29) {
        EXPECT(false, "rtdetr-l has %d layers, expected 29", s.n_layers);
        return;
    }
    EXPECT(s.nc == 80 && strcmp(s.scale, "l") == 0 && s.max_channels == 1024, "nc %d scale %s",
           s.nc, s.scale);
    const LayerSpec *l = s.layers;
    EXPECT(l[0].kind == MOD_HGSTEM && l[0].hgstem.c1 == 3 && l[0].hgstem.cm == 32 &&
               l[0].hgstem.c2 == 48 && l[0].from[0] == -1,
           "layer 0");
    const HGBlockArgs *b = &l[5].hgblock;
    EXPECT(l[5].kind == MOD_HGBLOCK && b->c1 == 512 && b->cm == 192 && b->c2 == 1024 && b->k == 5 &&
               b->n == 6 && b->light && !b->shortcut,
           "layer 5: HGBlock(%d, %d, %d, %d, n=%d)", b->c1, b->cm, b->c2, b->k, b->n);
    EXPECT(l[6].hgblock.shortcut && l[6].hgblock.c1 == 1024, "layer 6 shortcut");
    const ConvArgs *dw = &l[2].conv;
    EXPECT(l[2].kind == MOD_DWCONV && dw->c1 == 128 && dw->c2 == 128 && dw->g == 128 &&
               dw->s == 2 && !dw->act,
           "layer 2: DWConv g=%d", dw->g);
    const ConvArgs *c10 = &l[10].conv;
    EXPECT(c10->c1 == 2048 && c10->c2 == 256 && c10->k == 1 && c10->p < 0 && !c10->act, "layer 10");
    EXPECT(l[11].kind == MOD_AIFI && l[11].aifi.c1 == 256 && l[11].aifi.cm == 1024 &&
               l[11].aifi.n_heads == 8,
           "layer 11: AIFI(%d, %d, %d)", l[11].aifi.c1, l[11].aifi.cm, l[11].aifi.n_heads);
    EXPECT(l[12].conv.act && l[13].kind == MOD_UPSAMPLE && l[13].upsample_scale == 2, "12, 13");
    EXPECT(l[14].from[0] == 7 && l[14].conv.c1 == 1024, "layer 14 from %d", l[14].from[0]);
    EXPECT(l[15].kind == MOD_CONCAT && l[15].n_from == 2 && l[15].from[0] == 13 &&
               l[15].from[1] == 14 && l[15].c2 == 512,
           "layer 15: Concat from %d %d -> %d", l[15].from[0], l[15].from[1], l[15].c2);
    EXPECT(l[16].kind == MOD_REPC3 && l[16].repc3.c1 == 512 && l[16].repc3.c2 == 256 &&
               l[16].repc3.n == 3 && l[16].repc3.e == 1.0,
           "layer 16: RepC3");
    EXPECT(l[23].from[0] == 22 && l[23].from[1] == 17, "layer 23 from");
    const DecoderArgs *d = &l[28].decoder;
    EXPECT(l[28].kind == MOD_RTDETRDECODER && l[28].n_from == 3 && l[28].from[0] == 21 &&
               l[28].from[1] == 24 && l[28].from[2] == 27,
           "decoder from");
    EXPECT(d->nc == 80 && d->nl == 3 && d->ch[0] == 256 && d->ch[2] == 256 && d->hd == 256 &&
               d->nq == 300 && d->ndp == 4 && d->nh == 8 && d->ndl == 6 && d->d_ffn == 1024 &&
               d->eval_idx == -1 && d->nd == 100 && d->label_noise_ratio == 0.5 &&
               d->box_noise_scale == 1.0 && !d->learnt_init_query,
           "decoder defaults");
    model_spec_free(&s);

    // nc= overrides the yaml (and reaches the decoder through the "nc" symbol); the bare
    // built-in name works too.
    EXPECT(model_spec_load(&s, "rtdetr-l", 5, err, sizeof err) == 0, "%s", err);
    EXPECT(s.nc == 5 && s.layers[s.n_layers - 1].decoder.nc == 5, "nc override");
    model_spec_free(&s);
}

static void test_others(void) {
    ModelSpec s;
    EXPECT(model_spec_load(&s, "rtdetr-resnet50.yaml", 0, err, sizeof err) == 0, "%s", err);
    EXPECT(s.n_layers == 24 && s.layers[1].c2 == 256 && s.layers[0].c2 == 64 &&
               s.layers[3].resnet.n == 6 && s.layers[23].decoder.ch[0] == 256,
           "resnet50");
    model_spec_free(&s);
    EXPECT(model_spec_load(&s, "rtdetr-tiny.yaml", 0, err, sizeof err) == 0, "%s", err);
    const DecoderArgs *d = &s.layers[s.n_layers - 1].decoder;
    EXPECT(d->hd == 64 && d->nq == 100 && d->ndp == 4 && d->nh == 4 && d->ndl == 3 &&
               d->d_ffn == 256,
           "tiny decoder hd %d nq %d nh %d ndl %d", d->hd, d->nq, d->nh, d->ndl);
    model_spec_free(&s);
    for (int i = 0; i < n_builtin_models; i++) {
        EXPECT(model_spec_load(&s, builtin_models[i].name, 0, err, sizeof err) == 0, "%s: %s",
               builtin_models[i].name, err);
        model_spec_free(&s);
    }
}

// parse_model's scaling: c2 = make_divisible(min(c2, max_ch) * width, 8) unless c2 == nc;
// n = max(round(n * depth), 1) for n > 1, rounding half to even like Python.
static void test_scaling(void) {
    const char *text = "nc: 16\n"
                       "scales:\n"
                       "  n: [0.33, 0.25, 1024]\n"
                       "  s: [0.5, 0.5, 96]\n"
                       "scale: s\n"
                       "backbone:\n"
                       "  - [-1, 1, Conv, [100, 3, 2]]\n"   // 0: min(100, 96) * 0.5 = 48
                       "  - [-1, 3, RepC3, [60]]\n"         // 1: 30 -> 32; n 1.5 -> 2
                       "  - [-1, 5, HGBlock, [8, 16, 3]]\n" // 2: n 2.5 -> 2; c2 not scaled
                       "  - [-1, 1, Conv, [16, 1, 1]]\n"    // 3: c2 == nc: not scaled
                       "  - [-1, 1, Conv, ['nc', 1]]\n"     // 4: 'nc' is the class count
                       "head:\n"
                       "  - [[1, -1], 1, RTDETRDecoder, [nc, 32, 10, 4, 4, 1, 64]]\n";
    ModelSpec s;
    EXPECT(parse(&s, text, 0) == 0, "%s", err);
    if (s.n_layers != 6) return;
    EXPECT(strcmp(s.scale, "s") == 0 && s.depth == 0.5 && s.width == 0.5, "scale %s", s.scale);
    EXPECT(s.layers[0].conv.c2 == 48, "Conv c2 %d", s.layers[0].conv.c2);
    EXPECT(s.layers[1].repc3.c2 == 32 && s.layers[1].repc3.n == 2 && s.layers[1].repc3.c1 == 48,
           "RepC3 c2 %d n %d", s.layers[1].repc3.c2, s.layers[1].repc3.n);
    EXPECT(s.layers[2].hgblock.n == 2 && s.layers[2].hgblock.c2 == 16, "HGBlock n %d",
           s.layers[2].hgblock.n);
    EXPECT(s.layers[3].conv.c2 == 16 && s.layers[4].conv.c2 == 16, "nc convs %d %d",
           s.layers[3].conv.c2, s.layers[4].conv.c2);
    EXPECT(s.layers[5].decoder.ch[0] == 32 && s.layers[5].decoder.ch[1] == 16 &&
               s.layers[5].from[1] == 4,
           "decoder ch %d %d", s.layers[5].decoder.ch[0], s.layers[5].decoder.ch[1]);
    model_spec_free(&s);

    // Python literals in strings, YAML 1.1 booleans, no scales at all.
    const char *lit = "nc: 3\n"
                      "backbone:\n"
                      "  - [-1, 1, Conv, [16, 3, 2, 'None', 1, 1, false]]\n"
                      "head:\n"
                      "  - [[0], 1, RTDETRDecoder, [nc]]\n";
    EXPECT(parse(&s, lit, 0) == 0, "%s", err);
    if (s.n_layers == 2)
        EXPECT(s.layers[0].conv.p < 0 && !s.layers[0].conv.act && s.max_channels > 1 << 20 &&
                   s.layers[1].decoder.nc == 3,
               "literals");
    model_spec_free(&s);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = xcalloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    return buf;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_bad_fixtures(void) {
    DIR *dir = opendir(FIXTURES);
    EXPECT(dir != NULL, "cannot open %s (run from the repository root)", FIXTURES);
    if (!dir) return;
    char *names[128];
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) && n < 128;) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".yaml") == 0) names[n++] = xstrdup(e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    EXPECT(n >= 15, "only %d bad yaml fixtures", n);
    for (int i = 0; i < n; i++) {
        char path[512], expected_path[512];
        snprintf(path, sizeof path, "%s/%s", FIXTURES, names[i]);
        snprintf(expected_path, sizeof expected_path, "%.*s.err", (int)strlen(path) - 5, path);
        char *expected = slurp(expected_path);
        EXPECT(expected != NULL, "%s: missing %s", names[i], expected_path);
        ModelSpec s;
        err[0] = '\0';
        int rc = model_spec_load(&s, path, 0, err, sizeof err);
        EXPECT(rc == -1, "%s parsed", names[i]);
        if (rc == 0) model_spec_free(&s);
        EXPECT(strchr(err, '\n') == NULL, "%s: message has more than one line", names[i]);
        if (expected)
            EXPECT(strcmp(err, expected) == 0, "%s:\n  got      %s\n  expected %s", names[i], err,
                   expected);
        free(expected);
        free(names[i]);
    }
}

static void test_missing(void) {
    ModelSpec s;
    EXPECT(model_spec_load(&s, FIXTURES "/no-such.yaml", 0, err, sizeof err) == -1, "loaded");
    EXPECT(strcmp(err, FIXTURES "/no-such.yaml: cannot open: No such file or directory") == 0, "%s",
           err);
    EXPECT(model_spec_load(&s, "rtdetr-q.yaml", 0, err, sizeof err) == -1, "loaded");
    EXPECT(strncmp(err, "rtdetr-q.yaml: no such file, and not a built-in model (built-in: ", 65) ==
               0,
           "%s", err);
}

// Every prefix of a real file either parses (it ends on a complete row list) or fails with a
// one-line message naming the file: never a crash.
static void test_truncated(void) {
    const char *text = NULL;
    for (int i = 0; i < n_builtin_models; i++)
        if (strcmp(builtin_models[i].name, "rtdetr-l.yaml") == 0) text = builtin_models[i].text;
    EXPECT(text != NULL, "rtdetr-l.yaml not built in");
    if (!text) return;
    size_t len = strlen(text);
    int bad = 0;
    for (size_t cut = 0; cut < len; cut += 3) {
        ModelSpec s;
        err[0] = '\0';
        char *copy = xmalloc(cut + 1);
        memcpy(copy, text, cut);
        copy[cut] = '\0';
        int rc = model_spec_parse(&s, "cut.yaml", copy, cut, 0, err, sizeof err);
        if (rc == 0)
            model_spec_free(&s);
        else if (strncmp(err, "cut.yaml:", 9) != 0 || strchr(err, '\n'))
            bad++;
        free(copy);
    }
    EXPECT(bad == 0, "%d truncations gave a malformed message (last: %s)", bad, err);
}

int main(void) {
    test_rtdetr_l();
    test_others();
    test_scaling();
    test_bad_fixtures();
    test_missing();
    test_truncated();
    return expect_report();
}
