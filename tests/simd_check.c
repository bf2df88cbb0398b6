/* tests/simd_check.c - kvq_simd.h against kvq.h alone, bit for bit.

   kvq.h is the definition, in plain C; kvq_simd.h gives a few of its
   functions vector bodies (16 lanes as 16/W native vectors: W = 8 with
   AVX2, 16 with AVX-512, 4 on AArch64; F16C for fp16 where the target has
   it) that must compute the same floats: the same operations, lane by
   lane, in the same order. Attention's multiply-adds are fused where the
   target has FMA (kvq.h's KVQ__FMA), in both headers alike. The unit tests
   use kvq.h alone, built for the plain x86-64 baseline; this test builds
   the two headers several ways and compares each kvq_simd.h copy with the
   kvq.h copy of the same FMA setting.

   Build (the Makefile does this): this file compiled seven times,
     -DSIMD_CHECK_PART=scalar                          kvq.h alone, no FMA
     -DSIMD_CHECK_PART=simd -mavx2 -mf16c              kvq_simd.h, W = 8,
                                                       no FMA
     -DSIMD_CHECK_PART=scalar_fma -mfma                kvq.h alone, fmaf
     -DSIMD_CHECK_PART=simd_fma -mavx2 -mfma -mf16c    kvq_simd.h, W = 8, FMA
     -DSIMD_CHECK_PART=native -march=native            kvq_simd.h for this
                                                       machine (AVX-512
                                                       where it has it: the
                                                       code the benchmark
                                                       times)
     -DSIMD_CHECK_PART=native_novbmi -march=native     the same without
       -mno-avx512vbmi (x86)                           AVX512-VBMI: the FP8
                                                       key route VBMI
                                                       machines never take
     (no SIMD_CHECK_PART)                              main
   each copy with KVQ_STATIC, reached through the wrappers below.

   Checked:
     - every non-NaN fp16 bit pattern converts to the same float through
       kvq__f16_stored (F16C) as through kvq__f16_to_f32 (integer code);
     - kvq_quantize_matrix: identical words and (s, z) in every copy;
     - kvq_attend, ONLINE and EAGER, over caches of every policy, axis, bit
       width, zero mode and row precision, D in {8, 48, 64, 128} (and 16,
       32, 256 for KIVI-2, HF-2, HF-4 and OTT-2), T from 1
       to 1000, 1 to 8 query heads: each kvq_simd.h copy's outputs are the
       same bytes as the kvq.h copy's with its FMA setting; also with DAZ
       (and FTZ) set in MXCSR, against the kvq.h copy without;
     - the rotation: every copy's rows the same bytes as kvq__rotate_row.
   On a CPU without AVX2/FMA the vector copies cannot run: the test says so
   and counts nothing.                                                     */
#ifdef SIMD_CHECK_PART
#define KVQ_STATIC
#define KVQ_IMPLEMENTATION
#ifdef SIMD_CHECK_PLAIN
#include "kvq.h"                  /* the definition alone                  */
#else
#include "kvq_simd.h"             /* the fast paths                        */
#endif

#define PART_CAT2(a, b) a##_##b
#define PART_CAT(a, b) PART_CAT2(a, b)
#define PART(name) PART_CAT(SIMD_CHECK_PART, name)

int PART(vector_path)(void)
{
#ifdef KVQ__SIMD
    return 1;
#else
    return 0;
#endif
}
int PART(fused)(void)
{
#ifdef KVQ__FMA
    return 1;
#else
    return 0;
#endif
}
float PART(f16_stored)(kvq_f16 h) { return kvq__f16_stored(h); }
kvq_f16 PART(f16_store)(float f) { return kvq__f16_store(f); }
kvq_status PART(quantize)(const float *X, size_t T, size_t D, int bits, size_t G, kvq_axis axis,
                          kvq_zero_mode mode, uint32_t *words, kvq_sz *sz)
{
    return kvq_quantize_matrix(X, T, D, bits, G, axis, mode, words, sz);
}
float PART(rotate_row)(const float *sign, size_t D, int inverse, const float *in, float *out)
{
    return kvq__rotate_into(sign, D, inverse, in, out);
}
kvq_status PART(cache_init)(kvq_cache *c, const kvq_config *cfg) { return kvq_cache_init(c, cfg); }
kvq_status PART(cache_prefill)(kvq_cache *c, const float *K, const float *V, size_t T)
{
    return kvq_cache_prefill(c, K, V, T);
}
void PART(cache_free)(kvq_cache *c) { kvq_cache_free(c); }
/* 1 where kvq_simd.h's ONLINE walk takes the cache (kvq.h alone: 0)     */
int PART(walk_serves)(const kvq_cache *c)
{
#ifdef KVQ__SIMD
    return kvq__simd_walk_serves(c);
#else
    (void)c;
    return 0;
#endif
}
size_t PART(scratch)(const kvq_cache *c, kvq_attn_mode m) { return kvq_attend_scratch_floats(c, m); }
kvq_status PART(attend)(const kvq_cache *c, const float *q, size_t n_q, float *out,
                        kvq_attn_mode mode, float *scratch, size_t n)
{
    return kvq_attend(c, q, n_q, out, NULL, mode, scratch, n);
}
/* Sec. 4.1's decodings of kvq_simd.h (kvq__vals16) against the side's
   table s->value: every code of side `side` (0 K, 1 V) packed 16 at a
   time and decoded; the codes whose float differs in bits (the grid's
   non-finite codes, never stored, are skipped), or -1 where this copy
   has no decoding for the side (a scalar copy, NEON, Lloyd-Max B = 2).
   FP8 sides also through the walk's other FP8 routes, every code: E4M3
   as KVQ__DEC_E4M3_2M8 (want s->value 2^-8, exact) where kvq__vals16
   has the fp16 route, and the key columns' kvq__fp8_keys16 (E4M3, E5M2,
   E4M3_2M8: 16 tokens' words of 4 codes each, 4 columns) where built.  */
