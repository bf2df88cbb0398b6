/* fuzz/fuzz_quant.c - quantize -> dequantize round trips on arbitrary bytes.

   Input: 4 bytes of shape (bits, zero mode, axis, G, D, T, how to read the
   data), then the data: raw float32 bit patterns (every NaN, Inf,
   subnormal and huge value) or small "grid" values (ties and constant runs
   are likely), cycled to fill T x D.

   Properties (kvq.h Sec. 4-6):
   - the status is the one an independent check predicts: GROUP when G
     does not divide D (per-token) or T (per-channel), NONFINITE for any
     NaN/Inf, RANGE when some group's stored fp16 scale or zero would
     overflow, else OK; on failure words and sz are untouched;
   - on success every element of the dequantized matrix is within the
     error bound of Sec. 4 computed from its group's exact min/max and the
     stored (s, z);
   - dequantizing the packed words equals unpacking kvq_quantize_group's
     codes of the same group (packing round trip, both layouts);
   - quantizing the dequantized matrix again obeys the same bound with the
     new parameters (the integer form's clamped zero point included).      */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "fuzz.h"

#define MAXD 64
#define MAXT 64

static float X[MAXT * MAXD], Y[MAXT * MAXD], Z[MAXT * MAXD];
static uint32_t words[MAXT * MAXD], words2[MAXT * MAXD];
static kvq_sz sz[MAXT * MAXD], sz2[MAXT * MAXD];

/* The group (g) of unit u as pointer + stride into X.                     */
static const float *group_at(const float *M, size_t u, size_t g, size_t D, size_t G,
                             kvq_axis axis, size_t *stride)
{
    *stride = axis == KVQ_PER_TOKEN ? 1 : D;
    return axis == KVQ_PER_TOKEN ? M + u * D + g * G : M + u * G * D + g;
}

static void minmax(const float *x, size_t n, size_t stride, float *mn, float *mx)
{
    size_t i;
    *mn = *mx = x[0];
    for (i = 1; i < n; i++) {
        if (x[i * stride] < *mn) *mn = x[i * stride];
        if (x[i * stride] > *mx) *mx = x[i * stride];
    }
    *mn += 0.0f; *mx += 0.0f;
}

static int f16_finite(float x) { return isfinite(kvq_f16_to_f32(kvq_f32_to_f16(x))); }

/* Every element of Yd (dequantized from X with parameters P) within the
   Sec. 4 bound of its group; with `also_group`, the same group through
   kvq_quantize_group gives the same (s, z), and its codes survive
   kvq_pack / kvq_unpack and dequantize to exactly Yd.                     */
