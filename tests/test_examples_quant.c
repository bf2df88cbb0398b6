/* tests/test_examples_quant.c - the checks examples 01-03 made before they became
   short narratives (issue 17), kept as tests so nothing they checked is
   lost. Each group says which example step it came from. Checks already
   made elsewhere are not repeated here:
     - packing for every B and n, bit by bit: test_quant.c test_pack;
     - codes against an independent quantizer, the Sec. 4 bound on 13 random
       distributions: test_quant.c test_group_vs_reference;
     - KIVI's regions (quantized + window == tokens), kvq_cache_check every
       step: test_cache.c test_kivi_schedule (cmp_sched);
     - kvq_attend (online and eager) against the fp64 oracle on the cache's
       own read-back K/V: test_cache.c test_attention_agreement.

   Groups:
     1. 01's adversarial error-bound table: 9 kinds of group x B x G x zero
        mode, no element above the Sec. 4 bound, every code in [0, N] and
        (float zero) == rne(clamp((x - z)/s)) redone here
     2. 01's clamp-then-round group, and byte 0 of a packed B = 2 word
     3. 01's bit count: kvq_layout_init's words and kvq_sz == (B + 32/G) T D
     4. 01's KIVI cache bytes: == B + 32/G per quantized element + 16 per
        census fp16 row (LogQuant Eq. 5 with the scale/zero added), and
        KIVI Fig. 16's >= 4x at ShareGPT's 161 + 338 tokens
     5. 03's re-quantization census: a per-token int-zero group whose codes
        reach N is a fixed point of dequantize + quantize; every group
        settles; the rows an HF cache's re-quantization changes are all among
        the rows whose groups can move
     6. the examples' command line does what the usage line says: every
        option it offers is accepted, --q only where the example attends
        (01 offered --q and then refused it), refusals return 0           */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "examples/common.h"

static const int BITS[4] = { 1, 2, 4, 8 };
static const size_t GROUPS[3] = { 32, 64, 128 };

/* ======================================================================== */
/* 1. The Sec. 4 bound on adversarial groups (from 01 part 1)               */
/* ======================================================================== */
typedef struct bound_stats {
    double worst_in_bound;
    long elements, violations, bad_codes, failed;
} bound_stats;

/* float zero: |x - x'| <= s/2 + e_z + N e_s + eps; int zero: the middle term
   is s |zp + mn/s|; eps = 2^-21 (|x| + |z| + N s) + 2^-140. The codes are
   recomputed from the stored s and z, independently of kvq's code path.   */
static void check_group(const float *x, size_t n, int bits, kvq_zero_mode mode, bound_stats *S)
{
    uint8_t codes[128];
    kvq_sz sz;
    double N = (double)((1u << bits) - 1u), mn = x[0], mx = x[0], s, z, a_s, e_s;
    float a, b;
    size_t i;
    if (kvq_quantize_group(x, n, 1, bits, mode, codes, &sz) != KVQ_OK) { S->failed++; return; }
    for (i = 1; i < n; i++) { if (x[i] < mn) mn = x[i]; if (x[i] > mx) mx = x[i]; }
    kvq_sz_affine(sz, mode, &a, &b);
    s = kvq_f16_to_f32(sz.scale);
    z = kvq_f16_to_f32(sz.zero);
    e_s = fabs(s - (double)(((float)mx - (float)mn) / (float)N));
    a_s = (mode == KVQ_ZERO_INT) ? fabs(z * s) : fabs(z);
    for (i = 0; i < n; i++) {
        double xr = (double)((float)codes[i] * a + b), err = fabs(x[i] - xr);
        double eps = ldexp(fabs(x[i]) + a_s + N * s, -21) + ldexp(1.0, -140);
        double zero_term = (mode == KVQ_ZERO_FLOAT) ? fabs(z - mn)
                         : (s > 0 ? s * fabs(z + mn / s) : 0.0);
        /* int zero, constant group: s = |mn|, zp = (mn < 0), x' = f16(mn)   */
        double bound = (mode == KVQ_ZERO_INT && mx == mn)
                     ? fabs(kvq_f16_to_f32(kvq_f32_to_f16((float)mn)) - mn) + eps
                     : s / 2 + zero_term + N * e_s + eps;
        float v = (s == 0) ? 0.0f : (mode == KVQ_ZERO_FLOAT) ? (x[i] - (float)z) / (float)s
                                                            : x[i] / (float)s + (float)z;
        float vc = v < 0 ? 0 : (v > (float)N ? (float)N : v);
        if (codes[i] > N || (mode == KVQ_ZERO_FLOAT && codes[i] != (uint8_t)rintf(vc)))
            S->bad_codes++;
        if (err > bound) S->violations++;
        if (bound > 0 && err / bound > S->worst_in_bound) S->worst_in_bound = err / bound;
        S->elements++;
    }
}

