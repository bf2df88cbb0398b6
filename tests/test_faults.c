/* tests/test_faults.c - a failed allocation leaves a cache exactly as it was.

   kvq.h Sec. 2: on failure a function "leaves any cache ... exactly as it
   was (a failed allocation may leave a buffer larger, never different)".
   The allocator of tests/test.h (TEST_ALLOC, routed into kvq.h through
   KVQ_MALLOC/KVQ_REALLOC/KVQ_FREE) returns NULL at its N-th attempt inside
   kvq_cache_prefill, kvq_cache_append or kvq_cache_reserve, N = 0, 1, 2, ...
   until the call succeeds. Each N starts from the same state: the cache is
   rebuilt by replaying the calls before it, since an attempt that failed
   late may already have grown buffers (which the rule allows) and so would
   hide the allocations it passed from the next N.

   Every call of a script (prefills of several lengths, a decode stream, a
   reservation) is swept so, for every policy (FULL fp16 and fp32, KIVI,
   HF, OTT, LogQuant, CUSTOM), unrotated and rotated. After each
   KVQ_ERR_NOMEM the cache is compared with a copy taken before the call:
     - every public field of kvq_cache: the config and every count and flag
       by value; per side its geometry, its units (codes, scales and zeros,
       slot positions), each row region's off and n with its live rows and
       positions, the loc map of every position; the sign vector. Pointers
       may move (realloc) and capacities may only grow. The scratch buffers
       (stage, mark, score, rot_rows) hold no state between calls and are
       not compared (some of their bytes are never written).
     - what a caller observes: every row read back (and which are absent),
       kvq_attend EAGER and ONLINE on two heads bit for bit, the census,
       kvq_cache_bytes (all but `allocated`) and kvq_cache_check.
   A twin that made the same calls without failures must end observably
   equal to the cache. The sweep must also have produced at least one
   failure per call type and policy, so it cannot pass by never failing.
   KVQ_TEST_QUICK (the sanitizer and valgrind builds): the rotated configs
   at one first-prefill length.                                            */
#define TEST_ALLOC
#define TEST_RNG
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include <string.h>

#define D_MAX 32

/* ------------------------------------------------------------------------ */
/* a deep copy of a cache's public state and of what a caller observes      */
/* ------------------------------------------------------------------------ */
typedef struct {
    kvq_cache c;                         /* every field, by value (memcpy)  */
    void *units[2][3];                   /* words, sz, qpos: live units     */
    void *rows[2][KVQ_ROW_REGIONS][2];   /* live rows and their positions   */
    uint32_t *loc[2];                    /* [0, n_pos)                      */
    float *sign;                         /* (D) or NULL                     */
    float *read;                         /* (2, n_pos, D)                   */
    kvq_status *read_st;                 /* (2, n_pos)                      */
    float out[2][2 * D_MAX];             /* EAGER, ONLINE on fixed queries  */
    kvq_status attend_st[2];
    kvq_census cen;
    kvq_bytes by;
    kvq_status check;
} fsnap;

static void *dup_or_null(const void *p, size_t n)
{
    void *q;
    if (!p || n == 0) return NULL;
    q = malloc(n);
    memcpy(q, p, n);
    return q;
}

static size_t rowb(const kvq_cache *c) { return c->cfg.head_dim * (size_t)c->cfg.fp_bits / 8u; }

