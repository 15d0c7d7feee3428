/* test_hungarian.c -- hungarian_solve against brute force (every injective assignment of the
 * smaller side into the larger) on random square and rectangular matrices up to 7x7, with
 * continuous, integer (tied) and constant costs; and against scipy's linear_sum_assignment
 * (tests/golden/hungarian.bin, written by tests/golden/make_scipy.py). */
#include <math.h>
#include <stdbool.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "tests/golden.h"
#include "trainer/nn/hungarian.h"
#include "trainer/rng.h"

#define MAX_SIDE 7   // brute force sizes
#define MAX_COLS 128 // check_assignment's limit

// The minimum total over every assignment of min(r, c) pairs, by recursion over the rows
// (each row takes a free column or, while enough rows remain for the columns, none).
static double brute_min(int r, int c, const double *cost, int row, bool *used, int n_left) {
    if (n_left == 0) return 0.0;
    if (row == r) return INFINITY;
    double best = INFINITY;
    if (r - row > n_left) best = brute_min(r, c, cost, row + 1, used, n_left); // row unassigned
    for (int j = 0; j < c; j++) {
        if (used[j]) continue;
        used[j] = true;
        double rest = brute_min(r, c, cost, row + 1, used, n_left - 1);
        used[j] = false;
        if (cost[row * c + j] + rest < best) best = cost[row * c + j] + rest;
    }
    return best;
}

// Checks that col describes a valid assignment of min(r, c) pairs; returns its total.
static double check_assignment(const char *what, int r, int c, const double *cost,
                               const int64_t *col) {
    bool used[MAX_COLS] = {false};
    CHECK(c <= MAX_COLS, "%d columns", c);
    int pairs = 0;
    double total = 0;
    for (int i = 0; i < r; i++) {
        if (col[i] < 0) continue;
        EXPECT(col[i] < c && !used[col[i]], "%s: row %d takes column %lld (used or out of range)",
               what, i, (long long)col[i]);
        if (col[i] >= c || used[col[i]]) continue;
        used[col[i]] = true;
        pairs++;
        total += cost[i * c + col[i]];
    }
    EXPECT(pairs == MIN(r, c), "%s: %d pairs, want %d", what, pairs, MIN(r, c));
    return total;
}

typedef enum { COST_UNIFORM, COST_INTEGER, COST_CONSTANT } CostKind;

static void test_brute_force(void) {
    static const int shapes[][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 4},
                                    {4, 7}, {6, 3}, {3, 6}, {5, 2}, {2, 5}, {7, 7}, {1, 4}};
    Rng rng;
    rng_init(&rng, 2024);
    double cost[MAX_SIDE * MAX_SIDE];
    int64_t col[MAX_SIDE];
    int n_cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int r = shapes[s][0], c = shapes[s][1];
        int seeds = r * c >= 49 ? 10 : 60; // 7x7 brute force is 5040 assignments each
        for (int seed = 0; seed < seeds; seed++) {
            CostKind kind = (CostKind)(seed % 3 == 2 && seed < 6 ? COST_CONSTANT : seed % 2);
            for (int k = 0; k < r * c; k++)
                cost[k] = kind == COST_UNIFORM   ? rng_range(&rng, -10.0f, 10.0f)
                          : kind == COST_INTEGER ? (double)rng_below(&rng, 3)
                                                 : 1.5;
            double total = hungarian_solve(r, c, cost, col);
            char what[64];
            snprintf(what, sizeof what, "%dx%d seed %d kind %d", r, c, seed, (int)kind);
            double got = check_assignment(what, r, c, cost, col);
            bool used[MAX_SIDE] = {false};
            double want = brute_min(r, c, cost, 0, used, MIN(r, c));
            EXPECT_NEAR(total, got, 1e-12, 0);
            EXPECT_NEAR(got, want, 1e-9, 1e-12);
            n_cases++;
        }
    }
    EXPECT(n_cases > 500, "%d cases", n_cases);
}

// The cost of a constant matrix ties everywhere; scipy gives the identity (it scans the
// columns in reverse), so do we.
static void test_constant_is_identity(void) {
    double cost[5 * 8];
    for (int k = 0; k < 40; k++)
        cost[k] = 3.0;
    int64_t col[8];
    hungarian_solve(5, 8, cost, col);
    for (int i = 0; i < 5; i++)
        EXPECT(col[i] == i, "wide: row %d -> %lld", i, (long long)col[i]);
    hungarian_solve(8, 5, cost, col);
    for (int i = 0; i < 8; i++)
        EXPECT(col[i] == (i < 5 ? i : -1), "tall: row %d -> %lld", i, (long long)col[i]);
}

