/* examples/01_quant_basics.c - one group of values, quantized and back.

   KIVI Sec. 3.1 and the HF post define asymmetric round-to-nearest group
   quantization: z = min X, s = (max X - min X) / (2^B - 1), c = rne((x-z)/s),
   x' = c s + z, with s and z stored in fp16. This example checks, for
   B in {1, 2, 4, 8} and G in {32, 64, 128}:

     1. the error bound of kvq.h Sec. 4 on random and adversarial groups;
     2. rounding: ties go to the even code, and out-of-range values are
        clamped before they are rounded;
     3. the LSB-first packing of kvq.h Sec. 5, against a word built here by
        shifting;
     4. bits per element B + 32/G and the compression ratio 16 / (B + 32/G),
        and where the papers' ratios come from;
     5. the bits per element a real KIVI cache stores (kvq_cache_bytes): the
        formula plus the full-precision residual's share;
     6. memory against sequence length for fp16, KIVI, OTT and LogQuant
        caches (OTT Sec. 4.3, Fig. 3(c)): the slope is the compression ratio.

   Run: make build/examples/01_quant_basics && ./build/examples/01_quant_basics
   --csv DIR writes bits_vs_length.csv (5) and memory_vs_length.csv (6),
   which plots/memory.py draws.                                             */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

static const int    BITS[4]   = { 1, 2, 4, 8 };
static const size_t GROUPS[3] = { 32, 64, 128 };

/* ======================================================================== */
/* 1. The error bound (kvq.h Sec. 4)                                        */
/* ======================================================================== */
/* What one (B, G, zero mode) cell accumulates over all its groups.         */
typedef struct bound_stats {
    double worst_in_s;     /* max |x - x'| / s over the random groups        */
    double worst_in_bound; /* max |x - x'| / bound over every group          */
    long   elements;
    long   violations;     /* elements with |x - x'| above the Sec. 4 bound  */
    long   bad_codes;      /* code > N, or != rne(clamp((x-z)/s)) redone here */
    long   failed;         /* kvq_quantize_group returned an error          */
} bound_stats;

/* Quantizes one group of n values and checks every element against
     float zero: |x - x'| <= s/2 + e_z + N e_s + eps
     int zero:   |x - x'| <= s/2 + s |zp + mn/s| + N e_s + eps
   with e_z = |z - mn|, e_s = |s - s_exact| and
   eps = 2^-21 (|x| + |z| + N s) + 2^-140 (|z| is |zp s| in the int mode).
   The codes are recomputed here from the stored s and z, independently of
   kvq's own code path.                                                      */
