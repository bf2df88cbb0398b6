/* kvq_cuda.cu - GPU kernels for kvq.h. STATUS: SKELETON, NOT YET RUN ON A GPU.

   What this file will hold (a later issue): fused kernels that read the
   packed cache of kvq.h directly, i.e. quantize+pack of a [T x D] matrix per
   token and per channel, and one-query decode attention over a KIVI cache that
   never materializes dequantized K or V (the algebra of kvq.h Sec. 8). Each
   kernel must reproduce the CPU reference in kvq.h: the same codes bit for
   bit, and attention within a stated tolerance.

   What it holds now:
     - device helpers that mirror kvq.h exactly (fp16 decode, code extraction,
       the affine map of one group), written to be correct by construction;
     - one simple real kernel, per-token dequantization (kvq.h Sec. 6),
       one thread per element, and its host launcher.
   It compiles with nvcc for sm_80 and sm_90 (`make cuda`). None of it has
   been run or checked on a GPU yet, and no GPU timing exists
   (bench/RESULTS.md).

   It shares every layout with kvq.h and redefines none:
     kvq_sz   {fp16 scale, fp16 zero}, 4 bytes per group         (Sec. 4)
     words    32/B codes per uint32_t, least significant first    (Sec. 5)
     matrix   words[units][groups_per_unit][words_per_group]       (Sec. 6)
              sz[units][groups_per_unit]
   A cache or matrix built on the CPU can be copied to the device as it is.

   Build: nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_80
               -gencode arch=compute_90,code=sm_90 -I. -c kvq_cuda.cu
   No --use_fast_math: kvq.h's exactness arguments assume IEEE division and
   rounding (its Sec. 4).                                                    */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvq.h"   /* host side: types, layouts, status codes (no implementation) */

/* The packed format is shared byte for byte with the CPU: pin the sizes.   */
static_assert(sizeof(kvq_sz) == 4, "kvq_sz must be 4 bytes (fp16 scale, fp16 zero)");
static_assert(offsetof(kvq_sz, scale) == 0 && offsetof(kvq_sz, zero) == 2,
              "kvq_sz field order is part of the format");
static_assert(sizeof(kvq_f16) == 2, "kvq_f16 holds raw IEEE binary16 bits");
static_assert(sizeof(uint32_t) == 4, "packed words are 32 bits");

/* CUDA error check for host code. The library never exits: on failure it
   prints where and why to stderr and returns the error from the enclosing
   function, which must return cudaError_t.                                 */