int PART(decode_differs)(const kvq_cache *c, int side)
{
#if defined(KVQ__SIMD) && (KVQ__W == 16 || KVQ__W == 8)
    const kvq_side *s = side ? &c->v : &c->k;
    const int B = s->bits, dec = kvq__side_dec(s);
    const unsigned n = 1u << B;
    uint32_t w[2 * 8 * 16] = { 0 };                 /* 256 codes at B = 8    */
    float tab[16], out[16];
    kvq__v16 tabv, v;
    unsigned code, i, bad = 0;
    if (dec < 0 || s->schedule == KVQ_SCHED_NONE) return -1;
    kvq__side_table(s, tab);
    tabv = kvq__load16(tab);
    for (code = 0; code < 256; code++) {            /* code i % n at i: 256 codes */
        const unsigned at = code * (unsigned)B, cd = code % n;
        w[at / 32] |= cd << (at % 32);
        if (at % 32 + (unsigned)B > 32) w[at / 32 + 1] |= cd >> (32 - at % 32);
    }
    for (i = 0; i < 256; i += 16) {
        unsigned j;
#define DEC_CASE(D_, B_) kvq__vals16(&v, w, i, B_, D_, &tabv)
        switch (dec) {
        case KVQ__DEC_TAB:  if (B == 3) DEC_CASE(KVQ__DEC_TAB, 3); else DEC_CASE(KVQ__DEC_TAB, 4); break;
        case KVQ__DEC_E4M3: DEC_CASE(KVQ__DEC_E4M3, 8); break;
        case KVQ__DEC_E5M2: DEC_CASE(KVQ__DEC_E5M2, 8); break;
        case KVQ__DEC_S8:   DEC_CASE(KVQ__DEC_S8, 8); break;
        case KVQ__DEC_U8:   DEC_CASE(KVQ__DEC_U8, 8); break;
        default:            kvq__codes16(&v, w, i, B); break;
        }
#undef DEC_CASE
        kvq__store16(out, v);
        for (j = 0; j < 16; j++) {
            const float want = s->value[(i + j) % n];
            if (!kvq__finite(want)) continue;
            bad += memcmp(&want, &out[j], sizeof want) != 0;
        }
    }
    if (dec == KVQ__DEC_E4M3 || dec == KVQ__DEC_E5M2) {
        int route;
        for (route = 0; route < 3; route++) {     /* 2M8 vals, keys, 2M8 keys */
            const int d = route != 1 && dec == KVQ__DEC_E4M3 ? KVQ__DEC_E4M3_2M8 : dec;
            const float f = d == KVQ__DEC_E4M3_2M8 ? 1.0f / 256.0f : 1.0f;
            if ((route == 0 && (!KVQ__FP8_F16 || dec != KVQ__DEC_E4M3)) ||
                (route > 0 && !KVQ__FP8_KEYS) || (route == 2 && dec != KVQ__DEC_E4M3))
                continue;
            for (i = 0; i < 256; i += route ? 64 : 16) {
                float got[64];
                unsigned j, e;
                if (route == 0) {
                    kvq__vals16(&v, w, i, 8, KVQ__DEC_E4M3_2M8, &tabv);
                    kvq__store16(got, v);
                }
#if KVQ__FP8_KEYS
                else {                      /* token j, channel e: code i + 16 e + j */
                    uint32_t col[16];
                    kvq__v16 cv[4];
                    kvq__u16 x;
                    for (j = 0; j < 16; j++)
                        col[j] = (i + j) | (i + 16 + j) << 8 | (i + 32 + j) << 16 | (i + 48 + j) << 24;
                    memcpy(&x, col, sizeof x);
                    kvq__fp8_keys16(cv, (__m512i)x.part[0], d);
                    for (e = 0; e < 4; e++) kvq__store16(got + 16 * e, cv[e]);
                }
#endif
                for (j = 0; j < (route ? 64u : 16u); j++) {
                    const float want = s->value[i + j] * f;
                    if (!kvq__finite(want)) continue;
                    bad += memcmp(&want, &got[j], sizeof want) != 0;
                }
                (void)e;
            }
        }
    }
    return (int)bad;
#else
    (void)c; (void)side;
    return -1;
#endif
}
#else /* main: its own (scalar) copy for configs and validation */
#define KVQ_STATIC
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include <string.h>
#define TEST_RNG
#include "test.h"

#define DECLARE(p)                                                                  \
    int p##_vector_path(void);                                                      \
    int p##_fused(void);                                                            \
    float p##_f16_stored(kvq_f16 h);                                                \
    kvq_f16 p##_f16_store(float f);                                                 \
    kvq_status p##_quantize(const float *X, size_t T, size_t D, int bits, size_t G,  \
                            kvq_axis axis, kvq_zero_mode mode, uint32_t *w, kvq_sz *sz); \
    float p##_rotate_row(const float *sign, size_t D, int inverse, const float *in, \
                         float *out);                                               \
    kvq_status p##_cache_init(kvq_cache *c, const kvq_config *cfg);                 \
    kvq_status p##_cache_prefill(kvq_cache *c, const float *K, const float *V, size_t T); \
    void p##_cache_free(kvq_cache *c);                                              \
    int p##_walk_serves(const kvq_cache *c);                                        \
    size_t p##_scratch(const kvq_cache *c, kvq_attn_mode m);                        \
    kvq_status p##_attend(const kvq_cache *c, const float *q, size_t n_q, float *out, \
                          kvq_attn_mode mode, float *scratch, size_t n);
