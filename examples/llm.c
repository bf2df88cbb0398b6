/* examples/llm.c - a real LLM (SmolLM2-135M-Instruct, LLaMA architecture)
   in plain C, with its K/V going through any kvq cache, to check the papers'
   claims on real keys and values.

     build/llm generate --prompt "The capital of France is" [-n 32] [--cache kivi2]
     build/llm eval     [--text FILE] [--tokens 2048] [--agree 64] [--only LIST]
     build/llm dump     --out DIR [--layers 0,5,15] [--head 0] [--tokens 1024]
     common: --model PATH (default models/SmolLM2-135M-Instruct.Q4_1.gguf,
             fetched by `make model`; any LLaMA-architecture GGUF whose
             tensors are F32/F16/Q4_0/Q4_1/Q8_0 works)

   Files: gguf.h reads the model, bpe.h tokenizes, llm.h is the forward
   pass; this file wires them to the caches and runs the evaluation.

   Sections: 1 loading  2 cache methods (incl. eviction hooks)  3 commands */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "gguf.h"
#include "bpe.h"
#include "llm.h"
#include <time.h>

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* ======================================================================== */
/* 1. LOADING: GGUF metadata -> llm_config, tensors -> float32 weights      */
/* ======================================================================== */
typedef struct model_file {
    gguf_ctx      g;
    llm_model     m;
    bpe_tokenizer tok;
    int           bos;      /* -1 if the file says not to add one           */
} model_file;

static int get_int(gguf_ctx *g, const char *key, int *out)
{
    uint64_t v;
    if (!gguf_get_uint(g, key, &v) || v > 0x7FFFFFFF) {
        fprintf(stderr, "model: %s: %s\n", key, g->why);
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* Dequantizes tensor `name` (n floats expected) into dst.                   */
static int load_tensor(gguf_ctx *g, const char *name, float *dst, size_t n)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) { fprintf(stderr, "model: tensor %s missing\n", name); return 0; }
    if (t->n_elem != n) {
        fprintf(stderr, "model: %s has %llu elements, expected %zu\n", name,
                (unsigned long long)t->n_elem, n);
        return 0;
    }
    if (!gguf_dequant(t->type, t->data, dst, n)) {
        fprintf(stderr, "model: %s: %s\n", name, g->why);
        return 0;
    }
    return 1;
}

/* Per-layer tensor blk.L.<what>.weight into base + L * per.                */
static int load_layers(model_file *f, const char *what, float *base, size_t per)
{
    char name[96];
    int l;
    for (l = 0; l < f->m.cfg.n_layers; l++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, what);
        if (!load_tensor(&f->g, name, base + (size_t)l * per, per)) return 0;
    }
    return 1;
}

static int load_tokenizer(model_file *f)
{
    gguf_arr toks, merges, types;
    gguf_str *ts = NULL, *ms = NULL;
    const char **tp = NULL, **mp = NULL;
    int *tl = NULL, *ml = NULL, *ty = NULL, ok = 0, add_bos = 0;
    uint64_t i, bos;
    if (!gguf_get_arr(&f->g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks) ||
        !gguf_get_arr(&f->g, "tokenizer.ggml.merges", GGUF_VT_STR, &merges)) {
        fprintf(stderr, "model: tokenizer: %s\n", f->g.why);
        return 0;
    }
    ts = (gguf_str *)malloc(toks.n * sizeof *ts);
    ms = (gguf_str *)malloc(merges.n * sizeof *ms);
    tp = (const char **)malloc(toks.n * sizeof *tp);
    mp = (const char **)malloc(merges.n * sizeof *mp);
    tl = (int *)malloc(toks.n * sizeof *tl);
    ml = (int *)malloc(merges.n * sizeof *ml);
    ty = (int *)malloc(toks.n * sizeof *ty);
    if (!ts || !ms || !tp || !mp || !tl || !ml || !ty) goto done;
    if (!gguf_arr_strs(&toks, ts) || !gguf_arr_strs(&merges, ms)) goto done;
    for (i = 0; i < toks.n; i++) { tp[i] = ts[i].ptr; tl[i] = (int)ts[i].len; }
    for (i = 0; i < merges.n; i++) { mp[i] = ms[i].ptr; ml[i] = (int)ms[i].len; }
    if (!gguf_get_arr(&f->g, "tokenizer.ggml.token_type", GGUF_VT_I32, &types) || !gguf_arr_i32(&types, ty)) {
        free(ty); ty = NULL;
    }
    if (bpe_init(&f->tok, tp, tl, (int)toks.n, mp, ml, (int)merges.n, ty) != 0) {
        fprintf(stderr, "model: tokenizer: %s\n", f->tok.err);
        goto done;
    }
    f->bos = -1;
    if (gguf_get_bool(&f->g, "tokenizer.ggml.add_bos_token", &add_bos) && add_bos &&
        gguf_get_uint(&f->g, "tokenizer.ggml.bos_token_id", &bos))
        f->bos = (int)bos;
    ok = 1;
done:
    free(ts); free(ms); free(tp); free(mp); free(tl); free(ml); free(ty);
    return ok;
}

