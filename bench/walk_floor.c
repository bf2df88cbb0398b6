/* walk_floor.c - the floor of a 2-bit KV-cache decode walk on one x86 core.

   Question: can a 2-bit decode attention (KIVI-2, D = 128: 0.378 bytes read
   per stored element, 2-bit codes plus an fp16 scale and zero per 32 values)
   reach 40% of one thread's read bandwidth with exact fp32 arithmetic?  This
   program times IDEALIZED inner loops with everything in L1 (2 KB of codes
   walked again and again: memory is free here) and prints TSC cycles and ns
   per stored element, min and median of many repetitions, and the share of
   the read bandwidth such a walk could at best reach:
       % bw = 0.378 B/element * elements per second / 10.3 GB/s.
   The floor ignores the softmax, the scales and zeros (one fma per 32 values
   per side), the cache's block bookkeeping and memory itself.

   The loops, each the least exact work of one side of attention (D = 128
   channels, T = 64 tokens, 2-bit codes 0..3, n_q = 1 or 4 query heads that
   share every decoded code):
     keys    s[h][t]   = sum_d w[h][d] c[t][d]   (w = q a, a KIVI's per-
                         channel scale: scores up to the zero's constant)
     values  o[h][d]  += sum_t w[h][t] c[t][d]   (w = softmax weight x scale)
   Layouts. std: a token's 128 codes in 8 uint32 words, channel 16k + i at
   bits 2i of word k (kvq's layout). Keys walk it as dot products (lanes =
   channels, one horizontal sum per token, 8 tokens at a time); values walk
   it as axpys (lanes = channels, w[t] broadcast). lane: each 32-bit lane
   holds 16 codes along the REDUCTION index (keys: word k of 8 tokens side
   by side, lanes = tokens; values: 16 tokens of one channel, lanes =
   channels), so both sides are axpys with a broadcast weight and no
   horizontal sum; the shifts are immediates.
   Decodes of 8 codes (one ymm):
     a  shift: (word >> 2j) & 3 (vpsrlvd; lane layout: vpsrld imm), cvtdq2ps, fma
     b  placed: word & (3 << 2j), so lane j holds c 4^j, cvtdq2ps, fma with
        w 4^-j (exact: powers of 2; values std rescale the sums by 4^-j once);
        codes 8..15 after one vpsrld 16
     c  magic: b, but or 0x4B000000 and subtract 2^23 (vsubps) for the cvt
     d  vpermps of {0,1,2,3,0,1,2,3} by (word >> 2j) (bit 2 = the next code's
        low bit, absorbed by the table's repeat), fma
     e  pair tables (lane layout only: a table per lane would be a gather):
        16 floats w_r c + w_r+1 c' per reduction pair, looked up by the
        4-bit field: two vpermps (entries 0..7, 8..15) + vblendvps (bit 3
        shifted to the sign) + vaddps; no cvt, no fma
     f  weight table: vpermilps of w {0,1,2,3} (in-lane: the 2 low bits) by
        the shifted word, vaddps (std: values only, a table per token)
     b' c'  b and c with codes 8..15 from a second load 2 bytes on (no shift)
     g  b' for codes 0..7, c' for 8..15 (cvt's pipe and the adders shared)
     h  subnormal: no conversion at all. The masked lane c 4^j, read as a
        float, IS the subnormal c 2^(2j-149); an fma with w 2^(149-2j-E) gives
        w c 2^-E exactly (E = 24 here for |w| < 4: w 2^(125-2j) stays finite;
        values std: w 2^120, sums rescaled by 2^(29-2j) per lane). Needs DAZ
        off (the default; -ffast-math's startup code sets it, and then every
        code reads 0), E chosen per query from max |w|, and products above
        2^-126 (an unscaled fallback below, as kvq__scales_exactly does)
   Weights are prepared outside the timed loop (w 4^-j, the tables: O(D) per
   query for keys, O(T) for values, about 1/D of the walk's work).  Every
   loop's output is checked for bit equality with a scalar reference (the
   weights are multiples of 2^-8 below 4 in magnitude, so every sum is exact
   in any order), and a checksum of all outputs is printed.
   Also timed: pure ymm throughput loops (inline asm, 12 independent
   destinations) of vfmadd231ps, vcvtdq2ps and neighbours.

   Build and run (one core; others share the machine, so min of many reps):
     make B=build/floor build/floor/bench/walk_floor   (or by hand:
     gcc -std=c11 -O3 -march=native -o walk_floor bench/walk_floor.c)
     taskset -c 1 build/floor/bench/walk_floor

   Printed here (AMD EPYC Zen 1, family 23 model 1, KVM, 2 vCPU; TSC 2.00
   GHz, core 2.55 GHz by the add chain; taskset -c 1; gcc 12.2 -O3
   -march=native; streaming read 10.0-11.6 GB/s in this program's runs).
   Core cycles per stored element, min/median of 4001 reps; K+V: % of
   10.3 GB/s at 2.5 GHz from the mean of the two sides' mins (40% needs
   0.23 cycles):
     lay  decode      keys nq=1   values 1    keys 4      values 4    K+V nq=1 nq=4
     std  a shift     0.696/0.700 0.652/0.655 1.253/1.291 1.170/1.186 13.6%  7.6%
     std  b placed    0.420/0.425 0.381/0.384 0.856/0.861 0.755/0.762 22.9% 11.4%
     std  c magic     0.496/0.498 0.479/0.482 0.967/0.972 0.908/0.913 18.8%  9.8%
     std  d vpermps   1.024/1.032 1.004/1.005 1.568/1.572 1.475/1.480  9.0%  6.0%
     std  f w table        -      1.003/1.004      -      2.505/2.542   -     -
     std  b' 2 loads  0.418/0.418 0.383/0.386 0.873/0.882 0.770/0.782 22.9% 11.2%
     std  c' 2 loads  0.485/0.489 0.455/0.457 0.937/0.944 0.885/0.889 19.5% 10.1%
     std  g cvt/magic 0.442/0.445 0.401/0.404 0.852/0.858 0.806/0.811 21.8% 11.1%
     std  h subnormal 0.295/0.299 0.248/0.252 0.697/0.704 0.616/0.625 33.8% 14.0%
     lane a shift     0.371/0.376 0.375/0.377 0.852/0.858 0.865/0.868 24.6% 10.7%
     lane b placed    0.379/0.380 0.382/0.383 0.808/0.816 0.813/0.822 24.1% 11.3%
     lane c magic     0.428/0.431 0.431/0.434 0.936/0.942 0.942/0.947 21.4%  9.8%
     lane d vpermps   0.548/0.549 0.549/0.549 1.105/1.117 1.113/1.122 16.7%  8.3%
     lane e pair tab  0.517/0.517 0.519/0.520 2.006/2.019 2.009/2.064 17.7%  4.6%
     lane f w table   0.590/0.610 0.598/0.601 2.123/2.342 2.146/2.192 15.5%  4.3%
     lane b' 2 loads  0.377/0.379 0.379/0.381 0.784/0.790 0.802/0.807 24.3% 11.6%
     lane c' 2 loads  0.410/0.413 0.411/0.415 0.947/0.952 0.958/0.963 22.3%  9.6%
     lane g cvt/magic 0.383/0.387 0.385/0.388 0.874/0.880 0.891/0.897 23.9% 10.4%
     lane h subnormal 0.207/0.210 0.212/0.214 0.684/0.692 0.702/0.708 43.8% 13.2%
   Core cycles per ymm op, independent: fma, mul, add, blendv 1.0; cvtdq2ps
   2.0; vpand 0.5; vpsrld imm 2.0; vpsrlvd, vpermps, vpermilps 4.0. Mixes,
   cycles per element: b (and cvt fma) 0.38, c (and or sub fma) 0.33, g 0.27,
   h (and fma) 0.18, b with 4 heads 0.74 (cvt and fma contend: 6 + 6 take
   17 cycles, not 12). So: one head reaches 40% only with h (no conversion)
   in the lane layout, 0.21 of the 0.23 cycles, before softmax and scales;
   four heads cannot: 4 fma per 8 codes at 1 fma a cycle is 0.5 cycles per
   element (18% at 2.5 GHz), and 2 ymm ops a cycle caps any scheme at 0.25. */

