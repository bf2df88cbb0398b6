/* tests/emu/kvq_emu.h - run kvq_cuda.cu's own kernels on the CPU.

   A host emulator of the part of CUDA that kvq_cuda.cu uses, written for
   kvq's tests: no GPU, nothing beyond a C++17 compiler and libc. It is not
   a simulator of a GPU's timing; it is an executable model of its
   semantics, strict where the hardware is undefined, so that a kernel's
   indexing, barriers, shuffles, staging copies and tensor-core fragments
   are checked by running them.

   HOW A KERNEL RUNS
     - A launch runs at once, on the calling thread: blocks one after
       another, and the threads of a block as fibers (each on its own 64 KB
       stack with a guard page) that switch only at synchronization points.
     - __syncthreads, __syncwarp, __shfl_sync, __shfl_xor_sync, __any_sync
       and mma.sync are exchanges: every lane the mask names must arrive at the
       SAME call site (file:line) before any of them goes on. A lane that
       waits at another site, a lane that has exited, or a block in which
       no thread can run is reported with the site where each thread waits,
       and the program stops (exit status 86).
     - Shared memory (KVQ_CUDA_SHARED, KVQ_CUDA_SHARED_DYNAMIC in
       kvq_cuda.cu) is a fresh heap block per array and per CUDA block,
       filled with 0xFF bytes (a float NaN) before the block starts: an
       uninitialized read shows as NaN, and AddressSanitizer sees an
       overrun. The dynamic array has exactly the launch's size.
     - cp.async copies land only at the cp.async.wait_group that covers
       them; their destination reads 0xFF from issue until then, so a
       missing wait gives NaN, not luck. A thread that exits with copies
       never waited for is reported.
     - mma.sync.m16n8k16 (f16 x f16 -> f32) gathers the 32 lanes'
       fragments by the PTX ISA's tables (written out again here, not taken
       from kvq_cuda.cu) and computes in one of two accumulation models:
         exact   each product exact, summed in double, rounded once to fp32
         trunc   a model of the hardware after published measurements
                 (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of
                 NVIDIA tensor cores", PeerJ CS 2021): the accumulator and
                 8 products at a time aligned to the largest exponent,
                 significands cut to 24 bits toward zero, the sum cut to
                 fp32 toward zero.
       fp16 subnormal inputs are kept (default) or flushed to zero.
     - mma.sync.m16n8k32 (u8 x u8/s8 -> s32) gathers the fragments by the
       PTX ISA's integer tables and computes exactly (wrapping at 32 bits):
       the ISA specifies integer MMA to the bit, so there is no model.
     - fp16 conversions round to nearest even, written here independently
       of kvq.h's (so that codes agreeing with kvq.h is a real check).
     - Device memory is host memory, allocated exactly (ASan sees
       overruns) and filled with 0xFF; cudaMemcpy/cudaMemset check that
       each pointer is on the side its kind says, and inside one
       allocation.

   OPTIONS (environment variables, read at the first launch)
     KVQ_EMU_SEED=n       n > 0: the next thread to run is drawn at random
                          (seeded) instead of in thread order, and blocks
                          run in a random order
     KVQ_EMU_MMA=model    the MMA's accumulation: exact (default), trunc or
                          align:N:F:R[:sep][:esum] (tests/emu/mma_model.h)
     KVQ_EMU_SUBNORMAL=keep|flush   fp16 subnormal MMA inputs
     KVQ_EMU_SMS=n        multiprocessors reported (default 132, an H100's)
     KVQ_EMU_TRACE=b,w    print each exchange warp w of block b makes (the
                          function, the lanes, what lanes 0-3 received):
                          a reader's window on a warp

   RACE CHECK. Compile the kernels' translation unit with
   -fsanitize=thread and link WITHOUT the TSan runtime: the compiler's
   instrumentation then calls this file's __tsan_* hooks on every load and
   store, and a shadow of shared memory reports
     - a read of a byte no thread of the block has written (uninitialized),
     - a read or write of a byte another thread wrote, or a write of a byte
       another thread read, with no __syncthreads (or, within a warp, no
       warp exchange) in between,
   with both threads and the source lines of both accesses.

   LIMITS (what it does not model): timing, occupancy, memory coalescing,
   bank conflicts, L1/L2, warp divergence inside a warp between exchanges
   (lanes run one after another), global-memory races between blocks
   (blocks run in sequence), device exp2f's 2-ulp error (the host's exp2f
   is used), and any PTX instruction other than those above.            */
