/* bench/bench_cpu.c - CPU timings of the kvq.h reference implementation.

   A benchmark, never a test: it checks only that every call returns KVQ_OK
   (and exits 1 if one does not). Correctness lives in tests/ and examples/.

       make build/bench/bench_cpu && build/bench/bench_cpu [--record] [--quick]
         --record  also append a dated block to bench/RESULTS.md (run it from
                   the repository root, as `make bench` does)
         --quick   1/16 of the sizes and fewer repetitions: a smoke run that
                   cannot be recorded

   What it measures (bench/RESULTS.md explains every column):
     1. quantize+pack: kvq_quantize_matrix on X (T=65536, D=128) fp32, for
        B in {2, 4}, both axes, G in {32, 128}; GB/s of fp32 input, beside a
        same-run memcpy of the same number of bytes.
     2. decode attention: kvq_attend (ONLINE, n_q = 1, D = 128) over a 2-bit
        KIVI cache (kvq_config_kivi(128, 2): G=32, R=128) and over an fp32
        cache of the same tokens (kvq_config_full(128, 32)), T in {4K, 32K,
        128K}; ms per call and the payload bytes each cache holds.

   Method: CLOCK_MONOTONIC, warm-up calls, then the median of several timed
   repetitions. Single-threaded, like the reference itself. Synthetic N(0,1)
   data from a fixed-seed RNG of our own, so every run times the same work. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime, popen under -std=c99     */
#define KVQ_IMPLEMENTATION
#include "kvq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/utsname.h>

#define RESULTS_PATH "bench/RESULTS.md"

/* ------------------------------------------------------------------------ */
/* timing, RNG, helpers                                                     */
/* ------------------------------------------------------------------------ */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of `reps` timed calls of f(ctx), after `warmup` untimed.  */
typedef void (*bench_fn)(void *ctx);
#define MAX_REPS 64
static double time_median(bench_fn f, void *ctx, int warmup, int reps)
{
    double t[MAX_REPS];
    int i;
    if (reps > MAX_REPS) reps = MAX_REPS;
    for (i = 0; i < warmup; i++) f(ctx);
    for (i = 0; i < reps; i++) {
        double t0 = now_s();
        f(ctx);
        t[i] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return (reps % 2) ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "bench_cpu: out of memory (%zu bytes)\n", n); exit(1); }
    memset(p, 0, n);                  /* touch every page before timing     */
    return p;
}

static void ok_or_die(kvq_status st, const char *what, const kvq_cache *c)
{
    if (st == KVQ_OK) return;
    fprintf(stderr, "bench_cpu: %s failed: %s%s%s\n", what, kvq_status_str(st),
            c ? ": " : "", c ? c->why : "");
    exit(1);
}

/* xorshift64* and Box-Muller: N(0,1) floats, fixed seed, any platform.    */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double rng_uniform(void)                  /* in (0, 1)               */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return ((double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) + 0.5) / 9007199254740992.0;
}
static void fill_normal(float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(rng_uniform())), th = 6.283185307179586 * rng_uniform();
        x[i] = (float)(r * cos(th));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(th));
    }
}

/* ------------------------------------------------------------------------ */
/* 1. quantize+pack vs memcpy                                               */
/* ------------------------------------------------------------------------ */
typedef struct {
    const float *X; size_t T, D, G; int bits; kvq_axis axis;
    uint32_t *words; kvq_sz *sz;
} quant_ctx;

static void run_quantize(void *p)
{
    quant_ctx *q = (quant_ctx *)p;
    ok_or_die(kvq_quantize_matrix(q->X, q->T, q->D, q->bits, q->G, q->axis,
                                  KVQ_ZERO_FLOAT, q->words, q->sz),
              "kvq_quantize_matrix", NULL);
}

typedef struct { void *dst; const void *src; size_t n; } copy_ctx;
static void run_memcpy(void *p)
{
    copy_ctx *c = (copy_ctx *)p;
    memcpy(c->dst, c->src, c->n);   /* dst escapes: the copy cannot be elided */
}

typedef struct { int bits; kvq_axis axis; size_t G; double ms, gbs; } quant_row;

