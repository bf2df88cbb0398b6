/* fuzz/fuzz_pages.c - random operation sequences on a page pool and up to
   four sequences, including pools that are zeroed, freed, or re-created.

   The first 3 bytes choose the pool: n_blocks 1..16, block_tokens 1..8,
   slot_bytes 0..15 (0: positions only, no payload). Every later byte
   starts an op on sequence (byte >> 3) % 4:
     append    one slot at a fresh logical position (payload derived from it)
     fork      into an empty sequence from another one
     evict     a random keep mask
     repack    from a random first slot (block aligned or not)
     holefill  with random first and round_start
     free      the sequence
     pool      free the pool, zero it, or re-create it (only once every
               sequence is empty: a sequence's block ids belong to one pool)
   A shadow keeps, per sequence, its live logical positions in slot order.
   After EVERY op:
     - on a dead pool (zeroed or freed) every call is refused with STATE
       (kvq_pseq_slot gives NULL, kvq_pseq_private_start 0), nothing
       divides by zero or reads a NULL table, and freeing a sequence that
       outlived its pool frees its tables (ASan sees leaks otherwise);
     - a refused call changes no sequence and no pool table;
     - on a live pool: every block is either free (on the free list, count
       0) or counted once per sequence table entry naming it, and
       n_free + blocks in use = n_blocks;
     - every live slot holds the payload of its own position, and the live
       positions of each sequence are the shadow's, in the shadow's order
       (evict and repack keep order; holefill keeps the set).             */
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"

#define NSEQ 4
#define MAXS 256                   /* slots a sequence may reach           */

static kvq_pages P;
static kvq_pseq S[NSEQ];
static int32_t live[NSEQ][MAXS];   /* shadow: live positions, slot order   */
static size_t n_live[NSEQ];
static int pool_live;

/* A slot's payload is a pattern of its logical position.                  */
static void payload_of(int32_t pos, uint8_t *out, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) out[i] = (uint8_t)((uint32_t)pos * 131u + (uint32_t)i * 7u + 1u);
}

typedef struct { size_t n_free, n_slots[NSEQ], n_blocks[NSEQ]; uint32_t ref[16]; } pool_snap;
static void snap(pool_snap *s)
{
    int q;
    memset(s, 0, sizeof *s);
    s->n_free = P.n_free;
    for (q = 0; q < NSEQ; q++) { s->n_slots[q] = S[q].n_slots; s->n_blocks[q] = S[q].n_blocks; }
    if (pool_live) memcpy(s->ref, P.refcount, P.n_blocks * sizeof(uint32_t));
}

