/* examples/common.h - what every example shares: a seeded RNG, the
   documented synthetic K/V/Q generator, .npy inputs, error metrics, and the
   "ours beside the paper's, PASS/FAIL" report.

   Each example includes kvq.h with KVQ_IMPLEMENTATION, then this file.
   Command line understood by ex_args_parse():
     --k K.npy --v V.npy   real keys/values of one (layer, KV head), (T, D)
     --q Q.npy             real queries for that head, (n, D) (optional, with
                           --k/--v, in the examples that attend: EX_QUERIES)
     --seed N              seed of the synthetic generator (default 1)
     --csv DIR             also write the example's tables as CSV into DIR
   Without --k/--v the synthetic generator below supplies the data.         */
#ifndef KVQ_EXAMPLES_COMMON_H
#define KVQ_EXAMPLES_COMMON_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "npy.h"         /* --k/--v/--q files */

#if defined(__GNUC__) || defined(__clang__)
#define EX_UNUSED __attribute__((unused))   /* not every example uses all */
#else
#define EX_UNUSED
#endif

/* ------------------------------------------------------------------------ */
/* RNG: xorshift64*, and Box-Muller normals. Fixed seeds, so every number an
   example prints is reproducible.                                          */
/* ------------------------------------------------------------------------ */
typedef struct ex_rng { unsigned long long s; } ex_rng;