#ifndef KVQ_EMU_H
#define KVQ_EMU_H
#define KVQ_EMU 1

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmath>
#include <stdio.h>
#include <stdlib.h>
#include <tuple>
#include <utility>
#include <functional>

/* ---- qualifiers: all of it is host code ---------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)

/* ---- vector and index types ---------------------------------------------- */
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { float2 r = { x, y }; return r; }
static inline uint2 make_uint2(unsigned x, unsigned y) { uint2 r = { x, y }; return r; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { uint4 r = { x, y, z, w }; return r; }
static inline float4 make_float4(float x, float y, float z, float w) { float4 r = { x, y, z, w }; return r; }

/* ---- the runtime API subset ---------------------------------------------- */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
};
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaSharedCarveout { cudaSharedmemCarveoutDefault = -1, cudaSharedmemCarveoutMaxShared = 100 };
typedef struct kvq_emu_stream_t *cudaStream_t;
typedef struct kvq_emu_event_t *cudaEvent_t;
struct cudaDeviceProp {
    char   name[256];
    int    major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
    int    clockRate, memoryClockRate, memoryBusWidth, l2CacheSize;
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
};

cudaError_t cudaMalloc(void **p, size_t bytes);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev);
cudaError_t cudaFuncSetAttribute(const void *fn, cudaFuncAttribute attr, int value);
/* Resident CTAs per SM from threads and shared memory alone (an H100's
   limits: 2048 threads, 32 CTAs, 228 KB with 1 KB reserved per CTA); the
   emulator does not know a kernel's registers, so this is an upper bound
   of what the runtime reports on a GPU.                                  */
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *fn, int threads,
                                                          size_t dyn_smem);
template <class F>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F *fn, int threads,
                                                                        size_t dyn_smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, (const void *)fn, threads, dyn_smem);
}
/* Streams (kvq_emu.cpp Sec. 7.1): the default stream (0) runs its work at
   once; a created stream DEFERS its launches and waits until
   something must have them done: an event recorded after them that
   another stream waits for (cudaStreamWaitEvent) or the host waits for
   (cudaEventSynchronize), cudaStreamSynchronize of that stream,
   cudaDeviceSynchronize, its destruction, and for a blocking stream
   (cudaStreamCreate) any work on the default stream. Work runs as late
   as CUDA allows, so a missing join reads results not yet written.    */
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags = 0);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* ---- fp16 ----------------------------------------------------------------- */
struct alignas(2) __half { unsigned short x; };
struct alignas(4) __half2 { __half x, y; };
namespace kvq_emu {
unsigned short f64_to_f16(double x);           /* round to nearest even      */
double f16_to_f64(unsigned short h);            /* exact                      */
unsigned short f16_fma(unsigned short a, unsigned short b, unsigned short c);  /* one rounding */
}
static inline __half __ushort_as_half(unsigned short u) { __half h; h.x = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline __half __float2half_rn(float f) { return __ushort_as_half(kvq_emu::f64_to_f16(f)); }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return (float)kvq_emu::f16_to_f64(h.x); }
static inline __half2 __halves2half2(__half lo, __half hi) { __half2 r; r.x = lo; r.y = hi; return r; }
static inline __half2 __float2half2_rn(float f) { return __halves2half2(__float2half_rn(f), __float2half_rn(f)); }
static inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c)
{
    __half2 r;
    r.x.x = kvq_emu::f16_fma(a.x.x, b.x.x, c.x.x);
    r.y.x = kvq_emu::f16_fma(a.y.x, b.y.x, c.y.x);
    return r;
}

/* ---- fp32 arithmetic rounded once, never fused (one IEEE op each on the host) */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }

/* ---- bit casts, loads, atomics ---------------------------------------------- */
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
/* cvt.rni.s32.f32 / .u32.f32: round to nearest even, saturating, NaN -> 0 */
static inline int __float2int_rn(float f)
{
    if (f != f) return 0;
    const double r = nearbyint((double)f);
    return r >= 2147483647.0 ? 2147483647 : r <= -2147483648.0 ? (-2147483647 - 1) : (int)r;
}
static inline unsigned __float2uint_rn(float f)
{
    if (f != f) return 0u;
    const double r = nearbyint((double)f);
    return r >= 4294967295.0 ? 4294967295u : r <= 0.0 ? 0u : (unsigned)r;
}
/* cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b (sm_89+), modelled from
   the PTX ISA's definition of cvt, not from kvq's rounding: each input
   is rounded to the nearest value of the 8-bit format, a tie to the even
   significand (.rn); .satfinite: a result whose magnitude exceeds the
   format's largest finite value (MAX_NORM: 448 for E4M3, which has no
   Inf, 57344 for E5M2), Inf included, is MAX_NORM with the input's sign,
   and NaN gives NaN (here the canonical 0x7F: the ISA does not promise a
   sign). d is 16 bits: a's result in the upper byte, b's in the lower.
   Arithmetic, not bits: the input's binade from frexp, its quantum
   2^(e - M) (at least the subnormal quantum 2^(1 - bias - M)), the
   quotient rounded by nearbyint (the host's ties-to-even, exact: a power
   of two scale in double loses nothing), the encoding read back from the
   rounded value.                                                        */
namespace kvq_emu {
static inline unsigned cvt_rn_satfinite_f8(float x, int e5m2)
{
    const int E = e5m2 ? 5 : 4, M = e5m2 ? 2 : 3, bias = (1 << (E - 1)) - 1, emin = 1 - bias;
    const double max_norm = e5m2 ? 57344.0 : 448.0;
    const unsigned sign = std::signbit(x) ? 0x80u : 0u;
    if (x != x) return 0x7Fu;
    double r = std::fabs((double)x);
    if (r != 0.0) {
        int e;
        std::frexp(r, &e);                          /* r in [2^(e-1), 2^e)     */
        const int b = e - 1 < emin ? emin : e - 1;
        const double quantum = std::ldexp(1.0, b - M);
        r = std::isinf(r) ? max_norm : std::nearbyint(r / quantum) * quantum;
        if (r > max_norm) r = max_norm;
    }
    if (r == 0.0) return sign;
    int e;
    std::frexp(r, &e);
    if (e - 1 < emin)                               /* subnormal: exponent 0   */
        return sign | (unsigned)(r / std::ldexp(1.0, emin - M));
    return sign | ((unsigned)(e - 1 + bias) << M) | ((unsigned)(r / std::ldexp(1.0, e - 1 - M)) - (1u << M));
}
static inline unsigned short cvt_rn_satfinite_f8x2(float a, float b, int e5m2)
{
    return (unsigned short)((cvt_rn_satfinite_f8(a, e5m2) << 8) | cvt_rn_satfinite_f8(b, e5m2));
}
}   /* namespace kvq_emu */
static inline int __ffs(int x) { return x ? __builtin_ctz((unsigned)x) + 1 : 0; }
/* __byte_perm(x, y, s) (a PRMT): byte i of the result is byte
   (s >> 4 i) & 7 of the eight bytes y:x, x the low four.               */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)(v >> (8 * ((s >> (4 * i)) & 7u)) & 0xffu) << (8 * i);
    return r;
}
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }
/* Blocks and threads never run at the same time: a read-modify-write is
   atomic by construction.                                                 */
static inline int atomicCAS(int *p, int cmp, int val) { const int old = *p; if (old == cmp) *p = val; return old; }
static inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned val) { const unsigned old = *p; if (old == cmp) *p = val; return old; }
static inline int atomicAdd(int *p, int v) { const int old = *p; *p = old + v; return old; }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { const unsigned old = *p; *p = old + v; return old; }
static inline float atomicAdd(float *p, float v) { const float old = *p; *p = old + v; return old; }
static inline int atomicMax(int *p, int v) { const int old = *p; if (v > old) *p = v; return old; }
static inline int atomicExch(int *p, int v) { const int old = *p; *p = v; return old; }

/* ---- the running thread's built-in variables -------------------------------- */
struct kvq_emu_ids_t { uint3 thread_idx, block_idx; dim3 block_dim, grid_dim; };
extern kvq_emu_ids_t kvq_emu_ids;       /* set by the scheduler at each switch */
#define threadIdx (kvq_emu_ids.thread_idx)
#define blockIdx (kvq_emu_ids.block_idx)
#define blockDim (kvq_emu_ids.block_dim)
#define gridDim (kvq_emu_ids.grid_dim)
static constexpr int warpSize = 32;

