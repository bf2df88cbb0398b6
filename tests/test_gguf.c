/* tests/test_gguf.c - the GGUF reader (examples/llm/gguf.h) on files this test
   writes itself. No model file is needed.

   Groups (each is a function below):
     1. a valid file, v3 and v2, with and without general.alignment: every
        metadata getter, the arrays, the tensor directory and data pointers
     2. fp16 decoding: all 65,536 bit patterns against an IEEE definition
        computed with ldexp, and against kvq.h's kvq_f16_to_f32
     3. dequantization of F32 / F16 / Q4_0 / Q4_1 / Q8_0 against a reference
        written here from the block definitions, and gguf_dot / gguf_matvec
        against a double-precision dot with an a-priori rounding bound
     4. malformed files: truncation at every byte, then one targeted
        corruption per validation rule, each with the reason it must give
     5. byte-flip fuzzing: every byte of the valid file xor a few masks;
        whatever opens must be fully readable (ASan watches)
     6. gguf_open_file on a real file, and on a missing one

   The expected values come from this file's own writer and from the format
   definition (ggml's docs/gguf.md and the block structs of ggml-common.h),
   restated here, never from the reader. -DKVQ_TEST_QUICK (the sanitizer
   build) shrinks the random loops.                                         */
#define _POSIX_C_SOURCE 200809L   /* mkstemp, close */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "test.h"
#include "examples/llm/gguf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_s ^= rng_s >> 12; rng_s ^= rng_s << 25; rng_s ^= rng_s >> 27;
    return rng_s * 0x2545F4914F6CDD1Dull;
}

/* ------------------------------------------------------------------------ */
/* The format, restated independently of the reader.                        */
/* ------------------------------------------------------------------------ */
enum { VT_U8, VT_I8, VT_U16, VT_I16, VT_U32, VT_I32, VT_F32, VT_BOOL, VT_STR,
       VT_ARR, VT_U64, VT_I64, VT_F64 };
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8, T_Q6_K = 14 };

/* (elements, bytes) per block, from ggml-common.h                         */
static uint64_t spec_row_bytes(uint32_t type, uint64_t ne0)
{
    switch (type) {
    case T_F32:  return ne0 * 4;
    case T_F16:  return ne0 * 2;
    case T_Q4_0: return ne0 / 32 * 18;   /* f16 d + 16 nibble bytes         */
    case T_Q4_1: return ne0 / 32 * 20;   /* f16 d, f16 m + 16 bytes         */
    case T_Q8_0: return ne0 / 32 * 34;   /* f16 d + 32 int8                 */
    case T_Q6_K: return ne0 / 256 * 210; /* ql[128] qh[64] scales[16] f16 d */
    }
    return 0;
}

/* IEEE binary16 by definition: (-1)^s * 2^(e-15) * (1 + f/1024), or the
   subnormal 2^-14 * f/1024, or Inf/NaN at e = 31.                          */
static double ref_f16(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    double v;
    if (e == 31) v = f ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)f / 1024.0, -14);
    else v = ldexp(1.0 + (double)f / 1024.0, e - 15);
    return s ? -v : v;
}

/* A random finite fp16 between 2^-10 and 2^10 in magnitude, either sign:
   small exponent spread keeps the double references below exact.          */
