/* tests/test_examples_logquant.c - what examples/05_logquant.c used to
   check beyond the paper's steps (issue 17: examples as short narratives).

     1. Eq. 3 (LogQuant Sec. 2.4), A.V = A_P.V_P: dense attention over a
        LogQuant cache's rows read back in position order equals the same
        over a random permutation of those rows (double sums, float out:
        <= 1e-6). (Was 05_logquant section 4's first check.)
     2. Eq. 4-5: kvq_cache_bytes' bits per element equals a recount from
        kvq_cache_census: per group of each side's G elements, its packed
        words (ceil(G B / 32) of 32 bits: B bits per element plus padding
        when G B is not a multiple of 32) and one fp16 scale and zero (32
        bits); 16 bits per element of a full-precision row. For LogQuant
        and KIVI (G = 64), D = 128 and D = 8 (where the per-token value
        group becomes 8 and its 16 bits of codes fill half a word). (Was section 3's two checks, which assumed
        B + 32/64 bits per quantized element and so failed at D = 8.)      */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "tests/test.h"
#include "examples/common.h"

#define BITS 2

/* K, V (T, D) through a cache of cfg: prefill T/2, decode the rest.        */
static void fill(kvq_cache *c, kvq_config cfg, const ex_head *h)
{
    ex_cache_stream(c, &cfg, h->K, h->V, h->T, h->T / 2);
}

static void test_permutation(const ex_head *h, unsigned long long seed)
{
    size_t T = h->T, D = h->D, i, *perm = (size_t *)ex_alloc(T * sizeof(size_t));
    float *KV = (float *)ex_alloc(4 * T * D * sizeof(float)), *P = KV + 2 * T * D;
    float *o = (float *)ex_alloc(2 * h->n_q * D * sizeof(float));
    double dmax = 0;
    kvq_cache c;
    ex_rng r = ex_rng_seed(seed + 300);
    fill(&c, kvq_config_logquant(D, BITS, kvq_logquant_window_for(128)), h);
    for (i = 0; i < T; i++) {
        ex_must(kvq_cache_read(&c, 0, i, KV + i * D), "read", &c);
        ex_must(kvq_cache_read(&c, 1, i, KV + (T + i) * D), "read", &c);
        perm[i] = i;
    }
    for (i = T - 1; i > 0; i--) {                  /* Fisher-Yates shuffle  */
        size_t k = (size_t)(ex_u64(&r) % (i + 1)), tmp = perm[i];
        perm[i] = perm[k]; perm[k] = tmp;
    }
    for (i = 0; i < T; i++) {
        memcpy(P + i * D, KV + perm[i] * D, D * sizeof(float));
        memcpy(P + (T + i) * D, KV + (T + perm[i]) * D, D * sizeof(float));
    }
    ex_must(kvq_attend_dense(KV, KV + T * D, T, D, h->Q, h->n_q, o, NULL), "dense", NULL);
    ex_must(kvq_attend_dense(P, P + T * D, T, D, h->Q, h->n_q, o + h->n_q * D, NULL), "dense", NULL);
    for (i = 0; i < h->n_q * D; i++) {
        double x = fabs((double)o[i] - o[h->n_q * D + i]);
        dmax = x > dmax ? x : dmax;
    }
    CHECK(dmax <= 1e-6, "Eq. 3: permuted rows change the output by %.2e (> 1e-6)", dmax);
    kvq_cache_free(&c);
    free(perm); free(KV); free(o);
}

static void test_bytes(const ex_head *h)
{
    int m;
    for (m = 0; m < 2; m++) {
        kvq_config cfg = m ? kvq_config_kivi(h->D, BITS) : kvq_config_logquant(h->D, BITS, 42);
        kvq_cache c;
        kvq_bytes by;
        kvq_census cs;
        double bits = 0;
        size_t s, r;
        cfg.group = 64;
        fill(&c, cfg, h);
        ex_must(kvq_cache_bytes(&c, &by), "bytes", &c);
        ex_must(kvq_cache_census(&c, &cs), "census", &c);
        for (s = 0; s < 2; s++) {
            const kvq_side *sd = s ? &c.v : &c.k;
            size_t rows = 0;
            for (r = 0; r < KVQ_ROW_REGIONS; r++) rows += cs.rows[s][r];
            bits += (double)cs.quantized[s] * h->D                    /* per element: */
                  * (32.0 * (double)sd->geom.words_per_group + 32.0) / (double)sd->group
                  + (double)rows * h->D * 16.0;
        }
        bits /= 2.0 * (double)h->T * (double)h->D;
        CHECK(fabs(bits - by.bits_per_element) < 1e-12, "%s D=%zu: kvq_cache_bytes %.6f bits "
              "!= recount from census %.6f", m ? "KIVI" : "LogQuant", h->D,
              by.bits_per_element, bits);
        kvq_cache_free(&c);
    }
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h;
    size_t D[2] = {128, 8};
    int i;
    if (!ex_args_parse(argc, argv, &a, EX_QUERIES)) return 2;
    for (i = 0; i < (a.k_path ? 1 : 2); i++) {    /* a real head: its own D */
        if (!ex_head_get(&a, QUICK ? 512 : 2048, D[i], &h)) return 2;
        test_permutation(&h, a.seed);
        test_bytes(&h);
        ex_head_free(&h);
    }
    return TEST_END("test_examples_logquant");
}
