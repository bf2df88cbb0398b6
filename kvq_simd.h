/* kvq_simd.h - kvq.h's fast paths: the same API and the same bits, on
   vector units. v0.9.0 - MIT license, see the end of kvq.h.

   USAGE: include this file instead of kvq.h (it includes kvq.h):
       #define KVQ_IMPLEMENTATION          // in exactly one .c/.cpp file
       #include "kvq_simd.h"
   Built with GCC or clang for AVX-512 (-mavx512f), AVX2 (-mavx2; with
   -mf16c the fp16 conversions in hardware, with -mfma fused multiply-adds
   where kvq.h fuses them) or AArch64 (NEON), it gives kvq.h's functions
   vector bodies; on any other target, or with -DKVQ_NO_SIMD, it adds
   nothing and kvq.h's plain bodies run.

   WHAT IT IS. kvq.h is the definition: every function computes through
   its plain C. A handful of kvq.h's functions begin with KVQ__FAST(NAME),
   which hands the call to kvq__simd_NAME below when this file is
   included. Each body here is held to the kvq.h function of that name,
   bit for bit: the same codes and (s, z), the same reads, and the same
   EAGER and ONLINE outputs, because it performs the same floating-point
   operations in the same order (kvq.h Sec. 8.1 defines ONLINE's order;
   tests/simd_check.c builds kvq.h alone and this file for AVX2 with and
   without FMA and for the building machine, and compares them on every
   cache kind). Which body runs depends on the instruction set only
   (-mavx2, -mavx512f, AArch64), never on a CPU model or -mtune.

   CONTENTS
     1. the vector layer: 16 lanes as 16 / W native vectors (W = 16
        AVX-512, 8 AVX2, 4 NEON) -> kvq__simd_dot, kvq__simd_f16_row,
        kvq__simd_token_key_dot, kvq__simd_f16_stored / _store
     2. the quantizer: 16 groups side by side -> kvq__simd_quantize_unit,
        kvq__simd_quantize_units, kvq__simd_absmax_or_nonfinite
     3. the ONLINE walk -> kvq__simd_walk_cache, kvq__simd_map_lanes
     4. the rotation -> kvq__simd_rotate_into
   What each path costs (instructions per element, per ISA, and the
   measurements behind each choice) is in bench/RESULTS.md and walkthrough
   chapter 11.
*/
#ifndef KVQ_SIMD_H
#define KVQ_SIMD_H
/* The vector width W: one per instruction set, none without one.         */
#if !defined(KVQ_NO_SIMD) && (defined(__GNUC__) || defined(__clang__))
#if defined(__AVX512F__)
#define KVQ__W 16
#elif defined(__AVX2__)
#define KVQ__W 8
#elif defined(__aarch64__)
#define KVQ__W 4
#endif
#endif
#ifdef KVQ__W
#define KVQ__SIMD 1           /* kvq.h: hand the KVQ__FAST calls over here */
#endif
#endif /* KVQ_SIMD_H */

#include "kvq.h"

#if defined(KVQ_IMPLEMENTATION) && defined(KVQ__SIMD_HOOKED) && !defined(KVQ_SIMD_IMPLEMENTATION_DONE)
#define KVQ_SIMD_IMPLEMENTATION_DONE
#ifdef __cplusplus
extern "C" {
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ------------------------------------------------------------------------ */
/* 1. the vector layer                                                      */
/* ------------------------------------------------------------------------ */
/* ---- 16 lanes at a time ------------------------------------------------
   The hot loops of Sec. 6 and 8 work on 16 floats at a time through the
   few helpers below. A kvq__v16 is those 16 lanes held as 16 / KVQ__W
   native vectors of KVQ__W lanes each, so every operation maps onto the
   machine's own registers:

       KVQ__W = 16   AVX-512 (one zmm)          GCC or clang vector
       KVQ__W =  8   AVX2 (two ymm)             extensions
       KVQ__W =  4   AArch64 NEON (four q regs)

   Lane i is lane i % W of part i / W, which is also its place in memory.
   Each helper is one loop over the parts doing the same operation on
   every lane, so every width computes the floats of kvq.h's plain loops:
   the same operations, lane by lane, in the same order (kvq.h's
   kvq__fmadd and kvq__tree16; tests/simd_check.c compares them bit for
   bit). Helpers take and return kvq__v16 by value and are always
   inlined: the parts stay in registers.                                    */
#define KVQ__PARTS (16 / KVQ__W)
/* The 16-lane helpers and the kernels built on them are forced inline, so
   that the parts stay in registers and the kernels' constants reach their
   loops.                                                                   */
#define KVQ__VINLINE KVQ__INLINE
/* A kernel the compiler would inline or not as edits elsewhere shift its
   sizes: kvq__scores_channel, inlined into kvq__online_walk, gave its
   channel tiles fewer registers (AVX2, KIVI-4, 4 heads: +2.6%
   instructions), so it stays a call.                                    */
#if defined(__GNUC__) || defined(__clang__)
#define KVQ__NOINLINE __attribute__((noinline))
#else
#define KVQ__NOINLINE
#endif

#if KVQ__W == 4
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif
typedef float    kvq__vf __attribute__((vector_size(4 * KVQ__W)));   /* W floats */
typedef int32_t  kvq__vi __attribute__((vector_size(4 * KVQ__W)));
typedef uint32_t kvq__vu __attribute__((vector_size(4 * KVQ__W)));
typedef float    kvq__vf_unaligned __attribute__((vector_size(4 * KVQ__W), aligned(4), may_alias));
#define KVQ__VLOAD(p)        (*(const kvq__vf_unaligned *)(const void *)(p))
#define KVQ__VSTORE(p, v)    (*(kvq__vf_unaligned *)(void *)(p) = (v))
static const kvq__vf kvq__vf_zero = { 0 };  /* (not a compound literal: C++) */
static const kvq__vu kvq__vu_zero = { 0 };
#define KVQ__VZERO           kvq__vf_zero
#define kvq__vu_splat(x)     (kvq__vu_zero + (uint32_t)(x))
#define kvq__vf_of_vi(x)     __builtin_convertvector(x, kvq__vf)        /* value */
#define kvq__vi_of_vf(x)     __builtin_convertvector(x, kvq__vi)        /* value */
#define kvq__vf_bits(x)      ((kvq__vf)(x))                             /* bits  */
/* a > b ? a : b and a < b ? a : b lane by lane. x86's maxps / minps are
   defined as exactly that (the second operand when the compare is false:
   equal zeros, NaN), so one instruction; elsewhere by masks (NEON's fmax
   orders -0 < +0 and would differ).                                       */
#if KVQ__W == 16
#define kvq__vmax(a, b)      ((kvq__vf)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define kvq__vmin(a, b)      ((kvq__vf)_mm512_min_ps((__m512)(a), (__m512)(b)))
#elif KVQ__W == 8
#define kvq__vmax(a, b)      ((kvq__vf)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define kvq__vmin(a, b)      ((kvq__vf)_mm256_min_ps((__m256)(a), (__m256)(b)))
#else
#define kvq__vmax(a, b)      kvq__vselect((a) > (b), a, b)
#define kvq__vmin(a, b)      kvq__vselect((a) < (b), a, b)
#endif
#define kvq__vselect(m, a, b) \
    ((kvq__vf)(((kvq__vi)(a) & (m)) | ((kvq__vi)(b) & ~(m))))

/* KVQ__VFMA(acc, a, x) = acc + a x on one part                             */
#if !defined(KVQ__FMA)
#define KVQ__VFMA(acc, a, x) ((acc) + (a) * (x))
#elif KVQ__W == 16
#define KVQ__VFMA(acc, a, x) ((kvq__vf)_mm512_fmadd_ps((__m512)(a), (__m512)(x), (__m512)(acc)))
#elif KVQ__W == 8
#define KVQ__VFMA(acc, a, x) ((kvq__vf)_mm256_fmadd_ps((__m256)(a), (__m256)(x), (__m256)(acc)))
#elif KVQ__W == 4
#define KVQ__VFMA(acc, a, x) ((kvq__vf)vfmaq_f32((float32x4_t)(acc), (float32x4_t)(a), (float32x4_t)(x)))
#endif

typedef struct kvq__v16 { kvq__vf part[KVQ__PARTS]; } kvq__v16;
typedef struct kvq__u16 { kvq__vu part[KVQ__PARTS]; } kvq__u16;   /* 16 uint32 */
/* 16 floats aligned as the vector parts, for stack buffers written a
   vector at a time and read back soon after. A 32-byte store the compiler
   cannot prove aligned is split into two 16-byte halves when tuned for
   Zen 1 (gcc -mtune=znver1), and a 32-byte load of the two halves is not
   forwarded from the store buffer: it waits for both to be written (a
   stall each time, the per-token quantizer's min and max loop doubled).
   kvq__store16a stores whole vectors.                                    */
typedef union kvq__blk16 { kvq__vf part[KVQ__PARTS]; float f[16]; } kvq__blk16;

#define KVQ__EACH(k) for ((k) = 0; (k) < KVQ__PARTS; (k)++)
static KVQ__VINLINE kvq__v16 kvq__load16(const float *p)
{
    kvq__v16 v;
    int k;
    KVQ__EACH(k) v.part[k] = KVQ__VLOAD(p + k * KVQ__W);
    return v;
}
static KVQ__VINLINE void kvq__store16(float *p, kvq__v16 v)
{
    int k;
    KVQ__EACH(k) KVQ__VSTORE(p + k * KVQ__W, v.part[k]);
}
static KVQ__VINLINE void kvq__store16a(kvq__blk16 *p, kvq__v16 v)
{
    int k;
    KVQ__EACH(k) p->part[k] = v.part[k];
}
static KVQ__VINLINE kvq__v16 kvq__splat16(float x)
{
    kvq__v16 v;
    int k;
    KVQ__EACH(k) v.part[k] = x - KVQ__VZERO;              /* x - 0 = x, -0 too */
    return v;
}
static KVQ__VINLINE kvq__v16 kvq__add16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] + b.part[k];
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__sub16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] - b.part[k];
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__mul16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] * b.part[k];
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__div16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] / b.part[k];
    return a;
}
/* acc + a x, fused where KVQ__FMA (one rounding), else a product then a
   sum                                                                     */
static KVQ__VINLINE kvq__v16 kvq__madd16(kvq__v16 acc, kvq__v16 a, kvq__v16 x)
{
    int k;
    KVQ__EACH(k) acc.part[k] = KVQ__VFMA(acc.part[k], a.part[k], x.part[k]);
    return acc;
}
static KVQ__VINLINE kvq__v16 kvq__max16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = kvq__vmax(a.part[k], b.part[k]);
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__min16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = kvq__vmin(a.part[k], b.part[k]);
    return a;
}
/* |x| lane by lane: the sign bit cleared                                 */
static KVQ__VINLINE kvq__v16 kvq__abs16(kvq__v16 x)
{
    int k;
    KVQ__EACH(k) x.part[k] = kvq__vf_bits((kvq__vu)x.part[k] & kvq__vu_splat(0x7FFFFFFFu));
    return x;
}
/* round half to even, for |x| < 2^22: (x + 1.5 2^23) - 1.5 2^23           */
static KVQ__VINLINE kvq__v16 kvq__round16(kvq__v16 x)
{
    const kvq__v16 magic = kvq__splat16(12582912.0f);
    return kvq__sub16(kvq__add16(x, magic), magic);
}
/* rintf of 16 lanes as uint32, for integral results in 0 .. 2^22. x86's
   vcvtps2dq converts by MXCSR's rounding mode, the mode rintf rounds by
   (nearest even unless the caller changed it): one instruction, where
   kvq__round16 and a truncating conversion take three; elsewhere those. */
static KVQ__VINLINE kvq__u16 kvq__rint_u16(kvq__v16 x)
{
    kvq__u16 r;
    int k;
#if KVQ__W == 16
    KVQ__EACH(k) r.part[k] = (kvq__vu)_mm512_cvtps_epi32((__m512)x.part[k]);
#elif KVQ__W == 8
    KVQ__EACH(k) r.part[k] = (kvq__vu)_mm256_cvtps_epi32((__m256)x.part[k]);
#else
    x = kvq__round16(x);
    KVQ__EACH(k) r.part[k] = (kvq__vu)kvq__vi_of_vf(x.part[k]);
#endif
    return r;
}
/* 2^n for integral n in -127..128 held as floats: n + 127 into the
   exponent field (n = -127 gives +0)                                      */
static KVQ__VINLINE kvq__v16 kvq__exp2i16(kvq__v16 n)
{
    int k;
    KVQ__EACH(k) n.part[k] = kvq__vf_bits((kvq__vi_of_vf(n.part[k]) + 127) << 23);
    return n;
}

#if KVQ__W == 4
/* 4 stored halves -> 4 floats by AArch64's fcvtl (exact, as every fp16 ->
   fp32 conversion is)                                                     */
static KVQ__INLINE float32x4_t kvq__f16x4(const kvq_f16 *h)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)h)));
}
#endif

/* A vector's 16 lanes folded by + (max = 0) or by max (max = 1) in one
   fixed order: lane j (+) lane j + 8, then + 4, + 2, + 1; lane 0 is the
   result. The sum's order is what makes it reproducible; the max is exact
   in any order, and exact here for the finite values it is given. Always
   inlined, so that max is a constant.                                   */
static KVQ__INLINE float kvq__hfold16(const kvq__v16 *v, int max)
{
#if KVQ__W == 16 || KVQ__W == 8             /* by shuffles */
    __m256 a8, b8;
    __m128 s4, s2;
#if KVQ__W == 16
    a8 = _mm512_castps512_ps256((__m512)v->part[0]);
    b8 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd((__m512)v->part[0]), 1));
#else
    a8 = (__m256)v->part[0];
    b8 = (__m256)v->part[1];
#endif
    a8 = max ? _mm256_max_ps(a8, b8) : _mm256_add_ps(a8, b8);                 /* + 8 */
    s4 = _mm256_castps256_ps128(a8);
    s4 = max ? _mm_max_ps(s4, _mm256_extractf128_ps(a8, 1))
             : _mm_add_ps(s4, _mm256_extractf128_ps(a8, 1));                   /* + 4 */
    s2 = max ? _mm_max_ps(s4, _mm_movehl_ps(s4, s4)) : _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s2 = max ? _mm_max_ss(s2, _mm_shuffle_ps(s2, s2, 1))                       /* + 1 */
             : _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s2);
#elif KVQ__W == 4
    float32x4_t p0 = (float32x4_t)v->part[0], p1 = (float32x4_t)v->part[1];
    float32x4_t p2 = (float32x4_t)v->part[2], p3 = (float32x4_t)v->part[3];
    float32x4_t s4 = max ? vmaxq_f32(vmaxq_f32(p0, p2), vmaxq_f32(p1, p3))
                         : vaddq_f32(vaddq_f32(p0, p2), vaddq_f32(p1, p3));
    float32x2_t s2 = max ? vmax_f32(vget_low_f32(s4), vget_high_f32(s4))       /* + 2 */
                         : vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    float a = vget_lane_f32(s2, 0), b = vget_lane_f32(s2, 1);
    return max ? (b > a ? b : a) : a + b;                                      /* + 1 */
#endif
}

/* The sum of a vector's 16 lanes in kvq__hfold16's order.                 */
static KVQ__VINLINE float kvq__hsum16(const kvq__v16 *v) { return kvq__hfold16(v, 0); }

/* The largest of a vector's 16 lanes.                                     */
static KVQ__VINLINE float kvq__hmax16(const kvq__v16 *v) { return kvq__hfold16(v, 1); }

/* e^x lane by lane for x <= 0, within 2 ulp of e^x on [-87, 0] and +0
   below about -87.7 (where e^x < 2^-126; -inf included). Cody-Waite: x =
   n ln2 + r with n = round(x log2 e) and ln2 in two parts, so r is exact
   to |r| <= ln2/2; e^r by Cephes expf's degree-5 polynomial; then 2^n
   into the exponent. The same operations, in the same order, in both the
   vector and the plain 16-lane builds.                                     */
static KVQ__VINLINE void kvq__exp16(kvq__v16 *v)
{
    kvq__v16 n, r, p, x = kvq__max16(*v, kvq__splat16(-88.0f));   /* n >= -127 */
    n = kvq__round16(kvq__mul16(x, kvq__splat16(1.44269504088896341f)));
    r = kvq__sub16(x, kvq__mul16(n, kvq__splat16(0.693359375f)));
    r = kvq__sub16(r, kvq__mul16(n, kvq__splat16(-2.12194440e-4f)));
    p = kvq__splat16(1.9875691500e-4f);
    p = kvq__madd16(kvq__splat16(1.3981999507e-3f), p, r);
    p = kvq__madd16(kvq__splat16(8.3334519073e-3f), p, r);
    p = kvq__madd16(kvq__splat16(4.1665795894e-2f), p, r);
    p = kvq__madd16(kvq__splat16(1.6666665459e-1f), p, r);
    p = kvq__madd16(kvq__splat16(5.0000001201e-1f), p, r);
    p = kvq__madd16(kvq__add16(r, kvq__splat16(1.0f)), p, kvq__mul16(r, r));
    *v = kvq__mul16(p, kvq__exp2i16(n));
}


/* a . b in a fixed order: lane j (0..15) sums the products of i = j,
   j + 16, j + 32, ... in increasing i, then the lanes are added pairwise
   (lane j += lane j + 8, then + 4, + 2, + 1). Every dot product of a query
   with a row or a group of codes uses this function, so the order is the
   same everywhere on the CPU.                                             */
static KVQ__VINLINE float kvq__simd_dot(const float *a, const float *b, size_t n)
{
    float lane[16];
    size_t i = 0, j, n16 = n & ~(size_t)15;
    kvq__v16 acc = kvq__splat16(0.0f);
    for (; i < n16; i += 16) acc = kvq__madd16(acc, kvq__load16(a + i), kvq__load16(b + i));
    kvq__store16(lane, acc);
    for (j = 0; i < n; i++, j++) lane[j] += a[i] * b[i];
    acc = kvq__load16(lane);
    return kvq__hsum16(&acc);
}

/* q . k for one per-token key whose D codes are given as floats, group g
   with stored (s_g, z_g) -> (a_g, b_g) and qsum_g = sum of q over group g:
       q . k = sum_g a_g (q_g . c_g) + sum_g b_g qsum_g
   Order: for G a multiple of 16, each group's 16-lane partial sums of
   q_d c_d are scaled by a_g and added into one 16-lane total, whose lanes
   are added once (kvq__dot's tree); then the b_g qsum_g terms in group
   order. Other G: a_g kvq__simd_dot(q_g, c_g) + b_g qsum_g, group by group.    */
static float kvq__simd_token_key_dot(const float *q, const float *codes, const kvq_sz *sz,
                                const float *qsum, size_t D, size_t G, kvq_zero_mode mode)
{
    size_t g, i, n_groups = D / G;
    float a, b, total = 0.0f;
    if (G % 16 == 0) {
        kvq__v16 sum = kvq__splat16(0.0f);
        for (g = 0; g < n_groups; g++) {
            kvq__v16 part = kvq__splat16(0.0f);
            for (i = g * G; i < (g + 1) * G; i += 16)
                part = kvq__madd16(part, kvq__load16(q + i), kvq__load16(codes + i));
            kvq__affine(sz[g], mode, &a, &b);
            sum = kvq__madd16(sum, kvq__splat16(a), part);
        }
        total = kvq__hsum16(&sum);
        for (g = 0; g < n_groups; g++) {
            kvq__affine(sz[g], mode, &a, &b);
            total += b * qsum[g];
        }
        return total;
    }
    for (g = 0; g < n_groups; g++) {
        kvq__affine(sz[g], mode, &a, &b);
        total += a * kvq__simd_dot(q + g * G, codes + g * G, G) + b * qsum[g];
    }
    return total;
}

/* D stored halves -> floats: 8 at a time with vcvtph2ps where the target
   has F16C, 4 at a time with AArch64's fcvtl, else the exact integer
   conversion (identical: fp16 -> fp32 is exact; simd_check).              */
static void kvq__simd_f16_row(const kvq_f16 *h, size_t D, float *out)
{
    size_t d = 0;
#if !defined(KVQ_NO_SIMD) && defined(__F16C__)
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(out + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + d))));
#elif KVQ__W == 4
    for (; d + 4 <= D; d += 4) vst1q_f32(out + d, kvq__f16x4(h + d));
#endif
    for (; d < D; d++) out[d] = kvq__f16_to_f32(h[d]);
}

/* kvq.h's stored fp16 conversions (Sec. 3) by F16C where the target has
   it: vcvtph2ps, and vcvtps2ph with round to nearest even (equal to kvq.h's
   integer code on every non-NaN input; kvq never converts a NaN).        */
static float kvq__simd_f16_stored(kvq_f16 h)
{
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return kvq__f16_to_f32(h);
#endif
}
static kvq_f16 kvq__simd_f16_store(float f)
{
#ifdef __F16C__
    return (kvq_f16)_mm_extract_epi16(
        _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0);
#else
    return kvq_f32_to_f16(f);
#endif
}

/* A hint that n bytes from p will be read soon: one prefetch per 64-byte
   line (GCC, clang; nothing elsewhere), into every level (prefetcht0) or,
   L2 = 1, into L2 only (prefetcht1). Reads nothing, changes nothing.     */
static KVQ__INLINE void kvq__prefetch_to(const void *p, size_t n, int L2)
{
#if defined(__GNUC__) || defined(__clang__)
    const char *at = (const char *)p;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {           /* four lines a step */
        if (L2) __builtin_prefetch(at + i, 0, 2); else __builtin_prefetch(at + i, 0, 3);
        if (L2) __builtin_prefetch(at + i + 64, 0, 2); else __builtin_prefetch(at + i + 64, 0, 3);
        if (L2) __builtin_prefetch(at + i + 128, 0, 2); else __builtin_prefetch(at + i + 128, 0, 3);
        if (L2) __builtin_prefetch(at + i + 192, 0, 2); else __builtin_prefetch(at + i + 192, 0, 3);
    }
    for (; i < n; i += 64) if (L2) __builtin_prefetch(at + i, 0, 2); else __builtin_prefetch(at + i, 0, 3);
#else
    (void)p; (void)n; (void)L2;
#endif
}
static KVQ__INLINE void kvq__prefetch(const void *p, size_t n) { kvq__prefetch_to(p, n, 0); }

/* ------------------------------------------------------------------------ */
/* 2. the quantizer                                                         */
/* ------------------------------------------------------------------------ */
#define KVQ__COLS_MAX 128         /* the widest per-token group taken 16 at a time */
static kvq_status kvq__params16(const float *lo, const float *hi, int bits, kvq_zero_mode mode,
                                kvq_sz *sz, float *s, float *z);
