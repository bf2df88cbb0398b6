/* tests/test_soak.c - long decode streams through every policy, with the
   cache's invariants checked at every single step.

   usage: test_soak [steps]     (default 30000 per policy; 5000 under
                                 -DKVQ_TEST_QUICK; `make soak` passes 1000000)

   Policies: KIVI-2, HF int4 (history re-quantized at every flush), HF int4
   without re-quantization, OTT-2, LogQuant-2, and KIVI-2 with StreamingLLM
   eviction (4 sinks + recent, budget 512) and compaction every
   KVQ_COMPACT_EVERY (128) steps. Head dim D = 32 (a real model has 64-128;
   the small D keeps a million steps per policy to seconds; every mechanism
   is per channel or per group, so D only scales the constant).

   HF re-quantizes the whole history at every flush (kvq.h Sec. 7), O(t)
   work every R steps, O(t^2 / R) over a stream: its run is 1/16 of the
   others' steps (at least 4096, for the settling check below). The same
   schedule without re-quantization runs the full length.

   Checked at EVERY step, in O(full-precision rows + slots added) time:
     regions  every present position lives in exactly one region: each
              full-precision row and each new quantized slot names a
              position whose loc names it back, and (rows + live slots) per
              side equals the present positions (n_pos minus evicted), so
              no position is stored twice or lost
     bounds   KIVI: K residual in 1..R, V window exactly min(t, R);
              HF: 1..R; OTT: window < R + G, pool <= k, auxiliary <= its
              capacity; LogQuant: the kept set in (2W, 3W] after warm-up,
              stage < G; eviction: present <= budget + 128
     counts   quantized slots equal the schedule's closed form (KIVI keys
              R floor((t-1)/R), values t - R; HF from an empty cache
              1 + R floor((t-2)/R) for t >= 2: token 0, quantized when
              token 1 arrives, then the windows [kR+1, kR+R]; OTT G floor((t-R)/G);
              LogQuant dropped - dropped % G ...)
     bytes    kvq_cache_bytes' payload equals codes + scales/zeros + rows
              computed here from those closed-form counts and the config
     flat     after warm-up no full-precision region grows its capacity;
              under eviction + compaction neither does the quantized store
   Checked at checkpoints (t = 1024 * 2^k, and the last step):
     kvq_cache_check (the full O(n_pos) invariant walk);
     no drift: every stored row read back is within a fixed quantization
     bound of the exact input (regenerated from its position), and the
     attention output is within the bound those row errors imply of exact
     attention over the same positions (streamed in double, never stored).

   Reports per policy: ns per append (the decode step), checking overhead,
   peak heap bytes the cache held (this file's counting allocator) and the
   process's peak RSS.                                                      */
#define _POSIX_C_SOURCE 199309L   /* clock_gettime */
#define TEST_ALLOC
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#define D 32

/* ------------------------------------------------------------------------ */
/* the stream: K, V rows as pure functions of (position, side), so the
   exact history is regenerated at checkpoints instead of stored           */
/* ------------------------------------------------------------------------ */
static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
#define AMAX 5.0f          /* |x| <= AMAX for every generated value        */
/* Uniform in [-1, 1] scaled per channel (channels 3, 10, 17, 24, 31 are
   4x: KIVI's outlier channels in keys); every 97th key is scaled by 0.05,
   a small-norm token of the kind OTT traces.                              */