/* Group `kind`: 0 random N(mu, sigma), 1 constant, 2 two values, 3 exact
   ties on an fp16 grid, 4 one outlier, 5 1e-30, 6 +-0, 7 +-30000, 8 15..15.1 */
static void make_group(float *x, size_t n, int bits, int kind, ex_rng *r)
{
    double N = (double)((1u << bits) - 1u), sigma = pow(10.0, -3.0 + 4.0 * ex_uniform(r));
    double mu = 4.0 * sigma * ex_normal(r);
    size_t i;
    for (i = 0; i < n; i++) x[i] = (float)(mu + sigma * ex_normal(r));
    switch (kind) {
    case 1: for (i = 0; i < n; i++) x[i] = (float)mu; break;
    case 2: for (i = 0; i < n; i++) x[i] = (float)(i & 1 ? mu + sigma : mu); break;
    case 3: {
        float z = kvq_f16_to_f32(kvq_f32_to_f16((float)mu));
        float s = (float)ldexp(1.0, (int)floor(log2(sigma)));
        for (i = 0; i < n; i++) x[i] = z + (float)(i % (size_t)(2 * N + 1)) * 0.5f * s;
        x[n - 1] = z + (float)N * s;
        break;
    }
    case 4: x[n / 2] = (float)(mu + 1000.0 * sigma); break;
    case 5: for (i = 0; i < n; i++) x[i] = (float)(1e-30 * ex_normal(r)); break;
    case 6: for (i = 0; i < n; i++) x[i] = (i & 1) ? 0.0f : -0.0f; break;
    case 7: for (i = 0; i < n; i++) x[i] = (float)(30000.0 * (2 * ex_uniform(r) - 1)); break;
    case 8: for (i = 0; i < n; i++) x[i] = (float)(15.0 + 0.1 * ex_uniform(r)); break;
    default: break;
    }
}

static void test_bound_adversarial(void)
{
    ex_rng r = ex_rng_seed(11);
    float x[128];
    int m, bi, gi, kind, rep, n_random = COUNT(3000, 300);
    for (m = 0; m < 2; m++)
        for (bi = 0; bi < 4; bi++)
            for (gi = 0; gi < 3; gi++) {
                bound_stats S;
                memset(&S, 0, sizeof S);
                for (kind = 0; kind < 9; kind++)
                    for (rep = 0; rep < (kind ? 20 : n_random); rep++) {
                        make_group(x, GROUPS[gi], BITS[bi], kind, &r);
                        check_group(x, GROUPS[gi], BITS[bi], (kvq_zero_mode)m, &S);
                    }
                CHECK(S.violations == 0 && S.failed == 0 && S.bad_codes == 0 &&
                      S.worst_in_bound <= 1.0,
                      "%s zero B=%d G=%zu: %ld of %ld elements above the Sec. 4 bound, %ld bad "
                      "codes, %ld groups rejected", m ? "int" : "float", BITS[bi], GROUPS[gi],
                      S.violations, S.elements, S.bad_codes, S.failed);
            }
}

