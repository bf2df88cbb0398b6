/* examples/08_formats.c - the formats inference engines ship (kvq.h Sec.
   4.1), each grid's defining facts beside its specification.

   Every format stores a code c per value and a scale per group (or per
   cache side) and decodes x' = value(c) a. main steps through them: FP8
   E4M3 (1) and E5M2 (2), the OCP 8-bit floating point formats of vLLM's,
   TensorRT-LLM's and SGLang's fp8 caches; E2M1 and NVFP4's two-level
   scale, with the 4over6 choice (3); TurboQuant's Lloyd-Max grid
   (arXiv 2504.19874) and its mean squared error (4); and what each
   kvq_config_engine preset costs, bytes per token and bits per element,
   from kvq_cache_bytes of real caches at D = 128: NVFP4's 72 bytes per
   128 values, vLLM's TurboQuant slots of 196 / 136 / 120 / 104 bytes per
   K+V head, llama.cpp's q8_0 at 8.5 bits (5).

   Each number is printed beside the specification's (the OCP 8-bit
   floating point specification v1.0, NVIDIA's NVFP4 description, the
   TurboQuant paper, vLLM's and llama.cpp's sources as kvq.h cites them)
   with PASS/FAIL against a stated tolerance; exits 1 on any FAIL. The
   exhaustive checks (every fp32 bit pattern, brute-force NVFP4 blocks,
   ggml's reference quantizers) are tests/test_formats.c; the Lloyd-Max
   table's derivation is examples/lloyd_max.c.

   Run: ./build/examples/08_formats  (the grids do not depend on data;
   --seed and --csv are accepted and unused, as make plots passes them)   */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

/* 1. E4M3: sign | 4 exponent bits (bias 7) | 3 mantissa bits, "fn": no
   infinities, S.1111.111 the only NaN. From fp32: round to nearest, ties
   to the even code, finite values beyond 448 saturate (PTX
   cvt.rn.satfinite).                                                      */
static void show_e4m3(void)
{
    printf("\n1. FP8 E4M3 (OCP \"fn\"): s.eeee.mmm, bias 7, no infinities\n");
    printf("   largest  0x7E = %g    smallest normal 0x08 = %g = 2^%d    smallest subnormal 0x01 = %g = 2^%d\n",
           (double)kvq_e4m3_to_f32(0x7E), (double)kvq_e4m3_to_f32(0x08), ilogb(kvq_e4m3_to_f32(0x08)),
           (double)kvq_e4m3_to_f32(0x01), ilogb(kvq_e4m3_to_f32(0x01)));
    ex_check(kvq_e4m3_to_f32(0x7E) == 448.0f, "E4M3 max 448 (OCP spec: S.1111.110 = 1.75 x 2^8)");
    ex_check(kvq_e4m3_to_f32(0x01) == ldexpf(1, -9) && kvq_e4m3_to_f32(0x08) == ldexpf(1, -6),
             "E4M3 min subnormal 2^-9, min normal 2^-6 (spec)");
    ex_check(isnan(kvq_e4m3_to_f32(0x7F)) && kvq_f32_to_e4m3(1000.0f) == 0x7E &&
             kvq_f32_to_e4m3(INFINITY) == 0x7E, "0x7F is NaN; 1000 and +Inf saturate to 448 (satfinite)");
    printf("   17 -> %g, 19 -> %g, 0.0009765625 (2^-10, half the smallest step) -> %g\n",
           (double)kvq_e4m3_to_f32(kvq_f32_to_e4m3(17.0f)), (double)kvq_e4m3_to_f32(kvq_f32_to_e4m3(19.0f)),
           (double)kvq_e4m3_to_f32(kvq_f32_to_e4m3(ldexpf(1, -10))));
    ex_check(kvq_e4m3_to_f32(kvq_f32_to_e4m3(17.0f)) == 16.0f && kvq_e4m3_to_f32(kvq_f32_to_e4m3(19.0f)) == 20.0f &&
             kvq_f32_to_e4m3(ldexpf(1, -10)) == 0x00,
             "ties go to the even mantissa: 17 -> 16, 19 -> 20, 2^-10 -> 0");
}