int simd_decode_differs(const kvq_cache *c, int side);
int simd_fma_decode_differs(const kvq_cache *c, int side);
int native_decode_differs(const kvq_cache *c, int side);
int native_novbmi_decode_differs(const kvq_cache *c, int side);
DECLARE(scalar)
DECLARE(simd)
DECLARE(scalar_fma)
DECLARE(simd_fma)
DECLARE(native)
DECLARE(native_novbmi)

/* The copies compared with a scalar copy: each against the one with its
   own FMA setting (quantized codes do not depend on it).                */
typedef kvq_status (*quantize_fn)(const float *, size_t, size_t, int, size_t, kvq_axis,
                                  kvq_zero_mode, uint32_t *, kvq_sz *);
typedef kvq_status (*attend_fn)(const kvq_cache *, const float *, size_t, float *,
                                kvq_attn_mode, float *, size_t);
typedef struct copy {
    const char *name;
    int (*fused)(void);
    float (*f16_stored)(kvq_f16);
    kvq_f16 (*f16_store)(float);
    quantize_fn quantize;
    attend_fn attend;
    float (*rotate_row)(const float *, size_t, int, const float *, float *);
} copy;
#define COPY(p) { #p, p##_fused, p##_f16_stored, p##_f16_store, p##_quantize, p##_attend, \
                  p##_rotate_row }
static const copy scalar_copies[2] = { COPY(scalar), COPY(scalar_fma) };
static const copy vector_copies[4] = { COPY(simd), COPY(simd_fma), COPY(native),
                                       COPY(native_novbmi) };
#define N_VECTOR 4

/* the scalar copy with c's FMA setting, or NULL if none was built        */
static const copy *reference_of(const copy *c)
{
    int i;
    for (i = 0; i < 2; i++)
        if (scalar_copies[i].fused() == c->fused()) return &scalar_copies[i];
    return NULL;
}

static int cpu_has_vector_path(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 1;
#endif
}

static void check_f16(void)
{
    uint32_t h, diff = 0, n = 0;
    for (h = 0; h < 65536; h++) {
        float a, b;
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) continue;        /* NaN */
        int k, differs = 0;
        a = scalar_f16_stored((kvq_f16)h);
        n++;
        for (k = 0; k < N_VECTOR; k++) {
            b = vector_copies[k].f16_stored((kvq_f16)h);
            differs |= memcmp(&a, &b, sizeof a) != 0;
        }
        if (differs) {
            if (diff++ < 3) CHECK(0, "fp16 0x%04x: %.9g (integer) vs %.9g (F16C)", h, a, b);
        }
    }
    CHECK(diff == 0 && n == 65536 - 2046, "fp16: %u of %u patterns differ", diff, n);
}

/* float -> fp16 through F16C against the integer code: every 61st bit
   pattern (70 million floats, NaNs skipped) plus the rounding edges.     */
static void check_f32_to_f16(void)
{
    static const uint32_t edges[] = { 0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u,
                                      0x38800000u, 0x387FFFFFu, 0x33000000u, 0x33000001u,
                                      0x32FFFFFFu, 0x00000001u, 0x7F7FFFFFu, 0x7F800000u };
    uint64_t i;
    uint32_t diff = 0, n = 0;
    for (i = 0; i < (1ull << 32) + 12 * 61; i += 61) {
        uint32_t u = i < (1ull << 32) ? (uint32_t)i : edges[(i - (1ull << 32)) / 61] ^ 0x80000000u * (i & 1);
        float f;
        kvq_f16 a, b;
        memcpy(&f, &u, sizeof f);
        if (f != f) continue;
        a = scalar_f16_store(f);
        b = simd_f16_store(f);
        if (a == b) b = native_f16_store(f);
        n++;
        if (a != b && diff++ < 3) CHECK(0, "f32 0x%08x: 0x%04x (integer) vs 0x%04x (F16C)", u, a, b);
    }
    CHECK(diff == 0 && n > 70000000u, "f32 -> f16: %u of %u floats differ", diff, n);
}

/* kvq_quantize_matrix: every word and (s, z) identical, on normal data
   and on a grid of halves full of .5 ties, constant groups and extremes. */
