/* tests/test_policies.c - the OTT (kvq.h Sec. 7.1) and LogQuant (Sec. 7.2)
   cache policies against brute-force simulators written from the papers.

   Groups (each is a function below; its comment says where the expectation
   comes from and why it is independent of the code under test):
     1. OTT vs a simulator of OTT Sec. 3.2 / Appendix E as kvq.h Sec. 7.1
        states it: region of every position, pool and auxiliary contents,
        every read-back row (full precision exact; quantized groups equal to
        the documented one-group quantizer applied to the mean-replaced
        group), ott_rounds / ott_stopped_at / ott_tracing, after every step
     2. OTT hand-derived cases: all-equal norms (ties), strictly falling
        norms (the auxiliary pool fills exactly / overflows), one planted
        low-norm token, k = 0 layers (kvq_config_ott layer 0/1)
     3. OTT permutation invariance of the competition (channels; tokens
        inside one quantization group)
     4. LogQuant vs a simulator of LogQuant Algorithm 1 (Sec. 2.5) plus
        closed forms for the kept / staged / quantized counts
     5. prefill == the same tokens appended one by one, bit for bit
     6. attention (EAGER, ONLINE) vs kvq_attend_dense over read-back rows
     7. bad OTT / LogQuant configs are rejected with a reason and leave
        nothing allocated
     8. allocator failure at every attempt of init, prefill and append of
        OTT and LogQuant caches: NOMEM, nothing leaked, cache unchanged

   Nothing here reads kvq internals except the documented public loc map
   (kvq.h Sec. 7: "region tag in the top 4 bits"). Fixed seeds throughout;
   -DKVQ_TEST_QUICK (the sanitizer build) shrinks the loop counts.         */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>

#define TEST_ALLOC            /* tests/test.h: counting allocator, RNG */
#define TEST_RNG
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"
/* Empties kvq_why() (kvq.h's private buffer; this file has the
   implementation) so a test can tell that a failing call set a reason.    */
static void why_clear(void) { kvq__why_buf[0] = '\0'; }

/* ------------------------------------------------------------------------ */
/* helpers: fp16 from its definition, the one-unit reference quantizer      */
/* ------------------------------------------------------------------------ */
static size_t pick(rng *r, const size_t *v, size_t n) { return v[rbelow(r, n)]; }
static float *falloc(size_t n) { return (float *)malloc((n + 1) * sizeof(float)); }

/* binary16 round-to-nearest-even from the format's definition (11
   significant bits, quantum 2^-24 below 2^-14): frexp/ldexp/rint only.    */
static float ref_f16(float x)
{
    float ax = fabsf(x);
    int e;
    if (ax >= 65520.0f) return x > 0 ? INFINITY : -INFINITY;
    if (ax < 6.103515625e-05f) return ldexpf(rintf(ldexpf(x, 24)), -24);
    (void)frexpf(x, &e);
    return ldexpf(rintf(ldexpf(x, 11 - e)), e - 11);
}
/* What a full-precision row region stores for x (cfg.fp_bits).            */
static float stored(float x, int fp_bits) { return fp_bits == 32 ? x : ref_f16(x); }

/* Appendix E's score, as kvq.h Sec. 7.1 fixes it: sum_d |k_d| of the stored
   key, fp32, channels in order 0..D-1.                                    */
static float l1_row(const float *x, size_t D)
{
    float s = 0.0f;
    size_t d;
    for (d = 0; d < D; d++) s += fabsf(x[d]);
    return s;
}

static long ref_failures;   /* reference quantizer errors (none expected) */

/* A side's quantization parameters, from the config as Sec. 7 defines them:
   keys use G, values value_group (0 = G); a unit is 1 token (per-token) or
   G tokens (per-channel).                                                 */
typedef struct { int bits; kvq_axis axis; size_t G, tpu; } sidecfg;
static sidecfg side_of(const kvq_config *cfg, int side)
{
    sidecfg s;
    s.bits = side ? cfg->value_bits : cfg->key_bits;
    s.axis = side ? cfg->value_axis : cfg->key_axis;
    s.G = side && cfg->value_group ? cfg->value_group : cfg->group;
    s.tpu = s.axis == KVQ_PER_CHANNEL ? s.G : 1;
    return s;
}

/* The reference of one quantized unit: rows (tpu, D) -> out (tpu, D), the
   dequantized values, using only the documented one-group quantizer
   (kvq_quantize_group, Sec. 4) and x' = c*a + b (kvq_sz_affine).           */
static void ref_unit(const float *rows, size_t D, sidecfg s, kvq_zero_mode mode,
                     float *out)
{
    uint8_t codes[1024];
    kvq_sz sz;
    float a, b;
    size_t g, j, n_groups = s.axis == KVQ_PER_TOKEN ? D / s.G : D;
    for (g = 0; g < n_groups; g++) {
        /* per-token: G channels of the row; per-channel: G tokens of one channel */
        size_t first = s.axis == KVQ_PER_TOKEN ? g * s.G : g;
        size_t stride = s.axis == KVQ_PER_TOKEN ? 1 : D;
        if (kvq_quantize_group(rows + first, s.G, stride, s.bits, mode, codes, &sz) != KVQ_OK)
            ref_failures++;          /* checked once, in main             */
        kvq_sz_affine(sz, mode, &a, &b);
        for (j = 0; j < s.G; j++) out[first + j * stride] = (float)codes[j] * a + b;
    }
}

/* ------------------------------------------------------------------------ */
/* What a simulator predicts for every position of both sides, and the one
   comparison every group uses.                                             */
/* ------------------------------------------------------------------------ */
#define TAG_QUANT   KVQ_LOC_QUANT
#define TAG_ROWS(r) (KVQ_LOC_ROWS0 + (uint32_t)(r))

typedef struct {
    size_t D, n, cap;
    float    *X[2];     /* (cap, D) the row as a full-precision region stores it */
    float    *E[2];     /* (cap, D) the row kvq_cache_read must return           */
    uint32_t *tag[2];   /* (cap) expected loc region tag                         */
    size_t placeholders;  /* expected quantized slots with qpos = -1 (OTT)      */
} expect;

static void expect_init(expect *e, size_t D, size_t cap)
{
    int s;
    memset(e, 0, sizeof *e);
    e->D = D;
    e->cap = cap;
    for (s = 0; s < 2; s++) {
        e->X[s] = (float *)calloc(cap * D + 1, sizeof(float));
        e->E[s] = (float *)calloc(cap * D + 1, sizeof(float));
        e->tag[s] = (uint32_t *)calloc(cap + 1, sizeof(uint32_t));
    }
}
static void expect_free(expect *e)
{
    int s;
    for (s = 0; s < 2; s++) { free(e->X[s]); free(e->E[s]); free(e->tag[s]); }
}
/* A new position arrives in full-precision region r of both sides.        */
static size_t expect_push(expect *e, const float *k, const float *v, int fp_bits)
{
    size_t p = e->n++, d, D = e->D;
    int s;
    for (s = 0; s < 2; s++)
        for (d = 0; d < D; d++) {
            e->X[s][p * D + d] = stored((s ? v : k)[d], fp_bits);
            e->E[s][p * D + d] = e->X[s][p * D + d];
        }
    return p;
}
/* Position p of side s now lives in full-precision region r (row unchanged). */
static void expect_rows(expect *e, int s, size_t p, int r) { e->tag[s][p] = TAG_ROWS(r); }
/* Position p of side s is quantized; its read-back row is `row` (D).     */
static void expect_quant(expect *e, int s, size_t p, const float *row)
{
    e->tag[s][p] = TAG_QUANT;
    memcpy(e->E[s] + p * e->D, row, e->D * sizeof(float));
}

/* Compares a cache with a prediction: n_pos, each position's region (the
   documented loc map), the census totals and placeholders, and every row
   read back (exact). Returns 1 on agreement, else 0 with msg filled.     */