/* 2. E5M2: sign | 5 exponent bits (bias 15) | 2 mantissa bits, IEEE-like:
   exponent 31 holds Inf and NaN.                                          */
static void show_e5m2(void)
{
    printf("\n2. FP8 E5M2: s.eeeee.mm, bias 15, IEEE-like infinities and NaNs\n");
    printf("   largest  0x7B = %g    smallest normal 0x04 = %g = 2^%d    smallest subnormal 0x01 = %g = 2^%d\n",
           (double)kvq_e5m2_to_f32(0x7B), (double)kvq_e5m2_to_f32(0x04), ilogb(kvq_e5m2_to_f32(0x04)),
           (double)kvq_e5m2_to_f32(0x01), ilogb(kvq_e5m2_to_f32(0x01)));
    ex_check(kvq_e5m2_to_f32(0x7B) == 57344.0f, "E5M2 max 57344 (spec: 1.75 x 2^15)");
    ex_check(kvq_e5m2_to_f32(0x01) == ldexpf(1, -16) && kvq_e5m2_to_f32(0x04) == ldexpf(1, -14),
             "E5M2 min subnormal 2^-16, min normal 2^-14 (spec)");
    ex_check(isinf(kvq_e5m2_to_f32(0x7C)) && isnan(kvq_e5m2_to_f32(0x7D)) && kvq_f32_to_e5m2(1e5f) == 0x7B,
             "0x7C is +Inf, 0x7D NaN; 1e5 saturates to 57344 (the cache never stores Inf)");
}

/* 3. E2M1 and NVFP4: codes s.ee.m (bias 1), an E4M3 scale per 16 values,
   an fp32 scale per side s:  sf = e4m3((amax / 6) / s),  a = value(sf) s,
   c = e2m1(x / a). 4over6 also tries amax -> 4 and keeps the smaller
   squared error.                                                         */
static void show_nvfp4(void)
{
    static const float grid[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
    static const float x[16] = { 0.55f, -1.7f, 3.4f, 1.1f, -2.2f, 0.0f, 3.3f, -0.6f,
                                 1.65f, 4.4f, -3.4f, 0.5f, 2.25f, -1.1f, 0.3f, 1.7f };
    double err[2] = { 0, 0 };
    int c, ok = 1, m;
    printf("\n3. FP4 E2M1 codes: s.ee.m, bias 1\n   code :");
    for (c = 0; c < 8; c++) printf(" %4d", c);
    printf("\n   value:");
    for (c = 0; c < 8; c++) { printf(" %4g", (double)kvq_e2m1_to_f32((uint8_t)c)); ok &= kvq_e2m1_to_f32((uint8_t)c) == grid[c]; }
    printf("\n");
    ex_check(ok, "the E2M1 grid is +-{0, 0.5, 1, 1.5, 2, 3, 4, 6} (NVIDIA's NVFP4 description)");
    ex_check(kvq_f32_to_e2m1(2.5f) == 4 && kvq_f32_to_e2m1(5.0f) == 6 && kvq_f32_to_e2m1(7.0f) == 7,
             "ties to the even code: 2.5 -> 2, 5 -> 4; 7 saturates to 6");
    printf("   one block of 16 (amax 4.4), side scale s = 1:\n");
    for (m = 0; m < 2; m++) {
        kvq_format f = m ? KVQ_FORMAT_NVFP4_4OVER6 : KVQ_FORMAT_NVFP4;
        uint8_t codes[16];
        uint32_t sf;
        float out[16];
        double sse = 0;
        int i;
        ex_must(kvq_format_quantize(f, 4, x, 16, 1, 1.0f, codes, &sf), "nvfp4", NULL);
        ex_must(kvq_format_dequantize(f, 4, codes, 16, sf, 1.0f, out), "nvfp4", NULL);
        for (i = 0; i < 16; i++) sse += ((double)x[i] - out[i]) * ((double)x[i] - out[i]);
        err[m] = sse;
        printf("   %-12s sf = 0x%02X (a = %g), sum (x - x')^2 = %.4f\n     x':", kvq_format_name(f),
               (unsigned)sf, (double)kvq_e4m3_to_f32((uint8_t)sf), sse);
        for (i = 0; i < 16; i++) printf(" %g", (double)out[i]);
        printf("\n");
        if (!m) ex_check(sf == kvq_f32_to_e4m3(4.4f / 6), "sf = e4m3(amax / 6 / s) = e4m3(0.7333) = 0.75");
        else ex_check(sf == kvq_f32_to_e4m3(4.4f / 4) && err[1] < err[0], "4over6 maps amax to 4 here: "
                      "sf = e4m3(1.1) = 1.125, squared error %.4f < %.4f", err[1], err[0]);
    }
}

/* 4. Lloyd-Max for N(0, 1) (TurboQuant's grid for a rotated coordinate;
   kvq.h scales it per vector by ||x|| / sqrt(D)). The MSE of the table
   per coordinate, from erf in double, beside Max (1960) and the paper.  */
static double lm_phi(double x) { return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2 * 3.14159265358979323846); }
static double lm_mse(const float *c, int L)
{
    double e = 0;
    int k;
    for (k = 0; k < L; k++) {
        double a = k ? ((double)c[k - 1] + c[k]) / 2 : -INFINITY, b = k + 1 < L ? ((double)c[k] + c[k + 1]) / 2 : INFINITY;
        double P = 0.5 * (erf(b / sqrt(2.0)) - erf(a / sqrt(2.0))), M1 = lm_phi(a) - lm_phi(b);
        double M2 = P + (isinf(a) ? 0 : a * lm_phi(a)) - (isinf(b) ? 0 : b * lm_phi(b));
        e += M2 - 2 * c[k] * M1 + (double)c[k] * c[k] * P;
    }
    return e;
}