static void model_close(model_file *f)
{
    llm_weights_free(&f->m.w);
    bpe_free(&f->tok);
    gguf_close(&f->g);
}

static int model_open(model_file *f, const char *path, int seq_len)
{
    llm_config *c = &f->m.cfg;
    gguf_str arch;
    float f32;
    int dim, q_dim, kv_dim, ok;
    char why[256];
    memset(f, 0, sizeof *f);
    if (!gguf_open_file(&f->g, path)) {
        fprintf(stderr, "%s: %s\n(run `make model` to fetch the default model)\n", path, f->g.why);
        return 0;
    }
    if (!gguf_get_str(&f->g, "general.architecture", &arch) || arch.len != 5 ||
        memcmp(arch.ptr, "llama", 5) != 0) {
        fprintf(stderr, "%s: not a LLaMA-architecture GGUF\n", path);
        return 0;
    }
    if (!get_int(&f->g, "llama.embedding_length", &c->dim) ||
        !get_int(&f->g, "llama.feed_forward_length", &c->hidden_dim) ||
        !get_int(&f->g, "llama.block_count", &c->n_layers) ||
        !get_int(&f->g, "llama.attention.head_count", &c->n_heads) ||
        !get_int(&f->g, "llama.attention.head_count_kv", &c->n_kv_heads))
        return 0;
    c->head_dim = c->n_heads ? c->dim / c->n_heads : 0;
    c->rope_theta = gguf_get_f32(&f->g, "llama.rope.freq_base", &f32) ? f32 : 10000.0f;
    c->rms_eps = gguf_get_f32(&f->g, "llama.attention.layer_norm_rms_epsilon", &f32) ? f32 : 1e-5f;
    c->seq_len = seq_len;
    c->rope_pairs = LLM_ROPE_ADJACENT;     /* llama GGUF: q/k pre-permuted  */
    {
        gguf_arr toks;
        if (!gguf_get_arr(&f->g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks)) return 0;
        c->vocab_size = (int)toks.n;
    }
    c->tied_embeddings = gguf_find_tensor(&f->g, "output.weight") == NULL;
    if (llm_config_check(c, why, sizeof why) != KVQ_OK) {
        fprintf(stderr, "%s: %s\n", path, why);
        return 0;
    }
    if (llm_weights_alloc(&f->m.w, c) != KVQ_OK) { fprintf(stderr, "out of memory\n"); return 0; }
    dim = c->dim; q_dim = c->n_heads * c->head_dim; kv_dim = c->n_kv_heads * c->head_dim;
    ok = load_tensor(&f->g, "token_embd.weight", f->m.w.token_embedding, (size_t)c->vocab_size * dim) &&
         load_layers(f, "attn_norm", f->m.w.rms_att, (size_t)dim) &&
         load_layers(f, "attn_q", f->m.w.wq, (size_t)q_dim * dim) &&
         load_layers(f, "attn_k", f->m.w.wk, (size_t)kv_dim * dim) &&
         load_layers(f, "attn_v", f->m.w.wv, (size_t)kv_dim * dim) &&
         load_layers(f, "attn_output", f->m.w.wo, (size_t)dim * q_dim) &&
         load_layers(f, "ffn_norm", f->m.w.rms_ffn, (size_t)dim) &&
         load_layers(f, "ffn_gate", f->m.w.w1, (size_t)c->hidden_dim * dim) &&
         load_layers(f, "ffn_up", f->m.w.w3, (size_t)c->hidden_dim * dim) &&
         load_layers(f, "ffn_down", f->m.w.w2, (size_t)dim * c->hidden_dim) &&
         load_tensor(&f->g, "output_norm.weight", f->m.w.rms_final, (size_t)dim) &&
         (c->tied_embeddings ||
          load_tensor(&f->g, "output.weight", f->m.w.wcls, (size_t)c->vocab_size * dim)) &&
         load_tokenizer(f);
    return ok;
}