/* ======================================================================== */
/* 2. Clamp then round; byte order of a packed word (from 01 parts 2-3)     */
/* ======================================================================== */
static void test_clamp_and_byte0(void)
{
    float pair[2] = { 0, 0 }, z = 0, s = 1, v_lo, v_hi, x[32];
    uint8_t c2[2], codes[32];
    uint32_t words[2], one = 1;
    unsigned char byte0;
    kvq_sz sz;
    int i;
    ex_rng r = ex_rng_seed(3);
    /* fp16 rounding of z and s pushes (x - z)/s out of [0, N] at both ends
       of some groups: z = f16(min) above the min, s = f16(range/N) below.  */
    for (i = 1; i < 1000; i++) {
        pair[0] = 0.1f * (float)i / 7.0f;
        pair[1] = pair[0] + 1.0f + 0.013f * (float)i;
        z = kvq_f16_to_f32(kvq_f32_to_f16(pair[0]));
        s = kvq_f16_to_f32(kvq_f32_to_f16((pair[1] - pair[0]) / 3.0f));
        if (z > pair[0] && (pair[1] - z) / s > 3.0f) break;
    }
    v_lo = (pair[0] - z) / s;
    v_hi = (pair[1] - z) / s;
    CHECK(i < 1000 && kvq_quantize_group(pair, 2, 1, 2, KVQ_ZERO_FLOAT, c2, &sz) == KVQ_OK &&
          v_lo < 0 && v_hi > 3 && c2[0] == 0 && c2[1] == 3,
          "clamp then round: {%.7g, %.7g} gives v = %.3g, %.7g, codes %d %d (want 0 and 3)",
          pair[0], pair[1], v_lo, v_hi, c2[0], c2[1]);
    for (i = 0; i < 32; i++) x[i] = (float)ex_normal(&r);
    CHECK(kvq_quantize_group(x, 32, 1, 2, KVQ_ZERO_FLOAT, codes, &sz) == KVQ_OK &&
          kvq_pack(codes, 32, 2, words) == KVQ_OK, "pack a B=2 group");
    memcpy(&byte0, words, 1);
    if (*(unsigned char *)&one == 1)                       /* little-endian */
        CHECK(byte0 == (unsigned char)(codes[0] | codes[1] << 2 | codes[2] << 4 | codes[3] << 6),
              "byte 0 of a B=2 word is c0 | c1<<2 | c2<<4 | c3<<6 on a little-endian host");
}

/* ======================================================================== */
/* 3. Bits per element from the layout (from 01 part 4)                     */
/* ======================================================================== */
static void test_layout_bits(void)
{
    int bi, gi, axis;
    for (bi = 0; bi < 4; bi++)
        for (gi = 0; gi < 3; gi++)
            for (axis = 0; axis < 2; axis++) {
                kvq_layout L;
                size_t T = 256, D = 128;
                CHECK(kvq_layout_init(&L, T, D, BITS[bi], GROUPS[gi], (kvq_axis)axis) == KVQ_OK &&
                      (double)(L.total_words * 32 + L.total_groups * 8 * sizeof(kvq_sz)) ==
                      (BITS[bi] + 32.0 / (double)GROUPS[gi]) * (double)(T * D),
                      "layout B=%d G=%zu axis %d: words + kvq_sz bits != (B + 32/G) T D",
                      BITS[bi], GROUPS[gi], axis);
            }
}

/* ======================================================================== */
/* 4. A KIVI-2 cache's bytes (from 01 part 5)                               */
/* ======================================================================== */
static void kivi_bytes(size_t G, size_t R, size_t T, size_t n_prefill, kvq_bytes *b, kvq_census *cs)
{
    ex_synth sy = ex_synth_defaults(T, 128, 5);
    float *K = (float *)malloc(T * 128 * sizeof(float));
    float *V = (float *)malloc(T * 128 * sizeof(float));
    float *Q = (float *)malloc(sy.n_queries * 128 * sizeof(float));
    kvq_config cfg = kvq_config_kivi(128, 2);
    kvq_cache c;
    ex_synth_make(&sy, K, V, Q, NULL);
    cfg.group = G;
    cfg.residual = R;
    ex_cache_stream(&c, &cfg, K, V, T, n_prefill);
    kvq_cache_bytes(&c, b);
    kvq_cache_census(&c, cs);
    kvq_cache_free(&c);
    free(K); free(V); free(Q);
}

