/* fuzz/fuzz.h - shared by the libFuzzer targets in fuzz/.

   Each target defines LLVMFuzzerTestOneInput and checks real properties:
   FZ_ASSERT aborts (libFuzzer then saves the input as a crash) with the
   failed condition. Inputs are consumed through a cursor that returns
   zeros once the bytes run out, so every input, even empty, is a valid
   program for the target.

   Built by `make fuzz` with clang -fsanitize=fuzzer,address,undefined.    */
#ifndef KVQ_FUZZ_H
#define KVQ_FUZZ_H
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define FZ_ASSERT(c, ...)                                                     \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "FZ_ASSERT %s:%d: %s: ", __FILE__, __LINE__, #c); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            abort();                                                          \
        }                                                                     \
    } while (0)

typedef struct { const uint8_t *p; size_t n, i; } fz;
static inline uint8_t fz_u8(fz *f) { return f->i < f->n ? f->p[f->i++] : 0; }
static inline uint32_t fz_u32(fz *f)
{
    uint32_t v = fz_u8(f);
    v |= (uint32_t)fz_u8(f) << 8; v |= (uint32_t)fz_u8(f) << 16; v |= (uint32_t)fz_u8(f) << 24;
    return v;
}
static inline int fz_left(const fz *f) { return f->i < f->n; }
static inline float fz_bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* A small PRNG for bulk data whose seed comes from the input.             */
static inline uint64_t fz_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void fz_poison(void *p, size_t n) { memset(p, 0xA5, n); }
static inline int fz_poisoned(const void *p, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    size_t i;
    for (i = 0; i < n; i++) if (b[i] != 0xA5) return 0;
    return 1;
}
#endif
