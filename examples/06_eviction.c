/* examples/06_eviction.c - token eviction, paged blocks and compaction, on
   kvq's own structures (kvq.h Sec. 11), beside every self-checking figure of
   StreamingLLM (arXiv:2309.17453), H2O (arXiv:2306.14048),
   SnapKV (arXiv:2404.14469), and a paged engine's compaction.

   Part A  wall 2: a paged pool frees only all-dead blocks; repack and
           hole-filling give the memory back (the page's five figures).
   Part B  wall 1: the online softmax in kvq_attend - exact, small, safe with
           huge logits - and why H2O's signal cannot be read from it.
   Part C  generation equivalence: attention after compaction.
   Part D  quantized keys under compaction: our group-granularity choice,
           and what re-quantizing survivors would have cost.

   Run: ./build/examples/06_eviction [--seed N] [--csv DIR]
   --csv DIR writes evict_toy_blocks.csv (A), evict_freed.csv (a sweep run
   only then) and evict_cache_slots.csv (C, D), which plots/eviction.py
   draws.                                                                   */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

/* ------------------------------------------------------------------------ */
/* Part A: blocks                                                           */
/* ------------------------------------------------------------------------ */
/* A pool holding one sequence of n tokens whose payload is its position.  */
static void fill(kvq_pages *P, kvq_pseq *S, size_t n_blocks, size_t bt, size_t n)
{
    size_t i;
    ex_must(kvq_pages_init(P, n_blocks, bt, sizeof(int32_t)), "pages_init", NULL);
    kvq_pseq_init(S);
    for (i = 0; i < n; i++) {
        int32_t v = (int32_t)i;
        ex_must(kvq_pseq_append(P, S, v, &v), "pseq_append", NULL);
    }
}

static int32_t payload(const kvq_pages *P, const kvq_pseq *S, size_t i)
{
    int32_t v;
    memcpy(&v, kvq_pseq_slot(P, S, i), sizeof v);
    return v;
}

/* 1 if slots hold exactly the positions `want` (n of them) in order.      */
static int holds_in_order(const kvq_pages *P, const kvq_pseq *S,
                          const uint8_t *alive_mask, size_t n)
{
    size_t i, s = 0;
    for (i = 0; i < n; i++) {
        if (!alive_mask[i]) continue;
        if (s >= S->n_slots || payload(P, S, s) != (int32_t)i || S->pos[s] != (int32_t)i) return 0;
        s++;
    }
    return s == S->n_slots;
}

/* The pool as plots/eviction.py draws it: one CSV row per slot of every
   block S holds (physical block id, slot, token, live/dead/empty); blocks
   S does not hold are free.                                               */
static void dump_pool(FILE *csv, const char *stage, const kvq_pages *P, const kvq_pseq *S)
{
    size_t b, j, bt = P->block_tokens;
    for (b = 0; csv && b < S->n_blocks; b++)
        for (j = 0; j < bt; j++) {
            size_t i = b * bt + j;
            int used = i < S->n_slots;
            ex_csv_row(csv, "%s,%zu,%u,%zu,%d,%s", stage, P->n_blocks, (unsigned)S->table[b],
                       j, used ? (int)S->pos[i] : -1,
                       !used ? "empty" : S->alive[i] ? "live" : "dead");
        }
}

/* Blocks freed against the share of tokens evicted at random: without
   compaction a block frees only if all its b slots die, (f)^b of them for
   an eviction probability f; after a repack, all but ceil(live/b).        */
