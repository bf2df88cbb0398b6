/* examples/05_logquant.c - LogQuant, log-distributed 2-bit KV quantization
   (Chen et al., 2025, arXiv:2503.19950), stepped through on kvq's policy.

     1. Sec. 2.5, Algorithm 1: which positions stay full precision, traced
        against a literal re-implementation of the pseudo-code; 2W < |A| <= 3W;
        the kept positions thin out with distance.
     2. Sec. 2.2 Eq. 1 (token coverage), Sec. 2.3 Table 2 (quantize vs
        evict), and the main claim: LogQuant at KIVI's full-precision budget
        (W = floor(R/3)) has lower attention error than KIVI's recent window,
        on two heads: common.h's (sinks, outlier tokens) and a head whose
        queries spike at log-uniformly distributed distances (Sec. 2.2).
     3. Eq. 4-5: compression ratio, ours from kvq_cache_bytes and a recount,
        beside the paper's formula.
     4. Sec. 2.4, Eq. 3: attention does not depend on the order of stored
        tokens.
   The errors are attention proxies, not the paper's task accuracy.

   Run:  make build/examples/05_logquant && ./build/examples/05_logquant
         [--k K.npy --v V.npy [--q Q.npy]]
   --csv DIR writes logquant_kept.csv (1) and logquant_coverage.csv (2),
   which plots/logquant.py draws.                                           */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

#define BITS    2
#define R_KIVI  128               /* KIVI's full-precision budget (Sec. 3.1) */
#define G_HF    64                /* both methods' group size (Sec. 3.1)     */
#define N_EVAL  17                /* decode steps at which errors are taken  */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

/* Positions held in LogQuant's list A (rows[KVQ_ROWS_WINDOW]) of side s,
   in stored order -> idx; returns the count.                               */
static size_t lq_kept(const kvq_side *s, size_t *idx)
{
    const kvq_rows *a = &s->rows[KVQ_ROWS_WINDOW];
    size_t i;
    for (i = 0; i < a->n; i++) idx[i] = (size_t)a->pos[a->off + i];
    return a->n;
}

/* ------------------------------------------------------------------------ */
/* 1. Algorithm 1, literally: the reference the cache is checked against.
   A holds positions; on a new token, if |A| >= 3W keep A[0:2W:2] + A[2W:3W],
   then append.                                                              */
/* ------------------------------------------------------------------------ */
static void alg1_append(size_t *A, size_t *n, size_t W, size_t pos)
{
    if (*n >= 3 * W) {
        size_t m = 0, i;
        for (i = 0; i < 2 * W; i += 2) A[m++] = A[i];
        for (i = 2 * W; i < 3 * W; i++) A[m++] = A[i];
        *n = m;
    }
    A[(*n)++] = pos;
}

static void part1_trace(const ex_head *h)
{
    enum { W = 4, STEPS = 60 };
    kvq_config cfg = kvq_config_logquant(h->D, BITS, W);
    kvq_cache c;
    size_t A[3 * W + 1], nA = 0, got[3 * W + 1], t, i;
    int same = 1, bounded = 1, monotone = 1, thinned = 0;
    char counts[STEPS * 3 + 1];
    FILE *csv = ex_csv_open("logquant_kept.csv", "window,step,position");  /* Fig. 6 */
    ex_must(ex_cache_init(&c, &cfg), "init", &c);
    printf("1. Algorithm 1, W=%d: full-precision positions ('#') after step t\n", W);
    counts[0] = 0;
    for (t = 0; t < STEPS && t < h->T; t++) {
        size_t n;
        ex_must(kvq_cache_append(&c, h->K + t * h->D, h->V + t * h->D), "append", &c);
        alg1_append(A, &nA, W, t);
        n = lq_kept(&c.k, got);
        same &= n == nA && n == c.v.rows[KVQ_ROWS_WINDOW].n;
        for (i = 0; i < n && i < nA; i++) same &= got[i] == A[i];
        for (i = 0; i < n; i++) ex_csv_row(csv, "%d,%zu,%zu", W, t + 1, got[i]);
        if (t + 1 >= 3 * W) bounded &= n > 2 * W && n <= 3 * W;   /* warm */
        sprintf(counts + strlen(counts), "%2zu ", n);
        if ((t + 1) % 12 == 0) {
            char row[STEPS + 1];
            memset(row, '.', t + 1); row[t + 1] = 0;
            for (i = 0; i < n; i++) row[got[i]] = '#';
            printf("   t=%2zu %s\n", t + 1, row);
        }
    }
    ex_csv_close(csv);
    printf("   |A| per step: %.*s\n                 %s\n", 30 * 3, counts, counts + 30 * 3);
    /* thinning: going back from the newest, the gaps between kept positions
       never shrink (A[0], position 0, always survives: skip that jump)     */
    {
        size_t n = lq_kept(&c.k, got);
        printf("   gaps newest->oldest at t=%zu:", t);
        for (i = n - 1; i >= 2; i--) {
            size_t g = got[i] - got[i - 1], older = got[i - 1] - got[i - 2];
            printf(" %zu", g);
            if (i > 2 && older < g) monotone = 0;
            if (g > 1) thinned = 1;
        }
        printf(" | %zu -> 0\n", got[1]);
    }
    ex_check(same, "kvq's list A equals a literal Algorithm 1 at all %d steps (K and V)", STEPS);
    ex_check(bounded, "after warm-up 2W < |A| <= 3W, i.e. %d..%d (paper: 'between 2W and 3W')",
             2 * W + 1, 3 * W);
    ex_check(monotone && thinned, "density halves going back: gaps 1,1,..,2,2,4 never shrink "
             "(A[0] = position 0 is never dropped: a built-in sink)");
    kvq_cache_free(&c);
}

