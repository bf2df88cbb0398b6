/* kvq.h - KV-cache quantization for LLM inference, as an exact reference.
   v0.9.0 - MIT license, see end of file.

   One header holds the CPU definition of every mechanism, in plain C;
   kvq_simd.h (optional, beside it) gives a few of its functions vector
   bodies with the same bits, and kvq_cuda.cu holds GPU kernels that must
   reproduce its codes bit for bit.

   USAGE (five lines)
       #define KVQ_IMPLEMENTATION          // in exactly one .c/.cpp file
       #include "kvq.h"
       kvq_cache c; kvq_config cfg = kvq_config_kivi(128, 2);   // D=128, 2-bit
       kvq_cache_init(&c, &cfg);  kvq_cache_append(&c, k, v);  // k, v: (D) floats
       kvq_attend(&c, q, 1, out, NULL, KVQ_ATTN_ONLINE, work, n_work);

   COMPILE-TIME OPTIONS
       KVQ_IMPLEMENTATION   emit the implementation in this translation unit
       KVQ_STATIC           make every function static (private copy per TU)
       KVQ_ASSERT(x)        internal invariant check (default: assert.h)
       KVQ_MALLOC(sz) / KVQ_REALLOC(p,sz) / KVQ_FREE(p)
                            allocator override: define all three or none
       KVQ_NO_SIMD          with kvq_simd.h: add nothing (kvq.h alone runs)
       KVQ_NO_FMA           round attention's multiply-adds twice even where
                            fmaf is fast (C99's FP_FAST_FMAF), where they are
                            fused by default (top of IMPLEMENTATION). Codes
                            never depend on it; outputs differ in the last
                            bits
   FAST PATHS
       #include "kvq_simd.h" instead of "kvq.h": the same API and the same
       bits (codes, reads, EAGER and ONLINE outputs), with vector bodies
       for AVX2 (+FMA, +F16C), AVX-512 and AArch64 NEON, chosen by the
       instruction set the compiler targets (tests/simd_check.c).

   CONTENTS
   The declarations come first, numbered; the implementation repeats the
   numbers: the definitions and the reference implementation, paper order
       1. Standard parameters (T, D, G, B, R, N, ...) and the papers'
          symbols in kvq's names
       2. Status codes and kvq_why(), the reason of a failure
       3. fp16 <-> fp32 (round to nearest even; CUDA __float2half_rn bit
          for bit)
       4. Asymmetric uniform quantization of one group (KIVI Sec. 3.1; HF
          post)
          4.1 The formats engines ship: FP8 E4M3/E5M2, NVFP4 (and
              4over6), TurboQuant's Lloyd-Max codes, llama.cpp's q8_0 and
              q4_0; kvq_config_engine names them as the engines do
       5. Bit packing (layout diagram)
       6. Group quantization of a [T x D] matrix, per-token or per-channel
          6.1 Rotation before quantizing: the Walsh-Hadamard transform
              (QuaRot, SpinQuant, RotateKV), any policy, either side
       7. The streaming cache: regions and positions; KIVI's schedule (KIVI
          Sec. 3.3, Algorithm 1); the HF QuantizedCache schedule
          7.1 OTT: outlier token tracing, the outlier and auxiliary pools
          7.2 LogQuant: log-distributed selection (Algorithm 1)
       8. Decode attention: the reference (EAGER) softmax, GQA, and the
          algebra that never materializes dequantized keys
          8.1 ONLINE: one walk of the storage, a tile at a time, and the
              summation order that defines its bits
       9. Byte accounting and invariants
      11. Eviction (StreamingLLM, H2O, SnapKV keep masks), paged blocks with
          reference counts, and compaction (repack, hole-filling)
      10. Buffers: how regions and units grow, move and shrink (placed
          after the algorithms that use them; nothing public)
      12. Which function returns which status (declarations only)
   The declarations below are short: signature, shapes, effect, failures.
   Each mechanism's definition (the paper's section and equations, the math,
   the choices the paper leaves open, the layout diagrams) sits directly
   above its implementation, under the same section number.

   1. STANDARD PARAMETERS (used with these meanings everywhere)
       T   number of tokens (positions) in a head's K or V matrix
       D   head dimension: channels per token (Llama: 128)
       G   group size: how many values share one scale and zero
       B   bits per code, B in {1, 2, 3, 4, 8};  N = 2^B - 1 is the largest code
       R   residual length: KIVI's full-precision window (default 128)
       W   LogQuant window (Sec. 7.2);  k  OTT outlier-pool capacity (Sec. 7.1)
       s   scale, z  zero (both stored as fp16), c  code (0..N)
       pos a token's position: the index of the append that created it, 0-based

   THE PAPERS' SYMBOLS IN KVQ'S NAMES
     KIVI (arXiv:2402.02750, Sec. 3.3, Algorithm 1)
       X_K, X_V        a side's whole cache: c->k, c->v
       X_Kg, X_Vg      the grouped part: the quantized units (words, sz)
       X_Kr, X_Vr      the residual part: rows[KVQ_ROWS_WINDOW]
       l               tokens in the cache: c->n_pos (no eviction)
       r               residual tokens: rows[KVQ_ROWS_WINDOW].n
       G, R            group size cfg.group, residual length cfg.residual
       Q(X), t_K       a quantized unit; the key appended at a step
     HF post (QuantizedCache)
       nbits, q_group_size, residual_length, axis_key, axis_value
                       kvq_hf_params under the same names (Sec. 7)
     OTT (arXiv:2505.10938, Sec. 3.2, Appendix E)
       outlier pool (capacity k)  rows[KVQ_ROWS_OUTLIER], cfg.ott_k
       additional pool            rows[KVQ_ROWS_AUX] ("auxiliary pool"),
                                  cfg.ott_aux
       group tokens + recent      rows[KVQ_ROWS_WINDOW] (R + up to G rows)
       magnitude criterion        kvq__l1, the key's L1 norm
     QuaRot (arXiv:2404.00456), RotateKV (arXiv:2501.16383)
       H, R = H / sqrt(D)         kvq__rotate_row (Sec. 6.1); per side:
                                  cfg.key_rotation, cfg.value_rotation
       random +-1 diagonal        c->rot_sign, drawn from cfg.rotation_seed
     LogQuant (arXiv:2503.19950, Sec. 2.5, Algorithm 1)
       W               cfg.lq_window
       A (the kept list)          rows[KVQ_ROWS_WINDOW]
       dropped tokens  rows[KVQ_ROWS_STAGE] until a whole unit quantizes
       sink tokens     rows[KVQ_ROWS_SINK], cfg.lq_sinks

   VERSION HISTORY
       0.1.0  quantization primitives, KIVI and HF caches, reference attention
       0.2.0  OTT and LogQuant policies; eviction keep masks (StreamingLLM,
              H2O, SnapKV), kvq_cache_evict/compact, paged blocks (Sec. 11)
       0.2.1  the status table (Sec. 2) lists every function per status and
              tests/test_status.c checks it both ways; fixes: a CUSTOM cache
              with one side never quantized overran its window on prefill;
              CUSTOM refuses schedule POLICY; calls on a zeroed or freed cache
              return KVQ__NO(KVQ_ERR_STATE); |q| > KVQ_MAX_ABS_INPUT is KVQ_ERR_RANGE;
              dequantize refuses Inf/NaN stored parameters; kvq_pages_init
              refuses a block size whose sequence tables would overflow
       0.3.0  fast CPU paths with unchanged codes: ONLINE attention walks the
              cache's regions once per batch of query heads (GQA), 16 codes
              at a time (vector extensions on AVX2/AArch64, F16C for fp16;
              -DKVQ_NO_SIMD for plain loops, bit-identical); the quantizer
              16 values at a time; kvq_attend_scratch_floats is per head.
              Fixes: config fields a policy does not read are ignored and
              never size a buffer; a zeroed or freed page pool is
              KVQ_ERR_STATE for every call; definitions moved beside their
              implementations, the status table to Sec. 12
       0.4.0  the 16 lanes held as native vectors of any width (AVX-512,
              AVX2, NEON, plain), fused multiply-add in attention where the
              target has it (-DKVQ_NO_FMA), values and the online softmax a
              whole tile at a time (kvq__exp16), up to 4 query heads per
              key tile; per-token groups quantized 16 side by side. Codes
              unchanged; ONLINE outputs move in the last bits. KIVI's and
              HF's definitions beside their code, buffers after the policies
       0.5.0  kvq_config_hf follows today's transformers QuantizedCache
              (quanto backend, optimum-quanto >= 0.2.3): a float zero
              (KVQ_ZERO_FLOAT, HF's shift = -min) by default, and from an
              empty cache token 0 is quantized at the next append, as HF
              quantizes its first update; the HF post's integer zero point
              stays as kvq_hf_params.zero_mode = KVQ_ZERO_INT. The integer
              zero rounds x / s before adding zp, as the post and quanto
              <= 0.2.2 (codes change only at ties)
       0.6.0  one way to fail: kvq_why(), the calling thread's last reason
              (the cache's and the pool's why fields are deprecated copies);
              kvq_config_validate(cfg) without why arguments; kvq_attend
              checks the position maps it indexes, once per call
              (KVQ_ERR_STATE), and kvq_cache_check also K and V agreeing
              on presence. The file in two parts: the reference in paper
              order, then the fast paths. Codes and outputs unchanged
       0.7.0  rotation before quantizing (Sec. 6.1): kvq_config's
              key_rotation / value_rotation (none, Hadamard, Hadamard with
              a seeded sign vector) on every policy; kvq_rotate. The
              cache's and the pool's deprecated why fields are gone: read
              kvq_why(). With no rotation, codes and outputs unchanged
       0.8.0  kvq.h is the definition, in plain C and complete: ONLINE's
              order written out (Sec. 8.1), the quantizer through
              kvq_quantize_group, no intrinsic, vector type or ISA macro;
              the fast paths move to kvq_simd.h (include it instead of
              kvq.h: same API, same bits), by instruction set only (the
              Zen 1 bodies are gone). FMA where C99's FP_FAST_FMAF says
              fmaf is fast. Codes and outputs unchanged (GCC)
       0.9.0  the formats engines ship (Sec. 4.1) as cache formats on every
              policy but HF: kvq_config's key_format / value_format and
              key_scale / value_scale, kvq_format_quantize/_dequantize,
              the fp8/fp4 conversions, the Lloyd-Max table,
              kvq_config_engine (vLLM's, NVIDIA's and llama.cpp's presets);
              B = 3 (a bit stream: Sec. 5) for Sec. 4's codes too; R = 0
              where every quantized side slides. With INT and B != 3,
              codes and outputs unchanged
*/
#ifndef KVQ_H
#define KVQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef KVQ_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define KVQ_API static __attribute__((unused))   /* a TU may use only some */
#else
#define KVQ_API static
#endif
#else
#define KVQ_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KVQ_VERSION_MAJOR 0
#define KVQ_VERSION_MINOR 9
#define KVQ_VERSION_PATCH 0

/* ======================================================================== */
/* 2. STATUS CODES                                                          */
/* ======================================================================== */
/* Every public function that can fail returns one of these. On failure it
   writes nothing to its outputs and leaves any cache, pool or sequence
   exactly as it was (a failed allocation may leave a buffer larger, never
   different).

   ONE WAY TO FAIL: the status says what kind of failure; kvq_why() says
   why, in one readable line naming the function and the offending value.
   kvq_why() is the reason of the most recent failing kvq call on the
   calling thread: every failure sets it, a success leaves it unchanged
   (so it may describe an older failure; read it only after a status that
   is not KVQ_OK). It is thread-local (C11 _Thread_local, C++ thread_local,
   GCC/clang __thread under C99, MSVC __declspec(thread); elsewhere one
   buffer shared by all threads) and "" before any failure. kvq_cuda.cu
   keeps the same rule for its calls with kvq_cuda_why().
   kvq_status_str() gives the status's general sentence.
   Arguments are checked in a fixed order: pointers, then sizes and bits,
   then capacity and overflow, then the contents of the inputs; so a call
   with several faults returns the first in that order.

   INPUT POLICY for K, V and Q: NaN or +-Inf anywhere is KVQ_ERR_NONFINITE;
   a finite |x| > KVQ_MAX_ABS_INPUT (32752) is KVQ_ERR_RANGE. Inside these
   bounds every stored scale and zero fits fp16 and every attention output
   is finite. The single-group and matrix quantizers accept any finite x
   whose stored fp16 scale and zero fit (else KVQ_ERR_RANGE); kvq_rotate
   any finite X whose rotated rows stay finite in fp32 (else KVQ_ERR_RANGE).

   Which function returns which status, and which functions never fail,
   is the table at the end of the declarations (Sec. 12).                  */
typedef enum kvq_status {
    KVQ_OK = 0,
    KVQ_ERR_NULL,
    KVQ_ERR_SIZE,
    KVQ_ERR_BITS,
    KVQ_ERR_GROUP,
    KVQ_ERR_NONFINITE,
    KVQ_ERR_RANGE,
    KVQ_ERR_OVERFLOW,
    KVQ_ERR_NOMEM,
    KVQ_ERR_CAPACITY,
    KVQ_ERR_CONFIG,
    KVQ_ERR_STATE,
    KVQ_ERR_FORMAT,
    KVQ_ERR_IO,
    KVQ_STATUS_COUNT
} kvq_status;

KVQ_API const char *kvq_status_str(kvq_status s);
/* The reason of the calling thread's most recent failure ("" if none).     */
KVQ_API const char *kvq_why(void);

/* ======================================================================== */
/* 3. fp16                                                                  */
/* ======================================================================== */
/* IEEE binary16 stored in a uint16_t. kvq_f32_to_f16 rounds to nearest, ties
   to even, handles subnormals and overflow to +-Inf, and maps every NaN to
   0x7FFF, exactly as CUDA's __float2half_rn. kvq_f16_to_f32 is exact.       */
typedef uint16_t kvq_f16;

KVQ_API kvq_f16 kvq_f32_to_f16(float f);
KVQ_API float   kvq_f16_to_f32(kvq_f16 h);

/* Largest |x| a cache accepts: then max - min <= 65504 (fp16's largest
   finite value) and every scale and zero fits in fp16 for every B (B = 1
   has scale = max - min).                                                  */
#define KVQ_MAX_ABS_INPUT 32752.0f

/* ======================================================================== */
/* 4. ONE GROUP: ASYMMETRIC UNIFORM QUANTIZATION                            */
/* ======================================================================== */
/* KIVI Sec. 3.1 and Hugging Face's quantized cache: asymmetric uniform
   quantization of one group, with a float zero (KIVI; HF's quanto backend
   today) or an integer zero point (the HF post, May 2024). The exact
   definition, the rounding, the choices the papers leave open and the error
   bound are written above the implementation (Sec. 4,
   kvq_quantize_group).                                                   */
typedef enum kvq_zero_mode {
    KVQ_ZERO_FLOAT = 0,   /* zero = group min, stored as fp16: KIVI, and HF
                             today (optimum-quanto >= 0.2.3, shift = -min)  */
    KVQ_ZERO_INT   = 1    /* integer zero point: the HF post and
                             optimum-quanto <= 0.2.2                        */
} kvq_zero_mode;

/* One group's parameters, as stored. 4 bytes, shared with kvq_cuda.cu.     */
typedef struct kvq_sz {
    kvq_f16 scale;   /* s                                                   */
    kvq_f16 zero;    /* z (float mode) or the integer zp (int mode), fp16   */
} kvq_sz;

/* x' = c * a + b with (a, b) from one group's stored parameters.           */
KVQ_API void kvq_sz_affine(kvq_sz sz, kvq_zero_mode mode, float *a, float *b);

/* Quantize n values x[0], x[stride], ... into codes (n bytes, 0..N) and one
   kvq_sz. Fails on NaN/Inf (KVQ_ERR_NONFINITE) and on a stored scale or
   zero that overflows fp16 (KVQ_ERR_RANGE): float mode needs f16(mn) and
   f16((mx-mn)/N) finite; int mode stores the integer zp, so only the scale
   (f16(|mn|) for a constant group) must fit.                                */
KVQ_API kvq_status kvq_quantize_group(const float *x, size_t n, size_t stride,
                                      int bits, kvq_zero_mode mode,
                                      uint8_t *codes, kvq_sz *sz);

/* ======================================================================== */
/* 4.1 THE FORMATS ENGINES SHIP                                             */
/* ======================================================================== */
/* The code grids inference engines store KV caches in, defined exactly
   (bit layouts, rounding, the choices left open: above the implementation
   of Sec. 4.1). Every format decodes a code c of a group the same way,
       x' = value(c) * a + b,
   value() the format's grid and (a, b) the group's parameters; only INT
   (Sec. 4) has b != 0. A group's parameter is a PARAM of 0, 8, 16 or 32
   bits (kvq_format_param_bits), packed into a cache's kvq_sz words as
   codes are packed into words (Sec. 5).                                   */
typedef enum kvq_format {
    KVQ_FORMAT_INT = 0,        /* Sec. 4: asymmetric uniform, (s, z) fp16   */
    KVQ_FORMAT_E4M3,           /* FP8 E4M3 (OCP "fn"), fp32 scale per group */
    KVQ_FORMAT_E4M3_TENSOR,    /* FP8 E4M3, one fp32 scale per cache side   */
    KVQ_FORMAT_E5M2,           /* FP8 E5M2, fp32 scale per group            */
    KVQ_FORMAT_E5M2_TENSOR,    /* FP8 E5M2, one fp32 scale per cache side   */
    KVQ_FORMAT_NVFP4,          /* E2M1 codes, E4M3 scale per 16 values (the
                                  group), fp32 scale per cache side         */
    KVQ_FORMAT_NVFP4_4OVER6,   /* NVFP4, each block's max mapped to 6 or 4,
                                  whichever has the smaller squared error   */
    KVQ_FORMAT_LLOYD_MAX,      /* TurboQuant: Lloyd-Max grid for N(0, 1) at
                                  B = 2, 3, 4, fp32 norm scale per group    */
    KVQ_FORMAT_LLOYD_MAX_NC,   /* the same with norm correction             */
    KVQ_FORMAT_Q8_0,           /* llama.cpp q8_0: int8, fp16 scale per 32   */
    KVQ_FORMAT_Q4_0,           /* llama.cpp q4_0: 4-bit, fp16 scale per 32  */
    KVQ_FORMAT_COUNT
} kvq_format;

/* fp32 -> FP8 E4M3 / E5M2 / FP4 E2M1 codes: round to nearest, ties to even,
   a finite value beyond the largest saturating to it (PTX
   cvt.rn.satfinite); kvq's choices for the rest: +-Inf saturates too, NaN
   gives the format's NaN with its sign (E2M1 has none: +-0); caches
   refuse both first.
   Sign in the top bit (E2M1: bit 3). And back, exactly.                   */
KVQ_API uint8_t kvq_f32_to_e4m3(float x);
KVQ_API uint8_t kvq_f32_to_e5m2(float x);
KVQ_API uint8_t kvq_f32_to_e2m1(float x);
KVQ_API float   kvq_e4m3_to_f32(uint8_t c);
KVQ_API float   kvq_e5m2_to_f32(uint8_t c);
KVQ_API float   kvq_e2m1_to_f32(uint8_t c);

/* The Lloyd-Max centroids for N(0, 1) at B = 2, 3 or 4 (2^B floats,
   ascending), or NULL.                                                    */
KVQ_API const float *kvq_lloyd_max_centroids(int bits);

/* The format's name ("e4m3", "nvfp4", ...), 1 if it stores B-bit codes,
   the bits of one group's parameter (0: per side only), the size of its
   groups where the format fixes it (0: any G), and its grid's value of
   code c (c < 2^B; NaN for a code the format never stores).            */
KVQ_API const char *kvq_format_name(kvq_format f);
KVQ_API int    kvq_format_bits_ok(kvq_format f, int bits);
KVQ_API int    kvq_format_param_bits(kvq_format f);
KVQ_API size_t kvq_format_group(kvq_format f);
KVQ_API float  kvq_format_value(kvq_format f, int bits, unsigned c);

/* One group of n values x[0], x[stride], ... of format f (not INT: use
   kvq_quantize_group) -> codes (n bytes) and its parameter (param_bits
   low bits of *param). tensor_scale: the side's scale (the _TENSOR and
   NVFP4 formats; > 0 and finite), ignored by the others. Fails on NaN/Inf
   (KVQ_ERR_NONFINITE), a bad format/bits/n (KVQ_ERR_CONFIG / _BITS /
   _SIZE), a bad tensor_scale (KVQ_ERR_RANGE).                            */
KVQ_API kvq_status kvq_format_quantize(kvq_format f, int bits, const float *x, size_t n,
                                       size_t stride, float tensor_scale,
                                       uint8_t *codes, uint32_t *param);
/* codes (n), param -> x' (n), as every reader decodes them.              */
KVQ_API kvq_status kvq_format_dequantize(kvq_format f, int bits, const uint8_t *codes,
                                         size_t n, uint32_t param, float tensor_scale,
                                         float *out);

/* ======================================================================== */
/* 5. BIT PACKING                                                           */
/* ======================================================================== */
/* 32/B codes per 32-bit word, least significant bits first; B = 3 as one
   bit stream, 32 codes in 3 words (diagrams above the implementation of
   Sec. 5).                                                                */
KVQ_API int        kvq_bits_supported(int bits);
KVQ_API size_t     kvq_packed_words(size_t n, int bits);   /* 0 on bad bits */
KVQ_API kvq_status kvq_pack(const uint8_t *codes, size_t n, int bits,
                            uint32_t *words);
KVQ_API kvq_status kvq_unpack(const uint32_t *words, size_t n, int bits,
                              uint8_t *codes);

/* ======================================================================== */
/* 6. GROUP QUANTIZATION OF A [T x D] MATRIX                                */
/* ======================================================================== */
/* A head's K or V, X[T][D], as groups along tokens (per-channel) or along
   channels (per-token), stored unit by unit; the layout and its diagram are
   above the implementation of Sec. 6.                                     */
typedef enum kvq_axis {
    KVQ_PER_TOKEN   = 0,
    KVQ_PER_CHANNEL = 1
} kvq_axis;

/* The shape of one quantized unit: one struct for a matrix's layout, each
   cache side and kvq_cuda.cu's kernels.                                    */
typedef struct kvq_geometry {
    size_t tokens_per_unit;   /* 1 (per-token) or G (per-channel)            */
    size_t groups_per_unit;   /* D/G (per-token) or D (per-channel)          */
    size_t words_per_group;   /* ceil(G B / 32)                              */
} kvq_geometry;

typedef struct kvq_layout {
    size_t units;
    kvq_geometry geom;
    size_t total_words;     /* units * groups_per_unit * words_per_group     */
    size_t total_groups;    /* units * groups_per_unit                       */
} kvq_layout;

KVQ_API kvq_status kvq_layout_init(kvq_layout *L, size_t T, size_t D, int bits,
                                   size_t G, kvq_axis axis);

/* X (T, D) -> words (L.total_words), sz (L.total_groups).                   */
KVQ_API kvq_status kvq_quantize_matrix(const float *X, size_t T, size_t D,
                                       int bits, size_t G, kvq_axis axis,
                                       kvq_zero_mode mode,
                                       uint32_t *words, kvq_sz *sz);
/* words, sz -> X' (T, D).                                                   */
KVQ_API kvq_status kvq_dequantize_matrix(const uint32_t *words, const kvq_sz *sz,
                                         size_t T, size_t D, int bits, size_t G,
                                         kvq_axis axis, kvq_zero_mode mode,
                                         float *Xout);

/* ======================================================================== */
/* 6.1 ROTATION BEFORE QUANTIZING                                           */
/* ======================================================================== */
/* An orthonormal rotation of each row before it is stored (QuaRot, SpinQuant,
   RotateKV); the definition, the rounding order and the choices are above
   the implementation of Sec. 6.1. A cache with a rotation stores rotated
   rows and gives back the caller's basis (Sec. 7, Sec. 8).                */
typedef enum kvq_rotation {
    KVQ_ROT_NONE     = 0,  /* rows stored as given (default)                */
    KVQ_ROT_HADAMARD = 1,  /* y = H x / sqrt(D)                              */
    KVQ_ROT_HADAMARD_SIGNS = 2  /* y = H (s * x) / sqrt(D), s a +-1 vector
                                   drawn from the config's rotation_seed     */
} kvq_rotation;

/* X (T, D) in place: each row rotated (inverse = 0) or rotated back
   (inverse = 1). D must be a power of two for every kind but NONE. A finite
   row whose rotation overflows fp32 is refused (KVQ_ERR_RANGE), X as it was. */
KVQ_API kvq_status kvq_rotate(kvq_rotation kind, uint64_t seed, size_t D,
                              int inverse, float *X, size_t T);

/* ======================================================================== */
/* 7. THE STREAMING CACHE                                                   */
/* ======================================================================== */
/* One kvq_cache holds ONE (layer, KV head): K and V, each divided into a
   quantized region and full-precision row regions. A policy (KIVI, HF,
   OTT, LogQuant, or CUSTOM schedules) is only the rule that moves positions
   between regions. The regions, the schedules and each policy's rule are
   written above their implementations: Sec. 7 (regions, KIVI,
   HF), Sec. 7.1 (OTT) and Sec. 7.2 (LogQuant).                            */

typedef enum kvq_policy {
    KVQ_POLICY_FULL     = 0,  /* no quantization: every token in full precision */
    KVQ_POLICY_KIVI     = 1,
    KVQ_POLICY_HF       = 2,
    KVQ_POLICY_OTT      = 3,  /* outlier token tracing (Sec. 7.1)              */
    KVQ_POLICY_LOGQUANT = 4,  /* log-distributed selection (Sec. 7.2)          */
    KVQ_POLICY_CUSTOM   = 5   /* schedules from key_schedule/value_schedule    */
} kvq_policy;

/* Which tokens OTT's replacement mean covers (the paper leaves it open).    */
typedef enum kvq_ott_mean {
    KVQ_OTT_MEAN_REST = 0,  /* mean of the group's NON-outlier tokens (default):
                               it lies inside every channel's [min, max] of
                               the tokens that remain, so replacing an
                               outlier by it cannot widen any group's range,
                               which is the point of removing the outlier   */
    KVQ_OTT_MEAN_ALL  = 1   /* mean of all G tokens, outliers included: the
                               other literal reading; it can pull a channel's
                               minimum back toward the outlier              */
} kvq_ott_mean;

typedef enum kvq_schedule {
    KVQ_SCHED_NONE  = 0,
    KVQ_SCHED_FLUSH = 1,
    KVQ_SCHED_SLIDE = 2,
    KVQ_SCHED_POLICY = 3    /* moved by the policy's own rule (OTT, LogQuant) */
} kvq_schedule;

typedef struct kvq_config {
    kvq_policy    policy;
    size_t        head_dim;        /* D                                      */
    int           key_bits;        /* B for keys                             */
    int           value_bits;      /* B for values                           */
    size_t        group;           /* G                                      */
    size_t        residual;        /* R                                      */
    kvq_axis      key_axis;
    kvq_axis      value_axis;
    kvq_zero_mode zero_mode;
    int           fp_bits;         /* storage of full-precision rows: 16|32  */
    int           hf_requantize;   /* HF: re-quantize history at each flush  */
    kvq_schedule  key_schedule;    /* set by the policy; read for CUSTOM     */
    kvq_schedule  value_schedule;
    size_t        value_group;     /* G for per-token values; 0 = same as G  */
    /* OTT (Sec. 7.1)                                                        */
    size_t        ott_k;           /* outlier pool capacity k (paper: 3)     */
    size_t        ott_aux;         /* auxiliary pool capacity (paper: 32)    */
    kvq_ott_mean  ott_mean;
    /* LogQuant (Sec. 7.2)                                                   */
    size_t        lq_window;       /* W: 2W..3W tokens kept in full precision */
    size_t        lq_sinks;        /* first tokens always kept (0 = none)    */
    /* Rotation before quantizing (Sec. 6.1), any policy                     */
    kvq_rotation  key_rotation;    /* NONE (default), HADAMARD, _SIGNS       */
    kvq_rotation  value_rotation;
    uint64_t      rotation_seed;   /* the sign vector's seed (_SIGNS only);
                                      both sides share one sign vector      */
    /* The code format of each side (Sec. 4.1); INT (0) is Sec. 4's        */
    kvq_format    key_format;
    kvq_format    value_format;
    float         key_scale;       /* a side's fp32 scale (the _TENSOR and
                                      NVFP4 formats): x = value * scale; 0 =
                                      set at the side's first quantization
                                      from those rows' absmax / grid max    */
    float         value_scale;
} kvq_config;

/* Paper defaults: KIVI B=bits, G=32, R=128, keys per-channel, values
   per-token, float zero, fp16 rows.                                         */
KVQ_API kvq_config kvq_config_kivi(size_t head_dim, int bits);

/* The HF QuantizedCache parameters under their HF names, and which of HF's
   two zero rules to follow (Sec. 7, the HF schedule, has both).            */
typedef struct kvq_hf_params {
    int      nbits;            /* 2 or 4 in quanto; 1..8 accepted here       */
    size_t   q_group_size;     /* default 64                                 */
    size_t   residual_length;  /* default 128                                */
    kvq_axis axis_key;         /* default per-token (HF's axis 0)            */
    kvq_axis axis_value;       /* default per-token                          */
    kvq_zero_mode zero_mode;   /* default KVQ_ZERO_FLOAT: today's transformers
                                  with optimum-quanto >= 0.2.3 (transformers
                                  requires >= 0.2.5). KVQ_ZERO_INT: the HF
                                  post's integer zero point (quanto <= 0.2.2) */
} kvq_hf_params;
KVQ_API kvq_hf_params kvq_hf_defaults(int nbits);
KVQ_API kvq_config    kvq_config_hf(size_t head_dim, kvq_hf_params hf);

/* Full precision only; fp_bits 32 makes it the exact fp32 reference.        */
KVQ_API kvq_config kvq_config_full(size_t head_dim, int fp_bits);

/* OTT paper defaults (Sec. 4.1): G = 128, R = 32, k = 3, auxiliary pool 32,
   keys per-channel, values per-token (value groups of min(128, D) channels),
   and k = 0 in layers 0 and 1 (Sec. 4.4): pass the layer index.             */
KVQ_API kvq_config kvq_config_ott(size_t head_dim, int bits, int layer);

/* LogQuant (Sec. 2.5, 3.1): window W, G = 64 (HF's default), keys
   per-channel (the paper's text; set key_axis = KVQ_PER_TOKEN for what the
   authors' code does), values per-token, no sinks.                          */
KVQ_API kvq_config kvq_config_logquant(size_t head_dim, int bits, size_t W);
/* W = floor(R / 3): at most 3W <= R tokens in full precision, matching a
   KIVI cache with residual R (LogQuant Sec. 3.1).                           */
KVQ_API size_t kvq_logquant_window_for(size_t R);

/* The formats engines ship, under their names (Sec. 4.1): "fp8-e4m3",
   "fp8-e5m2" (one scale per side, vLLM's default 1.0), "fp8-e4m3-per-
   token-head", "int8-per-token-head", "int4-per-token-head" (vLLM's, with
   Hadamard rotation), "nvfp4", "nvfp4-4over6" (side scale 0: from the
   first rows), "turboquant-k8v4", "turboquant-4bit-nc",
   "turboquant-k3v4-nc", "turboquant-3bit-nc" (vLLM's presets), "q8_0",
   "q4_0" (llama.cpp's, with its Hadamard rotation). No full-precision
   window: each token is quantized at its append, as the engines do.
   KVQ_ERR_CONFIG for an unknown name; a head_dim the format cannot serve
   fails kvq_config_validate. *cfg untouched on failure.                  */
KVQ_API kvq_status kvq_config_engine(kvq_config *cfg, size_t head_dim, const char *name);

/* Checks a config (kvq_why() says what is wrong).                          */
KVQ_API kvq_status kvq_config_validate(const kvq_config *cfg);

/* The full-precision row regions of a side.                               */
#define KVQ_ROWS_WINDOW   0   /* recent window / residual / LogQuant's set A */
#define KVQ_ROWS_OUTLIER  1   /* OTT outlier pool (k rows)                   */
#define KVQ_ROWS_AUX      2   /* OTT auxiliary pool                          */
#define KVQ_ROWS_STAGE    3   /* LogQuant: dropped rows waiting for a group  */
#define KVQ_ROWS_SINK     4   /* LogQuant: sink tokens                       */
#define KVQ_ROW_REGIONS   5
#define KVQ_MAX_POSITIONS  ((size_t)1 << 28)   /* per cache (loc index bits)  */
#define KVQ_OTT_MAX_K      256                  /* largest OTT pool capacity   */

/* Where a position lives: region tag in the top 4 bits, index below.        */
#define KVQ_LOC_ABSENT   0u
#define KVQ_LOC_QUANT    1u          /* index = quantized slot                */
#define KVQ_LOC_ROWS0    2u          /* rows[r] has tag KVQ_LOC_ROWS0 + r     */
#define KVQ_LOC_TAG(l)   ((uint32_t)(l) >> 28)
#define KVQ_LOC_INDEX(l) ((size_t)((l) & 0x0FFFFFFFu))

typedef struct kvq_rows {      /* a full-precision region                    */
    void    *data;             /* (cap, D) float or kvq_f16; live rows are
                                  [off, off + n)                             */
    int32_t *pos;              /* (cap) position of each row                 */
    size_t   off, n, cap;
} kvq_rows;

typedef struct kvq_side {
    kvq_axis      axis;
    int           bits;
    kvq_format    format;           /* Sec. 4.1; INT: Sec. 4's (s, z)       */
    float         scale;            /* the side's scale (_TENSOR, NVFP4)    */
    size_t        sz_per_unit;      /* kvq_sz words of parameters per unit  */
    float         value[256];       /* value(c) of the format's grid        */
    kvq_schedule  schedule;
    size_t        group;            /* this side's G                         */
    size_t        chunk;            /* tokens quantized per SLIDE step       */
    kvq_geometry  geom;             /* tokens, groups per unit; words/group  */
    uint32_t     *words;   /* (cap_units, groups_per_unit, words_per_group)  */
    kvq_sz       *sz;      /* (cap_units, sz_per_unit): INT one (s, z) per
                              group; other formats params packed (Sec. 4.1) */
    int32_t      *qpos;    /* (cap_units * tokens_per_unit); -1 placeholder  */
    size_t        n_units, cap_units;
    kvq_rows      rows[KVQ_ROW_REGIONS];
    uint32_t     *loc;     /* (cap_pos) region tag | index per position      */
} kvq_side;

typedef struct kvq_cache {
    kvq_config cfg;
    kvq_side   k, v;
    size_t     n_pos;      /* positions appended so far                      */
    size_t     cap_pos;
    float     *stage;      /* (stage_rows, D) rows gathered for quantizing   */
    size_t     stage_rows;
    unsigned char *mark;   /* (2 * (stage_rows + KVQ_OTT_MAX_K)) row flags   */
    float     *score;      /* (stage_rows + KVQ_OTT_MAX_K) OTT key norms     */
    /* OTT state                                                             */
    int        ott_tracing;    /* 1 while the outlier pool is being updated  */
    size_t     ott_stopped_at; /* n_pos when tracing stopped (0 = never)     */
    size_t     ott_rounds;     /* competitions held                          */
    size_t     n_evicted;      /* positions removed by kvq_cache_evict       */
    /* rotation (Sec. 6.1); NULL when neither side rotates                   */
    float     *rot_sign;       /* (D) +-1 of rotation_seed; NULL unless a
                                  side uses KVQ_ROT_HADAMARD_SIGNS         */
    float     *rot_rows;       /* (2, rot_cap, D) K then V rows, rotated,
                                  from its first 64-byte boundary (the
                                  allocation has KVQ__ROT_SLACK floats more) */
    size_t     rot_cap;        /* tokens rot_rows holds per side            */
} kvq_cache;

KVQ_API kvq_status kvq_cache_init(kvq_cache *c, const kvq_config *cfg);
KVQ_API void       kvq_cache_free(kvq_cache *c);
/* Pre-allocate room for n_tokens so appends up to that never allocate.      */
KVQ_API kvq_status kvq_cache_reserve(kvq_cache *c, size_t n_tokens);
/* Prefill: append T tokens (K, V: (T, D)) and apply the policy's prefill
   rule. On failure the cache is unchanged.                                  */
KVQ_API kvq_status kvq_cache_prefill(kvq_cache *c, const float *K,
                                     const float *V, size_t T);
/* Decode: append one token's k, v (D) and apply the policy's step rule.     */
KVQ_API kvq_status kvq_cache_append(kvq_cache *c, const float *k,
                                    const float *v);
/* The row the cache holds for a position: side 0 = K, 1 = V; out (D).       */
KVQ_API kvq_status kvq_cache_read(const kvq_cache *c, int side, size_t pos,
                                  float *out);

/* ======================================================================== */
/* 8. DECODE ATTENTION                                                      */
/* ======================================================================== */
/* Decode attention over every present position of a cache, for n_q query
   heads sharing this KV head (GQA), without dequantizing K or V: EAGER (the
   reference; can return probabilities) and ONLINE (the fast walk). The
   math is above the implementation of Sec. 8.                             */
typedef enum kvq_attn_mode {
    KVQ_ATTN_EAGER  = 0,
    KVQ_ATTN_ONLINE = 1
} kvq_attn_mode;

#define KVQ_TILE 32

/* Floats of scratch kvq_attend needs for this cache and mode, for one query
   head. ONLINE walks the cache once for as many heads as the scratch holds:
   pass n_q times this and all n_q heads (GQA) share one walk.              */
KVQ_API size_t kvq_attend_scratch_floats(const kvq_cache *c, kvq_attn_mode mode);
/* q (n_q, D) -> out (n_q, D). probs: NULL or (n_q, n_pos), EAGER only.      */
KVQ_API kvq_status kvq_attend(const kvq_cache *c, const float *q, size_t n_q,
                              float *out, float *probs, kvq_attn_mode mode,
                              float *scratch, size_t scratch_floats);

/* Plain attention over dense K, V (T, D) in double precision, the oracle the
   tests and examples compare against. out (n_q, D); probs NULL or (n_q, T). */
