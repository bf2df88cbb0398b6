/* examples/07_rotation.c - rotation before quantizing (QuaRot, arXiv:
   2404.00456; SpinQuant, arXiv:2405.16406; RotateKV, arXiv:2501.16383):
   an orthonormal Walsh-Hadamard transform spreads a key's outlier channels
   over every channel before the min-max quantizer sees them.

   main follows the argument: the rotation keeps every score q . k (1),
   flattens the outlier channels (2), so it cuts the error of per-token keys
   (3), whose groups span the outlier channels, far more than that of
   per-channel keys (4), whose groups already give each outlier channel its
   own range; and a cache with the option on stores rotated rows while the
   caller sees its own basis (5). Claims that rest on outlier channels are
   [n/a] on a head without them (common.h's ex_outlier_ratio).

   Data: common.h's synthetic head (outlier key channels), or a real head:
   --k K.npy --v V.npy [--q Q.npy]; D must be a power of two (kvq.h Sec.
   6.1). --seed N: the synthetic head's seed. The transform's exact checks
   (dense Sylvester matrix, R R^T = I, every policy) are tests/
   test_rotation.c.                                                        */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

/* The head, its rotated keys and queries, and the groups the steps use.    */
typedef struct rot_head {
    const ex_head *h;
    size_t T, Gt, Gc;            /* tokens (multiple of Gc); per-token G;
                                    per-channel G                            */
    float *KR, *QR;              /* (T, D) R k, (n_q, D) R q                  */
    int outliers;
} rot_head;

/* The scores of n_q queries over T keys, (n_q, T), in double.              */
static void scores(const float *Q, size_t n_q, const float *K, size_t T, size_t D, double *S)
{
    size_t i, t, d;
    for (i = 0; i < n_q; i++)
        for (t = 0; t < T; t++) {
            double s = 0;
            for (d = 0; d < D; d++) s += (double)Q[i * D + d] * K[t * D + d];
            S[i * T + t] = s;
        }
}

/* 1. (R q) . (R k) = q . k: R^T R = I.                                     */
static void show_scores_unchanged(const rot_head *r)
{
    const ex_head *h = r->h;
    size_t n = h->n_q * r->T, i;
    double *S = (double *)ex_alloc(2 * n * sizeof(double)), *SR = S + n, worst = 0, mx = 0;
    scores(h->Q, h->n_q, h->K, r->T, h->D, S);
    scores(r->QR, h->n_q, r->KR, r->T, h->D, SR);
    for (i = 0; i < n; i++) {
        if (fabs(S[i] - SR[i]) > worst) worst = fabs(S[i] - SR[i]);
        if (fabs(S[i]) > mx) mx = fabs(S[i]);
    }
    printf("\n1. scores: max |q.k - (Rq).(Rk)| = %.3g, max |q.k| = %.3g\n", worst, mx);
    ex_check(worst <= 1e-5 * mx + 1e-6, "the rotation keeps every score: error %.2g <= "
             "1e-5 max|q.k| (float rounding of the transform)", worst);
    free(S);
}

/* 2. the outlier channels are spread: largest / median channel mean |k|.   */
static void show_outliers_spread(const rot_head *r)
{
    const ex_head *h = r->h;
    double before = ex_outlier_ratio(h->K, r->T, h->D), after = ex_outlier_ratio(r->KR, r->T, h->D);
    printf("\n2. outlier channels: largest/median channel mean |k| %.2f -> %.2f rotated\n",
           before, after);
    if (r->outliers)
        ex_check(after <= before / 2, "the rotation flattens the outlier channels: ratio "
                 "%.2f -> %.2f, at least 2x lower", before, after);
    else
        ex_na("outlier spread: the head has no outlier channels (ratio %.2f)", before);
}

/* 2-bit keys along axis, with or without the rotation (quantized in the
   rotated basis, rotated back): the key error ||K - K'|| / ||K|| and the
   score error ||A - A'|| / ||A|| of the head's queries (A: softmax
   probabilities, (n_q, T)), both in %.                                    */