/* ---- the fast quantizer ------------------------------------------------
   kvq_quantize_group is the definition (Sec. 4): per group min and max,
   (s, z) stored in fp16, code = round-half-even(clamp(v, 0, N)) with
   v = (x - z) / s (float zero) or x / s + z (integer zero). The loops below
   compute exactly that, 16 values at a time on the vector layer (II.1),
   both axes through kvq__encode16: min and max are exact in any order; v
   uses the same division; the rounding is (v + 1.5 2^23) - 1.5 2^23, which
   for |v| < 2^22 rounds half to even exactly as rintf does; codes go
   straight into words. tests/test_quant.c checks every code and (s, z)
   against kvq_quantize_group.                                             */

/* The largest |x| of n values in 16 lanes, or -1 if one is not finite.
   Inside KVQ_MAX_ABS_INPUT every group's (s, z) fits fp16 (Sec. 2), so a
   matrix that passes this needs no per-group range check. A pure stream:
   each 64-byte step also asks for the line KVQ__CHECK_AHEAD floats on
   (4 KB), which Zen 1's own prefetchers leave to demand misses: cold,
   over 33.6 MB, the quantizer 8-12% faster with it, the per-token one
   another 7-12% with its own prefetch (kvq_quantize_matrix).            */
#define KVQ__CHECK_AHEAD 1024
static float kvq__simd_absmax_or_nonfinite(const float *x, size_t n)
{
    /* |x| as max(x, -x); x - x is 0 for a finite x and NaN otherwise, so
       a non-finite value anywhere makes the running sum `bad` NaN         */
    kvq__v16 m = kvq__splat16(0.0f), bad = kvq__splat16(0.0f), zero = kvq__splat16(0.0f);
    float amax, nonfinite;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        kvq__v16 v = kvq__load16(x + i);
        kvq__prefetch(x + (i + KVQ__CHECK_AHEAD < n ? i + KVQ__CHECK_AHEAD : i), 64);  /* inside x */
        m = kvq__max16(m, kvq__max16(v, kvq__sub16(zero, v)));
        bad = kvq__add16(bad, kvq__sub16(v, v));
    }
    amax = kvq__hmax16(&m);
    nonfinite = kvq__hsum16(&bad);
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
        nonfinite += x[i] - x[i];
    }
    return nonfinite != 0.0f ? -1.0f : amax;
}

/* Per-channel groups: the min and max of nc channels (16 | nc, nc <=
   KVQ__RUN_CHANNELS) over n rows (row stride D): lane c of block b is channel 16 b + c,
   the same operations on each lane in the same row order, so the same
   floats. The rows are walked 32 channels (two blocks) at a time, their
   running min and max in registers: kept in L1 instead, every row costs
   two stores a block, which bounded the per-channel quantizer on Zen 1
   (one store a cycle; a unit in L2 took 20% longer). A walk reads 128
   bytes of each row; the first walk brings the unit in from DRAM and the
   rest find it in cache (16 KB at G = 32, D = 128: no slower cold than
   the whole-row walk, bench_cpu --quantize).                            */
#define KVQ__RUN_CHANNELS 256
static KVQ__INLINE void kvq__minmax_walk(const float *x, size_t n, size_t D, int blocks,
                                         kvq__blk16 *lo /* (blocks) */, kvq__blk16 *hi)
{
    kvq__v16 l[2], h[2];
    size_t t;
    int b;
    for (b = 0; b < blocks; b++) l[b] = h[b] = kvq__load16(x + 16 * b);
    for (t = 1; t < n; t++)
        for (b = 0; b < blocks; b++) {
            const kvq__v16 v = kvq__load16(x + t * D + 16 * b);
            l[b] = kvq__min16(v, l[b]);                 /* v < lo ? v : lo */
            h[b] = kvq__max16(v, h[b]);                 /* v > hi ? v : hi */
        }
    for (b = 0; b < blocks; b++) {                      /* -0 -> +0        */
        kvq__store16a(lo + b, kvq__add16(l[b], kvq__splat16(0.0f)));
        kvq__store16a(hi + b, kvq__add16(h[b], kvq__splat16(0.0f)));
    }
}

static void kvq__minmax_run(const float *x, size_t n, size_t D, size_t nc,
                            kvq__blk16 *lo /* (nc / 16) */, kvq__blk16 *hi /* (nc / 16) */)
{
    size_t c;
    for (c = 0; c + 32 <= nc; c += 32) kvq__minmax_walk(x + c, n, D, 2, lo + c / 16, hi + c / 16);
    if (c < nc) kvq__minmax_walk(x + c, n, D, 1, lo + c / 16, hi + c / 16);
}

/* a / s lane by lane, the correctly rounded quotient, given r = 1 / s
   (itself a correctly rounded division). With fused multiply-adds without
   a division (Markstein's theorem, as in IA-64's divide): q = a r is
   within an ulp of a / s, the residual a - q s is then exact, and
   q + (a - q s) r rounds to a / s. Zen 1 retires a vector divide once per
   6 cycles at best, these three in about 2. The residual is not exact
   where it falls below the normal range, |a / s| < 2^-80 here (s >= 2^-24
   is an fp16 scale): such a quotient rounds to code 0 either way, and
   tests/simd_check.c compares every code. Without fused multiply-adds,
   the division.                                                          */
static KVQ__VINLINE kvq__v16 kvq__quot16(kvq__v16 a, kvq__v16 s, kvq__v16 r)
{
#if defined(KVQ__FMA)
    kvq__v16 q = kvq__mul16(a, r), minus_q;
    int k;
    KVQ__EACH(k) minus_q.part[k] = -q.part[k];
    return kvq__madd16(q, kvq__madd16(a, minus_q, s), r);
#else
    (void)r;
    return kvq__div16(a, s);
#endif
}

/* Sec. 4's code of 16 values lane by lane: float zero, v = (x - z) / s
   clamped to [0, N]; integer zero, v = x / s clamped to [-zp, N - zp];
   both with max and min (the same codes as the scalar comparisons: they
   differ only on -0, which rounds to code 0 either way), rounded as rintf
   (kvq__rint_u16), the integer zero's zp added after the rounding. s, z
   and N per lane: one group's for a run of values, or 16 groups' side by
   side.                                                                  */
static KVQ__VINLINE kvq__u16 kvq__encode16(kvq__v16 x, kvq__v16 s, kvq__v16 r, kvq__v16 z,
                                           kvq__v16 n_levels, kvq_zero_mode mode)
{
    kvq__v16 lo, hi;
    kvq__u16 c;
    int k;
    if (mode == KVQ_ZERO_FLOAT)
        return kvq__rint_u16(kvq__min16(kvq__max16(kvq__quot16(kvq__sub16(x, z), s, r),
                                                   kvq__splat16(0.0f)), n_levels));
    lo = kvq__sub16(kvq__splat16(0.0f), z);            /* -zp, exact       */
    hi = kvq__sub16(n_levels, z);                      /* N - zp, exact    */
    c = kvq__rint_u16(kvq__min16(kvq__max16(kvq__quot16(x, s, r), lo), hi));
    KVQ__EACH(k) c.part[k] += (kvq__vu)kvq__vi_of_vf(z.part[k]);   /* zp: integral */
    return c;
}

/* The codes of 16 consecutive values under one group's stored (s, z).    */
static void kvq__codes16_of(const float *x, float s, float z, float n_levels,
                            kvq_zero_mode mode, uint32_t *code)
{
    kvq__u16 c = kvq__encode16(kvq__load16(x), kvq__splat16(s), kvq__splat16(1.0f / s),
                               kvq__splat16(z), kvq__splat16(n_levels), mode);
    memcpy(code, c.part, sizeof c.part);                /* vector stores    */
}

/* The packed words of 16 groups side by side, lane j = group j: value c
   of lane j at x[c * stride + j], c < G; code c into word c / (32/B) at
   bit (c % (32/B)) B (Sec. 5), word w of group j to words[j wpg + w].
   sc, zc: each group's stored (s, z), s = 0 where every code is 0 (a
   constant float-zero group); such a lane computes with s = 1, z = 0 and
   its words are cleared whole. B and the zero mode reach the body as
   constants (kvq__words16 below), so a word's shifts are a running count,
   with no division by 32/B per code.                                    */
static KVQ__INLINE void kvq__words16_b(const float *x, size_t stride, size_t G,
                                       const float *sc, const float *zc, int bits,
                                       kvq_zero_mode mode, uint32_t *words /* (16, wpg) */)
{
    const kvq__v16 n_levels = kvq__splat16((float)((1u << bits) - 1u));
    const size_t wpg = kvq_packed_words(G, bits);
    float s_lane[16], z_lane[16];
    uint32_t keep[16];
    kvq__v16 s, r, z;
    size_t c = 0, w, j;
    for (j = 0; j < 16; j++) {
        keep[j] = sc[j] == 0.0f ? 0u : ~0u;
        s_lane[j] = sc[j] == 0.0f ? 1.0f : sc[j];
        z_lane[j] = sc[j] == 0.0f ? 0.0f : zc[j];
    }
    s = kvq__load16(s_lane);
    z = kvq__load16(z_lane);
    r = kvq__div16(kvq__splat16(1.0f), s);          /* once per 16 groups */
    for (w = 0; w < wpg; w++) {
        kvq__vu word[KVQ__PARTS];
        uint32_t out[16];
        unsigned shift;
        int k;
        KVQ__EACH(k) word[k] = kvq__vu_splat(0);
        for (shift = 0; shift < 32u && c < G; shift += (unsigned)bits, c++) {
            const kvq__u16 code = kvq__encode16(kvq__load16(x + c * stride), s, r, z, n_levels, mode);
            KVQ__EACH(k) word[k] |= code.part[k] << shift;
        }
        memcpy(out, word, sizeof out);
        for (j = 0; j < 16; j++) words[j * wpg + w] = out[j] & keep[j];
    }
}

static void kvq__words16(const float *x, size_t stride, size_t G, const float *s /* (16) */,
                         const float *z /* (16) */, int bits, kvq_zero_mode mode, uint32_t *words)
{
#define KVQ__WORDS16_B(b) (mode == KVQ_ZERO_FLOAT ? kvq__words16_b(x, stride, G, s, z, b, KVQ_ZERO_FLOAT, words) \
                                                  : kvq__words16_b(x, stride, G, s, z, b, KVQ_ZERO_INT, words))
    switch (bits) {                             /* B and the mode as constants */
    case 1:  KVQ__WORDS16_B(1); break;
    case 2:  KVQ__WORDS16_B(2); break;
    case 4:  KVQ__WORDS16_B(4); break;
    default: KVQ__WORDS16_B(8); break;
    }
#undef KVQ__WORDS16_B
}

/* OR 16 codes, code indices c0 .. c0+15 (c0 a multiple of 16), into their
   words: B = 2 fills one word, B = 4 two, B = 8 four, B = 1 half of one.
   The codes occupy disjoint bits, so the OR of a word's lanes is the same
   in any order and the compiler may reduce them in vector lanes.          */
static KVQ__INLINE void kvq__pack16_b(const uint32_t *code, size_t c0, int bits, uint32_t *w)
{
    size_t per = 32u / (unsigned)bits, lanes = per < 16 ? per : 16, k, i;
    unsigned base = (unsigned)(c0 % per) * (unsigned)bits;
    for (k = 0; k < 16 / lanes; k++) {
        uint32_t word = 0;
        for (i = 0; i < lanes; i++)
            word |= code[k * lanes + i] << (base + (unsigned)(i * (size_t)bits));
        w[(c0 + k * lanes) / per] |= word;
    }
}

static void kvq__pack16(const uint32_t *code, size_t c0, int bits, uint32_t *w)
{
    switch (bits) {                                     /* B as a constant   */
    case 1:  kvq__pack16_b(code, c0, 1, w); break;
    case 2:  kvq__pack16_b(code, c0, 2, w); break;
    case 4:  kvq__pack16_b(code, c0, 4, w); break;
    default: kvq__pack16_b(code, c0, 8, w); break;
    }
}

/* Quantize one unit: rows X (tokens_per_unit, D) -> words, sz of the unit.
   The caller has checked sizes, finiteness and range.
     per-token    D/G groups of G consecutive values: 16 codes at a time,
                  OR-ed into their words
     per-channel  D groups of G tokens with stride D: 16 channels at a time,
                  so each token adds one code to 16 channels' words        */
/* kvq__quantize_unit's per-channel unit, 16 | D: 16 channels at a time,
   each channel's min and max from kvq__minmax_run, then each token adds
   one code to 16 channels' words, held in vector lanes until full.      */
static kvq_status kvq__quantize_channels16(const float *X /* (G, D) */, size_t D, int bits,
                                           size_t G, kvq_zero_mode mode,
                                           uint32_t *words, kvq_sz *sz)
{
    size_t wpg = kvq_packed_words(G, bits), g;
    kvq__blk16 lo_run[KVQ__RUN_CHANNELS / 16], hi_run[KVQ__RUN_CHANNELS / 16];
    for (g = 0; g < D; g += 16) {               /* per-channel, 16 at a time */
        float s[16], z[16], *lo = lo_run[g % KVQ__RUN_CHANNELS / 16].f,
              *hi = hi_run[g % KVQ__RUN_CHANNELS / 16].f;
        if (g % KVQ__RUN_CHANNELS == 0)         /* the next run's min, max  */
            kvq__minmax_run(X + g, G, D, D - g < KVQ__RUN_CHANNELS ? D - g : KVQ__RUN_CHANNELS,
                            lo_run, hi_run);
        {
            kvq_status st = kvq__params16(lo, hi, bits, mode, sz + g, s, z);
            if (st != KVQ_OK) return st;
        }
        /* where s = 0 (a constant float-zero group, or a scale that
           underflowed) every code is 0 (kvq__words16)                    */
        kvq__words16(X + g, D, G, s, z, bits, mode,
                     words + g * wpg);   /* token t of 16 channels: one row */
    }
    return KVQ_OK;
}

static kvq_status kvq__simd_quantize_unit(const float *X, size_t D, int bits,
                                     size_t G, kvq_axis axis,
                                     kvq_zero_mode mode,
                                     uint32_t *words, kvq_sz *sz)
{
    size_t wpg = kvq_packed_words(G, bits), per = 32u / (unsigned)bits, g, i, j;
    float n_levels = (float)((1u << bits) - 1u);
    uint32_t code[16];
    if (axis == KVQ_PER_TOKEN || D % 16 != 0) {
        size_t n_groups = axis == KVQ_PER_TOKEN ? D / G : D, stride = axis == KVQ_PER_TOKEN ? 1 : D;
        for (g = 0; g < n_groups; g++) {
            /* per-token: channels g*G .. g*G+G-1 of the token (stride 1);
               per-channel: tokens 0..G-1 of channel g (stride D)           */
            const float *x = axis == KVQ_PER_TOKEN ? X + g * G : X + g;
            uint32_t *w = words + g * wpg;
            float mn, mx, s, z;
            kvq_status st;
            kvq__minmax_check(x, G, stride, &mn, &mx);
            st = kvq__group_params(mn, mx, bits, mode, &sz[g]);
            if (st != KVQ_OK) return st;
            s = kvq__f16_stored(sz[g].scale);
            z = kvq__f16_stored(sz[g].zero);
            for (i = 0; i < wpg; i++) w[i] = 0;
            if (s == 0.0f) continue;            /* constant group: all 0   */
            for (i = 0; i < G; i += 16) {
                size_t m = G - i < 16 ? G - i : 16;
                if (stride == 1 && m == 16) {
                    kvq__codes16_of(x + i, s, z, n_levels, mode, code);
                    kvq__pack16(code, i, bits, w);
                    continue;
                }
                for (j = 0; j < m; j++) code[j] = kvq__code(x[(i + j) * stride], sz[g], bits, mode);
                for (j = 0; j < m; j++)
                    w[(i + j) / per] |= code[j] << ((i + j) % per * (size_t)bits);
            }
        }
        return KVQ_OK;
    }
    return kvq__quantize_channels16(X, D, bits, G, mode, words, sz);
}

/* col[a].f[r] = x[r * stride + a] for a, r < 16: a 16 x 16 block of floats
   transposed, rows of x into columns. By shuffles in registers on every
   vector ISA (log2 of the width stages of pairwise interleaves, as in any
   SIMD transpose), element by element otherwise. Scalar stores followed
   by a vector load of the same bytes cannot be forwarded and stall, which
   made the element-wise copy a third of the per-token quantizer's time.  */
static KVQ__INLINE void kvq__transpose16(const float *x, size_t stride, kvq__blk16 *col)
{
#if KVQ__W == 16
    __m512 r[16], t[16];
    int a;
    for (a = 0; a < 16; a++) r[a] = _mm512_loadu_ps(x + (size_t)a * stride);
    for (a = 0; a < 16; a += 2) {         /* interleave lanes of row pairs */
        t[a]     = _mm512_unpacklo_ps(r[a], r[a + 1]);
        t[a + 1] = _mm512_unpackhi_ps(r[a], r[a + 1]);
    }
    for (a = 0; a < 16; a += 4) {         /* then pairs of lanes            */
        __m512d lo = _mm512_castps_pd(t[a]), hi = _mm512_castps_pd(t[a + 1]);
        __m512d lo2 = _mm512_castps_pd(t[a + 2]), hi2 = _mm512_castps_pd(t[a + 3]);
        r[a]     = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        r[a + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        r[a + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        r[a + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
    for (a = 0; a < 8; a++) {             /* then 128-bit blocks, twice     */
        int src = (a / 4) * 8 + a % 4;
        t[2 * a]     = _mm512_shuffle_f32x4(r[src], r[src + 4], 0x88);
        t[2 * a + 1] = _mm512_shuffle_f32x4(r[src], r[src + 4], 0xdd);
    }
    for (a = 0; a < 8; a++) {
        int src = a % 4 * 2 + a / 4;
        r[a]     = _mm512_shuffle_f32x4(t[src], t[src + 8], 0x88);
        r[a + 8] = _mm512_shuffle_f32x4(t[src], t[src + 8], 0xdd);
    }
    for (a = 0; a < 16; a++) _mm512_store_ps(col[a].f, r[a]);
#elif KVQ__W == 8
    int rb, cb, a;                        /* four 8 x 8 blocks              */
    for (rb = 0; rb < 16; rb += 8)
        for (cb = 0; cb < 16; cb += 8) {
            /* t[a]: values cb .. cb+3 of row rb+a in the low 128 bits and
               of row rb+a+4 in the high, t[a+4] values cb+4 .. cb+7. The
               loads pair the halves (vinsertf128 from memory), so what is
               left is a 4 x 4 transpose within each half: Zen 1 moves data
               across halves slowly (vperm2f128, 8 micro-ops).            */
            __m256 t[8], u[4];
            for (a = 0; a < 4; a++) {
                const float *p = x + (size_t)(rb + a) * stride + cb, *q = p + 4 * stride;
                t[a]     = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), _mm_loadu_ps(q), 1);
                t[a + 4] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + 4)),
                                                _mm_loadu_ps(q + 4), 1);
            }
            for (a = 0; a < 8; a += 4) {
                u[0] = _mm256_unpacklo_ps(t[a], t[a + 1]);
                u[1] = _mm256_unpackhi_ps(t[a], t[a + 1]);
                u[2] = _mm256_unpacklo_ps(t[a + 2], t[a + 3]);
                u[3] = _mm256_unpackhi_ps(t[a + 2], t[a + 3]);
                _mm256_store_ps(col[cb + a].f + rb,     _mm256_shuffle_ps(u[0], u[2], 0x44));
                _mm256_store_ps(col[cb + a + 1].f + rb, _mm256_shuffle_ps(u[0], u[2], 0xee));
                _mm256_store_ps(col[cb + a + 2].f + rb, _mm256_shuffle_ps(u[1], u[3], 0x44));
                _mm256_store_ps(col[cb + a + 3].f + rb, _mm256_shuffle_ps(u[1], u[3], 0xee));
            }
        }
#elif KVQ__W == 4
    int rb, cb;                           /* sixteen 4 x 4 blocks           */
    for (rb = 0; rb < 16; rb += 4)
        for (cb = 0; cb < 16; cb += 4) {
            const float *p = x + (size_t)rb * stride + cb;
            float32x4x2_t t0 = vtrnq_f32(vld1q_f32(p), vld1q_f32(p + stride));
            float32x4x2_t t1 = vtrnq_f32(vld1q_f32(p + 2 * stride), vld1q_f32(p + 3 * stride));
            vst1q_f32(col[cb].f + rb,     vcombine_f32(vget_low_f32(t0.val[0]), vget_low_f32(t1.val[0])));
            vst1q_f32(col[cb + 1].f + rb, vcombine_f32(vget_low_f32(t0.val[1]), vget_low_f32(t1.val[1])));
            vst1q_f32(col[cb + 2].f + rb, vcombine_f32(vget_high_f32(t0.val[0]), vget_high_f32(t1.val[0])));
            vst1q_f32(col[cb + 3].f + rb, vcombine_f32(vget_high_f32(t0.val[1]), vget_high_f32(t1.val[1])));
        }
#endif
}

/* 16 per-token groups side by side: x holds groups g0 .. g0+15 one after
   another (G values each, as a row-major matrix stores them), lane j of
   every vector below is group j. Each group's min and max, (s, z) and
   codes are those of kvq__quantize_unit (the same expressions, lane by
   lane), but nothing is reduced across lanes: the values are first copied
   into columns (col[i] = value i of all 16 groups), then min, max, codes
   and the words are built a column at a time. G <= KVQ__COLS_MAX.        */
/* kvq__group_params of 16 groups from their min and max (lo, hi: -0 as
   +0), and the stored (s, z) as floats. Float zero with F16C: 8 groups an
   instruction, the same s = (max - min) / N stored by the same rounding
   (vcvtps2ph, nearest even) as the scalar _cvtss_sh, z = min; a lane that
   does not fit fp16 sends all 16 through the scalar loop, which returns
   its error as before. s and z may alias lo and hi.                      */
static kvq_status kvq__params16(const float *lo, const float *hi, int bits, kvq_zero_mode mode,
                                kvq_sz *sz /* (16) */, float *s /* (16) */, float *z /* (16) */)
{
    size_t j;
#if !defined(KVQ_NO_SIMD) && defined(__F16C__)
    if (mode == KVQ_ZERO_FLOAT) {
        const __m256 n_levels = _mm256_set1_ps((float)((1u << bits) - 1u));
        uint16_t sh[16], zh[16], over = 0;
        for (j = 0; j < 16; j += 8) {
            const __m256 mn = _mm256_loadu_ps(lo + j), mx = _mm256_loadu_ps(hi + j);
            _mm_storeu_si128((__m128i *)(void *)(sh + j),
                             _mm256_cvtps_ph(_mm256_div_ps(_mm256_sub_ps(mx, mn), n_levels),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)(void *)(zh + j),
                             _mm256_cvtps_ph(mn, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        for (j = 0; j < 16; j++)            /* exponent all ones: inf, NaN */
            over |= (uint16_t)((sh[j] & 0x7c00u) == 0x7c00u) | (uint16_t)((zh[j] & 0x7c00u) == 0x7c00u);
        if (!over) {
            for (j = 0; j < 16; j += 8) {
                _mm256_storeu_ps(s + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sh + j))));
                _mm256_storeu_ps(z + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(zh + j))));
            }
            for (j = 0; j < 16; j++) { sz[j].scale = sh[j]; sz[j].zero = zh[j]; }
            return KVQ_OK;
        }
    }
