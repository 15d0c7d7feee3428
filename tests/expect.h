/* expect.h -- the whole test framework. EXPECT records a failure and continues (CHECK in the
 * code under test aborts: different names on purpose). A test binary returns expect_report():
 * 0 pass, 1 fail; SKIP returns 77 and must come before the first EXPECT. */
#ifndef TESTS_EXPECT_H
#define TESTS_EXPECT_H

#include <math.h>
#include <stdio.h>

static int expect_failures, expect_checks;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        expect_checks++;                                                                           \
        if (!(cond)) {                                                                             \
            expect_failures++;                                                                     \
            fprintf(stderr, "%s:%d: EXPECT(%s) failed: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

// |a - b| <= atol + rtol * |b|; NaN or Inf on either side fails.
#define EXPECT_NEAR(a, b, atol, rtol)                                                              \
    do {                                                                                           \
        double ea_ = (double)(a), eb_ = (double)(b);                                               \
        EXPECT(isfinite(ea_) && isfinite(eb_) && fabs(ea_ - eb_) <= (atol) + (rtol) * fabs(eb_),   \
               "%s = %.9g, %s = %.9g", #a, ea_, #b, eb_);                                          \
    } while (0)

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        printf("skip: " __VA_ARGS__);                                                              \
        printf("\n");                                                                              \
        return 77;                                                                                 \
    } while (0)

// A set-up the test cannot do without (a temporary directory): a failure, never a skip.
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static inline int expect_report(void) {
    printf("%d checks, %d failed\n", expect_checks, expect_failures);
    return expect_failures ? 1 : 0;
}

#endif