static int cmp_expect(const kvq_cache *c, const expect *e, char *msg, size_t len)
{
    kvq_census cs;
    float *row = (float *)malloc((e->D + 1) * sizeof(float));
    size_t p, d, D = e->D;
    int s, r, ok = 0;
    if (c->n_pos != e->n) { snprintf(msg, len, "n_pos %zu, want %zu", c->n_pos, e->n); goto out; }
    if (kvq_cache_census(c, &cs) != KVQ_OK) { snprintf(msg, len, "census failed"); goto out; }
    for (s = 0; s < 2; s++) {
        const uint32_t *loc = s ? c->v.loc : c->k.loc;
        size_t want_q = 0, want_rows[KVQ_ROW_REGIONS] = { 0 };
        for (p = 0; p < e->n; p++) {
            uint32_t t = e->tag[s][p];
            if (KVQ_LOC_TAG(loc[p]) != t) {
                snprintf(msg, len, "side %d pos %zu in region tag %u, want %u", s, p,
                         (unsigned)KVQ_LOC_TAG(loc[p]), (unsigned)t);
                goto out;
            }
            if (t == TAG_QUANT) want_q++; else want_rows[t - KVQ_LOC_ROWS0]++;
            if (kvq_cache_read(c, s, p, row) != KVQ_OK) {
                snprintf(msg, len, "side %d pos %zu: read failed", s, p);
                goto out;
            }
            for (d = 0; d < D; d++)
                if (!(row[d] == e->E[s][p * D + d])) {
                    snprintf(msg, len, "side %d pos %zu (tag %u) ch %zu: read %.9g, want %.9g",
                             s, p, (unsigned)t, d, (double)row[d], (double)e->E[s][p * D + d]);
                    goto out;
                }
        }
        if (cs.quantized[s] != want_q || cs.absent[s] != 0 || cs.placeholders[s] != e->placeholders) {
            snprintf(msg, len, "side %d census: quantized %zu (want %zu), absent %zu, "
                     "placeholders %zu (want %zu)", s, cs.quantized[s], want_q, cs.absent[s],
                     cs.placeholders[s], e->placeholders);
            goto out;
        }
        for (r = 0; r < KVQ_ROW_REGIONS; r++)
            if (cs.rows[s][r] != want_rows[r]) {
                snprintf(msg, len, "side %d census rows[%d] = %zu, want %zu", s, r,
                         cs.rows[s][r], want_rows[r]);
                goto out;
            }
    }
    ok = 1;
out:
    free(row);
    return ok;
}

/* Every position's K and V as read back: out (2, n_pos, D).              */
static float *read_all(const kvq_cache *c)
{
    size_t D = c->cfg.head_dim, p, n = c->n_pos;
    float *all = (float *)malloc((2 * n * D + 1) * sizeof(float));
    int s;
    for (s = 0; s < 2; s++)
        for (p = 0; p < n; p++)
            if (kvq_cache_read(c, s, p, all + (s * n + p) * D) != KVQ_OK)
                memset(all + (s * n + p) * D, 0xFF, D * sizeof(float));   /* NaN */
    return all;
}

/* Two caches hold bit-identical data: every read, census and OTT counter. */
static int same_cache(const kvq_cache *a, const kvq_cache *b)
{
    kvq_census ca, cb;
    float *ra, *rb;
    int same;
    if (a->n_pos != b->n_pos || a->ott_rounds != b->ott_rounds ||
        a->ott_stopped_at != b->ott_stopped_at || a->ott_tracing != b->ott_tracing)
        return 0;
    kvq_cache_census(a, &ca);
    kvq_cache_census(b, &cb);
    if (memcmp(&ca, &cb, sizeof ca)) return 0;
    ra = read_all(a);
    rb = read_all(b);
    same = !memcmp(ra, rb, 2 * a->n_pos * a->cfg.head_dim * sizeof(float));
    free(ra); free(rb);
    return same;
}

/* ======================================================================== */
/* The OTT simulator (OTT paper Sec. 3.2, Appendix E; kvq.h Sec. 7.1).
   State: a FIFO window of positions, the outlier pool (a set), the count of
   the auxiliary pool (it only ever grows: tokens that reach it stay there),
   tracing on/off. Each append:
     1. the token joins the window (K and V, full precision);
     2. if the window holds R + G tokens, a round: its G oldest (positions
        g_0 < ... < g_{G-1}) form the group;
        - while tracing: the group and the pool's members compete by the L1
          key score; the k smallest win, ties to the smaller position. Pool
          members that lost would go to aux: if aux cannot take them all, the
          round is not held and tracing stops for good; otherwise they move
          to aux, group winners move to the pool, and if aux is now exactly
          full tracing stops after this round;
        - the group is quantized (K and V), each group winner's row replaced
          by the mean (REST: of the group's non-winners; ALL: of all G)
          before quantizing; the winners are not quantized positions.
   The mean is summed in fp32 in group (position) order, then divided by
   the count: the natural reading, and the only order-dependent detail
   here that the header leaves to the implementation.                     */
/* ======================================================================== */
typedef struct {
    kvq_config cfg;
    expect e;
    size_t *win, win_head, win_n;       /* (cap) window FIFO               */
    size_t pool[KVQ_OTT_MAX_K], pool_n;
    size_t aux_n;
    int    tracing;
    size_t stopped_at, rounds;
    float *score;                       /* (cap) L1 of each stored key     */
    float *grp, *deq;                   /* (G, D) group rows, dequantized  */
} ott_sim;

static void ott_sim_init(ott_sim *S, const kvq_config *cfg, size_t cap)
{
    memset(S, 0, sizeof *S);
    S->cfg = *cfg;
    expect_init(&S->e, cfg->head_dim, cap);
    S->win = (size_t *)calloc(cap + 1, sizeof(size_t));
    S->score = (float *)calloc(cap + 1, sizeof(float));
    S->grp = (float *)calloc(cfg->group * cfg->head_dim, sizeof(float));
    S->deq = (float *)calloc(cfg->group * cfg->head_dim, sizeof(float));
    S->tracing = cfg->ott_k > 0;
}
static void ott_sim_free(ott_sim *S)
{
    expect_free(&S->e);
    free(S->win); free(S->score); free(S->grp); free(S->deq);
}

/* Candidates sorted by (score, position): insertion sort, n <= G + k.     */
static void sort_by_score(size_t *cand, size_t n, const float *score)
{
    size_t i, j;
    for (i = 1; i < n; i++) {
        size_t x = cand[i];
        for (j = i; j > 0; j--) {
            size_t y = cand[j - 1];
            if (score[y] < score[x] || (score[y] == score[x] && y < x)) break;
            cand[j] = y;
        }
        cand[j] = x;
    }
}

/* The competition of one round; marks group winners in won[0..G).        */
static void ott_sim_compete(ott_sim *S, const size_t *group, unsigned char *won)
{
    size_t G = S->cfg.group, k = S->cfg.ott_k, cand[64 + KVQ_OTT_MAX_K];
    size_t n = 0, i, j, nw, losers = 0;
    for (i = 0; i < G; i++) cand[n++] = group[i];
    for (i = 0; i < S->pool_n; i++) cand[n++] = S->pool[i];
    sort_by_score(cand, n, S->score);
    nw = k < n ? k : n;
    for (i = nw; i < n; i++) losers += cand[i] < group[0];   /* pool members are older */
    if (S->aux_n + losers > S->cfg.ott_aux) {                /* round not held */
        S->tracing = 0;
        S->stopped_at = S->e.n;
        return;
    }
    for (i = nw; i < n; i++)
        if (cand[i] < group[0]) {
            expect_rows(&S->e, 0, cand[i], KVQ_ROWS_AUX);
            expect_rows(&S->e, 1, cand[i], KVQ_ROWS_AUX);
            S->aux_n++;
        }
    S->pool_n = 0;
    for (i = 0; i < nw; i++) {
        S->pool[S->pool_n++] = cand[i];
        for (j = 0; j < G; j++)
            if (group[j] == cand[i]) {
                won[j] = 1;
                expect_rows(&S->e, 0, cand[i], KVQ_ROWS_OUTLIER);
                expect_rows(&S->e, 1, cand[i], KVQ_ROWS_OUTLIER);
                S->e.placeholders++;
            }
    }
    S->rounds++;
    if (S->aux_n == S->cfg.ott_aux) { S->tracing = 0; S->stopped_at = S->e.n; }
}

static void ott_sim_round(ott_sim *S)
{
    size_t G = S->cfg.group, D = S->cfg.head_dim, *group = S->win + S->win_head;
    size_t i, d, u, cnt = 0;
    unsigned char won[64];
    int s, any = 0, all = S->cfg.ott_mean == KVQ_OTT_MEAN_ALL;
    memset(won, 0, sizeof won);
    if (S->tracing) ott_sim_compete(S, group, won);
    for (i = 0; i < G; i++) { any |= won[i]; cnt += all || !won[i]; }
    for (s = 0; s < 2; s++) {
        sidecfg sc = side_of(&S->cfg, s);
        for (i = 0; i < G; i++)
            memcpy(S->grp + i * D, S->e.X[s] + group[i] * D, D * sizeof(float));
        for (d = 0; d < D && any; d++) {          /* winners -> the mean   */
            float sum = 0.0f, mean;
            for (i = 0; i < G; i++)
                if (all || !won[i]) sum += S->grp[i * D + d];
            mean = sum / (float)cnt;
            for (i = 0; i < G; i++)
                if (won[i]) S->grp[i * D + d] = mean;
        }
        for (u = 0; u < G / sc.tpu; u++)
            ref_unit(S->grp + u * sc.tpu * D, D, sc, S->cfg.zero_mode,
                     S->deq + u * sc.tpu * D);
        for (i = 0; i < G; i++)
            if (!won[i]) expect_quant(&S->e, s, group[i], S->deq + i * D);
    }
    S->win_head += G;
    S->win_n -= G;
}

