/* examples/npy.h - NumPy .npy arrays for the examples, tests and the model
   runner: read float32/float16 C-order arrays of 1..4 dimensions (format
   1.0/2.0/3.0), write float32. A tool beside kvq, not part of it: kvq.h
   itself reads and writes no files.

   Include after kvq.h (it uses kvq_status and kvq_f16_to_f32; with
   KVQ_IMPLEMENTATION in the same file, its KVQ_MALLOC / KVQ_FREE
   overrides apply here too). Every function returns a kvq_status:
   KVQ_ERR_NULL, KVQ_ERR_SIZE, KVQ_ERR_OVERFLOW, KVQ_ERR_NOMEM,
   KVQ_ERR_FORMAT (malformed .npy data: magic, version, header, dtype,
   order, shape, payload length) or KVQ_ERR_IO; a failed call writes
   nothing to its output (a failed save may leave a partial file).       */
#ifndef KVQ_NPY_H
#define KVQ_NPY_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define NPY__API static __attribute__((unused))
#else
#define NPY__API static
#endif
#ifdef KVQ_MALLOC
#define NPY__MALLOC(n) KVQ_MALLOC(n)
#define NPY__FREE(p)   KVQ_FREE(p)
#else
#define NPY__MALLOC(n) malloc(n)
#define NPY__FREE(p)   free(p)
#endif

/* NumPy format 1.0/2.0/3.0, little-endian float32 ('<f4') or float16 ('<f2'),
   C order, 1..4 dimensions. Data is always returned as float32.             */
#define NPY_MAX_DIMS 4
typedef struct npy_array {
    float  *data;                   /* (shape[0], ..., shape[ndim-1])        */
    size_t  shape[NPY_MAX_DIMS];
    int     ndim;
    size_t  count;
} npy_array;

NPY__API kvq_status npy_parse(const void *buf, size_t len, npy_array *out);
NPY__API void       npy_free(npy_array *a);
NPY__API kvq_status npy_load(const char *path, npy_array *out);
NPY__API kvq_status npy_save(const char *path, const float *data,
                                const size_t *shape, int ndim);


static int npy__mul(size_t a, size_t b, size_t *r)   /* 1 if a*b fits      */
{
    if (a != 0 && b > (size_t)-1 / a) return 0;
    *r = a * b;
    return 1;
}
static uint32_t npy__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float    npy__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Header: "\x93NUMPY", major, minor, header length (u16 LE for v1, u32 LE for
   v2/v3), then a Python dict literal such as
   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
   padded with spaces and a final '\n'. We accept exactly the keys above.  */
static const char *npy__find(const char *h, size_t n, const char *key)
{
    size_t k = strlen(key), i;
    for (i = 0; i + k <= n; i++)
        if (memcmp(h + i, key, k) == 0) return h + i + k;
    return NULL;
}

static const char *npy__skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == ':' )) p++;
    return p;
}

NPY__API kvq_status npy_parse(const void *buf, size_t len, npy_array *out)
{
    const unsigned char *b = (const unsigned char *)buf;
    const char *h, *end, *p;
    size_t hlen, hoff, count = 1, i, elem, need;
    int major, ndim = 0, is_f16;
    size_t shape[NPY_MAX_DIMS];
    float *data;
    if (!buf || !out) return KVQ_ERR_NULL;
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return KVQ_ERR_FORMAT;
    major = b[6];
    if (major == 1) { hlen = (size_t)b[8] | ((size_t)b[9] << 8); hoff = 10; }
    else if (major == 2 || major == 3) {
        if (len < 12) return KVQ_ERR_FORMAT;
        hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) |
               ((size_t)b[11] << 24);
        hoff = 12;
    } else return KVQ_ERR_FORMAT;
    if (hlen > len - hoff) return KVQ_ERR_FORMAT;
    h = (const char *)b + hoff;
    end = h + hlen;
    /* dtype                                                                */
    p = npy__find(h, hlen, "'descr'");
    if (!p) return KVQ_ERR_FORMAT;
    p = npy__skip_ws(p, end);
    if (end - p >= 5 && memcmp(p, "'<f4'", 5) == 0) is_f16 = 0;
    else if (end - p >= 5 && memcmp(p, "'<f2'", 5) == 0) is_f16 = 1;
    else return KVQ_ERR_FORMAT;
    /* order                                                                */
    p = npy__find(h, hlen, "'fortran_order'");
    if (!p) return KVQ_ERR_FORMAT;
    p = npy__skip_ws(p, end);
    if (!(end - p >= 5 && memcmp(p, "False", 5) == 0)) return KVQ_ERR_FORMAT;
    /* shape: '(' [int {',' int}] [','] ')'                                 */
    p = npy__find(h, hlen, "'shape'");
    if (!p) return KVQ_ERR_FORMAT;
    p = npy__skip_ws(p, end);
    if (p >= end || *p != '(') return KVQ_ERR_FORMAT;
    p++;
    for (;;) {
        size_t v = 0;
        int digits = 0;
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ')') break;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > ((size_t)-1 - 9) / 10) return KVQ_ERR_OVERFLOW;
            v = v * 10 + (size_t)(*p - '0');
            p++; digits++;
        }
        if (!digits || ndim == NPY_MAX_DIMS) return KVQ_ERR_FORMAT;
        shape[ndim++] = v;
        if (!npy__mul(count, v, &count)) return KVQ_ERR_OVERFLOW;
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == ')') break;
        return KVQ_ERR_FORMAT;
    }
    if (ndim == 0 || count == 0) return KVQ_ERR_SIZE;  /* scalars, empties  */
    elem = is_f16 ? 2 : 4;
    if (!npy__mul(count, elem, &need)) return KVQ_ERR_OVERFLOW;
    if (need != len - hoff - hlen) return KVQ_ERR_FORMAT;  /* exact payload */
    if (!npy__mul(count, sizeof(float), &need)) return KVQ_ERR_OVERFLOW;
    data = (float *)NPY__MALLOC(need);
    if (!data) return KVQ_ERR_NOMEM;
    p = (const char *)b + hoff + hlen;
    for (i = 0; i < count; i++) {
        const unsigned char *e = (const unsigned char *)p + i * elem;
        if (is_f16) data[i] = kvq_f16_to_f32((kvq_f16)(e[0] | (e[1] << 8)));
        else data[i] = npy__bits_f32((uint32_t)e[0] | ((uint32_t)e[1] << 8) |
                                     ((uint32_t)e[2] << 16) | ((uint32_t)e[3] << 24));
    }
    out->data = data;
    out->ndim = ndim;
    out->count = count;
    for (i = 0; i < NPY_MAX_DIMS; i++) out->shape[i] = i < (size_t)ndim ? shape[i] : 1;
    return KVQ_OK;
}

