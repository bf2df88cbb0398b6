/* fuzz/fuzz_cache.c - random sequences of cache operations against a
   full-precision shadow.

   The first 8 bytes choose a configuration (any policy, D in {4, 8, 16}
   or {1, 2, 16} or the non-powers of two {3, 6, 12}, bits, G, R, axes,
   zero mode, fp16/fp32 rows, OTT k and auxiliary pool, LogQuant W and
   sinks, HF re-quantization, a rotation per side (none, Hadamard,
   Hadamard with signs; then 8 more bytes are the sign seed; b[5] bit 2: a
   format of kvq.h Sec. 4.1 on each side (bits 3-7 pick which); a rotation
   with D not a power of two must be refused with KVQ_ERR_SIZE and a
   reason, allocating nothing); with b[7] bit 7 any size
   field or enum may take a hostile value instead; an invalid config must
   be refused with a reason, and then the input ends; fields the policy
   does not read are ignored and never size an allocation). Every later byte starts an op:
     append   one token; its values come from the input, and a few byte
              values are NaN, +-Inf, out-of-range or boundary values
     prefill  1..24 tokens from a seeded generator (sometimes one bad value)
     attend   EAGER or ONLINE, 1..3 query heads, probs sometimes
     evict    a random keep mask (StreamingLLM, H2O or arbitrary)
     compact  with a random block size
     reserve  a few tokens
   (append, prefill and reserve sometimes run with one of their allocations
   failed: they must return NOMEM and leave the cache as it was)
     read     every position, present or not
   The shadow keeps every appended row in fp32 and which positions are
   alive. After EVERY op:
     - a refused op returned the status its input calls for (NONFINITE,
       RANGE, CONFIG for eviction under OTT/LogQuant) and left the cache
       unchanged (n_pos, census, every row bit for bit);
     - kvq_cache_check passes; the census counts exactly the shadow's live
       positions on both sides (positions conserved: none lost, none twice);
     - full-precision bounds hold (kvq_cache_check's window rules; OTT pool
       <= k, auxiliary <= its capacity);
   and after attend: the output is finite, EAGER probs sum to 1 over
   present positions and are 0 elsewhere, and the output equals exact
   attention (double) over the cache's OWN rows (kvq_cache_read) within an
   fp32 rounding bound; after read: each live row is within the
   quantization bound of the shadow's row (float zero; the integer form's
   clamped zero point can reach |x|, so it gets |x|-scale slack).
   A rotating side (kvq.h Sec. 6.1) is checked against this file's own
   rotation: the explicit matrix H_ij = (-1)^popcount(i & j) / sqrt(D) in
   double, signs from fz_mix (splitmix64), not kvq.h's butterflies. Reads
   must come back in the caller's basis: R (read row) must lie within the
   quantization bound of R (shadow row), the basis where the bound holds,
   with the range taken over the rotated rows; attention is compared with
   exact attention over the read-back rows, the bound widened by the fp32
   rounding of the rotations (rot_err). A row whose rotation exceeds
   KVQ_MAX_ABS_INPUT must be refused with RANGE (within 1e-5 of the limit
   either answer is accepted: fp32 and double may round across it).        */
#include <stdio.h>
#include <stdlib.h>
/* An allocator that fails on request: an append, prefill or reserve op
   with bit 6 set arms a failure of one of its next few allocations.
   No single allocation may exceed FA_CAP: with D <= 16 and every field a
   policy reads <= 65536, nothing legitimate comes near it, so a larger
   request means a size was formed from an unchecked field (issue 16).     */
#define FA_CAP ((size_t)64 << 20)
static long fa_calls, fa_fail_at = -1;
static void fa_cap(size_t n)
{
    if (n > FA_CAP) { fprintf(stderr, "FZ_ASSERT: allocation of %zu bytes\n", n); abort(); }
}
static void *fa_malloc(size_t n) { fa_cap(n); return fa_calls++ == fa_fail_at ? NULL : malloc(n); }
static void *fa_realloc(void *p, size_t n) { fa_cap(n); return fa_calls++ == fa_fail_at ? NULL : realloc(p, n); }
#define KVQ_MALLOC(sz)     fa_malloc(sz)
#define KVQ_REALLOC(p, sz) fa_realloc(p, sz)
#define KVQ_FREE(p)        free(p)
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "fuzz.h"

#define MAXP 640            /* positions per run                            */
#define MAXD 16

