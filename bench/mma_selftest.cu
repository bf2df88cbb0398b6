/* bench/mma_selftest.cu - which of the emulator's MMA models a GPU's tensor
   cores match: mma.sync.m16n8k16 (f16 x f16 -> f32), through kvq_cuda.cu's
   own wrapper (kvq_mma_16816) and fragment maps (kvq_mma_a_row ...), on
   inputs built to tell the models apart. The models are the emulator's
   (tests/emu/mma_model.h, the same code): accumulation "exact" or one of
   the aligned family align:N:F:R[:sep][:esum] ("trunc" = align:8:0:rz), fp16
   subnormal inputs kept or flushed. Each case is one warp's MMA on whole
   16 x 16 / 16 x 8 matrices; every element of D is compared bit for bit
   with each model's D.

     fragment maps   small integers (every model gives the exact sum): D
                     must equal it everywhere, else the maps (or the MMA)
                     are wrong
     subnormals      fp16 subnormals in A only, then in B only, times small
                     powers of two (sums exact in every accumulation
                     model): kept or flushed, per operand
     integer MMA     mma.sync.m16n8k32 u8 x s8 and u8 x u8 -> s32 (v5's
                     default decode) through kvq_cuda.cu's kvq_mma_16832:
                     random bytes, accumulators up to the int32 limits;
                     every element must equal the int64 sum wrapped to
                     32 bits (no model: the PTX ISA defines it)
     accumulation    normal inputs of wide exponent range and the designed
                     case 1 + 8 x 2^-25 (below the accumulator's last bit:
                     exact 1 + 2^-22, trunc 1), against every model of a
                     grid: exact, and align:N:F:R[:sep][:esum] for N 4, 8,
                     16, F 0-6, 8, 12, R rz and rn, with and without :sep
                     and :esum. The inputs are first checked to tell the
                     grid's models apart (on the host: models that agree
                     on every element form one class); the verdict is the
                     set of models that agree with the device on every
                     element.

   It prints the models the hardware matches (KVQ_EMU_MMA spells them, to
   make the emulator compute as this GPU does), and "N passed, M failed"
   (a check fails when the maps are wrong, when an operand or the
   accumulation matches no model, or, with --expect, when the expected
   model is not among them). On the emulator (make test-cuda-emu) it must
   report the model it was told to use:
     KVQ_EMU_MMA=trunc KVQ_EMU_SUBNORMAL=flush build/emu/mma_selftest --expect trunc,flush

     build/mma_selftest [--expect MODEL,keep|flush] [--seed N]
   MODEL: exact, trunc or align:N:F:rz|rn[:sep][:esum]. Exit status 0 when
   every check passed, 1 otherwise, 2 for bad arguments. Needs an sm_80+
   GPU (or the emulator).                                                         */
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

/* The integer MMA of v5's default decode, mma.sync.m16n8k32 u8 x s8/u8 ->
   s32 through kvq_cuda.cu's kvq_mma_16832, each lane gathering its bytes
   by the PTX ISA's table (written out here, as kvq_cuda.cu's comment on
   the integer decode states it): A register r of lane (g, t) holds row
   g + 8 (r % 2), columns 4 t + b + 16 (r / 2), byte b; B register h holds
   rows 4 t + b + 16 h of column g; C as for f16.                        */
