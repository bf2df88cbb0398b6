/* tests/test_examples_ott.c - what examples/04_ott.c used to check and
   print beyond the paper's steps, as tests (issue 17: examples as short
   narratives). On common.h's synthetic head by default; with
   --k K.npy --v V.npy [--q Q.npy] on a real head. Given any argument
   (e.g. --seed 1 for the synthetic head) it also prints the diagnostic
   table of group 1, which walkthrough 10a quotes.

     1. Why keeping tokens exact can RAISE the Fig. 1(c) loss (walkthrough
        10a Sec. A3): the output error splits exactly into share moved +
        inside H + inside R; shifting H's scores by lme(R) - lme(H) makes its
        share exact; lme >= mean (Jensen); the split softmax agrees with
        kvq_attend_dense. (Was 04_ott section 2's printed diagnostic.)
     2. The replacement mean (kvq_ott_mean, a choice the paper leaves
        open): the mean of the rest never gives a larger key error than the
        mean of all G, on the synthetic head (G = 128) and on a stress head
        with 15% outlier tokens and G = 4. (Was 04_ott section 5's checks.)
     3. OTT with k = 0 (layers 0-1) == KIVI with G = R = 128 when G | T:
        the same regions and the same groups, so the same reads and the
        same attention output, bit for bit. (Was 04_ott section 4's check.) */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "tests/test.h"
#include "examples/common.h"

#define BITS 2
#define TQ   128                 /* Fig. 1(c) experiment: OTT's group size   */

/* Sum over queries of sum_d |out - ref|: Fig. 1(c)'s "L1 loss".            */
static double l1_dist(const float *a, const float *b, size_t n)
{
    double s = 0;
    size_t i;
    for (i = 0; i < n; i++) s += fabs((double)a[i] - (double)b[i]);
    return s;
}

/* Softmax of one query's scores sc (T), the set's shifted by `shift`, over
   V (T, D): b[x] (2, D) is side x's weighted mean value (x = 0 the rest,
   1 the set; 0 if its weight underflows). Returns the set's share.         */
static double split_softmax(const double *sc, const unsigned char *set, double shift,
                            const float *V, size_t T, size_t D, double *b)
{
    double m = -HUGE_VAL, w[2] = {0, 0};
    size_t t, d;
    int x;
    for (t = 0; t < T; t++) {
        double st = sc[t] + (set[t] ? shift : 0);
        if (st > m) m = st;
    }
    memset(b, 0, 2 * D * sizeof(double));
    for (t = 0; t < T; t++) {
        double e;
        x = set[t] != 0;
        e = exp(sc[t] + (x ? shift : 0) - m);
        w[x] += e;
        for (d = 0; d < D; d++) b[x * D + d] += e * V[t * D + d];
    }
    for (x = 0; x < 2; x++)
        for (d = 0; d < D && w[x] > 0; d++) b[x * D + d] /= w[x];
    return w[1] / (w[0] + w[1]);
}

/* s (T) = K q / sqrt(D) in double, as kvq_attend_dense scores.             */
static void scores_of(const float *K, const float *q, size_t T, size_t D, double *s)
{
    size_t t, d;
    for (t = 0; t < T; t++) {
        double x = 0;
        for (d = 0; d < D; d++) x += (double)q[d] * K[t * D + d];
        s[t] = x / sqrt((double)D);
    }
}

/* Rows: all quantized; the same with H shifted so its share is exact (by
   lme(R) - lme(H)); H exact (fig1c_loss, rule 0); H exact shifted by
   lme(R); H exact shifted by mean(R), the plain shift.                     */
enum { WHY_NONE, WHY_NONE_FIX, WHY_KEPT, WHY_KEPT_FIX, WHY_KEPT_MEAN, WHY_ROWS };
typedef struct why_row {
    double loss, moved, in_h, in_r;  /* L1 of out' - out and its three parts */
    double share;                    /* mean over queries of P'_H - P_H      */
} why_row;

static double why_identity_err, why_ref_err;  /* max over all adds      */

