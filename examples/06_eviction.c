/* examples/06_eviction.c - token eviction on kvq's cache and the two walls
   that stop it from saving memory, then the compaction that gets the
   memory back (StreamingLLM, H2O, SnapKV; paged engines). Each check
   prints, after "expected:", the figure of the worked example (walkthrough
   chapters 7-8) it must reproduce, fixed before kvq computes anything.
     A. Wall 2: a paged pool frees a block only when all its slots are dead;
        a repack or a hole-filling pass gives the memory back.
     B. Wall 1: attention that never materializes the scores (the online
        softmax) is small, but H2O's signal cannot be read from it.
     C. Compaction of a quantized cache after H2O: attention unchanged.
     D. Per-channel key groups under compaction: our choice, priced.
   Run:  ./build/examples/06_eviction [--k K.npy --v V.npy [--q Q.npy]]
         [--seed N] [--csv DIR: evict_toy_blocks.csv (A), evict_freed.csv (a
         sweep run only then), evict_cache_slots.csv (C, D); plots/eviction.py]
   Checked in tests, not printed here: the toy's survivor set (test_evict.c,
   test_page_figures); the online softmax's exactness in float64 and
   float32, and logits shifted by +400 (test_examples_evict.c).            */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

/* ------------------------------------------------------------------------ */
/* A. A paged pool of int32 slots, one sequence, payload = position         */
/* ------------------------------------------------------------------------ */
enum { N_TOK = 16000, N_BLOCKS = 1000, BLOCK = 16 };   /* figures 1-5's pool */

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

static void drop(kvq_pages *P, kvq_pseq *S)
{
    kvq_pseq_free(P, S);
    kvq_pages_free(P);
}

/* The pool as plots/eviction.py draws it: per slot of every block S holds,
   (physical block, slot, token, live/dead/empty); other blocks are free.   */
static void dump_pool(FILE *csv, const char *stage, const kvq_pages *P, const kvq_pseq *S)
{
    size_t b, j, bt = P->block_tokens;
    for (b = 0; csv && b < S->n_blocks; b++)
        for (j = 0; j < bt; j++) {
            size_t i = b * bt + j;
            int used = i < S->n_slots;
            ex_csv_row(csv, "%s,%zu,%u,%zu,%d,%s", stage, P->n_blocks, (unsigned)S->table[b], j,
                       used ? (int)S->pos[i] : -1, !used ? "empty" : S->alive[i] ? "live" : "dead");
        }
}

/* Blocks freed against the share f of tokens evicted at random (CSV only):
   without compaction a block frees only if all b slots die, f^b of them;
   after a repack all but ceil(live/b).                                    */
static void freed_vs_evicted(unsigned long long seed)
{
    enum { N = N_TOK, BT = BLOCK, NB = N_BLOCKS };   /* figures 1-5's pool */
    static uint8_t keep[N];
    FILE *csv = ex_csv_open("evict_freed.csv", "evicted_share,freed_evict,freed_repack,"
                            "closed_form_evict,closed_form_repack,blocks");
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
        drop(&P, &S);
    }
    ex_csv_close(csv);
}

/* A side's quantized store, slot by slot (position, -1 for a dead
   placeholder; unit = one token per-token, G tokens per-channel).         */
static void dump_slots(FILE *csv, const char *stage, const kvq_side *s)
{
    size_t i;
    for (i = 0; csv && i < s->n_units * s->geom.tokens_per_unit; i++)
        ex_csv_row(csv, "%s,%zu,%zu,%d", stage, i, i / s->geom.tokens_per_unit, (int)s->qpos[i]);
}

/* Figures 1-5's pool (16,000 tokens in 1,000 blocks of 16) after evicting
   every token whose keep_token(i) is 0: st, and the pool left in P, S.    */
static void evict_from_full_pool(kvq_pages *P, kvq_pseq *S, int (*keep_token)(size_t),
                                 kvq_page_stats *st)
{
    static uint8_t keep[N_TOK];
    size_t i;
    fill(P, S, N_BLOCKS, BLOCK, N_TOK);
    for (i = 0; i < N_TOK; i++) keep[i] = (uint8_t)keep_token(i);
    ex_must(kvq_pseq_evict(P, S, keep, N_TOK, st), "evict", NULL);
}

