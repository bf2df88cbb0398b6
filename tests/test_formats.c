/* tests/test_formats.c - kvq.h Sec. 4.1 (the formats engines ship) and the
   B = 3 bit stream of Sec. 5, against expectations computed here without
   the functions under test:

     1. fp32 -> E4M3 / E5M2 / E2M1: a brute-force nearest-value search over
        each format's finite values, the grid decoded in this file from the
        bit layout in double; ties to the code whose mantissa LSB is even,
        the sign kept for zero, NaN -> a NaN code (E2M1: a zero), +-Inf ->
        +-max. A sample here; every fp32 bit pattern in the build with
        -DTEST_FORMATS_EXHAUSTIVE (make test-all), against a merge walk over
        the sorted midpoints of the grid. The decoders on all 256 / 16 codes.
     2. NVFP4 and NVFP4-4over6 groups: the scale recomputed from kvq.h's
        written rule, one fp32 operation at a time in double, then every
        code the nearest E2M1 value by brute force over the 8 magnitudes,
        and 4over6's choice by squared errors in long double.
     3. Lloyd-Max: the centroids by Lloyd's iteration with erf-based cell
        means in double, and their MSE against Max (1960) and the TurboQuant
        paper (arXiv 2504.19874); each group code the nearest centroid by
        brute force; the plain and the norm-corrected scales.
     4. q8_0 and q4_0 against ggml's quantize_row_q8_0_ref /
        quantize_row_q4_0_ref, re-implemented here from their definition.
     5. B = 3 packing against a bit-by-bit stream writer.
     6. Every kvq_config_engine preset as a cache at D = 64 and 128: the
        config against the presets kvq.h lists; every row read back bit
        for bit as the written rules give it (Sec. 6.1's rotation in its
        rounding order, fp16 rows, the format, the rotation back), and
        within the format's error bound for the rotated presets; bytes
        per element, EAGER and ONLINE
        attention against kvq_attend_dense over the cache's own rows,
        kvq_cache_check after appends, prefill, eviction and compaction,
        GQA; bad input refused with nothing written. Then the formats on
        KIVI caches (per-channel keys: groups of G tokens of a channel),
        OTT and LogQuant.

   Costs (-O2, measured on the 2 shared cores): the sample of 1 0.09 s,
   NVFP4 0.17 s, FP8 groups, Lloyd-Max, ggml and packing under 0.1 s
   together, the presets as caches 0.15 s, the policies 0.2 s: about 0.8
   CPU-seconds in all (the ASan build, QUICK counts, 0.5 s; its compile
   5 CPU-seconds). The exhaustive sweep
   (-DTEST_FORMATS_EXHAUSTIVE, make test-all): 2^32 patterns x 3 formats
   on 2 threads, 55 CPU-seconds, 140-180 s wall on the loaded machine.
   Fixed seeds throughout; -DKVQ_TEST_QUICK shrinks the random counts.    */
#define TEST_RNG
#define TEST_BITS
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif


static double secs(clock_t t0) { return (double)(clock() - t0) / CLOCKS_PER_SEC; }

/* ======================================================================== */
/* 1. the small floats, decoded from their bit layouts                      */
/* ======================================================================== */
/* A grid: E exponent bits, M mantissa bits, bias 2^(E-1) - 1, and which
   top codes are special: E4M3 ("fn", OCP): S.1111.111 NaN, no infinity;
   E5M2 (IEEE-like): exponent 31 is Inf (m = 0) or NaN; E2M1: none.       */
typedef struct grid {
    const char *name;
    int E, M, kind;                 /* kind 0 E4M3, 1 E5M2, 2 E2M1           */
    double v[128];                  /* finite magnitudes, ascending by code  */
    int n;                          /* how many: max magnitude code is n - 1 */
    double mid[128];                /* (v[k] + v[k+1]) / 2, exact in double */
} grid;
static grid G_E4M3 = { "E4M3", 4, 3, 0, {0}, 0, {0} };
static grid G_E5M2 = { "E5M2", 5, 2, 1, {0}, 0, {0} };
static grid G_E2M1 = { "E2M1", 2, 1, 2, {0}, 0, {0} };

/* The value of code c, from the layout: sign | exponent | mantissa;
   e = 0: (m / 2^M) 2^(1 - bias), else (1 + m / 2^M) 2^(e - bias).         */
