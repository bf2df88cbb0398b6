/* examples/llm/llm.h - a LLaMA-architecture transformer in plain C whose keys and
   values live in kvq caches, one per (layer, KV head).

   It is the model only: it knows nothing about files. A loader (llm.c's
   GGUF loader) describes each weight matrix where it lies, in its stored
   type (float32, or ggml's Q4_0 / Q4_1 / Q8_0 blocks), and this file
   computes on it as stored, the way a GGUF engine does. Written to be read
   top to bottom, like llama2.c's run.c.

   USAGE
       #define KVQ_IMPLEMENTATION
       #include "kvq.h"
       #include "examples/llm/llm.h"
       llm_model m;  m.cfg = ...;  llm_weights_alloc(&m.w, &m.cfg);  // fp32, fill
       llm_opts o = llm_opts_default();
       o.cache_fn = my_cache_fn;  o.cache_user = ...;   // NULL: fp32 caches
       o.n_threads = 1;                                 // 0: every online core
       llm_state s;  llm_state_init(&s, &m, &o);
       float *logits = llm_forward(&m, &s, token, pos);  // NULL on error: s.why
       // T tokens at once (o.max_prefill >= T): same logits, weights read once
       llm_forward_many(&m, &s, tokens, T, all_logits);

   COMPILE-TIME OPTIONS
       -mavx2 -mfma -mf16c (or -march=native on x86-64): the block dots of
                  Sec. 4a run on AVX2; without them, the plain C ones (the
                  reference; tests/test_llm.c compares the two)
       LLM_NO_SIMD     the plain C block dots even where AVX2 is on
       LLM_NO_THREADS  no thread pool (opts.n_threads is then ignored);
                  threads need POSIX threads and GCC/clang atomics

   CONTENTS
       1. Config, weights, their orientation and storage types
       2. Options: cache configs, the attention hook, K/V/Q capture, threads
       3. State: every buffer, allocated once (build / free / reset)
       4. Building blocks: RMSNorm, 8-bit activations and block dots, the
          thread pool, the matmul driver, RoPE, SwiGLU
       5. Attention over the kvq caches (decode) and over the prompt (prefill)
       6. llm_forward: one token through the whole model
       7. Many tokens layer by layer: llm_prefill, llm_forward_many
       8. Bytes, and a K/V/Q recorder that writes .npy

   THE MODEL (LLaMA; SmolLM2 is one)
       x = embedding[token]
       per layer:  x += Wo . attn(RoPE(Wq . rms(x)), RoPE(Wk . rms(x)), Wv . rms(x))
                   x += W2 . (silu(W1 . rms(x)) * (W3 . rms(x)))
       logits = Wcls . rms(x)
   Each rms() has its own weight vector. Every product with a block matrix
   quantizes its input vector to 8 bits first (Sec. 4a), as llama.cpp does;
   with float32 matrices the whole pass is float32. The kvq caches always
   see float32 post-RoPE K and V. Errors never crash: a function that fails
   returns NULL or a kvq_status, and s->why says why in one sentence. */
#ifndef KVQ_EXAMPLES_LLM_H
#define KVQ_EXAMPLES_LLM_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvq.h"
#include "../npy.h"      /* the recorder writes .npy */

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(LLM_NO_SIMD)
#define LLM_SIMD 1
#include <immintrin.h>
#else
#define LLM_SIMD 0
#endif
#if !defined(LLM_NO_THREADS) && (defined(__unix__) || defined(__APPLE__)) && \
    (defined(__GNUC__) || defined(__clang__))
#define LLM_THREADS 1
#include <pthread.h>
#include <sched.h>       /* sched_yield */
#include <unistd.h>      /* sysconf: the online cores */
#else
#define LLM_THREADS 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LLM_API static __attribute__((unused))   /* a program uses only some */
#else
#define LLM_API static
#endif

/* ======================================================================== */
/* 1. CONFIG, WEIGHTS AND THEIR ORIENTATION                                 */
/* ======================================================================== */

/* How RoPE pairs the channels of one head (head_dim = 2 * half).
   LLM_ROPE_ADJACENT  pairs (2i, 2i+1), rotated by angle pos * theta^(-2i/hd).
                      llama.cpp's "NORM" rope, the one it uses for
                      LLM_ARCH_LLAMA. llama.cpp's converter (convert_hf_to_gguf,
                      LlamaModel.permute) reorders the rows of Wq and Wk so
                      that this pairing computes exactly what the Hugging Face
                      model computes with its half-split rotate_half. A LLaMA
                      GGUF therefore needs ADJACENT (the default).
   LLM_ROPE_HALF      pairs (i, i + half), the same angle for pair i: the
                      Hugging Face / GPT-NeoX form, for UNPERMUTED weights
                      (e.g. read straight from safetensors).
   Using the wrong one on real weights does not crash; it silently ruins the
   model (perplexity in the hundreds), so the loader must choose.            */
typedef enum llm_rope_pairs {
    LLM_ROPE_ADJACENT = 0,
    LLM_ROPE_HALF     = 1
} llm_rope_pairs;

typedef struct llm_config {
    int   dim;              /* residual stream width (SmolLM2-135M: 576)    */
    int   hidden_dim;       /* SwiGLU inner width (1536)                     */
    int   n_layers;         /* (30)                                          */
    int   n_heads;          /* query heads (9)                               */
    int   n_kv_heads;       /* key/value heads, divides n_heads (3)          */
    int   head_dim;         /* D of every head, even (64)                    */
    int   vocab_size;       /* (49152)                                       */
    int   seq_len;          /* most positions a state holds                  */
    float rope_theta;       /* RoPE base (SmolLM2: 100000)                   */
    float rms_eps;          /* RMSNorm epsilon (1e-5)                        */
    int   tied_embeddings;  /* 1: logits use token_embedding (wcls aliases)  */
    llm_rope_pairs rope_pairs;
} llm_config;

/* The weights. Every matrix is an llm_mat: a row-major (out, in) array in
   one of a few storage types, kept as stored (Sec. 4 computes on the
   blocks); the norm vectors are float32.

   ORIENTATION. A weight matrix of shape (out, in) is stored row-major:
       out[i] = sum_j W[i, j] * x[j]        row i = in contiguous weights
   This is the memory order of a ggml/GGUF tensor with ne0 = in (the fast,
   contiguous dimension) and ne1 = out, so GGUF blk.L.attn_q.weight with
   ne = [dim, n_heads*head_dim] is used in place, its bytes unchanged. It is
   also PyTorch's nn.Linear.weight layout. Rows are contiguous, so each
   output is one dot product over contiguous memory (Sec. 4).

   STORAGE TYPES (ggml's numbering and block layouts, ggml-common.h). A row
   of a block type is in / 32 blocks of 32 weights; d and m are fp16 bits:
     LLM_F32    float, 4 bytes per weight
     LLM_Q4_0   18 bytes: d, 16 bytes of nibbles;  w = d * (nibble - 8)
     LLM_Q4_1   20 bytes: d, m, 16 bytes;          w = d * nibble + m
     LLM_Q8_0   34 bytes: d, 32 int8;               w = d * q
   In a 4-bit block, byte j's low nibble is weight j and its high nibble
   weight j + 16. Blocks are read byte-wise (memcpy), so a row may start at
   any address.

   LAYOUT. A block matrix is either in the file's order (LLM_ROWS: row after
   row, as above) or, after llm_mat_interleave (Sec. 4a), in groups of 4
   rows whose blocks are interleaved column by column (LLM_ROWS4), scales
   first, then the four rows' codes:

       group g = rows 4g .. 4g+3, block b (Q4_1 shown: 80 bytes = 4 x 20)
       +----+----+----+----+----+----+----+----+--------+--------+--------+--------+
       | d0 | d1 | d2 | d3 | m0 | m1 | m2 | m3 | codes0 | codes1 | codes2 | codes3 |
       +----+----+----+----+----+----+----+----+--------+--------+--------+--------+
         fp16 each (Q4_0, Q8_0: no m's)         16 bytes each (Q8_0: 32)
       group g, block 0 | group g, block 1 | ... | group g+1, block 0 | ...

   The bytes are the same ones, moved: a group fills exactly the 4 rows it
   replaces, so the permutation is done in place. One load then reads 4
   rows' scales and two loads their codes, which is what lets decode's
   AVX2 dot (Sec. 4a) spend 1.8x fewer instructions per weight byte.
   Below, q_dim = n_heads * head_dim and kv_dim = n_kv_heads * head_dim.     */
typedef enum llm_type {
    LLM_F32 = 0, LLM_Q4_0 = 2, LLM_Q4_1 = 3, LLM_Q8_0 = 8
} llm_type;

typedef enum llm_layout {
    LLM_ROWS  = 0,  /* row after row (the file's order)                       */
    LLM_ROWS4 = 4   /* groups of 4 rows, interleaved block by block (above)   */
} llm_layout;

typedef struct llm_mat {
    llm_type    type;
    int         rows, cols;  /* (out, in); cols % 32 == 0 for block types    */
    size_t      row_bytes;   /* bytes of one row                             */
    const void *data;        /* (rows, row_bytes), not owned                 */
    llm_layout  layout;      /* LLM_ROWS unless llm_mat_interleave ran       */
} llm_mat;

typedef struct llm_weights {
    llm_mat token_embedding; /* (vocab_size, dim)          token_embd        */
    float  *rms_att;         /* (n_layers, dim)            attn_norm         */
    llm_mat *wq;             /* (n_layers) of (q_dim, dim)  attn_q           */
    llm_mat *wk;             /* (n_layers) of (kv_dim, dim) attn_k           */
    llm_mat *wv;             /* (n_layers) of (kv_dim, dim) attn_v           */
    llm_mat *wo;             /* (n_layers) of (dim, q_dim)  attn_output      */
    float  *rms_ffn;         /* (n_layers, dim)            ffn_norm          */
    llm_mat *w1;             /* (n_layers) of (hidden_dim, dim) ffn_gate     */
    llm_mat *w3;             /* (n_layers) of (hidden_dim, dim) ffn_up       */
    llm_mat *w2;             /* (n_layers) of (dim, hidden_dim) ffn_down     */
    float  *rms_final;       /* (dim)                      output_norm       */
    llm_mat wcls;            /* (vocab_size, dim)          output; a copy of
                                token_embedding when tied                    */
    /* what llm_weights_init allocated (the matrices' bytes are the loader's,
       e.g. the model file, unless they point into mem)                     */
    llm_mat *mats;           /* (7, n_layers): wq .. w2 point into it        */
    float   *mem;            /* the vectors, then any float32 matrices       */
    size_t   mem_floats;
} llm_weights;

typedef struct llm_model {
    llm_config  cfg;
    llm_weights w;
} llm_model;

/* Small helpers: a formatted reason into a buffer, and size_t products that
   refuse to overflow (a malformed file must give an error, not a wrap).    */
static void llm__say(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    if (!why || n == 0) return;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}
static int llm__mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > (size_t)-1 / a) return 0;
    *out = a * b;
    return 1;
}
static float *llm__alloc(size_t n1, size_t n2, size_t n3)   /* zeroed floats */
{
    size_t n, bytes;
    if (!llm__mul(n1, n2, &n) || !llm__mul(n, n3, &n) ||
        !llm__mul(n, sizeof(float), &bytes) || n == 0)
        return NULL;
    return (float *)calloc(n, sizeof(float));
}

/* Checks every size the forward pass relies on. KVQ_OK or KVQ_ERR_CONFIG
   with a reason.                                                            */
LLM_API kvq_status llm_config_check(const llm_config *c, char *why, size_t why_len)
{
    if (!c) { llm__say(why, why_len, "config is NULL"); return KVQ_ERR_NULL; }
    if (c->dim <= 0 || c->hidden_dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 ||
        c->n_kv_heads <= 0 || c->head_dim <= 0 || c->vocab_size <= 0 || c->seq_len <= 0) {
        llm__say(why, why_len, "config: every size must be positive (dim %d hidden %d "
                 "layers %d heads %d kv_heads %d head_dim %d vocab %d seq_len %d)",
                 c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                 c->head_dim, c->vocab_size, c->seq_len);
        return KVQ_ERR_CONFIG;
    }
    if (c->n_heads % c->n_kv_heads != 0) {
        llm__say(why, why_len, "config: n_kv_heads %d does not divide n_heads %d",
                 c->n_kv_heads, c->n_heads);
        return KVQ_ERR_CONFIG;
    }
    if (c->head_dim % 2 != 0) {
        llm__say(why, why_len, "config: RoPE needs an even head_dim (got %d)", c->head_dim);
        return KVQ_ERR_CONFIG;
    }
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta) ||
        !(c->rms_eps > 0.0f) || !isfinite(c->rms_eps)) {
        /* eps = 0 divides by zero on an all-zero row; Inf turns every
           normalized row into zeros                                        */
        llm__say(why, why_len, "config: rope_theta (%g) and rms_eps (%g) must be finite "
                 "and > 0", (double)c->rope_theta, (double)c->rms_eps);
        return KVQ_ERR_CONFIG;
    }
    if (c->rope_pairs != LLM_ROPE_ADJACENT && c->rope_pairs != LLM_ROPE_HALF) {
        llm__say(why, why_len, "config: unknown rope_pairs %d", (int)c->rope_pairs);
        return KVQ_ERR_CONFIG;
    }
    if ((size_t)c->seq_len > KVQ_MAX_POSITIONS) {
        llm__say(why, why_len, "config: seq_len %d exceeds a kvq cache's capacity", c->seq_len);
        return KVQ_ERR_CONFIG;
    }
    return KVQ_OK;
}
/* Bytes of one row of `cols` weights of type t; 0 when t is not one of the
   types above or cols is not a positive whole number of its blocks.       */
LLM_API size_t llm_row_bytes(llm_type t, int cols)
{
    size_t n = (size_t)cols;
    if (cols <= 0) return 0;
    switch (t) {
    case LLM_F32:  return n * sizeof(float);
    case LLM_Q4_0: return n % 32 ? 0 : n / 32 * 18;
    case LLM_Q4_1: return n % 32 ? 0 : n / 32 * 20;
    case LLM_Q8_0: return n % 32 ? 0 : n / 32 * 34;
    }
    return 0;
}

LLM_API const char *llm_type_name(llm_type t)
{
    switch (t) {
    case LLM_F32:  return "F32";
    case LLM_Q4_0: return "Q4_0";
    case LLM_Q4_1: return "Q4_1";
    case LLM_Q8_0: return "Q8_0";
    }
    return "unknown";
}

/* Describes the (rows, cols) matrix of type t whose bytes start at data
   (rows * llm_row_bytes(t, cols) of them, which the caller keeps alive).
   KVQ_OK, or KVQ_ERR_NULL / KVQ_ERR_CONFIG with a reason; m is then empty. */