static void ott_sim_append(ott_sim *S, const float *k, const float *v)
{
    size_t p = expect_push(&S->e, k, v, S->cfg.fp_bits);
    expect_rows(&S->e, 0, p, KVQ_ROWS_WINDOW);
    expect_rows(&S->e, 1, p, KVQ_ROWS_WINDOW);
    S->score[p] = l1_row(S->e.X[0] + p * S->e.D, S->e.D);
    S->win[S->win_head + S->win_n++] = p;
    if (S->win_n >= S->cfg.residual + S->cfg.group) ott_sim_round(S);
}

/* Counters and pool state: the cache vs the simulator.                    */
static int cmp_ott(const kvq_cache *c, const ott_sim *S, char *msg, size_t len)
{
    if (!cmp_expect(c, &S->e, msg, len)) return 0;
    if (c->ott_rounds != S->rounds || c->ott_stopped_at != S->stopped_at ||
        c->ott_tracing != S->tracing) {
        snprintf(msg, len, "rounds %zu / stopped_at %zu / tracing %d, want %zu / %zu / %d",
                 c->ott_rounds, c->ott_stopped_at, c->ott_tracing, S->rounds,
                 S->stopped_at, S->tracing);
        return 0;
    }
    return 1;
}

/* Invariants of Sec. 7.1 read off the census alone, for any OTT cache:
   every position present once; the window holds n - G*(rounds so far)
   with rounds = floor((n - R) / G) once n >= R (so R <= window < R + G
   after the first round); pool <= k, aux <= aux capacity; each placeholder
   is a token that moved to the pool and maybe on to aux, so placeholders
   == pool + aux; quantized == G * rounds - placeholders.                  */
static int ott_invariants(kvq_cache *c, char *msg, size_t len)
{
    const kvq_config *f = &c->cfg;
    size_t n = c->n_pos, R = f->residual, G = f->group;
    size_t rounds = n >= R ? (n - R) / G : 0;
    kvq_census cs;
    int s;
    if (kvq_cache_check(c) != KVQ_OK) { snprintf(msg, len, "check: %s", kvq_why()); return 0; }
    kvq_cache_census(c, &cs);
    for (s = 0; s < 2; s++) {
        size_t w = cs.rows[s][KVQ_ROWS_WINDOW], pl = cs.rows[s][KVQ_ROWS_OUTLIER],
               ax = cs.rows[s][KVQ_ROWS_AUX];
        if (w != n - G * rounds || pl > f->ott_k || ax > f->ott_aux ||
            cs.placeholders[s] != pl + ax || cs.quantized[s] != G * rounds - pl - ax ||
            cs.absent[s] || cs.rows[s][KVQ_ROWS_STAGE] || cs.rows[s][KVQ_ROWS_SINK]) {
            snprintf(msg, len, "side %d after %zu tokens: window %zu (want %zu), pool %zu, "
                     "aux %zu, placeholders %zu, quantized %zu", s, n, w, n - G * rounds,
                     pl, ax, cs.placeholders[s], cs.quantized[s]);
            return 0;
        }
    }
    if (c->ott_rounds > rounds) {
        snprintf(msg, len, "%zu rounds > %zu", c->ott_rounds, rounds);
        return 0;
    }
    return 1;
}

/* OTT test data. Values are N(0,1). Keys by kind:
     0 random N(0,1), 1 in 8 tokens scaled by 0.02..0.3 (planted low norm,
       the outlier tokens of Sec. 3.1)
     1 all-equal L1 norms: +-q[(d + shift) % D], q = multiples of 1/4, so
       every partial sum is exact and every score is identical (ties)
     2 strictly falling norms: +-(T - p) (1 + d % 3) / 4, exact in fp16
     3 small dyadic integers/4 (exact sums; ties common)                   */
static void gen_key(rng *r, int kind, size_t p, size_t T, size_t D, float *k)
{
    size_t d, shift = rbelow(r, D);
    float scale = kind == 0 && rbelow(r, 8) == 0 ? (float)(0.02 + 0.28 * runif(r)) : 1.0f;
    for (d = 0; d < D; d++) {
        float sign = rbelow(r, 2) ? 1.0f : -1.0f;
        switch (kind) {
        case 0: k[d] = scale * rnorm(r); break;
        case 1: k[d] = sign * (float)((d + shift) % D % 4 + 1) * 0.25f; break;
        case 2: k[d] = sign * (float)(T - p) * (float)(1 + d % 3) * 0.25f; break;
        default: k[d] = sign * (float)rbelow(r, 9) * 0.25f; break;
        }
    }
}
static void gen_kv(rng *r, int kind, size_t T, size_t D, float *K, float *V)
{
    size_t p, i;
    for (p = 0; p < T; p++) gen_key(r, kind, p, T, D, K + p * D);
    for (i = 0; i < T * D; i++) V[i] = rnorm(r);
}

/* An OTT config of the small sizes this file sweeps.                     */
static kvq_config ott_cfg(size_t D, int bits, size_t G, size_t R, size_t k,
                          size_t aux, kvq_ott_mean mean)
{
    kvq_config c = kvq_config_ott(D, bits, 2);
    c.group = G;
    c.residual = R;
    c.value_group = D < 16 ? D : 16;
    c.ott_k = k;
    c.ott_aux = aux;
    c.ott_mean = mean;
    return c;
}

/* Feeds T tokens to a cache in random chunks of 1..max_chunk (a chunk of 1
   is an append or a one-token prefill, longer ones a prefill) and to a
   simulator; after every operation the cache must hold the invariants and
   match the simulator. Returns 1 at the first disagreement (reported by a
   failed CHECK), else 0. The `app`/`cmp`/`inv` callbacks let OTT and
   LogQuant share it.                                                      */
typedef void (*sim_append_fn)(void *S, const float *k, const float *v);
typedef int  (*sim_cmp_fn)(const kvq_cache *c, const void *S, char *msg, size_t len);
typedef int  (*inv_fn)(kvq_cache *c, char *msg, size_t len);

static int drive(kvq_cache *c, void *S, sim_append_fn app, sim_cmp_fn cmp, inv_fn inv,
                 const float *K, const float *V, size_t T, size_t D, rng *r,
                 int max_chunk, const char *label)
{
    char msg[320];
    size_t p = 0;
    while (p < T) {
        size_t n = max_chunk <= 1 ? 1 : 1 + rbelow(r, (size_t)max_chunk), i;
        kvq_status st;
        if (n > T - p) n = T - p;
        st = n == 1 && rbelow(r, 2) ? kvq_cache_append(c, K + p * D, V + p * D)
                                    : kvq_cache_prefill(c, K + p * D, V + p * D, n);
        if (st != KVQ_OK) {
            CHECK(0, "%s: append/prefill at %zu failed: %s (%s)", label, p,
                  kvq_status_str(st), kvq_why());
            return 1;
        }
        for (i = 0; i < n; i++) app(S, K + (p + i) * D, V + (p + i) * D);
        p += n;
        if (!inv(c, msg, sizeof msg)) {
            CHECK(0, "%s: invariant after %zu tokens: %s", label, p, msg);
            return 1;
        }
        if (!cmp(c, S, msg, sizeof msg)) {
            CHECK(0, "%s: vs simulator after %zu tokens: %s", label, p, msg);
            return 1;
        }
    }
    return 0;
}
static void ott_app(void *S, const float *k, const float *v) { ott_sim_append((ott_sim *)S, k, v); }
static int ott_cmp(const kvq_cache *c, const void *S, char *m, size_t l)
{
    return cmp_ott(c, (const ott_sim *)S, m, l);
}

/* ======================================================================== */
/* 6. ATTENTION over a policy cache. EAGER and ONLINE each equal
   kvq_attend_dense (double) over the rows the cache reads back, within
   1e-4 max|out| + 1e-6 (float scores carry ~D 2^-24 relative error; a
   position counted twice, a placeholder attended or a wrong row is off by
   far more), and each other within 1e-5 max|out| + 1e-6.                 */