static double ref_decode(const grid *g, unsigned c)
{
    unsigned nb = (unsigned)(g->E + g->M), mag = c & ((1u << nb) - 1u);
    unsigned e = mag >> g->M, m = mag & ((1u << g->M) - 1u);
    int bias = (1 << (g->E - 1)) - 1;
    double frac = (double)m / (double)(1u << g->M), v;
    if (g->kind == 0 && e == 15 && m == 7) v = NAN;
    else if (g->kind == 1 && e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = frac * pow(2.0, 1 - bias);
    else v = (1.0 + frac) * pow(2.0, (int)e - bias);
    return (c >> nb) & 1u ? -v : v;
}

static void grid_build(grid *g)
{
    unsigned c;
    g->n = 0;
    for (c = 0; c < (1u << (g->E + g->M)); c++) {
        double v = ref_decode(g, c);
        if (!isfinite(v)) break;            /* the special codes come last   */
        g->v[g->n++] = v;
    }
    for (c = 0; c + 1 < (unsigned)g->n; c++) g->mid[c] = (g->v[c] + g->v[c + 1]) / 2;
}

/* The brute-force encoder: the input saturated to +-max (Inf included),
   then the nearest finite magnitude in double, a tie going to the even
   code (mantissa LSB 0); the input's sign on every result, zero included.
   NaN is handled by the caller.                                           */
static unsigned ref_encode(const grid *g, float x)
{
    double a = fabs((double)x), best_d;
    unsigned sign = f2u(x) >> 31, best = 0;
    int k;
    if (a > g->v[g->n - 1]) a = g->v[g->n - 1];
    best_d = a - g->v[0];
    for (k = 1; k < g->n; k++) {
        double d = fabs(a - g->v[k]);
        if (d < best_d || (d == best_d && (k & 1) == 0)) { best_d = d; best = (unsigned)k; }
    }
    return (sign << (g->E + g->M)) | best;
}

static uint8_t kvq_enc(const grid *g, float x)
{
    return g->kind == 0 ? kvq_f32_to_e4m3(x) : g->kind == 1 ? kvq_f32_to_e5m2(x) : kvq_f32_to_e2m1(x);
}
static float kvq_dec(const grid *g, uint8_t c)
{
    return g->kind == 0 ? kvq_e4m3_to_f32(c) : g->kind == 1 ? kvq_e5m2_to_f32(c) : kvq_e2m1_to_f32(c);
}

/* The expected code of x: NaN -> a NaN code (E2M1: a zero), else ref.    */
static int code_ok(const grid *g, float x, uint8_t got)
{
    if (isnan(x)) {
        if (g->kind == 2) return got == 0 || got == 8;
        return isnan(ref_decode(g, got));
    }
    return got == ref_encode(g, x);
}

/* Decoders: every code against ref_decode (the same bits, +-0 and NaN
   included), and the named facts of each grid. Microseconds.              */
static void test_decode_all_codes(void)
{
    grid *gs[3] = { &G_E4M3, &G_E5M2, &G_E2M1 };
    int gi;
    unsigned c;
    for (gi = 0; gi < 3; gi++) {
        const grid *g = gs[gi];
        unsigned n = 1u << (g->E + g->M + 1);
        int bad = 0;
        for (c = 0; c < n; c++) {
            double r = ref_decode(g, c);
            float k = kvq_dec(g, (uint8_t)c);
            if (isnan(r) ? !isnan(k) : (f2u(k) != f2u((float)r))) {
                if (bad++ < 4) printf("  %s code 0x%02X: kvq %a, layout %a\n", g->name, c, (double)k, r);
            }
        }
        CHECK(bad == 0, "%s: %d of %u codes decode differently from the bit layout", g->name, bad, n);
    }
    CHECK(kvq_e4m3_to_f32(0x7E) == 448.0f && kvq_e4m3_to_f32(0xFE) == -448.0f, "E4M3 max 448");
    CHECK(kvq_e4m3_to_f32(0x01) == ldexpf(1.0f, -9), "E4M3 smallest subnormal 2^-9");
    CHECK(kvq_e4m3_to_f32(0x08) == ldexpf(1.0f, -6) && kvq_e4m3_to_f32(0x07) == 7 * ldexpf(1.0f, -9),
          "E4M3 smallest normal 2^-6, largest subnormal 7 2^-9");
    CHECK(isnan(kvq_e4m3_to_f32(0x7F)) && isnan(kvq_e4m3_to_f32(0xFF)), "E4M3 NaN codes");
    CHECK(f2u(kvq_e4m3_to_f32(0x80)) == 0x80000000u, "E4M3 -0");
    CHECK(kvq_e5m2_to_f32(0x7B) == 57344.0f && kvq_e5m2_to_f32(0x01) == ldexpf(1.0f, -16),
          "E5M2 max 57344, smallest subnormal 2^-16");
    CHECK(kvq_e5m2_to_f32(0x04) == ldexpf(1.0f, -14), "E5M2 smallest normal 2^-14");
    CHECK(kvq_e5m2_to_f32(0x7C) == INFINITY && kvq_e5m2_to_f32(0xFC) == -INFINITY,
          "E5M2 +-Inf codes");
    CHECK(isnan(kvq_e5m2_to_f32(0x7D)) && isnan(kvq_e5m2_to_f32(0x7E)) && isnan(kvq_e5m2_to_f32(0x7F)) &&
          isnan(kvq_e5m2_to_f32(0xFF)), "E5M2 NaN codes");
    {
        static const float e2m1[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
        int ok = 1;
        for (c = 0; c < 8; c++) ok &= kvq_e2m1_to_f32((uint8_t)c) == e2m1[c] &&
                                      kvq_e2m1_to_f32((uint8_t)(c | 8)) == -e2m1[c];
        CHECK(ok, "E2M1 grid +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}");
    }
    CHECK(G_E4M3.n == 127 && G_E5M2.n == 124 && G_E2M1.n == 8, "finite magnitudes: %d %d %d",
          G_E4M3.n, G_E5M2.n, G_E2M1.n);
    /* kvq_format_value: the same grids under the format enum              */
    {
        int bad = 0;
        for (c = 0; c < 256; c++) {
            float a = kvq_format_value(KVQ_FORMAT_E4M3, 8, c), b = kvq_format_value(KVQ_FORMAT_E5M2_TENSOR, 8, c);
            double ra = ref_decode(&G_E4M3, c), rb = ref_decode(&G_E5M2, c);
            bad += isnan(ra) ? !isnan(a) : a != (float)ra;
            bad += isnan(rb) ? !isnan(b) : b != (float)rb;
            bad += kvq_format_value(KVQ_FORMAT_Q8_0, 8, c) != (float)(c < 128 ? (int)c : (int)c - 256);
        }
        for (c = 0; c < 16; c++) {
            bad += kvq_format_value(KVQ_FORMAT_NVFP4, 4, c) != (float)ref_decode(&G_E2M1, c);
            bad += kvq_format_value(KVQ_FORMAT_Q4_0, 4, c) != (float)((int)c - 8);
        }
        CHECK(bad == 0, "kvq_format_value differs from the layouts in %d places", bad);
        CHECK(isnan(kvq_format_value(KVQ_FORMAT_NVFP4, 4, 16)) && isnan(kvq_format_value(KVQ_FORMAT_Q8_0, 4, 1)) &&
              isnan(kvq_format_value((kvq_format)77, 8, 0)), "kvq_format_value: NaN off the grid");
    }
}

/* The sample (make test): for each grid, every finite value, every midpoint
   and both fp32 neighbours of each, the signed zeros, +-Inf, NaNs, fp32
   subnormals; then random bit patterns over all 2^32 and random floats
   log-uniform over the grid's range. 3 x (about 2,000 + 2 x 150,000) calls,
   about 0.3 s with the 127-value linear search.                          */
static int sample_one(const grid *g, float x, int *shown)
{
    uint8_t got = kvq_enc(g, x);
    if (code_ok(g, x, got)) return 0;
    if ((*shown)++ < 5)
        printf("  %s: x = %a (0x%08X): kvq 0x%02X, nearest 0x%02X\n", g->name, (double)x, f2u(x), got,
               isnan(x) ? 0x7Fu : ref_encode(g, x));
    return 1;
}

static void test_encode_sample(void)
{
    grid *gs[3] = { &G_E4M3, &G_E5M2, &G_E2M1 };
    const long n_rand = COUNT(150000, 20000);
    clock_t t0 = clock();
    int gi;
    rng r = { 0x5EED0001 };
    for (gi = 0; gi < 3; gi++) {
        const grid *g = gs[gi];
        int bad = 0, shown = 0, k, s;
        long i, calls = 0;
        static const uint32_t special[] = { 0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                            0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu,
                                            0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu };
        for (k = 0; k < (int)(sizeof special / sizeof special[0]); k++, calls++)
            bad += sample_one(g, u2f(special[k]), &shown);
        for (s = 0; s < 2; s++)
            for (k = 0; k < g->n; k++) {
                float pts[2] = { (float)g->v[k], k + 1 < g->n ? (float)g->mid[k] : (float)(g->v[k] * 1.5) };
                int p;
                for (p = 0; p < 2; p++) {
                    float x = s ? -pts[p] : pts[p];
                    bad += sample_one(g, x, &shown);
                    bad += sample_one(g, nextafterf(x, INFINITY), &shown);
                    bad += sample_one(g, nextafterf(x, -INFINITY), &shown);
                    calls += 3;
                }
            }
        for (i = 0; i < n_rand; i++, calls += 2) {
            uint32_t u = (uint32_t)(rnext(&r) >> 32);
            double lo = log2(g->v[1]) - 3, hi = log2(g->v[g->n - 1]) + 2;
            float x = (float)exp2(lo + (hi - lo) * runif(&r));
            bad += sample_one(g, u2f(u), &shown);
            bad += sample_one(g, (rnext(&r) & 1) ? -x : x, &shown);
        }
        CHECK(bad == 0, "%s: %d of %ld sampled inputs coded differently from the nearest value",
              g->name, bad, calls);
    }
    printf("test_formats: fp32 -> E4M3/E5M2/E2M1 sample against brute force: %.2f s\n", secs(t0));
}

#ifdef TEST_FORMATS_EXHAUSTIVE
/* ------------------------------------------------------------------------ */
/* every fp32 bit pattern (make test-all)                                   */
/* ------------------------------------------------------------------------ */
/* Magnitudes ascend with the bit pattern (0 .. 0x7F7FFFFF), so the code
   expected for each is found by walking the sorted midpoints once, in
   step: k = the number of midpoints strictly below |x|; at |x| equal to
   midpoint k the tie goes to the even one of codes k and k + 1; past the
   last midpoint, saturation gives the largest finite code. The two signs
   run on two threads. Then Inf and every NaN pattern.                    */
#include <pthread.h>
typedef struct { uint32_t sign; long bad[3]; } sweep_job;

static void *sweep(void *arg)
{
    sweep_job *J = (sweep_job *)arg;
    const grid *gs[3] = { &G_E4M3, &G_E5M2, &G_E2M1 };
    int k[3] = { 0, 0, 0 }, gi;
    uint32_t a;
    for (a = 0; a < 0x7F800000u; a++) {
        const float x = u2f(a | J->sign);
        const double v = (double)u2f(a);
        for (gi = 0; gi < 3; gi++) {
            const grid *g = gs[gi];
            unsigned want;
            while (k[gi] < g->n - 1 && v > g->mid[k[gi]]) k[gi]++;
            want = (unsigned)k[gi];
            if (k[gi] < g->n - 1 && v == g->mid[k[gi]] && (want & 1u)) want++;
            want |= (J->sign >> 31) << (g->E + g->M);
            if (kvq_enc(g, x) != want) {
                if (J->bad[gi]++ < 3)
                    printf("  %s: x = %a (0x%08X): kvq 0x%02X, nearest 0x%02X\n", g->name, (double)x,
                           a | J->sign, kvq_enc(g, x), want);
            }
        }
    }
    for (a = 0x7F800000u; ; a++) {            /* Inf, then the NaNs        */
        const float x = u2f(a | J->sign);
        for (gi = 0; gi < 3; gi++)
            if (!code_ok(gs[gi], x, kvq_enc(gs[gi], x))) J->bad[gi]++;
        if (a == 0x7FFFFFFFu) break;
    }
    return NULL;
}

static void test_encode_exhaustive(void)
{
    sweep_job J[2] = { { 0u, { 0, 0, 0 } }, { 0x80000000u, { 0, 0, 0 } } };
    pthread_t th;
    time_t t0 = time(NULL);
    int made = pthread_create(&th, NULL, sweep, &J[1]) == 0, gi;
    sweep(&J[0]);
    if (made) pthread_join(th, NULL); else sweep(&J[1]);
    for (gi = 0; gi < 3; gi++)
        CHECK(J[0].bad[gi] + J[1].bad[gi] == 0, "%s: %ld of 2^32 fp32 patterns coded differently "
              "from the nearest value", gi == 0 ? "E4M3" : gi == 1 ? "E5M2" : "E2M1",
              J[0].bad[gi] + J[1].bad[gi]);
    printf("test_formats: every fp32 bit pattern (2^32 x E4M3, E5M2, E2M1, 2 threads): %ld s wall\n",
           (long)(time(NULL) - t0));
}
#endif

/* ======================================================================== */
/* 2. NVFP4 and 4over6                                                      */
/* ======================================================================== */
/* fp32 operations computed in double and rounded once: for +, -, *, / of
   two floats this is the correctly rounded fp32 result (double has more
   than 2 x 24 + 2 bits), so each step below is the written rule's fp32
   step, computed without an fp32 operation.                              */
static float f32_div(float a, float b) { return (float)((double)a / (double)b); }
static float f32_mul(float a, float b) { return (float)((double)a * (double)b); }

/* One NVFP4 block with map-to M (6, or 4 for 4over6's other candidate):
     sf = e4m3((amax / M) / s),  a = value(sf) s,  c_i = e2m1(x_i / a) (0 if a = 0) */
static void ref_nvfp4(const float *x, size_t n, float s, float M, uint8_t *codes, uint8_t *sf, float *a)
{
    float amax = 0.0f;
    size_t i;
    for (i = 0; i < n; i++) if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    *sf = (uint8_t)ref_encode(&G_E4M3, f32_div(f32_div(amax, M), s));
    *a = f32_mul((float)ref_decode(&G_E4M3, *sf), s);
    for (i = 0; i < n; i++)
        codes[i] = *a == 0.0f ? 0 : (uint8_t)ref_encode(&G_E2M1, f32_div(x[i], *a));
}

/* sum (x_i - x'_i)^2, x'_i = fp32(value(c_i) a) as a reader decodes it.  */
static long double ref_sse(const float *x, size_t n, const uint8_t *codes, float a)
{
    long double e = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        long double d = (long double)x[i] - (long double)f32_mul((float)ref_decode(&G_E2M1, codes[i]), a);
        e += d * d;
    }
    return e;
}

typedef struct { long blocks, bad_param, bad_codes, bad_deq, near_ties, chose4; } nv_stats;

static void nvfp4_block(const float *x, float s, int four_over_six, nv_stats *S, const char *what)
{
    const kvq_format f = four_over_six ? KVQ_FORMAT_NVFP4_4OVER6 : KVQ_FORMAT_NVFP4;
    uint8_t want[16], alt[16], got[16], sf6, sf4;
    float a6, a4, a, out[16];
    uint32_t param = 0xDEADBEEFu;
    size_t i;
    int use4 = 0, either = 0;
    kvq_status st = kvq_format_quantize(f, 4, x, 16, 1, s, got, &param);
    S->blocks++;
    if (st != KVQ_OK) { CHECK(0, "%s: kvq_format_quantize: %s", what, kvq_why()); return; }
    ref_nvfp4(x, 16, s, 6.0f, want, &sf6, &a6);
    a = a6;
    if (four_over_six) {
        long double e6, e4;
        ref_nvfp4(x, 16, s, 4.0f, alt, &sf4, &a4);
        e6 = ref_sse(x, 16, want, a6);
        e4 = ref_sse(x, 16, alt, a4);
        use4 = e4 < e6;
        /* the rule sums in double; a candidate pair this close may order
           differently in long double: either is then accepted            */
        either = e4 != e6 && fabsl(e4 - e6) <= 1e-12L * (e4 + e6) && (sf4 != sf6 || memcmp(want, alt, 16));
        if (either) S->near_ties++;
        if (either && param == sf4 && memcmp(got, alt, 16) == 0) use4 = 1;
        if (use4) { memcpy(want, alt, 16); sf6 = sf4; a = a4; S->chose4++; }
    }
    if (param != sf6) { S->bad_param++; if (S->bad_param < 4) printf("  %s: sf 0x%02X, rule 0x%02X\n", what, param, sf6); }
    if (memcmp(got, want, 16)) {
        S->bad_codes++;
        if (S->bad_codes < 4)
            for (i = 0; i < 16; i++)
                if (got[i] != want[i]) { printf("  %s: x[%zu] = %a: code %u, nearest %u (a = %a)\n", what, i,
                                                (double)x[i], got[i], want[i], (double)a); break; }
    }
    CHECK(kvq_format_dequantize(f, 4, got, 16, param, s, out) == KVQ_OK, "%s: dequantize", what);
    for (i = 0; i < 16; i++)
        if (f2u(out[i]) != f2u(f32_mul((float)ref_decode(&G_E2M1, got[i]), a)) &&
            !(out[i] == 0.0f && ref_decode(&G_E2M1, got[i]) == 0.0)) { S->bad_deq++; break; }
}

/* Random blocks at four side scales (the rule's amax / 2688, 1, tiny,
   huge), then the adversarial ones. About 40,000 blocks, 0.1 s.          */
static void test_nvfp4(void)
{
    const long n_rand = COUNT(10000, 1000);
    clock_t t0 = clock();
    int fo;
    rng r = { 0x5EED0002 };
    for (fo = 0; fo < 2; fo++) {
        nv_stats S = { 0, 0, 0, 0, 0, 0 };
        float x[16];
        long b;
        int i, k;
        const char *nm = fo ? "nvfp4-4over6" : "nvfp4";
        for (b = 0; b < n_rand; b++) {
            float amax = 0, scale_k = (float)exp2(-12.0 + 24.0 * runif(&r));
            for (i = 0; i < 16; i++) {
                x[i] = rnorm(&r) * scale_k;
                if (rbelow(&r, 8) == 0) x[i] *= 8.0f;            /* outliers */
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
            }
            nvfp4_block(x, amax / 2688.0f, fo, &S, nm);          /* max -> 448 x 6 */
            nvfp4_block(x, 1.0f, fo, &S, nm);
            nvfp4_block(x, amax * (float)exp2(-8.0 - 10.0 * runif(&r)), fo, &S, nm);   /* sf saturates */
            nvfp4_block(x, amax * (float)exp2(-1.0 + 8.0 * runif(&r)), fo, &S, nm);  /* subnormal sf */
        }
        /* adversarial blocks                                               */
        for (i = 0; i < 16; i++) x[i] = 0.0f;
        nvfp4_block(x, 1.0f, fo, &S, "all zero");
        for (i = 0; i < 16; i++) x[i] = (i & 1) ? -0.0f : 0.0f;
        nvfp4_block(x, 0.5f, fo, &S, "signed zeros");
        for (i = 0; i < 16; i++) x[i] = 1e-3f * (float)(i - 8);
        x[7] = 3.0e4f;
        nvfp4_block(x, 3.0e4f / 2688.0f, fo, &S, "one huge value");
        {   /* a = 1 exactly (amax 6, s 1): every E2M1 midpoint is a tie     */
            static const float ties[16] = { 6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5,
                                            -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5, -6 };
            nvfp4_block(ties, 1.0f, fo, &S, "ties at a = 1");
            for (i = 0; i < 16; i++) x[i] = ties[i] * 0.125f;      /* a = 1/8 */
            nvfp4_block(x, 1.0f, fo, &S, "ties at a = 1/8");
            for (i = 0; i < 16; i++) x[i] = nextafterf(ties[i], 0.0f);
            nvfp4_block(x, 1.0f, fo, &S, "ties minus one ulp");
        }
        {   /* both candidates exact (a = 1 and a = 1.5): equal errors, and
               the rule keeps 6                                             */
            static const float both[16] = { 6, 3, 1.5f, 0, -6, -3, -1.5f, 0, 6, 3, 0, 0, 0, 0, 0, -0.0f };
            nvfp4_block(both, 1.0f, fo, &S, "a tie between 6 and 4");
        }
        for (k = 0; k < 64; k++) {        /* sf rounds down: x / a > 6 saturates */
            for (i = 0; i < 16; i++) x[i] = (float)(i + 1) * 0.4f;
            x[15] = 6.0f * (1.0f + (float)k / 64.0f);
            nvfp4_block(x, 1.0f, fo, &S, "saturation");
            nvfp4_block(x, 1.0e-30f, fo, &S, "tiny side scale");
            nvfp4_block(x, 1.0e30f, fo, &S, "huge side scale");
            nvfp4_block(x, FLT_MIN * (float)(k + 1), fo, &S, "subnormal-range side scale");
        }
        for (i = 0; i < 16; i++) x[i] = (float)(i % 5) * 1e-38f;   /* fp32 subnormals */
        nvfp4_block(x, 1e-40f, fo, &S, "fp32 subnormal inputs and side scale");
        CHECK(S.bad_param == 0 && S.bad_codes == 0 && S.bad_deq == 0,
              "%s: %ld blocks: %ld scales, %ld code sets, %ld decodes differ from the rule", nm,
              S.blocks, S.bad_param, S.bad_codes, S.bad_deq);
        if (fo) {
            CHECK(S.chose4 > 0 && S.chose4 < S.blocks, "4over6 chose 4 in %ld of %ld blocks", S.chose4, S.blocks);
            printf("test_formats: 4over6 chose max -> 4 in %ld of %ld blocks (%ld near-ties)\n",
                   S.chose4, S.blocks, S.near_ties);
        }
    }
    printf("test_formats: NVFP4, 4over6 blocks against the rule and brute force: %.2f s\n", secs(t0));
}

/* FP8 groups (kvq_format_quantize): per group, a = amax / max (448 or
   57344, one fp32 division) stored as the fp32 parameter and c_i =
   nearest(x_i / a); _TENSOR, a = the side scale, no parameter. 8,000
   groups of n = 1..300 with strides 1 and 3, plus a zero group.
   About 0.05 s.                                                          */
static void test_fp8_groups(void)
{
    const long n_rand = COUNT(2000, 200);
    rng r = { 0x5EED0006 };
    float x[900], out[300];
    uint8_t codes[300];
    long b, bad = 0, groups = 0;
    int k;
    for (b = 0; b < n_rand; b++)
        for (k = 0; k < 4; k++) {
            const kvq_format f = k == 0 ? KVQ_FORMAT_E4M3 : k == 1 ? KVQ_FORMAT_E5M2 :
                                 k == 2 ? KVQ_FORMAT_E4M3_TENSOR : KVQ_FORMAT_E5M2_TENSOR;
            const grid *g = (k & 1) ? &G_E5M2 : &G_E4M3;
            const size_t n = 1 + rbelow(&r, 300), stride = (b & 1) ? 3 : 1;
            const float mag = (float)exp2(-30.0 + 60.0 * runif(&r));
            const float side = (float)exp2(-20.0 + 30.0 * runif(&r));
            float amax = 0, a;
            uint32_t param = 0x12345678u;
            size_t i;
            for (i = 0; i < n; i++) {
                x[i * stride] = rnorm(&r) * mag;
                if (fabsf(x[i * stride]) > amax) amax = fabsf(x[i * stride]);
            }
            groups++;
            if (kvq_format_quantize(f, 8, x, n, stride, side, codes, &param) != KVQ_OK) { bad++; continue; }
            a = k < 2 ? f32_div(amax, (float)g->v[g->n - 1]) : side;
            if (k < 2 && param != f2u(a)) { if (bad++ < 3) printf("  fp8 group: a %a, rule %a\n", (double)u2f(param), (double)a); continue; }
            for (i = 0; i < n; i++)
                if (codes[i] != (a == 0.0f ? 0u : ref_encode(g, f32_div(x[i * stride], a)))) {
                    if (bad++ < 3) printf("  %s x = %a: code 0x%02X\n", kvq_format_name(f), (double)x[i * stride], codes[i]);
                    break;
                }
            if (i < n) continue;
            if (kvq_format_dequantize(f, 8, codes, n, param, side, out) != KVQ_OK) { bad++; continue; }
            for (i = 0; i < n; i++)
                if (f2u(out[i]) != f2u(f32_mul((float)ref_decode(g, codes[i]), a)) && !(out[i] == 0 && codes[i] % 128 == 0)) { bad++; break; }
        }
    CHECK(bad == 0, "FP8 groups: %ld of %ld differ from a = amax / max, c = nearest(x / a)", bad, groups);
    {
        uint32_t param = 1;
        memset(x, 0, 16 * sizeof(float));
        CHECK(kvq_format_quantize(KVQ_FORMAT_E4M3, 8, x, 16, 1, 0.0f, codes, &param) == KVQ_OK && param == 0 &&
              codes[0] == 0 && codes[15] == 0, "FP8 group of zeros: s = 0, codes 0");
    }
}

/* ======================================================================== */
/* 3. Lloyd-Max                                                             */
/* ======================================================================== */
#define REF_PI 3.14159265358979323846
static double ref_Phi_diff(double a, double b)       /* P(a < Z < b)       */
{
    return 0.5 * (erf(b / sqrt(2.0)) - erf(a / sqrt(2.0)));
}
static double ref_phi(double x) { return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2.0 * REF_PI); }
static double ref_xphi(double x) { return isinf(x) ? 0.0 : x * ref_phi(x); }