static void test_kivi_bytes(void)
{
    static const size_t TS[4] = { 1000, 4000, 16100, 64100 };
    int gi, ti;
    kvq_bytes b, b128;
    kvq_census cs;
    for (gi = 0; gi < 3; gi += 2)
        for (ti = 0; ti < (QUICK ? 2 : 4); ti++) {
            size_t T = TS[ti];
            double q_bits = 2.0 + 32.0 / (double)GROUPS[gi], Rf, model;
            kivi_bytes(GROUPS[gi], 128, T, T - 300, &b, &cs);
            Rf = (double)(cs.rows[0][0] + cs.rows[1][0]) / 2.0;
            model = ((double)(cs.quantized[0] + cs.quantized[1]) * q_bits + 2.0 * Rf * 16.0) /
                    (2.0 * (double)T);
            CHECK(fabs(b.bits_per_element - model) < 1e-12 &&
                  16.0 * (double)T / (2.0 * ((double)T - Rf) + 16.0 * Rf) >
                  16.0 / b.bits_per_element,
                  "KIVI-2 G=%zu T=%zu: %.6f bits/element, the census model %.6f; Eq. 5 must be "
                  "above our ratio", GROUPS[gi], T, b.bits_per_element, model);
        }
    /* KIVI Sec. 4.4 / Fig. 16: up to 4x the batch in the same memory with
       ShareGPT's mean 161 prompt + 338 output tokens: the cache per request
       must shrink >= 4x (R = 32; R = 128 computed for the record)          */
    kivi_bytes(32, 32, 161 + 338, 161, &b, &cs);
    kivi_bytes(32, 128, 161 + 338, 161, &b128, &cs);
    CHECK(16.0 / b.bits_per_element >= 4.0, "KIVI Fig. 16: 161+338 tokens, R=32: %.2fx < 4x "
          "(R=128: %.2fx)", 16.0 / b.bits_per_element, 16.0 / b128.bits_per_element);
}

/* ======================================================================== */
/* 5. Re-quantization's fixed points (from 03 section 4)                    */
/* ======================================================================== */
/* A per-token int-zero group (the HF post's rule) with stored s, zp and
   codes c reads back as x' = (c - zp) s, exact in fp32. Re-quantizing x':
   code 0 is present (the min's code is rne(d) = 0, d = min/s + zp in
   [-1/2, 1/2]), so min x' = -zp s; if code N is present too the range is
   N s, s' = s, zp' = zp and c' = c. Only groups whose top code fell short
   of N can move (about N/2^13 of them), and they settle after a pass or
   two. Under today's float zero a group whose codes hold 0 and N reads
   back as z .. N s + z; re-quantized, its min is z itself and its range N s
   up to one fp32 rounding, so s, z and the codes come back unchanged: no
   group with both end codes moves, and on this head none moves at all.  */
static size_t requantize_until_fixed(const uint8_t *codes0, kvq_sz sz, size_t G, int bits,
                                     kvq_zero_mode mode, float *x, uint8_t *codes)
{
    size_t i, pass;
    memcpy(codes, codes0, G);
    for (pass = 0; pass < 16; pass++) {
        float a, b;
        kvq_sz nsz;
        kvq_sz_affine(sz, mode, &a, &b);
        for (i = 0; i < G; i++) x[i] = (float)codes[i] * a + b;
        if (kvq_quantize_group(x, G, 1, bits, mode, codes + G, &nsz) != KVQ_OK) break;
        if (nsz.scale == sz.scale && nsz.zero == sz.zero && memcmp(codes, codes + G, G) == 0)
            return pass;
        memcpy(codes, codes + G, G);
        sz = nsz;
    }
    return pass;
}