/* ======================================================================== */
static void check_attention(const kvq_cache *c, rng *r, const char *label)
{
    size_t D = c->cfg.head_dim, n = c->n_pos, n_q = 1 + rbelow(r, 3), i, m;
    float *all = read_all(c), *q = (float *)malloc(n_q * D * sizeof(float));
    float *ref = (float *)malloc(n_q * D * sizeof(float)), *out[2];
    double mx = 0.0, de = 0.0, dd[2] = { 0.0, 0.0 };
    int mode;
    for (i = 0; i < n_q * D; i++) q[i] = rnorm(r);
    CHECK(kvq_attend_dense(all, all + n * D, n, D, q, n_q, ref, NULL) == KVQ_OK,
          "%s: attend_dense failed", label);
    for (mode = 0; mode < 2; mode++) {
        size_t ns = kvq_attend_scratch_floats(c, (kvq_attn_mode)mode);
        float *scratch = (float *)malloc((ns + 1) * sizeof(float));
        kvq_status st;
        out[mode] = (float *)malloc(n_q * D * sizeof(float));
        st = kvq_attend(c, q, n_q, out[mode], NULL, (kvq_attn_mode)mode, scratch, ns);
        CHECK(st == KVQ_OK, "%s: attend mode %d: %s", label, mode, kvq_status_str(st));
        free(scratch);
    }
    for (i = 0; i < n_q * D; i++) {
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
        for (m = 0; m < 2; m++)
            if (!(fabs((double)out[m][i] - ref[i]) <= dd[m])) dd[m] = fabs((double)out[m][i] - ref[i]);
        if (!(fabs((double)out[0][i] - out[1][i]) <= de)) de = fabs((double)out[0][i] - out[1][i]);
    }
    CHECK(dd[0] <= 1e-4 * mx + 1e-6, "%s: EAGER vs dense %.3g (max|out| %.3g)", label, dd[0], mx);
    CHECK(dd[1] <= 1e-4 * mx + 1e-6, "%s: ONLINE vs dense %.3g (max|out| %.3g)", label, dd[1], mx);
    CHECK(de <= 1e-5 * mx + 1e-6, "%s: EAGER vs ONLINE %.3g", label, de);
    free(all); free(q); free(ref); free(out[0]); free(out[1]);
}

/* ======================================================================== */
/* 1 + 5 + 6. OTT vs the simulator over random small configs: D in {8, 16,
   64}, G in {8, 16}, R in {4, 8}, k in {0, 1, 3}, aux in {1, 2, 4, 32},
   both mean modes, B in {1, 2, 4, 8}, fp16 and fp32 rows, float and int
   zero, keys per-channel (and per-token when G | D), values per-token or
   per-channel in units of G/2, data kinds 0-3.
   Two caches per case: one fed by appends only, one by random prefill
   chunks; both are compared with the simulator after every operation and
   with each other bit for bit at the end (prefill = T appends, Sec. 7.1).   */
/* ======================================================================== */
static void test_ott_random(void)
{
    static const size_t Ds[] = { 8, 16, 64 }, Gs[] = { 8, 16 }, Rs[] = { 4, 8 },
                        ks[] = { 0, 1, 3 }, auxs[] = { 1, 2, 4, 32 };
    static const int bits[] = { 1, 2, 4, 8 };
    rng r = { 0x0770ull };
    int cases = COUNT(260, 80), i, bad = 0, stopped = 0, exact_fill = 0;
    for (i = 0; i < cases; i++) {
        size_t D = pick(&r, Ds, 3), G = pick(&r, Gs, 2), R = pick(&r, Rs, 2);
        size_t k = pick(&r, ks, 3), aux = pick(&r, auxs, 4);
        size_t T = R + G * (1 + rbelow(&r, 9)) + rbelow(&r, G + 1);
        int kind = (int)rbelow(&r, 4);
        kvq_config cfg = ott_cfg(D, bits[rbelow(&r, 4)], G, R, k, aux,
                                 rbelow(&r, 2) ? KVQ_OTT_MEAN_ALL : KVQ_OTT_MEAN_REST);
        float *K = falloc(T * D), *V = falloc(T * D);
        kvq_cache a, b;
        ott_sim Sa, Sb;
        char label[160];
        cfg.fp_bits = rbelow(&r, 2) ? 16 : 32;
        cfg.zero_mode = rbelow(&r, 4) ? KVQ_ZERO_FLOAT : KVQ_ZERO_INT;
        if (D % G == 0 && rbelow(&r, 4) == 0) cfg.key_axis = KVQ_PER_TOKEN;
        if (rbelow(&r, 4) == 0) { cfg.value_axis = KVQ_PER_CHANNEL; cfg.value_group = G / 2; }
        snprintf(label, sizeof label, "OTT case %d (D=%zu G=%zu R=%zu k=%zu aux=%zu B=%d "
                 "mean=%d fp%d kind %d T=%zu)", i, D, G, R, k, aux, cfg.key_bits,
                 (int)cfg.ott_mean, cfg.fp_bits, kind, T);
        gen_kv(&r, kind, T, D, K, V);
        CHECK(kvq_cache_init(&a, &cfg) == KVQ_OK && kvq_cache_init(&b, &cfg) == KVQ_OK,
              "%s: init: %s", label, kvq_why());
        ott_sim_init(&Sa, &cfg, T);
        ott_sim_init(&Sb, &cfg, T);
        bad += drive(&a, &Sa, ott_app, ott_cmp, ott_invariants, K, V, T, D, &r, 1, label);
        bad += drive(&b, &Sb, ott_app, ott_cmp, ott_invariants, K, V, T, D, &r,
                     (int)(2 * G + R), label);
        CHECK(same_cache(&a, &b), "%s: prefill chunks and appends differ", label);
        stopped += Sa.stopped_at != 0;
        exact_fill += Sa.stopped_at != 0 && Sa.aux_n == aux;
        if (i % 4 == 0) check_attention(&a, &r, label);
        ott_sim_free(&Sa); ott_sim_free(&Sb);
        kvq_cache_free(&a); kvq_cache_free(&b);
        free(K); free(V);
    }
    /* the sweep must actually reach both stop paths                      */
    CHECK(stopped > cases / 8, "only %d of %d OTT cases stopped tracing", stopped, cases);
    CHECK(exact_fill > 0, "no OTT case filled the auxiliary pool exactly");
    printf("  OTT random: %d cases, %d stopped tracing (%d by exact fill), %d disagreed\n",
           cases, stopped, exact_fill, bad);
}

/* ======================================================================== */
/* 2. OTT cases whose outcome follows from the rules by hand.
   Round j (1-based) happens when the j-th token after the first R + G - 1
   arrives, i.e. at n_pos = R + j G, and takes positions [(j-1)G, jG).     */
/* ======================================================================== */
static void run_ott(const kvq_config *cfg, const float *K, const float *V, size_t T,
                    kvq_cache *c)
{
    size_t p, D = cfg->head_dim;
    CHECK(kvq_cache_init(c, cfg) == KVQ_OK, "init: %s", kvq_why());
    for (p = 0; p < T; p++)
        CHECK(kvq_cache_append(c, K + p * D, V + p * D) == KVQ_OK, "append %zu", p);
}
static uint32_t ktag(const kvq_cache *c, size_t p) { return KVQ_LOC_TAG(c->k.loc[p]); }

