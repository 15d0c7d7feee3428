/* fuzz_yaml.c -- libFuzzer target: the model yaml reader (trainer/nn/yaml_model.h,
 * model_spec_parse) on arbitrary bytes, as `model=FILE` would read them. Beyond "no crash,
 * leak or undefined behaviour" it checks the reader's contract: a rejected file gets one
 * message "fuzz.yaml:<line>: ..."; an accepted one has layers, the decoder last, every input
 * an earlier layer (or the image) and positive channel counts, which the model builder
 * (trainer/nn/rtdetr.c) relies on. Seeds: the yaml files in trainer/models and tests/fixtures/bad_yaml. */
#include "tests/fuzz_util.h"
#include "trainer/nn/yaml_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ModelSpec s;
    char err[1024] = "";
    if (model_spec_parse(&s, "fuzz.yaml", (const char *)data, size, 0, err, sizeof err)) {
        FUZZ_CHECK(!strncmp(err, "fuzz.yaml:", 10) && strchr(err, ' '),
                   "rejected without a 'fuzz.yaml:<line>: ...' message: '%s'", err);
        FUZZ_CHECK(!s.layers && s.n_layers == 0, "rejected, but %d layers are still held",
                   s.n_layers);
        return 0;
    }
    FUZZ_CHECK(s.n_layers >= 1 && s.layers, "accepted with %d layers", s.n_layers);
    FUZZ_CHECK(s.nc >= 1, "accepted with nc %d", s.nc);
    FUZZ_CHECK(s.layers[s.n_layers - 1].kind == MOD_RTDETRDECODER,
               "accepted with the last layer a %s", module_kind_name(s.layers[s.n_layers - 1].kind));
    for (int i = 0; i < s.n_layers; i++) {
        const LayerSpec *l = &s.layers[i];
        FUZZ_CHECK(l->n_from >= 1 && l->n_from <= LAYER_MAX_FROM, "layer %d: %d inputs", i,
                   l->n_from);
        for (int j = 0; j < l->n_from; j++)
            FUZZ_CHECK(l->from[j] >= -1 && l->from[j] < i && (i > 0 || l->from[j] == -1),
                       "layer %d: input %d is layer %d", i, j, l->from[j]);
        FUZZ_CHECK(l->c2 >= 1, "layer %d (%s, yaml line %d): %d output channels", i,
                   module_kind_name(l->kind), l->line, l->c2);
        FUZZ_CHECK(l->kind != MOD_RTDETRDECODER || i == s.n_layers - 1,
                   "layer %d: a decoder before the last layer", i);
    }
    model_spec_free(&s);
    return 0;
}