static void check_group(const float *x, size_t n, int bits, kvq_zero_mode mode,
                        int is_random, bound_stats *S)
{
    uint8_t codes[128];
    kvq_sz sz;
    double N = (double)((1u << bits) - 1u), mn = x[0], mx = x[0];
    double s, z, a_s, s_exact, e_s;
    float a, b;
    size_t i;
    if (kvq_quantize_group(x, n, 1, bits, mode, codes, &sz) != KVQ_OK) {
        S->failed++;
        return;
    }
    for (i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    kvq_sz_affine(sz, mode, &a, &b);            /* x' = c a + b             */
    s = kvq_f16_to_f32(sz.scale);
    z = kvq_f16_to_f32(sz.zero);
    s_exact = (double)(((float)mx - (float)mn) / (float)N);   /* fp32, as kvq */
    e_s = fabs(s - s_exact);
    a_s = (mode == KVQ_ZERO_INT) ? fabs(z * s) : fabs(z);
    for (i = 0; i < n; i++) {
        double xr = (double)((float)codes[i] * a + b), err = fabs(x[i] - xr);
        double eps = ldexp(fabs(x[i]) + a_s + N * s, -21) + ldexp(1.0, -140);
        double zero_term = (mode == KVQ_ZERO_FLOAT) ? fabs(z - mn)
                         : (s > 0 ? s * fabs(z + mn / s) : 0.0);
        /* the int-mode constant group stores s = |mn|, zp = (mn < 0): its
           x' is f16(mn), so only fp16 rounding of mn separates x and x'    */
        double bound = (mode == KVQ_ZERO_INT && mx == mn)
                     ? fabs(kvq_f16_to_f32(kvq_f32_to_f16((float)mn)) - mn) + eps
                     : s / 2 + zero_term + N * e_s + eps;
        /* the code, recomputed: rne(clamp(v, 0, N)) from the stored s, z   */
        float v = (s == 0) ? 0.0f : (mode == KVQ_ZERO_FLOAT)
                ? (x[i] - (float)z) / (float)s : x[i] / (float)s + (float)z;
        float vc = v < 0 ? 0 : (v > (float)N ? (float)N : v);
        if (codes[i] > N || (mode == KVQ_ZERO_FLOAT && codes[i] != (uint8_t)rintf(vc)))
            S->bad_codes++;
        if (err > bound) S->violations++;
        if (is_random && s > 0 && err / s > S->worst_in_s) S->worst_in_s = err / s;
        if (bound > 0 && err / bound > S->worst_in_bound) S->worst_in_bound = err / bound;
        S->elements++;
    }
}

/* Fills x (n) with group number `kind` of the adversarial set, or random.  */
static void make_group(float *x, size_t n, int bits, int kind, ex_rng *r)
{
    double N = (double)((1u << bits) - 1u);
    double sigma = pow(10.0, -3.0 + 4.0 * ex_uniform(r));   /* 1e-3 .. 10   */
    double mu = 4.0 * sigma * ex_normal(r);
    size_t i;
    for (i = 0; i < n; i++) x[i] = (float)(mu + sigma * ex_normal(r));
    switch (kind) {
    case 0: break;                                  /* random: N(mu, sigma) */
    case 1: for (i = 0; i < n; i++) x[i] = (float)mu; break;     /* constant */
    case 2: for (i = 0; i < n; i++) x[i] = (float)(i & 1 ? mu + sigma : mu); break;
    case 3: {   /* ties: an exact fp16 grid z + j s/2, both ends present, so
                   (x - z)/s hits every half-integer in [0, N]              */
        float z = kvq_f16_to_f32(kvq_f32_to_f16((float)mu));
        float s = (float)ldexp(1.0, (int)floor(log2(sigma)));
        for (i = 0; i < n; i++) x[i] = z + (float)(i % (size_t)(2 * N + 1)) * 0.5f * s;
        x[n - 1] = z + (float)N * s;
        break;
    }
    case 4: x[n / 2] = (float)(mu + 1000.0 * sigma); break;     /* one outlier */
    case 5: for (i = 0; i < n; i++) x[i] = (float)(1e-30 * ex_normal(r)); break;
    case 6: for (i = 0; i < n; i++) x[i] = (i & 1) ? 0.0f : -0.0f; break;
    case 7: for (i = 0; i < n; i++) x[i] = (float)(30000.0 * (2 * ex_uniform(r) - 1)); break;
    case 8: for (i = 0; i < n; i++) x[i] = (float)(15.0 + 0.1 * ex_uniform(r)); break;
    }
}
#define N_ADVERSARIAL 9          /* kinds 0..8 above                          */
#define N_RANDOM_GROUPS 3000     /* random groups per (B, G, mode) cell       */

static void part1_error_bound(void)
{
    static const char *mode_name[2] = { "float", "int" };
    ex_rng r = ex_rng_seed(11);
    float x[128];
    int m, bi, gi, kind, rep;
    printf("\n1. Error bound, kvq.h Sec. 4: |x - x'| <= s/2 + e_z + N e_s + eps (float zero)\n"
           "   per cell: %d random N(mu, sigma) groups, sigma 1e-3..10, and %d adversarial\n"
           "   ones (constant, two-value, exact ties, one outlier, 1e-30, +-0, +-30000,\n"
           "   15..15.1). err/s: worst |x - x'| in steps s on the random groups (expect\n"
           "   ~0.5: half a step plus the fp16 rounding of s and z); err/bound: worst\n"
           "   ratio to the documented bound over all groups (must be <= 1).\n",
           N_RANDOM_GROUPS, (N_ADVERSARIAL - 1) * 20);
    printf("   zero   B | err/s G=32   G=64  G=128 | err/bound | over bound  bad codes\n");
    for (m = 0; m < 2; m++) {
        bound_stats tot;
        memset(&tot, 0, sizeof tot);
        for (bi = 0; bi < 4; bi++) {
            double worst[3], worst_bound = 0;
            long viol = 0, bad = 0;
            for (gi = 0; gi < 3; gi++) {
                bound_stats S;
                memset(&S, 0, sizeof S);
                for (kind = 0; kind < N_ADVERSARIAL; kind++)
                    for (rep = 0; rep < (kind ? 20 : N_RANDOM_GROUPS); rep++) {
                        make_group(x, GROUPS[gi], BITS[bi], kind, &r);
                        check_group(x, GROUPS[gi], BITS[bi], (kvq_zero_mode)m,
                                    kind == 0, &S);
                    }
                worst[gi] = S.worst_in_s;
                if (S.worst_in_bound > worst_bound) worst_bound = S.worst_in_bound;
                viol += S.violations; bad += S.bad_codes;
                tot.failed += S.failed; tot.elements += S.elements;
            }
            printf("   %-5s %2d |     %6.4f %6.4f %6.4f |    %6.4f | %10ld  %9ld\n",
                   mode_name[m], BITS[bi], worst[0], worst[1], worst[2], worst_bound,
                   viol, bad);
            tot.violations += viol; tot.bad_codes += bad;
        }
        ex_check(tot.violations == 0 && tot.failed == 0,
                 "%s zero: %ld elements, %ld above the Sec. 4 bound, %ld groups rejected",
                 mode_name[m], tot.elements, tot.violations, tot.failed);
        ex_check(tot.bad_codes == 0, "%s zero: every code in [0, 2^B-1]%s", mode_name[m],
                 m == 0 ? " and == rne(clamp((x-z)/s, 0, N)) redone here" : "");
    }
    printf("   (err/bound 1.0000: the bound is attained. An exact tie lies s/2 from its\n"
           "    code with s, z exact in fp16; a constant group's error is e_z itself.\n"
           "    Int zero, HF style: zp is an integer, so the error can reach a full\n"
           "    step s at a group's edge, Sec. 4's middle term)\n");
}

/* ======================================================================== */
/* 2. Rounding: half to even, clamp then round                              */
/* ======================================================================== */
static void part2_rounding(void)
{
    /* B = 2 on the grid 0..3 with step 1: s = 1, z = 0 exactly, so (x - z)/s
       is x itself and 0.5, 1.5, 2.5 are exact ties.                        */
    static const float tie[7] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f };
    static const uint8_t even[7] = { 0, 0, 1, 2, 2, 2, 3 };   /* IEEE rule  */
    uint8_t codes[7];
    kvq_sz sz;
    int i, ok = 1;
    float pair[2], z, s, v_lo, v_hi;
    uint8_t c2[2];
    ex_must(kvq_quantize_group(tie, 7, 1, 2, KVQ_ZERO_FLOAT, codes, &sz), "tie group", NULL);
    printf("\n2. Rounding (B=2, group 0, .5, 1, ..., 3: stored s = %g, z = %g)\n",
           kvq_f16_to_f32(sz.scale), kvq_f16_to_f32(sz.zero));
    printf("   (x-z)/s    :");
    for (i = 0; i < 7; i++) printf(" %4.1f", tie[i]);
    printf("\n   kvq code   :");
    for (i = 0; i < 7; i++) { printf(" %4d", codes[i]); ok &= codes[i] == even[i]; }
    printf("\n   half away  :");
    for (i = 0; i < 7; i++) printf(" %4.0f", roundf(tie[i]));
    printf("   (C roundf, for contrast)\n");
    ex_check(ok && kvq_f16_to_f32(sz.scale) == 1.0f && kvq_f16_to_f32(sz.zero) == 0.0f,
             "ties go to the even code: 0.5->0, 1.5->2, 2.5->2 (round-half-to-even)");

    /* Clamp, then round. fp16 rounding of z and s pushes (x - z)/s out of
       [0, N] at the group's ends: z = f16(min) above the min gives v < 0, and
       s = f16(range/N) below range/N gives v > N at the max. Search a few
       (min, max) pairs for one where both happen.                          */
    for (i = 1; i < 1000; i++) {
        pair[0] = 0.1f * (float)i / 7.0f;
        pair[1] = pair[0] + 1.0f + 0.013f * (float)i;
        z = kvq_f16_to_f32(kvq_f32_to_f16(pair[0]));
        s = kvq_f16_to_f32(kvq_f32_to_f16((pair[1] - pair[0]) / 3.0f));
        if (z > pair[0] && (pair[1] - z) / s > 3.0f) break;
    }
    v_lo = (pair[0] - z) / s;
    v_hi = (pair[1] - z) / s;
    ex_must(kvq_quantize_group(pair, 2, 1, 2, KVQ_ZERO_FLOAT, c2, &sz), "clamp group", NULL);
    printf("   group {%.7g, %.7g}: z = f16(min) = %.7g, s = %.7g\n", pair[0], pair[1], z, s);
    printf("   v = (x-z)/s = %.3g -> clamp 0 -> code %d;  %.7g -> clamp 3 -> code %d\n",
           v_lo, c2[0], v_hi, c2[1]);
    ex_check(i < 1000 && v_lo < 0 && v_hi > 3 && c2[0] == 0 && c2[1] == 3 &&
             rintf(v_lo < 0 ? 0 : v_lo) == 0 && rintf(v_hi > 3 ? 3 : v_hi) == 3,
             "out-of-range v is clamped to [0, N] before rounding (codes 0 and 3)");
}