static void test_ott_by_hand(void)
{
    rng r = { 0xBADA55ull };
    const size_t D = 16, G = 8, R = 4;
    size_t p, j;
    kvq_cache c;
    kvq_census cs;
    float *K = falloc(400 * D), *V = falloc(400 * D);

    /* (a) all-equal norms: ties go to the smaller position, so round 1's
       winners are positions 0..k-1 and they beat every later group on the
       tie; the pool never changes, nothing ever loses, aux stays empty and
       tracing never stops.                                                */
    {
        size_t k = 3, T = R + 6 * G + 5;
        kvq_config cfg = ott_cfg(D, 2, G, R, k, 4, KVQ_OTT_MEAN_REST);
        gen_kv(&r, 1, T, D, K, V);
        run_ott(&cfg, K, V, T, &c);
        for (p = 0; p < T; p++)
            if (ktag(&c, p) != (p < k ? TAG_ROWS(KVQ_ROWS_OUTLIER)
                                      : p < 6 * G ? TAG_QUANT : TAG_ROWS(KVQ_ROWS_WINDOW))) break;
        CHECK(p == T, "ties: position %zu in region %u", p, (unsigned)ktag(&c, p));
        CHECK(c.ott_rounds == 6 && c.ott_tracing == 1 && c.ott_stopped_at == 0,
              "ties: rounds %zu (want 6), tracing %d, stopped_at %zu", c.ott_rounds,
              c.ott_tracing, c.ott_stopped_at);
        kvq_cache_free(&c);
    }

    /* (b) strictly falling norms: every new group's last k tokens beat the
       whole pool, so from round 2 on each round sends k losers to aux.
       Round j is held iff (j-1) k <= aux. With m = floor(aux / k):
         aux % k == 0 (fills exactly): rounds m+1, stop right after round
                       m+1, stopped_at = R + (m+1) G;
         otherwise:    rounds m+1, round m+2 not held, stopped_at =
                       R + (m+2) G.
       Either way aux ends with m k tokens (the last k of groups 1..m), the
       pool with the last k of group m+1, and after the stop later groups
       are quantized whole (placeholders (m+1) k).                         */
    {
        static const size_t cfgs[][2] = { { 3, 6 }, { 3, 4 }, { 3, 5 }, { 1, 1 }, { 1, 2 },
                                          { 3, 3 }, { 1, 32 }, { 3, 32 } };
        size_t t;
        for (t = 0; t < sizeof cfgs / sizeof cfgs[0]; t++) {
            size_t k = cfgs[t][0], aux = cfgs[t][1], m = aux / k;
            size_t exact = aux % k == 0, stop_round = exact ? m + 1 : m + 2;
            size_t T = R + (stop_round + 2) * G + 3;
            kvq_config cfg = ott_cfg(D, 4, G, R, k, aux, t % 2 ? KVQ_OTT_MEAN_ALL : KVQ_OTT_MEAN_REST);
            size_t bad_pos = T;
            if (T > 400) continue;
            gen_kv(&r, 2, T, D, K, V);
            run_ott(&cfg, K, V, T, &c);
            CHECK(c.ott_rounds == m + 1 && c.ott_tracing == 0 &&
                  c.ott_stopped_at == R + stop_round * G,
                  "falling norms k=%zu aux=%zu: rounds %zu (want %zu), stopped_at %zu (want %zu)",
                  k, aux, c.ott_rounds, m + 1, c.ott_stopped_at, R + stop_round * G);
            for (p = 0; p < T && bad_pos == T; p++) {
                size_t grp = p / G + 1, last_k = p % G >= G - k;   /* group (1-based) */
                uint32_t want = p >= (T - R) / G * G   ? TAG_ROWS(KVQ_ROWS_WINDOW)
                              : grp <= m && last_k      ? TAG_ROWS(KVQ_ROWS_AUX)
                              : grp == m + 1 && last_k  ? TAG_ROWS(KVQ_ROWS_OUTLIER)
                                                        : TAG_QUANT;
                if (ktag(&c, p) != want || KVQ_LOC_TAG(c.v.loc[p]) != want) bad_pos = p;
            }
            CHECK(bad_pos == T, "falling norms k=%zu aux=%zu: position %zu in region %u",
                  k, aux, bad_pos, bad_pos < T ? (unsigned)ktag(&c, bad_pos) : 0u);
            kvq_cache_census(&c, &cs);
            CHECK(cs.rows[0][KVQ_ROWS_AUX] == m * k && cs.placeholders[1] == (m + 1) * k,
                  "falling norms k=%zu aux=%zu: aux %zu (want %zu), placeholders %zu",
                  k, aux, cs.rows[0][KVQ_ROWS_AUX], m * k, cs.placeholders[1]);
            kvq_cache_free(&c);
        }
    }

    /* (c) one planted token: random keys, position 3G+2 scaled by 1e-3 so
       its L1 norm is below every other token's; with k = 1 it wins its
       round and every later one, so it ends in the pool and reads back its
       exact full-precision K and V. The token with the smallest norm
       among groups 1..3 was the pool's member before and is now in aux.   */
    {
        size_t T = R + 7 * G, planted = 3 * G + 2, best = 0;
        kvq_config cfg = ott_cfg(D, 2, G, R, 1, 32, KVQ_OTT_MEAN_REST);
        float row[64];
        cfg.fp_bits = 32;
        gen_kv(&r, 0, T, D, K, V);
        for (j = 0; j < D; j++) K[planted * D + j] = rnorm(&r) * 1e-3f;
        for (p = 1; p < 3 * G; p++)
            if (l1_row(K + p * D, D) < l1_row(K + best * D, D)) best = p;
        run_ott(&cfg, K, V, T, &c);
        CHECK(ktag(&c, planted) == TAG_ROWS(KVQ_ROWS_OUTLIER), "planted token in region %u",
              (unsigned)ktag(&c, planted));
        CHECK(ktag(&c, best) == TAG_ROWS(KVQ_ROWS_AUX), "pre-plant minimum %zu in region %u",
              best, (unsigned)ktag(&c, best));
        kvq_cache_read(&c, 0, planted, row);
        CHECK(!memcmp(row, K + planted * D, D * sizeof(float)), "planted key not exact");
        kvq_cache_read(&c, 1, planted, row);
        CHECK(!memcmp(row, V + planted * D, D * sizeof(float)), "planted value not exact");
        kvq_cache_free(&c);
    }

    /* (d) k = 0 in layers 0 and 1 (OTT Sec. 4.4), k = 3 from layer 2: with
       k = 0 every group is quantized whole (no pool, no aux, no round, no
       placeholder) and tracing is off from the start.                    */
    {
        int layer;
        for (layer = 0; layer < 4; layer++) {
            kvq_config cfg = kvq_config_ott(D, 2, layer);
            size_t want_k = layer < 2 ? 0 : 3, T = 2 * 128 + 32 + 7;
            float *K2 = falloc(T * D), *V2 = falloc(T * D);
            CHECK(cfg.ott_k == want_k && cfg.ott_aux == 32 && cfg.group == 128 && cfg.residual == 32,
                  "kvq_config_ott layer %d: k=%zu aux=%zu G=%zu R=%zu", layer, cfg.ott_k,
                  cfg.ott_aux, cfg.group, cfg.residual);
            gen_kv(&r, 0, T, D, K2, V2);
            run_ott(&cfg, K2, V2, T, &c);
            kvq_cache_census(&c, &cs);
            if (want_k == 0)
                CHECK(c.ott_tracing == 0 && c.ott_rounds == 0 && c.ott_stopped_at == 0 &&
                      cs.placeholders[0] == 0 && cs.rows[0][KVQ_ROWS_OUTLIER] == 0 &&
                      cs.quantized[0] == 256 && cs.quantized[1] == 256,
                      "k=0 layer %d: tracing %d rounds %zu quantized %zu/%zu", layer,
                      c.ott_tracing, c.ott_rounds, cs.quantized[0], cs.quantized[1]);
            else
                CHECK(c.ott_rounds == 2 && cs.rows[0][KVQ_ROWS_OUTLIER] == 3 &&
                      cs.placeholders[0] + cs.quantized[0] == 256,
                      "k=3 layer %d: rounds %zu pool %zu", layer, c.ott_rounds,
                      cs.rows[0][KVQ_ROWS_OUTLIER]);
            kvq_cache_free(&c);
            free(K2); free(V2);
        }
    }
    free(K); free(V);
}

/* ======================================================================== */
/* 3. PERMUTATION INVARIANCE of the competition (Appendix E scores a token by
   sum_d |k_d|, a symmetric function of its channels; the pool is a set).
   (a) Channels: permuting the channels of every K and V row with one
       permutation leaves every score unchanged when the sums are exact
       (kind 3: multiples of 1/4), so every position lands in the same
       region and the counters agree. Full-precision rows come back
       permuted; per-channel keys quantize each channel alone, so even the
       quantized keys come back permuted exactly.
   (b) Tokens inside a quantization group: groups are the fixed blocks
       [jG, (j+1)G) (the window is FIFO), and the competition compares
       scores, so shuffling tokens inside each block (random keys: no ties)
       moves each token's region with it; the mean and the per-channel
       ranges see the same set, but the fp32 sum order changes, so only
       full-precision rows are compared.                                  */
/* ======================================================================== */
static void permute_rows(const float *X, size_t T, size_t D, const size_t *perm_ch,
                         const size_t *perm_tok, float *Y)
{
    size_t p, d;
    for (p = 0; p < T; p++)
        for (d = 0; d < D; d++)
            Y[perm_tok[p] * D + perm_ch[d]] = X[p * D + d];
}
static void shuffle(rng *r, size_t *v, size_t n)
{
    size_t i;
    for (i = n; i > 1; i--) {
        size_t j = rbelow(r, i), t = v[i - 1];
        v[i - 1] = v[j]; v[j] = t;
    }
}

