/* hungarian.h -- the rectangular linear sum assignment problem, solved exactly: our own
 * implementation of the shortest-augmenting-path algorithm (Jonker-Volgenant, as in Crouse
 * 2016), the method scipy.optimize.linear_sum_assignment uses, breaking ties as scipy does. Double precision.
 * Not a cost builder: the matcher (matcher.h) makes the cost matrices. */
#ifndef TRAINER_NN_HUNGARIAN_H
#define TRAINER_NN_HUNGARIAN_H

#include <stdint.h>

// Minimises the total cost of an assignment of rows to columns of cost (n_rows, n_cols),
// row-major, every entry finite (a NaN or Inf is a bug: CHECK). min(n_rows, n_cols) pairs are
// made: with n_rows >= n_cols every column gets exactly one row, otherwise every row gets a
// column. col_for_row (n_rows) receives each row's column, or -1 for an unassigned row.
// Returns the total cost of the assignment (0 when either size is 0).
// O(min^2 * max) time; the workspace is allocated per call.
double hungarian_solve(int64_t n_rows, int64_t n_cols, const double *cost, int64_t *col_for_row);

#endif
