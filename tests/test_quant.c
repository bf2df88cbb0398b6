/* tests/test_quant.c - kvq.h sections 3-6 and 10 against independent
   expectations: fp16 conversion, one-group quantization, bit packing, matrix
   layout, bad-input handling and .npy I/O.

   Every expectation here is derived without calling the function under test:
   an IEEE oracle (_Float16) and a double-arithmetic fp16 reference, a
   brute-force re-derivation of Sec. 4's definition written from the header's
   doc comment, a bit-by-bit packer, the doc table of Sec. 6, the error bound
   of Sec. 4, and .npy images assembled byte by byte in this file.

   Fixed seeds throughout; -DKVQ_TEST_QUICK (the sanitizer build) shrinks the
   random loop counts.                                                       */
#define _POSIX_C_SOURCE 200809L   /* mkstemp, close */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "examples/npy.h"
#define TEST_BITS
#include "test.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Under AddressSanitizer a huge malloc aborts by default; kvq must see NULL
   (and report KVQ_ERR_NOMEM) exactly as with the normal allocator.        */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* ------------------------------------------------------------------------ */
/* helpers: RNG (splitmix64), bit casts, poison                             */
/* ------------------------------------------------------------------------ */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s; }
static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rng_u32(void) { return (uint32_t)(rng_u64() >> 32); }
static double rng_unif(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static double rng_range(double a, double b) { return a + (b - a) * rng_unif(); }
static size_t rng_below(size_t n) { return (size_t)(rng_u64() % n); }
static double rng_normal(void)
{
    double u1 = rng_unif(), u2 = rng_unif();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int sz_eq(kvq_sz a, kvq_sz b) { return a.scale == b.scale && a.zero == b.zero; }

/* ======================================================================== */
/* 1. fp16 conversion                                                       */
/* ======================================================================== */
/* Reference decoder straight from the IEEE binary16 definition: value =
   (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024.              */
static double ref_h2d(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp((double)(1024 + m), e - 25);
    return (h & 0x8000) ? -v : v;
}
static int h_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
static int h_is_inf(uint16_t h) { return (h & 0x7FFF) == 0x7C00; }

/* Reference encoder in double arithmetic: find the spacing q of the half grid
   at |f| (fixed 2^-24 below 2^-14), round |f|/q to the nearest integer with
   ties to the even integer (= even half mantissa), then apply IEEE's rule
   "round with unbounded exponent, overflow to Inf if above 65504". All steps
   are exact in double; the rounding is done by hand, not by the FPU mode.  */
static uint16_t ref_f2h(float f)
{
    uint16_t sign = (f2u(f) >> 31) ? 0x8000 : 0;
    double a = fabs((double)f), q, m, r, v;
    int e, E;
    if (f != f) return 0x7FFF;
    if (isinf(f)) return (uint16_t)(sign | 0x7C00);
    if (a == 0.0) return sign;
    (void)frexp(a, &e);
    E = e - 1;                        /* a in [2^E, 2^(E+1))                 */
    if (E < -14) E = -14;             /* subnormal halves: spacing 2^-24    */
    q = ldexp(1.0, E - 10);
    m = a / q;                        /* exact: division by a power of two  */
    r = floor(m);
    if (m - r > 0.5 || (m - r == 0.5 && fmod(r, 2.0) == 1.0)) r += 1.0;
    v = r * q;
    if (v > 65504.0) return (uint16_t)(sign | 0x7C00);
    if (v < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)r);
    (void)frexp(v, &e);
    E = e - 1;
    return (uint16_t)(sign | ((E + 15) << 10) | (int)(v / ldexp(1.0, E - 10) - 1024.0));
}
static float ref_h2f(uint16_t h) { return (float)ref_h2d(h); }
static float ref_round16(float x) { return ref_h2f(ref_f2h(x)); }

/* IEEE oracle: the compiler's _Float16 conversion is round-to-nearest-even. */
#if defined(__FLT16_MAX__)
#define HAVE_F16 1
__extension__ typedef _Float16 test_f16_t;
static uint16_t oracle_f2h(float f)
{
    test_f16_t h = (test_f16_t)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
#else
#define HAVE_F16 0
#endif

/* Accumulates kvq_f32_to_f16 against both references for one float.       */
static long f2h_n, f2h_bad_ref, f2h_bad_oracle, f2h_refs_disagree, f2h_bad_nan;
static uint32_t f2h_first_ref, f2h_first_oracle, f2h_first_refs, f2h_first_nan;
static void f2h_case(uint32_t u)
{
    float f = u2f(u);
    uint16_t h = kvq_f32_to_f16(f);
    f2h_n++;
    if (f != f) {                      /* every NaN -> CUDA's 0x7FFF         */
        if (h != 0x7FFF && f2h_bad_nan++ == 0) f2h_first_nan = u;
        return;
    }
    {
        uint16_t r = ref_f2h(f);
        if (h != r && f2h_bad_ref++ == 0) f2h_first_ref = u;
#if HAVE_F16
        {
            uint16_t o = oracle_f2h(f);
            if (h != o && f2h_bad_oracle++ == 0) f2h_first_oracle = u;
            if (r != o && f2h_refs_disagree++ == 0) f2h_first_refs = u;
        }
#endif
    }
}
static void f2h_report(const char *what)
{
    CHECK(f2h_bad_ref == 0, "f32->f16 %s: %ld of %ld differ from the double reference "
          "(first 0x%08X -> kvq 0x%04X, ref 0x%04X)", what, f2h_bad_ref, f2h_n,
          (unsigned)f2h_first_ref, (unsigned)kvq_f32_to_f16(u2f(f2h_first_ref)),
          (unsigned)ref_f2h(u2f(f2h_first_ref)));
#if HAVE_F16
    CHECK(f2h_bad_oracle == 0, "f32->f16 %s: %ld of %ld differ from _Float16 "
          "(first 0x%08X -> kvq 0x%04X, _Float16 0x%04X)", what, f2h_bad_oracle, f2h_n,
          (unsigned)f2h_first_oracle, (unsigned)kvq_f32_to_f16(u2f(f2h_first_oracle)),
          (unsigned)oracle_f2h(u2f(f2h_first_oracle)));
    CHECK(f2h_refs_disagree == 0, "f32->f16 %s: the test's own references disagree on "
          "%ld values (first 0x%08X)", what, f2h_refs_disagree, (unsigned)f2h_first_refs);
#endif
    CHECK(f2h_bad_nan == 0, "f32->f16 %s: %ld NaN patterns not mapped to 0x7FFF (first 0x%08X)",
          what, f2h_bad_nan, (unsigned)f2h_first_nan);
    f2h_n = f2h_bad_ref = f2h_bad_oracle = f2h_refs_disagree = f2h_bad_nan = 0;
}

/* Every half: f16_to_f32 equals the IEEE decoding, and f32_to_f16 gives the
   same bits back (the round trip must be exact because the value is on the
   half grid); NaN halves decode to NaN and re-encode to 0x7FFF.            */
static void test_f16_exhaustive_halves(void)
{
    long bad_dec = 0, bad_rt = 0, bad_nan = 0, nans = 0;
    uint32_t first_dec = 0, first_rt = 0, first_nan = 0, h;
    for (h = 0; h < 65536u; h++) {
        float f = kvq_f16_to_f32((kvq_f16)h);
        if (h_is_nan((uint16_t)h)) {
            nans++;
            if ((f == f || kvq_f32_to_f16(f) != 0x7FFF) && bad_nan++ == 0) first_nan = h;
            continue;
        }
        if (f2u(f) != f2u(ref_h2f((uint16_t)h)) && bad_dec++ == 0) first_dec = h;
        if (kvq_f32_to_f16(f) != h && bad_rt++ == 0) first_rt = h;
    }
    CHECK(nans == 2 * 1023, "exhaustive: counted %ld NaN halves, expected 2046", nans);
    CHECK(bad_dec == 0, "f16->f32: %ld halves decode wrongly (first 0x%04X -> %.9g, expected %.9g)",
          bad_dec, (unsigned)first_dec, (double)kvq_f16_to_f32((kvq_f16)first_dec),
          ref_h2d((uint16_t)first_dec));
    CHECK(bad_rt == 0, "f16->f32->f16: %ld halves do not round-trip (first 0x%04X -> 0x%04X)",
          bad_rt, (unsigned)first_rt,
          (unsigned)kvq_f32_to_f16(kvq_f16_to_f32((kvq_f16)first_rt)));
    CHECK(bad_nan == 0, "NaN halves: %ld not NaN or not re-encoded to 0x7FFF (first 0x%04X)",
          bad_nan, (unsigned)first_nan);
}

/* Every float whose 13 discarded mantissa bits are 0, 1, just below/at/just
   above the tie, or all ones, for all 2^19 values of sign, exponent and the
   kept 10 mantissa bits: every normal-range tie, both signs, every exponent,
   the overflow boundary and Inf/NaN. Then the subnormal-half range, whose
   ties sit at other bit positions: every midpoint k + 1/2 (times 2^-24) and
   its float neighbours. Then random bit patterns.                          */
static void test_f16_against_oracles(void)
{
    static const uint32_t lows[6] = { 0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF };
    uint32_t hi, k, step = COUNT(1u, 7u);
    long i, n_rand = COUNT(5000000L, 300000L);
    for (hi = 0; hi < (1u << 19); hi += step)
        for (k = 0; k < 6; k++) f2h_case((hi << 13) | lows[k]);
    f2h_report("tie grid (low 13 bits in {0,1,FFF,1000,1001,1FFF})");

    for (k = 0; k <= 1024; k++) {
        float grid = (float)ldexp((double)k, -24);           /* on the grid */
        float mid = (float)ldexp((double)k + 0.5, -24);      /* exact tie   */
        float pts[6];
        int j;
        pts[0] = grid; pts[1] = mid;
        pts[2] = nextafterf(mid, 0.0f); pts[3] = nextafterf(mid, 1.0f);
        pts[4] = nextafterf(grid, 0.0f); pts[5] = nextafterf(grid, 1.0f);
        for (j = 0; j < 6; j++) {
            f2h_case(f2u(pts[j]));
            f2h_case(f2u(pts[j]) | 0x80000000u);
        }
    }
    f2h_report("subnormal-half ties");

    rng_seed(0xF16F16F16ull);
    for (i = 0; i < n_rand; i++) f2h_case(rng_u32());
    f2h_report("random bit patterns");

    /* NaN: every sign/quiet-bit combination with assorted payloads          */
    for (k = 0; k < 4096; k++) {
        uint32_t payload = (rng_u32() & 0x7FFFFFu) | 1u;
        f2h_case(0x7F800000u | payload);
        f2h_case(0xFF800000u | payload);
        f2h_case(0x7F800000u | (k << 11) | 1u);
    }
    f2h_case(0x7FC00000u); f2h_case(0xFFFFFFFFu); f2h_case(0x7F800001u);
    f2h_report("NaN payloads");
}

/* Named hard cases; each expected value follows from the IEEE rules stated
   in the comment (not from running kvq).                                   */
static void test_f16_named(void)
{
    struct { float f; uint16_t h; const char *why; } c[] = {
        { 65504.0f, 0x7BFF, "largest half stays finite" },
        { 65519.99f, 0x7BFF, "below the 65504/65536 midpoint rounds down" },
        { 65520.0f, 0x7C00, "midpoint 65520: ties to even = 2^16 -> Inf" },
        { -65520.0f, 0xFC00, "negative overflow -> -Inf" },
        { 1e10f, 0x7C00, "far overflow -> Inf" },
        { 3.4028235e38f, 0x7C00, "FLT_MAX -> Inf" },
        { INFINITY, 0x7C00, "+Inf" },
        { -INFINITY, 0xFC00, "-Inf" },
        { 5.9604645e-8f /* 2^-24 */, 0x0001, "smallest subnormal half" },
        { 2.9802322e-8f /* 2^-25 */, 0x0000, "2^-25 is a tie between 0 and 2^-24: even = 0" },
        { -2.9802322e-8f, 0x8000, "-2^-25 -> -0" },
        { 4.4703484e-8f /* 1.5*2^-25 */, 0x0001, "above the tie rounds up to 2^-24" },
        { 6.1035156e-5f /* 2^-14 */, 0x0400, "smallest normal half" },
        { 6.1005354e-5f /* 2^-14 - 2^-25 */, 0x0400,
          "tie between 0x3FF (odd) and 0x400 (even) -> 0x400" },
        { -0.0f, 0x8000, "-0 keeps its sign" },
        { 0.0f, 0x0000, "+0" },
        { 1.0f, 0x3C00, "1.0" },
        { 1.00048828125f /* 1 + 2^-11 */, 0x3C00, "tie at 1 + half-ulp -> even 0x3C00" },
        { 1.00146484375f /* 1 + 3*2^-11 */, 0x3C02, "tie at 1 + 3 half-ulps -> even 0x3C02" },
        { 2049.0f, 0x6800, "tie 2049 between 2048 (even) and 2050 -> 2048" },
        { 2051.0f, 0x6802, "tie 2051 between 2050 (odd) and 2052 (even) -> 2052" },
        { 32752.0f, 0x77FF, "KVQ_MAX_ABS_INPUT = 2^15 - 16 is exact" },
    };
    size_t i;
    for (i = 0; i < sizeof c / sizeof c[0]; i++)
        CHECK(kvq_f32_to_f16(c[i].f) == c[i].h, "f32_to_f16(%.9g) = 0x%04X, expected 0x%04X (%s)",
              (double)c[i].f, (unsigned)kvq_f32_to_f16(c[i].f), (unsigned)c[i].h, c[i].why);
    CHECK(kvq_f32_to_f16(NAN) == 0x7FFF, "NaN -> 0x%04X, expected 0x7FFF",
          (unsigned)kvq_f32_to_f16(NAN));
    CHECK(kvq_f32_to_f16(-NAN) == 0x7FFF, "-NaN -> 0x%04X, expected 0x7FFF",
          (unsigned)kvq_f32_to_f16(-NAN));
    CHECK(f2u(kvq_f16_to_f32(0x8000)) == 0x80000000u, "f16 0x8000 must decode to -0.0f");
    CHECK(isnan(kvq_f16_to_f32(0x7FFF)) && isnan(kvq_f16_to_f32(0xFE01)),
          "NaN halves must decode to NaN");
    CHECK(kvq_f16_to_f32(0x7C00) == INFINITY && kvq_f16_to_f32(0xFC00) == -INFINITY,
          "Inf halves must decode to +-Inf");
}

/* ======================================================================== */
/* 2. one group                                                             */
/* ======================================================================== */
/* Round half to even, by hand (not rintf): floor, then compare the exact
   fraction with 1/2 and break ties toward the even integer. Like IEEE
   roundToIntegralTiesToEven (C99 rintf, CUDA rintf), a result of zero keeps
   the sign of the input: rne(-0.3) = -0.                                  */
static float ref_rne(float v)
{
    float fl = floorf(v), d = v - fl;          /* v - floor(v) is exact      */
    if (d > 0.5f || (d == 0.5f && fabsf(fmodf(fl, 2.0f)) == 1.0f)) fl += 1.0f;
    if (fl == 0.0f) fl = signbit(v) ? -0.0f : 0.0f;
    return fl;
}
static float ref_clamp(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* Sec. 4's definition, re-derived from the doc comment with this file's own
   fp16 and rounding. Only the statuses a valid call can produce (OK,
   NONFINITE, RANGE) are modelled; argument errors are tested in Sec. 5.
   min/max: a strict-< scan, so the first of equal values wins (this only
   matters for +0 versus -0; see test_group_permutation).                   */
static kvq_status ref_quantize_group(const float *x, size_t n, size_t stride, int bits,
                                     kvq_zero_mode mode, uint8_t *codes, kvq_sz *sz)
{
    float N = (float)((1 << bits) - 1), mn, mx, s, zp;
    uint16_t s16, z16;
    size_t i;
    for (i = 0; i < n; i++)
        if (!isfinite(x[i * stride])) return KVQ_ERR_NONFINITE;
    mn = mx = x[0];
    for (i = 1; i < n; i++) {
        float v = x[i * stride];
        if (v < mn) mn = v;
        if (v > mx) mx = v;
    }
    s16 = ref_f2h((mx - mn) / N);              /* fp32 subtract and divide   */
    if (mode == KVQ_ZERO_FLOAT) {
        z16 = ref_f2h(mn);
        if (h_is_inf(s16) || h_is_inf(z16)) return KVQ_ERR_RANGE;
    } else {
        /* Doc: RANGE when "a scale or zero overflows fp16". In int mode the
           stored zero is the integer zp (|zp| <= 2048, never overflows), so
           only the scale can: the general s, or f16(|mn|) of the
           constant-group rule.                                             */
        if (h_is_inf(s16)) return KVQ_ERR_RANGE;
        if (ref_h2f(s16) == 0.0f) {            /* constant-group rule        */
            s16 = ref_f2h(fabsf(mn));
            z16 = (mn < 0.0f) ? 0x3C00 /* 1.0 */ : 0x0000;
            if (h_is_inf(s16)) return KVQ_ERR_RANGE;
        } else {
            zp = ref_clamp(ref_rne(-mn / ref_h2f(s16)), -2048.0f, 2048.0f);
            z16 = ref_f2h(zp + 0.0f);          /* doc: zp = 0 stored as +0   */
        }
    }
    s = ref_h2f(s16);
    for (i = 0; i < n; i++) {
        float x_i = x[i * stride], v;
        if (s == 0.0f) { codes[i] = 0; continue; }   /* nothing to divide by */
        if (mode == KVQ_ZERO_FLOAT)
            v = ref_rne((x_i - ref_h2f(z16)) / s);
        else                          /* doc: round x / s, THEN add zp      */
            v = ref_rne(x_i / s) + ref_h2f(z16);
        codes[i] = (uint8_t)ref_clamp(v, 0.0f, N);
    }
    sz->scale = s16;
    sz->zero = z16;
    return KVQ_OK;
}

/* Per (bits, mode) tallies of the random comparison, with the first failure
   of each kind described in words.                                         */
enum { F_STATUS, F_SZ, F_CODE, F_AFFINE, F_BOUND, F_BOUND_SUB, F_FMA, F_KINDS };
typedef struct gstats {
    long groups, ok, rangeerr, status_bad, sz_bad, code_bad, touched_on_error, overrun,
         code_over_n, affine_bad, bound_bad, bound_sub_bad, fma_bad;
    double worst_ratio;      /* max |x - x'| / bound over all elements       */
    char first[F_KINDS][300];
} gstats;
static void note(gstats *S, int kind, const char *fmt, ...)
{
    va_list ap;
    if (S->first[kind][0]) return;
    va_start(ap, fmt);
    vsnprintf(S->first[kind], sizeof S->first[kind], fmt, ap);
    va_end(ap);
}
static int f32_subnormal(double v) { return v != 0.0 && fabs(v) < 1.1754943508222875e-38; }

/* Sec. 4's error bound, in double, for every element; also the FMA-proof
   claim for every code 0..N of the stored parameters (c*a exact, so
   fmaf(c, a, b) == c*a + b), and kvq_sz_affine against the definition.    */
static void group_properties(const float *x, size_t n, size_t stride, int bits,
                             kvq_zero_mode mode, const uint8_t *codes, kvq_sz sz,
                             gstats *S, double *max_err_over_s)
{
    int N = (1 << bits) - 1, c;
    float a, b, sx, mnf, mxf;
    int tiny;
    double s = ref_h2d(sz.scale), z = ref_h2d(sz.zero), e_s, mn, mx;
    size_t i;
    kvq_sz_affine(sz, mode, &a, &b);
    if ((double)a != s || (double)b != (mode == KVQ_ZERO_FLOAT ? z : -z * s)) {
        S->affine_bad++;
        note(S, F_AFFINE, "kvq_sz_affine(scale 0x%04X, zero 0x%04X) = (%.9g, %.9g)",
             (unsigned)sz.scale, (unsigned)sz.zero, (double)a, (double)b);
    }
    mnf = mxf = x[0];
    for (i = 1; i < n; i++) {
        if (x[i * stride] < mnf) mnf = x[i * stride];
        if (x[i * stride] > mxf) mxf = x[i * stride];
    }
    mn = mnf; mx = mxf;
    sx = (mxf - mnf) / (float)N;                /* s_exact: fp32, pre-fp16   */
    e_s = fabs(s - (double)sx);
    /* Groups touching fp32 subnormals are tallied apart: fp32 arithmetic
       there has an absolute, not relative, error, which only eps's 2^-140
       term covers.                                                          */
    tiny = f32_subnormal(mn) || f32_subnormal(mx) || f32_subnormal(sx);
    for (i = 0; i < n; i++) tiny = tiny || f32_subnormal(x[i * stride]);
    for (i = 0; i < n; i++) {
        double xi = x[i * stride], xr, err, bound, eps, zero_term;
        if (codes[i] > N) { S->code_over_n++; continue; }
        xr = (double)((float)codes[i] * a + b);
        err = fabs(xi - xr);
        if (mode == KVQ_ZERO_FLOAT) {
            eps = ldexp(fabs(xi) + fabs(z) + N * s, -21) + ldexp(1.0, -140);
            zero_term = fabs(z - mn);           /* e_z                        */
        } else {
            eps = ldexp(fabs(xi) + fabs(z * s) + N * s, -21) + ldexp(1.0, -140);
            /* s*|zp + mn/s| written as |zp*s + mn|: equal for s > 0, and the
               value that makes sense when the stored s is 0 (|mn| < 2^-25). */
            zero_term = fabs(z * s + mn);
        }
        bound = s / 2 + zero_term + N * e_s + eps;
        if (err > bound) {
            if (tiny) S->bound_sub_bad++; else S->bound_bad++;
            note(S, tiny ? F_BOUND_SUB : F_BOUND, "x=%.9g x'=%.9g err=%.3g > bound %.3g (s=%.9g z=%.9g mn=%.9g "
                 "mx=%.9g n=%zu)", xi, xr, err, bound, s, z, mn, mx, n);
        }
        if (bound > 0 && err / bound > S->worst_ratio) S->worst_ratio = err / bound;
        if (max_err_over_s && s > 0 && err / s > *max_err_over_s) *max_err_over_s = err / s;
    }
    for (c = 0; c <= N; c++) {
        volatile float prod = (float)c * a;     /* volatile: no contraction  */
        float sep = prod + b, fused = fmaf((float)c, a, b);
        if (f2u(sep) != f2u(fused) || (double)prod != (double)c * (double)a) {
            S->fma_bad++;
            note(S, F_FMA, "FMA: c=%d a=%.9g b=%.9g: c*a+b=%.9g fma=%.9g", c, (double)a,
                 (double)b, (double)sep, (double)fused);
        }
    }
    if (mode == KVQ_ZERO_INT && (double)b != -z * s) S->fma_bad++;   /* -zp*s exact */
}

#define MAXN 300
static void group_compare(const float *x, size_t n, size_t stride, int bits,
                          kvq_zero_mode mode, int kind, gstats *S)
{
    uint8_t ci[MAXN + 16], cr[MAXN];
    kvq_sz si_sz, sr_sz;
    kvq_status si, sr;
    size_t i;
    poison(ci, sizeof ci);
    poison(&si_sz, sizeof si_sz);
    si = kvq_quantize_group(x, n, stride, bits, mode, ci, &si_sz);
    sr = ref_quantize_group(x, n, stride, bits, mode, cr, &sr_sz);
    S->groups++;
    if (si != sr) {
        S->status_bad++;
        note(S, F_STATUS, "status %d, reference %d (kind %d, n %zu, stride %zu, x[0] %.9g)",
             (int)si, (int)sr, kind, n, stride, (double)x[0]);
        return;
    }
    if (si != KVQ_OK) {
        S->rangeerr++;
        if (!is_poison(ci, sizeof ci) || !is_poison(&si_sz, sizeof si_sz)) S->touched_on_error++;
        return;
    }
    S->ok++;
    if (!sz_eq(si_sz, sr_sz)) {
        S->sz_bad++;
        note(S, F_SZ, "sz (0x%04X,0x%04X), reference (0x%04X,0x%04X) (kind %d, n %zu)",
             (unsigned)si_sz.scale, (unsigned)si_sz.zero, (unsigned)sr_sz.scale,
             (unsigned)sr_sz.zero, kind, n);
    }
    for (i = 0; i < n; i++)
        if (ci[i] != cr[i]) {
            S->code_bad++;
            note(S, F_CODE, "code[%zu] of x=%.9g is %u, reference %u (kind %d, n %zu)", i,
                 (double)x[i * stride], (unsigned)ci[i], (unsigned)cr[i], kind, n);
            break;
        }
    if (!is_poison(ci + n, sizeof ci - n)) S->overrun++;
    group_properties(x, n, stride, bits, mode, ci, si_sz, S, NULL);
}

enum { K_UNIFORM, K_NORMAL, K_OUTLIER, K_CONST, K_TWO, K_F16EXACT, K_TINYRANGE,
       K_SUBNORMAL, K_NEG, K_POS, K_MIXED, K_NEARLIMIT, K_F32SUB, K_KINDS };

static float random_f16_value(int max_exp_field)   /* finite half, |x| < 2^(e-14) */
{
    uint16_t h = (uint16_t)((rng_u32() & 0x83FFu) | ((rng_below((size_t)max_exp_field + 1)) << 10));
    return ref_h2f(h);
}

/* Fills x[0], x[stride], ... with n values of the given kind; every gap
   between them is NaN, so an implementation that reads a wrong element
   reports NONFINITE and the comparison fails.                             */
static void fill_group(float *buf, size_t n, size_t stride, int kind)
{
    size_t i, len = (n - 1) * stride + 1;
    double scale = pow(10.0, rng_range(-3.0, 3.0)), p = 0, q = 0;
    static const double offs[] = { 1000.0, -1000.0, 30000.0, -2.5, 0.1, 12345.678, -7.0 };
    static const double widths[] = { 1e-4, 1e-2, 1e-6, 3e-3 };
    static const double limits[] = { 32752.0, 65504.0, 65519.0, 65520.0, 70000.0, 1e30 };
    for (i = 0; i < len; i++) buf[i] = NAN;
    switch (kind) {
    case K_NORMAL:    p = rng_normal() * scale; q = scale * rng_unif(); break;
    case K_OUTLIER:   scale = pow(10.0, rng_range(-2.0, 1.0)); break;
    case K_CONST:     p = (rng_u32() & 1) ? rng_normal() * scale : random_f16_value(29); break;
    case K_TWO:       p = rng_normal() * scale; q = rng_normal() * scale; break;
    case K_TINYRANGE: p = offs[rng_below(7)]; q = widths[rng_below(4)]; break;
    case K_NEARLIMIT: q = limits[rng_below(6)]; break;
    default: break;
    }
    for (i = 0; i < n; i++) {
        double v;
        switch (kind) {
        case K_UNIFORM:   v = rng_range(-scale, scale) + scale * 0.3; break;
        case K_NORMAL:    v = p + q * rng_normal(); break;
        case K_OUTLIER:   v = scale * rng_normal(); break;
        case K_CONST:     v = p; break;
        case K_TWO:       v = (rng_u32() & 1) ? p : q; break;
        case K_F16EXACT:  v = random_f16_value(29); break;
        case K_TINYRANGE: v = p + rng_range(-q, q); break;
        case K_SUBNORMAL: v = rng_range(-1.0, 1.0) * pow(10.0, rng_range(-9.0, -5.0)); break;
        case K_NEG:       v = -scale * rng_range(1.0, 3.0); break;
        case K_POS:       v = scale * rng_range(1.0, 3.0); break;
        case K_MIXED:     v = rng_normal() / (rng_unif() + 0.01); break;
        case K_NEARLIMIT: v = rng_range(-1.0, 1.0) * q; break;
        default:          v = rng_range(-1.0, 1.0) * 1e-39; break;  /* f32 subnormal */
        }
        buf[i * stride] = (float)v;
    }
    if (kind == K_OUTLIER) {
        size_t j = rng_below(n);
        buf[j * stride] = (float)((rng_u32() & 1 ? 1.0 : -1.0) * rng_range(1e3, 3e4));
    }
}

static const int BITS[4] = { 1, 2, 4, 8 };
static const char *MODE_NAME[2] = { "float", "int" };

/* Random groups (random n 1..300, stride 1..5, 13 distributions) compared
   code-for-code and sz-for-sz with the reference, plus the error bound, the
   code range, FMA-proofness and "errors write nothing" on every group.    */
static void test_group_vs_reference(void)
{
    static float buf[(MAXN - 1) * 5 + 1];
    static gstats S[4][2];
    long it, iters = COUNT(20000L, 1500L);
    int bi, m;
    rng_seed(0x5EED0001ull);
    memset(S, 0, sizeof S);
    for (it = 0; it < iters; it++) {
        size_t n = 1 + rng_below(MAXN), stride = 1 + rng_below(5);
        int kind = (int)rng_below(K_KINDS);
        fill_group(buf, n, stride, kind);
        for (bi = 0; bi < 4; bi++)
            for (m = 0; m < 2; m++)
                group_compare(buf, n, stride, BITS[bi], (kvq_zero_mode)m, kind, &S[bi][m]);
    }
    for (bi = 0; bi < 4; bi++)
        for (m = 0; m < 2; m++) {
            gstats *s = &S[bi][m];
            int B = BITS[bi];
            const char *md = MODE_NAME[m];
            CHECK(s->ok > s->groups / 2 && s->rangeerr > 0,
                  "B=%d %s: degenerate sample (%ld ok, %ld range errors of %ld)", B, md,
                  s->ok, s->rangeerr, s->groups);
            CHECK(s->status_bad == 0, "B=%d %s: status differs from the reference in %ld of %ld "
                  "groups; first: %s", B, md, s->status_bad, s->groups, s->first[F_STATUS]);
            CHECK(s->sz_bad == 0, "B=%d %s: scale/zero differ in %ld groups; first: %s",
                  B, md, s->sz_bad, s->first[F_SZ]);
            CHECK(s->code_bad == 0, "B=%d %s: codes differ in %ld groups; first: %s",
                  B, md, s->code_bad, s->first[F_CODE]);
            CHECK(s->touched_on_error == 0, "B=%d %s: %ld failing calls wrote their outputs",
                  B, md, s->touched_on_error);
            CHECK(s->overrun == 0, "B=%d %s: %ld calls wrote past codes[n-1]", B, md, s->overrun);
            CHECK(s->code_over_n == 0, "B=%d %s: %ld codes above 2^B-1", B, md, s->code_over_n);
            CHECK(s->affine_bad == 0, "B=%d %s: kvq_sz_affine wrong %ld times; first: %s",
                  B, md, s->affine_bad, s->first[F_AFFINE]);
            CHECK(s->bound_bad == 0, "B=%d %s: %ld elements break the Sec. 4 error bound; "
                  "first: %s", B, md, s->bound_bad, s->first[F_BOUND]);
            CHECK(s->bound_sub_bad == 0, "B=%d %s: %ld elements of groups with fp32-subnormal "
                  "values break the Sec. 4 error bound (eps's absolute 2^-140 term); "
                  "first: %s", B, md, s->bound_sub_bad, s->first[F_BOUND_SUB]);
            CHECK(s->fma_bad == 0, "B=%d %s: %ld (group, code) pairs not FMA-proof; first: %s",
                  B, md, s->fma_bad, s->first[F_FMA]);
        }
}

/* The bound is not vacuous: on uniform data the worst rounding error must
   come close to its s/2 term (>= 0.4 s), so a quantizer returning garbage or
   rounding coarser than one step is caught by the bound check above, and a
   quantizer doing far better than s/2 would be suspicious too.            */
static void test_group_bound_tight(void)
{
    static float x[128];
    uint8_t codes[128];
    int m;
    rng_seed(0x5EED0002ull);
    for (m = 0; m < 2; m++) {
        double max_ratio = 0;
        gstats S;
        long g, groups = COUNT(2000L, 200L);
        memset(&S, 0, sizeof S);
        for (g = 0; g < groups; g++) {
            kvq_sz sz;
            size_t i;
            for (i = 0; i < 128; i++) x[i] = (float)rng_range(-1.0, 1.0);
            if (kvq_quantize_group(x, 128, 1, 2, (kvq_zero_mode)m, codes, &sz) != KVQ_OK) {
                S.status_bad++;
                continue;
            }
            group_properties(x, 128, 1, 2, (kvq_zero_mode)m, codes, sz, &S, &max_ratio);
        }
        CHECK(S.status_bad == 0 && S.bound_bad == 0, "uniform B=2 %s: %ld failed, %ld bound "
              "violations (%s)", MODE_NAME[m], S.status_bad, S.bound_bad, S.first[F_BOUND]);
        CHECK(max_ratio >= 0.4 && max_ratio <= (m == 0 ? 0.5 + 1e-3 : 1.0 + 1e-3),
              "uniform B=2 %s: worst error %.4f steps, expected in [0.4, %s]", MODE_NAME[m],
              max_ratio, m == 0 ? "0.5" : "1");
    }
}

/* A constant group reconstructs to f16(value) in both modes (float: s = 0,
   x' = z; int: the constant-group rule), and to the value itself when it is
   already an fp16 value.                                                   */
static void test_group_constant(void)
{
    static const float vals[] = { 0.0f, -0.0f, 1.0f, -1.0f, 0.1f, -0.1f, 1e-3f, -3.3e-6f,
                                  1e-7f, -1e-7f, 2.9802322e-8f, 1e-9f, -1e-9f,
                                  5.9604645e-8f, -5.9604645e-8f, 8.940697e-8f, 32752.0f,
                                  -32752.0f, 65504.0f, -65504.0f, 1000.3f, -12345.678f };
    static const size_t ns[] = { 1, 7, 64 };
    float x[64];
    uint8_t codes[64];
    size_t vi, ni, i;
    int bi, m;
    for (vi = 0; vi < sizeof vals / sizeof vals[0]; vi++)
        for (ni = 0; ni < 3; ni++)
            for (bi = 0; bi < 4; bi++)
                for (m = 0; m < 2; m++) {
                    float v = vals[vi], want = ref_round16(v), a, b;
                    kvq_sz sz;
                    kvq_status st;
                    long bad = 0;
                    for (i = 0; i < ns[ni]; i++) x[i] = v;
                    st = kvq_quantize_group(x, ns[ni], 1, BITS[bi], (kvq_zero_mode)m, codes, &sz);
                    CHECK(st == KVQ_OK, "constant %.9g n=%zu B=%d %s: status %d", (double)v,
                          ns[ni], BITS[bi], MODE_NAME[m], (int)st);
                    if (st != KVQ_OK) continue;
                    kvq_sz_affine(sz, (kvq_zero_mode)m, &a, &b);
                    for (i = 0; i < ns[ni]; i++) {
                        float r = (float)codes[i] * a + b;
                        if (r != want || (want == v && r != v)) bad++;
                    }
                    CHECK(bad == 0, "constant %.9g n=%zu B=%d %s: reconstructs to %.9g, "
                          "expected f16(v) = %.9g", (double)v, ns[ni], BITS[bi], MODE_NAME[m],
                          (double)((float)codes[0] * a + b), (double)want);
                }
}

/* fp16-exact data whose step s is a normal half: in float mode z = min
   exactly, so the min codes to 0, and s is within 2^-11 relative of the
   exact step, so the max codes to N. Codes never exceed N.                 */
static void test_group_endpoints(void)
{
    float x[200];
    uint8_t codes[200];
    long bad_min = 0, bad_max = 0, bad_n = 0, tried = 0, it, iters = COUNT(4000L, 400L);
    rng_seed(0x5EED0003ull);
    for (it = 0; it < iters; it++) {
        int B = BITS[rng_below(4)], N = (1 << B) - 1;
        size_t n = 2 + rng_below(199), i, imin = 0, imax = 1;
        float lo, hi, step;
        kvq_sz sz;
        do {
            lo = random_f16_value(28);
            hi = random_f16_value(28);
            if (lo > hi) { float t = lo; lo = hi; hi = t; }
            step = (hi - lo) / (float)N;
        } while (!(step >= 6.103515625e-05f));     /* s must be a normal half */
        for (i = 0; i < n; i++)      /* halves in [lo, hi]: rounding keeps them there */
            x[i] = ref_round16(lo + (hi - lo) * (float)rng_unif());
        x[imin = rng_below(n)] = lo;
        do imax = rng_below(n); while (imax == imin);
        x[imax] = hi;
        if (kvq_quantize_group(x, n, 1, B, KVQ_ZERO_FLOAT, codes, &sz) != KVQ_OK) {
            bad_n++;
            continue;
        }
        tried++;
        if (codes[imin] != 0) bad_min++;
        if (codes[imax] != N) bad_max++;
        for (i = 0; i < n; i++)
            if (codes[i] > N) bad_n++;
    }
    CHECK(tried > iters / 2, "endpoints: only %ld of %ld groups quantized", tried, iters);
    CHECK(bad_min == 0, "endpoints: min not coded 0 in %ld groups", bad_min);
    CHECK(bad_max == 0, "endpoints: max not coded N in %ld groups", bad_max);
    CHECK(bad_n == 0, "endpoints: %ld failures or codes above N", bad_n);
}

/* Doc: "mn = min x_i (exact, any order)", and the GPU must reproduce the
   stored bits. So permuting a group must permute its codes and leave its
   (scale, zero) bits unchanged. Random groups, then +0 / -0 explicitly.   */
static void test_group_permutation(void)
{
    float x[MAXN], y[MAXN];
    uint8_t cx[MAXN], cy[MAXN];
    size_t perm[MAXN];
    long bad = 0, it, iters = COUNT(3000L, 300L);
    char first[200] = "";
    int bi, m;
    rng_seed(0x5EED0004ull);
    for (it = 0; it < iters; it++) {
        size_t n = 1 + rng_below(MAXN), i;
        fill_group(x, n, 1, (int)rng_below(K_KINDS));
        for (i = 0; i < n; i++) perm[i] = i;
        for (i = n; i > 1; i--) {
            size_t j = rng_below(i), t = perm[i - 1];
            perm[i - 1] = perm[j]; perm[j] = t;
        }
        for (i = 0; i < n; i++) y[i] = x[perm[i]];
        for (bi = 0; bi < 4; bi++)
            for (m = 0; m < 2; m++) {
                kvq_sz sx, sy;
                kvq_status a = kvq_quantize_group(x, n, 1, BITS[bi], (kvq_zero_mode)m, cx, &sx);
                kvq_status b = kvq_quantize_group(y, n, 1, BITS[bi], (kvq_zero_mode)m, cy, &sy);
                int ok = a == b;
                if (ok && a == KVQ_OK) {
                    ok = sz_eq(sx, sy);
                    for (i = 0; ok && i < n; i++) ok = cy[i] == cx[perm[i]];
                }
                if (!ok && bad++ == 0)
                    snprintf(first, sizeof first, "n %zu B %d %s", n, BITS[bi], MODE_NAME[m]);
            }
    }
    CHECK(bad == 0, "permuting a group changed its result %ld times (first: %s)", bad, first);
    for (m = 0; m < 2; m++) {
        float p[3] = { 0.0f, -0.0f, 1.0f }, q[3] = { -0.0f, 0.0f, 1.0f };
        kvq_sz sp, sq;
        kvq_status a = kvq_quantize_group(p, 3, 1, 2, (kvq_zero_mode)m, cx, &sp);
        kvq_status b = kvq_quantize_group(q, 3, 1, 2, (kvq_zero_mode)m, cy, &sq);
        CHECK(a == KVQ_OK && b == KVQ_OK && sz_eq(sp, sq),
              "%s mode: {+0,-0,1} gives (0x%04X,0x%04X) but {-0,+0,1} gives (0x%04X,0x%04X): "
              "stored zero depends on element order", MODE_NAME[m], (unsigned)sp.scale,
              (unsigned)sp.zero, (unsigned)sq.scale, (unsigned)sq.zero);
    }
}

/* Spec conformance at the fp16 limit, from the doc alone: |x| <= 65504 is
   always accepted at B >= 2 with max - min <= 65504*N; {-60000, 60000} at
   B = 1 needs s = 120000 (RANGE); int mode stores zp, not min, so a min
   below -65504 with a representable scale is not a "zero that overflows".  */
static void test_group_limits(void)
{
    float x[2];
    uint8_t c[2];
    kvq_sz sz;
    int m;
    for (m = 0; m < 2; m++) {
        x[0] = -65504.0f; x[1] = 65504.0f;
        CHECK(kvq_quantize_group(x, 2, 1, 2, (kvq_zero_mode)m, c, &sz) == KVQ_OK,
              "%s: {-65504, 65504} at B=2 (s = 43669) must quantize", MODE_NAME[m]);
        CHECK(kvq_quantize_group(x, 2, 1, 1, (kvq_zero_mode)m, c, &sz) == KVQ_ERR_RANGE,
              "%s: {-65504, 65504} at B=1 (s = 131008) must be KVQ_ERR_RANGE", MODE_NAME[m]);
    }
    x[0] = -65520.0f; x[1] = 0.0f;
    CHECK(kvq_quantize_group(x, 2, 1, 2, KVQ_ZERO_FLOAT, c, &sz) == KVQ_ERR_RANGE,
          "float: min -65520 (z = f16(min) = -Inf) must be KVQ_ERR_RANGE");
    CHECK(kvq_quantize_group(x, 2, 1, 2, KVQ_ZERO_INT, c, &sz) == KVQ_OK,
          "int: {-65520, 0} at B=2 has s = f16(21840) and zp = 3, both fit fp16, so the doc "
          "(\"a scale or zero that overflows fp16\") says it quantizes; got status %d",
          (int)kvq_quantize_group(x, 2, 1, 2, KVQ_ZERO_INT, c, &sz));
}

/* Hugging Face's two rules (kvq.h Sec. 4) on groups worked out by hand,
   every scale exactly 1 so each code is read off the values: today's
   quanto (>= 0.2.3: code = clamp(round((x - min) / s), 0, N)) is
   KVQ_ZERO_FLOAT; the HF post and quanto <= 0.2.2 (zp = round(-min / s),
   code = clamp(round(x / s) + zp, 0, N)) is KVQ_ZERO_INT. round is half
   to even (torch.round). Each group runs through kvq_quantize_group and
   through every matrix path (per-token groups 16 side by side, a single
   per-token group of 16, fewer than 16 groups, per-channel 16 channels at
   a time and one at a time); the dequantized values c s + z and (c - zp) s
   are checked too.                                                        */
typedef struct hf_case {
    const char *what;
    int bits;
    float x[8];
    uint16_t scale, zero_f, zero_i;   /* stored fp16: s, z = min, zp       */
    uint8_t cf[8], ci[8];             /* codes: float zero, integer zero   */
    float vf[8], vi[8];               /* values: c s + z, (c - zp) s       */
} hf_case;

static const hf_case HF_CASES[] = {
    /* min 0: z = zp = 0, so both rules are round(x); .5, 1.5, 2.5 go to the
       even code 0, 2, 2                                                   */
    { "min 0, ties", 2, { 0, 3, 0.5f, 1.5f, 2.5f, 1, 2, 0.25f },
      0x3C00, 0x0000, 0x0000,
      { 0, 3, 0, 2, 2, 1, 2, 0 }, { 0, 3, 0, 2, 2, 1, 2, 0 },
      { 0, 3, 0, 2, 2, 1, 2, 0 }, { 0, 3, 0, 2, 2, 1, 2, 0 } },
    /* min -1, max 2: the grids coincide ({-1, 0, 1, 2}, zp = 1), but the
       ties do not: float rounds x + 1 (-0.5 -> 0.5 -> 0, 0.5 -> 1.5 -> 2,
       1.5 -> 2.5 -> 2), the post rounds x and adds 1 (-0.5 -> -0 -> 1,
       0.5 -> 0 -> 1, 1.5 -> 2 -> 3)                                       */
    { "odd zero point, ties", 2, { -1, 2, -0.5f, 0.5f, 1.5f, 0, 0.25f, 1 },
      0x3C00, 0xBC00, 0x3C00,
      { 0, 3, 0, 2, 2, 1, 1, 2 }, { 0, 3, 1, 1, 3, 1, 1, 2 },
      { -1, 2, -1, 1, 1, 0, 0, 1 }, { -1, 2, 0, 0, 2, 0, 0, 1 } },
    /* symmetric: float's grid {-1.5, -0.5, 0.5, 1.5} has no 0 (0 + 1.5 is
       a tie -> 2 -> 0.5); the post's zp = round(1.5) = 2 gives {-2, -1, 0,
       1}: 0 and the small values exact, the ends half a step off
       (-1.5 -> -2, 1.5 -> 2 + 2 = 4 -> 3 -> 1)                            */
    { "symmetric, 0 on the integer grid", 2,
      { -1.5f, 1.5f, 0, 0.125f, -0.125f, 0.75f, -0.75f, 1 },
      0x3C00, 0xBE00, 0x4000,
      { 0, 3, 2, 2, 1, 2, 1, 2 }, { 0, 3, 2, 2, 2, 3, 1, 3 },
      { -1.5f, 1.5f, 0.5f, 0.5f, -0.5f, 0.5f, -0.5f, 0.5f }, { -2, 1, 0, 0, 0, 1, -1, 1 } },
    /* all positive: zp = round(-1) = -1; 2.5 -> 2 - 1 = 1 and 3.5 -> 4 - 1
       = 3 against float's 1.5 -> 2 and 2.5 -> 2                           */
    { "positive, zp = -1", 2, { 1, 4, 2.5f, 3.5f, 1.5f, 3, 2, 2.75f },
      0x3C00, 0x3C00, 0xBC00,
      { 0, 3, 2, 2, 0, 2, 1, 2 }, { 0, 3, 1, 3, 1, 2, 1, 2 },
      { 1, 4, 3, 3, 1, 3, 2, 3 }, { 1, 4, 2, 4, 2, 3, 2, 3 } },
    /* 4 bits, min -3, max 12, zp = 3: x + 3 = 3.5 -> 4, 2.5 -> 2, 4.5 -> 4,
       7.5 -> 8 against round(x) + 3 = 0 + 3, -0 + 3, 2 + 3, 4 + 3          */
    { "4-bit, zp = 3, ties", 4, { -3, 12, 0.5f, -0.5f, 1.5f, 4.5f, 0, 7.25f },
      0x3C00, 0xC200, 0x4200,
      { 0, 15, 4, 2, 4, 8, 3, 10 }, { 0, 15, 3, 3, 5, 7, 3, 10 },
      { -3, 12, 1, -1, 1, 5, 0, 7 }, { -3, 12, 0, 0, 2, 4, 0, 7 } },
};
#define N_HF_CASES (sizeof HF_CASES / sizeof HF_CASES[0])

/* One matrix path: X (T, D) holds hand groups; group k of the layout is
   HF_CASES[cs[k]] repeated rep times (G = 8 rep). Checks every stored
   (s, zero) and every dequantized value.                                  */
static void hf_matrix_path(const char *path, size_t T, size_t D, size_t rep, kvq_axis axis,
                           const size_t *cs, size_t n_groups, int m)
{
    size_t G = 8 * rep, k, j, t, d, bad_sz = 0, bad_v = 0;
    int bits = HF_CASES[cs[0]].bits;
    float X[512], Y[512];
    uint32_t w[256];
    kvq_sz sz[64];
    kvq_status st;
    for (k = 0; k < n_groups; k++)            /* group k's element j -> (t, d) */
        for (j = 0; j < G; j++) {
            t = axis == KVQ_PER_TOKEN ? (k * G + j) / D : (k / D) * G + j;
            d = axis == KVQ_PER_TOKEN ? (k * G + j) % D : k % D;
            X[t * D + d] = HF_CASES[cs[k]].x[j % 8];
        }
    st = kvq_quantize_matrix(X, T, D, bits, G, axis, (kvq_zero_mode)m, w, sz);
    if (st == KVQ_OK) st = kvq_dequantize_matrix(w, sz, T, D, bits, G, axis, (kvq_zero_mode)m, Y);
    CHECK(st == KVQ_OK, "HF rules, %s, %s zero: status %d", path, MODE_NAME[m], (int)st);
    if (st != KVQ_OK) return;
    for (k = 0; k < n_groups; k++) {
        const hf_case *h = &HF_CASES[cs[k]];
        bad_sz += sz[k].scale != h->scale || sz[k].zero != (m ? h->zero_i : h->zero_f);
        for (j = 0; j < G; j++) {
            t = axis == KVQ_PER_TOKEN ? (k * G + j) / D : (k / D) * G + j;
            d = axis == KVQ_PER_TOKEN ? (k * G + j) % D : k % D;
            bad_v += Y[t * D + d] != (m ? h->vi : h->vf)[j % 8];
        }
    }
    CHECK(bad_sz == 0 && bad_v == 0, "HF rules, %s, %s zero: %zu groups store another (s, z), "
          "%zu values differ from the hand-computed ones", path, MODE_NAME[m], bad_sz, bad_v);
}

static void test_group_hf_rules(void)
{
    size_t i, j, cs[64];
    int m;
    for (i = 0; i < N_HF_CASES; i++) {
        const hf_case *h = &HF_CASES[i];
        for (m = 0; m < 2; m++) {
            uint8_t c[8];
            kvq_sz sz;
            float a, b;
            size_t bad_c = 0, bad_v = 0;
            kvq_status st = kvq_quantize_group(h->x, 8, 1, h->bits, (kvq_zero_mode)m, c, &sz);
            CHECK(st == KVQ_OK, "HF rules, %s, %s zero: status %d", h->what, MODE_NAME[m], (int)st);
            if (st != KVQ_OK) continue;
            CHECK(sz.scale == h->scale && sz.zero == (m ? h->zero_i : h->zero_f),
                  "HF rules, %s, %s zero: stored (0x%04X, 0x%04X), by hand (0x%04X, 0x%04X)",
                  h->what, MODE_NAME[m], (unsigned)sz.scale, (unsigned)sz.zero,
                  (unsigned)h->scale, (unsigned)(m ? h->zero_i : h->zero_f));
            kvq_sz_affine(sz, (kvq_zero_mode)m, &a, &b);
            for (j = 0; j < 8; j++) {
                bad_c += c[j] != (m ? h->ci : h->cf)[j];
                bad_v += (float)c[j] * a + b != (m ? h->vi : h->vf)[j];
            }
            CHECK(bad_c == 0 && bad_v == 0, "HF rules, %s, %s zero: %zu codes and %zu values "
                  "differ from the hand-computed ones (first codes %u %u %u %u %u %u %u %u)",
                  h->what, MODE_NAME[m], bad_c, bad_v, c[0], c[1], c[2], c[3], c[4], c[5],
                  c[6], c[7]);
        }
    }
    /* the two rules really differ on these groups (else the table above
       would not pin the choice between them)                              */
    for (i = 0, j = 0; i < N_HF_CASES; i++) j += memcmp(HF_CASES[i].cf, HF_CASES[i].ci, 8) != 0;
    CHECK(j == 4, "HF rules: %zu of the hand groups tell the two rules apart, expected 4", j);
    /* every matrix path, each 2-bit case in turn (the 4-bit one alone)     */
    for (m = 0; m < 2; m++) {
        for (i = 0; i < 64; i++) cs[i] = i % 4;
        hf_matrix_path("16 per-token groups side by side", 4, 32, 1, KVQ_PER_TOKEN, cs, 16, m);
        hf_matrix_path("per-token groups, fewer than 16", 1, 32, 1, KVQ_PER_TOKEN, cs, 4, m);
        hf_matrix_path("one per-token group of 16", 1, 16, 2, KVQ_PER_TOKEN, cs + 2, 1, m);
        hf_matrix_path("per-channel, 16 channels at a time", 8, 16, 1, KVQ_PER_CHANNEL, cs, 16, m);
        hf_matrix_path("per-channel, one channel at a time", 8, 4, 1, KVQ_PER_CHANNEL, cs, 4, m);
        for (i = 0; i < 64; i++) cs[i] = 4;
        hf_matrix_path("4-bit, 16 per-token groups", 2, 64, 1, KVQ_PER_TOKEN, cs, 16, m);
        hf_matrix_path("4-bit, per-channel 16 at a time", 8, 16, 1, KVQ_PER_CHANNEL, cs, 16, m);
    }
}

/* ======================================================================== */
/* 3. packing                                                               */
/* ======================================================================== */
/* The documented layout, bit by bit: bit k of code i goes to bit
   (i % (32/B))*B + k of word i / (32/B); nothing else is set.             */
static void ref_pack(const uint8_t *codes, size_t n, int bits, uint32_t *words)
{
    size_t per = 32u / (unsigned)bits, i, nw = (n * (size_t)bits + 31) / 32;
    int k;
    memset(words, 0, nw * sizeof *words);
    for (i = 0; i < n; i++)
        for (k = 0; k < bits; k++)
            if ((codes[i] >> k) & 1)
                words[i / per] |= (uint32_t)1 << ((i % per) * (size_t)bits + (size_t)k);
}

/* Round trip and layout for every B and every n in 1..200 (ragged tails),
   kvq_packed_words == ceil(n*B/32), no write past the last word or code,
   and codes >= 2^B rejected with the output untouched.                     */
static void test_pack(void)
{
    uint8_t codes[200], back[200 + 8];
    uint32_t words[64 + 4], ref[64];
    long bad_words = 0, bad_rt = 0, bad_count = 0, bad_guard = 0, bad_range = 0;
    int bi, reps;
    size_t n, i;
    rng_seed(0x5EED0005ull);
    for (bi = 0; bi < 4; bi++) {
        int B = BITS[bi];
        for (n = 1; n <= 200; n++)
            for (reps = 0; reps < 3; reps++) {
                size_t nw = (n * (size_t)B + 31) / 32;
                for (i = 0; i < n; i++)      /* reps 0: all ones, else random */
                    codes[i] = (uint8_t)(reps == 0 ? (1u << B) - 1u : rng_u32() & ((1u << B) - 1u));
                if (kvq_packed_words(n, B) != nw) bad_count++;
                poison(words, sizeof words);
                if (kvq_pack(codes, n, B, words) != KVQ_OK) { bad_rt++; continue; }
                ref_pack(codes, n, B, ref);
                if (memcmp(words, ref, nw * 4) != 0) bad_words++;
                if (!is_poison(words + nw, sizeof words - nw * 4)) bad_guard++;
                poison(back, sizeof back);
                if (kvq_unpack(words, n, B, back) != KVQ_OK || memcmp(back, codes, n) != 0)
                    bad_rt++;
                if (!is_poison(back + n, sizeof back - n)) bad_guard++;
                if (B < 8) {                  /* one over-wide code anywhere */
                    size_t at = reps == 0 ? 0 : (reps == 1 ? n - 1 : rng_below(n));
                    uint8_t keep = codes[at];
                    codes[at] = (uint8_t)(1u << B | (rng_u32() & 0x7Fu));
                    poison(words, sizeof words);
                    if (kvq_pack(codes, n, B, words) != KVQ_ERR_RANGE ||
                        !is_poison(words, sizeof words)) bad_range++;
                    codes[at] = keep;
                }
            }
    }
    CHECK(bad_count == 0, "kvq_packed_words != ceil(n*B/32) in %ld cases", bad_count);
    CHECK(bad_words == 0, "packed words differ from the bit-by-bit layout in %ld cases", bad_words);
    CHECK(bad_rt == 0, "pack/unpack round trip failed in %ld cases", bad_rt);
    CHECK(bad_guard == 0, "pack/unpack wrote past the end in %ld cases", bad_guard);
    CHECK(bad_range == 0, "codes >= 2^B not rejected cleanly in %ld cases", bad_range);
    CHECK(kvq_packed_words(0, 2) == 0 && kvq_packed_words(16, 2) == 1 &&
          kvq_packed_words(17, 2) == 2 && kvq_packed_words(33, 1) == 2 &&
          kvq_packed_words(5, 8) == 2, "kvq_packed_words small cases");
}

/* ======================================================================== */
/* 4. matrices                                                              */
/* ======================================================================== */
/* Layout fields against the doc table of Sec. 6.                           */
static void test_layout_table(void)
{
    static const size_t Gs[] = { 1, 3, 8, 32, 64, 128, 320 };
    long bad = 0;
    size_t gi, k, T, D;
    int bi, ax;
    for (gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
        for (bi = 0; bi < 4; bi++)
            for (ax = 0; ax < 2; ax++)
                for (k = 1; k <= 3; k++)
                    for (T = 1; T <= 5; T++) {
                        size_t G = Gs[gi], wpg = (G * (size_t)BITS[bi] + 31) / 32;
                        size_t units, tpu, gpu;
                        kvq_layout L;
                        if (ax == KVQ_PER_TOKEN) { D = G * k; units = T; tpu = 1; gpu = D / G; }
                        else { D = k + T; units = T; tpu = G; gpu = D; }
                        if (kvq_layout_init(&L, ax == KVQ_PER_TOKEN ? T : T * G, D, BITS[bi], G,
                                            (kvq_axis)ax) != KVQ_OK) { bad++; continue; }
                        if (L.units != units || L.geom.tokens_per_unit != tpu ||
                            L.geom.groups_per_unit != gpu || L.geom.words_per_group != wpg ||
                            L.total_groups != units * gpu || L.total_words != units * gpu * wpg)
                            bad++;
                    }
    CHECK(bad == 0, "kvq_layout_init disagrees with the Sec. 6 table in %ld cases", bad);
}

/* kvq_quantize_matrix equals gathering each documented group, quantizing it
   with kvq_quantize_group (itself checked against the reference above) and
   packing it bit by bit at [unit][group][word]; kvq_dequantize_matrix equals
   c*a + b per element. Buffers carry a poisoned tail to catch overruns.
   With matrix_grid set, values come from a grid of halves with constant
   channels and exact extremes, so many codes sit on .5 ties and clamps:
   the adversarial case for the fast quantizer's rounding and 16-lane
   paths (kvq.h Sec. 6).                                                   */
static int matrix_grid;
static void matrix_case(size_t T, size_t D, int B, size_t G, kvq_axis axis, kvq_zero_mode mode)
{
    kvq_layout L;
    size_t u, g, j, t, d, nel = T * D;
    float *X = (float *)malloc(nel * sizeof *X), *Xo, *tmp = (float *)malloc(G * sizeof *tmp);
    uint32_t *w, *ew;
    kvq_sz *sz, *esz;
    uint8_t *gc = (uint8_t *)malloc(G), *ecode = (uint8_t *)malloc(nel);
    long bad_deq = 0;
    kvq_status st;
    const char *ax = axis == KVQ_PER_TOKEN ? "per-token" : "per-channel";
    for (d = 0; d < D; d++) {                    /* KIVI-like: outlier channels */
        double sc = (d % 7 == 3) ? 20.0 : 1.0, off = rng_normal();
        for (t = 0; t < T; t++) X[t * D + d] = (float)(off + sc * rng_normal());
        if (matrix_grid)
            for (t = 0; t < T; t++)
                X[t * D + d] = d % 5 == 2 ? -1.5f                       /* constant */
                             : rng_below(9) == 0 ? (rng_below(2) ? KVQ_MAX_ABS_INPUT : -KVQ_MAX_ABS_INPUT)
                             : (float)rng_below(16) * 0.5f - 3.0f;       /* halves   */
    }
    if (kvq_layout_init(&L, T, D, B, G, axis) != KVQ_OK) {
        CHECK(0, "matrix %s T=%zu D=%zu G=%zu B=%d: layout_init failed", ax, T, D, G, B);
        free(X); free(tmp); free(gc); free(ecode);
        return;
    }
    w = (uint32_t *)malloc((L.total_words + 8) * 4);
    ew = (uint32_t *)calloc(L.total_words + 1, 4);
    sz = (kvq_sz *)malloc((L.total_groups + 8) * sizeof *sz);
    esz = (kvq_sz *)malloc(L.total_groups * sizeof *esz);
    Xo = (float *)malloc((nel + 8) * sizeof *Xo);
    poison(w, (L.total_words + 8) * 4);
    poison(sz, (L.total_groups + 8) * sizeof *sz);
    st = kvq_quantize_matrix(X, T, D, B, G, axis, mode, w, sz);
    CHECK(st == KVQ_OK, "matrix %s T=%zu D=%zu G=%zu B=%d: status %d", ax, T, D, G, B, (int)st);
    /* brute force: units x groups in the documented order                  */
    for (u = 0; u < L.units; u++)
        for (g = 0; g < L.geom.groups_per_unit; g++) {
            size_t gid = u * L.geom.groups_per_unit + g;
            for (j = 0; j < G; j++) {
                size_t tt = axis == KVQ_PER_TOKEN ? u : u * G + j;
                size_t dd = axis == KVQ_PER_TOKEN ? g * G + j : g;
                tmp[j] = X[tt * D + dd];
            }
            if (kvq_quantize_group(tmp, G, 1, B, mode, gc, &esz[gid]) != KVQ_OK) {
                CHECK(0, "matrix brute force: group %zu failed", gid);
                continue;
            }
            ref_pack(gc, G, B, ew + gid * L.geom.words_per_group);
            for (j = 0; j < G; j++) {
                size_t tt = axis == KVQ_PER_TOKEN ? u : u * G + j;
                size_t dd = axis == KVQ_PER_TOKEN ? g * G + j : g;
                ecode[tt * D + dd] = gc[j];
            }
        }
    if (st == KVQ_OK) {
        CHECK(memcmp(w, ew, L.total_words * 4) == 0 && is_poison(w + L.total_words, 32),
              "matrix %s %s T=%zu D=%zu G=%zu B=%d: packed words differ from the brute force",
              ax, MODE_NAME[mode], T, D, G, B);
        CHECK(memcmp(sz, esz, L.total_groups * sizeof *sz) == 0 &&
              is_poison(sz + L.total_groups, 8 * sizeof *sz),
              "matrix %s %s T=%zu D=%zu G=%zu B=%d: scale/zero differ from the brute force",
              ax, MODE_NAME[mode], T, D, G, B);
    }
    poison(Xo, (nel + 8) * sizeof *Xo);
    st = kvq_dequantize_matrix(ew, esz, T, D, B, G, axis, mode, Xo);
    for (t = 0; t < T && st == KVQ_OK; t++)
        for (d = 0; d < D; d++) {
            size_t gid = axis == KVQ_PER_TOKEN ? t * (D / G) + d / G : (t / G) * D + d;
            float a, b, want;
            kvq_sz_affine(esz[gid], mode, &a, &b);
            want = (float)ecode[t * D + d] * a + b;
            if (f2u(want) != f2u(Xo[t * D + d])) bad_deq++;
        }
    CHECK(st == KVQ_OK && bad_deq == 0 && is_poison(Xo + nel, 8 * sizeof *Xo),
          "dequantize %s %s T=%zu D=%zu G=%zu B=%d: status %d, %ld elements differ from c*a+b",
          ax, MODE_NAME[mode], T, D, G, B, (int)st, bad_deq);
    free(X); free(Xo); free(tmp); free(w); free(ew); free(sz); free(esz); free(gc); free(ecode);
}

static void test_matrix(void)
{
    static const size_t Gs[] = { 8, 32, 64, 128, 320 };   /* 320: 256-chunk path */
    size_t gi;
    int bi, m, rep;
    rng_seed(0x5EED0006ull);
    for (gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
        for (bi = 0; bi < 4; bi++)
            for (m = 0; m < 2; m++)
                for (rep = 0; rep < COUNT(2, 1); rep++) {
                    size_t G = Gs[gi];
                    matrix_case(1 + rng_below(6), G * (1 + rng_below(3)), BITS[bi], G,
                                KVQ_PER_TOKEN, (kvq_zero_mode)m);
                    /* many per-token groups: 16 side by side (G <= 128),
                       then a tail of fewer than 16                         */
                    matrix_case(16 + rng_below(25), G * (1 + rng_below(3)), BITS[bi], G,
                                KVQ_PER_TOKEN, (kvq_zero_mode)m);
                    matrix_case(G * (1 + rng_below(3)), 1 + rng_below(20), BITS[bi], G,
                                KVQ_PER_CHANNEL, (kvq_zero_mode)m);
                    /* whole blocks of 16 channels (the vertical path)       */
                    matrix_case(G * (1 + rng_below(2)), 16 * (1 + rng_below(3)), BITS[bi], G,
                                KVQ_PER_CHANNEL, (kvq_zero_mode)m);
                    matrix_grid = 1;
                    matrix_case(1 + rng_below(6), G * (1 + rng_below(3)), BITS[bi], G,
                                KVQ_PER_TOKEN, (kvq_zero_mode)m);
                    matrix_case(16 + rng_below(25), G * (1 + rng_below(3)), BITS[bi], G,
                                KVQ_PER_TOKEN, (kvq_zero_mode)m);
                    matrix_case(G, 16 * (1 + rng_below(2)) + rng_below(2), BITS[bi], G,
                                KVQ_PER_CHANNEL, (kvq_zero_mode)m);
                    matrix_grid = 0;
                }
}

/* ======================================================================== */
/* 5. bad input writes nothing                                              */
/* ======================================================================== */
/* Each failing call must return the documented status and leave every
   output byte-identical to the poison pattern written before the call.    */
static void test_bad_group(void)
{
    static const int badbits[] = { 0, 6, 5, 16, -1, 7, 9, 32 };
    float x[16], gap[8];
    uint8_t c[32];
    kvq_sz sz;
    kvq_status st;
    size_t i, k, pos;
    int m;
#define QG(call, want, ...)                                                      \
    do {                                                                         \
        poison(c, sizeof c); poison(&sz, sizeof sz);                             \
        st = (call);                                                             \
        CHECK(st == (want) && is_poison(c, sizeof c) && is_poison(&sz, sizeof sz), \
              "quantize_group: status %d (want %d), outputs %s: " __VA_ARGS__);  \
    } while (0)
#define UNTOUCHED (is_poison(c, sizeof c) && is_poison(&sz, sizeof sz) ? "untouched" : "WRITTEN")
    for (i = 0; i < 16; i++) x[i] = (float)i - 3.5f;
    for (m = 0; m < 2; m++) {
        kvq_zero_mode md = (kvq_zero_mode)m;
        QG(kvq_quantize_group(NULL, 16, 1, 2, md, c, &sz), KVQ_ERR_NULL, "%s x NULL",
           (int)st, KVQ_ERR_NULL, UNTOUCHED, MODE_NAME[m]);
        QG(kvq_quantize_group(x, 16, 1, 2, md, NULL, &sz), KVQ_ERR_NULL, "%s codes NULL",
           (int)st, KVQ_ERR_NULL, UNTOUCHED, MODE_NAME[m]);
        QG(kvq_quantize_group(x, 16, 1, 2, md, c, NULL), KVQ_ERR_NULL, "%s sz NULL",
           (int)st, KVQ_ERR_NULL, UNTOUCHED, MODE_NAME[m]);
        for (k = 0; k < sizeof badbits / sizeof badbits[0]; k++)
            QG(kvq_quantize_group(x, 16, 1, badbits[k], md, c, &sz), KVQ_ERR_BITS,
               "%s bits %d", (int)st, KVQ_ERR_BITS, UNTOUCHED, MODE_NAME[m], badbits[k]);
        QG(kvq_quantize_group(x, 0, 1, 2, md, c, &sz), KVQ_ERR_SIZE, "%s n 0",
           (int)st, KVQ_ERR_SIZE, UNTOUCHED, MODE_NAME[m]);
        QG(kvq_quantize_group(x, 16, 0, 2, md, c, &sz), KVQ_ERR_SIZE, "%s stride 0",
           (int)st, KVQ_ERR_SIZE, UNTOUCHED, MODE_NAME[m]);
        QG(kvq_quantize_group(x, 3, SIZE_MAX / 2 + 1, 2, md, c, &sz), KVQ_ERR_OVERFLOW,
           "%s (n-1)*stride overflows", (int)st, KVQ_ERR_OVERFLOW, UNTOUCHED, MODE_NAME[m]);
        /* (n-1)*stride fits as an element index, but the byte offset
           (n-1)*stride*sizeof(float) = 2^64 does not: no array can span it,
           and x[(n-1)*stride] would be a wrapped pointer (UB). Under the
           sanitizers that UB aborts the whole binary before the CHECK can
           report, so there it is skipped (with a printed note) until kvq.h
           checks the byte extent.                                           */
#if !defined(__SANITIZE_ADDRESS__)
        QG(kvq_quantize_group(x, 2, SIZE_MAX / 4 + 1, 2, md, c, &sz), KVQ_ERR_OVERFLOW,
           "%s (n-1)*stride*sizeof(float) overflows size_t", (int)st, KVQ_ERR_OVERFLOW,
           UNTOUCHED, MODE_NAME[m]);
#else
        if (m == 0)
            printf("test_quant: note: skipped the stride byte-overflow probe under sanitizers\n");
#endif
        /* NaN / +Inf / -Inf as first, middle, last element, stride 1 and 3 */
        for (k = 0; k < 3; k++)
            for (pos = 0; pos < 3; pos++) {
                float bad = k == 0 ? NAN : (k == 1 ? INFINITY : -INFINITY);
                size_t stride = pos == 1 ? 3 : 1, n = stride == 3 ? 5 : 16;
                size_t at = pos == 0 ? 0 : (pos == 1 ? 2 * stride : (n - 1) * stride);
                float keep = x[at];
                x[at] = bad;
                QG(kvq_quantize_group(x, n, stride, 2, md, c, &sz), KVQ_ERR_NONFINITE,
                   "%s %g at element %zu", (int)st, KVQ_ERR_NONFINITE, UNTOUCHED,
                   MODE_NAME[m], (double)bad, at);
                x[at] = keep;
                if (pos == 2) {          /* the same value in the LAST slot, stride 1 */
                    float k15 = x[15];
                    x[15] = bad;
                    QG(kvq_quantize_group(x, 16, 1, 8, md, c, &sz), KVQ_ERR_NONFINITE,
                       "%s %g last of 16", (int)st, KVQ_ERR_NONFINITE, UNTOUCHED,
                       MODE_NAME[m], (double)bad);
                    x[15] = k15;
                }
            }
        /* scale or zero beyond fp16                                          */
        {
            float r1[2] = { -60000.0f, 60000.0f }, r2[1] = { 1e30f }, r3[3] = { 0.0f, 1e30f, 1.0f };
            float r4[2] = { -1e30f, 0.0f }, r5[4] = { 65520.0f, 65520.0f, 65520.0f, 65520.0f };
            QG(kvq_quantize_group(r1, 2, 1, 1, md, c, &sz), KVQ_ERR_RANGE, "%s {-6e4,6e4} B=1",
               (int)st, KVQ_ERR_RANGE, UNTOUCHED, MODE_NAME[m]);
            QG(kvq_quantize_group(r2, 1, 1, 4, md, c, &sz), KVQ_ERR_RANGE, "%s {1e30}",
               (int)st, KVQ_ERR_RANGE, UNTOUCHED, MODE_NAME[m]);
            QG(kvq_quantize_group(r3, 3, 1, 8, md, c, &sz), KVQ_ERR_RANGE, "%s {0,1e30,1}",
               (int)st, KVQ_ERR_RANGE, UNTOUCHED, MODE_NAME[m]);
            QG(kvq_quantize_group(r4, 2, 1, 2, md, c, &sz), KVQ_ERR_RANGE, "%s {-1e30,0}",
               (int)st, KVQ_ERR_RANGE, UNTOUCHED, MODE_NAME[m]);
            QG(kvq_quantize_group(r5, 4, 1, 2, md, c, &sz), KVQ_ERR_RANGE,
               "%s constant 65520 (f16 = Inf)", (int)st, KVQ_ERR_RANGE, UNTOUCHED, MODE_NAME[m]);
        }
    }
    QG(kvq_quantize_group(x, 16, 1, 2, (kvq_zero_mode)2, c, &sz), KVQ_ERR_CONFIG,
       "mode 2", (int)st, KVQ_ERR_CONFIG, UNTOUCHED);
    /* NaN in the gaps of a strided group is not part of the group           */
    for (i = 0; i < 8; i++) gap[i] = (i % 2) ? NAN : (float)i;
    st = kvq_quantize_group(gap, 4, 2, 2, KVQ_ZERO_FLOAT, c, &sz);
    CHECK(st == KVQ_OK, "NaN between strided elements must be ignored: status %d", (int)st);
#undef QG
#undef UNTOUCHED
}

static void test_bad_pack(void)
{
    static const int badbits[] = { 0, 6, 5, 16, -1 };
    uint8_t codes[40], out[48];
    uint32_t w[8];
    kvq_status st;
    size_t k;
    int b;
    memset(codes, 1, sizeof codes);
    for (k = 0; k < sizeof badbits / sizeof badbits[0]; k++) {
        poison(w, sizeof w);
        st = kvq_pack(codes, 40, badbits[k], w);
        CHECK(st == KVQ_ERR_BITS && is_poison(w, sizeof w), "pack bits %d: status %d",
              badbits[k], (int)st);
        poison(out, sizeof out);
        st = kvq_unpack(w, 40, badbits[k], out);
        CHECK(st == KVQ_ERR_BITS && is_poison(out, sizeof out), "unpack bits %d: status %d",
              badbits[k], (int)st);
        CHECK(kvq_packed_words(40, badbits[k]) == 0, "packed_words(bits %d) must be 0",
              badbits[k]);
    }
    for (b = -2; b <= 40; b++)
        CHECK(kvq_bits_supported(b) == (b == 1 || b == 2 || b == 3 || b == 4 || b == 8),
              "kvq_bits_supported(%d) = %d", b, kvq_bits_supported(b));
    poison(w, sizeof w);
    st = kvq_pack(NULL, 40, 2, w);
    CHECK(st == KVQ_ERR_NULL && is_poison(w, sizeof w), "pack codes NULL: %d", (int)st);
    CHECK(kvq_pack(codes, 40, 2, NULL) == KVQ_ERR_NULL, "pack words NULL");
    st = kvq_pack(codes, 0, 2, w);
    CHECK(st == KVQ_ERR_SIZE && is_poison(w, sizeof w), "pack n 0: %d", (int)st);
    poison(out, sizeof out);
    st = kvq_unpack(NULL, 40, 2, out);
    CHECK(st == KVQ_ERR_NULL && is_poison(out, sizeof out), "unpack words NULL: %d", (int)st);
    CHECK(kvq_unpack(w, 40, 2, NULL) == KVQ_ERR_NULL, "unpack codes NULL");
    st = kvq_unpack(w, 0, 2, out);
    CHECK(st == KVQ_ERR_SIZE && is_poison(out, sizeof out), "unpack n 0: %d", (int)st);
}

static void test_bad_matrix(void)
{
    enum { T = 16, D = 16 };
    static const int badbits[] = { 0, 6, 5, 16, -1 };
    float X[T * D], Xo[T * D];
    uint32_t w[256];
    kvq_sz sz[64];
    kvq_layout L;
    kvq_status st;
    size_t i, k, pos;
    int m, ax;
#define UNT (is_poison(w, sizeof w) && is_poison(sz, sizeof sz))
#define QM(Xp, t, d, b, g, a, md, want, what)                                      \
    do {                                                                           \
        poison(w, sizeof w); poison(sz, sizeof sz);                                \
        st = kvq_quantize_matrix(Xp, t, d, b, g, a, md, w, sz);                    \
        CHECK(st == (want) && UNT, "quantize_matrix %s: status %d (want %d), %s",  \
              what, (int)st, (int)(want), UNT ? "untouched" : "WRITTEN");          \
        poison(Xo, sizeof Xo);                                                     \
    } while (0)
#define DM(t, d, b, g, a, md, want, what)                                          \
    do {                                                                           \
        poison(Xo, sizeof Xo);                                                     \
        st = kvq_dequantize_matrix(w, sz, t, d, b, g, a, md, Xo);                  \
        CHECK(st == (want) && is_poison(Xo, sizeof Xo),                            \
              "dequantize_matrix %s: status %d (want %d), %s", what, (int)st,      \
              (int)(want), is_poison(Xo, sizeof Xo) ? "untouched" : "WRITTEN");    \
    } while (0)
#define LI(t, d, b, g, a, want, what)                                              \
    do {                                                                           \
        poison(&L, sizeof L);                                                      \
        st = kvq_layout_init(&L, t, d, b, g, a);                                   \
        CHECK(st == (want) && is_poison(&L, sizeof L),                             \
              "layout_init %s: status %d (want %d)", what, (int)st, (int)(want));  \
    } while (0)
    rng_seed(0x5EED0007ull);
    for (i = 0; i < T * D; i++) X[i] = (float)rng_normal();
    for (ax = 0; ax < 2; ax++)
        for (m = 0; m < 2; m++) {
            kvq_axis a = (kvq_axis)ax;
            kvq_zero_mode md = (kvq_zero_mode)m;
            QM(NULL, T, D, 2, 8, a, md, KVQ_ERR_NULL, "X NULL");
            st = kvq_quantize_matrix(X, T, D, 2, 8, a, md, NULL, sz);
            CHECK(st == KVQ_ERR_NULL, "quantize_matrix words NULL: %d", (int)st);
            st = kvq_quantize_matrix(X, T, D, 2, 8, a, md, w, NULL);
            CHECK(st == KVQ_ERR_NULL, "quantize_matrix sz NULL: %d", (int)st);
            for (k = 0; k < sizeof badbits / sizeof badbits[0]; k++) {
                QM(X, T, D, badbits[k], 8, a, md, KVQ_ERR_BITS, "bad bits");
                DM(T, D, badbits[k], 8, a, md, KVQ_ERR_BITS, "bad bits");
                LI(T, D, badbits[k], 8, a, KVQ_ERR_BITS, "bad bits");
            }
            QM(X, 0, D, 2, 8, a, md, KVQ_ERR_SIZE, "T 0");
            QM(X, T, 0, 2, 8, a, md, KVQ_ERR_SIZE, "D 0");
            QM(X, T, D, 2, 0, a, md, KVQ_ERR_SIZE, "G 0");
            DM(0, D, 2, 8, a, md, KVQ_ERR_SIZE, "T 0");
            DM(T, 0, 2, 8, a, md, KVQ_ERR_SIZE, "D 0");
            DM(T, D, 2, 0, a, md, KVQ_ERR_SIZE, "G 0");
            LI(0, D, 2, 8, a, KVQ_ERR_SIZE, "T 0");
            LI(T, 0, 2, 8, a, KVQ_ERR_SIZE, "D 0");
            LI(T, D, 2, 0, a, KVQ_ERR_SIZE, "G 0");
            QM(X, T, D, 2, 8, (kvq_axis)2, md, KVQ_ERR_CONFIG, "axis 2");
            DM(T, D, 2, 8, (kvq_axis)2, md, KVQ_ERR_CONFIG, "axis 2");
            LI(T, D, 2, 8, (kvq_axis)2, KVQ_ERR_CONFIG, "axis 2");
            QM(X, T, D, 2, 8, a, (kvq_zero_mode)2, KVQ_ERR_CONFIG, "mode 2");
            DM(T, D, 2, 8, a, (kvq_zero_mode)2, KVQ_ERR_CONFIG, "mode 2");
            /* NaN / Inf first, middle, last                                  */
            for (k = 0; k < 3; k++)
                for (pos = 0; pos < 3; pos++) {
                    size_t at = pos == 0 ? 0 : (pos == 1 ? T * D / 2 + 3 : T * D - 1);
                    float keep = X[at];
                    X[at] = k == 0 ? NAN : (k == 1 ? INFINITY : -INFINITY);
                    QM(X, T, D, 2, 8, a, md, KVQ_ERR_NONFINITE, "non-finite element");
                    X[at] = keep;
                }
            /* an fp16-overflowing group, first or last in storage order: a
               quantizer that writes group by group would have written the
               others already                                                */
            for (pos = 0; pos < 2; pos++) {
                float keep0 = X[0], keep1;
                size_t far = ax == KVQ_PER_TOKEN ? 1 : D;          /* same group */
                size_t base = pos == 0 ? 0 : (ax == KVQ_PER_TOKEN ? T * D - 2 : (T - 2) * D + D - 1);
                keep0 = X[base]; keep1 = X[base + far];
                X[base] = -60000.0f; X[base + far] = 60000.0f;
                QM(X, T, D, 1, 8, a, md, KVQ_ERR_RANGE, pos ? "range error in last group"
                                                             : "range error in first group");
                X[base] = 1e30f;
                QM(X, T, D, 4, 8, a, md, KVQ_ERR_RANGE, "1e30 in a group");
                X[base] = keep0; X[base + far] = keep1;
            }
            /* T*D overflows size_t while the layout itself fits            */
            if (ax == KVQ_PER_TOKEN) {
                QM(X, SIZE_MAX / 2 + 1, 4, 8, 4, a, md, KVQ_ERR_OVERFLOW, "T*D overflow");
                DM(SIZE_MAX / 2 + 1, 4, 8, 4, a, md, KVQ_ERR_OVERFLOW, "T*D overflow");
            } else {
                QM(X, SIZE_MAX - 1, 2, 8, 2, a, md, KVQ_ERR_OVERFLOW, "T*D overflow");
                DM(SIZE_MAX - 1, 2, 8, 2, a, md, KVQ_ERR_OVERFLOW, "T*D overflow");
            }
            LI(SIZE_MAX, SIZE_MAX, 8, 1, KVQ_PER_TOKEN, KVQ_ERR_OVERFLOW, "groups overflow");
            LI(SIZE_MAX, 4, 8, 1, KVQ_PER_CHANNEL, KVQ_ERR_OVERFLOW, "groups overflow");
        }
    /* G must divide the grouped dimension                                    */
    QM(X, T, 12, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, KVQ_ERR_GROUP, "8 does not divide D=12");
    QM(X, 12, D, 2, 8, KVQ_PER_CHANNEL, KVQ_ZERO_FLOAT, KVQ_ERR_GROUP, "8 does not divide T=12");
    QM(X, T, D, 2, 32, KVQ_PER_TOKEN, KVQ_ZERO_INT, KVQ_ERR_GROUP, "G > D");
    DM(T, 12, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, KVQ_ERR_GROUP, "8 does not divide D=12");
    DM(12, D, 2, 8, KVQ_PER_CHANNEL, KVQ_ZERO_FLOAT, KVQ_ERR_GROUP, "8 does not divide T=12");
    LI(T, 12, 2, 8, KVQ_PER_TOKEN, KVQ_ERR_GROUP, "8 does not divide D=12");
    LI(12, D, 2, 8, KVQ_PER_CHANNEL, KVQ_ERR_GROUP, "8 does not divide T=12");
    CHECK(kvq_layout_init(NULL, T, D, 2, 8, KVQ_PER_TOKEN) == KVQ_ERR_NULL, "layout_init NULL");
    poison(Xo, sizeof Xo);
    st = kvq_dequantize_matrix(NULL, sz, T, D, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, Xo);
    CHECK(st == KVQ_ERR_NULL && is_poison(Xo, sizeof Xo), "dequantize words NULL: %d", (int)st);
    st = kvq_dequantize_matrix(w, NULL, T, D, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, Xo);
    CHECK(st == KVQ_ERR_NULL && is_poison(Xo, sizeof Xo), "dequantize sz NULL: %d", (int)st);
    st = kvq_dequantize_matrix(w, sz, T, D, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, NULL);
    CHECK(st == KVQ_ERR_NULL, "dequantize Xout NULL: %d", (int)st);
#undef UNT
#undef QM
#undef DM
#undef LI
}

/* Every status has its own non-empty sentence.                             */
static void test_status_str(void)
{
    int a, b;
    for (a = 0; a < KVQ_STATUS_COUNT; a++) {
        const char *s = kvq_status_str((kvq_status)a);
        CHECK(s != NULL && s[0] != '\0', "kvq_status_str(%d) is empty", a);
        for (b = 0; b < a; b++)
            CHECK(s && strcmp(s, kvq_status_str((kvq_status)b)) != 0,
                  "kvq_status_str(%d) == kvq_status_str(%d)", a, b);
    }
}

/* ======================================================================== */
/* 6. .npy                                                                  */
/* ======================================================================== */
/* An .npy image assembled byte by byte from the NumPy format description:
   "\x93NUMPY", major, minor 0, header length (u16 LE for 1.x, u32 LE for
   2.x/3.x), the dict text padded with spaces and '\n' so the data starts on a
   64-byte boundary, then the payload. Returns the length (0 if cap is small). */
static size_t npy_build(unsigned char *buf, size_t cap, int major, const char *dict,
                        const void *payload, size_t plen)
{
    static const unsigned char magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };
    size_t hoff = major == 1 ? 10 : 12, dl = strlen(dict), hlen = dl + 1, total;
    while ((hoff + hlen) % 64) hlen++;
    total = hoff + hlen + plen;
    if (total > cap) return 0;
    memcpy(buf, magic, 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xFF);
    buf[9] = (unsigned char)((hlen >> 8) & 0xFF);
    if (major != 1) { buf[10] = (unsigned char)((hlen >> 16) & 0xFF); buf[11] = (unsigned char)(hlen >> 24); }
    memcpy(buf + hoff, dict, dl);
    memset(buf + hoff + dl, ' ', hlen - dl - 1);
    buf[hoff + hlen - 1] = '\n';
    if (plen) memcpy(buf + hoff + hlen, payload, plen);
    return total;
}
static void put_le32(unsigned char *p, uint32_t u)
{
    p[0] = (unsigned char)u; p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16); p[3] = (unsigned char)(u >> 24);
}

/* Parses a copy of exactly len bytes (so ASan sees any over-read) and
   expects an error with *out untouched.                                    */
static void npy_expect_fail(const unsigned char *img, size_t len, const char *what)
{
    unsigned char *copy = (unsigned char *)malloc(len ? len : 1);
    npy_array out;
    kvq_status st;
    if (len) memcpy(copy, img, len);
    poison(&out, sizeof out);
    st = npy_parse(copy, len, &out);
    CHECK(st != KVQ_OK && (int)st < KVQ_STATUS_COUNT && is_poison(&out, sizeof out),
          "npy_parse %s: status %d, out %s", what, (int)st,
          is_poison(&out, sizeof out) ? "untouched" : "WRITTEN");
    if (st == KVQ_OK) npy_free(&out);
    free(copy);
}

static int npy_parse_ok(const unsigned char *img, size_t len, npy_array *out)
{
    unsigned char *copy = (unsigned char *)malloc(len);
    kvq_status st;
    memcpy(copy, img, len);
    st = npy_parse(copy, len, out);
    free(copy);
    return st == KVQ_OK;
}

static void test_npy_parse(void)
{
    static unsigned char img[131072 + 256], pay[131072];
    float f4[12];
    size_t len, i, cut;
    long bad = 0;
    npy_array a;
    char dict[200];
    rng_seed(0x5EED0008ull);

    /* valid '<f4' (3, 4), version 1.0: data is the little-endian bits      */
    for (i = 0; i < 12; i++) { f4[i] = (float)rng_normal(); put_le32(pay + 4 * i, f2u(f4[i])); }
    len = npy_build(img, sizeof img, 1,
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", pay, 48);
    if (npy_parse_ok(img, len, &a)) {
        CHECK(a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 4 && a.count == 12 &&
              memcmp(a.data, f4, sizeof f4) == 0, "npy '<f4' (3, 4): wrong shape or data");
        npy_free(&a);
        CHECK(a.data == NULL, "npy_free must clear the struct");
    } else CHECK(0, "npy '<f4' (3, 4) v1.0 must parse");
    for (cut = 0; cut < len; cut++) {
        char what[96];
        snprintf(what, sizeof what, "v1 '<f4' truncated to %zu of %zu bytes", cut, len);
        npy_expect_fail(img, cut, what);
    }

    /* valid '<f2' holding every half: decoding is the IEEE definition      */
    for (i = 0; i < 65536; i++) { pay[2 * i] = (unsigned char)i; pay[2 * i + 1] = (unsigned char)(i >> 8); }
    len = npy_build(img, sizeof img, 1,
                    "{'descr': '<f2', 'fortran_order': False, 'shape': (65536,), }", pay, 131072);
    if (npy_parse_ok(img, len, &a)) {
        for (i = 0; i < 65536; i++) {
            double want = ref_h2d((uint16_t)i);
            if (want != want ? a.data[i] == a.data[i] : f2u(a.data[i]) != f2u((float)want)) bad++;
        }
        CHECK(a.ndim == 1 && a.count == 65536 && bad == 0,
              "npy '<f2': ndim %d count %zu, %ld halves decoded wrongly", a.ndim, a.count, bad);
        npy_free(&a);
    } else CHECK(0, "npy '<f2' (65536,) must parse");

    /* valid version 2.0 and 3.0 headers (u32 length), shape "(5,)"         */
    for (i = 0; i < 5; i++) put_le32(pay + 4 * i, f2u((float)i * 0.25f - 1.0f));
    {
        int major;
        for (major = 2; major <= 3; major++) {
            len = npy_build(img, sizeof img, major,
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", pay, 20);
            if (npy_parse_ok(img, len, &a)) {
                CHECK(a.ndim == 1 && a.shape[0] == 5 && a.count == 5 && a.data[0] == -1.0f &&
                      a.data[4] == 0.0f, "npy v%d.0 (5,): wrong content", major);
                npy_free(&a);
            } else CHECK(0, "npy v%d.0 (5,) must parse", major);
        }
        for (cut = 0; cut < len; cut++) {
            char what[96];
            snprintf(what, sizeof what, "v3 truncated to %zu of %zu bytes", cut, len);
            npy_expect_fail(img, cut, what);
        }
    }

    /* malformed images, each from the valid (2, 3) '<f4' one               */
    for (i = 0; i < 6; i++) put_le32(pay + 4 * i, f2u((float)i));
#define VALID_DICT "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    len = npy_build(img, sizeof img, 1, VALID_DICT, pay, 24);
    memset(&a, 0, sizeof a);
    CHECK(npy_parse_ok(img, len, &a), "npy (2, 3) base image must parse");
    if (a.data) npy_free(&a);
    for (i = 0; i < 6; i++) {          /* each magic byte wrong             */
        unsigned char keep = img[i];
        img[i] ^= 0x20;
        npy_expect_fail(img, len, "bad magic");
        img[i] = keep;
    }
    img[6] = 0; npy_expect_fail(img, len, "major version 0");
    img[6] = 4; npy_expect_fail(img, len, "major version 4");
    img[6] = 1;
    {   /* header length pointing past the end                               */
        unsigned char k8 = img[8], k9 = img[9];
        size_t hl = (size_t)k8 | ((size_t)k9 << 8);
        img[8] = (unsigned char)((hl + 24 + 1) & 0xFF); img[9] = (unsigned char)((hl + 25) >> 8);
        npy_expect_fail(img, len, "header length 1 past the end");
        img[8] = 0xFF; img[9] = 0xFF;
        npy_expect_fail(img, len, "header length 65535");
        img[8] = k8; img[9] = k9;
    }
    {
        size_t l2 = npy_build(img, sizeof img, 2, VALID_DICT, pay, 24);
        img[8] = img[9] = img[10] = img[11] = 0xFF;
        npy_expect_fail(img, l2, "v2 header length 0xFFFFFFFF");
    }
    {
        static const char *bad_dicts[] = {
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }",
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
            "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
            "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }",
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
            "{'fortran_order': False, 'shape': (2, 3), }",
            "{'descr': '<f4', 'shape': (2, 3), }",
            "{'descr': '<f4', 'fortran_order': False, }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 2, 3), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (abc), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }",
            "garbage",
            "",
        };
        for (i = 0; i < sizeof bad_dicts / sizeof bad_dicts[0]; i++) {
            size_t l = npy_build(img, sizeof img, 1, bad_dicts[i], pay, 24);
            snprintf(dict, sizeof dict, "dict \"%s\"", bad_dicts[i]);
            npy_expect_fail(img, l, dict);
        }
    }
    len = npy_build(img, sizeof img, 1, VALID_DICT, pay, 23);
    npy_expect_fail(img, len, "payload one byte short");
    len = npy_build(img, sizeof img, 1, VALID_DICT, pay, 25);
    npy_expect_fail(img, len, "payload one byte long");
    {
        npy_array out;
        poison(&out, sizeof out);
        CHECK(npy_parse(NULL, 10, &out) == KVQ_ERR_NULL && is_poison(&out, sizeof out),
              "npy_parse(NULL buf) must be KVQ_ERR_NULL");
        CHECK(npy_parse(img, len, NULL) == KVQ_ERR_NULL, "npy_parse(NULL out)");
    }
    npy_free(NULL);                     /* must be a no-op */
#undef VALID_DICT
}

static int make_tmp(char *path, size_t cap)
{
    int fd;
    snprintf(path, cap, "/tmp/kvq_test_quant_XXXXXX");
    fd = mkstemp(path);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}
static size_t read_file(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    if (!f) return 0;
    n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* save -> load is bit-exact for 1..4 dims (NaN payloads, -0, subnormals,
   Inf included), and the file itself follows the format: magic, v1.0,
   64-byte aligned header ending in '\n', the three keys, the shape as a
   tuple, little-endian payload.                                            */
static void test_npy_files(void)
{
    static unsigned char file[8192];
    char path[64], path2[64];
    int nd, rep;
    rng_seed(0x5EED0009ull);
    if (!make_tmp(path, sizeof path)) { CHECK(0, "mkstemp failed"); return; }
    for (nd = 1; nd <= 4; nd++)
        for (rep = 0; rep < 3; rep++) {
            size_t shape[4], count = 1, i, flen, hlen;
            float data[1296];
            npy_array a;
            kvq_status st;
            int ok;
            for (i = 0; i < (size_t)nd; i++) { shape[i] = 1 + rng_below(6); count *= shape[i]; }
            for (i = 0; i < count; i++) {
                uint32_t u = rng_u32();
                if (i % 5 == 1) u = (u & 0x807FFFFFu) | 0x7F800000u;   /* NaN/Inf   */
                if (i % 7 == 2) u &= 0x807FFFFFu;                      /* subnormal */
                if (i % 11 == 3) u = 0x80000000u;                      /* -0        */
                data[i] = u2f(u);
            }
            st = npy_save(path, data, shape, nd);
            CHECK(st == KVQ_OK, "npy_save %d dims: status %d", nd, (int)st);
            poison(&a, sizeof a);
            st = npy_load(path, &a);
            CHECK(st == KVQ_OK, "npy_load %d dims: status %d", nd, (int)st);
            if (st != KVQ_OK) continue;
            ok = a.ndim == nd && a.count == count && memcmp(a.data, data, count * 4) == 0;
            for (i = 0; i < (size_t)nd; i++) ok = ok && a.shape[i] == shape[i];
            CHECK(ok, "npy round trip %d dims: shape or bits differ", nd);
            npy_free(&a);
            /* the file, read back raw                                        */
            flen = read_file(path, file, sizeof file);
            hlen = flen >= 10 ? (size_t)file[8] | ((size_t)file[9] << 8) : 0;
            ok = flen >= 10 && memcmp(file, "\x93NUMPY\x01\x00", 8) == 0 &&
                 (10 + hlen) % 64 == 0 && flen == 10 + hlen + 4 * count &&
                 file[10 + hlen - 1] == '\n';
            if (ok) {
                char h[512], *p;
                size_t dims[8], nd_seen = 0;
                memcpy(h, file + 10, hlen < 511 ? hlen : 511);
                h[hlen < 511 ? hlen : 511] = '\0';
                ok = strstr(h, "'descr': '<f4'") && strstr(h, "'fortran_order': False") &&
                     (p = strstr(h, "'shape': (")) != NULL;
                if (ok) {                        /* integers up to ')'         */
                    p += strlen("'shape': (");
                    while (*p && *p != ')' && nd_seen < 8) {
                        if (*p >= '0' && *p <= '9') dims[nd_seen++] = (size_t)strtoul(p, &p, 10);
                        else if (*p == ',' || *p == ' ') p++;
                        else { ok = 0; break; }
                    }
                    ok = ok && *p == ')' && nd_seen == (size_t)nd;
                    for (i = 0; ok && i < (size_t)nd; i++) ok = dims[i] == shape[i];
                }
                for (i = 0; ok && i < count; i++) {
                    const unsigned char *e = file + 10 + hlen + 4 * i;
                    uint32_t u = (uint32_t)e[0] | ((uint32_t)e[1] << 8) |
                                 ((uint32_t)e[2] << 16) | ((uint32_t)e[3] << 24);
                    ok = u == f2u(data[i]);
                }
            }
            CHECK(ok, "npy_save %d dims: file layout is not a valid '<f4' C-order .npy", nd);
        }

    /* load errors leave *out untouched                                       */
    {
        npy_array a;
        kvq_status st;
        FILE *f;
        static const char junk[] = "\x93NUMPX this is not an npy file";
        poison(&a, sizeof a);
        st = npy_load(NULL, &a);
        CHECK(st == KVQ_ERR_NULL && is_poison(&a, sizeof a), "npy_load(NULL path): %d", (int)st);
        CHECK(npy_load(path, NULL) == KVQ_ERR_NULL, "npy_load(NULL out)");
        st = npy_load("/nonexistent-kvq-dir/none.npy", &a);
        CHECK(st == KVQ_ERR_IO && is_poison(&a, sizeof a), "npy_load(missing file): %d", (int)st);
        /* a directory opens with fopen on Linux but cannot be read          */
        st = npy_load("/", &a);
        CHECK(st == KVQ_ERR_IO && is_poison(&a, sizeof a),
              "npy_load(\"/\", a directory): status %d, expected KVQ_ERR_IO", (int)st);
        f = fopen(path, "wb");
        if (f) { fwrite(junk, 1, sizeof junk - 1, f); fclose(f); }
        st = npy_load(path, &a);
        CHECK(st == KVQ_ERR_FORMAT && is_poison(&a, sizeof a), "npy_load(junk): %d", (int)st);
    }

    /* save errors leave an existing file byte-identical                      */
    {
        static const unsigned char before[16] = { 0xA5, 0xA5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 };
        unsigned char after[32] = { 0 };
        float d[4] = { 1, 2, 3, 4 };
        size_t sh_ok[4] = { 2, 2, 1, 1 }, sh_zero[2] = { 2, 0 }, sh_big[2] = { SIZE_MAX / 2, 3 };
        size_t sh_big4[2] = { SIZE_MAX / 4 + 1, 1 };
        struct { const char *p; const float *d; const size_t *s; int nd; kvq_status want; const char *what; } cs[9];
        size_t k;
        FILE *f;
        int n = 0;
        if (!make_tmp(path2, sizeof path2)) { CHECK(0, "mkstemp failed"); remove(path); return; }
        cs[n].p = path2; cs[n].d = NULL; cs[n].s = sh_ok; cs[n].nd = 2; cs[n].want = KVQ_ERR_NULL; cs[n++].what = "data NULL";
        cs[n].p = path2; cs[n].d = d; cs[n].s = NULL; cs[n].nd = 2; cs[n].want = KVQ_ERR_NULL; cs[n++].what = "shape NULL";
        cs[n].p = path2; cs[n].d = d; cs[n].s = sh_ok; cs[n].nd = 0; cs[n].want = KVQ_ERR_SIZE; cs[n++].what = "ndim 0";
        cs[n].p = path2; cs[n].d = d; cs[n].s = sh_ok; cs[n].nd = 5; cs[n].want = KVQ_ERR_SIZE; cs[n++].what = "ndim 5";
        cs[n].p = path2; cs[n].d = d; cs[n].s = sh_ok; cs[n].nd = -1; cs[n].want = KVQ_ERR_SIZE; cs[n++].what = "ndim -1";
        cs[n].p = path2; cs[n].d = d; cs[n].s = sh_zero; cs[n].nd = 2; cs[n].want = KVQ_ERR_SIZE; cs[n++].what = "zero dim";
        cs[n].p = path2; cs[n].d = d; cs[n].s = sh_big; cs[n].nd = 2; cs[n].want = KVQ_ERR_OVERFLOW; cs[n++].what = "shape product overflows";
        cs[n].p = path2; cs[n].d = d; cs[n].s = sh_big4; cs[n].nd = 2; cs[n].want = KVQ_ERR_OVERFLOW; cs[n++].what = "byte count overflows";
        for (k = 0; k < (size_t)n; k++) {
            kvq_status st;
            f = fopen(path2, "wb");
            if (f) { fwrite(before, 1, sizeof before, f); fclose(f); }
            st = npy_save(cs[k].p, cs[k].d, cs[k].s, cs[k].nd);
            CHECK(st == cs[k].want && read_file(path2, after, sizeof after) == sizeof before &&
                  memcmp(after, before, sizeof before) == 0,
                  "npy_save %s: status %d (want %d), file %s", cs[k].what, (int)st,
                  (int)cs[k].want, memcmp(after, before, sizeof before) ? "CHANGED" : "untouched");
        }
        CHECK(npy_save(NULL, d, sh_ok, 2) == KVQ_ERR_NULL, "npy_save(NULL path)");
        CHECK(npy_save("/nonexistent-kvq-dir/x.npy", d, sh_ok, 2) == KVQ_ERR_IO,
              "npy_save to an unwritable path must be KVQ_ERR_IO");
        remove(path2);
    }
    remove(path);
}

/* Groups longer than kvq.h's 1,024-code buffer (G up to 65536 is allowed)
   take the matrix quantizer's other path: per-channel G = 2048 and 4096,
   every width and zero mode, against kvq_quantize_group + kvq_pack of each
   group (the definition), word for word and (s, z) for (s, z).            */
static void test_matrix_long_groups(void)
{
    const size_t D = 4, Gs[2] = { 2048, 4096 };
    size_t gi, i, u, d;
    int bits, zm;
    for (gi = 0; gi < 2; gi++)
        for (bits = 1; bits <= 8; bits *= 2)
            for (zm = 0; zm < 2; zm++) {
                const size_t G = Gs[gi], T = 2 * G;
                const kvq_zero_mode mode = zm ? KVQ_ZERO_INT : KVQ_ZERO_FLOAT;
                kvq_layout L;
                float *X = (float *)malloc(T * D * sizeof(float));
                uint32_t *w, *w_ref;
                kvq_sz *sz, *sz_ref;
                uint8_t *codes = (uint8_t *)malloc(G);
                int same = 1;
                CHECK(kvq_layout_init(&L, T, D, bits, G, KVQ_PER_CHANNEL) == KVQ_OK, "long groups: layout");
                w = (uint32_t *)calloc(L.total_words, sizeof(uint32_t));
                w_ref = (uint32_t *)calloc(L.total_words, sizeof(uint32_t));
                sz = (kvq_sz *)calloc(L.total_groups, sizeof(kvq_sz));
                sz_ref = (kvq_sz *)calloc(L.total_groups, sizeof(kvq_sz));
                for (i = 0; i < T * D; i++) X[i] = (float)(3.0 * rng_normal() + 0.5);
                CHECK(kvq_quantize_matrix(X, T, D, bits, G, KVQ_PER_CHANNEL, mode, w, sz) == KVQ_OK,
                      "long groups G=%zu B=%d: %s", G, bits, kvq_why());
                for (u = 0; u < L.units; u++)
                    for (d = 0; d < D; d++) {
                        const size_t g = u * D + d;
                        CHECK(kvq_quantize_group(X + u * G * D + d, G, D, bits, mode, codes, &sz_ref[g]) == KVQ_OK &&
                              kvq_pack(codes, G, bits, w_ref + g * L.geom.words_per_group) == KVQ_OK,
                              "long groups: reference");
                    }
                for (i = 0; i < L.total_groups; i++)
                    same &= sz[i].scale == sz_ref[i].scale && sz[i].zero == sz_ref[i].zero;
                same &= memcmp(w, w_ref, L.total_words * sizeof(uint32_t)) == 0;
                CHECK(same, "long groups G=%zu B=%d zero %d: the matrix quantizer differs from "
                      "kvq_quantize_group + kvq_pack", G, bits, zm);
                free(X); free(w); free(w_ref); free(sz); free(sz_ref); free(codes);
            }
}

int main(void)
{
    test_f16_exhaustive_halves();
    test_f16_against_oracles();
    test_f16_named();
    test_group_vs_reference();
    test_group_bound_tight();
    test_group_constant();
    test_group_endpoints();
    test_group_permutation();
    test_group_limits();
    test_group_hf_rules();
    test_pack();
    test_layout_table();
    test_matrix();
    test_matrix_long_groups();
    test_bad_group();
    test_bad_pack();
    test_bad_matrix();
    test_status_str();
    test_npy_parse();
    test_npy_files();
    if (!HAVE_F16) printf("test_quant: note: no _Float16, fp16 checked against the double reference only\n");
    return TEST_END("test_quant");
}
