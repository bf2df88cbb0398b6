/* bench/mma_probe.cu - the tensor-core step of the next attention kernel,
   alone: "measure first" (issue 19). Fragment-order key pages (kvq_cuda.cu
   Sec. 7) -> the scores of 4 or 8 query heads. Per 16-token row tile, a
   lane loads its D*B/64 words (one 16-byte load at D = 128, B = 2),
   decodes them (kvq_mma_decode: 1 LOP3 + 1 HFMA2 per two codes) and
   issues, per 16 x 16 tile of codes, one MMA for 4 heads x (hi, lo), or
   two for 8 heads (kvq_mma_16816).

   What it leaves out, on purpose: the per-page weights (the real kernel
   rebuilds B once per page: G/16 row tiles share it), the zero term, the
   softmax and the value side (the same decode and MMA with A = V^T). So
   it bounds what the full kernel can reach: if this step alone cannot run
   at the memory roof, nothing built on it will.

   Each shape is validated before it is timed: every lane's scores against
   a float64 sum over the same codes (kvq.h's order, before the
   permutation) and the same hi + lo weights. Timing: CUDA events, median
   of REPS launches over 256 MiB of pages (5x an H100's L2), GB/s of the
   words read and % of a device-to-device copy measured in the same run
   (bytes read + written, as bench_gpu).

     build/mma_probe          (make cuda-build; needs an sm_80+ GPU to run)
     bench/sass_probe.sh      its loop's SASS instructions per code (no GPU) */
#include "kvq.h"
#define KVQ_CUDA_DECLARE_ONLY
#include "kvq_cuda.cu"

#include <vector>
#include <algorithm>

#define REPS 20
#define PROBE_G 128                 /* tokens per page (any multiple of 32)  */

#define CU(call)                                                              \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                   cudaGetErrorString(e_));                                   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* words: (n_tiles, 32 lanes, KPL) fragment-order key words (pages laid end
   to end: a page is G/16 row tiles). bfrag: (D/16 k-tiles, NQ quads of
   heads, 32 lanes, 2) B registers. scores: NULL (timing: only a checksum
   is written, to sink) or (n_tiles, NQ, 32 lanes, 4) C registers.       */
template <int B, int D, int NQ, int SUB>    /* SUB: the subnormal decode (Sec. 7) */
__global__ void __launch_bounds__(128)
mma_probe_keys(const uint32_t *__restrict__ words, size_t n_tiles,
               const uint32_t *__restrict__ bfrag, float *__restrict__ scores,
               float *__restrict__ sink)
{
    constexpr int KPL = D * B / 64;        /* words per lane per row tile   */
    constexpr int KT = D / 16;             /* k-tiles (16 channels each)    */
    constexpr int TPW = 4 / B;             /* k-tiles per word              */
    static_assert(KPL % 2 == 0, "a lane's words load as uint2 or uint4");
    const int lane = threadIdx.x & 31;
    uint32_t b[KT][NQ][2];
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int g = 0; g < NQ; g++)
#pragma unroll
            for (int j = 0; j < 2; j++)
                b[kt][g][j] = bfrag[((kt * NQ + g) * 32 + lane) * 2 + j];
    const size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const size_t n_warps = (size_t)gridDim.x * blockDim.x / 32;
    float check = 0.0f;
#pragma unroll 1
    for (size_t tile = warp; tile < n_tiles; tile += n_warps) {
        uint32_t w[KPL];
        const uint32_t *src = words + (tile * 32 + lane) * KPL;
        if constexpr (KPL % 4 == 0) {
#pragma unroll
            for (int i = 0; i < KPL; i += 4) {
                const uint4 v = __ldcs(reinterpret_cast<const uint4 *>(src + i));
                w[i] = v.x; w[i + 1] = v.y; w[i + 2] = v.z; w[i + 3] = v.w;
            }
        } else {
            const uint2 v = __ldcs(reinterpret_cast<const uint2 *>(src));
            w[0] = v.x; w[1] = v.y;
        }
        float c[NQ][4] = {};
#pragma unroll
        for (int i = 0; i < KPL; i++) {
            uint32_t a[16 / B];
            if constexpr (SUB) kvq_mma_decode_subnormal<B>(w[i], a);
            else kvq_mma_decode<B>(w[i], a);
#pragma unroll
            for (int t = 0; t < TPW; t++) {
                const int kt = i * TPW + t;
#pragma unroll
                for (int g = 0; g < NQ; g++) kvq_mma_16816(c[g], a + 4 * t, b[kt][g][0], b[kt][g][1]);
            }
        }
#pragma unroll
        for (int g = 0; g < NQ; g++) {
            if (scores) {
                float4 *dst = reinterpret_cast<float4 *>(scores + ((tile * NQ + g) * 32 + lane) * 4);
                *dst = make_float4(c[g][0], c[g][1], c[g][2], c[g][3]);
            } else {
                check += c[g][0] + c[g][1] + c[g][2] + c[g][3];
            }
        }
    }
    if (!scores) sink[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = check;
}

