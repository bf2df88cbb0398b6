/* examples/llm/gguf.h - a GGUF reader that trusts nothing it reads.

   GGUF is the single-file model format of ggml / llama.cpp: a header, typed
   key-value metadata (hyperparameters, the tokenizer's vocabulary and merges),
   a directory of tensors, and then the tensor data. This header reads GGUF
   versions 2 and 3 (little-endian), validates every count, length, type and
   offset against the file before anything is used, and dequantizes the
   tensor types a small LLaMA checkpoint needs.

   Usage (every function is static: include it where you need it):

       gguf_ctx g;
       if (!gguf_open_file(&g, "model.gguf")) { puts(g.why); return 1; }
       uint32_t n_layer;  gguf_get_u32(&g, "llama.block_count", &n_layer);
       const gguf_tensor *w = gguf_find_tensor(&g, "blk.0.attn_q.weight");
       float y0 = gguf_dot(w->type, gguf_tensor_row(w, 0), x, w->ne[0]);
       gguf_close(&g);

   Contents
     1. The format, as this reader understands it
     2. Types: metadata values, tensor element types and their block layouts
     3. The context and the API
     4. Little-endian reads with a sticky error
     5. Parsing and validation
     6. Metadata lookup
     7. Tensors: lookup, rows, dequantization, row dot, mat-vec

   Conventions. Every function that can fail returns 1 on success and 0 on
   failure, and writes the reason into g->why (a NUL-terminated sentence that
   names the key, tensor or byte offset at fault). Nothing here calls exit()
   or prints. Shapes follow ggml: ne[0] is the innermost (contiguous) length,
   so a weight matrix W of a linear map R^in -> R^out has ne = {in, out} and
   row r (the r-th output) is ne[0] contiguous elements.

   Strings in a GGUF file are NOT NUL-terminated: they are (ptr, len) views
   into the file image (gguf_str), valid while the context is open.

   Format reference: ggml's docs/gguf.md (the GGUF specification) and the
   block structs of ggml-common.h; this file restates what it uses.        */
#ifndef KVQ_EXAMPLES_GGUF_H
#define KVQ_EXAMPLES_GGUF_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define GGUF_UNUSED __attribute__((unused))   /* not every user calls all  */
#else
#define GGUF_UNUSED
#endif

/* ======================================================================== */
/* 1. The format                                                            */
/* ======================================================================== */
/* All integers little-endian. A "string" is a u64 byte length followed by
   that many bytes (no terminator).

     offset 0   "GGUF"                 magic, 4 bytes
            4   u32 version            2 or 3 (v1 had 32-bit counts: refused)
            8   u64 n_tensors
           16   u64 n_kv
           24   n_kv times:   string key, u32 value type, value
                              (an array value is: u32 element type,
                               u64 count, the elements back to back)
            .   n_tensors times: string name, u32 n_dims, u64 ne[n_dims],
                              u32 tensor type, u64 offset
            .   padding up to a multiple of ALIGN
     data_start  tensor data; tensor i lives at data_start + offset_i

   ALIGN is the u32 metadata value "general.alignment" if present, else 32.
   Every tensor offset is a multiple of ALIGN. What this reader enforces
   beyond that (each check has its own error message):
     - counts: n_kv and n_tensors no larger than the bytes that remain could
       hold (so a lying header cannot make us allocate gigabytes);
     - every string and array lies inside the file; keys are 1..65535 bytes,
       tensor names 1..64; no duplicate keys or tensor names;
     - value types are the 13 known ones, bools are 0 or 1, arrays do not
       nest;
     - 1 <= n_dims <= 4, every ne >= 1, ne[0] a multiple of the type's block,
       the element count and byte size fit in 63 bits;
     - the tensor type is a known ggml type; each tensor's byte range is
       inside the file, and no two tensors overlap.                        */

#define GGUF_MAGIC             "GGUF"
#define GGUF_MAX_DIMS          4
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY           65535u
#define GGUF_MAX_NAME          64u

/* ======================================================================== */
/* 2. Types                                                                 */
/* ======================================================================== */
/* Metadata value types (the u32 after each key).                           */
enum gguf_vtype {
    GGUF_VT_U8 = 0, GGUF_VT_I8 = 1, GGUF_VT_U16 = 2, GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4, GGUF_VT_I32 = 5, GGUF_VT_F32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STR = 8, GGUF_VT_ARR = 9, GGUF_VT_U64 = 10, GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12, GGUF_VT_COUNT = 13
};

/* Tensor element types: ggml's enum ggml_type numbering (ids 4 and 5 were
   retired formats and are unknown here).                                    */
enum gguf_ttype {
    GGUF_T_F32 = 0, GGUF_T_F16 = 1, GGUF_T_Q4_0 = 2, GGUF_T_Q4_1 = 3,
    GGUF_T_Q5_0 = 6, GGUF_T_Q5_1 = 7, GGUF_T_Q8_0 = 8, GGUF_T_Q8_1 = 9,
    GGUF_T_Q2_K = 10, GGUF_T_Q3_K = 11, GGUF_T_Q4_K = 12, GGUF_T_Q5_K = 13,
    GGUF_T_Q6_K = 14, GGUF_T_Q8_K = 15, GGUF_T_BF16 = 30, GGUF_T_COUNT = 31
};