/* ------------------------------------------------------------------------ */
/* 2. decode attention: 2-bit KIVI cache vs fp32 cache                      */
/* ------------------------------------------------------------------------ */
typedef struct {
    const kvq_cache *c; const float *q; float *out; float *scratch; size_t n_scratch;
} attn_ctx;

static void run_attend(void *p)
{
    attn_ctx *a = (attn_ctx *)p;
    ok_or_die(kvq_attend(a->c, a->q, 1, a->out, NULL, KVQ_ATTN_ONLINE,
                         a->scratch, a->n_scratch), "kvq_attend", a->c);
}

typedef struct {
    size_t T; int reps;
    double ms[2];          /* [0] fp32 cache, [1] 2-bit KIVI cache         */
    size_t payload[2];     /* kvq_cache_bytes payload, K and V together    */
} attn_row;

/* Build a cache of T tokens with prefill (reserve first: no allocation
   happens after this), then time one-query online attention over it.     */
static void bench_cache(const kvq_config *cfg, const float *K, const float *V,
                        size_t T, const float *q, float *out, int warmup,
                        int reps, double *ms, size_t *payload)
{
    kvq_cache c;
    kvq_bytes b;
    attn_ctx a;
    ok_or_die(kvq_cache_init(&c, cfg), "kvq_cache_init", &c);
    ok_or_die(kvq_cache_reserve(&c, T), "kvq_cache_reserve", &c);
    ok_or_die(kvq_cache_prefill(&c, K, V, T), "kvq_cache_prefill", &c);
    ok_or_die(kvq_cache_bytes(&c, &b), "kvq_cache_bytes", &c);
    a.c = &c; a.q = q; a.out = out;
    a.n_scratch = kvq_attend_scratch_floats(&c, KVQ_ATTN_ONLINE);
    a.scratch = (float *)xmalloc(a.n_scratch * sizeof(float));
    *ms = 1e3 * time_median(run_attend, &a, warmup, reps);
    *payload = b.payload;
    free(a.scratch);
    kvq_cache_free(&c);
}

/* ------------------------------------------------------------------------ */
/* 3. OTT's outlier competition: the host step the GPU path relies on       */
/* ------------------------------------------------------------------------ */
/* kvq_cuda.cu attends an OTT cache but leaves the competition (G + k L1
   norms, the k smallest, mean replacement: OTT Sec. 3.2) to kvq.h on the
   host. Its cost is what an OTT round costs over a round of the same cache
   with tracing off (ott_k = 0: the same G-token quantization, no pool).
   Returns the median ns of the appends that ran a round (with k > 0, only
   rounds held while tracing was on: it stops once the auxiliary pool is
   full).                                                                   */
static double ott_round_ns(size_t D, size_t k, const float *K, const float *V,
                           size_t T, size_t *rounds)
{
    kvq_cache c;
    kvq_config cfg = kvq_config_ott(D, 2, 5);
    double *ns = (double *)xmalloc((T / 128 + 1) * sizeof(double)), med;
    size_t t, n = 0;
    cfg.ott_k = k;
    ok_or_die(kvq_cache_init(&c, &cfg), "kvq_cache_init", &c);
    ok_or_die(kvq_cache_reserve(&c, T), "kvq_cache_reserve", &c);
    for (t = 0; t < T; t++) {
        size_t units_before = c.k.n_units;
        int tracing = c.ott_tracing;
        double t0 = now_s();
        ok_or_die(kvq_cache_append(&c, K + t * D, V + t * D), "kvq_cache_append", &c);
        t0 = now_s() - t0;
        /* a round ran; with k > 0 count only rounds that traced           */
        if (c.k.n_units != units_before && (k == 0 || tracing) && n <= T / 128)
            ns[n++] = 1e9 * t0;
    }
    kvq_cache_free(&c);
    qsort(ns, n, sizeof(double), cmp_double);   /* the median: this machine is shared */
    med = n ? ns[n / 2] : 0.0;
    free(ns);
    *rounds = n;
    return med;
}

/* ------------------------------------------------------------------------ */
/* machine description for --record                                        */
/* ------------------------------------------------------------------------ */
static void read_cmd(const char *cmd, char *buf, size_t n)
{
    FILE *p = popen(cmd, "r");
    buf[0] = '\0';
    if (p) {
        if (!fgets(buf, (int)n, p)) buf[0] = '\0';
        pclose(p);
    }
    buf[strcspn(buf, "\r\n")] = '\0';
}