/* ======================================================================== */
/* 3. Packing (kvq.h Sec. 5): code i at bit (i % (32/B)) * B, LSB first    */
/* ======================================================================== */
static void part3_packing(void)
{
    ex_rng r = ex_rng_seed(3);
    float x[32];
    uint8_t codes[32], back[32];
    uint32_t words[32];
    kvq_sz sz;
    int bi, i, ok = 1;
    uint32_t one = 1;
    unsigned char byte0 = 0, byte0_expect = 0;
    printf("\n3. Packing, kvq.h Sec. 5 (B=2: c0 in bits 1..0, c15 in bits 31..30)\n");
    for (bi = 0; bi < 4; bi++) {
        int B = BITS[bi], per = 32 / B, w;
        for (i = 0; i < 32; i++) x[i] = (float)ex_normal(&r);
        ex_must(kvq_quantize_group(x, 32, 1, B, KVQ_ZERO_FLOAT, codes, &sz), "pack group", NULL);
        ex_must(kvq_pack(codes, 32, B, words), "kvq_pack", NULL);
        ex_must(kvq_unpack(words, 32, B, back), "kvq_unpack", NULL);
        for (w = 0; w < 32 / per; w++) {       /* the word built by shifting */
            uint32_t expect = 0;
            for (i = 0; i < per; i++) expect += (uint32_t)codes[w * per + i] << (i * B);
            ok &= words[w] == expect;
            if (B == 2 && w == 0) {
                printf("   codes c15..c0:");
                for (i = 15; i >= 0; i--) printf(" %d", codes[i]);
                printf("\n   kvq_pack word 0x%08lX, expected sum c_i << 2i = 0x%08lX\n",
                       (unsigned long)words[0], (unsigned long)expect);
            }
        }
        ok &= memcmp(codes, back, 32) == 0;
        if (B == 2) {                 /* the first byte in memory of word 0   */
            memcpy(&byte0, words, 1);
            byte0_expect = (unsigned char)(codes[0] | codes[1] << 2 | codes[2] << 4 |
                                           codes[3] << 6);
        }
    }
    ex_check(ok, "kvq_pack == word built by shifting, and unpack restores the codes (B=1,2,4,8)");
    if (*(unsigned char *)&one == 1)            /* little-endian host        */
        ex_check(byte0 == byte0_expect, "byte 0 of the B=2 word is c0 | c1<<2 | c2<<4 | "
                 "c3<<6 = 0x%02X on this little-endian host", byte0_expect);
    else
        printf("   (big-endian host: byte order of the word not checked)\n");
}