static void test_ott_permutation(void)
{
    rng r = { 0x9E12ull };
    int cases = COUNT(60, 24), i, bad_regions = 0, bad_rows = 0;
    for (i = 0; i < cases; i++) {
        size_t D = i % 2 ? 16 : 8, G = 8, R = 4, T = R + G * (3 + rbelow(&r, 6)) + rbelow(&r, G);
        size_t k = 1 + rbelow(&r, 3), aux = 1 + rbelow(&r, 8), p, d, b;
        int by_tokens = i % 3 == 2;
        kvq_config cfg = ott_cfg(D, 2, G, R, k, aux, KVQ_OTT_MEAN_REST);
        float *K = falloc(T * D), *V = falloc(T * D);
        float *K2 = falloc(T * D), *V2 = falloc(T * D);
        size_t *pc = (size_t *)malloc(D * sizeof(size_t)), *pt = (size_t *)malloc(T * sizeof(size_t));
        float *ra, *rb;
        kvq_cache a, c2;
        cfg.fp_bits = 32;
        for (d = 0; d < D; d++) pc[d] = d;
        for (p = 0; p < T; p++) pt[p] = p;
        if (by_tokens)
            for (b = 0; b < T; b += G) shuffle(&r, pt + b, T - b < G ? T - b : G);
        else
            shuffle(&r, pc, D);
        gen_kv(&r, by_tokens ? 0 : 3, T, D, K, V);
        permute_rows(K, T, D, pc, pt, K2);
        permute_rows(V, T, D, pc, pt, V2);
        run_ott(&cfg, K, V, T, &a);
        run_ott(&cfg, K2, V2, T, &c2);
        CHECK(a.ott_rounds == c2.ott_rounds && a.ott_stopped_at == c2.ott_stopped_at,
              "permutation case %d: rounds %zu/%zu stopped %zu/%zu", i, a.ott_rounds,
              c2.ott_rounds, a.ott_stopped_at, c2.ott_stopped_at);
        ra = read_all(&a);
        rb = read_all(&c2);
        for (p = 0; p < T; p++) {
            int s;
            if (ktag(&a, p) != ktag(&c2, pt[p]) ||
                KVQ_LOC_TAG(a.v.loc[p]) != KVQ_LOC_TAG(c2.v.loc[pt[p]])) { bad_regions++; break; }
            for (s = 0; s < 2; s++) {
                /* rows that must match exactly: full precision, and in (a)
                   the quantized ones too (per-channel keys, and per-token
                   values whose one group spans all D channels)            */
                int exact = KVQ_LOC_TAG((s ? a.v.loc : a.k.loc)[p]) != TAG_QUANT || !by_tokens;
                for (d = 0; d < D && exact; d++)
                    if (ra[(s * T + p) * D + d] != rb[(s * T + pt[p]) * D + pc[d]]) {
                        bad_rows++;
                        break;
                    }
            }
        }
        free(ra); free(rb);
        kvq_cache_free(&a); kvq_cache_free(&c2);
        free(K); free(V); free(K2); free(V2); free(pc); free(pt);
    }
    CHECK(bad_regions == 0, "permutation: %d cases moved a token to another region", bad_regions);
    CHECK(bad_rows == 0, "permutation: %d rows differ after un-permuting", bad_rows);
}

/* ======================================================================== */
/* 4. The LogQuant simulator (LogQuant Sec. 2.5, Algorithm 1; kvq.h 7.2),
   per side:
     pos < sinks          -> the sink region, forever
     else, if |A| >= 3W:  A <- A[0:2W:2] + A[2W:3W]; the dropped odd
                          offsets of A[0:2W] go, in order, to the stage;
                          while the stage holds a unit (tpu tokens), its
                          oldest tpu tokens are quantized as one unit
     then                 A <- A + [pos]                                   */
/* ======================================================================== */
typedef struct {
    size_t *A, an;     /* (3W + 1) kept list, oldest first                 */
    size_t *st, sn;    /* (tpu + W) stage, oldest first                    */
} lq_side;
typedef struct {
    kvq_config cfg;
    expect e;
    lq_side s[2];
    float *unit, *deq;  /* (tpu, D) scratch                                */
} lq_sim;

static void lq_sim_init(lq_sim *S, const kvq_config *cfg, size_t cap)
{
    size_t W = cfg->lq_window, s, most = 1;
    memset(S, 0, sizeof *S);
    S->cfg = *cfg;
    expect_init(&S->e, cfg->head_dim, cap);
    for (s = 0; s < 2; s++) {
        size_t tpu = side_of(cfg, (int)s).tpu;
        if (tpu > most) most = tpu;
        S->s[s].A = (size_t *)calloc(3 * W + 1, sizeof(size_t));
        S->s[s].st = (size_t *)calloc(tpu + W, sizeof(size_t));
    }
    S->unit = (float *)calloc(most * cfg->head_dim, sizeof(float));
    S->deq = (float *)calloc(most * cfg->head_dim, sizeof(float));
}
static void lq_sim_free(lq_sim *S)
{
    int s;
    expect_free(&S->e);
    for (s = 0; s < 2; s++) { free(S->s[s].A); free(S->s[s].st); }
    free(S->unit); free(S->deq);
}

static void lq_sim_side(lq_sim *S, int s, size_t p)
{
    lq_side *q = &S->s[s];
    sidecfg sc = side_of(&S->cfg, s);
    size_t W = S->cfg.lq_window, D = S->cfg.head_dim, o, n = 0, i;
    if (p < S->cfg.lq_sinks) { expect_rows(&S->e, s, p, KVQ_ROWS_SINK); return; }
    if (q->an >= 3 * W) {
        for (o = 0; o < 3 * W; o++) {
            if (o < 2 * W && (o & 1)) {                  /* dropped */
                q->st[q->sn++] = q->A[o];
                expect_rows(&S->e, s, q->A[o], KVQ_ROWS_STAGE);
            } else {
                q->A[n++] = q->A[o];
            }
        }
        q->an = n;
        while (q->sn >= sc.tpu) {                        /* one unit leaves */
            for (i = 0; i < sc.tpu; i++)
                memcpy(S->unit + i * D, S->e.X[s] + q->st[i] * D, D * sizeof(float));
            ref_unit(S->unit, D, sc, S->cfg.zero_mode, S->deq);
            for (i = 0; i < sc.tpu; i++) expect_quant(&S->e, s, q->st[i], S->deq + i * D);
            memmove(q->st, q->st + sc.tpu, (q->sn - sc.tpu) * sizeof(size_t));
            q->sn -= sc.tpu;
        }
    }
    q->A[q->an++] = p;
    expect_rows(&S->e, s, p, KVQ_ROWS_WINDOW);
}
static void lq_sim_append(lq_sim *S, const float *k, const float *v)
{
    size_t p = expect_push(&S->e, k, v, S->cfg.fp_bits);
    lq_sim_side(S, 0, p);
    lq_sim_side(S, 1, p);
}
static void lq_app(void *S, const float *k, const float *v) { lq_sim_append((lq_sim *)S, k, v); }
static int lq_cmp(const kvq_cache *c, const void *S, char *m, size_t l)
{
    return cmp_expect(c, &((const lq_sim *)S)->e, m, l);
}

/* Closed forms from Algorithm 1 alone, read off the census: with m = n -
   sinks tokens in A's stream, |A| = m while m <= 3W; afterwards the first
   drop happens at m = 3W + 1 and one more every W tokens, each leaving 2W
   and then adding one, so |A| = 2W + 1 + (m - 3W - 1) mod W, in (2W, 3W].
   Dropped = m - |A|; the stage holds dropped mod tpu (whole units leave),
   quantized = the rest. A[0] (position `sinks`) is never dropped, and the
   newest token is always in A. Sinks = min(n, sinks). Hence the budget:
   full precision <= 3W + sinks + tpu - 1.                                */
static int lq_invariants(kvq_cache *c, char *msg, size_t len)
{
    size_t W = c->cfg.lq_window, sinks = c->cfg.lq_sinks, n = c->n_pos;
    size_t m = n > sinks ? n - sinks : 0, a = m <= 3 * W ? m : 2 * W + 1 + (m - 3 * W - 1) % W;
    kvq_census cs;
    int s;
    if (kvq_cache_check(c) != KVQ_OK) { snprintf(msg, len, "check: %s", kvq_why()); return 0; }
    kvq_cache_census(c, &cs);
    for (s = 0; s < 2; s++) {
        size_t tpu = side_of(&c->cfg, s).tpu, dropped = m - a;
        const uint32_t *loc = s ? c->v.loc : c->k.loc;
        if (cs.rows[s][KVQ_ROWS_WINDOW] != a || cs.rows[s][KVQ_ROWS_STAGE] != dropped % tpu ||
            cs.quantized[s] != dropped - dropped % tpu ||
            cs.rows[s][KVQ_ROWS_SINK] != (n < sinks ? n : sinks) || cs.absent[s] ||
            cs.rows[s][KVQ_ROWS_OUTLIER] || cs.rows[s][KVQ_ROWS_AUX] || cs.placeholders[s] ||
            /* the paper's budget: at most 3W kept, plus sinks and a partial unit */
            n - cs.quantized[s] > 3 * W + sinks + tpu - 1) {
            snprintf(msg, len, "side %d after %zu tokens (W=%zu sinks=%zu tpu=%zu): A %zu (want "
                     "%zu), stage %zu, quantized %zu, sinks %zu", s, n, W, sinks, tpu,
                     cs.rows[s][KVQ_ROWS_WINDOW], a, cs.rows[s][KVQ_ROWS_STAGE],
                     cs.quantized[s], cs.rows[s][KVQ_ROWS_SINK]);
            return 0;
        }
        if (m > 0 && (KVQ_LOC_TAG(loc[sinks]) != TAG_ROWS(KVQ_ROWS_WINDOW) ||
                      KVQ_LOC_TAG(loc[n - 1]) != TAG_ROWS(KVQ_ROWS_WINDOW))) {
            snprintf(msg, len, "side %d: A[0] (pos %zu) or the newest token left A", s, sinks);
            return 0;
        }
    }
    return 1;
}

