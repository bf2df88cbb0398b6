/* tests/test_status.c - every status, every function that can return it.

   The status table in kvq.h (Sec. 12) is read from the header itself: each
   (status, function) pair it lists must be produced here at least once,
   and every failure produced here must be a pair it lists. So the table
   cannot drift from the code in either direction.

   Every failing call must set kvq_why() (emptied before each call) and
   every succeeding one leave it as it was; a whole successful life of each
   policy and of a page pool must leave it byte for byte.

   Every failing call runs against poisoned outputs (0xA5 bytes) that must
   come back untouched, and every failing call on a cache, a page pool or a
   sequence must leave it observably unchanged: positions, census, payload
   bytes, every row read back bit for bit, attention output bit for bit,
   kvq_cache_check. A twin that never saw the failures then takes the same
   next append: both must still agree bit for bit.

   A few cases poke a documented field to reach a state too large to build
   (n_pos at KVQ_MAX_POSITIONS, a broken loc entry); each is undone at once
   and said so where it happens.                                           */
#define TEST_ALLOC
#define TEST_RNG
#include "test.h"
#define KVQ_IMPLEMENTATION
#include "kvq.h"
/* Empties kvq_why() (kvq.h's private buffer; this file has the
   implementation) so a test can tell that a failing call set a reason.    */
static void why_clear(void) { kvq__why_buf[0] = '\0'; }
#include "examples/npy.h"
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* the table, as kvq.h states it                                            */
/* ------------------------------------------------------------------------ */
#define MAX_FN 96
static const char *status_name[KVQ_STATUS_COUNT] = {
    "KVQ_OK", "KVQ_ERR_NULL", "KVQ_ERR_SIZE", "KVQ_ERR_BITS", "KVQ_ERR_GROUP",
    "KVQ_ERR_NONFINITE", "KVQ_ERR_RANGE", "KVQ_ERR_OVERFLOW", "KVQ_ERR_NOMEM",
    "KVQ_ERR_CAPACITY", "KVQ_ERR_CONFIG", "KVQ_ERR_STATE", "KVQ_ERR_FORMAT",
    "KVQ_ERR_IO" };
static char fn_name[MAX_FN][48];
static int  n_fn;
static int  listed[KVQ_STATUS_COUNT][MAX_FN];   /* 1 listed, 2 (32-bit)     */
static int  seen[KVQ_STATUS_COUNT][MAX_FN];
static int  table_ok;

static int fn_index(const char *name)
{
    int i;
    for (i = 0; i < n_fn; i++) if (strcmp(fn_name[i], name) == 0) return i;
    if (n_fn == MAX_FN || strlen(name) >= sizeof fn_name[0]) return -1;
    strcpy(fn_name[n_fn], name);
    return n_fn++;
}

/* Parses the lines between "status ... returned by" and "Never fail".     */
static void read_table(void)
{
    FILE *f = fopen("kvq.h", "r");
    char line[512];
    int in = 0, cur = -1;
    if (!f) { CHECK(0, "cannot open kvq.h (run from the repository root)"); return; }
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        if (!in) { in = strstr(line, "status") && strstr(line, "returned by"); continue; }
        if (strstr(line, "Never fail")) break;
        while (*p) {
            if (strncmp(p, "KVQ_ERR_", 8) == 0) {
                int s, len = 0;
                while (p[len] == '_' || (p[len] >= 'A' && p[len] <= 'Z')) len++;
                for (s = 1; s < KVQ_STATUS_COUNT; s++)
                    if ((int)strlen(status_name[s]) == len && strncmp(p, status_name[s], len) == 0
                        && p == line + strspn(line, " "))
                        cur = s;
                p += len;
            } else if (strncmp(p, "kvq_", 4) == 0 && (p == line || p[-1] == ' ')) {
                char name[64];
                int len = 0, i;
                while ((p[len] >= 'a' && p[len] <= 'z') || (p[len] >= '0' && p[len] <= '9') ||
                       p[len] == '_')
                    len++;
                if (len < (int)sizeof name && cur > 0) {
                    memcpy(name, p, (size_t)len); name[len] = '\0';
                    i = fn_index(name);
                    if (i >= 0) listed[cur][i] = strncmp(p + len, "(32-bit)", 8) == 0 ? 2 : 1;
                }
                p += len;
            } else {
                p++;
            }
        }
    }
    fclose(f);
    table_ok = n_fn > 20;
    CHECK(table_ok, "kvq.h status table: found only %d functions", n_fn);
}

/* One call's status against the expected one; the pair must be listed.
   kvq_why() is emptied before the call: a failure must fill it, a success
   must leave it as it was (Sec. 2, ONE WAY TO FAIL).                      */
#define EXPECT(fn, call, want) (why_clear(), expect_(fn, (call), (want), __LINE__))
/* The same for a status already in st, from a call made after why_clear(). */
#define EXPECT_ST(fn, st, want) expect_(fn, (st), (want), __LINE__)
static void expect_(const char *fn, kvq_status got, kvq_status want, int line)
{
    int i = fn_index(fn);
    CHECK(got == want, "line %d: %s returned %s, want %s", line, fn,
          (int)got < KVQ_STATUS_COUNT ? status_name[got] : "?", status_name[want]);
    CHECK((got == KVQ_OK) == (kvq_why()[0] == '\0'), "line %d: %s returned %s with kvq_why() "
          "\"%s\"", line, fn, status_name[got < KVQ_STATUS_COUNT ? got : 0], kvq_why());
    if (i < 0 || got == KVQ_OK || (int)got >= KVQ_STATUS_COUNT) return;
    seen[got][i] = 1;
    CHECK(listed[got][i], "line %d: %s returned %s, which kvq.h's table does not list",
          line, fn, status_name[got]);
}

/* ------------------------------------------------------------------------ */
/* poison and snapshots                                                     */
/* ------------------------------------------------------------------------ */
static void poison(void *p, size_t n) { memset(p, 0xA5, n); }
static int poisoned(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) if (b[i] != 0xA5) return 0;
    return 1;
}

/* What a caller can observe of a cache.                                   */
typedef struct {
    size_t n_pos;
    kvq_census cen;
    kvq_bytes by;
    float *rows;          /* (2, n_pos, D): every present row, read back    */
    float out[2 * 32];    /* attention of two fixed queries (D <= 32)       */
} snap;

static const float snap_q[2 * 32] = {
    0.3f, -1.2f, 0.7f, 0.1f, -0.4f, 1.9f, -0.8f, 0.05f, 0.6f, -0.3f, 1.1f, -1.7f, 0.2f,
    0.9f, -0.6f, 0.4f, -1.0f, 0.25f, 0.75f, -0.15f, 1.3f, -0.5f, 0.35f, 0.8f, -0.9f,
    0.45f, -0.05f, 1.5f, -1.1f, 0.65f, 0.15f, -0.35f,
    -0.3f, 1.2f, 0.7f, -0.1f, 0.4f, -1.9f, 0.8f, 0.05f, -0.6f, 0.3f, -1.1f, 1.7f, -0.2f,
    -0.9f, 0.6f, -0.4f, 1.0f, -0.25f, -0.75f, 0.15f, -1.3f, 0.5f, -0.35f, -0.8f, 0.9f,
    -0.45f, 0.05f, -1.5f, 1.1f, -0.65f, -0.15f, 0.35f };

static void snap_take(snap *s, const kvq_cache *c)
{
    size_t D = c->cfg.head_dim, p, nw;
    int side;
    float *work;
    memset(s, 0, sizeof *s);
    s->n_pos = c->n_pos;
    kvq_cache_census(c, &s->cen);
    kvq_cache_bytes(c, &s->by);
    s->rows = (float *)calloc(2 * c->n_pos * D + 1, sizeof(float));
    for (side = 0; side < 2; side++)
        for (p = 0; p < c->n_pos; p++)
            kvq_cache_read(c, side, p, s->rows + ((size_t)side * c->n_pos + p) * D);
    nw = kvq_attend_scratch_floats(c, KVQ_ATTN_EAGER);
    work = (float *)malloc(nw * sizeof(float) + 1);
    if (c->n_pos) kvq_attend(c, snap_q, 2, s->out, NULL, KVQ_ATTN_EAGER, work, nw);
    free(work);
}
static void snap_free(snap *s) { free(s->rows); s->rows = NULL; }

/* Equal in everything observable; `alloc` also compares allocated bytes
   (a failed allocation may legitimately leave a buffer larger).           */
static int snap_same(const snap *a, const snap *b, size_t D, int alloc)
{
    const kvq_bytes *x = &a->by, *y = &b->by;
    if (a->n_pos != b->n_pos || memcmp(&a->cen, &b->cen, sizeof a->cen)) return 0;
    if (memcmp(x->codes, y->codes, sizeof x->codes) ||
        memcmp(x->scale_zero, y->scale_zero, sizeof x->scale_zero) ||
        memcmp(x->full_precision, y->full_precision, sizeof x->full_precision) ||
        x->payload != y->payload || x->metadata != y->metadata || x->tokens != y->tokens)
        return 0;
    if (alloc && x->allocated != y->allocated) return 0;
    if (memcmp(a->out, b->out, sizeof a->out)) return 0;
    return memcmp(a->rows, b->rows, 2 * a->n_pos * D * sizeof(float)) == 0;
}