static void freed_vs_evicted(unsigned long long seed)
{
    enum { N = 16000, BT = 16, NB = N / BT };
    static uint8_t keep[N];
    FILE *csv = ex_csv_open("evict_freed.csv",
                            "evicted_share,freed_evict,freed_repack,closed_form_evict,"
                            "closed_form_repack,blocks");
    ex_rng r = ex_rng_seed(seed + 11);
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st;
    size_t i, k, live, fe;
    for (k = 1; csv && k < 40; k++) {
        double f = (double)k / 40.0;
        fill(&P, &S, NB, BT, N);
        for (i = 0, live = 0; i < N; i++) live += keep[i] = ex_uniform(&r) >= f;
        ex_must(kvq_pseq_evict(&P, &S, keep, N, &st), "evict", NULL);
        fe = st.blocks_freed;
        ex_must(kvq_pseq_repack(&P, &S, 0, &st), "repack", NULL);
        ex_csv_row(csv, "%.9g,%zu,%zu,%.9g,%zu,%d", (double)(N - live) / N, fe,
                   fe + st.blocks_freed, NB * pow(f, BT), (size_t)NB - (live + BT - 1) / BT, NB);
        kvq_pseq_free(&P, &S);
        kvq_pages_free(&P);
    }
    ex_csv_close(csv);
}

static void part_a(void)
{
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st;
    static uint8_t keep[16000];
    size_t i, freed_evict;

    printf("\nA. Wall 2: block-granular reclamation (page figures 1-6)\n");
    /* 1-3: 16,000 tokens, 1,000 blocks of 16, keep every 10th               */
    fill(&P, &S, 1000, 16, 16000);
    for (i = 0; i < 16000; i++) keep[i] = i % 10 == 0;
    ex_must(kvq_pseq_evict(&P, &S, keep, 16000, &st), "evict", NULL);
    freed_evict = st.blocks_freed;
    ex_check(freed_evict == 0, "evict 14,400 of 16,000 (every 10th kept): %zu blocks freed "
             "without compaction (page: 0)", freed_evict);
    ex_must(kvq_pseq_repack(&P, &S, 0, &st), "repack", NULL);
    ex_check(st.blocks_freed == 900 && P.n_free == 900,
             "repack: %zu of 1,000 blocks freed, free gauge %zu (page: 900)",
             st.blocks_freed, P.n_free);
    ex_check(holds_in_order(&P, &S, keep, 16000),
             "repack keeps the 1,600 survivors in original order (page: monotone)");
    kvq_pseq_free(&P, &S);
    kvq_pages_free(&P);

    /* 4: one aligned block                                                  */
    fill(&P, &S, 1000, 16, 16000);
    for (i = 0; i < 16000; i++) keep[i] = !(i >= 32 && i < 48);
    ex_must(kvq_pseq_evict(&P, &S, keep, 16000, &st), "evict", NULL);
    ex_check(st.blocks_freed == 1, "evict tokens 32..47 (block 2 exactly): %zu block "
             "freed (page: 1)", st.blocks_freed);
    kvq_pseq_free(&P, &S);
    kvq_pages_free(&P);

    /* 5: one survivor per block pins the pool                               */
    fill(&P, &S, 1000, 16, 16000);
    for (i = 0; i < 16000; i++) keep[i] = i % 16 == 0;
    ex_must(kvq_pseq_evict(&P, &S, keep, 16000, &st), "evict", NULL);
    ex_check(st.blocks_freed == 0 && st.tokens_evicted == 15000,
             "one survivor per block: %.2f%% evicted, %zu blocks freed (page: 93.75%%, 0)",
             100.0 * (double)st.tokens_evicted / 16000.0, st.blocks_freed);
    kvq_pseq_free(&P, &S);
    kvq_pages_free(&P);

    /* 6: the toy - 6 blocks x 4 slots, T0..T23, round T20..T23, evict
          T2, T9, T13, T21                                                  */
    {
        kvq_page_stats rp, hf;
        uint8_t k24[24];
        int32_t sorted[24];
        size_t n_sorted = 0, j;
        int order_scrambled = 0, same_set = 1;
        FILE *csv = ex_csv_open("evict_toy_blocks.csv",
                                "stage,pool_blocks,block,slot,token,state");
        for (i = 0; i < 24; i++) k24[i] = !(i == 2 || i == 9 || i == 13 || i == 21);
        fill(&P, &S, 6, 4, 24);
        dump_pool(csv, "filled", &P, &S);
        kvq_pseq_evict(&P, &S, k24, 24, NULL);
        dump_pool(csv, "evicted", &P, &S);
        ex_must(kvq_pseq_repack(&P, &S, 0, &rp), "repack", NULL);
        dump_pool(csv, "repacked", &P, &S);
        kvq_pseq_free(&P, &S);
        kvq_pages_free(&P);

        fill(&P, &S, 6, 4, 24);
        kvq_pseq_evict(&P, &S, k24, 24, NULL);
        ex_must(kvq_pseq_holefill(&P, &S, 0, 20, &hf), "holefill", NULL);
        dump_pool(csv, "hole-filled", &P, &S);
        ex_csv_close(csv);
        printf("  hole-filled layout (slot: token): ");
        for (i = 0; i < S.n_slots; i++) {
            printf("%d%s", payload(&P, &S, i), i + 1 < S.n_slots ? " " : "\n");
            if (i && S.pos[i] < S.pos[i - 1]) order_scrambled = 1;
            if (S.alive[i]) sorted[n_sorted++] = S.pos[i];
        }
        /* insertion sort, then compare with the survivor list              */
        for (i = 1; i < n_sorted; i++)
            for (j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                int32_t t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
            }
        for (i = 0, j = 0; i < 24; i++)
            if (k24[i]) same_set &= j < n_sorted && sorted[j++] == (int32_t)i;
        ex_check(rp.blocks_freed == 1 && rp.slot_copies == 18,
                 "toy repack: %zu block freed, %zu slot copies (page: 1, 18)",
                 rp.blocks_freed, rp.slot_copies);
        ex_check(hf.blocks_freed == 1 && hf.slot_copies == 3,
                 "toy hole-filling: %zu block freed, %zu slot copies (page: 1, 3)",
                 hf.blocks_freed, hf.slot_copies);
        ex_check(payload(&P, &S, 2) == 20 && order_scrambled && same_set && n_sorted == 20,
                 "hole-filling puts T%d in T2's slot, order scrambled, same 20 survivors "
                 "(page: T20)", payload(&P, &S, 2));
        kvq_pseq_free(&P, &S);
        kvq_pages_free(&P);
    }
}