/* The block layouts this reader dequantizes. A quantized tensor row is a run
   of blocks of 32 weights each; d and m are IEEE binary16 (fp16) bits.

   Q4_0: 18 bytes / 32 weights (4.5 bits per weight), symmetric

       byte 0     2                                  18
            +-----+----------------------------------+
            |  d  | qs[16]  two 4-bit codes per byte |
            +-----+----------------------------------+
       weight j      = d * ((qs[j] & 0x0F) - 8)        j = 0..15
       weight j + 16 = d * ((qs[j] >>   4) - 8)

   Q4_1: 20 bytes / 32 weights (5 bits per weight), asymmetric (min m)

       byte 0     2     4                            20
            +-----+-----+----------------------------+
            |  d  |  m  | qs[16]  same nibble order  |
            +-----+-----+----------------------------+
       weight j      = d * (qs[j] & 0x0F) + m          j = 0..15
       weight j + 16 = d * (qs[j] >>   4) + m

   Q8_0: 34 bytes / 32 weights (8.5 bits per weight), symmetric

       byte 0     2                                  34
            +-----+----------------------------------+
            |  d  | qs[32]  int8 codes               |
            +-----+----------------------------------+
       weight j = d * qs[j]

   F16 is one fp16 per weight, F32 one float. Note the nibble order of the
   4-bit types: the low nibbles hold the first half of the block, the high
   nibbles the second half (not interleaved pairs).                         */
typedef struct gguf_block_q4_0 { uint16_t d;    uint8_t qs[16]; } gguf_block_q4_0;
typedef struct gguf_block_q4_1 { uint16_t d, m; uint8_t qs[16]; } gguf_block_q4_1;
typedef struct gguf_block_q8_0 { uint16_t d;    int8_t  qs[32]; } gguf_block_q8_0;

/* The structs are only ever filled by memcpy from the file image (which need
   not be aligned), so their size must be the on-disk size exactly.          */
typedef char gguf__check_q4_0[(sizeof(gguf_block_q4_0) == 18) ? 1 : -1];
typedef char gguf__check_q4_1[(sizeof(gguf_block_q4_1) == 20) ? 1 : -1];
typedef char gguf__check_q8_0[(sizeof(gguf_block_q8_0) == 34) ? 1 : -1];
typedef char gguf__check_f32[(sizeof(float) == 4) ? 1 : -1];

/* Every ggml type's block: elements per block and bytes per block (from
   ggml-common.h). Knowing a type's size lets the reader validate the byte
   range of any tensor; `deq` marks the ones this file can dequantize.
   Unnamed slots are ids that ggml does not (or no longer) define.           */
typedef struct gguf__tinfo { const char *name; uint32_t blck, bytes, deq; } gguf__tinfo;
static const gguf__tinfo gguf__types[GGUF_T_COUNT] = {
    {"F32", 1, 4, 1},     {"F16", 1, 2, 1},     {"Q4_0", 32, 18, 1},
    {"Q4_1", 32, 20, 1},  {NULL, 0, 0, 0},      {NULL, 0, 0, 0},
    {"Q5_0", 32, 22, 0},  {"Q5_1", 32, 24, 0},  {"Q8_0", 32, 34, 1},
    {"Q8_1", 32, 36, 0},  {"Q2_K", 256, 84, 0}, {"Q3_K", 256, 110, 0},
    {"Q4_K", 256, 144, 0},{"Q5_K", 256, 176, 0},{"Q6_K", 256, 210, 0},
    {"Q8_K", 256, 292, 0},{"IQ2_XXS", 256, 66, 0}, {"IQ2_XS", 256, 74, 0},
    {"IQ3_XXS", 256, 98, 0}, {"IQ1_S", 256, 50, 0}, {"IQ4_NL", 32, 18, 0},
    {"IQ3_S", 256, 110, 0},  {"IQ2_S", 256, 82, 0}, {"IQ4_XS", 256, 136, 0},
    {"I8", 1, 1, 0},      {"I16", 1, 2, 0},     {"I32", 1, 4, 0},
    {"I64", 1, 8, 0},     {"F64", 1, 8, 0},     {"IQ1_M", 256, 56, 0},
    {"BF16", 1, 2, 0}
};