/* Runs a call expected to fail on cache c, then checks c is unchanged and
   still passes every invariant.                                           */
#define BAD_CACHE(fn, call, want, alloc)                                       \
    do {                                                                       \
        snap b_, a_;                                                           \
        snap_take(&b_, c);                                                     \
        why_clear();                                                      \
        EXPECT(fn, call, want);                                                \
        CHECK(kvq_why()[0] != '\0', "%s: %s left why empty", pname, fn);          \
        snap_take(&a_, c);                                                     \
        CHECK(snap_same(&b_, &a_, D, alloc), "%s: failed %s changed the cache", \
              pname, fn);                                                      \
        CHECK(kvq_cache_check(c) == KVQ_OK, "%s: after failed %s: %s", pname,  \
              fn, kvq_why());                                                     \
        snap_free(&b_); snap_free(&a_);                                        \
    } while (0)

/* ------------------------------------------------------------------------ */
/* 1. quantization primitives                                               */
/* ------------------------------------------------------------------------ */
static void test_primitives(void)
{
    float x[64], bad[8] = { 1, 2, NAN, 4, 5, 6, 7, 8 }, huge[4] = { 1e30f, 1e30f, 1e30f, 2e30f };
    uint8_t codes[64], c2[8] = { 0, 1, 2, 3, 4, 0, 1, 2 };
    uint32_t words[64];
    kvq_sz sz[64];
    kvq_layout L;
    size_t i, big = (size_t)-1;
    for (i = 0; i < 64; i++) x[i] = (float)i * 0.25f - 3.0f;

#define GROUP_CALL(xx, n, stride, bits, mode) \
    (poison(codes, sizeof codes), poison(sz, sizeof sz), \
     kvq_quantize_group(xx, n, stride, bits, mode, codes, sz))
#define GROUP_UNTOUCHED() CHECK(poisoned(codes, sizeof codes) && poisoned(sz, sizeof sz), \
                                "quantize_group wrote on failure")
    EXPECT("kvq_quantize_group", GROUP_CALL(NULL, 8, 1, 2, KVQ_ZERO_FLOAT), KVQ_ERR_NULL);
    GROUP_UNTOUCHED();
    EXPECT("kvq_quantize_group", kvq_quantize_group(x, 8, 1, 2, KVQ_ZERO_FLOAT, NULL, sz), KVQ_ERR_NULL);
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 0, 1, 2, KVQ_ZERO_FLOAT), KVQ_ERR_SIZE);
    GROUP_UNTOUCHED();
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 8, 0, 2, KVQ_ZERO_FLOAT), KVQ_ERR_SIZE);
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 8, 1, 5, KVQ_ZERO_FLOAT), KVQ_ERR_BITS);
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 8, 1, 0, KVQ_ZERO_FLOAT), KVQ_ERR_BITS);
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 8, 1, 16, KVQ_ZERO_FLOAT), KVQ_ERR_BITS);
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 8, 1, 2, (kvq_zero_mode)7), KVQ_ERR_CONFIG);
    EXPECT("kvq_quantize_group", GROUP_CALL(x, 2, big / 2, 2, KVQ_ZERO_FLOAT), KVQ_ERR_OVERFLOW);
    GROUP_UNTOUCHED();
    EXPECT("kvq_quantize_group", GROUP_CALL(bad, 8, 1, 2, KVQ_ZERO_FLOAT), KVQ_ERR_NONFINITE);
    GROUP_UNTOUCHED();
    bad[2] = -INFINITY;
    EXPECT("kvq_quantize_group", GROUP_CALL(bad, 8, 1, 4, KVQ_ZERO_INT), KVQ_ERR_NONFINITE);
    EXPECT("kvq_quantize_group", GROUP_CALL(huge, 4, 1, 2, KVQ_ZERO_FLOAT), KVQ_ERR_RANGE);
    GROUP_UNTOUCHED();
    huge[0] = -1e30f;                 /* int mode: the scale overflows fp16 */
    EXPECT("kvq_quantize_group", GROUP_CALL(huge, 4, 1, 8, KVQ_ZERO_INT), KVQ_ERR_RANGE);
    GROUP_UNTOUCHED();

    poison(words, sizeof words);
    EXPECT("kvq_pack", kvq_pack(NULL, 8, 2, words), KVQ_ERR_NULL);
    EXPECT("kvq_pack", kvq_pack(c2, 8, 2, NULL), KVQ_ERR_NULL);
    EXPECT("kvq_pack", kvq_pack(c2, 0, 2, words), KVQ_ERR_SIZE);
    EXPECT("kvq_pack", kvq_pack(c2, 8, 5, words), KVQ_ERR_BITS);
    EXPECT("kvq_pack", kvq_pack(c2, 8, 2, words), KVQ_ERR_RANGE);      /* code 4 */
    EXPECT("kvq_pack", kvq_pack(c2, 8, 1, words), KVQ_ERR_RANGE);
    CHECK(poisoned(words, sizeof words), "kvq_pack wrote on failure");
    poison(codes, sizeof codes);
    EXPECT("kvq_unpack", kvq_unpack(NULL, 8, 2, codes), KVQ_ERR_NULL);
    EXPECT("kvq_unpack", kvq_unpack(words, 8, 2, NULL), KVQ_ERR_NULL);
    EXPECT("kvq_unpack", kvq_unpack(words, 0, 2, codes), KVQ_ERR_SIZE);
    EXPECT("kvq_unpack", kvq_unpack(words, 8, -2, codes), KVQ_ERR_BITS);
    CHECK(poisoned(codes, sizeof codes), "kvq_unpack wrote on failure");

    poison(&L, sizeof L);
    EXPECT("kvq_layout_init", kvq_layout_init(NULL, 4, 16, 2, 8, KVQ_PER_TOKEN), KVQ_ERR_NULL);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 4, 16, 6, 8, KVQ_PER_TOKEN), KVQ_ERR_BITS);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 0, 16, 2, 8, KVQ_PER_TOKEN), KVQ_ERR_SIZE);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 4, 0, 2, 8, KVQ_PER_TOKEN), KVQ_ERR_SIZE);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 4, 16, 2, 0, KVQ_PER_TOKEN), KVQ_ERR_SIZE);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 4, 16, 2, 5, KVQ_PER_TOKEN), KVQ_ERR_GROUP);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 12, 16, 2, 8, KVQ_PER_CHANNEL), KVQ_ERR_GROUP);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, 4, 16, 2, 8, (kvq_axis)3), KVQ_ERR_CONFIG);
    EXPECT("kvq_layout_init", kvq_layout_init(&L, big, 2, 2, 1, KVQ_PER_TOKEN), KVQ_ERR_OVERFLOW);
    CHECK(poisoned(&L, sizeof L), "kvq_layout_init wrote on failure");

    /* matrices: X (4, 16) in x; words and sz poisoned                       */
#define MAT_UNTOUCHED(what) CHECK(poisoned(words, sizeof words) && poisoned(sz, sizeof sz), \
                                  "%s wrote on failure", what)
    poison(words, sizeof words); poison(sz, sizeof sz);
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(NULL, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_NULL);
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, 4, 16, 5, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_BITS);
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, 0, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_SIZE);
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, 4, 16, 2, 3, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_GROUP);
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, 4, 16, 2, 8, KVQ_PER_TOKEN, (kvq_zero_mode)2, words, sz), KVQ_ERR_CONFIG);
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, big, 2, 2, 1, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_OVERFLOW);
    x[37] = NAN;
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_NONFINITE);
    x[37] = 1e30f;        /* the last unit's group overflows fp16: nothing of
                             the earlier, valid units may be written either */
    x[63] = 3e30f;
    EXPECT("kvq_quantize_matrix", kvq_quantize_matrix(x, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz), KVQ_ERR_RANGE);
    MAT_UNTOUCHED("kvq_quantize_matrix");
    for (i = 0; i < 64; i++) x[i] = (float)i * 0.25f - 3.0f;

    CHECK(kvq_quantize_matrix(x, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, words, sz) == KVQ_OK,
          "a valid matrix");
    {
        float out[64];
        kvq_sz keep = sz[3];
        poison(out, sizeof out);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(NULL, sz, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, out), KVQ_ERR_NULL);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 16, 7, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, out), KVQ_ERR_BITS);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 0, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, out), KVQ_ERR_SIZE);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 16, 2, 6, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, out), KVQ_ERR_GROUP);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 16, 2, 8, (kvq_axis)-1, KVQ_ZERO_FLOAT, out), KVQ_ERR_CONFIG);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 16, 2, 8, KVQ_PER_TOKEN, (kvq_zero_mode)5, out), KVQ_ERR_CONFIG);
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, big, 2, 2, 1, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, out), KVQ_ERR_OVERFLOW);
        sz[3].scale = 0x7C00;                                   /* +Inf     */
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, out), KVQ_ERR_NONFINITE);
        sz[3] = keep; sz[7].zero = 0xFE01;                      /* NaN      */
        EXPECT("kvq_dequantize_matrix", kvq_dequantize_matrix(words, sz, 4, 16, 2, 8, KVQ_PER_TOKEN, KVQ_ZERO_INT, out), KVQ_ERR_NONFINITE);
        CHECK(poisoned(out, sizeof out), "kvq_dequantize_matrix wrote on failure");
    }
}