#endif
    for (j = 0; j < 16; j++) {
        kvq_status st = kvq__group_params(lo[j], hi[j], bits, mode, &sz[j]);
        if (st != KVQ_OK) return st;
        s[j] = kvq__f16_stored(sz[j].scale);
        z[j] = kvq__f16_stored(sz[j].zero);
    }
    return KVQ_OK;
}

static void kvq__quantize_16_groups(const float *x /* (16, G) */, size_t G, int bits,
                                    kvq_zero_mode mode,
                                    uint32_t *words /* (16, wpg) */, kvq_sz *sz /* (16) */)
{
    kvq__blk16 col[KVQ__COLS_MAX];             /* col[i]: value i of each group */
    float s[16], z[16];
    size_t i, j;
    kvq__v16 lo, hi;
    if (G == 0 || G > KVQ__COLS_MAX) return;          /* callers never pass */
    for (i = 0; i + 16 <= G; i += 16) kvq__transpose16(x + i, G, col + i);
    for (; i < G; i++)                                /* G % 16 columns     */
        for (j = 0; j < 16; j++) col[i].f[j] = x[j * G + i];
    lo = hi = kvq__load16(col[0].f);
    for (i = 1; i < G; i++) {
        kvq__v16 c = kvq__load16(col[i].f);
        lo = kvq__min16(lo, c);
        hi = kvq__max16(hi, c);
    }
    kvq__store16(s, kvq__add16(lo, kvq__splat16(0.0f)));   /* -0 -> +0, as */
    kvq__store16(z, kvq__add16(hi, kvq__splat16(0.0f)));   /* minmax_check */
    (void)kvq__params16(s, z, bits, mode, sz, s, z);   /* the caller checked
                                                           every range   */
    kvq__words16(col[0].f, 16, G, s, z, bits, mode, words);   /* s = 0: codes 0 */
}

/* kvq__quantize_units: per-token groups (G <= KVQ__COLS_MAX) tile the
   matrix in order, 16 of them at a time (the groups two calls on asked
   for ahead, as the first pass asks for its lines), the last few one by
   one; per-channel units one by one.                                     */
static void kvq__simd_quantize_units(const float *X, const kvq_layout *L, size_t D, int bits,
                                     size_t G, kvq_axis axis, kvq_zero_mode mode,
                                     uint32_t *words, kvq_sz *sz)
{
    const size_t wpg = L->geom.words_per_group;
    size_t g, u;
    if (axis == KVQ_PER_TOKEN && G <= KVQ__COLS_MAX) {
        for (g = 0; g + 16 <= L->total_groups; g += 16) {
            if (g + 48 <= L->total_groups)
                kvq__prefetch(X + (g + 32) * G, 16 * G * sizeof(float));
            kvq__quantize_16_groups(X + g * G, G, bits, mode, words + g * wpg, sz + g);
        }
        for (; g < L->total_groups; g++)
            kvq__simd_quantize_unit(X + g * G, G, bits, G, axis, mode, words + g * wpg, sz + g);
        return;
    }
    for (u = 0; u < L->units; u++)
        kvq__simd_quantize_unit(X + u * L->geom.tokens_per_unit * D, D, bits, G, axis, mode,
                                words + u * L->geom.groups_per_unit * wpg,
                                sz + u * L->geom.groups_per_unit);
}

/* ------------------------------------------------------------------------ */
/* 3. the ONLINE walk                                                       */
/* ------------------------------------------------------------------------ */
/* ---- ONLINE: one walk over the regions for a batch of heads -------------
   EAGER (Part I, Sec. 8) is the reference: it visits positions 0..n_pos-1
   and finds each one's key and value through the loc maps. ONLINE
   computes the same softmax but walks K where it is stored, region by
   region, KVQ_TILE entries at a time (a tile never spans two regions or
   two key units):

       quantized store  per-channel keys: up to 32 tokens of one unit;
                        per-token keys: 32 consecutive slots
       rows[0..4]       the live rows of each region, in order

   For each tile it computes every head's scores, applies the online
   softmax update, and adds the value of each present position, found
   through V's loc map (K and V of one position may sit in different
   regions: in KIVI a key is quantized while its value is in the window).
   Codes are unpacked, and fp16 rows converted, once per tile or row for
   all heads of the batch: with GQA the cache is read once per batch, not
   once per query head. No division or modulo per token on the common path.

   Summation order, the only difference from EAGER's result (the tests
   bound it): positions are visited in walk order, with the running max
   rescaled at tile boundaries, so the last bits also depend on the storage
   layout (compaction may move them), and within a tile the full-precision
   value rows are added first; both kinds go through kvq__tile_block (a
   quantized value's sum split in up to 4 partial sums per head, a row's
   in one; a tile whose entries are not consecutive in storage is added
   run by run); and 2-bit codes with one head (values, per-channel keys)
   and 2-bit per-token keys are added two codes at a time, each pair's
   term w c + w' c' first (kvq__pairs2_walk, kvq__token_block).
   Otherwise scores are the same expressions as EAGER's: a per-channel
   key's score sums channels 0..D-1 in order, dot products use kvq__dot's
   lane order, and a quantized value adds (w a) c + w b per channel.      */
typedef struct kvq__heads {
    size_t n;              /* heads in this batch                            */
    const float *q;        /* (n, D) their queries                           */
    float *out;            /* (n, D) running sum of w v                      */
    float *qa;             /* (n, D) q*a of the current key unit (per-channel
                              keys) or per-group sums of q (per-token keys)  */
    float *sc;             /* (n, KVQ_TILE) the tile's scores, then weights  */
    float *m, *l, *qb;     /* (n) running max, running sum, q.b of the unit  */
    float *row;            /* (D) one row of codes or of values, as floats   */
    const float *pairs;    /* (n, D/2, 16) 2-bit per-token keys' pair table
                              (kvq__key_pairs), or NULL                     */
    const float *q8;       /* (n, D) q 2^8 for E4M3 keys read as
                              KVQ__DEC_E4M3_2M8 (kvq__fp8_fold_ok), or NULL */
    int fp8_ahead;         /* kvq__fp8_ahead: the key blocks ask for lines   */
    int32_t pos[KVQ_TILE]; /* the tile's positions; -1 = not attended        */
    float inv_sqrt_d;
} kvq__heads;


#if KVQ__W == 16 || KVQ__W == 8
/* kvq__codes16's tables: entry i is (float)(i mod 4), (float)i            */
static const float kvq__code_floats2[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
static const float kvq__code_floats4[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
#endif

/* 16 codes of a packed group, from code c0 (a multiple of 16), as floats:
   code i sits in word (i B) / 32 at bit (i B) % 32 (Sec. 5). For B = 2 and
   4 each part broadcasts its word and shifts each lane by its own amount
   (B = 2: one word for all 16 codes; B = 4: codes 0-7 in the first word,
   8-15 in the second, picked per lane by a mask); other B one by one.
   With AVX-512 (and AVX2 for B = 2) the shifted lane indexes a table of
   the codes' floats (vpermps reads its low 4 bits, 3 with AVX2: a table
   of period 4 for B = 2, read from memory, so it takes no register), one
   instruction for a mask and a conversion, and the same floats: small
   integers are exact. AVX2 at B = 2 shifts by lane once per 16 codes:
   codes 8-15 are codes 0-7's lanes shifted 16 more, by one immediate
   shift (Intel runs either shift on the same ports).                    */
static KVQ__VINLINE void kvq__codes16(kvq__v16 *out, const uint32_t *w, size_t c0, int bits)
{
    static const uint32_t shift2[16] = { 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30 };
    static const uint32_t shift4[16] = { 0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28 };
    static const uint32_t second[16] = { 0, 0, 0, 0, 0, 0, 0, 0, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u };
    int k;
#if KVQ__W == 8
    if (bits == 2) {            /* lane j: the word >> 2j, then >> 16 more */
        kvq__vu x;
        memcpy(&x, shift2, sizeof x);
        x = kvq__vu_splat(w[c0 / 16]) >> x;                 /* codes 0-7  */
        out->part[0] = (kvq__vf)_mm256_permutevar8x32_ps(
            _mm256_loadu_ps(kvq__code_floats2), (__m256i)x);
        out->part[1] = (kvq__vf)_mm256_permutevar8x32_ps(   /* codes 8-15 */
            _mm256_loadu_ps(kvq__code_floats2), (__m256i)(x >> 16u));
        return;
    }
#endif
    if (bits == 2 || bits == 4) {
        const uint32_t *shift = bits == 2 ? shift2 : shift4;
        KVQ__EACH(k) {
            kvq__vu sh, sel, x;
            memcpy(&sh, shift + k * KVQ__W, sizeof sh);
            if (bits == 2)                      /* the part's word(s)       */
                x = kvq__vu_splat(w[c0 / 16]);
            else if (KVQ__W <= 8)
                x = kvq__vu_splat(w[c0 / 8 + (size_t)k * KVQ__W / 8]);
            else {                              /* 16 lanes span two words  */
                memcpy(&sel, second + k * KVQ__W, sizeof sel);
                x = (kvq__vu_splat(w[c0 / 8]) & ~sel) | (kvq__vu_splat(w[c0 / 8 + 1]) & sel);
            }
            x >>= sh;
#if KVQ__W == 16
            /* vpermps reads the low 4 bits of each lane: the code (B = 4)
               or the code and the next one's (B = 2, a table of period 4) */
            out->part[k] = (kvq__vf)_mm512_permutexvar_ps((__m512i)x, (__m512)kvq__load16(
                bits == 2 ? kvq__code_floats2 : kvq__code_floats4).part[0]);
#elif KVQ__W == 8                               /* B = 4: above for B = 2 */
            out->part[k] = kvq__vf_of_vi((kvq__vi)(x & 15u));
#else
            out->part[k] = kvq__vf_of_vi((kvq__vi)(x & (uint32_t)((1u << bits) - 1u)));
#endif
        }
        return;
    }
    {
        float t[16];
        size_t i;
        for (i = 0; i < 16; i++) t[i] = (float)kvq__get_code(w, c0 + i, bits);
        *out = kvq__load16(t);
    }
}

/* n codes of a packed group, from code index `first`, as floats: 16 at a
   time where the run is aligned, the rest one by one.                     */
static void kvq__unpack_f32(const uint32_t *w, size_t first, size_t n, int bits, float *out)
{
    size_t i = 0;
    if (first % 16 == 0)
        for (; i + 16 <= n; i += 16) {
            kvq__v16 v;
            kvq__codes16(&v, w, first + i, bits);
            kvq__store16(out + i, v);
        }
    for (; i < n; i++) out[i] = (float)kvq__get_code(w, first + i, bits);
}

/* ---- Sec. 4.1's formats: 16 codes as their grid's values ----------------
   kvq.h's walk reads every code through its side's table, value(c) =
   s->value[c], and every group's (a, b) through kvq__group_ab; the sums
   around them are the same for every format. So the vector walk keeps its
   kernels and changes only how 16 codes become 16 floats (DEC, a constant
   in each kernel) and how the 16 slots' (a, b) are read. Each decoding
   gives exactly the floats of s->value[] (tests/simd_check.c compares
   them for every code of every format):
     KVQ__DEC_INT    Sec. 4's codes, value(c) = c: kvq__codes16 as before
     KVQ__DEC_TAB    B = 3 or 4 (E2M1, Lloyd-Max, q4_0, INT at B = 3): a
                     16-entry table of s->value (period 2^B), one vpermps
                     (AVX-512 reads the low 4 bits of each lane; AVX2 two
                     8-entry vpermps and a blend on bit 3)
     KVQ__DEC_E4M3   the magnitude's bits (c & 0x7F) << 20 plus 120 << 23:
                     exponent e and mantissa m land as the fp32 (1 + m/8)
                     2^(e-7), exact for e >= 1; a subnormal code (e = 0,
                     m 2^-9) lands as (1 + m/8) 2^-7, and 2 v - 2^-6 (both
                     exact) is its value; then the sign bit. No fp32
                     subnormal is formed: the shorter route (the bits
                     sign << 31 | (c & 0x7F) << 20 times 2^120, 5
                     operations against 7 with AVX-512) reads m 2^-129 as
                     an fp32 subnormal, which is 0 under DAZ (kvq.h's table
                     is not), and Zen 4 multiplies subnormals slowly: fp8-
                     e4m3 with its scale of 1 on N(0,1) data (1.2% of the
                     codes subnormal) walked T = 32K, D = 128 in 1.02 ms
                     that way, 0.99 this way (0.85 without subnormals):
                     one route whose time does not depend on the data
     KVQ__DEC_E5M2   the same with (c & 0x7F) << 21 plus 112 << 23, and
                     2 v - 2^-14 for a subnormal (m 2^-16). S.1111.111 of
                     E4M3 (NaN) and E5M2's Inf and NaN are never stored.
                     Where the target has F16C (AVX-512; AVX2 with -mf16c)
                     the value rows (kvq__vals16) and, with AVX512-BW, the
                     key columns (kvq__fp8_keys16) take a shorter route to
                     the same floats: the code as fp16 bits, vcvtph2ps
                     (kvq__fp8_halves), and for E4M3 either a multiply by
                     2^8 or, as KVQ__DEC_E4M3_2M8, the 2^8 carried by the
                     query or the weights (kvq__fp8_fold_ok). Zen 4, T =
                     32K, D = 128, one head, warm: fp8-e4m3 0.99 -> 0.73
                     ms, fp8-e5m2 0.99 -> 0.62 (int8 codes 0.62)
     KVQ__DEC_S8     q8_0: c as a signed byte
     KVQ__DEC_U8     Sec. 4's codes at B = 8: c as an unsigned byte (16
                     bytes widened at once, not kvq__codes16's one by one;
                     AVX-512 and AVX2: NEON keeps kvq__codes16, as the
                     formats keep kvq.h's walk there, until they can be
                     run on an AArch64 machine)
   A lane's code sits in its low bits; bits above the code (the next codes
   of its word) are ignored by every decoding.                            */
#define KVQ__DEC_INT  0
#define KVQ__DEC_TAB  1
#define KVQ__DEC_E4M3 2
#define KVQ__DEC_E5M2 3
#define KVQ__DEC_S8   4
#define KVQ__DEC_U8   5
#define KVQ__DEC_E4M3_2M8 6  /* E4M3's value times 2^-8 (kvq__fp8_halves):
                                only where the walk has put the 2^8 into
                                the other factor of each product (the
                                query, the weights: kvq__fp8_fold)        */

/* The decoding of a side's codes, or -1 where the vector walk has none
   (Lloyd-Max at B = 2: its pair walks count on value(c) = c).            */
static int kvq__side_dec(const kvq_side *s)
{
    switch (s->format) {
    case KVQ_FORMAT_INT:         return s->bits == 3 ? KVQ__DEC_TAB :    /* NEON: */
                                        s->bits == 8 && KVQ__W >= 8 ? KVQ__DEC_U8 :  /* as */
                                        KVQ__DEC_INT;                    /* before  */
    case KVQ_FORMAT_E4M3:
    case KVQ_FORMAT_E4M3_TENSOR: return KVQ__DEC_E4M3;
    case KVQ_FORMAT_E5M2:
    case KVQ_FORMAT_E5M2_TENSOR: return KVQ__DEC_E5M2;
    case KVQ_FORMAT_Q8_0:        return KVQ__DEC_S8;
    case KVQ_FORMAT_NVFP4:
    case KVQ_FORMAT_NVFP4_4OVER6:
    case KVQ_FORMAT_LLOYD_MAX:
    case KVQ_FORMAT_LLOYD_MAX_NC:
    case KVQ_FORMAT_Q4_0:        return s->bits == 3 || s->bits == 4 ? KVQ__DEC_TAB : -1;
    default:                     return -1;
    }
}

/* KVQ__DEC_TAB's table: entry i = s->value[i mod 2^B] (B <= 4)            */
static void kvq__side_table(const kvq_side *s, float *tab /* (16) */)
{
    size_t i;
    for (i = 0; i < 16; i++) tab[i] = s->bits <= 4 ? s->value[i & ((1u << s->bits) - 1u)] : 0.0f;
}

#if KVQ__W == 16 || (KVQ__W == 8 && defined(__F16C__))
/* FP8 codes as fp16 bits, 16 lanes of 16 bits, each lane's code
   sign-extended from its byte (vpmovsxbw): the lane ssssssss s eeee mmm.
     E4M3 (E4 = 1)  (lane << 7) & 0xBF80 = s 0 eeee mmm 0000000: the fp16
                    whose 5-bit exponent field holds E4M3's 4 bits, the
                    code's value times 2^-8, exactly, subnormals included
                    (E4M3's m 2^-9 lands as fp16's m 2^7 2^-24 = m 2^-17)
     E5M2 (E4 = 0)  lane << 8 = s eeeee mm 00000000: the fp16 with the
                    code's value (E5M2 is fp16's top byte)
   vcvtph2ps then gives the fp32 exactly: an fp16 subnormal becomes a
   normal fp32, and the instruction ignores MXCSR.DAZ (Intel SDM,
   VCVTPH2PS: "MXCSR.DAZ is ignored and is treated as if it 0"; tested on
   Zen 4 for every fp16 subnormal, 512- and 256-bit forms, DAZ and FTZ
   set; tests/simd_check.c decodes all 256 codes of each under DAZ). The
   E4M3 value is then times 2^8 (kvq__fp8_scale*: exact, the smallest
   nonzero magnitude 2^-17 is a normal fp32). S.1111.111 (E4M3's NaN) and
   E5M2's Inf and NaN are never stored.                                   */
static KVQ__VINLINE __m256i kvq__fp8_halves(__m256i lane, int E4)
{
    if (E4) return _mm256_and_si256(_mm256_slli_epi16(lane, 7), _mm256_set1_epi16((short)0xBF80));
    return _mm256_slli_epi16(lane, 8);
}
static KVQ__VINLINE __m256 kvq__fp8_scale256(__m256 v, int DEC)
{
    return DEC == KVQ__DEC_E4M3 ? _mm256_mul_ps(v, _mm256_set1_ps(256.0f)) : v;
}
#if KVQ__W == 16
static KVQ__VINLINE __m512 kvq__fp8_scale512(__m512 v, int DEC)
{
    return DEC == KVQ__DEC_E4M3 ? _mm512_mul_ps(v, _mm512_set1_ps(256.0f)) : v;
}
#endif
#define KVQ__FP8_F16 1       /* kvq__vals16 decodes FP8 through fp16      */
#else
#define KVQ__FP8_F16 0
#endif
#if KVQ__W == 16 && defined(__AVX512BW__)
#define KVQ__FP8_KEYS 1      /* kvq__token_block too (kvq__fp8_keys16)    */
#else
#define KVQ__FP8_KEYS 0
#endif
#if KVQ__FP8_F16
#define KVQ__IF_FP8_F16(x) x
#else
#define KVQ__IF_FP8_F16(x) (void)0
#endif

/* Whether the n floats x may take E4M3's 2^8 (KVQ__DEC_E4M3_2M8): each 0
   or normal with |x| <= 2^119. Then x 2^8 is exact and normal, and for
   every E4M3 value v, (x 2^8)(v 2^-8) is the real number x v, so a
   product, a multiply-add and the sums after them round as with (x, v),
   under any MXCSR (no operand is subnormal: v 2^-8 >= 2^-17). A subnormal
   x is refused: under FTZ alone x 2^8 could flush where x v would not.   */
static int kvq__fp8_fold_ok(const float *x, size_t n)
{
    const float lo = ldexpf(1.0f, -126), hi = ldexpf(1.0f, 119);
    size_t i;
    int ok = 1;
    for (i = 0; i < n; i++) {
        const float a = x[i] < 0 ? -x[i] : x[i];
        ok &= a == 0.0f || (a >= lo && a <= hi);
    }
    return ok;
}

/* One part's codes (low bits of each lane) as values, by DEC; tab: the
   table as a kvq__v16 (KVQ__DEC_TAB), k: the part.                        */
static KVQ__VINLINE kvq__vf kvq__dec_part(kvq__vu x, const kvq__v16 *tab, int k, int DEC)
{
    if (DEC == KVQ__DEC_E4M3 || DEC == KVQ__DEC_E5M2 || DEC == KVQ__DEC_E4M3_2M8) {
        /* E4M3_2M8: E4M3's value, then times 2^-8 (exact: >= 2^-17)    */
        const int e4 = DEC != KVQ__DEC_E5M2;
        const kvq__vf f = kvq__vf_zero + (DEC == KVQ__DEC_E4M3_2M8 ? 1.0f / 256.0f : 1.0f);
        const kvq__vu mag = (x << (e4 ? 20u : 21u)) & (e4 ? 0x07F00000u : 0x0FE00000u);
        const kvq__vf v = kvq__vf_bits(mag + (e4 ? 0x3C000000u : 0x38000000u)),  /* + 120, 112 */
                      tiny = kvq__vf_bits(kvq__vu_splat(e4 ? 0x3C800000u : 0x38800000u));
#if KVQ__W == 16                        /* 2 v - tiny in the masked lanes  */
        const __m512 r = _mm512_mask_fmsub_ps((__m512)v, _mm512_cmplt_epu32_mask(
                                                  (__m512i)mag, _mm512_set1_epi32(0x00800000)),
                                              _mm512_set1_ps(2.0f), (__m512)tiny);
        const kvq__vf e = (kvq__vf)_mm512_ternarylogic_epi32((__m512i)r, (__m512i)(x << 24),
                                                             _mm512_set1_epi32((int)0x80000000u), 0xF8);
#else
        const kvq__vf sub = v + v - tiny;
        const kvq__vf e = kvq__vf_bits((kvq__vu)kvq__vselect((kvq__vi)(mag < 0x00800000u), sub, v) |
                                       ((x << 24) & 0x80000000u));       /* 2^-6, 2^-14 */
#endif
        return DEC == KVQ__DEC_E4M3_2M8 ? e * f : e;
    }
    if (DEC == KVQ__DEC_S8)
        return kvq__vf_of_vi(((kvq__vi)(x << 24)) >> 24);
    if (DEC == KVQ__DEC_U8)
        return kvq__vf_of_vi((kvq__vi)(x & 0xFFu));
    if (DEC == KVQ__DEC_TAB) {
#if KVQ__W == 16
        (void)k;
        return (kvq__vf)_mm512_permutexvar_ps((__m512i)x, (__m512)tab->part[0]);
#elif KVQ__W == 8
        (void)k;
        return (kvq__vf)_mm256_blendv_ps(
            _mm256_permutevar8x32_ps((__m256)tab->part[0], (__m256i)x),
            _mm256_permutevar8x32_ps((__m256)tab->part[1], (__m256i)x),
            _mm256_castsi256_ps(_mm256_slli_epi32((__m256i)x, 28)));
#else
        float t[KVQ__W], f[16];
        int i;
        memcpy(f, tab->part, sizeof f);
        (void)k;
        for (i = 0; i < KVQ__W; i++) t[i] = f[x[i] & 15u];
        return KVQ__VLOAD(t);
#endif
    }
    return kvq__vf_of_vi((kvq__vi)x);                   /* value(c) = c     */
}

/* 16 codes of a packed group from code c0 (a multiple of 16) as values:
   kvq__codes16 with DEC. B = 8: 16 bytes widened to lanes; B = 4: as
   kvq__codes16; B = 3: the 48 bits from bit 3 c0 (two words: at bit 0 or
   16 of the first), lane j's code at bit 3j of them, by three variable
   shifts (counts past 31 give 0).                                        */
static KVQ__VINLINE void kvq__vals16(kvq__v16 *out, const uint32_t *w, size_t c0, int BITS,
                                    int DEC, const kvq__v16 *tab)
{
    kvq__u16 x;
    int k;
    if (DEC == KVQ__DEC_INT) { kvq__codes16(out, w, c0, BITS); return; }
#if KVQ__W == 16 || (KVQ__W == 8 && defined(__F16C__))
    if (DEC == KVQ__DEC_E4M3 || DEC == KVQ__DEC_E5M2 || DEC == KVQ__DEC_E4M3_2M8) {
        const unsigned char *b = (const unsigned char *)(const void *)w + c0;   /* 16 bytes */
        const __m256i h = kvq__fp8_halves(_mm256_cvtepi8_epi16(                /* as halves */
            _mm_loadu_si128((const __m128i *)(const void *)b)), DEC != KVQ__DEC_E5M2);
#if KVQ__W == 16
        out->part[0] = (kvq__vf)kvq__fp8_scale512(_mm512_cvtph_ps(h), DEC);
#else
        out->part[0] = (kvq__vf)kvq__fp8_scale256(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), DEC);
        out->part[1] = (kvq__vf)kvq__fp8_scale256(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), DEC);
#endif
        return;
    }
#endif
    if (BITS == 8) {
        const unsigned char *b = (const unsigned char *)(const void *)w + c0;
#if KVQ__W == 16
        x.part[0] = (kvq__vu)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)b));