/* ------------------------------------------------------------------------ */
/* Part B: the online softmax (the page's second block)                     */
/* ------------------------------------------------------------------------ */
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
    double *s = (double *)malloc(N * sizeof(double));
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

/* A FULL fp32 cache holding K, V (N, D).                                   */
static void cache_of(kvq_cache *c, const float *K, const float *V, size_t N, size_t D)
{
    kvq_config cfg = kvq_config_full(D, 32);
    ex_must(ex_cache_init(c, &cfg), "cache_init", NULL);
    ex_must(kvq_cache_prefill(c, K, V, N), "prefill", c);
}

static void part_b(unsigned long long seed)
{
    enum { N = 512, D = 64 };
    ex_rng r = ex_rng_seed(seed);
    double *Kd = (double *)malloc(N * D * sizeof(double)), *Vd = (double *)malloc(N * D * sizeof(double));
    double *Qd = (double *)malloc(N * D * sizeof(double));
    float *K = (float *)malloc(N * D * sizeof(float)), *V = (float *)malloc(N * D * sizeof(float));
    float *Q = (float *)malloc(N * D * sizeof(float));
    float *out_e = (float *)malloc(N * D * sizeof(float)), *out_o = (float *)malloc(N * D * sizeof(float));
    float *work;
    double o1[D], o2[D], worst = 0.0, worstf = 0.0;
    size_t i, d, nwork, peak;
    kvq_cache c;

    printf("\nB. Wall 1: the online softmax (page block 2, N = %d, D = %d, TILE = %d)\n",
           N, D, KVQ_TILE);
    for (i = 0; i < N * D; i++) {
        Kd[i] = ex_normal(&r); Vd[i] = ex_normal(&r); Qd[i] = ex_normal(&r);
        K[i] = (float)Kd[i]; V[i] = (float)Vd[i]; Q[i] = (float)Qd[i];
    }
    /* 1. exactness in double                                                */
    for (i = 0; i < N; i++) {
        online_double(Qd + i * D, Kd, Vd, N, D, KVQ_TILE, o1);
        eager_double(Qd + i * D, Kd, Vd, N, D, o2, NULL);
        for (d = 0; d < D; d++) if (fabs(o1[d] - o2[d]) > worst) worst = fabs(o1[d] - o2[d]);
    }
    ex_check(worst <= 1e-12, "float64 online vs eager: max |diff| %.1e (page: allclose atol 1e-12)",
             worst);
    /* ... and kvq_attend itself, float32, online vs eager over a cache      */
    cache_of(&c, K, V, N, D);
    nwork = kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER);
    work = (float *)malloc(nwork * sizeof(float));
    ex_must(kvq_attend(&c, Q, N, out_e, NULL, KVQ_ATTN_EAGER, work, nwork), "attend", &c);
    ex_must(kvq_attend(&c, Q, N, out_o, NULL, KVQ_ATTN_ONLINE, work, nwork), "attend", &c);
    for (i = 0; i < N * D; i++)
        if (fabs((double)out_e[i] - out_o[i]) > worstf) worstf = fabs((double)out_e[i] - out_o[i]);
    ex_check(worstf <= 1e-5, "kvq_attend float32 ONLINE vs EAGER: max |diff| %.1e (ours: <= 1e-5)",
             worstf);
    /* 2. peak live scores: TILE per query online (a tile's scores are all
          ONLINE keeps; its scratch is rows of D, not of N), N per query
          eager                                                             */
    peak = (size_t)KVQ_TILE * N;
    ex_check(kvq_attend_scratch_floats(&c, KVQ_ATTN_ONLINE) < 3 * D + KVQ_TILE + 8 &&
             kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER) >= (size_t)N,
             "scratch per query: ONLINE %zu floats (no term in N), EAGER %zu (>= N = %d)",
             kvq_attend_scratch_floats(&c, KVQ_ATTN_ONLINE),
             kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER), N);
    ex_check(peak == (size_t)N * KVQ_TILE && peak * 16 == (size_t)N * N,
             "peak live score floats for %d queries: %zu online vs %d eager, %zux smaller "
             "(page: 16x)", N, peak, N * N, (size_t)N * N / peak);
    /* 3. logits shifted by +400: naive exp overflows, ours stays finite     */
    {
        int naive_inf = 0, finite = 1;
        double diff = 0.0;
        for (i = 0; i < N * D; i++) Q[i] += 400.0f;
        for (i = 0; i < N && !naive_inf; i++) {
            double dot = 0.0;
            for (d = 0; d < D; d++) dot += (double)Q[d] * K[i * D + d];
            naive_inf = isinf((float)exp(dot / sqrt((double)D)));  /* fp32 exp */
        }
        ex_must(kvq_attend(&c, Q, N, out_o, NULL, KVQ_ATTN_ONLINE, work, nwork), "attend", &c);
        ex_must(kvq_attend_dense(K, V, N, D, Q, N, out_e, NULL), "dense", NULL);
        for (i = 0; i < N * D; i++) {
            finite &= isfinite(out_o[i]) != 0;
            if (fabs((double)out_o[i] - out_e[i]) > diff) diff = fabs((double)out_o[i] - out_e[i]);
        }
        ex_check(naive_inf && finite && diff < 1e-3,
                 "logits +400: naive exp overflows (%s), online finite and within %.1e of "
                 "the oracle (page: finite, allclose)", naive_inf ? "yes" : "no", diff);
        for (i = 0; i < N * D; i++) Q[i] -= 400.0f;
    }
    kvq_cache_free(&c);
    /* 4. same outputs, different H2O scores: swap the keys of tokens 7 and
          300 whose values are identical                                     */
    {
        float *p1 = (float *)malloc((size_t)N * N * sizeof(float)), *p2 = (float *)malloc((size_t)N * N * sizeof(float));
        float h1[N], h2[N];
        double out_diff = 0.0;
        kvq_cache c2;
        memcpy(V + 7 * D, V + 300 * D, D * sizeof(float));
        cache_of(&c, K, V, N, D);
        for (d = 0; d < D; d++) {
            float t = K[7 * D + d]; K[7 * D + d] = K[300 * D + d]; K[300 * D + d] = t;
        }
        cache_of(&c2, K, V, N, D);
        ex_must(kvq_attend(&c, Q, N, out_e, p1, KVQ_ATTN_EAGER, work, nwork), "attend", &c);
        ex_must(kvq_attend(&c2, Q, N, out_o, p2, KVQ_ATTN_EAGER, work, nwork), "attend", &c2);
        memset(h1, 0, sizeof h1); memset(h2, 0, sizeof h2);
        kvq_h2o_accumulate(h1, p1, N, N);
        kvq_h2o_accumulate(h2, p2, N, N);
        for (i = 0; i < N * D; i++)
            if (fabs((double)out_e[i] - out_o[i]) > out_diff) out_diff = fabs((double)out_e[i] - out_o[i]);
        ex_check(out_diff < 1e-5 && fabsf(h1[7] - h2[300]) < 1e-3f && fabsf(h1[7] - h1[300]) > 1e-3f,
                 "swapped keys, equal values: outputs differ by %.1e, yet H2O scores of "
                 "tokens 7/300 are %.3f/%.3f vs %.3f/%.3f (page: signal not recoverable)",
                 out_diff, h1[7], h1[300], h2[7], h2[300]);
        kvq_cache_free(&c); kvq_cache_free(&c2);
        free(p1); free(p2);
    }
    free(work); free(Kd); free(Vd); free(Qd); free(K); free(V); free(Q); free(out_e); free(out_o);
}