/* ======================================================================== */
/* 4-5. Bits per element and compression                                    */
/* ======================================================================== */
/* Builds a KIVI cache (G, R) of B bits over n_prefill + n_decode random
   tokens and returns its byte account and census.                          */
static void kivi_cache_bytes(size_t D, int B, size_t G, size_t R, size_t n_prefill,
                             size_t n_decode, kvq_bytes *bytes, kvq_census *census)
{
    enum { CHUNK = 4096 };
    kvq_config cfg = kvq_config_kivi(D, B);
    kvq_cache c;
    ex_rng r = ex_rng_seed(5);
    float *K = (float *)malloc(CHUNK * D * sizeof(float));   /* (CHUNK, D)  */
    float *V = (float *)malloc(CHUNK * D * sizeof(float));
    size_t t, i;
    if (!K || !V) { fprintf(stderr, "out of memory\n"); exit(2); }
    cfg.group = G;
    cfg.residual = R;
    ex_must(ex_cache_init(&c, &cfg), "kvq_cache_init", &c);
    ex_must(kvq_cache_reserve(&c, n_prefill + n_decode), "reserve", &c);
    for (t = 0; t < n_prefill + n_decode; ) {
        /* prefill in chunks (repeated prefill = one long prompt), then decode */
        size_t n = t < n_prefill ? (n_prefill - t < CHUNK ? n_prefill - t : CHUNK) : 1;
        for (i = 0; i < n * D; i++) { K[i] = (float)ex_normal(&r); V[i] = (float)ex_normal(&r); }
        ex_must(t < n_prefill ? kvq_cache_prefill(&c, K, V, n) : kvq_cache_append(&c, K, V),
                "cache fill", &c);
        t += n;
    }
    ex_must(kvq_cache_bytes(&c, bytes), "bytes", &c);
    ex_must(kvq_cache_census(&c, census), "census", &c);
    kvq_cache_free(&c);
    free(K); free(V);
}

