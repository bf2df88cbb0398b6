/* examples/01_quant_basics.c - asymmetric group quantization, and what it
   costs (KIVI Sec. 3.1, the HF post; kvq.h Sec. 4-6 and 9).

   KIVI Sec. 3.1, for a group X of G values at B bits, N = 2^B - 1:
     z = min X,  s = (max X - min X) / N,  c = rne(clamp((x - z) / s, 0, N)),
     x' = c s + z,   s and z stored in fp16: G B + 32 bits per group.
   main walks it: one group (1), ties (2), the error bound on every group of
   the head (3), bits per element (4), a real cache's bits against length
   (5) and memory against length for five caches (6). The exhaustive checks
   (adversarial groups at every B and G, clamping, byte order, the layout's
   bit count) are in tests/test_quant.c and tests/test_examples_quant.c.

   Run: ./build/examples/01_quant_basics [--k K.npy --v V.npy] [--seed N]
        [--csv DIR]. --k/--v: steps 1 and 3 on that head (any D: G = 32, or
   D's largest divisor below 32); --seed: the synthetic head's seed; --csv:
   bits_vs_length.csv (5), memory_vs_length.csv (6) for plots/memory.py.
   Steps 5-6 count bytes of D = 128 caches, the papers' head size; bytes do
   not depend on the values.                                                */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

static const int BITS[4] = { 1, 2, 4, 8 };
static const size_t GS[3] = { 32, 64, 128 };
enum { TL = 64100, DL = 128 };       /* the long D = 128 head of steps 5-6 */

/* 1. One group as the definition reads: the first 8 channels of the key of
   token T/2, at B = 2. Codes are rne of (x - z)/s; x' is c s + z with the
   stored fp16 s and z; 16 codes of 2 bits fill one 32-bit word, code i at
   bits 2i+1..2i (kvq.h Sec. 5, least significant first).                  */
static void show_one_group_packs_lsb_first(const ex_head *h)
{
    const float *x = h->K + (h->T / 2) * h->D;
    uint8_t c[8], back[8];
    uint32_t word = 0, expect = 0;
    kvq_sz sz;
    float s, z;
    size_t i, n = h->D < 8 ? h->D : 8;
    ex_must(kvq_quantize_group(x, n, 1, 2, KVQ_ZERO_FLOAT, c, &sz), "group", NULL);
    s = kvq_f16_to_f32(sz.scale);
    z = kvq_f16_to_f32(sz.zero);
    printf("\n1. One group (B=2): key of token %zu, channels 0..%zu: s = %.5g, z = %.5g\n",
           h->T / 2, n - 1, s, z);
    printf("   x      :"); for (i = 0; i < n; i++) printf(" %7.3f", x[i]);
    printf("\n   code c :"); for (i = 0; i < n; i++) printf(" %7d", c[i]);
    printf("\n   x'=cs+z:"); for (i = 0; i < n; i++) printf(" %7.3f", c[i] * s + z);
    ex_must(kvq_pack(c, n, 2, &word), "kvq_pack", NULL);
    ex_must(kvq_unpack(&word, n, 2, back), "kvq_unpack", NULL);
    for (i = 0; i < n; i++) expect += (uint32_t)c[i] << (2 * i);
    printf("\n   kvq_pack: word 0x%08lX, sum of c_i << 2i = 0x%08lX\n",
           (unsigned long)word, (unsigned long)expect);
    ex_check(word == expect && memcmp(c, back, n) == 0, "packed LSB first (code i at bit "
             "2i), and kvq_unpack gives the codes back");
}

/* 2. Ties. B = 2 over 0, 0.5, ..., 3 stores s = 1, z = 0 exactly, so
   (x - z)/s is x and 0.5, 1.5, 2.5 are exact ties: kvq rounds half to even
   (rintf, as CUDA), not half away from zero (C's roundf).                 */
