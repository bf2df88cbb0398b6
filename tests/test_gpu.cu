/* tests/test_gpu.cu - kvq_cuda.cu against kvq.h on the same inputs (make test-gpu).

   Needs a CUDA GPU, except `test_gpu --host` (the walk below, on the CPU).
   Each check has an independent expectation:
     walk       (host) the kernel's item plan and staging offsets, replayed
                on the CPU over exported caches: exactly the cache's live
                rows, and attention over them equal to the oracle
     fragment   (host) the tensor-core fragment order (kvq_cuda.cu Sec. 7):
                every code where the PTX ISA's MMA tables put it, and
                emulated MMAs equal to float64 sums over kvq.h's rows
     quantize   codes and fp16 scales/zeros byte-identical to
                kvq_quantize_matrix on the same fp16 values; the same status
                on bad data; nothing written on failure (outputs poisoned);
                with the generic kernel and (G = 32) the fixed-shape one.
     attention  relative L2 error per output row against a float64 oracle
                (kvq_attend_dense) over the rows the CPU cache holds
                (kvq_cache_read), <= ATTN_TOL; outputs poisoned before.
     compaction the CPU's kvq_pseq_repack/holefill on a real pool vs the GPU
                applying the same moves (planned on a shadow pool) in place.
     rotation   rows bit-identical to kvq_rotate (every kind, D 1..4096, fp32
                and fp16); rotated-then-quantized codes byte-identical to a
                rotating cache's; rotate q, attend, rotate the output back
                within ATTN_TOL of the oracle and of kvq_attend; refusals.
     formats    (attend-format) every kvq_config_engine preset and HF's
                per-token caches in the token layout, each row within
                FMT_TOL of kvq_attend; refusals. (fp8-cvt) the hardware
                FP8 conversion (or the emulator's model of it) against
                the software rounding, NaN skipped: boundaries, the fp32
                line (all 2^32 patterns on a GPU), and on the emulator's
                CPU every pattern where a rounding happens.
   Fixed seed, fresh random inputs for every case, adversarial cases.     */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#define KVQ_CUDA_DECLARE_ONLY        /* the kernels come from build/kvq_cuda.o */
#include "kvq_cuda.cu"
#include "test.h"

#include <vector>
#include <float.h>
#include <algorithm>
#include <string>

/* Attention tolerance: fp32 accumulation over <= 64K tokens, the score
   scaled by log2(e) for exp2, and the 1 + c/2^B code trick (a constant
   subtracted per channel) keep the relative L2 error of an output row
   near 1e-6 in practice; 1e-4 leaves room without hiding a wrong term
   (a single missing or doubled token moves a row by far more).         */
#define ATTN_TOL 1e-4

/* KVQ_TEST_QUICK=1 (set for the compute-sanitizer runs, which are ~50x
   slower): the same cases with shorter streams and no large matrices.     */
static bool quick_mode;

#define CU(call)                                                              \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            printf("FAIL %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,    \
                   cudaGetErrorString(e_), kvq_cuda_why());                   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