#define _POSIX_C_SOURCE 200112L
#include <immintrin.h>
#include <x86intrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#define PLACED(v) ((v) == VB || (v) == VC || (v) == VB2 || (v) == VC2 || (v) == VG)
#define TWOLOADS(v) ((v) == VB2 || (v) == VC2 || (v) == VG || (v) == VH)
#define AI static inline __attribute__((always_inline))
#ifdef __clang__
#define KERNEL static __attribute__((noinline)) void
#else /* noipa: gcc may not fold two calls of a walk into one */
#define KERNEL static __attribute__((noinline, noipa)) void
#endif
#define A32 __attribute__((aligned(32)))

enum { D = 128, T = 64, W = D / 16, NQMAX = 4, ELEMS = T * D };
enum { VA, VB, VC, VD, VE, VF, VB2, VC2, VG, VH, NV };
static const char *VNAME[NV] = {
    "a shift+and+cvt+fma", "b placed and+cvt+fma", "c placed magic or+sub+fma",
    "d vpermps{0..3}+fma", "e pair tab 2perm+blend+add", "f w{0..3} vpermilps+add",
    "b' placed, 2 loads, no shift", "c' magic, 2 loads, no shift", "g b' lo + c' hi (cvt/magic)",
    "h subnormal: and+fma, no cvt"};

/* bytes per stored element (KIVI-2, D = 128) and one thread's read bandwidth
   measured by a streaming sum on this machine (the brief's numbers) */
static const double BYTES_PER_ELEM = 0.378, READ_BW = 10.3e9;

/* ---- data ---------------------------------------------------------------- */
static uint8_t cval[T][D];                      /* (T, D) codes 0..3            */
/* (+8: the 2-loads decodes read 2 bytes past a row's last word) */
static uint32_t codes_tw[T * W + 8] A32;        /* std: (T, D/16) words         */
static uint32_t codes_kl[W * T + 8] A32;        /* keys lane: (D/16, T) words   */
static uint32_t codes_vl[(T / 16) * D + 8] A32; /* values lane: (T/16, D) words */
static float wk[NQMAX][D] A32, wks[NQMAX][D] A32;    /* key weights; x 4^-(d%8)   */
static float wv[NQMAX][T] A32, wvs[NQMAX][T] A32;    /* value weights; x 4^-(t%8) */
/* h: the masked code c 4^j read as a float is the subnormal c 2^(2j-149);
   keys' weights and the lane layouts' carry 2^(125-2j) (x 2^-24 overall, so
   that |w| < 4 stays finite), values std's 2^120 (products stay normal) */
static float wkd[NQMAX][D] A32, wvd[NQMAX][T] A32, wvb[NQMAX][T] A32;
static float tabk[NQMAX][D][8] A32, tabv[NQMAX][T][8] A32;     /* w {0,1,2,3}x2 */
static float pairk[NQMAX][D / 2][16] A32, pairv[NQMAX][T / 2][16] A32;
static float outk[NQMAX][T] A32, outv[NQMAX][D] A32;           /* kernels' outs */
static float refk[NQMAX][T], refv[NQMAX][D];                   /* scalar refs   */