static void cpu_model(char *buf, size_t n)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, n, "unknown CPU");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t') v++;
                v[strcspn(v, "\r\n")] = '\0';
                snprintf(buf, n, "%s", v);
            }
            break;
        }
    fclose(f);
}

#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#else
#define COMPILER "unknown compiler"
#endif

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */
int main(int argc, char **argv)
{
    int record = 0, quick = 0, i, j, k;
    const size_t D = 128;
    size_t TQ = 65536, TA[3] = { 4096, 32768, 131072 }, Tmax, nq_rows = 0;
    /* warm-ups and repetitions per attention size, fewer at 128K: a whole
       run takes about 5 s on a 2-core machine (budget: 2 minutes)          */
    int aw[3] = { 3, 2, 1 }, ar[3] = { 31, 15, 9 }, qw = 1, qr = 7;
    quant_row qrows[8];
    attn_row arows[3];
    double copy_ms, copy_gbs;
    float *K, *V, *q, *out;
    struct utsname un;
    char model[256], head[64], dirty[256], compiler[128];
    time_t now = time(NULL);
    char date[64];

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--record") == 0) record = 1;
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else {
            fprintf(stderr, "usage: %s [--record] [--quick]\n", argv[0]);
            return 2;
        }
    }
    if (record && quick) {
        fprintf(stderr, "bench_cpu: --quick results are not recorded\n");
        return 2;
    }
    if (quick) {
        TQ /= 16;
        for (i = 0; i < 3; i++) { TA[i] /= 16; ar[i] = 3; aw[i] = 1; }
        qr = 3;
    }
    Tmax = TA[2];
    cpu_model(model, sizeof model);
    if (uname(&un) != 0) snprintf(un.machine, sizeof un.machine, "unknown");
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    read_cmd("git rev-parse --short HEAD 2>/dev/null", head, sizeof head);
    if (!head[0]) snprintf(head, sizeof head, "unknown");
    read_cmd("git status --porcelain -- kvq.h bench/bench_cpu.c Makefile 2>/dev/null",
             dirty, sizeof dirty);
    snprintf(compiler, sizeof compiler, "%s", COMPILER);
    for (i = (int)strlen(compiler); i > 0 && compiler[i - 1] == ' '; i--)
        compiler[i - 1] = '\0';          /* __clang_version__ ends in a space */

    printf("kvq bench_cpu: %s, %s, %s, commit %s%s\n", un.machine, model, compiler,
           head, dirty[0] ? " (+ uncommitted changes)" : "");
    printf("reference C implementation, single-threaded, not SIMD-optimized%s\n\n",
           quick ? "; --quick sizes" : "");
#ifndef __OPTIMIZE__
    printf("WARNING: built without optimization; use the Makefile's bench rule\n\n");