LLM_API kvq_status llm_mat_set(llm_mat *m, llm_type t, const void *data, int rows, int cols,
                               char *why, size_t why_len)
{
    size_t rb = llm_row_bytes(t, cols), total;
    if (!m) { llm__say(why, why_len, "matrix is NULL"); return KVQ_ERR_NULL; }
    memset(m, 0, sizeof *m);
    if (!data) { llm__say(why, why_len, "matrix data is NULL"); return KVQ_ERR_NULL; }
    if (rows <= 0 || rb == 0 || !llm__mul(rb, (size_t)rows, &total)) {
        llm__say(why, why_len, "a (%d, %d) matrix of type %s (%d): type unknown, sizes not "
                 "positive, or cols not whole 32-weight blocks", rows, cols,
                 llm_type_name(t), (int)t);
        return KVQ_ERR_CONFIG;
    }
    m->type = t; m->rows = rows; m->cols = cols; m->row_bytes = rb; m->data = data;
    return KVQ_OK;
}

/* fp16 bits at p (any alignment) as a float; little-endian, as GGUF is.    */
static float llm__half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return kvq_f16_to_f32(h);
}

/* Whether m's layout is one it can have: row order, or LLM_ROWS4 for a
   block type with a multiple of 4 rows.                                   */
static int llm__layout_ok(const llm_mat *m)
{
    return m->layout == LLM_ROWS ||
           (m->layout == LLM_ROWS4 && m->type != LLM_F32 && m->rows % 4 == 0);
}

/* A block of type t: its bytes (0 for F32), and how many fp16 scales lead
   it (Q4_1: d and m; Q4_0, Q8_0: d).                                      */
static size_t llm__block_bytes(llm_type t) { return t == LLM_F32 ? 0 : llm_row_bytes(t, 32); }
static int llm__block_scales(llm_type t) { return t == LLM_Q4_1 ? 2 : 1; }

/* Block b of row r in the file's byte format (STORAGE TYPES, Sec. 1): a
   pointer into W's bytes (LLM_ROWS), or into tmp (34 bytes or more),
   where it is put back together from its group (LLM_ROWS4).              */
static const uint8_t *llm__block(const llm_mat *W, int r, int b, uint8_t *tmp)
{
    size_t bs = llm__block_bytes(W->type), codes;
    int ns = llm__block_scales(W->type), k;
    const uint8_t *g;                             /* group r / 4, block b   */
    if (W->layout != LLM_ROWS4)
        return (const uint8_t *)W->data + (size_t)r * W->row_bytes + (size_t)b * bs;
    g = (const uint8_t *)W->data + (size_t)(r / 4) * 4 * W->row_bytes + (size_t)b * 4 * bs;
    codes = bs - 2 * (size_t)ns;
    for (k = 0; k < ns; k++) memcpy(tmp + 2 * k, g + 8 * k + 2 * (r % 4), 2);
    memcpy(tmp + 2 * ns, g + 8 * ns + (size_t)(r % 4) * codes, codes);
    return tmp;
}

/* Every scale of a block matrix (d, and Q4_1's m) is a finite fp16. A NaN or
   Inf scale turns every output it touches into NaN, so a loader refuses the
   file here, naming the row and block, instead of failing at the first
   token. F32 matrices are not scanned: a NaN there ends in non-finite
   logits, which the forward pass reports (Sec. 6). One pass over the
   bytes: call it at load, not per state.                                   */
LLM_API kvq_status llm_mat_check(const llm_mat *m, char *why, size_t why_len)
{
    size_t r, b, nb;
    int k;
    if (!m || !m->data) { llm__say(why, why_len, "matrix is NULL or empty"); return KVQ_ERR_NULL; }
    if (m->row_bytes == 0 || m->row_bytes != llm_row_bytes(m->type, m->cols) || m->rows <= 0 ||
        !llm__layout_ok(m)) {
        llm__say(why, why_len, "matrix (%d, %d) of type %s has row_bytes %zu, layout %d",
                 m->rows, m->cols, llm_type_name(m->type), m->row_bytes, (int)m->layout);
        return KVQ_ERR_CONFIG;
    }
    if (m->type == LLM_F32) return KVQ_OK;
    nb = (size_t)m->cols / 32;
    for (r = 0; r < (size_t)m->rows; r++)
        for (b = 0; b < nb; b++) {
            uint8_t tmp[34];
            const uint8_t *p = llm__block(m, (int)r, (int)b, tmp);
            for (k = 0; k < llm__block_scales(m->type); k++) {
                uint16_t h;
                memcpy(&h, p + 2 * k, sizeof h);
                if ((h & 0x7C00u) == 0x7C00u) {       /* exponent all ones  */
                    llm__say(why, why_len, "row %zu block %zu: %s scale %s is %s", r, b,
                             llm_type_name(m->type), k ? "m" : "d",
                             (h & 0x03FFu) ? "NaN" : "Inf");
                    return KVQ_ERR_NONFINITE;
                }
            }
        }
    return KVQ_OK;
}

/* Whether m can go into LLM_ROWS4: a valid block matrix in row order with
   a multiple of 4 rows. KVQ_OK, or KVQ_ERR_NULL / KVQ_ERR_CONFIG and why. */
static kvq_status llm__interleave_ok(const llm_mat *m, char *why, size_t why_len)
{
    if (!m || !m->data) { llm__say(why, why_len, "matrix is NULL or empty"); return KVQ_ERR_NULL; }
    if (m->type == LLM_F32 || m->layout != LLM_ROWS || m->rows <= 0 || m->rows % 4 ||
        m->row_bytes == 0 || m->row_bytes != llm_row_bytes(m->type, m->cols)) {
        llm__say(why, why_len, "a (%d, %d) matrix of type %s in layout %d: only block types in "
                 "row order with a multiple of 4 rows interleave", m->rows, m->cols,
                 llm_type_name(m->type), (int)m->layout);
        return KVQ_ERR_CONFIG;
    }
    return KVQ_OK;
}

/* The permutation itself, group by group through scratch (4 row_bytes):
   m passed llm__interleave_ok, so nothing can fail here.                  */
static void llm__interleave(llm_mat *m, uint8_t *scratch /* (4, row_bytes) */)
{
    size_t rb = m->row_bytes, bs = llm__block_bytes(m->type), g, b;
    int ns = llm__block_scales(m->type), i, k;
    size_t codes = bs - 2 * (size_t)ns;
    for (g = 0; g < (size_t)m->rows / 4; g++) {
        uint8_t *group = (uint8_t *)(uintptr_t)m->data + g * 4 * rb;
        memcpy(scratch, group, 4 * rb);
        for (b = 0; b < (size_t)m->cols / 32; b++)
            for (i = 0; i < 4; i++) {
                const uint8_t *src = scratch + (size_t)i * rb + b * bs;   /* row 4g+i, block b */
                uint8_t *dst = group + b * 4 * bs;
                for (k = 0; k < ns; k++) memcpy(dst + 8 * k + 2 * i, src + 2 * k, 2);
                memcpy(dst + 8 * ns + (size_t)i * codes, src + 2 * ns, codes);
            }
    }
    m->layout = LLM_ROWS4;
}

/* Puts a block matrix into LLM_ROWS4 (LAYOUT, Sec. 1) by permuting its
   bytes in place, so m->data must point to memory the caller may write
   (llm.c's loader: its own copy of the file), and no other llm_mat may
   describe the same bytes (llm_weights_interleave sees to that for a
   model). Nothing else changes: llm_mat_row gives the same floats and the
   plain dot the same bits; the AVX2 group dot rounds its float sums in
   another order (tests/test_llm.c bounds it). Any block type is accepted,
   but only Q4_0 and Q4_1 have a group dot: a Q8_0 matrix, or any matrix
   in a build without AVX2, is then read through the plain C dot: right,
   and slow. KVQ_OK; KVQ_ERR_NULL; KVQ_ERR_CONFIG with a reason (F32,
   rows not a multiple of 4, already interleaved, or not a valid matrix);
   KVQ_ERR_NOMEM (4 rows of scratch). On failure m and its bytes are
   untouched.                                                             */
LLM_API kvq_status llm_mat_interleave(llm_mat *m, char *why, size_t why_len)
{
    uint8_t *scratch;
    kvq_status st = llm__interleave_ok(m, why, why_len);
    if (st != KVQ_OK) return st;
    if (!(scratch = (uint8_t *)malloc(4 * m->row_bytes))) {
        llm__say(why, why_len, "no memory for 4 rows of scratch (%zu bytes)", 4 * m->row_bytes);
        return KVQ_ERR_NOMEM;
    }
    llm__interleave(m, scratch);
    free(scratch);
    return KVQ_OK;
}

LLM_API void llm_weights_free(llm_weights *w)
{
    if (!w) return;
    free(w->mats);
    free(w->mem);
    memset(w, 0, sizeof *w);
}

/* The matrix table (every matrix empty) and w->mem: the norm vectors
   (rms_att, rms_ffn, rms_final point there, zeroed), then extra_floats
   zeroed floats at w->mem + llm_weights_vec_floats(c) for any float32
   matrices the caller places there (llm_weights_alloc: all of them; the
   GGUF loader: the ones it expands). The matrices themselves are set by the
   caller (llm_mat_set).                                                    */
LLM_API size_t llm_weights_vec_floats(const llm_config *c)
{
    return (2 * (size_t)c->n_layers + 1) * (size_t)c->dim;
}

LLM_API kvq_status llm_weights_init(llm_weights *w, const llm_config *c, size_t extra_floats)
{
    size_t L, vec;
    kvq_status st;
    if (!w) return KVQ_ERR_NULL;
    memset(w, 0, sizeof *w);
    if ((st = llm_config_check(c, NULL, 0)) != KVQ_OK) return st;
    L = (size_t)c->n_layers;
    vec = llm_weights_vec_floats(c);
    if (extra_floats > (size_t)-1 / sizeof(float) - vec) return KVQ_ERR_NOMEM;
    w->mats = (llm_mat *)calloc(7 * L, sizeof(llm_mat));
    w->mem = llm__alloc(vec + extra_floats, 1, 1);
    if (!w->mats || !w->mem) { llm_weights_free(w); return KVQ_ERR_NOMEM; }
    w->mem_floats = vec + extra_floats;
    w->wq = w->mats;         w->wk = w->mats + L;     w->wv = w->mats + 2 * L;
    w->wo = w->mats + 3 * L; w->w1 = w->mats + 4 * L; w->w3 = w->mats + 5 * L;
    w->w2 = w->mats + 6 * L;
    w->rms_att = w->mem;
    w->rms_ffn = w->mem + L * (size_t)c->dim;
    w->rms_final = w->mem + 2 * L * (size_t)c->dim;
    return KVQ_OK;
}

/* Every weight float32 and zeroed, for a test (or a loader of fp32 files)
   to fill. Each kind is contiguous across layers, as one array would be:
   (float *)w->wq[0].data is the (n_layers, q_dim, dim) block of every wq,
   (float *)w->token_embedding.data the (vocab_size, dim) table. With tied
   embeddings wcls is token_embedding itself.                               */
LLM_API kvq_status llm_weights_alloc(llm_weights *w, const llm_config *c)
{
    size_t L, D, H, Q, KV, V, n = 0, k, l, rows[7], cols[7];
    float *p;
    kvq_status st;
    if (!w) return KVQ_ERR_NULL;
    memset(w, 0, sizeof *w);
    if ((st = llm_config_check(c, NULL, 0)) != KVQ_OK) return st;
    L = (size_t)c->n_layers; D = (size_t)c->dim; H = (size_t)c->hidden_dim;
    Q = (size_t)c->n_heads * (size_t)c->head_dim;
    KV = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    V = (size_t)c->vocab_size;
    /* wq wk wv wo w1 w3 w2: (rows, cols) = (out, in)                       */
    rows[0] = Q;  rows[1] = KV; rows[2] = KV; rows[3] = D; rows[4] = H; rows[5] = H; rows[6] = D;
    cols[0] = D;  cols[1] = D;  cols[2] = D;  cols[3] = Q; cols[4] = D; cols[5] = D; cols[6] = H;
    for (k = 0; k < 8; k++) {                     /* overflow-checked sum   */
        size_t a;
        if (k < 7 ? !llm__mul(rows[k], cols[k], &a) || !llm__mul(a, L, &a)
                  : !llm__mul(V, D * (c->tied_embeddings ? 1 : 2), &a))
            return KVQ_ERR_NOMEM;
        if (n > (size_t)-1 - a) return KVQ_ERR_NOMEM;
        n += a;
    }
    if ((st = llm_weights_init(w, c, n)) != KVQ_OK) return st;
    p = w->mem + llm_weights_vec_floats(c);
    llm_mat_set(&w->token_embedding, LLM_F32, p, (int)V, (int)D, NULL, 0);
    p += V * D;
    for (k = 0; k < 7; k++)
        for (l = 0; l < L; l++, p += rows[k] * cols[k])
            llm_mat_set(&w->mats[k * L + l], LLM_F32, p, (int)rows[k], (int)cols[k], NULL, 0);
    if (c->tied_embeddings) w->wcls = w->token_embedding;
    else llm_mat_set(&w->wcls, LLM_F32, p, (int)V, (int)D, NULL, 0);
    return KVQ_OK;
}

/* Every weight is there with the shape the config implies: each matrix a
   known type, (rows, cols) as in llm_weights, row_bytes its type's; the
   vectors non-NULL. Cheap (no pass over the bytes: llm_mat_check is that).
   KVQ_OK, or an error with a reason naming the weight.                     */
static kvq_status llm__mat_is(const llm_mat *m, int rows, int cols, const char *name, int l,
                              char *why, size_t why_len)
{
    if (!m->data) {
        llm__say(why, why_len, "weight %s (layer %d) is NULL", name, l);
        return KVQ_ERR_NULL;
    }
    if (m->rows != rows || m->cols != cols || m->row_bytes == 0 ||
        m->row_bytes != llm_row_bytes(m->type, cols)) {
        llm__say(why, why_len, "weight %s (layer %d) is (%d, %d) of type %s with %zu-byte rows; "
                 "the config needs (%d, %d)", name, l, m->rows, m->cols,
                 llm_type_name(m->type), m->row_bytes, rows, cols);
        return KVQ_ERR_CONFIG;
    }
    if (!llm__layout_ok(m)) {
        llm__say(why, why_len, "weight %s (layer %d) has layout %d (LLM_ROWS4 needs a block type "
                 "and rows a multiple of 4)", name, l, (int)m->layout);
        return KVQ_ERR_CONFIG;
    }
    return KVQ_OK;
}