static void show_ties_round_half_to_even(void)
{
    static const float tie[7] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f };
    static const uint8_t even[7] = { 0, 0, 1, 2, 2, 2, 3 };
    uint8_t c[7];
    kvq_sz sz;
    size_t i;
    ex_must(kvq_quantize_group(tie, 7, 1, 2, KVQ_ZERO_FLOAT, c, &sz), "tie group", NULL);
    printf("\n2. Rounding (B=2, group 0, .5, 1, ..., 3: stored s = %g, z = %g)\n",
           kvq_f16_to_f32(sz.scale), kvq_f16_to_f32(sz.zero));
    printf("   (x-z)/s    :"); for (i = 0; i < 7; i++) printf(" %4.1f", tie[i]);
    printf("\n   kvq code   :"); for (i = 0; i < 7; i++) printf(" %4d", c[i]);
    printf("\n   half away  :"); for (i = 0; i < 7; i++) printf(" %4.0f", roundf(tie[i]));
    printf("   (C roundf, for contrast)\n");
    ex_check(memcmp(c, even, 7) == 0 && kvq_f16_to_f32(sz.scale) == 1.0f &&
             kvq_f16_to_f32(sz.zero) == 0.0f,
             "ties go to the even code: 0.5->0, 1.5->2, 2.5->2 (round-half-to-even)");
}

/* The worst |x - x'| / bound over one group, the bound of kvq.h Sec. 4:
     |x - x'| <= s/2 + e_z + N |s - s_exact| + 2^-21 (|x| + |z| + N s) + 2^-140
   e_z = |z - min| (float zero) or |zp s + min| (integer zero, HF), the
   last two terms fp32 arithmetic. *err_s: the worst |x - x'| / s seen.
   Returns -1 if the call fails or a code exceeds N.                       */
static double worst_vs_bound(const float *x, size_t n, int bits, kvq_zero_mode mode,
                             double *err_s)
{
    uint8_t c[256];
    kvq_sz sz;
    float a, b;
    double N = (double)((1 << bits) - 1), mn = x[0], mx = x[0], s, z, zs, e_s, e_z, worst = 0;
    size_t i;
    if (n > 256 || kvq_quantize_group(x, n, 1, bits, mode, c, &sz) != KVQ_OK) return -1;
    for (i = 1; i < n; i++) { if (x[i] < mn) mn = x[i]; if (x[i] > mx) mx = x[i]; }
    kvq_sz_affine(sz, mode, &a, &b);                      /* x' = c a + b     */
    s = kvq_f16_to_f32(sz.scale);
    z = kvq_f16_to_f32(sz.zero);
    zs = mode == KVQ_ZERO_FLOAT ? z : z * s;             /* zero in x units  */
    e_s = fabs(s - (double)(((float)mx - (float)mn) / (float)N));   /* fp32 */
    e_z = mode == KVQ_ZERO_FLOAT ? fabs(z - mn) : fabs(zs + mn);
    for (i = 0; i < n; i++) {
        double err = fabs(x[i] - (double)((float)c[i] * a + b));
        double bound = s / 2 + e_z + N * e_s + ldexp(fabs(x[i]) + fabs(zs) + N * s, -21) +
                       ldexp(1.0, -140);
        if (c[i] > N) return -1;
        if (err / bound > worst) worst = err / bound;
        if (s > 0 && err / s > *err_s) *err_s = err / s;
    }
    return worst;
}

/* 3. The error bound on real groups: every per-token group of K and V
   (G = 32, or D's largest divisor below), B = 2 and 4. The float zero errs
   by at most half a step plus fp16's rounding of s and z; HF's integer
   zero moves the grid by up to half a step more.                          */
