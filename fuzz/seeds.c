/* fuzz/seeds.c - writes the small seed corpus in fuzz/corpus/ (committed;
   regenerate with `make fuzz-seeds`). Each seed is a valid input that
   reaches deep into its target: a well-formed .npy of each version and
   dtype, a tiny GGUF v3 with every metadata kind and three tensor types,
   quantizer shapes of every axis and mode, and for every cache policy an
   op sequence (appends, a prefill, attention, eviction, compaction, reads). */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

static void put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[256];
    FILE *f;
    snprintf(path, sizeof path, "fuzz/corpus/%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    fwrite(p, 1, n, f);
    fclose(f);
}

/* ---- .npy ---------------------------------------------------------------- */
/* ---- a tiny valid LLaMA model as GGUF v3 (fuzz_model) -------------------
   dim 8, hidden 16, 1 layer, 2 heads, 1 KV head (head_dim 4), vocab 8 with
   two ChatML specials and one merge; tensors F32 (type 0) or F16 (type 1),
   with or without a separate classifier (output.weight). With kind 2 the
   sizes are x4 (dim 32, a whole 32-weight block per row) and the matrices
   are the block types llm.h computes on: Q8_0 (8), Q4_1 (3), Q4_0 (2),
   norms F32.                                                              */
typedef struct { uint8_t *b; size_t n; } gw;
static void gw_le(gw *w, uint64_t v, int n) { int i; for (i = 0; i < n; i++) w->b[w->n++] = (uint8_t)(v >> (8 * i)); }
static void gw_str(gw *w, const char *s) { size_t n = strlen(s); gw_le(w, n, 8); memcpy(w->b + w->n, s, n); w->n += n; }
static void gw_u32kv(gw *w, const char *k, uint32_t v) { gw_str(w, k); gw_le(w, 4, 4); gw_le(w, v, 4); }

static uint16_t gw_f16(float f)          /* exact for the values used: k/64 */
{
    uint32_t u;
    int e;
    float m;
    if (f == 0.0f) return 0;
    m = frexpf(f < 0 ? -f : f, &e);      /* f = m 2^e, 0.5 <= m < 1          */
    u = (uint32_t)((m * 2.0f - 1.0f) * 1024.0f + 0.5f);
    return (uint16_t)((f < 0 ? 0x8000u : 0u) | ((uint32_t)(e - 1 + 15) << 10) | u);
}