/* Byte size of one metadata value of a fixed-size type (0: string/array). */
static const uint8_t gguf__vsize[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const gguf__vnames[GGUF_VT_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
    "u64", "i64", "f64"};

/* ======================================================================== */
/* 3. The context and the API                                               */
/* ======================================================================== */
typedef struct gguf_str { const char *ptr; uint64_t len; } gguf_str;

/* One metadata entry. For a scalar, val points at its bytes; for a string,
   str is the view; for an array, arr_type / arr_n describe it and val points
   at the first element (elements back to back, strings as len + bytes).   */
typedef struct gguf_kv {
    gguf_str       key;
    uint32_t       type;      /* enum gguf_vtype                            */
    uint32_t       arr_type;  /* element type, arrays only                  */
    uint64_t       arr_n;     /* element count, arrays only                 */
    gguf_str       str;       /* strings only                               */
    const uint8_t *val;       /* value bytes inside the file image          */
} gguf_kv;

/* An array value, as returned by gguf_get_arr.                              */
typedef struct gguf_arr { uint32_t type; uint64_t n; const uint8_t *data; } gguf_arr;

typedef struct gguf_tensor {
    gguf_str       name;
    uint32_t       type;                 /* enum gguf_ttype                 */
    uint32_t       n_dims;               /* 1..4                            */
    uint64_t       ne[GGUF_MAX_DIMS];    /* ne[0] innermost; unused dims 1  */
    uint64_t       offset;               /* relative to the data section    */
    uint64_t       n_elem;               /* ne[0] * ne[1] * ne[2] * ne[3]   */
    uint64_t       n_bytes;              /* n_elem / blck * bytes per block */
    uint64_t       row_bytes;            /* bytes of one row of ne[0]       */
    const uint8_t *data;                 /* (ne[3], ne[2], ne[1], ne[0])    */
} gguf_tensor;

typedef struct gguf_ctx {
    const uint8_t *buf;         /* the whole file image, (size,) bytes      */
    uint64_t       size;
    uint8_t       *owned;       /* buf when we read the file ourselves      */
    uint32_t       version;
    uint64_t       n_kv, n_tensors;
    gguf_kv       *kv;          /* (n_kv,)                                  */
    gguf_tensor   *tensors;     /* (n_tensors,) in file order               */
    uint64_t       alignment;   /* ALIGN                                    */
    uint64_t       data_start;  /* file offset of the tensor data section   */
    char           why[256];    /* reason of the last failure               */
} gguf_ctx;

/* Opening and closing.
     gguf_open_memory  parse a file image the caller keeps alive (borrowed)
     gguf_open_file    read the whole file into memory, then parse it
     gguf_close        free everything (safe on a failed or zeroed context)
   Metadata (section 6): gguf_find_kv, gguf_get_{u32,i32,u64,f32,bool,str},
     gguf_get_uint (any non-negative integer type), gguf_get_arr and the
     copy-outs gguf_arr_strs / gguf_arr_i32 / gguf_arr_f32.
   Tensors (section 7): gguf_find_tensor, gguf_expect_tensor, gguf_tensor_row,
     gguf_type_name, gguf_can_dequant, gguf_dequant, gguf_dot, gguf_matvec. */

/* ======================================================================== */
/* 4. Little-endian reads with a sticky error                               */
/* ======================================================================== */
/* A cursor over the file image. The first failure records its reason and
   sets ok = 0; every later read then returns zeros without touching memory,
   so the parser can be written straight through and checked at the end of
   each item.                                                              */
typedef struct gguf__rd { gguf_ctx *g; uint64_t pos; int ok; } gguf__rd;

static int gguf__fail(gguf_ctx *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
    return 0;
}

/* Reserve n bytes at the cursor: a pointer to them, or NULL (and the error)
   if fewer than n remain. `what` names the field for the message.           */
static const uint8_t *gguf__take(gguf__rd *r, uint64_t n, const char *what)
{
    const uint8_t *p;
    if (!r->ok) return NULL;
    if (n > r->g->size - r->pos) {
        r->ok = 0;
        gguf__fail(r->g, "truncated: %s needs %llu bytes at offset %llu, "
                   "file has %llu", what, (unsigned long long)n,
                   (unsigned long long)r->pos, (unsigned long long)r->g->size);
        return NULL;
    }
    p = r->g->buf + r->pos;
    r->pos += n;
    return p;
}

/* Assemble little-endian integers byte by byte: correct on any host and
   free of alignment assumptions.                                           */
static uint64_t gguf__le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    int i;
    for (i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t gguf__u32(gguf__rd *r, const char *what)
{
    const uint8_t *p = gguf__take(r, 4, what);
    return p ? (uint32_t)gguf__le(p, 4) : 0;
}
static uint64_t gguf__u64(gguf__rd *r, const char *what)
{
    const uint8_t *p = gguf__take(r, 8, what);
    return p ? gguf__le(p, 8) : 0;
}

/* A string: u64 length, then the bytes. The length is checked against the
   bytes that remain before it is used.                                      */
static gguf_str gguf__string(gguf__rd *r, const char *what)
{
    gguf_str s;
    s.len = gguf__u64(r, what);
    s.ptr = (const char *)gguf__take(r, s.len, what);
    if (!s.ptr) s.len = 0;
    return s;
}

/* fp16 bits -> float, exactly (every fp16 value is a float). Written out
   here so that this header stands alone; tests compare it with kvq.h's.   */
GGUF_UNUSED static float gguf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
    float f;
    if (exp == 0x1F) bits = sign | 0x7F800000u | (man << 13);  /* Inf, NaN  */
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);
    else {
        /* zero or subnormal: man * 2^-24, exact in float                    */
        f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* ======================================================================== */
/* 5. Parsing and validation                                                */
/* ======================================================================== */
GGUF_UNUSED static const char *gguf_type_name(uint32_t type)
{
    return (type < GGUF_T_COUNT && gguf__types[type].name)
               ? gguf__types[type].name : "unknown";
}

static int gguf__str_eq(gguf_str a, const char *b, uint64_t blen)
{
    return a.len == blen && memcmp(a.ptr, b, (size_t)blen) == 0;
}

/* Skip (and validate) one value of type t; arrays only when allow_arr.     */
static void gguf__value(gguf__rd *r, uint32_t t, gguf_kv *kv, int allow_arr,
                        const char *key)
{
    gguf_ctx *g = r->g;
    if (!r->ok) return;
    if (t >= GGUF_VT_COUNT) {
        r->ok = 0;
        gguf__fail(g, "key '%s': unknown value type %lu", key, (unsigned long)t);
        return;
    }
    if (kv) kv->val = g->buf + r->pos;
    if (t == GGUF_VT_STR) {
        gguf_str s = gguf__string(r, "string value");
        if (kv) kv->str = s;
    } else if (t == GGUF_VT_ARR) {
        uint32_t et;
        uint64_t n, i, left;
        if (!allow_arr) {
            r->ok = 0;
            gguf__fail(g, "key '%s': arrays of arrays are not supported", key);
            return;
        }
        et = gguf__u32(r, "array element type");
        n = gguf__u64(r, "array length");
        if (!r->ok) return;
        if (et >= GGUF_VT_COUNT || et == GGUF_VT_ARR) {
            r->ok = 0;
            gguf__fail(g, "key '%s': array of %s type %lu", key,
                       et == GGUF_VT_ARR ? "nested array" : "unknown",
                       (unsigned long)et);
            return;
        }
        if (kv) { kv->arr_type = et; kv->arr_n = n; kv->val = g->buf + r->pos; }
        /* Bound the count by the bytes left before walking it: a fixed-size
           element takes its size, a string at least its 8-byte length.     */
        left = g->size - r->pos;
        if (n > left / (gguf__vsize[et] ? gguf__vsize[et] : 8)) {
            r->ok = 0;
            gguf__fail(g, "key '%s': array of %llu %s elements runs past the "
                       "end of the file", key, (unsigned long long)n,
                       gguf__vnames[et]);
            return;
        }
        if (gguf__vsize[et] && et != GGUF_VT_BOOL)   /* one jump for all */
            gguf__take(r, n * gguf__vsize[et], "array");
        else                                 /* strings, bools: one by one  */
            for (i = 0; i < n && r->ok; i++) gguf__value(r, et, NULL, 0, key);
    } else {
        const uint8_t *p = gguf__take(r, gguf__vsize[t], gguf__vnames[t]);
        if (p && t == GGUF_VT_BOOL && *p > 1) {
            r->ok = 0;
            gguf__fail(g, "key '%s': bool value %u is neither 0 nor 1", key, *p);
        }
    }
}

/* Metadata: n_kv entries of (key, type, value).                           */
static int gguf__parse_kv(gguf__rd *r)
{
    gguf_ctx *g = r->g;
    uint64_t i;
    char key[80];   /* a printable prefix of the key, for messages          */
    for (i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        kv->key = gguf__string(r, "metadata key");
        if (!r->ok) return 0;
        if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY)
            return gguf__fail(g, "metadata key %llu has length %llu (must be "
                              "1..%u)", (unsigned long long)i,
                              (unsigned long long)kv->key.len, GGUF_MAX_KEY);
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 64 ? kv->key.len : 64),
                 kv->key.ptr);
        kv->type = gguf__u32(r, "value type");
        gguf__value(r, kv->type, kv, 1, key);
        if (!r->ok) return 0;
    }
    return 1;
}