LLM_API kvq_status llm_weights_check(const llm_weights *w, const llm_config *c, char *why,
                                     size_t why_len)
{
    int l, Q, KV;
    kvq_status st;
    if (!w || !c) { llm__say(why, why_len, "weights or config is NULL"); return KVQ_ERR_NULL; }
    if ((st = llm_config_check(c, why, why_len)) != KVQ_OK) return st;
    if (!w->rms_att || !w->rms_ffn || !w->rms_final || !w->wq || !w->wk || !w->wv ||
        !w->wo || !w->w1 || !w->w3 || !w->w2) {
        llm__say(why, why_len, "a weight array is NULL (a norm vector or a layer table)");
        return KVQ_ERR_NULL;
    }
    Q = c->n_heads * c->head_dim; KV = c->n_kv_heads * c->head_dim;
    if ((st = llm__mat_is(&w->token_embedding, c->vocab_size, c->dim, "token_embedding", -1,
                          why, why_len)) != KVQ_OK)
        return st;
    if ((st = llm__mat_is(&w->wcls, c->vocab_size, c->dim, c->tied_embeddings ? "wcls (tied)"
                          : "wcls (embeddings not tied)", -1, why, why_len)) != KVQ_OK)
        return st;
    for (l = 0; l < c->n_layers; l++)
        if ((st = llm__mat_is(&w->wq[l], Q, c->dim, "wq", l, why, why_len)) != KVQ_OK ||
            (st = llm__mat_is(&w->wk[l], KV, c->dim, "wk", l, why, why_len)) != KVQ_OK ||
            (st = llm__mat_is(&w->wv[l], KV, c->dim, "wv", l, why, why_len)) != KVQ_OK ||
            (st = llm__mat_is(&w->wo[l], c->dim, Q, "wo", l, why, why_len)) != KVQ_OK ||
            (st = llm__mat_is(&w->w1[l], c->hidden_dim, c->dim, "w1", l, why, why_len)) != KVQ_OK ||
            (st = llm__mat_is(&w->w3[l], c->hidden_dim, c->dim, "w3", l, why, why_len)) != KVQ_OK ||
            (st = llm__mat_is(&w->w2[l], c->dim, c->hidden_dim, "w2", l, why, why_len)) != KVQ_OK)
            return st;
    return KVQ_OK;
}

/* ======================================================================== */
/* 2. OPTIONS: CACHE CONFIGS, THE ATTENTION HOOK, K/V/Q CAPTURE             */
/* ======================================================================== */

/* The cache of one (layer, KV head) is built from the kvq_config this
   returns. Policies that differ by layer (OTT keeps no outlier pool in
   layers 0-1: kvq_config_ott(D, B, layer)) use the layer argument.          */
typedef kvq_config (*llm_cache_fn)(void *user, int layer, int kv_head,
                                   size_t head_dim);

/* Ready-made: user is `const kvq_config *`, one config for every cache.     */
LLM_API kvq_config llm_cache_same(void *user, int layer, int kv_head, size_t head_dim)
{
    (void)layer; (void)kv_head; (void)head_dim;
    return *(const kvq_config *)user;
}
/* Ready-made: user is `const kvq_config *` of n_layers, one per layer.      */
LLM_API kvq_config llm_cache_per_layer(void *user, int layer, int kv_head,
                                       size_t head_dim)
{
    (void)kv_head; (void)head_dim;
    return ((const kvq_config *)user)[layer];
}

/* Called after attention of every (layer, KV head) at every position, in
   order, with the softmax weights of the n_q query heads of the group over
   the positions 0..pos (absent, i.e. evicted, positions have weight 0).
   An eviction policy (H2O) accumulates them and may evict from c. A non-zero
   return aborts the call with KVQ_ERR_STATE. Setting a hook makes decode
   attention EAGER (the online kernel never has the probabilities) and runs
   the KV-head loop on one thread, so the hook need not be thread-safe.
   Each (layer, KV head) sees its positions in order; llm_forward_many runs
   one head's T positions before the next head's (caches are independent,
   so this is the same computation as T llm_forward calls).
   In llm_prefill the probabilities are those of the prompt's full-precision
   attention (Sec. 5), and c already holds the whole prompt.                 */
typedef int (*llm_attn_hook)(void *user, int layer, int kv_head, int pos,
                             const float *probs /* (n_q, pos + 1) */, int n_q,
                             kvq_cache *c);

/* Called with the post-RoPE query heads of a group, and the post-RoPE key
   and the value that are appended to (layer, kv_head)'s cache, for every
   (layer, KV head, position), in order, on one thread. Sec. 8's recorder is
   a ready-made one that keeps chosen heads and writes .npy.                 */
typedef void (*llm_capture_fn)(void *user, int layer, int kv_head, int pos,
                               const float *q /* (n_q, head_dim) */, int n_q,
                               const float *k /* (head_dim) */,
                               const float *v /* (head_dim) */);

typedef struct llm_opts {
    llm_cache_fn   cache_fn;    /* NULL: kvq_config_full(head_dim, 32)       */
    void          *cache_user;
    int            max_prefill; /* most tokens llm_prefill and llm_forward_many
                                   take in one call; 0 = 0
                                   (no prefill buffers). Costs about
                                   max_prefill * (4 dim + 3 q_dim + 4 kv_dim
                                   + 2 hidden) floats.                       */
    int            reserve;     /* positions reserved in every cache up front
                                   so appends never allocate; 0 = grow       */
    kvq_attn_mode  attn_mode;   /* decode attention, ONLINE by default       */
    llm_attn_hook  hook;        /* NULL by default                           */
    void          *hook_user;
    llm_capture_fn capture;     /* NULL by default                           */
    void          *capture_user;
    int            n_threads;   /* threads for matmul rows and KV heads, the
                                   caller's included: 0 (default) = every
                                   online core; 1 = no other thread at all.
                                   The logits are the same at any count.     */
} llm_opts;

LLM_API llm_opts llm_opts_default(void)
{
    llm_opts o;
    memset(&o, 0, sizeof o);
    o.attn_mode = KVQ_ATTN_ONLINE;
    return o;
}

/* ======================================================================== */
/* 3. STATE: EVERY BUFFER, ALLOCATED ONCE                                   */
/* ======================================================================== */
/* Nothing here is allocated per token. The caches themselves grow by
   doubling unless opts.reserve pre-sizes them (kvq_cache_reserve).          */
struct llm__pool;    /* Sec. 4b */
/* A matmul's input quantized to 8 bits (Sec. 4a): 32 activations as
   d * qs[j] (|qs| <= 127), and s = d * sum(qs), the block's sum, which
   Q4_1's min m multiplies (ggml's Q8_1, with d a float, not fp16).        */
typedef struct llm_q8 { float d, s; int8_t qs[32]; } llm_q8;
static struct llm__pool *llm__pool_new(int n);
static void llm__pool_free(struct llm__pool *p);
static int llm__cores(void);
#define LLM__WHY_LEN 160   /* one head's reason, as long as kvq_why() */

typedef struct llm_state {
    /* decode activations, one token                                         */
    float *x;         /* (dim) the residual stream                           */
    float *xb;        /* (dim) a normalized copy of x, input of matmuls      */
    float *xb2;       /* (dim) a matmul output added back into x             */
    float *q;         /* (n_heads, head_dim) post-RoPE queries               */
    float *k;         /* (n_kv_heads, head_dim) post-RoPE keys               */
    float *v;         /* (n_kv_heads, head_dim) values                       */
    float *att;       /* (n_heads, head_dim) attention outputs               */
    float *hb;        /* (hidden_dim) gate branch, then silu(gate) * up      */
    float *hb2;       /* (hidden_dim) up branch                              */
    float *logits;    /* (vocab_size)                                        */
    llm_q8 *xq;       /* (max(1, max_prefill), max_in / 32) a matmul's input
                         quantized, max_in = max(dim, q_dim, hidden_dim)      */
    int    max_in;
    /* RoPE                                                                  */
    double *inv_freq; /* (head_dim / 2) theta^(-2i/head_dim)                 */
    float *rope_cos;  /* (head_dim / 2) cos(pos * inv_freq[i]) for one pos   */
    float *rope_sin;  /* (head_dim / 2)                                      */
    /* attention                                                             */
    kvq_cache *cache; /* (n_layers, n_kv_heads)                              */
    kvq_config *cache_cfg; /* (n_layers, n_kv_heads) as built, for reset     */
    float *scratch;   /* (n_kv_heads, scratch_floats) kvq_attend work, one
                         slice per KV head so heads can run on threads       */
    size_t scratch_floats; /* 3 head_dim + seq_len: enough for EAGER         */
    float *probs;     /* (n_kv_heads, n_heads / n_kv_heads, seq_len)         */
    kvq_status *head_status; /* (n_kv_heads) results from the parallel loop  */
    char  *head_why;  /* (n_kv_heads, LLM__WHY_LEN) each failing head's
                         kvq_why(), copied on the worker that failed (the
                         reason is thread-local)                             */
    /* prefill activations, up to max_prefill tokens (NULL if 0)             */
    int    max_prefill;
    float *px;        /* (max_prefill, dim)                                  */
    float *pxb;       /* (max_prefill, dim)                                  */
    float *pxb2;      /* (max_prefill, dim)                                  */
    float *pq;        /* (max_prefill, n_heads, head_dim)                    */
    float *pk;        /* (max_prefill, n_kv_heads, head_dim)                 */
    float *pv;        /* (max_prefill, n_kv_heads, head_dim)                 */
    float *patt;      /* (max_prefill, n_heads, head_dim)                    */
    float *phb;       /* (max_prefill, hidden_dim)                           */
    float *phb2;      /* (max_prefill, hidden_dim)                           */
    float *pkh;       /* (n_kv_heads, max_prefill, head_dim) K per head, the
                         (T, D) matrix kvq_cache_prefill takes               */
    float *pvh;       /* (n_kv_heads, max_prefill, head_dim)                 */
    /* options and position                                                  */
    llm_config cfg;   /* the model's config, copied at init                  */
    llm_opts opts;
    int      n_pos;   /* positions in the caches: the next pos to run        */
    int      n_threads; /* the pool's threads, the caller included        */
    struct llm__pool *pool; /* NULL with one thread                          */
    kvq_status status;/* of the last failing call                           */
    char     why[256];
} llm_state;


/* The cache of (layer, kv_head), e.g. for kvq_cache_bytes or an eviction
   policy. Indices are not checked: 0 <= layer < n_layers, 0 <= kv_head <
   n_kv_heads.                                                               */
LLM_API kvq_cache *llm_cache(llm_state *s, int layer, int kv_head)
{
    return s->cache + (size_t)layer * (size_t)s->cfg.n_kv_heads + (size_t)kv_head;
}

/* Sets s->status and s->why; returns NULL so callers can `return llm__fail`. */
static float *llm__fail(llm_state *s, kvq_status st, const char *fmt, ...)
{
    va_list ap;
    s->status = st;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    return NULL;
}

LLM_API void llm_state_free(llm_state *s)
{
    size_t i, n;
    if (!s) return;
    n = (size_t)s->cfg.n_layers * (size_t)s->cfg.n_kv_heads;
    if (s->cache) for (i = 0; i < n; i++) kvq_cache_free(&s->cache[i]);
    free(s->cache); free(s->cache_cfg);
    free(s->x); free(s->xb); free(s->xb2); free(s->q); free(s->k); free(s->v);
    free(s->att); free(s->hb); free(s->hb2); free(s->logits);
    free(s->rope_cos); free(s->rope_sin);
    free(s->scratch); free(s->probs); free(s->head_status); free(s->head_why);
    free(s->px); free(s->pxb); free(s->pxb2); free(s->pq); free(s->pk); free(s->pv);
    free(s->patt); free(s->phb); free(s->phb2); free(s->pkh); free(s->pvh);
    free(s->xq);
    llm__pool_free(s->pool);               /* joins the workers            */
    memset(s, 0, sizeof *s);
}

/* Builds (or rebuilds, in llm_state_reset) every cache from s->cache_cfg,
   reserving opts.reserve positions.                                         */
static kvq_status llm__caches_build(llm_state *s)
{
    size_t i, n = (size_t)s->cfg.n_layers * (size_t)s->cfg.n_kv_heads;
    int n_kv = s->cfg.n_kv_heads;
    for (i = 0; i < n; i++) {
        kvq_cache *c = &s->cache[i];
        kvq_status st;
        kvq_cache_free(c);                   /* a zeroed cache frees nothing */
        st = kvq_cache_init(c, &s->cache_cfg[i]);
        if (st == KVQ_OK && s->opts.reserve > 0)
            st = kvq_cache_reserve(c, (size_t)(s->opts.reserve < s->cfg.seq_len
                                               ? s->opts.reserve : s->cfg.seq_len));
        if (st != KVQ_OK) {
            llm__fail(s, st, "cache of layer %d kv head %d: %s (%s)", (int)i / n_kv,
                      (int)i % n_kv, kvq_status_str(st), kvq_why());
            memset(c, 0, sizeof *c);         /* a failed init owns nothing   */
            return st;
        }
    }
    s->n_pos = 0;
    return KVQ_OK;
}

/* Allocates every buffer for model m and builds the caches. On failure
   everything is freed and s->why says why (s->status holds the code).       */