/* Adds one query's out' = P' b_H + (1 - P') b_R to row r; a, b: (2, D).   */
static void why_add(why_row *r, double P, double Pq, const double *a, const double *b,
                    const float *ref, size_t D, size_t n_q)
{
    size_t d;
    for (d = 0; d < D; d++) {
        double out = Pq * b[D + d] + (1 - Pq) * b[d];
        r->loss  += fabs(out - (double)ref[d]);
        r->moved += fabs((Pq - P) * (b[D + d] - b[d]));
        r->in_h  += fabs(P * (b[D + d] - a[D + d]));
        r->in_r  += fabs((1 - P) * (b[d] - a[d]));
        {   /* the split is an identity: out' - out == moved + in H + in R  */
            double exact = P * a[D + d] + (1 - P) * a[d];
            double parts = (Pq - P) * (b[D + d] - b[d]) + P * (b[D + d] - a[D + d])
                         + (1 - P) * (b[d] - a[d]);
            double e1 = fabs((out - exact) - parts), e2 = fabs(exact - (double)ref[d]);
            if (e1 > why_identity_err) why_identity_err = e1;
            if (e2 > why_ref_err) why_ref_err = e2;
        }
    }
    r->share += (Pq - P) / (double)n_q;
}


static void fig1c_why(const ex_head *h, size_t Tq, const size_t *order, size_t n,
                      const float *ref_all, int verbose)
{
    static const char *row_name[WHY_ROWS] = {
        "all quantized", "  H shifted so its share is exact", "H exact",
        "  H shifted by lme(R)", "  H shifted by mean(R)"};
    size_t D = h->D, n_q = h->n_q, q, t, v, i;
    /* index v: 0 all quantized, 1 H exact                                 */
    unsigned char *set = (unsigned char *)calloc(Tq, 2);  /* (2, Tq): none, H */
    float *kv = (float *)malloc(4 * Tq * D * sizeof(float));  /* (4, Tq, D)  */
    float *Kq[2] = {NULL, NULL}, *Vq[2] = {NULL, NULL};  /* (Tq, D) each     */
    double *s = (double *)malloc(3 * Tq * sizeof(double)); /* (3, Tq): s, s'v */
    double *ab = (double *)malloc(4 * D * sizeof(double));  /* a, b: (2, D)  */
    double mean[2][2] = {{0}}, lme[2][2] = {{0}}, abs_r[2] = {0}, kerr[2] = {0}, knorm = 0;
    double share_err[2] = {0, 0}, fix_err = 0, dense_l1[2];
    float *out = (float *)malloc(n_q * D * sizeof(float));
    int jensen_bad = 0;
    why_row row[WHY_ROWS];
    if (!set || !kv || !s || !ab || !out) { fprintf(stderr, "out of memory\n"); exit(2); }
    memset(row, 0, sizeof row);
    for (i = 0; i < n; i++) set[Tq + order[i]] = 1;
    for (v = 0; v < 2; v++) {
        Kq[v] = kv + v * Tq * D;
        Vq[v] = kv + (2 + v) * Tq * D;
        ex_fake_quant_keep(h->K, h->V, Tq, D, TQ, D < 128 ? D : 128, BITS, set + v * Tq, Kq[v], Vq[v]);
        ex_must(kvq_attend_dense(Kq[v], Vq[v], Tq, D, h->Q, n_q, out, NULL), "dense", NULL);
        dense_l1[v] = l1_dist(ref_all, out, n_q * D);
    }
    for (q = 0; q < n_q; q++) {
        const float *qv = h->Q + q * D, *ref = ref_all + q * D;
        double P, m = -HUGE_VAL, z = 0;
        scores_of(h->K, qv, Tq, D, s);
        for (v = 0; v < 2; v++) scores_of(Kq[v], qv, Tq, D, s + (1 + v) * Tq);
        P = split_softmax(s, set + Tq, 0, h->V, Tq, D, ab);            /* a */
        for (t = 0; t < Tq; t++) m = s[t] > m ? s[t] : m;
        for (t = 0; t < Tq; t++) z += exp(s[t] - m);
        for (v = 0; v < 2; v++) {
            double se[2] = {0, 0}, sx[2] = {0, 0}, sp[2] = {0, 0}, sa = 0, mq[2], lq[2], Pq;
            int r = v ? WHY_KEPT : WHY_NONE, x;
            for (t = 0; t < Tq; t++) {
                double p = exp(s[t] - m) / z, e = s[(1 + v) * Tq + t] - s[t];
                x = set[Tq + t];
                sp[x] += p; se[x] += p * e; sx[x] += p * exp(e);
                if (!x) sa += p * fabs(e);
            }
            Pq = split_softmax(s + (1 + v) * Tq, set + Tq, 0, Vq[v], Tq, D, ab + 2 * D);
            why_add(&row[r], P, Pq, ab, ab + 2 * D, ref, D, n_q);
            share_err[v] += fabs(Pq - P);
            for (x = 0; x < 2; x++) {
                mq[x] = sp[x] > 0 ? se[x] / sp[x] : 0;
                lq[x] = sp[x] > 0 && sx[x] > 0 ? log(sx[x] / sp[x]) : 0;
                mean[v][x] += mq[x] / (double)n_q; lme[v][x] += lq[x] / (double)n_q;
            }
            abs_r[v] += (sp[0] > 0 ? sa / sp[0] : 0) / (double)n_q;
            Pq = split_softmax(s + (1 + v) * Tq, set + Tq, lq[0] - lq[1], Vq[v], Tq, D,
                               ab + 2 * D);
            why_add(&row[r + 1], P, Pq, ab, ab + 2 * D, ref, D, n_q);
            fix_err = fabs(Pq - P) > fix_err ? fabs(Pq - P) : fix_err;     /* ~0 */
            for (x = 0; x < 2; x++)                       /* Jensen: lme >= mean */
                jensen_bad += sp[x] > 0 && lq[x] < mq[x] - 1e-12;
            if (v) {
                Pq = split_softmax(s + 2 * Tq, set + Tq, mq[0], Vq[1], Tq, D, ab + 2 * D);
                why_add(&row[WHY_KEPT_MEAN], P, Pq, ab, ab + 2 * D, ref, D, n_q);
            }
        }
    }
    for (t = 0; t < Tq * D; t++) {                   /* R's key error        */
        double k = h->K[t];
        if (set[Tq + t / D]) continue;
        knorm += k * k;
        for (v = 0; v < 2; v++) kerr[v] += (Kq[v][t] - k) * (Kq[v][t] - k);
    }
    /* the properties the analysis rests on                                */
    for (v = 0; v < 2; v++)
        CHECK(fabs(row[v ? WHY_KEPT : WHY_NONE].loss - dense_l1[v]) <= 1e-4 * dense_l1[v] + 1e-6,
              "why (%s): the split softmax's loss %.6f == kvq_attend_dense's %.6f",
              v ? "H exact" : "all quantized", row[v ? WHY_KEPT : WHY_NONE].loss, dense_l1[v]);
    CHECK(fix_err <= 1e-9, "why: shifting H by lme(R) - lme(H) makes its share exact "
          "(max |P' - P| %.2e)", fix_err);
    CHECK(row[WHY_NONE_FIX].moved <= 1e-6 * (row[WHY_NONE].moved + 1) &&
          row[WHY_KEPT_FIX].moved <= 1e-6 * (row[WHY_KEPT].moved + 1),
          "why: with H's share exact, nothing is moved (%.2e, %.2e)",
          row[WHY_NONE_FIX].moved, row[WHY_KEPT_FIX].moved);
    for (i = 0; i < WHY_ROWS; i++)       /* |sum of parts| <= sum of |parts| */
        CHECK(row[i].loss <= row[i].moved + row[i].in_h + row[i].in_r + 1e-6 * (row[i].loss + 1),
              "why row %zu: loss %.6f > moved + in H + in R %.6f", i, row[i].loss,
              row[i].moved + row[i].in_h + row[i].in_r);
    CHECK(row[WHY_KEPT].in_h <= 1e-9 * (row[WHY_NONE].in_h + 1),
          "why: H exact leaves no error inside H (%.2e)", row[WHY_KEPT].in_h);
    CHECK(jensen_bad == 0, "why: lme < mean for %d (query, set) pairs (Jensen says never)", jensen_bad);
    CHECK(share_err[0] > 0 && share_err[1] > 0, "why: quantizing moves H's share (%.3g, %.3g)",
          share_err[0], share_err[1]);
    if (verbose) {
    printf("   Why keeping H = the %zu smallest-L1 tokens exact moves the loss (R: the\n"
           "   rest). Per query e = s' - s (score error) and p = exact attention; over\n"
           "   a set X, mean = sum p e / sum p, lme = log(sum p e^e / sum p): the shift\n"
           "   softmax applies to X. Averages over queries; share: of H, in points\n"
           "   %-16s %8s %8s %8s %8s %8s\n", n, "", "mean(H)", "mean(R)", "lme(H)",
           "lme(R)", "share");
    for (v = 0; v < 2; v++)
        printf("   %-16s %+8.3f %+8.3f %+8.3f %+8.3f %+8.1f\n", v ? "H exact" : "all quantized",
               mean[v][1], mean[v][0], lme[v][1], lme[v][0],
               100 * row[v ? WHY_KEPT : WHY_NONE].share);
    printf("   loss = sum |out' - out| = |share moved + inside H + inside R|\n"
           "   %-34s %9s %9s %9s %9s\n", "", "loss", "moved", "in H", "in R");
    for (i = 0; i < WHY_ROWS; i++)
        printf("   %-34s %9.1f %9.1f %9.1f %9.1f\n", row_name[i], row[i].loss,
               row[i].moved, row[i].in_h, row[i].in_r);
    ex_must(kvq_attend_dense(Kq[1], Vq[0], Tq, D, h->Q, n_q, out, NULL), "dense", NULL);
    printf("   H exact in K only: loss %.1f; in V only: ", l1_dist(ref_all, out, n_q * D));
    ex_must(kvq_attend_dense(Kq[0], Vq[1], Tq, D, h->Q, n_q, out, NULL), "dense", NULL);
    printf("%.1f\n   R without H in its groups: mean |e| %.3f -> %.3f, key error %.3f -> %.3f\n",
           l1_dist(ref_all, out, n_q * D), abs_r[0], abs_r[1],
           knorm > 0 ? sqrt(kerr[0] / knorm) : 0, knorm > 0 ? sqrt(kerr[1] / knorm) : 0);
    }
    free(set); free(kv); free(s); free(ab); free(out);
}