/* ------------------------------------------------------------------------ */
/* 2. configurations                                                        */
/* ------------------------------------------------------------------------ */
static void test_configs(void)
{
    kvq_config bad[8];
    kvq_status want[8] = { KVQ_ERR_CONFIG, KVQ_ERR_SIZE, KVQ_ERR_BITS, KVQ_ERR_GROUP,
                           KVQ_ERR_CONFIG, KVQ_ERR_CONFIG, KVQ_ERR_SIZE, KVQ_ERR_CONFIG };
    kvq_cache c;
    int i;
    bad[0] = kvq_config_kivi(16, 2); bad[0].policy = (kvq_policy)42;
    bad[1] = kvq_config_kivi(0, 2);
    bad[2] = kvq_config_kivi(16, 5);
    bad[3] = kvq_config_kivi(16, 2); bad[3].group = 5;          /* R = 128   */
    bad[4] = kvq_config_kivi(16, 2);                /* CUSTOM with POLICY   */
    bad[4].policy = KVQ_POLICY_CUSTOM; bad[4].key_schedule = KVQ_SCHED_POLICY;
    bad[5] = kvq_config_ott(16, 2, 5); bad[5].ott_k = 16;       /* k >= G?  */
    bad[5].group = 16; bad[5].residual = 16;
    bad[6] = kvq_config_kivi(48, 2); bad[6].key_rotation = KVQ_ROT_HADAMARD;  /* D not 2^n */
    bad[7] = kvq_config_kivi(16, 2); bad[7].value_rotation = (kvq_rotation)7;
    EXPECT("kvq_config_validate", kvq_config_validate(NULL), KVQ_ERR_NULL);
    EXPECT("kvq_cache_init", kvq_cache_init(NULL, &bad[0]), KVQ_ERR_NULL);
    EXPECT("kvq_cache_init", kvq_cache_init(&c, NULL), KVQ_ERR_NULL);
    for (i = 0; i < 8; i++) {
        EXPECT("kvq_config_validate", kvq_config_validate(&bad[i]), want[i]);
        /* a refused init writes nothing to the cache                       */
        poison(&c, sizeof c);
        EXPECT("kvq_cache_init", kvq_cache_init(&c, &bad[i]), want[i]);
        CHECK(poisoned(&c, sizeof c), "config %d: a refused init wrote to the cache", i);
    }
    /* Fields a policy does not read are ignored and never size anything
       (issue 16): a CUSTOM config whose unused value_group and W would wrap
       R + G + Gv + 3W (a 64-byte stage, then a heap overflow on the 8th
       append), a KIVI config with W = 2e7 and a k = 0 OTT config with an
       auxiliary pool of 2e7 (gigabytes before the fix).                   */
    {
        kvq_config u[3];
        float k[16], v[16];
        size_t j, d;
        u[0] = kvq_config_kivi(16, 2);
        u[0].policy = KVQ_POLICY_CUSTOM;
        u[0].key_schedule = KVQ_SCHED_FLUSH; u[0].value_schedule = KVQ_SCHED_NONE;
        u[0].group = 4; u[0].residual = 8;
        u[0].value_group = ((size_t)1 << (sizeof(size_t) * 8 - 1)) + 1;
        u[0].lq_window = u[0].value_group / 3;
        u[1] = kvq_config_kivi(16, 2); u[1].group = 16; u[1].lq_window = 20000000; u[1].ott_aux = 20000000;
        u[2] = kvq_config_ott(16, 2, 0); u[2].ott_aux = 20000000; u[2].lq_window = 20000000;
        for (i = 0; i < 3; i++) {
            size_t bytes0 = ta_bytes;
            CHECK(kvq_config_validate(&u[i]) == KVQ_OK, "unused fields %d: %s", i, kvq_why());
            if (kvq_cache_init(&c, &u[i]) != KVQ_OK) { CHECK(0, "unused fields %d: init: %s", i, kvq_why()); continue; }
            CHECK(ta_bytes - bytes0 < ((size_t)1 << 20), "unused fields %d: init allocated %zu bytes",
                  i, ta_bytes - bytes0);
            CHECK(c.cfg.lq_window == 0 && (c.cfg.ott_k > 0 || c.cfg.ott_aux == 0),
                  "unused fields %d: kept in the cache's config", i);
            for (j = 0; j < 40; j++) {
                for (d = 0; d < 16; d++) { k[d] = (float)((j * 7 + d * 3) % 11) - 5.0f; v[d] = -k[d]; }
                if (kvq_cache_append(&c, k, v) != KVQ_OK) { CHECK(0, "append %zu: %s", j, kvq_why()); break; }
            }
            CHECK(kvq_cache_check(&c) == KVQ_OK, "unused fields %d: check: %s", i, kvq_why());
            kvq_cache_free(&c);
        }
    }
    /* every allocation attempt of init, failed in turn: NOMEM, no leak     */
    {
        kvq_config cfg = kvq_config_ott(32, 2, 4);
        long at, live0 = ta_live;
        int ok = 0;
        for (at = 0; at < 64 && !ok; at++) {
            kvq_status st;
            ta_fail_at = ta_calls + at;
            why_clear();
            st = kvq_cache_init(&c, &cfg);
            ta_fail_at = -1;
            if (st == KVQ_OK) { ok = 1; kvq_cache_free(&c); break; }
            EXPECT_ST("kvq_cache_init", st, KVQ_ERR_NOMEM);
            CHECK(ta_live == live0, "init failing at attempt %ld leaked %ld blocks",
                  at, ta_live - live0);
        }
        CHECK(ok && at > 0, "init never succeeded or never allocated");
    }
}

/* ------------------------------------------------------------------------ */
/* 3. a cache under every policy: each failure leaves it unchanged          */
/* ------------------------------------------------------------------------ */
static kvq_config policy_config(int pol, const char **name)
{
    size_t D = 16;
    kvq_config cfg;
    switch (pol) {
    case 0: cfg = kvq_config_kivi(D, 2); cfg.group = 8; cfg.residual = 16; *name = "KIVI"; break;
    case 1: { kvq_hf_params hp = kvq_hf_defaults(4); hp.q_group_size = 8; hp.residual_length = 8;
              cfg = kvq_config_hf(D, hp); *name = "HF"; break; }
    case 2: cfg = kvq_config_ott(D, 2, 4); cfg.group = 8; cfg.residual = 4; cfg.ott_k = 2;
            cfg.ott_aux = 6; cfg.value_group = 8; *name = "OTT"; break;
    case 3: cfg = kvq_config_logquant(D, 2, 4); cfg.group = 8; cfg.lq_sinks = 2; *name = "LogQuant"; break;
    case 4: cfg = kvq_config_full(D, 16); *name = "FULL"; break;
    default:              /* keys never quantized beside values that are   */
        cfg = kvq_config_kivi(D, 4); cfg.policy = KVQ_POLICY_CUSTOM;
        cfg.key_schedule = KVQ_SCHED_NONE; cfg.value_schedule = KVQ_SCHED_FLUSH;
        cfg.group = 8; cfg.residual = 8; *name = "CUSTOM(keys NONE)"; break;
    }
    return cfg;
}