#endif

    /* ---- 1. quantize+pack ---------------------------------------------- */
    {
        size_t n = TQ * D, bytes = n * sizeof(float);
        float *X = (float *)xmalloc(bytes), *Y = (float *)xmalloc(bytes);
        copy_ctx cc;
        static const int bits[2] = { 2, 4 };
        static const kvq_axis axes[2] = { KVQ_PER_TOKEN, KVQ_PER_CHANNEL };
        static const size_t groups[2] = { 32, 128 };
        fill_normal(X, n);
        cc.dst = Y; cc.src = X; cc.n = bytes;
        copy_ms = 1e3 * time_median(run_memcpy, &cc, 2, 11);
        copy_gbs = (double)bytes / (copy_ms * 1e-3) / 1e9;
        printf("1. quantize+pack: kvq_quantize_matrix, X (T=%zu, D=%zu) fp32 = %.1f MB, "
               "float zero\n   median of %d after %d warm-up; GB/s = fp32 input bytes / time\n",
               TQ, D, (double)bytes / 1e6, qr, qw);
        printf("   baseline memcpy of the same %.1f MB: %.3f ms = %.2f GB/s\n\n",
               (double)bytes / 1e6, copy_ms, copy_gbs);
        printf("   %2s  %-11s %4s  %9s  %7s  %9s\n", "B", "axis", "G", "ms", "GB/s",
               "vs memcpy");
        for (i = 0; i < 2; i++)
            for (j = 0; j < 2; j++)
                for (k = 0; k < 2; k++) {
                    kvq_layout L;
                    quant_ctx qc;
                    quant_row *r = &qrows[nq_rows++];
                    ok_or_die(kvq_layout_init(&L, TQ, D, bits[i], groups[k], axes[j]),
                              "kvq_layout_init", NULL);
                    qc.X = X; qc.T = TQ; qc.D = D; qc.G = groups[k];
                    qc.bits = bits[i]; qc.axis = axes[j];
                    qc.words = (uint32_t *)xmalloc(L.total_words * sizeof(uint32_t));
                    qc.sz = (kvq_sz *)xmalloc(L.total_groups * sizeof(kvq_sz));
                    r->bits = bits[i]; r->axis = axes[j]; r->G = groups[k];
                    r->ms = 1e3 * time_median(run_quantize, &qc, qw, qr);
                    r->gbs = (double)bytes / (r->ms * 1e-3) / 1e9;
                    printf("   %2d  %-11s %4zu  %9.2f  %7.3f  %8.1f%%\n", r->bits,
                           r->axis == KVQ_PER_TOKEN ? "per-token" : "per-channel",
                           r->G, r->ms, r->gbs, 100.0 * r->gbs / copy_gbs);
                    fflush(stdout);
                    free(qc.words);
                    free(qc.sz);
                }
        free(X);
        free(Y);
    }

    /* ---- 2. decode attention ------------------------------------------- */
    K = (float *)xmalloc(Tmax * D * sizeof(float));
    V = (float *)xmalloc(Tmax * D * sizeof(float));
    q = (float *)xmalloc(D * sizeof(float));
    out = (float *)xmalloc(D * sizeof(float));
    fill_normal(K, Tmax * D);
    fill_normal(V, Tmax * D);
    fill_normal(q, D);
    printf("\n2. decode attention: kvq_attend ONLINE, n_q = 1, D = %zu, N(0,1) K, V, q\n"
           "   fp32 = kvq_config_full(128, 32); 2-bit = kvq_config_kivi(128, 2), G=32, R=128\n"
           "   bytes = kvq_cache_bytes payload (K + V); GB/s = bytes / time\n\n", D);
    printf("   %7s  %5s  %10s %10s  %9s  %10s %10s  %7s %7s\n", "T", "reps",
           "fp32 ms", "2-bit ms", "fp32/2b", "fp32 MB", "2-bit MB", "fp32", "2-bit");
    printf("   %7s  %5s  %10s %10s  %9s  %10s %10s  %7s %7s\n", "", "", "", "", "",
           "", "", "GB/s", "GB/s");
    for (i = 0; i < 3; i++) {
        kvq_config full = kvq_config_full(D, 32), kivi = kvq_config_kivi(D, 2);
        attn_row *r = &arows[i];
        r->T = TA[i];
        r->reps = ar[i];
        /* the same first T tokens feed both caches                          */
        bench_cache(&full, K, V, TA[i], q, out, aw[i], ar[i], &r->ms[0], &r->payload[0]);
        bench_cache(&kivi, K, V, TA[i], q, out, aw[i], ar[i], &r->ms[1], &r->payload[1]);
        printf("   %7zu  %5d  %10.3f %10.3f  %8.2fx  %10.2f %10.2f  %7.2f %7.2f\n",
               r->T, r->reps, r->ms[0], r->ms[1], r->ms[0] / r->ms[1],
               r->payload[0] / 1e6, r->payload[1] / 1e6,
               r->payload[0] / (r->ms[0] * 1e-3) / 1e9,
               r->payload[1] / (r->ms[1] * 1e-3) / 1e9);
        fflush(stdout);
    }
    printf("\n   fp32/2b > 1 means the 2-bit cache is faster. The reference attention is\n"
           "   scalar and unpacks 2-bit codes one at a time; it defines results, not speed.\n");

    /* ---- 3. OTT's competition on the host -------------------------------- */
    {
        size_t T3 = quick ? 8192 : 65536, r_on, r_off;
        double on = ott_round_ns(D, 3, K, V, T3, &r_on);
        double off = ott_round_ns(D, 0, K, V, T3, &r_off);
        printf("\n3. OTT round on the host (kvq_config_ott(128, 2, layer 5): G = 128, R = 32,\n"
               "   k = 3, aux 32), median time of the appends that quantize a group, T = %zu\n\n", T3);
        printf("   tracing on  (k = 3): %8.0f ns per traced round (%zu rounds)\n", on, r_on);
        printf("   tracing off (k = 0): %8.0f ns per round (%zu rounds)\n", off, r_off);
        printf("   competition + mean replacement: %.0f ns per round = %.1f ns per token\n",
               on - off, (on - off) / 128.0);
        printf("   (only traced rounds count for k = 3: tracing stops for good once the\n"
               "   auxiliary pool is full, and later rounds cost what k = 0 costs)\n");
    }
    free(K); free(V); free(q); free(out);

    /* ---- --record: append a markdown block ------------------------------ */
    if (record) {
        FILE *f = fopen(RESULTS_PATH, "a");
        if (!f) {
            fprintf(stderr, "bench_cpu: cannot open %s (run from the repository root)\n",
                    RESULTS_PATH);
            return 1;
        }
        fprintf(f, "\n### %s\n\n", date);
        fprintf(f, "- machine: %s, %s (`uname -m`, /proc/cpuinfo); single-threaded\n",
                un.machine, model);
        fprintf(f, "- commit: %s%s\n", head,
                dirty[0] ? " plus uncommitted changes to the measured sources" : "");
        fprintf(f, "- compiler: %s, `-O3 -march=native` (Makefile bench rule)\n", compiler);
        fprintf(f, "- command: `build/bench/bench_cpu --record`\n\n");
        fprintf(f, "Quantize+pack, X (T=%zu, D=%zu) fp32 = %.1f MB, float zero, median of %d "
                   "after %d warm-up. memcpy of the same bytes: %.3f ms = **%.2f GB/s**.\n\n",
                TQ, D, (double)(TQ * D * sizeof(float)) / 1e6, qr, qw, copy_ms, copy_gbs);
        fprintf(f, "| B | axis | G | ms | GB/s | vs memcpy |\n|---|---|---|---|---|---|\n");
        for (i = 0; i < (int)nq_rows; i++)
            fprintf(f, "| %d | %s | %zu | %.2f | %.3f | %.1f%% |\n", qrows[i].bits,
                    qrows[i].axis == KVQ_PER_TOKEN ? "per-token" : "per-channel",
                    qrows[i].G, qrows[i].ms, qrows[i].gbs,
                    100.0 * qrows[i].gbs / copy_gbs);
        fprintf(f, "\nDecode attention, kvq_attend ONLINE, n_q = 1, D = %zu; fp32 = "
                   "`kvq_config_full(128, 32)`, 2-bit = `kvq_config_kivi(128, 2)` "
                   "(G=32, R=128). Bytes = payload of K + V.\n\n", D);
        fprintf(f, "| T | reps | fp32 ms | 2-bit ms | fp32/2-bit | fp32 MB | 2-bit MB | "
                   "bytes ratio | fp32 GB/s | 2-bit GB/s |\n"
                   "|---|---|---|---|---|---|---|---|---|---|\n");
        for (i = 0; i < 3; i++) {
            attn_row *r = &arows[i];
            fprintf(f, "| %zu | %d | %.3f | %.3f | %.2fx | %.2f | %.2f | %.2fx | %.2f | %.2f |\n",
                    r->T, r->reps, r->ms[0], r->ms[1], r->ms[0] / r->ms[1],
                    r->payload[0] / 1e6, r->payload[1] / 1e6,
                    (double)r->payload[0] / (double)r->payload[1],
                    r->payload[0] / (r->ms[0] * 1e-3) / 1e9,
                    r->payload[1] / (r->ms[1] * 1e-3) / 1e9);
        }
        if (fclose(f) != 0) { fprintf(stderr, "bench_cpu: write failed\n"); return 1; }
        printf("\nappended a block to %s\n", RESULTS_PATH);
    }
    return 0;
}