/* Lloyd's iteration for N(0, 1) with L levels: thresholds at midpoints,
   centroids the cell means (phi(a) - phi(b)) / (Phi(b) - Phi(a)), until no
   centroid moves by 1e-14 (then Lloyd's conditions hold to 1e-12).       */
static void ref_lloyd(int L, double *c)
{
    double t[17], n;
    int k, it;
    for (k = 0; k < L; k++) c[k] = -2.5 + 5.0 * (k + 0.5) / L;
    for (it = 0; it < 200000; it++) {
        double moved = 0;
        t[0] = -INFINITY; t[L] = INFINITY;
        for (k = 1; k < L; k++) t[k] = (c[k - 1] + c[k]) / 2;
        for (k = 0; k < L; k++) {
            n = (ref_phi(t[k]) - ref_phi(t[k + 1])) / ref_Phi_diff(t[k], t[k + 1]);
            if (fabs(n - c[k]) > moved) moved = fabs(n - c[k]);
            c[k] = n;
        }
        if (moved < 1e-14) break;
    }
}

/* E (Z - q(Z))^2 for N(0, 1) with centroids c (midpoint thresholds):
   per cell (a, b): P - 2 c M1 + c^2 P + (a phi(a) - b phi(b)), from
   int x^2 phi = P + a phi(a) - b phi(b) and int x phi = phi(a) - phi(b).  */
static double ref_mse(int L, const double *c)
{
    double t[17], e = 0;
    int k;
    t[0] = -INFINITY; t[L] = INFINITY;
    for (k = 1; k < L; k++) t[k] = (c[k - 1] + c[k]) / 2;
    for (k = 0; k < L; k++) {
        double P = ref_Phi_diff(t[k], t[k + 1]), M1 = ref_phi(t[k]) - ref_phi(t[k + 1]);
        double M2 = P + ref_xphi(t[k]) - ref_xphi(t[k + 1]);
        e += M2 - 2 * c[k] * M1 + c[k] * c[k] * P;
    }
    return e;
}

/* The table (1 float ulp of the converged value), its MSE against Max
   (1960)'s 0.1175, 0.03455, 0.009497 (within 0.1%: Max's 4 digits; the
   converged B = 4 value is 0.009501) and the TurboQuant paper's rounded
   0.117, 0.03, 0.009 (one unit of the paper's last digit: it gives
   0.0095 as 0.009). Milliseconds.                                       */
static void test_lloyd_table(void)
{
    static const double classic[5] = { 0, 0.3634, 0.1175, 0.03455, 0.009497 };
    static const double paper[5] = { 0, 0.36, 0.117, 0.03, 0.009 }, paper_tol[5] = { 0, 1e-2, 1e-3, 1e-2, 1e-3 };
    int B, k;
    for (B = 2; B <= 4; B++) {
        const int L = 1 << B;
        const float *t = kvq_lloyd_max_centroids(B);
        double c[16], ck[16], mse, mse_k;
        int bad = 0;
        ref_lloyd(L, c);
        if (!t) { CHECK(0, "kvq_lloyd_max_centroids(%d) is NULL", B); continue; }
        for (k = 0; k < L; k++) {
            float want = (float)c[k];
            double ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
            ck[k] = t[k];
            if (fabs((double)t[k] - c[k]) > ulp) {
                bad++;
                printf("  B=%d centroid %d: kvq %.9g, Lloyd %.12g\n", B, k, (double)t[k], c[k]);
            }
            if (k > 0 && !(t[k] > t[k - 1])) bad++;
        }
        CHECK(bad == 0, "B=%d: %d Lloyd-Max centroids more than 1 float ulp from the converged "
              "double iteration (or not ascending)", B, bad);
        mse = ref_mse(L, c);
        mse_k = ref_mse(L, ck);
        CHECK(fabs(mse_k - classic[B]) <= 1e-3 * classic[B],
              "B=%d: MSE of kvq's table %.7g, Max (1960) %.5g", B, mse_k, classic[B]);
        CHECK(fabs(mse_k - paper[B]) <= paper_tol[B], "B=%d: MSE %.7g, TurboQuant paper %.3g", B, mse_k, paper[B]);
        CHECK(fabs(mse_k - mse) <= 1e-9, "B=%d: MSE of the float table %.10g vs converged %.10g", B, mse_k, mse);
    }
    CHECK(kvq_lloyd_max_centroids(1) == NULL && kvq_lloyd_max_centroids(5) == NULL &&
          kvq_lloyd_max_centroids(8) == NULL, "no table at B = 1, 5, 8");
    {
        double c1[2];
        ref_lloyd(2, c1);
        CHECK(fabs(c1[1] - sqrt(2.0 / REF_PI)) < 1e-12 && fabs(ref_mse(2, c1) - (1 - 2 / REF_PI)) < 1e-12,
              "the iteration itself: B = 1 gives +-sqrt(2/pi), MSE 1 - 2/pi");
    }
}

