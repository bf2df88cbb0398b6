/* kvq.h - KV-cache quantization for LLM inference, as an exact reference.
   v0.7.0 - MIT license, see end of file.

   One header holds the CPU definition of every mechanism; kvq_cuda.cu holds
   GPU kernels that must reproduce its codes bit for bit.

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
       KVQ_NO_SIMD          plain loops everywhere. By default, GCC and clang
                            run the fast paths (Part II) on native vectors
                            (AVX-512, AVX2 or AArch64 NEON) and F16C targets
                            convert fp16 in hardware; results are identical
                            either way (tests/simd_check.c)
       KVQ_NO_FMA           round attention's multiply-adds twice even where
                            the target has fused multiply-add (which they use
                            by default: top of IMPLEMENTATION). Codes never
                            depend on it; outputs differ in the last bits

   CONTENTS
   The declarations come first, numbered; the implementation repeats the
   numbers in two parts.
   Part I: the definitions and the reference implementation, paper order
       1. Standard parameters (T, D, G, B, R, N, ...) and the papers'
          symbols in kvq's names
       2. Status codes and kvq_why(), the reason of a failure
       3. fp16 <-> fp32 (round to nearest even; CUDA __float2half_rn bit
          for bit)
       4. Asymmetric uniform quantization of one group (KIVI Sec. 3.1; HF
          post)
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
       9. Byte accounting and invariants
      11. Eviction (StreamingLLM, H2O, SnapKV keep masks), paged blocks with
          reference counts, and compaction (repack, hole-filling)
      10. Buffers: how regions and units grow, move and shrink (placed
          after the algorithms that use them; nothing public)
      12. Which function returns which status (declarations only)
   Part II: the fast paths (implementation only), each held to a Part I
   function, bit for bit or within a stated tolerance, by a named test
      II.1 The vector layer: 16 lanes as native vectors (simd_check)
      II.2 The fast quantizer: kvq__quantize_unit, 16 per-token groups side
           by side (= kvq_quantize_group, bit for bit)
      II.3 The ONLINE walk (= EAGER within 1e-5 max|out| + 1e-6)
      II.4 The rotation: kvq__rotate_row_fast (= kvq__rotate_row, bit for
           bit)
   The declarations below are short: signature, shapes, effect, failures.
   Each mechanism's definition (the paper's section and equations, the math,
   the choices the paper leaves open, the layout diagrams) sits directly
   above its implementation, under the same section number, in Part I.

   1. STANDARD PARAMETERS (used with these meanings everywhere)
       T   number of tokens (positions) in a head's K or V matrix
       D   head dimension: channels per token (Llama: 128)
       G   group size: how many values share one scale and zero
       B   bits per code, B in {1, 2, 4, 8};  N = 2^B - 1 is the largest code
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
#define KVQ_VERSION_MINOR 7
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
   bound are written above the implementation (Part I, Sec. 4,
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
/* 5. BIT PACKING                                                           */
/* ======================================================================== */
/* 32/B codes per 32-bit word, least significant bits first (diagram above
   the implementation of Sec. 5).                                          */
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
   written above their implementations in Part I: Sec. 7 (regions, KIVI,
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
    kvq_schedule  schedule;
    size_t        group;            /* this side's G                         */
    size_t        chunk;            /* tokens quantized per SLIDE step       */
    kvq_geometry  geom;             /* tokens, groups per unit; words/group  */
    uint32_t     *words;   /* (cap_units, groups_per_unit, words_per_group)  */
    kvq_sz       *sz;      /* (cap_units, groups_per_unit)                   */
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
                       kvq_pseq_holefill kvq_rotate
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
       a count is zero or out of its range (D, G, R, W in 1..65536; side
       not 0/1; even SnapKV kernel), a mask's length differs from the
       cache's, a scratch buffer is too small, a rotation's D is not a
       power of two
   KVQ_ERR_BITS        kvq_quantize_group kvq_pack kvq_unpack kvq_layout_init
                       kvq_quantize_matrix kvq_dequantize_matrix
                       kvq_config_validate kvq_cache_init
       bits not in {1, 2, 4, 8}
   KVQ_ERR_GROUP       kvq_layout_init kvq_quantize_matrix
                       kvq_dequantize_matrix kvq_config_validate kvq_cache_init
       G does not divide D (per-token) or T (per-channel); a per-channel
       FLUSH side needs G | R; OTT's per-channel value group must divide G
   KVQ_ERR_NONFINITE   kvq_quantize_group kvq_quantize_matrix
                       kvq_dequantize_matrix kvq_cache_prefill kvq_cache_append
                       kvq_attend kvq_attend_dense kvq_h2o_accumulate
                       kvq_evict_h2o kvq_snapkv_scores kvq_evict_snapkv
                       kvq_rotate
       NaN or Inf in K, V, Q or a score; a stored fp16 scale or zero that
       is Inf/NaN (dequantize); a probability that is not finite and >= 0
   KVQ_ERR_RANGE       kvq_quantize_group kvq_pack kvq_quantize_matrix
                       kvq_cache_prefill kvq_cache_append kvq_attend
                       kvq_rotate
       |x| > KVQ_MAX_ABS_INPUT in K, V (cache; also after rotating) or Q; a scale or zero that
       overflows fp16 (quantizers); a code wider than B bits (pack); a
       finite row that overflows fp32 once rotated (kvq_rotate)
   KVQ_ERR_OVERFLOW    kvq_quantize_group kvq_layout_init kvq_quantize_matrix
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
       an unknown enum value (policy, schedule, axis, zero mode, attention
       mode, pooling, rotation), an inconsistent configuration, probs with ONLINE
       attention, eviction on an OTT or LogQuant cache
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
   bad bits) kvq_config_* kvq_hf_defaults kvq_logquant_window_for
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

/* Fused multiply-add. The dot products of attention (kvq__madd16 below)
   fuse a * b + c into one rounding where the target has FMA (x86 FMA3,
   AArch64: KVQ__FMA), at every vector width, and round twice elsewhere;
   every other expression rounds each operation. So two builds for the
   same target give identical floats whatever their vector width, and a
   build with FMA differs from one without only in the last bits of
   attention outputs, never in a quantized code. GCC compiles ISO C
   (-std=c99) without contracting expressions by default; clang would
   fuse within an expression, so it is told not to here (until the end of
   the implementation). -DKVQ_NO_FMA turns the fused path off.            */
#if !defined(KVQ_NO_FMA) && (defined(__FMA__) || defined(__AVX512F__) || defined(__aarch64__))
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

/* ======================================================================== */
/* PART I. THE DEFINITIONS AND THE REFERENCE IMPLEMENTATION                 */
/* ======================================================================== */
/* Each mechanism in the order the papers build it: fp16 (3), one group's
   quantization (4), packing (5), matrices (6), the streaming cache with
   KIVI's and HF's schedules (7), OTT (7.1), LogQuant (7.2), reference
   attention (8), accounting and invariants (9), eviction and compaction
   (11), then the buffers all of them move rows through (10). Read top to
   bottom, this is the definition: no vector type appears here. Where the
   cache calls a fast path, a prototype names it, and Part II says which
   function here it must match, how exactly, and which test checks it.    */

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
   (scales, zeros, rows of validated input: never NaN). Where the compiler
   targets F16C each is one instruction (vcvtph2ps, vcvtps2ph with round to
   nearest even), equal to the integer code above on every non-NaN input:
   all 2^16 halves and all 2^32 - 2^24 non-NaN floats were compared, and
   tests/simd_check.c repeats the halves and a sample of the floats. NaN is
   the one case where they may differ (the hardware quiets and keeps the
   payload; kvq_f32_to_f16 returns 0x7FFF), and kvq never converts one.  */
#if !defined(KVQ_NO_SIMD) && defined(__F16C__)
#include <immintrin.h>
static float   kvq__f16_stored(kvq_f16 h) { return _cvtsh_ss(h); }
static kvq_f16 kvq__f16_store(float f)
{
    return (kvq_f16)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#else
static float   kvq__f16_stored(kvq_f16 h) { return kvq__f16_to_f32(h); }
static kvq_f16 kvq__f16_store(float f) { return kvq_f32_to_f16(f); }
#endif

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
    return bits == 1 || bits == 2 || bits == 4 || bits == 8;
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
   NVIDIA GPU) byte 0 of the word holds c0..c3 for B = 2.                    */
KVQ_API size_t kvq_packed_words(size_t n, int bits)
{
    size_t per;
    if (!kvq_bits_supported(bits)) return 0;
    per = 32u / (unsigned)bits;
    return n / per + (n % per != 0);
}

/* Code i of a packed group. B is a power of two, so "i / (32/B)" and
   "(i % (32/B)) * B" are shifts and masks: lb = log2(B).                   */
static uint8_t kvq__get_code(const uint32_t *words, size_t i, int bits)
{
    unsigned lb = (bits == 1) ? 0u : (bits == 2) ? 1u : (bits == 4) ? 2u : 3u;
    unsigned per_log = 5u - lb;                     /* log2(32 / B)         */
    unsigned shift = (unsigned)(i & ((1u << per_log) - 1u)) << lb;
    return (uint8_t)((words[i >> per_log] >> shift) & ((1u << bits) - 1u));
}

static void kvq__pack(const uint8_t *codes, size_t n, int bits, uint32_t *words)
{
    size_t per = 32u / (unsigned)bits, w, i, nw = kvq_packed_words(n, bits);
    for (w = 0; w < nw; w++) {
        uint32_t word = 0;
        for (i = 0; i < per && w * per + i < n; i++)
            word |= (uint32_t)codes[w * per + i] << (i * (unsigned)bits);
        words[w] = word;
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

/* The fast quantizer (Part II, II.2): the same codes and (s, z) as
   kvq_quantize_group applied to each group of the layout, bit for bit.
   kvq__quantize_unit quantizes one unit (the cache's path too);
   kvq__quantize_16_groups 16 per-token groups of G <= KVQ__COLS_MAX side
   by side; the other two are the input checks of kvq_quantize_matrix.    */
#define KVQ__COLS_MAX 128
static kvq_status kvq__quantize_unit(const float *X, size_t D, int bits,
                                     size_t G, kvq_axis axis,
                                     kvq_zero_mode mode,
                                     uint32_t *words, kvq_sz *sz);
static void kvq__quantize_16_groups(const float *x /* (16, G) */, size_t G, int bits,
                                    kvq_zero_mode mode,
                                    uint32_t *words /* (16, wpg) */, kvq_sz *sz /* (16) */);
static float kvq__absmax_or_nonfinite(const float *x, size_t n);
static void kvq__prefetch(const void *p, size_t n);
static kvq_status kvq__params16(const float *lo, const float *hi, int bits, kvq_zero_mode mode,
                                kvq_sz *sz, float *s, float *z);
static void kvq__minmax16_rows(const float *x, size_t n, size_t D, float *lo, float *hi, int *bad);

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
            float mn[16], mx[16];
            int bad[16], j, lanes = 1;
            kvq_sz p;
            if (axis == KVQ_PER_CHANNEL && g % 16 == 0 && g + 16 <= D) {
                kvq__minmax16_rows(x, G, D, mn, mx, bad);     /* 16 channels */
                lanes = 16;
            } else {
                bad[0] = kvq__minmax_check(x, G, axis == KVQ_PER_TOKEN ? 1 : D, &mn[0], &mx[0]);
            }
            for (j = 0; j < lanes; j++) {
                kvq_status gs;
                if (bad[j]) return KVQ__NO(KVQ_ERR_NONFINITE);
                gs = kvq__group_params(mn[j], mx[j], bits, mode, &p);
                if (gs != KVQ_OK && st == KVQ_OK) st = gs;
            }
            g += (size_t)lanes - 1;
        }
    }
    if (st != KVQ_OK) return st;
    if (axis == KVQ_PER_TOKEN && G <= KVQ__COLS_MAX) {
        /* per-token groups tile X in order: 16 of them at a time, the last
           few through kvq__quantize_unit as one-group "units"             */
        for (g = 0; g + 16 <= L.total_groups; g += 16) {
            if (g + 48 <= L.total_groups)   /* the groups two calls on (4 KB at
                                               G = 32), as the first pass asks */
                kvq__prefetch(X + (g + 32) * G, 16 * G * sizeof(float));
            kvq__quantize_16_groups(X + g * G, G, bits, mode, words + g * L.geom.words_per_group, sz + g);
        }
        for (; g < L.total_groups; g++)
            kvq__quantize_unit(X + g * G, G, bits, G, axis, mode, words + g * L.geom.words_per_group, sz + g);
        return KVQ_OK;
    }
    for (u = 0; u < L.units; u++)
        kvq__quantize_unit(X + u * L.geom.tokens_per_unit * D, D, bits, G, axis, mode,
                           words + u * L.geom.groups_per_unit * L.geom.words_per_group,
                           sz + u * L.geom.groups_per_unit);
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

/* The same floats 16 lanes at a time (Part II, II.4), from in to out (in
   == out allowed); returns max |out|.                                     */
static float kvq__rotate_row_fast(const float *sign, size_t D, int inverse,
                                  const float *in, float *out);

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
    for (t = 0; t < T; t++) kvq__rotate_row_fast(NULL, D, inverse, X + t * D, X + t * D);
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
static void kvq__f16_row(const kvq_f16 *h, size_t D, float *out);
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
static void kvq__requantize_all(kvq_cache *c, kvq_side *s);                          /* HF  */

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
    for (u = 0; u < n / tpu; u++) {
        size_t unit = s->n_units + u;
        kvq_status st = kvq__quantize_unit(c->stage + u * tpu * D, D, s->bits,
                                           s->group, s->axis, c->cfg.zero_mode,
                                           s->words + unit * unit_words,
                                           s->sz + unit * s->geom.groups_per_unit);
        (void)st;   /* appends are range-checked against KVQ_MAX_ABS_INPUT  */
        KVQ_ASSERT(st == KVQ_OK);
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
                                     size_t G)
{
    if (sch == KVQ_SCHED_NONE) return KVQ_OK;
    if (sch != KVQ_SCHED_FLUSH && sch != KVQ_SCHED_SLIDE && sch != KVQ_SCHED_POLICY) {
        kvq__say("%s: unknown schedule %d", name, (int)sch);
        return KVQ_ERR_CONFIG;
    }
    if (!kvq_bits_supported(bits)) {
        kvq__say("%s: %d bits is not supported (1, 2, 4, 8)", name, bits);
        return KVQ_ERR_BITS;
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
    if (c->residual == 0 || c->residual > 65536) {
        kvq__say("residual R=%zu must be in 1..65536", c->residual);
        return KVQ_ERR_SIZE;
    }
    st = kvq__validate_side(c, "keys", c->key_bits, c->key_axis, ks, c->group);
    if (st != KVQ_OK) return st;
    st = kvq__validate_side(c, "values", c->value_bits, c->value_axis, vs,
                            kvq__value_group(c));
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
                           kvq_axis axis, kvq_schedule sch, size_t G)
{
    memset(s, 0, sizeof *s);
    s->schedule = sch;
    s->axis = axis;
    s->bits = bits;
    s->group = G;
    if (sch == KVQ_SCHED_NONE) return;
    s->geom.tokens_per_unit = (axis == KVQ_PER_TOKEN) ? 1 : G;
    s->geom.groups_per_unit = (axis == KVQ_PER_TOKEN) ? c->head_dim / G : c->head_dim;
    s->geom.words_per_group = kvq_packed_words(G, bits);
    s->chunk = s->geom.tokens_per_unit;
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
    kvq__side_init(&t.k, cfg, cfg->key_bits, cfg->key_axis, ks, cfg->group);
    kvq__side_init(&t.v, cfg, cfg->value_bits, cfg->value_axis, vs,
                   cfg->value_group);
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
            float m = kvq__rotate_row_fast(kvq__side_sign(c, s), D, 0, *X + t * D, Y + t * D);
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
        if (kvq__rotate_row_fast(kvq__side_sign(c, s), D, 0, x, y) > KVQ_MAX_ABS_INPUT)
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
    kvq__rotate_row_fast(kvq__side_sign(c, s), D, 0, x, y);
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
        kvq__dequant_token(s->words + unit * s->geom.groups_per_unit * s->geom.words_per_group,
                           s->sz + unit * s->geom.groups_per_unit,
                           idx % s->geom.tokens_per_unit, c->cfg.head_dim, s->bits,
                           s->group, s->axis, c->cfg.zero_mode, out);
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
        kvq__rotate_row_fast(kvq__side_sign(c, side), c->cfg.head_dim, 1, out, out);  /* caller's basis */
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
   cache in tiles (of storage, not of positions: Part II, II.3) with a running
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

/* a . b in kvq's fixed summation order (Part II, II.1: 16 lanes, then a
   pairwise tree). Every query dot product on the CPU goes through it.     */
static float kvq__dot(const float *a, const float *b, size_t n);

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

/* q . k of one per-token key from its codes as floats (Part II, II.1):
   sum_g a_g (q_g . c_g) + sum_g b_g qsum_g, in kvq__dot's lane order.     */
static float kvq__token_key_dot(const float *q, const float *codes, const kvq_sz *sz,
                                const float *qsum, size_t D, size_t G, kvq_zero_mode mode);

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
        const kvq_sz *sz = s->sz + unit * s->geom.groups_per_unit;
        size_t wpg = s->geom.words_per_group;
        float acc = 0.0f, a;
        if (s->axis == KVQ_PER_CHANNEL) {
            if (x->unit != unit) {          /* once per unit: q*a and q.b   */
                for (d = 0; d < D; d++) {
                    kvq__affine(sz[d], c->cfg.zero_mode, &a, &tmp[d]);
                    x->qa[d] = x->q[d] * a;
                }
                x->qb = kvq__dot(x->q, tmp, D);
                x->unit = unit;
            }
            for (d = 0; d < D; d++)
                acc += x->qa[d] * (float)kvq__get_code(w + d * wpg, t, s->bits);
            return acc + x->qb;
        }
        for (g = 0; g < D / G; g++)         /* per-token key groups         */
            for (d = 0; d < G; d++) tmp[g * G + d] = (float)kvq__get_code(w + g * wpg, d, s->bits);
        return kvq__token_key_dot(x->q, tmp, sz, x->qsum, D, G, c->cfg.zero_mode);
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
        const kvq_sz *sz = s->sz + unit * s->geom.groups_per_unit;
        size_t wpg = s->geom.words_per_group;
        float a, b;
        if (s->axis == KVQ_PER_TOKEN) {
            for (g = 0; g < D / G; g++) {   /* (w a) c + (w b) per group    */
                float wa, wb;
                kvq_sz_affine(sz[g], c->cfg.zero_mode, &a, &b);
                wa = wgt * a; wb = wgt * b;
                for (d = 0; d < G; d++)
                    acc[g * G + d] += wa * (float)kvq__get_code(w + g * wpg, d, s->bits) + wb;
            }
        } else {
            for (d = 0; d < D; d++) {
                kvq_sz_affine(sz[d], c->cfg.zero_mode, &a, &b);
                acc[d] += wgt * ((float)kvq__get_code(w + d * wpg, t, s->bits) * a + b);
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
static size_t kvq__map_lanes(const uint32_t *map, size_t n, const uint32_t *off,
                             const uint32_t *len, uint32_t *bad);      /* Part II */
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
   absent from both maps) the ONLINE walk skips, in kvq__tile_values.     */
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

/* ONLINE (Part II, II.3): the same softmax as EAGER below, walking the
   storage a tile at a time; within 1e-5 max|out| + 1e-6 of EAGER.        */
static void kvq__attend_online(const kvq_cache *c, const float *q, size_t n_q, float *out,
                               float *scratch, size_t scratch_floats, float inv_sqrt_d);

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
                kvq__rotate_row_fast(sign, D, 0, q + (h + i) * D, scratch + i * D);
            kvq__attend_stored(c, scratch, nh, out + h * D, probs ? probs + h * c->n_pos : NULL,
                               mode, scratch + nh * D, scratch_floats - nh * D);
        }
    } else {
        kvq__attend_stored(c, q, n_q, out, probs, mode, scratch, scratch_floats);
    }
    if (c->cfg.value_rotation != KVQ_ROT_NONE)   /* out = R (sum w v): back */
        for (h = 0; h < n_q; h++)
            kvq__rotate_row_fast(kvq__side_sign(c, 1), D, 1, out + h * D, out + h * D);
    return KVQ_OK;
}

