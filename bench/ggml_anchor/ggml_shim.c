/* bench/ggml_anchor/ggml_shim.c - the four ggml.c symbols that
   ggml-quants.c references, so that bench_cpu.c can link ggml-quants.o
   alone instead of all of ggml (ggml.c pulls in the graph, the backends
   and threads).

   The bench calls only quantize_row_q4_0_ref, quantize_row_q4_1_ref and
   quantize_row_q2_0_ref, which call none of these. They are reached only
   by the quantize_<type>() wrappers (ggml_row_size), ggml_validate_row_data
   (ggml_type_size, ggml_type_name) and GGML_ABORT; if one is ever called,
   it says so and aborts instead of returning a wrong size.

   The prototypes match ggml/include/ggml.h of llama-cpp-python 0.3.36; an
   enum is passed as int (same ABI for the C enum ggml_type).             */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void shim_unreachable(const char *name)
{
    fprintf(stderr, "ggml_shim: %s called; the bench links only ggml-quants.c\n", name);
    abort();
}

void ggml_abort(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ggml_abort at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

size_t ggml_row_size(int type, int64_t ne)
{
    (void)type; (void)ne;
    shim_unreachable("ggml_row_size");
    return 0;
}

size_t ggml_type_size(int type)
{
    (void)type;
    shim_unreachable("ggml_type_size");
    return 0;
}

const char *ggml_type_name(int type)
{
    (void)type;
    shim_unreachable("ggml_type_name");
    return NULL;
}
