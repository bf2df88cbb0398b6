#!/bin/sh
# bench/llama_bench.sh - build llama.cpp's llama-bench (CPU only) from the
# same llama-cpp-python 0.3.36 sdist as bench/ggml_anchor.sh, and
# optionally run it on the project's GGUF: the decode anchor of
# bench/bench_cpu.c (issue 18, item 4).
#
#     sh bench/llama_bench.sh            build only: build/llama.cpp/bin/llama-bench
#     sh bench/llama_bench.sh --run      build, then run the anchor rows
#
# Needs cmake and a C++17 compiler (Debian: apt-get install cmake g++).
# Static, Release, -DGGML_NATIVE=ON (-march=native), no CURL/OpenSSL, no
# tests, examples, server or UI; only the llama-bench target is built
# (ggml-base, ggml-cpu, llama, llama-common, llama-bench): about 10 minutes
# on 2 cores (see bench/RESULTS.md). bench_cpu.c runs the binary when it
# exists; it never builds it.
set -eu
LLAMA=$(sh bench/ggml_anchor/fetch.sh)
OUT=build/llama.cpp
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -x "$OUT/bin/llama-bench" ]; then
    command -v cmake >/dev/null 2>&1 || {
        echo "llama_bench.sh: cmake not found (Debian: apt-get install cmake)" >&2; exit 1; }
    cmake -S "$LLAMA" -B "$OUT" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DGGML_OPENMP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TOOLS=ON
    cmake --build "$OUT" --target llama-bench -j "$JOBS"
fi
echo "llama-bench: $OUT/bin/llama-bench"
if [ "${1:-}" = "--run" ]; then
    [ -f "$MODEL" ] || { echo "llama_bench.sh: $MODEL missing (make model)" >&2; exit 1; }
    # one thread, decode only (-p 0), 32 tokens after a context of 8 and 1024
    # tokens (-d), fp16 and q4_0 K/V cache types; -r 3 repetitions
    for t in f16 q4_0; do
        "$OUT/bin/llama-bench" -m "$MODEL" -t 1 -p 0 -n 32 -d 8,1024 -r 3 \
            -ctk $t -ctv $t -o md
    done
fi