static void show_lloyd_max(void)
{
    static const double classic[3][8] = { { 0.4528, 1.510 }, { 0.2451, 0.7560, 1.344, 2.152 },
                                          { 0.1284, 0.3881, 0.6568, 0.9423, 1.256, 1.618, 2.069, 2.733 } };
    static const double mse_max[3] = { 0.1175, 0.03455, 0.009497 }, mse_paper[3] = { 0.117, 0.03, 0.009 };
    int B, k;
    printf("\n4. Lloyd-Max centroids for N(0, 1) (positive half; TurboQuant Sec. 3.1, kvq_lloyd_max_centroids)\n");
    for (B = 2; B <= 4; B++) {
        const float *c = kvq_lloyd_max_centroids(B);
        const int L = 1 << B;
        double worst = 0, mse = lm_mse(c, L);
        printf("   B=%d  kvq:", B);
        for (k = L / 2; k < L; k++) printf(" %.5f", (double)c[k]);
        printf("\n        Max:");
        for (k = L / 2; k < L; k++) {
            printf(" %-7.4g", classic[B - 2][k - L / 2]);
            if (fabs(c[k] - classic[B - 2][k - L / 2]) > worst) worst = fabs(c[k] - classic[B - 2][k - L / 2]);
        }
        printf("\n");
        ex_check(worst <= 5e-4, "B=%d centroids match the classic 4-digit table (largest difference %.1e <= 5e-4)",
                 B, worst);
        ex_check(fabs(mse - mse_max[B - 2]) <= 1e-3 * mse_max[B - 2] && fabs(mse - mse_paper[B - 2]) <=
                 (B == 3 ? 1e-2 : 1e-3), "B=%d MSE per coordinate %.6f; Max %.5g (within 0.1%%), "
                 "TurboQuant paper %.3g (one unit of its last digit)", B, mse, mse_max[B - 2], mse_paper[B - 2]);
    }
}

/* Bytes per token of one kvq_config_engine preset at D, from
   kvq_cache_bytes: the payload's growth from 64 to 192 tokens (so the
   per-side scales, stored once, drop out), and what is stored once.     */
