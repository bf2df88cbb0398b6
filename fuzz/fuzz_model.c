/* fuzz/fuzz_model.c - the LLM runner's loader, tokenizer and forward pass
   (examples/llm/llm.c, llm.h, gguf.h, bpe.h) on arbitrary GGUF bytes.

   The input is a GGUF image. Properties:
     - no crash, over-read or undefined behaviour (ASan, UBSan);
     - no single allocation above FZ_CAP (64 MiB): everything the loader
       allocates is bounded by what the file holds (tensors are checked
       against the config before any weight buffer exists), and the run's
       own buffers by a small seq_len;
     - a refused file is refused, never half-loaded into a forward pass;
     - an accepted model tokenizes a few strings, and three forward steps,
       through an fp32 cache and a KIVI-2 cache, either return logits that
       are all finite or fail with a reason (a NaN weight is an error,
       never logits).
   Seeds (fuzz/corpus/fuzz_model, written by fuzz/seeds.c): tiny valid
   LLaMA models with F32 and F16 tensors, and with Q8_0 / Q4_1 / Q4_0
   block matrices (used in place: their scales are checked at load, a NaN
   or Inf scale refuses the file), tied and untied classifiers.           */
#define _POSIX_C_SOURCE 200809L     /* llm.c: clock_gettime, posix_memalign */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fuzz.h"

#define FZ_CAP ((size_t)64 << 20)
static void *fz_malloc(size_t n)
{
    FZ_ASSERT(n <= FZ_CAP, "malloc of %zu bytes", n);
    return malloc(n);
}
static void *fz_calloc(size_t a, size_t b)
{
    FZ_ASSERT(b == 0 || a <= FZ_CAP / b, "calloc of %zu x %zu bytes", a, b);
    return calloc(a, b);
}
static void *fz_realloc(void *p, size_t n)
{
    FZ_ASSERT(n <= FZ_CAP, "realloc to %zu bytes", n);
    return realloc(p, n);
}
#define malloc(n)     fz_malloc(n)
#define calloc(a, b)  fz_calloc(a, b)
#define realloc(p, n) fz_realloc(p, n)

#define LLM_NO_MAIN
#include "examples/llm/llm.c"

static void run_cache(model_file *f, const char *cache, const int *ids)
{
    method M;
    llm_state s;
    int t;
    if (!method_make(&M, cache, &f->m.cfg, 8)) { method_free(&M); return; }
    if (state_for(&s, f, &M, 0)) {
        for (t = 0; t < 3; t++) {
            const float *lg = llm_forward(&f->m, &s, ids[t], t);
            if (!lg) {
                FZ_ASSERT(s.why[0] != '\0', "forward failed without a reason");
                break;
            }
            FZ_ASSERT(llm__finite(lg, (size_t)f->m.cfg.vocab_size), "non-finite logits returned");
        }
        llm_state_free(&s);
    }
    method_free(&M);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model_file f;
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    int ids[3], i, n;
    (void)read_file; (void)run_method; (void)encode; (void)model_open;  /* llm.c's,
                                                       unused here        */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    memset(&f, 0, sizeof f);
    if (!gguf_open_memory(&f.g, copy, size)) {
        FZ_ASSERT(f.g.why[0] != '\0', "GGUF refused without a reason");
        gguf_close(&f.g);
        free(copy);
        return 0;
    }
    if (model_load(&f, "input", 16)) {
        static const char *texts[3] = { "hello", "<|im_start|>a b", "\xC3\xA9\xFF" };
        for (i = 0; i < 3; i++) {
            int *tok = encode_flags(&f, texts[i], strlen(texts[i]), i == 1 ? BPE_SPECIAL : 0, &n);
            if (tok) {
                int j;
                for (j = 0; j < n; j++)
                    FZ_ASSERT(tok[j] >= 0 && tok[j] < f.m.cfg.vocab_size, "token id %d", tok[j]);
            }
            free(tok);
        }
        for (i = 0; i < 3; i++) ids[i] = (int)((size > (size_t)i ? data[size - 1 - i] : 0) %
                                               (unsigned)f.m.cfg.vocab_size);
        run_cache(&f, "fp32", ids);
        run_cache(&f, "kivi2", ids);
    }
    model_close(&f);
    free(copy);
    return 0;
}