static void gen_row(size_t t, int side, float *x)
{
    size_t d;
    float tok = (side == 0 && t % 97 == 13) ? 0.05f : 1.0f;
    for (d = 0; d < D; d++) {
        uint64_t h = mix(((uint64_t)t << 8) ^ ((uint64_t)side << 6) ^ d ^ 0x5A0Cull);
        float u = (float)((double)(h >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
        float ch = (side == 0 && d % 7 == 3) ? 4.0f : 1.0f;
        x[d] = u * ch * tok * 1.25f;
    }
}

/* ------------------------------------------------------------------------ */
/* policies                                                                 */
/* ------------------------------------------------------------------------ */
enum { P_KIVI, P_HF, P_HF_NOREQ, P_OTT, P_LOGQUANT, P_EVICT, N_POLICIES };
static const char *pol_name[N_POLICIES] = {
    "KIVI-2", "HF-4 requant", "HF-4 no requant", "OTT-2", "LogQuant-2", "KIVI-2 + evict" };
#define BUDGET 512
#define SINKS  4

static kvq_config pol_config(int pol)
{
    kvq_config c;
    kvq_hf_params hp;
    switch (pol) {
    case P_KIVI: case P_EVICT:
        return kvq_config_kivi(D, 2);                 /* G 32, R 128        */
    case P_HF: case P_HF_NOREQ:
        hp = kvq_hf_defaults(4);
        hp.q_group_size = 32;                         /* 64 does not divide D */
        c = kvq_config_hf(D, hp);
        c.hf_requantize = pol == P_HF;
        return c;
    case P_OTT:
        return kvq_config_ott(D, 2, 4);               /* G 128, R 32, k 3   */
    default:
        c = kvq_config_logquant(D, 2, kvq_logquant_window_for(128));  /* W 42 */
        c.value_group = 32;
        return c;
    }
}

/* ------------------------------------------------------------------------ */
/* closed forms                                                             */
/* ------------------------------------------------------------------------ */
static size_t tpu_of(kvq_axis axis, size_t G) { return axis == KVQ_PER_CHANNEL ? G : 1; }

/* Payload bytes of one side from its slot and row counts and the config:
   units x groups x (packed words + one 4-byte (scale, zero)), plus rows.  */
static size_t side_payload(const kvq_config *cfg, int side, size_t slots, size_t rows)
{
    kvq_axis axis = side ? cfg->value_axis : cfg->key_axis;
    size_t G = side && cfg->value_group ? cfg->value_group : cfg->group;
    int B = side ? cfg->value_bits : cfg->key_bits;
    size_t units = slots / tpu_of(axis, G);
    size_t groups = axis == KVQ_PER_CHANNEL ? D : D / G;
    size_t words = (G * (size_t)B + 31) / 32;
    return units * groups * (words * 4 + 4) + rows * D * ((size_t)cfg->fp_bits / 8);
}

/* Quantized slots the schedule predicts after t appends (no eviction).    */
static size_t predicted_slots(int pol, const kvq_config *cfg, int side, size_t t, size_t *stage)
{
    size_t R = cfg->residual, G = cfg->group;
    *stage = 0;
    switch (pol) {
    case P_KIVI:
        if (side == 0) return t ? R * ((t - 1) / R) : 0;          /* FLUSH */
        return t > R ? t - R : 0;                                 /* SLIDE */
    case P_HF: case P_HF_NOREQ:          /* token 0 (HF's first update)  */
        return t >= 2 ? 1 + R * ((t - 2) / R) : 0;   /* then [kR+1, kR+R] */
    case P_OTT:
        return t >= R + G ? G * ((t - R) / G) : 0;
    default: {                                                    /* LogQuant */
        size_t W = cfg->lq_window, s = cfg->lq_sinks, m = t > s ? t - s : 0;
        size_t A = m <= 3 * W ? m : 2 * W + (m - 3 * W - 1) % W + 1;
        size_t dropped = m - A, tpu = side ? 1 : G;
        *stage = dropped % tpu;
        return dropped - *stage;
    }
    }
}

/* ------------------------------------------------------------------------ */
/* the per-step region walk                                                 */
/* ------------------------------------------------------------------------ */
typedef struct {
    size_t seen[2];          /* quantized slots already verified           */
    size_t live[2];          /* live slots among them                      */
    size_t holes[2];         /* placeholder / dead slots among them        */
} walk;

/* Verifies the new slots and every full-precision row of both sides, and
   that rows + live slots == present. Returns 0 and says why on failure.   */
static int walk_step(const kvq_cache *c, walk *w, size_t present, size_t rows_out[2],
                     char *why, size_t why_len)
{
    int side, r;
    for (side = 0; side < 2; side++) {
        const kvq_side *s = side ? &c->v : &c->k;
        size_t slots = s->n_units * s->geom.tokens_per_unit, i, rows = 0;
        if (slots < w->seen[side]) { w->seen[side] = w->live[side] = w->holes[side] = 0; }
        for (i = w->seen[side]; i < slots; i++) {
            int32_t p = s->qpos[i];
            if (p < 0) { w->holes[side]++; continue; }
            if ((size_t)p >= c->n_pos || s->loc[p] != ((KVQ_LOC_QUANT << 28) | (uint32_t)i)) {
                snprintf(why, why_len, "side %d slot %zu names position %d whose loc "
                         "does not name it back", side, i, (int)p);
                return 0;
            }
            w->live[side]++;
        }
        w->seen[side] = slots;
        for (r = 0; r < KVQ_ROW_REGIONS; r++) {
            const kvq_rows *rg = &s->rows[r];
            for (i = rg->off; i < rg->off + rg->n; i++) {
                int32_t p = rg->pos[i];
                if (p < 0 || (size_t)p >= c->n_pos ||
                    s->loc[p] != (((KVQ_LOC_ROWS0 + (uint32_t)r) << 28) | (uint32_t)i)) {
                    snprintf(why, why_len, "side %d rows[%d] index %zu names position "
                             "%d whose loc does not name it back", side, r, i, (int)p);
                    return 0;
                }
            }
            rows += rg->n;
        }
        if (rows + w->live[side] != present) {
            snprintf(why, why_len, "side %d: %zu rows + %zu live slots != %zu present",
                     side, rows, w->live[side], present);
            return 0;
        }
        rows_out[side] = rows;
    }
    return 1;
}

static size_t rows_capacity(const kvq_cache *c)
{
    size_t total = 0;
    int side, r;
    for (side = 0; side < 2; side++)
        for (r = 0; r < KVQ_ROW_REGIONS; r++) total += (side ? c->v : c->k).rows[r].cap;
    return total;
}

/* ------------------------------------------------------------------------ */
/* checkpoints: no drift                                                    */
/* ------------------------------------------------------------------------ */
/* A fixed bound on one stored element's error, from kvq.h Sec. 4: a group
   whose values lie in [-AMAX, AMAX] has s <= 2 AMAX / N, and the error is at
   most s/2 (float zero) or s (integer zero), plus fp16 rounding of s and z
   (relative 2^-11, times up to N codes). Full-precision fp16 rows: 2^-11.  */
static double elem_bound(int bits, kvq_zero_mode mode)
{
    double N = (double)((1 << bits) - 1), s = 2.0 * AMAX / N;
    return (mode == KVQ_ZERO_INT ? s : s / 2) + (N + 2.0) * s * ldexp(1.0, -11) + AMAX * ldexp(1.0, -10);
}

/* HF re-quantization (pol P_HF) is the one policy that rewrites stored
   rows. kvq.h claims each group settles within a few flushes; so the rows
   of positions < SETTLE_N, read at t = 2 SETTLE_N (>= 8 flushes later),
   must be bit-identical at every later checkpoint. Its per-element error
   is not held to a single quantization's bound: a settled group can sit
   up to ~2.5 steps s from its input (see bench/RESULTS.md, Soak).        */
#define SETTLE_N 1024
static float settled[2][SETTLE_N][D];
static double hf_worst_elem;

static void checkpoint(int pol, kvq_cache *c, const uint8_t *alive, size_t t, double *worst_attn)
{
    size_t p, d, nw = kvq_attend_scratch_floats(c, KVQ_ATTN_ONLINE);
    float q[D], out[D], kx[D], vx[D], kr[D], vr[D], *work = (float *)malloc(nw * sizeof(float));
    double ek = 0.0, ev = 0.0, delta = 0.0, m = -INFINITY, l = 0.0, acc[D], err = 0.0, bound;
    double bk = elem_bound(c->cfg.key_bits, c->cfg.zero_mode);
    double bv = elem_bound(c->cfg.value_bits, c->cfg.zero_mode);
    CHECK(kvq_cache_check(c) == KVQ_OK, "%s t=%zu: kvq_cache_check: %s", pol_name[pol], t, kvq_why());
    for (d = 0; d < D; d++) {
        uint64_t h = mix(t * 131 + d);
        q[d] = (float)((double)(h >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
        acc[d] = 0.0;
    }
    CHECK(kvq_attend(c, q, 1, out, NULL, KVQ_ATTN_ONLINE, work, nw) == KVQ_OK, "attend");
    /* one pass: row errors, score perturbation, exact attention (online)  */
    for (p = 0; p < c->n_pos; p++) {
        double s = 0.0, sr = 0.0, e;
        if (alive && !alive[p]) continue;
        gen_row(p, 0, kx); gen_row(p, 1, vx);
        if (kvq_cache_read(c, 0, p, kr) != KVQ_OK || kvq_cache_read(c, 1, p, vr) != KVQ_OK) {
            CHECK(0, "%s t=%zu: position %zu not readable", pol_name[pol], t, p);
            break;
        }
        for (d = 0; d < D; d++) {
            double a = fabs((double)kr[d] - kx[d]), b = fabs((double)vr[d] - vx[d]);
            if (a > ek) ek = a;
            if (b > ev) ev = b;
            s += (double)q[d] * kx[d];
            sr += (double)q[d] * kr[d];
        }
        s /= sqrt((double)D); sr /= sqrt((double)D);
        if (fabs(sr - s) > delta) delta = fabs(sr - s);
        if (s > m) {                          /* rescale the running sums  */
            e = exp(m - s);
            for (d = 0; d < D; d++) acc[d] *= e;
            l *= e;
            m = s;
        }
        e = exp(s - m);
        l += e;
        for (d = 0; d < D; d++) acc[d] += e * vx[d];
    }
    if (pol == P_HF && t >= 2 * SETTLE_N) {
        size_t side, same = 1;
        for (side = 0; side < 2; side++)
            for (p = 0; p < SETTLE_N; p++) {
                kvq_cache_read(c, (int)side, p, kr);
                if (t == 2 * SETTLE_N) memcpy(settled[side][p], kr, sizeof kr);
                else same &= memcmp(settled[side][p], kr, sizeof kr) == 0;
            }
        CHECK(same, "%s t=%zu: rows of positions < %d still change after >= 8 flushes",
              pol_name[pol], t, SETTLE_N);
        if (ek > hf_worst_elem) hf_worst_elem = ek;
        if (ev > hf_worst_elem) hf_worst_elem = ev;
    } else
    CHECK(ek <= bk && ev <= bv, "%s t=%zu: stored rows drifted: key error %g (bound %g), "
          "value error %g (bound %g)", pol_name[pol], t, ek, bk, ev, bv);
    /* softmax weights move by at most a factor e^(2 delta) in total
       variation, plus the value error, plus fp32 accumulation             */
    bound = ev + (exp(2.0 * delta) - 1.0) * AMAX * 1.25 + 1e-4;
    for (d = 0; d < D; d++) {
        double e = fabs(out[d] - acc[d] / l);
        if (e > err) err = e;
    }
    CHECK(err <= bound, "%s t=%zu: attention error %g > bound %g (value err %g, score "
          "shift %g)", pol_name[pol], t, err, bound, ev, delta);
    if (err > *worst_attn) *worst_attn = err;
    free(work);
}

/* ------------------------------------------------------------------------ */
/* one policy's stream                                                      */
/* ------------------------------------------------------------------------ */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void soak(int pol, size_t steps)
{
    kvq_config cfg = pol_config(pol);
    kvq_cache c;
    walk w;
    size_t t, next_cp = 1024, warm = 4096, cap_rows = 0, cap_units = 0, evicted = 0, fails = 0;
    size_t R = cfg.residual, G = cfg.group;
    float k[D], v[D];
    double t_append = 0.0, t0 = now_s(), worst = 0.0;
    uint8_t *keep = NULL, *present = NULL;
    char why[200];
    memset(&w, 0, sizeof w);
    ta_peak = ta_bytes;
    if (kvq_cache_init(&c, &cfg) != KVQ_OK) { CHECK(0, "%s init: %s", pol_name[pol], kvq_why()); return; }
    for (t = 1; t <= steps && fails < 5; t++) {
        size_t rows[2], present_n, side;
        double a;
        kvq_bytes by;
        gen_row(t - 1, 0, k); gen_row(t - 1, 1, v);
        a = now_s();
        if (kvq_cache_append(&c, k, v) != KVQ_OK) { CHECK(0, "append: %s", kvq_why()); break; }
        t_append += now_s() - a;

        /* eviction + compaction every KVQ_COMPACT_EVERY steps
           (TriAttention's cadence): keep the sinks and the most recent    */
        if (pol == P_EVICT && t % KVQ_COMPACT_EVERY == 0 && t - evicted > BUDGET) {
            size_t n_ev = 0;
            kvq_compact_stats cs;
            keep = (uint8_t *)realloc(keep, t);
            present = (uint8_t *)realloc(present, t);
            kvq_cache_present(&c, present, t);
            kvq_evict_streaming(present, t, SINKS, BUDGET - SINKS, keep);
            CHECK(kvq_cache_evict(&c, keep, t, &n_ev) == KVQ_OK, "evict");
            CHECK(n_ev == t - evicted - BUDGET, "%s t=%zu: evicted %zu, want %zu",
                  pol_name[pol], t, n_ev, t - evicted - BUDGET);
            evicted += n_ev;
            CHECK(kvq_cache_compact(&c, 32, &cs) == KVQ_OK, "compact");
            w.seen[0] = w.seen[1] = 0;                 /* slots moved: re-walk */
            w.live[0] = w.live[1] = w.holes[0] = w.holes[1] = 0;
        }
        present_n = t - evicted;

        /* regions                                                          */
        if (!walk_step(&c, &w, present_n, rows, why, sizeof why)) {
            CHECK(0, "%s t=%zu: %s", pol_name[pol], t, why); fails++; continue;
        }
        /* bounds, closed-form counts and bytes                             */
        CHECK(kvq_cache_bytes(&c, &by) == KVQ_OK, "bytes");
        if (pol == P_EVICT) {
            size_t pay = 0;
            for (side = 0; side < 2; side++) {
                const kvq_side *s = side ? &c.v : &c.k;
                pay += side_payload(&cfg, (int)side, s->n_units * s->geom.tokens_per_unit, rows[side]);
            }
            CHECK(present_n <= BUDGET + KVQ_COMPACT_EVERY && c.k.rows[0].n <= R && c.v.rows[0].n <= R,
                  "%s t=%zu: %zu present, windows %zu/%zu", pol_name[pol], t, present_n,
                  c.k.rows[0].n, c.v.rows[0].n);
            if (by.payload != pay) { CHECK(0, "%s t=%zu: payload %zu != %zu", pol_name[pol], t, by.payload, pay); fails++; }
        } else {
            size_t pay = 0, stage[2], slots[2];
            for (side = 0; side < 2; side++) {
                const kvq_side *s = side ? &c.v : &c.k;
                size_t have = s->n_units * s->geom.tokens_per_unit, want_rows;
                slots[side] = predicted_slots(pol, &cfg, (int)side, t, &stage[side]);
                want_rows = t - slots[side] + w.holes[side];   /* placeholders' tokens live in rows */
                if (have != slots[side] || rows[side] != want_rows) {
                    CHECK(0, "%s t=%zu side %zu: %zu slots / %zu rows, schedule says %zu / %zu",
                          pol_name[pol], t, side, have, rows[side], slots[side], want_rows);
                    fails++;
                }
                pay += side_payload(&cfg, (int)side, slots[side], want_rows);
            }
            if (by.payload != pay) { CHECK(0, "%s t=%zu: payload %zu != %zu", pol_name[pol], t, by.payload, pay); fails++; }
            if (pol == P_KIVI) {
                size_t nk = c.k.rows[0].n, nv = c.v.rows[0].n;
                if (!(nk >= 1 && nk <= R && nv == (t < R ? t : R))) {
                    CHECK(0, "%s t=%zu: residual K %zu V %zu", pol_name[pol], t, nk, nv); fails++;
                }
            } else if (pol == P_HF || pol == P_HF_NOREQ) {
                size_t nk = c.k.rows[0].n, nv = c.v.rows[0].n;
                if (!(nk >= 1 && nk <= R && nv == nk)) {
                    CHECK(0, "%s t=%zu: residual K %zu V %zu", pol_name[pol], t, nk, nv); fails++;
                }
            } else if (pol == P_OTT) {
                size_t nw = c.k.rows[KVQ_ROWS_WINDOW].n, np = c.k.rows[KVQ_ROWS_OUTLIER].n;
                size_t na = c.k.rows[KVQ_ROWS_AUX].n;
                if (!(nw < R + G && np <= cfg.ott_k && na <= cfg.ott_aux &&
                      c.v.rows[KVQ_ROWS_OUTLIER].n == np && c.v.rows[KVQ_ROWS_AUX].n == na)) {
                    CHECK(0, "%s t=%zu: window %zu pool %zu aux %zu", pol_name[pol], t, nw, np, na);
                    fails++;
                }
            } else {
                size_t W = cfg.lq_window, na = c.k.rows[KVQ_ROWS_WINDOW].n;
                if (!((t <= 3 * W ? na == t : na > 2 * W && na <= 3 * W) &&
                      c.v.rows[KVQ_ROWS_WINDOW].n == na &&
                      c.k.rows[KVQ_ROWS_STAGE].n == stage[0] && stage[0] < G &&
                      c.v.rows[KVQ_ROWS_STAGE].n == stage[1])) {
                    CHECK(0, "%s t=%zu: kept set %zu, stage %zu/%zu", pol_name[pol], t, na,
                          c.k.rows[KVQ_ROWS_STAGE].n, c.v.rows[KVQ_ROWS_STAGE].n);
                    fails++;
                }
            }
        }
        /* flat memory after warm-up                                        */
        if (t == warm) { cap_rows = rows_capacity(&c); cap_units = c.k.cap_units + c.v.cap_units; }
        if (t > warm) {
            if (rows_capacity(&c) != cap_rows) {
                CHECK(0, "%s t=%zu: full-precision capacity grew %zu -> %zu rows", pol_name[pol],
                      t, cap_rows, rows_capacity(&c));
                fails++; cap_rows = rows_capacity(&c);
            }
            if (pol == P_EVICT && c.k.cap_units + c.v.cap_units != cap_units) {
                CHECK(0, "%s t=%zu: quantized store grew under eviction", pol_name[pol], t);
                fails++; cap_units = c.k.cap_units + c.v.cap_units;
            }
        }
        if (t == next_cp || t == steps) {
            if (pol == P_EVICT) {                       /* which are alive  */
                present = (uint8_t *)realloc(present, t);
                kvq_cache_present(&c, present, t);
            }
            checkpoint(pol, &c, pol == P_EVICT ? present : NULL, t, &worst);
            if (t == next_cp) next_cp *= 2;
        }
    }
    {
        struct rusage ru;
        kvq_bytes by;
        double total = now_s() - t0;
        getrusage(RUSAGE_SELF, &ru);
        kvq_cache_bytes(&c, &by);
        printf("  %-16s %8zu steps  %7.1f ns/append  %5.2f s total (rest: checks, evict, compact %.2f s)  "
               "peak heap %9.2f MiB  payload %8.2f MiB  metadata %7.2f MiB  "
               "max RSS %6.1f MiB  worst attn err %.3g\n",
               pol_name[pol], t - 1, 1e9 * t_append / (double)(t - 1), total,
               total - t_append, (double)ta_peak / 1048576.0, (double)by.payload / 1048576.0,
               (double)by.metadata / 1048576.0, (double)ru.ru_maxrss / 1024.0, worst);
    }
    if (pol == P_HF)
        printf("  %-16s rows settled from t = %d on; worst element error %.3g = %.2f x the "
               "largest step 2 AMAX / N (one quantization: <= 1x)\n", pol_name[pol], 2 * SETTLE_N,
               hf_worst_elem, hf_worst_elem / (2.0 * AMAX / 15.0));
    kvq_cache_free(&c);
    free(keep); free(present);
}

int main(int argc, char **argv)
{
    size_t steps = (size_t)COUNT(30000, 5000);
    int pol;
    if (argc > 1) steps = (size_t)strtoull(argv[1], NULL, 10);
    if (steps < 1) steps = 1;
    printf("test_soak: %zu decode steps per policy, D = %d, invariants every step\n", steps, D);
    for (pol = 0; pol < N_POLICIES; pol++)
        soak(pol, pol == P_HF ? (steps / 16 > 4096 ? steps / 16 : steps < 4096 ? steps : 4096)
                              : steps);
    CHECK(ta_live == 0 && !ta_broken, "leaked %ld blocks", ta_live);
    return TEST_END("test_soak");
}