/* ALIGN from "general.alignment": a u32 power of two, else the default.  */
static int gguf__alignment(gguf_ctx *g)
{
    uint64_t i;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        uint32_t a;
        if (!gguf__str_eq(kv->key, "general.alignment", 17)) continue;
        if (kv->type != GGUF_VT_U32)
            return gguf__fail(g, "general.alignment has type %s, must be u32",
                              gguf__vnames[kv->type]);
        a = (uint32_t)gguf__le(kv->val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return gguf__fail(g, "general.alignment %lu is not a power of two",
                              (unsigned long)a);
        g->alignment = a;
    }
    return 1;
}

/* One tensor directory entry: name, dims, type, offset; sizes derived.    */
static int gguf__parse_tensor(gguf__rd *r, gguf_tensor *t, uint64_t idx)
{
    gguf_ctx *g = r->g;
    const gguf__tinfo *ti;
    uint64_t d, rows;
    char name[80];
    t->name = gguf__string(r, "tensor name");
    if (!r->ok) return 0;
    if (t->name.len == 0 || t->name.len > GGUF_MAX_NAME)
        return gguf__fail(g, "tensor %llu: name length %llu (must be 1..%u)",
                          (unsigned long long)idx,
                          (unsigned long long)t->name.len, GGUF_MAX_NAME);
    snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
    t->n_dims = gguf__u32(r, "tensor n_dims");
    if (!r->ok) return 0;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return gguf__fail(g, "tensor '%s': %lu dims (must be 1..%d)", name,
                          (unsigned long)t->n_dims, GGUF_MAX_DIMS);
    t->n_elem = 1;
    for (d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = d < t->n_dims ? gguf__u64(r, "tensor dim") : 1;
        if (!r->ok) return 0;
        if (ne == 0)
            return gguf__fail(g, "tensor '%s': dim %llu is 0", name,
                              (unsigned long long)d);
        /* keep n_elem < 2^63 so that it also fits int64 (ggml's type)      */
        if (ne > (UINT64_MAX >> 1) / t->n_elem)
            return gguf__fail(g, "tensor '%s': element count overflows", name);
        t->ne[d] = ne;
        t->n_elem *= ne;
    }
    t->type = gguf__u32(r, "tensor type");
    t->offset = gguf__u64(r, "tensor offset");
    if (!r->ok) return 0;
    if (t->type >= GGUF_T_COUNT || !gguf__types[t->type].name)
        return gguf__fail(g, "tensor '%s': unknown tensor type %lu", name,
                          (unsigned long)t->type);
    ti = &gguf__types[t->type];
    if (t->ne[0] % ti->blck != 0)
        return gguf__fail(g, "tensor '%s': row length %llu is not a multiple "
                          "of the %s block (%lu)", name,
                          (unsigned long long)t->ne[0], ti->name,
                          (unsigned long)ti->blck);
    /* bytes = (ne0 / blck) * bytes_per_block * rows, each step checked     */
    if (t->ne[0] / ti->blck > (UINT64_MAX >> 1) / ti->bytes)
        return gguf__fail(g, "tensor '%s': byte size overflows", name);
    t->row_bytes = t->ne[0] / ti->blck * ti->bytes;
    rows = t->n_elem / t->ne[0];
    if (rows > (UINT64_MAX >> 1) / t->row_bytes)
        return gguf__fail(g, "tensor '%s': byte size overflows", name);
    t->n_bytes = rows * t->row_bytes;
    return 1;
}