/* kvq_attend after its checks, on queries in the stored keys' basis.      */
static void kvq__attend_stored(const kvq_cache *c, const float *q, size_t n_q,
                               float *out, float *probs, kvq_attn_mode mode,
                               float *scratch, size_t scratch_floats)
{
    size_t D = c->cfg.head_dim, h, p, d;
    float inv_sqrt_d = 1.0f / sqrtf((float)D);
    if (mode == KVQ_ATTN_ONLINE) {      /* Part II: the walk (II.3)       */
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
        b.scale_zero[i] = s->n_units * s->geom.groups_per_unit * sizeof(kvq_sz);
        for (r = 0; r < KVQ_ROW_REGIONS; r++) live_rows += s->rows[r].n;
        b.full_precision[i] = live_rows * rowb;
        b.metadata += (slots + live_rows) * sizeof(int32_t)   /* positions  */
                    + c->n_pos * sizeof(uint32_t);             /* loc map    */
        b.allocated += s->cap_units * s->geom.groups_per_unit *
                           (s->geom.words_per_group * 4u + sizeof(kvq_sz))
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
    size_t gpu = s->geom.groups_per_unit, u, j = 0, t;
    for (u = 0; u < s->n_units; u++) {
        size_t live = 0;
        for (t = 0; t < tpu; t++) live += s->qpos[u * tpu + t] >= 0;
        if (live == 0) { st->dead_removed += tpu; continue; }
        st->pinned_slots += tpu - live;
        if (j != u) {
            memcpy(s->words + j * uw, s->words + u * uw, uw * sizeof(uint32_t));
            memcpy(s->sz + j * gpu, s->sz + u * gpu, gpu * sizeof(kvq_sz));
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
    p = kvq__grow(s->sz, s->cap_units, nc, s->geom.groups_per_unit * sizeof(kvq_sz), 1, &unused);
    if (!p) return KVQ__NO(KVQ_ERR_NOMEM);
    s->sz = (kvq_sz *)p;
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

/* ======================================================================== */
/* PART II. THE FAST PATHS                                                  */
/* ======================================================================== */
/* Four paths, each held to a Part I function:
     II.1 the vector layer: 16 lanes at a time as native vectors; the same
          floats at every width (tests/simd_check.c, bit for bit)
     II.2 the fast quantizer: kvq__quantize_unit and 16 per-token groups
          side by side; codes and (s, z) bit for bit those of
          kvq_quantize_group, Sec. 4 (tests/test_quant.c, simd_check.c)
     II.3 the ONLINE walk: kvq_attend's ONLINE mode, within 1e-5 max|out|
          + 1e-6 of EAGER, Sec. 8 (tests/test_cache.c; simd_check.c for
          the widths)
     II.4 the rotation: kvq__rotate_row_fast, the cache's appends, kvq_attend's
          query and output and kvq_rotate; the floats of kvq__rotate_row,
          Sec. 6.1, bit for bit (tests/simd_check.c, D = 1 .. 4096)
   None of it defines anything: each path is held to the Part I function
   it names, and a change here that moves a code is a bug.

   THE INSTRUCTION BUDGET. What a path costs is counted, not timed: the
   marginal instructions retired per stored K or V element by kvq_attend
   ONLINE (per input value by the quantizer), D = 128, bench_cpu's caches,
   counted by `sh bench/instr_count.sh` (callgrind, ptrace single-step, or
   qemu-aarch64). The count depends only on the binary and its input, so it
   carries from machine to machine. The code meets these bounds, n_q = 1 / 4
   query heads per KV head (GQA). The AVX-512 column was counted before the
   per-tile bookkeeping below was cut and has not been recounted since (the
   machine that cut it has no AVX-512); the cuts are the same code there
   except the AVX2 pair loop, so it can only have gone down, by an amount
   not known:

                               AVX-512      AVX2         NEON
     2-bit caches (KIVI-2,     0.70 / 1.26  1.05 / 2.07  2.14 / 5.30
       OTT-2, LogQuant-2)
     KIVI-4                    1.14 / 1.64  1.28 / 2.24  2.67 / 4.98
     HF-2 (per-token keys)     0.53 / 0.92  0.90 / 1.89  2.04 / 5.77
       (of which the codes'
       prefetch, 0.02: a
       cold walk 1.2x faster)
     fp32 and fp16 rows        no more than the plain fp32 loop's count
                               (measured, fp32 / fp16 against the loop:
                               AVX-512 0.70 / 0.73 against 0.97 and
                               1.23 / 1.22 against 3.59; AVX2 0.83 / 0.89
                               against 1.32; NEON 1.28 / 1.53 against 2.14)
     quantize, either axis     3.9          5.3          16.5
                               (ggml's quantize_row_q4_1_ref: 10.1, 10.3,
                               12.0); per-channel no more than per-token

   (The plain build, -DKVQ_NO_SIMD or no vector ISA, runs the 16 lanes as
   floats through out-of-line helpers: 12-16 / 31-33 per element; it is the
   reference for the widths, not a fast path.) Where the count goes, for
   2-bit codes on AVX-512 and one head: two codes share one table lookup
   (kvq__pairs2_walk, kvq__token_block: vpermps picks one of 16 values of
   t = w c + w' c' by the four bits of a code pair), so a pair costs a
   shift, a permute and an addition for keys whose pair lies in one word
   (about 0.1 per element), and a shift, a rotate, a bit select, a permute
   and an addition for values and per-channel keys, whose pair spans two
   words (about 0.16); the rest, 0.3-0.5 per element when last counted,
   is each tile's bookkeeping: every slot's scale and zero per group, the
   weights per head, the softmax, the check of the position maps. Part of
   it is now gone (AVX2, KIVI-2: 1.32 / 2.31 -> 1.19 / 2.12; NEON 2.25 /
   5.67 -> 2.14 / 5.30): the per-channel keys' (s, z) split into a and b by
   a loop the compiler vectorizes, not one group at a time (kvq__affine_run);
   q a in vectors (kvq__unit_qa: head 0's row scaled in place had defeated
   the compiler's alias check); a full tile's mask, score scale and weight
   products as two vectors, with nothing to mask on the usual tile
   (kvq__tile_update); the value tile's check that its slots follow each
   other as two passes over consecutive words when its positions are
   consecutive, no gather (kvq__tile_follows); the maps' check by a
   permute of a table per tag, 8 entries a step (kvq__map_lanes).
   AVX2's pair walk with one head then broadcasts each pair's weights once
   for all blocks (kvq__pairs2_walk): KIVI-2 1.19 -> 1.07, and the decode
   shifts by lane once per 16 codes, not twice (kvq__codes16): 1.06 / 2.08;
   the values' (s, z) transposed in registers, not gathered
   (kvq__columns16_48): 1.05 / 2.07.
   Counts carry between machines; cycles per instruction do not. Zen 1
   retires a shift by lane about once per 4 cycles, so a build tuned for
   it (KVQ__ZEN1: -march=native there) decodes with none and retires more,
   KIVI-2 1.30 / 2.39 (GCC's tuning for that core also halves its own
   vectors: the plain fp32 loop 1.32 -> 2.00), yet runs the 2-bit caches
   1.2-1.6x faster on it than the generic build's code does.
   What is left on AVX2 for KIVI-2 with one head (1.05): the decode, about
   0.65 (without AVX-512's pair tables: per 16 codes a broadcast word, a
   shift by lane, an immediate shift and two permutes, then per pair a
   multiply, a multiply-add and an addition, two ymm instructions each);
   per tile the
   (s, z) conversion and transposition of the values' groups (F16C, then
   shuffles), their weights a w and sum b w per group and head, the
   per-channel keys' q a and q.b, the softmax with its exponentials and
   sums, and the call and loop overhead around four value groups of 32
   channels (together about 0.4); and the maps' check, 0.02. The bound once
   proposed for the 2-bit caches on AVX-512, 0.5 / 0.6 (40% of the read
   bandwidth), was not met when last counted (HF-2 with one head nearest,
   0.53; KIVI-2 the farthest, 0.70 / 1.26), and whether the cuts reach it
   is not known until AVX-512 is counted again; at n_q = 4 they cannot
   reach 0.6: the multiply-adds and the decode alone were 0.48.
   With several heads a table per head costs more than it saves, and
   n_q = 4 keeps one code per lane, except HF-2's per-token keys, whose
   tables are built once per walk: the codes of a tile are unpacked once
   for all heads (a broadcast, a shift and a vpermps from a table of the
   codes' floats per 16 codes, kvq__codes16), then one multiply-add per
   head whose broadcast weight is folded into it (kvq__channel_tile,
   kvq__tile_chunks). For KIVI-2 with four heads a 2-bit value entry of
   32 channels is 20 instructions, 8 of them multiply-adds; the
   multiply-adds of keys and values are 0.28 per element, the decode
   about 0.2, loops and bookkeeping the rest (the exponentials and sums
   of the softmax, a w and b w per group, and q a per unit, all per head).
   AVX2 looks the per-token
   keys' pairs up too, 8 entries a vpermps and a blend on the index's
   bit 3, and 2-bit codes by an 8-entry table of period 4. Built for Zen 1
   the per-token keys use neither permute (kvq__token_block): q_d c_d by
   an in-half vpermilps of 4 products with one head, and c_d+1 masked in
   place and converted: more instructions (HF-2, n_q = 1 / 4: 1.07 /
   2.05 -> 1.11 / 2.19 per element) but fewer slow ones, T = 32K on that
   core 2.5-2.7 -> 2.4-2.5 ms (n_q = 1), 5.9-6.2 -> 4.6-4.7 ms (n_q = 4),
   the same floats. Its pair walks with one head (values, per-channel
   keys) scale each pair's two weights by lane, w 4^-j, once for all
   blocks, and leave the codes in place, c 4^j (kvq__pair_blocks): two
   multiplies fewer per 16 codes, whose conversions (2 cycles a ymm on
   that core) now bound the walk; T = 32K, n_q = 1: KIVI-2 2.41-2.54 ->
   2.23-2.37 ms, HF-2 2.38-2.46 -> 2.27-2.35, OTT-2 2.20-2.29 -> 1.91-1.98,
   the same floats (a tile with a weight below 1e-33 walks unscaled).
   With several heads its per-token keys read q_d and q_d+1 / 4 as 8-lane
   vectors from the table, and pin each head's sum in a register (GCC had
   spilled a word's 64 products for four heads); HF's (s, z) of 2 groups
   (G = 64) are transposed in registers, not gathered (kvq__columns16_48,
   in every AVX2 build: HF-2 0.93 / 1.95 -> 0.90 / 1.89 there), and the
   tile's run checks go 8 a step (kvq__run_off). HF-2 on Zen 1, n_q = 1 /
   4: 1.07 / 2.20 -> 1.00 / 1.87 per element; T = 32K 2.29 -> 1.99 ms and
   4.62 -> 4.04 ms (same binary, cold medians), the same floats.
   Then the conversions go too (bench/walk_floor.c, decode h): the masked
   code c 4^j, its bits read as a float, is already the subnormal
   c 4^j 2^-149, so weights scaled w 4^-j 2^(149-E) give the products
   w c 2^-E with no conversion at all, every sum of the walk is its old
   value times 2^-E with the same roundings, and one multiply by 2^E per
   sum at the end restores it exactly. The weights' exponents decide
   whether that holds (kvq__walk_scale: E from the largest, the least one
   no more than 104 binades below; 8 weights a step, by the bits of |w|),
   and so does the caller's MXCSR (DAZ would read every code as 0):
   otherwise the walk converts as before. KIVI-2 1.255 -> 1.187
   instructions per element with one head, OTT-2 1.044 -> 0.947,
   LogQuant-2 1.088 -> 0.988, HF-2 1.031 -> 0.985 (n_q = 4 unchanged);
   T = 32K, n_q = 1, cold medians on that core: KIVI-2 2.29-2.33 ->
   2.17-2.20 ms, OTT-2 2.00-2.02 -> 1.78-1.79, LogQuant-2 2.12-2.17 ->
   1.93-1.97, HF-2 2.09-2.14 -> 2.01-2.04, the same floats.              */

/* ------------------------------------------------------------------------ */
/* II.1 the vector layer                                                    */
/* ------------------------------------------------------------------------ */
/* ---- 16 lanes at a time ------------------------------------------------
   The hot loops of Sec. 6 and 8 work on 16 floats at a time through the
   few helpers below. A kvq__v16 is those 16 lanes held as 16 / KVQ__W
   native vectors of KVQ__W lanes each, so every operation maps onto the
   machine's own registers:

       KVQ__W = 16   AVX-512 (one zmm)          GCC or clang vector
       KVQ__W =  8   AVX2 (two ymm)             extensions
       KVQ__W =  4   AArch64 NEON (four q regs)
       KVQ__W =  1   anything else, or -DKVQ_NO_SIMD: sixteen plain floats

   Lane i is lane i % W of part i / W, which is also its place in memory.
   Each helper is one loop over the parts doing the same operation on
   every lane, so all four widths compute identical floats: the same
   operations, lane by lane, in the same order (tests/simd_check.c builds
   the header as W = 1, W = 8 and this machine's native W and compares them
   bit for bit). Helpers take and return kvq__v16 by value and are always
   inlined: the parts stay in registers.                                    */
#if !defined(KVQ_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && defined(__AVX512F__)
#define KVQ__W 16
#elif !defined(KVQ_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && defined(__AVX2__)
#define KVQ__W 8
#elif !defined(KVQ_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define KVQ__W 4
#else
#define KVQ__W 1
#endif
#define KVQ__PARTS (16 / KVQ__W)
/* Built for AMD Zen 1 (-march=native or -mtune=znver1 there): kvq__codes16
   avoids its variable shifts, slow on that core. tests/simd_check.c sets
   it to check that body on any AVX2 machine.                              */
#ifndef KVQ__ZEN1
#if KVQ__W == 8 && (defined(__tune_znver1__) || defined(__znver1__))
#define KVQ__ZEN1 1
#else
#define KVQ__ZEN1 0
#endif
#endif
/* The 16-lane helpers and the kernels built on them are forced inline where
   the lanes are vector registers (so the parts stay in them and the
   kernels' constants reach their loops). As 16 plain floats they are kept
   out of line: inlined, every helper's 16-step loop would be copied into
   every caller (kvq__exp16 alone grew to 69 KB under a sanitizer build,
   20x the compile time), for about 10% of speed.                         */
#if KVQ__W > 1
#define KVQ__VINLINE KVQ__INLINE
#elif defined(__GNUC__) || defined(__clang__)
#define KVQ__VINLINE __attribute__((noinline))
#else
#define KVQ__VINLINE
#endif
/* A kernel the compiler would inline or not as edits elsewhere shift its
   sizes: kvq__scores_channel, inlined into kvq__online_walk, gave its
   channel tiles fewer registers (AVX2, KIVI-4, 4 heads: +2.6%
   instructions), so it stays a call.                                    */
#if defined(__GNUC__) || defined(__clang__)
#define KVQ__NOINLINE __attribute__((noinline))
#else
#define KVQ__NOINLINE
#endif

#if KVQ__W > 1
#define KVQ__SIMD 1
#if KVQ__W == 4
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif
typedef float    kvq__vf __attribute__((vector_size(4 * KVQ__W)));   /* W floats */
typedef int32_t  kvq__vi __attribute__((vector_size(4 * KVQ__W)));
typedef uint32_t kvq__vu __attribute__((vector_size(4 * KVQ__W)));
typedef float    kvq__vf_unaligned __attribute__((vector_size(4 * KVQ__W), aligned(4), may_alias));
#define KVQ__VLOAD(p)        (*(const kvq__vf_unaligned *)(const void *)(p))
#define KVQ__VSTORE(p, v)    (*(kvq__vf_unaligned *)(void *)(p) = (v))
#define KVQ__VZERO           ((kvq__vf){ 0 })
#define kvq__vu_splat(x)     ((kvq__vu){ 0 } + (uint32_t)(x))
#define kvq__vf_of_vi(x)     __builtin_convertvector(x, kvq__vf)        /* value */
#define kvq__vi_of_vf(x)     __builtin_convertvector(x, kvq__vi)        /* value */
#define kvq__vf_bits(x)      ((kvq__vf)(x))                             /* bits  */
/* a > b ? a : b and a < b ? a : b lane by lane. x86's maxps / minps are
   defined as exactly that (the second operand when the compare is false:
   equal zeros, NaN), so one instruction; elsewhere by masks (NEON's fmax
   orders -0 < +0 and would differ).                                       */
#if KVQ__W == 16
#define kvq__vmax(a, b)      ((kvq__vf)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define kvq__vmin(a, b)      ((kvq__vf)_mm512_min_ps((__m512)(a), (__m512)(b)))
#elif KVQ__W == 8
#define kvq__vmax(a, b)      ((kvq__vf)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define kvq__vmin(a, b)      ((kvq__vf)_mm256_min_ps((__m256)(a), (__m256)(b)))
#else
#define kvq__vmax(a, b)      kvq__vselect((a) > (b), a, b)
#define kvq__vmin(a, b)      kvq__vselect((a) < (b), a, b)
#endif
#define kvq__vselect(m, a, b) \
    ((kvq__vf)(((kvq__vi)(a) & (m)) | ((kvq__vi)(b) & ~(m))))
#else
typedef float    kvq__vf;
typedef int32_t  kvq__vi;
typedef uint32_t kvq__vu;
#define KVQ__VLOAD(p)        (*(p))
#define KVQ__VSTORE(p, v)    (*(p) = (v))
#define KVQ__VZERO           0.0f
#define kvq__vu_splat(x)     ((uint32_t)(x))
#define kvq__vf_of_vi(x)     ((float)(x))
#define kvq__vi_of_vf(x)     ((int32_t)(x))
#define kvq__vf_bits(x)      kvq__bits_f32((uint32_t)(x))
#define kvq__vmax(a, b)      ((a) > (b) ? (a) : (b))
#define kvq__vmin(a, b)      ((a) < (b) ? (a) : (b))
#endif

/* KVQ__VFMA(acc, a, x) = acc + a x on one part                             */
#if !defined(KVQ__FMA)
#define KVQ__VFMA(acc, a, x) ((acc) + (a) * (x))
#elif KVQ__W == 16
#define KVQ__VFMA(acc, a, x) ((kvq__vf)_mm512_fmadd_ps((__m512)(a), (__m512)(x), (__m512)(acc)))
#elif KVQ__W == 8
#define KVQ__VFMA(acc, a, x) ((kvq__vf)_mm256_fmadd_ps((__m256)(a), (__m256)(x), (__m256)(acc)))
#elif KVQ__W == 4
#define KVQ__VFMA(acc, a, x) ((kvq__vf)vfmaq_f32((float32x4_t)(acc), (float32x4_t)(a), (float32x4_t)(x)))
#else
#define KVQ__VFMA(acc, a, x) fmaf(a, x, acc)
#endif

typedef struct kvq__v16 { kvq__vf part[KVQ__PARTS]; } kvq__v16;
typedef struct kvq__u16 { kvq__vu part[KVQ__PARTS]; } kvq__u16;   /* 16 uint32 */
/* 16 floats aligned as the vector parts, for stack buffers written a
   vector at a time and read back soon after. A 32-byte store the compiler
   cannot prove aligned is split into two 16-byte halves when tuned for
   Zen 1 (gcc -mtune=znver1), and a 32-byte load of the two halves is not
   forwarded from the store buffer: it waits for both to be written (a
   stall each time, the per-token quantizer's min and max loop doubled).
   kvq__store16a stores whole vectors.                                    */
typedef union kvq__blk16 { kvq__vf part[KVQ__PARTS]; float f[16]; } kvq__blk16;

#define KVQ__EACH(k) for ((k) = 0; (k) < KVQ__PARTS; (k)++)
static KVQ__VINLINE kvq__v16 kvq__load16(const float *p)
{
    kvq__v16 v;
    int k;
    KVQ__EACH(k) v.part[k] = KVQ__VLOAD(p + k * KVQ__W);
    return v;
}
static KVQ__VINLINE void kvq__store16(float *p, kvq__v16 v)
{
    int k;
    KVQ__EACH(k) KVQ__VSTORE(p + k * KVQ__W, v.part[k]);
}
static KVQ__VINLINE void kvq__store16a(kvq__blk16 *p, kvq__v16 v)
{
    int k;
    KVQ__EACH(k) p->part[k] = v.part[k];
}
static KVQ__VINLINE kvq__v16 kvq__splat16(float x)
{
    kvq__v16 v;
    int k;
    KVQ__EACH(k) v.part[k] = x - KVQ__VZERO;              /* x - 0 = x, -0 too */
    return v;
}
static KVQ__VINLINE kvq__v16 kvq__add16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] + b.part[k];
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__sub16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] - b.part[k];
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__mul16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] * b.part[k];
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__div16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = a.part[k] / b.part[k];
    return a;
}
/* acc + a x, fused where KVQ__FMA (one rounding), else a product then a
   sum                                                                     */
static KVQ__VINLINE kvq__v16 kvq__madd16(kvq__v16 acc, kvq__v16 a, kvq__v16 x)
{
    int k;
    KVQ__EACH(k) acc.part[k] = KVQ__VFMA(acc.part[k], a.part[k], x.part[k]);
    return acc;
}
static KVQ__VINLINE kvq__v16 kvq__max16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = kvq__vmax(a.part[k], b.part[k]);
    return a;
}
static KVQ__VINLINE kvq__v16 kvq__min16(kvq__v16 a, kvq__v16 b)
{
    int k;
    KVQ__EACH(k) a.part[k] = kvq__vmin(a.part[k], b.part[k]);
    return a;
}
/* |x| lane by lane: the sign bit cleared                                 */
static KVQ__VINLINE kvq__v16 kvq__abs16(kvq__v16 x)
{
    int k;
#if KVQ__W > 1
    KVQ__EACH(k) x.part[k] = kvq__vf_bits((kvq__vu)x.part[k] & kvq__vu_splat(0x7FFFFFFFu));
#else
    KVQ__EACH(k) x.part[k] = fabsf(x.part[k]);
#endif
    return x;
}
/* round half to even, for |x| < 2^22: (x + 1.5 2^23) - 1.5 2^23           */
static KVQ__VINLINE kvq__v16 kvq__round16(kvq__v16 x)
{
    const kvq__v16 magic = kvq__splat16(12582912.0f);
    return kvq__sub16(kvq__add16(x, magic), magic);
}
/* rintf of 16 lanes as uint32, for integral results in 0 .. 2^22. x86's
   vcvtps2dq converts by MXCSR's rounding mode, the mode rintf rounds by
   (nearest even unless the caller changed it): one instruction, where
   kvq__round16 and a truncating conversion take three; elsewhere those. */
static KVQ__VINLINE kvq__u16 kvq__rint_u16(kvq__v16 x)
{
    kvq__u16 r;
    int k;
#if KVQ__W == 16
    KVQ__EACH(k) r.part[k] = (kvq__vu)_mm512_cvtps_epi32((__m512)x.part[k]);
#elif KVQ__W == 8
    KVQ__EACH(k) r.part[k] = (kvq__vu)_mm256_cvtps_epi32((__m256)x.part[k]);
#else
    x = kvq__round16(x);
    KVQ__EACH(k) r.part[k] = (kvq__vu)kvq__vi_of_vf(x.part[k]);
#endif
    return r;
}
/* 2^n for integral n in -127..128 held as floats: n + 127 into the
   exponent field (n = -127 gives +0)                                      */
static KVQ__VINLINE kvq__v16 kvq__exp2i16(kvq__v16 n)
{
    int k;
    KVQ__EACH(k) n.part[k] = kvq__vf_bits((kvq__vi_of_vf(n.part[k]) + 127) << 23);
    return n;
}

#if KVQ__W == 4
/* 4 stored halves -> 4 floats by AArch64's fcvtl (exact, as every fp16 ->
   fp32 conversion is)                                                     */
static KVQ__INLINE float32x4_t kvq__f16x4(const kvq_f16 *h)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)h)));
}
#endif

/* A vector's 16 lanes folded by + (max = 0) or by max (max = 1) in one
   fixed order: lane j (+) lane j + 8, then + 4, + 2, + 1; lane 0 is the
   result. The sum's order is what makes it reproducible; the max is exact
   in any order, and exact here for the finite values it is given. Always
   inlined, so that max is a constant.                                   */
static KVQ__INLINE float kvq__hfold16(const kvq__v16 *v, int max)
{
#if KVQ__W == 16 || KVQ__W == 8             /* by shuffles */
    __m256 a8, b8;
    __m128 s4, s2;
#if KVQ__W == 16
    a8 = _mm512_castps512_ps256((__m512)v->part[0]);
    b8 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd((__m512)v->part[0]), 1));
#else
    a8 = (__m256)v->part[0];
    b8 = (__m256)v->part[1];
#endif
    a8 = max ? _mm256_max_ps(a8, b8) : _mm256_add_ps(a8, b8);                 /* + 8 */
    s4 = _mm256_castps256_ps128(a8);
    s4 = max ? _mm_max_ps(s4, _mm256_extractf128_ps(a8, 1))
             : _mm_add_ps(s4, _mm256_extractf128_ps(a8, 1));                   /* + 4 */
    s2 = max ? _mm_max_ps(s4, _mm_movehl_ps(s4, s4)) : _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s2 = max ? _mm_max_ss(s2, _mm_shuffle_ps(s2, s2, 1))                       /* + 1 */
             : _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s2);
#elif KVQ__W == 4
    float32x4_t p0 = (float32x4_t)v->part[0], p1 = (float32x4_t)v->part[1];
    float32x4_t p2 = (float32x4_t)v->part[2], p3 = (float32x4_t)v->part[3];
    float32x4_t s4 = max ? vmaxq_f32(vmaxq_f32(p0, p2), vmaxq_f32(p1, p3))
                         : vaddq_f32(vaddq_f32(p0, p2), vaddq_f32(p1, p3));
    float32x2_t s2 = max ? vmax_f32(vget_low_f32(s4), vget_high_f32(s4))       /* + 2 */
                         : vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    float a = vget_lane_f32(s2, 0), b = vget_lane_f32(s2, 1);
    return max ? (b > a ? b : a) : a + b;                                      /* + 1 */
#else
    float lane[16];
    size_t i, j;
    kvq__store16(lane, *v);
    for (j = 8; j > 0; j /= 2)
        for (i = 0; i < j; i++)
            lane[i] = max ? (lane[i + j] > lane[i] ? lane[i + j] : lane[i]) : lane[i] + lane[i + j];
    return lane[0];
#endif
}

/* The sum of a vector's 16 lanes in kvq__hfold16's order.                 */
static KVQ__VINLINE float kvq__hsum16(const kvq__v16 *v) { return kvq__hfold16(v, 0); }

/* The largest of a vector's 16 lanes.                                     */
static KVQ__VINLINE float kvq__hmax16(const kvq__v16 *v) { return kvq__hfold16(v, 1); }

