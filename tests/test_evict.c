/* tests/test_evict.c - kvq.h Sec. 11: eviction policies, eviction from a
   cache, compaction, and the paged block allocator, against independent
   expectations.

   Groups (each is a function below; its comment states the property and
   where the expectation comes from):
     1. the worked example's figures (walkthrough 7.3, 8): 16,000 tokens in
        1,000 blocks of 16, aligned block, one survivor per block, the 6x4 toy
     2. allocator + evict/repack/holefill vs a brute-force model of blocks,
        reference counts and slots, on thousands of random operation streams
     3. bad input to the allocator changes nothing
     4. allocator failure inside kvq_pages_init / kvq_pseq_append / _fork
     5. StreamingLLM, H2O and SnapKV vs direct references (full sorts)
     6. kvq_cache_evict + kvq_cache_compact on real FULL, KIVI and HF caches:
        reads, attention vs a dense oracle, compaction stats vs an oracle
        count over the slots, bytes, appends afterwards
     7. OTT and LogQuant caches refuse eviction and stay unchanged
     8. forking an empty sequence (last: it trips UBSan in kvq.h today)

   Everything is seeded; no expected number was captured from running kvq.
   -DKVQ_TEST_QUICK (the sanitizer build) shrinks the loop counts.         */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>

#define TEST_ALLOC            /* tests/test.h: counting allocator, RNG */
#define TEST_RNG
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */
/* ------------------------------------------------------------------------ */
static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static void *xmalloc(size_t n)     /* test-side memory: plain malloc, not kvq's */
{
    void *p = malloc(n ? n : 1);
    if (!p) { printf("out of memory\n"); exit(2); }
    return p;
}

/* A random keep mask (n) of one of the shapes eviction produces:
   0 uniform rate (0.1/0.5/0.9), 1 keep every k-th, 2 whole aligned blocks
   of bt dead, 3 all dead, 4 none dead, 5 rate 0.97 (a few survivors).     */
static void random_mask(rng *r, uint8_t *keep, size_t n, size_t bt)
{
    static const double rates[] = { 0.1, 0.5, 0.9 };
    size_t kind = rbelow(r, 6), i, k = 1 + rbelow(r, 20);
    double rate = rates[rbelow(r, 3)];
    for (i = 0; i < n; i++) {
        switch (kind) {
        case 0: keep[i] = runif(r) >= rate; break;
        case 1: keep[i] = i % k == 0; break;
        case 2: keep[i] = 1; break;
        case 3: keep[i] = 0; break;
        case 4: keep[i] = 1; break;
        default: keep[i] = runif(r) >= 0.97; break;
        }
    }
    if (kind == 2)
        for (i = 0; i < n; i += bt)
            if (runif(r) < 0.5) { size_t j; for (j = i; j < n && j < i + bt; j++) keep[j] = 0; }
}

/* ======================================================================== */
/* THE BLOCK MODEL: a brute-force twin of the allocator's documented rules  */
/* ======================================================================== */
/* Model blocks get ids that are never reused; each sequence is a list of
   slots (alive, pos, payload tag) and a list of model block ids. The rules,
   straight from the kvq.h Sec. 11 doc:
     append   a new block when the last is full; copy-on-write when the last
              block is shared; CAPACITY when either needs a block and none
              is free
     evict    a block leaves the sequence when every slot the sequence uses
              in it is dead; it returns to the pool when no one holds it
     repack   survivors of [first, n) slide forward in order; blocks past
              ceil(n'/bt) go back
     holefill the newest round's survivors fill the history's holes in
              order, the rest slide to round_start
   After every operation the real allocator is compared with the model:
   the same block identity (a consistent injective map model -> real id),
   refcounts, free gauge, free list, slots, positions and payloads.        */
#define SLOT_BYTES 8            /* payload: uint32 tag + int32 position    */
#define MAX_SEQ 4

typedef struct { uint8_t alive; int32_t pos; uint32_t tag; } mslot;
typedef struct {
    mslot  *slot; size_t n, cap;         /* (cap) slots                      */
    size_t *blk;  size_t nb, capb;       /* (capb) model block ids           */
} mseq;
typedef struct {
    size_t   bt, n_blocks;
    uint32_t *ref;    /* (cap_ids) model refcount per model id               */
    long     *m2r;    /* (cap_ids) real id of a model id, -1 = not seen yet  */
    size_t   n_ids, cap_ids, live;       /* ids handed out, blocks in use    */
    mseq     s[MAX_SEQ];
    uint32_t next_tag;
} model;

static void model_init(model *M, size_t n_blocks, size_t bt)
{
    memset(M, 0, sizeof *M);
    M->bt = bt; M->n_blocks = n_blocks;
}
static void model_free(model *M)
{
    int i;
    for (i = 0; i < MAX_SEQ; i++) { free(M->s[i].slot); free(M->s[i].blk); }
    free(M->ref); free(M->m2r);
}
static size_t model_new_block(model *M)
{
    if (M->n_ids == M->cap_ids) {
        M->cap_ids = M->cap_ids ? 2 * M->cap_ids : 64;
        M->ref = (uint32_t *)realloc(M->ref, M->cap_ids * sizeof(uint32_t));
        M->m2r = (long *)realloc(M->m2r, M->cap_ids * sizeof(long));
        if (!M->ref || !M->m2r) { printf("out of memory\n"); exit(2); }
    }
    M->ref[M->n_ids] = 1;
    M->m2r[M->n_ids] = -1;
    M->live++;
    return M->n_ids++;
}
/* One reference to model block b goes away; returns 1 if it became free. */
static int model_unref(model *M, size_t b)
{
    if (--M->ref[b] > 0) return 0;
    M->live--;
    return 1;
}
static void mseq_push_slot(mseq *q, mslot v)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 32;
        q->slot = (mslot *)realloc(q->slot, q->cap * sizeof(mslot));
        if (!q->slot) { printf("out of memory\n"); exit(2); }
    }
    q->slot[q->n++] = v;
}
static void mseq_push_blk(mseq *q, size_t b)
{
    if (q->nb == q->capb) {
        q->capb = q->capb ? 2 * q->capb : 8;
        q->blk = (size_t *)realloc(q->blk, q->capb * sizeof(size_t));
        if (!q->blk) { printf("out of memory\n"); exit(2); }
    }
    q->blk[q->nb++] = b;
}
static size_t model_free_blocks(const model *M) { return M->n_blocks - M->live; }

/* The model's private start: the first slot of the first unshared block.  */
static size_t model_private_start(const model *M, const mseq *q)
{
    size_t b = 0;
    while (b < q->nb && M->ref[q->blk[b]] > 1) b++;
    return b * M->bt < q->n ? b * M->bt : q->n;
}

/* Expected outcome of one operation: status, and on success the stats.    */
typedef struct { kvq_status st; size_t freed, copies, evicted; } expect;

static expect model_append(model *M, int si, int32_t pos)
{
    mseq *q = &M->s[si];
    expect e = { KVQ_OK, 0, 0, 0 };
    int need_new = q->n == q->nb * M->bt;
    int cow = !need_new && M->ref[q->blk[q->nb - 1]] > 1;
    mslot v;
    if ((need_new || cow) && model_free_blocks(M) == 0) { e.st = KVQ_ERR_CAPACITY; return e; }
    if (need_new) mseq_push_blk(q, model_new_block(M));
    if (cow) {
        model_unref(M, q->blk[q->nb - 1]);           /* was > 1: stays held */
        q->blk[q->nb - 1] = model_new_block(M);
    }
    v.alive = 1; v.pos = pos; v.tag = M->next_tag++;
    mseq_push_slot(q, v);
    return e;
}

static void model_fork(model *M, int dst, int src)
{
    size_t i;
    for (i = 0; i < M->s[src].nb; i++) { mseq_push_blk(&M->s[dst], M->s[src].blk[i]); M->ref[M->s[src].blk[i]]++; }
    for (i = 0; i < M->s[src].n; i++) mseq_push_slot(&M->s[dst], M->s[src].slot[i]);
}

static size_t model_release_all(model *M, int si)
{
    mseq *q = &M->s[si];
    size_t freed = 0, b;
    for (b = 0; b < q->nb; b++) freed += (size_t)model_unref(M, q->blk[b]);
    q->nb = q->n = 0;
    return freed;
}

static expect model_evict(model *M, int si, const uint8_t *keep)
{
    mseq *q = &M->s[si];
    expect e = { KVQ_OK, 0, 0, 0 };
    size_t i, b, bt = M->bt, nb = 0, n = 0;
    for (i = 0; i < q->n; i++)
        if (q->slot[i].alive && !keep[i]) { q->slot[i].alive = 0; e.evicted++; }
    /* rebuild the lists without the all-dead blocks (in place: the write
       cursor never passes the read cursor)                                 */
    for (b = 0; b < q->nb; b++) {
        size_t lo = b * bt, hi = lo + bt < q->n ? lo + bt : q->n, any = 0;
        for (i = lo; i < hi; i++) any += q->slot[i].alive;
        if (!any) { e.freed += (size_t)model_unref(M, q->blk[b]); continue; }
        q->blk[nb] = q->blk[b];
        for (i = lo; i < hi; i++) q->slot[nb * bt + (i - lo)] = q->slot[i];
        n = nb * bt + (hi - lo);
        nb++;
    }
    q->nb = nb; q->n = n;
    return e;
}

/* Checks shared by repack and holefill: alignment, then shared blocks.    */
static kvq_status model_compact_args(const model *M, const mseq *q, size_t first, size_t end)
{
    size_t b;
    if (first == q->n && end == q->n) return KVQ_OK;     /* doc: empty range */
    if (first % M->bt || first > end || end > q->n) return KVQ_ERR_SIZE;
    for (b = first / M->bt; b < q->nb; b++)
        if (M->ref[q->blk[b]] > 1) return KVQ_ERR_STATE;
    return KVQ_OK;
}

/* The slot list now ends at n: tail blocks past ceil(n/bt) go back.       */
static size_t model_truncate(model *M, mseq *q, size_t n)
{
    size_t freed = 0, keep_b = ceil_div(n, M->bt);
    while (q->nb > keep_b) freed += (size_t)model_unref(M, q->blk[--q->nb]);
    q->n = n;
    return freed;
}

static expect model_repack(model *M, int si, size_t first)
{
    mseq *q = &M->s[si];
    expect e = { KVQ_OK, 0, 0, 0 };
    mslot *surv;
    size_t i, m = 0;
    if ((e.st = model_compact_args(M, q, first, q->n)) != KVQ_OK) return e;
    /* gather every survivor first (one gather-clone-scatter pass)          */
    surv = (mslot *)xmalloc((q->n - first + 1) * sizeof(mslot));
    for (i = first; i < q->n; i++) {
        if (q->slot[i].alive) { if (first + m != i) e.copies++; surv[m++] = q->slot[i]; }
        else e.evicted++;
    }
    for (i = 0; i < m; i++) q->slot[first + i] = surv[i];
    free(surv);
    e.freed = model_truncate(M, q, first + m);
    return e;
}

