/* examples/04_ott.c - OTT, KV cache quantization with outlier token tracing
   (Su et al., ACL 2025), in the paper's order on one head:
     1. Sec. 3.1, Table 9, Fig. 4: in a key outlier channel a few tokens are
        near zero, and their whole key is small in L1 norm.
     2. Fig. 1(c): keeping the smallest-L1 tokens exact helps most.
     3. Sec. 3.2, Appendix E: an OTT cache finds those tokens as it runs.
     4. Sec. 4.2-4.3: OTT-2 beats KIVI-2 at the same G for slightly more
        memory (an attention-output proxy, not the paper's task accuracy).
   Run:  ./build/examples/04_ott [--k K.npy --v V.npy [--q Q.npy]] [--seed N]
         [--csv DIR: ott_channel.csv (1), ott_fig1c.csv (2), for plots/ott.py]
   Data: common.h's synthetic head (T = 2048, D = 128) or a real head of any
   D. Moved to tests/test_examples_ott.c: why keeping tokens exact can raise
   a head's loss (walkthrough 10a), the replacement mean, k = 0 == KIVI.  */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

#define BITS   2
#define TQ     128     /* OTT's G (Sec. 4.1): the key groups of Fig. 1(c)  */
#define MARGIN 0.05    /* "lower" claims are decided outside 1 +- 5%        */

/* Fig. 1(c)'s "L1 loss": sum |out - ref| over queries and channels when the
   n tokens a rule picks stay exact among the first Tq (a multiple of TQ).
   Rules: 0 smallest L1 key norm, 1 random (mean of 8 draws), 2 largest L1;
   order (Tq): token ids by ascending L1; ref (n_q, D). The rest is
   quantized as ex_fake_quant_keep does (common.h): K per-channel in groups
   of TQ tokens, V per-token in groups of vg, BITS bits.                  */
static double keep_loss(const ex_head *h, size_t Tq, size_t vg, const size_t *order,
                        int rule, size_t n, ex_rng *r, const float *ref)
{
    size_t D = h->D, i, draw, n_draw = rule == 1 ? 8 : 1;
    unsigned char *keep = (unsigned char *)ex_alloc(Tq);
    float *Kq = (float *)ex_alloc(2 * Tq * D * sizeof(float)), *Vq = Kq + Tq * D;
    float *out = (float *)ex_alloc(h->n_q * D * sizeof(float));
    double loss = 0;
    for (draw = 0; draw < n_draw; draw++) {
        memset(keep, 0, Tq);
        for (i = 0; i < n; i++)
            keep[rule == 0 ? order[i] : rule == 2 ? order[Tq - 1 - i]
                                                  : (size_t)(ex_u64(r) % Tq)] = 1;
        ex_fake_quant_keep(h->K, h->V, Tq, D, TQ, vg, BITS, keep, Kq, Vq);
        ex_must(kvq_attend_dense(Kq, Vq, Tq, D, h->Q, h->n_q, out, NULL), "dense", NULL);
        for (i = 0; i < h->n_q * D; i++) loss += fabs((double)out[i] - ref[i]) / (double)n_draw;
    }
    free(keep); free(Kq); free(out);
    return loss;
}

/* The head and what the steps learn about it.                              */
typedef struct ott_head {
    const ex_head *h;
    size_t vg;                   /* OTT's V group: min(128, D) or a divisor */
    double ratio;                /* ex_outlier_ratio of the keys            */
    int outliers;                /* ratio >= EX_OUTLIER_RATIO               */
    size_t oc;                   /* the outlier channel (largest mean |k|)  */
    double lo, hi;               /* its |k| range                           */
    unsigned char *is_out;       /* (T) the outlier tokens                  */
    double *l1;                  /* (T) L1 norm of each key (App. E)        */
    size_t *order;               /* (T) token ids by ascending L1           */
    float *ref, *probs;          /* exact attention: (n_q, D), (n_q, T)     */
} ott_head;

/* 1. Table 9's procedure: the outlier channel is the one of largest mean
   |k|; split its |k| range into ten equal bins and count the tokens. OTT
   rests on KIVI's outlier channels: without one, its claims are n/a.     */