/* e^x lane by lane for x <= 0, within 2 ulp of e^x on [-87, 0] and +0
   below about -87.7 (where e^x < 2^-126; -inf included). Cody-Waite: x =
   n ln2 + r with n = round(x log2 e) and ln2 in two parts, so r is exact
   to |r| <= ln2/2; e^r by Cephes expf's degree-5 polynomial; then 2^n
   into the exponent. The same operations, in the same order, in both the
   vector and the plain 16-lane builds.                                     */
static KVQ__VINLINE void kvq__exp16(kvq__v16 *v)
{
    kvq__v16 n, r, p, x = kvq__max16(*v, kvq__splat16(-88.0f));   /* n >= -127 */
    n = kvq__round16(kvq__mul16(x, kvq__splat16(1.44269504088896341f)));
    r = kvq__sub16(x, kvq__mul16(n, kvq__splat16(0.693359375f)));
    r = kvq__sub16(r, kvq__mul16(n, kvq__splat16(-2.12194440e-4f)));
    p = kvq__splat16(1.9875691500e-4f);
    p = kvq__madd16(kvq__splat16(1.3981999507e-3f), p, r);
    p = kvq__madd16(kvq__splat16(8.3334519073e-3f), p, r);
    p = kvq__madd16(kvq__splat16(4.1665795894e-2f), p, r);
    p = kvq__madd16(kvq__splat16(1.6666665459e-1f), p, r);
    p = kvq__madd16(kvq__splat16(5.0000001201e-1f), p, r);
    p = kvq__madd16(kvq__add16(r, kvq__splat16(1.0f)), p, kvq__mul16(r, r));
    *v = kvq__mul16(p, kvq__exp2i16(n));
}


/* a . b in a fixed order: lane j (0..15) sums the products of i = j,
   j + 16, j + 32, ... in increasing i, then the lanes are added pairwise
   (lane j += lane j + 8, then + 4, + 2, + 1). Every dot product of a query
   with a row or a group of codes uses this function, so the order is the
   same everywhere on the CPU.                                             */
static KVQ__VINLINE float kvq__dot(const float *a, const float *b, size_t n)
{
    float lane[16];
    size_t i = 0, j, n16 = n & ~(size_t)15;
    kvq__v16 acc = kvq__splat16(0.0f);
    for (; i < n16; i += 16) acc = kvq__madd16(acc, kvq__load16(a + i), kvq__load16(b + i));
    kvq__store16(lane, acc);
    for (j = 0; i < n; i++, j++) lane[j] += a[i] * b[i];
    acc = kvq__load16(lane);
    return kvq__hsum16(&acc);
}

/* q . k for one per-token key whose D codes are given as floats, group g
   with stored (s_g, z_g) -> (a_g, b_g) and qsum_g = sum of q over group g:
       q . k = sum_g a_g (q_g . c_g) + sum_g b_g qsum_g
   Order: for G a multiple of 16, each group's 16-lane partial sums of
   q_d c_d are scaled by a_g and added into one 16-lane total, whose lanes
   are added once (kvq__dot's tree); then the b_g qsum_g terms in group
   order. Other G: a_g kvq__dot(q_g, c_g) + b_g qsum_g, group by group.    */
static float kvq__token_key_dot(const float *q, const float *codes, const kvq_sz *sz,
                                const float *qsum, size_t D, size_t G, kvq_zero_mode mode)
{
    size_t g, i, n_groups = D / G;
    float a, b, total = 0.0f;
    if (G % 16 == 0) {
        kvq__v16 sum = kvq__splat16(0.0f);
        for (g = 0; g < n_groups; g++) {
            kvq__v16 part = kvq__splat16(0.0f);
            for (i = g * G; i < (g + 1) * G; i += 16)
                part = kvq__madd16(part, kvq__load16(q + i), kvq__load16(codes + i));
            kvq__affine(sz[g], mode, &a, &b);
            sum = kvq__madd16(sum, kvq__splat16(a), part);
        }
        total = kvq__hsum16(&sum);
        for (g = 0; g < n_groups; g++) {
            kvq__affine(sz[g], mode, &a, &b);
            total += b * qsum[g];
        }
        return total;
    }
    for (g = 0; g < n_groups; g++) {
        kvq__affine(sz[g], mode, &a, &b);
        total += a * kvq__dot(q + g * G, codes + g * G, G) + b * qsum[g];
    }
    return total;
}

/* D stored halves -> floats: 8 at a time with vcvtph2ps where the target
   has F16C, 4 at a time with AArch64's fcvtl, else the exact integer
   conversion (identical: fp16 -> fp32 is exact; simd_check).              */
static void kvq__f16_row(const kvq_f16 *h, size_t D, float *out)
{
    size_t d = 0;
#if !defined(KVQ_NO_SIMD) && defined(__F16C__)
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(out + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + d))));
#elif KVQ__W == 4
    for (; d + 4 <= D; d += 4) vst1q_f32(out + d, kvq__f16x4(h + d));
#endif
    for (; d < D; d++) out[d] = kvq__f16_to_f32(h[d]);
}

/* ------------------------------------------------------------------------ */
/* II.2 the fast quantizer                                                  */
/* ------------------------------------------------------------------------ */
/* ---- the fast quantizer ------------------------------------------------
   kvq_quantize_group is the definition (Sec. 4): per group min and max,
   (s, z) stored in fp16, code = round-half-even(clamp(v, 0, N)) with
   v = (x - z) / s (float zero) or x / s + z (integer zero). The loops below
   compute exactly that, 16 values at a time on the vector layer (II.1),
   both axes through kvq__encode16: min and max are exact in any order; v
   uses the same division; the rounding is (v + 1.5 2^23) - 1.5 2^23, which
   for |v| < 2^22 rounds half to even exactly as rintf does; codes go
   straight into words. tests/test_quant.c checks every code and (s, z)
   against kvq_quantize_group.                                             */

/* The largest |x| of n values in 16 lanes, or -1 if one is not finite.
   Inside KVQ_MAX_ABS_INPUT every group's (s, z) fits fp16 (Sec. 2), so a
   matrix that passes this needs no per-group range check. A pure stream:
   each 64-byte step also asks for the line KVQ__CHECK_AHEAD floats on
   (4 KB), which Zen 1's own prefetchers leave to demand misses: cold,
   over 33.6 MB, the quantizer 8-12% faster with it, the per-token one
   another 7-12% with its own prefetch (kvq_quantize_matrix).            */
#define KVQ__CHECK_AHEAD 1024
static float kvq__absmax_or_nonfinite(const float *x, size_t n)
{
    /* |x| as max(x, -x); x - x is 0 for a finite x and NaN otherwise, so
       a non-finite value anywhere makes the running sum `bad` NaN         */
    kvq__v16 m = kvq__splat16(0.0f), bad = kvq__splat16(0.0f), zero = kvq__splat16(0.0f);
    float amax, nonfinite;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        kvq__v16 v = kvq__load16(x + i);
        kvq__prefetch(x + (i + KVQ__CHECK_AHEAD < n ? i + KVQ__CHECK_AHEAD : i), 64);  /* inside x */
        m = kvq__max16(m, kvq__max16(v, kvq__sub16(zero, v)));
        bad = kvq__add16(bad, kvq__sub16(v, v));
    }
    amax = kvq__hmax16(&m);
    nonfinite = kvq__hsum16(&bad);
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
        nonfinite += x[i] - x[i];
    }
    return nonfinite != 0.0f ? -1.0f : amax;
}

/* Per-channel groups, 16 channels at a time: lane j is the min and max of
   channel j over n rows (row stride D); bad[j] != 0 if one is not finite.
   Vertical, so every row is one vector min, max and check, in registers
   (x - x is 0 for a finite x and NaN otherwise, and a NaN stays in the
   running sum; lo and hi are only used where every value was finite).   */
static void kvq__minmax16_rows(const float *x, size_t n, size_t D, float *lo, float *hi, int *bad)
{
    kvq__v16 vlo = kvq__load16(x), vhi = vlo, check = kvq__splat16(0.0f);
    float sum[16];
    size_t t, j;
    for (t = 0; t < n; t++) {
        kvq__v16 v = kvq__load16(x + t * D);
        vlo = kvq__min16(v, vlo);                     /* v < lo ? v : lo   */
        vhi = kvq__max16(v, vhi);                     /* v > hi ? v : hi   */
        check = kvq__add16(check, kvq__sub16(v, v));
    }
    kvq__store16(lo, kvq__add16(vlo, kvq__splat16(0.0f)));   /* -0 -> +0 */
    kvq__store16(hi, kvq__add16(vhi, kvq__splat16(0.0f)));
    kvq__store16(sum, check);
    for (j = 0; j < 16; j++) bad[j] = sum[j] != 0.0f;
}

/* The same min and max, of nc channels (16 | nc, nc <= KVQ__RUN_CHANNELS)
   over n rows, without the check: lane c of block b is channel 16 b + c,
   the same operations on each lane in the same row order, so the same
   floats. The rows are walked 32 channels (two blocks) at a time, their
   running min and max in registers: kept in L1 instead, every row costs
   two stores a block, which bounded the per-channel quantizer on Zen 1
   (one store a cycle; a unit in L2 took 20% longer). A walk reads 128
   bytes of each row; the first walk brings the unit in from DRAM and the
   rest find it in cache (16 KB at G = 32, D = 128: no slower cold than
   the whole-row walk, bench_cpu --quantize).                            */
#define KVQ__RUN_CHANNELS 256
static KVQ__INLINE void kvq__minmax_walk(const float *x, size_t n, size_t D, int blocks,
                                         kvq__blk16 *lo /* (blocks) */, kvq__blk16 *hi)
{
    kvq__v16 l[2], h[2];
    size_t t;
    int b;
    for (b = 0; b < blocks; b++) l[b] = h[b] = kvq__load16(x + 16 * b);
    for (t = 1; t < n; t++)
        for (b = 0; b < blocks; b++) {
            const kvq__v16 v = kvq__load16(x + t * D + 16 * b);
            l[b] = kvq__min16(v, l[b]);                 /* v < lo ? v : lo */
            h[b] = kvq__max16(v, h[b]);                 /* v > hi ? v : hi */
        }
    for (b = 0; b < blocks; b++) {                      /* -0 -> +0        */
        kvq__store16a(lo + b, kvq__add16(l[b], kvq__splat16(0.0f)));
        kvq__store16a(hi + b, kvq__add16(h[b], kvq__splat16(0.0f)));
    }
}

static void kvq__minmax_run(const float *x, size_t n, size_t D, size_t nc,
                            kvq__blk16 *lo /* (nc / 16) */, kvq__blk16 *hi /* (nc / 16) */)
{
    size_t c;
    for (c = 0; c + 32 <= nc; c += 32) kvq__minmax_walk(x + c, n, D, 2, lo + c / 16, hi + c / 16);
    if (c < nc) kvq__minmax_walk(x + c, n, D, 1, lo + c / 16, hi + c / 16);
}

/* a / s lane by lane, the correctly rounded quotient, given r = 1 / s
   (itself a correctly rounded division). With fused multiply-adds without
   a division (Markstein's theorem, as in IA-64's divide): q = a r is
   within an ulp of a / s, the residual a - q s is then exact, and
   q + (a - q s) r rounds to a / s. Zen 1 retires a vector divide once per
   6 cycles at best, these three in about 2. The residual is not exact
   where it falls below the normal range, |a / s| < 2^-80 here (s >= 2^-24
   is an fp16 scale): such a quotient rounds to code 0 either way, and
   tests/simd_check.c compares every code. Without fused multiply-adds,
   the division.                                                          */
static KVQ__VINLINE kvq__v16 kvq__quot16(kvq__v16 a, kvq__v16 s, kvq__v16 r)
{
#if defined(KVQ__FMA)
    kvq__v16 q = kvq__mul16(a, r), minus_q;
    int k;
    KVQ__EACH(k) minus_q.part[k] = -q.part[k];
    return kvq__madd16(q, kvq__madd16(a, minus_q, s), r);
#else
    (void)r;
    return kvq__div16(a, s);
#endif
}

/* Sec. 4's code of 16 values lane by lane: float zero, v = (x - z) / s
   clamped to [0, N]; integer zero, v = x / s clamped to [-zp, N - zp];
   both with max and min (the same codes as the scalar comparisons: they
   differ only on -0, which rounds to code 0 either way), rounded as rintf
   (kvq__rint_u16), the integer zero's zp added after the rounding. s, z
   and N per lane: one group's for a run of values, or 16 groups' side by
   side.                                                                  */
static KVQ__VINLINE kvq__u16 kvq__encode16(kvq__v16 x, kvq__v16 s, kvq__v16 r, kvq__v16 z,
                                           kvq__v16 n_levels, kvq_zero_mode mode)
{
    kvq__v16 lo, hi;
    kvq__u16 c;
    int k;
    if (mode == KVQ_ZERO_FLOAT)
        return kvq__rint_u16(kvq__min16(kvq__max16(kvq__quot16(kvq__sub16(x, z), s, r),
                                                   kvq__splat16(0.0f)), n_levels));
    lo = kvq__sub16(kvq__splat16(0.0f), z);            /* -zp, exact       */
    hi = kvq__sub16(n_levels, z);                      /* N - zp, exact    */
    c = kvq__rint_u16(kvq__min16(kvq__max16(kvq__quot16(x, s, r), lo), hi));
    KVQ__EACH(k) c.part[k] += (kvq__vu)kvq__vi_of_vf(z.part[k]);   /* zp: integral */
    return c;
}

/* The codes of 16 consecutive values under one group's stored (s, z).    */
static void kvq__codes16_of(const float *x, float s, float z, float n_levels,
                            kvq_zero_mode mode, uint32_t *code)
{
    kvq__u16 c = kvq__encode16(kvq__load16(x), kvq__splat16(s), kvq__splat16(1.0f / s),
                               kvq__splat16(z), kvq__splat16(n_levels), mode);
    memcpy(code, c.part, sizeof c.part);                /* vector stores    */
}

/* The packed words of 16 groups side by side, lane j = group j: value c
   of lane j at x[c * stride + j], c < G; code c into word c / (32/B) at
   bit (c % (32/B)) B (Sec. 5), word w of group j to words[j wpg + w].
   sc, zc: each group's stored (s, z), s = 0 where every code is 0 (a
   constant float-zero group); such a lane computes with s = 1, z = 0 and
   its words are cleared whole. B and the zero mode reach the body as
   constants (kvq__words16 below), so a word's shifts are a running count,
   with no division by 32/B per code.                                    */
static KVQ__INLINE void kvq__words16_b(const float *x, size_t stride, size_t G,
                                       const float *sc, const float *zc, int bits,
                                       kvq_zero_mode mode, uint32_t *words /* (16, wpg) */)
{
    const kvq__v16 n_levels = kvq__splat16((float)((1u << bits) - 1u));
    const size_t wpg = kvq_packed_words(G, bits);
    float s_lane[16], z_lane[16];
    uint32_t keep[16];
    kvq__v16 s, r, z;
    size_t c = 0, w, j;
    for (j = 0; j < 16; j++) {
        keep[j] = sc[j] == 0.0f ? 0u : ~0u;
        s_lane[j] = sc[j] == 0.0f ? 1.0f : sc[j];
        z_lane[j] = sc[j] == 0.0f ? 0.0f : zc[j];
    }
    s = kvq__load16(s_lane);
    z = kvq__load16(z_lane);
    r = kvq__div16(kvq__splat16(1.0f), s);          /* once per 16 groups */
    for (w = 0; w < wpg; w++) {
        kvq__vu word[KVQ__PARTS];
        uint32_t out[16];
        unsigned shift;
        int k;
        KVQ__EACH(k) word[k] = kvq__vu_splat(0);
        for (shift = 0; shift < 32u && c < G; shift += (unsigned)bits, c++) {
            const kvq__u16 code = kvq__encode16(kvq__load16(x + c * stride), s, r, z, n_levels, mode);
            KVQ__EACH(k) word[k] |= code.part[k] << shift;
        }
        memcpy(out, word, sizeof out);
        for (j = 0; j < 16; j++) words[j * wpg + w] = out[j] & keep[j];
    }
}

static void kvq__words16(const float *x, size_t stride, size_t G, const float *s /* (16) */,
                         const float *z /* (16) */, int bits, kvq_zero_mode mode, uint32_t *words)
{
#define KVQ__WORDS16_B(b) (mode == KVQ_ZERO_FLOAT ? kvq__words16_b(x, stride, G, s, z, b, KVQ_ZERO_FLOAT, words) \
                                                  : kvq__words16_b(x, stride, G, s, z, b, KVQ_ZERO_INT, words))
    switch (bits) {                             /* B and the mode as constants */
    case 1:  KVQ__WORDS16_B(1); break;
    case 2:  KVQ__WORDS16_B(2); break;
    case 4:  KVQ__WORDS16_B(4); break;
    default: KVQ__WORDS16_B(8); break;
    }
#undef KVQ__WORDS16_B
}

/* OR 16 codes, code indices c0 .. c0+15 (c0 a multiple of 16), into their
   words: B = 2 fills one word, B = 4 two, B = 8 four, B = 1 half of one.
   The codes occupy disjoint bits, so the OR of a word's lanes is the same
   in any order and the compiler may reduce them in vector lanes.          */
static KVQ__INLINE void kvq__pack16_b(const uint32_t *code, size_t c0, int bits, uint32_t *w)
{
    size_t per = 32u / (unsigned)bits, lanes = per < 16 ? per : 16, k, i;
    unsigned base = (unsigned)(c0 % per) * (unsigned)bits;
    for (k = 0; k < 16 / lanes; k++) {
        uint32_t word = 0;
        for (i = 0; i < lanes; i++)
            word |= code[k * lanes + i] << (base + (unsigned)(i * (size_t)bits));
        w[(c0 + k * lanes) / per] |= word;
    }
}

static void kvq__pack16(const uint32_t *code, size_t c0, int bits, uint32_t *w)
{
    switch (bits) {                                     /* B as a constant   */
    case 1:  kvq__pack16_b(code, c0, 1, w); break;
    case 2:  kvq__pack16_b(code, c0, 2, w); break;
    case 4:  kvq__pack16_b(code, c0, 4, w); break;
    default: kvq__pack16_b(code, c0, 8, w); break;
    }
}

/* Quantize one unit: rows X (tokens_per_unit, D) -> words, sz of the unit.
   The caller has checked sizes, finiteness and range.
     per-token    D/G groups of G consecutive values: 16 codes at a time,
                  OR-ed into their words
     per-channel  D groups of G tokens with stride D: 16 channels at a time,
                  so each token adds one code to 16 channels' words        */
/* kvq__quantize_unit's per-channel unit, 16 | D: 16 channels at a time,
   each channel's min and max from kvq__minmax_run, then each token adds
   one code to 16 channels' words, held in vector lanes until full.      */
static kvq_status kvq__quantize_channels16(const float *X /* (G, D) */, size_t D, int bits,
                                           size_t G, kvq_zero_mode mode,
                                           uint32_t *words, kvq_sz *sz)
{
    size_t wpg = kvq_packed_words(G, bits), g;
    kvq__blk16 lo_run[KVQ__RUN_CHANNELS / 16], hi_run[KVQ__RUN_CHANNELS / 16];
    for (g = 0; g < D; g += 16) {               /* per-channel, 16 at a time */
        float s[16], z[16], *lo = lo_run[g % KVQ__RUN_CHANNELS / 16].f,
              *hi = hi_run[g % KVQ__RUN_CHANNELS / 16].f;
        if (g % KVQ__RUN_CHANNELS == 0)         /* the next run's min, max  */
            kvq__minmax_run(X + g, G, D, D - g < KVQ__RUN_CHANNELS ? D - g : KVQ__RUN_CHANNELS,
                            lo_run, hi_run);
        {
            kvq_status st = kvq__params16(lo, hi, bits, mode, sz + g, s, z);
            if (st != KVQ_OK) return st;
        }
        /* where s = 0 (a constant float-zero group, or a scale that
           underflowed) every code is 0 (kvq__words16)                    */
        kvq__words16(X + g, D, G, s, z, bits, mode,
                     words + g * wpg);   /* token t of 16 channels: one row */
    }
    return KVQ_OK;
}

static kvq_status kvq__quantize_unit(const float *X, size_t D, int bits,
                                     size_t G, kvq_axis axis,
                                     kvq_zero_mode mode,
                                     uint32_t *words, kvq_sz *sz)
{
    size_t wpg = kvq_packed_words(G, bits), per = 32u / (unsigned)bits, g, i, j;
    float n_levels = (float)((1u << bits) - 1u);
    uint32_t code[16];
    if (axis == KVQ_PER_TOKEN || D % 16 != 0) {
        size_t n_groups = axis == KVQ_PER_TOKEN ? D / G : D, stride = axis == KVQ_PER_TOKEN ? 1 : D;
        for (g = 0; g < n_groups; g++) {
            /* per-token: channels g*G .. g*G+G-1 of the token (stride 1);
               per-channel: tokens 0..G-1 of channel g (stride D)           */
            const float *x = axis == KVQ_PER_TOKEN ? X + g * G : X + g;
            uint32_t *w = words + g * wpg;
            float mn, mx, s, z;
            kvq_status st;
            kvq__minmax_check(x, G, stride, &mn, &mx);
            st = kvq__group_params(mn, mx, bits, mode, &sz[g]);
            if (st != KVQ_OK) return st;
            s = kvq__f16_stored(sz[g].scale);
            z = kvq__f16_stored(sz[g].zero);
            for (i = 0; i < wpg; i++) w[i] = 0;
            if (s == 0.0f) continue;            /* constant group: all 0   */
            for (i = 0; i < G; i += 16) {
                size_t m = G - i < 16 ? G - i : 16;
                if (stride == 1 && m == 16) {
                    kvq__codes16_of(x + i, s, z, n_levels, mode, code);
                    kvq__pack16(code, i, bits, w);
                    continue;
                }
                for (j = 0; j < m; j++) code[j] = kvq__code(x[(i + j) * stride], sz[g], bits, mode);
                for (j = 0; j < m; j++)
                    w[(i + j) / per] |= code[j] << ((i + j) % per * (size_t)bits);
            }
        }
        return KVQ_OK;
    }
    return kvq__quantize_channels16(X, D, bits, G, mode, words, sz);
}

/* col[a].f[r] = x[r * stride + a] for a, r < 16: a 16 x 16 block of floats
   transposed, rows of x into columns. By shuffles in registers on every
   vector ISA (log2 of the width stages of pairwise interleaves, as in any
   SIMD transpose), element by element otherwise. Scalar stores followed
   by a vector load of the same bytes cannot be forwarded and stall, which
   made the element-wise copy a third of the per-token quantizer's time.  */