static expect model_holefill(model *M, int si, size_t first, size_t rs)
{
    mseq *q = &M->s[si];
    expect e = { KVQ_OK, 0, 0, 0 };
    mslot *surv;
    size_t *from, i, m = 0, k, hole = first, j = rs;
    if ((e.st = model_compact_args(M, q, first, rs)) != KVQ_OK) return e;
    /* gather the round's survivors and where they were                     */
    surv = (mslot *)xmalloc((q->n - rs + 1) * sizeof(mslot));
    from = (size_t *)xmalloc((q->n - rs + 1) * sizeof(size_t));
    for (i = rs; i < q->n; i++) {
        if (q->slot[i].alive) { from[m] = i; surv[m++] = q->slot[i]; }
        else e.evicted++;
    }
    /* survivor k drops into the k-th hole of [first, rs); once the holes
       run out the rest slide to rs, rs+1, ... (a copy only if it moved)    */
    for (k = 0; k < m; k++) {
        while (hole < rs && q->slot[hole].alive) hole++;
        if (hole < rs) { q->slot[hole] = surv[k]; e.copies++; e.evicted++; }
        else { e.copies += from[k] != j; q->slot[j++] = surv[k]; }
    }
    free(surv); free(from);
    e.freed = model_truncate(M, q, j);
    return e;
}

/* The real allocator against the model. Returns 1 if they agree; else
   writes the first difference into msg.                                   */
static int pages_agree(const kvq_pages *P, const kvq_pseq *S, int n_seq, model *M,
                       char *msg, size_t len)
{
    long *r2m = (long *)xmalloc(P->n_blocks * sizeof(long));
    uint32_t *refs = (uint32_t *)xmalloc(P->n_blocks * sizeof(uint32_t));
    size_t b, i, referenced = 0;
    int si, ok = 0;
    for (b = 0; b < P->n_blocks; b++) { r2m[b] = -1; refs[b] = 0; }
    for (si = 0; si < n_seq; si++) {
        const kvq_pseq *s = &S[si];
        const mseq *q = &M->s[si];
        if (s->n_slots != q->n || s->n_blocks != q->nb) {
            snprintf(msg, len, "seq %d: %zu slots / %zu blocks, model %zu / %zu",
                     si, s->n_slots, s->n_blocks, q->n, q->nb);
            goto out;
        }
        /* block identity: one real id per model id and vice versa          */
        for (b = 0; b < q->nb; b++) {
            size_t mb = q->blk[b];
            uint32_t rb = s->table[b];
            if (rb >= P->n_blocks) { snprintf(msg, len, "seq %d block %zu: id %u", si, b, (unsigned)rb); goto out; }
            if (M->m2r[mb] < 0) M->m2r[mb] = (long)rb;
            if (M->m2r[mb] != (long)rb || (r2m[rb] >= 0 && r2m[rb] != (long)mb)) {
                snprintf(msg, len, "seq %d block %zu: real id %u does not match the model's "
                         "block identity", si, b, (unsigned)rb);
                goto out;
            }
            r2m[rb] = (long)mb;
            refs[rb]++;
        }
        /* slots: alive, pos, and the payload of every live slot            */
        for (i = 0; i < q->n; i++) {
            const mslot *v = &q->slot[i];
            const unsigned char *pl = (const unsigned char *)kvq_pseq_slot(P, s, i);
            uint32_t tag; int32_t pos;
            if (s->alive[i] != v->alive) { snprintf(msg, len, "seq %d slot %zu: alive %d, model %d", si, i, s->alive[i], v->alive); goto out; }
            if (!v->alive) continue;
            if (s->pos[i] != v->pos) { snprintf(msg, len, "seq %d slot %zu: pos %d, model %d", si, i, (int)s->pos[i], (int)v->pos); goto out; }
            if (P->slot_bytes == 0) { if (pl) { snprintf(msg, len, "slot_bytes 0 but a payload pointer"); goto out; } continue; }
            if (!pl) { snprintf(msg, len, "seq %d slot %zu: no payload", si, i); goto out; }
            memcpy(&tag, pl, 4); memcpy(&pos, pl + 4, 4);
            if (tag != v->tag || pos != v->pos) {
                snprintf(msg, len, "seq %d slot %zu: payload (%u, %d), model (%u, %d)", si, i,
                         (unsigned)tag, (int)pos, (unsigned)v->tag, (int)v->pos);
                goto out;
            }
        }
        if (kvq_pseq_private_start(P, s) != model_private_start(M, q)) {
            snprintf(msg, len, "seq %d: private start %zu, model %zu", si,
                     kvq_pseq_private_start(P, s), model_private_start(M, q));
            goto out;
        }
    }
    /* refcounts == number of sequences holding the block == model's count */
    for (b = 0; b < P->n_blocks; b++) {
        if (P->refcount[b] != refs[b] || (r2m[b] >= 0 && M->ref[r2m[b]] != refs[b])) {
            snprintf(msg, len, "block %zu: refcount %u, held by %u sequences", b,
                     (unsigned)P->refcount[b], (unsigned)refs[b]);
            goto out;
        }
        referenced += refs[b] > 0;
    }
    /* the free gauge and list: exactly the unreferenced blocks, once each  */
    if (P->n_free != P->n_blocks - referenced || P->n_free != model_free_blocks(M)) {
        snprintf(msg, len, "free gauge %zu; %zu blocks, %zu referenced, model free %zu",
                 P->n_free, P->n_blocks, referenced, model_free_blocks(M));
        goto out;
    }
    for (b = 0; b < P->n_free; b++) {
        uint32_t id = P->free_list[b];
        if (id >= P->n_blocks || refs[id] != 0 || r2m[id] == -2) {
            snprintf(msg, len, "free list entry %zu (block %u) is referenced or repeated", b, (unsigned)id);
            goto out;
        }
        r2m[id] = -2;                                  /* seen on the list */
    }
    ok = 1;
out:
    free(r2m); free(refs);
    return ok;
}

/* One operation on the real allocator, with the model's expectation.      */
static void slot_payload(unsigned char *pl, uint32_t tag, int32_t pos)
{
    memcpy(pl, &tag, 4); memcpy(pl + 4, &pos, 4);
}
static int stats_match(const kvq_page_stats *st, const expect *e, const kvq_pseq *S, size_t bt)
{
    size_t i, live = 0;
    double occ;
    for (i = 0; i < S->n_slots; i++) live += S->alive[i];
    occ = S->n_blocks ? (double)live / (double)(S->n_blocks * bt) : 0.0;
    return st->blocks_freed == e->freed && st->slot_copies == e->copies &&
           st->tokens_evicted == e->evicted && fabs(st->occupancy - occ) <= 1e-12;
}

/* ======================================================================== */
/* 1. THE WORKED EXAMPLE'S FIGURES (walkthrough 7.3 and 8)                 */
/* ======================================================================== */
/* A pool of n_blocks blocks of bt slots holding one sequence of T tokens,
   payload = the position (int32).                                          */
static void fill_seq(kvq_pages *P, kvq_pseq *S, size_t n_blocks, size_t bt, size_t T)
{
    size_t t;
    int ok = kvq_pages_init(P, n_blocks, bt, sizeof(int32_t)) == KVQ_OK;
    kvq_pseq_init(S);
    for (t = 0; t < T && ok; t++) {
        int32_t p = (int32_t)t;
        ok = kvq_pseq_append(P, S, p, &p) == KVQ_OK;
    }
    CHECK(ok && S->n_slots == T, "building a sequence of %zu tokens in %zu x %zu", T, n_blocks, bt);
}
/* Every live slot of S holds its own position as payload; returns the
   number of live slots, and whether they appear in increasing order.       */
static size_t live_consistent(const kvq_pages *P, const kvq_pseq *S, int *sorted, int *payload_ok)
{
    size_t i, live = 0;
    int32_t last = -1;
    *sorted = 1; *payload_ok = 1;
    for (i = 0; i < S->n_slots; i++) {
        int32_t pl;
        if (!S->alive[i]) continue;
        memcpy(&pl, kvq_pseq_slot(P, S, i), 4);
        if (pl != S->pos[i]) *payload_ok = 0;
        if (S->pos[i] <= last) *sorted = 0;
        last = S->pos[i];
        live++;
    }
    return live;
}

static void test_page_figures(void)
{
    kvq_pages P;
    kvq_pseq S;
    kvq_page_stats st;
    uint8_t *keep = (uint8_t *)xmalloc(16000);
    size_t i, live;
    int sorted, pl_ok, all_tenth;

    /* 1-3. keep every 10th of 16,000 tokens in 1,000 blocks of 16: evict
       frees 0 blocks (expected: 0); repack frees 900 (expected: 900) and keeps
       the 1,600 survivors in order.                                       */
    fill_seq(&P, &S, 1000, 16, 16000);
    for (i = 0; i < 16000; i++) keep[i] = i % 10 == 0;
    CHECK(kvq_pseq_evict(&P, &S, keep, 16000, &st) == KVQ_OK, "evict every 10th");
    CHECK(st.blocks_freed == 0 && P.n_free == 0 && st.tokens_evicted == 14400,
          "scattered 90%% eviction: %zu blocks freed (expected: 0), gauge %zu, %zu evicted (expected: 14,400)",
          st.blocks_freed, P.n_free, st.tokens_evicted);
    CHECK(kvq_pseq_repack(&P, &S, kvq_pseq_private_start(&P, &S), &st) == KVQ_OK, "repack");
    live = live_consistent(&P, &S, &sorted, &pl_ok);
    CHECK(st.blocks_freed == 900 && P.n_free == 900 && S.n_blocks == 100,
          "repack freed %zu blocks (expected: 900), gauge %zu, %zu blocks held (expected: 100)",
          st.blocks_freed, P.n_free, S.n_blocks);
    all_tenth = 1;
    for (i = 0; i < S.n_slots; i++) all_tenth &= S.alive[i] && S.pos[i] == (int32_t)(10 * i);
    CHECK(live == 1600 && S.n_slots == 1600 && sorted && pl_ok && all_tenth,
          "repack keeps the 1,600 survivors dense and in order (live %zu, sorted %d)", live, sorted);
    kvq_pseq_free(&P, &S);
    CHECK(P.n_free == 1000, "freeing the sequence returns every block (%zu)", P.n_free);
    kvq_pages_free(&P);

    /* 4. one whole aligned block (tokens 32..47) frees exactly 1           */
    fill_seq(&P, &S, 1000, 16, 16000);
    for (i = 0; i < 16000; i++) keep[i] = !(i >= 32 && i < 48);
    CHECK(kvq_pseq_evict(&P, &S, keep, 16000, &st) == KVQ_OK && st.blocks_freed == 1 &&
          P.n_free == 1, "aligned block: %zu freed (expected: 1)", st.blocks_freed);
    kvq_pseq_free(&P, &S);
    kvq_pages_free(&P);

    /* 5. one survivor per block: 93.75% evicted, 0 freed                   */
    fill_seq(&P, &S, 1000, 16, 16000);
    for (i = 0; i < 16000; i++) keep[i] = i % 16 == 0;
    CHECK(kvq_pseq_evict(&P, &S, keep, 16000, &st) == KVQ_OK && st.blocks_freed == 0 &&
          st.tokens_evicted * 10000 == 9375 * (size_t)16000,
          "one survivor per block: %zu freed (expected: 0) at %.2f%% evicted (expected: 93.75%%)",
          st.blocks_freed, 100.0 * (double)st.tokens_evicted / 16000.0);
    CHECK(fabs(st.occupancy - 1.0 / 16.0) < 1e-12, "occupancy %.4f, expected 1/16", st.occupancy);
    kvq_pseq_free(&P, &S);
    kvq_pages_free(&P);

    /* 6. the toy: 6 blocks x 4 slots, history T0-T19, round T20-T23, evict
       T2, T9, T13, T21. Repack: 1 block, 18 copies; hole-filling: 1 block,
       3 copies, T20 in T2's slot, the same survivor set.                  */
    {
        static const size_t dead[4] = { 2, 9, 13, 21 };
        int strat;
        for (strat = 0; strat < 2; strat++) {
            int32_t seen[24];
            int set_ok = 1;
            fill_seq(&P, &S, 6, 4, 24);
            for (i = 0; i < 24; i++) keep[i] = 1;
            for (i = 0; i < 4; i++) keep[dead[i]] = 0;
            CHECK(kvq_pseq_evict(&P, &S, keep, 24, &st) == KVQ_OK && st.blocks_freed == 0,
                  "toy evict frees nothing on its own");
            if (strat == 0) {
                CHECK(kvq_pseq_repack(&P, &S, 0, &st) == KVQ_OK, "toy repack");
                CHECK(st.blocks_freed == 1 && st.slot_copies == 18,
                      "toy repack: %zu freed, %zu copies (expected: 1, 18)", st.blocks_freed, st.slot_copies);
            } else {
                CHECK(kvq_pseq_holefill(&P, &S, 0, 20, &st) == KVQ_OK, "toy holefill");
                CHECK(st.blocks_freed == 1 && st.slot_copies == 3,
                      "toy hole-fill: %zu freed, %zu copies (expected: 1, 3)", st.blocks_freed, st.slot_copies);
                CHECK(S.n_slots == 20 && S.pos[2] == 20 && *(int32_t *)kvq_pseq_slot(&P, &S, 2) == 20,
                      "hole-fill puts T20 in T2's slot (slot 2 holds T%d)", (int)S.pos[2]);
            }
            live = live_consistent(&P, &S, &sorted, &pl_ok);
            CHECK(sorted == (strat == 0) && pl_ok, "toy strategy %d: order %s, payloads %s", strat,
                  sorted ? "sorted" : "scrambled", pl_ok ? "ok" : "WRONG");
            /* the survivor set: T0..T23 minus the four, each exactly once  */
            for (i = 0; i < 24; i++) seen[i] = 0;
            for (i = 0; i < S.n_slots; i++)
                if (S.alive[i] && S.pos[i] >= 0 && S.pos[i] < 24) seen[S.pos[i]]++;
            for (i = 0; i < 24; i++) set_ok &= seen[i] == (keep[i] ? 1 : 0);
            CHECK(live == 20 && set_ok, "toy strategy %d keeps the 20 survivors once each", strat);
            CHECK(P.n_free == 1 && S.n_blocks == 5, "toy strategy %d: gauge %zu", strat, P.n_free);
            kvq_pseq_free(&P, &S);
            kvq_pages_free(&P);
        }
    }
    free(keep);
}

