/* bench/mma_selftest.cu - which of the emulator's MMA models a GPU's tensor
   cores match: mma.sync.m16n8k16 (f16 x f16 -> f32), through kvq_cuda.cu's
   own wrapper (kvq_mma_16816) and fragment maps (kvq_mma_a_row ...), on
   inputs built to tell the models apart. The models are the emulator's
   (tests/emu/mma_model.h, the same code): accumulation EXACT or TRUNC,
   fp16 subnormal inputs kept or flushed. Each case is one warp's MMA on
   whole 16 x 16 / 16 x 8 matrices; every element of D is compared bit for
   bit with each model's D.

     fragment maps   small integers (every model gives the exact sum): D
                     must equal it everywhere, else the maps (or the MMA)
                     are wrong
     subnormals      fp16 subnormals in A only, then in B only, times small
                     powers of two (sums exact in either accumulation
                     model): kept or flushed, per operand
     accumulation    normal inputs of wide exponent range, where EXACT and
                     TRUNC differ, and the designed case 1 + 8 x 2^-25 (one
                     block of 8 products below the accumulator's last bit:
                     EXACT 1 + 2^-22, TRUNC 1)

   It prints the model the hardware matches, and "N passed, M failed"
   (a check fails when the maps are wrong, when an operand or the
   accumulation matches neither model, or, with --expect, when the verdict
   is not the one expected). On the emulator (make test-cuda-emu) it must
   report the model it was told to use:
     KVQ_EMU_MMA=trunc KVQ_EMU_SUBNORMAL=flush build/emu/mma_selftest --expect trunc,flush

     build/mma_selftest [--expect exact|trunc,keep|flush] [--seed N]
   Exit status 0 when every check passed, 1 otherwise, 2 for bad
   arguments. Needs an sm_80+ GPU (or the emulator).                      */
#include "kvq.h"
#define KVQ_CUDA_DECLARE_ONLY
#include "kvq_cuda.cu"
#include "../tests/emu/mma_model.h"

#include <vector>
#include <string>

#define CU(call)                                                              \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            printf("mma_selftest: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(e_));                                   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

struct mma_case {                     /* D = A B + C, row-major             */
    uint16_t A[16 * 16];              /* fp16 bits                          */
    uint16_t B[16 * 8];
    float C[16 * 8];
};

/* One warp per case: each lane gathers its fragments by kvq_cuda.cu's
   maps (Sec. 7), issues one MMA, scatters its C registers back.          */
__global__ void __launch_bounds__(32) mma_selftest_kernel(const mma_case *cases, int n, float *D)
{
    const int lane = threadIdx.x & 31;
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        const mma_case &m = cases[t];
        uint32_t a[4], b[2];
        float c[4];
        for (int r = 0; r < 4; r++) {
            const int i = 2 * r;
            a[r] = (uint32_t)m.A[kvq_mma_a_row(lane, i) * 16 + kvq_mma_a_col(lane, i)] |
                   (uint32_t)m.A[kvq_mma_a_row(lane, i + 1) * 16 + kvq_mma_a_col(lane, i + 1)] << 16;
        }
        for (int r = 0; r < 2; r++) {
            const int i = 2 * r;
            b[r] = (uint32_t)m.B[kvq_mma_b_row(lane, i) * 8 + kvq_mma_b_col(lane)] |
                   (uint32_t)m.B[kvq_mma_b_row(lane, i + 1) * 8 + kvq_mma_b_col(lane)] << 16;
        }
        for (int i = 0; i < 4; i++) c[i] = m.C[kvq_mma_c_row(lane, i) * 8 + kvq_mma_c_col(lane, i)];
        kvq_mma_16816(c, a, b[0], b[1]);
        for (int i = 0; i < 4; i++) D[(size_t)t * 128 + kvq_mma_c_row(lane, i) * 8 + kvq_mma_c_col(lane, i)] = c[i];
    }
}