static int every_10th(size_t i) { return i % 10 == 0; }
static int all_but_block_2(size_t i) { return !(i >= 32 && i < 48); }
static int one_per_block(size_t i) { return i % BLOCK == 0; }

/* A. Wall 2, figures 1-3. Evicting marks slots dead; a paged pool returns a
   block only when every slot in it is dead. Keep every 10th token, then
   repack the survivors.                                                   */
static void show_scattered_eviction_frees_nothing_until_repack(void)
{
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st;
    size_t i;
    evict_from_full_pool(&P, &S, every_10th, &st);
    ex_check(st.blocks_freed == 0, "evict 14,400 of 16,000 (every 10th kept): %zu blocks freed "
             "without compaction (expected: 0)", st.blocks_freed);
    ex_must(kvq_pseq_repack(&P, &S, 0, &st), "repack", NULL);
    for (i = 0; i < S.n_slots && S.pos[i] == (int32_t)(10 * i); i++) {}
    ex_check(st.blocks_freed == 900 && P.n_free == 900 && i == 1600 && S.n_slots == 1600,
             "repack: %zu of 1,000 blocks freed, free gauge %zu, the 1,600 survivors in "
             "order (expected: 900, monotone)", st.blocks_freed, P.n_free);
    drop(&P, &S);
}

/* A. Figure 4: evict exactly one block's tokens (32..47): it is freed.    */
static void show_aligned_block_eviction_frees_its_block(void)
{
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st;
    evict_from_full_pool(&P, &S, all_but_block_2, &st);
    ex_check(st.blocks_freed == 1 && P.n_free == 1, "evict tokens 32..47 (block 2 exactly): "
             "%zu block freed (expected: 1)", st.blocks_freed);
    drop(&P, &S);
}

/* A. Figure 5: one survivor per block pins every block: 15 of 16 tokens
   evicted, none freed.                                                    */
static void show_one_survivor_per_block_pins_the_pool(void)
{
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st;
    evict_from_full_pool(&P, &S, one_per_block, &st);
    ex_check(st.blocks_freed == 0 && st.tokens_evicted == 15000,
             "one survivor per block: %.2f%% evicted, %zu blocks freed (expected: 93.75%%, 0)",
             100.0 * (double)st.tokens_evicted / N_TOK, st.blocks_freed);
    drop(&P, &S);
}

/* A. Figure 6, the toy: 6 blocks x 4 slots, T0..T23, the newest round
   T20..T23; evict T2, T9, T13, T21. Repack slides every survivor forward;
   hole-filling moves only the round's survivors into holes.               */
static void show_holefill_moves_fewer_slots_than_repack(void)
{
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st, hf;
    uint8_t keep[24];
    size_t i;
    FILE *csv = ex_csv_open("evict_toy_blocks.csv", "stage,pool_blocks,block,slot,token,state");
    for (i = 0; i < 24; i++) keep[i] = !(i == 2 || i == 9 || i == 13 || i == 21);
    fill(&P, &S, 6, 4, 24);
    dump_pool(csv, "filled", &P, &S);
    ex_must(kvq_pseq_evict(&P, &S, keep, 24, NULL), "evict", NULL);
    dump_pool(csv, "evicted", &P, &S);
    ex_must(kvq_pseq_repack(&P, &S, 0, &st), "repack", NULL);
    dump_pool(csv, "repacked", &P, &S);
    drop(&P, &S);
    fill(&P, &S, 6, 4, 24);
    ex_must(kvq_pseq_evict(&P, &S, keep, 24, NULL), "evict", NULL);
    ex_must(kvq_pseq_holefill(&P, &S, 0, 20, &hf), "holefill", NULL);
    dump_pool(csv, "hole-filled", &P, &S);
    ex_csv_close(csv);
    printf("  hole-filled layout (slot: token):");
    for (i = 0; i < S.n_slots; i++) printf(" %d", *(const int32_t *)kvq_pseq_slot(&P, &S, i));
    printf("\n");
    ex_check(st.blocks_freed == 1 && st.slot_copies == 18, "toy repack: %zu block freed, %zu "
             "slot copies (expected: 1, 18)", st.blocks_freed, st.slot_copies);
    ex_check(hf.blocks_freed == 1 && hf.slot_copies == 3 && S.pos[2] == 20,
             "toy hole-filling: %zu block freed, %zu slot copies, T%d in T2's slot (expected: 1, 3, "
             "T20)", hf.blocks_freed, hf.slot_copies, (int)S.pos[2]);
    drop(&P, &S);
}