/* ======================================================================== */
/* 2. RANDOM OPERATION STREAMS vs THE MODEL                                 */
/* ======================================================================== */
/* Live (pos, tag) pairs of a sequence, sorted: the survivor set, which
   compaction must preserve whatever order it leaves behind.               */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static size_t survivor_set(const mseq *q, int with_tag, uint64_t *out)
{
    size_t i, m = 0;
    for (i = 0; i < q->n; i++)
        if (q->slot[i].alive)
            out[m++] = ((uint64_t)(uint32_t)q->slot[i].pos << 32) | (with_tag ? q->slot[i].tag : 0);
    qsort(out, m, sizeof *out, cmp_u64);
    return m;
}
/* The same from the real sequence (positions from pos[], tags from the
   payload bytes; none without a payload), not through the model.         */
static size_t survivor_set_real(const kvq_pages *P, const kvq_pseq *S, uint64_t *out)
{
    size_t i, m = 0;
    for (i = 0; i < S->n_slots; i++) {
        uint32_t tag = 0;
        if (!S->alive[i]) continue;
        if (P->slot_bytes) memcpy(&tag, kvq_pseq_slot(P, S, i), 4);
        out[m++] = ((uint64_t)(uint32_t)S->pos[i] << 32) | tag;
    }
    qsort(out, m, sizeof *out, cmp_u64);
    return m;
}

static const char *op_name[] = { "append", "fork", "evict", "repack", "holefill", "free" };

static void test_pages_random(void)
{
    rng r = { 0x9A6E5ull };
    size_t n_cases = QUICK ? 300 : 3000, cs;
    long n_ops = 0, n_fail_ops = 0, n_shared_refusals = 0, n_cow = 0;
    char msg[256];
    for (cs = 0; cs < n_cases; cs++) {
        size_t bt = 1 + rbelow(&r, 17), n_blocks = 1 + rbelow(&r, 48);
        size_t slot_bytes = (cs % 11 == 0) ? 0 : SLOT_BYTES, op, n_op = 20 + rbelow(&r, 60);
        int n_seq = 1 + (int)rbelow(&r, MAX_SEQ), si, ok = 1;
        kvq_pages P;
        kvq_pseq S[MAX_SEQ];
        model M;
        uint8_t *keep = NULL;
        uint64_t *set_a = NULL, *set_b = NULL;
        int32_t next_pos[MAX_SEQ];
        if (kvq_pages_init(&P, n_blocks, bt, slot_bytes) != KVQ_OK) { CHECK(0, "pages_init"); continue; }
        model_init(&M, n_blocks, bt);
        for (si = 0; si < MAX_SEQ; si++) { kvq_pseq_init(&S[si]); next_pos[si] = 0; }
        keep = (uint8_t *)xmalloc(n_blocks * bt + 1);
        set_a = (uint64_t *)xmalloc((n_blocks * bt + 1) * sizeof(uint64_t));
        set_b = (uint64_t *)xmalloc((n_blocks * bt + 1) * sizeof(uint64_t));
        for (op = 0; op < n_op && ok; op++) {
            int kind = (int)rbelow(&r, 16), dst;
            kvq_page_stats st;
            kvq_status got = KVQ_OK;
            expect e = { KVQ_OK, 0, 0, 0 };
            mseq *q;
            size_t nb_before, m_before;
            si = (int)rbelow(&r, (size_t)n_seq);
            q = &M.s[si];
            kind = kind < 6 ? 0 : kind < 8 ? 1 : kind < 11 ? 2 : kind < 13 ? 3 : kind < 15 ? 4 : 5;
            memset(&st, 0x5A, sizeof st);
            if (kind == 0) {                       /* a burst of appends     */
                size_t k, burst = 1 + rbelow(&r, 2 * bt + 2);
                for (k = 0; k < burst && ok; k++) {
                    unsigned char pl[SLOT_BYTES];
                    int32_t pos = next_pos[si];
                    int cow = q->n % bt && q->nb && M.ref[q->blk[q->nb - 1]] > 1;
                    slot_payload(pl, M.next_tag, pos);
                    e = model_append(&M, si, pos);
                    got = kvq_pseq_append(&P, &S[si], pos, pl);
                    if (got != e.st) break;
                    if (got == KVQ_OK) { next_pos[si]++; n_cow += cow; }
                    else { n_fail_ops++; break; }
                }
            } else if (kind == 1) {                /* fork into an empty one */
                /* (forking an EMPTY source is checked on its own, last in
                   main: it trips UBSan in kvq.h, see test_fork_empty)       */
                for (dst = 0; dst < n_seq && (M.s[dst].n || M.s[dst].nb); dst++) {}
                if (dst == n_seq || dst == si || q->nb == 0) continue;
                model_fork(&M, dst, si);
                next_pos[dst] = next_pos[si];
                got = kvq_pseq_fork(&P, &S[dst], &S[si]);
            } else if (kind == 2) {                /* evict a random mask    */
                size_t n_old = q->n;
                random_mask(&r, keep, n_old, bt);
                e = model_evict(&M, si, keep);
                got = kvq_pseq_evict(&P, &S[si], keep, n_old, &st);
            } else if (kind == 3 || kind == 4) {   /* compaction             */
                size_t first = model_private_start(&M, q), rs;
                size_t tweak = rbelow(&r, 8);
                if (tweak == 0) first = bt * rbelow(&r, q->nb + 2);        /* any aligned */
                else if (tweak == 1) first += 1 + rbelow(&r, bt);          /* misaligned  */
                rs = first + rbelow(&r, q->n + 2 > first ? q->n + 2 - first : 1);
                if (rbelow(&r, 3) == 0 && q->nb) rs = (q->nb - 1) * bt;     /* last block  */
                nb_before = q->nb;
                m_before = survivor_set(q, slot_bytes != 0, set_a);
                if (kind == 3) {
                    size_t sv = 0, i;
                    for (i = first; i < q->n; i++) sv += q->slot[i].alive;
                    e = model_repack(&M, si, first);
                    got = kvq_pseq_repack(&P, &S[si], first, &st);
                    if (got == KVQ_OK && e.st == KVQ_OK)
                        /* first is aligned, or == n (the empty range)  */
                        CHECK(S[si].n_blocks == ceil_div(first + sv, bt) &&
                              st.blocks_freed == nb_before - S[si].n_blocks,
                              "repack from %zu: %zu blocks held, expected ceil((%zu + %zu)/%zu)",
                              first, S[si].n_blocks, first, sv, bt);
                } else {
                    e = model_holefill(&M, si, first, rs);
                    got = kvq_pseq_holefill(&P, &S[si], first, rs, &st);
                }
                if (e.st == KVQ_ERR_STATE) n_shared_refusals++;
                if (got == KVQ_OK && e.st == KVQ_OK) {
                    /* the real survivor set after == the model's before */
                    size_t m_after = survivor_set_real(&P, &S[si], set_b);
                    CHECK(m_after == m_before && memcmp(set_a, set_b, m_after * sizeof(uint64_t)) == 0,
                          "%s: the survivor set changed", op_name[kind]);
                }
            } else {                               /* free a sequence        */
                model_release_all(&M, si);
                kvq_pseq_free(&P, &S[si]);
                next_pos[si] = 0;
                got = KVQ_OK;
            }
            n_ops++;
            if (got != e.st) {
                CHECK(0, "case %zu op %zu (%s, bt %zu, %zu blocks): status %d, model %d (%s)",
                      cs, op, op_name[kind], bt, n_blocks, (int)got, (int)e.st, kvq_why());
                ok = 0;
                break;
            }
            if (got != KVQ_OK) n_fail_ops++;
            if (got == KVQ_OK && kind >= 2 && kind <= 4 && !stats_match(&st, &e, &S[si], bt)) {
                CHECK(0, "case %zu op %zu (%s, bt %zu): stats freed %zu copies %zu evicted %zu "
                      "occupancy %.4f; model %zu %zu %zu", cs, op, op_name[kind], bt,
                      st.blocks_freed, st.slot_copies, st.tokens_evicted, st.occupancy,
                      e.freed, e.copies, e.evicted);
                ok = 0;
            }
            if (!pages_agree(&P, S, n_seq, &M, msg, sizeof msg)) {
                CHECK(0, "case %zu op %zu (%s, bt %zu, %zu blocks): %s", cs, op, op_name[kind],
                      bt, n_blocks, msg);
                ok = 0;
            }
        }
        if (ok) CHECK(1, "case");
        for (si = 0; si < MAX_SEQ; si++) kvq_pseq_free(&P, &S[si]);
        CHECK(P.n_free == n_blocks, "case %zu: after freeing every sequence the gauge is %zu of %zu",
              cs, P.n_free, n_blocks);
        kvq_pages_free(&P);
        model_free(&M);
        free(keep); free(set_a); free(set_b);
    }
    CHECK(ta_live == 0, "allocator streams leaked %ld blocks", ta_live);
    CHECK(n_cow > (long)n_cases / 30 && n_shared_refusals > (long)n_cases / 100, "coverage: %ld copy-on-write appends, %ld shared "
          "refusals", n_cow, n_shared_refusals);
    printf("  pages: %zu random streams, %ld operations (%ld refused as the model predicted), "
           "%ld copy-on-write appends\n", n_cases, n_ops, n_fail_ops, n_cow);
}

