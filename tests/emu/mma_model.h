/* tests/emu/mma_model.h - the arithmetic of mma.sync.m16n8k16 (f16 x f16
   -> f32) in the emulator's two accumulation models, and fp16 <-> double.
   Pure C++ (no CUDA type, no state): the emulator (kvq_emu.cpp) computes
   every emulated MMA with it, and bench/mma_selftest.cu compares a GPU's
   tensor cores with it, so that both speak of the same models.

     kvq_mma_model::f64_to_f16(x)    round to nearest even (raw fp16 bits)
     kvq_mma_model::f16_to_f64(h)    exact
     kvq_mma_model::mma(A, B, C, D, model, keep_subnormals)
         D = A B + C on whole matrices: A 16 x 16 and B 16 x 8 fp16 (raw
         bits, row-major), C and D 16 x 8 float (row-major; D may be C).
         model EXACT: every product exact, summed in double, rounded once
         to fp32 (nearest even). TRUNC: a model of the hardware after
         Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA
         tensor cores" (PeerJ CS 2021): the accumulator and 8 products at
         a time aligned to the largest exponent among them, each cut to
         24 bits below it toward zero, summed exactly, the sum cut to fp32
         toward zero. keep_subnormals = false: fp16 subnormal inputs count
         as zero (of the same sign).                                      */
#ifndef KVQ_MMA_MODEL_H
#define KVQ_MMA_MODEL_H

#include <math.h>

namespace kvq_mma_model {

enum accumulation { EXACT = 0, TRUNC = 1 };

/* Round to nearest even. Normal results: x = m 2^(E-10), m in [1024, 2048)
   after rounding, the exponent bumped if m rounds up to 2048; subnormal
   results: m = x 2^24 rounded, which also rounds up into the smallest
   normal correctly (m = 1024 is its bit pattern). x 2^k is exact in
   double, and rint rounds half to even.                                   */
inline unsigned short f64_to_f16(double x)
{
    const unsigned short sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs(x);
    if (a != a) return 0x7fff;                       /* NaN: CUDA's canonical */
    if (a == INFINITY) return sign | 0x7c00;
    if (a < 6.103515625e-05) return sign | (unsigned short)rint(ldexp(a, 24));
    int e;
    frexp(a, &e);                                    /* a in [2^(e-1), 2^e)   */
    int E = e - 1;
    double m = rint(ldexp(a, 10 - E));
    if (m == 2048.0) { m = 1024.0; E++; }
    if (E > 15) return sign | 0x7c00;                /* overflow -> Inf       */
    return sign | (unsigned short)((E + 15) << 10) | (unsigned short)(m - 1024.0);
}

inline double f16_to_f64(unsigned short h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? copysign(NAN, s) : s * INFINITY;
    if (e == 0) return s * ldexp((double)m, -24);
    return s * ldexp((double)(m + 1024), e - 25);
}

/* x cut to a multiple of q (a power of two) toward zero: exact.          */
inline double cut(double x, double q) { return trunc(x / q) * q; }
inline float to_f32_toward_zero(double x)
{
    float f = (float)x;
    if (isfinite(x) && fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
    return f;
}

inline void mma(const unsigned short *A, const unsigned short *B, const float *C, float *D,
                accumulation model, bool keep_subnormals)
{
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double p[16];
            for (int k = 0; k < 16; k++) {
                double a = f16_to_f64(A[i * 16 + k]), b = f16_to_f64(B[k * 8 + j]);
                if (!keep_subnormals) {
                    if (fabs(a) < 6.103515625e-05) a = 0.0 * a;
                    if (fabs(b) < 6.103515625e-05) b = 0.0 * b;
                }
                p[k] = a * b;                          /* exact: 11 x 11 bits   */
            }
            double acc = C[i * 8 + j];
            if (model == EXACT) {
                for (int k = 0; k < 16; k++) acc += p[k];
                D[i * 8 + j] = (float)acc;
                continue;
            }
            /* trunc: two blocks of 8 products, each with the accumulator */
            for (int k0 = 0; k0 < 16; k0 += 8) {
                double big = fabs(acc);
                for (int k = k0; k < k0 + 8; k++) big = fmax(big, fabs(p[k]));
                if (!isfinite(big) || big == 0.0) {
                    for (int k = k0; k < k0 + 8; k++) acc += p[k];
                    continue;
                }
                int e;
                frexp(big, &e);                        /* big in [2^(e-1), 2^e) */
                const double q = ldexp(1.0, e - 24);   /* 24 bits below the top */
                double s = cut(acc, q);
                for (int k = k0; k < k0 + 8; k++) s += cut(p[k], q);   /* exact */
                acc = to_f32_toward_zero(s);
            }
            D[i * 8 + j] = (float)acc;
        }
}

}   /* namespace kvq_mma_model */

#endif /* KVQ_MMA_MODEL_H */