/* ... and a kvq_cuda call (kvq_status, reason in kvq_cuda_why())         */
#define KQ(call)                                                              \
    do {                                                                      \
        kvq_status s_ = (call);                                               \
        if (s_ != KVQ_OK) {                                                   \
            printf("FAIL %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,    \
                   kvq_status_str(s_), kvq_cuda_why());                       \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
/* a refusal: the expected status, a reason, nothing launched              */
static bool refused_with(kvq_status got, kvq_status want)
{
    return got == want && kvq_cuda_why()[0];
}

/* ---- RNG (splitmix64), Gaussian by Box-Muller ----------------------------- */
static uint64_t rng_state = 0x6b7671ull;
static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static float rng_gauss(void)
{
    double u = rng_unif(), v = rng_unif();
    if (u < 1e-300) u = 1e-300;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}
static size_t rng_below(size_t n) { return (size_t)(rng_u64() % n); }

template <class T> struct dbuf {               /* a device array, freed at scope end */
    T *p = nullptr;
    size_t n = 0;
    explicit dbuf(size_t count) : n(count) { CU(cudaMalloc(&p, (count ? count : 1) * sizeof(T))); }
    ~dbuf() { cudaFree(p); }
    void up(const T *h) { CU(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice)); }
    void down(T *h) const { CU(cudaMemcpy(h, p, n * sizeof(T), cudaMemcpyDeviceToHost)); }
    void poison() { CU(cudaMemset(p, 0xAB, n * sizeof(T))); }
};

/* ======================================================================== */
/* quantize + pack                                                          */
/* ======================================================================== */
/* Input families: plain Gaussian with outlier channels, constant groups,
   extremes (largest/smallest fp16, +-0), and ties at low B.             */
enum { IN_GAUSS, IN_CONST, IN_EXTREME, IN_TIES, IN_NAN, IN_INF, IN_HUGE };

static void fill_input(std::vector<kvq_f16> &h, size_t T, size_t D, int kind)
{
    for (size_t t = 0; t < T; t++)
        for (size_t d = 0; d < D; d++) {
            float x = rng_gauss() * (d % 17 == 3 ? 12.0f : 1.0f);   /* outlier channels */
            if (kind == IN_CONST) x = (d / 8) % 3 == 0 ? 0.5f * (float)(d % 5) - 1.0f : x;
            if (kind == IN_CONST && (t / 4) % 2 == 0) x = -3.25f;  /* whole blocks const */
            if (kind == IN_EXTREME) {
                static const float ex[] = { 65504.0f, -65504.0f, 5.9604645e-08f, -5.9604645e-08f,
                                            0.0f, -0.0f, 6.1035156e-05f, 1.0f };
                x = ex[rng_below(8)];
            }
            if (kind == IN_TIES) x = 0.5f * (float)((int)rng_below(9) - 4);
            h[t * D + d] = kvq_f32_to_f16(x);
        }
    if (kind == IN_NAN) h[rng_below(T * D)] = 0x7E00;
    if (kind == IN_INF) h[rng_below(T * D)] = 0xFC00;
    if (kind == IN_HUGE)      /* range 131008 overflows an fp16 scale at B = 1 */
        for (size_t d = 0; d < D; d++) { h[d] = kvq_f32_to_f16(65504.0f); h[(T - 1) * D + d] = kvq_f32_to_f16(-65504.0f); }
}

static void test_quantize_case(size_t T, size_t D, int bits, size_t G, kvq_axis axis,
                               kvq_zero_mode mode, int kind, bool scatter, int validate = 1)
{
    kvq_layout L;
    if (kvq_layout_init(&L, T, D, bits, G, axis) != KVQ_OK) { CHECK(0, "bad case"); return; }
    std::vector<kvq_f16> hx(T * D);
    fill_input(hx, T, D, kind);
    std::vector<float> fx(T * D);
    for (size_t i = 0; i < T * D; i++) fx[i] = kvq_f16_to_f32(hx[i]);
    std::vector<uint32_t> cw(L.total_words, 0xCDCDCDCDu);
    std::vector<kvq_sz> cs(L.total_groups);
    memset(cs.data(), 0xCD, cs.size() * sizeof(kvq_sz));
    const kvq_status want = kvq_quantize_matrix(fx.data(), T, D, bits, G, axis, mode,
                                                cw.data(), cs.data());
    /* scatter: unit u goes to unit slot perm[u] of a larger output        */
    const size_t n_out = scatter ? L.units + 3 : L.units;
    std::vector<int32_t> perm(L.units);
    for (size_t u = 0; u < L.units; u++) perm[u] = (int32_t)u;
    if (scatter) {
        for (size_t u = 0; u < L.units; u++) perm[u] = (int32_t)(u + 3);
        std::reverse(perm.begin(), perm.end());
    }
    const size_t wpu = L.geom.groups_per_unit * L.geom.words_per_group;
    dbuf<__half> dx(T * D);
    dbuf<uint32_t> dw(n_out * wpu);
    dbuf<kvq_sz> ds(n_out * L.geom.groups_per_unit);
    dbuf<int32_t> dp(L.units);
    dbuf<int> dst(1);
    dx.up(reinterpret_cast<const __half *>(hx.data()));
    dp.up(perm.data());
    dw.poison(); ds.poison();
    KQ(kvq_cuda_quantize(dx.p, T, D, bits, G, axis, mode, scatter ? dp.p : nullptr,
                         dw.p, ds.p, dst.p, validate, 0));
    const int got = (int)kvq_cuda_status(dst.p, 0);
    std::vector<uint32_t> gw(n_out * wpu);
    std::vector<kvq_sz> gs(n_out * L.geom.groups_per_unit);
    dw.down(gw.data()); ds.down(gs.data());
    CHECK(got == (int)want, "quantize T=%zu D=%zu B=%d G=%zu axis=%d mode=%d kind=%d: "
          "status %d, CPU %d", T, D, bits, G, (int)axis, (int)mode, kind, got, (int)want);
    if (want != KVQ_OK) {                 /* nothing may have been written */
        size_t touched = 0;
        for (size_t i = 0; i < gw.size(); i++) touched += gw[i] != 0xABABABABu;
        CHECK(touched == 0, "quantize wrote %zu words on failure", touched);
        return;
    }
    size_t bad_w = 0, bad_s = 0;
    for (size_t u = 0; u < L.units; u++) {
        const size_t o = (size_t)perm[u];
        bad_w += memcmp(&gw[o * wpu], &cw[u * wpu], wpu * 4) != 0;
        bad_s += memcmp(&gs[o * L.geom.groups_per_unit], &cs[u * L.geom.groups_per_unit],
                        L.geom.groups_per_unit * sizeof(kvq_sz)) != 0;
    }
    CHECK(bad_w == 0 && bad_s == 0, "quantize T=%zu D=%zu B=%d G=%zu axis=%d mode=%d kind=%d "
          "scatter=%d validate=%d: %zu units with other codes, %zu with other scales/zeros", T, D,
          bits, G, (int)axis, (int)mode, kind, (int)scatter, validate, bad_w, bad_s);
    if (scatter) {                        /* slots no unit maps to stay poisoned */
        size_t touched = 0;
        for (size_t o = 0; o < 3; o++)
            for (size_t i = 0; i < wpu; i++) touched += gw[o * wpu + i] != 0xABABABABu;
        CHECK(touched == 0, "quantize scatter wrote %zu words outside its units", touched);
    }
}

static void test_quantize(void)
{
    const int bits_list[] = { 1, 2, 4, 8 };
    const kvq_zero_mode modes[] = { KVQ_ZERO_FLOAT, KVQ_ZERO_INT };
    for (int bi = 0; bi < 4; bi++)
        for (int mi = 0; mi < 2; mi++)
            for (int kind = IN_GAUSS; kind <= IN_HUGE; kind++) {
                const int b = bits_list[bi];
                const kvq_zero_mode m = modes[mi];
                /* per-token: any T; G need not fill whole words (48 at B=1) */
                test_quantize_case(1 + rng_below(300), 128, b, 32, KVQ_PER_TOKEN, m, kind, false);
                test_quantize_case(37, 96, b, 48, KVQ_PER_TOKEN, m, kind, false);
                test_quantize_case(200, 64, b, 64, KVQ_PER_TOKEN, m, kind, kind == IN_GAUSS);
                test_quantize_case(1 + rng_below(100), 128, b, 128, KVQ_PER_TOKEN, m, kind, false);
                /* per-channel: T a multiple of G                            */
                test_quantize_case(32 * (1 + rng_below(9)), 128, b, 32, KVQ_PER_CHANNEL, m, kind,
                                   kind == IN_GAUSS);
                test_quantize_case(256, 128, b, 128, KVQ_PER_CHANNEL, m, kind, false);
                test_quantize_case(96, 64, b, 48, KVQ_PER_CHANNEL, m, kind, false);
            }
    /* a large matrix: many blocks, the grid-stride loop                   */
    if (!quick_mode) test_quantize_case(65536, 128, 2, 32, KVQ_PER_CHANNEL, KVQ_ZERO_FLOAT, IN_GAUSS, false);
    if (!quick_mode) test_quantize_case(40000, 128, 4, 128, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, IN_GAUSS, false);

    /* bad arguments: caught on the host, nothing launched or written      */
    dbuf<__half> dx(256 * 128);
    dbuf<uint32_t> dw(256 * 128);
    dbuf<kvq_sz> ds(256 * 128);
    dbuf<int> dst(1);
    dw.poison();
    /* each refusal with kvq.h's status for the fault (kvq_layout_init's) */
    struct { size_t T, D; int b; size_t G; kvq_axis ax; kvq_status want; const char *what; } bad[] = {
        { 256, 128, 5, 32, KVQ_PER_TOKEN, KVQ_ERR_BITS, "bits=5" },
        { 256, 128, 2, 48, KVQ_PER_TOKEN, KVQ_ERR_GROUP, "G=48 does not divide D=128" },
        { 100, 128, 2, 32, KVQ_PER_CHANNEL, KVQ_ERR_GROUP, "G=32 does not divide T=100" },
        { 0, 128, 2, 32, KVQ_PER_TOKEN, KVQ_ERR_SIZE, "T=0" },
        { 256, 0, 2, 32, KVQ_PER_TOKEN, KVQ_ERR_SIZE, "D=0" },
        { (size_t)1 << 62, 128, 2, 32, KVQ_PER_TOKEN, KVQ_ERR_OVERFLOW, "T*D overflows" },
    };
    for (auto &c : bad) {
        kvq_layout L;
        CHECK(kvq_layout_init(&L, c.T, c.D, c.b, c.G, c.ax) == c.want, "kvq.h disagrees on %s", c.what);
        const kvq_status e = kvq_cuda_quantize(dx.p, c.T, c.D, c.b, c.G, c.ax, KVQ_ZERO_FLOAT,
                                               nullptr, dw.p, ds.p, dst.p, 1, 0);
        CHECK(refused_with(e, c.want), "quantize: %s gave %s (%s)", c.what, kvq_status_str(e),
              kvq_cuda_why());
    }
    CHECK(refused_with(kvq_cuda_quantize(nullptr, 32, 128, 2, 32, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT,
                                         nullptr, dw.p, ds.p, dst.p, 1, 0), KVQ_ERR_NULL),
          "NULL X accepted");
    CHECK(refused_with(kvq_cuda_quantize(dx.p, 32, 128, 2, 32, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT,
                                         nullptr, dw.p, ds.p, nullptr, 1, 0), KVQ_ERR_NULL),
          "NULL status accepted");
    CHECK(refused_with(kvq_cuda_status(nullptr, 0), KVQ_ERR_NULL), "kvq_cuda_status(NULL) accepted");
    std::vector<uint32_t> hw(dw.n);
    CU(cudaDeviceSynchronize());
    dw.down(hw.data());
    size_t touched = 0;
    for (uint32_t v : hw) touched += v != 0xABABABABu;
    CHECK(touched == 0, "rejected quantize calls wrote %zu words", touched);
}

/* ======================================================================== */
/* the formats engines ship (kvq.h Sec. 4.1)                                */
/* ======================================================================== */
/* kvq_cuda_quantize_format against the cache kvq.h builds for the same fp16
   rows: every kvq_config_engine preset's quantized side (rotation off: the
   kernel takes rows as given; kvq_cuda_rotate is tested above), D = 64 and
   128, a Gaussian, constant, extreme-value and tie-heavy input, side scales
   given: the words and packed parameters must equal the cache's k (or v)
   words and sz byte for byte. A NaN or Inf is refused with nothing
   written; bad arguments are refused before any launch.                 */
static void test_quantize_format_case(const char *name, int side, size_t T, size_t D, int kind,
                                      const std::vector<kvq_f16> *given = nullptr,
                                      float side_scale = 0.0371f)
{
    kvq_config cfg;
    kvq_cache c;
    if (kvq_config_engine(&cfg, D, name) != KVQ_OK) { CHECK(0, "preset %s", name); return; }
    cfg.key_rotation = cfg.value_rotation = KVQ_ROT_NONE;
    if (cfg.key_scale > 0.0f || cfg.key_format == KVQ_FORMAT_NVFP4 || cfg.key_format == KVQ_FORMAT_NVFP4_4OVER6)
        cfg.key_scale = side_scale;
    if (cfg.value_scale > 0.0f || cfg.value_format == KVQ_FORMAT_NVFP4 ||
        cfg.value_format == KVQ_FORMAT_NVFP4_4OVER6)
        cfg.value_scale = side_scale;
    const kvq_format f = side ? cfg.value_format : cfg.key_format;
    const int bits = side ? cfg.value_bits : cfg.key_bits;
    const size_t G = side ? cfg.value_group : cfg.group;
    const float scale = side ? cfg.value_scale : cfg.key_scale;
    std::vector<kvq_f16> hx(T * D);
    if (given) hx = *given;
    else fill_input(hx, T, D, kind);
    std::vector<float> fx(T * D);
    for (size_t i = 0; i < T * D; i++) {       /* a cache takes |x| <= 32752 */
        fx[i] = kvq_f16_to_f32(hx[i]);
        if (std::isfinite(fx[i]) && fabsf(fx[i]) > KVQ_MAX_ABS_INPUT) hx[i] = kvq_f32_to_f16(fx[i] = copysignf(32752.0f, fx[i]));
    }
    const size_t wpg = kvq_packed_words(G, bits), n_words = T * (D / G) * wpg,
                 spu = (D / G * (size_t)kvq_format_param_bits(f) + 31) / 32;
    dbuf<__half> dx(T * D);
    dbuf<uint32_t> dw(n_words);
    dbuf<kvq_sz> dp(T * spu + 1);
    dbuf<int> dst(1);
    dx.up(reinterpret_cast<const __half *>(hx.data()));
    dw.poison(); dp.poison();
    KQ(kvq_cuda_quantize_format(dx.p, T, D, f, bits, G, scale, dw.p, dp.p, dst.p, 0));
    const int got = (int)kvq_cuda_status(dst.p, 0);
    std::vector<uint32_t> gw(n_words);
    std::vector<kvq_sz> gp(T * spu + 1);
    dw.down(gw.data()); dp.down(gp.data());
    if (kind == IN_NAN || kind == IN_INF) {
        size_t touched = 0;
        for (size_t i = 0; i < n_words; i++) touched += gw[i] != 0xABABABABu;
        CHECK(got == KVQ_ERR_NONFINITE && touched == 0, "format %s: a %s input gave status %d, "
              "%zu words written", kvq_format_name(f), kind == IN_NAN ? "NaN" : "Inf", got, touched);
        return;
    }
    CHECK(got == KVQ_OK, "format %s D=%zu kind=%d: status %d (%s)", kvq_format_name(f), D, kind, got,
          kvq_cuda_why());
    if (kvq_cache_init(&c, &cfg) != KVQ_OK || kvq_cache_prefill(&c, fx.data(), fx.data(), T) != KVQ_OK) {
        CHECK(0, "format %s: the CPU cache refused the rows: %s", kvq_format_name(f), kvq_why());
        kvq_cache_free(&c);
        return;
    }
    const kvq_side *s = side ? &c.v : &c.k;
    CHECK(s->n_units == T && s->format == f, "format %s: the cache holds %zu units, not %zu",
          kvq_format_name(f), s->n_units, T);
    size_t bad_w = 0, bad_p = 0;
    for (size_t t = 0; t < T && s->n_units == T; t++) {
        bad_w += memcmp(&gw[t * (D / G) * wpg], s->words + t * (D / G) * wpg, (D / G) * wpg * 4) != 0;
        if (spu) bad_p += memcmp(&gp[t * spu], s->sz + t * spu, spu * sizeof(kvq_sz)) != 0;
    }
    CHECK(bad_w == 0 && bad_p == 0, "format %s (%s side) D=%zu T=%zu kind=%d: %zu tokens with other "
          "codes, %zu with other parameters", kvq_format_name(f), name, D, T, kind, bad_w, bad_p);
    kvq_cache_free(&c);
}

static void test_quantize_format(void)
{
    static const char *presets[] = { "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-per-token-head", "nvfp4",
                                     "nvfp4-4over6", "turboquant-k8v4", "turboquant-4bit-nc",
                                     "turboquant-k3v4-nc", "turboquant-3bit-nc", "q8_0", "q4_0" };
    static const int kinds[] = { IN_GAUSS, IN_CONST, IN_EXTREME, IN_TIES };
    for (size_t p = 0; p < sizeof presets / sizeof *presets; p++)
        for (size_t D = 64; D <= 128; D *= 2)
            for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
                const size_t T = quick_mode ? 5 : 37;
                test_quantize_format_case(presets[p], 0, T, D, kinds[k]);
                if (strncmp(presets[p], "turboquant", 10))       /* values: INT */
                    test_quantize_format_case(presets[p], 1, T, D, kinds[k]);
            }
    {   /* 4over6's tie: blocks both candidates hold exactly (side scale 1:
           a = 0.5 puts 3 on 6, a = 0.75 puts it on 4) must keep M = 6     */
        static const float exact[4] = { 3.0f, 1.5f, -0.75f, 0.0f };
        std::vector<kvq_f16> hx(2 * 64);
        for (size_t i = 0; i < hx.size(); i++)
            hx[i] = kvq_f32_to_f16(i < 64 ? 3.0f : (i % 16 == 5 ? -3.0f : exact[i % 4]));
        test_quantize_format_case("nvfp4-4over6", 0, 2, 64, IN_GAUSS, &hx, 1.0f);
    }
    test_quantize_format_case("nvfp4", 0, 9, 64, IN_NAN);
    test_quantize_format_case("turboquant-k3v4-nc", 0, 9, 128, IN_INF);
    /* refusals before any launch, nothing written                          */
    dbuf<__half> dx(64);
    dbuf<uint32_t> dw(64);
    dbuf<kvq_sz> dp(64);
    dbuf<int> dst(1);
    CHECK(refused_with(kvq_cuda_quantize_format(dx.p, 1, 64, KVQ_FORMAT_INT, 4, 64, 1.0f, dw.p, dp.p,
                                                dst.p, 0), KVQ_ERR_CONFIG), "INT refused");
    CHECK(refused_with(kvq_cuda_quantize_format(dx.p, 1, 64, KVQ_FORMAT_NVFP4, 8, 16, 1.0f, dw.p, dp.p,
                                                dst.p, 0), KVQ_ERR_BITS), "nvfp4 at 8 bits");
    CHECK(refused_with(kvq_cuda_quantize_format(dx.p, 1, 64, KVQ_FORMAT_Q8_0, 8, 16, 1.0f, dw.p, dp.p,
                                                dst.p, 0), KVQ_ERR_SIZE), "q8_0 with G = 16");
    CHECK(refused_with(kvq_cuda_quantize_format(dx.p, 1, 48, KVQ_FORMAT_E4M3, 8, 32, 1.0f, dw.p, dp.p,
                                                dst.p, 0), KVQ_ERR_GROUP), "G does not divide D");
    CHECK(refused_with(kvq_cuda_quantize_format(dx.p, 1, 64, KVQ_FORMAT_E4M3_TENSOR, 8, 64, -1.0f, dw.p,
                                                dp.p, dst.p, 0), KVQ_ERR_RANGE), "negative side scale");
    CHECK(refused_with(kvq_cuda_quantize_format(dx.p, 1, 64, KVQ_FORMAT_LLOYD_MAX, 4, 64, 0.0f, dw.p,
                                                nullptr, dst.p, 0), KVQ_ERR_NULL), "params NULL");
}

/* The streaming kernels (B 2 or 4, G 32, 64 or 128): every group size and
   axis, both zero modes, every input family (the bad ones: nothing
   written, the status kvq.h's), trusted (validate = 0) and validated,
   scattered units, T that leave the last warp part-full, D = 64, 96 (per
   token at B = 4 only: a 2-bit span is 64 values) and 128, G spanning
   one lane, two or four (per token) and 2-16 lanes (per channel).       */
static void test_sealed_case(int D, int B, int G, int Gv, kvq_zero_mode mode, int kind, size_t n,
                             int validate);
static void test_quantize_stream(void)
{
    const kvq_zero_mode modes[] = { KVQ_ZERO_FLOAT, KVQ_ZERO_INT };
    size_t n = 0;
    for (int b : { 2, 4 })
        for (size_t G : { 32, 64, 128 })
            for (kvq_zero_mode m : modes)
                for (int kind = IN_GAUSS; kind <= IN_HUGE; kind++) {
                    const bool good = kind != IN_NAN && kind != IN_INF && kind != IN_HUGE;
                    for (int validate = good ? 0 : 1; validate <= 1; validate++) {
                        test_quantize_case(1 + rng_below(130), 128, b, G, KVQ_PER_TOKEN, m, kind,
                                           kind == IN_TIES, validate);
                        test_quantize_case(G * (1 + rng_below(5)), 128, b, G, KVQ_PER_CHANNEL, m, kind,
                                           kind == IN_CONST, validate);
                        test_quantize_case(G * 3, 64, b, G, KVQ_PER_CHANNEL, m, kind, false, validate);
                        if (G <= 64)
                            test_quantize_case(1 + rng_below(70), 64, b, G, KVQ_PER_TOKEN, m, kind, false,
                                               validate);
                        if (b == 4 && G == 32)
                            test_quantize_case(33, 96, b, G, KVQ_PER_TOKEN, m, kind, kind == IN_GAUSS,
                                               validate);
                        n += 4;
                    }
                }
    if (!quick_mode) {      /* many CTAs: the grid-stride loop of both layouts */
        test_quantize_case(40000, 128, 2, 128, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, IN_GAUSS, false, 0);
        test_quantize_case(32768, 128, 4, 32, KVQ_PER_CHANNEL, KVQ_ZERO_INT, IN_GAUSS, false, 1);
    }
    /* sealed pages through the same steps: every key group with value
       groups of 32, 64 and D (G = Gv = 128 is the common shape), trusted
       rows, adversarial ones and a NaN (nothing written)                */
    for (int D : { 64, 128 })
        for (int b : { 2, 4 })
            for (int G : { 32, 64, 128 })
                for (int Gv : { 32, 64, 128 }) {
                    if (Gv > D) continue;
                    const kvq_zero_mode m = modes[rng_below(2)];
                    test_sealed_case(D, b, G, Gv, m, IN_GAUSS, 1 + rng_below(3), 0);
                    test_sealed_case(D, b, G, Gv, m, Gv == 64 ? IN_TIES : IN_EXTREME, 2, 1);
                    test_sealed_case(D, b, G, Gv, m, IN_NAN, 2, 1);
                    n += 3;
                }
    printf("  quantize (streaming kernels): about %zu cases, trusted and validated\n", n);
}

/* ======================================================================== */
/* attention                                                                */
/* ======================================================================== */
/* One CPU cache per stream; all streams' pages go into one pool in a
   shuffled order, which is what a block table is for.                     */
struct gpu_batch {
    std::vector<kvq_cuda_export_t> ex;
    kvq_cuda_pool pool = {};
    kvq_cuda_token tok = {};                   /* the token layout's sides */
    std::vector<void *> allocs;
    kvq_cuda_stream *d_streams = nullptr;
    size_t max_tokens = 0;
    std::vector<std::vector<int32_t>> tables;   /* per stream: pool page ids */
    ~gpu_batch()
    {
        for (auto &e : ex) kvq_cuda_export_free(&e);
        for (void *p : allocs) cudaFree(p);
    }
    template <class T> T *put(const T *h, size_t n)
    {
        void *p;
        CU(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
        if (n) CU(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice));
        allocs.push_back(p);
        return (T *)p;
    }
};

/* n distinct pool page ids out of n_pool, shuffled.                       */
static std::vector<int32_t> shuffled_ids(size_t n, size_t n_pool)
{
    std::vector<int32_t> all(n_pool);
    for (size_t i = 0; i < n_pool; i++) all[i] = (int32_t)i;
    for (size_t i = n_pool; i > 1; i--) std::swap(all[i - 1], all[rng_below(i)]);
    all.resize(n);
    return all;
}

/* b.ex's pages into one pool, shuffled (every export the same shape):
   per page kw key words, ks key kvq_sz words, vw value words, vs value
   kvq_sz words; the streams' page tables, dead bits, tails and fp rows;
   the streams' side scales into *scales (K, V per stream) when given.
   quantized = false builds a baseline batch from the fp rows only (false
   if a cache has quantized slots).                                      */
static bool upload_pages(gpu_batch &b, bool quantized, size_t kw, size_t ks, size_t vw, size_t vs,
                         std::vector<float> *scales)
{
    const kvq_cuda_export_t &e0 = b.ex[0];
    size_t n_pages = 0;
    for (auto &e : b.ex) n_pages += e.n_pages;
    const std::vector<int32_t> order = shuffled_ids(n_pages, n_pages);
    const int D = e0.head_dim;
    std::vector<uint32_t> hkw(n_pages * kw), hvw(n_pages * vw);
    std::vector<kvq_sz> hks(n_pages * ks + 1), hvs(n_pages * vs + 1);  /* + 1: never empty */
    std::vector<kvq_cuda_stream> hs(b.ex.size());
    size_t next = 0;
    if (scales) scales->assign(2 * b.ex.size(), 0.0f);
    for (size_t i = 0; i < b.ex.size(); i++) {
        const kvq_cuda_export_t &e = b.ex[i];
        std::vector<int32_t> table(e.n_pages);
        for (size_t p = 0; p < e.n_pages; p++) {
            const size_t dst = (size_t)order[next++];
            table[p] = (int32_t)dst;
            memcpy(&hkw[dst * kw], e.k_words + p * kw, kw * 4);
            memcpy(&hks[dst * ks], e.k_sz + p * ks, ks * sizeof(kvq_sz));
            memcpy(&hvw[dst * vw], e.v_words + p * vw, vw * 4);
            memcpy(&hvs[dst * vs], e.v_sz + p * vs, vs * sizeof(kvq_sz));
        }
        const size_t n_slots = std::max(e.n_kq, e.n_vq);
        if (!quantized && n_slots) return false;   /* baseline needs fp-only caches */
        kvq_cuda_stream s;
        memset(&s, 0, sizeof s);
        s.pages = b.put(table.data(), table.size());
        s.dead = b.put(e.dead, n_slots / 32 + 1);
        s.k_tail = b.put(e.k_tail, (n_slots - e.n_kq) * D);
        s.v_tail = b.put(e.v_tail, (n_slots - e.n_vq) * D);
        s.k_fp = b.put(e.k_fp, (size_t)e.n_fp * D);
        s.v_fp = b.put(e.v_fp, (size_t)e.n_fp * D);
        s.n_kq = quantized ? e.n_kq : 0;
        s.n_vq = quantized ? e.n_vq : 0;
        s.n_fp = e.n_fp;
        if (scales) { (*scales)[2 * i] = e.k_scale; (*scales)[2 * i + 1] = e.v_scale; }
        hs[i] = s;
        b.tables.push_back(table);
        b.max_tokens = std::max(b.max_tokens, n_slots + e.n_fp);
    }
    b.pool.k_words = b.put(hkw.data(), hkw.size());
    b.pool.k_sz = b.put(hks.data(), hks.size());
    b.pool.v_words = b.put(hvw.data(), hvw.size());
    b.pool.v_sz = b.put(hvs.data(), hvs.size());
    b.pool.n_pages = n_pages;
    b.pool.head_dim = D; b.pool.group = e0.group; b.pool.value_group = e0.value_group;
    b.pool.bits = e0.bits;
    b.pool.zero_mode = e0.zero_mode;
    b.pool.key_rotation = e0.key_rotation;      /* the pages' basis          */
    b.pool.value_rotation = e0.value_rotation;
    b.pool.rotation_seed = e0.rotation_seed;
    b.d_streams = b.put(hs.data(), hs.size());
    return true;
}

/* Upload in Sec. 3's layout; quantized = false builds a baseline batch
   from the fp rows only.                                                 */
static bool upload(gpu_batch &b, bool quantized)
{
    const kvq_cuda_export_t &e0 = b.ex[0];
    const int D = e0.head_dim, G = e0.group, Gv = e0.value_group, B = e0.bits;
    return upload_pages(b, quantized, kvq_cuda__kw_stride(D, G, B), (size_t)D,
                        kvq_cuda__vw_stride(D, G, B), kvq_cuda__vs_stride(D, G, Gv), NULL);
}

/* The float64 oracle for one cache and its n_rep queries.                */
static void oracle(const kvq_cache *c, const float *q, int n_rep, std::vector<float> &out)
{
    const size_t D = c->cfg.head_dim;
    std::vector<float> K, V, row(D);
    for (size_t p = 0; p < c->n_pos; p++) {
        if (kvq_cache_read(c, 0, p, row.data()) != KVQ_OK) continue;
        K.insert(K.end(), row.begin(), row.end());
        kvq_cache_read(c, 1, p, row.data());
        V.insert(V.end(), row.begin(), row.end());
    }
    out.assign((size_t)n_rep * D, 0.0f);
    kvq_attend_dense(K.data(), V.data(), K.size() / D, D, q, (size_t)n_rep, out.data(), NULL);
}

/* Relative L2 error of one output row; NaN if got holds a NaN.           */
template <class A, class R>
static double rel_l2(const A *got, const R *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], r = ref[i];
        num += (g - r) * (g - r);
        den += r * r;
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

/* A synthetic head: a few outlier key channels, sink-like first tokens.
   With kv_extreme set (the adversarial cases), channels of three kinds
   instead: values up to +-KVQ_MAX_ABS_INPUT (32752, the largest a cache
   takes: twice it still fits an fp16 scale; the quantize cases above go
   to +-65504), a tiny spread around an offset (scales that are fp16
   subnormals), and constant runs (zero-range groups).                   */
static bool kv_extreme = false;
static float extreme_value(size_t t, size_t d)
{
    switch (d % 4) {
    case 0: return (rng_below(8) == 0 ? KVQ_MAX_ABS_INPUT : 4096.0f) * (rng_below(2) ? 1.0f : -1.0f) *
                   (rng_below(4) == 0 ? 1.0f : (float)rng_unif());
    case 1: return 0.25f + 3e-6f * rng_gauss();                 /* subnormal scales */
    case 2: return (t / 8) % 2 ? 1.5f : -0.75f;                  /* constant runs    */
    default: return rng_gauss();
    }
}
/* Shapes for the tensor-core kernel's runs of chunks that share the
   values' integer C (kvq_cuda.cu's kvq_mma_valc), in 32-token chunk
   kv_run_period / 64 of every kv_run_period tokens (128: a run's third
   chunk at G = 128; 64: a run's second at G = 64):
   KV_RUN_MAX_MOVES  keys larger there, more so page after page: the
                     running max moves inside a run (flush, then rescale)
   KV_RUN_SCALES_GROW values 16x larger there: a chunk needs a smaller
                     value exponent than the run's (flush, then switch)
   kv_min_len: the shortest stream (several pages in quick mode).       */
enum { KV_RUN_PLAIN, KV_RUN_MAX_MOVES, KV_RUN_SCALES_GROW };
static int kv_runs = KV_RUN_PLAIN;
static size_t kv_min_len = 0, kv_run_period = 128;
static void make_kv(size_t T, size_t D, std::vector<float> &K, std::vector<float> &V)
{
    K.resize(T * D); V.resize(T * D);
    for (size_t t = 0; t < T; t++)
        for (size_t d = 0; d < D; d++) {
            K[t * D + d] = rng_gauss() * (d % 19 == 5 ? 8.0f : 1.0f) + (t < 4 ? 2.0f : 0.0f);
            V[t * D + d] = rng_gauss();
            if (kv_extreme) {
                K[t * D + d] = kvq_f16_to_f32(kvq_f32_to_f16(extreme_value(t, d) / 64.0f));
                V[t * D + d] = kvq_f16_to_f32(kvq_f32_to_f16(extreme_value(t, d + 1)));
            }
            const bool in_run = t % kv_run_period / 32 == kv_run_period / 64;
            if (in_run && kv_runs == KV_RUN_MAX_MOVES) K[t * D + d] *= 1.5f + 0.5f * (float)(t / kv_run_period);
            if (in_run && kv_runs == KV_RUN_SCALES_GROW) V[t * D + d] *= 16.0f;
        }
}

enum { POL_KIVI, POL_OTT, POL_LOGQUANT, POL_EVICT, POL_FULL, POL_KIVI_INT };
static const char *pol_name[] = { "KIVI", "OTT", "LogQuant", "KIVI+evict", "fp16", "KIVI-intzp" };

/* The rotation make_config gives every cache (test_rotate_attend sets it). */
static kvq_rotation rot_key = KVQ_ROT_NONE, rot_value = KVQ_ROT_NONE;
static uint64_t rot_seed = 0;

static kvq_config make_config(int pol, size_t D, int bits, size_t G)
{
    kvq_config cfg;
    switch (pol) {
    case POL_OTT: cfg = kvq_config_ott(D, bits, 5); break;
    case POL_LOGQUANT: cfg = kvq_config_logquant(D, bits, 42); cfg.group = G; break;
    case POL_FULL: cfg = kvq_config_full(D, 16); break;
    default: cfg = kvq_config_kivi(D, bits); cfg.group = G; break;
    }
    if (pol == POL_OTT) { cfg.group = G; cfg.value_group = G < D ? G : D; }
    if (pol == POL_KIVI_INT) cfg.zero_mode = KVQ_ZERO_INT;   /* HF's integer zero point */
    if (pol != POL_FULL && (cfg.value_group ? cfg.value_group : cfg.group) > D) cfg.value_group = D;
    cfg.key_rotation = rot_key;
    cfg.value_rotation = rot_value;
    cfg.rotation_seed = rot_seed;
    return cfg;
}

/* Streams of G = 64/128 pools whose fast range reaches a page's second
   tile (min(n_kq, n_vq) >= 64): proof that later tiles ran.             */
static size_t tiled_streams = 0;

/* One stream: a cache of the policy with a random length in [1, max_len]
   (prefill half, append the rest; KIVI+evict then evicts a random quarter),
   exported. On failure *why is the failing call's reason (kvq_why() or
   kvq_cuda_why()) and the cache is freed.                                */
static bool make_stream(int pol, size_t D, int bits, size_t G, size_t max_len, kvq_cache *c,
                        kvq_cuda_export_t *e, const char **why)
{
    kvq_config cfg = make_config(pol, D, bits, G);
    const size_t T = std::max(kv_min_len, 1 + rng_below(max_len)), pre = T / 2;
    std::vector<float> K, V;
    make_kv(T, D, K, V);
    if (kvq_cache_init(c, &cfg) != KVQ_OK) { *why = kvq_why(); return false; }
    bool ok = pre == 0 || kvq_cache_prefill(c, K.data(), V.data(), pre) == KVQ_OK;
    for (size_t t = pre; t < T && ok; t++)
        ok = kvq_cache_append(c, &K[t * D], &V[t * D]) == KVQ_OK;
    if (ok && pol == POL_EVICT && T > 8) {              /* random dead slots */
        std::vector<uint8_t> keep(c->n_pos);
        for (auto &k : keep) k = rng_below(4) != 0;
        ok = kvq_cache_evict(c, keep.data(), keep.size(), NULL) == KVQ_OK;
    }
    if (!ok) *why = kvq_why();
    if (ok && kvq_cuda_export(c, e) != KVQ_OK) { *why = kvq_cuda_why(); ok = false; }
    if (!ok) kvq_cache_free(c);
    return ok;
}

/* n_streams caches of the policy with random lengths (prefill, then a few
   decode appends), exported into b. Quick mode shortens them.            */
static bool build_batch(int pol, size_t D, int bits, size_t G, size_t n_streams, size_t max_len,
                        std::vector<kvq_cache> &caches, gpu_batch &b)
{
    const char *why = "";
    bool ok = true;
    caches.resize(n_streams);
    for (size_t i = 0; i < n_streams && ok; i++) {
        kvq_cuda_export_t e;
        ok = make_stream(pol, D, bits, G, max_len, &caches[i], &e, &why);
        if (ok) b.ex.push_back(e);
        if (ok && G > 32 && std::min(e.n_kq, e.n_vq) >= 64) tiled_streams++;
        if (!ok) caches.resize(i);          /* make_stream freed the failed one */
    }
    CHECK(ok, "%s: building the caches failed: %s", pol_name[pol], why);
    return ok;
}

/* Every output row against the float64 oracle: the rows over tol, and the
   worst relative L2 error (NaN if any row is NaN).                       */
static size_t check_rows(std::vector<kvq_cache> &caches, const std::vector<float> &hq,
                         const std::vector<float> &got, int n_rep, size_t D, double tol,
                         double *worst)
{
    std::vector<float> ref;
    size_t bad = 0;
    *worst = 0.0;
    for (size_t i = 0; i < caches.size(); i++) {
        oracle(&caches[i], &hq[i * n_rep * D], n_rep, ref);
        for (int h = 0; h < n_rep; h++) {
            const double rel = rel_l2(&got[(i * n_rep + h) * D], &ref[h * D], D);
            if (!(rel <= tol)) bad++;
            if (!(rel <= *worst)) *worst = rel;         /* NaN sticks */
        }
    }
    return bad;
}

/* The sealed pages of batch b (both sides quantized on every slot): their
   pool ids, stream by stream, and the same pages as (stream, page).       */
static std::vector<int32_t> sealed_ids(const gpu_batch &b, size_t G,
                                       std::vector<std::pair<size_t, size_t>> *where)
{
    std::vector<int32_t> ids;
    for (size_t i = 0; i < b.ex.size(); i++) {
        const size_t sealed = std::min(b.ex[i].n_kq, b.ex[i].n_vq) / G;
        for (size_t p = 0; p < sealed; p++) {
            ids.push_back(b.tables[i][p]);
            where->push_back({ i, p });
        }
    }
    return ids;
}

/* Pages of the pool that differ from expect(stream, page, k_out, v_out).   */
template <class Expect>
static size_t pages_differing(const gpu_batch &b, const std::vector<int32_t> &ids,
                              const std::vector<std::pair<size_t, size_t>> &where, size_t n,
                              Expect expect)
{
    std::vector<uint32_t> kw(b.pool.n_pages * n), vw(b.pool.n_pages * n), kref(n), vref(n);
    CU(cudaMemcpy(kw.data(), b.pool.k_words, kw.size() * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(vw.data(), b.pool.v_words, vw.size() * 4, cudaMemcpyDeviceToHost));
    size_t differ = 0;
    for (size_t k = 0; k < ids.size(); k++) {
        expect(where[k].first, where[k].second, kref.data(), vref.data());
        differ += memcmp(kref.data(), &kw[(size_t)ids[k] * n], n * 4) != 0 ||
                  memcmp(vref.data(), &vw[(size_t)ids[k] * n], n * 4) != 0;
    }
    return differ;
}

/* Build n_streams caches of the policy, run the GPU, compare every row.
   variant < 0: kvq_cuda_attend (the tile kernel). variant >= 0: the
   tensor-core kernel (kvq_cuda.cu Sec. 8) with that variant: the sealed
   pages are sealed ON THE DEVICE (kvq_cuda_seal_pages), which must give
   kvq_cuda_fragment_page's bytes, and unsealed after, which must give the
   original bytes back.                                                    */
#define TILE_KERNEL (-1)
#define ATTN_TOL_HI_ONLY 4e-3    /* fp16 weights: 2^-12 each, relative      */
static size_t mma_pages_checked = 0;
static void test_attend_case(int pol, size_t D, int bits, size_t G, int n_rep,
                             size_t n_streams, size_t max_len, int variant = TILE_KERNEL)
{
    gpu_batch b;
    if (quick_mode) { max_len = std::min<size_t>(max_len, 1200); n_streams = std::min<size_t>(n_streams, 4); }
    std::vector<kvq_cache> caches;
    std::vector<float> hq(n_streams * n_rep * D);
    const bool ok = build_batch(pol, D, bits, G, n_streams, max_len, caches, b);
    for (auto &x : hq) x = rng_gauss();
    if (ok) {
        const bool quantized = pol != POL_FULL, mma = variant != TILE_KERNEL;
        const size_t n = D * G * bits / 32;             /* words per page    */
        upload(b, quantized);
        std::vector<std::pair<size_t, size_t>> where;
        const std::vector<int32_t> ids = mma ? sealed_ids(b, G, &where) : std::vector<int32_t>();
        dbuf<int32_t> dids(ids.size());
        if (mma) {
            dids.up(ids.data());
            KQ(kvq_cuda_seal_pages(&b.pool, dids.p, ids.size(), 1, 0));
            const size_t differ = pages_differing(b, ids, where, n, [&](size_t i, size_t p, uint32_t *k, uint32_t *v) {
                kvq_cuda_fragment_page(b.ex[i].k_words + p * n, b.ex[i].v_words + p * n, (int)D,
                                       (int)G, bits, k, v);
            });
            CHECK(differ == 0, "kvq_cuda_seal_pages: %zu of %zu pages differ from "
                  "kvq_cuda_fragment_page", differ, ids.size());
            mma_pages_checked += ids.size();
        }
        int s_a = 0, s_b = 0;
        const size_t wf = mma ? kvq_cuda_attend_mma_workspace(n_streams, n_rep, (int)D, (int)G, bits,
                                                              b.pool.value_group, variant,
                                                              b.max_tokens, &s_a, &s_b)
                              : kvq_cuda_attend_workspace(n_streams, n_rep, (int)D,
                                                          quantized ? (int)G : 0, b.max_tokens, &s_a);
        dbuf<float> dq(hq.size()), dout(hq.size()), dwork(wf);
        dbuf<int> dst(1);
        dq.up(hq.data());
        CU(cudaMemset(dout.p, 0xFF, dout.n * sizeof(float)));    /* NaN poison */
        if (mma)
            KQ(kvq_cuda_attend_mma(&b.pool, (int)D, b.d_streams, n_streams, n_rep, b.max_tokens,
                                   dq.p, dout.p, dwork.p, wf, dst.p, variant, 0));
        else
            KQ(kvq_cuda_attend(quantized ? &b.pool : nullptr, (int)D, b.d_streams, n_streams,
                               n_rep, b.max_tokens, dq.p, dout.p, dwork.p, wf, dst.p, 0));
        const kvq_status status = kvq_cuda_status(dst.p, 0);
#ifdef KVQ_EMU
        /* attributes set once per process (issue 46): the same call again
           sets none (on the emulator, which counts them)                */
        if (mma) {
            const unsigned long before = kvq_emu::func_attribute_calls();
            KQ(kvq_cuda_attend_mma(&b.pool, (int)D, b.d_streams, n_streams, n_rep, b.max_tokens,
                                   dq.p, dout.p, dwork.p, wf, dst.p, variant, 0));
            const unsigned long again = kvq_emu::func_attribute_calls() - before;
            CHECK(again == 0, "kvq_cuda_attend_mma called twice: the second call set %lu function "
                  "attributes (want 0: set once per process)", again);
        }
#endif
        /* the status word without a memset (issue 46; kvq_dev_status_reset),
           once for each launcher: a word holding garbage reads OK after a
           good call, a NaN query's call reports NONFINITE (that row NaN),
           and the good call after it reports OK again; on the emulator,
           none of the three calls makes a memset                        */
        static bool sequence_done[2];
        if (!sequence_done[mma]) {
            sequence_done[mma] = true;
            auto call = [&]() {
                if (mma)
                    KQ(kvq_cuda_attend_mma(&b.pool, (int)D, b.d_streams, n_streams, n_rep,
                                           b.max_tokens, dq.p, dout.p, dwork.p, wf, dst.p, variant, 0));
                else
                    KQ(kvq_cuda_attend(quantized ? &b.pool : nullptr, (int)D, b.d_streams, n_streams,
                                       n_rep, b.max_tokens, dq.p, dout.p, dwork.p, wf, dst.p, 0));
                return kvq_cuda_status(dst.p, 0);
            };
#ifdef KVQ_EMU
            const unsigned long memsets = kvq_emu::memset_calls();
            const unsigned long forked = kvq_emu::stream_launches();
#endif
            const int garbage = 0x5eed;
            CU(cudaMemcpy(dst.p, &garbage, sizeof garbage, cudaMemcpyHostToDevice));
            const kvq_status st_garbage = call();
            std::vector<float> hq_nan(hq), row0(D);
            hq_nan[3] = NAN;
            dq.up(hq_nan.data());
            const kvq_status st_nan = call();
            CU(cudaMemcpy(row0.data(), dout.p, D * sizeof(float), cudaMemcpyDeviceToHost));
            dq.up(hq.data());
            const kvq_status st_again = call();
            CHECK(st_garbage == KVQ_OK && refused_with(st_nan, KVQ_ERR_NONFINITE) &&
                  isnan(row0[0]) && isnan(row0[D - 1]) && st_again == KVQ_OK,
                  "%s status sequence: garbage word then good call %s, NaN q %s (row %s), good "
                  "call after it %s", mma ? "kvq_cuda_attend_mma" : "kvq_cuda_attend",
                  kvq_status_str(st_garbage), kvq_status_str(st_nan),
                  isnan(row0[0]) ? "NaN" : "not NaN", kvq_status_str(st_again));
#ifdef KVQ_EMU
            const unsigned long made = kvq_emu::memset_calls() - memsets;
            CHECK(made == 0, "%s: three calls made %lu memsets (want 0: the call zeroes its "
                  "status word itself)", mma ? "kvq_cuda_attend_mma" : "kvq_cuda_attend", made);
            /* kvq_cuda_attend_mma runs Sec. 4's kernel on its second stream
               (issue 46: no serial tail), one launch a call             */
            const unsigned long side = kvq_emu::stream_launches() - forked;
            CHECK(side == (mma ? 3u : 0u), "%s: three calls launched %lu kernels on a second "
                  "stream (want %u)", mma ? "kvq_cuda_attend_mma" : "kvq_cuda_attend", side,
                  mma ? 3u : 0u);
#endif
        }
        std::vector<float> got(hq.size());
        dout.down(got.data());
        double worst;
        const double tol = mma && (variant & KVQ_CUDA_MMA_HI_ONLY) ? ATTN_TOL_HI_ONLY : ATTN_TOL;
        const size_t bad = check_rows(caches, hq, got, n_rep, D, tol, &worst);
        const char *kind = !mma ? "attend" : (variant & KVQ_CUDA_MMA_HI_ONLY) ? "mma-hi"
                         : (variant & KVQ_CUDA_MMA_SUBNORMAL) ? "mma-sn"
                         : (variant & KVQ_CUDA_MMA_MAGIC) ? "mma-mg"
                         : (variant & KVQ_CUDA_MMA_DIRECT) ? "mma-di"
                         : (variant & KVQ_CUDA_MMA_STAGES3) ? "mma-s3"
                         : (variant & KVQ_CUDA_MMA_OCC5) ? "mma-o5"
                         : (variant & KVQ_CUDA_MMA_NO_PREFETCH) ? "mma-np"
                         : (variant & KVQ_CUDA_MMA_TWO_WAVES) ? "mma-2w" : "mma";
        CHECK(status == KVQ_OK, "%s %s: %s", kind, pol_name[pol], kvq_cuda_why());
        CHECK(bad == 0, "%s %s D=%zu B=%d G=%zu n_rep=%d streams=%zu max_len=%zu splits=%d+%d: "
              "%zu rows over tolerance %.0e, worst rel err %.3g", kind, pol_name[pol], D, bits, G,
              n_rep, n_streams, max_len, s_a, s_b, bad, tol, worst);
        printf("  %-6s %-10s D=%3zu B=%d G=%3zu n_rep=%2d streams=%3zu T<=%6zu splits=%3d+%d%s  "
               "worst rel err %.2e\n", kind, pol_name[pol], D, bits, G, n_rep, n_streams, max_len,
               s_a, s_b, mma ? " (sealed pages on the tensor cores)" : "", worst);
        if (mma) {                            /* unsealing restores kvq.h's order */
            KQ(kvq_cuda_seal_pages(&b.pool, dids.p, ids.size(), 0, 0));
            const size_t differ = pages_differing(b, ids, where, n, [&](size_t i, size_t p, uint32_t *k, uint32_t *v) {
                memcpy(k, b.ex[i].k_words + p * n, n * 4);
                memcpy(v, b.ex[i].v_words + p * n, n * 4);
            });
            CHECK(differ == 0, "unsealing: %zu pages differ from the original", differ);
        }
    }
    for (auto &c : caches) kvq_cache_free(&c);
}

/* kvq_cuda_mma_splits against brute force: for launches of n_ctas CTAs
   a split on a GPU holding `slots` at once, the launch time in CTA
   lifetimes of a split, ceil(n_ctas s / slots) / s, of the count it
   picks is within 5% of the best count up to its cap (max_splits, and
   four waves' worth), never above the cap, and no larger count is more
   than 5% better; the older rule's count is never better by more. Uneven
   counts (pages not divisible by splits) are run by the attention cases
   (T = 6000 at G = 128: 47 pages over the splits). */
static void test_mma_splits(void)
{
    size_t bad = 0, fuller = 0, cases = 0;
    for (size_t n_ctas : { 1, 3, 6, 8, 64, 100, 256, 512, 1024, 5000 })
        for (size_t slots : { 1, 100, 132 * 3, 132 * 4, 132 * 5, 114 * 4 })
            for (size_t max_splits : { 1, 2, 7, 32, 128 }) {
                const size_t s = kvq_cuda_mma_splits(n_ctas, slots, max_splits, 0);
                const size_t cap = std::min(max_splits, (4 * slots + n_ctas - 1) / n_ctas);
                auto cost = [&](size_t k) { return (double)((n_ctas * k + slots - 1) / slots) / (double)k; };
                double best = cost(1);
                for (size_t k = 2; k <= cap; k++) best = std::min(best, cost(k));
                cases++;
                if (s < 1 || s > std::max<size_t>(cap, 1) || cost(s) > best / 0.95 + 1e-12) bad++;
                const size_t old = kvq_cuda_mma_splits(n_ctas, slots, max_splits, 1);
                if (old < 1 || old > max_splits) bad++;
                if (old <= cap && cost(old) < 0.95 * cost(s) - 1e-12) bad++;
                fuller += cost(s) < cost(old) - 1e-12;
            }
    CHECK(bad == 0, "kvq_cuda_mma_splits: %zu of %zu launches off the brute-force best", bad, cases);
    CHECK(fuller > 0, "kvq_cuda_mma_splits: never fuller waves than the two-wave rule");
    CHECK(kvq_cuda_mma_splits(0, 528, 8, 0) == 0 && kvq_cuda_mma_splits(256, 0, 8, 0) == 0,
          "kvq_cuda_mma_splits: an empty launch or GPU was planned");
    /* H100, 4 CTAs per SM, 256 streams of one CTA a split: 2 splits fill
       97% of one wave; the two-wave rule's 5 fill 2.42 waves            */
    CHECK(kvq_cuda_mma_splits(256, 528, 64, 0) == 2 && kvq_cuda_mma_splits(256, 528, 64, 1) == 5,
          "kvq_cuda_mma_splits: 256 CTAs on 528 slots gave %zu (whole waves) and %zu (two waves)",
          kvq_cuda_mma_splits(256, 528, 64, 0), kvq_cuda_mma_splits(256, 528, 64, 1));
    printf("  mma splits: %zu launches within 5%% of the best whole-wave count, %zu fuller than two waves\n",
           cases, fuller);
}

static void test_attend_mma(void)
{
    test_mma_splits();
    auto mma = [](int pol, size_t D, int bits, size_t G, int n_rep, size_t n, size_t len,
                  int variant = KVQ_CUDA_MMA_HILO) {
        test_attend_case(pol, D, bits, G, n_rep, n, len, variant);
    };
    /* every shape the kernel is built for, every GQA ratio 1-16          */
    const int reps[] = { 1, 2, 3, 4, 5, 8, 16 };
    int r = 0;
    for (int bits : { 2, 4 })
        for (size_t G : { 32, 64, 128 })
            for (size_t D : { 64, 128 })
                mma(POL_KIVI, D, bits, G, reps[r++ % 7], 4, 700);
    mma(POL_KIVI, 128, 2, 128, 4, 6, 6000);
    mma(POL_EVICT, 128, 2, 128, 1, 6, 1500);   /* dead slots, 4 chunks a page */
    for (int rr : { 1, 8 }) {
        mma(POL_OTT, 128, 2, 128, rr, 6, 1500);
        mma(POL_LOGQUANT, 128, 2, 64, rr, 6, 1500);
        mma(POL_EVICT, 128, 4, 32, rr, 6, 1500);
        mma(POL_KIVI_INT, 64, 2, 32, rr, 6, 900);
    }
    /* rotating caches: the pool's basis around the tensor-core launch    */
    rot_seed = rng_u64();
    rot_key = KVQ_ROT_HADAMARD_SIGNS; rot_value = KVQ_ROT_HADAMARD;
    mma(POL_KIVI, 128, 2, 128, 4, 4, 900);
    rot_key = KVQ_ROT_NONE; rot_value = KVQ_ROT_HADAMARD_SIGNS;
    mma(POL_OTT, 64, 4, 32, 8, 4, 900);
    rot_key = rot_value = KVQ_ROT_NONE;
    kv_extreme = true;                    /* +-32752, subnormal scales      */
    mma(POL_KIVI, 128, 2, 32, 4, 4, 1200);
    mma(POL_KIVI, 64, 4, 128, 1, 4, 1200);
    kv_extreme = false;
    /* the f16 MMA with the magic-number decode (the default is the integer
       MMA): its sums are rounded by the tensor cores, whatever model the
       emulator runs                                                       */
    mma(POL_KIVI, 128, 2, 128, 4, 4, 1200, KVQ_CUDA_MMA_MAGIC);
    mma(POL_OTT, 64, 4, 32, 8, 4, 900, KVQ_CUDA_MMA_MAGIC);
    mma(POL_LOGQUANT, 128, 2, 64, 1, 4, 900, KVQ_CUDA_MMA_MAGIC | KVQ_CUDA_MMA_HI_ONLY);
    mma(POL_KIVI, 128, 4, 128, 1, 4, 900, KVQ_CUDA_MMA_MAGIC | KVQ_CUDA_MMA_DIRECT);
    mma(POL_KIVI, 128, 2, 64, 2, 4, 900, KVQ_CUDA_MMA_MAGIC | KVQ_CUDA_MMA_STAGES3);
    kv_extreme = true;
    mma(POL_KIVI, 128, 2, 32, 4, 4, 1200, KVQ_CUDA_MMA_MAGIC);
    kv_extreme = false;
    /* weights without their low half: the cost of dropping it            */
    mma(POL_KIVI, 128, 2, 128, 4, 4, 1500, KVQ_CUDA_MMA_HI_ONLY);
    mma(POL_KIVI, 128, 4, 32, 1, 4, 1500, KVQ_CUDA_MMA_HI_ONLY);
    /* chunks read where they lie, without cp.async staging               */
    mma(POL_KIVI, 128, 2, 64, 8, 4, 1500, KVQ_CUDA_MMA_DIRECT);
    mma(POL_LOGQUANT, 64, 4, 32, 3, 4, 900, KVQ_CUDA_MMA_DIRECT);
    mma(POL_KIVI, 128, 4, 128, 1, 4, 900, KVQ_CUDA_MMA_DIRECT | KVQ_CUDA_MMA_HI_ONLY);
    /* three cp.async stages: one chunk a page (G = 32) and four (G = 128),
       chunk counts that leave the ring part-filled at the end            */
    mma(POL_KIVI, 128, 2, 128, 4, 6, 3000, KVQ_CUDA_MMA_STAGES3);
    mma(POL_OTT, 64, 4, 32, 8, 4, 900, KVQ_CUDA_MMA_STAGES3);
    mma(POL_LOGQUANT, 128, 2, 64, 1, 4, 1100, KVQ_CUDA_MMA_STAGES3 | KVQ_CUDA_MMA_HI_ONLY);
    /* the page parameters loaded at the page start, not staged a page
       ahead as the default does (the integer decode's value exponent then
       per page, not per chunk; dead slots read at the chunk, not a chunk
       ahead): G = 32 (a new page every chunk) and 128, dead slots, the
       f16 decode, adversarial scales                                     */
    mma(POL_KIVI, 128, 4, 128, 4, 4, 1500, KVQ_CUDA_MMA_NO_PREFETCH);
    mma(POL_EVICT, 128, 4, 32, 8, 6, 1500, KVQ_CUDA_MMA_NO_PREFETCH);
    mma(POL_OTT, 64, 2, 32, 8, 4, 900, KVQ_CUDA_MMA_NO_PREFETCH | KVQ_CUDA_MMA_MAGIC);
    kv_extreme = true;
    mma(POL_KIVI, 64, 4, 128, 1, 4, 1200, KVQ_CUDA_MMA_NO_PREFETCH);
    kv_extreme = false;
    /* built for 5 CTAs per SM (its own registers and carveout)           */
    mma(POL_KIVI, 128, 2, 64, 1, 4, 1200, KVQ_CUDA_MMA_OCC5);
    mma(POL_EVICT, 128, 4, 128, 4, 4, 1200, KVQ_CUDA_MMA_OCC5);
    mma(POL_LOGQUANT, 128, 4, 32, 8, 4, 900, KVQ_CUDA_MMA_OCC5 | KVQ_CUDA_MMA_MAGIC | KVQ_CUDA_MMA_HI_ONLY);
    /* the older split rule (about two waves): other split counts over the
       same pages, the combine covering each                              */
    mma(POL_KIVI, 128, 2, 128, 4, 6, 6000, KVQ_CUDA_MMA_TWO_WAVES);
    mma(POL_OTT, 64, 4, 32, 1, 4, 900, KVQ_CUDA_MMA_TWO_WAVES | KVQ_CUDA_MMA_NO_PREFETCH);
    /* the subnormal decode: exact where the tensor cores keep fp16
       subnormal inputs and multiply them exactly (the probe runs both
       decodes against each other), refused with a reason elsewhere      */
    int keeps = -1;
    CHECK(kvq_cuda_mma_keeps_subnormals(&keeps) == KVQ_OK && (keeps == 0 || keeps == 1),
          "kvq_cuda_mma_keeps_subnormals: the probe did not run (%s)", kvq_cuda_why());
    CHECK(refused_with(kvq_cuda_mma_keeps_subnormals(nullptr), KVQ_ERR_NULL),
          "kvq_cuda_mma_keeps_subnormals(NULL) accepted");
    printf("  mma: the subnormal decode is %s on this device\n", keeps == 1 ? "exact" : "not exact (refused)");
    if (keeps == 1) {
        mma(POL_KIVI, 128, 2, 64, 4, 4, 1200, KVQ_CUDA_MMA_SUBNORMAL);
        mma(POL_OTT, 64, 4, 32, 8, 4, 900, KVQ_CUDA_MMA_SUBNORMAL);
        mma(POL_KIVI, 128, 4, 128, 1, 4, 900, KVQ_CUDA_MMA_SUBNORMAL | KVQ_CUDA_MMA_DIRECT);
        mma(POL_KIVI, 128, 2, 64, 2, 4, 900, KVQ_CUDA_MMA_SUBNORMAL | KVQ_CUDA_MMA_STAGES3);
        kv_extreme = true;
        mma(POL_KIVI, 128, 2, 32, 2, 4, 900, KVQ_CUDA_MMA_SUBNORMAL);
        kv_extreme = false;
    }
    /* the values' C kept over a page's chunks, a run (kvq_mma_valc; the
       default kernel at G >= 64, NQ = 1): the running max moving inside
       a run, a run's chunk with larger value scales; runs of 2 (G = 64)
       and 4 chunks, both digit counts (HI_ONLY: 2), GQA 1 and 4, and
       streams several pages long; a stream of its own.                   */
    {
        const uint64_t saved = rng_state;
        rng_state = 0x6a7e5ull;
        kv_runs = KV_RUN_MAX_MOVES;
        mma(POL_KIVI, 128, 2, 128, 1, 4, 1200);
        mma(POL_EVICT, 128, 4, 128, 4, 4, 1200);
        kv_run_period = 64;
        mma(POL_KIVI, 64, 2, 64, 1, 4, 1200, KVQ_CUDA_MMA_HI_ONLY);
        kv_run_period = 128;
        kv_runs = KV_RUN_SCALES_GROW;
        mma(POL_KIVI, 128, 2, 128, 4, 4, 1200);
        mma(POL_OTT, 64, 4, 128, 1, 4, 1200);
        kv_run_period = 64;
        mma(POL_KIVI, 128, 2, 64, 1, 4, 1200, KVQ_CUDA_MMA_HI_ONLY);
        kv_run_period = 128;
        kv_min_len = 1100;                /* every stream several pages long */
        mma(POL_KIVI, 128, 2, 128, 1, 4, 1200);
        kv_runs = KV_RUN_PLAIN;
        kv_extreme = true;
        mma(POL_KIVI, 128, 4, 128, 1, 4, 1200);
        kv_extreme = false;
        kv_min_len = 0;
        rng_state = saved;
    }
    CHECK(mma_pages_checked > 50, "the tensor-core kernel saw only %zu sealed pages", mma_pages_checked);

    /* refusals: each with a reason, nothing launched                      */
    gpu_batch b;
    std::vector<kvq_cache> caches;
    if (!build_batch(POL_KIVI, 64, 2, 32, 1, 300, caches, b)) return;
    upload(b, true);
    int s5, s3;
    const size_t wf = kvq_cuda_attend_mma_workspace(1, 1, 64, 32, 2, b.pool.value_group, 0,
                                                    b.max_tokens, &s5, &s3);
    dbuf<float> dq(64), dout(64), dwork(wf + 1);
    dbuf<int> dst(1);
    kvq_cuda_pool bad = b.pool;
    auto refused = [&](const kvq_cuda_pool *p, int D, size_t work, int variant, kvq_status want) {
        return refused_with(kvq_cuda_attend_mma(p, D, b.d_streams, 1, 1, b.max_tokens, dq.p, dout.p,
                                                dwork.p, work, dst.p, variant, 0), want);
    };
    CHECK(refused(nullptr, 64, wf, 0, KVQ_ERR_NULL), "mma: a NULL pool was accepted");
    CHECK(refused(&b.pool, 64, wf - 1, 0, KVQ_ERR_CAPACITY), "mma: a small workspace was accepted");
    CHECK(refused(&b.pool, 64, wf, 256, KVQ_ERR_CONFIG) && refused(&b.pool, 64, wf, 512, KVQ_ERR_CONFIG),
          "mma: variant 256 (the removed value-word preload) or 512 was accepted");
    CHECK(refused(&b.pool, 64, wf, KVQ_CUDA_MMA_OCC5 | KVQ_CUDA_MMA_NO_PREFETCH, KVQ_ERR_CONFIG) &&
          refused(&b.pool, 64, wf, KVQ_CUDA_MMA_OCC5 | KVQ_CUDA_MMA_STAGES3, KVQ_ERR_CONFIG) &&
          refused(&b.pool, 64, wf, KVQ_CUDA_MMA_OCC5 | KVQ_CUDA_MMA_DIRECT, KVQ_ERR_CONFIG),
          "mma: the 5-CTA option without its kernel was accepted");
    CHECK(refused(&b.pool, 64, wf, KVQ_CUDA_MMA_MAGIC | KVQ_CUDA_MMA_SUBNORMAL, KVQ_ERR_CONFIG),
          "mma: two decodes at once were accepted");
    CHECK(refused(&b.pool, 64, wf, KVQ_CUDA_MMA_DIRECT | KVQ_CUDA_MMA_STAGES3, KVQ_ERR_CONFIG),
          "mma: no staging and three stages at once was accepted");
    if (keeps == 0)
        CHECK(refused(&b.pool, 64, wf, KVQ_CUDA_MMA_SUBNORMAL, KVQ_ERR_CONFIG),
              "mma: the subnormal decode was accepted on a device that flushes subnormals");
    CHECK(refused(&b.pool, 96, wf, 0, KVQ_ERR_CONFIG), "mma: D = 96 was accepted");
    bad.value_group = 8;
    CHECK(refused(&bad, 64, wf, 0, KVQ_ERR_GROUP), "mma: value group 8 (not a channel tile) was accepted");
    bad = b.pool; bad.bits = 8;
    CHECK(refused(&bad, 64, wf, 0, KVQ_ERR_CONFIG), "mma: B = 8 was accepted");
    bad = b.pool; bad.group = 96;          /* a multiple of 32, not a power of two */
    CHECK(refused(&bad, 64, wf, 0, KVQ_ERR_CONFIG), "mma: G = 96 was accepted");
    CHECK(kvq_cuda_attend_mma_workspace(1, 1, 96, 32, 2, 32, 0, 100, &s5, &s3) == 0,
          "mma workspace: D = 96 gave a size");
    /* the routing rule, as walkthrough 9.9 derives it from make cuda-gates'
       counts and one H200 timing: the CUDA-core kernel for one head per
       KV head on G = 32 pages, v5 everywhere else it is built; -1 where
       it is not                                                        */
    size_t misrouted = 0;
    for (int D : { 64, 128 })
        for (int bits : { 2, 4 })
            for (int G : { 32, 64, 128 })
                for (int rr : { 1, 2, 4, 8, 16 })
                    misrouted += kvq_cuda_mma_route(D, bits, G, rr) != (rr == 1 && G == 32 ? 0 : 1);
    CHECK(misrouted == 0, "kvq_cuda_mma_route: %zu of 60 built shapes routed against the counts", misrouted);
    CHECK(kvq_cuda_mma_route(96, 2, 32, 4) == -1 && kvq_cuda_mma_route(128, 8, 32, 4) == -1 &&
          kvq_cuda_mma_route(128, 2, 96, 4) == -1 && kvq_cuda_mma_route(128, 2, 256, 4) == -1 &&
          kvq_cuda_mma_route(128, 2, 32, 0) == -1 && kvq_cuda_mma_route(128, 2, 32, 65) == -1,
          "kvq_cuda_mma_route: a shape without a v5 kernel was routed to one");
    bad = b.pool; bad.group = 48;
    CHECK(refused_with(kvq_cuda_seal_pages(&bad, dst.p, 1, 1, 0), KVQ_ERR_CONFIG),
          "seal: G = 48 was accepted");
    CHECK(refused_with(kvq_cuda_seal_pages(nullptr, dst.p, 1, 1, 0), KVQ_ERR_NULL),
          "seal: a NULL pool was accepted");
    for (auto &c : caches) kvq_cache_free(&c);
}

static void test_attend(void)
{
    const int reps[] = { 1, 3, 4, 8 };
    /* every GQA ratio from 1 to 16: NH = 1 or 4 heads per CTA, the rest as
       zero queries (2, 3, 5) or more chunks (8, 16)                        */
    for (int r : { 1, 2, 3, 4, 5, 8, 16 }) test_attend_case(POL_KIVI, 128, 2, 64, r, 4, 900);
    /* adversarial values: +-65504, subnormal scales, constant groups (keys
       divided by 64 so that scores stay finite: q.k / sqrt(D) < 2^13)      */
    kv_extreme = true;
    for (int bits : { 2, 4 })
        for (size_t G : { 32, 128 })
            test_attend_case(POL_KIVI, 128, bits, G, bits == 2 ? 1 : 4, 4, 1200);
    test_attend_case(POL_EVICT, 64, 2, 32, 3, 4, 900);
    kv_extreme = false;
    /* KIVI at every supported (B, G), both D, every GQA ratio             */
    for (int bits : { 2, 4 })
        for (size_t G : { 32, 64, 128 })
            for (size_t D : { 64, 128 })
                test_attend_case(POL_KIVI, D, bits, G, reps[rng_below(4)], 6, 700);
    for (int r : reps) test_attend_case(POL_KIVI, 128, 2, 32, r, 24, 3000);
    test_attend_case(POL_KIVI, 128, 2, 128, 4, 8, 20000);     /* many splits */
    test_attend_case(POL_KIVI, 128, 4, 32, 1, 3, 60000);
    /* the other policies on the same kernel                               */
    for (int r : { 1, 4 }) {
        test_attend_case(POL_OTT, 128, 2, 128, r, 8, 1500);
        test_attend_case(POL_OTT, 64, 4, 32, r, 8, 900);
        test_attend_case(POL_LOGQUANT, 128, 2, 64, r, 8, 1500);
        test_attend_case(POL_LOGQUANT, 64, 2, 32, r, 8, 700);
        test_attend_case(POL_EVICT, 128, 2, 32, r, 8, 1500);
        test_attend_case(POL_EVICT, 128, 4, 128, r, 8, 1500);
        test_attend_case(POL_KIVI_INT, 128, 2, 32, r, 8, 1500);
        test_attend_case(POL_KIVI_INT, 64, 4, 64, r, 8, 900);
    }
    /* the fp16 baseline: the same kernel with no pages                     */
    for (int r : reps) test_attend_case(POL_FULL, 128, 2, 32, r, 8, 5000);
    test_attend_case(POL_FULL, 64, 2, 32, 2, 5, 300);
}

/* Bad data and bad arguments for attention.                               */
static void test_attend_status(void)
{
    const size_t D = 128;
    gpu_batch b;
    kvq_cache c;
    kvq_config cfg = kvq_config_kivi(D, 2);
    std::vector<float> K, V;
    make_kv(300, D, K, V);
    kvq_cache_init(&c, &cfg);
    kvq_cache_prefill(&c, K.data(), V.data(), 300);
    kvq_cuda_export_t e;
    CHECK(kvq_cuda_export(&c, &e) == KVQ_OK, "export: %s", kvq_cuda_why());
    b.ex.push_back(e);
    /* second stream: everything dead and nothing in full precision       */
    kvq_cuda_export_t e2;
    kvq_cuda_export(&c, &e2);
    memset(e2.dead, 0xFF, ((std::max(e2.n_kq, e2.n_vq)) / 32 + 1) * 4);
    e2.n_fp = 0;
    e2.n_vq = e2.n_kq;            /* no value tail either                  */
    b.ex.push_back(e2);
    upload(b, true);
    int n_splits;
    const size_t wf = kvq_cuda_attend_workspace(2, 1, (int)D, 32, b.max_tokens, &n_splits);
    dbuf<float> dq(2 * D), dout(2 * D), dwork(wf);
    dbuf<int> dst(1);
    std::vector<float> hq(2 * D);
    for (auto &x : hq) x = rng_gauss();
    dq.up(hq.data());
    KQ(kvq_cuda_attend(&b.pool, (int)D, b.d_streams, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                       wf, dst.p, 0));
    kvq_status status = kvq_cuda_status(dst.p, 0);
    std::vector<float> got(2 * D);
    dout.down(got.data());
    CHECK(refused_with(status, KVQ_ERR_STATE), "empty stream: %s, want KVQ_ERR_STATE",
          kvq_status_str(status));
    CHECK(isnan(got[D]) && isnan(got[2 * D - 1]) && isfinite(got[0]),
          "empty stream's row must be NaN, the other finite");
    hq[7] = NAN;                  /* a NaN query -> NONFINITE beats STATE   */
    dq.up(hq.data());
    KQ(kvq_cuda_attend(&b.pool, (int)D, b.d_streams, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                       wf, dst.p, 0));
    status = kvq_cuda_status(dst.p, 0);
    dout.down(got.data());
    CHECK(refused_with(status, KVQ_ERR_NONFINITE), "NaN q: %s", kvq_status_str(status));
    CHECK(isnan(got[0]), "NaN q: row must be NaN");
    /* bad arguments                                                        */
    kvq_cuda_pool bad = b.pool;
    bad.bits = 3;
    CHECK(refused_with(kvq_cuda_attend(&bad, (int)D, b.d_streams, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                          wf, dst.p, 0), KVQ_ERR_BITS), "bits=3 accepted");
    bad = b.pool; bad.value_group = 48;
    CHECK(refused_with(kvq_cuda_attend(&bad, (int)D, b.d_streams, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                          wf, dst.p, 0), KVQ_ERR_GROUP), "Gv=48 accepted");
    CHECK(refused_with(kvq_cuda_attend(&b.pool, 96, b.d_streams, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                          wf, dst.p, 0), KVQ_ERR_SIZE), "D=96 accepted");
    CHECK(refused_with(kvq_cuda_attend(&b.pool, (int)D, b.d_streams, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                          wf - 1, dst.p, 0), KVQ_ERR_CAPACITY), "small workspace accepted");
    CHECK(refused_with(kvq_cuda_attend(&b.pool, (int)D, nullptr, 2, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                          wf, dst.p, 0), KVQ_ERR_NULL), "NULL streams accepted");
    CHECK(refused_with(kvq_cuda_attend(&b.pool, (int)D, b.d_streams, 0, 1, b.max_tokens, dq.p, dout.p, dwork.p,
                          wf, dst.p, 0), KVQ_ERR_SIZE), "0 streams accepted");
    /* export refuses what the kernel cannot read                           */
    kvq_cache hf;
    kvq_config hcfg = kvq_config_hf(D, kvq_hf_defaults(2));
    kvq_cache_init(&hf, &hcfg);
    kvq_cache_prefill(&hf, K.data(), V.data(), 300);
    kvq_cuda_export_t e3;         /* per-token keys: the token layout (attend-format's HF cases) */
    const kvq_status st_hf = kvq_cuda_export(&hf, &e3);
    CHECK(st_hf == KVQ_OK && e3.layout == KVQ_CUDA_LAYOUT_TOKEN,
          "export of a per-token-key (HF) cache: %s (%s), want the token layout", kvq_status_str(st_hf),
          kvq_cuda_why());
    if (st_hf == KVQ_OK) kvq_cuda_export_free(&e3);
    kvq_cache k8;                 /* B = 8 is quantized on the GPU, not attended */
    kvq_config c8 = kvq_config_kivi(D, 8);
    kvq_cache_init(&k8, &c8);
    kvq_cache_prefill(&k8, K.data(), V.data(), 300);
    CHECK(refused_with(kvq_cuda_export(&k8, &e3), KVQ_ERR_CONFIG),
          "export of an 8-bit cache must be refused with a reason");
    kvq_cache nv;                 /* a format of kvq.h Sec. 4.1 whose axes and
                                     width the kernel would otherwise take  */
    kvq_config cnv = kvq_config_kivi(D, 4);
    cnv.key_format = cnv.value_format = KVQ_FORMAT_NVFP4;
    cnv.group = cnv.value_group = 16;
    cnv.residual = 32;
    cnv.key_scale = cnv.value_scale = 0.01f;
    CHECK(kvq_cache_init(&nv, &cnv) == KVQ_OK, "an NVFP4 KIVI cache: %s", kvq_why());
    kvq_cache_prefill(&nv, K.data(), V.data(), 300);
    CHECK(refused_with(kvq_cuda_export(&nv, &e3), KVQ_ERR_CONFIG),
          "export of an NVFP4 cache must be refused with a reason");
    kvq_cache_free(&nv);
    kvq_cache_free(&k8);
    kvq_cache_free(&hf);
    kvq_cache_free(&c);
}

/* Split count must not change the result beyond rounding.                 */
static void test_attend_splits(void)
{
    const size_t D = 128, n = 4;
    gpu_batch b;
    std::vector<kvq_cache> caches(n);
    for (size_t i = 0; i < n; i++) {
        kvq_config cfg = kvq_config_kivi(D, 2);
        std::vector<float> K, V;
        make_kv(5000 + 37 * i, D, K, V);
        kvq_cache_init(&caches[i], &cfg);
        kvq_cache_prefill(&caches[i], K.data(), V.data(), 5000 + 37 * i);
        kvq_cuda_export_t e;
        KQ(kvq_cuda_export(&caches[i], &e));
        b.ex.push_back(e);
    }
    upload(b, true);
    std::vector<float> hq(n * 4 * D), o1(hq.size()), o2(hq.size());
    for (auto &x : hq) x = rng_gauss();
    dbuf<float> dq(hq.size()), dout(hq.size());
    dbuf<int> dst(1);
    dq.up(hq.data());
    /* pass 0: 1 split; 1: the planned many                               */
    for (int pass = 0; pass < 2; pass++) {
        const size_t mt = pass ? b.max_tokens : 64;
        int sp;
        const size_t wf = kvq_cuda_attend_workspace(n, 4, (int)D, 32, mt, &sp);
        dbuf<float> dwork(wf);
        CU(cudaMemset(dout.p, 0xFF, dout.n * sizeof(float)));    /* NaN poison */
        KQ(kvq_cuda_attend(&b.pool, (int)D, b.d_streams, n, 4, mt, dq.p, dout.p, dwork.p, wf,
                           dst.p, 0));
        CU(cudaDeviceSynchronize());
        dout.down(pass == 0 ? o1.data() : o2.data());
        printf("  splits pass %d: %d splits planned\n", pass, sp);
    }
    const double rel = rel_l2(o2.data(), o1.data(), o1.size());
    CHECK(rel < 1e-5, "1 split vs many: rel diff %.3g", rel);
    for (auto &c : caches) kvq_cache_free(&c);
}

/* ======================================================================== */
/* compaction                                                               */
/* ======================================================================== */
/* Global slot index of slot i of a sequence.                               */
static int64_t gslot(const kvq_pages *P, const kvq_pseq *S, size_t i)
{
    return (int64_t)S->table[i / P->block_tokens] * (int64_t)P->block_tokens +
           (int64_t)(i % P->block_tokens);
}

static void test_compaction_round(bool holefill)
{
    const size_t n_blocks = 64, bt = 16, slot_bytes = 96;  /* a 2-bit K+V token, D=128 */
    kvq_pages real, shadow;
    kvq_pseq rs, ss;
    CHECK(kvq_pages_init(&real, n_blocks, bt, slot_bytes) == KVQ_OK, "pages");
    CHECK(kvq_pages_init(&shadow, n_blocks, bt, 8) == KVQ_OK, "pages");
    kvq_pseq_init(&rs); kvq_pseq_init(&ss);
    std::vector<unsigned char> payload(slot_bytes);
    const size_t n = 300 + rng_below(300);
    for (size_t i = 0; i < n; i++) {
        for (auto &x : payload) x = (unsigned char)rng_u64();
        int64_t zero = 0;
        kvq_pseq_append(&real, &rs, (int32_t)i, payload.data());
        kvq_pseq_append(&shadow, &ss, (int32_t)i, &zero);
    }
    /* evict a random ~40%, with whole dead runs so blocks can free        */
    std::vector<uint8_t> keep(rs.n_slots);
    for (size_t i = 0; i < keep.size(); i++) keep[i] = (i / 40) % 3 == 1 ? 0 : rng_below(5) != 0;
    kvq_page_stats st;
    kvq_pseq_evict(&real, &rs, keep.data(), keep.size(), &st);
    kvq_pseq_evict(&shadow, &ss, keep.data(), keep.size(), &st);
    /* the device gets the pool as it is now                                */
    dbuf<unsigned char> dpool(n_blocks * bt * slot_bytes);
    dpool.up(real.data);
    /* tag every shadow slot with its own global index, then compact both  */
    for (size_t i = 0; i < ss.n_slots; i++) {
        int64_t g = gslot(&shadow, &ss, i);
        memcpy(kvq_pseq_slot(&shadow, &ss, i), &g, 8);
    }
    const size_t round_start = (rs.n_slots / 2) / bt * bt;
    kvq_status a, c;
    if (holefill) {
        a = kvq_pseq_holefill(&real, &rs, 0, round_start, &st);
        c = kvq_pseq_holefill(&shadow, &ss, 0, round_start, &st);
    } else {
        a = kvq_pseq_repack(&real, &rs, 0, &st);
        c = kvq_pseq_repack(&shadow, &ss, 0, &st);
    }
    CHECK(a == KVQ_OK && c == KVQ_OK, "compaction failed");
    CHECK(rs.n_slots == ss.n_slots, "shadow diverged");
    std::vector<int64_t> src, dst;
    for (size_t i = 0; i < ss.n_slots; i++) {
        if (!ss.alive[i]) continue;
        int64_t from;
        memcpy(&from, kvq_pseq_slot(&shadow, &ss, i), 8);
        const int64_t to = gslot(&shadow, &ss, i);
        if (from != to) { src.push_back(from); dst.push_back(to); }
    }
    dbuf<int64_t> dsrc(src.size()), ddst(dst.size());
    dbuf<unsigned char> dtemp(src.size() * slot_bytes);
    dsrc.up(src.data()); ddst.up(dst.data());
    KQ(kvq_cuda_move_slots(dpool.p, n_blocks * bt, slot_bytes, dsrc.p, ddst.p, src.size(),
                           dtemp.p, 0));
    CU(cudaDeviceSynchronize());
    std::vector<unsigned char> got(dpool.n);
    dpool.down(got.data());
    size_t mismatch = 0, live = 0;
    for (size_t i = 0; i < rs.n_slots; i++) {
        if (!rs.alive[i]) continue;
        live++;
        const int64_t g = gslot(&real, &rs, i);
        mismatch += memcmp(&got[(size_t)g * slot_bytes], kvq_pseq_slot(&real, &rs, i), slot_bytes) != 0;
    }
    CHECK(mismatch == 0 && live > 0, "%s: %zu of %zu live slots differ from the CPU (moves %zu)",
          holefill ? "hole-filling" : "repack", mismatch, live, src.size());
    printf("  %-12s %zu slots, %zu live, %zu moves, all equal to the CPU: %s\n",
           holefill ? "hole-filling" : "repack", n, live, src.size(), mismatch ? "no" : "yes");
    kvq_pseq_free(&real, &rs); kvq_pseq_free(&shadow, &ss);
    kvq_pages_free(&real); kvq_pages_free(&shadow);
}

/* Overlapping moves (a rotation and clones) vs a host model that reads the
   old contents for every move: the definition of gather-clone-scatter.   */
static void test_move_overlap(void)
{
    const size_t n_slots = 1000, sb = 12;
    std::vector<uint32_t> pool(n_slots * sb / 4);
    for (auto &x : pool) x = (uint32_t)rng_u64();
    std::vector<int64_t> src, dst;
    for (size_t i = 0; i < 500; i++) { src.push_back((int64_t)((i + 1) % 500)); dst.push_back((int64_t)i); }
    src.push_back(3); dst.push_back(700);       /* a clone of slot 3        */
    std::vector<uint32_t> want = pool;
    for (size_t m = 0; m < src.size(); m++)
        memcpy(&want[dst[m] * sb / 4], &pool[src[m] * sb / 4], sb);
    dbuf<uint32_t> dp(pool.size());
    dbuf<int64_t> ds(src.size()), dd(dst.size());
    dbuf<unsigned char> dt(src.size() * sb);
    dp.up(pool.data()); ds.up(src.data()); dd.up(dst.data());
    KQ(kvq_cuda_move_slots(dp.p, n_slots, sb, ds.p, dd.p, src.size(), dt.p, 0));
    CU(cudaDeviceSynchronize());
    std::vector<uint32_t> got(pool.size());
    dp.down(got.data());
    CHECK(got == want, "overlapping moves differ from gather-then-scatter");
    CHECK(refused_with(kvq_cuda_move_slots(dp.p, n_slots, 10, ds.p, dd.p, 3, dt.p, 0), KVQ_ERR_SIZE),
          "slot_bytes=10 accepted");
    CHECK(refused_with(kvq_cuda_move_slots(dp.p, 2, 12, ds.p, dd.p, 3, dt.p, 0), KVQ_ERR_CAPACITY),
          "more moves than slots accepted");
}

/* ======================================================================== */
/* quantizing straight into fragment order (kvq_cuda_quantize_sealed)       */
/* ======================================================================== */
/* A pool of n_pool pages of one shape on the device, every byte poisoned,
   and its arrays read back.                                              */
struct frag_pool {
    kvq_cuda_pool pool = {};
    size_t kw, vw, vs;                         /* page strides (words, sz)  */
    dbuf<uint32_t> k_words, v_words;
    dbuf<kvq_sz> k_sz, v_sz;
    std::vector<uint32_t> hkw, hvw;
    std::vector<kvq_sz> hks, hvs;
    frag_pool(int D, int G, int Gv, int B, kvq_zero_mode mode, size_t n_pool)
        : kw(kvq_cuda__kw_stride(D, G, B)), vw(kvq_cuda__vw_stride(D, G, B)),
          vs(kvq_cuda__vs_stride(D, G, Gv)), k_words(n_pool * kw), v_words(n_pool * vw),
          k_sz(n_pool * D), v_sz(n_pool * vs)
    {
        k_words.poison(); v_words.poison(); k_sz.poison(); v_sz.poison();
        pool.k_words = k_words.p; pool.v_words = v_words.p;
        pool.k_sz = k_sz.p; pool.v_sz = v_sz.p;
        pool.n_pages = n_pool;
        pool.head_dim = D; pool.group = G; pool.value_group = Gv; pool.bits = B;
        pool.zero_mode = mode;
    }
    void down(void)
    {
        CU(cudaDeviceSynchronize());
        hkw.resize(k_words.n); hvw.resize(v_words.n); hks.resize(k_sz.n); hvs.resize(v_sz.n);
        k_words.down(hkw.data()); v_words.down(hvw.data());
        k_sz.down(hks.data()); v_sz.down(hvs.data());
    }
    /* bytes of pool page p still poisoned, every array                   */
    size_t untouched(size_t p) const
    {
        const int D = pool.head_dim;
        size_t n = 0;
        for (size_t i = 0; i < kw; i++) n += hkw[p * kw + i] == 0xABABABABu;
        for (size_t i = 0; i < vw; i++) n += hvw[p * vw + i] == 0xABABABABu;
        for (size_t i = 0; i < (size_t)D; i++) n += hks[p * D + i].scale == 0xABABu;
        for (size_t i = 0; i < vs; i++) n += hvs[p * vs + i].scale == 0xABABu;
        return n;
    }
    size_t page_items(void) const { return kw + vw + pool.head_dim + vs; }
};

/* n full pages of fp16 rows of one input family through
   kvq_cuda_quantize_sealed into shuffled pages of a larger pool, against
   kvq.h: kvq_quantize_matrix on each side (keys per channel, values per
   token), permuted by kvq_cuda_fragment_page, byte for byte; each code
   also read back through the inverse map (kvq_mma_code_at: not the
   gather the kernel runs). Bad data: kvq.h's status, nothing written.   */
static void test_sealed_case(int D, int B, int G, int Gv, kvq_zero_mode mode, int kind, size_t n,
                             int validate = 1)
{
    const size_t T = n * G, n_pool = n + 2, nw = (size_t)D * G * B / 32;
    std::vector<kvq_f16> hk(T * D), hv(T * D);
    fill_input(hk, T, D, kind);
    fill_input(hv, T, D, kind == IN_NAN || kind == IN_INF ? IN_GAUSS : kind);   /* one bad side */
    std::vector<float> fk(T * D), fv(T * D);
    for (size_t i = 0; i < T * D; i++) { fk[i] = kvq_f16_to_f32(hk[i]); fv[i] = kvq_f16_to_f32(hv[i]); }
    frag_pool P(D, G, Gv, B, mode, n_pool);
    std::vector<uint32_t> ck(n * P.kw), cv(n * P.vw);
    std::vector<kvq_sz> cks(n * D), cvs(n * P.vs);
    const kvq_status sk = kvq_quantize_matrix(fk.data(), T, D, B, G, KVQ_PER_CHANNEL, mode, ck.data(), cks.data());
    const kvq_status sv = kvq_quantize_matrix(fv.data(), T, D, B, Gv, KVQ_PER_TOKEN, mode, cv.data(), cvs.data());
    const kvq_status want = sk != KVQ_OK && (sv == KVQ_OK || sk < sv) ? sk : sv;
    const std::vector<int32_t> ids = shuffled_ids(n, n_pool);
    dbuf<__half> dk(T * D), dv(T * D);
    dbuf<int32_t> dids(n);
    dbuf<int> dst(1);
    dk.up(reinterpret_cast<const __half *>(hk.data()));
    dv.up(reinterpret_cast<const __half *>(hv.data()));
    dids.up(ids.data());
    KQ(kvq_cuda_quantize_sealed(&P.pool, dk.p, dv.p, n, dids.p, dst.p, validate, 0));
    const kvq_status got = kvq_cuda_status(dst.p, 0);
    P.down();
    CHECK(got == want, "sealed quantize D=%d B=%d G=%d Gv=%d mode=%d kind=%d: status %s, kvq.h %s",
          D, B, G, Gv, (int)mode, kind, kvq_status_str(got), kvq_status_str(want));
    size_t poisoned = 0;
    for (size_t p = 0; p < n_pool; p++) poisoned += P.untouched(p);
    if (want != KVQ_OK) {
        CHECK(poisoned == n_pool * P.page_items(), "sealed quantize wrote %zu words and scales on "
              "failure", n_pool * P.page_items() - poisoned);
        return;
    }
    CHECK(poisoned == 2 * P.page_items(), "sealed quantize: the two pages no input maps to hold "
          "%zu poisoned items of %zu", poisoned, 2 * P.page_items());
    std::vector<uint32_t> fk_ref(nw), fv_ref(nw);
    size_t bad_words = 0, bad_sz = 0, bad_codes = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t o = (size_t)ids[i];
        const uint32_t *gk = &P.hkw[o * P.kw], *gv = &P.hvw[o * P.vw];
        kvq_cuda_fragment_page(&ck[i * nw], &cv[i * nw], D, G, B, fk_ref.data(), fv_ref.data());
        bad_words += memcmp(gk, fk_ref.data(), nw * 4) != 0 || memcmp(gv, fv_ref.data(), nw * 4) != 0;
        bad_sz += memcmp(&P.hks[o * D], &cks[i * D], D * sizeof(kvq_sz)) != 0 ||
                  memcmp(&P.hvs[o * P.vs], &cvs[i * P.vs], P.vs * sizeof(kvq_sz)) != 0;
        for (int t = 0; t < G; t++)
            for (int d = 0; d < D; d++)
                bad_codes += kvq_mma_code_at(gk, D, B, 0, t, d) !=
                                 kvq_dev_get_code(&ck[i * nw + (size_t)d * (G * B / 32)], (uint32_t)t, B) ||
                             kvq_mma_code_at(gv, D, B, 1, t, d) !=
                                 kvq_dev_get_code(&cv[i * nw + (size_t)t * (D * B / 32)], (uint32_t)d, B);
    }
    CHECK(bad_words == 0 && bad_sz == 0 && bad_codes == 0,
          "sealed quantize D=%d B=%d G=%d Gv=%d mode=%d kind=%d: of %zu pages %zu differ from "
          "kvq_cuda_fragment_page, %zu in scales/zeros; %zu codes misplaced", D, B, G, Gv, (int)mode,
          kind, n, bad_words, bad_sz, bad_codes);
}

/* A KIVI cache of random length built on the CPU from fp16 rows, exported
   and sealed on the host (kvq_cuda_export_fragment), against the same
   rows quantized on the device the way a decode loop would: the sealed
   pages by kvq_cuda_quantize_sealed, the page still filling by
   kvq_cuda_quantize (its key unit if quantized, its values token by
   token into the page's slots). Every quantized byte must be the
   export's.                                                              */
static size_t sealed_seen = 0, partial_seen = 0;   /* pages test_sealed_export compared */
static void test_sealed_export(int pol, int D, int B, int G, int Gv, size_t max_len)
{
    kvq_config cfg = make_config(pol, D, B, G);
    if (Gv) cfg.value_group = Gv;
    const size_t T = 1 + rng_below(max_len), pre = T / 2;
    std::vector<float> K, V;
    make_kv(T, D, K, V);
    for (auto &x : K) x = kvq_f16_to_f32(kvq_f32_to_f16(x));   /* rows the cache keeps as fp16 */
    for (auto &x : V) x = kvq_f16_to_f32(kvq_f32_to_f16(x));
    kvq_cache c;
    kvq_cuda_export_t e;
    bool ok = kvq_cache_init(&c, &cfg) == KVQ_OK;
    ok = ok && (pre == 0 || kvq_cache_prefill(&c, K.data(), V.data(), pre) == KVQ_OK);
    for (size_t t = pre; t < T && ok; t++) ok = kvq_cache_append(&c, &K[t * D], &V[t * D]) == KVQ_OK;
    CHECK(ok, "sealed export: building the cache failed: %s", kvq_why());
    if (!ok) return;
    KQ(kvq_cuda_export(&c, &e));
    KQ(kvq_cuda_export_fragment(&e));
    Gv = e.value_group;
    const size_t n_kq = e.n_kq, n_vq = e.n_vq, sealed = std::min(n_kq, n_vq) / G;
    const size_t nw = (size_t)D * G * B / 32, wpt = (size_t)D * B / 32, gpt = (size_t)D / Gv;
    /* the rows in slot order, as a decode loop holds them                  */
    std::vector<kvq_f16> hk(std::max<size_t>(n_kq, 1) * D), hv(std::max<size_t>(n_vq, 1) * D);
    for (size_t s = 0; s < n_kq; s++)
        for (int d = 0; d < D; d++) hk[s * D + d] = kvq_f32_to_f16(K[(size_t)c.k.qpos[s] * D + d]);
    for (size_t s = 0; s < n_vq; s++)
        for (int d = 0; d < D; d++) hv[s * D + d] = kvq_f32_to_f16(V[(size_t)c.v.qpos[s] * D + d]);
    frag_pool P(D, G, Gv, B, e.zero_mode, e.n_pages + 3);
    const std::vector<int32_t> ids = shuffled_ids(e.n_pages, P.pool.n_pages);
    dbuf<__half> dk(hk.size()), dv(hv.size());
    dbuf<int32_t> dids(ids.size());
    dbuf<int> dst(1);
    dk.up(reinterpret_cast<const __half *>(hk.data()));
    dv.up(reinterpret_cast<const __half *>(hv.data()));
    dids.up(ids.data());
    kvq_status st = KVQ_OK;
    KQ(kvq_cuda_quantize_sealed(&P.pool, dk.p, dv.p, sealed, dids.p, dst.p, 1, 0));
    if (st == KVQ_OK) st = kvq_cuda_status(dst.p, 0);
    const size_t k_units = n_kq / G - sealed;            /* key units of unsealed pages */
    if (k_units) {
        KQ(kvq_cuda_quantize(dk.p + sealed * G * D, k_units * G, D, B, G, KVQ_PER_CHANNEL, e.zero_mode,
                             dids.p + sealed, P.pool.k_words, P.pool.k_sz, dst.p, 1, 0));
        if (st == KVQ_OK) st = kvq_cuda_status(dst.p, 0);
    }
    if (n_vq > sealed * G) {                             /* values: token slots of their pages */
        std::vector<int32_t> slot_of(n_vq - sealed * G);
        for (size_t s = sealed * G; s < n_vq; s++) slot_of[s - sealed * G] = ids[s / G] * G + (int32_t)(s % G);
        dbuf<int32_t> dslot(slot_of.size());
        dslot.up(slot_of.data());
        KQ(kvq_cuda_quantize(dv.p + sealed * G * D, n_vq - sealed * G, D, B, Gv, KVQ_PER_TOKEN,
                             e.zero_mode, dslot.p, P.pool.v_words, P.pool.v_sz, dst.p, 1, 0));
        if (st == KVQ_OK) st = kvq_cuda_status(dst.p, 0);
    }
    P.down();
    size_t bad = 0;
    for (size_t p = 0; p < e.n_pages; p++) {
        const size_t o = (size_t)ids[p];
        if (p < n_kq / G)                                /* the key unit, sealed or not */
            bad += memcmp(&P.hkw[o * nw], e.k_words + p * nw, nw * 4) != 0 ||
                   memcmp(&P.hks[o * D], e.k_sz + p * D, D * sizeof(kvq_sz)) != 0;
        if (p < sealed)                                  /* the whole value page */
            bad += memcmp(&P.hvw[o * nw], e.v_words + p * nw, nw * 4) != 0;
        else                                             /* each quantized token */
            for (size_t t = 0; t < (size_t)G && p * G + t < n_vq; t++)
                bad += memcmp(&P.hvw[o * nw + t * wpt], e.v_words + p * nw + t * wpt, wpt * 4) != 0;
        const size_t vq_here = std::min<size_t>(G, n_vq > p * G ? n_vq - p * G : 0);
        bad += memcmp(&P.hvs[o * P.vs], e.v_sz + p * P.vs, vq_here * gpt * sizeof(kvq_sz)) != 0;
    }
    sealed_seen += sealed;
    partial_seen += e.n_pages - sealed;
    CHECK(st == KVQ_OK && bad == 0, "sealed export %s D=%d B=%d G=%d Gv=%d T=%zu (%zu sealed pages "
          "of %zu, n_kq %zu, n_vq %zu): %s, %zu parts differ from kvq_cuda_export_fragment",
          pol_name[pol], D, B, G, Gv, T, sealed, e.n_pages, n_kq, n_vq, kvq_status_str(st), bad);
    kvq_cuda_export_free(&e);
    kvq_cache_free(&c);
}

static void test_quantize_sealed(void)
{
    /* every shape the exporter and the tensor cores share, value groups
       from the smallest whole-word group to D, both zero modes            */
    size_t n_cases = 0;
    for (int D : { 64, 128 })
        for (int B : { 2, 4 })
            for (int G : { 32, 64, 128 }) {
                const int Gv = (int)(32 / B) << rng_below(B == 2 ? 3 : 4);   /* 16..64 or 8..64 */
                test_sealed_case(D, B, G, Gv, n_cases % 2 ? KVQ_ZERO_INT : KVQ_ZERO_FLOAT, IN_GAUSS,
                                 1 + rng_below(3));
                /* KIVI's window holds R = 128 tokens: longer streams seal more pages */
                test_sealed_export(n_cases % 2 ? POL_KIVI_INT : POL_KIVI, D, B, G, 0,
                                   quick_mode ? 128 + 3 * G : 128 + 6 * G + 40);
                test_sealed_export(POL_KIVI, D, B, G, Gv, 128 + 3 * G);
                n_cases++;
            }
    /* adversarial rows: constant groups, +-65504 and subnormals (scales
       at both ends of fp16), ties, a NaN or an Inf (refused, nothing
       written), a range whose 1-bit scale would overflow (fine at B >= 2) */
    for (int kind = IN_GAUSS; kind <= IN_HUGE; kind++)
        for (kvq_zero_mode m : { KVQ_ZERO_FLOAT, KVQ_ZERO_INT }) {
            test_sealed_case(128, 2, 128, 32, m, kind, 2);
            test_sealed_case(64, 4, 32, 16, m, kind, 3);
        }
    CHECK(sealed_seen >= n_cases && partial_seen >= n_cases / 2,
          "sealed export: only %zu sealed and %zu partial pages compared", sealed_seen, partial_seen);
    printf("  sealed quantize: %zu shapes; %zu sealed pages and %zu pages still filling equal to "
           "kvq_cuda_export_fragment's\n", n_cases, sealed_seen, partial_seen);
    /* refusals: a reason, nothing launched or written                      */
    frag_pool P(64, 32, 32, 2, KVQ_ZERO_FLOAT, 2);
    dbuf<__half> dx(64 * 64);
    dbuf<int> dst(1);
    kvq_cuda_pool bad = P.pool;
    CHECK(refused_with(kvq_cuda_quantize_sealed(nullptr, dx.p, dx.p, 1, nullptr, dst.p, 1, 0), KVQ_ERR_NULL) &&
          refused_with(kvq_cuda_quantize_sealed(&P.pool, dx.p, nullptr, 1, nullptr, dst.p, 1, 0), KVQ_ERR_NULL) &&
          refused_with(kvq_cuda_quantize_sealed(&P.pool, dx.p, dx.p, 1, nullptr, nullptr, 1, 0), KVQ_ERR_NULL),
          "sealed quantize: a NULL argument was accepted");
    bad.v_sz = nullptr;
    CHECK(refused_with(kvq_cuda_quantize_sealed(&bad, dx.p, dx.p, 1, nullptr, dst.p, 1, 0), KVQ_ERR_NULL),
          "sealed quantize: a pool without v_sz was accepted");
    bad = P.pool; bad.group = 48;
    CHECK(refused_with(kvq_cuda_quantize_sealed(&bad, dx.p, dx.p, 1, nullptr, dst.p, 1, 0), KVQ_ERR_CONFIG),
          "sealed quantize: G = 48 was accepted");
    bad = P.pool; bad.bits = 8;
    CHECK(refused_with(kvq_cuda_quantize_sealed(&bad, dx.p, dx.p, 1, nullptr, dst.p, 1, 0), KVQ_ERR_CONFIG),
          "sealed quantize: B = 8 was accepted");
    bad = P.pool; bad.value_group = 8;                   /* 16 bits: not a word */
    CHECK(refused_with(kvq_cuda_quantize_sealed(&bad, dx.p, dx.p, 1, nullptr, dst.p, 1, 0), KVQ_ERR_CONFIG),
          "sealed quantize: Gv = 8 at B = 2 was accepted");
    CHECK(refused_with(kvq_cuda_quantize_sealed(&P.pool, dx.p, dx.p, 3, nullptr, dst.p, 1, 0), KVQ_ERR_CAPACITY),
          "sealed quantize: 3 pages into a pool of 2 were accepted");
    CHECK(refused_with(kvq_cuda_quantize_sealed(&P.pool, dx.p, dx.p, (size_t)1 << 40, nullptr, dst.p, 1, 0), KVQ_ERR_OVERFLOW),
          "sealed quantize: 2^40 pages were accepted");
    P.down();
    CHECK(P.untouched(0) + P.untouched(1) == 2 * P.page_items(), "refused sealed quantize calls wrote to the pool");
}

/* ======================================================================== */
/* compaction of sealed pages (kvq_cuda_compact_plan, kvq_cuda_move_pages)  */
/* ======================================================================== */
/* A KIVI cache loses whole sealed pages (and, if `scattered`, a sixth of
   its other tokens), is exported in fragment order into a shuffled pool,
   and compacted twice: on the host by kvq_cache_compact (kvq.h Sec. 11),
   and on the device by kvq_cuda_compact_plan + kvq_cuda_move_pages, the
   surviving pages repacked into pool pages 0.. (moves that overlap). Then:
     every live position: its key slot is kvq.h's, its key and value codes
       (read through the inverse fragment map on sealed pages) and scales
       are the host's compacted cache's, its dead bit clear; no dead slot
       comes back to life;
     whole pages only: the compacted cache re-exported and sealed on the
       host is byte for byte the device's pool, dead bits and counts too;
     attention over the compacted pool (tensor cores + Sec. 4's kernel)
       within ATTN_TOL of the float64 oracle over the compacted cache.    */
static void test_compact_case(size_t D, int B, size_t G, bool scattered, int n_rep)
{
    kvq_config cfg = make_config(POL_KIVI, D, B, G);
    const size_t T = 128 + (quick_mode ? 4 : 7) * G + rng_below(G);
    std::vector<float> K, V;
    make_kv(T, D, K, V);
    kvq_cache c;
    bool ok = kvq_cache_init(&c, &cfg) == KVQ_OK && kvq_cache_prefill(&c, K.data(), V.data(), T / 2) == KVQ_OK;
    for (size_t t = T / 2; t < T && ok; t++) ok = kvq_cache_append(&c, &K[t * D], &V[t * D]) == KVQ_OK;
    CHECK(ok, "compact: building the cache failed: %s", kvq_why());
    if (!ok) return;
    /* evict: every third sealed page whole (at least one), and scattered  */
    const size_t sealed0 = std::min(c.k.n_units * G, c.v.n_units) / G;
    std::vector<uint8_t> keep(c.n_pos, 1);
    size_t pages_killed = 0;
    for (size_t p = 0; p < sealed0; p++)
        if (rng_below(3) == 0 || (p == sealed0 / 2 && pages_killed == 0)) {
            for (size_t t = 0; t < G; t++) keep[(size_t)c.k.qpos[p * G + t]] = 0;
            pages_killed++;
        }
    if (scattered)
        for (auto &k : keep) k = k && rng_below(6) != 0;
    KQ((kvq_status)(kvq_cache_evict(&c, keep.data(), keep.size(), NULL) == KVQ_OK ? KVQ_OK : KVQ_ERR_STATE));
    std::vector<uint32_t> old_kslot(c.n_pos, UINT32_MAX);       /* before compaction */
    for (size_t p = 0; p < c.n_pos; p++)
        if (KVQ_LOC_TAG(c.k.loc[p]) == KVQ_LOC_QUANT) old_kslot[p] = (uint32_t)KVQ_LOC_INDEX(c.k.loc[p]);
    gpu_batch b;
    kvq_cuda_export_t e;
    KQ(kvq_cuda_export(&c, &e));
    KQ(kvq_cuda_export_fragment(&e));
    b.ex.push_back(e);
    upload(b, true);
    /* the device: plan on the host, then repack into pool pages 0 ..      */
    const size_t n_slots0 = std::max(e.n_kq, e.n_vq);
    std::vector<uint32_t> dead(e.dead, e.dead + n_slots0 / 32 + 1);
    uint32_t n_kq = e.n_kq, n_vq = e.n_vq;
    std::vector<int32_t> kept(e.n_pages + 1);
    size_t n_kept = 0;
    KQ(kvq_cuda_compact_plan(dead.data(), &n_kq, &n_vq, (int)G, kept.data(), &n_kept));
    std::vector<int64_t> src, dst;
    for (size_t i = 0; i < n_kept; i++)
        if (b.tables[0][(size_t)kept[i]] != (int32_t)i) { src.push_back(b.tables[0][(size_t)kept[i]]); dst.push_back((int64_t)i); }
    dbuf<int64_t> dsrc(src.size()), ddst(dst.size());
    dbuf<unsigned char> dtemp(std::max<size_t>(src.size(), 1) * D * G * B / 8);
    dsrc.up(src.data()); ddst.up(dst.data());
    KQ(kvq_cuda_move_pages(&b.pool, dsrc.p, ddst.p, src.size(), dtemp.p, 0));
    /* the host                                                            */
    kvq_compact_stats cst;
    KQ((kvq_status)(kvq_cache_compact(&c, G, &cst) == KVQ_OK ? KVQ_OK : KVQ_ERR_STATE));
    const size_t nw = D * G * B / 32, vs = kvq_cuda__vs_stride((int)D, (int)G, e.value_group);
    const size_t gpt = D / e.value_group, wpk = G * B / 32, wpv = D * B / 32;
    std::vector<uint32_t> kw(b.pool.n_pages * nw), vw(b.pool.n_pages * nw);
    std::vector<kvq_sz> ks(b.pool.n_pages * D), vsz(b.pool.n_pages * vs);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(kw.data(), b.pool.k_words, kw.size() * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(vw.data(), b.pool.v_words, vw.size() * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(ks.data(), b.pool.k_sz, ks.size() * sizeof(kvq_sz), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(vsz.data(), b.pool.v_sz, vsz.size() * sizeof(kvq_sz), cudaMemcpyDeviceToHost));
    const size_t sealed = std::min(n_kq, n_vq) / G;
    size_t bad = 0, live = 0, live_slots = 0;
    for (size_t p = 0; p < c.n_pos; p++) {
        if (old_kslot[p] == UINT32_MAX) continue;               /* not a quantized key */
        const size_t i = std::find(kept.begin(), kept.begin() + n_kept, (int32_t)(old_kslot[p] / G)) - kept.begin();
        const size_t slot = i * G + old_kslot[p] % G, t = slot % G;
        live++;
        bad += i == n_kept || KVQ_LOC_INDEX(c.k.loc[p]) != slot || ((dead[slot / 32] >> (slot % 32)) & 1u);
        if (i == n_kept) continue;
        const uint32_t *kp = &kw[i * nw], *vp = &vw[i * nw];
        const size_t hu = slot / G;                             /* host key unit */
        for (size_t d = 0; d < D; d++)
            bad += (i < sealed ? kvq_mma_code_at(kp, (int)D, B, 0, (int)t, (int)d)
                               : kvq_dev_get_code(kp + d * wpk, (uint32_t)t, B)) !=
                   kvq_dev_get_code(c.k.words + (hu * D + d) * wpk, (uint32_t)t, B);
        bad += memcmp(&ks[i * D], c.k.sz + hu * D, D * sizeof(kvq_sz)) != 0;
        if (slot >= n_vq) continue;                             /* its value in full precision */
        const size_t hv = KVQ_LOC_INDEX(c.v.loc[p]);            /* host value unit (a token) */
        bad += KVQ_LOC_TAG(c.v.loc[p]) != KVQ_LOC_QUANT;
        for (size_t d = 0; d < D; d++)
            bad += (i < sealed ? kvq_mma_code_at(vp, (int)D, B, 1, (int)t, (int)d)
                               : kvq_dev_get_code(vp + t * wpv, (uint32_t)d, B)) !=
                   kvq_dev_get_code(c.v.words + hv * wpv, (uint32_t)d, B);
        bad += memcmp(&vsz[i * vs + t * gpt], c.v.sz + hv * gpt, gpt * sizeof(kvq_sz)) != 0;
    }
    for (size_t s2 = 0; s2 < n_kq; s2++) live_slots += !((dead[s2 / 32] >> (s2 % 32)) & 1u);
    CHECK(bad == 0 && live_slots == live && n_kept + pages_killed == e.n_pages,
          "compact D=%zu B=%d G=%zu%s: %zu of %zu live positions differ from kvq_cache_compact's, "
          "%zu live key slots, %zu of %zu pages kept (%zu killed)", D, B, G, scattered ? " scattered" : "",
          bad, live, live_slots, n_kept, e.n_pages, pages_killed);
    if (!scattered) {                /* the compacted cache, exported and sealed */
        kvq_cuda_export_t e2;
        KQ(kvq_cuda_export(&c, &e2));
        KQ(kvq_cuda_export_fragment(&e2));
        size_t differ = e2.n_pages != n_kept || e2.n_kq != n_kq || e2.n_vq != n_vq;
        for (size_t s2 = 0; s2 < std::max(n_kq, n_vq) && !differ; s2++)
            differ += ((e2.dead[s2 / 32] ^ dead[s2 / 32]) >> (s2 % 32)) & 1u;
        for (size_t i = 0; i < n_kept && !differ; i++) {
            differ += i < n_kq / G && (memcmp(&kw[i * nw], e2.k_words + i * nw, nw * 4) ||
                                       memcmp(&ks[i * D], e2.k_sz + i * D, D * sizeof(kvq_sz)));
            const size_t vq_here = std::min<size_t>(G, n_vq > i * G ? n_vq - i * G : 0);
            differ += memcmp(&vw[i * nw], e2.v_words + i * nw, (i < sealed ? nw : vq_here * wpv) * 4) != 0 ||
                      memcmp(&vsz[i * vs], e2.v_sz + i * vs, vq_here * gpt * sizeof(kvq_sz)) != 0;
        }
        CHECK(differ == 0, "compact D=%zu B=%d G=%zu: the pool differs from kvq_cache_compact's cache "
              "re-exported (pages %zu vs %zu, n_kq %u vs %u, n_vq %u vs %u)", D, B, G, n_kept,
              e2.n_pages, n_kq, e2.n_kq, n_vq, e2.n_vq);
        kvq_cuda_export_free(&e2);
    }
    /* attention over the compacted stream: pages 0 .., the planned bits    */
    std::vector<int32_t> table(n_kept);
    for (size_t i = 0; i < n_kept; i++) table[i] = (int32_t)i;
    dbuf<kvq_cuda_stream> ds(1);
    kvq_cuda_stream hs;
    CU(cudaMemcpy(&hs, b.d_streams, sizeof hs, cudaMemcpyDeviceToHost));
    hs.pages = b.put(table.data(), table.size());
    hs.dead = b.put(dead.data(), dead.size());
    hs.n_kq = n_kq; hs.n_vq = n_vq;
    ds.up(&hs);
    std::vector<float> hq((size_t)n_rep * D), got(hq.size());
    for (auto &x : hq) x = rng_gauss();
    const size_t max_tokens = std::max(n_kq, n_vq) + e.n_fp;
    int s_a, s_b;
    const size_t wf = kvq_cuda_attend_mma_workspace(1, n_rep, (int)D, (int)G, B, e.value_group, 0,
                                                    max_tokens, &s_a, &s_b);
    dbuf<float> dq(hq.size()), dout(hq.size()), dwork(wf);
    dbuf<int> dstat(1);
    dq.up(hq.data());
    KQ(kvq_cuda_attend_mma(&b.pool, (int)D, ds.p, 1, n_rep, max_tokens, dq.p, dout.p, dwork.p, wf,
                           dstat.p, 0, 0));
    const kvq_status st = kvq_cuda_status(dstat.p, 0);
    dout.down(got.data());
    std::vector<kvq_cache> one(1, c);
    double worst;
    const size_t rows_bad = check_rows(one, hq, got, n_rep, D, ATTN_TOL, &worst);
    CHECK(st == KVQ_OK && rows_bad == 0, "compact D=%zu B=%d G=%zu: attention over the compacted pool: "
          "%s, %zu rows over tolerance, worst %.3g", D, B, G, kvq_status_str(st), rows_bad, worst);
    printf("  compact    D=%3zu B=%d G=%3zu %-9s %zu of %zu pages kept, %zu moves, %zu live slots; "
           "attention worst rel err %.2e\n", D, B, G, scattered ? "scattered" : "pages", n_kept,
           e.n_pages, src.size(), live, worst);
    kvq_cache_free(&c);
}

static void test_compact_pages(void)
{
    for (size_t D : { 64, 128 })
        for (int B : { 2, 4 })
            for (size_t G : { 32, 128 }) {
                test_compact_case(D, B, G, false, 4);
                test_compact_case(D, B, G, true, (int)(1 + rng_below(8)));
            }
    /* the planner: refusals write nothing, NULL dead bits drop nothing    */
    uint32_t dead[3] = { 0xFFFFFFFFu, 0xFFFFFFFFu, 5u }, nk = 96, nv = 70;
    int32_t kept[4] = { -7, -7, -7, -7 };
    size_t n_kept = 99;
    CHECK(refused_with(kvq_cuda_compact_plan(dead, &nk, &nv, 48, kept, &n_kept), KVQ_ERR_GROUP) &&
          refused_with(kvq_cuda_compact_plan(dead, &nk, nullptr, 32, kept, &n_kept), KVQ_ERR_NULL) &&
          dead[0] == 0xFFFFFFFFu && nk == 96 && nv == 70 && kept[0] == -7 && n_kept == 99,
          "kvq_cuda_compact_plan: a bad argument was accepted or something was written");
    CHECK(kvq_cuda_compact_plan(nullptr, &nk, &nv, 32, kept, &n_kept) == KVQ_OK && n_kept == 3 &&
          nk == 96 && nv == 70, "kvq_cuda_compact_plan: without dead bits every page stays");
    /* two sealed pages all dead (slots 0..63), the third unsealed: kept    */
    CHECK(kvq_cuda_compact_plan(dead, &nk, &nv, 32, kept, &n_kept) == KVQ_OK && n_kept == 1 &&
          kept[0] == 2 && nk == 32 && nv == 6 && dead[0] == 5u && dead[1] == 0 && dead[2] == 0,
          "kvq_cuda_compact_plan: two dead sealed pages: kept %zu, n_kq %u, n_vq %u, dead %08x",
          n_kept, nk, nv, dead[0]);
    kvq_cuda_pool bad = {};
    CHECK(refused_with(kvq_cuda_move_pages(&bad, nullptr, nullptr, 0, nullptr, 0), KVQ_ERR_NULL),
          "kvq_cuda_move_pages: a pool without arrays was accepted");
    /* arrays present, shapes no pool has: refused before any launch      */
    uint32_t never_touched[1];
    bad.k_words = bad.v_words = never_touched;
    bad.k_sz = bad.v_sz = (kvq_sz *)(void *)never_touched;
    bad.n_pages = 1; bad.bits = 2; bad.group = 32; bad.value_group = 32;
    for (int D : { 0, 96, 256 }) {
        bad.head_dim = D;
        CHECK(refused_with(kvq_cuda_move_pages(&bad, nullptr, nullptr, 0, nullptr, 0), KVQ_ERR_CONFIG),
              "kvq_cuda_move_pages: head_dim %d accepted", D);
    }
    bad.head_dim = 128; bad.group = 48;
    CHECK(refused_with(kvq_cuda_move_pages(&bad, nullptr, nullptr, 0, nullptr, 0), KVQ_ERR_CONFIG),
          "kvq_cuda_move_pages: G = 48 accepted");
    bad.group = 32; bad.value_group = 8;               /* 8 x 2 bits: no whole word */
    CHECK(refused_with(kvq_cuda_move_pages(&bad, nullptr, nullptr, 0, nullptr, 0), KVQ_ERR_CONFIG),
          "kvq_cuda_move_pages: value group 8 at 2 bits accepted");
}

/* ======================================================================== */
/* host: the kernel's walk of an exported stream, on the CPU                */
/* ======================================================================== */
/* Runs without a GPU (`test_gpu --host`; CI runs it). For every policy and
   (D, B, G), each
   exported stream is walked the way kvq_attend_kernel walks it: fast items
   from kvq_cuda_count_items, each staged from the offsets of
   kvq_cuda_tile_src into a TG-token page and read with the fast path's
   indexing (channel d's key codes at word d * TG*B/32, value row t); then
   the slow range (mixed slots from the page layout, tails, fp rows). The
   rows it finds must be exactly the cache's live rows (count), and
   attention over them in double must match the oracle on the CPU cache.
   What stays for the GPU: the lanes' copy loops and the arithmetic.     */
static float code_val(const uint32_t *words, size_t i, int bits, kvq_sz z, kvq_zero_mode mode)
{
    float a, b;
    kvq_sz_affine(z, mode, &a, &b);
    return (float)kvq_dev_get_code(words, i, bits) * a + b;
}

/* The rows (key, value) the kernel attends for stream e, in its order.    */
static void host_walk(const kvq_cuda_export_t &e, int TG, std::vector<float> &K,
                      std::vector<float> &V, size_t *n_tiles)
{
    const int D = e.head_dim, G = e.group, B = e.bits, Gv = e.value_group, gpt = D / Gv;
    const int wpg = G * B / 32, wpgv = Gv * B / 32, kw = TG * B / 32;
    const kvq_cuda_tile_src at = { D, B, G, TG, gpt };
    kvq_cuda_stream st;
    memset(&st, 0, sizeof st);
    st.n_kq = e.n_kq; st.n_vq = e.n_vq; st.n_fp = e.n_fp;
    const kvq_cuda_items it = kvq_cuda_count_items(st, TG, true);
    const uint32_t n_slots = std::max(e.n_kq, e.n_vq);
    auto dead = [&](uint32_t slot) { return e.dead && ((e.dead[slot >> 5] >> (slot & 31)) & 1u); };
    K.clear(); V.clear();
    /* fast items: stage, then read as kvq_dev_fast_item<D, B, TG> does    */
    std::vector<uint32_t> skw((size_t)D * kw), svw((size_t)TG * D * B / 32);
    std::vector<kvq_sz> sks(D), svs((size_t)TG * gpt);
    for (uint32_t i = 0; i < it.n_fast; i++) {
        const size_t page = i / (G / TG);
        const int tile = (int)(i % (G / TG));
        for (int d = 0; d < D; d++)
            memcpy(&skw[(size_t)d * kw], e.k_words + at.key_word(page, tile, d), kw * 4);
        memcpy(sks.data(), e.k_sz + at.key_sz(page), D * sizeof(kvq_sz));
        memcpy(svw.data(), e.v_words + at.value_word(page, tile), svw.size() * 4);
        memcpy(svs.data(), e.v_sz + at.value_sz(page, tile), svs.size() * sizeof(kvq_sz));
        if (tile > 0) (*n_tiles)++;
        for (int t = 0; t < TG; t++) {
            if (dead(i * (uint32_t)TG + t)) continue;
            for (int d = 0; d < D; d++)
                K.push_back(code_val(&skw[(size_t)d * kw], t, B, sks[d], e.zero_mode));
            for (int d = 0; d < D; d++) {
                const size_t g = (size_t)t * gpt + d / Gv;
                V.push_back(code_val(&svw[g * wpgv], d % Gv, B, svs[g], e.zero_mode));
            }
        }
    }
    /* slow range: the mixed slots, as kvq_dev_slow_src reads them, then fp */
    for (uint32_t slot = it.n_fast * (uint32_t)TG; slot < n_slots; slot++) {
        if (dead(slot)) continue;
        const size_t page = slot / G, t = slot % G;
        for (int d = 0; d < D; d++)
            K.push_back(slot < e.n_kq
                ? code_val(e.k_words + page * kvq_cuda__kw_stride(D, G, B) + (size_t)d * wpg, t, B,
                           e.k_sz[page * D + d], e.zero_mode)
                : kvq_f16_to_f32(e.k_tail[(size_t)(slot - e.n_kq) * D + d]));
        for (int d = 0; d < D; d++) {
            const size_t g = t * gpt + d / Gv;
            V.push_back(slot < e.n_vq
                ? code_val(e.v_words + page * kvq_cuda__vw_stride(D, G, B) + g * wpgv, d % Gv, B,
                           e.v_sz[page * kvq_cuda__vs_stride(D, G, Gv) + g], e.zero_mode)
                : kvq_f16_to_f32(e.v_tail[(size_t)(slot - e.n_vq) * D + d]));
        }
    }
    for (size_t r = 0; r < e.n_fp * (size_t)D; r++) {
        K.push_back(kvq_f16_to_f32(e.k_fp[r]));
        V.push_back(kvq_f16_to_f32(e.v_fp[r]));
    }
}

static void test_host_walk(void)
{
    const int pols[] = { POL_KIVI, POL_OTT, POL_LOGQUANT, POL_EVICT, POL_KIVI_INT };
    size_t n_tiles = 0, n_streams = 0;
    for (int pol : pols)
        for (size_t D : { 64, 128 })
            for (int bits : { 2, 4 })
                for (size_t G : { 32, 64, 128 }) {
                    double worst = 0.0;
                    bool ok = true;
                    for (int i = 0; i < 3 && ok; i++) {
                        kvq_cache c;
                        kvq_cuda_export_t e;
                        const char *why = "";
                        ok = make_stream(pol, D, bits, G, 1500, &c, &e, &why);
                        CHECK(ok, "host walk %s D=%zu B=%d G=%zu: %s", pol_name[pol], D, bits, G, why);
                        if (!ok) break;
                        n_streams++;
                        size_t live = 0;
                        std::vector<float> row(D), q(D), ref;
                        for (size_t p = 0; p < c.n_pos; p++) live += kvq_cache_read(&c, 0, p, row.data()) == KVQ_OK;
                        for (auto &x : q) x = rng_gauss();
                        oracle(&c, q.data(), 1, ref);
                        {
                            const int TG = KVQ_CUDA_TILE;
                            std::vector<float> K, V, out(D);
                            host_walk(e, TG, K, V, &n_tiles);
                            const size_t n = K.size() / D;
                            CHECK(n == live, "host walk %s D=%zu B=%d G=%zu TG=%d: %zu rows, the cache has %zu",
                                  pol_name[pol], D, bits, G, TG, n, live);
                            /* the oracle's own attention, over the walk's rows */
                            const double rel = n ? (kvq_attend_dense(K.data(), V.data(), n, D, q.data(), 1,
                                                                     out.data(), NULL) == KVQ_OK
                                                        ? rel_l2(out.data(), ref.data(), D) : 1.0)
                                                 : 0.0;
                            CHECK(rel <= ATTN_TOL, "host walk %s D=%zu B=%d G=%zu TG=%d: rel err %.3g",
                                  pol_name[pol], D, bits, G, TG, rel);
                            if (!(rel <= worst)) worst = rel;
                        }
                        kvq_cuda_export_free(&e);
                        kvq_cache_free(&c);
                    }
                    if (ok)
                        printf("  host walk %-10s D=%3zu B=%d G=%3zu  tiles: worst rel err %.2e\n",
                               pol_name[pol], D, bits, G, worst);
                }
    CHECK(n_tiles > 0, "the host walk never staged a second tile of a page");
    printf("  host walk: %zu streams, %zu second-or-later tiles staged\n", n_streams, n_tiles);
}

/* ======================================================================== */
/* host: the tensor-core fragment order (kvq_cuda.cu Sec. 7), replayed      */
/* ======================================================================== */
/* No GPU: exported pages are put into fragment order, then every lane's
   registers are rebuilt the way the tensor-core kernel builds them (its
   fragment words, kvq_mma_magic + the HFMA2, kvq_mma_b_regs for B, 4 heads
   x (hi, lo) per MMA) and fed to an emulated mma.m16n8k16 that places them by the PTX ISA's tables as
   written below: offsets from (gid, 2 tig) listed element by element, not
   kvq_cuda.cu's formulas. Checked against kvq.h:
     decode  every A element is the code kvq.h stores at that (token,
             channel) of the page, and each code is used exactly once;
     keys    per-page scores sum_d q_hd k_td from hi/lo MMAs + zero term,
     values  per-page sum_t p_ht v_td likewise, against float64 sums over
             kvq.h's dequantized rows.
   What stays for the GPU: the real MMA's accumulation order, and the
   shuffles themselves (which lane each reads is checked below, by
   test_score_handoff).                                                  */
static const int ptx_a_off[8][2] = {   /* (row - gid, col - 2 tig) of a0..a7  */
    { 0, 0 }, { 0, 1 }, { 8, 0 }, { 8, 1 }, { 0, 8 }, { 0, 9 }, { 8, 8 }, { 8, 9 } };
static const int ptx_b_off[4] = { 0, 1, 8, 9 };       /* row - 2 tig of b0..b3; col = gid */
static const int ptx_c_off[4][2] = { { 0, 0 }, { 0, 1 }, { 8, 0 }, { 8, 1 } };

/* One warp's registers for one MMA: a (4 x f16x2), b (2 x f16x2), c.     */
struct warp_regs {
    uint32_t a[32][4], b[32][2];
    float c[32][4];
};
static float half_lo(uint32_t r) { return kvq_f16_to_f32((kvq_f16)(r & 0xffffu)); }
static float half_hi(uint32_t r) { return kvq_f16_to_f32((kvq_f16)(r >> 16)); }
static uint32_t pack2(kvq_f16 lo, kvq_f16 hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

/* D = A B + C, with A and B placed by the ISA's tables; exact products,
   summed in double, rounded to float once per MMA.                       */
static void mma_emulate(warp_regs &w)
{
    float A[16][16], Bm[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int gid = lane / 4, tig = lane % 4;
        for (int i = 0; i < 8; i++) {
            const uint32_t r = w.a[lane][i / 2];
            A[gid + ptx_a_off[i][0]][2 * tig + ptx_a_off[i][1]] = i % 2 ? half_hi(r) : half_lo(r);
        }
        for (int i = 0; i < 4; i++) {
            const uint32_t r = w.b[lane][i / 2];
            Bm[2 * tig + ptx_b_off[i]][gid] = i % 2 ? half_hi(r) : half_lo(r);
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int gid = lane / 4, tig = lane % 4;
        for (int i = 0; i < 4; i++) {
            const int row = gid + ptx_c_off[i][0], col = 2 * tig + ptx_c_off[i][1];
            double s = w.c[lane][i];
            for (int k = 0; k < 16; k++) s += (double)A[row][k] * Bm[k][col];
            w.c[lane][i] = (float)s;
        }
    }
}

/* A registers of one lane for one k-tile from its fragment word: the
   decode of kvq_cuda.cu Sec. 7 (LOP3, then HFMA2 x 2^-k - 1024 2^-k, both
   exact in fp16, emulated in float).                                     */
static void lane_a_regs(uint32_t word, int bits, int tile, uint32_t a[4])
{
    for (int j = 0; j < 4; j++) {
        const int k = kvq_mma_shift(bits, 4 * tile + j);
        const uint32_t m = kvq_mma_magic(word, bits, 4 * tile + j);
        const float sc = ldexpf(1.0f, -k);
        const float lo = half_lo(m) * sc - 1024.0f * sc, hi = half_hi(m) * sc - 1024.0f * sc;
        a[j] = pack2(kvq_f32_to_f16(lo), kvq_f32_to_f16(hi));
    }
}

static void test_fragment_tables(void)
{
    int bad = 0, seen_a[16][16] = { { 0 } }, seen_b[16][8] = { { 0 } }, seen_c[16][8] = { { 0 } };
    for (int lane = 0; lane < 32; lane++) {
        const int gid = lane / 4, tig = lane % 4;
        for (int i = 0; i < 8; i++) {
            bad += kvq_mma_a_row(lane, i) != gid + ptx_a_off[i][0] ||
                   kvq_mma_a_col(lane, i) != 2 * tig + ptx_a_off[i][1];
            seen_a[kvq_mma_a_row(lane, i)][kvq_mma_a_col(lane, i)]++;
        }
        for (int i = 0; i < 4; i++) {
            bad += kvq_mma_b_row(lane, i) != 2 * tig + ptx_b_off[i] || kvq_mma_b_col(lane) != gid;
            bad += kvq_mma_c_row(lane, i) != gid + ptx_c_off[i][0] ||
                   kvq_mma_c_col(lane, i) != 2 * tig + ptx_c_off[i][1];
            seen_b[kvq_mma_b_row(lane, i)][kvq_mma_b_col(lane)]++;
            seen_c[kvq_mma_c_row(lane, i)][kvq_mma_c_col(lane, i)]++;
        }
    }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            bad += seen_a[r][c] != 1 || (c < 8 && (seen_b[r][c] != 1 || seen_c[r][c] != 1));
    CHECK(bad == 0, "fragment maps: %d entries differ from the PTX ISA tables or repeat", bad);
    /* the split: hi + lo within 2^-9 of w 2^e, largest |w| 2^e in [2^14, 2^15) */
    double worst = 0.0;
    for (int t = 0; t < 20000; t++) {
        const float mx = ldexpf(1.0f + (float)rng_unif(), (int)rng_below(60) - 30);
        const float w = (float)(mx * (2.0 * rng_unif() - 1.0));
        const int e = kvq_mma_exponent(mx);
        kvq_f16 hi, lo;
        kvq_mma_split(w, e, &hi, &lo);
        const double err = fabs((double)kvq_f16_to_f32(hi) + kvq_f16_to_f32(lo) - ldexp((double)w, e));
        if (err > worst) worst = err;
        bad += !(ldexpf(mx, e) >= 16384.0f && ldexpf(mx, e) < 32768.0f);
    }
    CHECK(bad == 0, "kvq_mma_exponent: %d maxima outside [2^14, 2^15) after scaling", bad);
    CHECK(worst <= ldexp(1.0, -9), "kvq_mma_split: hi + lo off by %.3g (bound 2^-9)", worst);
    printf("  fragment tables: A, B, C maps = PTX ISA; split hi + lo worst %.2e (bound %.2e)\n",
           worst, ldexp(1.0, -9));
}

/* One 16-row C tile as the kernel builds it: over n_k k-tiles, A from each
   lane's fragment word word_of(lane, kt) (decoded), B the hi/lo of rows
   16 kt .. 16 kt + 15 of W (4 heads, exponents ex), one emulated MMA per
   k-tile. visit(kt, row, col, code) sees every A element where the ISA
   places it; out(row, j, x) gets head j's result for tile row `row`:
   (c0 + c1) or (c2 + c3) of a lane, times 2^-e.
   sub = 1: the subnormal decode of kvq_cuda.cu Sec. 7 instead. A holds
   c 2^(k-24); W must then be the rows pre-scaled by 2^-k_col (W's rows 8-15
   of each k-tile), and C's row halves are post-scaled by 2^(24 - k_row). */
template <class WordOf, class Visit, class Out>
static void replay_tile(int B, int n_k, WordOf word_of, Visit visit, const float (*W)[4],
                        const int ex[4], Out out, int sub = 0)
{
    warp_regs w;
    memset(&w, 0, sizeof w);
    for (int kt = 0; kt < n_k; kt++) {
        for (int lane = 0; lane < 32; lane++) {
            const int tile = kt % (4 / B);
            if (sub)
                for (int j = 0; j < 4; j++) w.a[lane][j] = kvq_mma_subnormal(word_of(lane, kt), B, 4 * tile + j);
            else
                lane_a_regs(word_of(lane, kt), B, tile, w.a[lane]);
            for (int i = 0; i < 8; i++) {
                const uint32_t r = w.a[lane][i / 2];
                double code = i % 2 ? half_hi(r) : half_lo(r);
                if (sub)                               /* undo 2^(k - 24)    */
                    code = ldexp(code, 24 - kvq_mma_sub_shift(B, (i / 2) % 2, i / 4));
                visit(kt, kvq_mma_a_row(lane, i), kvq_mma_a_col(lane, i), (int)code);
            }
            const int j = kvq_mma_b_col(lane) / 2;   /* head j: hi or lo */
            kvq_mma_b_regs(lane, &W[16 * kt][j], 4, ex[j], w.b[lane]);
        }
        mma_emulate(w);
    }
    for (int lane = 0; lane < 32; lane++)            /* head tig: c0 + c1, c2 + c3 */
        for (int half = 0; half < 2; half++) {
            const int j = kvq_mma_c_col(lane, 0) / 2;
            const int post = sub ? 24 - kvq_mma_sub_shift(B, half, 0) : 0;
            out(kvq_mma_c_row(lane, 2 * half), j,
                ldexp((double)(w.c[lane][2 * half] + w.c[lane][2 * half + 1]), post - ex[j]));
        }
}

/* W with each k-tile's rows 8-15 scaled by 2^-k_col (the subnormal decode's
   column part), and its exponents.                                      */
static void subnormal_weights(int B, int n_rows, const float (*W)[4], float (*Ws)[4], int ex[4])
{
    const int kc = kvq_mma_sub_shift(B, 0, 1);
    for (int j = 0; j < 4; j++) {
        float mx = 0.0f;
        for (int r = 0; r < n_rows; r++) {
            Ws[r][j] = ldexpf(W[r][j], (r % 16) >= 8 ? -kc : 0);
            mx = std::max(mx, fabsf(Ws[r][j]));
        }
        ex[j] = kvq_mma_exponent(mx);
    }
}

/* The hand-off from the key MMA to the value MMA (kvq_mma_score_source),
   exactly: random C registers stand for a key MMA's output; the score of
   (token, head) is read from them through the ISA's C table as listed
   (ptx_c_off), and every B element the mapping fetches must be that very
   float, for every lane and element.                                     */
static void test_score_handoff(void)
{
    float c[32][4], S[16][4];
    int bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) c[lane][i] = rng_gauss();
    for (int lane = 0; lane < 32; lane++)          /* C: row gid (+8), col 2 tig (+1) */
        for (int half = 0; half < 2; half++) {
            const int gid = lane / 4, tig = lane % 4;
            const int row = gid + ptx_c_off[2 * half][0], head = (2 * tig + ptx_c_off[2 * half][1]) / 2;
            S[row][head] = c[lane][2 * half] + c[lane][2 * half + 1];
        }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int src, half;
            kvq_mma_score_source(lane, i, &src, &half);
            const float got = c[src][2 * half] + c[src][2 * half + 1];
            const int gid = lane / 4, tig = lane % 4;   /* B: row 2 tig (+1) (+8), col gid */
            bad += got != S[2 * tig + ptx_b_off[i]][gid / 2];
        }
    CHECK(bad == 0, "kvq_mma_score_source: %d of 128 B elements fetch another score", bad);
    printf("  score hand-off: 128 B elements, each the score the C table puts there\n");
}

/* One exported stream's pages, replayed. Returns the worst errors.       */
static void replay_pages(const kvq_cuda_export_t &e, int n_heads, double *worst_k,
                         double *worst_v, long *bad_codes, int sub)
{
    const int D = e.head_dim, G = e.group, B = e.bits, Gv = e.value_group, gpt = D / Gv;
    const int TPW = 4 / B;                               /* k-tiles per word  */
    const size_t n_words = (size_t)D * G * B / 32, kpl = (size_t)D * B / 64, vpl = (size_t)D / 16;
    kvq_cuda_export_t f = e;                             /* fragment-order copy */
    std::vector<uint32_t> fk(e.k_words, e.k_words + e.n_pages * n_words),
        fv(e.v_words, e.v_words + e.n_pages * n_words);
    f.k_words = fk.data();
    f.v_words = fv.data();
    CHECK(kvq_cuda_export_fragment(&f) == KVQ_OK, "kvq_cuda_export_fragment refused D=%d G=%d B=%d", D, G, B);
    const size_t full = std::min(e.n_kq, e.n_vq) / (size_t)G;   /* pages quantized on both sides */
    std::vector<float> q((size_t)n_heads * D), p((size_t)n_heads * G);
    for (size_t pg = 0; pg < full; pg++) {
        const uint32_t *kw = e.k_words + pg * n_words, *vw = e.v_words + pg * n_words;
        const uint32_t *fkw = fk.data() + pg * n_words, *fvw = fv.data() + pg * n_words;
        const kvq_sz *ksz = e.k_sz + pg * D, *vsz = e.v_sz + pg * (size_t)G * gpt;
        /* queries: Gaussian, one head scaled down 10^-6 (exercises e)      */
        for (auto &x : q) x = rng_gauss();
        for (int d = 0; d < D; d++) q[d] *= 1e-6f;
        for (auto &x : p) x = (float)rng_unif();
        /* kvq.h's rows of this page, and the use count of each code        */
        std::vector<double> Kd((size_t)G * D), Vd((size_t)G * D);
        std::vector<int> used_k((size_t)G * D, 0), used_v((size_t)G * D, 0);
        std::vector<float> ka(D), kb(D);
        for (int d = 0; d < D; d++) kvq_dev_affine(ksz[d], e.zero_mode, &ka[d], &kb[d]);
        for (int t = 0; t < G; t++)
            for (int d = 0; d < D; d++) {
                float a, b;
                Kd[(size_t)t * D + d] = (double)kvq_dev_get_code(kw + (size_t)d * (G * B / 32), t, B) * ka[d] + kb[d];
                kvq_dev_affine(vsz[(size_t)t * gpt + d / Gv], e.zero_mode, &a, &b);
                Vd[(size_t)t * D + d] = (double)kvq_dev_get_code(vw + (size_t)t * (D * B / 32), d, B) * a + b;
            }
        /* keys: C(16 tokens x 4 heads x hi/lo) per row tile, D/16 k-tiles */
        for (int h0 = 0; h0 < n_heads; h0 += 4) {
            float W[128][4] = { { 0 } };
            int ex[4] = { 0 };
            double zt[4] = { 0 }, mag[4] = { 0 };
            for (int j = 0; j < 4 && h0 + j < n_heads; j++) {
                const float *qh = &q[(size_t)(h0 + j) * D];
                float mx = 0.0f;
                for (int d = 0; d < D; d++) {
                    W[d][j] = qh[d] * ka[d];
                    mx = std::max(mx, fabsf(W[d][j]));
                    zt[j] += (double)qh[d] * kb[d];
                    mag[j] += fabs((double)qh[d]) * (15.0 * fabs(ka[d]) + fabs(kb[d]));
                }
                ex[j] = kvq_mma_exponent(mx);
            }
            float Ws[128][4];
            int exs[4];
            subnormal_weights(B, D, W, Ws, exs);
            for (int mt = 0; mt < G / 16; mt++)
                replay_tile(B, D / 16,
                    [&](int lane, int kt) { return fkw[((size_t)mt * 32 + lane) * kpl + kt / TPW]; },
                    [&](int kt, int row, int col, int code) {
                        const int t = 16 * mt + row, d = 16 * kt + col;
                        *bad_codes += code != (int)kvq_dev_get_code(kw + (size_t)d * (G * B / 32), t, B);
                        used_k[(size_t)t * D + d]++;
                    },
                    sub ? Ws : W, sub ? exs : ex,
                    [&](int row, int j, double x) {
                        const int t = 16 * mt + row;
                        if (h0 + j >= n_heads) return;
                        double ref = 0.0;
                        for (int d = 0; d < D; d++) ref += (double)q[(size_t)(h0 + j) * D + d] * Kd[(size_t)t * D + d];
                        *worst_k = std::max(*worst_k, fabs(x + zt[j] - ref) / mag[j]);
                    }, sub);
        }
        /* values: C(16 channels x 4 heads x hi/lo) per channel tile, over
           the page's token k-tiles; B = p_ht a_tg of the tile's group g  */
        for (int h0 = 0; h0 < n_heads; h0 += 4) {
            for (int mt = 0; mt < D / 16; mt++) {
                const int g = 16 * mt / Gv;
                float U[128][4] = { { 0 } };
                int ex[4] = { 0 };
                double zt[4] = { 0 }, mag[4] = { 0 };
                for (int j = 0; j < 4 && h0 + j < n_heads; j++) {
                    float mx = 0.0f;
                    for (int t = 0; t < G; t++) {
                        float a, b;
                        kvq_dev_affine(vsz[(size_t)t * gpt + g], e.zero_mode, &a, &b);
                        const float pt = p[(size_t)(h0 + j) * G + t];
                        U[t][j] = pt * a;
                        mx = std::max(mx, fabsf(U[t][j]));
                        zt[j] += (double)pt * b;
                        mag[j] += pt * (15.0 * fabs(a) + fabs(b));
                    }
                    ex[j] = kvq_mma_exponent(mx);
                }
                float Us[128][4];
                int exs[4];
                subnormal_weights(B, G, U, Us, exs);
                replay_tile(B, G / 16,
                    [&](int lane, int kt) { return fvw[((size_t)(kt / TPW) * 32 + lane) * vpl + mt]; },
                    [&](int kt, int row, int col, int code) {
                        const int d = 16 * mt + row, t = 16 * kt + col;
                        *bad_codes += code != (int)kvq_dev_get_code(vw + (size_t)t * (D * B / 32), d, B);
                        used_v[(size_t)t * D + d]++;
                    },
                    sub ? Us : U, sub ? exs : ex,
                    [&](int row, int j, double x) {
                        const int d = 16 * mt + row;
                        if (h0 + j >= n_heads) return;
                        double ref = 0.0;
                        for (int t = 0; t < G; t++) ref += (double)p[(size_t)(h0 + j) * G + t] * Vd[(size_t)t * D + d];
                        *worst_v = std::max(*worst_v, fabs(x + zt[j] - ref) / mag[j]);
                    }, sub);
            }
        }
        for (size_t i = 0; i < used_k.size(); i++)
            *bad_codes += (used_k[i] != (n_heads + 3) / 4) + (used_v[i] != (n_heads + 3) / 4);
    }
}

/* Error bound of a replayed score or output, relative to its magnitude
   sum |q| (15 |a| + |b|): the split's 2^-23 of the largest weight times
   at most D codes of 15, plus fp32 rounding per MMA; 2^-16 leaves room
   and still fails on any misplaced code (an error near 1).              */
#define MMA_TOL ldexp(1.0, -16)

/* The inverse maps (kvq_mma_key_dest, kvq_mma_value_dest) against the
   forward ones: every (token, channel) of a page sent to a (word, field)
   that the forward map sends back to it, each field used once.          */
/* kvq_mma_value_pow2 (the value weights' powers, built from bits) against
   ldexpf(1, +-kvq_mma_exponent) for every value a value scale can take:
   0 and each finite positive fp16.                                        */
static void test_value_pow2(void)
{
    size_t bad = 0, n = 0;
    for (int top : { 15, 27, 31 })        /* f16; 4 integer digits, lifted or not */
        for (uint32_t h = 0; h < 0x7C00u; h++) {
            const float a = kvq_f16_to_f32((kvq_f16)h);
            float up, down;
            kvq_mma_value_pow2(a, &up, &down, top);
            const int e = top == 15 ? kvq_mma_exponent(a) : kvq_mma_exponent_top(a, top);
            bad += up != ldexpf(1.0f, e) || down != ldexpf(1.0f, -e);
            bad += a > 0.0f && !(a * up >= ldexpf(1.0f, top - 1) && a * up < ldexpf(1.0f, top));
            n++;
        }
    CHECK(bad == 0, "kvq_mma_value_pow2: %zu of %zu fp16 scales differ from ldexpf(1, +-kvq_mma_exponent)",
          bad, n);
    printf("  value pow2: %zu fp16 scales, 2^e and 2^-e from bits equal ldexpf's\n", n);
}

/* The integer decode (Sec. 7): from random fragment-order pages, each
   lane's u8 A fragments (kvq_mma_decode_i8) must hold, in register i and
   byte b, the code of row gid + 8 (i % 2) and of the channel (keys) or
   token (values) kvq_mma_i8_index(B, 4 tig + b + 16 (i / 2)) of the step,
   times 2^B on rows 8-15, read back through kvq_mma_code_at (the f16
   fragment maps' inverse), and times 2^4 more in registers 2 and 3 with
   LIFT = 4 (B = 2). kvq_mma_i8_index must be a permutation.              */
/* kvq_dev_div (kvq_cuda.cu Sec. 1: the quantizer's divisions, a
   reciprocal a group and one fma correction) against IEEE division, bit
   for bit (+0 and -0 count as equal: rintf and the clamps map both to
   code 0). The quantizer divides x / s (integer zero point, and -mn / s
   for the zero point), RN(x - z) / s (float zero) and (mx - mn) / N.
   Checked, for every positive finite fp16 scale s (31,743):
     - x / s for fp16 x: a stride of the fp16 values, every one with
       KVQ_DIV_EXHAUSTIVE=1 (2.0e9 pairs);
     - RN(x - z) / s for random fp16 pairs (x, z);
     - ties: a = RN((k + 1/2) s), k = 0 .. 255, and its neighbours 1 and
       2 ulp away, both signs;
   and (mx - mn) / N, N = 1, 3, 7, 15, 255 (B = 1 .. 8), for every float
   a = RN(mx - mn) in [0, 131008] at a stride (every one with
   KVQ_DIV_EXHAUSTIVE=1).                                               */
static void test_division(void)
{
    const bool all = getenv("KVQ_DIV_EXHAUSTIVE") != NULL;
    uint64_t n = 0, bad = 0;
    float bad_a = 0.0f, bad_b = 0.0f;
    auto same = [](float x, float y) {
        uint32_t u, v;
        memcpy(&u, &x, 4);
        memcpy(&v, &y, 4);
        return u == v || (x == 0.0f && y == 0.0f);
    };
    auto one = [&](float a, float b, float r) {
        n++;
        if (!same(kvq_dev_div(a, b, r), a / b)) {
            if (!bad) { bad_a = a; bad_b = b; }
            bad++;
        }
    };
    const unsigned x_step = all ? 1 : 61;            /* coprime to 2^k     */
    for (uint32_t sb = 1; sb < 0x7c00u; sb++) {       /* every fp16 scale   */
        const float s = kvq_f16_to_f32((kvq_f16)sb), r = 1.0f / s;
        for (uint32_t xb = sb % x_step; xb < 0x10000u; xb += x_step) {
            if ((xb & 0x7c00u) == 0x7c00u) continue;    /* Inf, NaN           */
            one(kvq_f16_to_f32((kvq_f16)xb), s, r);
        }
        for (int i = 0; i < 32; i++) {                 /* RN(x - z) / s      */
            const uint32_t u = (uint32_t)rng_u64();
            const kvq_f16 x = (kvq_f16)(u % 0x7c00u | (u & 0x80000000u ? 0x8000u : 0u));
            const kvq_f16 z = (kvq_f16)((u >> 16) % 0x7c00u | (u & 0x40000000u ? 0x8000u : 0u));
            one(kvq_f16_to_f32(x) - kvq_f16_to_f32(z), s, r);
        }
        for (int k = 0; k < 256; k++) {                /* ties and neighbours */
            const float t = ((float)k + 0.5f) * s;
            float up = t, dn = t;
            one(t, s, r);
            one(-t, s, r);
            for (int j = 0; j < 2; j++) {
                up = nextafterf(up, INFINITY);
                dn = nextafterf(dn, 0.0f);
                one(up, s, r); one(dn, s, r); one(-up, s, r); one(-dn, s, r);
            }
        }
    }
    const uint64_t n_x = n;
    const float levels[5] = { 1.0f, 3.0f, 7.0f, 15.0f, 255.0f };
    const uint32_t top = 0x47ffe000u;                   /* 131008.0f          */
    const uint32_t a_step = all ? 1 : 4099;
    for (int l = 0; l < 5; l++) {
        const float N = levels[l], r = 1.0f / N;
        for (uint32_t ab = (uint32_t)l; ab <= top; ab += a_step) {
            float a;
            memcpy(&a, &ab, 4);
            one(a, N, r);
        }
    }
    CHECK(bad == 0, "kvq_dev_div: %llu of %llu quotients differ from IEEE division, first "
          "%a / %a: %a, not %a", (unsigned long long)bad, (unsigned long long)n, bad_a, bad_b,
          kvq_dev_div(bad_a, bad_b, 1.0f / bad_b), bad_a / bad_b);
    printf("  kvq_dev_div: %llu quotients (%llu by fp16 scales, %llu by N)%s, all IEEE\n",
           (unsigned long long)n, (unsigned long long)n_x, (unsigned long long)(n - n_x),
           all ? ", exhaustive" : "");
}

static void test_fragment_i8(void)
{
    const uint64_t saved = rng_state;       /* a stream of its own: later draws stay */
    rng_state = 0x18dec0deull;
    long bad = 0, n = 0;
    for (int B : { 2, 4 }) {
        uint32_t seen = 0;
        for (int k = 0; k < 32; k++) seen |= 1u << kvq_mma_i8_index(B, k);
        CHECK(seen == 0xffffffffu, "kvq_mma_i8_index(%d, .): not a permutation of 0..31", B);
    }
    for (int D : { 64, 128 })
        for (int B : { 2, 4 })
            for (int G : { 32, 128 }) {
                const size_t words = (size_t)D * G * B / 32, KPL = (size_t)D * B / 64, MT = D / 16;
                std::vector<uint32_t> kp(words), vp(words);
                for (size_t i = 0; i < words; i++) { kp[i] = (uint32_t)rng_u64(); vp[i] = (uint32_t)rng_u64(); }
                for (int lift : { 0, 4 })
                for (int lane = 0; lane < 32 && (lift == 0 || B == 2); lane++) {
                    const int gid = lane / 4, tig = lane % 4;
                    auto decode = [&](uint32_t x, uint32_t y, uint32_t (&a)[4]) {
                        if (B == 4) kvq_mma_decode_i8<4>(x, y, a);
                        else if (lift) kvq_mma_decode_i8<2, 4>(x, 0, a);
                        else kvq_mma_decode_i8<2>(x, 0, a);
                    };
                    auto check = [&](const uint32_t (&a)[4], int side, int row0, int k0, bool rows_are_tokens) {
                        for (int i = 0; i < 4; i++)
                            for (int b = 0; b < 4; b++) {
                                const int row = row0 + gid + 8 * (i % 2);
                                const int k = k0 + kvq_mma_i8_index(B, 4 * tig + b + 16 * (i / 2));
                                const uint32_t want = kvq_mma_code_at(side ? vp.data() : kp.data(), D, B, side,
                                                                      rows_are_tokens ? row : k,
                                                                      rows_are_tokens ? k : row)
                                                      << ((i % 2 ? B : 0) + (i / 2 ? lift : 0));
                                bad += ((a[i] >> (8 * b)) & 0xFFu) != want;
                                n++;
                            }
                    };
                    for (int rt = 0; rt < G / 16; rt++)         /* keys: row tiles x steps */
                        for (int ks = 0; ks < D / 32; ks++) {
                            const uint32_t *w = &kp[((size_t)rt * 32 + lane) * KPL];
                            uint32_t a[4];
                            decode(w[B == 2 ? ks : 2 * ks], B == 2 ? 0u : w[2 * ks + 1], a);
                            check(a, 0, 16 * rt, 32 * ks, true);
                        }
                    for (int c = 0; c < G / 32; c++)            /* values: chunks x row tiles */
                        for (int mt = 0; mt < (int)MT; mt++) {
                            uint32_t a[4];
                            if (B == 2) decode(vp[((size_t)c * 32 + lane) * MT + mt], 0, a);
                            else decode(vp[((size_t)2 * c * 32 + lane) * MT + mt],
                                        vp[((size_t)(2 * c + 1) * 32 + lane) * MT + mt], a);
                            check(a, 1, 16 * mt, 32 * c, false);
                        }
                }
            }
    rng_state = saved;
    CHECK(bad == 0 && n > 0, "integer decode: %ld of %ld A bytes differ from the page's codes", bad, n);
    printf("  integer decode: %ld A bytes from fragment-order pages, as kvq_mma_i8_index says\n", n);
}

static void test_fragment_inverse(void)
{
    long bad = 0, n = 0;
    for (int D : { 64, 128 })
        for (int B : { 2, 4 })
            for (int G : { 32, 128 }) {
                const size_t words = (size_t)D * G * B / 32;
                std::vector<uint8_t> used(words * (32 / B) * 2, 0);
                for (int t = 0; t < G; t++)
                    for (int d = 0; d < D; d++)
                        for (int side = 0; side < 2; side++) {
                            size_t w;
                            int j, t2, d2;
                            if (side == 0) kvq_mma_key_dest(D, B, t, d, &w, &j);
                            else kvq_mma_value_dest(D, B, t, d, &w, &j);
                            if (w >= words || j < 0 || j >= 32 / B) { bad++; continue; }
                            if (side == 0) kvq_mma_key_source(D, B, w, j, &t2, &d2);
                            else kvq_mma_value_source(D, B, w, j, &t2, &d2);
                            bad += t2 != t || d2 != d || used[(w * (32 / B) + j) * 2 + side]++;
                            n++;
                        }
            }
    CHECK(bad == 0 && n > 0, "fragment inverse maps: %ld of %ld (token, channel) pairs misplaced", bad, n);
    /* an export's page still filling keeps kvq.h's order                 */
    kvq_cuda_export_t e;
    memset(&e, 0, sizeof e);
    const int D = 64, G = 32, B = 2;
    const size_t n_words = (size_t)D * G * B / 32;
    std::vector<uint32_t> k(3 * n_words), v(3 * n_words);
    for (size_t i = 0; i < k.size(); i++) { k[i] = (uint32_t)rng_u64(); v[i] = (uint32_t)rng_u64(); }
    const std::vector<uint32_t> k0 = k, v0 = v;
    e.head_dim = D; e.group = G; e.bits = B; e.n_pages = 3;
    e.n_kq = 3 * G; e.n_vq = 2 * G + 5;             /* 2 sealed pages        */
    e.k_words = k.data(); e.v_words = v.data();
    CHECK(kvq_cuda_export_fragment(&e) == KVQ_OK, "kvq_cuda_export_fragment refused a valid export");
    CHECK(memcmp(&k[2 * n_words], &k0[2 * n_words], n_words * 4) == 0 &&
          memcmp(&v[2 * n_words], &v0[2 * n_words], n_words * 4) == 0 &&
          memcmp(k.data(), k0.data(), n_words * 4) != 0,
          "kvq_cuda_export_fragment: only the sealed pages may move");
}

static void test_fragment_replay(void)
{
    test_fragment_tables();
    test_score_handoff();
    const int pols[] = { POL_KIVI, POL_OTT, POL_LOGQUANT, POL_KIVI_INT };
    size_t n_pages = 0;
    for (int pol : pols)
        for (size_t D : { 64, 128 })
            for (int bits : { 2, 4 })
                for (size_t G : { 32, 64, 128 }) {
                    double wk = 0.0, wv = 0.0, sk = 0.0, sv = 0.0;   /* magic, subnormal */
                    long bad = 0;
                    size_t pages = 0;
                    for (int tries = 0; tries < 8 && pages < 2; tries++) {   /* >= 2 full pages */
                        kvq_cache c;
                        kvq_cuda_export_t e;
                        const char *why = "";
                        const bool ok = make_stream(pol, D, bits, G, 1200, &c, &e, &why);
                        CHECK(ok, "fragment replay %s D=%zu B=%d G=%zu: %s", pol_name[pol], D, bits, G, why);
                        if (!ok) break;
                        if (e.value_group % 16 == 0) {       /* the MMA tiles' shapes */
                            for (int heads : { 1, 5, 8, 16 }) replay_pages(e, heads, &wk, &wv, &bad, 0);
                            for (int heads : { 1, 5 }) replay_pages(e, heads, &sk, &sv, &bad, 1);
                            pages += std::min(e.n_kq, e.n_vq) / G;
                        } else {
                            pages = 2;                       /* not a tensor-core shape */
                        }
                        kvq_cuda_export_free(&e);
                        kvq_cache_free(&c);
                    }
                    n_pages += pages;
                    CHECK(pages >= 2, "fragment replay %s D=%zu B=%d G=%zu: only %zu full pages",
                          pol_name[pol], D, bits, G, pages);
                    CHECK(bad == 0, "fragment replay %s D=%zu B=%d G=%zu: %ld codes misplaced or not used once",
                          pol_name[pol], D, bits, G, bad);
                    CHECK(wk <= MMA_TOL && wv <= MMA_TOL && sk <= MMA_TOL && sv <= MMA_TOL,
                          "fragment replay %s D=%zu B=%d G=%zu: keys %.3g values %.3g, subnormal "
                          "decode %.3g %.3g (tol %.3g)", pol_name[pol], D, bits, G, wk, wv, sk, sv, MMA_TOL);
                    if (pol == POL_KIVI)
                        printf("  fragment replay D=%3zu B=%d G=%3zu: %zu pages, worst key %.2e, value %.2e"
                               " (subnormal decode %.2e, %.2e)\n", D, bits, G, pages, wk, wv, sk, sv);
                }
    CHECK(n_pages > 20, "the fragment replay saw only %zu full pages", n_pages);
    printf("  fragment replay: %zu pages, heads 1/5/8/16, every code placed once\n", n_pages);
    /* a shape the tiles do not cover is refused, nothing changed           */
    kvq_cuda_export_t bad_e;
    memset(&bad_e, 0, sizeof bad_e);
    bad_e.head_dim = 96; bad_e.group = 32; bad_e.bits = 2;
    CHECK(kvq_cuda_export_fragment(&bad_e) == KVQ_ERR_CONFIG, "D = 96 was accepted");
    bad_e.head_dim = 64; bad_e.bits = 8;
    CHECK(kvq_cuda_export_fragment(&bad_e) == KVQ_ERR_CONFIG, "B = 8 was accepted");
    CHECK(kvq_cuda_export_fragment(NULL) == KVQ_ERR_NULL, "NULL was accepted");
    bad_e.head_dim = 64; bad_e.bits = 2; bad_e.group = 32; bad_e.n_pages = 3;
    CHECK(kvq_cuda_export_fragment(&bad_e) == KVQ_ERR_NULL, "pages without words were accepted");
    bad_e.group = 48;
    CHECK(kvq_cuda_export_fragment(&bad_e) == KVQ_ERR_CONFIG, "G = 48 was accepted");
    /* one page: bad arguments write nothing                                */
    {
        const size_t n = 64 * 32 * 2 / 32;
        std::vector<uint32_t> kin(n, 0x12345678u), vin(n, 0x9abcdef0u), ko(n, 7u), vo(n, 7u);
        CHECK(kvq_cuda_fragment_page(NULL, vin.data(), 64, 32, 2, ko.data(), vo.data()) == KVQ_ERR_NULL &&
              kvq_cuda_fragment_page(kin.data(), vin.data(), 64, 32, 2, ko.data(), NULL) == KVQ_ERR_NULL &&
              kvq_cuda_fragment_page(kin.data(), vin.data(), 96, 32, 2, ko.data(), vo.data()) == KVQ_ERR_CONFIG &&
              kvq_cuda_fragment_page(kin.data(), vin.data(), 64, 32, 3, ko.data(), vo.data()) == KVQ_ERR_CONFIG &&
              kvq_cuda_fragment_page(kin.data(), vin.data(), 64, 2048, 2, ko.data(), vo.data()) == KVQ_ERR_CONFIG &&
              kvq_cuda_fragment_page(kin.data(), vin.data(), 64, 32, 2, kin.data(), vo.data()) == KVQ_ERR_CONFIG,
              "kvq_cuda_fragment_page accepted a NULL, a bad shape or an output that is its input");
        size_t touched = 0;
        for (size_t i = 0; i < n; i++) touched += (ko[i] != 7u) + (vo[i] != 7u);
        CHECK(touched == 0, "kvq_cuda_fragment_page wrote %zu words on failure", touched);
        CHECK(kvq_cuda_fragment_page(kin.data(), vin.data(), 64, 32, 2, ko.data(), vo.data()) == KVQ_OK,
              "a valid page was refused");
    }
}

/* ======================================================================== */
/* rotation (kvq_cuda.cu Sec. 2.1 against kvq.h Sec. 6.1)                   */
/* ======================================================================== */
/* Rows with outlier channels, a tiny and a large element: bits, not values. */
static void rot_rows(std::vector<float> &X, size_t T, size_t D)
{
    X.resize(T * D);
    for (size_t i = 0; i < T * D; i++) X[i] = rng_gauss() * (i % D % 17 == 3 ? 40.0f : 1.0f);
    X[rng_below(T * D)] = 3e-30f;
    X[rng_below(T * D)] = -900.0f;
}

/* Rows of the GPU that differ in any bit from want (bits of n floats/halves). */
template <class T>
static size_t rows_differing(const T *got, const T *want, size_t rows, size_t D)
{
    size_t bad = 0;
    for (size_t t = 0; t < rows; t++) bad += memcmp(got + t * D, want + t * D, D * sizeof(T)) != 0;
    return bad;
}

/* Every kind, both directions, in place and not, fp32 and fp16 rows, every
   power of two D up to the launcher's limit: bit-identical to kvq_rotate. */
static void test_rotate_rows(void)
{
    size_t cases = 0;
    for (size_t D : { 1, 2, 8, 32, 64, 128, 256, 4096 })
        for (int kind = KVQ_ROT_NONE; kind <= KVQ_ROT_HADAMARD_SIGNS; kind++)
            for (uint64_t seed : { 0ull, 0x9d2c5680ull, ~0ull }) {
                if (kind != KVQ_ROT_HADAMARD_SIGNS && seed) continue;   /* seed unused */
                const size_t T = D >= 1024 ? 2 : 7;
                std::vector<float> X, want, got(T * D);
                rot_rows(X, T, D);
                dbuf<float> dx(T * D), dy(T * D);
                dbuf<int> dst(1);
                for (int inverse = 0; inverse <= 1; inverse++) {
                    want = X;
                    CHECK(kvq_rotate((kvq_rotation)kind, seed, D, inverse, want.data(), T) == KVQ_OK,
                          "kvq_rotate: %s", kvq_why());
                    dx.up(X.data());
                    dy.poison();
                    KQ(kvq_cuda_rotate((kvq_rotation)kind, seed, D, inverse, dx.p, dy.p, T, dst.p, 0));
                    CHECK(kvq_cuda_status(dst.p, 0) == KVQ_OK, "rotate: %s", kvq_cuda_why());
                    dy.down(got.data());
                    size_t bad = rows_differing(got.data(), want.data(), T, D);
                    KQ(kvq_cuda_rotate((kvq_rotation)kind, seed, D, inverse, dx.p, dx.p, T, dst.p, 0));
                    dx.down(got.data());
                    bad += rows_differing(got.data(), want.data(), T, D);
                    CHECK(bad == 0, "rotate D=%zu kind=%d seed=%llx inverse=%d: %zu rows differ "
                          "from kvq_rotate (out of place, then in place)", D, kind,
                          (unsigned long long)seed, inverse, bad);
                    cases++;
                }
                /* fp16 rows, as a rotating cache stores them                */
                std::vector<kvq_f16> want16(T * D), got16(T * D);
                want = X;
                kvq_rotate((kvq_rotation)kind, seed, D, 0, want.data(), T);
                for (size_t i = 0; i < T * D; i++) want16[i] = kvq_f32_to_f16(want[i]);
                dbuf<__half> dy16(T * D);
                dx.up(X.data());
                dy16.poison();
                KQ(kvq_cuda_rotate_f16((kvq_rotation)kind, seed, D, dx.p, dy16.p, T, dst.p, 0));
                CHECK(kvq_cuda_status(dst.p, 0) == KVQ_OK, "rotate_f16: %s", kvq_cuda_why());
                CU(cudaMemcpy(got16.data(), dy16.p, T * D * 2, cudaMemcpyDeviceToHost));
                const size_t bad = rows_differing(got16.data(), want16.data(), T, D);
                CHECK(bad == 0, "rotate_f16 D=%zu kind=%d seed=%llx: %zu rows differ from "
                      "kvq_f32_to_f16(kvq_rotate)", D, kind, (unsigned long long)seed, bad);
                cases++;
            }
    printf("  rotate: %zu cases bit-identical to kvq_rotate (D 1..4096, 3 kinds, fp32 and fp16)\n", cases);
}

/* Codes: kvq_cuda_rotate_f16 then kvq_cuda_quantize on the caller's rows
   give the words and fp16 scales/zeros a rotating KIVI cache stores.      */
static void test_rotate_codes(void)
{
    size_t units = 0;
    for (size_t D : { 64, 128 })
        for (int bits : { 2, 4 })
            for (int k = KVQ_ROT_NONE; k <= KVQ_ROT_HADAMARD_SIGNS; k++) {
                const int v = (k + 1 + bits / 2) % 3;      /* every pairing over the loop */
                if (k == KVQ_ROT_NONE && v == KVQ_ROT_NONE) continue;
                kvq_config cfg = kvq_config_kivi(D, bits);
                cfg.key_rotation = (kvq_rotation)k;
                cfg.value_rotation = (kvq_rotation)v;
                cfg.rotation_seed = rng_u64();
                const size_t T = 300;
                std::vector<float> K, V;
                make_kv(T, D, K, V);
                kvq_cache c;
                if (kvq_cache_init(&c, &cfg) != KVQ_OK || kvq_cache_prefill(&c, K.data(), V.data(), T) != KVQ_OK) {
                    CHECK(0, "rotating cache D=%zu: %s", D, kvq_why());
                    continue;
                }
                for (int side = 0; side < 2; side++) {
                    const kvq_side *s = side ? &c.v : &c.k;
                    const size_t rows = s->n_units * s->geom.tokens_per_unit;
                    const size_t n_words = s->n_units * s->geom.groups_per_unit * s->geom.words_per_group,
                                 n_sz = s->n_units * s->geom.groups_per_unit;
                    dbuf<float> dx(T * D);
                    dbuf<__half> d16(T * D);
                    dbuf<uint32_t> dw(n_words);
                    dbuf<kvq_sz> dsz(n_sz);
                    dbuf<int> dst(1);
                    dx.up(side ? V.data() : K.data());
                    KQ(kvq_cuda_rotate_f16(side ? cfg.value_rotation : cfg.key_rotation,
                                           cfg.rotation_seed, D, dx.p, d16.p, T, dst.p, 0));
                    KQ(kvq_cuda_status(dst.p, 0));
                    KQ(kvq_cuda_quantize(d16.p, rows, D, s->bits, s->group, s->axis, cfg.zero_mode,
                                         nullptr, dw.p, dsz.p, dst.p, 1, 0));
                    KQ(kvq_cuda_status(dst.p, 0));
                    std::vector<uint32_t> w(n_words);
                    std::vector<kvq_sz> z(n_sz);
                    dw.down(w.data());
                    dsz.down(z.data());
                    CHECK(rows > 0 && !memcmp(w.data(), s->words, n_words * 4) &&
                          !memcmp(z.data(), s->sz, n_sz * sizeof(kvq_sz)),
                          "rotated codes D=%zu B=%d rotation K=%d V=%d side %d: GPU words or "
                          "scales differ from the cache's (%zu rows)", D, bits, k, v, side, rows);
                    units += s->n_units;
                }
                kvq_cache_free(&c);
            }
    printf("  rotate + quantize: %zu units byte-identical to rotating KIVI caches\n", units);
}

/* Attention over rotating caches' exports, two ways, against the float64
   oracle over the caches' rows in the caller's basis and kvq_attend:
   (1) the pool carries the export's basis: kvq_cuda_attend takes q and
       gives the output in the caller's basis; (2) by hand, the pool's
       rotation fields zero: q rotated (key side's kind), attend, the output
       rotated back (value side's kind). The export must carry the cache's
       rotation fields. The tensor-core kernel's rotating cases are in
       test_attend_mma.                                                  */
static void test_rotate_attend(void)
{
    const struct { size_t D; int bits; size_t G; int n_rep; kvq_rotation k, v; } cs[] = {
        { 128, 2, 32, 4, KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_HADAMARD_SIGNS },
        { 64, 2, 64, 1, KVQ_ROT_HADAMARD, KVQ_ROT_NONE },
        { 128, 4, 128, 3, KVQ_ROT_NONE, KVQ_ROT_HADAMARD_SIGNS },
        { 64, 4, 32, 8, KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_HADAMARD },
    };
    for (const auto &r : cs) {
        rot_key = r.k; rot_value = r.v; rot_seed = rng_u64();
        const size_t n_streams = 3, D = r.D, nq = n_streams * r.n_rep * D;
        std::vector<kvq_cache> caches;
        gpu_batch b;
        const bool ok = build_batch(POL_KIVI, D, r.bits, r.G, n_streams, quick_mode ? 400 : 900, caches, b);
        for (size_t i = 0; ok && i < b.ex.size(); i++)
            CHECK(b.ex[i].key_rotation == r.k && b.ex[i].value_rotation == r.v &&
                  b.ex[i].rotation_seed == caches[i].cfg.rotation_seed,
                  "export %zu: rotation K=%d V=%d seed %llx, the cache's K=%d V=%d seed %llx", i,
                  (int)b.ex[i].key_rotation, (int)b.ex[i].value_rotation,
                  (unsigned long long)b.ex[i].rotation_seed, (int)r.k, (int)r.v,
                  (unsigned long long)caches[i].cfg.rotation_seed);
        if (ok) {
            std::vector<float> hq(nq), got(nq), want(nq);
            for (auto &x : hq) x = rng_gauss();
            upload(b, true);
            int splits;
            const size_t wf = kvq_cuda_attend_workspace(n_streams, r.n_rep, (int)D, (int)r.G, b.max_tokens, &splits);
            dbuf<float> dq(nq), dqr(nq), dout(nq), dwork(wf);
            dbuf<int> dst(1);
            dq.up(hq.data());
            for (const char *how : { "pool", "by hand" }) {
                const bool by_hand = how[0] == 'b';
                kvq_cuda_pool pool = b.pool;
                if (by_hand) { pool.key_rotation = pool.value_rotation = KVQ_ROT_NONE; pool.rotation_seed = 0; }
                CU(cudaMemset(dout.p, 0xFF, nq * sizeof(float)));
                if (by_hand) {
                    KQ(kvq_cuda_rotate(b.ex[0].key_rotation, b.ex[0].rotation_seed, D, 0, dq.p, dqr.p,
                                       nq / D, dst.p, 0));
                    KQ(kvq_cuda_status(dst.p, 0));
                }
                KQ(kvq_cuda_attend(&pool, (int)D, b.d_streams, n_streams, r.n_rep, b.max_tokens,
                                   by_hand ? dqr.p : dq.p, dout.p, dwork.p, wf, dst.p, 0));
                const kvq_status st_attend = kvq_cuda_status(dst.p, 0);
                kvq_status st_back = KVQ_OK;
                if (by_hand) {
                    KQ(kvq_cuda_rotate(b.ex[0].value_rotation, b.ex[0].rotation_seed, D, 1, dout.p,
                                       dout.p, nq / D, dst.p, 0));
                    st_back = kvq_cuda_status(dst.p, 0);
                }
                CHECK(st_attend == KVQ_OK && st_back == KVQ_OK, "rotated attend (%s): %s, rotating back: %s",
                      how, kvq_status_str(st_attend), kvq_status_str(st_back));
                dout.down(got.data());
                double worst, worst_cpu = 0.0;
                const size_t bad = check_rows(caches, hq, got, r.n_rep, D, ATTN_TOL, &worst);
                for (size_t i = 0; i < n_streams; i++) {        /* and kvq_attend itself */
                    std::vector<float> scratch(kvq_attend_scratch_floats(&caches[i], KVQ_ATTN_EAGER));
                    KQ(kvq_attend(&caches[i], &hq[i * r.n_rep * D], r.n_rep, &want[i * r.n_rep * D],
                                  NULL, KVQ_ATTN_EAGER, scratch.data(), scratch.size()));
                    for (int h = 0; h < r.n_rep; h++) {
                        const size_t o = (i * r.n_rep + h) * D;
                        const double e = rel_l2(&got[o], &want[o], D);
                        if (!(e <= worst_cpu)) worst_cpu = e;
                    }
                }
                CHECK(bad == 0 && worst_cpu <= ATTN_TOL, "rotated attend (%s) D=%zu B=%d G=%zu K=%d V=%d: "
                      "%zu rows over tolerance %.0e against the oracle (worst %.3g), %.3g against kvq_attend",
                      how, D, r.bits, r.G, (int)r.k, (int)r.v, bad, ATTN_TOL, worst, worst_cpu);
                printf("  rotated attend (%-7s) D=%3zu B=%d G=%3zu n_rep=%d K=%d V=%d: worst rel err %.2e "
                       "(oracle), %.2e (kvq_attend)\n", how, D, r.bits, r.G, r.n_rep, (int)r.k, (int)r.v,
                       worst, worst_cpu);
            }
            /* a NaN query through the pool's rotation: NONFINITE, that row
               NaN, the others still in the caller's basis and finite     */
            hq[D + 3] = NAN;
            dq.up(hq.data());
            KQ(kvq_cuda_attend(&b.pool, (int)D, b.d_streams, n_streams, r.n_rep, b.max_tokens, dq.p,
                               dout.p, dwork.p, wf, dst.p, 0));
            const kvq_status st_nan = kvq_cuda_status(dst.p, 0);
            dout.down(got.data());
            size_t nan_rows = 0, finite_rows = 0;
            for (size_t row = 0; row < nq / D; row++) {
                bool all_nan = true, all_finite = true;
                for (size_t d = 0; d < D; d++) {
                    all_nan = all_nan && isnan(got[row * D + d]);
                    all_finite = all_finite && isfinite(got[row * D + d]);
                }
                nan_rows += row == 1 && all_nan;
                finite_rows += row != 1 && all_finite;
            }
            CHECK(refused_with(st_nan, KVQ_ERR_NONFINITE) && nan_rows == 1 && finite_rows == nq / D - 1,
                  "rotated attend with a NaN q: %s, NaN row %s, %zu of %zu other rows finite",
                  kvq_status_str(st_nan), nan_rows ? "NaN" : "not NaN", finite_rows, nq / D - 1);
            /* an unknown rotation in the pool is refused with a reason      */
            kvq_cuda_pool bad_pool = b.pool;
            bad_pool.value_rotation = (kvq_rotation)3;
            CHECK(refused_with(kvq_cuda_attend(&bad_pool, (int)D, b.d_streams, n_streams, r.n_rep,
                                               b.max_tokens, dq.p, dout.p, dwork.p, wf, dst.p, 0),
                               KVQ_ERR_CONFIG), "a pool with value_rotation 3 was accepted");
            bad_pool = b.pool;
            bad_pool.key_rotation = (kvq_rotation)3;   /* the enum's range is 0..3 */
            if (b.pool.value_group % 16 == 0)   /* else refused for the group first */
            CHECK(refused_with(kvq_cuda_attend_mma(&bad_pool, (int)D, b.d_streams, n_streams, r.n_rep,
                                                   b.max_tokens, dq.p, dout.p, dwork.p, wf, dst.p, 0, 0),
                               KVQ_ERR_CONFIG), "attend_mma: a pool with key_rotation 3 was accepted");
        }
        for (auto &c : caches) kvq_cache_free(&c);
    }
    rot_key = rot_value = KVQ_ROT_NONE;
}

/* Bad arguments are refused with a reason and launch nothing; bad data is
   reported and its row left unwritten, the other rows written.            */
static void test_rotate_refusals(void)
{
    const size_t D = 64, T = 4;
    dbuf<float> dx(T * D), dy(T * D);
    dbuf<__half> d16(T * D);
    dbuf<int> dst(1);
    std::vector<float> X(T * D, 1.0f), got(T * D);
    dx.up(X.data());
    dy.poison();
    const kvq_rotation H = KVQ_ROT_HADAMARD;
    const struct { kvq_status got, want; const char *what; } cs[] = {
        { kvq_cuda_rotate(H, 0, D, 0, nullptr, dy.p, T, dst.p, 0), KVQ_ERR_NULL, "NULL X" },
        { kvq_cuda_rotate(H, 0, D, 0, dx.p, nullptr, T, dst.p, 0), KVQ_ERR_NULL, "NULL Y" },
        { kvq_cuda_rotate(H, 0, D, 0, dx.p, dy.p, T, nullptr, 0), KVQ_ERR_NULL, "NULL status" },
        { kvq_cuda_rotate_f16(H, 0, D, dx.p, nullptr, T, dst.p, 0), KVQ_ERR_NULL, "NULL fp16 Y" },
        { kvq_cuda_rotate((kvq_rotation)3, 0, D, 0, dx.p, dy.p, T, dst.p, 0), KVQ_ERR_CONFIG, "kind 3" },
        { kvq_cuda_rotate((kvq_rotation)-1, 0, D, 0, dx.p, dy.p, T, dst.p, 0), KVQ_ERR_CONFIG, "kind -1" },
        { kvq_cuda_rotate(H, 0, D, 2, dx.p, dy.p, T, dst.p, 0), KVQ_ERR_CONFIG, "inverse 2" },
        { kvq_cuda_rotate(H, 0, 0, 0, dx.p, dy.p, T, dst.p, 0), KVQ_ERR_SIZE, "D = 0" },
        { kvq_cuda_rotate(H, 0, D, 0, dx.p, dy.p, 0, dst.p, 0), KVQ_ERR_SIZE, "T = 0" },
        { kvq_cuda_rotate(H, 0, 96, 0, dx.p, dy.p, 2, dst.p, 0), KVQ_ERR_SIZE, "D = 96 (not a power of two)" },
        { kvq_cuda_rotate_f16(KVQ_ROT_HADAMARD_SIGNS, 7, 48, dx.p, d16.p, 2, dst.p, 0), KVQ_ERR_SIZE, "fp16 D = 48" },
        { kvq_cuda_rotate(H, 0, 8192, 0, dx.p, dy.p, 1, dst.p, 0), KVQ_ERR_SIZE, "D = 8192 (over the limit)" },
        { kvq_cuda_rotate(H, 0, D, 0, dx.p, dy.p, SIZE_MAX / 8, dst.p, 0), KVQ_ERR_OVERFLOW, "T*D overflow" },
    };
    for (const auto &c : cs)
        CHECK(refused_with(c.got, c.want), "rotate: %s gave %s (%s), want %s", c.what,
              kvq_status_str(c.got), kvq_cuda_why(), kvq_status_str(c.want));
    std::vector<uint32_t> raw(T * D);
    CU(cudaMemcpy(raw.data(), dy.p, T * D * 4, cudaMemcpyDeviceToHost));
    size_t touched = 0;
    for (uint32_t u : raw) touched += u != 0xABABABABu;
    CHECK(touched == 0, "refused rotate calls wrote %zu floats", touched);
    /* kvq.h takes any D without a rotation: so does the GPU (a copy)       */
    KQ(kvq_cuda_rotate(KVQ_ROT_NONE, 0, 96, 0, dx.p, dy.p, 2, dst.p, 0));
    CHECK(kvq_cuda_status(dst.p, 0) == KVQ_OK, "D = 96 without rotation: %s", kvq_cuda_why());
    /* bad data: a NaN in row 1; row 2 rotates past KVQ_MAX_ABS_INPUT (fp16) */
    for (size_t d = 0; d < D; d++) X[2 * D + d] = 30000.0f;   /* y_0 = 30000 * 8 */
    X[1 * D + 5] = NAN;
    dx.up(X.data());
    dy.poison();
    KQ(kvq_cuda_rotate(H, 0, D, 0, dx.p, dy.p, T, dst.p, 0));
    kvq_status st = kvq_cuda_status(dst.p, 0);
    CU(cudaMemcpy(raw.data(), dy.p, T * D * 4, cudaMemcpyDeviceToHost));
    size_t row1 = 0, others = 0;
    for (size_t i = 0; i < T * D; i++) (i / D == 1 ? row1 : others) += raw[i] != 0xABABABABu;
    CHECK(refused_with(st, KVQ_ERR_NONFINITE) && row1 == 0 && others == (T - 1) * D,
          "rotate with a NaN: %s, %zu of the NaN row's floats written, %zu of the others' %zu",
          kvq_status_str(st), row1, others, (T - 1) * D);
    X[1 * D + 5] = 0.5f;
    dx.up(X.data());
    d16.poison();
    KQ(kvq_cuda_rotate_f16(H, 0, D, dx.p, d16.p, T, dst.p, 0));
    st = kvq_cuda_status(dst.p, 0);
    std::vector<kvq_f16> h16(T * D);
    CU(cudaMemcpy(h16.data(), d16.p, T * D * 2, cudaMemcpyDeviceToHost));
    size_t row2 = 0;
    for (size_t d = 0; d < D; d++) row2 += h16[2 * D + d] != 0xABABu;
    CHECK(refused_with(st, KVQ_ERR_RANGE) && row2 == 0 && h16[0] != 0xABABu,
          "rotate_f16 past KVQ_MAX_ABS_INPUT: %s, %zu floats of the row written", kvq_status_str(st), row2);
}

/* ======================================================================== */
/* attend-format: kvq.h Sec. 4.1's formats, decode attention on the GPU     */
/* ======================================================================== */
/* Every kvq_config_engine preset as a cache (fresh random K, V from the
   group's seed: prefill half, append the rest), exported in the token
   layout (kvq_cuda.cu Sec. 3), its pages shuffled into a pool, attended by
   kvq_cuda_attend, and every output row compared with kvq_attend on the
   same cache and queries (the reference; EAGER).
   FMT_TOL, the relative L2 error of a row: both sides decode the same
   codes to the same fp32 values (value(c) a + b, one rounding each; only
   INT's b term may be fused differently), then sum in different orders:
   kvq_attend per group then per token, the kernel per lane, per warp, per
   split. fp32 rounding over T <= 4K tokens and D <= 128 channels leaves
   ~1e-6 in practice (printed); 1e-4 is ATTN_TOL, the bar every other
   attention group meets, and a wrong parameter, grid point or scale moves
   a row by 1e-2 or more (the planted bugs of tests/emu/mutants.sh).
   Cases: D = 64 and 128; n_rep 1 and 4 (GQA; 3 runs as 4 with a head
   dropped); an fp16 window (residual 16: rows on both sides); eviction
   (dead slots); eviction then kvq_cache_compact; the rotated presets (q
   rotated by the key side, the output back by the value side, as
   kvq_attend); adversarial rows (kv_extreme: values to +-32752, tiny
   spreads, constant runs).                                             */
#define FMT_TOL ATTN_TOL
static const char *const engine_presets[] = {
    "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-per-token-head", "int8-per-token-head",
    "int4-per-token-head", "nvfp4", "nvfp4-4over6", "turboquant-k8v4", "turboquant-4bit-nc",
    "turboquant-k3v4-nc", "turboquant-3bit-nc", "q8_0", "q4_0" };
enum { FMT_PLAIN, FMT_EVICT, FMT_COMPACT };
static const char *const fmt_mode_name[] = { "plain", "evict", "evict+compact" };

/* A token-layout pool from b.ex (every export the same shape): pages
   shuffled, the value tables and the streams' side scales uploaded.   */
static void upload_token(gpu_batch &b)
{
    const kvq_cuda_export_t &e0 = b.ex[0];
    const int D = e0.head_dim;
    const size_t G = e0.group;
    std::vector<float> scales;
    upload_pages(b, true, G * kvq_cuda__tok_words(e0.key, D), G * kvq_cuda__tok_params(e0.key, D),
                 G * kvq_cuda__tok_words(e0.value, D), G * kvq_cuda__tok_params(e0.value, D), &scales);
    b.tok.key = e0.key;
    b.tok.value = e0.value;
    b.tok.key.value = b.put(e0.key_value, 256);
    b.tok.value.value = b.put(e0.value_value, 256);
    b.tok.scales = b.put(scales.data(), scales.size());
}

/* One preset's caches -> GPU -> every row against kvq_attend.            */
static size_t fmt_rows = 0;
static double fmt_worst = 0.0;
static void test_attend_format_case(const char *preset, size_t D, int n_rep, size_t R, int mode,
                                    bool extreme, size_t n_streams, size_t max_len)
{
    if (quick_mode) { max_len = std::min<size_t>(max_len, 300); n_streams = std::min<size_t>(n_streams, 2); }
    gpu_batch b;
    std::vector<kvq_cache> caches(n_streams);
    size_t built = 0;
    const char *why = "";
    bool ok = true;
    kv_extreme = extreme;
    for (size_t i = 0; i < n_streams && ok; i++) {
        kvq_config cfg;
        kvq_cache *c = &caches[i];
        if (!strncmp(preset, "hf-", 3)) {          /* HF's per-token INT caches */
            cfg = kvq_config_hf(D, kvq_hf_defaults(preset[3] - '0'));
            ok = true;
        } else {
            ok = kvq_config_engine(&cfg, D, preset) == KVQ_OK;
        }
        if (R) cfg.residual = R;
        ok = ok && kvq_cache_init(c, &cfg) == KVQ_OK;
        if (!ok) { why = kvq_why(); break; }
        built++;
        const size_t T = 1 + rng_below(max_len), pre = T / 2;
        std::vector<float> K, V;
        make_kv(T, D, K, V);
        ok = pre == 0 || kvq_cache_prefill(c, K.data(), V.data(), pre) == KVQ_OK;
        for (size_t t = pre; t < T && ok; t++) ok = kvq_cache_append(c, &K[t * D], &V[t * D]) == KVQ_OK;
        if (ok && mode != FMT_PLAIN && T > 8) {
            std::vector<uint8_t> keep(c->n_pos);
            for (auto &k : keep) k = rng_below(4) != 0;
            ok = kvq_cache_evict(c, keep.data(), keep.size(), NULL) == KVQ_OK;
            if (ok && mode == FMT_COMPACT) ok = kvq_cache_compact(c, 32, NULL) == KVQ_OK;
        }
        if (!ok) { why = kvq_why(); break; }
        kvq_cuda_export_t e;
        if (kvq_cuda_export(c, &e) != KVQ_OK) { why = kvq_cuda_why(); ok = false; break; }
        b.ex.push_back(e);
    }
    kv_extreme = false;
    CHECK(ok, "attend-format %s D=%zu %s: building or exporting the caches failed: %s", preset, D,
          fmt_mode_name[mode], why);
    if (ok) {
        CHECK(b.ex[0].layout == KVQ_CUDA_LAYOUT_TOKEN, "attend-format %s: exported layout %d", preset,
              b.ex[0].layout);
        upload_token(b);
        std::vector<float> hq(n_streams * n_rep * D), got(hq.size()), want(hq.size());
        for (auto &x : hq) x = rng_gauss();
        int n_splits = 0;
        const size_t wf = kvq_cuda_attend_workspace(n_streams, n_rep, (int)D, b.pool.group,
                                                    b.max_tokens, &n_splits);
        dbuf<float> dq(hq.size()), dout(hq.size()), dwork(wf);
        dbuf<int> dst(1);
        dq.up(hq.data());
        CU(cudaMemset(dout.p, 0xFF, dout.n * sizeof(float)));          /* NaN poison */
        KQ(kvq_cuda_attend_token(&b.pool, &b.tok, (int)D, b.d_streams, n_streams, n_rep, b.max_tokens,
                                 dq.p, dout.p, dwork.p, wf, dst.p, 0));
        const kvq_status status = kvq_cuda_status(dst.p, 0);
        dout.down(got.data());
        double worst = 0.0;
        size_t bad = 0;
        for (size_t i = 0; i < n_streams; i++) {
            std::vector<float> scratch((size_t)n_rep * kvq_attend_scratch_floats(&caches[i], KVQ_ATTN_EAGER));
            KQ(kvq_attend(&caches[i], &hq[i * n_rep * D], (size_t)n_rep, &want[i * n_rep * D], NULL,
                          KVQ_ATTN_EAGER, scratch.data(), scratch.size()));
            for (int h = 0; h < n_rep; h++) {
                const size_t o = (i * n_rep + h) * D;
                const double rel = rel_l2(&got[o], &want[o], D);
                if (!(rel <= FMT_TOL)) bad++;
                if (!(rel <= worst)) worst = rel;                    /* NaN sticks */
                fmt_rows++;
            }
        }
        if (!(worst <= fmt_worst)) fmt_worst = worst;
        CHECK(status == KVQ_OK, "attend-format %s: %s", preset, kvq_cuda_why());
        CHECK(bad == 0, "attend-format %s D=%zu n_rep=%d R=%zu %s%s streams=%zu splits=%d: %zu rows "
              "over %.0e against kvq_attend, worst rel err %.3g", preset, D, n_rep, R,
              fmt_mode_name[mode], extreme ? " extreme" : "", n_streams, n_splits, bad, FMT_TOL, worst);
        printf("  format %-24s D=%3zu n_rep=%d R=%2zu %-13s%s streams=%zu T<=%4zu: worst rel err %.2e\n",
               preset, D, n_rep, R, fmt_mode_name[mode], extreme ? " extreme" : "", n_streams, max_len,
               worst);
    }
    for (size_t i = 0; i < built; i++) kvq_cache_free(&caches[i]);
}

/* Bad input: refused on the host with a status and a reason, the output
   (poisoned) untouched; the tensor-core paths refuse the token layout.  */
static void test_attend_format_refusals(void)
{
    const size_t D = 64;
    kvq_config cfg;
    kvq_cache c;
    KQ(kvq_config_engine(&cfg, D, "nvfp4"));
    KQ(kvq_cache_init(&c, &cfg));
    std::vector<float> K, V;
    make_kv(70, D, K, V);
    KQ(kvq_cache_prefill(&c, K.data(), V.data(), 70));
    gpu_batch b;
    kvq_cuda_export_t e;
    KQ(kvq_cuda_export(&c, &e));
    b.ex.push_back(e);
    upload_token(b);
    const int n_rep = 2;
    int n_splits;
    const size_t wf = kvq_cuda_attend_workspace(1, n_rep, (int)D, 32, b.max_tokens, &n_splits);
    dbuf<float> dq(n_rep * D), dout(n_rep * D), dwork(wf);
    dbuf<int> dst(1);
    std::vector<float> hq(n_rep * D, 0.5f);
    dq.up(hq.data());
    dout.poison();
    auto attend = [&](const kvq_cuda_pool &p, const kvq_cuda_token *t) {
        return kvq_cuda_attend_token(&p, t, (int)D, b.d_streams, 1, n_rep, b.max_tokens, dq.p, dout.p,
                                     dwork.p, wf, dst.p, 0);
    };
    typedef kvq_cuda_pool P;
    typedef kvq_cuda_token TK;
    struct { const char *what; kvq_status want; void (*edit)(P &, TK &); } cs[] = {
        /* out-of-range values inside each enum's range (UBSan's rule)    */
        { "key format 15", KVQ_ERR_CONFIG, [](P &, TK &t) { t.key.format = (kvq_format)15; } },
        { "value format KVQ_FORMAT_COUNT", KVQ_ERR_CONFIG, [](P &, TK &t) { t.value.format = KVQ_FORMAT_COUNT; } },
        { "nvfp4 keys at 8 bits", KVQ_ERR_BITS, [](P &, TK &t) { t.key.bits = 8; } },
        { "e4m3 values at 4 bits", KVQ_ERR_BITS, [](P &, TK &t) { t.value.format = KVQ_FORMAT_E4M3; } },
        { "value group 32 for nvfp4", KVQ_ERR_GROUP, [](P &, TK &t) { t.value.group = 32; } },
        { "int key group 24", KVQ_ERR_GROUP, [](P &, TK &t) { t.key.format = KVQ_FORMAT_INT; t.key.group = 24; } },
        { "int key group 1 (< D/32)", KVQ_ERR_GROUP, [](P &, TK &t) { t.key.format = KVQ_FORMAT_INT; t.key.group = 1; } },
        { "no value table", KVQ_ERR_NULL, [](P &, TK &t) { t.value.value = nullptr; } },
        { "no side scales", KVQ_ERR_NULL, [](P &, TK &t) { t.scales = nullptr; } },
        { "an INT pool (bits 2)", KVQ_ERR_CONFIG, [](P &p, TK &) { p.bits = 2; } },
        { "48 slots a page", KVQ_ERR_GROUP, [](P &p, TK &) { p.group = 48; } },
        { "key rotation 3", KVQ_ERR_CONFIG, [](P &p, TK &) { p.key_rotation = (kvq_rotation)3; } },
        { "head_dim 96", KVQ_ERR_CONFIG, [](P &p, TK &) { p.head_dim = 96; } },
    };
    for (const auto &cz : cs) {
        kvq_cuda_pool p = b.pool;
        kvq_cuda_token t = b.tok;
        cz.edit(p, t);
        const kvq_status st = attend(p, &t);
        CHECK(refused_with(st, cz.want), "attend-format refusal, %s: %s (%s), want %s", cz.what,
              kvq_status_str(st), kvq_cuda_why(), kvq_status_str(cz.want));
    }
    {
        const kvq_status st = attend(b.pool, nullptr);
        CHECK(refused_with(st, KVQ_ERR_NULL), "attend-format refusal, no token description: %s (%s)",
              kvq_status_str(st), kvq_cuda_why());
    }
    std::vector<uint32_t> raw(n_rep * D);
    CU(cudaMemcpy(raw.data(), dout.p, raw.size() * 4, cudaMemcpyDeviceToHost));
    size_t written = 0;
    for (uint32_t u : raw) written += u != 0xABABABABu;
    CHECK(written == 0, "attend-format refusals wrote %zu floats of the output", written);
    /* the INT entry points refuse a token-layout pool (its bits = 0):
       kvq_cuda_attend, the tensor-core kernel and its page tools          */
    {
        const kvq_status st0 = kvq_cuda_attend(&b.pool, (int)D, b.d_streams, 1, n_rep, b.max_tokens,
                                               dq.p, dout.p, dwork.p, wf, dst.p, 0);
        CHECK(refused_with(st0, KVQ_ERR_BITS), "kvq_cuda_attend on a token-layout pool: %s (%s)",
              kvq_status_str(st0), kvq_cuda_why());
        int sa = 0, sb = 0;
        const size_t wm = kvq_cuda_attend_mma_workspace(1, n_rep, (int)D, 32, 4, 64, 0, b.max_tokens, &sa, &sb);
        dbuf<float> dwm(wm);
        const kvq_status st = kvq_cuda_attend_mma(&b.pool, (int)D, b.d_streams, 1, n_rep, b.max_tokens,
                                                  dq.p, dout.p, dwm.p, wm, dst.p, 0, 0);
        CHECK(refused_with(st, KVQ_ERR_CONFIG), "kvq_cuda_attend_mma on a token-layout pool: %s (%s)",
              kvq_status_str(st), kvq_cuda_why());
        int32_t page0 = 0;
        dbuf<int32_t> dp(1);
        dp.up(&page0);
        const kvq_status st2 = kvq_cuda_seal_pages(&b.pool, dp.p, 1, 1, 0);
        CHECK(refused_with(st2, KVQ_ERR_CONFIG), "kvq_cuda_seal_pages on a token-layout pool: %s (%s)",
              kvq_status_str(st2), kvq_cuda_why());
        dbuf<int64_t> d64(2);
        const kvq_status st3 = kvq_cuda_move_pages(&b.pool, d64.p, d64.p + 1, 1, dwm.p, 0);
        CHECK(refused_with(st3, KVQ_ERR_CONFIG), "kvq_cuda_move_pages on a token-layout pool: %s (%s)",
              kvq_status_str(st3), kvq_cuda_why());
    }
    /* the export: fp32 rows, and a per-channel key format, refused with
       the export struct untouched                                        */
    {
        kvq_cuda_export_t x;
        memset(&x, 0xAB, sizeof x);
        kvq_config c32 = cfg;
        c32.fp_bits = 32;
        kvq_cache cc;
        KQ(kvq_cache_init(&cc, &c32));
        KQ(kvq_cache_prefill(&cc, K.data(), V.data(), 40));
        const kvq_status st = kvq_cuda_export(&cc, &x);
        const unsigned char *xb = (const unsigned char *)&x;
        size_t touched = 0;
        for (size_t i = 0; i < sizeof x; i++) touched += xb[i] != 0xAB;
        CHECK(refused_with(st, KVQ_ERR_CONFIG) && touched == 0, "export of an fp32-row nvfp4 cache: "
              "%s (%s), %zu bytes of the export written", kvq_status_str(st), kvq_cuda_why(), touched);
        kvq_cache_free(&cc);
        kvq_config cpc;
        KQ(kvq_config_engine(&cpc, D, "fp8-e4m3-per-token-head"));
        cpc.key_axis = KVQ_PER_CHANNEL;
        cpc.group = 32;
        cpc.key_schedule = KVQ_SCHED_FLUSH;
        cpc.residual = 32;
        if (kvq_cache_init(&cc, &cpc) == KVQ_OK) {
            KQ(kvq_cache_prefill(&cc, K.data(), V.data(), 64));
            const kvq_status st2 = kvq_cuda_export(&cc, &x);
            touched = 0;
            for (size_t i = 0; i < sizeof x; i++) touched += xb[i] != 0xAB;
            CHECK(refused_with(st2, KVQ_ERR_CONFIG) && touched == 0, "export of per-channel e4m3 keys: "
                  "%s (%s), %zu bytes written", kvq_status_str(st2), kvq_cuda_why(), touched);
            kvq_cache_free(&cc);
        } else {
            printf("  (per-channel e4m3 keys: kvq_cache_init refuses them: %s)\n", kvq_why());
        }
    }
    kvq_cache_free(&c);
}

static void test_attend_format(void)
{
    const size_t n_p = sizeof engine_presets / sizeof engine_presets[0];
    /* every preset at both D and both head counts, then the window,
       eviction, compaction and adversarial rows on a rotating sample    */
    for (size_t i = 0; i < n_p; i++)
        for (size_t D = 64; D <= 128; D *= 2)
            for (int n_rep = 1; n_rep <= 4; n_rep += 3) {
                if (quick_mode && (n_rep == 4) != ((i + D / 64) % 2 == 0)) continue;
                test_attend_format_case(engine_presets[i], D, n_rep, 0, FMT_PLAIN, false, 3, 1500);
            }
    for (size_t i = 0; i < n_p; i++) {
        if (quick_mode && i % 3) continue;
        const size_t D = i % 2 ? 64 : 128;
        test_attend_format_case(engine_presets[i], D, 3, 16, FMT_PLAIN, false, 3, 700);
        test_attend_format_case(engine_presets[i], D, 1, 16, FMT_EVICT, false, 3, 700);
        test_attend_format_case(engine_presets[i], 192 - D, 4, 0, FMT_COMPACT, false, 3, 700);
        test_attend_format_case(engine_presets[i], D, 4, 0, FMT_PLAIN, true, 2, 700);
    }
    /* HF's policy (both sides per token, INT, FLUSH with its window) exports
       in the same layout                                                 */
    for (int bits = 2; bits <= 4; bits += 2) {
        test_attend_format_case(bits == 2 ? "hf-2bit" : "hf-4bit", 128, 1, 0, FMT_PLAIN, false, 3, 1500);
        test_attend_format_case(bits == 2 ? "hf-2bit" : "hf-4bit", 64, 4, 0, FMT_EVICT, false, 3, 700);
    }
    printf("  attend-format: %zu rows against kvq_attend, worst rel err %.2e (tolerance %.0e)\n",
           fmt_rows, fmt_worst, FMT_TOL);
    test_attend_format_refusals();
}

/* ======================================================================== */
/* fp8-cvt: the hardware FP8 conversion against the software rounding       */
/* ======================================================================== */
/* kvq_cuda.cu Sec. 2.2 (kvq_dev_cvt_fp8): cvt.rn.satfinite.{e4m3x2,e5m2x2}
   .f32 on a GPU of sm_89+, the emulator's model of it (written from the
   PTX ISA, tests/emu/kvq_emu.h) here, against kvq_dev_to_minifloat, NaN
   skipped (the ISA leaves its sign open).
     boundaries (kernel)  every grid value of both formats, each midpoint
                          between neighbours and the float either side of
                          it, the subnormal edge, the saturation edge
                          (448/464/480, 57344/61440), +-0, +-Inf, FLT_MAX,
                          fp32 subnormals: both signs
     the fp32 line        a GPU: all 2^32 patterns in the kernel (the
       (kernel)           proof on the hardware; 2^24 strata in quick
                          mode, the sanitizer runs); the emulator: a
                          stratified sample (2^16 quick, 2^20 full)
     the CPU (emulator)   the model against kvq_dev_to_minifloat and
                          kvq.h's kvq_f32_to_e4m3/_e5m2: full pass, every
                          pattern of magnitude in [2^-17, 2^16) (biased
                          exponents 110..142, both signs: 553M, all the
                          patterns whose code is not +-0 or +-MAX_NORM in
                          either format) plus every 65537th of the rest of
                          the line; quick pass, every 509th of that range */
static void fp8_cvt_points(std::vector<uint32_t> &pts)
{
    auto add = [&](float x) {
        for (float v : { x, -x, nextafterf(x, INFINITY), nextafterf(x, -INFINITY) }) {
            uint32_t u;
            memcpy(&u, &v, 4);
            pts.push_back(u);
            pts.push_back(u ^ 0x80000000u);
        }
    };
    for (int f = 0; f < 2; f++) {
        const unsigned max_mag = f ? 0x7B : 0x7E;
        for (unsigned c = 0; c <= max_mag; c++) {
            const float v = f ? kvq_e5m2_to_f32((uint8_t)c) : kvq_e4m3_to_f32((uint8_t)c);
            const float w = c < max_mag ? (f ? kvq_e5m2_to_f32((uint8_t)(c + 1)) : kvq_e4m3_to_f32((uint8_t)(c + 1)))
                                        : v + (v - (f ? kvq_e5m2_to_f32((uint8_t)(c - 1)) : kvq_e4m3_to_f32((uint8_t)(c - 1))));
            add(v);
            add(0.5f * (v + w));                /* a tie (exact in fp32)  */
        }
    }
    for (float x : { 0.0f, 448.0f, 464.0f, 480.0f, 896.0f, 57344.0f, 61440.0f, 65536.0f, 1e10f, FLT_MAX,
                     INFINITY, FLT_MIN, 1e-40f, 1.4e-45f, 0.0009765625f /* 2^-10 */, 7.62939453e-06f /* 2^-17 */ })
        add(x);
}

static void test_fp8_cvt(void)
{
    std::vector<uint32_t> pts;
    fp8_cvt_points(pts);
    dbuf<uint32_t> dl(pts.size());
    dl.up(pts.data());
    dbuf<unsigned> dout(4);
    unsigned o[4];
    int native = 0;
    size_t finite = 0;
    for (uint32_t u : pts) finite += (u & 0x7FFFFFFFu) <= 0x7F800000u;
    KQ(kvq_cuda_fp8_check(0, 1, pts.size(), dl.p, dout.p, &native, 0));
    dout.down(o);
    CHECK(o[0] == 0 && o[1] == 0 && o[3] == finite, "fp8-cvt boundaries: %u E4M3 and %u E5M2 codes of "
          "%u compared (%zu non-NaN points) differ, e.g. pattern 0x%08x", o[0], o[1], o[3], finite, o[2]);
    printf("  fp8-cvt: %zu boundary points, %u differ (%s)\n", pts.size(), o[0] + o[1],
#ifdef KVQ_EMU
           "the emulator's model of cvt.rn.satfinite"
#else
           native ? "the instruction" : "no instruction below sm_89: both paths are the software one"
#endif
           );
#ifdef KVQ_EMU
    const uint64_t count = quick_mode ? (1u << 16) : (1u << 20);
#else                          /* quick: the sanitizer runs, ~100x slower */
    const uint64_t count = quick_mode ? (1u << 24) : (uint64_t)1 << 32;
#endif
    const uint32_t stride = (uint32_t)(((uint64_t)1 << 32) / count) | 1u;   /* odd: strata of the line */
    KQ(kvq_cuda_fp8_check(0x9e37u, stride, count, nullptr, dout.p, &native, 0));
    dout.down(o);
    CHECK(o[0] == 0 && o[1] == 0, "fp8-cvt, %llu patterns (stride %u): %u E4M3 and %u E5M2 codes "
          "differ, e.g. pattern 0x%08x", (unsigned long long)count, stride, o[0], o[1], o[2]);
    printf("  fp8-cvt: %u fp32 patterns (NaN skipped) of %llu, stride %u, in the kernel: %u differ%s\n",
           o[3], (unsigned long long)count, stride, o[0] + o[1],
           native ? " (cvt.rn.satfinite on this GPU: the hardware proof)" : "");
#ifdef KVQ_EMU
    /* the CPU proof of the model: every pattern where a rounding happens */
    uint64_t r[6], sum[5] = { 0, 0, 0, 0, 0 };
    const uint32_t lo = 110u << 23, n_range = 33u << 23;
    const uint32_t step = quick_mode ? 509u : 1u;
    for (uint32_t sign = 0; sign < 2; sign++) {
        kvq_cuda_fp8_check_cpu(lo | sign << 31, step, n_range / step, r);
        for (int k = 0; k < 4; k++) sum[k] += r[k];
        sum[4] += r[5];
        if (r[4] != 0xFFFFFFFFu) printf("  fp8-cvt: pattern 0x%08llx differs\n", (unsigned long long)r[4]);
    }
    kvq_cuda_fp8_check_cpu(0x1234u, 65537u, 65537u, r);     /* the rest of the line, strided */
    for (int k = 0; k < 4; k++) sum[k] += r[k];
    sum[4] += r[5];
    CHECK(sum[0] == 0 && sum[1] == 0 && sum[2] == 0 && sum[3] == 0, "fp8-cvt on the CPU: the model "
          "differs from kvq_dev_to_minifloat on %llu E4M3 / %llu E5M2 patterns, from kvq.h on %llu / %llu",
          (unsigned long long)sum[0], (unsigned long long)sum[1], (unsigned long long)sum[2],
          (unsigned long long)sum[3]);
    printf("  fp8-cvt: the model on the CPU, %llu patterns (%s): %llu differ from kvq_dev_to_minifloat, "
           "%llu from kvq.h\n", (unsigned long long)sum[4],
           quick_mode ? "every 509th of |x| in [2^-17, 2^16)" : "every one of |x| in [2^-17, 2^16)",
           (unsigned long long)(sum[0] + sum[1]), (unsigned long long)(sum[2] + sum[3]));
#endif
}

int main(int argc, char **argv)
{
    const bool host_only = argc == 2 && !strcmp(argv[1], "--host");
    const bool kernels_only = argc == 2 && !strcmp(argv[1], "--kernels");
    if (argc > 1 && !host_only && !kernels_only) {
        printf("usage: test_gpu [--host | --kernels]   (--host: the CPU-side checks only, no GPU\n"
               "       needed; --kernels: the kernel checks only)\n");
        return 2;
    }
    if (!kernels_only) {
        printf("test_gpu: host checks\n");
        test_host_walk();
        test_fragment_replay();
        test_fragment_inverse();
        test_value_pow2();
        test_fragment_i8();
        test_division();
    }
    if (host_only) return TEST_END("test_gpu --host");
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("test_gpu: no CUDA device (run `test_gpu --host` for the CPU-side checks)\n");
        return 1;
    }
    cudaDeviceProp prop;
    quick_mode = getenv("KVQ_TEST_QUICK") != NULL;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("test_gpu%s on %s (sm_%d%d)\n", quick_mode ? " (quick)" : "", prop.name, prop.major, prop.minor);
    /* KVQ_TEST_ONLY=name[,name...]: only those groups (while developing) */
    const char *only = getenv("KVQ_TEST_ONLY");
    auto chosen = [&](const char *name) {
        if (!only) return true;
        const std::string list = std::string(",") + only + ",";
        return list.find(std::string(",") + name + ",") != std::string::npos;
    };
    auto run = [&](const char *name, void (*fn)(void)) {
        if (!chosen(name)) return;
        fn();
        printf("  %s: %d checks so far\n", name, test__pass + test__fail);
    };
    run("quantize", test_quantize);   /* G = 32 at B = 2/4 runs the fixed-shape kernel */
    /* groups added later draw from a stream of their own, so that adding
       them moves no draw of the groups after them                       */
    run("quantize-sealed", [] {
        const uint64_t saved = rng_state;
        rng_state = 0x5ea1edull;
        test_quantize_sealed();
        rng_state = saved;
    });
    run("quantize-stream", [] {
        const uint64_t saved = rng_state;
        rng_state = 0x57ea3ull;
        test_quantize_stream();
        rng_state = saved;
    });
    run("quantize-format", [] {
        const uint64_t saved = rng_state;
        rng_state = 0xf0a7ull;
        test_quantize_format();
        rng_state = saved;
    });
    run("attend-format", [] {
        const uint64_t saved = rng_state;
        rng_state = 0xa77e4dull;
        test_attend_format();
        rng_state = saved;
    });
    run("fp8-cvt", test_fp8_cvt);
    run("rotate", [] { test_rotate_rows(); test_rotate_codes(); test_rotate_attend(); test_rotate_refusals(); });
    run("attend", [] { test_attend(); test_attend_status(); test_attend_splits(); });
    run("mma", test_attend_mma);
    if (chosen("attend")) {
        CHECK(tiled_streams > 0, "no stream reached a second tile of a G > 32 page");
        printf("  tiles: %zu streams reached a page's second tile\n", tiled_streams);
    }
    run("compaction", [] { test_compaction_round(false); test_compaction_round(true); test_move_overlap(); });
    run("compact-pages", test_compact_pages);
    return TEST_END("test_gpu");
}
