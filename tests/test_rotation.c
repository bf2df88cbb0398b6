/* tests/test_rotation.c - rotation before quantizing (kvq.h Sec. 6.1) on
   its own and on every cache policy.

   Groups (each a function below; its comment says where the expectation
   comes from):
     1. kvq_rotate against a dense Hadamard matrix built by the Sylvester
        recursion in double precision, times the sign vector drawn from
        tests/test.h's splitmix64 (the documented generator): every D from
        1 to 512, both kinds, both directions
     2. orthonormality: the matrix R (columns R e_j) satisfies R R^T = I,
        and rotating back after rotating returns x, to stated tolerances
     3. a rotated cache against an unrotated twin fed the rotated rows:
        every policy (FULL, KIVI, HF, OTT, LogQuant) x {keys, values, both}
        x {Hadamard, with signs}: the stored codes, scales, zeros and rows
        bit for bit; kvq_attend (EAGER, ONLINE) equal to the twin's on the
        rotated query with the output rotated back, bit for bit;
        kvq_cache_read equal to the twin's row rotated back; kvq_cache_check
        passes; then the same after StreamingLLM eviction and compaction
     4. KIVI's first quantized key unit equals kvq_quantize_matrix of the
        rotated rows, bit for bit
     5. a rotated fp32 FULL cache: attention and read-back equal the dense
        attention and rows in the caller's basis within float rounding
     6. OTT's magnitude ranking is taken in the rotated basis: keys built so
        that the smallest L1 (OTT's outlier) differs between the two bases
     6b. kvq_cache_bytes' allocated counts the rotation's buffers; reserved
        appends allocate nothing
     7. bad inputs: a rotated row beyond KVQ_MAX_ABS_INPUT is refused with a
        reason and the cache is unchanged; allocator failure in init
     8. kvq_rotate on finite rows near FLT_MAX: refused (KVQ_ERR_RANGE, a
        reason, X untouched) exactly when this file's own float transform in
        the documented rounding order overflows, else equal to it bit for
        bit
     9. a rotated prefill's scratch does not grow with the prompt: peak and
        retained heap (the counting allocator) no more than the unrotated
        twin's plus the init-time rotation buffers, the stored bytes, reads
        and attention bit for bit the twin's; a row whose rotation exceeds
        KVQ_MAX_ABS_INPUT deep in a prompt is refused by number, the cache
        unchanged; a row past the cheap bound but inside the limit is kept */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <stdint.h>

#define TEST_ALLOC
#define TEST_RNG
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"

/* s (D): the documented sign vector, s_j = -1 where bit 63 of splitmix64's
   j-th output (state seed) is set.                                        */
static void signs_of(uint64_t seed, size_t D, double *s)
{
    rng r = { seed };
    size_t j;
    for (j = 0; j < D; j++) s[j] = (rnext(&r) >> 63) ? -1.0 : 1.0;
}

/* H (D, D) by the Sylvester recursion H_2n = [[H, H], [H, -H]].           */
static void sylvester(size_t D, double *H)
{
    size_t n, i, j;
    H[0] = 1.0;
    for (n = 1; n < D; n *= 2)
        for (i = 0; i < n; i++)
            for (j = 0; j < n; j++) {
                double h = H[i * D + j];
                H[i * D + j + n] = h;
                H[(i + n) * D + j] = h;
                H[(i + n) * D + j + n] = -h;
            }
}

/* 1. the transform against the dense matrix                               */
static void test_dense(void)
{
    size_t D, i, j;
    rng r = { 7 };
    for (D = 1; D <= (size_t)COUNT(512, 128); D *= 2) {
        double *H = (double *)malloc(D * D * sizeof(double)), *sg = (double *)malloc(D * sizeof(double));
        float *x = (float *)malloc(D * sizeof(float)), *y = (float *)malloc(D * sizeof(float));
        int kind, inv;
        sylvester(D, H);
        for (kind = KVQ_ROT_HADAMARD; kind <= KVQ_ROT_HADAMARD_SIGNS; kind++)
            for (inv = 0; inv < 2; inv++) {
                uint64_t seed = 0x1234u + D;
                double worst = 0.0, l1 = 0.0, tol;
                signs_of(seed, D, sg);
                for (j = 0; j < D; j++) { x[j] = rnorm(&r) * 3.0f; l1 += fabs(x[j]); }
                memcpy(y, x, D * sizeof(float));
                CHECK(kvq_rotate((kvq_rotation)kind, seed, D, inv, y, 1) == KVQ_OK,
                      "kvq_rotate D=%zu", D);
                for (i = 0; i < D; i++) {
                    double want = 0.0;
                    for (j = 0; j < D; j++) {
                        double sj = kind == KVQ_ROT_HADAMARD_SIGNS ? sg[j] : 1.0,
                               si = kind == KVQ_ROT_HADAMARD_SIGNS ? sg[i] : 1.0;
                        /* R = H S / sqrt(D);  R^T = S H / sqrt(D)          */
                        want += inv ? si * H[i * D + j] * x[j] : H[i * D + j] * sj * x[j];
                    }
                    want /= sqrt((double)D);
                    if (fabs(want - y[i]) > worst) worst = fabs(want - y[i]);
                }
                /* log2(D) + 1 roundings, each at most eps of a partial sum
                   bounded by sum |x|                                       */
                tol = (log2((double)D) + 2.0) * FLT_EPSILON * l1 / sqrt((double)D);
                CHECK(worst <= tol, "D=%zu kind %d inverse %d: max error %g > %g",
                      D, kind, inv, worst, tol);
            }
        free(H); free(sg); free(x); free(y);
    }
}

