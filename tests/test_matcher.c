/* test_matcher.c -- the HungarianMatcher port (trainer/nn/matcher.h): hand-made batches with
 * obvious matches, empty images and batches, more GT than queries, the cost formula and its
 * NaN rule; brute force on small random batches; and a float64 numpy/scipy reference of
 * Ultralytics' formula (tests/golden/hungarian.bin, tests/golden/make_scipy.py). */
#include <math.h>
#include <stdbool.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "tests/golden.h"
#include "trainer/nn/matcher.h"
#include "trainer/rng.h"

static void expect_pairs(const char *what, const Match *m, int64_t b, int n, const int64_t *query,
                         const int64_t *gt) {
    int64_t got = m->start[b + 1] - m->start[b];
    EXPECT(got == n, "%s: image %lld has %lld pairs, want %d", what, (long long)b, (long long)got,
           n);
    for (int k = 0; k < n && k < got; k++) {
        int64_t at = m->start[b] + k;
        EXPECT(m->query[at] == query[k] && m->gt[at] == gt[k],
               "%s: image %lld pair %d is (%lld, %lld), want (%lld, %lld)", what, (long long)b, k,
               (long long)m->query[at], (long long)m->gt[at], (long long)query[k],
               (long long)gt[k]);
    }
}

// Puts query q (an index over the batch's B*Q queries) on a GT box, confident of its class.
static void put_on(float *boxes, float *logits, int K, int q, const float *gt_box, int cls) {
    memcpy(boxes + 4 * q, gt_box, 4 * sizeof(float));
    logits[q * K + cls] = 4.0f;
}

// Two images; each GT has one query sitting on it with a confident logit for its class and
// every other query is far away and unsure. Image 0: 1 GT, image 1: 2 GTs (batch GT 1 and 2).
static void test_obvious(void) {
    enum { B = 2, Q = 4, K = 3 };
    MatcherConfig cfg = matcher_config_default();
    const float gt_boxes[3 * 4] = {0.3f, 0.3f, 0.2f, 0.2f,  // image 0, class 2
                                   0.7f, 0.2f, 0.1f, 0.3f,  // image 1, class 0
                                   0.4f, 0.6f, 0.3f, 0.2f}; // image 1, class 1
    const int32_t gt_cls[3] = {2, 0, 1};
    const int64_t groups[B] = {1, 2};
    float boxes[B * Q * 4], logits[B * Q * K];
    for (int k = 0; k < B * Q; k++) {
        const float far[4] = {0.9f, 0.9f, 0.05f, 0.05f};
        memcpy(boxes + 4 * k, far, sizeof far);
        for (int c = 0; c < K; c++)
            logits[k * K + c] = -2.0f;
    }
    // image 0: query 3 on GT 0; image 1: query 0 on batch GT 2, query 2 on batch GT 1.
    put_on(boxes, logits, K, 3, gt_boxes, gt_cls[0]);
    put_on(boxes, logits, K, Q + 0, gt_boxes + 8, gt_cls[2]);
    put_on(boxes, logits, K, Q + 2, gt_boxes + 4, gt_cls[1]);

    Match m;
    matcher_match(&cfg, B, Q, K, boxes, logits, 3, gt_cls, gt_boxes, groups, &m);
    EXPECT(m.n_pairs == 3 && m.start[0] == 0 && m.start[B] == 3, "%lld pairs",
           (long long)m.n_pairs);
    expect_pairs("obvious", &m, 0, 1, (int64_t[]){3}, (int64_t[]){0});
    expect_pairs("obvious", &m, 1, 2, (int64_t[]){0, 2}, (int64_t[]){2, 1}); // query order
    matcher_match_free(&m);

    // No GT in the batch: no pairs at all. An image without GT before one with GT: none for it,
    // and the other's GT indices start at 0.
    matcher_match(&cfg, B, Q, K, boxes, logits, 0, gt_cls, gt_boxes, (int64_t[]){0, 0}, &m);
    EXPECT(m.n_pairs == 0 && m.start[1] == 0 && m.start[2] == 0, "%lld pairs",
           (long long)m.n_pairs);
    matcher_match_free(&m);
    matcher_match(&cfg, B, Q, K, boxes, logits, 2, gt_cls + 1, gt_boxes + 4, (int64_t[]){0, 2}, &m);
    expect_pairs("image 0 empty", &m, 0, 0, NULL, NULL);
    expect_pairs("image 0 empty", &m, 1, 2, (int64_t[]){0, 2}, (int64_t[]){1, 0});
    matcher_match_free(&m);
    Match zero = {0};
    matcher_match_free(&zero);
}

