#!/bin/sh
# bench/ggml_anchor/fetch.sh - fetch and unpack the llama.cpp sources the
# benchmark anchors come from: the PyPI source package llama-cpp-python
# (MIT), which vendors llama.cpp (with ggml) under vendor/llama.cpp.
# Everything lands in build/ (git-ignored). Prints the llama.cpp directory.
# Used by bench/ggml_anchor.sh and bench/llama_bench.sh; run from the
# repository root.
set -eu
PKG_VERSION=0.3.36
SRC_DIR=build/ggml_src
TOP=$SRC_DIR/llama_cpp_python-$PKG_VERSION
LLAMA=$TOP/vendor/llama.cpp
if [ ! -f "$LLAMA/ggml/src/ggml-quants.c" ]; then
    mkdir -p "$SRC_DIR"
    TGZ=$SRC_DIR/llama_cpp_python-$PKG_VERSION.tar.gz
    if [ ! -f "$TGZ" ]; then
        # --no-binary :all: makes pip fetch the sdist (it also prepares its
        # metadata, which needs the build backend from PyPI: ~30 s)
        echo "fetch: pip download llama-cpp-python==$PKG_VERSION (sdist, ~77 MB)" >&2
        python3 -m pip download --quiet --no-deps --no-binary :all: \
            "llama-cpp-python==$PKG_VERSION" -d "$SRC_DIR" >&2
    fi
    tar xzf "$TGZ" -C "$SRC_DIR"
fi
echo "$LLAMA"