/* ------------------------------------------------------------------------ */
/* 2. Errors along a decode                                                 */
/* ------------------------------------------------------------------------ */
/* Queries of the Sec. 2.2 head at step t (t tokens cached): each query is
   alpha * (sum of the keys of m "spike" tokens), spikes at distances d drawn
   log-uniformly in [1, t] (P(d) ~ 1/d: spikes thin out with distance, the
   log-distributed pattern of Fig. 1). q (n_q, D).                          */
static void logdecay_queries(const float *K, size_t D, size_t t, size_t n_q,
                             ex_rng *r, float *q)
{
    const size_t m = 4;
    const double alpha = 0.6;
    size_t i, j, d;
    for (i = 0; i < n_q; i++) {
        float *qi = q + i * D;
        memset(qi, 0, D * sizeof(float));
        for (j = 0; j < m; j++) {
            size_t dist = (size_t)exp(ex_uniform(r) * log((double)t));
            size_t s = t - (dist < 1 ? 1 : dist > t ? t : dist);
            for (d = 0; d < D; d++) qi[d] += (float)(alpha * K[s * D + d]);
        }
    }
}

enum { M_LQ, M_KIVI, M_LQ_EVICT, M_KIVI_EVICT, N_M };
typedef struct tally {
    double attn[N_M];      /* sum over evals of relative output error       */
    double l1[N_M];        /* sum over evals of per-query L1 of attention   */
    double cov[2];         /* Eq. 1 coverage x 100 (LogQuant, recent 3W)    */
    double fp_keys[2];     /* full-precision keys held (LogQuant, KIVI)     */
    size_t n;
} tally;

/* Attention restricted to the positions in sel (evicting the rest): output
   rel err and L1 distance of the attention distribution to ref.           */
static void evict_err(const float *K, const float *V, size_t D, const float *q,
                      size_t n_q, const size_t *sel, size_t n_sel, size_t t,
                      const float *ref, const float *pref, double *attn, double *l1)
{
    float *Ks = (float *)xmalloc(n_sel * D * sizeof(float));
    float *Vs = (float *)xmalloc(n_sel * D * sizeof(float));
    float *out = (float *)xmalloc(n_q * D * sizeof(float));
    float *p = (float *)xmalloc(n_q * n_sel * sizeof(float));
    unsigned char *in = (unsigned char *)calloc(t, 1);
    size_t i, j;
    double s = 0;
    if (!in) exit(2);
    for (i = 0; i < n_sel; i++) {
        memcpy(Ks + i * D, K + sel[i] * D, D * sizeof(float));
        memcpy(Vs + i * D, V + sel[i] * D, D * sizeof(float));
        in[sel[i]] = 1;
    }
    ex_must(kvq_attend_dense(Ks, Vs, n_sel, D, q, n_q, out, p), "dense", NULL);
    for (j = 0; j < n_q; j++) {
        for (i = 0; i < n_sel; i++) s += fabs((double)p[j * n_sel + i] - pref[j * t + sel[i]]);
        for (i = 0; i < t; i++) if (!in[i]) s += pref[j * t + i];   /* lost mass */
    }
    *attn += ex_rel_err(ref, out, n_q * D);
    *l1 += s / (double)n_q;
    free(Ks); free(Vs); free(out); free(p); free(in);
}