static uint16_t rand_f16(void)
{
    uint16_t e = (uint16_t)(5 + rng() % 21), f = (uint16_t)(rng() % 1024);
    return (uint16_t)(((rng() & 1) << 15) | (e << 10) | f);
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* The reference dequantizer: element i of a row of `type`, straight from
   the block definitions (ggml-common.h): block b = i / 32, j = i % 32;
   the 4-bit types keep element j < 16 in the low nibble of qs[j] and
   element j >= 16 in the high nibble of qs[j - 16].                        */
static double ref_elem(uint32_t type, const uint8_t *row, uint64_t i)
{
    uint64_t b = i / 32, j = i % 32;
    const uint8_t *blk;
    int q;
    switch (type) {
    case T_F32: { float f; memcpy(&f, row + 4 * i, 4); return f; }
    case T_F16: return ref_f16(get16(row + 2 * i));
    case T_Q4_0:
        blk = row + 18 * b;
        q = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
        return ref_f16(get16(blk)) * (q - 8);
    case T_Q4_1:
        blk = row + 20 * b;
        q = j < 16 ? (blk[4 + j] & 15) : (blk[4 + j - 16] >> 4);
        return ref_f16(get16(blk)) * q + ref_f16(get16(blk + 2));
    case T_Q8_0:
        blk = row + 34 * b;
        return ref_f16(get16(blk)) * (double)(int8_t)blk[2 + j];
    }
    return NAN;
}

/* Random bytes for n elements of `type`, with every fp16 scale/min/value a
   finite rand_f16 (codes stay random).                                     */
static void fill_row(uint32_t type, uint8_t *row, uint64_t n)
{
    uint64_t i, nbytes = spec_row_bytes(type, n);
    for (i = 0; i < nbytes; i++) row[i] = (uint8_t)rng();
    for (i = 0; i < n; i++) {
        uint16_t h;
        if (type == T_F32) {
            float f = (float)((double)(int64_t)(rng() % 2001) / 250.0 - 4.0);
            memcpy(row + 4 * i, &f, 4);
        } else if (type == T_F16) {
            h = rand_f16(); row[2 * i] = (uint8_t)h; row[2 * i + 1] = (uint8_t)(h >> 8);
        } else if (i % 32 == 0 && type != T_Q6_K) {
            uint64_t bb = spec_row_bytes(type, 32) * (i / 32);
            h = rand_f16(); row[bb] = (uint8_t)h; row[bb + 1] = (uint8_t)(h >> 8);
            if (type == T_Q4_1) {
                h = rand_f16(); row[bb + 2] = (uint8_t)h; row[bb + 3] = (uint8_t)(h >> 8);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* A tiny GGUF writer. It records where each field went ("marks"), so the
   malformed-file battery can corrupt exactly one field of a valid file.    */
/* ------------------------------------------------------------------------ */
typedef struct wbuf { uint8_t *p; size_t n, cap; } wbuf;

static void w_bytes(wbuf *w, const void *src, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->p = (uint8_t *)realloc(w->p, w->cap);
        if (!w->p) { puts("out of memory"); exit(1); }
    }
    if (n) memcpy(w->p + w->n, src, n);
    w->n += n;
}
static void w_le(wbuf *w, uint64_t v, int n)
{
    uint8_t b[8];
    int i;
    for (i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, (size_t)n);
}
static void w_str(wbuf *w, const char *s, size_t n) { w_le(w, n, 8); w_bytes(w, s, n); }
static void put_le(uint8_t *p, uint64_t v, int n)
{
    int i;
    for (i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#define N_KV_MAX 20
#define N_T 6
typedef struct marks {
    size_t version, n_tensors, kv_count;   /* header field positions */
    size_t key_len[N_KV_MAX], vtype[N_KV_MAX], value[N_KV_MAX];
    size_t arr_type[N_KV_MAX], arr_n[N_KV_MAX];
    size_t t_name[N_T], t_ndims[N_T], t_dim[N_T], t_type[N_T], t_off[N_T];
    size_t data_start;
    int kv_align, kv_u8, kv_bool, kv_tokens, kv_arch;   /* kv indices */
    int n_kv;                                            /* written so far */
} marks;

/* The tensors of the valid file: names of equal length (so one patched byte
   can make two equal), every supported type, 1 to 4 dims, and a Q6_K the
   reader knows the size of but does not dequantize, written last so that
   the file ends exactly where its data ends.                               */
typedef struct tspec { const char *name; uint32_t type, n_dims; uint64_t ne[4]; } tspec;
static const tspec TS[N_T] = {
    {"w.f32", T_F32, 1, {8, 1, 1, 1}},   {"w.f16", T_F16, 2, {32, 2, 1, 1}},
    {"w.q40", T_Q4_0, 2, {64, 2, 1, 1}}, {"w.q41", T_Q4_1, 2, {32, 3, 1, 1}},
    {"w.q80", T_Q8_0, 4, {32, 2, 1, 2}}, {"w.q6k", T_Q6_K, 1, {256, 1, 1, 1}},
};
static uint8_t tdata[N_T][512];   /* each tensor's bytes, as written        */

static uint64_t ts_elems(const tspec *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
static uint64_t ts_bytes(const tspec *t) { return spec_row_bytes(t->type, t->ne[0]) * (ts_elems(t) / t->ne[0]); }

/* The metadata values of the valid file.                                    */
static const char *const TOKENS[5] = {"a", "bc", "", "<s>", "\xC3\xA9"};
static const int32_t TYPES[5] = {1, -2, 3, 2147483647, -2147483647 - 1};
static const float SCORES[5] = {0.5f, -1.25f, 3.0f, 0.0f, -0.0f};

static void w_key(wbuf *w, marks *m, const char *key, uint32_t vt)
{
    int k = m->n_kv++;
    m->key_len[k] = w->n;
    w_str(w, key, strlen(key));
    m->vtype[k] = w->n;
    w_le(w, vt, 4);
    m->value[k] = w->n;
}
static void w_arr_head(wbuf *w, marks *m, uint32_t et, uint64_t n)
{
    m->arr_type[m->n_kv - 1] = w->n;
    w_le(w, et, 4);
    m->arr_n[m->n_kv - 1] = w->n;
    w_le(w, n, 8);
}

/* Write the valid file: version, and general.alignment (0: key absent, so
   the default 32 applies). Tensor data is regenerated from the RNG.        */
static void make_file(wbuf *w, marks *m, uint32_t version, uint32_t align_key)
{
    uint64_t align = align_key ? align_key : 32, off[N_T], end = 0;
    int i, j;
    memset(m, 0, sizeof *m);
    w->n = 0;
    for (i = 0; i < N_T; i++) {
        fill_row(TS[i].type, tdata[i], ts_elems(&TS[i]));
        off[i] = (end + align - 1) / align * align;
        end = off[i] + ts_bytes(&TS[i]);
    }
    w_bytes(w, "GGUF", 4);
    m->version = w->n;   w_le(w, version, 4);
    m->n_tensors = w->n; w_le(w, N_T, 8);
    m->kv_count = w->n;   w_le(w, 0, 8);   /* patched below         */

    m->kv_arch = m->n_kv; w_key(w, m, "general.architecture", VT_STR); w_str(w, "llama", 5);
    if (align_key) {
        m->kv_align = m->n_kv; w_key(w, m, "general.alignment", VT_U32); w_le(w, align_key, 4);
    } else m->kv_align = -1;
    m->kv_u8 = m->n_kv;
    w_key(w, m, "test.u8", VT_U8);   w_le(w, 200, 1);
    w_key(w, m, "test.i8", VT_I8);   w_le(w, (uint64_t)-5, 1);
    w_key(w, m, "test.u16", VT_U16); w_le(w, 60000, 2);
    w_key(w, m, "test.i16", VT_I16); w_le(w, (uint64_t)-300, 2);
    w_key(w, m, "test.u32", VT_U32); w_le(w, 4000000000u, 4);
    w_key(w, m, "test.i32", VT_I32); w_le(w, (uint64_t)-7, 4);
    { float f = 0.15625f; uint32_t u; memcpy(&u, &f, 4);
      w_key(w, m, "test.f32", VT_F32); w_le(w, u, 4); }
    m->kv_bool = m->n_kv;
    w_key(w, m, "test.bool", VT_BOOL); w_le(w, 1, 1);
    w_key(w, m, "test.u64", VT_U64); w_le(w, (1ull << 40) + 3, 8);
    w_key(w, m, "test.i64", VT_I64); w_le(w, (uint64_t)-(1ll << 40), 8);
    { double d = 0.1; uint64_t u; memcpy(&u, &d, 8);
      w_key(w, m, "test.f64", VT_F64); w_le(w, u, 8); }
    m->kv_tokens = m->n_kv;
    w_key(w, m, "tok.tokens", VT_ARR); w_arr_head(w, m, VT_STR, 5);
    for (j = 0; j < 5; j++) w_str(w, TOKENS[j], strlen(TOKENS[j]));
    w_key(w, m, "tok.types", VT_ARR); w_arr_head(w, m, VT_I32, 5);
    for (j = 0; j < 5; j++) w_le(w, (uint32_t)TYPES[j], 4);
    w_key(w, m, "tok.scores", VT_ARR); w_arr_head(w, m, VT_F32, 5);
    for (j = 0; j < 5; j++) { uint32_t u; memcpy(&u, &SCORES[j], 4); w_le(w, u, 4); }
    w_key(w, m, "tok.flags", VT_ARR); w_arr_head(w, m, VT_BOOL, 3);
    w_le(w, 0, 1); w_le(w, 1, 1); w_le(w, 1, 1);
    w_key(w, m, "tok.empty", VT_ARR); w_arr_head(w, m, VT_U8, 0);
    w_key(w, m, "tok.name", VT_STR); w_str(w, "", 0);
    put_le(w->p + m->kv_count, (uint64_t)m->n_kv, 8);

    for (i = 0; i < N_T; i++) {
        m->t_name[i] = w->n;  w_str(w, TS[i].name, strlen(TS[i].name));
        m->t_ndims[i] = w->n; w_le(w, TS[i].n_dims, 4);
        m->t_dim[i] = w->n;
        for (j = 0; j < (int)TS[i].n_dims; j++) w_le(w, TS[i].ne[j], 8);
        m->t_type[i] = w->n;  w_le(w, TS[i].type, 4);
        m->t_off[i] = w->n;   w_le(w, off[i], 8);
    }
    while (w->n % align) w_le(w, 0, 1);
    m->data_start = w->n;
    for (i = 0; i < N_T; i++) {
        while (w->n < m->data_start + off[i]) w_le(w, 0, 1);
        w_bytes(w, tdata[i], (size_t)ts_bytes(&TS[i]));
    }
}

/* Open a private, exact-size copy (so ASan sees any read past its end).   */
static int open_copy(gguf_ctx *g, const uint8_t *img, size_t n, uint8_t **copy)
{
    *copy = (uint8_t *)malloc(n ? n : 1);
    if (n) memcpy(*copy, img, n);
    return gguf_open_memory(g, *copy, n);
}

/* Everything a user could read from an opened file, read: every metadata
   value through its getter, every array copied out, every dequantizable
   tensor dequantized and dotted. Under ASan this proves the validation
   left nothing out of bounds. Returns a checksum so nothing is elided.    */
static double read_everything(gguf_ctx *g)
{
    double sum = 0;
    uint64_t i, j;
    for (i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        char key[80];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 70 ? kv->key.len : 70),
                 kv->key.ptr);
        if (kv->key.len >= 70 || strlen(key) != kv->key.len) continue;  /* NUL inside */
        if (kv->type == GGUF_VT_ARR) {
            gguf_arr a;
            void *buf;
            if (!gguf_get_arr(g, key, kv->arr_type, &a)) continue;
            buf = malloc((size_t)(a.n + 1) * sizeof(gguf_str));
            if (a.type == GGUF_VT_STR && gguf_arr_strs(&a, (gguf_str *)buf))
                for (j = 0; j < a.n; j++) {
                    const gguf_str *s = (const gguf_str *)buf + j;
                    sum += s->len ? (double)(unsigned char)s->ptr[s->len - 1] : 0.0;
                }
            if (gguf_arr_i32(&a, (int32_t *)buf) || gguf_arr_f32(&a, (float *)buf))
                for (j = 0; j < a.n; j++) sum += ((const uint8_t *)buf)[4 * j];
            free(buf);
        } else {
            uint64_t u; gguf_str s;
            if (gguf_get_uint(g, key, &u)) sum += (double)u;
            if (gguf_get_str(g, key, &s) && s.len) sum += (unsigned char)s.ptr[s.len - 1];
        }
    }
    for (i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        float *buf, *x;
        if (!gguf_can_dequant(t->type) || t->n_elem > 4096) continue;
        buf = (float *)malloc((size_t)t->n_elem * sizeof *buf);
        x = (float *)calloc((size_t)t->ne[0], sizeof *x);
        if (gguf_dequant(t->type, t->data, buf, t->n_elem)) sum += buf[t->n_elem - 1];
        sum += gguf_dot(t->type, gguf_tensor_row(t, t->n_elem / t->ne[0] - 1), x, t->ne[0]);
        free(buf); free(x);
    }
    return sum;
}

/* ------------------------------------------------------------------------ */
/* 1. The valid file, read back.                                            */
/* ------------------------------------------------------------------------ */
static void check_valid(uint32_t version, uint32_t align_key)
{
    wbuf w = {0, 0, 0};
    marks m;
    gguf_ctx g;
    uint8_t *img;
    uint64_t A = align_key ? align_key : 32, u64;
    uint32_t u32 = 0; int32_t i32 = 0; float f32 = 0; int b = 0;
    gguf_str s; gguf_arr a;
    int i, ok;
    make_file(&w, &m, version, align_key);
    ok = open_copy(&g, w.p, w.n, &img);
    CHECK(ok, "v%u align %u: valid file refused: %s", version, align_key, g.why);
    if (!ok) { free(img); free(w.p); return; }
    CHECK(g.why[0] == '\0', "why not cleared on success: %s", g.why);
    CHECK(g.version == version && g.n_tensors == N_T && g.alignment == A,
          "header: version %u tensors %llu align %llu", g.version,
          (unsigned long long)g.n_tensors, (unsigned long long)g.alignment);
    CHECK(g.data_start == m.data_start, "data_start %llu, writer put it at %zu",
          (unsigned long long)g.data_start, m.data_start);

    /* strict getters, right types                                           */
    CHECK(gguf_get_str(&g, "general.architecture", &s) && s.len == 5 &&
          memcmp(s.ptr, "llama", 5) == 0, "architecture");
    CHECK(gguf_get_u32(&g, "test.u32", &u32) && u32 == 4000000000u, "u32 %u", u32);
    CHECK(gguf_get_i32(&g, "test.i32", &i32) && i32 == -7, "i32 %d", i32);
    CHECK(gguf_get_u64(&g, "test.u64", &u64) && u64 == (1ull << 40) + 3, "u64");
    CHECK(gguf_get_f32(&g, "test.f32", &f32) && f32 == 0.15625f, "f32 %g", f32);
    CHECK(gguf_get_bool(&g, "test.bool", &b) && b == 1, "bool %d", b);
    CHECK(gguf_get_str(&g, "tok.name", &s) && s.len == 0, "empty string");
    /* wrong type and missing key: refused, with a reason                    */
    CHECK(!gguf_get_f32(&g, "test.u32", &f32) && strstr(g.why, "type u32"),
          "f32 getter on a u32: %s", g.why);
    CHECK(!gguf_get_u32(&g, "test.u64", &u32) && strstr(g.why, "not u32"),
          "u32 getter on a u64: %s", g.why);
    CHECK(!gguf_get_u32(&g, "no.such.key", &u32) && strstr(g.why, "not found"),
          "missing key: %s", g.why);
    CHECK(!gguf_get_u32(&g, "test.u3", &u32), "a key prefix must not match");
    /* the lenient integer getter                                            */
    CHECK(gguf_get_uint(&g, "test.u8", &u64) && u64 == 200, "uint u8");
    CHECK(gguf_get_uint(&g, "test.u16", &u64) && u64 == 60000, "uint u16");
    CHECK(gguf_get_uint(&g, "test.u32", &u64) && u64 == 4000000000u, "uint u32");
    CHECK(gguf_get_uint(&g, "test.u64", &u64) && u64 == (1ull << 40) + 3, "uint u64");
    CHECK(!gguf_get_uint(&g, "test.i8", &u64) && strstr(g.why, "negative"), "uint i8<0");
    CHECK(!gguf_get_uint(&g, "test.i64", &u64) && strstr(g.why, "negative"), "uint i64<0");
    CHECK(!gguf_get_uint(&g, "test.f64", &u64) && strstr(g.why, "not an integer"),
          "uint f64: %s", g.why);
    if (align_key)
        CHECK(gguf_get_uint(&g, "general.alignment", &u64) && u64 == align_key, "alignment key");

    /* arrays                                                                */
    ok = gguf_get_arr(&g, "tok.tokens", GGUF_VT_STR, &a);
    CHECK(ok && a.n == 5, "tokens array");
    if (ok && a.n == 5) {
        gguf_str v[5];
        CHECK(gguf_arr_strs(&a, v), "tokens copy-out");
        for (i = 0; i < 5; i++)
            CHECK(v[i].len == strlen(TOKENS[i]) && memcmp(v[i].ptr, TOKENS[i], v[i].len) == 0,
                  "token %d", i);
        CHECK(!gguf_arr_i32(&a, (int32_t *)v), "i32 copy-out of a string array");
    }
    ok = gguf_get_arr(&g, "tok.types", GGUF_VT_I32, &a);
    CHECK(ok && a.n == 5, "types array");
    if (ok && a.n == 5) {
        int32_t v[5];
        CHECK(gguf_arr_i32(&a, v), "types copy-out");
        for (i = 0; i < 5; i++) CHECK(v[i] == TYPES[i], "type %d: %d", i, v[i]);
    }
    ok = gguf_get_arr(&g, "tok.scores", GGUF_VT_F32, &a);
    CHECK(ok && a.n == 5, "scores array");
    if (ok && a.n == 5) {
        float v[5];
        CHECK(gguf_arr_f32(&a, v), "scores copy-out");
        for (i = 0; i < 5; i++)
            CHECK(memcmp(&v[i], &SCORES[i], 4) == 0, "score %d: %g", i, v[i]);
    }
    CHECK(!gguf_get_arr(&g, "tok.scores", GGUF_VT_I32, &a) && strstr(g.why, "array of f32"),
          "wrong element type: %s", g.why);
    CHECK(!gguf_get_arr(&g, "test.u32", GGUF_VT_U32, &a), "array getter on a scalar");
    CHECK(gguf_get_arr(&g, "tok.empty", GGUF_VT_U8, &a) && a.n == 0, "empty array");
    CHECK(gguf_get_arr(&g, "tok.flags", GGUF_VT_BOOL, &a) && a.n == 3 &&
          a.data[0] == 0 && a.data[1] == 1 && a.data[2] == 1, "bool array");

    /* tensors: directory, sizes from the spec table, data where written     */
    for (i = 0; i < N_T; i++) {
        const gguf_tensor *t = gguf_find_tensor(&g, TS[i].name);
        int d;
        CHECK(t != NULL, "tensor %s: %s", TS[i].name, g.why);
        if (!t) continue;
        CHECK(t->type == TS[i].type && t->n_dims == TS[i].n_dims, "%s type/dims", TS[i].name);
        for (d = 0; d < 4; d++) CHECK(t->ne[d] == TS[i].ne[d], "%s ne[%d]", TS[i].name, d);
        CHECK(t->n_elem == ts_elems(&TS[i]), "%s n_elem", TS[i].name);
        CHECK(t->row_bytes == spec_row_bytes(TS[i].type, TS[i].ne[0]) &&
              t->n_bytes == ts_bytes(&TS[i]), "%s bytes %llu", TS[i].name,
              (unsigned long long)t->n_bytes);
        CHECK(t->data >= img + m.data_start && (uint64_t)(t->data - img - m.data_start) % A == 0,
              "%s data not aligned within the data section", TS[i].name);
        CHECK(memcmp(t->data, tdata[i], (size_t)t->n_bytes) == 0, "%s data", TS[i].name);
        CHECK((const uint8_t *)gguf_tensor_row(t, 1 % (t->n_elem / t->ne[0])) ==
              t->data + (1 % (t->n_elem / t->ne[0])) * t->row_bytes, "%s row", TS[i].name);
        CHECK(gguf_can_dequant(t->type) == (TS[i].type != T_Q6_K), "%s can_dequant", TS[i].name);
    }
    CHECK(strcmp(gguf_type_name(T_Q4_1), "Q4_1") == 0 && strcmp(gguf_type_name(4), "unknown") == 0,
          "type names");
    CHECK(gguf_find_tensor(&g, "w.f3") == NULL && strstr(g.why, "not found"), "tensor prefix");
    CHECK(gguf_expect_tensor(&g, "w.q41", 2, 32, 3) != NULL, "expect_tensor ok: %s", g.why);
    CHECK(gguf_expect_tensor(&g, "w.f32", 1, 8, 999) != NULL, "expect 1-D ignores ne1");
    CHECK(gguf_expect_tensor(&g, "w.q41", 2, 32, 4) == NULL && strstr(g.why, "expected"),
          "expect_tensor shape: %s", g.why);
    CHECK(gguf_expect_tensor(&g, "w.q6k", 1, 256, 1) == NULL && strstr(g.why, "cannot dequantize"),
          "expect_tensor type: %s", g.why);
    {   /* Q6_K is known but not dequantized: dequant and dot refuse        */
        float y[256], x[256];
        memset(x, 0, sizeof x);
        CHECK(!gguf_dequant(T_Q6_K, tdata[5], y, 256), "Q6_K dequant refused");
        CHECK(gguf_dot(T_Q6_K, tdata[5], x, 256) == 0.0f, "Q6_K dot gives 0");
        CHECK(!gguf_dequant(T_Q4_1, tdata[3], y, 16), "n not a multiple of 32");
    }
    gguf_close(&g);
    gguf_close(&g);   /* twice is harmless                                  */
    free(img);
    free(w.p);
}

/* ------------------------------------------------------------------------ */
/* 2. fp16: every bit pattern.                                              */
/* ------------------------------------------------------------------------ */
static void check_f16(void)
{
    static uint8_t row[2 * 65536];
    static float got[65536];
    uint32_t h;
    long bad_ref = 0, bad_kvq = 0;
    for (h = 0; h < 65536; h++) { row[2 * h] = (uint8_t)h; row[2 * h + 1] = (uint8_t)(h >> 8); }
    CHECK(gguf_dequant(T_F16, row, got, 65536), "F16 dequant of all patterns");
    for (h = 0; h < 65536; h++) {
        double r = ref_f16((uint16_t)h);
        float k = kvq_f16_to_f32((kvq_f16)h);
        if (isnan(r) ? !isnan(got[h]) : ((double)got[h] != r || !signbit(got[h]) != !signbit(r)))
            bad_ref++;
        if (isnan(k) ? !isnan(got[h]) : memcmp(&k, &got[h], 4) != 0) bad_kvq++;
    }
    CHECK(bad_ref == 0, "fp16: %ld patterns differ from the IEEE definition", bad_ref);
    CHECK(bad_kvq == 0, "fp16: %ld patterns differ from kvq_f16_to_f32", bad_kvq);
}

/* ------------------------------------------------------------------------ */
/* 3. Dequantization and the row dot against the reference.                 */
/*    Equality is exact: d * q has at most 11 + 8 significant bits, so it is
      exact in float; Q4_1's d * q + m then rounds once, as the reference
      (exact in double with rand_f16's exponent range) rounds once to float.
      The dot's bound, given its documented order of operations (exact
      weights, 32 lanes of ceil(n/32) products each, then a 5-level pairwise
      tree): every term passes through at most ceil(n/32) + 6 roundings of
      relative 2^-24 (Higham's gamma_k), so
          |dot - ref| <= (ceil(n/32) + 6) * 2^-24 * sum|w_i x_i|.        */
/* ------------------------------------------------------------------------ */
static void check_dequant(void)
{
    static const uint32_t types[5] = {T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0};
    static const uint64_t lens[8] = {8, 40, 32, 64, 256, 288, 576, 1536};
    static uint8_t row[4 * 1536 * 3];
    static float y[1536 * 3], x[1536], out[3];
    int ti, li, rep, reps = COUNT(20, 3);
    for (ti = 0; ti < 5; ti++)
        for (li = 0; li < 8; li++)
            for (rep = 0; rep < reps; rep++) {
                uint32_t type = types[ti];
                uint64_t n = lens[li], i, r, bad = 0;
                uint64_t rb = spec_row_bytes(type, n);
                gguf_tensor W;
                if (n % 32 != 0 && type != T_F32 && type != T_F16) continue;
                fill_row(type, row, 3 * n);   /* a 3-row matrix               */
                for (i = 0; i < n; i++) x[i] = (float)((double)(rng() % 20001) / 5000.0 - 2.0);
                CHECK(gguf_dequant(type, row, y, 3 * n), "%s dequant refused",
                      gguf_type_name(type));
                for (i = 0; i < 3 * n; i++)
                    if ((double)y[i] != (double)(float)ref_elem(type, row, i)) bad++;
                CHECK(bad == 0, "%s n=%llu: %llu elements differ from the reference",
                      gguf_type_name(type), (unsigned long long)n, (unsigned long long)bad);
                /* gguf_matvec over a tensor view of the same bytes           */
                memset(&W, 0, sizeof W);
                W.type = type; W.n_dims = 2; W.ne[0] = n; W.ne[1] = 3; W.ne[2] = W.ne[3] = 1;
                W.row_bytes = rb; W.data = row;
                gguf_matvec(&W, x, out, 0, 3);
                for (r = 0; r < 3; r++) {
                    double ref = 0, mag = 0, dot;
                    for (i = 0; i < n; i++) {
                        double wi = ref_elem(type, row + r * rb, i);
                        ref += wi * x[i];
                        mag += fabs(wi * x[i]);
                    }
                    dot = gguf_dot(type, row + r * rb, x, n);
                    CHECK(fabs(dot - ref) <= (double)((n + 31) / 32 + 6) * ldexp(1.0, -24) * mag,
                          "%s n=%llu row %llu: dot %.9g vs %.9g", gguf_type_name(type),
                          (unsigned long long)n, (unsigned long long)r, dot, ref);
                    CHECK(out[r] == (float)dot, "matvec row %llu != dot", (unsigned long long)r);
                }
            }
    {   /* edge codes: d = 0 gives m (Q4_1) or 0; subnormal and negative d  */
        uint8_t b[34];
        float v[32];
        int j;
        memset(b, 0, sizeof b);
        for (j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | (15 - j) << 4);
        put_le(b, 0x0000, 2); put_le(b + 2, 0xBC00, 2);        /* d = 0, m = -1 */
        gguf_dequant(T_Q4_1, b, v, 32);
        for (j = 0; j < 32; j++) CHECK(v[j] == -1.0f, "Q4_1 d=0: %g", v[j]);
        put_le(b, 0x0001, 2); put_le(b + 2, 0x0000, 2);        /* d = 2^-24     */
        gguf_dequant(T_Q4_1, b, v, 32);
        for (j = 0; j < 16; j++)
            CHECK(v[j] == (float)ldexp(j, -24) && v[j + 16] == (float)ldexp(15 - j, -24),
                  "Q4_1 subnormal d, j=%d", j);
        for (j = 0; j < 32; j++) b[2 + j] = (uint8_t)(j * 8 - 128);   /* -128..120 */
        put_le(b, 0xC000, 2);                                   /* d = -2        */
        gguf_dequant(T_Q8_0, b, v, 32);
        for (j = 0; j < 32; j++) CHECK(v[j] == -2.0f * (float)(j * 8 - 128), "Q8_0 j=%d", j);
    }
}

/* ------------------------------------------------------------------------ */
/* 4. Malformed files.                                                      */
/* ------------------------------------------------------------------------ */
static void expect_bad(const uint8_t *img, size_t n, const char *want, const char *what)
{
    gguf_ctx g;
    uint8_t *copy;
    int ok = open_copy(&g, img, n, &copy);
    CHECK(!ok, "%s: accepted", what);
    CHECK(g.why[0] != '\0', "%s: no reason given", what);
    CHECK(strstr(g.why, want) != NULL, "%s: reason '%s' does not mention '%s'", what,
          g.why, want);
    CHECK(g.kv == NULL && g.tensors == NULL, "%s: not released", what);
    if (ok) gguf_close(&g);
    free(copy);
}

/* A copy of the valid image with one field overwritten.                    */
static void bad_patch(const wbuf *w, size_t pos, uint64_t v, int nbytes,
                      const char *want, const char *what)
{
    uint8_t *img = (uint8_t *)malloc(w->n);
    memcpy(img, w->p, w->n);
    put_le(img + pos, v, nbytes);
    expect_bad(img, w->n, want, what);
    free(img);
}

static void check_malformed(void)
{
    wbuf w = {0, 0, 0};
    marks m;
    size_t cut, step = COUNT(1, 3);
    uint64_t room;
    make_file(&w, &m, 3, 0);

    /* Truncation anywhere. The valid file's last tensor ends at EOF, so
       every proper prefix is missing something the file declares.         */
    for (cut = 0; cut < w.n; cut += step) {
        gguf_ctx g;
        uint8_t *copy;
        int ok = open_copy(&g, w.p, cut, &copy);
        CHECK(!ok, "truncated to %zu of %zu bytes: accepted", cut, w.n);
        CHECK(!ok && (strstr(g.why, "truncated") || strstr(g.why, "past the end") ||
                      strstr(g.why, "cannot fit")),
              "truncated to %zu: reason '%s'", cut, g.why);
        if (ok) gguf_close(&g);
        free(copy);
    }
    expect_bad(NULL, 0, "truncated", "NULL buffer");

    /* The header.                                                           */
    bad_patch(&w, 0, 'g', 1, "bad magic", "magic");
    bad_patch(&w, m.version, 1, 4, "version 1", "version 1");
    bad_patch(&w, m.version, 4, 4, "version 4", "version 4");
    bad_patch(&w, m.version, 0x03000000u, 4, "big-endian", "byte-swapped version");
    bad_patch(&w, m.n_tensors, 1ull << 63, 8, "tensor count", "n_tensors 2^63");
    bad_patch(&w, m.n_tensors, ~0ull, 8, "tensor count", "n_tensors 2^64-1");
    bad_patch(&w, m.n_tensors, w.n / 33 + 1, 8, "tensor count", "n_tensors just too many");
    bad_patch(&w, m.kv_count, 1ull << 62, 8, "metadata count", "n_kv 2^62");
    bad_patch(&w, m.kv_count, w.n, 8, "metadata count", "n_kv = file size");

    /* Metadata.                                                             */
    bad_patch(&w, m.key_len[0], ~0ull, 8, "truncated", "key length 2^64-1");
    bad_patch(&w, m.key_len[0], w.n - m.key_len[0] - 8 + 1, 8, "truncated",
              "key length one past EOF");
    bad_patch(&w, m.key_len[0], 0, 8, "length 0", "empty key");
    room = w.n - m.value[m.kv_arch] - 8;
    bad_patch(&w, m.value[m.kv_arch], room + 1, 8, "truncated", "string value past EOF");
    bad_patch(&w, m.vtype[m.kv_u8], 13, 4, "unknown value type 13", "value type 13");
    bad_patch(&w, m.vtype[m.kv_u8], ~0u, 4, "unknown value type", "value type 2^32-1");
    bad_patch(&w, m.value[m.kv_bool], 2, 1, "neither 0 nor 1", "bool 2");
    bad_patch(&w, m.arr_type[m.kv_tokens], 13, 4, "unknown type 13", "array element type 13");
    bad_patch(&w, m.arr_type[m.kv_tokens], VT_ARR, 4, "nested array", "nested array");
    bad_patch(&w, m.arr_n[m.kv_tokens], 1ull << 62, 8, "past the end", "array count 2^62");
    bad_patch(&w, m.arr_n[m.kv_tokens], ~0ull, 8, "past the end", "array count 2^64-1");
    bad_patch(&w, m.arr_n[m.kv_tokens + 1], (w.n - m.arr_n[m.kv_tokens + 1]) / 4, 8,
              "past the end", "i32 array one element too long");
    /* "test.u8" -> "test.i8": two equal keys                                */
    bad_patch(&w, m.key_len[m.kv_u8] + 8 + 5, 'i', 1, "duplicate metadata key 'test.i8'",
              "duplicate key");

    /* Tensor directory.                                                     */
    bad_patch(&w, m.t_name[0], 0, 8, "name length 0", "empty tensor name");
    bad_patch(&w, m.t_name[0], 65, 8, "name length 65", "tensor name of 65 bytes");
    bad_patch(&w, m.t_name[0], ~0ull, 8, "truncated", "tensor name length 2^64-1");
    bad_patch(&w, m.t_ndims[1], 0, 4, "0 dims", "n_dims 0");
    bad_patch(&w, m.t_ndims[1], 5, 4, "5 dims", "n_dims 5");
    bad_patch(&w, m.t_ndims[1], ~0u, 4, "dims", "n_dims 2^32-1");
    bad_patch(&w, m.t_dim[1], 0, 8, "dim 0 is 0", "a zero dim");
    bad_patch(&w, m.t_dim[4], 1ull << 32, 8, "past the end", "one large dim of a 4-D tensor");
    {   /* all four dims 2^16: the product 2^64 overflows                    */
        uint8_t *img = (uint8_t *)malloc(w.n);
        int d;
        memcpy(img, w.p, w.n);
        for (d = 0; d < 4; d++) put_le(img + m.t_dim[4] + 8 * d, 1ull << 16, 8);
        expect_bad(img, w.n, "element count overflows", "dims product 2^64");
        put_le(img + m.t_dim[4], 1ull << 61, 8);
        for (d = 1; d < 4; d++) put_le(img + m.t_dim[4] + 8 * d, 4, 8);
        expect_bad(img, w.n, "element count overflows", "dims product 2^65");
        free(img);
    }
    bad_patch(&w, m.t_dim[0], 1ull << 62, 8, "byte size overflows", "F32 of 2^62 elements");
    {   /* Q8_0 (32, 2^58 - 1): 2^63 - 32 elements fit, 34/32 bytes each not */
        uint8_t *img = (uint8_t *)malloc(w.n);
        memcpy(img, w.p, w.n);
        put_le(img + m.t_dim[4] + 8, (1ull << 58) - 1, 8);
        put_le(img + m.t_dim[4] + 24, 1, 8);
        expect_bad(img, w.n, "byte size overflows", "Q8_0 bytes past 2^63");
        free(img);
    }
    bad_patch(&w, m.t_dim[3], 16, 8, "not a multiple", "Q4_1 row of 16");
    bad_patch(&w, m.t_dim[0], 4096, 8, "past the end", "F32 larger than the file");
    bad_patch(&w, m.t_type[0], 4, 4, "unknown tensor type 4", "retired type 4");
    bad_patch(&w, m.t_type[0], 31, 4, "unknown tensor type 31", "type 31");
    bad_patch(&w, m.t_type[0], ~0u, 4, "unknown tensor type", "type 2^32-1");
    /* "w.f32" -> "w.f16": two tensors of one name                           */
    {
        uint8_t *img = (uint8_t *)malloc(w.n);
        memcpy(img, w.p, w.n);
        img[m.t_name[0] + 8 + 3] = '1'; img[m.t_name[0] + 8 + 4] = '6';
        expect_bad(img, w.n, "duplicate tensor name 'w.f16'", "duplicate tensor name");
        free(img);
    }

    /* Tensor data placement.                                                */
    room = w.n - m.data_start;
    bad_patch(&w, m.t_off[5], (room + 31) / 32 * 32, 8, "past the end", "offset past EOF");
    bad_patch(&w, m.t_off[5], 1ull << 63, 8, "past the end", "offset 2^63");
    bad_patch(&w, m.t_off[5], ~0ull - 31, 8, "past the end", "offset 2^64-32");
    bad_patch(&w, m.t_off[2], 8, 8, "not a multiple of the alignment 32", "misaligned offset");
    bad_patch(&w, m.t_off[2], 0, 8, "overlap", "two tensors at offset 0");
    bad_patch(&w, m.t_off[2], 128, 8, "overlap", "partial overlap");

    /* general.alignment                                                     */
    free(w.p); w.p = NULL; w.n = w.cap = 0;
    make_file(&w, &m, 3, 64);
    bad_patch(&w, m.value[m.kv_align], 0, 4, "not a power of two", "alignment 0");
    bad_patch(&w, m.value[m.kv_align], 48, 4, "not a power of two", "alignment 48");
    bad_patch(&w, m.vtype[m.kv_align], VT_I32, 4, "must be u32", "alignment as i32");
    bad_patch(&w, m.value[m.kv_align], 128, 4, "not a multiple of the alignment 128",
              "alignment raised past the offsets");
    bad_patch(&w, m.value[m.kv_align], 1u << 20, 4, "truncated", "alignment 2^20");
    free(w.p);
}

/* ------------------------------------------------------------------------ */
/* 5. Byte flips: accepted or refused with a reason, never out of bounds.   */
/* ------------------------------------------------------------------------ */
static void check_fuzz(void)
{
    static const uint8_t masks[4] = {0xFF, 0x01, 0x80, 0x10};
    wbuf w = {0, 0, 0};
    marks m;
    size_t pos;
    long opened = 0, refused = 0, noreason = 0, flips = 0;
    int k, nm = COUNT(4, 2);
    make_file(&w, &m, 3, 0);
    for (pos = 0; pos < w.n; pos++)
        for (k = 0; k < nm; k++) {
            gguf_ctx g;
            uint8_t *img = (uint8_t *)malloc(w.n);
            memcpy(img, w.p, w.n);
            img[pos] ^= masks[k];
            flips++;
            if (gguf_open_memory(&g, img, w.n)) {
                opened++;
                read_everything(&g);
                gguf_close(&g);
            } else {
                refused++;
                if (!g.why[0]) noreason++;
            }
            free(img);
        }
    CHECK(noreason == 0, "fuzz: %ld refusals without a reason", noreason);
    CHECK(opened + refused == flips && refused > 0 && opened > 0,
          "fuzz: %ld flips, %ld opened, %ld refused", flips, opened, refused);
    free(w.p);
}

/* ------------------------------------------------------------------------ */
/* 6. gguf_open_file.                                                       */
/* ------------------------------------------------------------------------ */
static void check_file(void)
{
    wbuf w = {0, 0, 0};
    marks m;
    gguf_ctx g;
    char path[] = "/tmp/kvq_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    FILE *f;
    const gguf_tensor *t;
    make_file(&w, &m, 3, 0);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) { free(w.p); return; }
    f = fdopen(fd, "wb");
    CHECK(f && fwrite(w.p, 1, w.n, f) == w.n, "write temp file");
    if (f) fclose(f); else close(fd);
    CHECK(gguf_open_file(&g, path), "open_file: %s", g.why);
    CHECK(g.owned != NULL && g.size == w.n, "open_file owns the image");
    t = gguf_find_tensor(&g, "w.q80");
    CHECK(t && memcmp(t->data, tdata[4], (size_t)t->n_bytes) == 0, "open_file tensor data");
    CHECK(read_everything(&g) == read_everything(&g), "read_everything deterministic");
    gguf_close(&g);
    /* a truncated file on disk: the path is named in the reason             */
    f = fopen(path, "wb");
    if (f) { fwrite(w.p, 1, w.n - 1, f); fclose(f); }
    CHECK(!gguf_open_file(&g, path) && strstr(g.why, path) && strstr(g.why, "past the end"),
          "truncated file: %s", g.why);
    remove(path);
    CHECK(!gguf_open_file(&g, path) && strstr(g.why, "cannot open") && strstr(g.why, path),
          "missing file: %s", g.why);
    free(w.p);
}

int main(void)
{
    check_valid(3, 0);
    check_valid(2, 0);
    check_valid(3, 64);
    check_valid(3, 8);
    check_f16();
    check_dequant();
    check_malformed();
    check_fuzz();
    check_file();
    return TEST_END("test_gguf");
}
