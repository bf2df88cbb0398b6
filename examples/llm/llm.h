/* examples/llm/llm.h - a LLaMA-architecture transformer in plain C whose keys and
   values live in kvq caches, one per (layer, KV head).

   It is the model only: it knows nothing about files. A loader (the GGUF
   reader elsewhere in examples/) fills llm_weights with float32 arrays; this
   file runs them. Written to be read top to bottom, like llama2.c's run.c.

   USAGE
       #define KVQ_IMPLEMENTATION
       #include "kvq.h"
       #include "examples/llm/llm.h"
       llm_model m;  m.cfg = ...;  llm_weights_alloc(&m.w, &m.cfg);  // fill
       llm_opts o = llm_opts_default();
       o.cache_fn = my_cache_fn;  o.cache_user = ...;   // NULL: fp32 caches
       llm_state s;  llm_state_init(&s, &m, &o);
       float *logits = llm_forward(&m, &s, token, pos);  // NULL on error: s.why
       // T tokens at once (o.max_prefill >= T): same logits, weights read once
       llm_forward_many(&m, &s, tokens, T, all_logits);

   COMPILE-TIME OPTIONS
       -fopenmp   matrix rows and KV heads are split across threads with
                  `#pragma omp parallel for` (guarded by _OPENMP; without it
                  the code is serial and the pragmas are not even seen)

   CONTENTS
       1. Config, weights and their orientation
       2. Options: cache configs, the attention hook, K/V/Q capture
       3. State: every buffer, allocated once (build / free / reset)
       4. Building blocks: RMSNorm, matmul, RoPE, SwiGLU
       5. Attention over the kvq caches (decode) and over the prompt (prefill)
       6. llm_forward: one token through the whole model
       7. Many tokens layer by layer: llm_prefill, llm_forward_many
       8. Bytes, and a K/V/Q recorder that writes .npy

   THE MODEL (LLaMA; SmolLM2 is one)
       x = embedding[token]
       per layer:  x += Wo . attn(RoPE(Wq . rms(x)), RoPE(Wk . rms(x)), Wv . rms(x))
                   x += W2 . (silu(W1 . rms(x)) * (W3 . rms(x)))
       logits = Wcls . rms(x)
   Each rms() has its own weight vector. Errors never crash: a function that
   fails returns NULL or a kvq_status, and s->why says why in one sentence. */
#ifndef KVQ_EXAMPLES_LLM_H
#define KVQ_EXAMPLES_LLM_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvq.h"
#include "../npy.h"      /* the recorder writes .npy */

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

/* The weights, float32, every tensor kind contiguous across layers.

   ORIENTATION. A weight matrix of shape (out, in) is stored row-major:
       out[i] = sum_j W[i * in + j] * x[j]
   This is the memory order of a ggml/GGUF tensor with ne0 = in (the fast,
   contiguous dimension) and ne1 = out, i.e. GGUF blk.L.attn_q.weight with
   ne = [dim, n_heads*head_dim] is copied as-is into wq + L*(q_dim*dim). It is
   also PyTorch's nn.Linear.weight layout. Rows are contiguous, so each output
   is one dot product over contiguous memory (Sec. 4).
   Below, q_dim = n_heads * head_dim and kv_dim = n_kv_heads * head_dim.     */