#elif KVQ__W == 8
        x.part[0] = (kvq__vu)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)b));
        x.part[1] = (kvq__vu)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 8)));
#else
        uint32_t t[16];
        for (k = 0; k < 16; k++) t[k] = b[k];
        memcpy(x.part, t, sizeof t);
#endif
    } else if (BITS == 4) {
        static const uint32_t shift4[16] = { 0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28 };
        static const uint32_t second[16] = { 0, 0, 0, 0, 0, 0, 0, 0, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u };
        KVQ__EACH(k) {
            kvq__vu sh, sel;
            memcpy(&sh, shift4 + k * KVQ__W, sizeof sh);
            if (KVQ__W <= 8)
                x.part[k] = kvq__vu_splat(w[c0 / 8 + (size_t)k * KVQ__W / 8]);
            else {                              /* 16 lanes span two words  */
                memcpy(&sel, second + k * KVQ__W, sizeof sel);
                x.part[k] = (kvq__vu_splat(w[c0 / 8]) & ~sel) | (kvq__vu_splat(w[c0 / 8 + 1]) & sel);
            }
            x.part[k] >>= sh;
        }
    } else {                                    /* B = 3                    */
        const size_t at = 3 * c0;
        const uint32_t lo = w[at / 32], hi = w[at / 32 + 1], off = (uint32_t)(at % 32);
#if KVQ__W == 16 || KVQ__W == 8
        static const uint32_t three[16] = { 0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45 };
        KVQ__EACH(k) {
            kvq__vu s;
            memcpy(&s, three + k * KVQ__W, sizeof s);
            s += off;
#if KVQ__W == 16
            x.part[k] = (kvq__vu)_mm512_or_si512(
                _mm512_or_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)lo), (__m512i)s),
                                _mm512_sllv_epi32(_mm512_set1_epi32((int)hi), (__m512i)(32u - s))),
                _mm512_srlv_epi32(_mm512_set1_epi32((int)hi), (__m512i)(s - 32u)));
#else
            x.part[k] = (kvq__vu)_mm256_or_si256(
                _mm256_or_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)lo), (__m256i)s),
                                _mm256_sllv_epi32(_mm256_set1_epi32((int)hi), (__m256i)(32u - s))),
                _mm256_srlv_epi32(_mm256_set1_epi32((int)hi), (__m256i)(s - 32u)));
#endif
        }
#else
        uint32_t t[16];
        (void)lo; (void)hi; (void)off;
        for (k = 0; k < 16; k++) t[k] = (uint32_t)kvq__get_code(w, c0 + (size_t)k, 3);
        memcpy(x.part, t, sizeof t);
#endif
    }
    KVQ__EACH(k) out->part[k] = kvq__dec_part(x.part[k], tab, k, DEC);
}

/* (a, b) of n consecutive groups, as kvq__affine gives them: the stored
   (s, z) pairs are one run of 2n fp16 halves (kvq_sz is two kvq_f16, no
   padding), converted 128 groups (256 halves) at a time by kvq__f16_row
   (F16C where available), then split into a and b by a loop per zero mode
   that the compiler vectorizes (a per-unit cost of per-channel keys: once
   per 32 tokens and D channels).                                          */
static void kvq__affine_run(const kvq_sz *sz, size_t n, kvq_zero_mode mode,
                            float *a /* (n) */, float *b /* (n) */)
{
    const kvq_f16 *raw = &sz[0].scale;            /* (2n) s0 z0 s1 z1 ...    */
    float half[256];
    size_t i0, i;
    for (i0 = 0; i0 < n; i0 += 128) {
        size_t k = n - i0 < 128 ? n - i0 : 128;
        float *ai = a + i0, *bi = b + i0;
        kvq__simd_f16_row(raw + 2 * i0, 2 * k, half);
        if (mode == KVQ_ZERO_INT)
            for (i = 0; i < k; i++) {
                ai[i] = half[2 * i];
                bi[i] = kvq__zero_term(half[2 * i], half[2 * i + 1], KVQ_ZERO_INT);
            }
        else
            for (i = 0; i < k; i++) {
                ai[i] = half[2 * i];
                bi[i] = half[2 * i + 1];
            }
    }
}

/* Per-channel key unit u: q*a (D) and q.b for every head, once per unit
   (q.b with kvq__dot, as EAGER computes it). The a's are written into head
   0's q*a row first and scaled in place, last head first.               */
static void kvq__unit_qa(const kvq_cache *c, kvq__heads *H, size_t u)
{
    size_t D = c->cfg.head_dim, d, h;
    float *a = H->qa, *b = H->row;                      /* (D) each          */
    kvq__affine_run(c->k.sz + u * D, D, c->cfg.zero_mode, a, b);
    for (h = H->n; h-- > 0;) {
        const float *q = H->q + h * D;
        float *qa = H->qa + h * D;
        d = 0;
        for (; KVQ__W > 1 && d + 16 <= D; d += 16)  /* in place for head 0:
                                           the vectors an alias check refuses */
            kvq__store16(qa + d, kvq__mul16(kvq__load16(q + d), kvq__load16(a + d)));
        for (; d < D; d++) qa[d] = q[d] * a[d];
        H->qb[h] = kvq__simd_dot(q, b, D);
    }
}

/* CALL(NH, B) with the head count NH (1, 2 or 4: kvq__head_batch) and the
   bit width B (2 or 4; other widths as a variable) as constants, so that
   an always-inlined kernel's loops are fixed. Nine instantiations per
   kernel keep the compiled size (and compile time) modest.               */
#define KVQ__WITH_NH_BITS(CALL, nh, bits)                                    \
    switch (nh) {                                                            \
    case 1:  KVQ__WITH_BITS(CALL, 1, bits); break;                           \
    case 2:  KVQ__WITH_BITS(CALL, 2, bits); break;                           \
    default: KVQ__WITH_BITS(CALL, 4, bits); break;                           \
    }
#define KVQ__WITH_BITS(CALL, NH, bits)                                       \
    switch (bits) {                                                          \
    case 2:  CALL(NH, 2); break;                                             \
    case 4:  CALL(NH, 4); break;                                             \
    default: CALL(NH, bits); break;                                          \
    }

/* CALL(NH, B, DEC) for a side's codes: Sec. 4's (KVQ__DEC_INT) at B = 2,
   4 and the others as a variable, as above; Sec. 4.1's decodings (and
   INT at B = 3, a table) each with its constant B.                       */
#define KVQ__WITH_NH_DEC(CALL, nh, bits, dec)                                \
    switch (nh) {                                                            \
    case 1:  KVQ__WITH_DEC(CALL, 1, bits, dec); break;                       \
    case 2:  KVQ__WITH_DEC(CALL, 2, bits, dec); break;                       \
    default: KVQ__WITH_DEC(CALL, 4, bits, dec); break;                       \
    }
#define KVQ__WITH_DEC(CALL, NH, bits, dec)                                   \
    switch (dec) {                                                           \
    case KVQ__DEC_TAB:                                                       \
        if ((bits) == 3) CALL(NH, 3, KVQ__DEC_TAB);                          \
        else CALL(NH, 4, KVQ__DEC_TAB);                                      \
        break;                                                               \
    case KVQ__DEC_E4M3: CALL(NH, 8, KVQ__DEC_E4M3); break;                   \
    case KVQ__DEC_E5M2: CALL(NH, 8, KVQ__DEC_E5M2); break;                   \
    case KVQ__DEC_E4M3_2M8: KVQ__IF_FP8_F16(CALL(NH, 8, KVQ__DEC_E4M3_2M8)); break; \
    case KVQ__DEC_S8:   CALL(NH, 8, KVQ__DEC_S8); break;                     \
    case KVQ__DEC_U8:   CALL(NH, 8, KVQ__DEC_U8); break;                     \
    default:                                                                 \
        switch (bits) {                                                      \
        case 2:  CALL(NH, 2, KVQ__DEC_INT); break;                           \
        case 4:  CALL(NH, 4, KVQ__DEC_INT); break;                           \
        default: CALL(NH, bits, KVQ__DEC_INT); break;                        \
        }                                                                    \
    }

/* The same for full-precision rows: NH and whether they are fp16 (F16).   */
#define KVQ__WITH_NH_F16(CALL, nh, f16)                                      \
    switch ((nh) * 2 + ((f16) != 0)) {                                       \
    case 2:  CALL(1, 0); break;                                              \
    case 3:  CALL(1, 1); break;                                              \
    case 4:  CALL(2, 0); break;                                              \
    case 5:  CALL(2, 1); break;                                              \
    case 8:  CALL(4, 0); break;                                              \
    default: CALL(4, 1); break;                                              \
    }


/* kvq__tile_block's 2-bit codes for ONE head, entries two at a time:
       out[c .. c+15] += sum_p t_p + zb,   t_p = w_i x_i + w_i' x_i'
   over the pairs p = (i, i' = i + 1) of entries (an odd last entry alone,
   t = w_i x_i), with w_i x_i rounded and then w_i' x_i' added by a
   multiply-add where KVQ__FMA. P = 4 / NB running sums a block, at least
   one (pair p to sum p mod P, added in order at the end). Per lane, t_p
   takes only 16 values, one per (c_i, c_i'): with AVX-512 they are a
   table built once per pair for all NB blocks of the walk (the same
   expression on the 16 code pairs, so the same floats), and a pair costs
   per block a shift, a rotate and a bit select (lane j's c_i to bits 0-1
   of its index, c_i' to bits 2-3), one vpermps and one addition, against
   two shifts, masks, conversions and multiply-adds. e: the entries' words
   of the walk's first block; NB (1, 2, 4 or 8 blocks) a constant.       */
#if KVQ__W == 16
/* One pair of kvq__pairs2_walk with AVX-512: t the pair's table (TWO = 0:
   a lone entry, its partner's codes read as 0), x0 the first entry's
   words of the walk, acc (NB) the running sums the pair goes to.          */
static KVQ__INLINE void kvq__pairs2_step(kvq__v16 *acc, size_t P, const char *x0, size_t stride,
                                         kvq__v16 t, int NB, int TWO)
{
    const __m512i shift = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                            24, 26, 28, 30),
                  turn = _mm512_setr_epi32(30, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                           22, 24, 26, 28),
                  three = _mm512_set1_epi32(3);
    int b;
    for (b = 0; b < NB; b++) {
        int32_t w0, w1 = 0;
        __m512i ix;
        memcpy(&w0, x0 + 4 * b, 4);
        if (TWO) memcpy(&w1, x0 + stride + 4 * b, 4);
        /* lane j: c_i (bits 2j of w0) to bits 0-1, c_i' (bits 2j of w1,
           rotated right by 2j - 2) to bits 2-3: three ? u : v            */
        ix = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(_mm512_set1_epi32(w0), shift),
                                       _mm512_rorv_epi32(_mm512_set1_epi32(w1), turn), three, 0xE4);
        acc[(size_t)b * P].part[0] = acc[(size_t)b * P].part[0] +
                                     (kvq__vf)_mm512_permutexvar_ps(ix, (__m512)t.part[0]);
    }
}
#else
/* One pair's t of kvq__pairs2_walk in block b, computed: w[0] x_i rounded,
   then + w[1] x_i' (TWO) by a multiply-add where KVQ__FMA. ws: the two
   weights already broadcast, or NULL: broadcast here                     */
static KVQ__INLINE kvq__v16 kvq__pair_term(const char *x0, size_t stride, int b, const float *w,
                                           const kvq__v16 *ws, int TWO)
{
    kvq__v16 c, t;
    kvq__codes16(&c, (const uint32_t *)(const void *)x0, 16 * (size_t)b, 2);
    t = kvq__mul16(ws ? ws[0] : kvq__splat16(w[0]), c);
    if (!TWO) return t;
    kvq__codes16(&c, (const uint32_t *)(const void *)(x0 + stride), 16 * (size_t)b, 2);
    return kvq__madd16(t, ws ? ws[1] : kvq__splat16(w[1]), c);
}

/* Pair i (entries i, i + 1; TWO = 0: entry i alone) of kvq__pairs2_walk
   into sum k of its NB blocks: the weights broadcast once for them.      */
static KVQ__INLINE void kvq__pair_blocks(kvq__v16 *acc, size_t P, size_t k, const char *e,
                                         size_t stride, const float *wt, size_t i, int NB, int TWO)
{
    kvq__v16 ws[2] = { kvq__splat16(wt[i]), kvq__splat16(TWO ? wt[i + 1] : 0.0f) };
    int b;
    for (b = 0; b < NB; b++)
        acc[(size_t)b * P + k] = kvq__add16(acc[(size_t)b * P + k],
                                            kvq__pair_term(e + i * stride, stride, b, wt + i, ws, TWO));
}

/* The pairs of kvq__pairs2_walk, pairs outer (NB <= 4)                   */
static KVQ__INLINE void kvq__pairs_outer(kvq__v16 *acc, const char *e, size_t stride, size_t m,
                                         const float *wt, int NB)
{
    const int P = NB >= 4 ? 1 : 4 / NB;
    size_t i, i0;
    int k;
    for (i0 = 0; i0 + 2 * (size_t)P <= m; i0 += 2 * (size_t)P) {
        KVQ__UNROLL(4)
        for (k = 0; k < P; k++)
            kvq__pair_blocks(acc, (size_t)P, (size_t)k, e, stride, wt, i0 + 2 * (size_t)k, NB, 1);
    }
    KVQ__UNROLL(4)
    for (k = 0; k < P; k++) {                           /* the last pairs    */
        i = i0 + 2 * (size_t)k;
        if (i + 1 < m) kvq__pair_blocks(acc, (size_t)P, (size_t)k, e, stride, wt, i, NB, 1);
        else if (i < m) kvq__pair_blocks(acc, (size_t)P, (size_t)k, e, stride, wt, i, NB, 0);
    }
}

#endif

static KVQ__INLINE void kvq__pairs2_walk(float *out, const char *e, size_t stride, size_t m,
                                         const float *wt, const float *zb, int NB)
{
    const int P = NB >= 4 ? 1 : 4 / NB;
    kvq__v16 acc[8 * 4];                                /* block b: acc[b P + k] */
    size_t i, i0;
    int b, k;
    for (b = 0; b < NB * P; b++) acc[b] = kvq__splat16(0.0f);
#if KVQ__W == 16
    {
        static const float low[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
        static const float high[16] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 };
        const kvq__v16 lo = kvq__load16(low), hi = kvq__load16(high);
        for (i0 = 0; i0 + 2 * (size_t)P <= m; i0 += 2 * (size_t)P)
            for (k = 0; k < P; k++) {                   /* pair i0/2 + k     */
                i = i0 + 2 * (size_t)k;
                kvq__pairs2_step(acc + k, (size_t)P, e + i * stride, stride,
                                 kvq__madd16(kvq__mul16(kvq__splat16(wt[i]), lo),
                                             kvq__splat16(wt[i + 1]), hi), NB, 1);
            }
        for (k = 0; k < P; k++) {                       /* the last pairs    */
            i = i0 + 2 * (size_t)k;
            if (i + 1 < m)
                kvq__pairs2_step(acc + k, (size_t)P, e + i * stride, stride,
                                 kvq__madd16(kvq__mul16(kvq__splat16(wt[i]), lo),
                                             kvq__splat16(wt[i + 1]), hi), NB, 1);
            else if (i < m)
                kvq__pairs2_step(acc + k, (size_t)P, e + i * stride, stride,
                                 kvq__mul16(kvq__splat16(wt[i]), lo), NB, 0);
        }
    }
#else
    if (KVQ__W == 8 && NB <= 4) {
        /* AVX2: pairs outer where the NB P sums fit the registers (NB <=
           4: four sums, 8 of the 16 ymm), so each pair's weights are
           broadcast once for all blocks (KIVI-2, one head: 1.19 -> 1.06
           instructions per element). NEON's sums would take 16 of its 32
           registers, and its count rose (2.14 -> 2.27): there, block by
           block below. Either way sum (b, k) takes its pairs in order:
           the same floats.                                              */
        kvq__pairs_outer(acc, e, stride, m, wt, NB);
    } else
        for (b = 0; b < NB; b++) {                      /* the same sums     */
            kvq__v16 a[4];
            KVQ__UNROLL(4)
            for (k = 0; k < P; k++) a[k] = kvq__splat16(0.0f);
            for (i0 = 0; i0 + 2 * (size_t)P <= m; i0 += 2 * (size_t)P) {
                KVQ__UNROLL(4)
                for (k = 0; k < P; k++)
                    a[k] = kvq__add16(a[k], kvq__pair_term(e + (i0 + 2 * (size_t)k) * stride, stride,
                                                           b, wt + i0 + 2 * (size_t)k, NULL, 1));
            }
            KVQ__UNROLL(4)
            for (k = 0; k < P; k++) {                   /* the last pairs    */
                i = i0 + 2 * (size_t)k;
                if (i + 1 < m)
                    a[k] = kvq__add16(a[k], kvq__pair_term(e + i * stride, stride, b, wt + i, NULL, 1));
                else if (i < m)
                    a[k] = kvq__add16(a[k], kvq__pair_term(e + i * stride, stride, b, wt + i, NULL, 0));
            }
            KVQ__UNROLL(4)
            for (k = 0; k < P; k++) acc[b * P + k] = a[k];
        }
#endif
    for (b = 0; b < NB; b++) {
        float *o = out + 16 * b;
        kvq__v16 sum = acc[b * P];
        for (k = 1; k < P; k++) sum = kvq__add16(sum, acc[b * P + k]);
        if (zb) sum = kvq__add16(sum, kvq__splat16(zb[0]));
        kvq__store16(o, kvq__add16(kvq__load16(o), sum));
    }
}

/* The inner step of per-channel keys for a full tile (32 tokens from a
   multiple of 32) and NH (1, 2 or 4) heads: channel d's 32 codes are unpacked
   once, and times q_hd a_d added into each head's 32 scores, which stay in
   registers for the whole unit. A head alone keeps even and odd channels
   in two sums (P = 2, added at the end), so four additions are in flight. */
static KVQ__VINLINE void kvq__channel_tile(const uint32_t *w, size_t wpg, size_t D, size_t t0,
                                          const float *qa /* (NH, D) */,
                                          float *sc /* (NH, KVQ_TILE) */, int NH, int bits)
{
    const int P = NH == 1 ? 2 : 1;
    kvq__v16 lo_sum[4][2], hi_sum[4][2];         /* tokens 0-15, 16-31     */
    size_t d;
    int h, k;
    for (h = 0; h < NH; h++)
        for (k = 0; k < P; k++) lo_sum[h][k] = hi_sum[h][k] = kvq__splat16(0.0f);
    d = 0;
#if KVQ__W == 16
    /* AVX-512 folds a broadcast into a multiply-add ({1to16}) only where
       the broadcast has one use: the two halves read q_hd a_d from two
       copies (twin: 16 channels at a time), which saves one instruction
       per head and channel                                                */
    if (NH >= 2)
        for (; d + 16 <= D; d += 16) {
            float twin[4][16];
            size_t e;
            for (h = 0; h < NH; h++) kvq__store16(twin[h], kvq__load16(qa + (size_t)h * D + d));
            KVQ__UNROLL(4)
            for (e = 0; e < 16; e++) {
                kvq__v16 lo, hi;
                kvq__codes16(&lo, w + (d + e) * wpg, t0, bits);
                kvq__codes16(&hi, w + (d + e) * wpg, t0 + 16, bits);
                for (h = 0; h < NH; h++) {
                    lo_sum[h][0] = kvq__madd16(lo_sum[h][0], kvq__splat16(qa[(size_t)h * D + d + e]), lo);
                    hi_sum[h][0] = kvq__madd16(hi_sum[h][0], kvq__splat16(twin[h][e]), hi);
                }
            }
        }
#endif
    for (; d < D; d += (size_t)P)
        for (k = 0; k < P && d + (size_t)k < D; k++) {  /* channel d + k      */
            kvq__v16 lo, hi;
            kvq__codes16(&lo, w + (d + (size_t)k) * wpg, t0, bits);
            kvq__codes16(&hi, w + (d + (size_t)k) * wpg, t0 + 16, bits);
            for (h = 0; h < NH; h++) {
                kvq__v16 q = kvq__splat16(qa[(size_t)h * D + d + (size_t)k]);
                lo_sum[h][k] = kvq__madd16(lo_sum[h][k], q, lo);
                hi_sum[h][k] = kvq__madd16(hi_sum[h][k], q, hi);
            }
        }
    for (h = 0; h < NH; h++) {
        for (k = 1; k < P; k++) {
            lo_sum[h][0] = kvq__add16(lo_sum[h][0], lo_sum[h][k]);
            hi_sum[h][0] = kvq__add16(hi_sum[h][0], hi_sum[h][k]);
        }
        kvq__store16(sc + (size_t)h * KVQ_TILE, lo_sum[h][0]);
        kvq__store16(sc + (size_t)h * KVQ_TILE + 16, hi_sum[h][0]);
    }
}