/* Keys, and tensor names, must be unique. Sorting the views by (length,
   bytes) puts equal ones side by side: O(n log n) even for a file that
   declares a hundred thousand keys, where pairwise checks would crawl.     */
static int gguf__cmp_str(const void *a, const void *b)
{
    const gguf_str *x = (const gguf_str *)a, *y = (const gguf_str *)b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return memcmp(x->ptr, y->ptr, (size_t)x->len);   /* len >= 1 here      */
}
static int gguf__check_unique(gguf_ctx *g)
{
    uint64_t i, n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    gguf_str *v = (gguf_str *)malloc((size_t)(n + 1) * sizeof *v);
    int pass, ok = 1;
    if (!v) return gguf__fail(g, "out of memory");
    for (pass = 0; pass < 2 && ok; pass++) {
        uint64_t m = pass == 0 ? g->n_kv : g->n_tensors;
        for (i = 0; i < m; i++) v[i] = pass == 0 ? g->kv[i].key : g->tensors[i].name;
        qsort(v, (size_t)m, sizeof *v, gguf__cmp_str);
        for (i = 1; i < m && ok; i++)
            if (gguf__cmp_str(&v[i - 1], &v[i]) == 0)
                ok = gguf__fail(g, "duplicate %s '%.*s'",
                                pass == 0 ? "metadata key" : "tensor name",
                                (int)(v[i].len < 64 ? v[i].len : 64), v[i].ptr);
    }
    free(v);
    return ok;
}

/* After the directory: place the data section, then check every tensor's
   offset (aligned) and range (inside the file), and that no two tensors
   overlap (sorted by offset, neighbours must not intersect).               */
static int gguf__cmp_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a;
    const gguf_tensor *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}
static int gguf__place_tensors(gguf_ctx *g, uint64_t end_of_dir)
{
    uint64_t i, pad = (g->alignment - end_of_dir % g->alignment) % g->alignment;
    const gguf_tensor **by_off;
    g->data_start = end_of_dir + pad;
    if (g->n_tensors == 0) return 1;   /* no data section needed            */
    if (g->data_start > g->size)
        return gguf__fail(g, "truncated: tensor data would start at %llu, "
                          "file has %llu bytes", (unsigned long long)g->data_start,
                          (unsigned long long)g->size);
    for (i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t room = g->size - g->data_start;
        int nl = (int)t->name.len;
        if (t->offset % g->alignment != 0)
            return gguf__fail(g, "tensor '%.*s': offset %llu is not a multiple "
                              "of the alignment %llu", nl, t->name.ptr,
                              (unsigned long long)t->offset,
                              (unsigned long long)g->alignment);
        if (t->offset > room || t->n_bytes > room - t->offset)
            return gguf__fail(g, "tensor '%.*s': bytes [%llu, +%llu) of the data "
                              "section run past the end of the file (%llu bytes "
                              "of data)", nl, t->name.ptr,
                              (unsigned long long)t->offset,
                              (unsigned long long)t->n_bytes,
                              (unsigned long long)room);
        t->data = g->buf + g->data_start + t->offset;
    }
    by_off = (const gguf_tensor **)malloc((size_t)g->n_tensors * sizeof *by_off);
    if (!by_off) return gguf__fail(g, "out of memory");
    for (i = 0; i < g->n_tensors; i++) by_off[i] = &g->tensors[i];
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, gguf__cmp_off);
    for (i = 1; i < g->n_tensors; i++) {
        const gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->n_bytes > b->offset) {
            gguf__fail(g, "tensors '%.*s' and '%.*s' overlap", (int)a->name.len,
                       a->name.ptr, (int)b->name.len, b->name.ptr);
            free(by_off);
            return 0;
        }
    }
    free(by_off);
    return 1;
}

GGUF_UNUSED static void gguf_close(gguf_ctx *g)
{
    free(g->kv);
    free(g->tensors);
    free(g->owned);
    g->kv = NULL; g->tensors = NULL; g->owned = NULL; g->buf = NULL;
    g->size = g->n_kv = g->n_tensors = 0;
}

/* Parse and validate the image buf[0 .. size). The caller keeps buf alive
   (and unchanged) until gguf_close. On failure everything is released and
   g->why says what was wrong; on success g->why is empty.                  */
