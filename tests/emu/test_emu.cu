/* tests/emu/test_emu.cu - the emulator's own checks (make test-cuda-emu).

   The emulator is trusted by every kernel test that runs on it, so its
   semantics are tested first, each against an independent expectation:
     fp16      conversions against kvq.h's (two implementations written
               apart), and the fused multiply-add against an exact sum in
               128-bit floats with the nearest fp16 chosen by search
     shuffles  every lane's value against the CUDA formula (xor and
               indexed, widths 8, 16, 32)
     barriers  data written before __syncthreads read after it; shared
               memory poisoned (0xFF) before a block starts
     cp.async  the destination reads 0xFF until the wait that covers its
               group, and the source's bytes after
     mma.sync  m16n8k16 through kvq_cuda.cu's fragment maps against a
               128-bit brute-force product: exact model within one
               rounding; truncating model below the exact value for
               positive data and within its stated bound; subnormal inputs
               kept or flushed; m16n8k32 u8 x u8/s8 -> s32 (fragments from
               the PTX tables written here) equal to int64 sums wrapped
     reports   each misuse in a child process, which must stop with the
               emulator's status (86) and name the problem: divergent
               shuffles and barriers, an exited lane in a shuffle, a
               cp.async never waited for, aimed at global memory or into
               bytes another cp.async has in flight, and in the race
               build a race, an uninitialized read, and a read of or a
               store into bytes still in flight; and what must not be
               reported: exchanges with disjoint masks that each complete
               (then the whole warp's), a stage refilled after its wait
     the host  bad launch shapes and dynamic shared memory over the limit
     API       return errors; cudaMemcpy/cudaMemset/cudaFree refuse
               pointers on the wrong side or past their allocation     */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#define KVQ_CUDA_DECLARE_ONLY
#include "kvq_cuda.cu"
#include "test.h"

#include <sys/wait.h>
#include <unistd.h>
#include <vector>
#include <string>