static void show_every_group_within_error_bound(const ex_head *h)
{
    size_t G = ex_divisor_at_most(h->D, 32), t, g;
    int m, bi;
    if (G != 32) printf("\n   note: G = 32 does not divide D = %zu: using G = %zu\n", h->D, G);
    printf("\n3. Error bound, kvq.h Sec. 4, on every per-token group of K and V (G=%zu,\n"
           "   B=2 and 4): worst error in steps s, and worst ratio to the bound\n", G);
    for (m = 0; m < 2; m++) {
        double worst = 0, err_s = 0, w;
        long groups = 0, over = 0;
        for (bi = 1; bi <= 2; bi++)
            for (t = 0; t < 2 * h->T; t++)                /* K rows, then V rows */
                for (g = 0; g < h->D / G; g++, groups++) {
                    const float *row = t < h->T ? h->K + t * h->D : h->V + (t - h->T) * h->D;
                    w = worst_vs_bound(row + g * G, G, BITS[bi], (kvq_zero_mode)m, &err_s);
                    if (w < 0 || w > 1) over++;
                    if (w > worst) worst = w;
                }
        printf("   %-5s zero: worst |x-x'|/s %.4f, worst |x-x'|/bound %.4f\n",
               m ? "int" : "float", err_s, worst);
        ex_check(over == 0, "%s zero: %ld groups, %ld with an element above the bound or a "
                 "code above N", m ? "int" : "float", groups, over);
    }
}

/* 4. The cost. A group of G values at B bits stores G B code bits and an
   fp16 scale and zero: B + 32/G bits per element, 16 / (B + 32/G) times
   smaller than fp16. The papers' ratios are read off this table.          */
static void show_bits_per_element_give_papers_ratios(void)
{
    int bi, gi;
    printf("\n4. Bits per element = B + 32/G (fp16 scale + fp16 zero per group of G)\n");
    printf("   B | bits/element G=32   G=64  G=128 | ratio vs fp16 G=32   G=64  G=128\n");
    for (bi = 0; bi < 4; bi++) {
        printf("  %2d |             ", BITS[bi]);
        for (gi = 0; gi < 3; gi++) printf("%5.3f  ", BITS[bi] + 32.0 / (double)GS[gi]);
        printf("|              ");
        for (gi = 0; gi < 3; gi++) printf("%5.2fx ", 16.0 / (BITS[bi] + 32.0 / (double)GS[gi]));
        printf("\n");
    }
    printf("   Where the papers' ratios come from (D = 128, K+V per token per head):\n");
    ex_check(fabs(16.0 / 2.25 - 7.1) < 0.05, "2-bit G=128: %.0f B, %.2fx; the bytes "
             "ceiling of a 2-bit decode: ~72 B, 7.1x", 2 * 128 * 2.25 / 8, 16.0 / 2.25);
    ex_check(fabs(16.0 / 3.0 - 5.3) < 0.05, "2-bit G=32 (KIVI's G): %.0f B, %.2fx; "
             "ceiling: ~96 B, 5.3x", 2 * 128 * 3.0 / 8, 16.0 / 3.0);
    ex_check(6.4 <= 16.0 / 2.25, "OTT Sec. 4.3 measures KIVI/OTT 2-bit reaching ~6.4x "
             "(G=128): below our G=128 limit %.2fx", 16.0 / 2.25);
    ex_check(2.5 <= 16.0 / 4.5, "HF post: int4 'roughly x2.5' memory saving, below the "
             "4-bit G=64 KV limit %.2fx", 16.0 / 4.5);
    printf("         (6.4 = 16/2.5 is our G=64 figure; measured curves also carry\n"
           "          full-precision windows, and the post whole-process memory)\n");
}

/* 5. A real cache also keeps R tokens in fp16 (KIVI Algorithm 1): they add
   at most (16 - b) R / T bits per element, b = B + 32/G, which fades as T
   grows. LogQuant's Eq. 5, 16 T / (2 (T - R) + 16 R), counts 2 bits per
   quantized element and leaves out the scale and zero. L: (TL, DL).       */