LLM_API kvq_status llm_state_init(llm_state *s, const llm_model *m, const llm_opts *opts)
{
    const llm_config *c;
    size_t QD, KVD, n_caches, i, P, G;
    kvq_status st;
    if (!s) return KVQ_ERR_NULL;
    memset(s, 0, sizeof *s);
    if (!m) { llm__fail(s, KVQ_ERR_NULL, "model is NULL"); return KVQ_ERR_NULL; }
    c = &m->cfg;
    if ((st = llm_config_check(c, s->why, sizeof s->why)) != KVQ_OK) return s->status = st;
    if ((st = llm_weights_check(&m->w, c, s->why, sizeof s->why)) != KVQ_OK)
        return s->status = st;
    s->cfg = *c;
    s->opts = opts ? *opts : llm_opts_default();
    if (s->opts.max_prefill < 0 || s->opts.max_prefill > c->seq_len) {
        llm__fail(s, KVQ_ERR_SIZE, "max_prefill %d outside 0..seq_len (%d)",
                  s->opts.max_prefill, c->seq_len);
        s->cfg.n_layers = 0;                 /* nothing to free yet          */
        return KVQ_ERR_SIZE;
    }
    QD = (size_t)c->n_heads * (size_t)c->head_dim;
    KVD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    G = (size_t)(c->n_heads / c->n_kv_heads);
    n_caches = (size_t)c->n_layers * (size_t)c->n_kv_heads;
    P = (size_t)s->opts.max_prefill;
    s->max_prefill = s->opts.max_prefill;
    s->scratch_floats = 3 * (size_t)c->head_dim + (size_t)c->seq_len;
    s->max_in = c->dim > (int)QD ? c->dim : (int)QD;
    if (c->hidden_dim > s->max_in) s->max_in = c->hidden_dim;
    if (s->opts.n_threads < 0) {
        llm__fail(s, KVQ_ERR_SIZE, "n_threads %d is negative (0: every online core)",
                  s->opts.n_threads);
        s->cfg.n_layers = 0;
        return KVQ_ERR_SIZE;
    }
    s->n_threads = s->opts.n_threads ? s->opts.n_threads : llm__cores();

    s->x = llm__alloc((size_t)c->dim, 1, 1);
    s->xb = llm__alloc((size_t)c->dim, 1, 1);
    s->xb2 = llm__alloc((size_t)c->dim, 1, 1);
    s->q = llm__alloc(QD, 1, 1);
    s->k = llm__alloc(KVD, 1, 1);
    s->v = llm__alloc(KVD, 1, 1);
    s->att = llm__alloc(QD, 1, 1);
    s->hb = llm__alloc((size_t)c->hidden_dim, 1, 1);
    s->hb2 = llm__alloc((size_t)c->hidden_dim, 1, 1);
    s->logits = llm__alloc((size_t)c->vocab_size, 1, 1);
    s->rope_cos = llm__alloc((size_t)c->head_dim / 2, 1, 1);
    s->rope_sin = llm__alloc((size_t)c->head_dim / 2, 1, 1);
    s->scratch = llm__alloc((size_t)c->n_kv_heads, s->scratch_floats, 1);
    s->probs = llm__alloc((size_t)c->n_kv_heads, G, (size_t)c->seq_len);
    s->head_status = (kvq_status *)calloc((size_t)c->n_kv_heads, sizeof(kvq_status));
    s->head_why = (char *)calloc((size_t)c->n_kv_heads, LLM__WHY_LEN);
    s->cache = (kvq_cache *)calloc(n_caches, sizeof(kvq_cache));
    s->cache_cfg = (kvq_config *)calloc(n_caches, sizeof(kvq_config));
    s->xq = (llm_q8 *)calloc((P > 0 ? P : 1) * (size_t)(s->max_in / 32 + 1), sizeof(llm_q8));
    if (P > 0) {
        s->px = llm__alloc(P, (size_t)c->dim, 1);
        s->pxb = llm__alloc(P, (size_t)c->dim, 1);
        s->pxb2 = llm__alloc(P, (size_t)c->dim, 1);
        s->pq = llm__alloc(P, QD, 1);
        s->pk = llm__alloc(P, KVD, 1);
        s->pv = llm__alloc(P, KVD, 1);
        s->patt = llm__alloc(P, QD, 1);
        s->phb = llm__alloc(P, (size_t)c->hidden_dim, 1);
        s->phb2 = llm__alloc(P, (size_t)c->hidden_dim, 1);
        s->pkh = llm__alloc(P, KVD, 1);
        s->pvh = llm__alloc(P, KVD, 1);
    }
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->k || !s->v || !s->att ||
        !s->hb || !s->hb2 || !s->logits || !s->rope_cos || !s->rope_sin ||
        !s->scratch || !s->probs || !s->head_status || !s->head_why || !s->cache || !s->cache_cfg ||
        !s->xq || (P > 0 && (!s->px || !s->pxb || !s->pxb2 || !s->pq || !s->pk || !s->pv ||
                   !s->patt || !s->phb || !s->phb2 || !s->pkh || !s->pvh))) {
        llm_state_free(s);
        llm__fail(s, KVQ_ERR_NOMEM, "cannot allocate the state's buffers");
        return KVQ_ERR_NOMEM;
    }
    /* one kvq_config per (layer, kv head), from the caller's function      */
    for (i = 0; i < n_caches; i++) {
        int l = (int)(i / (size_t)c->n_kv_heads), h = (int)(i % (size_t)c->n_kv_heads);
        kvq_config cc = s->opts.cache_fn
                            ? s->opts.cache_fn(s->opts.cache_user, l, h, (size_t)c->head_dim)
                            : kvq_config_full((size_t)c->head_dim, 32);
        if (cc.head_dim != (size_t)c->head_dim) {
            llm_state_free(s);
            llm__fail(s, KVQ_ERR_CONFIG, "cache config of layer %d kv head %d has "
                      "head_dim %lu, the model %d", l, h, (unsigned long)cc.head_dim,
                      c->head_dim);
            return KVQ_ERR_CONFIG;
        }
        s->cache_cfg[i] = cc;
    }
    if ((st = llm__caches_build(s)) != KVQ_OK) {
        char why[sizeof s->why];
        memcpy(why, s->why, sizeof why);
        llm_state_free(s);
        memcpy(s->why, why, sizeof why);
        s->status = st;
        return st;
    }
#if !LLM_THREADS
    s->n_threads = 1;                        /* built without the pool       */
#endif
    if (s->n_threads > 1 && !(s->pool = llm__pool_new(s->n_threads))) {
        int n = s->n_threads;
        llm_state_free(s);
        llm__fail(s, KVQ_ERR_NOMEM, "cannot start %d threads (opts.n_threads)", n);
        return KVQ_ERR_NOMEM;
    }
    return KVQ_OK;
}

/* Empties every cache (same configs) for a new sequence. This re-allocates
   the caches: call it between sequences, not between tokens.                */
LLM_API kvq_status llm_state_reset(llm_state *s)
{
    if (!s || !s->cache) return KVQ_ERR_NULL;
    s->status = KVQ_OK;
    s->why[0] = '\0';
    return llm__caches_build(s);
}

/* ======================================================================== */
/* 4. BUILDING BLOCKS                                                       */
/* ======================================================================== */

/* RMSNorm (Zhang & Sennrich 2019; LLaMA Sec. 2.2): o = x / sqrt(mean(x^2)
   + eps) * w. o may be x itself: the sum is taken before anything is written. */
static void llm__rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
    float ss = 0.0f, r;
    int j;
    for (j = 0; j < n; j++) ss += x[j] * x[j];
    r = 1.0f / sqrtf(ss / (float)n + eps);
    for (j = 0; j < n; j++) o[j] = x[j] * r * w[j];
}

/* One output of an F32 matmul: a dot product over two contiguous rows.
   Eight independent partial sums let the compiler keep a vector register
   busy (a single running sum is one long dependency chain).                */
static float llm__dot(const float *a, const float *b, int n)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        s0 += a[j] * b[j];         s1 += a[j + 1] * b[j + 1];
        s2 += a[j + 2] * b[j + 2]; s3 += a[j + 3] * b[j + 3];
        s4 += a[j + 4] * b[j + 4]; s5 += a[j + 5] * b[j + 5];
        s6 += a[j + 6] * b[j + 6]; s7 += a[j + 7] * b[j + 7];
    }
    for (; j < n; j++) s0 += a[j] * b[j];
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

/* ---- 4a. Block matrices: activations quantized to 8 bits ------------------
   A GGUF engine never expands Q4/Q8 weights to float. It quantizes the
   activation vector once per matmul to 8-bit blocks of 32 (ggml's Q8_1) and
   multiplies codes by codes in integers, scaling once per block:
       sum_j w_j x_j  =  sum_blocks  dw * dx * sum_j qw_j qx_j   (+ terms)
   Reading 4.5-8.5 bits per weight instead of 32 is what makes decode fast;
   the price is rounding each activation to 1/254 of its block's range.    */

/* x (n) -> n / 32 blocks (n % 32 == 0), each scaled so its largest |x| maps
   to 127, rounded to nearest. A block whose values are all below 1e-30 in
   magnitude is zero (1 / d would overflow). A block holding a NaN or Inf
   gets d = s = NaN and zero codes: every dot it enters is NaN, and the
   forward pass reports non-finite logits (never a float-to-int overflow).  */
static void llm__q8_quantize(const float *x, int n, llm_q8 *out)
{
    int b, j;
    for (b = 0; b < n / 32; b++) {
        const float *xb = x + (size_t)b * 32;
        llm_q8 *o = out + b;
        float amax = 0.0f, id;
        int sum = 0, bad = 0;
        for (j = 0; j < 32; j++) {
            float a = fabsf(xb[j]);
            bad |= !(a <= 3.4e38f);                   /* NaN, Inf            */
            amax = a > amax ? a : amax;
        }
        memset(o->qs, 0, sizeof o->qs);
        if (bad) { o->d = o->s = NAN; continue; }
        if (!(amax >= 1e-30f)) { o->d = o->s = 0.0f; continue; }
        o->d = amax / 127.0f;
        id = 127.0f / amax;
        for (j = 0; j < 32; j++) {
            int q = (int)lrintf(xb[j] * id);          /* |x * id| <= 127     */
            o->qs[j] = (int8_t)q;
            sum += q;
        }
        o->s = o->d * (float)sum;
    }
}

#define LLM_NT 4       /* tokens, or rows, per call of an AVX2 block dot   */

/* The same, checked, for callers outside the forward pass: KVQ_ERR_NULL,
   KVQ_ERR_SIZE (n not a positive multiple of 32), or KVQ_OK.             */
LLM_API kvq_status llm_q8_quantize(const float *x, int n, llm_q8 *out)
{
    if (!x || !out) return KVQ_ERR_NULL;
    if (n <= 0 || n % 32) return KVQ_ERR_SIZE;
    llm__q8_quantize(x, n, out);
    return KVQ_OK;
}

/* The block dots: one weight row of nb blocks against nb activation blocks.
   The plain C versions are the reference: integer sums per block (exact),
   scaled and added to one float in block order, in either layout. The
   AVX2 versions compute the same integer sums 32 lanes at a time (u8 x i8
   products summed four by four into 8 i32) and keep several float
   accumulators, so they round differently: tests/test_llm.c bounds the
   difference. There are two: the row-order dot (LLM_ROWS, every type) and
   the group dot (LLM_ROWS4, the 4-bit types), which decode runs on the
   4-bit matrices llm_weights_interleave has put in groups of 4 rows.
   The reference terms are not auto-vectorized (LLM__PLAIN): gcc 12 with
   -mavxvnni, as build/llm is built, turns Q8_0's signed x signed byte sum
   into vpdpbusd, which reads one side as unsigned (wrong sums; the
   row-order and group dots use intrinsics and are not affected).       */
#if defined(__GNUC__) && !defined(__clang__)
#define LLM__PLAIN __attribute__((optimize("no-tree-vectorize")))
#else
#define LLM__PLAIN
#endif
LLM__PLAIN static float llm__term_q4_0(const uint8_t *w, const llm_q8 *y)  /* d, 16 nibble bytes */
{
    int s = 0, j;
    for (j = 0; j < 16; j++)
        s += ((w[2 + j] & 15) - 8) * y->qs[j] + ((w[2 + j] >> 4) - 8) * y->qs[j + 16];
    return llm__half(w) * y->d * (float)s;
}
LLM__PLAIN static float llm__term_q4_1(const uint8_t *w, const llm_q8 *y)  /* d, m, 16 nibble bytes */
{
    int s = 0, j;
    for (j = 0; j < 16; j++)
        s += (w[4 + j] & 15) * y->qs[j] + (w[4 + j] >> 4) * y->qs[j + 16];
    /* sum (d q_j + m) x_j = d dx sum q_j qx_j + m * (dx sum qx_j)          */
    return llm__half(w) * y->d * (float)s + llm__half(w + 2) * y->s;
}
LLM__PLAIN static float llm__term_q8_0(const uint8_t *w, const llm_q8 *y)  /* d, 32 int8 */
{
    int s = 0, j;
    for (j = 0; j < 32; j++) s += (int8_t)w[2 + j] * y->qs[j];
    return llm__half(w) * y->d * (float)s;
}
/* Row r of block matrix W . x (W->cols / 32 blocks): the reference, in
   either layout (llm__block finds each block), added in block order.     */
static float llm__dot_ref(const llm_mat *W, int r, const llm_q8 *x)
{
    float (*term)(const uint8_t *, const llm_q8 *) =
        W->type == LLM_Q4_0 ? llm__term_q4_0 : W->type == LLM_Q4_1 ? llm__term_q4_1 : llm__term_q8_0;
    uint8_t tmp[34];
    float acc = 0.0f;
    int b;
    for (b = 0; b < W->cols / 32; b++) acc += term(llm__block(W, r, b, tmp), x + b);
    return acc;
}

#if LLM_SIMD
/* 16 bytes of nibbles -> 32 bytes 0..15 in weight order (low nibbles are
   weights 0-15, high nibbles 16-31): the 16 bytes loaded into both halves,
   the upper half's 64-bit words shifted right by 4 (one variable shift),
   then masked. Two vector operations, none of them a lane crossing.       */
static inline __m256i llm__nibbles(const uint8_t *p)
{
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    __m256i hi_by_4 = _mm256_set_epi64x(4, 4, 0, 0);
    return _mm256_and_si256(_mm256_srlv_epi64(b, hi_by_4), _mm256_set1_epi8(15));
}
/* unsigned u by signed s, 32 bytes, summed four by four into 8 int32 (and
   added to acc): one vpdpbusd where the target has AVX-VNNI, else maddubs,
   madd and add. The sums are exact either way (a pair is at most
   2 * 255 * 128 in int16 only when a caller's bytes allow it: ours stay
   within 32512), so both give the same int32 and the same logits.        */
static inline __m256i llm__dot_u8s8_add(__m256i acc, __m256i u, __m256i s)
{
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
#endif
}
static inline __m256i llm__dot_u8s8(__m256i u, __m256i s)
{
    return llm__dot_u8s8_add(_mm256_setzero_si256(), u, s);
}
/* 32 products of signed bytes summed into 8 int32. The u8 x s8 dot needs
   one side unsigned, so w's sign moves onto y; |w| <= 128 and |y| <= 127
   keep each pair sum within int16 (2 * 128 * 127 = 32512).                 */
static inline __m256i llm__mul_i8(__m256i w, __m256i y)
{
    return llm__dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
}
static inline __m256i llm__load32(const int8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}
/* Decode streams every weight from memory once per token, and the
   hardware prefetcher alone falls behind a loop this dense: each block
   asks for the line LLM_PREFETCH bytes ahead of it. The distance must cover
   a memory latency at the rate decode reads (~15 GB/s x a few hundred ns);
   on the 2-core machine of bench/RESULTS.md, SmolLM2 at depth 8, one
   thread, row-order dots: 2048 bytes ~115 tok/s, 4096 ~130, 8192-16384
   ~140-165; with the group dot, 4096 and 16384 were no faster than 8192. */
#ifndef LLM_PREFETCH
#define LLM_PREFETCH 8192
#endif
static inline float llm__hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float llm__half_simd(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);                            /* F16C, exact           */
}
/* The AVX2 dots take nr rows of W (row i at w + i * ws) against nt tokens
   (token k's blocks at x + k * xs), nr * nt <= LLM_NT, and write out (nr,
   nt). Prefill and scoring give one row LLM_NT tokens, so each weight block
   is decoded once for all of them; decode gives one token LLM_NT rows, so
   LLM_NT independent sums are in flight and one call covers LLM_NT rows.
   Each (row, token) sum is formed exactly as alone, so every grouping gives
   the same bits. The body is inlined with nr and nt constants, so the
   accumulators stay in registers.                                         */
#define LLM__INLINE static inline __attribute__((always_inline))
/* Q4_0 and Q8_0: a block is an fp16 d and 32 signed codes (Q4_0: 16
   bytes of nibbles, code - 8; Q8_0: 32 int8), x = d q. BLOCK (18 or 34
   bytes) says which; a constant once inlined.                            */
