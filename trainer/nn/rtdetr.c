/* rtdetr.c -- the model: builds every layer of a ModelSpec under "model.<i>." and runs them
 * as RTDETRDetectionModel.predict does (each layer reads the outputs named by its `from`;
 * the head gets the outputs of its `from` list). See rtdetr.h. */
#include "trainer/nn/rtdetr.h"

#include "kernels/base.h" // CHECK

static void *build_layer(Registry *r, const LayerSpec *l) {
    switch (l->kind) {
    case MOD_CONV:
    case MOD_DWCONV: {
        Conv *c = registry_alloc(r, sizeof *c);
        const ConvArgs *a = &l->conv;
        ConvShape s = {
            .c1 = a->c1, .c2 = a->c2, .k = a->k, .s = a->s, .pad = a->p, .g = a->g, .d = a->d};
        conv_init(c, r, NULL, s, a->act ? ACT_SILU : ACT_NONE);
        return c;
    }
    case MOD_HGSTEM: {
        HGStem *m = registry_alloc(r, sizeof *m);
        hgstem_init(m, r, &l->hgstem);
        return m;
    }
    case MOD_HGBLOCK: {
        HGBlock *m = registry_alloc(r, sizeof *m);
        hgblock_init(m, r, &l->hgblock);
        return m;
    }
    case MOD_RESNETLAYER: {
        ResNetLayer *m = registry_alloc(r, sizeof *m);
        resnetlayer_init(m, r, &l->resnet);
        return m;
    }
    case MOD_AIFI: {
        Aifi *m = registry_alloc(r, sizeof *m);
        aifi_init(m, r, &l->aifi);
        return m;
    }
    case MOD_REPC3: {
        RepC3 *m = registry_alloc(r, sizeof *m);
        repc3_init(m, r, &l->repc3);
        return m;
    }
    case MOD_RTDETRDECODER: {
        RtdetrHead *m = registry_alloc(r, sizeof *m);
        head_init(m, r, &l->decoder);
        return m;
    }
    case MOD_UPSAMPLE:
    case MOD_CONCAT:
        return NULL; // no parameters
    }
    CHECK(false, "unknown module kind %d", (int)l->kind);
    return NULL;
}

int rtdetr_init(Rtdetr *m, const char *model, int nc, uint64_t seed, char *err, size_t errlen) {
    return rtdetr_init_on(m, DEV_CPU, model, nc, seed, err, errlen);
}

int rtdetr_init_on(Rtdetr *m, Device dev, const char *model, int nc, uint64_t seed, char *err,
                   size_t errlen) {
    memset(m, 0, sizeof *m);
    if (model_spec_load(&m->spec, model, nc, err, errlen)) return -1;
    arena_init(&m->params, dev, 0);
    arena_init(&m->host, DEV_CPU, 1 << 20);
    rng_init(&m->rng, seed);
    registry_init(&m->reg, &m->params, &m->host, &m->rng);
    m->layers = registry_alloc(&m->reg, sizeof(Layer) * (size_t)m->spec.n_layers);
    for (int i = 0; i < m->spec.n_layers; i++) {
        const LayerSpec *l = &m->spec.layers[i];
        registry_push(&m->reg, "model.%d", i);
        m->layers[i] = (Layer){l, build_layer(&m->reg, l)};
        registry_pop(&m->reg);
    }
    m->head = m->layers[m->spec.n_layers - 1].m;
    return 0;
}

void rtdetr_free(Rtdetr *m) {
    registry_free(&m->reg);
    arena_free(&m->params);
    arena_free(&m->host);
    model_spec_free(&m->spec);
    memset(m, 0, sizeof *m);
}