/* ======================================================================== */
/* 3. BAD INPUT TO THE ALLOCATOR CHANGES NOTHING                            */
/* ======================================================================== */
/* Everything observable about a pool and its sequences, as one byte string:
   the gauge, refcounts, the free list, the data, and each sequence's
   table, alive flags and positions.                                        */
typedef struct { unsigned char *b; size_t n, cap; } bytes;
static void put(bytes *x, const void *p, size_t n)
{
    if (x->n + n > x->cap) {
        x->cap = 2 * (x->n + n) + 64;
        x->b = (unsigned char *)realloc(x->b, x->cap);
        if (!x->b) { printf("out of memory\n"); exit(2); }
    }
    if (n) memcpy(x->b + x->n, p, n);
    x->n += n;
}
static bytes pages_snap(const kvq_pages *P, const kvq_pseq *S, int n_seq)
{
    bytes x = { NULL, 0, 0 };
    int i;
    put(&x, &P->n_free, sizeof P->n_free);
    put(&x, P->refcount, P->n_blocks * sizeof(uint32_t));
    put(&x, P->free_list, P->n_free * sizeof(uint32_t));
    if (P->data) put(&x, P->data, P->n_blocks * P->block_tokens * P->slot_bytes);
    for (i = 0; i < n_seq; i++) {
        put(&x, &S[i].n_blocks, sizeof(size_t));
        put(&x, &S[i].n_slots, sizeof(size_t));
        put(&x, S[i].table, S[i].n_blocks * sizeof(uint32_t));
        put(&x, S[i].alive, S[i].n_slots);
        put(&x, S[i].pos, S[i].n_slots * sizeof(int32_t));
    }
    return x;
}
static int snap_equal(const bytes *a, const bytes *b)
{
    return a->n == b->n && memcmp(a->b, b->b, a->n) == 0;
}
/* A pool of 8 blocks of 4 with A = 10 slots and B = fork(A) + 3 appends:
   blocks 0-1 shared; A's block 2, B's copy of it (copy on write) and B's
   fourth block private: 5 blocks held, 3 free.                            */
static void shared_pair(kvq_pages *P, kvq_pseq *S)
{
    int32_t p;
    int ok = kvq_pages_init(P, 8, 4, 4) == KVQ_OK;
    kvq_pseq_init(&S[0]); kvq_pseq_init(&S[1]);
    for (p = 0; p < 10 && ok; p++) ok = kvq_pseq_append(P, &S[0], p, &p) == KVQ_OK;
    ok = ok && kvq_pseq_fork(P, &S[1], &S[0]) == KVQ_OK;
    for (p = 10; p < 13 && ok; p++) ok = ok && kvq_pseq_append(P, &S[1], p, &p) == KVQ_OK;
    CHECK(ok && P->n_free == 3, "building the shared pair (gauge %zu)", P->n_free);
}

static void test_pages_bad_input(void)
{
    kvq_pages P, Q;
    kvq_pseq S[3];
    bytes before, after;
    uint8_t keep[32];
    int32_t x = 7;
    kvq_page_stats st;
    size_t i;
    kvq_status got;

    /* init: NULL, zero sizes; P keeps every poisoned byte                  */
    memset(&Q, 0xA5, sizeof Q);
    CHECK(kvq_pages_init(NULL, 4, 4, 4) == KVQ_ERR_NULL, "pages_init(NULL)");
    CHECK(kvq_pages_init(&Q, 0, 4, 4) == KVQ_ERR_SIZE, "n_blocks 0");
    CHECK(kvq_pages_init(&Q, 4, 0, 4) == KVQ_ERR_SIZE, "block size 0");
    CHECK(kvq_pages_init(&Q, (size_t)1 << 40, (size_t)1 << 40, 4) != KVQ_OK, "overflowing pool");
    {
        const unsigned char *b = (const unsigned char *)&Q;
        int same = 1;
        for (i = 0; i < sizeof Q; i++) same &= b[i] == 0xA5;
        CHECK(same, "failed pages_init wrote into the pool struct");
    }

    shared_pair(&P, S);
    kvq_pseq_init(&S[2]);
    before = pages_snap(&P, S, 3);
#define UNCHANGED(what)                                                       \
    do { after = pages_snap(&P, S, 3);                                        \
         CHECK(snap_equal(&before, &after), "%s changed the pool", what);     \
         free(after.b); } while (0)
    for (i = 0; i < sizeof keep; i++) keep[i] = (uint8_t)(i % 3 != 0);
    /* NULLs                                                                */
    CHECK(kvq_pseq_append(NULL, &S[0], 0, NULL) == KVQ_ERR_NULL, "append NULL pool");
    CHECK(kvq_pseq_append(&P, NULL, 0, NULL) == KVQ_ERR_NULL, "append NULL seq");
    CHECK(kvq_pseq_evict(&P, &S[0], NULL, 10, &st) == KVQ_ERR_NULL, "evict NULL keep");
    CHECK(kvq_pseq_evict(NULL, &S[0], keep, 10, &st) == KVQ_ERR_NULL, "evict NULL pool");
    CHECK(kvq_pseq_repack(&P, NULL, 0, &st) == KVQ_ERR_NULL, "repack NULL seq");
    CHECK(kvq_pseq_holefill(NULL, &S[0], 0, 0, &st) == KVQ_ERR_NULL, "holefill NULL pool");
    CHECK(kvq_pseq_fork(&P, NULL, &S[0]) == KVQ_ERR_NULL, "fork NULL dst");
    CHECK(kvq_pseq_fork(&P, &S[2], NULL) == KVQ_ERR_NULL, "fork NULL src");
    CHECK(kvq_pseq_slot(&P, &S[0], 10) == NULL && kvq_pseq_slot(NULL, &S[0], 0) == NULL,
          "slot past the end / NULL pool gives NULL");
    CHECK(kvq_pseq_private_start(NULL, &S[0]) == 0, "private_start(NULL)");
    UNCHANGED("NULL arguments");
    /* masks of the wrong length                                            */
    CHECK(kvq_pseq_evict(&P, &S[0], keep, 9, &st) == KVQ_ERR_SIZE, "short mask");
    CHECK(kvq_pseq_evict(&P, &S[0], keep, 11, &st) == KVQ_ERR_SIZE, "long mask");
    UNCHANGED("a mask of the wrong length");
    /* negative position                                                    */
    CHECK(kvq_pseq_append(&P, &S[0], -1, &x) == KVQ_ERR_SIZE, "negative position");
    UNCHANGED("a negative position");
    /* compaction ranges: misaligned, past the end, first > round_start     */
    CHECK(kvq_pseq_repack(&P, &S[0], 9, &st) == KVQ_ERR_SIZE, "repack misaligned");
    CHECK(kvq_pseq_repack(&P, &S[0], 12, &st) == KVQ_ERR_SIZE, "repack past the end");
    CHECK(kvq_pseq_holefill(&P, &S[0], 9, 10, &st) == KVQ_ERR_SIZE, "holefill misaligned");
    CHECK(kvq_pseq_holefill(&P, &S[0], 8, 11, &st) == KVQ_ERR_SIZE, "holefill round past the end");
    CHECK(kvq_pseq_holefill(&P, &S[0], 8, 6, &st) == KVQ_ERR_SIZE, "holefill first > round_start");
    UNCHANGED("a bad compaction range");
    /* compaction over a shared block: STATE, nothing moved, with dead
       slots present so that a repack would have had work to do            */
    {
        uint8_t k0[10];
        for (i = 0; i < 10; i++) k0[i] = i != 1;
        CHECK(kvq_pseq_evict(&P, &S[0], k0, 10, &st) == KVQ_OK && st.blocks_freed == 0,
              "evict one shared slot");
        free(before.b);
        before = pages_snap(&P, S, 3);
        got = kvq_pseq_repack(&P, &S[0], 0, &st);
        CHECK(got == KVQ_ERR_STATE && kvq_why()[0], "repack over a shared block: %d", (int)got);
        got = kvq_pseq_holefill(&P, &S[0], 0, 8, &st);
        CHECK(got == KVQ_ERR_STATE, "holefill over a shared block: %d", (int)got);
        got = kvq_pseq_holefill(&P, &S[1], 4, 8, &st);
        CHECK(got == KVQ_ERR_STATE, "holefill from the second shared block: %d", (int)got);
        UNCHANGED("compaction over a shared block");
        /* from the private start it is allowed, and touches only A's tail */
        CHECK(kvq_pseq_private_start(&P, &S[0]) == 8 && kvq_pseq_repack(&P, &S[0], 8, &st) == KVQ_OK,
              "repack from the private start");
    }
    /* fork into a non-empty sequence, or into itself                      */
    free(before.b);
    before = pages_snap(&P, S, 3);
    CHECK(kvq_pseq_fork(&P, &S[1], &S[0]) == KVQ_ERR_STATE, "fork into a non-empty sequence");
    CHECK(kvq_pseq_fork(&P, &S[0], &S[0]) == KVQ_ERR_STATE, "fork into itself");
    UNCHANGED("a refused fork");
    /* full pool: appends that need a block (new or copy-on-write) fail    */
    {
        int32_t p = 100;
        kvq_status a = KVQ_OK;
        while (P.n_free > 0 && a == KVQ_OK) a = kvq_pseq_append(&P, &S[2], p, &p), p++;
        CHECK(a == KVQ_OK && P.n_free == 0, "filling the pool");
        while (S[2].n_slots % 4 && a == KVQ_OK) a = kvq_pseq_append(&P, &S[2], p, &p), p++;
        free(before.b);
        before = pages_snap(&P, S, 3);
        CHECK(kvq_pseq_append(&P, &S[2], p, &p) == KVQ_ERR_CAPACITY && kvq_why()[0], "append to a full pool");
        kvq_pseq_free(&P, &S[2]);           /* then a fork whose tail is shared */
        CHECK(kvq_pseq_fork(&P, &S[2], &S[0]) == KVQ_OK, "fork");
        while (P.n_free > 0 && a == KVQ_OK) a = kvq_pseq_append(&P, &S[1], p, &p), p++;
        free(before.b);
        before = pages_snap(&P, S, 3);
        if (S[0].n_slots % 4) {
            got = kvq_pseq_append(&P, &S[0], p, &p);
            CHECK(got == KVQ_ERR_CAPACITY, "copy-on-write into a full pool: %d", (int)got);
        }
        UNCHANGED("an append into a full pool");
    }
    free(before.b);
#undef UNCHANGED
    for (i = 0; i < 3; i++) kvq_pseq_free(&P, &S[i]);
    CHECK(P.n_free == P.n_blocks, "every block back after freeing (%zu of %zu)", P.n_free, P.n_blocks);
    kvq_pages_free(&P);

    /* A fully shared sequence (a fork with no appends since) whose length
       is not a multiple of the block size: the private part is empty, so
       repack from kvq_pseq_private_start must be a successful no-op.      */
    {
        int32_t p;
        int ok = kvq_pages_init(&P, 4, 4, 4) == KVQ_OK;
        kvq_pseq_init(&S[0]); kvq_pseq_init(&S[1]);
        for (p = 0; p < 6 && ok; p++) ok = kvq_pseq_append(&P, &S[0], p, &p) == KVQ_OK;
        ok = ok && kvq_pseq_fork(&P, &S[1], &S[0]) == KVQ_OK;
        CHECK(ok, "fork of 6 slots");
        before = pages_snap(&P, S, 2);
        i = kvq_pseq_private_start(&P, &S[1]);
        got = kvq_pseq_repack(&P, &S[1], i, &st);
        CHECK(got == KVQ_OK, "repack(private_start = %zu) of a fully shared 6-slot sequence "
              "(block 4): status %d (%s)", i, (int)got, kvq_why());
        after = pages_snap(&P, S, 2);
        CHECK(snap_equal(&before, &after), "the no-op repack changed the pool");
        free(before.b); free(after.b);
        kvq_pseq_free(&P, &S[0]); kvq_pseq_free(&P, &S[1]);
        kvq_pages_free(&P);
    }
    CHECK(ta_live == 0, "bad-input group leaked %ld blocks", ta_live);
}

