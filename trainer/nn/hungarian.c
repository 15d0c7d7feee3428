/* hungarian.c -- see hungarian.h. Our implementation of the shortest augmenting path method
 * (D. F. Crouse, "On implementing 2D rectangular assignment algorithms", IEEE TAES 52(4),
 * 2016, Algorithm 1), written from the paper. A tall problem is transposed so that every row
 * gets a column. Rows are then added one at a time: a Dijkstra search over the reduced costs
 * finds the cheapest way to give the new row a column (moving assigned rows along an
 * alternating path), the duals are adjusted to keep the reduced costs >= 0, and the path is
 * flipped. The column scan order and tie rule reproduce scipy's linear_sum_assignment choices
 * among tied assignments (the behaviour, measured by tests/test_hungarian.c). */
#include "trainer/nn/hungarian.h"

#include <math.h>
#include <stdbool.h>

#include "kernels/base.h" // CHECK, xmalloc, xcalloc

// A wide problem (n_rows <= n_cols, so every row ends up assigned) and its search state.
// Invariant between searches, with reduced(i, j) = cost[i][j] - row_dual[i] - col_dual[j]:
// for every assigned row i, reduced(i, j) >= 0 for all j and == 0 at its own column. This
// proves the partial assignment optimal for the rows assigned so far (LP duality). Rows not
// yet assigned have dual 0 and may have negative reduced costs: they are only ever the
// search's start, where negative edges are harmless (every path has exactly one such edge).
typedef struct Assignment {
    int64_t n_rows, n_cols;
    const double *cost;          // (n_rows, n_cols) row-major
    double *row_dual, *col_dual; // start at 0
    int64_t *col_of_row;         // (n_rows) -1 = not yet assigned
    int64_t *row_of_col;         // (n_cols) -1 = free

    // One search's state (find_shortest_augmenting_path):
    double *dist;       // (n_cols) shortest known path length, start row -> column
    int64_t *via_row;   // (n_cols) the tree row through which dist[j] was reached
    int64_t *col_order; // (n_cols) the columns: [0, n_unsettled) not yet settled, in scan
                        // order; [n_unsettled, n_cols) settled, none of them free
    int64_t n_unsettled;
} Assignment;

// Dijkstra from start_row. A row joins the tree through the column it is assigned to, at that
// column's distance; each row in the tree offers start_row's path to every unsettled column
// at cost dist + reduced. Every edge after the first leaves an assigned row, so has
// reduced >= 0: the nearest unsettled column's distance is final (the Dijkstra argument).
// The search stops at the first free column settled (the sink), which it returns; *path_len
// receives the sink's distance. The settled columns before it, none free, are left in
// col_order[n_unsettled..] for the dual update; the sink stays in the unsettled part.
static int64_t find_shortest_augmenting_path(Assignment *a, int64_t start_row, double *path_len) {
    int64_t n_cols = a->n_cols;
    // Scan order (part of the tie rule): the columns start in descending index order; a
    // settled column's slot is taken by the last unsettled one.
    for (int64_t k = 0; k < n_cols; k++) {
        a->col_order[k] = n_cols - 1 - k;
        a->dist[k] = INFINITY;
    }
    a->n_unsettled = n_cols;

    int64_t row = start_row; // the row that joined the tree last
    double row_dist = 0;     // its distance from start_row
    for (;;) {
        // Relax the edges out of the new tree row.
        const double *cost_row = a->cost + row * n_cols;
        for (int64_t k = 0; k < a->n_unsettled; k++) {
            int64_t col = a->col_order[k];
            double through_row = row_dist + cost_row[col] - a->row_dual[row] - a->col_dual[col];
            if (through_row < a->dist[col]) {
                a->dist[col] = through_row;
                a->via_row[col] = row;
            }
        }

        // Settle the nearest unsettled column. Tie rule: scanning col_order from the front,
        // the first of the equally nearest columns wins, unless some of them are free; then
        // the last free one does (so a tie ends the search when it can).
        int64_t pick = -1;
        double nearest = INFINITY;
        for (int64_t k = 0; k < a->n_unsettled; k++) {
            int64_t col = a->col_order[k];
            double d = a->dist[col];
            if (d < nearest || (d == nearest && a->row_of_col[col] < 0)) {
                nearest = d;
                pick = k;
            }
        }
        // Finite costs and n_rows <= n_cols: some free column is always reachable.
        CHECK(pick >= 0 && isfinite(nearest), "no augmenting path from row %lld",
              (long long)start_row);

        int64_t col = a->col_order[pick];
        if (a->row_of_col[col] < 0) {
            *path_len = nearest;
            return col;
        }
        a->n_unsettled--;
        a->col_order[pick] = a->col_order[a->n_unsettled];
        a->col_order[a->n_unsettled] = col;
        row = a->row_of_col[col];
        row_dist = nearest;
    }
}