/* ---- std layout: decode of one word's 16 codes into two ymm ------------- */
AI __m256 magic_cvt(__m256i x) /* x < 2^23: (x | 2^23 bits) - 2^23 = (float)x */
{
    return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_or_si256(x, _mm256_set1_epi32(0x4B000000))),
                         _mm256_set1_ps(8388608.0f));
}
/* the 32 bits at byte offset 2 of p: codes 8..15 at bits 0..15 */
AI uint32_t at2(const uint32_t *p)
{
    uint32_t u;
    memcpy(&u, (const char *)p + 2, 4);
    return u;
}
AI void dec_std(int v, const uint32_t *p, __m256 *lo, __m256 *hi)
{
    const __m256i b = _mm256_set1_epi32((int)*p);
    const __m256i three = _mm256_set1_epi32(3);
    const __m256i slo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i shi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
    const __m256i mask = _mm256_setr_epi32(3, 3 << 2, 3 << 4, 3 << 6, 3 << 8,
                                           3 << 10, 3 << 12, 3 << 14);
    const __m256 t0123 = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    switch (v) {
    case VA:
        *lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(b, slo), three));
        *hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(b, shi), three));
        break;
    case VB:
        *lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, mask));
        *hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b, 16), mask));
        break;
    case VC:
        *lo = magic_cvt(_mm256_and_si256(b, mask));
        *hi = magic_cvt(_mm256_and_si256(_mm256_srli_epi32(b, 16), mask));
        break;
    case VH: /* the masked codes' bits as floats: c 4^j 2^-149 */
        *lo = _mm256_castsi256_ps(_mm256_and_si256(b, mask));
        *hi = _mm256_castsi256_ps(_mm256_and_si256(_mm256_set1_epi32((int)at2(p)), mask));
        break;
    case VB2: case VC2: case VG: {
        const __m256i b2 = _mm256_set1_epi32((int)at2(p));
        *lo = v == VC2 ? magic_cvt(_mm256_and_si256(b, mask)) : _mm256_cvtepi32_ps(_mm256_and_si256(b, mask));
        *hi = v == VB2 ? _mm256_cvtepi32_ps(_mm256_and_si256(b2, mask)) : magic_cvt(_mm256_and_si256(b2, mask));
        break;
    }
    default: /* VD */
        *lo = _mm256_permutevar8x32_ps(t0123, _mm256_srlv_epi32(b, slo));
        *hi = _mm256_permutevar8x32_ps(t0123, _mm256_srlv_epi32(b, shi));
        break;
    }
}

/* eight vectors r[u] -> one vector of their eight horizontal sums */
AI __m256 hsum8(const __m256 *r)
{
    __m256 a = _mm256_hadd_ps(r[0], r[1]), b = _mm256_hadd_ps(r[2], r[3]);
    __m256 c = _mm256_hadd_ps(r[4], r[5]), d = _mm256_hadd_ps(r[6], r[7]);
    __m256 e = _mm256_hadd_ps(a, b), f = _mm256_hadd_ps(c, d);
    return _mm256_add_ps(_mm256_permute2f128_ps(e, f, 0x20), _mm256_permute2f128_ps(e, f, 0x31));
}

/* keys, std layout: s[h][t] = sum_d w[h][d] c[t][d], 8 tokens a block, one
   hsum8 per block and head; 4 accumulators per token with one head (fma
   latency 5 x 2 pipes), 2 per head with four */
AI void keys_std(int v, int nq, float *out /* (nq, T) */)
{
    const float *w = v == VH ? &wkd[0][0] : PLACED(v) ? &wks[0][0] : &wk[0][0]; /* (nq, D) */
    for (int t0 = 0; t0 < T; t0 += 8) {
        __m256 red[NQMAX][8];
        for (int u = 0; u < 8; u++) {
            const uint32_t *cw = codes_tw + (size_t)(t0 + u) * W; /* (W) */
            __m256 lo, hi;
            if (nq == 1) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
                for (int k = 0; k < W; k += 2) {
                    dec_std(v, cw + k, &lo, &hi);
                    a0 = _mm256_fmadd_ps(lo, _mm256_load_ps(w + 16 * k), a0);
                    a1 = _mm256_fmadd_ps(hi, _mm256_load_ps(w + 16 * k + 8), a1);
                    dec_std(v, cw + k + 1, &lo, &hi);
                    a2 = _mm256_fmadd_ps(lo, _mm256_load_ps(w + 16 * k + 16), a2);
                    a3 = _mm256_fmadd_ps(hi, _mm256_load_ps(w + 16 * k + 24), a3);
                }
                red[0][u] = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
            } else {
                __m256 a[NQMAX][2];
                for (int h = 0; h < nq; h++) a[h][0] = a[h][1] = _mm256_setzero_ps();
#pragma GCC unroll 8
                for (int k = 0; k < W; k++) {
                    dec_std(v, cw + k, &lo, &hi);
#pragma GCC unroll 4
                    for (int h = 0; h < nq; h++) {
                        a[h][0] = _mm256_fmadd_ps(lo, _mm256_load_ps(w + h * D + 16 * k), a[h][0]);
                        a[h][1] = _mm256_fmadd_ps(hi, _mm256_load_ps(w + h * D + 16 * k + 8), a[h][1]);
                    }
                }
                for (int h = 0; h < nq; h++) red[h][u] = _mm256_add_ps(a[h][0], a[h][1]);
            }
        }
        for (int h = 0; h < nq; h++) {
            __m256 r = hsum8(red[h]);
            if (v == VH) r = _mm256_mul_ps(r, _mm256_set1_ps(16777216.0f)); /* x 2^24 */
            _mm256_store_ps(out + h * T + t0, r);
        }
    }
}

/* values, std layout: o[h][d] = sum_t w[h][t] c[t][d]; a column of words
   (16 channels) walked over all tokens with the sums in registers: with one
   head 2 columns x 2 token parities, with four 1 column (8 accumulators) */
