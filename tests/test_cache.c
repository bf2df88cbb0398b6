/* tests/test_cache.c - the streaming cache (kvq.h Sec. 7-9) against
   independent expectations.

   Groups (each is a function below, with a comment that states the property
   and why the expectation does not come from the code under test):
     1. KIVI schedule vs a direct simulation of KIVI Algorithm 1
     2. HF QuantizedCache schedule, and hf_requantize 1 vs 0; HF's first
        token from an empty cache and after a prefill
     3. quantized content == the documented one-group quantizer
     4. attention: eager vs online, vs the double-precision oracle, B = 8
        error bound, probabilities, large logits, GQA batching
     5. byte accounting recomputed from the census and the config
     6. bad input leaves the cache (and every output) unchanged
     7. allocator failure at every allocation index

   Everything is seeded; no expected number was captured from running kvq.
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
/* small helpers: data, an fp16 rounding written from its definition        */
/* ------------------------------------------------------------------------ */
/* Data kinds: 0 N(0,1); 1 N(0,1) with 4 large channels (x8, offset 3), the
   key-outlier pattern KIVI Sec. 3 describes; 2 adversarial: constant runs,
   integer grid (exact ties), fp16-subnormal magnitudes, values at the
   KVQ_MAX_ABS_INPUT boundary.                                             */
static float gen_value(rng *r, int kind, size_t d)
{
    if (kind == 1) {
        float x = rnorm(r);
        if (d % 37 == 5) x = 8.0f * x + 3.0f;
        return x;
    }
    if (kind == 2) {
        switch (rbelow(r, 8)) {
        case 0: return 0.5f;                                   /* constant  */
        case 1: return (float)((int)rbelow(r, 9) - 4) * 0.25f;  /* ties      */
        case 2: return rnorm(r) * 3e-6f;                       /* subnormal */
        case 3: return rbelow(r, 64) == 0
                       ? (rbelow(r, 2) ? KVQ_MAX_ABS_INPUT : -KVQ_MAX_ABS_INPUT)
                       : 1.0f;
        default: return rnorm(r);
        }
    }
    return rnorm(r);
}
static float *gen_rows(rng *r, size_t T, size_t D, int kind)
{
    float *X = (float *)malloc((T * D + 1) * sizeof(float));
    size_t t, d;
    for (t = 0; t < T; t++)
        for (d = 0; d < D; d++) X[t * D + d] = gen_value(r, kind, d);
    return X;
}

/* IEEE binary16 round-to-nearest-even of a float, from the definition of
   the format (11 significant bits; quantum 2^-24 below 2^-14), using only
   frexp/ldexp/rint: independent of kvq_f32_to_f16's bit manipulation.     */
static float ref_f16(float x)
{
    float ax = fabsf(x);
    int e;
    if (ax >= 65520.0f) return x > 0 ? INFINITY : -INFINITY;
    if (ax < 6.103515625e-05f) return ldexpf(rintf(ldexpf(x, 24)), -24);
    (void)frexpf(x, &e);                   /* |x| in [2^(e-1), 2^e)        */
    return ldexpf(rintf(ldexpf(x, 11 - e)), e - 11);
}
static float fp_store(float x, int fp_bits) { return fp_bits == 32 ? x : ref_f16(x); }

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    size_t i;
    for (i = 0; i < n; i++) if (fabs((double)x[i]) > m) m = fabs((double)x[i]);
    return m;
}
static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;                  /* NaN propagates as "huge" */
    }
    return m;
}
static int all_finite(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) if (!(x[i] - x[i] == 0.0f)) return 0;
    return 1;
}

static size_t side_group(const kvq_config *cfg, int side)
{
    return side == 0 ? cfg->group : (cfg->value_group ? cfg->value_group : cfg->group);
}
static kvq_axis side_axis(const kvq_config *cfg, int side)
{
    return side == 0 ? cfg->key_axis : cfg->value_axis;
}
static int side_bits(const kvq_config *cfg, int side)
{
    return side == 0 ? cfg->key_bits : cfg->value_bits;
}
static size_t side_tpu(const kvq_config *cfg, int side)
{
    if (cfg->policy == KVQ_POLICY_FULL) return 1;
    return side_axis(cfg, side) == KVQ_PER_CHANNEL ? side_group(cfg, side) : 1;
}

/* ------------------------------------------------------------------------ */
/* The reference quantizer of one unit: tpu rows (tpu x D) -> their
   dequantized values, using only the documented one-group quantizer
   kvq_quantize_group and kvq_sz_affine (x' = c*a + b). Per-token: groups of
   G consecutive channels of each row. Per-channel: for each channel, the G
   values of the unit's G rows.                                             */