static void test_requant_fixed_points(void)
{
    static const int RB[2] = { 2, 4 };
    enum { T = 4096, D = 128 };
    ex_synth sy = ex_synth_defaults(T, D, 1);
    float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
    float *Q = (float *)malloc(sy.n_queries * D * sizeof(float)), ra[D], rb[D], x[64];
    unsigned char *moves = (unsigned char *)malloc(T);
    int bi, side;
    ex_synth_make(&sy, K, V, Q, NULL);
    for (bi = 0; bi < 4; bi++) {
        kvq_hf_params hp = kvq_hf_defaults(RB[bi % 2]);
        kvq_zero_mode mode = bi < 2 ? KVQ_ZERO_INT : KVQ_ZERO_FLOAT;
        const char *zn = bi < 2 ? "int" : "float";
        kvq_config c1, c0;
        kvq_cache q0, q1;
        size_t N = ((size_t)1 << RB[bi % 2]) - 1, groups = 0, top_short = 0, moved_top_n = 0;
        size_t max_passes = 0, differ = 0, outside = 0, moved = 0, u, g, i, t;
        uint8_t codes[3 * 64];
        hp.zero_mode = mode;
        c1 = c0 = kvq_config_hf(D, hp);
        c0.hf_requantize = 0;
        ex_cache_stream(&q0, &c0, K, V, T, T / 2);
        ex_cache_stream(&q1, &c1, K, V, T, T / 2);
        memset(moves, 0, T);
        for (side = 0; side < 2; side++) {          /* every stored group of q0 */
            const kvq_side *s = side ? &q0.v : &q0.k;
            size_t Gs = s->group;
            for (u = 0; u < s->n_units; u++)
                for (g = 0; g < s->geom.groups_per_unit; g++) {
                    size_t k = u * s->geom.groups_per_unit + g, top = 0, bottom = N, passes;
                    kvq_unpack(s->words + k * s->geom.words_per_group, Gs, RB[bi % 2], codes);
                    for (i = 0; i < Gs; i++) {
                        if (codes[i] > top) top = codes[i];
                        if (codes[i] < bottom) bottom = codes[i];
                    }
                    passes = requantize_until_fixed(codes, s->sz[k], Gs, RB[bi % 2], mode, x,
                                                    codes + Gs);
                    groups++;
                    moved += passes > 0;
                    if (top < N) top_short++;
                    else if (passes && (mode == KVQ_ZERO_INT || bottom == 0)) moved_top_n++;
                    if (passes > max_passes) max_passes = passes;
                    if (passes && s->qpos[u] >= 0) moves[s->qpos[u]] = 1;
                }
        }
        for (t = 0; t < T; t++) {                   /* rows q1 and q0 differ in */
            int d = 0;
            for (side = 0; side < 2; side++) {
                kvq_cache_read(&q0, side, t, ra);
                kvq_cache_read(&q1, side, t, rb);
                d |= memcmp(ra, rb, sizeof ra) != 0;
            }
            differ += (size_t)d;
            outside += (size_t)(d && !moves[t]);
        }
        CHECK(moved_top_n == 0, "int%d, %s zero: %zu groups whose codes reach N%s moved "
              "under re-quantization", RB[bi % 2], zn, moved_top_n,
              mode == KVQ_ZERO_INT ? "" : " and 0");
        CHECK(max_passes < 16, "int%d, %s zero: a group did not settle in 16 passes",
              RB[bi % 2], zn);
        if (mode == KVQ_ZERO_INT)
            CHECK(outside == 0 && differ > 0, "int%d, int zero: %zu rows differ, %zu of them "
                  "outside the movable groups' rows", RB[bi % 2], differ, outside);
        else
            CHECK(moved == 0 && differ == 0, "int%d, float zero: %zu groups moved and %zu "
                  "rows differ, expected none", RB[bi % 2], moved, differ);
        CHECK(top_short * 8192 <= 4 * N * groups, "int%d, %s zero: %zu of %zu groups fall "
              "short of N, above 4 N/2^13", RB[bi % 2], zn, top_short, groups);
        kvq_cache_free(&q0);
        kvq_cache_free(&q1);
    }
    free(K); free(V); free(Q); free(moves);
}