AI void values_std(int v, int nq, float *out /* (nq, D) */)
{
    const __m256 post = _mm256_setr_ps(1.f, 1.f / 4, 1.f / 16, 1.f / 64, 1.f / 256,
                                       1.f / 1024, 1.f / 4096, 1.f / 16384);
    const __m256 t0123 = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    const __m256i slo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i shi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
    const int C = nq == 1 ? 2 : 1, P = nq == 1 ? 2 : 1; /* columns, parities */
    for (int k0 = 0; k0 < W; k0 += C) {
        __m256 a[NQMAX][2][2][2]; /* (head, column, half, parity) */
        for (int h = 0; h < nq; h++)
            for (int c = 0; c < C; c++)
                for (int f = 0; f < 2; f++)
                    for (int p = 0; p < P; p++) a[h][c][f][p] = _mm256_setzero_ps();
#pragma GCC unroll 2
        for (int t = 0; t < T; t += P)
#pragma GCC unroll 2
            for (int p = 0; p < P; p++)
#pragma GCC unroll 2
                for (int c = 0; c < C; c++) {
                    const uint32_t *cp = codes_tw + (size_t)(t + p) * W + k0 + c, word = *cp;
                    if (v == VF) { /* table w {0,1,2,3} per token and head */
                        const __m256i b = _mm256_set1_epi32((int)word);
                        const __m256i il = _mm256_srlv_epi32(b, slo), ih = _mm256_srlv_epi32(b, shi);
#pragma GCC unroll 4
                        for (int h = 0; h < nq; h++) {
                            const __m256 tab = _mm256_mul_ps(_mm256_set1_ps(wv[h][t + p]), t0123);
                            a[h][c][0][p] = _mm256_add_ps(a[h][c][0][p], _mm256_permutevar_ps(tab, il));
                            a[h][c][1][p] = _mm256_add_ps(a[h][c][1][p], _mm256_permutevar_ps(tab, ih));
                        }
                    } else {
                        __m256 lo, hi;
                        dec_std(v, cp, &lo, &hi);
#pragma GCC unroll 4
                        for (int h = 0; h < nq; h++) {
                            const __m256 wt = _mm256_set1_ps(v == VH ? wvb[h][t + p] : wv[h][t + p]);
                            a[h][c][0][p] = _mm256_fmadd_ps(lo, wt, a[h][c][0][p]);
                            a[h][c][1][p] = _mm256_fmadd_ps(hi, wt, a[h][c][1][p]);
                        }
                    }
                }
        for (int h = 0; h < nq; h++)
            for (int c = 0; c < C; c++)
                for (int f = 0; f < 2; f++) {
                    __m256 r = a[h][c][f][0];
                    if (P == 2) r = _mm256_add_ps(r, a[h][c][f][1]);
                    if (PLACED(v)) r = _mm256_mul_ps(r, post);
                    if (v == VH) /* lane j: x 2^(29-2j) */
                        r = _mm256_mul_ps(r, _mm256_mul_ps(post, _mm256_set1_ps(536870912.0f))); /* c 4^j -> c */
                    _mm256_store_ps(out + h * D + 16 * (k0 + c) + 8 * f, r);
                }
    }
}

/* both sides, lane layout: out[h][l] = sum_r w[h][r] c[r][l], codes (R/16, L)
   words with r = 16 rb + i at bits 2i; one head: 4 lane blocks x 2 (even and
   odd i), four heads: 1 lane block x 4 x 2 */
AI void lane_walk(int v, int nq, const uint32_t *codes /* (R/16, L) */, int R, int L,
                  const float *w /* (NQMAX, R) */, const float *ws /* (NQMAX, R) */,
                  const float *wd /* (NQMAX, R) */,
                  const float *tab /* (NQMAX, R, 8) */, const float *pair /* (NQMAX, R/2, 16) */,
                  float *out /* (nq, L) */)
{
    const int NL = nq == 1 ? 4 : 1; /* lane blocks of 8 */
    const __m256i three = _mm256_set1_epi32(3);
    const __m256 t0123 = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    for (int l0 = 0; l0 < L; l0 += 8 * NL) {
        __m256 a[4][NQMAX][2]; /* (lane block, head, parity) */
        for (int lb = 0; lb < NL; lb++)
            for (int h = 0; h < nq; h++) a[lb][h][0] = a[lb][h][1] = _mm256_setzero_ps();
        for (int rb = 0; rb < R / 16; rb++) {
            __m256i x[4], x16[4];
            for (int lb = 0; lb < NL; lb++) {
                const uint32_t *cp = codes + (size_t)rb * L + l0 + 8 * lb; /* (8) */
                x[lb] = _mm256_load_si256((const __m256i *)cp);
                /* codes 8..15 at bits 0..15: a shift, or a load 2 bytes on */
                x16[lb] = TWOLOADS(v)
                              ? _mm256_loadu_si256((const __m256i *)(const void *)((const char *)cp + 2))
                              : _mm256_srli_epi32(x[lb], 16);
            }
            if (v == VE) {
#pragma GCC unroll 8
                for (int p = 0; p < 8; p++)
#pragma GCC unroll 4
                    for (int lb = 0; lb < NL; lb++) {
                        const __m256i idx = _mm256_srli_epi32(x[lb], 4 * p);
                        const __m256 sel = _mm256_castsi256_ps(_mm256_slli_epi32(x[lb], 28 - 4 * p));
#pragma GCC unroll 4
                        for (int h = 0; h < nq; h++) {
                            const float *tp = pair + ((size_t)h * (R / 2) + 8 * rb + p) * 16;
                            const __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(tp), idx);
                            const __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(tp + 8), idx);
                            a[lb][h][p & 1] = _mm256_add_ps(a[lb][h][p & 1], _mm256_blendv_ps(lo, hi, sel));
                        }
                    }
                continue;
            }
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
#pragma GCC unroll 4
                for (int lb = 0; lb < NL; lb++) {
                    const int r = 16 * rb + i;
                    /* the placed decodes' word: lane j keeps code j (or j + 8,
                       from x16) where it sits, c 4^j                         */
                    const __m256i placed = _mm256_and_si256(i < 8 ? x[lb] : x16[lb],
                                                            _mm256_set1_epi32(3 << 2 * (i & 7)));
                    __m256 c;
                    switch (v) {
                    case VA:
                        c = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x[lb], 2 * i), three));
                        break;
                    case VB:
                    case VB2:
                        c = _mm256_cvtepi32_ps(placed);
                        break;
                    case VC:
                    case VC2:
                        c = magic_cvt(placed);
                        break;
                    case VH:
                        c = _mm256_castsi256_ps(placed);
                        break;
                    case VG:
                        c = i < 8 ? _mm256_cvtepi32_ps(placed) : magic_cvt(placed);
                        break;
                    case VD:
                        c = _mm256_permutevar8x32_ps(t0123, _mm256_srli_epi32(x[lb], 2 * i));
                        break;
                    default: { /* VF */
                        const __m256i idx = _mm256_srli_epi32(x[lb], 2 * i);
#pragma GCC unroll 4
                        for (int h = 0; h < nq; h++)
                            a[lb][h][i & 1] = _mm256_add_ps(a[lb][h][i & 1], _mm256_permutevar_ps(
                                _mm256_load_ps(tab + ((size_t)h * R + r) * 8), idx));
                        continue;
                    }
                    }
                    const float *wp = v == VH ? wd : PLACED(v) ? ws : w;