#define KVQ_CUDA_CHECK(call)                                                  \
    do {                                                                      \
        cudaError_t kvq_err_ = (call);                                        \
        if (kvq_err_ != cudaSuccess) {                                        \
            fprintf(stderr, "kvq_cuda: %s:%d: %s failed: %s\n", __FILE__,     \
                    __LINE__, #call, cudaGetErrorString(kvq_err_));           \
            return kvq_err_;                                                  \
        }                                                                     \
    } while (0)

/* ======================================================================== */
/* device helpers: kvq.h, mirrored                                          */
/* ======================================================================== */
/* __host__ __device__ so that the very same source can also be run on the
   CPU and compared with kvq.h's functions without a GPU.                    */

/* kvq_f16_to_f32: raw binary16 bits -> float. Converting fp16 to fp32 is
   exact for every finite value, subnormals included, and for +-Inf, so it
   matches kvq_f16_to_f32 bit for bit. A stored scale or zero is never NaN:
   kvq.h rejects non-finite input and out-of-range groups.                   */
static __host__ __device__ __forceinline__ float kvq_dev_f16(kvq_f16 h)
{
    return __half2float(__ushort_as_half(h));
}

/* kvq__get_code (kvq.h Sec. 5): code i of a group whose packed words start at
   `words`. 32/B codes per word, least significant bits first: code i sits in
   word i / (32/B) at bit (i % (32/B)) * B. Requires bits in {1, 2, 4, 8}
   (kvq_bits_supported). Then 32/B is a power of two, so the division and
   modulo become a shift and a mask: with lb = log2(B), 32/B = 2^(5 - lb).   */
static __host__ __device__ __forceinline__ uint32_t kvq_dev_code(const uint32_t *words,
                                                                 size_t i, int bits)
{
    const unsigned lb = (bits > 1) + (bits > 2) + (bits > 4); /* log2(B)     */
    const size_t word = i >> (5u - lb);                      /* i / (32/B)   */
    const unsigned slot = (unsigned)(i & ((32u >> lb) - 1u)); /* i % (32/B)  */
    return (words[word] >> (slot << lb)) & ((1u << bits) - 1u);
}

/* kvq_sz_affine (kvq.h Sec. 4): x' = c * a + b from one group's stored
   parameters.
     KVQ_ZERO_FLOAT: a = s, b = z
     KVQ_ZERO_INT:   a = s, b = -zp * s   (exact: zp has <= 12 significant
                                           bits, s has 11)
   c * a is exact as well (c <= 255, 8 bits), so nvcc contracting c * a + b
   into one fma gives the same float as the CPU's multiply then add.       */
static __host__ __device__ __forceinline__ void kvq_dev_affine(kvq_sz sz,
                                                               kvq_zero_mode mode,
                                                               float *a, float *b)
{
    const float s = kvq_dev_f16(sz.scale), z = kvq_dev_f16(sz.zero);
    *a = s;
    *b = (mode == KVQ_ZERO_INT) ? -z * s : z;
}

/* ======================================================================== */
/* kernel: per-token dequantization (kvq.h Sec. 6, kvq_dequantize_matrix)   */
/* ======================================================================== */
/* One element of kvq_dequantize_matrix for per-token groups: words
   (T, D/G, wpg) and sz (T, D/G) -> element idx = t*D + d of out (T, D).
   Group g of token t holds channels g*G .. g*G+G-1, so element (t, d) is code
   d % G of group t*(D/G) + d/G. Written as a __host__ __device__ function so
   that the kernel's arithmetic can be compared with kvq.h on the CPU.      */
static __host__ __device__ __forceinline__ float
kvq_dev_dequant_per_token(const uint32_t *words, const kvq_sz *sz, size_t idx,
                          size_t D, int bits, size_t G, size_t wpg,
                          kvq_zero_mode mode)
{
    const size_t t = idx / D, d = idx % D;
    const size_t group = t * (D / G) + d / G;   /* index into sz             */
    float a, b;
    kvq_dev_affine(sz[group], mode, &a, &b);
    return (float)kvq_dev_code(words + group * wpg, d % G, bits) * a + b;
}

/* out (T, D) = dequantized per-token matrix; one thread per output element,
   and a grid-stride loop covers any T * D.
   version 1: the naive mapping. Neighbouring threads re-read the same word
   and the same kvq_sz; a later version will load a word per thread and
   write several elements.                                                   */
__global__ void kvq_dequantize_per_token_kernel(const uint32_t *__restrict__ words,
                                                const kvq_sz *__restrict__ sz,
                                                size_t T, size_t D, int bits,
                                                size_t G, size_t wpg,
                                                kvq_zero_mode mode,
                                                float *__restrict__ out)
{
    const size_t n = T * D, stride = (size_t)gridDim.x * blockDim.x;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; idx < n; idx += stride)
        out[idx] = kvq_dev_dequant_per_token(words, sz, idx, D, bits, G, wpg, mode);
}

/* Host launcher. All pointers are device pointers in kvq.h's per-token
   matrix layout (kvq_layout_init with KVQ_PER_TOKEN gives the sizes). The
   launch is asynchronous on `stream`. A kernel fault shows up at the next
   synchronizing call. Returns cudaErrorInvalidValue on bad arguments and
   writes nothing then.                                                      */
extern "C" cudaError_t kvq_cuda_dequantize_per_token(const uint32_t *d_words,
                                                     const kvq_sz *d_sz,
                                                     size_t T, size_t D, int bits,
                                                     size_t G, kvq_zero_mode mode,
                                                     float *d_out,
                                                     cudaStream_t stream)
{
    const int threads = 256;
    size_t wpg, blocks;
    int device, sms;
    if (!d_words || !d_sz || !d_out) return cudaErrorInvalidValue;
    if (bits != 1 && bits != 2 && bits != 4 && bits != 8) return cudaErrorInvalidValue;
    if (mode != KVQ_ZERO_FLOAT && mode != KVQ_ZERO_INT) return cudaErrorInvalidValue;
    if (T == 0 || D == 0 || G == 0 || D % G != 0) return cudaErrorInvalidValue;
    if (T > SIZE_MAX / D) return cudaErrorInvalidValue;      /* T * D overflows */
    wpg = G / (32u / (unsigned)bits) + (G % (32u / (unsigned)bits) != 0);
                                              /* kvq_packed_words(G, bits) */
    /* enough blocks to fill the GPU, then the grid-stride loop takes over  */
    KVQ_CUDA_CHECK(cudaGetDevice(&device));
    KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    blocks = T * D / threads + (T * D % threads != 0);
    if (blocks > (size_t)sms * 32u) blocks = (size_t)sms * 32u;
    kvq_dequantize_per_token_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        d_words, d_sz, T, D, bits, G, wpg, mode, d_out);
    KVQ_CUDA_CHECK(cudaGetLastError());
    return cudaSuccess;
}