static float SK[MAXP * MAXD], SV[MAXP * MAXD];   /* shadow rows (fp32)      */
static uint8_t alive[MAXP];
static size_t n_shadow;
static double amax;                              /* max |value| appended    */

typedef struct { size_t n_pos; kvq_census cen; float rows[2 * MAXP * MAXD]; } snap;
static snap before, after;

static void snap_take(snap *s, const kvq_cache *c)
{
    size_t p, D = c->cfg.head_dim;
    int side;
    s->n_pos = c->n_pos;
    kvq_cache_census(c, &s->cen);
    for (side = 0; side < 2; side++)
        for (p = 0; p < c->n_pos; p++) {
            float *o = s->rows + ((size_t)side * MAXP + p) * MAXD;
            memset(o, 0, MAXD * sizeof(float));
            if (kvq_cache_read(c, side, p, o) != KVQ_OK) memset(o, 0xEE, D * sizeof(float));
        }
}
static int snap_same(const snap *a, const snap *b)
{
    size_t side;
    if (a->n_pos != b->n_pos || memcmp(&a->cen, &b->cen, sizeof a->cen)) return 0;
    for (side = 0; side < 2; side++)
        if (memcmp(a->rows + side * MAXP * MAXD, b->rows + side * MAXP * MAXD,
                   a->n_pos * MAXD * sizeof(float)))
            return 0;
    return 1;
}

/* One value from a byte: mostly a small grid, a few special values.       */
static float value_of(uint8_t v, float scale)
{
    switch (v) {
    case 250: return NAN;
    case 251: return INFINITY;
    case 252: return -INFINITY;
    case 253: return 40000.0f;
    case 254: return KVQ_MAX_ABS_INPUT;
    case 255: return -KVQ_MAX_ABS_INPUT;
    case 249: return 1e-40f;                       /* fp32 subnormal        */
    case 248: return -0.0f;
    default:  return (float)((int)v - 124) * scale;
    }
}

/* ---- the oracle's rotation ---------------------------------------------- */
static size_t rot_D;
static int rot_on[2];                            /* side rotates            */
static double rot_sign[2][MAXD];                 /* +-1 (all +1: HADAMARD)  */
static double amax_st[2];                        /* max |stored value|      */

/* |fl32 rotation - exact| per element for a row of L1 norm l1: log2(D)
   butterfly stages, each error at most doubling, then the scale: below
   (D + 2) u l1 / sqrt(D); twice that for slack.                           */
static double rot_err(double l1)
{
    return 2.0 * ((double)rot_D + 2.0) * ldexp(1.0, -24) * l1 / sqrt((double)rot_D);
}
static double l1_of(const double *x) { double s = 0.0; size_t i; for (i = 0; i < rot_D; i++) s += fabs(x[i]); return s; }

/* y = R x of side s in double (x untouched when the side does not rotate). */
static void rot_ref(int s, const float *x, double *y)
{
    size_t i, j, D = rot_D;
    for (i = 0; i < D; i++) {
        double acc = 0.0;
        if (!rot_on[s]) { y[i] = x[i]; continue; }
        for (j = 0; j < D; j++) {
            unsigned m = (unsigned)(i & j), odd = 0;
            while (m) { odd ^= m & 1u; m >>= 1; }
            acc += (odd ? -1.0 : 1.0) * rot_sign[s][j] * x[j];
        }
        y[i] = acc / sqrt((double)D);
    }
}

static void rot_setup(const kvq_config *cfg)
{
    int s;
    size_t j;
    rot_D = cfg->head_dim;
    for (s = 0; s < 2; s++) {
        kvq_rotation kind = s ? cfg->value_rotation : cfg->key_rotation;
        uint64_t state = cfg->rotation_seed;
        rot_on[s] = kind != KVQ_ROT_NONE;
        for (j = 0; j < rot_D; j++)   /* s_j: bit 63 of splitmix64's j-th output */
            rot_sign[s][j] = kind == KVQ_ROT_HADAMARD_SIGNS && (fz_mix(&state) >> 63) ? -1.0 : 1.0;
    }
}

/* The status kvq.h's input policy gives K then V (n values each): the
   first bad element in that order decides (Sec. 2).
   A valid input whose rotated rows exceed the limit is RANGE; EITHER when
   a rotated element lies within 1e-5 of it (then RANGE or OK is right).   */