/* Scores of tokens t0 .. t0+n-1 of per-channel key unit u (Sec. 8's
   algebra: q.k_t = sum_d (q_d a_d) c_td + q.b). Each token's sum runs over
   the channels d = 0..D-1 in order (a lone head's full tile: 2-bit codes
   by channel pairs, kvq__pairs2_walk; other widths even and odd channels
   in two sums, then added).                                              */
static KVQ__NOINLINE void kvq__scores_channel(const kvq_cache *c, kvq__heads *H, size_t u,
                                size_t t0, size_t n)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, wpg = s->geom.words_per_group, h, j;
    const uint32_t *w = s->words + u * D * wpg;         /* (D, wpg)          */
    const int full = n == KVQ_TILE && t0 % KVQ_TILE == 0;
    if (!full || (s->bits == 2 && H->n == 1))   /* the sums that add to sc */
        for (h = 0; h < H->n; h++)
            for (j = 0; j < n; j++) H->sc[h * KVQ_TILE + j] = 0.0f;
    if (full && s->bits == 2 && H->n == 1) {
        /* one head, 2-bit: channel pairs, as a value tile takes its slots
           (kvq__pairs2_walk: the channels are its entries, q_d a_d their
           weights, the 32 tokens its two blocks)                          */
        kvq__pairs2_walk(H->sc, (const char *)(w + t0 / 16), wpg * sizeof(uint32_t), D, H->qa,
                         NULL, 2);
    } else if (full) {                  /* kvq__channel_tile stores its sums */
        for (h = 0; h < H->n; h += kvq__head_batch(H->n - h)) {   /* NH, B fixed */
            const float *qa = H->qa + h * D;
            float *sc = H->sc + h * KVQ_TILE;
#define KVQ__CT(NH, BITS) kvq__channel_tile(w, wpg, D, t0, qa, sc, NH, BITS)
            KVQ__WITH_NH_BITS(KVQ__CT, kvq__head_batch(H->n - h), s->bits);
#undef KVQ__CT
        }
    } else {                                            /* a partial tile    */
        float codes[KVQ_TILE];
        size_t d;
        for (d = 0; d < D; d++) {
            kvq__unpack_f32(w + d * wpg, t0, n, s->bits, codes);
            for (h = 0; h < H->n; h++)
                for (j = 0; j < n; j++) H->sc[h * KVQ_TILE + j] += H->qa[h * D + d] * codes[j];
        }
    }
    for (h = 0; h < H->n; h++) {
        float *sc = H->sc + h * KVQ_TILE;
        const kvq__v16 qb = kvq__splat16(H->qb[h]), scale = kvq__splat16(H->inv_sqrt_d);
        if (KVQ__W > 1 && full) {       /* two vectors, the same floats */
            kvq__store16(sc, kvq__mul16(kvq__add16(kvq__load16(sc), qb), scale));
            kvq__store16(sc + 16, kvq__mul16(kvq__add16(kvq__load16(sc + 16), qb), scale));
        } else
            for (j = 0; j < n; j++) sc[j] = (sc[j] + H->qb[h]) * H->inv_sqrt_d;
    }
}

/* 16 words as 16 lanes, lane j from base[idx[j]]: one gather instruction
   on AVX2 and AVX-512, 16 loads elsewhere (integers: the same bits).      */
static KVQ__VINLINE kvq__u16 kvq__gather16(const uint32_t *base, const int32_t *idx /* (16) */)
{
    kvq__u16 x;
#if KVQ__W == 16
    x.part[0] = (kvq__vu)_mm512_i32gather_epi32(_mm512_loadu_si512((const void *)idx),
                                                (const void *)base, 4);
#elif KVQ__W == 8
    int k;
    KVQ__EACH(k) x.part[k] = (kvq__vu)_mm256_i32gather_epi32(
        (const int *)(const void *)base, _mm256_loadu_si256((const __m256i *)(const void *)(idx + 8 * k)), 4);
#else
    uint32_t t[16];
    int j;
    for (j = 0; j < 16; j++) t[j] = base[idx[j]];
    memcpy(x.part, t, sizeof t);
#endif
    return x;
}

/* The columns of 16 rows of n 32-bit words, row j at base + j n: out[w]
   lane j = base[j n + w], w = 0 .. n-1 (integers: the same bits by any
   route); only the first `rows` rows are read, the lanes past them
   repeat row 0. With AVX-512, 16 rows and n = 2^k <= 16 (n = 32: two
   blocks of 16 columns, rows 32 words apart), the 16 n words
   are read as n whole vectors and transposed in registers, k rounds of
   two-source permutes (vpermt2d): round i swaps bit i of the register
   number with bit i of the lane number, and the last round also rotates
   the lane bits so that lane j ends as row j; with AVX2, 16 rows and n =
   4 or 8, likewise by in-half shuffles (kvq__columns16_48). Elsewhere, one
   gather per column (kvq__gather16). Zen 4 retires a 16-lane gather about as slowly
   as 16 loads: the 8 columns of HF-2's 16 keys by gathers took a sixth
   of its decode, by 8 loads and 24 permutes next to nothing.             */
#if KVQ__W == 16
/* kvq__columns16's transpose for n = 2^k (k a constant: inlined)          */
static KVQ__INLINE void kvq__columns16_pow2(const uint32_t *base, int k, kvq__u16 *out,
                                            size_t ld /* k = 4: words a row, else 16 */)
{
    const int n = 1 << k;
    const kvq__vu lane = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
    kvq__vu r[16], t[16];
    int i, R;
    KVQ__UNROLL(16)
    for (R = 0; R < n; R++) memcpy(&r[R], base + ld * (size_t)R, sizeof r[R]);
    KVQ__UNROLL(4)
    for (i = 0; i < k; i++) {
        /* output lane L takes the lane whose bit i is the register's bit
           i, from the register whose bit i is L's bit i; in the last
           round L stands for its place before the rotation               */
        const kvq__vu L = i < k - 1 ? lane
                        : ((lane & (uint32_t)((1 << (4 - k)) - 1)) << k) | (lane >> (4 - k));
        const kvq__vu from = (L & ~(uint32_t)(1 << i)) | (((L >> i) & 1u) << 4);
        KVQ__UNROLL(16)
        for (R = 0; R < n; R++) {
            const int R0 = R & ~(1 << i), b = (R >> i) & 1;
            t[R] = (kvq__vu)_mm512_permutex2var_epi32((__m512i)r[R0],
                                                      (__m512i)(from | (uint32_t)(b << i)),
                                                      (__m512i)r[R0 | (1 << i)]);
        }
        KVQ__UNROLL(16)
        for (R = 0; R < n; R++) r[R] = t[R];
    }
    KVQ__UNROLL(16)
    for (R = 0; R < n; R++) out[R].part[0] = r[R];
}
#endif

#if KVQ__W == 8
/* kvq__columns16 with AVX2 for 16 rows of n = 4 or 8 words (D = 128: the
   (s, z) of 2 groups, G = 64, HF's keys and values, or of 4, G = 32,
   KIVI's values): n/4 8x4 transposes per 8 rows, rows 0-7 to part 0 and
   8-15 to part 1, with no gather and no move across 128-bit halves (Zen 1
   splits those into many steps; its gathers took ~8% of its KIVI-2 time,
   and with n = 4 ~10% of HF-2's with one head). Register i holds row i's
   words c .. c+3 beside row i + 4's, each half a 4x4 block that two rounds
   of in-half shuffles transpose: column c + w in the low half from rows
   0-3, in the high half from rows 4-7 - lanes 0-7 in order. Bits only
   move. n a constant where inlined.                                      */
static KVQ__INLINE void kvq__columns16_48(const uint32_t *base, int n, kvq__u16 *out /* (n) */)
{
    int p, c, i;
    for (p = 0; p < 2; p++)                               /* rows 8p ..   */
        for (c = 0; c < n; c += 4) {                      /* words c .. c+3 */
            const float *r = (const float *)(const void *)(base + 8 * n * p + c);
            __m256 a[4], t[4];
            for (i = 0; i < 4; i++)                       /* rows i, i + 4 */
                a[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(r + n * i)),
                                            _mm_loadu_ps(r + n * (i + 4)), 1);
            t[0] = _mm256_unpacklo_ps(a[0], a[1]);        /* r0w0 r1w0 r0w1 r1w1 */
            t[1] = _mm256_unpackhi_ps(a[0], a[1]);        /* r0w2 r1w2 r0w3 r1w3 */
            t[2] = _mm256_unpacklo_ps(a[2], a[3]);
            t[3] = _mm256_unpackhi_ps(a[2], a[3]);
            out[c + 0].part[p] = (kvq__vu)_mm256_shuffle_ps(t[0], t[2], 0x44);
            out[c + 1].part[p] = (kvq__vu)_mm256_shuffle_ps(t[0], t[2], 0xEE);
            out[c + 2].part[p] = (kvq__vu)_mm256_shuffle_ps(t[1], t[3], 0x44);
            out[c + 3].part[p] = (kvq__vu)_mm256_shuffle_ps(t[1], t[3], 0xEE);
        }
}
#endif

static KVQ__VINLINE void kvq__columns16(const uint32_t *base, size_t n, size_t rows,
                                       kvq__u16 *out /* (n) */)
{
    int32_t idx[16];
    size_t w, j;
#if KVQ__W == 8
    if (rows == 16 && n == 4) {
        kvq__columns16_48(base, 4, out);
        return;
    }
    if (rows == 16 && n == 8) {
        kvq__columns16_48(base, 8, out);
        return;
    }
#endif
#if KVQ__W == 16
    if (rows == 16)
        switch (n) {
        case 1:  kvq__columns16_pow2(base, 0, out, 16); return;
        case 2:  kvq__columns16_pow2(base, 1, out, 16); return;
        case 4:  kvq__columns16_pow2(base, 2, out, 16); return;
        case 8:  kvq__columns16_pow2(base, 3, out, 16); return;
        case 16: kvq__columns16_pow2(base, 4, out, 16); return;
        case 32:                        /* two 16 x 16 blocks: 8-bit keys of
                                           D = 128 (FP8, int8, q8_0)       */
            kvq__columns16_pow2(base, 4, out, 32);
            kvq__columns16_pow2(base + 16, 4, out + 16, 32);
            return;
        default: break;
        }
#endif
    for (j = 0; j < 16; j++) idx[j] = (int32_t)(j * n);
    for (j = rows; j < 16; j++) idx[j] = 0;
    for (w = 0; w < n; w++) out[w] = kvq__gather16(base + w, idx);
}

#if KVQ__FP8_KEYS
/* A column of FP8 keys (kvq__token_block: lane j the word of token j, its
   bytes channels 4k .. 4k+3) as the 4 channels' values, token j in lane
   j of cv[e]: the bytes regrouped by channel (vpshufb within each 128-bit
   lane, then vpermd: 16 bytes a channel), widened to 16-bit lanes with
   their sign, then as in kvq__vals16: kvq__fp8_halves' bits (here 32
   lanes at once), vcvtph2ps, and 2^8 for E4M3. The same floats as
   kvq__dec_part's (tests/simd_check.c).                                 */
#if defined(__AVX512VBMI__)
#define KVQ__FP8_VBMI 1
/* kvq__fp8_keys16's byte picks: [i][2t] = 64 (a zero byte), [i][2t+1] =
   4 (t mod 16) + 2 i + t / 16 (token t mod 16's code of channel 2i + t/16) */
static const unsigned char kvq__fp8_bytes[2][64] __attribute__((aligned(64))) = {
#define KVQ__B2(t, c) 64, 4 * (t) + (c)
#define KVQ__B16(c) KVQ__B2(0, c), KVQ__B2(1, c), KVQ__B2(2, c), KVQ__B2(3, c), KVQ__B2(4, c),   \
    KVQ__B2(5, c), KVQ__B2(6, c), KVQ__B2(7, c), KVQ__B2(8, c), KVQ__B2(9, c), KVQ__B2(10, c),     \
    KVQ__B2(11, c), KVQ__B2(12, c), KVQ__B2(13, c), KVQ__B2(14, c), KVQ__B2(15, c)
    { KVQ__B16(0), KVQ__B16(1) }, { KVQ__B16(2), KVQ__B16(3) }
#undef KVQ__B16
#undef KVQ__B2
};
#else
#define KVQ__FP8_VBMI 0
#endif
static KVQ__VINLINE void kvq__fp8_keys16(kvq__v16 *cv /* (4) */, __m512i x, int DEC)
{
    __m512i w[2], hb[2];   /* the codes widened, then as fp16 bits       */
    int i;
#if KVQ__FP8_VBMI
    /* vpermt2b: word t of w[i] = byte 4 t' + c of x (t' = t mod 16, c =
       2 i + t / 16) above a zero byte, the code << 8                      */
    const __m512i zero = _mm512_setzero_si512();
    w[0] = _mm512_permutex2var_epi8(x, _mm512_loadu_si512((const void *)kvq__fp8_bytes[0]), zero);
    w[1] = _mm512_permutex2var_epi8(x, _mm512_loadu_si512((const void *)kvq__fp8_bytes[1]), zero);
    for (i = 0; i < 2; i++)                     /* E4M3: (w >>s 1) & 0xBFFF */
        hb[i] = DEC != KVQ__DEC_E5M2 ? _mm512_and_si512(_mm512_srai_epi16(w[i], 1),
                                                        _mm512_set1_epi16((short)0xBFFF))
                                     : w[i];
#else
    const __m512i by_ch = _mm512_set4_epi32(0x0F0B0703, 0x0E0A0602, 0x0D090501, 0x0C080400),
                  lanes = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i z = _mm512_permutexvar_epi32(lanes, _mm512_shuffle_epi8(x, by_ch));
    w[0] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(z));          /* ch 0, 1 */
    w[1] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(z, 1));    /* ch 2, 3 */
    for (i = 0; i < 2; i++)
        hb[i] = DEC != KVQ__DEC_E5M2 ? _mm512_and_si512(_mm512_slli_epi16(w[i], 7),
                                                        _mm512_set1_epi16((short)0xBF80))
                                     : _mm512_slli_epi16(w[i], 8);
#endif
    for (i = 0; i < 2; i++) {
        cv[2 * i].part[0] = (kvq__vf)kvq__fp8_scale512(_mm512_cvtph_ps(_mm512_castsi512_si256(hb[i])), DEC);
        cv[2 * i + 1].part[0] = (kvq__vf)kvq__fp8_scale512(
            _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hb[i], 1)), DEC);
    }
}
#endif

/* FP8 per-token sides (kvq__fp8_ahead): the slots KVQ__FP8_AHEAD ahead
   of the key block being scored are asked for into L2 a line at a time,
   one key line and one value line per word column, between the column's
   arithmetic, instead of kvq__prefetch_slots' burst of a tile's lines.
   Zen 4, fp8-e4m3, T = 32K, D = 128, one head, cold (after a 134 MB
   read), median of 40: the burst 1.42-1.50 ms, no hints 1.09-1.25, one
   hint per 4 KB page 1.11-1.26, spread 0.91-0.95 (32 to 128 slots ahead
   alike, 256 0.96-0.98, 512 1.0; into L1 1.17-1.22); warm 0.76.          */
#define KVQ__FP8_AHEAD (2 * KVQ_TILE)
/* 1 where the key blocks ask for the lines ahead (kvq__token_block's
   FP8 route): FP8 keys and values per token, 8-bit codes on both sides
   with the same words a slot (V's slots taken at K's indices, as in
   kvq__prefetch_slots: a wrong guess wastes a line, never a result)     */
static int kvq__side_served(const kvq_side *s);
static int kvq__fp8_ahead(const kvq_cache *c)
{
    const kvq_side *k = &c->k, *v = &c->v;
    const int dk = kvq__side_dec(k), dv = kvq__side_dec(v);
    return KVQ__FP8_KEYS && (dk == KVQ__DEC_E4M3 || dk == KVQ__DEC_E5M2) &&
           (dv == KVQ__DEC_E4M3 || dv == KVQ__DEC_E5M2) && kvq__side_served(k) &&
           kvq__side_served(v) && v->schedule != KVQ_SCHED_NONE &&
           k->geom.tokens_per_unit == 1 && v->geom.tokens_per_unit == 1 &&
           k->geom.groups_per_unit * k->geom.words_per_group ==
               v->geom.groups_per_unit * v->geom.words_per_group;
}
#define KVQ__TOKEN_GROUPS 16     /* the most groups a slot in lanes, 16 | G */

/* kvq__zero_term lane by lane: z, or (-z) s for an integer zero          */
static KVQ__VINLINE kvq__v16 kvq__zero_term16(kvq__v16 s, kvq__v16 z, kvq_zero_mode mode)
{
    return mode == KVQ_ZERO_INT ? kvq__mul16(kvq__mul16(z, kvq__splat16(-1.0f)), s) : z;
}

/* (a, b) of ng groups of up to 16 slots, lane j slot j, from the slots'
   (s, z) already converted to floats: slot j's group g at sf[2 (j ng + g)]
   and the next. Group g's a go to a + g stride, its b (kvq__zero_term)
   to b + g stride: the columns of rows of 2 ng floats (kvq__columns16;
   lanes past `rows` repeat slot 0).                                      */
static void kvq__ab_columns(const float *sf /* (rows, ng, 2) */, size_t ng, size_t rows,
                            kvq_zero_mode mode, float *a, float *b, size_t stride)
{
    kvq__u16 col[2 * KVQ__TOKEN_GROUPS];                /* s0 z0 s1 z1 ..    */
    size_t g;
    kvq__columns16((const uint32_t *)(const void *)sf, 2 * ng, rows, col);
    for (g = 0; g < ng; g++) {
        kvq__v16 s_g, z_g;
        memcpy(&s_g, &col[2 * g], sizeof s_g);          /* the bits          */
        memcpy(&z_g, &col[2 * g + 1], sizeof z_g);
        kvq__store16(a + g * stride, s_g);
        kvq__store16(b + g * stride, kvq__zero_term16(s_g, z_g, mode));
    }
}

#define KVQ__PAIR_FLOATS 8
#if KVQ__W == 16 || KVQ__W == 8
/* kvq__token_block's table of 2-bit channel pairs for n heads: entry
   (h, p, i) = q_2p (i & 3) + q_2p+1 (i >> 2), the pair (2p, 2p+1) with
   codes (i & 3, i >> 2), by the expression the block uses without it.  */
static void kvq__key_pairs(const float *q /* (n, D) */, size_t n, size_t D,
                           float *pairs /* (n, D/2, 16) */)
{
    static const float low[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
    static const float high[16] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 };
    const kvq__v16 lo = kvq__load16(low), hi = kvq__load16(high);
    size_t h, d;
    for (h = 0; h < n; h++)
        for (d = 0; d + 1 < D; d += 2)
            kvq__store16(pairs + (h * D + d) * 8,
                         kvq__madd16(kvq__mul16(kvq__splat16(q[h * D + d]), lo),
                                     kvq__splat16(q[h * D + d + 1]), hi));
}
#endif

/* Scores of 16 per-token keys for NH (1, 2 or 4) heads, the TOKENS IN THE
   LANES: lane j is the slot whose words start at words + idx[j] (gpu
   groups of wpg words). For every channel d one word per lane (a column
   of cols, kvq__columns16's, or without cols a gather, each 32/B
   channels), the code shifted out, and one multiply-add per head: no
   per-token horizontal sum. Per lane, in this order:
       part_g,r = sum_{d in g, d = r mod P} q_d c_d   (channels in order)
       part_g   = part_g,0 + part_g,1 + .. + part_g,P-1
       total    = sum_g a_g part_g, then + sum_g b_g qsum_g (groups in order)
       score    = total / sqrt(D)
   with P = 4 / NH partial sums per head (P = 1 for four heads), so that at
   least four multiply-adds are in flight: one chain of G of them would
   wait on the latency of each. ab (gpu, 2, 16) holds each group's a then
   b by lane; qsum (NH, D) the per-group sums of q (H->qa); sc (NH,
   KVQ_TILE) receives 16 scores.
   2-bit codes go by channel pairs: part_g,r adds, for the pairs (d, d+1)
   with d/2 = r mod P,
       t = q_d c_d + q_{d+1} c_{d+1}   (the product q_d c_d rounded, then
                                        a multiply-add where KVQ__FMA)
   which takes only 16 values, one per (c_d, c_{d+1}): with AVX-512 and a
   table of them (pairs, kvq__key_pairs: the same expression on the 16
   code pairs, so the same floats) a pair is one shift, one permute
   (vpermps reads the low 4 bits of each lane: c_d + 4 c_{d+1}) and one
   addition per head, against two shifts, masks, conversions and
   multiply-adds (AVX2: two 8-entry vpermps and a blend on bit 3).       */
