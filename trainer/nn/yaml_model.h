/* yaml_model.h -- reads an Ultralytics model yaml (nc, scales, backbone:, head: rows of
 * [from, repeats, module, args]) into a ModelSpec: one LayerSpec per row with the arguments
 * each constructor receives, after Ultralytics' parse_model rules (width/depth scaling,
 * channel inference, repeats folded into HGBlock/RepC3's n, c1 prepended to AIFI, the
 * channel list inserted into RTDETRDecoder). Builds no tensors: trainer/nn/rtdetr.c does.
 * Errors are one line "<file>:<line>: <what was expected>" for the CLI to print (exit 2). */
#ifndef TRAINER_NN_YAML_MODEL_H
#define TRAINER_NN_YAML_MODEL_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    MOD_CONV,
    MOD_DWCONV,
    MOD_HGSTEM,
    MOD_HGBLOCK,
    MOD_RESNETLAYER,
    MOD_AIFI,
    MOD_REPC3,
    MOD_UPSAMPLE,
    MOD_CONCAT,
    MOD_RTDETRDECODER,
} ModuleKind;

// The yaml spelling of a module ("nn.Upsample", "RTDETRDecoder", ...).
const char *module_kind_name(ModuleKind k);

#define LAYER_MAX_FROM 8

// Constructor arguments, as Ultralytics passes them.
typedef struct ConvArgs {      // Conv(c1, c2, k, s, p, g, d, act); DWConv: g = gcd(c1, c2)
    int c1, c2, k, s, p, g, d; // p < 0: None (autopad)
    bool act;                  // true: SiLU, false: identity
} ConvArgs;
typedef struct HGStemArgs {
    int c1, cm, c2;
} HGStemArgs;
typedef struct HGBlockArgs { // HGBlock(c1, cm, c2, k, n, lightconv, shortcut)
    int c1, cm, c2, k, n;
    bool light, shortcut;
} HGBlockArgs;
typedef struct ResNetLayerArgs { // ResNetLayer(c1, c2, s, is_first, n), e = 4
    int c1, c2, s, n;
    bool is_first;
} ResNetLayerArgs;
typedef struct AifiArgs { // AIFI(c1, cm, num_heads), dropout 0, GELU, post-norm
    int c1, cm, n_heads;
} AifiArgs;
typedef struct RepC3Args { // RepC3(c1, c2, n, e); hidden c_ = int(c2 * e)
    int c1, c2, n;
    double e;
} RepC3Args;
typedef struct DecoderArgs { // RTDETRDecoder(nc, ch, hd, nq, ndp, nh, ndl, d_ffn, ...)
    int nc, nl, ch[LAYER_MAX_FROM];
    int hd, nq, ndp, nh, ndl, d_ffn, eval_idx, nd;
    double label_noise_ratio, box_noise_scale;
    bool learnt_init_query;
} DecoderArgs;

typedef struct LayerSpec {
    ModuleKind kind;
    int line; // 1-based yaml line of the row
    int n_from;
    int from[LAYER_MAX_FROM]; // absolute layer indices; -1 = the input image
    int c2;                   // output channels (parse_model's ch[i])
    union {
        ConvArgs conv; // MOD_CONV, MOD_DWCONV
        HGStemArgs hgstem;
        HGBlockArgs hgblock;
        ResNetLayerArgs resnet;
        AifiArgs aifi;
        RepC3Args repc3;
        int upsample_scale;  // MOD_UPSAMPLE (nearest)
        int concat_dim;      // MOD_CONCAT (always 1)
        DecoderArgs decoder; // MOD_RTDETRDECODER, always the last layer
    };
} LayerSpec;

typedef struct ModelSpec {
    char name[256]; // the file name used in messages
    int nc;
    char scale[32]; // the scales entry used ("" if none)
    double depth, width;
    int max_channels;
    int n_layers;
    LayerSpec *layers;
} ModelSpec;

// Parses yaml `text` (named `name` in messages). nc > 0 overrides the yaml's nc (as
// Ultralytics' `nc=` argument does). Returns 0, or -1 with the one-line message in err.
int model_spec_parse(ModelSpec *s, const char *name, const char *text, size_t len, int nc,
                     char *err, size_t errlen);
// `model` is a path when it contains '/' or names an existing file; otherwise a built-in
// file (trainer/models/*.yaml, ".yaml" optional). Then as model_spec_parse.
int model_spec_load(ModelSpec *s, const char *model, int nc, char *err, size_t errlen);
void model_spec_free(ModelSpec *s);

#endif