static void show_few_tokens_sit_near_zero_in_the_outlier_channel(ott_head *o)
{
    static const double qasper[10] = {0.20, 0.35, 0.18, 0.02, 0.62, 8.53, 29.88, 37.29, 19.44, 3.49};
    const ex_head *h = o->h;
    size_t T = h->T, D = h->D, t, d, i;
    double best = -1, bins[10] = {0}, low = 0;
    o->lo = HUGE_VAL; o->hi = 0;
    for (d = 0; d < D; d++) {
        double m = 0;
        for (t = 0; t < T; t++) m += fabs(h->K[t * D + d]);
        if (m > best) { best = m; o->oc = d; }
    }
    for (t = 0; t < T; t++) {
        double x = fabs(h->K[t * D + o->oc]);
        o->lo = x < o->lo ? x : o->lo; o->hi = x > o->hi ? x : o->hi;
    }
    for (t = 0; t < T; t++) {
        int b = o->hi > o->lo ? (int)(10.0 * (fabs(h->K[t * D + o->oc]) - o->lo) / (o->hi - o->lo)) : 0;
        bins[b > 9 ? 9 : b] += 100.0 / (double)T;
    }
    printf("\n1. Outlier channel %zu (mean |k| %.1fx the median channel's), %% of tokens\n"
           "   per tenth of its |k| range (Table 9)\n   bin:    ", o->oc, o->ratio);
    for (i = 0; i < 10; i++) printf("%6zu", i);
    for (i = 0; i < 20; i++)
        printf("%s%6.2f", i == 0 ? "\n   ours:   " : i == 10 ? "\n   qasper: " : "",
               i < 10 ? bins[i] : qasper[i - 10]);
    printf("\n");
    for (i = 0; i < 4; i++) low += bins[i];
    if (!o->outliers) ex_na("no outlier channel (%.2fx < %.0fx): no tail to find", o->ratio, EX_OUTLIER_RATIO);
    else if (T < TQ) ex_na("%zu tokens, fewer than one OTT group (%d): too few for tenths", T, TQ);
    else ex_check(low > 0 && low < 5.0, "a few tokens sit in the bottom 40%% of the range: "
                  "ours %.2f%%, paper 0.75%% (qasper); claim: > 0 and < 5%%", low);
}

/* 1. Fig. 4: the whole key of an outlier token (the generator's truth, or
   Table 9's bottom 40% on real data) is small too, so the L1 norm over ALL
   channels, Appendix E's score, finds them. Fills is_out, l1 and order.  */
static void show_outlier_tokens_have_small_l1_keys(ott_head *o)
{
    const ex_head *h = o->h;
    size_t T = h->T, D = h->D, t, d, i, n_out = 0, caught = 0;
    double l1o = 0, l1n = 0, att = 0;
    FILE *csv = ex_csv_open("ott_channel.csv", "token,channel,k,outlier_token");  /* Fig. 1(d) */
    for (t = 0; t < T; t++) {
        o->is_out[t] = h->outlier_tok ? h->outlier_tok[t]
                     : (unsigned char)(fabs(h->K[t * D + o->oc]) < o->lo + 0.4 * (o->hi - o->lo));
        n_out += o->is_out[t];
        for (d = 0, o->l1[t] = 0; d < D; d++) o->l1[t] += fabs((double)h->K[t * D + d]); /* App. E */
        if (o->is_out[t]) l1o += o->l1[t]; else l1n += o->l1[t];
        for (i = 0; i < h->n_q; i++) att += o->is_out[t] * o->probs[i * T + t] / (double)h->n_q;
        ex_csv_row(csv, "%zu,%zu,%.9g,%d", t, o->oc, h->K[t * D + o->oc], o->is_out[t]);
        o->order[t] = t;
    }
    ex_csv_close(csv);
    for (t = 1; t < T; t++) {                    /* order: ascending L1     */
        size_t x = o->order[t], j = t;
        while (j > 0 && o->l1[o->order[j - 1]] > o->l1[x]) { o->order[j] = o->order[j - 1]; j--; }
        o->order[j] = x;
    }
    for (t = 0; t < n_out; t++) caught += o->is_out[o->order[t]];
    l1o /= n_out ? (double)n_out : 1.0; l1n /= T > n_out ? (double)(T - n_out) : 1.0;
    printf("   %zu outlier tokens (%s): mean L1 key norm %.1f vs %.1f for the rest;\n"
           "   %zu of the %zu smallest-L1 tokens are outliers; they draw %.1f%% of the\n"
           "   attention as %.1f%% of the tokens%s\n", n_out, h->outlier_tok ? "generator truth"
           : "bottom 40% of range", l1o, l1n, caught, n_out, 100.0 * att, 100.0 * n_out / T,
           h->real ? "" : " (built into the generator's queries)");
    if (!o->outliers || n_out == 0 || n_out == T)
        ex_na("no outlier tokens to compare (outlier channel: %s)", o->outliers ? "yes" : "no");
    else ex_check(l1o < l1n && 2 * caught > n_out, "outlier tokens have a smaller L1 key norm "
                  "and most are among the smallest (Sec. 3.1, Fig. 4: 'smaller magnitude overall')");
}