#define EITHER (-100)
static int expected_status(const float *K, const float *V, size_t n)
{
    size_t i;
    double y[MAXD], big = 0.0;
    for (i = 0; i < 2 * n; i++) {
        float x = i < n ? K[i] : V[i - n];
        if (!isfinite(x)) return KVQ_ERR_NONFINITE;
        if (fabsf(x) > KVQ_MAX_ABS_INPUT) return KVQ_ERR_RANGE;
    }
    for (i = 0; i < 2 * n; i += rot_D) {
        size_t j, s = i >= n;
        rot_ref((int)s, (s ? V : K) + i % n, y);
        for (j = 0; j < rot_D; j++) if (fabs(y[j]) > big) big = fabs(y[j]);
    }
    if (big > KVQ_MAX_ABS_INPUT * (1.0 + 1e-5)) return KVQ_ERR_RANGE;
    return big >= KVQ_MAX_ABS_INPUT * (1.0 - 1e-5) ? EITHER : KVQ_OK;
}

static void check_invariants(kvq_cache *c)
{
    kvq_census cen;
    size_t p, live = 0, side;
    FZ_ASSERT(kvq_cache_check(c) == KVQ_OK, "invariant: %s", kvq_why());
    FZ_ASSERT(c->n_pos == n_shadow, "n_pos %zu vs shadow %zu", c->n_pos, n_shadow);
    FZ_ASSERT(kvq_cache_census(c, &cen) == KVQ_OK, "census");
    for (p = 0; p < n_shadow; p++) live += alive[p];
    for (side = 0; side < 2; side++) {
        size_t in = cen.quantized[side] + cen.absent[side];
        int r;
        for (r = 0; r < KVQ_ROW_REGIONS; r++) in += cen.rows[side][r];
        FZ_ASSERT(in == n_shadow && n_shadow - cen.absent[side] == live,
                  "side %zu: %zu present, shadow %zu alive", side, n_shadow - cen.absent[side], live);
    }
    if (c->cfg.policy == KVQ_POLICY_OTT)
        FZ_ASSERT(c->k.rows[KVQ_ROWS_OUTLIER].n <= c->cfg.ott_k &&
                  c->k.rows[KVQ_ROWS_AUX].n <= c->cfg.ott_aux, "OTT pools over capacity");
}

/* Exact attention in double over the cache's own rows (kvq_cache_read, the
   caller's basis) vs kvq_attend. kvq_attend's algebra runs on the stored
   rows, so the score bound is taken in the stored basis: ks = R k, qs = R q
   (qs . ks = q . k exactly in real arithmetic).                            */