static double ratio_of(double bits) { return 16.0 / bits; }

static void part4_bits_table(void)
{
    int bi, gi, axis, layout_ok = 1;
    double b2g128 = 2.0 + 32.0 / 128, b2g32 = 2.0 + 32.0 / 32, b4g64 = 4.0 + 32.0 / 64;
    printf("\n4. Bits per element = B + 32/G (fp16 scale + fp16 zero per group of G)\n");
    printf("   B | bits/element G=32   G=64  G=128 | ratio vs fp16 G=32   G=64  G=128\n");
    for (bi = 0; bi < 4; bi++) {
        printf("  %2d |             ", BITS[bi]);
        for (gi = 0; gi < 3; gi++) printf("%5.3f  ", BITS[bi] + 32.0 / (double)GROUPS[gi]);
        printf("|              ");
        for (gi = 0; gi < 3; gi++) printf("%5.2fx ", ratio_of(BITS[bi] + 32.0 / (double)GROUPS[gi]));
        printf("\n");
        /* what the layout actually allocates: words and kvq_sz per group   */
        for (gi = 0; gi < 3; gi++)
            for (axis = 0; axis < 2; axis++) {
                kvq_layout L;
                size_t T = 256, D = 128;
                ex_must(kvq_layout_init(&L, T, D, BITS[bi], GROUPS[gi], (kvq_axis)axis),
                        "layout", NULL);
                layout_ok &= (double)(L.total_words * 32 + L.total_groups * 8 * sizeof(kvq_sz))
                             == (BITS[bi] + 32.0 / (double)GROUPS[gi]) * (double)(T * D);
            }
    }
    ex_check(layout_ok, "kvq_layout_init's words + kvq_sz bits == (B + 32/G) T D for all "
             "12 (B, G), both axes");

    printf("   Where the papers' ratios come from (D = 128, K+V per token per head):\n");
    ex_check(fabs(2 * 128 * b2g128 / 8 - 72) < 1e-9 && fabs(ratio_of(b2g128) - 7.1) < 0.05,
             "2-bit G=128: %.0f B, %.2fx; the bytes ceiling of a 2-bit decode: ~72 B, 7.1x",
             2 * 128 * b2g128 / 8, ratio_of(b2g128));
    ex_check(fabs(2 * 128 * b2g32 / 8 - 96) < 1e-9 && fabs(ratio_of(b2g32) - 5.3) < 0.05,
             "2-bit G=32 (KIVI's G): %.0f B, %.2fx; ceiling: ~96 B, 5.3x",
             2 * 128 * b2g32 / 8, ratio_of(b2g32));
    ex_check(6.4 <= ratio_of(b2g128),
             "OTT Sec. 4.3 measures KIVI/OTT 2-bit reaching ~6.4x (G=128): below our "
             "G=128 limit %.2fx", ratio_of(b2g128));
    printf("         (6.4 = 16/2.5 is exactly our G=64 figure; the paper's curve also\n"
           "          carries its R=32 window and group buffer, so it sits below 7.11x)\n");
    ex_check(2.5 <= ratio_of(b4g64),
             "HF post: int4 'roughly x2.5' memory saving, below the 4-bit G=64 KV limit %.2fx",
             ratio_of(b4g64));
    printf("         (the post measures whole-process peak memory, not the cache alone)\n");
}

