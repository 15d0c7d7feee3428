/* blocks.h -- the RT-DETR blocks of Ultralytics (nn/modules/{block,transformer,head}.py), each
 * an *_init that registers its parameters in PyTorch's order and a *_forward that creates
 * ops in the order of the Ultralytics forward code (that order is PyTorch's node order, which
 * decides gradient-ready hook order). Private to trainer/nn; the model is trainer/nn/rtdetr.h.
 * Shapes use the glossary of rtdetr.h. Parameter shapes and inits: rtdetr.md section 2. */
#ifndef TRAINER_NN_BLOCKS_H
#define TRAINER_NN_BLOCKS_H

#include "trainer/nn/module.h"
#include "trainer/nn/yaml_model.h"

// ---- backbone.c ----
typedef struct HGStem { // rtdetr.md 2.2
    Conv stem1, stem2a, stem2b, stem3, stem4;
} HGStem;
void hgstem_init(HGStem *m, Registry *r, const HGStemArgs *a);
Tensor *hgstem_forward(HGStem *m, Tape *t, Tensor *x); // (B,3,H,W) -> (B,C2,H/4,W/4)

typedef struct HGBlock { // 2.3; light: m[j] is LightConv (conv1 1x1 no act, conv2 DWConv ReLU)
    HGBlockArgs a;
    Conv *m1; // n: Conv (ReLU), or LightConv.conv1
    Conv *m2; // n: LightConv.conv2, NULL when not light
    Conv sc, ec;
    bool add; // shortcut and c1 == c2
} HGBlock;
void hgblock_init(HGBlock *m, Registry *r, const HGBlockArgs *a);
Tensor *hgblock_forward(HGBlock *m, Tape *t, Tensor *x); // (B,C1,H,W) -> (B,C2,H,W)

typedef struct ResNetBlock { // 2.7
    Conv cv1, cv2, cv3, shortcut;
    bool has_shortcut; // a Sequential(Conv) when s != 1 or c1 != 4*c2, else identity
} ResNetBlock;
typedef struct ResNetLayer {
    ResNetLayerArgs a;
    Conv stem;           // is_first: layer.0 (7x7 s2), then layer.1 MaxPool2d(3, 2, 1)
    ResNetBlock *blocks; // else: layer.0 .. layer.(n-1)
} ResNetLayer;
void resnetlayer_init(ResNetLayer *m, Registry *r, const ResNetLayerArgs *a);
Tensor *resnetlayer_forward(ResNetLayer *m, Tape *t, Tensor *x);

// ---- encoder.c ----
typedef struct Aifi { // 2.8: TransformerEncoderLayer, post-norm, GELU, dropout 0
    AifiArgs a;
    Mha ma;
    Linear fc1, fc2;
    LayerNorm norm1, norm2;
} Aifi;
void aifi_init(Aifi *m, Registry *r, const AifiArgs *a);
Tensor *aifi_forward(Aifi *m, Tape *t, Tensor *x); // (B,C,H,W) -> (B,C,H,W)
// The 2-D sin-cos embedding (H*W, C) of build_2d_sincos_position_embedding(w, h, C), written
// into pos: token t uses a = t div H and b = t mod H.
void aifi_sincos_embedding(float *pos, int64_t h, int64_t w, int64_t c);

typedef struct RepC3 { // 2.5, 2.6: m = n RepConv (conv1 3x3, conv2 1x1, SiLU of the sum)
    RepC3Args a;
    Conv cv1, cv2, cv3;
    bool has_cv3;      // c_ != c2
    Conv *rep1, *rep2; // n each
} RepC3;
void repc3_init(RepC3 *m, Registry *r, const RepC3Args *a);
Tensor *repc3_forward(RepC3 *m, Tape *t, Tensor *x);

// ---- decoder.c ----
#define MLP_MAX_LAYERS 4
typedef struct Mlp { // 2.9: Linear layers with ReLU between
    Linear layers[MLP_MAX_LAYERS];
    int n;
} Mlp;
void mlp_init(Mlp *m, Registry *r, const char *name, int in, int hidden, int out, int n_layers);
Tensor *mlp_forward(const Mlp *m, Tape *t, Tensor *x);

typedef struct MsDeformAttn { // 2.10
    Linear sampling_offsets, attention_weights, value_proj, output_proj;
    int d_model, n_levels, n_heads, n_points;
} MsDeformAttn;

typedef struct DecoderLayer { // 2.11
    Mha self_attn;
    LayerNorm norm1;
    MsDeformAttn cross_attn;
    LayerNorm norm2;
    Linear linear1, linear2;
    LayerNorm norm3;
} DecoderLayer;
void decoder_layer_init(DecoderLayer *l, Registry *r, const char *name, int d_model, int n_heads,
                        int d_ffn, int n_levels, int n_points);

// The value side shared by every decoder layer: feats (B,N,hd) with N = sum of h*w over
// the levels; shapes: 2L entries (h0, w0, h1, w1, ...), living until backward.
typedef struct DecoderValue {
    Tensor *feats;
    const int64_t *shapes;
    int n_levels;
} DecoderValue;

// One layer: embed (B,Q,hd), ref (B,Q,4) sigmoid cxcywh, query_pos (B,Q,hd),
// attn_mask NULL or (Q,Q) bytes (nonzero = blocked) -> (B,Q,hd).
Tensor *decoder_layer_forward(DecoderLayer *l, Tape *t, Tensor *embed, Tensor *ref,
                              const DecoderValue *v, const uint8_t *attn_mask, Tensor *query_pos);

// ---- head.c: RTDETRDecoder (2.12, 2.13) ----
typedef struct RtdetrHead {
    DecoderArgs a;
    Conv *input_proj;     // nl: Sequential(Conv2d "0", BatchNorm2d "1")
    DecoderLayer *layers; // ndl, identical at init (deep copies of one layer, as _get_clones)
    Embedding dn_class_embed;
    Embedding tgt_embed; // learnt_init_query only
    Mlp query_pos_head;
    Linear enc_output;
    LayerNorm enc_output_norm;
    Linear enc_score_head;
    Mlp enc_bbox_head;
    Linear *dec_score_head; // ndl
    Mlp *dec_bbox_head;     // ndl
} RtdetrHead;

typedef struct RtdetrDn RtdetrDn;
typedef struct RtdetrDnHook RtdetrDnHook;
typedef struct RtdetrOutput RtdetrOutput;

void head_init(RtdetrHead *h, Registry *r, const DecoderArgs *a);
// xs: nl feature maps (B,ch_l,h_l,w_l). dn: NULL or the denoising hook. Fills out.
void head_forward(RtdetrHead *h, Tape *t, Tensor *const *xs, const RtdetrDnHook *dn,
                  RtdetrOutput *out);

#endif