/* B. Wall 1. The online softmax (kvq_attend ONLINE) keeps a running max,
   denominator and output per query and only a tile of scores; the eager
   path materializes all N. Same outputs, yet H2O's signal, the attention
   each token received, cannot be recovered from them: swap the keys of two
   tokens with equal values and the outputs stay while their scores swap.
   N = 512 i.i.d. queries and keys, D = 64.                                */
static void show_online_softmax_hides_the_h2o_signal(unsigned long long seed)
{
    enum { N = 512, DB = 64 };
    ex_rng r = ex_rng_seed(seed);
    float *K = (float *)ex_alloc(3 * N * DB * sizeof(float)), *V = K + N * DB, *Q = V + N * DB;
    float *o1 = (float *)ex_alloc(2 * N * DB * sizeof(float)), *o2 = o1 + N * DB;
    float *p1 = (float *)ex_alloc(2 * (size_t)N * N * sizeof(float)), *p2 = p1 + N * N;
    float s1[N], s2[N];
    double diff;
    size_t on, eg, i;
    kvq_cache c1, c2;
    kvq_config full = kvq_config_full(DB, 32);          /* fp32, no eviction */
    for (i = 0; i < 3 * N * DB; i++) K[i] = (float)ex_normal(&r);
    memcpy(V + 7 * DB, V + 300 * DB, DB * sizeof(float));        /* v7 = v300 */
    ex_cache_stream(&c1, &full, K, V, N, N);
    on = kvq_attend_scratch_floats(&c1, KVQ_ATTN_ONLINE);
    eg = kvq_attend_scratch_floats(&c1, KVQ_ATTN_EAGER);
    printf("\nB. Wall 1: the online softmax (N = %d, D = %d, TILE = %d)\n",
           N, DB, KVQ_TILE);
    ex_check(on < 3 * DB + KVQ_TILE + 8 && eg >= (size_t)N && N / KVQ_TILE == 16,
             "live scores per query: ONLINE %d (scratch %zu floats, no term in N), EAGER "
             "%d (scratch %zu): %dx smaller (expected: 16x)", KVQ_TILE, on, N, eg, N / KVQ_TILE);
    for (i = 0; i < DB; i++) {                       /* swap keys 7 and 300 */
        float t = K[7 * DB + i]; K[7 * DB + i] = K[300 * DB + i]; K[300 * DB + i] = t;
    }
    ex_cache_stream(&c2, &full, K, V, N, N);
    ex_attend(&c1, Q, N, o1, p1, KVQ_ATTN_EAGER);
    ex_attend(&c2, Q, N, o2, p2, KVQ_ATTN_EAGER);
    memset(s1, 0, sizeof s1); memset(s2, 0, sizeof s2);
    ex_must(kvq_h2o_accumulate(s1, p1, N, N), "h2o", NULL);
    ex_must(kvq_h2o_accumulate(s2, p2, N, N), "h2o", NULL);
    diff = ex_max_abs_diff(o1, o2, N * DB);
    ex_check(diff < 1e-5 && fabsf(s1[7] - s2[300]) < 1e-3f && fabsf(s1[7] - s1[300]) > 1e-3f,
             "swapped keys, equal values: outputs within 1e-5, yet H2O scores of tokens "
             "7/300 are %.3f/%.3f vs %.3f/%.3f (expected: signal not recoverable)",
             s1[7], s1[300], s2[7], s2[300]);
    kvq_cache_free(&c1); kvq_cache_free(&c2);
    free(K); free(o1); free(p1);
}