#pragma GCC unroll 4
                    for (int h = 0; h < nq; h++)
                        a[lb][h][i & 1] = _mm256_fmadd_ps(c, _mm256_set1_ps(wp[h * R + r]), a[lb][h][i & 1]);
                }
        }
        for (int lb = 0; lb < NL; lb++)
            for (int h = 0; h < nq; h++)
                _mm256_store_ps(out + h * L + l0 + 8 * lb,
                                _mm256_mul_ps(_mm256_add_ps(a[lb][h][0], a[lb][h][1]),
                                              _mm256_set1_ps(v == VH ? 16777216.0f : 1.0f)));
    }
}

/* ---- one noinline function per (side, layout, decode, n_q) -------------- */
#define KS(V, NQ) KERNEL ks_##V##_##NQ(void) { keys_std(V, NQ, &outk[0][0]); }
#define VS(V, NQ) KERNEL vs_##V##_##NQ(void) { values_std(V, NQ, &outv[0][0]); }
#define KL(V, NQ) KERNEL kl_##V##_##NQ(void) { lane_walk(V, NQ, codes_kl, D, T, &wk[0][0], \
    &wks[0][0], &wkd[0][0], &tabk[0][0][0], &pairk[0][0][0], &outk[0][0]); }
#define VL(V, NQ) KERNEL vl_##V##_##NQ(void) { lane_walk(V, NQ, codes_vl, T, D, &wv[0][0], \
    &wvs[0][0], &wvd[0][0], &tabv[0][0][0], &pairv[0][0][0], &outv[0][0]); }
#define BOTH(M, V) M(V, 1) M(V, 4)
#define EXTRA(M) BOTH(M, VB2) BOTH(M, VC2) BOTH(M, VG) BOTH(M, VH)
BOTH(KS, VA) BOTH(KS, VB) BOTH(KS, VC) BOTH(KS, VD) EXTRA(KS)
BOTH(VS, VA) BOTH(VS, VB) BOTH(VS, VC) BOTH(VS, VD) BOTH(VS, VF) EXTRA(VS)
BOTH(KL, VA) BOTH(KL, VB) BOTH(KL, VC) BOTH(KL, VD) BOTH(KL, VE) BOTH(KL, VF) EXTRA(KL)
BOTH(VL, VA) BOTH(VL, VB) BOTH(VL, VC) BOTH(VL, VD) BOTH(VL, VE) BOTH(VL, VF) EXTRA(VL)

typedef struct {
    int keys, lane, v, nq;
    void (*f)(void);
    double cmin, cmed; /* TSC ticks per stored element */
    double tpc;        /* TSC ticks per core cycle, measured around the timing */
    int ok;
} kern;
#define K(S, KEYS, LANE, V) {KEYS, LANE, V, 1, S##_##V##_1, 0, 0, 0, 0}, {KEYS, LANE, V, 4, S##_##V##_4, 0, 0, 0, 0},
#define KX(S, KEYS, LANE) K(S, KEYS, LANE, VB2) K(S, KEYS, LANE, VC2) K(S, KEYS, LANE, VG) \
    K(S, KEYS, LANE, VH)
static kern kerns[] = {
    K(ks, 1, 0, VA) K(ks, 1, 0, VB) K(ks, 1, 0, VC) K(ks, 1, 0, VD) KX(ks, 1, 0)
    K(vs, 0, 0, VA) K(vs, 0, 0, VB) K(vs, 0, 0, VC) K(vs, 0, 0, VD) K(vs, 0, 0, VF) KX(vs, 0, 0)
    K(kl, 1, 1, VA) K(kl, 1, 1, VB) K(kl, 1, 1, VC) K(kl, 1, 1, VD) K(kl, 1, 1, VE) K(kl, 1, 1, VF) KX(kl, 1, 1)
    K(vl, 0, 1, VA) K(vl, 0, 1, VB) K(vl, 0, 1, VC) K(vl, 0, 1, VD) K(vl, 0, 1, VE) K(vl, 0, 1, VF) KX(vl, 0, 1)
};
enum { NK = sizeof kerns / sizeof kerns[0] };

/* ---- pure throughput loops: 12 independent ymm destinations ------------ */
#define R12(OP) \
    OP "%%ymm0\n\t" OP "%%ymm1\n\t" OP "%%ymm2\n\t" OP "%%ymm3\n\t" OP "%%ymm4\n\t" OP "%%ymm5\n\t" \
    OP "%%ymm6\n\t" OP "%%ymm7\n\t" OP "%%ymm8\n\t" OP "%%ymm9\n\t" OP "%%ymm10\n\t" OP "%%ymm11\n\t"
#define R6(OP) OP "%%ymm0\n\t" OP "%%ymm1\n\t" OP "%%ymm2\n\t" OP "%%ymm3\n\t" OP "%%ymm4\n\t" OP "%%ymm5\n\t"
#define R6B(OP) OP "%%ymm6\n\t" OP "%%ymm7\n\t" OP "%%ymm8\n\t" OP "%%ymm9\n\t" OP "%%ymm10\n\t" OP "%%ymm11\n\t"
#define CLOBBER "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", \
    "ymm10", "ymm11", "ymm12", "ymm13", "ymm14", "ymm15", "cc"
#define TPLOOP(NAME, BODY) \
    static __attribute__((noinline)) void tp_##NAME(long n) { \
        __asm__ volatile("vxorps %%ymm0, %%ymm0, %%ymm0\n\t" R12("vmovaps %%ymm0, ") \
                         "vmovaps %%ymm0, %%ymm13\n\tvmovaps %%ymm0, %%ymm14\n\tvmovaps %%ymm0, %%ymm15\n\t" \
                         "1:\n\t" BODY "dec %0\n\tjnz 1b" : "+r"(n) : : CLOBBER); }