/* 2. R R^T = I and the inverse                                            */
static void test_orthonormal(void)
{
    size_t D, i, j, k;
    rng r = { 11 };
    for (D = 2; D <= 256; D *= 2) {
        float *R = (float *)calloc(D * D, sizeof(float));   /* row j = R e_j */
        float *x = (float *)malloc(D * sizeof(float)), *y = (float *)malloc(D * sizeof(float));
        double worst = 0.0, back = 0.0, mx = 0.0;
        for (j = 0; j < D; j++) R[j * D + j] = 1.0f;
        CHECK(kvq_rotate(KVQ_ROT_HADAMARD_SIGNS, 99, D, 0, R, D) == KVQ_OK, "rotate e_j");
        for (i = 0; i < D; i++)
            for (j = 0; j < D; j++) {
                double dot = 0.0;
                for (k = 0; k < D; k++) dot += (double)R[i * D + k] * R[j * D + k];
                if (fabs(dot - (i == j)) > worst) worst = fabs(dot - (i == j));
            }
        CHECK(worst <= 1e-6, "D=%zu: |R R^T - I| = %g > 1e-6", D, worst);
        for (j = 0; j < D; j++) { x[j] = rnorm(&r); if (fabs(x[j]) > mx) mx = fabs(x[j]); }
        memcpy(y, x, D * sizeof(float));
        kvq_rotate(KVQ_ROT_HADAMARD_SIGNS, 99, D, 0, y, 1);
        kvq_rotate(KVQ_ROT_HADAMARD_SIGNS, 99, D, 1, y, 1);
        for (j = 0; j < D; j++) if (fabs(y[j] - x[j]) > back) back = fabs(y[j] - x[j]);
        CHECK(back <= 4.0 * log2((double)D + 1) * FLT_EPSILON * mx * sqrt((double)D),
              "D=%zu: rotate then rotate back moved x by %g", D, back);
        free(R); free(x); free(y);
    }
}

/* The policies under test, D = 32.                                        */
static kvq_config policy_config(int i)
{
    kvq_config c;
    switch (i) {
    case 0:  c = kvq_config_full(32, 16); break;
    case 1:  c = kvq_config_kivi(32, 2); c.group = 16; c.residual = 32; break;
    case 2:  { kvq_hf_params h = kvq_hf_defaults(2);
               h.q_group_size = 16; h.residual_length = 32; c = kvq_config_hf(32, h); } break;
    case 3:  c = kvq_config_ott(32, 2, 5); c.group = 16; c.residual = 16; c.ott_k = 2;
             c.ott_aux = 4; break;
    default: c = kvq_config_logquant(32, 2, 8); c.group = 16; break;
    }
    return c;
}
static const char *policy_name[] = { "FULL", "KIVI", "HF", "OTT", "LogQuant" };
#define N_POLICIES 5

/* 1 if two caches hold the same bytes in every live store.                */
static int same_storage(const kvq_cache *a, const kvq_cache *b)
{
    int s, r;
    size_t rowb = a->cfg.head_dim * (a->cfg.fp_bits == 32 ? 4u : 2u);
    for (s = 0; s < 2; s++) {
        const kvq_side *x = s ? &a->v : &a->k, *y = s ? &b->v : &b->k;
        size_t groups = x->n_units * x->geom.groups_per_unit;
        if (x->n_units != y->n_units) return 0;
        if (groups && (memcmp(x->words, y->words, groups * x->geom.words_per_group * 4u) ||
                       memcmp(x->sz, y->sz, groups * sizeof(kvq_sz))))
            return 0;
        for (r = 0; r < KVQ_ROW_REGIONS; r++) {
            const kvq_rows *p = &x->rows[r], *q = &y->rows[r];
            if (p->n != q->n) return 0;
            if (p->n && (memcmp((const char *)p->data + p->off * rowb,
                                (const char *)q->data + q->off * rowb, p->n * rowb) ||
                         memcmp(p->pos + p->off, q->pos + q->off, p->n * sizeof(int32_t))))
                return 0;
        }
        if (memcmp(x->loc, y->loc, a->n_pos * sizeof(uint32_t))) return 0;
    }
    return 1;
}

/* kvq_attend and kvq_cache_read of the rotated cache a equal those of the
   twin b (fed rotated rows) on the rotated query, output rotated back.    */