/* 2. Fig. 1(c): which tokens to keep exact? Quantize K per-channel in OTT's
   groups of 128 and V per-token, keep n tokens chosen by a rule exact, and
   compare the attention output with the fp32 one.                         */
static void show_keeping_smallest_l1_tokens_exact_helps_most(const ott_head *o,
                                                             unsigned long long seed)
{
    static const size_t n_keep[4] = {0, 4, 16, 64}, grid[9] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
    static const char *rule[3] = {"smallest L1", "random", "largest L1"};
    const ex_head *h = o->h;
    size_t T = h->T, D = h->D, Tq = T - T % TQ, k, ru, t, *order;
    double loss[3][4], best;
    float *ref_q;                                                       /* (n_q, D) */
    ex_rng r = ex_rng_seed(seed + 7), rc = ex_rng_seed(seed + 8);
    FILE *csv;
    if (!o->outliers || T < TQ) {
        ex_na("2. Fig. 1(c): %s", T < TQ ? "the head is shorter than one OTT group of 128 tokens"
                                         : "no outlier channel, no tokens for the rule to find");
        return;
    }
    order = (size_t *)ex_alloc(T * sizeof(size_t));     /* the first Tq, by L1 */
    for (t = 0, k = 0; t < T; t++) if (o->order[t] < Tq) order[k++] = o->order[t];
    ref_q = (float *)ex_alloc(h->n_q * D * sizeof(float));
    ex_must(kvq_attend_dense(h->K, h->V, Tq, D, h->Q, h->n_q, ref_q, NULL), "dense", NULL);
    printf("\n2. Fig. 1(c): attention L1 loss (sum |out - ref| over %zu queries) when n\n"
           "   tokens stay full precision, %d-bit K per-channel G=%d, V per-token G=%zu\n"
           "   (random: mean of 8 draws)\n   %-12s", h->n_q, BITS, TQ, o->vg, "n kept:");
    for (k = 0; k < 4; k++) printf("%10zu", n_keep[k]);
    for (ru = 0; ru < 3; ru++) {
        printf("\n   %-12s", rule[ru]);
        for (k = 0; k < 4; k++) {
            loss[ru][k] = keep_loss(h, Tq, o->vg, order, (int)ru, n_keep[k], &r, ref_q);
            printf("%10.3f", loss[ru][k]);
        }
    }
    printf("\n");
    best = loss[1][2] < loss[2][2] ? loss[1][2] : loss[2][2];
    ex_check_lower(loss[0][2], best < loss[0][0] ? best : loss[0][0], MARGIN,
                   "Fig. 1(c): keeping the 16 smallest-L1 tokens helps most: %.3f vs "
                   "random %.3f, largest %.3f, none %.3f", loss[0][2], loss[1][2],
                   loss[2][2], loss[0][0]);
    ex_check_lower(loss[1][2], loss[2][2], MARGIN, "Fig. 1(c): keeping the largest-L1 "
                   "tokens is the worst rule: random %.3f vs largest %.3f",
                   loss[1][2], loss[2][2]);
    csv = ex_csv_open("ott_fig1c.csv", "rule,n_kept,l1_loss");
    for (ru = 0; csv && ru < 3; ru++)            /* the finer grid, own draws */
        for (k = 0; k < 9; k++)
            ex_csv_row(csv, "%s,%zu,%.9g", rule[ru], grid[k],
                       keep_loss(h, Tq, o->vg, order, (int)ru, grid[k], &rc, ref_q));
    ex_csv_close(csv);
    free(ref_q); free(order);
}