static void show_fp16_window_fades_with_length(const ex_head *L)
{
    static const size_t TS[4] = { 1000, 4000, 16100, 64100 };
    FILE *csv = ex_csv_open("bits_vs_length.csv",
                            "group,tokens,bits_measured,bits_asymptote,eq5_ratio");
    int bounded = 1, eq5_above = 1, ti, gi;
    printf("\n5. A KIVI-2 cache (D=128, R=128; prompt T-300, then 300 decode steps):\n"
           "   kvq_cache_bytes' payload bits per element (codes, scales/zeros, fp16 rows)\n");
    printf("    G      T | measured  B+32/G  residual  <= (16-b)R/T | ratio  Eq.5\n");
    for (gi = 0; gi < 3; gi += 2)                     /* G = 32 (KIVI), 128 */
        for (ti = 0; ti < 4; ti++) {
            size_t T = TS[ti];
            double b = 2.0 + 32.0 / (double)GS[gi], Rf, eq5, cap;
            kvq_config cfg = kvq_config_kivi(DL, 2);
            kvq_cache c;
            kvq_bytes by;
            kvq_census cs;
            cfg.group = GS[gi];
            ex_cache_stream(&c, &cfg, L->K, L->V, T, T - 300);
            ex_must(kvq_cache_bytes(&c, &by), "bytes", &c);
            ex_must(kvq_cache_census(&c, &cs), "census", &c);
            Rf = (double)(cs.rows[0][0] + cs.rows[1][0]) / 2;       /* fp16 rows */
            eq5 = 16.0 * (double)T / (2.0 * ((double)T - Rf) + 16.0 * Rf);
            cap = (16.0 - b) * (double)cfg.residual / (double)T;
            bounded &= by.bits_per_element - b > 0 && by.bits_per_element - b <= cap + 1e-12;
            eq5_above &= eq5 > 16.0 / by.bits_per_element;
            printf("   %3zu %6zu | %8.4f  %6.3f  %+8.4f  %10.4f | %5.2fx %5.2fx\n", GS[gi],
                   T, by.bits_per_element, b, by.bits_per_element - b, cap,
                   16.0 / by.bits_per_element, eq5);
            ex_csv_row(csv, "%zu,%zu,%.9g,%.9g,%.9g", GS[gi], T, by.bits_per_element, b, eq5);
            kvq_cache_free(&c);
        }
    ex_csv_close(csv);
    ex_check(bounded, "approaches B + 32/G: the residual's share is in (0, (16-b)R/T] "
             "every row, so -> 0 as T grows");
    ex_check(eq5_above, "LogQuant Eq. 5 is above our ratio every row: it counts 2 bits, "
             "no scale/zero (-> 8x, not 7.11x, at G=128)");
}

/* 6. OTT Sec. 4.3, Fig. 3(c): a one-token prompt, then decode; memory grows
   linearly and each line's slope is its compression ratio (KIVI and OTT
   ~6.4x). Once the fp16 rows stop growing a token adds 2 D (B + 32/G) / 8
   bytes (fp16: 2 D 2), so the slope over the second half isolates the
   ratio. L: (TL, DL).                                                     */