// More GT than queries (rtdetr-tiny has 100 queries, a COCO image can have more boxes):
// every query gets a GT, as linear_sum_assignment does for a wide matrix.
static void test_more_gt_than_queries(void) {
    MatcherConfig cfg = matcher_config_default();
    const float gt_boxes[3 * 4] = {0.2f, 0.2f, 0.1f, 0.1f, 0.5f, 0.5f,
                                   0.1f, 0.1f, 0.8f, 0.8f, 0.1f, 0.1f};
    const int32_t gt_cls[3] = {0, 0, 0};
    float boxes[2 * 4], logits[2] = {1.0f, 1.0f};
    memcpy(boxes, gt_boxes + 8, 16); // query 0 on GT 2
    memcpy(boxes + 4, gt_boxes, 16); // query 1 on GT 0
    Match m;
    matcher_match(&cfg, 1, 2, 1, boxes, logits, 3, gt_cls, gt_boxes, (int64_t[]){3}, &m);
    expect_pairs("Q < n", &m, 0, 2, (int64_t[]){0, 1}, (int64_t[]){2, 0});
    matcher_match_free(&m);
}

static void test_cost_formula(void) {
    MatcherConfig cfg = matcher_config_default();
    // logit 0 -> p = 1/2: class = 0.25*(1/2)^2*(-log(1/2+1e-8)) - 0.75*(1/2)^2*(-log(1/2+1e-8))
    //                            = -0.125 * -log(0.5 + 1e-8).
    // The box is shifted by 0.1 in cx from the GT (both 0.2 wide, 0.4 high): L1 = 0.1;
    // inter = 0.1*0.4 = 0.04, union = 0.08+0.08-0.04 = 0.12, enclosing 0.3*0.4 = 0.12:
    // giou = 0.04/(0.12+eps) - ((0.12+eps) - (0.12+eps))/(0.12+eps) = 1/3 (eps aside).
    const float box[4] = {0.5f, 0.5f, 0.2f, 0.4f}, gt[4] = {0.6f, 0.5f, 0.2f, 0.4f};
    float logit[2] = {0.0f, 3.0f};
    int32_t cls = 0;
    double c;
    matcher_cost(&cfg, 1, 2, box, logit, 1, &cls, gt, &c);
    double want = 2 * (-0.125 * -log(0.5 + 1e-8)) + 5 * 0.1 + 2 * (1 - 1.0 / 3.0);
    EXPECT_NEAR(c, want, 1e-6, 0);

    // A NaN logit makes the cost NaN, which Ultralytics replaces by 0.
    logit[0] = NAN;
    matcher_cost(&cfg, 1, 2, box, logit, 1, &cls, gt, &c);
    EXPECT(c == 0.0, "NaN cost became %g", c);
    // The gains scale their terms: bbox gain 0 and giou gain 0 leave the class term alone.
    logit[0] = 0.0f;
    cfg.gain_bbox = 0, cfg.gain_giou = 0;
    matcher_cost(&cfg, 1, 2, box, logit, 1, &cls, gt, &c);
    EXPECT_NEAR(c, 2 * (-0.125 * -log(0.5 + 1e-8)), 1e-12, 0);
}

static double brute_min(int r, int c, const double *cost, int row, bool *used, int n_left) {
    if (n_left == 0) return 0.0;
    if (row == r) return INFINITY;
    double best = r - row > n_left ? brute_min(r, c, cost, row + 1, used, n_left) : INFINITY;
    for (int j = 0; j < c; j++) {
        if (used[j]) continue;
        used[j] = true;
        double v = cost[row * c + j] + brute_min(r, c, cost, row + 1, used, n_left - 1);
        used[j] = false;
        best = v < best ? v : best;
    }
    return best;
}

// Random batches of 3 images with 0..5 GTs and 6 queries: the matched pairs' total cost is the
// brute-force minimum of each image's cost block, and the pairs are well formed.
static void test_brute_force(void) {
    enum { B = 3, Q = 6, K = 4, MAX_N = 5 };
    MatcherConfig cfg = matcher_config_default();
    Rng rng;
    rng_init(&rng, 7);
    for (int trial = 0; trial < 40; trial++) {
        float boxes[B * Q * 4], logits[B * Q * K], gt_boxes[B * MAX_N * 4];
        int32_t gt_cls[B * MAX_N];
        int64_t groups[B], N = 0;
        for (int b = 0; b < B; b++)
            N += groups[b] = (int64_t)rng_below(&rng, MAX_N + 1);
        for (int k = 0; k < B * Q * 4; k++)
            boxes[k] = rng_range(&rng, 0.1f, 0.6f);
        for (int k = 0; k < B * Q * K; k++)
            logits[k] = 2 * rng_normal(&rng);
        for (int k = 0; k < N * 4; k++)
            gt_boxes[k] = rng_range(&rng, 0.1f, 0.6f);
        for (int k = 0; k < N; k++)
            gt_cls[k] = (int32_t)rng_below(&rng, K);

        Match m;
        matcher_match(&cfg, B, Q, K, boxes, logits, N, gt_cls, gt_boxes, groups, &m);
        int64_t start = 0;
        for (int b = 0; b < B; b++) {
            int64_t n = groups[b];
            EXPECT(m.start[b + 1] - m.start[b] == MIN(n, Q), "trial %d image %d", trial, b);
            if (n > 0) {
                double cost[Q * MAX_N], total = 0;
                matcher_cost(&cfg, Q, K, boxes + b * Q * 4, logits + b * Q * K, n, gt_cls + start,
                             gt_boxes + start * 4, cost);
                for (int64_t p = m.start[b]; p < m.start[b + 1]; p++) {
                    EXPECT(m.gt[p] >= start && m.gt[p] < start + n, "gt %lld", (long long)m.gt[p]);
                    EXPECT(p == m.start[b] || m.query[p] > m.query[p - 1], "query order");
                    total += cost[m.query[p] * n + (m.gt[p] - start)];
                }
                bool used[MAX_N] = {false};
                EXPECT_NEAR(total, brute_min(Q, (int)n, cost, 0, used, (int)MIN(n, Q)), 1e-9, 0);
            }
            start += n;
        }
        matcher_match_free(&m);
    }
}