/* ---- inputs ----------------------------------------------------------------- */
static uint64_t rng = 0x6d6d6173656c66ull;
static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int uniform(int lo, int hi) { return lo + (int)(next_u64() % (uint64_t)(hi - lo + 1)); }
static uint16_t h16(double x) { return kvq_mma_model::f64_to_f16(x); }
static bool same_bits(float a, float b) { uint32_t x, y; memcpy(&x, &a, 4); memcpy(&y, &b, 4); return x == y; }
static uint32_t bits(float x);

/* a normal fp16 of random sign, significand and exponent in [e0, e1]     */
static uint16_t normal16(int e0, int e1)
{
    return (uint16_t)((next_u64() & 1) << 15 | (uint16_t)(uniform(e0, e1) + 15) << 10 | uniform(0, 1023));
}
static void zero(mma_case &m) { memset(&m, 0, sizeof m); }

static std::vector<mma_case> fragment_cases(int n)
{
    std::vector<mma_case> v(n);
    for (auto &m : v) {
        for (auto &x : m.A) x = h16(uniform(-8, 8));
        for (auto &x : m.B) x = h16(uniform(-8, 8));
        for (auto &x : m.C) x = (float)uniform(-64, 64);
    }
    return v;
}
/* side 0: subnormals in A (B small powers of two), side 1: in B          */
static std::vector<mma_case> subnormal_cases(int n, int side)
{
    std::vector<mma_case> v(n);
    for (auto &m : v) {
        zero(m);
        uint16_t *S = side ? m.B : m.A, *N = side ? m.A : m.B;
        const int ns = side ? 128 : 256, nn = side ? 256 : 128;
        for (int i = 0; i < ns; i++)
            S[i] = (next_u64() % 3) ? (uint16_t)((next_u64() & 1) << 15 | uniform(1, 1023)) : 0;
        for (int i = 0; i < nn; i++) N[i] = (uint16_t)((next_u64() & 1) << 15 | (uint16_t)(uniform(0, 10) + 15) << 10);
        for (auto &x : m.C) x = (next_u64() & 1) ? 0.0f : ldexpf((float)uniform(-1000, 1000), -24);
    }
    return v;
}
/* normal inputs only, exponents spread so that aligning to the largest
   drops bits; the first case is the designed one                         */
static std::vector<mma_case> accumulation_cases(int n)
{
    std::vector<mma_case> v(n);
    zero(v[0]);                                   /* 1 + 8 x 2^-25, row 0..15 */
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 8; k++) v[0].A[i * 16 + k] = h16(ldexp(1.0, -13));
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 8; j++) v[0].B[k * 8 + j] = h16(ldexp(1.0, -12));
    for (int i = 0; i < 128; i++) v[0].C[i] = (i % 2) ? -1.0f : 1.0f;
    for (int t = 1; t < n; t++) {
        mma_case &m = v[t];
        const int spread = 4 + t % 24;            /* exponent range of the inputs */
        for (auto &x : m.A) x = (next_u64() % 5) ? normal16(-spread / 2, spread / 2) : 0;
        for (auto &x : m.B) x = (next_u64() % 5) ? normal16(-spread / 2, spread / 2) : 0;
        for (auto &x : m.C)
            x = (next_u64() % 4) ? ldexpf((float)(int64_t)(next_u64() % 16777216) - 8388608.0f,
                                          uniform(-spread, spread) - 23)
                                 : 0.0f;
    }
    return v;
}

/* ---- models ------------------------------------------------------------------ */
struct expected { std::vector<float> d[2][2]; };    /* [model][keep subnormals] */
static expected model_all(const std::vector<mma_case> &v)
{
    expected e;
    for (int mo = 0; mo < 2; mo++)
        for (int k = 0; k < 2; k++) {
            e.d[mo][k].resize(v.size() * 128);
            for (size_t t = 0; t < v.size(); t++)
                kvq_mma_model::mma(v[t].A, v[t].B, v[t].C, &e.d[mo][k][t * 128],
                                   mo ? kvq_mma_model::TRUNC : kvq_mma_model::EXACT, k == 1);
        }
    return e;
}