/* ------------------------------------------------------------------------ */
/* Part C and D: eviction and compaction on quantized caches                */
/* ------------------------------------------------------------------------ */
/* H2O over a decode stream: per step, attend EAGER, accumulate, evict to
   the budget (present and keep may be the same buffer).                   */
static void h2o_stream(kvq_cache *c, const ex_head *h, size_t T, size_t heavy,
                       size_t recent, float *score, uint8_t *keep, float *work,
                       size_t nwork, float *probs)
{
    size_t t;
    float out[256];
    for (t = 0; t < T; t++) {
        ex_must(kvq_cache_append(c, h->K + t * h->D, h->V + t * h->D), "append", c);
        ex_must(kvq_attend(c, h->K + t * h->D, 1, out, probs, KVQ_ATTN_EAGER, work, nwork),
                "attend", c);
        score[t] = 0.0f;
        ex_must(kvq_h2o_accumulate(score, probs, 1, t + 1), "h2o", NULL);
        ex_must(kvq_cache_present(c, keep, t + 1), "present", c);
        ex_must(kvq_evict_h2o(score, keep, t + 1, heavy, recent, keep), "h2o select", NULL);
        ex_must(kvq_cache_evict(c, keep, t + 1, NULL), "evict", c);
    }
}

/* A side's quantized store, slot by slot (position, or -1 for a dead
   placeholder), for plots/eviction.py. unit: the slot's quantization unit
   (one token per-token, G tokens per-channel).                            */