static void test_scipy_reference(void) {
    Golden g;
    if (golden_load(&g, "tests/golden/hungarian.bin") != 0) {
        EXPECT(0, "cannot load tests/golden/hungarian.bin");
        return;
    }
    MatcherConfig cfg = matcher_config_default();
    int n_cases = 0;
    for (int i = 0; golden_find(&g, "matcher/%d/boxes", i); i++, n_cases++) {
        const GoldenArray *boxes = golden_get(&g, "matcher/%d/boxes", i);
        const GoldenArray *logits = golden_get(&g, "matcher/%d/logits", i);
        const GoldenArray *gcls = golden_get(&g, "matcher/%d/gt_cls", i);
        const GoldenArray *gbox = golden_get(&g, "matcher/%d/gt_boxes", i);
        const GoldenArray *ggroups = golden_get(&g, "matcher/%d/gt_groups", i);
        const GoldenArray *wq = golden_get(&g, "matcher/%d/query", i);
        const GoldenArray *wg = golden_get(&g, "matcher/%d/gt", i);
        int64_t B = boxes->shape[0], Q = boxes->shape[1], K = logits->shape[2], N = gcls->n;
        int32_t *cls = xmalloc((size_t)MAX(N, 1) * sizeof(int32_t));
        int64_t *groups = xmalloc((size_t)B * sizeof(int64_t));
        for (int64_t k = 0; k < N; k++)
            cls[k] = (int32_t)gcls->data[k];
        for (int64_t b = 0; b < B; b++)
            groups[b] = (int64_t)ggroups->data[b];

        // Each image's cost block (float64 in numpy, stored as float32).
        int64_t start = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t n = groups[b];
            if (n > 0) {
                double *cost = xmalloc((size_t)(Q * n) * sizeof(double));
                float *costf = xmalloc((size_t)(Q * n) * sizeof(float));
                matcher_cost(&cfg, Q, K, boxes->data + b * Q * 4, logits->data + b * Q * K, n,
                             cls + start, gbox->data + start * 4, cost);
                for (int64_t k = 0; k < Q * n; k++)
                    costf[k] = (float)cost[k];
                char what[64];
                snprintf(what, sizeof what, "matcher/%d/cost/%lld", i, (long long)b);
                EXPECT(golden_compare(what, costf, Q * n, golden_get(&g, "%s", what), 1e-6, 1e-6) ==
                           0,
                       "%s", what);
                free(cost);
                free(costf);
            }
            start += n;
        }

        Match m;
        matcher_match(&cfg, B, Q, K, boxes->data, logits->data, N, cls, gbox->data, groups, &m);
        EXPECT(m.n_pairs == wq->n, "matcher/%d: %lld pairs, scipy %lld", i, (long long)m.n_pairs,
               (long long)wq->n);
        for (int64_t p = 0; p < m.n_pairs && p < wq->n; p++)
            EXPECT(m.query[p] == (int64_t)wq->data[p] && m.gt[p] == (int64_t)wg->data[p],
                   "matcher/%d pair %lld: (%lld, %lld), scipy (%g, %g)", i, (long long)p,
                   (long long)m.query[p], (long long)m.gt[p], wq->data[p], wg->data[p]);
        matcher_match_free(&m);
        free(cls);
        free(groups);
    }
    EXPECT(n_cases >= 4, "%d matcher cases", n_cases);
    golden_free(&g);
}

int main(void) {
    test_obvious();
    test_more_gt_than_queries();
    test_cost_formula();
    test_brute_force();
    test_scipy_reference();
    return expect_report();
}