GGUF_UNUSED static int gguf_open_memory(gguf_ctx *g, const void *buf, size_t size)
{
    gguf__rd r;
    const uint8_t *magic;
    uint64_t i, min_kv = 8 + 1 + 4 + 1, min_tensor = 8 + 1 + 4 + 8 + 4 + 8;
    memset(g, 0, sizeof *g);
    g->buf = (const uint8_t *)buf;
    g->size = buf ? (uint64_t)size : 0;
    r.g = g; r.pos = 0; r.ok = 1;

    /* Header: magic, version, counts.                                      */
    magic = gguf__take(&r, 4, "magic");
    if (!magic) return 0;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return gguf__fail(g, "bad magic: not a GGUF file (first bytes "
                          "%02x %02x %02x %02x)", magic[0], magic[1], magic[2],
                          magic[3]);
    g->version = gguf__u32(&r, "version");
    if (!r.ok) return 0;
    if (g->version != 2 && g->version != 3) {
        uint32_t sw = g->version >> 24;
        if ((g->version & 0x00FFFFFFu) == 0 && (sw == 2 || sw == 3))
            return gguf__fail(g, "version %lu looks like a big-endian GGUF "
                              "file, which is not supported", (unsigned long)sw);
        return gguf__fail(g, "unsupported GGUF version %lu (need 2 or 3)",
                          (unsigned long)g->version);
    }
    g->n_tensors = gguf__u64(&r, "tensor count");
    g->n_kv = gguf__u64(&r, "metadata count");
    if (!r.ok) return 0;

    /* Each entry occupies a minimum number of bytes (a key or name of at
       least 1 byte, a type, the smallest value or one dim and an offset), so
       counts the rest of the file could not hold are lies: refuse them
       before allocating anything proportional to them.                     */
    if (g->n_kv > (g->size - r.pos) / min_kv)
        return gguf__fail(g, "metadata count %llu cannot fit in a %llu-byte "
                          "file", (unsigned long long)g->n_kv,
                          (unsigned long long)g->size);
    if (g->n_tensors > (g->size - r.pos) / min_tensor)
        return gguf__fail(g, "tensor count %llu cannot fit in a %llu-byte "
                          "file", (unsigned long long)g->n_tensors,
                          (unsigned long long)g->size);
    g->kv = (gguf_kv *)calloc((size_t)g->n_kv + 1, sizeof *g->kv);
    g->tensors = (gguf_tensor *)calloc((size_t)g->n_tensors + 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        gguf_close(g);
        return gguf__fail(g, "out of memory");
    }

    /* Metadata, then the tensor directory, then the data section.          */
    if (!gguf__parse_kv(&r) || !gguf__alignment(g)) goto fail;
    for (i = 0; i < g->n_tensors; i++)
        if (!gguf__parse_tensor(&r, &g->tensors[i], i)) goto fail;
    if (!gguf__check_unique(g) || !gguf__place_tensors(g, r.pos)) goto fail;
    g->why[0] = '\0';
    return 1;
fail:
    {   /* keep the reason across the release                               */
        char why[sizeof g->why];
        memcpy(why, g->why, sizeof why);
        gguf_close(g);
        memcpy(g->why, why, sizeof why);
    }
    return 0;
}

/* Read the whole file into memory (owned by g), then gguf_open_memory.   */
GGUF_UNUSED static int gguf_open_file(gguf_ctx *g, const char *path)
{
    FILE *f = fopen(path, "rb");
    long n;
    uint8_t *buf;
    memset(g, 0, sizeof *g);
    if (!f) return gguf__fail(g, "cannot open '%s'", path);
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return gguf__fail(g, "cannot determine the size of '%s'", path);
    }
    buf = (uint8_t *)malloc(n > 0 ? (size_t)n : 1);
    if (!buf) { fclose(f); return gguf__fail(g, "out of memory reading '%s'", path); }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f); free(buf);
        return gguf__fail(g, "short read from '%s'", path);
    }
    fclose(f);
    if (!gguf_open_memory(g, buf, (size_t)n)) {
        char why[sizeof g->why];
        snprintf(why, sizeof why, "%.100s: %.150s", path, g->why);
        memcpy(g->why, why, sizeof why);
        free(buf);
        return 0;
    }
    g->owned = buf;
    return 1;
}

/* ======================================================================== */
/* 6. Metadata lookup                                                       */
/* ======================================================================== */
/* The entry for key, or NULL (with the reason).                            */
GGUF_UNUSED static const gguf_kv *gguf_find_kv(gguf_ctx *g, const char *key)
{
    uint64_t i, n = strlen(key);
    for (i = 0; i < g->n_kv; i++)
        if (gguf__str_eq(g->kv[i].key, key, n)) return &g->kv[i];
    gguf__fail(g, "metadata key '%s' not found", key);
    return NULL;
}

/* The entry for key if it has exactly type t.                              */
static const gguf_kv *gguf__typed(gguf_ctx *g, const char *key, uint32_t t)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (kv && kv->type != t) {
        gguf__fail(g, "metadata key '%s' has type %s, not %s", key,
                   gguf__vnames[kv->type], gguf__vnames[t]);
        return NULL;
    }
    return kv;
}

/* Strict scalar getters: the key must exist with exactly this type.        */
GGUF_UNUSED static int gguf_get_u32(gguf_ctx *g, const char *key, uint32_t *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_U32);
    if (kv) *out = (uint32_t)gguf__le(kv->val, 4);
    return kv != NULL;
}
GGUF_UNUSED static int gguf_get_i32(gguf_ctx *g, const char *key, int32_t *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_I32);
    if (kv) { uint32_t u = (uint32_t)gguf__le(kv->val, 4); memcpy(out, &u, 4); }
    return kv != NULL;
}
GGUF_UNUSED static int gguf_get_u64(gguf_ctx *g, const char *key, uint64_t *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_U64);
    if (kv) *out = gguf__le(kv->val, 8);
    return kv != NULL;
}
GGUF_UNUSED static int gguf_get_f32(gguf_ctx *g, const char *key, float *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_F32);
    if (kv) { uint32_t u = (uint32_t)gguf__le(kv->val, 4); memcpy(out, &u, 4); }
    return kv != NULL;
}
GGUF_UNUSED static int gguf_get_bool(gguf_ctx *g, const char *key, int *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_BOOL);
    if (kv) *out = kv->val[0];
    return kv != NULL;
}
GGUF_UNUSED static int gguf_get_str(gguf_ctx *g, const char *key, gguf_str *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_STR);
    if (kv) *out = kv->str;
    return kv != NULL;
}