/* The whole step of the design, for its instruction count only
   (bench/sass_probe.sh; never launched, so not validated or timed: the
   key step above is the measured part). One iteration = 16 TPW tokens of
   one (stream, KV head), 4 query heads, value group Gv = D:
     keys    the probe's decode + MMAs, per 16-token row tile
     softmax p = 2^(s - m) in the C layout, the running sum
     hand-off each value-B element is one __shfl_sync from the lane
             kvq_mma_score_source names, times the token's value scale,
             split hi or lo (the lane's column parity) with the page's
             exponent e (p <= 1, so max |p a| <= max a: one e per page)
     values  decode + one MMA per 16 x 16 tile of codes, D/16 channel
             tiles, accumulated in registers for the whole stream
   Left out: the running max's rescale (once per tile at most), the zero
   terms (a few FMAs per tile), page scales (once per page).             */
template <int B, int D>
__global__ void __launch_bounds__(128)
mma_step_count(const uint32_t *__restrict__ kwords, const uint32_t *__restrict__ vwords,
               const float *__restrict__ vscale /* per token */, const uint32_t *__restrict__ bfrag,
               size_t n_iter, float m, float scale /* 2^e */, float *__restrict__ out)
{
    constexpr int KPL = D * B / 64, KT = D / 16, TPW = 4 / B, VPL = D / 16;
    const int lane = threadIdx.x & 31;
    uint32_t b[KT][2];
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int j = 0; j < 2; j++) b[kt][j] = bfrag[(kt * 32 + lane) * 2 + j];
    int src[4];
    int row[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int half;
        kvq_mma_score_source(lane, i, &src[i], &half);
        row[i] = kvq_mma_b_row(lane, i);
    }
    const bool lo_part = kvq_mma_b_col(lane) & 1;
    float acc[VPL][4] = {}, l = 0.0f;