LLM__INLINE void llm__sym_avx2(const uint8_t *w, size_t ws, const int nr, const llm_q8 *x,
                               size_t xs, const int nt, int nb, float *out, const int BLOCK)
{
    __m256 acc[LLM_NT];                             /* (nr, nt)              */
    int b, i, k;
    for (i = 0; i < nr * nt; i++) acc[i] = _mm256_setzero_ps();
    for (b = 0; b < nb; b++)
        for (i = 0; i < nr; i++) {
            const uint8_t *wb = w + (size_t)i * ws + (size_t)b * BLOCK;   /* d, codes */
            __m256i q = BLOCK == 18 ? _mm256_sub_epi8(llm__nibbles(wb + 2), _mm256_set1_epi8(8))
                                    : llm__load32((const int8_t *)(wb + 2));
            float d = llm__half_simd(wb);
            _mm_prefetch((const char *)wb + LLM_PREFETCH, _MM_HINT_T0);
            for (k = 0; k < nt; k++) {
                const llm_q8 *y = x + (size_t)k * xs + b;
                __m256i p = llm__mul_i8(q, llm__load32(y->qs));
                acc[i * nt + k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(p),
                                                  acc[i * nt + k]);
            }
        }
    for (i = 0; i < nr * nt; i++) out[i] = llm__hsum(acc[i]);
}
LLM__INLINE void llm__q4_0_avx2(const uint8_t *w, size_t ws, const int nr, const llm_q8 *x,
                                size_t xs, const int nt, int nb, float *out)
{
    llm__sym_avx2(w, ws, nr, x, xs, nt, nb, out, 18);
}
LLM__INLINE void llm__q8_0_avx2(const uint8_t *w, size_t ws, const int nr, const llm_q8 *x,
                                size_t xs, const int nt, int nb, float *out)
{
    llm__sym_avx2(w, ws, nr, x, xs, nt, nb, out, 34);
}
LLM__INLINE void llm__q4_1_avx2(const uint8_t *w, size_t ws, const int nr, const llm_q8 *x,
                                size_t xs, const int nt, int nb, float *out)
{
    __m256 acc[LLM_NT];                             /* (nr, nt)              */
    __m128 mins[LLM_NT];   /* lane 1: the running sum of m * s (lane 0 unused) */
    int b, i, k;
    for (i = 0; i < nr * nt; i++) { acc[i] = _mm256_setzero_ps(); mins[i] = _mm_setzero_ps(); }
    for (b = 0; b < nb; b++)
        for (i = 0; i < nr; i++) {
            const uint8_t *wb = w + (size_t)i * ws + (size_t)b * 20;   /* d, m, 16 bytes */
            __m256i q = llm__nibbles(wb + 4);
            int32_t dm_bits;
            __m128 dm;                              /* (d, m, 0, 0)           */
            memcpy(&dm_bits, wb, sizeof dm_bits);
            dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dm_bits));
            _mm_prefetch((const char *)wb + LLM_PREFETCH, _MM_HINT_T0);
            for (k = 0; k < nt; k++) {
                const llm_q8 *y = x + (size_t)k * xs + b;
                /* (d dy, m sy): the block's scale and its min term at once */
                __m128 ds = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)&y->d));
                __m128 scale_min = _mm_mul_ps(dm, ds);
                /* nibbles are unsigned: straight into the u8 x s8 dot          */
                __m256i p = llm__dot_u8s8(q, llm__load32(y->qs));
                acc[i * nt + k] = _mm256_fmadd_ps(_mm256_broadcastss_ps(scale_min),
                                                  _mm256_cvtepi32_ps(p), acc[i * nt + k]);
                mins[i * nt + k] = _mm_add_ps(mins[i * nt + k], scale_min);
            }
        }
    for (i = 0; i < nr * nt; i++)
        out[i] = llm__hsum(acc[i]) + _mm_cvtss_f32(_mm_movehdup_ps(mins[i]));
}
/* (nr, nt) is (1, 1), (1, LLM_NT) or (LLM_NT, 1): each a loop of its own
   with both fixed                                                          */
#define LLM__DOTN(TYPE)                                                              \
    static void llm__dot_##TYPE##_avx2(const uint8_t *w, size_t ws, int nr,          \
                                       const llm_q8 *x, size_t xs, int nt, int nb,   \
                                       float *out)                                   \
    {                                                                                \
        if (nt == LLM_NT) llm__##TYPE##_avx2(w, ws, 1, x, xs, LLM_NT, nb, out);      \
        else if (nr == LLM_NT) llm__##TYPE##_avx2(w, ws, LLM_NT, x, xs, 1, nb, out); \
        else llm__##TYPE##_avx2(w, ws, 1, x, xs, 1, nb, out);                        \
    }
LLM__DOTN(q4_0)
LLM__DOTN(q4_1)
LLM__DOTN(q8_0)
#undef LLM__DOTN

/* The 4-bit dot on a group of 4 rows (LLM_ROWS4, Sec. 1): the rows' 4 x 20
   bytes of block b come as one load of their 8 scales and two of their
   codes, rows 0-1 and rows 2-3, one row per 128-bit half:

       v01 = | row 0's 16 code bytes | row 1's 16 code bytes |
       lo  = v01 & 15 (weights 0-15), hi = (v01 >> 4) & 15 (weights 16-31)
       y   = | the token's qs[0..15]  | the same again        |   (and 16..31)

   so one u8 x s8 dot serves two rows, and the 8 scales d_i dy, m_i sy
   are one multiply. Per block and token that is 34 instructions for the
   4 rows' 80 bytes (gcc 12 with AVX-VNNI as build/llm is built, nt = 1;
   37 without), against 61 in the row-order dot's loop over four rows,
   and the Q4_1 matrices' share of a depth-8 decode falls from 58% to 46%
   (perf). Q8_0 keeps the row-order dot: its weights already stream at
   the memory's pace, and a group version measured no faster
   (bench/RESULTS.md). The integer sums are the reference's (exact); each
   row's float sum has 4 lanes, added at the end, so the bits differ from
   the row-order dot's (tests/test_llm.c bounds both against the
   reference). Q4_0's codes are q - 8: the 8 comes off in integers,
   sum (q - 8) y = sum q y - sum 8 y, the second sum one more pair of
   u8 x s8 dots per token and block (a float -8 d sy instead would cancel
   against d dy sum q y and lose the exactness of near-zero rows). BLOCK
   is 18 (Q4_0) or 20 (Q4_1). out is (4, nt); each (row, token) sum is
   formed the same way for any nt, so decode (nt = 1) and prefill
   (LLM_NT) agree.                                                        */
LLM__INLINE void llm__q4_rows4_avx2(const uint8_t *group, const llm_q8 *x, size_t xs,
                                    const int nt, int nb, float *out, const int BLOCK)
{
    const __m256i low4 = _mm256_set1_epi8(15), eight = _mm256_set1_epi8(8);
    const __m256i rows01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i rows23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc01[LLM_NT], acc23[LLM_NT];  /* lanes 0-3 row 0 (2), 4-7 row 1 (3) */
    __m256 mins[LLM_NT];                  /* lanes 4-7: rows 0-3's sum of m sy
                                             (Q4_0: m = 0)                    */
    int b, k;
    for (k = 0; k < nt; k++) acc01[k] = acc23[k] = mins[k] = _mm256_setzero_ps();
    for (b = 0; b < nb; b++) {
        const uint8_t *p = group + (size_t)b * 4 * BLOCK, *codes = p + (BLOCK == 20 ? 16 : 8);
        __m256 dm;                                  /* (d0..d3, m0..m3)      */
        __m256i v01 = _mm256_loadu_si256((const __m256i *)(const void *)codes);
        __m256i v23 = _mm256_loadu_si256((const __m256i *)(const void *)(codes + 32));
        __m256i lo01 = _mm256_and_si256(v01, low4), hi01 = _mm256_and_si256(_mm256_srli_epi16(v01, 4), low4);
        __m256i lo23 = _mm256_and_si256(v23, low4), hi23 = _mm256_and_si256(_mm256_srli_epi16(v23, 4), low4);
        if (BLOCK == 20)
            dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
        else                                        /* Q4_0: m lanes 0       */
            dm = _mm256_set_m128(_mm_setzero_ps(),
                                 _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)p)));
        _mm_prefetch((const char *)p + LLM_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)p + LLM_PREFETCH + 64, _MM_HINT_T0);
        for (k = 0; k < nt; k++) {
            const llm_q8 *y = x + (size_t)k * xs + b;
            __m128i dy_sy = _mm_loadl_epi64((const __m128i *)(const void *)&y->d);   /* d, s */
            __m256 sc = _mm256_mul_ps(dm, _mm256_permutevar8x32_ps(
                                              _mm256_castps128_ps256(_mm_castsi128_ps(dy_sy)), rows01));
            __m256i ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)y->qs));
            __m256i yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(y->qs + 16)));
            __m256i p01 = llm__dot_u8s8_add(llm__dot_u8s8(lo01, ylo), hi01, yhi);
            __m256i p23 = llm__dot_u8s8_add(llm__dot_u8s8(lo23, ylo), hi23, yhi);
            if (BLOCK == 18) {                      /* Q4_0: minus sum 8 y   */
                __m256i y8 = llm__dot_u8s8_add(llm__dot_u8s8(eight, ylo), eight, yhi);
                p01 = _mm256_sub_epi32(p01, y8);
                p23 = _mm256_sub_epi32(p23, y8);
            }
            acc01[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p01), _mm256_permutevar8x32_ps(sc, rows01), acc01[k]);
            acc23[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p23), _mm256_permutevar8x32_ps(sc, rows23), acc23[k]);
            mins[k] = _mm256_add_ps(mins[k], sc);  /* lanes 4-7: m_i sy      */
        }
    }
    for (k = 0; k < nt; k++) {
        /* hadd twice: lane 0 = row 0, 1 = row 2, 4 = row 1, 5 = row 3      */
        __m256 h = _mm256_hadd_ps(acc01[k], acc23[k]);
        float s[8], m[4];
        h = _mm256_hadd_ps(h, h);
        _mm256_storeu_ps(s, h);
        _mm_storeu_ps(m, _mm256_extractf128_ps(mins[k], 1));
        out[0 * nt + k] = s[0] + m[0];
        out[1 * nt + k] = s[4] + m[1];
        out[2 * nt + k] = s[1] + m[2];
        out[3 * nt + k] = s[5] + m[3];
    }
}
/* nt is 1 (decode) or LLM_NT (prefill), each a loop of its own          */
#define LLM__DOT4(TYPE, BLOCK)                                                             \
    static void llm__dot4_##TYPE##_avx2(const uint8_t *group, const llm_q8 *x, size_t xs, \
                                        int nt, int nb, float *out)                       \
    {                                                                                     \
        if (nt == LLM_NT) llm__q4_rows4_avx2(group, x, xs, LLM_NT, nb, out, BLOCK);       \
        else llm__q4_rows4_avx2(group, x, xs, 1, nb, out, BLOCK);                         \
    }
LLM__DOT4(q4_0, 18)
LLM__DOT4(q4_1, 20)
#undef LLM__DOT4
#endif

/* The row-order AVX2 dot of type t (up to LLM_NT rows or tokens a call;
   NULL when not compiled in, and the reference llm__dot_ref runs). NULL
   for F32, which has no blocks.                                           */
typedef void (*llm__dotn_fn)(const uint8_t *w, size_t ws, int nr, const llm_q8 *x,
                             size_t xs, int nt, int nb, float *out);
/* The dot on a group of 4 rows (LLM_ROWS4) against nt tokens (1 or
   LLM_NT), out (4, nt); NULL where none is compiled in for type t.        */
typedef void (*llm__dot4_fn)(const uint8_t *group, const llm_q8 *x, size_t xs, int nt, int nb,
                             float *out);
static llm__dot4_fn llm__block_dot4(llm_type t)
{
#if LLM_SIMD
    switch (t) {
    case LLM_Q4_0: return llm__dot4_q4_0_avx2;
    case LLM_Q4_1: return llm__dot4_q4_1_avx2;
    default: break;
    }
#endif
    (void)t;
    return NULL;
}
static llm__dotn_fn llm__block_dotn(llm_type t)
{
#if LLM_SIMD
    switch (t) {
    case LLM_Q4_0: return llm__dot_q4_0_avx2;
    case LLM_Q4_1: return llm__dot_q4_1_avx2;
    case LLM_Q8_0: return llm__dot_q8_0_avx2;
    default: break;
    }
#endif
    (void)t;
    return NULL;
}

/* W is a usable matrix and 0 <= r < rows: KVQ_OK, or why not.          */
static kvq_status llm__row_ok(const llm_mat *W, int r)
{
    if (!W || !W->data) return KVQ_ERR_NULL;
    if (W->rows <= 0 || W->row_bytes == 0 || W->row_bytes != llm_row_bytes(W->type, W->cols) ||
        !llm__layout_ok(W))
        return KVQ_ERR_CONFIG;
    return r < 0 || r >= W->rows ? KVQ_ERR_SIZE : KVQ_OK;
}

/* *out = row r of W . x: F32 reads x (cols floats), a block type xq (cols
   / 32 blocks of x from llm_q8_quantize). simd = 0: the plain C block dot;
   1: the one the forward pass runs (AVX2 when compiled in; for LLM_ROWS4,
   the group's dot, of which row r is kept). For tests and tools (the
   matmul below calls the same functions unchecked). KVQ_OK, or
   KVQ_ERR_NULL / KVQ_ERR_CONFIG (not a valid matrix) / KVQ_ERR_SIZE (r). */
LLM_API kvq_status llm_mat_dot(const llm_mat *W, int r, const float *x, const llm_q8 *xq,
                               int simd, float *out)
{
    const uint8_t *row;
    llm__dotn_fn fn;
    llm__dot4_fn f4;
    kvq_status st = llm__row_ok(W, r);
    if (st != KVQ_OK) return st;
    if (!out || (W->type == LLM_F32 ? !x : !xq)) return KVQ_ERR_NULL;
    row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    fn = simd && W->layout == LLM_ROWS ? llm__block_dotn(W->type) : NULL;
    f4 = simd && W->layout == LLM_ROWS4 ? llm__block_dot4(W->type) : NULL;
    if (W->type == LLM_F32) *out = llm__dot((const float *)(const void *)row, x, W->cols);
    else if (fn) fn(row, W->row_bytes, 1, xq, 0, 1, W->cols / 32, out);
    else if (f4) {
        float four[4];
        f4((const uint8_t *)W->data + (size_t)(r / 4) * 4 * W->row_bytes, xq, 0, 1, W->cols / 32,
           four);
        *out = four[r % 4];
    } else *out = llm__dot_ref(W, r, xq);
    return KVQ_OK;
}

/* a and b describe the same matrix: the same bytes, type and shape.      */
static int llm__same_mat(const llm_mat *a, const llm_mat *b)
{
    return a->data == b->data && a->type == b->type && a->rows == b->rows && a->cols == b->cols;
}

/* Puts every block matrix of a type decode's group dot (above) serves
   into LLM_ROWS4, in place (the bytes must be writable), the embedding
   included (its row lookups read either layout); the others stay in row
   order. Matrices that describe the same bytes (tied embeddings: wcls is
   token_embedding) are permuted once and all follow; matrices whose bytes
   overlap otherwise are refused. The logits move by float rounding only
   (the group dot adds in another order); prefill and decode still agree
   bit for bit. Everything is checked and the one scratch buffer taken
   before the first byte moves, so on failure (llm_weights_check's error,
   KVQ_ERR_CONFIG for overlapping matrices, KVQ_ERR_NOMEM) nothing has
   changed.                                                               */