static KVQ__INLINE void kvq__transpose16(const float *x, size_t stride, kvq__blk16 *col)
{
#if KVQ__W == 16
    __m512 r[16], t[16];
    int a;
    for (a = 0; a < 16; a++) r[a] = _mm512_loadu_ps(x + (size_t)a * stride);
    for (a = 0; a < 16; a += 2) {         /* interleave lanes of row pairs */
        t[a]     = _mm512_unpacklo_ps(r[a], r[a + 1]);
        t[a + 1] = _mm512_unpackhi_ps(r[a], r[a + 1]);
    }
    for (a = 0; a < 16; a += 4) {         /* then pairs of lanes            */
        __m512d lo = _mm512_castps_pd(t[a]), hi = _mm512_castps_pd(t[a + 1]);
        __m512d lo2 = _mm512_castps_pd(t[a + 2]), hi2 = _mm512_castps_pd(t[a + 3]);
        r[a]     = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        r[a + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        r[a + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        r[a + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
    for (a = 0; a < 8; a++) {             /* then 128-bit blocks, twice     */
        int src = (a / 4) * 8 + a % 4;
        t[2 * a]     = _mm512_shuffle_f32x4(r[src], r[src + 4], 0x88);
        t[2 * a + 1] = _mm512_shuffle_f32x4(r[src], r[src + 4], 0xdd);
    }
    for (a = 0; a < 8; a++) {
        int src = a % 4 * 2 + a / 4;
        r[a]     = _mm512_shuffle_f32x4(t[src], t[src + 8], 0x88);
        r[a + 8] = _mm512_shuffle_f32x4(t[src], t[src + 8], 0xdd);
    }
    for (a = 0; a < 16; a++) _mm512_store_ps(col[a].f, r[a]);
#elif KVQ__W == 8
    int rb, cb, a;                        /* four 8 x 8 blocks              */
    for (rb = 0; rb < 16; rb += 8)
        for (cb = 0; cb < 16; cb += 8) {
            /* t[a]: values cb .. cb+3 of row rb+a in the low 128 bits and
               of row rb+a+4 in the high, t[a+4] values cb+4 .. cb+7. The
               loads pair the halves (vinsertf128 from memory), so what is
               left is a 4 x 4 transpose within each half: Zen 1 moves data
               across halves slowly (vperm2f128, 8 micro-ops).            */
            __m256 t[8], u[4];
            for (a = 0; a < 4; a++) {
                const float *p = x + (size_t)(rb + a) * stride + cb, *q = p + 4 * stride;
                t[a]     = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), _mm_loadu_ps(q), 1);
                t[a + 4] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + 4)),
                                                _mm_loadu_ps(q + 4), 1);
            }
            for (a = 0; a < 8; a += 4) {
                u[0] = _mm256_unpacklo_ps(t[a], t[a + 1]);
                u[1] = _mm256_unpackhi_ps(t[a], t[a + 1]);
                u[2] = _mm256_unpacklo_ps(t[a + 2], t[a + 3]);
                u[3] = _mm256_unpackhi_ps(t[a + 2], t[a + 3]);
                _mm256_store_ps(col[cb + a].f + rb,     _mm256_shuffle_ps(u[0], u[2], 0x44));
                _mm256_store_ps(col[cb + a + 1].f + rb, _mm256_shuffle_ps(u[0], u[2], 0xee));
                _mm256_store_ps(col[cb + a + 2].f + rb, _mm256_shuffle_ps(u[1], u[3], 0x44));
                _mm256_store_ps(col[cb + a + 3].f + rb, _mm256_shuffle_ps(u[1], u[3], 0xee));
            }
        }
#elif KVQ__W == 4
    int rb, cb;                           /* sixteen 4 x 4 blocks           */
    for (rb = 0; rb < 16; rb += 4)
        for (cb = 0; cb < 16; cb += 4) {
            const float *p = x + (size_t)rb * stride + cb;
            float32x4x2_t t0 = vtrnq_f32(vld1q_f32(p), vld1q_f32(p + stride));
            float32x4x2_t t1 = vtrnq_f32(vld1q_f32(p + 2 * stride), vld1q_f32(p + 3 * stride));
            vst1q_f32(col[cb].f + rb,     vcombine_f32(vget_low_f32(t0.val[0]), vget_low_f32(t1.val[0])));
            vst1q_f32(col[cb + 1].f + rb, vcombine_f32(vget_low_f32(t0.val[1]), vget_low_f32(t1.val[1])));
            vst1q_f32(col[cb + 2].f + rb, vcombine_f32(vget_high_f32(t0.val[0]), vget_high_f32(t1.val[0])));
            vst1q_f32(col[cb + 3].f + rb, vcombine_f32(vget_high_f32(t0.val[1]), vget_high_f32(t1.val[1])));
        }
#else
    size_t a, r;
    for (r = 0; r < 16; r++)
        for (a = 0; a < 16; a++) col[a].f[r] = x[r * stride + a];
#endif
}

/* 16 per-token groups side by side: x holds groups g0 .. g0+15 one after
   another (G values each, as a row-major matrix stores them), lane j of
   every vector below is group j. Each group's min and max, (s, z) and
   codes are those of kvq__quantize_unit (the same expressions, lane by
   lane), but nothing is reduced across lanes: the values are first copied
   into columns (col[i] = value i of all 16 groups), then min, max, codes
   and the words are built a column at a time. G <= KVQ__COLS_MAX.        */
/* kvq__group_params of 16 groups from their min and max (lo, hi: -0 as
   +0), and the stored (s, z) as floats. Float zero with F16C: 8 groups an
   instruction, the same s = (max - min) / N stored by the same rounding
   (vcvtps2ph, nearest even) as the scalar _cvtss_sh, z = min; a lane that
   does not fit fp16 sends all 16 through the scalar loop, which returns
   its error as before. s and z may alias lo and hi.                      */
static kvq_status kvq__params16(const float *lo, const float *hi, int bits, kvq_zero_mode mode,
                                kvq_sz *sz /* (16) */, float *s /* (16) */, float *z /* (16) */)
{
    size_t j;
#if !defined(KVQ_NO_SIMD) && defined(__F16C__)
    if (mode == KVQ_ZERO_FLOAT) {
        const __m256 n_levels = _mm256_set1_ps((float)((1u << bits) - 1u));
        uint16_t sh[16], zh[16], over = 0;
        for (j = 0; j < 16; j += 8) {
            const __m256 mn = _mm256_loadu_ps(lo + j), mx = _mm256_loadu_ps(hi + j);
            _mm_storeu_si128((__m128i *)(void *)(sh + j),
                             _mm256_cvtps_ph(_mm256_div_ps(_mm256_sub_ps(mx, mn), n_levels),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)(void *)(zh + j),
                             _mm256_cvtps_ph(mn, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        for (j = 0; j < 16; j++)            /* exponent all ones: inf, NaN */
            over |= (uint16_t)((sh[j] & 0x7c00u) == 0x7c00u) | (uint16_t)((zh[j] & 0x7c00u) == 0x7c00u);
        if (!over) {
            for (j = 0; j < 16; j += 8) {
                _mm256_storeu_ps(s + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sh + j))));
                _mm256_storeu_ps(z + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(zh + j))));
            }
            for (j = 0; j < 16; j++) { sz[j].scale = sh[j]; sz[j].zero = zh[j]; }
            return KVQ_OK;
        }
    }
#endif
    for (j = 0; j < 16; j++) {
        kvq_status st = kvq__group_params(lo[j], hi[j], bits, mode, &sz[j]);
        if (st != KVQ_OK) return st;
        s[j] = kvq__f16_stored(sz[j].scale);
        z[j] = kvq__f16_stored(sz[j].zero);
    }
    return KVQ_OK;
}

static void kvq__quantize_16_groups(const float *x /* (16, G) */, size_t G, int bits,
                                    kvq_zero_mode mode,
                                    uint32_t *words /* (16, wpg) */, kvq_sz *sz /* (16) */)
{
    kvq__blk16 col[KVQ__COLS_MAX];             /* col[i]: value i of each group */
    float s[16], z[16];
    size_t i, j;
    kvq__v16 lo, hi;
    if (G == 0 || G > KVQ__COLS_MAX) return;          /* callers never pass */
    for (i = 0; i + 16 <= G; i += 16) kvq__transpose16(x + i, G, col + i);
    for (; i < G; i++)                                /* G % 16 columns     */
        for (j = 0; j < 16; j++) col[i].f[j] = x[j * G + i];
    lo = hi = kvq__load16(col[0].f);
    for (i = 1; i < G; i++) {
        kvq__v16 c = kvq__load16(col[i].f);
        lo = kvq__min16(lo, c);
        hi = kvq__max16(hi, c);
    }
    kvq__store16(s, kvq__add16(lo, kvq__splat16(0.0f)));   /* -0 -> +0, as */
    kvq__store16(z, kvq__add16(hi, kvq__splat16(0.0f)));   /* minmax_check */
    (void)kvq__params16(s, z, bits, mode, sz, s, z);   /* the caller checked
                                                           every range   */
    kvq__words16(col[0].f, 16, G, s, z, bits, mode, words);   /* s = 0: codes 0 */
}

/* ------------------------------------------------------------------------ */
/* II.3 the ONLINE walk                                                     */
/* ------------------------------------------------------------------------ */
/* ---- ONLINE: one walk over the regions for a batch of heads -------------
   EAGER (Part I, Sec. 8) is the reference: it visits positions 0..n_pos-1
   and finds each one's key and value through the loc maps. ONLINE
   computes the same softmax but walks K where it is stored, region by
   region, KVQ_TILE entries at a time (a tile never spans two regions or
   two key units):

       quantized store  per-channel keys: up to 32 tokens of one unit;
                        per-token keys: 32 consecutive slots
       rows[0..4]       the live rows of each region, in order

   For each tile it computes every head's scores, applies the online
   softmax update, and adds the value of each present position, found
   through V's loc map (K and V of one position may sit in different
   regions: in KIVI a key is quantized while its value is in the window).
   Codes are unpacked, and fp16 rows converted, once per tile or row for
   all heads of the batch: with GQA the cache is read once per batch, not
   once per query head. No division or modulo per token on the common path.

   Summation order, the only difference from EAGER's result (the tests
   bound it): positions are visited in walk order, with the running max
   rescaled at tile boundaries, so the last bits also depend on the storage
   layout (compaction may move them), and within a tile the full-precision
   value rows are added first; both kinds go through kvq__tile_block (a
   quantized value's sum split in up to 4 partial sums per head, a row's
   in one; a tile whose entries are not consecutive in storage is added
   run by run); and 2-bit codes with one head (values, per-channel keys)
   and 2-bit per-token keys are added two codes at a time, each pair's
   term w c + w' c' first (kvq__pairs2_walk, kvq__token_block).
   Otherwise scores are the same expressions as EAGER's: a per-channel
   key's score sums channels 0..D-1 in order, dot products use kvq__dot's
   lane order, and a quantized value adds (w a) c + w b per channel.      */
typedef struct kvq__heads {
    size_t n;              /* heads in this batch                            */
    const float *q;        /* (n, D) their queries                           */
    float *out;            /* (n, D) running sum of w v                      */
    float *qa;             /* (n, D) q*a of the current key unit (per-channel
                              keys) or per-group sums of q (per-token keys)  */
    float *sc;             /* (n, KVQ_TILE) the tile's scores, then weights  */
    float *m, *l, *qb;     /* (n) running max, running sum, q.b of the unit  */
    float *row;            /* (D) one row of codes or of values, as floats   */
    const float *pairs;    /* (n, D/2, 16) 2-bit per-token keys' pair table
                              (kvq__key_pairs; (n, 3 D) for Zen 1), or NULL  */
    int32_t pos[KVQ_TILE]; /* the tile's positions; -1 = not attended        */
    float inv_sqrt_d;
} kvq__heads;