static void key_errors(const rot_head *r, kvq_axis axis, int rotate, double *key, double *score)
{
    const ex_head *h = r->h;
    size_t D = h->D, G = axis == KVQ_PER_TOKEN ? r->Gt : r->Gc, n = h->n_q * r->T;
    float *Kq = (float *)ex_alloc(r->T * D * sizeof(float));               /* (T, D)   */
    float *O = (float *)ex_alloc(h->n_q * D * sizeof(float));              /* (n_q, D) */
    float *A = (float *)ex_alloc(2 * n * sizeof(float)), *Aq = A + n;      /* (n_q, T) */
    ex_fake_quant(rotate ? r->KR : h->K, r->T, D, 2, G, axis, Kq);
    if (rotate) ex_must(kvq_rotate(KVQ_ROT_HADAMARD, 0, D, 1, Kq, r->T), "rotate back", NULL);
    *key = 100 * ex_rel_err(h->K, Kq, r->T * D);
    ex_must(kvq_attend_dense(h->K, h->V, r->T, D, h->Q, h->n_q, O, A), "dense", NULL);
    ex_must(kvq_attend_dense(Kq, h->V, r->T, D, h->Q, h->n_q, O, Aq), "dense", NULL);
    *score = 100 * ex_rel_err(A, Aq, n);
    free(Kq); free(O); free(A);
}

/* 3-4. the gain on each key axis, and that per-token keys gain more.      */
static void show_per_token_gains_most(const rot_head *r)
{
    double key[2][2], score[2][2], gain[2];     /* [axis][rotated]; gain of
                                                   the key error            */
    int ax, rot;
    printf("\n3-4. 2-bit keys, errors in %%       key ||K-K'||/||K||      score ||A-A'||/||A||\n");
    printf("                                plain  rotated   gain   plain  rotated   gain\n");
    for (ax = 0; ax < 2; ax++) {
        char label[32];
        for (rot = 0; rot < 2; rot++) key_errors(r, (kvq_axis)ax, rot, &key[ax][rot], &score[ax][rot]);
        gain[ax] = key[ax][0] / key[ax][1];
        snprintf(label, sizeof label, "(G=%zu %s)", ax == KVQ_PER_TOKEN ? r->Gt : r->Gc,
                 ax == KVQ_PER_TOKEN ? "channels" : "tokens");
        printf("   %-11s %-16s %6.2f %8.2f %5.2fx  %6.2f %8.2f %5.2fx\n",
               ax == KVQ_PER_TOKEN ? "per-token" : "per-channel", label, key[ax][0], key[ax][1],
               gain[ax], score[ax][0], score[ax][1], score[ax][0] / score[ax][1]);
    }
    if (!r->outliers) {
        ex_na("rotation gains: the head has no outlier channels (key gain per-token %.2fx, "
              "per-channel %.2fx)", gain[KVQ_PER_TOKEN], gain[KVQ_PER_CHANNEL]);
        return;
    }
    ex_check_lower(score[KVQ_PER_TOKEN][1], score[KVQ_PER_TOKEN][0], 0.1, "3. rotation lowers "
                   "per-token keys' score error: %.2f%% vs %.2f%% (margin 10%%)",
                   score[KVQ_PER_TOKEN][1], score[KVQ_PER_TOKEN][0]);
    ex_check(gain[KVQ_PER_TOKEN] >= 1.1 * gain[KVQ_PER_CHANNEL], "4. per-token keys gain more "
             "than per-channel keys: key error gain %.2fx >= 1.1 x %.2fx", gain[KVQ_PER_TOKEN],
             gain[KVQ_PER_CHANNEL]);
}

/* 5. an HF-2 cache (per-token keys and values) with the option on: output
   closer to the exact attention, and kvq_cache_read in the caller's basis. */