/* ------------------------------------------------------------------------ */
/* 1. The Fig. 1(c) diagnostic on H = the 16 smallest-L1 tokens             */
/* ------------------------------------------------------------------------ */
static void test_why(const ex_head *h, int verbose)
{
    size_t T = h->T - h->T % TQ, D = h->D, t, d, *order;
    double *score;
    float *ref;
    if (T == 0) { printf("test_why: head shorter than %d tokens, skipped\n", TQ); return; }
    order = (size_t *)ex_alloc(T * sizeof(size_t));
    score = (double *)ex_alloc(T * sizeof(double));
    ref = (float *)ex_alloc(h->n_q * D * sizeof(float));
    ex_must(kvq_attend_dense(h->K, h->V, T, D, h->Q, h->n_q, ref, NULL), "dense", NULL);
    for (t = 0; t < T; t++) {
        for (d = 0, score[t] = 0; d < D; d++) score[t] += fabs((double)h->K[t * D + d]);
        order[t] = t;
    }
    for (t = 1; t < T; t++) {                    /* insertion sort by score */
        size_t x = order[t], j = t;
        while (j > 0 && score[order[j - 1]] > score[x]) { order[j] = order[j - 1]; j--; }
        order[j] = x;
    }
    why_identity_err = why_ref_err = 0;
    fig1c_why(h, T, order, 16, ref, verbose);
    CHECK(why_identity_err <= 1e-9, "why: out' - out != moved + in H + in R (max %.2e)",
          why_identity_err);
    CHECK(why_ref_err <= 1e-4, "why: the split's exact output differs from kvq_attend_dense "
          "by %.2e", why_ref_err);
    free(order); free(score); free(ref);
}