NPY__API void npy_free(npy_array *a)
{
    if (!a) return;
    NPY__FREE(a->data);
    memset(a, 0, sizeof *a);
}

NPY__API kvq_status npy_load(const char *path, npy_array *out)
{
    FILE *f;
    long sz;
    void *buf;
    kvq_status st;
    if (!path || !out) return KVQ_ERR_NULL;
    f = fopen(path, "rb");
    if (!f) return KVQ_ERR_IO;
    /* a directory opens with fopen on Linux but fails its first read, and its
       ftell size is meaningless: probe one byte before trusting the size   */
    if ((fgetc(f) == EOF && ferror(f)) || fseek(f, 0, SEEK_END) != 0 ||
        (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return KVQ_ERR_IO;
    }
    buf = NPY__MALLOC(sz > 0 ? (size_t)sz : 1);
    if (!buf) { fclose(f); return KVQ_ERR_NOMEM; }
    if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        NPY__FREE(buf); fclose(f); return KVQ_ERR_IO;
    }
    fclose(f);
    st = npy_parse(buf, (size_t)sz, out);
    NPY__FREE(buf);
    return st;
}

NPY__API kvq_status npy_save(const char *path, const float *data,
                                const size_t *shape, int ndim)
{
    char hdr[256];
    int n, i;
    size_t count = 1, w, k;
    FILE *f;
    if (!path || !data || !shape) return KVQ_ERR_NULL;
    if (ndim < 1 || ndim > NPY_MAX_DIMS) return KVQ_ERR_SIZE;
    for (i = 0; i < ndim; i++) {
        if (shape[i] == 0) return KVQ_ERR_SIZE;
        if (!npy__mul(count, shape[i], &count)) return KVQ_ERR_OVERFLOW;
    }
    if (!npy__mul(count, 4, &w)) return KVQ_ERR_OVERFLOW;
    n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (i = 0; i < ndim; i++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%zu,%s", shape[i],
                      i + 1 < ndim ? " " : "");
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
    while ((10 + n + 1) % 64) hdr[n++] = ' ';      /* pad: data 64-aligned  */
    hdr[n++] = '\n';
    f = fopen(path, "wb");
    if (!f) return KVQ_ERR_IO;
    {
        unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0 };
        pre[8] = (unsigned char)(n & 0xFF);
        pre[9] = (unsigned char)(n >> 8);
        if (fwrite(pre, 1, 10, f) != 10 || fwrite(hdr, 1, (size_t)n, f) != (size_t)n) {
            fclose(f); return KVQ_ERR_IO;
        }
    }
    for (k = 0; k < count; k++) {               /* little-endian on any host */
        uint32_t u = npy__f32_bits(data[k]);
        unsigned char e[4];
        e[0] = (unsigned char)u; e[1] = (unsigned char)(u >> 8);
        e[2] = (unsigned char)(u >> 16); e[3] = (unsigned char)(u >> 24);
        if (fwrite(e, 1, 4, f) != 4) { fclose(f); return KVQ_ERR_IO; }
    }
    if (fclose(f) != 0) return KVQ_ERR_IO;
    return KVQ_OK;
}

#endif /* KVQ_NPY_H */