static void fsnap_take(fsnap *s, kvq_cache *c)
{
    size_t D = c->cfg.head_dim, p, nw;
    int i, r, m;
    float q[2 * D_MAX], *work;
    memset(s, 0, sizeof *s);
    memcpy(&s->c, c, sizeof *c);
    for (i = 0; i < 2; i++) {
        const kvq_side *sd = i ? &c->v : &c->k;
        size_t groups = sd->n_units * sd->geom.groups_per_unit;
        s->units[i][0] = dup_or_null(sd->words, groups * sd->geom.words_per_group * sizeof(uint32_t));
        s->units[i][1] = dup_or_null(sd->sz, groups * sizeof(kvq_sz));
        s->units[i][2] = dup_or_null(sd->qpos, sd->n_units * sd->geom.tokens_per_unit * sizeof(int32_t));
        for (r = 0; r < KVQ_ROW_REGIONS; r++) {
            const kvq_rows *rg = &sd->rows[r];
            if (!rg->n) continue;
            s->rows[i][r][0] = dup_or_null((const char *)rg->data + rg->off * rowb(c), rg->n * rowb(c));
            s->rows[i][r][1] = dup_or_null(rg->pos + rg->off, rg->n * sizeof(int32_t));
        }
        s->loc[i] = (uint32_t *)dup_or_null(sd->loc, c->n_pos * sizeof(uint32_t));
    }
    s->sign = (float *)dup_or_null(c->rot_sign, D * sizeof(float));
    s->read = (float *)calloc(2 * c->n_pos * D + 1, sizeof(float));
    s->read_st = (kvq_status *)calloc(2 * c->n_pos + 1, sizeof(kvq_status));
    for (i = 0; i < 2; i++)
        for (p = 0; p < c->n_pos; p++)
            s->read_st[i * c->n_pos + p] =
                kvq_cache_read(c, i, p, s->read + ((size_t)i * c->n_pos + p) * D);
    for (p = 0; p < 2 * D; p++) q[p] = (float)((int)((p * 37) % 19) - 9) * 0.125f;
    for (m = 0; m < 2; m++) {
        nw = 2 * kvq_attend_scratch_floats(c, (kvq_attn_mode)m);
        work = (float *)malloc(nw * sizeof(float) + 1);
        s->attend_st[m] = kvq_attend(c, q, 2, s->out[m], NULL, (kvq_attn_mode)m, work, nw);
        free(work);
    }
    kvq_cache_census(c, &s->cen);
    kvq_cache_bytes(c, &s->by);
    s->check = kvq_cache_check(c);
}

static void fsnap_free(fsnap *s)
{
    int i, r, j;
    for (i = 0; i < 2; i++) {
        for (j = 0; j < 3; j++) free(s->units[i][j]);
        for (r = 0; r < KVQ_ROW_REGIONS; r++) { free(s->rows[i][r][0]); free(s->rows[i][r][1]); }
        free(s->loc[i]);
    }
    free(s->sign); free(s->read); free(s->read_st);
}

static int same_bytes(const void *a, const void *b, size_t n)
{
    if (n == 0) return 1;
    if (!a || !b) return a == b;
    return memcmp(a, b, n) == 0;
}

/* What a caller observes: "" when a and b agree, else the first difference.
   `allocated` is left out: a failed allocation may leave a buffer larger. */
static const char *observed_diff(const fsnap *a, const fsnap *b)
{
    size_t n = a->c.n_pos, D = a->c.cfg.head_dim;
    kvq_bytes x = a->by, y = b->by;
    if (n != b->c.n_pos) return "n_pos";
    if (memcmp(a->read_st, b->read_st, 2 * n * sizeof(kvq_status))) return "which rows are present";
    if (memcmp(a->read, b->read, 2 * n * D * sizeof(float))) return "rows read back";
    if (memcmp(a->attend_st, b->attend_st, sizeof a->attend_st)) return "kvq_attend's status";
    if (memcmp(a->out[0], b->out[0], 2 * D * sizeof(float))) return "kvq_attend EAGER";
    if (memcmp(a->out[1], b->out[1], 2 * D * sizeof(float))) return "kvq_attend ONLINE";
    if (memcmp(&a->cen, &b->cen, sizeof a->cen)) return "kvq_cache_census";
    x.allocated = y.allocated = 0;
    if (memcmp(&x, &y, sizeof x)) return "kvq_cache_bytes";
    if (a->check != KVQ_OK || b->check != KVQ_OK) return "kvq_cache_check";
    return "";
}

/* The config field by field (memcmp would compare padding, which a
   replayed cache's struct assignment need not copy).                      */
static int same_config(const kvq_config *a, const kvq_config *b)
{
    return a->policy == b->policy && a->head_dim == b->head_dim &&
           a->key_bits == b->key_bits && a->value_bits == b->value_bits &&
           a->group == b->group && a->residual == b->residual &&
           a->key_axis == b->key_axis && a->value_axis == b->value_axis &&
           a->zero_mode == b->zero_mode && a->fp_bits == b->fp_bits &&
           a->hf_requantize == b->hf_requantize && a->key_schedule == b->key_schedule &&
           a->value_schedule == b->value_schedule && a->value_group == b->value_group &&
           a->ott_k == b->ott_k && a->ott_aux == b->ott_aux && a->ott_mean == b->ott_mean &&
           a->lq_window == b->lq_window && a->lq_sinks == b->lq_sinks &&
           a->key_rotation == b->key_rotation && a->value_rotation == b->value_rotation &&
           a->rotation_seed == b->rotation_seed;
}