/* ======================================================================== */
/* 4. ALLOCATION FAILURE: NOMEM, no leak, nothing changed                   */
/* ======================================================================== */
static void test_pages_alloc_failure(void)
{
    long injected = 0, k;
    kvq_pages P;
    kvq_pseq S[2];
    int32_t p;
    /* kvq_pages_init failing at each of its allocations                    */
    for (k = 0; ; k++) {
        long base = ta_calls;
        kvq_status st;
        memset(&P, 0xA5, sizeof P);
        ta_fail_at = base + k;
        st = kvq_pages_init(&P, 16, 5, sizeof(int32_t));
        ta_fail_at = -1;
        if (ta_calls - base <= k) { CHECK(st == KVQ_OK, "pages_init: %d", (int)st); break; }
        injected++;
        CHECK(st == KVQ_ERR_NOMEM && ta_live == 0, "pages_init, allocation %ld fails: %d, %ld live",
              k, (int)st, ta_live);
    }
    /* appends (the block table grows) and forks, each allocation failing  */
    kvq_pseq_init(&S[0]); kvq_pseq_init(&S[1]);
    for (p = 0; p < 70; p++) {
        int which = p % 10 == 9;                 /* now and then: a fork    */
        bytes before = pages_snap(&P, S, 2), after;
        for (k = 0; ; k++) {
            long base = ta_calls;
            kvq_status st;
            ta_fail_at = base + k;
            if (which) { kvq_pseq_free(&P, &S[1]); free(before.b); before = pages_snap(&P, S, 2);
                         st = kvq_pseq_fork(&P, &S[1], &S[0]); }
            else st = kvq_pseq_append(&P, &S[0], p, &p);
            ta_fail_at = -1;
            if (ta_calls - base <= k) { CHECK(st == KVQ_OK, "op %d: %d", (int)p, (int)st); break; }
            injected++;
            after = pages_snap(&P, S, 2);
            CHECK(st == KVQ_ERR_NOMEM && snap_equal(&before, &after),
                  "op %d (%s), allocation %ld fails: %d, state %s", (int)p,
                  which ? "fork" : "append", k, (int)st, snap_equal(&before, &after) ? "same" : "CHANGED");
            free(after.b);
        }
        free(before.b);
    }
    kvq_pseq_free(&P, &S[0]); kvq_pseq_free(&P, &S[1]);
    CHECK(P.n_free == P.n_blocks, "gauge after the failure stream: %zu", P.n_free);
    kvq_pages_free(&P);
    CHECK(ta_live == 0 && !ta_broken, "allocation-failure group leaked %ld blocks", ta_live);
    CHECK(injected >= 10, "only %ld failures injected", injected);
    printf("  pages allocator: %ld failures injected\n", injected);
}

/* ======================================================================== */
/* 5. EVICTION POLICIES vs DIRECT REFERENCES                                */
/* ======================================================================== */
/* The references are written from the policies' definitions (the papers and
   the kvq.h Sec. 11 doc) in the plainest way: list the candidates, sort
   them fully with qsort by (score descending, position ascending), take a
   prefix. Scores compare numerically, so -0 and +0 are a tie.            */
static const float *g_score;
static int cmp_heavy(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (g_score[i] > g_score[j]) return -1;
    if (g_score[i] < g_score[j]) return 1;
    return i < j ? -1 : i > j;                      /* tie: older first     */
}
/* keep the `count` best of cand[0..m) (positions) by score               */
static void ref_top(const float *score, size_t *cand, size_t m, size_t count, uint8_t *keep)
{
    size_t i;
    g_score = score;
    qsort(cand, m, sizeof *cand, cmp_heavy);
    for (i = 0; i < m && i < count; i++) keep[cand[i]] = 1;
}
/* StreamingLLM: the first `sinks` and the last `recent` present positions */
static void ref_streaming(const uint8_t *present, size_t n, size_t sinks, size_t recent, uint8_t *keep)
{
    size_t p, m = 0, *idx = (size_t *)xmalloc(n * sizeof(size_t)), i;
    for (p = 0; p < n; p++) { keep[p] = 0; if (!present || present[p]) idx[m++] = p; }
    for (i = 0; i < m; i++) if (i < sinks || i + recent >= m) keep[idx[i]] = 1;
    free(idx);
}
/* H2O: the `recent` last present positions, then the `heavy` best of the
   other present positions                                                 */
static void ref_h2o(const float *score, const uint8_t *present, size_t n, size_t heavy,
                    size_t recent, uint8_t *keep)
{
    size_t p, m = 0, *idx = (size_t *)xmalloc(n * sizeof(size_t)), i, c = 0;
    for (p = 0; p < n; p++) { keep[p] = 0; if (present[p]) idx[m++] = p; }
    for (i = 0; i < m; i++) {
        if (i + recent >= m) keep[idx[i]] = 1;
        else idx[c++] = idx[i];                     /* a heavy candidate    */
    }
    ref_top(score, idx, c, heavy, keep);
    free(idx);
}
/* SnapKV scores in double: votes of the n_obs window rows over the prefix,
   pooled with zero padding (AVG divides by the kernel), window = +Inf.    */
static void ref_snapkv_scores(const float *probs, size_t n_obs, size_t n, size_t kernel,
                              kvq_pooling pool, double *out)
{
    size_t pre = n - n_obs, p, i;
    long half = (long)kernel / 2, j;
    double *vote = (double *)xmalloc((pre + 1) * sizeof(double));
    for (p = 0; p < pre; p++) {
        vote[p] = 0.0;
        for (i = 0; i < n_obs; i++) vote[p] += probs[i * n + p];
    }
    for (p = 0; p < pre; p++) {
        double acc = pool == KVQ_POOL_MAX ? -INFINITY : 0.0;
        for (j = (long)p - half; j <= (long)p + half; j++) {
            double v = (j < 0 || j >= (long)pre) ? 0.0 : vote[j];    /* padding */
            if (pool == KVQ_POOL_MAX) acc = v > acc ? v : acc;
            else acc += v;
        }
        out[p] = pool == KVQ_POOL_MAX ? acc : acc / (double)kernel;
    }
    for (p = pre; p < n; p++) out[p] = INFINITY;
    free(vote);
}
static void ref_snapkv_keep(const float *score, size_t n, size_t n_obs, size_t cap, uint8_t *keep)
{
    size_t p, *idx = (size_t *)xmalloc(n * sizeof(size_t)), pre = n - n_obs;
    for (p = 0; p < n; p++) { keep[p] = p >= pre; idx[p] = p; }
    ref_top(score, idx, pre, cap - n_obs, keep);
    free(idx);
}

/* A random score vector: 0 N(0,1); 1 four levels (many ties, +0 and 0.25
   steps); 2 N(0,1) with +-Inf and huge values sprinkled in.              */
static void random_scores(rng *r, float *s, size_t n)
{
    size_t kind = rbelow(r, 3), p;
    for (p = 0; p < n; p++) {
        if (kind == 1) s[p] = 0.25f * (float)rbelow(r, 4);
        else s[p] = rnorm(r);
        if (kind == 2 && rbelow(r, 8) == 0) {
            static const float odd[] = { INFINITY, -INFINITY, 3e38f, -3e38f, 1e-40f };
            s[p] = odd[rbelow(r, 5)];
        }
    }
}
/* Causal attention rows of the last n_obs queries of an n-token prompt:
   row i may look at positions 0..n-n_obs+i; values are either random
   softmax-like weights or a few levels (tied votes).                      */
static void random_probs(rng *r, float *probs, size_t n_obs, size_t n)
{
    size_t i, p, lv = rbelow(r, 2);
    for (i = 0; i < n_obs; i++) {
        size_t last = n - n_obs + i;
        double sum = 0.0;
        for (p = 0; p < n; p++) {
            float v = p > last ? 0.0f : lv ? 0.125f * (float)rbelow(r, 3) : (float)exp(2.0 * rnorm(r));
            probs[i * n + p] = v;
            sum += v;
        }
        if (!lv && sum > 0) for (p = 0; p <= last; p++) probs[i * n + p] = (float)(probs[i * n + p] / sum);
    }
}