static uint64_t rng_state = 0x656d75ull;          /* splitmix64 */
static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define CU(call) CHECK((call) == cudaSuccess, "%s failed", #call)

/* ======================================================================== */
/* fp16                                                                     */
/* ======================================================================== */
static bool same_f16(kvq_f16 a, kvq_f16 b)
{
    const bool na = (a & 0x7c00) == 0x7c00 && (a & 0x3ff), nb = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
    return na || nb ? na && nb : a == b;
}
static void test_fp16(void)
{
    long bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {          /* every half to float */
        const float a = (float)kvq_emu::f16_to_f64((unsigned short)h), b = kvq_f16_to_f32((kvq_f16)h);
        if (a != a || b != b) bad += !(a != a && b != b);          /* NaN: any sign */
        else bad += a != b || signbit(a) != signbit(b);
    }
    CHECK(bad == 0, "f16 -> f32: %ld of 65536 halves differ from kvq.h", bad);
    /* float -> half: every half, the midpoints between neighbours (ties),
       one float either side of them, and random bit patterns             */
    bad = 0;
    long n = 0;
    for (uint32_t h = 0; h < 0x7c00; h++)
        for (int sgn = 0; sgn < 2; sgn++) {
            const double a = kvq_emu::f16_to_f64((unsigned short)h), b = kvq_emu::f16_to_f64((unsigned short)(h + 1));
            const float mid = (float)((a + b) / 2), xs[] = { (float)a, mid, nextafterf(mid, 0.0f), nextafterf(mid, 1e9f) };
            for (float x : xs) {
                x = sgn ? -x : x;
                bad += !same_f16(kvq_emu::f64_to_f16(x), kvq_f32_to_f16(x));
                n++;
            }
        }
    for (int i = 0; i < 2000000; i++) {
        const uint32_t u = (uint32_t)rng_u64();
        float x;
        memcpy(&x, &u, 4);
        bad += !same_f16(kvq_emu::f64_to_f16(x), kvq_f32_to_f16(x));
        n++;
    }
    CHECK(bad == 0, "f32 -> f16: %ld of %ld floats differ from kvq.h", bad, n);
    CHECK(kvq_emu::f64_to_f16(65519.99f) == 0x7bff && kvq_emu::f64_to_f16(65520.0f) == 0x7c00 &&
          kvq_emu::f64_to_f16(-65520.0f) == 0xfc00, "overflow to Inf at 65520");
#if defined(__SIZEOF_FLOAT128__)
    /* a b + c: the exact sum in binary128 (p has 22 bits, the span of
       exponents is < 90 bits), then the nearest fp16 by search            */
    bad = 0;
    for (int i = 0; i < 300000; i++) {
        unsigned short h[3];
        for (int k = 0; k < 3; k++)
            do h[k] = (unsigned short)rng_u64(); while ((h[k] & 0x7c00) == 0x7c00);
        if (i % 3 == 0) h[1] = (unsigned short)(h[1] & 0x83ff);           /* subnormals */
        const __float128 s = (__float128)kvq_emu::f16_to_f64(h[0]) * (__float128)kvq_emu::f16_to_f64(h[1]) +
                             (__float128)kvq_emu::f16_to_f64(h[2]);
        if ((double)(s < 0 ? -s : s) >= 65504.0) continue;    /* near overflow: skip */
        /* candidates: the double-rounded fp16 and its neighbours (in value
           order, across zero); the nearest wins, ties to the even code    */
        const int h0 = kvq_emu::f64_to_f16((double)s);
        const int v0 = (h0 & 0x8000) ? -(h0 & 0x7fff) : h0;          /* a signed ordinal */
        unsigned short best = 0;
        __float128 best_d = -1;
        for (int v = v0 - 2; v <= v0 + 2; v++) {
            const unsigned short c = (unsigned short)(v < 0 ? (0x8000 | -v) : v);
            if ((c & 0x7fff) >= 0x7c00) continue;
            const __float128 d0 = (__float128)kvq_emu::f16_to_f64(c) - s, d = d0 < 0 ? -d0 : d0;
            if (best_d < 0 || d < best_d || (d == best_d && !(c & 1))) { best = c; best_d = d; }
        }
        const unsigned short got = kvq_emu::f16_fma(h[0], h[1], h[2]);
        bad += got != best && !((got & 0x7fff) == 0 && (best & 0x7fff) == 0);   /* +-0 */
    }
    CHECK(bad == 0, "fp16 fma: %ld of 300000 differ from the nearest fp16 of the exact sum", bad);
#endif
}

/* ======================================================================== */
/* shuffles, barriers, shared memory, cp.async                              */
/* ======================================================================== */
__global__ void k_shuffles(int *out /* (64 threads, 34) */)
{
    const int t = threadIdx.x, lane = t % 32, v = 1000 * (t / 32) + 7 * lane + 3;
    int *o = out + t * 34;
    for (int k = 0; k < 5; k++) o[k] = __shfl_xor_sync(0xffffffffu, v, 1 << k);
    o[5] = __shfl_sync(0xffffffffu, v, (lane * 5 + 1) % 32);
    o[6] = __shfl_sync(0xffffffffu, v, 3, 8);             /* lane 3 of its 8   */
    o[7] = __shfl_xor_sync(0xffffffffu, v, 16, 16);       /* later group: own */
    o[8] = __shfl_xor_sync(0xffffffffu, v, 4, 16);
    const float f = __shfl_sync(0xffffffffu, 0.5f * (float)v, 31);
    memcpy(&o[9], &f, 4);
}

__global__ void k_barrier(int *out, int *poison /* NULL: no read of unwritten memory */)
{
    KVQ_CUDA_SHARED(int, buf, [256]);
    KVQ_CUDA_SHARED(int, untouched, [4]);
    const int t = threadIdx.x;
    buf[t] = 3 * t + 1;
    __syncthreads();
    out[t] = buf[255 - t];
    if (t == 0 && poison) *poison = untouched[2];
}

__global__ void k_cp_async(const int *src /* 8 ints */, int *out /* 24 ints */, bool early)
{
    KVQ_CUDA_SHARED_DYNAMIC(int, st);
    if (threadIdx.x != 0) return;
    kvq_emu::cp_async(__FILE__, __LINE__, st, src, 16);
    kvq_emu::cp_async_commit();
    kvq_emu::cp_async(__FILE__, __LINE__, st + 4, src + 4, 16);
    kvq_emu::cp_async_commit();
    if (early)
        for (int i = 0; i < 8; i++) out[i] = st[i];      /* both in flight    */
    kvq_emu::cp_async_wait(__FILE__, __LINE__, 1);       /* the first lands   */
    if (early)
        for (int i = 0; i < 8; i++) out[8 + i] = st[i];
    kvq_emu::cp_async_wait(__FILE__, __LINE__, 0);
    for (int i = 0; i < 8; i++) out[16 + i] = st[i];
}

/* __byte_perm(x, y, s) as CUDA defines it: byte i of the result is byte
   (s >> 4 i) & 7 of {y, x}, x the low four (a selector's bit 3 is not
   used). Written out byte by byte, not by the emulator's loop.          */
static void test_byte_perm(void)
{
    const unsigned a = 0x33221100u, b = 0x77665544u;
    CHECK(__byte_perm(a, b, 0x3210u) == a && __byte_perm(a, b, 0x7654u) == b,
          "__byte_perm: the identity selectors");
    CHECK(__byte_perm(a, b, 0x5410u) == 0x55441100u && __byte_perm(a, b, 0x7632u) == 0x77663322u,
          "__byte_perm: the low and the high halves of a and b");
    CHECK(__byte_perm(a, b, 0x0123u) == 0x00112233u && __byte_perm(a, b, 0xCDEFu) == 0x44556677u,
          "__byte_perm: reversed bytes, and a selector's bit 3 ignored");
}

static void test_exchanges(void)
{
    int *d;
    std::vector<int> h(64 * 34);
    CU(cudaMalloc(&d, h.size() * 4));
    KVQ_CUDA_LAUNCH(k_shuffles, 1, 64, 0, 0)(d);
    CU(cudaGetLastError());
    CU(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
    long bad = 0;
    for (int t = 0; t < 64; t++) {
        const int lane = t % 32, base = 1000 * (t / 32);
        auto val = [&](int l) { return base + 7 * l + 3; };
        const int *o = &h[t * 34];
        for (int k = 0; k < 5; k++) bad += o[k] != val(lane ^ (1 << k));
        bad += o[5] != val((lane * 5 + 1) % 32);
        bad += o[6] != val((lane & ~7) + 3);
        bad += o[7] != val(lane < 16 ? lane : lane - 16);   /* earlier group: read */
        bad += o[8] != val(lane ^ 4);
        float f;
        memcpy(&f, &o[9], 4);
        bad += f != 0.5f * (float)val(31);
    }
    CHECK(bad == 0, "shuffles: %ld values differ from CUDA's definition", bad);

    int *p;
    CU(cudaMalloc(&p, 4));
    const bool race = kvq_emu::race_checking();   /* it stops unwritten reads */
    KVQ_CUDA_LAUNCH(k_barrier, 1, 256, 0, 0)(d, race ? nullptr : p);
    CU(cudaGetLastError());
    CU(cudaMemcpy(h.data(), d, 256 * 4, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int t = 0; t < 256; t++) bad += h[t] != 3 * (255 - t) + 1;
    int poison = 0;
    CU(cudaMemcpy(&poison, p, 4, cudaMemcpyDeviceToHost));
    CHECK(bad == 0, "barrier: %ld threads read a value not yet written", bad);
    if (!race) CHECK(poison == -1, "unwritten shared memory reads %08x, not the 0xFF poison", (unsigned)poison);

    int src[8] = { 11, 12, 13, 14, 15, 16, 17, 18 }, *ds;
    CU(cudaMalloc(&ds, sizeof src));
    CU(cudaMemcpy(ds, src, sizeof src, cudaMemcpyHostToDevice));
    CU(cudaMemset(d, 0xFF, 24 * 4));
    KVQ_CUDA_LAUNCH(k_cp_async, 1, 32, 64, 0)(ds, d, !race);
    CU(cudaGetLastError());
    CU(cudaMemcpy(h.data(), d, 24 * 4, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < 8; i++) {
        if (!race) {                                     /* reads in flight  */
            bad += h[i] != -1;                           /* both: 0xFF       */
            bad += h[8 + i] != (i < 4 ? src[i] : -1);    /* group 1 only     */
        }
        bad += h[16 + i] != src[i];
    }
    CHECK(bad == 0, "cp.async: %ld values landed before their wait or not after it", bad);
    cudaFree(d); cudaFree(p); cudaFree(ds);
}

/* ======================================================================== */
/* mma.sync m16n8k16                                                        */
/* ======================================================================== */
/* A (16x16) and B (16x8) fp16 row-major, C/D (16x8) fp32: each lane loads
   its fragments by kvq_cuda.cu's maps and stores D by the C map.         */
__global__ void k_mma(const unsigned short *A, const unsigned short *B, const float *C, float *D)
{
    const int l = threadIdx.x;
    uint32_t a[4], b[2];
    float c[4];
    for (int r = 0; r < 4; r++)
        a[r] = A[kvq_mma_a_row(l, 2 * r) * 16 + kvq_mma_a_col(l, 2 * r)] |
               (uint32_t)A[kvq_mma_a_row(l, 2 * r + 1) * 16 + kvq_mma_a_col(l, 2 * r + 1)] << 16;
    for (int r = 0; r < 2; r++)
        b[r] = B[kvq_mma_b_row(l, 2 * r) * 8 + kvq_mma_b_col(l)] |
               (uint32_t)B[kvq_mma_b_row(l, 2 * r + 1) * 8 + kvq_mma_b_col(l)] << 16;
    for (int i = 0; i < 4; i++) c[i] = C[kvq_mma_c_row(l, i) * 8 + kvq_mma_c_col(l, i)];
    kvq_mma_16816(c, a, b[0], b[1]);
    for (int i = 0; i < 4; i++) D[kvq_mma_c_row(l, i) * 8 + kvq_mma_c_col(l, i)] = c[i];
}

static unsigned short rand_half(bool positive, bool subnormal)
{
    unsigned short h;
    do {
        h = (unsigned short)rng_u64();
        h = (unsigned short)((h & 0x83ff) | ((subnormal ? 0 : 9 + rng_u64() % 13) << 10));
    } while ((h & 0x7fff) == 0);
    return positive ? (unsigned short)(h & 0x7fff) : h;
}

static void test_mma(void)
{
    unsigned short *dA, *dB;
    float *dC, *dD;
    CU(cudaMalloc(&dA, 256 * 2)); CU(cudaMalloc(&dB, 128 * 2));
    CU(cudaMalloc(&dC, 128 * 4)); CU(cudaMalloc(&dD, 128 * 4));
    double worst_exact = 0, worst_trunc = 0;
    long over = 0, differs = 0, sub_bad = 0, cases = 0;
    for (int it = 0; it < 120; it++) {
        const bool positive = it % 2 == 0, subn = it % 5 == 4;
        unsigned short A[256], B[128];
        float C[128], D[128];
        for (auto &x : A) x = rand_half(positive, subn && rng_u64() % 4 == 0);
        for (auto &x : B) x = rand_half(positive, false);
        for (auto &x : C) x = positive ? (float)(rng_u64() % 1000) : (float)((int)(rng_u64() % 2000) - 1000);
        CU(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice));
        for (int model = 0; model < 3; model++) {    /* exact, trunc, exact + flush */
            kvq_emu::set_mma_model(model == 1 ? kvq_emu::MMA_TRUNC : kvq_emu::MMA_EXACT, model != 2);
            KVQ_CUDA_LAUNCH(k_mma, 1, 32, 0, 0)(dA, dB, dC, dD);
            CU(cudaMemcpy(D, dD, sizeof D, cudaMemcpyDeviceToHost));
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 8; j++) {
                    /* M = |C| + sum |products|: no partial sum of any
                       order exceeds it; errors are in units of 2^-23 M  */
                    long double s = C[i * 8 + j], M = fabsl((long double)C[i * 8 + j]);
                    for (int k = 0; k < 16; k++) {
                        double a = kvq_f16_to_f32(A[i * 16 + k]);
                        if (model == 2 && (A[i * 16 + k] & 0x7c00) == 0) a = 0;
                        const long double p = (long double)a * kvq_f16_to_f32(B[k * 8 + j]);
                        s += p;                          /* exact: < 64 bits span */
                        M += fabsl(p);
                    }
                    const double got = D[i * 8 + j], ref = (double)s;
                    const double ulp = ldexp((double)M, -23);
                    cases++;
                    if (model != 1) {
                        worst_exact = fmax(worst_exact, fabs(got - ref) / ulp);
                        if (model == 2 && fabs(got - ref) > ulp) sub_bad++;
                    } else {
                        worst_trunc = fmax(worst_trunc, fabs(got - ref) / ulp);
                        if (positive && got > ref) over++;
                        differs += got != (double)(float)ref;
                    }
                }
        }
    }
    kvq_emu::set_mma_model(kvq_emu::MMA_EXACT, true);
    /* exact: one rounding of a (double) sum, at most half a unit. trunc:
       each of 2 blocks cuts 9 terms to a quantum of at most one unit, and
       its result toward zero, one more: 20 units is the stated bound.    */
    CHECK(worst_exact <= 1.0, "mma exact model: worst error %.2f units of 2^-23 M", worst_exact);
    CHECK(worst_trunc <= 20.0, "mma truncating model: worst error %.2f units of 2^-23 M", worst_trunc);
    CHECK(over == 0, "mma truncating model: %ld sums of positive terms came out above the exact sum", over);
    CHECK(differs > 0, "mma truncating model: never differed from the exact model (%ld cases)", cases);
    CHECK(sub_bad == 0, "mma with subnormals flushed: %ld results differ from the sum without them", sub_bad);
    printf("  mma.m16n8k16: worst error in units of 2^-23 (|C| + sum |a b|): exact model %.2f, "
           "truncating %.2f (%ld of its results "
           "differ from exact)\n", worst_exact, worst_trunc, differs);
    cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dD);
}

/* mma.sync m16n8k32, u8 A times s8 or u8 B into s32 (kvq_mma_16832), with
   the fragments laid out here from the PTX ISA's integer tables (a third
   writing of them), against sums in int64 wrapped to 32 bits            */
template <bool SIGNED>
__global__ void k_imma(const uint8_t *A /* (16, 32) */, const uint8_t *B /* (32, 8) */,
                       const int32_t *C /* (16, 8) */, int32_t *D)
{
    const int l = threadIdx.x % 32, g = l / 4, t = l % 4;
    uint32_t a[4] = { 0, 0, 0, 0 }, b[2] = { 0, 0 };
    int32_t c[4];
    for (int i = 0; i < 16; i++)           /* row g + 8 ((i/4) % 2), col 4t + i%4 + 16 (i/8) */
        a[i / 4] |= (uint32_t)A[(g + 8 * ((i / 4) % 2)) * 32 + 4 * t + i % 4 + 16 * (i / 8)] << (8 * (i % 4));
    for (int i = 0; i < 8; i++)            /* row 4t + i%4 + 16 (i/4), col g */
        b[i / 4] |= (uint32_t)B[(4 * t + i % 4 + 16 * (i / 4)) * 8 + g] << (8 * (i % 4));
    for (int i = 0; i < 4; i++) c[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    kvq_mma_16832<SIGNED>(c, a, b[0], b[1]);
    for (int i = 0; i < 4; i++) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = c[i];
}

static void test_imma(void)
{
    uint8_t *dA, *dB;
    int32_t *dC, *dD;
    CU(cudaMalloc(&dA, 16 * 32));
    CU(cudaMalloc(&dB, 32 * 8));
    CU(cudaMalloc(&dC, 16 * 8 * 4));
    CU(cudaMalloc(&dD, 16 * 8 * 4));
    long bad = 0, cases = 0;
    for (int rep = 0; rep < 40; rep++)
        for (int sgn = 0; sgn < 2; sgn++) {
            uint8_t A[16 * 32], B[32 * 8];
            int32_t C[16 * 8], D[16 * 8];
            for (int i = 0; i < 16 * 32; i++) A[i] = (uint8_t)rng_u64();
            for (int i = 0; i < 32 * 8; i++) B[i] = (uint8_t)rng_u64();
            /* every fourth case starts near the int32 limits: the sum wraps */
            for (int i = 0; i < 16 * 8; i++)
                C[i] = rep % 4 == 3 ? (int32_t)(rng_u64() % 2 ? 0x7fff0000u : 0x80000100u)
                                    : (int32_t)(rng_u64() % 2000001) - 1000000;
            CU(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
            CU(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
            CU(cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice));
            if (sgn) KVQ_CUDA_LAUNCH(k_imma<true>, 1, 32, 0, 0)(dA, dB, dC, dD);
            else KVQ_CUDA_LAUNCH(k_imma<false>, 1, 32, 0, 0)(dA, dB, dC, dD);
            CU(cudaMemcpy(D, dD, sizeof D, cudaMemcpyDeviceToHost));
            for (int r = 0; r < 16; r++)
                for (int c = 0; c < 8; c++) {
                    int64_t want = C[r * 8 + c];
                    for (int k = 0; k < 32; k++)
                        want += (int64_t)A[r * 32 + k] * (sgn ? (int64_t)(int8_t)B[k * 8 + c] : (int64_t)B[k * 8 + c]);
                    bad += D[r * 8 + c] != (int32_t)(uint32_t)(uint64_t)want;
                    cases++;
                }
        }
    CHECK(bad == 0, "mma.m16n8k32 (u8): %ld of %ld results differ from the exact sum (wrapped)", bad, cases);
    printf("  mma.m16n8k32 u8 x u8/s8: %ld results equal the int64 sums wrapped to 32 bits\n", cases);
    cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dD);
}

/* ======================================================================== */
/* reports: each misuse in a child, which must stop with status 86          */
/* ======================================================================== */
__global__ void k_divergent_shfl(int *out)
{
    const int lane = threadIdx.x % 32;
    if (lane < 16) out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
    else out[lane] = __shfl_xor_sync(0xffffffffu, lane, 2);
}
__global__ void k_split_barrier(int *out)
{
    if (threadIdx.x < 64) __syncthreads();
    else { out[threadIdx.x] = 1; __syncthreads(); }
}
__global__ void k_exited_lane(int *out)
{
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}
__global__ void k_never_waited(const int *src)
{
    KVQ_CUDA_SHARED(int, st, [4]);
    kvq_emu::cp_async(__FILE__, __LINE__, st, src, 16);
    kvq_emu::cp_async_commit();
}
__global__ void k_cp_to_global(int *dst, const int *src) { kvq_emu::cp_async(__FILE__, __LINE__, dst, src, 16); }
__global__ void k_race(int *out)
{
    KVQ_CUDA_SHARED(int, flag, );
    flag = (int)threadIdx.x;                    /* every thread, no barrier */
    __syncthreads();
    out[threadIdx.x] = flag;
}
__global__ void k_uninit(int *out)
{
    KVQ_CUDA_SHARED(int, buf, [64]);
    if (threadIdx.x < 63) buf[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = buf[63 - threadIdx.x];
}
__global__ void k_in_flight(const int *src, int *out)
{
    KVQ_CUDA_SHARED(int, st, [4]);
    kvq_emu::cp_async(__FILE__, __LINE__, st, src, 16);
    kvq_emu::cp_async_commit();
    out[0] = st[1];
    kvq_emu::cp_async_wait(__FILE__, __LINE__, 0);
}

/* A cp.async issued into bytes an earlier cp.async still has in flight:
   the earlier one by the same thread in an older group (a stage refilled
   before its wait, as in a stage rotation off by one), or by another
   thread (who: 0 same thread, 1 another)                                */
__global__ void k_cp_overlap(const int *src, int *out, int who)
{
    KVQ_CUDA_SHARED(int, st, [8]);
    const unsigned t = threadIdx.x;
    if (t == 0) {
        kvq_emu::cp_async(__FILE__, __LINE__, st, src, 16);
        kvq_emu::cp_async_commit();
    }
    if (who == 0 && t == 0) {
        kvq_emu::cp_async(__FILE__, __LINE__, st, src + 4, 16);   /* the same 16 bytes */
        kvq_emu::cp_async_commit();
    }
    __syncthreads();                        /* thread 0's first copy: in flight */
    if (who == 1 && t == 1) {
        kvq_emu::cp_async(__FILE__, __LINE__, st + 2, src + 4, 8);   /* 8 of them */
        kvq_emu::cp_async_commit();
    }
    __syncthreads();
    if (t < 2) kvq_emu::cp_async_wait(__FILE__, __LINE__, 0);
    __syncthreads();
    out[t] = st[t % 4];
}
/* The legal form of the same: the second copy after the first's wait, and
   a copy beside bytes in flight (adjacent, not overlapping)             */
__global__ void k_cp_refill(const int *src, int *out)
{
    KVQ_CUDA_SHARED(int, st, [8]);
    if (threadIdx.x != 0) return;
    kvq_emu::cp_async(__FILE__, __LINE__, st, src, 16);
    kvq_emu::cp_async_commit();
    kvq_emu::cp_async(__FILE__, __LINE__, st + 4, src + 8, 16);
    kvq_emu::cp_async_commit();
    kvq_emu::cp_async_wait(__FILE__, __LINE__, 1);
    for (int i = 0; i < 4; i++) out[i] = st[i];
    kvq_emu::cp_async(__FILE__, __LINE__, st, src + 4, 16);   /* refilled after its wait */
    kvq_emu::cp_async_commit();
    kvq_emu::cp_async_wait(__FILE__, __LINE__, 0);
    for (int i = 0; i < 8; i++) out[4 + i] = st[i];
}
/* A plain store into bytes a cp.async has in flight (the race build)    */
__global__ void k_store_in_flight(const int *src)
{
    KVQ_CUDA_SHARED(int, st, [4]);
    if (threadIdx.x != 0) return;
    kvq_emu::cp_async(__FILE__, __LINE__, st, src, 16);
    kvq_emu::cp_async_commit();
    st[2] = 7;
    kvq_emu::cp_async_wait(__FILE__, __LINE__, 0);
}

/* Warp exchanges with disjoint masks, each of which completes: the even
   lanes and the odd lanes each exchange among themselves at a line of
   their own, then the whole warp at a third (in thread order lane 30
   completes the even lanes' exchange and reaches the third while the odd
   lanes still wait at theirs); then __any_sync over each half, whose
   predicate only one lane of one half sets.                             */
__global__ void k_disjoint(int *out /* (32, 4) */)
{
    const int lane = threadIdx.x % 32;
    int v = 100 + lane;
    if (lane % 2 == 0) v = __shfl_xor_sync(0x55555555u, v, 2);
    else v = __shfl_xor_sync(0xaaaaaaaau, v, 6);
    const int w = __shfl_xor_sync(0xffffffffu, v, 1);
    int a;
    if (lane < 16) a = __any_sync(0x0000ffffu, lane == 5);
    else a = __any_sync(0xffff0000u, 0);
    out[lane * 4 + 0] = v;
    out[lane * 4 + 1] = w;
    out[lane * 4 + 2] = a;
}

/* Shared-memory bank conflicts (the race build's model): each kernel one
   warp, one access pattern, ITER times (each time a request of its own) */
template <int ITER>
__global__ void k_bank_word_stride(const int *in, int *out, int stride /* words between lanes */)
{
    KVQ_CUDA_SHARED(int, st, [1024]);
    const int lane = threadIdx.x;
    for (int i = lane; i < 1024; i += 32) st[i] = in[i];
    __syncthreads();
    int sum = 0;
    for (int i = 0; i < ITER; i++) sum += st[(stride * lane + i) % 1024];
    out[lane] = sum;
}
/* one 16-byte read per lane, lanes `stride` 16-byte chunks apart; swap:
   of two, the lanes of odd quads read the second chunk first           */
__global__ void k_bank_vec(const int *in, int *out, int stride, int two, int swap)
{
    KVQ_CUDA_SHARED(int, st, [1024]);
    const int lane = threadIdx.x;
    for (int i = lane; i < 1024; i += 32) st[i] = in[i];
    __syncthreads();
    const int s = swap ? (lane >> 2) & 1 : 0;
    uint4 a, b;
    kvq_emu::ld_vec(&a, st + 4 * (stride * lane + s), 16);
    b = a;
    if (two) kvq_emu::ld_vec(&b, st + 4 * (stride * lane + (s ^ 1)), 16);
    out[lane] = (int)(a.x + a.w + b.y);
}

static void test_banks(void)
{
    int *in, *out;
    CU(cudaMalloc(&in, 1024 * 4));
    CU(cudaMalloc(&out, 32 * 4));
    std::vector<int> h(1024);
    for (int i = 0; i < 1024; i++) h[i] = i;
    CU(cudaMemcpy(in, h.data(), 1024 * 4, cudaMemcpyHostToDevice));
    kvq_emu::banks_count(true);
    struct want_t { const char *what; const void *fn; uint64_t requests, wavefronts, ideal; };
    std::vector<want_t> want;
    /* the fill (32 stores a request, consecutive words: 1 wavefront each,
       8 of them for 1024 words: 4-byte stores; 256 uint4: 8 of 8 lanes
       per phase, 4 phases) counts in every kernel's totals              */
    KVQ_CUDA_LAUNCH(k_bank_word_stride<1>, 1, 32, 0, 0)(in, out, 1);    /* consecutive words */
    want.push_back({ "32-bit reads of consecutive words", (const void *)k_bank_word_stride<1>, 32 + 1, 32 + 1, 32 + 1 });
    KVQ_CUDA_LAUNCH(k_bank_word_stride<3>, 1, 32, 0, 0)(in, out, 4);    /* 16-byte lane stride */
    /* bank (4 l + i) % 32: lanes l, l + 8, l + 16, l + 24 share it: 4 ways */
    want.push_back({ "32-bit reads at a 16-byte lane stride, 3 times", (const void *)k_bank_word_stride<3>,
                     32 + 3, 32 + 3 * 4, 32 + 3 });
    KVQ_CUDA_LAUNCH(k_bank_word_stride<2>, 1, 32, 0, 0)(in, out, 0);    /* one word: a broadcast */
    want.push_back({ "one word read by every lane (a broadcast), twice", (const void *)k_bank_word_stride<2>,
                     32 + 2, 32 + 2, 32 + 2 });
    for (const want_t &w : want) {
        uint64_t r, wf, id;
        kvq_emu::bank_totals(w.fn, &r, &wf, &id);
        CHECK(r == w.requests && wf == w.wavefronts && id == w.ideal,
              "banks, %s: %llu requests, %llu wavefronts, %llu ideal (want %llu, %llu, %llu)", w.what,
              (unsigned long long)r, (unsigned long long)wf, (unsigned long long)id,
              (unsigned long long)w.requests, (unsigned long long)w.wavefronts, (unsigned long long)w.ideal);
    }
    /* 16-byte reads, served 8 lanes (128 bytes) at a time: at a 16-byte
       stride each phase holds 128 consecutive bytes (4 of 4); at a 32-byte
       stride lanes l and l + 4 of a phase share banks (8 of 4), unless the
       odd quads read their second chunk first (4 of 4 for each read)    */
    struct vec_t { const char *what; int stride, two, swap; uint64_t wf_reads, ideal_reads; };
    const vec_t vs[] = { { "16-byte reads at a 16-byte stride", 1, 0, 0, 4, 4 },
                         { "16-byte reads at a 32-byte stride", 2, 1, 0, 16, 8 },
                         { "16-byte reads at a 32-byte stride, odd quads swapped", 2, 1, 1, 8, 8 } };
    uint64_t r0 = 0, w0 = 0, i0 = 0;
    for (const vec_t &v : vs) {
        KVQ_CUDA_LAUNCH(k_bank_vec, 1, 32, 0, 0)(in, out, v.stride, v.two, v.swap);
        uint64_t r, wf, id;
        kvq_emu::bank_totals((const void *)k_bank_vec, &r, &wf, &id);
        /* the fill: 32 requests of consecutive words, 1 wavefront each  */
        const uint64_t dr = r - r0, dw = wf - w0, di = id - i0;
        const uint64_t n_reads = 1 + (uint64_t)v.two;
        CHECK(dr == 32 + n_reads && dw == 32 + v.wf_reads && di == 32 + v.ideal_reads,
              "banks, %s: %llu requests, %llu wavefronts, %llu ideal (want %llu, %llu, %llu)", v.what,
              (unsigned long long)dr, (unsigned long long)dw, (unsigned long long)di,
              (unsigned long long)(32 + n_reads), (unsigned long long)(32 + v.wf_reads),
              (unsigned long long)(32 + v.ideal_reads));
        r0 = r, w0 = wf, i0 = id;
    }
    kvq_emu::banks_count(false);
    printf("  banks: 4-way, broadcast, 16-byte phases and a swapped pair counted as modelled\n");
    cudaFree(in); cudaFree(out);
}

/* Run fn in a child that must exit 0 with no emulator report (fn checks,
   inside it, what the kernel wrote).                                    */
template <class F>
static void expect_clean(const char *what, F fn)
{
    int fds[2];
    if (pipe(fds)) { CHECK(0, "pipe"); return; }
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        _exit(fn() ? 0 : 1);
    }
    close(fds[1]);
    std::string err;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    /* (ASan's own notes on the fibers' stacks may come on stderr: only
       an emulator report counts)                                        */
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && err.find("kvq_emu") == std::string::npos,
          "%s: exit %d (1: wrong values), report \"%.300s\"", what,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, err.c_str());
}

/* Run fn in a child; expect the emulator's exit status and `want` in what
   it wrote to stderr.                                                    */
template <class F>
static void expect_report(const char *what, const char *want, F fn)
{
    int fds[2];
    if (pipe(fds)) { CHECK(0, "pipe"); return; }
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0);                               /* the misuse was not seen */
    }
    close(fds[1]);
    std::string err;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const bool stopped = WIFEXITED(status) && WEXITSTATUS(status) == 86;
    CHECK(stopped && err.find(want) != std::string::npos,
          "%s: exit %d, report \"%.200s\" (wanted \"%s\")", what,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, err.c_str(), want);
}