static void show_memory_slope_is_compression_ratio(const ex_head *L)
{
    enum { T = 8192, EVERY = 64, NC = 5 };
    static const char *name[NC] = { "fp16", "KIVI-2 G=32 R=128", "KIVI-2 G=128 R=128",
                                    "OTT-2 G=128 R=32 k=3", "LogQuant-2 W=42 G=64" };
    kvq_config cfg[NC];
    double slope[NC], closed, first[NC], last[NC];
    FILE *csv = ex_csv_open("memory_vs_length.csv", "cache,tokens,payload_bytes,bits_per_element");
    int slopes_ok = 1, m;
    size_t t;
    cfg[0] = kvq_config_full(DL, 16);
    cfg[1] = cfg[2] = kvq_config_kivi(DL, 2);
    cfg[2].group = cfg[2].value_group = 128;              /* OTT's G, Sec. 4.1 */
    cfg[3] = kvq_config_ott(DL, 2, 2);                    /* layer >= 2: k = 3 */
    cfg[4] = kvq_config_logquant(DL, 2, kvq_logquant_window_for(128));
    printf("\n6. Memory vs length, one head (D=%d), 1-token prompt then decode to %d\n"
           "   (OTT Fig. 3(c)): payload at T=%d and the slope over T=%d..%d\n",
           DL, T, T / 8, T / 2, T);
    printf("   %-22s %8s %9s | %8s %8s %8s\n", "cache", "KiB@1024", "bits@8192",
           "B/token", "closed", "vs fp16");
    for (m = 0; m < NC; m++) {
        kvq_cache c;
        kvq_bytes b;
        double half = 0;
        ex_must(ex_cache_init(&c, &cfg[m]), "kvq_cache_init", &c);
        ex_must(kvq_cache_reserve(&c, T), "reserve", &c);
        for (t = 1; t <= T; t++) {
            ex_must(kvq_cache_append(&c, L->K + (t - 1) * DL, L->V + (t - 1) * DL), "append", &c);
            if (t % EVERY) continue;
            ex_must(kvq_cache_bytes(&c, &b), "bytes", &c);
            ex_csv_row(csv, "%s,%zu,%zu,%.9g", name[m], t, b.payload, b.bits_per_element);
            if (t == T / 8) first[m] = (double)b.payload;
            if (t == T / 2) half = (double)b.payload;
        }
        last[m] = b.bits_per_element;
        slope[m] = ((double)b.payload - half) / (double)(T / 2);
        closed = m == 0 ? 2.0 * DL * 2 : 2.0 * DL * (2 + 32.0 / (double)cfg[m].group) / 8;
        slopes_ok &= fabs(slope[m] - closed) <= 0.02 * closed;
        printf("   %-22s %8.1f %9.3f | %8.2f %8.2f %7.2fx\n", name[m], first[m] / 1024.0,
               last[m], slope[m], closed, slope[0] / slope[m]);
        kvq_cache_free(&c);
    }
    ex_csv_close(csv);
    ex_check(slopes_ok, "every slope is 2D(B + 32/G)/8 bytes per token within 2%%: the "
             "full-precision rows stop growing, only quantized groups add bytes");
    ex_check(6.4 <= slope[0] / slope[2] && 6.4 <= slope[0] / slope[3],
             "OTT Fig. 3(c): KIVI and OTT slopes reach ~6.4x; ours (G=128) %.2fx and %.2fx, "
             "the payload ceiling above it", slope[0] / slope[2], slope[0] / slope[3]);
    ex_check(first[3] > first[2] && last[3] / last[2] < first[3] / first[2],
             "OTT Sec. 4.3: OTT holds slightly more than KIVI G=128 (window R+G, pools), "
             "less so as T grows: +%.1f%% at 1024 tokens, +%.1f%% at %d",
             100 * (first[3] / first[2] - 1), 100 * (last[3] / last[2] - 1), T);
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h, L;
    if (!ex_args_parse(argc, argv, &a, EX_NO_QUERIES) || !ex_head_get(&a, 1024, 128, &h))
        return 2;
    printf("01_quant_basics: asymmetric group quantization (KIVI Sec. 3.1, HF post)\n"
           "   data: %s, T=%zu, D=%zu\n", h.real ? "real head" : "synthetic head", h.T, h.D);

    /* The definition, on the head (--k/--v, or the synthetic one)         */
    show_one_group_packs_lsb_first(&h);
    show_ties_round_half_to_even();
    show_every_group_within_error_bound(&h);

    /* What it costs: bits per element, then real caches (bytes do not
       depend on the values, so a long synthetic D = 128 head serves)      */
    show_bits_per_element_give_papers_ratios();
    a.k_path = a.v_path = NULL;
    if (!ex_head_get(&a, TL, DL, &L)) return 2;
    show_fp16_window_fades_with_length(&L);
    show_memory_slope_is_compression_ratio(&L);

    ex_head_free(&L);
    ex_head_free(&h);
    return ex_finish("01_quant_basics");
}