static void check_quantize(rng *r)
{
    static const size_t Gs[] = { 8, 16, 32, 64, 128 };
    static const int Bs[] = { 1, 2, 4, 8 };
    size_t gi, n_same = 0, n_runs = 0;
    int bi, ax, m, grid, k;
    for (gi = 0; gi < 5; gi++)
        for (bi = 0; bi < 4; bi++)
            for (ax = 0; ax < 2; ax++)
                for (m = 0; m < 2; m++)
                    for (grid = 0; grid < 2; grid++) {
                        size_t G = Gs[gi], T = ax ? 2 * G : 37, D = ax ? 48 : 2 * G, i, nw, ng;  /* 74 per-token groups: the 16-at-a-time path and its tail */
                        kvq_layout L;
                        float *X = (float *)malloc(T * D * sizeof(float));
                        uint32_t *w1, *w2;
                        kvq_sz *s1, *s2;
                        for (i = 0; i < T * D; i++)
                            X[i] = grid ? (float)rbelow(r, 16) * 0.5f - 3.0f : 2.0f * rnorm(r);
                        if (grid) for (i = 0; i < T * D; i += 5) X[i] = -1.5f;
                        if (kvq_layout_init(&L, T, D, Bs[bi], G, (kvq_axis)ax) != KVQ_OK) { CHECK(0, "layout"); free(X); continue; }
                        nw = L.total_words; ng = L.total_groups;
                        w1 = (uint32_t *)calloc(nw, 4); w2 = (uint32_t *)calloc(nw, 4);
                        s1 = (kvq_sz *)calloc(ng, sizeof *s1); s2 = (kvq_sz *)calloc(ng, sizeof *s2);
                        CHECK(scalar_quantize(X, T, D, Bs[bi], G, (kvq_axis)ax, (kvq_zero_mode)m, w1, s1) == KVQ_OK,
                              "quantize G=%zu B=%d failed", G, Bs[bi]);
                        for (k = 0; k < N_VECTOR; k++) {
                            const copy *v = &vector_copies[k];
                            memset(w2, 0, nw * 4);
                            n_runs++;
                            if (v->quantize(X, T, D, Bs[bi], G, (kvq_axis)ax, (kvq_zero_mode)m, w2, s2) == KVQ_OK &&
                                memcmp(w1, w2, nw * 4) == 0 && memcmp(s1, s2, ng * sizeof *s1) == 0) n_same++;
                            else CHECK(0, "quantize G=%zu B=%d axis %d mode %d grid %d: the %s copy's "
                                       "codes or (s, z) differ", G, Bs[bi], ax, m, grid, v->name);
                        }
                        free(X); free(w1); free(w2); free(s1); free(s2);
                    }
    printf("simd_check: %zu of %zu quantized matrices identical bytes\n", n_same, n_runs);
}

static void fill(rng *r, float *x, size_t n, float scale)
{
    size_t i;
    for (i = 0; i < n; i++) x[i] = scale * rnorm(r);
}

static void check_attend(void)
{
    /* D = 16, 32, 256 for the per-token-key and 2-bit policies only: one
       key's 2-bit words are 1, 2 or 16 (kvq__columns16's one- and
       two-column and widest transposes), D = 256 has 16 key groups (the
       (s, z) columns by gathers) and 8 heads exceed the pair table    */
    static const size_t Ds[] = { 8, 16, 32, 48, 64, 128, 256 }, Ts[] = { 1, 31, 100, 1000 },
                        nqs[] = { 1, 3, 8 };
    rng r = { 0x51D0C4EC4ull };
    int pol, di, ti, qi, mode;
    size_t same = 0, runs = 0, fused_differs = 0;
    for (pol = 0; pol < 11; pol++)
        for (di = 0; di < 7; di++)
            for (ti = 0; ti < 4; ti++) {
                size_t D = Ds[di], T = Ts[ti];
                kvq_config cfg;
                kvq_cache c;
                float *K, *V;
                if ((D == 16 || D == 32 || D == 256) && pol != 0 && pol != 4 && pol != 5 &&
                    pol != 6)
                    continue;
                switch (pol) {
                case 0:  cfg = kvq_config_kivi(D, 2); break;
                case 1:  cfg = kvq_config_kivi(D, 4); break;
                case 2:  cfg = kvq_config_kivi(D, 1); break;
                case 3:  cfg = kvq_config_kivi(D, 8); cfg.zero_mode = KVQ_ZERO_INT; break;
                case 4: { kvq_hf_params hp = kvq_hf_defaults(2);
                          hp.q_group_size = D % 64 || D == 256 ? 16 : 64;
                          cfg = kvq_config_hf(D, hp); break; }
                case 5: { kvq_hf_params hp = kvq_hf_defaults(4); hp.q_group_size = D % 32 ? 8 : 32;
                          cfg = kvq_config_hf(D, hp); break; }
                case 6:  cfg = kvq_config_ott(D, 2, 5); break;
                case 7:  cfg = kvq_config_logquant(D, 2, 16); break;
                case 8:  cfg = kvq_config_full(D, 16); break;
                case 9:  cfg = kvq_config_full(D, 32); break;
                default: cfg = kvq_config_kivi(D, 2); cfg.value_axis = KVQ_PER_CHANNEL; break;
                }
                if (cfg.key_axis == KVQ_PER_TOKEN && D % cfg.group) cfg.group = 8;
                if (pol == 6 && cfg.value_group > D) cfg.value_group = D;
                if (kvq_config_validate(&cfg) != KVQ_OK) continue;
                K = (float *)malloc(T * D * sizeof(float));
                V = (float *)malloc(T * D * sizeof(float));
                fill(&r, K, T * D, 1.5f);
                fill(&r, V, T * D, 1.0f);
                if (scalar_cache_init(&c, &cfg) != KVQ_OK || scalar_cache_prefill(&c, K, V, T) != KVQ_OK) {
                    CHECK(0, "policy %d D=%zu T=%zu: build: %s", pol, D, T, kvq_why());
                    free(K); free(V);
                    continue;
                }
                for (qi = 0; qi < 3; qi++)
                    for (mode = 0; mode < 2; mode++) {
                        size_t nq = nqs[qi], nw = nq * scalar_scratch(&c, (kvq_attn_mode)mode);
                        float *q = (float *)malloc(nq * D * sizeof(float));
                        float *o1 = (float *)malloc(nq * D * sizeof(float));
                        float *o2 = (float *)malloc(nq * D * sizeof(float));
                        float *w = (float *)malloc(nw * sizeof(float));
                        int k;
                        fill(&r, q, nq * D, 1.0f);
                        if (scalar_copies[1].fused() != scalar_copies[0].fused()) {
                            /* FMA must really be in effect where claimed */
                            CHECK(scalar_copies[0].attend(&c, q, nq, o1, (kvq_attn_mode)mode, w, nw) == KVQ_OK &&
                                  scalar_copies[1].attend(&c, q, nq, o2, (kvq_attn_mode)mode, w, nw) == KVQ_OK,
                                  "policy %d: scalar attend failed", pol);
                            fused_differs += memcmp(o1, o2, nq * D * sizeof(float)) != 0;
                        }
                        for (k = 0; k < N_VECTOR; k++) {
                            const copy *v = &vector_copies[k], *ref = reference_of(v);
                            if (!ref) continue;
                            CHECK(ref->attend(&c, q, nq, o1, (kvq_attn_mode)mode, w, nw) == KVQ_OK &&
                                  v->attend(&c, q, nq, o2, (kvq_attn_mode)mode, w, nw) == KVQ_OK,
                                  "policy %d D=%zu T=%zu: attend failed", pol, D, T);
                            runs++;
                            if (memcmp(o1, o2, nq * D * sizeof(float)) == 0) same++;
                            else CHECK(0, "policy %d D=%zu T=%zu n_q=%zu %s: the %s copy differs from "
                                       "%s (%.9g vs %.9g)", pol, D, T, nq, mode ? "ONLINE" : "EAGER",
                                       v->name, ref->name, (double)o2[0], (double)o1[0]);
                        }
                        free(q); free(o1); free(o2); free(w);
                    }
                scalar_cache_free(&c);
                free(K); free(V);
            }
    CHECK(runs >= 3 * 800, "only %zu attention runs", runs);
    CHECK(scalar_copies[1].fused() == scalar_copies[0].fused() || fused_differs > runs / 30,
          "the fused and unfused scalar copies differ on only %zu outputs: is FMA in effect?",
          fused_differs);
    printf("simd_check: %zu of %zu attention outputs identical bytes\n", same, runs);
}