/* Text -> ids (BOS first when the file asks for it). Caller frees.         */
static int *encode(model_file *f, const char *text, size_t len, int *n_out)
{
    long n = bpe_encode(&f->tok, text, len, 0, NULL, 0);
    int *ids, off = f->bos >= 0;
    if (n < 0) { fprintf(stderr, "tokenize: %s\n", f->tok.err); return NULL; }
    ids = (int *)malloc(((size_t)n + 1) * sizeof(int));
    if (!ids) return NULL;
    if (off) ids[0] = f->bos;
    n = bpe_encode(&f->tok, text, len, 0, ids + off, (size_t)n);
    *n_out = (int)n + off;
    return ids;
}

/* ======================================================================== */
/* 2. CACHE METHODS                                                         */
/* ======================================================================== */
/* A method = a kvq_config per layer, plus (for eviction) a hook that sees
   the eager attention's probabilities and evicts down to a token budget.  */
typedef enum evict_kind { EV_NONE, EV_STREAMING, EV_H2O, EV_SNAPKV } evict_kind;

typedef struct method {
    const char *name;
    const char *paper;         /* what the paper claims, as ordering/size    */
    kvq_config *per_layer;     /* (n_layers)                                 */
    evict_kind  evict;
    size_t      budget;        /* tokens kept per (layer, KV head)           */
    /* eviction state, (n_layers * n_kv_heads) of each                      */
    float     **score;         /* H2O cumulative attention / SnapKV votes    */
    uint8_t    *keep;          /* (seq_len) scratch mask                     */
    float      *obs;           /* SnapKV: (W_OBS, seq_len) recent probs ring */
    float      *votes;         /* SnapKV: (W_OBS, seq_len) oldest first      */
    int         n_kv;          /* KV heads per layer: cache = layer*n_kv+head */
    int         n_caches;      /* entries of score: n_layers * n_kv          */
    int         seq_len;
} method;

#define SINKS   4              /* StreamingLLM's attention sinks             */
#define W_OBS   32             /* SnapKV observation window (its default)    */
#define POOL_K  5              /* SnapKV pooling kernel (its default)        */

/* The eviction hook, after attention of (layer, kv_head) at `pos`.         */
static int evict_hook(void *user, int layer, int kv_head, int pos,
                      const float *probs, int n_q, kvq_cache *c)
{
    method *M = (method *)user;
    size_t n = (size_t)pos + 1, p, cache_i = (size_t)layer * M->n_kv + kv_head;
    uint8_t *keep = M->keep;
    float *score = M->score[cache_i];
    kvq_status st = KVQ_OK;
    if (kvq_cache_present(c, keep, n) != KVQ_OK) return 1;
    switch (M->evict) {
    case EV_STREAMING:
        st = kvq_evict_streaming(keep, n, SINKS, M->budget > SINKS ? M->budget - SINKS : 0, keep);
        break;
    case EV_H2O:                          /* heavy hitters + recent, half each */
        score[pos] = 0.0f;
        st = kvq_h2o_accumulate(score, probs, (size_t)n_q, n);
        if (st == KVQ_OK) st = kvq_evict_h2o(score, keep, n, M->budget / 2,
                                             M->budget - M->budget / 2, keep);
        break;
    case EV_SNAPKV: {
        /* SnapKV scores once per prompt; in a long teacher-forced stream we
           re-run it every KVQ_COMPACT_EVERY tokens (an adaptation, stated in
           the output): the last W_OBS queries' attention, summed over the
           group's query heads, votes.                                       */
        size_t row = (size_t)pos % W_OBS, h;
        float *o = M->obs + row * (size_t)M->seq_len;
        memset(o, 0, n * sizeof(float));
        for (h = 0; h < (size_t)n_q; h++)
            for (p = 0; p < n; p++) o[p] += probs[h * n + p];
        if (n < (size_t)KVQ_COMPACT_EVERY || (n % KVQ_COMPACT_EVERY) != 0 || n <= M->budget)
            return 0;
        {
            /* rows of the last W_OBS queries, oldest first, each (n) wide  */
            size_t i;
            for (i = 0; i < W_OBS; i++) {
                size_t src = ((size_t)pos + 1 + i) % W_OBS;
                memcpy(M->votes + i * n, M->obs + src * (size_t)M->seq_len, n * sizeof(float));
            }
            st = kvq_snapkv_scores(M->votes, W_OBS, n, POOL_K, KVQ_POOL_AVG, score);
            if (st == KVQ_OK) {                 /* absent positions rank last */
                for (p = 0; p < n - W_OBS; p++) if (!keep[p]) score[p] = -1.0f;
                st = kvq_evict_snapkv(score, n, W_OBS, M->budget, keep);
            }
        }
        break;
    }
    default:
        return 0;
    }
    if (st != KVQ_OK) return 1;
    return kvq_cache_evict(c, keep, n, NULL) != KVQ_OK;
}