static void check_attention(kvq_cache *c, const float *q, size_t nq, const float *out,
                            const float *probs)
{
    size_t D = c->cfg.head_dim, h, p, d;
    static float kr[MAXP * MAXD], vr[MAXP * MAXD];
    static double ks[MAXP * MAXD], w[MAXP];
    double kmax = 0.0, vmax = 0.0, vmax_st = 0.0, amax_all = amax, rot_v = 0.0, vs[MAXD];
    size_t n_live = 0;
    if (amax_st[0] > amax_all) amax_all = amax_st[0];
    if (amax_st[1] > amax_all) amax_all = amax_st[1];
    for (p = 0; p < c->n_pos; p++) {
        if (!alive[p]) continue;
        n_live++;
        FZ_ASSERT(kvq_cache_read(c, 0, p, kr + p * D) == KVQ_OK &&
                  kvq_cache_read(c, 1, p, vr + p * D) == KVQ_OK, "live position %zu unreadable", p);
        rot_ref(0, kr + p * D, ks + p * D);
        rot_ref(1, vr + p * D, vs);
        for (d = 0; d < D; d++) {
            if (fabs(ks[p * D + d]) > kmax) kmax = fabs(ks[p * D + d]);
            if (fabs(vr[p * D + d]) > vmax) vmax = fabs(vr[p * D + d]);
            if (fabs(vs[d]) > vmax_st) vmax_st = fabs(vs[d]);
        }
    }
    /* rotated values: each read-back row and the output rotate back once  */
    if (rot_on[1]) rot_v = 2.0 * rot_err((double)D * vmax_st * 1.0001);
    for (h = 0; h < nq; h++) {
        const float *qh = q + h * D;
        double mx = -INFINITY, sum = 0.0, t = 0.0, bound, psum = 0.0, qs[MAXD], q1 = 0.0;
        rot_ref(0, qh, qs);
        for (d = 0; d < D; d++) q1 += fabs(qh[d]);
        for (p = 0; p < c->n_pos; p++) {
            double s = 0.0, tp = 0.0, k1 = 0.0;
            if (!alive[p]) continue;
            for (d = 0; d < D; d++) {
                s += qs[d] * ks[p * D + d];
                /* the algebra sums q.(a c) and q.b separately: b (a group's
                   zero) and a c can be as large as any value the group ever
                   held, evicted or replaced ones included (amax), and cancel */
                tp += fabs(qs[d]) * (fabs(ks[p * D + d]) + 2.0 * kmax + 3.0 * amax_all);
                k1 += fabs(ks[p * D + d]);
            }
            w[p] = s / sqrt((double)D);
            if (w[p] > mx) mx = w[p];
            tp *= (double)(D + 4) * ldexp(1.0, -24);
            /* rotated keys: kvq_attend's fl(R q) and the read's fl(R^T k)  */
            if (rot_on[0]) tp += rot_err(q1) * k1 + q1 * rot_err(k1 * 1.0001);
            tp /= sqrt((double)D);
            if (tp > t) t = tp;
        }
        for (p = 0; p < c->n_pos; p++) if (alive[p]) { w[p] = exp(w[p] - mx); sum += w[p]; }
        /* scores off by <= t each move the weights by a factor e^(2t) at
           most; the value sums add n fp32 roundings in the stored basis
           (a rotated value's error vector grows by up to sqrt(D) per
           element coming back)                                             */
        bound = (exp(2.0 * t) - 1.0) * vmax + rot_v + 1e-30 +
                (double)(n_live + D + 16) * ldexp(1.0, -21) * vmax_st * (rot_on[1] ? sqrt((double)D) : 1.0);
        for (d = 0; d < D; d++) {
            double o = 0.0;
            for (p = 0; p < c->n_pos; p++) if (alive[p]) o += w[p] * vr[p * D + d];
            o /= sum;
            FZ_ASSERT(isfinite(out[h * D + d]), "attention output not finite");
            FZ_ASSERT(fabs(out[h * D + d] - o) <= bound, "head %zu channel %zu: %.9g vs exact %.9g "
                      "(bound %.3g, t %.3g)", h, d, (double)out[h * D + d], o, bound, t);
        }
        if (probs) {
            for (p = 0; p < c->n_pos; p++) {
                float pr = probs[h * c->n_pos + p];
                FZ_ASSERT(alive[p] ? pr >= 0.0f : pr == 0.0f, "prob of position %zu", p);
                psum += pr;
            }
            FZ_ASSERT(fabs(psum - 1.0) <= (double)(n_live + 8) * ldexp(1.0, -22), "probs sum %.9g", psum);
        }
    }
}

/* Each live row read back against the shadow, in the stored basis: R r vs
   R x (identity for a side that does not rotate), where the quantizer's
   bound holds over the stored (rotated) range amax_st.                     */