/* The four 2-bit caches whose walks the Zen 1 checks below aim at:
   0 KIVI-2, 1 HF-2, 2 OTT-2, 3 LogQuant-2 (window 16)                    */
static kvq_config two_bit_policy(int pol, size_t D)
{
    return pol == 0 ? kvq_config_kivi(D, 2)
         : pol == 1 ? kvq_config_hf(D, kvq_hf_defaults(2))
         : pol == 2 ? kvq_config_ott(D, 2, 5) : kvq_config_logquant(D, 2, 16);
}

/* Weights near the bottom of the float range. Built for Zen 1, kvq.h's
   2-bit pair walks (one head: values, per-channel keys) scale each weight
   by 4^-j, exact only while w 4^-7 stays normal: below 1e-33 they must
   take the unscaled walk. Here the first 64 tokens score 79-87 above
   the rest and have zero values, so every later weight w a is about
   1e-39 .. 1e-34 and the output is made of those terms alone (without
   that walk 8 of these outputs differ); q_d of 1e-38 give per-channel
   keys tiny q_d a_d too. One head, D = 128.                              */
static void check_attend_tiny(void)
{
    rng r = { 0x7E11A1ull };
    const size_t D = 128, T = 1000;
    size_t same = 0, runs = 0, i;
    int pol, mode, k;
    for (pol = 0; pol < 4; pol++)
        for (mode = 0; mode < 2; mode++) {
            kvq_config cfg = two_bit_policy(pol, D);
            kvq_cache c;
            float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
            float q[128], o1[128], o2[128], *w;
            size_t nw;
            fill(&r, V, T * D, 1.0f);
            for (i = 0; i < T; i++) {
                float x = 7.8f + 0.75f * runif(&r);     /* score 10.1 x lower */
                size_t d;
                for (d = 0; d < D; d++) {
                    K[i * D + d] = i < 64 ? 10.0f : 10.0f - x + 0.01f * rnorm(&r);
                    if (i < 64) V[i * D + d] = 0.0f;
                }
            }
            for (i = 0; i < D; i++) q[i] = i % 9 == 4 ? 1e-38f : 1.0f;
            if (scalar_cache_init(&c, &cfg) != KVQ_OK || scalar_cache_prefill(&c, K, V, T) != KVQ_OK) {
                CHECK(0, "tiny weights, policy %d: build: %s", pol, kvq_why());
                free(K); free(V);
                continue;
            }
            nw = scalar_scratch(&c, (kvq_attn_mode)mode);
            w = (float *)malloc(nw * sizeof(float));
            for (k = 0; k < N_VECTOR; k++) {
                const copy *v = &vector_copies[k], *ref = reference_of(v);
                if (!ref) continue;
                CHECK(ref->attend(&c, q, 1, o1, (kvq_attn_mode)mode, w, nw) == KVQ_OK &&
                      v->attend(&c, q, 1, o2, (kvq_attn_mode)mode, w, nw) == KVQ_OK,
                      "tiny weights, policy %d: attend failed", pol);
                runs++;
                if (memcmp(o1, o2, sizeof o1) == 0) same++;
                else CHECK(0, "tiny weights, policy %d %s: the %s copy differs from %s (%.9g vs %.9g)",
                           pol, mode ? "ONLINE" : "EAGER", v->name, ref->name, (double)o2[0],
                           (double)o1[0]);
            }
            scalar_cache_free(&c);
            free(K); free(V); free(w);
        }
    printf("simd_check: %zu of %zu attention outputs with tiny weights identical bytes\n", same, runs);
}