static void test_cache_policies(void)
{
    rng r = { 0x57A75ull };
    int pol;
    for (pol = 0; pol < 6; pol++) {
        const char *pname;
        kvq_config cfg = policy_config(pol, &pname);
        size_t D = cfg.head_dim, T = 70, i, nw, big = (size_t)-1;
        kvq_cache cache, twin, zero, *c = &cache;
        float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
        float k[16], v[16], q[2 * 16], out[2 * 16], probs[2 * 200], *work, rd[16];
        uint8_t keep[200];
        kvq_bytes by;
        kvq_census cen;
        snap s1, s2;
        for (i = 0; i < T * D; i++) { K[i] = rnorm(&r); V[i] = rnorm(&r); }
        CHECK(kvq_cache_init(&cache, &cfg) == KVQ_OK && kvq_cache_init(&twin, &cfg) == KVQ_OK,
              "%s init: %s", pname, kvq_why());
        CHECK(kvq_cache_prefill(&cache, K, V, 45) == KVQ_OK && kvq_cache_prefill(&twin, K, V, 45) == KVQ_OK,
              "%s prefill: %s", pname, kvq_why());
        for (i = 45; i < 60; i++) {
            kvq_cache_append(&cache, K + i * D, V + i * D);
            kvq_cache_append(&twin, K + i * D, V + i * D);
        }
        for (i = 0; i < D; i++) { k[i] = rnorm(&r); v[i] = rnorm(&r); q[i] = q[D + i] = rnorm(&r); }
        nw = kvq_attend_scratch_floats(c, KVQ_ATTN_EAGER) + 16;
        work = (float *)malloc(nw * sizeof(float));

        /* mutations refused                                                */
        EXPECT("kvq_cache_append", kvq_cache_append(NULL, k, v), KVQ_ERR_NULL);
        BAD_CACHE("kvq_cache_append", kvq_cache_append(c, NULL, v), KVQ_ERR_NULL, 1);
        BAD_CACHE("kvq_cache_append", kvq_cache_append(c, k, NULL), KVQ_ERR_NULL, 1);
        k[D - 1] = NAN;
        BAD_CACHE("kvq_cache_append", kvq_cache_append(c, k, v), KVQ_ERR_NONFINITE, 1);
        k[D - 1] = 0.5f; v[0] = -INFINITY;
        BAD_CACHE("kvq_cache_append", kvq_cache_append(c, k, v), KVQ_ERR_NONFINITE, 1);
        v[0] = -KVQ_MAX_ABS_INPUT * 1.0001f;
        BAD_CACHE("kvq_cache_append", kvq_cache_append(c, k, v), KVQ_ERR_RANGE, 1);
        v[0] = 0.25f;
        {   /* n_pos poked to the limit (2^28 real tokens would need GBs),
               restored before the snapshot comparison                      */
            size_t saved = c->n_pos;
            c->n_pos = KVQ_MAX_POSITIONS;
            EXPECT("kvq_cache_append", kvq_cache_append(c, k, v), KVQ_ERR_CAPACITY);
            c->n_pos = saved;
            CHECK(kvq_cache_check(c) == KVQ_OK, "%s after capacity refusal", pname);
        }
        EXPECT("kvq_cache_prefill", kvq_cache_prefill(NULL, K, V, 3), KVQ_ERR_NULL);
        BAD_CACHE("kvq_cache_prefill", kvq_cache_prefill(c, K, NULL, 3), KVQ_ERR_NULL, 1);
        BAD_CACHE("kvq_cache_prefill", kvq_cache_prefill(c, K, V, 0), KVQ_ERR_SIZE, 1);
        BAD_CACHE("kvq_cache_prefill", kvq_cache_prefill(c, K, V, big / 2), KVQ_ERR_OVERFLOW, 1);
        BAD_CACHE("kvq_cache_prefill", kvq_cache_prefill(c, K, V, KVQ_MAX_POSITIONS), KVQ_ERR_CAPACITY, 1);
        K[5 * D + 3] = NAN;            /* a bad value deep inside the prompt */
        BAD_CACHE("kvq_cache_prefill", kvq_cache_prefill(c, K, V, 10), KVQ_ERR_NONFINITE, 1);
        K[5 * D + 3] = 40000.0f;
        BAD_CACHE("kvq_cache_prefill", kvq_cache_prefill(c, K, V, 10), KVQ_ERR_RANGE, 1);
        K[5 * D + 3] = 0.0f; K[5 * D + 3] = rnorm(&r);
        EXPECT("kvq_cache_reserve", kvq_cache_reserve(NULL, 5), KVQ_ERR_NULL);
        BAD_CACHE("kvq_cache_reserve", kvq_cache_reserve(c, 0), KVQ_ERR_SIZE, 1);
        BAD_CACHE("kvq_cache_reserve", kvq_cache_reserve(c, KVQ_MAX_POSITIONS), KVQ_ERR_CAPACITY, 1);
        memset(keep, 1, sizeof keep);
        EXPECT("kvq_cache_evict", kvq_cache_evict(NULL, keep, c->n_pos, NULL), KVQ_ERR_NULL);
        BAD_CACHE("kvq_cache_evict", kvq_cache_evict(c, NULL, c->n_pos, NULL), KVQ_ERR_NULL, 1);
        BAD_CACHE("kvq_cache_evict", kvq_cache_evict(c, keep, c->n_pos + 1, NULL), KVQ_ERR_SIZE, 1);
        if (pol == 2 || pol == 3) {
            keep[7] = 0;
            BAD_CACHE("kvq_cache_evict", kvq_cache_evict(c, keep, c->n_pos, NULL), KVQ_ERR_CONFIG, 1);
            keep[7] = 1;
        }
        EXPECT("kvq_cache_compact", kvq_cache_compact(NULL, 8, NULL), KVQ_ERR_NULL);
        BAD_CACHE("kvq_cache_compact", kvq_cache_compact(c, 0, NULL), KVQ_ERR_SIZE, 1);

        /* every allocation attempt of a growing append, failed in turn     */
        {
            long at;
            int done = 0;
            for (at = 0; at < 32 && !done; at++) {
                snap b, a;
                kvq_status st;
                snap_take(&b, c);
                ta_fail_at = ta_calls + at;
                why_clear();
                st = kvq_cache_prefill(c, K + 60 * D, V + 60 * D, 10);
                ta_fail_at = -1;
                if (st == KVQ_OK) { done = 1; snap_free(&b); break; }
                EXPECT_ST("kvq_cache_prefill", st, KVQ_ERR_NOMEM);
                snap_take(&a, c);
                CHECK(snap_same(&b, &a, D, 0) && kvq_cache_check(c) == KVQ_OK,
                      "%s: prefill failing at attempt %ld changed the cache", pname, at);
                snap_free(&b); snap_free(&a);
            }
            CHECK(done, "%s: prefill never succeeded", pname);
            CHECK(kvq_cache_prefill(&twin, K + 60 * D, V + 60 * D, 10) == KVQ_OK, "twin prefill");
            for (at = 0; at < 4096; at++) {     /* appends: until one grows  */
                kvq_status st;
                ta_fail_at = ta_calls;          /* the first attempt, if any */
                why_clear();
                st = kvq_cache_append(c, k, v);
                ta_fail_at = -1;
                if (st == KVQ_OK) { kvq_cache_append(&twin, k, v); continue; }
                EXPECT_ST("kvq_cache_append", st, KVQ_ERR_NOMEM);
                CHECK(kvq_cache_check(c) == KVQ_OK, "%s after NOMEM append", pname);
                break;
            }
            ta_fail_at = ta_calls;
            EXPECT("kvq_cache_reserve", kvq_cache_reserve(c, 100000), KVQ_ERR_NOMEM);
            ta_fail_at = -1;
        }
        /* the twin never failed: same next append, same everything         */
        CHECK(kvq_cache_append(c, k, v) == KVQ_OK && kvq_cache_append(&twin, k, v) == KVQ_OK,
              "%s: append after failures", pname);
        snap_take(&s1, c); snap_take(&s2, &twin);
        CHECK(snap_same(&s1, &s2, D, 0), "%s: the cache differs from its twin after failures", pname);
        snap_free(&s1); snap_free(&s2);

        /* reads and attention: outputs poisoned                            */
        poison(rd, sizeof rd);
        EXPECT("kvq_cache_read", kvq_cache_read(NULL, 0, 0, rd), KVQ_ERR_NULL);
        EXPECT("kvq_cache_read", kvq_cache_read(c, 0, 0, NULL), KVQ_ERR_NULL);
        EXPECT("kvq_cache_read", kvq_cache_read(c, 2, 0, rd), KVQ_ERR_SIZE);
        EXPECT("kvq_cache_read", kvq_cache_read(c, -1, 0, rd), KVQ_ERR_SIZE);
        EXPECT("kvq_cache_read", kvq_cache_read(c, 1, c->n_pos, rd), KVQ_ERR_STATE);
        CHECK(poisoned(rd, sizeof rd), "%s: kvq_cache_read wrote on failure", pname);
        nw = kvq_attend_scratch_floats(c, KVQ_ATTN_EAGER);
        free(work); work = (float *)malloc(nw * sizeof(float));
        poison(out, sizeof out); poison(probs, sizeof probs);
#define ATT(qq, nq, o, p, mode, w, n) kvq_attend(c, qq, nq, o, p, mode, w, n)
        EXPECT("kvq_attend", kvq_attend(NULL, q, 2, out, NULL, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_NULL);
        EXPECT("kvq_attend", ATT(NULL, 2, out, NULL, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_NULL);
        EXPECT("kvq_attend", ATT(q, 2, NULL, NULL, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_NULL);
        EXPECT("kvq_attend", ATT(q, 2, out, NULL, KVQ_ATTN_EAGER, NULL, nw), KVQ_ERR_NULL);
        EXPECT("kvq_attend", ATT(q, 0, out, NULL, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_SIZE);
        EXPECT("kvq_attend", ATT(q, 2, out, NULL, KVQ_ATTN_EAGER, work, nw - 1), KVQ_ERR_SIZE);
        EXPECT("kvq_attend", ATT(q, 2, out, NULL, (kvq_attn_mode)2, work, nw), KVQ_ERR_CONFIG);
        EXPECT("kvq_attend", ATT(q, 2, out, probs, KVQ_ATTN_ONLINE, work, nw), KVQ_ERR_CONFIG);
        EXPECT("kvq_attend", ATT(q, big / 2, out, NULL, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_OVERFLOW);
        q[D + 3] = NAN;
        EXPECT("kvq_attend", ATT(q, 2, out, probs, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_NONFINITE);
        q[D + 3] = 1e5f;
        EXPECT("kvq_attend", ATT(q, 2, out, probs, KVQ_ATTN_EAGER, work, nw), KVQ_ERR_RANGE);
        q[D + 3] = -KVQ_MAX_ABS_INPUT;        /* the bound itself: finite    */
        CHECK(ATT(q, 2, out, probs, KVQ_ATTN_EAGER, work, nw) == KVQ_OK, "%s: attend at the bound", pname);
        for (i = 0; i < 2 * D; i++) CHECK(isfinite(out[i]), "%s: attention at the q bound not finite", pname);
        poison(out, sizeof out); poison(probs, sizeof probs);
        q[D + 3] = 0.5f;
        EXPECT("kvq_attend", ATT(q, 2, out, probs, KVQ_ATTN_EAGER, work, nw), KVQ_OK);
        CHECK(!poisoned(out, sizeof out), "attend wrote nothing");
        poison(out, sizeof out);
        EXPECT("kvq_cache_bytes", kvq_cache_bytes(NULL, &by), KVQ_ERR_NULL);
        EXPECT("kvq_cache_bytes", kvq_cache_bytes(c, NULL), KVQ_ERR_NULL);
        EXPECT("kvq_cache_census", kvq_cache_census(NULL, &cen), KVQ_ERR_NULL);
        EXPECT("kvq_cache_census", kvq_cache_census(c, NULL), KVQ_ERR_NULL);
        EXPECT("kvq_cache_check", kvq_cache_check(NULL), KVQ_ERR_NULL);
        poison(keep, sizeof keep);
        EXPECT("kvq_cache_present", kvq_cache_present(NULL, keep, c->n_pos), KVQ_ERR_NULL);
        EXPECT("kvq_cache_present", kvq_cache_present(c, NULL, c->n_pos), KVQ_ERR_NULL);
        EXPECT("kvq_cache_present", kvq_cache_present(c, keep, c->n_pos - 1), KVQ_ERR_SIZE);
        CHECK(poisoned(keep, sizeof keep), "%s: kvq_cache_present wrote on failure", pname);
        {   /* a broken invariant, made by hand and undone: position 3's K
               loc claims absence, so one stored row has no position        */
            uint32_t saved = c->k.loc[3];
            c->k.loc[3] = KVQ_LOC_ABSENT;
            why_clear();
            EXPECT("kvq_cache_check", kvq_cache_check(c), KVQ_ERR_STATE);
            CHECK(kvq_why()[0] != '\0', "%s: check gave no reason", pname);
            c->k.loc[3] = saved;
            CHECK(kvq_cache_check(c) == KVQ_OK, "%s: restored", pname);
        }
        {   /* attention on maps corrupted in memory (issue 28, item 8), each
               undone at once: (0) a K window row naming a position past
               the map, which the ONLINE walk would look up in V's map;
               (1) V's map sending the last position to a quantized slot
               that does not exist; (2) the last position present in K and
               absent from V. Both modes must refuse (KVQ_ERR_STATE) and
               write nothing. (3) The last position absent from both maps
               while its rows stay stored, which only the full check sees:
               the walks skip it. In every case nothing is read out of
               bounds (the ASan build checks that).                         */
            kvq_rows *w0 = &c->k.rows[KVQ_ROWS_WINDOW];
            size_t last = c->n_pos - 1, nwo = kvq_attend_scratch_floats(c, KVQ_ATTN_ONLINE);
            float *wk = (float *)malloc((nwo > nw ? nwo : nw) * sizeof(float));
            int cse, mode;
            for (cse = 0; cse < 4; cse++) {
                int32_t saved_pos = 0;
                uint32_t saved_loc = c->v.loc[last], saved_k = c->k.loc[last];
                if (cse == 0 && w0->n == 0) continue;
                if (cse == 0) {
                    saved_pos = w0->pos[w0->off];
                    w0->pos[w0->off] = (int32_t)(c->n_pos + 100000);
                }
                if (cse == 1) c->v.loc[last] = (KVQ_LOC_QUANT << 28) | 0x0FFFFFFFu;
                if (cse >= 2) c->v.loc[last] = KVQ_LOC_ABSENT;
                if (cse == 3) c->k.loc[last] = KVQ_LOC_ABSENT;
                for (mode = 0; mode < 2; mode++) {
                    kvq_attn_mode m = mode ? KVQ_ATTN_ONLINE : KVQ_ATTN_EAGER;
                    if (cse == 3) {
                        kvq_status got = ATT(q, 2, out, NULL, m, wk, mode ? nwo : nw);
                        CHECK(got == KVQ_OK || got == KVQ_ERR_STATE, "%s: corrupt map %d, "
                              "mode %d: %s", pname, cse, mode, kvq_status_str(got));
                        continue;
                    }
                    poison(out, sizeof out);
                    EXPECT("kvq_attend", ATT(q, 2, out, NULL, m, wk, mode ? nwo : nw), KVQ_ERR_STATE);
                    CHECK(poisoned(out, sizeof out), "%s: corrupt map %d, mode %d: attend wrote",
                          pname, cse, mode);
                }
                if (cse == 0) w0->pos[w0->off] = saved_pos;
                c->v.loc[last] = saved_loc;
                c->k.loc[last] = saved_k;
                CHECK(kvq_cache_check(c) == KVQ_OK, "%s: map %d restored", pname, cse);
            }
            free(wk);
            poison(out, sizeof out);
        }

        /* a cache never initialized (zeroed) or freed                      */
        memset(&zero, 0, sizeof zero);
        {
            kvq_cache *z = &zero;
            EXPECT("kvq_cache_append", kvq_cache_append(z, k, v), KVQ_ERR_STATE);
            EXPECT("kvq_cache_prefill", kvq_cache_prefill(z, K, V, 4), KVQ_ERR_STATE);
            EXPECT("kvq_cache_reserve", kvq_cache_reserve(z, 4), KVQ_ERR_STATE);
            EXPECT("kvq_cache_evict", kvq_cache_evict(z, keep, 0, NULL), KVQ_ERR_STATE);
            EXPECT("kvq_cache_compact", kvq_cache_compact(z, 8, NULL), KVQ_ERR_STATE);
            EXPECT("kvq_cache_check", kvq_cache_check(z), KVQ_ERR_STATE);
            CHECK(z->n_pos == 0 && z->k.loc == NULL && z->cap_pos == 0,
                  "a refused zeroed cache grew");
        }
        kvq_cache_free(&twin);
        CHECK(kvq_cache_init(&twin, &cfg) == KVQ_OK, "empty twin");
        {
            kvq_cache *save = c;
            c = &twin;
            nw = kvq_attend_scratch_floats(c, KVQ_ATTN_ONLINE);
            EXPECT("kvq_attend", ATT(q, 1, out, NULL, KVQ_ATTN_ONLINE, work, nw), KVQ_ERR_STATE);
            CHECK(poisoned(out, sizeof out), "attend on an empty cache wrote");
            c = save;
        }
        kvq_cache_free(&twin);
        kvq_cache_free(&cache);
        EXPECT("kvq_cache_append", kvq_cache_append(&cache, k, v), KVQ_ERR_STATE);
        CHECK(cache.k.loc == NULL, "append on a freed cache allocated");
        free(K); free(V); free(work);
    }
    CHECK(ta_live == 0 && !ta_broken, "allocator ledger: %ld live blocks, broken %d", ta_live, ta_broken);
}

/* ------------------------------------------------------------------------ */
/* 4. dense attention, eviction policies                                    */
/* ------------------------------------------------------------------------ */
static void test_dense_and_policies(void)
{
    float K[8 * 4], V[8 * 4], q[4] = { 0.1f, 0.2f, -0.3f, 0.4f }, out[4], probs[2 * 8];
    float score[8], pr[2 * 8];
    uint8_t present[8], keep[8];
    size_t i, big = (size_t)1 << 33;
    for (i = 0; i < 32; i++) { K[i] = (float)(i % 5) - 2.0f; V[i] = (float)(i % 3); }
    poison(out, sizeof out); poison(probs, sizeof probs);
    EXPECT("kvq_attend_dense", kvq_attend_dense(NULL, V, 8, 4, q, 1, out, NULL), KVQ_ERR_NULL);
    EXPECT("kvq_attend_dense", kvq_attend_dense(K, V, 0, 4, q, 1, out, NULL), KVQ_ERR_SIZE);
    EXPECT("kvq_attend_dense", kvq_attend_dense(K, V, 8, 4, q, 0, out, NULL), KVQ_ERR_SIZE);
    EXPECT("kvq_attend_dense", kvq_attend_dense(K, V, (size_t)-1 / 4, 1, q, 1, out, NULL), KVQ_ERR_OVERFLOW);
    EXPECT("kvq_attend_dense", kvq_attend_dense(K, V, 8, 4, q, (size_t)-1 / 4 + 1, out, NULL), KVQ_ERR_OVERFLOW);
    V[9] = INFINITY;
    EXPECT("kvq_attend_dense", kvq_attend_dense(K, V, 8, 4, q, 1, out, probs), KVQ_ERR_NONFINITE);
    V[9] = 0.0f;
    ta_fail_at = ta_calls;
    EXPECT("kvq_attend_dense", kvq_attend_dense(K, V, 8, 4, q, 1, out, probs), KVQ_ERR_NOMEM);
    ta_fail_at = -1;
    CHECK(poisoned(out, sizeof out) && poisoned(probs, sizeof probs), "attend_dense wrote on failure");

    for (i = 0; i < 8; i++) { present[i] = i != 2; score[i] = (float)(i * 3 % 7); }
    for (i = 0; i < 16; i++) pr[i] = 0.0625f;
    poison(keep, sizeof keep);
    EXPECT("kvq_evict_streaming", kvq_evict_streaming(present, 8, 1, 2, NULL), KVQ_ERR_NULL);
    EXPECT("kvq_evict_streaming", kvq_evict_streaming(present, 0, 1, 2, keep), KVQ_ERR_SIZE);
    EXPECT("kvq_evict_h2o", kvq_evict_h2o(NULL, present, 8, 2, 2, keep), KVQ_ERR_NULL);
    EXPECT("kvq_evict_h2o", kvq_evict_h2o(score, NULL, 8, 2, 2, keep), KVQ_ERR_NULL);
    EXPECT("kvq_evict_h2o", kvq_evict_h2o(score, present, 0, 2, 2, keep), KVQ_ERR_SIZE);
    score[4] = NAN;
    EXPECT("kvq_evict_h2o", kvq_evict_h2o(score, present, 8, 2, 2, keep), KVQ_ERR_NONFINITE);
    EXPECT("kvq_evict_snapkv", kvq_evict_snapkv(score, 8, 2, 4, keep), KVQ_ERR_NONFINITE);
    score[4] = 1.0f;
    EXPECT("kvq_evict_snapkv", kvq_evict_snapkv(NULL, 8, 2, 4, keep), KVQ_ERR_NULL);
    EXPECT("kvq_evict_snapkv", kvq_evict_snapkv(score, 8, 2, 1, keep), KVQ_ERR_SIZE);
    EXPECT("kvq_evict_snapkv", kvq_evict_snapkv(score, 8, 9, 9, keep), KVQ_ERR_SIZE);
    CHECK(poisoned(keep, sizeof keep), "an eviction policy wrote its mask on failure");

    memcpy(out, score, sizeof out);
    poison(score, sizeof score);
    EXPECT("kvq_h2o_accumulate", kvq_h2o_accumulate(NULL, pr, 2, 8), KVQ_ERR_NULL);
    EXPECT("kvq_h2o_accumulate", kvq_h2o_accumulate(score, NULL, 2, 8), KVQ_ERR_NULL);
    EXPECT("kvq_h2o_accumulate", kvq_h2o_accumulate(score, pr, 0, 8), KVQ_ERR_SIZE);
    EXPECT("kvq_h2o_accumulate", kvq_h2o_accumulate(score, pr, big, big), KVQ_ERR_OVERFLOW);
    pr[15] = -0.0625f;
    EXPECT("kvq_h2o_accumulate", kvq_h2o_accumulate(score, pr, 2, 8), KVQ_ERR_NONFINITE);
    pr[15] = NAN;
    EXPECT("kvq_h2o_accumulate", kvq_h2o_accumulate(score, pr, 2, 8), KVQ_ERR_NONFINITE);
    CHECK(poisoned(score, sizeof score), "h2o_accumulate changed the scores on failure");
    {   /* kvq_rotate refuses and leaves X as it was                       */
        float X[2 * 8], X0[2 * 8];
        size_t j;
        for (j = 0; j < 16; j++) X[j] = X0[j] = (float)j - 7.5f;
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 8, 0, NULL, 2), KVQ_ERR_NULL);
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 12, 0, X, 1), KVQ_ERR_SIZE);
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 8, 0, X, 0), KVQ_ERR_SIZE);
        EXPECT("kvq_rotate", kvq_rotate((kvq_rotation)3, 0, 8, 0, X, 2), KVQ_ERR_CONFIG);
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 8, 2, X, 2), KVQ_ERR_CONFIG);
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 8, 0, X, (size_t)-1 / 4), KVQ_ERR_OVERFLOW);
        /* finite rows near FLT_MAX: row 1 overflows once rotated (8 x 1e38
           sum to 8e38); checking it needs a scratch row, so a failing
           allocator is NOMEM                                               */
        for (j = 8; j < 16; j++) X[j] = X0[j] = 1e38f;
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 8, 1, X, 2), KVQ_ERR_RANGE);
        ta_fail_at = ta_calls;
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD, 0, 8, 0, X, 2), KVQ_ERR_NOMEM);
        ta_fail_at = -1;
        X[13] = NAN;  X0[13] = NAN;
        EXPECT("kvq_rotate", kvq_rotate(KVQ_ROT_HADAMARD_SIGNS, 5, 8, 0, X, 2), KVQ_ERR_NONFINITE);
        CHECK(memcmp(X, X0, sizeof X) == 0, "a refused kvq_rotate changed X");
    }
    EXPECT("kvq_snapkv_scores", kvq_snapkv_scores(NULL, 2, 8, 3, KVQ_POOL_AVG, score), KVQ_ERR_NULL);
    EXPECT("kvq_snapkv_scores", kvq_snapkv_scores(pr, 2, 8, 4, KVQ_POOL_AVG, score), KVQ_ERR_SIZE);
    EXPECT("kvq_snapkv_scores", kvq_snapkv_scores(pr, 9, 8, 3, KVQ_POOL_AVG, score), KVQ_ERR_SIZE);
    EXPECT("kvq_snapkv_scores", kvq_snapkv_scores(pr, 2, 8, 3, (kvq_pooling)9, score), KVQ_ERR_CONFIG);
    EXPECT("kvq_snapkv_scores", kvq_snapkv_scores(pr, big, big, 3, KVQ_POOL_MAX, score), KVQ_ERR_OVERFLOW);
    EXPECT("kvq_snapkv_scores", kvq_snapkv_scores(pr, 2, 8, 3, KVQ_POOL_MAX, score), KVQ_ERR_NONFINITE);
    CHECK(poisoned(score, sizeof score), "snapkv_scores wrote on failure");
}