static void check_twin(const char *what, const kvq_cache *a, const kvq_cache *b,
                       const float *q, size_t n_q)
{
    const kvq_config *cf = &a->cfg;
    size_t D = cf->head_dim, p, n;
    int mode, s;
    float *qr = (float *)malloc(n_q * D * sizeof(float));
    float *oa = (float *)malloc(n_q * D * sizeof(float)), *ob = (float *)malloc(n_q * D * sizeof(float));
    float ra[64], rb[64];
    CHECK(kvq_cache_check((kvq_cache *)a) == KVQ_OK, "%s: check: %s", what, kvq_why());
    CHECK(same_storage(a, b), "%s: stored bytes differ from the twin fed rotated rows", what);
    memcpy(qr, q, n_q * D * sizeof(float));
    kvq_rotate(cf->key_rotation, cf->rotation_seed, D, 0, qr, n_q);
    for (mode = 0; mode < 2; mode++) {
        size_t na = n_q * kvq_attend_scratch_floats(a, (kvq_attn_mode)mode),
               nb = n_q * kvq_attend_scratch_floats(b, (kvq_attn_mode)mode);
        float *wa = (float *)malloc(na * sizeof(float)), *wb = (float *)malloc(nb * sizeof(float));
        kvq_status sa = kvq_attend(a, q, n_q, oa, NULL, (kvq_attn_mode)mode, wa, na);
        kvq_status sb = kvq_attend(b, qr, n_q, ob, NULL, (kvq_attn_mode)mode, wb, nb);
        CHECK(sa == KVQ_OK && sb == KVQ_OK, "%s: attend %d: %s", what, mode, kvq_why());
        kvq_rotate(cf->value_rotation, cf->rotation_seed, D, 1, ob, n_q);
        CHECK(memcmp(oa, ob, n_q * D * sizeof(float)) == 0,
              "%s: attend mode %d differs from the twin's", what, mode);
        /* the smallest scratch (one head) still serves n_q heads, one walk
           per head: ONLINE's bound between walks, 1e-5 max|out| + 1e-6    */
        if (mode == KVQ_ATTN_ONLINE) {
            double worst = 0.0, mx = 0.0;
            size_t i;
            sa = kvq_attend(a, q, n_q, ob, NULL, KVQ_ATTN_ONLINE, wa, na / n_q);
            for (i = 0; i < n_q * D; i++) {
                if (fabs(oa[i] - ob[i]) > worst) worst = fabs(oa[i] - ob[i]);
                if (fabs(oa[i]) > mx) mx = fabs(oa[i]);
            }
            CHECK(sa == KVQ_OK && worst <= 1e-5 * mx + 1e-6,
                  "%s: ONLINE with one head's scratch differs by %g", what, worst);
        }
        free(wa); free(wb);
    }
    for (p = 0, n = 0; p < a->n_pos; p++)
        for (s = 0; s < 2; s++) {
            kvq_rotation rot = s ? cf->value_rotation : cf->key_rotation;
            if (kvq_cache_read(a, s, p, ra) != KVQ_OK) continue;   /* absent */
            CHECK(kvq_cache_read(b, s, p, rb) == KVQ_OK, "%s: read %zu", what, p);
            kvq_rotate(rot, cf->rotation_seed, D, 1, rb, 1);
            n += memcmp(ra, rb, D * sizeof(float)) != 0;
        }
    CHECK(n == 0, "%s: %zu read-back rows differ from the twin's rotated back", what, n);
    free(qr); free(oa); free(ob);
}

/* 3. every policy x rotation against the unrotated twin, then after
   eviction and compaction                                                 */
