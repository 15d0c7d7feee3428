/* tui_fixture.h -- a Model built by hand (tui/model/model.h), for test_tui_render and bench_tui: the
 * field report at the moment of the hang. 575 parameters named as rtdetr-l's decoder names
 * them (the 43 that get no gradient in the field report at their real indices: 510, 521-526,
 * 539-574); layout generation 0 (one bucket) in iteration 0, generation 1 (six buckets, the 69
 * decoder parameters in bucket 0) from iteration 1. Rank 0's batch at iteration 1 has no box:
 * it never marks the 43, so its bucket 0 never launches (buckets 1-5 are ready behind it), its
 * backward ends unfinalized, and at iteration 2 its forward raises DDP's error. Every other rank
 * marks everything, launches all six buckets (collectives #12-#17) and waits in #12 for 31 s.
 * Every rank holds the watchdog's HANG record. Header-only (static functions): tui/ is not in
 * the library the tests link. */
#ifndef TESTS_TUI_FIXTURE_H
#define TESTS_TUI_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xmalloc, xstrdup
#include "probe/probe.h"  // ProbePhase, ProbeOp
#include "tui/model/model.h"

enum {
    FIX_PARAMS = 575,
    FIX_DECODER = 506, // first decoder parameter (bucket 0 of generation 1)
    FIX_UNUSED = 43,
    FIX_WAIT_S = 31,
};
static const int fix_bucket_sizes[6] = {69, 176, 81, 69, 84, 96}; // generation 1, bucket 0 first
static const int64_t FIX_T0 = 1800000000000000000;                // ns

static bool fix_is_unused(int p) {
    return p == 510 || (p >= 521 && p <= 526) || p >= 539;
}

static char *fix_name(int p) {
    char buf[128];
    static const char *decoder[] = {"input_proj.0.0.weight",
                                    "input_proj.0.1.weight",
                                    "input_proj.0.1.bias",
                                    "input_proj.1.0.weight",
                                    "denoising_class_embed.weight",
                                    "query_pos_head.layers.0.weight",
                                    "query_pos_head.layers.0.bias",
                                    "query_pos_head.layers.1.weight",
                                    "query_pos_head.layers.1.bias",
                                    "enc_output.0.weight",
                                    "enc_output.0.bias",
                                    "enc_output.1.weight",
                                    "enc_output.1.bias",
                                    "enc_score_head.weight",
                                    "enc_score_head.bias"};
    if (p < FIX_DECODER) { // backbone and neck: conv + batchnorm triples
        int module = p / 18, k = p % 18;
        snprintf(buf, sizeof buf, "model.%d.m.%d.%s", module, k / 3,
                 k % 3 == 0   ? "conv.weight"
                 : k % 3 == 1 ? "bn.weight"
                              : "bn.bias");
    } else if (p < 521)
        snprintf(buf, sizeof buf, "model.28.%s", decoder[p - FIX_DECODER]);
    else if (p < 527)
        snprintf(buf, sizeof buf, "model.28.enc_bbox_head.layers.%d.%s", (p - 521) / 2,
                 (p - 521) % 2 ? "bias" : "weight");
    else if (p < 539)
        snprintf(buf, sizeof buf, "model.28.dec_score_head.%d.%s", (p - 527) / 2,
                 (p - 527) % 2 ? "bias" : "weight");
    else {
        int k = p - 539;
        snprintf(buf, sizeof buf, "model.28.dec_bbox_head.%d.layers.%d.%s", k / 6, (k % 6) / 2,
                 k % 2 ? "bias" : "weight");
    }
    return xstrdup(buf);
}