/* The caller's MXCSR (x86): DAZ (bit 6) reads every subnormal input as 0,
   FTZ (bit 15) flushes every result below 2^-126 to 0. Built for Zen 1,
   kvq.h's one-head 2-bit pair walks read each masked code c 4^j as the
   subnormal c 4^j 2^-149 (kvq__walk_scale): under DAZ that would be 0,
   so they must see the bit and walk as before.                           */
#if defined(__x86_64__)
#include <xmmintrin.h>
static unsigned csr_set(unsigned flags)
{
    const unsigned old = _mm_getcsr();
    _mm_setcsr((old & ~0x8040u) | flags);
    return old;
}
static void csr_restore(unsigned old) { _mm_setcsr(old); }
#define HAVE_CSR 1
#else
static unsigned csr_set(unsigned flags) { (void)flags; return 0; }
static void csr_restore(unsigned old) { (void)old; }
#define HAVE_CSR 0
#endif

/* kvq_attend with DAZ set, and with DAZ and FTZ (as -ffast-math's startup
   code leaves them): every vector copy's outputs the same bytes as the
   scalar copy's with the default MXCSR (ordinary data: no subnormal in
   the reference). 2-bit caches, D = 128, T = 1000, 1 and 4 heads.       */
static void check_attend_daz(void)
{
    static const unsigned flags[2] = { 0x40u, 0x8040u };
    rng r = { 0xDA2C5Full };
    const size_t D = 128, T = 1000;
    size_t same = 0, runs = 0;
    int pol, mode, k, f, qi;
    if (!HAVE_CSR) { printf("simd_check: no MXCSR here: DAZ cases skipped\n"); return; }
    for (pol = 0; pol < 4; pol++) {
        kvq_config cfg = two_bit_policy(pol, D);
        kvq_cache c;
        float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
        fill(&r, K, T * D, 1.5f);
        fill(&r, V, T * D, 1.0f);
        if (scalar_cache_init(&c, &cfg) != KVQ_OK || scalar_cache_prefill(&c, K, V, T) != KVQ_OK) {
            CHECK(0, "DAZ, policy %d: build: %s", pol, kvq_why());
            free(K); free(V);
            continue;
        }
        for (qi = 0; qi < 2; qi++)
            for (mode = 0; mode < 2; mode++) {
                const size_t nq = qi ? 4 : 1, nw = nq * scalar_scratch(&c, (kvq_attn_mode)mode);
                float *q = (float *)malloc(nq * D * sizeof(float)), *w = (float *)malloc(nw * sizeof(float));
                float *o1 = (float *)malloc(nq * D * sizeof(float)), *o2 = (float *)malloc(nq * D * sizeof(float));
                fill(&r, q, nq * D, 1.0f);
                for (k = 0; k < N_VECTOR; k++)
                    for (f = 0; f < 2; f++) {
                        const copy *v = &vector_copies[k], *ref = reference_of(v);
                        kvq_status st1, st2;
                        unsigned old;
                        if (!ref) continue;
                        st1 = ref->attend(&c, q, nq, o1, (kvq_attn_mode)mode, w, nw);
                        old = csr_set(flags[f]);
                        st2 = v->attend(&c, q, nq, o2, (kvq_attn_mode)mode, w, nw);
                        csr_restore(old);
                        runs++;
                        if (st1 == KVQ_OK && st2 == KVQ_OK && memcmp(o1, o2, nq * D * sizeof(float)) == 0)
                            same++;
                        else CHECK(0, "MXCSR 0x%x, policy %d n_q=%zu %s: the %s copy differs from %s "
                                   "(%.9g vs %.9g)", flags[f], pol, nq, mode ? "ONLINE" : "EAGER",
                                   v->name, ref->name, (double)o2[0], (double)o1[0]);
                    }
                free(q); free(w); free(o1); free(o2);
            }
        scalar_cache_free(&c);
        free(K); free(V);
    }
    printf("simd_check: %zu of %zu attention outputs under DAZ identical bytes\n", same, runs);
}


/* The rotation's fast path (kvq.h Part II, II.4) against its definition,
   kvq__rotate_row (Sec. 6.1, this file's own scalar copy): every copy's
   outputs the same bytes, D = 1 .. 4096 (powers of two), both directions,
   with and without a sign vector, in place and out of place, on rows of
   N(0,1), of +-65504-scale values, of subnormals, and of a mix with exact
   ties and signed zeros; the returned max |out| must be the row's.        */