/* LogQuant vs the simulator: W in 1..8, sinks 0 or 1..5, keys per-channel
   (G in {2, 4, 8, 16, 64}) or per-token, values per-token or per-channel,
   B in {1, 2, 4, 8}, fp16/fp32 rows, T up to ~30 W. Two caches per case
   (appends only; random prefill chunks) compared after every operation,
   then with each other bit for bit (Sec. 7.2: prefill = T appends).       */
static void test_logquant_random(void)
{
    static const size_t Ds[] = { 8, 16, 64 }, Gs[] = { 2, 4, 8, 16, 64 };
    static const int bits[] = { 1, 2, 4, 8 };
    rng r = { 0x106ull };
    int cases = COUNT(300, 100), i, bad = 0, sunk = 0;
    for (i = 0; i < cases; i++) {
        size_t D = pick(&r, Ds, 3), W = 1 + rbelow(&r, 8);
        kvq_config cfg = kvq_config_logquant(D, bits[rbelow(&r, 4)], W);
        size_t sinks = rbelow(&r, 2) ? 0 : 1 + rbelow(&r, 5);
        size_t T = 1 + rbelow(&r, 30 * W + sinks + 8);
        float *K = falloc(T * D), *V = falloc(T * D);
        kvq_cache a, b;
        lq_sim Sa, Sb;
        char label[160];
        cfg.lq_sinks = sinks;
        cfg.group = pick(&r, Gs, 5);
        cfg.value_group = D < 16 ? D : 16;
        cfg.fp_bits = rbelow(&r, 2) ? 16 : 32;
        cfg.zero_mode = rbelow(&r, 4) ? KVQ_ZERO_FLOAT : KVQ_ZERO_INT;
        if (D % cfg.group == 0 && rbelow(&r, 3) == 0) cfg.key_axis = KVQ_PER_TOKEN;
        if (rbelow(&r, 4) == 0) {      /* per-channel values: any unit size */
            cfg.value_axis = KVQ_PER_CHANNEL;
            cfg.value_group = 1 + rbelow(&r, 8);
        }
        snprintf(label, sizeof label, "LogQuant case %d (D=%zu W=%zu sinks=%zu G=%zu/%zu axes %d/%d "
                 "B=%d fp%d T=%zu)", i, D, W, sinks, cfg.group, cfg.value_group,
                 (int)cfg.key_axis, (int)cfg.value_axis, cfg.key_bits, cfg.fp_bits, T);
        gen_kv(&r, 0, T, D, K, V);
        CHECK(kvq_cache_init(&a, &cfg) == KVQ_OK && kvq_cache_init(&b, &cfg) == KVQ_OK,
              "%s: init: %s", label, kvq_why());
        lq_sim_init(&Sa, &cfg, T);
        lq_sim_init(&Sb, &cfg, T);
        bad += drive(&a, &Sa, lq_app, lq_cmp, lq_invariants, K, V, T, D, &r, 1, label);
        bad += drive(&b, &Sb, lq_app, lq_cmp, lq_invariants, K, V, T, D, &r, (int)(4 * W + 3), label);
        CHECK(same_cache(&a, &b), "%s: prefill chunks and appends differ", label);
        sunk += sinks > 0 && T > sinks + 3 * W;
        if (i % 4 == 0) check_attention(&a, &r, label);
        lq_sim_free(&Sa); lq_sim_free(&Sb);
        kvq_cache_free(&a); kvq_cache_free(&b);
        free(K); free(V);
    }
    CHECK(sunk > cases / 8, "only %d LogQuant cases with sinks reached a drop", sunk);
    printf("  LogQuant random: %d cases (%d with sinks past warm-up), %d disagreed\n",
           cases, sunk, bad);
}

/* One LogQuant trace written out by hand (W = 2, no sinks, per-token
   units so every drop is quantized at once): Algorithm 1 keeps
     after 6 tokens  A = 0 1 2 3 4 5                     (|A| = 3W)
     token 6         A = 0 2 4 5 6        (1, 3 dropped)
     token 7         A = 0 2 4 5 6 7
     token 8         A = 0 4 6 7 8        (2, 5 dropped)
     token 9         A = 0 4 6 7 8 9
     token 10        A = 0 6 8 9 10       (4, 7 dropped)
   so after 11 tokens the full-precision set is {0, 6, 8, 9, 10}.          */
static void test_logquant_by_hand(void)
{
    static const size_t kept[] = { 0, 6, 8, 9, 10 };
    kvq_config cfg = kvq_config_logquant(8, 2, 2);
    kvq_cache c;
    float x[8];
    size_t p, i, n_fp = 0, bad = 11;
    cfg.key_axis = KVQ_PER_TOKEN;
    cfg.group = 8;
    CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "init: %s", kvq_why());
    for (p = 0; p < 11; p++) {
        for (i = 0; i < 8; i++) x[i] = (float)(p + i);
        kvq_cache_append(&c, x, x);
    }
    for (p = 0; p < 11; p++) {
        int want = 0;
        for (i = 0; i < 5; i++) want |= kept[i] == p;
        n_fp += want;
        if ((KVQ_LOC_TAG(c.k.loc[p]) == TAG_ROWS(KVQ_ROWS_WINDOW)) != want && bad == 11) bad = p;
    }
    CHECK(bad == 11 && n_fp == 5, "LogQuant W=2 trace: position %zu in the wrong region", bad);
    kvq_cache_free(&c);
}

/* ======================================================================== */
/* 7. BAD CONFIGS (kvq.h Sec. 7.1/7.2 and kvq_config_validate): each case
   is rejected by kvq_config_validate with the expected status and a
   reason, and kvq_cache_init fails the same way, writes a reason into
   kvq_why() and leaves no block allocated. Boundary cases just inside the
   limits are accepted, and a cache built from them frees everything.     */
/* ======================================================================== */
static void test_bad_configs(void)
{
    typedef struct { const char *name; kvq_config cfg; kvq_status want; } cse;
    cse bad[24], good[8];
    int nb = 0, ng = 0, i;
    kvq_cache c;
#define OTT(nm, expr, st) do { kvq_config *x = &bad[nb].cfg; *x = ott_cfg(64, 2, 16, 8, 3, 4, \
        KVQ_OTT_MEAN_REST); expr; bad[nb].name = nm; bad[nb].want = st; nb++; } while (0)
#define LQ(nm, expr, st) do { kvq_config *x = &bad[nb].cfg; *x = kvq_config_logquant(64, 2, 4); \
        expr; bad[nb].name = nm; bad[nb].want = st; nb++; } while (0)