static Tensor *layer_forward(Layer *layer, Tape *t, Tensor *const *in) {
    const LayerSpec *l = layer->spec;
    switch (l->kind) {
    case MOD_CONV:
    case MOD_DWCONV:
        return conv_forward(layer->m, t, in[0]);
    case MOD_HGSTEM:
        return hgstem_forward(layer->m, t, in[0]);
    case MOD_HGBLOCK:
        return hgblock_forward(layer->m, t, in[0]);
    case MOD_RESNETLAYER:
        return resnetlayer_forward(layer->m, t, in[0]);
    case MOD_AIFI:
        return aifi_forward(layer->m, t, in[0]);
    case MOD_REPC3:
        return repc3_forward(layer->m, t, in[0]);
    case MOD_UPSAMPLE:
        return op_upsample_nearest2d(t, in[0], l->upsample_scale);
    case MOD_CONCAT:
        return op_concat(t, in, l->n_from, l->concat_dim);
    case MOD_RTDETRDECODER:
        break;
    }
    CHECK(false, "layer kind %d has no plain forward", (int)l->kind);
    return NULL;
}

void rtdetr_forward(Rtdetr *m, Tape *t, Tensor *images, const RtdetrDnHook *dn, RtdetrOutput *out) {
    rtdetr_forward_observed(m, t, images, dn, out, NULL, NULL);
}

void rtdetr_forward_observed(Rtdetr *m, Tape *t, Tensor *images, const RtdetrDnHook *dn,
                             RtdetrOutput *out, RtdetrLayerFn after_layer, void *user) {
    CHECK(images->ndim == 4 && images->shape[1] == 3,
          "rtdetr_forward: images must be (B,3,H,W), got %d-d with %lld channels", images->ndim,
          (long long)(images->ndim > 1 ? images->shape[1] : 0));
    CHECK(images->shape[2] % 32 == 0 && images->shape[3] % 32 == 0,
          "rtdetr_forward: image size %lldx%lld is not a multiple of the stride 32",
          (long long)images->shape[2], (long long)images->shape[3]);
    // Activation checkpointing (tape_drop, with the training loop's release_activations): once
    // a layer has run, what its nodes made is dropped but for the layer's output; a layer's
    // output is dropped once the last layer that reads it has run. Only what an op can
    // recompute goes (normalised and activated maps, sums, concatenations, pads, pools: what
    // backward recomputes cheaply from the conv outputs it keeps anyway); the graph, and so the
    // hook order, is untouched. The head's decoder layers drop theirs likewise (decoder.c).
    int n = m->spec.n_layers;
    Tensor **y = tape_alloc(t, sizeof(Tensor *) * (size_t)n);
    int *last_reader = tape_alloc(t, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        last_reader[i] = -1;
        const LayerSpec *l = &m->spec.layers[i];
        for (int j = 0; j < l->n_from; j++)
            if (l->from[j] >= 0) last_reader[l->from[j]] = i;
    }
    for (int i = 0; i < n; i++) {
        const LayerSpec *l = &m->spec.layers[i];
        Tensor *in[LAYER_MAX_FROM];
        for (int j = 0; j < l->n_from; j++)
            in[j] = l->from[j] < 0 ? images : y[l->from[j]];
        int64_t first_node = t->n_nodes;
        bool head = l->kind == MOD_RTDETRDECODER;
        if (head)
            head_forward(m->head, t, in, dn, out);
        else
            y[i] = layer_forward(&m->layers[i], t, in);
        if (after_layer) after_layer(user, i);
        if (!head) tape_drop_since(t, first_node, y[i]); // the loss reads what the head made
        for (int j = 0; j < i; j++)
            if (last_reader[j] == i) tape_drop(t, y[j]);
        if (head) return;
    }
    CHECK(false, "model without an RTDETRDecoder");
}

void rtdetr_print_params(const Rtdetr *m, FILE *f) {
    for (int i = 0; i < m->reg.n_params; i++) {
        char shape[128];
        fprintf(f, "%d %s %s\n", i, m->reg.names[i],
                tensor_shape_str(m->reg.params[i], shape, sizeof shape));
    }
    fprintf(f, "total %d tensors %lld parameters\n", m->reg.n_params,
            (long long)registry_numel(&m->reg));
}