static std::vector<float> run_device(const std::vector<mma_case> &v)
{
    mma_case *d_cases;
    float *d_out;
    CU(cudaMalloc(&d_cases, v.size() * sizeof(mma_case)));
    CU(cudaMalloc(&d_out, v.size() * 128 * sizeof(float)));
    CU(cudaMemcpy(d_cases, v.data(), v.size() * sizeof(mma_case), cudaMemcpyHostToDevice));
    CU(cudaMemset(d_out, 0xFF, v.size() * 128 * sizeof(float)));   /* NaN: unwritten */
    KVQ_CUDA_LAUNCH(mma_selftest_kernel, (unsigned)v.size(), 32, 0, 0)(d_cases, (int)v.size(), d_out);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    std::vector<float> got(v.size() * 128);
    CU(cudaMemcpy(got.data(), d_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaFree(d_cases));
    CU(cudaFree(d_out));
    return got;
}

static int passed = 0, failed = 0;
static void check(bool ok, const char *what)
{
    if (ok) passed++;
    else { failed++; printf("FAIL %s\n", what); }
}
static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static void show(const char *label, float got, float exact, float trunc)
{
    printf("    %s: got %.9g (0x%08x); exact %.9g (0x%08x), trunc %.9g (0x%08x)\n", label, got, bits(got),
           exact, bits(exact), trunc, bits(trunc));
}

/* Which of two candidate results the device matches, over the elements
   where they differ; "" if neither matches all of them.                  */
static std::string pick(const char *what, const std::vector<float> &got, const std::vector<float> &x,
                        const char *xn, const std::vector<float> &y, const char *yn)
{
    size_t n = 0, mx = 0, my = 0, other = 0, shown = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const bool ex = same_bits(got[i], x[i]), ey = same_bits(got[i], y[i]);
        if (!same_bits(x[i], y[i])) { n++; mx += ex; my += ey; }
        if (!ex && !ey) {
            other++;
            if (shown++ < 4) {
                printf("    case %zu, D[%zu][%zu]: got %.9g; %s %.9g, %s %.9g\n", i / 128, i % 128 / 8,
                       i % 8, got[i], xn, x[i], yn, y[i]);
            }
        }
    }
    const char *v = (mx == n && other == 0) ? xn : (my == n && other == 0) ? yn : "";
    printf("%s: %zu elements where the models differ: %s %zu, %s %zu; %zu match neither -> %s\n", what,
           n, xn, mx, yn, my, other, *v ? v : "NEITHER");
    if (n == 0) printf("    (no element tells them apart: the inputs do not discriminate)\n");
    return n ? v : "";
}

int main(int argc, char **argv)
{
    const char *expect = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) rng = strtoull(argv[++i], nullptr, 10);
        else {
            printf("usage: mma_selftest [--expect exact|trunc,keep|flush] [--seed N]\n");
            return 2;
        }
    }
    std::string want_acc, want_sub;
    if (expect) {
        const char *comma = strchr(expect, ',');
        if (comma) { want_acc.assign(expect, comma - expect); want_sub = comma + 1; }
        if ((want_acc != "exact" && want_acc != "trunc") || (want_sub != "keep" && want_sub != "flush")) {
            printf("mma_selftest: --expect %s: use exact|trunc,keep|flush\n", expect);
            return 2;
        }
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("mma_selftest: no CUDA device (the emulator build runs without one: make test-cuda-emu)\n");
        return 1;
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        printf("mma_selftest: %s is sm_%d%d; mma.m16n8k16 needs sm_80+\n", prop.name, prop.major, prop.minor);
        return 1;
    }