/* One evaluation at step t for both caches and both eviction variants.     */
static void eval_step(const kvq_cache *c[2], const float *K, const float *V,
                      size_t D, size_t t, const float *q, size_t n_q, size_t W,
                      tally *ty, FILE *csv, const char *head)
{
    float *ref = (float *)xmalloc(n_q * D * sizeof(float));
    float *pref = (float *)xmalloc(n_q * t * sizeof(float));
    float *out = (float *)xmalloc(n_q * D * sizeof(float));
    float *p = (float *)xmalloc(n_q * t * sizeof(float));
    size_t *sel = (size_t *)xmalloc((t + 1) * sizeof(size_t));
    size_t m, i, j, n_sel;
    ex_must(kvq_attend_dense(K, V, t, D, q, n_q, ref, pref), "dense", NULL);
    for (m = 0; m < 2; m++) {                      /* quantized caches      */
        size_t nw = kvq_attend_scratch_floats(c[m], KVQ_ATTN_EAGER);
        float *work = (float *)xmalloc(nw * sizeof(float));
        double s = 0;
        ex_must(kvq_attend(c[m], q, n_q, out, p, KVQ_ATTN_EAGER, work, nw), "attend", c[m]);
        for (i = 0; i < n_q * t; i++) s += fabs((double)p[i] - pref[i]);
        ty->attn[m] += ex_rel_err(ref, out, n_q * D);
        ty->l1[m] += s / (double)n_q;
        ty->fp_keys[m] += (double)(t - c[m]->k.n_units * c[m]->k.tokens_per_unit);
        free(work);
    }
    /* LogQuant eviction keeps A only; KIVI eviction keeps the recent R     */
    n_sel = lq_kept(&c[0]->k, sel);
    evict_err(K, V, D, q, n_q, sel, n_sel, t, ref, pref,
              &ty->attn[M_LQ_EVICT], &ty->l1[M_LQ_EVICT]);
    for (j = 0; j < 2; j++) {                      /* Eq. 1, sinks 0-1 out  */
        double cov = 0;
        if (j == 1) {                              /* KIVI: recent 3W       */
            n_sel = 3 * W < t ? 3 * W : t;
            for (i = 0; i < n_sel; i++) sel[i] = t - n_sel + i;
        }
        for (m = 0; m < n_q; m++)
            for (i = 0; i < n_sel; i++)
                if (sel[i] >= 2) cov += pref[m * t + sel[i]];
        ty->cov[j] += 100.0 * cov / (double)n_q / (double)(3 * W);
        ex_csv_row(csv, "%s,%zu,%s,%.9g", head, t, j ? "recent 3W" : "LogQuant A",
                   100.0 * cov / (double)n_q / (double)(3 * W));
    }
    n_sel = R_KIVI < t ? R_KIVI : t;
    for (i = 0; i < n_sel; i++) sel[i] = t - n_sel + i;
    evict_err(K, V, D, q, n_q, sel, n_sel, t, ref, pref,
              &ty->attn[M_KIVI_EVICT], &ty->l1[M_KIVI_EVICT]);
    ty->n++;
    free(ref); free(pref); free(out); free(p); free(sel);
}

/* Runs LogQuant (W = floor(R/3)) and KIVI (G=64, R=128) side by side over a
   head, evaluating at N_EVAL steps of the second half. Q_fixed (n_q, D) or
   NULL for the Sec. 2.2 log-decay queries. Leaves both caches full.        */
