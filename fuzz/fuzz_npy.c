/* fuzz/fuzz_npy.c - npy_parse on arbitrary bytes.

   Properties: no crash or over-read (ASan sees exactly len bytes); on
   failure *out is untouched; on success the shape is 1..4 positive dims
   whose product is count, the payload is exactly count elements after a
   header that fits, and every float is the little-endian decoding of its
   bytes (f4 bit for bit, f2 through kvq_f16_to_f32).                       */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "examples/npy.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    npy_array a;
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    kvq_status st;
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    fz_poison(&a, sizeof a);
    st = npy_parse(copy, size, &a);
    if (st != KVQ_OK) {
        FZ_ASSERT(fz_poisoned(&a, sizeof a), "parse failed (%d) but wrote *out", (int)st);
        FZ_ASSERT(st == KVQ_ERR_FORMAT || st == KVQ_ERR_SIZE || st == KVQ_ERR_OVERFLOW ||
                  st == KVQ_ERR_NOMEM, "status %d not in the table for npy_parse", (int)st);
    } else {
        size_t prod = 1, i, hoff = copy[6] == 1 ? 10 : 12, hlen, elem, off;
        int f16;
        FZ_ASSERT(a.ndim >= 1 && a.ndim <= NPY_MAX_DIMS, "ndim %d", a.ndim);
        for (i = 0; i < (size_t)a.ndim; i++) { FZ_ASSERT(a.shape[i] > 0, "zero dim"); prod *= a.shape[i]; }
        for (; i < NPY_MAX_DIMS; i++) FZ_ASSERT(a.shape[i] == 1, "unused dim not 1");
        FZ_ASSERT(prod == a.count && a.data != NULL, "count %zu vs shape product %zu", a.count, prod);
        hlen = copy[8] | (size_t)copy[9] << 8;
        if (copy[6] != 1) hlen |= (size_t)copy[10] << 16 | (size_t)copy[11] << 24;
        FZ_ASSERT(hoff + hlen <= size, "header past the end");
        elem = (size - hoff - hlen) / a.count;
        FZ_ASSERT((elem == 2 || elem == 4) && elem * a.count == size - hoff - hlen, "payload length");
        f16 = elem == 2;
        for (i = 0; i < a.count; i++) {
            const uint8_t *e = copy + hoff + hlen + i * elem;
            float want = f16 ? kvq_f16_to_f32((kvq_f16)(e[0] | e[1] << 8))
                             : fz_bits_f32((uint32_t)e[0] | (uint32_t)e[1] << 8 |
                                           (uint32_t)e[2] << 16 | (uint32_t)e[3] << 24);
            off = i;
            FZ_ASSERT(memcmp(&want, &a.data[off], 4) == 0, "element %zu decoded wrongly", i);
        }
        npy_free(&a);
        FZ_ASSERT(a.data == NULL && a.count == 0, "npy_free left data");
    }
    free(copy);
    return 0;
}