static void show_cache_in_callers_basis(const rot_head *r)
{
    const ex_head *h = r->h;
    size_t D = h->D, i;
    float *O = (float *)ex_alloc(2 * h->n_q * D * sizeof(float)), *Oq = O + h->n_q * D;
    float *row = (float *)ex_alloc(D * sizeof(float));
    double err[2], worst = 0;
    int rot;
    kvq_cache c;
    ex_must(kvq_attend_dense(h->K, h->V, h->T, D, h->Q, h->n_q, O, NULL), "dense", NULL);
    printf("\n5. HF-2 cache (per-token K and V, G=%zu), T=%zu: output error vs exact\n",
           r->Gt, h->T);
    for (rot = 0; rot < 2; rot++) {
        kvq_config cfg = kvq_config_hf(D, kvq_hf_defaults(2));
        cfg.group = r->Gt;
        cfg.key_rotation = cfg.value_rotation = rot ? KVQ_ROT_HADAMARD : KVQ_ROT_NONE;
        ex_cache_stream(&c, &cfg, h->K, h->V, h->T, h->T / 2);
        ex_attend(&c, h->Q, h->n_q, Oq, NULL, KVQ_ATTN_ONLINE);
        err[rot] = 100 * ex_rel_err(O, Oq, h->n_q * D);
        printf("   %-10s %6.2f %%\n", rot ? "rotated" : "plain", err[rot]);
        if (rot) {   /* the newest token waits in full precision (fp16)      */
            ex_must(kvq_cache_read(&c, 0, h->T - 1, row), "read", &c);
            for (i = 0; i < D; i++) {
                double e = fabs(row[i] - h->K[(h->T - 1) * D + i]) / (fabs(h->K[(h->T - 1) * D + i]) + 1);
                if (e > worst) worst = e;
            }
        }
        kvq_cache_free(&c);
    }
    ex_check(worst <= 2e-3, "kvq_cache_read gives the caller's key back: max relative "
             "error %.2g <= 2e-3 (fp16 storage)", worst);
    if (r->outliers)
        ex_check_lower(err[1], err[0], 0.2, "rotation lowers HF-2's output error: %.2f%% "
                       "vs %.2f%% (margin 20%%)", err[1], err[0]);
    else
        ex_na("HF-2 output gain: no outlier channels (%.2fx)", err[0] / err[1]);
    free(O); free(row);
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h;
    rot_head r;
    double ratio;
    if (!ex_args_parse(argc, argv, &a, EX_QUERIES) || !ex_head_get(&a, 1024, 128, &h)) return 2;
    ratio = ex_outlier_ratio(h.K, h.T, h.D);
    printf("07_rotation: Walsh-Hadamard rotation before quantizing\n");
    printf("   data: %s, T=%zu tokens, D=%zu, %zu queries; outlier channels: largest/median\n"
           "   channel mean |k| = %.2f\n", h.real ? "real head from .npy" : "synthetic head "
           "(common.h)", h.T, h.D, h.n_q, ratio);
    if (h.D & (h.D - 1)) {
        ex_na("the rotation needs D a power of two; this head has D = %zu", h.D);
        ex_head_free(&h);
        return ex_finish("07_rotation");
    }
    r.h = &h;
    r.outliers = ratio >= EX_OUTLIER_RATIO;
    r.Gt = ex_divisor_at_most(h.D, 32);
    r.Gc = 32;
    r.T = h.T - h.T % r.Gc;
    r.KR = (float *)ex_alloc(h.T * h.D * sizeof(float));
    r.QR = (float *)ex_alloc(h.n_q * h.D * sizeof(float));
    memcpy(r.KR, h.K, h.T * h.D * sizeof(float));
    memcpy(r.QR, h.Q, h.n_q * h.D * sizeof(float));
    ex_must(kvq_rotate(KVQ_ROT_HADAMARD, 0, h.D, 0, r.KR, h.T), "rotate K", NULL);
    ex_must(kvq_rotate(KVQ_ROT_HADAMARD, 0, h.D, 0, r.QR, h.n_q), "rotate Q", NULL);

    show_scores_unchanged(&r);
    show_outliers_spread(&r);
    if (r.T == 0) ex_na("key errors: fewer than %zu tokens", r.Gc);
    else show_per_token_gains_most(&r);
    show_cache_in_callers_basis(&r);

    free(r.KR); free(r.QR);
    ex_head_free(&h);
    return ex_finish("07_rotation");
}