static void test_twins(void)
{
    const size_t D = 32, T = 150, n_q = 3;
    int pol, sides, kind;
    rng r = { 3 };
    float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
    float *KR = (float *)malloc(T * D * sizeof(float)), *VR = (float *)malloc(T * D * sizeof(float));
    float q[3 * 32];
    size_t i, t;
    for (i = 0; i < T * D; i++) {
        K[i] = rnorm(&r) * ((i % D) == 5 ? 12.0f : 1.0f);   /* an outlier channel */
        V[i] = rnorm(&r);
    }
    for (i = 0; i < n_q * D; i++) q[i] = rnorm(&r);
    for (pol = 0; pol < N_POLICIES; pol++)
        for (sides = 1; sides <= 3; sides++)
            for (kind = KVQ_ROT_HADAMARD; kind <= KVQ_ROT_HADAMARD_SIGNS; kind++) {
                kvq_config ca = policy_config(pol), cb = ca;
                kvq_cache a, b;
                uint8_t keep[150];
                size_t T0 = 40;
                char what[96];
                snprintf(what, sizeof what, "%s %s%s%s", policy_name[pol],
                         sides & 1 ? "K" : "", sides & 2 ? "V" : "",
                         kind == KVQ_ROT_HADAMARD_SIGNS ? " signs" : "");
                ca.key_rotation = sides & 1 ? (kvq_rotation)kind : KVQ_ROT_NONE;
                ca.value_rotation = sides & 2 ? (kvq_rotation)kind : KVQ_ROT_NONE;
                ca.rotation_seed = 0xC0FFEEu + (uint64_t)pol;
                memcpy(KR, K, T * D * sizeof(float));
                memcpy(VR, V, T * D * sizeof(float));
                kvq_rotate(ca.key_rotation, ca.rotation_seed, D, 0, KR, T);
                kvq_rotate(ca.value_rotation, ca.rotation_seed, D, 0, VR, T);
                if (kvq_cache_init(&a, &ca) != KVQ_OK || kvq_cache_init(&b, &cb) != KVQ_OK) {
                    CHECK(0, "%s: init: %s", what, kvq_why());
                    continue;
                }
                CHECK(kvq_cache_prefill(&a, K, V, T0) == KVQ_OK, "%s prefill: %s", what, kvq_why());
                kvq_cache_prefill(&b, KR, VR, T0);
                for (t = T0; t < T; t++) {
                    CHECK(kvq_cache_append(&a, K + t * D, V + t * D) == KVQ_OK,
                          "%s append %zu: %s", what, t, kvq_why());
                    kvq_cache_append(&b, KR + t * D, VR + t * D);
                    if (t % 37 == 0) check_twin(what, &a, &b, q, n_q);
                }
                check_twin(what, &a, &b, q, n_q);
                /* eviction and compaction act on positions, not bases      */
                if (pol != 3 && pol != 4) {          /* OTT, LogQuant refuse */
                    CHECK(kvq_evict_streaming(NULL, T, 4, 64, keep) == KVQ_OK, "streaming");
                    CHECK(kvq_cache_evict(&a, keep, T, NULL) == KVQ_OK &&
                          kvq_cache_evict(&b, keep, T, NULL) == KVQ_OK, "%s: evict", what);
                    CHECK(kvq_cache_compact(&a, 16, NULL) == KVQ_OK &&
                          kvq_cache_compact(&b, 16, NULL) == KVQ_OK, "%s: compact", what);
                    check_twin(what, &a, &b, q, n_q);
                }
                kvq_cache_free(&a);
                kvq_cache_free(&b);
            }
    free(K); free(V); free(KR); free(VR);
}

/* 4. KIVI's first key unit is kvq_quantize_matrix of the rotated rows      */
static void test_kivi_codes(void)
{
    const size_t D = 64, G = 32, T = 96;
    kvq_config cf = kvq_config_kivi(D, 2);
    kvq_cache c;
    kvq_layout L;
    rng r = { 5 };
    float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
    float *KR = (float *)malloc(G * D * sizeof(float));
    uint32_t *words;
    kvq_sz *sz;
    size_t i;
    for (i = 0; i < T * D; i++) { K[i] = rnorm(&r) * (i % D < 2 ? 20.0f : 1.0f); V[i] = rnorm(&r); }
    cf.group = G; cf.residual = 64; cf.key_rotation = KVQ_ROT_HADAMARD_SIGNS; cf.rotation_seed = 42;
    CHECK(kvq_cache_init(&c, &cf) == KVQ_OK, "init");
    CHECK(kvq_cache_prefill(&c, K, V, T) == KVQ_OK, "prefill: %s", kvq_why());
    memcpy(KR, K, G * D * sizeof(float));
    kvq_rotate(KVQ_ROT_HADAMARD_SIGNS, 42, D, 0, KR, G);
    for (i = 0; i < G * D; i++)      /* rows wait in the fp16 residual first */
        KR[i] = kvq_f16_to_f32(kvq_f32_to_f16(KR[i]));
    kvq_layout_init(&L, G, D, 2, G, KVQ_PER_CHANNEL);
    words = (uint32_t *)malloc(L.total_words * 4);
    sz = (kvq_sz *)malloc(L.total_groups * sizeof(kvq_sz));
    kvq_quantize_matrix(KR, G, D, 2, G, KVQ_PER_CHANNEL, cf.zero_mode, words, sz);
    CHECK(c.k.n_units >= 1 && memcmp(c.k.words, words, L.total_words * 4) == 0 &&
          memcmp(c.k.sz, sz, L.total_groups * sizeof(kvq_sz)) == 0,
          "KIVI's first key unit != kvq_quantize_matrix of the rotated rows");
    kvq_cache_free(&c);
    free(K); free(V); free(KR); free(words); free(sz);
}

/* 5. fp32 FULL with rotation: the caller's basis within float rounding    */
static void test_full_basis(void)
{
    const size_t D = 128, T = 70;
    kvq_config cf = kvq_config_full(D, 32);
    kvq_cache c;
    rng r = { 9 };
    float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
    float q[128], out[128], want[128], row[128], *w;
    size_t i, n;
    double worst = 0.0, rworst = 0.0;
    for (i = 0; i < T * D; i++) { K[i] = rnorm(&r); V[i] = rnorm(&r); }
    for (i = 0; i < D; i++) q[i] = rnorm(&r);
    cf.key_rotation = KVQ_ROT_HADAMARD; cf.value_rotation = KVQ_ROT_HADAMARD_SIGNS;
    cf.rotation_seed = 77;
    CHECK(kvq_cache_init(&c, &cf) == KVQ_OK, "init");
    CHECK(kvq_cache_prefill(&c, K, V, T) == KVQ_OK, "prefill");
    n = kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER);
    w = (float *)malloc(n * sizeof(float));
    CHECK(kvq_attend(&c, q, 1, out, NULL, KVQ_ATTN_EAGER, w, n) == KVQ_OK, "attend");
    kvq_attend_dense(K, V, T, D, q, 1, want, NULL);
    for (i = 0; i < D; i++) if (fabs(out[i] - want[i]) > worst) worst = fabs(out[i] - want[i]);
    CHECK(worst <= 2e-5, "rotated fp32 attention vs dense: %g > 2e-5", worst);
    for (i = 0; i < T; i++) {
        size_t d;
        kvq_cache_read(&c, (int)(i & 1), i, row);
        for (d = 0; d < D; d++) {
            double e = fabs(row[d] - (i & 1 ? V : K)[i * D + d]);
            if (e > rworst) rworst = e;
        }
    }
    CHECK(rworst <= 1e-5, "rotated fp32 read-back vs input: %g > 1e-5", rworst);
    kvq_cache_free(&c);
    free(K); free(V); free(w);
}