static KVQ__VINLINE void kvq__token_block(const uint32_t *words, const int32_t *idx,
                                         const kvq__u16 *cols /* (gpu wpg) or NULL */,
                                         const float *pairs /* (NH, D/2, 16) or NULL */,
                                         size_t G, size_t gpu, size_t wpg,
                                         const float *ab, const float *q, const float *qsum,
                                         size_t D, float scale, float *sc, int NH, int bits,
                                         const float *tab /* (16), KVQ__DEC_TAB */, int DEC,
                                         const char *pfk, const char *pfv /* or NULL */)
{
    const size_t per = 32 / (size_t)bits;               /* codes per word    */
    const uint32_t mask = (uint32_t)((1u << bits) - 1u);
    const int P = NH >= 3 ? 1 : 4 / NH;
    (void)pfk; (void)pfv;                        /* the FP8 route's hints  */
    kvq__v16 total[4], tabv;
    size_t g, k, e;
    int h, p, r;
    (void)pairs;                                 /* AVX-512 and AVX2 only */
    if (DEC == KVQ__DEC_TAB) tabv = kvq__load16(tab);
    for (h = 0; h < NH; h++) total[h] = kvq__splat16(0.0f);
    for (g = 0; g < gpu; g++) {
        kvq__v16 part[4][4];                            /* head h: part[h][r] */
        for (h = 0; h < NH; h++)
            for (r = 0; r < P; r++) part[h][r] = kvq__splat16(0.0f);
        if (bits == 3) {
            /* B = 3 (a table): 32 channels in 3 words, codes 10 and 21
               across two (Sec. 5); channel i of the group to sum i mod P */
            for (k = 0; k < wpg; k += 3) {
                kvq__u16 x[3];
                int n_w = wpg - k < 3 ? (int)(wpg - k) : 3, i;
                for (i = 0; i < n_w; i++)
                    x[i] = cols ? cols[g * wpg + k + (size_t)i]
                                : kvq__gather16(words + g * wpg + k + (size_t)i, idx);
                KVQ__UNROLL(32)
                for (e = 0; e < 32; e++) {              /* channel k/3 32 + e */
                    const size_t at = k / 3 * 32 + e, d = g * G + at;
                    const unsigned bit = 3u * (unsigned)e, kw = bit / 32, sh = bit % 32;
                    kvq__v16 cv;
                    if (at >= G) break;                 /* 16 | G: half a chunk */
                    KVQ__EACH(p) {
                        kvq__vu y = x[kw].part[p] >> sh;
                        if (sh > 29) y |= x[kw + 1].part[p] << (32u - sh);
                        cv.part[p] = kvq__dec_part(y, &tabv, p, KVQ__DEC_TAB);
                    }
                    for (h = 0; h < NH; h++)            /* 32 is 0 mod P     */
                        part[h][e % (size_t)P] = kvq__madd16(part[h][e % (size_t)P],
                                                             kvq__splat16(q[(size_t)h * D + d]), cv);
                }
            }
        } else
        for (k = 0; k < wpg; k++) {
            const kvq__u16 x = cols ? cols[g * wpg + k] : kvq__gather16(words + g * wpg + k, idx);
            if (bits == 2) {
                KVQ__UNROLL(8)
                for (e = 0; e < 16; e += 2) {           /* channels d, d + 1 */
                    const size_t d = g * G + k * 16 + e;
                    kvq__v16 t[4];
#if KVQ__W == 16
                    if (pairs) {
                        const __m512i c2 = (__m512i)(x.part[0] >> (uint32_t)(2 * e));
                        for (h = 0; h < NH; h++)
                            t[h].part[0] = (kvq__vf)_mm512_permutexvar_ps(
                                c2, _mm512_loadu_ps(pairs + ((size_t)h * D + d) * 8));
                    } else
#elif KVQ__W == 8
                    if (pairs) {                /* 8 entries a vpermps:  */
                        KVQ__EACH(p) {          /* bit 3 picks the half  */
                            const __m256i c2 = (__m256i)(x.part[p] >> (uint32_t)(2 * e));
                            const __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(c2, 28));
                            for (h = 0; h < NH; h++) {
                                const float *tb = pairs + ((size_t)h * D + d) * 8;
                                t[h].part[p] = (kvq__vf)_mm256_blendv_ps(
                                    _mm256_permutevar8x32_ps(_mm256_loadu_ps(tb), c2),
                                    _mm256_permutevar8x32_ps(_mm256_loadu_ps(tb + 8), c2), upper);
                            }
                        }
                    } else
#endif
                    {
                        kvq__v16 c0, c1;
                        KVQ__EACH(p) {
                            c0.part[p] = kvq__vf_of_vi((kvq__vi)((x.part[p] >> (uint32_t)(2 * e)) & 3u));
                            c1.part[p] = kvq__vf_of_vi((kvq__vi)((x.part[p] >> (uint32_t)(2 * e + 2)) & 3u));
                        }
                        for (h = 0; h < NH; h++)
                            t[h] = kvq__madd16(kvq__mul16(kvq__splat16(q[(size_t)h * D + d]), c0),
                                               kvq__splat16(q[(size_t)h * D + d + 1]), c1);
                    }
                    for (h = 0; h < NH; h++)            /* 8 pairs, 0 mod P  */
                        part[h][e / 2 % (size_t)P] = kvq__add16(part[h][e / 2 % (size_t)P], t[h]);
                }
                continue;
            }
#if KVQ__FP8_KEYS
            if (DEC == KVQ__DEC_E4M3 || DEC == KVQ__DEC_E5M2 || DEC == KVQ__DEC_E4M3_2M8) {
                /* the word's 4 channels of the 16 tokens as 16 fp16 each
                   (kvq__fp8_keys16), then channel by channel as below    */
                kvq__v16 cv[4];
                if (pfk) {                  /* a block's slots: gpu wpg lines */
                    __builtin_prefetch(pfk + 64 * (g * wpg + k), 0, 2);
                    __builtin_prefetch(pfv + 64 * (g * wpg + k), 0, 2);
                }
                kvq__fp8_keys16(cv, (__m512i)x.part[0], DEC);
                for (e = 0; e < 4; e++) {
                    const size_t d = g * G + k * 4 + e;
                    for (h = 0; h < NH; h++)
                        part[h][e % (size_t)P] = kvq__madd16(part[h][e % (size_t)P],
                                                             kvq__splat16(q[(size_t)h * D + d]), cv[e]);
                }
                continue;
            }
#endif
            KVQ__UNROLL(16)
            for (e = 0; e < per; e++) {                 /* channel d         */
                const size_t d = g * G + k * per + e;
                kvq__v16 cv;
                if (per > 16 && k * per + e >= G) break;    /* B = 1, half a word */
                KVQ__EACH(p) cv.part[p] = DEC == KVQ__DEC_INT
                    ? kvq__vf_of_vi((kvq__vi)((x.part[p] >> (uint32_t)(e * (size_t)bits)) & mask))
                    : kvq__dec_part(x.part[p] >> (uint32_t)(e * (size_t)bits), &tabv, p, DEC);
                for (h = 0; h < NH; h++)                /* per is 0 mod P    */
                    part[h][e % (size_t)P] = kvq__madd16(part[h][e % (size_t)P],
                                                         kvq__splat16(q[(size_t)h * D + d]), cv);
            }
        }
        for (h = 0; h < NH; h++) {
            for (r = 1; r < P; r++) part[h][0] = kvq__add16(part[h][0], part[h][r]);
            total[h] = kvq__madd16(total[h], kvq__load16(ab + g * 32), part[h][0]);
        }
    }
    for (g = 0; g < gpu; g++)
        for (h = 0; h < NH; h++)
            total[h] = kvq__madd16(total[h], kvq__load16(ab + g * 32 + 16),
                                   kvq__splat16(qsum[(size_t)h * D + g]));
    for (h = 0; h < NH; h++)
        kvq__store16(sc + (size_t)h * KVQ_TILE, kvq__mul16(total[h], kvq__splat16(scale)));
}

/* (a, b) of the gpu groups of 16 consecutive per-token slots, by lane, as
   kvq__token_block reads them (ab: group g's a at ab[32 g + j], b at
   ab[32 g + 16 + j], slot j in lane j): the 16 slots' stored (s, z) are
   one run of 32 gpu halves, converted at once by kvq__f16_row (F16C where
   available), then each group's s and z taken as columns of the 16 rows
   of 2 gpu floats (kvq__columns16). The same floats as kvq__affine.      */
static void kvq__token_ab16(const kvq_sz *sz /* (16, gpu) */, size_t gpu, kvq_zero_mode mode,
                            float *ab /* (gpu, 2, 16) */)
{
    float sf[KVQ__TOKEN_GROUPS * 32];                   /* (16, gpu, 2)      */
    kvq__simd_f16_row(&sz[0].scale, 32 * gpu, sf);
    kvq__ab_columns(sf, gpu, 16, mode, ab, ab + 16, 32);
}

/* (a, b) of a format side's gpu groups (Sec. 4.1: not INT) for up to 16
   slots, lane j slot j, as kvq__group_ab gives them: pw holds the slots'
   packed parameters, rows of spu = s->sz_per_unit words (parameter g of a
   slot: P bits at bit g P of its row). Group g's a goes to a + g stride,
   its b (0 for every format) to b + g stride; lanes past `rows` repeat
   slot 0. The parameters as columns (kvq__columns16), then per group:
       P =  0   a = the side's scale (FP8 per tensor)
       P =  8   a = e4m3value(p) s_side (NVFP4), E4M3 decoded as values are
       P = 16   a = the fp16 p (q8_0, q4_0): the rows converted at once by
                kvq__f16_row (exact, as kvq__f16_stored), as INT's (s, z)
       P = 32   a = the fp32 p (FP8 per group)
   each the same float as kvq__format_ab's.                              */
static void kvq__format_ab16(const kvq_side *s, const uint32_t *pw /* (rows, spu) */, size_t rows,
                             float *a, float *b, size_t stride)
{
    const size_t gpu = s->geom.groups_per_unit, spu = s->sz_per_unit;
    const int P = kvq_format_param_bits(s->format);
    kvq__u16 col[2 * KVQ__TOKEN_GROUPS];
    size_t g;
    int k;
    if (P == 16) {
        float sf[32 * KVQ__TOKEN_GROUPS];   /* (rows, 2 spu); 2 spu <= 16, but
                                               kvq__columns16's 32-word case
                                               is compiled in too           */
        kvq__simd_f16_row((const kvq_f16 *)(const void *)pw, 2 * spu * rows, sf);
        kvq__columns16((const uint32_t *)(const void *)sf, 2 * spu, rows, col);
    } else if (P)
        kvq__columns16(pw, spu, rows, col);
    for (g = 0; g < gpu; g++) {
        kvq__v16 av;
        if (P == 0) av = kvq__splat16(s->scale);
        else if (P == 8) {
            const kvq__v16 scale = kvq__splat16(s->scale);
            KVQ__EACH(k) av.part[k] = kvq__dec_part(col[g / 4].part[k] >> (uint32_t)(8 * (g % 4)),
                                                    NULL, k, KVQ__DEC_E4M3) * scale.part[k];
        } else
            memcpy(&av, &col[g], sizeof av);            /* the float's bits  */
        kvq__store16(a + g * stride, av);
        kvq__store16(b + g * stride, kvq__splat16(0.0f));
    }
}

/* Scores of per-token key slots s0 .. s0+n-1. With 16 | G and at most
   KVQ__TOKEN_GROUPS groups a token, 16 tokens at a time in the lanes
   (kvq__token_block; a lane not attended reads an attended slot of its
   block, and its score is masked by kvq__tile_update; a format's (a, b)
   by kvq__format_ab16, its codes by its decoding); else one token at a
   time (kvq__token_key_dot: Sec. 4's codes only, kvq__simd_walk_serves
   leaves the formats there to kvq.h).                                     */
static void kvq__scores_token(const kvq_cache *c, kvq__heads *H, size_t s0, size_t n)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
           wpg = s->geom.words_per_group, h, g, j, b0;
    if (G % 16 == 0 && gpu <= KVQ__TOKEN_GROUPS) {
        float ab[KVQ__TOKEN_GROUPS * 32];               /* (gpu, 2, 16)      */
        float tab[16];                       /* KVQ__DEC_TAB's values        */
        int32_t idx[16];
        kvq__u16 col[32];                    /* a block's words, by column   */
        const kvq__u16 *cols;                /* col, or NULL: gathers by idx */
        /* E4M3 keys against q 2^8 where the walk made it (H->q8)       */
        const int fold = KVQ__FP8_KEYS && H->q8 && kvq__side_dec(s) == KVQ__DEC_E4M3,
                  dec = fold ? KVQ__DEC_E4M3_2M8 : kvq__side_dec(s), fmt = s->format != KVQ_FORMAT_INT;
        const float *qk = fold ? H->q8 : H->q;
        const char *pfk, *pfv;                 /* kvq__fp8_ahead's lines     */
        const int ahead = H->fp8_ahead;
        const size_t spu = s->sz_per_unit;
        kvq__side_table(s, tab);
        for (b0 = 0; b0 < n; b0 += 16) {
            size_t first = b0;                          /* an attended slot  */
            int32_t neg = b0 + 16 <= n ? 0 : -1;        /* < 0: one is not   */
            while (first < n && first < b0 + 16 && H->pos[first] < 0) first++;
            if (first == n || first == b0 + 16) continue;
            if (neg == 0)
                for (j = 0; j < 16; j++) neg |= H->pos[b0 + j];
            cols = NULL;
            if (neg >= 0) {                             /* the usual block   */
                if (gpu * wpg <= 16 || (KVQ__W == 16 && gpu * wpg == 32)) {
                    kvq__columns16(s->words + (s0 + b0) * gpu * wpg, gpu * wpg, 16, col);
                    cols = col;
                }
                for (j = 0; !cols && j < 16; j++) idx[j] = (int32_t)(j * gpu * wpg);
                if (fmt)                                /* Sec. 4.1's params */
                    kvq__format_ab16(s, (const uint32_t *)(const void *)(s->sz + (s0 + b0) * spu), 16,
                                     ab, ab + 16, 32);
                else
                    kvq__token_ab16(s->sz + (s0 + b0) * gpu, gpu, c->cfg.zero_mode, ab);
            } else
                for (j = 0; j < 16; j++) {
                    size_t jj = b0 + j < n && H->pos[b0 + j] >= 0 ? b0 + j : first;
                    const kvq_sz *sz = s->sz + (s0 + jj) * gpu;
                    idx[j] = (int32_t)((jj - b0) * gpu * wpg);
                    for (g = 0; g < gpu; g++)
                        if (fmt) kvq__group_ab(c, s, (s0 + jj) * gpu + g, &ab[g * 32 + j], &ab[g * 32 + 16 + j]);
                        else kvq__affine(sz[g], c->cfg.zero_mode, &ab[g * 32 + j], &ab[g * 32 + 16 + j]);
                }
            pfk = pfv = NULL;
            if (ahead && s0 + b0 + KVQ__FP8_AHEAD + 16 <= s->n_units &&
                s0 + b0 + KVQ__FP8_AHEAD + 16 <= c->v.n_units) {
                pfk = (const char *)(const void *)(s->words + (s0 + b0 + KVQ__FP8_AHEAD) * gpu * wpg);
                pfv = (const char *)(const void *)(c->v.words + (s0 + b0 + KVQ__FP8_AHEAD) * gpu * wpg);
            }
            for (h = 0; h < H->n; h += kvq__head_batch(H->n - h), pfk = pfv = NULL) {
#define KVQ__TB(NH, BITS, DEC) kvq__token_block(s->words + (s0 + b0) * gpu * wpg, idx, cols,      \
                                           H->pairs ? H->pairs + h * D * KVQ__PAIR_FLOATS : NULL, G, gpu, wpg, ab, \
                                           qk + h * D, H->qa + h * D, D, H->inv_sqrt_d,        \
                                           H->sc + h * KVQ_TILE + b0, NH, BITS, tab, DEC, pfk, pfv)
                KVQ__WITH_NH_DEC(KVQ__TB, kvq__head_batch(H->n - h), s->bits, dec);
#undef KVQ__TB
            }
        }
        return;
    }
    for (j = 0; j < n; j++) {
        const uint32_t *w = s->words + (s0 + j) * gpu * wpg;
        const kvq_sz *sz = s->sz + (s0 + j) * gpu;
        if (H->pos[j] < 0) continue;
        for (g = 0; g < gpu; g++) kvq__unpack_f32(w + g * wpg, 0, G, s->bits, H->row + g * G);
        for (h = 0; h < H->n; h++)                      /* codes shared      */
            H->sc[h * KVQ_TILE + j] = kvq__simd_token_key_dot(H->q + h * D, H->row, sz, H->qa + h * D,
                                                         D, G, c->cfg.zero_mode) * H->inv_sqrt_d;
    }
}

/* 16 stored halves as a 16-lane vector: vcvtph2ps per part where the
   target has it, else kvq__f16_row's exact conversion (the same floats:
   fp16 -> fp32 is exact either way).                                      */
static KVQ__VINLINE kvq__v16 kvq__load16_f16(const kvq_f16 *h)
{
#if KVQ__W == 16
    kvq__v16 v;
    v.part[0] = (kvq__vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)h));
    return v;
#elif KVQ__W == 8 && defined(__F16C__)
    kvq__v16 v;
    v.part[0] = (kvq__vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
    v.part[1] = (kvq__vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + 8)));
    return v;
#elif KVQ__W == 4
    kvq__v16 v;
    int k;
    KVQ__EACH(k) v.part[k] = (kvq__vf)kvq__f16x4(h + 4 * k);
    return v;
#else
    float t[16];
    kvq__simd_f16_row(h, 16, t);
    return kvq__load16(t);
#endif
}

/* One full-precision key row against NH queries: q_h . k with kvq__dot's
   lanes and order (so the same floats as EAGER's), the row read once for
   all NH heads and, if F16, converted 16 halves at a time in registers.
   Needs 16 | D.                                                           */
static KVQ__VINLINE void kvq__row_scores(const float *q /* (NH, D) */, const void *row,
                                        size_t D, int NH, int F16, float scale,
                                        float *sc /* head h: sc[h KVQ_TILE] */)
{
    kvq__v16 acc[4];
    size_t d;
    int h;
    for (h = 0; h < NH; h++) acc[h] = kvq__splat16(0.0f);
    for (d = 0; d < D; d += 16) {
        const kvq__v16 k = F16 ? kvq__load16_f16((const kvq_f16 *)row + d)
                               : kvq__load16((const float *)row + d);
        for (h = 0; h < NH; h++) acc[h] = kvq__madd16(acc[h], kvq__load16(q + (size_t)h * D + d), k);
    }
    for (h = 0; h < NH; h++) sc[h * KVQ_TILE] = kvq__hsum16(&acc[h]) * scale;
}

/* Scores of rows i0 .. i0+n-1 of a full-precision key region.             */
static void kvq__scores_rows(const kvq_cache *c, kvq__heads *H, const kvq_rows *rg,
                             size_t i0, size_t n)
{
    size_t D = c->cfg.head_dim, h, j;
    int f16 = c->cfg.fp_bits == 16;
    if (D % 16) {                          /* the general form, one head at a time */
        for (j = 0; j < n; j++) {
            const float *k = kvq__row_f32(c, rg, i0 + j, H->row);
            for (h = 0; h < H->n; h++)
                H->sc[h * KVQ_TILE + j] = kvq__simd_dot(H->q + h * D, k, D) * H->inv_sqrt_d;
        }
        return;
    }
    for (j = 0; j < n; j++) {
        const void *row = kvq__row_ptr(c, rg, i0 + j);
        for (h = 0; h < H->n; h += kvq__head_batch(H->n - h)) {
            int nh = (int)kvq__head_batch(H->n - h);
            const float *q = H->q + h * D;
            float *sc = H->sc + h * KVQ_TILE + j;
#define KVQ__RS(NH, F16) kvq__row_scores(q, row, D, NH, F16, H->inv_sqrt_d, sc)
            KVQ__WITH_NH_F16(KVQ__RS, nh, f16);
#undef KVQ__RS
        }
    }
}

/* out_h += w_h v_p for every head, v_p wherever V keeps position p.        */
static void kvq__add_value(const kvq_cache *c, kvq__heads *H, size_t p, size_t j)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, h, d, g, n_heads = H->n;
    uint32_t loc = s->loc[p];
    size_t idx = KVQ_LOC_INDEX(loc);
    const float *v = H->row, *wts = H->sc + j;          /* head h: wts[h*TILE] */
    float *out = H->out;                    /* locals: stores to out cannot
                                               then make H's fields reload */
    if (KVQ_LOC_TAG(loc) != KVQ_LOC_QUANT) {
        v = kvq__row_f32(c, &s->rows[KVQ_LOC_TAG(loc) - KVQ_LOC_ROWS0], idx, H->row);
    } else if (s->axis == KVQ_PER_TOKEN) {
        /* slot idx is one token: out += (w a_g) c + w b_g per channel,
           the codes unpacked once for every head                           */
        size_t gpu = s->geom.groups_per_unit, wpg = s->geom.words_per_group, c0;
        const uint32_t *w = s->words + idx * gpu * wpg;
        const kvq_sz *sz = s->sz + idx * gpu;
        for (g = 0; g < gpu; g++) {
            float a, b;
            kvq__affine(sz[g], c->cfg.zero_mode, &a, &b);
            for (c0 = 0; c0 + 16 <= G; c0 += 16) {      /* 16 codes a step   */
                kvq__v16 cv;
                kvq__codes16(&cv, w + g * wpg, c0, s->bits);
                for (h = 0; h < n_heads; h++) {
                    float wt = wts[h * KVQ_TILE], *o = out + h * D + g * G + c0;
                    kvq__v16 acc = kvq__madd16(kvq__load16(o), kvq__splat16(wt * a), cv);
                    kvq__store16(o, kvq__add16(acc, kvq__splat16(wt * b)));
                }
            }
            for (d = c0; d < G; d++) {                  /* G % 16 codes      */
                float cd = (float)kvq__get_code(w + g * wpg, d, s->bits);
                for (h = 0; h < n_heads; h++) {
                    float wt = wts[h * KVQ_TILE];
                    out[h * D + g * G + d] += (wt * a) * cd + wt * b;
                }
            }
        }
        return;
    } else {
        /* per-channel values (not a default anywhere): dequantize the row  */
        size_t tpu = s->geom.tokens_per_unit, unit = idx / tpu, t = idx % tpu,
               wpg = s->geom.words_per_group;
        const uint32_t *w = s->words + unit * D * wpg;
        const kvq_sz *sz = s->sz + unit * D;
        for (d = 0; d < D; d++) {
            float a, b;
            kvq__affine(sz[d], c->cfg.zero_mode, &a, &b);
            H->row[d] = (float)kvq__get_code(w + d * wpg, t, s->bits) * a + b;
        }
    }
    for (h = 0; h < n_heads; h++) {
        float wt = wts[h * KVQ_TILE], *o = out + h * D;
        for (d = 0; d < D; d++) o[d] += wt * v[d];
    }
}

/* A tile's m entries, weighted and summed per head, for NH heads at a time:
       out_h[c .. c+15] += sum_i w_hi x_i[c .. c+15]  (+ zb_h)     c = 0, 16, .. n-16
   where entry i's lanes x_i come from base + i stride (bytes), as SRC says:
       SRC = B > 0   a packed group of B-bit codes, as floats (kvq__codes16):
                     per-token quantized values, with w_hi = w_hj a_jg and
                     zb_h = sum_j w_hj b_jg, the group's zero term
       SRC = -16     an fp16 row, converted in registers (kvq__load16_f16)
       SRC = -32     an fp32 row                     (rows: zb = NULL)
   Entries are addressed by arithmetic, not through a table of pointers:
   loading each row's address from memory halved the rate at which Zen 4
   streamed the rows (bench_cpu --rows: 16 MB of fp32 rows summed 32 at a
   time, 20-25 -> 12-15 GB/s from DRAM, 40-57 -> 19-30 from L3), one of
   the two causes of fp32 rows' slow value pass (the other: rows read in
   walks, below). A tile whose entries do not follow each
   other in storage (kvq__run) is summed run by run, each run's sums added
   to out in turn. Blocks of 16 channels, the entries inner: each block's
   NH running sums live in registers for the whole run, so out is loaded
   and stored once per run, not once per entry.
     codes   one block at a time (a tile's codes are a few lines), P = 4 / NH
             partial sums per head (entries i = k mod P go to sum k), so at
             least four independent additions are in flight per step (one
             head's 2-bit codes: kvq__tile_pairs2, two entries a term, a
             table lookup with AVX-512);
     rows    P = 1 and CB = up to KVQ__ROW_SUMS / NH blocks a walk (AVX-512,
             one or two heads: 8, a whole 512-byte row), then narrower walks
             for the channels left: rows read in order, the pattern the
             hardware prefetcher follows best (the same test from DRAM: 2
             walks of 256 bytes a row 12-16 GB/s, 8 walks of 64 bytes 8.5-11).
   CB changes only which blocks run together: every (head, block, k) sum
   takes the same entries in the same order in every vector width.
   wt (NH, KVQ_TILE) holds the weights.                                   */