/* C. H2O (128 heavy + 128 recent) streamed over an HF int4 cache: per step
   attend EAGER (the scores H2O needs), accumulate, evict to the budget.
   Then compact: the quantized store is repacked, codes and scales move bit
   for bit, and attention must not change. csv: evict_cache_slots.csv.    */
static void show_compaction_leaves_attention_unchanged(const ex_head *h, FILE *csv)
{
    size_t T = h->T, D = h->D, t;
    kvq_config cfg = kvq_config_hf(D, kvq_hf_defaults(4));
    kvq_cache c;
    kvq_compact_stats cs;
    kvq_bytes b0, b1;
    float *score = (float *)ex_alloc(T * sizeof(float)), *probs = (float *)ex_alloc(T * sizeof(float));
    float *o1 = (float *)ex_alloc(2 * (h->n_q + 1) * D * sizeof(float)), *o2 = o1 + (h->n_q + 1) * D;
    uint8_t *present = (uint8_t *)ex_alloc(T);
    printf("\nC. Generation equivalence after compaction (%s head, T = %zu, D = %zu)\n",
           h->real ? "real" : "synthetic", T, D);
    ex_must(ex_cache_init(&c, &cfg), "init", &c);
    for (t = 0; t < T; t++) {
        ex_must(kvq_cache_append(&c, h->K + t * D, h->V + t * D), "append", &c);
        ex_attend(&c, h->K + t * D, 1, o1, probs, KVQ_ATTN_EAGER);  /* query: k_t */
        score[t] = 0.0f;
        ex_must(kvq_h2o_accumulate(score, probs, 1, t + 1), "h2o", NULL);
        ex_must(kvq_cache_present(&c, present, t + 1), "present", &c);
        ex_must(kvq_evict_h2o(score, present, t + 1, 128, 128, present), "h2o select", NULL);
        ex_must(kvq_cache_evict(&c, present, t + 1, NULL), "evict", &c);
    }
    /* EAGER visits positions in order, so its result cannot depend on
       where compaction puts the slots (ONLINE's last bits can, kvq.h 8)   */
    ex_attend(&c, h->Q, h->n_q, o1, NULL, KVQ_ATTN_EAGER);
    ex_must(kvq_cache_bytes(&c, &b0), "bytes", &c);
    dump_slots(csv, "HF int4 keys after H2O", &c.k);
    ex_must(kvq_cache_compact(&c, 16, &cs), "compact", &c);
    dump_slots(csv, "HF int4 keys after repack", &c.k);
    ex_must(kvq_cache_bytes(&c, &b1), "bytes", &c);
    ex_attend(&c, h->Q, h->n_q, o2, NULL, KVQ_ATTN_EAGER);
    printf("  H2O on an HF int4 cache: %zu tokens kept of %zu; blocks of 16: %zu -> %zu "
           "(%zu all-dead before compaction), %zu slot copies\n", T - c.n_evicted, T,
           cs.blocks_before, cs.blocks_after, cs.blocks_free_without_compaction, cs.slot_copies);
    if (b1.payload == b0.payload)
        ex_na("nothing to compact: no quantized token was evicted (T = %zu, budget 256 + "
              "the residual)", T);
    else
        ex_check(memcmp(o1, o2, h->n_q * D * sizeof(float)) == 0, "attention after repack is "
                 "bit-identical to before (payload %zu -> %zu bytes) (expected: token-identical)",
                 b0.payload, b1.payload);
    kvq_cache_free(&c);
    free(score); free(probs); free(o1); free(present);
}

/* D. KIVI's keys are per-channel: G tokens share each channel's scale and
   zero, so a survivor cannot leave its group without being quantized
   again. kvq frees a group only when all G are dead. Evict half the tokens
   at random, compact, and price the alternative: re-quantize the survivors
   into fresh groups of G. csv: evict_cache_slots.csv.                     */