static void check_reads(kvq_cache *c)
{
    size_t D = c->cfg.head_dim, p, d;
    int side;
    float row[MAXD];
    double rs[MAXD], xs[MAXD];
    for (side = 0; side < 2; side++) {
        const kvq_side *s = side ? &c->v : &c->k;
        double am = rot_on[side] ? amax_st[side] : amax;
        double N = (double)((1 << s->bits) - 1), step = 2.0 * am / N, lim;
        /* Sec. 4: float zero s/2 + fp16 rounding of s and z; fp16 rows
           2^-11 relative; the integer zero point can be clamped (|x| far
           from 0 relative to the range) and then costs up to |x|          */
        lim = step / 2 + (N + 2.0) * step * ldexp(1.0, -10) + am * ldexp(1.0, -10) + ldexp(1.0, -24);
        if (c->cfg.zero_mode == KVQ_ZERO_INT) lim += step + am;
        /* HF re-quantization moves a group until it settles: up to ~2.5
           steps (tests/test_soak.c, bench/RESULTS.md)                      */
        if (c->cfg.policy == KVQ_POLICY_HF && c->cfg.hf_requantize) lim += 2.5 * step;
        /* Sec. 4.1's formats: a loose bound (FP8 and NVFP4 saturate at
           their side scale's range, a Lloyd-Max code clips at 2.7 norm
           ratios): it still catches a misread parameter or code          */
        if (s->format != KVQ_FORMAT_INT) lim = 4.0 * am + 64.0 * (double)s->scale * 57344.0 + 1e-30;
        for (p = 0; p < c->n_pos; p++) {
            kvq_status st = kvq_cache_read(c, side, p, row);
            const float *x = (side ? SV : SK) + p * MAXD;
            double extra = 0.0;
            if (!alive[p]) { FZ_ASSERT(st == KVQ_ERR_STATE, "read of an evicted position"); continue; }
            FZ_ASSERT(st == KVQ_OK, "read of live position %zu", p);
            rot_ref(side, row, rs);
            rot_ref(side, x, xs);
            /* the read's fl(R^T) seen through exact R, and the append's fl(R) */
            if (rot_on[side]) extra = sqrt((double)D) * rot_err(l1_of(rs) * 1.0001) + rot_err(l1_of(xs));
            for (d = 0; d < D; d++)
                FZ_ASSERT(fabs(rs[d] - xs[d]) <= lim + extra, "side %d position %zu channel %zu: "
                          "%.9g stored for %.9g (bound %.3g, %s basis)", side, p, d, rs[d], xs[d],
                          lim + extra, rot_on[side] ? "rotated" : "caller's");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* b[7] bits 4-5 pick a row of dims: powers of two, then the non-powers
       a rotation must refuse                                               */
    static const size_t dims[12] = { 4, 8, 16, 4, 8, 16, 1, 2, 16, 3, 6, 12 },
                        gs[4] = { 1, 2, 4, 8 }, rs[5] = { 2, 4, 8, 12, 16 };
    static const int bits_of[4] = { 1, 2, 4, 8 };
    fz f = { data, size, 0 };
    kvq_config cfg;
    kvq_cache c;
    kvq_status st;
    uint8_t b[8];
    size_t D, i, nw;
    float scale;
    static float work[3 * (8 * MAXD + MAXP + 64)], q[3 * MAXD], out[3 * MAXD], probs[3 * MAXP];
    for (i = 0; i < 8; i++) b[i] = fz_u8(&f);
    D = dims[((b[7] >> 4) & 3) * 3 + b[0] % 3];
    switch ((b[0] / 3) % 6) {
    case 0:  cfg = kvq_config_kivi(D, bits_of[b[1] & 3]); break;
    case 1: { kvq_hf_params hp = kvq_hf_defaults(bits_of[b[1] & 3]);
              cfg = kvq_config_hf(D, hp); cfg.hf_requantize = (b[1] >> 7) & 1; break; }
    case 2:  cfg = kvq_config_ott(D, bits_of[b[1] & 3], 2 + (b[1] >> 6)); break;
    case 3:  cfg = kvq_config_logquant(D, bits_of[b[1] & 3], 1 + (b[1] >> 5) % 5); break;
    case 4:  cfg = kvq_config_full(D, (b[1] & 1) ? 32 : 16); break;
    default: cfg = kvq_config_kivi(D, bits_of[b[1] & 3]); cfg.policy = KVQ_POLICY_CUSTOM;
             cfg.key_schedule = (kvq_schedule)((b[1] >> 2) % 3);
             cfg.value_schedule = (kvq_schedule)((b[1] >> 4) % 3); break;
    }
    cfg.value_bits = bits_of[(b[1] >> 2) & 3];
    cfg.group = gs[b[2] & 3];
    cfg.value_group = (b[2] >> 2) & 1 ? gs[(b[2] >> 3) & 3] : 0;
    if (cfg.policy != KVQ_POLICY_LOGQUANT) cfg.residual = rs[(b[2] >> 5) % 5];
    cfg.key_axis = (kvq_axis)(b[3] & 1);
    cfg.value_axis = (kvq_axis)((b[3] >> 1) & 1);
    cfg.zero_mode = (kvq_zero_mode)((b[3] >> 2) & 1);
    if (cfg.policy != KVQ_POLICY_FULL) cfg.fp_bits = (b[3] >> 3) & 1 ? 32 : 16;
    cfg.ott_k = (b[4] & 7) % 5;
    cfg.ott_aux = 1 + ((b[4] >> 3) & 7);
    cfg.ott_mean = (kvq_ott_mean)((b[4] >> 6) & 1);
    cfg.lq_sinks = b[5] % 4;
    if (b[5] & 0x04) {                  /* Sec. 4.1's formats, b[5] bits 2-7 */
        static const int width[KVQ_FORMAT_COUNT] = { 2, 8, 8, 8, 8, 4, 4, 4, 4, 8, 4 };
        kvq_format fk = (kvq_format)(1 + (b[5] >> 3) % (KVQ_FORMAT_COUNT - 1));
        kvq_format fv = (b[6] & 0x80) ? fk : (kvq_format)(1 + (b[5] >> 4) % (KVQ_FORMAT_COUNT - 1));
        cfg.key_format = fk;
        cfg.value_format = fv;
        cfg.key_bits = width[fk] - ((b[5] & 0x80) && fk == KVQ_FORMAT_LLOYD_MAX_NC);
        cfg.value_bits = width[fv];
        if (kvq_format_group(fk) && (b[6] & 0x10)) cfg.group = kvq_format_group(fk);
        if (kvq_format_group(fv) && (b[6] & 0x20)) cfg.value_group = kvq_format_group(fv);
        cfg.key_scale = cfg.value_scale = (b[6] & 0x40) ? 0.0f : 0.75f;   /* 0: from data */
    }
    cfg.key_rotation = (kvq_rotation)((b[7] & 3) % 3);
    cfg.value_rotation = (kvq_rotation)(((b[7] >> 2) & 3) % 3);
    if (cfg.key_rotation == KVQ_ROT_HADAMARD_SIGNS || cfg.value_rotation == KVQ_ROT_HADAMARD_SIGNS) {
        cfg.rotation_seed = fz_u32(&f);
        cfg.rotation_seed |= (uint64_t)fz_u32(&f) << 32;
    }
    if (b[7] & 0x80) {
        /* wild mode: some size fields and enums take hostile values, from
           a table of edges or straight from the input. Fields the policy
           does not read must be ignored; fields it reads must be refused
           with a reason or, if accepted, size nothing beyond FA_CAP.      */
        #define FZ_TOP (((size_t)1 << (sizeof(size_t) * 8 - 1)) + 1)
        static const size_t edges[16] = { 0, 1, 2, 3, 31, 32, 64, 65535, 65536, 65537,
                                          20000000, (size_t)-1, (size_t)-1 / 3, FZ_TOP,
                                          FZ_TOP / 3, (size_t)0xFFFFFFFFu + 1 };
        size_t *field[7];
        int n_field = 0, j;
        field[n_field++] = &cfg.group;     field[n_field++] = &cfg.residual;
        field[n_field++] = &cfg.value_group; field[n_field++] = &cfg.ott_k;
        field[n_field++] = &cfg.ott_aux;   field[n_field++] = &cfg.lq_window;
        field[n_field++] = &cfg.lq_sinks;
        for (j = 0; j < n_field; j++) {
            uint8_t w = fz_u8(&f);
            if (!(w & 1)) continue;
            *field[j] = (w & 2) ? edges[(w >> 2) & 15]
                                : (size_t)fz_u32(&f) << ((w >> 2) % 32);
        }
        if (b[7] & 0x40) {
            uint8_t e = fz_u8(&f);
            switch (e % 10) {
            case 0: cfg.policy = (kvq_policy)(int8_t)fz_u8(&f); break;
            case 1: cfg.key_schedule = (kvq_schedule)(int8_t)fz_u8(&f); break;
            case 2: cfg.value_schedule = (kvq_schedule)(int8_t)fz_u8(&f); break;
            case 3: cfg.key_axis = (kvq_axis)(int8_t)fz_u8(&f); break;
            case 4: cfg.zero_mode = (kvq_zero_mode)(int8_t)fz_u8(&f); break;
            case 5: cfg.fp_bits = (int8_t)fz_u8(&f); break;
            case 6: cfg.ott_mean = (kvq_ott_mean)(int8_t)fz_u8(&f); break;
            case 7: cfg.key_bits = (int8_t)fz_u8(&f); break;
            case 8: cfg.key_rotation = (kvq_rotation)(int8_t)fz_u8(&f); break;
            default: cfg.value_rotation = (kvq_rotation)(int8_t)fz_u8(&f); break;
            }
        }
    }
    scale = ldexpf(1.0f, (int)(b[6] % 16) - 12);
    kvq__why_buf[0] = '\0';             /* kvq.h's private reason buffer */
    if ((st = kvq_config_validate(&cfg)) != KVQ_OK) {
        long calls = fa_calls;
        int known = (unsigned)cfg.key_rotation <= KVQ_ROT_HADAMARD_SIGNS &&
                    (unsigned)cfg.value_rotation <= KVQ_ROT_HADAMARD_SIGNS &&
                    (unsigned)cfg.policy <= KVQ_POLICY_CUSTOM;
        FZ_ASSERT(kvq_why()[0] != '\0', "invalid config without a reason");
        if (known && (cfg.key_rotation || cfg.value_rotation) && (D & (D - 1))) {
            /* a rotation with D not a power of two: Sec. 6.1's refusal,
               and kvq_rotate's, writing nothing                            */
            float x[MAXD];
            FZ_ASSERT(st == KVQ_ERR_SIZE && strstr(kvq_why(), "power of two"),
                      "D=%zu with a rotation: status %d (%s)", D, (int)st, kvq_why());
            for (i = 0; i < D; i++) x[i] = (float)i;
            FZ_ASSERT(kvq_rotate(cfg.key_rotation ? cfg.key_rotation : cfg.value_rotation,
                                 cfg.rotation_seed, D, 0, x, 1) == KVQ_ERR_SIZE, "kvq_rotate D=%zu", D);
            for (i = 0; i < D; i++) FZ_ASSERT(x[i] == (float)i, "a refused kvq_rotate wrote");
        }
        FZ_ASSERT(kvq_cache_init(&c, &cfg) != KVQ_OK, "init accepted what validate refused");
        FZ_ASSERT(fa_calls == calls, "a refused init allocated");
        return 0;
    }
    FZ_ASSERT(kvq_cache_init(&c, &cfg) == KVQ_OK, "init: %s", kvq_why());
    if (c.cfg.head_dim > MAXD || (c.k.schedule != KVQ_SCHED_NONE && c.cfg.residual > MAXP)) {
        kvq_cache_free(&c);          /* valid, but beyond the shadow's room */
        return 0;
    }
    n_shadow = 0;
    amax = amax_st[0] = amax_st[1] = 0.0;
    rot_setup(&c.cfg);
    memset(alive, 0, sizeof alive);

    while (fz_left(&f)) {
        uint8_t op = fz_u8(&f);
        switch (op % 7) {
        case 0: case 1: {                                    /* append / prefill */
            size_t T = op % 7 == 0 ? 1 : 1 + fz_u8(&f) % 24, t, d;
            uint64_t seed = fz_u8(&f);
            int bad, inject = op % 7 == 1 && (op >> 3) == 31;
            static float K[24 * MAXD], V[24 * MAXD];
            if (n_shadow + T > MAXP) goto done;
            for (t = 0; t < T; t++)
                for (d = 0; d < D; d++) {
                    uint8_t kv = T == 1 ? fz_u8(&f) : (uint8_t)(fz_mix(&seed) % 248);
                    uint8_t vv = T == 1 ? fz_u8(&f) : (uint8_t)(fz_mix(&seed) % 248);
                    K[t * D + d] = value_of(kv, scale);
                    V[t * D + d] = value_of(vv, scale);
                }
            if (inject) V[(T - 1) * D + D / 2] = value_of((uint8_t)(250 + seed % 4), scale);
            bad = expected_status(K, V, T * D);
            snap_take(&before, &c);
            if (op & 0x40) fa_fail_at = fa_calls + (long)(seed % 4);
            st = T == 1 ? kvq_cache_append(&c, K, V) : kvq_cache_prefill(&c, K, V, T);
            fa_fail_at = -1;
            if (bad == EITHER) bad = st == KVQ_ERR_RANGE ? KVQ_ERR_RANGE : KVQ_OK;
            if (st == KVQ_ERR_NOMEM && !bad) {      /* the injected failure */
                FZ_ASSERT(op & 0x40, "NOMEM without an injected failure");
                snap_take(&after, &c);
                FZ_ASSERT(snap_same(&before, &after), "a failed allocation changed the cache");
            } else if (bad) {
                FZ_ASSERT(st == (kvq_status)bad, "bad input returned %d, want %d", (int)st, bad);
                snap_take(&after, &c);
                FZ_ASSERT(snap_same(&before, &after), "a refused append changed the cache");
            } else {
                FZ_ASSERT(st == KVQ_OK, "append/prefill of %zu: %s", T, kvq_why());
                for (t = 0; t < T; t++) {
                    int s;
                    memcpy(SK + n_shadow * MAXD, K + t * D, D * sizeof(float));
                    memcpy(SV + n_shadow * MAXD, V + t * D, D * sizeof(float));
                    for (d = 0; d < D; d++) {
                        if (fabs(K[t * D + d]) > amax) amax = fabs(K[t * D + d]);
                        if (fabs(V[t * D + d]) > amax) amax = fabs(V[t * D + d]);
                    }
                    for (s = 0; s < 2; s++) {   /* the range the quantizer saw */
                        double y[MAXD], slack;
                        rot_ref(s, (s ? V : K) + t * D, y);
                        slack = rot_on[s] ? rot_err(l1_of(y)) : 0.0;
                        for (d = 0; d < D; d++)
                            if (fabs(y[d]) + slack > amax_st[s]) amax_st[s] = fabs(y[d]) + slack;
                    }
                    alive[n_shadow++] = 1;
                }
            }
            break;
        }
        case 2: {                                            /* attend          */
            uint8_t heads = fz_u8(&f);
            size_t nq = 1 + heads % 3, d, live = 0, p;
            size_t at_once = 1 + (heads >> 2) % nq;   /* heads one scratch serves */
            kvq_attn_mode mode = (kvq_attn_mode)(op >> 7);
            int want_probs = mode == KVQ_ATTN_EAGER && ((op >> 6) & 1);
            for (d = 0; d < nq * D; d++) q[d] = value_of(fz_u8(&f) % 248, 0.25f);
            for (p = 0; p < n_shadow; p++) live += alive[p];
            nw = kvq_attend_scratch_floats(&c, mode) * at_once;
            FZ_ASSERT(nw <= sizeof work / sizeof work[0], "scratch %zu", nw);
            st = kvq_attend(&c, q, nq, out, want_probs ? probs : NULL, mode, work, nw);
            if (live == 0) { FZ_ASSERT(st == KVQ_ERR_STATE, "attend on nothing: %d", (int)st); break; }
            FZ_ASSERT(st == KVQ_OK, "attend: %d", (int)st);
            check_attention(&c, q, nq, out, want_probs ? probs : NULL);
            break;
        }
        case 3: {                                            /* evict           */
            static uint8_t keep[MAXP], present[MAXP];
            static float score[MAXP];
            size_t p, n_ev = 0, want = 0;
            uint64_t seed = fz_u8(&f);
            if (n_shadow == 0) break;
            FZ_ASSERT(kvq_cache_present(&c, present, n_shadow) == KVQ_OK, "present");
            for (p = 0; p < n_shadow; p++) FZ_ASSERT(present[p] == alive[p], "present mask");
            switch (op >> 6) {
            case 0:  kvq_evict_streaming(present, n_shadow, seed % 4, fz_u8(&f) % 32, keep); break;
            case 1:
                for (p = 0; p < n_shadow; p++) score[p] = (float)(fz_mix(&seed) % 64);
                kvq_evict_h2o(score, present, n_shadow, fz_u8(&f) % 16, fz_u8(&f) % 16, keep);
                break;
            default:
                for (p = 0; p < n_shadow; p++) keep[p] = (fz_mix(&seed) & 3) != 0;
            }
            for (p = 0; p < n_shadow; p++) want += alive[p] && !keep[p];
            snap_take(&before, &c);
            st = kvq_cache_evict(&c, keep, n_shadow, &n_ev);
            if (cfg.policy == KVQ_POLICY_OTT || cfg.policy == KVQ_POLICY_LOGQUANT) {
                FZ_ASSERT(st == KVQ_ERR_CONFIG, "eviction under OTT/LogQuant: %d", (int)st);
                snap_take(&after, &c);
                FZ_ASSERT(snap_same(&before, &after), "a refused eviction changed the cache");
                break;
            }
            FZ_ASSERT(st == KVQ_OK && n_ev == want, "evicted %zu, want %zu", n_ev, want);
            for (p = 0; p < n_shadow; p++) if (!keep[p]) alive[p] = 0;
            break;
        }
        case 4: {                                            /* compact         */
            kvq_compact_stats cs;
            size_t bt = 1 + fz_u8(&f) % 64;
            FZ_ASSERT(kvq_cache_compact(&c, bt, &cs) == KVQ_OK, "compact");
            FZ_ASSERT(cs.slots_after[0] <= cs.slots_before[0] && cs.slots_after[1] <= cs.slots_before[1] &&
                      cs.blocks_after <= cs.blocks_before && cs.occupancy >= 0.0 && cs.occupancy <= 1.0,
                      "compaction stats");
            break;
        }
        case 5: {                                            /* reserve         */
            snap_take(&before, &c);
            if (op & 0x40) fa_fail_at = fa_calls + (long)(op >> 7);
            st = kvq_cache_reserve(&c, 1 + fz_u8(&f) % 64);
            fa_fail_at = -1;
            FZ_ASSERT(st == KVQ_OK || ((op & 0x40) && st == KVQ_ERR_NOMEM), "reserve: %d", (int)st);
            if (st != KVQ_OK) {
                snap_take(&after, &c);
                FZ_ASSERT(snap_same(&before, &after), "a failed reserve changed the cache");
            }
            break;
        }
        default:                                             /* read all        */
            check_reads(&c);
            break;
        }
        check_invariants(&c);
    }
done:
    kvq_cache_free(&c);
    return 0;
}