#define KVQ__SRC_F16 (-16)
#define KVQ__SRC_F32 (-32)
static KVQ__VINLINE kvq__v16 kvq__entry16(const char *p, size_t c, int SRC, int DEC,
                                         const kvq__v16 *tab)
{
    kvq__v16 v;
    if (SRC == KVQ__SRC_F16) return kvq__load16_f16((const kvq_f16 *)(const void *)p + c);
    if (SRC == KVQ__SRC_F32) return kvq__load16((const float *)(const void *)p + c);
    kvq__vals16(&v, (const uint32_t *)(const void *)p, c, SRC, DEC, tab);
    return v;
}
#define KVQ__ROW_SUMS (KVQ__W == 16 ? 16 : 4)   /* NH P CB, in kvq__v16s  */

/* channels c_from .. c_to - 1 of kvq__tile_block, CB blocks a walk       */
static KVQ__VINLINE void kvq__tile_chunks(float *out, size_t D, size_t c_from, size_t c_to,
                                         const char *base, size_t stride, size_t m,
                                         const float *wt, const float *zb, int NH, int SRC,
                                         int CB, int P, int DEC, const float *tab)
{
    size_t c0, i;
    int h, k, b;
    const kvq__v16 tabv = DEC == KVQ__DEC_TAB ? kvq__load16(tab) : kvq__splat16(0.0f);
    /* two blocks with AVX-512: block 1 reads the weights from a copy, so
       that each broadcast has one use and folds into its multiply-add
       (as in kvq__channel_tile)                                           */
    const int TWIN = KVQ__W == 16 && CB == 2;
    float twin[4 * KVQ_TILE];
    const float *wt1 = wt;
    if (TWIN) {
        for (h = 0; h < NH; h++)
            for (i = 0; i < m; i++) twin[(size_t)h * KVQ_TILE + i] = wt[(size_t)h * KVQ_TILE + i];
        wt1 = twin;
    }
    for (c0 = c_from; c0 < c_to; c0 += 16 * (size_t)CB) {
        kvq__v16 acc[4][KVQ__ROW_SUMS];          /* head h: acc[h][b P + k]  */
        /* e: entry i at channel c0, where that starts a word (rows; codes
           of an even B), so the blocks sit at constant offsets from one
           address a step; codes of an odd B count from the entry's start */
        const int at_c0 = SRC < 0 || SRC % 2 == 0;
        const char *e = base + (at_c0 ? c0 * (size_t)(SRC < 0 ? -SRC : SRC) / 8 : 0);
        const size_t c = at_c0 ? 0 : c0;
        for (h = 0; h < NH; h++)
            for (k = 0; k < CB * P; k++) acc[h][k] = kvq__splat16(0.0f);
        KVQ__UNROLL(2)
        for (i = 0; i + (size_t)P <= m; i += (size_t)P, e += (size_t)P * stride)
            for (k = 0; k < P; k++)
                for (b = 0; b < CB; b++) {
                    const kvq__v16 x = kvq__entry16(e + (size_t)k * stride, c + 16 * (size_t)b,
                                                    SRC, DEC, &tabv);
                    for (h = 0; h < NH; h++)
                        acc[h][b * P + k] = kvq__madd16(acc[h][b * P + k],
                                                        kvq__splat16((b ? wt1 : wt)[h * KVQ_TILE + i + k]), x);
                }
        for (k = 0; i < m; i++, k++, e += stride)   /* m % P left over   */
            for (b = 0; b < CB; b++) {
                const kvq__v16 x = kvq__entry16(e, c + 16 * (size_t)b, SRC, DEC, &tabv);
                for (h = 0; h < NH; h++)
                    acc[h][b * P + k] = kvq__madd16(acc[h][b * P + k],
                                                    kvq__splat16(wt[h * KVQ_TILE + i]), x);
            }
        for (h = 0; h < NH; h++)
            for (b = 0; b < CB; b++) {
                float *o = out + (size_t)h * D + c0 + 16 * (size_t)b;
                kvq__v16 sum = acc[h][b * P];
                for (k = 1; k < P; k++) sum = kvq__add16(sum, acc[h][b * P + k]);
                if (zb) sum = kvq__add16(sum, kvq__splat16(zb[h]));
                kvq__store16(o, kvq__add16(kvq__load16(o), sum));
            }
    }
}

/* channels c .. c + the largest multiple of 16 CB left, CB blocks a walk;
   returns where it stopped                                               */
static KVQ__VINLINE size_t kvq__row_walks(float *out, size_t D, size_t c, size_t n,
                                         const char *base, size_t stride, size_t m,
                                         const float *wt, int NH, int SRC, int CB)
{
    const size_t to = n - (n - c) % (16 * (size_t)CB);
    if (to > c) kvq__tile_chunks(out, D, c, to, base, stride, m, wt, NULL, NH, SRC, CB, 1,
                                 KVQ__DEC_INT, NULL);
    return to;
}

/* n channels (16 | n) of kvq__pairs2_walk: walks of 8 blocks, then 4, 2, 1
   (kvq.h Sec. 8.1: the walk's block count sets its number of sums).     */
static void kvq__tile_pairs2(float *out, size_t n, const char *base, size_t stride, size_t m,
                             const float *wt, const float *zb)
{
    size_t c = 0;
    for (; c + 128 <= n; c += 128)
        kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 8);
    if (c + 64 <= n) { kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 4); c += 64; }
    if (c + 32 <= n) { kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 2); c += 32; }
    if (c + 16 <= n) kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 1);
}

static KVQ__VINLINE void kvq__tile_block(float *out, size_t D, size_t n, const char *base,
                                        size_t stride, size_t m, const float *wt,
                                        const float *zb, int NH, int SRC, int DEC,
                                        const float *tab)
{
    const int CB = KVQ__ROW_SUMS / NH;          /* rows: the widest walk   */
    size_t c = 0;
    if (SRC == 2 && NH == 1 && DEC == KVQ__DEC_INT) {
        kvq__tile_pairs2(out, n, base, stride, m, wt, zb);
        return;
    }
    if (SRC != KVQ__SRC_F16 && SRC != KVQ__SRC_F32) {
        /* two blocks a walk where the registers hold their sums (AVX-512):
           each weight's broadcast and each step of the entry loop then
           serve 32 channels, not 16                                       */
        const int P = NH >= 3 ? 1 : 4 / NH;
        if (KVQ__ROW_SUMS >= 2 * NH * P && n % 32 == 0)
            kvq__tile_chunks(out, D, 0, n, base, stride, m, wt, zb, NH, SRC, 2, P, DEC, tab);
        else
            kvq__tile_chunks(out, D, 0, n, base, stride, m, wt, zb, NH, SRC, 1, P, DEC, tab);
        return;
    }
    if (CB >= 8) c = kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 8);
    if (CB >= 4) c = kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 4);
    if (CB >= 2) c = kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 2);
    kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 1);
}

/* How many of entries j, j+1, .. < m follow entry j in storage, stride
   bytes apart: one run of kvq__tile_block                                */
static size_t kvq__run(const void *const *e, size_t j, size_t m, size_t stride)
{
    size_t k = j + 1;
    while (k < m && (const char *)e[k] == (const char *)e[j] + (k - j) * stride) k++;
    return k - j;
}

/* The tile's m full-precision value rows (every region: KIVI's window,
   OTT's pools, LogQuant's kept set and sinks, an uncompressed cache), row
   i at tile entry at[i], through kvq__tile_block. Needs 16 | D.          */
static void kvq__tile_rows(const kvq_cache *c, kvq__heads *H, const void *const *rows,
                           const size_t *at, size_t m)
{
    size_t D = c->cfg.head_dim, h0, k, i, j, run, bytes = D * kvq__fp_bytes(c);
    float wt[4 * KVQ_TILE];
    int f16 = c->cfg.fp_bits == 16;
    for (h0 = 0; h0 < H->n; h0 += kvq__head_batch(H->n - h0)) {
        int nh = (int)kvq__head_batch(H->n - h0);
        float *out = H->out + h0 * D;
        for (k = 0; k < (size_t)nh; k++)
            for (i = 0; i < m; i++) wt[k * KVQ_TILE + i] = H->sc[(h0 + k) * KVQ_TILE + at[i]];
        for (j = 0; j < m; j += run) {                  /* usually one run   */
            run = kvq__run(rows, j, m, bytes);
#define KVQ__RB(NH, F16) kvq__tile_block(out, D, D, (const char *)rows[j], bytes, run, wt + j, \
                                         NULL, NH, F16 ? KVQ__SRC_F16 : KVQ__SRC_F32,       \
                                         KVQ__DEC_INT, NULL)
            KVQ__WITH_NH_F16(KVQ__RB, nh, f16);
#undef KVQ__RB
        }
    }
}

/* 0 if a[j] = a0 + j for every j < n (mod 2^32), else not: 8 a step
   with AVX2 (the compiler left the loop scalar, 3 instructions an entry) */
static uint32_t kvq__run_off(const uint32_t *a, uint32_t a0, size_t n)
{
    uint32_t off = 0;
    size_t j = 0;
#if KVQ__W >= 8
    __m256i acc = _mm256_setzero_si256(),
            next = _mm256_add_epi32(_mm256_set1_epi32((int)a0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (; j + 8 <= n; j += 8) {
        acc = _mm256_or_si256(acc, _mm256_xor_si256(
            _mm256_loadu_si256((const __m256i *)(const void *)(a + j)), next));
        next = _mm256_add_epi32(next, _mm256_set1_epi32(8));
    }
    off = (uint32_t)!_mm256_testz_si256(acc, acc);
#endif
    for (; j < n; j++) off |= a[j] ^ (a0 + (uint32_t)j);
    return off;
}

/* 1 if every entry j < n of the tile is attended and V keeps its position
   at loc0 + j (the slot after entry j-1's); pos[0] is loc0's and >= 0.
   The usual tile's positions follow each other too (KIVI's and HF's
   tokens, in order): then their map entries are one run, and the check is
   two passes of n consecutive words (kvq__run_off; no gather). Else, with AVX-512 and a full tile, 16 entries a step: one
   gather of their map entries and one comparison.                        */
static int kvq__tile_follows(const uint32_t *loc, const int32_t *pos /* (n) */, size_t n,
                             uint32_t loc0)
{
    const int32_t p0 = pos[0];
    size_t j;
    if (kvq__run_off((const uint32_t *)(const void *)pos, (uint32_t)p0, n) == 0)
        /* positions p0 .. p0 + n - 1: their slots loc0 .. loc0 + n - 1   */
        return kvq__run_off(loc + p0, loc0, n) == 0;
#if KVQ__W == 16
    if (n == KVQ_TILE) {
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (j = 0; j < n; j += 16) {
            const __m512i p = _mm512_loadu_si512((const void *)(pos + j));
            if (_mm512_cmplt_epi32_mask(p, _mm512_setzero_si512())) return 0;  /* one not attended */
            if (_mm512_cmpneq_epi32_mask(_mm512_i32gather_epi32(p, (const void *)loc, 4),
                                         _mm512_add_epi32(_mm512_set1_epi32((int)(loc0 + j)), lane)))
                return 0;
        }
        return 1;
    }
#endif
    for (j = 1; j < n && pos[j] >= 0 && loc[pos[j]] == loc0 + (uint32_t)j; j++) {}
    return j == n;
}

/* kvq__map_outside's test on the first entries of a map, 8 a step with
   AVX2, and so in AVX-512 builds too (they have AVX2: one body for both
   widths, so the code the x86 test runs execute is the code that ships;
   the maps cost about 0.02 instructions per element either way), each
   tag's (off, len) found by a permute of the table: bad gets a nonzero
   bit if an entry is outside; returns how many entries it took (none on
   other targets, whose compilers vectorize Part I's loop as it is). The
   permute reads the tag's low 3 bits: tags 8-15 are caught by their top
   bit.                                                                   */
static size_t kvq__simd_map_lanes(const uint32_t *map, size_t n, const uint32_t *off,
                             const uint32_t *len, uint32_t *bad)
{
    size_t p = 0;
#if KVQ__W >= 8
    const __m256i offv = _mm256_loadu_si256((const __m256i *)(const void *)off),
                  lenv = _mm256_loadu_si256((const __m256i *)(const void *)len),
                  low = _mm256_set1_epi32(0x0FFFFFFF);
    __m256i out = _mm256_setzero_si256(), top = _mm256_setzero_si256();
    for (; p + 8 <= n; p += 8) {
        const __m256i m = _mm256_loadu_si256((const __m256i *)(const void *)(map + p)),
                      tag = _mm256_srli_epi32(m, 28),
                      x = _mm256_sub_epi32(_mm256_and_si256(m, low),
                                           _mm256_permutevar8x32_epi32(offv, tag));
        /* x >= len: max(x, len) == x                                       */
        out = _mm256_or_si256(out, _mm256_cmpeq_epi32(
            _mm256_max_epu32(x, _mm256_permutevar8x32_epi32(lenv, tag)), x));
        top = _mm256_or_si256(top, m);
    }
    *bad |= (uint32_t)(_mm256_movemask_epi8(out) != 0) |
            (uint32_t)(_mm256_movemask_ps(_mm256_castsi256_ps(top)) != 0);
#else
    (void)map; (void)n; (void)off; (void)len; (void)bad;
#endif
    return p;
}

/* out_h += sum_j w_hj v_pj over the tile's present positions, sorted in one
   walk: full-precision rows (16 | D) go through kvq__tile_rows, per-token
   quantized values with 16 | G (every preset's value store) through
   kvq__tile_block, both a tile at a time; the rest (per-channel values,
   other G or D) one position at a time (kvq__add_value), in that order.
   Then, per group g, with the m quantized slots' weights w_hj packed to
   the front of each head's score row (once the others have read theirs):
       wa_hj = w_hj a_jg,   wb_h = sum_j w_hj b_jg   (kvq__dot's order)
   (a, b): INT's stored (s, z) (kvq__ab_columns), or a format's packed
   parameters (kvq__format_ab16: b = 0, the same sums); the codes through
   the side's decoding (kvq__vals16, in kvq__tile_block).                 */
static void kvq__tile_values(const kvq_cache *c, kvq__heads *H, size_t n)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
           wpg = s->geom.words_per_group, m = 0, m_rows = 0, m_1 = 0, j, g, g0, h0, h, run,
           slot_bytes = gpu * wpg * sizeof(uint32_t);     /* one slot's codes */
    const void *w[KVQ_TILE];               /* the quantized slots' codes     */
    const kvq_sz *sz[KVQ_TILE];            /* and their (s, z) per group     */
    const void *rows[KVQ_TILE];            /* the full-precision rows        */
    size_t at_q[KVQ_TILE], at_r[KVQ_TILE], at_1[KVQ_TILE];   /* tile entries of
                                              each kind (1: one at a time)   */
    int blocks = s->schedule != KVQ_SCHED_NONE && s->axis == KVQ_PER_TOKEN && G % 16 == 0;
    int in_place = 1;                      /* every at_q[j] == j so far      */
    const int dec = kvq__side_dec(s), fmt = s->format != KVQ_FORMAT_INT;
    int vdec;                              /* dec, or E4M3's 2^8 folded      */
    const size_t spu = s->sz_per_unit;     /* kvq_sz words a slot: INT gpu  */
    float tab[16];                         /* KVQ__DEC_TAB's values          */
    int consecutive = 1;                   /* slot j == slot 0 + j so far    */
    /* the usual tile: every entry attended, quantized, in the slots that
       follow entry 0's (KIVI's and HF's tiles of past tokens): only the
       first slot's codes and (s, z) are named, as the sort below would    */
    if (blocks && n > 0 && H->pos[0] >= 0 && KVQ_LOC_TAG(s->loc[H->pos[0]]) == KVQ_LOC_QUANT) {
        const uint32_t loc0 = s->loc[H->pos[0]];
        if (kvq__tile_follows(s->loc, H->pos, n, loc0)) {
            m = n;
            w[0] = s->words + KVQ_LOC_INDEX(loc0) * gpu * wpg;
            sz[0] = s->sz + KVQ_LOC_INDEX(loc0) * spu;   /* one run: the others
                                               are read only past 16 groups */
            if (gpu > 16)
                for (j = 1; j < m; j++) sz[j] = sz[0] + j * spu;
        }
    }
    for (j = m; j < n; j++) {              /* else sort the entries (from 0) */
        uint32_t loc, tag;
        if (H->pos[j] < 0) continue;
        loc = s->loc[H->pos[j]];
        tag = KVQ_LOC_TAG(loc);
        if (tag == KVQ_LOC_ABSENT) continue;    /* only in a corrupt cache */
        if (tag != KVQ_LOC_QUANT && D % 16 == 0) {
            rows[m_rows] = kvq__row_ptr(c, &s->rows[tag - KVQ_LOC_ROWS0], KVQ_LOC_INDEX(loc));
            at_r[m_rows++] = j;
        } else if (tag == KVQ_LOC_QUANT && blocks) {
            size_t slot = KVQ_LOC_INDEX(loc);
            w[m] = s->words + slot * gpu * wpg;
            sz[m] = s->sz + slot * spu;
            consecutive &= m == 0 || (w[m] == (const uint32_t *)w[0] + m * gpu * wpg &&
                                      sz[m] == sz[0] + m * spu);
            in_place &= m == j;
            at_q[m++] = j;
        } else {
            at_1[m_1++] = j;
        }
    }
    if (m_rows) kvq__tile_rows(c, H, rows, at_r, m_rows);
    for (j = 0; j < m_1; j++) kvq__add_value(c, H, (size_t)H->pos[at_1[j]], at_1[j]);
    for (j = 0; j < m && !in_place; j++)                /* pack the weights: */
        for (h = 0; h < H->n; h++)                      /* j <= at_q[j]      */
            H->sc[h * KVQ_TILE + j] = H->sc[h * KVQ_TILE + at_q[j]];
    if (m == 0) return;
    kvq__side_table(s, tab);
    for (g0 = 0; g0 < gpu; g0 += 16) {
        /* (s, z) of up to 16 groups of every slot as floats, sf[2 (j ng +
           g - g0)] and the next. Slots that follow each other in storage
           (the usual tile) hold theirs in one run: one conversion.        */
        size_t ng = gpu - g0 < 16 ? gpu - g0 : 16;
        float sf[2 * KVQ_TILE * 16], wa[4 * KVQ_TILE], wb[4];
        float ab_a[16 * KVQ_TILE], ab_b[16 * KVQ_TILE];   /* group g - g0's a, b
                                                   of slot j: [(g - g0) TILE + j] */
        if (fmt)                             /* Sec. 4.1 (gpu <= 16): the
                                                slots' parameter rows, copied
                                                into one run unless they are */
            for (j = 0; j < m; j += 16) {
                const size_t rows = m - j < 16 ? m - j : 16;
                uint32_t run_of[16 * KVQ__TOKEN_GROUPS];
                const uint32_t *pw = (const uint32_t *)(const void *)(sz[0] + j * spu);
                if (!consecutive && spu) {
                    size_t i;
                    for (i = 0; i < rows; i++) memcpy(run_of + i * spu, sz[j + i], spu * sizeof(kvq_sz));
                    pw = run_of;
                }
                kvq__format_ab16(s, pw, rows, ab_a + j, ab_b + j, KVQ_TILE);
            }
        else {
            if (ng == gpu && consecutive)
                kvq__simd_f16_row(&sz[0]->scale, 2 * m * gpu, sf);
            else
                for (j = 0; j < m; j++) kvq__simd_f16_row(&sz[j][g0].scale, 2 * ng, sf + 2 * j * ng);
            for (j = 0; j < m; j += 16)      /* 16 slots' (a, b), by column   */
                kvq__ab_columns(sf + 2 * j * ng, ng, m - j < 16 ? m - j : 16, c->cfg.zero_mode,
                                ab_a + j, ab_b + j, KVQ_TILE);
        }
        for (g = g0; g < g0 + ng; g++) {
            const float *a = ab_a + (g - g0) * KVQ_TILE, *b = ab_b + (g - g0) * KVQ_TILE;
            for (h0 = 0; h0 < H->n; h0 += kvq__head_batch(H->n - h0)) {
                int nh = (int)kvq__head_batch(H->n - h0), k;
                float *out = H->out + h0 * D;
                for (k = 0; k < nh; k++) {
                    const float *wt = H->sc + (h0 + (size_t)k) * KVQ_TILE;
                    if (KVQ__W > 1 && m == KVQ_TILE) {    /* the usual tile */
                        kvq__store16(wa + k * KVQ_TILE, kvq__mul16(kvq__load16(wt), kvq__load16(a)));
                        kvq__store16(wa + k * KVQ_TILE + 16,
                                     kvq__mul16(kvq__load16(wt + 16), kvq__load16(a + 16)));
                    } else
                        for (j = 0; j < m; j++) wa[k * KVQ_TILE + j] = wt[j] * a[j];
                    wb[k] = kvq__simd_dot(wt, b, m);
                }
                vdec = dec;
                if (KVQ__FP8_F16 && dec == KVQ__DEC_E4M3) {
                    /* E4M3's 2^8 into the weights where exact
                       (kvq__fp8_fold_ok), each head's m of them          */
                    int ok = 1;
                    for (k = 0; k < nh; k++) ok &= kvq__fp8_fold_ok(wa + k * KVQ_TILE, m);
                    if (ok) {
                        for (k = 0; k < nh; k++)
                            for (j = 0; j < m; j++) wa[k * KVQ_TILE + j] *= 256.0f;
                        vdec = KVQ__DEC_E4M3_2M8;
                    }
                }
                for (j = 0; j < m; j += run) {          /* usually one run   */
                    run = consecutive ? m : kvq__run(w, j, m, slot_bytes);
#define KVQ__VB(NH, BITS, DEC) kvq__tile_block(out + g * G, D, G,                                \
                                          (const char *)w[j] + g * wpg * sizeof(uint32_t),     \
                                          slot_bytes, run, wa + j, j ? NULL : wb, NH, BITS,    \
                                          DEC, tab)
                    KVQ__WITH_NH_DEC(KVQ__VB, nh, s->bits, vdec);
#undef KVQ__VB
                }
            }
        }
    }
}