/* 6. OTT ranks key magnitude (L1; small is outlier) in the stored, rotated
   basis. Token A = 10 e_0 has L1 10, rotated 10 sqrt(D) = 40; token B =
   2 (1, ..., 1) has L1 2D = 32, rotated (plain Hadamard) 2 sqrt(D) e_0: L1
   8. The other tokens are N(0, 20^2) rows, L1 >= L2 (about 80) in either
   basis. Unrotated, A is the outlier; rotated, B is.                      */
static void test_ott_basis(void)
{
    const size_t D = 16;
    int rot;
    for (rot = 0; rot < 2; rot++) {
        kvq_config cf = kvq_config_ott(D, 2, 5);
        kvq_cache c;
        float k[16], v[16];
        size_t t, d, A = 5, B = 9;
        int32_t kept = -1;
        rng r = { 21 };
        cf.group = 16; cf.residual = 16; cf.ott_k = 1; cf.ott_aux = 1;
        cf.key_rotation = rot ? KVQ_ROT_HADAMARD : KVQ_ROT_NONE;
        if (kvq_cache_init(&c, &cf) != KVQ_OK) { CHECK(0, "OTT init: %s", kvq_why()); return; }
        for (t = 0; t < 40; t++) {
            for (d = 0; d < D; d++) {
                float noise = 20.0f * rnorm(&r);
                k[d] = t == A ? (d == 0 ? 10.0f : 0.0f) : t == B ? 2.0f : noise;
                v[d] = 0.1f * (float)d;
            }
            kvq_cache_append(&c, k, v);
        }
        if (c.k.rows[KVQ_ROWS_OUTLIER].n == 1)
            kept = c.k.rows[KVQ_ROWS_OUTLIER].pos[c.k.rows[KVQ_ROWS_OUTLIER].off];
        CHECK(kept == (int32_t)(rot ? B : A), "OTT %s: outlier pool holds %d, want %zu",
              rot ? "rotated" : "unrotated", (int)kept, rot ? B : A);
        kvq_cache_free(&c);
    }
}

/* 6b. kvq_cache_bytes' `allocated` is every heap byte the cache owns, the
   rotation's rows and signs included (the counting allocator's ledger);
   appends after a reserve allocate nothing                               */
static void test_allocated(void)
{
    const size_t D = 32, T = 80;
    kvq_config cf = kvq_config_kivi(D, 2);
    kvq_cache c;
    kvq_bytes b;
    rng r = { 13 };
    float K[80 * 32], V[80 * 32];
    size_t i, before;
    for (i = 0; i < T * D; i++) { K[i] = rnorm(&r); V[i] = rnorm(&r); }
    cf.group = 16; cf.residual = 32;
    cf.key_rotation = KVQ_ROT_HADAMARD_SIGNS; cf.value_rotation = KVQ_ROT_HADAMARD;
    if (kvq_cache_init(&c, &cf) != KVQ_OK) { CHECK(0, "init: %s", kvq_why()); return; }
    kvq_cache_bytes(&c, &b);
    CHECK(b.allocated == ta_bytes, "after init: allocated %zu, allocator holds %zu",
          b.allocated, ta_bytes);
    kvq_cache_reserve(&c, T);
    kvq_cache_prefill(&c, K, V, 40);            /* rotated row by row: no growth */
    kvq_cache_bytes(&c, &b);
    CHECK(b.allocated == ta_bytes, "after prefill: allocated %zu, allocator holds %zu",
          b.allocated, ta_bytes);
    before = (size_t)ta_calls;
    for (i = 40; i < T; i++) kvq_cache_append(&c, K + i * D, V + i * D);
    CHECK((size_t)ta_calls == before, "rotated appends allocated %zu times",
          (size_t)ta_calls - before);
    kvq_cache_free(&c);
}