typedef struct llm_weights {
    float *token_embedding;  /* (vocab_size, dim)              token_embd    */
    float *rms_att;          /* (n_layers, dim)                attn_norm     */
    float *wq;               /* (n_layers, q_dim, dim)         attn_q        */
    float *wk;               /* (n_layers, kv_dim, dim)        attn_k        */
    float *wv;               /* (n_layers, kv_dim, dim)        attn_v        */
    float *wo;               /* (n_layers, dim, q_dim)         attn_output   */
    float *rms_ffn;          /* (n_layers, dim)                ffn_norm      */
    float *w1;               /* (n_layers, hidden_dim, dim)    ffn_gate      */
    float *w3;               /* (n_layers, hidden_dim, dim)    ffn_up        */
    float *w2;               /* (n_layers, dim, hidden_dim)    ffn_down      */
    float *rms_final;        /* (dim)                          output_norm   */
    float *wcls;             /* (vocab_size, dim)              output; NULL or
                                == token_embedding when tied                 */
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

LLM_API void llm_weights_free(llm_weights *w)
{
    if (!w) return;
    if (w->wcls != w->token_embedding) free(w->wcls);
    free(w->token_embedding); free(w->rms_att);
    free(w->wq); free(w->wk); free(w->wv); free(w->wo);
    free(w->rms_ffn); free(w->w1); free(w->w3); free(w->w2);
    free(w->rms_final);
    memset(w, 0, sizeof *w);
}

/* Allocates every array, zeroed, for the loader (or a test) to fill. With
   tied embeddings wcls is token_embedding itself.                           */
LLM_API kvq_status llm_weights_alloc(llm_weights *w, const llm_config *c)
{
    size_t L, D, H, Q, KV, V;
    kvq_status st;
    if (!w) return KVQ_ERR_NULL;
    memset(w, 0, sizeof *w);
    if ((st = llm_config_check(c, NULL, 0)) != KVQ_OK) return st;
    L = (size_t)c->n_layers; D = (size_t)c->dim; H = (size_t)c->hidden_dim;
    Q = (size_t)c->n_heads * (size_t)c->head_dim;
    KV = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    V = (size_t)c->vocab_size;
    w->token_embedding = llm__alloc(V, D, 1);
    w->rms_att   = llm__alloc(L, D, 1);
    w->wq        = llm__alloc(L, Q, D);
    w->wk        = llm__alloc(L, KV, D);
    w->wv        = llm__alloc(L, KV, D);
    w->wo        = llm__alloc(L, D, Q);
    w->rms_ffn   = llm__alloc(L, D, 1);
    w->w1        = llm__alloc(L, H, D);
    w->w3        = llm__alloc(L, H, D);
    w->w2        = llm__alloc(L, D, H);
    w->rms_final = llm__alloc(D, 1, 1);
    w->wcls      = c->tied_embeddings ? w->token_embedding : llm__alloc(V, D, 1);
    if (!w->token_embedding || !w->rms_att || !w->wq || !w->wk || !w->wv ||
        !w->wo || !w->rms_ffn || !w->w1 || !w->w3 || !w->w2 || !w->rms_final ||
        !w->wcls) {
        llm_weights_free(w);
        return KVQ_ERR_NOMEM;
    }
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
    free(s->scratch); free(s->probs); free(s->head_status);
    free(s->px); free(s->pxb); free(s->pxb2); free(s->pq); free(s->pk); free(s->pv);
    free(s->patt); free(s->phb); free(s->phb2); free(s->pkh); free(s->pvh);
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
                      (int)i % n_kv, kvq_status_str(st), c->why);
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
    if (!m->w.token_embedding || !m->w.rms_att || !m->w.wq || !m->w.wk || !m->w.wv ||
        !m->w.wo || !m->w.rms_ffn || !m->w.w1 || !m->w.w3 || !m->w.w2 ||
        !m->w.rms_final || (!c->tied_embeddings && !m->w.wcls)) {
        llm__fail(s, KVQ_ERR_NULL, "a weight array is NULL%s",
                  !c->tied_embeddings && !m->w.wcls ? " (wcls, embeddings not tied)" : "");
        return KVQ_ERR_NULL;
    }
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
    s->cache = (kvq_cache *)calloc(n_caches, sizeof(kvq_cache));
    s->cache_cfg = (kvq_config *)calloc(n_caches, sizeof(kvq_config));
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
        !s->scratch || !s->probs || !s->head_status || !s->cache || !s->cache_cfg ||
        (P > 0 && (!s->px || !s->pxb || !s->pxb2 || !s->pq || !s->pk || !s->pv ||
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

/* One output of a matmul: a dot product over two contiguous rows. Eight
   independent partial sums let the compiler keep a vector register busy
   (a single running sum is one long dependency chain).                     */
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

/* out (n_out) = W (n_out, n_in) . x (n_in). Rows of W are independent, so
   they are split across threads; each walks its rows once, in memory order. */
static void llm__matmul(float *out, const float *x, const float *W, int n_in, int n_out)
{
    int i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < n_out; i++) out[i] = llm__dot(W + (size_t)i * (size_t)n_in, x, n_in);
}

/* OUT (T, n_out) = X (T, n_in) . W^T: the prompt's tokens at once. Blocks of
   LLM_TILE rows of W meet blocks of LLM_TILE tokens, so each W row is reused
   for LLM_TILE tokens from L1 and W is read from memory T / LLM_TILE times
   instead of T. Each output is the same llm__dot as in decode, so prefill
   and decode matmuls agree bit for bit.                                    */
#define LLM_TILE 16
static void llm__matmul_rows(float *out, const float *X, const float *W, int T,
                             int n_in, int n_out)
{
    int ib, n_blocks = (n_out + LLM_TILE - 1) / LLM_TILE;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (ib = 0; ib < n_blocks; ib++) {
        int i0 = ib * LLM_TILE, i1 = i0 + LLM_TILE < n_out ? i0 + LLM_TILE : n_out;
        int t0, t, i;
        for (t0 = 0; t0 < T; t0 += LLM_TILE) {
            int t1 = t0 + LLM_TILE < T ? t0 + LLM_TILE : T;
            for (i = i0; i < i1; i++) {
                const float *w = W + (size_t)i * (size_t)n_in;
                for (t = t0; t < t1; t++)
                    out[(size_t)t * (size_t)n_out + (size_t)i] =
                        llm__dot(w, X + (size_t)t * (size_t)n_in, n_in);
            }
        }
    }
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

/* Runs every KV head of layer l, on threads unless a callback is set:
   callbacks then see the heads in order (and, within a head, the positions
   in order) and need not be thread-safe. Returns the first failure, with
   its reason in s->why.                                                    */
static kvq_status llm__heads(llm_state *s, int l, llm__step step, int pos, int T)
{
    int kv, n_kv = s->cfg.n_kv_heads;
    size_t hd = (size_t)s->cfg.head_dim, n_q = (size_t)(s->cfg.n_heads / n_kv);
#ifdef _OPENMP
    int serial = s->opts.hook != NULL || s->opts.capture != NULL;
#pragma omp parallel for schedule(static) if (!serial)
#endif
    for (kv = 0; kv < n_kv; kv++) {
        size_t qo = (size_t)kv * n_q * hd, ko = (size_t)kv * hd;
        s->head_status[kv] =
            step == LLM__PREFILL ? llm__prefill_head(s, l, kv, T)
          : step == LLM__MANY    ? llm__many_head(s, l, kv, pos, T)
          : llm__decode_head(s, l, kv, pos, s->q + qo, s->k + ko, s->v + ko, s->att + qo);
    }
    for (kv = 0; kv < n_kv; kv++)
        if (s->head_status[kv] != KVQ_OK) {
            kvq_status st = s->head_status[kv];
            llm__fail(s, st, "layer %d kv head %d: %s (%s)", l, kv, kvq_status_str(st),
                      st == KVQ_ERR_STATE && s->opts.hook ? "the hook returned non-zero"
                                                          : llm_cache(s, l, kv)->why);
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
    size_t QD, KVD;
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
    KVD = (size_t)c->n_kv_heads * (size_t)hd;

    /* the token's embedding row starts the residual stream                  */
    memcpy(s->x, w->token_embedding + (size_t)token * (size_t)dim, (size_t)dim * sizeof(float));
    /* the RoPE angles of this position, shared by every layer and head      */
    llm_rope_table((double)c->rope_theta, hd, pos, s->rope_cos, s->rope_sin);

    for (l = 0; l < c->n_layers; l++) {
        size_t L = (size_t)l;
        /* attention: normalize, project to q, k, v                          */
        llm__rmsnorm(s->xb, s->x, w->rms_att + L * (size_t)dim, dim, c->rms_eps);
        llm__matmul(s->q, s->xb, w->wq + L * QD * (size_t)dim, dim, (int)QD);
        llm__matmul(s->k, s->xb, w->wk + L * KVD * (size_t)dim, dim, (int)KVD);
        llm__matmul(s->v, s->xb, w->wv + L * KVD * (size_t)dim, dim, (int)KVD);
        /* rotate q and k by the position (v is not rotated)                 */
        llm_rope(s->q, c->n_heads, hd, c->rope_pairs, s->rope_cos, s->rope_sin);
        llm_rope(s->k, c->n_kv_heads, hd, c->rope_pairs, s->rope_cos, s->rope_sin);
        /* each kv head: append k, v to its cache, attend its query group    */
        if (llm__heads(s, l, LLM__DECODE, pos, 1) != KVQ_OK) { s->n_pos = -1; return NULL; }
        /* output projection, back into the residual stream                  */
        llm__matmul(s->xb2, s->att, w->wo + L * (size_t)dim * QD, (int)QD, dim);
        llm__add(s->x, s->xb2, (size_t)dim);

        /* feed-forward: normalize, gate and up projections                  */
        llm__rmsnorm(s->xb, s->x, w->rms_ffn + L * (size_t)dim, dim, c->rms_eps);
        llm__matmul(s->hb, s->xb, w->w1 + L * (size_t)hidden * (size_t)dim, dim, hidden);
        llm__matmul(s->hb2, s->xb, w->w3 + L * (size_t)hidden * (size_t)dim, dim, hidden);
        /* silu(gate) * up, then the down projection into the residual      */
        llm__swiglu(s->hb, s->hb2, hidden);
        llm__matmul(s->xb2, s->hb, w->w2 + L * (size_t)dim * (size_t)hidden, hidden, dim);
        llm__add(s->x, s->xb2, (size_t)dim);
    }

    /* final norm, then the classifier (the embedding itself when tied)      */
    llm__rmsnorm(s->x, s->x, w->rms_final, dim, c->rms_eps);
    llm__matmul(s->logits, s->x, w->wcls ? w->wcls : w->token_embedding, dim, c->vocab_size);
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
    for (t = 0; t < T; t++)
        memcpy(s->px + (size_t)t * D, w->token_embedding + (size_t)tokens[t] * D,
               D * sizeof(float));

    for (l = 0; l < c->n_layers; l++) {
        size_t L = (size_t)l;
        /* attention: normalize every token, project all of them at once     */
        for (t = 0; t < T; t++)
            llm__rmsnorm(s->pxb + (size_t)t * D, s->px + (size_t)t * D,
                         w->rms_att + L * D, dim, c->rms_eps);
        llm__matmul_rows(s->pq, s->pxb, w->wq + L * QD * D, T, dim, (int)QD);
        llm__matmul_rows(s->pk, s->pxb, w->wk + L * KVD * D, T, dim, (int)KVD);
        llm__matmul_rows(s->pv, s->pxb, w->wv + L * KVD * D, T, dim, (int)KVD);
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
        llm__matmul_rows(s->pxb2, s->patt, w->wo + L * D * QD, T, (int)QD, dim);
        llm__add(s->px, s->pxb2, (size_t)T * D);

        /* feed-forward, all tokens                                          */
        for (t = 0; t < T; t++)
            llm__rmsnorm(s->pxb + (size_t)t * D, s->px + (size_t)t * D,
                         w->rms_ffn + L * D, dim, c->rms_eps);
        llm__matmul_rows(s->phb, s->pxb, w->w1 + L * (size_t)hidden * D, T, dim, hidden);
        llm__matmul_rows(s->phb2, s->pxb, w->w3 + L * (size_t)hidden * D, T, dim, hidden);
        llm__swiglu(s->phb, s->phb2, T * hidden);
        llm__matmul_rows(s->pxb2, s->phb, w->w2 + L * D * (size_t)hidden, T, hidden, dim);
        llm__add(s->px, s->pxb2, (size_t)T * D);
    }

    /* final norm and classifier: every token, or only the last             */
    {
        const float *wcls = w->wcls ? w->wcls : w->token_embedding;
        size_t V = (size_t)c->vocab_size;
        int t0 = all_logits ? 0 : T - 1;
        for (t = t0; t < T; t++)
            llm__rmsnorm(s->pxb + (size_t)t * D, s->px + (size_t)t * D, w->rms_final,
                         dim, c->rms_eps);
        if (all_logits) {
            llm__matmul_rows(all_logits, s->pxb, wcls, T, dim, c->vocab_size);
            memcpy(s->logits, all_logits + (size_t)(T - 1) * V, V * sizeof(float));
        } else {
            llm__matmul(s->logits, s->pxb + (size_t)(T - 1) * D, wcls, dim, c->vocab_size);
        }
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