EX_UNUSED static ex_rng ex_rng_seed(unsigned long long seed)
{
    ex_rng r;
    r.s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (r.s == 0) r.s = 1;
    return r;
}
EX_UNUSED static unsigned long long ex_u64(ex_rng *r)
{
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}
EX_UNUSED static double ex_uniform(ex_rng *r)        /* in (0, 1)                      */
{
    return ((double)(ex_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
EX_UNUSED static double ex_normal(ex_rng *r)
{
    double u1 = ex_uniform(r), u2 = ex_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ------------------------------------------------------------------------ */
/* The synthetic head. Each statistic it builds in is one a paper reports:

   1. Outlier CHANNELS in keys. KIVI Sec. 3.2 (Fig. 2): "for the key cache, a
      few fixed channels whose magnitudes are very large", while "the value
      cache has no obvious outlier pattern". Here n_outlier_channels fixed
      channels carry a large per-channel offset (+-outlier_mag) on top of
      N(0, 1) noise.
   2. Outlier TOKENS. OTT Sec. 3.1 and Appendix F: a few tokens have keys of
      unusually SMALL magnitude in exactly those outlier channels, and they
      draw large attention. Here outlier tokens have their outlier channels
      scaled by 0.05 (near zero).
   3. Attention SINKS. StreamingLLM and OTT Sec. 3.1: the first token (and
      the outlier tokens, which OTT identifies with sinks) receive a large
      share of attention. Token 0 is always an outlier token, and queries
      point AGAINST the outlier channels' offset (q_d = -query_bias * sign),
      so a normal token's score pays -outlier_mag * query_bias per outlier
      channel while an outlier token, small there, does not: the outlier
      tokens out-score the rest, as in the papers.
   4. Values without channel structure (KIVI Sec. 3.2): V ~ N(0, 1) i.i.d.

   The sizes are illustrative, not measured: the papers show the pattern
   (Fig. 2 of KIVI, Fig. 1/6 of OTT), not one distribution to copy.        */
/* ------------------------------------------------------------------------ */
typedef struct ex_synth {
    size_t T, D, n_queries;
    size_t n_outlier_channels;   /* default max(2, D/32)                     */
    double outlier_mag;          /* default 10                               */
    double outlier_token_rate;   /* default 0.01 (plus token 0)              */
    double query_bias;           /* default 1.5                              */
    unsigned long long seed;
} ex_synth;

EX_UNUSED static ex_synth ex_synth_defaults(size_t T, size_t D, unsigned long long seed)
{
    ex_synth s;
    s.T = T; s.D = D; s.n_queries = 16;
    s.n_outlier_channels = D / 32 > 2 ? D / 32 : 2;
    s.outlier_mag = 10.0;
    s.outlier_token_rate = 0.01;
    s.query_bias = 1.5;
    s.seed = seed;
    return s;
}

/* The outlier channels are spread over the head: channel j*D/n + 3.        */
EX_UNUSED static int ex_is_outlier_channel(const ex_synth *s, size_t d, double *sign)
{
    size_t j;
    for (j = 0; j < s->n_outlier_channels; j++)
        if (d == (j * s->D / s->n_outlier_channels + 3) % s->D) {
            if (sign) *sign = (j & 1) ? -1.0 : 1.0;
            return 1;
        }
    return 0;
}

/* K, V: (T, D); Q: (n_queries, D); is_outlier_token: (T) or NULL.         */
EX_UNUSED static void ex_synth_make(const ex_synth *s, float *K, float *V, float *Q,
                          unsigned char *is_outlier_token)
{
    ex_rng r = ex_rng_seed(s->seed);
    size_t t, d;
    for (t = 0; t < s->T; t++) {
        int outlier = t == 0 || ex_uniform(&r) < s->outlier_token_rate;
        if (is_outlier_token) is_outlier_token[t] = (unsigned char)outlier;
        for (d = 0; d < s->D; d++) {
            double sign, k = ex_normal(&r);
            if (ex_is_outlier_channel(s, d, &sign))
                k = outlier ? 0.05 * (k + sign * s->outlier_mag)
                            : k + sign * s->outlier_mag;
            K[t * s->D + d] = (float)k;
            V[t * s->D + d] = (float)ex_normal(&r);
        }
    }
    for (t = 0; t < s->n_queries; t++)
        for (d = 0; d < s->D; d++) {
            double sign, q = ex_normal(&r);
            if (ex_is_outlier_channel(s, d, &sign)) q -= sign * s->query_bias;
            Q[t * s->D + d] = (float)q;
        }
}

/* ------------------------------------------------------------------------ */
/* Command line and inputs                                                  */
/* ------------------------------------------------------------------------ */
static const char *ex_csv_dir;   /* --csv DIR, or NULL (see "CSV tables")    */
static int ex_csv_files;         /* tables written, reported by ex_finish    */

typedef struct ex_args {
    const char *k_path, *v_path, *q_path, *csv_dir;
    unsigned long long seed;
} ex_args;

/* Which options an example takes: --q only where it attends (01 does not),
   so the usage line offers exactly what the example uses.                 */
typedef enum ex_opts { EX_NO_QUERIES = 0, EX_QUERIES = 1 } ex_opts;

/* Where the usage line and the command line's complaints go: stderr, or a
   file a test points ex_cli_out at to read them back.                     */
static FILE *ex_cli_out;
#define EX_CLI (ex_cli_out ? ex_cli_out : stderr)

EX_UNUSED static void ex_usage(const char *prog, ex_opts opts)
{
    fprintf(EX_CLI, "usage: %s [--k K.npy --v V.npy%s] [--seed N] [--csv DIR]\n"
                    "  K, V: (T, D) float32/float16 .npy of one (layer, KV head);%s\n"
                    "  Without --k/--v a documented synthetic head is used.\n", prog,
            opts == EX_QUERIES ? " [--q Q.npy]" : "", opts == EX_QUERIES ? " Q: (n, D)." : "");
}

EX_UNUSED static int ex_args_parse(int argc, char **argv, ex_args *a, ex_opts opts)
{
    int i;
    memset(a, 0, sizeof *a);
    a->seed = 1;
    for (i = 1; i < argc; i += 2) {           /* every option takes a value */
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) { ex_usage(argv[0], opts); exit(0); }
        if (!val) {
            fprintf(EX_CLI, "%s: %s needs a value\n", argv[0], o);
            ex_usage(argv[0], opts);
            return 0;
        }
        if (!strcmp(o, "--k")) a->k_path = val;
        else if (!strcmp(o, "--v")) a->v_path = val;
        else if (!strcmp(o, "--q") && opts == EX_QUERIES) a->q_path = val;
        else if (!strcmp(o, "--csv")) a->csv_dir = ex_csv_dir = val;
        else if (!strcmp(o, "--seed")) {
            char *end;
            a->seed = strtoull(val, &end, 10);     /* digits only, no sign */
            if (end == val || *end != '\0' || val[0] == '-' || val[0] == '+') {
                fprintf(EX_CLI, "%s: --seed: '%s' is not a whole number\n", argv[0], val);
                return 0;
            }
        } else {
            fprintf(EX_CLI, "%s: unknown option '%s'\n", argv[0], o);
            ex_usage(argv[0], opts);
            return 0;
        }
    }
    if (!a->k_path != !a->v_path) {
        fprintf(EX_CLI, "%s: --k and --v go together\n", argv[0]);
        return 0;
    }
    if (a->q_path && !a->k_path) {            /* the usage nests it: [--q] */
        fprintf(EX_CLI, "%s: --q goes with --k and --v (the synthetic head makes its own "
                "queries)\n", argv[0]);
        return 0;
    }
    return 1;
}

/* One head's data, from .npy files or from the generator.                  */
typedef struct ex_head {
    float *K, *V, *Q;            /* (T, D), (T, D), (n_q, D)                 */
    unsigned char *outlier_tok;  /* (T) synthetic ground truth, or NULL      */
    size_t T, D, n_q;
    int real;                    /* 1 when loaded from files                 */
} ex_head;

EX_UNUSED static void ex_head_free(ex_head *h)
{
    free(h->K); free(h->V); free(h->Q); free(h->outlier_tok);
    memset(h, 0, sizeof *h);
}

EX_UNUSED static float *ex_load_2d(const char *path, size_t *rows, size_t *cols)
{
    npy_array a;
    kvq_status st = npy_load(path, &a);
    float *out;
    if (st != KVQ_OK) {
        fprintf(stderr, "%s: %s\n", path, kvq_status_str(st));
        return NULL;
    }
    if (a.ndim != 2) {
        fprintf(stderr, "%s: expected a 2-D (tokens, head_dim) array, got %d dims\n",
                path, a.ndim);
        npy_free(&a);
        return NULL;
    }
    *rows = a.shape[0]; *cols = a.shape[1];
    out = (float *)malloc(a.count * sizeof(float));
    if (out) memcpy(out, a.data, a.count * sizeof(float));
    npy_free(&a);
    return out;
}

/* Loads --k/--v/--q, or generates T x D synthetic data. Returns 0 on error. */
EX_UNUSED static int ex_head_get(const ex_args *a, size_t T, size_t D, ex_head *h)
{
    memset(h, 0, sizeof *h);
    if (a->k_path) {
        size_t tv, dv, dq;
        h->K = ex_load_2d(a->k_path, &h->T, &h->D);
        h->V = h->K ? ex_load_2d(a->v_path, &tv, &dv) : NULL;
        if (!h->K || !h->V) { ex_head_free(h); return 0; }
        if (tv != h->T || dv != h->D) {
            fprintf(stderr, "K is (%zu, %zu) but V is (%zu, %zu)\n", h->T, h->D, tv, dv);
            ex_head_free(h);
            return 0;
        }
        if (a->q_path) {
            h->Q = ex_load_2d(a->q_path, &h->n_q, &dq);
            if (!h->Q || dq != h->D) {
                fprintf(stderr, "Q must be (n, %zu)\n", h->D);
                ex_head_free(h);
                return 0;
            }
        } else {        /* no queries given: use the last 16 keys as probes */
            h->n_q = h->T < 16 ? h->T : 16;
            h->Q = (float *)malloc(h->n_q * h->D * sizeof(float));
            if (!h->Q) { ex_head_free(h); return 0; }
            memcpy(h->Q, h->K + (h->T - h->n_q) * h->D, h->n_q * h->D * sizeof(float));
        }
        h->real = 1;
        return 1;
    } else {
        ex_synth s = ex_synth_defaults(T, D, a->seed);
        h->T = T; h->D = D; h->n_q = s.n_queries;
        h->K = (float *)malloc(T * D * sizeof(float));
        h->V = (float *)malloc(T * D * sizeof(float));
        h->Q = (float *)malloc(h->n_q * D * sizeof(float));
        h->outlier_tok = (unsigned char *)malloc(T);
        if (!h->K || !h->V || !h->Q || !h->outlier_tok) { ex_head_free(h); return 0; }
        ex_synth_make(&s, h->K, h->V, h->Q, h->outlier_tok);
        return 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Metrics                                                                  */
/* ------------------------------------------------------------------------ */
/* ||A - B||_F / ||A||_F over n values (KIVI Table 2's "relative error").   */
EX_UNUSED static double ex_rel_err(const float *A, const float *B, size_t n)
{
    double num = 0, den = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = (double)A[i] - (double)B[i];
        num += d * d;
        den += (double)A[i] * (double)A[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* max |A - B| over n values.                                              */
EX_UNUSED static double ex_max_abs_diff(const float *A, const float *B, size_t n)
{
    double m = 0;
    size_t i;
    for (i = 0; i < n; i++)
        if (fabs((double)A[i] - (double)B[i]) > m) m = fabs((double)A[i] - (double)B[i]);
    return m;
}

/* ------------------------------------------------------------------------ */
/* Report: one line per claim, "ours  paper  PASS/FAIL", and a summary.     */
/* ------------------------------------------------------------------------ */
static int ex_failures, ex_checks;

/* Prints one checked claim. ok decides PASS/FAIL; the text says what was
   compared and against which figure or rule.                              */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))     /* the compiler checks the args */
#endif
EX_UNUSED static int ex_check(int ok, const char *fmt, ...)
{
    va_list ap;
    ex_checks++;
    if (!ok) ex_failures++;
    printf("  [%s] ", ok ? "PASS" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    return ok;
}

/* A claim this head cannot decide: the data lack the structure the paper's
   claim rests on (no outlier channels, a head shorter than one group, the
   queried tokens all in the full-precision window). Prints "[n/a] reason"
   instead of deciding on noise; counted apart, never a failure.           */
static int ex_nas;
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
EX_UNUSED static void ex_na(const char *fmt, ...)
{
    va_list ap;
    ex_nas++;
    printf("  [n/a] ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* Exit status of main: non-zero if any claim failed. (The ", K n/a" part
   appears only in examples that call ex_na.)                              */
EX_UNUSED static int ex_finish(const char *name)
{
    if (ex_csv_files)
        printf("%s: wrote %d CSV tables to %s/\n", name, ex_csv_files, ex_csv_dir);
    if (ex_nas)
        printf("%s: %d checks, %d FAIL, %d n/a -> %s\n", name, ex_checks, ex_failures,
               ex_nas, ex_failures ? "FAIL" : "PASS");
    else
        printf("%s: %d checks, %d FAIL -> %s\n", name, ex_checks, ex_failures,
               ex_failures ? "FAIL" : "PASS");
    return ex_failures ? 1 : 0;
}

/* Dies with the status and the cache's reason: examples stop on errors.    */
EX_UNUSED static void ex_must(kvq_status st, const char *what, const kvq_cache *c)
{
    if (st == KVQ_OK) return;
    fprintf(stderr, "%s: %s%s%s\n", what, kvq_status_str(st),
            c ? " - " : "", c ? kvq_why() : "");
    exit(2);
}

/* The largest divisor of D that is at most G (G itself when it divides).  */
EX_UNUSED static size_t ex_divisor_at_most(size_t D, size_t G)
{
    size_t g = G < D ? G : D;
    while (g > 1 && D % g) g--;
    return g;
}

/* kvq_cache_init for a head of any D: a per-token group (the paper's G,
   e.g. 32 or 64) that does not divide this head's D becomes the largest
   divisor of D below it, with a note printed once per change, so every
   example runs on real heads (D = 8 ... 128) as well as the synthetic one.
   Per-channel groups run along tokens and never depend on D.              */
EX_UNUSED static kvq_status ex_cache_init(kvq_cache *c, const kvq_config *cfg_in)
{
    static size_t noted[8][2];
    static int n_noted;
    kvq_config cfg = *cfg_in;
    size_t D = cfg.head_dim, *fields[2], i, k;
    int quantized[2], per_token[2];
    quantized[0] = cfg.policy != KVQ_POLICY_FULL &&
                   !(cfg.policy == KVQ_POLICY_CUSTOM && cfg.key_schedule == KVQ_SCHED_NONE);
    quantized[1] = cfg.policy != KVQ_POLICY_FULL &&
                   !(cfg.policy == KVQ_POLICY_CUSTOM && cfg.value_schedule == KVQ_SCHED_NONE);
    per_token[0] = cfg.key_axis == KVQ_PER_TOKEN;
    per_token[1] = cfg.value_axis == KVQ_PER_TOKEN;
    if (quantized[1] && per_token[1] && cfg.value_group == 0) cfg.value_group = cfg.group;
    fields[0] = &cfg.group;
    fields[1] = &cfg.value_group;
    for (i = 0; i < 2; i++) {
        size_t G = *fields[i], fit;
        if (!quantized[i] || !per_token[i] || G == 0 || D == 0 || D % G == 0) continue;
        fit = ex_divisor_at_most(D, G);
        *fields[i] = fit;
        for (k = 0; k < (size_t)n_noted && (noted[k][0] != G || noted[k][1] != D); k++) {}
        if (k == (size_t)n_noted && n_noted < 8) {
            noted[n_noted][0] = G; noted[n_noted][1] = D; n_noted++;
            printf("   note: per-token G = %zu does not divide this head's D = %zu: "
                   "using G = %zu\n", G, D, fit);
        }
    }
    if (cfg.policy == KVQ_POLICY_OTT && cfg.ott_k >= cfg.group && cfg.group > 1)
        cfg.ott_k = cfg.group - 1;                  /* k < G (kvq.h Sec. 7.1) */
    return kvq_cache_init(c, &cfg);
}

/* malloc that stops the example (exit 2) when memory runs out.            */
EX_UNUSED static void *ex_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of memory (%zu bytes)\n", bytes); exit(2); }
    return p;
}

/* A cache of cfg fed with K, V (T, D) as a model would: the first n_prefill
   tokens as one prompt (the policy's prefill rule), the rest one decode step
   at a time (its step rule); kvq_cache_check after the last. Stops on error. */
EX_UNUSED static void ex_cache_stream(kvq_cache *c, const kvq_config *cfg, const float *K,
                                      const float *V, size_t T, size_t n_prefill)
{
    size_t t, D = cfg->head_dim;
    ex_must(ex_cache_init(c, cfg), "kvq_cache_init", c);
    ex_must(kvq_cache_reserve(c, T), "reserve", c);
    if (n_prefill > 0) ex_must(kvq_cache_prefill(c, K, V, n_prefill), "prefill", c);
    for (t = n_prefill; t < T; t++)
        ex_must(kvq_cache_append(c, K + t * D, V + t * D), "append", c);
    ex_must(kvq_cache_check(c), "kvq_cache_check", c);
}

/* KIVI Sec. 3.2 (Fig. 2): keys have "a few fixed channels whose magnitudes
   are very large". The test used by the examples: the largest per-channel
   mean |k| over the median one's, K (T, D). At or above EX_OUTLIER_RATIO the
   head has outlier channels (synthetic 12.4, a real SmolLM2 head 8.0); below,
   a claim that rests on them is n/a (the first 8 channels of that head: 1.07). */
#define EX_OUTLIER_RATIO 4.0
EX_UNUSED static double ex_outlier_ratio(const float *K, size_t T, size_t D)
{
    double *m = (double *)calloc(D ? D : 1, sizeof(double)), r;
    size_t t, d, j;
    if (!m) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (t = 0; t < T; t++)
        for (d = 0; d < D; d++) m[d] += fabs((double)K[t * D + d]);
    for (d = 1; d < D; d++)                      /* insertion sort, ascending */
        for (j = d; j > 0 && m[j - 1] > m[j]; j--) { r = m[j]; m[j] = m[j - 1]; m[j - 1] = r; }
    r = D && m[D / 2] > 0 ? m[D - 1] / m[D / 2] : 0;
    free(m);
    return r;
}

/* ------------------------------------------------------------------------ */
/* CSV tables (--csv DIR): the data behind plots/. One file per table, a
   header line, then one line per row; numbers in C's "%.9g" spelling so a
   float survives the round trip. Without --csv every call below is a no-op
   (ex_csv_open returns NULL and the others accept NULL), so an example
   writes its tables unconditionally. A DIR that cannot be written is an
   error: the user asked for the files.                                    */
/* ------------------------------------------------------------------------ */
/* Opens DIR/name and writes the header line; NULL when --csv was not given. */
EX_UNUSED static FILE *ex_csv_open(const char *name, const char *header)
{
    char path[1024];
    FILE *f;
    if (!ex_csv_dir) return NULL;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", ex_csv_dir, name) >= sizeof path) {
        fprintf(stderr, "--csv: path too long: %s/%s\n", ex_csv_dir, name);
        exit(2);
    }
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "--csv: cannot write %s (does the directory exist?)\n", path);
        exit(2);
    }
    fprintf(f, "%s\n", header);
    return f;
}

/* One row: fmt without the newline.                                       */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
EX_UNUSED static void ex_csv_row(FILE *f, const char *fmt, ...)
{
    va_list ap;
    if (!f) return;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
}

/* Closes a table; a failed write (disk full) is an error like a failed open. */
EX_UNUSED static void ex_csv_close(FILE *f)
{
    if (!f) return;
    if (ferror(f) | fclose(f)) {
        fprintf(stderr, "--csv: write error in %s\n", ex_csv_dir);
        exit(2);
    }
    ex_csv_files++;
}

/* ------------------------------------------------------------------------ */
/* shared helpers added for 04-06                                           */
/* ------------------------------------------------------------------------ */
/* kvq_attend with its own scratch: out (n_q, D), probs (n_q, n_pos) or
   NULL. Stops the example on error.                                        */
EX_UNUSED static void ex_attend(const kvq_cache *c, const float *q, size_t n_q, float *out,
                                float *probs, kvq_attn_mode mode)
{
    size_t n = kvq_attend_scratch_floats(c, mode);
    float *work = (float *)ex_alloc(n * sizeof(float));
    ex_must(kvq_attend(c, q, n_q, out, probs, mode, work, n), "kvq_attend", c);
    free(work);
}

/* A claim "ours is lower than base" (an error, a loss), decided with a
   stated relative margin m: PASS when ours <= (1 - m) base, FAIL when
   ours >= (1 + m) base; in between the two numbers are too close for one
   head to order them, and the line prints [n/a] (ex_na) with the ratio
   instead of a verdict decided by noise. Equal numbers are never a PASS.
   Returns 1 PASS, 0 FAIL, -1 n/a.                                          */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
EX_UNUSED static int ex_check_lower(double ours, double base, double m, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    double r = base > 0 ? ours / base : ours > 0 ? HUGE_VAL : 1.0;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (r > 1 - m && r < 1 + m) {
        ex_na("%s: ratio %.3f, within 1 +- %.2f, too close to order", text, r, m);
        return -1;
    }
    ex_check(r <= 1 - m, "%s: ratio %.3f (margin %.2f)", text, r, m);
    return r <= 1 - m;
}

/* KIVI Table 1's "fake quantization": X (T, D) quantized along one axis in
   groups of G (float zero) and read back into Xq (T, D); X == Xq is fine. */
EX_UNUSED static void ex_fake_quant(const float *X, size_t T, size_t D, int bits, size_t G,
                                    kvq_axis axis, float *Xq)
{
    kvq_layout L;
    uint32_t *w;
    kvq_sz *sz;
    ex_must(kvq_layout_init(&L, T, D, bits, G, axis), "layout", NULL);
    w = (uint32_t *)ex_alloc(L.total_words * sizeof *w);
    sz = (kvq_sz *)ex_alloc(L.total_groups * sizeof *sz);
    ex_must(kvq_quantize_matrix(X, T, D, bits, G, axis, KVQ_ZERO_FLOAT, w, sz), "quantize", NULL);
    ex_must(kvq_dequantize_matrix(w, sz, T, D, bits, G, axis, KVQ_ZERO_FLOAT, Xq), "dequantize",
            NULL);
    free(w); free(sz);
}

/* OTT Fig. 1(c)'s experiment: K quantized per-channel in groups of G tokens,
   V per-token in groups of vg channels, `bits` bits, except the rows flagged
   in keep, which stay exact and take no part in their key group: each
   group's scale and zero come from its other rows alone. An OTT cache gets
   the same scale and zero by writing a mean over the kept rows first
   (kvq.h Sec. 7.1, KVQ_OTT_MEAN_REST: a mean of the other rows lies inside
   every channel's range of them), so this is its rule on rows we choose,
   through the public matrix quantizer. K, V, Kq, Vq: (T, D), G | T; keep (T). */
EX_UNUSED static void ex_fake_quant_keep(const float *K, const float *V, size_t T, size_t D,
                                         size_t G, size_t vg, int bits,
                                         const unsigned char *keep, float *Kq, float *Vq)
{
    float *rest = (float *)ex_alloc(G * D * sizeof(float));         /* (n, D) */
    size_t t, b, n;
    memcpy(Kq, K, T * D * sizeof(float));
    for (b = 0; b < T; b += G) {                 /* one key group (G, D)     */
        for (t = 0, n = 0; t < G; t++)           /* its rows that are not kept */
            if (!keep[b + t]) memcpy(rest + n++ * D, K + (b + t) * D, D * sizeof(float));
        if (n == 0) continue;                    /* all kept: nothing to quantize */
        ex_fake_quant(rest, n, D, bits, n, KVQ_PER_CHANNEL, rest);
        for (t = 0, n = 0; t < G; t++)
            if (!keep[b + t]) memcpy(Kq + (b + t) * D, rest + n++ * D, D * sizeof(float));
    }
    ex_fake_quant(V, T, D, bits, vg, KVQ_PER_TOKEN, Vq);
    for (t = 0; t < T; t++)                      /* kept values are exact    */
        if (keep[t]) memcpy(Vq + t * D, V + t * D, D * sizeof(float));
    free(rest);
}

#endif /* KVQ_EXAMPLES_COMMON_H */