static void check_pool(void)
{
    static uint32_t count[16];
    static uint8_t on_free[16], want[16];
    size_t b, i, used = 0;
    int q;
    if (!pool_live) {
        for (q = 0; q < NSEQ; q++) {
            FZ_ASSERT(kvq_pseq_slot(&P, &S[q], 0) == NULL, "slot of a dead pool");
            FZ_ASSERT(kvq_pseq_private_start(&P, &S[q]) == 0, "private start of a dead pool");
        }
        return;
    }
    memset(count, 0, sizeof count);
    memset(on_free, 0, sizeof on_free);
    for (q = 0; q < NSEQ; q++)
        for (b = 0; b < S[q].n_blocks; b++) {
            FZ_ASSERT(S[q].table[b] < P.n_blocks, "block id %u out of range", (unsigned)S[q].table[b]);
            count[S[q].table[b]]++;
        }
    for (i = 0; i < P.n_free; i++) {
        FZ_ASSERT(P.free_list[i] < P.n_blocks && !on_free[P.free_list[i]], "free list");
        on_free[P.free_list[i]] = 1;
    }
    for (b = 0; b < P.n_blocks; b++) {
        FZ_ASSERT(P.refcount[b] == count[b], "block %zu: refcount %u, %u references",
                  b, (unsigned)P.refcount[b], (unsigned)count[b]);
        FZ_ASSERT(on_free[b] == (count[b] == 0), "block %zu free-list membership", b);
        used += count[b] > 0;
    }
    FZ_ASSERT(P.n_free + used == P.n_blocks, "n_free %zu + used %zu != %zu", P.n_free, used, P.n_blocks);
    for (q = 0; q < NSEQ; q++) {
        size_t j = 0;
        FZ_ASSERT(S[q].n_slots <= S[q].n_blocks * P.block_tokens, "slots beyond blocks");
        for (i = 0; i < S[q].n_slots; i++) {
            const uint8_t *p = (const uint8_t *)kvq_pseq_slot(&P, &S[q], i);
            if (!S[q].alive[i]) continue;
            FZ_ASSERT(j < n_live[q] && S[q].pos[i] == live[q][j], "seq %d slot %zu: position %d, "
                      "shadow %d", q, i, (int)S[q].pos[i], j < n_live[q] ? (int)live[q][j] : -1);
            if (P.slot_bytes) {
                payload_of(S[q].pos[i], want, P.slot_bytes);
                FZ_ASSERT(p && memcmp(p, want, P.slot_bytes) == 0, "seq %d slot %zu payload", q, i);
            }
            j++;
        }
        FZ_ASSERT(j == n_live[q], "seq %d: %zu live slots, shadow %zu", q, j, n_live[q]);
    }
}

/* The shadow after holefill: the same set; order taken from the sequence. */
static void shadow_resync_order(int q)
{
    size_t i, j = 0;
    for (i = 0; i < S[q].n_slots; i++) if (S[q].alive[i]) live[q][j++] = S[q].pos[i];
}