KVQ_API kvq_status kvq_attend_dense(const float *K, const float *V, size_t T,
                                    size_t D, const float *q, size_t n_q,
                                    float *out, float *probs);

/* ======================================================================== */
/* 9. BYTES AND INVARIANTS                                                  */
/* ======================================================================== */
/* Exact bytes held by live data, per side (0 = K, 1 = V). "payload" is what
   the papers count (codes + scales/zeros + full-precision rows); metadata is
   kvq's own bookkeeping (positions and loc maps); allocated is every heap
   byte the cache owns right now, capacity included.                         */
typedef struct kvq_bytes {
    size_t codes[2];
    size_t scale_zero[2];
    size_t full_precision[2];
    size_t payload;
    size_t metadata;
    size_t allocated;
    size_t tokens;
    double bits_per_element;   /* payload * 8 / (2 * tokens * D)             */
} kvq_bytes;

KVQ_API kvq_status kvq_cache_bytes(const kvq_cache *c, kvq_bytes *out);
/* Counts of positions per side and region: quantized, each row region
   (rows[KVQ_ROWS_WINDOW .. KVQ_ROWS_SINK]), absent.                         */
typedef struct kvq_census {
    size_t quantized[2];
    size_t rows[2][KVQ_ROW_REGIONS];
    size_t absent[2];
    size_t placeholders[2];    /* quantized slots with qpos = -1             */
} kvq_census;
KVQ_API kvq_status kvq_cache_census(const kvq_cache *c, kvq_census *out);
/* Verifies every invariant (each position in exactly one region, loc and
   region positions are inverse maps, the policy's window bounds). KVQ_OK or
   KVQ_ERR_STATE with the broken invariant in kvq_why().                      */
KVQ_API kvq_status kvq_cache_check(kvq_cache *c);

/* ======================================================================== */
/* 11. EVICTION, PAGED BLOCKS AND COMPACTION                                */
/* ======================================================================== */
/* Eviction (StreamingLLM, H2O, SnapKV) on any kvq cache: a policy returns a
   keep mask, kvq_cache_evict turns evicted positions into dead slots, and
   compaction gives the memory back; a block allocator with reference
   counts and two compactions (repack, hole-filling) for paged engines. The
   design, the two walls and the choices are above the implementation of
   Sec. 11.                                                                */

/* StreamingLLM: keep the first `sinks` present positions and the last
   `recent` present positions. present, keep: (n) bytes, 1 = present/keep;
   present may be NULL (all present).                                        */
KVQ_API kvq_status kvq_evict_streaming(const uint8_t *present, size_t n,
                                       size_t sinks, size_t recent,
                                       uint8_t *keep);

/* H2O: score (n) accumulates, over decode steps, the attention each cached
   token received: score[p] += sum_h probs[h][p] for the n_q query heads
   sharing this KV head (probs (n_q, n) from kvq_attend EAGER).              */
KVQ_API kvq_status kvq_h2o_accumulate(float *score, const float *probs,
                                      size_t n_q, size_t n);
/* H2O selection for a budget of heavy + recent tokens: the `recent` most
   recent present positions, plus the `heavy` other present positions with
   the largest score (ties: the older position wins). Run after every step,
   this is H2O's greedy rule: with one new token over budget, the one token
   dropped is the lowest-scoring non-recent one.                             */
KVQ_API kvq_status kvq_evict_h2o(const float *score, const uint8_t *present,
                                 size_t n, size_t heavy, size_t recent,
                                 uint8_t *keep);

typedef enum kvq_pooling { KVQ_POOL_AVG = 0, KVQ_POOL_MAX = 1 } kvq_pooling;
/* SnapKV, once at the end of prefill. probs (n_obs, n): row i is the
   attention of prompt query n - n_obs + i over positions 0..n-1 (causal:
   zeros after its own position; the caller computes it, kvq_attend_dense
   on the prefix gives it). vote[p] = sum_i probs[i][p] over the prefix
   p < n - n_obs, then pooled over neighbours with an odd `kernel`
   (stride 1, zero padding of kernel/2, AVG divides by kernel as PyTorch's
   avg_pool1d does). score (n): pooled votes; window positions get +Inf.    */
KVQ_API kvq_status kvq_snapkv_scores(const float *probs, size_t n_obs, size_t n,
                                     size_t kernel, kvq_pooling pooling,
                                     float *score);
/* Keep the n_obs window plus the (capacity - n_obs) prefix positions with
   the largest pooled score (ties: older wins). capacity >= n_obs.          */
KVQ_API kvq_status kvq_evict_snapkv(const float *score, size_t n, size_t n_obs,
                                    size_t capacity, uint8_t *keep);

/* present (n_pos) <- 1 where the cache holds the position.                  */
KVQ_API kvq_status kvq_cache_present(const kvq_cache *c, uint8_t *present,
                                     size_t n);
/* Evict every present position p with keep[p] == 0 (keep: n == n_pos
   bytes). FULL, KIVI, HF and CUSTOM caches; OTT and LogQuant choose their
   own full-precision tokens and refuse (KVQ_ERR_CONFIG). *evicted (may be
   NULL) gets the count. Never allocates.                                    */
KVQ_API kvq_status kvq_cache_evict(kvq_cache *c, const uint8_t *keep, size_t n,
                                   size_t *evicted);

typedef struct kvq_compact_stats {
    size_t slots_before[2], slots_after[2];   /* quantized slots, K and V    */
    size_t blocks_before, blocks_after;       /* both sides, block view      */
    size_t blocks_free_without_compaction;    /* all-dead blocks before      */
    size_t blocks_freed;                      /* before - after              */
    size_t slot_copies;                       /* slots whose content moved   */
    size_t dead_removed;                      /* dead slots dropped          */
    size_t pinned_slots;                      /* dead slots kept (per-channel
                                                 groups with survivors)      */
    double occupancy;                         /* live / slots after          */
} kvq_compact_stats;
/* Order-preserving repack of both sides' quantized stores (see above).
   block_tokens > 0 sets the block view. Never allocates; bit-exact.        */
KVQ_API kvq_status kvq_cache_compact(kvq_cache *c, size_t block_tokens,
                                     kvq_compact_stats *stats);
#define KVQ_COMPACT_EVERY 128    /* TriAttention's cadence (arXiv:2604.04921):
                                    compact every ~128 decoded tokens            */

/* ---- the block allocator ("wall 2": a paged block frees only when empty) --
   A pool of n_blocks blocks, each block_tokens slots of slot_bytes bytes of
   opaque payload (a token's K and V in any kvq representation). A sequence
   owns a block table; blocks shared by several sequences (a common prefix,
   kvq_pseq_fork) carry a reference count. A block returns to the free list
   only when its count drops to 0, and a sequence drops its reference only
   when every slot it uses in that block is dead.

     pool:  data (n_blocks, block_tokens, slot_bytes), refcount (n_blocks)
     seq:   table[b] -> block id;  slot i lives in block table[i / bt] at
            offset i % bt;  alive[i], pos[i] (the logical position: the
            position map hole-filling needs)                                */
typedef struct kvq_pages {
    size_t         n_blocks, block_tokens, slot_bytes;
    unsigned char *data;       /* (n_blocks, block_tokens, slot_bytes)       */
    uint32_t      *refcount;   /* (n_blocks) 0 = free                        */
    uint32_t      *free_list;  /* (n_blocks) stack of free block ids         */
    size_t         n_free;     /* the free-block gauge                       */
} kvq_pages;

typedef struct kvq_pseq {
    uint32_t *table;     /* (cap_blocks) block ids                           */
    uint8_t  *alive;     /* (cap_blocks * block_tokens)                      */
    int32_t  *pos;       /* (cap_blocks * block_tokens) logical positions    */
    size_t    n_blocks, cap_blocks;
    size_t    n_slots;   /* slots in use: [0, n_slots)                       */
} kvq_pseq;

typedef struct kvq_page_stats {
    size_t blocks_freed;      /* blocks returned to the pool by this pass    */
    size_t slot_copies;       /* slots whose payload moved                   */
    size_t tokens_evicted;    /* dead slots the pass removed                 */
    double occupancy;         /* live slots / (blocks held * block_tokens)   */
} kvq_page_stats;

KVQ_API kvq_status kvq_pages_init(kvq_pages *P, size_t n_blocks,
                                  size_t block_tokens, size_t slot_bytes);
KVQ_API void       kvq_pages_free(kvq_pages *P);
KVQ_API void       kvq_pseq_init(kvq_pseq *S);
/* Drops every reference S holds and frees its tables.                      */
KVQ_API void       kvq_pseq_free(kvq_pages *P, kvq_pseq *S);
/* Appends one slot (payload: slot_bytes, may be NULL = zeros) at logical
   position pos. Takes a free block when the last one is full; a shared last
   block is copied first (copy on write). KVQ_ERR_CAPACITY if the pool is
   empty. On failure nothing changes.                                        */
KVQ_API kvq_status kvq_pseq_append(kvq_pages *P, kvq_pseq *S, int32_t pos,
                                   const void *payload);
/* dst (empty) shares every block of src: reference counts go up by one.    */
KVQ_API kvq_status kvq_pseq_fork(kvq_pages *P, kvq_pseq *dst, const kvq_pseq *src);
/* The payload of slot i (NULL if i >= n_slots).                             */
KVQ_API void      *kvq_pseq_slot(const kvq_pages *P, const kvq_pseq *S, size_t i);
/* Marks slots with keep[i] == 0 dead (keep: n == n_slots) and returns to
   the pool every block that became all-dead, unless shared: no compaction,
   so this frees only whole dead blocks ("wall 2").                          */
KVQ_API kvq_status kvq_pseq_evict(kvq_pages *P, kvq_pseq *S, const uint8_t *keep,
                                  size_t n, kvq_page_stats *st);
/* Order-preserving repack of slots [first, n_slots): survivors slide
   forward in order, tail blocks go back to the pool. first must be block
   aligned; any shared block at or after it -> KVQ_ERR_STATE, nothing moves.
   kvq_pseq_private_start gives the first block-aligned slot after the
   leading shared blocks, or n_slots; first == n_slots is the empty range,
   always accepted, and moves nothing.                                                    */
KVQ_API kvq_status kvq_pseq_repack(kvq_pages *P, kvq_pseq *S, size_t first,
                                   kvq_page_stats *st);
/* Hole-filling: the survivors of the newest round [round_start, n_slots)
   drop, in order, into the dead slots of [first, round_start); survivors
   left over (more than the holes) slide to round_start. The pos map keeps
   each slot's logical position; physical order is no longer sorted.        */
KVQ_API kvq_status kvq_pseq_holefill(kvq_pages *P, kvq_pseq *S, size_t first,
                                     size_t round_start, kvq_page_stats *st);
KVQ_API size_t     kvq_pseq_private_start(const kvq_pages *P, const kvq_pseq *S);

/* ======================================================================== */
/* 12. WHICH FUNCTION RETURNS WHICH STATUS                                  */
/* ======================================================================== */
/*
   The table is checked by tests/test_status.c, which reads it from this
   file and makes every listed function return every listed status at least
   once (with poisoned outputs), and fails on a status it was not told of.
   "(32-bit)" marks a case reachable only where size_t has 32 bits.

   status              returned by
   KVQ_ERR_NULL        kvq_quantize_group kvq_pack kvq_unpack kvq_layout_init
                       kvq_quantize_matrix kvq_dequantize_matrix
                       kvq_config_validate kvq_cache_init kvq_cache_reserve
                       kvq_cache_prefill kvq_cache_append kvq_cache_read
                       kvq_attend kvq_attend_dense kvq_cache_bytes
                       kvq_cache_census kvq_cache_check
                       kvq_evict_streaming
                       kvq_h2o_accumulate kvq_evict_h2o kvq_snapkv_scores
                       kvq_evict_snapkv kvq_cache_present kvq_cache_evict
                       kvq_cache_compact kvq_pages_init kvq_pseq_append
                       kvq_pseq_fork kvq_pseq_evict kvq_pseq_repack
                       kvq_pseq_holefill kvq_rotate kvq_format_quantize
                       kvq_format_dequantize kvq_config_engine
       a required pointer is NULL (streaming's present mask and every
       stats/evicted output may be NULL)
   KVQ_ERR_SIZE        kvq_quantize_group kvq_pack kvq_unpack kvq_layout_init
                       kvq_quantize_matrix kvq_dequantize_matrix
                       kvq_config_validate kvq_cache_init kvq_cache_reserve
                       kvq_cache_prefill kvq_cache_read kvq_attend
                       kvq_attend_dense
                       kvq_evict_streaming kvq_h2o_accumulate
                       kvq_evict_h2o kvq_snapkv_scores kvq_evict_snapkv
                       kvq_cache_present kvq_cache_evict kvq_cache_compact
                       kvq_pages_init kvq_pseq_append kvq_pseq_evict
                       kvq_pseq_repack kvq_pseq_holefill kvq_rotate
                       kvq_format_quantize kvq_format_dequantize
       a count is zero or out of its range (D, G, R, W in 1..65536; side
       not 0/1; even SnapKV kernel), a mask's length differs from the
       cache's, a scratch buffer is too small, a rotation's D is not a
       power of two
   KVQ_ERR_BITS        kvq_quantize_group kvq_pack kvq_unpack kvq_layout_init
                       kvq_quantize_matrix kvq_dequantize_matrix
                       kvq_config_validate kvq_cache_init kvq_format_quantize
                       kvq_format_dequantize
       bits not in {1, 2, 3, 4, 8} (or not the format's, Sec. 4.1)
   KVQ_ERR_GROUP       kvq_layout_init kvq_quantize_matrix
                       kvq_dequantize_matrix kvq_config_validate kvq_cache_init
       G does not divide D (per-token) or T (per-channel); a per-channel
       FLUSH side needs G | R; OTT's per-channel value group must divide G;
       a format's fixed group (NVFP4 16, q8_0/q4_0 32; others <= 1024)
   KVQ_ERR_NONFINITE   kvq_quantize_group kvq_quantize_matrix
                       kvq_dequantize_matrix kvq_cache_prefill kvq_cache_append
                       kvq_attend kvq_attend_dense kvq_h2o_accumulate
                       kvq_evict_h2o kvq_snapkv_scores kvq_evict_snapkv
                       kvq_rotate kvq_format_quantize
       NaN or Inf in K, V, Q or a score; a stored fp16 scale or zero that
       is Inf/NaN (dequantize); a probability that is not finite and >= 0
   KVQ_ERR_RANGE       kvq_quantize_group kvq_pack kvq_quantize_matrix
                       kvq_cache_prefill kvq_cache_append kvq_attend
                       kvq_rotate kvq_config_validate kvq_cache_init
                       kvq_format_quantize kvq_format_dequantize
       |x| > KVQ_MAX_ABS_INPUT in K, V (cache; also after rotating) or Q; a scale or zero that
       overflows fp16 (quantizers); a code wider than B bits (pack); a
       finite row that overflows fp32 once rotated (kvq_rotate); a side
       scale that is negative or not finite (config), or a format group's
       scale that is not finite; a code the format never stores
   KVQ_ERR_OVERFLOW    kvq_quantize_group kvq_format_quantize
                       kvq_layout_init kvq_quantize_matrix
                       kvq_dequantize_matrix kvq_config_validate(32-bit)
                       kvq_cache_init(32-bit) kvq_cache_prefill
                       kvq_attend kvq_attend_dense
                       kvq_h2o_accumulate
                       kvq_snapkv_scores kvq_pages_init kvq_rotate
       a size computation would overflow size_t
   KVQ_ERR_NOMEM       kvq_cache_init kvq_cache_reserve kvq_cache_prefill
                       kvq_cache_append kvq_attend_dense
                       kvq_pages_init kvq_pseq_append
                       kvq_pseq_fork kvq_rotate
       the allocator returned NULL (kvq_rotate: only for a row within a
       factor D of FLT_MAX, checked in a scratch row)
   KVQ_ERR_CAPACITY    kvq_cache_reserve kvq_cache_prefill kvq_cache_append
                       kvq_pseq_append
       more than KVQ_MAX_POSITIONS positions in one cache; a full page pool
   KVQ_ERR_CONFIG      kvq_quantize_group kvq_layout_init kvq_quantize_matrix
                       kvq_dequantize_matrix kvq_config_validate kvq_cache_init
                       kvq_attend kvq_snapkv_scores kvq_cache_evict kvq_rotate
                       kvq_format_quantize kvq_format_dequantize
                       kvq_config_engine
       an unknown enum value (policy, schedule, axis, zero mode, attention
       mode, pooling, rotation, format), an inconsistent configuration,
       probs with ONLINE attention, eviction on an OTT or LogQuant cache,
       a format other than INT on an HF cache, an unknown engine name
   KVQ_ERR_STATE       kvq_cache_reserve kvq_cache_prefill kvq_cache_append
                       kvq_cache_read kvq_attend kvq_cache_check
                       kvq_cache_evict kvq_cache_compact kvq_pseq_append
                       kvq_pseq_fork kvq_pseq_evict kvq_pseq_repack
                       kvq_pseq_holefill
       a cache or page pool not initialized (or freed), a position not
       present, nothing to attend to, a broken invariant (kvq_cache_check;
       kvq_attend checks the position maps it indexes, once per call), a
       non-empty fork destination, compaction over a shared block
   KVQ_ERR_FORMAT      (no kvq.h function: malformed .npy data, from
                       examples/npy.h, which sets no reason of its own)
   KVQ_ERR_IO          (no kvq.h function: a file error, examples/npy.h)

   Never fail (total, or NULL-safe): kvq_status_str kvq_why kvq_f32_to_f16
   kvq_f16_to_f32 kvq_sz_affine kvq_bits_supported kvq_packed_words (0 on
   bad bits) kvq_config_kivi/_hf/_full/_ott/_logquant kvq_hf_defaults
   kvq_logquant_window_for kvq_f32_to_e4m3/_e5m2/_e2m1 and back
   kvq_lloyd_max_centroids (NULL on bad bits) kvq_format_name
   kvq_format_bits_ok kvq_format_param_bits kvq_format_group
   kvq_format_value (NaN on a bad format, bits or code)
   kvq_cache_free kvq_attend_scratch_floats (0 on NULL)
   kvq_pages_free kvq_pseq_init kvq_pseq_free kvq_pseq_slot (NULL when out
   of range or the pool is dead) kvq_pseq_private_start (0 on a dead pool).

   Config fields a policy does not read (OTT's on a KIVI config, LogQuant's
   W on an OTT one, value_group where values are not quantized, ...) are
   ignored: they are not validated, and kvq_cache_init stores the config
   with them set to zero, so they never size anything.
                                                                            */

#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */

/* ======================================================================== */
/*                             IMPLEMENTATION                               */
/* ======================================================================== */
#ifdef KVQ_IMPLEMENTATION
#ifndef KVQ_IMPLEMENTATION_DONE
#define KVQ_IMPLEMENTATION_DONE

#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdarg.h>

#if defined(KVQ_MALLOC) && defined(KVQ_REALLOC) && defined(KVQ_FREE)
/* all three overridden */
#elif !defined(KVQ_MALLOC) && !defined(KVQ_REALLOC) && !defined(KVQ_FREE)
#include <stdlib.h>
#define KVQ_MALLOC(sz)    malloc(sz)
#define KVQ_REALLOC(p,sz) realloc(p, sz)
#define KVQ_FREE(p)       free(p)
#else
#error "kvq.h: define all of KVQ_MALLOC, KVQ_REALLOC, KVQ_FREE or none of them"
#endif

#ifndef KVQ_ASSERT
#include <assert.h>
#define KVQ_ASSERT(x) assert(x)
#endif

/* Fused multiply-add. The dot products of attention (kvq__fmadd, Sec. 8)
   fuse a x + acc into one rounding where fmaf is as fast as a multiply
   and an add (C99's FP_FAST_FMAF, which GCC defines where the target has
   the instruction: x86 with FMA3, AArch64; clang does not define it, so
   clang builds round twice), and round twice elsewhere; every other
   expression rounds each operation. A build with FMA differs from one
   without only in the last bits of attention outputs, never in a
   quantized code, and kvq_simd.h fuses exactly where this header does.
   GCC compiles ISO C (-std=c99) without contracting expressions by
   default; clang would fuse within an expression, so it is told not to
   here (until the end of the implementation). -DKVQ_NO_FMA turns the
   fused path off.                                                        */
#if !defined(KVQ_NO_FMA) && defined(FP_FAST_FMAF)
#define KVQ__FMA 1
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Layouts shared with kvq_cuda.cu: their sizes are part of the format.      */
typedef char kvq__check_sz_is_4_bytes[(sizeof(kvq_sz) == 4) ? 1 : -1];
typedef char kvq__check_f16_is_2_bytes[(sizeof(kvq_f16) == 2) ? 1 : -1];
typedef char kvq__check_word_is_4_bytes[(sizeof(uint32_t) == 4) ? 1 : -1];
typedef char kvq__check_float_is_4_bytes[(sizeof(float) == 4) ? 1 : -1];

#ifdef __cplusplus
extern "C" {
#endif

/* THE FAST PATHS' HOOKS. kvq_simd.h, included instead of this header,
   defines KVQ__SIMD on targets with vector units and gives a vector body
   to the few functions below whose first line is KVQ__FAST: that line
   hands the call to kvq__simd_NAME and returns its result. Without
   kvq_simd.h the line does nothing and the plain body after it runs: the
   plain body is the definition, and kvq_simd.h's must give the same bits
   (tests/simd_check.c compares the two builds on every cache kind). The
   walk's hook, KVQ__FAST_VOID_IF, hands over only the caches kvq_simd.h
   says it serves; a quantizer's hook is skipped at B = 3 (and for Sec.
   4.1's formats, which never reach it): the plain bodies run there.    */
#ifdef KVQ__SIMD
#define KVQ__SIMD_HOOKED 1
#define KVQ__FAST(call)      return kvq__simd_##call
#define KVQ__FAST_VOID(call) do { kvq__simd_##call; return; } while (0)
#define KVQ__FAST_VOID_IF(serves, call) do { if (kvq__simd_##serves) { kvq__simd_##call; return; } } while (0)
static float kvq__simd_f16_stored(kvq_f16 h);
static kvq_f16 kvq__simd_f16_store(float f);
static void kvq__simd_f16_row(const kvq_f16 *h, size_t D, float *out);
static float kvq__simd_absmax_or_nonfinite(const float *x, size_t n);
static kvq_status kvq__simd_quantize_unit(const float *X, size_t D, int bits, size_t G,
                                          kvq_axis axis, kvq_zero_mode mode,
                                          uint32_t *words, kvq_sz *sz);
static void kvq__simd_quantize_units(const float *X, const kvq_layout *L, size_t D, int bits,
                                     size_t G, kvq_axis axis, kvq_zero_mode mode,
                                     uint32_t *words, kvq_sz *sz);
static float kvq__simd_rotate_into(const float *sign, size_t D, int inverse,
                                   const float *in, float *out);
static float kvq__simd_dot(const float *a, const float *b, size_t n);
static float kvq__simd_token_key_dot(const float *q, const float *codes, const kvq_sz *sz,
                                     const float *qsum, size_t D, size_t G, kvq_zero_mode mode);
static size_t kvq__simd_map_lanes(const uint32_t *map, size_t n, const uint32_t *off,
                                  const uint32_t *len, uint32_t *bad);
struct kvq__walk;
static int kvq__simd_walk_serves(const kvq_cache *c);  /* the caches it walks */
static void kvq__simd_walk_cache(const kvq_cache *c, struct kvq__walk *H);
#else
#define KVQ__FAST(call)      (void)0
#define KVQ__FAST_VOID(call) (void)0
#define KVQ__FAST_VOID_IF(serves, call) (void)0
#endif

/* ======================================================================== */
/* THE DEFINITIONS AND THE REFERENCE IMPLEMENTATION                        */
/* ======================================================================== */
/* Each mechanism in the order the papers build it: fp16 (3), one group's
   quantization (4), packing (5), matrices (6), the streaming cache with
   KIVI's and HF's schedules (7), OTT (7.1), LogQuant (7.2), reference
   attention (8), accounting and invariants (9), eviction and compaction
   (11), then the buffers all of them move rows through (10). Read top to
   bottom, this is the definition: no vector type appears here. A few
   functions begin with KVQ__FAST, where kvq_simd.h (if included) takes the
   call with a vector body that must give the same bits (the hooks, above). */

/* ------------------------------------------------------------------------ */
/* 2. status strings and kvq_why()                                          */
/* ------------------------------------------------------------------------ */
KVQ_API const char *kvq_status_str(kvq_status s)
{
    switch (s) {
    case KVQ_OK:            return "ok";
    case KVQ_ERR_NULL:      return "a required pointer argument is NULL";
    case KVQ_ERR_SIZE:      return "a size is zero, too large, or a buffer is too small";
    case KVQ_ERR_BITS:      return "unsupported bit width (use 1, 2, 4 or 8)";
    case KVQ_ERR_GROUP:     return "group size does not divide the grouped dimension";
    case KVQ_ERR_NONFINITE: return "input contains NaN or Inf (or a negative probability)";
    case KVQ_ERR_RANGE:     return "input magnitude out of range (KVQ_MAX_ABS_INPUT, fp16 scale/zero, code width)";
    case KVQ_ERR_OVERFLOW:  return "size arithmetic would overflow size_t";
    case KVQ_ERR_NOMEM:     return "out of memory";
    case KVQ_ERR_CAPACITY:  return "cache capacity exceeded";
    case KVQ_ERR_CONFIG:    return "invalid configuration or unknown mode";
    case KVQ_ERR_STATE:     return "operation not valid in the cache's current state";
    case KVQ_ERR_FORMAT:    return "malformed input data";
    case KVQ_ERR_IO:        return "file could not be opened, read or written";
    default:                return "unknown status";
    }
}

/* The reason of the calling thread's last failure (Sec. 2, ONE WAY TO FAIL).
   Every failing path writes it through kvq__say, kvq__fail, kvq__pfail or
   KVQ__NO; nothing else touches it.                                        */
#if defined(_MSC_VER)
#define KVQ__THREAD __declspec(thread)
#elif defined(__cplusplus) && __cplusplus >= 201103L
#define KVQ__THREAD thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define KVQ__THREAD _Thread_local
#elif defined(__GNUC__) || defined(__clang__)
#define KVQ__THREAD __thread
#else
#define KVQ__THREAD          /* no thread-local storage: one shared reason */
#endif
static KVQ__THREAD char kvq__why_buf[160];

KVQ_API const char *kvq_why(void) { return kvq__why_buf; }

static void kvq__vsay(const char *fmt, va_list ap)
{
    vsnprintf(kvq__why_buf, sizeof kvq__why_buf, fmt, ap);
}

static void kvq__say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvq__vsay(fmt, ap);
    va_end(ap);
}

/* A failure whose status says it all: "function: the status's sentence".  */
static kvq_status kvq__no(kvq_status st, const char *fn)
{
    kvq__say("%s: %s", fn, kvq_status_str(st));
    return st;
}
#define KVQ__NO(st) kvq__no((st), __func__)

/* A failure with its own reason (printf-style).                           */
static kvq_status kvq__refuse(kvq_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvq__vsay(fmt, ap);
    va_end(ap);
    return st;
}

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */
/* ------------------------------------------------------------------------ */
static int kvq__mul(size_t a, size_t b, size_t *r)  /* 1 if a*b fits        */
{
    if (a != 0 && b > (size_t)-1 / a) return 0;
    *r = a * b;
    return 1;
}
static int kvq__mul3(size_t a, size_t b, size_t c, size_t *r)
{
    size_t t;
    return kvq__mul(a, b, &t) && kvq__mul(t, c, r);
}
static int kvq__finite(float x) { return x - x == 0.0f; }  /* NaN/Inf -> 0 */

static kvq_status kvq__check_finite(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!kvq__finite(x[i])) return KVQ__NO(KVQ_ERR_NONFINITE);
    return KVQ_OK;
}

static uint32_t kvq__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float    kvq__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Forced inlining where a constant B must reach the loops (GCC, clang), and
   a loop unrolled completely before the compiler decides what lives in
   registers (KVQ__UNROLL(n) on the line before it; GCC's -O2 unrolls too
   little and too late for that otherwise).                                */
#if defined(__GNUC__) || defined(__clang__)
#define KVQ__INLINE inline __attribute__((always_inline))
#if defined(__CUDACC__)           /* nvcc's front end warns on GCC's pragma */
#define KVQ__UNROLL(n)
#else
#define KVQ__UNROLL(n) _Pragma(KVQ__PRAGMA_STR(GCC unroll n))
#define KVQ__PRAGMA_STR(x) #x
#endif
#else
#define KVQ__INLINE inline
#define KVQ__UNROLL(n)
#endif

/* ------------------------------------------------------------------------ */
/* 3. fp16                                                                  */
/* ------------------------------------------------------------------------ */
KVQ_API kvq_f16 kvq_f32_to_f16(float f)
{
    uint32_t x = kvq__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7FFFFFFFu;
    uint32_t exp, mant, shift, half, rem, midpoint;

    if (ax > 0x7F800000u) return 0x7FFFu;                  /* NaN: canonical */
    if (ax >= 0x477FF000u) return (kvq_f16)(sign | 0x7C00u); /* >= 65520: Inf */
    if (ax >= 0x38800000u) {                               /* normal half   */
        /* rebias exponent 127 -> 15, keep 10 mantissa bits, round 13 away   */
        half = ((ax >> 13) - (112u << 10));
        rem = ax & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
        return (kvq_f16)(sign | half);                     /* carry may roll
                                                              into exponent:
                                                              still correct */
    }
    if (ax < 0x33000000u) return (kvq_f16)sign;            /* < 2^-25: +-0  */
    /* subnormal half: value = mant * 2^-24                                  */
    exp = ax >> 23;                                        /* 102..112      */
    mant = (ax & 0x7FFFFFu) | 0x800000u;                   /* 24-bit        */
    shift = 126u - exp;                                    /* 14..24        */
    half = mant >> shift;
    rem = mant & ((1u << shift) - 1u);
    midpoint = 1u << (shift - 1u);
    if (rem > midpoint || (rem == midpoint && (half & 1u))) half++;
    return (kvq_f16)(sign | half);
}

/* Exact, and written with bit masks rather than branches so that a loop of
   conversions vectorizes (fp16 rows in attention convert D per row):
     normal     rebias the exponent 15 -> 127: bits (em << 13) + (112 << 23)
     Inf/NaN    exponent all ones, mantissa (the NaN payload) kept
     subnormal  mant * 2^-24, an exact int -> float conversion and a
                multiplication whose result is a normal float            */
static float kvq__f16_to_f32(kvq_f16 h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t em = (uint32_t)h & 0x7FFFu;                    /* exp|mantissa */
    uint32_t normal = (em << 13) + (112u << 23);
    uint32_t special = (em << 13) | 0x7F800000u;
    uint32_t sub = kvq__f32_bits((float)(int32_t)(em & 0x3FFu) * (1.0f / 16777216.0f));
    uint32_t is_special = 0u - (uint32_t)(em >= 0x7C00u);   /* all ones or 0 */
    uint32_t is_normal = 0u - (uint32_t)(em >= 0x0400u);
    uint32_t r = (special & is_special) | (normal & is_normal & ~is_special) |
                 (sub & ~is_normal);
    return kvq__bits_f32(r | sign);
}

KVQ_API float kvq_f16_to_f32(kvq_f16 h) { return kvq__f16_to_f32(h); }

/* The same two conversions for the values kvq computes and stores itself
   (scales, zeros, rows of validated input: never NaN). kvq_simd.h gives
   them one instruction each where the target converts in hardware (F16C:
   vcvtph2ps, vcvtps2ph with round to nearest even), equal to the integer
   code above on every non-NaN input (all 2^16 halves and all 2^32 - 2^24
   non-NaN floats were compared; tests/simd_check.c repeats the halves and
   a sample of the floats). NaN is the one case where they may differ, and
   kvq never converts one.                                                */
static float kvq__f16_stored(kvq_f16 h)
{
    KVQ__FAST(f16_stored(h));
    return kvq__f16_to_f32(h);
}
static kvq_f16 kvq__f16_store(float f)
{
    KVQ__FAST(f16_store(f));
    return kvq_f32_to_f16(f);
}

/* D stored halves -> floats (a full-precision fp16 row, a run of (s, z)). */
static void kvq__f16_row(const kvq_f16 *h, size_t D, float *out)
{
    size_t d;
    KVQ__FAST_VOID(f16_row(h, D, out));
    for (d = 0; d < D; d++) out[d] = kvq__f16_to_f32(h[d]);
}

static float kvq__round_f16(float x) { return kvq__f16_stored(kvq__f16_store(x)); }

/* ------------------------------------------------------------------------ */
/* 4. one group                                                             */
/* ------------------------------------------------------------------------ */

/* KIVI Sec. 3.1:  Q(X) = round((X - z) / s),  X' = Q(X) * s + z,
                   z = min X,  s = (max X - min X) / (2^B - 1).
   Hugging Face's QuantizedCache, quanto backend ("Unlocking Longer
   Generation with Key-Value Cache Quantization", HF blog, May 2024, and
   optimum-quanto's MaxOptimizer), two rules over time:
     the post, optimum-quanto <= 0.2.2: an integer zero point
                   Z = round(-min X / s),  s as KIVI's,
                   Q(X) = clamp(round(X / s) + Z, 0, 2^B - 1),
                   X' = (Q(X) - Z) * s
                   (the post prints round(X / S) - Z; the code adds Z).
     today, optimum-quanto >= 0.2.3 (July 2024; transformers requires
     >= 0.2.5): a float shift, shift = -min X,  s as KIVI's,
                   Q(X) = clamp(round((X + shift) / s), 0, 2^B - 1),
                   X' = Q(X) * s - shift:  KIVI's rule with z = -shift.
   torch.round rounds half to even, as kvq's rne below.

   kvq's exact definition (one group of n values x_i, N = 2^B - 1):

     KVQ_ZERO_FLOAT (KIVI; HF today; the default everywhere)
       mn = min x_i, mx = max x_i                       (exact, any order)
       s  = f16((mx - mn) / N)       fp32 subtract, fp32 divide, RNE to fp16
       z  = f16(mn)
       c_i = (s == 0) ? 0 : rne(clamp((x_i - z) / s, 0, N))
       x'_i = c_i * s + z                                (fp32)
       This is quanto's rule (>= 0.2.3) up to storage: x + shift is x - mn
       exactly (negation is exact), and c * s - shift is c * s + mn; quanto
       keeps s and shift in the model's dtype (fp32 for an fp32 model)
       where kvq rounds both to fp16 first. A constant group: quanto's code
       is 0/0 = NaN, but any code times s = 0 gives -shift = mn; kvq's
       code 0 gives z = f16(mn).

     KVQ_ZERO_INT (the HF post; optimum-quanto <= 0.2.2)
       s  = f16((mx - mn) / N)
       zp = clamp(rne(-mn / s), -2048, 2048), stored as an fp16 integer
            (a zero zp is stored as +0, and the min as +0 if it is -0, so
            the stored bits never depend on the order of +0 and -0)
       c_i = rne(clamp(x_i / s, -zp, N - zp)) + zp  (= clamp(rne(x_i / s) + zp,
            0, N): round x / s FIRST, then shift by zp, as quanto's code)
       x'_i = c_i * s + (-zp * s)                        (fp32)
       A constant group (s would be 0) uses s = f16(|mn|), zp = (mn < 0), so
       the same formula gives c = 1 or 0 and x' = f16(mn): no division by 0.
       Rounding before the shift is not rne(x / s + zp): at a tie x / s =
       k + 1/2, half-to-even picks the even one of k, k + 1, and an odd zp
       then makes the code odd, where rne(x / s + zp) would pick the even
       code; and the fp32 sum x / s + zp can round onto a tie of its own.
       quanto <= 0.2.2 held zp in int8 unclamped; kvq clamps it to +-2048,
       where fp16 still holds every integer.

   Choices the papers leave open, and why:
   - Scale and zero are rounded to fp16 FIRST and the codes are computed from
     the rounded values. Dequantization then uses exactly what is stored, so
     the CPU, the GPU and any reader of the packed cache agree.
   - Clamp, then round (KIVI's own code order). Because the bounds (0 and N,
     or -zp and N - zp) are integers and rounding is monotonic, clamp(rne(v))
     == rne(clamp(v)) for every finite v: the order cannot change a code.
     Clamping first keeps the value inside [0, N] (or [-zp, N - zp])
     before the float-to-integer conversion, which is therefore never
     undefined behaviour.
   - rne is round-half-to-even (C99 rintf in the default rounding mode; CUDA
     rintf / __float2int_rn). Ties are rare but real at low B.
   - Division, not multiplication by a reciprocal: (x - z) / s is one
     correctly rounded IEEE operation on every platform and on the GPU
     (nvcc without --use_fast_math), so codes are bit-identical.
   - Dequantization c*s + z is FMA-proof: c has <= 8 significant bits and s
     has 11, so c*s is exact in fp32 and fma(c, s, z) == c*s + z. The same
     holds for -zp*s (zp <= 2048: 12 bits) in the integer mode.

   Error bound (tested as a property). With e_z = |z - mn|, e_s = |s - s_exact|
   (s_exact the fp32 value before fp16 rounding) and eps = 2^-21 * (|x| + |z|
   + N*s) + 2^-140 covering fp32 arithmetic (the absolute 2^-140 only matters
   for fp32-subnormal inputs, where rounding error stops being relative):
     float zero:  |x - x'| <= s/2 + e_z + N*e_s + eps
     int zero:    |x - x'| <= s/2 + s*|zp + mn/s| + N*e_s + eps
   A group whose stored scale underflows to 0 in int mode (every |x| below
   about 2^-25, fp16's smallest step) dequantizes to 0, so its error is
   max |x_i| < 2^-24 there (found by fuzz/fuzz_quant.c: the formula above
   has s in a denominator and does not cover it).
   While |mn/s| <= 2048 the middle term is at most s/2: the integer zero point
   costs up to a full step at the group's edges. A group far from zero
   relative to its range (|mn| > 2048 s, e.g. values 15.0..15.1 at B = 8)
   needs a zero point fp16 cannot hold exactly; zp is clamped to +-2048 and
   the error grows as the formula says. That is a limit of the integer form
   itself; the float zero (the default) has no such case.                 */