static double per_token(const char *name, size_t D, double *once, double *bits)
{
    kvq_config cfg;
    kvq_cache c;
    kvq_bytes b[2];
    float *row = (float *)ex_alloc(D * sizeof(float));
    size_t i, t, n[2] = { 64, 192 };
    ex_rng r = ex_rng_seed(8);
    ex_must(kvq_config_engine(&cfg, D, name), name, NULL);
    for (i = 0; i < 2; i++) {
        ex_must(kvq_cache_init(&c, &cfg), name, &c);
        for (t = 0; t < n[i]; t++) {
            size_t d;
            for (d = 0; d < D; d++) row[d] = (float)ex_normal(&r);
            ex_must(kvq_cache_append(&c, row, row), name, &c);
        }
        ex_must(kvq_cache_bytes(&c, &b[i]), name, &c);
        kvq_cache_free(&c);
    }
    free(row);
    *once = (double)b[0].payload - ((double)b[1].payload - b[0].payload) / (double)(n[1] - n[0]) * n[0];
    *bits = b[1].bits_per_element;
    return ((double)b[1].payload - b[0].payload) / (double)(n[1] - n[0]);
}

/* 5. The presets' sizes: the formats' own, exactly, because each group's
   parameter packs into kvq_sz words like codes (kvq.h Sec. 4.1).        */
static void show_sizes(void)
{
    static const struct { const char *name; double slot, bits; const char *spec; } P[] = {
        { "fp8-e4m3", 256, 8.0, "vLLM fp8: 1 byte per value, one scale per side" },
        { "fp8-e4m3-per-token-head", 264, 8.25, "an fp32 scale per token and head" },
        { "int8-per-token-head", 264, 8.25, "8-bit codes, an fp16 (s, z) per head" },
        { "int4-per-token-head", 136, 4.25, "4-bit codes, an fp16 (s, z) per head" },
        { "nvfp4", 144, 4.5, "NVFP4: 64 + 8 = 72 bytes per 128 values, 4.5 bits" },
        { "nvfp4-4over6", 144, 4.5, "the same storage" },
        { "turboquant-k8v4", 196, 6.125, "vLLM's slot: 128 + 64 + 4 = 196 bytes" },
        { "turboquant-4bit-nc", 136, 4.25, "vLLM's slot: 136 bytes" },
        { "turboquant-k3v4-nc", 120, 3.75, "vLLM's slot: 120 bytes" },
        { "turboquant-3bit-nc", 104, 3.25, "vLLM's slot: 104 bytes" },
        { "q8_0", 272, 8.5, "llama.cpp q8_0: 34 bytes per 32 values, 8.5 bits" },
        { "q4_0", 144, 4.5, "llama.cpp q4_0: 18 bytes per 32 values, 4.5 bits" },
    };
    size_t i;
    printf("\n5. kvq_config_engine presets at D = 128: bytes per token (K + V), stored once, bits per element\n");
    printf("   %-24s %8s %6s %8s %10s   spec\n", "preset", "bytes/tok", "once", "bits", "bits@192");
    for (i = 0; i < sizeof P / sizeof P[0]; i++) {
        double once, bits192, slot = per_token(P[i].name, 128, &once, &bits192);
        double bits = slot * 8 / (2 * 128.0);
        printf("   %-24s %8.2f %6.0f %8.4f %10.4f   %s\n", P[i].name, slot, once, bits, bits192, P[i].spec);
        ex_check(slot == P[i].slot && bits == P[i].bits, "%s: %.0f bytes per token, %.4g bits per element "
                 "(spec %.0f, %.4g)", P[i].name, slot, bits, P[i].slot, P[i].bits);
    }
}

int main(int argc, char **argv)
{
    ex_args a;
    if (!ex_args_parse(argc, argv, &a, EX_NO_QUERIES)) return 2;
    if (a.k_path) printf("   note: --k/--v ignored: the grids do not depend on data\n");
    printf("08_formats: the formats engines ship (kvq.h Sec. 4.1), each beside its specification\n");
    show_e4m3();
    show_e5m2();
    show_nvfp4();
    show_lloyd_max();
    show_sizes();
    return ex_finish("08_formats");
}