static void test_obvious(void) {
    // Rows prefer distinct columns; the greedy choice (row 0 -> column 0) is wrong.
    double cost[3 * 3] = {1, 2, 9, //
                          1, 9, 9, //
                          9, 9, 1};
    int64_t col[3];
    double total = hungarian_solve(3, 3, cost, col);
    EXPECT(col[0] == 1 && col[1] == 0 && col[2] == 2, "got %lld %lld %lld", (long long)col[0],
           (long long)col[1], (long long)col[2]);
    EXPECT_NEAR(total, 4.0, 0, 0);

    // Empty sides: nothing assigned, total 0.
    int64_t none[4] = {7, 7, 7, 7};
    EXPECT(hungarian_solve(4, 0, cost, none) == 0.0, "empty total");
    for (int i = 0; i < 4; i++)
        EXPECT(none[i] == -1, "row %d of a 4x0 problem", i);
    EXPECT(hungarian_solve(0, 3, cost, none) == 0.0, "0x3 total");
}

static void test_scipy(void) {
    Golden g;
    if (golden_load(&g, "tests/golden/hungarian.bin") != 0) {
        EXPECT(0, "cannot load tests/golden/hungarian.bin");
        return;
    }
    int n_float = 0, n_int = 0;
    for (int tied = 0; tied < 2; tied++) {
        for (int i = 0;; i++) {
            const char *family = tied ? "lsap_int" : "lsap";
            const GoldenArray *gc = golden_find(&g, "%s/%d/cost", family, i);
            if (!gc) break;
            const GoldenArray *gcol = golden_get(&g, "%s/%d/col", family, i);
            const GoldenArray *gtot = golden_get(&g, "%s/%d/total", family, i);
            int64_t r = gc->shape[0], c = gc->shape[1];
            double *cost = xmalloc((size_t)(r * c) * sizeof(double));
            int64_t *col = xmalloc((size_t)r * sizeof(int64_t));
            for (int64_t k = 0; k < r * c; k++)
                cost[k] = gc->data[k];
            double total = hungarian_solve(r, c, cost, col);
            // The same algorithm with the same scan order and tie rules: even tied integer
            // matrices come out as scipy's assignment, not merely one of equal cost.
            int64_t wrong = 0;
            for (int64_t k = 0; k < r; k++)
                wrong += col[k] != (int64_t)gcol->data[k];
            EXPECT(wrong == 0, "%s/%d (%lldx%lld): %lld rows differ from scipy", family, i,
                   (long long)r, (long long)c, (long long)wrong);
            EXPECT_NEAR(total, gtot->data[0], 1e-5, 1e-6);
            free(cost);
            free(col);
            *(tied ? &n_int : &n_float) += 1;
        }
    }
    EXPECT(n_float >= 10 && n_int >= 10, "%d float and %d integer cases", n_float, n_int);
    golden_free(&g);
}

// A matcher-sized problem (300 queries, 60 GTs): the assignment must be a permutation of the
// GTs and no single swap of two rows' columns (or of a row's column for a free row) may lower
// the total -- a necessary condition of optimality that brute force cannot reach at this size.
static void test_large_no_improving_swap(void) {
    enum { R = 300, C = 60 };
    static double cost[R * C];
    Rng rng;
    rng_init(&rng, 99);
    for (int k = 0; k < R * C; k++)
        cost[k] = rng_uniform(&rng);
    int64_t col[R];
    hungarian_solve(R, C, cost, col);
    check_assignment("300x60", R, C, cost, col);
    int improving = 0;
    for (int i = 0; i < R; i++) {
        for (int k = i + 1; k < R; k++) {
            if (col[i] < 0 && col[k] < 0) continue;
            double now =
                (col[i] >= 0 ? cost[i * C + col[i]] : 0) + (col[k] >= 0 ? cost[k * C + col[k]] : 0);
            double swapped =
                (col[k] >= 0 ? cost[i * C + col[k]] : 0) + (col[i] >= 0 ? cost[k * C + col[i]] : 0);
            if (swapped < now - 1e-12) improving++;
        }
    }
    EXPECT(improving == 0, "%d improving swaps", improving);
}

int main(void) {
    test_obvious();
    test_constant_is_identity();
    test_brute_force();
    test_scipy();
    test_large_no_improving_swap();
    return expect_report();
}
