/* reducer_errors.h -- the reducer's PyTorch error texts (reducer_errors.c); reducer.c only. */
#ifndef TRAINER_DIST_REDUCER_ERRORS_H
#define TRAINER_DIST_REDUCER_ERRORS_H

#include "trainer/dist/reducer.h"

// ensure_prior_reduction_finished: when the prior backward marked parameters but did not
// finalize, raises the mode's "Expected to have finished reduction ..." with the unmarked
// parameters (names too under INFO/DETAIL); else 0.
int reducer_check_prior_reduction(Reducer *r);
// checkAndRaiseMarkedTwiceError for parameter i: always -1.
int reducer_raise_marked_twice(Reducer *r, int i);

#endif