static void dump_slots(FILE *csv, const char *stage, const kvq_side *s)
{
    size_t i;
    for (i = 0; csv && i < s->n_units * s->tokens_per_unit; i++)
        ex_csv_row(csv, "%s,%zu,%zu,%d", stage, i, i / s->tokens_per_unit, (int)s->qpos[i]);
}

static void part_cd(const ex_args *a)
{
    ex_head h;
    size_t T = 1024, D = 128, nwork, i;
    float *work, *probs, *score, *o1, *o2;
    uint8_t *keep;
    kvq_compact_stats cs;
    kvq_bytes b0, b1;
    kvq_cache c;
    kvq_config cfg;
    FILE *csv = ex_csv_open("evict_cache_slots.csv", "stage,slot,unit,position");

    if (!ex_head_get(a, T, D, &h)) exit(2);
    T = h.T; D = h.D;
    if (D > 256) { fprintf(stderr, "head_dim %zu > 256\n", D); exit(2); }
    printf("\nC. Generation equivalence after compaction (%s head, T = %zu, D = %zu)\n",
           h.real ? "real" : "synthetic", T, D);
    probs = (float *)malloc(T * sizeof(float));
    score = (float *)malloc(T * sizeof(float));
    keep = (uint8_t *)malloc(T);
    o1 = (float *)malloc(h.n_q * D * sizeof(float));
    o2 = (float *)malloc(h.n_q * D * sizeof(float));
    /* HF int4 cache (per-token keys and values): H2O keeps 128 + 128       */
    cfg = kvq_config_hf(D, kvq_hf_defaults(4));
    ex_must(ex_cache_init(&c, &cfg), "init", &c);
    nwork = kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER) + T;
    work = (float *)malloc(nwork * sizeof(float));
    h2o_stream(&c, &h, T, 128, 128, score, keep, work, nwork, probs);
    /* EAGER visits positions in order, so its result cannot depend on
       where compaction puts the slots (ONLINE's last bits can: kvq.h Sec. 8) */
    ex_must(kvq_attend(&c, h.Q, h.n_q, o1, NULL, KVQ_ATTN_EAGER, work, nwork), "attend", &c);
    kvq_cache_bytes(&c, &b0);
    dump_slots(csv, "HF int4 keys after H2O", &c.k);
    ex_must(kvq_cache_compact(&c, 16, &cs), "compact", &c);
    dump_slots(csv, "HF int4 keys after repack", &c.k);
    kvq_cache_bytes(&c, &b1);
    ex_must(kvq_attend(&c, h.Q, h.n_q, o2, NULL, KVQ_ATTN_EAGER, work, nwork), "attend", &c);
    printf("  H2O on an HF int4 cache: %zu tokens kept of %zu; blocks of 16: %zu -> %zu "
           "(%zu all-dead before compaction), %zu slot copies\n", b1.tokens - c.n_evicted,
           T, cs.blocks_before, cs.blocks_after, cs.blocks_free_without_compaction, cs.slot_copies);
    ex_check(memcmp(o1, o2, h.n_q * D * sizeof(float)) == 0 && b1.payload < b0.payload,
             "attention after repack is bit-identical to before (payload %zu -> %zu bytes) "
             "(page: token-identical)", b0.payload, b1.payload);
    kvq_cache_free(&c);

    /* D. KIVI keys are per-channel: survivors cannot leave their group.    */
    printf("\nD. Per-channel keys under compaction (KIVI-2, G = 32, R = 128)\n");
    cfg = kvq_config_kivi(D, 2);
    ex_must(ex_cache_init(&c, &cfg), "init", &c);
    ex_must(kvq_cache_prefill(&c, h.K, h.V, T), "prefill", &c);
    {
        ex_rng r = ex_rng_seed(a->seed + 7);
        size_t n_keys_q = c.k.n_units * c.k.tokens_per_unit, n_surv = 0, G = c.k.group;
        double e_keep = 0, e_req = 0, nrm = 0;
        float *orig, *kept, *req;
        uint32_t *w;
        kvq_sz *sz;
        for (i = 0; i < T; i++) keep[i] = ex_uniform(&r) < 0.5;   /* scatter  */
        ex_must(kvq_cache_evict(&c, keep, T, NULL), "evict", &c);
        dump_slots(csv, "KIVI-2 keys after 50% eviction", &c.k);
        ex_must(kvq_cache_compact(&c, 16, &cs), "compact", &c);
        dump_slots(csv, "KIVI-2 keys after compaction", &c.k);
        ex_csv_close(csv);
        ex_check(cs.slots_after[0] == cs.slots_before[0] && cs.pinned_slots > 0,
                 "50%% scattered eviction frees no key group (%zu slots before, %zu after, "
                 "%zu dead slots pinned): our choice costs memory", cs.slots_before[0],
                 cs.slots_after[0], cs.pinned_slots);
        /* the alternative: re-quantize the survivors of the quantized key
           store into fresh groups of G, and measure its extra error        */
        orig = (float *)malloc(n_keys_q * D * sizeof(float));
        kept = (float *)malloc(n_keys_q * D * sizeof(float));
        req = (float *)malloc(n_keys_q * D * sizeof(float));
        w = (uint32_t *)malloc(n_keys_q * D * sizeof(uint32_t));
        sz = (kvq_sz *)malloc(n_keys_q * D * sizeof(kvq_sz));
        for (i = 0; i < n_keys_q; i++) {
            int32_t p = c.k.qpos[i];
            if (p < 0) continue;
            memcpy(orig + n_surv * D, h.K + (size_t)p * D, D * sizeof(float));
            kvq_cache_read(&c, 0, (size_t)p, kept + n_surv * D);
            n_surv++;
        }
        n_surv -= n_surv % G;               /* whole groups only            */
        if (n_surv == 0) {                  /* a head too short to quantize */
            printf("  no whole key group survives on this head (T = %zu): the "
                   "re-quantization comparison is skipped\n", h.T);
            free(orig); free(kept); free(req); free(w); free(sz);
            kvq_cache_free(&c);
            free(work); free(probs); free(score); free(keep); free(o1); free(o2);
            ex_head_free(&h);
            return;
        }
        ex_must(kvq_quantize_matrix(kept, n_surv, D, 2, G, KVQ_PER_CHANNEL, KVQ_ZERO_FLOAT, w, sz),
                "requantize", NULL);
        ex_must(kvq_dequantize_matrix(w, sz, n_surv, D, 2, G, KVQ_PER_CHANNEL, KVQ_ZERO_FLOAT, req),
                "dequantize", NULL);
        for (i = 0; i < n_surv * D; i++) {
            e_keep += ((double)orig[i] - kept[i]) * ((double)orig[i] - kept[i]);
            e_req += ((double)orig[i] - req[i]) * ((double)orig[i] - req[i]);
            nrm += (double)orig[i] * orig[i];
        }
        printf("  key reconstruction error of the %zu survivors: kept in place %.4f, "
               "re-quantized %.4f (relative Frobenius)\n", n_surv, sqrt(e_keep / nrm),
               sqrt(e_req / nrm));
        ex_check(e_req > e_keep,
                 "re-quantizing survivors would add error (%.4f -> %.4f) to free %zu of %zu "
                 "key slots; kvq keeps groups whole (zero extra error)", sqrt(e_keep / nrm),
                 sqrt(e_req / nrm), cs.pinned_slots, cs.slots_before[0]);
        free(orig); free(kept); free(req); free(w); free(sz);
    }
    kvq_cache_free(&c);
    free(work); free(probs); free(score); free(keep); free(o1); free(o2);
    ex_head_free(&h);
}

int main(int argc, char **argv)
{
    ex_args a;
    if (!ex_args_parse(argc, argv, &a)) return 2;
    printf("06_eviction: token eviction and compaction on kvq's cache\n");
    part_a();
    freed_vs_evicted(a.seed);          /* CSV only: the curve behind part A */
    part_b(a.seed);
    part_cd(&a);
    return ex_finish("06_eviction");
}