static void check_rotation(void)
{
    rng r = { 0x2900D1CEull };
    size_t D, i, same = 0, runs = 0;
    int kind, inv, sg, k;
    for (D = 1; D <= 4096; D *= 2)
        for (kind = 0; kind < 4; kind++)
            for (inv = 0; inv < 2; inv++)
                for (sg = 0; sg < 2; sg++) {
                    float *x = (float *)malloc(D * sizeof(float)), *sign = (float *)malloc(D * sizeof(float));
                    float *ref = (float *)malloc(D * sizeof(float)), *o = (float *)malloc(D * sizeof(float));
                    float big = 0.0f;
                    for (i = 0; i < D; i++) {
                        sign[i] = rbelow(&r, 2) ? -1.0f : 1.0f;
                        x[i] = kind == 0 ? rnorm(&r)
                             : kind == 1 ? 65504.0f * (2.0f * runif(&r) - 1.0f)
                             : kind == 2 ? 1e-40f * rnorm(&r)                /* subnormals */
                             : (float)((int)rbelow(&r, 7) - 3) * (rbelow(&r, 2) ? 0.5f : -0.0f);
                    }
                    memcpy(ref, x, D * sizeof(float));
                    kvq__rotate_row(sg ? sign : NULL, D, inv, ref);
                    for (i = 0; i < D; i++) big = fabsf(ref[i]) > big ? fabsf(ref[i]) : big;
                    for (k = 0; k < N_VECTOR + 2; k++) {
                        const copy *v = k < 2 ? &scalar_copies[k] : &vector_copies[k - 2];
                        float m;
                        int in_place = (int)(runs & 1);
                        if (in_place) memcpy(o, x, D * sizeof(float));
                        m = v->rotate_row(sg ? sign : NULL, D, inv, in_place ? o : x, o);
                        runs++;
                        if (memcmp(o, ref, D * sizeof(float)) == 0 && m == big) same++;
                        else CHECK(0, "rotation D=%zu data %d inverse %d signs %d, %s copy: "
                                   "out[0] %.9g vs %.9g, max %.9g vs %.9g", D, kind, inv, sg,
                                   v->name, (double)o[0], (double)ref[0], (double)m, (double)big);
                    }
                    free(x); free(sign); free(ref); free(o);
                }
    CHECK(runs == 13 * 16 * (N_VECTOR + 2), "rotation: %zu runs", runs);
    printf("simd_check: %zu of %zu rotated rows identical bytes to kvq__rotate_row\n", same, runs);
}

/* kvq_config_engine's presets (kvq.h Sec. 4.1): every vector copy's
   ONLINE and EAGER outputs the same bytes as its scalar copy's, D = 64 and
   128, n_q = 1, 2, 4, 8, after a prefill of T tokens (a few rows scaled
   down into E4M3's and E5M2's subnormals) and 37 appends, then again after
   evicting a third of the positions, and again after compacting (also
   with DAZ, and DAZ and FTZ, set for the vector copy). Each
   side's decoding (kvq__vals16) against its table s->value, every code.
   Prints which presets the vector walk serves.                          */