/* ------------------------------------------------------------------------ */
/* 2, 3. Streaming caches: prefill half the head, decode the rest           */
/* ------------------------------------------------------------------------ */
static double key_err(const kvq_cache *c, const ex_head *h)
{
    float *Kr = (float *)ex_alloc(h->T * h->D * sizeof(float));
    size_t t;
    double e;
    for (t = 0; t < h->T; t++) ex_must(kvq_cache_read(c, 0, t, Kr + t * h->D), "read", c);
    e = ex_rel_err(h->K, Kr, h->T * h->D);
    free(Kr);
    return e;
}

static void test_mean(const ex_head *h0, unsigned long long seed)
{
    ex_synth s = ex_synth_defaults(1024, h0->D, seed + 1);
    ex_head g;
    int m;
    memset(&g, 0, sizeof g);
    s.outlier_token_rate = 0.15;                   /* the stress head       */
    g.T = s.T; g.D = s.D; g.n_q = s.n_queries;
    g.K = (float *)ex_alloc(g.T * g.D * sizeof(float));
    g.V = (float *)ex_alloc(g.T * g.D * sizeof(float));
    g.Q = (float *)ex_alloc(g.n_q * g.D * sizeof(float));
    ex_synth_make(&s, g.K, g.V, g.Q, NULL);
    for (m = 0; m < 2; m++) {
        const ex_head *x = m ? &g : h0;
        kvq_config cr = kvq_config_ott(x->D, BITS, 2), ca;
        kvq_cache c;
        double er, ea;
        if (m) { cr.group = 4; cr.ott_aux = 1024; }
        ca = cr; ca.ott_mean = KVQ_OTT_MEAN_ALL;
        ex_cache_stream(&c, &cr, x->K, x->V, x->T, x->T / 2); er = key_err(&c, x); kvq_cache_free(&c);
        ex_cache_stream(&c, &ca, x->K, x->V, x->T, x->T / 2); ea = key_err(&c, x); kvq_cache_free(&c);
        CHECK(er <= ea, "%s: key error, mean of the rest %.6f > mean of all %.6f",
              m ? "stress head, G=4" : "this head, G=128", er, ea);
    }
    ex_head_free(&g);
}