static void part5_real_cache(void)
{
    FILE *csv = ex_csv_open("bits_vs_length.csv", "group,tokens,bits_measured,bits_asymptote,eq5_ratio");
    static const size_t T_LIST[4] = { 1000, 4000, 16100, 64100 };
    const size_t D = 128, R = 128;
    int gi, ti, exact = 1, bounded = 1;
    printf("\n5. A real KIVI-2 cache (D=128, R=128): payload bits per element\n"
           "   (kvq_cache_bytes: codes + scales/zeros + fp16 residual rows, K and V)\n");
    printf("    G      T | measured  B+32/G  residual  <= (16-b)R/T | ratio  Eq.5\n");
    for (gi = 0; gi < 3; gi += 2) {              /* G = 32 (KIVI) and 128     */
        size_t G = GROUPS[gi];
        for (ti = 0; ti < 4; ti++) {
            size_t T = T_LIST[ti];
            kvq_bytes b;
            kvq_census cs;
            double q_bits = 2.0 + 32.0 / (double)G, model, share, eq5, Rf, cap;
            kivi_cache_bytes(D, 2, G, R, T - 300, 300, &b, &cs);
            /* independent model: every quantized element costs B + 32/G,
               every full-precision row element 16 bits (census counts)     */
            Rf = (double)(cs.rows[0][0] + cs.rows[1][0]) / 2.0;   /* fp rows per side */
            model = ((double)(cs.quantized[0] + cs.quantized[1]) * q_bits +
                     2.0 * Rf * 16.0) / (2.0 * (double)T);
            share = model - q_bits;
            exact &= fabs(b.bits_per_element - model) < 1e-12 &&
                     16.0 * (double)T / (2.0 * ((double)T - Rf) + 16.0 * Rf) >
                     ratio_of(b.bits_per_element);
            /* LogQuant Eq. 5: 16L / (2(L - R) + 16R), no scale/zero term   */
            eq5 = 16.0 * (double)T / (2.0 * ((double)T - Rf) + 16.0 * Rf);
            /* Algorithm 1 keeps at most R keys and exactly R values in fp16:
               their extra (16 - b) bits, spread over 2T elements, <= (16-b)R/T */
            cap = (16.0 - q_bits) * (double)R / (double)T;
            bounded &= share > 0 && share <= cap + 1e-12;
            printf("   %3zu %6zu | %8.4f  %6.3f  %+8.4f  %10.4f | %5.2fx %5.2fx\n", G, T,
                   b.bits_per_element, q_bits, share, cap, ratio_of(b.bits_per_element), eq5);
            ex_csv_row(csv, "%zu,%zu,%.9g,%.9g,%.9g", G, T, b.bits_per_element, q_bits, eq5);
        }
    }
    ex_csv_close(csv);
    ex_check(exact, "measured == Eq. 5 with 2 -> B+32/G bits per quantized element and "
             "R = census fp16 rows (1e-12); Eq. 5 itself is higher, every row");
    ex_check(bounded, "approaches B + 32/G: the residual's share is in (0, (16-b)R/T] "
             "every row, so -> 0 as T grows");
    printf("   LogQuant Eq. 5, 16L / (2(L-R) + 16R), counts 2 bits per quantized element:\n"
           "   it leaves out the 32/G scale+zero bits (-> 8x, not 7.11x, at G=128).\n");

    /* KIVI Sec. 4.4 / Fig. 16: with ShareGPT's mean 161 prompt + 338 output
       tokens, KIVI fits up to 4x the batch in the same memory. The weights
       are the same, so the KV cache per request must shrink >= 4x.          */
    {
        kvq_bytes b32, b128;
        kvq_census cs;
        kivi_cache_bytes(D, 2, 32, 32, 161, 338, &b32, &cs);
        kivi_cache_bytes(D, 2, 32, 128, 161, 338, &b128, &cs);
        ex_check(ratio_of(b32.bits_per_element) >= 4.0,
                 "KIVI Fig. 16: up to 4x batch needs a >= 4x smaller cache; ours at "
                 "161+338 tokens: R=32 %.2fx, R=128 %.2fx", ratio_of(b32.bits_per_element),
                 ratio_of(b128.bits_per_element));
        printf("         (KIVI's headline 2.6x is peak memory with the weights included,\n"
               "          not a cache-only ratio, so it is not compared here)\n");
    }
}