static int same_set(int q, const int32_t *before, size_t n)
{
    size_t i, j;
    if (n != n_live[q]) return 0;
    for (i = 0; i < n; i++) {
        for (j = 0; j < n; j++) if (live[q][j] == before[i]) break;
        if (j == n) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = { data, size, 0 };
    size_t nb = 1 + fz_u8(&f) % 16, bt = 1 + fz_u8(&f) % 8, sb = fz_u8(&f) % 16;
    int32_t next_pos = 0;
    int q;
    FZ_ASSERT(kvq_pages_init(&P, nb, bt, sb) == KVQ_OK, "pool");
    pool_live = 1;
    for (q = 0; q < NSEQ; q++) { kvq_pseq_init(&S[q]); n_live[q] = 0; }

    while (fz_left(&f)) {
        uint8_t op = fz_u8(&f), a = fz_u8(&f), b = fz_u8(&f);
        int s = (op >> 3) % NSEQ, t = (s + 1 + a % (NSEQ - 1)) % NSEQ;
        kvq_status st = KVQ_OK, dead = pool_live ? KVQ_OK : KVQ_ERR_STATE;
        pool_snap before, after;
        kvq_page_stats ps;
        snap(&before);
        switch (op % 7) {
        case 0: {                                                  /* append  */
            uint8_t pay[16];
            if (S[s].n_slots >= MAXS) break;
            payload_of(next_pos, pay, sizeof pay);
            st = kvq_pseq_append(&P, &S[s], next_pos, (a & 1) && sb ? NULL : pay);
            if (st == KVQ_OK) {
                FZ_ASSERT(pool_live, "append on a dead pool accepted");
                if ((a & 1) && sb) {            /* NULL payload: zeros; rewrite */
                    uint8_t *p = (uint8_t *)kvq_pseq_slot(&P, &S[s], S[s].n_slots - 1);
                    size_t i;
                    for (i = 0; i < sb; i++) FZ_ASSERT(p[i] == 0, "NULL payload not zeroed");
                    memcpy(p, pay, sb);
                }
                live[s][n_live[s]++] = next_pos++;
            } else {
                FZ_ASSERT(st == (dead ? dead : KVQ_ERR_CAPACITY), "append: %d", (int)st);
            }
            break;
        }
        case 1:                                                    /* fork    */
            st = kvq_pseq_fork(&P, &S[t], &S[s]);
            if (st == KVQ_OK) {
                FZ_ASSERT(pool_live && before.n_slots[t] == 0 && before.n_blocks[t] == 0, "fork accepted");
                memcpy(live[t], live[s], n_live[s] * sizeof(int32_t));
                n_live[t] = n_live[s];
            } else {
                FZ_ASSERT(st == KVQ_ERR_STATE || st == KVQ_ERR_NOMEM, "fork: %d", (int)st);
            }
            break;
        case 2: {                                                  /* evict   */
            static uint8_t keep[MAXS];
            static int32_t kept[MAXS];
            uint64_t seed = a | (uint64_t)b << 8;
            size_t i, n = 0;
            for (i = 0; i < S[s].n_slots; i++) {
                keep[i] = (fz_mix(&seed) % 4) != 0;
                if (pool_live && S[s].alive[i] && keep[i]) kept[n++] = S[s].pos[i];
            }
            st = kvq_pseq_evict(&P, &S[s], keep, S[s].n_slots, &ps);
            if (st != KVQ_OK) { FZ_ASSERT(dead && st == dead, "evict: %d", (int)st); break; }
            FZ_ASSERT(ps.tokens_evicted == n_live[s] - n, "evicted %zu, want %zu",
                      ps.tokens_evicted, n_live[s] - n);
            memcpy(live[s], kept, n * sizeof(int32_t));
            n_live[s] = n;
            break;
        }
        case 3: case 4: {                                   /* repack, holefill */
            static int32_t set[MAXS];
            size_t n = n_live[s], first, round;
            first = (a & 1) ? a / 2 % (S[s].n_slots + 1) : (a / 2 % (S[s].n_blocks + 1)) * bt;
            round = first + b % (S[s].n_slots + 1);
            memcpy(set, live[s], n * sizeof(int32_t));
            st = op % 7 == 3 ? kvq_pseq_repack(&P, &S[s], first, &ps)
                             : kvq_pseq_holefill(&P, &S[s], first, round, &ps);
            if (st != KVQ_OK) {
                FZ_ASSERT(dead ? st == dead : (st == KVQ_ERR_SIZE || st == KVQ_ERR_STATE),
                          "compaction: %d", (int)st);
                break;
            }
            /* repack keeps the order (the shadow stands); holefill keeps
               the set: take the new order and compare the sets           */
            if (op % 7 == 4) {
                shadow_resync_order(s);
                FZ_ASSERT(same_set(s, set, n), "holefill changed the live set");
            }
            break;
        }
        case 5:                                                    /* free    */
            kvq_pseq_free(&P, &S[s]);
            FZ_ASSERT(S[s].table == NULL && S[s].n_slots == 0, "freed sequence");
            n_live[s] = 0;
            break;
        default: {                                                 /* pool    */
            int all_empty = 1;
            for (q = 0; q < NSEQ; q++) all_empty &= S[q].n_blocks == 0;
            if (a % 3 == 0) { kvq_pages_free(&P); pool_live = 0; }
            else if (a % 3 == 1 && pool_live) {
                if (!all_empty) break;
                kvq_pages_free(&P);
                memset(&P, 0, sizeof P); pool_live = 0;
            } else if (all_empty) {
                /* a new pool: only where no sequence holds an old block id */
                kvq_pages_free(&P);
                FZ_ASSERT(kvq_pages_init(&P, 1 + b % 16, bt, sb) == KVQ_OK, "pool again");
                pool_live = 1;
            }
            break;
        }
        }
        snap(&after);
        if (st != KVQ_OK)
            FZ_ASSERT(memcmp(&before, &after, sizeof before) == 0, "a refused call changed the state");
        check_pool();
    }
    for (q = 0; q < NSEQ; q++) kvq_pseq_free(&P, &S[q]);
    kvq_pages_free(&P);
    return 0;
}