#if KVQ__W == 16 || KVQ__W == 8
/* kvq__codes16's tables: entry i is (float)(i mod 4), (float)i            */
static const float kvq__code_floats2[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
static const float kvq__code_floats4[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
#endif

/* 16 codes of a packed group, from code c0 (a multiple of 16), as floats:
   code i sits in word (i B) / 32 at bit (i B) % 32 (Sec. 5). For B = 2 and
   4 each part broadcasts its word and shifts each lane by its own amount
   (B = 2: one word for all 16 codes; B = 4: codes 0-7 in the first word,
   8-15 in the second, picked per lane by a mask); other B one by one.
   With AVX-512 (and AVX2 for B = 2) the shifted lane indexes a table of
   the codes' floats (vpermps reads its low 4 bits, 3 with AVX2: a table
   of period 4 for B = 2, read from memory, so it takes no register), one
   instruction for a mask and a conversion, and the same floats: small
   integers are exact. AVX2 at B = 2 shifts by lane once per 16 codes:
   codes 8-15 are codes 0-7's lanes shifted 16 more, by one immediate
   shift (Intel runs either shift on the same ports). Zen 1 retires a
   variable shift (vpsrlvd) only about once per 4 cycles: built for it
   (KVQ__ZEN1) each lane keeps its code in place, c 4^j, converts and
   scales by 4^-j (exact: the same floats) - one more instruction per 8
   codes, on the ports Intel needs for the multiply-adds, so only there. */
#if KVQ__W == 8 && KVQ__ZEN1
/* 4^-j, j = 0..7: the scale of kvq__codes16_placed's lane j and j + 8   */
static const float kvq__down4[8] = { 1.0f, 0.25f, 0.0625f, 0.015625f, 0.00390625f,
                                     0.0009765625f, 0.000244140625f, 0.00006103515625f };
/* Zen 1's 2-bit decode without its last step: lane j of part p holds code
   8 p + j where it sits, c 4^j (exact as a float). Codes 8-15 from the
   word's high half, broadcast by 16-bit lanes (x86: little-endian), so
   that no lane needs a shift at all. RAW: without the conversion either:
   the integer c 4^j's bits read as a float ARE the subnormal c 4^j 2^-149
   (exponent field 0, mantissa c 4^j < 2^23), exact and free where the
   weights carry the 2^149 (kvq__pair_blocks, PLACED = 2)                */
static KVQ__VINLINE void kvq__codes16_placed(kvq__v16 *out, const uint32_t *w, size_t c0, int RAW)
{
    static const uint32_t keep[8] = { 3u, 3u << 2, 3u << 4, 3u << 6,
                                      3u << 8, 3u << 10, 3u << 12, 3u << 14 };
    uint16_t high;
    kvq__vu m, lo, hi;
    memcpy(&high, (const char *)(w + c0 / 16) + 2, sizeof high);
    memcpy(&m, keep, sizeof m);
    lo = kvq__vu_splat(w[c0 / 16]) & m;
    hi = (kvq__vu)_mm256_set1_epi16((short)high) & m;
    out->part[0] = RAW ? (kvq__vf)lo : kvq__vf_of_vi((kvq__vi)lo);
    out->part[1] = RAW ? (kvq__vf)hi : kvq__vf_of_vi((kvq__vi)hi);
}
#endif
static KVQ__VINLINE void kvq__codes16(kvq__v16 *out, const uint32_t *w, size_t c0, int bits)
{
    static const uint32_t shift2[16] = { 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30 };
    static const uint32_t shift4[16] = { 0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28 };
    static const uint32_t second[16] = { 0, 0, 0, 0, 0, 0, 0, 0, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u };
    int k;
#if KVQ__W == 8 && KVQ__ZEN1
    if (bits == 2) {
        /* c 4^j, scaled by 4^-j: c again                                 */
        kvq__vf d;
        memcpy(&d, kvq__down4, sizeof d);
        kvq__codes16_placed(out, w, c0, 0);
        out->part[0] = out->part[0] * d;
        out->part[1] = out->part[1] * d;
        return;
    }
#elif KVQ__W == 8
    if (bits == 2) {            /* lane j: the word >> 2j, then >> 16 more */
        kvq__vu x;
        memcpy(&x, shift2, sizeof x);
        x = kvq__vu_splat(w[c0 / 16]) >> x;                 /* codes 0-7  */
        out->part[0] = (kvq__vf)_mm256_permutevar8x32_ps(
            _mm256_loadu_ps(kvq__code_floats2), (__m256i)x);
        out->part[1] = (kvq__vf)_mm256_permutevar8x32_ps(   /* codes 8-15 */
            _mm256_loadu_ps(kvq__code_floats2), (__m256i)(x >> 16u));
        return;
    }
#endif
    if (bits == 2 || bits == 4) {
        const uint32_t *shift = bits == 2 ? shift2 : shift4;
        KVQ__EACH(k) {
            kvq__vu sh, sel, x;
            memcpy(&sh, shift + k * KVQ__W, sizeof sh);
            if (bits == 2)                      /* the part's word(s)       */
                x = kvq__vu_splat(w[c0 / 16]);
            else if (KVQ__W <= 8)
                x = kvq__vu_splat(w[c0 / 8 + (size_t)k * KVQ__W / 8]);
            else {                              /* 16 lanes span two words  */
                memcpy(&sel, second + k * KVQ__W, sizeof sel);
                x = (kvq__vu_splat(w[c0 / 8]) & ~sel) | (kvq__vu_splat(w[c0 / 8 + 1]) & sel);
            }
            x >>= sh;
#if KVQ__W == 16
            /* vpermps reads the low 4 bits of each lane: the code (B = 4)
               or the code and the next one's (B = 2, a table of period 4) */
            out->part[k] = (kvq__vf)_mm512_permutexvar_ps((__m512i)x, (__m512)kvq__load16(
                bits == 2 ? kvq__code_floats2 : kvq__code_floats4).part[0]);
#elif KVQ__W == 8                               /* B = 4: above for B = 2 */
            out->part[k] = kvq__vf_of_vi((kvq__vi)(x & 15u));
#else
            out->part[k] = kvq__vf_of_vi((kvq__vi)(x & (uint32_t)((1u << bits) - 1u)));
#endif
        }
        return;
    }
    {
        float t[16];
        size_t i;
        for (i = 0; i < 16; i++) t[i] = (float)kvq__get_code(w, c0 + i, bits);
        *out = kvq__load16(t);
    }
}

/* n codes of a packed group, from code index `first`, as floats: 16 at a
   time where the run is aligned, the rest one by one.                     */
static void kvq__unpack_f32(const uint32_t *w, size_t first, size_t n, int bits, float *out)
{
    size_t i = 0;
    if (first % 16 == 0)
        for (; i + 16 <= n; i += 16) {
            kvq__v16 v;
            kvq__codes16(&v, w, first + i, bits);
            kvq__store16(out + i, v);
        }
    for (; i < n; i++) out[i] = (float)kvq__get_code(w, first + i, bits);
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

/* (a, b) of n consecutive groups, as kvq__affine gives them: the stored
   (s, z) pairs are one run of 2n fp16 halves (kvq_sz is two kvq_f16, no
   padding), converted 128 groups (256 halves) at a time by kvq__f16_row
   (F16C where available), then split into a and b by a loop per zero mode
   that the compiler vectorizes (a per-unit cost of per-channel keys: once
   per 32 tokens and D channels).                                          */
static void kvq__affine_run(const kvq_sz *sz, size_t n, kvq_zero_mode mode,
                            float *a /* (n) */, float *b /* (n) */)
{
    const kvq_f16 *raw = &sz[0].scale;            /* (2n) s0 z0 s1 z1 ...    */
    float half[256];
    size_t i0, i;
    for (i0 = 0; i0 < n; i0 += 128) {
        size_t k = n - i0 < 128 ? n - i0 : 128;
        float *ai = a + i0, *bi = b + i0;
        kvq__f16_row(raw + 2 * i0, 2 * k, half);
        if (mode == KVQ_ZERO_INT)
            for (i = 0; i < k; i++) {
                ai[i] = half[2 * i];
                bi[i] = kvq__zero_term(half[2 * i], half[2 * i + 1], KVQ_ZERO_INT);
            }
        else
            for (i = 0; i < k; i++) {
                ai[i] = half[2 * i];
                bi[i] = half[2 * i + 1];
            }
    }
}

/* Per-channel key unit u: q*a (D) and q.b for every head, once per unit
   (q.b with kvq__dot, as EAGER computes it). The a's are written into head
   0's q*a row first and scaled in place, last head first.               */
static void kvq__unit_qa(const kvq_cache *c, kvq__heads *H, size_t u)
{
    size_t D = c->cfg.head_dim, d, h;
    float *a = H->qa, *b = H->row;                      /* (D) each          */
    kvq__affine_run(c->k.sz + u * D, D, c->cfg.zero_mode, a, b);
    for (h = H->n; h-- > 0;) {
        const float *q = H->q + h * D;
        float *qa = H->qa + h * D;
        d = 0;
        for (; KVQ__W > 1 && d + 16 <= D; d += 16)  /* in place for head 0:
                                           the vectors an alias check refuses */
            kvq__store16(qa + d, kvq__mul16(kvq__load16(q + d), kvq__load16(a + d)));
        for (; d < D; d++) qa[d] = q[d] * a[d];
        H->qb[h] = kvq__dot(q, b, D);
    }
}

/* CALL(NH, B) with the head count NH (1, 2 or 4: kvq__head_batch) and the
   bit width B (2 or 4; other widths as a variable) as constants, so that
   an always-inlined kernel's loops are fixed. Nine instantiations per
   kernel keep the compiled size (and compile time) modest.               */
#define KVQ__WITH_NH_BITS(CALL, nh, bits)                                    \
    switch (nh) {                                                            \
    case 1:  KVQ__WITH_BITS(CALL, 1, bits); break;                           \
    case 2:  KVQ__WITH_BITS(CALL, 2, bits); break;                           \
    default: KVQ__WITH_BITS(CALL, 4, bits); break;                           \
    }
#define KVQ__WITH_BITS(CALL, NH, bits)                                       \
    switch (bits) {                                                          \
    case 2:  CALL(NH, 2); break;                                             \
    case 4:  CALL(NH, 4); break;                                             \
    default: CALL(NH, bits); break;                                          \
    }

/* The same for full-precision rows: NH and whether they are fp16 (F16).   */
#define KVQ__WITH_NH_F16(CALL, nh, f16)                                      \
    switch ((nh) * 2 + ((f16) != 0)) {                                       \
    case 2:  CALL(1, 0); break;                                              \
    case 3:  CALL(1, 1); break;                                              \
    case 4:  CALL(2, 0); break;                                              \
    case 5:  CALL(2, 1); break;                                              \
    case 8:  CALL(4, 0); break;                                              \
    default: CALL(4, 1); break;                                              \
    }

/* How many of the `left` heads one kernel call takes: 4, 2 or 1.          */
static size_t kvq__head_batch(size_t left) { return left >= 4 ? 4 : left >= 2 ? 2 : 1; }

/* kvq__tile_block's 2-bit codes for ONE head, entries two at a time:
       out[c .. c+15] += sum_p t_p + zb,   t_p = w_i x_i + w_i' x_i'
   over the pairs p = (i, i' = i + 1) of entries (an odd last entry alone,
   t = w_i x_i), with w_i x_i rounded and then w_i' x_i' added by a
   multiply-add where KVQ__FMA. P = 4 / NB running sums a block, at least
   one (pair p to sum p mod P, added in order at the end). Per lane, t_p
   takes only 16 values, one per (c_i, c_i'): with AVX-512 they are a
   table built once per pair for all NB blocks of the walk (the same
   expression on the 16 code pairs, so the same floats), and a pair costs
   per block a shift, a rotate and a bit select (lane j's c_i to bits 0-1
   of its index, c_i' to bits 2-3), one vpermps and one addition, against
   two shifts, masks, conversions and multiply-adds. e: the entries' words
   of the walk's first block; NB (1, 2, 4 or 8 blocks) a constant.       */
#if KVQ__W == 16
/* One pair of kvq__pairs2_walk with AVX-512: t the pair's table (TWO = 0:
   a lone entry, its partner's codes read as 0), x0 the first entry's
   words of the walk, acc (NB) the running sums the pair goes to.          */
static KVQ__INLINE void kvq__pairs2_step(kvq__v16 *acc, size_t P, const char *x0, size_t stride,
                                         kvq__v16 t, int NB, int TWO)
{
    const __m512i shift = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                            24, 26, 28, 30),
                  turn = _mm512_setr_epi32(30, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                           22, 24, 26, 28),
                  three = _mm512_set1_epi32(3);
    int b;
    for (b = 0; b < NB; b++) {
        int32_t w0, w1 = 0;
        __m512i ix;
        memcpy(&w0, x0 + 4 * b, 4);
        if (TWO) memcpy(&w1, x0 + stride + 4 * b, 4);
        /* lane j: c_i (bits 2j of w0) to bits 0-1, c_i' (bits 2j of w1,
           rotated right by 2j - 2) to bits 2-3: three ? u : v            */
        ix = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(_mm512_set1_epi32(w0), shift),
                                       _mm512_rorv_epi32(_mm512_set1_epi32(w1), turn), three, 0xE4);
        acc[(size_t)b * P].part[0] = acc[(size_t)b * P].part[0] +
                                     (kvq__vf)_mm512_permutexvar_ps(ix, (__m512)t.part[0]);
    }
}
#else
/* Block b's 16 codes of the entry at x as kvq__pair_term multiplies
   them: c (kvq__codes16), or with PLACED c 4^j (kvq__codes16_placed),
   as a float (PLACED = 1) or as the subnormal c 4^j 2^-149 (PLACED = 2) */
static KVQ__INLINE void kvq__pair_codes(kvq__v16 *c, const char *x, int b, int PLACED)
{
#if KVQ__W == 8 && KVQ__ZEN1
    if (PLACED) {
        kvq__codes16_placed(c, (const uint32_t *)(const void *)x, 16 * (size_t)b, PLACED == 2);
        return;
    }
#endif
    (void)PLACED;
    kvq__codes16(c, (const uint32_t *)(const void *)x, 16 * (size_t)b, 2);
}

/* One pair's t of kvq__pairs2_walk in block b, computed: w[0] x_i rounded,
   then + w[1] x_i' (TWO) by a multiply-add where KVQ__FMA. ws: the two
   weights already broadcast (PLACED: times 4^-j, for codes c 4^j), or
   NULL: broadcast here                                                   */
static KVQ__INLINE kvq__v16 kvq__pair_term(const char *x0, size_t stride, int b, const float *w,
                                           const kvq__v16 *ws, int TWO, int PLACED)
{
    kvq__v16 c, t;
    kvq__pair_codes(&c, x0, b, PLACED);
    t = kvq__mul16(ws ? ws[0] : kvq__splat16(w[0]), c);
    if (!TWO) return t;
    kvq__pair_codes(&c, x0 + stride, b, PLACED);
    return kvq__madd16(t, ws ? ws[1] : kvq__splat16(w[1]), c);
}

/* Pair i (entries i, i + 1; TWO = 0: entry i alone) of kvq__pairs2_walk
   into sum k of its NB blocks: the weights broadcast once for them.
   PLACED (Zen 1, KVQ__ZEN1): the weights scaled by lane, w down[j], once
   for all blocks, and the codes left in place, c 4^j. PLACED = 1: down =
   4^-j (kvq__down4), the same product w c where w 4^-j is exact, without
   kvq__codes16's two multiplies per 16 codes. PLACED = 2: down = 4^-j
   2^(149-E) and the codes not even converted, read as the subnormals
   c 4^j 2^-149: the product is w c 2^-E, the sums the walk's own times
   2^-E where kvq__walk_scale allows it, and no conversion (2 cycles a
   ymm on Zen 1, on the multiply-adds' pipes) is left in the walk.        */
static KVQ__INLINE void kvq__pair_blocks(kvq__v16 *acc, size_t P, size_t k, const char *e,
                                         size_t stride, const float *wt, size_t i, int NB,
                                         int TWO, int PLACED, const float *down /* (8) */)
{
    kvq__v16 ws[2] = { kvq__splat16(wt[i]), kvq__splat16(TWO ? wt[i + 1] : 0.0f) };
    int b;
#if KVQ__W == 8 && KVQ__ZEN1
    if (PLACED) {
        kvq__vf d;
        memcpy(&d, down, sizeof d);
        ws[0].part[0] = ws[0].part[1] = ws[0].part[0] * d;      /* lanes j, j + 8 */
        ws[1].part[0] = ws[1].part[1] = ws[1].part[0] * d;
    }
#else
    (void)down;
#endif
    for (b = 0; b < NB; b++)
        acc[(size_t)b * P + k] = kvq__add16(acc[(size_t)b * P + k],
                                            kvq__pair_term(e + i * stride, stride, b, wt + i, ws,
                                                           TWO, PLACED));
}

/* The pairs of kvq__pairs2_walk, pairs outer (NB <= 4), PLACED and down
   as above                                                              */
static KVQ__INLINE void kvq__pairs_outer(kvq__v16 *acc, const char *e, size_t stride, size_t m,
                                         const float *wt, int NB, int PLACED, const float *down)
{
    const int P = NB >= 4 ? 1 : 4 / NB;
    size_t i, i0;
    int k;
    for (i0 = 0; i0 + 2 * (size_t)P <= m; i0 += 2 * (size_t)P) {
        KVQ__UNROLL(4)
        for (k = 0; k < P; k++)
            kvq__pair_blocks(acc, (size_t)P, (size_t)k, e, stride, wt, i0 + 2 * (size_t)k, NB, 1,
                             PLACED, down);
    }
    KVQ__UNROLL(4)
    for (k = 0; k < P; k++) {                           /* the last pairs    */
        i = i0 + 2 * (size_t)k;
        if (i + 1 < m)
            kvq__pair_blocks(acc, (size_t)P, (size_t)k, e, stride, wt, i, NB, 1, PLACED, down);
        else if (i < m)
            kvq__pair_blocks(acc, (size_t)P, (size_t)k, e, stride, wt, i, NB, 0, PLACED, down);
    }
}

#if KVQ__W == 8 && KVQ__ZEN1
/* Which pair walk the n weights w of kvq__pairs2_walk allow: E in
   22..122 for the subnormal one (PLACED = 2, weights scaled 2^(149-E)),
   0 for the placed one (PLACED = 1), -1 for neither.
   Placed: w 4^-7 must be exact, so w = 0 or |w| >= 1e-33 (> 2^-112:
   w 4^-7 stays normal); w not a number is no tiny weight either.
   Subnormal: with e_max = floor(log2 max |w|), e_min = floor(log2 of the
   least nonzero |w|), every weight finite:
   - the scaled weights w 4^-j 2^(149-E) finite: |w| 2^(149-E) < 2^128,
     E >= e_max + 22, and their factor 2^(149-E) a float: E >= 22; so
     E = max(e_max, 0) + 22.
   - each operation of the walk rounds its exact result x the same way
     as the reference rounds x 2^E, as long as no underflow can round:
     the mul, fma and add results are sums of products w c (c = 0..3),
     all multiples of 2^(e_min-23), the least weight's ulp. In the scaled
     domain that grid is 2^(e_min-23-E): at least 2^-149, the subnormal
     spacing, iff e_min - E >= -126, i.e. e_min >= -104 and e_max - e_min
     <= 104. Then a result below 2^-126 in either domain has < 24
     significant bits and is exact in both; above it, both are normal and
     round alike. (The reference's own domain needs nothing more: its
     grid, a float's ulp, is never finer than 2^-149. Asking instead that
     every value stay normal in both domains gives the stricter
     e_max - e_min <= 81, e_min >= -103.)
   - nothing overflows: the reference's sums (|w c| < 2^(e_max+3), at
     most n of them, n <= 2^20) stay below 2^128 with e_max <= 100, so it
     never holds an inf where the scaled walk holds a number; the scaled
     sums stay below 2^-19 n.
   - MXCSR: with DAZ (bit 6) every subnormal code reads as 0, with FTZ
     (bit 15) a result below 2^-126 is flushed in one domain and not the
     other: either bit set takes the placed walk.
   The bounds by the bits of |w| (positive floats order like their bits),
   8 weights a step: the largest, and the least nonzero as the least
   |w| - 1 unsigned (0 wraps to the top). A scalar loop with a branch
   per weight took back most of what the walk saves.                     */
static int kvq__walk_scale(const float *w, size_t n)
{
    const float limit = 1e-33f;
    __m256i hi = _mm256_setzero_si256(), lo = _mm256_set1_epi32(-1);
    uint32_t top, low, x, tiny;
    int emax, emin;
    size_t i = 0;
    memcpy(&tiny, &limit, sizeof tiny);
    for (; i + 8 <= n; i += 8) {                        /* |w|'s bits, lane by lane */
        const __m256i x8 = _mm256_loadu_si256((const __m256i *)(const void *)(w + i)),
                      u = _mm256_and_si256(x8, _mm256_set1_epi32(0x7FFFFFFF));
        hi = _mm256_max_epu32(hi, u);
        lo = _mm256_min_epu32(lo, _mm256_sub_epi32(u, _mm256_set1_epi32(1)));
    }
    /* the 8 lanes to one: halves, then pairs of pairs, then pairs      */
    hi = _mm256_max_epu32(hi, _mm256_permute2x128_si256(hi, hi, 1));
    lo = _mm256_min_epu32(lo, _mm256_permute2x128_si256(lo, lo, 1));
    hi = _mm256_max_epu32(hi, _mm256_shuffle_epi32(hi, 0x4E));
    lo = _mm256_min_epu32(lo, _mm256_shuffle_epi32(lo, 0x4E));
    hi = _mm256_max_epu32(hi, _mm256_shuffle_epi32(hi, 0xB1));
    lo = _mm256_min_epu32(lo, _mm256_shuffle_epi32(lo, 0xB1));
    top = (uint32_t)_mm256_cvtsi256_si32(hi);
    low = (uint32_t)_mm256_cvtsi256_si32(lo);
    for (; i < n; i++) {                                /* the last < 8      */
        memcpy(&x, w + i, sizeof x);
        x &= 0x7FFFFFFFu;
        top = x > top ? x : top;
        low = x - 1u < low ? x - 1u : low;
    }
    if (low < tiny - 1u) return -1;                     /* 0 < |w| < 1e-33   */
    if (top == 0 || (_mm_getcsr() & 0x8040u) || n > ((size_t)1 << 20)) return 0;
    emax = (int)(top >> 23) - 127;                      /* 128: inf, NaN     */
    emin = (int)((low + 1u) >> 23) - 127;               /* -127: subnormal   */
    if (emax > 100 || emin < -104 || emax - emin > 104) return 0;
    return (emax > 0 ? emax : 0) + 22;
}
#endif
#endif

static KVQ__INLINE void kvq__pairs2_walk(float *out, const char *e, size_t stride, size_t m,
                                         const float *wt, const float *zb, int NB)
{
    const int P = NB >= 4 ? 1 : 4 / NB;
    kvq__v16 acc[8 * 4];                                /* block b: acc[b P + k] */
    size_t i, i0;
    int b, k;
    for (b = 0; b < NB * P; b++) acc[b] = kvq__splat16(0.0f);
#if KVQ__W == 16
    {
        static const float low[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
        static const float high[16] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 };
        const kvq__v16 lo = kvq__load16(low), hi = kvq__load16(high);
        for (i0 = 0; i0 + 2 * (size_t)P <= m; i0 += 2 * (size_t)P)
            for (k = 0; k < P; k++) {                   /* pair i0/2 + k     */
                i = i0 + 2 * (size_t)k;
                kvq__pairs2_step(acc + k, (size_t)P, e + i * stride, stride,
                                 kvq__madd16(kvq__mul16(kvq__splat16(wt[i]), lo),
                                             kvq__splat16(wt[i + 1]), hi), NB, 1);
            }
        for (k = 0; k < P; k++) {                       /* the last pairs    */
            i = i0 + 2 * (size_t)k;
            if (i + 1 < m)
                kvq__pairs2_step(acc + k, (size_t)P, e + i * stride, stride,
                                 kvq__madd16(kvq__mul16(kvq__splat16(wt[i]), lo),
                                             kvq__splat16(wt[i + 1]), hi), NB, 1);
            else if (i < m)
                kvq__pairs2_step(acc + k, (size_t)P, e + i * stride, stride,
                                 kvq__mul16(kvq__splat16(wt[i]), lo), NB, 0);
        }
    }
#else
    if (KVQ__W == 8 && NB <= 4) {
        /* AVX2: pairs outer where the NB P sums fit the registers (NB <=
           4: four sums, 8 of the 16 ymm), so each pair's weights are
           broadcast once for all blocks (KIVI-2, one head: 1.19 -> 1.06
           instructions per element). NEON's sums would take 16 of its 32
           registers, and its count rose (2.14 -> 2.27): there, and for
           plain floats, block by block below. Either way sum (b, k) takes
           its pairs in order: the same floats.                          */
#if KVQ__W == 8 && KVQ__ZEN1
        const int E = kvq__walk_scale(wt, m);
        if (E > 0) {
            /* 4^-j 2^(149-E) by its exponent field; the sums times 2^E at
               the end, before they are used: exact (kvq__walk_scale)   */
            float down[8], up;
            uint32_t f;
            int j;
            for (j = 0; j < 8; j++) {
                f = (uint32_t)(127 + 149 - E - 2 * j) << 23;
                memcpy(down + j, &f, sizeof f);
            }
            kvq__pairs_outer(acc, e, stride, m, wt, NB, 2, down);
            f = (uint32_t)(127 + E) << 23;
            memcpy(&up, &f, sizeof f);
            for (b = 0; b < NB * P; b++) acc[b] = kvq__mul16(acc[b], kvq__splat16(up));
        } else if (E == 0)
            kvq__pairs_outer(acc, e, stride, m, wt, NB, 1, kvq__down4);
        else
#endif
            kvq__pairs_outer(acc, e, stride, m, wt, NB, 0, NULL);
    } else
        for (b = 0; b < NB; b++) {                      /* the same sums     */
            kvq__v16 a[4];
            KVQ__UNROLL(4)
            for (k = 0; k < P; k++) a[k] = kvq__splat16(0.0f);
            for (i0 = 0; i0 + 2 * (size_t)P <= m; i0 += 2 * (size_t)P) {
                KVQ__UNROLL(4)
                for (k = 0; k < P; k++)
                    a[k] = kvq__add16(a[k], kvq__pair_term(e + (i0 + 2 * (size_t)k) * stride, stride,
                                                           b, wt + i0 + 2 * (size_t)k, NULL, 1, 0));
            }
            KVQ__UNROLL(4)
            for (k = 0; k < P; k++) {                   /* the last pairs    */
                i = i0 + 2 * (size_t)k;
                if (i + 1 < m)
                    a[k] = kvq__add16(a[k], kvq__pair_term(e + i * stride, stride, b, wt + i, NULL,
                                                           1, 0));
                else if (i < m)
                    a[k] = kvq__add16(a[k], kvq__pair_term(e + i * stride, stride, b, wt + i, NULL,
                                                           0, 0));
            }
            KVQ__UNROLL(4)
            for (k = 0; k < P; k++) acc[b * P + k] = a[k];
        }
#endif
    for (b = 0; b < NB; b++) {
        float *o = out + 16 * b;
        kvq__v16 sum = acc[b * P];
        for (k = 1; k < P; k++) sum = kvq__add16(sum, acc[b * P + k]);
        if (zb) sum = kvq__add16(sum, kvq__splat16(zb[0]));
        kvq__store16(o, kvq__add16(kvq__load16(o), sum));
    }
}

/* The inner step of per-channel keys for a full tile (32 tokens from a
   multiple of 32) and NH (1, 2 or 4) heads: channel d's 32 codes are unpacked
   once, and times q_hd a_d added into each head's 32 scores, which stay in
   registers for the whole unit. A head alone keeps even and odd channels
   in two sums (P = 2, added at the end), so four additions are in flight. */
static KVQ__VINLINE void kvq__channel_tile(const uint32_t *w, size_t wpg, size_t D, size_t t0,
                                          const float *qa /* (NH, D) */,
                                          float *sc /* (NH, KVQ_TILE) */, int NH, int bits)
{
    const int P = NH == 1 ? 2 : 1;
    kvq__v16 lo_sum[4][2], hi_sum[4][2];         /* tokens 0-15, 16-31     */
    size_t d;
    int h, k;
    for (h = 0; h < NH; h++)
        for (k = 0; k < P; k++) lo_sum[h][k] = hi_sum[h][k] = kvq__splat16(0.0f);
    d = 0;
#if KVQ__W == 16
    /* AVX-512 folds a broadcast into a multiply-add ({1to16}) only where
       the broadcast has one use: the two halves read q_hd a_d from two
       copies (twin: 16 channels at a time), which saves one instruction
       per head and channel                                                */
    if (NH >= 2)
        for (; d + 16 <= D; d += 16) {
            float twin[4][16];
            size_t e;
            for (h = 0; h < NH; h++) kvq__store16(twin[h], kvq__load16(qa + (size_t)h * D + d));
            KVQ__UNROLL(4)
            for (e = 0; e < 16; e++) {
                kvq__v16 lo, hi;
                kvq__codes16(&lo, w + (d + e) * wpg, t0, bits);
                kvq__codes16(&hi, w + (d + e) * wpg, t0 + 16, bits);
                for (h = 0; h < NH; h++) {
                    lo_sum[h][0] = kvq__madd16(lo_sum[h][0], kvq__splat16(qa[(size_t)h * D + d + e]), lo);
                    hi_sum[h][0] = kvq__madd16(hi_sum[h][0], kvq__splat16(twin[h][e]), hi);
                }
            }
        }
#endif
    for (; d < D; d += (size_t)P)
        for (k = 0; k < P && d + (size_t)k < D; k++) {  /* channel d + k      */
            kvq__v16 lo, hi;
            kvq__codes16(&lo, w + (d + (size_t)k) * wpg, t0, bits);
            kvq__codes16(&hi, w + (d + (size_t)k) * wpg, t0 + 16, bits);
            for (h = 0; h < NH; h++) {
                kvq__v16 q = kvq__splat16(qa[(size_t)h * D + d + (size_t)k]);
                lo_sum[h][k] = kvq__madd16(lo_sum[h][k], q, lo);
                hi_sum[h][k] = kvq__madd16(hi_sum[h][k], q, hi);
            }
        }
    for (h = 0; h < NH; h++) {
        for (k = 1; k < P; k++) {
            lo_sum[h][0] = kvq__add16(lo_sum[h][0], lo_sum[h][k]);
            hi_sum[h][0] = kvq__add16(hi_sum[h][0], hi_sum[h][k]);
        }
        kvq__store16(sc + (size_t)h * KVQ_TILE, lo_sum[h][0]);
        kvq__store16(sc + (size_t)h * KVQ_TILE + 16, hi_sum[h][0]);
    }
}

/* Scores of tokens t0 .. t0+n-1 of per-channel key unit u (Sec. 8's
   algebra: q.k_t = sum_d (q_d a_d) c_td + q.b). Each token's sum runs over
   the channels d = 0..D-1 in order (a lone head's full tile: 2-bit codes
   by channel pairs, kvq__pairs2_walk; other widths even and odd channels
   in two sums, then added).                                              */
static KVQ__NOINLINE void kvq__scores_channel(const kvq_cache *c, kvq__heads *H, size_t u,
                                size_t t0, size_t n)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, wpg = s->geom.words_per_group, h, j;
    const uint32_t *w = s->words + u * D * wpg;         /* (D, wpg)          */
    const int full = n == KVQ_TILE && t0 % KVQ_TILE == 0;
    if (!full || (s->bits == 2 && H->n == 1))   /* the sums that add to sc */
        for (h = 0; h < H->n; h++)
            for (j = 0; j < n; j++) H->sc[h * KVQ_TILE + j] = 0.0f;
    if (full && s->bits == 2 && H->n == 1) {
        /* one head, 2-bit: channel pairs, as a value tile takes its slots
           (kvq__pairs2_walk: the channels are its entries, q_d a_d their
           weights, the 32 tokens its two blocks)                          */
        kvq__pairs2_walk(H->sc, (const char *)(w + t0 / 16), wpg * sizeof(uint32_t), D, H->qa,
                         NULL, 2);
    } else if (full) {                  /* kvq__channel_tile stores its sums */
        for (h = 0; h < H->n; h += kvq__head_batch(H->n - h)) {   /* NH, B fixed */
            const float *qa = H->qa + h * D;
            float *sc = H->sc + h * KVQ_TILE;
#define KVQ__CT(NH, BITS) kvq__channel_tile(w, wpg, D, t0, qa, sc, NH, BITS)
            KVQ__WITH_NH_BITS(KVQ__CT, kvq__head_batch(H->n - h), s->bits);
#undef KVQ__CT
        }
    } else {                                            /* a partial tile    */
        float codes[KVQ_TILE];
        size_t d;
        for (d = 0; d < D; d++) {
            kvq__unpack_f32(w + d * wpg, t0, n, s->bits, codes);
            for (h = 0; h < H->n; h++)
                for (j = 0; j < n; j++) H->sc[h * KVQ_TILE + j] += H->qa[h * D + d] * codes[j];
        }
    }
    for (h = 0; h < H->n; h++) {
        float *sc = H->sc + h * KVQ_TILE;
        const kvq__v16 qb = kvq__splat16(H->qb[h]), scale = kvq__splat16(H->inv_sqrt_d);
        if (KVQ__W > 1 && full) {       /* two vectors, the same floats */
            kvq__store16(sc, kvq__mul16(kvq__add16(kvq__load16(sc), qb), scale));
            kvq__store16(sc + 16, kvq__mul16(kvq__add16(kvq__load16(sc + 16), qb), scale));
        } else
            for (j = 0; j < n; j++) sc[j] = (sc[j] + H->qb[h]) * H->inv_sqrt_d;
    }
}

/* 16 words as 16 lanes, lane j from base[idx[j]]: one gather instruction
   on AVX2 and AVX-512, 16 loads elsewhere (integers: the same bits).      */
static KVQ__VINLINE kvq__u16 kvq__gather16(const uint32_t *base, const int32_t *idx /* (16) */)
{
    kvq__u16 x;
#if KVQ__W == 16
    x.part[0] = (kvq__vu)_mm512_i32gather_epi32(_mm512_loadu_si512((const void *)idx),
                                                (const void *)base, 4);
#elif KVQ__W == 8
    int k;
    KVQ__EACH(k) x.part[k] = (kvq__vu)_mm256_i32gather_epi32(
        (const int *)(const void *)base, _mm256_loadu_si256((const __m256i *)(const void *)(idx + 8 * k)), 4);
#else
    uint32_t t[16];
    int j;
    for (j = 0; j < 16; j++) t[j] = base[idx[j]];
    memcpy(x.part, t, sizeof t);
#endif
    return x;
}

/* The columns of 16 rows of n 32-bit words, row j at base + j n: out[w]
   lane j = base[j n + w], w = 0 .. n-1 (integers: the same bits by any
   route); only the first `rows` rows are read, the lanes past them
   repeat row 0. With AVX-512, 16 rows and n = 2^k <= 16, the 16 n words
   are read as n whole vectors and transposed in registers, k rounds of
   two-source permutes (vpermt2d): round i swaps bit i of the register
   number with bit i of the lane number, and the last round also rotates
   the lane bits so that lane j ends as row j; with AVX2, 16 rows and n =
   4 or 8, likewise by in-half shuffles (kvq__columns16_48). Elsewhere, one
   gather per column (kvq__gather16). Zen 4 retires a 16-lane gather about as slowly
   as 16 loads: the 8 columns of HF-2's 16 keys by gathers took a sixth
   of its decode, by 8 loads and 24 permutes next to nothing.             */
