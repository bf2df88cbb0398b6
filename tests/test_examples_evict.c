/* tests/test_examples_evict.c - the online softmax checks behind
   examples/06_eviction.c part B (walkthrough 7.2):

     1. The tiled recurrence of kvq_attend's ONLINE path (running max,
        rescaled denominator and output), written in double, equals eager
        softmax attention to 1e-12 (absolute).
     2. kvq_attend itself, float32: ONLINE and EAGER over the same FULL
        cache agree to 1e-5.
     3. Queries shifted so the logits are ~ +400: a naive float exp
        overflows to Inf, kvq_attend ONLINE stays finite and within 1e-3
        of kvq_attend_dense (which subtracts the max in double).
   N = 512 i.i.d. N(0, 1) keys, values and queries, D = 64, as in the
   example. The worked example's other figures are in test_evict.c
   (test_page_figures).                                                    */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "tests/test.h"
#include "examples/common.h"

/* The tiled recurrence of kvq_attend, in double: the "float64 build of the
   check". K, V (N, D) row-major; one query.                                */
static void online_double(const double *q, const double *K, const double *V,
                          size_t N, size_t D, size_t tile, double *out)
{
    double m = -INFINITY, l = 0.0, s[64];
    size_t j0, j, d;
    for (d = 0; d < D; d++) out[d] = 0.0;
    for (j0 = 0; j0 < N; j0 += tile) {
        size_t nt = N - j0 < tile ? N - j0 : tile;
        double m_new = m, scale;
        for (j = 0; j < nt; j++) {                   /* this tile's scores    */
            double dot = 0.0;
            for (d = 0; d < D; d++) dot += q[d] * K[(j0 + j) * D + d];
            s[j] = dot / sqrt((double)D);
            if (s[j] > m_new) m_new = s[j];
        }
        scale = exp(m - m_new);                      /* rescale what we have  */
        l *= scale;
        for (d = 0; d < D; d++) out[d] *= scale;
        for (j = 0; j < nt; j++) {
            double p = exp(s[j] - m_new);
            l += p;
            for (d = 0; d < D; d++) out[d] += p * V[(j0 + j) * D + d];
        }
        m = m_new;
    }
    for (d = 0; d < D; d++) out[d] /= l;
}

/* Eager attention in double for one query; probs (N) optional.            */
static void eager_double(const double *q, const double *K, const double *V,
                         size_t N, size_t D, double *out, double *probs)
{
    double m = -INFINITY, l = 0.0;
    size_t j, d;
    double *s = (double *)ex_alloc(N * sizeof(double));
    for (j = 0; j < N; j++) {
        double dot = 0.0;
        for (d = 0; d < D; d++) dot += q[d] * K[j * D + d];
        s[j] = dot / sqrt((double)D);
        if (s[j] > m) m = s[j];
    }
    for (j = 0; j < N; j++) { s[j] = exp(s[j] - m); l += s[j]; }
    for (d = 0; d < D; d++) out[d] = 0.0;
    for (j = 0; j < N; j++) {
        if (probs) probs[j] = s[j] / l;
        for (d = 0; d < D; d++) out[d] += s[j] / l * V[j * D + d];
    }
    free(s);
}


static void cache_of(kvq_cache *c, const float *K, const float *V, size_t N, size_t D)
{
    kvq_config cfg = kvq_config_full(D, 32);
    ex_must(ex_cache_init(c, &cfg), "cache_init", NULL);
    ex_must(kvq_cache_prefill(c, K, V, N), "prefill", c);
}

int main(void)
{
    enum { N = 512, D = 64 };
    ex_rng r = ex_rng_seed(1);
    double *Kd = (double *)ex_alloc(3 * N * D * sizeof(double)), *Vd = Kd + N * D, *Qd = Vd + N * D;
    float *K = (float *)ex_alloc(3 * N * D * sizeof(float)), *V = K + N * D, *Q = V + N * D;
    float *oe = (float *)ex_alloc(2 * N * D * sizeof(float)), *oo = oe + N * D;
    double o1[D], o2[D], worst = 0, worstf = 0, diff = 0;
    size_t i, d;
    int naive_inf = 0, finite = 1;
    kvq_cache c;
    for (i = 0; i < N * D; i++) {
        Kd[i] = ex_normal(&r); Vd[i] = ex_normal(&r); Qd[i] = ex_normal(&r);
        K[i] = (float)Kd[i]; V[i] = (float)Vd[i]; Q[i] = (float)Qd[i];
    }
    /* 1. exactness in double */
    for (i = 0; i < N; i++) {
        online_double(Qd + i * D, Kd, Vd, N, D, KVQ_TILE, o1);
        eager_double(Qd + i * D, Kd, Vd, N, D, o2, NULL);
        for (d = 0; d < D; d++) if (fabs(o1[d] - o2[d]) > worst) worst = fabs(o1[d] - o2[d]);
    }
    CHECK(worst <= 1e-12, "float64 online vs eager: max |diff| %.1e > 1e-12", worst);
    /* 2. kvq_attend, float32, ONLINE vs EAGER */
    cache_of(&c, K, V, N, D);
    ex_attend(&c, Q, N, oe, NULL, KVQ_ATTN_EAGER);
    ex_attend(&c, Q, N, oo, NULL, KVQ_ATTN_ONLINE);
    for (i = 0; i < N * D; i++)
        if (fabs((double)oe[i] - oo[i]) > worstf) worstf = fabs((double)oe[i] - oo[i]);
    CHECK(worstf <= 1e-5, "kvq_attend float32 ONLINE vs EAGER: max |diff| %.1e > 1e-5", worstf);
    /* 3. logits shifted by about +400 */
    for (i = 0; i < N * D; i++) Q[i] += 400.0f;
    for (i = 0; i < N && !naive_inf; i++) {
        double dot = 0.0;
        for (d = 0; d < D; d++) dot += (double)Q[d] * K[i * D + d];
        naive_inf = isinf((float)exp(dot / sqrt((double)D)));       /* fp32 exp */
    }
    ex_attend(&c, Q, N, oo, NULL, KVQ_ATTN_ONLINE);
    ex_must(kvq_attend_dense(K, V, N, D, Q, N, oe, NULL), "dense", NULL);
    for (i = 0; i < N * D; i++) {
        finite &= isfinite(oo[i]) != 0;
        if (fabs((double)oo[i] - oe[i]) > diff) diff = fabs((double)oo[i] - oe[i]);
    }
    CHECK(naive_inf, "logits +400: a naive fp32 exp should overflow");
    CHECK(finite && diff < 1e-3, "logits +400: online output %s, %.1e from the oracle",
          finite ? "finite" : "NOT finite", diff);
    kvq_cache_free(&c);
    free(Kd); free(K); free(oe);
    return TEST_END("test_examples_evict");
}