/* ------------------------------------------------------------------------ */
/* 5. .npy (examples/npy.h: not in kvq.h's table, checked the same way)   */
/* ------------------------------------------------------------------------ */
static size_t npy_image(unsigned char *buf, const char *dict, size_t payload)
{
    size_t dl = strlen(dict), hlen = dl + 1, i;
    while ((10 + hlen) % 64) hlen++;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hlen; buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, dict, dl);
    memset(buf + 10 + dl, ' ', hlen - dl - 1);
    buf[10 + hlen - 1] = '\n';
    for (i = 0; i < payload; i++) buf[10 + hlen + i] = (unsigned char)i;
    return 10 + hlen + payload;
}

#define NPY_EXPECT(fn, call, want)                                             \
    CHECK((call) == (want), "%s: expected %s", fn, #want)

static void test_npy(void)
{
    unsigned char img[512];
    char path[96], dir[64];
    npy_array a;
    size_t n_ok, n_huge, n_empty, shape[2] = { 2, 3 }, hshape[2] = { (size_t)1 << 40, (size_t)1 << 40 };
    float data[6] = { 1, 2, 3, 4, 5, 6 };
    FILE *f;
    n_ok = npy_image(img, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    poison(&a, sizeof a);
    NPY_EXPECT("npy_parse", npy_parse(NULL, n_ok, &a), KVQ_ERR_NULL);
    NPY_EXPECT("npy_parse", npy_parse(img, n_ok, NULL), KVQ_ERR_NULL);
    NPY_EXPECT("npy_parse", npy_parse(img, n_ok - 1, &a), KVQ_ERR_FORMAT);
    img[1] = 'X';
    NPY_EXPECT("npy_parse", npy_parse(img, n_ok, &a), KVQ_ERR_FORMAT);
    img[1] = 'N';
    ta_fail_at = ta_calls;
    NPY_EXPECT("npy_parse", npy_parse(img, n_ok, &a), KVQ_ERR_NOMEM);
    ta_fail_at = -1;
    CHECK(poisoned(&a, sizeof a), "npy_parse wrote on failure");
    CHECK(npy_parse(img, n_ok, &a) == KVQ_OK && a.count == 6, "a valid .npy");
    npy_free(&a);
    n_huge = npy_image(img, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", 0);
    poison(&a, sizeof a);
    NPY_EXPECT("npy_parse", npy_parse(img, n_huge, &a), KVQ_ERR_OVERFLOW);
    n_empty = npy_image(img + 256, "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 0), }", 0);
    NPY_EXPECT("npy_parse", npy_parse(img + 256, n_empty, &a), KVQ_ERR_SIZE);
    CHECK(poisoned(&a, sizeof a), "npy_parse wrote on failure");

    /* files                                                                */
    snprintf(dir, sizeof dir, "/tmp/kvq_status_%ld", (long)getpid());
    snprintf(path, sizeof path, "%s.npy", dir);
    NPY_EXPECT("npy_load", npy_load(NULL, &a), KVQ_ERR_NULL);
    NPY_EXPECT("npy_load", npy_load(path, NULL), KVQ_ERR_NULL);
    NPY_EXPECT("npy_load", npy_load("/nonexistent/kvq/x.npy", &a), KVQ_ERR_IO);
    NPY_EXPECT("npy_load", npy_load("/tmp", &a), KVQ_ERR_IO);            /* a directory */
    f = fopen(path, "wb"); fwrite(img, 1, n_huge, f); fclose(f);
    NPY_EXPECT("npy_load", npy_load(path, &a), KVQ_ERR_OVERFLOW);
    f = fopen(path, "wb"); fwrite(img + 256, 1, n_empty, f); fclose(f);
    NPY_EXPECT("npy_load", npy_load(path, &a), KVQ_ERR_SIZE);
    f = fopen(path, "wb"); fwrite(img + 256, 1, n_empty - 3, f); fclose(f);
    NPY_EXPECT("npy_load", npy_load(path, &a), KVQ_ERR_FORMAT);
    CHECK(poisoned(&a, sizeof a), "npy_load wrote on failure");
    NPY_EXPECT("npy_save", npy_save(NULL, data, shape, 2), KVQ_ERR_NULL);
    NPY_EXPECT("npy_save", npy_save(path, NULL, shape, 2), KVQ_ERR_NULL);
    NPY_EXPECT("npy_save", npy_save(path, data, shape, 0), KVQ_ERR_SIZE);
    NPY_EXPECT("npy_save", npy_save(path, data, shape, 5), KVQ_ERR_SIZE);
    NPY_EXPECT("npy_save", npy_save(path, data, hshape, 2), KVQ_ERR_OVERFLOW);
    NPY_EXPECT("npy_save", npy_save("/nonexistent/kvq/x.npy", data, shape, 2), KVQ_ERR_IO);
    if (access("/dev/full", W_OK) == 0)            /* every write fails     */
        NPY_EXPECT("npy_save", npy_save("/dev/full", data, shape, 2), KVQ_ERR_IO);
    CHECK(npy_save(path, data, shape, 2) == KVQ_OK, "a valid save");
    {   /* each allocation of a load, failed in turn                        */
        long at;
        for (at = 0; at < 2; at++) {
            ta_fail_at = ta_calls + at;
            NPY_EXPECT("npy_load", npy_load(path, &a), KVQ_ERR_NOMEM);
            ta_fail_at = -1;
        }
        CHECK(poisoned(&a, sizeof a), "npy_load wrote on NOMEM");
        CHECK(npy_load(path, &a) == KVQ_OK && a.count == 6 && a.data[5] == 6.0f, "load back");
        npy_free(&a);
    }
    remove(path);
}

/* ------------------------------------------------------------------------ */
/* 6. pages and sequences: a refused call changes no table, count or byte   */
/* ------------------------------------------------------------------------ */
typedef struct { size_t n_free, n_blocks, n_slots; uint32_t ref[8], table[8]; uint8_t alive[32]; } pstate;
static void pstate_take(pstate *s, const kvq_pages *P, const kvq_pseq *S)
{
    memset(s, 0, sizeof *s);
    s->n_free = P->n_free; s->n_blocks = S->n_blocks; s->n_slots = S->n_slots;
    memcpy(s->ref, P->refcount, P->n_blocks * sizeof(uint32_t));
    if (S->n_blocks) memcpy(s->table, S->table, S->n_blocks * sizeof(uint32_t));
    if (S->n_slots) memcpy(s->alive, S->alive, S->n_slots);
}
#define BAD_SEQ(fn, call, want)                                               \
    do {                                                                      \
        pstate b_, a_;                                                        \
        pstate_take(&b_, &P, &S);                                             \
        EXPECT(fn, call, want);                                               \
        pstate_take(&a_, &P, &S);                                             \
        CHECK(memcmp(&b_, &a_, sizeof b_) == 0, "failed %s changed the pool", fn); \
    } while (0)

static void test_pages(void)
{
    kvq_pages P, Q;
    kvq_pseq S, F, E;
    kvq_page_stats st;
    uint8_t keep[32], payload[4] = { 1, 2, 3, 4 };
    size_t i;
    poison(&Q, sizeof Q);
    EXPECT("kvq_pages_init", kvq_pages_init(NULL, 4, 4, 4), KVQ_ERR_NULL);
    EXPECT("kvq_pages_init", kvq_pages_init(&Q, 0, 4, 4), KVQ_ERR_SIZE);
    EXPECT("kvq_pages_init", kvq_pages_init(&Q, 4, 0, 4), KVQ_ERR_SIZE);
    EXPECT("kvq_pages_init", kvq_pages_init(&Q, 2, (size_t)-1 / 2 + 1, 4), KVQ_ERR_OVERFLOW);
    for (i = 0; i < 3; i++) {
        ta_fail_at = ta_calls + (long)i;
        EXPECT("kvq_pages_init", kvq_pages_init(&Q, 4, 4, 4), KVQ_ERR_NOMEM);
        ta_fail_at = -1;
    }
    CHECK(poisoned(&Q, sizeof Q), "pages_init wrote on failure");
    /* zero-byte slots, but the sequences' position tables would overflow  */
    EXPECT("kvq_pages_init", kvq_pages_init(&Q, 2, (size_t)1 << 62, 0), KVQ_ERR_OVERFLOW);
    CHECK(poisoned(&Q, sizeof Q), "pages_init wrote on failure");
    kvq_pseq_init(&E);

    CHECK(kvq_pages_init(&P, 8, 4, 4) == KVQ_OK, "pool");
    kvq_pseq_init(&S); kvq_pseq_init(&F);
    for (i = 0; i < 10; i++) kvq_pseq_append(&P, &S, (int32_t)i, payload);
    EXPECT("kvq_pseq_append", kvq_pseq_append(NULL, &S, 0, NULL), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_append", kvq_pseq_append(&P, NULL, 0, NULL), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_append", kvq_pseq_append(&P, &S, -1, payload), KVQ_ERR_SIZE);
    EXPECT("kvq_pseq_fork", kvq_pseq_fork(NULL, &F, &S), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_fork", kvq_pseq_fork(&P, &F, NULL), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_fork", kvq_pseq_fork(&P, &S, &S), KVQ_ERR_STATE);
    ta_fail_at = ta_calls;
    BAD_SEQ("kvq_pseq_fork", kvq_pseq_fork(&P, &F, &S), KVQ_ERR_NOMEM);
    ta_fail_at = -1;
    CHECK(kvq_pseq_fork(&P, &F, &S) == KVQ_OK, "fork");               /* 3 shared */
    BAD_SEQ("kvq_pseq_fork", kvq_pseq_fork(&P, &F, &S), KVQ_ERR_STATE);
    memset(keep, 1, sizeof keep);
    poison(&st, sizeof st);
    EXPECT("kvq_pseq_evict", kvq_pseq_evict(NULL, &S, keep, 10, &st), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_evict", kvq_pseq_evict(&P, &S, NULL, 10, &st), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_evict", kvq_pseq_evict(&P, &S, keep, 11, &st), KVQ_ERR_SIZE);
    EXPECT("kvq_pseq_repack", kvq_pseq_repack(NULL, &S, 0, &st), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_repack", kvq_pseq_repack(&P, &S, 2, &st), KVQ_ERR_SIZE);
    BAD_SEQ("kvq_pseq_repack", kvq_pseq_repack(&P, &S, 16, &st), KVQ_ERR_SIZE);
    BAD_SEQ("kvq_pseq_repack", kvq_pseq_repack(&P, &S, 4, &st), KVQ_ERR_STATE);
    EXPECT("kvq_pseq_holefill", kvq_pseq_holefill(&P, NULL, 0, 4, &st), KVQ_ERR_NULL);
    BAD_SEQ("kvq_pseq_holefill", kvq_pseq_holefill(&P, &S, 8, 4, &st), KVQ_ERR_SIZE);
    BAD_SEQ("kvq_pseq_holefill", kvq_pseq_holefill(&P, &S, 0, 4, &st), KVQ_ERR_STATE);
    CHECK(poisoned(&st, sizeof st), "a refused page call wrote its stats");
    /* copy on write with no free block: S's last block (2 of 4 slots) is
       shared with F; the pool's remaining blocks go to S first            */
    while (P.n_free > 0) kvq_pseq_append(&P, &S, 50, payload);
    while (S.n_slots % 4) kvq_pseq_append(&P, &S, 60, payload);
    BAD_SEQ("kvq_pseq_append", kvq_pseq_append(&P, &S, 99, payload), KVQ_ERR_CAPACITY);
    {   /* G shares F's partly filled last block (slots 8, 9): writing
           slot 10 needs a private copy, and the pool has no block left    */
        kvq_pseq G;
        pstate b, a;
        kvq_pseq_init(&G);
        CHECK(kvq_pseq_fork(&P, &G, &F) == KVQ_OK && F.n_slots % 4 != 0, "fork of F");
        pstate_take(&b, &P, &G);
        EXPECT("kvq_pseq_append", kvq_pseq_append(&P, &G, 77, payload), KVQ_ERR_CAPACITY);
        pstate_take(&a, &P, &G);
        CHECK(memcmp(&a, &b, sizeof a) == 0, "refused copy on write changed the pool");
        kvq_pseq_free(&P, &G);
    }
    /* a block table that must grow, with its allocation failed           */
    CHECK(kvq_pages_init(&Q, 64, 1, 4) == KVQ_OK, "pool of single-slot blocks");
    for (i = 0; i < 64; i++) {
        kvq_status e;
        pstate b, a;
        pstate_take(&b, &P, &S);
        ta_fail_at = ta_calls;
        why_clear();
        e = kvq_pseq_append(&Q, &E, (int32_t)i, payload);
        ta_fail_at = -1;
        if (e == KVQ_OK) continue;
        EXPECT_ST("kvq_pseq_append", e, KVQ_ERR_NOMEM);
        CHECK(E.n_slots == i && E.n_blocks == i && Q.n_free == 64 - i,
              "a NOMEM append changed the sequence or the pool");
        pstate_take(&a, &P, &S);
        CHECK(memcmp(&a, &b, sizeof a) == 0, "another pool changed");
        CHECK(kvq_pseq_append(&Q, &E, (int32_t)i, payload) == KVQ_OK, "append after NOMEM");
    }
    kvq_pseq_free(&Q, &E);
    kvq_pages_free(&Q);
    {   /* a pool never initialized (zeroed) or already freed: every call
           is STATE or a safe no-op, never a division by block_tokens = 0
           or a read of a NULL table (issue 16's SIGFPE); S is untouched   */
        kvq_pages Z;
        kvq_pseq T, U;
        size_t n_slots = S.n_slots, n_blocks = S.n_blocks;
        memset(&Z, 0, sizeof Z);
        kvq_pseq_init(&U);
        EXPECT("kvq_pseq_append", kvq_pseq_append(&Z, &S, 0, payload), KVQ_ERR_STATE);
        EXPECT("kvq_pseq_fork", kvq_pseq_fork(&Z, &U, &S), KVQ_ERR_STATE);
        EXPECT("kvq_pseq_evict", kvq_pseq_evict(&Z, &S, keep, S.n_slots, &st), KVQ_ERR_STATE);
        EXPECT("kvq_pseq_repack", kvq_pseq_repack(&Z, &S, 0, &st), KVQ_ERR_STATE);
        EXPECT("kvq_pseq_holefill", kvq_pseq_holefill(&Z, &S, 0, 4, &st), KVQ_ERR_STATE);
        CHECK(kvq_why()[0] != '\0', "a dead pool's refusal gave no reason");
        CHECK(kvq_pseq_slot(&Z, &S, 0) == NULL, "slot of a dead pool");
        CHECK(kvq_pseq_private_start(&Z, &S) == 0, "private start of a dead pool");
        CHECK(S.n_slots == n_slots && S.n_blocks == n_blocks && U.n_blocks == 0,
              "a call on a dead pool changed a sequence");
        /* a sequence that outlives its pool: freeing it frees its tables
           (ASan/valgrind see a leak otherwise) and touches no pool table  */
        CHECK(kvq_pages_init(&Q, 4, 4, 4) == KVQ_OK, "short-lived pool");
        kvq_pseq_init(&T);
        for (i = 0; i < 6; i++) CHECK(kvq_pseq_append(&Q, &T, (int32_t)i, payload) == KVQ_OK, "append");
        kvq_pages_free(&Q);
        EXPECT("kvq_pseq_append", kvq_pseq_append(&Q, &T, 6, payload), KVQ_ERR_STATE);
        kvq_pseq_free(&Q, &T);
        CHECK(T.table == NULL && T.n_blocks == 0, "freed sequence");
        kvq_pseq_free(&Z, &U);
    }
    kvq_pseq_free(&P, &S); kvq_pseq_free(&P, &F); kvq_pseq_free(&P, &E);
    CHECK(P.n_free == P.n_blocks, "every block back in the pool");
    kvq_pages_free(&P);
}

/* ------------------------------------------------------------------------ */
/* 7. the table, seen from the other side: every listed pair was produced   */
/* ------------------------------------------------------------------------ */
static void test_table_covered(void)
{
    int s, i, missing = 0, pairs = 0;
    for (s = 1; s < KVQ_STATUS_COUNT; s++) {
        int any = 0;
        for (i = 0; i < n_fn; i++) {
            if (listed[s][i]) any = 1;
            if (!listed[s][i] || (listed[s][i] == 2 && sizeof(size_t) > 4)) continue;
            pairs++;
            if (!seen[s][i]) {
                missing++;
                CHECK(0, "kvq.h lists %s for %s, but no test here produced it",
                      status_name[s], fn_name[i]);
            }
        }
        /* FORMAT and IO belong to examples/npy.h; kvq.h reads no files    */
        CHECK(any || s == KVQ_ERR_FORMAT || s == KVQ_ERR_IO,
              "kvq.h's table has no function for %s", status_name[s]);
    }
    printf("test_status: %d (status, function) pairs in kvq.h's table, %d produced\n",
           pairs, pairs - missing);
}

/* ------------------------------------------------------------------------ */
/* kvq_why(): successes leave it alone                                      */
/* ------------------------------------------------------------------------ */
/* A failure sets a reason; then every policy runs a whole successful life
   (init, prefill, appends, both attention modes, read-back, accounting,
   eviction and compaction where the policy allows them, a page pool with
   a fork): the reason must come back byte for byte.                      */
static void test_why_kept_on_success(void)
{
    char before[sizeof kvq__why_buf];
    int pol;
    CHECK(kvq_pack(NULL, 8, 2, NULL) == KVQ_ERR_NULL && kvq_why()[0] != '\0', "a reason is set");
    memcpy(before, kvq_why(), sizeof before);
    for (pol = 0; pol < 5; pol++) {
        const size_t D = 64, T = 150;
        kvq_hf_params hp = kvq_hf_defaults(2);
        kvq_config cfg = pol == 0 ? kvq_config_kivi(D, 2) : pol == 1 ? kvq_config_hf(D, hp)
                       : pol == 2 ? kvq_config_ott(D, 2, 3) : pol == 3 ? kvq_config_logquant(D, 2, 8)
                       : kvq_config_full(D, 16);
        kvq_cache c;
        kvq_bytes by;
        kvq_census ce;
        float *K = (float *)malloc(T * D * sizeof(float)), *V = (float *)malloc(T * D * sizeof(float));
        float q[2 * 64], out[2 * 64], row[64], *work;
        uint8_t *keep = (uint8_t *)malloc(T);
        size_t i, n_work;
        rng r = { 7 };
        for (i = 0; i < T * D; i++) { K[i] = rnorm(&r); V[i] = rnorm(&r); }
        for (i = 0; i < 2 * D; i++) q[i] = rnorm(&r);
        CHECK(kvq_config_validate(&cfg) == KVQ_OK && kvq_cache_init(&c, &cfg) == KVQ_OK &&
              kvq_cache_reserve(&c, T) == KVQ_OK && kvq_cache_prefill(&c, K, V, T / 2) == KVQ_OK,
              "policy %d: build: %s", pol, kvq_why());
        for (i = T / 2; i < T; i++) kvq_cache_append(&c, K + i * D, V + i * D);
        n_work = kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER);
        work = (float *)malloc(n_work * sizeof(float));
        CHECK(kvq_attend(&c, q, 2, out, NULL, KVQ_ATTN_EAGER, work, n_work) == KVQ_OK &&
              kvq_attend(&c, q, 2, out, NULL, KVQ_ATTN_ONLINE, work, n_work) == KVQ_OK &&
              kvq_cache_read(&c, 0, 3, row) == KVQ_OK && kvq_cache_bytes(&c, &by) == KVQ_OK &&
              kvq_cache_census(&c, &ce) == KVQ_OK && kvq_cache_check(&c) == KVQ_OK &&
              kvq_cache_present(&c, keep, c.n_pos) == KVQ_OK, "policy %d: use: %s", pol, kvq_why());
        if (pol == 0 || pol == 1 || pol == 4) {
            CHECK(kvq_evict_streaming(NULL, c.n_pos, 4, 40, keep) == KVQ_OK &&
                  kvq_cache_evict(&c, keep, c.n_pos, NULL) == KVQ_OK &&
                  kvq_cache_compact(&c, 16, NULL) == KVQ_OK, "policy %d: evict, compact", pol);
        }
        CHECK(kvq_attend_dense(K, V, T, D, q, 2, out, NULL) == KVQ_OK, "dense");
        CHECK(memcmp(before, kvq_why(), sizeof before) == 0,
              "policy %d: successful calls changed kvq_why() to \"%s\"", pol, kvq_why());
        kvq_cache_free(&c);
        free(K); free(V); free(keep); free(work);
    }
    {
        kvq_pages P;
        kvq_pseq S, F;
        uint8_t slot[4] = { 1, 2, 3, 4 }, keep[40];
        int32_t p;
        CHECK(kvq_pages_init(&P, 16, 4, 4) == KVQ_OK, "pool");
        kvq_pseq_init(&S); kvq_pseq_init(&F);
        for (p = 0; p < 20; p++) kvq_pseq_append(&P, &S, p, slot);
        for (p = 0; p < 20; p++) keep[p] = (uint8_t)(p % 3 != 0);
        CHECK(kvq_pseq_fork(&P, &F, &S) == KVQ_OK && kvq_pseq_evict(&P, &F, keep, 20, NULL) == KVQ_OK &&
              kvq_pseq_repack(&P, &F, kvq_pseq_private_start(&P, &F), NULL) == KVQ_OK, "pool use");
        CHECK(memcmp(before, kvq_why(), sizeof before) == 0,
              "pages: successful calls changed kvq_why() to \"%s\"", kvq_why());
        kvq_pseq_free(&P, &S); kvq_pseq_free(&P, &F); kvq_pages_free(&P);
    }
}

int main(void)
{
    read_table();
    test_primitives();
    test_configs();
    test_cache_policies();
    test_dense_and_policies();
    test_npy();
    test_pages();
    test_why_kept_on_success();
    if (table_ok) test_table_covered();
    return TEST_END("test_status");
}