static size_t tiny_llama(uint8_t *b, int kind, int untied)
{
    /* kind 2: each matrix's block type (0 = F32 for the norms)            */
    static const uint32_t qtype[12] = { 8, 0, 0, 3, 2, 8, 3, 0, 3, 2, 8, 3 };
    const int f16 = kind == 1, x = kind == 2 ? 4 : 1;
    static const char *names[12] = { "token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
        "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
        "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
        "output.weight" };
    static const uint64_t ne[12][2] = { {8, 8}, {8, 1}, {8, 1}, {8, 8}, {8, 4}, {8, 4}, {8, 8},
                                        {8, 1}, {8, 16}, {8, 16}, {16, 8}, {8, 8} };
    static const char *toks[8] = { "a", "b", "c", "ab", "<|im_start|>", "<|im_end|>", "\xC4\xA0", "h" };
    static const int32_t types[8] = { 1, 1, 1, 1, 3, 3, 1, 1 };
    gw w = { b, 0 };
    int n_t = untied ? 12 : 11, i, j;
    uint64_t off = 0, esz = f16 ? 2 : 4, seed = 12345;
    gw_le(&w, 0x46554747u, 4);                  /* "GGUF"                  */
    gw_le(&w, 3, 4); gw_le(&w, (uint64_t)n_t, 8); gw_le(&w, 12, 8);
    gw_str(&w, "general.architecture"); gw_le(&w, 8, 4); gw_str(&w, "llama");
    gw_u32kv(&w, "llama.embedding_length", (uint32_t)(8 * x));
    gw_u32kv(&w, "llama.feed_forward_length", (uint32_t)(16 * x));
    gw_u32kv(&w, "llama.block_count", 1);
    gw_u32kv(&w, "llama.attention.head_count", 2);
    gw_u32kv(&w, "llama.attention.head_count_kv", 1);
    { float e = 1e-5f; uint32_t u; memcpy(&u, &e, 4);
      gw_str(&w, "llama.attention.layer_norm_rms_epsilon"); gw_le(&w, 6, 4); gw_le(&w, u, 4); }
    gw_str(&w, "tokenizer.ggml.tokens"); gw_le(&w, 9, 4); gw_le(&w, 8, 4); gw_le(&w, 8, 8);
    for (i = 0; i < 8; i++) gw_str(&w, toks[i]);
    gw_str(&w, "tokenizer.ggml.token_type"); gw_le(&w, 9, 4); gw_le(&w, 5, 4); gw_le(&w, 8, 8);
    for (i = 0; i < 8; i++) gw_le(&w, (uint32_t)types[i], 4);
    gw_str(&w, "tokenizer.ggml.merges"); gw_le(&w, 9, 4); gw_le(&w, 8, 4); gw_le(&w, 1, 8);
    gw_str(&w, "a b");
    gw_u32kv(&w, "tokenizer.ggml.eos_token_id", 5);
    gw_str(&w, "tokenizer.chat_template"); gw_le(&w, 8, 4);
    gw_str(&w, "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}");
    for (i = 0; i < n_t; i++) {                 /* tensor infos             */
        /* x4 sizes, but the vocabulary (rows of token_embd, output) stays 8 */
        uint64_t n0 = ne[i][0] * (uint64_t)x,
                 n1 = ne[i][1] == 1 || i == 0 || i == 11 ? ne[i][1] : ne[i][1] * (uint64_t)x;
        uint32_t t = kind == 2 ? qtype[i] : (uint32_t)f16;
        uint64_t bytes = t == 8 ? n0 * n1 / 32 * 34 : t == 3 ? n0 * n1 / 32 * 20
                       : t == 2 ? n0 * n1 / 32 * 18 : n0 * n1 * esz;
        gw_str(&w, names[i]);
        gw_le(&w, 2, 4); gw_le(&w, n0, 8); gw_le(&w, n1, 8);
        gw_le(&w, t, 4);
        gw_le(&w, off, 8);
        off += (bytes + 31) / 32 * 32;
    }
    while (w.n % 32) b[w.n++] = 0;
    for (i = 0; i < n_t; i++) {                 /* data, each 32-aligned    */
        size_t start = w.n;
        uint64_t n0 = ne[i][0] * (uint64_t)x,
                 n1 = ne[i][1] == 1 || i == 0 || i == 11 ? ne[i][1] : ne[i][1] * (uint64_t)x;
        uint32_t t = kind == 2 ? qtype[i] : (uint32_t)f16;
        for (j = 0; j < (int)(n0 * n1); j++) {
            float v;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            v = (float)((int)(seed >> 58) - 32) / 64.0f;          /* k/64 */
            if (strstr(names[i], "norm")) v = 1.0f;
            if (t >= 2 && j % 32 == 0) {         /* a block: scale(s), codes */
                int k;
                gw_le(&w, gw_f16(v / 8.0f), 2);
                if (t == 3) gw_le(&w, gw_f16(-v), 2);
                for (k = 0; k < (t == 8 ? 32 : 16); k++)
                    b[w.n++] = (uint8_t)((seed >> (k % 8 * 7)) & (t == 8 ? 0x3F : 0xFF));
            } else if (t == 1) gw_le(&w, gw_f16(v), 2);
            else if (t == 0) { uint32_t u; memcpy(&u, &v, 4); gw_le(&w, u, 4); }
        }
        while ((w.n - start) % 32) b[w.n++] = 0;
    }
    return w.n;
}