/* 7. refusals                                                             */
static void test_refusals(void)
{
    const size_t D = 16;
    kvq_config cf = kvq_config_kivi(D, 2);
    kvq_cache c;
    kvq_bytes b0, b1;
    float k[16], v[16];
    size_t d, before, n_fail = 0;
    int at;
    cf.group = 16; cf.residual = 16; cf.key_rotation = KVQ_ROT_HADAMARD;
    CHECK(kvq_cache_init(&c, &cf) == KVQ_OK, "init");
    for (d = 0; d < D; d++) { k[d] = 1.0f; v[d] = 1.0f; }
    kvq_cache_append(&c, k, v);
    /* every element 30000 is inside the input bound; rotated, element 0 is
       16 * 30000 / 4 = 120000, outside                                      */
    for (d = 0; d < D; d++) k[d] = 30000.0f;
    kvq_cache_bytes(&c, &b0);
    before = c.n_pos;
    kvq__why_buf[0] = '\0';
    CHECK(kvq_cache_append(&c, k, v) == KVQ_ERR_RANGE, "rotated overflow not refused");
    CHECK(strstr(kvq_why(), "rotated") != NULL, "reason: '%s'", kvq_why());
    CHECK(kvq_cache_prefill(&c, k, v, 1) == KVQ_ERR_RANGE, "prefill: rotated overflow");
    kvq_cache_bytes(&c, &b1);
    CHECK(c.n_pos == before && b0.payload == b1.payload && kvq_cache_check(&c) == KVQ_OK,
          "a refused append changed the cache");
    kvq_cache_free(&c);
    /* init with the allocator failing at each attempt: NOMEM, no leak      */
    cf.key_rotation = KVQ_ROT_HADAMARD_SIGNS;
    for (at = 0; at < 12; at++) {
        kvq_status st;
        ta_fail_at = ta_calls + at;
        st = kvq_cache_init(&c, &cf);
        ta_fail_at = -1;
        if (st == KVQ_OK) { kvq_cache_free(&c); break; }
        n_fail += st == KVQ_ERR_NOMEM;
        CHECK(st == KVQ_ERR_NOMEM && ta_live == 0, "init failing at %d: %d", at, (int)st);
    }
    CHECK(n_fail >= 2, "the rotation's allocations were not reached (%zu)", n_fail);
}

/* 8. kvq_rotate refuses a finite X whose rotation overflows fp32          */

/* x (D) <- R x or R^T x, kvq.h Sec. 6.1's rounding order written out here:
   signs (rotating), the butterflies h = 1, 2, ..., the scale, signs
   (rotating back).                                                        */
static void ref_rotate(int kind, uint64_t seed, size_t D, int inv, float *x)
{
    double sg[1024];
    float scale = (float)(1.0 / sqrt((double)D));
    size_t h, i, j;
    signs_of(seed, D, sg);
    if (kind == KVQ_ROT_HADAMARD_SIGNS && !inv) for (j = 0; j < D; j++) x[j] *= (float)sg[j];
    for (h = 1; h < D; h *= 2)
        for (i = 0; i < D; i += 2 * h)
            for (j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    for (j = 0; j < D; j++) x[j] *= scale;
    if (kind == KVQ_ROT_HADAMARD_SIGNS && inv) for (j = 0; j < D; j++) x[j] *= (float)sg[j];
}

static int all_finite(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) if (!isfinite(x[i])) return 0;
    return 1;
}