TPLOOP(fma, R12("vfmadd231ps %%ymm15, %%ymm14, "))
TPLOOP(mul, R12("vmulps %%ymm15, %%ymm14, "))
TPLOOP(add, R12("vaddps %%ymm15, %%ymm14, "))
TPLOOP(cvt, R12("vcvtdq2ps %%ymm15, "))
TPLOOP(pand, R12("vpand %%ymm15, %%ymm14, "))
TPLOOP(psrld, R12("vpsrld $2, %%ymm15, "))
TPLOOP(psrlvd, R12("vpsrlvd %%ymm15, %%ymm14, "))
TPLOOP(permps, R12("vpermps %%ymm15, %%ymm14, "))
TPLOOP(permilps, R12("vpermilps %%ymm15, %%ymm14, "))
TPLOOP(blendv, R12("vblendvps %%ymm13, %%ymm15, %%ymm14, "))
TPLOOP(fma_cvt, R6("vfmadd231ps %%ymm15, %%ymm14, ") R6B("vcvtdq2ps %%ymm15, "))
TPLOOP(fma_add, R6("vfmadd231ps %%ymm15, %%ymm14, ") R6B("vaddps %%ymm15, %%ymm14, "))
TPLOOP(fma_pand, R6("vfmadd231ps %%ymm15, %%ymm14, ") R6B("vpand %%ymm15, %%ymm14, "))
TPLOOP(cvt_add, R6("vcvtdq2ps %%ymm15, ") R6B("vaddps %%ymm15, %%ymm14, "))
/* the decodes' own instruction mixes, without their dependencies: per 8
   codes b is and + cvt + fma, c and + or + sub + fma, g (16 codes) 2 and +
   cvt + or + sub + 2 fma, b with 4 heads and + cvt + 4 fma (h's and + fma:
   fma_pand) */
#define ON(OP, R) OP "%%ymm" #R "\n\t"
TPLOOP(mix_b, ON("vpand %%ymm15, %%ymm14, ", 0) ON("vpand %%ymm15, %%ymm14, ", 1)
       ON("vpand %%ymm15, %%ymm14, ", 2) ON("vpand %%ymm15, %%ymm14, ", 3)
       ON("vcvtdq2ps %%ymm15, ", 4) ON("vcvtdq2ps %%ymm15, ", 5) ON("vcvtdq2ps %%ymm15, ", 6)
       ON("vcvtdq2ps %%ymm15, ", 7) ON("vfmadd231ps %%ymm15, %%ymm14, ", 8)
       ON("vfmadd231ps %%ymm15, %%ymm14, ", 9) ON("vfmadd231ps %%ymm15, %%ymm14, ", 10)
       ON("vfmadd231ps %%ymm15, %%ymm14, ", 11))
TPLOOP(mix_c, ON("vpand %%ymm15, %%ymm14, ", 0) ON("vpand %%ymm15, %%ymm14, ", 1)
       ON("vpand %%ymm15, %%ymm14, ", 2) ON("vpor %%ymm15, %%ymm14, ", 3)
       ON("vpor %%ymm15, %%ymm14, ", 4) ON("vpor %%ymm15, %%ymm14, ", 5)
       ON("vsubps %%ymm15, %%ymm14, ", 6) ON("vsubps %%ymm15, %%ymm14, ", 7)
       ON("vsubps %%ymm15, %%ymm14, ", 8) ON("vfmadd231ps %%ymm15, %%ymm14, ", 9)
       ON("vfmadd231ps %%ymm15, %%ymm14, ", 10) ON("vfmadd231ps %%ymm15, %%ymm14, ", 11))
TPLOOP(mix_g, ON("vpand %%ymm15, %%ymm14, ", 0) ON("vpand %%ymm15, %%ymm14, ", 1)
       ON("vpand %%ymm15, %%ymm14, ", 2) ON("vpand %%ymm15, %%ymm14, ", 3)
       ON("vcvtdq2ps %%ymm15, ", 4) ON("vcvtdq2ps %%ymm15, ", 5)
       ON("vpor %%ymm15, %%ymm14, ", 6) ON("vpor %%ymm15, %%ymm14, ", 7)
       ON("vsubps %%ymm15, %%ymm14, ", 8) ON("vsubps %%ymm15, %%ymm14, ", 9)
       ON("vfmadd231ps %%ymm15, %%ymm14, ", 10) ON("vfmadd231ps %%ymm15, %%ymm14, ", 11)
       ON("vfmadd231ps %%ymm15, %%ymm14, ", 12) ON("vfmadd231ps %%ymm15, %%ymm14, ", 13))
TPLOOP(mix_b4, ON("vpand %%ymm15, %%ymm14, ", 0) ON("vpand %%ymm15, %%ymm14, ", 1)
       ON("vcvtdq2ps %%ymm15, ", 2) ON("vcvtdq2ps %%ymm15, ", 3) R6B("vfmadd231ps %%ymm15, %%ymm14, ")
       ON("vfmadd231ps %%ymm15, %%ymm14, ", 4) ON("vfmadd231ps %%ymm15, %%ymm14, ", 5))

/* a chain of 12 dependent 1-cycle adds: TSC ticks per core cycle */
static __attribute__((noinline)) void tp_chain(long n)
{
    long x = 0;
    __asm__ volatile("1:\n\t"
                     "add $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\t"
                     "add $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\t"
                     "add $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\t"
                     "dec %0\n\tjnz 1b" : "+r"(n), "+r"(x) : : "cc");
}

/* ---- timing ----------------------------------------------------------- */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}
enum { REPS = 4001, WALKS = 4 };
static uint64_t deltas[REPS];
/* min and median TSC ticks of one call of f over REPS reps of WALKS calls */
static void time_kernel(void (*f)(void), double *tmin, double *tmed)
{
    for (int i = 0; i < 200; i++) f();
    for (int r = 0; r < REPS; r++) {
        _mm_lfence();
        uint64_t t0 = __rdtsc();
        for (int i = 0; i < WALKS; i++) f();
        _mm_lfence();
        deltas[r] = __rdtsc() - t0;
    }
    qsort(deltas, REPS, sizeof deltas[0], cmp_u64);
    *tmin = (double)deltas[0] / WALKS;
    *tmed = (double)deltas[REPS / 2] / WALKS;
}