/* ex_args_parse on the words of `line` (at most 15), its usage and
   complaints kept in out (tmpfile) instead of stderr.                      */
static int parse_line(const char *line, ex_opts opts, ex_args *a, FILE *out)
{
    static char buf[256];
    char *argv[16], *w;
    int argc = 1, ok;
    argv[0] = (char *)"example";
    snprintf(buf, sizeof buf, "%s", line);
    for (w = strtok(buf, " "); w && argc < 16; w = strtok(NULL, " ")) argv[argc++] = w;
    ex_cli_out = out;
    ok = ex_args_parse(argc, argv, a, opts);
    ex_cli_out = NULL;
    ex_csv_dir = NULL;                       /* --csv sets it: undo for the rest */
    return ok;
}

/* What ex_usage prints for opts, into text (n bytes).                      */
static void usage_text(ex_opts opts, char *text, size_t n)
{
    FILE *f = tmpfile();
    size_t got;
    text[0] = 0;
    if (!f) return;
    ex_cli_out = f;
    ex_usage("example", opts);
    ex_cli_out = NULL;
    rewind(f);
    got = fread(text, 1, n - 1, f);
    text[got] = 0;
    fclose(f);
}

static void test_command_line(void)
{
    static const char *offered[4] = { "--k", "--v", "--seed", "--csv" };
    char usage[2][512];
    ex_args a;
    FILE *out = tmpfile();
    int o, i;
    CHECK(out != NULL, "tmpfile for the parser's complaints");
    if (!out) return;
    for (o = 0; o < 2; o++) {
        usage_text((ex_opts)o, usage[o], sizeof usage[o]);
        for (i = 0; i < 4; i++)
            CHECK(strstr(usage[o], offered[i]) != NULL, "usage (opts %d) offers %s", o, offered[i]);
        CHECK(!strstr(usage[o], "--q") == (o == EX_NO_QUERIES),
              "usage (opts %d) offers --q exactly where the example attends: %s", o, usage[o]);
        /* everything the usage offers, together, is accepted               */
        CHECK(parse_line(o == EX_QUERIES ? "--k K.npy --v V.npy --q Q.npy --seed 7 --csv D"
                                         : "--k K.npy --v V.npy --seed 7 --csv D",
                         (ex_opts)o, &a, out) &&
              !strcmp(a.k_path, "K.npy") && !strcmp(a.v_path, "V.npy") && a.seed == 7 &&
              !strcmp(a.csv_dir, "D") && (o == EX_NO_QUERIES || !strcmp(a.q_path, "Q.npy")),
              "opts %d: every offered option accepted, with its value", o);
        CHECK(parse_line("", (ex_opts)o, &a, out) && !a.k_path && a.seed == 1,
              "opts %d: no options: the synthetic head, seed 1", o);
        /* and what it does not offer, or offers only nested, is refused    */
        CHECK(!parse_line("--q Q.npy", (ex_opts)o, &a, out), "opts %d: --q alone refused", o);
        CHECK(!parse_line("--k K.npy", (ex_opts)o, &a, out), "opts %d: --k without --v refused", o);
        CHECK(!parse_line("--seed -1", (ex_opts)o, &a, out), "opts %d: --seed -1 refused", o);
        CHECK(!parse_line("--seed", (ex_opts)o, &a, out), "opts %d: --seed without a value", o);
        CHECK(!parse_line("--bogus 1", (ex_opts)o, &a, out), "opts %d: unknown option refused", o);
    }
    CHECK(!parse_line("--k K.npy --v V.npy --q Q.npy", EX_NO_QUERIES, &a, out),
          "an example that does not attend refuses --q (its usage does not offer it)");
    fclose(out);
}

int main(void)
{
    test_bound_adversarial();
    test_clamp_and_byte0();
    test_layout_bits();
    test_kivi_bytes();
    test_requant_fixed_points();
    test_command_line();
    return TEST_END("test_examples_quant");
}