static void test_rotate_overflow(void)
{
    rng r = { 0x0F10ull };
    float X[4], X0[4], Y[3 * 1024], Y0[3 * 1024], W[3 * 1024];
    size_t D, i, j, T = 3, n_refused = 0, n_kept = 0, n_near = 0;
    int kind, inv, trial;
    /* the case: D = 4, every value 3e38 (finite); the first
       butterfly gives 6e38, beyond FLT_MAX                                 */
    for (kind = KVQ_ROT_HADAMARD; kind <= KVQ_ROT_HADAMARD_SIGNS; kind++)
        for (inv = 0; inv < 2; inv++) {
            for (j = 0; j < 4; j++) X[j] = X0[j] = 3e38f;
            kvq__why_buf[0] = '\0';
            CHECK(kvq_rotate((kvq_rotation)kind, 7, 4, inv, X, 1) == KVQ_ERR_RANGE,
                  "kind %d inverse %d: 4 x 3e38 not refused", kind, inv);
            CHECK(strstr(kvq_why(), "kvq_rotate") != NULL && strstr(kvq_why(), "overflow") != NULL,
                  "kind %d inverse %d: reason '%s'", kind, inv, kvq_why());
            CHECK(memcmp(X, X0, sizeof X) == 0, "kind %d inverse %d: a refused kvq_rotate "
                  "changed X", kind, inv);
        }
    /* one 3e38 among zeros: every stage holds 3e38 at most, the output is
       1.5e38 each; a finite result must not be refused                     */
    X[0] = 3e38f; X[1] = X[2] = X[3] = 0.0f;
    CHECK(kvq_rotate(KVQ_ROT_HADAMARD, 0, 4, 0, X, 1) == KVQ_OK && X[0] == 1.5e38f &&
          X[3] == 1.5e38f, "4 x (3e38, 0, 0, 0): %s", kvq_why());
    /* rows scaled to straddle FLT_MAX / D (where a row can first overflow):
       the call is refused exactly when some row's reference overflows     */
    for (D = 1; D <= 1024; D *= 2)
        for (kind = KVQ_ROT_HADAMARD; kind <= KVQ_ROT_HADAMARD_SIGNS; kind++)
            for (inv = 0; inv < 2; inv++)
                for (trial = 0; trial < 8; trial++) {
                    uint64_t seed = 0xABCull + (uint64_t)trial;
                    float mag = 3.4e38f / (float)D * (0.25f + 0.25f * (float)trial);
                    if (!isfinite(mag)) mag = 3.4e38f;      /* inputs finite */
                    int finite = 1;
                    kvq_status st;
                    for (i = 0; i < T * D; i++) {
                        /* same-signed runs add up; random ones cancel       */
                        float u = (float)runif(&r);
                        Y[i] = mag * (trial & 1 ? u : (rnext(&r) & 1 ? u : -u));
                    }
                    memcpy(Y0, Y, T * D * sizeof(float));
                    memcpy(W, Y, T * D * sizeof(float));
                    for (i = 0; i < T; i++) {
                        ref_rotate(kind, seed, D, inv, W + i * D);
                        finite &= all_finite(W + i * D, D);
                    }
                    kvq__why_buf[0] = '\0';
                    st = kvq_rotate((kvq_rotation)kind, seed, D, inv, Y, T);
                    if (finite) {
                        float m = 0.0f;
                        for (i = 0; i < T * D; i++) m = fabsf(Y0[i]) > m ? fabsf(Y0[i]) : m;
                        n_kept++;
                        n_near += !isfinite(m * (float)D);    /* sum |x| may overflow */
                        CHECK(st == KVQ_OK && memcmp(Y, W, T * D * sizeof(float)) == 0,
                              "D=%zu kind %d inverse %d trial %d: %s, not the reference",
                              D, kind, inv, trial, kvq_status_str(st));
                    } else {
                        n_refused++;
                        CHECK(st == KVQ_ERR_RANGE && kvq_why()[0] != '\0' &&
                              memcmp(Y, Y0, T * D * sizeof(float)) == 0,
                              "D=%zu kind %d inverse %d trial %d: overflowing rows gave %s "
                              "(X %s)", D, kind, inv, trial, kvq_status_str(st),
                              memcmp(Y, Y0, T * D * sizeof(float)) ? "changed" : "untouched");
                    }
                }
    /* kept rows include some whose bound max |x| * D overflows: the refusal
       is exact, not a conservative bound                                  */
    CHECK(n_refused > 20 && n_kept > 20 && n_near > 10, "the sweep straddles no boundary: "
          "%zu refused, %zu kept (%zu beyond the bound)", n_refused, n_kept, n_near);
}

/* 9. the rotated prefill's scratch                                        */
static void test_prefill_scratch(void)
{
    const size_t D = 32, T = (size_t)COUNT(4096, 1024), n_q = 2;
    /* the rotation's buffers from init: two rows (+ 16 floats to align)
       and the sign vector; nothing of them scales with T                   */
    const size_t rot_bytes = (2 * D + 16 + D) * sizeof(float);
    float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
    float *KR = (float *)malloc(T * D * sizeof(float)), *VR = (float *)malloc(T * D * sizeof(float));
    float q[2 * 32];
    rng r = { 0x5CA7C4ull };
    size_t i, t;
    int pol;
    for (i = 0; i < T * D; i++) {
        K[i] = rnorm(&r) * ((i % D) == 9 ? 10.0f : 1.0f);
        V[i] = rnorm(&r);
    }
    for (i = 0; i < n_q * D; i++) q[i] = rnorm(&r);
    for (pol = 0; pol < N_POLICIES; pol++) {
        kvq_config ca = policy_config(pol), cb = ca;
        kvq_cache a, b;
        kvq_bytes ba, bb;
        size_t base, peak_a, peak_b, T1 = T / 2, T2 = T - T1 - 40;
        char what[64];
        ca.key_rotation = KVQ_ROT_HADAMARD_SIGNS;
        ca.value_rotation = KVQ_ROT_HADAMARD;
        ca.rotation_seed = 0xD1CEull;
        memcpy(KR, K, T * D * sizeof(float));
        memcpy(VR, V, T * D * sizeof(float));
        kvq_rotate(ca.key_rotation, ca.rotation_seed, D, 0, KR, T);
        kvq_rotate(ca.value_rotation, ca.rotation_seed, D, 0, VR, T);
        if (kvq_cache_init(&a, &ca) != KVQ_OK || kvq_cache_init(&b, &cb) != KVQ_OK) {
            CHECK(0, "%s: init: %s", what, kvq_why());
            continue;
        }
        /* a prompt into the empty cache, then one into a non-empty one     */
        for (i = 0; i < 2; i++) {
            size_t at = i ? T1 : 0, n = i ? T2 : T1;
            snprintf(what, sizeof what, "%s, prompt %zu (%zu tokens)", policy_name[pol], i, n);
            base = ta_bytes; ta_peak = ta_bytes;
            CHECK(kvq_cache_prefill(&a, K + at * D, V + at * D, n) == KVQ_OK, "%s: %s", what, kvq_why());
            peak_a = ta_peak - base;
            base = ta_bytes; ta_peak = ta_bytes;
            CHECK(kvq_cache_prefill(&b, KR + at * D, VR + at * D, n) == KVQ_OK, "%s: twin", what);
            peak_b = ta_peak - base;
            kvq_cache_bytes(&a, &ba);
            kvq_cache_bytes(&b, &bb);
            CHECK(peak_a <= peak_b, "%s: the rotated prefill's peak heap is %zu bytes "
                  "above the twin's", what, peak_a - peak_b);
            CHECK(ba.allocated <= bb.allocated + rot_bytes, "%s: the rotated cache keeps "
                  "%zu bytes more than its twin (the rotation's own: %zu)", what,
                  ba.allocated - bb.allocated, rot_bytes);
            /* the two caches are all kvq holds: `allocated` is the ledger's */
            CHECK(ba.allocated + bb.allocated == ta_bytes, "%s: allocated %zu + %zu, the "
                  "allocator holds %zu", what, ba.allocated, bb.allocated, ta_bytes);
            check_twin(what, &a, &b, q, n_q);
        }
        for (t = T1 + T2; t < T; t++) {             /* decoding goes on      */
            kvq_cache_append(&a, K + t * D, V + t * D);
            kvq_cache_append(&b, KR + t * D, VR + t * D);
        }
        check_twin(what, &a, &b, q, n_q);
        kvq_cache_free(&a);
        kvq_cache_free(&b);
    }
    free(K); free(V); free(KR); free(VR);
}