/* Lenient integer getter for hyperparameters: any integer type whose value
   is non-negative (converters differ on u32 / i32 / u64).                  */
GGUF_UNUSED static int gguf_get_uint(gguf_ctx *g, const char *key, uint64_t *out)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    uint64_t v;
    int size, is_signed;
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        is_signed = 0; break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        is_signed = 1; break;
    default:
        return gguf__fail(g, "metadata key '%s' has type %s, not an integer",
                          key, gguf__vnames[kv->type]);
    }
    size = gguf__vsize[kv->type];
    v = gguf__le(kv->val, size);
    if (is_signed && (v >> (8 * size - 1)) & 1)
        return gguf__fail(g, "metadata key '%s' is negative", key);
    *out = v;
    return 1;
}

/* An array whose elements have type elem_type.                             */
GGUF_UNUSED static int gguf_get_arr(gguf_ctx *g, const char *key,
                                    uint32_t elem_type, gguf_arr *out)
{
    const gguf_kv *kv = gguf__typed(g, key, GGUF_VT_ARR);
    if (!kv) return 0;
    if (kv->arr_type != elem_type)
        return gguf__fail(g, "metadata key '%s' is an array of %s, not of %s",
                          key, gguf__vnames[kv->arr_type],
                          elem_type < GGUF_VT_COUNT ? gguf__vnames[elem_type] : "?");
    out->type = kv->arr_type;
    out->n = kv->arr_n;
    out->data = kv->val;
    return 1;
}

/* Copy-outs, dst has a->n entries. The array was validated at open, so the
   walk cannot leave the file. A string array can only be walked in order
   (each element carries its own length), hence one pass into views.       */
GGUF_UNUSED static int gguf_arr_strs(const gguf_arr *a, gguf_str *dst)
{
    const uint8_t *p = a->data;
    uint64_t i;
    if (a->type != GGUF_VT_STR) return 0;
    for (i = 0; i < a->n; i++) {
        dst[i].len = gguf__le(p, 8);
        dst[i].ptr = (const char *)p + 8;
        p += 8 + dst[i].len;
    }
    return 1;
}
static int gguf__arr_4byte(const gguf_arr *a, uint32_t want, void *dst)
{
    uint64_t i;
    if (a->type != want) return 0;
    for (i = 0; i < a->n; i++) {
        uint32_t u = (uint32_t)gguf__le(a->data + 4 * i, 4);
        memcpy((uint8_t *)dst + 4 * i, &u, 4);
    }
    return 1;
}
GGUF_UNUSED static int gguf_arr_i32(const gguf_arr *a, int32_t *dst)
{
    return gguf__arr_4byte(a, GGUF_VT_I32, dst);
}
GGUF_UNUSED static int gguf_arr_f32(const gguf_arr *a, float *dst)
{
    return gguf__arr_4byte(a, GGUF_VT_F32, dst);
}

/* ======================================================================== */
/* 7. Tensors                                                               */
/* ======================================================================== */
GGUF_UNUSED static const gguf_tensor *gguf_find_tensor(gguf_ctx *g, const char *name)
{
    uint64_t i, n = strlen(name);
    for (i = 0; i < g->n_tensors; i++)
        if (gguf__str_eq(g->tensors[i].name, name, n)) return &g->tensors[i];
    gguf__fail(g, "tensor '%s' not found", name);
    return NULL;
}

GGUF_UNUSED static int gguf_can_dequant(uint32_t type)
{
    return type < GGUF_T_COUNT && gguf__types[type].deq;
}

/* A tensor the caller is about to compute with: it must exist, have the
   given shape (n_dims dims; ne1 ignored when n_dims == 1) and a type this
   file can dequantize. One call per weight at load time.                   */
GGUF_UNUSED static const gguf_tensor *gguf_expect_tensor(gguf_ctx *g, const char *name,
                                                         uint32_t n_dims,
                                                         uint64_t ne0, uint64_t ne1)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return NULL;
    if (t->n_dims != n_dims || t->ne[0] != ne0 || (n_dims > 1 && t->ne[1] != ne1)) {
        gguf__fail(g, "tensor '%s' has %lu dims (%llu, %llu), expected %lu dims "
                   "(%llu, %llu)", name, (unsigned long)t->n_dims,
                   (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                   (unsigned long)n_dims, (unsigned long long)ne0,
                   (unsigned long long)(n_dims > 1 ? ne1 : 1));
        return NULL;
    }
    if (!gguf_can_dequant(t->type)) {
        gguf__fail(g, "tensor '%s' has type %s, which this reader cannot "
                   "dequantize", name, gguf_type_name(t->type));
        return NULL;
    }
    return t;
}

/* Row r of a tensor seen as (n_elem / ne[0], ne[0]): its first byte.       */
GGUF_UNUSED static const void *gguf_tensor_row(const gguf_tensor *t, uint64_t r)
{
    return t->data + r * t->row_bytes;
}

/* One block of 32 weights, decoded per the diagrams of section 2, in one of
   two modes (each decoder is the single definition of its format):
     x == NULL   out[j]  = w_j            (dequantize; out is (32,))
     x != NULL   out[j] += w_j * x[j]     (dot lanes; out, x are (32,))
   Every caller passes a constant x or NULL, so after inlining each mode is
   its own branch-free loop. The lanes never mix within a block, so the
   compiler may keep the 32 sums in vector registers without reassociating
   a single addition.                                                       */