/* Every public field (see the top): "" when b is a as the rule allows. */
static const char *fields_diff(const fsnap *a, const fsnap *b, char *buf, size_t len)
{
    const kvq_cache *x = &a->c, *y = &b->c;
    size_t D = x->cfg.head_dim;
    int i, r;
    if (!same_config(&x->cfg, &y->cfg)) return "cfg";
    if (x->n_pos != y->n_pos) return "n_pos";
    if (y->cap_pos < x->cap_pos) return "cap_pos shrank";
    if (x->stage_rows != y->stage_rows) return "stage_rows";
    if (x->ott_tracing != y->ott_tracing) return "ott_tracing";
    if (x->ott_stopped_at != y->ott_stopped_at) return "ott_stopped_at";
    if (x->ott_rounds != y->ott_rounds) return "ott_rounds";
    if (x->n_evicted != y->n_evicted) return "n_evicted";
    if (y->rot_cap < x->rot_cap) return "rot_cap shrank";
    if (!x->rot_rows != !y->rot_rows || !x->rot_sign != !y->rot_sign) return "rotation buffers";
    if (!same_bytes(a->sign, b->sign, x->rot_sign ? D * sizeof(float) : 0)) return "rot_sign";
    if (!x->stage != !y->stage || !x->mark != !y->mark || !x->score != !y->score) return "scratch";
    for (i = 0; i < 2; i++) {
        const kvq_side *s = i ? &x->v : &x->k, *t = i ? &y->v : &y->k;
        const char *side = i ? "V" : "K";
        size_t groups = s->n_units * s->geom.groups_per_unit;
        if (s->axis != t->axis || s->bits != t->bits || s->schedule != t->schedule ||
            s->group != t->group || s->chunk != t->chunk ||
            memcmp(&s->geom, &t->geom, sizeof s->geom) || s->n_units != t->n_units ||
            t->cap_units < s->cap_units) {
            snprintf(buf, len, "%s: side fields or n_units (%zu -> %zu)", side, s->n_units, t->n_units);
            return buf;
        }
        if (!same_bytes(a->units[i][0], b->units[i][0], groups * s->geom.words_per_group * 4u) ||
            !same_bytes(a->units[i][1], b->units[i][1], groups * sizeof(kvq_sz)) ||
            !same_bytes(a->units[i][2], b->units[i][2],
                        s->n_units * s->geom.tokens_per_unit * sizeof(int32_t))) {
            snprintf(buf, len, "%s: codes, scales or slot positions", side);
            return buf;
        }
        for (r = 0; r < KVQ_ROW_REGIONS; r++) {
            const kvq_rows *p = &s->rows[r], *q = &t->rows[r];
            if (p->off != q->off || p->n != q->n || q->cap < p->cap) {
                snprintf(buf, len, "%s rows[%d]: off %zu -> %zu, n %zu -> %zu, cap %zu -> %zu",
                         side, r, p->off, q->off, p->n, q->n, p->cap, q->cap);
                return buf;
            }
            if (!same_bytes(a->rows[i][r][0], b->rows[i][r][0], p->n * rowb(x)) ||
                !same_bytes(a->rows[i][r][1], b->rows[i][r][1], p->n * sizeof(int32_t))) {
                snprintf(buf, len, "%s rows[%d]: live rows or positions", side, r);
                return buf;
            }
        }
        if (!same_bytes(a->loc[i], b->loc[i], x->n_pos * sizeof(uint32_t))) {
            snprintf(buf, len, "%s: loc map", side);
            return buf;
        }
    }
    return observed_diff(a, b);
}