struct imma_case {
    uint8_t A[16 * 32];               /* row-major, u8                       */
    uint8_t B[32 * 8];                /* row-major, s8 or u8 (bits)          */
    int32_t C[16 * 8];
};
template <bool B_SIGNED>
__global__ void __launch_bounds__(32) imma_selftest_kernel(const imma_case *cases, int n, int32_t *D)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int k = blockIdx.x; k < n; k += gridDim.x) {
        const imma_case &m = cases[k];
        uint32_t a[4], b[2] = { 0, 0 };
        int32_t c[4];
        for (int r = 0; r < 4; r++) {
            a[r] = 0;
            for (int byte = 0; byte < 4; byte++)
                a[r] |= (uint32_t)m.A[(g + 8 * (r % 2)) * 32 + 4 * t + byte + 16 * (r / 2)] << (8 * byte);
        }
        for (int h = 0; h < 2; h++)
            for (int byte = 0; byte < 4; byte++)
                b[h] |= (uint32_t)m.B[(4 * t + byte + 16 * h) * 8 + g] << (8 * byte);
        for (int i = 0; i < 4; i++) c[i] = m.C[kvq_mma_c_row(lane, i) * 8 + kvq_mma_c_col(lane, i)];
        kvq_mma_16832<B_SIGNED>(c, a, b[0], b[1]);
        for (int i = 0; i < 4; i++) D[(size_t)k * 128 + kvq_mma_c_row(lane, i) * 8 + kvq_mma_c_col(lane, i)] = c[i];
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
static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

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

/* random bytes, and accumulators of every size up to the int32 limits (a
   quarter of them near a limit, so that some sums wrap)                   */
static std::vector<imma_case> integer_cases(int n)
{
    std::vector<imma_case> v(n);
    for (auto &m : v) {
        for (auto &x : m.A) x = (uint8_t)next_u64();
        for (auto &x : m.B) x = (uint8_t)next_u64();
        for (auto &x : m.C)
            x = (next_u64() % 4) ? (int32_t)(next_u64() % 2000001) - 1000000
                                 : (int32_t)(uint32_t)(0x7fff0000u + next_u64() % 0x20000u);
    }
    return v;
}
/* D = A B + C in int64, wrapped to int32 as the PTX ISA's s32 result is  */
static std::vector<int32_t> integer_expected(const std::vector<imma_case> &v, bool b_signed)
{
    std::vector<int32_t> d(v.size() * 128);
    for (size_t k = 0; k < v.size(); k++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                int64_t acc = v[k].C[i * 8 + j];
                for (int x = 0; x < 32; x++) {
                    const int b = b_signed ? (int)(int8_t)v[k].B[x * 8 + j] : (int)v[k].B[x * 8 + j];
                    acc += (int64_t)v[k].A[i * 32 + x] * b;
                }
                d[k * 128 + i * 8 + j] = (int32_t)(uint32_t)(uint64_t)acc;
            }
    return d;
}

/* ---- models ------------------------------------------------------------------ */
using kvq_mma_model::model;
static std::string spelled(const model &m)
{
    char buf[32];
    return kvq_mma_model::name(m, buf, sizeof buf);
}
static bool same_model(const model &a, const model &b) { return spelled(a) == spelled(b); }

/* D for every case under one model                                        */
static std::vector<float> model_d(const std::vector<mma_case> &v, const model &m, bool keep_subnormals)
{
    std::vector<float> d(v.size() * 128);
    for (size_t t = 0; t < v.size(); t++)
        kvq_mma_model::mma(v[t].A, v[t].B, v[t].C, &d[t * 128], m, keep_subnormals);
    return d;
}
static const model EXACT_MODEL = kvq_mma_model::of(kvq_mma_model::EXACT);
static const model TRUNC_MODEL = kvq_mma_model::of(kvq_mma_model::TRUNC);

/* exact, then align:N:F:R[:sep][:esum] over the grid; `also` joins it if
   absent                                                                 */
static std::vector<model> model_grid(const model *also)
{
    std::vector<model> g{ EXACT_MODEL };
    const int blocks[] = { 4, 8, 16 }, extra[] = { 0, 1, 2, 3, 4, 5, 6, 8, 12 };
    for (int n : blocks)
        for (int f : extra)
            for (int rn = 0; rn < 2; rn++)
                for (int sep = 0; sep < 2; sep++)
                    for (int esum = 0; esum < 2; esum++) g.push_back(model{ n, f, rn == 1, sep == 1, esum == 1 });
    if (also) {
        bool in = false;
        for (const model &m : g) in |= same_model(m, *also);
        if (!in) g.push_back(*also);
    }
    return g;
}

/* One warp's MMA per case on the device: the cases up, `launch(cases, n,
   out)` run, D (128 a case) back. out starts as `poison` bytes, so an
   element no lane wrote shows.                                           */
template <class Case, class Out, class Launch>
static std::vector<Out> run_cases(const std::vector<Case> &v, int poison, Launch launch)
{
    Case *d_cases;
    Out *d_out;
    CU(cudaMalloc(&d_cases, v.size() * sizeof(Case)));
    CU(cudaMalloc(&d_out, v.size() * 128 * sizeof(Out)));
    CU(cudaMemcpy(d_cases, v.data(), v.size() * sizeof(Case), cudaMemcpyHostToDevice));
    CU(cudaMemset(d_out, poison, v.size() * 128 * sizeof(Out)));
    launch(d_cases, (int)v.size(), d_out);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    std::vector<Out> got(v.size() * 128);
    CU(cudaMemcpy(got.data(), d_out, got.size() * sizeof(Out), cudaMemcpyDeviceToHost));
    CU(cudaFree(d_cases));
    CU(cudaFree(d_out));
    return got;
}
static std::vector<float> run_device(const std::vector<mma_case> &v)
{
    return run_cases<mma_case, float>(v, 0xFF, [](const mma_case *c, int n, float *d) {   /* NaN */
        KVQ_CUDA_LAUNCH(mma_selftest_kernel, (unsigned)n, 32, 0, 0)(c, n, d);
    });
}
static std::vector<int32_t> run_device_integer(const std::vector<imma_case> &v, bool b_signed)
{
    return run_cases<imma_case, int32_t>(v, 0x5A, [b_signed](const imma_case *c, int n, int32_t *d) {
        if (b_signed) KVQ_CUDA_LAUNCH(imma_selftest_kernel<true>, (unsigned)n, 32, 0, 0)(c, n, d);
        else KVQ_CUDA_LAUNCH(imma_selftest_kernel<false>, (unsigned)n, 32, 0, 0)(c, n, d);
    });
}

static int passed = 0, failed = 0;
static void check(bool ok, const char *what)
{
    if (ok) passed++;
    else { failed++; printf("FAIL %s\n", what); }
}
static size_t mismatches(const std::vector<float> &got, const std::vector<float> &want)
{
    size_t n = 0;
    for (size_t i = 0; i < got.size(); i++) n += !same_bits(got[i], want[i]);
    return n;
}
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

/* The accumulation models the device agrees with on every element. The
   grid's classes (models that agree with each other on every element of
   these inputs) are counted first: one class in the verdict names the
   hardware's model as far as these inputs can tell.                      */
static std::vector<model> classify(const std::vector<mma_case> &v, const std::vector<float> &got,
                                   const std::vector<model> &grid)
{
    std::vector<std::vector<float>> d;
    for (const model &m : grid) d.push_back(model_d(v, m, true));
    std::vector<int> cls(grid.size(), -1);
    int classes = 0;
    for (size_t a = 0; a < grid.size(); a++) {
        if (cls[a] >= 0) continue;
        cls[a] = classes++;
        for (size_t b = a + 1; b < grid.size(); b++)
            if (cls[b] < 0 && mismatches(d[a], d[b]) == 0) cls[b] = cls[a];
    }
    printf("accumulation grid: %zu models, %d classes on these %zu cases (models of one class agree "
           "everywhere)\n", grid.size(), classes, v.size());
    std::vector<model> match;
    size_t best = got.size() + 1, best_i = 0;
    for (size_t a = 0; a < grid.size(); a++) {
        const size_t miss = mismatches(got, d[a]);
        if (miss == 0) match.push_back(grid[a]);
        if (miss < best) { best = miss; best_i = a; }
    }
    if (match.empty())
        printf("  no model of the grid matches; the closest, %s, differs at %zu of %zu elements\n",
               spelled(grid[best_i]).c_str(), best, got.size());
    else {
        printf("  agrees on every element with %zu model%s:", match.size(), match.size() > 1 ? "s" : "");
        for (const model &m : match) printf(" %s", spelled(m).c_str());
        printf("\n");
    }
    return match;
}

int main(int argc, char **argv)
{
    const char *expect = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) rng = strtoull(argv[++i], nullptr, 10);
        else {
            printf("usage: mma_selftest [--expect MODEL,keep|flush] [--seed N]\n"
                   "  MODEL: exact, trunc or align:N:F:rz|rn[:sep][:esum] (tests/emu/mma_model.h)\n");
            return 2;
        }
    }
    std::string want_sub;
    model want_acc{};
    if (expect) {
        const char *comma = strchr(expect, ',');
        const std::string acc_text = comma ? std::string(expect, comma - expect) : "";
        if (comma) want_sub = comma + 1;
        if (!kvq_mma_model::parse(acc_text.c_str(), &want_acc) || (want_sub != "keep" && want_sub != "flush")) {
            printf("mma_selftest: --expect %s: use MODEL,keep|flush with MODEL exact, trunc or "
                   "align:N:F:rz|rn[:sep][:esum]\n", expect);
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
        const auto want = model_d(v, EXACT_MODEL, true);
        const auto got = run_device(v);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); i++)
            if (!same_bits(got[i], want[i]) && bad++ < 4)
                printf("    case %zu, D[%zu][%zu]: got %.9g, A B + C = %.9g\n", i / 128, i % 128 / 8, i % 8,
                       got[i], want[i]);
        printf("fragment maps: %zu cases of small integers (exact in every model): %zu of %zu elements "
               "where kvq_cuda.cu's maps put them\n", v.size(), got.size() - bad, got.size());
        check(bad == 0, "fragment maps: the MMA's D is not A B + C through kvq_mma_a_row/.../c_col");
    }
    /* 2. subnormal inputs, per operand                                    */
    std::string sub[2];
    for (int side = 0; side < 2; side++) {
        const auto v = subnormal_cases(64, side);
        const auto keep = model_d(v, EXACT_MODEL, true), flush = model_d(v, EXACT_MODEL, false);
        for (const model &m : model_grid(nullptr))   /* the accumulation must not matter */
            if (mismatches(keep, model_d(v, m, true)) || mismatches(flush, model_d(v, m, false))) {
                printf("mma_selftest: a subnormal case is not exact under %s (a bug here)\n", spelled(m).c_str());
                return 1;
            }
        const auto got = run_device(v);
        const std::string what = std::string("subnormal inputs in ") + (side ? "B" : "A");
        sub[side] = pick(what.c_str(), got, keep, "keep", flush, "flush");
        check(!sub[side].empty(), (what + ": neither kept nor flushed").c_str());
    }
    /* 3. accumulation (normal inputs: the subnormal rule does not matter) */
    std::vector<model> acc;
    {
        const auto v = accumulation_cases(256);
        const auto got = run_device(v);
        const auto exact = model_d(v, EXACT_MODEL, true), trunc = model_d(v, TRUNC_MODEL, true);
        pick("accumulation", got, exact, "exact", trunc, "trunc");
        printf("  designed: C = +-1 plus 8 products of 2^-25 (below the accumulator's last bit):\n");
        show("+1", got[0], exact[0], trunc[0]);
        show("-1", got[1], exact[1], trunc[1]);
        acc = classify(v, got, model_grid(expect ? &want_acc : nullptr));
        check(!acc.empty(), "accumulation: no model of the grid");
    }
    /* 4. the integer MMA (v5's default decode): exact by the PTX ISA, so
          every element must be the int64 sum wrapped to int32            */
    for (int b_signed = 1; b_signed >= 0; b_signed--) {
        const auto v = integer_cases(64);
        const auto want = integer_expected(v, b_signed);
        const auto got = run_device_integer(v, b_signed);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); i++)
            if (got[i] != want[i] && bad++ < 4)
                printf("    case %zu, D[%zu][%zu]: got %d, A B + C = %d\n", i / 128, i % 128 / 8, i % 8,
                       got[i], want[i]);
        printf("integer MMA, u8 x %s: %zu cases, %zu of %zu elements equal the wrapped int64 sum\n",
               b_signed ? "s8" : "u8", v.size(), got.size() - bad, got.size());
        check(bad == 0, b_signed ? "integer MMA u8 x s8: D is not A B + C (fragment table or kvq_mma_16832)"
                                 : "integer MMA u8 x u8: D is not A B + C (fragment table or kvq_mma_16832)");
    }
    std::string acc_names;
    for (const model &m : acc) acc_names += (acc_names.empty() ? "" : " = ") + spelled(m);
    const std::string sub_all = sub[0] == sub[1] ? sub[0] : "";
    printf("hardware matches: accumulation %s, subnormal inputs %s\n",
           acc.empty() ? "NO model of the grid" : acc_names.c_str(),
           sub_all.empty() ? (sub[0] + " in A, " + sub[1] + " in B").c_str() : sub_all.c_str());
    if (acc.empty() || sub_all.empty())
        printf("  the emulator's models (tests/emu/mma_model.h) do not describe this GPU: revise them\n");
    else
        printf("  the emulator computes as this GPU does with KVQ_EMU_MMA=%s KVQ_EMU_SUBNORMAL=%s\n",
               spelled(acc[0]).c_str(), sub_all.c_str());
    if (sub_all == "keep")
        printf("  subnormals kept: the subnormal decode (kvq_cuda.cu Sec. 7) needs its products exact too\n"
               "  (kvq_cuda_mma_keeps_subnormals runs both decodes against each other)\n");
    if (sub_all == "flush") printf("  subnormals flushed: the subnormal decode is NOT exact here (keep the magic decode)\n");
    if (expect) {
        bool in = false;
        for (const model &m : acc) in |= same_model(m, want_acc);
        check(in, ("--expect: accumulation " + spelled(want_acc) + ", got " +
                   (acc.empty() ? std::string("no model") : acc_names)).c_str());
        check(sub_all == want_sub, ("--expect: subnormals " + want_sub + ", got " + (sub_all.empty() ? "mixed" : sub_all)).c_str());
    }
    printf("mma_selftest: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