static inline void gguf__blk_q4_0(const uint8_t *src, const float *x, float *out)
{
    gguf_block_q4_0 b;
    float d, w0, w1;
    int j;
    memcpy(&b, src, sizeof b);
    d = gguf_f16_to_f32(b.d);
    for (j = 0; j < 16; j++) {
        w0 = d * (float)((b.qs[j] & 0x0F) - 8);     /* weight j             */
        w1 = d * (float)((b.qs[j] >> 4) - 8);       /* weight j + 16        */
        if (x) { out[j] += w0 * x[j]; out[j + 16] += w1 * x[j + 16]; }
        else   { out[j] = w0;         out[j + 16] = w1; }
    }
}
static inline void gguf__blk_q4_1(const uint8_t *src, const float *x, float *out)
{
    gguf_block_q4_1 b;
    float d, m, w0, w1;
    int j;
    memcpy(&b, src, sizeof b);
    d = gguf_f16_to_f32(b.d);
    m = gguf_f16_to_f32(b.m);
    for (j = 0; j < 16; j++) {
        w0 = d * (float)(b.qs[j] & 0x0F) + m;
        w1 = d * (float)(b.qs[j] >> 4) + m;
        if (x) { out[j] += w0 * x[j]; out[j + 16] += w1 * x[j + 16]; }
        else   { out[j] = w0;         out[j + 16] = w1; }
    }
}
static inline void gguf__blk_q8_0(const uint8_t *src, const float *x, float *out)
{
    gguf_block_q8_0 b;
    float d, w;
    int j;
    memcpy(&b, src, sizeof b);
    d = gguf_f16_to_f32(b.d);
    for (j = 0; j < 32; j++) {
        w = d * (float)b.qs[j];
        if (x) out[j] += w * x[j];
        else   out[j] = w;
    }
}
/* F32 and F16 have no blocks: weight i alone.                              */
static inline float gguf__elem(uint32_t type, const uint8_t *p, uint64_t i)
{
    float f;
    uint32_t u;
    if (type == GGUF_T_F16) return gguf_f16_to_f32((uint16_t)gguf__le(p + 2 * i, 2));
    u = (uint32_t)gguf__le(p + 4 * i, 4);          /* F32                   */
    memcpy(&f, &u, 4);
    return f;
}

/* Walk n weights of `type` from src block by block, in either mode above:
   x == NULL writes the n weights to out (n,); otherwise accumulates
   w_i * x_i into the lanes out[i % 32], out is (32,).                      */
static inline void gguf__walk(uint32_t type, const uint8_t *p, uint64_t n,
                              const float *x, float *out)
{
    uint64_t i;
    switch (type) {
    case GGUF_T_Q4_0:
        for (i = 0; i < n; i += 32, p += sizeof(gguf_block_q4_0))
            gguf__blk_q4_0(p, x ? x + i : NULL, x ? out : out + i);
        break;
    case GGUF_T_Q4_1:
        for (i = 0; i < n; i += 32, p += sizeof(gguf_block_q4_1))
            gguf__blk_q4_1(p, x ? x + i : NULL, x ? out : out + i);
        break;
    case GGUF_T_Q8_0:
        for (i = 0; i < n; i += 32, p += sizeof(gguf_block_q8_0))
            gguf__blk_q8_0(p, x ? x + i : NULL, x ? out : out + i);
        break;
    default:                                       /* F32, F16              */
        for (i = 0; i < n; i++) {
            float w = gguf__elem(type, p, i);
            if (x) out[i & 31] += w * x[i];
            else   out[i] = w;
        }
    }
}

/* n weights of a dequantizable type, starting at src -> dst (n,). n must be
   a multiple of the type's block. Returns 0 for other types or n.          */
GGUF_UNUSED static int gguf_dequant(uint32_t type, const void *src, float *dst, uint64_t n)
{
    if (!gguf_can_dequant(type) || n % gguf__types[type].blck != 0) return 0;
    gguf__walk(type, (const uint8_t *)src, n, NULL, dst);
    return 1;
}

/* dot(row, x): row is n weights of `type` (n a multiple of its block), x is
   (n,) floats. The hot path of every matmul; the matrix is never expanded.
   The weights are exactly gguf_dequant's; the products go into 32 lanes,
   summed pairwise at the end. Returns 0 for a type gguf_dequant refuses.   */
GGUF_UNUSED static float gguf_dot(uint32_t type, const void *row, const float *x, uint64_t n)
{
    float acc[32];
    uint64_t j, h;
    if (!gguf_can_dequant(type) || n % gguf__types[type].blck != 0) return 0.0f;
    memset(acc, 0, sizeof acc);
    gguf__walk(type, (const uint8_t *)row, n, x, acc);
    for (h = 16; h >= 1; h /= 2)          /* pairwise: 32 -> 16 -> ... -> 1  */
        for (j = 0; j < h; j++) acc[j] += acc[j + h];
    return acc[0];
}

/* y[r] = dot(W row r, x) for rows r0 <= r < r1 of a 2-D weight W (ne[0] =
   in, ne[1] = out): x is (in,), y is (out,). Row ranges let a caller split
   one mat-vec across threads.                                              */
GGUF_UNUSED static void gguf_matvec(const gguf_tensor *W, const float *x, float *y,
                                    uint64_t r0, uint64_t r1)
{
    uint64_t r;
    for (r = r0; r < r1; r++) y[r] = gguf_dot(W->type, gguf_tensor_row(W, r), x, W->ne[0]);
}

#endif /* KVQ_EXAMPLES_GGUF_H */