/* ------------------------------------------------------------------------ */
/* the configurations and the script                                        */
/* ------------------------------------------------------------------------ */
#define N_CONFIGS 14
static kvq_config config_of(int i, size_t D, const char **name)
{
    kvq_config cf;
    switch (i) {
    case 0: cf = kvq_config_full(D, 16); *name = "FULL fp16"; break;
    case 1: cf = kvq_config_full(D, 32); *name = "FULL fp32"; break;
    case 2: cf = kvq_config_kivi(D, 2); cf.group = 8; cf.residual = 16; *name = "KIVI-2"; break;
    case 3: cf = kvq_config_kivi(D, 4); cf.group = 8; cf.residual = 8; cf.fp_bits = 32;
            *name = "KIVI-4 fp32"; break;
    case 4: { kvq_hf_params hp = kvq_hf_defaults(2); hp.q_group_size = 8; hp.residual_length = 8;
              cf = kvq_config_hf(D, hp); *name = "HF"; break; }
    case 5: { kvq_hf_params hp = kvq_hf_defaults(4); hp.q_group_size = 8; hp.residual_length = 16;
              hp.axis_key = KVQ_PER_CHANNEL; hp.zero_mode = KVQ_ZERO_INT;
              cf = kvq_config_hf(D, hp); cf.hf_requantize = 0; *name = "HF per-channel int"; break; }
    case 6: cf = kvq_config_ott(D, 2, 4); cf.group = 8; cf.residual = 4; cf.ott_k = 2;
            cf.ott_aux = 6; cf.value_group = 8; *name = "OTT"; break;
    case 7: cf = kvq_config_ott(D, 4, 0); cf.group = 16; cf.residual = 8; cf.value_group = 16;
            *name = "OTT k=0"; break;
    case 8: cf = kvq_config_logquant(D, 2, 4); cf.group = 8; cf.lq_sinks = 2; *name = "LogQuant"; break;
    case 9: cf = kvq_config_kivi(D, 4); cf.policy = KVQ_POLICY_CUSTOM;
            cf.key_schedule = KVQ_SCHED_NONE; cf.value_schedule = KVQ_SCHED_FLUSH;
            cf.group = 8; cf.residual = 8; *name = "CUSTOM keys NONE"; break;
    case 10: cf = kvq_config_kivi(D, 2); cf.policy = KVQ_POLICY_CUSTOM;
            cf.key_schedule = KVQ_SCHED_SLIDE; cf.value_schedule = KVQ_SCHED_SLIDE;
            cf.group = 8; cf.residual = 16; *name = "CUSTOM SLIDE"; break;
    /* the engines' formats (kvq.h Sec. 4.1): no window, parameters packed
       four to a word, B = 3 codes across words, a side scale set from the
       first rows (which a failed call must not leave set)                 */
    case 11: kvq_config_engine(&cf, D, "nvfp4-4over6"); *name = "nvfp4-4over6"; break;
    case 12: kvq_config_engine(&cf, D, "turboquant-k3v4-nc"); *name = "turboquant-k3v4-nc"; break;
    default: kvq_config_engine(&cf, D, "fp8-e4m3"); cf.key_scale = cf.value_scale = 0.0f;
            *name = "fp8-e4m3, scale from data"; break;
    }
    return cf;
}

enum { CALL_PREFILL, CALL_APPEND, CALL_RESERVE };
typedef struct { int kind; size_t at, n; } call;   /* rows [at, at + n)     */

/* Prefills of several lengths (into an empty and a non-empty cache), a
   decode stream across many growths of every buffer, one reservation.    */
static size_t script(size_t T0, call *cs, size_t max)
{
    size_t n = 0, t = 0, i;
    cs[n].kind = CALL_PREFILL; cs[n].at = t; cs[n++].n = T0; t += T0;
    for (i = 0; i < 70; i++) { cs[n].kind = CALL_APPEND; cs[n].at = t++; cs[n++].n = 1; }
    cs[n].kind = CALL_PREFILL; cs[n].at = t; cs[n++].n = 23; t += 23;
    for (i = 0; i < 40; i++) { cs[n].kind = CALL_APPEND; cs[n].at = t++; cs[n++].n = 1; }
    cs[n].kind = CALL_RESERVE; cs[n].at = t; cs[n++].n = 150;
    cs[n].kind = CALL_PREFILL; cs[n].at = t; cs[n++].n = 140; t += 140;
    for (i = 0; i < 30; i++) { cs[n].kind = CALL_APPEND; cs[n].at = t++; cs[n++].n = 1; }
    KVQ_ASSERT(n <= max);
    return n;
}

static kvq_status do_call(kvq_cache *c, const call *k, const float *K, const float *V, size_t D)
{
    switch (k->kind) {
    case CALL_PREFILL: return kvq_cache_prefill(c, K + k->at * D, V + k->at * D, k->n);
    case CALL_APPEND:  return kvq_cache_append(c, K + k->at * D, V + k->at * D);
    default:           return kvq_cache_reserve(c, k->n);
    }
}

static const char *call_name[3] = { "prefill", "append", "reserve" };

/* c <- a fresh cache after calls [0, upto) of the script, no failures.    */
static int replay(kvq_cache *c, const kvq_config *cf, const call *cs, size_t upto,
                  const float *K, const float *V)
{
    size_t i;
    kvq_cache_free(c);
    if (kvq_cache_init(c, cf) != KVQ_OK) return 0;
    for (i = 0; i < upto; i++)
        if (do_call(c, &cs[i], K, V, cf->head_dim) != KVQ_OK) return 0;
    return 1;
}