static void test_k0_is_kivi(const ex_head *h)
{
    kvq_config ck = kvq_config_kivi(h->D, BITS), co = kvq_config_ott(h->D, BITS, 0);
    kvq_cache a, b;
    float *oa = (float *)ex_alloc(2 * h->n_q * h->D * sizeof(float)), *ob = oa + h->n_q * h->D;
    float *ra = (float *)ex_alloc(2 * h->D * sizeof(float)), *rb = ra + h->D;
    size_t t, side, bad = 0;
    if (h->T % 128 || h->T < 256) { printf("test_k0_is_kivi: T %% 128 != 0, skipped\n"); free(oa); free(ra); return; }
    ck.group = 128; ck.value_group = co.value_group;
    ex_cache_stream(&a, &ck, h->K, h->V, h->T, h->T / 2);
    ex_cache_stream(&b, &co, h->K, h->V, h->T, h->T / 2);
    for (t = 0; t < h->T; t++)
        for (side = 0; side < 2; side++) {
            ex_must(kvq_cache_read(&a, (int)side, t, ra), "read", &a);
            ex_must(kvq_cache_read(&b, (int)side, t, rb), "read", &b);
            bad += memcmp(ra, rb, h->D * sizeof(float)) != 0;
        }
    ex_attend(&a, h->Q, h->n_q, oa, NULL, KVQ_ATTN_ONLINE);
    ex_attend(&b, h->Q, h->n_q, ob, NULL, KVQ_ATTN_ONLINE);
    CHECK(bad == 0, "OTT k=0 vs KIVI G=R=128: %zu rows read back differently", bad);
    CHECK(memcmp(oa, ob, h->n_q * h->D * sizeof(float)) == 0,
          "OTT k=0 vs KIVI G=R=128: attention outputs differ");
    kvq_cache_free(&a); kvq_cache_free(&b);
    free(oa); free(ra);
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h;
    if (!ex_args_parse(argc, argv, &a, EX_QUERIES) || !ex_head_get(&a, 2048, 128, &h)) return 2;
    test_why(&h, argc > 1);
    test_mean(&h, a.seed);
    test_k0_is_kivi(&h);
    ex_head_free(&h);
    return TEST_END("test_examples_ott");
}