/* 9b. the rotated range check of a prefill, row by row                     */
static void test_prefill_range(void)
{
    const size_t D = 32, T = 50;
    kvq_config ca = kvq_config_kivi(D, 2), cb;
    kvq_cache a, b;
    float K[50 * 32], V[50 * 32], KR[50 * 32], VR[50 * 32], q[32];
    rng r = { 0x9A9Eull };
    size_t i;
    int side;
    ca.group = 16; ca.residual = 32;
    ca.key_rotation = KVQ_ROT_HADAMARD_SIGNS; ca.value_rotation = KVQ_ROT_HADAMARD;
    ca.rotation_seed = 3;
    cb = ca; cb.key_rotation = cb.value_rotation = KVQ_ROT_NONE;
    for (i = 0; i < T * D; i++) { K[i] = rnorm(&r); V[i] = rnorm(&r); }
    for (i = 0; i < D; i++) q[i] = rnorm(&r);
    CHECK(kvq_cache_init(&a, &ca) == KVQ_OK && kvq_cache_init(&b, &cb) == KVQ_OK, "init");
    memcpy(KR, K, sizeof K); memcpy(VR, V, sizeof V);
    kvq_rotate(ca.key_rotation, 3, D, 0, KR, 20);
    kvq_rotate(ca.value_rotation, 3, D, 0, VR, 20);
    kvq_cache_prefill(&a, K, V, 20);
    kvq_cache_prefill(&b, KR, VR, 20);
    for (side = 0; side < 2; side++) {
        /* row 37 of the prompt: every element 30000, inside the input bound;
           rotated, one element is 32 * 30000 / sqrt(32) = 169706           */
        float *X = side ? V : K, saved[32];
        char want[32];
        memcpy(saved, X + 37 * D, sizeof saved);
        for (i = 0; i < D; i++) X[37 * D + i] = 30000.0f;
        kvq__why_buf[0] = '\0';
        CHECK(kvq_cache_prefill(&a, K, V, T) == KVQ_ERR_RANGE, "side %d: a rotated row beyond "
              "KVQ_MAX_ABS_INPUT at 37 not refused", side);
        snprintf(want, sizeof want, "rotated %s row 37", side ? "V" : "K");
        CHECK(strstr(kvq_why(), want) != NULL, "side %d: reason '%s'", side, kvq_why());
        check_twin("refused prefill", &a, &b, q, 1);
        memcpy(X + 37 * D, saved, sizeof saved);
    }
    /* one 20000 among zeros: max |x| sqrt(D) = 113137 is past the cheap
       bound, the rotated row (20000 / sqrt(32) = 3536 each) is inside      */
    for (i = 0; i < D; i++) K[37 * D + i] = V[41 * D + i] = 0.0f;
    K[37 * D + 4] = 20000.0f; V[41 * D + 30] = -20000.0f;
    memcpy(KR, K, sizeof K); memcpy(VR, V, sizeof V);
    kvq_rotate(ca.key_rotation, 3, D, 0, KR, T);
    kvq_rotate(ca.value_rotation, 3, D, 0, VR, T);
    CHECK(kvq_cache_prefill(&a, K, V, T) == KVQ_OK, "a row inside the limit refused: %s", kvq_why());
    kvq_cache_prefill(&b, KR, VR, T);
    check_twin("prefill past the cheap bound", &a, &b, q, 1);
    kvq_cache_free(&a);
    kvq_cache_free(&b);
}

int main(void)
{
    test_dense();
    test_orthonormal();
    test_twins();
    test_kivi_codes();
    test_full_basis();
    test_ott_basis();
    test_allocated();
    test_refusals();
    test_rotate_overflow();
    test_prefill_scratch();
    test_prefill_range();
    return TEST_END("test_rotation");
}