// After a search that reached its sink at path_len: each tree row's dual rises by
// path_len - (its distance) and each settled column's dual falls by path_len - dist. For a
// tree row i at distance d_i and a settled column j the reduced cost changes by d_i - dist[j]:
// it stays (for start_row: becomes) >= 0 because dist[j] <= d_i + reduced(i, j) by
// relaxation, and it becomes 0 on the path's tight edges and the tree rows' assigned pairs.
// For an unsettled column (the sink among them) it falls by path_len - d_i, and stays >= 0
// because path_len <= dist[j] <= d_i + reduced(i, j). Rows outside the tree keep their dual
// and their reduced costs only rise. So the invariant holds again once the path is flipped.
static void update_duals(Assignment *a, int64_t start_row, double path_len) {
    a->row_dual[start_row] += path_len; // distance 0
    for (int64_t k = a->n_unsettled; k < a->n_cols; k++) {
        int64_t col = a->col_order[k];
        a->row_dual[a->row_of_col[col]] += path_len - a->dist[col];
        a->col_dual[col] -= path_len - a->dist[col];
    }
}

// Flips the alternating path that ends at sink: each column on it takes the tree row it was
// reached from, and that row releases its previous column, the next one back on the path,
// until start_row (which had none) is reached. One more row is assigned; no row loses out.
static void augment(Assignment *a, int64_t start_row, int64_t sink) {
    int64_t col = sink;
    for (;;) {
        int64_t row = a->via_row[col];
        int64_t released = a->col_of_row[row];
        a->row_of_col[col] = row;
        a->col_of_row[row] = col;
        if (row == start_row) return;
        col = released;
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

    // A tall matrix is solved transposed: its columns become the wide problem's rows.
    bool tall = n_rows > n_cols;
    double *transposed = NULL;
    if (tall) {
        transposed = xmalloc((size_t)(n_rows * n_cols) * sizeof(double));
        for (int64_t i = 0; i < n_rows; i++)
            for (int64_t j = 0; j < n_cols; j++)
                transposed[j * n_rows + i] = cost[i * n_cols + j];
    }
    Assignment a = {.n_rows = tall ? n_cols : n_rows, .n_cols = tall ? n_rows : n_cols};
    a.cost = tall ? transposed : cost;
    a.row_dual = xcalloc((size_t)a.n_rows, sizeof(double));
    a.col_dual = xcalloc((size_t)a.n_cols, sizeof(double));
    a.col_of_row = xmalloc((size_t)a.n_rows * sizeof(int64_t));
    a.row_of_col = xmalloc((size_t)a.n_cols * sizeof(int64_t));
    a.dist = xmalloc((size_t)a.n_cols * sizeof(double));
    a.via_row = xmalloc((size_t)a.n_cols * sizeof(int64_t));
    a.col_order = xmalloc((size_t)a.n_cols * sizeof(int64_t));
    for (int64_t i = 0; i < a.n_rows; i++)
        a.col_of_row[i] = -1;
    for (int64_t j = 0; j < a.n_cols; j++)
        a.row_of_col[j] = -1;

    for (int64_t row = 0; row < a.n_rows; row++) {
        double path_len;
        int64_t sink = find_shortest_augmenting_path(&a, row, &path_len);
        update_duals(&a, row, path_len);
        augment(&a, row, sink);
    }

    for (int64_t w = 0; w < a.n_rows; w++) {
        if (tall)
            col_for_row[a.col_of_row[w]] = w;
        else
            col_for_row[w] = a.col_of_row[w];
    }
    double total = 0;
    for (int64_t i = 0; i < n_rows; i++)
        if (col_for_row[i] >= 0) total += cost[i * n_cols + col_for_row[i]];

    free(transposed);
    free(a.row_dual), free(a.col_dual), free(a.col_of_row), free(a.row_of_col);
    free(a.dist), free(a.via_row), free(a.col_order);
    return total;
}