static void show_per_channel_groups_pin_memory_to_keep_error(const ex_head *h,
                                                            unsigned long long seed, FILE *csv)
{
    size_t T = h->T, D = h->D, n_q, n_surv = 0, G, i;
    kvq_config cfg = kvq_config_kivi(D, 2);
    kvq_cache c;
    kvq_compact_stats cs;
    ex_rng r = ex_rng_seed(seed + 7);
    double e_keep, e_req;
    float *orig, *kept, *req;
    uint8_t *kd = (uint8_t *)ex_alloc(T);
    printf("\nD. Per-channel keys under compaction (KIVI-2, G = 32, R = 128)\n");
    ex_must(ex_cache_init(&c, &cfg), "init", &c);
    ex_must(kvq_cache_prefill(&c, h->K, h->V, T), "prefill", &c);
    n_q = c.k.n_units * c.k.geom.tokens_per_unit; G = c.k.group;
    for (i = 0; i < T; i++) kd[i] = ex_uniform(&r) < 0.5;
    ex_must(kvq_cache_evict(&c, kd, T, NULL), "evict", &c);
    dump_slots(csv, "KIVI-2 keys after 50% eviction", &c.k);
    ex_must(kvq_cache_compact(&c, 16, &cs), "compact", &c);
    dump_slots(csv, "KIVI-2 keys after compaction", &c.k);
    orig = (float *)ex_alloc(3 * (n_q + 1) * D * sizeof(float));
    kept = orig + (n_q + 1) * D; req = kept + (n_q + 1) * D;
    for (i = 0; i < n_q; i++) {                      /* the survivors, as kept */
        int32_t p = c.k.qpos[i];
        if (p < 0) continue;
        memcpy(orig + n_surv * D, h->K + (size_t)p * D, D * sizeof(float));
        ex_must(kvq_cache_read(&c, 0, (size_t)p, kept + n_surv * D), "read", &c);
        n_surv++;
    }
    n_surv -= n_surv % G;                            /* whole groups only     */
    if (n_q == 0 || n_surv == 0)
        ex_na("no whole key group survives on this head (T = %zu, R = 128): nothing to "
              "compact or re-quantize", T);
    else {
        ex_check(cs.slots_after[0] == cs.slots_before[0] && cs.pinned_slots > 0,
                 "50%% scattered eviction frees no key group (%zu slots before, %zu after, "
                 "%zu dead slots pinned): our choice costs memory", cs.slots_before[0],
                 cs.slots_after[0], cs.pinned_slots);
        ex_fake_quant(kept, n_surv, D, 2, G, KVQ_PER_CHANNEL, req);
        e_keep = ex_rel_err(orig, kept, n_surv * D);          /* relative Frobenius */
        e_req = ex_rel_err(orig, req, n_surv * D);
        ex_check_lower(e_keep, e_req, 0.05, "keeping the %zu survivors' groups whole (key "
                       "error %.4f) beats re-quantizing them (%.4f), which would free %zu of "
                       "%zu key slots", n_surv, e_keep, e_req, cs.pinned_slots, cs.slots_before[0]);
    }
    kvq_cache_free(&c);
    free(orig); free(kd);
}

int main(int argc, char **argv)
{
    ex_args a;
    ex_head h;
    FILE *csv;
    if (!ex_args_parse(argc, argv, &a, EX_QUERIES)) return 2;
    printf("06_eviction: token eviction and compaction on kvq's cache\n");

    /* A. Wall 2 on a paged pool, the worked example's figures 1-6         */
    printf("\nA. Wall 2: block-granular reclamation (worked example, figures 1-6)\n");
    show_scattered_eviction_frees_nothing_until_repack();
    show_aligned_block_eviction_frees_its_block();
    show_one_survivor_per_block_pins_the_pool();
    show_holefill_moves_fewer_slots_than_repack();
    freed_vs_evicted(a.seed);                  /* CSV only: the curve behind A */

    /* B. Wall 1 on kvq's attention                                        */
    show_online_softmax_hides_the_h2o_signal(a.seed);

    /* C, D. Compaction of quantized caches (--k/--v/--q, or synthetic)    */
    if (!ex_head_get(&a, 1024, 128, &h)) return 2;
    csv = ex_csv_open("evict_cache_slots.csv", "stage,slot,unit,position");
    show_compaction_leaves_attention_unchanged(&h, csv);
    show_per_channel_groups_pin_memory_to_keep_error(&h, a.seed, csv);
    ex_csv_close(csv);

    ex_head_free(&h);
    return ex_finish("06_eviction");
}
