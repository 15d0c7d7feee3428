/* hungarian.c -- see hungarian.h. A line-by-line port of scipy's rectangular_lsap.cpp
 * (scipy >= 1.6: Crouse, "On implementing 2D rectangular assignment algorithms", IEEE TAES
 * 2016, Algorithm 1). The problem is first made wide (rows <= cols) by transposing. Each row
 * in turn is then added by a Dijkstra-like search for the shortest augmenting path in the
 * reduced costs cost[i][j] - u[i] - v[j] >= 0; the duals u, v are updated so that they stay
 * feasible, and the path is flipped. Keeping scipy's scan order and tie rules (columns scanned
 * in reverse, a free column preferred among equal distances) makes ties break as scipy's do. */
#include "trainer/nn/hungarian.h"

#include <math.h>
#include <stdbool.h>

#include "kernels/base.h" // CHECK, xmalloc

typedef struct Lsap {
    int64_t nr, nc;          // nr <= nc
    const double *cost;      // (nr, nc)
    double *u, *v;           // row and column duals
    double *shortest;        // (nc) distance of each column from the current row's tree
    int64_t *path;           // (nc) the row from which each column was reached
    int64_t *col4row;        // (nr) -1 = unassigned
    int64_t *row4col;        // (nc) -1 = free
    bool *in_rows, *in_cols; // SR, SC: the rows and columns scanned by the current search
    int64_t *remaining;      // (nc) the columns not yet scanned
} Lsap;

// Grows a shortest-path tree from row i until it reaches a free column (the sink), which it
// returns; *min_val receives the sink's distance.
static int64_t augmenting_path(Lsap *s, int64_t i, double *min_val) {
    int64_t nc = s->nc, n_remaining = nc;
    for (int64_t it = 0; it < nc; it++)
        s->remaining[it] = nc - it - 1;
    memset(s->in_rows, 0, (size_t)s->nr * sizeof(bool));
    memset(s->in_cols, 0, (size_t)nc * sizeof(bool));
    for (int64_t j = 0; j < nc; j++)
        s->shortest[j] = INFINITY;

    double dist = 0;
    int64_t sink = -1;
    while (sink == -1) {
        int64_t index = -1;
        double lowest = INFINITY;
        s->in_rows[i] = true;
        for (int64_t it = 0; it < n_remaining; it++) {
            int64_t j = s->remaining[it];
            double r = dist + s->cost[i * nc + j] - s->u[i] - s->v[j];
            if (r < s->shortest[j]) {
                s->path[j] = i;
                s->shortest[j] = r;
            }
            // Among equally near columns a free one ends the search (scipy: matters for
            // integer costs with small coefficients).
            if (s->shortest[j] < lowest || (s->shortest[j] == lowest && s->row4col[j] == -1)) {
                lowest = s->shortest[j];
                index = it;
            }
        }
        // Finite costs and nr <= nc: a column is always reachable.
        CHECK(index >= 0 && isfinite(lowest), "no augmenting path from row %lld", (long long)i);

        dist = lowest;
        int64_t j = s->remaining[index];
        if (s->row4col[j] == -1)
            sink = j;
        else
            i = s->row4col[j];
        s->in_cols[j] = true;
        s->remaining[index] = s->remaining[--n_remaining];
    }
    *min_val = dist;
    return sink;
}

// Solves the wide problem (nr <= nc); fills s->col4row.
static void solve_wide(Lsap *s) {
    for (int64_t cur = 0; cur < s->nr; cur++) {
        double min_val;
        int64_t sink = augmenting_path(s, cur, &min_val);

        s->u[cur] += min_val;
        for (int64_t i = 0; i < s->nr; i++)
            if (s->in_rows[i] && i != cur) s->u[i] += min_val - s->shortest[s->col4row[i]];
        for (int64_t j = 0; j < s->nc; j++)
            if (s->in_cols[j]) s->v[j] -= min_val - s->shortest[j];

        // Flip the path: every column on it takes the row it was reached from.
        int64_t j = sink;
        for (;;) {
            int64_t i = s->path[j];
            s->row4col[j] = i;
            int64_t prev = s->col4row[i];
            s->col4row[i] = j;
            j = prev;
            if (i == cur) break;
        }
    }
}

double hungarian_solve(int64_t n_rows, int64_t n_cols, const double *cost, int64_t *col_for_row) {
    CHECK(n_rows >= 0 && n_cols >= 0, "cost matrix %lld x %lld", (long long)n_rows,
          (long long)n_cols);
    for (int64_t i = 0; i < n_rows; i++)
        col_for_row[i] = -1;
    if (n_rows == 0 || n_cols == 0) return 0.0;
    for (int64_t k = 0; k < n_rows * n_cols; k++)
        CHECK(isfinite(cost[k]), "cost[%lld][%lld] = %g: costs must be finite",
              (long long)(k / n_cols), (long long)(k % n_cols), cost[k]);

    // A tall matrix is solved transposed: its columns become the rows that all get assigned.
    bool transposed = n_cols < n_rows;
    Lsap s = {.nr = transposed ? n_cols : n_rows, .nc = transposed ? n_rows : n_cols};
    double *cost_t = NULL;
    if (transposed) {
        cost_t = xmalloc((size_t)(n_rows * n_cols) * sizeof(double));
        for (int64_t i = 0; i < n_rows; i++)
            for (int64_t j = 0; j < n_cols; j++)
                cost_t[j * n_rows + i] = cost[i * n_cols + j];
    }
    s.cost = transposed ? cost_t : cost;
    s.u = xcalloc((size_t)s.nr, sizeof(double));
    s.v = xcalloc((size_t)s.nc, sizeof(double));
    s.shortest = xmalloc((size_t)s.nc * sizeof(double));
    s.path = xmalloc((size_t)s.nc * sizeof(int64_t));
    s.col4row = xmalloc((size_t)s.nr * sizeof(int64_t));
    s.row4col = xmalloc((size_t)s.nc * sizeof(int64_t));
    s.in_rows = xmalloc((size_t)s.nr * sizeof(bool));
    s.in_cols = xmalloc((size_t)s.nc * sizeof(bool));
    s.remaining = xmalloc((size_t)s.nc * sizeof(int64_t));
    for (int64_t j = 0; j < s.nc; j++)
        s.path[j] = -1, s.row4col[j] = -1;
    for (int64_t i = 0; i < s.nr; i++)
        s.col4row[i] = -1;

    solve_wide(&s);

    double total = 0;
    for (int64_t w = 0; w < s.nr; w++) {
        int64_t row = transposed ? s.col4row[w] : w, col = transposed ? w : s.col4row[w];
        col_for_row[row] = col;
        total += cost[row * n_cols + col];
    }

    free(cost_t);
    free(s.u), free(s.v), free(s.shortest), free(s.path), free(s.col4row), free(s.row4col);
    free(s.in_rows), free(s.in_cols), free(s.remaining);
    return total;
}