#if KVQ__W == 16
/* kvq__columns16's transpose for n = 2^k (k a constant: inlined)          */
static KVQ__INLINE void kvq__columns16_pow2(const uint32_t *base, int k, kvq__u16 *out)
{
    const int n = 1 << k;
    const kvq__vu lane = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
    kvq__vu r[16], t[16];
    int i, R;
    KVQ__UNROLL(16)
    for (R = 0; R < n; R++) memcpy(&r[R], base + 16 * R, sizeof r[R]);
    KVQ__UNROLL(4)
    for (i = 0; i < k; i++) {
        /* output lane L takes the lane whose bit i is the register's bit
           i, from the register whose bit i is L's bit i; in the last
           round L stands for its place before the rotation               */
        const kvq__vu L = i < k - 1 ? lane
                        : ((lane & (uint32_t)((1 << (4 - k)) - 1)) << k) | (lane >> (4 - k));
        const kvq__vu from = (L & ~(uint32_t)(1 << i)) | (((L >> i) & 1u) << 4);
        KVQ__UNROLL(16)
        for (R = 0; R < n; R++) {
            const int R0 = R & ~(1 << i), b = (R >> i) & 1;
            t[R] = (kvq__vu)_mm512_permutex2var_epi32((__m512i)r[R0],
                                                      (__m512i)(from | (uint32_t)(b << i)),
                                                      (__m512i)r[R0 | (1 << i)]);
        }
        KVQ__UNROLL(16)
        for (R = 0; R < n; R++) r[R] = t[R];
    }
    KVQ__UNROLL(16)
    for (R = 0; R < n; R++) out[R].part[0] = r[R];
}
#endif

#if KVQ__W == 8
/* kvq__columns16 with AVX2 for 16 rows of n = 4 or 8 words (D = 128: the
   (s, z) of 2 groups, G = 64, HF's keys and values, or of 4, G = 32,
   KIVI's values): n/4 8x4 transposes per 8 rows, rows 0-7 to part 0 and
   8-15 to part 1, with no gather and no move across 128-bit halves (Zen 1
   splits those into many steps; its gathers took ~8% of its KIVI-2 time,
   and with n = 4 ~10% of HF-2's with one head). Register i holds row i's
   words c .. c+3 beside row i + 4's, each half a 4x4 block that two rounds
   of in-half shuffles transpose: column c + w in the low half from rows
   0-3, in the high half from rows 4-7 - lanes 0-7 in order. Bits only
   move. n a constant where inlined.                                      */
static KVQ__INLINE void kvq__columns16_48(const uint32_t *base, int n, kvq__u16 *out /* (n) */)
{
    int p, c, i;
    for (p = 0; p < 2; p++)                               /* rows 8p ..   */
        for (c = 0; c < n; c += 4) {                      /* words c .. c+3 */
            const float *r = (const float *)(const void *)(base + 8 * n * p + c);
            __m256 a[4], t[4];
            for (i = 0; i < 4; i++)                       /* rows i, i + 4 */
                a[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(r + n * i)),
                                            _mm_loadu_ps(r + n * (i + 4)), 1);
            t[0] = _mm256_unpacklo_ps(a[0], a[1]);        /* r0w0 r1w0 r0w1 r1w1 */
            t[1] = _mm256_unpackhi_ps(a[0], a[1]);        /* r0w2 r1w2 r0w3 r1w3 */
            t[2] = _mm256_unpacklo_ps(a[2], a[3]);
            t[3] = _mm256_unpackhi_ps(a[2], a[3]);
            out[c + 0].part[p] = (kvq__vu)_mm256_shuffle_ps(t[0], t[2], 0x44);
            out[c + 1].part[p] = (kvq__vu)_mm256_shuffle_ps(t[0], t[2], 0xEE);
            out[c + 2].part[p] = (kvq__vu)_mm256_shuffle_ps(t[1], t[3], 0x44);
            out[c + 3].part[p] = (kvq__vu)_mm256_shuffle_ps(t[1], t[3], 0xEE);
        }
}
#endif

static KVQ__VINLINE void kvq__columns16(const uint32_t *base, size_t n, size_t rows,
                                       kvq__u16 *out /* (n) */)
{
    int32_t idx[16];
    size_t w, j;
#if KVQ__W == 8
    if (rows == 16 && n == 4) {
        kvq__columns16_48(base, 4, out);
        return;
    }
    if (rows == 16 && n == 8) {
        kvq__columns16_48(base, 8, out);
        return;
    }
#endif
#if KVQ__W == 16
    if (rows == 16)
        switch (n) {
        case 1:  kvq__columns16_pow2(base, 0, out); return;
        case 2:  kvq__columns16_pow2(base, 1, out); return;
        case 4:  kvq__columns16_pow2(base, 2, out); return;
        case 8:  kvq__columns16_pow2(base, 3, out); return;
        case 16: kvq__columns16_pow2(base, 4, out); return;
        default: break;
        }
#endif
    for (j = 0; j < 16; j++) idx[j] = (int32_t)(j * n);
    for (j = rows; j < 16; j++) idx[j] = 0;
    for (w = 0; w < n; w++) out[w] = kvq__gather16(base + w, idx);
}

#define KVQ__TOKEN_GROUPS 16     /* the most groups a slot in lanes, 16 | G */

/* kvq__zero_term lane by lane: z, or (-z) s for an integer zero          */
static KVQ__VINLINE kvq__v16 kvq__zero_term16(kvq__v16 s, kvq__v16 z, kvq_zero_mode mode)
{
    return mode == KVQ_ZERO_INT ? kvq__mul16(kvq__mul16(z, kvq__splat16(-1.0f)), s) : z;
}

/* (a, b) of ng groups of up to 16 slots, lane j slot j, from the slots'
   (s, z) already converted to floats: slot j's group g at sf[2 (j ng + g)]
   and the next. Group g's a go to a + g stride, its b (kvq__zero_term)
   to b + g stride: the columns of rows of 2 ng floats (kvq__columns16;
   lanes past `rows` repeat slot 0).                                      */
static void kvq__ab_columns(const float *sf /* (rows, ng, 2) */, size_t ng, size_t rows,
                            kvq_zero_mode mode, float *a, float *b, size_t stride)
{
    kvq__u16 col[2 * KVQ__TOKEN_GROUPS];                /* s0 z0 s1 z1 ..    */
    size_t g;
    kvq__columns16((const uint32_t *)(const void *)sf, 2 * ng, rows, col);
    for (g = 0; g < ng; g++) {
        kvq__v16 s_g, z_g;
        memcpy(&s_g, &col[2 * g], sizeof s_g);          /* the bits          */
        memcpy(&z_g, &col[2 * g + 1], sizeof z_g);
        kvq__store16(a + g * stride, s_g);
        kvq__store16(b + g * stride, kvq__zero_term16(s_g, z_g, mode));
    }
}

#if KVQ__W == 8 && KVQ__ZEN1
#define KVQ__PAIR_FLOATS 10                /* table floats per query value */
#else
#define KVQ__PAIR_FLOATS 8
#endif
#if KVQ__W == 16 || KVQ__W == 8
/* kvq__token_block's table of 2-bit channel pairs for n heads: entry
   (h, p, i) = q_2p (i & 3) + q_2p+1 (i >> 2), the pair (2p, 2p+1) with
   codes (i & 3, i >> 2), by the expression the block uses without it.
   Built for Zen 1 (KVQ__ZEN1), whose permutes across 128-bit halves are
   slow, 10 floats per query value instead, head h's 10 D at 10 D h: per
   pair q_d and q_d+1 / 4 each broadcast to 8 lanes (8 D floats, read by
   the multiplies themselves: no broadcast instruction, and no register
   held for it), then per pair the products q_d i, i = 0..3 (2 D floats,
   a 128-bit table for vpermilps). q_d / 4 is
   exact while it stays normal: kvq__online_walk builds no table where a
   nonzero |q_d| < 1e-30 might make it subnormal.                        */
static void kvq__key_pairs(const float *q /* (n, D) */, size_t n, size_t D,
                           float *pairs /* (n, D/2, 16) */)
{
#if KVQ__PAIR_FLOATS == 10
    size_t h, d, i;
    for (h = 0; h < n; h++)
        for (d = 0; d + 1 < D; d += 2) {
            float *row = pairs + h * 10 * D;
            for (i = 0; i < 8; i++) {
                row[8 * d + i] = q[h * D + d];
                row[8 * d + 8 + i] = q[h * D + d + 1] * 0.25f;
            }
            for (i = 0; i < 4; i++) row[8 * D + 2 * d + i] = q[h * D + d] * (float)i;
        }
#else
    static const float low[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
    static const float high[16] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 };
    const kvq__v16 lo = kvq__load16(low), hi = kvq__load16(high);
    size_t h, d;
    for (h = 0; h < n; h++)
        for (d = 0; d + 1 < D; d += 2)
            kvq__store16(pairs + (h * D + d) * 8,
                         kvq__madd16(kvq__mul16(kvq__splat16(q[h * D + d]), lo),
                                     kvq__splat16(q[h * D + d + 1]), hi));
#endif
}
#endif

/* Scores of 16 per-token keys for NH (1, 2 or 4) heads, the TOKENS IN THE
   LANES: lane j is the slot whose words start at words + idx[j] (gpu
   groups of wpg words). For every channel d one word per lane (a column
   of cols, kvq__columns16's, or without cols a gather, each 32/B
   channels), the code shifted out, and one multiply-add per head: no
   per-token horizontal sum. Per lane, in this order:
       part_g,r = sum_{d in g, d = r mod P} q_d c_d   (channels in order)
       part_g   = part_g,0 + part_g,1 + .. + part_g,P-1
       total    = sum_g a_g part_g, then + sum_g b_g qsum_g (groups in order)
       score    = total / sqrt(D)
   with P = 4 / NH partial sums per head (P = 1 for four heads), so that at
   least four multiply-adds are in flight: one chain of G of them would
   wait on the latency of each. ab (gpu, 2, 16) holds each group's a then
   b by lane; qsum (NH, D) the per-group sums of q (H->qa); sc (NH,
   KVQ_TILE) receives 16 scores.
   2-bit codes go by channel pairs: part_g,r adds, for the pairs (d, d+1)
   with d/2 = r mod P,
       t = q_d c_d + q_{d+1} c_{d+1}   (the product q_d c_d rounded, then
                                        a multiply-add where KVQ__FMA)
   which takes only 16 values, one per (c_d, c_{d+1}): with AVX-512 and a
   table of them (pairs, kvq__key_pairs: the same expression on the 16
   code pairs, so the same floats) a pair is one shift, one permute
   (vpermps reads the low 4 bits of each lane: c_d + 4 c_{d+1}) and one
   addition per head, against two shifts, masks, conversions and
   multiply-adds (AVX2: two 8-entry vpermps and a blend on bit 3).       */
static KVQ__VINLINE void kvq__token_block(const uint32_t *words, const int32_t *idx,
                                         const kvq__u16 *cols /* (gpu wpg) or NULL */,
                                         const float *pairs /* (NH, D/2, 16) or NULL */,
                                         size_t G, size_t gpu, size_t wpg,
                                         const float *ab, const float *q, const float *qsum,
                                         size_t D, float scale, float *sc, int NH, int bits)
{
    const size_t per = 32 / (size_t)bits;               /* codes per word    */
    const uint32_t mask = (uint32_t)((1u << bits) - 1u);
    const int P = NH >= 3 ? 1 : 4 / NH;
    kvq__v16 total[4];
    size_t g, k, e;
    int h, p, r;
    (void)pairs;                                 /* AVX-512 and AVX2 only */
    for (h = 0; h < NH; h++) total[h] = kvq__splat16(0.0f);
    for (g = 0; g < gpu; g++) {
        kvq__v16 part[4][4];                            /* head h: part[h][r] */
        for (h = 0; h < NH; h++)
            for (r = 0; r < P; r++) part[h][r] = kvq__splat16(0.0f);
#if KVQ__W == 8 && KVQ__ZEN1
        if (bits == 2 && pairs && cols) {
            /* Zen 1 (KVQ__ZEN1): each pair's t as above (q_d c_d
               rounded, then a multiply-add), with no permute across
               128-bit halves: the word shifted by 2 (d mod 16) by an
               immediate; q_d c_d looked up with one head (vpermilps, in
               each half, reads the low 2 bits: c_d), or c_d converted and
               multiplied with several; c_d+1 masked in place, 4 c_d+1,
               converted and multiplied by q_d+1 / 4 (kvq__key_pairs's
               table, its broadcasts read from memory). The sums are
               locals, so that they stay in registers (in part[][] the
               compiler kept them in memory), each pinned there after its
               addition by an empty asm: else GCC computed all 64 t of a
               word for four heads first, spilled them and added them at
               the end (T = 32K, n_q = 4: 4.4 -> 4.0 ms).                 */
            kvq__vf a[4][4][KVQ__PARTS];        /* part[h][r], in registers */
            for (h = 0; h < NH; h++)
                for (r = 0; r < P; r++) KVQ__EACH(p) a[h][r][p] = part[h][r].part[p];
            for (k = 0; k < wpg; k++) {
                KVQ__UNROLL(8)
                for (e = 0; e < 16; e += 2) {               /* channels d, d + 1 */
                    const size_t d = g * G + k * 16 + e;
                    KVQ__EACH(p) {
                        const kvq__vu y = cols[g * wpg + k].part[p] >> (uint32_t)(2 * e);
                        const kvq__vf c0 = kvq__vf_of_vi((kvq__vi)(y & 3u)),   /* NH > 1 */
                                      c1 = kvq__vf_of_vi((kvq__vi)(y & 12u));
                        for (h = 0; h < NH; h++) {
                            const float *qs = pairs + (size_t)h * KVQ__PAIR_FLOATS * D;
                            const __m256 tb = _mm256_broadcast_ps((const __m128 *)(const void *)(qs + 8 * D + 2 * d));
                            kvq__vf *acc = &a[h][e / 2 % (size_t)P][p];
                            const kvq__vf t0 = NH == 1 ? (kvq__vf)_mm256_permutevar_ps(tb, (__m256i)y)
                                                       : (kvq__vf)(KVQ__VLOAD(qs + 8 * d) * c0);
                            *acc = *acc + KVQ__VFMA(t0, KVQ__VLOAD(qs + 8 * d + 8), c1);
                            __asm__ volatile("" : "+x"(*acc));
                        }
                    }
                }
            }
            for (h = 0; h < NH; h++)
                for (r = 0; r < P; r++) KVQ__EACH(p) part[h][r].part[p] = a[h][r][p];
        } else
#endif
        for (k = 0; k < wpg; k++) {
            const kvq__u16 x = cols ? cols[g * wpg + k] : kvq__gather16(words + g * wpg + k, idx);
            if (bits == 2) {
                KVQ__UNROLL(8)
                for (e = 0; e < 16; e += 2) {           /* channels d, d + 1 */
                    const size_t d = g * G + k * 16 + e;
                    kvq__v16 t[4];
#if KVQ__W == 16
                    if (pairs) {
                        const __m512i c2 = (__m512i)(x.part[0] >> (uint32_t)(2 * e));
                        for (h = 0; h < NH; h++)
                            t[h].part[0] = (kvq__vf)_mm512_permutexvar_ps(
                                c2, _mm512_loadu_ps(pairs + ((size_t)h * D + d) * 8));
                    } else
#elif KVQ__W == 8 && !KVQ__ZEN1
                    if (pairs) {                /* 8 entries a vpermps:  */
                        KVQ__EACH(p) {          /* bit 3 picks the half  */
                            const __m256i c2 = (__m256i)(x.part[p] >> (uint32_t)(2 * e));
                            const __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(c2, 28));
                            for (h = 0; h < NH; h++) {
                                const float *tb = pairs + ((size_t)h * D + d) * 8;
                                t[h].part[p] = (kvq__vf)_mm256_blendv_ps(
                                    _mm256_permutevar8x32_ps(_mm256_loadu_ps(tb), c2),
                                    _mm256_permutevar8x32_ps(_mm256_loadu_ps(tb + 8), c2), upper);
                            }
                        }
                    } else
#endif
                    {
                        kvq__v16 c0, c1;
                        KVQ__EACH(p) {
                            c0.part[p] = kvq__vf_of_vi((kvq__vi)((x.part[p] >> (uint32_t)(2 * e)) & 3u));
                            c1.part[p] = kvq__vf_of_vi((kvq__vi)((x.part[p] >> (uint32_t)(2 * e + 2)) & 3u));
                        }
                        for (h = 0; h < NH; h++)
                            t[h] = kvq__madd16(kvq__mul16(kvq__splat16(q[(size_t)h * D + d]), c0),
                                               kvq__splat16(q[(size_t)h * D + d + 1]), c1);
                    }
                    for (h = 0; h < NH; h++)            /* 8 pairs, 0 mod P  */
                        part[h][e / 2 % (size_t)P] = kvq__add16(part[h][e / 2 % (size_t)P], t[h]);
                }
                continue;
            }
            KVQ__UNROLL(16)
            for (e = 0; e < per; e++) {                 /* channel d         */
                const size_t d = g * G + k * per + e;
                kvq__v16 cv;
                if (per > 16 && k * per + e >= G) break;    /* B = 1, half a word */
                KVQ__EACH(p) cv.part[p] = kvq__vf_of_vi((kvq__vi)((x.part[p] >> (uint32_t)(e * (size_t)bits)) & mask));
                for (h = 0; h < NH; h++)                /* per is 0 mod P    */
                    part[h][e % (size_t)P] = kvq__madd16(part[h][e % (size_t)P],
                                                         kvq__splat16(q[(size_t)h * D + d]), cv);
            }
        }
        for (h = 0; h < NH; h++) {
            for (r = 1; r < P; r++) part[h][0] = kvq__add16(part[h][0], part[h][r]);
            total[h] = kvq__madd16(total[h], kvq__load16(ab + g * 32), part[h][0]);
        }
    }
    for (g = 0; g < gpu; g++)
        for (h = 0; h < NH; h++)
            total[h] = kvq__madd16(total[h], kvq__load16(ab + g * 32 + 16),
                                   kvq__splat16(qsum[(size_t)h * D + g]));
    for (h = 0; h < NH; h++)
        kvq__store16(sc + (size_t)h * KVQ_TILE, kvq__mul16(total[h], kvq__splat16(scale)));
}

/* (a, b) of the gpu groups of 16 consecutive per-token slots, by lane, as
   kvq__token_block reads them (ab: group g's a at ab[32 g + j], b at
   ab[32 g + 16 + j], slot j in lane j): the 16 slots' stored (s, z) are
   one run of 32 gpu halves, converted at once by kvq__f16_row (F16C where
   available), then each group's s and z taken as columns of the 16 rows
   of 2 gpu floats (kvq__columns16). The same floats as kvq__affine.      */
static void kvq__token_ab16(const kvq_sz *sz /* (16, gpu) */, size_t gpu, kvq_zero_mode mode,
                            float *ab /* (gpu, 2, 16) */)
{
    float sf[KVQ__TOKEN_GROUPS * 32];                   /* (16, gpu, 2)      */
    kvq__f16_row(&sz[0].scale, 32 * gpu, sf);
    kvq__ab_columns(sf, gpu, 16, mode, ab, ab + 16, 32);
}

/* Scores of per-token key slots s0 .. s0+n-1. With 16 | G and at most
   KVQ__TOKEN_GROUPS groups a token, 16 tokens at a time in the lanes
   (kvq__token_block; a lane not attended reads an attended slot of its
   block, and its score is masked by kvq__tile_update); else one token at
   a time (kvq__token_key_dot).                                            */
static void kvq__scores_token(const kvq_cache *c, kvq__heads *H, size_t s0, size_t n)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
           wpg = s->geom.words_per_group, h, g, j, b0;
    if (G % 16 == 0 && gpu <= KVQ__TOKEN_GROUPS) {
        float ab[KVQ__TOKEN_GROUPS * 32];               /* (gpu, 2, 16)      */
        int32_t idx[16];
        kvq__u16 col[16];                    /* a block's words, by column   */
        const kvq__u16 *cols;                /* col, or NULL: gathers by idx */
        for (b0 = 0; b0 < n; b0 += 16) {
            size_t first = b0;                          /* an attended slot  */
            int32_t neg = b0 + 16 <= n ? 0 : -1;        /* < 0: one is not   */
            while (first < n && first < b0 + 16 && H->pos[first] < 0) first++;
            if (first == n || first == b0 + 16) continue;
            if (neg == 0)
                for (j = 0; j < 16; j++) neg |= H->pos[b0 + j];
            cols = NULL;
            if (neg >= 0) {                             /* the usual block   */
                if (gpu * wpg <= 16) {
                    kvq__columns16(s->words + (s0 + b0) * gpu * wpg, gpu * wpg, 16, col);
                    cols = col;
                }
                for (j = 0; !cols && j < 16; j++) idx[j] = (int32_t)(j * gpu * wpg);
                kvq__token_ab16(s->sz + (s0 + b0) * gpu, gpu, c->cfg.zero_mode, ab);
            } else
                for (j = 0; j < 16; j++) {
                    size_t jj = b0 + j < n && H->pos[b0 + j] >= 0 ? b0 + j : first;
                    const kvq_sz *sz = s->sz + (s0 + jj) * gpu;
                    idx[j] = (int32_t)((jj - b0) * gpu * wpg);
                    for (g = 0; g < gpu; g++)
                        kvq__affine(sz[g], c->cfg.zero_mode, &ab[g * 32 + j], &ab[g * 32 + 16 + j]);
                }
            for (h = 0; h < H->n; h += kvq__head_batch(H->n - h)) {
#define KVQ__TB(NH, BITS) kvq__token_block(s->words + (s0 + b0) * gpu * wpg, idx, cols,           \
                                           H->pairs ? H->pairs + h * D * KVQ__PAIR_FLOATS : NULL, G, gpu, wpg, ab, \
                                           H->q + h * D, H->qa + h * D, D, H->inv_sqrt_d,      \
                                           H->sc + h * KVQ_TILE + b0, NH, BITS)
                KVQ__WITH_NH_BITS(KVQ__TB, kvq__head_batch(H->n - h), s->bits);
#undef KVQ__TB
            }
        }
        return;
    }
    for (j = 0; j < n; j++) {
        const uint32_t *w = s->words + (s0 + j) * gpu * wpg;
        const kvq_sz *sz = s->sz + (s0 + j) * gpu;
        if (H->pos[j] < 0) continue;
        for (g = 0; g < gpu; g++) kvq__unpack_f32(w + g * wpg, 0, G, s->bits, H->row + g * G);
        for (h = 0; h < H->n; h++)                      /* codes shared      */
            H->sc[h * KVQ_TILE + j] = kvq__token_key_dot(H->q + h * D, H->row, sz, H->qa + h * D,
                                                         D, G, c->cfg.zero_mode) * H->inv_sqrt_d;
    }
}

/* 16 stored halves as a 16-lane vector: vcvtph2ps per part where the
   target has it, else kvq__f16_row's exact conversion (the same floats:
   fp16 -> fp32 is exact either way).                                      */
static KVQ__VINLINE kvq__v16 kvq__load16_f16(const kvq_f16 *h)
{
#if KVQ__W == 16
    kvq__v16 v;
    v.part[0] = (kvq__vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)h));
    return v;
#elif KVQ__W == 8 && defined(__F16C__)
    kvq__v16 v;
    v.part[0] = (kvq__vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
    v.part[1] = (kvq__vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + 8)));
    return v;
#elif KVQ__W == 4
    kvq__v16 v;
    int k;
    KVQ__EACH(k) v.part[k] = (kvq__vf)kvq__f16x4(h + 4 * k);
    return v;
#else
    float t[16];
    kvq__f16_row(h, 16, t);
    return kvq__load16(t);
#endif
}

/* One full-precision key row against NH queries: q_h . k with kvq__dot's
   lanes and order (so the same floats as EAGER's), the row read once for
   all NH heads and, if F16, converted 16 halves at a time in registers.
   Needs 16 | D.                                                           */