/* 3. The OTT cache (Sec. 3.2, Appendix E): each time R + G tokens wait in
   the window, its G oldest compete with the pool by L1 norm; the k
   smallest stay exact in the pool, the others are quantized. Prefill half
   the head, decode the rest; which tokens did the pools keep?             */
static void show_ott_cache_traces_the_outlier_tokens(const ott_head *o)
{
    const ex_head *h = o->h;
    size_t T = h->T, D = h->D, held = 0, held_true = 0, frontier, i, t;
    kvq_config cfg = kvq_config_ott(D, BITS, 2);            /* layer 2: k = 3 */
    kvq_cache c;
    const kvq_rows *pool, *aux;
    ex_cache_stream(&c, &cfg, h->K, h->V, T, T / 2);
    pool = &c.k.rows[KVQ_ROWS_OUTLIER];
    aux = &c.k.rows[KVQ_ROWS_AUX];
    printf("\n3. OTT cache (G=%zu R=%zu k=%zu aux=%zu): prefill %zu, decode %zu\n"
           "   rounds held %zu, tracing %s\n   pool (pos:L1:outlier?):", cfg.group,
           cfg.residual, cfg.ott_k, cfg.ott_aux, T / 2, T - T / 2, c.ott_rounds,
           c.ott_tracing ? "still on" : "stopped");
    for (i = 0; i < pool->n; i++) {
        size_t p = (size_t)pool->pos[pool->off + i];
        printf(" %zu:%.0f:%s", p, o->l1[p], o->is_out[p] ? "yes" : "no");
    }
    frontier = T - c.k.rows[KVQ_ROWS_WINDOW].n;      /* tokens through a round */
    for (t = 0; t < frontier; t++) {
        size_t tag = KVQ_LOC_TAG(c.k.loc[t]);
        int in = tag == KVQ_LOC_ROWS0 + KVQ_ROWS_OUTLIER || tag == KVQ_LOC_ROWS0 + KVQ_ROWS_AUX;
        held += in; held_true += in && o->is_out[t];
    }
    printf("\n   aux pool (members pushed out of the pool) holds %zu\n", aux->n);
    if (c.ott_rounds == 0)
        ex_na("no round yet: every token is still in the full-precision window");
    else if (!o->outliers)
        ex_na("no outlier channel: the pools hold %zu tokens, none of them outliers by Table 9", held);
    else
        ex_check(held > 0 && 2 * held_true > held, "the pools trace tokens and most "
                 "are outlier tokens: %zu of %zu (Sec. 3.2: 'outlier tokens')", held_true, held);
    kvq_cache_free(&c);
}

/* 4. Against KIVI (Sec. 4.1's baseline: G = 128 for both, KIVI R = 128,
   OTT R = 32): the attention error after the last step, and the bits.    */