static void test_policies(void)
{
    rng r = { 0x9011C1ull };
    size_t trial, n_trials = QUICK ? 300 : 3000;
    size_t bad_stream = 0, bad_h2o = 0, bad_acc = 0, bad_snap = 0, bad_sk = 0;
    for (trial = 0; trial < n_trials; trial++) {
        size_t n = 1 + rbelow(&r, trial % 5 == 0 ? 400 : 40), p, h;
        size_t nq = 1 + rbelow(&r, 4), n_obs = 1 + rbelow(&r, n);
        size_t a = rbelow(&r, n + 4), b = rbelow(&r, n + 4), kernel = 2 * rbelow(&r, 8) + 1;
        kvq_pooling pool = rbelow(&r, 2) ? KVQ_POOL_MAX : KVQ_POOL_AVG;
        double rate = runif(&r);
        uint8_t *present = (uint8_t *)xmalloc(n), *keep = (uint8_t *)xmalloc(n), *ref = (uint8_t *)xmalloc(n);
        float *score = (float *)xmalloc(n * sizeof(float)), *acc = (float *)xmalloc(n * sizeof(float));
        float *probs = (float *)xmalloc(nq * n * sizeof(float) + n * n * sizeof(float));
        double *dref = (double *)xmalloc(n * sizeof(double));
        for (p = 0; p < n; p++) present[p] = runif(&r) >= rate * 0.8;
        if (trial % 7 == 0) kernel = 1;
        /* StreamingLLM, with a presence mask and with NULL (all present)   */
        CHECK(kvq_evict_streaming(present, n, a, b, keep) == KVQ_OK, "streaming");
        ref_streaming(present, n, a, b, ref);
        bad_stream += memcmp(keep, ref, n) != 0;
        CHECK(kvq_evict_streaming(NULL, n, a, b, keep) == KVQ_OK, "streaming, all present");
        ref_streaming(NULL, n, a, b, ref);
        bad_stream += memcmp(keep, ref, n) != 0;
        /* H2O accumulation over n_q query heads, then selection            */
        random_scores(&r, score, n);
        for (p = 0; p < n; p++) score[p] = fabsf(score[p]) < 1e30f ? fabsf(score[p]) : 1.0f;
        for (h = 0; h < nq * n; h++) probs[h] = (float)runif(&r) * (rbelow(&r, 4) != 0);
        memcpy(acc, score, n * sizeof(float));
        CHECK(kvq_h2o_accumulate(acc, probs, nq, n) == KVQ_OK, "h2o_accumulate");
        for (p = 0; p < n; p++) {
            double want = score[p], mag = fabs(score[p]);
            for (h = 0; h < nq; h++) { want += probs[h * n + p]; mag += probs[h * n + p]; }
            bad_acc += fabs((double)acc[p] - want) > 4e-7 * mag;   /* n_q + 1 fp32 roundings */
        }
        random_scores(&r, score, n);
        CHECK(kvq_evict_h2o(score, present, n, a, b, keep) == KVQ_OK, "evict_h2o");
        ref_h2o(score, present, n, a, b, ref);
        bad_h2o += memcmp(keep, ref, n) != 0;
        /* SnapKV scores vs the double reference, then the selection on
           kvq's own scores and on random tied scores                       */
        random_probs(&r, probs, n_obs, n);
        CHECK(kvq_snapkv_scores(probs, n_obs, n, kernel, pool, score) == KVQ_OK, "snapkv_scores");
        ref_snapkv_scores(probs, n_obs, n, kernel, pool, dref);
        for (p = 0; p < n; p++) {
            if (p >= n - n_obs) bad_snap += !(isinf(score[p]) && score[p] > 0);
            else bad_snap += fabs((double)score[p] - dref[p]) > 1e-6 * (1.0 + (double)n_obs);
        }
        {
            size_t cap = n_obs + rbelow(&r, n + 3);
            CHECK(kvq_evict_snapkv(score, n, n_obs, cap, keep) == KVQ_OK, "evict_snapkv");
            ref_snapkv_keep(score, n, n_obs, cap, ref);
            bad_sk += memcmp(keep, ref, n) != 0;
            random_scores(&r, score, n);
            CHECK(kvq_evict_snapkv(score, n, n_obs, cap, keep) == KVQ_OK, "evict_snapkv, random scores");
            ref_snapkv_keep(score, n, n_obs, cap, ref);
            bad_sk += memcmp(keep, ref, n) != 0;
        }
        free(present); free(keep); free(ref); free(score); free(acc); free(probs); free(dref);
    }
    CHECK(bad_stream == 0, "StreamingLLM differs from the reference in %zu masks", bad_stream);
    CHECK(bad_acc == 0, "H2O accumulation off in %zu entries", bad_acc);
    CHECK(bad_h2o == 0, "H2O selection differs from the full-sort reference in %zu masks", bad_h2o);
    CHECK(bad_snap == 0, "SnapKV scores off in %zu entries", bad_snap);
    CHECK(bad_sk == 0, "SnapKV selection differs from the full-sort reference in %zu masks", bad_sk);
    printf("  policies: %zu random traces each for StreamingLLM, H2O, SnapKV\n", n_trials);

    /* A hand-checkable SnapKV trace: 1 observation row over 6 tokens, votes
       (1, 0, 2, 0, 0 | w): avg kernel 3 -> (1/3, 1, 2/3, 2/3, 0); max ->
       (1, 2, 2, 2, 0); window +Inf.                                       */
    {
        static const float pr[6] = { 1, 0, 2, 0, 0, 0 };
        static const float avg[5] = { 1.0f / 3, 1, 2.0f / 3, 2.0f / 3, 0 }, mx[5] = { 1, 2, 2, 2, 0 };
        float sc[6];
        int ok = 1, i;
        CHECK(kvq_snapkv_scores(pr, 1, 6, 3, KVQ_POOL_AVG, sc) == KVQ_OK, "snapkv hand trace");
        for (i = 0; i < 5; i++) ok &= fabsf(sc[i] - avg[i]) < 1e-6f;
        CHECK(ok && isinf(sc[5]), "snapkv avg pooling by hand: %g %g %g %g %g", sc[0], sc[1], sc[2], sc[3], sc[4]);
        CHECK(kvq_snapkv_scores(pr, 1, 6, 3, KVQ_POOL_MAX, sc) == KVQ_OK, "snapkv hand trace max");
        for (i = 0, ok = 1; i < 5; i++) ok &= sc[i] == mx[i];
        CHECK(ok, "snapkv max pooling by hand: %g %g %g %g %g", sc[0], sc[1], sc[2], sc[3], sc[4]);
    }
    /* Ties between -0 and +0 are ties: the older position wins.            */
    {
        float sc[2];
        uint8_t pr[2] = { 1, 1 }, kp[2];
        sc[0] = -0.0f; sc[1] = 0.0f;
        CHECK(kvq_evict_h2o(sc, pr, 2, 1, 0, kp) == KVQ_OK && kp[0] == 1 && kp[1] == 0,
              "H2O with scores (-0, +0), one heavy slot: kept (%d, %d), a tie should keep "
              "the older position 0", kp[0], kp[1]);
    }
}

static int all_byte(const void *p, size_t n, unsigned char v)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) if (b[i] != v) return 0;
    return 1;
}

/* Bad input: the documented status, and not one output byte written.     */
static void test_policies_bad_input(void)
{
    float score[8], probs[64], out[8];
    uint8_t present[8], keep[8];
    size_t i;
    for (i = 0; i < 8; i++) { score[i] = (float)i; present[i] = 1; }
    for (i = 0; i < 64; i++) probs[i] = 0.1f;
    memset(keep, 0xA5, sizeof keep);
    memset(out, 0xA5, sizeof out);
    CHECK(kvq_evict_streaming(present, 8, 1, 1, NULL) == KVQ_ERR_NULL, "streaming NULL keep");
    CHECK(kvq_evict_streaming(present, 0, 1, 1, keep) == KVQ_ERR_SIZE, "streaming n 0");
    CHECK(kvq_evict_h2o(NULL, present, 8, 1, 1, keep) == KVQ_ERR_NULL, "h2o NULL score");
    CHECK(kvq_evict_h2o(score, present, 0, 1, 1, keep) == KVQ_ERR_SIZE, "h2o n 0");
    score[3] = NAN;
    CHECK(kvq_evict_h2o(score, present, 8, 1, 1, keep) == KVQ_ERR_NONFINITE, "h2o NaN score");
    CHECK(kvq_evict_snapkv(score, 8, 2, 4, keep) == KVQ_ERR_NONFINITE, "snapkv NaN score");
    score[3] = 3.0f;
    CHECK(kvq_evict_snapkv(score, 8, 9, 9, keep) == KVQ_ERR_SIZE, "snapkv n_obs > n");
    CHECK(kvq_evict_snapkv(score, 8, 0, 4, keep) == KVQ_ERR_SIZE, "snapkv n_obs 0");
    CHECK(kvq_evict_snapkv(score, 8, 4, 3, keep) == KVQ_ERR_SIZE, "snapkv capacity < n_obs");
    CHECK(all_byte(keep, sizeof keep, 0xA5), "a failed selection wrote keep");
    /* accumulate: NULL, zero sizes, NaN / negative / Inf probabilities      */
    memcpy(out, score, sizeof out);
    CHECK(kvq_h2o_accumulate(NULL, probs, 1, 8) == KVQ_ERR_NULL, "accumulate NULL score");
    CHECK(kvq_h2o_accumulate(out, probs, 0, 8) == KVQ_ERR_SIZE, "accumulate n_q 0");
    probs[13] = NAN;
    CHECK(kvq_h2o_accumulate(out, probs, 2, 8) == KVQ_ERR_NONFINITE, "accumulate NaN");
    probs[13] = -0.5f;
    CHECK(kvq_h2o_accumulate(out, probs, 2, 8) == KVQ_ERR_NONFINITE, "accumulate negative");
    probs[13] = INFINITY;
    CHECK(kvq_h2o_accumulate(out, probs, 2, 8) == KVQ_ERR_NONFINITE, "accumulate Inf");
    CHECK(memcmp(out, score, sizeof out) == 0, "a failed accumulate changed the scores");
    probs[13] = 0.1f;
    /* SnapKV scores: kernel even or 0, n_obs > n or 0, NaN, bad pooling     */
    memset(out, 0xA5, sizeof out);
    CHECK(kvq_snapkv_scores(probs, 2, 8, 4, KVQ_POOL_AVG, out) == KVQ_ERR_SIZE, "even kernel");
    CHECK(kvq_snapkv_scores(probs, 2, 8, 0, KVQ_POOL_AVG, out) == KVQ_ERR_SIZE, "kernel 0");
    CHECK(kvq_snapkv_scores(probs, 9, 8, 3, KVQ_POOL_AVG, out) == KVQ_ERR_SIZE, "n_obs > n");
    CHECK(kvq_snapkv_scores(probs, 0, 8, 3, KVQ_POOL_AVG, out) == KVQ_ERR_SIZE, "n_obs 0");
    CHECK(kvq_snapkv_scores(probs, 2, 8, 3, (kvq_pooling)7, out) == KVQ_ERR_CONFIG, "bad pooling");
    CHECK(kvq_snapkv_scores(NULL, 2, 8, 3, KVQ_POOL_AVG, out) == KVQ_ERR_NULL, "NULL probs");
    probs[9] = NAN;
    CHECK(kvq_snapkv_scores(probs, 2, 8, 3, KVQ_POOL_AVG, out) == KVQ_ERR_NONFINITE, "NaN probs");
    CHECK(all_byte(out, sizeof out, 0xA5), "a failed snapkv_scores wrote score");
}

/* ======================================================================== */
/* 6. EVICTION AND COMPACTION ON REAL CACHES                                */
/* ======================================================================== */
#define CD 16                      /* head dimension of the cache tests      */
#define NQ 2                       /* query heads sharing the KV head        */

static kvq_config cache_config(int which, const char **name)
{
    kvq_config cfg;
    kvq_hf_params hp;
    switch (which) {
    case 0: *name = "FULL fp32"; return kvq_config_full(CD, 32);
    case 1: *name = "KIVI 2-bit G=4 R=8";
        cfg = kvq_config_kivi(CD, 2); cfg.group = 4; cfg.residual = 8; return cfg;
    case 2: *name = "HF 4-bit G=8 R=4";
        hp = kvq_hf_defaults(4); hp.q_group_size = 8; hp.residual_length = 4;
        return kvq_config_hf(CD, hp);
    default: *name = "HF 2-bit per-channel keys G=4 R=8, no requantize";
        hp = kvq_hf_defaults(2); hp.q_group_size = 4; hp.residual_length = 8;
        hp.axis_key = KVQ_PER_CHANNEL;
        cfg = kvq_config_hf(CD, hp); cfg.hf_requantize = 0; return cfg;
    }
}

/* Every row the cache holds, read back: rows (2, n_pos, D), have (n_pos). */
static void read_all(const kvq_cache *c, float *rows, uint8_t *have)
{
    size_t p, n = c->n_pos;
    for (p = 0; p < n; p++) {
        int k = kvq_cache_read(c, 0, p, rows + p * CD) == KVQ_OK;
        int v = kvq_cache_read(c, 1, p, rows + (n + p) * CD) == KVQ_OK;
        have[p] = (uint8_t)(k && v);
        if (k != v) have[p] = 2;                        /* K and V disagree */
    }
}

/* Do positions 0..n-1 that `want` marks read back bit-identically in two
   read_all snapshots a (taken at n_a positions) and b (at n_b)?          */
static int rows_same(const uint8_t *want, size_t n, const float *a, size_t n_a,
                     const float *b, size_t n_b)
{
    size_t p, rb = CD * sizeof(float);
    for (p = 0; p < n; p++)
        if (want[p] && (memcmp(a + p * CD, b + p * CD, rb) ||
                        memcmp(a + (n_a + p) * CD, b + (n_b + p) * CD, rb)))
            return 0;
    return 1;
}

/* kvq_attend into out (NQ, D) and probs (NQ, n_pos) (EAGER only).         */
static kvq_status attend(const kvq_cache *c, const float *q, float *out, float *probs,
                         kvq_attn_mode mode)
{
    size_t n = kvq_attend_scratch_floats(c, mode);
    float *scratch = (float *)xmalloc((n + 1) * sizeof(float));
    kvq_status st = kvq_attend(c, q, NQ, out, probs, mode, scratch, n);
    free(scratch);
    return st;
}

