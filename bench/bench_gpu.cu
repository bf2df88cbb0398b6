/* bench/bench_gpu.cu - GPU benchmark of kvq_cuda.cu (make bench-gpu), llm.c style.

   Each kernel version is validated against a float64 CPU reference (or
   kvq.h's quantizer, bit for bit) on the same inputs before it is timed.
   Timing: CUDA events around each call, after warm-up, median of REPS
   calls, rotating between input copies when one copy would fit in L2.
   Every row reports time, GB/s of the bytes the kernel actually has to
   read (pages, fp rows, block tables, queries) and write (outputs and the
   flash-decoding partials), and that rate as a percentage of a
   device-to-device copy measured in the same run (bytes read + written
   over time, the usual convention: cudaMemcpy of 1 GiB).

   Attention (kvq_cuda_attend, the library's one path):
     1 split:   one CTA per (stream, head chunk), no flash-decoding split
                (max_tokens = 1 plans one): what the split buys
     fused:     the library as called: split across the sequence, pages
                read as 32-token tiles
     fp16:      our fp16 decode kernel (the same kernel, pool = NULL) on the
                same T, the baseline for the 2-bit speedup
   Earlier versions (whole pages as items; splits trimmed to whole waves)
   were process-wide settings until the H100 runs decided them; their
   numbers are in bench/RESULTS.md, and bench/mma_probe.cu is the first
   step of the next design (tensor cores).
   Quantize (kvq_cuda_quantize: B 2 and 4 run the streaming kernels), and
   quantize + seal (kvq_cuda_quantize_sealed: keys and values of whole
   pages straight into fragment order):
     validate:  two passes; writes nothing on bad data
     trusted:   validate = 0 (one pass, trusted input)

   Usage: bench_gpu [--quick] [--csv DIR] [--shape B,G,GQA,S,T]...
                    [--kernels LIST] [--long-csv FILE] [--quantize] [--formats]
   --shape runs only that attention shape (no quantize section): the
   target for a profiler, e.g. bench/gpu_run.sh's ncu step; repeat it for
   several shapes.
   --kernels LIST (comma-separated) times, per shape, only the kernels
   named, one line each, against the fused call and the copy:
     fused      kvq_cuda_attend as the library calls it (today's kernel)
     onesplit   the same with one split
     fp16       our fp16 kernel over the same T
     v5[:FLAGS] kvq_cuda_attend_mma (the tensor-core kernel, sealed pages
                in fragment order), FLAGS '+'-separated: hi (fp16 weights
                only), direct (no cp.async staging), s3 (three cp.async
                stages, not two), magic (the f16 MMA with the magic
                decode; the default is the integer MMA), sub (the f16
                MMA with the subnormal decode; refused where it is not
                exact), nopf (each page's parameters loaded at its start,
                not staged a page ahead as the default does), 2w (the
                older split rule, about two waves, not whole waves),
                occ5 (the default kernel built for 5 CTAs per SM: at
                most 96 registers, largest carveout)
   (bench/gpu_campaign.sh's comparisons). --long-csv FILE appends one row
   per (shape, kernel) to FILE as each is measured (a header when the file
   is new): what a run cut off part-way still leaves behind. Each shape is
   labelled with the kernel kvq_cuda_mma_route picks for it (v5 or fused;
   the csv's route column), so a timing can confirm or refute the route.
   --copy prints the device and its copy bandwidth, and stops. --quantize
   runs only the two quantize sections (plain and sealed: time, GB/s and
   % of copy, validated and trusted). --formats runs only decode attention
   over kvq.h Sec. 4.1's formats (bench_formats: each kvq_config_engine
   preset at T = 32K, S = 64, GQA 1 and 4, validated against kvq_attend;
   --quick: T = 1024, S = 2, the emulator's size; --csv DIR writes
   DIR/gpu_formats.csv only). --dry-run checks the arguments and
   prints what would run, without a GPU.                                  */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#define KVQ_CUDA_DECLARE_ONLY        /* the kernels come from build/kvq_cuda.o */
#include "kvq_cuda.cu"

#include <vector>
#include <algorithm>
#include <string>

#define CU(call)                                                              \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,    \
                    cudaGetErrorString(e_));                                  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
/* ... and a kvq_cuda call: a kvq_status, the reason in kvq_cuda_why()    */
#define KQ(call)                                                              \
    do {                                                                      \
        kvq_status s_ = (call);                                               \
        if (s_ != KVQ_OK) {                                                   \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,\
                    kvq_status_str(s_), kvq_cuda_why());                      \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static const int REPS = 25, WARMUP = 3;
static FILE *csv_attn = nullptr, *csv_quant = nullptr;

/* ---- device-side random fill (a hash of the index: reproducible) -------- */
static __device__ __forceinline__ uint32_t hash32(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}
__global__ void fill_words(uint32_t *w, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        w[i] = hash32(i * 0x9E3779B97F4A7C15ull + seed);
}
/* scales in [0.01, 0.11), zeros in [-1, 1): what a unit-variance head gives */
__global__ void fill_sz(kvq_sz *s, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = hash32(i + seed);
        s[i].scale = __half_as_ushort(__float2half_rn(0.01f + (h & 0xffff) * (0.1f / 65536.0f)));
        s[i].zero = __half_as_ushort(__float2half_rn(((h >> 16) * (2.0f / 65536.0f)) - 1.0f));
    }
}
__global__ void fill_half(__half *x, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2half_rn(((hash32(i + seed) & 0xffffff) * (2.0f / 16777216.0f) - 1.0f) * scale);
}