/* ---- exchanges: each call carries its site --------------------------------- */
namespace kvq_emu {
/* Where an exchange is called: lanes must meet at the same file:line;
   func (__PRETTY_FUNCTION__) names it in traces, which stay readable when
   line numbers move.                                                     */
struct site_t { const char *file; int line; const char *func; };
void syncthreads(const site_t &at);
void syncwarp(const site_t &at, unsigned mask);
uint64_t shfl(const site_t &at, unsigned mask, uint64_t value, int lane_arg, int width,
              int xor_mode);
void mma_m16n8k16(const site_t &at, float (&c)[4], const uint32_t *a, uint32_t b0, uint32_t b1);
/* mma.sync.m16n8k32.row.col.s32.u8.{u8,s8}.s32: exact integer products and
   sums, wrapping to 32 bits as the PTX ISA specifies without .satfinite  */
void mma_m16n8k32_u8(const site_t &at, int32_t (&c)[4], const uint32_t *a, uint32_t b0, uint32_t b1,
                     bool b_signed);
void cp_async(const char *file, int line, void *smem, const void *gmem, int bytes);
void cp_async_commit(void);
void cp_async_wait(const char *file, int line, int newest_left);
void *shared_static(const void *tag, size_t bytes, size_t align, const char *name,
                    const char *file, int line);
void *shared_dynamic(const char *name, const char *file, int line);

struct site : site_t {                  /* __syncthreads() -> site(...).syncthreads() */
    void syncthreads() const { kvq_emu::syncthreads(*this); }
    void syncwarp(unsigned mask = 0xffffffffu) const { kvq_emu::syncwarp(*this, mask); }
    template <class T> T shfl(unsigned mask, T v, int src, int width = 32) const
    { return exchange(mask, v, src, width, 0); }
    template <class T> T shfl_xor(unsigned mask, T v, int lane_mask, int width = 32) const
    { return exchange(mask, v, lane_mask, width, 1); }
    /* __any_sync: whether any lane of the mask has pred set, as the
       butterfly of five xor exchanges (every lane learns the OR); with a
       partial mask, whose butterfly would read lanes outside it, one
       indexed exchange per lane of the mask                              */
    int any_sync(unsigned mask, int pred) const
    {
        uint32_t v = pred != 0;
        if (mask == 0xffffffffu)
            for (int m = 1; m < 32; m <<= 1) v |= exchange(mask, v, m, 32, 1);
        else
            for (unsigned rest = mask, p = v; rest; rest &= rest - 1)
                v |= exchange(mask, p, __builtin_ctz(rest), 32, 0);
        return v != 0;
    }
    template <class T> T exchange(unsigned mask, T v, int arg, int width, int xor_mode) const
    {
        static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
        uint64_t bits = 0;
        memcpy(&bits, &v, sizeof v);
        bits = kvq_emu::shfl(*this, mask, bits, arg, width, xor_mode);
        memcpy(&v, &bits, sizeof v);
        return v;
    }
};

/* ---- launches ---------------------------------------------------------------- */
struct launch_desc {
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t dyn_smem;
    const void *fn;
    void *ctx;                           /* the kernel and its arguments        */
    void (*run_thread)(void *ctx);       /* calls the kernel once, in a fiber   */
};
void launch(const launch_desc &d);
/* A created stream's work, run later (Sec. 7.1); false for the default
   stream, whose work runs now (after the blocking streams' work).      */
bool stream_defers(cudaStream_t s);
void stream_enqueue(cudaStream_t s, std::function<void()> op, bool is_launch = false);
/* launches made on created streams so far (a test of the fork)         */
unsigned long stream_launches(void);

template <class... P>
struct launcher {
    void (*fn)(P...);
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    /* The arguments are converted to the kernel's parameter types once, as
       a launch copies them into parameter space; each thread then gets its
       own copy (the kernel takes them by value).                          */
    template <class... A> void operator()(A &&... a) const
    {
        struct ctx_t { void (*fn)(P...); std::tuple<P...> args; };
        launch_desc d;
        d.name = name; d.file = file; d.line = line; d.grid = grid; d.block = block;
        d.dyn_smem = smem; d.fn = (const void *)fn;
        d.run_thread = [](void *c) { ctx_t *x = (ctx_t *)c; std::apply(x->fn, x->args); };
        if (stream_defers(stream)) {
            /* the arguments outlive the call until the stream runs it (a
               plain pointer: a shared_ptr's atomic count would need TSan's
               runtime in the race build); never run, never freed         */
            ctx_t *heap = new ctx_t{ fn, std::tuple<P...>(std::forward<A>(a)...) };
            d.ctx = heap;
            stream_enqueue(stream, [d, heap]() { launch(d); delete heap; }, true);
            return;
        }
        ctx_t ctx{ fn, std::tuple<P...>(std::forward<A>(a)...) };
        d.ctx = &ctx;
        launch(d);
    }
};
template <class... P>
static inline launcher<P...> make_launcher(void (*fn)(P...), const char *name, const char *file,
                                           int line, dim3 grid, dim3 block, size_t smem,
                                           cudaStream_t stream)
{
    return launcher<P...>{ fn, name, file, line, grid, block, smem, stream };
}

/* The MMA accumulation model (kvq_emu.cpp; KVQ_EMU_MMA, KVQ_EMU_SUBNORMAL
   give the defaults). Tests may switch it between launches.            */
enum mma_model { MMA_EXACT = 0, MMA_TRUNC = 1 };
void set_mma_model(mma_model model, bool keep_subnormals);
/* One mma.m16n8k16 on whole matrices (row-major A 16x16, B 16x8, C/D
   16x8; fp16 as raw bits): the arithmetic the warp exchange performs,
   exposed for the emulator's own tests.                                  */
void mma_reference(const unsigned short *A, const unsigned short *B, const float *C, float *D);
/* True when some translation unit was built with -fsanitize=thread (the
   race check is on).                                                    */
bool race_checking(void);
/* The bank-conflict model (race build; kvq_emu.cpp Sec. 6): on with
   KVQ_EMU_BANKS=path or banks_count(true); bank_totals gives a kernel's
   shared-memory requests, their wavefronts and the least wavefronts
   their widths allow, over every launch so far (false: none counted). */
void banks_count(bool on);
/* cudaFuncSetAttribute calls so far (a test of attributes set once)    */
unsigned long func_attribute_calls(void);
/* cudaMemset and cudaMemsetAsync calls so far (a test of the attention
   calls' status word, which no memset zeroes)                          */
unsigned long memset_calls(void);
/* One 8- or 16-byte load (LD.64/LD.128, LDS.64/LDS.128 when p is shared)
   as one access: the host compiler would read only the fields used, each
   with a load of its own, so a kernel's vector reads go through this
   (kvq_cuda.cu's kvq_dev_ld_words) for the race check and the bank model
   to see them as the GPU executes them. src: bytes-aligned.            */
void ld_vec(void *dst, const void *src, int bytes);
bool bank_totals(const void *kernel, uint64_t *requests, uint64_t *wavefronts, uint64_t *ideal);
}   /* namespace kvq_emu */