/* TSC ticks per core cycle now: the dependent-add chain, min of 21 */
static double ticks_per_cycle(void)
{
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < 21; r++) {
        uint64_t t0 = __rdtsc();
        tp_chain(2000);
        uint64_t dt = __rdtsc() - t0;
        if (dt < best) best = dt;
    }
    return (double)best / (2000.0 * 12);
}

/* one thread's streaming read: sum of a 256 MiB float buffer, best of 5 */
static double stream_bw(void)
{
    const size_t n = (size_t)64 << 20;
    float *buf;
    if (posix_memalign((void **)&buf, 32, n * sizeof(float))) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    double best = 0;
    volatile float sink;
    for (int rep = 0; rep < 5; rep++) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        double t0 = now_s();
        for (size_t i = 0; i < n; i += 32) {
            s0 = _mm256_add_ps(s0, _mm256_load_ps(buf + i));
            s1 = _mm256_add_ps(s1, _mm256_load_ps(buf + i + 8));
            s2 = _mm256_add_ps(s2, _mm256_load_ps(buf + i + 16));
            s3 = _mm256_add_ps(s3, _mm256_load_ps(buf + i + 24));
        }
        double dt = now_s() - t0;
        float o[8];
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
        sink = o[0];
        (void)sink;
        if (n * sizeof(float) / dt > best) best = n * sizeof(float) / dt;
    }
    free(buf);
    return best;
}

/* ---- data and scalar references ---------------------------------------- */
static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
/* a weight k / 256, |k| <= 1000: every product with a code and every sum of
   up to 128 of them is exact in fp32, in any order */
static float rweight(void) { return (float)((int)(rnd() % 2001) - 1000) / 256.0f; }

static void setup(void)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) cval[t][d] = (uint8_t)(rnd() & 3);
    memset(codes_tw, 0, sizeof codes_tw);
    memset(codes_vl, 0, sizeof codes_vl);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            codes_tw[t * W + d / 16] |= (uint32_t)cval[t][d] << 2 * (d % 16);
            codes_vl[(t / 16) * D + d] |= (uint32_t)cval[t][d] << 2 * (t % 16);
        }
    for (int k = 0; k < W; k++)
        for (int t = 0; t < T; t++) codes_kl[k * T + t] = codes_tw[t * W + k];
    for (int h = 0; h < NQMAX; h++) {
        for (int d = 0; d < D; d++) wk[h][d] = rweight();
        for (int t = 0; t < T; t++) wv[h][t] = rweight();
        for (int d = 0; d < D; d++) wks[h][d] = wk[h][d] / (float)(1 << 2 * (d % 8));
        for (int t = 0; t < T; t++) wvs[h][t] = wv[h][t] / (float)(1 << 2 * (t % 8));
        for (int d = 0; d < D; d++) wkd[h][d] = ldexpf(wk[h][d], 125 - 2 * (d % 8));
        for (int t = 0; t < T; t++) wvd[h][t] = ldexpf(wv[h][t], 125 - 2 * (t % 8));
        for (int t = 0; t < T; t++) wvb[h][t] = ldexpf(wv[h][t], 120);
        for (int d = 0; d < D; d++)
            for (int e = 0; e < 8; e++) tabk[h][d][e] = wk[h][d] * (float)(e & 3);
        for (int t = 0; t < T; t++)
            for (int e = 0; e < 8; e++) tabv[h][t][e] = wv[h][t] * (float)(e & 3);
        for (int p = 0; p < D / 2; p++)
            for (int e = 0; e < 16; e++)
                pairk[h][p][e] = wk[h][2 * p] * (float)(e & 3) + wk[h][2 * p + 1] * (float)(e >> 2);
        for (int p = 0; p < T / 2; p++)
            for (int e = 0; e < 16; e++)
                pairv[h][p][e] = wv[h][2 * p] * (float)(e & 3) + wv[h][2 * p + 1] * (float)(e >> 2);
        for (int t = 0; t < T; t++) {
            float s = 0;
            for (int d = 0; d < D; d++) s += wk[h][d] * (float)cval[t][d];
            refk[h][t] = s;
        }
        for (int d = 0; d < D; d++) {
            float s = 0;
            for (int t = 0; t < T; t++) s += wv[h][t] * (float)cval[t][d];
            refv[h][d] = s;
        }
    }
}