LLM_API kvq_status llm_weights_interleave(llm_weights *w, const llm_config *c, char *why,
                                          size_t why_len)
{
    llm_mat *tables[7], **all, **todo;   /* (n_mats) every matrix, those that move */
    size_t n_mats, n = 0, i, k, scratch_bytes = 0;
    uint8_t *scratch = NULL;
    int l, t;
    kvq_status st;
    if ((st = llm_weights_check(w, c, why, why_len)) != KVQ_OK) return st;
    n_mats = 7 * (size_t)c->n_layers + 2;
    if (!(all = (llm_mat **)malloc(2 * n_mats * sizeof *all))) {
        llm__say(why, why_len, "no memory for the list of matrices");
        return KVQ_ERR_NOMEM;
    }
    todo = all + n_mats;
    tables[0] = w->wq; tables[1] = w->wk; tables[2] = w->wv; tables[3] = w->wo;
    tables[4] = w->w1; tables[5] = w->w3; tables[6] = w->w2;
    all[0] = &w->token_embedding;
    all[1] = &w->wcls;
    for (l = 0; l < c->n_layers; l++)
        for (t = 0; t < 7; t++) all[2 + 7 * (size_t)l + t] = &tables[t][l];
    /* 1. the plan: which matrices move; one that is the same as an earlier
       one (same bytes, type and shape) moves with it; other overlaps are
       refused                                                              */
    for (k = 0; k < n_mats; k++) {
        llm_mat *m = all[k];
        const uint8_t *lo = (const uint8_t *)m->data, *hi = lo + (size_t)m->rows * m->row_bytes;
        if (m->layout != LLM_ROWS || m->rows % 4 || !llm__block_dot4(m->type)) continue;
        for (i = 0; i < n && !llm__same_mat(todo[i], m); i++) {
            const uint8_t *lo2 = (const uint8_t *)todo[i]->data,
                          *hi2 = lo2 + (size_t)todo[i]->rows * todo[i]->row_bytes;
            if (lo < hi2 && lo2 < hi) {
                llm__say(why, why_len, "two weight matrices overlap in memory without being the "
                         "same matrix; nothing was interleaved");
                free(all);
                return KVQ_ERR_CONFIG;
            }
        }
        if (i < n) continue;                        /* moves with todo[i]    */
        todo[n++] = m;
        if (4 * m->row_bytes > scratch_bytes) scratch_bytes = 4 * m->row_bytes;
    }
    if (n && !(scratch = (uint8_t *)malloc(scratch_bytes))) {
        llm__say(why, why_len, "no memory for 4 rows of scratch (%zu bytes)", scratch_bytes);
        free(all);
        return KVQ_ERR_NOMEM;
    }
    /* 2. the moves, which cannot fail; then every alias follows its owner */
    for (i = 0; i < n; i++) llm__interleave(todo[i], scratch);
    for (k = 0; k < n_mats; k++)
        for (i = 0; i < n && all[k]->layout == LLM_ROWS; i++)
            if (llm__same_mat(todo[i], all[k])) all[k]->layout = LLM_ROWS4;
    free(scratch);
    free(all);
    return KVQ_OK;
}

/* Row r of W as floats, out (cols): the token embedding's lookup, one row
   per token, and the tests' dequantize-then-fp32 reference.              */