static void check_engine(void)
{
    static const char *const names[] = {
        "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-per-token-head", "int8-per-token-head",
        "int4-per-token-head", "nvfp4", "nvfp4-4over6", "turboquant-k8v4",
        "turboquant-4bit-nc", "turboquant-k3v4-nc", "turboquant-3bit-nc", "q8_0", "q4_0" };
    static const size_t Ds[] = { 64, 128 }, Ts[] = { 1, 45, 300 }, nqs[] = { 1, 2, 4, 8 };
    static int (*const decode[N_VECTOR])(const kvq_cache *, int) = {
        simd_decode_differs, simd_fma_decode_differs, native_decode_differs,
        native_novbmi_decode_differs };
    rng r = { 0xE4E3F0A7ull };
    size_t same = 0, runs = 0, dec_ok = 0, dec_runs = 0, ni, di, ti, qi, i;
    int stage, mode, k, side;
    char served[512] = "", plain[512] = "";
    for (ni = 0; ni < sizeof names / sizeof names[0]; ni++) {
        int serves = -1;
        for (di = 0; di < 2; di++)
            for (ti = 0; ti < 3; ti++) {
                const size_t D = Ds[di], T = Ts[ti], A = 37, N = T + A;
                kvq_config cfg;
                kvq_cache c;
                float *K = (float *)malloc(N * D * sizeof(float)), *V = (float *)malloc(N * D * sizeof(float));
                uint8_t *keep = (uint8_t *)malloc(N);
                int ok;
                fill(&r, K, N * D, 1.5f);
                fill(&r, V, N * D, 1.0f);
                for (i = 0; i < N; i += 7) {            /* subnormal codes  */
                    size_t d;
                    for (d = 0; d < D; d++) { K[i * D + d] *= 1e-4f; V[i * D + d] *= 3e-3f; }
                }
                ok = kvq_config_engine(&cfg, D, names[ni]) == KVQ_OK && kvq_cache_init(&c, &cfg) == KVQ_OK;
                ok = ok && kvq_cache_prefill(&c, K, V, T) == KVQ_OK;
                for (i = T; ok && i < N; i++) ok = kvq_cache_append(&c, K + i * D, V + i * D) == KVQ_OK;
                if (!ok) {
                    CHECK(0, "engine %s D=%zu T=%zu: build: %s", names[ni], D, T, kvq_why());
                    free(K); free(V); free(keep);
                    continue;
                }
                if (serves < 0) serves = native_walk_serves(&c);
                CHECK(native_walk_serves(&c) == serves, "engine %s: served at one D, not another",
                      names[ni]);
                if (di == 0 && ti == 0)                 /* also with DAZ, DAZ+FTZ */
                    for (side = 0; side < 2; side++)
                        for (k = 0; k < 3 * N_VECTOR; k++) {
                            const unsigned flags = k < N_VECTOR ? 0u : k < 2 * N_VECTOR ? 0x40u : 0x8040u;
                            unsigned old;
                            int bad;
                            if (flags && !HAVE_CSR) continue;
                            old = csr_set(flags);
                            bad = decode[k % N_VECTOR](&c, side);
                            csr_restore(old);
                            if (bad < 0) continue;
                            dec_runs++;
                            if (bad == 0) dec_ok++;
                            else CHECK(0, "engine %s side %d: the %s copy decodes %d codes differently "
                                       "from s->value (MXCSR 0x%x)", names[ni], side,
                                       vector_copies[k % N_VECTOR].name, bad, flags);
                        }
                for (stage = 0; stage < 3; stage++) {
                    if (stage == 1) {                   /* evict a third    */
                        for (i = 0; i < N; i++) keep[i] = (uint8_t)(rbelow(&r, 3) != 0 || i == N - 1);
                        CHECK(kvq_cache_evict(&c, keep, N, NULL) == KVQ_OK, "engine %s: evict: %s",
                              names[ni], kvq_why());
                    }
                    if (stage == 2)
                        CHECK(kvq_cache_compact(&c, 16, NULL) == KVQ_OK, "engine %s: compact: %s",
                              names[ni], kvq_why());
                    for (qi = 0; qi < 4; qi++)
                        for (mode = 0; mode < 2 + (qi == 0 && stage == 0 ? 2 : 0); mode++) {
                            /* modes 2, 3: ONLINE again (n_q = 1) with
                               subnormal q values: the E4M3 walk does not
                               fold its 2^8 into such a query
                               (kvq__fp8_fold_ok; |q| <= KVQ_MAX_ABS_INPUT
                               rules out the other refusal, > 2^119) and
                               takes the unfolded route                */
                            size_t nq = nqs[qi], nw = nq * scalar_scratch(&c, KVQ_ATTN_ONLINE);
                            float *q = (float *)malloc(nq * D * sizeof(float));
                            float *o1 = (float *)malloc(nq * D * sizeof(float));
                            float *o2 = (float *)malloc(nq * D * sizeof(float));
                            float *w;
                            if (mode < 2) nw = nq * scalar_scratch(&c, (kvq_attn_mode)mode);
                            w = (float *)malloc(nw * sizeof(float));
                            fill(&r, q, nq * D, 1.0f);
                            if (mode == 2) q[1] = 1e-40f;
                            if (mode == 3) { q[2] = -3e-39f; q[5] = 1e-45f; }
                            for (k = 0; k < 3 * N_VECTOR; k++) {
                                /* each copy with the default MXCSR, then
                                   (T = 45, n_q 1 and 4) with DAZ, with DAZ
                                   and FTZ: against the scalar copy's
                                   default (E4M3's and E5M2's subnormal
                                   codes are ordinary values here)      */
                                const copy *v = &vector_copies[k % N_VECTOR], *ref = reference_of(v);
                                const unsigned flags = k < N_VECTOR ? 0u : k < 2 * N_VECTOR ? 0x40u : 0x8040u;
                                unsigned old;
                                kvq_status st;
                                if (!ref || (flags && (!HAVE_CSR || ti != 1 || (nq != 1 && nq != 4) || mode >= 2)))
                                    continue;
                                CHECK(ref->attend(&c, q, nq, o1, mode < 2 ? (kvq_attn_mode)mode : KVQ_ATTN_ONLINE,
                                                  w, nw) == KVQ_OK,
                                      "engine %s D=%zu: attend failed", names[ni], D);
                                old = csr_set(flags);
                                st = v->attend(&c, q, nq, o2, mode < 2 ? (kvq_attn_mode)mode : KVQ_ATTN_ONLINE,
                                               w, nw);
                                csr_restore(old);
                                CHECK(st == KVQ_OK, "engine %s D=%zu: attend failed", names[ni], D);
                                runs++;
                                if (memcmp(o1, o2, nq * D * sizeof(float)) == 0) same++;
                                else CHECK(0, "engine %s D=%zu T=%zu stage %d n_q=%zu %s MXCSR 0x%x: the "
                                           "%s copy differs from %s (%.9g vs %.9g)", names[ni], D, T, stage,
                                           nq, mode ? "ONLINE" : "EAGER", flags, v->name, ref->name,
                                           (double)o2[0], (double)o1[0]);
                            }
                            free(q); free(o1); free(o2); free(w);
                        }
                }
                kvq_cache_free(&c);
                free(K); free(V); free(keep);
            }
        strcat(serves > 0 ? served : plain, " ");
        strcat(serves > 0 ? served : plain, names[ni]);
    }
    printf("simd_check: presets the vector walk serves:%s\n", served);
    printf("simd_check: presets left to kvq.h's plain walk:%s\n", *plain ? plain : " none");
    printf("simd_check: %zu of %zu preset decodings identical to s->value\n", dec_ok, dec_runs);
    printf("simd_check: %zu of %zu engine-preset attention outputs identical bytes\n", same, runs);
}

int main(void)
{
    if (!simd_vector_path()) {
        CHECK(0, "the vector copy was built without KVQ__SIMD (compiler flags?)");
        return TEST_END("simd_check");
    }
    if (!cpu_has_vector_path()) {
        printf("simd_check: this CPU has no AVX2/FMA: the vector path cannot run here (skipped)\n");
        return TEST_END("simd_check");
    }
    check_f16();
    check_f32_to_f16();
    {
        rng r = { 0x0A5EED5ull };
        check_quantize(&r);
    }
    check_attend();
    check_attend_tiny();
    check_attend_daz();
    check_engine();
    check_rotation();
    return TEST_END("simd_check");
}
#endif