#define KVQ_EMU_SITE kvq_emu::site{ { __FILE__, __LINE__, __PRETTY_FUNCTION__ } }
#define __syncthreads KVQ_EMU_SITE.syncthreads
#define __syncwarp KVQ_EMU_SITE.syncwarp
#define __shfl_sync KVQ_EMU_SITE.shfl
#define __shfl_xor_sync KVQ_EMU_SITE.shfl_xor
#define __any_sync KVQ_EMU_SITE.any_sync

/* The hooks kvq_cuda.cu leaves for an emulator (each is the plain CUDA form
   when not defined): a launch, a static and a dynamic shared array.       */
#define KVQ_CUDA_LAUNCH(fn, grid, block, smem, stream) \
    kvq_emu::make_launcher(fn, #fn, __FILE__, __LINE__, grid, block, smem, stream)
#define KVQ_CUDA_SHARED(T, name, dims)                                            \
    static char kvq_emu_tag_##name;                                               \
    typedef T kvq_emu_type_##name dims;                                           \
    kvq_emu_type_##name &name = *reinterpret_cast<kvq_emu_type_##name *>(         \
        kvq_emu::shared_static(&kvq_emu_tag_##name, sizeof(kvq_emu_type_##name),  \
                               alignof(kvq_emu_type_##name), #name, __FILE__, __LINE__))
#define KVQ_CUDA_SHARED_DYNAMIC(T, name) \
    T *const name = reinterpret_cast<T *>(kvq_emu::shared_dynamic(#name, __FILE__, __LINE__))

#endif /* KVQ_EMU_H */