/* Groups of n values (n = 16 .. 1024), both variants, B = 2, 3, 4: each
   code the nearest centroid to u_i = x_i sqrt(n) / ||x|| (brute force; a
   u within an fp32 ulp of a threshold may take either side, since the
   rule's thresholds are fp32 midpoints), the plain scale ||x|| / sqrt(n)
   and the corrected one ||x|| / ||centroids|| within 1 float ulp, and the
   corrected vector's norm equal to the input's to fp32 rounding (4 2^-24
   relative). About 3,000 groups, 0.2 s.                                 */
static void test_lloyd_groups(void)
{
    static const size_t ns[6] = { 16, 32, 64, 128, 500, 1024 };
    const long reps = COUNT(40, 5);
    clock_t t0 = clock();
    rng r = { 0x5EED0003 };
    float *x = (float *)malloc(1024 * sizeof(float)), *out = (float *)malloc(1024 * sizeof(float));
    uint8_t *codes = (uint8_t *)malloc(1024);
    long bad_code = 0, bad_scale = 0, bad_norm = 0, groups = 0, edge = 0;
    int B, nc;
    size_t ni, i;
    long rep;
    for (B = 2; B <= 4; B++)
        for (nc = 0; nc < 2; nc++)
            for (ni = 0; ni < 6; ni++)
                for (rep = 0; rep < reps; rep++) {
                    const size_t n = ns[ni];
                    const kvq_format f = nc ? KVQ_FORMAT_LLOYD_MAX_NC : KVQ_FORMAT_LLOYD_MAX;
                    const float *cent = kvq_lloyd_max_centroids(B);
                    long double n2 = 0, c2 = 0, o2 = 0;
                    double want_a;
                    float a;
                    uint32_t param;
                    float mag = (float)exp2(-20.0 + 40.0 * runif(&r));
                    for (i = 0; i < n; i++) {
                        x[i] = rnorm(&r) * mag;
                        if (rep % 7 == 3) x[i] = (float)(i % 3) * mag;    /* few values */
                        n2 += (long double)x[i] * x[i];
                    }
                    groups++;
                    if (kvq_format_quantize(f, B, x, n, 1, 0.0f, codes, &param) != KVQ_OK) {
                        CHECK(0, "lloyd B=%d n=%zu: %s", B, n, kvq_why());
                        continue;
                    }
                    a = u2f(param);
                    for (i = 0; i < n; i++) {
                        double u = (double)x[i] * (sqrtl((long double)n) / sqrtl(n2));
                        int k, best = 0;
                        for (k = 1; k < (1 << B); k++)
                            if (fabs(u - cent[k]) < fabs(u - cent[best])) best = k;
                        if (codes[i] != best) {
                            double gap = fabs(fabs(u - cent[codes[i]]) - fabs(u - cent[best]));
                            if (gap <= ldexp(fabs(u) + 1.0, -22)) edge++;
                            else if (bad_code++ < 3)
                                printf("  B=%d n=%zu: u = %.9g coded %u, nearest %d\n", B, n, u, codes[i], best);
                        }
                        c2 += (long double)cent[codes[i]] * cent[codes[i]];
                    }
                    want_a = (double)(sqrtl(n2) / sqrtl(nc ? c2 : (long double)n));
                    if (fabs((double)a - want_a) > nextafterf((float)want_a, INFINITY) - (float)want_a) {
                        if (bad_scale++ < 3) printf("  B=%d n=%zu nc=%d: a = %.9g, ||x||/%s = %.9g\n", B, n, nc,
                                                    (double)a, nc ? "||c||" : "sqrt(n)", want_a);
                    }
                    if (nc) {
                        CHECK(kvq_format_dequantize(f, B, codes, n, param, 0.0f, out) == KVQ_OK, "lloyd dequantize");
                        for (i = 0; i < n; i++) o2 += (long double)out[i] * out[i];
                        if (fabsl(sqrtl(o2) - sqrtl(n2)) > 4 * ldexp(1.0, -24) * sqrtl(n2)) {
                            if (bad_norm++ < 3) printf("  B=%d n=%zu: ||x'|| %.9Lg, ||x|| %.9Lg\n", B, n,
                                                       sqrtl(o2), sqrtl(n2));
                        }
                    }
                }
    CHECK(bad_code == 0, "Lloyd-Max: %ld codes not the nearest centroid (%ld within an ulp of a "
          "threshold, either accepted)", bad_code, edge);
    CHECK(bad_scale == 0, "Lloyd-Max: %ld of %ld group scales off by more than 1 ulp", bad_scale, groups);
    CHECK(bad_norm == 0, "Lloyd-Max NC: %ld decoded norms differ from the input's", bad_norm);
    {   /* a zero group: a = 0, codes 0                                     */
        uint32_t param = 7;
        memset(x, 0, 64 * sizeof(float));
        poison(codes, 64);
        CHECK(kvq_format_quantize(KVQ_FORMAT_LLOYD_MAX_NC, 3, x, 64, 1, 0.0f, codes, &param) == KVQ_OK &&
              param == 0 && codes[0] == 0 && codes[63] == 0, "Lloyd-Max: a zero group has a = 0, codes 0");
    }
    free(x); free(out); free(codes);
    printf("test_formats: Lloyd-Max groups (%ld) against brute force: %.2f s\n", groups, secs(t0));
}

/* ======================================================================== */
/* 4. q8_0 and q4_0: ggml's reference quantizers                            */
/* ======================================================================== */
/* fp32 -> fp16 round to nearest even, from the definition (11 significant
   bits, subnormal step 2^-24), in double.                                */
static double ref_f16(double d)
{
    double a = fabs(d), q, r;
    int e;
    if (a == 0) return d;
    frexp(a, &e);                              /* a in [2^(e-1), 2^e)        */
    q = ldexp(1.0, (e - 11) < -24 ? -24 : e - 11);
    r = nearbyint(a / q) * q;
    if (r > 65504.0) r = INFINITY;
    return copysign(r, d);
}

/* quantize_row_q8_0_ref (ggml-quants.c), one block of 32:
     amax = max |x|; d = amax / ((1 << 7) - 1); id = d ? 1.0f/d : 0.0f;
     y.d = FP32_TO_FP16(d); y.qs[j] = roundf(x[j] * id)                    */
