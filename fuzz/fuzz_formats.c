/* fuzz/fuzz_formats.c - kvq_format_quantize / _dequantize (kvq.h Sec. 4.1)
   on arbitrary bytes.

   Input: 5 bytes of shape (format, bits, n, stride, how to read the data),
   4 bytes of the side scale (raw fp32 bits, or a tame value), then the
   data: raw float32 bit patterns (every NaN, Inf, subnormal and huge
   value) or small "grid" values (ties and constant runs), cycled.

   Properties:
   - the status is the one an independent check predicts: BITS for a
     width the format does not take, SIZE for a group the format does not
     take, RANGE for a side scale that is not finite and > 0 (formats
     with a side scale), NONFINITE for any NaN/Inf, RANGE when the group's
     own scale overflows (q8_0 / q4_0's fp16 d; asserted only away from
     the threshold), else OK; on failure codes and param are untouched;
   - on success every code is a finite value of the grid, dequantizing
     gives value(c) a (+ b) with a finite a, and each value is within the
     format's rounding bound of its input: half a grid step at its scaled
     magnitude (FP8, E2M1), the saturation distance beyond the grid's
     largest value, half a step plus the fp16 rounding of d (q8_0, q4_0:
     a whole step at q4_0's clamped code 15); Lloyd-Max codes are the
     nearest centroid to the scaled value (within 1e-6 of the best);
   - quantizing again gives the same bytes.                                */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "fuzz.h"

#define MAXN 64

/* The widths and fixed groups of each format, as Sec. 4.1 states them.   */
static int bits_ok(kvq_format f, int b)
{
    switch (f) {
    case KVQ_FORMAT_NVFP4: case KVQ_FORMAT_NVFP4_4OVER6: case KVQ_FORMAT_Q4_0: return b == 4;
    case KVQ_FORMAT_LLOYD_MAX: case KVQ_FORMAT_LLOYD_MAX_NC: return b >= 2 && b <= 4;
    default: return b == 8;
    }
}
static size_t fixed_group(kvq_format f)
{
    return f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6 ? 16 :
           f == KVQ_FORMAT_Q8_0 || f == KVQ_FORMAT_Q4_0 ? 32 : 0;
}
static int side_scaled(kvq_format f)
{
    return f == KVQ_FORMAT_E4M3_TENSOR || f == KVQ_FORMAT_E5M2_TENSOR ||
           f == KVQ_FORMAT_NVFP4 || f == KVQ_FORMAT_NVFP4_4OVER6;
}

/* Half the grid step at |v| for a float grid of M mantissa bits whose
   smallest normal is 2^emin, and the grid's largest value.               */