static void fix_set(uint8_t *bits, int i) {
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static ModelLayout fix_layout(int generation) {
    ModelLayout l = {.generation = generation, .first_iter = generation ? 1 : -1};
    l.n_buckets = generation ? 6 : 1;
    l.start = xcalloc((size_t)l.n_buckets + 1, sizeof(int));
    l.vars = xmalloc(FIX_PARAMS * sizeof(int));
    l.numel = xcalloc((size_t)l.n_buckets, sizeof(int64_t));
    // generation 1: the decoder first (bucket 0), then the rest in reverse definition order
    for (int k = 0; k < FIX_PARAMS; k++) {
        int dec = FIX_PARAMS - FIX_DECODER;
        l.vars[k] = generation == 0 ? FIX_PARAMS - 1 - k
                    : k < dec       ? FIX_DECODER + k
                                    : FIX_DECODER - 1 - (k - dec);
    }
    for (int b = 0; b < l.n_buckets; b++) {
        l.start[b + 1] = l.start[b] + (generation ? fix_bucket_sizes[b] : FIX_PARAMS);
        for (int k = l.start[b]; k < l.start[b + 1]; k++)
            l.numel[b] += 1000 + l.vars[k];
    }
    return l;
}

static ModelIter fix_iter(int64_t iter, int layout, int n_buckets) {
    ModelIter it = {.iter = iter, .layout = layout};
    size_t bytes = (FIX_PARAMS + 7) / 8;
    it.grad_ready = xcalloc(bytes, 1), it.marked = xcalloc(bytes, 1),
    it.marked_unused = xcalloc(bytes, 1);
    it.bucket_ready = xcalloc((size_t)n_buckets, sizeof(int));
    it.bucket_launch_ns = xcalloc((size_t)n_buckets, sizeof(int64_t));
    it.bucket_done_ns = xcalloc((size_t)n_buckets, sizeof(int64_t));
    it.bucket_seq = xcalloc((size_t)n_buckets, sizeof(int64_t));
    return it;
}

static void fix_coll(ModelRank *rk, int64_t seq, int64_t iter, int op, int bucket, int64_t numel,
                     const char *what, int64_t t_launch, int64_t t_done) {
    rk->colls = realloc(rk->colls, (size_t)(rk->n_colls + 1) * sizeof(ModelCollective));
    ModelCollective *c = &rk->colls[rk->n_colls++];
    *c = (ModelCollective){.seq = seq,
                           .iter = iter,
                           .op = op,
                           .bucket = bucket,
                           .numel = numel,
                           .t_launch_ns = t_launch,
                           .t_done_ns = t_done,
                           .ok = t_done != 0};
    snprintf(c->what, sizeof c->what, "%s", what);
}

static const char *FIX_ERROR =
    "Expected to have finished reduction in the prior iteration before starting a new one. This "
    "error indicates "
    "that your module has parameters that were not used in producing loss.";

// Fills m with the fixture for world ranks (world >= 2).
static void fixture_field_report(Model *m, int world) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "traces/fixture-field-report");
    m->world = world;
    m->n_params = FIX_PARAMS;
    m->param_names = xmalloc(FIX_PARAMS * sizeof(char *));
    m->param_shapes = xmalloc(FIX_PARAMS * sizeof(char *));
    m->param_numel = xmalloc(FIX_PARAMS * sizeof(int64_t));
    for (int p = 0; p < FIX_PARAMS; p++) {
        m->param_names[p] = fix_name(p);
        m->param_shapes[p] = xstrdup(strstr(m->param_names[p], "bias") ? "256" : "256x256");
        m->param_numel[p] = strstr(m->param_names[p], "bias") ? 256 : 65536;
    }
    m->ranks = xcalloc((size_t)world, sizeof(ModelRank));
    const int64_t ms = 1000000, s = 1000 * ms;
    int64_t t_wait = FIX_T0 + 3 * s; // iteration 1's bucket 0 launch on the healthy ranks
    for (int r = 0; r < world; r++) {
        ModelRank *rk = &m->ranks[r];
        rk->rank = r, rk->present = true, rk->pid = 1000 + r;
        snprintf(rk->host, sizeof rk->host, "vm");
        snprintf(rk->args, sizeof rk->args,
                 "model=rtdetr-l.yaml imgsz=160 batch=1 epochs=1 fault=nogt:rank=0,iter=1");
        rk->n_layouts = 2;
        rk->layouts = xmalloc(2 * sizeof(ModelLayout));
        rk->layouts[0] = fix_layout(0), rk->layouts[1] = fix_layout(1);
        rk->n_iters = r == 0 ? 3 : 2;
        rk->iters = xcalloc((size_t)rk->n_iters, sizeof(ModelIter));
        // construction and iteration 0: identical on every rank
        const char *setup[6] = {"param_metadata", "module_states", "module_states",
                                "buffers",        "buffers",       NULL};
        for (int k = 0; k < 5; k++)
            fix_coll(rk, k + 1, 0, PROBE_OP_BROADCAST, -1, 100 + k, setup[k], FIX_T0 + k * 10 * ms,
                     FIX_T0 + k * 10 * ms + 5 * ms);
        ModelIter *i0 = &rk->iters[0];
        *i0 = fix_iter(0, 0, 1);
        i0->t_forward_ns = FIX_T0 + 100 * ms, i0->t_backward_ns = FIX_T0 + 600 * ms;
        i0->t_backward_end_ns = FIX_T0 + 1200 * ms, i0->t_optim_ns = FIX_T0 + 1300 * ms;
        i0->finalized = true, i0->n_images = 1, i0->n_boxes = 3;
        for (int p = 0; p < FIX_PARAMS; p++)
            fix_set(i0->grad_ready, p), fix_set(i0->marked, p);
        i0->n_grad_ready = i0->n_marked = FIX_PARAMS;
        i0->bucket_ready[0] = FIX_PARAMS;
        i0->bucket_launch_ns[0] = FIX_T0 + 1100 * ms, i0->bucket_done_ns[0] = FIX_T0 + 1190 * ms,
        i0->bucket_seq[0] = 7;
        fix_coll(rk, 6, 0, PROBE_OP_BROADCAST, -1, 244, "buffers", FIX_T0 + 90 * ms,
                 FIX_T0 + 95 * ms);
        fix_coll(rk, 7, 0, PROBE_OP_ALLREDUCE, 0, rk->layouts[0].numel[0], "bucket",
                 i0->bucket_launch_ns[0], i0->bucket_done_ns[0]);
        // iteration 1: the rebuild's broadcasts, then the backward that differs
        const char *it1[4] = {"bucket_indices", "bucket_sizes", "buffers", "buffers"};
        for (int k = 0; k < 4; k++)
            fix_coll(rk, 8 + k, 1, PROBE_OP_BROADCAST, -1, 576 + k, it1[k],
                     FIX_T0 + 2000 * ms + k * 10 * ms, FIX_T0 + 2000 * ms + k * 10 * ms + 5 * ms);
        ModelIter *i1 = &rk->iters[1];
        *i1 = fix_iter(1, 1, 6);
        i1->t_forward_ns = FIX_T0 + 2100 * ms, i1->t_backward_ns = FIX_T0 + 2500 * ms;
        i1->n_images = 1, i1->n_boxes = r == 0 ? 0 : 4;
        for (int p = 0; p < FIX_PARAMS; p++) {
            if (r == 0 && fix_is_unused(p)) continue;
            fix_set(i1->grad_ready, p), fix_set(i1->marked, p);
            i1->n_grad_ready++, i1->n_marked++;
        }
        const ModelLayout *l1 = &rk->layouts[1];
        for (int b = 0; b < 6; b++) {
            for (int k = l1->start[b]; k < l1->start[b + 1]; k++)
                i1->bucket_ready[b] += model_bit(i1->marked, l1->vars[k]);
            if (r == 0) continue;
            i1->bucket_launch_ns[b] = t_wait + b * 100 * ms, i1->bucket_seq[b] = 12 + b;
            fix_coll(rk, 12 + b, 1, PROBE_OP_ALLREDUCE, b, l1->numel[b], "bucket",
                     i1->bucket_launch_ns[b], 0);
        }
        i1->t_backward_end_ns = FIX_T0 + 3800 * ms;
        if (r == 0) { // optimizer step on unaveraged gradients, then the error at the next forward
            i1->t_optim_ns = FIX_T0 + 3900 * ms;
            ModelIter *i2 = &rk->iters[2];
            *i2 = fix_iter(2, 1, 6);
            i2->t_forward_ns = FIX_T0 + 4000 * ms;
            rk->state = RANK_ERRORED, rk->phase = PROBE_PHASE_FORWARD,
            rk->phase_t_ns = i2->t_forward_ns;
            rk->error = xstrdup(FIX_ERROR), rk->error_iter = 2;
            rk->last_event_ns = FIX_T0 + 4001 * ms;
        } else {
            rk->state = RANK_WAITING, rk->phase = PROBE_PHASE_COLLECTIVE, rk->wait_seq = 12;
            rk->phase_t_ns = t_wait;
            rk->last_event_ns = t_wait + 5 * 100 * ms;
        }
        rk->hang = xstrdup(
            "ddpdbg run: hang: rank 1 has waited 31.0 s in collective #12 (allreduce of bucket 0)");
        rk->n_events = 2 * FIX_PARAMS * 2 + 40;
    }
    m->t0_ns = FIX_T0;
    m->t1_ns = t_wait + FIX_WAIT_S * s;
    m->min_iter = 0, m->max_iter = 2;
}

static void fixture_free(Model *m) {
    for (int r = 0; r < m->world; r++) {
        ModelRank *rk = &m->ranks[r];
        for (int i = 0; i < rk->n_layouts; i++)
            free(rk->layouts[i].start), free(rk->layouts[i].vars), free(rk->layouts[i].numel);
        for (int i = 0; i < rk->n_iters; i++) {
            ModelIter *it = &rk->iters[i];
            free(it->grad_ready), free(it->marked), free(it->marked_unused), free(it->bucket_ready);
            free(it->bucket_launch_ns), free(it->bucket_done_ns), free(it->bucket_seq);
        }
        free(rk->layouts), free(rk->iters), free(rk->colls), free(rk->error), free(rk->hang);
    }
    for (int p = 0; p < m->n_params; p++)
        free(m->param_names[p]), free(m->param_shapes[p]);
    free(m->param_names), free(m->param_shapes), free(m->param_numel), free(m->ranks);
    memset(m, 0, sizeof *m);
}

#endif