/* The online softmax step for a scored tile of n entries, then its values:
       m' = max(m, max_j s_j),  l' = l e^(m-m') + sum_j e^(s_j-m'),
       out' = out e^(m-m') + sum_j e^(s_j-m') v_j
   A tile is two 16-lane vectors: entries past n or not attended score
   -inf, so their weight e^(-inf) is 0; the weights come from kvq__exp16
   and are summed by kvq__hsum16's tree (the rescale factor e^(m-m'), once
   per tile at most, from expf).                                           */
static void kvq__tile_update(const kvq_cache *c, kvq__heads *H, size_t n)
{
    size_t D = c->cfg.head_dim, h, j, d;
    const int32_t *pos = H->pos;
    int32_t neg = 0;                    /* < 0 if an entry is not attended */
    for (j = 0; j < n; j++) neg |= pos[j];
    for (h = 0; h < H->n; h++) {
        float *sc = H->sc + h * KVQ_TILE, *out = H->out + h * D;
        float m = H->m[h], tile_max;
        kvq__v16 lo, hi, lo_hi;
        if (n < KVQ_TILE || neg < 0)    /* the usual tile has nothing to mask */
            for (j = 0; j < KVQ_TILE; j++)
                if (j >= n || pos[j] < 0) sc[j] = -INFINITY;
        lo = kvq__load16(sc);
        hi = kvq__load16(sc + 16);
        lo_hi = kvq__max16(lo, hi);
        tile_max = kvq__hmax16(&lo_hi);
        if (tile_max == -INFINITY) continue;            /* nothing attended  */
        if (tile_max > m) {
            float r = expf(m - tile_max);                 /* e^-inf = 0     */
            for (d = 0; d < D; d++) out[d] *= r;
            H->l[h] *= r;
            m = tile_max;
        }
        lo = kvq__sub16(lo, kvq__splat16(m));
        hi = kvq__sub16(hi, kvq__splat16(m));
        kvq__exp16(&lo);
        kvq__exp16(&hi);
        kvq__store16(sc, lo);
        kvq__store16(sc + 16, hi);
        lo_hi = kvq__add16(lo, hi);
        H->l[h] += kvq__hsum16(&lo_hi);
        H->m[h] = m;
    }
    kvq__tile_values(c, H, n);
}

/* One walk of the whole cache for the batch: out = softmax(q K^T / sqrt(D)) V.
   With AVX-512 or AVX2, 2-bit per-token keys (16 | G) and up to
   KVQ__PAIR_HEAD_DIMS query values in the batch, the keys' pair table
   lives here, 32 KB at most (8 floats per query value): built once per
   walk.                                                                  */
#define KVQ__PAIR_HEAD_DIMS 1024

/* Ask for the codes of the quantized store's slots slot0 .. slot0+n-1 of
   both sides before the walk reaches them (per-token keys: slot = unit).
   A cold walk (a decode over many layers: the cache's bytes come from
   DRAM) otherwise waits on several short streams at once, each too short
   per tile for the hardware prefetchers to run ahead of it: at T = 32K,
   HF-2 with one head ran a third slower cold than warm. The codes are the
   long streams; hints for the scales, zeros and maps as well cost the warm
   walk 4% and the cold one nothing more. V's slots are taken at K's
   indices (where KIVI and HF keep them, less the window); a wrong guess
   costs a few wasted lines, never a wrong result. Per-token keys only:
   for KIVI's per-channel keys the same hints made a cold walk slower (T =
   32K, one head: 0.53 -> 0.60 ms). Sec. 4.1's format sides ask for L2
   only (prefetcht1): into L1 as well, the cold walk waited on them as if
   there were no hints (Zen 4, T = 32K, one head, best of 12: nvfp4 1.13
   cold against 0.80 warm, fp8-e4m3 1.78 against 1.04; into L2, 0.92 and
   1.48; hints 4, 16 or 64 tiles ahead: the same). FP8 sides on both
   K and V no longer come here: kvq__fp8_ahead's spread hints (above) took
   fp8-e4m3 to 0.91-0.95 ms cold. INT's hints stay as measured above. Inlined: GCC deems a function that only prefetches
   pure and deletes the call.                                              */
#define KVQ__AHEAD_SLOTS (4 * KVQ_TILE)   /* 2, 4, 8 tiles: the same time */
static KVQ__INLINE void kvq__prefetch_slots(const kvq_cache *c, size_t slot0, size_t n)
{
    int side;
    for (side = 0; side < 2; side++) {
        const kvq_side *s = side ? &c->v : &c->k;
        size_t tpu = s->geom.tokens_per_unit, per = s->geom.groups_per_unit, u0, u1;
        if (s->schedule == KVQ_SCHED_NONE || tpu == 0) continue;
        u0 = tpu == 1 ? slot0 : slot0 / tpu;            /* per-token: no divide */
        u1 = tpu == 1 ? slot0 + n : (slot0 + n + tpu - 1) / tpu;
        if (u1 > s->n_units) u1 = s->n_units;
        if (u0 >= u1) continue;
        kvq__prefetch_to(s->words + u0 * per * s->geom.words_per_group,
                         (u1 - u0) * per * s->geom.words_per_group * sizeof(uint32_t),
                         s->format != KVQ_FORMAT_INT);
    }
}

static void kvq__online_walk(const kvq_cache *c, kvq__heads *H)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, h, d, j, u, r;
#if KVQ__W == 16 || KVQ__W == 8
    float pairs[KVQ__PAIR_FLOATS * KVQ__PAIR_HEAD_DIMS]  /* (n, D/2, 16)      */
        __attribute__((aligned(64)));
    H->pairs = NULL;
    if (s->schedule != KVQ_SCHED_NONE && s->axis == KVQ_PER_TOKEN && s->bits == 2 &&
        s->group % 16 == 0 && H->n * D <= KVQ__PAIR_HEAD_DIMS) {
        H->pairs = pairs;
        if (H->pairs) kvq__key_pairs(H->q, H->n, D, pairs);
    }
#else
    H->pairs = NULL;
#endif
    H->q8 = NULL;
    H->fp8_ahead = s->axis == KVQ_PER_TOKEN && kvq__fp8_ahead(c);
#if KVQ__FP8_KEYS                        /* E4M3 keys: q 2^8, in pairs' room */
    if (!H->pairs && s->schedule != KVQ_SCHED_NONE && kvq__side_dec(s) == KVQ__DEC_E4M3 &&
        H->n * D <= KVQ__PAIR_FLOATS * KVQ__PAIR_HEAD_DIMS && kvq__fp8_fold_ok(H->q, H->n * D)) {
        for (d = 0; d < H->n * D; d++) pairs[d] = H->q[d] * 256.0f;
        H->q8 = pairs;
    }
#endif
    for (h = 0; h < H->n; h++) { H->m[h] = -INFINITY; H->l[h] = 0.0f; }
    for (d = 0; d < H->n * D; d++) H->out[d] = 0.0f;
    if (s->schedule != KVQ_SCHED_NONE && s->n_units > 0) {
        size_t G = s->group, tpu = s->geom.tokens_per_unit;
        if (s->axis == KVQ_PER_TOKEN)                   /* per-group q sums  */
            for (h = 0; h < H->n; h++)
                for (u = 0; u < D / G; u++) {
                    float sum = 0.0f;
                    for (d = 0; d < G; d++) sum += H->q[h * D + u * G + d];
                    H->qa[h * D + u] = sum;
                }
        for (u = 0; u < s->n_units; u += s->axis == KVQ_PER_TOKEN ? KVQ_TILE : 1) {
            size_t t0, n_tile = s->axis == KVQ_PER_TOKEN ? KVQ_TILE : tpu;
            if (s->axis == KVQ_PER_CHANNEL) kvq__unit_qa(c, H, u);
            for (t0 = 0; t0 < n_tile; t0 += KVQ_TILE) {
                size_t n = n_tile - t0 < KVQ_TILE ? n_tile - t0 : KVQ_TILE,
                       slot0 = u * tpu + t0;
                int any = 0;
                if (s->axis == KVQ_PER_TOKEN && u + n > s->n_units) n = s->n_units - u;
                for (j = 0; j < n; j++) any |= (H->pos[j] = s->qpos[slot0 + j]) >= 0;
                if (!any) continue;                     /* placeholders only */
                if (s->axis == KVQ_PER_TOKEN && !H->fp8_ahead)
                    kvq__prefetch_slots(c, slot0 + KVQ__AHEAD_SLOTS, n);
                if (s->axis == KVQ_PER_CHANNEL) kvq__scores_channel(c, H, u, t0, n);
                else kvq__scores_token(c, H, slot0, n);
                kvq__tile_update(c, H, n);
            }
        }
    }
    for (r = 0; r < KVQ_ROW_REGIONS; r++) {
        const kvq_rows *rg = &s->rows[r];
        size_t i0;
        for (i0 = rg->off; i0 < rg->off + rg->n; i0 += KVQ_TILE) {
            size_t n = rg->off + rg->n - i0 < KVQ_TILE ? rg->off + rg->n - i0 : KVQ_TILE;
            for (j = 0; j < n; j++) H->pos[j] = rg->pos[i0 + j];
            kvq__scores_rows(c, H, rg, i0, n);
            kvq__tile_update(c, H, n);
        }
    }
    for (h = 0; h < H->n; h++)
        for (d = 0; d < D; d++) H->out[h * D + d] /= H->l[h];
}

/* kvq.h's kvq__walk_cache for a batch of heads (kvq.h's kvq__attend_online
   forms the batches from the scratch).                                   */
/* The caches this walk serves. Sec. 4's codes at B = 1, 2, 4, 8: every
   side. Sec. 4.1's formats (but Lloyd-Max at B = 2) and INT at B = 3: a
   side per token with 16 | G and at most KVQ__TOKEN_GROUPS groups a token
   (every kvq_config_engine preset for D up to 256), where the kernels
   take 16 slots at a time (kvq__token_block, kvq__tile_block) and read
   their codes through a decoding (kvq__vals16); with AVX-512 and AVX2
   only (NEON's decodings are not yet checked on a machine). kvq.h's plain
   walk takes the rest.                                                   */
static int kvq__side_served(const kvq_side *s)
{
    if (s->schedule == KVQ_SCHED_NONE) return 1;
    if (s->format == KVQ_FORMAT_INT && s->bits != 3) return 1;
    return (KVQ__W == 16 || KVQ__W == 8) && kvq__side_dec(s) >= 0 &&
           s->axis == KVQ_PER_TOKEN && s->group % 16 == 0 &&
           s->geom.groups_per_unit <= KVQ__TOKEN_GROUPS;
}

static int kvq__simd_walk_serves(const kvq_cache *c)
{
    return kvq__side_served(&c->k) && kvq__side_served(&c->v);
}

static void kvq__simd_walk_cache(const kvq_cache *c, struct kvq__walk *W)
{
    kvq__heads H;
    H.n = W->n;
    H.q = W->q;
    H.out = W->out;
    H.row = W->row;
    H.qa = W->qa;
    H.sc = W->sc;
    H.m = W->m;
    H.l = W->l;
    H.qb = W->qb;
    H.inv_sqrt_d = W->inv_sqrt_d;
    kvq__online_walk(c, &H);
}

/* ------------------------------------------------------------------------ */
/* 4. the rotation                                                          */
/* ------------------------------------------------------------------------ */
/* ---- the Walsh-Hadamard transform, 16 lanes at a time ------------------
   kvq__simd_rotate_into(sign, D, inverse, in, out) is kvq__rotate_row
   (Sec. 6.1) bit for bit: every output is the same chain of a + b and a - b
   on the same pairs, stage after stage in the same order, then the same
   multiply by (float)(1/sqrt(D)), with the sign flip (exact) before the
   butterflies (rotate) or after the scale (rotate back). tests/simd_check.c
   holds it to kvq__rotate_row for D = 1 .. 4096, both directions, with and
   without signs, on data up to +-65504 and down to subnormals, in every
   vector width; tests/test_rotation.c holds the cache's use of it.

   Why it is exact. A stage replaces (x_j, x_{j+h}) by (x_j + x_{j+h},
   x_j - x_{j+h}); IEEE addition is commutative and a - b is a + (-b), so
   the pair can be formed in any lane arrangement as long as each output
   is that one rounded sum. The row is cut in blocks of 16 floats:

     h = 1, 2, 4, 8   pairs inside one block, held in registers. Where h
                      spans native vectors (h >= W) it is a whole-vector
                      add and subtract of two parts; inside a native vector
                      (h < W) each lane needs its partner: p = the vector
                      with lanes j and j ^ h swapped (one permute), then
                      y = p + x * s_h with s_h = +1 on lanes whose bit h is
                      clear, -1 where set: x_j + x_{j+h} low, x_j - x_{j+h}
                      high (x * (+-1) is exact, so a fused multiply-add
                      rounds once, the same sum).
     h = 16 .. D/2    pairs of whole blocks, a row pass per stage.

   The four inner stages touch only their block, so they may run block
   after block or stage after stage across blocks: the order across blocks
   changes nothing. The last pass scales (and flips, rotating back) and
   returns max |out|, which the cache's range check needs anyway. With
   AVX-512 and D <= 128 the whole row stays in registers from load to
   store (KVQ__ROT_REG_BLOCKS). D < 16 takes kvq__rotate_row.             */

/* x with lanes j and j ^ h swapped inside each native vector (h < W)     */
static KVQ__VINLINE kvq__vf kvq__vswap(kvq__vf x, int h)
{
#if KVQ__W == 16
    __m512 v = (__m512)x;
    return (kvq__vf)(h == 1 ? _mm512_permute_ps(v, 0xB1)          /* 1 0 3 2 */
                   : h == 2 ? _mm512_permute_ps(v, 0x4E)          /* 2 3 0 1 */
                   : h == 4 ? _mm512_shuffle_f32x4(v, v, 0xB1)    /* 128-bit quarters */
                   :          _mm512_shuffle_f32x4(v, v, 0x4E));  /* 256-bit halves */
#elif KVQ__W == 8
    __m256 v = (__m256)x;
    return (kvq__vf)(h == 1 ? _mm256_permute_ps(v, 0xB1)
                   : h == 2 ? _mm256_permute_ps(v, 0x4E)
                   :          _mm256_permute2f128_ps(v, v, 0x01));
#elif KVQ__W == 4
    float32x4_t v = (float32x4_t)x;
    return (kvq__vf)(h == 1 ? vrev64q_f32(v) : vextq_f32(v, v, 2));
#endif
}

/* s_h of the comment above, lane j of row log2(h): +1, or -1 if j & h     */
static const float kvq__bfly_sign[4][16] = {
    { 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1 },
    { 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1 },
    { 1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1 },
    { 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1 },
};

/* stages h = 1, 2, 4, 8 of each of the n 16-float blocks x[0 .. n-1], a
   stage at a time (the blocks are independent)                           */
static KVQ__VINLINE void kvq__hadamard16(kvq__v16 *x, size_t n)
{
    size_t i;
    int lg, k;
    KVQ__UNROLL(4)
    for (lg = 0; lg < 4; lg++) {
        int h = 1 << lg;
        if (h < KVQ__W) {                              /* inside each part */
            const kvq__vf s = KVQ__VLOAD(kvq__bfly_sign[lg]);
            KVQ__UNROLL(8)
            for (i = 0; i < n; i++)
                KVQ__EACH(k) x[i].part[k] = KVQ__VFMA(kvq__vswap(x[i].part[k], h), x[i].part[k], s);
        } else {                                       /* part with part */
            int ph = h / KVQ__W;
            KVQ__UNROLL(8)
            for (i = 0; i < n; i++)
                KVQ__EACH(k) if (!(k & ph)) {
                    kvq__vf a = x[i].part[k], b = x[i].part[k + ph];
                    x[i].part[k] = a + b;
                    x[i].part[k + ph] = a - b;
                }
        }
    }
}

/* out[j..j+16) <- v. On the last pass (last != 0) v is first scaled and,
   rotating back, flipped by sign (D) when non-NULL; returns big, or max(big,
   |v|) on the last pass. Values in and out, so the running max stays in
   registers.                                                              */
static KVQ__VINLINE kvq__v16 kvq__rot_put(float *out, size_t j, kvq__v16 v, int last,
                                          kvq__v16 scale, const float *sign, kvq__v16 big)
{
    if (last) {
        v = kvq__mul16(v, scale);
        if (sign) v = kvq__mul16(v, kvq__load16(sign + j));
#if KVQ__W == 16 && defined(__AVX512DQ__)
        /* max(|big|, |v|) with the sign cleared: one vrangeps, not an and
           and a max (the same floats: both are >= 0 and exact)            */
        big.part[0] = (kvq__vf)_mm512_range_ps((__m512)big.part[0], (__m512)v.part[0], 0x0B);
#else
        big = kvq__max16(big, kvq__abs16(v));
#endif
    }
    kvq__store16(out + j, v);
    return big;
}

/* The stages between R blocks x[0 .. R-1] (R a power of two) that lie h,
   2h, .. (R/2) h floats apart: the first pairs block r with r + 1, the
   next r with r + 2, then r + 4 .. (r's bit clear).                      */
static KVQ__VINLINE void kvq__rot_blocks(kvq__v16 *x, int R)
{
    int r, st;
    KVQ__UNROLL(4)
    for (st = 1; st < R; st *= 2)
        KVQ__UNROLL(8)
        for (r = 0; r < R; r++)
            if (!(r & st)) {
                kvq__v16 a = x[r], b = x[r + st];
                x[r] = kvq__add16(a, b);
                x[r + st] = kvq__sub16(a, b);
            }
}

/* R stages h, 2h, .. (R/2) h in one pass over the row: blocks j + r h,
   r = 0 .. R-1, in registers, for every j (kvq__rot_blocks). Returns big
   as kvq__rot_put does (last: the final pass).                           */
static KVQ__VINLINE kvq__v16 kvq__rot_pass(float *out, size_t D, size_t h, int R, int last,
                                           kvq__v16 scale, const float *flip, kvq__v16 big)
{
    size_t i, j;
    int r;
    for (i = 0; i < D; i += (size_t)R * h)
        for (j = i; j < i + h; j += 16) {
            kvq__v16 x[8];
            for (r = 0; r < R; r++) x[r] = kvq__load16(out + j + (size_t)r * h);
            kvq__rot_blocks(x, R);
            for (r = 0; r < R; r++)
                big = kvq__rot_put(out, j + (size_t)r * h, x[r], last, scale, flip, big);
        }
    return big;
}

/* AVX-512 rotates rows of up to this many 16-float blocks (D <= 128)
   with every block in a register from its load to its store: the passes
   below would store the row after the blocks' stages and load it back
   (with 16 registers, AVX2 would spill a D = 128 row instead). The GCC
   unroll pragma lets the registers replace the array x: unrolled later,
   GCC keeps x in memory.                                                  */
#if KVQ__W == 16
#define KVQ__ROT_REG_BLOCKS 8
#endif

/* out (D) <- R in or R^T in, kvq__rotate_row's floats; in == out allowed.
   Returns max |out|. Passes over the row, for D = 128 (AVX2): the blocks
   (stages 1 .. 8), then stages 16, 32 and 64 with the scale. With vector
   lanes it is inlined into kvq__rotate_row_fast once per common D.       */
static KVQ__VINLINE float kvq__rotate_row_d(const float *sign, size_t D, int inverse,
                                            const float *in, float *out)
{
    const float *flip = inverse ? sign : NULL;    /* signs after the scale */
    kvq__v16 scale, big = kvq__splat16(0.0f);
    size_t h, i, j;
    if (D < 16) {
        float m = 0.0f;
        if (out != in) memmove(out, in, D * sizeof(float));
        kvq__rotate_row(sign, D, inverse, out);
        for (j = 0; j < D; j++) m = fabsf(out[j]) > m ? fabsf(out[j]) : m;
        return m;
    }
    scale = kvq__splat16((float)(1.0 / sqrt((double)D)));
#ifdef KVQ__ROT_REG_BLOCKS
    if (D <= 16 * KVQ__ROT_REG_BLOCKS) {
        /* the same stages in the same order, the row in registers: signs
           and stages 1 .. 8 of every block, the stages between blocks,
           the scale (and signs), one store a block                       */
        kvq__v16 x[KVQ__ROT_REG_BLOCKS];
        KVQ__UNROLL(8)
        for (i = 0; i < D / 16; i++) {
            x[i] = kvq__load16(in + 16 * i);
            if (sign && !inverse) x[i] = kvq__mul16(x[i], kvq__load16(sign + 16 * i));
        }
        kvq__hadamard16(x, D / 16);
        kvq__rot_blocks(x, (int)(D / 16));
        KVQ__UNROLL(8)
        for (i = 0; i < D / 16; i++) big = kvq__rot_put(out, 16 * i, x[i], 1, scale, flip, big);
        return kvq__hmax16(&big);
    }
#endif
    /* 1. signs (rotating), stages 1 .. 8 in each block                    */
    for (i = 0; i < D; i += 16) {
        kvq__v16 v = kvq__load16(in + i);
        if (sign && !inverse) v = kvq__mul16(v, kvq__load16(sign + i));
        kvq__hadamard16(&v, 1);
        big = kvq__rot_put(out, i, v, D == 16, scale, flip, big);
    }
    /* 2. stages 16 .. D/2: 4 of them a pass while more than 3 are left,
          then the last 3 (all 8 blocks in registers where they fit:
          AVX-512; else 2 + 1), 2 or 1, that pass with the scale. Written
          so that h is a plain geometric loop: with D a constant, it and
          every pass unroll completely.                                   */
    for (h = 16; h * 8 < D; h *= 4) big = kvq__rot_pass(out, D, h, 4, 0, scale, flip, big);
    if (h * 8 == D && KVQ__W == 16) big = kvq__rot_pass(out, D, h, 8, 1, scale, flip, big);
    else if (h * 8 == D) {
        big = kvq__rot_pass(out, D, h, 4, 0, scale, flip, big);
        big = kvq__rot_pass(out, D, 4 * h, 2, 1, scale, flip, big);
    } else if (h * 4 == D) big = kvq__rot_pass(out, D, h, 4, 1, scale, flip, big);
    else if (h * 2 == D) big = kvq__rot_pass(out, D, h, 2, 1, scale, flip, big);
    return kvq__hmax16(&big);
}

/* kvq__rotate_row_d with D a constant where it is a common head size: its
   loops then unroll completely and 1/sqrt(D) is folded (AVX2, D = 128:
   372 instructions a row, the loads, butterflies and stores and little
   else).                                                                 */
static float kvq__simd_rotate_into(const float *sign, size_t D, int inverse,
                                  const float *in, float *out)
{
    switch (D) {
    case 64:  return kvq__rotate_row_d(sign, 64, inverse, in, out);
    case 128: return kvq__rotate_row_d(sign, 128, inverse, in, out);
    case 256: return kvq__rotate_row_d(sign, 256, inverse, in, out);
    default:  return kvq__rotate_row_d(sign, D, inverse, in, out);
    }
}


#ifdef __cplusplus
}
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#endif
#endif /* KVQ_SIMD_IMPLEMENTATION_DONE */