static KVQ__VINLINE void kvq__row_scores(const float *q /* (NH, D) */, const void *row,
                                        size_t D, int NH, int F16, float scale,
                                        float *sc /* head h: sc[h KVQ_TILE] */)
{
    kvq__v16 acc[4];
    size_t d;
    int h;
    for (h = 0; h < NH; h++) acc[h] = kvq__splat16(0.0f);
    for (d = 0; d < D; d += 16) {
        const kvq__v16 k = F16 ? kvq__load16_f16((const kvq_f16 *)row + d)
                               : kvq__load16((const float *)row + d);
        for (h = 0; h < NH; h++) acc[h] = kvq__madd16(acc[h], kvq__load16(q + (size_t)h * D + d), k);
    }
    for (h = 0; h < NH; h++) sc[h * KVQ_TILE] = kvq__hsum16(&acc[h]) * scale;
}

/* Scores of rows i0 .. i0+n-1 of a full-precision key region.             */
static void kvq__scores_rows(const kvq_cache *c, kvq__heads *H, const kvq_rows *rg,
                             size_t i0, size_t n)
{
    size_t D = c->cfg.head_dim, h, j;
    int f16 = c->cfg.fp_bits == 16;
    if (D % 16) {                          /* the general form, one head at a time */
        for (j = 0; j < n; j++) {
            const float *k = kvq__row_f32(c, rg, i0 + j, H->row);
            for (h = 0; h < H->n; h++)
                H->sc[h * KVQ_TILE + j] = kvq__dot(H->q + h * D, k, D) * H->inv_sqrt_d;
        }
        return;
    }
    for (j = 0; j < n; j++) {
        const void *row = kvq__row_ptr(c, rg, i0 + j);
        for (h = 0; h < H->n; h += kvq__head_batch(H->n - h)) {
            int nh = (int)kvq__head_batch(H->n - h);
            const float *q = H->q + h * D;
            float *sc = H->sc + h * KVQ_TILE + j;
#define KVQ__RS(NH, F16) kvq__row_scores(q, row, D, NH, F16, H->inv_sqrt_d, sc)
            KVQ__WITH_NH_F16(KVQ__RS, nh, f16);
#undef KVQ__RS
        }
    }
}

/* out_h += w_h v_p for every head, v_p wherever V keeps position p.        */
static void kvq__add_value(const kvq_cache *c, kvq__heads *H, size_t p, size_t j)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, h, d, g, n_heads = H->n;
    uint32_t loc = s->loc[p];
    size_t idx = KVQ_LOC_INDEX(loc);
    const float *v = H->row, *wts = H->sc + j;          /* head h: wts[h*TILE] */
    float *out = H->out;                    /* locals: stores to out cannot
                                               then make H's fields reload */
    if (KVQ_LOC_TAG(loc) != KVQ_LOC_QUANT) {
        v = kvq__row_f32(c, &s->rows[KVQ_LOC_TAG(loc) - KVQ_LOC_ROWS0], idx, H->row);
    } else if (s->axis == KVQ_PER_TOKEN) {
        /* slot idx is one token: out += (w a_g) c + w b_g per channel,
           the codes unpacked once for every head                           */
        size_t gpu = s->geom.groups_per_unit, wpg = s->geom.words_per_group, c0;
        const uint32_t *w = s->words + idx * gpu * wpg;
        const kvq_sz *sz = s->sz + idx * gpu;
        for (g = 0; g < gpu; g++) {
            float a, b;
            kvq__affine(sz[g], c->cfg.zero_mode, &a, &b);
            for (c0 = 0; c0 + 16 <= G; c0 += 16) {      /* 16 codes a step   */
                kvq__v16 cv;
                kvq__codes16(&cv, w + g * wpg, c0, s->bits);
                for (h = 0; h < n_heads; h++) {
                    float wt = wts[h * KVQ_TILE], *o = out + h * D + g * G + c0;
                    kvq__v16 acc = kvq__madd16(kvq__load16(o), kvq__splat16(wt * a), cv);
                    kvq__store16(o, kvq__add16(acc, kvq__splat16(wt * b)));
                }
            }
            for (d = c0; d < G; d++) {                  /* G % 16 codes      */
                float cd = (float)kvq__get_code(w + g * wpg, d, s->bits);
                for (h = 0; h < n_heads; h++) {
                    float wt = wts[h * KVQ_TILE];
                    out[h * D + g * G + d] += (wt * a) * cd + wt * b;
                }
            }
        }
        return;
    } else {
        /* per-channel values (not a default anywhere): dequantize the row  */
        size_t tpu = s->geom.tokens_per_unit, unit = idx / tpu, t = idx % tpu,
               wpg = s->geom.words_per_group;
        const uint32_t *w = s->words + unit * D * wpg;
        const kvq_sz *sz = s->sz + unit * D;
        for (d = 0; d < D; d++) {
            float a, b;
            kvq__affine(sz[d], c->cfg.zero_mode, &a, &b);
            H->row[d] = (float)kvq__get_code(w + d * wpg, t, s->bits) * a + b;
        }
    }
    for (h = 0; h < n_heads; h++) {
        float wt = wts[h * KVQ_TILE], *o = out + h * D;
        for (d = 0; d < D; d++) o[d] += wt * v[d];
    }
}

/* A tile's m entries, weighted and summed per head, for NH heads at a time:
       out_h[c .. c+15] += sum_i w_hi x_i[c .. c+15]  (+ zb_h)     c = 0, 16, .. n-16
   where entry i's lanes x_i come from base + i stride (bytes), as SRC says:
       SRC = B > 0   a packed group of B-bit codes, as floats (kvq__codes16):
                     per-token quantized values, with w_hi = w_hj a_jg and
                     zb_h = sum_j w_hj b_jg, the group's zero term
       SRC = -16     an fp16 row, converted in registers (kvq__load16_f16)
       SRC = -32     an fp32 row                     (rows: zb = NULL)
   Entries are addressed by arithmetic, not through a table of pointers:
   loading each row's address from memory halved the rate at which Zen 4
   streamed the rows (bench_cpu --rows: 16 MB of fp32 rows summed 32 at a
   time, 20-25 -> 12-15 GB/s from DRAM, 40-57 -> 19-30 from L3), one of
   the two causes of fp32 rows' slow value pass (the other: rows read in
   walks, below). A tile whose entries do not follow each
   other in storage (kvq__run) is summed run by run, each run's sums added
   to out in turn. Blocks of 16 channels, the entries inner: each block's
   NH running sums live in registers for the whole run, so out is loaded
   and stored once per run, not once per entry.
     codes   one block at a time (a tile's codes are a few lines), P = 4 / NH
             partial sums per head (entries i = k mod P go to sum k), so at
             least four independent additions are in flight per step (one
             head's 2-bit codes: kvq__tile_pairs2, two entries a term, a
             table lookup with AVX-512);
     rows    P = 1 and CB = up to KVQ__ROW_SUMS / NH blocks a walk (AVX-512,
             one or two heads: 8, a whole 512-byte row), then narrower walks
             for the channels left: rows read in order, the pattern the
             hardware prefetcher follows best (the same test from DRAM: 2
             walks of 256 bytes a row 12-16 GB/s, 8 walks of 64 bytes 8.5-11).
   CB changes only which blocks run together: every (head, block, k) sum
   takes the same entries in the same order in every vector width.
   wt (NH, KVQ_TILE) holds the weights.                                   */
#define KVQ__SRC_F16 (-16)
#define KVQ__SRC_F32 (-32)
static KVQ__VINLINE kvq__v16 kvq__entry16(const char *p, size_t c, int SRC)
{
    kvq__v16 v;
    if (SRC == KVQ__SRC_F16) return kvq__load16_f16((const kvq_f16 *)(const void *)p + c);
    if (SRC == KVQ__SRC_F32) return kvq__load16((const float *)(const void *)p + c);
    kvq__codes16(&v, (const uint32_t *)(const void *)p, c, SRC);
    return v;
}
#define KVQ__ROW_SUMS (KVQ__W == 16 ? 16 : 4)   /* NH P CB, in kvq__v16s  */

/* channels c_from .. c_to - 1 of kvq__tile_block, CB blocks a walk       */
static KVQ__VINLINE void kvq__tile_chunks(float *out, size_t D, size_t c_from, size_t c_to,
                                         const char *base, size_t stride, size_t m,
                                         const float *wt, const float *zb, int NH, int SRC,
                                         int CB, int P)
{
    size_t c0, i;
    int h, k, b;
    /* two blocks with AVX-512: block 1 reads the weights from a copy, so
       that each broadcast has one use and folds into its multiply-add
       (as in kvq__channel_tile)                                           */
    const int TWIN = KVQ__W == 16 && CB == 2;
    float twin[TWIN ? 4 * KVQ_TILE : 1];
    const float *wt1 = wt;
    if (TWIN) {
        for (h = 0; h < NH; h++)
            for (i = 0; i < m; i++) twin[(size_t)h * KVQ_TILE + i] = wt[(size_t)h * KVQ_TILE + i];
        wt1 = twin;
    }
    for (c0 = c_from; c0 < c_to; c0 += 16 * (size_t)CB) {
        kvq__v16 acc[4][KVQ__ROW_SUMS];          /* head h: acc[h][b P + k]  */
        /* e: entry i at channel c0, where that starts a word (rows; codes
           of an even B), so the blocks sit at constant offsets from one
           address a step; codes of an odd B count from the entry's start */
        const int at_c0 = SRC < 0 || SRC % 2 == 0;
        const char *e = base + (at_c0 ? c0 * (size_t)(SRC < 0 ? -SRC : SRC) / 8 : 0);
        const size_t c = at_c0 ? 0 : c0;
        for (h = 0; h < NH; h++)
            for (k = 0; k < CB * P; k++) acc[h][k] = kvq__splat16(0.0f);
        KVQ__UNROLL(2)
        for (i = 0; i + (size_t)P <= m; i += (size_t)P, e += (size_t)P * stride)
            for (k = 0; k < P; k++)
                for (b = 0; b < CB; b++) {
                    const kvq__v16 x = kvq__entry16(e + (size_t)k * stride, c + 16 * (size_t)b,
                                                    SRC);
                    for (h = 0; h < NH; h++)
                        acc[h][b * P + k] = kvq__madd16(acc[h][b * P + k],
                                                        kvq__splat16((b ? wt1 : wt)[h * KVQ_TILE + i + k]), x);
                }
        for (k = 0; i < m; i++, k++, e += stride)   /* m % P left over   */
            for (b = 0; b < CB; b++) {
                const kvq__v16 x = kvq__entry16(e, c + 16 * (size_t)b, SRC);
                for (h = 0; h < NH; h++)
                    acc[h][b * P + k] = kvq__madd16(acc[h][b * P + k],
                                                    kvq__splat16(wt[h * KVQ_TILE + i]), x);
            }
        for (h = 0; h < NH; h++)
            for (b = 0; b < CB; b++) {
                float *o = out + (size_t)h * D + c0 + 16 * (size_t)b;
                kvq__v16 sum = acc[h][b * P];
                for (k = 1; k < P; k++) sum = kvq__add16(sum, acc[h][b * P + k]);
                if (zb) sum = kvq__add16(sum, kvq__splat16(zb[h]));
                kvq__store16(o, kvq__add16(kvq__load16(o), sum));
            }
    }
}

/* channels c .. c + the largest multiple of 16 CB left, CB blocks a walk;
   returns where it stopped                                               */
static KVQ__VINLINE size_t kvq__row_walks(float *out, size_t D, size_t c, size_t n,
                                         const char *base, size_t stride, size_t m,
                                         const float *wt, int NH, int SRC, int CB)
{
    const size_t to = n - (n - c) % (16 * (size_t)CB);
    if (to > c) kvq__tile_chunks(out, D, c, to, base, stride, m, wt, NULL, NH, SRC, CB, 1);
    return to;
}

/* n channels (16 | n) of kvq__pairs2_walk: walks of 8 blocks, then 4, 2, 1.
   Built for Zen 1 walks of 4 at most: pairs outer, the weights scaled
   once for 4 blocks (kvq__pair_blocks); the same floats (one sum a block
   either way).                                                           */
static void kvq__tile_pairs2(float *out, size_t n, const char *base, size_t stride, size_t m,
                             const float *wt, const float *zb)
{
    size_t c = 0;
    if (KVQ__W == 8 && KVQ__ZEN1)
        for (; c + 128 <= n; c += 64)
            kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 4);
    else
        for (; c + 128 <= n; c += 128)
            kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 8);
    if (c + 64 <= n) { kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 4); c += 64; }
    if (c + 32 <= n) { kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 2); c += 32; }
    if (c + 16 <= n) kvq__pairs2_walk(out + c, base + c / 4, stride, m, wt, zb, 1);
}

static KVQ__VINLINE void kvq__tile_block(float *out, size_t D, size_t n, const char *base,
                                        size_t stride, size_t m, const float *wt,
                                        const float *zb, int NH, int SRC)
{
    const int CB = KVQ__ROW_SUMS / NH;          /* rows: the widest walk   */
    size_t c = 0;
    if (SRC == 2 && NH == 1) {
        kvq__tile_pairs2(out, n, base, stride, m, wt, zb);
        return;
    }
    if (SRC != KVQ__SRC_F16 && SRC != KVQ__SRC_F32) {
        /* two blocks a walk where the registers hold their sums (AVX-512):
           each weight's broadcast and each step of the entry loop then
           serve 32 channels, not 16                                       */
        const int P = NH >= 3 ? 1 : 4 / NH;
        if (KVQ__ROW_SUMS >= 2 * NH * P && n % 32 == 0)
            kvq__tile_chunks(out, D, 0, n, base, stride, m, wt, zb, NH, SRC, 2, P);
        else
            kvq__tile_chunks(out, D, 0, n, base, stride, m, wt, zb, NH, SRC, 1, P);
        return;
    }
    if (CB >= 8) c = kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 8);
    if (CB >= 4) c = kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 4);
    if (CB >= 2) c = kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 2);
    kvq__row_walks(out, D, c, n, base, stride, m, wt, NH, SRC, 1);
}

/* How many of entries j, j+1, .. < m follow entry j in storage, stride
   bytes apart: one run of kvq__tile_block                                */
static size_t kvq__run(const void *const *e, size_t j, size_t m, size_t stride)
{
    size_t k = j + 1;
    while (k < m && (const char *)e[k] == (const char *)e[j] + (k - j) * stride) k++;
    return k - j;
}

/* The tile's m full-precision value rows (every region: KIVI's window,
   OTT's pools, LogQuant's kept set and sinks, an uncompressed cache), row
   i at tile entry at[i], through kvq__tile_block. Needs 16 | D.          */
static void kvq__tile_rows(const kvq_cache *c, kvq__heads *H, const void *const *rows,
                           const size_t *at, size_t m)
{
    size_t D = c->cfg.head_dim, h0, k, i, j, run, bytes = D * kvq__fp_bytes(c);
    float wt[4 * KVQ_TILE];
    int f16 = c->cfg.fp_bits == 16;
    for (h0 = 0; h0 < H->n; h0 += kvq__head_batch(H->n - h0)) {
        int nh = (int)kvq__head_batch(H->n - h0);
        float *out = H->out + h0 * D;
        for (k = 0; k < (size_t)nh; k++)
            for (i = 0; i < m; i++) wt[k * KVQ_TILE + i] = H->sc[(h0 + k) * KVQ_TILE + at[i]];
        for (j = 0; j < m; j += run) {                  /* usually one run   */
            run = kvq__run(rows, j, m, bytes);
#define KVQ__RB(NH, F16) kvq__tile_block(out, D, D, (const char *)rows[j], bytes, run, wt + j, \
                                         NULL, NH, F16 ? KVQ__SRC_F16 : KVQ__SRC_F32)
            KVQ__WITH_NH_F16(KVQ__RB, nh, f16);
#undef KVQ__RB
        }
    }
}

/* 0 if a[j] = a0 + j for every j < n (mod 2^32), else not: 8 a step
   with AVX2 (the compiler left the loop scalar, 3 instructions an entry) */