#ifdef KVQ_EMU
    const char *em = getenv("KVQ_EMU_MMA"), *es = getenv("KVQ_EMU_SUBNORMAL");
    printf("mma_selftest on the CPU emulator (KVQ_EMU_MMA=%s, KVQ_EMU_SUBNORMAL=%s)\n", em ? em : "exact",
           es ? es : "keep");
#else
    printf("mma_selftest on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
#endif

    /* 1. fragment maps: every model gives the exact integer sums          */
    {
        const auto v = fragment_cases(64);
        const expected e = model_all(v);
        const auto got = run_device(v);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); i++)
            if (!same_bits(got[i], e.d[0][1][i]) && bad++ < 4)
                printf("    case %zu, D[%zu][%zu]: got %.9g, A B + C = %.9g\n", i / 128, i % 128 / 8, i % 8,
                       got[i], e.d[0][1][i]);
        printf("fragment maps: %zu cases of small integers (exact in every model): %zu of %zu elements "
               "where kvq_cuda.cu's maps put them\n", v.size(), got.size() - bad, got.size());
        check(bad == 0, "fragment maps: the MMA's D is not A B + C through kvq_mma_a_row/.../c_col");
    }
    /* 2. subnormal inputs, per operand                                    */
    std::string sub[2];
    for (int side = 0; side < 2; side++) {
        const auto v = subnormal_cases(64, side);
        const expected e = model_all(v);
        for (size_t i = 0; i < e.d[0][0].size(); i++)   /* the accumulation must not matter */
            if (!same_bits(e.d[0][0][i], e.d[1][0][i]) || !same_bits(e.d[0][1][i], e.d[1][1][i])) {
                printf("mma_selftest: subnormal case %zu is not exact in both models (a bug here)\n", i / 128);
                return 1;
            }
        const auto got = run_device(v);
        const std::string what = std::string("subnormal inputs in ") + (side ? "B" : "A");
        sub[side] = pick(what.c_str(), got, e.d[0][1], "keep", e.d[0][0], "flush");
        check(!sub[side].empty(), (what + ": neither kept nor flushed").c_str());
    }
    /* 3. accumulation (normal inputs: the subnormal rule does not matter) */
    std::string acc;
    {
        const auto v = accumulation_cases(256);
        const expected e = model_all(v);
        const auto got = run_device(v);
        acc = pick("accumulation", got, e.d[0][1], "exact", e.d[1][1], "trunc");
        printf("  designed: C = +-1 plus 8 products of 2^-25 (below the accumulator's last bit):\n");
        show("+1", got[0], e.d[0][1][0], e.d[1][1][0]);
        show("-1", got[1], e.d[0][1][1], e.d[1][1][1]);
        check(!acc.empty(), "accumulation: neither exact nor truncating");
    }
    const std::string sub_all = sub[0] == sub[1] ? sub[0] : "";
    printf("hardware matches: accumulation %s, subnormal inputs %s\n", acc.empty() ? "NEITHER model" : acc.c_str(),
           sub_all.empty() ? (sub[0] + " in A, " + sub[1] + " in B").c_str() : sub_all.c_str());
    if (acc.empty() || sub_all.empty())
        printf("  the emulator's models (tests/emu/mma_model.h) do not describe this GPU: revise them\n");
    if (sub_all == "keep")
        printf("  subnormals kept: the subnormal decode (kvq_cuda.cu Sec. 7) needs its products exact too\n"
               "  (kvq_cuda_mma_keeps_subnormals runs both decodes against each other)\n");
    if (sub_all == "flush") printf("  subnormals flushed: the subnormal decode is NOT exact here (keep the magic decode)\n");
    if (expect) {
        check(acc == want_acc, ("--expect: accumulation " + want_acc + ", got " + (acc.empty() ? "neither" : acc)).c_str());
        check(sub_all == want_sub, ("--expect: subnormals " + want_sub + ", got " + (sub_all.empty() ? "mixed" : sub_all)).c_str());
    }
    printf("mma_selftest: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