/* ---- timing ---------------------------------------------------------------- */
template <class F>
static float median_ms(F &&call, int n_copies)
{
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a)); CU(cudaEventCreate(&b));
    for (int i = 0; i < WARMUP; i++) call(i % n_copies);
    std::vector<float> t;
    for (int i = 0; i < REPS; i++) {
        CU(cudaEventRecord(a));
        call(i % n_copies);
        CU(cudaEventRecord(b));
        CU(cudaEventSynchronize(b));
        float ms;
        CU(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CU(cudaEventDestroy(a)); CU(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static double copy_gbps(void)
{
    const size_t bytes = (size_t)1 << 30;
    void *src, *dst;
    CU(cudaMalloc(&src, bytes)); CU(cudaMalloc(&dst, bytes));
    CU(cudaMemset(src, 1, bytes));
    const float ms = median_ms([&](int) { CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 1);
    CU(cudaFree(src)); CU(cudaFree(dst));
    return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

/* ---- one attention problem on the device ---------------------------------- */
/* KIVI at steady state, every stream of length T: keys quantized in whole
   R = 128 flushes with 1..R left in the residual (here T mod 128, or 128),
   values quantized up to T - R, so slots [T - R, n_kq) take v_tail rows. */
struct attn_problem {
    int D, B, G, n_rep;
    size_t S, T, n_kq, n_vq, n_fp;
    kvq_cuda_pool pool;
    kvq_cuda_stream *d_streams;
    std::vector<kvq_cuda_stream> hs;
    std::vector<int32_t> table;        /* host copy of the block tables    */
    kvq_cuda_pool sealed;              /* v5's pool: its own code arrays,  */
    bool have_sealed = false;          /* sealed pages in fragment order   */
    std::vector<void *> allocs;
    double bytes;                      /* what one call must move          */
    void *alloc(size_t bytes_)
    {
        void *p;
        CU(cudaMalloc(&p, bytes_ ? bytes_ : 4));
        allocs.push_back(p);
        return p;
    }
    ~attn_problem() { for (void *p : allocs) cudaFree(p); }
};

static void build_problem(attn_problem &P, int D, int B, int G, int n_rep, size_t S, size_t T,
                          bool fp16, uint64_t seed)
{
    const size_t R = 128;
    P.D = D; P.B = B; P.G = G; P.n_rep = n_rep; P.S = S; P.T = T;
    if (fp16) { P.n_kq = P.n_vq = 0; P.n_fp = T; }
    else {
        P.n_kq = ((T - 1) / R) * R;
        P.n_vq = T > R ? T - R : 0;
        P.n_fp = T - P.n_kq;
    }
    const size_t pages_per = (std::max(P.n_kq, P.n_vq) + G - 1) / G, n_pages = S * pages_per;
    const int Gv = G;
    memset(&P.pool, 0, sizeof P.pool);
    P.pool.head_dim = D; P.pool.group = G; P.pool.value_group = Gv; P.pool.bits = B;
    P.pool.zero_mode = KVQ_ZERO_FLOAT; P.pool.n_pages = n_pages;
    const size_t kw = kvq_cuda__kw_stride(D, G, B), vw = kvq_cuda__vw_stride(D, G, B),
                 vs = kvq_cuda__vs_stride(D, G, Gv);
    const unsigned fb = 1024, ft = 256;
    if (!fp16) {
        P.pool.k_words = (uint32_t *)P.alloc(n_pages * kw * 4);
        P.pool.k_sz = (kvq_sz *)P.alloc(n_pages * D * 4);
        P.pool.v_words = (uint32_t *)P.alloc(n_pages * vw * 4);
        P.pool.v_sz = (kvq_sz *)P.alloc(n_pages * vs * 4);
        KVQ_CUDA_LAUNCH(fill_words, fb, ft, 0, 0)(P.pool.k_words, n_pages * kw, seed + 1);
        KVQ_CUDA_LAUNCH(fill_words, fb, ft, 0, 0)(P.pool.v_words, n_pages * vw, seed + 2);
        KVQ_CUDA_LAUNCH(fill_sz, fb, ft, 0, 0)(P.pool.k_sz, n_pages * D, seed + 3);
        KVQ_CUDA_LAUNCH(fill_sz, fb, ft, 0, 0)(P.pool.v_sz, n_pages * vs, seed + 4);
        CU(cudaGetLastError());
    }
    /* block tables: a random permutation of pages across all streams      */
    std::vector<int32_t> perm(n_pages);
    for (size_t i = 0; i < n_pages; i++) perm[i] = (int32_t)i;
    uint64_t r = seed | 1;
    for (size_t i = n_pages; i > 1; i--) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        std::swap(perm[i - 1], perm[r % i]);
    }
    int32_t *d_tables = (int32_t *)P.alloc(n_pages * 4);
    CU(cudaMemcpy(d_tables, perm.data(), n_pages * 4, cudaMemcpyHostToDevice));
    P.table = perm;
    const size_t tail = P.n_kq - std::min(P.n_kq, P.n_vq);
    __half *d_tail = (__half *)P.alloc(S * tail * D * 2);
    __half *d_kfp = (__half *)P.alloc(S * P.n_fp * D * 2);
    __half *d_vfp = (__half *)P.alloc(S * P.n_fp * D * 2);
    KVQ_CUDA_LAUNCH(fill_half, fb, ft, 0, 0)(d_tail, S * tail * D, seed + 5, 1.0f);
    KVQ_CUDA_LAUNCH(fill_half, fb, ft, 0, 0)(d_kfp, S * P.n_fp * D, seed + 6, 1.0f);
    KVQ_CUDA_LAUNCH(fill_half, fb, ft, 0, 0)(d_vfp, S * P.n_fp * D, seed + 7, 1.0f);
    CU(cudaGetLastError());
    P.hs.resize(S);
    for (size_t s = 0; s < S; s++) {
        kvq_cuda_stream &x = P.hs[s];
        memset(&x, 0, sizeof x);
        x.pages = d_tables + s * pages_per;
        x.v_tail = reinterpret_cast<const kvq_f16 *>(d_tail + s * tail * D);
        x.k_fp = reinterpret_cast<const kvq_f16 *>(d_kfp + s * P.n_fp * D);
        x.v_fp = reinterpret_cast<const kvq_f16 *>(d_vfp + s * P.n_fp * D);
        x.n_kq = (uint32_t)P.n_kq; x.n_vq = (uint32_t)P.n_vq; x.n_fp = (uint32_t)P.n_fp;
    }
    P.d_streams = (kvq_cuda_stream *)P.alloc(S * sizeof(kvq_cuda_stream));
    CU(cudaMemcpy(P.d_streams, P.hs.data(), S * sizeof(kvq_cuda_stream), cudaMemcpyHostToDevice));
    /* bytes a call must read: codes + scales/zeros + fp rows + tables + q */
    const double kunit = (double)kw * 4 + D * 4, vtok = (double)D * B / 8 + (double)(D / Gv) * 4;
    P.bytes = (double)S * ((P.n_kq / G) * kunit + P.n_vq * vtok + (tail + 2.0 * P.n_fp) * D * 2 +
                           pages_per * 4 + (double)n_rep * D * 4 * 2);
}

/* float64 reference for stream s, head h, from the device data.          */
static void reference(const attn_problem &P, const float *q, size_t s, std::vector<double> &out)
{
    const int D = P.D, G = P.G, B = P.B;
    const size_t pages_per = (std::max(P.n_kq, P.n_vq) + G - 1) / G;
    const kvq_cuda_stream &st = P.hs[s];
    std::vector<int32_t> table(pages_per);
    if (pages_per) CU(cudaMemcpy(table.data(), st.pages, pages_per * 4, cudaMemcpyDeviceToHost));
    const size_t kw = kvq_cuda__kw_stride(D, G, B), vw = kvq_cuda__vw_stride(D, G, B),
                 vs = kvq_cuda__vs_stride(D, G, G);
    std::vector<uint32_t> kwh(kw), vwh(vw);
    std::vector<kvq_sz> ksh(D), vsh(vs);
    const size_t tail = P.n_kq - std::min(P.n_kq, P.n_vq);
    std::vector<kvq_f16> tl(tail * D + 1), kf(P.n_fp * D + 1), vf(P.n_fp * D + 1);
    if (tail) CU(cudaMemcpy(tl.data(), st.v_tail, tail * D * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(kf.data(), st.k_fp, P.n_fp * D * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(vf.data(), st.v_fp, P.n_fp * D * 2, cudaMemcpyDeviceToHost));
    std::vector<double> K, V;           /* all rows, dequantized exactly   */
    std::vector<float> krow(D), vrow(D);
    for (size_t p = 0; p < pages_per; p++) {
        CU(cudaMemcpy(kwh.data(), P.pool.k_words + table[p] * kw, kw * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(ksh.data(), P.pool.k_sz + table[p] * D, D * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(vwh.data(), P.pool.v_words + table[p] * vw, vw * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(vsh.data(), P.pool.v_sz + table[p] * vs, vs * 4, cudaMemcpyDeviceToHost));
        for (int t = 0; t < G; t++) {
            const size_t slot = p * G + t;
            if (slot >= std::max(P.n_kq, P.n_vq)) break;
            for (int d = 0; d < D; d++) {
                float a, b;
                kvq_sz_affine(ksh[d], KVQ_ZERO_FLOAT, &a, &b);
                K.push_back((double)((float)kvq_dev_get_code(&kwh[(size_t)d * (G * B / 32)], t, B) * a + b));
            }
            if (slot < P.n_vq) {
                const int wpgv = G * B / 32, gpt = D / G;
                for (int d = 0; d < D; d++) {
                    float a, b;
                    kvq_sz_affine(vsh[t * gpt + d / G], KVQ_ZERO_FLOAT, &a, &b);
                    V.push_back((double)((float)kvq_dev_get_code(&vwh[((size_t)t * gpt + d / G) * wpgv], d % G, B) * a + b));
                }
            } else {
                for (int d = 0; d < D; d++) V.push_back(kvq_f16_to_f32(tl[(slot - P.n_vq) * D + d]));
            }
        }
    }
    for (size_t r = 0; r < P.n_fp; r++)
        for (int d = 0; d < D; d++) {
            K.push_back(kvq_f16_to_f32(kf[r * D + d]));
            V.push_back(kvq_f16_to_f32(vf[r * D + d]));
        }
    const size_t n = K.size() / D;
    out.assign((size_t)P.n_rep * D, 0.0);
    std::vector<double> sc(n);
    for (int h = 0; h < P.n_rep; h++) {
        const float *qh = q + (s * P.n_rep + h) * D;
        double mx = -1e300, l = 0;
        for (size_t t = 0; t < n; t++) {
            double dot = 0;
            for (int d = 0; d < D; d++) dot += (double)qh[d] * K[t * D + d];
            sc[t] = dot / sqrt((double)D);
            mx = std::max(mx, sc[t]);
        }
        for (size_t t = 0; t < n; t++) { sc[t] = exp(sc[t] - mx); l += sc[t]; }
        for (size_t t = 0; t < n; t++)
            for (int d = 0; d < D; d++) out[h * D + d] += sc[t] / l * V[t * D + d];
    }
}

static double rel_err(const float *got, const std::vector<double> &ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += (got[i] - ref[i]) * (got[i] - ref[i]); den += ref[i] * ref[i]; }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

/* Time kvq_cuda_attend on P; split = false plans one split (max_tokens 1). */
static bool run_attn(attn_problem &P, bool fp16, bool split, float *ms_out, double *err_out)
{
    const size_t S = P.S;
    const int n_rep = P.n_rep, D = P.D;
    const size_t plan_tokens = split ? P.T : 1;
    int n_splits;
    const size_t wf = kvq_cuda_attend_workspace(S, n_rep, D, fp16 ? 0 : P.G, plan_tokens, &n_splits);
    float *d_q, *d_out, *d_work;
    int *d_status;
    CU(cudaMalloc(&d_q, S * n_rep * D * 4)); CU(cudaMalloc(&d_out, S * n_rep * D * 4));
    CU(cudaMalloc(&d_work, wf * 4)); CU(cudaMalloc(&d_status, 4));
    std::vector<float> hq(S * n_rep * D);
    uint64_t r = 0x1234567ull + S + P.T;
    for (auto &x : hq) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; x = (float)((int)(r % 2001) - 1000) / 1000.0f; }
    CU(cudaMemcpy(d_q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(d_out, 0xFF, S * n_rep * D * 4));
    const kvq_cuda_pool *pool = fp16 ? nullptr : &P.pool;
    auto call = [&](int) {
        KQ(kvq_cuda_attend(pool, D, P.d_streams, S, n_rep, plan_tokens, d_q, d_out, d_work, wf,
                           d_status, 0));
    };
    call(0);
    CU(cudaDeviceSynchronize());
    /* validate stream 0 and the last stream against float64               */
    std::vector<float> got(S * n_rep * D);
    CU(cudaMemcpy(got.data(), d_out, got.size() * 4, cudaMemcpyDeviceToHost));
    const kvq_status status = kvq_cuda_status(d_status, 0);
    double worst = 0;
    for (size_t s : { (size_t)0, S - 1 }) {
        std::vector<double> ref;
        reference(P, hq.data(), s, ref);
        const double e = rel_err(&got[s * n_rep * D], ref, (size_t)n_rep * D);
        worst = std::max(worst, e);
        if (!(e <= 1e-4)) worst = e > worst ? e : (e == e ? worst : 1e9);
    }
    *err_out = worst;
    bool ok = status == KVQ_OK && worst <= 1e-4;
    if (ok) *ms_out = median_ms(call, 1);
    CU(cudaFree(d_q)); CU(cudaFree(d_out)); CU(cudaFree(d_work)); CU(cudaFree(d_status));
    return ok;
}

/* ---- selectable kernels (--kernels) --------------------------------------- */
struct kernel_sel {
    std::string name;
    int kind;                          /* 0 fused, 1 onesplit, 2 fp16, 3 v5 */
    int variant;                       /* v5: KVQ_CUDA_MMA_* flags          */
};

static bool parse_kernels(const char *list, std::vector<kernel_sel> &out)
{
    std::string all(list);
    size_t at = 0;
    while (at <= all.size()) {
        size_t end = all.find(',', at);
        if (end == std::string::npos) end = all.size();
        const std::string k = all.substr(at, end - at);
        at = end + 1;
        if (k == "fused") out.push_back({ k, 0, 0 });
        else if (k == "onesplit") out.push_back({ k, 1, 0 });
        else if (k == "fp16") out.push_back({ k, 2, 0 });
        else if (k == "v5" || k.compare(0, 3, "v5:") == 0) {
#ifdef KVQ_CUDA_MMA_HILO
            int variant = 0;
            size_t f = 3;
            while (k.size() > 3 && f <= k.size()) {
                size_t e = k.find('+', f);
                if (e == std::string::npos) e = k.size();
                const std::string flag = k.substr(f, e - f);
                if (flag == "hi") variant |= KVQ_CUDA_MMA_HI_ONLY;
                else if (flag == "direct") variant |= KVQ_CUDA_MMA_DIRECT;
#ifdef KVQ_CUDA_MMA_SUBNORMAL
                else if (flag == "sub") variant |= KVQ_CUDA_MMA_SUBNORMAL;
#endif
#ifdef KVQ_CUDA_MMA_STAGES3
                else if (flag == "s3") variant |= KVQ_CUDA_MMA_STAGES3;
#endif
#ifdef KVQ_CUDA_MMA_MAGIC
                else if (flag == "magic") variant |= KVQ_CUDA_MMA_MAGIC;
#endif
#ifdef KVQ_CUDA_MMA_NO_PREFETCH
                else if (flag == "nopf") variant |= KVQ_CUDA_MMA_NO_PREFETCH;
                else if (flag == "2w") variant |= KVQ_CUDA_MMA_TWO_WAVES;
                else if (flag == "occ5") variant |= KVQ_CUDA_MMA_OCC5;
#endif
                else if (flag == "pf" || flag == "ww" || flag == "pre") {
                    fprintf(stderr, "bench_gpu: --kernels: v5 flag '%s' in '%s' is gone: the prefetch "
                            "and whole waves are v5's default (v5:nopf, v5:2w revert them), the "
                            "value-word preload was removed\n", flag.c_str(), k.c_str());
                    return false;
                } else {
                    fprintf(stderr, "bench_gpu: --kernels: unknown v5 flag '%s' in '%s' "
                            "(hi, direct, sub, s3, magic, nopf, 2w, occ5)\n", flag.c_str(), k.c_str());
                    return false;
                }
                f = e + 1;
            }
            out.push_back({ k, 3, variant });
#else
            fprintf(stderr, "bench_gpu: --kernels %s: this kvq_cuda.cu has no kvq_cuda_attend_mma\n",
                    k.c_str());
            return false;
#endif
        } else {
            fprintf(stderr, "bench_gpu: --kernels: unknown kernel '%s' "
                    "(fused, onesplit, fp16, v5[:hi+direct+sub+s3+magic+nopf+2w+occ5])\n", k.c_str());
            return false;
        }
    }
    return !out.empty();
}

#ifdef KVQ_CUDA_MMA_HILO
/* v5 reads its own copy of the codes with every sealed page (kvq.h's
   definition: all slots quantized on both sides) in fragment order; the
   reference keeps reading P.pool, in kvq.h's order.                      */
static bool seal_copy(attn_problem &P, std::string &why)
{
    if (P.have_sealed) return true;
    const size_t pages_per = (std::max(P.n_kq, P.n_vq) + P.G - 1) / P.G;
    const size_t kw = kvq_cuda__kw_stride(P.D, P.G, P.B), vw = kvq_cuda__vw_stride(P.D, P.G, P.B);
    P.sealed = P.pool;
    P.sealed.k_words = (uint32_t *)P.alloc(P.pool.n_pages * kw * 4);
    P.sealed.v_words = (uint32_t *)P.alloc(P.pool.n_pages * vw * 4);
    CU(cudaMemcpy(P.sealed.k_words, P.pool.k_words, P.pool.n_pages * kw * 4, cudaMemcpyDeviceToDevice));
    CU(cudaMemcpy(P.sealed.v_words, P.pool.v_words, P.pool.n_pages * vw * 4, cudaMemcpyDeviceToDevice));
    std::vector<int32_t> ids;
    for (size_t s = 0; s < P.S; s++)
        for (uint32_t p = 0; p < kvq_cuda_sealed_pages(P.hs[s], P.G); p++) ids.push_back(P.table[s * pages_per + p]);
    int32_t *d_ids = (int32_t *)P.alloc(ids.size() * 4);
    CU(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    if (kvq_cuda_seal_pages(&P.sealed, d_ids, ids.size(), 1, 0) != KVQ_OK) {
        why = kvq_cuda_why();
        (void)cudaGetLastError();
        return false;
    }
    CU(cudaDeviceSynchronize());
    P.have_sealed = true;
    return true;
}
#endif

/* Validate, then time, one selected kernel on P. 0: timed; 1: invalid
   (not timed); 2: refused by the library (why says so).                  */
static int run_kernel(attn_problem &P, const kernel_sel &k, float *ms_out, double *err_out,
                      std::string &why, std::string &splits)
{
    if (k.kind == 0 || k.kind == 1) return run_attn(P, false, k.kind == 0, ms_out, err_out) ? 0 : 1;
#ifdef KVQ_CUDA_MMA_HILO
    if (!seal_copy(P, why)) return 2;
    const size_t S = P.S;
    const int n_rep = P.n_rep, D = P.D;
    int s5 = 0, s3 = 0;
    const size_t wf = kvq_cuda_attend_mma_workspace(S, n_rep, D, P.G, P.B, P.pool.value_group, k.variant,
                                                    P.T, &s5, &s3);
    splits = " | splits " + std::to_string(s5) + "+" + std::to_string(s3);
    float *d_q, *d_out, *d_work;
    int *d_status;
    CU(cudaMalloc(&d_q, S * n_rep * D * 4)); CU(cudaMalloc(&d_out, S * n_rep * D * 4));
    CU(cudaMalloc(&d_work, wf * 4)); CU(cudaMalloc(&d_status, 4));
    std::vector<float> hq(S * n_rep * D);
    uint64_t r = 0x1234567ull + S + P.T;               /* run_attn's queries  */
    for (auto &x : hq) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; x = (float)((int)(r % 2001) - 1000) / 1000.0f; }
    CU(cudaMemcpy(d_q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(d_out, 0xFF, S * n_rep * D * 4));
    bool refused = false;
    auto call = [&](int) {
        if (kvq_cuda_attend_mma(&P.sealed, D, P.d_streams, S, n_rep, P.T, d_q, d_out, d_work, wf, d_status,
                                k.variant, 0) != KVQ_OK && !refused) {
            refused = true;
            why = kvq_cuda_why();
            (void)cudaGetLastError();
        }
    };
    call(0);
    int rc = 2;
    if (!refused) {
        CU(cudaDeviceSynchronize());
        std::vector<float> got(S * n_rep * D);
        CU(cudaMemcpy(got.data(), d_out, got.size() * 4, cudaMemcpyDeviceToHost));
        const kvq_status status = kvq_cuda_status(d_status, 0);
        const double tol = (k.variant & KVQ_CUDA_MMA_HI_ONLY) ? 4e-3 : 1e-4;   /* test_gpu's */
        double worst = 0;
        for (size_t s : { (size_t)0, S - 1 }) {
            std::vector<double> ref;
            reference(P, hq.data(), s, ref);
            const double e = rel_err(&got[s * n_rep * D], ref, (size_t)n_rep * D);
            worst = (e == e) ? std::max(worst, e) : 1e9;
        }
        *err_out = worst;
        rc = (status == KVQ_OK && worst <= tol) ? 0 : 1;
        if (rc == 0) *ms_out = median_ms(call, 1);
    }
    CU(cudaFree(d_q)); CU(cudaFree(d_out)); CU(cudaFree(d_work)); CU(cudaFree(d_status));
    return rc;
#else
    why = "no kvq_cuda_attend_mma in this kvq_cuda.cu";
    return 2;
#endif
}

/* One attention shape, or (shape = NULL) the issue's grid.               */
struct attn_shape { int B, G, gqa; size_t S, T; };

/* The kernel kvq_cuda_mma_route picks for a shape (D = 128): "v5" (seal
   the pages, kvq_cuda_attend_mma), "fused" (kvq_cuda_attend), or "none"
   where v5 is not built. A label from static counts, not a timing.      */
static const char *route_label(int B, int G, int gqa)
{
    const int r = kvq_cuda_mma_route(128, B, G, gqa);
    return r == 1 ? "v5" : r == 0 ? "fused" : "none";
}

/* --kernels: per shape, the route's label, then each kernel named,
   validated then timed; one line (and one --long-csv row) each.          */
static FILE *csv_long = nullptr;
static void bench_kernels(const std::vector<attn_shape> &shapes, const std::vector<kernel_sel> &ks,
                          double copy)
{
    printf("\n== decode attention, selected kernels (D = 128; KIVI steady state, R = 128) ==\n");
    printf("%2s %4s %3s %7s %4s | %-16s | %9s %7s %6s | %8s | %s\n", "B", "G", "gqa", "T", "S", "kernel",
           "us", "GB/s", "%copy", "x fused", "err");
    for (const attn_shape &sh : shapes) {
        attn_problem P, F;
        bool need_q = false, need_f = false;
        for (const kernel_sel &k : ks) (k.kind == 2 ? need_f : need_q) = true;
        if (need_q) build_problem(P, 128, sh.B, sh.G, sh.gqa, sh.S, sh.T, false, 7 + sh.T + sh.S + sh.B + sh.G);
        if (need_f) build_problem(F, 128, 2, 32, sh.gqa, sh.S, sh.T, true, 99);
        float fused_ms = 0;
        const char *route = route_label(sh.B, sh.G, sh.gqa);
        printf("%2d %4d %3d %7zu %4zu | route: %s (kvq_cuda_mma_route)\n", sh.B, sh.G, sh.gqa, sh.T, sh.S,
               route);
        for (const kernel_sel &k : ks) {
            float ms = 0;
            double err = 0;
            std::string why, splits;           /* v5: its split counts (v5 + the rest) */
            attn_problem &X = k.kind == 2 ? F : P;
            const int rc = k.kind == 2 ? (run_attn(F, true, true, &ms, &err) ? 0 : 1)
                                       : run_kernel(P, k, &ms, &err, why, splits);
            if (k.kind == 0 && rc == 0) fused_ms = ms;
            const double gbps = rc == 0 ? X.bytes / (ms * 1e-3) / 1e9 : 0;
            if (rc == 0)
                printf("%2d %4d %3d %7zu %4zu | %-16s | %9.1f %7.0f %5.1f%% | %8s | %.1e%s\n", sh.B, sh.G, sh.gqa,
                       sh.T, sh.S, k.name.c_str(), ms * 1e3, gbps, 100 * gbps / copy,
                       fused_ms > 0 ? (std::to_string(fused_ms / ms).substr(0, 5) + "x").c_str() : "-", err,
                       splits.c_str());
            else if (rc == 1)
                printf("%2d %4d %3d %7zu %4zu | %-16s | INVALID (err %.1e): not timed\n", sh.B, sh.G, sh.gqa,
                       sh.T, sh.S, k.name.c_str(), err);
            else
                printf("%2d %4d %3d %7zu %4zu | %-16s | refused: %s\n", sh.B, sh.G, sh.gqa, sh.T, sh.S,
                       k.name.c_str(), why.c_str());
            fflush(stdout);
            if (csv_long) {
                fprintf(csv_long, "%d,%d,%d,%zu,%zu,%s,%s,%.3f,%.1f,%.1f,%.3g,%.3f,%s\n", sh.B, sh.G, sh.gqa, sh.T,
                        sh.S, k.name.c_str(), rc == 0 ? "ok" : rc == 1 ? "invalid" : "refused",
                        rc == 0 ? ms * 1e3 : 0.0, gbps, copy, err, fused_ms > 0 && rc == 0 ? fused_ms / ms : 0.0,
                        route);
                fflush(csv_long);
            }
        }
    }
}

static void bench_attention(bool quick, double copy, const attn_shape *only)
{
    printf("\n== fused decode attention (D = 128; KIVI steady state, R = 128) ==\n");
    printf("%2s %4s %3s %7s %4s | %8s %5s | %8s %7s %5s | %8s %5s | %6s %6s %6s\n",
           "B", "G", "gqa", "T", "S", "1spl us", "1spl%", "fused us", "GB/s", "%", "fp16 us",
           "fp16%", "x fp16", "bytesx", "err");
    std::vector<size_t> Ts = { 1024, 4096, 16384, 32768, 131072 };
    std::vector<size_t> Ss = { 8, 64, 256 };
    std::vector<int> gqas = { 1, 4 }, Bs = { 2, 4 }, Gs = { 32, 128 };
    if (quick) { Ts = { 4096, 32768 }; Ss = { 64 }; }
    if (only) { Ts = { only->T }; Ss = { only->S }; gqas = { only->gqa }; Bs = { only->B }; Gs = { only->G }; }
    for (int gqa : gqas)
        for (size_t S : Ss)
            for (size_t T : Ts) {
                if ((double)S * T * 512 > 24e9) continue;      /* fp16 KV over 24 GB */
                attn_problem F;
                build_problem(F, 128, 2, 32, gqa, S, T, true, 99);
                float ms_f = 0;
                double err_f;
                const bool okf = run_attn(F, true, true, &ms_f, &err_f);
                const double gb_f = F.bytes / (ms_f * 1e-3) / 1e9;
                for (int B : Bs)
                    for (int G : Gs) {
                        attn_problem P;
                        build_problem(P, 128, B, G, gqa, S, T, false, 7 + T + S + B + G);
                        float ms1 = 0, ms2 = 0;
                        double e1, e2;
                        const bool ok1 = run_attn(P, false, false, &ms1, &e1);
                        const bool ok2 = run_attn(P, false, true, &ms2, &e2);
                        const double gb1 = P.bytes / (ms1 * 1e-3) / 1e9, gb2 = P.bytes / (ms2 * 1e-3) / 1e9;
                        const double err = std::max(e1, e2);
                        const bool ok = ok1 && ok2 && okf;
                        printf("%2d %4d %3d %7zu %4zu | %8.1f %4.1f%% | %8.1f %7.0f %4.1f%% | "
                               "%8.1f %4.1f%% | %6.2f %6.2f %6.0e%s\n",
                               B, G, gqa, T, S, ms1 * 1e3, 100 * gb1 / copy, ms2 * 1e3, gb2,
                               100 * gb2 / copy, ms_f * 1e3, 100 * gb_f / copy, ms_f / ms2,
                               F.bytes / P.bytes, err, ok ? "" : "  INVALID");
                        if (csv_attn)
                            fprintf(csv_attn, "%d,%d,%d,%zu,%zu,%.3f,%.1f,%.3f,%.1f,%.3f,%.1f,%.1f,%.3g,%d\n",
                                    B, G, gqa, T, S, ms1 * 1e3, gb1, ms2 * 1e3, gb2, ms_f * 1e3, gb_f,
                                    copy, err, (int)ok);
                    }
            }
}

static void bench_quantize(bool quick, double copy)
{
    printf("\n== quantize + pack (fp16 X of T x 128) ==\n");
    printf("%-11s %2s %4s %8s | %9s %8s %6s | %9s %8s %6s | %s\n", "axis", "B", "G", "T",
           "valid us", "GB/s", "%", "trust us", "GB/s", "%", "codes vs kvq.h");
    const size_t D = 128, T = quick ? 65536 : 262144, Tcheck = 4096;
    const size_t copies = 4;       /* 4 x 64 MB inputs: more than L2 */
    __half *d_x;
    CU(cudaMalloc(&d_x, copies * T * D * 2));
    KVQ_CUDA_LAUNCH(fill_half, 1024, 256, 0, 0)(d_x, copies * T * D, 42, 3.0f);
    CU(cudaGetLastError());
    for (kvq_axis ax : { KVQ_PER_CHANNEL, KVQ_PER_TOKEN })
        for (int B : { 2, 4 })
            for (size_t G : { (size_t)32, (size_t)128 }) {
                kvq_layout L;
                kvq_layout_init(&L, T, D, B, G, ax);
                uint32_t *d_w; kvq_sz *d_s; int *d_st;
                CU(cudaMalloc(&d_w, L.total_words * 4)); CU(cudaMalloc(&d_s, L.total_groups * 4));
                CU(cudaMalloc(&d_st, 4));
                /* validate: the first Tcheck rows, bit for bit vs kvq.h  */
                kvq_layout Lc;
                kvq_layout_init(&Lc, Tcheck, D, B, G, ax);
                std::vector<kvq_f16> hx(Tcheck * D);
                CU(cudaMemcpy(hx.data(), d_x, hx.size() * 2, cudaMemcpyDeviceToHost));
                std::vector<float> fx(hx.size());
                for (size_t i = 0; i < hx.size(); i++) fx[i] = kvq_f16_to_f32(hx[i]);
                std::vector<uint32_t> cw(Lc.total_words), gw(Lc.total_words);
                std::vector<kvq_sz> cs(Lc.total_groups), gs(Lc.total_groups);
                kvq_quantize_matrix(fx.data(), Tcheck, D, B, G, ax, KVQ_ZERO_FLOAT, cw.data(), cs.data());
                bool same = true;
                for (int v = 0; v < 2; v++) {
                    KQ(kvq_cuda_quantize(d_x, Tcheck, D, B, G, ax, KVQ_ZERO_FLOAT, nullptr, d_w, d_s,
                                         d_st, v == 0, 0));
                    same = same && kvq_cuda_status(d_st, 0) == KVQ_OK;
                    CU(cudaMemcpy(gw.data(), d_w, gw.size() * 4, cudaMemcpyDeviceToHost));
                    CU(cudaMemcpy(gs.data(), d_s, gs.size() * 4, cudaMemcpyDeviceToHost));
                    same = same && gw == std::vector<uint32_t>(cw) &&
                           memcmp(gs.data(), cs.data(), gs.size() * 4) == 0;
                }
                float ms[2];
                for (int v = 0; v < 2; v++) {
                    ms[v] = median_ms([&](int c) {
                        KQ(kvq_cuda_quantize(d_x + (size_t)c * T * D, T, D, B, G, ax, KVQ_ZERO_FLOAT,
                                             nullptr, d_w, d_s, d_st, v == 0, 0));
                    }, (int)copies);
                }
                /* bytes: input once + codes + scales (the minimum to move) */
                const double bytes = (double)T * D * 2 + L.total_words * 4.0 + L.total_groups * 4.0;
                const double g1 = bytes / (ms[0] * 1e-3) / 1e9, g2 = bytes / (ms[1] * 1e-3) / 1e9;
                printf("%-11s %2d %4zu %8zu | %9.1f %8.0f %5.1f%% | %9.1f %8.0f %5.1f%% | %s\n",
                       ax == KVQ_PER_CHANNEL ? "per-channel" : "per-token", B, G, T, ms[0] * 1e3, g1,
                       100 * g1 / copy, ms[1] * 1e3, g2, 100 * g2 / copy, same ? "identical" : "DIFFERENT");
                if (csv_quant)
                    fprintf(csv_quant, "%s,%d,%zu,%zu,%.3f,%.1f,%.3f,%.1f,%.1f,%d\n",
                            ax == KVQ_PER_CHANNEL ? "per-channel" : "per-token", B, G, T, ms[0] * 1e3,
                            g1, ms[1] * 1e3, g2, copy, (int)same);
                CU(cudaFree(d_w)); CU(cudaFree(d_s)); CU(cudaFree(d_st));
            }
    CU(cudaFree(d_x));
}

/* Quantize + pack + seal (kvq_cuda_quantize_sealed): the keys and values
   of whole pages (T rows each, D = 128) straight into fragment order,
   Gv = G. Validated first on Tcheck rows against kvq.h's quantizer and
   the host's permutation (kvq_cuda_fragment_page), byte for byte.
   Bytes: both sides' rows read once, codes and scales written once.     */
static void bench_quantize_sealed(bool quick, double copy)
{
    printf("\n== quantize + pack + seal: K and V (fp16, T x 128 each) into fragment-order pages ==\n");
    const size_t D = 128, T = quick ? 65536 : 262144, Tcheck = 4096, copies = 2;
    __half *d_x;                          /* copy c: K rows, then V rows */
    CU(cudaMalloc(&d_x, copies * 2 * T * D * 2));
    KVQ_CUDA_LAUNCH(fill_half, 1024, 256, 0, 0)(d_x, copies * 2 * T * D, 43, 3.0f);
    CU(cudaGetLastError());
    for (int B : { 2, 4 })
        for (int G : { 32, 128 }) {
            const size_t n = T / G, kw = kvq_cuda__kw_stride((int)D, G, B),
                         vs = kvq_cuda__vs_stride((int)D, G, G), nc = Tcheck / G;
            kvq_cuda_pool pool = {};
            CU(cudaMalloc(&pool.k_words, n * kw * 4)); CU(cudaMalloc(&pool.v_words, n * kw * 4));
            CU(cudaMalloc(&pool.k_sz, n * D * 4)); CU(cudaMalloc(&pool.v_sz, n * vs * 4));
            pool.n_pages = n; pool.head_dim = (int)D; pool.group = G; pool.value_group = G;
            pool.bits = B; pool.zero_mode = KVQ_ZERO_FLOAT;
            int *d_st;
            CU(cudaMalloc(&d_st, 4));
            /* validate: the first nc pages, bit for bit                    */
            std::vector<kvq_f16> hx(2 * Tcheck * D);
            CU(cudaMemcpy(hx.data(), d_x, Tcheck * D * 2, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(hx.data() + Tcheck * D, d_x + T * D, Tcheck * D * 2, cudaMemcpyDeviceToHost));
            std::vector<float> fx(hx.size());
            for (size_t i = 0; i < hx.size(); i++) fx[i] = kvq_f16_to_f32(hx[i]);
            std::vector<uint32_t> ck(nc * kw), cv(nc * kw), fk(nc * kw), fv(nc * kw), gk(nc * kw), gv(nc * kw);
            std::vector<kvq_sz> cks(nc * D), cvs(nc * vs), gks(nc * D), gvs(nc * vs);
            kvq_quantize_matrix(fx.data(), Tcheck, D, B, G, KVQ_PER_CHANNEL, KVQ_ZERO_FLOAT, ck.data(), cks.data());
            kvq_quantize_matrix(fx.data() + Tcheck * D, Tcheck, D, B, G, KVQ_PER_TOKEN, KVQ_ZERO_FLOAT, cv.data(),
                                cvs.data());
            for (size_t p = 0; p < nc; p++)
                kvq_cuda_fragment_page(&ck[p * kw], &cv[p * kw], (int)D, G, B, &fk[p * kw], &fv[p * kw]);
            bool same = true;
            for (int v = 0; v < 2; v++) {
                KQ(kvq_cuda_quantize_sealed(&pool, d_x, d_x + T * D, nc, nullptr, d_st, v == 0, 0));
                same = same && kvq_cuda_status(d_st, 0) == KVQ_OK;
                CU(cudaMemcpy(gk.data(), pool.k_words, gk.size() * 4, cudaMemcpyDeviceToHost));
                CU(cudaMemcpy(gv.data(), pool.v_words, gv.size() * 4, cudaMemcpyDeviceToHost));
                CU(cudaMemcpy(gks.data(), pool.k_sz, gks.size() * 4, cudaMemcpyDeviceToHost));
                CU(cudaMemcpy(gvs.data(), pool.v_sz, gvs.size() * 4, cudaMemcpyDeviceToHost));
                same = same && gk == fk && gv == fv && memcmp(gks.data(), cks.data(), gks.size() * 4) == 0 &&
                       memcmp(gvs.data(), cvs.data(), gvs.size() * 4) == 0;
            }
            float ms[2];
            for (int v = 0; v < 2; v++)
                ms[v] = median_ms([&](int c) {
                    const __half *x = d_x + (size_t)c * 2 * T * D;
                    KQ(kvq_cuda_quantize_sealed(&pool, x, x + T * D, n, nullptr, d_st, v == 0, 0));
                }, (int)copies);
            const double bytes = 2.0 * T * D * 2 + 2.0 * n * kw * 4 + n * D * 4.0 + n * vs * 4.0;
            const double g1 = bytes / (ms[0] * 1e-3) / 1e9, g2 = bytes / (ms[1] * 1e-3) / 1e9;
            printf("%-11s %2d %4d %8zu | %9.1f %8.0f %5.1f%% | %9.1f %8.0f %5.1f%% | %s\n", "sealed K+V", B,
                   G, T, ms[0] * 1e3, g1, 100 * g1 / copy, ms[1] * 1e3, g2, 100 * g2 / copy,
                   same ? "identical" : "DIFFERENT");
            if (csv_quant)
                fprintf(csv_quant, "sealed,%d,%d,%zu,%.3f,%.1f,%.3f,%.1f,%.1f,%d\n", B, G, T, ms[0] * 1e3, g1,
                        ms[1] * 1e3, g2, copy, (int)same);
            CU(cudaFree(pool.k_words)); CU(cudaFree(pool.v_words));
            CU(cudaFree(pool.k_sz)); CU(cudaFree(pool.v_sz)); CU(cudaFree(d_st));
        }
    CU(cudaFree(d_x));
}

/* ---- kvq.h Sec. 4.1's formats (--formats) ---------------------------------- */
/* Decode attention over each kvq_config_engine preset's cache, D = 128:
   the token layout (kvq_cuda.cu Sec. 3) through kvq_cuda_attend_token,
   Sec. 4's CUDA-core kernel on its slow path. One cache of T tokens is
   built on the host by kvq.h (a prefill of Gaussian K, V with a few
   outlier key channels, fixed seed), exported, and its pages placed S
   times into a pool under a shuffled block table (S streams of the same
   cache). Every stream's output is checked against kvq_attend on the
   cache (rel. L2 <= 1e-4, test_gpu's FMT_TOL) before timing. Bytes: what
   one call must move: each stream's pages (both sides' code words and
   kvq_sz words, for its slots), block table and dead bits, the two value
   tables and its two side scales, q in, partials and output out. Reported beside the copy and
   the fp16 kernel on the same T, S, GQA (build_problem's fp16 streams):
   x fp16 = fp16 time / format time.                                      */
static const char *const format_presets[] = {
    "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-per-token-head", "int8-per-token-head",
    "int4-per-token-head", "nvfp4", "nvfp4-4over6", "turboquant-k8v4", "turboquant-4bit-nc",
    "turboquant-k3v4-nc", "turboquant-3bit-nc", "q8_0", "q4_0" };
static FILE *csv_formats = nullptr;

static void bench_formats(bool quick, double copy)
{
    const int D = 128;
    const size_t T = quick ? 1024 : 32768, S = quick ? 2 : 64;
    printf("\n== decode attention over kvq.h Sec. 4.1's formats (D = 128, T = %zu, S = %zu; the token "
           "layout, kvq_cuda_attend's slow path) ==\n", T, S);
    printf("%-24s %3s %6s | %8s %7s %5s | %8s %6s | %6s %s\n", "preset", "gqa", "bits", "us", "GB/s", "%",
           "fp16 us", "x fp16", "err", "");
    float ms_fp16[2] = { 0, 0 };                      /* the fp16 baselines */
    bool ok_fp16[2];
    for (int k = 0; k < 2; k++) {
        attn_problem F;
        double err_f;
        build_problem(F, D, 2, 32, k ? 4 : 1, S, T, true, 99);
        ok_fp16[k] = run_attn(F, true, true, &ms_fp16[k], &err_f);
    }
    for (const char *name : format_presets) {
        {
            kvq_config cfg;
            kvq_cache c;
            KQ(kvq_config_engine(&cfg, D, name));
            KQ(kvq_cache_init(&c, &cfg));
            std::vector<float> K(T * D), V(T * D);
            uint64_t r = 0x5eedull + T;
            auto gauss = [&]() {                      /* Box-Muller, xorshift */
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                const double u1 = ((r >> 11) + 1.0) / 9007199254740993.0;
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                const double u2 = (r >> 11) / 9007199254740992.0;
                return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            };
            for (size_t i = 0; i < T * D; i++) {
                K[i] = gauss() * (i % D % 19 == 5 ? 8.0f : 1.0f);
                V[i] = gauss();
            }
            KQ(kvq_cache_prefill(&c, K.data(), V.data(), T));
            kvq_cuda_export_t e;
            KQ(kvq_cuda_export(&c, &e));
            /* the pool: the export's pages, S times, shuffled              */
            const int G = e.group;
            const size_t kw = G * kvq_cuda__tok_words(e.key, D), vw = G * kvq_cuda__tok_words(e.value, D),
                         ks = G * kvq_cuda__tok_params(e.key, D), vs = G * kvq_cuda__tok_params(e.value, D),
                         n_slots = std::max(e.n_kq, e.n_vq), n_pages = S * e.n_pages;
            std::vector<int32_t> perm(n_pages);
            for (size_t i = 0; i < n_pages; i++) perm[i] = (int32_t)i;
            for (size_t i = n_pages; i > 1; i--) {
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                std::swap(perm[i - 1], perm[r % i]);
            }
            std::vector<uint32_t> hkw(n_pages * kw), hvw(n_pages * vw);
            std::vector<kvq_sz> hks(n_pages * ks + 1), hvs(n_pages * vs + 1);
            for (size_t i = 0; i < n_pages; i++) {
                const size_t p = i % e.n_pages, dst = (size_t)perm[i];
                memcpy(&hkw[dst * kw], e.k_words + p * kw, kw * 4);
                memcpy(&hvw[dst * vw], e.v_words + p * vw, vw * 4);
                if (ks) memcpy(&hks[dst * ks], e.k_sz + p * ks, ks * sizeof(kvq_sz));
                if (vs) memcpy(&hvs[dst * vs], e.v_sz + p * vs, vs * sizeof(kvq_sz));
            }
            attn_problem P;                           /* owns the allocations */
            P.D = D; P.S = S; P.T = T;
            auto put = [&](const void *h, size_t bytes) {
                void *d = P.alloc(bytes);
                if (bytes) CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
                return d;
            };
            kvq_cuda_pool pool;
            memset(&pool, 0, sizeof pool);
            pool.k_words = (uint32_t *)put(hkw.data(), hkw.size() * 4);
            pool.v_words = (uint32_t *)put(hvw.data(), hvw.size() * 4);
            pool.k_sz = (kvq_sz *)put(hks.data(), hks.size() * sizeof(kvq_sz));
            pool.v_sz = (kvq_sz *)put(hvs.data(), hvs.size() * sizeof(kvq_sz));
            pool.n_pages = n_pages;
            pool.head_dim = D; pool.group = G; pool.value_group = e.value_group; pool.bits = e.bits;
            pool.zero_mode = e.zero_mode;
            pool.key_rotation = e.key_rotation; pool.value_rotation = e.value_rotation;
            pool.rotation_seed = e.rotation_seed;
            kvq_cuda_token tok;                       /* the sides, S streams' scales */
            tok.key = e.key; tok.value = e.value;
            tok.key.value = (const float *)put(e.key_value, sizeof e.key_value);
            tok.value.value = (const float *)put(e.value_value, sizeof e.value_value);
            std::vector<float> scales(2 * S);
            for (size_t s = 0; s < S; s++) { scales[2 * s] = e.k_scale; scales[2 * s + 1] = e.v_scale; }
            tok.scales = (const float *)put(scales.data(), scales.size() * 4);
            int32_t *d_tables = (int32_t *)put(perm.data(), n_pages * 4);
            uint32_t *d_dead = (uint32_t *)put(e.dead, (n_slots / 32 + 1) * 4);
            std::vector<kvq_cuda_stream> hs(S);
            for (size_t s = 0; s < S; s++) {
                kvq_cuda_stream &x = hs[s];
                memset(&x, 0, sizeof x);
                x.pages = d_tables + s * e.n_pages;
                x.dead = d_dead;
                x.n_kq = e.n_kq; x.n_vq = e.n_vq; x.n_fp = e.n_fp;   /* n_fp 0: R = 0 */
                x.k_fp = x.v_fp = x.k_tail = x.v_tail = nullptr;
            }
            const kvq_cuda_stream *d_streams = (const kvq_cuda_stream *)put(hs.data(), S * sizeof(kvq_cuda_stream));
          for (int gqa : { 1, 4 }) {
            const float ms_f = ms_fp16[gqa == 4];
            const bool okf = ok_fp16[gqa == 4];
            int n_splits;
            const size_t wf = kvq_cuda_attend_workspace(S, gqa, D, G, T, &n_splits);
            float *d_q, *d_out, *d_work;
            int *d_status;
            CU(cudaMalloc(&d_q, S * gqa * D * 4)); CU(cudaMalloc(&d_out, S * gqa * D * 4));
            CU(cudaMalloc(&d_work, wf * 4)); CU(cudaMalloc(&d_status, 4));
            std::vector<float> hq(S * gqa * D), got(hq.size()), want(gqa * D);
            for (auto &x : hq) x = gauss();
            CU(cudaMemcpy(d_q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
            CU(cudaMemset(d_out, 0xFF, hq.size() * 4));
            auto call = [&](int) {
                KQ(kvq_cuda_attend_token(&pool, &tok, D, d_streams, S, gqa, T, d_q, d_out, d_work, wf,
                                         d_status, 0));
            };
            call(0);
            CU(cudaDeviceSynchronize());
            const kvq_status status = kvq_cuda_status(d_status, 0);
            CU(cudaMemcpy(got.data(), d_out, got.size() * 4, cudaMemcpyDeviceToHost));
            std::vector<float> scratch((size_t)gqa * kvq_attend_scratch_floats(&c, KVQ_ATTN_EAGER));
            double err = 0.0;
            for (size_t s : { (size_t)0, S - 1 }) {       /* the first and last streams */
                KQ(kvq_attend(&c, &hq[s * gqa * D], (size_t)gqa, want.data(), NULL, KVQ_ATTN_EAGER,
                              scratch.data(), scratch.size()));
                double num = 0.0, den = 0.0;
                for (int i = 0; i < gqa * D; i++) {
                    const double g = got[s * gqa * D + i], w = want[i];
                    num += (g - w) * (g - w); den += w * w;
                }
                const double rel = sqrt(num / (den > 0 ? den : 1e-300));
                err = rel == rel ? std::max(err, rel) : 1e9;
            }
            const bool ok = status == KVQ_OK && err <= 1e-4 && okf;
            const float ms = ok ? median_ms(call, 1) : 0.0f;
            const double bytes = (double)S * (e.n_pages * ((kw + vw) * 4.0 + (ks + vs) * 4.0) + e.n_pages * 4.0 +
                                              (n_slots / 32 + 1) * 4.0 + 8.0) + 2 * 256 * 4.0 +
                                 (double)S * gqa * D * 4 * 2 + (double)wf * 4;
            const double gbps = ok ? bytes / (ms * 1e-3) / 1e9 : 0.0;
            const double bits = ((kw + vw) * 32.0 + (ks + vs) * 32.0) / ((double)G * D * 2);
            printf("%-24s %3d %6.2f | %8.1f %7.0f %4.1f%% | %8.1f %6.2f | %6.0e%s\n", name, gqa, bits,
                   ms * 1e3, gbps, 100 * gbps / copy, ms_f * 1e3, ok ? ms_f / ms : 0.0, err,
                   ok ? "" : "  INVALID");
            if (csv_formats)
                fprintf(csv_formats, "%s,%d,%zu,%zu,%.3f,%.1f,%.1f,%.3f,%.3g,%.3g,%d\n", name, gqa, T, S,
                        ms * 1e3, gbps, copy, ms_f * 1e3, bits, err, (int)ok);
            CU(cudaFree(d_q)); CU(cudaFree(d_out)); CU(cudaFree(d_work)); CU(cudaFree(d_status));
          }
            kvq_cuda_export_free(&e);
            kvq_cache_free(&c);
        }
    }
}

int main(int argc, char **argv)
{
    bool quick = false, copy_only = false, dry_run = false, quantize_only = false, formats_only = false;
    const char *csv_dir = nullptr, *long_csv = nullptr;
    attn_shape shape;
    std::vector<attn_shape> shapes;
    std::vector<kernel_sel> kernels;
    int used = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--copy")) copy_only = true;
        else if (!strcmp(argv[i], "--dry-run")) dry_run = true;
        else if (!strcmp(argv[i], "--quantize")) quantize_only = true;
        else if (!strcmp(argv[i], "--formats")) formats_only = true;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_dir = argv[++i];
        else if (!strcmp(argv[i], "--long-csv") && i + 1 < argc) long_csv = argv[++i];
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) {
            if (!parse_kernels(argv[++i], kernels)) return 2;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
                 sscanf(argv[++i], "%d,%d,%d,%zu,%zu%n", &shape.B, &shape.G, &shape.gqa, &shape.S,
                        &shape.T, &used) == 5 && argv[i][used] == '\0' &&
                 (shape.B == 2 || shape.B == 4) &&
                 (shape.G == 32 || shape.G == 64 || shape.G == 128) && shape.gqa >= 1 &&
                 shape.gqa <= 16 && shape.S >= 1 && shape.T >= 1)
            shapes.push_back(shape);
        else {
            fprintf(stderr, "usage: bench_gpu [--quick] [--csv DIR] [--shape B,G,GQA,S,T]... "
                    "[--kernels LIST] [--long-csv FILE] [--copy] [--quantize] [--formats] [--dry-run]\n"
                    "  (B 2/4, G 32/64/128, GQA 1-16; LIST: fused, onesplit, fp16, v5[:hi+direct+sub+s3+magic+nopf+2w+occ5])\n");
            return 2;
        }
    }
    if (!kernels.empty() && shapes.empty()) {
        fprintf(stderr, "bench_gpu: --kernels needs one --shape or more\n");
        return 2;
    }
    if (quantize_only && (!kernels.empty() || !shapes.empty())) {
        fprintf(stderr, "bench_gpu: --quantize runs the quantize sections only (no --shape or --kernels)\n");
        return 2;
    }
    if (formats_only && (quantize_only || !kernels.empty() || !shapes.empty())) {
        fprintf(stderr, "bench_gpu: --formats runs the formats section only (no --quantize, --shape or --kernels)\n");
        return 2;
    }
    if (dry_run) {
        printf("bench_gpu --dry-run: %s; %zu shape(s)%s\n",
               copy_only ? "the copy only" : quantize_only ? "the quantize sections (plain and sealed)"
               : formats_only ? "the formats section (13 kvq_config_engine presets, D = 128, GQA 1 and 4)"
               : kernels.empty() ? "the default tables" : "selected kernels",
               shapes.size(), shapes.empty() ? " (the full grid)" : "");
        for (const kernel_sel &k : kernels) printf("  kernel %s\n", k.name.c_str());
        for (const attn_shape &sh : shapes)
            printf("  shape B=%d G=%d GQA=%d S=%zu T=%zu  route: %s\n", sh.B, sh.G, sh.gqa, sh.S, sh.T,
                   route_label(sh.B, sh.G, sh.gqa));
        return 0;
    }
    if (long_csv) {
        FILE *t = fopen(long_csv, "r");
        const bool fresh = !t;
        if (t) fclose(t);
        csv_long = fopen(long_csv, "a");
        if (!csv_long) { fprintf(stderr, "bench_gpu: cannot open %s\n", long_csv); return 2; }
        if (fresh) fprintf(csv_long, "B,G,gqa,T,S,kernel,result,us,gbps,copy_gbps,err,x_fused,route\n");
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    const double copy = copy_gbps();
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    printf("device-to-device copy: %.0f GB/s (read + write, 1 GiB, median of %d)\n", copy, REPS);
    if (copy_only) return 0;
    if (formats_only) {                 /* its own csv: the others untouched */
        if (csv_dir) {
            std::string f = std::string(csv_dir) + "/gpu_formats.csv";
            csv_formats = fopen(f.c_str(), "w");
            if (csv_formats) fprintf(csv_formats, "preset,gqa,T,S,us,gbps,copy_gbps,fp16_us,bits_per_elem,err,valid\n");
        }
        bench_formats(quick, copy);
        if (csv_formats) fclose(csv_formats);
        return 0;
    }
    if (csv_dir) {
        std::string a = std::string(csv_dir) + "/gpu_attention.csv", q = std::string(csv_dir) + "/gpu_quantize.csv";
        csv_attn = fopen(a.c_str(), "w");
        csv_quant = fopen(q.c_str(), "w");
        if (csv_attn) fprintf(csv_attn, "B,G,gqa,T,S,onesplit_us,onesplit_gbps,fused_us,fused_gbps,fp16_us,fp16_gbps,copy_gbps,err,valid\n");
        if (csv_quant) fprintf(csv_quant, "axis,B,G,T,validate_us,validate_gbps,trusted_us,trusted_gbps,copy_gbps,identical\n");
    }
    if (!kernels.empty()) {
        bench_kernels(shapes, kernels, copy);
        if (csv_long) fclose(csv_long);
        return 0;
    }
    if (shapes.empty()) bench_quantize(quick, copy);
    if (shapes.empty()) bench_quantize_sealed(quick, copy);
    if (shapes.empty() && !quantize_only) bench_attention(quick, copy, nullptr);
    for (const attn_shape &sh : shapes) bench_attention(quick, copy, &sh);
    if (csv_attn) fclose(csv_attn);
    if (csv_quant) fclose(csv_quant);
    return 0;
}
