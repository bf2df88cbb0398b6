/* tests/test.h - the smallest test harness that cannot lie.

   CHECK(cond, fmt, ...) counts a pass or prints the failure with its file and
   line; TEST_END() prints "name: N passed, M failed" and returns non-zero if
   anything failed. tests/run.sh sums those lines into the final total.      */
#ifndef KVQ_TEST_H
#define KVQ_TEST_H
#include <stdio.h>

static int test__pass, test__fail, test__shown;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) test__pass++;                                               \
        else {                                                                \
            test__fail++;                                                     \
            if (test__shown++ < 50) {                                         \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                   \
                printf(__VA_ARGS__);                                          \
                printf("\n");                                                 \
            }                                                                 \
        }                                                                     \
    } while (0)

#define TEST_END(name)                                                        \
    (printf("%s: %d passed, %d failed\n", name, test__pass, test__fail),      \
     test__fail != 0)

#endif