static void check_bound(const float *X, const float *Yd, const kvq_sz *P, size_t T, size_t D,
                        int bits, size_t G, kvq_axis axis, kvq_zero_mode mode, int also_group)
{
    size_t units = axis == KVQ_PER_TOKEN ? T : T / G, gpu = axis == KVQ_PER_TOKEN ? D / G : D;
    size_t u, g, k, stride, N = ((size_t)1 << bits) - 1;
    for (u = 0; u < units; u++)
        for (g = 0; g < gpu; g++) {
            kvq_sz p = P[u * gpu + g], q;
            float mn, mx, se;
            double s, z, e_s, bound_base;
            const float *x = group_at(X, u, g, D, G, axis, &stride);
            const float *y = group_at(Yd, u, g, D, G, axis, &stride);
            uint8_t codes[64], codes2[64];
            minmax(x, G, stride, &mn, &mx);
            se = (mx - mn) / (float)N;
            s = kvq_f16_to_f32(p.scale);
            z = kvq_f16_to_f32(p.zero);
            e_s = fabs(s - (double)se);
            if (mode == KVQ_ZERO_FLOAT)
                bound_base = s / 2 + fabs(z - mn) + (double)N * e_s;
            else if (s == 0.0)          /* the stored scale underflowed: x' = 0 */
                bound_base = fabs(mn) > fabs(mx) ? fabs(mn) : fabs(mx);
            else
                bound_base = s / 2 + s * fabs(z + mn / s) + (double)N * e_s;
            for (k = 0; k < G; k++) {
                double xv = x[k * stride], yv = y[k * stride];
                double zz = mode == KVQ_ZERO_FLOAT ? fabs(z) : fabs(z * s);
                double eps = ldexp(1.0, -21) * (fabs(xv) + zz + (double)N * s) + ldexp(1.0, -140);
                FZ_ASSERT(fabs(xv - yv) <= bound_base + eps,
                          "element %zu of group (%zu,%zu): |%.9g - %.9g| > %.9g (B=%d mode=%d)",
                          k, u, g, xv, yv, bound_base + eps, bits, (int)mode);
            }
            /* the same group through kvq_quantize_group, packed and unpacked */
            FZ_ASSERT(kvq_quantize_group(x, G, stride, bits, mode, codes, &q) == KVQ_OK, "group");
            FZ_ASSERT(q.scale == p.scale && q.zero == p.zero, "group parameters differ");
            if (also_group && G <= 64) {
                FZ_ASSERT(kvq_pack(codes, G, bits, words2) == KVQ_OK, "pack");
                FZ_ASSERT(kvq_unpack(words2, G, bits, codes2) == KVQ_OK, "unpack");
                for (k = 0; k < G; k++) {
                    float a, b;
                    FZ_ASSERT(codes2[k] == codes[k] && codes[k] <= N, "pack round trip");
                    kvq_sz_affine(q, mode, &a, &b);
                    FZ_ASSERT((float)codes[k] * a + b == y[k * stride], "group vs matrix dequant");
                }
            }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int bits_of[4] = { 1, 2, 4, 8 };
    static const size_t g_of[8] = { 1, 2, 3, 4, 8, 16, 32, 5 };
    fz f = { data, size, 0 };
    uint8_t b0 = fz_u8(&f), b1 = fz_u8(&f), b2 = fz_u8(&f), b3 = fz_u8(&f);
    int bits = bits_of[b0 & 3], raw = (b0 >> 4) & 1;
    kvq_zero_mode mode = (kvq_zero_mode)((b0 >> 2) & 1);
    kvq_axis axis = (kvq_axis)((b0 >> 3) & 1);
    size_t G = g_of[b1 & 7], D = 1 + b2 % MAXD, T = 1 + b3 % MAXT, n = T * D, i, start = f.i;
    size_t units, gpu, u, g, stride, N = ((size_t)1 << bits) - 1;
    kvq_status st, want = KVQ_OK;
    kvq_layout L;
    if (start >= size) return 0;
    /* data                                                                 */
    for (i = 0; i < n; i++) {
        if (raw) {
            f.i = start + (4 * i) % (size - start);
            X[i] = fz_bits_f32(fz_u32(&f));
        } else {
            uint8_t v = data[start + i % (size - start)];
            X[i] = (float)((int)(v & 31) - 16) * ldexpf(1.0f, (int)(v >> 5) * 3 - 9);
        }
    }
    /* the expected status, independently                                   */
    if (axis == KVQ_PER_TOKEN ? D % G : T % G) want = KVQ_ERR_GROUP;
    for (i = 0; want == KVQ_OK && i < n; i++) if (!isfinite(X[i])) want = KVQ_ERR_NONFINITE;
    units = axis == KVQ_PER_TOKEN ? T : T / G;
    gpu = axis == KVQ_PER_TOKEN ? D / G : D;
    for (u = 0; want == KVQ_OK && u < units; u++)
        for (g = 0; want == KVQ_OK && g < gpu; g++) {
            float mn, mx, s;
            const float *x = group_at(X, u, g, D, G, axis, &stride);
            minmax(x, G, stride, &mn, &mx);
            s = (mx - mn) / (float)N;
            if (!f16_finite(s)) want = KVQ_ERR_RANGE;
            else if (mode == KVQ_ZERO_FLOAT && !f16_finite(mn)) want = KVQ_ERR_RANGE;
            else if (mode == KVQ_ZERO_INT && kvq_f16_to_f32(kvq_f32_to_f16(s)) == 0.0f &&
                     !f16_finite(fabsf(mn))) want = KVQ_ERR_RANGE;
        }
    fz_poison(words, sizeof words); fz_poison(sz, sizeof sz);
    st = kvq_quantize_matrix(X, T, D, bits, G, axis, mode, words, sz);
    FZ_ASSERT(st == want, "status %d, expected %d (B=%d G=%zu D=%zu T=%zu axis=%d mode=%d)",
              (int)st, (int)want, bits, G, D, T, (int)axis, (int)mode);
    if (st != KVQ_OK) {
        FZ_ASSERT(fz_poisoned(words, sizeof words) && fz_poisoned(sz, sizeof sz), "wrote on failure");
        return 0;
    }
    FZ_ASSERT(kvq_layout_init(&L, T, D, bits, G, axis) == KVQ_OK, "layout");
    FZ_ASSERT(fz_poisoned(words + L.total_words, sizeof words - L.total_words * 4) &&
              fz_poisoned(sz + L.total_groups, sizeof sz - L.total_groups * 4), "wrote past the layout");
    FZ_ASSERT(kvq_dequantize_matrix(words, sz, T, D, bits, G, axis, mode, Y) == KVQ_OK, "dequantize");

    check_bound(X, Y, sz, T, D, bits, G, axis, mode, 1);
    /* re-quantizing what was dequantized obeys the same bound, with the
       new group's own (s, z): the integer form's clamped zero point can
       make that large (Sec. 4), never unaccounted for                     */
    if (kvq_quantize_matrix(Y, T, D, bits, G, axis, mode, words2, sz2) == KVQ_OK) {
        FZ_ASSERT(kvq_dequantize_matrix(words2, sz2, T, D, bits, G, axis, mode, Z) == KVQ_OK, "deq 2");
        check_bound(Y, Z, sz2, T, D, bits, G, axis, mode, 0);
    }
    return 0;
}