static void sweep(const kvq_config *cf, const char *what, size_t T0, const float *K,
                  const float *V)
{
    call cs[300];
    size_t n = script(T0, cs, 300), i, D = cf->head_dim;
    long nomem[3] = { 0, 0, 0 };
    kvq_cache c, twin;
    char buf[160];
    memset(&c, 0, sizeof c);
    if (kvq_cache_init(&c, cf) != KVQ_OK || kvq_cache_init(&twin, cf) != KVQ_OK) {
        CHECK(0, "%s: init: %s", what, kvq_why());
        return;
    }
    for (i = 0; i < n; i++) {
        fsnap b;
        long at;
        int ok = 0;
        fsnap_take(&b, &c);
        for (at = 0; at < 64 && !ok; at++) {
            kvq_status st;
            if (at > 0 && !replay(&c, cf, cs, i, K, V)) {     /* same start  */
                CHECK(0, "%s: replay to call %zu failed: %s", what, i, kvq_why());
                break;
            }
            ta_fail_at = ta_calls + at;
            st = do_call(&c, &cs[i], K, V, D);
            ta_fail_at = -1;
            if (st == KVQ_OK) { ok = 1; break; }
            nomem[cs[i].kind]++;
            CHECK(st == KVQ_ERR_NOMEM, "%s: %s %zu failing at attempt %ld returned %s (%s)",
                  what, call_name[cs[i].kind], i, at, kvq_status_str(st), kvq_why());
            {
                fsnap a;
                const char *d;
                fsnap_take(&a, &c);
                d = fields_diff(&b, &a, buf, sizeof buf);
                CHECK(d[0] == '\0', "%s: %s (call %zu, n_pos %zu) failing at attempt %ld "
                      "changed the cache: %s", what, call_name[cs[i].kind], i, b.c.n_pos, at, d);
                fsnap_free(&a);
            }
        }
        CHECK(ok, "%s: %s (call %zu) never succeeded", what, call_name[cs[i].kind], i);
        fsnap_free(&b);
        CHECK(do_call(&twin, &cs[i], K, V, D) == KVQ_OK, "%s: twin call %zu: %s", what, i, kvq_why());
        if (!ok) break;
    }
    /* the twin never failed: both observably the same                      */
    {
        fsnap x, y;
        const char *d;
        fsnap_take(&x, &c);
        fsnap_take(&y, &twin);
        d = observed_diff(&x, &y);
        CHECK(d[0] == '\0', "%s: differs from its twin after the failures: %s", what, d);
        fsnap_free(&x); fsnap_free(&y);
    }
    /* every call type allocated at least once, so the sweep failed it      */
    CHECK(nomem[CALL_PREFILL] > 0 && nomem[CALL_APPEND] > 0 && nomem[CALL_RESERVE] > 0,
          "%s: the sweep failed prefill %ld, append %ld, reserve %ld times", what,
          nomem[CALL_PREFILL], nomem[CALL_APPEND], nomem[CALL_RESERVE]);
    kvq_cache_free(&c);
    kvq_cache_free(&twin);
}

static void test_sweeps(void)
{
    const size_t D = 16, T = 400;
    static const size_t T0[3] = { 1, 9, 45 };
    float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
    rng r = { 0xFA17ull };
    size_t i;
    int ci, rot, p;
    for (i = 0; i < T * D; i++) {
        /* an outlier channel and a few loud tokens: OTT's pool competes     */
        K[i] = rnorm(&r) * ((i % D) == 3 ? 6.0f : 1.0f) * ((i / D) % 29 == 7 ? 5.0f : 1.0f);
        V[i] = rnorm(&r);
    }
    for (ci = 0; ci < N_CONFIGS; ci++)
        for (rot = QUICK; rot < 2; rot++)           /* sanitizers, valgrind: */
            for (p = QUICK; p < 3 - QUICK; p++) {   /* rotated, one length   */
                const char *name;
                char what[96];
                kvq_config cf = config_of(ci, D, &name);
                if (rot) {
                    cf.key_rotation = KVQ_ROT_HADAMARD_SIGNS;
                    cf.value_rotation = KVQ_ROT_HADAMARD;
                    cf.rotation_seed = 0x5EEDull;
                }
                snprintf(what, sizeof what, "%s%s, first prefill %zu", name,
                         rot ? " rotated" : "", T0[p]);
                sweep(&cf, what, T0[p], K, V);
            }
    CHECK(!ta_broken && ta_live == 0, "allocator ledger: broken %d, %ld blocks live",
          ta_broken, ta_live);
    free(K); free(V);
}

int main(void)
{
    test_sweeps();
    return TEST_END("test_faults");
}