#pragma unroll 1
    for (size_t it = 0; it < n_iter; it++) {
        uint32_t bv[TPW][2];
#pragma unroll
        for (int t = 0; t < TPW; t++) {              /* keys: one row tile */
            const uint32_t *kw = kwords + ((it * TPW + t) * 32 + lane) * KPL;
            uint32_t w[KPL];
#pragma unroll
            for (int i = 0; i < KPL; i += 2) {
                const uint2 v = __ldcs(reinterpret_cast<const uint2 *>(kw + i));
                w[i] = v.x; w[i + 1] = v.y;
            }
            float c[4] = {};
#pragma unroll
            for (int i = 0; i < KPL; i++) {
                uint32_t a[16 / B];
                kvq_mma_decode<B>(w[i], a);
#pragma unroll
                for (int u = 0; u < TPW; u++)
                    kvq_mma_16816(c, a + 4 * u, b[i * TPW + u][0], b[i * TPW + u][1]);
            }
            const float p0 = exp2f(c[0] + c[1] - m), p1 = exp2f(c[2] + c[3] - m);
            l += p0 + p1;
            __half h[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {            /* the hand-off        */
                const float p = __shfl_sync(0xffffffffu, i < 2 ? p0 : p1, src[i]);
                const float x = p * vscale[(it * TPW + t) * 16 + row[i]] * scale;   /* exact x 2^e */
                const __half hi = __float2half_rn(x);
                h[i] = lo_part ? __float2half_rn(x - __half2float(hi)) : hi;
            }
            const __half2 b01 = __halves2half2(h[0], h[1]), b23 = __halves2half2(h[2], h[3]);
            bv[t][0] = *reinterpret_cast<const uint32_t *>(&b01);
            bv[t][1] = *reinterpret_cast<const uint32_t *>(&b23);
        }
        const uint32_t *vw = vwords + (it * 32 + lane) * VPL;
#pragma unroll
        for (int mt = 0; mt < VPL; mt++) {           /* values: channel tile mt */
            uint32_t a[16 / B];
            kvq_mma_decode<B>(__ldcs(vw + mt), a);
#pragma unroll
            for (int t = 0; t < TPW; t++) kvq_mma_16816(acc[mt], a + 4 * t, bv[t][0], bv[t][1]);
        }
    }
    float sum = l;
#pragma unroll
    for (int mt = 0; mt < VPL; mt++) sum += acc[mt][0] + acc[mt][1] + acc[mt][2] + acc[mt][3];
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
template __global__ void mma_step_count<2, 128>(const uint32_t *, const uint32_t *, const float *,
                                                const uint32_t *, size_t, float, float, float *);
template __global__ void mma_step_count<4, 128>(const uint32_t *, const uint32_t *, const float *,
                                                const uint32_t *, size_t, float, float, float *);

typedef void (*probe_fn)(const uint32_t *, size_t, const uint32_t *, float *, float *);
static bool validate_only;                  /* --validate: no timing       */

static uint64_t rng = 0x6d6d61ull;
static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float next_unit(void) { return (float)((next_u64() >> 40) * (1.0 / 16777216.0)); }

static float time_ms(probe_fn fn, const uint32_t *d_words, size_t n_tiles, const uint32_t *d_b,
                     float *d_sink, unsigned blocks)
{
    cudaEvent_t t0, t1;
    CU(cudaEventCreate(&t0));
    CU(cudaEventCreate(&t1));
    std::vector<float> ms;
    for (int r = 0; r < REPS + 2; r++) {
        CU(cudaEventRecord(t0));
        KVQ_CUDA_LAUNCH(fn, blocks, 128, 0, 0)(d_words, n_tiles, d_b, nullptr, d_sink);
        CU(cudaEventRecord(t1));
        CU(cudaEventSynchronize(t1));
        float m;
        CU(cudaEventElapsedTime(&m, t0, t1));
        if (r >= 2) ms.push_back(m);                   /* 2 warm-up launches */
    }
    CU(cudaEventDestroy(t0));
    CU(cudaEventDestroy(t1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static double copy_gbps(void)
{
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    CU(cudaMalloc(&a, n));
    CU(cudaMalloc(&b, n));
    CU(cudaMemset(a, 1, n));
    cudaEvent_t t0, t1;
    CU(cudaEventCreate(&t0));
    CU(cudaEventCreate(&t1));
    std::vector<float> ms;
    for (int r = 0; r < 7; r++) {
        CU(cudaEventRecord(t0));
        CU(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
        CU(cudaEventRecord(t1));
        CU(cudaEventSynchronize(t1));
        float m;
        CU(cudaEventElapsedTime(&m, t0, t1));
        ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    CU(cudaFree(a));
    CU(cudaFree(b));
    return 2.0 * n / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

/* One shape: build pages, validate a small launch, time a large one.
   SUB = 1: the subnormal decode, whose B rows 8-15 of each k-tile are
   pre-scaled by 2^-k_col and whose C row halves are post-scaled by
   2^(24 - k_row) (kvq_cuda.cu Sec. 7; the post-scale is the host's here). */
template <int B, int D, int NQ, int SUB>
static bool run_shape(double copy, int sms)
{
    const int G = PROBE_G, KT = D / 16, H = 4 * NQ;
    const size_t page_words = (size_t)D * G * B / 32;
    /* validate_only: the 64 pages the check reads, no timing             */
    const size_t bytes = validate_only ? 64 * page_words * 4 : (size_t)256 << 20;
    const size_t n_pages = bytes / (page_words * 4);
    const size_t n_tiles = n_pages * (G / 16);
    /* pages: random codes in kvq.h's order, then fragment order          */
    std::vector<uint32_t> plain(n_pages * page_words), frag(plain.size()), scratch(page_words);
    for (auto &x : plain) x = (uint32_t)next_u64();
    for (size_t p = 0; p < n_pages; p++)                 /* v: any words will do */
        if (kvq_cuda_fragment_page(&plain[p * page_words], &plain[p * page_words], D, G, B,
                                   &frag[p * page_words], scratch.data()) != KVQ_OK) {
            printf("mma_probe: kvq_cuda_fragment_page refused D=%d G=%d B=%d\n", D, G, B);
            return false;
        }
    /* weights of H heads, each its own magnitude; B column 2j = head j's
       hi, 2j + 1 its lo (kvq_cuda.cu Sec. 7)                              */
    std::vector<float> W((size_t)D * H);
    std::vector<double> Wsum((size_t)D * H);
    std::vector<int> ex(H);
    const int kc = SUB ? kvq_mma_sub_shift(B, 0, 1) : 0;
    for (int h = 0; h < H; h++) {
        const float mag = ldexpf(1.0f, (int)(next_u64() % 20) - 10);
        float mx = 0.0f;
        for (int d = 0; d < D; d++) {              /* stored pre-scaled (SUB) */
            W[(size_t)d * H + h] = ldexpf(mag * (2.0f * next_unit() - 1.0f), d % 16 >= 8 ? -kc : 0);
            mx = std::max(mx, fabsf(W[(size_t)d * H + h]));
        }
        ex[h] = kvq_mma_exponent(mx);
        for (int d = 0; d < D; d++) {
            kvq_f16 hi, lo;
            kvq_mma_split(W[(size_t)d * H + h], ex[h], &hi, &lo);
            Wsum[(size_t)d * H + h] = (double)__half2float(__ushort_as_half(hi)) +
                                      __half2float(__ushort_as_half(lo));
        }
    }
    std::vector<uint32_t> bfrag((size_t)KT * NQ * 32 * 2);
    for (int kt = 0; kt < KT; kt++)
        for (int g = 0; g < NQ; g++)
            for (int lane = 0; lane < 32; lane++) {
                const int h = 4 * g + kvq_mma_b_col(lane) / 2;
                kvq_mma_b_regs(lane, &W[(size_t)16 * kt * H + h], (size_t)H, ex[h],
                               &bfrag[((size_t)(kt * NQ + g) * 32 + lane) * 2]);
            }
    uint32_t *d_words, *d_b;
    float *d_scores, *d_sink;
    const size_t check_tiles = 64 * (G / 16);           /* the first 64 pages */
    const unsigned blocks = (unsigned)sms * 8;
    CU(cudaMalloc(&d_words, frag.size() * 4));
    CU(cudaMalloc(&d_b, bfrag.size() * 4));
    CU(cudaMalloc(&d_scores, check_tiles * NQ * 32 * 4 * sizeof(float)));
    CU(cudaMalloc(&d_sink, (size_t)blocks * 128 * sizeof(float)));
    CU(cudaMemcpy(d_words, frag.data(), frag.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d_b, bfrag.data(), bfrag.size() * 4, cudaMemcpyHostToDevice));
    probe_fn fn = mma_probe_keys<B, D, NQ, SUB>;
    KVQ_CUDA_LAUNCH(fn, 64, 128, 0, 0)(d_words, check_tiles, d_b, d_scores, d_sink);
    CU(cudaGetLastError());
    std::vector<float> got(check_tiles * NQ * 32 * 4);
    CU(cudaMemcpy(got.data(), d_scores, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    /* float64 reference over kvq.h's order: head 4g + tig of a lane is
       (c0 + c1) at row gid and (c2 + c3) at row gid + 8, times 2^-e;
       error relative to sum_d 15 |w_d|                                    */
    double worst = 0.0;
    for (size_t tile = 0; tile < check_tiles; tile++) {
        const uint32_t *pw = &plain[tile / (G / 16) * page_words];
        for (int g = 0; g < NQ; g++)
            for (int lane = 0; lane < 32; lane++)
                for (int half = 0; half < 2; half++) {
                    const int t = (int)(tile % (G / 16)) * 16 + kvq_mma_c_row(lane, 2 * half);
                    const int h = 4 * g + kvq_mma_c_col(lane, 0) / 2;
                    const float *c = &got[((tile * NQ + g) * 32 + lane) * 4 + 2 * half];
                    double ref = 0.0, mag = 0.0;
                    for (int d = 0; d < D; d++) {   /* the true weight: undo the pre-scale */
                        const double w = ldexp(Wsum[(size_t)d * H + h], -ex[h] + (d % 16 >= 8 ? kc : 0));
                        ref += (double)kvq_dev_get_code(pw + (size_t)d * (G * B / 32), (uint32_t)t, B) * w;
                        mag += 15.0 * fabs(w);
                    }
                    const int post = SUB ? 24 - kvq_mma_sub_shift(B, half, 0) : 0;
                    worst = std::max(worst, fabs(ldexp((double)c[0] + c[1], post - ex[h]) - ref) / mag);
                }
    }
    const bool ok = worst <= 1e-6;
    if (ok && validate_only) {
        printf("B=%d D=%3d heads=%d %-9s  valid (worst %.1e)\n", B, D, H, SUB ? "subnormal" : "magic", worst);
    } else if (ok) {                            /* timed only once valid */
        const float ms = time_ms(fn, d_words, n_tiles, d_b, d_sink, blocks);
        const double gbps = frag.size() * 4.0 / (ms * 1e-3) / 1e9;
        const double codes = (double)n_tiles * 16 * D;
        printf("B=%d D=%3d heads=%d %-9s  valid (worst %.1e)  %8.1f us  %6.0f GB/s  %5.1f%% of copy  %6.1f Gcodes/s\n",
               B, D, H, SUB ? "subnormal" : "magic", worst, ms * 1e3, gbps, 100.0 * gbps / copy,
               codes / (ms * 1e-3) / 1e9);
    } else {
        printf("B=%d D=%3d heads=%d %-9s  INVALID (worst %.1e): not timed\n", B, D, H,
               SUB ? "subnormal" : "magic", worst);
    }
    CU(cudaFree(d_words));
    CU(cudaFree(d_b));
    CU(cudaFree(d_scores));
    CU(cudaFree(d_sink));
    return ok;
}

int main(int argc, char **argv)
{
    validate_only = argc == 2 && !strcmp(argv[1], "--validate");
    if (argc > 1 && !validate_only) {
        printf("usage: mma_probe [--validate]   (--validate: check every shape, time none;\n"
               "       what make test-cuda-emu runs on the CPU emulator)\n");
        return 2;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("mma_probe: no CUDA device (bench/sass_probe.sh counts its SASS without one)\n");
        return 1;
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        printf("mma_probe: %s is sm_%d%d; mma.m16n8k16 needs sm_80+\n", prop.name, prop.major, prop.minor);
        return 1;
    }
    const double copy = validate_only ? 0.0 : copy_gbps();
    if (validate_only) printf("mma_probe --validate on %s\n", prop.name);
    else printf("mma_probe on %s: device-to-device copy %.0f GB/s (read + write, 1 GiB)\n", prop.name, copy);
    printf("key step only: decode + MMAs (4 heads x hi/lo each), %s of fragment-order pages\n",
           validate_only ? "64 pages" : "256 MiB");
    const int sms = prop.multiProcessorCount;
    bool ok = run_shape<2, 128, 1, 0>(copy, sms);
    ok = run_shape<2, 128, 2, 0>(copy, sms) && ok;
    ok = run_shape<4, 128, 1, 0>(copy, sms) && ok;
    ok = run_shape<4, 128, 2, 0>(copy, sms) && ok;
    ok = run_shape<2, 64, 1, 0>(copy, sms) && ok;
    ok = run_shape<4, 64, 1, 0>(copy, sms) && ok;
    /* the subnormal decode: valid only if the tensor cores keep fp16
       subnormal inputs exact; its speed says what the HFMA2s cost         */
    const bool sub_ok = run_shape<2, 128, 1, 1>(copy, sms) & run_shape<4, 128, 1, 1>(copy, sms);
    printf("subnormal decode: %s\n", sub_ok ? "exact on this GPU" : "NOT exact on this GPU (keep the magic decode)");
    printf("mma_probe: %s\n", ok ? "all shapes valid" : "SOME SHAPES INVALID");
    return ok ? 0 : 1;
}
