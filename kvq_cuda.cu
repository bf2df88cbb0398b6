/* kvq_cuda.cu - GPU kernels that reproduce kvq.h: quantize+pack, fused paged
   decode attention over every kvq cache, an fp16 baseline, and compaction.

   kvq.h is the definition; this file must agree with it. Codes, scales and
   zeros are bit-identical to kvq.h's on the same fp16 inputs; attention
   outputs agree within the tolerances stated in tests/test_gpu.cu. What has
   and has not been run on a GPU is recorded in bench/RESULTS.md.

   USAGE
       nvcc -c kvq_cuda.cu -o kvq_cuda.o           (make cuda: sm_80 + sm_90)
       // in your .cu file:
       #define KVQ_IMPLEMENTATION   // in one host TU (kvq_cuda_export uses it)
       #include "kvq.h"
       #define KVQ_CUDA_DECLARE_ONLY
       #include "kvq_cuda.cu"       // types, helpers and the API; link kvq_cuda.o
   (Including it without KVQ_CUDA_DECLARE_ONLY compiles the kernels into
   that translation unit instead.)
   Build with nvcc -O3 -std=c++17 for sm_80 / sm_90. NEVER --use_fast_math:
   the codes depend on IEEE division (kvq_dev_div: an exact reciprocal
   and fma), subnormals and round-half-even (Sec. 1 below).

   CONTENTS
       0. Errors: how a launcher reports bad arguments and bad data
       1. Device mirrors of kvq.h Sec. 3-5 (fp16, group parameters, codes)
       2. Quantize + pack of an fp16 [T x D] matrix (kvq.h Sec. 6)
       2.1 Rotation before quantizing (kvq.h Sec. 6.1)
       2.2 The formats engines ship (kvq.h Sec. 4.1): quantize + pack
       3. The paged store: pages, streams, and what a stream may hold;
          the token layout of kvq.h Sec. 4.1's formats
       4. Fused decode attention (kvq.h Sec. 8 on the GPU; flash-decoding;
          the token layout on its slow path)
       5. Compaction: gather-clone-scatter of slots (kvq.h Sec. 11)
       6. Host: a kvq_cache exported to pages (for tests, benches, engines)
       7. Tensor-core fragment order: maps, permutation, decode, weight split
       8. Decode attention on the tensor cores (v5: sealed pages, merged
          with Sec. 4's kernel for the rest)

   0. ERRORS, kvq.h's rule: every host function that can fail returns a
   kvq_status (the codes of kvq.h; this file adds none) and, on failure,
   kvq_cuda_why() gives the reason in one readable line: the reason of
   the calling thread's most recent failing kvq_cuda call, "" before any.
     - Bad arguments (NULL, unsupported D/B/G, groups that do not divide, a
       workspace too small, size overflow) are caught on the host before
       any launch, with kvq.h's status for each (KVQ_ERR_NULL, _SIZE,
       _BITS, _GROUP, _CONFIG, _CAPACITY, _OVERFLOW); nothing is written.
     - A failing CUDA call returns KVQ_ERR_NOMEM (out of device memory) or
       KVQ_ERR_STATE (any other CUDA error), its name and CUDA's message
       in kvq_cuda_why().
     - Bad DATA is found on the device, and reading it back costs a
       host-device synchronization, so the launchers take `int *d_status`
       (device memory, one int, zeroed by the launcher: a memset for
       quantize and rotate, by the call's first kernel for attention,
       kvq_dev_status_reset, so any int will do): kernels record
       the kvq_status of the first problem (the smallest code wins, so the
       result does not depend on thread timing). kvq_cuda_status() reads
       it once the caller synchronizes anyway, as a status and a reason.
         quantize: NaN/Inf -> KVQ_ERR_NONFINITE, fp16 overflow of a scale or
           zero -> KVQ_ERR_RANGE (kvq.h's policy). A separate validation pass
           runs first and the quantize pass writes NOTHING if it found a
           problem, exactly like kvq_quantize_matrix.
         attention: a non-finite q or a stream with no live token ->
           KVQ_ERR_NONFINITE / KVQ_ERR_STATE. The launch still writes every
           other (stream, head) row; the rows it could not compute are
           quiet NaN, so that one bad stream in a batch of many is found
           (and cannot pass for a result) without a status per row.     */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include <mutex>

#include "kvq.h"   /* types, layouts, status codes */

/* Three hooks for a CPU emulator, which defines them before this point
   (tests/emu/kvq_emu.h: `make test-cuda-emu` runs these kernels on the
   CPU): a kernel launch, a static shared array and the dynamic one. Under
   nvcc they are the plain CUDA forms.                                     */
#ifndef KVQ_CUDA_LAUNCH
#define KVQ_CUDA_LAUNCH(fn, grid, block, smem, stream) fn<<<grid, block, smem, stream>>>
#define KVQ_CUDA_SHARED(T, name, dims) __shared__ T name dims
#define KVQ_CUDA_SHARED_DYNAMIC(T, name) extern __shared__ __align__(16) T name[]
#endif

/* The packed format is shared byte for byte with the CPU: pin the sizes.   */
static_assert(sizeof(kvq_sz) == 4, "kvq_sz must be 4 bytes (fp16 scale, fp16 zero)");
static_assert(offsetof(kvq_sz, scale) == 0 && offsetof(kvq_sz, zero) == 2,
              "kvq_sz field order is part of the format");
static_assert(sizeof(kvq_f16) == 2, "kvq_f16 holds raw IEEE binary16 bits");
static_assert(sizeof(uint32_t) == 4, "packed words are 32 bits");

/* ======================================================================== */
/* 0. errors                                                                */
/* ======================================================================== */
/* One buffer per host thread for every translation unit (an inline
   variable), so the inline host functions of Sec. 7 set it too.          */
inline thread_local char kvq_cuda__why[200];

/* The reason of the calling thread's most recent failure ("" if none).   */
inline const char *kvq_cuda_why(void) { return kvq_cuda__why; }

/* Record why a call failed; returns st.                                   */
inline kvq_status kvq_cuda__fail(kvq_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kvq_cuda__why, sizeof kvq_cuda__why, fmt, ap);
    va_end(ap);
    return st;
}

#ifndef KVQ_CUDA_DECLARE_ONLY   /* the implementation: kernels and launchers */
/* Check a CUDA call in host code; on failure record where and return
   KVQ_ERR_NOMEM (device memory) or KVQ_ERR_STATE.                        */
#define KVQ_CUDA_CHECK(call)                                                  \
    do {                                                                      \
        cudaError_t kvq_err_ = (call);                                        \
        if (kvq_err_ != cudaSuccess)                                          \
            return kvq_cuda__fail(kvq_err_ == cudaErrorMemoryAllocation       \
                                      ? KVQ_ERR_NOMEM : KVQ_ERR_STATE,        \
                                  "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
                                  cudaGetErrorString(kvq_err_));              \
    } while (0)

/* The one reader of a launch's device status word: waits for `stream`,
   reads *d_status and returns it as a status, with a reason naming the
   problem in kvq_cuda_why() when it is not KVQ_OK. KVQ_ERR_NULL for a
   NULL d_status; a CUDA failure as KVQ_CUDA_CHECK returns it.            */
extern "C" kvq_status kvq_cuda_status(const int *d_status, cudaStream_t stream)
{
    if (!d_status) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_status: d_status is NULL");
    int h = 0;
    KVQ_CUDA_CHECK(cudaMemcpyAsync(&h, d_status, sizeof h, cudaMemcpyDeviceToHost, stream));
    KVQ_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (h == KVQ_OK) return KVQ_OK;
    if (h < 0 || h >= KVQ_STATUS_COUNT)
        return kvq_cuda__fail(KVQ_ERR_STATE, "kvq_cuda_status: the status word holds %d, not a "
                              "kvq_status (not written by a kvq_cuda launch?)", h);
    const kvq_status st = (kvq_status)h;
    return kvq_cuda__fail(st, "kvq_cuda_status: a kernel found %s: %s", kvq_status_str(st),
                          st == KVQ_ERR_NONFINITE ? "a NaN or Inf input (attention: that "
                          "(stream, head) row is NaN; rotation: that row is not written)"
                          : st == KVQ_ERR_RANGE ? "a group whose fp16 scale or zero overflows, or "
                          "(kvq_cuda_rotate_f16) a rotated element beyond KVQ_MAX_ABS_INPUT"
                          : st == KVQ_ERR_STATE ? "a stream with no live token (its rows are NaN)"
                          : "see the launcher's documentation");
}

/* Record a data problem: the smallest kvq_status code wins, so which thread
   gets there first does not matter (NONFINITE < RANGE < STATE, as on the
   CPU, where the finiteness pass runs before the range pass).              */
static __device__ void kvq_dev_report(int *status, int code)
{
    int old = *(volatile int *)status;
    while (old == 0 || code < old) {
        int seen = atomicCAS(status, old, code);
        if (seen == old) break;
        old = seen;
    }
}

/* The attention calls' status word without a memset (issue 46): their
   only reporter is the combine, their last kernel, so the first kernel
   that follows the query's rotation (which reports nothing there) zeroes
   the word, one thread of its first CTA. Stream order puts the combine's
   reports after it, and the previous call's reports before it, so each
   call's word holds that call's status alone, a garbage word included.
   NULL: nothing (the kernel is not the call's first).                    */
static __device__ __forceinline__ void kvq_dev_status_reset(int *status)
{
    if (status && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *status = 0;
}

#endif /* KVQ_CUDA_DECLARE_ONLY */

/* ======================================================================== */
/* 1. device mirrors of kvq.h                                               */
/* ======================================================================== */
/* Each function below is the GPU twin of the kvq.h function named in its
   comment, operation for operation. Why the results are bit-identical:
     - fp16 -> fp32 is exact, and __float2half_rn rounds to nearest even,
       which is kvq_f32_to_f16 (both overflow to Inf at 65520).
     - fp32 +, -, / are IEEE correctly rounded in CUDA without fast-math
       (nvcc's defaults -prec-div=true -ftz=false), as in C on the host.
       The quantizer's divisions are kvq_dev_div: a reciprocal a group
       and a corrected product, the same float as the IEEE division.
     - rintf is round-half-to-even on both sides.
     - No expression here can be contracted into a different fma: the only
       mul+add is c * s + z in dequantization, where c * s is exact (kvq.h
       Sec. 4), so fma and mul-then-add give the same float.             */
static __host__ __device__ __forceinline__ float kvq_dev_f16(kvq_f16 h)
{
    return __half2float(__ushort_as_half(h));
}
static __device__ __forceinline__ kvq_f16 kvq_dev_to_f16(float x)
{
    return __half_as_ushort(__float2half_rn(x));
}
static __device__ __forceinline__ bool kvq_dev_finite(float x) { return x - x == 0.0f; }

/* kvq_sz_affine: x' = c * a + b from one group's stored parameters.        */
static __host__ __device__ __forceinline__ void kvq_dev_affine(kvq_sz sz,
                                                               kvq_zero_mode mode,
                                                               float *a, float *b)
{
    const float s = kvq_dev_f16(sz.scale), z = kvq_dev_f16(sz.zero);
    *a = s;
    *b = (mode == KVQ_ZERO_INT) ? -z * s : z;   /* exact: 12 x 11 bits */
}

/* RN(a / b), the IEEE quotient, from r = RN(1 / b) (one division a
   group, not one a value): q = RN(a r) is within 1.5 ulp of a / b, its
   residual a - q b is exact in one fma, and q + (a - q b) r rounded once
   is a / b correctly rounded (Markstein's correction: Muller et al.,
   "Handbook of Floating-Point Arithmetic", 2nd ed., Sec. 4.7). The
   quantizer's quotients neither overflow nor underflow (|a| < 2^18,
   2^-24 <= b <= 65504, a a multiple of 2^-24), where the theorem
   holds; test_gpu's division check holds it to IEEE division bit for
   bit (a zero's sign aside, which no code depends on) over every fp16
   x and every fp16 scale, ties k + 1/2 and their neighbours, and the
   parameters' quotients. Why: CUDA's IEEE division branches to a slow
   path for a zero or tiny numerator, x = z (the group's minimum), once
   a group; a profile put 37% of the quantizer's instructions there.   */
static __host__ __device__ __forceinline__ float kvq_dev_div(float a, float b, float r)
{
    const float q = a * r;
    const float e = fmaf(-q, b, a);              /* a - q b, exact        */
    return fmaf(e, r, q);
}

/* kvq__group_params: the stored (s, z) of a group with min mn and max mx.
   Returns KVQ_OK or KVQ_ERR_RANGE (a scale or zero overflows fp16).       */
static __device__ int kvq_dev_group_params(float mn, float mx, int bits,
                                           kvq_zero_mode mode, kvq_sz *out)
{
    const float n_levels = (float)((1u << bits) - 1u);
    const kvq_f16 s16 = kvq_dev_to_f16(kvq_dev_div(mx - mn, n_levels, 1.0f / n_levels));
    const float s = kvq_dev_f16(s16);
    if (!kvq_dev_finite(s)) return KVQ_ERR_RANGE;
    if (mode == KVQ_ZERO_FLOAT) {
        const kvq_f16 z16 = kvq_dev_to_f16(mn);
        if (!kvq_dev_finite(kvq_dev_f16(z16))) return KVQ_ERR_RANGE;
        out->scale = s16;
        out->zero = z16;
        return KVQ_OK;
    }
    if (s == 0.0f) {                 /* constant group: c = 1 or 0 (Sec. 4) */
        const kvq_f16 a16 = kvq_dev_to_f16(fabsf(mn));
        if (!kvq_dev_finite(kvq_dev_f16(a16))) return KVQ_ERR_RANGE;
        out->scale = a16;
        out->zero = kvq_dev_to_f16(mn < 0.0f ? 1.0f : 0.0f);
        return KVQ_OK;
    }
    float zp = rintf(kvq_dev_div(-mn, s, 1.0f / s)) + 0.0f;   /* + 0: -0 becomes +0 */
    zp = fminf(fmaxf(zp, -2048.0f), 2048.0f);
    out->scale = s16;
    out->zero = kvq_dev_to_f16(zp);          /* an integer <= 2048: exact  */
    return KVQ_OK;
}

/* kvq__code: the code of x under stored parameters. Float zero: clamp
   (x - z) / s to [0, N], then RNE. Integer zero point: x / s clamped to
   [-zp, N - zp], rounded (RNE), then zp added (an integer: exact).
   r = 1.0f / s, the group's (kvq_dev_div).                               */
static __device__ __forceinline__ uint32_t kvq_dev_code(float x, float s, float r, float z,
                                                        float n_levels,
                                                        kvq_zero_mode mode)
{
    if (s == 0.0f) return 0;
    if (mode == KVQ_ZERO_INT) {
        const float v = fminf(fmaxf(kvq_dev_div(x, s, r), -z), n_levels - z);
        return (uint32_t)(rintf(v) + z);
    }
    const float v = fminf(fmaxf(kvq_dev_div(x - z, s, r), 0.0f), n_levels);
    return (uint32_t)rintf(v);
}

/* kvq__get_code: code i of a group whose packed words start at `words`:
   word i / (32/B), bits (i % (32/B)) * B, least significant first.       */
static __host__ __device__ __forceinline__ uint32_t kvq_dev_get_code(const uint32_t *words,
                                                                     uint32_t i, int bits)
{
    const unsigned lb = (bits > 1) + (bits > 2) + (bits > 4);   /* log2(B) */
    return (words[i >> (5u - lb)] >> ((i & ((32u >> lb) - 1u)) << lb)) &
           ((1u << bits) - 1u);
}

#ifndef KVQ_CUDA_DECLARE_ONLY   /* the implementation: kernels and launchers */
/* ======================================================================== */
/* 2. quantize + pack (kvq.h Sec. 6, kvq_quantize_matrix)                   */
/* ======================================================================== */
/* X (T, D) fp16, row-major -> words, sz in kvq.h's matrix layout:
     words: [units][groups_per_unit][words_per_group],  sz: [units][groups_per_unit]
   per-token: unit = 1 token, D/G groups of G consecutive channels.
   per-channel: unit = G tokens, D groups (one per channel) along tokens.
   (The value of an fp16 input as a float is exact, so "the same inputs" for
   kvq_quantize_matrix are the fp16 values converted to float.)

   One thread per group. A group's G values are read twice, once for
   min/max and once for the codes: the second read hits L1/L2 (a group is
   at most 512 bytes), which is cheaper than holding G floats in registers.
   Per-channel: neighbouring threads are neighbouring channels, so every
   row read is coalesced across the warp. Per-token: neighbouring threads
   own neighbouring groups of one token, so the warp reads contiguous rows.
   Optional `unit_dst` (units entries) sends unit u to unit slot
   unit_dst[u] of the output, which is how a flushed residual lands in a
   page of the paged store (Sec. 3) without an extra copy.                 */
struct kvq_dev_qshape {
    size_t T, D, G;
    int bits;
    kvq_axis axis;
    kvq_zero_mode mode;
    kvq_geometry geom;
    size_t units, n_groups;
};

/* First element of group `gi` and the stride between its elements.       */
static __device__ __forceinline__ const __half *kvq_dev_group_start(const __half *X,
                                                                    const kvq_dev_qshape &q,
                                                                    size_t gi, size_t *stride)
{
    const size_t u = gi / q.geom.groups_per_unit, g = gi % q.geom.groups_per_unit;
    if (q.axis == KVQ_PER_TOKEN) { *stride = 1; return X + u * q.D + g * q.G; }
    *stride = q.D;
    return X + u * q.G * q.D + g;
}

/* kvq__minmax over one group, with + 0 at the end so that -0/+0 never leak
   into the stored zero. min and max are exact and, after the + 0, do not
   depend on the order the elements are visited in (a NaN is reported,
   never stored), so a vectorized walk gives kvq.h's values.
   Contiguous groups (per-token, G % 8 == 0, 16-byte aligned) are read 8
   halves per load; strided ones (per-channel) one half per row, which the
   warp's neighbouring channels turn into coalesced row reads.           */
static __device__ __forceinline__ bool kvq_dev_vec8(const __half *x, size_t n, size_t stride)
{
    return stride == 1 && n % 8 == 0 && ((uintptr_t)x & 15u) == 0;
}
/* 8 fp16 values (16 bytes) as floats                                    */
static __device__ __forceinline__ void kvq_dev_unpack8(const uint4 &r, float (&f)[8])
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&r);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 t = __half22float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
static __device__ __forceinline__ void kvq_dev_load8(const __half *x, float (&f)[8])
{
    kvq_dev_unpack8(__ldg(reinterpret_cast<const uint4 *>(x)), f);
}
template <int FN = 0>    /* FN: n fixed at compile time (the loops unroll), or 0 */
static __device__ void kvq_dev_minmax(const __half *x, size_t n, size_t stride,
                                      float *mn, float *mx, bool *finite)
{
    if (FN) n = FN;
    float lo = __half2float(x[0]), hi = lo;
    bool ok = true;
    if (kvq_dev_vec8(x, n, stride)) {
#pragma unroll (FN ? FN / 8 : 1)
        for (size_t i = 0; i < n; i += 8) {
            float f[8];
            kvq_dev_load8(x + i, f);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                ok = ok && kvq_dev_finite(f[k]);
                lo = fminf(lo, f[k]);
                hi = fmaxf(hi, f[k]);
            }
        }
    } else {
#pragma unroll (FN ? FN : 8)
        for (size_t i = 0; i < n; i++) {
            const float t = __half2float(x[i * stride]);
            ok = ok && kvq_dev_finite(t);
            lo = fminf(lo, t);
            hi = fmaxf(hi, t);
        }
    }
    *mn = lo + 0.0f;
    *mx = hi + 0.0f;
    *finite = ok && kvq_dev_finite(lo) && kvq_dev_finite(hi);
}

/* Pass 1: validation only. Writes nothing but *status.                    */
__global__ void kvq_quantize_check_kernel(const __half *__restrict__ X, kvq_dev_qshape q,
                                          int *status)
{
    const size_t stride_all = (size_t)gridDim.x * blockDim.x;
    for (size_t gi = (size_t)blockIdx.x * blockDim.x + threadIdx.x; gi < q.n_groups;
         gi += stride_all) {
        size_t stride;
        const __half *x = kvq_dev_group_start(X, q, gi, &stride);
        float mn, mx;
        bool finite;
        kvq_sz p;
        kvq_dev_minmax(x, q.G, stride, &mn, &mx, &finite);
        if (!finite) { kvq_dev_report(status, KVQ_ERR_NONFINITE); continue; }
        if (kvq_dev_group_params(mn, mx, q.bits, q.mode, &p) != KVQ_OK)
            kvq_dev_report(status, KVQ_ERR_RANGE);
    }
}

/* One group's step of kvq_quantize_matrix: the G values x[0], x[stride],
   ... -> its stored (s, z), returned, and its codes packed into w (a
   group's words: global memory here, shared in Sec. 7's sealing quantize).
   FB, FG: 0, 0 for any shape; or B and G fixed at compile time, which turns
   every loop below into straight-line code (no branch per element on the
   group's end or the word's), with the same operations in the same order,
   hence the same bits (test_gpu checks it). The group must be valid (pass
   1 below found no problem).                                             */
template <int FB, int FG>
static __device__ __forceinline__ kvq_sz kvq_dev_quantize_group(const __half *x, size_t stride,
                                                                size_t G_run, int bits_run,
                                                                kvq_zero_mode mode, uint32_t *w)
{
    const int bits = FB ? FB : bits_run;
    const size_t G = FG ? (size_t)FG : G_run;
    const float n_levels = (float)((1u << bits) - 1u);
    const unsigned per = 32u / (unsigned)bits;             /* codes per word */
    float mn, mx;
    bool finite;
    kvq_sz p;
    kvq_dev_minmax<FG>(x, G, stride, &mn, &mx, &finite);
    kvq_dev_group_params(mn, mx, bits, mode, &p);          /* checked in pass 1 */
    const float s = kvq_dev_f16(p.scale), z = kvq_dev_f16(p.zero), r = 1.0f / s;
    /* codes, packed B bits at a time, least significant first            */
    uint32_t word = 0;
    unsigned at = 0;                         /* code index inside `word`  */
    size_t wi = 0;
    const bool vec = kvq_dev_vec8(x, G, stride);
#pragma unroll (FG ? FG / 8 : 1)
    for (size_t e0 = 0; e0 < G; e0 += 8) {
        float f[8];
        if (vec) kvq_dev_load8(x + e0, f);
        else
#pragma unroll
            for (int k = 0; k < 8; k++)
                f[k] = (e0 + k < G) ? __half2float(x[(e0 + k) * stride]) : 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (e0 + k >= G) break;
            word |= kvq_dev_code(f[k], s, r, z, n_levels, mode) << (at * (unsigned)bits);
            if (++at == per) { w[wi++] = word; word = 0; at = 0; }
        }
    }
    if (at) w[wi] = word;                    /* ragged tail: high bits zero */
    return p;
}

/* Pass 2: parameters, codes, packing. Does nothing if pass 1 (or an earlier
   call on the same status word) found a problem. kvq_cuda_quantize runs
   the streaming kernels below where they apply; of the rest, the fixed
   kernel (kvq_dev_quantize_group's FB, FG) at G = 32 with B = 2 or 4,
   and <0, 0> for every other shape.                                      */
template <int FB, int FG>
__global__ void kvq_quantize_kernel(const __half *__restrict__ X, kvq_dev_qshape q,
                                    const int32_t *__restrict__ unit_dst,
                                    uint32_t *__restrict__ words, kvq_sz *__restrict__ sz,
                                    const int *status)
{
    if (status && *(volatile const int *)status != 0) return;
    const size_t stride_all = (size_t)gridDim.x * blockDim.x;
    for (size_t gi = (size_t)blockIdx.x * blockDim.x + threadIdx.x; gi < q.n_groups;
         gi += stride_all) {
        size_t stride;
        const __half *x = kvq_dev_group_start(X, q, gi, &stride);
        const size_t u = gi / q.geom.groups_per_unit, g = gi % q.geom.groups_per_unit;
        const size_t out_unit = unit_dst ? (size_t)unit_dst[u] : u;
        const size_t og = out_unit * q.geom.groups_per_unit + g;
        sz[og] = kvq_dev_quantize_group<FB, FG>(x, stride, q.G, q.bits, q.mode,
                                                words + og * q.geom.words_per_group);
    }
}

/* -- the streaming quantize: B 2 or 4, G 32, 64 or 128 ----------------------
   The kernel above gives a thread a whole group and walks it twice; per
   channel that is a column walk of G rows, one 2-byte load per row per
   thread, with at most one load in flight: an H100 measured it at 17-31%
   of copy bandwidth. These kernels are built to be bound by memory:
     - every load is 16 bytes (8 fp16 values), and a thread issues all of
       its loads before it uses one: 4-16 loads (64-256 bytes) in flight
       per thread, the values kept in registers for the codes (one read);
     - per token, a thread takes a span of E = 128 / B values of a row
       (64 at B = 2, 32 at B = 4): one group or two, or a part of a group
       whose other parts sit in the neighbouring lanes (min and max by
       shuffles); its E codes are exactly four words, one 16-byte store;
     - per channel, a thread takes 8 channels x 32 / B rows, the rows of
       one code word per channel, and the G / (32 / B) lanes beside it the
       group's other rows (min and max by shuffles): no column walk, and
       each of its 8 words is one of the group's words in kvq.h's order
       (the group's lanes write consecutive words: 8-64 bytes a run);
     - enough threads: the grid is the whole matrix (capped at 16 CTAs
       per SM, the loop strides over the rest).
   Little's law: at ~3 TB/s and ~600-800 ns of DRAM latency a GPU must
   keep ~1.8-2.4 MB in flight, ~14-18 KB per SM of an H100's 132. With
   two items in flight a thread (the kernel below), ptxas (sm_90) gives
   the writing kernels 60-100 registers per token and 118-182 per
   channel, no spill (one item: 46-64 and 80-120): an SM holds 512-1,024
   and 256-512 of their threads, each with two items' loads out, so per
   token 512 x 2 x 128 bytes (B = 2) or 1,024 x 2 x 64 (B = 4) = 128 KB,
   per channel 256 x 2 x 256 or 512 x 2 x 128 = 128 KB: about what one
   item at twice the threads had, ~8x the need, now with each thread's
   arithmetic under its next loads (whether that is faster is a GPU's to
   say: not timed). The
   arithmetic per value (a conversion, a min and a max, the code's
   subtraction, a multiply and two fma for the division (kvq_dev_div,
   no slow path), clamp, rint, shift and or: about 15
   instructions, a warp doing 32 values) is ~60-70% of an H100's issue
   slots at copy rate, so memory, not issue, is the bound.
   WRITE = false is the validation pass (validate = 1): the same reads,
   every value's exponent bits checked for NaN/Inf and each group's
   parameters for fp16 overflow, nothing written but *status. Kept as its
   own read-only pass so that a bad value anywhere writes nothing (the
   contract); the validated call then reads the input twice and writes
   the codes once, so its bound is about 50% of copy (trusted: ~100%).
   The bytes are kvq_quantize_matrix's: min and max are exact and order
   free (+ 0 at the end, as kvq_dev_minmax), the parameters and codes are
   kvq_dev_group_params and kvq_dev_code, the words packed least
   significant code first.                                               */
/* true if none of the 8 fp16 values of r is NaN or Inf (exponent all ones) */
static __device__ __forceinline__ bool kvq_dev_finite8(const uint4 &r)
{
    const uint32_t w[4] = { r.x, r.y, r.z, r.w };
    bool ok = true;
#pragma unroll
    for (int i = 0; i < 4; i++)
        ok = ok && (w[i] & 0x7c00u) != 0x7c00u && (w[i] & 0x7c000000u) != 0x7c000000u;
    return ok;
}
/* min and max (and finiteness) across the `lanes` neighbouring lanes of
   one group (a power of two, aligned in the warp; 1: none)               */
static __device__ __forceinline__ void kvq_dev_group_lanes(float *lo, float *hi, bool *ok, int lanes)
{
    for (int m = 1; m < lanes; m <<= 1) {
        *lo = fminf(*lo, __shfl_xor_sync(0xffffffffu, *lo, m));
        *hi = fmaxf(*hi, __shfl_xor_sync(0xffffffffu, *hi, m));
        *ok = __shfl_xor_sync(0xffffffffu, (int)*ok, m) != 0 && *ok;
    }
}
/* One group's ending, shared by both layouts: WRITE = false reports a bad
   group (its first lane only); WRITE = true computes its (s, z) into *p,
   stored by the caller.                                                  */
template <bool WRITE>
static __device__ __forceinline__ void kvq_dev_group_end(float lo, float hi, bool ok, int bits,
                                                         kvq_zero_mode mode, bool reporter,
                                                         int *status, kvq_sz *p)
{
    if (!WRITE) {
        if (reporter && !ok) kvq_dev_report(status, KVQ_ERR_NONFINITE);
        else if (reporter && kvq_dev_group_params(lo + 0.0f, hi + 0.0f, bits, mode, p) != KVQ_OK)
            kvq_dev_report(status, KVQ_ERR_RANGE);
        return;
    }
    kvq_dev_group_params(lo + 0.0f, hi + 0.0f, bits, mode, p);   /* checked in pass 1 */
}

/* Per token: span t of the (T, D) matrix seen as T D / E spans of E
   consecutive values (D a multiple of E, so a span lies in one token and
   its groups in it: G | E or E | G). Called by every lane of a warp at
   once (the shuffles); a lane past the end passes live = false.          */
template <int B>        /* span t's E = 128 / B values: V = 16 / B loads  */
static __device__ __forceinline__ void kvq_dev_span_load(const __half *X, size_t t, bool live,
                                                         uint4 (&raw)[16 / B])
{
#pragma unroll
    for (int v = 0; v < 16 / B; v++)               /* all loads in flight   */
        raw[v] = live ? __ldcs(reinterpret_cast<const uint4 *>(X + t * (128 / B)) + v) : make_uint4(0, 0, 0, 0);
}
template <int B, int G, bool WRITE>
static __device__ __forceinline__ void kvq_dev_span(const uint4 (&raw)[16 / B] /* (E) fp16 */,
                                                    size_t D, size_t t, bool live,
                                                    kvq_zero_mode mode, const int32_t *unit_dst,
                                                    uint32_t *words, kvq_sz *sz, int *status)
{
    constexpr int E = 128 / B, V = E / 8, PER = 32 / B;
    constexpr int EG = G < E ? G : E, NG = E / EG, LANES = G > E ? G / E : 1;
    const float n_levels = (float)((1u << B) - 1u);
    float lo[NG], hi[NG];
    bool ok[NG];
#pragma unroll
    for (int g = 0; g < NG; g++) {
        lo[g] = INFINITY; hi[g] = -INFINITY; ok[g] = true;
#pragma unroll
        for (int v = g * (EG / 8); v < (g + 1) * (EG / 8); v++) {
            float f[8];
            kvq_dev_unpack8(raw[v], f);
            if (!WRITE) ok[g] = ok[g] && kvq_dev_finite8(raw[v]);
#pragma unroll
            for (int k = 0; k < 8; k++) { lo[g] = fminf(lo[g], f[k]); hi[g] = fmaxf(hi[g], f[k]); }
        }
    }
    if (LANES > 1) kvq_dev_group_lanes(&lo[0], &hi[0], &ok[0], LANES);
    const size_t token = t / (D / E), at = (t % (D / E)) * E;     /* first channel */
    const bool reporter = live && (LANES == 1 || t % LANES == 0);
    kvq_sz p[NG];
#pragma unroll
    for (int g = 0; g < NG; g++) kvq_dev_group_end<WRITE>(lo[g], hi[g], ok[g], B, mode, reporter, status, &p[g]);
    if (!WRITE || !live) return;
    const size_t out = unit_dst ? (size_t)unit_dst[token] : token;
    uint32_t w[4] = { 0u, 0u, 0u, 0u };            /* E codes = 4 words      */
#pragma unroll
    for (int v = 0; v < V; v++) {
        const int g = v / (EG / 8);
        const float s = kvq_dev_f16(p[g].scale), z = kvq_dev_f16(p[g].zero), r = 1.0f / s;
        float f[8];
        kvq_dev_unpack8(raw[v], f);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int e = 8 * v + k;
            w[e / PER] |= kvq_dev_code(f[k], s, r, z, n_levels, mode) << ((e % PER) * B);
        }
    }
    *reinterpret_cast<uint4 *>(words + out * (D * B / 32) + at * B / 32) = make_uint4(w[0], w[1], w[2], w[3]);
#pragma unroll
    for (int g = 0; g < NG; g++)
        if (reporter) sz[out * (D / G) + at / G + g] = p[g];
}

/* Per channel: item t of unit u's (D / 8) x R items, R = G / (32 / B)
   lanes a group: 8 channels (8 cx ..) of the PER = 32 / B rows
   u G + ry PER .. of the group's rows, ry = t % R. The group's R lanes
   are neighbours (R divides 32). Every lane of a warp calls it at once. */
template <int B, int G>  /* item t's PER = 32 / B rows of 8 channels      */
static __device__ __forceinline__ void kvq_dev_columns_load(const __half *X, size_t D, size_t t,
                                                            bool live, uint4 (&raw)[32 / B])
{
    constexpr int PER = 32 / B, R = G / PER;
    const size_t ry = t % R, cx = (t / R) % (D / 8), u = t / R / (D / 8);
    const __half *x = X + (u * G + ry * PER) * D + 8 * cx;
#pragma unroll
    for (int k = 0; k < PER; k++)                  /* all loads in flight    */
        raw[k] = live ? __ldcs(reinterpret_cast<const uint4 *>(x + k * D)) : make_uint4(0, 0, 0, 0);
}
template <int B, int G, bool WRITE>
static __device__ __forceinline__ void kvq_dev_columns(const uint4 (&raw)[32 / B] /* (PER rows, 8 channels) */,
                                                       size_t D, size_t t, bool live,
                                                       kvq_zero_mode mode, const int32_t *unit_dst,
                                                       uint32_t *words, kvq_sz *sz, int *status)
{
    constexpr int PER = 32 / B, R = G / PER;
    const float n_levels = (float)((1u << B) - 1u);
    const size_t ry = t % R, cx = (t / R) % (D / 8), u = t / R / (D / 8);
    float lo[8], hi[8];
    bool ok = true;
#pragma unroll
    for (int j = 0; j < 8; j++) { lo[j] = INFINITY; hi[j] = -INFINITY; }
#pragma unroll
    for (int k = 0; k < PER; k++) {
        float f[8];
        kvq_dev_unpack8(raw[k], f);
        if (!WRITE) ok = ok && kvq_dev_finite8(raw[k]);
#pragma unroll
        for (int j = 0; j < 8; j++) { lo[j] = fminf(lo[j], f[j]); hi[j] = fmaxf(hi[j], f[j]); }
    }
    bool ok_j[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {                  /* each channel's group   */
        ok_j[j] = ok;
        kvq_dev_group_lanes(&lo[j], &hi[j], &ok_j[j], R);
    }
    const bool reporter = live && ry == 0;
    kvq_sz p[8];
#pragma unroll
    for (int j = 0; j < 8; j++) kvq_dev_group_end<WRITE>(lo[j], hi[j], ok_j[j], B, mode, reporter, status, &p[j]);
    if (!WRITE || !live) return;
    const size_t out = unit_dst ? (size_t)unit_dst[u] : u;
    uint32_t *w = words + (out * D + 8 * cx) * R + ry;  /* channel j: w[j R] */
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float s = kvq_dev_f16(p[j].scale), z = kvq_dev_f16(p[j].zero), r = 1.0f / s;
        uint32_t word = 0;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const __half2 h2 = reinterpret_cast<const __half2 *>(&raw[k])[j / 2];
            const float f = (j % 2) ? __half22float2(h2).y : __half22float2(h2).x;
            word |= kvq_dev_code(f, s, r, z, n_levels, mode) << (k * B);
        }
        w[j * R] = word;
        if (reporter) sz[out * D + 8 * cx + j] = p[j];
    }
}

/* The grid's warps stride over the items together, whole warps at a time
   (the shuffles need every lane); WRITE: does nothing if pass 1 (or an
   earlier call on the same status word) found a problem. Two items in
   flight a thread (issue 46): the next item's loads are issued before
   this one's codes are computed, so memory and arithmetic overlap within
   a thread, not only across the SM's threads (the launcher's grid gives
   a thread at least two items where the matrix has them).             */
template <int B, int G, bool WRITE, bool PER_TOKEN>
__global__ void __launch_bounds__(256) kvq_quantize_stream_kernel(const __half *__restrict__ X,
                                                                  size_t D, size_t n_items,
                                                                  kvq_zero_mode mode,
                                                                  const int32_t *__restrict__ unit_dst,
                                                                  uint32_t *__restrict__ words,
                                                                  kvq_sz *__restrict__ sz, int *status)
{
    if (WRITE && status && *(volatile const int *)status != 0) return;
    constexpr int NR = PER_TOKEN ? 16 / B : 32 / B;     /* 16-byte loads an item */
    const size_t lane = threadIdx.x % 32, step = (size_t)gridDim.x * blockDim.x;
    size_t base = (size_t)blockIdx.x * blockDim.x + threadIdx.x - lane;
    uint4 cur[NR], next[NR];
    if constexpr (PER_TOKEN) kvq_dev_span_load<B>(X, base + lane, base + lane < n_items, cur);
    else kvq_dev_columns_load<B, G>(X, D, base + lane, base + lane < n_items, cur);
    for (; base < n_items; base += step) {
        const size_t t = base + lane, tn = t + step;
        if constexpr (PER_TOKEN) kvq_dev_span_load<B>(X, tn, tn < n_items, next);   /* in flight */
        else kvq_dev_columns_load<B, G>(X, D, tn, tn < n_items, next);
        if constexpr (PER_TOKEN) kvq_dev_span<B, G, WRITE>(cur, D, t, t < n_items, mode, unit_dst, words, sz, status);
        else kvq_dev_columns<B, G, WRITE>(cur, D, t, t < n_items, mode, unit_dst, words, sz, status);
#pragma unroll
        for (int i = 0; i < NR; i++) cur[i] = next[i];
    }
}

/* Argument checks shared by the quantize launchers; fills the shape.      */
static kvq_status kvq_cuda__qshape(const void *X, const void *words, const void *sz,
                                    size_t T, size_t D, int bits, size_t G,
                                    kvq_axis axis, kvq_zero_mode mode, kvq_dev_qshape *q)
{
    kvq_layout L;
    kvq_status st;
    if (!X || !words || !sz) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_quantize: NULL pointer");
    if (mode != KVQ_ZERO_FLOAT && mode != KVQ_ZERO_INT)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_quantize: zero mode %d unknown", (int)mode);
    /* kvq_layout_init is kvq.h's own check (bits, sizes, G | D or G | T,
       overflow); it is a pure function of its arguments, safe to share.  */
    if (bits != 1 && bits != 2 && bits != 4 && bits != 8)
        return kvq_cuda__fail(KVQ_ERR_BITS, "kvq_cuda_quantize: bits=%d (use 1, 2, 4 or 8)", bits);
    if (T == 0 || D == 0 || G == 0)
        return kvq_cuda__fail(KVQ_ERR_SIZE, "kvq_cuda_quantize: T=%zu D=%zu G=%zu must be > 0", T, D, G);
    if (axis == KVQ_PER_TOKEN && D % G)
        return kvq_cuda__fail(KVQ_ERR_GROUP, "kvq_cuda_quantize: G=%zu does not divide D=%zu", G, D);
    if (axis == KVQ_PER_CHANNEL && T % G)
        return kvq_cuda__fail(KVQ_ERR_GROUP, "kvq_cuda_quantize: G=%zu does not divide T=%zu", G, T);
    if (axis != KVQ_PER_TOKEN && axis != KVQ_PER_CHANNEL)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_quantize: axis %d unknown", (int)axis);
    if (T > SIZE_MAX / D / sizeof(__half))
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "kvq_cuda_quantize: T*D overflows size_t");
    st = kvq_layout_init(&L, T, D, bits, G, axis);
    if (st != KVQ_OK) return kvq_cuda__fail(st, "kvq_cuda_quantize: %s", kvq_why());
    q->T = T; q->D = D; q->G = G; q->bits = bits; q->axis = axis; q->mode = mode;
    q->geom = L.geom;
    q->units = L.units;
    q->n_groups = L.total_groups;
    return KVQ_OK;
}

/* SMs of the current device (an H100's 132 if the query fails: it only
   sizes grids, never decides a result).                                  */
/* A kernel's dynamic shared-memory limit (and, max_carveout, its
   preference for the largest carveout), set once per process, device and
   kernel: cudaFuncSetAttribute is a host call of microseconds that every
   attention call used to make two or three times (issue 46: 46-64 us
   outside v5 per call, with the memset and the serial tail). The limit is
   only ever raised (a larger limit admits every smaller launch; occupancy
   follows a launch's own bytes, not the limit). A table of 512 entries
   (kernels x devices); past it, the attribute is set at every call.     */
static cudaError_t kvq_cuda__func_smem(const void *fn, size_t bytes, bool max_carveout = false)
{
    struct entry { int dev; const void *fn; size_t smem; bool set, carveout; };
    static std::mutex mu;
    static entry tab[512];
    static int n = 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
    std::lock_guard<std::mutex> lock(mu);
    entry *e = nullptr;
    for (int i = 0; i < n && !e; i++)
        if (tab[i].dev == dev && tab[i].fn == fn) e = &tab[i];
    if (!e && n < 512) { e = &tab[n++]; e->dev = dev; e->fn = fn; e->smem = 0; e->set = e->carveout = false; }
    cudaError_t err = cudaSuccess;
    if (!e || !e->set || bytes > e->smem) {
        err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (err != cudaSuccess) return err;
        if (e) { e->set = true; if (bytes > e->smem) e->smem = bytes; }
    }
    if (max_carveout && (!e || !e->carveout)) {
        err = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared);
        if (err == cudaSuccess && e) e->carveout = true;
    }
    return err;
}

static int kvq_cuda__sm_count(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        sms <= 0)
        sms = 132;
    return sms;
}

static unsigned kvq_cuda__grid(size_t work, unsigned threads)
{
    const int sms = kvq_cuda__sm_count();
    size_t blocks = (work + threads - 1) / threads;
    const size_t cap = (size_t)sms * 16u;    /* then the grid-stride loop */
    if (blocks > cap) blocks = cap;
    if (blocks == 0) blocks = 1;
    return (unsigned)blocks;
}

/* The streaming kernels' shapes: B 2 or 4, G 32, 64 or 128, 16-byte
   aligned rows and words (D a multiple of 8; per token of E = 128 / B,
   so a span's four words are one aligned store).                        */
static bool kvq_cuda__stream_shape(const kvq_dev_qshape &q, const void *X, const void *words)
{
    return (q.bits == 2 || q.bits == 4) && (q.G == 32 || q.G == 64 || q.G == 128) && q.D % 8 == 0 &&
           (q.axis == KVQ_PER_CHANNEL || q.D % (size_t)(128 / q.bits) == 0) &&
           ((uintptr_t)X & 15u) == 0 && ((uintptr_t)words & 15u) == 0;
}
/* their items: per token spans of E values, per channel (D / 8) x R a unit */
static size_t kvq_cuda__stream_items(const kvq_dev_qshape &q)
{
    return q.axis == KVQ_PER_TOKEN ? q.T * q.D / (size_t)(128 / q.bits)
                                   : q.units * (q.D / 8) * (q.G * (size_t)q.bits / 32);
}
typedef void (*kvq_cuda__stream_kernel)(const __half *, size_t, size_t, kvq_zero_mode, const int32_t *,
                                        uint32_t *, kvq_sz *, int *);
template <int B, bool WRITE, bool PER_TOKEN>
static kvq_cuda__stream_kernel kvq_cuda__stream_fn_g(size_t G)
{
    return G == 32 ? kvq_quantize_stream_kernel<B, 32, WRITE, PER_TOKEN>
         : G == 64 ? kvq_quantize_stream_kernel<B, 64, WRITE, PER_TOKEN>
                   : kvq_quantize_stream_kernel<B, 128, WRITE, PER_TOKEN>;
}
template <int B>
static kvq_cuda__stream_kernel kvq_cuda__stream_fn_b(const kvq_dev_qshape &q, int write)
{
    const bool per_token = q.axis == KVQ_PER_TOKEN;
    return write ? (per_token ? kvq_cuda__stream_fn_g<B, true, true>(q.G) : kvq_cuda__stream_fn_g<B, true, false>(q.G))
                 : (per_token ? kvq_cuda__stream_fn_g<B, false, true>(q.G) : kvq_cuda__stream_fn_g<B, false, false>(q.G));
}
static kvq_cuda__stream_kernel kvq_cuda__stream_fn(const kvq_dev_qshape &q, int write)
{
    return q.bits == 2 ? kvq_cuda__stream_fn_b<2>(q, write) : kvq_cuda__stream_fn_b<4>(q, write);
}

/* Quantize X (T, D) fp16 into words/sz (kvq_layout_init's sizes), on the
   stream. d_status (device int) receives the data status; the launcher
   zeroes it first. unit_dst: NULL, or (units) destination unit slots.
   `validate` = 0 skips pass 1 for inputs the caller knows are finite and in
   range (then a bad group writes garbage codes instead of an error).
   B 2 or 4 with G 32, 64 or 128 (16-byte aligned X and words, D a
   multiple of 8, per token of 128 / B) run the streaming kernels, the
   others the one-thread-a-group kernels above: the same bytes.          */
extern "C" kvq_status kvq_cuda_quantize(const __half *d_X, size_t T, size_t D, int bits,
                                         size_t G, kvq_axis axis, kvq_zero_mode mode,
                                         const int32_t *d_unit_dst, uint32_t *d_words,
                                         kvq_sz *d_sz, int *d_status, int validate,
                                         cudaStream_t stream)
{
    kvq_dev_qshape q;
    const kvq_status e = kvq_cuda__qshape(d_X, d_words, d_sz, T, D, bits, G, axis, mode, &q);
    if (e != KVQ_OK) return e;
    if (!d_status) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_quantize: d_status is NULL");
    KVQ_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int), stream));
    if (kvq_cuda__stream_shape(q, d_X, d_words)) {     /* the streaming kernels */
        const size_t n_items = kvq_cuda__stream_items(q);
        const unsigned blocks = kvq_cuda__grid((n_items + 1) / 2, 256);   /* >= 2 items a thread */
        for (int write = validate ? 0 : 1; write <= 1; write++) {
            KVQ_CUDA_LAUNCH(kvq_cuda__stream_fn(q, write), blocks, 256, 0, stream)(
                d_X, q.D, n_items, q.mode, d_unit_dst, d_words, d_sz, d_status);
            KVQ_CUDA_CHECK(cudaGetLastError());
        }
        return KVQ_OK;
    }
    const unsigned threads = 128, blocks = kvq_cuda__grid(q.n_groups, threads);
    if (validate) {
        KVQ_CUDA_LAUNCH(kvq_quantize_check_kernel, blocks, threads, 0, stream)(d_X, q, d_status);
        KVQ_CUDA_CHECK(cudaGetLastError());
    }
    typedef void (*kernel_fn)(const __half *, kvq_dev_qshape, const int32_t *, uint32_t *,
                              kvq_sz *, const int *);
    const kernel_fn fn = (bits == 2 && G == 32) ? kvq_quantize_kernel<2, 32>
                       : (bits == 4 && G == 32) ? kvq_quantize_kernel<4, 32>
                                                : kvq_quantize_kernel<0, 0>;
    KVQ_CUDA_LAUNCH(fn, blocks, threads, 0, stream)(d_X, q, d_unit_dst, d_words, d_sz, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}

#endif /* KVQ_CUDA_DECLARE_ONLY */

#ifndef KVQ_CUDA_DECLARE_ONLY
/* ======================================================================== */
/* 2.2 the formats engines ship (kvq.h Sec. 4.1)                            */
/* ======================================================================== */
/* X (T, D) fp16 -> what a kvq cache side of format f holds for T tokens in
   per-token groups of G channels (kvq.h kvq__format_unit):
     words  [T][D/G][wpg]       the codes, packed as kvq.h Sec. 5 (B = 3 a
                                bit stream), wpg = kvq_packed_words(G, B)
     params [T][sz_per_unit]    each group's P-bit parameter packed into
                                kvq_sz words, the first in the low bits
                                (P = kvq_format_param_bits(f); none for
                                the formats with one scale per side)
   One thread per token: it walks the token's groups in order, reading each
   group's fp16 values from global memory as often as the rule needs them
   (twice; three times for 4over6's second candidate). A first pass checks
   every value (NaN/Inf: KVQ_ERR_NONFINITE) and the second writes nothing
   if it found one, as kvq_cuda_quantize. fp16 inputs keep every format's
   scale finite (|x| <= 65504), so no range check is needed.

   Each device function is the twin of the kvq.h function in its comment,
   operation for operation: fp32 / and the double-precision sqrt, / of
   the Lloyd-Max scales are IEEE correctly rounded (no fast-math), and the
   double sums go through kvq_dev_dadd / kvq_dev_dmul (__dadd_rn,
   __dmul_rn), which nvcc never contracts into an fma the host does not
   do. The small-float rounding is kvq.h's integer rounding on every
   architecture but FP8 on sm_89+, where KVQ_CUDA_HW_FP8 (below, on by
   default) uses the hardware's instruction.                                                */
#ifdef __CUDA_ARCH__
static __device__ __forceinline__ double kvq_dev_dadd(double a, double b) { return __dadd_rn(a, b); }
static __device__ __forceinline__ double kvq_dev_dmul(double a, double b) { return __dmul_rn(a, b); }
#else
static __host__ __device__ __forceinline__ double kvq_dev_dadd(double a, double b) { return a + b; }
static __host__ __device__ __forceinline__ double kvq_dev_dmul(double a, double b) { return a * b; }
#endif

/* kvq__minifloat / kvq__to_minifloat / kvq__from_minifloat.               */
struct kvq_dev_minifloat { unsigned e, m, max_mag, nan_mag; };
static __host__ __device__ __forceinline__ kvq_dev_minifloat kvq_dev_grid(int which)
{
    const kvq_dev_minifloat e4m3 = { 4, 3, 0x7E, 0x7F }, e5m2 = { 5, 2, 0x7B, 0x7F },
                            e2m1 = { 2, 1, 0x7, 0x0 };
    return which == 0 ? e4m3 : which == 1 ? e5m2 : e2m1;
}
static __host__ __device__ uint32_t kvq_dev_to_minifloat(float x, kvq_dev_minifloat f)
{
    uint32_t u, a, sig, q, rem, half, mag, sign;
    memcpy(&u, &x, 4);
    a = u & 0x7FFFFFFFu;
    sign = (u >> 31) << (f.e + f.m);
    const int bias = (1 << (f.e - 1)) - 1, te = (int)(a >> 23) - 127 + bias;
    if (a > 0x7F800000u) return sign | f.nan_mag;
    if (a >= 0x7F800000u) return sign | f.max_mag;
    if ((a >> 23) == 0) return sign;
    sig = (a & 0x7FFFFFu) | 0x800000u;
    const unsigned shift = 23u - f.m + (te >= 1 ? 0u : (unsigned)(1 - te));
    if (shift >= 25u) return sign;
    q = sig >> shift;
    rem = sig & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    q += rem > half || (rem == half && (q & 1u));
    mag = te >= 1 ? ((uint32_t)(te - 1) << f.m) + q : q;
    if (mag > f.max_mag) mag = f.max_mag;
    return sign | mag;
}
static __host__ __device__ float kvq_dev_from_minifloat(uint32_t c, kvq_dev_minifloat f)
{
    const unsigned mag = c & ((1u << (f.e + f.m)) - 1u), ex = mag >> f.m, man = mag & ((1u << f.m) - 1u);
    const int bias = (1 << (f.e - 1)) - 1;
    float v;                      /* the cache never stores a NaN/Inf code */
    if (ex == 0) v = ldexpf((float)man, 1 - bias - (int)f.m);
    else v = ldexpf((float)((1u << f.m) + man), (int)ex - bias - (int)f.m);
    return (c >> (f.e + f.m)) & 1u ? -v : v;
}

/* THE HARDWARE FP8 CONVERSION. sm_89 and later convert two fp32 values
   to FP8 in one instruction, cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: round
   to nearest even, saturating to +-448 / +-57344 (Inf too), NaN -> NaN:
   kvq.h's rule (kvq_f32_to_e4m3) on every input but NaN, whose sign the
   ISA leaves open and which a cache refuses before quantizing.
   kvq_dev_cvt_fp8 is that instruction where the GPU has it, the
   emulator's model of it under KVQ_EMU (tests/emu/kvq_emu.h, written from
   the ISA's definition), and kvq_dev_to_minifloat elsewhere.
   What is proven where (test_gpu group fp8-cvt):
     emulator, CPU    the model against kvq_dev_to_minifloat and kvq.h's
                      kvq_f32_to_e4m3 / _e5m2 on every pattern with |x| in
                      [2^-17, 2^16), both signs (every input whose code is
                      neither +-0 nor +-max in either format), and every
                      65537th of the rest (make test-cuda-emu; every 509th
                      in the quick pass), and every boundary through the
                      check kernel: each grid value, each midpoint between
                      neighbours and the floats either side of it, the
                      subnormals, the saturation edge, +-0, +-Inf.
     a GPU, sm_89+    the instruction against kvq_dev_to_minifloat on all
                      2^32 patterns (NaN skipped) in the check kernel
                      (make test-gpu); below sm_89 the two paths are one.
   KVQ_CUDA_HW_FP8 (default 1): the FP8 formats' quantizer
   (kvq_dev_format_code) converts x / a with kvq_dev_cvt_fp8, x / a
   computed as before (IEEE division; finite, or +-Inf, which both
   saturate): the instruction on sm_89+, the integer rounding below it,
   the model in the emulator (so quantize-format's bit-exactness checks
   run the default path there). The emulator proves the model, not the
   silicon: the first GPU run of fp8-cvt (make test-gpu: all 2^32
   patterns, and quantize-format against kvq.h) is the hardware proof.
   -DKVQ_CUDA_HW_FP8=0 keeps the integer rounding everywhere.           */
#ifndef KVQ_CUDA_HW_FP8
#define KVQ_CUDA_HW_FP8 1
#endif
static __device__ __forceinline__ uint32_t kvq_dev_cvt_fp8(float x, int e5m2)
{
#if defined(KVQ_EMU)
    return (uint32_t)kvq_emu::cvt_rn_satfinite_f8x2(x, 0.0f, e5m2) >> 8;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short r;                    /* x's code in the upper byte */
    if (e5m2) asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(x), "f"(0.0f));
    else asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(x), "f"(0.0f));
    return (uint32_t)r >> 8;
#else
    return kvq_dev_to_minifloat(x, kvq_dev_grid(e5m2));
#endif
}
/* The FP8 code of x / a as the quantizer takes it (kvq__scaled_code).   */
static __device__ __forceinline__ uint32_t kvq_dev_fp8_code(float x, float a, int e5m2)
{
    if (a == 0.0f) return 0u;
    return KVQ_CUDA_HW_FP8 ? kvq_dev_cvt_fp8(x / a, e5m2) : kvq_dev_to_minifloat(x / a, kvq_dev_grid(e5m2));
}

/* The fp8-cvt check: patterns first + i stride (mod 2^32), i < count, or
   list[i] when list is given; for each but NaN, kvq_dev_cvt_fp8 against
   kvq_dev_to_minifloat for E4M3 and E5M2. out: differing E4M3, differing
   E5M2, a differing pattern (0xFFFFFFFF: none), patterns compared.     */
__global__ void kvq_fp8_check_kernel(uint32_t first, uint32_t stride, uint64_t count,
                                     const uint32_t *list, unsigned *out /* (4) */)
{
    unsigned d4 = 0, d5 = 0, n = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t u = list ? list[i] : first + (uint32_t)i * stride;
        const float x = __uint_as_float(u);
        if (x != x) continue;
        const bool b4 = kvq_dev_cvt_fp8(x, 0) != kvq_dev_to_minifloat(x, kvq_dev_grid(0));
        const bool b5 = kvq_dev_cvt_fp8(x, 1) != kvq_dev_to_minifloat(x, kvq_dev_grid(1));
        d4 += b4; d5 += b5; n++;
        if (b4 || b5) atomicCAS(&out[2], 0xFFFFFFFFu, u);
    }
    atomicAdd(&out[0], d4);
    atomicAdd(&out[1], d5);
    atomicAdd(&out[3], n);
}

/* Runs the check above; d_out (4 unsigned, device) is set here first.
   *native: 1 when the kernel ran the instruction itself (a GPU of
   sm_89+), 0 when the emulator's model or the software path.           */
extern "C" kvq_status kvq_cuda_fp8_check(uint32_t first, uint32_t stride, uint64_t count,
                                         const uint32_t *d_list, unsigned *d_out, int *native,
                                         cudaStream_t stream)
{
    if (!d_out || !native) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_fp8_check: NULL pointer");
    if (count == 0 || count > ((uint64_t)1 << 32))
        return kvq_cuda__fail(KVQ_ERR_SIZE, "kvq_cuda_fp8_check: count %llu (1 .. 2^32)",
                              (unsigned long long)count);
    *native = 0;
#ifndef KVQ_EMU
    int dev = 0, major = 0, minor = 0;
    KVQ_CUDA_CHECK(cudaGetDevice(&dev));
    KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    *native = major * 10 + minor >= 89;
#endif
    const unsigned init[4] = { 0, 0, 0xFFFFFFFFu, 0 };
    KVQ_CUDA_CHECK(cudaMemcpyAsync(d_out, init, sizeof init, cudaMemcpyHostToDevice, stream));
    const unsigned threads = 256, blocks = kvq_cuda__grid((size_t)(count < 4096 * 256 ? count : 4096 * 256), threads);
    KVQ_CUDA_LAUNCH(kvq_fp8_check_kernel, blocks, threads, 0, stream)(first, stride, count, d_list, d_out);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}

#ifdef KVQ_EMU
/* The emulator's proof on the CPU (no kernel: one loop), patterns as
   kvq_cuda_fp8_check's: out[0..1] the model against kvq_dev_to_minifloat
   (E4M3, E5M2), out[2..3] against kvq.h's kvq_f32_to_e4m3 / _e5m2, out[4]
   a differing pattern (0xFFFFFFFF: none), out[5] patterns compared.     */
extern "C" void kvq_cuda_fp8_check_cpu(uint32_t first, uint32_t stride, uint64_t count, uint64_t out[6])
{
    uint64_t d[4] = { 0, 0, 0, 0 }, n = 0, any = 0xFFFFFFFFu;
    for (uint64_t i = 0; i < count; i++) {
        const uint32_t u = first + (uint32_t)i * stride;
        float x;
        memcpy(&x, &u, 4);
        if (x != x) continue;
        const uint32_t h4 = kvq_dev_cvt_fp8(x, 0), h5 = kvq_dev_cvt_fp8(x, 1);
        const bool b[4] = { h4 != kvq_dev_to_minifloat(x, kvq_dev_grid(0)),
                            h5 != kvq_dev_to_minifloat(x, kvq_dev_grid(1)),
                            h4 != kvq_f32_to_e4m3(x), h5 != kvq_f32_to_e5m2(x) };
        for (int k = 0; k < 4; k++) d[k] += b[k];
        if ((b[0] || b[1] || b[2] || b[3]) && any == 0xFFFFFFFFu) any = u;
        n++;
    }
    for (int k = 0; k < 4; k++) out[k] = d[k];
    out[4] = any;
    out[5] = n;
}
#endif

/* kvq.h's Lloyd-Max table (kvq_lloyd_max_centroids), in constant memory. */
#ifdef __CUDA_ARCH__
#define KVQ_DEV_CONST __constant__
#else
#define KVQ_DEV_CONST
#endif
static KVQ_DEV_CONST float kvq_dev_lloyd_max[3][16] = {
    { -1.51041761f, -0.452780035f, 0.452780035f, 1.51041761f },
    { -2.1519457f, -1.34390928f, -0.756005281f, -0.245094179f,
      0.245094179f, 0.756005281f, 1.34390928f, 2.1519457f },
    { -2.73258957f, -2.06901723f, -1.61804639f, -1.2562312f,
      -0.942340456f, -0.656759119f, -0.388048299f, -0.12839503f,
      0.12839503f, 0.388048299f, 0.656759119f, 0.942340456f,
      1.2562312f, 1.61804639f, 2.06901723f, 2.73258957f } };

struct kvq_dev_fshape {
    size_t T, D, G, wpg, spu;      /* spu: kvq_sz words of parameters a token */
    int fmt, bits, P;
    float side_scale;
};

/* Code i of a group (x: its fp16 values) on the format's rule, given the
   group's decided multiplier a (FP8, NVFP4), 1/d (q8_0, q4_0) or the
   Lloyd-Max inverse norm (double).                                      */
static __device__ __forceinline__ uint32_t kvq_dev_format_code(const kvq_dev_fshape &q, float x,
                                                               float a, double inv)
{
    switch (q.fmt) {
    case KVQ_FORMAT_E4M3: case KVQ_FORMAT_E4M3_TENSOR:
        return kvq_dev_fp8_code(x, a, 0);
    case KVQ_FORMAT_E5M2: case KVQ_FORMAT_E5M2_TENSOR:
        return kvq_dev_fp8_code(x, a, 1);
    case KVQ_FORMAT_NVFP4: case KVQ_FORMAT_NVFP4_4OVER6:
        return a == 0.0f ? 0u : kvq_dev_to_minifloat(x / a, kvq_dev_grid(2));
    case KVQ_FORMAT_LLOYD_MAX: case KVQ_FORMAT_LLOYD_MAX_NC: {
        const float *cent = kvq_dev_lloyd_max[q.bits - 2];
        const float u = (float)kvq_dev_dmul((double)x, inv);
        uint32_t c = 0;
        for (int k = 0; k + 1 < (1 << q.bits); k++) c += u > (cent[k] + cent[k + 1]) * 0.5f;
        return c;
    }
    case KVQ_FORMAT_Q8_0: {                    /* a holds 1/d                */
        const float r = roundf(__fmul_rn(x, a));          /* half away from 0 */
        return (uint32_t)(uint8_t)(int8_t)(r >= 127.0f ? 127 : r <= -127.0f ? -127 : r == r ? (int)r : 0);
    }
    default: {                                 /* q4_0: a holds 1/d          */
        const float t = __fadd_rn(__fmul_rn(x, a), 8.5f);  /* never an fma   */
        return t >= 15.0f ? 15u : t >= 0.0f ? (uint32_t)(int)t : 0u;
    }
    }
}

/* sum (x_i - value(c_i) a)^2 of an NVFP4 block (kvq__block_sse).          */
static __device__ double kvq_dev_block_sse(const kvq_dev_fshape &q, const __half *x, float a)
{
    double e = 0.0;
    for (size_t i = 0; i < q.G; i++) {
        const float xv = __half2float(x[i]);
        const float v = kvq_dev_from_minifloat(kvq_dev_format_code(q, xv, a, 0.0), kvq_dev_grid(2));
        const double d = (double)xv - (double)__fmul_rn(v, a);
        e = kvq_dev_dadd(e, kvq_dev_dmul(d, d));
    }
    return e;
}

/* One group (kvq__format_group): its codes into w (wpg words, zeroed
   here), its parameter returned.                                        */
static __device__ uint32_t kvq_dev_format_group(const kvq_dev_fshape &q, const __half *x,
                                                uint32_t *w)
{
    float amax = 0.0f, a = 0.0f, m = 0.0f;
    double inv = 0.0, n2 = 0.0, c2 = 0.0;
    uint32_t param = 0;
    for (size_t i = 0; i < q.G; i++) {
        const float v = __half2float(x[i]);
        amax = fabsf(v) > amax ? fabsf(v) : amax;
        if (fabsf(v) > fabsf(m)) m = v;                    /* q4_0's first max */
        n2 = kvq_dev_dadd(n2, kvq_dev_dmul((double)v, (double)v));
    }
    switch (q.fmt) {
    case KVQ_FORMAT_E4M3: case KVQ_FORMAT_E5M2:
        a = amax / kvq_dev_from_minifloat(kvq_dev_grid(q.fmt == KVQ_FORMAT_E5M2).max_mag,
                                          kvq_dev_grid(q.fmt == KVQ_FORMAT_E5M2));
        memcpy(&param, &a, 4);
        break;
    case KVQ_FORMAT_E4M3_TENSOR: case KVQ_FORMAT_E5M2_TENSOR:
        a = q.side_scale;
        break;
    case KVQ_FORMAT_NVFP4: case KVQ_FORMAT_NVFP4_4OVER6: {
        uint32_t sf = kvq_dev_to_minifloat((amax / 6.0f) / q.side_scale, kvq_dev_grid(0));
        a = kvq_dev_from_minifloat(sf, kvq_dev_grid(0)) * q.side_scale;
        if (q.fmt == KVQ_FORMAT_NVFP4_4OVER6) {
            const uint32_t sf4 = kvq_dev_to_minifloat((amax / 4.0f) / q.side_scale, kvq_dev_grid(0));
            const float a4 = kvq_dev_from_minifloat(sf4, kvq_dev_grid(0)) * q.side_scale;
            if (kvq_dev_block_sse(q, x, a4) < kvq_dev_block_sse(q, x, a)) { sf = sf4; a = a4; }
        }
        param = sf;
        break;
    }
    case KVQ_FORMAT_LLOYD_MAX: case KVQ_FORMAT_LLOYD_MAX_NC:
        inv = n2 == 0.0 ? 0.0 : sqrt((double)q.G) / sqrt(n2);
        break;
    default: {                                         /* q8_0, q4_0        */
        const float d = q.fmt == KVQ_FORMAT_Q8_0 ? amax / 127.0f : m / -8.0f;
        a = d != 0.0f ? 1.0f / d : 0.0f;               /* the codes' 1/d    */
        param = kvq_dev_to_f16(d);
        break;
    }
    }
    for (size_t k = 0; k < q.wpg; k++) w[k] = 0;
    for (size_t i = 0, bit = 0; i < q.G; i++, bit += (size_t)q.bits) {
        uint32_t c = 0;
        if (!(q.fmt == KVQ_FORMAT_LLOYD_MAX || q.fmt == KVQ_FORMAT_LLOYD_MAX_NC) || n2 != 0.0)
            c = kvq_dev_format_code(q, __half2float(x[i]), a, inv);
        if (q.fmt == KVQ_FORMAT_LLOYD_MAX_NC && n2 != 0.0) {
            const float cf = kvq_dev_lloyd_max[q.bits - 2][c];
            c2 = kvq_dev_dadd(c2, kvq_dev_dmul((double)cf, (double)cf));
        }
        w[bit / 32] |= c << (bit % 32);
        if (bit % 32 + (size_t)q.bits > 32) w[bit / 32 + 1] |= c >> (32 - bit % 32);
    }
    if (q.fmt == KVQ_FORMAT_LLOYD_MAX || q.fmt == KVQ_FORMAT_LLOYD_MAX_NC) {
        const float s = n2 == 0.0 ? 0.0f
                      : (float)(sqrt(n2) / sqrt(q.fmt == KVQ_FORMAT_LLOYD_MAX_NC ? c2 : (double)q.G));
        memcpy(&param, &s, 4);
    }
    return param;
}

/* Pass 1 (WRITE = false): every value finite, else KVQ_ERR_NONFINITE in
   *status. Pass 2: every token's groups, unless pass 1 found a problem. */
template <bool WRITE>
__global__ void kvq_format_quantize_kernel(const __half *__restrict__ X, kvq_dev_fshape q,
                                           uint32_t *__restrict__ words, kvq_sz *__restrict__ params,
                                           int *status)
{
    if (WRITE && *(volatile const int *)status != 0) return;
    const size_t gpu = q.D / q.G;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < q.T;
         t += (size_t)gridDim.x * blockDim.x) {
        const __half *x = X + t * q.D;
        if (!WRITE) {
            for (size_t d = 0; d < q.D; d++)
                if (!kvq_dev_finite(__half2float(x[d]))) { kvq_dev_report(status, KVQ_ERR_NONFINITE); break; }
            continue;
        }
        uint32_t *p = reinterpret_cast<uint32_t *>(params + t * q.spu);
        for (size_t k = 0; k < q.spu; k++) p[k] = 0;
        for (size_t g = 0; g < gpu; g++) {
            const uint32_t param = kvq_dev_format_group(q, x + g * q.G, words + (t * gpu + g) * q.wpg);
            if (q.P) p[g * q.P / 32] |= q.P == 32 ? param : param << (g * q.P % 32);
        }
    }
}

/* Quantize X (T, D) fp16 in format f (not INT: kvq_cuda_quantize), per-token
   groups of G, into words (T * D/G * kvq_packed_words(G, bits)) and params
   (T * ceil(D/G * P / 32) kvq_sz words; may be NULL where P = 0): codes and
   parameters bit for bit kvq.h's, a cache side's words and sz for those
   rows. side_scale: the side's scale (the _TENSOR and NVFP4 formats;
   finite, > 0). d_status as kvq_cuda_quantize's (NONFINITE for a NaN or
   Inf, and then nothing written).                                       */
extern "C" kvq_status kvq_cuda_quantize_format(const __half *d_X, size_t T, size_t D,
                                                kvq_format f, int bits, size_t G,
                                                float side_scale, uint32_t *d_words,
                                                kvq_sz *d_params, int *d_status,
                                                cudaStream_t stream)
{
    kvq_dev_fshape q;
    if (!d_X || !d_words || !d_status)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_quantize_format: NULL pointer");
    if ((int)f <= (int)KVQ_FORMAT_INT || f >= KVQ_FORMAT_COUNT)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_quantize_format: format %d is not one of "
                              "kvq.h Sec. 4.1's (INT: kvq_cuda_quantize)", (int)f);
    if (!kvq_format_bits_ok(f, bits))
        return kvq_cuda__fail(KVQ_ERR_BITS, "kvq_cuda_quantize_format: %s does not take %d bits",
                              kvq_format_name(f), bits);
    if (T == 0 || D == 0 || G == 0 || G > 1024 || (kvq_format_group(f) && G != kvq_format_group(f)))
        return kvq_cuda__fail(KVQ_ERR_SIZE, "kvq_cuda_quantize_format: T=%zu D=%zu G=%zu (%s: G %zu)",
                              T, D, G, kvq_format_name(f), kvq_format_group(f));
    if (D % G) return kvq_cuda__fail(KVQ_ERR_GROUP, "kvq_cuda_quantize_format: G=%zu does not "
                                     "divide D=%zu", G, D);
    if (T > SIZE_MAX / D / sizeof(kvq_sz))
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "kvq_cuda_quantize_format: T*D overflows size_t");
    q.T = T; q.D = D; q.G = G; q.fmt = (int)f; q.bits = bits; q.side_scale = side_scale;
    q.wpg = kvq_packed_words(G, bits);
    q.P = kvq_format_param_bits(f);
    q.spu = (D / G * (size_t)q.P + 31) / 32;
    if (q.P && !d_params) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_quantize_format: %s needs "
                                                "d_params", kvq_format_name(f));
    if ((f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR || f == KVQ_FORMAT_NVFP4 ||
         f == KVQ_FORMAT_NVFP4_4OVER6) && !(side_scale > 0.0f && side_scale <= 3.0e38f))
        return kvq_cuda__fail(KVQ_ERR_RANGE, "kvq_cuda_quantize_format: side scale %g must be "
                              "finite and > 0", (double)side_scale);
    KVQ_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int), stream));
    const unsigned threads = 128, blocks = kvq_cuda__grid(T, threads);
    KVQ_CUDA_LAUNCH(kvq_format_quantize_kernel<false>, blocks, threads, 0, stream)(d_X, q, d_words,
                                                                                d_params, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    KVQ_CUDA_LAUNCH(kvq_format_quantize_kernel<true>, blocks, threads, 0, stream)(d_X, q, d_words,
                                                                               d_params, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}
#endif /* KVQ_CUDA_DECLARE_ONLY */

/* ======================================================================== */
/* 2.1 rotation before quantizing (kvq.h Sec. 6.1, kvq__rotate_row)          */
/* ======================================================================== */
/* Y (T, D) <- every row of X (T, D) rotated, y = H_D (s * x) / sqrt(D), or
   rotated back (inverse), x = s * (H_D y) / sqrt(D): the orthonormal
   Walsh-Hadamard rotation of QuaRot ("QuaRot: Outlier-Free 4-Bit Inference
   in Rotated LLMs", arXiv:2404.00456), SpinQuant (arXiv:2405.16406) and
   RotateKV (arXiv:2501.16383), as kvq.h Sec. 6.1 defines it. Bit-identical
   to kvq_rotate and to a rotating kvq_cache's stored rows, because it does
   the same fp32 operations in the same order:
     1. the sign flip x_i * s_i (exact); s_i is kvq__rot_sign's splitmix64
        bit of (seed, i), formed by each thread from i alone;
     2. stages h = 1, 2, ..., D/2: each pair (x_j, x_{j+h}), j mod 2h < h,
        becomes (x_j + x_{j+h}, x_j - x_{j+h}). Every value of a stage is
        one rounding of two values of the stage before, so which thread
        takes which pair cannot change a bit; __syncthreads between stages;
     3. one multiply by kvq.h's scale (float)(1 / sqrt((double)D)), formed
        on the host as kvq.h forms it.
   Rotating back is 2, 3, 1. __fadd_rn / __fsub_rn / __fmul_rn keep nvcc
   from fusing anything (kvq.h has no mul feeding an add here, and compiles
   Part I with FP_CONTRACT OFF). One block per row (grid-stride), the row in
   shared memory. Where it sits in a GPU pipeline:
     keys, values  kvq_cuda_rotate_f16 -> kvq_cuda_quantize: the fp16 rows of
                   a rotating cache (fp_bits 16), so the codes are the
                   cache's codes (test_gpu checks both). Its own pass, not a
                   step of the quantize kernel: that kernel gives a thread
                   one group, a per-channel key group spans G rows, and
                   each row's rotation needs all D channels of it; the pass
                   costs one more write and read of the fp16 rows (4 D
                   bytes a row), walkthrough 9 has the arithmetic;
     queries       the pool's rotation fields (Sec. 3, from the export):
                   kvq_cuda_attend / _attend_mma rotate q (key side's kind)
                   before the kernels and the output back (value side's)
                   after the combine: kvq_attend's result in the caller's
                   basis. Without a pool (the fp16 baseline), the same by
                   hand: kvq_cuda_rotate, attend, kvq_cuda_rotate(inverse).
   Data: a row with a NaN/Inf input (KVQ_ERR_NONFINITE) or, for fp16 rows,
   a rotated element beyond KVQ_MAX_ABS_INPUT (KVQ_ERR_RANGE, the cache's
   refusal) is reported in *status and that row of Y is not written.     */
#ifndef KVQ_CUDA_DECLARE_ONLY   /* the implementation: kernels and launchers */
#define KVQ_CUDA_ROT_THREADS 128   /* at most; the pairs loop over them      */
#define KVQ_CUDA_ROT_MAX_D   4096  /* a row of floats in 16 KB of shared memory */

/* kvq__rot_sign: s_i = -1 where bit 63 of splitmix64's i-th output is set. */
static __device__ __forceinline__ float kvq_dev_rot_sign(uint64_t seed, size_t i)
{
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> 63) ? -1.0f : 1.0f;
}
static __device__ __forceinline__ void kvq_dev_put(float *p, float x) { *p = x; }
static __device__ __forceinline__ void kvq_dev_put(__half *p, float x) { *p = __float2half_rn(x); }

template <class OUT>    /* float, or __half: kvq.h's fp16 row (round to even) */
__global__ void kvq_rotate_kernel(const float *X /* (T, D) */, OUT *Y /* (T, D), may be X */,
                                  size_t T, unsigned D, int kind, uint64_t seed, int inverse,
                                  float scale, int *status)
{
    KVQ_CUDA_SHARED_DYNAMIC(float, x);                        /* (D) the row */
    KVQ_CUDA_SHARED(int, bad, [KVQ_CUDA_ROT_THREADS]);        /* per thread  */
    const bool hadamard = kind != KVQ_ROT_NONE, signs = kind == KVQ_ROT_HADAMARD_SIGNS;
    const bool f16 = sizeof(OUT) == 2;
    const unsigned tid = threadIdx.x;
    for (size_t t = blockIdx.x; t < T; t += gridDim.x) {
        int mine = 0;
        for (unsigned j = tid; j < D; j += blockDim.x) {
            const float v = X[t * D + j];
            if (!kvq_dev_finite(v)) mine = KVQ_ERR_NONFINITE;
            x[j] = signs && !inverse ? __fmul_rn(v, kvq_dev_rot_sign(seed, j)) : v;
        }
        for (unsigned h = 1; hadamard && h < D; h *= 2) {     /* stage h     */
            __syncthreads();
            for (unsigned p = tid; p < D / 2; p += blockDim.x) {
                const unsigned j = p / h * 2 * h + p % h;
                const float a = x[j], b = x[j + h];
                x[j] = __fadd_rn(a, b);
                x[j + h] = __fsub_rn(a, b);
            }
        }
        __syncthreads();
        for (unsigned j = tid; j < D; j += blockDim.x) {
            float y = hadamard ? __fmul_rn(x[j], scale) : x[j];
            if (signs && inverse) y = __fmul_rn(y, kvq_dev_rot_sign(seed, j));
            if (f16 && !mine && !(fabsf(y) <= KVQ_MAX_ABS_INPUT)) mine = KVQ_ERR_RANGE;
            x[j] = y;
        }
        bad[tid] = mine;
        __syncthreads();
        int row_bad = 0;                        /* the smallest code wins */
        for (unsigned i = 0; i < blockDim.x; i++)
            if (bad[i] && (!row_bad || bad[i] < row_bad)) row_bad = bad[i];
        if (row_bad && tid == 0 && status) kvq_dev_report(status, row_bad);
        if (!row_bad)
            for (unsigned j = tid; j < D; j += blockDim.x) kvq_dev_put(&Y[t * D + j], x[j]);
        __syncthreads();                        /* x, bad reused by the next row */
    }
}

/* One launch of kvq_rotate_kernel over T rows whose arguments the caller
   checked. status NULL: nothing is reported (a row the kernel refuses
   keeps its old contents), which is how attention rotates its output
   back (Sec. 4) without reporting the NaN rows that mark its failures. */
template <class OUT>
static kvq_status kvq_cuda__rotate_launch(kvq_rotation kind, uint64_t seed, size_t D, int inverse,
                                          const float *d_X, OUT *d_Y, size_t T, int *d_status,
                                          cudaStream_t stream)
{
    const float scale = (float)(1.0 / sqrt((double)D));       /* kvq.h's scale */
    const unsigned threads = D / 2 >= KVQ_CUDA_ROT_THREADS ? KVQ_CUDA_ROT_THREADS : 32;
    KVQ_CUDA_LAUNCH(kvq_rotate_kernel<OUT>, kvq_cuda__grid(T, 1), threads, D * sizeof(float), stream)
        (d_X, d_Y, T, (unsigned)D, (int)kind, seed, inverse, scale, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}

/* The launchers' shared checks and launch; `out` is float or __half.     */
template <class OUT>
static kvq_status kvq_cuda__rotate(const char *who, kvq_rotation kind, uint64_t seed, size_t D,
                                   int inverse, const float *d_X, OUT *d_Y, size_t T,
                                   int *d_status, cudaStream_t stream)
{
    if (!d_X || !d_Y || !d_status) return kvq_cuda__fail(KVQ_ERR_NULL, "%s: NULL pointer", who);
    if ((int)kind < 0 || kind > KVQ_ROT_HADAMARD_SIGNS)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: unknown rotation %d (0 none, 1 Hadamard, "
                              "2 Hadamard with signs)", who, (int)kind);
    if (inverse != 0 && inverse != 1)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: inverse must be 0 or 1 (got %d)", who, inverse);
    if (D == 0 || T == 0) return kvq_cuda__fail(KVQ_ERR_SIZE, "%s: D=%zu and T=%zu must be positive", who, D, T);
    if (kind != KVQ_ROT_NONE && (D & (D - 1)))
        return kvq_cuda__fail(KVQ_ERR_SIZE, "%s: the Hadamard rotation needs D a power of two (D=%zu)", who, D);
    if (D > KVQ_CUDA_ROT_MAX_D)
        return kvq_cuda__fail(KVQ_ERR_SIZE, "%s: D=%zu exceeds %d (a row lives in shared memory)",
                              who, D, KVQ_CUDA_ROT_MAX_D);
    if (T > SIZE_MAX / D / sizeof(float))
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "%s: T*D overflows size_t", who);
    KVQ_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int), stream));
    return kvq_cuda__rotate_launch(kind, seed, D, inverse, d_X, d_Y, T, d_status, stream);
}

/* d_Y (T, D) <- the rows of d_X (T, D) rotated (inverse = 0) or rotated
   back (inverse = 1) exactly as kvq_rotate(kind, seed, D, inverse, ...);
   d_Y may be d_X. d_status: device int, zeroed here; the data status as
   above (kvq_cuda_status reads it). D a power of two up to 4096.        */
extern "C" kvq_status kvq_cuda_rotate(kvq_rotation kind, uint64_t seed, size_t D, int inverse,
                                       const float *d_X, float *d_Y, size_t T, int *d_status,
                                       cudaStream_t stream)
{
    return kvq_cuda__rotate("kvq_cuda_rotate", kind, seed, D, inverse, d_X, d_Y, T, d_status, stream);
}

/* d_Y16 (T, D) fp16 <- the rows of d_X rotated and rounded to fp16: the rows
   a rotating kvq_cache (fp_bits 16) stores, ready for kvq_cuda_quantize.  */
extern "C" kvq_status kvq_cuda_rotate_f16(kvq_rotation kind, uint64_t seed, size_t D,
                                           const float *d_X, __half *d_Y16, size_t T,
                                           int *d_status, cudaStream_t stream)
{
    return kvq_cuda__rotate("kvq_cuda_rotate_f16", kind, seed, D, 0, d_X, d_Y16, T, d_status, stream);
}

#endif /* KVQ_CUDA_DECLARE_ONLY */

/* ======================================================================== */
/* 3. the paged store                                                       */
/* ======================================================================== */
/* A PAGE holds one per-channel key unit and the G per-token value units of
   the same G slots, for one (sequence, KV head): page = G slots. The pool
   keeps each part in its own array, every page at a fixed stride, and each
   part is byte for byte the slice of kvq.h's cache arrays for those slots:

     k_words (n_pages, D, wpg_k)          wpg_k = G * B / 32
     k_sz    (n_pages, D)                 per-channel (s, z), one per channel
     v_words (n_pages, G, D/Gv, wpg_v)    wpg_v = Gv * B / 32
     v_sz    (n_pages, G, D/Gv)           per-token (s, z), one per group

       page p:  k_words ┌ ch 0: [w0: slots 0..15][w1: slots 16..31] ┐ (B=2,
                        │ ch 1: [w0            ][w1               ] │  G=32)
                        └ ...                                       ┘
                v_words ┌ slot 0: [g0: w0 w1][g1: w0 w1][g2..][g3..] ┐
                        └ slot 1 ... slot 31                          ┘

   A STREAM is one (sequence, KV head), the unit of work of the attention
   kernel. Its slots 0 .. n_slots-1 (n_slots = max(n_kq, n_vq)) live in its
   pages, page i of the stream = pool page pages[i]. A slot's key is
   quantized if slot < n_kq (a multiple of G: keys quantize whole units) and
   otherwise full precision in k_tail; its value is quantized if slot < n_vq
   and otherwise in v_tail. Only one tail is ever non-empty:
     KIVI:     n_kq >= n_vq; the value window's first n_kq - n_vq rows are
               the v_tail (values of key-quantized slots), the rest are fp.
     LogQuant: with per-channel keys, dropped tokens wait in the key stage
               (up to G - 1) while their values are already quantized:
               n_vq >= n_kq, k_tail = those stage keys.
     OTT, HF-per-channel: n_kq == n_vq.
   Tokens whose key AND value are full precision (KIVI's window, OTT's pool
   and auxiliary pool, LogQuant's kept set and sinks) are n_fp rows in k_fp,
   v_fp. `dead` marks slots that are stored but never attended (OTT's
   replaced outliers, evicted tokens): bit s of dead[s / 32].
   Attention does not depend on the order in which tokens are stored
   (LogQuant Sec. 2.4), so nothing here records positions.                 */
/* THE TOKEN LAYOUT (kvq.h Sec. 4.1's formats; every kvq_config_engine
   preset). The engines' caches quantize both sides per token, each in a
   format: a token's D channels are D/Gs groups of Gs (Gs = 16, 32 or D),
   each decoded as x' = value(c) a + b (kvq.h kvq__group_ab). A page is
   still G slots (pool.group), and each part is still the slice of kvq.h's
   arrays for those slots, now token after token on both sides:

     k_words (n_pages, G, D/Gk, wpg_k)   wpg = kvq_packed_words(Gs, B):
     v_words (n_pages, G, D/Gv, wpg_v)     B = 3 is a bit stream (kvq.h
                                           Sec. 5), a code may straddle
     k_sz    (n_pages, G, spt_k)         the token's kvq_sz words, raw:
     v_sz    (n_pages, G, spt_v)           INT: (s, z) per group; a format:
                                           its P-bit parameters packed,
                                           group g at bit g P (kvq.h
                                           kvq__format_unit), none for the
                                           formats with one side scale

   and per side the grid's value(c) as a 256-float table (the cache side's
   value[], device memory), and per stream the sides' scales (a cache's
   own, kvq_side.scale: kvq.h sets it from the cache's first rows):
   exactly what kvq__group_ab and kvq__side_token read (kvq_cuda_token,
   below). Only Sec. 4's slow path reads this layout (its per-lane
   decode); Sec. 8's tensor cores, the sealing and the page moves take
   Sec. 3's INT pages only and refuse it.                                 */
#define KVQ_CUDA_LAYOUT_TOKEN 1
typedef struct kvq_cuda_fside {
    kvq_format   format;   /* kvq.h Sec. 4.1 (INT: Sec. 4's (s, z), zero_mode) */
    int          bits;     /* B: as kvq_format_bits_ok (2, 3, 4 or 8)         */
    int          group;    /* Gs: per-token group, divides D, a multiple of D/32 */
    const float *value;    /* (256) value(c), device memory; c < 2^B is read  */
} kvq_cuda_fside;

/* kvq_format_param_bits and kvq_packed_words on both sides of the bus,
   and a token's words and kvq_sz words on one side (spt: INT one kvq_sz a
   group; a format ceil(D/Gs P / 32), as kvq__side_init's sz_per_unit). */
static __host__ __device__ __forceinline__ int kvq_cuda__param_bits(int f)
{
    return f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR ? 0
         : f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6 ? 8
         : f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0 ? 16 : 32;
}
static __host__ __device__ __forceinline__ size_t kvq_cuda__tok_wpg(const kvq_cuda_fside &f)
{
    return ((size_t)f.group * (size_t)f.bits + 31) / 32;
}
static __host__ __device__ __forceinline__ size_t kvq_cuda__tok_words(const kvq_cuda_fside &f, int D)
{
    return (size_t)(D / f.group) * kvq_cuda__tok_wpg(f);
}
static __host__ __device__ __forceinline__ size_t kvq_cuda__tok_params(const kvq_cuda_fside &f, int D)
{
    return f.format == KVQ_FORMAT_INT ? (size_t)(D / f.group)
         : ((size_t)(D / f.group) * (size_t)kvq_cuda__param_bits(f.format) + 31) / 32;
}

typedef struct kvq_cuda_pool {
    uint32_t *k_words;     /* (n_pages, D, wpg_k)                           */
    kvq_sz   *k_sz;        /* (n_pages, D)                                  */
    uint32_t *v_words;     /* (n_pages, G, D/Gv, wpg_v)                     */
    kvq_sz   *v_sz;        /* (n_pages, G, D/Gv)                            */
    size_t    n_pages;
    int       head_dim;    /* D: 64 or 128                                   */
    int       group;       /* G: key group = slots per page: 32, 64 or 128   */
    int       value_group; /* Gv: per-token value group, Gv*B % 32 == 0      */
    int       bits;        /* B for keys and values: 2 or 4 (0: the token
                              layout, read with kvq_cuda_token)            */
    kvq_zero_mode zero_mode;
    /* The basis the pages are in (kvq.h Sec. 6.1; copy kvq_cuda_export_t's
       three fields): kvq_cuda_attend and kvq_cuda_attend_mma rotate q by
       key_rotation before their kernels and the output back by
       value_rotation after them, as kvq_attend does. All zero (a memset
       pool): no rotation.                                               */
    kvq_rotation key_rotation, value_rotation;
    uint64_t  rotation_seed;
} kvq_cuda_pool;

/* A token-layout pool's other half (kvq_cuda_attend_token): the two
   sides, and each stream's side scales, device memory. The pool itself
   keeps Sec. 3's fields (arrays, D, G = slots per page, zero mode, basis)
   with bits = 0, so that every INT entry point refuses it by its shape
   check. Neither struct grows for it: the INT kernels' registers are
   sized to the pool and stream as they are (bench/RESULTS.md's gates). */
typedef struct kvq_cuda_token {
    kvq_cuda_fside key, value;
    const float   *scales;   /* (n_streams, 2): stream s's key side scale,
                                then its value side scale (kvq_side.scale) */
} kvq_cuda_token;

typedef struct kvq_cuda_stream {
    const int32_t  *pages;   /* (ceil(n_slots / G)) pool page ids            */
    const uint32_t *dead;    /* NULL, or (ceil(n_slots / 32)) dead-slot bits  */
    const kvq_f16  *k_tail;  /* (n_vq - n_kq, D) keys of slots n_kq..n_vq-1   */
    const kvq_f16  *v_tail;  /* (n_kq - n_vq, D) values of slots n_vq..n_kq-1 */
    const kvq_f16  *k_fp;    /* (n_fp, D) full-precision keys                */
    const kvq_f16  *v_fp;    /* (n_fp, D) their values                       */
    uint32_t n_kq, n_vq, n_fp, reserved;
} kvq_cuda_stream;

/* Page strides, in words and in kvq_sz entries.                            */
static __host__ __device__ __forceinline__ size_t kvq_cuda__kw_stride(int D, int G, int B) { return (size_t)D * G * B / 32; }
static __host__ __device__ __forceinline__ size_t kvq_cuda__vw_stride(int D, int G, int B) { return (size_t)G * D * B / 32; }
static __host__ __device__ __forceinline__ size_t kvq_cuda__vs_stride(int D, int G, int Gv) { return (size_t)G * (D / Gv); }

/* Where the parts of fast item `tile` (TG tokens) of pool page `page` start,
   in words of k_words / v_words and entries of k_sz / v_sz. The kernel's
   staging copies from here (Sec. 4); tests/test_gpu.cu follows the same
   plan on the CPU. Key codes of channel d: kw words from key_word(d).    */
struct kvq_cuda_tile_src {
    int D, B, G, TG, gpt;                  /* gpt = D / Gv                  */
    __host__ __device__ int kw(void) const { return TG * B / 32; }   /* per channel */
    __host__ __device__ size_t item(size_t page, int tile) const { return page * (size_t)(G / TG) + tile; }
    __host__ __device__ size_t key_word(size_t page, int tile, int d) const
    { return page * kvq_cuda__kw_stride(D, G, B) + (size_t)d * (G * B / 32) + (size_t)tile * kw(); }
    __host__ __device__ size_t key_sz(size_t page) const { return page * (size_t)D; }
    __host__ __device__ size_t value_word(size_t page, int tile) const
    { return item(page, tile) * (size_t)(TG * D * B / 32); }
    __host__ __device__ size_t value_sz(size_t page, int tile) const
    { return item(page, tile) * (size_t)TG * gpt; }
};

#define KVQ_CUDA_TILE 32   /* tokens per fast item: a tile of a page (Sec. 4) */

/* Work items of a stream: fast items first (tiles of TG tokens),
   then slow chunks of 32. A tile is fast when all its slots are < both:
   its values are quantized, and so are its keys, whose unit (page) is
   whole because n_kq is a multiple of G. Slow chunks are 32 tokens
   (KVQ_CUDA_CHUNK in Sec. 4).                                            */
struct kvq_cuda_items {
    uint32_t n_fast, n_mixed, n_slow_tokens, n_items;
};
static __host__ __device__ __forceinline__ kvq_cuda_items
kvq_cuda_count_items(const kvq_cuda_stream &s, int TG, bool quantized)
{
    kvq_cuda_items it;
    const uint32_t n_slots = s.n_kq > s.n_vq ? s.n_kq : s.n_vq;
    const uint32_t both = s.n_kq < s.n_vq ? s.n_kq : s.n_vq;
    it.n_fast = quantized ? both / (uint32_t)TG : 0;
    it.n_mixed = quantized ? n_slots - it.n_fast * (uint32_t)TG : 0;
    it.n_slow_tokens = it.n_mixed + s.n_fp;
    it.n_items = it.n_fast + (it.n_slow_tokens + 31) / 32;
    return it;
}
/* The token layout's items: no fast tiles; every slot (n_mixed) and then
   every full-precision row, 32 tokens an item (Sec. 4's slow path).    */
static __host__ __device__ __forceinline__ kvq_cuda_items kvq_cuda_token_items(const kvq_cuda_stream &s)
{
    kvq_cuda_items it;
    it.n_fast = 0;
    it.n_mixed = s.n_kq > s.n_vq ? s.n_kq : s.n_vq;
    it.n_slow_tokens = it.n_mixed + s.n_fp;
    it.n_items = (it.n_slow_tokens + 31) / 32;
    return it;
}
/* SEALED pages: the stream's first pages whose G slots are all quantized
   on both sides. Only these may be in fragment order (Sec. 7), and the
   tensor-core kernel (Sec. 8) attends exactly these; the page still
   filling stays in kvq.h's order for Sec. 4's paths.                     */
static __host__ __device__ __forceinline__ uint32_t kvq_cuda_sealed_pages(const kvq_cuda_stream &s,
                                                                          int G)
{
    return (s.n_kq < s.n_vq ? s.n_kq : s.n_vq) / (uint32_t)G;
}

#ifndef KVQ_CUDA_DECLARE_ONLY   /* the implementation: kernels and launchers */
/* ======================================================================== */
/* 4. fused decode attention                                                */
/* ======================================================================== */
/* For every stream s and each of its n_rep query heads h (GQA: the n_rep
   heads share the stream's K and V, which are read once for all of them):
       out[s][h] = softmax_t(q[s][h] . k_t / sqrt(D)) . v_t
   over every live token t of the stream, exactly kvq_attend's function.

   Work split (flash-decoding): grid.x = streams x head chunks, grid.y =
   splits of the stream's work items. An item is a 32-token TILE of a
   page (the fast path: both sides quantized), or 32 tokens of the slow
   path (slots of a partly quantized page, then the full-precision rows).
   A tile of a G = 64/128 page is staged into the layout of a G = 32 page:
   the same arithmetic on the same codes, a quarter of a page's shared
   memory per stage, and the page's key scales re-read from L2 by each
   tile (whole pages as items were slower: bench/RESULTS.md).

       page (G = 128)   k_words ch d: [w0 w1 | w2 w3 | w4 w5 | w6 w7]   B = 2
                        tile:            t0     t1      t2      t3
                        v_words:  slots 0-31 | 32-63 | 64-95 | 96-127
                        k_sz:     all D, in every tile

   Each warp owns
   items round-robin and keeps its own online-softmax state in fp32, base 2
   (scores are pre-multiplied by log2(e)/sqrt(D), so exp becomes exp2):
       m' = max(m, max_t s_t), l' = l 2^(m-m') + sum_t 2^(s_t-m'),
       acc' = acc 2^(m-m') + sum_t 2^(s_t-m') v_t.
   Warps merge in shared memory, splits in kvq_attend_combine_kernel.

   FAST PATH, one tile (kvq.h Sec. 8's algebra; nothing is dequantized):
     keys, per-channel: q.k_t = sum_d (q_d s_d) c_td + sum_d q_d z_d.
       The warp reads the page's D * wpg_k words as 32 coalesced columns:
       lane l always holds word w = l % wpg_k (slots w*32/B .. of the unit)
       of channels d = (32c + l) / wpg_k. It accumulates 32/B partial dot
       products (one per slot of its word), then lanes that share w swap
       halves of their partials (a transposing reduction) until each lane
       holds the complete score of G/32 slots.
     values, per-token: sum_t p_t v_td = sum_t (p_t s_tg) c_td + sum_t p_t z_tg.
       Lane l always holds word j = l % wpt of a token's value (wpt = D*B/32
       words per token, so the same 32/B channels) for every 32/wpt-th slot.
     a code as a float for free: OR-ing the B code bits under the exponent
     of 1.0f gives f = 1 + c / 2^B exactly, so c = 2^B (f - 1) and
       a * c = (2^B a) * f - 2^B a:
     one shift and one logical op per code, then one FMA per query head;
     the constant part is summed once per channel or group.
   SLOW PATH, 32 tokens: each lane owns D/32 channels of every token (a
     coalesced read of the fp16 row, or the dequantized codes of a mixed
     slot), partial dot products are reduced across the warp the same
     transposing way. It serves the full-precision rows and is, with no
     pages at all, the fp16 baseline (kvq_cuda_attend with pool = NULL).
     A token-layout pool (Sec. 3: kvq.h Sec. 4.1's formats) runs it for
     every slot, each lane decoding value(c) a + b (kvq_dev_token_decode):
     a format's grid is not an affine map of the code, so the 1 + c/2^B
     trick of the fast path does not apply.                              */
#define KVQ_CUDA_WARPS 4           /* warps per CTA in the attention kernel */
/* CTAs per SM the compiler must fit for the 1-head and the 4-head kernels
   (a register cap: 65536 / (128 n) registers per thread; the pair is the
   fastest of bench/RESULTS.md's sweep), and the largest two-stage buffer
   per CTA, in KB, above which one stage.                                 */
#define KVQ_CUDA_NH1_MIN_CTAS 3
#define KVQ_CUDA_NH4_MIN_CTAS 1
#define KVQ_CUDA_STAGE2_MAX_KB 48
#define KVQ_CUDA_CHUNK 32          /* tokens per slow-path item             */
static_assert(KVQ_CUDA_CHUNK == 32, "kvq_cuda_count_items (Sec. 3) counts 32-token chunks");
#define KVQ_CUDA_MAX_SPLITS 128

/* -- warp helpers --------------------------------------------------------- */
/* Transposing reduction: p[0..N) are a lane's partial sums for N tokens;
   after STEPS exchanges (xor masks MASK0 << k), lane l holds in p[0..N>>STEPS)
   the sum over the 2^STEPS lanes {l ^ (any combination of those masks)} of
   the partials of tokens  tau(l) + i,  tau(l) = sum_k bit_k * (N >> (k+1)),
   bit_k = (l & (MASK0 << k)) != 0.                                          */
template <int N, int STEPS, int MASK0, int K = 0>
struct kvq_dev_transpose {
    static __device__ __forceinline__ void run(float (&p)[N], int lane)
    {
        if constexpr (K < STEPS) {
            constexpr int half = N >> (K + 1), mask = MASK0 << K;
            const bool upper = (lane & mask) != 0;
#pragma unroll
            for (int i = 0; i < half; i++) {
                const float send = upper ? p[i] : p[i + half];
                const float keep = upper ? p[i + half] : p[i];
                p[i] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
            }
            kvq_dev_transpose<N, STEPS, MASK0, K + 1>::run(p, lane);
        }
    }
};
template <int N, int STEPS, int MASK0>
static __device__ __forceinline__ int kvq_dev_transpose_tau(int lane)
{
    int tau = 0;
#pragma unroll
    for (int k = 0; k < STEPS; k++)
        if (lane & (MASK0 << k)) tau += N >> (k + 1);
    return tau;
}
static __device__ __forceinline__ float kvq_dev_warp_max(float x)
{
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
    return x;
}
static __device__ __forceinline__ float kvq_dev_warp_sum(float x)
{
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
    return x;
}
/* 2^(a - b) with 2^(-inf) = 0 and no NaN when both are -inf.               */
static __device__ __forceinline__ float kvq_dev_rescale(float a, float b)
{
    return (a == -INFINITY) ? 0.0f : exp2f(a - b);
}
/* Code i (compile-time) of word x as f = 1 + c / 2^B: shift the code under
   the mantissa's top bits, mask, and set the exponent of 1.0f.
   The mask-and-set is one LOP3, (moved & mask) | one with LUT 0xEA (the
   PTX rule: the operation applied to 0xF0, 0xCC, 0xAA). Written in C, the
   compiler emits two, as a SASS LOP3 takes only one immediate; passing
   1.0f's bits as a register operand lets ptxas keep them in a register
   for the whole loop: one instruction fewer per code (bench/RESULTS.md
   has the SASS counts).                                                 */
template <int B, int I>
static __device__ __forceinline__ float kvq_dev_code_f(uint32_t x)
{
    constexpr int at = I * B, to = 23 - B;            /* bit positions */
    constexpr uint32_t mask = ((1u << B) - 1u) << to;
    const uint32_t moved = (at <= to) ? (x << (to - at)) : (x >> (at - to));
#ifdef KVQ_EMU
    return __uint_as_float((moved & mask) | 0x3F800000u);
#else
    uint32_t f;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(f) : "r"(moved), "n"(mask), "r"(0x3F800000u));
    return __uint_as_float(f);
#endif
}
template <int B, int I = 0>
struct kvq_dev_codes {   /* f[i] = 1 + c_i / 2^B for the 32/B codes of x    */
    static __device__ __forceinline__ void run(uint32_t x, float (&f)[32 / B])
    {
        if constexpr (I < 32 / B) {
            f[I] = kvq_dev_code_f<B, I>(x);
            kvq_dev_codes<B, I + 1>::run(x, f);
        }
    }
};

/* One packed word of codes against one weight per query head: the shared
   inner step of both sides of the fast path (Sec. 4's algebra).
     keys:   weight = q_d,  acc[i] = partial score of slot i of the word
     values: weight = p_t,  acc[i] = output channel i of the word
   With (a, b) the group's affine map and f_i = 1 + c_i / 2^B:
     weight * (a c_i + b) = (2^B a weight) f_i + (weight b - 2^B a weight),
   so acc[i] += wa * f_i and the constant goes to cst once per word.      */
template <int B, int NH>
static __device__ __forceinline__ void kvq_dev_word_fma(uint32_t x, kvq_sz z, kvq_zero_mode mode,
                                                        const float (&weight)[NH],
                                                        float (&acc)[NH][32 / B],
                                                        float (&cst)[NH])
{
    constexpr int P = 32 / B;
    constexpr float SCALE = (float)(1u << B);
    float a, b, f[P];
    kvq_dev_affine(z, mode, &a, &b);
    kvq_dev_codes<B>::run(x, f);
#pragma unroll
    for (int h = 0; h < NH; h++) {
        const float wa = weight[h] * a * SCALE;
        cst[h] = fmaf(weight[h], b, cst[h]) - wa;
#pragma unroll
        for (int i = 0; i < P; i++) acc[h][i] = fmaf(wa, f[i], acc[h][i]);
    }
}

/* -- per-warp state ------------------------------------------------------- */
template <int D, int B, int NH>
struct kvq_dev_warp_state {
    float m[NH];                     /* running max (warp-uniform), base 2  */
    float l[NH];                     /* this lane's share of the sum        */
    float acc_f[NH][D / 32];         /* slow path: channels lane*D/32 + c    */
    float acc_q[NH][B ? 32 / (B ? B : 1) : 1];   /* fast path: channels j*32/B + i */
    float acc_b[NH];                 /* fast path: constant part, per group */
    __device__ __forceinline__ void init()
    {
#pragma unroll
        for (int h = 0; h < NH; h++) {
            m[h] = -INFINITY; l[h] = 0.0f; acc_b[h] = 0.0f;
#pragma unroll
            for (int c = 0; c < D / 32; c++) acc_f[h][c] = 0.0f;
#pragma unroll
            for (int i = 0; i < (B ? 32 / (B ? B : 1) : 1); i++) acc_q[h][i] = 0.0f;
        }
    }
};

/* Fold one batch of scores into the state: new max, rescale everything,
   and return the factor; the caller then adds 2^(s - m) terms.           */
template <int D, int B, int NH>
static __device__ __forceinline__ void kvq_dev_softmax_step(kvq_dev_warp_state<D, B, NH> &st,
                                                            int h, float batch_max,
                                                            float *m_new_out)
{
    const float m_new = fmaxf(st.m[h], batch_max);
    const float alpha = (m_new == -INFINITY) ? 1.0f : kvq_dev_rescale(st.m[h], m_new);
    st.l[h] *= alpha;
#pragma unroll
    for (int c = 0; c < D / 32; c++) st.acc_f[h][c] *= alpha;
    if constexpr (B > 0) {
#pragma unroll
        for (int i = 0; i < 32 / B; i++) st.acc_q[h][i] *= alpha;
        st.acc_b[h] *= alpha;
    }
    st.m[h] = m_new;
    *m_new_out = m_new;
}

/* -- the token layout's decode (kvq.h Sec. 4.1) ------------------------------ */
/* kvq__format_ab: (a, b) of x' = value(c) a + b for a group of format f
   with parameter p on a side of scale side_scale (not INT).            */
static __device__ __forceinline__ void kvq_dev_format_ab(int f, uint32_t p, float side_scale,
                                                         float *a, float *b)
{
    *b = 0.0f;
    if (f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6)
        *a = kvq_dev_from_minifloat(p, kvq_dev_grid(0)) * side_scale;   /* E4M3 */
    else if (f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR) *a = side_scale;
    else if (f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0) *a = kvq_dev_f16((kvq_f16)p);
    else *a = __uint_as_float(p);                  /* an fp32 scale          */
}
/* kvq__group_ab for group g of one token: INT's (s, z), or the P-bit
   parameter g of the token's packed kvq_sz words (sz: spt of them).    */
static __device__ __forceinline__ void kvq_dev_group_ab(const kvq_cuda_fside &f, float side_scale,
                                                        kvq_zero_mode mode, const kvq_sz *sz, int g,
                                                        float *a, float *b)
{
    if (f.format == KVQ_FORMAT_INT) { kvq_dev_affine(sz[g], mode, a, b); return; }
    const unsigned P = (unsigned)kvq_cuda__param_bits(f.format);
    uint32_t word = 0;
    if (P) {
        word = reinterpret_cast<const uint32_t *>(sz)[g * P / 32];
        if (P < 32) word = (word >> (g * P % 32)) & ((1u << P) - 1u);
    }
    kvq_dev_format_ab(f.format, word, side_scale, a, b);
}
/* kvq__get_code for any B (2, 3, 4, 8): code i at bit i B of the group's
   words, the high bits from the next word where it straddles (B = 3).  */
static __device__ __forceinline__ uint32_t kvq_dev_get_bits(const uint32_t *words, uint32_t i, int bits)
{
    const uint32_t bit = i * (uint32_t)bits;
    uint32_t v = words[bit / 32] >> (bit % 32);
    if (bit % 32 + (uint32_t)bits > 32) v |= words[bit / 32 + 1] << (32 - bit % 32);
    return v & ((1u << bits) - 1u);
}
/* kvq__side_token, the lane's CPL channels only: channels lane CPL ..
   of slot `slot` of one side of a token-layout pool. The CPL channels lie
   in one group (Gs is a multiple of D/32), so its (a, b) is read once;
   the table is read through the read-only cache (1 KB a side).          */
template <int D>
static __device__ __forceinline__ void kvq_dev_token_decode(const kvq_cuda_fside &f, float side_scale,
                                                            kvq_zero_mode mode,
                                                            const uint32_t *words /* pages' */,
                                                            const kvq_sz *sz /* pages' */,
                                                            size_t page, int G, uint32_t t, int lane,
                                                            float (&x)[D / 32])
{
    constexpr int CPL = D / 32;
    const size_t at = page * (size_t)G + t;                /* the token's row  */
    const uint32_t *w = words + at * kvq_cuda__tok_words(f, D);
    const int d0 = lane * CPL, g = d0 / f.group;
    float a, b;
    kvq_dev_group_ab(f, side_scale, mode, sz + at * kvq_cuda__tok_params(f, D), g, &a, &b);
    w += (size_t)g * kvq_cuda__tok_wpg(f);
#pragma unroll
    for (int c = 0; c < CPL; c++)
        x[c] = __ldg(f.value + kvq_dev_get_bits(w, (uint32_t)((d0 + c) % f.group), f.bits)) * a + b;
}

/* -- the slow path: 32 tokens from any source ----------------------------- */
/* What the token layout's source adds: the sides and this stream's side
   scales; nothing (an empty base) for Sec. 3's pages.                  */
template <int TOKEN> struct kvq_dev_token_part {};
template <> struct kvq_dev_token_part<1> {
    kvq_cuda_fside key, value;
    float k_scale, v_scale;
};
/* Where token v of the slow range comes from, and its key/value channels
   [lane*CPL, lane*CPL + CPL) as floats. TOKEN: the pool is in the token
   layout (Sec. 3), its quantized slots decoded by kvq_dev_token_decode;
   the rest (tails, fp rows, dead slots) is the same for both layouts.   */
template <int D, int B, int TOKEN = 0>
struct kvq_dev_slow_src : kvq_dev_token_part<TOKEN> {
    static constexpr int CPL = D / 32;
    const kvq_cuda_stream *s;
    kvq_cuda_pool pool;
    uint32_t slot0, n_mixed, n_total;  /* mixed slots start at slot0       */

    /* fp16 row -> CPL floats (one 2*CPL-byte load, coalesced in the warp) */
    static __device__ __forceinline__ void row(const kvq_f16 *r, int lane, float (&x)[CPL])
    {
        const __half *h = reinterpret_cast<const __half *>(r) + lane * CPL;
        if constexpr (CPL == 4) {
            const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(h));
            const __half2 a = *reinterpret_cast<const __half2 *>(&raw.x);
            const __half2 b = *reinterpret_cast<const __half2 *>(&raw.y);
            const float2 fa = __half22float2(a), fb = __half22float2(b);
            x[0] = fa.x; x[1] = fa.y; x[2] = fb.x; x[3] = fb.y;
        } else {
            const __half2 a = __ldg(reinterpret_cast<const __half2 *>(h));
            const float2 fa = __half22float2(a);
            x[0] = fa.x; x[1] = fa.y;
        }
    }
    /* Token v's key; false if it is not attended (dead or past the end). */
    __device__ __forceinline__ bool fetch_k(uint32_t v, int lane, float (&k)[CPL]) const
    {
        if constexpr (TOKEN)          /* a dead token's k is read, then dropped */
#pragma unroll
            for (int c = 0; c < CPL; c++) k[c] = 0.0f;
        if (v >= n_total) return false;
        if (v >= n_mixed) {                       /* a full-precision row  */
            row(s->k_fp + (size_t)(v - n_mixed) * D, lane, k);
            return true;
        }
        const uint32_t slot = slot0 + v;
        if (s->dead && ((s->dead[slot >> 5] >> (slot & 31)) & 1u)) return false;
        if constexpr (TOKEN) {
            const int G = pool.group;
            if (slot < s->n_kq)                   /* per-token, a format   */
                kvq_dev_token_decode<D>(this->key, this->k_scale, pool.zero_mode, pool.k_words, pool.k_sz,
                                        (size_t)s->pages[slot / G], G, slot % G, lane, k);
            else
                row(s->k_tail + (size_t)(slot - s->n_kq) * D, lane, k);
        } else if constexpr (B > 0) {
            const int G = pool.group;
            if (slot < s->n_kq) {                 /* per-channel key codes */
                const size_t page = (size_t)s->pages[slot / G];
                const uint32_t *w = pool.k_words + page * kvq_cuda__kw_stride(D, G, B);
                const kvq_sz *z = pool.k_sz + page * D;
                const int wpg = G * B / 32;
#pragma unroll
                for (int c = 0; c < CPL; c++) {
                    const int d = lane * CPL + c;
                    float a, b;
                    kvq_dev_affine(z[d], pool.zero_mode, &a, &b);
                    k[c] = (float)kvq_dev_get_code(w + (size_t)d * wpg, slot % G, B) * a + b;
                }
            } else {
                row(s->k_tail + (size_t)(slot - s->n_kq) * D, lane, k);
            }
        }
        return true;
    }
    /* Token v's value (only called for tokens fetch_k found live).        */
    __device__ __forceinline__ void fetch_v(uint32_t v, int lane, float (&val)[CPL]) const
    {
        if (v >= n_mixed) {
            row(s->v_fp + (size_t)(v - n_mixed) * D, lane, val);
            return;
        }
        if constexpr (TOKEN) {
            const uint32_t slot = slot0 + v;
            const int G = pool.group;
            if (slot < s->n_vq)
                kvq_dev_token_decode<D>(this->value, this->v_scale, pool.zero_mode, pool.v_words, pool.v_sz,
                                        (size_t)s->pages[slot / G], G, slot % G, lane, val);
            else
                row(s->v_tail + (size_t)(slot - s->n_vq) * D, lane, val);
        } else if constexpr (B > 0) {
            const uint32_t slot = slot0 + v;
            const int G = pool.group, Gv = pool.value_group;
            if (slot < s->n_vq) {                 /* per-token value codes */
                const size_t page = (size_t)s->pages[slot / G];
                const uint32_t t = slot % G;
                const int wpgv = Gv * B / 32, gpt = D / Gv;
                const uint32_t *w = pool.v_words + page * kvq_cuda__vw_stride(D, G, B) +
                                    (size_t)t * gpt * wpgv;
                const kvq_sz *z = pool.v_sz + page * kvq_cuda__vs_stride(D, G, Gv) +
                                  (size_t)t * gpt;
#pragma unroll
                for (int c = 0; c < CPL; c++) {
                    const int d = lane * CPL + c, g = d / Gv;
                    float a, b;
                    kvq_dev_affine(z[g], pool.zero_mode, &a, &b);
                    val[c] = (float)kvq_dev_get_code(w + (size_t)g * wpgv, d % Gv, B) * a + b;
                }
            } else {
                row(s->v_tail + (size_t)(slot - s->n_vq) * D, lane, val);
            }
        }
    }
};

/* 32 tokens v0 .. v0+31 of the slow range, in two halves of 16 so that a
   lane holds 16 partial sums per head at a time.                          */
template <int D, int B, int NH, int TOKEN>
static __device__ void kvq_dev_slow_item(const kvq_dev_slow_src<D, B, TOKEN> &src, uint32_t v0,
                                         const float (&qf)[NH][D / 32],
                                         kvq_dev_warp_state<D, B, NH> &st,
                                         float *pbuf /* (NH, 32) this warp's */, int lane)
{
    constexpr int CPL = D / 32, HALF = 16;
    float score[NH][2];
    /* keys: partial dot products over this lane's channels, then the warp
       sum via a transposing reduction (masks 1,2,4,8) and one plain step  */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float part[NH][HALF];
#pragma unroll
        for (int i = 0; i < HALF; i++) {
            float k[CPL];
            const bool live = src.fetch_k(v0 + half * HALF + i, lane, k);
#pragma unroll
            for (int h = 0; h < NH; h++) {
                float dot = 0.0f;
#pragma unroll
                for (int c = 0; c < CPL; c++) dot = fmaf(qf[h][c], k[c], dot);
                part[h][i] = live ? dot : -INFINITY;   /* -inf survives the sum */
            }
        }
#pragma unroll
        for (int h = 0; h < NH; h++) {
            kvq_dev_transpose<HALF, 4, 1>::run(part[h], lane);
            score[h][half] = part[h][0] + __shfl_xor_sync(0xffffffffu, part[h][0], 16);
        }
    }
    /* lane holds tokens tau and 16 + tau, tau = bit-reversed (lane & 15)  */
    const int tau = kvq_dev_transpose_tau<HALF, 4, 1>(lane);
#pragma unroll
    for (int h = 0; h < NH; h++) {
        float m_new;
        kvq_dev_softmax_step(st, h, kvq_dev_warp_max(fmaxf(score[h][0], score[h][1])), &m_new);
        const float p0 = kvq_dev_rescale(score[h][0], m_new);
        const float p1 = kvq_dev_rescale(score[h][1], m_new);
        if (lane < 16) {                      /* lanes l and l^16 agree    */
            st.l[h] += p0 + p1;
            pbuf[h * 32 + tau] = p0;
            pbuf[h * 32 + HALF + tau] = p1;
        }
    }
    __syncwarp();
    /* values: every lane needs every token's weight: read them back, four
       rows' loads at a time. A zero weight (dead, absent, underflowed) is
       the same in every lane, so skipping its load never diverges.       */
#pragma unroll 1
    for (int i0 = 0; i0 < 32; i0 += 4) {
        float v[4][CPL], p[4][NH];
        bool use[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float any = 0.0f;
#pragma unroll
            for (int h = 0; h < NH; h++) { p[i][h] = pbuf[h * 32 + i0 + i]; any += p[i][h]; }
            use[i] = any > 0.0f;
            if (use[i]) src.fetch_v(v0 + i0 + i, lane, v[i]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (use[i])
#pragma unroll
                for (int h = 0; h < NH; h++)
#pragma unroll
                    for (int c = 0; c < CPL; c++)
                        st.acc_f[h][c] = fmaf(p[i][h], v[i][c], st.acc_f[h][c]);
    }
    __syncwarp();
}

/* -- the fast path: one page, both sides quantized -------------------------- */
/* A page is staged into shared memory with cp.async (16 bytes per lane per
   instruction, no registers held while in flight), one buffer per stage:
     [ k_words: D*wpg_k words | k_sz: D | v_words: G*wpt words | v_sz: G*D/Gv ]
   Two stages per warp: the next page's copy is in flight while this one
   is computed, which is what keeps enough bytes moving to approach the
   memory bandwidth (a warp's page is only 3 KB at B = 2, G = 32).       */
template <int D, int B, int G>
struct kvq_dev_page {
    static constexpr int KWB = D * G * B / 8;        /* key code bytes     */
    static constexpr int KSB = D * 4;                /* key (s, z) bytes   */
    static constexpr int VWB = G * D * B / 8;        /* value code bytes   */
    static constexpr int VSB_MAX = G * (D * B / 32) * 4;   /* Gv >= 32/B  */
    static constexpr int BYTES = KWB + KSB + VWB + VSB_MAX;
};
/* N bytes (8 or 16, both addresses N-aligned) global -> shared, async;
   16-byte copies bypass L1 (.cg), 8-byte ones may only go through it.   */
template <int N>
static __device__ __forceinline__ void kvq_dev_cp(void *smem, const void *gmem)
{
    static_assert(N == 8 || N == 16, "cp.async copies 8 or 16 bytes here");
#if defined(KVQ_EMU)
    kvq_emu::cp_async(__FILE__, __LINE__, smem, gmem, N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    if constexpr (N == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(a), "l"(gmem));
#else
    if constexpr (N == 16) *(uint4 *)smem = *(const uint4 *)gmem;
    else *(uint2 *)smem = *(const uint2 *)gmem;
#endif
}
static __device__ __forceinline__ void kvq_dev_cp_commit(void)
{
#if defined(KVQ_EMU)
    kvq_emu::cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
static __device__ __forceinline__ void kvq_dev_cp_wait(void)
{
#if defined(KVQ_EMU)
    kvq_emu::cp_async_wait(__FILE__, __LINE__, N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
/* The warp copies `bytes` (a multiple of 16) from global to shared.       */
static __device__ __forceinline__ void kvq_dev_warp_copy(unsigned char *dst, const void *src,
                                                         int bytes, int lane)
{
    const unsigned char *s8 = (const unsigned char *)src;
    for (int i = lane * 16; i < bytes; i += 32 * 16) kvq_dev_cp<16>(dst + i, s8 + i);
}
/* The same with the lane's source already at its first 16 bytes (src_lane
   = src + 16 lane: a pointer a loop carries, kvq_mma_chunks_staged).    */
static __device__ __forceinline__ void kvq_dev_warp_copy_lane(unsigned char *dst, const unsigned char *src_lane,
                                                              int bytes, int lane)
{
    for (int i = lane * 16; i < bytes; i += 32 * 16) kvq_dev_cp<16>(dst + i, src_lane + (i - lane * 16));
}
/* Stage fast item `tile` of pool page `page` (KVQ_CUDA_TILE tokens) into
   buf, laid out exactly as a page of that many tokens would be, so that
   kvq_dev_fast_item reads it unchanged; the sources are kvq_cuda_tile_src's
   (Sec. 3). A tile's key codes are a column slice of the page: WPT = 2 or
   4 words of each channel's G*B/32 (one 8- or 16-byte copy per channel;
   at G = 32 the slices are the whole page, one contiguous copy). Its
   values and value (s, z) are contiguous rows of the page; its key (s, z)
   are the page's, all D.                                                 */
template <int D, int B>
static __device__ __forceinline__ void kvq_dev_stage_tile(const kvq_cuda_pool &pool,
                                                          size_t page, int tile,
                                                          unsigned char *buf, int lane)
{
    constexpr int TG = KVQ_CUDA_TILE;
    typedef kvq_dev_page<D, B, TG> PT;
    constexpr int WPT = TG * B / 32;               /* key words per channel */
    static_assert(WPT == 2 || WPT == 4, "tile geometry");
    const kvq_cuda_tile_src at = { D, B, pool.group, TG, D / pool.value_group };
    const int vsb = TG * at.gpt * 4;               /* the tile's v_sz bytes */
    if (pool.group == TG) {
        kvq_dev_warp_copy(buf, pool.k_words + at.key_word(page, 0, 0), PT::KWB, lane);
    } else {
        for (int d = lane; d < D; d += 32)
            kvq_dev_cp<WPT * 4>(buf + d * WPT * 4, pool.k_words + at.key_word(page, tile, d));
    }
    kvq_dev_warp_copy(buf + PT::KWB, pool.k_sz + at.key_sz(page), PT::KSB, lane);
    kvq_dev_warp_copy(buf + PT::KWB + PT::KSB, pool.v_words + at.value_word(page, tile), PT::VWB, lane);
    kvq_dev_warp_copy(buf + PT::KWB + PT::KSB + PT::VWB, pool.v_sz + at.value_sz(page, tile), vsb, lane);
}

/* The fast path's geometry for a page (or tile) of G tokens.            */
template <int D, int B, int G>
struct kvq_dev_fast_shape {
    static constexpr int P = 32 / B;                 /* codes per word            */
    static constexpr int WPG = G * B / 32;           /* key words per channel     */
    static constexpr int KW = D * WPG / 32;          /* key words per lane        */
    static constexpr int L = 32 / WPG;               /* lanes sharing a word column */
    static constexpr int LOGL = (L >= 32) ? 5 : (L >= 16) ? 4 : (L >= 8) ? 3 : (L >= 4) ? 2 : (L >= 2) ? 1 : 0;
    static constexpr int SPL = P >> LOGL;            /* scores per lane = G / 32   */
    static constexpr int WPT = D * B / 32;           /* value words per token     */
    static constexpr int VW = G * WPT / 32;          /* value words per lane      */
    static_assert(SPL * 32 == G, "fast-path geometry");
    static_assert(32 % WPG == 0 && 32 % WPT == 0, "a word column must fit a warp");
};

/* Keys: partial scores for the P slots of this lane's word, completed
   across the L lanes of each word column: score[h][i] is slot
   w P + tau + i's (-inf if dead).                                        */
template <int D, int B, int G, int NH>
static __device__ __forceinline__ void kvq_dev_fast_scores(const uint32_t *kw, const kvq_sz *ks,
                                                           kvq_zero_mode mode, const kvq_cuda_stream *s,
                                                           uint32_t slot0, const float *qs, int lane,
                                                           float (&score)[NH][kvq_dev_fast_shape<D, B, G>::SPL])
{
    typedef kvq_dev_fast_shape<D, B, G> F;
    constexpr int P = F::P, WPG = F::WPG, KW = F::KW, LOGL = F::LOGL, SPL = F::SPL;
    float part[NH][P], cst[NH];
#pragma unroll
    for (int h = 0; h < NH; h++) {
        cst[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < P; i++) part[h][i] = 0.0f;
    }
    constexpr int CH = (KW < 8) ? KW : 8;     /* words in flight per lane  */
#pragma unroll
    for (int c0 = 0; c0 < KW; c0 += CH) {
        uint32_t x[CH];
        kvq_sz z[CH];
#pragma unroll
        for (int c = 0; c < CH; c++) {
            x[c] = kw[(c0 + c) * 32 + lane];
            z[c] = ks[((c0 + c) * 32 + lane) / WPG];
        }
#pragma unroll
        for (int c = 0; c < CH; c++) {
            const int d = ((c0 + c) * 32 + lane) / WPG;
            float q[NH];
#pragma unroll
            for (int h = 0; h < NH; h++) q[h] = qs[h * D + d];
            kvq_dev_word_fma<B, NH>(x[c], z[c], mode, q, part, cst);
        }
    }
    const int w = lane % WPG;
    const int tau = kvq_dev_transpose_tau<P, LOGL, WPG>(lane);
#pragma unroll
    for (int h = 0; h < NH; h++) {
        kvq_dev_transpose<P, LOGL, WPG>::run(part[h], lane);
#pragma unroll
        for (int k = 0; k < LOGL; k++) cst[h] += __shfl_xor_sync(0xffffffffu, cst[h], WPG << k);
#pragma unroll
        for (int i = 0; i < SPL; i++) {
            const uint32_t slot = slot0 + w * P + tau + i;
            const bool dead = s->dead && ((s->dead[slot >> 5] >> (slot & 31)) & 1u);
            score[h][i] = dead ? -INFINITY : part[h][i] + cst[h];
        }
    }
}

/* Softmax: fold the scores into the state, their weights into pbuf.     */
template <int D, int B, int G, int NH>
static __device__ __forceinline__ void kvq_dev_fast_softmax(const float (&score)[NH][kvq_dev_fast_shape<D, B, G>::SPL],
                                                            kvq_dev_warp_state<D, B, NH> &st,
                                                            float *pbuf /* (NH, G) */, int lane)
{
    typedef kvq_dev_fast_shape<D, B, G> F;
    constexpr int P = F::P, WPG = F::WPG, LOGL = F::LOGL, SPL = F::SPL;
    const int w = lane % WPG;
    const int tau = kvq_dev_transpose_tau<P, LOGL, WPG>(lane);
#pragma unroll
    for (int h = 0; h < NH; h++) {
        float mx = -INFINITY, m_new;
#pragma unroll
        for (int i = 0; i < SPL; i++) mx = fmaxf(mx, score[h][i]);
        kvq_dev_softmax_step(st, h, kvq_dev_warp_max(mx), &m_new);
#pragma unroll
        for (int i = 0; i < SPL; i++) {
            const float p = kvq_dev_rescale(score[h][i], m_new);
            st.l[h] += p;
            pbuf[h * G + w * P + tau + i] = p;
        }
    }
}

/* Values: word j = lane % WPT of every 32/WPT-th slot's value, times the
   slot's weights from pbuf, into acc_q and acc_b.                       */
template <int D, int B, int G, int NH>
static __device__ __forceinline__ void kvq_dev_fast_values(const uint32_t *vw, const kvq_sz *vs,
                                                           int value_group, kvq_zero_mode mode,
                                                           const float *pbuf /* (NH, G) */,
                                                           kvq_dev_warp_state<D, B, NH> &st, int lane)
{
    typedef kvq_dev_fast_shape<D, B, G> F;
    constexpr int P = F::P, WPT = F::WPT, VW = F::VW;
    const int gpt = D / value_group;          /* value groups per token     */
    const int j = lane % WPT;
    const int g = (j * P) / value_group;      /* this lane's value group */
    constexpr int CHV = (VW < 8) ? VW : 8;
#pragma unroll
    for (int c0 = 0; c0 < VW; c0 += CHV) {
        uint32_t x[CHV];
        kvq_sz z[CHV];
#pragma unroll
        for (int c = 0; c < CHV; c++) {
            const int t = ((c0 + c) * 32 + lane) / WPT;
            x[c] = vw[(c0 + c) * 32 + lane];
            z[c] = vs[t * gpt + g];
        }
#pragma unroll
        for (int c = 0; c < CHV; c++) {
            const int t = ((c0 + c) * 32 + lane) / WPT;
            float p[NH];
#pragma unroll
            for (int h = 0; h < NH; h++) p[h] = pbuf[h * G + t];
            kvq_dev_word_fma<B, NH>(x[c], z[c], mode, p, st.acc_q, st.acc_b);
        }
    }
}

/* One staged page or tile of G tokens (KVQ_CUDA_TILE: a tile's staged
   layout is a page of that many tokens); slot0 = the stream slot of its
   first token.                                                            */
template <int D, int B, int G, int NH>
static __device__ void kvq_dev_fast_item(const unsigned char *buf /* a staged page or tile */,
                                         const kvq_cuda_pool &pool, const kvq_cuda_stream *s,
                                         uint32_t slot0, const float *qs /* (NH, D) smem */,
                                         kvq_dev_warp_state<D, B, NH> &st,
                                         float *pbuf /* (NH, G) */, int lane)
{
    typedef kvq_dev_page<D, B, G> PG;
    const uint32_t *kw = (const uint32_t *)buf;
    const kvq_sz *ks = (const kvq_sz *)(buf + PG::KWB);
    const uint32_t *vw = (const uint32_t *)(buf + PG::KWB + PG::KSB);
    const kvq_sz *vs = (const kvq_sz *)(buf + PG::KWB + PG::KSB + PG::VWB);
    float score[NH][kvq_dev_fast_shape<D, B, G>::SPL];
    kvq_dev_fast_scores<D, B, G, NH>(kw, ks, pool.zero_mode, s, slot0, qs, lane, score);
    kvq_dev_fast_softmax<D, B, G, NH>(score, st, pbuf, lane);
    __syncwarp();
    kvq_dev_fast_values<D, B, G, NH>(vw, vs, pool.value_group, pool.zero_mode, pbuf, st, lane);
    __syncwarp();
}

/* -- the CTA's two ends, shared with the tensor-core kernel (Sec. 8) ------ */
/* The NH query heads h0.. of a stream into shared memory, pre-scaled by
   log2(e)/sqrt(D) (scores in base 2); heads past n_rep are zero.          */
template <int D, int NH>
static __device__ __forceinline__ void kvq_dev_load_queries(float *qs /* (NH, D) smem */,
                                                            const float *q, int stream_id,
                                                            int n_rep, int h0)
{
    const float qscale = 1.4426950408889634f / sqrtf((float)D);
    for (int i = threadIdx.x; i < NH * D; i += blockDim.x) {
        const int h = h0 + i / D;
        qs[i] = (h < n_rep) ? q[((size_t)stream_id * n_rep + h) * D + i % D] * qscale : 0.0f;
    }
}
/* The warps' (m, l, acc) in shared memory -> this split's partial result:
   work[stream][h0 + h][split] = (M, L, acc[D]) with M the warps' max.    */
/* SWZ (the tensor-core kernel): channel c of head h lies at h D + (c ^
   8 (h % 4)) (kvq_dev_acc_at), where the 4 heads' stores of one channel
   would share a bank (lanes gid x tig write channel 16 mt + gid (+ 8)
   of head tig: 4-way conflicts); the XOR moves bits 3-4 within each
   32-channel block, so the 32 lanes' words lie in 32 banks.            */
template <int D, int SWZ>
static __device__ __forceinline__ int kvq_dev_acc_at(int h, int c)
{
    return h * D + (SWZ ? c ^ (8 * (h & 3)) : c);
}
template <int D, int NH, int WARPS, int SWZ = 0>
static __device__ __forceinline__ void kvq_dev_write_split(const float (&red_acc)[WARPS][NH * D],
                                                           const float (&red_ml)[WARPS][2 * NH],
                                                           float *work, int stream_id, int n_rep,
                                                           int h0, int split, int n_splits)
{
    for (int i = threadIdx.x; i < NH * (D + 2); i += blockDim.x) {
        const int h = i / (D + 2), e = i % (D + 2);
        if (h0 + h >= n_rep) continue;
        float M = -INFINITY;
        for (int w2 = 0; w2 < WARPS; w2++) M = fmaxf(M, red_ml[w2][2 * h]);
        float sum = 0.0f;
        for (int w2 = 0; w2 < WARPS; w2++) {
            const float f = kvq_dev_rescale(red_ml[w2][2 * h], M);
            sum += f * (e == 0 ? 0.0f : e == 1 ? red_ml[w2][2 * h + 1]
                                                : red_acc[w2][kvq_dev_acc_at<D, SWZ>(h, e - 2)]);
        }
        float *dst = work + (((size_t)stream_id * n_rep + h0 + h) * n_splits + split) * (D + 2);
        dst[e] = (e == 0) ? M : sum;
    }
}

/* The warp's fast items item, item + KVQ_CUDA_WARPS, ... below
   fast_end = min(n_fast, last):
   with two stages the next item's copy is in flight while this one is
   computed; one stage when two do not fit (stage_smem: the dynamic
   shared memory, n_stages item buffers per warp). item ends past them.  */
template <int D, int B, int NH>
static __device__ __forceinline__ void kvq_dev_fast_items(const kvq_cuda_pool &pool,
                                                              const kvq_cuda_stream *s, uint32_t &item,
                                                              uint32_t n_fast, uint32_t last,
                                                              int n_stages,
                                                              unsigned char *stage_smem, int warp,
                                                              const float *qs,
                                                              kvq_dev_warp_state<D, B, NH> &st,
                                                              float *pbuf, int lane)
{
    constexpr int TG = KVQ_CUDA_TILE;
    typedef kvq_dev_page<D, B, TG> PT;
    const uint32_t TPP = (uint32_t)pool.group / TG;   /* tiles per page */
    const int vsb = TG * (D / pool.value_group) * 4;
    const int pb = PT::KWB + PT::KSB + PT::VWB + vsb;      /* item bytes */
    unsigned char *mine = stage_smem + (size_t)warp * n_stages * pb;
    const uint32_t fast_end = n_fast < last ? n_fast : last;
    auto stage_item = [&](uint32_t i, unsigned char *buf) {
        kvq_dev_stage_tile<D, B>(pool, (size_t)s->pages[i / TPP], (int)(i % TPP), buf, lane);
    };
    if (n_stages == 2) {
        int stage = 0;
        if (item < fast_end) stage_item(item, mine);
        kvq_dev_cp_commit();
        for (; item < fast_end; item += KVQ_CUDA_WARPS) {
            const uint32_t next = item + KVQ_CUDA_WARPS;
            if (next < fast_end) stage_item(next, mine + (stage ^ 1) * pb);
            kvq_dev_cp_commit();
            kvq_dev_cp_wait<1>();          /* this item has landed      */
            __syncwarp();
            kvq_dev_fast_item<D, B, TG, NH>(mine + stage * pb, pool, s, item * TG, qs, st, pbuf, lane);
            stage ^= 1;                    /* fast_item ends in __syncwarp */
        }
        kvq_dev_cp_wait<0>();
    } else {
        for (; item < fast_end; item += KVQ_CUDA_WARPS) {
            stage_item(item, mine);
            kvq_dev_cp_commit();
            kvq_dev_cp_wait<0>();
            __syncwarp();
            kvq_dev_fast_item<D, B, TG, NH>(mine, pool, s, item * TG, qs, st, pbuf, lane);
        }
    }
}

/* A warp's state into shared memory for kvq_dev_write_split: the two
   accumulator layouts merged (lanes with the same value word j hold
   disjoint slots: summed first), l summed over the warp, (m, l) from
   lane 0.                                                               */
template <int D, int B, int NH>
static __device__ __forceinline__ void kvq_dev_state_out(kvq_dev_warp_state<D, B, NH> &st,
                                                         float *red_acc /* (NH, D) */,
                                                         float *red_ml /* (NH, 2) */, int lane)
{
    constexpr int CPL = D / 32, P = B ? 32 / (B ? B : 1) : 1;
#pragma unroll
    for (int h = 0; h < NH; h++) {
        st.l[h] = kvq_dev_warp_sum(st.l[h]);
#pragma unroll
        for (int c = 0; c < CPL; c++) red_acc[h * D + lane * CPL + c] = st.acc_f[h][c];
    }
    if constexpr (B > 0) {
        constexpr int WPT = D * B / 32;
#pragma unroll
        for (int m = WPT; m < 32; m <<= 1)
#pragma unroll
            for (int h = 0; h < NH; h++) {
                st.acc_b[h] += __shfl_xor_sync(0xffffffffu, st.acc_b[h], m);
#pragma unroll
                for (int i = 0; i < P; i++)
                    st.acc_q[h][i] += __shfl_xor_sync(0xffffffffu, st.acc_q[h][i], m);
            }
        __syncwarp();
        if (lane < WPT)
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int i = 0; i < P; i++)
                    red_acc[h * D + lane * P + i] += st.acc_q[h][i] + st.acc_b[h];
    }
    if (lane == 0)
#pragma unroll
        for (int h = 0; h < NH; h++) { red_ml[2 * h] = st.m[h]; red_ml[2 * h + 1] = st.l[h]; }
}

/* -- the kernel ------------------------------------------------------------- */
/* Partial result of one split: m, l, acc[D], per (stream, head, split).
   B = 0: the fp16 baseline (no pages). Its splits are work's splits
   split0 .. split0 + gridDim.y - 1 of n_splits. skip_sealed: leave out
   the stream's sealed pages (Sec. 8's kernel attends them). status_reset:
   the call's status word, zeroed here by one thread (kvq_dev_status_reset)
   when not NULL. TOKEN (with B = 0): a token-layout pool (Sec. 3, kvq.h
   Sec. 4.1's formats) described by tok, every item a slow one whose slots
   decode per lane (kvq_dev_token_decode); the split, the softmax state
   and the combine are the same code. The other kernels never read tok. */
template <int D, int B, int NH, int TOKEN = 0>
__global__ void __launch_bounds__(KVQ_CUDA_WARPS * 32, NH == 1 ? KVQ_CUDA_NH1_MIN_CTAS : KVQ_CUDA_NH4_MIN_CTAS)
kvq_attend_kernel(kvq_cuda_pool pool, const kvq_cuda_stream *__restrict__ streams,
                  int n_rep, int n_hchunks, const float *__restrict__ q /* (S, n_rep, D) */,
                  float *__restrict__ work /* (S, n_rep, splits, D + 2) */, int n_stages,
                  int split0, int n_splits, int skip_sealed, int *status_reset, kvq_cuda_token tok)
{
    static_assert(!TOKEN || B == 0, "the token layout has no fast path (B = 0)");
    kvq_dev_status_reset(status_reset);
    constexpr int CPL = D / 32;
    constexpr int TG = KVQ_CUDA_TILE, PB = 32;     /* pbuf length per head  */
    KVQ_CUDA_SHARED(float, qs, [NH * D]);
    KVQ_CUDA_SHARED(float, pbuf, [KVQ_CUDA_WARPS][NH * PB]);
    KVQ_CUDA_SHARED(float, red_acc, [KVQ_CUDA_WARPS][NH * D]);
    KVQ_CUDA_SHARED(float, red_ml, [KVQ_CUDA_WARPS][2 * NH]);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int stream_id = blockIdx.x / n_hchunks, h0 = (blockIdx.x % n_hchunks) * NH;
    const int split = blockIdx.y, n_my_splits = gridDim.y;
    const kvq_cuda_stream *s = streams + stream_id;

    kvq_dev_load_queries<D, NH>(qs, q, stream_id, n_rep, h0);
    __syncthreads();
    float qf[NH][CPL];
#pragma unroll
    for (int h = 0; h < NH; h++)
#pragma unroll
        for (int c = 0; c < CPL; c++) qf[h][c] = qs[h * D + lane * CPL + c];

    kvq_dev_warp_state<D, B, NH> st;
    st.init();
    /* this split's items: fast ones (whole tiles) first, then the slow    */
    const kvq_cuda_items it = TOKEN ? kvq_cuda_token_items(*s) : kvq_cuda_count_items(*s, TG, B > 0);
    const uint32_t skip = (B > 0 && skip_sealed) ? kvq_cuda_sealed_pages(*s, pool.group) *
                                                   ((uint32_t)pool.group / TG) : 0;
    const uint32_t per = (it.n_items - skip + n_my_splits - 1) / n_my_splits;
    const uint32_t first = skip + split * per;
    const uint32_t last = (first + per < it.n_items) ? first + per : it.n_items;
    kvq_dev_slow_src<D, B, TOKEN> src;
    src.s = s;
    src.pool = pool;
    src.slot0 = it.n_fast * (uint32_t)TG;
    src.n_mixed = it.n_mixed;
    src.n_total = it.n_slow_tokens;
    if constexpr (TOKEN) {
        src.key = tok.key;
        src.value = tok.value;
        src.k_scale = tok.scales[2 * stream_id];
        src.v_scale = tok.scales[2 * stream_id + 1];
    }
    uint32_t item = first + warp;
    if constexpr (B > 0) {
        KVQ_CUDA_SHARED_DYNAMIC(unsigned char, kvq_dev_stage);
        kvq_dev_fast_items<D, B, NH>(pool, s, item, it.n_fast, last, n_stages, kvq_dev_stage, warp,
                                     qs, st, pbuf[warp], lane);
    }
    for (; item < last; item += KVQ_CUDA_WARPS)
        kvq_dev_slow_item<D, B, NH, TOKEN>(src, (item - it.n_fast) * KVQ_CUDA_CHUNK, qf, st,
                                    pbuf[warp], lane);

    kvq_dev_state_out<D, B, NH>(st, red_acc[warp], red_ml[warp], lane);
    __syncthreads();
    kvq_dev_write_split<D, NH, KVQ_CUDA_WARPS>(red_acc, red_ml, work, stream_id, n_rep, h0,
                                               split0 + split, n_splits);
}

/* One (stream, head) per CTA: merge the splits, divide, check q.          */
template <int D>
__global__ void kvq_attend_combine_kernel(const float *__restrict__ work, int n_splits,
                                          const float *__restrict__ q, float *__restrict__ out,
                                          int *status)
{
    const size_t row = blockIdx.x;            /* stream * n_rep + head     */
    const float *wk = work + row * n_splits * (D + 2);
    KVQ_CUDA_SHARED(int, q_bad, );
    if (threadIdx.x == 0) q_bad = 0;
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        if (!kvq_dev_finite(q[row * D + d])) q_bad = 1;
    float M = -INFINITY;
    for (int sp = 0; sp < n_splits; sp++) M = fmaxf(M, wk[sp * (D + 2)]);
    float L = 0.0f;
    for (int sp = 0; sp < n_splits; sp++)
        L += kvq_dev_rescale(wk[sp * (D + 2)], M) * wk[sp * (D + 2) + 1];
    __syncthreads();
    const bool bad = q_bad || !(L > 0.0f) || !kvq_dev_finite(L);
    if (bad && threadIdx.x == 0)
        kvq_dev_report(status, q_bad ? KVQ_ERR_NONFINITE : KVQ_ERR_STATE);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int sp = 0; sp < n_splits; sp++)
            a += kvq_dev_rescale(wk[sp * (D + 2)], M) * wk[sp * (D + 2) + 2 + d];
        out[row * D + d] = bad ? __int_as_float(0x7fc00000) : a / L;
    }
}

/* Splits: enough CTAs to fill the GPU a few times over, but at least
   KVQ_CUDA_WARPS items per split so that no warp idles from the start.   */
static int kvq_cuda__splits(size_t n_ctas, size_t max_items)
{
    const int sms = kvq_cuda__sm_count();
    const size_t want = (size_t)sms * 8;      /* CTAs for ~full occupancy  */
    size_t splits = (want + n_ctas - 1) / n_ctas;
    const size_t by_items = max_items / (2 * KVQ_CUDA_WARPS);
    if (splits > by_items) splits = by_items;
    if (splits < 1) splits = 1;
    if (splits > KVQ_CUDA_MAX_SPLITS) splits = KVQ_CUDA_MAX_SPLITS;
    return (int)splits;
}

/* Query heads per CTA: 1, or 4 (n_rep = 2 or 3 run as 4 with the extra
   heads' queries zero and their outputs dropped; 8 as two chunks of 4).  */
static int kvq_cuda__nh(int n_rep) { return n_rep == 1 ? 1 : 4; }

/* Floats of workspace kvq_cuda_attend needs; also returns its split count.
   max_tokens: an upper bound on any stream's n_slots + n_fp (it only
   chooses the split count; each CTA reads its stream's true sizes).     */
extern "C" size_t kvq_cuda_attend_workspace(size_t n_streams, int n_rep, int head_dim,
                                            int group, size_t max_tokens, int *n_splits)
{
    const int nh = kvq_cuda__nh(n_rep > 0 ? n_rep : 1);
    const size_t n_hchunks = (size_t)((n_rep + nh - 1) / nh);
    const size_t g = group > 0 ? (size_t)group : KVQ_CUDA_CHUNK;
    const size_t max_items = max_tokens / (g < KVQ_CUDA_CHUNK ? g : KVQ_CUDA_CHUNK) + 2;
    const int sp = kvq_cuda__splits(n_streams * n_hchunks, max_items);
    if (n_splits) *n_splits = sp;
    return n_streams * (size_t)(n_rep > 0 ? n_rep : 1) * (size_t)sp * (size_t)(head_dim + 2);
}

/* Instantiation table: D x B x NH (B = 0: the fp16 baseline); the page
   size G is a run-time value of the pool.                                 */
typedef void (*kvq_cuda__attn_fn)(kvq_cuda_pool, const kvq_cuda_stream *, int, int,
                                  const float *, float *, int, int, int, int, int *, kvq_cuda_token);
template <int D, int B>
static kvq_cuda__attn_fn kvq_cuda__pick_nh(int nh)
{
    return nh == 4 ? kvq_attend_kernel<D, B, 4> : kvq_attend_kernel<D, B, 1>;
}
/* B = -1: the token layout (kvq_attend_kernel's TOKEN, a B = 0 state). */
template <int D>
static kvq_cuda__attn_fn kvq_cuda__pick_b(int B, int nh)
{
    if (B == -1) return nh == 4 ? kvq_attend_kernel<D, 0, 4, 1> : kvq_attend_kernel<D, 0, 1, 1>;
    return B == 0 ? kvq_cuda__pick_nh<D, 0>(nh)
         : B == 2 ? kvq_cuda__pick_nh<D, 2>(nh)
         : B == 4 ? kvq_cuda__pick_nh<D, 4>(nh) : nullptr;
}

/* The pool's basis around an attention launch, in kvq_attend's order (q
   rotated by the key side, the output rotated back by the value side), so
   a caller passes q and reads the output in its own basis. The rotation
   is its own pass (Sec. 2.1's kernel: D log2 D adds per row, n_rep rows
   per stream, next to the stream's whole cache), not a step inside the
   attention kernels, whose registers are spent on the pages.           */
/* A token-layout pool (Sec. 3) checked on the host: bits = 0 (an INT
   pool is not one), 32, 64 or 128 slots a page, the streams' scales
   given, and side by side a format kvq.h knows at bits it takes, Gs
   dividing D into groups that hold a lane's D/32 channels (and the
   format's own group where it fixes one), a value table. The scales and
   the tables' entries are device data, the cache's own in an export: a
   NaN or Inf among them makes the row NaN and the call KVQ_ERR_STATE
   (the combine's check).                                               */
static kvq_status kvq_cuda__token_pool_ok(const kvq_cuda_pool *pool, const kvq_cuda_token *tok,
                                          int D, const char *who)
{
    if (pool->bits != 0)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: pool bits=%d: a token-layout pool has bits = 0 "
                              "(an INT pool goes to kvq_cuda_attend)", who, pool->bits);
    if (pool->group != 32 && pool->group != 64 && pool->group != 128)
        return kvq_cuda__fail(KVQ_ERR_GROUP, "%s: token layout: %d slots a page (32, 64 or 128)",
                              who, pool->group);
    if (!tok->scales) return kvq_cuda__fail(KVQ_ERR_NULL, "%s: no side scales", who);
    for (int side = 0; side < 2; side++) {
        const kvq_cuda_fside &f = side ? tok->value : tok->key;
        const char *name = side ? "value" : "key";
        if ((int)f.format < 0 || f.format >= KVQ_FORMAT_COUNT)
            return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: %s format %d unknown", who, name, (int)f.format);
        if (!kvq_format_bits_ok(f.format, f.bits) || f.bits > 8)
            return kvq_cuda__fail(KVQ_ERR_BITS, "%s: %s side: %s does not take %d bits", who, name,
                                  kvq_format_name(f.format), f.bits);
        if (f.group <= 0 || D % f.group || f.group % (D / 32) ||
            (kvq_format_group(f.format) && (size_t)f.group != kvq_format_group(f.format)))
            return kvq_cuda__fail(KVQ_ERR_GROUP, "%s: %s group %d must divide D=%d, be a multiple "
                                  "of D/32 (and %zu for %s)", who, name, f.group, D,
                                  kvq_format_group(f.format), kvq_format_name(f.format));
        if (!f.value)
            return kvq_cuda__fail(KVQ_ERR_NULL, "%s: %s side has no value table", who, name);
    }
    return KVQ_OK;
}
static kvq_status kvq_cuda__pool_rotation_ok(const kvq_cuda_pool *pool, const char *who)
{
    for (int side = 0; side < 2; side++) {
        const int r = (int)(side ? pool->value_rotation : pool->key_rotation);
        if (r < KVQ_ROT_NONE || r > KVQ_ROT_HADAMARD_SIGNS)
            return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: pool %s_rotation %d unknown (0 none, 1 "
                                  "Hadamard, 2 Hadamard with signs)", who, side ? "value" : "key", r);
    }
    return KVQ_OK;       /* D is 64 or 128: a power of two, as H_D needs   */
}
/* q (rows, D) into the pages' basis: *q_read is d_q itself, or d_q_rot
   (the launch's d_out, which only the combine writes, after the kernels
   have read it) holding q rotated. A NaN row is left unwritten there and
   not reported: the combine checks the caller's q, reports
   KVQ_ERR_NONFINITE and makes that row's output NaN (the fp32 rotation
   refuses nothing else), so the combine is the call's one reporter and
   the status word needs no memset (kvq_dev_status_reset).              */
static kvq_status kvq_cuda__query_in(const kvq_cuda_pool *pool, int D, const float *d_q,
                                     float *d_q_rot, size_t rows, cudaStream_t stream,
                                     const float **q_read)
{
    *q_read = d_q;
    if (!pool || pool->key_rotation == KVQ_ROT_NONE) return KVQ_OK;
    *q_read = d_q_rot;
    return kvq_cuda__rotate_launch(pool->key_rotation, pool->rotation_seed, (size_t)D, 0, d_q,
                                   d_q_rot, rows, (int *)nullptr, stream);
}
/* The output (rows, D) back into the caller's basis, in place. Reports
   nothing: a NaN row is the combine's marker of a failed row and stays. */
static kvq_status kvq_cuda__output_back(const kvq_cuda_pool *pool, int D, float *d_out,
                                        size_t rows, cudaStream_t stream)
{
    if (!pool || pool->value_rotation == KVQ_ROT_NONE) return KVQ_OK;
    return kvq_cuda__rotate_launch(pool->value_rotation, pool->rotation_seed, (size_t)D, 1, d_out,
                                   d_out, rows, (int *)nullptr, stream);
}

/* Decode attention (kvq_cuda_attend, kvq_cuda_attend_token below): the
   host checks, then Sec. 4's kernel and the combine. tok: NULL, or the
   token layout's other half (then pool is a token-layout pool).        */
static kvq_status kvq_cuda__attend(const char *who, const kvq_cuda_pool *pool,
                                   const kvq_cuda_token *tok, int head_dim,
                                   const kvq_cuda_stream *d_streams, size_t n_streams,
                                   int n_rep, size_t max_tokens, const float *d_q,
                                   float *d_out, float *d_work, size_t work_floats,
                                   int *d_status, cudaStream_t stream)
{
    const int D = head_dim;
    if (!d_streams || !d_q || !d_out || !d_work || !d_status || (tok && !pool))
        return kvq_cuda__fail(KVQ_ERR_NULL, "%s: NULL pointer", who);
    if (D != 64 && D != 128)
        return kvq_cuda__fail(KVQ_ERR_SIZE, "%s: head_dim=%d (the kernels are built for 64 and 128)", who, D);
    if (n_streams == 0 || n_rep <= 0)
        return kvq_cuda__fail(KVQ_ERR_SIZE, "%s: n_streams=%zu n_rep=%d must be > 0", who, n_streams, n_rep);
    const int nh = kvq_cuda__nh(n_rep);
    const size_t n_hchunks = (size_t)((n_rep + nh - 1) / nh);
    if (n_streams > (size_t)0x7fffffff / n_hchunks || n_streams * (size_t)n_rep > 0x7fffffffu)
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "%s: %zu streams x %d heads is too many for one launch",
                             who, n_streams, n_rep);
    int B = 0, G = 0;
    kvq_cuda_pool pl;
    kvq_cuda_token tk;
    memset(&pl, 0, sizeof pl);
    memset(&tk, 0, sizeof tk);
    const bool token = tok != nullptr;
    if (pool) {
        pl = *pool;
        B = pl.bits; G = pl.group;
        if (pl.head_dim != D)
            return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: pool D=%d but head_dim=%d", who, pl.head_dim, D);
        if (!pl.k_words || !pl.k_sz || !pl.v_words || !pl.v_sz)
            return kvq_cuda__fail(KVQ_ERR_NULL, "%s: pool has a NULL array", who);
    }
    if (token) {            /* kvq.h Sec. 4.1's formats: the slow path only */
        tk = *tok;
        if (pl.zero_mode != KVQ_ZERO_FLOAT && pl.zero_mode != KVQ_ZERO_INT)
            return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: zero mode %d unknown", who, (int)pl.zero_mode);
        kvq_status st = kvq_cuda__token_pool_ok(pool, tok, D, who);
        if (st == KVQ_OK) st = kvq_cuda__pool_rotation_ok(pool, who);
        if (st != KVQ_OK) return st;
        B = -1;
    } else if (pool) {
        if (B != 2 && B != 4)
            return kvq_cuda__fail(KVQ_ERR_BITS, "%s: bits=%d (the fused kernel is built for 2 and 4; "
                                  "a token-layout pool, bits 0, goes to kvq_cuda_attend_token)", who, B);
        if (G != 32 && G != 64 && G != 128)
            return kvq_cuda__fail(KVQ_ERR_GROUP, "%s: G=%d (the fused kernel takes 32, 64 or 128)", who, G);
        if (pl.value_group <= 0 || D % pl.value_group || (pl.value_group * B) % 32)
            return kvq_cuda__fail(KVQ_ERR_GROUP, "%s: value group %d must divide D=%d and fill "
                                 "whole words (Gv*B multiple of 32)", who, pl.value_group, D);
        if (pl.zero_mode != KVQ_ZERO_FLOAT && pl.zero_mode != KVQ_ZERO_INT)
            return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: zero mode %d unknown", who, (int)pl.zero_mode);
        const kvq_status st = kvq_cuda__pool_rotation_ok(pool, who);
        if (st != KVQ_OK) return st;
    }
    int n_splits;
    const size_t need = kvq_cuda_attend_workspace(n_streams, n_rep, D, pool ? G : 0,
                                                  max_tokens, &n_splits);
    if (work_floats < need)
        return kvq_cuda__fail(KVQ_ERR_CAPACITY, "%s: workspace of %zu floats, %zu needed",
                             who, work_floats, need);
    const int TG = KVQ_CUDA_TILE;                      /* tokens per fast item */
    kvq_cuda__attn_fn fn = (D == 128) ? kvq_cuda__pick_b<128>(B, nh) : kvq_cuda__pick_b<64>(B, nh);
    if (!fn) return kvq_cuda__fail(KVQ_ERR_CONFIG, "%s: no kernel for D=%d B=%d G=%d", who, D, B, G);
    /* staged tiles (Sec. 4, fast path): two per warp while a CTA's stages
       stay within 48 KB, else one (a tile is 1.4-6.5 KB: two stages,
       except D = 128, B = 4, Gv = 8 at 6.5 KB). The attribute is set
       every time because static + dynamic shared memory may pass 48 KB. */
    const size_t page_bytes = pool && !token ? (size_t)D * TG * B / 8 * 2 + (size_t)D * 4 +
                                     (size_t)TG * (D / pl.value_group) * 4 : 0;
    const int n_stages = (KVQ_CUDA_WARPS * 2 * page_bytes <= KVQ_CUDA_STAGE2_MAX_KB * 1024) ? 2 : 1;
    const size_t stage_bytes = (size_t)KVQ_CUDA_WARPS * n_stages * page_bytes;
    KVQ_CUDA_CHECK(kvq_cuda__func_smem((const void *)fn, stage_bytes));
    const unsigned rows = (unsigned)(n_streams * (size_t)n_rep);
    const float *q;
    kvq_status st = kvq_cuda__query_in(pool, D, d_q, d_out, rows, stream, &q);
    if (st != KVQ_OK) return st;
    const dim3 grid((unsigned)(n_streams * n_hchunks), (unsigned)n_splits);
    KVQ_CUDA_LAUNCH(fn, grid, KVQ_CUDA_WARPS * 32, stage_bytes, stream)(pl, d_streams, n_rep,
                                                                        (int)n_hchunks, q,
                                                                        d_work, n_stages, 0,
                                                                        n_splits, 0, d_status, tk);
    KVQ_CUDA_CHECK(cudaGetLastError());
    if (D == 128)
        KVQ_CUDA_LAUNCH(kvq_attend_combine_kernel<128>, rows, 128, 0, stream)(d_work, n_splits, d_q,
                                                                             d_out, d_status);
    else
        KVQ_CUDA_LAUNCH(kvq_attend_combine_kernel<64>, rows, 64, 0, stream)(d_work, n_splits, d_q,
                                                                           d_out, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return kvq_cuda__output_back(pool, D, d_out, rows, stream);
}

/* Decode attention. pool: NULL for the fp16 baseline (every stream has only
   k_fp/v_fp rows), else a host struct holding device pointers. d_streams:
   (n_streams) descriptors in device memory. d_q: (n_streams, n_rep, D)
   fp32; d_out the same shape. d_work: kvq_cuda_attend_workspace floats.
   head_dim: D of the streams (must equal pool->head_dim when pool != NULL).
   A rotating cache's pool (its rotation fields set) takes q and gives the
   output in the caller's basis; the baseline (no pool) over a rotating
   cache's rows takes q rotated by kvq_cuda_rotate and rotates back.     */
extern "C" kvq_status kvq_cuda_attend(const kvq_cuda_pool *pool, int head_dim,
                                       const kvq_cuda_stream *d_streams, size_t n_streams,
                                       int n_rep, size_t max_tokens, const float *d_q,
                                       float *d_out, float *d_work, size_t work_floats,
                                       int *d_status, cudaStream_t stream)
{
    return kvq_cuda__attend("kvq_cuda_attend", pool, nullptr, head_dim, d_streams, n_streams, n_rep,
                            max_tokens, d_q, d_out, d_work, work_floats, d_status, stream);
}

/* The same over a token-layout pool (Sec. 3: kvq.h Sec. 4.1's formats,
   every kvq_config_engine preset; kvq_cuda_export's layout
   KVQ_CUDA_LAYOUT_TOKEN): pool with bits = 0, tok its sides and the
   streams' side scales. Sec. 4's kernel, slow path only; the workspace
   is kvq_cuda_attend_workspace's for G = pool->group.                  */
extern "C" kvq_status kvq_cuda_attend_token(const kvq_cuda_pool *pool, const kvq_cuda_token *tok,
                                             int head_dim, const kvq_cuda_stream *d_streams,
                                             size_t n_streams, int n_rep, size_t max_tokens,
                                             const float *d_q, float *d_out, float *d_work,
                                             size_t work_floats, int *d_status, cudaStream_t stream)
{
    if (!tok) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_attend_token: NULL token description");
    return kvq_cuda__attend("kvq_cuda_attend_token", pool, tok, head_dim, d_streams, n_streams, n_rep,
                            max_tokens, d_q, d_out, d_work, work_floats, d_status, stream);
}

/* ======================================================================== */
/* 5. compaction (kvq.h Sec. 11)                                            */
/* ======================================================================== */
/* Compaction decides on the host (kvq_pseq_repack, kvq_pseq_holefill,
   kvq_cache_compact plan which slot goes where) and moves bytes on the
   device. A move list (src[i] -> dst[i], slot indices into a pool of
   slot_bytes-byte slots) is applied gather-clone-scatter: every source is
   first copied into temp, then temp is scattered to the destinations. So
   the result equals applying all moves "at once" from the old contents,
   whatever the overlaps, which is what makes an in-place repack safe
   (a destination can be another move's source). The moves' destinations
   must be distinct; sources may repeat (a clone).                         */
__global__ void kvq_gather_kernel(const uint32_t *__restrict__ pool, size_t slot_words,
                                  const int64_t *__restrict__ src, size_t n,
                                  uint32_t *__restrict__ temp)
{
    const size_t total = n * slot_words, step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step)
        temp[i] = pool[(size_t)src[i / slot_words] * slot_words + i % slot_words];
}
__global__ void kvq_scatter_kernel(uint32_t *__restrict__ pool, size_t slot_words,
                                   const int64_t *__restrict__ dst, size_t n,
                                   const uint32_t *__restrict__ temp)
{
    const size_t total = n * slot_words, step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step)
        pool[(size_t)dst[i / slot_words] * slot_words + i % slot_words] = temp[i];
}

/* d_pool: (n_slots, slot_bytes) device bytes, slot_bytes a multiple of 4.
   d_src, d_dst: (n_moves) slot indices in [0, n_slots). d_temp: n_moves *
   slot_bytes bytes. The indices are trusted to be in range: the host
   planned them (validate them there if they come from elsewhere).        */
extern "C" kvq_status kvq_cuda_move_slots(void *d_pool, size_t n_slots, size_t slot_bytes,
                                           const int64_t *d_src, const int64_t *d_dst,
                                           size_t n_moves, void *d_temp, cudaStream_t stream)
{
    if (!d_pool || !d_src || !d_dst || !d_temp)
        return n_moves == 0 && d_pool ? KVQ_OK
                                      : kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_move_slots: NULL pointer");
    if (slot_bytes == 0 || slot_bytes % 4 || n_slots == 0)
        return kvq_cuda__fail(KVQ_ERR_SIZE, "kvq_cuda_move_slots: slot_bytes=%zu (a positive multiple of 4), "
                             "n_slots=%zu", slot_bytes, n_slots);
    if (n_moves > n_slots)
        return kvq_cuda__fail(KVQ_ERR_CAPACITY, "kvq_cuda_move_slots: %zu moves into %zu slots", n_moves, n_slots);
    if (n_slots > SIZE_MAX / slot_bytes)
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "kvq_cuda_move_slots: pool size overflows size_t");
    if (n_moves == 0) return KVQ_OK;
    const size_t words = slot_bytes / 4;
    const unsigned threads = 256, blocks = kvq_cuda__grid(n_moves * words, threads);
    KVQ_CUDA_LAUNCH(kvq_gather_kernel, blocks, threads, 0, stream)((const uint32_t *)d_pool, words,
                                                                   d_src, n_moves,
                                                                   (uint32_t *)d_temp);
    KVQ_CUDA_CHECK(cudaGetLastError());
    KVQ_CUDA_LAUNCH(kvq_scatter_kernel, blocks, threads, 0, stream)((uint32_t *)d_pool, words,
                                                                    d_dst, n_moves,
                                                                    (const uint32_t *)d_temp);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}

/* Whole pool pages moved, gather-clone-scatter as above: each page's four
   parts (key words and (s, z), value words and (s, z)) go together, so a
   page in fragment order stays in it (Sec. 7: compaction moves pages,
   never tokens). d_src, d_dst: (n) pool page ids, destinations distinct,
   trusted to be in range as kvq_cuda_move_slots's are. d_temp: n * D * G
   * B / 8 bytes (one page's codes of one side, the largest part).       */
extern "C" kvq_status kvq_cuda_move_pages(const kvq_cuda_pool *pool, const int64_t *d_src,
                                           const int64_t *d_dst, size_t n, void *d_temp,
                                           cudaStream_t stream)
{
    if (!pool || !pool->k_words || !pool->k_sz || !pool->v_words || !pool->v_sz)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_move_pages: NULL pool or pool array");
    const int D = pool->head_dim, G = pool->group, Gv = pool->value_group, B = pool->bits;
    if ((D != 64 && D != 128) || (B != 2 && B != 4) || G <= 0 || G % 32 || Gv <= 0 || D % Gv ||
        (Gv * B) % 32)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_move_pages: D=%d G=%d Gv=%d B=%d is not a "
                              "pool shape", D, G, Gv, B);
    void *const part[4] = { pool->k_words, pool->k_sz, pool->v_words, pool->v_sz };
    const size_t bytes[4] = { kvq_cuda__kw_stride(D, G, B) * 4, (size_t)D * sizeof(kvq_sz),
                              kvq_cuda__vw_stride(D, G, B) * 4,
                              kvq_cuda__vs_stride(D, G, Gv) * sizeof(kvq_sz) };
    for (int i = 0; i < 4; i++) {          /* one stream: temp is reused in order */
        const kvq_status st = kvq_cuda_move_slots(part[i], pool->n_pages, bytes[i], d_src, d_dst,
                                                  n, d_temp, stream);
        if (st != KVQ_OK) return st;
    }
    return KVQ_OK;
}

#endif /* KVQ_CUDA_DECLARE_ONLY */

/* ======================================================================== */
/* 6. host: a kvq_cache exported to the paged format                        */
/* ======================================================================== */
/* kvq_cache_export turns one CPU cache (kvq.h) into the parts of one GPU
   stream, in host memory: its pages (contiguous here; the caller places
   them into any pool pages), the dead bits, the tails and the fp rows.
   The bytes of the pages are the cache's own words and scales, unchanged:
   the GPU attends exactly the cache the CPU built. Needs kvq.h's
   implementation linked in (KVQ_IMPLEMENTATION in some host TU).

   Supported: keys per-channel, values per-token, B in {2, 4} on both
   sides, G in {32, 64, 128}, Gv*B a multiple of 32, fp16 rows, and the
   two sides' quantized slots aligned (slot s holds the same position on
   both sides where both are quantized: true for KIVI, OTT, LogQuant and
   eviction without compaction; a compacted KIVI cache compacts K by
   groups and V by tokens, so its slots no longer align).
   Or, KVQ_CUDA_LAYOUT_TOKEN (Sec. 3): both sides per token, each side INT
   or any format of kvq.h Sec. 4.1 at any bits it takes (every
   kvq_config_engine preset), groups dividing D in multiples of D/32;
   pages of 32 slots. The words and kvq_sz words are again the cache's
   own bytes, and with them go what kvq__group_ab reads besides: the
   side's scale and its value table.                                    */
typedef struct kvq_cuda_export_t {
    size_t    n_pages;
    uint32_t *k_words;   /* (n_pages, D, wpg_k)                            */
    kvq_sz   *k_sz;      /* (n_pages, D)                                   */
    uint32_t *v_words;   /* (n_pages, G, D/Gv, wpg_v)                      */
    kvq_sz   *v_sz;      /* (n_pages, G, D/Gv)                             */
    uint32_t *dead;      /* (ceil(n_slots / 32))                           */
    kvq_f16  *k_tail, *v_tail, *k_fp, *v_fp;   /* (rows, D) each           */
    uint32_t  n_kq, n_vq, n_fp;
    int       head_dim, group, value_group, bits;
    kvq_zero_mode zero_mode;
    /* the basis of every row and page above: the cache's kvq_config fields
       (kvq.h Sec. 6.1), for kvq_cuda_pool's fields of the same names     */
    kvq_rotation key_rotation, value_rotation;
    uint64_t  rotation_seed;
    /* the token layout: 0 or KVQ_CUDA_LAYOUT_TOKEN (then bits = 0), the
       sides (their .value NULL: the tables are the two below, host
       memory, of which kvq_cuda_token's sides take device copies) and
       the stream's side scales, for kvq_cuda_token's scales            */
    int       layout;
    kvq_cuda_fside key, value;
    float     key_value[256], value_value[256];   /* the sides' value[] */
    float     k_scale, v_scale;   /* the sides' scales, for kvq_cuda_stream */
} kvq_cuda_export_t;

#ifndef KVQ_CUDA_DECLARE_ONLY   /* the implementation: kernels and launchers */
extern "C" void kvq_cuda_export_free(kvq_cuda_export_t *e)
{
    if (!e) return;
    free(e->k_words); free(e->k_sz); free(e->v_words); free(e->v_sz); free(e->dead);
    free(e->k_tail); free(e->v_tail); free(e->k_fp); free(e->v_fp);
    memset(e, 0, sizeof *e);
}

/* The stored row of position p on one side, as fp16 bits: the cache's own
   bytes from its full-precision region (only positions held there come
   here), in the basis the cache stores. For a rotating cache that is the
   rotated basis, the basis of its quantized pages too (kvq_cache_read
   would rotate the row back). The export records that basis
   (key_rotation, value_rotation, rotation_seed) for the pool, whose
   attention rotates queries and outputs (Sec. 4).                       */
static kvq_status kvq_cuda__row16(const kvq_cache *c, int side, size_t p, kvq_f16 *out)
{
    const kvq_side *s = side ? &c->v : &c->k;
    const size_t D = c->cfg.head_dim;
    if (p >= c->n_pos) return KVQ_ERR_STATE;
    const uint32_t tag = KVQ_LOC_TAG(s->loc[p]);
    if (tag < KVQ_LOC_ROWS0 || tag - KVQ_LOC_ROWS0 >= KVQ_ROW_REGIONS) return KVQ_ERR_STATE;
    const kvq_f16 *row = (const kvq_f16 *)s->rows[tag - KVQ_LOC_ROWS0].data + KVQ_LOC_INDEX(s->loc[p]) * D;
    memcpy(out, row, D * sizeof(kvq_f16));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_export(const kvq_cache *c, kvq_cuda_export_t *e)
{
#define KVQ_CUDA__NO(...) do { kvq_cuda__fail(st_fail, "kvq_cuda_export: " __VA_ARGS__); \
                              kvq_cuda_export_free(&x); free(covered);                \
                              return st_fail; } while (0)
    kvq_cuda_export_t x;
    uint8_t *covered = NULL;
    kvq_status st_fail = KVQ_ERR_CONFIG;
    memset(&x, 0, sizeof x);
    if (!c || !e) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_export: NULL argument");
    const size_t D = c->cfg.head_dim;
    const kvq_side *K = &c->k, *V = &c->v;
    if (D != 64 && D != 128) KVQ_CUDA__NO("head_dim %zu: the GPU kernels take 64 or 128", D);
    if (c->cfg.fp_bits != 16) KVQ_CUDA__NO("full-precision rows must be fp16 (fp_bits=%d)", c->cfg.fp_bits);
    /* a cache that never quantizes (kvq_config_full) exports fp rows only,
       for the fp16 baseline (kvq_cuda_attend with pool = NULL)           */
    const bool never_q = K->schedule == KVQ_SCHED_NONE && V->schedule == KVQ_SCHED_NONE;
    if (never_q) goto rows_only;
    if (K->axis == KVQ_PER_TOKEN && V->axis == KVQ_PER_TOKEN) {      /* the token layout */
        for (int side = 0; side < 2; side++) {
            const kvq_side *S = side ? V : K;
            if (S->schedule == KVQ_SCHED_NONE || (size_t)S->group % (D / 32) || D % S->group)
                KVQ_CUDA__NO("%s side (%s, G=%zu): the token layout needs both sides quantized "
                             "in groups dividing D=%zu, multiples of D/32", side ? "value" : "key",
                             kvq_format_name(S->format), S->group, D);
            kvq_cuda_fside &f = side ? x.value : x.key;
            f.format = S->format; f.bits = S->bits; f.group = (int)S->group;
            memcpy(side ? x.value_value : x.key_value, S->value, sizeof S->value);
        }
        x.layout = KVQ_CUDA_LAYOUT_TOKEN;   /* its pool: bits = 0 (kvq_cuda_token) */
        x.k_scale = K->scale;
        x.v_scale = V->scale;
        goto rows_only;
    }
    if (K->format != KVQ_FORMAT_INT || V->format != KVQ_FORMAT_INT)
        KVQ_CUDA__NO("formats %s/%s with %s keys: a format side exports in the token layout, "
                     "both sides per token (Sec. 3)", kvq_format_name(K->format),
                     kvq_format_name(V->format), K->axis == KVQ_PER_TOKEN ? "per-token" : "per-channel");
    if (K->axis != KVQ_PER_CHANNEL || V->axis != KVQ_PER_TOKEN)
        KVQ_CUDA__NO("the fused kernel takes per-channel keys and per-token values");
    if (K->bits != V->bits || (K->bits != 2 && K->bits != 4))
        KVQ_CUDA__NO("bits K=%d V=%d: the fused kernel takes 2 or 4 on both sides", K->bits, V->bits);
    if (K->group != 32 && K->group != 64 && K->group != 128)
        KVQ_CUDA__NO("key group %zu: the fused kernel takes 32, 64 or 128", K->group);
    if ((V->group * (size_t)V->bits) % 32 || D % V->group)
        KVQ_CUDA__NO("value group %zu must divide D and fill whole words", V->group);
rows_only:
    const bool token = x.layout == KVQ_CUDA_LAYOUT_TOKEN;
    const size_t G = never_q || token ? 32 : K->group, Gv = never_q ? 32 : V->group,
                 B = never_q ? 2 : (size_t)K->bits;
    x.head_dim = (int)D; x.group = (int)G; x.value_group = (int)Gv; x.bits = token ? 0 : (int)B;
    x.zero_mode = c->cfg.zero_mode;
    x.key_rotation = c->cfg.key_rotation;
    x.value_rotation = c->cfg.value_rotation;
    x.rotation_seed = c->cfg.rotation_seed;
    x.n_kq = never_q ? 0 : (uint32_t)(K->n_units * K->geom.tokens_per_unit);
    x.n_vq = never_q ? 0 : (uint32_t)(V->n_units * V->geom.tokens_per_unit);
    const size_t n_slots = x.n_kq > x.n_vq ? x.n_kq : x.n_vq;
    const size_t both = x.n_kq < x.n_vq ? x.n_kq : x.n_vq;
    x.n_pages = (n_slots + G - 1) / G;
    st_fail = KVQ_ERR_NOMEM;
    covered = (uint8_t *)calloc(c->n_pos + 1, 1);
    /* a page's parts: words and kvq_sz entries                           */
    const size_t kw = token ? G * kvq_cuda__tok_words(x.key, (int)D) : kvq_cuda__kw_stride((int)D, (int)G, (int)B);
    const size_t vw = token ? G * kvq_cuda__tok_words(x.value, (int)D) : kvq_cuda__vw_stride((int)D, (int)G, (int)B);
    const size_t ksz = token ? G * kvq_cuda__tok_params(x.key, (int)D) : D;
    const size_t vsz = token ? G * kvq_cuda__tok_params(x.value, (int)D) : kvq_cuda__vs_stride((int)D, (int)G, (int)Gv);
    const size_t pages = x.n_pages ? x.n_pages : 1;
    x.k_words = (uint32_t *)calloc(pages * kw, 4);
    x.k_sz = (kvq_sz *)calloc(pages * ksz, sizeof(kvq_sz));
    x.v_words = (uint32_t *)calloc(pages * vw, 4);
    x.v_sz = (kvq_sz *)calloc(pages * vsz, sizeof(kvq_sz));
    x.dead = (uint32_t *)calloc(n_slots / 32 + 1, 4);
    x.k_tail = (kvq_f16 *)calloc((n_slots - x.n_kq) * D + 1, 2);
    x.v_tail = (kvq_f16 *)calloc((n_slots - x.n_vq) * D + 1, 2);
    x.k_fp = (kvq_f16 *)calloc(c->n_pos * D + 1, 2);
    x.v_fp = (kvq_f16 *)calloc(c->n_pos * D + 1, 2);
    if (!covered || !x.k_words || !x.k_sz || !x.v_words || !x.v_sz || !x.dead ||
        !x.k_tail || !x.v_tail || !x.k_fp || !x.v_fp)
        KVQ_CUDA__NO("out of host memory");
    st_fail = KVQ_ERR_STATE;
    /* the pages: the cache's own bytes, unit after unit (a per-channel
       key unit is a page; a per-token unit a slot)                        */
    if (!never_q) {
        const size_t kuw = K->geom.groups_per_unit * K->geom.words_per_group,
                     vuw = V->geom.groups_per_unit * V->geom.words_per_group;
        if (token && (kuw != kvq_cuda__tok_words(x.key, (int)D) || vuw != kvq_cuda__tok_words(x.value, (int)D) ||
                      K->sz_per_unit != kvq_cuda__tok_params(x.key, (int)D) ||
                      V->sz_per_unit != kvq_cuda__tok_params(x.value, (int)D)))
            KVQ_CUDA__NO("the cache's unit sizes are not the token layout's");
        if (K->n_units) memcpy(x.k_words, K->words, K->n_units * kuw * 4);
        if (V->n_units) memcpy(x.v_words, V->words, V->n_units * vuw * 4);
        /* a side with one scale has no parameters: its sz is NULL       */
        if (K->n_units && K->sz_per_unit) memcpy(x.k_sz, K->sz, K->n_units * K->sz_per_unit * sizeof(kvq_sz));
        if (V->n_units && V->sz_per_unit) memcpy(x.v_sz, V->sz, V->n_units * V->sz_per_unit * sizeof(kvq_sz));
    }
    /* slots: positions, dead bits, tails                                   */
    for (size_t slot = 0; slot < n_slots; slot++) {
        const int32_t pk = slot < x.n_kq ? K->qpos[slot] : -2;
        const int32_t pv = slot < x.n_vq ? V->qpos[slot] : -2;
        const int32_t p = slot < x.n_kq ? pk : pv;
        if (slot < both && pk != pv)
            KVQ_CUDA__NO("slot %zu holds position %d on K but %d on V: the sides' quantized "
                         "slots are not aligned (compacted?)", slot, (int)pk, (int)pv);
        if (p < 0) { x.dead[slot / 32] |= 1u << (slot % 32); continue; }
        if (covered[p]) KVQ_CUDA__NO("position %d is quantized twice", (int)p);
        covered[p] = 1;
        if (slot >= x.n_kq &&
            kvq_cuda__row16(c, 0, (size_t)p, x.k_tail + (slot - x.n_kq) * D) != KVQ_OK)
            KVQ_CUDA__NO("position %d: no key", (int)p);
        if (slot >= x.n_vq &&
            kvq_cuda__row16(c, 1, (size_t)p, x.v_tail + (slot - x.n_vq) * D) != KVQ_OK)
            KVQ_CUDA__NO("position %d: no value", (int)p);
    }
    /* every other present position must be full precision on both sides    */
    for (size_t p = 0; p < c->n_pos; p++) {
        const uint32_t lk = KVQ_LOC_TAG(K->loc[p]), lv = KVQ_LOC_TAG(V->loc[p]);
        if (covered[p]) continue;
        if (lk == KVQ_LOC_ABSENT && lv == KVQ_LOC_ABSENT) continue;
        if (lk == KVQ_LOC_QUANT || lv == KVQ_LOC_QUANT || lk == KVQ_LOC_ABSENT ||
            lv == KVQ_LOC_ABSENT)
            KVQ_CUDA__NO("position %zu is quantized on one side outside the aligned slots", p);
        if (kvq_cuda__row16(c, 0, p, x.k_fp + (size_t)x.n_fp * D) != KVQ_OK ||
            kvq_cuda__row16(c, 1, p, x.v_fp + (size_t)x.n_fp * D) != KVQ_OK)
            KVQ_CUDA__NO("position %zu cannot be read", p);
        x.n_fp++;
    }
    free(covered);
    *e = x;
    return KVQ_OK;
#undef KVQ_CUDA__NO
}
#endif /* KVQ_CUDA_DECLARE_ONLY */

/* ======================================================================== */
/* 7. tensor-core fragment order                                            */
/* ======================================================================== */
/* What Sec. 8's kernel (v5) and its tests share: the fragment maps, the
   in-page permutation, the code decode and the weight split. Everything
   here is host+device and checked on the CPU against kvq.h (test_gpu
   --host, "fragment replay"). bench/mma_design.md derives it in full
   (the algebra, why hi + lo is exact to fp32, the decodes); walkthrough
   9.9 teaches it.

   THE ALGEBRA (the f16 form; the integer decode below does the same with
   bytes). mma.sync.m16n8k16 computes C(16x8) += A(16x16) B(16x8),
   f16 in, f32 out. Codes (0..15) are exact in fp16, so A is the codes and
   every float goes into B:
     keys    A = codes   (16 tokens x 16 channels), B = q_hd a_d
     values  A = codes^T (16 channels x 16 tokens), B = p_ht a_tg
   B's column 2j is head j's weight w 2^e (e: a power of two that puts the
   largest |w| in [2^14, 2^15)) rounded to fp16 (hi), column 2j + 1 the
   rest (lo): (c0 + c1) 2^-e is head j's result to 2^-23 of the largest
   weight. One MMA serves 4 query heads.

   FRAGMENTS (PTX ISA, mma.m16n8k16, .row A, .col B). Lane l, gid = l / 4,
   tig = l % 4:
     A, halves a0..a7:   row gid + 8 ((i/2) % 2),  col 2 tig + i % 2 + 8 (i/4)
     B, halves b0..b3:   row 2 tig + i % 2 + 8 (i/2),  col gid
     C, floats c0..c3:   row gid + 8 (i/2),  col 2 tig + i % 2

   FRAGMENT ORDER. A sealed page's words are permuted so that each holds
   exactly the codes one lane feeds one MMA (B = 4) or two (B = 2); scales
   and zeros keep kvq.h's order. Register r of a word is A register r % 4
   of the word's k-tile r / 4 (TPW = 4/B k-tiles per word):
     key page   (D*G*B/32 words): [G/16 row tiles][32 lanes][D*B/64 words]
     value page (D*G*B/32 words): [G*B/64 token blocks][32 lanes][D/16 words]
   kvq_mma_key_source / kvq_mma_value_source say where field j of word w
   comes from; kvq_cuda_fragment_page applies them.                      */
#define KVQ_MMA_MAGIC 0x64006400u     /* fp16 1024.0 in both halves          */
/* inline, not static: a translation unit that uses none of them (a test
   that includes the declarations only) compiles without unused-function
   warnings.
   The kvq_mma_* helpers are a kernel's inner arithmetic and check nothing:
   lane in 0..31, element indices as in the tables, bits 2 or 4, and a
   shape kvq_mma_shape_ok accepts. The entry points that take user data,
   kvq_cuda_fragment_page, kvq_cuda_export_fragment and
   kvq_cuda_seal_pages, check all of it.                                 */
#define KVQ_MMA_FN __host__ __device__ __forceinline__

/* The fragment maps, exactly the PTX ISA's tables above.                  */
KVQ_MMA_FN int kvq_mma_a_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
KVQ_MMA_FN int kvq_mma_a_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2); }
KVQ_MMA_FN int kvq_mma_b_row(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 1); }
KVQ_MMA_FN int kvq_mma_b_col(int lane) { return lane >> 2; }
KVQ_MMA_FN int kvq_mma_c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
KVQ_MMA_FN int kvq_mma_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

/* From scores to the value MMA's B. The key MMA leaves token tau's score
   for head j in lane 4 (tau % 8) + j, as c0 + c1 (tau < 8) or c2 + c3
   (tau >= 8): the C table with B's column pair (2j, 2j + 1). The value MMA
   wants it as B element i of lane l: token row kvq_mma_b_row(l, i), head
   kvq_mma_b_col(l) / 2. So each B element is one __shfl_sync from
   src_lane, taking its first (half 0) or second (half 1) row's sum.      */
KVQ_MMA_FN void kvq_mma_score_source(int lane, int i, int *src_lane, int *half)
{
    const int token = kvq_mma_b_row(lane, i), head = kvq_mma_b_col(lane) / 2;
    *src_lane = 4 * (token % 8) + head;
    *half = token / 8;
}

/* Register r of a fragment word w: its codes sit at bit k = kvq_mma_shift
   of x = kvq_mma_source(w, r), in both halves (kvq_mma_mask).            */
KVQ_MMA_FN int kvq_mma_shift(int bits, int r) { return bits * (r % (8 / bits)); }
KVQ_MMA_FN uint32_t kvq_mma_source(uint32_t w, int bits, int r) { return w >> (8 * (r / (8 / bits))); }
KVQ_MMA_FN uint32_t kvq_mma_mask(int bits, int r)
{
    return (((1u << bits) - 1u) * 0x00010001u) << kvq_mma_shift(bits, r);
}
/* ... masked: the two fp16 subnormals c 2^(k-24) (the subnormal decode
   below); with 1024's bits or-ed in: two fp16 1024 + c 2^k, what the
   magic decode's HFMA2 takes.                                            */
KVQ_MMA_FN uint32_t kvq_mma_subnormal(uint32_t w, int bits, int r)
{
    return kvq_mma_source(w, bits, r) & kvq_mma_mask(bits, r);
}
KVQ_MMA_FN uint32_t kvq_mma_magic(uint32_t w, int bits, int r)
{
    return kvq_mma_subnormal(w, bits, r) | KVQ_MMA_MAGIC;
}

/* Field j of a fragment word -> (k-tile of the word, A element).         */
KVQ_MMA_FN void kvq_mma_field(int bits, int j, int *tile, int *elem)
{
    const int R = 16 / bits, r = j % R;             /* register, half j / R */
    *tile = r / 4;
    *elem = 2 * (r % 4) + j / R;
}

/* Where field j of word w of a fragment-order page comes from.           */
KVQ_MMA_FN void kvq_mma_key_source(int D, int bits, size_t w, int j,
                                                                   int *token, int *channel)
{
    const size_t per_lane = (size_t)D * bits / 64;  /* words of a lane per row tile */
    const int row_tile = (int)(w / (32 * per_lane)), lane = (int)(w / per_lane % 32);
    const int word = (int)(w % per_lane);
    int tile, elem;
    kvq_mma_field(bits, j, &tile, &elem);
    *token = 16 * row_tile + kvq_mma_a_row(lane, elem);
    *channel = 16 * (word * (4 / bits) + tile) + kvq_mma_a_col(lane, elem);
}
KVQ_MMA_FN void kvq_mma_value_source(int D, int bits, size_t w, int j,
                                                                     int *token, int *channel)
{
    const size_t per_lane = (size_t)D / 16;         /* one word per channel row tile */
    const int block = (int)(w / (32 * per_lane)), lane = (int)(w / per_lane % 32);
    const int row_tile = (int)(w % per_lane);
    int tile, elem;
    kvq_mma_field(bits, j, &tile, &elem);
    *token = 16 * (block * (4 / bits) + tile) + kvq_mma_a_col(lane, elem);
    *channel = 16 * row_tile + kvq_mma_a_row(lane, elem);
}

/* The inverse maps: where the code of (token t, channel d) sits in a
   fragment-order page, as word *w and field *j. A's row r and column c
   of a 16 x 16 tile are lane 4 (r % 8) + (c % 8) / 2, element
   (c % 2) + 2 (r / 8) + 4 (c / 8) (the tables above, solved).           */
KVQ_MMA_FN void kvq_mma_a_place(int r, int c, int *lane, int *elem)
{
    *lane = 4 * (r % 8) + (c % 8) / 2;
    *elem = (c % 2) + 2 * (r / 8) + 4 * (c / 8);
}
KVQ_MMA_FN int kvq_mma_field_of(int bits, int tile, int elem)  /* kvq_mma_field's inverse */
{
    return 4 * tile + elem / 2 + (16 / bits) * (elem % 2);
}
KVQ_MMA_FN void kvq_mma_key_dest(int D, int bits, int t, int d, size_t *w, int *j)
{
    const int per_lane = D * bits / 64, kg = d / 16;
    int lane, elem;
    kvq_mma_a_place(t % 16, d % 16, &lane, &elem);
    *w = ((size_t)(t / 16) * 32 + lane) * per_lane + kg / (4 / bits);
    *j = kvq_mma_field_of(bits, kg % (4 / bits), elem);
}
KVQ_MMA_FN void kvq_mma_value_dest(int D, int bits, int t, int d, size_t *w, int *j)
{
    const int per_lane = D / 16, tg = t / 16;
    int lane, elem;
    kvq_mma_a_place(d % 16, t % 16, &lane, &elem);
    *w = ((size_t)(tg / (4 / bits)) * 32 + lane) * per_lane + d / 16;
    *j = kvq_mma_field_of(bits, tg % (4 / bits), elem);
}
/* The code of (token t, channel d) in a fragment-order key (side 0) or
   value (side 1) page.                                                   */
KVQ_MMA_FN uint32_t kvq_mma_code_at(const uint32_t *page, int D, int bits, int side, int t, int d)
{
    size_t w;
    int j;
    if (side == 0) kvq_mma_key_dest(D, bits, t, d, &w, &j);
    else kvq_mma_value_dest(D, bits, t, d, &w, &j);
    return (page[w] >> (j * bits)) & ((1u << bits) - 1u);
}

/* kvq_mma_split: w 2^e as hi + lo, two fp16 (as raw bits), for the page
   scale e of kvq_mma_exponent. Round to nearest even both times.          */
KVQ_MMA_FN void kvq_mma_split_scaled(float x /* w 2^e */, kvq_f16 *hi, kvq_f16 *lo)
{
    const __half h = __float2half_rn(x);
    *hi = __half_as_ushort(h);
    *lo = __half_as_ushort(__float2half_rn(x - __half2float(h)));
}
KVQ_MMA_FN void kvq_mma_split(float w, int e, kvq_f16 *hi, kvq_f16 *lo)
{
    kvq_mma_split_scaled(ldexpf(w, e), hi, lo);
}
/* The e that puts max |w| (finite) in [2^14, 2^15); 0 for max = 0.        */
KVQ_MMA_FN int kvq_mma_exponent(float max_abs)
{
    if (!(max_abs > 0.0f)) return 0;
    int ex;
    frexpf(max_abs, &ex);                            /* max = m 2^ex, m in [0.5, 1) */
    return 15 - ex;
}

/* 2^k from its bits, k in -126 .. 127 (a normal float): no ldexpf.     */
KVQ_MMA_FN float kvq_mma_pow2i(int k)
{
    const uint32_t bits = (uint32_t)(127 + k) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
/* The value side's exponent (kvq_mma_exponent of max_a) as the two powers
   the kernel multiplies by, 2^e and 2^-e, read off max_a's exponent bits:
   max_a is an fp16 scale (0, or 2^-24 .. 65504: a normal float), so e is
   in -1 .. 38. One FMUL per value weight instead of ldexpf's three
   (test_gpu --host checks every fp16 value against ldexpf).            */
KVQ_MMA_FN void kvq_mma_value_pow2(float max_a, float *pow_e, float *pow_minus_e, int top = 15)
{
    uint32_t bits;
    memcpy(&bits, &max_a, sizeof bits);
    /* max_a 2^e in [2^(top-1), 2^top): e = top - (biased - 126); top is 15
       for the f16 weights, 8N - 1 for the integer ones (e up to 46)       */
    const int e = max_a > 0.0f ? top + 126 - (int)(bits >> 23) : 0;
    *pow_e = kvq_mma_pow2i(e);
    *pow_minus_e = kvq_mma_pow2i(-e);
}

/* A lane's two B registers for one k-tile: column kvq_mma_b_col(lane) is
   head j = col / 2's hi (even column) or lo (odd), rows kvq_mma_b_row;
   head j's weight of tile row r is w[r * stride], its exponent e.        */
KVQ_MMA_FN void kvq_mma_b_regs(int lane, const float *w, size_t stride, int e, uint32_t b[2])
{
    kvq_f16 h[4];
    for (int i = 0; i < 4; i++) {
        kvq_f16 hi, lo;
        kvq_mma_split(w[(size_t)kvq_mma_b_row(lane, i) * stride], e, &hi, &lo);
        h[i] = kvq_mma_b_col(lane) % 2 ? lo : hi;
    }
    b[0] = (uint32_t)h[0] | ((uint32_t)h[1] << 16);
    b[1] = (uint32_t)h[2] | ((uint32_t)h[3] << 16);
}

/* A fragment word's A registers, the magic-number decode: fp16 1024 is
   0x6400, so (x & (m << k)) | 0x6400 is the fp16 1024 + c 2^k for the code
   c at bit k of x, two per 32-bit register; one HFMA2 (x 2^-k, - 1024 2^-k)
   leaves (c, c'), exactly. One LOP3 (both constants in registers: C's &
   then | would take two) and one HFMA2 per register; k folds once the
   loop unrolls.                                                          */
template <int B>
__device__ __forceinline__ void kvq_mma_decode(uint32_t w, uint32_t (&a)[16 / B])
{
#pragma unroll
    for (int r = 0; r < 16 / B; r++) {                 /* kvq_mma_magic, one LOP3 */
        const int k = kvq_mma_shift(B, r);
        const uint32_t x = kvq_mma_source(w, B, r), mask = kvq_mma_mask(B, r), magic = KVQ_MMA_MAGIC;
#ifdef KVQ_EMU
        const uint32_t m = (x & mask) | magic;
#else
        uint32_t m;
        asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(m) : "r"(x), "r"(mask), "r"(magic));
#endif
        const float inv = 1.0f / (float)(1 << k);
        const __half2 c = __hfma2(*reinterpret_cast<const __half2 *>(&m), __float2half2_rn(inv),
                                  __float2half2_rn(-1024.0f * inv));
        a[r] = *reinterpret_cast<const uint32_t *>(&c);
    }
}
/* The subnormal decode (variant KVQ_CUDA_MMA_SUBNORMAL): without the 1024
   and the HFMA2, (x & (m << k)) is itself the fp16 subnormal c 2^(k-24).
   Register j's factor splits into a row part (A's rows 0-7 or 8-15: C's
   c0 c1 or c2 c3) and a column part (A's columns 0-7 or 8-15: B's rows
   0-7 or 8-15), so B's rows 8-15 are pre-scaled by 2^-k_col and C's row
   halves post-scaled by 2^(24 - k_row), all exact. Exact only where the
   tensor cores keep subnormal inputs and multiply them as exactly as
   normal ones: kvq_cuda_mma_keeps_subnormals runs both decodes against
   each other on the GPU (an H200 keeps them and still fails that).    */
KVQ_MMA_FN int kvq_mma_sub_shift(int bits, int row_half, int col_half)
{
    return kvq_mma_shift(bits, row_half + 2 * col_half);   /* register j = row + 2 col */
}
template <int B>
__device__ __forceinline__ void kvq_mma_decode_subnormal(uint32_t w, uint32_t (&a)[16 / B])
{
#pragma unroll
    for (int r = 0; r < 16 / B; r++) a[r] = kvq_mma_subnormal(w, B, r);
}
/* THE INTEGER DECODE (KVQ_MMA_DEC_INT8, v5's default). mma.m16n8k32 with
   u8 A and u8 or s8 B sums integer products into s32 EXACTLY: the PTX ISA
   specifies integer MMA to the bit, so no accumulation model and no
   subnormal rule is involved. The same fragment-order words feed it. Its
   A fragment (16 rows x 32 k, bytes) puts in register i of lane
   (gid, tig) row gid + 8 (i % 2), columns 4 tig + b + 16 (i / 2), b the
   byte; B (32 k x 8 columns) has rows 4 tig + b + 16 h in register h of
   column gid; C as for f16. Masking a word byte-wise gives four codes a
   register, at a factor 2^B on rows 8-15:
     B = 2, one word w (two f16 k-tiles: 32 channels):
       w & 0x03030303   w & 0x0C0C0C0C   (w >> 4) & 0x03..   (w >> 4) & 0x0C..
     B = 4, two words x, y (k-tiles 2m, 2m + 1):
       x & 0x0F0F0F0F   x & 0xF0F0F0F0   y & 0x0F0F0F0F      y & 0xF0F0F0F0
   rows gid, gid + 8, gid, gid + 8 (times 1, 2^B, 1, 2^B): three or four
   instructions per 16 codes against the magic decode's 17 (8 LOP3, 8 HFMA2
   and a shift). The k order is not the f16 one: k index kappa of a
   32-wide step holds channel (keys) or token (values) kvq_mma_i8_index of
   that step, the same for every lane and row, so the weights' B rows
   follow it (a dot product does not care about the order of its terms).
   Weights are integers: W = round(w 2^e) with e putting max |w| just
   under 2^(8N - 2) (keys, signed) or 2^(8N - 1) (values, unsigned), cut
   into N bytes (N = 4, in hi + lo's place: W within 2^-30 of the largest
   weight; N = 2, hi only: 2^-14); byte n of W is B's digit n, each in its
   own column; C's digit columns meet as (c0 + 2^8 c1) + 2^16 (c2 + 2^8 c3),
   the pairs exactly in int32, the halves in fp32 (kvq_mma_digits).     */
#define KVQ_MMA_DEC_INT8 0            /* integer MMA (default)              */
#define KVQ_MMA_DEC_MAGIC 1           /* f16 MMA, magic-number decode       */
#define KVQ_MMA_DEC_SUBNORMAL 2       /* f16 MMA, subnormal decode          */
/* k index kappa (0..31) of a 32-wide integer step -> its channel (keys) or
   token (values) within the step: byte b = kappa % 4 of B register
   h = kappa / 16 of lane tig = kappa % 16 / 4 (the decode above, solved). */
KVQ_MMA_FN int kvq_mma_i8_index(int bits, int kappa)
{
    const int tig = kappa % 16 / 4, b = kappa % 4, h = kappa / 16;
    return bits == 2 ? 16 * (b & 1) + 2 * tig + (b >> 1) + 8 * h
                     : 16 * h + 2 * tig + 8 * (b & 1) + (b >> 1);
}
/* The integer A fragment of one 32-wide step: word x (B = 2), or words x
   and y (B = 4, k-tiles 2m and 2m + 1). Rows 8-15 carry 2^B. LIFT = 4
   (B = 2): k 16-31 (registers 2, 3) read in place, bits 4-7 of each byte,
   so they carry 2^4 more and need no shift (kvq_mma_i8_lift).          */
template <int B, int LIFT = 0>
KVQ_MMA_FN void kvq_mma_decode_i8(uint32_t x, uint32_t y, uint32_t (&a)[4])
{
    if (B == 2 && LIFT) {
        a[0] = x & 0x03030303u; a[1] = x & 0x0C0C0C0Cu;
        a[2] = x & 0x30303030u; a[3] = x & 0xC0C0C0C0u;
    } else if (B == 2) {
        const uint32_t t = x >> 4;
        a[0] = x & 0x03030303u; a[1] = x & 0x0C0C0C0Cu;
        a[2] = t & 0x03030303u; a[3] = t & 0x0C0C0C0Cu;
    } else {
        a[0] = x & 0x0F0F0F0Fu; a[1] = x & 0xF0F0F0F0u;
        a[2] = y & 0x0F0F0F0Fu; a[3] = y & 0xF0F0F0F0u;
    }
}
/* The 4-digit integer decode at 2 bits (HILO) lifts k 16-31 by 2^4
   (kvq_mma_decode_i8's LIFT): one SHF less per word, 16 a 32-token
   chunk. B's k 0-15 (register 0) then carry 2^4 too, so every product,
   and C, is 2^4 too large (taken out with the exponent), and the weights
   are made 2^4 smaller to leave the digits room: |W| < 2^26 for keys,
   W < 2^27 for values (2^-26, 2^-27 of the largest: still above fp32's
   2^-24). The 2-digit weights (2^14, 2^15) cannot spare the bits.      */
template <int B, int HILO>
constexpr int kvq_mma_i8_lift = B == 2 && HILO ? 4 : 0;
/* The e that puts max |w| (finite, > 0) in [2^(top-1), 2^top): the
   integer weights' scale (top = 8N - 2 for keys, 8N - 1 for values).   */
KVQ_MMA_FN int kvq_mma_exponent_top(float max_abs, int top)
{
    if (!(max_abs > 0.0f)) return 0;
    int ex;
    frexpf(max_abs, &ex);
    return top - ex;
}

/* C += A B, mma.sync.m16n8k16 f16 x f16 -> f32 (sm_80 and later: the
   library is built for sm_80 and sm_90 only).                            */
__device__ __forceinline__ void kvq_mma_16816(float (&c)[4], const uint32_t *a, uint32_t b0,
                                              uint32_t b1)
{
#ifdef KVQ_EMU
    kvq_emu::mma_m16n8k16(KVQ_EMU_SITE, c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* C += A B, mma.sync.m16n8k32 u8 x (s8 or u8) -> s32: exact.            */
template <bool B_SIGNED>
__device__ __forceinline__ void kvq_mma_16832(int32_t (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1)
{
#ifdef KVQ_EMU
    kvq_emu::mma_m16n8k32_u8(KVQ_EMU_SITE, c, a, b0, b1, B_SIGNED);
#else
    if constexpr (B_SIGNED)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* The shapes the MMA tiles cover: D in {64, 128}, B in {2, 4}, and pages
   of G tokens, G a multiple of 32 up to 1024.                             */
KVQ_MMA_FN bool kvq_mma_shape_ok(int D, int G, int bits)
{
    return (D == 64 || D == 128) && (bits == 2 || bits == 4) && G > 0 && G % 32 == 0 &&
           G <= 1024;
}

/* Word w of a page in fragment order, both sides, gathered field by field
   from the page in kvq.h's order (k_page: (D, G*B/32) words, v_page:
   (G, D*B/32)): the one permutation, shared by kvq_cuda_fragment_page on
   the host, the device's sealing (Sec. 8) and its sealing quantize.     */
KVQ_MMA_FN void kvq_mma_fragment_word(const uint32_t *k_page, const uint32_t *v_page, int D,
                                      int G, int bits, size_t w, uint32_t *k_out,
                                      uint32_t *v_out)
{
    uint32_t kw = 0, vw = 0;
    for (int j = 0; j < 32 / bits; j++) {
        int t, d;
        kvq_mma_key_source(D, bits, w, j, &t, &d);
        kw |= kvq_dev_get_code(k_page + (size_t)d * (G * bits / 32), (uint32_t)t, bits) << (j * bits);
        kvq_mma_value_source(D, bits, w, j, &t, &d);
        vw |= kvq_dev_get_code(v_page + (size_t)t * (D * bits / 32), (uint32_t)d, bits) << (j * bits);
    }
    *k_out = kw;
    *v_out = vw;
}

/* One page (kvq.h's order, Sec. 3) -> fragment order. k_page: (D, G*B/32)
   words, v_page: (G, D*B/32) words; each output has D*G*B/32 words and
   must not overlap the inputs. KVQ_OK; KVQ_ERR_NULL; KVQ_ERR_CONFIG for a
   shape kvq_mma_shape_ok refuses or an output that is an input. Writes
   nothing on failure.                                                     */
inline kvq_status kvq_cuda_fragment_page(const uint32_t *k_page, const uint32_t *v_page,
                                         int D, int G, int bits, uint32_t *k_out,
                                         uint32_t *v_out)
{
    if (!k_page || !v_page || !k_out || !v_out)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_fragment_page: NULL pointer");
    if (!kvq_mma_shape_ok(D, G, bits))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_fragment_page: D=%d G=%d B=%d is not a "
                              "tensor-core shape", D, G, bits);
    if (k_out == k_page || k_out == v_page || v_out == k_page || v_out == v_page || k_out == v_out)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_fragment_page: an output is an input");
    const size_t n_words = (size_t)D * G * bits / 32;
    for (size_t w = 0; w < n_words; w++)
        kvq_mma_fragment_word(k_page, v_page, D, G, bits, w, &k_out[w], &v_out[w]);
    return KVQ_OK;
}

/* The sealed pages of an export (Sec. 6; Sec. 3 defines sealed: every
   slot quantized on both sides) into fragment order, in place: what the
   tensor-core kernel (Sec. 8) reads. The page still filling keeps kvq.h's
   order, as Sec. 4's kernel reads it. The host twin of
   kvq_cuda_seal_pages. KVQ_OK; KVQ_ERR_NULL (no export, or pages without
   their arrays); KVQ_ERR_CONFIG for a shape the MMA tiles do not cover;
   KVQ_ERR_NOMEM. Nothing is changed on failure.                          */
inline kvq_status kvq_cuda_export_fragment(kvq_cuda_export_t *e)
{
    if (!e) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_export_fragment: NULL export");
    const int D = e->head_dim, G = e->group, B = e->bits;
    if (!kvq_mma_shape_ok(D, G, B))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_export_fragment: D=%d G=%d B=%d is not a "
                              "tensor-core shape", D, G, B);
    if (e->n_pages && (!e->k_words || !e->v_words))
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_export_fragment: pages without their arrays");
    const size_t n = (size_t)D * G * B / 32;
    uint32_t *k = (uint32_t *)malloc(n * 4), *v = (uint32_t *)malloc(n * 4);
    if (!k || !v) {
        free(k);
        free(v);
        return kvq_cuda__fail(KVQ_ERR_NOMEM, "kvq_cuda_export_fragment: out of host memory");
    }
    const size_t sealed = (e->n_kq < e->n_vq ? e->n_kq : e->n_vq) / (size_t)G;
    for (size_t p = 0; p < sealed && p < e->n_pages; p++) {
        kvq_cuda_fragment_page(e->k_words + p * n, e->v_words + p * n, D, G, B, k, v);
        memcpy(e->k_words + p * n, k, n * 4);
        memcpy(e->v_words + p * n, v, n * 4);
    }
    free(k);
    free(v);
    return KVQ_OK;
}

/* COMPACTION OF SEALED PAGES. kvq.h Sec. 11 compacts per-channel key units
   whole: a key code cannot leave its page without its channel's (s, z), so
   a page goes only when all G of its slots are dead, and a partly dead
   page stays with its dead slots pinned. In the pool a page's slots align
   on both sides, so the rule covers the page, values included. Fragment
   order is a permutation INSIDE a page: a page moved whole (sealed or
   not) stays valid bit for bit, and no move ever splits one, so the only
   device work is kvq_cuda_move_pages (Sec. 5) relocating pages, e.g.
   into a denser run of the pool. Only sealed pages are dropped: the page
   still filling has its tails and rows beside it.

   One stream's plan, on the host: the sealed pages whose G slots are all
   dead are dropped; kept[0 .. *n_kept) receives the old index of each page
   kept, in order (the stream's new page i is its old page kept[i]); dead
   (ceil(n_slots / 32) words, NULL: no dead slot) is rewritten for the
   slots that remain, bits past them cleared; *n_kq and *n_vq drop by G
   per page dropped. KVQ_OK; KVQ_ERR_NULL; KVQ_ERR_GROUP (G not a multiple
   of 32 up to 1024). Writes nothing on failure.                         */
inline kvq_status kvq_cuda_compact_plan(uint32_t *dead, uint32_t *n_kq, uint32_t *n_vq, int G,
                                        int32_t *kept, size_t *n_kept)
{
    if (!n_kq || !n_vq || !kept || !n_kept)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_compact_plan: NULL pointer");
    if (G <= 0 || G % 32 || G > 1024)
        return kvq_cuda__fail(KVQ_ERR_GROUP, "kvq_cuda_compact_plan: G=%d (a multiple of 32 up to 1024)", G);
    const uint32_t n_slots = *n_kq > *n_vq ? *n_kq : *n_vq;
    const size_t n_pages = (n_slots + (uint32_t)G - 1) / (uint32_t)G;
    const size_t sealed = (*n_kq < *n_vq ? *n_kq : *n_vq) / (uint32_t)G;
    size_t k = 0;
    uint32_t out = 0;                            /* next slot of the result */
    for (size_t p = 0; p < n_pages; p++) {
        bool all_dead = dead != NULL && p < sealed;
        for (uint32_t t = 0; t < (uint32_t)G && all_dead; t++) {
            const uint32_t s = (uint32_t)p * G + t;
            all_dead = (dead[s / 32] >> (s % 32)) & 1u;
        }
        if (all_dead) continue;
        kept[k++] = (int32_t)p;
        /* slide this page's bits down: out <= s, and every bit below s
           was read before it could be overwritten                          */
        for (uint32_t t = 0; t < (uint32_t)G && dead && (uint32_t)p * G + t < n_slots; t++, out++) {
            const uint32_t s = (uint32_t)p * G + t, bit = (dead[s / 32] >> (s % 32)) & 1u;
            dead[out / 32] = (dead[out / 32] & ~(1u << (out % 32))) | (bit << (out % 32));
        }
    }
    const uint32_t dropped = (uint32_t)(n_pages - k) * (uint32_t)G;
    for (uint32_t s = n_slots - dropped; dead && s < n_slots; s++) dead[s / 32] &= ~(1u << (s % 32));
    *n_kq -= dropped;
    *n_vq -= dropped;
    *n_kept = k;
    return KVQ_OK;
}

#ifndef KVQ_CUDA_DECLARE_ONLY   /* the implementation: kernels and launchers */
/* ======================================================================== */
/* 8. decode attention on the tensor cores (v5)                             */
/* ======================================================================== */
/* Sec. 7's design as a kernel. It attends a stream's SEALED pages (Sec. 3:
   every slot quantized on both sides, stored in fragment order); the rest
   of the stream (the page still filling, the tails, the full-precision
   rows) goes through Sec. 4's kernel with skip_sealed = 1. Both write
   partial (m, l, acc) results into one workspace, at different splits, and
   kvq_attend_combine_kernel merges them: kvq_cuda_attend_mma below.

   One warp owns a page at a time (pages round-robin over the CTA's warps,
   CTAs over splits of the stream's pages); a CTA serves NH = 4 NQ query
   heads of one KV head, 4 per MMA (NQ = 2: two MMAs on the same decoded
   codes). Lane l has gid = l / 4 and tig = l % 4 (the PTX tables, Sec. 7).

   PER PAGE (the keys' weights):
     w_hd = q_hd a_d for the page's key scales a_d; e_h puts max_d |w_hd|
     in [2^14, 2^15) (kvq_mma_exponent); B's column 2j holds head j's hi,
     2j + 1 its lo (HILO = 0: hi only, lo columns zero). The zero term
     z_h = sum_d q_hd b_d. Lane l holds the B registers of head
     4 NQ' + gid / 2 for its rows (kvq_mma_b_row) of every 16-channel
     k-tile; it makes half of them (register 0 or 1, by gid's parity)
     and trades the other half with its pair (xor 4), and the max and z
     are sums over tig and the pair (xor 1, 2, 4).
   PER 32-TOKEN CHUNK:
     keys    for each 16-token row tile, the lane's fragment-order words
             (kvq_mma_decode) times the page's B: C holds, in lane
             (gid, tig), head tig's scores of tokens gid and gid + 8:
             s = (c0 + c1) 2^-e + z  (or c2 + c3), -inf for a dead slot
     softmax the chunk's max per head (xor 4, 8, 16), the running max m,
             l and acc rescaled only when some head's m moved (else the
             factor is exactly 1), p = 2^(s - m) <= 1 on MUFU.EX2
     values  B = p_t a_tg 2^(e_g) per 16-token tile and value group g:
             made and split hi / lo by the lane holding the score, then
             each element one __shfl_sync from it (kvq_mma_score_source)
             and half a PRMT. e_g puts the chunk's max_t a_tg in [2^14, 2^15):
             p <= 1, so every B entry is below 2^15. A fresh C per chunk
             and channel tile, added into fp32 times 2^-e_g; the zero
             term sum_t p_t b_tg is kept per lane and group. (Per chunk,
             not per page, in the f16 decodes; the integer decode's C is
             exact and is kept over a page, below: the MMA's unspecified
             rounding acts on 32
             tokens, no C is rescaled when m moves, and no C lives across
             chunks in registers; walkthrough 9.9 weighs it.)
   The exponents are powers of two (exact); hi + lo carries each weight to
   2^-9 of 2^15, i.e. 2^-23 of the page's (keys) or chunk's (values)
   largest weight: fp32 accuracy, whatever the tensor cores' rounding,
   since each MMA sums 16 products of an integer code (exact in fp16) and
   an fp16 weight into fp32, and the running sums are outside the MMA.
   That is the f16 form (DEC = KVQ_MMA_DEC_MAGIC or _SUBNORMAL). The
   default, DEC = KVQ_MMA_DEC_INT8 (Sec. 7's integer decode), runs the same
   steps on m16n8k32 u8 MMAs, 32 channels or tokens a step: B's columns
   (2j, 2j + 1) are head j's integer weight digits (0, 1) in one MMA and
   (2, 3) in a second (HILO; two digits and one MMA without), made by
   kvq_mma_page_keys_i8 per page and by the lane holding the score per
   chunk, with the value exponent taken once per page (its largest value
   scale); C's digit columns meet exactly in int32 and once in fp32
   (kvq_mma_digits). Every product and sum inside the MMA is exact. With
   NQ = 1 and G >= 64 the values' C is kept over a page's chunks and
   meets fp32 once a page (kvq_mma_valc).                                      */
#define KVQ_MMA_WARPS 4               /* warps per CTA                      */
/* CTAs per SM every instantiation is built for (its __launch_bounds__:
   at most 168 registers a thread, so ptxas plans for them rather than
   for 255; make cuda-gates reads this and gates the same limit).        */
#define KVQ_MMA_MIN_CTAS 3
/* kvq_cuda_attend_mma's variant flags (or-ed; 0 is the default)         */
#define KVQ_CUDA_MMA_HILO    0        /* weights split hi + lo: fp32-accurate */
#define KVQ_CUDA_MMA_HI_ONLY 1        /* weights in fp16 only, no lo half    */
#define KVQ_CUDA_MMA_DIRECT  2        /* chunks read in place, no cp.async   */
#define KVQ_CUDA_MMA_SUBNORMAL 4      /* codes decoded as fp16 subnormals:
                                         refused where not exact
                                         (kvq_cuda_mma_keeps_subnormals) */
#define KVQ_CUDA_MMA_STAGES3 8        /* three cp.async stages, not two      */
#define KVQ_CUDA_MMA_MAGIC   16       /* f16 MMA, magic-number decode        */
#define KVQ_CUDA_MMA_NO_PREFETCH 32   /* page parameters loaded at the page
                                         start, not staged a page ahead     */
#define KVQ_CUDA_MMA_TWO_WAVES 64     /* splits for about two waves of CTAs,
                                         not whole waves                    */
#define KVQ_CUDA_MMA_OCC5   128       /* the default kernel built for 5 CTAs
                                         per SM (at most 96 registers; GQA
                                         <= 4), shared memory carveout at its
                                         largest                            */
/* The kernel's own options (its template parameter OPT, or-ed): what the
   flags above select that changes the code, not only the launch.        */
#define KVQ_MMA_OPT_PF   1            /* page parameters staged a page ahead */
#define KVQ_MMA_OPT_OCC5 2            /* __launch_bounds__ for KVQ_MMA_OCC_MIN_CTAS
                                         with NQ = 1 only: two quads of heads
                                         (GQA > 4) need 156-168 registers and
                                         spill at 96, so NQ = 2 keeps 3 CTAs */
#define KVQ_MMA_OPT_RUNS 4            /* the values' integer C kept over runs
                                         of chunks (kvq_mma_valc): built with
                                         PF, NQ = 1 and the integer decode
                                         only, the default for G >= 64 (at
                                         G = 32 a run is one chunk, and the
                                         per-chunk kernel is leaner)        */
#define KVQ_MMA_OCC_MIN_CTAS 5
#define KVQ_MMA_CHUNK 32              /* tokens per softmax step            */

template <int D, int B, int NQ>
struct kvq_mma_shape {
    static constexpr int NH = 4 * NQ;         /* query heads per CTA        */
    static constexpr int KT = D / 16;         /* 16-channel k-tiles (keys)  */
    static constexpr int KPL = D * B / 64;    /* key words per lane and row tile */
    static constexpr int TPW = 4 / B;         /* 16-token tiles per value word */
    static constexpr int MT = D / 16;         /* 16-channel row tiles (values) */
};

/* A page's key weights in B-register form, per quad of heads, and the
   exponent and zero term of head tig of each quad (the C layout's head). */
template <int D, int B, int NQ>
struct kvq_mma_keyb {
    uint32_t b[NQ][kvq_mma_shape<D, B, NQ>::KT][2];
    float inv[NQ];                            /* 2^-e of head 4 q + tig      */
    float v_pow, v_inv;                       /* the integer decode's value
                                                 weights' 2^e, 2^-e (page)  */
    float z[NQ];                              /* zero term of head 4 q + tig */
};

/* One stored (s, z) in one 4-byte load: kvq_sz is two fp16, which the
   compiler reads with two 2-byte loads. Pools and stages hold them at
   4-byte alignment (an array of them from a 4-byte aligned start).     */
static __device__ __forceinline__ kvq_sz kvq_mma_sz(const kvq_sz *p)
{
    const uint32_t w = *reinterpret_cast<const uint32_t *>(p);
    kvq_sz sz;
    memcpy(&sz, &w, sizeof sz);
    return sz;
}

/* One key weight w = q a (times f), folded into the lane's running max
   |w| and zero term sum q b.                                             */
static __device__ __forceinline__ float kvq_mma_key_weight(float q, kvq_sz sz, kvq_zero_mode mode,
                                                           float f, float &mx, float &z)
{
    float a, b;
    kvq_dev_affine(sz, mode, &a, &b);
    const float w = q * a * f;
    mx = fmaxf(mx, fabsf(w));
    z = fmaf(q, b, z);
    return w;
}
/* The 8 lanes of a head (tig, and the gid pair) hold all D rows: the max
   and the zero term over them (xor 1, 2, 4).                             */
static __device__ __forceinline__ void kvq_mma_head_reduce(float &mx, float &z)
{
#pragma unroll
    for (int k = 1; k <= 4; k <<= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, k));
        z += __shfl_xor_sync(0xffffffffu, z, k);
    }
}
/* THE QUERY ROWS (issue 46). A page's key weights read qs[h][d] for the
   4 heads h of a quad at once, each lane its head 4 q + gid / 2 and
   channels d that are the same for the 4 (kvq_mma_page_keys_i8: d =
   32 ks + kvq_mma_i8_index(B, 4 tig + b + 16 odd), 8 channels a head, in
   bits 1-3 (B = 2) or 1, 2, 4 (B = 4) of d at a given ks and b): at the
   same offset in rows D floats apart, the same 8 banks 4 times over.
   So channel d of head h lies at h D + (d ^ f(h)), f = 0, 1, 16, 17
   (B = 2) or 0, 1, 8, 9 (B = 4) by h % 4: bits the 8 channels leave
   free, so the 4 heads' words fill 32 banks. The XOR stays within a
   32-float block of the row (no padding); the f16 decodes read the same
   layout.                                                               */
template <int D, int B>
static __device__ __forceinline__ int kvq_mma_q_at(int h, int d)
{
    return h * D + (d ^ ((h & 1) | (B == 2 ? 16 : 8) * ((h >> 1) & 1)));
}
/* The CTA's NH query rows into qs in that layout (kvq_dev_load_queries's
   values: q times log2(e) / sqrt(D), 0 for heads past n_rep).          */
template <int D, int B, int NH>
static __device__ __forceinline__ void kvq_mma_load_queries(float *qs /* (NH, D) smem */, const float *q,
                                                            int stream_id, int n_rep, int h0)
{
    const float qscale = 1.4426950408889634f / sqrtf((float)D);
    for (int i = (int)threadIdx.x; i < NH * D; i += (int)blockDim.x) {
        const int hl = i / D, d = i % D, h = h0 + hl;
        qs[kvq_mma_q_at<D, B>(hl, d)] = (h < n_rep) ? q[((size_t)stream_id * n_rep + h) * D + d] * qscale : 0.0f;
    }
}

/* Head tig's key exponent and zero term (C's head in lane (gid, tig))
   live in lane 8 tig (gid 2 tig): 2^-e and z from there.               */
static __device__ __forceinline__ void kvq_mma_key_head(int e, float z, int tig, float &inv, float &zh)
{
    inv = ldexpf(1.0f, -__shfl_sync(0xffffffffu, e, 8 * tig));
    zh = __shfl_sync(0xffffffffu, z, 8 * tig);
}

/* The integer decode's key weights (KVQ_MMA_DEC_INT8): lane l's column
   gid of the first MMA of step ks (kb.b[q][2 ks]) is head 4 q + gid / 2's
   digit gid % 2; of the second (HILO: kb.b[q][2 ks + 1]) its digit
   2 + gid % 2. Its B rows of register h are channels
   32 ks + kvq_mma_i8_index(B, 4 tig + b + 16 h). The pair gid 2j, 2j + 1
   shares the weights: each makes register h = gid % 2's four, cuts them
   into signed digits ((W + 0x80..) ^ 0x80.. makes each byte a digit in
   -128..127), gathers digit n of the four into one register (PRMTs), and
   one __shfl_xor_sync(4) per register trades what the other column needs. */
template <int D, int B, int NQ, int HILO>
static __device__ __forceinline__ void kvq_mma_page_keys_i8(const float *qs /* (NH, D) smem */,
                                                            const kvq_sz *ksz /* (D) */,
                                                            kvq_zero_mode mode, int lane,
                                                            kvq_mma_keyb<D, B, NQ> &kb)
{
    constexpr int KS = D / 32, N = HILO ? 4 : 2;          /* steps, digits */
    constexpr int LIFT = kvq_mma_i8_lift<B, HILO>;
    constexpr uint32_t BIAS = HILO ? 0x80808080u : 0x8080u;
    const int gid = lane >> 2, tig = lane & 3, odd = gid & 1;
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        const int h = 4 * q + gid / 2;            /* this lane's B column's head */
        float w[KS][4], mx = 0.0f, z = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int d = 32 * ks + kvq_mma_i8_index(B, 4 * tig + b + 16 * odd);
                w[ks][b] = kvq_mma_key_weight(qs[kvq_mma_q_at<D, B>(h, d)], kvq_mma_sz(ksz + d), mode, 1.0f, mx, z);
            }
        kvq_mma_head_reduce(mx, z);
        /* |W| < 2^(8N - 2): the biased digits stay in 0..255 (2^LIFT W
           on the even lane: its register 0 is k 0-15)                  */
        const int e = kvq_mma_exponent_top(mx, 8 * N - 2 - LIFT);
        const float pow_a = kvq_mma_pow2i(e / 2), pow_b = kvq_mma_pow2i(e - e / 2 + (odd ? 0 : LIFT));
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t x[4];                        /* W's digits, bytes 0 .. N-1 */
#pragma unroll
            for (int b = 0; b < 4; b++)
                x[b] = ((uint32_t)__float2int_rn(w[ks][b] * pow_a * pow_b) + BIAS) ^ BIAS;
            const uint32_t lo01 = __byte_perm(x[0], x[1], 0x5140), lo23 = __byte_perm(x[2], x[3], 0x5140);
            const uint32_t d0 = __byte_perm(lo01, lo23, 0x5410), d1 = __byte_perm(lo01, lo23, 0x7632);
            const uint32_t own = odd ? d1 : d0, got = __shfl_xor_sync(0xffffffffu, odd ? d0 : d1, 4);
            kb.b[q][2 * ks][0] = odd ? got : own;
            kb.b[q][2 * ks][1] = odd ? own : got;
            if (HILO) {                           /* digits 2 and 3: the second MMA */
                const uint32_t hi01 = __byte_perm(x[0], x[1], 0x7362), hi23 = __byte_perm(x[2], x[3], 0x7362);
                const uint32_t d2 = __byte_perm(hi01, hi23, 0x5410), d3 = __byte_perm(hi01, hi23, 0x7632);
                const uint32_t own2 = odd ? d3 : d2, got2 = __shfl_xor_sync(0xffffffffu, odd ? d2 : d3, 4);
                kb.b[q][2 * ks + 1][0] = odd ? got2 : own2;
                kb.b[q][2 * ks + 1][1] = odd ? own2 : got2;
            }
        }
        kvq_mma_key_head(e + LIFT, z, tig, kb.inv[q], kb.z[q]);
    }
}

/* The integer decode's value exponent (kb.v_pow, kb.v_inv): the largest
   value scale among n (a multiple of 32) just under 2^(8N - 1), N = 4
   digits (2 hi only): each W = p a 2^e keeps 2^-32 (2^-16) of that
   largest a (2^-28 at 2 bits with 4 digits: kvq_mma_i8_lift). Over a
   page's value (s, z) from global memory at its start
   (KVQ_CUDA_MMA_NO_PREFETCH, DIRECT, STAGES3), or over a staged chunk's
   (the default: no load waits on DRAM, and a chunk's max is at most the
   page's, so its W keep as many bits or more; with kvq_mma_valc, a
   run's first chunk's, which its later chunks check against). All-zero
   scales count as the smallest fp16 scale, 2^-24: the largest e, which
   never lowers the exponent of a run sharing one C (kvq_mma_valc).     */
template <int B, int HILO>
static __device__ __forceinline__ void kvq_mma_value_exponent(const kvq_sz *vsz /* (n) */, int n,
                                                              kvq_zero_mode mode, int lane,
                                                              float &pow_e, float &inv)
{
    float amax = 0x1p-24f;                        /* all-zero scales: see above */
#pragma unroll 4
    for (int i = lane; i < n; i += 32) {
        float a, b;
        kvq_dev_affine(kvq_mma_sz(vsz + i), mode, &a, &b);
        amax = fmaxf(amax, a);
    }
#pragma unroll
    for (int k = 1; k < 32; k <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, k));
    kvq_mma_value_pow2(amax, &pow_e, &inv, (HILO ? 31 : 15) - kvq_mma_i8_lift<B, HILO>);
}

/* The B columns 2j (hi) and 2j + 1 (lo) of head j sit in lanes gid = 2j
   and 2j + 1 (l and l ^ 4): the same weights, a different half. So each
   of the two makes half of them, once: the even lane B's rows 2 tig,
   2 tig + 1 (register 0 of every k-tile), the odd lane rows 2 tig + 8,
   2 tig + 9 (register 1), each weight split and packed as (hi, lo); one
   PRMT keeps this lane's halves, another gathers the partner's, and one
   __shfl_xor_sync(4) trades them. (Both lanes making all of them cost
   about 140 more instructions a page with 4 heads, make cuda-gates.)  */
template <int D, int B, int NQ, int HILO, int DEC>
static __device__ __forceinline__ void kvq_mma_page_keys(const float *qs /* (NH, D) smem */,
                                                         const kvq_sz *ksz /* (D) */,
                                                         kvq_zero_mode mode, int lane,
                                                         kvq_mma_keyb<D, B, NQ> &kb)
{
    if constexpr (DEC == KVQ_MMA_DEC_INT8) {
        kvq_mma_page_keys_i8<D, B, NQ, HILO>(qs, ksz, mode, lane, kb);
    } else {
        typedef kvq_mma_shape<D, B, NQ> S;
        const int gid = lane >> 2, tig = lane & 3, odd = gid & 1;
        /* this lane's rows of a k-tile: B elements 2 odd, 2 odd + 1 (kvq_mma_b_row) */
        const int row0 = kvq_mma_b_row(lane, 2 * odd);
        /* the subnormal decode's A column half 8-15 factor, on B's rows 8-15  */
        const float col_f = DEC == KVQ_MMA_DEC_SUBNORMAL && odd ? 1.0f / (float)(1 << kvq_mma_sub_shift(B, 0, 1)) : 1.0f;
        const uint32_t mine = odd ? 0x7632u : 0x5410u, theirs = odd ? 0x5410u : 0x7632u;
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            const int h = 4 * q + gid / 2;            /* this lane's B column's head */
            float w[S::KT][2], mx = 0.0f, z = 0.0f;
#pragma unroll
            for (int kt = 0; kt < S::KT; kt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int d = 16 * kt + row0 + r;
                    w[kt][r] = kvq_mma_key_weight(qs[kvq_mma_q_at<D, B>(h, d)], ksz[d], mode, col_f, mx, z);
                }
            kvq_mma_head_reduce(mx, z);
            const int e = kvq_mma_exponent(mx);
            /* 2^e as two normal floats (e is in -113 .. 164: a max from 2^-149
               to FLT_MAX): w 2^a 2^b is ldexpf(w, e) wherever the result can
               reach fp16, two FMULs instead of ldexpf's three               */
            const float pow_a = kvq_mma_pow2i(e / 2), pow_b = kvq_mma_pow2i(e - e / 2);
#pragma unroll
            for (int kt = 0; kt < S::KT; kt++) {
                uint32_t pair[2];                     /* (hi, lo) of this lane's two rows */
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    kvq_f16 hi, lo;
                    kvq_mma_split_scaled(w[kt][r] * pow_a * pow_b, &hi, &lo);
                    pair[r] = (uint32_t)hi | (HILO ? (uint32_t)lo << 16 : 0u);
                }
                const uint32_t own = __byte_perm(pair[0], pair[1], mine);
                const uint32_t got = __shfl_xor_sync(0xffffffffu, __byte_perm(pair[0], pair[1], theirs), 4);
                kb.b[q][kt][0] = odd ? got : own;
                kb.b[q][kt][1] = odd ? own : got;
            }
            kvq_mma_key_head(e, z, tig, kb.inv[q], kb.z[q]);
        }
    }
}

/* Per-warp state, in the C layout: head 4 q + tig, channels 16 mt + gid
   (acc[q][mt][0]) and 16 mt + gid + 8 (acc[q][mt][1]). ZR: the value
   groups' zero terms sum_t p_t b_tg kept apart, zg[q][mt] for the group
   that tile mt opens (mt % (Gv / 16) == 0), and added to acc once, at
   the end (add_zero_terms): one FADD a group and chunk instead
   of two a tile, for MT more registers (NQ = 1, not the 96-register
   build, where they would spill).                                      */
template <int D, int B, int NQ, int ZR = 0>
struct kvq_mma_state {
    float m[NQ], l[NQ];
    float acc[NQ][kvq_mma_shape<D, B, NQ>::MT][2];
    float zg[NQ][ZR ? kvq_mma_shape<D, B, NQ>::MT : 1];
    __device__ __forceinline__ void init()
    {
#pragma unroll
        for (int qd = 0; qd < NQ; qd++) {
            m[qd] = -INFINITY;
            l[qd] = 0.0f;
#pragma unroll
            for (int mt = 0; mt < (ZR ? kvq_mma_shape<D, B, NQ>::MT : 1); mt++) zg[qd][mt] = 0.0f;
#pragma unroll
            for (int mt = 0; mt < kvq_mma_shape<D, B, NQ>::MT; mt++) acc[qd][mt][0] = acc[qd][mt][1] = 0.0f;
        }
    }
    /* ZR: each tile's group's zero terms into acc (Gv: the value group) */
    __device__ __forceinline__ void add_zero_terms(int Gv)
    {
        if (!ZR) return;
        const int tile_mask = (Gv >> 4) - 1;
#pragma unroll
        for (int qd = 0; qd < NQ; qd++) {
            float z = 0.0f;
#pragma unroll
            for (int mt = 0; mt < kvq_mma_shape<D, B, NQ>::MT; mt++) {
                if ((mt & tile_mask) == 0) z = zg[qd][ZR ? mt : 0];
                acc[qd][mt][0] += z;
                acc[qd][mt][1] += z;
            }
        }
    }
};

/* Where a chunk's three parts start in a page, contiguous in fragment
   order: key words (2 row tiles, 32 lanes, KPL), value words (2 / TPW
   token blocks, 32 lanes, MT) and value (s, z) (32 tokens, D / Gv).      */
template <int D, int B, int NQ>
struct kvq_mma_chunk_src {
    typedef kvq_mma_shape<D, B, NQ> S;
    static constexpr int KWORDS = 2 * 32 * S::KPL, VWORDS = (2 / S::TPW) * 32 * S::MT;
    static __device__ __forceinline__ const uint32_t *keys(const kvq_cuda_pool &p, size_t page, int chunk)
    { return p.k_words + page * kvq_cuda__kw_stride(D, p.group, B) + (size_t)chunk * KWORDS; }
    static __device__ __forceinline__ const uint32_t *values(const kvq_cuda_pool &p, size_t page, int chunk)
    { return p.v_words + page * kvq_cuda__vw_stride(D, p.group, B) + (size_t)chunk * VWORDS; }
    static __device__ __forceinline__ const kvq_sz *scales(const kvq_cuda_pool &p, size_t page, int chunk)
    {
        return p.v_sz + page * kvq_cuda__vs_stride(D, p.group, p.value_group) +
               (size_t)chunk * KVQ_MMA_CHUNK * (D / p.value_group);
    }
};

/* THE STAGE'S LAYOUT (issue 46, conflict-free shared memory). A chunk's
   key words are [2 row tiles][32 lanes][KPL] and its value words
   [B / 2 token blocks][32 lanes][MT] in a page (Sec. 7): lane l's words
   lie 4 KPL or 4 MT bytes after lane l - 1's, so a warp reading word k
   of every lane, 32 bits at a time, hit the same bank 4 or 8 times
   (16- or 32-byte lane strides; bench/RESULTS.md, 2026-11-29). A stage
   holds them unit-major, [blocks][W / U][32 lanes][U] (W = KPL or MT):
   units of U words (U = 2 for the integer decode's 4-bit keys, which it
   reads as a pair, 2 ks and 2 ks + 1, in one 64-bit load; U = 1 for the
   rest), lane l's unit p right after lane l - 1's. A warp's read of one
   unit is then 32 consecutive words (U = 1) or 64 (U = 2): one wavefront
   per 128 bytes, no conflict, at the same load sites, holding no more
   words live than before. The copies build it: lane l copies its own
   units (4- or 8-byte cp.async, source 4 W l bytes into the block),
   32 U words apart in the stage, so a warp's copies write consecutive
   words. Chunks read in place (STAGES = 1) keep the page's order: SW = 0
   below.                                                                */
template <int B, int DEC>
constexpr int kvq_mma_key_unit = (B == 4 && DEC == KVQ_MMA_DEC_INT8) ? 2 : 1;
/* The word offset of word k of `lane` in block blk of W words a lane,
   units of U: the page's order (SW = 0) or the stage's (SW = 1).       */
template <int W, int U, int SW>
static __device__ __forceinline__ int kvq_mma_word_at(int blk, int lane, int k)
{
    return SW ? (blk * 32 * W + (k / U) * 32 * U + k % U) + U * lane : (blk * 32 + lane) * W + k;
}
/* One U-word unit global -> shared, async (4 or 8 bytes, both aligned). */
template <int U>
static __device__ __forceinline__ void kvq_mma_cp_unit(uint32_t *smem, const uint32_t *gmem)
{
    if constexpr (U == 2) {
        kvq_dev_cp<8>(smem, gmem);
    } else {
#if defined(KVQ_EMU)
        kvq_emu::cp_async(__FILE__, __LINE__, smem, gmem, 4);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(gmem));
#else
        *smem = *gmem;
#endif
    }
}
/* A region of NB blocks x 32 lanes x W words into the stage's layout:
   src_lane is the region's start + 4 W lane bytes (lane's first word).   */
template <int NB, int W, int U>
static __device__ __forceinline__ void kvq_mma_copy_units(unsigned char *dst, const unsigned char *src_lane,
                                                          int lane)
{
    uint32_t *d = (uint32_t *)dst + U * lane;
    const uint32_t *s = (const uint32_t *)src_lane;
#pragma unroll
    for (int i = 0; i < NB * W / U; i++)
        kvq_mma_cp_unit<U>(d + 32 * U * i, s + (i / (W / U)) * 32 * W + (i % (W / U)) * U);
}

/* C's row half factor of a decode (Sec. 7): the subnormal decode's
   2^(24 - k_row) (its 2^-k_col is folded into B's rows 8-15), the integer
   decode's 2^-B on rows 8-15, 1 for the magic decode.                    */
template <int B, int DEC>
static __device__ __forceinline__ float kvq_mma_post(int half)
{
    return DEC == KVQ_MMA_DEC_SUBNORMAL ? ldexpf(1.0f, 24 - kvq_mma_sub_shift(B, half, 0))
         : DEC == KVQ_MMA_DEC_INT8 && half ? 1.0f / (float)(1 << B)   /* rows 8-15: 2^B */
                                           : 1.0f;
}

/* Keys of one chunk: two 16-token row tiles of codes times the page's B.
   sc[q][rt][half]: head 4 q + tig's score of token 16 rt + gid + 8 half,
   -inf for a dead slot (dead_bits: the chunk's word of them,
   kvq_mma_dead_word).                                                    */
/* The integer decode's digit columns of one C row half, in fp32: digits
   0 and 1 (columns 2 tig, 2 tig + 1 of the first MMA) meet exactly in
   int32, and so do digits 2 and 3 (the second MMA, HILO): a code times
   2^B is at most 240, a digit 255 in size, so a column over 128 channels
   or 32 tokens stays below 2^22 and sum + 2^8 sum' below 2^31. The
   two halves then meet in fp32, the high one at 2^16: one rounding.
   U: the pairs read as unsigned, for the values' C kept over 128 tokens
   (below 2^32 there, not 2^31: kvq_mma_valc).                          */
template <int HILO, bool U = false>
static __device__ __forceinline__ float kvq_mma_digits(const int32_t (&c1)[4], const int32_t (&c2)[4],
                                                       int half)
{
    const uint32_t lo = (uint32_t)c1[2 * half] + ((uint32_t)c1[2 * half + 1] << 8);
    const float flo = U ? (float)lo : (float)(int32_t)lo;
    if (!HILO) return flo;
    const uint32_t hi = (uint32_t)c2[2 * half] + ((uint32_t)c2[2 * half + 1] << 8);
    return fmaf(U ? (float)hi : (float)(int32_t)hi, 65536.0f, flo);
}

/* The values' integer C kept over a RUN of chunks, a page's 1-4 (PC: the
   integer decode with NQ = 1 and ZR; Sec. 7). mma.m16n8k32 u8 x u8 ->
   s32 adds exactly, so the value MMAs of a run's chunks all add into
   one C, c[q][mt][digit pair][4], and C meets fp32 (kvq_mma_digits, one
   FMA into st.acc) once a run, in kvq_mma_value_flush, instead of every
   chunk: 12 instructions a 16-channel tile and chunk. A run starts at
   a page's first chunk (kvq_mma_run_start: the MMAs take a fresh C, so
   no instruction clears it) and ends at its last (kvq_mma_run_end; G =
   32 would run one chunk: its kernel keeps the per-chunk path).
   Sharing one C needs one scale for its weights W = p a 2^e:
   - p: the running max m unchanged. Where a chunk moves it (rare once a
     stream is under way), the softmax first flushes C at the old m and
     clears it, then rescales st.acc (kvq_mma_chunk_softmax's hook);
   - e: the run's 2^e, pow_e, is its first chunk's (from its largest
     value scale, kvq_mma_value_exponent). A later chunk's value group
     with a scale a >= a_lim = 2^top 2^-e (one that would have given a
     smaller e) flushes and clears C at the old e, and the run goes on
     at that group's e (kvq_mma_value_group's check: 4 compares and a
     vote a group, not the ~25 instructions of an exponent a chunk);
     below a_lim a chunk's W stay below the same 2^(8N - 1) and keep at
     least the bits that the page-wide exponent (NO_PREFETCH) keeps.
   Range: an A byte (a code times 2^B, or lifted) is at most 240, a digit
   255, so a column over 128 tokens is below 128 x 240 x 255 < 2^23 and
   c0 + 2^8 c1 below 2^31 + 2^23 < 2^32: read as uint32 (kvq_mma_digits
   U). A fifth chunk could pass 2^32: pages of at most 128 tokens
   (kvq_cuda_attend_mma takes G 32/64/128).
   Error: C is exact; each run's two I2F, the FMA of the halves and the
   FMA into st.acc round once each (2^-24 relative), as the per-chunk
   conversion did for each chunk: a run of 4 rounds 4 times fewer, so
   the float64 oracle's tolerance holds as before or better.
   Registers: 8 int32 a tile with HILO, 64 at D = 128, within the 168 of
   KVQ_MMA_MIN_CTAS (make cuda-gates).                                   */
template <int D, int B, int NQ, int PC>
struct kvq_mma_valc {
    int32_t c[PC ? NQ : 1][PC ? kvq_mma_shape<D, B, NQ>::MT : 1][2][4];
    float pow_e, inv;                         /* the run's 2^e, 2^-e        */
    float a_lim;                              /* the smallest value scale that
                                                 needs a smaller e (kvq_mma_chunk) */
};
/* C into st.acc at the run's scale (post 2^-LIFT 2^-e per row half);
   CLEAR: C zeroed after (a flush inside a run; a run's end leaves it,
   since the next run's first MMAs take a fresh C).                       */
template <int D, int B, int NQ, int HILO, bool CLEAR, int ZR, int PC>
static __device__ __forceinline__ void kvq_mma_value_flush(kvq_mma_valc<D, B, NQ, PC> &vc,
                                                           kvq_mma_state<D, B, NQ, ZR> &st)
{
    constexpr int LIFT = kvq_mma_i8_lift<B, HILO>;
    float scale[2];
#pragma unroll
    for (int half = 0; half < 2; half++)
        scale[half] = kvq_mma_post<B, KVQ_MMA_DEC_INT8>(half) / (float)(1 << LIFT) * vc.inv;
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int mt = 0; mt < kvq_mma_shape<D, B, NQ>::MT; mt++)
#pragma unroll
            for (int half = 0; half < 2; half++)
                st.acc[q][mt][half] = fmaf(kvq_mma_digits<HILO, true>(vc.c[q][mt][0], vc.c[q][mt][1], half),
                                           scale[half], st.acc[q][mt][half]);
    if (CLEAR)
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int mt = 0; mt < kvq_mma_shape<D, B, NQ>::MT; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++) vc.c[q][mt][i / 4][i % 4] = 0;
}

template <int D, int B, int NQ, int HILO, int DEC, int SW>
static __device__ __forceinline__ void kvq_mma_chunk_scores(const uint32_t *kwc, uint32_t dead_bits,
                                                            const kvq_mma_keyb<D, B, NQ> &kb, int lane,
                                                            float (&sc)[NQ][2][2])
{
    typedef kvq_mma_shape<D, B, NQ> S;
    const int gid = lane >> 2;
    const float post[2] = { kvq_mma_post<B, DEC>(0), kvq_mma_post<B, DEC>(1) };
    const uint32_t my_dead = dead_bits >> gid;    /* bit 16 rt + 8 half: token 16 rt + gid + 8 half */
#pragma unroll
    for (int rt = 0; rt < 2; rt++) {
        constexpr int U = SW ? kvq_mma_key_unit<B, DEC> : 1;
        auto w = [&](int k) { return kwc[kvq_mma_word_at<S::KPL, U, SW>(rt, lane, k)]; };
        if constexpr (DEC == KVQ_MMA_DEC_INT8) {   /* D / 32 steps, exact sums */
            int32_t c1[NQ][4] = {}, c2[NQ][4] = {};
#pragma unroll
            for (int ks = 0; ks < D / 32; ks++) {
                uint32_t a[4];
                if constexpr (U == 2) {            /* the pair in one 64-bit load */
                    const uint2 pr = *(const uint2 *)(kwc + kvq_mma_word_at<S::KPL, U, SW>(rt, lane, 2 * ks));
                    kvq_mma_decode_i8<B, kvq_mma_i8_lift<B, HILO>>(pr.x, pr.y, a);
                } else {
                    kvq_mma_decode_i8<B, kvq_mma_i8_lift<B, HILO>>(w(B == 2 ? ks : 2 * ks), w(B == 2 ? ks : 2 * ks + 1), a);
                }
#pragma unroll
                for (int q = 0; q < NQ; q++) {
                    kvq_mma_16832<true>(c1[q], a, kb.b[q][2 * ks][0], kb.b[q][2 * ks][1]);
                    if (HILO) kvq_mma_16832<true>(c2[q], a, kb.b[q][2 * ks + 1][0], kb.b[q][2 * ks + 1][1]);
                }
            }
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const bool dead = (my_dead >> (16 * rt + 8 * half)) & 1u;
#pragma unroll
                for (int q = 0; q < NQ; q++)
                    sc[q][rt][half] = dead ? -INFINITY
                                           : fmaf(kvq_mma_digits<HILO>(c1[q], c2[q], half),
                                                  post[half] * kb.inv[q], kb.z[q]);
            }
        } else {
            float c[NQ][4];
#pragma unroll
            for (int q = 0; q < NQ; q++) c[q][0] = c[q][1] = c[q][2] = c[q][3] = 0.0f;
#pragma unroll
            for (int i = 0; i < S::KPL; i++) {
                uint32_t a[16 / B];
                if (DEC == KVQ_MMA_DEC_SUBNORMAL) kvq_mma_decode_subnormal<B>(w(i), a);
                else kvq_mma_decode<B>(w(i), a);
#pragma unroll
                for (int u = 0; u < S::TPW; u++)
#pragma unroll
                    for (int q = 0; q < NQ; q++)
                        kvq_mma_16816(c[q], a + 4 * u, kb.b[q][i * S::TPW + u][0],
                                      kb.b[q][i * S::TPW + u][1]);
            }
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const bool dead = (my_dead >> (16 * rt + 8 * half)) & 1u;
#pragma unroll
                for (int q = 0; q < NQ; q++)
                    sc[q][rt][half] = dead ? -INFINITY
                                           : (c[q][2 * half] + c[q][2 * half + 1]) * post[half] * kb.inv[q] +
                                                 kb.z[q];
            }
        }
    }
}

/* 2^x for the tensor-core kernel's softmax: one MUFU.EX2 (PTX
   ex2.approx.ftz.f32, an error of about 2^-22 relative, a result below
   2^-126 flushed to 0, -inf to 0) instead of exp2f's range handling. A
   weight p <= 1 that moves by 2^-22 of itself, or drops below 2^-126,
   moves an output by as much relative to it: far inside ATTN_TOL. The
   emulator computes exp2f, perturbs it by 2^-22 (its sign from x's
   bits) and flushes as the hardware does.                               */
static __device__ __forceinline__ float kvq_mma_exp2(float x)
{
#ifdef KVQ_EMU
    float y = exp2f(x);
    if (y < 0x1p-126f) return 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return y * ((u & 1u) ? 1.0f + 0x1p-22f : 1.0f - 0x1p-22f);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
/* p = 2^(s - m) for a score s (-inf: a dead slot) and a finite or -inf
   running max m (kvq_dev_rescale's cases, on MUFU.EX2).                  */
static __device__ __forceinline__ float kvq_mma_rescale(float s, float m)
{
    return s == -INFINITY ? 0.0f : kvq_mma_exp2(s - m);
}

/* Softmax of one chunk: the chunk's max per head (over gid), one rescale
   of the state, p = 2^(s - m) <= 1 in the scores' layout. before_rescale:
   called first where the state is rescaled (a run's C flushed at the old
   m, kvq_mma_valc).                                                      */
template <int D, int B, int NQ, int ZR, class F>
static __device__ __forceinline__ void kvq_mma_chunk_softmax(const float (&sc)[NQ][2][2],
                                                             kvq_mma_state<D, B, NQ, ZR> &st,
                                                             float (&p)[NQ][2][2], F &&before_rescale)
{
    typedef kvq_mma_shape<D, B, NQ> S;
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        float mx = fmaxf(fmaxf(sc[q][0][0], sc[q][0][1]), fmaxf(sc[q][1][0], sc[q][1][1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(st.m[q], mx);
        /* Once a stream is under way its running max seldom moves: rescale
           only when it moved for some head of the warp. Where it did not,
           alpha is exactly 1, so skipping changes no bit.               */
        if (__any_sync(0xffffffffu, m_new != st.m[q])) {
            before_rescale();
            const float alpha = (m_new == -INFINITY) ? 1.0f : kvq_mma_rescale(st.m[q], m_new);
            st.l[q] *= alpha;
#pragma unroll
            for (int mt = 0; mt < S::MT; mt++) {
                st.acc[q][mt][0] *= alpha;
                st.acc[q][mt][1] *= alpha;
                if (ZR) st.zg[q][ZR ? mt : 0] *= alpha;
            }
        }
        st.m[q] = m_new;
#pragma unroll
        for (int rt = 0; rt < 2; rt++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                p[q][rt][half] = kvq_mma_rescale(sc[q][rt][half], m_new);
                st.l[q] += p[q][rt][half];
            }
    }
}

/* Value group g of one chunk: its exponent e (f16 decodes: lane l reads
   token l's scale, the chunk's max; the integer decode: the page's,
   v_pow and v_inv), the B registers, and the chunk's zero term
   sum_t p_t b_tg for head tig, reduced over gid, and C's factor per row
   half, scale = post * 2^-e (exact powers of two).
   Each weight is made ONCE, by the lane that holds its score (the key
   MMA's C layout: head tig, tokens 16 rt + gid + 8 half), from its own
   tokens' (s, z), which it reads for the zero term anyway: w = p a 2^e,
   rounded to the integer W (its bytes are B's digits, below), or split
   and packed as the fp16 pair (hi, lo). The f16 value MMA's B element i
   of lane l (token kvq_mma_b_row(l, i), head gid / 2; hi for an even
   gid, lo for an odd one) is then one __shfl_sync of that pair from the
   lane holding it (kvq_mma_score_source) and half a PRMT. (Made by the
   receiving lanes instead, each weight would be loaded, scaled and split
   twice, once for hi and once for lo: about 50 more instructions a chunk
   and value group with 4 heads, make cuda-gates.)
   vsz: the chunk's value (s, z), (32 tokens, n_groups).
   CHECK, a_lim, too_big: a run's later chunk (kvq_mma_valc) checks its
   group's scales against the run's exponent: where some a >= a_lim, the
   weights would pass 2^(8N - 1), so too_big(the lane's largest a) moves
   the run to a smaller exponent (v_pow, v_inv are read after it). The
   check needs the lane's four (s, z) before the weights; without it each
   is loaded where it is used, as four up front cost the 168-register
   kernels with two quads of heads a spill on sm_80 (make cuda-gates).  */
template <int D, int B, int NQ, int HILO, int DEC, int CHECK, class F>
static __device__ __forceinline__ void kvq_mma_value_group(const kvq_sz *vsz, int n_groups, int g,
                                                           kvq_zero_mode mode,
                                                           const float (&p)[NQ][2][2], int lane,
                                                           uint32_t (&bv)[NQ][2][2],
                                                           float (&zterm)[NQ], float (&scale)[2],
                                                           const float &v_pow, const float &v_inv,
                                                           float a_lim, F &&too_big)
{
    const int gid = lane >> 2;
    float at4[2][2], bt4[2][2];                   /* this lane's tokens' (a, b) */
    auto load_sz = [&](int rt, int half) {
        kvq_dev_affine(kvq_mma_sz(vsz + (16 * rt + gid + 8 * half) * n_groups + g), mode, &at4[rt][half],
                       &bt4[rt][half]);
    };
    if constexpr (CHECK) {
#pragma unroll
        for (int rt = 0; rt < 2; rt++)
#pragma unroll
            for (int half = 0; half < 2; half++) load_sz(rt, half);
        const float amax = fmaxf(fmaxf(at4[0][0], at4[0][1]), fmaxf(at4[1][0], at4[1][1]));
        if (__any_sync(0xffffffffu, amax >= a_lim)) too_big(amax);
    }
    float pow_e = v_pow, inv = v_inv;             /* 2^e, 2^-e: the integer decode's
                                                     are the page's or the run's */
    if constexpr (DEC != KVQ_MMA_DEC_INT8) {      /* f16: the chunk's largest scale */
        float a, b;
        kvq_dev_affine(vsz[lane * n_groups + g], mode, &a, &b);
#pragma unroll
        for (int k = 1; k < 32; k <<= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, k));
        kvq_mma_value_pow2(a, &pow_e, &inv);
    }
    /* B's rows 8-15 (a tile's tokens 8-15: half = 1) carry the subnormal
       decode's 2^-k_col too; both factors are folded into the token's
       scale, exactly (powers of two on an fp16 value)                   */
    const float pow_hi_rows = DEC == KVQ_MMA_DEC_SUBNORMAL ? pow_e / (float)(1 << kvq_mma_sub_shift(B, 0, 1)) : pow_e;
    /* the integer decode's lifted k 0-15 (B = 2: register 0, half 0) */
    constexpr int LIFT = DEC == KVQ_MMA_DEC_INT8 ? kvq_mma_i8_lift<B, HILO> : 0;
    const float pow_lo_rows = pow_e * (float)(1 << LIFT);
    /* this lane's weights: f16 (hi, lo) pairs, or the integers W        */
    uint32_t pair[NQ][2][2];                      /* [q][row tile][half]     */
#pragma unroll
    for (int q = 0; q < NQ; q++) zterm[q] = 0.0f;
#pragma unroll
    for (int rt = 0; rt < 2; rt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            if constexpr (!CHECK) load_sz(rt, half);
            const float at = at4[rt][half] * (half ? pow_hi_rows : pow_lo_rows), bt = bt4[rt][half];
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                zterm[q] = fmaf(p[q][rt][half], bt, zterm[q]);
                if (DEC == KVQ_MMA_DEC_INT8) {
                    pair[q][rt][half] = __float2uint_rn(p[q][rt][half] * at);
                } else {
                    kvq_f16 hi, lo;
                    kvq_mma_split_scaled(p[q][rt][half] * at, &hi, &lo);
                    pair[q][rt][half] = (uint32_t)hi | (HILO ? (uint32_t)lo << 16 : 0u);
                }
            }
        }
    if constexpr (DEC == KVQ_MMA_DEC_INT8) {
        /* W = p a 2^e < 2^(8N - 1) (p <= 1 + 2^-22), N unsigned digits.
           With u = a token's place in B's byte pair and gg its register
           (B = 2: u = row tile, gg = half; B = 4: the other way round,
           kvq_mma_i8_index), the lane holding the score packs x[gg] =
           (W_u0 digit 0, W_u1 digit 0, W_u0 digit 1, W_u1 digit 1), and
           y[gg] the same of digits 2 and 3. Column gid of lane l (head
           gid / 2, digit gid % 2 of x, or of y in the second MMA) takes
           register gg's four bytes from lanes 8 tig + gid / 2 and that + 4:
           two __shfl_sync and a PRMT.                                    */
        const int tig = lane & 3, src0 = 8 * tig + gid / 2, src1 = src0 + 4;
        const uint32_t pick = (gid & 1) ? 0x7632u : 0x5410u;   /* digit 1 or 0 */
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int gg = 0; gg < 2; gg++) {      /* (u = 0, u = 1) of register gg */
                const uint32_t u0 = B == 2 ? pair[q][0][gg] : pair[q][gg][0],
                               u1 = B == 2 ? pair[q][1][gg] : pair[q][gg][1];
                const uint32_t x = __byte_perm(u0, u1, 0x5140), y = __byte_perm(u0, u1, 0x7362);
                bv[q][0][gg] = __byte_perm(__shfl_sync(0xffffffffu, x, src0),
                                           __shfl_sync(0xffffffffu, x, src1), pick);
                if (HILO)
                    bv[q][1][gg] = __byte_perm(__shfl_sync(0xffffffffu, y, src0),
                                               __shfl_sync(0xffffffffu, y, src1), pick);
            }
    } else {
        const uint32_t keep = (gid & 1) ? 0x7632u : 0x5410u;  /* PRMT: the pairs' lo or hi halves */
#pragma unroll
        for (int rt = 0; rt < 2; rt++)
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                uint32_t w[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {           /* half = i / 2: warp-uniform */
                    int src, half;
                    kvq_mma_score_source(lane, i, &src, &half);
                    w[i] = __shfl_sync(0xffffffffu, pair[q][rt][i >> 1], src);
                }
                bv[q][rt][0] = __byte_perm(w[0], w[1], keep);
                bv[q][rt][1] = __byte_perm(w[2], w[3], keep);
            }
    }
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int k = 4; k < 32; k <<= 1) zterm[q] += __shfl_xor_sync(0xffffffffu, zterm[q], k);
#pragma unroll
    for (int half = 0; half < 2; half++) scale[half] = kvq_mma_post<B, DEC>(half) / (float)(1 << LIFT) * inv;
}

/* Values of one 16-channel row tile mt: codes^T times B, a fresh C, then
   into fp32 (one FMA by the group's scale) with the zero term (ZR: zterm
   not added here: the group's is in st.zg). PC: into the run's C instead
   (a fresh one where FRESH), which meets fp32 at the run's end
   (kvq_mma_valc).                                                        */
template <int D, int B, int NQ, int HILO, int DEC, int ZR, int PC, int FRESH>
static __device__ __forceinline__ void kvq_mma_value_tile(const uint32_t (&vw)[B / 2], int mt,
                                                          const uint32_t (&bv)[NQ][2][2],
                                                          const float (&zterm)[NQ],
                                                          const float (&scale)[2],
                                                          kvq_mma_state<D, B, NQ, ZR> &st,
                                                          kvq_mma_valc<D, B, NQ, PC> &vc)
{
    typedef kvq_mma_shape<D, B, NQ> S;
    auto z = [&](float acc, int q) { return ZR ? acc : acc + zterm[q]; };
    if constexpr (DEC == KVQ_MMA_DEC_INT8) {       /* the chunk's 32 tokens: one step */
        uint32_t a[4];
        kvq_mma_decode_i8<B, kvq_mma_i8_lift<B, HILO>>(vw[0], B == 2 ? 0u : vw[B / 2 - 1], a);
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            if constexpr (PC) {
                int32_t (&c1)[4] = vc.c[q][mt][0], (&c2)[4] = vc.c[q][mt][1];
                if (FRESH)
#pragma unroll
                    for (int i = 0; i < 4; i++) c1[i] = c2[i] = 0;
                kvq_mma_16832<false>(c1, a, bv[q][0][0], bv[q][0][1]);
                if (HILO) kvq_mma_16832<false>(c2, a, bv[q][1][0], bv[q][1][1]);
                continue;
            }
            int32_t c1[4] = {}, c2[4] = {};
            kvq_mma_16832<false>(c1, a, bv[q][0][0], bv[q][0][1]);
            if (HILO) kvq_mma_16832<false>(c2, a, bv[q][1][0], bv[q][1][1]);
            st.acc[q][mt][0] = fmaf(kvq_mma_digits<HILO>(c1, c2, 0), scale[0], z(st.acc[q][mt][0], q));
            st.acc[q][mt][1] = fmaf(kvq_mma_digits<HILO>(c1, c2, 1), scale[1], z(st.acc[q][mt][1], q));
        }
    } else {
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
            for (int blk = 0; blk < 2 / S::TPW; blk++) {     /* B = 4: two blocks */
                uint32_t a[16 / B];
                const uint32_t word = vw[blk];
                if (DEC == KVQ_MMA_DEC_SUBNORMAL) kvq_mma_decode_subnormal<B>(word, a);
                else kvq_mma_decode<B>(word, a);
#pragma unroll
                for (int u = 0; u < S::TPW; u++)
                    kvq_mma_16816(c, a + 4 * u, bv[q][blk * S::TPW + u][0], bv[q][blk * S::TPW + u][1]);
            }
            st.acc[q][mt][0] = fmaf(HILO ? c[0] + c[1] : c[0], scale[0], z(st.acc[q][mt][0], q));
            st.acc[q][mt][1] = fmaf(HILO ? c[2] + c[3] : c[2], scale[1], z(st.acc[q][mt][1], q));
        }
    }
}

/* One 32-token chunk of a sealed page: keys, softmax, values. kwc, vwc,
   vszc: the chunk's parts (kvq_mma_chunk_src), in global memory or
   staged into shared memory. A 16-channel value tile lies in one group
   (Gv % 16 == 0, and Gv divides D = 64 or 128: a power of two): the
   group's B and zero term are built at its first tile (mt a multiple of
   Gv / 16: one AND of the tile's number per tile, no counter; a shift for
   D / Gv: no division per tile or chunk). A value tile's words (B / 2 a
   lane: token blocks of 32 at 4 bits) are read
   from vwc one tile ahead, the first before the keys: each shared-memory
   load has a tile's work (or the keys and softmax) to land behind, where
   the compiler would not move it across the group setup's shuffles and
   branch, for B / 2 more live registers. PC: the values add into the
   run's C (kvq_mma_valc; FRESH: the run's first chunk), flushed first
   where the running max moves or the chunk needs a smaller exponent.    */
template <int D, int B, int NQ, int HILO, int DEC, int ZR, int PC, int FRESH, int SW>
static __device__ __forceinline__ void kvq_mma_chunk(const uint32_t *kwc, const uint32_t *vwc,
                                                     const kvq_sz *vszc, int Gv, kvq_zero_mode mode,
                                                     uint32_t dead_bits,
                                                     const kvq_mma_keyb<D, B, NQ> &kb,
                                                     kvq_mma_state<D, B, NQ, ZR> &st,
                                                     kvq_mma_valc<D, B, NQ, PC> &vc, int lane)
{
    typedef kvq_mma_shape<D, B, NQ> S;
    auto value_words = [&](int mt, uint32_t (&vw)[B / 2]) {
#pragma unroll
        for (int blk = 0; blk < B / 2; blk++) vw[blk] = vwc[kvq_mma_word_at<S::MT, 1, SW>(blk, lane, mt)];
    };
    uint32_t vw_next[B / 2];                  /* tile mt + 1's words        */
    value_words(0, vw_next);
    float sc[NQ][2][2], p[NQ][2][2];          /* [quad][row tile][half]      */
    kvq_mma_chunk_scores<D, B, NQ, HILO, DEC, SW>(kwc, dead_bits, kb, lane, sc);
    /* PC: the run's exponent, from its first chunk (kb's); a later
       chunk's group with a scale >= a_lim = 2^top 2^-e (one that would
       have made e smaller) flushes C at the old e and takes the group's */
    constexpr int TOP = (HILO ? 31 : 15) - kvq_mma_i8_lift<B, HILO>;
    auto set_e = [&](float pow_e, float inv) {
        vc.pow_e = pow_e, vc.inv = inv, vc.a_lim = kvq_mma_pow2i(TOP) * inv;
    };
    auto too_big = [&](float amax) {              /* rare: a larger scale */
        if constexpr (PC) {
            kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);
#pragma unroll
            for (int k = 1; k < 32; k <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, k));
            float pow_e, inv;
            kvq_mma_value_pow2(amax, &pow_e, &inv, TOP);
            set_e(pow_e, inv);
        }
    };
    if (PC && FRESH) set_e(kb.v_pow, kb.v_inv);
    kvq_mma_chunk_softmax<D, B, NQ>(sc, st, p, [&] {
        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);
    });
    /* tile mt opens a group where mt % (Gv / 16) == 0 (a power of two) */
    const int n_groups = D >> (__ffs(Gv) - 1), tile_mask = (Gv >> 4) - 1;
    int g = -1;                                   /* warp-uniform            */
    float zterm[NQ] = {}, scale[2] = {};
    uint32_t bv[NQ][2][2] = {};
#pragma unroll
    for (int mt = 0; mt < S::MT; mt++) {
        if ((mt & tile_mask) == 0) {              /* tile mt opens group g + 1 */
            kvq_mma_value_group<D, B, NQ, HILO, DEC, PC && !FRESH>(vszc, n_groups, ++g, mode, p, lane, bv, zterm,
                                                                  scale, PC ? vc.pow_e : kb.v_pow,
                                                                  PC ? vc.inv : kb.v_inv, PC ? vc.a_lim : 0.0f, too_big);
            if (ZR)
#pragma unroll
                for (int q = 0; q < NQ; q++) st.zg[q][ZR ? mt : 0] += zterm[q];
        }
        uint32_t vw[B / 2];
#pragma unroll
        for (int blk = 0; blk < B / 2; blk++) vw[blk] = vw_next[blk];
        if (mt + 1 < S::MT) value_words(mt + 1, vw_next);
        kvq_mma_value_tile<D, B, NQ, HILO, DEC, ZR, PC, FRESH>(vw, mt, bv, zterm, scale, st, vc);
    }
}

/* Whether a kernel keeps the values' C over runs of chunks (kvq_mma_valc):
   built with KVQ_MMA_OPT_RUNS, for the integer decode where the zero
   terms are kept apart (ZR: NQ = 1, not the 96-register OCC5 build).
   NQ = 2 would need 128 registers of C.                                 */
template <int DEC, int ZR, int OPT>
constexpr int kvq_mma_pc = DEC == KVQ_MMA_DEC_INT8 && ZR && (OPT & KVQ_MMA_OPT_RUNS);
/* A run's first chunk (kvq_mma_valc): kvq_mma_chunk on a fresh C, and a
   run's end. make cuda-gates counts both as the work a page (a run) does
   once: the first chunk's copy of the chunk body by its value MMAs on a
   fresh C (RZ), kvq_mma_run_end by its source lines.                    */
template <int D, int B, int NQ, int HILO, int ZR, int PC, int SW>
static __device__ __forceinline__ void kvq_mma_run_start(const uint32_t *kwc, const uint32_t *vwc,
                                                         const kvq_sz *vszc, int Gv, kvq_zero_mode mode,
                                                         uint32_t dead_bits, const kvq_mma_keyb<D, B, NQ> &kb,
                                                         kvq_mma_state<D, B, NQ, ZR> &st,
                                                         kvq_mma_valc<D, B, NQ, PC> &vc, int lane)
{
    kvq_mma_chunk<D, B, NQ, HILO, KVQ_MMA_DEC_INT8, ZR, PC, 1, SW>(kwc, vwc, vszc, Gv, mode, dead_bits, kb, st, vc,
                                                               lane);
}
template <int D, int B, int NQ, int HILO, int ZR, int PC>
static __device__ __forceinline__ void kvq_mma_run_end(kvq_mma_valc<D, B, NQ, PC> &vc,
                                                       kvq_mma_state<D, B, NQ, ZR> &st)
{
    kvq_mma_value_flush<D, B, NQ, HILO, false>(vc, st);
}
/* Chunk `chunk` of a page whose last is `last` (G / 32 - 1): with PC,
   the page's first starts a run, its last flushes C.                    */
template <int D, int B, int NQ, int HILO, int DEC, int ZR, int PC, int SW>
static __device__ __forceinline__ void kvq_mma_run_chunk(int chunk, int last, const uint32_t *kwc,
                                                         const uint32_t *vwc, const kvq_sz *vszc, int Gv,
                                                         kvq_zero_mode mode, uint32_t dead_bits,
                                                         const kvq_mma_keyb<D, B, NQ> &kb,
                                                         kvq_mma_state<D, B, NQ, ZR> &st,
                                                         kvq_mma_valc<D, B, NQ, PC> &vc, int lane)
{
    if constexpr (PC) {
        if (chunk == 0)
            kvq_mma_run_start<D, B, NQ, HILO, ZR, PC, SW>(kwc, vwc, vszc, Gv, mode, dead_bits, kb, st, vc, lane);
        else
            kvq_mma_chunk<D, B, NQ, HILO, DEC, ZR, PC, 0, SW>(kwc, vwc, vszc, Gv, mode, dead_bits, kb, st, vc, lane);
        if (chunk == last) kvq_mma_run_end<D, B, NQ, HILO>(vc, st);
    } else {
        kvq_mma_chunk<D, B, NQ, HILO, DEC, ZR, PC, 0, SW>(kwc, vwc, vszc, Gv, mode, dead_bits, kb, st, vc, lane);
    }
}

/* This warp's share of the CTA's pages: pages first + warp, first + warp
   + KVQ_MMA_WARPS, ... below last, as n_items chunks, cpp per page.      */
struct kvq_mma_work {
    uint32_t first, log2_cpp, n_items;      /* cpp = G / 32: 1, 2 or 4      */
    /* chunk j: page index (into the stream's page table), chunk of it.
       Shifts, not j / cpp and j % cpp: G is a run-time power of two.    */
    __device__ __forceinline__ uint32_t page_index(uint32_t j, int warp) const
    { return first + warp + (j >> log2_cpp) * KVQ_MMA_WARPS; }
    __device__ __forceinline__ int chunk(uint32_t j) const { return (int)(j & ((1u << log2_cpp) - 1u)); }
};
static __device__ __forceinline__ kvq_mma_work kvq_mma_my_work(const kvq_cuda_stream &s, uint32_t G,
                                                               int warp)
{
    /* split y of n: pages [y n_pages / n, (y + 1) n_pages / n), so the
       splits differ by at most one page whatever n the launch picked   */
    const uint32_t n_pages = kvq_cuda_sealed_pages(s, (int)G);
    const uint32_t first = (uint32_t)((uint64_t)blockIdx.y * n_pages / gridDim.y);
    const uint32_t last = (uint32_t)((uint64_t)(blockIdx.y + 1) * n_pages / gridDim.y);
    const uint32_t log2_cpp = (uint32_t)(__ffs((int)(G / KVQ_MMA_CHUNK)) - 1),
                   my_pages = first + warp < last ?
                              (last - first - warp + KVQ_MMA_WARPS - 1) / KVQ_MMA_WARPS : 0;
    return kvq_mma_work{ first, log2_cpp, my_pages << log2_cpp };
}
/* The word of dead bits of the chunk at slot0 (a multiple of 32).        */
static __device__ __forceinline__ uint32_t kvq_mma_dead_word(const uint32_t *dead, uint32_t slot0)
{
    return dead ? dead[slot0 >> 5] : 0u;
}

/* The lane's first key word and value word (its 4 KPL and 4 MT bytes
   into the chunk: kvq_mma_copy_units) and first 16 bytes of value (s, z)
   of a page's first chunk: where kvq_mma_chunks_staged's copies start, a
   page at a time (make cuda-gates counts it as page work).             */
template <int D, int B, int NQ>
static __device__ __forceinline__ void kvq_mma_page_sources(const kvq_cuda_pool &pool, size_t page, int lane,
                                                            const unsigned char *(&src)[3])
{
    typedef kvq_mma_chunk_src<D, B, NQ> C;
    typedef kvq_mma_shape<D, B, NQ> S;
    src[0] = (const unsigned char *)C::keys(pool, page, 0) + 4 * S::KPL * lane;
    src[1] = (const unsigned char *)C::values(pool, page, 0) + 4 * S::MT * lane;
    src[2] = (const unsigned char *)C::scales(pool, page, 0) + 16 * lane;
}

/* STAGES >= 2: the warp stages its next STAGES - 1 chunks into its part
   of the dynamic shared memory (STAGES x stage_bytes per warp) with
   cp.async while it computes one. A stage holds the chunk's key words,
   value words and value (s, z) (kvq_mma_chunk_src), and with
   KVQ_MMA_OPT_PF, behind them, the page's D key (s, z) when the chunk
   is its first: the page's parameters arrive with its first chunk, STAGES
   - 1 chunks ahead, instead of three dependent loads from DRAM (the page
   table, then the key (s, z), then the value (s, z) for the integer
   decode's exponent) at the page start that the warp waits on. With it
   the page number is read a page ahead too, the chunk's dead-bit word a
   chunk ahead, and the integer decode's value exponent comes from each
   staged chunk (kvq_mma_value_exponent; with kvq_mma_valc, from a run's
   first).                                                               */
template <int D, int B, int NQ, int HILO, int STAGES, int DEC, int OPT, int ZR>
static __device__ __forceinline__ void kvq_mma_chunks_staged(const kvq_cuda_pool &pool,
                                                             const kvq_cuda_stream *s,
                                                             const kvq_mma_work &wk,
                                                             const float *qs /* (NH, D) smem */,
                                                             unsigned char *stage_smem, int stage_bytes,
                                                             kvq_mma_state<D, B, NQ, ZR> &st, int warp,
                                                             int lane)
{
    typedef kvq_mma_chunk_src<D, B, NQ> C;
    typedef kvq_mma_shape<D, B, NQ> S;
    constexpr bool PF = (OPT & KVQ_MMA_OPT_PF) != 0;
    const uint32_t G = (uint32_t)pool.group;
    const int n_groups = D / pool.value_group;
    const int vsz_bytes = KVQ_MMA_CHUNK * n_groups * (int)sizeof(kvq_sz);
    const int n_vsz = (int)G * n_groups;                  /* value (s, z) of a page */
    const int ksz_at = (C::KWORDS + C::VWORDS) * 4 + vsz_bytes;   /* PF: the page's key (s, z) */
    const int32_t *pages = s->pages;                      /* read once             */
    const uint32_t *dead = s->dead;
    kvq_mma_keyb<D, B, NQ> kb;
    constexpr int PC = kvq_mma_pc<DEC, ZR, OPT>;
    kvq_mma_valc<D, B, NQ, PC> vc;
    const int last_chunk = (int)((1u << wk.log2_cpp) - 1u);    /* a page's: kvq_mma_run_chunk */
    unsigned char *mine = stage_smem + (size_t)warp * STAGES * stage_bytes;
    /* Pointers made once and carried from chunk to chunk: the stage read
       and the one filled (the next read's, j + STAGES - 1's: the last one
       read), and the lane's first 16 bytes of the next chunk's key words,
       value words and value (s, z), advanced a chunk at a time and set
       from the page number at a page's first (kvq_mma_page_sources).
       Made from the thread and CTA ids and the page each chunk, they cost
       ~30 more instructions a chunk (the default kernel's 406 -> 374 at
       2-bit, make cuda-gates): at 168 registers the compiler remade them
       rather than keep them, where a carried pointer must stay put.     */
    unsigned char *read_at = mine, *fill_at = mine + (STAGES - 1) * stage_bytes;
    const unsigned char *src[3] = {};
    /* PF: the page being issued, and the next one's number, read a page ahead */
    int32_t issue_page = 0, next_page = PF && wk.n_items ? pages[wk.page_index(0, warp)] : 0;
    auto issue = [&](uint32_t j, unsigned char *buf) {   /* chunk j into stage buf */
        if (j < wk.n_items) {
            const int chunk = wk.chunk(j);
            if (chunk == 0) {
                const uint32_t next = j + (1u << wk.log2_cpp);
                issue_page = PF ? next_page : pages[wk.page_index(j, warp)];
                if (PF) next_page = next < wk.n_items ? pages[wk.page_index(next, warp)] : 0;
                kvq_mma_page_sources<D, B, NQ>(pool, (size_t)issue_page, lane, src);
                if (PF)
                    kvq_dev_warp_copy(buf + ksz_at, pool.k_sz + (size_t)issue_page * D, D * (int)sizeof(kvq_sz),
                                      lane);
            }
            kvq_mma_copy_units<2, S::KPL, kvq_mma_key_unit<B, DEC>>(buf, src[0], lane);
            kvq_mma_copy_units<B / 2, S::MT, 1>(buf + C::KWORDS * 4, src[1], lane);
            kvq_dev_warp_copy_lane(buf + (C::KWORDS + C::VWORDS) * 4, src[2], vsz_bytes, lane);
            src[0] += C::KWORDS * 4, src[1] += C::VWORDS * 4, src[2] += vsz_bytes;
        }
        kvq_dev_cp_commit();              /* one group per j, even empty */
    };
#pragma unroll
    for (int j = 0; j < STAGES - 1; j++) issue((uint32_t)j, mine + j * stage_bytes);
    uint32_t dead_now = PF && wk.n_items ? kvq_mma_dead_word(dead, wk.page_index(0, warp) * G) : 0u;
    for (uint32_t j = 0; j < wk.n_items; j++) {
        /* group i holds chunk i (empty past the last), so with groups
           0 .. j + STAGES - 1 committed, STAGES - 1 still pending means
           0 .. j are in, at page starts, tails and the last chunks alike */
        issue(j + STAGES - 1, fill_at);
        const uint32_t pi = wk.page_index(j, warp);
        const int chunk = wk.chunk(j);
        const uint32_t slot0 = pi * G + chunk * KVQ_MMA_CHUNK;
        uint32_t dead_bits = dead_now;
        if (PF) {                          /* the next chunk's, a chunk ahead */
            const uint32_t jn = j + 1;
            dead_now = jn < wk.n_items ? kvq_mma_dead_word(dead, wk.page_index(jn, warp) * G +
                                                                 wk.chunk(jn) * KVQ_MMA_CHUNK) : 0u;
        } else {
            dead_bits = kvq_mma_dead_word(dead, slot0);
        }
        kvq_dev_cp_wait<STAGES - 1>();     /* chunk j has landed          */
        __syncwarp();
        const unsigned char *buf = read_at;
        const kvq_sz *vszc = (const kvq_sz *)(buf + (C::KWORDS + C::VWORDS) * 4);
        if (chunk == 0) {
            const size_t page = PF ? 0 : (size_t)pages[pi];
            kvq_mma_page_keys<D, B, NQ, HILO, DEC>(qs, PF ? (const kvq_sz *)(buf + ksz_at) : pool.k_sz + page * D,
                                                   pool.zero_mode, lane, kb);
            if (DEC == KVQ_MMA_DEC_INT8 && !PF)
                kvq_mma_value_exponent<B, HILO>(C::scales(pool, page, 0), n_vsz, pool.zero_mode, lane,
                                             kb.v_pow, kb.v_inv);
        }
        if (DEC == KVQ_MMA_DEC_INT8 && PF && (!PC || chunk == 0))   /* PC: a run's start */
            kvq_mma_value_exponent<B, HILO>(vszc, KVQ_MMA_CHUNK * n_groups, pool.zero_mode, lane, kb.v_pow,
                                         kb.v_inv);
        kvq_mma_run_chunk<D, B, NQ, HILO, DEC, ZR, PC, 1>(chunk, last_chunk, (const uint32_t *)buf,
                                                       (const uint32_t *)(buf + C::KWORDS * 4), vszc,
                                                       pool.value_group, pool.zero_mode, dead_bits, kb, st, vc,
                                                       lane);
        __syncwarp();                      /* its stage may now refill    */
        unsigned char *next_read = STAGES == 2 ? fill_at
                                 : read_at + stage_bytes == mine + STAGES * stage_bytes ? mine
                                                                                          : read_at + stage_bytes;
        fill_at = read_at;
        read_at = next_read;
    }
    kvq_dev_cp_wait<0>();
}

/* Partial results of the stream's sealed pages, splits split0 .. of
   n_splits in work (the same layout as Sec. 4's kernel). One warp owns a
   page at a time; STAGES = 1 reads chunks in place, STAGES >= 2 stages
   them (dynamic shared memory of KVQ_MMA_WARPS * STAGES * stage_bytes,
   at least KVQ_MMA_WARPS * NH * D floats: the warps' sums reuse it).
   OPT: KVQ_MMA_OPT_* (staged kernels only).                              */
template <int D, int B, int NQ, int HILO, int STAGES, int DEC, int OPT>
__global__ void __launch_bounds__(KVQ_MMA_WARPS * 32,
                                  (OPT & KVQ_MMA_OPT_OCC5) && NQ == 1 ? KVQ_MMA_OCC_MIN_CTAS : KVQ_MMA_MIN_CTAS)
kvq_attend_mma_kernel(kvq_cuda_pool pool, const kvq_cuda_stream *__restrict__ streams,
                      int n_rep, int n_hchunks, const float *__restrict__ q /* (S, n_rep, D) */,
                      float *__restrict__ work /* (S, n_rep, splits, D + 2) */, int split0,
                      int n_splits, int stage_bytes, int *status_reset)
{
    kvq_dev_status_reset(status_reset);        /* Sec. 4's kernel's comment */
    typedef kvq_mma_shape<D, B, NQ> S;
    constexpr int NH = S::NH;
    KVQ_CUDA_SHARED(float, qs, [NH * D]);
    KVQ_CUDA_SHARED(float, red_ml, [KVQ_MMA_WARPS][2 * NH]);
    /* the dynamic shared memory: the warps' stages (STAGES >= 2), then,
       once every warp is done with them, the warps' accumulators for the
       CTA's sum (KVQ_MMA_WARPS x NH x D floats; kvq_cuda__plan_mma sizes
       it for both): not 8-16 KB of static memory beside the stages,
       which at 4 bits left room for 4 CTAs per SM, not 5               */
    KVQ_CUDA_SHARED_DYNAMIC(unsigned char, kvq_mma_dyn);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int stream_id = blockIdx.x / n_hchunks, h0 = (blockIdx.x % n_hchunks) * NH;
    const kvq_cuda_stream *s = streams + stream_id;
    kvq_mma_load_queries<D, B, NH>(qs, q, stream_id, n_rep, h0);
    __syncthreads();

    constexpr int ZR = NQ == 1 && !(OPT & KVQ_MMA_OPT_OCC5);   /* kvq_mma_state */
    kvq_mma_state<D, B, NQ, ZR> st;
    st.init();
    const kvq_mma_work wk = kvq_mma_my_work(*s, (uint32_t)pool.group, warp);
    if constexpr (STAGES == 1) {              /* chunks read where they lie */
        typedef kvq_mma_chunk_src<D, B, NQ> C;
        const uint32_t G = (uint32_t)pool.group;
        kvq_mma_keyb<D, B, NQ> kb;
        constexpr int PC = kvq_mma_pc<DEC, ZR, OPT>;
        kvq_mma_valc<D, B, NQ, PC> vc;
        const int last_chunk = (int)((1u << wk.log2_cpp) - 1u);
        for (uint32_t j = 0; j < wk.n_items; j++) {
            const uint32_t pi = wk.page_index(j, warp);
            const size_t page = (size_t)s->pages[pi];
            const int chunk = wk.chunk(j);
            if (chunk == 0) {
                kvq_mma_page_keys<D, B, NQ, HILO, DEC>(qs, pool.k_sz + page * D, pool.zero_mode, lane, kb);
                if (DEC == KVQ_MMA_DEC_INT8)
                    kvq_mma_value_exponent<B, HILO>(C::scales(pool, page, 0), (int)G * (D / pool.value_group),
                                                 pool.zero_mode, lane, kb.v_pow, kb.v_inv);
            }
            kvq_mma_run_chunk<D, B, NQ, HILO, DEC, ZR, PC, 0>(chunk, last_chunk, C::keys(pool, page, chunk),
                                                           C::values(pool, page, chunk),
                                                           C::scales(pool, page, chunk), pool.value_group,
                                                           pool.zero_mode,
                                                           kvq_mma_dead_word(s->dead, pi * G + chunk * KVQ_MMA_CHUNK),
                                                           kb, st, vc, lane);
        }
    } else {
        kvq_mma_chunks_staged<D, B, NQ, HILO, STAGES, DEC, OPT>(pool, s, wk, qs, kvq_mma_dyn,
                                                                stage_bytes, st, warp, lane);
    }
    st.add_zero_terms(pool.value_group);
    __syncthreads();                          /* the stages are free now    */
    float (&red_acc)[KVQ_MMA_WARPS][NH * D] = *reinterpret_cast<float (*)[KVQ_MMA_WARPS][NH * D]>(kvq_mma_dyn);
    /* this warp's sums over its lanes (l over gid: head tig), then the CTA's */
#pragma unroll
    for (int qd = 0; qd < NQ; qd++) {
#pragma unroll
        for (int k = 4; k < 32; k <<= 1)
            st.l[qd] += __shfl_xor_sync(0xffffffffu, st.l[qd], k);
        const int h = 4 * qd + tig;
#pragma unroll
        for (int mt = 0; mt < S::MT; mt++) {
            red_acc[warp][kvq_dev_acc_at<D, 1>(h, 16 * mt + gid)] = st.acc[qd][mt][0];
            red_acc[warp][kvq_dev_acc_at<D, 1>(h, 16 * mt + gid + 8)] = st.acc[qd][mt][1];
        }
        if (gid == 0) { red_ml[warp][2 * h] = st.m[qd]; red_ml[warp][2 * h + 1] = st.l[qd]; }
    }
    __syncthreads();
    kvq_dev_write_split<D, NH, KVQ_MMA_WARPS, 1>(red_acc, red_ml, work, stream_id, n_rep, h0,
                                              split0 + blockIdx.y, n_splits);
}

/* -- sealing: pages into fragment order on the device ---------------------- */
/* One CTA per listed pool page: both of its code arrays through shared
   memory, into (seal = 1) or out of (seal = 0) fragment order; the scales
   and zeros do not move. Byte for byte kvq_cuda_fragment_page (Sec. 7).   */
__global__ void kvq_seal_kernel(uint32_t *__restrict__ k_words, uint32_t *__restrict__ v_words,
                                const int32_t *__restrict__ pages, int D, int G, int bits,
                                int seal)
{
    KVQ_CUDA_SHARED_DYNAMIC(uint32_t, buf);             /* (2, n_words)     */
    const size_t n = (size_t)D * G * bits / 32, page = (size_t)pages[blockIdx.x];
    uint32_t *k = k_words + page * n, *v = v_words + page * n;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) { buf[i] = k[i]; buf[n + i] = v[i]; }
    __syncthreads();
    const int per = 32 / bits;
    for (size_t w = threadIdx.x; w < n; w += blockDim.x) {
        uint32_t kw = 0, vw = 0;
        if (seal) {                                     /* gather each field */
            kvq_mma_fragment_word(buf, buf + n, D, G, bits, w, &kw, &vw);
        } else {                  /* kvq.h's word w: channel / token and first code */
            const size_t kd = w / (G * bits / 32), kt0 = (w % (G * bits / 32)) * per;
            const size_t vt = w / (D * bits / 32), vd0 = (w % (D * bits / 32)) * per;
            for (int j = 0; j < per; j++) {
                kw |= kvq_mma_code_at(buf, D, bits, 0, (int)(kt0 + j), (int)kd) << (j * bits);
                vw |= kvq_mma_code_at(buf + n, D, bits, 1, (int)vt, (int)(vd0 + j)) << (j * bits);
            }
        }
        k[w] = kw;
        v[w] = vw;
    }
}

/* Seal (or unseal) the listed pool pages in place. d_pages: (n) pool page
   ids, distinct. Codes must be B = 2 or 4, D 64 or 128, G a multiple of
   32 up to 1024 (kvq_mma_shape_ok).                                       */
extern "C" kvq_status kvq_cuda_seal_pages(const kvq_cuda_pool *pool, const int32_t *d_pages,
                                           size_t n, int seal, cudaStream_t stream)
{
    if (!pool || (n && !d_pages)) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_seal_pages: NULL pointer");
    if (!pool->k_words || !pool->v_words) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_seal_pages: pool has a NULL array");
    if (!kvq_mma_shape_ok(pool->head_dim, pool->group, pool->bits))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_seal_pages: D=%d G=%d B=%d is not a tensor-core shape",
                             pool->head_dim, pool->group, pool->bits);
    if (n > 0x7fffffffu) return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "kvq_cuda_seal_pages: %zu pages in one call", n);
    if (n == 0) return KVQ_OK;
    const size_t bytes = 2 * (size_t)pool->head_dim * pool->group * pool->bits / 8;
    KVQ_CUDA_CHECK(kvq_cuda__func_smem((const void *)kvq_seal_kernel, bytes));
    KVQ_CUDA_LAUNCH(kvq_seal_kernel, (unsigned)n, 256, bytes, stream)(pool->k_words, pool->v_words,
                                                                      d_pages, pool->head_dim,
                                                                      pool->group, pool->bits,
                                                                      seal ? 1 : 0);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}

/* -- quantizing straight into fragment order ------------------------------- */
/* Full pages of fp16 rows -> sealed pool pages, in one pass: kvq_cuda_quantize
   then kvq_cuda_seal_pages, without writing the codes in kvq.h's order and
   reading them back. One CTA per page:
     1. its D key groups (per channel, G tokens each) and G * D/Gv value
        groups (per token) through kvq_dev_quantize_group, Sec. 2's own
        step: the scales and zeros go straight to the pool (they keep
        kvq.h's order), the codes into shared memory in kvq.h's order,
                buf  [ key page: (D, G*B/32) | value page: (G, D*B/32) ]
     2. every word of the page gathered from buf into fragment order
        (kvq_mma_fragment_word, the seal's gather) and written once.
   So the bytes are kvq_cuda_quantize's codes and scales, permuted exactly
   as kvq_cuda_fragment_page permutes them.                              */
__global__ void kvq_quantize_sealed_kernel(const __half *__restrict__ K, const __half *__restrict__ V,
                                           kvq_dev_qshape qk, kvq_dev_qshape qv,
                                           const int32_t *__restrict__ pages,
                                           kvq_cuda_pool pool, const int *status)
{
    if (*(volatile const int *)status != 0) return;    /* pass 1 found a problem */
    KVQ_CUDA_SHARED_DYNAMIC(uint32_t, buf);            /* (2, n) kvq.h order  */
    const int D = (int)qk.D, G = (int)qk.G, B = qk.bits;
    const size_t n = (size_t)D * G * B / 32, i = blockIdx.x;
    const size_t page = pages ? (size_t)pages[i] : i;
    const size_t n_vg = (size_t)G * qv.geom.groups_per_unit;   /* value groups */
    /* 1. keys: group i D + d of the per-channel matrix is channel d of page i */
    for (size_t d = threadIdx.x; d < (size_t)D; d += blockDim.x) {
        size_t stride;
        const __half *x = kvq_dev_group_start(K, qk, i * D + d, &stride);
        pool.k_sz[page * D + d] = kvq_dev_quantize_group<0, 0>(x, stride, qk.G, B, qk.mode,
                                                               buf + d * qk.geom.words_per_group);
    }
    /*    values: group i G D/Gv + g is group g of the page, token g / (D/Gv) */
    for (size_t g = threadIdx.x; g < n_vg; g += blockDim.x) {
        size_t stride;
        const __half *x = kvq_dev_group_start(V, qv, i * n_vg + g, &stride);
        pool.v_sz[page * n_vg + g] = kvq_dev_quantize_group<0, 0>(x, stride, qv.G, B, qv.mode,
                                                                  buf + n + g * qv.geom.words_per_group);
    }
    __syncthreads();
    /* 2. into fragment order on the way out                                */
    for (size_t w = threadIdx.x; w < n; w += blockDim.x)
        kvq_mma_fragment_word(buf, buf + n, D, G, B, w, &pool.k_words[page * n + w],
                              &pool.v_words[page * n + w]);
}

/* The same with the streaming kernels' steps (Sec. 2: B 2 or 4, G and
   Gv 32, 64 or 128): step 1 is the page's keys as (D / 8) x G B / 32
   column items and its values as G D / E spans of E = 128 / B values,
   every load of a thread in flight at once, codes into buf in kvq.h's
   order (a span's four words one 16-byte store); step 2 as above.       */
template <int B, int G, int GV>
__global__ void __launch_bounds__(128) kvq_quantize_sealed_stream_kernel(
    const __half *__restrict__ K, const __half *__restrict__ V, int D,
    const int32_t *__restrict__ pages, kvq_cuda_pool pool, const int *status)
{
    if (*(volatile const int *)status != 0) return;    /* pass 1 found a problem */
    KVQ_CUDA_SHARED_DYNAMIC(uint32_t, buf);            /* (2, n) kvq.h order  */
    const size_t n = (size_t)D * G * B / 32;
    const size_t i = blockIdx.x, page = pages ? (size_t)pages[i] : i, lane = threadIdx.x % 32;
    const size_t n_keys = (size_t)(D / 8) * (G * B / 32), n_spans = (size_t)G * D / (128 / B);
    for (size_t base = threadIdx.x - lane; base < n_keys; base += blockDim.x) {
        uint4 raw[32 / B];
        kvq_dev_columns_load<B, G>(K + i * G * D, D, base + lane, base + lane < n_keys, raw);
        kvq_dev_columns<B, G, true>(raw, D, base + lane, base + lane < n_keys, pool.zero_mode,
                                    nullptr, buf, pool.k_sz + page * D, nullptr);
    }
    for (size_t base = threadIdx.x - lane; base < n_spans; base += blockDim.x) {
        uint4 raw[16 / B];
        kvq_dev_span_load<B>(V + i * G * D, base + lane, base + lane < n_spans, raw);
        kvq_dev_span<B, GV, true>(raw, D, base + lane, base + lane < n_spans, pool.zero_mode,
                                  nullptr, buf + n, pool.v_sz + page * (G * D / GV), nullptr);
    }
    __syncthreads();
    for (size_t w = threadIdx.x; w < n; w += blockDim.x)
        kvq_mma_fragment_word(buf, buf + n, D, G, B, w, &pool.k_words[page * n + w],
                              &pool.v_words[page * n + w]);
}
typedef void (*kvq_cuda__sealed_kernel)(const __half *, const __half *, int, const int32_t *,
                                        kvq_cuda_pool, const int *);
template <int B, int G>
static kvq_cuda__sealed_kernel kvq_cuda__sealed_fn_gv(int Gv)
{
    return Gv == 32 ? kvq_quantize_sealed_stream_kernel<B, G, 32>
         : Gv == 64 ? kvq_quantize_sealed_stream_kernel<B, G, 64>
                    : kvq_quantize_sealed_stream_kernel<B, G, 128>;
}
template <int B>
static kvq_cuda__sealed_kernel kvq_cuda__sealed_fn_g(int G, int Gv)
{
    return G == 32 ? kvq_cuda__sealed_fn_gv<B, 32>(Gv)
         : G == 64 ? kvq_cuda__sealed_fn_gv<B, 64>(Gv) : kvq_cuda__sealed_fn_gv<B, 128>(Gv);
}

/* Quantize n full pages of rows into sealed pool pages. d_K, d_V: (n G, D)
   fp16, the keys and values of slots 0 .. G-1 of page i at rows i G ..;
   page i goes to pool page d_pages[i] (d_pages: (n) distinct pool page
   ids, trusted to be in range as kvq_cuda_move_slots's are; NULL: pages
   0 .. n-1, which must exist). Keys per channel (group G), values per
   token (group Gv), the pool's B and zero mode: every byte of a page as
   kvq_cuda_quantize would write it, then kvq_cuda_seal_pages. A page
   still filling is not sealed: its values go through kvq_cuda_quantize
   (unit_dst: the page's token slots) as they come, its keys when it is
   full. A rotating pool's rows are rotated first, as for
   kvq_cuda_quantize (Sec. 2.1). d_status: bad data as kvq_cuda_quantize
   reports it (NaN/Inf, a scale or zero beyond fp16), and then NOTHING is
   written; validate = 0 skips that pass for rows known to be good.
   KVQ_OK; KVQ_ERR_NULL; KVQ_ERR_CONFIG (not a tensor-core shape, or the
   value group); KVQ_ERR_CAPACITY (n > n_pages without d_pages);
   KVQ_ERR_OVERFLOW; a CUDA failure.                                     */
extern "C" kvq_status kvq_cuda_quantize_sealed(const kvq_cuda_pool *pool, const __half *d_K,
                                                const __half *d_V, size_t n,
                                                const int32_t *d_pages, int *d_status,
                                                int validate, cudaStream_t stream)
{
    if (!pool || !d_K || !d_V || !d_status)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_quantize_sealed: NULL pointer");
    if (!pool->k_words || !pool->k_sz || !pool->v_words || !pool->v_sz)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_quantize_sealed: pool has a NULL array");
    const int D = pool->head_dim, G = pool->group, Gv = pool->value_group, B = pool->bits;
    if (!kvq_mma_shape_ok(D, G, B))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_quantize_sealed: D=%d G=%d B=%d is not a "
                              "tensor-core shape", D, G, B);
    if (Gv <= 0 || D % Gv || (Gv * B) % 32)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_quantize_sealed: value group %d must divide "
                              "D=%d and fill whole words", Gv, D);
    if (n > 0x7fffffffu / (size_t)G)
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "kvq_cuda_quantize_sealed: %zu pages in one call", n);
    if (!d_pages && n > pool->n_pages)
        return kvq_cuda__fail(KVQ_ERR_CAPACITY, "kvq_cuda_quantize_sealed: %zu pages into a pool of %zu",
                              n, pool->n_pages);
    KVQ_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int), stream));
    if (n == 0) return KVQ_OK;
    kvq_dev_qshape qk, qv;
    kvq_status e = kvq_cuda__qshape(d_K, pool->k_words, pool->k_sz, n * G, D, B, G,
                                    KVQ_PER_CHANNEL, pool->zero_mode, &qk);
    if (e == KVQ_OK)
        e = kvq_cuda__qshape(d_V, pool->v_words, pool->v_sz, n * G, D, B, Gv, KVQ_PER_TOKEN,
                             pool->zero_mode, &qv);
    if (e != KVQ_OK) return e;
    /* the streaming steps where both sides have them (16-byte rows and
       words: the pool's arrays come from cudaMalloc, the rows are checked) */
    const bool streams = kvq_cuda__stream_shape(qk, d_K, pool->k_words) &&
                         kvq_cuda__stream_shape(qv, d_V, pool->v_words);
    if (validate)                      /* both sides checked before any write */
        for (int side = 0; side < 2; side++) {
            const kvq_dev_qshape &q = side ? qv : qk;
            const __half *x = side ? d_V : d_K;
            if (streams) {
                const size_t items = kvq_cuda__stream_items(q);
                KVQ_CUDA_LAUNCH(kvq_cuda__stream_fn(q, 0), kvq_cuda__grid(items, 256), 256, 0, stream)(
                    x, q.D, items, q.mode, nullptr, nullptr, nullptr, d_status);
            } else {
                KVQ_CUDA_LAUNCH(kvq_quantize_check_kernel, kvq_cuda__grid(q.n_groups, 128), 128, 0,
                                stream)(x, q, d_status);
            }
            KVQ_CUDA_CHECK(cudaGetLastError());
        }
    const size_t bytes = 2 * (size_t)D * G * B / 8;
    if (streams) {
        const kvq_cuda__sealed_kernel fn = B == 2 ? kvq_cuda__sealed_fn_g<2>(G, Gv) : kvq_cuda__sealed_fn_g<4>(G, Gv);
        KVQ_CUDA_CHECK(kvq_cuda__func_smem((const void *)fn, bytes));
        KVQ_CUDA_LAUNCH(fn, (unsigned)n, 128, bytes, stream)(d_K, d_V, D, d_pages, *pool, d_status);
        KVQ_CUDA_CHECK(cudaGetLastError());
        return KVQ_OK;
    }
    KVQ_CUDA_CHECK(kvq_cuda__func_smem((const void *)kvq_quantize_sealed_kernel, bytes));
    KVQ_CUDA_LAUNCH(kvq_quantize_sealed_kernel, (unsigned)n, 128, bytes, stream)(d_K, d_V, qk, qv,
                                                                               d_pages, *pool,
                                                                               d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return KVQ_OK;
}

/* -- is the subnormal decode exact on this GPU? ---------------------------- */
/* Kept: A = 2^-24 (the smallest fp16 subnormal) everywhere, B = 1: each D
   entry is 16 * 2^-24 = 2^-20 if subnormal inputs are kept, 0 if flushed.
   Kept is not enough. The decode is exact only if the tensor cores treat
   a subnormal input's products as a normal input's scaled by a power of
   two, and an H200 that keeps them does not (the variant missed 1e-4
   there). So the two decodes are run against each other too, per B:
   hashed codes of every shift, weights of 11 significant bits and both
   signs from 2^-8 to 65504 (the kernel's hi and lo), B's rows 8-15
   pre-scaled as the kernel scales them, four MMAs chained in one C. C of
   the subnormal decode times its row factor (kvq_mma_post) must be the
   magic decode's C, bit for bit: returns the entries that differ.       */
static __device__ __forceinline__ uint32_t kvq_mma_probe_hash(uint32_t x)
{
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu;
    return x ^ (x >> 16);
}
template <int B>
static __device__ int kvq_mma_probe_decodes(int lane)
{
    const float col = 1.0f / (float)(1 << kvq_mma_sub_shift(B, 0, 1));   /* B's rows 8-15 */
    float cm[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, cs[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int step = 0; step < 4; step++) {
        const uint32_t w = kvq_mma_probe_hash((uint32_t)(lane + 32 * step + 1024 * B));
        uint32_t am[16 / B], as[16 / B], bm[2] = { 0u, 0u }, bs[2] = { 0u, 0u };
        kvq_mma_decode<B>(w, am);                /* k-tile 0: registers 0..3 */
        kvq_mma_decode_subnormal<B>(w, as);
        for (int r = 0; r < 2; r++)              /* B register r: rows + 8 r  */
            for (int h = 0; h < 2; h++) {
                const uint32_t y = kvq_mma_probe_hash(w ^ (uint32_t)(0x9E3779B1u * (2 * r + h + 1)));
                const float v = ((y >> 31) ? -1.0f : 1.0f) * (1.0f + (float)(y & 1023u) / 1024.0f) *
                                kvq_mma_pow2i((int)((y >> 10) % 24u) - 8);
                bm[r] |= (uint32_t)__half_as_ushort(__float2half_rn(v)) << (16 * h);
                bs[r] |= (uint32_t)__half_as_ushort(__float2half_rn(r ? v * col : v)) << (16 * h);
            }
        kvq_mma_16816(cm, am, bm[0], bm[1]);
        kvq_mma_16816(cs, as, bs[0], bs[1]);
    }
    int differ = 0;
    for (int i = 0; i < 4; i++) differ += cs[i] * kvq_mma_post<B, KVQ_MMA_DEC_SUBNORMAL>(i >> 1) != cm[i];
    return differ;
}
__global__ void kvq_mma_subnormal_probe_kernel(float *kept /* (32) */, int *differ /* (32) */)
{
    const uint32_t a[4] = { 0x00010001u, 0x00010001u, 0x00010001u, 0x00010001u };
    float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    kvq_mma_16816(c, a, 0x3C003C00u, 0x3C003C00u);
    kept[threadIdx.x] = c[0] + c[1] + c[2] + c[3];
    differ[threadIdx.x] = kvq_mma_probe_decodes<2>(threadIdx.x) + kvq_mma_probe_decodes<4>(threadIdx.x);
}
/* *exact = 1: the subnormal decode is exact on this GPU (subnormal inputs
   kept, and both decodes agree bit for bit); 0: it is not. Asked once
   per process (the first successful call launches and synchronizes), for
   the current device. KVQ_OK; KVQ_ERR_NULL; a CUDA failure.             */
static kvq_status kvq_cuda__probe_subnormals(float *d, int *exact)
{
    float h[64];
    KVQ_CUDA_LAUNCH(kvq_mma_subnormal_probe_kernel, 1, 32, 0, 0)(d, (int *)(d + 32));
    KVQ_CUDA_CHECK(cudaGetLastError());
    KVQ_CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    *exact = 1;
    for (int i = 0; i < 32; i++) {
        int differ;
        memcpy(&differ, &h[32 + i], sizeof differ);
        if (h[i] != 4.0f * 0x1p-20f || differ != 0) *exact = 0;
    }
    return KVQ_OK;
}
/* The probe's answer, the subnormal decode exact on this device (the
   name is the first probe's; both must pass).                         */
extern "C" kvq_status kvq_cuda_mma_keeps_subnormals(int *kept)
{
    static int known = -1;
    if (!kept) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_mma_keeps_subnormals: kept is NULL");
    if (known < 0) {
        float *d = nullptr;
        KVQ_CUDA_CHECK(cudaMalloc((void **)&d, 64 * sizeof(float)));
        int k = 0;
        const kvq_status st = kvq_cuda__probe_subnormals(d, &k);
        cudaFree(d);
        if (st != KVQ_OK) return st;
        known = k;
    }
    *kept = known;
    return KVQ_OK;
}

/* -- the launcher ------------------------------------------------------------ */
typedef void (*kvq_cuda__mma_fn)(kvq_cuda_pool, const kvq_cuda_stream *, int, int, const float *,
                                 float *, int, int, int, int *);
template <int D, int B, int NQ, int STAGES, int DEC, int OPT>
static kvq_cuda__mma_fn kvq_cuda__mma_fn_h(int hilo)
{
    return hilo ? kvq_attend_mma_kernel<D, B, NQ, 1, STAGES, DEC, OPT>
                : kvq_attend_mma_kernel<D, B, NQ, 0, STAGES, DEC, OPT>;
}
/* The kernels built: in place (STAGES 1, no options); two stages with
   the page parameters a page ahead (PF, the default), that with the
   values' C kept over runs of chunks (PF | RUNS: the default where G >=
   64; NQ = 1 and the integer decode only), that built for 5 CTAs per SM
   (PF | OCC5), and at the page start (opt 0); three stages with opt 0.  */
template <int D, int B, int NQ, int DEC>
static kvq_cuda__mma_fn kvq_cuda__pick_mma_hs(int hilo, int stages, int opt)
{
    constexpr int PF = KVQ_MMA_OPT_PF, OCC = KVQ_MMA_OPT_PF | KVQ_MMA_OPT_OCC5;
    if constexpr (NQ == 1 && DEC == KVQ_MMA_DEC_INT8)
        if (stages == 2 && opt == (PF | KVQ_MMA_OPT_RUNS))
            return kvq_cuda__mma_fn_h<D, B, NQ, 2, DEC, PF | KVQ_MMA_OPT_RUNS>(hilo);
    return stages == 1  ? kvq_cuda__mma_fn_h<D, B, NQ, 1, DEC, 0>(hilo)
         : stages == 3  ? kvq_cuda__mma_fn_h<D, B, NQ, 3, DEC, 0>(hilo)
         : opt == PF    ? kvq_cuda__mma_fn_h<D, B, NQ, 2, DEC, PF>(hilo)
         : opt == OCC   ? kvq_cuda__mma_fn_h<D, B, NQ, 2, DEC, OCC>(hilo)
                        : kvq_cuda__mma_fn_h<D, B, NQ, 2, DEC, 0>(hilo);
}
template <int D, int B, int NQ>
static kvq_cuda__mma_fn kvq_cuda__pick_mma_d(int hilo, int stages, int opt, int dec)
{
    return dec == KVQ_MMA_DEC_MAGIC       ? kvq_cuda__pick_mma_hs<D, B, NQ, KVQ_MMA_DEC_MAGIC>(hilo, stages, opt)
         : dec == KVQ_MMA_DEC_SUBNORMAL   ? kvq_cuda__pick_mma_hs<D, B, NQ, KVQ_MMA_DEC_SUBNORMAL>(hilo, stages, opt)
                                          : kvq_cuda__pick_mma_hs<D, B, NQ, KVQ_MMA_DEC_INT8>(hilo, stages, opt);
}
template <int D, int B>
static kvq_cuda__mma_fn kvq_cuda__pick_mma(int nq, int hilo, int stages, int opt, int dec)
{
    return nq == 1 ? kvq_cuda__pick_mma_d<D, B, 1>(hilo, stages, opt, dec)
                   : kvq_cuda__pick_mma_d<D, B, 2>(hilo, stages, opt, dec);
}

/* Resident CTAs per SM of a kernel at a dynamic shared memory size, as
   the runtime reports it (registers, shared memory, threads), asked once
   per device, kernel and size and kept; 0 where the query fails.       */
static int kvq_cuda__resident_ctas(kvq_cuda__mma_fn fn, size_t smem)
{
    struct seen_t { int dev; kvq_cuda__mma_fn fn; size_t smem; int ctas; };
    static std::mutex lock;
    static seen_t seen[64];
    static int n_seen = 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    std::lock_guard<std::mutex> hold(lock);
    for (int i = 0; i < n_seen; i++)
        if (seen[i].dev == dev && seen[i].fn == fn && seen[i].smem == smem) return seen[i].ctas;
    int ctas = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, fn, KVQ_MMA_WARPS * 32, smem) != cudaSuccess ||
        ctas <= 0)
        return 0;
    if (n_seen < 64) seen[n_seen++] = seen_t{ dev, fn, smem, ctas };
    return ctas;
}

/* v5's split count for n_ctas CTAs a split, at most max_splits. A wave
   is what the GPU holds at once, slots = SMs x resident CTAs per SM.
   With every CTA of a launch doing about the same work (a split's
   pages), the launch takes about ceil(n_ctas s / slots) CTA lifetimes of
   1/s of a stream each: the split count s that makes
   waves(s) / s least fills whole waves (FlashInfer plans split-KV
   against the kernel's real occupancy likewise). A count with more
   splits must beat the best so far by 5% (each split adds a CTA's fixed
   work and a partial result for the combine to read), and s stays at
   most about four waves' worth (the default). two_waves: the older rule,
   about two waves whatever the last one holds (KVQ_CUDA_MMA_TWO_WAVES).
   0 for n_ctas or slots 0.                                               */
extern "C" size_t kvq_cuda_mma_splits(size_t n_ctas, size_t slots, size_t max_splits, int two_waves)
{
    if (n_ctas == 0 || slots == 0) return 0;        /* no launch to plan   */
    if (max_splits > KVQ_CUDA_MAX_SPLITS) max_splits = KVQ_CUDA_MAX_SPLITS;
    if (max_splits < 1) max_splits = 1;
    if (two_waves) {
        const size_t s = (2 * slots + n_ctas - 1) / n_ctas;
        return s < 1 ? 1 : s > max_splits ? max_splits : s;
    }
    const size_t cap = (4 * slots + n_ctas - 1) / n_ctas;
    size_t best = 1, best_waves = (n_ctas + slots - 1) / slots;
    for (size_t s = 2; s <= max_splits && s <= cap; s++) {
        const size_t waves = (n_ctas * s + slots - 1) / slots;
        /* waves / s < 0.95 best_waves / best, in integers                 */
        if (100 * waves * best < 95 * best_waves * s) { best = s; best_waves = waves; }
    }
    return best;
}

/* The v5 launch for a shape and variant: its kernel, dynamic shared
   memory, chunk bytes, and its split count (kvq_cuda_mma_splits, each
   split keeping at least two pages per warp). Returns false for a shape
   without a kernel.                                                     */
struct kvq_cuda__mma_plan {
    kvq_cuda__mma_fn fn;
    size_t smem;                 /* the kernel's dynamic shared memory      */
    cudaError_t smem_set;        /* setting it as the kernel's limit        */
    int chunk_bytes, nq, n_hchunks;
    int resident;                /* CTAs per SM the split count assumed     */
    int splits, splits_rest;     /* v5's splits, then Sec. 4's for the rest */
    size_t work_floats;          /* kvq_cuda_attend_mma_workspace's answer  */
};
static bool kvq_cuda__plan_mma(int D, int bits, int value_group, int n_rep, int variant,
                               size_t n_streams, int group, size_t max_tokens,
                               kvq_cuda__mma_plan *p)
{
    if ((D != 64 && D != 128) || (bits != 2 && bits != 4) || value_group <= 0 || group <= 0)
        return false;
    p->nq = n_rep > 4 ? 2 : 1;
    p->n_hchunks = (n_rep + 4 * p->nq - 1) / (4 * p->nq);
    const int hilo = !(variant & KVQ_CUDA_MMA_HI_ONLY), stages = (variant & KVQ_CUDA_MMA_DIRECT) ? 1
                                                         : (variant & KVQ_CUDA_MMA_STAGES3) ? 3 : 2;
    const int dec = (variant & KVQ_CUDA_MMA_SUBNORMAL) ? KVQ_MMA_DEC_SUBNORMAL
                  : (variant & KVQ_CUDA_MMA_MAGIC)     ? KVQ_MMA_DEC_MAGIC : KVQ_MMA_DEC_INT8;
    const int opt = stages != 2 || (variant & KVQ_CUDA_MMA_NO_PREFETCH) ? 0
                  : KVQ_MMA_OPT_PF | ((variant & KVQ_CUDA_MMA_OCC5) ? KVQ_MMA_OPT_OCC5
                                      : p->nq == 1 && dec == KVQ_MMA_DEC_INT8 && group >= 64 ? KVQ_MMA_OPT_RUNS
                                                                                             : 0);
    p->fn = D == 128 ? (bits == 2 ? kvq_cuda__pick_mma<128, 2>(p->nq, hilo, stages, opt, dec)
                                  : kvq_cuda__pick_mma<128, 4>(p->nq, hilo, stages, opt, dec))
                     : (bits == 2 ? kvq_cuda__pick_mma<64, 2>(p->nq, hilo, stages, opt, dec)
                                  : kvq_cuda__pick_mma<64, 4>(p->nq, hilo, stages, opt, dec));
    /* a chunk's staged bytes: key and value words, value (s, z), and
       with the prefetch the page's key (s, z) (kvq_mma_chunks_staged)    */
    p->chunk_bytes = 2 * 32 * (D * bits / 64) * 4 + 32 * (D / 16) * (bits == 4 ? 2 : 1) * 4 +
                     KVQ_MMA_CHUNK * (D / value_group) * (int)sizeof(kvq_sz) +
                     ((opt & KVQ_MMA_OPT_PF) ? D * (int)sizeof(kvq_sz) : 0);
    /* the stages, and after them the warps' accumulators in the same bytes */
    const size_t red_bytes = (size_t)KVQ_MMA_WARPS * 4 * p->nq * D * sizeof(float);
    p->smem = stages == 1 ? 0 : (size_t)KVQ_MMA_WARPS * stages * p->chunk_bytes;
    if (p->smem < red_bytes) p->smem = red_bytes;
    /* OCC5: the largest carveout, room for 5 CTAs' stages              */
    p->smem_set = kvq_cuda__func_smem((const void *)p->fn, p->smem, (opt & KVQ_MMA_OPT_OCC5) != 0);
    const int per_sm = p->smem_set == cudaSuccess ? kvq_cuda__resident_ctas(p->fn, p->smem) : 0;
    p->resident = per_sm > 0 ? per_sm : 2;          /* sizes the grid only */
    const size_t n_ctas = n_streams * (size_t)p->n_hchunks;
    size_t by_pages = (max_tokens / (size_t)group + 1) / (2 * KVQ_MMA_WARPS);
    if (by_pages > KVQ_CUDA_MAX_SPLITS) by_pages = KVQ_CUDA_MAX_SPLITS;
    p->splits = (int)kvq_cuda_mma_splits(n_ctas, (size_t)kvq_cuda__sm_count() * (size_t)p->resident,
                                         by_pages, (variant & KVQ_CUDA_MMA_TWO_WAVES) != 0);
    /* the rest of a stream: at most a page, its tails and a window        */
    kvq_cuda_attend_workspace(n_streams, n_rep, D, group, 2 * (size_t)group + 64, &p->splits_rest);
    p->work_floats = n_streams * (size_t)n_rep * (size_t)(p->splits + p->splits_rest) * (size_t)(D + 2);
    return true;
}

/* Floats of workspace kvq_cuda_attend_mma needs (the same arguments as its
   call); also returns the two kernels' split counts. 0 for a shape
   without a kernel.                                                      */
extern "C" size_t kvq_cuda_attend_mma_workspace(size_t n_streams, int n_rep, int head_dim,
                                                int group, int bits, int value_group, int variant,
                                                size_t max_tokens, int *n_splits_mma,
                                                int *n_splits_rest)
{
    kvq_cuda__mma_plan p;
    if (n_rep <= 0 || !kvq_cuda__plan_mma(head_dim, bits, value_group, n_rep, variant, n_streams,
                                          group, max_tokens, &p))
        return 0;
    if (n_splits_mma) *n_splits_mma = p.splits;
    if (n_splits_rest) *n_splits_rest = p.splits_rest;
    return p.work_floats;
}

/* Which kernel the instruction count favours for a shape: 1 for v5 (seal
   the stream's full pages, kvq_cuda_seal_pages, and call
   kvq_cuda_attend_mma), 0 for Sec. 4's kernel (leave the pages in kvq.h's
   order and call kvq_cuda_attend), -1 for a shape v5 is not built for.
   The rule is make cuda-gates' count of SASS instructions per KB of codes
   (walkthrough 9.9) and one timing: one query head per KV head on
   G = 32 pages goes to the CUDA-core kernel. The count leans the other
   way (v5 518 with its page work against the CUDA-core step's 544 at 2
   bits, 261 against 360 at 4), but an H200 campaign run timed the
   CUDA-core kernel 1.5x faster at 4 bits (T = 32K, v5 with the f16
   decode), so the timing decides. With 2 or more heads
   the tensor cores serve them in one MMA (2-bit G = 32: 518 against 984
   at GQA 4; the f16 decode was timed 1.6-2.0x faster), and G = 64
   or 128 spreads v5's page work over more tokens. An H100 run of today's
   default v5 (T = 32K, 24 shapes) found every pick right: the CUDA-core
   kernel 1.06-1.19x faster at G = 32 with one head, v5 faster at every
   other shape (4-bit G = 128 with one head by 15-23%).                 */
static bool kvq_cuda__mma_pages_ok(int D, int G, int bits)   /* G 32, 64 or 128 */
{
    return kvq_mma_shape_ok(D, G, bits) && (G == 32 || G == 64 || G == 128);
}
extern "C" int kvq_cuda_mma_route(int head_dim, int bits, int group, int n_rep)
{
    if (!kvq_cuda__mma_pages_ok(head_dim, group, bits) || n_rep <= 0 || n_rep > 64) return -1;
    return n_rep == 1 && group == 32 ? 0 : 1;
}

/* Sec. 4's kernel beside v5 (issue 46: no serial tail). v5 and the
   kernel for the rest (unsealed pages, fp16 window rows) write disjoint
   splits of the workspace and read the same q, so kvq_cuda_attend_mma
   forks: an event on the caller's stream after the query's rotation, a
   second stream (non-blocking, one per device, made once) waits for it
   and runs Sec. 4's kernel while v5 runs on the caller's stream, and the
   caller's stream waits for the second's event before the combine. The
   second kernel's CTAs take the SMs v5's last wave leaves idle instead
   of starting after v5's last CTA. The mutex orders each call's
   record-wait pairs when host threads call at once (a wait binds to the
   event's latest record at the time of the wait). Returns NULL when no
   entry is left (more than 16 devices): the launches then stay serial. */
struct kvq_cuda__side_t { int dev; cudaStream_t side; cudaEvent_t fork, join; };
static std::mutex kvq_cuda__side_mu;
static cudaError_t kvq_cuda__side(kvq_cuda__side_t **out)     /* mutex held */
{
    static kvq_cuda__side_t tab[16];
    static int n = 0;
    int dev = 0;
    *out = nullptr;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    for (int i = 0; i < n; i++)
        if (tab[i].dev == dev) { *out = &tab[i]; return cudaSuccess; }
    if (n == 16) return cudaSuccess;
    kvq_cuda__side_t t;
    t.dev = dev;
    if ((e = cudaStreamCreateWithFlags(&t.side, cudaStreamNonBlocking)) != cudaSuccess) return e;
    if ((e = cudaEventCreateWithFlags(&t.fork, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&t.join, cudaEventDisableTiming)) != cudaSuccess)
        return e;                      /* a stream or event lost: once per process */
    tab[n] = t;
    *out = &tab[n++];
    return cudaSuccess;
}

/* Decode attention with the sealed pages on the tensor cores (v5) and the
   rest through Sec. 4's kernel, merged. The same arguments and results as
   kvq_cuda_attend, plus: every stream's sealed pages must be in fragment
   order (kvq_cuda_seal_pages), the value group a multiple of 16, and
   d_work of kvq_cuda_attend_mma_workspace floats. variant, or-ed flags
   (0: the default, weights split hi + lo, chunks staged by cp.async):
     KVQ_CUDA_MMA_HI_ONLY  weights in fp16 only, no lo half (about 2^-12
                           relative per weight; what the peers do)
     KVQ_CUDA_MMA_DIRECT   no staging: each chunk read where it lies
     KVQ_CUDA_MMA_STAGES3  three stages, not two: two chunks in flight per
                           warp while it computes one (1.5x the staging
                           shared memory); not with KVQ_CUDA_MMA_DIRECT
     KVQ_CUDA_MMA_SUBNORMAL  the subnormal decode (Sec. 7: no HFMA2 per
                           two codes); refused on a GPU whose tensor cores
                           flush fp16 subnormal inputs
     KVQ_CUDA_MMA_NO_PREFETCH  each page's parameters (page number, key
                           (s, z), the integer decode's value exponent)
                           loaded at its start, not staged a page ahead
                           (DIRECT and STAGES3 always load them so)
     KVQ_CUDA_MMA_TWO_WAVES  splits for about two waves of CTAs, not
                           whole waves (kvq_cuda_mma_splits)
     KVQ_CUDA_MMA_OCC5     the default kernel built for 5 CTAs per SM (at
                           most 96 registers a thread; GQA <= 4, one quad
                           of heads: two spill there, so GQA > 4 keeps the
                           default's bound), the largest shared memory
                           carveout; not with NO_PREFETCH, DIRECT or
                           STAGES3
   The default, the page parameters a page ahead and whole waves, is what
   an H100 timed fastest at 18 of the 20 shapes the route sends to v5
   (walkthrough 9.9).                                                    */
extern "C" kvq_status kvq_cuda_attend_mma(const kvq_cuda_pool *pool, int head_dim,
                                           const kvq_cuda_stream *d_streams, size_t n_streams,
                                           int n_rep, size_t max_tokens, const float *d_q,
                                           float *d_out, float *d_work, size_t work_floats,
                                           int *d_status, int variant, cudaStream_t stream)
{
    const int D = head_dim;
    if (!pool) return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_attend_mma: pool is NULL (the fp16 baseline is kvq_cuda_attend)");
    /* v5 stays INT-only: its key step is an integer MMA over Sec. 4's
       uniform codes, and a format's grid (FP8, E2M1, Lloyd-Max) is not an
       affine map of its code. A token-layout pool (kvq.h Sec. 4.1; its
       bits = 0, refused by the shape check below) goes to Sec. 4's
       CUDA-core kernel, kvq_cuda_attend_token.                          */
    if (!d_streams || !d_q || !d_out || !d_work || !d_status)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_attend_mma: NULL pointer");
    if (variant & ~(KVQ_CUDA_MMA_HI_ONLY | KVQ_CUDA_MMA_DIRECT | KVQ_CUDA_MMA_SUBNORMAL |
                    KVQ_CUDA_MMA_STAGES3 | KVQ_CUDA_MMA_MAGIC | KVQ_CUDA_MMA_NO_PREFETCH |
                    KVQ_CUDA_MMA_TWO_WAVES | KVQ_CUDA_MMA_OCC5))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: variant %d unknown", variant);
    if ((variant & KVQ_CUDA_MMA_OCC5) &&
        (variant & (KVQ_CUDA_MMA_NO_PREFETCH | KVQ_CUDA_MMA_DIRECT | KVQ_CUDA_MMA_STAGES3)))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: variant %d: OCC5 is the default "
                              "two-stage kernel with the prefetch (not NO_PREFETCH, DIRECT or STAGES3)",
                              variant);
    if ((variant & KVQ_CUDA_MMA_MAGIC) && (variant & KVQ_CUDA_MMA_SUBNORMAL))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: variant %d asks for two decodes "
                              "(MAGIC and SUBNORMAL)", variant);
    if ((variant & KVQ_CUDA_MMA_DIRECT) && (variant & KVQ_CUDA_MMA_STAGES3))
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: variant %d asks for no staging "
                              "(DIRECT) and three stages (STAGES3)", variant);
    if (variant & KVQ_CUDA_MMA_SUBNORMAL) {
        int kept = 0;
        const kvq_status st = kvq_cuda_mma_keeps_subnormals(&kept);
        if (st != KVQ_OK) return st;
        if (!kept)
            return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: this GPU's tensor cores "
                                  "flush fp16 subnormal inputs or do not multiply them exactly, so the "
                                  "subnormal decode would be wrong");
    }
    if (n_streams == 0 || n_rep <= 0 || n_rep > 64)
        return kvq_cuda__fail(KVQ_ERR_SIZE, "kvq_cuda_attend_mma: n_streams=%zu n_rep=%d (1..64 heads)", n_streams, n_rep);
    if (!kvq_cuda__mma_pages_ok(D, pool->group, pool->bits) || pool->head_dim != D)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: D=%d G=%d B=%d (D 64/128, B 2/4, G 32/64/128)",
                             D, pool->group, pool->bits);
    if (pool->value_group <= 0 || pool->value_group % 16 || D % pool->value_group)
        return kvq_cuda__fail(KVQ_ERR_GROUP, "kvq_cuda_attend_mma: value group %d must divide D=%d and be a "
                             "multiple of 16 (a channel tile in one group)", pool->value_group, D);
    if (!pool->k_words || !pool->k_sz || !pool->v_words || !pool->v_sz)
        return kvq_cuda__fail(KVQ_ERR_NULL, "kvq_cuda_attend_mma: pool has a NULL array");
    if (pool->zero_mode != KVQ_ZERO_FLOAT && pool->zero_mode != KVQ_ZERO_INT)
        return kvq_cuda__fail(KVQ_ERR_CONFIG, "kvq_cuda_attend_mma: zero mode %d unknown", (int)pool->zero_mode);
    kvq_status st = kvq_cuda__pool_rotation_ok(pool, "kvq_cuda_attend_mma");
    if (st != KVQ_OK) return st;
    kvq_cuda__mma_plan plan;             /* the shape was checked above */
    kvq_cuda__plan_mma(D, pool->bits, pool->value_group, n_rep, variant, n_streams, pool->group,
                       max_tokens, &plan);
    if (work_floats < plan.work_floats)
        return kvq_cuda__fail(KVQ_ERR_CAPACITY, "kvq_cuda_attend_mma: workspace of %zu floats, %zu needed", work_floats,
                             plan.work_floats);
    const int s5 = plan.splits, s3 = plan.splits_rest;
    const size_t n_hchunks = (size_t)plan.n_hchunks;
    if (n_streams > (size_t)0x7fffffff / n_hchunks)
        return kvq_cuda__fail(KVQ_ERR_OVERFLOW, "kvq_cuda_attend_mma: %zu streams is too many for one launch", n_streams);
    kvq_cuda__mma_fn f5 = plan.fn;
    const size_t smem5 = plan.smem;
    const int chunk_bytes = plan.chunk_bytes;
    KVQ_CUDA_CHECK(plan.smem_set);
    const unsigned rows = (unsigned)(n_streams * (size_t)n_rep);
    const float *q;
    if ((st = kvq_cuda__query_in(pool, D, d_q, d_out, rows, stream, &q)) != KVQ_OK) return st;
    /* the fork: Sec. 4's kernel on the second stream (kvq_cuda__side)    */
    std::unique_lock<std::mutex> side_lock(kvq_cuda__side_mu);
    kvq_cuda__side_t *side = nullptr;
    KVQ_CUDA_CHECK(kvq_cuda__side(&side));
    const cudaStream_t stream3 = side ? side->side : stream;
    if (side) {
        KVQ_CUDA_CHECK(cudaEventRecord(side->fork, stream));
        KVQ_CUDA_CHECK(cudaStreamWaitEvent(side->side, side->fork, 0));
    }
    /* v5 zeroes the status word (kvq_dev_status_reset): no memset      */
    KVQ_CUDA_LAUNCH(f5, dim3((unsigned)(n_streams * n_hchunks), (unsigned)s5), KVQ_MMA_WARPS * 32,
                    smem5, stream)(*pool, d_streams, n_rep, (int)n_hchunks, q, d_work, 0, s5 + s3,
                                   chunk_bytes, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    /* the rest: Sec. 4's kernel, without the sealed pages                 */
    const int nh3 = kvq_cuda__nh(n_rep);
    const size_t hc3 = (size_t)((n_rep + nh3 - 1) / nh3);
    kvq_cuda__attn_fn f3 = (D == 128) ? kvq_cuda__pick_b<128>(pool->bits, nh3)
                                      : kvq_cuda__pick_b<64>(pool->bits, nh3);
    const size_t page_bytes = (size_t)D * KVQ_CUDA_TILE * pool->bits / 8 * 2 + (size_t)D * 4 +
                              (size_t)KVQ_CUDA_TILE * (D / pool->value_group) * 4;
    const int n_stages = (KVQ_CUDA_WARPS * 2 * page_bytes <= KVQ_CUDA_STAGE2_MAX_KB * 1024) ? 2 : 1;
    const size_t stage_bytes = (size_t)KVQ_CUDA_WARPS * n_stages * page_bytes;
    KVQ_CUDA_CHECK(kvq_cuda__func_smem((const void *)f3, stage_bytes));
    KVQ_CUDA_LAUNCH(f3, dim3((unsigned)(n_streams * hc3), (unsigned)s3), KVQ_CUDA_WARPS * 32,
                    stage_bytes, stream3)(*pool, d_streams, n_rep, (int)hc3, q, d_work, n_stages,
                                          s5, s5 + s3, 1, (int *)nullptr, kvq_cuda_token{});
    KVQ_CUDA_CHECK(cudaGetLastError());
    if (side) {                               /* the join, before the combine */
        KVQ_CUDA_CHECK(cudaEventRecord(side->join, side->side));
        KVQ_CUDA_CHECK(cudaStreamWaitEvent(stream, side->join, 0));
    }
    side_lock.unlock();
    if (D == 128)
        KVQ_CUDA_LAUNCH(kvq_attend_combine_kernel<128>, rows, 128, 0, stream)(d_work, s5 + s3, d_q,
                                                                             d_out, d_status);
    else
        KVQ_CUDA_LAUNCH(kvq_attend_combine_kernel<64>, rows, 64, 0, stream)(d_work, s5 + s3, d_q,
                                                                           d_out, d_status);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return kvq_cuda__output_back(pool, D, d_out, rows, stream);
}
#endif /* KVQ_CUDA_DECLARE_ONLY */

#ifdef KVQ_CUDA_DECLARE_ONLY
/* ======================================================================== */
/* The API of kvq_cuda.o, for translation units that link against it       */
/* (#define KVQ_CUDA_DECLARE_ONLY, then #include "kvq_cuda.cu"): the types  */
/* and inline helpers above, and these functions, documented at their       */
/* definitions in Sec. 0-6.                                                  */
/* ======================================================================== */
extern "C" kvq_status kvq_cuda_quantize(const __half *d_X, size_t T, size_t D, int bits,
                                         size_t G, kvq_axis axis, kvq_zero_mode mode,
                                         const int32_t *d_unit_dst, uint32_t *d_words,
                                         kvq_sz *d_sz, int *d_status, int validate,
                                         cudaStream_t stream);
extern "C" size_t kvq_cuda_attend_workspace(size_t n_streams, int n_rep, int head_dim,
                                            int group, size_t max_tokens, int *n_splits);
extern "C" kvq_status kvq_cuda_attend(const kvq_cuda_pool *pool, int head_dim,
                                       const kvq_cuda_stream *d_streams, size_t n_streams,
                                       int n_rep, size_t max_tokens, const float *d_q,
                                       float *d_out, float *d_work, size_t work_floats,
                                       int *d_status, cudaStream_t stream);
extern "C" kvq_status kvq_cuda_move_slots(void *d_pool, size_t n_slots, size_t slot_bytes,
                                           const int64_t *d_src, const int64_t *d_dst,
                                           size_t n_moves, void *d_temp, cudaStream_t stream);
extern "C" kvq_status kvq_cuda_move_pages(const kvq_cuda_pool *pool, const int64_t *d_src,
                                           const int64_t *d_dst, size_t n, void *d_temp,
                                           cudaStream_t stream);
extern "C" kvq_status kvq_cuda_seal_pages(const kvq_cuda_pool *pool, const int32_t *d_pages,
                                           size_t n, int seal, cudaStream_t stream);
extern "C" kvq_status kvq_cuda_quantize_sealed(const kvq_cuda_pool *pool, const __half *d_K,
                                                const __half *d_V, size_t n,
                                                const int32_t *d_pages, int *d_status,
                                                int validate, cudaStream_t stream);
extern "C" kvq_status kvq_cuda_mma_keeps_subnormals(int *kept);
extern "C" size_t kvq_cuda_attend_mma_workspace(size_t n_streams, int n_rep, int head_dim,
                                                int group, int bits, int value_group, int variant,
                                                size_t max_tokens, int *n_splits_mma,
                                                int *n_splits_rest);
#define KVQ_CUDA_MMA_HILO    0
#define KVQ_CUDA_MMA_HI_ONLY 1
#define KVQ_CUDA_MMA_DIRECT  2
#define KVQ_CUDA_MMA_SUBNORMAL 4
#define KVQ_CUDA_MMA_STAGES3 8
#define KVQ_CUDA_MMA_MAGIC   16
#define KVQ_CUDA_MMA_NO_PREFETCH 32
#define KVQ_CUDA_MMA_TWO_WAVES 64
#define KVQ_CUDA_MMA_OCC5    128
extern "C" kvq_status kvq_cuda_attend_mma(const kvq_cuda_pool *pool, int head_dim,
                                           const kvq_cuda_stream *d_streams, size_t n_streams,
                                           int n_rep, size_t max_tokens, const float *d_q,
                                           float *d_out, float *d_work, size_t work_floats,
                                           int *d_status, int variant, cudaStream_t stream);
extern "C" int kvq_cuda_mma_route(int head_dim, int bits, int group, int n_rep);
extern "C" size_t kvq_cuda_mma_splits(size_t n_ctas, size_t slots, size_t max_splits, int two_waves);
extern "C" void kvq_cuda_export_free(kvq_cuda_export_t *e);
extern "C" kvq_status kvq_cuda_export(const kvq_cache *c, kvq_cuda_export_t *e);
extern "C" kvq_status kvq_cuda_status(const int *d_status, cudaStream_t stream);
extern "C" kvq_status kvq_cuda_quantize_format(const __half *d_X, size_t T, size_t D,
                                                kvq_format f, int bits, size_t G,
                                                float side_scale, uint32_t *d_words,
                                                kvq_sz *d_params, int *d_status,
                                                cudaStream_t stream);
extern "C" kvq_status kvq_cuda_fp8_check(uint32_t first, uint32_t stride, uint64_t count,
                                         const uint32_t *d_list, unsigned *d_out, int *native,
                                         cudaStream_t stream);
extern "C" kvq_status kvq_cuda_attend_token(const kvq_cuda_pool *pool, const kvq_cuda_token *tok,
                                             int head_dim, const kvq_cuda_stream *d_streams,
                                             size_t n_streams, int n_rep, size_t max_tokens,
                                             const float *d_q, float *d_out, float *d_work,
                                             size_t work_floats, int *d_status, cudaStream_t stream);
#ifdef KVQ_EMU
extern "C" void kvq_cuda_fp8_check_cpu(uint32_t first, uint32_t stride, uint64_t count, uint64_t out[6]);
#endif
extern "C" kvq_status kvq_cuda_rotate(kvq_rotation kind, uint64_t seed, size_t D, int inverse,
                                       const float *d_X, float *d_Y, size_t T, int *d_status,
                                       cudaStream_t stream);
extern "C" kvq_status kvq_cuda_rotate_f16(kvq_rotation kind, uint64_t seed, size_t D,
                                           const float *d_X, __half *d_Y16, size_t T,
                                           int *d_status, cudaStream_t stream);
#endif