static tally run_pair(kvq_cache c[2], const float *K, const float *V, size_t T,
                      size_t D, const float *Q_fixed, size_t n_q, unsigned long long seed,
                      FILE *csv, const char *head)
{
    size_t W = kvq_logquant_window_for(R_KIVI), t, T0 = T / 2, e = 0;
    kvq_config cl = kvq_config_logquant(D, BITS, W), ck = kvq_config_kivi(D, BITS);
    const kvq_cache *cc[2];
    float *q = (float *)xmalloc(n_q * D * sizeof(float));
    ex_rng r = ex_rng_seed(seed);
    tally ty;
    memset(&ty, 0, sizeof ty);
    ck.group = G_HF;                               /* Sec. 3.1: G = 64 both */
    ex_must(ex_cache_init(&c[0], &cl), "init", &c[0]);
    ex_must(ex_cache_init(&c[1], &ck), "init", &c[1]);
    ex_must(kvq_cache_prefill(&c[0], K, V, T0), "prefill", &c[0]);
    ex_must(kvq_cache_prefill(&c[1], K, V, T0), "prefill", &c[1]);
    cc[0] = &c[0]; cc[1] = &c[1];
    for (t = T0; t < T; t++) {
        ex_must(kvq_cache_append(&c[0], K + t * D, V + t * D), "append", &c[0]);
        ex_must(kvq_cache_append(&c[1], K + t * D, V + t * D), "append", &c[1]);
        if (t + 1 == T0 + 1 + e * (T - T0 - 1) / (N_EVAL - 1)) {   /* spread */
            if (Q_fixed) memcpy(q, Q_fixed, n_q * D * sizeof(float));
            else logdecay_queries(K, D, t + 1, n_q, &r, q);
            eval_step(cc, K, V, D, t + 1, q, n_q, W, &ty, csv, head);
            e++;
        }
    }
    free(q);
    return ty;
}