KVQ_API int kvq_bits_supported(int bits)
{
    return bits == 1 || bits == 2 || bits == 3 || bits == 4 || bits == 8;
}

KVQ_API void kvq_sz_affine(kvq_sz sz, kvq_zero_mode mode, float *a, float *b)
{
    float s = kvq_f16_to_f32(sz.scale), z = kvq_f16_to_f32(sz.zero);
    if (!a || !b) return;                       /* nothing to write to      */
    *a = s;
    *b = (mode == KVQ_ZERO_INT) ? -z * s : z;   /* exact: 12 x 11 bits      */
}

/* The stored (s, z) of a group with min mn and max mx. Returns KVQ_ERR_RANGE
   if they do not fit in fp16.                                               */
static kvq_status kvq__group_params(float mn, float mx, int bits,
                                    kvq_zero_mode mode, kvq_sz *out)
{
    float n_levels = (float)((1u << bits) - 1u);
    float s = kvq__round_f16((mx - mn) / n_levels);
    if (!kvq__finite(s)) return KVQ__NO(KVQ_ERR_RANGE);
    if (mode == KVQ_ZERO_FLOAT) {           /* the zero stored is mn itself  */
        if (!kvq__finite(kvq__round_f16(mn))) return KVQ__NO(KVQ_ERR_RANGE);
        out->scale = kvq__f16_store(s);
        out->zero = kvq__f16_store(mn);
        return KVQ_OK;
    }
    if (s == 0.0f) {            /* constant group: c = 1 (mn > 0) or 0 (mn < 0) */
        if (!kvq__finite(kvq__round_f16(fabsf(mn)))) return KVQ__NO(KVQ_ERR_RANGE);
        out->scale = kvq__f16_store(fabsf(mn));
        out->zero = kvq__f16_store(mn < 0.0f ? 1.0f : 0.0f);
        return KVQ_OK;
    }
    {
        float zp = rintf(-mn / s) + 0.0f;      /* + 0: -0 becomes +0       */
        if (zp < -2048.0f) zp = -2048.0f;
        if (zp > 2048.0f) zp = 2048.0f;
        out->scale = kvq__f16_store(s);
        out->zero = kvq__f16_store(zp);          /* integer <= 2048: exact  */
    }
    return KVQ_OK;
}

/* The code of one value under stored parameters (Sec. 4's definition).     */
static uint8_t kvq__code(float x, kvq_sz sz, int bits, kvq_zero_mode mode)
{
    float n_levels = (float)((1u << bits) - 1u);
    float s = kvq__f16_stored(sz.scale), z = kvq__f16_stored(sz.zero);
    float v;
    if (s == 0.0f) return 0;                    /* float-mode constant group */
    if (mode == KVQ_ZERO_INT) {                 /* round x / s, then + zp    */
        v = x / s;
        if (v < -z) v = -z;                     /* clamp to [-zp, N - zp]   */
        if (v > n_levels - z) v = n_levels - z;
        return (uint8_t)(rintf(v) + z);         /* an integer in [0, N]     */
    }
    v = (x - z) / s;
    if (v < 0.0f) v = 0.0f;                     /* clamp ...                */
    if (v > n_levels) v = n_levels;
    return (uint8_t)rintf(v);                   /* ... then round half even */
}

/* min and max of n values x[0], x[stride], ... in 16 lanes; 0 if all are
   finite, else 1 (x - x is 0 exactly when x is finite). The lanes are
   plain arrays: the stride-1 loop is one the compiler vectorizes.        */
static int kvq__minmax_check(const float *x, size_t n, size_t stride, float *mn, float *mx)
{
    float lo[16], hi[16], t;
    int bad[16], any = 0;
    size_t i = 0, j;
    for (j = 0; j < 16; j++) { lo[j] = hi[j] = x[0]; bad[j] = 0; }
    if (stride == 1)
        for (; i + 16 <= n; i += 16)
            for (j = 0; j < 16; j++) {
                t = x[i + j];
                lo[j] = t < lo[j] ? t : lo[j];
                hi[j] = t > hi[j] ? t : hi[j];
                bad[j] |= (t - t) != 0.0f;
            }
    for (; i < n; i++) {                        /* strided, or the tail    */
        t = x[i * stride];
        lo[0] = t < lo[0] ? t : lo[0];
        hi[0] = t > hi[0] ? t : hi[0];
        bad[0] |= (t - t) != 0.0f;
    }
    for (j = 1; j < 16; j++) {
        lo[0] = lo[j] < lo[0] ? lo[j] : lo[0];
        hi[0] = hi[j] > hi[0] ? hi[j] : hi[0];
    }
    for (j = 0; j < 16; j++) any |= bad[j];
    *mn = lo[0] + 0.0f;         /* -0 + 0 = +0: the stored zero never depends */
    *mx = hi[0] + 0.0f;         /* on which of +0 and -0 came first          */
    return any;
}


KVQ_API kvq_status kvq_quantize_group(const float *x, size_t n, size_t stride,
                                      int bits, kvq_zero_mode mode,
                                      uint8_t *codes, kvq_sz *sz)
{
    float mn, mx;
    kvq_sz p;
    kvq_status st;
    size_t i, last;
    if (!x || !codes || !sz) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq_bits_supported(bits)) return KVQ__NO(KVQ_ERR_BITS);
    if (n == 0 || stride == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (mode != KVQ_ZERO_FLOAT && mode != KVQ_ZERO_INT) return KVQ__NO(KVQ_ERR_CONFIG);
    if (!kvq__mul(n - 1, stride, &last) || !kvq__mul(last, sizeof(float), &last))
        return KVQ__NO(KVQ_ERR_OVERFLOW);      /* x[(n-1)*stride] must be addressable */
    if (kvq__minmax_check(x, n, stride, &mn, &mx)) return KVQ__NO(KVQ_ERR_NONFINITE);
    st = kvq__group_params(mn, mx, bits, mode, &p);
    if (st != KVQ_OK) return st;
    for (i = 0; i < n; i++) codes[i] = kvq__code(x[i * stride], p, bits, mode);
    *sz = p;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 4.1 the formats engines ship                                             */
/* ------------------------------------------------------------------------ */

/* Every format stores a code c per value and a parameter per group (or one
   scale per cache side), and decodes  x' = value(c) * a + b  with (a, b)
   from the parameter (kvq__format_ab): b = 0 for all but INT. The grids
   and parameters, as the engines define them:

   FP8 E4M3 (OCP 8-bit floating point, "fn": finite and NaN only) and E5M2
   (IEEE-like), the grids of vLLM's, TensorRT-LLM's and SGLang's fp8 caches:

       E4M3   bit 7: sign | 6..3: exponent e (bias 7) | 2..0: mantissa m
              e = 0: m 2^-9 (subnormals, smallest 2^-9); e >= 1: (1 + m/8)
              2^(e-7); S.1111.111 is NaN (no infinities); largest 448.
       E5M2   bit 7: sign | 6..2: exponent (bias 15) | 1..0: mantissa
              e = 0: m 2^-16; e = 31: Inf (m = 0), NaN; largest 57344.

   From fp32 (kvq__to_minifloat): round to nearest, ties to the even code,
   and a finite value beyond the largest saturates to it (PTX
   cvt.rn.satfinite.e4m3x2.f32, sm_89+). The cache never stores NaN/Inf:
   its inputs are refused before (Sec. 2).
     _TENSOR: c = fp8(x / s_side), one fp32 scale per cache side (vLLM's
              per-tensor k_scale / v_scale: 1.0 by default, or set from
              warm-up absmax: kvq's key_scale = 0 sets absmax / 448 from
              the rows the side holds at its first quantization, after a
              prefill the whole prompt). a = s_side.
     per group (vLLM's fp8_per_token_head with G = D): s = absmax / max
              (fp32 division), c = fp8(x / s), the parameter s (32 bits).
              A group of zeros has s = 0 and codes 0.
   Division, not a reciprocal, for the same reason as Sec. 4.

   NVFP4 (NVIDIA's 4-bit floating point): E2M1 codes
       bit 3: sign | 2..1: exponent (bias 1) | 0: mantissa
       values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}
   with an E4M3 scale per block of 16 values (kvq's group, G = 16) and an
   fp32 scale per side s_side (NVIDIA's "global scale" is its inverse,
   448 * 6 / amax):
       sf = e4m3((amax_block / M) / s_side)     M = 6      (8-bit param)
       a  = e4m3value(sf) * s_side              (fp32, once per block)
       c  = e2m1(x / a),  0 if a = 0
   NVIDIA's kernels multiply by approximate reciprocals (rcp.approx.ftz)
   where kvq divides: a code can differ at a near-tie. kvq keeps correct
   rounding so that every reader agrees (Sec. 4's rule). And kvq folds the
   two scales into one multiplier a per block, as every other format.
   4over6: each block also tries M = 4 (its max on the grid point 4, where
   the E2M1 steps are finer below it) and keeps the candidate with the
   smaller sum of (x - x')^2, summed in double in index order; a tie keeps 6.

   TurboQuant (arXiv 2504.19874), the MSE variant as vLLM ships it: keys
   rotated by the Walsh-Hadamard transform with random signs (Sec. 6.1,
   set by the presets), so that each coordinate of a rotated unit vector
   follows one known law (a Beta law that tends to N(0, 1/d)); each
   coordinate is then coded on the Lloyd-Max grid of that law: the
   quantizer that minimizes the mean squared error (Lloyd's conditions:
   every threshold is the midpoint of its two centroids, every centroid
   the mean of its cell). kvq uses the N(0, 1) grid, the law's limit,
   scaled per group. The exact law's grid differs in the third digit: at
   B = 2 its outer centroid is 1.5057 for d = 128 and 1.5004 for d = 64
   against 1.5104, its error 0.1160 and 0.1145 against 0.1175 (computed by
   the same iteration on the exact density). For a group of n values
   (G = D: one vector):
       n2 = sum x_i^2                   in double, index order
       u_i = f32(x_i * (sqrt(n) / sqrt(n2)))   (in double, rounded once)
       c_i = #{k : u_i > t_k},  t_k = (c_k + c_k+1) / 2 in fp32
       a = f32(sqrt(n2) / sqrt(n))                      (plain)
       a = f32(sqrt(n2) / sqrt(sum_i centroid(c_i)^2))  (norm correction:
           the decoded vector has the input's norm exactly, up to fp32)
   and a zero group has a = 0, codes 0. The centroids, to 9 digits, and
   the mean squared error per coordinate of N(0, 1) (examples/lloyd_max.c
   derives them in double precision; tests/test_formats.c checks them):
       B = 2   +-0.452780035, +-1.51041761                       0.117482
       B = 3   +-0.245094179, 0.756005281, 1.34390928, 2.1519457  0.0345478
       B = 4   +-0.12839503 ... 2.73258957                        0.00950101
   The paper's QJL residual ("prod" variant) is left out, as vLLM does.

   llama.cpp's q8_0 and q4_0 (ggml's reference quantizers), blocks of 32
   (kvq's group, G = 32) with an fp16 scale d (16-bit param):
       q8_0: d = absmax / 127, c = roundf(x * (1/d)) as int8 (half away
             from zero), value(c) = c as a signed byte, a = f16(d)
       q4_0: m = the value of largest |x| (the first one), d = m / -8,
             c = min(15, trunc(x * (1/d) + 8.5)), value(c) = c - 8
       (1/d is 0 when d is 0). The codes use the fp32 d, the decoder the
   stored f16(d), exactly as ggml. Where 1/d overflows (d < 2^-128), x/d
   is +-Inf or NaN and ggml's integer cast undefined: kvq clamps it into
   the code range (NaN to code 0); f16(d) is 0 there, so x' = 0 anyway.

   Parameters pack into a cache's kvq_sz words like codes into words (Sec.
   5): 32 / P parameters of P bits per word, the first in the low bits; a
   unit's last word is padded. One token of D = 64, per-token groups:

       NVFP4 (P = 8):    bits 31..24 | 23..16 | 15..8 | 7..0
                              sf3       sf2      sf1    sf0   (block k:
                                                 channels 16k .. 16k+15)
       q8_0, q4_0 (16):  [   d1 (fp16)   |   d0 (fp16)   ]
       FP8 per group, Lloyd-Max (32): one fp32 per group; _TENSOR: none

   So a q8_0 side holds 8.5 bits per value and an NVFP4 side 4.5, exactly
   the formats' own sizes.                                               */

/* The longest group a format other than INT takes (one buffer of codes). */
#define KVQ__FORMAT_MAX_GROUP 1024

/* A small float: sign, E exponent bits (bias 2^(E-1) - 1), M mantissa bits,
   and the largest finite magnitude code.                                  */
typedef struct kvq__minifloat { unsigned e, m, max_mag, nan_mag; } kvq__minifloat;
static const kvq__minifloat kvq__E4M3 = { 4, 3, 0x7E, 0x7F };
static const kvq__minifloat kvq__E5M2 = { 5, 2, 0x7B, 0x7F };
static const kvq__minifloat kvq__E2M1 = { 2, 1, 0x7, 0x0 };

static uint8_t kvq__to_minifloat(float x, kvq__minifloat f)
{
    uint32_t u = kvq__f32_bits(x), a = u & 0x7FFFFFFFu, sig, q, rem, half, mag;
    uint8_t sign = (uint8_t)((u >> 31) << (f.e + f.m));
    int bias = (1 << (f.e - 1)) - 1, te = (int)(a >> 23) - 127 + bias;
    unsigned shift;
    if (a > 0x7F800000u) return (uint8_t)(sign | f.nan_mag);       /* NaN    */
    if (a >= 0x7F800000u) return (uint8_t)(sign | f.max_mag);      /* Inf    */
    if ((a >> 23) == 0) return sign;            /* fp32 zero or subnormal: far
                                                   below half the smallest step */
    sig = (a & 0x7FFFFFu) | 0x800000u;          /* x = sig 2^(e32 - 150)    */
    shift = 23u - f.m + (te >= 1 ? 0u : (unsigned)(1 - te));
    if (shift >= 25u) return sign;              /* below half a step: 0     */
    q = sig >> shift;
    rem = sig & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    q += rem > half || (rem == half && (q & 1u));   /* ties to even         */
    mag = te >= 1 ? ((uint32_t)(te - 1) << f.m) + q : q;   /* a carry moves
                                                   the exponent up by itself */
    if (mag > f.max_mag) mag = f.max_mag;       /* saturate to the largest   */
    return (uint8_t)(sign | mag);
}

static float kvq__from_minifloat(uint8_t c, kvq__minifloat f)
{
    unsigned mag = c & ((1u << (f.e + f.m)) - 1u), ex = mag >> f.m, man = mag & ((1u << f.m) - 1u);
    int bias = (1 << (f.e - 1)) - 1;
    float v;
    if (f.nan_mag && mag > f.max_mag)           /* E4M3 NaN; E5M2 Inf, NaN   */
        v = (f.e == 5 && mag == 0x7C) ? INFINITY : NAN;
    else if (ex == 0)
        v = ldexpf((float)man, 1 - bias - (int)f.m);
    else
        v = ldexpf((float)((1u << f.m) + man), (int)ex - bias - (int)f.m);
    return (c >> (f.e + f.m)) & 1u ? -v : v;
}

KVQ_API uint8_t kvq_f32_to_e4m3(float x) { return kvq__to_minifloat(x, kvq__E4M3); }
KVQ_API uint8_t kvq_f32_to_e5m2(float x) { return kvq__to_minifloat(x, kvq__E5M2); }
KVQ_API uint8_t kvq_f32_to_e2m1(float x) { return kvq__to_minifloat(x, kvq__E2M1); }
KVQ_API float kvq_e4m3_to_f32(uint8_t c) { return kvq__from_minifloat(c, kvq__E4M3); }
KVQ_API float kvq_e5m2_to_f32(uint8_t c) { return kvq__from_minifloat(c, kvq__E5M2); }
KVQ_API float kvq_e2m1_to_f32(uint8_t c) { return kvq__from_minifloat(c & 0xFu, kvq__E2M1); }

static const float kvq__lloyd_max2[4] = { -1.51041761f, -0.452780035f, 0.452780035f, 1.51041761f };
static const float kvq__lloyd_max3[8] = {
    -2.1519457f, -1.34390928f, -0.756005281f, -0.245094179f,
    0.245094179f, 0.756005281f, 1.34390928f, 2.1519457f };
static const float kvq__lloyd_max4[16] = {
    -2.73258957f, -2.06901723f, -1.61804639f, -1.2562312f,
    -0.942340456f, -0.656759119f, -0.388048299f, -0.12839503f,
    0.12839503f, 0.388048299f, 0.656759119f, 0.942340456f,
    1.2562312f, 1.61804639f, 2.06901723f, 2.73258957f };

KVQ_API const float *kvq_lloyd_max_centroids(int bits)
{
    return bits == 2 ? kvq__lloyd_max2 : bits == 3 ? kvq__lloyd_max3 :
           bits == 4 ? kvq__lloyd_max4 : NULL;
}

static int kvq__format_tensor(kvq_format f)     /* scale per side          */
{
    return f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR ||
           f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6;
}

static int kvq__format_lloyd(kvq_format f)
{
    return f == KVQ_FORMAT_LLOYD_MAX || f == KVQ_FORMAT_LLOYD_MAX_NC;
}

static int kvq__format_nvfp4(kvq_format f)
{
    return f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6;
}

/* The FP8 grid of a format (E4M3 or E5M2 kinds), for the others NULL.     */
static const kvq__minifloat *kvq__format_fp8(kvq_format f)
{
    return f == KVQ_FORMAT_E4M3 || f == KVQ_FORMAT_E4M3_TENSOR ? &kvq__E4M3 :
           f == KVQ_FORMAT_E5M2 || f == KVQ_FORMAT_E5M2_TENSOR ? &kvq__E5M2 : NULL;
}

KVQ_API const char *kvq_format_name(kvq_format f)
{
    static const char *const names[KVQ_FORMAT_COUNT] = {
        "int", "e4m3", "e4m3-tensor", "e5m2", "e5m2-tensor", "nvfp4", "nvfp4-4over6",
        "lloyd-max", "lloyd-max-nc", "q8_0", "q4_0" };
    return (int)f >= 0 && f < KVQ_FORMAT_COUNT ? names[f] : "unknown";
}

KVQ_API int kvq_format_bits_ok(kvq_format f, int bits)
{
    if ((int)f < 0 || f >= KVQ_FORMAT_COUNT) return 0;
    if (f == KVQ_FORMAT_INT) return kvq_bits_supported(bits);
    if (kvq__format_lloyd(f)) return bits == 2 || bits == 3 || bits == 4;
    if (kvq__format_nvfp4(f) || f == KVQ_FORMAT_Q4_0) return bits == 4;
    return bits == 8;                           /* FP8, q8_0                */
}

KVQ_API int kvq_format_param_bits(kvq_format f)
{
    if ((int)f < 0 || f >= KVQ_FORMAT_COUNT) return 0;
    if (f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR) return 0;
    if (kvq__format_nvfp4(f)) return 8;
    if (f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0) return 16;
    return 32;
}

KVQ_API size_t kvq_format_group(kvq_format f)
{
    return kvq__format_nvfp4(f) ? 16 : (f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0) ? 32 : 0;
}

KVQ_API float kvq_format_value(kvq_format f, int bits, unsigned c)
{
    const kvq__minifloat *fp8 = kvq__format_fp8(f);
    if (!kvq_format_bits_ok(f, bits) || c >> bits) return NAN;
    if (fp8) return kvq__from_minifloat((uint8_t)c, *fp8);
    if (kvq__format_nvfp4(f)) return kvq__from_minifloat((uint8_t)c, kvq__E2M1);
    if (kvq__format_lloyd(f)) return kvq_lloyd_max_centroids(bits)[c];
    if (f == KVQ_FORMAT_Q8_0) return (float)(int8_t)(uint8_t)c;
    if (f == KVQ_FORMAT_Q4_0) return (float)((int)c - 8);
    return (float)c;                            /* INT: the code itself      */
}

/* (a, b) of x' = value(c) a + b for a group with parameter p, on a side
   with scale side_scale (INT: use kvq__affine, Sec. 8).                   */
static void kvq__format_ab(kvq_format f, uint32_t p, float side_scale, float *a, float *b)
{
    *b = 0.0f;
    if (kvq__format_nvfp4(f)) *a = kvq__from_minifloat((uint8_t)p, kvq__E4M3) * side_scale;
    else if (kvq__format_tensor(f)) *a = side_scale;
    else if (f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0) *a = kvq__f16_stored((kvq_f16)p);
    else *a = kvq__bits_f32(p);                 /* an fp32 scale            */
}

/* A side's scale set from the absmax of the rows of its first quantization
   (key_scale = 0; after a prefill the prompt's, kvq__prefill_scale): the
   largest |x| lands on the grid's largest value (FP8: 448 or 57344;
   NVFP4: 6 times E4M3's 448, NVIDIA's global-scale rule). A side of zeros
   so far gets 1.                                                          */
static float kvq__side_scale_from(kvq_format f, float amax)
{
    const kvq__minifloat *fp8 = kvq__format_fp8(f);
    float top = fp8 ? kvq__from_minifloat((uint8_t)fp8->max_mag, *fp8) : 448.0f * 6.0f;
    return amax > 0.0f ? amax / top : 1.0f;
}

/* The code of x / a on an E2M1 or FP8 grid (0 when a is 0).              */
static uint8_t kvq__scaled_code(float x, float a, kvq__minifloat g)
{
    return a == 0.0f ? 0 : kvq__to_minifloat(x / a, g);
}

/* sum (x_i - value(c_i) a)^2 of one NVFP4 block, in double, index order.  */
static double kvq__block_sse(const float *x, size_t n, size_t stride, const uint8_t *codes, float a)
{
    double e = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = (double)x[i * stride] - (double)(kvq__from_minifloat(codes[i], kvq__E2M1) * a);
        e += d * d;
    }
    return e;
}

/* One NVFP4 candidate, the block's max put on grid point M (6; 4over6
   also tries 4): its E4M3 scale code, its multiplier a, its codes.       */
static uint8_t kvq__nvfp4_try(const float *x, size_t n, size_t stride, float amax, float M,
                              float side_scale, uint8_t *codes, float *a)
{
    uint8_t sf = kvq__to_minifloat((amax / M) / side_scale, kvq__E4M3);
    size_t i;
    *a = kvq__from_minifloat(sf, kvq__E4M3) * side_scale;
    for (i = 0; i < n; i++) codes[i] = kvq__scaled_code(x[i * stride], *a, kvq__E2M1);
    return sf;
}

/* The body of kvq_format_quantize (arguments checked, x finite).          */
static void kvq__format_group(kvq_format f, int bits, const float *x, size_t n, size_t stride,
                              float side_scale, uint8_t *codes, uint32_t *param)
{
    const kvq__minifloat *fp8 = kvq__format_fp8(f);
    float amax = 0.0f, a;
    size_t i;
    for (i = 0; i < n; i++) amax = fabsf(x[i * stride]) > amax ? fabsf(x[i * stride]) : amax;
    *param = 0;
    if (fp8) {
        float grid_max = kvq__from_minifloat((uint8_t)fp8->max_mag, *fp8);
        a = kvq__format_tensor(f) ? side_scale : amax / grid_max;
        for (i = 0; i < n; i++) codes[i] = kvq__scaled_code(x[i * stride], a, *fp8);
        if (!kvq__format_tensor(f)) *param = kvq__f32_bits(a);
    } else if (kvq__format_nvfp4(f)) {
        uint8_t alt[KVQ__FORMAT_MAX_GROUP], sf4;
        float a4;
        *param = kvq__nvfp4_try(x, n, stride, amax, 6.0f, side_scale, codes, &a);
        if (f == KVQ_FORMAT_NVFP4_4OVER6) {     /* the smaller error; a tie: 6 */
            sf4 = kvq__nvfp4_try(x, n, stride, amax, 4.0f, side_scale, alt, &a4);
            if (kvq__block_sse(x, n, stride, alt, a4) < kvq__block_sse(x, n, stride, codes, a)) {
                memcpy(codes, alt, n);
                *param = sf4;
            }
        }
    } else if (kvq__format_lloyd(f)) {
        const float *cent = kvq_lloyd_max_centroids(bits);
        const size_t levels = (size_t)1 << bits;
        double n2 = 0.0, c2 = 0.0, inv;
        size_t k;
        for (i = 0; i < n; i++) n2 += (double)x[i * stride] * (double)x[i * stride];
        if (n2 == 0.0) { memset(codes, 0, n); return; }        /* a = 0     */
        inv = sqrt((double)n) / sqrt(n2);
        for (i = 0; i < n; i++) {
            float u = (float)((double)x[i * stride] * inv);
            uint8_t c = 0;
            for (k = 0; k + 1 < levels; k++) c += u > (cent[k] + cent[k + 1]) * 0.5f;
            codes[i] = c;
            c2 += (double)cent[c] * (double)cent[c];
        }
        a = (float)(sqrt(n2) / sqrt(f == KVQ_FORMAT_LLOYD_MAX_NC ? c2 : (double)n));
        *param = kvq__f32_bits(a);
    } else {                                    /* q8_0, q4_0 (ggml's ref)  */
        float m = 0.0f, d, id;
        for (i = 0; i < n; i++)                 /* the first largest |x|    */
            if (fabsf(x[i * stride]) > fabsf(m)) m = x[i * stride];
        d = f == KVQ_FORMAT_Q8_0 ? amax / 127.0f : m / -8.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        for (i = 0; i < n; i++) {               /* where 1/d overflows (d <
                                                   2^-128), x id is +-Inf or
                                                   NaN and ggml's cast is
                                                   undefined: kvq clamps   */
            float v = x[i * stride] * id, r = roundf(v), t = v + 8.5f;
            if (f == KVQ_FORMAT_Q8_0)
                codes[i] = (uint8_t)(int8_t)(r >= 127.0f ? 127 : r <= -127.0f ? -127 : r == r ? (int)r : 0);
            else                                /* truncation, as ggml's     */
                codes[i] = (uint8_t)(t >= 15.0f ? 15 : t >= 0.0f ? (int)t : 0);
        }
        *param = kvq__f16_store(d);
    }
}