int main(void)
{
    setup();

    /* TSC ticks per ns, against CLOCK_MONOTONIC over 0.2 s */
    double s0 = now_s();
    uint64_t c0 = __rdtsc();
    while (now_s() - s0 < 0.2) {}
    const double tsc_ghz = (double)(__rdtsc() - c0) / ((now_s() - s0) * 1e9);
    printf("walk_floor: D=%d T=%d (codes %d B per layout), %d reps x %d walks, TSC %.4f GHz\n",
           D, T, (int)sizeof codes_tw, REPS, WALKS, tsc_ghz);
    const double bw = stream_bw();
    printf("streaming read, one thread, 256 MiB float sum: %.2f GB/s (the %% below use %.1f)\n\n",
           bw / 1e9, READ_BW / 1e9);

    /* pure throughput: TSC ticks per ymm instruction */
    struct { const char *name; void (*f)(long); int ops, codes; } tps[] = {
        {"dependent add", tp_chain, 12, 0}, {"vfmadd231ps", tp_fma, 12, 0}, {"vmulps", tp_mul, 12, 0}, {"vaddps", tp_add, 12, 0}, {"vcvtdq2ps", tp_cvt, 12, 0},
        {"vpand", tp_pand, 12, 0}, {"vpsrld imm", tp_psrld, 12, 0}, {"vpsrlvd", tp_psrlvd, 12, 0},
        {"vpermps", tp_permps, 12, 0}, {"vpermilps var", tp_permilps, 12, 0}, {"vblendvps", tp_blendv, 12, 0},
        {"6 fma + 6 cvt", tp_fma_cvt, 12, 0}, {"6 fma + 6 add", tp_fma_add, 12, 0},
        {"6 fma + 6 pand", tp_fma_pand, 12, 0}, {"6 cvt + 6 add", tp_cvt_add, 12, 0},
        {"mix b: and cvt fma", tp_mix_b, 12, 32}, {"mix c: and or sub fma", tp_mix_c, 12, 24},
        {"mix g: cvt/magic", tp_mix_g, 14, 32}, {"mix h: and fma", tp_fma_pand, 12, 48}, {"mix b, 4 heads", tp_mix_b4, 12, 16}};
    printf("throughput, 12 (14) independent ymm ops a loop iteration, min of 51; \"dependent add\":\n"
           "a chain of 1-cycle integer adds = TSC ticks per core cycle; cycles = ticks / that\n");
    double tpc = 1;
    for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
        const long n = 20000;
        uint64_t best = UINT64_MAX;
        for (int r = 0; r < 51; r++) {
            uint64_t t0 = __rdtsc();
            tps[i].f(n);
            uint64_t dt = __rdtsc() - t0;
            if (dt < best) best = dt;
        }
        const double tk = (double)best / ((double)n * tps[i].ops);
        if (i == 0) tpc = tk;
        printf("  %-22s %.3f ticks %.3f ns %.3f cycles per op", tps[i].name, tk, tk / tsc_ghz, tk / tpc);
        if (tps[i].codes)
            printf(", %.3f cycles per element", tk * tps[i].ops / tpc / tps[i].codes);
        printf(i == 0 ? " (core %.2f GHz)\n" : "\n", tsc_ghz / tpc);
    }

    /* the walks: check, then time */
    int fails = 0;
    double checksum = 0;
    for (int i = 0; i < NK; i++) {
        kern *k = &kerns[i];
        memset(outk, 0, sizeof outk);
        memset(outv, 0, sizeof outv);
        k->f();
        k->ok = k->keys ? !memcmp(outk, refk, sizeof(float) * k->nq * T)
                        : !memcmp(outv, refv, sizeof(float) * k->nq * D);
        fails += !k->ok;
        double tmin, tmed;
        const double tpc0 = ticks_per_cycle();
        time_kernel(k->f, &tmin, &tmed);
        k->tpc = 0.5 * (tpc0 + ticks_per_cycle());
        k->cmin = tmin / ELEMS;
        k->cmed = tmed / ELEMS;
        for (int h = 0; h < k->nq; h++)
            for (int j = 0; j < (k->keys ? T : D); j++) checksum += k->keys ? outk[h][j] : outv[h][j];
    }
    /* % of the read bandwidth: at the clock measured, and at 2.5 GHz */
#define PCT(ns) (100 * BYTES_PER_ELEM / ((ns) * 1e-9) / READ_BW)
    printf("\nwalks per stored element: TSC ticks, core cycles (ticks / ticks per cycle measured\n"
           "around each walk), %% bw = %.3f B x elements/s / %.1f GB/s at the measured clock and\n"
           "at 2.5 GHz (from the min)\n", BYTES_PER_ELEM, READ_BW / 1e9);
    printf("%-6s %-4s %-28s %2s %6s %6s %6s %6s %5s %6s %6s %s\n", "side", "lay", "decode", "nq",
           "tk_min", "tk_med", "cy_min", "cy_med", "GHz", "%bw", "%@2.5", "check");
    for (int i = 0; i < NK; i++) {
        const kern *k = &kerns[i];
        const double cy = k->cmin / k->tpc;
        printf("%-6s %-4s %-28s %2d %6.3f %6.3f %6.3f %6.3f %5.2f %5.1f%% %5.1f%% %s\n",
               k->keys ? "keys" : "values", k->lane ? "lane" : "std", VNAME[k->v], k->nq, k->cmin,
               k->cmed, cy, k->cmed / k->tpc, tsc_ghz / k->tpc, PCT(k->cmin / tsc_ghz), PCT(cy / 2.5),
               k->ok ? "exact" : "FAIL");
    }

    /* keys + values: the same decode and layout on both sides, and the best
       of each side; per element the mean of the two sides */
    printf("\nkeys + values (mean of the two sides' min per element)\n");
    for (int nq = 1; nq <= 4; nq += 3) {
        double bk = 1e9, bv = 1e9;
        int ik = -1, iv = -1;
        for (int i = 0; i < NK; i++) {
            const kern *k = &kerns[i];
            if (k->nq != nq) continue;
            if (k->keys && k->cmin / k->tpc < bk) bk = k->cmin / k->tpc, ik = i;
            if (!k->keys && k->cmin / k->tpc < bv) bv = k->cmin / k->tpc, iv = i;
            if (!k->keys) continue;
            for (int j = 0; j < NK; j++) {
                const kern *m = &kerns[j];
                if (m->keys || m->nq != nq || m->v != k->v || m->lane != k->lane) continue;
                const double tk = 0.5 * (k->cmin + m->cmin), cy = 0.5 * (k->cmin / k->tpc + m->cmin / m->tpc);
                printf("  nq=%d %-4s %-28s %.3f ticks %.3f cycles  %5.1f%% bw, %5.1f%% at 2.5 GHz\n", nq,
                       k->lane ? "lane" : "std", VNAME[k->v], tk, cy, PCT(tk / tsc_ghz), PCT(cy / 2.5));
            }
        }
        const double cy = 0.5 * (bk + bv);
        printf("  nq=%d best: keys %s %s + values %s %s: %.3f cycles, %5.1f%% at 2.5 GHz\n", nq,
               kerns[ik].lane ? "lane" : "std", VNAME[kerns[ik].v], kerns[iv].lane ? "lane" : "std",
               VNAME[kerns[iv].v], cy, PCT(cy / 2.5));
    }
    printf("\nchecksum %.6f; %s\n", checksum, fails ? "SOME CHECKS FAILED" : "all outputs exact");
    return fails != 0;
}