/* ---- pages: an op byte for (kind, sequence) as fuzz_pages.c decodes it -- */
static uint8_t page_op(int kind, int seq)
{
    int op;
    for (op = 0; op < 256; op++)
        if (op % 7 == kind && (op >> 3) % 4 == seq) return (uint8_t)op;
    return 0;
}

static size_t npy(uint8_t *b, int major, const char *dict, size_t payload)
{
    size_t hoff = major == 1 ? 10 : 12, dl = strlen(dict), hlen = dl + 1, i;
    while ((hoff + hlen) % 64) hlen++;
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major; b[7] = 0;
    b[8] = (uint8_t)hlen; b[9] = (uint8_t)(hlen >> 8);
    if (major != 1) { b[10] = 0; b[11] = 0; }
    memcpy(b + hoff, dict, dl);
    memset(b + hoff + dl, ' ', hlen - dl - 1);
    b[hoff + hlen - 1] = '\n';
    for (i = 0; i < payload; i++) b[hoff + hlen + i] = (uint8_t)(i * 37 + 60);
    return hoff + hlen + payload;
}

/* ---- GGUF ---------------------------------------------------------------- */
static uint8_t *g_p;
static void u8(unsigned v) { *g_p++ = (uint8_t)v; }
static void u32(uint32_t v) { int i; for (i = 0; i < 4; i++) u8((v >> (8 * i)) & 0xFF); }
static void u64(uint64_t v) { int i; for (i = 0; i < 8; i++) u8((unsigned)((v >> (8 * i)) & 0xFF)); }
static void str(const char *s) { u64(strlen(s)); memcpy(g_p, s, strlen(s)); g_p += strlen(s); }

static size_t gguf(uint8_t *b)
{
    size_t n;
    g_p = b;
    memcpy(g_p, "GGUF", 4); g_p += 4;
    u32(3); u64(3); u64(5);                       /* version, tensors, kv  */
    str("general.architecture"); u32(8); str("llama");
    str("llama.block_count"); u32(4); u32(1);
    str("llama.rope.freq_base"); u32(6); u32(0x461C4000u);      /* 10000.f */
    str("general.alignment"); u32(4); u32(32);
    str("tokenizer.ggml.tokens"); u32(9); u32(8); u64(3); str("a"); str("bc"); str("<s>");
    str("t.f32"); u32(2); u64(4); u64(2); u32(0); u64(0);      /* F32 4x2  */
    str("t.q8");  u32(1); u64(32); u32(8); u64(32);             /* Q8_0 32  */
    str("t.f16"); u32(1); u64(8); u32(1); u64(96);              /* F16 8    */
    while ((size_t)(g_p - b) % 32) u8(0);
    for (n = 0; n < 8; n++) u32(0x3F800000u + (uint32_t)n * 0x100000u);   /* t.f32 */
    u8(0x00); u8(0x3C);                           /* Q8_0: d = 1.0 (fp16)  */
    for (n = 0; n < 32; n++) u8((unsigned)(n * 7) & 0xFF);
    while ((size_t)(g_p - b) % 32) u8(0);
    for (n = 0; n < 8; n++) { u8(0x00); u8(0x38 + (unsigned)n); }        /* t.f16 */
    return (size_t)(g_p - b);
}

