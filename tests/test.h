/* tests/test.h - the smallest test harness that cannot lie.

   CHECK(cond, fmt, ...) counts a pass or prints the failure with its file and
   line; TEST_END() prints "name: N passed, M failed" and returns non-zero if
   anything failed. tests/run.sh sums those lines into the final total.

   Two opt-in pieces shared by the test files (define the macro, then include
   this file BEFORE kvq.h):
     TEST_ALLOC  a counting allocator routed into kvq.h through its documented
                 override (KVQ_MALLOC/REALLOC/FREE): a ledger of live blocks
                 and bytes (leaks, kvq_bytes' `allocated`), the peak of live
                 bytes, and ta_fail_at, the attempt index that returns NULL.
     TEST_RNG    splitmix64 with uniform, below-n and normal draws.
     TEST_BITS   f2u / u2f (a float's bits and back), and poison /
                 is_poison: fill a buffer with POISON bytes, then check a
                 refused call left it so.
   QUICK (from -DKVQ_TEST_QUICK, the sanitizer and valgrind builds) and
   COUNT(full, quick) shrink loop counts.                                    */
#ifndef KVQ_TEST_H
#define KVQ_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <math.h>

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
            if (getenv("KVQ_TEST_FAIL_FAST")) test__stop();                   \
        }                                                                     \
    } while (0)
/* KVQ_TEST_FAIL_FAST (set): exit 1 at the first failed CHECK, its message
   printed (tests/emu/mutants.sh: a planted bug needs one symptom only)   */
static inline void test__stop(void)
{
    printf("KVQ_TEST_FAIL_FAST: stopped at the first failure\n");
    fflush(stdout);
    exit(1);
}

#define TEST_END(name)                                                        \
    (printf("%s: %d passed, %d failed\n", name, test__pass, test__fail),      \
     test__fail != 0)

#ifdef KVQ_TEST_QUICK
#define QUICK 1
#else
#define QUICK 0
#endif
#define COUNT(full, quick) (QUICK ? (quick) : (full))

#ifdef TEST_ALLOC
/* A ledger of live blocks, searched linearly: kvq allocates rarely (buffers
   double), so this stays cheap even over a million appends.               */
#define TA_SLOTS 4096
static void  *ta_ptr[TA_SLOTS];
static size_t ta_size[TA_SLOTS];
static size_t ta_hi;            /* slots [0, ta_hi) may be in use           */
static long   ta_calls;         /* malloc + realloc attempts so far         */
static long   ta_fail_at = -1;  /* the attempt index that returns NULL      */
static long   ta_live;          /* live blocks                              */
static size_t ta_bytes;         /* live bytes                               */
static size_t ta_peak;          /* most live bytes ever                     */
static int    ta_broken;        /* ledger lost track (table full, bad free) */

static void ta_add(void *p, size_t n)
{
    size_t i;
    for (i = 0; i < TA_SLOTS; i++)
        if (!ta_ptr[i]) {
            ta_ptr[i] = p; ta_size[i] = n; ta_live++; ta_bytes += n;
            if (ta_bytes > ta_peak) ta_peak = ta_bytes;
            if (i + 1 > ta_hi) ta_hi = i + 1;
            return;
        }
    ta_broken = 1;
}
static void *ta_malloc(size_t n)
{
    void *p;
    if (ta_calls++ == ta_fail_at) return NULL;
    p = malloc(n ? n : 1);
    if (p) ta_add(p, n);
    return p;
}
static void *ta_realloc(void *p, size_t n)
{
    void *q;
    size_t i = TA_SLOTS;
    if (ta_calls++ == ta_fail_at) return NULL;      /* p stays valid        */
    if (p) {                 /* find p's entry before realloc invalidates p */
        for (i = 0; i < ta_hi && ta_ptr[i] != p; i++) {}
        if (i == ta_hi) { ta_broken = 1; i = TA_SLOTS; }
    }
    q = realloc(p, n ? n : 1);
    if (!q) return NULL;
    if (i < TA_SLOTS) {
        ta_bytes = ta_bytes - ta_size[i] + n;
        if (ta_bytes > ta_peak) ta_peak = ta_bytes;
        ta_ptr[i] = q;
        ta_size[i] = n;
    } else {
        ta_add(q, n);
    }
    return q;
}
static void ta_free(void *p)
{
    size_t i;
    if (!p) return;
    for (i = 0; i < ta_hi; i++)
        if (ta_ptr[i] == p) {
            ta_ptr[i] = NULL; ta_live--; ta_bytes -= ta_size[i];
            free(p);
            return;
        }
    ta_broken = 1;       /* freeing something this allocator never gave out */
    free(p);
}
#define KVQ_MALLOC(sz)     ta_malloc(sz)
#define KVQ_REALLOC(p, sz) ta_realloc(p, sz)
#define KVQ_FREE(p)        ta_free(p)
#endif /* TEST_ALLOC */

#ifdef TEST_RNG
typedef struct { uint64_t s; } rng;
static inline uint64_t rnext(rng *r)               /* splitmix64           */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double runif(rng *r) { return (double)(rnext(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline size_t rbelow(rng *r, size_t n) { return n ? (size_t)(rnext(r) % n) : 0; }
static inline float rnorm(rng *r)                  /* Box-Muller           */
{
    double u1 = 1.0 - runif(r), u2 = runif(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
#endif /* TEST_RNG */

#ifdef TEST_BITS
#include <string.h>
static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
#define POISON 0xA5
static inline void poison(void *p, size_t n) { memset(p, POISON, n); }
static inline int is_poison(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++)
        if (b[i] != POISON) return 0;
    return 1;
}
#endif /* TEST_BITS */

#endif