/* ======================================================================== */
/* 6. Memory vs sequence length (OTT Sec. 4.3, Fig. 3(c))                   */
/* ======================================================================== */
/* OTT's "longest sentence" test: batch 1, a one-token prompt, then decode
   until memory runs out; Fig. 3(c) plots KV memory against length, and the
   slope of each line is the compression ratio (~6.4x for KIVI and OTT).
   Here one (layer, head) of common.h's synthetic data (D = 128) streams
   through five caches, and kvq_cache_bytes' payload is sampled every 64
   tokens. The slope over the second half, against the closed form
   2 D (B + 32/G) / 8 bytes per token (fp16: 2 D 2), isolates the ratio
   from the full-precision rows, whose number stops growing.               */
static void part6_memory_vs_length(unsigned long long seed)
{
    enum { T = 8192, D = 128, EVERY = 64, N_CACHE = 5 };
    static const char *name[N_CACHE] = {
        "fp16", "KIVI-2 G=32 R=128", "KIVI-2 G=128 R=128", "OTT-2 G=128 R=32 k=3",
        "LogQuant-2 W=42 G=64" };
    kvq_config cfg[N_CACHE];
    double slope[N_CACHE], closed[N_CACHE], first[N_CACHE], last[N_CACHE];
    ex_synth sy = ex_synth_defaults(T, D, seed);
    float *K = (float *)malloc((size_t)T * D * sizeof(float));   /* (T, D)  */
    float *V = (float *)malloc((size_t)T * D * sizeof(float));
    float *Q = (float *)malloc(sy.n_queries * D * sizeof(float));
    FILE *csv = ex_csv_open("memory_vs_length.csv", "cache,tokens,payload_bytes,bits_per_element");
    int m, slopes_ok = 1;
    if (!K || !V || !Q) { fprintf(stderr, "out of memory\n"); exit(2); }
    ex_synth_make(&sy, K, V, Q, NULL);
    cfg[0] = kvq_config_full(D, 16);
    cfg[1] = kvq_config_kivi(D, 2);
    cfg[2] = kvq_config_kivi(D, 2);
    cfg[2].group = 128; cfg[2].value_group = 128;         /* OTT's G, Sec. 4.1 */
    cfg[3] = kvq_config_ott(D, 2, 2);                      /* layer >= 2: k = 3 */
    cfg[4] = kvq_config_logquant(D, 2, kvq_logquant_window_for(128));
    printf("\n6. Memory vs length, one head (D=%d), 1-token prompt then decode to %d\n"
           "   (OTT Fig. 3(c)): payload at T=%d and the slope over T=%d..%d\n",
           D, T, T / 8, T / 2, T);
    printf("   %-22s %8s %9s | %8s %8s %8s\n", "cache", "KiB@1024", "bits@8192",
           "B/token", "closed", "vs fp16");
    for (m = 0; m < N_CACHE; m++) {
        kvq_cache c;
        kvq_bytes b;
        size_t t;
        double half = 0;
        int bits = m == 0 ? 16 : 2;
        size_t G = m == 0 ? 0 : cfg[m].group;
        ex_must(ex_cache_init(&c, &cfg[m]), "kvq_cache_init", &c);
        ex_must(kvq_cache_reserve(&c, T), "reserve", &c);
        for (t = 0; t < T; t++) {
            ex_must(kvq_cache_append(&c, K + t * D, V + t * D), "append", &c);
            if ((t + 1) % EVERY) continue;
            ex_must(kvq_cache_bytes(&c, &b), "bytes", &c);
            ex_csv_row(csv, "%s,%zu,%zu,%.9g", name[m], t + 1, b.payload, b.bits_per_element);
            if (t + 1 == T / 8) first[m] = (double)b.payload;
            if (t + 1 == T / 2) half = (double)b.payload;
        }
        ex_must(kvq_cache_bytes(&c, &b), "bytes", &c);
        last[m] = b.bits_per_element;
        slope[m] = ((double)b.payload - half) / (double)(T / 2);
        closed[m] = m == 0 ? 2.0 * D * 2 : 2.0 * D * (bits + 32.0 / (double)G) / 8.0;
        slopes_ok &= fabs(slope[m] - closed[m]) <= 0.02 * closed[m];
        printf("   %-22s %8.1f %9.3f | %8.2f %8.2f %7.2fx\n", name[m], first[m] / 1024.0,
               last[m], slope[m], closed[m], slope[0] / slope[m]);
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
    free(K); free(V); free(Q);
}

/* With --k/--v: the same bound on every per-token group of a real head's K
   and V (G = 32, or D's largest divisor below it), both zero modes, B = 2
   and 4. Without them this part is skipped (parts 1-6 use their own data). */
static void part_real_head(const ex_args *a)
{
    ex_head h;
    size_t G, t, g, side;
    int m, bi;
    bound_stats S;
    if (!a->k_path) return;
    if (!ex_head_get(a, 0, 0, &h)) exit(2);
    G = ex_divisor_at_most(h.D, 32);
    memset(&S, 0, sizeof S);
    for (side = 0; side < 2; side++)
        for (m = 0; m < 2; m++)
            for (bi = 1; bi <= 2; bi++)             /* B = 2, 4             */
                for (t = 0; t < h.T; t++)
                    for (g = 0; g < h.D / G; g++)
                        check_group((side ? h.V : h.K) + t * h.D + g * G, G, BITS[bi],
                                    (kvq_zero_mode)m, 0, &S);
    printf("\n7. The Sec. 4 bound on the given head (T = %zu, D = %zu, per-token G = %zu,\n"
           "   K and V, B = 2 and 4, both zero modes): worst err/bound %.4f\n",
           h.T, h.D, G, S.worst_in_bound);
    ex_check(S.violations == 0 && S.failed == 0 && S.bad_codes == 0,
             "real head: %ld elements, %ld above the bound, %ld bad codes, %ld groups rejected",
             S.elements, S.violations, S.bad_codes, S.failed);
    ex_head_free(&h);
}

int main(int argc, char **argv)
{
    ex_args a;
    if (!ex_args_parse(argc, argv, &a)) return 2;
    printf("01_quant_basics: asymmetric group quantization (KIVI Sec. 3.1, HF post)\n");
    part1_error_bound();
    part2_rounding();
    part3_packing();
    part4_bits_table();
    part5_real_cache();
    part6_memory_vs_length(a.seed);
    part_real_head(&a);
    return ex_finish("01_quant_basics");
}