/* ------------------------------------------------------------------------ */
static int ref_quant_unit(const float *rows, size_t tpu, size_t D, size_t G,
                          int bits, kvq_axis axis, kvq_zero_mode mode,
                          float *out)
{
    uint8_t codes[512];
    kvq_sz sz;
    float a, b;
    size_t g, j, d;
    if (G > 512) return 0;
    if (axis == KVQ_PER_TOKEN) {
        for (g = 0; g < D / G; g++) {
            if (kvq_quantize_group(rows + g * G, G, 1, bits, mode, codes, &sz) != KVQ_OK)
                return 0;
            kvq_sz_affine(sz, mode, &a, &b);
            for (j = 0; j < G; j++) out[g * G + j] = (float)codes[j] * a + b;
        }
    } else {
        if (tpu != G) return 0;
        for (d = 0; d < D; d++) {
            if (kvq_quantize_group(rows + d, G, D, bits, mode, codes, &sz) != KVQ_OK)
                return 0;
            kvq_sz_affine(sz, mode, &a, &b);
            for (j = 0; j < G; j++) out[j * D + d] = (float)codes[j] * a + b;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* The schedule simulator: index lists only. Each side has a FIFO window of
   positions and a list of quantized positions in the order they were
   quantized. The rules are the papers' rules, written from their text:

   KIVI (Algorithm 1 + the timing of KIVI's public code):
     prefill T   keys quantize [0, T - T % R); values [0, T - R) if T > R.
     append      keys: if the residual already holds R, those R are
                 quantized first, then the new key joins (residual 1..R).
                 values: the new value joins; while the window holds more
                 than R, the oldest is quantized (window exactly R).
   HF QuantizedCache:
     prefill T   quantize the whole prompt (T - T % G on a per-channel side).
     append      if the residual holds R, quantize all of it, then append.
   FULL: nothing is ever quantized.                                         */
/* ------------------------------------------------------------------------ */
typedef struct {
    size_t *win;        /* window FIFO: positions win[head .. head + wn)   */
    size_t  head, wn;
    size_t *qorder;     /* quantization order -> position                  */
    size_t  nq;
    size_t *qidx;       /* position -> index in qorder, or (size_t)-1      */
} simside;

typedef struct {
    kvq_policy policy;
    size_t R, tpu[2], n, cap;
    simside s[2];
} sim;

static void sim_init(sim *S, const kvq_config *cfg, size_t cap)
{
    int i;
    memset(S, 0, sizeof *S);
    S->policy = cfg->policy;
    S->R = cfg->residual;
    S->cap = cap;
    for (i = 0; i < 2; i++) {
        S->tpu[i] = side_tpu(cfg, i);
        S->s[i].win = (size_t *)malloc((cap + 1) * sizeof(size_t));
        S->s[i].qorder = (size_t *)malloc((cap + 1) * sizeof(size_t));
        S->s[i].qidx = (size_t *)malloc((cap + 1) * sizeof(size_t));
    }
}
static void sim_free(sim *S)
{
    int i;
    for (i = 0; i < 2; i++) {
        free(S->s[i].win); free(S->s[i].qorder); free(S->s[i].qidx);
    }
}
static void sim_push(simside *s, size_t p)
{
    s->win[s->head + s->wn++] = p;
    s->qidx[p] = (size_t)-1;
}
static void sim_quant(simside *s, size_t m)
{
    while (m--) {
        size_t p = s->win[s->head++];
        s->wn--;
        s->qidx[p] = s->nq;
        s->qorder[s->nq++] = p;
    }
}
static void sim_prefill(sim *S, size_t T)
{
    size_t t, R = S->R;
    for (t = 0; t < T; t++) { sim_push(&S->s[0], S->n + t); sim_push(&S->s[1], S->n + t); }
    S->n += T;
    if (S->policy == KVQ_POLICY_KIVI) {
        sim_quant(&S->s[0], T - T % R);
        if (T > R) sim_quant(&S->s[1], T - R);
    } else if (S->policy == KVQ_POLICY_HF) {
        sim_quant(&S->s[0], T - T % S->tpu[0]);
        sim_quant(&S->s[1], T - T % S->tpu[1]);
    }
}
static void sim_append(sim *S)
{
    size_t R = S->R, p = S->n++;
    int i;
    if (S->policy == KVQ_POLICY_KIVI) {
        if (S->s[0].wn == R) sim_quant(&S->s[0], R);
        sim_push(&S->s[0], p);
        sim_push(&S->s[1], p);
        while (S->s[1].wn > R) sim_quant(&S->s[1], 1);
    } else if (S->policy == KVQ_POLICY_HF) {
        for (i = 0; i < 2; i++) {
            if (S->s[i].wn == R) sim_quant(&S->s[i], R);
            /* HF quantizes its first update: a token 0 that arrived by
               append (it is then still in the window) is quantized when
               token 1 arrives, on a side whose groups are one token       */
            else if (p == 1 && S->s[i].wn == 1 && S->tpu[i] == 1) sim_quant(&S->s[i], 1);
            sim_push(&S->s[i], p);
        }
    } else {
        sim_push(&S->s[0], p);
        sim_push(&S->s[1], p);
    }
}

/* The cache's regions vs the simulator: census counts, and per position the
   region tag in side->loc, the quantized slot (slots are filled in
   quantization order, one per token, no placeholders in these policies),
   and for window rows that the row names the position back.              */
static int cmp_sched(const kvq_cache *c, const sim *S, char *msg, size_t len)
{
    kvq_census cen;
    int i, r;
    size_t p;
    if (c->n_pos != S->n) { snprintf(msg, len, "n_pos %zu, sim %zu", c->n_pos, S->n); return 0; }
    if (kvq_cache_census(c, &cen) != KVQ_OK) { snprintf(msg, len, "census failed"); return 0; }
    for (i = 0; i < 2; i++) {
        const simside *s = &S->s[i];
        const kvq_side *sd = i ? &c->v : &c->k;
        if (cen.quantized[i] != s->nq || cen.rows[i][0] != s->wn || cen.absent[i] != 0 ||
            cen.placeholders[i] != 0) {
            snprintf(msg, len, "side %d census quantized %zu window %zu absent %zu "
                     "placeholders %zu; sim quantized %zu window %zu", i,
                     cen.quantized[i], cen.rows[i][0], cen.absent[i],
                     cen.placeholders[i], s->nq, s->wn);
            return 0;
        }
        for (r = 1; r < KVQ_ROW_REGIONS; r++)
            if (cen.rows[i][r] != 0) {
                snprintf(msg, len, "side %d rows[%d] holds %zu", i, r, cen.rows[i][r]);
                return 0;
            }
        for (p = 0; p < S->n; p++) {
            uint32_t l = sd->loc[p];
            size_t idx = KVQ_LOC_INDEX(l);
            if (s->qidx[p] != (size_t)-1) {
                if (KVQ_LOC_TAG(l) != KVQ_LOC_QUANT || idx != s->qidx[p]) {
                    snprintf(msg, len, "side %d pos %zu: tag %u slot %zu, sim quantized "
                             "slot %zu", i, p, (unsigned)KVQ_LOC_TAG(l), idx, s->qidx[p]);
                    return 0;
                }
            } else if (KVQ_LOC_TAG(l) != KVQ_LOC_ROWS0 ||
                       sd->rows[0].pos[idx] != (int32_t)p) {
                snprintf(msg, len, "side %d pos %zu: tag %u, sim says window", i, p,
                         (unsigned)KVQ_LOC_TAG(l));
                return 0;
            }
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Byte accounting recomputed from the census and the config (group 5):
     codes        = units * groups_per_unit * ceil(G*B/32) * 4
     scale_zero   = units * groups_per_unit * 4
     full prec.   = rows * D * fp_bits/8
   with units = quantized / tokens_per_unit, groups_per_unit = D/G
   (per-token) or D (per-channel).                                         */
/* ------------------------------------------------------------------------ */
static int cmp_bytes(const kvq_cache *c, const kvq_config *cfg, char *msg, size_t len)
{
    kvq_census cen;
    kvq_bytes by;
    size_t D = cfg->head_dim, payload = 0;
    int i, r;
    double bpe;
    if (kvq_cache_census(c, &cen) != KVQ_OK || kvq_cache_bytes(c, &by) != KVQ_OK) {
        snprintf(msg, len, "census/bytes failed");
        return 0;
    }
    for (i = 0; i < 2; i++) {
        size_t G = side_group(cfg, i), B = (size_t)side_bits(cfg, i), rows = 0;
        size_t tpu = side_tpu(cfg, i), units, gpu, wpg, codes = 0, szb = 0, fp;
        if (cfg->policy != KVQ_POLICY_FULL) {
            if (cen.quantized[i] % tpu) {
                snprintf(msg, len, "side %d: %zu quantized is not whole units of %zu",
                         i, cen.quantized[i], tpu);
                return 0;
            }
            units = cen.quantized[i] / tpu;
            gpu = side_axis(cfg, i) == KVQ_PER_CHANNEL ? D : D / G;
            wpg = (G * B + 31) / 32;
            codes = units * gpu * wpg * 4;
            szb = units * gpu * 4;
        }
        for (r = 0; r < KVQ_ROW_REGIONS; r++) rows += cen.rows[i][r];
        fp = rows * D * ((size_t)cfg->fp_bits / 8);
        if (by.codes[i] != codes || by.scale_zero[i] != szb || by.full_precision[i] != fp) {
            snprintf(msg, len, "side %d: codes %zu/%zu scale_zero %zu/%zu fp %zu/%zu "
                     "(got/expected)", i, by.codes[i], codes, by.scale_zero[i], szb,
                     by.full_precision[i], fp);
            return 0;
        }
        payload += codes + szb + fp;
    }
    if (by.payload != payload || by.tokens != c->n_pos) {
        snprintf(msg, len, "payload %zu expected %zu, tokens %zu n_pos %zu", by.payload,
                 payload, by.tokens, c->n_pos);
        return 0;
    }
    bpe = c->n_pos ? (double)payload * 8.0 / (2.0 * (double)c->n_pos * (double)D) : 0.0;
    if (fabs(by.bits_per_element - bpe) > 1e-12 * (bpe + 1.0)) {
        snprintf(msg, len, "bits_per_element %.17g expected %.17g", by.bits_per_element, bpe);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Content (group 3): every quantized position reads back as the reference
   quantizer applied to the unit it was quantized in (the fp16-rounded rows
   for fp_bits 16, the raw rows for fp_bits 32), and every window position
   as its stored row (fp16-rounded or exact). src[side] are the raw rows.  */
/* ------------------------------------------------------------------------ */
static int cmp_content(const kvq_cache *c, const kvq_config *cfg, const sim *S,
                       const float *const src[2], char *msg, size_t len)
{
    size_t D = cfg->head_dim, p, u, j, d;
    int i, ok = 1;
    float *got = (float *)malloc(D * sizeof(float));
    for (i = 0; i < 2 && ok; i++) {
        const simside *s = &S->s[i];
        size_t tpu = S->tpu[i], G = side_group(cfg, i);
        float *rows = (float *)malloc(tpu * D * sizeof(float));
        float *exp_ = (float *)malloc(tpu * D * sizeof(float));
        for (u = 0; ok && cfg->policy != KVQ_POLICY_FULL && u < s->nq / tpu; u++) {
            for (j = 0; j < tpu; j++)
                for (d = 0; d < D; d++)
                    rows[j * D + d] = fp_store(src[i][s->qorder[u * tpu + j] * D + d],
                                               cfg->fp_bits);
            if (!ref_quant_unit(rows, tpu, D, G, side_bits(cfg, i), side_axis(cfg, i),
                                cfg->zero_mode, exp_)) {
                snprintf(msg, len, "side %d unit %zu: reference quantizer failed", i, u);
                ok = 0;
                break;
            }
            for (j = 0; j < tpu && ok; j++) {
                p = s->qorder[u * tpu + j];
                if (kvq_cache_read(c, i, p, got) != KVQ_OK) {
                    snprintf(msg, len, "side %d pos %zu: read failed", i, p);
                    ok = 0;
                    break;
                }
                for (d = 0; d < D; d++)
                    if (!(got[d] == exp_[j * D + d])) {
                        snprintf(msg, len, "side %d quantized pos %zu ch %zu: read %.9g, "
                                 "reference %.9g", i, p, d, got[d], exp_[j * D + d]);
                        ok = 0;
                        break;
                    }
            }
        }
        for (j = 0; j < s->wn && ok; j++) {
            p = s->win[s->head + j];
            if (kvq_cache_read(c, i, p, got) != KVQ_OK) {
                snprintf(msg, len, "side %d pos %zu: read failed", i, p);
                ok = 0;
                break;
            }
            for (d = 0; d < D; d++)
                if (!(got[d] == fp_store(src[i][p * D + d], cfg->fp_bits))) {
                    snprintf(msg, len, "side %d window pos %zu ch %zu: read %.9g, stored "
                             "%.9g (fp%d)", i, p, d, got[d],
                             fp_store(src[i][p * D + d], cfg->fp_bits), cfg->fp_bits);
                    ok = 0;
                    break;
                }
        }
        free(rows);
        free(exp_);
    }
    free(got);
    return ok;
}

/* ======================================================================== */
/* 1 + 3 + 5. KIVI schedule vs Algorithm 1, content, bytes.
   Property: after every prefill/append, the cache's regions (census counts
   AND per-position region and slot) equal the index-list simulator above,
   kvq_cache_check is OK, and the byte accounting equals the formula
   recomputed from the census. The key residual after each append is
   1..R, so over m*R appends from an empty residual it sums to exactly
   m*R(R+1)/2 (mean (R+1)/2); the value window is exactly R once R tokens
   exist. At the end (and half way) every row reads back as the reference
   quantizer predicts (group 3). Independence: the simulator tracks only
   index lists following the paper's text; content uses kvq_quantize_group
   directly on the rows in simulated quantization order.                  */
/* ======================================================================== */
static void test_kivi_schedule(void)
{
    rng r = { 0x4B49564931ull };
    static const size_t Gs[] = { 1, 2, 4, 8, 16, 32 };
    static const int Bs[] = { 1, 2, 4, 8 };
    int ncfg = QUICK ? 10 : 48, ci;
    char msg[256];
    for (ci = 0; ci < ncfg; ci++) {
        size_t G = Gs[rbelow(&r, 6)], D = G * (1 + rbelow(&r, 4));
        size_t R = G * (1 + rbelow(&r, 6)), T = 0, steps, step, cap;
        int B = Bs[rbelow(&r, 4)], kind = ci % 4 == 3 ? 2 : (int)(ci % 2);
        size_t ksum = 0, ksum_sim = 0, vwin_bad = 0, ksum_first = 0, first_n;
        kvq_config cfg = kvq_config_kivi(D, B);
        kvq_cache c;
        sim S;
        float *K, *V;
        const float *src[2];
        int sched_ok = 1, chk_ok = 1, bytes_ok = 1, app_ok = 1;
        cfg.group = G;
        cfg.residual = R;
        cfg.fp_bits = (ci & 1) ? 32 : 16;
        if (ci % 3 == 2) {                 /* a value group other than G   */
            size_t Gv = D / (1 + rbelow(&r, 4));
            if (Gv == 0) Gv = 1;
            while (D % Gv) Gv--;
            cfg.value_group = Gv;
        }
        switch (ci % 6) {                  /* prefill length categories    */
        case 0: T = 0; break;                                    /* none   */
        case 1: T = R > 1 ? 1 + rbelow(&r, R - 1) : 1; break;    /* T < R  */
        case 2: T = R; break;                                    /* T = R  */
        case 3: T = R * (2 + rbelow(&r, 3)); break;              /* kR     */
        case 4: T = R * (1 + rbelow(&r, 3)) + 1 + rbelow(&r, R); break; /* kR+r */
        default: T = rbelow(&r, 4 * R + 1); break;
        }
        steps = (ci % 5 == 0) ? (QUICK ? 150 : 600) : rbelow(&r, QUICK ? 151 : 601);
        cap = T + steps;
        K = gen_rows(&r, cap, D, kind);
        V = gen_rows(&r, cap, D, kind);
        src[0] = K; src[1] = V;
        CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "kivi cfg %d: init: %s", ci, kvq_why());
        sim_init(&S, &cfg, cap);
        if (T) {
            kvq_status st = kvq_cache_prefill(&c, K, V, T);
            CHECK(st == KVQ_OK, "kivi cfg %d: prefill T=%zu: %s", ci, T, kvq_why());
            sim_prefill(&S, T);
        }
        CHECK(cmp_sched(&c, &S, msg, sizeof msg),
              "kivi cfg %d (D=%zu G=%zu R=%zu B=%d T=%zu) after prefill: %s",
              ci, D, G, R, B, T, msg);
        CHECK(kvq_cache_check(&c) == KVQ_OK, "kivi cfg %d after prefill: %s", ci, kvq_why());
        CHECK(cmp_bytes(&c, &cfg, msg, sizeof msg), "kivi cfg %d bytes after prefill: %s",
              ci, msg);
        first_n = (T % R == 0) ? (steps / R) * R : 0;  /* residual starts at 0 */
        for (step = 0; step < steps; step++) {
            size_t p = T + step;
            if (kvq_cache_append(&c, K + p * D, V + p * D) != KVQ_OK) {
                if (app_ok) CHECK(0, "kivi cfg %d step %zu: append: %s", ci, step, kvq_why());
                app_ok = 0;
                break;
            }
            sim_append(&S);
            if (sched_ok && !cmp_sched(&c, &S, msg, sizeof msg)) {
                sched_ok = 0;
                CHECK(0, "kivi cfg %d (D=%zu G=%zu R=%zu B=%d T=%zu) step %zu: %s",
                      ci, D, G, R, B, T, step, msg);
            }
            if (chk_ok && kvq_cache_check(&c) != KVQ_OK) {
                chk_ok = 0;
                CHECK(0, "kivi cfg %d step %zu: kvq_cache_check: %s", ci, step, kvq_why());
            }
            if (bytes_ok && !cmp_bytes(&c, &cfg, msg, sizeof msg)) {
                bytes_ok = 0;
                CHECK(0, "kivi cfg %d step %zu: bytes: %s", ci, step, msg);
            }
            ksum += c.k.rows[0].n;
            ksum_sim += S.s[0].wn;
            if (step < first_n) ksum_first += c.k.rows[0].n;
            if (c.n_pos >= R && c.v.rows[0].n != R) vwin_bad++;
            if (step == steps / 2)
                CHECK(cmp_content(&c, &cfg, &S, src, msg, sizeof msg),
                      "kivi cfg %d (B=%d G=%zu fp%d) content mid-stream: %s",
                      ci, B, G, cfg.fp_bits, msg);
        }
        CHECK(sched_ok && chk_ok && bytes_ok && app_ok,
              "kivi cfg %d: stream of %zu steps had failures", ci, steps);
        CHECK(ksum == ksum_sim, "kivi cfg %d: key residual sum %zu, simulated %zu",
              ci, ksum, ksum_sim);
        if (first_n)
            CHECK(2 * ksum_first == first_n * (R + 1),
                  "kivi cfg %d: key residual mean over %zu steps is %g, want (R+1)/2 = %g",
                  ci, first_n, (double)ksum_first / (double)first_n, (R + 1) / 2.0);
        CHECK(vwin_bad == 0, "kivi cfg %d: value window != R=%zu at %zu steps",
              ci, R, vwin_bad);
        CHECK(cmp_content(&c, &cfg, &S, src, msg, sizeof msg),
              "kivi cfg %d (B=%d G=%zu Gv=%zu fp%d kind %d) content at end: %s",
              ci, B, G, side_group(&cfg, 1), cfg.fp_bits, kind, msg);
        kvq_cache_free(&c);
        sim_free(&S);
        free(K);
        free(V);
    }
}

/* ======================================================================== */
/* 2 + 3 + 5. HF QuantizedCache schedule and re-quantization.
   Property: prefill quantizes the whole prompt (T - T % G on a per-channel
   side), so a per-token side has residual 0 after prefill and residual
   ((i - 1) % R) + 1 after the i-th decode step (i = 1, 2, ...); from an
   empty cache token 0 is HF's first update, quantized when token 1
   arrives, so the residual is 1 after step 1 and ((i - 2) % R) + 1 after
   step i >= 2; regions equal the simulator after every step. Cases
   alternate between HF's two zero rules. Content: with hf_requantize = 0 every
   quantized row reads as the reference quantizer of its stored row and
   never changes afterwards (rows recorded when they are quantized are
   compared bitwise at the end). With hf_requantize = 1, at each flush every
   previously quantized unit is dequantized and quantized again BEFORE the
   new residual is quantized: simulated here by applying the reference
   quantizer to the previous expected rows. So rows quantized at the first
   decode flush are identical in both caches until the second flush, and
   differ afterwards exactly where the simulation says.                    */
/* ======================================================================== */
typedef struct { int nbits; size_t D, G, R; kvq_axis ak, av; int fp_bits; } hfcase;

static void hf_expect_flush(const kvq_config *cfg, const sim *S, int side,
                            size_t nq_before, int requant, float *expct,
                            const float *src)
{
    const simside *s = &S->s[side];
    size_t tpu = S->tpu[side], D = cfg->head_dim, u, j, d;
    size_t G = side_group(cfg, side);
    int B = side_bits(cfg, side);
    float *rows = (float *)malloc(tpu * D * sizeof(float));
    float *out = (float *)malloc(tpu * D * sizeof(float));
    if (requant)                          /* history first, unit by unit    */
        for (u = 0; u < nq_before / tpu; u++) {
            for (j = 0; j < tpu; j++)
                memcpy(rows + j * D, expct + s->qorder[u * tpu + j] * D, D * sizeof(float));
            ref_quant_unit(rows, tpu, D, G, B, side_axis(cfg, side), cfg->zero_mode, out);
            for (j = 0; j < tpu; j++)
                memcpy(expct + s->qorder[u * tpu + j] * D, out + j * D, D * sizeof(float));
        }
    for (u = nq_before / tpu; u < s->nq / tpu; u++) {   /* the new units   */
        for (j = 0; j < tpu; j++)
            for (d = 0; d < D; d++)
                rows[j * D + d] = fp_store(src[s->qorder[u * tpu + j] * D + d], cfg->fp_bits);
        ref_quant_unit(rows, tpu, D, G, B, side_axis(cfg, side), cfg->zero_mode, out);
        for (j = 0; j < tpu; j++)
            memcpy(expct + s->qorder[u * tpu + j] * D, out + j * D, D * sizeof(float));
    }
    free(rows);
    free(out);
}

/* Quantized rows of a cache side vs expected rows: number of mismatches.  */
static size_t hf_mismatches(const kvq_cache *c, const sim *S, int side,
                            const float *expct, float *tmp)
{
    size_t i, d, D = c->cfg.head_dim, bad = 0;
    for (i = 0; i < S->s[side].nq; i++) {
        size_t p = S->s[side].qorder[i];
        kvq_cache_read(c, side, p, tmp);
        for (d = 0; d < D; d++) if (!(tmp[d] == expct[p * D + d])) { bad++; break; }
    }
    return bad;
}

static void test_hf_schedule(void)
{
    static const hfcase cases[] = {
        { 2, 128, 64, 128, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 16 },   /* defaults */
        { 4, 128, 64, 128, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 32 },
        { 4, 128, 32, 32, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 16 },
        { 2, 64, 16, 8, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 16 },
        { 1, 64, 64, 24, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 32 },
        { 8, 96, 32, 16, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 16 },
        { 2, 64, 16, 32, KVQ_PER_CHANNEL, KVQ_PER_TOKEN, 16 },
        { 4, 32, 8, 16, KVQ_PER_CHANNEL, KVQ_PER_CHANNEL, 32 },
        { 2, 16, 4, 4, KVQ_PER_TOKEN, KVQ_PER_TOKEN, 16 },
    };
    rng r = { 0x48465143ull };
    size_t ci, ncase = sizeof cases / sizeof cases[0];
    int rep, nrep = QUICK ? 1 : 3;
    char msg[256];
    size_t total_changed = 0;
    for (rep = 0; rep < nrep; rep++)
    for (ci = 0; ci < ncase; ci++) {
        const hfcase *hc = &cases[ci];
        kvq_hf_params hp = kvq_hf_defaults(hc->nbits);
        kvq_config cfg1, cfg0;
        kvq_cache c1, c0;
        sim S;
        size_t D = hc->D, R = hc->R, T, steps, step, cap, i, d;
        size_t flushes[2] = { 0, 0 }, first_lo[2] = { 0, 0 }, first_hi[2] = { 0, 0 };
        int kind = (int)((ci + (size_t)rep) % 3), side;
        float *K, *V, *e1[2], *e0[2], *rec0[2], *tmp;
        const float *src[2];
        int ok_sched = 1, ok_c1 = 1, ok_c0 = 1, ok_same = 1, ok_resid = 1, ok_bytes = 1;
        kvq_zero_mode zm = (ci + (size_t)rep) % 2 ? KVQ_ZERO_INT : KVQ_ZERO_FLOAT;
        CHECK(hp.q_group_size == 64 && hp.residual_length == 128 &&
              hp.axis_key == KVQ_PER_TOKEN && hp.axis_value == KVQ_PER_TOKEN &&
              hp.zero_mode == KVQ_ZERO_FLOAT,
              "kvq_hf_defaults: HF's documented defaults (64, 128, per-token) and today's "
              "float zero (optimum-quanto >= 0.2.3)");
        cfg1 = kvq_config_hf(D, hp);
        CHECK(cfg1.zero_mode == KVQ_ZERO_FLOAT, "kvq_config_hf(defaults): float zero");
        hp.q_group_size = hc->G;
        hp.residual_length = R;
        hp.axis_key = hc->ak;
        hp.axis_value = hc->av;
        hp.zero_mode = zm;
        cfg1 = kvq_config_hf(D, hp);
        cfg1.fp_bits = hc->fp_bits;
        CHECK(cfg1.hf_requantize == 1 && cfg1.zero_mode == zm &&
              cfg1.policy == KVQ_POLICY_HF, "kvq_config_hf: requantize on, hp.zero_mode kept");
        cfg0 = cfg1;
        cfg0.hf_requantize = 0;
        T = rep == 0 ? 3 * R + 5 : (rep == 1 ? 0 : 1 + rbelow(&r, 2 * R));
        if (hc->ak == KVQ_PER_CHANNEL && rep == 0) T = 3 * R + hc->G / 2 + 1;
        steps = (QUICK ? 4 : 7) * R + rbelow(&r, R);
        cap = T + steps;
        K = gen_rows(&r, cap, D, kind);
        V = gen_rows(&r, cap, D, kind);
        src[0] = K; src[1] = V;
        tmp = (float *)malloc(D * sizeof(float));
        for (side = 0; side < 2; side++) {
            e1[side] = (float *)calloc(cap * D + 1, sizeof(float));
            e0[side] = (float *)calloc(cap * D + 1, sizeof(float));
            rec0[side] = (float *)calloc(cap * D + 1, sizeof(float));
        }
        CHECK(kvq_cache_init(&c1, &cfg1) == KVQ_OK, "hf case %zu init", ci);
        CHECK(kvq_cache_init(&c0, &cfg0) == KVQ_OK, "hf case %zu init (no requant)", ci);
        sim_init(&S, &cfg1, cap);
        if (T) {
            size_t nqb[2];
            nqb[0] = S.s[0].nq; nqb[1] = S.s[1].nq;
            CHECK(kvq_cache_prefill(&c1, K, V, T) == KVQ_OK, "hf case %zu prefill", ci);
            CHECK(kvq_cache_prefill(&c0, K, V, T) == KVQ_OK, "hf case %zu prefill", ci);
            sim_prefill(&S, T);
            for (side = 0; side < 2; side++) {
                hf_expect_flush(&cfg1, &S, side, nqb[side], 0, e1[side], src[side]);
                hf_expect_flush(&cfg0, &S, side, nqb[side], 0, e0[side], src[side]);
                for (i = 0; i < S.s[side].nq; i++) {
                    size_t p = S.s[side].qorder[i];
                    kvq_cache_read(&c0, side, p, rec0[side] + p * D);
                }
            }
            if (hc->ak == KVQ_PER_TOKEN)
                CHECK(c1.k.rows[0].n == 0 && c1.v.rows[0].n == 0 &&
                      S.s[0].nq == T, "hf case %zu: prefill of %zu leaves residual "
                      "K %zu V %zu, want 0", ci, T, c1.k.rows[0].n, c1.v.rows[0].n);
        }
        CHECK(cmp_sched(&c1, &S, msg, sizeof msg), "hf case %zu after prefill: %s", ci, msg);
        CHECK(cmp_sched(&c0, &S, msg, sizeof msg), "hf case %zu after prefill: %s", ci, msg);
        for (step = 0; step < steps; step++) {
            size_t p = T + step, nqb[2];
            nqb[0] = S.s[0].nq; nqb[1] = S.s[1].nq;
            if (kvq_cache_append(&c1, K + p * D, V + p * D) != KVQ_OK ||
                kvq_cache_append(&c0, K + p * D, V + p * D) != KVQ_OK) {
                CHECK(0, "hf case %zu step %zu: append failed", ci, step);
                break;
            }
            sim_append(&S);
            if (ok_sched && !(cmp_sched(&c1, &S, msg, sizeof msg) &&
                              cmp_sched(&c0, &S, msg, sizeof msg) &&
                              kvq_cache_check(&c1) == KVQ_OK && kvq_cache_check(&c0) == KVQ_OK)) {
                ok_sched = 0;
                CHECK(0, "hf case %zu (D=%zu G=%zu R=%zu) step %zu: %s %s", ci, D, hc->G,
                      R, step, msg, kvq_why());
            }
            if (ok_bytes && !(cmp_bytes(&c1, &cfg1, msg, sizeof msg) &&
                              cmp_bytes(&c0, &cfg0, msg, sizeof msg))) {
                ok_bytes = 0;
                CHECK(0, "hf case %zu step %zu: bytes: %s", ci, step, msg);
            }
            /* residual on a per-token side: 1..R, cycling, from 0 at prefill;
               from an empty cache the cycle starts at token 1 (token 0 is
               quantized when token 1 arrives)                              */
            for (side = 0; side < 2; side++)
                if (side_axis(&cfg1, side) == KVQ_PER_TOKEN && ok_resid) {
                    size_t n = (side ? c1.v : c1.k).rows[0].n;
                    size_t want = T > 0 || step == 0 ? (step % R) + 1 : ((step - 1) % R) + 1;
                    if (n != want) {
                        ok_resid = 0;
                        CHECK(0, "hf case %zu step %zu (prompt %zu) side %d: residual %zu, "
                              "want %zu", ci, step, T, side, n, want);
                    }
                }
            for (side = 0; side < 2; side++) {
                if (S.s[side].nq == nqb[side]) continue;
                if (++flushes[side] == 1) {
                    first_lo[side] = nqb[side];
                    first_hi[side] = S.s[side].nq;
                }
                hf_expect_flush(&cfg1, &S, side, nqb[side], 1, e1[side], src[side]);
                hf_expect_flush(&cfg0, &S, side, nqb[side], 0, e0[side], src[side]);
                for (i = nqb[side]; i < S.s[side].nq; i++) {
                    size_t q = S.s[side].qorder[i];
                    kvq_cache_read(&c0, side, q, rec0[side] + q * D);
                }
                if (ok_c1 && hf_mismatches(&c1, &S, side, e1[side], tmp)) {
                    ok_c1 = 0;
                    CHECK(0, "hf case %zu step %zu side %d: %zu requantized rows differ "
                          "from the simulation", ci, step, side,
                          hf_mismatches(&c1, &S, side, e1[side], tmp));
                }
                if (ok_c0 && hf_mismatches(&c0, &S, side, e0[side], tmp)) {
                    ok_c0 = 0;
                    CHECK(0, "hf case %zu step %zu side %d: %zu rows differ from the "
                          "reference quantizer (no requant)", ci, step, side,
                          hf_mismatches(&c0, &S, side, e0[side], tmp));
                }
            }
            /* between a side's first and second decode flush, the rows it
               quantized at the first flush are the same in both caches     */
            for (side = 0; side < 2; side++)
                for (i = first_lo[side]; flushes[side] == 1 && ok_same &&
                                         i < first_hi[side]; i++) {
                    size_t q = S.s[side].qorder[i];
                    float a[512], b[512];
                    kvq_cache_read(&c1, side, q, a);
                    kvq_cache_read(&c0, side, q, b);
                    if (memcmp(a, b, D * sizeof(float)) != 0) {
                        ok_same = 0;
                        CHECK(0, "hf case %zu step %zu side %d: pos %zu differs between "
                              "requantize 1 and 0 before a second flush", ci, step, side, q);
                    }
                }
        }
        CHECK(ok_sched && ok_c1 && ok_c0 && ok_same && ok_resid && ok_bytes,
              "hf case %zu rep %d had failures", ci, rep);
        CHECK(flushes[0] >= 3 && flushes[1] >= 3, "hf case %zu: only %zu/%zu decode flushes",
              ci, flushes[0], flushes[1]);
        /* rows never change after quantization without requantization     */
        for (side = 0; side < 2; side++) {
            size_t bad = 0;
            for (i = 0; i < S.s[side].nq; i++) {
                size_t q = S.s[side].qorder[i];
                kvq_cache_read(&c0, side, q, tmp);
                if (memcmp(tmp, rec0[side] + q * D, D * sizeof(float)) != 0) bad++;
            }
            CHECK(bad == 0, "hf case %zu side %d: %zu rows changed after quantization "
                  "with hf_requantize = 0", ci, side, bad);
            /* how many rows re-quantization really moved (simulation)      */
            for (i = 0; i < S.s[side].nq; i++) {
                size_t q = S.s[side].qorder[i];
                for (d = 0; d < D; d++)
                    if (e1[side][q * D + d] != e0[side][q * D + d]) { total_changed++; break; }
            }
        }
        {
            const float *srcs[2];
            srcs[0] = K; srcs[1] = V;
            CHECK(cmp_content(&c0, &cfg0, &S, srcs, msg, sizeof msg),
                  "hf case %zu content (no requant): %s", ci, msg);
        }
        kvq_cache_free(&c1);
        kvq_cache_free(&c0);
        sim_free(&S);
        for (side = 0; side < 2; side++) { free(e1[side]); free(e0[side]); free(rec0[side]); }
        free(tmp); free(K); free(V);
    }
    /* re-quantizing a dequantized group is the identity for most groups
       (codes 0 and N present) but not all (a max that rounds to N - 1, the
       clamped integer zero point): over these streams some rows must move,
       or hf_requantize would be untested                                  */
    CHECK(total_changed > 0, "hf: re-quantization never changed a row in any stream");
}

/* ======================================================================== */
/* 2b. HF's first token. transformers' QuantizedCache quantizes whatever its
   first update receives and returns it unquantized for that update's own
   attention only. So, written from HF's update rule and not from kvq's
   code, with residual R:
     from an empty cache (the first update is token 0 alone): after the
       append of position t, the full-precision positions are {0} for
       t = 0 and, for t >= 1, p in [1, t] with (p - 1) / R == (t - 1) / R:
       the windows [kR + 1, kR + R];
     after a prefill of T0 tokens (the first update is the prompt): p in
       [T0, t] with (p - T0) / R == (t - T0) / R.
   A per-channel side cannot quantize one token (a group is G tokens) and
   keeps the windows [kR, kR + R - 1] of the plain flush. Checked on both
   sides position by position (the loc tags), for both zero rules. Then
   the values: step 0 attends token 0 exactly as it arrived (the cache
   holds it in float32 rows, so EAGER attention over one position returns
   v0 bit for bit); after step 1 token 0 reads back as the hand-computed
   quantization of a group whose minimum is not on the integer grid:
   x = {-1.5, 1.5, 0, 0.125, -0.125, 0.75, -0.75, 1} (s = 1) gives
   {-1.5, 1.5, 0.5, 0.5, -0.5, 0.5, -0.5, 0.5} under today's float zero and
   {-2, 1, 0, 0, 0, 1, -1, 1} under the post's zp = 2. Last, decoding from
   an empty cache stores the same bytes as a 1-token prefill followed by
   the same appends, from step 1 on (HF treats both as first update +
   decode).                                                                */
/* ======================================================================== */
static int hf_fp_expected(size_t p, size_t t, size_t T0, size_t R, int per_channel)
{
    if (per_channel) return p / R == t / R;            /* plain flush windows */
    if (T0 == 0) return t == 0 ? p == 0 : p >= 1 && (p - 1) / R == (t - 1) / R;
    return p >= T0 && (p - T0) / R == (t - T0) / R;
}

static void test_hf_first_token(void)
{
    static const float x0[8] = { -1.5f, 1.5f, 0, 0.125f, -0.125f, 0.75f, -0.75f, 1 };
    static const float want_f[8] = { -1.5f, 1.5f, 0.5f, 0.5f, -0.5f, 0.5f, -0.5f, 0.5f };
    static const float want_i[8] = { -2, 1, 0, 0, 0, 1, -1, 1 };
    enum { D = 8, R = 4, STEPS = 19 };
    rng r = { 0x7031ull };
    float X[(STEPS + 8) * D], row[D], out[D], probs[1], work[4096];
    int m, pc;
    size_t T0, t, p, side;
    for (t = 0; t < (STEPS + 8) * D; t++) X[t] = rnorm(&r);
    memcpy(X, x0, sizeof x0);                          /* token 0            */
    for (m = 0; m < 2; m++)
        for (pc = 0; pc < 2; pc++)
            for (T0 = 0; T0 <= 5; T0 += (T0 ? 4 : 1)) {   /* prompts 0, 1, 5 */
                kvq_hf_params hp = kvq_hf_defaults(2);
                kvq_config cfg;
                kvq_cache c;
                size_t bad = 0, first_bad = (size_t)-1;
                hp.q_group_size = pc ? 4 : 8;          /* per-channel: G = 4 | R */
                hp.residual_length = R;
                hp.axis_key = pc ? KVQ_PER_CHANNEL : KVQ_PER_TOKEN;
                hp.zero_mode = m ? KVQ_ZERO_INT : KVQ_ZERO_FLOAT;
                cfg = kvq_config_hf(D, hp);
                cfg.fp_bits = 32;
                if (kvq_cache_init(&c, &cfg) != KVQ_OK) { CHECK(0, "hf first token: init"); continue; }
                if (T0) CHECK(kvq_cache_prefill(&c, X, X, T0) == KVQ_OK, "hf first token: prefill");
                for (t = T0; t < T0 + STEPS; t++) {
                    CHECK(kvq_cache_append(&c, X + t * D, X + t * D) == KVQ_OK, "hf first token: append");
                    if (t == 0) {              /* step 0 attends token 0 as it arrived */
                        CHECK(kvq_attend(&c, X, 1, out, probs, KVQ_ATTN_EAGER, work, 4096) == KVQ_OK &&
                              memcmp(out, X, sizeof out) == 0,
                              "hf first token (%s zero): step 0's attention is not token 0's "
                              "own value", m ? "int" : "float");
                    }
                    for (side = 0; side < 2; side++)
                        for (p = 0; p <= t; p++) {
                            const kvq_side *sd = side ? &c.v : &c.k;
                            int fp = KVQ_LOC_TAG(sd->loc[p]) == KVQ_LOC_ROWS0;
                            int quant = KVQ_LOC_TAG(sd->loc[p]) == KVQ_LOC_QUANT;
                            int want = hf_fp_expected(p, t, T0, R, pc && side == 0);
                            if (!(fp || quant) || fp != want) {
                                if (!bad++) first_bad = t * 1000 + p * 10 + side;
                            }
                        }
                    if (t == 1 && T0 <= 1 && !pc) {   /* token 0 by hand (G = 8) */
                        CHECK(kvq_cache_read(&c, 1, 0, row) == KVQ_OK &&
                              memcmp(row, m ? want_i : want_f, sizeof row) == 0,
                              "hf first token (%s zero, prompt %zu): token 0's value after "
                              "step 1 is %g %g %g %g %g %g %g %g, not the hand-computed group",
                              m ? "int" : "float", T0, row[0], row[1], row[2], row[3], row[4],
                              row[5], row[6], row[7]);
                    }
                }
                CHECK(bad == 0, "hf first token (%s zero, %s keys, prompt %zu): %zu (step, "
                      "position, side) off HF's windows; first step %zu position %zu side %zu",
                      m ? "int" : "float", pc ? "per-channel" : "per-token", T0, bad,
                      first_bad / 1000, first_bad % 1000 / 10, first_bad % 10);
                CHECK(kvq_cache_check(&c) == KVQ_OK, "hf first token: kvq_cache_check: %s", kvq_why());
                kvq_cache_free(&c);
            }
    /* decoding from empty == a 1-token prefill + the same appends, stored
       row by row, from step 1 on (HF: both are "first update, then decode") */
    for (m = 0; m < 2; m++) {
        kvq_hf_params hp = kvq_hf_defaults(2);
        kvq_config cfg;
        kvq_cache a, b;
        float ra[D], rb[D];
        size_t diff = 0;
        hp.q_group_size = 8;
        hp.residual_length = R;
        hp.zero_mode = m ? KVQ_ZERO_INT : KVQ_ZERO_FLOAT;
        cfg = kvq_config_hf(D, hp);
        CHECK(kvq_cache_init(&a, &cfg) == KVQ_OK && kvq_cache_init(&b, &cfg) == KVQ_OK,
              "hf first token: init");
        CHECK(kvq_cache_append(&a, X, X) == KVQ_OK && kvq_cache_prefill(&b, X, X, 1) == KVQ_OK,
              "hf first token: token 0");
        for (t = 1; t < STEPS; t++) {
            CHECK(kvq_cache_append(&a, X + t * D, X + t * D) == KVQ_OK &&
                  kvq_cache_append(&b, X + t * D, X + t * D) == KVQ_OK, "hf first token: append");
            for (side = 0; side < 2; side++)
                for (p = 0; p <= t; p++) {
                    kvq_cache_read(&a, (int)side, p, ra);
                    kvq_cache_read(&b, (int)side, p, rb);
                    diff += memcmp(ra, rb, sizeof ra) != 0;
                }
        }
        CHECK(diff == 0, "hf first token (%s zero): decoding from empty differs from a "
              "1-token prefill in %zu (step, position, side) reads", m ? "int" : "float", diff);
        kvq_cache_free(&a);
        kvq_cache_free(&b);
    }
}

/* ======================================================================== */
/* 3 (FULL). A FULL cache holds every row in rows[0], read back as fp16 RNE
   (fp_bits 16, checked against ref_f16 written from the format's
   definition) or bit-exact (fp_bits 32); bytes = T * D * fp_bits/8 * 2.   */
/* ======================================================================== */
static void test_full_content(void)
{
    rng r = { 0x46554C4Cull };
    int fpb, kind;
    char msg[256];
    for (fpb = 16; fpb <= 32; fpb += 16)
        for (kind = 0; kind < 3; kind++) {
            size_t D = 8 << kind, T = 1 + rbelow(&r, 50), steps = 70, s;
            kvq_config cfg = kvq_config_full(D, fpb);
            kvq_cache c;
            sim S;
            float *K = gen_rows(&r, T + steps, D, kind), *V = gen_rows(&r, T + steps, D, kind);
            const float *src[2];
            int ok = 1;
            src[0] = K; src[1] = V;
            CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "full init");
            sim_init(&S, &cfg, T + steps);
            CHECK(kvq_cache_prefill(&c, K, V, T) == KVQ_OK, "full prefill");
            sim_prefill(&S, T);
            for (s = 0; s < steps && ok; s++) {
                ok = kvq_cache_append(&c, K + (T + s) * D, V + (T + s) * D) == KVQ_OK;
                sim_append(&S);
                ok = ok && cmp_sched(&c, &S, msg, sizeof msg) &&
                     cmp_bytes(&c, &cfg, msg, sizeof msg) && kvq_cache_check(&c) == KVQ_OK;
            }
            CHECK(ok, "full fp%d kind %d: stream: %s", fpb, kind, msg);
            CHECK(cmp_content(&c, &cfg, &S, src, msg, sizeof msg),
                  "full fp%d kind %d content: %s", fpb, kind, msg);
            kvq_cache_free(&c);
            sim_free(&S);
            free(K); free(V);
        }
}

/* ======================================================================== */
/* 4. ATTENTION                                                             */
/* ======================================================================== */
typedef struct {
    kvq_cache c;
    kvq_config cfg;
    float *K, *V;      /* raw rows (T, D)                                   */
    float *Kd, *Vd;    /* rows as the cache holds them, via kvq_cache_read  */
    size_t T, D;
} built;

/* A cache of T tokens: a random-length prefill, then appends. Keys are
   drawn with data kind `kind`; values too, except that kind 1's large
   channels are a KEY phenomenon (KIVI Sec. 3), so its values are N(0,1).  */
static int build(built *b, const kvq_config *cfg, rng *r, size_t T, int kind)
{
    size_t D = cfg->head_dim, T0 = rbelow(r, T + 1), p;
    memset(b, 0, sizeof *b);
    b->cfg = *cfg;
    b->T = T;
    b->D = D;
    b->K = gen_rows(r, T, D, kind);
    b->V = gen_rows(r, T, D, kind == 1 ? 0 : kind);
    b->Kd = (float *)malloc((T * D + 1) * sizeof(float));
    b->Vd = (float *)malloc((T * D + 1) * sizeof(float));
    if (kvq_cache_init(&b->c, cfg) != KVQ_OK) return 0;
    if (T0 && kvq_cache_prefill(&b->c, b->K, b->V, T0) != KVQ_OK) return 0;
    for (p = T0; p < T; p++)
        if (kvq_cache_append(&b->c, b->K + p * D, b->V + p * D) != KVQ_OK) return 0;
    for (p = 0; p < T; p++)
        if (kvq_cache_read(&b->c, 0, p, b->Kd + p * D) != KVQ_OK ||
            kvq_cache_read(&b->c, 1, p, b->Vd + p * D) != KVQ_OK) return 0;
    return 1;
}
static void built_free(built *b)
{
    kvq_cache_free(&b->c);
    free(b->K); free(b->V); free(b->Kd); free(b->Vd);
}
static kvq_status attend(const kvq_cache *c, const float *q, size_t n_q, float *out,
                         float *probs, kvq_attn_mode mode)
{
    size_t n = kvq_attend_scratch_floats(c, mode);
    float *scratch = (float *)malloc((n + 1) * sizeof(float));
    kvq_status st = kvq_attend(c, q, n_q, out, probs, mode, scratch, n);
    free(scratch);
    return st;
}

/* 4a-4d, 4g. Over random caches (KIVI 2/4-bit, HF 4-bit, FULL fp16),
   D in {32, 64, 128}, n_q in {1, 4}, T from 1 to ~3000:
   - eager and online agree: max|diff| <= 1e-5 max|out| + 1e-6. Both use the
     same float scores; they differ only in how the softmax is normalized
     (global max + divide vs running max + rescale), a few float roundings
     per position relative to the partial sums.
   - each equals kvq_attend_dense (double) over the explicitly dequantized
     K', V' within 1e-4 relative to max|out|: the cache's float scores carry
     ~D * 2^-24 relative error (the per-channel algebra sums q_d a_d c and
     q_d b_d separately, which can cancel), i.e. ~1e-5 at D = 128, and
     weights inherit it; 1e-4 leaves a 10x margin. A wrong row, scale or
     region would be off by the quantization step (>= 1e-3).
   - probs (eager): non-negative, sum to 1 within 1e-5, equal to the dense
     probabilities within 1e-5; asking for them leaves out bit-identical.
   - GQA batching: n_q = 4 in one call == 4 calls with n_q = 1, bit for bit
     (each query head is computed independently).                         */
static void test_attention_agreement(void)
{
    rng r = { 0x4154544Eull };
    static const size_t Ds[] = { 32, 64, 128 };
    static const size_t Ts_full[] = { 1, 2, 31, 33, 128, 129, 257, 700, 1500, 3000 };
    static const size_t Ts_quick[] = { 1, 2, 33, 129, 300 };
    const size_t *Ts = QUICK ? Ts_quick : Ts_full;
    size_t nT = QUICK ? 5 : 10, di, ti;
    int pol;
    double worst_eo = 0.0, worst_dense = 0.0, worst_p = 0.0;
    for (pol = 0; pol < 4; pol++)
        for (di = 0; di < 3; di++)
            for (ti = 0; ti < nT; ti++) {
                size_t D = Ds[di], T = Ts[ti], nq, h;
                kvq_config cfg;
                built b;
                const char *pname = pol == 0 ? "KIVI-2" : pol == 1 ? "KIVI-4" :
                                    pol == 2 ? "HF-4" : "FULL16";
                if (pol == 0) cfg = kvq_config_kivi(D, 2);
                else if (pol == 1) cfg = kvq_config_kivi(D, 4);
                else if (pol == 2) {
                    kvq_hf_params hp = kvq_hf_defaults(4);
                    if (D < 64) hp.q_group_size = D;
                    cfg = kvq_config_hf(D, hp);
                } else cfg = kvq_config_full(D, 16);
                if (!build(&b, &cfg, &r, T, (int)(ti % 2))) {
                    CHECK(0, "%s D=%zu T=%zu: build failed: %s", pname, D, T, kvq_why());
                    built_free(&b);
                    continue;
                }
                for (nq = 1; nq <= 4; nq += 3) {
                    float *q = gen_rows(&r, nq, D, 0);
                    float *oe = (float *)malloc(nq * D * sizeof(float));
                    float *oo = (float *)malloc(nq * D * sizeof(float));
                    float *oe2 = (float *)malloc(nq * D * sizeof(float));
                    float *od = (float *)malloc(nq * D * sizeof(float));
                    float *pe = (float *)malloc(nq * T * sizeof(float));
                    float *pd = (float *)malloc(nq * T * sizeof(float));
                    float *one = (float *)malloc(D * sizeof(float));
                    double m, tol, e;
                    int mode, bitsame = 1;
                    CHECK(attend(&b.c, q, nq, oe, NULL, KVQ_ATTN_EAGER) == KVQ_OK, "eager");
                    CHECK(attend(&b.c, q, nq, oo, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "online");
                    CHECK(attend(&b.c, q, nq, oe2, pe, KVQ_ATTN_EAGER) == KVQ_OK, "eager+p");
                    CHECK(kvq_attend_dense(b.Kd, b.Vd, T, D, q, nq, od, pd) == KVQ_OK, "dense");
                    m = max_abs(od, nq * D);
                    tol = 1e-5 * max_abs(oe, nq * D) + 1e-6;
                    e = max_abs_diff(oe, oo, nq * D);
                    if (e / (m + 1e-30) > worst_eo) worst_eo = e / (m + 1e-30);
                    CHECK(e <= tol, "%s D=%zu T=%zu n_q=%zu: eager vs online %g > %g",
                          pname, D, T, nq, e, tol);
                    e = max_abs_diff(oe, od, nq * D);
                    if (max_abs_diff(oo, od, nq * D) > e) e = max_abs_diff(oo, od, nq * D);
                    if (e / (m + 1e-30) > worst_dense) worst_dense = e / (m + 1e-30);
                    CHECK(e <= 1e-4 * m, "%s D=%zu T=%zu n_q=%zu: cache vs dense oracle on "
                          "dequantized K', V': %g > 1e-4 * %g", pname, D, T, nq, e, m);
                    CHECK(memcmp(oe, oe2, nq * D * sizeof(float)) == 0,
                          "%s D=%zu T=%zu: out changes when probs are requested", pname, D, T);
                    for (h = 0; h < nq; h++) {
                        double sum = 0.0, pm = 0.0;
                        size_t t, neg = 0;
                        for (t = 0; t < T; t++) {
                            float pv = pe[h * T + t];
                            sum += pv;
                            neg += !(pv >= 0.0f);
                            if (fabs((double)pv - (double)pd[h * T + t]) > pm)
                                pm = fabs((double)pv - (double)pd[h * T + t]);
                        }
                        if (pm > worst_p) worst_p = pm;
                        CHECK(neg == 0 && fabs(sum - 1.0) <= 1e-5,
                              "%s D=%zu T=%zu head %zu: probs sum %.9g, %zu negative",
                              pname, D, T, h, sum, neg);
                        CHECK(pm <= 1e-5, "%s D=%zu T=%zu head %zu: probs vs dense %g",
                              pname, D, T, h, pm);
                    }
                    if (nq == 4)
                        for (mode = 0; mode < 2; mode++) {
                            const float *full = mode ? oo : oe;
                            for (h = 0; h < nq; h++) {
                                attend(&b.c, q + h * D, 1, one, NULL, (kvq_attn_mode)mode);
                                if (memcmp(one, full + h * D, D * sizeof(float)) != 0)
                                    bitsame = 0;
                            }
                        }
                    CHECK(bitsame, "%s D=%zu T=%zu: n_q=4 differs from 4 single calls",
                          pname, D, T);
                    free(q); free(oe); free(oo); free(oe2); free(od); free(pe); free(pd);
                    free(one);
                }
                built_free(&b);
            }
    printf("  attention: worst eager-online %.3g, cache-dense %.3g (relative to max|out|), "
           "probs %.3g\n", worst_eo, worst_dense, worst_p);
}

/* 4c. FULL with fp_bits = 32 stores the rows exactly, so its attention is
   plain attention over the raw K, V: within 1e-5 of the double oracle
   (float dot products and sums of at most a few thousand terms).         */
static void test_attention_full32(void)
{
    rng r = { 0x46333200ull };
    static const size_t Ts[] = { 1, 7, 100, 1000 };
    size_t ti, D;
    for (D = 32; D <= 128; D *= 2)
        for (ti = 0; ti < (QUICK ? 3u : 4u); ti++) {
            kvq_config cfg = kvq_config_full(D, 32);
            built b;
            float q[4 * 128], oe[4 * 128], oo[4 * 128], od[4 * 128];
            double m;
            size_t i;
            for (i = 0; i < 4 * D; i++) q[i] = rnorm(&r);
            CHECK(build(&b, &cfg, &r, Ts[ti], 1), "full32 build");
            CHECK(kvq_attend_dense(b.K, b.V, Ts[ti], D, q, 4, od, NULL) == KVQ_OK, "dense");
            CHECK(attend(&b.c, q, 4, oe, NULL, KVQ_ATTN_EAGER) == KVQ_OK, "eager");
            CHECK(attend(&b.c, q, 4, oo, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "online");
            m = max_abs(od, 4 * D);
            CHECK(max_abs_diff(oe, od, 4 * D) <= 1e-5 * m && max_abs_diff(oo, od, 4 * D) <= 1e-5 * m,
                  "FULL fp32 D=%zu T=%zu vs dense on raw K, V: eager %g online %g (max %g)",
                  D, Ts[ti], max_abs_diff(oe, od, 4 * D), max_abs_diff(oo, od, 4 * D), m);
            built_free(&b);
        }
}

/* 4c''. kvq_attend's check of the position maps (kvq__map_outside, 8 or
   16 entries a step with AVX2 or AVX-512, kvq__map_lanes, the rest one by
   one): an entry of either map with a tag no region has (7, 8, 15), a
   quantized slot past the store, a row index past its region or in an
   empty region is refused (KVQ_ERR_STATE) by both modes, at positions in
   the vector steps and in the tail; each undone at once, after which
   attention works again. The unit tests are built for the x86-64
   baseline (the one-by-one loop); this file built with -march=x86-64-v3
   or -v4 runs the vector steps.                                          */
static void test_attention_map_check(void)
{
    rng r = { 0x4d415053ull };
    const size_t T = 300, D = 32;
    kvq_config cfg = kvq_config_kivi(D, 2);
    built b;
    float q[2 * 32], out[2 * 32];
    const size_t at[] = { 0, 7, 8, 15, 16, 31, 200, 287, 288, 299 };
    size_t i, k, side;
    for (i = 0; i < 2 * D; i++) q[i] = rnorm(&r);
    CHECK(build(&b, &cfg, &r, T, 0), "map check: build");
    for (side = 0; side < 2; side++)
        for (i = 0; i < sizeof at / sizeof at[0]; i++)
            for (k = 0; k < 6; k++) {
                kvq_side *sd = side ? &b.c.v : &b.c.k;
                const kvq_rows *w = &sd->rows[KVQ_ROWS_WINDOW];
                uint32_t saved = sd->loc[at[i]], bad;
                size_t slots = sd->n_units * sd->geom.tokens_per_unit;
                int mode;
                switch (k) {
                case 0:  bad = 7u << 28; break;
                case 1:  bad = 8u << 28; break;
                case 2:  bad = (15u << 28) | 3u; break;
                case 3:  bad = (KVQ_LOC_QUANT << 28) | (uint32_t)slots; break;
                case 4:  bad = ((KVQ_LOC_ROWS0 + KVQ_ROWS_WINDOW) << 28) | (uint32_t)(w->off + w->n);
                         break;
                default: bad = ((KVQ_LOC_ROWS0 + (KVQ_ROWS_WINDOW + 1) % KVQ_ROW_REGIONS) << 28);
                         break;
                }
                sd->loc[at[i]] = bad;
                for (mode = 0; mode < 2; mode++) {
                    kvq_attn_mode m = mode ? KVQ_ATTN_ONLINE : KVQ_ATTN_EAGER;
                    kvq_status st = attend(&b.c, q, 2, out, NULL, m);
                    CHECK(st == KVQ_ERR_STATE, "map check: side %zu, position %zu, entry %zu "
                          "(0x%08x), mode %d: %s", side, at[i], k, (unsigned)bad, mode,
                          kvq_status_str(st));
                }
                sd->loc[at[i]] = saved;
            }
    CHECK(attend(&b.c, q, 2, out, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "map check: restored");
    built_free(&b);
}

/* 4c'. Full-precision rows in ONLINE (kvq__row_scores, kvq__tile_rows):
   fp32 and fp16 rows, head dims that 16 divides (the tile-at-a-time path)
   and that it does not (24, 40: the row-at-a-time fallback), and query
   counts that split into head batches of 4, 2 and 1 (n_q = 1, 2, 3, 5, 7).
   ONLINE must agree with EAGER, which reads the same stored rows, within
   test_attention_agreement's tolerance.                                   */
static void test_attention_rows_shapes(void)
{
    rng r = { 0x524F5753ull };
    static const size_t Ds[] = { 24, 40, 64, 128 }, Ts[] = { 1, 33, 300 }, NQ[] = { 1, 2, 3, 5, 7 };
    size_t di, ti, qi, i;
    int fpb;
    double worst = 0.0;
    for (fpb = 16; fpb <= 32; fpb += 16)
        for (di = 0; di < 4; di++)
            for (ti = 0; ti < 3; ti++) {
                size_t D = Ds[di], T = Ts[ti];
                kvq_config cfg = kvq_config_full(D, fpb);
                built b;
                if (!build(&b, &cfg, &r, T, (int)(ti % 2))) {
                    CHECK(0, "FULL%d D=%zu T=%zu: build failed: %s", fpb, D, T, kvq_why());
                    built_free(&b);
                    continue;
                }
                for (qi = 0; qi < 5; qi++) {
                    size_t nq = NQ[qi];
                    float q[7 * 128], oe[7 * 128], oo[7 * 128];
                    double tol, e;
                    for (i = 0; i < nq * D; i++) q[i] = rnorm(&r);
                    CHECK(attend(&b.c, q, nq, oe, NULL, KVQ_ATTN_EAGER) == KVQ_OK, "eager");
                    CHECK(attend(&b.c, q, nq, oo, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "online");
                    tol = 1e-5 * max_abs(oe, nq * D) + 1e-6;
                    e = max_abs_diff(oe, oo, nq * D);
                    CHECK(e <= tol, "FULL%d D=%zu T=%zu n_q=%zu: ONLINE vs EAGER %g > %g",
                          fpb, D, T, nq, e, tol);
                    if (e > worst) worst = e;
                }
                built_free(&b);
            }
    printf("  full-precision rows, D 24/40/64/128, n_q 1-7: ONLINE vs EAGER worst %.2e\n", worst);
}

/* 4d. B = 8 KIVI stays close to exact attention.
   Derivation. Every group is quantized with step s = range / 255 and
   round-to-nearest, so |x - x'| <= s/2 (plus fp16 rounding of s, z and of
   the full-precision rows: relative 2^-11, ~5e-4 |x|). On N(0,1) data a
   32-token (key channel) or 32-channel (value token) group spans about
   4.1 sigma, so s ~ 0.016 and the error is ~uniform with std s/sqrt(12)
   ~ 0.0046; the large key channels (x8, see gen_value kind 1) have s ~ 0.13.
   Keys: the score error dS_p = q.(k'_p - k_p)/sqrt(D) has std
   sqrt(mean_d s_d^2 / 12) ~ sqrt((124*0.016^2 + 4*0.13^2)/128/12) ~ 0.0078.
   To first order the output error is sum_p w_p (dS_p - mean_w dS) v_p +
   sum_p w_p dv_p; with v independent of the errors both terms scale like
   ||out|| ~ sqrt(sum_p w_p^2) * ||v||, so the relative L2 error is about
   sqrt(std(dS)^2 + (std(dv)/std(v))^2) ~ sqrt(0.0078^2 + 0.0046^2) ~ 0.009
   for a position set in which the quantized part dominates. We check the
   L2 error against 2.5x that estimate: relative error <= 0.0225. The same
   data at B = 4 (s 17x larger) must be clearly worse, which shows the
   bound is not met by accident of an insensitive metric.                  */
static void test_attention_b8_bound(void)
{
    rng r = { 0xB8B8B8ull };
    int rep, nrep = QUICK ? 2 : 6;
    double worst8 = 0.0;
    for (rep = 0; rep < nrep; rep++) {
        size_t D = 128, T = 1000 + rbelow(&r, 1000), nq = 4, i;
        kvq_config c8 = kvq_config_kivi(D, 8), c4 = kvq_config_kivi(D, 4);
        built b8, b4;
        float *q = gen_rows(&r, nq, D, 0), o8[4 * 128], o4[4 * 128], od[4 * 128];
        double n8 = 0, n4 = 0, nd = 0, rel8, rel4;
        rng r2;
        r2.s = r.s;
        CHECK(build(&b8, &c8, &r, T, 1), "b8 build");
        CHECK(build(&b4, &c4, &r2, T, 1), "b4 build");   /* the same data */
        CHECK(memcmp(b8.K, b4.K, T * D * sizeof(float)) == 0, "b4 and b8 share data");
        CHECK(kvq_attend_dense(b8.K, b8.V, T, D, q, nq, od, NULL) == KVQ_OK, "dense");
        CHECK(attend(&b8.c, q, nq, o8, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "b8 attend");
        CHECK(attend(&b4.c, q, nq, o4, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "b4 attend");
        for (i = 0; i < nq * D; i++) {
            n8 += ((double)o8[i] - od[i]) * ((double)o8[i] - od[i]);
            n4 += ((double)o4[i] - od[i]) * ((double)o4[i] - od[i]);
            nd += (double)od[i] * od[i];
        }
        rel8 = sqrt(n8 / nd);
        rel4 = sqrt(n4 / nd);
        if (rel8 > worst8) worst8 = rel8;
        CHECK(rel8 <= 0.0225, "KIVI-8 T=%zu: relative L2 error %g > 0.0225", T, rel8);
        CHECK(rel4 > 4.0 * rel8, "KIVI-4 error %g not clearly above KIVI-8's %g", rel4, rel8);
        built_free(&b8);
        built_free(&b4);
        free(q);
    }
    printf("  KIVI-8 worst relative L2 attention error: %.4g\n", worst8);
}

/* 4f. Large logits: q scaled so the largest |score| is 400. exp() of raw
   scores would overflow float (e^88); both modes subtract a maximum first,
   so outputs must stay finite and eager/online agree (same scores, softmax
   essentially one-hot). Against the double oracle on K', V' the bound is
   the float score error: a D-term dot product is within D * 2^-24 *
   sum|terms| (the per-channel algebra's terms are bounded by
   |q_d|(|k'_d| + 2 max|K'|)), and a score error of at most Delta moves
   every weight by a factor within e^(+-2 Delta), so
   |out - out_ref| <= (e^(2 Delta) - 1) max|V'|.                          */
static void test_attention_large_logits(void)
{
    rng r = { 0x4C415247ull };
    int pol;
    for (pol = 0; pol < 3; pol++) {
        size_t D = 64, T = 300 + rbelow(&r, 300), nq = 2, p, d, h;
        kvq_config cfg = pol == 0 ? kvq_config_kivi(D, 2) :
                         pol == 1 ? kvq_config_hf(D, kvq_hf_defaults(4)) : kvq_config_full(D, 16);
        built b;
        float *q = gen_rows(&r, nq, D, 0), oe[2 * 64], oo[2 * 64], od[2 * 64];
        double smax = 0.0, scale, delta = 0.0, kmax, bound;
        CHECK(build(&b, &cfg, &r, T, 1), "large-logit build");
        kmax = max_abs(b.Kd, T * D);
        for (h = 0; h < nq; h++)
            for (p = 0; p < T; p++) {
                double s = 0.0;
                for (d = 0; d < D; d++) s += (double)q[h * D + d] * b.Kd[p * D + d];
                s /= sqrt((double)D);
                if (fabs(s) > smax) smax = fabs(s);
            }
        scale = 400.0 / smax;
        for (d = 0; d < nq * D; d++) q[d] = (float)(q[d] * scale);
        for (h = 0; h < nq; h++)
            for (p = 0; p < T; p++) {
                double t = 0.0;
                for (d = 0; d < D; d++)
                    t += fabs((double)q[h * D + d]) * (fabs((double)b.Kd[p * D + d]) + 2.0 * kmax);
                t *= (double)(D + 2) * ldexp(1.0, -24) / sqrt((double)D);
                if (t > delta) delta = t;
            }
        bound = (exp(2.0 * delta) - 1.0) * max_abs(b.Vd, T * D) + 1e-6;
        CHECK(attend(&b.c, q, nq, oe, NULL, KVQ_ATTN_EAGER) == KVQ_OK, "eager");
        CHECK(attend(&b.c, q, nq, oo, NULL, KVQ_ATTN_ONLINE) == KVQ_OK, "online");
        CHECK(kvq_attend_dense(b.Kd, b.Vd, T, D, q, nq, od, NULL) == KVQ_OK, "dense");
        CHECK(all_finite(oe, nq * D) && all_finite(oo, nq * D),
              "policy %d: non-finite output with |scores| ~ 400", pol);
        CHECK(max_abs_diff(oe, oo, nq * D) <= 1e-5 * max_abs(oe, nq * D) + 1e-6,
              "policy %d large logits: eager vs online %g", pol, max_abs_diff(oe, oo, nq * D));
        CHECK(max_abs_diff(oe, od, nq * D) <= bound,
              "policy %d large logits: vs dense %g > bound %g", pol,
              max_abs_diff(oe, od, nq * D), bound);
        built_free(&b);
        free(q);
    }
}

/* ONLINE's softmax weights come from kvq__exp_walk, not libm: against exp in
   double precision it must stay within 2 ulp of the true value on [-87, 0]
   (every 16-lane vector of a dense grid, plus fresh random points and the
   ends), give +0 below -88 and for -inf, and be monotone along the grid. */
static void test_exp16(void)
{
    rng r = { 0x45585031ull };
    float x[16], y[16], prev = 0.0f;
    double worst = 0.0;
    long i, n_grid = COUNT(1 << 21, 1 << 16), n_bad = 0, n_nonmono = 0;
    int j;
    for (i = 0; i < n_grid + 4096; i += 16) {
        for (j = 0; j < 16; j++) {
            x[j] = i < n_grid ? -87.0f * (float)(i + j) / (float)n_grid      /* 0 .. -87 */
                              : -87.0f * (float)runif(&r);
            y[j] = kvq__exp_walk(x[j]);
        }
        for (j = 0; j < 16; j++) {
            double t = exp((double)x[j]), ulp = ldexp(1.0, ilogb(t) - 23);
            double e = fabs((double)y[j] - t) / ulp;
            if (e > worst) worst = e;
            n_bad += !(e <= 2.0);
            if (i < n_grid) {
                n_nonmono += (i + j > 0 && y[j] > prev);
                prev = y[j];
            }
        }
    }
    CHECK(n_bad == 0, "exp_walk: %ld values off by more than 2 ulp (worst %.2f ulp)", n_bad, worst);
    CHECK(n_nonmono == 0, "exp_walk: %ld steps of the decreasing grid went up", n_nonmono);
    for (j = 0; j < 16; j++) x[j] = j == 0 ? -INFINITY : -88.0f - 50.0f * (float)j;
    for (j = 0; j < 16; j++) y[j] = kvq__exp_walk(x[j]);
    for (j = 0; j < 16; j++) CHECK(y[j] == 0.0f && !signbit(y[j]), "exp_walk(%g) = %g, want +0", x[j], y[j]);
    y[0] = kvq__exp_walk(0.0f);
    CHECK(y[0] == 1.0f, "exp_walk(0) = %.9g, want 1", y[0]);
}

/* ======================================================================== */
/* 5. Byte accounting beyond the per-step formula (checked in groups 1-3):
   - `allocated` is "every heap byte the cache owns right now": it must
     equal the live bytes in this file's allocator ledger (the only cache
     alive), which sees every KVQ_MALLOC/KVQ_REALLOC/KVQ_FREE.
   - kvq_cache_reserve(n) then n appends: no allocator call at all, and
     `allocated` unchanged (no allocation on the hot path).                */
/* ======================================================================== */
static void test_bytes_and_reserve(void)
{
    rng r = { 0x42595445ull };
    int pol;
    for (pol = 0; pol < 5; pol++) {
        size_t D = 64, n = QUICK ? 300 : 1100, pre = pol == 4 ? 0 : 1 + rbelow(&r, 300), i;
        kvq_config cfg;
        kvq_cache c;
        kvq_bytes b0, b1;
        long calls;
        float *K, *V;
        const char *pname;
        if (pol == 0) { cfg = kvq_config_kivi(D, 2); pname = "KIVI-2"; }
        else if (pol == 1) { cfg = kvq_config_hf(D, kvq_hf_defaults(4)); pname = "HF-4"; }
        else if (pol == 2) { cfg = kvq_config_full(D, 32); pname = "FULL32"; }
        else if (pol == 3) {
            cfg = kvq_config_kivi(D, 1); cfg.group = 8; cfg.residual = 24;
            cfg.value_group = 16; cfg.fp_bits = 32; pname = "KIVI-1 G8 R24";
        } else {
            kvq_hf_params hp = kvq_hf_defaults(8);
            hp.q_group_size = 16; hp.residual_length = 48; hp.axis_key = KVQ_PER_CHANNEL;
            cfg = kvq_config_hf(D, hp); pname = "HF-8 per-channel keys";
        }
        K = gen_rows(&r, pre + n, D, 0);
        V = gen_rows(&r, pre + n, D, 0);
        CHECK(ta_live == 0 && ta_bytes == 0, "allocator ledger not empty before %s", pname);
        CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "%s init", pname);
        kvq_cache_bytes(&c, &b0);
        CHECK(b0.allocated == ta_bytes, "%s after init: allocated %zu, allocator holds %zu",
              pname, b0.allocated, ta_bytes);
        if (pre) CHECK(kvq_cache_prefill(&c, K, V, pre) == KVQ_OK, "%s prefill", pname);
        kvq_cache_bytes(&c, &b0);
        CHECK(b0.allocated == ta_bytes, "%s after prefill: allocated %zu, allocator holds %zu",
              pname, b0.allocated, ta_bytes);
        CHECK(kvq_cache_reserve(&c, n) == KVQ_OK, "%s reserve", pname);
        kvq_cache_bytes(&c, &b0);
        CHECK(b0.allocated == ta_bytes, "%s after reserve: allocated %zu, allocator holds %zu",
              pname, b0.allocated, ta_bytes);
        calls = ta_calls;
        for (i = 0; i < n; i++)
            if (kvq_cache_append(&c, K + (pre + i) * D, V + (pre + i) * D) != KVQ_OK) break;
        CHECK(i == n, "%s: append %zu of %zu failed", pname, i, n);
        kvq_cache_bytes(&c, &b1);
        CHECK(ta_calls == calls, "%s: %ld allocator calls during %zu reserved appends",
              pname, ta_calls - calls, n);
        CHECK(b1.allocated == b0.allocated, "%s: allocated %zu -> %zu across reserved appends",
              pname, b0.allocated, b1.allocated);
        CHECK(kvq_cache_check(&c) == KVQ_OK, "%s check: %s", pname, kvq_why());
        /* one more append past the reservation may allocate: still exact */
        kvq_cache_append(&c, K, V);
        kvq_cache_bytes(&c, &b1);
        CHECK(b1.allocated == ta_bytes, "%s after growth: allocated %zu, allocator holds %zu",
              pname, b1.allocated, ta_bytes);
        kvq_cache_free(&c);
        CHECK(ta_live == 0 && ta_bytes == 0, "%s: %ld blocks / %zu bytes leaked",
              pname, ta_live, ta_bytes);
        free(K); free(V);
    }
}

/* ======================================================================== */
/* 6. BAD INPUT leaves the cache unchanged.
   Every failing call must return its documented status (Sec. 2 table),
   write a reason into kvq_why() when it takes a mutable cache, and leave
   everything observable as it was: n_pos, census, bytes (allocated
   included: inputs are validated before anything is reserved) and the row
   every position reads back, on both sides, bit for bit. Output buffers
   poisoned with 0xA5 bytes must keep every byte on failure.               */
/* ======================================================================== */
typedef struct {
    size_t n_pos;
    kvq_census cen;
    kvq_bytes by;
    float *rows;          /* (2, n_pos, D) as read back                     */
} snap;

static void snap_take(snap *s, const kvq_cache *c)
{
    size_t D = c->cfg.head_dim, p;
    int side;
    memset(s, 0, sizeof *s);
    s->n_pos = c->n_pos;
    kvq_cache_census(c, &s->cen);
    kvq_cache_bytes(c, &s->by);
    s->rows = (float *)malloc((2 * c->n_pos * D + 1) * sizeof(float));
    for (side = 0; side < 2; side++)
        for (p = 0; p < c->n_pos; p++)
            kvq_cache_read(c, side, p, s->rows + ((size_t)side * c->n_pos + p) * D);
}
static void snap_free(snap *s) { free(s->rows); s->rows = NULL; }
static int snap_same(const snap *a, const snap *b, size_t D, int with_alloc)
{
    const kvq_bytes *x = &a->by, *y = &b->by;
    if (a->n_pos != b->n_pos) return 0;
    if (memcmp(&a->cen, &b->cen, sizeof a->cen) != 0) return 0;
    if (memcmp(x->codes, y->codes, sizeof x->codes) || memcmp(x->scale_zero, y->scale_zero,
        sizeof x->scale_zero) || memcmp(x->full_precision, y->full_precision,
        sizeof x->full_precision) || x->payload != y->payload || x->metadata != y->metadata ||
        x->tokens != y->tokens || x->bits_per_element != y->bits_per_element)
        return 0;
    if (with_alloc && x->allocated != y->allocated) return 0;
    return memcmp(a->rows, b->rows, 2 * a->n_pos * D * sizeof(float)) == 0;
}
/* kvq_why() names element i of `name` and why, as the element-by-element
   check always has: "is NaN" / "is Inf", or "= <value> exceeds"          */
static int why_names(const char *name, size_t i, float x)
{
    char want[128];
    if (x != x || x - x != 0.0f)
        snprintf(want, sizeof want, "%s element %zu is %s", name, i, x != x ? "NaN" : "Inf");
    else
        snprintf(want, sizeof want, "%s element %zu = %g exceeds", name, i, (double)x);
    return strstr(kvq_why(), want) != NULL;
}
static int poisoned(const void *buf, size_t n)
{
    const unsigned char *b = (const unsigned char *)buf;
    size_t i;
    for (i = 0; i < n; i++) if (b[i] != 0xA5) return 0;
    return 1;
}

static void test_bad_input(void)
{
    rng r = { 0xBAD1ull };
    int pol;
    for (pol = 0; pol < 3; pol++) {
        size_t D = pol == 2 ? 20 : 32, T = 5, i, n_pos, nf, ns;   /* D = 20: the
                                              input check's tail past 16 lanes */
        kvq_config cfg;
        kvq_cache c, e;
        snap before;
        const char *pname;
        float k[32], v[32], *K, *V, q[2 * 32], out[2 * 32], probs[2 * 64], rd[32];
        float *scratch;
        float badv[3], bigv[5];
        size_t at[3];
        int which, b;
        badv[0] = NAN; badv[1] = INFINITY; badv[2] = -INFINITY;
        bigv[0] = nextafterf(KVQ_MAX_ABS_INPUT, INFINITY);
        bigv[1] = -nextafterf(KVQ_MAX_ABS_INPUT, INFINITY);
        bigv[2] = 40000.0f; bigv[3] = 1e30f; bigv[4] = -3.40282347e38f;  /* -FLT_MAX */
        if (pol == 0) {
            cfg = kvq_config_kivi(D, 2); cfg.group = 8; cfg.residual = 16; pname = "KIVI";
        } else if (pol == 1) {
            kvq_hf_params hp = kvq_hf_defaults(4);
            hp.q_group_size = 16; hp.residual_length = 8;
            cfg = kvq_config_hf(D, hp); pname = "HF";
        } else { cfg = kvq_config_full(D, 16); pname = "FULL"; }
        K = gen_rows(&r, 40 + T, D, 0);
        V = gen_rows(&r, 40 + T, D, 0);
        CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "%s init", pname);
        CHECK(kvq_cache_prefill(&c, K, V, 37) == KVQ_OK, "%s prefill", pname);
        for (i = 0; i < 11; i++) {
            for (b = 0; b < (int)D; b++) { k[b] = rnorm(&r); v[b] = rnorm(&r); }
            kvq_cache_append(&c, k, v);
        }
        n_pos = c.n_pos;
        snap_take(&before, &c);
        for (b = 0; b < (int)D; b++) { k[b] = rnorm(&r); v[b] = rnorm(&r); }

#define BAD_CACHE(call, want, label)                                            \
        do {                                                                    \
            snap after_;                                                        \
            kvq_status st_;                                                     \
            why_clear();                                                    \
            st_ = (call);                                                       \
            CHECK(st_ == (want), "%s: %s returned %d (%s), want %d", pname,     \
                  label, (int)st_, kvq_status_str(st_), (int)(want));           \
            CHECK(kvq_why()[0] != '\0', "%s: %s left kvq_why() empty", pname, label);  \
            snap_take(&after_, &c);                                             \
            CHECK(snap_same(&before, &after_, D, 1), "%s: %s changed the cache", \
                  pname, label);                                                \
            snap_free(&after_);                                                 \
        } while (0)

        /* NULL pointers                                                    */
        CHECK(kvq_cache_append(NULL, k, v) == KVQ_ERR_NULL, "append(NULL cache)");
        CHECK(kvq_cache_prefill(NULL, K, V, T) == KVQ_ERR_NULL, "prefill(NULL cache)");
        CHECK(kvq_cache_reserve(NULL, 5) == KVQ_ERR_NULL, "reserve(NULL cache)");
        BAD_CACHE(kvq_cache_append(&c, NULL, v), KVQ_ERR_NULL, "append(k = NULL)");
        BAD_CACHE(kvq_cache_append(&c, k, NULL), KVQ_ERR_NULL, "append(v = NULL)");
        BAD_CACHE(kvq_cache_prefill(&c, NULL, V, T), KVQ_ERR_NULL, "prefill(K = NULL)");
        BAD_CACHE(kvq_cache_prefill(&c, K, NULL, T), KVQ_ERR_NULL, "prefill(V = NULL)");
        /* NaN / Inf / out of range at the first, a middle and the last
           element of k or v (append) and of K or V (prefill)              */
        at[0] = 0; at[1] = D / 2; at[2] = D - 1;
        for (which = 0; which < 2; which++)
            for (i = 0; i < 3; i++) {
                float *x = which ? v : k, saved = x[at[i]];
                char label[96];
                for (b = 0; b < 3; b++) {
                    x[at[i]] = badv[b];
                    snprintf(label, sizeof label, "append %s[%zu] = %g", which ? "v" : "k",
                             at[i], (double)badv[b]);
                    BAD_CACHE(kvq_cache_append(&c, k, v), KVQ_ERR_NONFINITE, label);
                    CHECK(why_names(which ? "v" : "k", at[i], badv[b]), "%s: %s: kvq_why() "
                          "is \"%s\"", pname, label, kvq_why());
                }
                for (b = 0; b < 5; b++) {
                    x[at[i]] = bigv[b];
                    snprintf(label, sizeof label, "append %s[%zu] = %g", which ? "v" : "k",
                             at[i], (double)bigv[b]);
                    BAD_CACHE(kvq_cache_append(&c, k, v), KVQ_ERR_RANGE, label);
                    CHECK(why_names(which ? "v" : "k", at[i], bigv[b]), "%s: %s: kvq_why() "
                          "is \"%s\"", pname, label, kvq_why());
                }
                x[at[i]] = saved;
            }
        at[0] = 0; at[1] = T * D / 2; at[2] = T * D - 1;
        for (which = 0; which < 2; which++)
            for (i = 0; i < 3; i++) {
                float *X = which ? V : K, saved = X[at[i]];
                char label[96];
                for (b = 0; b < 3; b++) {
                    X[at[i]] = badv[b];
                    snprintf(label, sizeof label, "prefill %s[%zu] = %g", which ? "V" : "K",
                             at[i], (double)badv[b]);
                    BAD_CACHE(kvq_cache_prefill(&c, K, V, T), KVQ_ERR_NONFINITE, label);
                    CHECK(why_names(which ? "V" : "K", at[i], badv[b]), "%s: %s: kvq_why() "
                          "is \"%s\"", pname, label, kvq_why());
                }
                for (b = 0; b < 5; b++) {
                    X[at[i]] = bigv[b];
                    snprintf(label, sizeof label, "prefill %s[%zu] = %g", which ? "V" : "K",
                             at[i], (double)X[at[i]]);
                    BAD_CACHE(kvq_cache_prefill(&c, K, V, T), KVQ_ERR_RANGE, label);
                    CHECK(why_names(which ? "V" : "K", at[i], bigv[b]), "%s: %s: kvq_why() "
                          "is \"%s\"", pname, label, kvq_why());
                }
                /* two bad elements: the earlier one is named, whichever
                   kind either is (the last element holds the other)     */
                if (at[i] + 1 < T * D) {
                    float last = X[T * D - 1];
                    X[at[i]] = bigv[4];
                    X[T * D - 1] = NAN;
                    snprintf(label, sizeof label, "prefill %s[%zu] = -FLT_MAX, last NaN",
                             which ? "V" : "K", at[i]);
                    BAD_CACHE(kvq_cache_prefill(&c, K, V, T), KVQ_ERR_RANGE, label);
                    CHECK(why_names(which ? "V" : "K", at[i], bigv[4]), "%s: %s: kvq_why() "
                          "is \"%s\"", pname, label, kvq_why());
                    X[at[i]] = INFINITY;
                    X[T * D - 1] = bigv[3];
                    snprintf(label, sizeof label, "prefill %s[%zu] = Inf, last 1e30",
                             which ? "V" : "K", at[i]);
                    BAD_CACHE(kvq_cache_prefill(&c, K, V, T), KVQ_ERR_NONFINITE, label);
                    CHECK(why_names(which ? "V" : "K", at[i], INFINITY), "%s: %s: kvq_why() "
                          "is \"%s\"", pname, label, kvq_why());
                    X[T * D - 1] = last;
                }
                X[at[i]] = saved;
            }
        BAD_CACHE(kvq_cache_prefill(&c, K, V, 0), KVQ_ERR_SIZE, "prefill T = 0");
        BAD_CACHE(kvq_cache_prefill(&c, K, V, (size_t)-1 / D + 1), KVQ_ERR_OVERFLOW,
                  "prefill T*D overflow");
        BAD_CACHE(kvq_cache_prefill(&c, K, V, (size_t)-1), KVQ_ERR_OVERFLOW,
                  "prefill T = SIZE_MAX");
        BAD_CACHE(kvq_cache_reserve(&c, 0), KVQ_ERR_SIZE, "reserve(0)");
        BAD_CACHE(kvq_cache_reserve(&c, KVQ_MAX_POSITIONS + 1), KVQ_ERR_CAPACITY,
                  "reserve(KVQ_MAX_POSITIONS + 1)");
        BAD_CACHE(kvq_cache_reserve(&c, KVQ_MAX_POSITIONS - n_pos + 1), KVQ_ERR_CAPACITY,
                  "reserve past KVQ_MAX_POSITIONS");

        /* attention: the cache is const, so no reason is written; the
           outputs keep their poison                                       */
        for (i = 0; i < 2 * D; i++) q[i] = rnorm(&r);
        ns = kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER);
        scratch = (float *)malloc((ns + 8) * sizeof(float));
#define BAD_ATTEND(call, want, label)                                           \
        do {                                                                    \
            snap after_;                                                        \
            kvq_status st_;                                                     \
            memset(out, 0xA5, sizeof out);                                      \
            memset(probs, 0xA5, sizeof probs);                                  \
            st_ = (call);                                                       \
            CHECK(st_ == (want), "%s: %s returned %d (%s), want %d", pname,     \
                  label, (int)st_, kvq_status_str(st_), (int)(want));           \
            CHECK(poisoned(out, sizeof out) && poisoned(probs, sizeof probs),   \
                  "%s: %s wrote to out/probs on failure", pname, label);        \
            snap_take(&after_, &c);                                             \
            CHECK(snap_same(&before, &after_, D, 1), "%s: %s changed the cache", \
                  pname, label);                                                \
            snap_free(&after_);                                                 \
        } while (0)
        BAD_ATTEND(kvq_attend(NULL, q, 1, out, NULL, KVQ_ATTN_EAGER, scratch, ns),
                   KVQ_ERR_NULL, "attend(NULL cache)");
        BAD_ATTEND(kvq_attend(&c, NULL, 1, out, NULL, KVQ_ATTN_EAGER, scratch, ns),
                   KVQ_ERR_NULL, "attend(q = NULL)");
        BAD_ATTEND(kvq_attend(&c, q, 1, NULL, probs, KVQ_ATTN_EAGER, scratch, ns),
                   KVQ_ERR_NULL, "attend(out = NULL)");
        BAD_ATTEND(kvq_attend(&c, q, 1, out, probs, KVQ_ATTN_EAGER, NULL, ns),
                   KVQ_ERR_NULL, "attend(scratch = NULL)");
        BAD_ATTEND(kvq_attend(&c, q, 1, out, probs, KVQ_ATTN_EAGER, scratch, ns - 1),
                   KVQ_ERR_SIZE, "attend eager, scratch one float short");
        nf = kvq_attend_scratch_floats(&c, KVQ_ATTN_ONLINE);
        BAD_ATTEND(kvq_attend(&c, q, 1, out, NULL, KVQ_ATTN_ONLINE, scratch, nf - 1),
                   KVQ_ERR_SIZE, "attend online, scratch one float short");
        BAD_ATTEND(kvq_attend(&c, q, 0, out, probs, KVQ_ATTN_EAGER, scratch, ns),
                   KVQ_ERR_SIZE, "attend n_q = 0");
        BAD_ATTEND(kvq_attend(&c, q, 1, out, probs, KVQ_ATTN_ONLINE, scratch, ns),
                   KVQ_ERR_CONFIG, "attend online with probs");
        BAD_ATTEND(kvq_attend(&c, q, 1, out, NULL, (kvq_attn_mode)7, scratch, ns),
                   KVQ_ERR_CONFIG, "attend with an unknown mode");
        at[0] = 0; at[1] = D + 3; at[2] = 2 * D - 1;     /* over 2 query heads */
        for (i = 0; i < 3; i++) {
            float saved = q[at[i]];
            for (b = 0; b < 3; b++) {
                char label[64];
                q[at[i]] = badv[b];
                snprintf(label, sizeof label, "attend q[%zu] = %g", at[i], (double)badv[b]);
                BAD_ATTEND(kvq_attend(&c, q, 2, out, probs, KVQ_ATTN_EAGER, scratch, ns),
                           KVQ_ERR_NONFINITE, label);
                BAD_ATTEND(kvq_attend(&c, q, 2, out, NULL, KVQ_ATTN_ONLINE, scratch, ns),
                           KVQ_ERR_NONFINITE, label);
            }
            q[at[i]] = saved;
        }
        /* kvq_cache_read: bad side, absent position, NULL out            */
        memset(rd, 0xA5, sizeof rd);
        CHECK(kvq_cache_read(&c, 2, 0, rd) == KVQ_ERR_SIZE, "%s: read side 2", pname);
        CHECK(kvq_cache_read(&c, -1, 0, rd) == KVQ_ERR_SIZE, "%s: read side -1", pname);
        CHECK(kvq_cache_read(&c, 0, n_pos, rd) == KVQ_ERR_STATE, "%s: read pos = n_pos", pname);
        CHECK(kvq_cache_read(&c, 1, n_pos + 100, rd) == KVQ_ERR_STATE, "%s: read pos > n_pos",
              pname);
        CHECK(kvq_cache_read(&c, 0, (size_t)-1, rd) == KVQ_ERR_STATE, "%s: read pos SIZE_MAX",
              pname);
        CHECK(kvq_cache_read(NULL, 0, 0, rd) == KVQ_ERR_NULL, "%s: read NULL cache", pname);
        CHECK(kvq_cache_read(&c, 0, 0, NULL) == KVQ_ERR_NULL, "%s: read NULL out", pname);
        CHECK(poisoned(rd, sizeof rd), "%s: a failed read wrote to out", pname);
        /* census/bytes/check with NULL                                    */
        CHECK(kvq_cache_census(NULL, &before.cen) == KVQ_ERR_NULL, "census(NULL)");
        CHECK(kvq_cache_bytes(&c, NULL) == KVQ_ERR_NULL, "bytes(NULL out)");
        CHECK(kvq_cache_check(NULL) == KVQ_ERR_NULL, "check(NULL)");
        {
            snap after;
            snap_take(&after, &c);
            CHECK(snap_same(&before, &after, D, 1), "%s: cache changed by the bad calls", pname);
            snap_free(&after);
        }
        /* the boundary is accepted: |x| == KVQ_MAX_ABS_INPUT, and the cache
           still works after all the failures                              */
        for (b = 0; b < (int)D; b++) {
            k[b] = (b & 1) ? KVQ_MAX_ABS_INPUT : -KVQ_MAX_ABS_INPUT;
            v[b] = -k[b];
        }
        CHECK(kvq_cache_append(&c, k, v) == KVQ_OK, "%s: |x| = KVQ_MAX_ABS_INPUT rejected: %s",
              pname, kvq_why());
        CHECK(kvq_cache_check(&c) == KVQ_OK, "%s: check after the bad calls: %s", pname, kvq_why());
        CHECK(c.n_pos == n_pos + 1, "%s: n_pos %zu after one good append", pname, c.n_pos);
        /* an empty cache: attention has nothing to attend (KVQ_ERR_STATE) */
        CHECK(kvq_cache_init(&e, &cfg) == KVQ_OK, "%s init empty", pname);
        memset(out, 0xA5, sizeof out);
        CHECK(kvq_attend(&e, q, 1, out, NULL, KVQ_ATTN_EAGER, scratch, ns) == KVQ_ERR_STATE &&
              kvq_attend(&e, q, 1, out, NULL, KVQ_ATTN_ONLINE, scratch, ns) == KVQ_ERR_STATE,
              "%s: attend on an empty cache is not KVQ_ERR_STATE", pname);
        CHECK(poisoned(out, sizeof out), "%s: attend on an empty cache wrote out", pname);
        CHECK(kvq_cache_read(&e, 0, 0, rd) == KVQ_ERR_STATE, "%s: read on empty cache", pname);
        CHECK(e.n_pos == 0 && kvq_cache_check(&e) == KVQ_OK, "%s: empty cache state", pname);
        kvq_cache_free(&e);
        free(scratch);
        snap_free(&before);
        kvq_cache_free(&c);
        free(K); free(V);
#undef BAD_CACHE
#undef BAD_ATTEND
    }
    /* B = 1 with groups spanning +-KVQ_MAX_ABS_INPUT: scale 65504 still fits
       fp16 (the bound's reason), and the rows read back finite             */
    {
        kvq_config cfg = kvq_config_kivi(16, 1);
        kvq_cache c;
        float x[16], y[16];
        size_t i, d;
        int ok = 1;
        cfg.group = 4; cfg.residual = 4;
        CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "B=1 init");
        for (i = 0; i < 30; i++) {
            for (d = 0; d < 16; d++)
                x[d] = ((i + d) & 1) ? KVQ_MAX_ABS_INPUT : -KVQ_MAX_ABS_INPUT;
            ok = ok && kvq_cache_append(&c, x, x) == KVQ_OK;
        }
        CHECK(ok && kvq_cache_check(&c) == KVQ_OK, "B=1 extreme stream: %s", kvq_why());
        for (i = 0; i < 30; i++) {
            kvq_cache_read(&c, (int)(i & 1), i, y);
            CHECK(all_finite(y, 16), "B=1 extreme row %zu not finite", i);
        }
        kvq_cache_free(&c);
    }
}

/* 6 (configs). kvq_config_validate and kvq_cache_init reject each broken
   config with its documented status and a reason; init on a cache struct
   full of garbage allocates nothing (allocator ledger unchanged).         */
static void test_bad_config(void)
{
    typedef struct { const char *name; kvq_config cfg; kvq_status want; } bad;
    bad cases[24];
    int n = 0, i;
    kvq_hf_params hp;
    kvq_cache c;
#define ADD(nm, expr, st) do { cases[n].name = nm; cases[n].cfg = kvq_config_kivi(64, 2); \
                               { kvq_config *x = &cases[n].cfg; expr; } cases[n].want = st; n++; } while (0)
    ADD("key bits 5", x->key_bits = 5, KVQ_ERR_BITS);
    ADD("value bits 5", x->value_bits = 5, KVQ_ERR_BITS);
    ADD("bits 0", x->key_bits = x->value_bits = 0, KVQ_ERR_BITS);
    ADD("bits 16", x->key_bits = 16, KVQ_ERR_BITS);
    ADD("G = 0", x->group = 0, KVQ_ERR_SIZE);
    ADD("G = 32 does not divide D = 80 (per-token values)", x->head_dim = 80, KVQ_ERR_GROUP);
    ADD("G = 32 does not divide R = 48 (per-channel keys)", x->residual = 48, KVQ_ERR_GROUP);
    ADD("value group 48 does not divide D = 64", x->value_group = 48, KVQ_ERR_GROUP);
    ADD("R = 0", x->residual = 0, KVQ_ERR_SIZE);
    ADD("D = 0", x->head_dim = 0, KVQ_ERR_SIZE);
    ADD("fp_bits 8", x->fp_bits = 8, KVQ_ERR_CONFIG);
    ADD("policy 99", x->policy = (kvq_policy)99, KVQ_ERR_CONFIG);
    ADD("policy -1", x->policy = (kvq_policy)-1, KVQ_ERR_CONFIG);
    ADD("zero mode 7", x->zero_mode = (kvq_zero_mode)7, KVQ_ERR_CONFIG);
    ADD("CUSTOM, key schedule 9", (x->policy = KVQ_POLICY_CUSTOM, x->key_schedule = (kvq_schedule)9),
        KVQ_ERR_CONFIG);
    ADD("key axis 5", x->key_axis = (kvq_axis)5, KVQ_ERR_CONFIG);
    hp = kvq_hf_defaults(5);
    cases[n].name = "HF nbits 5"; cases[n].cfg = kvq_config_hf(64, hp); cases[n].want = KVQ_ERR_BITS; n++;
    hp = kvq_hf_defaults(2); hp.q_group_size = 48;
    cases[n].name = "HF G = 48, D = 64"; cases[n].cfg = kvq_config_hf(64, hp); cases[n].want = KVQ_ERR_GROUP; n++;
    hp = kvq_hf_defaults(2); hp.q_group_size = 32; hp.residual_length = 48; hp.axis_key = KVQ_PER_CHANNEL;
    cases[n].name = "HF per-channel keys, G = 32, R = 48"; cases[n].cfg = kvq_config_hf(64, hp);
    cases[n].want = KVQ_ERR_GROUP; n++;
    hp = kvq_hf_defaults(4); hp.zero_mode = (kvq_zero_mode)2;  /* neither HF rule */
    cases[n].name = "HF zero mode 2"; cases[n].cfg = kvq_config_hf(64, hp);
    cases[n].want = KVQ_ERR_CONFIG; n++;
#undef ADD
    for (i = 0; i < n; i++) {
        long live = ta_live;
        size_t bytes = ta_bytes;
        kvq_status st;
        why_clear();
        st = kvq_config_validate(&cases[i].cfg);
        CHECK(st == cases[i].want, "validate %s: %d (%s), want %d", cases[i].name, (int)st,
              kvq_status_str(st), (int)cases[i].want);
        CHECK(kvq_why()[0] != '\0', "validate %s: no reason given", cases[i].name);
        memset(&c, 0xA5, sizeof c);
        why_clear();
        st = kvq_cache_init(&c, &cases[i].cfg);
        CHECK(st == cases[i].want, "init %s: %d, want %d", cases[i].name, (int)st,
              (int)cases[i].want);
        CHECK(kvq_why()[0] != '\0', "init %s: no reason in kvq_why()", cases[i].name);
        CHECK(ta_live == live && ta_bytes == bytes, "init %s: allocated %ld blocks on failure",
              cases[i].name, ta_live - live);
    }
    CHECK(kvq_config_validate(NULL) == KVQ_ERR_NULL, "validate(NULL)");
    CHECK(kvq_cache_init(NULL, &cases[0].cfg) == KVQ_ERR_NULL, "init(NULL cache)");
    CHECK(kvq_cache_init(&c, NULL) == KVQ_ERR_NULL, "init(NULL config)");
    {   /* valid configs pass; a cache initialized after the failures frees
           cleanly and leaves nothing behind                               */
        kvq_config ok[3];
        ok[0] = kvq_config_kivi(128, 2);
        ok[1] = kvq_config_hf(128, kvq_hf_defaults(4));
        ok[2] = kvq_config_full(128, 16);
        for (i = 0; i < 3; i++) {
            CHECK(kvq_config_validate(&ok[i]) == KVQ_OK, "valid config %d: %s",
                  i, kvq_why());
            memset(&c, 0xA5, sizeof c);
            CHECK(kvq_cache_init(&c, &ok[i]) == KVQ_OK, "init valid config %d", i);
            kvq_cache_free(&c);
            kvq_cache_free(&c);                 /* freeing twice is harmless */
            CHECK(ta_live == 0, "valid config %d: %ld blocks left after free", i, ta_live);
        }
        kvq_cache_free(NULL);
    }
}

/* ======================================================================== */
/* 7. ALLOCATOR FAILURE at every allocation index.
   For each operation of a stream (prefill first, then appends, and a
   reserve), the allocator is told to fail attempt k = 0, 1, 2, ... of that
   operation until the operation no longer reaches attempt k. Each failure
   must return KVQ_ERR_NOMEM with a reason, leave the cache's content as it
   was (census, payload bytes, every row; capacity may have grown, since a
   reallocation that succeeded before the failing one is kept and is
   harmless), and leave it usable: the retried operation succeeds, the
   regions still match the simulator and kvq_cache_check is OK. After
   kvq_cache_free the ledger is empty (no leaks on any path). kvq_cache_init
   and kvq_attend_dense are failed at every index too.                     */
/* ======================================================================== */
static void test_alloc_failure(void)
{
    rng r = { 0xA110Cull };
    int pol;
    long injected = 0;
    char msg[256];
    for (pol = 0; pol < 4; pol++) {
        size_t D = 16, steps = QUICK ? 40 : 140, T0 = 5 + rbelow(&r, 20), s;
        kvq_config cfg;
        kvq_cache c;
        sim S;
        float *K, *V;
        long k;
        const char *pname;
        if (pol == 0) { cfg = kvq_config_kivi(D, 2); cfg.group = 4; cfg.residual = 8; pname = "KIVI"; }
        else if (pol == 1) {
            kvq_hf_params hp = kvq_hf_defaults(2);
            hp.q_group_size = 8; hp.residual_length = 4;
            cfg = kvq_config_hf(D, hp); pname = "HF";
        } else if (pol == 2) { cfg = kvq_config_full(D, 32); pname = "FULL"; }
        else {
            kvq_hf_params hp = kvq_hf_defaults(4);
            hp.q_group_size = 4; hp.residual_length = 8; hp.axis_key = KVQ_PER_CHANNEL;
            cfg = kvq_config_hf(D, hp); cfg.hf_requantize = 0; pname = "HF per-channel";
        }
        K = gen_rows(&r, T0 + steps + 64, D, 0);
        V = gen_rows(&r, T0 + steps + 64, D, 0);
        /* init failing at each allocation                                  */
        for (k = 0; ; k++) {
            long base = ta_calls;
            kvq_status st;
            memset(&c, 0, sizeof c);
            ta_fail_at = base + k;
            st = kvq_cache_init(&c, &cfg);
            ta_fail_at = -1;
            if (ta_calls - base <= k) {
                CHECK(st == KVQ_OK, "%s init without injected failure: %d", pname, (int)st);
                kvq_cache_free(&c);
                break;
            }
            injected++;
            CHECK(st == KVQ_ERR_NOMEM, "%s init, allocation %ld fails: %d", pname, k, (int)st);
            CHECK(ta_live == 0 && ta_bytes == 0, "%s init failing at %ld leaked %ld blocks",
                  pname, k, ta_live);
        }
        CHECK(kvq_cache_init(&c, &cfg) == KVQ_OK, "%s init", pname);
        sim_init(&S, &cfg, T0 + steps + 64);
        for (s = 0; s <= steps; s++) {
            /* op: s = 0 prefill T0; then appends; at s = steps/2 a reserve */
            snap before;
            snap_take(&before, &c);
            for (k = 0; ; k++) {
                long base = ta_calls;
                kvq_status st;
                snap after;
                why_clear();
                ta_fail_at = base + k;
                if (s == 0) st = kvq_cache_prefill(&c, K, V, T0);
                else if (s == steps / 2) st = kvq_cache_reserve(&c, 40);
                else st = kvq_cache_append(&c, K + c.n_pos * D, V + c.n_pos * D);
                ta_fail_at = -1;
                if (ta_calls - base <= k) {        /* attempt k never came */
                    CHECK(st == KVQ_OK, "%s op %zu: %d (%s)", pname, s, (int)st, kvq_why());
                    break;
                }
                injected++;
                CHECK(st == KVQ_ERR_NOMEM, "%s op %zu, allocation %ld fails: returned %d",
                      pname, s, k, (int)st);
                CHECK(kvq_why()[0] != '\0', "%s op %zu: NOMEM without a reason", pname, s);
                snap_take(&after, &c);
                CHECK(snap_same(&before, &after, D, 0), "%s op %zu: failing allocation %ld "
                      "changed the cache's content", pname, s, k);
                CHECK(kvq_cache_check(&c) == KVQ_OK, "%s op %zu after NOMEM: %s", pname, s, kvq_why());
                snap_free(&after);
            }
            snap_free(&before);
            if (s == 0) sim_prefill(&S, T0);
            else if (s != steps / 2) sim_append(&S);
            CHECK(cmp_sched(&c, &S, msg, sizeof msg) && kvq_cache_check(&c) == KVQ_OK,
                  "%s op %zu after retry: %s %s", pname, s, msg, kvq_why());
        }
        {   /* rows still hold exactly what the reference says             */
            const float *src[2];
            src[0] = K; src[1] = V;
            if (cfg.policy != KVQ_POLICY_HF || !cfg.hf_requantize)
                CHECK(cmp_content(&c, &cfg, &S, src, msg, sizeof msg),
                      "%s content after the failure stream: %s", pname, msg);
        }
        /* kvq_attend_dense's one allocation                               */
        {
            float q[16], out[16];
            memset(q, 0, sizeof q);
            memset(out, 0xA5, sizeof out);
            ta_fail_at = ta_calls;
            CHECK(kvq_attend_dense(K, V, 3, D, q, 1, out, NULL) == KVQ_ERR_NOMEM,
                  "attend_dense with a failing allocator");
            ta_fail_at = -1;
            CHECK(poisoned(out, sizeof out), "attend_dense wrote out on NOMEM");
        }
        kvq_cache_free(&c);
        sim_free(&S);
        CHECK(ta_live == 0 && ta_bytes == 0 && !ta_broken,
              "%s: %ld blocks (%zu bytes) leaked after free", pname, ta_live, ta_bytes);
        free(K); free(V);
    }
    CHECK(injected > 50, "only %ld allocation failures were injected", injected);
    printf("  allocator: %ld failures injected\n", injected);
}

int main(void)
{
    test_kivi_schedule();
    test_hf_schedule();
    test_hf_first_token();
    test_full_content();
    test_attention_agreement();
    test_attention_full32();
    test_attention_map_check();
    test_attention_rows_shapes();
    test_attention_b8_bound();
    test_attention_large_logits();
    test_exp16();
    test_bytes_and_reserve();
    test_bad_input();
    test_bad_config();
    test_alloc_failure();
    CHECK(!ta_broken, "allocator ledger lost track of a block");
    return TEST_END("test_cache");
}