static void show_ott_beats_kivi_for_slightly_more_memory(const ott_head *o)
{
    static const char *name[3] = {"KIVI-2  G=32  R=128 (KIVI paper)",
                                  "KIVI-2  G=128 R=128 (OTT Sec. 4.1)", "OTT-2   G=128 R=32  k=3"};
    const ex_head *h = o->h;
    size_t D = h->D, quantized = 0, pooled = 0;
    kvq_config cfg[3];
    double res[3][2];
    float *out = (float *)ex_alloc(h->n_q * D * sizeof(float));
    int m;
    cfg[0] = kvq_config_kivi(D, BITS);
    cfg[1] = kvq_config_kivi(D, BITS); cfg[1].group = 128; cfg[1].value_group = o->vg;
    cfg[2] = kvq_config_ott(D, BITS, 2);
    printf("\n4. Error vs the fp32 head (attention output of %zu queries after the last\n"
           "   step, relative Frobenius): a proxy, NOT the papers' task accuracy\n"
           "   %-36s %9s %6s\n", h->n_q, "cache", "attn err", "bits");
    for (m = 0; m < 3; m++) {                /* errors: relative Frobenius */
        kvq_cache c;
        kvq_bytes by;
        ex_cache_stream(&c, &cfg[m], h->K, h->V, h->T, h->T / 2);
        ex_attend(&c, h->Q, h->n_q, out, NULL, KVQ_ATTN_ONLINE);
        ex_must(kvq_cache_bytes(&c, &by), "bytes", &c);
        res[m][0] = ex_rel_err(o->ref, out, h->n_q * D);
        res[m][1] = by.bits_per_element;
        printf("   %-36s %9.4f %6.3f\n", name[m], res[m][0], res[m][1]);
        quantized = c.k.n_units;                 /* the last cache: OTT's */
        pooled = c.k.rows[KVQ_ROWS_OUTLIER].n + c.k.rows[KVQ_ROWS_AUX].n;
        kvq_cache_free(&c);
    }
    printf("   paper, LLaMA-3-8B-Instruct 2-bit (Table 1): GSM8K(8) fp16 74.91,\n"
           "   KIVI 63.15, OTT 72.55; LongBench (Table 2) average 50.22 / 47.13 / 49.18\n");
    if (quantized == 0 || pooled == 0)
        ex_na("OTT %s: nothing to compare", quantized ? "traced no token" : "quantized nothing");
    else {
        if (!o->outliers) ex_na("OTT-2 vs KIVI-2: no outlier channel, the structure OTT exploits");
        else ex_check_lower(res[2][0], res[1][0], MARGIN, "OTT-2 %.4f < KIVI-2 (G=128, R=128) "
                            "%.4f (paper: OTT beats KIVI at 2 bits)", res[2][0], res[1][0]);
        ex_check(res[2][1] > res[1][1] && res[2][1] < 1.1 * res[1][1],
                 "OTT costs slightly more than KIVI G=128: %.3f vs %.3f bits/element "
                 "(paper Sec. 4.3: 'slightly more memory'; ours: < 10%% more)", res[2][1], res[1][1]);
    }
    free(out);
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h;
    ott_head o;
    size_t T, D;
    if (!ex_args_parse(argc, argv, &a, EX_QUERIES) || !ex_head_get(&a, 2048, 128, &h)) return 2;
    T = h.T; D = h.D;
    memset(&o, 0, sizeof o);
    o.h = &h;
    o.vg = ex_divisor_at_most(D, 128);          /* OTT's V group: min(128, D) */
    o.ratio = ex_outlier_ratio(h.K, T, D);
    o.outliers = o.ratio >= EX_OUTLIER_RATIO;
    printf("04_ott: OTT outlier token tracing (Su et al., ACL 2025), %s head T=%zu D=%zu, %d-bit\n",
           h.real ? "real" : "synthetic", T, D, BITS);
    o.ref = (float *)ex_alloc(h.n_q * D * sizeof(float));
    o.probs = (float *)ex_alloc(h.n_q * T * sizeof(float));
    o.l1 = (double *)ex_alloc(T * sizeof(double));
    o.order = (size_t *)ex_alloc(T * sizeof(size_t));
    o.is_out = (unsigned char *)ex_alloc(T);
    ex_must(kvq_attend_dense(h.K, h.V, T, D, h.Q, h.n_q, o.ref, o.probs), "dense", NULL);

    /* Sec. 3.1: which tokens are outliers, and how to find them           */
    show_few_tokens_sit_near_zero_in_the_outlier_channel(&o);
    show_outlier_tokens_have_small_l1_keys(&o);
    show_keeping_smallest_l1_tokens_exact_helps_most(&o, a.seed);

    /* Sec. 3.2 and 4: the cache that traces them, against KIVI            */
    show_ott_cache_traces_the_outlier_tokens(&o);
    show_ott_beats_kivi_for_slightly_more_memory(&o);

    free(o.ref); free(o.probs); free(o.l1); free(o.order); free(o.is_out);
    ex_head_free(&h);
    return ex_finish("04_ott");
}