KVQ_API kvq_status kvq_format_quantize(kvq_format f, int bits, const float *x, size_t n,
                                       size_t stride, float tensor_scale,
                                       uint8_t *codes, uint32_t *param)
{
    uint8_t tmp[KVQ__FORMAT_MAX_GROUP];
    uint32_t p;
    float mn, mx, a, b;
    size_t last;
    if (!x || !codes || !param) return KVQ__NO(KVQ_ERR_NULL);
    if ((int)f <= 0 || f >= KVQ_FORMAT_COUNT)
        return kvq__refuse(KVQ_ERR_CONFIG, "kvq_format_quantize: format %d is not one of "
                           "Sec. 4.1's (INT: kvq_quantize_group)", (int)f);
    if (!kvq_format_bits_ok(f, bits)) return KVQ__NO(KVQ_ERR_BITS);
    if (n == 0 || stride == 0 || n > KVQ__FORMAT_MAX_GROUP ||
        (kvq_format_group(f) && n != kvq_format_group(f)))
        return kvq__refuse(KVQ_ERR_SIZE, "kvq_format_quantize: %s needs a group of %zu values "
                           "(1..%d for the formats without a fixed group), not %zu",
                           kvq_format_name(f), kvq_format_group(f), KVQ__FORMAT_MAX_GROUP, n);
    if (!kvq__mul(n - 1, stride, &last) || !kvq__mul(last, sizeof(float), &last))
        return KVQ__NO(KVQ_ERR_OVERFLOW);
    if (kvq__format_tensor(f) && !(tensor_scale > 0.0f && kvq__finite(tensor_scale)))
        return kvq__refuse(KVQ_ERR_RANGE, "kvq_format_quantize: %s needs a finite scale > 0",
                           kvq_format_name(f));
    if (kvq__minmax_check(x, n, stride, &mn, &mx)) return KVQ__NO(KVQ_ERR_NONFINITE);
    kvq__format_group(f, bits, x, n, stride, tensor_scale, tmp, &p);
    kvq__format_ab(f, p, tensor_scale, &a, &b);
    for (last = 0; last < n; last++)    /* q4_0's f16 d, a Lloyd-Max scale
                                           times a centroid, near FLT_MAX  */
        if (!kvq__finite(kvq_format_value(f, bits, tmp[last]) * a + b))
            return kvq__refuse(KVQ_ERR_RANGE, "kvq_format_quantize: the group's %s "
                               "values overflow fp32 once scaled", kvq_format_name(f));
    memcpy(codes, tmp, n);
    *param = p;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_format_dequantize(kvq_format f, int bits, const uint8_t *codes,
                                         size_t n, uint32_t param, float tensor_scale,
                                         float *out)
{
    float a, b;
    size_t i;
    if (!codes || !out) return KVQ__NO(KVQ_ERR_NULL);
    if ((int)f <= 0 || f >= KVQ_FORMAT_COUNT) return KVQ__NO(KVQ_ERR_CONFIG);
    if (!kvq_format_bits_ok(f, bits)) return KVQ__NO(KVQ_ERR_BITS);
    if (n == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (kvq__format_tensor(f) && !(tensor_scale > 0.0f && kvq__finite(tensor_scale)))
        return kvq__refuse(KVQ_ERR_RANGE, "kvq_format_dequantize: %s needs a finite scale > 0",
                           kvq_format_name(f));
    for (i = 0; i < n; i++)
        if (codes[i] >> bits || !kvq__finite(kvq_format_value(f, bits, codes[i])))
            return kvq__refuse(KVQ_ERR_RANGE, "kvq_format_dequantize: code %u at %zu is not "
                               "a finite value of %s", codes[i], i, kvq_format_name(f));
    kvq__format_ab(f, param, tensor_scale, &a, &b);
    if (!kvq__finite(a)) return kvq__refuse(KVQ_ERR_RANGE, "kvq_format_dequantize: the "
                                            "group's scale is not finite");
    for (i = 0; i < n; i++) out[i] = kvq_format_value(f, bits, codes[i]) * a + b;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 5. packing                                                               */
/* ------------------------------------------------------------------------ */

/* 32/B codes per 32-bit word, least significant bits first, along the grouped
   dimension. Code i of a group sits in word i / (32/B) at bit (i % (32/B))*B.
   A ragged tail leaves the high bits of the last word zero.

     B = 2, one word holds codes c0..c15:
       bit: 31 30 29 28                          3  2  1  0
           [ c15 ][ c14 ]  . . .  [ c2 ][ c1 ][ c0 ]
     B = 4:  [ c7 ][ c6 ][ c5 ][ c4 ][ c3 ][ c2 ][ c1 ][ c0 ]
     B = 8:  [ c3 ][ c2 ][ c1 ][ c0 ]        B = 1: c0 at bit 0 ... c31 at 31

   The word is a native uint32_t: on little-endian machines (x86, ARM, every
   NVIDIA GPU) byte 0 of the word holds c0..c3 for B = 2.

   In general the codes are one bit stream: code i at bits [i B, i B + B),
   bit k of the stream being bit k % 32 of word k / 32. For B = 1, 2, 4, 8
   that is the layout above. B = 3 (the Lloyd-Max grid, Sec. 4.1) packs 32
   codes into 3 words, codes 10 and 21 crossing a word boundary:
       word 0:  [c10 low 2][ c9 ] . . . [ c1 ][ c0 ]        bits 31..0
       word 1:  [c21 low 1][ c20 ] . . . [ c11 ][c10 high 1]
       word 2:  [ c31 ][ c30 ] . . . [ c22 ][c21 high 2]
   so a group of 128 codes is 12 words, 48 bytes: vLLM's 3-bit key slot.   */
KVQ_API size_t kvq_packed_words(size_t n, int bits)
{
    if (!kvq_bits_supported(bits)) return 0;
    return n / 32 * (size_t)bits + ((n % 32) * (size_t)bits + 31) / 32;   /* ceil(n B / 32),
                                                   no overflow for any n  */
}

/* Code i of a packed group: bits [i B, i B + B) of the stream. Only B = 3
   ever crosses into the next word.                                        */
static uint8_t kvq__get_code(const uint32_t *words, size_t i, int bits)
{
    size_t bit = i * (size_t)bits;
    uint32_t v = words[bit / 32] >> (bit % 32);
    if (bit % 32 + (size_t)bits > 32) v |= words[bit / 32 + 1] << (32 - bit % 32);
    return (uint8_t)(v & ((1u << bits) - 1u));
}

static void kvq__pack(const uint8_t *codes, size_t n, int bits, uint32_t *words)
{
    size_t nw = kvq_packed_words(n, bits), i, bit;
    memset(words, 0, nw * sizeof *words);
    for (i = 0, bit = 0; i < n; i++, bit += (size_t)bits) {
        words[bit / 32] |= (uint32_t)codes[i] << (bit % 32);
        if (bit % 32 + (size_t)bits > 32) words[bit / 32 + 1] |= (uint32_t)codes[i] >> (32 - bit % 32);
    }
}

KVQ_API kvq_status kvq_pack(const uint8_t *codes, size_t n, int bits,
                            uint32_t *words)
{
    size_t i;
    if (!codes || !words) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq_bits_supported(bits)) return KVQ__NO(KVQ_ERR_BITS);
    if (n == 0) return KVQ__NO(KVQ_ERR_SIZE);
    for (i = 0; i < n; i++)       /* a code wider than B bits would corrupt */
        if (codes[i] >> bits) return KVQ__NO(KVQ_ERR_RANGE);   /* its neighbours     */
    kvq__pack(codes, n, bits, words);
    return KVQ_OK;
}

KVQ_API kvq_status kvq_unpack(const uint32_t *words, size_t n, int bits,
                              uint8_t *codes)
{
    size_t i;
    if (!codes || !words) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq_bits_supported(bits)) return KVQ__NO(KVQ_ERR_BITS);
    if (n == 0) return KVQ__NO(KVQ_ERR_SIZE);
    for (i = 0; i < n; i++) codes[i] = kvq__get_code(words, i, bits);
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 6. matrices                                                              */
/* ------------------------------------------------------------------------ */

/* A head's K or V is a row-major matrix X[T][D] (token t, channel d).

     per-token   (KIVI values; HF keys and values): a group is G consecutive
                 channels of ONE token. Needs G | D. Groups per token: D/G.
     per-channel (KIVI keys): a group is G consecutive tokens of ONE channel.
                 Needs G | T. Groups per G-token block: D.

   Both axes share one layout built from "units". A unit is what gets appended
   to a quantized store at once: one token (per-token) or G tokens
   (per-channel). Inside a unit the groups are stored one after another, each
   group's codes packed as in Sec. 5 along its own grouped dimension:

     words: [units][groups_per_unit][words_per_group]   uint32_t
     sz:    [units][groups_per_unit]                    kvq_sz

                      units        tokens_per_unit  groups_per_unit
       per-token      T            1                D / G     (group = channels)
       per-channel    T / G        G                D         (group = tokens)
     words_per_group = ceil(G * B / 32)

   Per-channel key block (one unit, G = 32, B = 2, D channels):
       channel 0:  [w0: tokens 0..15][w1: tokens 16..31]  sz[0]
       channel 1:  [w0 .........    ][w1 ...........   ]  sz[1]
       ...                                                 ...
     so the GPU reads, per channel, 2 words + one 4-byte kvq_sz per 32 tokens. */
KVQ_API kvq_status kvq_layout_init(kvq_layout *L, size_t T, size_t D, int bits,
                                   size_t G, kvq_axis axis)
{
    kvq_layout l;
    if (!L) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq_bits_supported(bits)) return KVQ__NO(KVQ_ERR_BITS);
    if (T == 0 || D == 0 || G == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (axis == KVQ_PER_TOKEN) {
        if (D % G) return KVQ__NO(KVQ_ERR_GROUP);
        l.units = T; l.geom.tokens_per_unit = 1; l.geom.groups_per_unit = D / G;
    } else if (axis == KVQ_PER_CHANNEL) {
        if (T % G) return KVQ__NO(KVQ_ERR_GROUP);
        l.units = T / G; l.geom.tokens_per_unit = G; l.geom.groups_per_unit = D;
    } else {
        return KVQ__NO(KVQ_ERR_CONFIG);
    }
    l.geom.words_per_group = kvq_packed_words(G, bits);
    if (!kvq__mul(l.units, l.geom.groups_per_unit, &l.total_groups)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    if (!kvq__mul(l.total_groups, l.geom.words_per_group, &l.total_words)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    *L = l;
    return KVQ_OK;
}

/* Dequantize the token at index t inside a unit into out (D).              */
static void kvq__dequant_token(const uint32_t *words, const kvq_sz *sz,
                               size_t t, size_t D, int bits, size_t G,
                               kvq_axis axis, kvq_zero_mode mode, float *out)
{
    size_t wpg = kvq_packed_words(G, bits), d;
    float a, b;
    if (axis == KVQ_PER_TOKEN) {
        for (d = 0; d < D; d++) {
            size_t g = d / G;
            kvq_sz_affine(sz[g], mode, &a, &b);
            out[d] = (float)kvq__get_code(words + g * wpg, d % G, bits) * a + b;
        }
    } else {
        for (d = 0; d < D; d++) {
            kvq_sz_affine(sz[d], mode, &a, &b);
            out[d] = (float)kvq__get_code(words + d * wpg, t, bits) * a + b;
        }
    }
}

/* One unit of the layout: each of its groups_per_unit groups quantized by
   kvq_quantize_group (Sec. 4), the definition, and packed (Sec. 5). A
   per-token group is G consecutive values (stride 1), a per-channel group
   one channel's G tokens (stride D). The codes of one group pass through
   a buffer of KVQ__GROUP_CODES bytes; a longer group (G up to 65536 is
   allowed) takes kvq_quantize_group's own steps, its codes packed a
   buffer at a time. Every call is checked already (the matrix's first
   pass, the cache's range checks): a failure here is an internal error.  */
#define KVQ__GROUP_CODES 1024
static kvq_status kvq__quantize_unit(const float *X, size_t D, int bits,
                                     size_t G, kvq_axis axis,
                                     kvq_zero_mode mode,
                                     uint32_t *words, kvq_sz *sz)
{
    const size_t groups = axis == KVQ_PER_TOKEN ? D / G : D,
                 stride = axis == KVQ_PER_TOKEN ? 1 : D,
                 wpg = kvq_packed_words(G, bits);
    uint8_t codes[KVQ__GROUP_CODES];
    size_t g, i;
    if (bits != 3) KVQ__FAST(quantize_unit(X, D, bits, G, axis, mode, words, sz));
    for (g = 0; g < groups; g++) {
        const float *x = axis == KVQ_PER_TOKEN ? X + g * G : X + g;
        uint32_t *w = words + g * wpg;
        kvq_status st;
        if (G <= KVQ__GROUP_CODES) {
            st = kvq_quantize_group(x, G, stride, bits, mode, codes, &sz[g]);
            if (st != KVQ_OK) return st;
            kvq__pack(codes, G, bits, w);
            continue;
        }
        {   /* kvq_quantize_group's steps: min and max, (s, z), the codes */
            float mn, mx;
            size_t i0, n;
            if (kvq__minmax_check(x, G, stride, &mn, &mx)) return KVQ__NO(KVQ_ERR_NONFINITE);
            if ((st = kvq__group_params(mn, mx, bits, mode, &sz[g])) != KVQ_OK) return st;
            for (i0 = 0; i0 < G; i0 += n) {     /* whole words a buffer     */
                n = G - i0 < KVQ__GROUP_CODES ? G - i0 : KVQ__GROUP_CODES;
                for (i = 0; i < n; i++) codes[i] = kvq__code(x[(i0 + i) * stride], sz[g], bits, mode);
                kvq__pack(codes, n, bits, w + i0 / 32 * (size_t)bits);
            }
        }
    }
    return KVQ_OK;
}

/* Every unit of a checked matrix, in order (kvq_simd.h: per-token groups
   16 side by side).                                                       */
static void kvq__quantize_units(const float *X, const kvq_layout *L, size_t D, int bits,
                                size_t G, kvq_axis axis, kvq_zero_mode mode,
                                uint32_t *words, kvq_sz *sz)
{
    size_t u;
    if (bits != 3) KVQ__FAST_VOID(quantize_units(X, L, D, bits, G, axis, mode, words, sz));
    for (u = 0; u < L->units; u++)
        kvq__quantize_unit(X + u * L->geom.tokens_per_unit * D, D, bits, G, axis, mode,
                           words + u * L->geom.groups_per_unit * L->geom.words_per_group,
                           sz + u * L->geom.groups_per_unit);
}

/* The largest |x| of n values, or -1 if one is not finite. Inside
   KVQ_MAX_ABS_INPUT every group's (s, z) fits fp16 (Sec. 2), so a matrix
   that passes this needs no per-group range check.                        */
static float kvq__absmax_or_nonfinite(const float *x, size_t n)
{
    float amax = 0.0f, a;
    size_t i;
    KVQ__FAST(absmax_or_nonfinite(x, n));
    for (i = 0; i < n; i++) {
        if (!kvq__finite(x[i])) return -1.0f;
        a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

KVQ_API kvq_status kvq_quantize_matrix(const float *X, size_t T, size_t D,
                                       int bits, size_t G, kvq_axis axis,
                                       kvq_zero_mode mode,
                                       uint32_t *words, kvq_sz *sz)
{
    kvq_layout L;
    kvq_status st;
    size_t u, g;
    if (!X || !words || !sz) return KVQ__NO(KVQ_ERR_NULL);
    st = kvq_layout_init(&L, T, D, bits, G, axis);
    if (st != KVQ_OK) return st;
    if (mode != KVQ_ZERO_FLOAT && mode != KVQ_ZERO_INT) return KVQ__NO(KVQ_ERR_CONFIG);
    if (!kvq__mul(T, D, &u)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    /* first pass: every value finite (NaN/Inf anywhere wins over a range
       error) and every group's parameters in fp16; writes nothing. One
       streaming max |x| settles both for inputs inside KVQ_MAX_ABS_INPUT. */
    {
        float amax = kvq__absmax_or_nonfinite(X, T * D);
        if (amax < 0.0f) return KVQ__NO(KVQ_ERR_NONFINITE);
        if (amax <= KVQ_MAX_ABS_INPUT) u = L.units;     /* skip the groups */
        else u = 0;
    }
    for (; u < L.units; u++) {
        const float *unit = X + u * L.geom.tokens_per_unit * D;
        for (g = 0; g < L.geom.groups_per_unit; g++) {
            const float *x = (axis == KVQ_PER_TOKEN) ? unit + g * G : unit + g;
            float mn, mx;
            kvq_sz p;
            kvq_status gs;
            if (kvq__minmax_check(x, G, axis == KVQ_PER_TOKEN ? 1 : D, &mn, &mx))
                return KVQ__NO(KVQ_ERR_NONFINITE);
            gs = kvq__group_params(mn, mx, bits, mode, &p);
            if (gs != KVQ_OK && st == KVQ_OK) st = gs;
        }
    }
    if (st != KVQ_OK) return st;
    kvq__quantize_units(X, &L, D, bits, G, axis, mode, words, sz);
    return KVQ_OK;
}

KVQ_API kvq_status kvq_dequantize_matrix(const uint32_t *words, const kvq_sz *sz,
                                         size_t T, size_t D, int bits, size_t G,
                                         kvq_axis axis, kvq_zero_mode mode,
                                         float *Xout)
{
    kvq_layout L;
    kvq_status st;
    size_t t;
    if (!words || !sz || !Xout) return KVQ__NO(KVQ_ERR_NULL);
    st = kvq_layout_init(&L, T, D, bits, G, axis);
    if (st != KVQ_OK) return st;
    if (mode != KVQ_ZERO_FLOAT && mode != KVQ_ZERO_INT) return KVQ__NO(KVQ_ERR_CONFIG);
    {
        size_t n;
        if (!kvq__mul(T, D, &n)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    }
    /* stored parameters from outside (a file, a GPU buffer): an fp16 Inf
       or NaN scale or zero is corrupt data, not a value to propagate      */
    for (t = 0; t < L.total_groups; t++)
        if (((sz[t].scale >> 10) & 0x1Fu) == 0x1Fu || ((sz[t].zero >> 10) & 0x1Fu) == 0x1Fu)
            return KVQ__NO(KVQ_ERR_NONFINITE);
    for (t = 0; t < T; t++) {
        size_t u = t / L.geom.tokens_per_unit;
        kvq__dequant_token(words + u * L.geom.groups_per_unit * L.geom.words_per_group,
                           sz + u * L.geom.groups_per_unit, t % L.geom.tokens_per_unit,
                           D, bits, G, axis, mode, Xout + t * D);
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 6.1 rotation before quantizing                                           */
/* ------------------------------------------------------------------------ */

/* QuaRot ("QuaRot: Outlier-Free 4-Bit Inference in Rotated LLMs",
   arXiv:2404.00456, Sec. 4), SpinQuant ("SpinQuant: LLM Quantization with
   Learned Rotations", arXiv:2405.16406) and RotateKV ("RotateKV: Accurate
   and Robust 2-Bit KV Cache Quantization for LLMs via Outlier-Aware Adaptive
   Rotations", arXiv:2501.16383) rotate each head's keys (and the query the
   same way) before quantizing. A few channels of a key carry most of its
   magnitude (outlier channels); a min-max group that spans channels (per-
   token keys) spends its range on them. An orthonormal R mixes every
   channel into every other, so the rotated row's mass is spread evenly and
   the group's range shrinks; per-channel groups already give each outlier
   channel its own range, so they gain far less.

   THE TRANSFORM. H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]] (Sylvester).
   H_D is symmetric and H_D H_D = D I, so R = H_D / sqrt(D) is orthonormal
   and its own inverse. With a sign vector s (s_i = +-1, S = diag(s)):
       rotate:       y = H_D (S x) / sqrt(D)
       rotate back:  x = S (H_D y) / sqrt(D)      (R^T = S H_D / sqrt(D))
   Keys: (R q) . (R k) = q^T R^T R k = q . k, so kvq_attend rotates the query
   and the scores are unchanged. Values: out = sum_p w_p (R v_p) = R (sum_p
   w_p v_p), so the output is rotated back once per query head.

   ROUNDING ORDER (the definition kvq_cuda.cu must reproduce bit for bit):
     1. the sign flip x_i * s_i (exact);
     2. the fast Walsh-Hadamard transform in log2(D) stages h = 1, 2, 4, ...,
        D/2; each stage replaces every pair (x_j, x_{j+h}), j mod 2h < h, by
        (x_j + x_{j+h}, x_j - x_{j+h}), one fp32 rounding each;
     3. one fp32 multiply of every element by (float)(1 / sqrt((double)D))
        (exact when D is a power of 4).
   Rotating back applies 2, 3, then 1. The butterflies are exact adds in a
   fixed order, so vector and scalar builds agree bit for bit.

   THE SIGN VECTOR. s_i = -1 where bit 63 of splitmix64's i-th output is
   set, +1 otherwise: z = seed + (i + 1) * 0x9E3779B97F4A7C15,
   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9, z = (z ^ (z >> 27)) *
   0x94D049BB133111EB, z ^= z >> 31 (all mod 2^64). Each s_i is computed
   from i alone, so a GPU thread can form its own. Keys and values share it.

   CHOICES LEFT OPEN, AND WHY
     D must be a power of two (every model kvq targets has D = 64 or 128);
     any other D is refused (KVQ_ERR_SIZE) rather than given a block-
     diagonal rule no peer uses. The rotation is fixed, not learned
     (SpinQuant's learned R needs training data). It is applied after RoPE,
     to what the cache is given (QuaRot rotates keys after RoPE as well).
     A rotated row is refused if some |y_i| > KVQ_MAX_ABS_INPUT (it can
     reach sqrt(D) max|x|), so the input bound still keeps fp16 finite.
     OTT's magnitude criterion (the key's L1 norm) is taken on the stored,
     rotated key: L1 is not rotation-invariant, so a rotated OTT cache can
     pick other outliers than an unrotated one. H2O's and SnapKV's scores
     are attention probabilities, unchanged by the rotation up to rounding. */

/* s_i of the sign vector drawn from seed (splitmix64, above).              */
static float kvq__rot_sign(uint64_t seed, size_t i)
{
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> 63) ? -1.0f : 1.0f;
}

static int kvq__pow2(size_t D) { return D != 0 && (D & (D - 1)) == 0; }

/* x (D) <- R x or R^T x in the rounding order above; sign (D) or NULL.     */
static void kvq__rotate_row(const float *sign, size_t D, int inverse, float *x)
{
    float scale = (float)(1.0 / sqrt((double)D));
    size_t h, i, j;
    if (sign && !inverse) for (j = 0; j < D; j++) x[j] *= sign[j];
    for (h = 1; h < D; h *= 2)                  /* the butterflies, stage h */
        for (i = 0; i < D; i += 2 * h)
            for (j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    for (j = 0; j < D; j++) x[j] *= scale;
    if (sign && inverse) for (j = 0; j < D; j++) x[j] *= sign[j];
}

/* out (D) <- R in or R^T in (in == out allowed), kvq__rotate_row's floats;
   returns max |out|. The form every caller uses (kvq_simd.h: the row in
   vector registers, the same butterflies in the same order).             */
static float kvq__rotate_into(const float *sign, size_t D, int inverse,
                              const float *in, float *out)
{
    float m = 0.0f;
    size_t j;
    KVQ__FAST(rotate_into(sign, D, inverse, in, out));
    if (out != in) memmove(out, in, D * sizeof(float));
    kvq__rotate_row(sign, D, inverse, out);
    for (j = 0; j < D; j++) m = fabsf(out[j]) > m ? fabsf(out[j]) : m;
    return m;
}

/* X (T, D) <- X S: each s_i drawn once per call, for a chunk of columns
   at a time over all T rows (no table of D signs to allocate).            */
static void kvq__flip_signs(uint64_t seed, size_t D, float *X, size_t T)
{
    float s[256];
    size_t j0, j, t, n;
    for (j0 = 0; j0 < D; j0 += n) {
        n = D - j0 < 256 ? D - j0 : 256;
        for (j = 0; j < n; j++) s[j] = kvq__rot_sign(seed, j0 + j);
        for (t = 0; t < T; t++)
            for (j = 0; j < n; j++) X[t * D + j0 + j] *= s[j];
    }
}

/* KVQ_OK if rotation `kind` can serve D; else the status, and the reason
   (naming `who`) in kvq_why().                                            */
static kvq_status kvq__rotation_check(kvq_rotation kind, size_t D, const char *who)
{
    if ((int)kind < 0 || kind > KVQ_ROT_HADAMARD_SIGNS) {
        kvq__say("%s: unknown rotation %d (0 none, 1 Hadamard, 2 Hadamard "
                 "with signs)", who, (int)kind);
        return KVQ_ERR_CONFIG;
    }
    if (kind != KVQ_ROT_NONE && !kvq__pow2(D)) {
        kvq__say("%s: the Hadamard rotation needs D a power of two (D=%zu)", who, D);
        return KVQ_ERR_SIZE;
    }
    return KVQ_OK;
}

KVQ_API kvq_status kvq_rotate(kvq_rotation kind, uint64_t seed, size_t D,
                              int inverse, float *X, size_t T)
{
    size_t t, n;
    int sg = kind == KVQ_ROT_HADAMARD_SIGNS;
    float *row = NULL;                  /* scratch, for rows near FLT_MAX */
    kvq_status st;
    if (!X) return KVQ__NO(KVQ_ERR_NULL);
    if (D == 0 || T == 0) {
        kvq__say("kvq_rotate: D=%zu and T=%zu must be positive", D, T);
        return KVQ_ERR_SIZE;
    }
    if ((st = kvq__rotation_check(kind, D, "kvq_rotate")) != KVQ_OK) return st;
    if (inverse != 0 && inverse != 1) {
        kvq__say("kvq_rotate: inverse must be 0 or 1 (got %d)", inverse);
        return KVQ_ERR_CONFIG;
    }
    if (!kvq__mul(T, D, &n)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    if (kvq__check_finite(X, n) != KVQ_OK) return KVQ__NO(KVQ_ERR_NONFINITE);
    if (kind == KVQ_ROT_NONE) return KVQ_OK;
    /* A finite row can overflow (D = 4, every x = 3e38: 6e38 after one
       butterfly), so every row is known finite before X is written. Each
       stage at most doubles the largest |value| (|fl(a +- b)| <= fl(|a| +
       |b|), rounding being monotone) and the scale is below 1: a row whose
       max |x| * D is finite (exact: D is a power of two) cannot overflow.
       Any other row is rotated once in a scratch row; an Inf anywhere in
       the transform reaches its output as Inf or NaN.                     */
    for (t = 0; t < T; t++) {
        const float *x = X + t * D;
        float m = 0.0f;
        size_t j;
        for (j = 0; j < D; j++) m = fabsf(x[j]) > m ? fabsf(x[j]) : m;
        if (kvq__finite(m * (float)D)) continue;
        if (!row) row = (float *)KVQ_MALLOC(D * sizeof(float));
        if (!row) {
            kvq__say("kvq_rotate: cannot allocate a scratch row of D=%zu floats", D);
            return KVQ_ERR_NOMEM;
        }
        memcpy(row, x, D * sizeof(float));
        if (sg && !inverse) kvq__flip_signs(seed, D, row, 1);
        kvq__rotate_row(NULL, D, inverse, row);   /* inverse: signs last */
        if (kvq__check_finite(row, D) != KVQ_OK) {
            KVQ_FREE(row);
            kvq__say("kvq_rotate: row %zu (max |x| = %g, D = %zu) overflows fp32 once "
                     "rotated", t, (double)m, D);
            return KVQ_ERR_RANGE;
        }
    }
    KVQ_FREE(row);
    /* kvq__rotate_row's order: signs, transform, scale (rotating back: the
       transform and scale, then the signs)                                */
    if (sg && !inverse) kvq__flip_signs(seed, D, X, T);
    for (t = 0; t < T; t++) kvq__rotate_into(NULL, D, inverse, X + t * D, X + t * D);
    if (sg && inverse) kvq__flip_signs(seed, D, X, T);
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 7. the cache                                                             */
/* ------------------------------------------------------------------------ */

/* One kvq_cache holds ONE (layer, KV head). It has two sides, K and V, and
   each side is divided into REGIONS:

       side K:  [ quantized units ][ rows[0]: window ][ rows[1] ][ rows[2] ]...
       side V:  [ quantized units ][ rows[0]: window ][ rows[1] ][ rows[2] ]...

     - the quantized region: packed units exactly as in Sec. 6, plus the
       position of every slot (qpos; -1 marks a placeholder slot that holds a
       value for quantization's sake but is not attended);
     - full-precision row regions (fp16 or fp32 rows, with their positions).
       rows[0] is the recent window / residual; the others are reserved for
       later policies (an outlier pool, an auxiliary pool, sinks, staging).

   Every position 0..n_pos-1 lives in exactly one region per side, recorded
   in the side's loc map (region tag + index). K and V of the same position
   may live in different regions: in KIVI a key can already be quantized while
   its value still sits in the value window.

   A POLICY is nothing but the rule that moves positions between regions:
     schedule FLUSH  when the window holds R rows and a new one arrives, all R
                     are quantized first (KIVI keys; HF keys and values).
     schedule SLIDE  after each arrival, while the window holds >= R + chunk
                     rows, the oldest `chunk` rows are quantized (KIVI values:
                     chunk = 1 token; the window stays at exactly R).
     schedule NONE   never quantize (the full-precision baseline).
   Attention, byte accounting and invariants read only the regions, so later
   policies (OTT's pools, LogQuant's selection, eviction + compaction) add
   regions and rules, never a new cache type.

   KIVI's and HF's rules are written above their code (below), OTT's in
   Sec. 7.1, LogQuant's in Sec. 7.2.                                       */

/* The row and unit buffers (growth, pushing, copying, removing rows) are
   defined after the algorithms that use them (Sec. 10).                   */
static void *kvq__grow(void *p, size_t cap, size_t need, size_t el, int exact, size_t *new_cap);
static size_t kvq__fp_bytes(const kvq_cache *c);
static uint32_t kvq__rows_tag(int r);
static void kvq__rows_to_front(kvq_cache *c, kvq_side *s, int r);
static kvq_status kvq__units_reserve(kvq_side *s, size_t more, int exact);
static kvq_status kvq__reserve_append(kvq_cache *c, size_t n_new, int exact);
static void *kvq__row_ptr(const kvq_cache *c, const kvq_rows *rg, size_t i);
/* x, or x rotated for side s (Sec. 6.1; defined with kvq_cache_prefill)    */
static const float *kvq__stored_row(kvq_cache *c, int s, const float *x);
static void kvq__row_store(const kvq_cache *c, void *dst, const float *x);
static void kvq__row_load(const kvq_cache *c, const void *src, float *x);
static size_t kvq__rows_tail(kvq_cache *c, kvq_side *s, int r);
static void kvq__rows_push(kvq_cache *c, kvq_side *s, int r, const float *x, size_t pos);
static void kvq__rows_copy(kvq_cache *c, kvq_side *s, int from, size_t i, int to);
static void kvq__rows_remove(kvq_cache *c, kvq_side *s, int r, int (*drop)(size_t o, const void *arg), const void *arg);

/* ---- KIVI: FLUSH keys, SLIDE values ---------------------------------------
   KIVI (arXiv:2402.02750, Sec. 3.3, Algorithm 1 in Appendix A),
   kvq_config_kivi:
     keys   per-channel, FLUSH: the residual holds 1..R keys after every
            append (mean about R/2); G | R is required.
     values per-token, SLIDE with chunk 1: exactly R values in full precision.
     prefill (Algorithm 1): keys quantize T - T % R tokens, values all but
            the last R.
   In the paper's names: X_Kg and X_Vg are the quantized units, X_Kr and
   X_Vr rows[KVQ_ROWS_WINDOW]; l = n_pos, r = rows[KVQ_ROWS_WINDOW].n.
   The step (kvq__side_step) and the prefill (kvq__side_prefill) below
   serve HF's schedule and CUSTOM too.
*/

static void kvq__replace_by_mean(kvq_cache *c, size_t n, const unsigned char *mark); /* 7.1 */
static void kvq__side_token(const kvq_cache *c, const kvq_side *s, size_t unit, size_t t,
                            float *out);                                       /* 8   */
static void kvq__requantize_all(kvq_cache *c, kvq_side *s);                          /* HF  */

/* One unit of a side in a format of Sec. 4.1: each group quantized by
   kvq__format_group (kvq_format_quantize's body: the rows are finite and
   range-checked already), its codes packed (Sec. 5) and its parameter
   packed into the unit's kvq_sz words, P bits each, low bits first.      */
static void kvq__format_unit(const kvq_side *s, const float *X /* (tpu, D) */, size_t D,
                             uint32_t *words, kvq_sz *sz /* (sz_per_unit) */)
{
    const size_t G = s->group, wpg = s->geom.words_per_group, gpu = s->geom.groups_per_unit,
                 stride = s->axis == KVQ_PER_TOKEN ? 1 : D;
    const unsigned P = (unsigned)kvq_format_param_bits(s->format);
    uint8_t codes[KVQ__FORMAT_MAX_GROUP];
    uint32_t param, word;
    size_t g;
    if (P) memset(sz, 0, s->sz_per_unit * sizeof *sz);
    for (g = 0; g < gpu; g++) {
        const float *x = s->axis == KVQ_PER_TOKEN ? X + g * G : X + g;
        kvq__format_group(s->format, s->bits, x, G, stride, s->scale, codes, &param);
        kvq__pack(codes, G, s->bits, words + g * wpg);
        if (!P) continue;
        memcpy(&word, (char *)sz + g * P / 32 * 4, 4);
        word |= P == 32 ? param : param << (g * P % 32);
        memcpy((char *)sz + g * P / 32 * 4, &word, 4);
    }
}

/* Quantize the oldest n rows of region r into new units, in order (n a
   multiple of tokens_per_unit, n <= stage_rows). Rows flagged in
   `placeholder` (n flags, or NULL) are replaced by a mean first and their
   slots are stored but never attended (their tokens moved elsewhere).      */
static void kvq__quantize_oldest(kvq_cache *c, kvq_side *s, int r, size_t n,
                                 const unsigned char *placeholder)
{
    kvq_rows *w = &s->rows[r];
    size_t D = c->cfg.head_dim, tpu = s->geom.tokens_per_unit, i, u;
    size_t unit_words = s->geom.groups_per_unit * s->geom.words_per_group;
    KVQ_ASSERT(n % tpu == 0 && n <= c->stage_rows && n <= w->n);
    for (i = 0; i < n; i++)
        kvq__row_load(c, kvq__row_ptr(c, w, w->off + i), c->stage + i * D);
    if (placeholder) kvq__replace_by_mean(c, n, placeholder);
    if (kvq__format_tensor(s->format) && s->scale == 0.0f)     /* Sec. 4.1 */
        s->scale = kvq__side_scale_from(s->format, kvq__absmax_or_nonfinite(c->stage, n * D));
    for (u = 0; u < n / tpu; u++) {
        size_t unit = s->n_units + u;
        if (s->format != KVQ_FORMAT_INT) {
            kvq__format_unit(s, c->stage + u * tpu * D, D, s->words + unit * unit_words,
                             s->sz_per_unit ? s->sz + unit * s->sz_per_unit : NULL);
        } else {
            kvq_status st = kvq__quantize_unit(c->stage + u * tpu * D, D, s->bits,
                                               s->group, s->axis, c->cfg.zero_mode,
                                               s->words + unit * unit_words,
                                               s->sz + unit * s->geom.groups_per_unit);
            (void)st;   /* appends are range-checked against KVQ_MAX_ABS_INPUT */
            KVQ_ASSERT(st == KVQ_OK);
        }
        for (i = 0; i < tpu; i++) {
            size_t slot = unit * tpu + i, o = u * tpu + i;
            int32_t pos = (placeholder && placeholder[o]) ? -1 : w->pos[w->off + o];
            s->qpos[slot] = pos;
            if (pos >= 0) s->loc[pos] = (KVQ_LOC_QUANT << 28) | (uint32_t)slot;
        }
    }
    s->n_units += n / tpu;
    w->off += n;
    w->n -= n;
    if (w->n == 0) w->off = 0;
}

/* KIVI / HF / CUSTOM: the decode-step rule of one side around the push.
   KIVI's rule is the FLUSH branch and the SLIDE loop; the lines naming
   KVQ_POLICY_HF are HF's first update and re-quantization (below).       */
static void kvq__side_step(kvq_cache *c, kvq_side *s, const float *x, size_t pos)
{
    kvq_rows *w = &s->rows[KVQ_ROWS_WINDOW];
    size_t R = c->cfg.residual;
    /* HF's first update is quantized whole (HF, below): from an empty
       cache, token 0 is still alone in a per-token window when position 1
       arrives, and is flushed then                                        */
    int first = c->cfg.policy == KVQ_POLICY_HF && pos == 1 && w->n == 1 &&
                s->geom.tokens_per_unit == 1;
    if (s->schedule == KVQ_SCHED_FLUSH && (w->n >= R || first)) {
        if (c->cfg.policy == KVQ_POLICY_HF && c->cfg.hf_requantize)
            kvq__requantize_all(c, s);
        kvq__quantize_oldest(c, s, KVQ_ROWS_WINDOW, w->n - w->n % s->geom.tokens_per_unit, NULL);
    }
    kvq__rows_push(c, s, KVQ_ROWS_WINDOW, x, pos);
    if (s->schedule == KVQ_SCHED_SLIDE)
        while (w->n >= R + s->chunk)
            kvq__quantize_oldest(c, s, KVQ_ROWS_WINDOW, s->chunk, NULL);
}

/* A side scale left to the data (key_scale = 0, Sec. 4.1) is set, before
   its first quantization, from every row it holds then: after a prefill,
   the prompt's rows and the window's, as stored (rotated, fp16-rounded:
   rounding is monotonic, so rounding the max is the max of the rounded).
   vLLM's calculate_kv_scales takes the same absmax from its first pass.  */
static void kvq__prefill_scale(kvq_cache *c, kvq_side *s, const float *X, size_t T)
{
    const kvq_rows *w = &s->rows[KVQ_ROWS_WINDOW];
    size_t D = c->cfg.head_dim, t;
    float amax = 0.0f, m;
    for (t = 0; t < T; t++) {
        m = kvq__absmax_or_nonfinite(kvq__stored_row(c, s == &c->v, X + t * D), D);
        amax = m > amax ? m : amax;
    }
    if (c->cfg.fp_bits == 16) amax = kvq__round_f16(amax);
    for (t = 0; t < w->n; t++) {
        kvq__row_load(c, kvq__row_ptr(c, w, w->off + t), c->stage);
        m = kvq__absmax_or_nonfinite(c->stage, D);
        amax = m > amax ? m : amax;
    }
    s->scale = kvq__side_scale_from(s->format, amax);
}

/* KIVI / HF / CUSTOM prefill of one side: Algorithm 1 decides how many of
   the side's rows end up quantized (keys T - T % R, values all but R; HF the
   whole prompt). Rows go in and out in chunks of stage_rows, so the window
   never holds more than R + stage_rows rows on the way.                    */
static void kvq__side_prefill(kvq_cache *c, kvq_side *s, const float *X,
                              size_t T, size_t pos0)
{
    kvq_rows *w = &s->rows[KVQ_ROWS_WINDOW];
    size_t R = c->cfg.residual, tpu = s->geom.tokens_per_unit, D = c->cfg.head_dim;
    size_t n = w->n + T, q = 0, t = 0;
    if (s->schedule == KVQ_SCHED_FLUSH)
        q = (c->cfg.policy == KVQ_POLICY_HF) ? n - n % tpu   /* whole prompt */
                                             : n - n % R;    /* Algorithm 1  */
    else if (s->schedule == KVQ_SCHED_SLIDE && n > R)
        q = (n - R) - (n - R) % tpu;                         /* all but R    */
    if (q > 0 && kvq__format_tensor(s->format) && s->scale == 0.0f)
        kvq__prefill_scale(c, s, X, T);                      /* Sec. 4.1     */
    for (;;) {
        size_t m, room = c->stage_rows ? c->stage_rows : T;
        for (; t < T && room > 0; t++, room--)
            kvq__rows_push(c, s, KVQ_ROWS_WINDOW, kvq__stored_row(c, s == &c->v, X + t * D),
                           pos0 + t);
        m = q < w->n ? q : w->n;
        if (m > c->stage_rows) m = c->stage_rows;
        m -= m % (tpu ? tpu : 1);
        if (m > 0) { kvq__quantize_oldest(c, s, KVQ_ROWS_WINDOW, m, NULL); q -= m; }
        else if (t == T) break;
    }
    KVQ_ASSERT(q == 0);
}

/* ---- HF: the QuantizedCache schedule -------------------------------------
   HF QuantizedCache schedule, kvq_config_hf (transformers' QuantizedCache
   with the quanto backend; the same schedule since the HF post):
     both per-token (HF's default axis), FLUSH with R = residual_length.
     zero point: HF's two rules, side by side (Sec. 4 has the arithmetic):
       KVQ_ZERO_FLOAT, the default: transformers today, whose quanto backend
         requires optimum-quanto >= 0.2.5; quanto's MaxOptimizer has used a
         float shift -min since 0.2.3 (July 2024): code = clamp(rne((x -
         min) / s), 0, N), x' = code s + min, KIVI's rule.
       KVQ_ZERO_INT (hf.zero_mode): the HF post ("Unlocking Longer
         Generation with Key-Value Cache Quantization", May 2024) and
         optimum-quanto <= 0.2.2: zp = rne(-min / s), code = clamp(rne(x /
         s) + zp, 0, N), x' = (code - zp) s. 0 is a grid point whenever
         0 <= zp <= N: in every group holding values of both signs.
       Both round half to even (torch.round), and kvq stores s and the
       zero in fp16 where HF keeps the model's dtype.
     the first update: HF quantizes whatever its first update receives
     (transformers returns those states unquantized for that one step's
     attention, then keeps only their quantized form). After a prefill this
     is the prompt, which kvq's prefill quantizes too. Decoding from an
     EMPTY cache it is token 0 alone: HF quantizes token 0 at step 0 and
     its full-precision windows are tokens [128k + 1, 128k + 128]. kvq
     does the same: the append of position 1 quantizes the row of position
     0 first (when it is still in the window, on a per-token side; a
     per-channel side cannot form a G-token group from it and keeps it),
     so step 0 attends token 0 as it arrived and every later step its
     quantized form, as in HF.
     prefill quantizes the whole prompt (T - T % G for a per-channel axis).
     At each flush HF dequantizes the entire history and re-quantizes it
     together with the residual; kvq does the same when hf_requantize = 1
     (the default for this policy). Re-quantizing a dequantized group
     reproduces it bit for bit whenever its codes reach N (and 0, which
     the float zero's stored min always gives); only the rare group whose
     top code fell short through fp16 rounding of the scale can move,
     and it settles within a few flushes (examples/03_hf.c measures this:
     no row moves under the float zero, a few under the integer zero),
     so the effect on mean error is small either way. The worst case is
     not: tests/test_soak.c checks that every row is bit-identical after
     8 flushes, and `make soak` measures settled elements up to 0.50x
     (float zero) and 2.0x (integer zero) the largest single-quantization
     step away from their input (one quantization: at most 1x), the
     integer zero's from the moves before the group settled. Each flush
     also costs O(history) (bench/RESULTS.md, Soak: 0.22 ms per append at
     62,500 tokens, D = 32).
     Flush moment: HF flushes when the R-th residual token arrives and
     holds 0..R-1 rows between steps; kvq flushes on the append after
     that and holds 1..R. Every step attends the same rows in full
     precision, after a prefill and from an empty cache alike (token 0
     above is the same rule at the first update); only the stored bytes
     differ on every R-th step and at step 0.
     Differences from KIVI: no sliding value window, keys per-token, the
     prompt is fully quantized, and history is re-quantized.
*/

/* HF: dequantize every unit and quantize it again, as HF does at a flush.  */
static void kvq__requantize_all(kvq_cache *c, kvq_side *s)
{
    size_t D = c->cfg.head_dim, tpu = s->geom.tokens_per_unit, u, t;
    size_t unit_words = s->geom.groups_per_unit * s->geom.words_per_group;
    for (u = 0; u < s->n_units; u++) {
        uint32_t *w = s->words + u * unit_words;
        kvq_sz *sz = s->sz + u * s->geom.groups_per_unit;
        for (t = 0; t < tpu; t++)
            kvq__dequant_token(w, sz, t, D, s->bits, s->group, s->axis,
                               c->cfg.zero_mode, c->stage + t * D);
        kvq__quantize_unit(c->stage, D, s->bits, s->group, s->axis,
                           c->cfg.zero_mode, w, sz);
    }
}

/* ---- OTT (Sec. 7.1) ---------------------------------------------------- */
/* 7.1 OTT, outlier token tracing ("Accurate KV Cache Quantization with
   Outlier Tokens Tracing", arXiv:2505.10938, Sec. 3.2, Appendix E), on the
   same regions plus rows[KVQ_ROWS_OUTLIER] (the outlier pool, capacity k)
   and rows[KVQ_ROWS_AUX] (the paper's additional pool, called auxiliary
   here):
     cadence  K and V are both quantized G tokens at a time: whenever the
              window holds R + G rows, its G oldest form the group (so the
              full-precision part is the group being filled plus R recent).
     score    a token's key magnitude: the L1 norm sum_d |k_d| of its stored
              full-precision key, summed in channel order d = 0..D-1 in fp32
              (Appendix E). Small is outlier (Sec. 3.1, Fig. 1(e)).
     compete  the G group tokens and the pool's members compete; the k with
              the smallest scores win (ties: smaller position first). Winners
              from the group move (K and V, full precision) into the pool;
              members that lose move to the auxiliary pool.
     replace  in the group, each winner's K and V rows are replaced by the
              mean of the group's other tokens (kvq_ott_mean, default) before
              quantization; their slots become placeholders (qpos = -1) that
              are stored but never attended.
     stop     a round whose losers would not fit in the auxiliary pool is not
              held, and tracing stops for good; tracing also stops right after
              a round that fills the auxiliary pool exactly. ott_stopped_at
              records when (the paper: "when it is full, tracing stops").
     layers   k may differ per layer; kvq_config_ott(D, B, layer) uses k = 0
              for layers 0 and 1 (Sec. 4.4: no outlier tokens there).
   Attention covers quantized, window, pool and auxiliary tokens under one
   softmax; each position is counted once because loc names one region.  */
/* OTT's replacement step: rows flagged in mark (n rows of stage) get
   the mean of the other rows (KVQ_OTT_MEAN_REST) or of all n rows.         */
static void kvq__replace_by_mean(kvq_cache *c, size_t n, const unsigned char *mark)
{
    size_t D = c->cfg.head_dim, d, i, cnt = 0;
    int all = c->cfg.ott_mean == KVQ_OTT_MEAN_ALL;
    for (i = 0; i < n; i++) cnt += all || !mark[i];
    for (d = 0; d < D; d++) {
        float sum = 0.0f, mean;
        for (i = 0; i < n; i++)
            if (all || !mark[i]) sum += c->stage[i * D + d];
        mean = sum / (float)cnt;
        for (i = 0; i < n; i++)
            if (mark[i]) c->stage[i * D + d] = mean;
    }
}

static float kvq__l1(const kvq_cache *c, const kvq_rows *rg, size_t i, float *tmp)
{
    size_t d, D = c->cfg.head_dim;
    float sum = 0.0f;
    kvq__row_load(c, kvq__row_ptr(c, rg, i), tmp);
    for (d = 0; d < D; d++) sum += fabsf(tmp[d]);
    return sum;
}

static int kvq__drop_marked(size_t o, const void *arg)
{
    return ((const unsigned char *)arg)[o] != 0;
}

/* One OTT round: the G oldest window tokens compete with the pool, then are
   quantized (winners as placeholders). `pos` is the arriving position.     */
static void kvq__ott_round(kvq_cache *c, size_t pos)
{
    size_t G = c->cfg.group, k = c->cfg.ott_k, i, j;
    kvq_rows *win = &c->k.rows[KVQ_ROWS_WINDOW], *pool = &c->k.rows[KVQ_ROWS_OUTLIER];
    kvq_rows *aux = &c->k.rows[KVQ_ROWS_AUX];
    unsigned char *in_group = c->mark;          /* (G) winners in the group */
    unsigned char *pool_lost = c->mark + G;     /* (k) pool members that lose */
    int any = 0;
    memset(c->mark, 0, G + k);
    if (c->ott_tracing) {
        /* candidates 0..G-1 are the group, G..G+n_pool-1 the pool          */
        size_t n_pool = pool->n, n_cand = G + n_pool, losers = 0, w;
        unsigned char *picked = c->mark + G + k;    /* (G + k) selection    */
        float *sc = c->score;
        memset(picked, 0, n_cand);
        for (i = 0; i < G; i++) sc[i] = kvq__l1(c, win, win->off + i, c->stage);
        for (i = 0; i < n_pool; i++) sc[G + i] = kvq__l1(c, pool, pool->off + i, c->stage);
        for (w = 0; w < k && w < n_cand; w++) {     /* k smallest, ties by position */
            size_t best = n_cand;
            for (j = 0; j < n_cand; j++) {
                int32_t pj, pb;
                if (picked[j]) continue;
                if (best == n_cand || sc[j] < sc[best]) { best = j; continue; }
                pj = j < G ? win->pos[win->off + j] : pool->pos[pool->off + j - G];
                pb = best < G ? win->pos[win->off + best] : pool->pos[pool->off + best - G];
                if (sc[j] == sc[best] && pj < pb) best = j;
            }
            picked[best] = 1;
        }
        for (i = 0; i < n_pool; i++) losers += !picked[G + i];
        if (aux->n + losers > c->cfg.ott_aux) {
            c->ott_tracing = 0;                 /* no room: tracing stops   */
            c->ott_stopped_at = pos + 1;
        } else {
            for (i = 0; i < G; i++) { in_group[i] = picked[i]; any |= picked[i]; }
            for (i = 0; i < n_pool; i++) pool_lost[i] = !picked[G + i];
            for (j = 0; j < 2; j++) {
                kvq_side *s = j ? &c->v : &c->k;
                kvq_rows *sp = &s->rows[KVQ_ROWS_OUTLIER], *sw = &s->rows[KVQ_ROWS_WINDOW];
                for (i = 0; i < n_pool; i++)      /* losers: pool -> aux    */
                    if (pool_lost[i]) kvq__rows_copy(c, s, KVQ_ROWS_OUTLIER, sp->off + i, KVQ_ROWS_AUX);
                kvq__rows_remove(c, s, KVQ_ROWS_OUTLIER, kvq__drop_marked, pool_lost);
                for (i = 0; i < G; i++)           /* winners: group -> pool */
                    if (in_group[i]) kvq__rows_copy(c, s, KVQ_ROWS_WINDOW, sw->off + i, KVQ_ROWS_OUTLIER);
            }
            c->ott_rounds++;
            if (aux->n == c->cfg.ott_aux) {     /* full: tracing stops      */
                c->ott_tracing = 0;
                c->ott_stopped_at = pos + 1;
            }
        }
    }
    kvq__quantize_oldest(c, &c->k, KVQ_ROWS_WINDOW, G, any ? in_group : NULL);
    kvq__quantize_oldest(c, &c->v, KVQ_ROWS_WINDOW, G, any ? in_group : NULL);
}

/* ---- LogQuant (Sec. 7.2) ------------------------------------------------ */
/* 7.2 LogQuant (arXiv:2503.19950, Sec. 2.5, Algorithm 1), window W:
     select   rows[KVQ_ROWS_WINDOW] is Algorithm 1's list A. On each new token:
              if |A| < 3W append it; otherwise keep A[0:2W:2] + A[2W:3W] and
              then append it. After warm-up 2W < |A| <= 3W, and the density of
              kept tokens halves every W further back.
     drop     the W dropped tokens (odd offsets of A[0:2W]) go, in position
              order, to rows[KVQ_ROWS_STAGE]; whenever it holds a whole unit
              (G tokens for per-channel keys, 1 for per-token), that unit is
              quantized. So per-channel key groups hold G dropped tokens that
              are not consecutive positions; the stage holds at most G - 1.
     keys     per-channel by default (the paper's text, following KIVI); the
              authors' code quantizes keys per-token: set key_axis.
     sinks    optional: the first lq_sinks tokens stay in rows[KVQ_ROWS_SINK]
              (the KIVI+Sink comparison of Table 1); they are not part of A.
     prefill  exactly T appends in order (Algorithm 1 is defined per token).
   Attention is position-agnostic (Sec. 2.4, Eq. 3): with RoPE applied before
   caching, the softmax sum does not depend on where a token is stored.   */
static int kvq__drop_logquant(size_t o, const void *arg)
{
    size_t W = *(const size_t *)arg;
    return o < 2 * W && (o & 1u);            /* A[0:2W:2] + A[2W:3W] kept   */
}

static void kvq__logquant_side(kvq_cache *c, kvq_side *s, const float *x, size_t pos)
{
    size_t W = c->cfg.lq_window, o, tpu = s->geom.tokens_per_unit;
    kvq_rows *a = &s->rows[KVQ_ROWS_WINDOW], *st = &s->rows[KVQ_ROWS_STAGE];
    if (pos < c->cfg.lq_sinks) { kvq__rows_push(c, s, KVQ_ROWS_SINK, x, pos); return; }
    if (a->n >= 3 * W) {                      /* Algorithm 1, line 7        */
        for (o = 1; o < 2 * W; o += 2)
            kvq__rows_copy(c, s, KVQ_ROWS_WINDOW, a->off + o, KVQ_ROWS_STAGE);
        kvq__rows_remove(c, s, KVQ_ROWS_WINDOW, kvq__drop_logquant, &W);
        while (st->n >= tpu) {                /* whole units leave the stage */
            size_t m = st->n < c->stage_rows ? st->n : c->stage_rows;
            kvq__quantize_oldest(c, s, KVQ_ROWS_STAGE, m - m % tpu, NULL);
        }
    }
    kvq__rows_push(c, s, KVQ_ROWS_WINDOW, x, pos);     /* line 8            */
}

/* One decode step under the cache's policy (room already reserved).        */
static void kvq__step(kvq_cache *c, const float *k, const float *v, size_t pos)
{
    switch (c->cfg.policy) {
    case KVQ_POLICY_OTT:
        kvq__rows_push(c, &c->k, KVQ_ROWS_WINDOW, k, pos);
        kvq__rows_push(c, &c->v, KVQ_ROWS_WINDOW, v, pos);
        while (c->k.rows[KVQ_ROWS_WINDOW].n >= c->cfg.residual + c->cfg.group)
            kvq__ott_round(c, pos);
        break;
    case KVQ_POLICY_LOGQUANT:
        kvq__logquant_side(c, &c->k, k, pos);
        kvq__logquant_side(c, &c->v, v, pos);
        break;
    default:
        kvq__side_step(c, &c->k, k, pos);
        kvq__side_step(c, &c->v, v, pos);
        break;
    }
}

/* ---- configurations, creation, the calls that change a cache -----------
   The presets of each paper, the validation of a config, kvq_cache_init
   and kvq_cache_free, then reserve, prefill, append and read: the public
   face of the rules above.                                                 */
static kvq_config kvq__config_base(size_t head_dim)
{
    kvq_config c;
    memset(&c, 0, sizeof c);
    c.head_dim = head_dim;
    c.key_bits = c.value_bits = 16;
    c.group = 32;
    c.residual = 128;
    c.key_axis = KVQ_PER_CHANNEL;
    c.value_axis = KVQ_PER_TOKEN;
    c.zero_mode = KVQ_ZERO_FLOAT;
    c.fp_bits = 16;
    return c;    /* value_group, OTT and LogQuant fields: 0 (unused)       */
}

KVQ_API kvq_config kvq_config_kivi(size_t head_dim, int bits)
{
    kvq_config c = kvq__config_base(head_dim);
    c.policy = KVQ_POLICY_KIVI;
    c.key_bits = c.value_bits = bits;
    c.key_schedule = KVQ_SCHED_FLUSH;
    c.value_schedule = KVQ_SCHED_SLIDE;
    return c;
}

KVQ_API kvq_hf_params kvq_hf_defaults(int nbits)
{
    kvq_hf_params p;
    p.nbits = nbits;
    p.q_group_size = 64;
    p.residual_length = 128;
    p.axis_key = KVQ_PER_TOKEN;
    p.axis_value = KVQ_PER_TOKEN;
    p.zero_mode = KVQ_ZERO_FLOAT;       /* today's quanto; the post: INT   */
    return p;
}

KVQ_API kvq_config kvq_config_hf(size_t head_dim, kvq_hf_params hf)
{
    kvq_config c = kvq__config_base(head_dim);
    c.policy = KVQ_POLICY_HF;
    c.key_bits = c.value_bits = hf.nbits;
    c.group = hf.q_group_size;
    c.residual = hf.residual_length;
    c.key_axis = hf.axis_key;
    c.value_axis = hf.axis_value;
    c.zero_mode = hf.zero_mode;         /* kvq_config_validate checks it   */
    c.hf_requantize = 1;
    c.key_schedule = c.value_schedule = KVQ_SCHED_FLUSH;
    return c;
}

KVQ_API kvq_config kvq_config_full(size_t head_dim, int fp_bits)
{
    kvq_config c = kvq__config_base(head_dim);
    c.policy = KVQ_POLICY_FULL;
    c.fp_bits = fp_bits;
    c.key_schedule = c.value_schedule = KVQ_SCHED_NONE;
    return c;
}

KVQ_API kvq_config kvq_config_ott(size_t head_dim, int bits, int layer)
{
    kvq_config c = kvq__config_base(head_dim);
    c.policy = KVQ_POLICY_OTT;
    c.key_bits = c.value_bits = bits;
    c.group = 128;
    c.residual = 32;
    c.value_group = head_dim < 128 ? head_dim : 128;
    c.ott_k = layer < 2 ? 0 : 3;
    c.ott_aux = 32;
    c.ott_mean = KVQ_OTT_MEAN_REST;
    c.key_schedule = c.value_schedule = KVQ_SCHED_POLICY;
    return c;
}

KVQ_API size_t kvq_logquant_window_for(size_t R) { return R / 3; }

/* The formats engines ship (Sec. 4.1) as caches: CUSTOM schedules that
   quantize every token at its append (SLIDE, R = 0), both sides per token,
   fp16 rows on the way in (the engines' K and V are fp16/bf16). Each
   preset is the engine's, read from its code and docs; where the docs
   leave a detail open, the choice is named:
     fp8-e4m3, fp8-e5m2          vLLM kv_cache_dtype fp8 / fp8_e5m2: one
                                 scale per side, 1.0 (vLLM's default)
     fp8-e4m3-per-token-head     vLLM fp8_per_token_head: a scale per
                                 token and head (G = D)
     int8- / int4-per-token-head vLLM: Sec. 4's codes over G = D with a
                                 float zero, after a Hadamard rotation of
                                 both sides (vLLM keeps fp32 (s, z); kvq
                                 stores them in fp16, as everywhere)
     nvfp4, nvfp4-4over6         E2M1 + E4M3 per 16 + a side scale set
                                 from the first quantization's rows
                                 (a prefill: the prompt's)
     turboquant-*                vLLM's presets: keys rotated (Hadamard
                                 with seeded signs) then coded; values
                                 Sec. 4's codes over G = D, unrotated.
                                 k8v4: keys FP8 E4M3 with a side scale of
                                 1.0 (no norm: vLLM's 196-byte slot for
                                 D = 128 is 128 + 64 + 4); 4bit_nc: keys
                                 Lloyd-Max 4-bit with norm correction,
                                 values 4-bit (136 bytes); k3v4_nc: 3-bit
                                 keys, 4-bit values (120); 3bit_nc: 3-bit
                                 both (104)
     q8_0, q4_0                  llama.cpp: blocks of 32 on both sides,
                                 Hadamard rotation of both (llama.cpp's
                                 default for quantized K and V)          */
KVQ_API kvq_status kvq_config_engine(kvq_config *cfg, size_t head_dim, const char *name)
{
    static const struct {
        const char *name;
        kvq_format kf, vf;
        int kb, vb;
        kvq_rotation rot_k, rot_v;
        float scale;
    } presets[] = {
        { "fp8-e4m3", KVQ_FORMAT_E4M3_TENSOR, KVQ_FORMAT_E4M3_TENSOR, 8, 8, KVQ_ROT_NONE, KVQ_ROT_NONE, 1.0f },
        { "fp8-e5m2", KVQ_FORMAT_E5M2_TENSOR, KVQ_FORMAT_E5M2_TENSOR, 8, 8, KVQ_ROT_NONE, KVQ_ROT_NONE, 1.0f },
        { "fp8-e4m3-per-token-head", KVQ_FORMAT_E4M3, KVQ_FORMAT_E4M3, 8, 8, KVQ_ROT_NONE, KVQ_ROT_NONE, 0.0f },
        { "int8-per-token-head", KVQ_FORMAT_INT, KVQ_FORMAT_INT, 8, 8, KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD, 0.0f },
        { "int4-per-token-head", KVQ_FORMAT_INT, KVQ_FORMAT_INT, 4, 4, KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD, 0.0f },
        { "nvfp4", KVQ_FORMAT_NVFP4, KVQ_FORMAT_NVFP4, 4, 4, KVQ_ROT_NONE, KVQ_ROT_NONE, 0.0f },
        { "nvfp4-4over6", KVQ_FORMAT_NVFP4_4OVER6, KVQ_FORMAT_NVFP4_4OVER6, 4, 4, KVQ_ROT_NONE, KVQ_ROT_NONE, 0.0f },
        { "turboquant-k8v4", KVQ_FORMAT_E4M3_TENSOR, KVQ_FORMAT_INT, 8, 4, KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE, 1.0f },
        { "turboquant-4bit-nc", KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_INT, 4, 4, KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE, 0.0f },
        { "turboquant-k3v4-nc", KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_INT, 3, 4, KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE, 0.0f },
        { "turboquant-3bit-nc", KVQ_FORMAT_LLOYD_MAX_NC, KVQ_FORMAT_INT, 3, 3, KVQ_ROT_HADAMARD_SIGNS, KVQ_ROT_NONE, 0.0f },
        { "q8_0", KVQ_FORMAT_Q8_0, KVQ_FORMAT_Q8_0, 8, 8, KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD, 0.0f },
        { "q4_0", KVQ_FORMAT_Q4_0, KVQ_FORMAT_Q4_0, 4, 4, KVQ_ROT_HADAMARD, KVQ_ROT_HADAMARD, 0.0f },
    };
    size_t i;
    kvq_config c;
    if (!cfg || !name) return KVQ__NO(KVQ_ERR_NULL);
    for (i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) break;
    if (i == sizeof presets / sizeof presets[0])
        return kvq__refuse(KVQ_ERR_CONFIG, "kvq_config_engine: no format named \"%s\" "
                           "(the names are listed above kvq_config_engine)", name);
    c = kvq__config_base(head_dim);
    c.policy = KVQ_POLICY_CUSTOM;
    c.key_schedule = c.value_schedule = KVQ_SCHED_SLIDE;
    c.residual = 0;
    c.key_axis = c.value_axis = KVQ_PER_TOKEN;
    c.key_format = presets[i].kf;
    c.value_format = presets[i].vf;
    c.key_bits = presets[i].kb;
    c.value_bits = presets[i].vb;
    c.group = kvq_format_group(c.key_format) ? kvq_format_group(c.key_format) : head_dim;
    c.value_group = kvq_format_group(c.value_format) ? kvq_format_group(c.value_format) : head_dim;
    c.key_rotation = presets[i].rot_k;
    c.value_rotation = presets[i].rot_v;
    c.rotation_seed = presets[i].rot_k == KVQ_ROT_HADAMARD_SIGNS ? 0x7475726271ull : 0;  /* "turbq" */
    c.key_scale = kvq__format_tensor(c.key_format) ? presets[i].scale : 0.0f;
    c.value_scale = kvq__format_tensor(c.value_format) ? presets[i].scale : 0.0f;
    *cfg = c;
    return KVQ_OK;
}

KVQ_API kvq_config kvq_config_logquant(size_t head_dim, int bits, size_t W)
{
    kvq_config c = kvq__config_base(head_dim);
    c.policy = KVQ_POLICY_LOGQUANT;
    c.key_bits = c.value_bits = bits;
    c.group = 64;
    c.lq_window = W;
    c.residual = 3 * W;          /* the full-precision budget, for reference */
    c.key_schedule = c.value_schedule = KVQ_SCHED_POLICY;
    return c;
}

/* Schedules as the policy defines them (CUSTOM takes the config's).        */
static void kvq__policy_schedules(const kvq_config *c, kvq_schedule *ks,
                                  kvq_schedule *vs)
{
    switch (c->policy) {
    case KVQ_POLICY_FULL: *ks = *vs = KVQ_SCHED_NONE; break;
    case KVQ_POLICY_KIVI: *ks = KVQ_SCHED_FLUSH; *vs = KVQ_SCHED_SLIDE; break;
    case KVQ_POLICY_HF:   *ks = *vs = KVQ_SCHED_FLUSH; break;
    case KVQ_POLICY_OTT:
    case KVQ_POLICY_LOGQUANT: *ks = *vs = KVQ_SCHED_POLICY; break;
    default:              *ks = c->key_schedule; *vs = c->value_schedule; break;
    }
}

static kvq_status kvq__validate_side(const kvq_config *c, const char *name,
                                     int bits, kvq_axis axis, kvq_schedule sch,
                                     size_t G, kvq_format f, float scale)
{
    if (sch == KVQ_SCHED_NONE) return KVQ_OK;
    if (sch != KVQ_SCHED_FLUSH && sch != KVQ_SCHED_SLIDE && sch != KVQ_SCHED_POLICY) {
        kvq__say("%s: unknown schedule %d", name, (int)sch);
        return KVQ_ERR_CONFIG;
    }
    if ((int)f < 0 || f >= KVQ_FORMAT_COUNT) {
        kvq__say("%s: unknown format %d", name, (int)f);
        return KVQ_ERR_CONFIG;
    }
    if (f != KVQ_FORMAT_INT && c->policy == KVQ_POLICY_HF) {
        kvq__say("%s: HF's cache stores Sec. 4's codes only (format %s)", name,
                 kvq_format_name(f));
        return KVQ_ERR_CONFIG;
    }
    if (!kvq_format_bits_ok(f, bits)) {
        kvq__say("%s: %d bits is not supported by format %s (int: 1, 2, 3, 4, 8; "
                 "lloyd-max: 2, 3, 4; nvfp4, q4_0: 4; fp8, q8_0: 8)", name, bits,
                 kvq_format_name(f));
        return KVQ_ERR_BITS;
    }
    if (f != KVQ_FORMAT_INT && (G > KVQ__FORMAT_MAX_GROUP ||
                                (kvq_format_group(f) && G != kvq_format_group(f)))) {
        kvq__say("%s: format %s needs G=%zu (G <= %d for the others), not %zu", name,
                 kvq_format_name(f), kvq_format_group(f), KVQ__FORMAT_MAX_GROUP, G);
        return KVQ_ERR_GROUP;
    }
    if (!(scale >= 0.0f && scale <= 3.0e38f)) {
        kvq__say("%s: scale %g must be finite and >= 0 (0: from the first rows)", name,
                 (double)scale);
        return KVQ_ERR_RANGE;
    }
    if (axis != KVQ_PER_TOKEN && axis != KVQ_PER_CHANNEL) {
        kvq__say("%s: unknown axis %d", name, (int)axis);
        return KVQ_ERR_CONFIG;
    }
    if (G == 0 || G > 65536) {
        kvq__say("%s: group G=%zu must be in 1..65536", name, G);
        return KVQ_ERR_SIZE;
    }
    if (axis == KVQ_PER_TOKEN && c->head_dim % G) {
        kvq__say("%s per-token: G=%zu does not divide D=%zu",
                 name, G, c->head_dim);
        return KVQ_ERR_GROUP;
    }
    /* a FLUSH quantizes the whole residual, which must be whole units     */
    if (axis == KVQ_PER_CHANNEL && sch == KVQ_SCHED_FLUSH && c->residual % G) {
        kvq__say("%s per-channel: G=%zu does not divide R=%zu",
                 name, G, c->residual);
        return KVQ_ERR_GROUP;
    }
    return KVQ_OK;
}

/* The OTT/LogQuant scratch beside the stage: a group plus the pool compete */
static size_t kvq__mark_bytes(size_t rows)  { return 2 * (rows + KVQ_OTT_MAX_K); }
static size_t kvq__score_bytes(size_t rows) { return (rows + KVQ_OTT_MAX_K) * sizeof(float); }

static size_t kvq__value_group(const kvq_config *c)
{
    return c->value_group ? c->value_group : c->group;
}

/* OTT and LogQuant parameters (Sec. 7.1, 7.2).                             */
static kvq_status kvq__validate_policy(const kvq_config *c)
{
    if (c->policy == KVQ_POLICY_OTT) {
        if (c->ott_k > KVQ_OTT_MAX_K || (c->ott_k > 0 && c->ott_k >= c->group)) {
            kvq__say("OTT: pool capacity k=%zu must be < G=%zu "
                     "and <= 256", c->ott_k, c->group);
            return KVQ_ERR_CONFIG;
        }
        if (c->ott_k > 0 && (c->ott_aux == 0 || c->ott_aux > 65536)) {
            kvq__say("OTT: auxiliary pool capacity %zu must be in "
                     "1..65536 when k > 0", c->ott_aux);
            return KVQ_ERR_CONFIG;
        }
        if (c->value_axis == KVQ_PER_CHANNEL && c->group % kvq__value_group(c)) {
            /* a round quantizes G tokens of V too: whole value units only  */
            kvq__say("OTT: per-channel value group %zu must divide "
                     "G=%zu", kvq__value_group(c), c->group);
            return KVQ_ERR_GROUP;
        }
        if ((int)c->ott_mean < 0 || c->ott_mean > KVQ_OTT_MEAN_ALL) {
            kvq__say("OTT: unknown mean mode %d", (int)c->ott_mean);
            return KVQ_ERR_CONFIG;
        }
    }
    if (c->policy == KVQ_POLICY_LOGQUANT) {
        if (c->lq_window == 0 || c->lq_window > 65536) {
            kvq__say("LogQuant: window W=%zu must be in 1..65536",
                     c->lq_window);
            return KVQ_ERR_CONFIG;
        }
        if (c->lq_sinks > 65536) {
            kvq__say("LogQuant: %zu sinks is more than 65536",
                     c->lq_sinks);
            return KVQ_ERR_CONFIG;
        }
    }
    return KVQ_OK;
}

/* The config a cache keeps: every field its policy does not read is set to
   zero (value_group is made explicit). A field is validated only where it
   is read, so an unused one may hold anything; zeroing it here is what
   guarantees that no size is ever formed from it.                          */
static kvq_config kvq__config_used(const kvq_config *c)
{
    kvq_config u = *c;
    kvq_schedule ks, vs;
    kvq__policy_schedules(c, &ks, &vs);
    u.key_schedule = ks;
    u.value_schedule = vs;
    u.value_group = vs == KVQ_SCHED_NONE ? 0 : kvq__value_group(c);
    if (ks == KVQ_SCHED_NONE) {         /* as kvq_config_full has them      */
        u.group = 0; u.key_bits = 16; u.key_axis = KVQ_PER_CHANNEL;
    }
    if (vs == KVQ_SCHED_NONE) { u.value_bits = 16; u.value_axis = KVQ_PER_TOKEN; }
    if (ks == KVQ_SCHED_NONE) u.key_format = KVQ_FORMAT_INT;
    if (vs == KVQ_SCHED_NONE) u.value_format = KVQ_FORMAT_INT;
    if (!kvq__format_tensor(u.key_format)) u.key_scale = 0.0f;
    if (!kvq__format_tensor(u.value_format)) u.value_scale = 0.0f;
    if (ks == KVQ_SCHED_NONE && vs == KVQ_SCHED_NONE) u.residual = 0;
    if (c->policy != KVQ_POLICY_HF) u.hf_requantize = 0;
    if (c->policy != KVQ_POLICY_OTT) { u.ott_k = 0; u.ott_mean = KVQ_OTT_MEAN_REST; }
    if (u.ott_k == 0) u.ott_aux = 0;
    if (c->policy != KVQ_POLICY_LOGQUANT) u.lq_window = u.lq_sinks = 0;
    if (c->key_rotation != KVQ_ROT_HADAMARD_SIGNS && c->value_rotation != KVQ_ROT_HADAMARD_SIGNS)
        u.rotation_seed = 0;
    return u;
}

KVQ_API kvq_status kvq_config_validate(const kvq_config *c)
{
    kvq_schedule ks, vs;
    kvq_status st;
    kvq_config u;
    size_t t;
    if (!c) { kvq__say("config is NULL"); return KVQ_ERR_NULL; }
    if ((int)c->policy < 0 || c->policy > KVQ_POLICY_CUSTOM) {
        kvq__say("unknown policy %d", (int)c->policy);
        return KVQ_ERR_CONFIG;
    }
    if (c->head_dim == 0 || c->head_dim > 65536) {
        kvq__say("head_dim D=%zu must be in 1..65536", c->head_dim);
        return KVQ_ERR_SIZE;
    }
    if ((st = kvq__rotation_check(c->key_rotation, c->head_dim, "key_rotation")) != KVQ_OK ||
        (st = kvq__rotation_check(c->value_rotation, c->head_dim, "value_rotation")) != KVQ_OK)
        return st;
    if (c->fp_bits != 16 && c->fp_bits != 32) {
        kvq__say("fp_bits=%d must be 16 or 32", c->fp_bits);
        return KVQ_ERR_CONFIG;
    }
    if (c->zero_mode != KVQ_ZERO_FLOAT && c->zero_mode != KVQ_ZERO_INT) {
        kvq__say("unknown zero mode %d", (int)c->zero_mode);
        return KVQ_ERR_CONFIG;
    }
    kvq__policy_schedules(c, &ks, &vs);
    if (c->policy == KVQ_POLICY_CUSTOM &&
        (ks == KVQ_SCHED_POLICY || vs == KVQ_SCHED_POLICY)) {
        /* POLICY names OTT's and LogQuant's own rules; a CUSTOM side with
           it would grow its window forever and never quantize             */
        kvq__say("CUSTOM: schedule POLICY is reserved for OTT "
                 "and LogQuant (use NONE, FLUSH or SLIDE)");
        return KVQ_ERR_CONFIG;
    }
    if (ks == KVQ_SCHED_NONE && vs == KVQ_SCHED_NONE) return KVQ_OK;
    /* R = 0 (no full-precision window, as the engines keep none) where
       every quantized side slides: each token quantized at its append    */
    if ((c->residual == 0 && !((ks == KVQ_SCHED_NONE || ks == KVQ_SCHED_SLIDE) &&
                               (vs == KVQ_SCHED_NONE || vs == KVQ_SCHED_SLIDE))) ||
        c->residual > 65536) {
        kvq__say("residual R=%zu must be in 1..65536 (0 only where every quantized "
                 "side has schedule SLIDE)", c->residual);
        return KVQ_ERR_SIZE;
    }
    st = kvq__validate_side(c, "keys", c->key_bits, c->key_axis, ks, c->group,
                            c->key_format, c->key_scale);
    if (st != KVQ_OK) return st;
    st = kvq__validate_side(c, "values", c->value_bits, c->value_axis, vs,
                            kvq__value_group(c), c->value_format, c->value_scale);
    if (st != KVQ_OK) return st;
    st = kvq__validate_policy(c);
    if (st != KVQ_OK) return st;
    /* the staging buffer: (R + G + Gv + 3W) rows of D floats at most; only
       fields this policy reads count (each is <= 65536 by now)             */
    u = kvq__config_used(c);
    if (!kvq__mul3(u.residual + u.group + u.value_group + 3 * u.lq_window,
                   u.head_dim, sizeof(float), &t)) {
        kvq__say("staging buffer size overflows size_t");
        return KVQ_ERR_OVERFLOW;
    }
    return KVQ_OK;
}

static void kvq__side_init(kvq_side *s, const kvq_config *c, int bits,
                           kvq_axis axis, kvq_schedule sch, size_t G,
                           kvq_format f, float scale)
{
    unsigned code;
    memset(s, 0, sizeof *s);
    s->schedule = sch;
    s->axis = axis;
    s->bits = bits;
    s->group = G;
    s->format = f;
    s->scale = scale;
    if (sch == KVQ_SCHED_NONE) return;
    s->geom.tokens_per_unit = (axis == KVQ_PER_TOKEN) ? 1 : G;
    s->geom.groups_per_unit = (axis == KVQ_PER_TOKEN) ? c->head_dim / G : c->head_dim;
    s->geom.words_per_group = kvq_packed_words(G, bits);
    s->sz_per_unit = f == KVQ_FORMAT_INT ? s->geom.groups_per_unit :      /* Sec. 4.1 */
                     (s->geom.groups_per_unit * (size_t)kvq_format_param_bits(f) + 31) / 32;
    s->chunk = s->geom.tokens_per_unit;
    for (code = 0; code < (1u << bits); code++) s->value[code] = kvq_format_value(f, bits, code);
}

static kvq_status kvq__rows_reserve(kvq_cache *c, kvq_side *s, int r,
                                    size_t more, int exact);

static int kvq__rotates(const kvq_cache *c)
{
    return c->cfg.key_rotation != KVQ_ROT_NONE || c->cfg.value_rotation != KVQ_ROT_NONE;
}

/* The rotated rows start on a 64-byte boundary: a row's 16-float blocks
   are then whole cache lines, and a 512-bit store or load never splits in
   two (unaligned, the rotated append cost ~10% more on Zen 4). KVQ_MALLOC
   promises less, so the buffer has this many floats more.                 */
#define KVQ__ROT_SLACK 16
static float *kvq__rot_rows(const kvq_cache *c)
{
    return c->rot_rows + (16 - ((uintptr_t)c->rot_rows / sizeof(float)) % 16) % 16;
}

/* The rotation's buffers (Sec. 6.1): the sign vector, and two rows per side
   so that an append never allocates; then *c = *t. Frees *t on failure.   */
static kvq_status kvq__rotation_init(kvq_cache *c, kvq_cache *t)
{
    size_t D = t->cfg.head_dim, j;
    if (kvq__rotates(t)) {
        t->rot_cap = 1;
        t->rot_rows = (float *)KVQ_MALLOC((2 * D + KVQ__ROT_SLACK) * sizeof(float));
        if (t->cfg.key_rotation == KVQ_ROT_HADAMARD_SIGNS ||
            t->cfg.value_rotation == KVQ_ROT_HADAMARD_SIGNS) {
            t->rot_sign = (float *)KVQ_MALLOC(D * sizeof(float));
            if (t->rot_sign)
                for (j = 0; j < D; j++) t->rot_sign[j] = kvq__rot_sign(t->cfg.rotation_seed, j);
            else { KVQ_FREE(t->rot_rows); t->rot_rows = NULL; }
        }
        if (!t->rot_rows) {
            kvq_cache_free(t);
            kvq__say("kvq_cache_init: cannot allocate the rotation's rows");
            return KVQ_ERR_NOMEM;
        }
    }
    *c = *t;
    return KVQ_OK;
}

/* The sign vector side s (0 = K, 1 = V) rotates with, or NULL.             */
static const float *kvq__side_sign(const kvq_cache *c, int s)
{
    return (s ? c->cfg.value_rotation : c->cfg.key_rotation) == KVQ_ROT_HADAMARD_SIGNS
           ? c->rot_sign : NULL;
}

KVQ_API kvq_status kvq_cache_init(kvq_cache *c, const kvq_config *cfg)
{
    kvq_cache t;
    kvq_schedule ks, vs;
    kvq_status st;
    if (!c || !cfg) return KVQ__NO(KVQ_ERR_NULL);
    memset(&t, 0, sizeof t);
    st = kvq_config_validate(cfg);
    if (st != KVQ_OK) return st;
    t.cfg = kvq__config_used(cfg);      /* from here on, only t.cfg is read */
    cfg = &t.cfg;
    ks = cfg->key_schedule;
    vs = cfg->value_schedule;
    kvq__side_init(&t.k, cfg, cfg->key_bits, cfg->key_axis, ks, cfg->group,
                   cfg->key_format, cfg->key_scale);
    kvq__side_init(&t.v, cfg, cfg->value_bits, cfg->value_axis, vs,
                   cfg->value_group, cfg->value_format, cfg->value_scale);
    t.ott_tracing = cfg->policy == KVQ_POLICY_OTT && cfg->ott_k > 0;
    if (ks != KVQ_SCHED_NONE || vs != KVQ_SCHED_NONE) {
        /* a flush quantizes up to R rows, an OTT round G, a LogQuant drop W;
           requantization works one unit at a time. Every term is <= 65536. */
        size_t rows = cfg->residual, i;
        if (cfg->group > rows) rows = cfg->group;
        if (cfg->value_group > rows) rows = cfg->value_group;
        if (cfg->lq_window > rows) rows = cfg->lq_window;
        t.stage_rows = rows;
        t.stage = (float *)KVQ_MALLOC(rows * cfg->head_dim * sizeof(float));
        t.mark = (unsigned char *)KVQ_MALLOC(kvq__mark_bytes(rows));
        t.score = (float *)KVQ_MALLOC(kvq__score_bytes(rows));
        /* fixed-size regions are allocated once, here, never on append     */
        for (i = 0; i < 2 && t.stage && t.mark && t.score; i++) {
            kvq_side *sd = i ? &t.v : &t.k;
            int ott = cfg->policy == KVQ_POLICY_OTT, lq = cfg->policy == KVQ_POLICY_LOGQUANT;
            if (kvq__rows_reserve(&t, sd, KVQ_ROWS_OUTLIER, ott ? cfg->ott_k : 0, 1) ||
                kvq__rows_reserve(&t, sd, KVQ_ROWS_AUX, ott ? cfg->ott_aux : 0, 1) ||
                kvq__rows_reserve(&t, sd, KVQ_ROWS_STAGE, lq ? sd->group + cfg->lq_window : 0, 1) ||
                kvq__rows_reserve(&t, sd, KVQ_ROWS_SINK, lq ? cfg->lq_sinks : 0, 1))
                break;
            if (i == 1) return kvq__rotation_init(c, &t);
        }
        kvq_cache_free(&t);
        kvq__say("kvq_cache_init: cannot allocate the cache's fixed buffers");
        return KVQ_ERR_NOMEM;
    }
    return kvq__rotation_init(c, &t);
}

static void kvq__side_free(kvq_side *s)
{
    int r;
    KVQ_FREE(s->words);
    KVQ_FREE(s->sz);
    KVQ_FREE(s->qpos);
    KVQ_FREE(s->loc);
    for (r = 0; r < KVQ_ROW_REGIONS; r++) {
        KVQ_FREE(s->rows[r].data);
        KVQ_FREE(s->rows[r].pos);
    }
    memset(s, 0, sizeof *s);
}

KVQ_API void kvq_cache_free(kvq_cache *c)
{
    if (!c) return;
    kvq__side_free(&c->k);
    kvq__side_free(&c->v);
    KVQ_FREE(c->rot_sign);
    KVQ_FREE(c->rot_rows);
    KVQ_FREE(c->stage);
    KVQ_FREE(c->mark);
    KVQ_FREE(c->score);
    memset(c, 0, sizeof *c);
}

/* The reason of a failing call on a cache or a pool, into kvq_why().      */
#define KVQ__FAIL_BODY                                                       \
    va_list ap;                                                              \
    va_start(ap, fmt);                                                       \
    kvq__vsay(fmt, ap);                                                      \
    va_end(ap);                                                              \
    return st

static kvq_status kvq__fail(kvq_cache *c, kvq_status st, const char *fmt, ...)
{
    (void)c;
    KVQ__FAIL_BODY;
}

/* A cache that kvq_cache_init never set up, or that kvq_cache_free zeroed,
   has D = 0: every call that changes a cache refuses it.                  */
static kvq_status kvq__live(kvq_cache *c, const char *fn)
{
    if (c->cfg.head_dim == 0)
        return kvq__fail(c, KVQ_ERR_STATE, "%s: the cache is not initialized "
                         "(or was freed)", fn);
    return KVQ_OK;
}

static kvq_status kvq__check_rows_input(kvq_cache *c, const float *X, size_t n,
                                        const char *name)
{
    size_t i;
    const float amax = kvq__absmax_or_nonfinite(X, n);    /* 16 lanes a step */
    if (amax >= 0.0f && amax <= KVQ_MAX_ABS_INPUT) return KVQ_OK;
    for (i = 0; i < n; i++) {                   /* which element, and why */
        float x = X[i];
        if (!kvq__finite(x))
            return kvq__fail(c, KVQ_ERR_NONFINITE, "%s element %zu is %s", name, i,
                             x != x ? "NaN" : "Inf");
        if (fabsf(x) > KVQ_MAX_ABS_INPUT)
            return kvq__fail(c, KVQ_ERR_RANGE, "%s element %zu = %g exceeds "
                             "KVQ_MAX_ABS_INPUT (%g)", name, i, (double)x,
                             (double)KVQ_MAX_ABS_INPUT);
    }
    return KVQ_OK;
}

KVQ_API kvq_status kvq_cache_reserve(kvq_cache *c, size_t n_tokens)
{
    if (!c) return KVQ__NO(KVQ_ERR_NULL);
    if (kvq__live(c, "reserve")) return KVQ_ERR_STATE;
    if (n_tokens == 0) return kvq__fail(c, KVQ_ERR_SIZE, "reserve of 0 tokens");
    return kvq__reserve_append(c, n_tokens, 1);
}

/* Rotates the caller's K, V (T <= rot_cap tokens: an append's one) into
   rot_rows and points *K, *V there, for each side that rotates. A rotated
   value beyond KVQ_MAX_ABS_INPUT is refused; nothing stored changes.      */
static kvq_status kvq__rotate_inputs(kvq_cache *c, const float **K, const float **V,
                                     size_t T)
{
    size_t D = c->cfg.head_dim, t, j;
    int s;
    if (!kvq__rotates(c)) return KVQ_OK;
    KVQ_ASSERT(T <= c->rot_cap);
    for (s = 0; s < 2; s++) {
        const float **X = s ? V : K;
        float *Y = kvq__rot_rows(c) + (size_t)s * T * D;
        if ((s ? c->cfg.value_rotation : c->cfg.key_rotation) == KVQ_ROT_NONE) continue;
        float big = 0.0f;
        for (t = 0; t < T; t++) {
            float m = kvq__rotate_into(kvq__side_sign(c, s), D, 0, *X + t * D, Y + t * D);
            big = m > big ? m : big;
        }
        if (big > KVQ_MAX_ABS_INPUT)      /* rare: find it, then say where   */
            for (j = 0; j < T * D; j++)
                if (fabsf(Y[j]) > KVQ_MAX_ABS_INPUT)
                    return kvq__fail(c, KVQ_ERR_RANGE, "rotated %s row %zu: element %zu = %g "
                                     "exceeds KVQ_MAX_ABS_INPUT (%g)", s ? "V" : "K", j / D,
                                     j % D, (double)Y[j], (double)KVQ_MAX_ABS_INPUT);
        *X = Y;
    }
    return KVQ_OK;
}

/* A prefill rotates each row as it stores it (kvq__stored_row), so its
   scratch is rot_rows' one row per side whatever T (a (2, T, D) buffer
   was 40.8 MB at T = 32K, D = 128, kept for the cache's life). First,
   storing nothing, side s's rows X (T, D) are refused if a rotated value
   exceeds KVQ_MAX_ABS_INPUT. Each butterfly stage at most doubles max |x|
   (|fl(a +- b)| <= fl(|a| + |b|), rounding being monotone), so a rotated
   row is within sqrt(D) max |x| (D max |x| scale, exact in double): only
   rows past that bound are rotated here, and rotated again when stored. */
static kvq_status kvq__check_rotated(kvq_cache *c, int s, const float *X, size_t T)
{
    size_t D = c->cfg.head_dim, t, j;
    double scale = (float)(1.0 / sqrt((double)D));
    float *y;
    if ((s ? c->cfg.value_rotation : c->cfg.key_rotation) == KVQ_ROT_NONE) return KVQ_OK;
    y = kvq__rot_rows(c) + (size_t)s * c->rot_cap * D;
    for (t = 0; t < T; t++) {
        const float *x = X + t * D;
        float m = 0.0f;
        for (j = 0; j < D; j++) m = fabsf(x[j]) > m ? fabsf(x[j]) : m;
        if ((double)m * (double)D * scale <= KVQ_MAX_ABS_INPUT) continue;
        if (kvq__rotate_into(kvq__side_sign(c, s), D, 0, x, y) > KVQ_MAX_ABS_INPUT)
            for (j = 0; j < D; j++)
                if (fabsf(y[j]) > KVQ_MAX_ABS_INPUT)
                    return kvq__fail(c, KVQ_ERR_RANGE, "rotated %s row %zu: element %zu = %g "
                                     "exceeds KVQ_MAX_ABS_INPUT (%g)", s ? "V" : "K", t, j,
                                     (double)y[j], (double)KVQ_MAX_ABS_INPUT);
    }
    return KVQ_OK;
}

static const float *kvq__stored_row(kvq_cache *c, int s, const float *x)
{
    size_t D = c->cfg.head_dim;
    float *y;
    if ((s ? c->cfg.value_rotation : c->cfg.key_rotation) == KVQ_ROT_NONE) return x;
    y = kvq__rot_rows(c) + (size_t)s * c->rot_cap * D;
    kvq__rotate_into(kvq__side_sign(c, s), D, 0, x, y);
    return y;
}

KVQ_API kvq_status kvq_cache_prefill(kvq_cache *c, const float *K,
                                     const float *V, size_t T)
{
    size_t D, n, t;
    kvq_status st;
    if (!c) return KVQ__NO(KVQ_ERR_NULL);
    if (!K || !V) return kvq__fail(c, KVQ_ERR_NULL, "prefill: K or V is NULL");
    if (kvq__live(c, "prefill")) return KVQ_ERR_STATE;
    D = c->cfg.head_dim;
    if (T == 0) return kvq__fail(c, KVQ_ERR_SIZE, "prefill of 0 tokens");
    if (!kvq__mul(T, D, &n)) return kvq__fail(c, KVQ_ERR_OVERFLOW, "T*D overflows");
    if (T > KVQ_MAX_POSITIONS - c->n_pos)   /* before reading T rows of input */
        return kvq__fail(c, KVQ_ERR_CAPACITY, "cache holds %zu positions; %zu more "
                         "exceed KVQ_MAX_POSITIONS", c->n_pos, T);
    if ((st = kvq__check_rows_input(c, K, n, "K")) != KVQ_OK) return st;
    if ((st = kvq__check_rows_input(c, V, n, "V")) != KVQ_OK) return st;
    if ((st = kvq__check_rotated(c, 0, K, T)) != KVQ_OK) return st;
    if ((st = kvq__check_rotated(c, 1, V, T)) != KVQ_OK) return st;
    if ((st = kvq__reserve_append(c, T, 0)) != KVQ_OK) return st;
    if (c->cfg.policy == KVQ_POLICY_OTT || c->cfg.policy == KVQ_POLICY_LOGQUANT) {
        /* both are defined token by token: prefill is T steps               */
        for (t = 0; t < T; t++)
            kvq__step(c, kvq__stored_row(c, 0, K + t * D), kvq__stored_row(c, 1, V + t * D),
                      c->n_pos + t);
        c->n_pos += T;
        return KVQ_OK;
    }
    kvq__side_prefill(c, &c->k, K, T, c->n_pos);
    kvq__side_prefill(c, &c->v, V, T, c->n_pos);
    c->n_pos += T;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_cache_append(kvq_cache *c, const float *k, const float *v)
{
    size_t D;
    kvq_status st;
    if (!c) return KVQ__NO(KVQ_ERR_NULL);
    if (!k || !v) return kvq__fail(c, KVQ_ERR_NULL, "append: k or v is NULL");
    if (kvq__live(c, "append")) return KVQ_ERR_STATE;
    D = c->cfg.head_dim;
    if ((st = kvq__check_rows_input(c, k, D, "k")) != KVQ_OK) return st;
    if ((st = kvq__check_rows_input(c, v, D, "v")) != KVQ_OK) return st;
    if ((st = kvq__rotate_inputs(c, &k, &v, 1)) != KVQ_OK) return st;
    if ((st = kvq__reserve_append(c, 1, 0)) != KVQ_OK) return st;
    kvq__step(c, k, v, c->n_pos);
    c->n_pos++;
    return KVQ_OK;
}

/* The row a side holds for a position (it must be present).               */
static void kvq__side_read(const kvq_cache *c, const kvq_side *s, size_t pos,
                           float *out)
{
    uint32_t l = s->loc[pos];
    uint32_t tag = KVQ_LOC_TAG(l);
    size_t idx = KVQ_LOC_INDEX(l);
    if (tag == KVQ_LOC_QUANT) {
        size_t unit = idx / s->geom.tokens_per_unit;
        kvq__side_token(c, s, unit, idx % s->geom.tokens_per_unit, out);
    } else {
        kvq__row_load(c, kvq__row_ptr(c, &s->rows[tag - KVQ_LOC_ROWS0], idx), out);
    }
}

KVQ_API kvq_status kvq_cache_read(const kvq_cache *c, int side, size_t pos,
                                  float *out)
{
    const kvq_side *s;
    if (!c || !out) return KVQ__NO(KVQ_ERR_NULL);
    if (side != 0 && side != 1) return KVQ__NO(KVQ_ERR_SIZE);
    if (pos >= c->n_pos) return KVQ__NO(KVQ_ERR_STATE);
    s = side ? &c->v : &c->k;
    if (KVQ_LOC_TAG(s->loc[pos]) == KVQ_LOC_ABSENT) return KVQ__NO(KVQ_ERR_STATE);
    kvq__side_read(c, s, pos, out);
    if ((side ? c->cfg.value_rotation : c->cfg.key_rotation) != KVQ_ROT_NONE)
        kvq__rotate_into(kvq__side_sign(c, side), c->cfg.head_dim, 1, out, out);  /* caller's basis */
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 8. attention                                                             */
/* ------------------------------------------------------------------------ */

/* n_q query heads share this KV head (GQA; n_q = 1 for multi-head).
   For each query head h:
       s_p = (q_h . k_p) / sqrt(D)       over every present position p
       w   = softmax(s),   out_h = sum_p w_p v_p
   EAGER materializes s (n_pos floats) and can return w per position in probs
   (n_q, n_pos), 0 for absent positions; eviction policies read it.
   ONLINE never holds more than KVQ_TILE scores per head: it walks the
   cache in tiles (of storage, not of positions: Sec. 8.1) with a running
   max m, running sum l and rescaled accumulator (the FlashAttention
   recurrence):
       m' = max(m, max_j s_j),  l' = l e^(m-m') + sum_j e^(s_j-m'),
       acc' = acc e^(m-m') + sum_j e^(s_j-m') v_j,   out = acc / l.

   The algebra that makes dequantization free (the GPU kernel relies on it):
     per-channel keys, unit u (G tokens) with per-channel (a_d, b_d):
       q . k_t = sum_d (q_d a_d) c_td + sum_d q_d b_d
       -> precompute (q_d a_d) and sum_d q_d b_d once per unit, then each
          token costs one dot product with raw codes.
     per-token keys, group g of token t with (a_g, b_g):
       q . k_t = sum_g [ a_g sum_{d in g} q_d c_td + b_g sum_{d in g} q_d ]
       -> the per-group query sums are computed once per query.
     per-token values: sum_t w_t v_td = sum_t (w_t a_tg) c_td + sum_t w_t b_tg.
   Dequantized K or V is never materialized.                                 */
/* Per-query precomputation shared by all positions (Sec. 8's algebra).
   qa:   (D) q_d * a_d for the per-channel key unit in `unit`
   qb:   sum_d q_d b_d for that unit
   qsum: (D/G) per-group sums of q, for per-token keys                      */
typedef struct kvq__qctx {
    const float *q;
    float *qa;
    float *qsum;
    float  qb;
    size_t unit;           /* per-channel unit cached in qa/qb, or (size_t)-1 */
} kvq__qctx;

/* THE SUMMATION ORDER. Attention's sums are not left to the compiler: a
   sum of products runs in 16 LANES, lane j taking terms j, j + 16, j + 32,
   ... in order, each by a multiply-add (kvq__fmadd: fused where KVQ__FMA,
   top of IMPLEMENTATION), and the 16 lanes are then added pairwise (lane
   j += lane j + 8, then + 4, + 2, + 1: kvq__tree16). The order is part of
   the definition: kvq_simd.h holds the 16 lanes in vector registers and
   computes exactly these floats, and kvq_cuda.cu's kernels reproduce the
   codes and come within a stated tolerance of the outputs.               */
static float kvq__fmadd(float a, float x, float acc)      /* acc + a x       */
{
#ifdef KVQ__FMA
    return fmaf(a, x, acc);
#else
    return acc + a * x;
#endif
}

/* lane[0] + ... + lane[15] pairwise (max = 0), or their largest (max = 1);
   lane is overwritten.                                                    */
static float kvq__tree16(float *lane /* (16) */, int max)
{
    size_t i, j;
    for (j = 8; j > 0; j /= 2)
        for (i = 0; i < j; i++)
            lane[i] = max ? (lane[i + j] > lane[i] ? lane[i + j] : lane[i]) : lane[i] + lane[i + j];
    return lane[0];
}

/* a . b in the order above: products i = j (mod 16) into lane j by
   multiply-adds; a tail of n % 16 products into lanes 0.. by a product
   and a sum; then the tree. Every query dot product on the CPU is this.  */
static float kvq__dot(const float *a, const float *b, size_t n)
{
    float lane[16] = { 0 };
    size_t i = 0, j;
    KVQ__FAST(dot(a, b, n));
    for (; i + 16 <= n; i += 16)
        for (j = 0; j < 16; j++) lane[j] = kvq__fmadd(a[i + j], b[i + j], lane[j]);
    for (j = 0; i < n; i++, j++) lane[j] += a[i] * b[i];
    return kvq__tree16(lane, 0);
}

/* The additive term b of x' = c a + b from a group's stored (s, z) as
   floats, as kvq_sz_affine: z itself (float zero), -z s (integer zero).  */
static KVQ__INLINE float kvq__zero_term(float s, float z, kvq_zero_mode mode)
{
    return mode == KVQ_ZERO_INT ? -z * s : z;
}

/* A group's (a, b) from its stored fp16 (s, z), as kvq_sz_affine.         */
static void kvq__affine(kvq_sz sz, kvq_zero_mode mode, float *a, float *b)
{
    float s = kvq__f16_stored(sz.scale), z = kvq__f16_stored(sz.zero);
    *a = s;
    *b = kvq__zero_term(s, z, mode);
}

/* (a, b) of group gi = unit * groups_per_unit + g of a side, any format:
   INT's stored (s, z); else the P-bit parameter g of the unit's packed
   kvq_sz words (Sec. 4.1), or the side's scale.                          */
static void kvq__group_ab(const kvq_cache *c, const kvq_side *s, size_t gi, float *a, float *b)
{
    const size_t gpu = s->geom.groups_per_unit, g = gi % gpu;
    const unsigned P = (unsigned)kvq_format_param_bits(s->format);
    uint32_t word = 0;
    if (s->format == KVQ_FORMAT_INT) { kvq__affine(s->sz[gi], c->cfg.zero_mode, a, b); return; }
    if (P) {
        memcpy(&word, (const char *)(s->sz + gi / gpu * s->sz_per_unit) + g * P / 32 * 4, 4);
        if (P < 32) word = (word >> (g * P % 32)) & ((1u << P) - 1u);
    }
    kvq__format_ab(s->format, word, s->scale, a, b);
}

/* Token t of a side's unit, dequantized (out: D): value(c) a + b.         */
static void kvq__side_token(const kvq_cache *c, const kvq_side *s, size_t unit, size_t t,
                            float *out)
{
    const size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
                 wpg = s->geom.words_per_group;
    const uint32_t *w = s->words + unit * gpu * wpg;
    size_t d, g;
    float a, b;
    for (d = 0; d < D; d++) {
        g = s->axis == KVQ_PER_TOKEN ? d / G : d;
        kvq__group_ab(c, s, unit * gpu + g, &a, &b);
        out[d] = s->value[kvq__get_code(w + g * wpg, s->axis == KVQ_PER_TOKEN ? d % G : t,
                                        s->bits)] * a + b;
    }
}

/* q . k of the per-token key in slot `slot` whose D codes are given as
   values (value(c), Sec. 4.1), group g's (a_g, b_g) (kvq__group_ab) and
   qsum_g = sum of q over group g:
       q . k = sum_g a_g (q_g . c_g) + sum_g b_g qsum_g
   Order: for G a multiple of 16, each group's 16 lanes of q_d c_d (as in
   kvq__dot) are scaled by a_g into one 16-lane total by multiply-adds,
   whose lanes are added once (kvq__tree16); then the b_g qsum_g terms in
   group order. Other G: a_g kvq__dot(q_g, c_g) + b_g qsum_g, group by
   group.                                                                  */
static float kvq__token_key_dot(const kvq_cache *c, size_t slot, const float *q,
                                const float *codes, const float *qsum)
{
    const kvq_side *s = &c->k;
    const size_t D = c->cfg.head_dim, G = s->group, n_groups = D / G, gi0 = slot * n_groups;
    size_t g, i, j;
    float a, b, total = 0.0f;
    if (s->format == KVQ_FORMAT_INT)
        KVQ__FAST(token_key_dot(q, codes, s->sz + gi0, qsum, D, G, c->cfg.zero_mode));
    if (G % 16 == 0) {
        float sum[16] = { 0 };
        for (g = 0; g < n_groups; g++) {
            float part[16] = { 0 };
            for (i = g * G; i < (g + 1) * G; i += 16)
                for (j = 0; j < 16; j++) part[j] = kvq__fmadd(q[i + j], codes[i + j], part[j]);
            kvq__group_ab(c, s, gi0 + g, &a, &b);
            for (j = 0; j < 16; j++) sum[j] = kvq__fmadd(a, part[j], sum[j]);
        }
        total = kvq__tree16(sum, 0);
        for (g = 0; g < n_groups; g++) {
            kvq__group_ab(c, s, gi0 + g, &a, &b);
            total += b * qsum[g];
        }
        return total;
    }
    for (g = 0; g < n_groups; g++) {
        kvq__group_ab(c, s, gi0 + g, &a, &b);
        total += a * kvq__dot(q + g * G, codes + g * G, G) + b * qsum[g];
    }
    return total;
}

/* q . k_p for one present position p (unscaled).                          */
static float kvq__qk(const kvq_cache *c, kvq__qctx *x, size_t p, float *tmp)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, G = s->group, d, g;
    uint32_t l = s->loc[p];
    uint32_t tag = KVQ_LOC_TAG(l);
    size_t idx = KVQ_LOC_INDEX(l);
    if (tag != KVQ_LOC_QUANT) {
        const kvq_rows *rg = &s->rows[tag - KVQ_LOC_ROWS0];
        if (c->cfg.fp_bits == 32)
            return kvq__dot(x->q, (const float *)kvq__row_ptr(c, rg, idx), D);
        kvq__row_load(c, kvq__row_ptr(c, rg, idx), tmp);
        return kvq__dot(x->q, tmp, D);
    } else {
        size_t unit = idx / s->geom.tokens_per_unit, t = idx % s->geom.tokens_per_unit;
        const uint32_t *w = s->words + unit * s->geom.groups_per_unit * s->geom.words_per_group;
        size_t wpg = s->geom.words_per_group;
        float acc = 0.0f, a;
        if (s->axis == KVQ_PER_CHANNEL) {
            if (x->unit != unit) {          /* once per unit: q*a and q.b   */
                for (d = 0; d < D; d++) {
                    kvq__group_ab(c, s, unit * D + d, &a, &tmp[d]);
                    x->qa[d] = x->q[d] * a;
                }
                x->qb = kvq__dot(x->q, tmp, D);
                x->unit = unit;
            }
            for (d = 0; d < D; d++)
                acc += x->qa[d] * s->value[kvq__get_code(w + d * wpg, t, s->bits)];
            return acc + x->qb;
        }
        for (g = 0; g < D / G; g++)         /* per-token key groups         */
            for (d = 0; d < G; d++) tmp[g * G + d] = s->value[kvq__get_code(w + g * wpg, d, s->bits)];
        return kvq__token_key_dot(c, unit, x->q, tmp, x->qsum);
    }
}

/* acc += w * v_p for one present position p.                              */
static void kvq__add_wv(const kvq_cache *c, size_t p, float wgt, float *acc,
                        float *tmp)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, d, g;
    uint32_t l = s->loc[p];
    uint32_t tag = KVQ_LOC_TAG(l);
    size_t idx = KVQ_LOC_INDEX(l);
    if (tag != KVQ_LOC_QUANT) {
        const kvq_rows *rg = &s->rows[tag - KVQ_LOC_ROWS0];
        const float *v = (const float *)kvq__row_ptr(c, rg, idx);
        if (c->cfg.fp_bits != 32) { kvq__row_load(c, v, tmp); v = tmp; }
        for (d = 0; d < D; d++) acc[d] += wgt * v[d];
    } else {
        size_t unit = idx / s->geom.tokens_per_unit, t = idx % s->geom.tokens_per_unit;
        const uint32_t *w = s->words + unit * s->geom.groups_per_unit * s->geom.words_per_group;
        size_t wpg = s->geom.words_per_group;
        float a, b;
        if (s->axis == KVQ_PER_TOKEN) {
            for (g = 0; g < D / G; g++) {   /* (w a) c + (w b) per group    */
                float wa, wb;
                kvq__group_ab(c, s, unit * (D / G) + g, &a, &b);
                wa = wgt * a; wb = wgt * b;
                for (d = 0; d < G; d++)
                    acc[g * G + d] += wa * s->value[kvq__get_code(w + g * wpg, d, s->bits)] + wb;
            }
        } else {
            for (d = 0; d < D; d++) {
                kvq__group_ab(c, s, unit * D + d, &a, &b);
                acc[d] += wgt * (s->value[kvq__get_code(w + d * wpg, t, s->bits)] * a + b);
            }
        }
    }
}

static int kvq__present(const kvq_cache *c, size_t p)
{
    return KVQ_LOC_TAG(c->k.loc[p]) != KVQ_LOC_ABSENT;
}

KVQ_API size_t kvq_attend_scratch_floats(const kvq_cache *c, kvq_attn_mode mode)
{
    size_t D;
    if (!c) return 0;
    D = c->cfg.head_dim;
    /* EAGER: qa (D) + qsum (D) + tmp row (D) + scores (n_pos).
       ONLINE, per head: q*a or q sums (D) + a tile's scores (KVQ_TILE) +
       m, l, q.b (3); and one shared row (D). Passing n_q times this lets
       one walk of the cache serve all n_q heads.                          */
    /* A cache whose keys rotate also holds each head's rotated query (D). */
    return (mode == KVQ_ATTN_EAGER ? 3 * D + c->n_pos : 2 * D + KVQ_TILE + 3) +
           (c->cfg.key_rotation != KVQ_ROT_NONE ? D : 0);
}

static void kvq__qctx_init(const kvq_cache *c, kvq__qctx *x, const float *q,
                           float *scratch)
{
    size_t D = c->cfg.head_dim, G = c->k.group, g;
    x->q = q;
    x->qa = scratch;
    x->qsum = scratch + D;
    x->qb = 0.0f;
    x->unit = (size_t)-1;
    if (c->k.schedule != KVQ_SCHED_NONE && c->k.axis == KVQ_PER_TOKEN)
        for (g = 0; g < D / G; g++) {
            size_t d;
            x->qsum[g] = 0.0f;
            for (d = 0; d < G; d++) x->qsum[g] += q[g * G + d];
        }
}

typedef char kvq__check_five_row_regions[(KVQ_ROW_REGIONS == 5) ? 1 : -1];

/* 1 if some entry of map (n) of side s points outside the side's regions
   (an absent entry is inside). Branch-free over 32-bit lanes, so that the
   compiler vectorizes it: about as cheap as reading the map once.         */
/* How many of the map's first entries a vector check took (kvq_simd.h:
   8 a step, each tag's bounds found by a permute); here none.           */
static size_t kvq__map_lanes(const uint32_t *map, size_t n, const uint32_t *off,
                             const uint32_t *len, uint32_t *bad)
{
    KVQ__FAST(map_lanes(map, n, off, len, bad));
    (void)map; (void)n; (void)off; (void)len; (void)bad;
    return 0;
}
static unsigned kvq__map_outside(const kvq_side *s, const uint32_t *map, size_t n)
{
    const kvq_rows *r = s->rows;
    uint32_t slots = (uint32_t)(s->n_units * s->geom.tokens_per_unit),
             o0 = (uint32_t)r[0].off, n0 = (uint32_t)r[0].n, o1 = (uint32_t)r[1].off,
             n1 = (uint32_t)r[1].n, o2 = (uint32_t)r[2].off, n2 = (uint32_t)r[2].n,
             o3 = (uint32_t)r[3].off, n3 = (uint32_t)r[3].n, o4 = (uint32_t)r[4].off,
             n4 = (uint32_t)r[4].n, bad = 0;
    /* the same test by tag: index i of tag t lies in [off[t], off[t] +
       len[t]); an unused tag has len 0, ABSENT takes any index            */
    uint32_t off[16] = { 0 }, len[16] = { 0 };
    size_t p;
    int t;
    len[KVQ_LOC_ABSENT] = 0xFFFFFFFFu;
    len[KVQ_LOC_QUANT] = slots;
    for (t = 0; t < KVQ_ROW_REGIONS; t++) {
        off[KVQ_LOC_ROWS0 + t] = (uint32_t)r[t].off;
        len[KVQ_LOC_ROWS0 + t] = (uint32_t)r[t].n;
    }
    for (p = kvq__map_lanes(map, n, off, len, &bad); p < n; p++) {
        uint32_t tag = map[p] >> 28, i = map[p] & 0x0FFFFFFFu;
        uint32_t in = (uint32_t)(tag == KVQ_LOC_ABSENT) | ((tag == KVQ_LOC_QUANT) & (i < slots)) |
                      ((tag == KVQ_LOC_ROWS0 + 0) & (i - o0 < n0)) |
                      ((tag == KVQ_LOC_ROWS0 + 1) & (i - o1 < n1)) |
                      ((tag == KVQ_LOC_ROWS0 + 2) & (i - o2 < n2)) |
                      ((tag == KVQ_LOC_ROWS0 + 3) & (i - o3 < n3)) |
                      ((tag == KVQ_LOC_ROWS0 + 4) & (i - o4 < n4));
        bad |= in ^ 1u;
    }
    return bad;
}

/* The indices the walks take from the maps, checked once per call in
   sequential passes (the full bijection is kvq_cache_check's, and costs a
   lookup per position): every position K's storage names lies in the map
   (the ONLINE walk looks these up in V's map); every entry of both maps
   points inside its side's regions; V holds every position K holds (EAGER
   reads both maps). Then no index formed from a cache changed in memory
   leaves the cache's arrays; what the check cannot see (a stored position
   absent from both maps) the ONLINE walk skips, in kvq__walk_values.     */
static kvq_status kvq__attend_maps(const kvq_cache *c)
{
    const kvq_side *k = &c->k, *v = &c->v;
    size_t i, slots = k->n_units * k->geom.tokens_per_unit;
    uint32_t n_pos = (uint32_t)c->n_pos, bad = 0;    /* <= KVQ_MAX_POSITIONS */
    int r;
    for (i = 0; i < slots; i++) bad |= (uint32_t)(k->qpos[i] >= (int32_t)n_pos);
    for (r = 0; r < KVQ_ROW_REGIONS; r++)
        for (i = k->rows[r].off; i < k->rows[r].off + k->rows[r].n; i++)
            bad |= (uint32_t)((uint32_t)k->rows[r].pos[i] >= n_pos);
    for (i = 0; i < c->n_pos; i++)
        bad |= (uint32_t)(KVQ_LOC_TAG(k->loc[i]) != KVQ_LOC_ABSENT) &
               (uint32_t)(KVQ_LOC_TAG(v->loc[i]) == KVQ_LOC_ABSENT);
    if (bad | kvq__map_outside(k, k->loc, c->n_pos) | kvq__map_outside(v, v->loc, c->n_pos))
        return kvq__refuse(KVQ_ERR_STATE, "kvq_attend: the cache's position maps are "
                           "inconsistent (kvq_cache_check says where)");
    return KVQ_OK;
}

/* ---- 8.1 ONLINE: one walk of the storage, a tile at a time -------------
   EAGER (below) is the reference softmax: every position in position
   order, through the loc maps. ONLINE computes the same softmax in one
   pass, holding at most KVQ_TILE scores per query head: it walks K where
   it is stored, region by region, in TILES of up to KVQ_TILE entries that
   never span two regions or two key units,

       quantized store  per-channel keys: up to 32 tokens of one unit
                        (G < 32: the unit's G tokens); per-token keys:
                        32 consecutive slots
       rows[0..4]       each region's live rows, in storage order

   and for each tile scores every head, applies the online-softmax step
   (the FlashAttention recurrence, m the running max, l the running sum):
       m' = max(m, max_j s_j),  l' = l e^(m-m') + sum_j e^(s_j-m'),
       out' = out e^(m-m') + sum_j e^(s_j-m') v_j,     at the end out / l,
   and adds the value of each position the tile holds, found through V's
   loc map (in KIVI a key may be quantized while its value is still in
   the window). The heads are walked together, as many as the scratch
   holds (kvq_attend_scratch_floats per head), so that with GQA the cache
   is read once per batch of heads.

   Its results differ from EAGER's in the last bits (the tests bound it:
   1e-5 max|out| + 1e-6), because its order is its own. That order is
   defined here, and kvq_simd.h's vector walk computes exactly these
   floats: it is the order that lets 16 codes share one vector, four
   sums run side by side, and two 2-bit codes share one table lookup.
   - Heads go in kernels of NH = 4, 2 or 1 at a time (kvq__head_batch):
     the number of partial sums below depends on NH.
   - Scores. A full-precision row: kvq__dot. A per-token key, 16 | G and at
     most 16 groups: per group, P = 4 / NH (1 for NH = 4) partial sums of
     q_d c_d over the group's channels, channel i of the group to sum
     i mod P by a multiply-add (2-bit codes by channel pairs: t = q_d c_d
     + q_d+1 c_d+1, the product rounded then a multiply-add, pair p to sum
     p mod P by an addition); the partial sums added in order; total =
     sum_g a_g part_g by multiply-adds, then + b_g qsum_g by multiply-adds
     (groups in order); score = total / sqrt(D). Other per-token keys:
     kvq__token_key_dot. A per-channel key (Sec. 8's algebra q.k_t = sum_d
     (q_d a_d) c_td + q.b): in a full tile (32 tokens from a multiple of
     32), with the walk holding one head and 2-bit codes, channel pairs as
     a value tile's pairs below (the channels its entries, q_d a_d their
     weights, two blocks of 16 tokens); else channel d to sum d mod P by
     multiply-adds, P = 2 for NH = 1 and 1 otherwise, the sums added; in a
     partial tile a plain sum over d = 0..D-1; then (sum + q.b) / sqrt(D).
   - The softmax step: entries past the tile or not attended score -inf;
     the tile's max by kvq__tree16; the rescale e^(m-m') by expf, once per
     tile at most; the weights e^(s_j-m') by kvq__exp_walk; their sum by
     kvq__tree16 over lanes j + 16 j' (the two halves added first).
   - Values, per tile and head: first the full-precision rows (16 | D), in
     RUNS of rows that follow each other in storage: per channel a sum of
     w x over the run by multiply-adds from 0, added to out; then the
     entries kvq__walk_add_value takes one at a time (per-channel values, other
     D or G), in tile order; then the per-token quantized slots (16 | G),
     group by group, in runs of consecutive slots, with the weights
     wa_j = w_j a_jg and the zero term wb = sum_j w_j b_jg (kvq__dot over
     the tile's slots, added once per group: to the first run's sums):
       NH = 1 and 2-bit: the group's channels in walks of NB = 8, 4, 2, 1
         blocks of 16 (greedy), P = 4 / NB sums per lane (1 for NB >= 4);
         entries in pairs, t = wa_i c_i + wa_i+1 c_i+1 (the product rounded,
         then a multiply-add; an odd last entry alone), pair p to sum p mod
         P by an addition, the sums added in order, + wb, added to out;
       else P = 4 / NH sums (1 for NH = 4), entry i to sum i mod P by a
         multiply-add, the sums added in order, + wb, added to out.       */
#define KVQ__PAIR_SUMS 4                    /* the most partial sums       */

/* e^x for x <= 0 as the walk computes it (within 2 ulp of e^x on [-87, 0],
   +0 below about -87.7, -inf included). Cody-Waite: x = n ln2 + r with
   n = round(x log2 e) (half to even, by adding and subtracting 1.5 2^23)
   and ln2 in two parts, so r is exact to |r| <= ln2/2; e^r by Cephes
   expf's degree-5 polynomial in multiply-adds; 2^n into the exponent. */
static float kvq__exp_walk(float v)
{
    const float magic = 12582912.0f;
    float x = v > -88.0f ? v : -88.0f, n, r, p;
    n = (x * 1.44269504088896341f + magic) - magic;
    r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = kvq__fmadd(p, r, 1.3981999507e-3f);
    p = kvq__fmadd(p, r, 8.3334519073e-3f);
    p = kvq__fmadd(p, r, 4.1665795894e-2f);
    p = kvq__fmadd(p, r, 1.6666665459e-1f);
    p = kvq__fmadd(p, r, 5.0000001201e-1f);
    p = kvq__fmadd(p, r * r, r + 1.0f);
    return p * kvq__bits_f32((uint32_t)((int32_t)n + 127) << 23);   /* 2^n */
}

/* How many of the `left` heads one kernel takes: 4, 2 or 1.               */
static size_t kvq__head_batch(size_t left) { return left >= 4 ? 4 : left >= 2 ? 2 : 1; }

/* A batch of query heads walking the cache together.                      */
typedef struct kvq__walk {
    size_t n;              /* heads in this batch                            */
    const float *q;        /* (n, D) their queries                           */
    float *out;            /* (n, D) running sum of w v                      */
    float *qa;             /* (n, D) q*a of the current key unit (per-channel
                              keys) or per-group sums of q (per-token keys)  */
    float *sc;             /* (n, KVQ_TILE) the tile's scores, then weights  */
    float *m, *l, *qb;     /* (n) running max, running sum, q.b of the unit  */
    float *row;            /* (D) one row of codes or of values, as floats   */
    int32_t pos[KVQ_TILE]; /* the tile's positions; -1 = not attended        */
    float inv_sqrt_d;
} kvq__walk;

/* n codes of a packed group from code `first`, as their grid's values
   (value: the side's table, Sec. 4.1; INT's value(c) is c itself).       */
static void kvq__codes_f32(const uint32_t *w, size_t first, size_t n, int bits,
                           const float *value, float *out)
{
    size_t i;
    for (i = 0; i < n; i++) out[i] = value[kvq__get_code(w, first + i, bits)];
}

/* out[c] += sum over m entries of w_i x_i[c], c = 0 .. n_ch - 1 (16 | n_ch),
   for the 2-bit codes of entry i at words e + i stride (bytes), code c of
   them, by pairs in 16-lane blocks (the order above: walks of 8, 4, 2, 1
   blocks set each block's number of sums). zb: added to every channel's
   sum, or NULL.                                                          */
static void kvq__pairs_walk(float *out, size_t n_ch, const char *e, size_t stride, size_t m,
                            const float *w, const float *zb, const float *value)
{
    size_t c0, walk_end = 0, P = 1, i, k, l;
    float x0[16], x1[16], acc[KVQ__PAIR_SUMS][16];
    for (c0 = 0; c0 < n_ch; c0 += 16) {
        if (c0 == walk_end) {                           /* the next walk     */
            size_t left = n_ch - c0, nb = left >= 128 ? 8 : left >= 64 ? 4 : left >= 32 ? 2 : 1;
            P = nb >= 4 ? 1 : 4 / nb;
            walk_end = c0 + 16 * nb;
        }
        memset(acc, 0, sizeof acc);
        for (i = 0; i < m; i += 2) {                    /* pair i / 2        */
            float *a = acc[(i / 2) % P];
            kvq__codes_f32((const uint32_t *)(const void *)(e + i * stride), c0, 16, 2, value, x0);
            if (i + 1 < m) {
                kvq__codes_f32((const uint32_t *)(const void *)(e + (i + 1) * stride), c0, 16, 2,
                               value, x1);
                for (l = 0; l < 16; l++) a[l] += kvq__fmadd(w[i + 1], x1[l], w[i] * x0[l]);
            } else {
                for (l = 0; l < 16; l++) a[l] += w[i] * x0[l];
            }
        }
        for (l = 0; l < 16; l++) {
            float sum = acc[0][l];
            for (k = 1; k < P; k++) sum += acc[k][l];
            if (zb) sum += zb[0];
            out[c0 + l] = out[c0 + l] + sum;
        }
    }
}

/* Scores of tokens t0 .. t0+n-1 of per-channel key unit u.               */
static void kvq__walk_scores_channel(const kvq_cache *c, kvq__walk *H, size_t u, size_t t0,
                                     size_t n)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, wpg = s->geom.words_per_group, h, j, d;
    const uint32_t *w = s->words + u * D * wpg;         /* (D, wpg)          */
    const int full = n == KVQ_TILE && t0 % KVQ_TILE == 0;
    float codes[KVQ_TILE];
    for (h = 0; h < H->n; h++)
        for (j = 0; j < n; j++) H->sc[h * KVQ_TILE + j] = 0.0f;
    if (full && s->bits == 2 && H->n == 1) {    /* channels as pair entries  */
        kvq__pairs_walk(H->sc, KVQ_TILE, (const char *)(w + t0 / 16), wpg * sizeof(uint32_t),
                        D, H->qa, NULL, s->value);
    } else if (full) {                          /* channel d to sum d mod P  */
        float sum[4][2][KVQ_TILE];
        size_t h0, nh, P;
        for (h0 = 0; h0 < H->n; h0 += nh) {
            nh = kvq__head_batch(H->n - h0);
            P = nh == 1 ? 2 : 1;
            memset(sum, 0, sizeof sum);
            for (d = 0; d < D; d++) {
                kvq__codes_f32(w + d * wpg, t0, KVQ_TILE, s->bits, s->value, codes);
                for (h = 0; h < nh; h++) {
                    const float qa = H->qa[(h0 + h) * D + d];
                    float *acc = sum[h][d % P];
                    for (j = 0; j < KVQ_TILE; j++) acc[j] = kvq__fmadd(qa, codes[j], acc[j]);
                }
            }
            for (h = 0; h < nh; h++)
                for (j = 0; j < KVQ_TILE; j++)
                    H->sc[(h0 + h) * KVQ_TILE + j] = P == 2 ? sum[h][0][j] + sum[h][1][j] : sum[h][0][j];
        }
    } else {                                            /* a partial tile    */
        for (d = 0; d < D; d++) {
            kvq__codes_f32(w + d * wpg, t0, n, s->bits, s->value, codes);
            for (h = 0; h < H->n; h++)
                for (j = 0; j < n; j++) H->sc[h * KVQ_TILE + j] += H->qa[h * D + d] * codes[j];
        }
    }
    for (h = 0; h < H->n; h++)
        for (j = 0; j < n; j++)
            H->sc[h * KVQ_TILE + j] = (H->sc[h * KVQ_TILE + j] + H->qb[h]) * H->inv_sqrt_d;
}

/* Scores of per-token key slots s0 .. s0+n-1: with 16 | G and at most 16
   groups, 16 slots at a time in the lanes (the order above; every lane
   is computed, the softmax step masks those not attended); else one key
   at a time by kvq__token_key_dot.                                        */
static void kvq__walk_scores_token(const kvq_cache *c, kvq__walk *H, size_t s0, size_t n)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
           wpg = s->geom.words_per_group, h, g, j, i, k, l, b0, nl, h0, nh, P;
    if (G % 16 || gpu > 16) {                           /* one key at a time */
        for (j = 0; j < n; j++) {
            const uint32_t *w = s->words + (s0 + j) * gpu * wpg;
            if (H->pos[j] < 0) continue;
            for (g = 0; g < gpu; g++)
                kvq__codes_f32(w + g * wpg, 0, G, s->bits, s->value, H->row + g * G);
            for (h = 0; h < H->n; h++)
                H->sc[h * KVQ_TILE + j] = kvq__token_key_dot(c, s0 + j, H->q + h * D, H->row,
                                                             H->qa + h * D) * H->inv_sqrt_d;
        }
        return;
    }
    for (b0 = 0; b0 < n; b0 += 16) {
        float a[16][16], b[16][16], x0[16], x1[16];     /* [group][lane]     */
        nl = n - b0 < 16 ? n - b0 : 16;
        for (l = 0; l < nl; l++)
            for (g = 0; g < gpu; g++)
                kvq__group_ab(c, s, (s0 + b0 + l) * gpu + g, &a[g][l], &b[g][l]);
        for (h0 = 0; h0 < H->n; h0 += nh) {
            float total[4][16] = { { 0 } };
            nh = kvq__head_batch(H->n - h0);
            P = nh >= 3 ? 1 : 4 / nh;
            for (g = 0; g < gpu; g++) {
                float part[4][KVQ__PAIR_SUMS][16];
                memset(part, 0, sizeof part);
                for (i = 0; i < G; i += s->bits == 2 ? 2 : 1) {   /* channel i of g */
                    for (l = 0; l < nl; l++) {
                        const uint32_t *w = s->words + ((s0 + b0 + l) * gpu + g) * wpg;
                        x0[l] = s->value[kvq__get_code(w, i, s->bits)];
                        if (s->bits == 2) x1[l] = s->value[kvq__get_code(w, i + 1, 2)];
                    }
                    for (h = 0; h < nh; h++) {
                        const float *q = H->q + (h0 + h) * D + g * G;
                        if (s->bits == 2) {             /* the pair (i, i+1) */
                            float *acc = part[h][(i / 2) % P];
                            for (l = 0; l < nl; l++) acc[l] += kvq__fmadd(q[i + 1], x1[l], q[i] * x0[l]);
                        } else {
                            float *acc = part[h][i % P];
                            for (l = 0; l < nl; l++) acc[l] = kvq__fmadd(q[i], x0[l], acc[l]);
                        }
                    }
                }
                for (h = 0; h < nh; h++)
                    for (l = 0; l < nl; l++) {
                        float p = part[h][0][l];
                        for (k = 1; k < P; k++) p += part[h][k][l];
                        total[h][l] = kvq__fmadd(a[g][l], p, total[h][l]);
                    }
            }
            for (g = 0; g < gpu; g++)
                for (h = 0; h < nh; h++)
                    for (l = 0; l < nl; l++)
                        total[h][l] = kvq__fmadd(b[g][l], H->qa[(h0 + h) * D + g], total[h][l]);
            for (h = 0; h < nh; h++)
                for (l = 0; l < nl; l++)
                    H->sc[(h0 + h) * KVQ_TILE + b0 + l] = total[h][l] * H->inv_sqrt_d;
        }
    }
}

/* One full-precision row as floats: the stored fp32 row itself, or its fp16
   converted into `tmp`.                                                     */
static const float *kvq__row_f32(const kvq_cache *c, const kvq_rows *rg, size_t i, float *tmp)
{
    const void *src = kvq__row_ptr(c, rg, i);
    if (c->cfg.fp_bits == 32) return (const float *)src;
    kvq__row_load(c, src, tmp);
    return tmp;
}

/* out_h += w_h v_p for every head, v_p wherever V keeps position p (j:
   the tile entry, whose weights are sc[h KVQ_TILE + j]).                  */
static void kvq__walk_add_value(const kvq_cache *c, kvq__walk *H, size_t p, size_t j)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, h, d, g;
    uint32_t loc = s->loc[p];
    size_t idx = KVQ_LOC_INDEX(loc);
    const float *v = H->row;
    if (KVQ_LOC_TAG(loc) != KVQ_LOC_QUANT) {
        v = kvq__row_f32(c, &s->rows[KVQ_LOC_TAG(loc) - KVQ_LOC_ROWS0], idx, H->row);
    } else if (s->axis == KVQ_PER_TOKEN) {
        /* slot idx is one token: out += (w a_g) c + w b_g per channel, 16
           codes a step by multiply-adds, the G % 16 left by plain sums     */
        size_t gpu = s->geom.groups_per_unit, wpg = s->geom.words_per_group;
        const uint32_t *w = s->words + idx * gpu * wpg;
        for (g = 0; g < gpu; g++) {
            float a, b;
            kvq__group_ab(c, s, idx * gpu + g, &a, &b);
            for (h = 0; h < H->n; h++) {
                float wt = H->sc[h * KVQ_TILE + j], *o = H->out + h * D + g * G;
                for (d = 0; d < G; d++) {
                    float cd = s->value[kvq__get_code(w + g * wpg, d, s->bits)];
                    if (d < G - G % 16) o[d] = kvq__fmadd(wt * a, cd, o[d]) + wt * b;
                    else o[d] += (wt * a) * cd + wt * b;
                }
            }
        }
        return;
    } else {
        /* per-channel values (not a default anywhere): dequantize the row  */
        size_t tpu = s->geom.tokens_per_unit, unit = idx / tpu, t = idx % tpu,
               wpg = s->geom.words_per_group;
        const uint32_t *w = s->words + unit * D * wpg;
        for (d = 0; d < D; d++) {
            float a, b;
            kvq__group_ab(c, s, unit * D + d, &a, &b);
            H->row[d] = s->value[kvq__get_code(w + d * wpg, t, s->bits)] * a + b;
        }
    }
    for (h = 0; h < H->n; h++) {
        float wt = H->sc[h * KVQ_TILE + j], *o = H->out + h * D;
        for (d = 0; d < D; d++) o[d] += wt * v[d];
    }
}

/* out_h += sum_j w_hj v_pj over the tile's present positions, in the
   order defined above: rows (16 | D) in runs, the one-at-a-time entries,
   then the per-token quantized slots (16 | G) group by group in runs.   */
static void kvq__walk_values(const kvq_cache *c, kvq__walk *H, size_t n)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
           wpg = s->geom.words_per_group, bytes = D * kvq__fp_bytes(c),
           m_rows = 0, m_q = 0, m_1 = 0, j, i, g, h, k, h0, nh, run;
    const char *rows[KVQ_TILE];            /* the full-precision rows        */
    size_t at_r[KVQ_TILE], slot[KVQ_TILE], at_q[KVQ_TILE], at_1[KVQ_TILE];   /* tile
                                              entries of each kind (1: one at a time) */
    const int blocks = s->schedule != KVQ_SCHED_NONE && s->axis == KVQ_PER_TOKEN && G % 16 == 0;
    for (j = 0; j < n; j++) {              /* sort the entries by kind       */
        uint32_t loc, tag;
        if (H->pos[j] < 0) continue;
        loc = s->loc[H->pos[j]];
        tag = KVQ_LOC_TAG(loc);
        if (tag == KVQ_LOC_ABSENT) continue;    /* only in a corrupt cache */
        if (tag != KVQ_LOC_QUANT && D % 16 == 0) {
            rows[m_rows] = (const char *)kvq__row_ptr(c, &s->rows[tag - KVQ_LOC_ROWS0],
                                                      KVQ_LOC_INDEX(loc));
            at_r[m_rows++] = j;
        } else if (tag == KVQ_LOC_QUANT && blocks) {
            slot[m_q] = KVQ_LOC_INDEX(loc);
            at_q[m_q++] = j;
        } else {
            at_1[m_1++] = j;
        }
    }
    /* 1. rows, run by run, 16 channels at a time                           */
    for (j = 0; j < m_rows; j += run) {
        for (run = 1; j + run < m_rows && rows[j + run] == rows[j] + run * bytes; run++) {}
        for (h = 0; h < H->n; h++) {
            float *o = H->out + h * D, acc[16], v[16];
            size_t c0, l;
            for (c0 = 0; c0 < D; c0 += 16) {
                memset(acc, 0, sizeof acc);
                for (i = j; i < j + run; i++) {
                    const float wt = H->sc[h * KVQ_TILE + at_r[i]];
                    if (c->cfg.fp_bits == 32) memcpy(v, (const float *)(const void *)rows[i] + c0, sizeof v);
                    else kvq__f16_row((const kvq_f16 *)(const void *)rows[i] + c0, 16, v);
                    for (l = 0; l < 16; l++) acc[l] = kvq__fmadd(wt, v[l], acc[l]);
                }
                for (l = 0; l < 16; l++) o[c0 + l] = o[c0 + l] + acc[l];
            }
        }
    }
    /* 2. the entries taken one at a time                                  */
    for (j = 0; j < m_1; j++) kvq__walk_add_value(c, H, (size_t)H->pos[at_1[j]], at_1[j]);
    /* 3. the per-token quantized slots: group by group, heads in kernels
          of NH, each run of consecutive slots summed on its own          */
    for (g = 0; g < gpu && m_q > 0; g++) {
        float a[KVQ_TILE], b[KVQ_TILE], wa[KVQ_TILE], wt[KVQ_TILE], wb;
        for (j = 0; j < m_q; j++) kvq__group_ab(c, s, slot[j] * gpu + g, &a[j], &b[j]);
        for (h0 = 0; h0 < H->n; h0 += nh) {
            nh = kvq__head_batch(H->n - h0);
            for (h = h0; h < h0 + nh; h++) {
                float *o = H->out + h * D + g * G;
                for (j = 0; j < m_q; j++) {
                    wt[j] = H->sc[h * KVQ_TILE + at_q[j]];
                    wa[j] = wt[j] * a[j];
                }
                wb = kvq__dot(wt, b, m_q);
                for (j = 0; j < m_q; j += run) {
                    const char *e = (const char *)(s->words + (slot[j] * gpu + g) * wpg);
                    const size_t stride = gpu * wpg * sizeof(uint32_t);
                    for (run = 1; j + run < m_q && slot[j + run] == slot[j] + run; run++) {}
                    if (s->bits == 2 && nh == 1) {
                        kvq__pairs_walk(o, G, e, stride, run, wa + j, j ? NULL : &wb, s->value);
                        continue;
                    }
                    {                       /* entry i to sum i mod P */
                        const size_t P = nh >= 3 ? 1 : 4 / nh;
                        float acc[KVQ__PAIR_SUMS][16], x[16], sum;
                        size_t c0, l;
                        for (c0 = 0; c0 < G; c0 += 16) {
                            memset(acc, 0, sizeof acc);
                            for (i = 0; i < run; i++) {
                                float *ac = acc[i % P];
                                kvq__codes_f32((const uint32_t *)(const void *)(e + i * stride), c0, 16,
                                               s->bits, s->value, x);
                                for (l = 0; l < 16; l++) ac[l] = kvq__fmadd(wa[j + i], x[l], ac[l]);
                            }
                            for (l = 0; l < 16; l++) {
                                for (sum = acc[0][l], k = 1; k < P; k++) sum += acc[k][l];
                                if (j == 0) sum += wb;
                                o[c0 + l] = o[c0 + l] + sum;
                            }
                        }
                    }
                }
            }
        }
    }
}

/* The online-softmax step for a scored tile of n entries, then its values. */
static void kvq__walk_step(const kvq_cache *c, kvq__walk *H, size_t n)
{
    size_t D = c->cfg.head_dim, h, j, d;
    for (h = 0; h < H->n; h++) {
        float *sc = H->sc + h * KVQ_TILE, *out = H->out + h * D;
        float m = H->m[h], lane[16], tile_max;
        for (j = 0; j < KVQ_TILE; j++)
            if (j >= n || H->pos[j] < 0) sc[j] = -INFINITY;
        for (j = 0; j < 16; j++) lane[j] = sc[j + 16] > sc[j] ? sc[j + 16] : sc[j];
        tile_max = kvq__tree16(lane, 1);
        if (tile_max == -INFINITY) continue;            /* nothing attended  */
        if (tile_max > m) {
            float r = expf(m - tile_max);                 /* e^-inf = 0     */
            for (d = 0; d < D; d++) out[d] *= r;
            H->l[h] *= r;
            m = tile_max;
        }
        for (j = 0; j < KVQ_TILE; j++) sc[j] = kvq__exp_walk(sc[j] - m);
        for (j = 0; j < 16; j++) lane[j] = sc[j] + sc[j + 16];
        H->l[h] += kvq__tree16(lane, 0);
        H->m[h] = m;
    }
    kvq__walk_values(c, H, n);
}

/* One walk of the whole cache for a batch of heads.                       */
static void kvq__walk_cache(const kvq_cache *c, kvq__walk *H)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, h, d, j, u, r;
    KVQ__FAST_VOID_IF(walk_serves(c), walk_cache(c, H));
    for (h = 0; h < H->n; h++) { H->m[h] = -INFINITY; H->l[h] = 0.0f; }
    for (d = 0; d < H->n * D; d++) H->out[d] = 0.0f;
    if (s->schedule != KVQ_SCHED_NONE && s->n_units > 0) {
        size_t G = s->group, tpu = s->geom.tokens_per_unit;
        if (s->axis == KVQ_PER_TOKEN)                   /* per-group q sums  */
            for (h = 0; h < H->n; h++)
                for (u = 0; u < D / G; u++) {
                    float sum = 0.0f;
                    for (d = 0; d < G; d++) sum += H->q[h * D + u * G + d];
                    H->qa[h * D + u] = sum;
                }
        for (u = 0; u < s->n_units; u += s->axis == KVQ_PER_TOKEN ? KVQ_TILE : 1) {
            size_t t0, n_tile = s->axis == KVQ_PER_TOKEN ? KVQ_TILE : tpu;
            if (s->axis == KVQ_PER_CHANNEL) {           /* q*a and q.b, once
                                                           per unit         */
                for (d = 0; d < D; d++) kvq__group_ab(c, s, u * D + d, &H->qa[d], &H->row[d]);
                for (h = H->n; h-- > 0;) {              /* head 0 last: its
                                                           row holds the a's */
                    for (d = 0; d < D; d++) H->qa[h * D + d] = H->q[h * D + d] * H->qa[d];
                    H->qb[h] = kvq__dot(H->q + h * D, H->row, D);
                }
            }
            for (t0 = 0; t0 < n_tile; t0 += KVQ_TILE) {
                size_t n = n_tile - t0 < KVQ_TILE ? n_tile - t0 : KVQ_TILE,
                       slot0 = u * tpu + t0;
                int any = 0;
                if (s->axis == KVQ_PER_TOKEN && u + n > s->n_units) n = s->n_units - u;
                for (j = 0; j < n; j++) any |= (H->pos[j] = s->qpos[slot0 + j]) >= 0;
                if (!any) continue;                     /* placeholders only */
                if (s->axis == KVQ_PER_CHANNEL) kvq__walk_scores_channel(c, H, u, t0, n);
                else kvq__walk_scores_token(c, H, slot0, n);
                kvq__walk_step(c, H, n);
            }
        }
    }
    for (r = 0; r < KVQ_ROW_REGIONS; r++) {
        const kvq_rows *rg = &s->rows[r];
        size_t i0;
        for (i0 = rg->off; i0 < rg->off + rg->n; i0 += KVQ_TILE) {
            size_t n = rg->off + rg->n - i0 < KVQ_TILE ? rg->off + rg->n - i0 : KVQ_TILE;
            for (j = 0; j < n; j++) {
                H->pos[j] = rg->pos[i0 + j];
                for (h = 0; h < H->n; h++)
                    H->sc[h * KVQ_TILE + j] = kvq__dot(H->q + h * D, kvq__row_f32(c, rg, i0 + j, H->row),
                                                       D) * H->inv_sqrt_d;
            }
            kvq__walk_step(c, H, n);
        }
    }
    for (h = 0; h < H->n; h++)
        for (d = 0; d < D; d++) H->out[h * D + d] /= H->l[h];
}

/* kvq_attend's ONLINE mode: the n_q heads in batches that fit the scratch
   (at least one head a batch), one walk of the cache per batch.           */
static void kvq__attend_online(const kvq_cache *c, const float *q, size_t n_q, float *out,
                               float *scratch, size_t scratch_floats, float inv_sqrt_d)
{
    size_t D = c->cfg.head_dim, h;
    size_t per_head = D + KVQ_TILE + 3, batch = (scratch_floats - D) / per_head;
    kvq__walk H;
    if (batch > n_q) batch = n_q;
    for (h = 0; h < n_q; h += batch) {
        H.n = n_q - h < batch ? n_q - h : batch;
        H.q = q + h * D;
        H.out = out + h * D;
        H.row = scratch;
        H.qa = scratch + D;
        H.sc = H.qa + H.n * D;
        H.m = H.sc + H.n * KVQ_TILE;
        H.l = H.m + H.n;
        H.qb = H.l + H.n;
        H.inv_sqrt_d = inv_sqrt_d;
        kvq__walk_cache(c, &H);
    }
}

static void kvq__attend_stored(const kvq_cache *c, const float *q, size_t n_q,
                               float *out, float *probs, kvq_attn_mode mode,
                               float *scratch, size_t scratch_floats);

KVQ_API kvq_status kvq_attend(const kvq_cache *c, const float *q, size_t n_q,
                              float *out, float *probs, kvq_attn_mode mode,
                              float *scratch, size_t scratch_floats)
{
    size_t D, h, p, n_present = 0, d;
    if (!c || !q || !out || !scratch) return KVQ__NO(KVQ_ERR_NULL);
    if (n_q == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (mode != KVQ_ATTN_EAGER && mode != KVQ_ATTN_ONLINE) return KVQ__NO(KVQ_ERR_CONFIG);
    if (probs && mode != KVQ_ATTN_EAGER) return KVQ__NO(KVQ_ERR_CONFIG);  /* wall 1:
                                   the online kernel has no probabilities  */
    if (scratch_floats < kvq_attend_scratch_floats(c, mode)) return KVQ__NO(KVQ_ERR_SIZE);
    D = c->cfg.head_dim;
    {
        size_t nq;
        if (!kvq__mul(n_q, D, &nq)) return KVQ__NO(KVQ_ERR_OVERFLOW);
        if (kvq__check_finite(q, nq) != KVQ_OK) return KVQ__NO(KVQ_ERR_NONFINITE);
        for (d = 0; d < nq; d++)          /* the bound that keeps every score,
                                             and so the output, finite      */
            if (fabsf(q[d]) > KVQ_MAX_ABS_INPUT) return KVQ__NO(KVQ_ERR_RANGE);
        if (probs && !kvq__mul(n_q, c->n_pos, &nq)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    }
    /* Both walks read V (and EAGER K) at indices taken from the position
       maps: a cache made inconsistent in memory is refused here, once per
       call, rather than read out of bounds                                 */
    if (kvq__attend_maps(c) != KVQ_OK) return KVQ_ERR_STATE;
    for (p = 0; p < c->n_pos; p++) n_present += kvq__present(c, p);
    if (n_present == 0) return KVQ__NO(KVQ_ERR_STATE);
    if (c->cfg.key_rotation != KVQ_ROT_NONE) {
        /* keys stored rotated: R q . R k = q . k (Sec. 6.1). As many heads
           at a time as the scratch holds rotated queries and a walk for   */
        size_t per = kvq_attend_scratch_floats(c, mode), m = scratch_floats / per, i;
        const float *sign = kvq__side_sign(c, 0);
        for (h = 0; h < n_q; h += m) {
            size_t nh = n_q - h < m ? n_q - h : m;
            for (i = 0; i < nh; i++)
                kvq__rotate_into(sign, D, 0, q + (h + i) * D, scratch + i * D);
            kvq__attend_stored(c, scratch, nh, out + h * D, probs ? probs + h * c->n_pos : NULL,
                               mode, scratch + nh * D, scratch_floats - nh * D);
        }
    } else {
        kvq__attend_stored(c, q, n_q, out, probs, mode, scratch, scratch_floats);
    }
    if (c->cfg.value_rotation != KVQ_ROT_NONE)   /* out = R (sum w v): back */
        for (h = 0; h < n_q; h++)
            kvq__rotate_into(kvq__side_sign(c, 1), D, 1, out + h * D, out + h * D);
    return KVQ_OK;
}

/* kvq_attend after its checks, on queries in the stored keys' basis.      */
static void kvq__attend_stored(const kvq_cache *c, const float *q, size_t n_q,
                               float *out, float *probs, kvq_attn_mode mode,
                               float *scratch, size_t scratch_floats)
{
    size_t D = c->cfg.head_dim, h, p, d;
    float inv_sqrt_d = 1.0f / sqrtf((float)D);
    if (mode == KVQ_ATTN_ONLINE) {      /* the walk (Sec. 8.1)            */
        kvq__attend_online(c, q, n_q, out, scratch, scratch_floats, inv_sqrt_d);
        return;
    }
    for (h = 0; h < n_q; h++) {
        kvq__qctx x;
        float *tmp = scratch + 2 * D, *sc = scratch + 3 * D, *o = out + h * D;
        kvq__qctx_init(c, &x, q + h * D, scratch);
        for (d = 0; d < D; d++) o[d] = 0.0f;
        {   /* EAGER, the reference: scores for every position in position
               order, then one softmax                                      */
            float mx = -INFINITY, sum = 0.0f;
            for (p = 0; p < c->n_pos; p++) {
                if (!kvq__present(c, p)) continue;
                sc[p] = kvq__qk(c, &x, p, tmp) * inv_sqrt_d;
                if (sc[p] > mx) mx = sc[p];
            }
            for (p = 0; p < c->n_pos; p++)
                if (kvq__present(c, p)) { sc[p] = expf(sc[p] - mx); sum += sc[p]; }
            for (p = 0; p < c->n_pos; p++) {
                float wgt = kvq__present(c, p) ? sc[p] / sum : 0.0f;
                if (probs) probs[h * c->n_pos + p] = wgt;
                if (wgt != 0.0f) kvq__add_wv(c, p, wgt, o, tmp);
            }
        }
    }
}

KVQ_API kvq_status kvq_attend_dense(const float *K, const float *V, size_t T,
                                    size_t D, const float *q, size_t n_q,
                                    float *out, float *probs)
{
    size_t h, t, d, n;
    double *w;
    if (!K || !V || !q || !out) return KVQ__NO(KVQ_ERR_NULL);
    if (T == 0 || D == 0 || n_q == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (!kvq__mul(T, D, &n) || !kvq__mul(n_q, D, &n) || !kvq__mul(T, sizeof(double), &n) ||
        (probs && !kvq__mul(n_q, T, &n)))
        return KVQ__NO(KVQ_ERR_OVERFLOW);
    if (kvq__check_finite(K, T * D) || kvq__check_finite(V, T * D) ||
        kvq__check_finite(q, n_q * D))
        return KVQ__NO(KVQ_ERR_NONFINITE);
    w = (double *)KVQ_MALLOC(T * sizeof(double));
    if (!w) return KVQ__NO(KVQ_ERR_NOMEM);
    for (h = 0; h < n_q; h++) {
        const float *qh = q + h * D;
        double mx = -INFINITY, sum = 0.0, inv = 1.0 / sqrt((double)D);
        for (t = 0; t < T; t++) {
            double s = 0.0;
            for (d = 0; d < D; d++) s += (double)qh[d] * (double)K[t * D + d];
            w[t] = s * inv;
            if (w[t] > mx) mx = w[t];
        }
        for (t = 0; t < T; t++) { w[t] = exp(w[t] - mx); sum += w[t]; }
        for (d = 0; d < D; d++) {
            double o = 0.0;
            for (t = 0; t < T; t++) o += w[t] * (double)V[t * D + d];
            out[h * D + d] = (float)(o / sum);
        }
        if (probs)
            for (t = 0; t < T; t++) probs[h * T + t] = (float)(w[t] / sum);
    }
    KVQ_FREE(w);
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 9. bytes, census, invariants                                             */
/* ------------------------------------------------------------------------ */
KVQ_API kvq_status kvq_cache_bytes(const kvq_cache *c, kvq_bytes *out)
{
    kvq_bytes b;
    const kvq_side *sides[2];
    size_t D, rowb, i;
    int r;
    if (!c || !out) return KVQ__NO(KVQ_ERR_NULL);
    memset(&b, 0, sizeof b);
    D = c->cfg.head_dim;
    rowb = D * kvq__fp_bytes(c);
    sides[0] = &c->k; sides[1] = &c->v;
    for (i = 0; i < 2; i++) {
        const kvq_side *s = sides[i];
        size_t slots = s->n_units * s->geom.tokens_per_unit, live_rows = 0;
        b.codes[i] = s->n_units * s->geom.groups_per_unit * s->geom.words_per_group * 4u;
        b.scale_zero[i] = s->n_units * s->sz_per_unit * sizeof(kvq_sz) +
                          (kvq__format_tensor(s->format) && s->n_units ? sizeof(float) : 0);
        for (r = 0; r < KVQ_ROW_REGIONS; r++) live_rows += s->rows[r].n;
        b.full_precision[i] = live_rows * rowb;
        b.metadata += (slots + live_rows) * sizeof(int32_t)   /* positions  */
                    + c->n_pos * sizeof(uint32_t);             /* loc map    */
        b.allocated += s->cap_units * (s->geom.groups_per_unit * s->geom.words_per_group * 4u +
                                       s->sz_per_unit * sizeof(kvq_sz))
                     + s->cap_units * s->geom.tokens_per_unit * sizeof(int32_t)
                     + c->cap_pos * sizeof(uint32_t);
        for (r = 0; r < KVQ_ROW_REGIONS; r++)
            b.allocated += s->rows[r].cap * (rowb + sizeof(int32_t));
        b.payload += b.codes[i] + b.scale_zero[i] + b.full_precision[i];
    }
    if (c->rot_rows) b.allocated += (2 * c->rot_cap * D + KVQ__ROT_SLACK) * sizeof(float);
    if (c->rot_sign) b.allocated += D * sizeof(float);
    if (c->stage)
        b.allocated += c->stage_rows * D * sizeof(float) +
                       kvq__mark_bytes(c->stage_rows) + kvq__score_bytes(c->stage_rows);
    b.tokens = c->n_pos;
    b.bits_per_element = c->n_pos ? (double)b.payload * 8.0 / (2.0 * (double)c->n_pos * (double)D)
                                  : 0.0;
    *out = b;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_cache_census(const kvq_cache *c, kvq_census *out)
{
    kvq_census z;
    const kvq_side *sides[2];
    size_t i, p;
    if (!c || !out) return KVQ__NO(KVQ_ERR_NULL);
    memset(&z, 0, sizeof z);
    sides[0] = &c->k; sides[1] = &c->v;
    for (i = 0; i < 2; i++) {
        const kvq_side *s = sides[i];
        size_t slot;
        for (p = 0; p < c->n_pos; p++) {
            uint32_t tag = KVQ_LOC_TAG(s->loc[p]);
            if (tag == KVQ_LOC_ABSENT) z.absent[i]++;
            else if (tag == KVQ_LOC_QUANT) z.quantized[i]++;
            else z.rows[i][tag - KVQ_LOC_ROWS0]++;
        }
        for (slot = 0; slot < s->n_units * s->geom.tokens_per_unit; slot++)
            z.placeholders[i] += s->qpos[slot] < 0;
    }
    *out = z;
    return KVQ_OK;
}

/* Each present position's loc points at a slot/row that names it back, and
   every live slot/row is pointed at: loc is a bijection onto the regions. */
static kvq_status kvq__check_side(const kvq_cache *c, const kvq_side *s, const char *nm)
{
    size_t p, slot, i, live = 0, present = 0;
    int r;
    for (p = 0; p < c->n_pos; p++) {
        uint32_t l = s->loc[p], tag = KVQ_LOC_TAG(l);
        size_t idx = KVQ_LOC_INDEX(l);
        if (tag == KVQ_LOC_ABSENT) continue;
        present++;
        if (tag == KVQ_LOC_QUANT) {
            if (idx >= s->n_units * s->geom.tokens_per_unit || s->qpos[idx] != (int32_t)p)
                return kvq__refuse(KVQ_ERR_STATE, "%s: position %zu -> quantized "
                                   "slot %zu does not name it back", nm, p, idx);
        } else {
            const kvq_rows *rg;
            if (tag - KVQ_LOC_ROWS0 >= KVQ_ROW_REGIONS)
                return kvq__refuse(KVQ_ERR_STATE, "%s: position %zu has bad tag %u",
                                   nm, p, (unsigned)tag);
            rg = &s->rows[tag - KVQ_LOC_ROWS0];
            if (idx < rg->off || idx >= rg->off + rg->n || rg->pos[idx] != (int32_t)p)
                return kvq__refuse(KVQ_ERR_STATE, "%s: position %zu -> rows[%u] "
                                   "index %zu does not name it back", nm, p,
                                   (unsigned)(tag - KVQ_LOC_ROWS0), idx);
        }
    }
    for (slot = 0; slot < s->n_units * s->geom.tokens_per_unit; slot++)
        live += s->qpos[slot] >= 0;
    for (r = 0; r < KVQ_ROW_REGIONS; r++)
        for (i = 0; i < s->rows[r].n; i++) {
            int32_t pp = s->rows[r].pos[s->rows[r].off + i];
            if (pp < 0 || (size_t)pp >= c->n_pos)
                return kvq__refuse(KVQ_ERR_STATE, "%s: rows[%d] holds position %d "
                                   "outside 0..%zu", nm, r, (int)pp, c->n_pos);
            live++;
        }
    if (live != present)
        return kvq__refuse(KVQ_ERR_STATE, "%s: %zu live slots but %zu present "
                           "positions: some position is stored twice", nm, live, present);
    return KVQ_OK;
}

/* Both sides' maps: each a bijection onto its regions, and K and V
   present at the same positions.                                          */
static kvq_status kvq__check_maps(const kvq_cache *c)
{
    kvq_status st;
    size_t p;
    if ((st = kvq__check_side(c, &c->k, "K")) != KVQ_OK) return st;
    if ((st = kvq__check_side(c, &c->v, "V")) != KVQ_OK) return st;
    for (p = 0; p < c->n_pos; p++)
        if ((KVQ_LOC_TAG(c->k.loc[p]) == KVQ_LOC_ABSENT) !=
            (KVQ_LOC_TAG(c->v.loc[p]) == KVQ_LOC_ABSENT))
            return kvq__refuse(KVQ_ERR_STATE, "position %zu is present on one side only", p);
    return KVQ_OK;
}

KVQ_API kvq_status kvq_cache_check(kvq_cache *c)
{
    kvq_status st;
    size_t R, nk, nv;
    if (!c) return KVQ__NO(KVQ_ERR_NULL);
    if ((st = kvq__live(c, "kvq_cache_check")) != KVQ_OK) return st;
    if ((st = kvq__check_maps(c)) != KVQ_OK) return st;
    R = c->cfg.residual;
    nk = c->k.rows[0].n;
    nv = c->v.rows[0].n;
    /* window bounds of the schedules and policies (Sec. 7)                */
    if (c->k.schedule == KVQ_SCHED_FLUSH && nk > R)
        return kvq__fail(c, KVQ_ERR_STATE, "K residual %zu exceeds R=%zu", nk, R);
    if (c->v.schedule == KVQ_SCHED_FLUSH && nv > R)
        return kvq__fail(c, KVQ_ERR_STATE, "V residual %zu exceeds R=%zu", nv, R);
    if (c->v.schedule == KVQ_SCHED_SLIDE && c->n_evicted) {
        if (nv >= R + c->v.chunk)           /* eviction only shrinks windows */
            return kvq__fail(c, KVQ_ERR_STATE, "V window %zu >= R + chunk", nv);
    } else if (c->v.schedule == KVQ_SCHED_SLIDE) {
        /* nothing quantized until R + chunk tokens; then R <= n < R + chunk */
        int ok = (c->n_pos < R + c->v.chunk) ? nv == c->n_pos
                                             : (nv >= R && nv < R + c->v.chunk);
        if (!ok)
            return kvq__fail(c, KVQ_ERR_STATE, "V window %zu out of bounds (R=%zu, "
                             "chunk=%zu, %zu tokens)", nv, R, c->v.chunk, c->n_pos);
    }
    if (c->cfg.policy == KVQ_POLICY_OTT) {
        size_t G = c->cfg.group, np = c->k.rows[KVQ_ROWS_OUTLIER].n,
               na = c->k.rows[KVQ_ROWS_AUX].n;
        if (nk != nv || nk >= R + G)
            return kvq__fail(c, KVQ_ERR_STATE, "OTT window K %zu / V %zu not below "
                             "R+G=%zu", nk, nv, R + G);
        if (np > c->cfg.ott_k || na > c->cfg.ott_aux)
            return kvq__fail(c, KVQ_ERR_STATE, "OTT pool %zu > k=%zu or auxiliary "
                             "%zu > %zu", np, c->cfg.ott_k, na, c->cfg.ott_aux);
    }
    if (c->cfg.policy == KVQ_POLICY_LOGQUANT) {
        size_t W = c->cfg.lq_window, sinks = c->cfg.lq_sinks;
        size_t m = c->n_pos > sinks ? c->n_pos - sinks : 0;   /* tokens in A's stream */
        int ok = (m <= 3 * W) ? (nk == m && nv == m) : (nk > 2 * W && nk <= 3 * W && nv == nk);
        if (!ok)
            return kvq__fail(c, KVQ_ERR_STATE, "LogQuant kept set K %zu / V %zu "
                             "outside (2W, 3W] with W=%zu after %zu tokens", nk, nv, W, m);
        if (c->k.rows[KVQ_ROWS_STAGE].n >= c->k.geom.tokens_per_unit ||
            c->v.rows[KVQ_ROWS_STAGE].n >= c->v.geom.tokens_per_unit)
            return kvq__fail(c, KVQ_ERR_STATE, "LogQuant stage holds a whole unit");
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* 11. eviction, paged blocks, compaction                                   */
/* ------------------------------------------------------------------------ */

/* Token eviction: StreamingLLM (Xiao et al., ICLR 2024, arXiv:2309.17453),
   H2O (Zhang et al., NeurIPS 2023, arXiv:2306.14048) and SnapKV (Li et al.,
   NeurIPS 2024, arXiv:2404.14469), and the two walls between them and a
   paged serving engine. kvq splits the mechanism in three, so every part composes with
   every quantization policy above:

     policy   -> keep mask      kvq_evict_streaming / _h2o / _snapkv: pure
                                functions of a presence mask and a score
                                vector. They decide; they move nothing.
     cache    -> dead slots     kvq_cache_evict(c, keep): evicted positions
                                become absent on both sides. Full-precision
                                rows leave their region at once; quantized
                                slots stay behind as dead placeholders
                                (qpos = -1), exactly like a paged engine's
                                dead slots: no memory comes back yet.
     compact  -> memory back    kvq_cache_compact: order-preserving repack
                                of the quantized store, with metrics.

   WALL 1: a policy that scores by attention (H2O, SnapKV) needs
   probabilities, which only the EAGER path of kvq_attend returns (probs);
   the ONLINE path, like FlashAttention, never holds more than KVQ_TILE
   scores per query and cannot feed them.

   QUANTIZED TOKENS UNDER COMPACTION (no paper treats this; our choice):
     per-token units (values; HF keys): one token = one unit with its own
       scales/zeros, so a survivor moves bit-exactly: words + sz + qpos.
     per-channel units (KIVI keys): G tokens share each channel's (s, z).
       A survivor cannot leave its group without re-quantization, which
       would add error on top of the first quantization. kvq compacts at
       GROUP granularity: a unit is removed only when all G of its tokens
       are dead; a partly dead unit stays, dead slots pinned. Zero extra
       error, at the price of pinned slots (reported as pinned_slots).
       examples/06_eviction.c measures what the other choice (re-quantizing
       survivors into new groups) would cost in error.

   MEMORY UNDER EVICTION: positions are indices, so the loc map keeps 4
   bytes per side for every position ever appended, evicted ones
   included; it is the one structure that grows with the stream when
   eviction + compaction hold everything else flat (tests/test_soak.c:
   7.6 MiB of loc map after 1,000,000 tokens with 512 kept). Renumbering
   positions would remove it; kvq does not do that.

   The block view: the quantized store is an array of slots (unit-major,
   tokens_per_unit slots per unit). Seen as blocks of `block_tokens` slots,
   a per-channel unit with block_tokens | G covers G / block_tokens whole
   blocks, so a freed unit frees whole blocks. Compaction stats count
   blocks in that view; kvq_pages below is the real block allocator.     */
/* A float's bits mapped so that unsigned order is numeric order (-0 == +0). */
static uint32_t kvq__order_key(float f)
{
    uint32_t u = kvq__f32_bits(f + 0.0f);    /* -0 + 0 = +0: a tie with +0  */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The selection every scoring policy ends with. flags (n): KVQ__CAND marks a
   candidate, KVQ__KEEP a position already kept. The `count` candidates with
   the largest score become KVQ__KEEP, ties to the lower position. No sort
   and no scratch: the count-th largest key is found bit by bit (32 counting
   passes over n), everything above it is kept, then ties in position order. */
#define KVQ__KEEP 1u
#define KVQ__CAND 2u
static void kvq__keep_top(const float *score, uint8_t *flags, size_t n, size_t count)
{
    uint32_t t = 0;
    size_t p, n_cand = 0, taken = 0;
    int b;
    for (p = 0; p < n; p++) n_cand += flags[p] == KVQ__CAND;
    if (count > n_cand) count = n_cand;
    if (count == 0) return;
    for (b = 31; b >= 0; b--) {
        uint32_t trial = t | (1u << b);
        size_t m = 0;
        for (p = 0; p < n; p++)
            m += flags[p] == KVQ__CAND && kvq__order_key(score[p]) >= trial;
        if (m >= count) t = trial;
    }
    for (p = 0; p < n; p++)
        if (flags[p] == KVQ__CAND && kvq__order_key(score[p]) > t) { flags[p] = KVQ__KEEP; taken++; }
    for (p = 0; p < n && taken < count; p++)
        if (flags[p] == KVQ__CAND && kvq__order_key(score[p]) == t) { flags[p] = KVQ__KEEP; taken++; }
}

/* flags (n) from a presence mask: every present position a candidate.      */
static void kvq__flags_init(uint8_t *flags, const uint8_t *present, size_t n)
{
    size_t p;
    for (p = 0; p < n; p++) flags[p] = (!present || present[p]) ? KVQ__CAND : 0;
}

/* The first `sinks` and the last `recent` candidates become kept.          */
static void kvq__keep_ends(uint8_t *flags, size_t n, size_t sinks, size_t recent)
{
    size_t p, seen;
    for (p = 0, seen = 0; p < n && seen < sinks; p++)
        if (flags[p] == KVQ__CAND) { flags[p] = KVQ__KEEP; seen++; }
    for (p = n, seen = 0; p > 0 && seen < recent; p--)
        if (flags[p - 1] == KVQ__CAND) { flags[p - 1] = KVQ__KEEP; seen++; }
}

/* flags -> the 0/1 keep mask the API returns.                              */
static void kvq__flags_finish(uint8_t *flags, size_t n)
{
    size_t p;
    for (p = 0; p < n; p++) flags[p] = flags[p] == KVQ__KEEP;
}

static int kvq__any_nan(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) if (x[i] != x[i]) return 1;
    return 0;
}

/* StreamingLLM (Xiao et al., ICLR 2024): sinks plus the most recent.       */
KVQ_API kvq_status kvq_evict_streaming(const uint8_t *present, size_t n,
                                       size_t sinks, size_t recent, uint8_t *keep)
{
    if (!keep) return KVQ__NO(KVQ_ERR_NULL);
    if (n == 0) return KVQ__NO(KVQ_ERR_SIZE);
    kvq__flags_init(keep, present, n);
    kvq__keep_ends(keep, n, sinks, recent);
    kvq__flags_finish(keep, n);
    return KVQ_OK;
}

/* H2O (Zhang et al., NeurIPS 2023): cumulative attention, plus recent.    */
KVQ_API kvq_status kvq_h2o_accumulate(float *score, const float *probs,
                                      size_t n_q, size_t n)
{
    size_t h, p, total;
    if (!score || !probs) return KVQ__NO(KVQ_ERR_NULL);
    if (n == 0 || n_q == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (!kvq__mul(n_q, n, &total)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    for (p = 0; p < total; p++)       /* probabilities: finite, >= 0        */
        if (!kvq__finite(probs[p]) || probs[p] < 0.0f) return KVQ__NO(KVQ_ERR_NONFINITE);
    for (h = 0; h < n_q; h++)
        for (p = 0; p < n; p++) score[p] += probs[h * n + p];
    return KVQ_OK;
}

KVQ_API kvq_status kvq_evict_h2o(const float *score, const uint8_t *present,
                                 size_t n, size_t heavy, size_t recent,
                                 uint8_t *keep)
{
    if (!score || !present || !keep) return KVQ__NO(KVQ_ERR_NULL);
    if (n == 0) return KVQ__NO(KVQ_ERR_SIZE);
    if (kvq__any_nan(score, n)) return KVQ__NO(KVQ_ERR_NONFINITE);
    kvq__flags_init(keep, present, n);
    kvq__keep_ends(keep, n, 0, recent);       /* the recent window first     */
    kvq__keep_top(score, keep, n, heavy);     /* heavy hitters among the rest */
    kvq__flags_finish(keep, n);
    return KVQ_OK;
}

/* SnapKV (Li et al., NeurIPS 2024): an observation window's snapshot.
   The defaults of its reference code are an observation window of 32
   queries, kernel 5 and average pooling.                                   */
KVQ_API kvq_status kvq_snapkv_scores(const float *probs, size_t n_obs, size_t n,
                                     size_t kernel, kvq_pooling pooling,
                                     float *score)
{
    size_t i, p, total, prefix, half;
    if (!probs || !score) return KVQ__NO(KVQ_ERR_NULL);
    if (n == 0 || n_obs == 0 || n_obs > n || kernel == 0 || kernel % 2 == 0 ||
        kernel > 255)                      /* odd, and half fits the ring    */
        return KVQ__NO(KVQ_ERR_SIZE);
    if (pooling != KVQ_POOL_AVG && pooling != KVQ_POOL_MAX) return KVQ__NO(KVQ_ERR_CONFIG);
    if (!kvq__mul(n_obs, n, &total)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    for (p = 0; p < total; p++)
        if (!kvq__finite(probs[p]) || probs[p] < 0.0f) return KVQ__NO(KVQ_ERR_NONFINITE);
    prefix = n - n_obs;
    half = kernel / 2;
    /* votes first, in score[] itself; the window's slots hold them too     */
    for (p = 0; p < prefix; p++) {
        float v = 0.0f;
        for (i = 0; i < n_obs; i++) v += probs[i * n + p];
        score[p] = v;
    }
    /* pool in place, left to right: the window [p - half, p + half] needs
       votes left of p that were already overwritten, so keep the last
       `half` raw votes in a small ring on the stack (kernel <= 255). Max
       pooling pads with -Inf in PyTorch; votes are >= 0 and the window
       always holds p itself, so zero padding gives the same maximum.     */
    {
        float ring[128];
        for (p = 0; p < prefix; p++) {
            float acc = 0.0f, v;
            size_t j, lo = p >= half ? p - half : 0, hi = p + half;
            for (j = lo; j <= hi; j++) {
                if (j >= prefix) v = 0.0f;                 /* zero padding  */
                else if (j < p) v = ring[j % (half ? half : 1)];
                else v = score[j];
                if (pooling == KVQ_POOL_MAX) { if (v > acc) acc = v; }
                else acc += v;
            }
            if (half) ring[p % half] = score[p];
            score[p] = pooling == KVQ_POOL_MAX ? acc : acc / (float)kernel;
        }
    }
    for (p = prefix; p < n; p++) score[p] = INFINITY;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_evict_snapkv(const float *score, size_t n, size_t n_obs,
                                    size_t capacity, uint8_t *keep)
{
    size_t p;
    if (!score || !keep) return KVQ__NO(KVQ_ERR_NULL);
    if (n == 0 || n_obs == 0 || n_obs > n || capacity < n_obs) return KVQ__NO(KVQ_ERR_SIZE);
    if (kvq__any_nan(score, n - n_obs)) return KVQ__NO(KVQ_ERR_NONFINITE);
    for (p = 0; p < n; p++) keep[p] = p < n - n_obs ? KVQ__CAND : KVQ__KEEP;
    kvq__keep_top(score, keep, n, capacity - n_obs);
    kvq__flags_finish(keep, n);
    return KVQ_OK;
}

/* ---- eviction from a cache --------------------------------------------- */
KVQ_API kvq_status kvq_cache_present(const kvq_cache *c, uint8_t *present, size_t n)
{
    size_t p;
    if (!c || !present) return KVQ__NO(KVQ_ERR_NULL);
    if (n != c->n_pos) return KVQ__NO(KVQ_ERR_SIZE);
    for (p = 0; p < n; p++) present[p] = (uint8_t)kvq__present(c, p);
    return KVQ_OK;
}

/* kvq__rows_remove predicate: the row's position was just made absent.     */
typedef struct kvq__absent_arg { const kvq_side *s; const kvq_rows *rg; } kvq__absent_arg;
static int kvq__drop_absent(size_t o, const void *arg)
{
    const kvq__absent_arg *a = (const kvq__absent_arg *)arg;
    return KVQ_LOC_TAG(a->s->loc[a->rg->pos[a->rg->off + o]]) == KVQ_LOC_ABSENT;
}

KVQ_API kvq_status kvq_cache_evict(kvq_cache *c, const uint8_t *keep, size_t n,
                                   size_t *evicted)
{
    size_t p, count = 0, i;
    int r;
    if (!c) return KVQ__NO(KVQ_ERR_NULL);
    if (!keep) return kvq__fail(c, KVQ_ERR_NULL, "evict: keep is NULL");
    if (kvq__live(c, "evict")) return KVQ_ERR_STATE;
    if (n != c->n_pos)
        return kvq__fail(c, KVQ_ERR_SIZE, "keep mask has %zu entries; the cache "
                         "has %zu positions", n, c->n_pos);
    if (c->cfg.policy == KVQ_POLICY_OTT || c->cfg.policy == KVQ_POLICY_LOGQUANT)
        return kvq__fail(c, KVQ_ERR_CONFIG, "OTT and LogQuant choose their own "
                         "full-precision tokens; eviction is not defined on them");
    /* 1. every evicted position: quantized slot -> dead placeholder, and
          both loc entries -> absent                                        */
    for (p = 0; p < n; p++) {
        if (keep[p] || !kvq__present(c, p)) continue;
        for (i = 0; i < 2; i++) {
            kvq_side *s = i ? &c->v : &c->k;
            if (KVQ_LOC_TAG(s->loc[p]) == KVQ_LOC_QUANT)
                s->qpos[KVQ_LOC_INDEX(s->loc[p])] = -1;
            s->loc[p] = KVQ_LOC_ABSENT;
        }
        count++;
    }
    /* 2. full-precision rows of absent positions leave their regions, the
          others keep their order                                           */
    for (i = 0; i < 2 && count; i++) {
        kvq_side *s = i ? &c->v : &c->k;
        for (r = 0; r < KVQ_ROW_REGIONS; r++) {
            kvq__absent_arg a;
            a.s = s; a.rg = &s->rows[r];
            kvq__rows_remove(c, s, r, kvq__drop_absent, &a);
        }
    }
    c->n_evicted += count;
    if (evicted) *evicted = count;
    return KVQ_OK;
}

/* ---- compaction of the quantized store --------------------------------- */
static size_t kvq__ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

/* Blocks of bt slots in which every existing slot is dead.                 */
static size_t kvq__dead_blocks(const kvq_side *s, size_t bt)
{
    size_t slots = s->n_units * s->geom.tokens_per_unit, b, i, dead = 0;
    for (b = 0; b * bt < slots; b++) {
        int all = 1;
        for (i = b * bt; i < slots && i < (b + 1) * bt && all; i++) all = s->qpos[i] < 0;
        dead += all;
    }
    return dead;
}

/* Order-preserving repack of one side's units: a unit with no live slot is
   dropped, the others slide forward, bit for bit (words, sz, qpos), and
   their positions are re-pointed. Forward sliding reads every unit before
   anything overwrites it (destination <= source): a gather-clone-scatter
   pass.                                                                   */
static void kvq__compact_side(kvq_side *s, kvq_compact_stats *st)
{
    size_t tpu = s->geom.tokens_per_unit, uw = s->geom.groups_per_unit * s->geom.words_per_group;
    size_t spu = s->sz_per_unit, u, j = 0, t;
    for (u = 0; u < s->n_units; u++) {
        size_t live = 0;
        for (t = 0; t < tpu; t++) live += s->qpos[u * tpu + t] >= 0;
        if (live == 0) { st->dead_removed += tpu; continue; }
        st->pinned_slots += tpu - live;
        if (j != u) {
            memcpy(s->words + j * uw, s->words + u * uw, uw * sizeof(uint32_t));
            if (spu) memcpy(s->sz + j * spu, s->sz + u * spu, spu * sizeof(kvq_sz));
            memcpy(s->qpos + j * tpu, s->qpos + u * tpu, tpu * sizeof(int32_t));
            st->slot_copies += tpu;
            for (t = 0; t < tpu; t++) {
                int32_t pos = s->qpos[j * tpu + t];
                if (pos >= 0) s->loc[pos] = (KVQ_LOC_QUANT << 28) | (uint32_t)(j * tpu + t);
            }
        }
        j++;
    }
    s->n_units = j;
}

KVQ_API kvq_status kvq_cache_compact(kvq_cache *c, size_t block_tokens,
                                     kvq_compact_stats *stats)
{
    kvq_compact_stats st;
    size_t i, live = 0, slots = 0, t;
    if (!c) return KVQ__NO(KVQ_ERR_NULL);
    if (kvq__live(c, "compact")) return KVQ_ERR_STATE;
    if (block_tokens == 0)
        return kvq__fail(c, KVQ_ERR_SIZE, "block_tokens must be > 0");
    memset(&st, 0, sizeof st);
    for (i = 0; i < 2; i++) {
        kvq_side *s = i ? &c->v : &c->k;
        st.slots_before[i] = s->n_units * s->geom.tokens_per_unit;
        st.blocks_before += kvq__ceil_div(st.slots_before[i], block_tokens);
        st.blocks_free_without_compaction += kvq__dead_blocks(s, block_tokens);
        kvq__compact_side(s, &st);
        st.slots_after[i] = s->n_units * s->geom.tokens_per_unit;
        st.blocks_after += kvq__ceil_div(st.slots_after[i], block_tokens);
        for (t = 0; t < st.slots_after[i]; t++) live += s->qpos[t] >= 0;
        slots += st.slots_after[i];
    }
    st.blocks_freed = st.blocks_before - st.blocks_after;
    st.occupancy = slots ? (double)live / (double)slots : 0.0;
    if (stats) *stats = st;
    return KVQ_OK;
}

/* ---- the block allocator ----------------------------------------------- */
#define KVQ__NO_BLOCK 0xFFFFFFFFu

static kvq_status kvq__pfail(kvq_pages *P, kvq_status st, const char *fmt, ...)
{
    (void)P;
    KVQ__FAIL_BODY;
}

/* A pool that kvq_pages_init never set up, or that kvq_pages_free zeroed,
   has block_tokens = 0 and no tables: every call on it is refused (STATE),
   never a division by zero or a NULL table read.                           */
static int kvq__pages_live(const kvq_pages *P)
{
    return P->block_tokens != 0 && P->n_blocks != 0 && P->refcount && P->free_list;
}

static kvq_status kvq__pages_dead(kvq_pages *P, const char *fn)
{
    return kvq__pfail(P, KVQ_ERR_STATE, "%s: the page pool is not initialized "
                      "(or was freed)", fn);
}

KVQ_API kvq_status kvq_pages_init(kvq_pages *P, size_t n_blocks,
                                  size_t block_tokens, size_t slot_bytes)
{
    kvq_pages t;
    size_t bytes, ids_bytes, i;
    if (!P) return KVQ__NO(KVQ_ERR_NULL);
    if (n_blocks == 0 || block_tokens == 0 || n_blocks >= KVQ__NO_BLOCK) return KVQ__NO(KVQ_ERR_SIZE);
    /* every size the pool and its sequences will compute, checked once:
       blocks x slots x bytes, and a sequence's per-block position table   */
    if (!kvq__mul(n_blocks, block_tokens, &bytes) || !kvq__mul(bytes, slot_bytes, &bytes) ||
        !kvq__mul(n_blocks, sizeof(uint32_t), &ids_bytes) ||
        !kvq__mul(n_blocks * block_tokens, sizeof(int32_t), &i))
        return KVQ__NO(KVQ_ERR_OVERFLOW);
    memset(&t, 0, sizeof t);
    t.n_blocks = n_blocks; t.block_tokens = block_tokens; t.slot_bytes = slot_bytes;
    t.data = bytes ? (unsigned char *)KVQ_MALLOC(bytes) : NULL;
    t.refcount = (uint32_t *)KVQ_MALLOC(ids_bytes);
    t.free_list = (uint32_t *)KVQ_MALLOC(ids_bytes);
    if ((bytes && !t.data) || !t.refcount || !t.free_list) {
        KVQ_FREE(t.data); KVQ_FREE(t.refcount); KVQ_FREE(t.free_list);
        return KVQ__NO(KVQ_ERR_NOMEM);
    }
    if (bytes) memset(t.data, 0, bytes);
    for (i = 0; i < n_blocks; i++) {
        t.refcount[i] = 0;
        t.free_list[i] = (uint32_t)(n_blocks - 1 - i);  /* pops block 0 first */
    }
    t.n_free = n_blocks;
    *P = t;
    return KVQ_OK;
}

KVQ_API void kvq_pages_free(kvq_pages *P)
{
    if (!P) return;
    KVQ_FREE(P->data); KVQ_FREE(P->refcount); KVQ_FREE(P->free_list);
    memset(P, 0, sizeof *P);
}

KVQ_API void kvq_pseq_init(kvq_pseq *S) { if (S) memset(S, 0, sizeof *S); }

/* One reference to block id goes away; at zero the block is free again.   */
static int kvq__unref(kvq_pages *P, uint32_t id)
{
    KVQ_ASSERT(P->refcount[id] > 0);
    if (--P->refcount[id] > 0) return 0;
    P->free_list[P->n_free++] = id;
    return 1;
}

KVQ_API void kvq_pseq_free(kvq_pages *P, kvq_pseq *S)
{
    size_t b;
    if (!P || !S) return;
    /* a dead pool has no reference counts left to drop: free S's tables    */
    if (kvq__pages_live(P))
        for (b = 0; b < S->n_blocks; b++) kvq__unref(P, S->table[b]);
    KVQ_FREE(S->table); KVQ_FREE(S->alive); KVQ_FREE(S->pos);
    memset(S, 0, sizeof *S);
}

static unsigned char *kvq__slot_ptr(const kvq_pages *P, const kvq_pseq *S, size_t i)
{
    size_t bt = P->block_tokens;
    return P->data ? P->data + ((size_t)S->table[i / bt] * bt + i % bt) * P->slot_bytes : NULL;
}

KVQ_API void *kvq_pseq_slot(const kvq_pages *P, const kvq_pseq *S, size_t i)
{
    if (!P || !S || i >= S->n_slots || !kvq__pages_live(P)) return NULL;
    return kvq__slot_ptr(P, S, i);
}

/* Room in S's tables for `blocks` blocks. On failure S is unchanged.       */
static kvq_status kvq__pseq_reserve(const kvq_pages *P, kvq_pseq *S, size_t blocks)
{
    size_t bt = P->block_tokens, cap, unused, pos_bytes;
    void *p;
    if (blocks <= S->cap_blocks) return KVQ_OK;
    if (!kvq__mul(bt, sizeof(int32_t), &pos_bytes)) return KVQ__NO(KVQ_ERR_OVERFLOW);
    /* the table sets the new capacity (doubling); alive and pos follow it  */
    if (!(p = kvq__grow(S->table, S->cap_blocks, blocks, sizeof(uint32_t), 0, &cap)))
        return KVQ__NO(KVQ_ERR_NOMEM);
    S->table = (uint32_t *)p;                  /* bigger, same contents      */
    if (!(p = kvq__grow(S->alive, S->cap_blocks, cap, bt, 1, &unused))) return KVQ__NO(KVQ_ERR_NOMEM);
    S->alive = (uint8_t *)p;
    if (!(p = kvq__grow(S->pos, S->cap_blocks, cap, pos_bytes, 1, &unused))) return KVQ__NO(KVQ_ERR_NOMEM);
    S->pos = (int32_t *)p;
    S->cap_blocks = cap;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_pseq_append(kvq_pages *P, kvq_pseq *S, int32_t pos,
                                   const void *payload)
{
    size_t bt, i;
    kvq_status st;
    if (!P || !S) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq__pages_live(P)) return kvq__pages_dead(P, "kvq_pseq_append");
    if (pos < 0) return kvq__pfail(P, KVQ_ERR_SIZE, "position %d is negative", (int)pos);
    bt = P->block_tokens;
    i = S->n_slots;
    if (i == S->n_blocks * bt) {                         /* need a new block */
        if (P->n_free == 0)
            return kvq__pfail(P, KVQ_ERR_CAPACITY, "pool of %zu blocks is full", P->n_blocks);
        if ((st = kvq__pseq_reserve(P, S, S->n_blocks + 1)) != KVQ_OK)
            return kvq__pfail(P, st, "cannot grow the block table");
        S->table[S->n_blocks++] = P->free_list[--P->n_free];
        P->refcount[S->table[S->n_blocks - 1]] = 1;
    } else if (P->refcount[S->table[i / bt]] > 1) {      /* copy on write    */
        uint32_t old = S->table[i / bt], fresh;
        if (P->n_free == 0)
            return kvq__pfail(P, KVQ_ERR_CAPACITY, "pool full: cannot copy shared "
                              "block %u before writing", (unsigned)old);
        fresh = P->free_list[--P->n_free];
        P->refcount[fresh] = 1;
        if (P->data)
            memcpy(P->data + (size_t)fresh * bt * P->slot_bytes,
                   P->data + (size_t)old * bt * P->slot_bytes, (i % bt) * P->slot_bytes);
        kvq__unref(P, old);
        S->table[i / bt] = fresh;
    }
    if (P->data) {
        if (payload) memcpy(kvq__slot_ptr(P, S, i), payload, P->slot_bytes);
        else memset(kvq__slot_ptr(P, S, i), 0, P->slot_bytes);
    }
    S->alive[i] = 1;
    S->pos[i] = pos;
    S->n_slots++;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_pseq_fork(kvq_pages *P, kvq_pseq *dst, const kvq_pseq *src)
{
    size_t b;
    kvq_status st;
    if (!P || !dst || !src) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq__pages_live(P)) return kvq__pages_dead(P, "kvq_pseq_fork");
    if (dst == src || dst->n_blocks || dst->n_slots)
        return kvq__pfail(P, KVQ_ERR_STATE, "fork needs an empty destination sequence");
    if ((st = kvq__pseq_reserve(P, dst, src->n_blocks)) != KVQ_OK)
        return kvq__pfail(P, st, "cannot allocate the block table");
    for (b = 0; b < src->n_blocks; b++) {
        dst->table[b] = src->table[b];
        P->refcount[src->table[b]]++;
    }
    if (src->n_slots) {                /* an empty source shares nothing */
        memcpy(dst->alive, src->alive, src->n_slots);
        memcpy(dst->pos, src->pos, src->n_slots * sizeof(int32_t));
    }
    dst->n_blocks = src->n_blocks;
    dst->n_slots = src->n_slots;
    return KVQ_OK;
}

KVQ_API size_t kvq_pseq_private_start(const kvq_pages *P, const kvq_pseq *S)
{
    size_t b = 0;
    if (!P || !S || !kvq__pages_live(P)) return 0;
    while (b < S->n_blocks && P->refcount[S->table[b]] > 1) b++;
    b *= P->block_tokens;
    return b < S->n_slots ? b : S->n_slots;
}

static void kvq__page_occupancy(const kvq_pages *P, const kvq_pseq *S, kvq_page_stats *st)
{
    size_t i, live = 0;
    for (i = 0; i < S->n_slots; i++) live += S->alive[i];
    st->occupancy = S->n_blocks ? (double)live / (double)(S->n_blocks * P->block_tokens) : 0.0;
}

/* Drop S's reference to every block from `from_block` on (tail release).  */
static size_t kvq__release_tail(kvq_pages *P, kvq_pseq *S, size_t from_block)
{
    size_t freed = 0;
    while (S->n_blocks > from_block) freed += (size_t)kvq__unref(P, S->table[--S->n_blocks]);
    return freed;
}

KVQ_API kvq_status kvq_pseq_evict(kvq_pages *P, kvq_pseq *S, const uint8_t *keep,
                                  size_t n, kvq_page_stats *stats)
{
    kvq_page_stats st;
    size_t bt, i, b, w, kept_slots = 0;
    if (!P || !S || !keep) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq__pages_live(P)) return kvq__pages_dead(P, "kvq_pseq_evict");
    if (n != S->n_slots)
        return kvq__pfail(P, KVQ_ERR_SIZE, "keep mask has %zu entries; the sequence "
                          "has %zu slots", n, S->n_slots);
    memset(&st, 0, sizeof st);
    bt = P->block_tokens;
    for (i = 0; i < n; i++)
        if (S->alive[i] && !keep[i]) { S->alive[i] = 0; st.tokens_evicted++; }
    /* Wall 2: a block comes back only if every slot S uses in it is dead.
       Such a block leaves S's table (its slots were all dead: no payload
       moves; later slots' indices shift down by the block's slots).       */
    for (b = 0, w = 0; b < S->n_blocks; b++) {
        size_t lo = b * bt, hi = lo + bt < S->n_slots ? lo + bt : S->n_slots;
        int all_dead = 1;
        for (i = lo; i < hi && all_dead; i++) all_dead = !S->alive[i];
        if (all_dead) {
            st.blocks_freed += (size_t)kvq__unref(P, S->table[b]);
            continue;
        }
        if (w != b) {
            S->table[w] = S->table[b];
            memmove(S->alive + w * bt, S->alive + lo, hi - lo);
            memmove(S->pos + w * bt, S->pos + lo, (hi - lo) * sizeof(int32_t));
        }
        kept_slots = w * bt + (hi - lo);   /* only the last block is partial */
        w++;
    }
    S->n_slots = kept_slots;
    S->n_blocks = w;
    kvq__page_occupancy(P, S, &st);
    if (stats) *stats = st;
    return KVQ_OK;
}

/* Checks shared by both compactions; S's blocks from first/bt on must be
   private to S.                                                            */
static kvq_status kvq__compact_args(kvq_pages *P, kvq_pseq *S, size_t first, size_t end)
{
    size_t b;
    if (first == S->n_slots && end == S->n_slots)
        return KVQ_OK;        /* the empty range (e.g. a fully shared fork) */
    if (first % P->block_tokens || first > end || end > S->n_slots)
        return kvq__pfail(P, KVQ_ERR_SIZE, "range [%zu, %zu) is not block aligned "
                          "inside the %zu slots", first, end, S->n_slots);
    for (b = first / P->block_tokens; b < S->n_blocks; b++)
        if (P->refcount[S->table[b]] > 1)
            return kvq__pfail(P, KVQ_ERR_STATE, "block %zu (id %u) is shared by %u "
                              "sequences: compaction never moves shared blocks", b,
                              (unsigned)S->table[b], (unsigned)P->refcount[S->table[b]]);
    return KVQ_OK;
}

/* Slot i's payload, liveness and position go to slot j.                   */
static void kvq__move_slot(kvq_pages *P, kvq_pseq *S, size_t i, size_t j)
{
    if (P->data) memcpy(kvq__slot_ptr(P, S, j), kvq__slot_ptr(P, S, i), P->slot_bytes);
    S->alive[j] = 1;
    S->pos[j] = S->pos[i];
    S->alive[i] = 0;
}

/* The slots now end at `end`: blocks past it go back to the pool.         */
static void kvq__truncate(kvq_pages *P, kvq_pseq *S, size_t end, kvq_page_stats *st)
{
    S->n_slots = end;
    st->blocks_freed += kvq__release_tail(P, S, kvq__ceil_div(end, P->block_tokens));
    kvq__page_occupancy(P, S, st);
}

KVQ_API kvq_status kvq_pseq_repack(kvq_pages *P, kvq_pseq *S, size_t first,
                                   kvq_page_stats *stats)
{
    kvq_page_stats st;
    kvq_status e;
    size_t i, j;
    if (!P || !S) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq__pages_live(P)) return kvq__pages_dead(P, "kvq_pseq_repack");
    if ((e = kvq__compact_args(P, S, first, S->n_slots)) != KVQ_OK) return e;
    memset(&st, 0, sizeof st);
    for (i = first, j = first; i < S->n_slots; i++) {
        if (!S->alive[i]) { st.tokens_evicted++; continue; }
        if (j != i) { kvq__move_slot(P, S, i, j); st.slot_copies++; }
        j++;
    }
    kvq__truncate(P, S, j, &st);
    if (stats) *stats = st;
    return KVQ_OK;
}

KVQ_API kvq_status kvq_pseq_holefill(kvq_pages *P, kvq_pseq *S, size_t first,
                                     size_t round_start, kvq_page_stats *stats)
{
    kvq_page_stats st;
    kvq_status e;
    size_t i, hole = first, j = round_start;
    if (!P || !S) return KVQ__NO(KVQ_ERR_NULL);
    if (!kvq__pages_live(P)) return kvq__pages_dead(P, "kvq_pseq_holefill");
    if ((e = kvq__compact_args(P, S, first, round_start)) != KVQ_OK) return e;
    memset(&st, 0, sizeof st);
    for (i = round_start; i < S->n_slots; i++) {
        if (!S->alive[i]) { st.tokens_evicted++; continue; }
        while (hole < round_start && S->alive[hole]) hole++;      /* next hole */
        if (hole < round_start) {
            kvq__move_slot(P, S, i, hole);                  /* into the hole   */
            st.slot_copies++;
            st.tokens_evicted++;                            /* hole consumed   */
        } else {
            if (j != i) { kvq__move_slot(P, S, i, j); st.slot_copies++; }
            j++;                                            /* left-over slide */
        }
    }
    kvq__truncate(P, S, j, &st);
    if (stats) *stats = st;
    return KVQ_OK;
}


/* ------------------------------------------------------------------------ */
/* 10. buffers                                                              */
/* ------------------------------------------------------------------------ */
/* The mechanics every policy moves rows through, placed after the
   algorithms that use them (Sec. 7 declares them ahead). Row regions and
   quantized units grow by doubling (or exactly, for reservations); rows
   are pushed at a region's end, popped from its front and slid back when
   that makes room; every move re-points the loc map.                     */
/* Returns p grown to hold at least `need` elements of `el` bytes, or NULL
   with p untouched. Capacity doubles (appends cost amortized O(1)) unless
   `exact`, used by explicit reservations and fixed-size regions.           */
static void *kvq__grow(void *p, size_t cap, size_t need, size_t el,
                       int exact, size_t *new_cap)
{
    size_t nc = cap ? cap : 16, bytes;
    void *q;
    if (need <= cap) { *new_cap = cap; return p; }
    if (exact) nc = need;
    while (nc < need) {
        if (nc > (size_t)-1 / 2) { nc = need; break; }
        nc *= 2;
    }
    if (!kvq__mul(nc, el, &bytes)) return NULL;
    q = KVQ_REALLOC(p, bytes);
    if (q) *new_cap = nc;
    return q;
}

static size_t kvq__fp_bytes(const kvq_cache *c) { return (size_t)c->cfg.fp_bits / 8u; }

static uint32_t kvq__rows_tag(int r) { return (KVQ_LOC_ROWS0 + (uint32_t)r) << 28; }

/* Slide a row region's live rows to index 0 and re-point their locs.      */
static void kvq__rows_to_front(kvq_cache *c, kvq_side *s, int r)
{
    kvq_rows *rg = &s->rows[r];
    size_t rowb = c->cfg.head_dim * kvq__fp_bytes(c), i;
    if (rg->off == 0) return;
    memmove(rg->data, (char *)rg->data + rg->off * rowb, rg->n * rowb);
    memmove(rg->pos, rg->pos + rg->off, rg->n * sizeof(int32_t));
    rg->off = 0;
    for (i = 0; i < rg->n; i++) s->loc[rg->pos[i]] = kvq__rows_tag(r) | (uint32_t)i;
}

/* Capacity in a row region for `more` rows at its end, grown if short. No
   row moves here, so a failure leaves the region as it was; the rows slide
   to the front (amortized O(D) per popped row) in kvq__reserve_append once
   nothing can fail, or in kvq__rows_tail.                                 */
static kvq_status kvq__rows_reserve(kvq_cache *c, kvq_side *s, int r,
                                    size_t more, int exact)
{
    kvq_rows *rg = &s->rows[r];
    size_t rowb = c->cfg.head_dim * kvq__fp_bytes(c), need = rg->n + more;
    size_t cap_d, cap_p;
    void *d;
    if (need <= rg->cap) return KVQ_OK;
    /* grow data and pos together: one capacity serves both                 */
    d = kvq__grow(rg->data, rg->cap, need, rowb, exact, &cap_d);
    if (!d) return KVQ__NO(KVQ_ERR_NOMEM);
    rg->data = d;                      /* larger, same contents: still valid */
    d = kvq__grow(rg->pos, rg->cap, cap_d, sizeof(int32_t), 1, &cap_p);
    if (!d) return KVQ__NO(KVQ_ERR_NOMEM);
    rg->pos = (int32_t *)d;
    rg->cap = cap_d;
    return KVQ_OK;
}

static kvq_status kvq__units_reserve(kvq_side *s, size_t more, int exact)
{
    size_t need = s->n_units + more, nc, unused;
    size_t unit_words = s->geom.groups_per_unit * s->geom.words_per_group;
    void *p;
    if (need <= s->cap_units) return KVQ_OK;
    p = kvq__grow(s->words, s->cap_units, need, unit_words * sizeof(uint32_t), exact, &nc);
    if (!p) return KVQ__NO(KVQ_ERR_NOMEM);
    s->words = (uint32_t *)p;
    if (s->sz_per_unit) {               /* none for a scale per side        */
        p = kvq__grow(s->sz, s->cap_units, nc, s->sz_per_unit * sizeof(kvq_sz), 1, &unused);
        if (!p) return KVQ__NO(KVQ_ERR_NOMEM);
        s->sz = (kvq_sz *)p;
    }
    /* qpos is indexed by slot = unit * tokens_per_unit + t                  */
    p = kvq__grow(s->qpos, s->cap_units, nc, s->geom.tokens_per_unit * sizeof(int32_t), 1, &unused);
    if (!p) return KVQ__NO(KVQ_ERR_NOMEM);
    s->qpos = (int32_t *)p;
    s->cap_units = nc;
    return KVQ_OK;
}

/* Everything an append of n_new positions may need, reserved up front so
   that the mutation that follows cannot fail half way.                     */
static kvq_status kvq__reserve_append(kvq_cache *c, size_t n_new, int exact)
{
    size_t need = c->n_pos + n_new, cap = c->cap_pos, i;
    int slide[2];
    kvq_status st;
    if (n_new > KVQ_MAX_POSITIONS || need > KVQ_MAX_POSITIONS)
        return kvq__fail(c, KVQ_ERR_CAPACITY, "cache holds %zu positions; %zu more "
                         "exceed KVQ_MAX_POSITIONS", c->n_pos, n_new);
    for (i = 0; i < 2; i++) {
        kvq_side *s = i ? &c->v : &c->k;
        /* Rows leave a quantizing side's window as they arrive: it never
           grows by more than R + G (OTT), 3W + 1 (LogQuant) or R +
           stage_rows (chunked prefill). A side that never quantizes
           (schedule NONE, possibly beside one that does in a CUSTOM
           config) keeps every row.                                         */
        size_t window_rows = n_new, most = n_new;
        void *p;
        if (s->schedule != KVQ_SCHED_NONE)
            most = c->cfg.policy == KVQ_POLICY_OTT      ? c->cfg.residual + c->cfg.group
                 : c->cfg.policy == KVQ_POLICY_LOGQUANT ? 3 * c->cfg.lq_window + 1
                 : c->cfg.residual + c->stage_rows;
        if (window_rows > most) window_rows = most;
        p = kvq__grow(s->loc, c->cap_pos, need, sizeof(uint32_t), exact, &cap);
        if (!p) return kvq__fail(c, KVQ_ERR_NOMEM, "cannot grow the position map");
        s->loc = (uint32_t *)p;
        /* the window slides to its front below, after the last allocation:
           a later failure (V's map, either side's units) must not leave
           rows moved (Sec. 2: a failed call changes nothing)               */
        slide[i] = s->rows[KVQ_ROWS_WINDOW].off + s->rows[KVQ_ROWS_WINDOW].n + window_rows
                   > s->rows[KVQ_ROWS_WINDOW].cap;
        st = kvq__rows_reserve(c, s, KVQ_ROWS_WINDOW, window_rows, exact);
        if (st != KVQ_OK) return kvq__fail(c, st, "cannot grow the window");
        if (s->schedule != KVQ_SCHED_NONE) {
            /* worst case: every full-precision row plus the new ones
               become units                                                 */
            size_t rows = s->rows[KVQ_ROWS_WINDOW].n + s->rows[KVQ_ROWS_STAGE].n + n_new;
            st = kvq__units_reserve(s, rows / s->geom.tokens_per_unit + 1, exact);
            if (st != KVQ_OK) return kvq__fail(c, st, "cannot grow the quantized store");
        }
    }
    for (i = 0; i < 2; i++)
        if (slide[i]) kvq__rows_to_front(c, i ? &c->v : &c->k, KVQ_ROWS_WINDOW);
    c->cap_pos = cap;
    return KVQ_OK;
}

static void *kvq__row_ptr(const kvq_cache *c, const kvq_rows *rg, size_t i)
{
    return (char *)rg->data + i * c->cfg.head_dim * kvq__fp_bytes(c);
}

static void kvq__row_store(const kvq_cache *c, void *dst, const float *x)
{
    size_t d, D = c->cfg.head_dim;
    if (c->cfg.fp_bits == 32) { memcpy(dst, x, D * sizeof(float)); return; }
    for (d = 0; d < D; d++) ((kvq_f16 *)dst)[d] = kvq__f16_store(x[d]);
}

static void kvq__row_load(const kvq_cache *c, const void *src, float *x)
{
    size_t D = c->cfg.head_dim;
    if (c->cfg.fp_bits == 32) { memcpy(x, src, D * sizeof(float)); return; }
    kvq__f16_row((const kvq_f16 *)src, D, x);
}

/* The index where region r's next row goes. The caller reserved room for it
   (n < cap); popped rows at the front are reclaimed here if needed, which
   never allocates.                                                         */
static size_t kvq__rows_tail(kvq_cache *c, kvq_side *s, int r)
{
    kvq_rows *rg = &s->rows[r];
    KVQ_ASSERT(rg->n < rg->cap);
    if (rg->off + rg->n >= rg->cap) kvq__rows_to_front(c, s, r);
    return rg->off + rg->n;
}

/* Append one row to region r (room already reserved).                      */
static void kvq__rows_push(kvq_cache *c, kvq_side *s, int r, const float *x,
                           size_t pos)
{
    kvq_rows *rg = &s->rows[r];
    size_t i = kvq__rows_tail(c, s, r);
    kvq__row_store(c, kvq__row_ptr(c, rg, i), x);
    rg->pos[i] = (int32_t)pos;
    s->loc[pos] = kvq__rows_tag(r) | (uint32_t)i;
    rg->n++;
}

/* Copy row `i` (absolute index) of region `from` to the end of region `to`;
   the position now lives in `to`. The caller removes it from `from`.       */
static void kvq__rows_copy(kvq_cache *c, kvq_side *s, int from, size_t i, int to)
{
    kvq_rows *a = &s->rows[from], *b = &s->rows[to];
    size_t j = kvq__rows_tail(c, s, to), rowb = c->cfg.head_dim * kvq__fp_bytes(c);
    memcpy(kvq__row_ptr(c, b, j), kvq__row_ptr(c, a, i), rowb);
    b->pos[j] = a->pos[i];
    s->loc[a->pos[i]] = kvq__rows_tag(to) | (uint32_t)j;
    b->n++;
}

/* Remove the rows whose live offset o (0 = oldest) satisfies drop(o, arg),
   keeping the others in order. Rows already copied elsewhere keep their new
   loc; survivors are re-pointed.                                           */
static void kvq__rows_remove(kvq_cache *c, kvq_side *s, int r,
                             int (*drop)(size_t o, const void *arg),
                             const void *arg)
{
    kvq_rows *rg = &s->rows[r];
    size_t rowb = c->cfg.head_dim * kvq__fp_bytes(c), o, j = rg->off;
    for (o = 0; o < rg->n; o++) {
        size_t i = rg->off + o;
        if (drop(o, arg)) continue;
        if (j != i) {
            memcpy(kvq__row_ptr(c, rg, j), kvq__row_ptr(c, rg, i), rowb);
            rg->pos[j] = rg->pos[i];
            s->loc[rg->pos[j]] = kvq__rows_tag(r) | (uint32_t)j;
        }
        j++;
    }
    rg->n = j - rg->off;
}

#ifdef __cplusplus
}
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#endif
#endif /* KVQ_IMPLEMENTATION_DONE */
#endif /* KVQ_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the kvq authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
*/