static void method_free(method *M)
{
    int i;
    if (M->score) for (i = 0; i < M->n_caches; i++) free(M->score[i]);
    free(M->score); free(M->keep); free(M->obs); free(M->votes); free(M->per_layer);
    memset(M, 0, sizeof *M);
}

/* Builds method `name` for this model. budget: tokens for eviction methods. */
static int method_make(method *M, const char *name, const llm_config *c, size_t budget)
{
    size_t D = (size_t)c->head_dim;
    int l, n_caches = c->n_layers * c->n_kv_heads;
    kvq_config base;
    memset(M, 0, sizeof *M);
    M->name = name;
    M->per_layer = (kvq_config *)calloc((size_t)c->n_layers, sizeof(kvq_config));
    if (!M->per_layer) return 0;
    if (!strcmp(name, "fp32"))       { base = kvq_config_full(D, 32); M->paper = "reference"; }
    else if (!strcmp(name, "kivi4")) { base = kvq_config_kivi(D, 4); M->paper = "KIVI: 4-bit ~ lossless"; }
    else if (!strcmp(name, "kivi2")) { base = kvq_config_kivi(D, 2); M->paper = "KIVI: 2-bit small loss"; }
    else if (!strcmp(name, "kivi2-KtVt") || !strcmp(name, "kivi2-KcVc") || !strcmp(name, "kivi2-KtVc")) {
        base = kvq_config_kivi(D, 2);    /* KIVI Table 1's other combinations */
        base.key_axis = name[7] == 't' ? KVQ_PER_TOKEN : KVQ_PER_CHANNEL;
        base.value_axis = name[9] == 't' ? KVQ_PER_TOKEN : KVQ_PER_CHANNEL;
        M->paper = "KIVI T1: only Kc+Vt works";
    }
    else if (!strcmp(name, "hf4"))   { base = kvq_config_hf(D, kvq_hf_defaults(4)); M->paper = "HF: int4 ~ lossless"; }
    else if (!strcmp(name, "hf2"))   { base = kvq_config_hf(D, kvq_hf_defaults(2)); M->paper = "HF: int2 degrades"; }
    else if (!strcmp(name, "ott2"))  { base = kvq_config_ott(D, 2, 2); M->paper = "OTT: beats KIVI-2"; }
    else if (!strcmp(name, "logquant2")) {
        base = kvq_config_logquant(D, 2, kvq_logquant_window_for(128));
        M->paper = "LogQuant: beats KIVI-2";
    }
    else if (!strcmp(name, "streaming") || !strcmp(name, "h2o") || !strcmp(name, "snapkv")) {
        base = kvq_config_full(D, 16);
        M->evict = name[0] == 's' ? (name[1] == 't' ? EV_STREAMING : EV_SNAPKV) : EV_H2O;
        M->budget = budget;
        M->paper = "evict < quantize (LQ 2.3)";
    } else {
        fprintf(stderr, "unknown cache method %s\n", name);
        return 0;
    }
    for (l = 0; l < c->n_layers; l++) {
        M->per_layer[l] = base;
        if (!strcmp(name, "ott2")) M->per_layer[l] = kvq_config_ott(D, 2, l); /* k=0 in 0-1 */
    }
    if (M->evict != EV_NONE) {
        M->n_kv = c->n_kv_heads;
        M->n_caches = n_caches;
        M->seq_len = c->seq_len;
        M->score = (float **)calloc((size_t)n_caches, sizeof(float *));
        M->keep = (uint8_t *)malloc((size_t)c->seq_len);
        M->obs = (float *)calloc((size_t)W_OBS * c->seq_len, sizeof(float));
        M->votes = (float *)calloc((size_t)W_OBS * c->seq_len, sizeof(float));
        if (!M->score || !M->keep || !M->obs || !M->votes) return 0;
        for (l = 0; l < n_caches; l++)
            if (!(M->score[l] = (float *)calloc((size_t)c->seq_len, sizeof(float)))) return 0;
    }
    return 1;
}

