/* rtdetr.h -- the RT-DETR model (Ultralytics RTDETRDetectionModel): built from a model yaml,
 * its parameters registered under PyTorch's state-dict names in PyTorch's order, and its
 * forward pass in training or eval mode. The denoising group and the loss are not here; the
 * head calls an optional hook (RtdetrDnHook) where Ultralytics calls get_cdn_group.
 *
 * Dimension glossary, used by every shape comment in trainer/nn:
 *   B  batch                          C  channels            H, W  spatial size
 *   N  tokens (sum of h*w over the levels fed to the decoder)
 *   Q  queries (nq, 300 in the Ultralytics models)           K  classes (nc)
 *   L  feature levels (3)             NH heads               P  sampling points per level
 *   D  head dimension (hd / NH)       G  denoising groups    hd  decoder hidden dim (256)
 *   Ndn  denoising queries (2*G*max_gt), Q' = Ndn + Q       ndl  decoder layers (6) */
#ifndef TRAINER_NN_RTDETR_H
#define TRAINER_NN_RTDETR_H

#include <stdio.h>

#include "trainer/nn/blocks.h"
#include "trainer/nn/module.h"
#include "trainer/nn/yaml_model.h"

// The denoising queries for one forward (get_cdn_group's first three results).
struct RtdetrDn {
    Tensor *embed;            // (B,Ndn,hd) content, gathered from the class embedding
    Tensor *bbox_logits;      // (B,Ndn,4) noisy boxes in logit space, no grad
    const uint8_t *attn_mask; // (Q',Q') bytes, nonzero = blocked; lives until backward
};

// Called by the head right after input_proj (where Ultralytics calls get_cdn_group, so that
// the nodes it records get the same place in creation order). class_embed: the (K,hd)
// denoising_class_embed.weight. Returns false for "no denoising this step" (out untouched).
typedef bool (*RtdetrDnFn)(void *user, Tape *t, Tensor *class_embed, int nc, int nq, RtdetrDn *out);
struct RtdetrDnHook {
    RtdetrDnFn fn;
    void *user;
};

// Training mode: every decoder layer; eval: only layer eval_idx (n_layers 1).
struct RtdetrOutput {
    Tensor *dec_bboxes; // (n_layers, B, Q', 4) sigmoid cxcywh
    Tensor *dec_scores; // (n_layers, B, Q', K) logits
    Tensor *enc_bboxes; // (B, Q, 4) sigmoid cxcywh of the selected proposals
    Tensor *enc_scores; // (B, Q, K) logits of the selected proposals
    int64_t n_dn;       // Ndn (0 without denoising); the matching queries follow
};

typedef struct Layer {
    const LayerSpec *spec;
    void *m; // the module struct of spec->kind (Conv, HGStem, ..., RtdetrHead)
} Layer;

typedef struct Rtdetr {
    ModelSpec spec;
    Arena params;  // parameter data and grads, BatchNorm buffers
    Arena host;    // module structs and names
    Rng rng;       // init draws
    Registry reg;  // every parameter and buffer, in PyTorch's order
    Layer *layers; // spec.n_layers; the last is the RTDETRDecoder
    RtdetrHead *head;
} Rtdetr;

// Reads `model` (see model_spec_load), builds and initialises every module from `seed`.
// nc > 0 overrides the yaml's nc. Returns 0, or -1 with a one-line message in err.
int rtdetr_init(Rtdetr *m, const char *model, int nc, uint64_t seed, char *err, size_t errlen);
// The same with the parameters on device `dev` (rtdetr_init: the CPU).
int rtdetr_init_on(Rtdetr *m, Device dev, const char *model, int nc, uint64_t seed, char *err,
                   size_t errlen);
void rtdetr_free(Rtdetr *m);

// images (B,3,H,W), H and W multiples of 32. t->training selects the mode (batch statistics,
// denoising, all layers' outputs). dn: NULL or the denoising hook. Fills out.
void rtdetr_forward(Rtdetr *m, Tape *t, Tensor *images, const RtdetrDnHook *dn, RtdetrOutput *out);

// rtdetr_forward that calls after_layer(user, i) as each layer i finishes (profilers time the
// gaps between calls); after_layer may be NULL.
typedef void (*RtdetrLayerFn)(void *user, int layer);
void rtdetr_forward_observed(Rtdetr *m, Tape *t, Tensor *images, const RtdetrDnHook *dn,
                             RtdetrOutput *out, RtdetrLayerFn after_layer, void *user);

// "index name d0xd1..." per parameter, then "total T tensors P parameters".
void rtdetr_print_params(const Rtdetr *m, FILE *f);

#endif
