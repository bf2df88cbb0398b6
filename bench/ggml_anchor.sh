#!/bin/sh
# bench/ggml_anchor.sh - build ggml's reference quantizers as the quantize
# anchor of bench/bench_cpu.c (issue 18, item 4).
#
#     sh bench/ggml_anchor.sh        (from the repository root; ~1 minute
#                                     the first time, most of it pip)
#
# Fetches llama-cpp-python's sdist (bench/ggml_anchor/fetch.sh), then
# compiles ONE file of it, ggml/src/ggml-quants.c (quantize_row_q4_0_ref,
# quantize_row_q4_1_ref, ...), with the bench's flags, plus
# bench/ggml_anchor/ggml_shim.c: stubs for the four ggml.c functions that
# ggml-quants.c references but the _ref quantizers never call. Output:
#     $B/ggml/ggml-quants.o $B/ggml/ggml_shim.o      (B: the build dir, default build)
# bench_cpu.c, compiled with -DKVQ_BENCH_GGML and linked with both, times
# the quantizers beside kvq_quantize_matrix; without them it prints "ggml
# anchor unavailable" and skips those rows.
set -eu
CC=${CC:-gcc}
# every function and loop on a 64-byte boundary, as the Makefile builds
# bench_cpu (BENCH_ALIGN there): placement alone moves q4_1's time by 40%
FLAGS="-std=c11 -O3 -march=native -DNDEBUG -falign-functions=64 -falign-loops=64"
LLAMA=$(sh bench/ggml_anchor/fetch.sh)
G=$LLAMA/ggml
OUT=${B:-build}/ggml
mkdir -p "$OUT"
$CC $FLAGS -w -I"$G/include" -I"$G/src" -I"$G/src/ggml-cpu" \
    -c "$G/src/ggml-quants.c" -o "$OUT/ggml-quants.o"
$CC $FLAGS -Wall -Wextra -c bench/ggml_anchor/ggml_shim.c -o "$OUT/ggml_shim.o"
echo "ggml anchor: $OUT/ggml-quants.o $OUT/ggml_shim.o (from $G/src/ggml-quants.c)"