/* A fresh state whose caches follow method M.                             */
static int state_for(llm_state *s, const model_file *f, method *M, int max_prefill)
{
    llm_opts o = llm_opts_default();
    kvq_status st;
    o.cache_fn = llm_cache_per_layer;
    o.cache_user = M->per_layer;
    o.max_prefill = max_prefill;
    o.reserve = f->m.cfg.seq_len;
    if (M->evict != EV_NONE) { o.hook = evict_hook; o.hook_user = M; }
    st = llm_state_init(s, &f->m, &o);
    if (st != KVQ_OK) { fprintf(stderr, "%s: %s\n", M->name, s->why); return 0; }
    return 1;
}

static int argmax(const float *x, int n)
{
    int i, b = 0;
    for (i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* ======================================================================== */
/* 3. COMMANDS                                                              */
/* ======================================================================== */
typedef struct run_result {
    double nll, ppl, bits, tok_s;
    int    n_scored;
    int   *gen;            /* (n_gen) greedy continuation                    */
} run_result;

static double now_s(void) { return (double)clock() / CLOCKS_PER_SEC; }

/* Teacher-forced negative log-likelihood over ids[0..n-1] (token t predicts
   t+1), then a greedy continuation of n_gen tokens after ids[0..n_prompt).  */
static int run_method(model_file *f, method *M, const int *ids, int n, int n_prompt,
                      int n_gen, run_result *R)
{
    llm_state s;
    kvq_bytes b;
    int t, V = f->m.cfg.vocab_size;
    double t0;
    memset(R, 0, sizeof *R);
    if (!state_for(&s, f, M, 0)) return 0;
    t0 = now_s();
    for (t = 0; t + 1 < n; t++) {
        const float *lg = llm_forward(&f->m, &s, ids[t], t);
        double mx = -INFINITY, z = 0.0;
        int i;
        if (!lg) { fprintf(stderr, "%s: %s\n", M->name, s.why); llm_state_free(&s); return 0; }
        for (i = 0; i < V; i++) if (lg[i] > mx) mx = lg[i];
        for (i = 0; i < V; i++) z += exp((double)lg[i] - mx);
        R->nll += -((double)lg[ids[t + 1]] - mx - log(z));
        R->n_scored++;
    }
    R->tok_s = (n - 1) / (now_s() - t0 + 1e-9);
    llm_state_bytes(&s, &b);
    R->bits = b.bits_per_element;
    R->ppl = exp(R->nll / R->n_scored);
    llm_state_free(&s);
    /* greedy continuation from the first n_prompt tokens                    */
    if (n_gen > 0) {
        const float *lg = NULL;
        R->gen = (int *)malloc((size_t)n_gen * sizeof(int));
        if (!R->gen || !state_for(&s, f, M, 0)) return 0;
        for (t = 0; t < n_prompt; t++) lg = llm_forward(&f->m, &s, ids[t], t);
        for (t = 0; t < n_gen && lg; t++) {
            R->gen[t] = argmax(lg, V);
            lg = llm_forward(&f->m, &s, R->gen[t], n_prompt + t);
        }
        llm_state_free(&s);
    }
    return 1;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    long n;
    if (!fp) { fprintf(stderr, "cannot open %s\n", path); return NULL; }
    fseek(fp, 0, SEEK_END); n = ftell(fp); fseek(fp, 0, SEEK_SET);
    buf = (char *)malloc((size_t)(n > 0 ? n : 1));
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) { free(buf); buf = NULL; }
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

#ifndef LLM_NO_MAIN   /* tests/test_model.c includes this file for its loader */
static const char *ALL_METHODS[] = {
    "fp32", "kivi4", "kivi2", "hf4", "hf2", "kivi2-KtVt", "kivi2-KcVc", "kivi2-KtVc",
    "ott2", "logquant2", "streaming", "h2o", "snapkv"
};
#define N_METHODS (sizeof ALL_METHODS / sizeof ALL_METHODS[0])

static int cmd_eval(model_file *f, const char *text_path, int n_tokens, int n_gen,
                    const char *only)
{
    size_t len, i;
    char *text = read_file(text_path, &len);
    int *ids, n, n_prompt = 128, ok = 1;
    run_result ref, R;
    double kivi2_bits = 0.0;
    if (!text) return 1;
    ids = encode(f, text, len, &n);
    free(text);
    if (!ids) return 1;
    if (n > n_tokens) n = n_tokens;
    printf("eval: %s, %d tokens teacher-forced, greedy agreement over %d tokens after a "
           "%d-token prompt\n", text_path, n, n_gen, n_prompt);
    printf("%-11s %6s %9s %8s %7s %7s  %s\n", "method", "bits", "ppl", "dppl", "agree",
           "tok/s", "paper's claim");
    memset(&ref, 0, sizeof ref);
    for (i = 0; i < N_METHODS; i++) {
        method M;
        size_t budget;
        int g, same = 0;
        if (only && !strstr(only, ALL_METHODS[i]) && strcmp(ALL_METHODS[i], "fp32")) continue;
        /* eviction budget: the tokens an fp16 cache can hold in KIVI-2's bytes */
        budget = (size_t)((double)n * (kivi2_bits > 0 ? kivi2_bits : 3.5) / 16.0);
        if (!method_make(&M, ALL_METHODS[i], &f->m.cfg, budget) ||
            !run_method(f, &M, ids, n, n_prompt, n_gen, &R)) {
            method_free(&M); ok = 0; continue;
        }
        if (i == 0) ref = R;
        if (!strcmp(M.name, "kivi2")) kivi2_bits = R.bits;
        for (g = 0; g < n_gen; g++) same += R.gen[g] == ref.gen[g];
        printf("%-11s %6.2f %9.3f %+8.3f %6.1f%% %7.1f  %s", M.name, R.bits, R.ppl,
               R.ppl - ref.ppl, n_gen ? 100.0 * same / n_gen : 0.0, R.tok_s, M.paper);
        if (M.evict) printf(" [%zu tokens]", M.budget);
        printf("\n");
        fflush(stdout);
        if (i) free(R.gen);
        method_free(&M);
    }
    free(ref.gen);
    free(ids);
    return ok ? 0 : 1;
}

static int cmd_generate(model_file *f, const char *prompt, int n_gen, const char *cache)
{
    method M;
    llm_state s;
    int *ids, n, t, next;
    const float *lg = NULL;
    if (!method_make(&M, cache, &f->m.cfg, 256)) return 1;
    if (!(ids = encode(f, prompt, strlen(prompt), &n)) || !state_for(&s, f, &M, 0)) return 1;
    fputs(prompt, stdout);
    for (t = 0; t < n; t++) lg = llm_forward(&f->m, &s, ids[t], t);
    for (t = 0; t < n_gen && lg; t++) {
        size_t blen;
        const char *bytes;
        next = argmax(lg, f->m.cfg.vocab_size);
        bytes = bpe_token_bytes(&f->tok, next, &blen);
        if (bytes) fwrite(bytes, 1, blen, stdout);
        fflush(stdout);
        lg = llm_forward(&f->m, &s, next, n + t);
    }
    printf("\n");
    llm_state_free(&s);
    method_free(&M);
    free(ids);
    return 0;
}

/* Dumps post-RoPE K, V, Q of chosen layers (one KV head) to .npy.          */
static int cmd_dump(model_file *f, const char *text_path, const char *out, const char *layers,
                    int kv_head, int n_tokens)
{
    size_t len;
    char *text = read_file(text_path, &len), prefix[512];
    int *ids, n, t, l, n_rec = 0, rc = 0;
    llm_recorder rec[16];
    llm_state s;
    llm_opts o = llm_opts_default();
    const char *p = layers;
    if (!text) return 1;
    ids = encode(f, text, len, &n);
    free(text);
    if (!ids) return 1;
    if (n > n_tokens) n = n_tokens;
    while (*p && n_rec < 16) {
        l = atoi(p);
        if (llm_recorder_init(&rec[n_rec], &f->m.cfg, l, kv_head, (size_t)n) != KVQ_OK) {
            fprintf(stderr, "dump: bad layer %d or head %d\n", l, kv_head);
            return 1;
        }
        if (n_rec) rec[n_rec - 1].next = &rec[n_rec];
        n_rec++;
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    o.capture = llm_record;
    o.capture_user = &rec[0];
    o.reserve = f->m.cfg.seq_len;
    if (llm_state_init(&s, &f->m, &o) != KVQ_OK) { fprintf(stderr, "%s\n", s.why); return 1; }
    for (t = 0; t < n; t++)
        if (!llm_forward(&f->m, &s, ids[t], t)) { fprintf(stderr, "%s\n", s.why); rc = 1; break; }
    for (l = 0; l < n_rec && !rc; l++) {
        snprintf(prefix, sizeof prefix, "%s/L%d_H%d", out, rec[l].layer, kv_head);
        if (llm_recorder_save(&rec[l], prefix) != KVQ_OK) { fprintf(stderr, "dump: cannot write %s_*.npy\n", prefix); rc = 1; }
        else printf("wrote %s_{K,V,Q}.npy (%zu tokens)\n", prefix, rec[l].n);
    }
    for (l = 0; l < n_rec; l++) llm_recorder_free(&rec[l]);
    llm_state_free(&s);
    free(ids);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
        "usage: llm generate --prompt TEXT [-n N] [--cache METHOD]\n"
        "       llm eval [--text FILE] [--tokens N] [--agree N] [--only m1,m2]\n"
        "       llm dump --out DIR [--text FILE] [--layers 0,5,15] [--head 0] [--tokens N]\n"
        "       common: --model PATH (default " DEFAULT_MODEL ")\n"
        "methods: fp32 kivi4 kivi2 hf4 hf2 kivi2-KtVt kivi2-KcVc kivi2-KtVc ott2 logquant2\n"
        "         streaming h2o snapkv\n");
}

int main(int argc, char **argv)
{
    const char *model = DEFAULT_MODEL, *prompt = "The capital of France is",
               *cache = "fp32", *text = "/usr/share/common-licenses/GPL-3",
               *only = NULL, *out = NULL, *layers = "0,5,15";
    int n_gen = 32, n_tokens = 2048, n_agree = 64, head = 0, i, rc;
    model_file f;
    if (argc < 2) { usage(); return 2; }
    for (i = 2; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(); return 2; }
        if (!strcmp(o, "--model")) model = v;
        else if (!strcmp(o, "--prompt")) prompt = v;
        else if (!strcmp(o, "-n")) n_gen = atoi(v);
        else if (!strcmp(o, "--cache")) cache = v;
        else if (!strcmp(o, "--text")) text = v;
        else if (!strcmp(o, "--tokens")) n_tokens = atoi(v);
        else if (!strcmp(o, "--agree")) n_agree = atoi(v);
        else if (!strcmp(o, "--only")) only = v;
        else if (!strcmp(o, "--out")) out = v;
        else if (!strcmp(o, "--layers")) layers = v;
        else if (!strcmp(o, "--head")) head = atoi(v);
        else { usage(); return 2; }
    }
    if (n_tokens < 2 || n_gen < 0 || n_agree < 0) { usage(); return 2; }
    if (!model_open(&f, model, n_tokens + n_agree + 512)) { model_close(&f); return 1; }
    if (!strcmp(argv[1], "eval")) rc = cmd_eval(&f, text, n_tokens, n_agree, only);
    else if (!strcmp(argv[1], "generate")) rc = cmd_generate(&f, prompt, n_gen, cache);
    else if (!strcmp(argv[1], "dump") && out) rc = cmd_dump(&f, text, out, layers, head, n_tokens);
    else { usage(); rc = 2; }
    model_close(&f);
    return rc;
}
#endif /* LLM_NO_MAIN */