static void ggml_q8_0(const float *x, int8_t *qs, double *d_stored)
{
    float amax = 0.0f, d, id;
    int j;
    for (j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    d = amax / ((1 << 7) - 1);
    id = d ? 1.0f / d : 0.0f;
    *d_stored = ref_f16(d);
    for (j = 0; j < 32; j++) qs[j] = (int8_t)roundf(x[j] * id);
}
/* quantize_row_q4_0_ref, one block of 32:
     max = the x of largest |x| (the first such); d = max / -8; id = d ? 1/d : 0;
     y.d = FP32_TO_FP16(d); q = MIN(15, (int8_t)(x * id + 8.5f))           */
static void ggml_q4_0(const float *x, uint8_t *q, double *d_stored)
{
    float amax = 0.0f, max = 0.0f, d, id;
    int j;
    for (j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    d = max / -8;
    id = d ? 1.0f / d : 0.0f;
    *d_stored = ref_f16(d);
    for (j = 0; j < 32; j++) {
        const int8_t xi = (int8_t)(x[j] * id + 8.5f);
        q[j] = (uint8_t)(xi < 15 ? xi : 15);
    }
}

static double half_value(uint32_t h)       /* IEEE binary16, from the layout */
{
    int e = (int)((h >> 10) & 31), m = (int)(h & 1023);
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* 20,000 random blocks per format (scales 2^-14..2^10, ties at x id = k +
   1/2, repeated extremes of both signs, zeros), codes and the stored d
   compared, and the decode c d. About 0.1 s.                            */
static void test_ggml(void)
{
    const long n_rand = COUNT(20000, 2000);
    clock_t t0 = clock();
    rng r = { 0x5EED0004 };
    long b, bad8 = 0, bad4 = 0, badd = 0;
    float x[32], out[32];
    int j;
    for (b = 0; b < n_rand + 4; b++) {
        int8_t q8[32];
        uint8_t q4[32], c8[32], c4[32];
        uint32_t p8, p4;
        double d8, d4;
        float s = (float)exp2(-14.0 + 24.0 * runif(&r));
        for (j = 0; j < 32; j++) x[j] = rnorm(&r) * s;
        if (b % 5 == 1) for (j = 0; j < 32; j++) x[j] = (float)((int)rbelow(&r, 255) - 127) * 0.5f;  /* ties */
        if (b % 5 == 2) { x[3] = 4.0f; x[9] = -4.0f; x[20] = 4.0f; }   /* equal |max| of both signs */
        if (b % 5 == 3) { x[4] = -8.0f * s; x[11] = 8.0f * s; }
        if (b == n_rand) for (j = 0; j < 32; j++) x[j] = 0.0f;
        if (b == n_rand + 1) for (j = 0; j < 32; j++) x[j] = (j & 1) ? -0.0f : 0.0f;
        if (b == n_rand + 2) for (j = 0; j < 32; j++) x[j] = (float)(j - 16);
        if (b == n_rand + 3) for (j = 0; j < 32; j++) x[j] = -(float)j * 1e-6f;
        ggml_q8_0(x, q8, &d8);
        ggml_q4_0(x, q4, &d4);
        if (kvq_format_quantize(KVQ_FORMAT_Q8_0, 8, x, 32, 1, 0.0f, c8, &p8) != KVQ_OK ||
            kvq_format_quantize(KVQ_FORMAT_Q4_0, 4, x, 32, 1, 0.0f, c4, &p4) != KVQ_OK) {
            CHECK(0, "q8_0/q4_0 block %ld: %s", b, kvq_why());
            continue;
        }
        for (j = 0; j < 32; j++) {
            if ((int8_t)c8[j] != q8[j] && bad8++ < 3)
                printf("  q8_0 block %ld x[%d] = %a: kvq %d, ggml %d\n", b, j, (double)x[j], (int8_t)c8[j], q8[j]);
            if (c4[j] != q4[j] && bad4++ < 3)
                printf("  q4_0 block %ld x[%d] = %a: kvq %u, ggml %u\n", b, j, (double)x[j], c4[j], q4[j]);
        }
        if (p8 > 0xFFFFu || p4 > 0xFFFFu || half_value(p8) != d8 || half_value(p4) != d4) badd++;
        if (kvq_format_dequantize(KVQ_FORMAT_Q4_0, 4, c4, 32, p4, 0.0f, out) == KVQ_OK)
            for (j = 0; j < 32; j++)
                if ((double)out[j] != (double)(float)(((int)q4[j] - 8) * (float)d4)) { badd++; break; }
        if (kvq_format_dequantize(KVQ_FORMAT_Q8_0, 8, c8, 32, p8, 0.0f, out) == KVQ_OK)
            for (j = 0; j < 32; j++)
                if ((double)out[j] != (double)(float)(q8[j] * (float)d8)) { badd++; break; }
    }
    CHECK(bad8 == 0, "q8_0: %ld codes differ from quantize_row_q8_0_ref", bad8);
    CHECK(bad4 == 0, "q4_0: %ld codes differ from quantize_row_q4_0_ref", bad4);
    CHECK(badd == 0, "q8_0/q4_0: %ld blocks' fp16 d or decode differ from ggml's", badd);
    printf("test_formats: q8_0, q4_0 against ggml's _ref quantizers: %.2f s\n", secs(t0));
}

/* ======================================================================== */
/* 5. B = 3: one bit stream                                                 */
/* ======================================================================== */
/* Every n in 1..200 (odd lengths, word crossings), random codes: words
   equal a bit-by-bit writer's (code i bit b -> stream bit 3i + b, stream
   bit k -> word k / 32 bit k % 32), nothing written past ceil(3n / 32)
   words, unpack gives the codes back. Milliseconds.                      */
static void test_pack3(void)
{
    rng r = { 0x5EED0005 };
    size_t n, i;
    int bad = 0, bad_nw = 0, bad_tail = 0, bad_back = 0;
    uint8_t codes[200], back[208];
    uint32_t words[32], want[32];
    for (n = 1; n <= 200; n++) {
        const size_t nw = (3 * n + 31) / 32;
        int b;
        for (i = 0; i < n; i++) codes[i] = (uint8_t)rbelow(&r, 8);
        if (n == 32) for (i = 0; i < n; i++) codes[i] = 7;
        memset(want, 0, sizeof want);
        for (i = 0; i < n; i++)
            for (b = 0; b < 3; b++)
                if ((codes[i] >> b) & 1) want[(3 * i + b) / 32] |= 1u << ((3 * i + b) % 32);
        bad_nw += kvq_packed_words(n, 3) != nw;
        poison(words, sizeof words);
        if (kvq_pack(codes, n, 3, words) != KVQ_OK) { bad++; continue; }
        bad += memcmp(words, want, nw * 4) != 0;
        bad_tail += !is_poison(words + nw, sizeof words - nw * 4);
        poison(back, sizeof back);
        if (kvq_unpack(want, n, 3, back) != KVQ_OK) { bad_back++; continue; }
        bad_back += memcmp(back, codes, n) != 0 || !is_poison(back + n, sizeof back - n);
    }
    CHECK(bad == 0, "B=3: %d of 200 lengths pack differently from the bit stream", bad);
    CHECK(bad_nw == 0, "B=3: kvq_packed_words differs from ceil(3n/32) at %d lengths", bad_nw);
    CHECK(bad_tail == 0, "B=3: %d packs wrote past the last word", bad_tail);
    CHECK(bad_back == 0, "B=3: %d unpacks differ or overran", bad_back);
    CHECK(kvq_packed_words(32, 3) == 3 && kvq_packed_words(128, 3) == 12 &&
          kvq_packed_words(((size_t)1 << 40) + 1, 3) == ((size_t)3 << 35) + 1,
          "B=3: 32 codes in 3 words, 128 in 12 (48 bytes), no overflow at n = 2^40 + 1");
    {
        uint8_t c[11] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0 };
        poison(words, sizeof words);
        CHECK(kvq_pack(c, 11, 3, words) == KVQ_ERR_RANGE && is_poison(words, sizeof words),
              "B=3: a code of 8 is refused, nothing written");
    }
}

/* ======================================================================== */
/* 6. the presets as caches                                                 */
/* ======================================================================== */
static const char *const PRESETS[] = {
    "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-per-token-head", "int8-per-token-head", "int4-per-token-head",
    "nvfp4", "nvfp4-4over6", "turboquant-k8v4", "turboquant-4bit-nc", "turboquant-k3v4-nc",
    "turboquant-3bit-nc", "q8_0", "q4_0" };
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

/* Bytes of one side per token (codes, parameters) and once per side, from
   the formats' own sizes: B D / 8 bytes of codes; a 4-byte (s, z) or fp32
   scale per group of D; an fp32 side scale for the _TENSOR kinds (and
   NVFP4's side scale); NVFP4 8 bits per 16; q8_0/q4_0 16 bits per 32.    */
typedef struct { size_t codes, params, side; } side_bytes;
static side_bytes expect_side(const char *name, int side, size_t D)
{
    side_bytes b = { 0, 0, 0 };
    int key = side == 0;
    if (!strncmp(name, "fp8-e4m3", 8) || !strcmp(name, "fp8-e5m2")) {
        b.codes = D;
        if (!strcmp(name, "fp8-e4m3-per-token-head")) b.params = 4; else b.side = 4;
    } else if (!strcmp(name, "int8-per-token-head")) { b.codes = D; b.params = 4; }
    else if (!strcmp(name, "int4-per-token-head")) { b.codes = D / 2; b.params = 4; }
    else if (!strncmp(name, "nvfp4", 5)) { b.codes = D / 2; b.params = D / 16; b.side = 4; }
    else if (!strcmp(name, "q8_0")) { b.codes = D; b.params = D / 32 * 2; }
    else if (!strcmp(name, "q4_0")) { b.codes = D / 2; b.params = D / 32 * 2; }
    else if (!strcmp(name, "turboquant-k8v4")) {
        if (key) { b.codes = D; b.side = 4; } else { b.codes = D / 2; b.params = 4; }
    } else {                                  /* turboquant-*-nc            */
        int kb = strstr(name, "3bit") || strstr(name, "k3") ? 3 : 4;
        int vb = strstr(name, "3bit") ? 3 : 4;
        b.codes = D * (size_t)(key ? kb : vb) / 8;
        b.params = 4;
    }
    return b;
}

/* Each preset as kvq.h's comment above kvq_config_engine states it (the
   test checks kvq_config_engine's configs against this table).           */
typedef struct { const char *name; kvq_format f[2]; int bits[2]; kvq_rotation rot[2]; float scale; } preset_spec;
static const preset_spec SPEC[] = {
    { "fp8-e4m3", { KVQ_FORMAT_E4M3_TENSOR, KVQ_FORMAT_E4M3_TENSOR }, { 8, 8 }, { KVQ_ROT_NONE, KVQ_ROT_NONE }, 1.0f },
    { "fp8-e5m2", { KVQ_FORMAT_E5M2_TENSOR, KVQ_FORMAT_E5M2_TENSOR }, { 8, 8 }, { KVQ_ROT_NONE, KVQ_ROT_NONE }, 1.0f },
    { "fp8-e4m3-per-token-head", { KVQ_FORMAT_E4M3, KVQ_FORMAT_E4M3 }, { 8, 8 }, { KVQ_ROT_NONE, KVQ_ROT_NONE }, 0 },
    { "int8-per-token-head", { KVQ_FORMAT_INT, KVQ_FORMAT_INT }, { 8, 8 }, { KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD }, 0 },
    { "int4-per-token-head", { KVQ_FORMAT_INT, KVQ_FORMAT_INT }, { 4, 4 }, { KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD }, 0 },
    { "nvfp4", { KVQ_FORMAT_NVFP4, KVQ_FORMAT_NVFP4 }, { 4, 4 }, { KVQ_ROT_NONE, KVQ_ROT_NONE }, 0 },
    { "nvfp4-4over6", { KVQ_FORMAT_NVFP4_4OVER6, KVQ_FORMAT_NVFP4_4OVER6 }, { 4, 4 }, { KVQ_ROT_NONE, KVQ_ROT_NONE }, 0 },
    { "turboquant-k8v4", { KVQ_FORMAT_E4M3_TENSOR, KVQ_FORMAT_INT }, { 8, 4 }, { KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE }, 1.0f },
    { "turboquant-4bit-nc", { KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_INT }, { 4, 4 }, { KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE }, 0 },
    { "turboquant-k3v4-nc", { KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_INT }, { 3, 4 }, { KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE }, 0 },
    { "turboquant-3bit-nc", { KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_INT }, { 3, 3 }, { KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE }, 0 },
    { "q8_0", { KVQ_FORMAT_Q8_0, KVQ_FORMAT_Q8_0 }, { 8, 8 }, { KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD }, 0 },
    { "q4_0", { KVQ_FORMAT_Q4_0, KVQ_FORMAT_Q4_0 }, { 4, 4 }, { KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD }, 0 },
};
#define TURBQ_SEED 0x7475726271ull        /* kvq.h: the presets' "turbq" */

static const preset_spec *spec_of(const char *name)
{
    size_t i;
    for (i = 0; i < sizeof SPEC / sizeof SPEC[0]; i++) if (!strcmp(SPEC[i].name, name)) return &SPEC[i];
    return NULL;
}

/* kvq.h Sec. 6.1's rotation as written there: signs s_i (bit 63 of
   splitmix64's i-th output), the butterflies h = 1, 2, 4, ... in fp32, one
   multiply by (float)(1 / sqrt(D)); rotating back: butterflies, scale,
   signs.                                                                  */
static float ref_sign(uint64_t seed, size_t i)
{
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> 63) ? -1.0f : 1.0f;
}
static void ref_rotate(kvq_rotation kind, size_t D, int inverse, float *x)
{
    const float scale = (float)(1.0 / sqrt((double)D));
    size_t h, j;
    if (kind == KVQ_ROT_NONE) return;
    if (kind == KVQ_ROT_HADAMARD_SIGNS && !inverse) for (j = 0; j < D; j++) x[j] *= ref_sign(TURBQ_SEED, j);
    for (h = 1; h < D; h *= 2)
        for (j = 0; j < D; j++)
            if (j % (2 * h) < h) { float a = x[j], b = x[j + h]; x[j] = a + b; x[j + h] = a - b; }
    for (j = 0; j < D; j++) x[j] *= scale;
    if (kind == KVQ_ROT_HADAMARD_SIGNS && inverse) for (j = 0; j < D; j++) x[j] *= ref_sign(TURBQ_SEED, j);
}

/* One group of n stored values h (fp16 already) -> what a reader decodes,
   by each format's written rule (kvq.h Sec. 4 and 4.1).                  */
static void ref_group(kvq_format f, int bits, const float *h, size_t n, float side_scale, float *out)
{
    size_t i;
    if (f == KVQ_FORMAT_INT) {                /* float zero: KIVI's rule     */
        const float N = (float)((1 << bits) - 1);
        float mn = h[0], mx = h[0], s, z;
        for (i = 1; i < n; i++) { mn = h[i] < mn ? h[i] : mn; mx = h[i] > mx ? h[i] : mx; }
        s = (float)ref_f16((mx - mn) / N);
        z = (float)ref_f16(mn);
        for (i = 0; i < n; i++) {
            float v = s == 0.0f ? 0.0f : (h[i] - z) / s;
            v = v < 0 ? 0 : v > N ? N : v;
            out[i] = nearbyintf(v) * s + z;
        }
    } else if (f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR) {
        const grid *g = f == KVQ_FORMAT_E4M3_TENSOR ? &G_E4M3 : &G_E5M2;
        for (i = 0; i < n; i++) out[i] = f32_mul((float)ref_decode(g, ref_encode(g, f32_div(h[i], side_scale))), side_scale);
    } else if (f == KVQ_FORMAT_E4M3) {
        float amax = 0, a;
        for (i = 0; i < n; i++) amax = fabsf(h[i]) > amax ? fabsf(h[i]) : amax;
        a = f32_div(amax, 448.0f);
        for (i = 0; i < n; i++)
            out[i] = a == 0.0f ? 0.0f : f32_mul((float)ref_decode(&G_E4M3, ref_encode(&G_E4M3, f32_div(h[i], a))), a);
    } else if (f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6) {
        uint8_t c6[16], c4[16], sf;
        float a6, a4;
        ref_nvfp4(h, 16, side_scale, 6.0f, c6, &sf, &a6);
        if (f == KVQ_FORMAT_NVFP4_4OVER6) {
            ref_nvfp4(h, 16, side_scale, 4.0f, c4, &sf, &a4);
            if (ref_sse(h, 16, c4, a4) < ref_sse(h, 16, c6, a6)) { memcpy(c6, c4, 16); a6 = a4; }
        }
        for (i = 0; i < 16; i++) out[i] = f32_mul((float)ref_decode(&G_E2M1, c6[i]), a6);
    } else if (f == KVQ_FORMAT_LLOYD_MAX_NC || f == KVQ_FORMAT_LLOYD_MAX) {
        /* the table is data, checked against Lloyd's iteration above      */
        const float *cent = kvq_lloyd_max_centroids(bits);
        double n2 = 0, c2 = 0, inv;
        uint8_t c[1024];
        float a;
        int k;
        for (i = 0; i < n; i++) n2 += (double)h[i] * (double)h[i];
        if (n2 == 0) { for (i = 0; i < n; i++) out[i] = 0; return; }
        inv = sqrt((double)n) / sqrt(n2);
        for (i = 0; i < n; i++) {
            float u = (float)((double)h[i] * inv);
            c[i] = 0;
            for (k = 0; k + 1 < (1 << bits); k++) c[i] += u > (cent[k] + cent[k + 1]) * 0.5f;
            c2 += (double)cent[c[i]] * (double)cent[c[i]];
        }
        a = (float)(sqrt(n2) / sqrt(f == KVQ_FORMAT_LLOYD_MAX_NC ? c2 : (double)n));
        for (i = 0; i < n; i++) out[i] = cent[c[i]] * a;
    } else {                                  /* q8_0, q4_0: ggml's _ref     */
        double d;
        for (i = 0; i < n; i += 32) {
            size_t j;
            if (f == KVQ_FORMAT_Q8_0) {
                int8_t q[32];
                ggml_q8_0(h + i, q, &d);
                for (j = 0; j < 32; j++) out[i + j] = (float)q[j] * (float)d;
            } else {
                uint8_t q[32];
                ggml_q4_0(h + i, q, &d);
                for (j = 0; j < 32; j++) out[i + j] = (float)((int)q[j] - 8) * (float)d;
            }
        }
    }
}

/* The row side s of a preset reads back: rotate (fp32), store as fp16,
   quantize group by group, decode, rotate back.                          */
static void expect_row(const preset_spec *P, int s, const float *x, size_t D, float side_scale, float *out)
{
    float h[128];
    const kvq_format f = P->f[s];
    const size_t G = f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6 ? 16 :
                     f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0 ? 32 : D;
    size_t i, g;
    memcpy(h, x, D * sizeof(float));
    ref_rotate(P->rot[s], D, 0, h);
    for (i = 0; i < D; i++) h[i] = (float)ref_f16(h[i]);
    for (g = 0; g < D; g += G) ref_group(f, P->bits[s], h + g, G, side_scale, out + g);
    ref_rotate(P->rot[s], D, 1, out);
}

/* Beside the exact rule: the error a rotated preset's read may have, as a
   norm (a property that holds whatever the rounding order): the rotation is
   orthonormal, so ||x' - x|| is the rotated error's norm, and every
   rotated coordinate is at most ||x|| (Cauchy-Schwarz). Per side:
     E4M3 scale 1   2^-4 ||x|| + sqrt(D) 2^-10 (half the subnormal step)
     INT B bits     sqrt(D) ||x|| / N (s / 2, s <= 2 ||x|| / N) + fp16
     q8_0 / q4_0    sqrt(D) ||x|| (1/254 + 2^-11) / sqrt(D) (1/8 + 2^-11)
     Lloyd-Max      B = 4: 0.04 ||x||^2, B = 3: 0.1 ||x||^2 squared error
                    (3x the MSE per coordinate of N(0, 1), 0.0095, 0.0345)
   plus 2^-10 ||x|| for fp16 inputs and fp32 rotations.                  */
static double side_bound(const char *name, int side, size_t D, double nx, double *sq_rel)
{
    const double sd = sqrt((double)D), slop = ldexp(nx, -10);
    *sq_rel = 0;
    if (!strcmp(name, "q8_0")) return sd * nx * (1.0 / 254 + ldexp(1, -11)) + slop;
    if (!strcmp(name, "q4_0")) return sd * nx * (1.0 / 8 + ldexp(1, -11)) + slop;
    if (!strcmp(name, "int8-per-token-head")) return sd * nx / 255 * 1.01 + slop;
    if (!strcmp(name, "int4-per-token-head")) return sd * nx / 15 * 1.01 + slop;
    if (side == 1) {                                /* turboquant values: INT */
        int vb = strstr(name, "3bit") ? 3 : 4;
        return sd * nx / ((1 << vb) - 1) * 1.01 + slop;
    }
    if (!strcmp(name, "turboquant-k8v4")) return ldexp(nx, -4) * 1.01 + sd * ldexp(1, -10) + slop;
    *sq_rel = strstr(name, "4bit") ? 0.04 : 0.1;
    return INFINITY;
}

typedef struct { long rows, bad_exact, bad_bound, bad_norm; double worst_sq; } read_stats;

/* Row t of side s against its input.                                      */
static void check_read(const kvq_cache *c, const char *name, int s, size_t t, const float *x,
                       float side_scale, read_stats *R)
{
    const size_t D = c->cfg.head_dim;
    float got[128], want[128];
    double nx = 0, ne = 0, ng = 0, sq_rel, bound;
    size_t i;
    R->rows++;
    poison(got, sizeof got);
    if (kvq_cache_read(c, s, t, got) != KVQ_OK) { CHECK(0, "%s: read %zu: %s", name, t, kvq_why()); return; }
    expect_row(spec_of(name), s, x, D, side_scale, want);
    for (i = 0; i < D; i++)
        if (f2u(got[i]) != f2u(want[i]) && !(got[i] == 0 && want[i] == 0)) {
            if (R->bad_exact++ < 3)
                printf("  %s side %d row %zu [%zu]: read %a, rule %a (x %a)\n", name, s, t, i,
                       (double)got[i], (double)want[i], (double)x[i]);
            break;
        }
    if (spec_of(name)->rot[s] == KVQ_ROT_NONE) return;  /* exact was all */
    for (i = 0; i < D; i++) {
        nx += (double)x[i] * x[i];
        ne += ((double)got[i] - x[i]) * ((double)got[i] - x[i]);
        ng += (double)got[i] * got[i];
    }
    bound = side_bound(name, s, D, sqrt(nx), &sq_rel);
    if (sq_rel > 0) {
        if (ne / nx > R->worst_sq) R->worst_sq = ne / nx;
        if (ne > sq_rel * nx) R->bad_bound++;
        /* norm correction: ||x'|| is ||f16(x)|| to fp32 rounding           */
        if (fabs(sqrt(ng) - sqrt(nx)) > ldexp(sqrt(nx), -10)) R->bad_norm++;
    } else if (sqrt(ne) > bound) {
        if (R->bad_bound++ < 3) printf("  %s side %d row %zu: ||x' - x|| %.3g > bound %.3g\n", name, s, t,
                                       sqrt(ne), bound);
    }
}

static int attend_matches(const kvq_cache *c, const float *q, size_t n_q, const char *what)
{
    const size_t D = c->cfg.head_dim, n = c->n_pos;
    size_t nw = n_q * (kvq_attend_scratch_floats(c, KVQ_ATTN_EAGER) + kvq_attend_scratch_floats(c, KVQ_ATTN_ONLINE));
    float *work = (float *)malloc(nw * sizeof(float)), *K = (float *)malloc(n * D * sizeof(float));
    float *V = (float *)malloc(n * D * sizeof(float)), *ref = (float *)malloc(n_q * D * sizeof(float));
    float *out = (float *)malloc(n_q * D * sizeof(float));
    uint8_t *present = (uint8_t *)malloc(n);
    size_t i, m = 0;
    int mode, ok = 1;
    kvq_cache_present(c, present, n);
    for (i = 0; i < n; i++)
        if (present[i]) {
            ok &= kvq_cache_read(c, 0, i, K + m * D) == KVQ_OK && kvq_cache_read(c, 1, i, V + m * D) == KVQ_OK;
            m++;
        }
    ok &= kvq_attend_dense(K, V, m, D, q, n_q, ref, NULL) == KVQ_OK;
    for (mode = 0; mode < 2 && ok; mode++) {
        double mx = 0, diff = 0;
        if (kvq_attend(c, q, n_q, out, NULL, (kvq_attn_mode)mode, work, nw) != KVQ_OK) {
            printf("  %s: attend %d: %s\n", what, mode, kvq_why()); ok = 0; break;
        }
        for (i = 0; i < n_q * D; i++) {
            if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
            if (fabs((double)out[i] - ref[i]) > diff) diff = fabs((double)out[i] - ref[i]);
        }
        if (diff > 1e-5 * mx + 1e-6) {
            printf("  %s: %s max |out - dense| %.3g > 1e-5 x %.3g + 1e-6\n", what, mode ? "ONLINE" : "EAGER", diff, mx);
            ok = 0;
        }
    }
    free(work); free(K); free(V); free(ref); free(out); free(present);
    return ok;
}

/* Each preset at D = 64 and 128: T = 96 rows (row 0 holds the largest
   value, so NVFP4's side scale from the first row covers all), 40 by
   prefill then appends; a second cache all by appends; reads, bytes,
   attention with 1 and 4 query heads, check, then StreamingLLM eviction
   and compaction and the same again. About 0.15 s.                       */
static void test_caches(void)
{
    const size_t Ds[2] = { 64, 128 }, T = COUNT(96, 48);
    clock_t t0 = clock();
    size_t p, di, i, t;
    for (p = 0; p < N_PRESETS; p++)
        for (di = 0; di < 2; di++) {
            const char *name = PRESETS[p];
            const size_t D = Ds[di];
            kvq_config cfg;
            kvq_cache c;
            kvq_bytes by;
            read_stats R = { 0, 0, 0, 0, 0 };
            float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
            float q[4 * 128], ks, vs;
            uint8_t *keep = (uint8_t *)malloc(T);
            rng r = { 0x5EED0100 + p * 4 + di };
            char what[96];
            int s;
            snprintf(what, sizeof what, "%s D=%zu", name, D);
            for (i = 0; i < T * D; i++) { K[i] = rnorm(&r); V[i] = 0.5f * rnorm(&r) + 0.25f; }
            for (i = 0; i < T * D; i++) {                /* |x| <= 4      */
                K[i] = K[i] > 4 ? 4 : K[i] < -4 ? -4 : K[i];
                V[i] = V[i] > 4 ? 4 : V[i] < -4 ? -4 : V[i];
            }
            K[3] = 4.0f; V[5] = -4.0f;                   /* row 0 holds the max */
            for (i = 0; i < 4 * D; i++) q[i] = 0.3f * rnorm(&r);
            if (kvq_config_engine(&cfg, D, name) != KVQ_OK || kvq_config_validate(&cfg) != KVQ_OK ||
                kvq_cache_init(&c, &cfg) != KVQ_OK) {
                CHECK(0, "%s: %s", what, kvq_why());
                free(K); free(V); free(keep);
                continue;
            }
            CHECK(cfg.residual == 0 && cfg.policy == KVQ_POLICY_CUSTOM, "%s: no full-precision window", what);
            {   /* the preset is kvq.h's comment above kvq_config_engine     */
                const preset_spec *P = spec_of(name);
                CHECK(P && cfg.key_format == P->f[0] && cfg.value_format == P->f[1] && cfg.key_bits == P->bits[0] &&
                      cfg.value_bits == P->bits[1] && cfg.key_rotation == P->rot[0] && cfg.value_rotation == P->rot[1] &&
                      cfg.key_axis == KVQ_PER_TOKEN && cfg.value_axis == KVQ_PER_TOKEN && cfg.zero_mode == KVQ_ZERO_FLOAT &&
                      (P->rot[0] != KVQ_ROT_HADAMARD_SIGNS || cfg.rotation_seed == TURBQ_SEED) &&
                      cfg.key_scale == (kvq__format_tensor(P->f[0]) ? P->scale : 0.0f), "%s: the preset's config", what);
            }
            CHECK(kvq_cache_prefill(&c, K, V, 40) == KVQ_OK, "%s: prefill: %s", what, kvq_why());
            for (t = 40; t < T; t++)
                if (kvq_cache_append(&c, K + t * D, V + t * D) != KVQ_OK) { CHECK(0, "%s: append: %s", what, kvq_why()); break; }
            CHECK(kvq_cache_check(&c) == KVQ_OK, "%s: check after appends: %s", what, kvq_why());
            /* side scales: the preset's 1.0, or the first rows' amax / 2688 */
            ks = c.k.scale; vs = c.v.scale;
            if (!strncmp(name, "nvfp4", 5)) {
                float ak = 0, av = 0;
                for (i = 0; i < 40 * D; i++) {
                    if (fabsf((float)ref_f16(K[i])) > ak) ak = fabsf((float)ref_f16(K[i]));
                    if (fabsf((float)ref_f16(V[i])) > av) av = fabsf((float)ref_f16(V[i]));
                }
                CHECK(ks == f32_div(ak, 2688.0f) && vs == f32_div(av, 2688.0f),
                      "%s: side scales %g %g, the prefill's amax / (448 x 6) %g %g", what, (double)ks,
                      (double)vs, (double)f32_div(ak, 2688.0f), (double)f32_div(av, 2688.0f));
            }
            if (!strcmp(name, "fp8-e4m3") || !strcmp(name, "fp8-e5m2") || !strcmp(name, "turboquant-k8v4"))
                CHECK(ks == 1.0f, "%s: the key scale is vLLM's default 1.0 (%g)", what, (double)ks);
            for (t = 0; t < T; t++)
                for (s = 0; s < 2; s++)
                    check_read(&c, name, s, t, (s ? V : K) + t * D, s ? vs : ks, &R);
            CHECK(R.bad_exact == 0, "%s: %ld of %ld rows read differently from the format's rule", what,
                  R.bad_exact, R.rows);
            CHECK(R.bad_bound == 0 && R.bad_norm == 0, "%s: %ld rows beyond the format's error bound, %ld norms "
                  "not kept (worst squared error %.4f of ||x||^2)", what, R.bad_bound, R.bad_norm, R.worst_sq);
            /* bytes per element, from the formats' sizes                    */
            if (kvq_cache_bytes(&c, &by) == KVQ_OK) {
                size_t want_payload = 0;
                int ok = 1;
                for (s = 0; s < 2; s++) {
                    side_bytes e = expect_side(name, s, D);
                    ok &= by.codes[s] == e.codes * T && by.scale_zero[s] == e.params * T + e.side &&
                          by.full_precision[s] == 0;
                    if (!ok) printf("  %s side %d: codes %zu (want %zu), params %zu (want %zu)\n", what, s,
                                    by.codes[s], e.codes * T, by.scale_zero[s], e.params * T + e.side);
                    want_payload += (e.codes + e.params) * T + e.side;
                }
                CHECK(ok && by.payload == want_payload &&
                      by.bits_per_element == (double)want_payload * 8 / (2.0 * T * D),
                      "%s: %.4f bits per element, the formats' sizes give %.4f", what, by.bits_per_element,
                      (double)want_payload * 8 / (2.0 * T * D));
            } else CHECK(0, "%s: bytes: %s", what, kvq_why());
            CHECK(attend_matches(&c, q, 1, what), "%s: attention (1 head) against dense over its rows", what);
            CHECK(attend_matches(&c, q, 4, what), "%s: attention (GQA, 4 heads) against dense over its rows", what);
            /* NaN / Inf / huge rows refused, the cache as it was            */
            {
                float bad[128], row_before[128], row_after[128];
                size_t n0 = c.n_pos;
                kvq_status st;
                memcpy(bad, K + 7 * D, D * sizeof(float));
                kvq_cache_read(&c, 0, T - 1, row_before);
                bad[D / 2] = NAN;
                st = kvq_cache_append(&c, bad, V);
                CHECK(st == KVQ_ERR_NONFINITE && c.n_pos == n0, "%s: a NaN key refused (%d)", what, (int)st);
                bad[D / 2] = -INFINITY;
                st = kvq_cache_append(&c, V, bad);
                CHECK(st == KVQ_ERR_NONFINITE && c.n_pos == n0, "%s: an Inf value refused (%d)", what, (int)st);
                bad[D / 2] = 1e6f;
                st = kvq_cache_append(&c, bad, V);
                CHECK(st == KVQ_ERR_RANGE && c.n_pos == n0, "%s: |x| > KVQ_MAX_ABS_INPUT refused (%d)", what, (int)st);
                poison(row_after, sizeof row_after);
                CHECK(kvq_cache_read(&c, 0, T - 1, row_after) == KVQ_OK &&
                      memcmp(row_before, row_after, D * sizeof(float)) == 0 && kvq_cache_check(&c) == KVQ_OK,
                      "%s: the cache unchanged after refused rows", what);
                poison(row_after, sizeof row_after);
                CHECK(kvq_cache_read(&c, 0, T, row_after) == KVQ_ERR_STATE && is_poison(row_after, sizeof row_after),
                      "%s: a read past the end refused, nothing written", what);
            }
            /* eviction and compaction                                       */
            if (kvq_evict_streaming(NULL, c.n_pos, 4, T / 3, keep) == KVQ_OK &&
                kvq_cache_evict(&c, keep, c.n_pos, NULL) == KVQ_OK) {
                CHECK(kvq_cache_check(&c) == KVQ_OK, "%s: check after eviction: %s", what, kvq_why());
                CHECK(attend_matches(&c, q, 4, what), "%s: attention after eviction", what);
                CHECK(kvq_cache_compact(&c, 16, NULL) == KVQ_OK && kvq_cache_check(&c) == KVQ_OK,
                      "%s: compact: %s", what, kvq_why());
                R.bad_exact = R.bad_bound = R.bad_norm = 0;
                for (t = 0; t < 4; t++) for (s = 0; s < 2; s++) check_read(&c, name, s, t, (s ? V : K) + t * D, s ? vs : ks, &R);
                for (t = T - T / 3; t < T; t++) for (s = 0; s < 2; s++) check_read(&c, name, s, t, (s ? V : K) + t * D, s ? vs : ks, &R);
                CHECK(R.bad_exact == 0 && R.bad_bound == 0 && R.bad_norm == 0, "%s: rows after compaction", what);
                CHECK(attend_matches(&c, q, 4, what), "%s: attention after compaction", what);
                for (t = 0; t < 8; t++) CHECK(kvq_cache_append(&c, K + t * D, V + t * D) == KVQ_OK, "%s: append after compaction", what);
                CHECK(kvq_cache_check(&c) == KVQ_OK && attend_matches(&c, q, 4, what), "%s: after more appends", what);
            } else CHECK(0, "%s: evict: %s", what, kvq_why());
            kvq_cache_free(&c);
            /* the same rows all by appends: the same reads                   */
            if (kvq_cache_init(&c, &cfg) == KVQ_OK) {
                kvq_cache c2;
                int same = 1;
                float a[128], b[128];
                kvq_cache_init(&c2, &cfg);
                kvq_cache_prefill(&c2, K, V, 40);
                for (t = 0; t < T; t++) kvq_cache_append(&c, K + t * D, V + t * D);
                for (t = 40; t < T; t++) kvq_cache_append(&c2, K + t * D, V + t * D);
                /* (NVFP4's side scale comes from other first rows: skipped) */
                for (t = 0; t < T && strncmp(name, "nvfp4", 5) != 0; t++)
                    for (s = 0; s < 2; s++) {
                        kvq_cache_read(&c, s, t, a); kvq_cache_read(&c2, s, t, b);
                        same &= memcmp(a, b, D * sizeof(float)) == 0;
                    }
                CHECK(same, "%s: prefill then appends reads as appends alone", what);
                kvq_cache_free(&c2);
                kvq_cache_free(&c);
            }
            free(K); free(V); free(keep);
        }
    printf("test_formats: %zu presets x D = 64, 128 as caches: %.2f s\n", N_PRESETS, secs(t0));
}

/* The formats on the papers' policies (kvq.h: every policy but HF): KIVI
   caches with per-channel keys and per-token values in the formats, 300
   tokens by prefill and appends. Every quantized position reads back as
   the rule gives it for its unit (the G tokens of each channel, or the
   group of channels of its token, from the fp16 rows), every row in a
   full-precision region as its fp16 row; EAGER and ONLINE against dense;
   kvq_cache_check. OTT and LogQuant with formats: check and attention.
   About 0.1 s.                                                           */
static void test_policies_formats(void)
{
    static const struct { kvq_format kf, vf; int kb, vb; size_t G, Gv; kvq_rotation rot; } K[] = {
        { KVQ_FORMAT_E4M3, KVQ_FORMAT_NVFP4, 8, 4, 32, 16, KVQ_ROT_NONE },
        { KVQ_FORMAT_NVFP4_4OVER6, KVQ_FORMAT_Q4_0, 4, 4, 16, 32, KVQ_ROT_NONE },
        { KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_LLOYD_MAX, 3, 2, 32, 64, KVQ_ROT_NONE },
        { KVQ_FORMAT_E5M2_TENSOR, KVQ_FORMAT_Q8_0, 8, 8, 32, 32, KVQ_ROT_HADAMARD },
        { KVQ_FORMAT_Q8_0, KVQ_FORMAT_E4M3_TENSOR, 8, 8, 32, 64, KVQ_ROT_HADAMARD_SIGNS },
    };
    const size_t D = 64, T = COUNT(300, 160);
    clock_t t0 = clock();
    size_t k, i, t;
    for (k = 0; k < sizeof K / sizeof K[0]; k++) {
        kvq_config cfg = kvq_config_kivi(D, K[k].kb);
        kvq_cache c;
        float *X[2], q[4 * 64], row[64], want[64], h[64 * 64], col[64];
        long bad = 0, quant = 0;
        rng r = { 0x5EED0200 + k };
        int s;
        char what[64];
        snprintf(what, sizeof what, "KIVI %s keys, %s values", kvq_format_name(K[k].kf), kvq_format_name(K[k].vf));
        cfg.key_format = K[k].kf; cfg.value_format = K[k].vf;
        cfg.value_bits = K[k].vb; cfg.group = K[k].G; cfg.value_group = K[k].Gv;
        cfg.key_rotation = cfg.value_rotation = K[k].rot;
        cfg.rotation_seed = TURBQ_SEED;
        X[0] = (float *)malloc(T * D * sizeof(float)); X[1] = (float *)malloc(T * D * sizeof(float));
        for (i = 0; i < T * D; i++) { X[0][i] = rnorm(&r) + (i % D == 5 ? 3.0f : 0.0f); X[1][i] = rnorm(&r); }
        for (i = 0; i < 4 * D; i++) q[i] = 0.3f * rnorm(&r);
        if (kvq_cache_init(&c, &cfg) != KVQ_OK) { CHECK(0, "%s: %s", what, kvq_why()); free(X[0]); free(X[1]); continue; }
        CHECK(kvq_cache_prefill(&c, X[0], X[1], 70) == KVQ_OK, "%s: prefill: %s", what, kvq_why());
        for (t = 70; t < T; t++) kvq_cache_append(&c, X[0] + t * D, X[1] + t * D);
        CHECK(kvq_cache_check(&c) == KVQ_OK, "%s: check: %s", what, kvq_why());
        for (s = 0; s < 2; s++) {
            const kvq_side *sd = s ? &c.v : &c.k;
            const kvq_format f = s ? K[k].vf : K[k].kf;
            const int bits = s ? K[k].vb : K[k].kb;
            const size_t G = s ? K[k].Gv : K[k].G;
            for (t = 0; t < T; t++) {
                const uint32_t l = sd->loc[t];
                size_t j, d;
                kvq_cache_read(&c, s, t, row);
                for (d = 0; d < D; d++) h[d] = X[s][t * D + d];
                ref_rotate(K[k].rot, D, 0, h);
                for (d = 0; d < D; d++) h[d] = (float)ref_f16(h[d]);
                if (KVQ_LOC_TAG(l) != KVQ_LOC_QUANT) {       /* a full-precision row */
                    memcpy(want, h, D * sizeof(float));
                } else if (sd->axis == KVQ_PER_TOKEN) {
                    for (d = 0; d < D; d += G) ref_group(f, bits, h + d, G, sd->scale, want + d);
                } else {                                    /* per channel: the unit's G tokens */
                    const size_t unit = KVQ_LOC_INDEX(l) / G, me = KVQ_LOC_INDEX(l) % G;
                    float rows[64 * 64];
                    quant++;
                    for (j = 0; j < G; j++) {
                        const int32_t pj = sd->qpos[unit * G + j];
                        for (d = 0; d < D; d++) rows[j * D + d] = X[s][(size_t)pj * D + d];
                        ref_rotate(K[k].rot, D, 0, rows + j * D);
                        for (d = 0; d < D; d++) rows[j * D + d] = (float)ref_f16(rows[j * D + d]);
                    }
                    for (d = 0; d < D; d++) {
                        float out[64];
                        for (j = 0; j < G; j++) col[j] = rows[j * D + d];
                        ref_group(f, bits, col, G, sd->scale, out);
                        want[d] = out[me];
                    }
                }
                ref_rotate(K[k].rot, D, 1, want);
                if (KVQ_LOC_TAG(l) == KVQ_LOC_QUANT && sd->axis == KVQ_PER_TOKEN) quant++;
                for (d = 0; d < D; d++)
                    if (f2u(row[d]) != f2u(want[d]) && !(row[d] == 0 && want[d] == 0)) {
                        if (bad++ < 3) printf("  %s side %d pos %zu [%zu]: read %a, rule %a\n", what, s, t, d,
                                              (double)row[d], (double)want[d]);
                        break;
                    }
            }
        }
        CHECK(bad == 0 && quant >= (long)T / 2, "%s: %ld rows (of %ld quantized) read differently from the rule",
              what, bad, quant);
        CHECK(attend_matches(&c, q, 4, what), "%s: attention against dense over its rows", what);
        kvq_cache_free(&c);
        free(X[0]); free(X[1]);
    }
    {   /* OTT and LogQuant with formats: a consistent cache, exact attention */
        kvq_config cf[2];
        int j;
        cf[0] = kvq_config_ott(D, 8, 3); cf[0].key_format = KVQ_FORMAT_E4M3; cf[0].value_format = KVQ_FORMAT_E5M2;
        cf[1] = kvq_config_logquant(D, 4, 16); cf[1].key_format = KVQ_FORMAT_NVFP4; cf[1].value_format = KVQ_FORMAT_Q4_0;
        cf[1].group = 16; cf[1].value_group = 32;
        for (j = 0; j < 2; j++) {
            kvq_cache c;
            rng r = { 0x5EED0300 + (uint64_t)j };
            float kx[64], vx[64], q[4 * 64];
            const char *what = j ? "LogQuant NVFP4/q4_0" : "OTT E4M3/E5M2";
            for (i = 0; i < 4 * D; i++) q[i] = 0.3f * rnorm(&r);
            if (kvq_cache_init(&c, &cf[j]) != KVQ_OK) { CHECK(0, "%s: %s", what, kvq_why()); continue; }
            for (t = 0; t < T; t++) {
                for (i = 0; i < D; i++) { kx[i] = rnorm(&r) * (t % 37 == 3 ? 0.05f : 1.0f); vx[i] = rnorm(&r); }
                if (kvq_cache_append(&c, kx, vx) != KVQ_OK) { CHECK(0, "%s: append: %s", what, kvq_why()); break; }
            }
            CHECK(kvq_cache_check(&c) == KVQ_OK, "%s: check: %s", what, kvq_why());
            CHECK(attend_matches(&c, q, 4, what), "%s: attention against dense over its rows", what);
            kvq_cache_free(&c);
        }
    }
    printf("test_formats: formats on KIVI, OTT and LogQuant caches: %.2f s\n", secs(t0));
}

/* Refusals of the presets and the format configs: *cfg and the cache
   untouched. Microseconds.                                               */
static void test_bad_configs(void)
{
    kvq_config cfg, keep;
    kvq_cache c;
    size_t p;
    poison(&cfg, sizeof cfg);
    CHECK(kvq_config_engine(&cfg, 64, "fp8_e4m3") == KVQ_ERR_CONFIG && is_poison(&cfg, sizeof cfg),
          "an unknown name: CONFIG, *cfg untouched");
    CHECK(kvq_config_engine(&cfg, 64, "turboquant") == KVQ_ERR_CONFIG && kvq_config_engine(&cfg, 64, "q5_0") == KVQ_ERR_CONFIG &&
          kvq_config_engine(NULL, 64, "q8_0") == KVQ_ERR_NULL && kvq_config_engine(&cfg, 64, NULL) == KVQ_ERR_NULL &&
          is_poison(&cfg, sizeof cfg), "unknown names and NULL refused");
    for (p = 0; p < N_PRESETS; p++) {
        kvq_status st;
        CHECK(kvq_config_engine(&cfg, 64, PRESETS[p]) == KVQ_OK && kvq_config_validate(&cfg) == KVQ_OK,
              "%s at D = 64", PRESETS[p]);
        keep = cfg;
        /* a bit width the format does not have                            */
        cfg.key_bits = cfg.key_format == KVQ_FORMAT_INT ? 5 : cfg.key_bits == 8 ? 4 : 8;
        if (kvq__format_lloyd(cfg.key_format)) cfg.key_bits = 8;
        st = kvq_config_validate(&cfg);
        CHECK(st == KVQ_ERR_BITS, "%s: key bits %d: %d", PRESETS[p], cfg.key_bits, (int)st);
        poison(&c, sizeof c);
        CHECK(kvq_cache_init(&c, &cfg) == KVQ_ERR_BITS && is_poison(&c, sizeof c), "%s: init refused, untouched", PRESETS[p]);
        cfg = keep;
        if (kvq_format_group(cfg.value_format)) {             /* fixed G      */
            cfg.value_group = kvq_format_group(cfg.value_format) * 2;
            CHECK(kvq_config_validate(&cfg) == KVQ_ERR_GROUP, "%s: value G %zu refused", PRESETS[p], cfg.value_group);
            cfg = keep;
            cfg.group = 8;
            CHECK(kvq_config_validate(&cfg) == KVQ_ERR_GROUP, "%s: key G 8 refused", PRESETS[p]);
        }
        cfg = keep;
        if (kvq__format_tensor(cfg.key_format)) {
            cfg.key_scale = -0.5f;
            CHECK(kvq_config_validate(&cfg) == KVQ_ERR_RANGE, "%s: negative key scale", PRESETS[p]);
            cfg.key_scale = NAN;
            poison(&c, sizeof c);
            CHECK(kvq_config_validate(&cfg) == KVQ_ERR_RANGE && kvq_cache_init(&c, &cfg) == KVQ_ERR_RANGE &&
                  is_poison(&c, sizeof c), "%s: NaN key scale", PRESETS[p]);
        }
    }
    /* head sizes a format cannot serve                                     */
    CHECK(kvq_config_engine(&cfg, 8, "nvfp4") == KVQ_OK && kvq_config_validate(&cfg) == KVQ_ERR_GROUP,
          "nvfp4 at D = 8: G = 16 does not divide D");
    CHECK(kvq_config_engine(&cfg, 48, "q8_0") == KVQ_OK && kvq_config_validate(&cfg) != KVQ_OK,
          "q8_0 at D = 48 refused (G = 32 does not divide D; rotation needs 2^n)");
    CHECK(kvq_config_engine(&cfg, 96, "turboquant-4bit-nc") == KVQ_OK && kvq_config_validate(&cfg) == KVQ_ERR_SIZE,
          "turboquant at D = 96: the rotation needs a power of two");
    CHECK(kvq_config_engine(&cfg, 2048, "turboquant-3bit-nc") == KVQ_OK && kvq_config_validate(&cfg) == KVQ_ERR_GROUP,
          "turboquant at D = 2048: a format group longer than 1024");
    /* an HF cache takes no format                                         */
    cfg = kvq_config_hf(64, kvq_hf_defaults(4));
    cfg.key_format = KVQ_FORMAT_Q4_0; cfg.group = 32;
    CHECK(kvq_config_validate(&cfg) == KVQ_ERR_CONFIG, "HF with a format: CONFIG");
}

int main(void)
{
    grid_build(&G_E4M3);
    grid_build(&G_E5M2);
    grid_build(&G_E2M1);
    test_decode_all_codes();
    test_encode_sample();
    test_fp8_groups();
    test_nvfp4();
    test_lloyd_table();
    test_lloyd_groups();
    test_ggml();
    test_pack3();
    test_caches();
    test_policies_formats();
    test_bad_configs();
#ifdef TEST_FORMATS_EXHAUSTIVE
    test_encode_exhaustive();
    return TEST_END("test_formats_exhaustive");
#else
    return TEST_END("test_formats");
#endif
}