static void print_tally(const char *name, const tally *ty)
{
    static const char *mname[N_M] = {"LogQuant 2-bit", "KIVI 2-bit", "LogQuant evict",
                                     "KIVI evict"};
    static const double paper_l1[N_M] = {432.50, 556.10, 1076.70, 1612.56};
    int m;
    printf("   %s, %zu decode steps\n"
           "   coverage (Eq. 1, x100, sinks 0-1 excluded): LogQuant %.3f, recent 3W %.3f\n"
           "   mean fp keys held: LogQuant %.0f (A + stage), KIVI %.0f (budget %d)\n"
           "   %-16s %12s %14s %12s\n", name, ty->n, ty->cov[0] / ty->n, ty->cov[1] / ty->n,
           ty->fp_keys[0] / ty->n, ty->fp_keys[1] / ty->n, R_KIVI,
           "method", "attn out err", "attn L1 error", "paper L1 (T2)");
    for (m = 0; m < N_M; m++)
        printf("   %-16s %12.4f %14.4f %12.2f\n", mname[m], ty->attn[m] / ty->n,
               ty->l1[m] / ty->n, paper_l1[m]);
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h;
    size_t T, D, W = kvq_logquant_window_for(R_KIVI);
    kvq_cache cA[2], cB[2];
    tally tA, tB;
    float *KB, *VB;                                /* (T, D) Sec. 2.2 head  */
    ex_rng r;
    size_t i;
    FILE *csv;

    if (!ex_args_parse(argc, argv, &a) || !ex_head_get(&a, 2048, 128, &h)) return 2;
    T = h.T; D = h.D;
    printf("05_logquant: LogQuant (arXiv:2503.19950), %s head T=%zu D=%zu, %d-bit, G=%d\n\n",
           h.real ? "real" : "synthetic", T, D, BITS, G_HF);
    part1_trace(&h);

    /* ==== 2. At KIVI's budget: W = floor(R/3) ============================ */
    printf("\n2. Same full-precision budget: KIVI R=%d vs LogQuant W=floor(R/3)=%zu\n",
           R_KIVI, W);
    ex_check(3 * W == 126, "3W = %zu full-precision tokens at R=128 (paper Sec. 3.2.3: 126)", 3 * W);
    csv = ex_csv_open("logquant_coverage.csv", "head,tokens,selection,coverage_x100");
    tA = run_pair(cA, h.K, h.V, T, D, h.Q, h.n_q, a.seed, csv, "A");
    print_tally(h.real ? "A: the real head" : "A: common.h head (sinks, outlier tokens)", &tA);
    /* the Sec. 2.2 head: i.i.d. N(0,1) keys and values, log-decay queries  */
    KB = (float *)xmalloc(T * D * sizeof(float));
    VB = (float *)xmalloc(T * D * sizeof(float));
    r = ex_rng_seed(a.seed + 100);
    for (i = 0; i < T * D; i++) { KB[i] = (float)ex_normal(&r); VB[i] = (float)ex_normal(&r); }
    tB = run_pair(cB, KB, VB, T, D, NULL, 8, a.seed + 200, csv, "B");
    ex_csv_close(csv);
    print_tally("B: log-decay spikes (Sec. 2.2)", &tB);
    printf("   paper Table 2 (Llama3.1-8B, GSM8K; absolute L1 in its own units, compare\n"
           "   ratios): evict/quantize = %.2fx (LogQuant), %.2fx (KIVI); LogQuant/KIVI\n"
           "   quantized = %.2f (ours: A %.2f, B %.2f)\n",
           1076.70 / 432.50, 1612.56 / 556.10, 432.50 / 556.10,
           tA.l1[M_LQ] / tA.l1[M_KIVI], tB.l1[M_LQ] / tB.l1[M_KIVI]);
    printf("   NOT reproduced: Fig. 4's higher coverage. With spikes at P(d) ~ 1/d a\n"
           "   set's expected coverage is about sum 1/d over its distances; halving the\n"
           "   density while doubling the reach keeps that sum, and |A| < 3W on\n"
           "   average. Where LogQuant is lower it is from (1) more fp keys: KIVI's\n"
           "   key residual cycles 1..R, while per-channel keys dropped from A wait\n"
           "   in kvq's stage (up to G-1 = 63 rows, full precision) for a group, so\n"
           "   LogQuant exceeds the 3W budget on the K side; (2) on head A, position\n"
           "   0 (a sink and outlier token) is never dropped from A\n");
    ex_check(tA.l1[M_LQ_EVICT] > tA.l1[M_LQ] && tA.l1[M_KIVI_EVICT] > tA.l1[M_KIVI] &&
             tB.l1[M_LQ_EVICT] > tB.l1[M_LQ] && tB.l1[M_KIVI_EVICT] > tB.l1[M_KIVI],
             "Sec. 2.3: quantizing beats evicting, both selections, both heads "
             "(A: %.1fx, %.1fx; B: %.1fx, %.1fx)",
             tA.l1[M_LQ_EVICT] / tA.l1[M_LQ], tA.l1[M_KIVI_EVICT] / tA.l1[M_KIVI],
             tB.l1[M_LQ_EVICT] / tB.l1[M_LQ], tB.l1[M_KIVI_EVICT] / tB.l1[M_KIVI]);
    /* The main claim is reported, not asserted: on these synthetic heads the
       margin is small and its sign changes with --seed (seeds 2, 3, 5 lose
       on one head), so a PASS/FAIL on it would be a coin toss.             */
    printf("   main claim (LogQuant < KIVI at the same budget), attention output error:\n"
           "   head A %.4f vs %.4f -> %s;  head B %.4f vs %.4f -> %s\n"
           "   (not checked: the sign depends on --seed on synthetic heads)\n",
           tA.attn[M_LQ] / tA.n, tA.attn[M_KIVI] / tA.n,
           tA.attn[M_LQ] < tA.attn[M_KIVI] ? "LogQuant lower" : "LogQuant NOT lower",
           tB.attn[M_LQ] / tB.n, tB.attn[M_KIVI] / tB.n,
           tB.attn[M_LQ] < tB.attn[M_KIVI] ? "LogQuant lower" : "LogQuant NOT lower");

    /* ==== 3. Eq. 4-5: compression ratio ================================== */
    {
        kvq_bytes by[2];
        kvq_census cs[2];
        int m;
        static const char *mname[2] = {"LogQuant", "KIVI"};
        printf("\n3. Compression at L=%zu tokens (Eq. 4-5; fp16 rows)\n"
               "   %-9s %8s %8s %9s %9s %10s\n", T, "method", "fp K", "fp V",
               "bits/el", "ratio", "Eq. 5");
        for (m = 0; m < 2; m++) {
            /* recount from the census: B bits per quantized element, one
               fp16 scale + zero (32 bits) per G elements, 16 bits per fp row
               element; Eq. 5 is the same without the scale/zero term        */
            size_t s;
            double bits = 0, fp = 0, eq5;
            ex_must(kvq_cache_bytes(&cA[m], &by[m]), "bytes", &cA[m]);
            ex_must(kvq_cache_census(&cA[m], &cs[m]), "census", &cA[m]);
            for (s = 0; s < 2; s++) {
                size_t r, rows = 0;
                for (r = 0; r < KVQ_ROW_REGIONS; r++) rows += cs[m].rows[s][r];
                bits += (double)cs[m].quantized[s] * D * (BITS + 32.0 / G_HF)
                      + (double)rows * D * 16.0;
                fp += (double)rows / 2.0;          /* mean of K and V       */
            }
            bits /= 2.0 * (double)T * (double)D;
            eq5 = 16.0 * T / (2.0 * ((double)T - fp) + 16.0 * fp);
            printf("   %-9s %8zu %8zu %9.4f %8.2fx %9.2fx\n", mname[m],
                   by[m].full_precision[0] / (D * 2), by[m].full_precision[1] / (D * 2),
                   by[m].bits_per_element, 16.0 / by[m].bits_per_element, eq5);
            ex_check(fabs(bits - by[m].bits_per_element) < 1e-12,
                     "%s: kvq_cache_bytes %.6f bits == recount from census %.6f",
                     mname[m], by[m].bits_per_element, bits);
        }
        printf("   Eq. 5 leaves out the fp16 scale + zero per group (%.2f bits/element at\n"
               "   G=%d), which is why our ratio is below it\n", 32.0 / G_HF, G_HF);
    }

    /* ==== 4. Sec. 2.4 Eq. 3: position-agnostic attention ================= */
    {
        const kvq_cache *c = &cA[0];
        float *Kr = (float *)xmalloc(T * D * sizeof(float));    /* (T, D)   */
        float *Vr = (float *)xmalloc(T * D * sizeof(float));
        float *Kp = (float *)xmalloc(T * D * sizeof(float));
        float *Vp = (float *)xmalloc(T * D * sizeof(float));
        float *o1 = (float *)xmalloc(h.n_q * D * sizeof(float));
        float *o2 = (float *)xmalloc(h.n_q * D * sizeof(float));
        float *o3 = (float *)xmalloc(h.n_q * D * sizeof(float));
        size_t *perm = (size_t *)xmalloc(T * sizeof(size_t));
        size_t nw = kvq_attend_scratch_floats(c, KVQ_ATTN_ONLINE), j;
        float *work = (float *)xmalloc(nw * sizeof(float));
        double dperm = 0, dcache = 0;
        ex_rng pr = ex_rng_seed(a.seed + 300);
        for (i = 0; i < T; i++) {                  /* what the cache holds  */
            ex_must(kvq_cache_read(c, 0, i, Kr + i * D), "read", c);
            ex_must(kvq_cache_read(c, 1, i, Vr + i * D), "read", c);
            perm[i] = i;
        }
        for (i = T - 1; i > 0; i--) {              /* Fisher-Yates shuffle  */
            size_t k = (size_t)(ex_u64(&pr) % (i + 1)), tmp = perm[i];
            perm[i] = perm[k]; perm[k] = tmp;
        }
        for (i = 0; i < T; i++) {
            memcpy(Kp + i * D, Kr + perm[i] * D, D * sizeof(float));
            memcpy(Vp + i * D, Vr + perm[i] * D, D * sizeof(float));
        }
        ex_must(kvq_attend_dense(Kr, Vr, T, D, h.Q, h.n_q, o1, NULL), "dense", NULL);
        ex_must(kvq_attend_dense(Kp, Vp, T, D, h.Q, h.n_q, o2, NULL), "dense", NULL);
        ex_must(kvq_attend(c, h.Q, h.n_q, o3, NULL, KVQ_ATTN_ONLINE, work, nw), "attend", c);
        for (j = 0; j < h.n_q * D; j++) {
            double x = fabs((double)o1[j] - o2[j]), y = fabs((double)o1[j] - o3[j]);
            dperm = x > dperm ? x : dperm;
            dcache = y > dcache ? y : dcache;
        }
        printf("\n4. Eq. 3, A.V = A_P.V_P: the LogQuant cache's rows in position order vs\n"
               "   a random permutation vs kvq_attend (regions: quantized, A, stage)\n");
        ex_check(dperm <= 1e-6, "permuted rows: max |out diff| %.1e <= 1e-6 (double sums, "
                 "float output)", dperm);
        ex_check(dcache <= 1e-4, "region order (kvq_attend, fp32 online): max |out diff| "
                 "%.1e <= 1e-4", dcache);
        free(Kr); free(Vr); free(Kp); free(Vp); free(o1); free(o2); free(o3);
        free(perm); free(work);
    }

    for (i = 0; i < 2; i++) { kvq_cache_free(&cA[i]); kvq_cache_free(&cB[i]); }
    free(KB); free(VB);
    ex_head_free(&h);
    return ex_finish("05_logquant");
}