static void test_reports(void)
{
    int *d, *src;
    CU(cudaMalloc(&d, 1024 * 4));
    CU(cudaMalloc(&src, 16 * 4));
    CU(cudaMemset(src, 0, 16 * 4));
    expect_report("divergent shuffle", "divergent __shfl_sync",
                  [&] { KVQ_CUDA_LAUNCH(k_divergent_shfl, 1, 32, 0, 0)(d); });
    expect_report("barrier in divergent code", "different barriers",
                  [&] { KVQ_CUDA_LAUNCH(k_split_barrier, 1, 128, 0, 0)(d); });
    expect_report("a shuffle naming an exited lane", "has exited",
                  [&] { KVQ_CUDA_LAUNCH(k_exited_lane, 1, 32, 0, 0)(d); });
    expect_report("cp.async never waited for", "never waited for",
                  [&] { KVQ_CUDA_LAUNCH(k_never_waited, 1, 32, 0, 0)(src); });
    expect_report("cp.async into global memory", "outside the block's shared memory",
                  [&] { KVQ_CUDA_LAUNCH(k_cp_to_global, 1, 32, 0, 0)(d, src); });
    /* cp.async into bytes in flight: an error in every build            */
    expect_report("a cp.async into bytes the same thread's older group has in flight",
                  "is still in flight to it",
                  [&] { KVQ_CUDA_LAUNCH(k_cp_overlap, 1, 32, 0, 0)(src, d, 0); });
    expect_report("a cp.async into bytes another thread's copy has in flight",
                  "is still in flight to it",
                  [&] { KVQ_CUDA_LAUNCH(k_cp_overlap, 1, 32, 0, 0)(src, d, 1); });
    expect_clean("a stage refilled after its wait, and a copy beside bytes in flight", [&] {
        int h[16], *s16;
        for (int i = 0; i < 16; i++) h[i] = 50 + i;
        if (cudaMalloc(&s16, sizeof h) || cudaMemcpy(s16, h, sizeof h, cudaMemcpyHostToDevice)) return false;
        KVQ_CUDA_LAUNCH(k_cp_refill, 1, 32, 0, 0)(s16, d);
        int o[12];
        if (cudaGetLastError() || cudaMemcpy(o, d, sizeof o, cudaMemcpyDeviceToHost)) return false;
        bool ok = true;
        for (int i = 0; i < 4; i++) ok = ok && o[i] == 50 + i && o[4 + i] == 54 + i && o[8 + i] == 58 + i;
        return ok;
    });
    /* exchanges with disjoint masks that each complete: not divergence,
       in thread order and in a seeded random order (make test-cuda-emu
       runs the race build's test_emu with KVQ_EMU_SEED=1)                */
    expect_clean("exchanges with disjoint masks, then the whole warp", [&] {
        KVQ_CUDA_LAUNCH(k_disjoint, 1, 64, 0, 0)(d);
        int o[32 * 4];
        if (cudaGetLastError() || cudaMemcpy(o, d, sizeof o, cudaMemcpyDeviceToHost)) return false;
        bool ok = true;
        for (int l = 0; l < 32; l++) {
            const int v = 100 + (l % 2 == 0 ? l ^ 2 : l ^ 6), p = l ^ 1;
            const int w = 100 + (p % 2 == 0 ? p ^ 2 : p ^ 6);
            ok = ok && o[l * 4] == v && o[l * 4 + 1] == w && o[l * 4 + 2] == (l < 16);
        }
        return ok;
    });
    if (kvq_emu::race_checking()) {
        expect_report("a store into bytes a cp.async has in flight", "writes shared memory 'st' byte 8",
                      [&] { KVQ_CUDA_LAUNCH(k_store_in_flight, 1, 32, 0, 0)(src); });
        expect_report("a write-write race", "race on shared memory 'flag'",
                      [&] { KVQ_CUDA_LAUNCH(k_race, 1, 64, 0, 0)(d); });
        expect_report("an uninitialized shared read", "which no thread of the block has written",
                      [&] { KVQ_CUDA_LAUNCH(k_uninit, 1, 64, 0, 0)(d); });
        expect_report("a read of a cp.async in flight", "still in flight",
                      [&] { KVQ_CUDA_LAUNCH(k_in_flight, 1, 32, 0, 0)(src, d); });
        printf("  race build: the race, uninitialized-read and in-flight checks fire\n");
    }
    /* launch shapes and limits: errors, not reports                        */
    KVQ_CUDA_LAUNCH(k_barrier, 1, 2048, 0, 0)(d, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a 2048-thread block was launched");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError did not clear the error");
    KVQ_CUDA_LAUNCH(k_cp_async, 1, 32, 60 * 1024, 0)(src, d, false);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "60 KB of dynamic shared memory without the attribute");
    CU(cudaFuncSetAttribute((const void *)k_cp_async, cudaFuncAttributeMaxDynamicSharedMemorySize, 60 * 1024));
    KVQ_CUDA_LAUNCH(k_cp_async, 1, 32, 60 * 1024, 0)(src, d, false);
    CHECK(cudaGetLastError() == cudaSuccess, "60 KB refused after cudaFuncSetAttribute");
    /* host API                                                            */
    int host[16] = { 0 };
    CHECK(cudaMemcpy(host, src, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
          "cudaMemcpy HostToDevice into host memory");
    CHECK(cudaMemcpy(host, src, 65, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
          "cudaMemcpy past the end of an allocation");
    CHECK(cudaMemset(src + 8, 0, 64) == cudaErrorInvalidValue, "cudaMemset past the end of an allocation");
    CHECK(cudaFree(host) == cudaErrorInvalidValue, "cudaFree of host memory");
    CHECK(cudaFree(src + 1) == cudaErrorInvalidValue, "cudaFree inside an allocation");
    cudaFree(d); cudaFree(src);
}

/* Streams (kvq_emu.cpp Sec. 7.1): a created stream's launch runs only once
   something waits for it, so a fork without its join reads nothing yet. */
__global__ void k_store(int *p, int v) { if (threadIdx.x == 0) *p = v; }
static void test_streams(void)
{
    int *d = nullptr, h = 0;
    cudaStream_t side, blocking;
    cudaEvent_t fork, join;
    CHECK(cudaMalloc(&d, sizeof(int)) == cudaSuccess, "cudaMalloc");
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess &&
          cudaStreamCreate(&blocking) == cudaSuccess &&
          cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess &&
          cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess, "stream, events");
    cudaMemset(d, 0, sizeof(int));
    /* the fork-join kvq_cuda_attend_mma makes                              */
    cudaEventRecord(fork, 0);
    cudaStreamWaitEvent(side, fork, 0);
    KVQ_CUDA_LAUNCH(k_store, 1, 32, 0, side)(d, 7);
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 0, "a non-blocking stream's launch ran before anything waited for it (got %d)", h);
    cudaEventRecord(join, side);
    KVQ_CUDA_LAUNCH(k_store, 1, 32, 0, side)(d, 9);   /* after the join's record */
    cudaStreamWaitEvent(0, join, 0);
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 7, "the default stream waited for the join: want the launch before the record "
          "done, the one after it not (got %d)", h);
    cudaStreamSynchronize(side);
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 9, "cudaStreamSynchronize runs the rest (got %d)", h);
    /* a blocking stream's work precedes the default stream's next work  */
    KVQ_CUDA_LAUNCH(k_store, 1, 32, 0, blocking)(d, 11);
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 11, "a blocking stream's launch before a default-stream copy (got %d)", h);
    /* a wait enqueued on a created stream holds until that stream runs  */
    KVQ_CUDA_LAUNCH(k_store, 1, 32, 0, side)(d, 13);
    cudaEventRecord(fork, side);
    cudaStreamWaitEvent(blocking, fork, 0);
    KVQ_CUDA_LAUNCH(k_store, 1, 32, 0, blocking)(d, 15);
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaStreamSynchronize(side);
    int h2 = 0;
    cudaMemcpy(&h2, d, sizeof h2, cudaMemcpyDeviceToHost);
    CHECK(h == 15 && h2 == 15, "a wait on a created stream runs the waited stream first: "
          "got %d, then %d after syncing it (want 15, 15)", h, h2);
    cudaEventDestroy(fork); cudaEventDestroy(join);
    cudaStreamDestroy(side); cudaStreamDestroy(blocking);
    cudaFree(d);
}

/* cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (kvq_emu.h's model) on values
   worked out by hand from the PTX ISA's definition, one property each;
   test_gpu's fp8-cvt group proves the model equal to kvq's rounding on
   every pattern where a rounding happens.                              */
static void test_cvt_fp8(void)
{
    const float p9 = ldexpf(1.0f, -9), p16 = ldexpf(1.0f, -16);
    const struct { float x; int e5m2; unsigned want; const char *what; } cs[] = {
        { 1.0f, 0, 0x38, "E4M3 1.0 = 0.0111.000" },
        { 448.0f, 0, 0x7E, "E4M3 max 448" },
        { 463.0f, 0, 0x7E, "E4M3 463 rounds to 448" },
        { 464.0f, 0, 0x7E, "E4M3 464: the tie of 448 and 480 to the even 448" },
        { 470.0f, 0, 0x7E, "E4M3 470 rounds to 480, past MAX_NORM: 448" },
        { 1e30f, 0, 0x7E, "E4M3 1e30 saturates" },
        { -INFINITY, 0, 0xFE, "E4M3 -Inf saturates to -448" },
        { 17.0f, 0, 0x58, "E4M3 17: the tie of 16 and 18 to the even 16" },
        { 19.0f, 0, 0x5A, "E4M3 19: the tie of 18 and 20 to the even 20" },
        { p9, 0, 0x01, "E4M3 2^-9, the smallest subnormal" },
        { 0.5f * p9, 0, 0x00, "E4M3 2^-10: the tie of 0 and 2^-9 to 0" },
        { 1.5f * p9, 0, 0x02, "E4M3 1.5 2^-9: the tie of 1 and 2 (x 2^-9) to 2" },
        { -0.0f, 0, 0x80, "E4M3 -0 keeps its sign" },
        { 1e-40f, 0, 0x00, "E4M3 an fp32 subnormal: 0" },
        { 57344.0f, 1, 0x7B, "E5M2 max 57344" },
        { 61440.0f, 1, 0x7B, "E5M2 61440 (the tie of 57344 and 65536, to the even 65536): MAX_NORM" },
        { INFINITY, 1, 0x7B, "E5M2 +Inf saturates" },
        { p16, 1, 0x01, "E5M2 2^-16, the smallest subnormal" },
        { 3.0f * 0.5f * p16, 1, 0x02, "E5M2 1.5 2^-16: the tie to 2 2^-16" },
        { 0.5f * p16, 1, 0x00, "E5M2 2^-17: the tie to 0" },
        { 1.25f, 1, 0x3D, "E5M2 1.25 = 0.01111.01" },
        { 1.125f, 1, 0x3C, "E5M2 1.125: the tie of 1 and 1.25 to the even 1" },
    };
    for (const auto &c : cs) {
        const unsigned got = kvq_emu::cvt_rn_satfinite_f8(c.x, c.e5m2);
        CHECK(got == c.want, "cvt f8: %s: got 0x%02x, want 0x%02x", c.what, got, c.want);
    }
    CHECK(kvq_emu::cvt_rn_satfinite_f8(NAN, 0) == 0x7F && kvq_emu::cvt_rn_satfinite_f8(NAN, 1) == 0x7F,
          "cvt f8: NaN gives the canonical NaN 0x7F");
    CHECK(kvq_emu::cvt_rn_satfinite_f8x2(1.0f, -2.0f, 0) == ((0x38u << 8) | 0xC0u),
          "cvt f8x2: a's code in the upper byte, b's in the lower");
}

int main(void)
{
    printf("test_emu: the emulator's own semantics%s\n",
           kvq_emu::race_checking() ? " (race build)" : "");
    test_fp16();
    test_byte_perm();
    test_cvt_fp8();
    test_exchanges();
    test_mma();
    test_imma();
    test_reports();
    test_streams();
    if (kvq_emu::race_checking()) test_banks();
    return TEST_END("test_emu");
}