static void llm__mat_row(const llm_mat *W, int r, float *out)
{
    uint8_t tmp[34];
    int b, j;
    if (W->type == LLM_F32) {
        memcpy(out, (const uint8_t *)W->data + (size_t)r * W->row_bytes, (size_t)W->cols * sizeof(float));
        return;
    }
    for (b = 0; b < W->cols / 32; b++, out += 32) {
        const uint8_t *p = llm__block(W, r, b, tmp);
        float d = llm__half(p);
        switch (W->type) {
        case LLM_Q4_0:
            for (j = 0; j < 16; j++) {
                out[j] = d * (float)((p[2 + j] & 15) - 8);
                out[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
            break;
        case LLM_Q4_1: {
            float m = llm__half(p + 2);
            for (j = 0; j < 16; j++) {
                out[j] = d * (float)(p[4 + j] & 15) + m;
                out[j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
            break;
        }
        default:                                    /* LLM_Q8_0              */
            for (j = 0; j < 32; j++) out[j] = d * (float)(int8_t)p[2 + j];
        }
    }
}

/* The same, checked (llm_mat_dot's statuses).                             */
LLM_API kvq_status llm_mat_row(const llm_mat *W, int r, float *out)
{
    kvq_status st = llm__row_ok(W, r);
    if (st != KVQ_OK) return st;
    if (!out) return KVQ_ERR_NULL;
    llm__mat_row(W, r, out);
    return KVQ_OK;
}

/* ---- 4b. A persistent thread pool -----------------------------------------
   n - 1 worker threads, started once per state; the caller is thread 0.
   llm__pool_run(p, fn, arg) runs fn(arg, i, n) on every thread i and
   returns when all are done. A job is announced by bumping a generation
   counter; workers spin on it for a while (decode runs a matmul every few
   microseconds, far less than a sleep and wake-up costs), then sleep on a
   condition variable. n = 1 starts no thread at all: fn runs inline.      */
#if LLM_THREADS
typedef struct llm__pool llm__pool;
typedef struct llm__worker { llm__pool *p; int i; pthread_t th; } llm__worker;
struct llm__pool {
    int n;                       /* threads, the caller included            */
    llm__worker *w;              /* (n - 1)                                 */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned gen;                /* jobs announced                          */
    int busy;                    /* workers not yet done with the job       */
    int quit;
    void (*fn)(void *arg, int i, int n);
    void *arg;
};
#define LLM__LOAD(p)     __atomic_load_n(p, __ATOMIC_ACQUIRE)
#define LLM__STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELEASE)
#ifndef LLM_SPIN
#define LLM_SPIN 20000           /* polls before a worker sleeps            */
#endif
/* One poll of a spin loop. Every 64th gives the core away: when the
   machine has more runnable threads than cores, the thread being waited
   for may be the one that needs it (without this, 2 threads on a busy
   2-core machine ran 5x slower than 1).                                   */
static void llm__relax(int spin)
{
    if ((spin & 63) == 63) { sched_yield(); return; }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
static void *llm__work(void *arg)
{
    llm__worker *me = (llm__worker *)arg;
    llm__pool *p = me->p;
    unsigned seen = 0;
    for (;;) {
        int spin;
        for (spin = 0; spin < LLM_SPIN && LLM__LOAD(&p->gen) == seen; spin++) llm__relax(spin);
        if (LLM__LOAD(&p->gen) == seen) {
            pthread_mutex_lock(&p->mu);
            while (LLM__LOAD(&p->gen) == seen) pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        seen = LLM__LOAD(&p->gen);
        if (LLM__LOAD(&p->quit)) return NULL;
        p->fn(p->arg, me->i, p->n);
        if (__atomic_sub_fetch(&p->busy, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&p->mu);             /* the caller may sleep  */
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}
static void llm__pool_run(llm__pool *p, void (*fn)(void *, int, int), void *arg)
{
    int spin;
    if (!p || p->n <= 1) { fn(arg, 0, 1); return; }
    p->fn = fn;
    p->arg = arg;
    LLM__STORE(&p->busy, p->n - 1);
    pthread_mutex_lock(&p->mu);
    LLM__STORE(&p->gen, p->gen + 1);                /* publishes fn, arg     */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    for (spin = 0; spin < LLM_SPIN && LLM__LOAD(&p->busy) > 0; spin++) llm__relax(spin);
    if (LLM__LOAD(&p->busy) > 0) {
        pthread_mutex_lock(&p->mu);
        while (LLM__LOAD(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
static void llm__pool_free(llm__pool *p)
{
    int i;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    LLM__STORE(&p->quit, 1);
    LLM__STORE(&p->gen, p->gen + 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < p->n - 1; i++) pthread_join(p->w[i].th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->w);
    free(p);
}
/* A pool of n threads (n >= 2), or NULL when it cannot be had.             */
static llm__pool *llm__pool_new(int n)
{
    llm__pool *p = (llm__pool *)calloc(1, sizeof *p);
    int i;
    if (!p) return NULL;
    if (!(p->w = (llm__worker *)calloc((size_t)n - 1, sizeof *p->w))) { free(p); return NULL; }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n = 1;
    for (i = 0; i < n - 1; i++) {
        p->w[i].p = p;
        p->w[i].i = i + 1;
        if (pthread_create(&p->w[i].th, NULL, llm__work, &p->w[i]) != 0) break;
        p->n = i + 2;                               /* the ones that started */
    }
    if (p->n < n) { llm__pool_free(p); return NULL; }
    return p;
}
/* Online cores, for opts.n_threads = 0.                                    */
static int llm__cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}
#else
typedef struct llm__pool { int n; } llm__pool;      /* never created        */
static void llm__pool_run(llm__pool *p, void (*fn)(void *, int, int), void *arg)
{
    (void)p;
    fn(arg, 0, 1);
}
static void llm__pool_free(llm__pool *p) { (void)p; }
static llm__pool *llm__pool_new(int n) { (void)n; return NULL; }
static int llm__cores(void) { return 1; }
#endif

/* ---- 4c. The matmul driver ------------------------------------------------
   OUT_i (T, rows_i) = X (T, n_in) . W_i^T for up to three matrices that read
   the same input (q, k, v; gate and up): one job, their rows concatenated
   and cut into one contiguous run per thread. Every output is one row dot,
   computed whole by one thread in a fixed order, so the logits are the same
   bit for bit at any thread count. X is quantized once (for the block
   types); F32 matrices read it as floats.
   With T tokens, blocks of LLM_TILE rows meet blocks of LLM_TILE tokens, so
   each weight row is reused for LLM_TILE tokens from L1 and W is read from
   memory T / LLM_TILE times instead of T. A matrix in groups of 4 rows
   (LLM_ROWS4) goes group by group instead: each group (a few KB) meets
   every token while it sits in L1, so W is read once, and the tokens' 8-bit
   activations (T x 40 bytes per block column) come from L2. Each output is
   the same row dot as in decode, so prefill and decode matmuls agree bit
   for bit.                                                                */
#define LLM_TILE 16
typedef struct llm__mm {
    const llm_mat *W[3];
    float *out[3];         /* (T, W[i]->rows) each                          */
    int k, T, n_in, rows;  /* rows: of all k together                      */
    const float *X;        /* (T, n_in)                                     */
    const llm_q8 *XQ;      /* (T, n_in / 32) X quantized                    */
} llm__mm;

static const uint8_t *llm__row(const llm_mat *W, int r)
{
    return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
}

static void llm__mm_job(void *arg, int ith, int nth)
{
    const llm__mm *j = (const llm__mm *)arg;
    /* this thread's rows of the concatenation: [r0, r1)                    */
    int r0 = (int)((long long)j->rows * ith / nth), r1 = (int)((long long)j->rows * (ith + 1) / nth);
    int i, base = 0, nb = j->n_in / 32;
    for (i = 0; i < j->k; base += j->W[i]->rows, i++) {
        const llm_mat *W = j->W[i];
        llm__dotn_fn fn = W->layout == LLM_ROWS ? llm__block_dotn(W->type) : NULL;
        llm__dot4_fn f4 = W->layout == LLM_ROWS4 ? llm__block_dot4(W->type) : NULL;
        int a = r0 > base ? r0 - base : 0, e = r1 - base < W->rows ? r1 - base : W->rows;
        size_t os = (size_t)W->rows;                    /* out (T, rows)    */
        int i0, t0, r, t, k;
        float v[4 * LLM_NT];
        if (f4) {
            /* whole groups of 4 rows: a group is this thread's when its
               first row is; every token against it while it sits in L1    */
            int g;
            for (g = (a + 3) / 4; 4 * g < e; g++) {
                const uint8_t *group = llm__row(W, 4 * g);
                for (t = 0; t < j->T; t += k) {
                    k = j->T - t >= LLM_NT ? LLM_NT : 1;
                    f4(group, j->XQ + (size_t)t * (size_t)nb, (size_t)nb, k, nb, v);
                    for (r = 0; r < 4 * k; r++)             /* v is (4, k)  */
                        j->out[i][(size_t)(t + r % k) * os + (size_t)(4 * g + r / k)] = v[r];
                }
            }
            continue;
        }
        for (i0 = a; i0 < e; i0 += LLM_TILE)
            for (t0 = 0; t0 < j->T; t0 += LLM_TILE) {
                int r_end = i0 + LLM_TILE < e ? i0 + LLM_TILE : e;
                int t_end = t0 + LLM_TILE < j->T ? t0 + LLM_TILE : j->T;
                int t_left = fn ? t0 + (t_end - t0) / LLM_NT * LLM_NT : t0;
                /* AVX2: one row and LLM_NT tokens a call while LLM_NT are
                   left, then each token left (decode's only one) against
                   LLM_NT rows a call                                       */
                for (r = i0; r < r_end; r++)
                    for (t = t0; t < t_left; t += LLM_NT) {
                        fn(llm__row(W, r), W->row_bytes, 1, j->XQ + (size_t)t * (size_t)nb,
                           (size_t)nb, LLM_NT, nb, v);
                        for (k = 0; k < LLM_NT; k++) j->out[i][(size_t)(t + k) * os + (size_t)r] = v[k];
                    }
                for (t = t_left; t < t_end; t++) {
                    float *o = j->out[i] + (size_t)t * os;
                    const llm_q8 *xq = j->XQ + (size_t)t * (size_t)nb;
                    if (fn)
                        for (r = i0; r < r_end; r += k) {
                            int nr = r_end - r >= LLM_NT ? LLM_NT : 1;
                            fn(llm__row(W, r), W->row_bytes, nr, xq, 0, 1, nb, v);
                            for (k = 0; k < nr; k++) o[r + k] = v[k];
                        }
                    else
                        for (r = i0; r < r_end; r++)
                            o[r] = W->type != LLM_F32 ? llm__dot_ref(W, r, xq)
                                 : llm__dot((const float *)(const void *)llm__row(W, r),
                                            j->X + (size_t)t * (size_t)j->n_in, j->n_in);
                }
            }
    }
}

/* The driver: OUT[i] = X . W[i]^T for i < k (k <= 3), on the state's
   threads. X is (T, n_in), n_in == every W[i]->cols.                      */
static void llm__matmul(llm_state *s, const float *X, int T, int n_in, int k,
                        const llm_mat *const *W, float *const *out)
{
    llm__mm j;
    int i, t, blocks = 0;
    memset(&j, 0, sizeof j);
    j.k = k; j.T = T; j.n_in = n_in; j.X = X; j.XQ = s->xq;
    for (i = 0; i < k; i++) {
        j.W[i] = W[i];
        j.out[i] = out[i];
        j.rows += W[i]->rows;
        blocks |= W[i]->type != LLM_F32;
    }
    if (blocks)                          /* once per matmul, not per row    */
        for (t = 0; t < T; t++)
            llm__q8_quantize(X + (size_t)t * (size_t)n_in, n_in, s->xq + (size_t)t * (size_t)(n_in / 32));
    llm__pool_run(s->pool, llm__mm_job, &j);
}

/* RoPE (RoFormer, Su et al. 2021, Eq. 34): pair i of a head is rotated by
   angle pos * theta^(-2i / head_dim), i = 0 .. head_dim/2 - 1. The angle is
   formed in double so that large positions keep their precision.           */
LLM_API void llm_rope_table(double theta, int head_dim, int pos, float *cs, float *sn)
{
    int i;
    for (i = 0; i < head_dim / 2; i++) {
        double a = (double)pos * pow(theta, -2.0 * (double)i / (double)head_dim);
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
}

/* Rotates every head of x (n_heads, head_dim) in place: the pair (a, b) of
   channel pair i becomes (a cos - b sin, a sin + b cos). Which channels form
   pair i is the config's rope_pairs (Sec. 1): (2i, 2i+1) or (i, i + half). */
LLM_API void llm_rope(float *x, int n_heads, int head_dim, llm_rope_pairs pairs,
                      const float *cs, const float *sn)
{
    int h, i, half = head_dim / 2;
    int stride = pairs == LLM_ROPE_ADJACENT ? 2 : 1;   /* between pair starts */
    int other = pairs == LLM_ROPE_ADJACENT ? 1 : half; /* a's partner b       */
    for (h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * (size_t)head_dim;
        for (i = 0; i < half; i++) {
            float *a = xh + i * stride, *b = a + other;
            float a0 = *a, b0 = *b;
            *a = a0 * cs[i] - b0 * sn[i];
            *b = a0 * sn[i] + b0 * cs[i];
        }
    }
}

/* SwiGLU (Shazeer 2020; LLaMA Sec. 2.2): h = silu(gate) * up, silu(g) =
   g * sigmoid(g). Writes into gate (n).                                     */
/* 1 if all n values are finite.                                           */
static int llm__finite(const float *x, size_t n)
{
    size_t i;
    int bad = 0;
    for (i = 0; i < n; i++) bad |= (x[i] - x[i]) != 0.0f;     /* NaN or Inf */
    return !bad;
}

static void llm__swiglu(float *gate, const float *up, int n)
{
    int j;
    for (j = 0; j < n; j++) gate[j] = gate[j] / (1.0f + expf(-gate[j])) * up[j];
}

static void llm__add(float *x, const float *y, size_t n)
{
    size_t j;
    for (j = 0; j < n; j++) x[j] += y[j];
}

/* ======================================================================== */
/* 5. ATTENTION                                                             */
/* ======================================================================== */
/* GQA (Ainslie et al. 2023): the n_q = n_heads / n_kv_heads query heads
   kv*n_q .. (kv+1)*n_q - 1 share KV head kv (llama.cpp's and Hugging Face's
   grouping), so one group's queries are contiguous: q + kv * n_q * head_dim
   is the (n_q, head_dim) block kvq_attend takes, and its output lands at the
   same offset of att. Scores are scaled by 1/sqrt(head_dim) inside kvq.   */

/* Decode, one (layer, kv head), one position: capture, append the new k/v,
   attend the group's queries to whatever the cache now holds, hook. The
   pointers say where this position's q (n_q, head_dim), k, v (head_dim) and
   output (n_q, head_dim) live: the decode buffers (llm_forward) or one row
   of the batch buffers (llm_forward_many).                                 */
static kvq_status llm__decode_head(llm_state *s, int l, int kv, int pos, const float *q,
                                   const float *k, const float *v, float *out)
{
    const llm_config *c = &s->cfg;
    int n_q = c->n_heads / c->n_kv_heads;
    kvq_cache *cache = llm_cache(s, l, kv);
    float *scratch = s->scratch + (size_t)kv * s->scratch_floats;
    float *probs = s->opts.hook ? s->probs + (size_t)kv * (size_t)n_q * (size_t)c->seq_len
                                : NULL;
    kvq_attn_mode mode = probs ? KVQ_ATTN_EAGER : s->opts.attn_mode;
    kvq_status st;
    if (s->opts.capture) s->opts.capture(s->opts.capture_user, l, kv, pos, q, n_q, k, v);
    /* the cache stores k after RoPE, so attention never needs positions     */
    if ((st = kvq_cache_append(cache, k, v)) != KVQ_OK) return st;
    /* softmax(q K^T / sqrt(D)) V over whatever the cache holds              */
    st = kvq_attend(cache, q, (size_t)n_q, out, probs, mode, scratch, s->scratch_floats);
    if (st != KVQ_OK) return st;
    /* probs is (n_q, cache->n_pos) and n_pos == pos + 1: one per append     */
    if (probs && s->opts.hook(s->opts.hook_user, l, kv, pos, probs, n_q, cache))
        return KVQ_ERR_STATE;
    return KVQ_OK;
}

/* Prefill, one (layer, kv head) over the prompt's T tokens.
   THE CHOICE: prompt tokens attend to the prompt's FULL-PRECISION K and V,
   not to what the cache stores. This is what the papers do in prefill (KIVI
   Algorithm 1 quantizes the prompt's K/V for storage after computing its
   attention in full precision; the HF QuantizedCache also returns the
   unquantized states on the prefill call), and what an engine does when it
   runs a prompt through one batched attention. So with any cache, prefill's
   logits equal the fp32 model's; the cache's error appears from the first
   decoded token on, which attends to the stored (quantized) prompt.
   The cache gets the prompt through kvq_cache_prefill, so policies with a
   prefill rule (KIVI Algorithm 1, HF) apply it.                             */
static kvq_status llm__prefill_head(llm_state *s, int l, int kv, int T)
{
    const llm_config *c = &s->cfg;
    int hd = c->head_dim, n_q = c->n_heads / c->n_kv_heads, t, p, h, d;
    size_t QD = (size_t)c->n_heads * (size_t)hd;
    kvq_cache *cache = llm_cache(s, l, kv);
    const float *K = s->pkh + (size_t)kv * (size_t)s->max_prefill * (size_t)hd; /* (T, hd) */
    const float *V = s->pvh + (size_t)kv * (size_t)s->max_prefill * (size_t)hd; /* (T, hd) */
    float *sc = s->scratch + (size_t)kv * s->scratch_floats;        /* (T) scores */
    float *probs = s->probs + (size_t)kv * (size_t)n_q * (size_t)c->seq_len;
    float inv_sqrt_d = 1.0f / sqrtf((float)hd);
    kvq_status st;
    if (s->opts.capture)
        for (t = 0; t < T; t++)
            s->opts.capture(s->opts.capture_user, l, kv, t,
                            s->pq + (size_t)t * QD + (size_t)kv * (size_t)n_q * (size_t)hd,
                            n_q, K + (size_t)t * (size_t)hd, V + (size_t)t * (size_t)hd);
    /* the whole prompt enters the cache at once (the policy's prefill rule)  */
    if ((st = kvq_cache_prefill(cache, K, V, (size_t)T)) != KVQ_OK) return st;
    /* causal attention in fp32 over the prompt's own K, V                    */
    for (t = 0; t < T; t++) {
        for (h = 0; h < n_q; h++) {
            size_t off = (size_t)t * QD + ((size_t)kv * (size_t)n_q + (size_t)h) * (size_t)hd;
            const float *q = s->pq + off;
            float *out = s->patt + off, mx = -INFINITY, sum = 0.0f;
            /* scores of token t against positions 0..t, and their max        */
            for (p = 0; p <= t; p++) {
                sc[p] = llm__dot(q, K + (size_t)p * (size_t)hd, hd) * inv_sqrt_d;
                if (sc[p] > mx) mx = sc[p];
            }
            /* softmax, shifted by the max so exp never overflows             */
            for (p = 0; p <= t; p++) { sc[p] = expf(sc[p] - mx); sum += sc[p]; }
            /* out = sum_p w_p v_p                                            */
            for (d = 0; d < hd; d++) out[d] = 0.0f;
            for (p = 0; p <= t; p++) {
                float w = sc[p] / sum;
                const float *vp = V + (size_t)p * (size_t)hd;
                if (s->opts.hook) probs[(size_t)h * (size_t)(t + 1) + (size_t)p] = w;
                for (d = 0; d < hd; d++) out[d] += w * vp[d];
            }
        }
        if (s->opts.hook && s->opts.hook(s->opts.hook_user, l, kv, t, probs, n_q, cache))
            return KVQ_ERR_STATE;
    }
    return KVQ_OK;
}

/* What one KV head does in a layer (Sec. 6, 7).                            */
typedef enum llm__step {
    LLM__DECODE  = 0,   /* one token at pos, from the decode buffers        */
    LLM__PREFILL = 1,   /* T prompt tokens, full-precision attention         */
    LLM__MANY    = 2    /* T tokens from pos on, each decoded in turn        */
} llm__step;

/* One KV head's T tokens of the batch buffers, each exactly as llm_forward
   would run it: append, attend to the cache as stored, hook; in order.     */
static kvq_status llm__many_head(llm_state *s, int l, int kv, int pos0, int T)
{
    const llm_config *c = &s->cfg;
    size_t hd = (size_t)c->head_dim, n_q = (size_t)(c->n_heads / c->n_kv_heads);
    size_t QD = (size_t)c->n_heads * hd, row = (size_t)kv * n_q * hd;
    const float *K = s->pkh + (size_t)kv * (size_t)s->max_prefill * hd; /* (T, hd) */
    const float *V = s->pvh + (size_t)kv * (size_t)s->max_prefill * hd; /* (T, hd) */
    int t;
    for (t = 0; t < T; t++) {
        size_t tq = (size_t)t * QD + row;
        kvq_status st = llm__decode_head(s, l, kv, pos0 + t, s->pq + tq, K + (size_t)t * hd,
                                         V + (size_t)t * hd, s->patt + tq);
        if (st != KVQ_OK) return st;
    }
    return KVQ_OK;
}

/* Runs every KV head of layer l on the pool's threads (head kv on thread
   kv % n), unless a callback is set: callbacks then see the heads in order
   (and, within a head, the positions in order) on the caller's thread and
   need not be thread-safe. Heads touch disjoint caches, scratch and output
   rows, so the result does not depend on the thread count. Returns the
   first failure, with its reason in s->why.                               */
typedef struct llm__heads_job { llm_state *s; int l, pos, T; llm__step step; } llm__heads_job;

static void llm__heads_job_fn(void *arg, int ith, int nth)
{
    const llm__heads_job *j = (const llm__heads_job *)arg;
    llm_state *s = j->s;
    int kv, n_kv = s->cfg.n_kv_heads;
    size_t hd = (size_t)s->cfg.head_dim, n_q = (size_t)(s->cfg.n_heads / n_kv);
    for (kv = ith; kv < n_kv; kv += nth) {
        size_t qo = (size_t)kv * n_q * hd, ko = (size_t)kv * hd;
        s->head_status[kv] =
            j->step == LLM__PREFILL ? llm__prefill_head(s, j->l, kv, j->T)
          : j->step == LLM__MANY    ? llm__many_head(s, j->l, kv, j->pos, j->T)
          : llm__decode_head(s, j->l, kv, j->pos, s->q + qo, s->k + ko, s->v + ko, s->att + qo);
        if (s->head_status[kv] != KVQ_OK)   /* kvq_why() is this thread's */
            snprintf(s->head_why + (size_t)kv * LLM__WHY_LEN, LLM__WHY_LEN, "%s", kvq_why());
    }
}

static kvq_status llm__heads(llm_state *s, int l, llm__step step, int pos, int T)
{
    llm__heads_job j;
    int kv, n_kv = s->cfg.n_kv_heads;
    j.s = s; j.l = l; j.pos = pos; j.T = T; j.step = step;
    if (s->opts.hook || s->opts.capture) llm__heads_job_fn(&j, 0, 1);
    else llm__pool_run(s->pool, llm__heads_job_fn, &j);
    for (kv = 0; kv < n_kv; kv++)
        if (s->head_status[kv] != KVQ_OK) {
            kvq_status st = s->head_status[kv];
            llm__fail(s, st, "layer %d kv head %d: %s (%s)", l, kv, kvq_status_str(st),
                      st == KVQ_ERR_STATE && s->opts.hook ? "the hook returned non-zero"
                                                          : s->head_why + (size_t)kv * LLM__WHY_LEN);
            return st;
        }
    return KVQ_OK;
}

/* ======================================================================== */
/* 6. llm_forward: ONE TOKEN THROUGH THE MODEL                              */
/* ======================================================================== */

/* Shared checks: model, state and the config they were built with.         */
static int llm__ready(const llm_model *m, llm_state *s)
{
    const llm_config *a, *b;
    if (!s) return 0;
    if (!m) { llm__fail(s, KVQ_ERR_NULL, "model is NULL"); return 0; }
    if (!s->cache) { llm__fail(s, KVQ_ERR_STATE, "state is not initialized"); return 0; }
    if (s->n_pos < 0) {
        llm__fail(s, KVQ_ERR_STATE, "an earlier call failed half-way; the caches "
                  "disagree: call llm_state_reset");
        return 0;
    }
    a = &m->cfg; b = &s->cfg;
    if (a->dim != b->dim || a->hidden_dim != b->hidden_dim || a->n_layers != b->n_layers ||
        a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim || a->vocab_size != b->vocab_size ||
        a->seq_len != b->seq_len) {
        llm__fail(s, KVQ_ERR_CONFIG, "the state was built for another model config");
        return 0;
    }
    return 1;
}

/* One layer's projections, grouped as llm__matmul takes them: the jobs
   that read the same input run in one call (q, k, v; gate and up).       */
typedef struct {
    const llm_mat *qkv[3], *gate_up[2], *o[1], *down[1];
} llm__layer_mats;
static llm__layer_mats llm__layer(const llm_weights *w, int l)
{
    llm__layer_mats m;
    m.qkv[0] = &w->wq[l]; m.qkv[1] = &w->wk[l]; m.qkv[2] = &w->wv[l];
    m.gate_up[0] = &w->w1[l]; m.gate_up[1] = &w->w3[l];
    m.o[0] = &w->wo[l]; m.down[0] = &w->w2[l];
    return m;
}

/* Runs token at position pos (== the positions already run: the caches are
   append-only) and returns the logits (vocab_size), valid until the next
   call. NULL on error with s->status / s->why; bad arguments change nothing.
   A failure inside the layers (non-finite activations, a cache error, a hook
   abort) leaves some caches one token ahead of others: the state then refuses
   every call until llm_state_reset.                                        */
LLM_API float *llm_forward(const llm_model *m, llm_state *s, int token, int pos)
{
    const llm_config *c;
    const llm_weights *w;
    int l, dim, hd, hidden;
    size_t QD;
    if (!llm__ready(m, s)) return NULL;
    c = &m->cfg; w = &m->w;
    if (token < 0 || token >= c->vocab_size)
        return llm__fail(s, KVQ_ERR_SIZE, "token %d outside 0..%d", token, c->vocab_size - 1);
    if (pos < 0 || pos >= c->seq_len)
        return llm__fail(s, KVQ_ERR_SIZE, "pos %d outside 0..seq_len-1 (%d)", pos,
                         c->seq_len - 1);
    if (pos != s->n_pos)
        return llm__fail(s, KVQ_ERR_STATE, "pos %d but the caches hold %d positions "
                         "(positions must come in order)", pos, s->n_pos);
    dim = c->dim; hd = c->head_dim; hidden = c->hidden_dim;
    QD = (size_t)c->n_heads * (size_t)hd;

    /* the token's embedding row, dequantized, starts the residual stream    */
    llm__mat_row(&w->token_embedding, token, s->x);
    /* the RoPE angles of this position, shared by every layer and head      */
    llm_rope_table((double)c->rope_theta, hd, pos, s->rope_cos, s->rope_sin);

    for (l = 0; l < c->n_layers; l++) {
        size_t L = (size_t)l;
        const llm__layer_mats mat = llm__layer(w, l);
        float *qkv_out[3], *gu_out[2], *o_out[1], *down_out[1];
        qkv_out[0] = s->q; qkv_out[1] = s->k; qkv_out[2] = s->v; o_out[0] = s->xb2;
        gu_out[0] = s->hb; gu_out[1] = s->hb2; down_out[0] = s->xb2;
        /* attention: normalize, project to q, k, v (one input, one job)     */
        llm__rmsnorm(s->xb, s->x, w->rms_att + L * (size_t)dim, dim, c->rms_eps);
        llm__matmul(s, s->xb, 1, dim, 3, mat.qkv, qkv_out);
        /* rotate q and k by the position (v is not rotated)                 */
        llm_rope(s->q, c->n_heads, hd, c->rope_pairs, s->rope_cos, s->rope_sin);
        llm_rope(s->k, c->n_kv_heads, hd, c->rope_pairs, s->rope_cos, s->rope_sin);
        /* each kv head: append k, v to its cache, attend its query group    */
        if (llm__heads(s, l, LLM__DECODE, pos, 1) != KVQ_OK) { s->n_pos = -1; return NULL; }
        /* output projection, back into the residual stream                  */
        llm__matmul(s, s->att, 1, (int)QD, 1, mat.o, o_out);
        llm__add(s->x, s->xb2, (size_t)dim);

        /* feed-forward: normalize, gate and up projections                  */
        llm__rmsnorm(s->xb, s->x, w->rms_ffn + L * (size_t)dim, dim, c->rms_eps);
        llm__matmul(s, s->xb, 1, dim, 2, mat.gate_up, gu_out);
        /* silu(gate) * up, then the down projection into the residual      */
        llm__swiglu(s->hb, s->hb2, hidden);
        llm__matmul(s, s->hb, 1, hidden, 1, mat.down, down_out);
        llm__add(s->x, s->xb2, (size_t)dim);
    }

    /* final norm, then the classifier (the embedding itself when tied)      */
    llm__rmsnorm(s->x, s->x, w->rms_final, dim, c->rms_eps);
    {
        const llm_mat *cls[1];
        float *cls_out[1];
        cls[0] = &w->wcls; cls_out[0] = s->logits;
        llm__matmul(s, s->x, 1, dim, 1, cls, cls_out);
    }
    if (!llm__finite(s->logits, (size_t)c->vocab_size)) {
        s->n_pos = -1;            /* the caches hold this position: refuse on */
        return llm__fail(s, KVQ_ERR_NONFINITE, "non-finite logits at position %d (a NaN "
                         "or Inf in the weights, or activations that overflowed)", pos);
    }
    s->n_pos = pos + 1;
    return s->logits;
}

/* ======================================================================== */
/* 7. MANY TOKENS AT ONCE: llm_prefill AND llm_forward_many                 */
/* ======================================================================== */
/* All T tokens go through layer l before any enters layer l + 1. Then every
   projection is a (T, in) x (in, out) matmul that reads each weight
   T / LLM_TILE times instead of T times: one token at a time, the model
   streams every weight from memory for every token (135M floats, 540 MB,
   for SmolLM2), and that, not arithmetic, is what limits llm_forward.
   The two entry points differ only in what a KV head does inside a layer:
     llm_prefill       a prompt into an empty state: each (layer, kv head)
                       gets its whole prompt K, V in one kvq_cache_prefill
                       (the policy's prefill rule), and attention inside the
                       prompt is full precision (Sec. 5, llm__prefill_head).
     llm_forward_many  T more tokens at positions n_pos.., each appended and
                       attending to the cache AS STORED, one after another:
                       exactly llm_forward called T times (the same dot
                       products in the same order, so bit for bit the same
                       logits), only faster. Teacher-forced scoring uses it.
   Both need T <= opts.max_prefill (the batch buffers). They return the last
   token's logits (vocab_size); with all_logits (T, vocab_size) non-NULL
   they also fill every token's logits. NULL on error, as llm_forward.      */
static float *llm__many(const llm_model *m, llm_state *s, const int *tokens, int T,
                        float *all_logits, llm__step step)
{
    const llm_config *c;
    const llm_weights *w;
    int l, t, kv, dim, hd, hidden, n_kv, pos0;
    size_t QD, KVD, D;
    if (!llm__ready(m, s)) return NULL;
    c = &m->cfg; w = &m->w;
    pos0 = s->n_pos;
    if (!tokens) return llm__fail(s, KVQ_ERR_NULL, "tokens is NULL");
    if (T <= 0 || T > s->max_prefill)
        return llm__fail(s, KVQ_ERR_SIZE, "%d tokens: a batch takes 1..max_prefill (%d)",
                         T, s->max_prefill);
    if (step == LLM__PREFILL && pos0 != 0)
        return llm__fail(s, KVQ_ERR_STATE, "llm_prefill needs an empty state (it "
                         "holds %d positions): llm_state_reset first", pos0);
    if (T > c->seq_len - pos0)
        return llm__fail(s, KVQ_ERR_SIZE, "%d tokens after %d positions exceed seq_len %d",
                         T, pos0, c->seq_len);
    for (t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return llm__fail(s, KVQ_ERR_SIZE, "tokens[%d] = %d outside 0..%d", t,
                             tokens[t], c->vocab_size - 1);
    dim = c->dim; hd = c->head_dim; hidden = c->hidden_dim; n_kv = c->n_kv_heads;
    D = (size_t)dim;
    QD = (size_t)c->n_heads * (size_t)hd;
    KVD = (size_t)n_kv * (size_t)hd;

    /* every token's embedding row starts its residual stream                */
    for (t = 0; t < T; t++) llm__mat_row(&w->token_embedding, tokens[t], s->px + (size_t)t * D);

    for (l = 0; l < c->n_layers; l++) {
        size_t L = (size_t)l;
        const llm__layer_mats mat = llm__layer(w, l);
        float *qkv_out[3], *gu_out[2], *o_out[1], *down_out[1];
        qkv_out[0] = s->pq; qkv_out[1] = s->pk; qkv_out[2] = s->pv; o_out[0] = s->pxb2;
        gu_out[0] = s->phb; gu_out[1] = s->phb2; down_out[0] = s->pxb2;
        /* attention: normalize every token, project all of them at once     */
        for (t = 0; t < T; t++)
            llm__rmsnorm(s->pxb + (size_t)t * D, s->px + (size_t)t * D,
                         w->rms_att + L * D, dim, c->rms_eps);
        llm__matmul(s, s->pxb, T, dim, 3, mat.qkv, qkv_out);
        /* RoPE each token at its own position                               */
        for (t = 0; t < T; t++) {
            llm_rope_table((double)c->rope_theta, hd, pos0 + t, s->rope_cos, s->rope_sin);
            llm_rope(s->pq + (size_t)t * QD, c->n_heads, hd, c->rope_pairs,
                     s->rope_cos, s->rope_sin);
            llm_rope(s->pk + (size_t)t * KVD, n_kv, hd, c->rope_pairs,
                     s->rope_cos, s->rope_sin);
        }
        /* regroup K, V from (T, n_kv, hd) to (n_kv, T, hd): one (T, D)
           matrix per kv head, the shape kvq_cache_prefill takes             */
        for (kv = 0; kv < n_kv; kv++)
            for (t = 0; t < T; t++) {
                size_t dst = ((size_t)kv * (size_t)s->max_prefill + (size_t)t) * (size_t)hd;
                size_t src = (size_t)t * KVD + (size_t)kv * (size_t)hd;
                memcpy(s->pkh + dst, s->pk + src, (size_t)hd * sizeof(float));
                memcpy(s->pvh + dst, s->pv + src, (size_t)hd * sizeof(float));
            }
        /* each kv head: its cache takes the T tokens and they attend        */
        if (llm__heads(s, l, step, pos0, T) != KVQ_OK) { s->n_pos = -1; return NULL; }
        /* output projection, back into every token's residual stream        */
        llm__matmul(s, s->patt, T, (int)QD, 1, mat.o, o_out);
        llm__add(s->px, s->pxb2, (size_t)T * D);

        /* feed-forward, all tokens                                          */
        for (t = 0; t < T; t++)
            llm__rmsnorm(s->pxb + (size_t)t * D, s->px + (size_t)t * D,
                         w->rms_ffn + L * D, dim, c->rms_eps);
        llm__matmul(s, s->pxb, T, dim, 2, mat.gate_up, gu_out);
        llm__swiglu(s->phb, s->phb2, T * hidden);
        llm__matmul(s, s->phb, T, hidden, 1, mat.down, down_out);
        llm__add(s->px, s->pxb2, (size_t)T * D);
    }

    /* final norm and classifier: every token, or only the last             */
    {
        const llm_mat *cls[1];
        float *cls_out[1];
        size_t V = (size_t)c->vocab_size;
        int t0 = all_logits ? 0 : T - 1;
        cls[0] = &w->wcls;
        cls_out[0] = all_logits ? all_logits : s->logits;
        for (t = t0; t < T; t++)
            llm__rmsnorm(s->pxb + (size_t)t * D, s->px + (size_t)t * D, w->rms_final,
                         dim, c->rms_eps);
        llm__matmul(s, s->pxb + (size_t)t0 * D, T - t0, dim, 1, cls, cls_out);
        if (all_logits) memcpy(s->logits, all_logits + (size_t)(T - 1) * V, V * sizeof(float));
    }
    if (!llm__finite(s->logits, (size_t)c->vocab_size) ||
        (all_logits && !llm__finite(all_logits, (size_t)T * (size_t)c->vocab_size))) {
        s->n_pos = -1;
        return llm__fail(s, KVQ_ERR_NONFINITE, "non-finite logits at positions %d..%d (a "
                         "NaN or Inf in the weights, or activations that overflowed)",
                         pos0, pos0 + T - 1);
    }
    s->n_pos = pos0 + T;
    return s->logits;
}

LLM_API float *llm_prefill(const llm_model *m, llm_state *s, const int *tokens, int T,
                           float *all_logits)
{
    return llm__many(m, s, tokens, T, all_logits, LLM__PREFILL);
}

LLM_API float *llm_forward_many(const llm_model *m, llm_state *s, const int *tokens,
                                int T, float *all_logits)
{
    return llm__many(m, s, tokens, T, all_logits, LLM__MANY);
}

/* ======================================================================== */
/* 8. BYTES, AND A K/V/Q RECORDER                                           */
/* ======================================================================== */

/* Sums kvq_cache_bytes over every cache. bits_per_element is recomputed for
   the sum: payload * 8 / (2 * sum of tokens * head_dim), i.e. bits per
   stored K or V element, as the cache's own accounting counts them.        */
LLM_API kvq_status llm_state_bytes(const llm_state *s, kvq_bytes *sum)
{
    size_t i, n;
    if (!s || !sum || !s->cache) return KVQ_ERR_NULL;
    memset(sum, 0, sizeof *sum);
    n = (size_t)s->cfg.n_layers * (size_t)s->cfg.n_kv_heads;
    for (i = 0; i < n; i++) {
        kvq_bytes b;
        int side;
        kvq_status st = kvq_cache_bytes(&s->cache[i], &b);
        if (st != KVQ_OK) return st;
        for (side = 0; side < 2; side++) {
            sum->codes[side] += b.codes[side];
            sum->scale_zero[side] += b.scale_zero[side];
            sum->full_precision[side] += b.full_precision[side];
        }
        sum->payload += b.payload;
        sum->metadata += b.metadata;
        sum->allocated += b.allocated;
        sum->tokens += b.tokens;
    }
    sum->bits_per_element =
        sum->tokens ? (double)sum->payload * 8.0 /
                          (2.0 * (double)sum->tokens * (double)s->cfg.head_dim)
                    : 0.0;
    return KVQ_OK;
}

/* A ready-made llm_capture_fn: keeps the post-RoPE K, V and Q of one
   (layer, kv head) for up to cap positions. Chain several with next and
   pass the first as capture_user.                                          */
typedef struct llm_recorder {
    int    layer, kv_head;
    int    n_q, head_dim;
    size_t cap, n;           /* positions kept so far                        */
    float *K;                /* (cap, head_dim)                              */
    float *V;                /* (cap, head_dim)                              */
    float *Q;                /* (cap, n_q, head_dim)                         */
    struct llm_recorder *next;
} llm_recorder;

LLM_API void llm_recorder_free(llm_recorder *r)
{
    if (!r) return;
    free(r->K); free(r->V); free(r->Q);
    memset(r, 0, sizeof *r);
}

LLM_API kvq_status llm_recorder_init(llm_recorder *r, const llm_config *c, int layer,
                                     int kv_head, size_t cap)
{
    if (!r || !c) return KVQ_ERR_NULL;
    memset(r, 0, sizeof *r);
    if (llm_config_check(c, NULL, 0) != KVQ_OK) return KVQ_ERR_CONFIG;
    if (layer < 0 || layer >= c->n_layers || kv_head < 0 || kv_head >= c->n_kv_heads ||
        cap == 0)
        return KVQ_ERR_SIZE;
    r->layer = layer; r->kv_head = kv_head; r->cap = cap;
    r->n_q = c->n_heads / c->n_kv_heads; r->head_dim = c->head_dim;
    r->K = llm__alloc(cap, (size_t)c->head_dim, 1);
    r->V = llm__alloc(cap, (size_t)c->head_dim, 1);
    r->Q = llm__alloc(cap, (size_t)r->n_q, (size_t)c->head_dim);
    if (!r->K || !r->V || !r->Q) { llm_recorder_free(r); return KVQ_ERR_NOMEM; }
    return KVQ_OK;
}

/* The llm_capture_fn: user is the first llm_recorder of a chain. Positions
   past cap are dropped (r->n stops at cap).                                 */
LLM_API void llm_record(void *user, int layer, int kv_head, int pos, const float *q,
                        int n_q, const float *k, const float *v)
{
    llm_recorder *r;
    (void)pos;
    for (r = (llm_recorder *)user; r; r = r->next) {
        size_t D = (size_t)r->head_dim;
        if (r->layer != layer || r->kv_head != kv_head || r->n >= r->cap || n_q != r->n_q)
            continue;
        memcpy(r->K + r->n * D, k, D * sizeof(float));
        memcpy(r->V + r->n * D, v, D * sizeof(float));
        memcpy(r->Q + r->n * (size_t)n_q * D, q, (size_t)n_q * D * sizeof(float));
        r->n++;
    }
}

/* Writes prefix_k.npy (n, D), prefix_v.npy (n, D) and prefix_q.npy
   (n * n_q, D): the query rows position-major, each position's n_q heads in
   order; 2-D so examples/common.h's --k/--v/--q read them directly.         */
LLM_API kvq_status llm_recorder_save(const llm_recorder *r, const char *prefix)
{
    char path[1024];
    size_t shape[2];
    kvq_status st;
    if (!r || !prefix) return KVQ_ERR_NULL;
    if (r->n == 0) return KVQ_ERR_STATE;
    if (strlen(prefix) + 8 > sizeof path) return KVQ_ERR_SIZE;
    shape[0] = r->n; shape[1] = (size_t)r->head_dim;
    sprintf(path, "%s_k.npy", prefix);
    if ((st = npy_save(path, r->K, shape, 2)) != KVQ_OK) return st;
    sprintf(path, "%s_v.npy", prefix);
    if ((st = npy_save(path, r->V, shape, 2)) != KVQ_OK) return st;
    shape[0] = r->n * (size_t)r->n_q;
    sprintf(path, "%s_q.npy", prefix);
    return npy_save(path, r->Q, shape, 2);
}

#endif /* KVQ_EXAMPLES_LLM_H */
