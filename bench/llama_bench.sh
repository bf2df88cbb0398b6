#!/bin/sh
# bench/llama_bench.sh - build llama.cpp's llama-bench (CPU only) from the
# same llama-cpp-python 0.3.36 sdist as bench/ggml_anchor.sh, and
# optionally run it on the project's GGUF: the decode anchor of
# bench/bench_cpu.c (issue 18, item 4).
#
#     sh bench/llama_bench.sh            the AVX2 build: build/llama.cpp/bin/llama-bench
#     sh bench/llama_bench.sh --native   also the -march=native build:
#                                        build/llama.cpp-native/bin/llama-bench
#     sh bench/llama_bench.sh --run      build (AVX2), then run the anchor rows
#
# Needs cmake and a C++17 compiler (Debian: apt-get install cmake g++).
# Static, Release, no OpenMP, CURL/OpenSSL, tests, examples, server or UI;
# only the llama-bench target is built (ggml-base, ggml-cpu, llama,
# llama-common, llama-bench): 5-10 minutes per build on 2 cores.
# bench_cpu.c runs the binaries that exist; it never builds them.
#
# The AVX2 build (-DGGML_NATIVE=OFF, AVX2 + FMA + F16C + BMI2) has the ISA of
# build/llm (the Makefile's LLM_SIMD): the issue-18 targets compare the two.
#
# The native build is what llama.cpp would be on this machine, and is timed
# beside it for information. On a CPU with AMX (Intel Sapphire Rapids and
# later) it stores Q4_1/Q8_0 weights in ggml's AMX buffer, whose matmul of
# more than one token crashes when compiled by gcc 12: the compiler drops the
# stores that fill the tile configuration before `ldtilecfg` (only the
# palette byte is written; the row and column sizes are stack garbage), and
# the CPU raises a general-protection fault (SIGSEGV). Decode (one token)
# never takes that path, but llama-bench's `-d N` prefills N tokens in
# micro-batches of 512, which does. So the native build is run with `-ub 1`:
# the depth is prefilled one token at a time, the KV cache it leaves is the
# same, and the timed decode is untouched.
set -eu
LLAMA=$(sh bench/ggml_anchor/fetch.sh)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}

# build DIR NATIVE [cmake ISA options]: configures and builds llama-bench in
# DIR unless DIR already holds one configured with GGML_NATIVE=NATIVE (a
# build of an earlier version of this script, configured otherwise, is
# reconfigured and rebuilt)
build() {
    out=$1 native=$2
    shift 2
    if [ -x "$out/bin/llama-bench" ] &&
       grep -q "^GGML_NATIVE:BOOL=$native\$" "$out/CMakeCache.txt" 2>/dev/null; then
        echo "llama-bench: $out/bin/llama-bench"
        return 0
    fi
    command -v cmake >/dev/null 2>&1 || {
        echo "llama_bench.sh: cmake not found (Debian: apt-get install cmake)" >&2; exit 1; }
    cmake -S "$LLAMA" -B "$out" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE="$native" "$@" \
        -DBUILD_SHARED_LIBS=OFF -DGGML_OPENMP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TOOLS=ON
    cmake --build "$out" --target llama-bench -j "$JOBS"
    echo "llama-bench: $out/bin/llama-bench"
}

build build/llama.cpp OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
if [ "${1:-}" = "--native" ]; then
    build build/llama.cpp-native ON
fi
if [ "${1:-}" = "--run" ]; then
    [ -f "$MODEL" ] || { echo "llama_bench.sh: $MODEL missing (make model)" >&2; exit 1; }
    # one thread, decode only (-p 0), 32 tokens after a context of 8 and 1024
    # tokens (-d), -r 3 repetitions: the fp16 cache with flash attention off
    # and on (the faster is the anchor), the q4_0 cache (flash attention on:
    # a quantized V needs it)
    build/llama.cpp/bin/llama-bench -m "$MODEL" -t 1 -p 0 -n 32 -d 8,1024 -r 3 \
        -ctk f16 -ctv f16 -fa 0,1 -o md
    build/llama.cpp/bin/llama-bench -m "$MODEL" -t 1 -p 0 -n 32 -d 8,1024 -r 3 \
        -ctk q4_0 -ctv q4_0 -fa 1 -o md
fi