/* Attention over the cache vs kvq_attend_dense over the present rows read
   back: the survivors as the cache holds them. Tolerance (as in
   tests/test_cache.c): 1e-4 relative to max|out| for outputs (the cache's
   fp32 scores carry ~D 2^-24 relative error, the dense oracle is double),
   1e-5 absolute for probabilities; evicted positions' probs exactly 0.    */
static int attention_matches(const kvq_cache *c, const float *rows, const uint8_t *have,
                             const float *q, char *msg, size_t len)
{
    size_t n = c->n_pos, m = 0, p, i, h;
    float *K = (float *)xmalloc((n + 1) * CD * sizeof(float)), *V = (float *)xmalloc((n + 1) * CD * sizeof(float));
    float *ref = (float *)xmalloc(NQ * CD * sizeof(float)), *pref = (float *)xmalloc((NQ * n + 1) * sizeof(float));
    float *out = (float *)xmalloc(NQ * CD * sizeof(float)), *pr = (float *)xmalloc((NQ * n + 1) * sizeof(float));
    int ok = 1, mode;
    for (p = 0; p < n; p++)
        if (have[p] == 1) {
            memcpy(K + m * CD, rows + p * CD, CD * sizeof(float));
            memcpy(V + m * CD, rows + (n + p) * CD, CD * sizeof(float));
            m++;
        }
    if (m == 0) {                            /* nothing left to attend to */
        ok = attend(c, q, out, NULL, KVQ_ATTN_EAGER) == KVQ_ERR_STATE &&
             attend(c, q, out, NULL, KVQ_ATTN_ONLINE) == KVQ_ERR_STATE;
        if (!ok) snprintf(msg, len, "attention over an empty cache did not return STATE");
        goto out;
    }
    if (kvq_attend_dense(K, V, m, CD, q, NQ, ref, pref) != KVQ_OK) { snprintf(msg, len, "dense"); ok = 0; goto out; }
    for (mode = 0; mode < 2 && ok; mode++) {
        double mx = 0, err = 0;
        if (attend(c, q, out, mode ? NULL : pr, (kvq_attn_mode)mode) != KVQ_OK) {
            snprintf(msg, len, "attend mode %d failed: %s", mode, kvq_why()); ok = 0; break;
        }
        for (i = 0; i < NQ * CD; i++) {
            mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
            err = fabs(out[i] - ref[i]) > err ? fabs(out[i] - ref[i]) : err;
        }
        if (err > 1e-4 * mx + 1e-6) {
            snprintf(msg, len, "mode %d: max|out - dense| = %.3g (max|out| %.3g)", mode, err, mx);
            ok = 0;
        }
        if (mode == 0)
            for (h = 0; h < NQ && ok; h++)
                for (p = 0, i = 0; p < n; p++) {
                    float got = pr[h * n + p];
                    if (have[p] != 1 ? got != 0.0f : fabs(got - pref[h * m + i++]) > 1e-5) {
                        snprintf(msg, len, "head %zu position %zu (%s): prob %g", h, p,
                                 have[p] == 1 ? "present" : "evicted", got);
                        ok = 0;
                        break;
                    }
                }
    }
out:
    free(K); free(V); free(ref); free(pref); free(out); free(pr);
    return ok;
}

/* The compaction oracle, computed from the slots before the pass: a unit
   with no live slot is removed (all of its tokens_per_unit slots), a unit
   with survivors stays with its dead slots pinned and moves forward (a
   copy of all its slots) if a removed unit precedes it. The block view
   counts ceil(slots / bt) per side, and blocks whose every slot is dead. */
typedef struct { kvq_compact_stats st; size_t removed_units[2]; } compact_oracle;
static void oracle_compact(const kvq_cache *c, size_t bt, compact_oracle *o)
{
    int side;
    memset(o, 0, sizeof *o);
    for (side = 0; side < 2; side++) {
        const kvq_side *s = side ? &c->v : &c->k;
        size_t tpu = s->axis == KVQ_PER_CHANNEL ? s->group : 1;   /* from the layout */
        size_t slots = s->n_units * tpu, u, t, kept = 0, b;
        for (u = 0; u < s->n_units; u++) {
            size_t live = 0;
            for (t = 0; t < tpu; t++) live += s->qpos[u * tpu + t] >= 0;
            if (!live) { o->st.dead_removed += tpu; o->removed_units[side]++; continue; }
            o->st.pinned_slots += tpu - live;
            if (kept != u) o->st.slot_copies += tpu;
            kept++;
        }
        for (b = 0; b * bt < slots; b++) {
            int all_dead = 1;
            for (t = b * bt; t < slots && t < (b + 1) * bt; t++) all_dead &= s->qpos[t] < 0;
            o->st.blocks_free_without_compaction += (size_t)all_dead;
        }
        o->st.slots_before[side] = slots;
        o->st.slots_after[side] = kept * tpu;
        o->st.blocks_before += ceil_div(slots, bt);
        o->st.blocks_after += ceil_div(kept * tpu, bt);
    }
    o->st.blocks_freed = o->st.blocks_before - o->st.blocks_after;
}
/* Payload bytes of one quantized unit of a side, from the config alone:
   groups per unit x (packed words + one 4-byte scale/zero).               */
static size_t unit_bytes(const kvq_config *cfg, int side)
{
    kvq_axis ax = side ? cfg->value_axis : cfg->key_axis;
    int B = side ? cfg->value_bits : cfg->key_bits;
    size_t G = (side && cfg->value_group) ? cfg->value_group : cfg->group;
    size_t groups = ax == KVQ_PER_CHANNEL ? CD : CD / G;
    return groups * (ceil_div(G * (size_t)B, 32) * 4 + 4);
}

/* A keep mask for the cache: random shapes, or a policy's own decision
   (StreamingLLM, or H2O on accumulated EAGER probabilities: wall 1).      */
static void cache_mask(rng *r, kvq_cache *c, const float *q, uint8_t *keep)
{
    size_t n = c->n_pos, kind = rbelow(r, 4), p;
    uint8_t *present = (uint8_t *)xmalloc(n + 1);
    kvq_cache_present(c, present, n);
    if (kind <= 1) random_mask(r, keep, n, 4);
    else if (kind == 2) kvq_evict_streaming(present, n, rbelow(r, 4), rbelow(r, 12), keep);
    else {
        float *score = (float *)xmalloc(n * sizeof(float)), *pr = (float *)xmalloc(NQ * n * sizeof(float));
        float out[NQ * CD];
        for (p = 0; p < n; p++) score[p] = 0.0f;
        if (attend(c, q, out, pr, KVQ_ATTN_EAGER) == KVQ_OK) kvq_h2o_accumulate(score, pr, NQ, n);
        kvq_evict_h2o(score, present, n, rbelow(r, n / 2 + 1), rbelow(r, 8), keep);
        free(score); free(pr);
    }
    free(present);
}