int main(void)
{
    static uint8_t b[4096];
    size_t n, i, pol;
    /* npy                                                                  */
    n = npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    put("fuzz_npy", "f4_2x3_v1.npy", b, n);
    n = npy(b, 2, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", 8);
    put("fuzz_npy", "f2_4_v2.npy", b, n);
    n = npy(b, 3, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1, 2), }", 16);
    put("fuzz_npy", "f4_4d_v3.npy", b, n);
    n = npy(b, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
    put("fuzz_npy", "fortran_refused.npy", b, n);
    /* gguf                                                                 */
    n = gguf(b);
    put("fuzz_gguf", "tiny_v3.gguf", b, n);
    /* quantizer: (bits|mode|axis|raw, G, D, T) then data                   */
    {
        static const uint8_t heads[6][4] = {
            { 0x01, 0x06, 0x1F, 0x07 },    /* B=2 float per-token, G=32, D=32, T=8  */
            { 0x0A, 0x04, 0x0F, 0x0F },    /* B=4 per-channel, G=8, D=16, T=16 */
            { 0x17, 0x05, 0x0F, 0x03 },    /* B=8 int per-token raw, G=16      */
            { 0x00, 0x00, 0x03, 0x00 },    /* B=1, G=1, D=4, T=1               */
            { 0x05, 0x07, 0x09, 0x04 },    /* G=5 per-token, D=10 (divides)    */
            { 0x1E, 0x03, 0x0B, 0x07 },    /* raw floats, int per-channel, G=4 */
        };
        for (i = 0; i < 6; i++) {
            char name[32];
            memcpy(b, heads[i], 4);
            for (n = 4; n < 4 + 64; n++) b[n] = (uint8_t)((n * 29 + i * 11) & 0xFF);
            if (heads[i][0] & 0x10)            /* a few real floats          */
                for (n = 4; n + 4 <= 68; n += 4) { b[n] = 0; b[n + 1] = 0; b[n + 2] = (uint8_t)(0x80 + n); b[n + 3] = (uint8_t)(0x3F + (n & 0x40)); }
            snprintf(name, sizeof name, "shape_%zu", i);
            put("fuzz_quant", name, b, 68);
        }
    }
    /* formats (Sec. 4.1): (format, bits, n, stride, data mode), a side
       scale, then data; every format once at its own width and group,
       grid data (b4 = 0) with a tame scale, and once raw floats          */
    for (i = 0; i < 2 * 10 /* kvq.h: KVQ_FORMAT_COUNT - 1 */; i++) {
        char name[32];
        b[0] = (uint8_t)(i % 10 /* kvq.h: KVQ_FORMAT_COUNT - 1 */);       /* format 1 + b0 */
        b[1] = (uint8_t)(0x80 | (i * 8));                   /* its own width */
        b[2] = 0x80;                                        /* its own group */
        b[3] = (uint8_t)(0x40 + i % 3);
        b[4] = (uint8_t)(i >= 10);        /* raw floats    */
        b[5] = 0x20; b[6] = 0x15; b[7] = 0; b[8] = 0;       /* scale 1.125 2^1 */
        for (n = 9; n < 9 + 4 * 64; n++) b[n] = (uint8_t)((n * 37 + i * 13) & 0xFF);
        if (b[4])                                   /* a few real floats    */
            for (n = 9; n + 4 <= 9 + 4 * 64; n += 4) { b[n + 2] = (uint8_t)(n * 7); b[n + 3] = (uint8_t)(0x3E + (n & 1) * 0x80); }
        snprintf(name, sizeof name, "format_%02zu", i);
        put("fuzz_formats", name, b, 9 + 4 * 64);
    }
    /* cache: 8 config bytes, then ops for every policy; each policy once
       as given and once rotated (b[7] = 0x06: keys Hadamard with signs,
       values Hadamard; 8 seed bytes follow), the rotated run also with
       a row whose rotation exceeds KVQ_MAX_ABS_INPUT (refused, RANGE) and
       attention for 3 heads, 2 per scratch                                */
    for (pol = 0; pol < 12; pol++) {
        char name[32];
        uint8_t *p = b;
        int rot = pol >= 6;
        size_t nq = rot ? 3 : 2;
        *p++ = (uint8_t)(pol % 6 * 3 + 1); /* D = 8, policy pol % 6         */
        *p++ = 0x05;                       /* 2-bit keys, 4-bit values       */
        *p++ = 0x42;                       /* G 4, R 8                       */
        *p++ = 0x01;                       /* per-channel keys, per-token values */
        *p++ = 0x1A;                       /* OTT k 2, aux 4                 */
        *p++ = 0x01;                       /* one LogQuant sink              */
        *p++ = 0x0A;                       /* value scale 2^-2               */
        *p++ = rot ? 0x06 : 0x00;          /* rotations                      */
        if (rot) for (i = 0; i < 8; i++) *p++ = (uint8_t)(0x5A + 17 * i);   /* sign seed */
        *p++ = 1; *p++ = 23; *p++ = 7;     /* prefill 24 tokens, seed 7      */
        for (i = 0; i < 12; i++) {         /* 12 appends: op, seed, K, V     */
            size_t d;
            *p++ = i == 5 ? 70 : 0;        /* 70: with an allocation failed  */
            *p++ = 0;
            for (d = 0; d < 16; d++)       /* 254: KVQ_MAX_ABS_INPUT         */
                *p++ = rot && i == 7 && d < 8 ? 254 : (uint8_t)(100 + (i * 13 + d * 7) % 50);
        }
        *p++ = 5 + 7 * 9; *p++ = 40;       /* 68: reserve 41, one allocation failed */
        *p++ = 2; *p++ = rot ? 5 : 1;      /* attend EAGER, 2 heads (3, 2 at once) */
        for (i = 0; i < nq * 8; i++) *p++ = (uint8_t)(110 + i);
        *p++ = 6;                          /* read all                       */
        *p++ = 3 + 7 * 36; *p++ = 9;       /* evict: random mask (op >> 6 = 3) */
        *p++ = 4; *p++ = 8;                /* compact, blocks of 9           */
        *p++ = 2 + 7 * 18; *p++ = 0;       /* 128: attend ONLINE, 1 head     */
        for (i = 0; i < 8; i++) *p++ = (uint8_t)(130 - i);
        *p++ = 6;
        snprintf(name, sizeof name, rot ? "policy_%zu_rotated" : "policy_%zu", pol % 6);
        put("fuzz_cache", name, b, (size_t)(p - b));
    }
    /* cache: D = 6 (b[7] bits 4-5 = 3), G 2; without a rotation a valid
       cache, with one (keys Hadamard) refused at init with KVQ_ERR_SIZE    */
    for (pol = 0; pol < 2; pol++) {
        char name[32];
        uint8_t *p = b;
        *p++ = 1; *p++ = 0x05; *p++ = 0x41; *p++ = 0x01; *p++ = 0; *p++ = 0; *p++ = 0x0A;
        *p++ = (uint8_t)(0x30 | pol);
        *p++ = 1; *p++ = 20; *p++ = 3;     /* prefill 21 tokens, seed 3      */
        *p++ = 2; *p++ = 0;                /* attend, 1 head                 */
        for (i = 0; i < 6; i++) *p++ = (uint8_t)(120 + i);
        *p++ = 6;
        snprintf(name, sizeof name, pol ? "d6_rotation_refused" : "d6_unrotated");
        put("fuzz_cache", name, b, (size_t)(p - b));
    }
    /* cache, wild mode (b[7] bit 7): the three configs of issue 16 whose
       unused fields once sized buffers, then 40 appends each              */
    for (pol = 0; pol < 3; pol++) {
        /* D = 16; policy CUSTOM (keys FLUSH, values NONE), KIVI, OTT (layer
           2 + 0 = k > 0; the seed sets k = 0 through b[4])                 */
        static const uint8_t first[3] = { 5 * 3 + 2, 0 * 3 + 2, 2 * 3 + 2 };
        /* field bytes: group, R, value_group, ott_k, ott_aux, W, sinks;
           (e << 2) | 3 is edges[e]: 13 = 2^63 + 1, 14 = (2^63 + 1) / 3,
           10 = 2e7                                                         */
        static const uint8_t wild[3][7] = {
            { 0, 0, (13 << 2) | 3, 0, 0, (14 << 2) | 3, 0 },
            { 0, 0, 0, 0, (10 << 2) | 3, (10 << 2) | 3, 0 },
            { 0, 0, 0, 0, (10 << 2) | 3, (10 << 2) | 3, 0 } };
        char name[32];
        uint8_t *p = b;
        *p++ = first[pol];
        *p++ = 0x05;                       /* 2-bit; CUSTOM: keys FLUSH, values NONE */
        *p++ = 0x42;                       /* G 4, R 8                       */
        *p++ = 0x01;
        *p++ = 0x00;                       /* OTT k = 0                      */
        *p++ = 0x00;
        *p++ = 0x0A;
        *p++ = 0x80;                       /* wild mode                      */
        for (i = 0; i < 7; i++) *p++ = wild[pol][i];
        for (i = 0; i < 40; i++) {
            size_t d;
            *p++ = 0; *p++ = 0;            /* append, seed                   */
            for (d = 0; d < 32; d++) *p++ = (uint8_t)(100 + (i * 13 + d * 7) % 50);
        }
        *p++ = 6;                          /* read all                       */
        snprintf(name, sizeof name, "unused_fields_%zu", pol);
        put("fuzz_cache", name, b, (size_t)(p - b));
    }
    /* model: the tiny LLaMA, F32, F16 and block types, tied and untied     */
    for (pol = 0; pol < 6; pol++) {
        static uint8_t m[32768];
        static const char *kinds[3] = { "f32", "f16", "q" };
        char name[32];
        n = tiny_llama(m, (int)(pol % 3), (int)(pol / 3));
        snprintf(name, sizeof name, "tiny_llama_%s_%s.gguf", kinds[pol % 3],
                 pol / 3 ? "untied" : "tied");
        put("fuzz_model", name, m, n);
    }
    /* pages: 8 blocks of 4 slots, 6-byte payloads; fill, fork, evict,
       repack, holefill; then (pool_1) the pool is freed under live
       sequences, every call must be refused, the sequences freed, and a
       new pool made                                                       */
    for (pol = 0; pol < 2; pol++) {
        char name[32];
        uint8_t *p = b;
        *p++ = 7; *p++ = 3; *p++ = 6;
        for (i = 0; i < 14; i++) { *p++ = page_op(0, 0); *p++ = 0; *p++ = 0; }   /* append */
        *p++ = page_op(1, 0); *p++ = 0; *p++ = 0;                 /* fork 0 -> 1   */
        for (i = 0; i < 3; i++) { *p++ = page_op(0, 1); *p++ = 2; *p++ = 0; }    /* CoW   */
        *p++ = page_op(2, 0); *p++ = 17; *p++ = 3;                /* evict         */
        *p++ = page_op(3, 0); *p++ = 0; *p++ = 0;                 /* repack from 0 */
        *p++ = page_op(2, 1); *p++ = 5; *p++ = 9;
        *p++ = page_op(4, 1); *p++ = 2; *p++ = 8;                 /* holefill      */
        if (pol == 1) {
            *p++ = page_op(6, 0); *p++ = 0; *p++ = 0;             /* pool freed    */
            for (i = 0; i < 5; i++) { *p++ = page_op((int)i, 0); *p++ = 2; *p++ = 4; }
            *p++ = page_op(5, 0); *p++ = 0; *p++ = 0;             /* free seqs     */
            *p++ = page_op(5, 1); *p++ = 0; *p++ = 0;
            *p++ = page_op(6, 0); *p++ = 2; *p++ = 5;             /* a new pool    */
            for (i = 0; i < 6; i++) { *p++ = page_op(0, 2); *p++ = 0; *p++ = 0; }
        }
        snprintf(name, sizeof name, "pool_%zu", pol);
        put("fuzz_pages", name, b, (size_t)(p - b));
    }
    printf("seeds written under fuzz/corpus/\n");
    return 0;
}
