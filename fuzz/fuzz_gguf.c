/* fuzz/fuzz_gguf.c - the GGUF reader of examples/llm/gguf.h on arbitrary bytes
   (read-only use of that header).

   Properties: no crash or over-read (ASan sees exactly size bytes); a
   failed open says why; an accepted file keeps every key, string, array
   and tensor inside the image, with n_elem, n_bytes and row_bytes
   consistent with the shape; every lookup by the keys and names the file
   itself holds finds them; the first row of every small tensor of a
   dequantizable type dequantizes to finite values for finite blocks, and
   gguf_dot of it with ones equals the sum of the dequantized row when all
   is finite.                                                               */
#include "examples/llm/gguf.h"
#include "fuzz.h"

static int inside(const gguf_ctx *g, const void *p, uint64_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    return b >= g->buf && (uint64_t)(b - g->buf) <= g->size && n <= g->size - (uint64_t)(b - g->buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_ctx g;
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    uint64_t i, d;
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    if (!gguf_open_memory(&g, copy, size)) {
        FZ_ASSERT(g.why[0] != '\0', "open failed without a reason");
        gguf_close(&g);
        free(copy);
        return 0;
    }
    for (i = 0; i < g.n_kv; i++) {
        const gguf_kv *kv = &g.kv[i];
        char key[300];
        FZ_ASSERT(inside(&g, kv->key.ptr, kv->key.len), "key %llu outside", (unsigned long long)i);
        if (kv->type == 8) FZ_ASSERT(inside(&g, kv->str.ptr, kv->str.len), "string outside");
        if (kv->key.len < sizeof key && !memchr(kv->key.ptr, 0, kv->key.len)) {
            const gguf_kv *f;
            gguf_arr arr;
            uint64_t u;
            memcpy(key, kv->key.ptr, kv->key.len); key[kv->key.len] = '\0';
            f = gguf_find_kv(&g, key);
            FZ_ASSERT(f != NULL, "key '%s' not found by its own name", key);
            (void)gguf_get_uint(&g, key, &u);
            if (kv->type == 9 && gguf_get_arr(&g, key, kv->arr_type, &arr)) {
                FZ_ASSERT(arr.n == kv->arr_n, "array length");
                if (arr.type == 8 && arr.n <= 4096) {
                    gguf_str *s = (gguf_str *)malloc((size_t)arr.n * sizeof *s + 1);
                    uint64_t j;
                    if (s && gguf_arr_strs(&arr, s))
                        for (j = 0; j < arr.n; j++)
                            FZ_ASSERT(inside(&g, s[j].ptr, s[j].len), "array string outside");
                    free(s);
                }
            }
        }
    }
    for (i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.tensors[i];
        uint64_t n = 1;
        char name[80];
        FZ_ASSERT(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "n_dims");
        for (d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
        FZ_ASSERT(n == t->n_elem, "n_elem");
        FZ_ASSERT(inside(&g, t->data, t->n_bytes), "tensor %llu data outside", (unsigned long long)i);
        FZ_ASSERT(t->ne[0] == 0 || t->n_bytes == t->row_bytes * (t->n_elem / t->ne[0]), "row bytes");
        if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(name, t->name.ptr, t->name.len); name[t->name.len] = '\0';
            FZ_ASSERT(gguf_find_tensor(&g, name) != NULL, "tensor '%s' not found by name", name);
        }
        if (gguf_can_dequant(t->type) && t->ne[0] > 0 && t->ne[0] <= 4096) {
            float *row = (float *)malloc((size_t)t->ne[0] * 2 * sizeof(float));
            const void *r0 = gguf_tensor_row(t, 0);
            if (row && r0) {
                float *ones = row + t->ne[0], dot;
                double sum = 0.0, mag = 0.0;
                int finite = 1;
                FZ_ASSERT(inside(&g, r0, t->row_bytes), "row 0 outside");
                FZ_ASSERT(t->ne[0] % gguf__types[t->type].blck == 0, "row not whole blocks");
                FZ_ASSERT(gguf_dequant(t->type, r0, row, t->ne[0]), "dequant of a valid row");
                for (d = 0; d < t->ne[0]; d++) {
                    ones[d] = 1.0f; sum += row[d]; mag += fabs(row[d]); finite &= isfinite(row[d]);
                }
                dot = gguf_dot(t->type, r0, ones, t->ne[0]);
                /* fp32 sums of n terms: |error| <= n 2^-24 sum |terms|      */
                if (finite && mag < 1e30)
                    FZ_ASSERT(fabs(dot - sum) <= (double)(t->ne[0] + 32) * ldexp(1.0, -23) * mag,
                              "dot with ones %g vs row sum %g", (double)dot, sum);
            }
            free(row);
        }
    }
    gguf_close(&g);
    free(copy);
    return 0;
}