static void test_cache_evict_compact(void)
{
    rng r = { 0xE71C7ull };
    int which;
    size_t trials = QUICK ? 12 : 80, tr;
    char msg[256];
    for (which = 0; which < 4; which++) {
        const char *name;
        kvq_config cfg = cache_config(which, &name);
        size_t n_bad_attn = 0, n_cmp = 0, n_removed = 0;
        for (tr = 0; tr < trials; tr++) {
            kvq_cache c;
            size_t T = 1 + rbelow(&r, 160), T0 = rbelow(&r, T + 1), p, cycle, cap = T + 200;
            float *K = (float *)xmalloc(cap * CD * sizeof(float)), *V = (float *)xmalloc(cap * CD * sizeof(float));
            float *rows = (float *)xmalloc(2 * cap * CD * sizeof(float)), *rows2 = (float *)xmalloc(2 * cap * CD * sizeof(float));
            uint8_t *have = (uint8_t *)xmalloc(cap), *have2 = (uint8_t *)xmalloc(cap), *keep = (uint8_t *)xmalloc(cap);
            uint8_t *stable[2];
            float q[NQ * CD];
            int requant = cfg.policy == KVQ_POLICY_HF && cfg.hf_requantize;
            stable[0] = (uint8_t *)xmalloc(cap); stable[1] = (uint8_t *)xmalloc(cap);
            for (p = 0; p < cap * CD; p++) { K[p] = rnorm(&r); V[p] = rnorm(&r); }
            for (p = 0; p < NQ * CD; p++) q[p] = rnorm(&r);
            if (kvq_cache_init(&c, &cfg) != KVQ_OK ||
                (T0 && kvq_cache_prefill(&c, K, V, T0) != KVQ_OK)) { CHECK(0, "%s: build", name); break; }
            for (p = T0; p < T; p++) kvq_cache_append(&c, K + p * CD, V + p * CD);
            for (cycle = 0; cycle < 3; cycle++) {
                size_t n = c.n_pos, evicted = 0, expect_ev = 0, bt = (size_t)1 << rbelow(&r, 5), add;
                kvq_compact_stats cs;
                compact_oracle o;
                kvq_bytes b0, b1;
                float out0[2][NQ * CD], out1[2][NQ * CD], *pr0, *pr1;
                int same_rows;
                /* evict a mask; count what should go                        */
                read_all(&c, rows, have);
                cache_mask(&r, &c, q, keep);
                for (p = 0; p < n; p++) expect_ev += have[p] == 1 && !keep[p];
                CHECK(kvq_cache_evict(&c, keep, n, &evicted) == KVQ_OK && evicted == expect_ev,
                      "%s: evicted %zu, expected %zu", name, evicted, expect_ev);
                CHECK(kvq_cache_check(&c) == KVQ_OK, "%s after evict: %s", name, kvq_why());
                read_all(&c, rows2, have2);
                for (p = 0, same_rows = 1; p < n; p++) {
                    keep[p] = have[p] == 1 && keep[p];          /* now: survives */
                    same_rows &= have2[p] == keep[p];
                }
                same_rows &= rows_same(keep, n, rows, n, rows2, n);
                CHECK(same_rows, "%s: after eviction the evicted positions must be absent and the "
                      "survivors bit-identical", name);
                {
                    uint8_t *pres = (uint8_t *)xmalloc(n + 1);
                    int ok = kvq_cache_present(&c, pres, n) == KVQ_OK;
                    for (p = 0; p < n; p++) ok &= pres[p] == (have2[p] == 1);
                    CHECK(ok, "%s: kvq_cache_present disagrees with the reads", name);
                    free(pres);
                }
                if (!attention_matches(&c, rows2, have2, q, msg, sizeof msg)) {
                    n_bad_attn++;
                    CHECK(0, "%s trial %zu cycle %zu, after eviction: %s", name, tr, cycle, msg);
                }
                /* compaction: the oracle from the slots, then the pass      */
                pr0 = (float *)xmalloc((NQ * n + 1) * sizeof(float));
                pr1 = (float *)xmalloc((NQ * n + 1) * sizeof(float));
                {
                    int has = 0;
                    for (p = 0; p < n; p++) has |= have2[p] == 1;
                    if (has) {
                        attend(&c, q, out0[0], pr0, KVQ_ATTN_EAGER);
                        attend(&c, q, out0[1], NULL, KVQ_ATTN_ONLINE);
                    }
                    oracle_compact(&c, bt, &o);
                    kvq_cache_bytes(&c, &b0);
                    memset(&cs, 0x5A, sizeof cs);
                    CHECK(kvq_cache_compact(&c, bt, &cs) == KVQ_OK, "%s: compact", name);
                    CHECK(kvq_cache_check(&c) == KVQ_OK, "%s after compact: %s", name, kvq_why());
                    CHECK(memcmp(cs.slots_before, o.st.slots_before, sizeof cs.slots_before) == 0 &&
                          memcmp(cs.slots_after, o.st.slots_after, sizeof cs.slots_after) == 0 &&
                          cs.blocks_before == o.st.blocks_before && cs.blocks_after == o.st.blocks_after &&
                          cs.blocks_free_without_compaction == o.st.blocks_free_without_compaction &&
                          cs.blocks_freed == o.st.blocks_freed && cs.slot_copies == o.st.slot_copies &&
                          cs.dead_removed == o.st.dead_removed && cs.pinned_slots == o.st.pinned_slots,
                          "%s bt %zu: stats slots K %zu->%zu V %zu->%zu, blocks %zu->%zu (free w/o %zu), "
                          "copies %zu, removed %zu, pinned %zu; oracle K %zu->%zu V %zu->%zu, %zu->%zu "
                          "(%zu), %zu, %zu, %zu", name, bt, cs.slots_before[0], cs.slots_after[0],
                          cs.slots_before[1], cs.slots_after[1], cs.blocks_before, cs.blocks_after,
                          cs.blocks_free_without_compaction, cs.slot_copies, cs.dead_removed,
                          cs.pinned_slots, o.st.slots_before[0], o.st.slots_after[0],
                          o.st.slots_before[1], o.st.slots_after[1], o.st.blocks_before,
                          o.st.blocks_after, o.st.blocks_free_without_compaction, o.st.slot_copies,
                          o.st.dead_removed, o.st.pinned_slots);
                    {
                        kvq_census cen;
                        size_t live = 0, slots = cs.slots_after[0] + cs.slots_after[1];
                        kvq_cache_census(&c, &cen);
                        live = slots - cen.placeholders[0] - cen.placeholders[1];
                        CHECK(cen.placeholders[0] + cen.placeholders[1] == o.st.pinned_slots &&
                              fabs(cs.occupancy - (slots ? (double)live / (double)slots : 0.0)) < 1e-12,
                              "%s: %zu placeholders left, %zu pinned; occupancy %.4f", name,
                              cen.placeholders[0] + cen.placeholders[1], o.st.pinned_slots, cs.occupancy);
                    }
                    kvq_cache_bytes(&c, &b1);
                    n_removed += o.removed_units[0] + o.removed_units[1];
                    CHECK(b0.payload - b1.payload == o.removed_units[0] * unit_bytes(&cfg, 0) +
                          o.removed_units[1] * unit_bytes(&cfg, 1) && b1.allocated == b0.allocated,
                          "%s: payload %zu -> %zu, expected a drop of %zu K + %zu V units", name,
                          b0.payload, b1.payload, o.removed_units[0], o.removed_units[1]);
                    /* same positions, same data, same order: bit-identical */
                    read_all(&c, rows, have);
                    CHECK(memcmp(have, have2, n) == 0 && rows_same(have, n, rows, n, rows2, n),
                          "%s: compaction changed what the cache reads back", name);
                    if (has) {
                        attend(&c, q, out1[0], pr1, KVQ_ATTN_EAGER);
                        attend(&c, q, out1[1], NULL, KVQ_ATTN_ONLINE);
                        n_cmp++;
                        CHECK(memcmp(out0[0], out1[0], sizeof out0[0]) == 0 &&
                              memcmp(pr0, pr1, NQ * n * sizeof(float)) == 0,
                              "%s: EAGER attention changed under compaction", name);
                        {   /* ONLINE walks storage order, with tile boundaries
                                   where the layout puts them: compaction may move
                                   its last bits (kvq.h Sec. 8), within the same
                                   bound test_cache puts between EAGER and ONLINE */
                            double e = 0.0, mx = 0.0;
                            size_t i;
                            for (i = 0; i < NQ * CD; i++) {
                                double dd = fabs((double)out0[1][i] - out1[1][i]);
                                if (dd > e) e = dd;
                                if (fabs(out0[1][i]) > mx) mx = fabs(out0[1][i]);
                            }
                            CHECK(e <= 1e-5 * mx + 1e-6, "%s trial %zu: ONLINE attention "
                                  "moved by %g under compaction", name, tr, e);
                        }
                    }
                }
                free(pr0); free(pr1);
                /* more tokens after compaction                              */
                for (p = 0; p < n; p++) {
                    stable[0][p] = cfg.policy == KVQ_POLICY_FULL || KVQ_LOC_TAG(c.k.loc[p]) == KVQ_LOC_QUANT;
                    stable[1][p] = cfg.policy == KVQ_POLICY_FULL || KVQ_LOC_TAG(c.v.loc[p]) == KVQ_LOC_QUANT;
                }
                add = 1 + rbelow(&r, 40);
                if (c.n_pos + add > cap) add = cap - c.n_pos;
                for (p = 0; p < add; p++)
                    CHECK(kvq_cache_append(&c, K + c.n_pos * CD, V + c.n_pos * CD) == KVQ_OK,
                          "%s: append after compaction", name);
                CHECK(kvq_cache_check(&c) == KVQ_OK, "%s: appends after compaction: %s", name, kvq_why());
                read_all(&c, rows2, have2);
                /* rows already quantized (or never quantized: FULL) must not
                   change; window rows may be quantized by the appends, and HF
                   with hf_requantize re-quantizes its history at each flush */
                if (!requant) {
                    int same = 1, side;
                    for (p = 0; p < n; p++) same &= have2[p] == have[p];
                    for (side = 0; side < 2; side++) {
                        for (p = 0; p < n; p++)
                            if (have[p] == 1 && stable[side][p] &&
                                memcmp(rows + (side * n + p) * CD, rows2 + (side * c.n_pos + p) * CD,
                                       CD * sizeof(float)))
                                same = 0;
                    }
                    CHECK(same, "%s: appends after compaction changed an old quantized survivor", name);
                }
                if (!attention_matches(&c, rows2, have2, q, msg, sizeof msg)) {
                    n_bad_attn++;
                    CHECK(0, "%s trial %zu cycle %zu, after appends: %s", name, tr, cycle, msg);
                }
            }
            kvq_cache_free(&c);
            free(K); free(V); free(rows); free(rows2); free(have); free(have2); free(keep);
            free(stable[0]); free(stable[1]);
        }
        printf("  %-48s %zu caches x 3 evict/compact/append cycles, %zu units removed, "
               "%zu attention comparisons\n", name, trials, n_removed, n_cmp);
    }
    CHECK(ta_live == 0, "cache group leaked %ld blocks", ta_live);
}

/* ======================================================================== */
/* 7. REFUSALS: OTT and LogQuant, and bad arguments, change nothing         */
/* ======================================================================== */
static void test_cache_refusals(void)
{
    rng r = { 0x0EF05Eull };
    int which;
    for (which = 0; which < 3; which++) {
        kvq_config cfg;
        kvq_cache c;
        size_t T = 60, p, n;
        float *K = (float *)xmalloc(T * CD * sizeof(float)), *V = (float *)xmalloc(T * CD * sizeof(float));
        float *r0 = (float *)xmalloc(2 * T * CD * sizeof(float)), *r1 = (float *)xmalloc(2 * T * CD * sizeof(float));
        uint8_t h0[60], h1[60], keep[61];
        kvq_census c0, c1;
        kvq_compact_stats cs;
        size_t ev = 12345;
        const char *name;
        if (which == 0) { cfg = kvq_config_ott(CD, 2, 2); cfg.group = 4; cfg.residual = 8; cfg.value_group = 8; name = "OTT"; }
        else if (which == 1) { cfg = kvq_config_logquant(CD, 2, 4); cfg.group = 4; name = "LogQuant"; }
        else { cfg = kvq_config_kivi(CD, 2); cfg.group = 4; cfg.residual = 8; name = "KIVI (bad arguments)"; }
        for (p = 0; p < T * CD; p++) { K[p] = rnorm(&r); V[p] = rnorm(&r); }
        if (kvq_cache_init(&c, &cfg) != KVQ_OK) { CHECK(0, "%s init: %s", name, kvq_why()); continue; }
        for (p = 0; p < T; p++) kvq_cache_append(&c, K + p * CD, V + p * CD);
        n = c.n_pos;
        for (p = 0; p < n; p++) keep[p] = p % 3 == 0;
        read_all(&c, r0, h0);
        kvq_cache_census(&c, &c0);
        if (which < 2) {
            CHECK(kvq_cache_evict(&c, keep, n, &ev) == KVQ_ERR_CONFIG && kvq_why()[0] && ev == 12345,
                  "%s must refuse eviction with KVQ_ERR_CONFIG", name);
        } else {
            CHECK(kvq_cache_evict(NULL, keep, n, &ev) == KVQ_ERR_NULL, "evict NULL cache");
            CHECK(kvq_cache_evict(&c, NULL, n, &ev) == KVQ_ERR_NULL, "evict NULL keep");
            CHECK(kvq_cache_evict(&c, keep, n - 1, &ev) == KVQ_ERR_SIZE, "evict short mask");
            CHECK(kvq_cache_evict(&c, keep, n + 1, &ev) == KVQ_ERR_SIZE, "evict long mask");
            CHECK(ev == 12345, "a failed evict wrote *evicted");
            CHECK(kvq_cache_present(&c, h1, n - 1) == KVQ_ERR_SIZE, "present, wrong length");
            CHECK(kvq_cache_compact(NULL, 16, &cs) == KVQ_ERR_NULL, "compact NULL");
            CHECK(kvq_cache_compact(&c, 0, &cs) == KVQ_ERR_SIZE, "compact block 0");
        }
        read_all(&c, r1, h1);
        kvq_cache_census(&c, &c1);
        CHECK(memcmp(h0, h1, n) == 0 && memcmp(r0, r1, 2 * n * CD * sizeof(float)) == 0 &&
              memcmp(&c0, &c1, sizeof c0) == 0 && kvq_cache_check(&c) == KVQ_OK,
              "%s: a refused call changed the cache", name);
        kvq_cache_free(&c);
        free(K); free(V); free(r0); free(r1);
    }
}

/* ======================================================================== */
/* 8. FORK OF AN EMPTY SEQUENCE (last: under UBSan a failure here aborts)   */
/* ======================================================================== */
/* Forking a sequence with no slots is legal (kvq_pseq_fork's contract only
   asks for an empty destination) and must share nothing. kvq.h currently
   calls memcpy(dst->alive = NULL, src->alive = NULL, 0) here, which is
   undefined behaviour that -fsanitize=undefined reports.                  */
static void test_fork_empty(void)
{
    kvq_pages P;
    kvq_pseq A, B;
    int32_t p = 3;
    CHECK(kvq_pages_init(&P, 2, 4, 4) == KVQ_OK, "pages_init");
    kvq_pseq_init(&A); kvq_pseq_init(&B);
    CHECK(kvq_pseq_fork(&P, &B, &A) == KVQ_OK && B.n_slots == 0 && B.n_blocks == 0 &&
          P.n_free == 2, "fork of an empty sequence");
    CHECK(kvq_pseq_append(&P, &B, p, &p) == KVQ_OK && P.n_free == 1, "append after an empty fork");
    kvq_pseq_free(&P, &A); kvq_pseq_free(&P, &B);
    kvq_pages_free(&P);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);  /* keep the lines if a sanitizer aborts */
    test_page_figures();
    test_pages_random();
    test_pages_bad_input();
    test_pages_alloc_failure();
    test_policies();
    test_policies_bad_input();
    test_cache_evict_compact();
    test_cache_refusals();
    test_fork_empty();
    CHECK(!ta_broken, "allocator ledger lost track of a block");
    return TEST_END("test_evict");
}