static uint32_t kvq__run_off(const uint32_t *a, uint32_t a0, size_t n)
{
    uint32_t off = 0;
    size_t j = 0;
#if KVQ__W >= 8
    __m256i acc = _mm256_setzero_si256(),
            next = _mm256_add_epi32(_mm256_set1_epi32((int)a0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (; j + 8 <= n; j += 8) {
        acc = _mm256_or_si256(acc, _mm256_xor_si256(
            _mm256_loadu_si256((const __m256i *)(const void *)(a + j)), next));
        next = _mm256_add_epi32(next, _mm256_set1_epi32(8));
    }
    off = (uint32_t)!_mm256_testz_si256(acc, acc);
#endif
    for (; j < n; j++) off |= a[j] ^ (a0 + (uint32_t)j);
    return off;
}

/* 1 if every entry j < n of the tile is attended and V keeps its position
   at loc0 + j (the slot after entry j-1's); pos[0] is loc0's and >= 0.
   The usual tile's positions follow each other too (KIVI's and HF's
   tokens, in order): then their map entries are one run, and the check is
   two passes of n consecutive words (kvq__run_off; no gather). Else, with AVX-512 and a full tile, 16 entries a step: one
   gather of their map entries and one comparison.                        */
static int kvq__tile_follows(const uint32_t *loc, const int32_t *pos /* (n) */, size_t n,
                             uint32_t loc0)
{
    const int32_t p0 = pos[0];
    size_t j;
    if (kvq__run_off((const uint32_t *)(const void *)pos, (uint32_t)p0, n) == 0)
        /* positions p0 .. p0 + n - 1: their slots loc0 .. loc0 + n - 1   */
        return kvq__run_off(loc + p0, loc0, n) == 0;
#if KVQ__W == 16
    if (n == KVQ_TILE) {
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (j = 0; j < n; j += 16) {
            const __m512i p = _mm512_loadu_si512((const void *)(pos + j));
            if (_mm512_cmplt_epi32_mask(p, _mm512_setzero_si512())) return 0;  /* one not attended */
            if (_mm512_cmpneq_epi32_mask(_mm512_i32gather_epi32(p, (const void *)loc, 4),
                                         _mm512_add_epi32(_mm512_set1_epi32((int)(loc0 + j)), lane)))
                return 0;
        }
        return 1;
    }
#endif
    for (j = 1; j < n && pos[j] >= 0 && loc[pos[j]] == loc0 + (uint32_t)j; j++) {}
    return j == n;
}

/* kvq__map_outside's test on the first entries of a map, 8 a step with
   AVX2, and so in AVX-512 builds too (they have AVX2: one body for both
   widths, so the code the x86 test runs execute is the code that ships;
   the maps cost about 0.02 instructions per element either way), each
   tag's (off, len) found by a permute of the table: bad gets a nonzero
   bit if an entry is outside; returns how many entries it took (none on
   other targets, whose compilers vectorize Part I's loop as it is). The
   permute reads the tag's low 3 bits: tags 8-15 are caught by their top
   bit.                                                                   */
static size_t kvq__map_lanes(const uint32_t *map, size_t n, const uint32_t *off,
                             const uint32_t *len, uint32_t *bad)
{
    size_t p = 0;
#if KVQ__W >= 8
    const __m256i offv = _mm256_loadu_si256((const __m256i *)(const void *)off),
                  lenv = _mm256_loadu_si256((const __m256i *)(const void *)len),
                  low = _mm256_set1_epi32(0x0FFFFFFF);
    __m256i out = _mm256_setzero_si256(), top = _mm256_setzero_si256();
    for (; p + 8 <= n; p += 8) {
        const __m256i m = _mm256_loadu_si256((const __m256i *)(const void *)(map + p)),
                      tag = _mm256_srli_epi32(m, 28),
                      x = _mm256_sub_epi32(_mm256_and_si256(m, low),
                                           _mm256_permutevar8x32_epi32(offv, tag));
        /* x >= len: max(x, len) == x                                       */
        out = _mm256_or_si256(out, _mm256_cmpeq_epi32(
            _mm256_max_epu32(x, _mm256_permutevar8x32_epi32(lenv, tag)), x));
        top = _mm256_or_si256(top, m);
    }
    *bad |= (uint32_t)(_mm256_movemask_epi8(out) != 0) |
            (uint32_t)(_mm256_movemask_ps(_mm256_castsi256_ps(top)) != 0);
#else
    (void)map; (void)n; (void)off; (void)len; (void)bad;
#endif
    return p;
}

/* out_h += sum_j w_hj v_pj over the tile's present positions, sorted in one
   walk: full-precision rows (16 | D) go through kvq__tile_rows, per-token
   quantized values with 16 | G (every preset's value store) through
   kvq__tile_block, both a tile at a time; the rest (per-channel values,
   other G or D) one position at a time (kvq__add_value), in that order.
   Then, per group g, with the m quantized slots' weights w_hj packed to
   the front of each head's score row (once the others have read theirs):
       wa_hj = w_hj a_jg,   wb_h = sum_j w_hj b_jg   (kvq__dot's order)   */
static void kvq__tile_values(const kvq_cache *c, kvq__heads *H, size_t n)
{
    const kvq_side *s = &c->v;
    size_t D = c->cfg.head_dim, G = s->group, gpu = s->geom.groups_per_unit,
           wpg = s->geom.words_per_group, m = 0, m_rows = 0, m_1 = 0, j, g, g0, h0, h, run,
           slot_bytes = gpu * wpg * sizeof(uint32_t);     /* one slot's codes */
    const void *w[KVQ_TILE];               /* the quantized slots' codes     */
    const kvq_sz *sz[KVQ_TILE];            /* and their (s, z) per group     */
    const void *rows[KVQ_TILE];            /* the full-precision rows        */
    size_t at_q[KVQ_TILE], at_r[KVQ_TILE], at_1[KVQ_TILE];   /* tile entries of
                                              each kind (1: one at a time)   */
    int blocks = s->schedule != KVQ_SCHED_NONE && s->axis == KVQ_PER_TOKEN && G % 16 == 0;
    int in_place = 1;                      /* every at_q[j] == j so far      */
    int consecutive = 1;                   /* slot j == slot 0 + j so far    */
    /* the usual tile: every entry attended, quantized, in the slots that
       follow entry 0's (KIVI's and HF's tiles of past tokens): only the
       first slot's codes and (s, z) are named, as the sort below would    */
    if (blocks && n > 0 && H->pos[0] >= 0 && KVQ_LOC_TAG(s->loc[H->pos[0]]) == KVQ_LOC_QUANT) {
        const uint32_t loc0 = s->loc[H->pos[0]];
        if (kvq__tile_follows(s->loc, H->pos, n, loc0)) {
            m = n;
            w[0] = s->words + KVQ_LOC_INDEX(loc0) * gpu * wpg;
            sz[0] = s->sz + KVQ_LOC_INDEX(loc0) * gpu;   /* one run: the others
                                               are read only past 16 groups */
            if (gpu > 16)
                for (j = 1; j < m; j++) sz[j] = sz[0] + j * gpu;
        }
    }
    for (j = m; j < n; j++) {              /* else sort the entries (from 0) */
        uint32_t loc, tag;
        if (H->pos[j] < 0) continue;
        loc = s->loc[H->pos[j]];
        tag = KVQ_LOC_TAG(loc);
        if (tag == KVQ_LOC_ABSENT) continue;    /* only in a corrupt cache */
        if (tag != KVQ_LOC_QUANT && D % 16 == 0) {
            rows[m_rows] = kvq__row_ptr(c, &s->rows[tag - KVQ_LOC_ROWS0], KVQ_LOC_INDEX(loc));
            at_r[m_rows++] = j;
        } else if (tag == KVQ_LOC_QUANT && blocks) {
            size_t slot = KVQ_LOC_INDEX(loc);
            w[m] = s->words + slot * gpu * wpg;
            sz[m] = s->sz + slot * gpu;
            consecutive &= m == 0 || sz[m] == sz[0] + m * gpu;
            in_place &= m == j;
            at_q[m++] = j;
        } else {
            at_1[m_1++] = j;
        }
    }
    if (m_rows) kvq__tile_rows(c, H, rows, at_r, m_rows);
    for (j = 0; j < m_1; j++) kvq__add_value(c, H, (size_t)H->pos[at_1[j]], at_1[j]);
    for (j = 0; j < m && !in_place; j++)                /* pack the weights: */
        for (h = 0; h < H->n; h++)                      /* j <= at_q[j]      */
            H->sc[h * KVQ_TILE + j] = H->sc[h * KVQ_TILE + at_q[j]];
    if (m == 0) return;
    for (g0 = 0; g0 < gpu; g0 += 16) {
        /* (s, z) of up to 16 groups of every slot as floats, sf[2 (j ng +
           g - g0)] and the next. Slots that follow each other in storage
           (the usual tile) hold theirs in one run: one conversion.        */
        size_t ng = gpu - g0 < 16 ? gpu - g0 : 16;
        float sf[2 * KVQ_TILE * 16], wa[4 * KVQ_TILE], wb[4];
        float ab_a[16 * KVQ_TILE], ab_b[16 * KVQ_TILE];   /* group g - g0's a, b
                                                   of slot j: [(g - g0) TILE + j] */
        if (ng == gpu && consecutive)
            kvq__f16_row(&sz[0]->scale, 2 * m * gpu, sf);
        else
            for (j = 0; j < m; j++) kvq__f16_row(&sz[j][g0].scale, 2 * ng, sf + 2 * j * ng);
        for (j = 0; j < m; j += 16)          /* 16 slots' (a, b), by column   */
            kvq__ab_columns(sf + 2 * j * ng, ng, m - j < 16 ? m - j : 16, c->cfg.zero_mode,
                            ab_a + j, ab_b + j, KVQ_TILE);
        for (g = g0; g < g0 + ng; g++) {
            const float *a = ab_a + (g - g0) * KVQ_TILE, *b = ab_b + (g - g0) * KVQ_TILE;
            for (h0 = 0; h0 < H->n; h0 += kvq__head_batch(H->n - h0)) {
                int nh = (int)kvq__head_batch(H->n - h0), k;
                float *out = H->out + h0 * D;
                for (k = 0; k < nh; k++) {
                    const float *wt = H->sc + (h0 + (size_t)k) * KVQ_TILE;
                    if (KVQ__W > 1 && m == KVQ_TILE) {    /* the usual tile */
                        kvq__store16(wa + k * KVQ_TILE, kvq__mul16(kvq__load16(wt), kvq__load16(a)));
                        kvq__store16(wa + k * KVQ_TILE + 16,
                                     kvq__mul16(kvq__load16(wt + 16), kvq__load16(a + 16)));
                    } else
                        for (j = 0; j < m; j++) wa[k * KVQ_TILE + j] = wt[j] * a[j];
                    wb[k] = kvq__dot(wt, b, m);
                }
                for (j = 0; j < m; j += run) {          /* usually one run   */
                    run = consecutive ? m : kvq__run(w, j, m, slot_bytes);
#define KVQ__VB(NH, BITS) kvq__tile_block(out + g * G, D, G,                                     \
                                          (const char *)w[j] + g * wpg * sizeof(uint32_t),     \
                                          slot_bytes, run, wa + j, j ? NULL : wb, NH, BITS)
                    KVQ__WITH_NH_BITS(KVQ__VB, nh, s->bits);
#undef KVQ__VB
                }
            }
        }
    }
}

/* The online softmax step for a scored tile of n entries, then its values:
       m' = max(m, max_j s_j),  l' = l e^(m-m') + sum_j e^(s_j-m'),
       out' = out e^(m-m') + sum_j e^(s_j-m') v_j
   A tile is two 16-lane vectors: entries past n or not attended score
   -inf, so their weight e^(-inf) is 0; the weights come from kvq__exp16
   and are summed by kvq__hsum16's tree (the rescale factor e^(m-m'), once
   per tile at most, from expf).                                           */
static void kvq__tile_update(const kvq_cache *c, kvq__heads *H, size_t n)
{
    size_t D = c->cfg.head_dim, h, j, d;
    const int32_t *pos = H->pos;
    int32_t neg = 0;                    /* < 0 if an entry is not attended */
    for (j = 0; j < n; j++) neg |= pos[j];
    for (h = 0; h < H->n; h++) {
        float *sc = H->sc + h * KVQ_TILE, *out = H->out + h * D;
        float m = H->m[h], tile_max;
        kvq__v16 lo, hi, lo_hi;
        if (n < KVQ_TILE || neg < 0)    /* the usual tile has nothing to mask */
            for (j = 0; j < KVQ_TILE; j++)
                if (j >= n || pos[j] < 0) sc[j] = -INFINITY;
        lo = kvq__load16(sc);
        hi = kvq__load16(sc + 16);
        lo_hi = kvq__max16(lo, hi);
        tile_max = kvq__hmax16(&lo_hi);
        if (tile_max == -INFINITY) continue;            /* nothing attended  */
        if (tile_max > m) {
            float r = expf(m - tile_max);                 /* e^-inf = 0     */
            for (d = 0; d < D; d++) out[d] *= r;
            H->l[h] *= r;
            m = tile_max;
        }
        lo = kvq__sub16(lo, kvq__splat16(m));
        hi = kvq__sub16(hi, kvq__splat16(m));
        kvq__exp16(&lo);
        kvq__exp16(&hi);
        kvq__store16(sc, lo);
        kvq__store16(sc + 16, hi);
        lo_hi = kvq__add16(lo, hi);
        H->l[h] += kvq__hsum16(&lo_hi);
        H->m[h] = m;
    }
    kvq__tile_values(c, H, n);
}

/* One walk of the whole cache for the batch: out = softmax(q K^T / sqrt(D)) V.
   With AVX-512 or AVX2, 2-bit per-token keys (16 | G) and up to
   KVQ__PAIR_HEAD_DIMS query values in the batch, the keys' pair table
   lives here, 32 KB at most (8 floats per query value; 40 KB, 10 floats,
   built for Zen 1): built once per walk.                                 */
#define KVQ__PAIR_HEAD_DIMS 1024

/* A hint that n bytes from p will be read soon: one prefetch per 64-byte
   line (GCC, clang; nothing elsewhere). Reads nothing, changes nothing.  */
static KVQ__INLINE void kvq__prefetch(const void *p, size_t n)
{
#if defined(__GNUC__) || defined(__clang__)
    const char *at = (const char *)p;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {           /* four lines a step */
        __builtin_prefetch(at + i, 0, 3);
        __builtin_prefetch(at + i + 64, 0, 3);
        __builtin_prefetch(at + i + 128, 0, 3);
        __builtin_prefetch(at + i + 192, 0, 3);
    }
    for (; i < n; i += 64) __builtin_prefetch(at + i, 0, 3);
#else
    (void)p; (void)n;
#endif
}

/* Ask for the codes of the quantized store's slots slot0 .. slot0+n-1 of
   both sides before the walk reaches them (per-token keys: slot = unit).
   A cold walk (a decode over many layers: the cache's bytes come from
   DRAM) otherwise waits on several short streams at once, each too short
   per tile for the hardware prefetchers to run ahead of it: at T = 32K,
   HF-2 with one head ran a third slower cold than warm. The codes are the
   long streams; hints for the scales, zeros and maps as well cost the warm
   walk 4% and the cold one nothing more. V's slots are taken at K's
   indices (where KIVI and HF keep them, less the window); a wrong guess
   costs a few wasted lines, never a wrong result. Per-token keys only:
   for KIVI's per-channel keys the same hints made a cold walk slower (T =
   32K, one head: 0.53 -> 0.60 ms). Inlined: GCC deems a function that only
   prefetches pure and deletes the call.                                   */
#define KVQ__AHEAD_SLOTS (4 * KVQ_TILE)   /* 2, 4, 8 tiles: the same time */
static KVQ__INLINE void kvq__prefetch_slots(const kvq_cache *c, size_t slot0, size_t n)
{
    int side;
    for (side = 0; side < 2; side++) {
        const kvq_side *s = side ? &c->v : &c->k;
        size_t tpu = s->geom.tokens_per_unit, per = s->geom.groups_per_unit, u0, u1;
        if (s->schedule == KVQ_SCHED_NONE || tpu == 0) continue;
        u0 = tpu == 1 ? slot0 : slot0 / tpu;            /* per-token: no divide */
        u1 = tpu == 1 ? slot0 + n : (slot0 + n + tpu - 1) / tpu;
        if (u1 > s->n_units) u1 = s->n_units;
        if (u0 >= u1) continue;
        kvq__prefetch(s->words + u0 * per * s->geom.words_per_group,
                      (u1 - u0) * per * s->geom.words_per_group * sizeof(uint32_t));
    }
}

static void kvq__online_walk(const kvq_cache *c, kvq__heads *H)
{
    const kvq_side *s = &c->k;
    size_t D = c->cfg.head_dim, h, d, j, u, r;
#if KVQ__W == 16 || KVQ__W == 8
    float pairs[KVQ__PAIR_FLOATS * KVQ__PAIR_HEAD_DIMS]  /* (n, D/2, 16)      */
        __attribute__((aligned(64)));
    H->pairs = NULL;
    if (s->schedule != KVQ_SCHED_NONE && s->axis == KVQ_PER_TOKEN && s->bits == 2 &&
        s->group % 16 == 0 && H->n * D <= KVQ__PAIR_HEAD_DIMS) {
        H->pairs = pairs;
#if KVQ__W == 8 && KVQ__ZEN1             /* q_d / 4 normal: exact     */
        for (d = 0; d < H->n * D; d++)
            if (H->q[d] != 0.0f && fabsf(H->q[d]) < 1e-30f) H->pairs = NULL;
#endif
        if (H->pairs) kvq__key_pairs(H->q, H->n, D, pairs);
    }
#else
    H->pairs = NULL;
#endif
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
            if (s->axis == KVQ_PER_CHANNEL) kvq__unit_qa(c, H, u);
            for (t0 = 0; t0 < n_tile; t0 += KVQ_TILE) {
                size_t n = n_tile - t0 < KVQ_TILE ? n_tile - t0 : KVQ_TILE,
                       slot0 = u * tpu + t0;
                int any = 0;
                if (s->axis == KVQ_PER_TOKEN && u + n > s->n_units) n = s->n_units - u;
                for (j = 0; j < n; j++) any |= (H->pos[j] = s->qpos[slot0 + j]) >= 0;
                if (!any) continue;                     /* placeholders only */
                if (s->axis == KVQ_PER_TOKEN) kvq__prefetch_slots(c, slot0 + KVQ__AHEAD_SLOTS, n);
                if (s->axis == KVQ_PER_CHANNEL) kvq__scores_channel(c, H, u, t0, n);
                else kvq__scores_token(c, H, slot0, n);
                kvq__tile_update(c, H, n);
            }
        }
    }
    for (r = 0; r < KVQ_ROW_REGIONS; r++) {
        const kvq_rows *rg = &s->rows[r];
        size_t i0;
        for (i0 = rg->off; i0 < rg->off + rg->n; i0 += KVQ_TILE) {
            size_t n = rg->off + rg->n - i0 < KVQ_TILE ? rg->off + rg->n - i0 : KVQ_TILE;
            for (j = 0; j < n; j++) H->pos[j] = rg->pos[i0 + j];
            kvq__scores_rows(c, H, rg, i0, n);
            kvq__tile_update(c, H, n);
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
    /* as many heads per walk as the scratch holds (at least one)       */
    size_t per_head = D + KVQ_TILE + 3, batch = (scratch_floats - D) / per_head;
    kvq__heads H;
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
        kvq__online_walk(c, &H);
    }
}

/* ------------------------------------------------------------------------ */
/* II.4 the rotation                                                        */
/* ------------------------------------------------------------------------ */
/* ---- the Walsh-Hadamard transform, 16 lanes at a time ------------------
   kvq__rotate_row_fast(sign, D, inverse, in, out) is kvq__rotate_row
   (Sec. 6.1) bit for bit: every output is the same chain of a + b and a - b
   on the same pairs, stage after stage in the same order, then the same
   multiply by (float)(1/sqrt(D)), with the sign flip (exact) before the
   butterflies (rotate) or after the scale (rotate back). tests/simd_check.c
   holds it to kvq__rotate_row for D = 1 .. 4096, both directions, with and
   without signs, on data up to +-65504 and down to subnormals, in every
   vector width; tests/test_rotation.c holds the cache's use of it.

   Why it is exact. A stage replaces (x_j, x_{j+h}) by (x_j + x_{j+h},
   x_j - x_{j+h}); IEEE addition is commutative and a - b is a + (-b), so
   the pair can be formed in any lane arrangement as long as each output
   is that one rounded sum. The row is cut in blocks of 16 floats:

     h = 1, 2, 4, 8   pairs inside one block, held in registers. Where h
                      spans native vectors (h >= W) it is a whole-vector
                      add and subtract of two parts; inside a native vector
                      (h < W) each lane needs its partner: p = the vector
                      with lanes j and j ^ h swapped (one permute), then
                      y = p + x * s_h with s_h = +1 on lanes whose bit h is
                      clear, -1 where set: x_j + x_{j+h} low, x_j - x_{j+h}
                      high (x * (+-1) is exact, so a fused multiply-add
                      rounds once, the same sum).
     h = 16 .. D/2    pairs of whole blocks, a row pass per stage.

   The four inner stages touch only their block, so they may run block
   after block or stage after stage across blocks: the order across blocks
   changes nothing. The last pass scales (and flips, rotating back) and
   returns max |out|, which the cache's range check needs anyway. With
   AVX-512 and D <= 128 the whole row stays in registers from load to
   store (KVQ__ROT_REG_BLOCKS). D < 16 takes kvq__rotate_row.             */

/* x with lanes j and j ^ h swapped inside each native vector (h < W)     */
static KVQ__VINLINE kvq__vf kvq__vswap(kvq__vf x, int h)
{
#if KVQ__W == 16
    __m512 v = (__m512)x;
    return (kvq__vf)(h == 1 ? _mm512_permute_ps(v, 0xB1)          /* 1 0 3 2 */
                   : h == 2 ? _mm512_permute_ps(v, 0x4E)          /* 2 3 0 1 */
                   : h == 4 ? _mm512_shuffle_f32x4(v, v, 0xB1)    /* 128-bit quarters */
                   :          _mm512_shuffle_f32x4(v, v, 0x4E));  /* 256-bit halves */
#elif KVQ__W == 8
    __m256 v = (__m256)x;
    return (kvq__vf)(h == 1 ? _mm256_permute_ps(v, 0xB1)
                   : h == 2 ? _mm256_permute_ps(v, 0x4E)
                   :          _mm256_permute2f128_ps(v, v, 0x01));
#elif KVQ__W == 4
    float32x4_t v = (float32x4_t)x;
    return (kvq__vf)(h == 1 ? vrev64q_f32(v) : vextq_f32(v, v, 2));
#else
    (void)h;
    return x;                                     /* W = 1: never called */
#endif
}

/* s_h of the comment above, lane j of row log2(h): +1, or -1 if j & h     */
static const float kvq__bfly_sign[4][16] = {
    { 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1 },
    { 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1 },
    { 1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1 },
    { 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1 },
};

/* stages h = 1, 2, 4, 8 of each of the n 16-float blocks x[0 .. n-1], a
   stage at a time (the blocks are independent)                           */
static KVQ__VINLINE void kvq__hadamard16(kvq__v16 *x, size_t n)
{
    size_t i;
    int lg, k;
    KVQ__UNROLL(4)
    for (lg = 0; lg < 4; lg++) {
        int h = 1 << lg;
        if (h < KVQ__W) {                              /* inside each part */
            const kvq__vf s = KVQ__VLOAD(kvq__bfly_sign[lg]);
            KVQ__UNROLL(8)
            for (i = 0; i < n; i++)
                KVQ__EACH(k) x[i].part[k] = KVQ__VFMA(kvq__vswap(x[i].part[k], h), x[i].part[k], s);
        } else {                                       /* part with part */
            int ph = h / KVQ__W;
            KVQ__UNROLL(8)
            for (i = 0; i < n; i++)
                KVQ__EACH(k) if (!(k & ph)) {
                    kvq__vf a = x[i].part[k], b = x[i].part[k + ph];
                    x[i].part[k] = a + b;
                    x[i].part[k + ph] = a - b;
                }
        }
    }
}

/* out[j..j+16) <- v. On the last pass (last != 0) v is first scaled and,
   rotating back, flipped by sign (D) when non-NULL; returns big, or max(big,
   |v|) on the last pass. Values in and out, so the running max stays in
   registers.                                                              */
static KVQ__VINLINE kvq__v16 kvq__rot_put(float *out, size_t j, kvq__v16 v, int last,
                                          kvq__v16 scale, const float *sign, kvq__v16 big)
{
    if (last) {
        v = kvq__mul16(v, scale);
        if (sign) v = kvq__mul16(v, kvq__load16(sign + j));
#if KVQ__W == 16 && defined(__AVX512DQ__)
        /* max(|big|, |v|) with the sign cleared: one vrangeps, not an and
           and a max (the same floats: both are >= 0 and exact)            */
        big.part[0] = (kvq__vf)_mm512_range_ps((__m512)big.part[0], (__m512)v.part[0], 0x0B);
#else
        big = kvq__max16(big, kvq__abs16(v));
#endif
    }
    kvq__store16(out + j, v);
    return big;
}

/* The stages between R blocks x[0 .. R-1] (R a power of two) that lie h,
   2h, .. (R/2) h floats apart: the first pairs block r with r + 1, the
   next r with r + 2, then r + 4 .. (r's bit clear).                      */
static KVQ__VINLINE void kvq__rot_blocks(kvq__v16 *x, int R)
{
    int r, st;
    KVQ__UNROLL(4)
    for (st = 1; st < R; st *= 2)
        KVQ__UNROLL(8)
        for (r = 0; r < R; r++)
            if (!(r & st)) {
                kvq__v16 a = x[r], b = x[r + st];
                x[r] = kvq__add16(a, b);
                x[r + st] = kvq__sub16(a, b);
            }
}

/* R stages h, 2h, .. (R/2) h in one pass over the row: blocks j + r h,
   r = 0 .. R-1, in registers, for every j (kvq__rot_blocks). Returns big
   as kvq__rot_put does (last: the final pass).                           */
static KVQ__VINLINE kvq__v16 kvq__rot_pass(float *out, size_t D, size_t h, int R, int last,
                                           kvq__v16 scale, const float *flip, kvq__v16 big)
{
    size_t i, j;
    int r;
    for (i = 0; i < D; i += (size_t)R * h)
        for (j = i; j < i + h; j += 16) {
            kvq__v16 x[8];
            for (r = 0; r < R; r++) x[r] = kvq__load16(out + j + (size_t)r * h);
            kvq__rot_blocks(x, R);
            for (r = 0; r < R; r++)
                big = kvq__rot_put(out, j + (size_t)r * h, x[r], last, scale, flip, big);
        }
    return big;
}

/* AVX-512 rotates rows of up to this many 16-float blocks (D <= 128)
   with every block in a register from its load to its store: the passes
   below would store the row after the blocks' stages and load it back
   (with 16 registers, AVX2 would spill a D = 128 row instead). The GCC
   unroll pragma lets the registers replace the array x: unrolled later,
   GCC keeps x in memory.                                                  */
#if KVQ__W == 16
#define KVQ__ROT_REG_BLOCKS 8
#endif

/* out (D) <- R in or R^T in, kvq__rotate_row's floats; in == out allowed.
   Returns max |out|. Passes over the row, for D = 128 (AVX2): the blocks
   (stages 1 .. 8), then stages 16, 32 and 64 with the scale. With vector
   lanes it is inlined into kvq__rotate_row_fast once per common D.       */
static KVQ__VINLINE float kvq__rotate_row_d(const float *sign, size_t D, int inverse,
                                            const float *in, float *out)
{
    const float *flip = inverse ? sign : NULL;    /* signs after the scale */
    kvq__v16 scale, big = kvq__splat16(0.0f);
    size_t h, i, j;
    if (D < 16) {
        float m = 0.0f;
        if (out != in) memmove(out, in, D * sizeof(float));
        kvq__rotate_row(sign, D, inverse, out);
        for (j = 0; j < D; j++) m = fabsf(out[j]) > m ? fabsf(out[j]) : m;
        return m;
    }
    scale = kvq__splat16((float)(1.0 / sqrt((double)D)));
#ifdef KVQ__ROT_REG_BLOCKS
    if (D <= 16 * KVQ__ROT_REG_BLOCKS) {
        /* the same stages in the same order, the row in registers: signs
           and stages 1 .. 8 of every block, the stages between blocks,
           the scale (and signs), one store a block                       */
        kvq__v16 x[KVQ__ROT_REG_BLOCKS];
        KVQ__UNROLL(8)
        for (i = 0; i < D / 16; i++) {
            x[i] = kvq__load16(in + 16 * i);
            if (sign && !inverse) x[i] = kvq__mul16(x[i], kvq__load16(sign + 16 * i));
        }
        kvq__hadamard16(x, D / 16);
        kvq__rot_blocks(x, (int)(D / 16));
        KVQ__UNROLL(8)
        for (i = 0; i < D / 16; i++) big = kvq__rot_put(out, 16 * i, x[i], 1, scale, flip, big);
        return kvq__hmax16(&big);
    }
#endif
    /* 1. signs (rotating), stages 1 .. 8 in each block                    */
    for (i = 0; i < D; i += 16) {
        kvq__v16 v = kvq__load16(in + i);
        if (sign && !inverse) v = kvq__mul16(v, kvq__load16(sign + i));
        kvq__hadamard16(&v, 1);
        big = kvq__rot_put(out, i, v, D == 16, scale, flip, big);
    }
    /* 2. stages 16 .. D/2: 4 of them a pass while more than 3 are left,
          then the last 3 (all 8 blocks in registers where they fit:
          AVX-512; else 2 + 1), 2 or 1, that pass with the scale. Written
          so that h is a plain geometric loop: with D a constant, it and
          every pass unroll completely.                                   */
    for (h = 16; h * 8 < D; h *= 4) big = kvq__rot_pass(out, D, h, 4, 0, scale, flip, big);
    if (h * 8 == D && KVQ__W == 16) big = kvq__rot_pass(out, D, h, 8, 1, scale, flip, big);
    else if (h * 8 == D) {
        big = kvq__rot_pass(out, D, h, 4, 0, scale, flip, big);
        big = kvq__rot_pass(out, D, 4 * h, 2, 1, scale, flip, big);
    } else if (h * 4 == D) big = kvq__rot_pass(out, D, h, 4, 1, scale, flip, big);
    else if (h * 2 == D) big = kvq__rot_pass(out, D, h, 2, 1, scale, flip, big);
    return kvq__hmax16(&big);
}

/* kvq__rotate_row_d with D a constant where it is a common head size: its
   loops then unroll completely and 1/sqrt(D) is folded (AVX2, D = 128:
   372 instructions a row, the loads, butterflies and stores and little
   else).                                                                 */
static float kvq__rotate_row_fast(const float *sign, size_t D, int inverse,
                                  const float *in, float *out)
{
    switch (D) {
    case 64:  return kvq__rotate_row_d(sign, 64, inverse, in, out);
    case 128: return kvq__rotate_row_d(sign, 128, inverse, in, out);
    case 256: return kvq__rotate_row_d(sign, 256, inverse, in, out);
    default:  return kvq__rotate_row_d(sign, D, inverse, in, out);
    }
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