#define GOOD(nm, make, expr) do { kvq_config *x = &good[ng].cfg; *x = make; expr; \
        good[ng].name = nm; ng++; } while (0)
    OTT("OTT k = G", x->ott_k = 16, KVQ_ERR_CONFIG);
    OTT("OTT k > G", x->ott_k = 21, KVQ_ERR_CONFIG);
    OTT("OTT k = 257 < G = 512", (x->group = 512, x->ott_k = 257), KVQ_ERR_CONFIG);
    OTT("OTT aux = 0 with k = 3", x->ott_aux = 0, KVQ_ERR_CONFIG);
    OTT("OTT aux = 65537", x->ott_aux = 65537, KVQ_ERR_CONFIG);
    OTT("OTT mean mode 2", x->ott_mean = (kvq_ott_mean)2, KVQ_ERR_CONFIG);
    OTT("OTT mean mode -1", x->ott_mean = (kvq_ott_mean)-1, KVQ_ERR_CONFIG);
    OTT("OTT R = 0", x->residual = 0, KVQ_ERR_SIZE);
    OTT("OTT G = 0", x->group = 0, KVQ_ERR_SIZE);
    OTT("OTT bits 5", x->key_bits = 5, KVQ_ERR_BITS);
    OTT("OTT value group 24 does not divide D = 64", x->value_group = 24, KVQ_ERR_GROUP);
    OTT("OTT per-token keys, G = 48 does not divide D = 64",
        (x->key_axis = KVQ_PER_TOKEN, x->group = 48), KVQ_ERR_GROUP);
    /* OTT quantizes G value rows per round (Sec. 7.1 cadence): a
       per-channel value unit of 32 tokens cannot be cut from 16 rows.     */
    OTT("OTT per-channel values, group 32 does not divide G = 16",
        (x->value_axis = KVQ_PER_CHANNEL, x->value_group = 32), KVQ_ERR_GROUP);
    LQ("LogQuant W = 0 (residual kept)", (x->lq_window = 0, x->residual = 12), KVQ_ERR_CONFIG);
    LQ("LogQuant W = 65537", (x->lq_window = 65537, x->residual = 12), KVQ_ERR_CONFIG);
    LQ("LogQuant sinks = 65537", x->lq_sinks = 65537, KVQ_ERR_CONFIG);
    LQ("LogQuant bits 5", x->value_bits = 5, KVQ_ERR_BITS);
    LQ("LogQuant value group 48 does not divide D = 64", x->value_group = 48, KVQ_ERR_GROUP);
    LQ("LogQuant per-token keys, G = 48", (x->key_axis = KVQ_PER_TOKEN, x->group = 48),
       KVQ_ERR_GROUP);
    /* kvq_config_logquant(D, B, 0): rejected; its residual (3W = 0) is
       what trips first, so only "not OK" is asserted                      */
    bad[nb].name = "kvq_config_logquant(64, 2, 0)";
    bad[nb].cfg = kvq_config_logquant(64, 2, 0);
    bad[nb].want = KVQ_STATUS_COUNT;     /* any failure                    */
    nb++;
    GOOD("OTT k = G - 1", ott_cfg(16, 2, 8, 4, 7, 1, KVQ_OTT_MEAN_ALL), (void)x);
    GOOD("OTT k = 256 < G = 512", ott_cfg(64, 2, 512, 8, 256, 65536, KVQ_OTT_MEAN_REST), (void)x);
    GOOD("OTT k = 0, aux = 0", ott_cfg(16, 2, 8, 4, 0, 0, KVQ_OTT_MEAN_REST), (void)x);
    GOOD("kvq_config_ott layer 0", kvq_config_ott(128, 2, 0), (void)x);
    GOOD("kvq_config_ott layer 5", kvq_config_ott(64, 4, 5), (void)x);
    GOOD("LogQuant W = 1, sinks 65536", kvq_config_logquant(64, 2, 1), x->lq_sinks = 65536);
    GOOD("OTT per-channel values, group 8 divides G = 16",
         ott_cfg(64, 2, 16, 8, 3, 4, KVQ_OTT_MEAN_REST),
         (x->value_axis = KVQ_PER_CHANNEL, x->value_group = 8));
#undef OTT
#undef LQ
#undef GOOD
    for (i = 0; i < nb; i++) {
        long live = ta_live;
        kvq_status st;
        int want_any = bad[i].want == KVQ_STATUS_COUNT;
        why_clear();
        st = kvq_config_validate(&bad[i].cfg);
        CHECK(want_any ? st != KVQ_OK : st == bad[i].want, "validate %s: %d (%s), want %d",
              bad[i].name, (int)st, kvq_status_str(st), (int)bad[i].want);
        CHECK(st == KVQ_OK || kvq_why()[0] != '\0', "validate %s: no reason", bad[i].name);
        memset(&c, 0xA5, sizeof c);
        why_clear();
        st = kvq_cache_init(&c, &bad[i].cfg);
        CHECK(want_any ? st != KVQ_OK : st == bad[i].want, "init %s: %d, want %d",
              bad[i].name, (int)st, (int)bad[i].want);
        if (st == KVQ_OK) { kvq_cache_free(&c); continue; }   /* wrongly accepted */
        CHECK(kvq_why()[0] != '\0', "init %s: no reason in kvq_why()", bad[i].name);
        CHECK(ta_live == live, "init %s: %ld blocks left allocated", bad[i].name,
              ta_live - live);
    }
    for (i = 0; i < ng; i++) {
        long live = ta_live;
        kvq_status st = kvq_config_validate(&good[i].cfg);
        CHECK(st == KVQ_OK, "validate %s: %s (%s)", good[i].name, kvq_status_str(st), kvq_why());
        CHECK(kvq_cache_init(&c, &good[i].cfg) == KVQ_OK, "init %s: %s", good[i].name, kvq_why());
        kvq_cache_free(&c);
        CHECK(ta_live == live, "%s: %ld blocks left after free", good[i].name, ta_live - live);
    }
}

/* ======================================================================== */
/* 8. ALLOCATOR FAILURE (kvq.h Sec. 2: "on failure it writes nothing ... and
   leaves any cache exactly as it was"). kvq_cache_init of an OTT and a
   LogQuant-with-sinks config (each allocates fixed pools / stage / sinks)
   is failed at attempt 0, 1, 2, ... until it succeeds: each failure is
   KVQ_ERR_NOMEM with a reason and leaves no block. Then a stream of
   prefills and appends, each failed at every attempt it makes, must leave
   the cache bit-identical to a twin that never saw the failure, and the
   retried operation must succeed.                                         */
/* ======================================================================== */
static void test_alloc_failure(void)
{
    rng r = { 0xFA11ull };
    kvq_config cfgs[2];
    int ci;
    long injected = 0;
    cfgs[0] = ott_cfg(16, 2, 8, 4, 3, 4, KVQ_OTT_MEAN_REST);
    cfgs[1] = kvq_config_logquant(16, 2, 3);
    cfgs[1].group = 4;
    cfgs[1].lq_sinks = 2;
    for (ci = 0; ci < 2; ci++) {
        const kvq_config *cfg = &cfgs[ci];
        size_t D = cfg->head_dim, T = COUNT(120, 60), p = 0;
        float *K = falloc(T * D), *V = falloc(T * D);
        kvq_cache c, twin;
        long at;
        kvq_status st = KVQ_ERR_NOMEM;
        gen_kv(&r, 0, T, D, K, V);
        for (at = 0; st != KVQ_OK && at < 64; at++) {
            long live = ta_live;
            memset(&c, 0xA5, sizeof c);
            why_clear();
            ta_calls = 0;
            ta_fail_at = at;
            st = kvq_cache_init(&c, cfg);
            ta_fail_at = -1;
            if (st == KVQ_OK) break;
            injected++;
            CHECK(st == KVQ_ERR_NOMEM && kvq_why()[0] && ta_live == live,
                  "config %d init failing at attempt %ld: %s, %ld blocks left", ci, at,
                  kvq_status_str(st), ta_live - live);
        }
        CHECK(st == KVQ_OK && at > 2, "config %d: init never succeeded or made %ld allocations",
              ci, at);
        CHECK(kvq_cache_init(&twin, cfg) == KVQ_OK, "config %d: twin init", ci);
        while (p < T) {
            size_t n = rbelow(&r, 3) ? 1 : 1 + rbelow(&r, 20);
            if (n > T - p) n = T - p;
            for (at = 0;; at++) {
                ta_calls = 0;
                ta_fail_at = at;
                st = n == 1 ? kvq_cache_append(&c, K + p * D, V + p * D)
                            : kvq_cache_prefill(&c, K + p * D, V + p * D, n);
                ta_fail_at = -1;
                if (st == KVQ_OK) break;
                injected++;
                CHECK(st == KVQ_ERR_NOMEM && same_cache(&c, &twin),
                      "config %d: %zu tokens at %zu failing at attempt %ld: %s or cache changed",
                      ci, n, p, at, kvq_status_str(st));
                if (st != KVQ_ERR_NOMEM) break;
            }
            CHECK(kvq_cache_prefill(&twin, K + p * D, V + p * D, n) == KVQ_OK, "twin prefill");
            p += n;
            CHECK(kvq_cache_check(&c) == KVQ_OK && same_cache(&c, &twin),
                  "config %d: after %zu tokens the retried cache differs from its twin", ci, p);
        }
        kvq_cache_free(&c);
        kvq_cache_free(&twin);
        free(K); free(V);
    }
    CHECK(injected > 20, "only %ld allocation failures injected", injected);
    printf("  allocator: %ld failures injected into OTT / LogQuant caches\n", injected);
}

int main(void)
{
    test_ott_random();
    test_ott_by_hand();
    test_ott_permutation();
    test_logquant_random();
    test_logquant_by_hand();
    test_bad_configs();
    test_alloc_failure();
    CHECK(ref_failures == 0, "the reference quantizer failed %ld times", ref_failures);
    CHECK(ta_live == 0, "%ld blocks leaked", ta_live);
    return TEST_END("test_policies");
}