static double half_step(double v, int M, int emin)
{
    int e = v > 0 ? (int)floor(log2(v)) : emin;
    if (e < emin) e = emin;
    return ldexp(1.0, e - M - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t n_of[8] = { 16, 32, 64, 1, 7, 48, 17, 33 };
    fz f = { data, size, 0 };
    uint8_t b0 = fz_u8(&f), b1 = fz_u8(&f), b2 = fz_u8(&f), b3 = fz_u8(&f), b4 = fz_u8(&f);
    uint32_t su = fz_u32(&f);
    kvq_format fmt = (kvq_format)(1 + b0 % (KVQ_FORMAT_COUNT - 1));
    int bits = 2 + b1 % 7, raw = b4 & 1;                    /* 2..8             */
    size_t n = n_of[b2 & 7], stride = 1 + b3 % 3, i, k;
    float scale = (b4 & 2) ? fz_bits_f32(su) : ldexpf(1.0f + (float)(su & 0xFF) / 256.0f,
                                                      (int)((su >> 8) % 40) - 20);
    static float x[MAXN * 3];
    uint8_t codes[MAXN], codes2[MAXN];
    uint32_t param = 0xA5A5A5A5u, param2;
    float out[MAXN];
    kvq_status st, want = KVQ_OK;
    int nonfinite = 0, maybe = 0;
    double amax = 0.0, mfirst = 0.0;
    if (f.i >= size) return 0;
    if (!bits_ok(fmt, bits) && (b1 & 0x80)) bits = fmt == KVQ_FORMAT_NVFP4 || fmt == KVQ_FORMAT_NVFP4_4OVER6 ||
                                                   fmt == KVQ_FORMAT_Q4_0 ? 4 : fmt == KVQ_FORMAT_LLOYD_MAX ||
                                                   fmt == KVQ_FORMAT_LLOYD_MAX_NC ? 2 + (b1 >> 3) % 3 : 8;
    if (fixed_group(fmt) && (b2 & 0x80)) n = fixed_group(fmt);
    for (i = 0; i < n * stride; i++) {
        if (raw) x[i] = fz_bits_f32(fz_u32(&f));
        else x[i] = (float)((int)fz_u8(&f) - 128) * ldexpf(1.0f, (int)(b3 >> 4) - 4);
        if (!fz_left(&f)) f.i = 5 + 4;                       /* cycle the data   */
    }
    for (i = 0; i < n; i++) {
        double v = x[i * stride];
        if (!isfinite(v)) nonfinite = 1;
        else if (fabs(v) > amax) amax = fabs(v);
        if (isfinite(v) && fabs(v) > fabs(mfirst)) mfirst = v;
    }
    /* the predicted status, in the order kvq checks                      */
    if (!bits_ok(fmt, bits)) want = KVQ_ERR_BITS;
    else if (fixed_group(fmt) && n != fixed_group(fmt)) want = KVQ_ERR_SIZE;
    else if (side_scaled(fmt) && !(scale > 0.0f && isfinite(scale))) want = KVQ_ERR_RANGE;
    else if (nonfinite) want = KVQ_ERR_NONFINITE;
    else if (fmt == KVQ_FORMAT_Q8_0 || fmt == KVQ_FORMAT_Q4_0) {
        double d = fmt == KVQ_FORMAT_Q8_0 ? amax / 127.0 : fabs(mfirst) / 8.0;
        if (d > 65520.0 * 1.001) want = KVQ_ERR_RANGE;
        else if (d > 65520.0 * 0.999) maybe = 1;
    } else if (fmt == KVQ_FORMAT_LLOYD_MAX || fmt == KVQ_FORMAT_LLOYD_MAX_NC) {
        /* values near FLT_MAX once scaled (a centroid up to 2.74 times a
           norm ratio): the status is not asserted there                  */
        if (amax * 64.0 > 3.0e38) maybe = 1;
    } else if (fmt == KVQ_FORMAT_NVFP4 || fmt == KVQ_FORMAT_NVFP4_4OVER6) {
        if ((double)scale * 448.0 * 6.0 > 3.0e38) maybe = 1;   /* 6 x 448 x scale */
    } else {                                /* FP8: 57344 x a side scale, or
                                               a group's max back near FLT_MAX */
        if ((double)scale * 57344.0 > 3.0e38 || amax > 3.0e38) maybe = 1;
    }
    fz_poison(codes, sizeof codes);
    st = kvq_format_quantize(fmt, bits, x, n, stride, scale, codes, &param);
    if (!maybe)
        FZ_ASSERT(st == want, "%s B=%d n=%zu: status %d, predicted %d", kvq_format_name(fmt), bits, n,
                  (int)st, (int)want);
    if (st != KVQ_OK) {
        FZ_ASSERT(fz_poisoned(codes, sizeof codes) && param == 0xA5A5A5A5u, "wrote on failure");
        return 0;
    }
    FZ_ASSERT(kvq_format_dequantize(fmt, bits, codes, n, param, scale, out) == KVQ_OK, "dequantize");
    for (i = 0; i < n; i++) {
        double xv = x[i * stride], yv = out[i], a, bound, v;
        FZ_ASSERT(codes[i] < (1u << bits) && isfinite(kvq_format_value(fmt, bits, codes[i])) &&
                  isfinite(yv), "code %u at %zu", codes[i], i);
        if (fmt == KVQ_FORMAT_LLOYD_MAX || fmt == KVQ_FORMAT_LLOYD_MAX_NC) {
            const float *c = kvq_lloyd_max_centroids(bits);
            double n2 = 0.0, u, best = 1e300;
            for (k = 0; k < n; k++) n2 += (double)x[k * stride] * x[k * stride];
            if (n2 == 0.0) { FZ_ASSERT(yv == 0.0, "zero group"); continue; }
            u = xv * sqrt((double)n) / sqrt(n2);
            for (k = 0; k < (1u << bits); k++) best = fmin(best, fabs(u - c[k]));
            FZ_ASSERT(fabs(u - c[codes[i]]) <= best + 1e-6 * (1.0 + fabs(u)),
                      "Lloyd-Max code %u not the nearest to %.9g", codes[i], u);
            continue;
        }
        if (fmt == KVQ_FORMAT_Q8_0 || fmt == KVQ_FORMAT_Q4_0) {
            double d = fmt == KVQ_FORMAT_Q8_0 ? amax / 127.0 : mfirst / -8.0;
            double d16 = kvq_f16_to_f32(kvq_f32_to_f16((float)d));
            bound = (fmt == KVQ_FORMAT_Q4_0 ? fabs(d) : fabs(d) / 2) + 128.0 * fabs(d - d16) +
                    ldexp(fabs(xv) + 128.0 * fabs(d), -20) + ldexp(1.0, -140);
            FZ_ASSERT(fabs(xv - yv) <= bound, "%s: |%.9g - %.9g| > %.9g", kvq_format_name(fmt), xv, yv,
                      bound);
            continue;
        }
        /* FP8 and NVFP4: x' = v a with v on the grid                      */
        a = kvq_format_value(fmt, bits, codes[i]) != 0.0 ? yv / kvq_format_value(fmt, bits, codes[i]) : 0.0;
        if (a == 0.0) continue;     /* a zero value: its a is not recoverable */
        v = fabs(xv) / a;
        if (fmt == KVQ_FORMAT_NVFP4 || fmt == KVQ_FORMAT_NVFP4_4OVER6)
            bound = v > 6.0 ? v - 6.0 : v >= 4.0 ? 1.0 : v >= 2.0 ? 0.5 : 0.25;
        else if (fmt == KVQ_FORMAT_E4M3 || fmt == KVQ_FORMAT_E4M3_TENSOR)
            bound = v > 448.0 ? v - 448.0 : half_step(v, 3, -6);
        else
            bound = v > 57344.0 ? v - 57344.0 : half_step(v, 2, -14);
        /* + the fp32 rounding of x / a (relative 2^-24, a recovered from x'
           within as much), + two subnormal steps where value a < 2^-126  */
        FZ_ASSERT(fabs(fabs(xv) / a - fabs(yv) / a) <= bound * (1.0 + 1e-6) + 1e-6 + v * 0x1p-22 + ldexp(2.0, -149) / a,
                  "%s: x %.9g x' %.9g a %.9g: off by %.9g steps > %.9g", kvq_format_name(fmt), xv, yv,
                  a, fabs(fabs(xv) - fabs(yv)) / a, bound);
    }
    FZ_ASSERT(kvq_format_quantize(fmt, bits, x, n, stride, scale, codes2, &param2) == KVQ_OK &&
              !memcmp(codes, codes2, n) && param == param2, "not deterministic");
    return 0;
}
