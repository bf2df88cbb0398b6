#!/bin/sh
# bench/instr_count.sh - instructions per element of kvq.h's decode attention,
# quantizer and appends (plain and rotated, issue 29), for each ISA build this
# machine can run (issue 30).
#
#     sh bench/instr_count.sh [BUILD_DIR]     (from the repository root;
#                                              default build/instr)
#
# Time depends on the machine; the instructions one call retires depend only
# on the binary and its input. This builds bench/bench_cpu.c once per vector
# ISA kvq.h can use and runs its --instr mode (section 6 of bench_cpu.c):
# one call of each method at T and at 2T tokens, counted exactly, and the
# marginal instructions per element (one stored K or V value; one input
# value of the quantizer). Output: each build's table, then one table of the
# marginal figures side by side; the tables are also left in BUILD_DIR.
#
#   x86-64:  plain   -march=x86-64     SSE2 only: kvq.h's lanes as plain
#                                      floats, fp16 converted in software
#            AVX2    -march=x86-64-v3  AVX2, FMA, F16C
#            AVX-512 -march=x86-64-v4  AVX-512 F/BW/DQ/VL, FMA, F16C
#   AArch64: plain   -DKVQ_NO_SIMD
#            NEON    (the default)
#
# Counter: callgrind (valgrind) where it decodes the ISA, at T = 1024 (~10 s
# a build); else bench_cpu's own ptrace single-stepping (valgrind 3.19 has
# no AVX-512), at T = 256 (~5 minutes: a step costs tens of microseconds).
# The marginal figure does not depend on T once T >= 256 (KIVI-2, AVX2:
# 1.676 at T = 256, 1.678 at T = 1024). A build whose ISA this CPU lacks is
# skipped with a line that says so. On x86-64 the NEON build is counted
# too when an AArch64 cross-compiler and qemu-aarch64 are installed
# (Debian: apt-get install gcc-aarch64-linux-gnu qemu-user): a static build
# run by qemu-aarch64 with the plugin bench/qemu_insn.c, at T = 1024 (~1
# minute). The qemu and callgrind counts of the plain x86-64 build agree to
# 0.04% (KIVI-2, n_q = 1, T = 1024: 3856271 against 3854927 instructions;
# glibc picks other memset/memcpy variants under each).
#
# ggml's quantize_row_q4_1_ref, the anchor of the quantize targets, is
# counted beside kvq's quantizer in every build when its source is here
# (build/ggml_src, from bench/ggml_anchor/fetch.sh; GGML=1 fetches it: 77 MB
# from PyPI), compiled with the build's flags as bench/ggml_anchor.sh does.
#
# Environment: CC (gcc), GGML (0), T_CALLGRIND (1024), T_PTRACE (256), T_QEMU (1024),
# XCC (aarch64-linux-gnu-gcc), ONLY (count only
# the methods whose name contains it, e.g. ONLY=KIVI-2, ONLY=attend; the
# appends alone take ~7 minutes of ptrace in the AVX-512 build), KVQ_DIR (the folder
# whose kvq.h is measured, default the repository root; e.g. a copy of
# another commit's: git show COMMIT:kvq.h > DIR/kvq.h).
set -eu
CC=${CC:-gcc}
B=${1:-build/instr}
T_CALLGRIND=${T_CALLGRIND:-1024}
T_PTRACE=${T_PTRACE:-256}
T_QEMU=${T_QEMU:-1024}
XCC=${XCC:-aarch64-linux-gnu-gcc}
FLAGS="-std=c99 -O3 -g -Wall -Wextra -Wpedantic -I${KVQ_DIR:-.}"
mkdir -p "$B"

has_flags() {                        # has_flags avx2 fma ... : CPU has all
    for f in "$@"; do
        grep -qw "$f" /proc/cpuinfo || return 1
    done
}

# ggml_objs CC NAME FLAGS...: compile ggml-quants.c and the shim with the
# build's flags; prints the arguments that link them, or nothing
GGML_SRC=""
if [ -d build/ggml_src ] || [ "${GGML:-0}" = 1 ]; then
    GGML_SRC=$(sh bench/ggml_anchor/fetch.sh)/ggml
fi
ggml_objs() {
    [ -n "$GGML_SRC" ] || return 0
    gcc_=$1; name_=$2; shift 2
    "$gcc_" -std=c11 -O3 -DNDEBUG -w "$@" -I"$GGML_SRC/include" -I"$GGML_SRC/src" \
        -I"$GGML_SRC/src/ggml-cpu" -c "$GGML_SRC/src/ggml-quants.c" -o "$B/ggml-quants_$name_.o" &&
        "$gcc_" -std=c11 -O3 -Wall -Wextra "$@" -c bench/ggml_anchor/ggml_shim.c \
            -o "$B/ggml_shim_$name_.o" &&
        echo "-DKVQ_BENCH_GGML $B/ggml-quants_$name_.o $B/ggml_shim_$name_.o"
}

# count NAME COUNTER "CFLAGS" CPU_FLAGS...: build, run --instr with COUNTER
# (callgrind falls back to ptrace without valgrind), keep the table
BUILT=""
count() {
    name=$1; counter=$2; cflags=$3; shift 3
    if ! has_flags "$@"; then
        echo "## $name: skipped, this CPU lacks one of: $*"
        echo
        return 0
    fi
    bin="$B/bench_cpu_$name"
    # shellcheck disable=SC2086   # cflags and ggml are lists of arguments
    ggml=$(ggml_objs "$CC" "$name" $cflags)
    # shellcheck disable=SC2086
    $CC $FLAGS $cflags -o "$bin" bench/bench_cpu.c $ggml -lm
    via="--instr-T $T_PTRACE"
    if [ "$counter" = callgrind ] && command -v valgrind >/dev/null 2>&1; then
        via="--callgrind --instr-T $T_CALLGRIND"
    fi
    echo "## $name: $CC $cflags"
    # shellcheck disable=SC2086   # via is a list of options
    "$bin" --instr $via ${ONLY:+--instr-only "$ONLY"} 2>"$B/instr_$name.log" |
        tee "$B/instr_$name.md"
    echo
    BUILT="$BUILT $name"
}

case $(uname -m) in
x86_64|amd64)
    count plain callgrind "-march=x86-64"
    count AVX2 callgrind "-march=x86-64-v3" avx2 fma f16c
    count AVX-512 ptrace "-march=x86-64-v4" avx512f avx512bw avx512dq avx512vl fma f16c
    # NEON: a static AArch64 build, counted under qemu-aarch64 by the plain
    # build (the driver: it makes the table, the AArch64 build the calls)
    if ! command -v "$XCC" >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
        echo "## NEON: skipped, needs $XCC and qemu-aarch64 (or run this script on AArch64)"
        echo
    elif [ -x "$B/bench_cpu_plain" ]; then
        ggml=$(ggml_objs "$XCC" NEON)
        # shellcheck disable=SC2086   # FLAGS and ggml are lists of arguments
        $XCC $FLAGS -static -o "$B/bench_cpu_NEON" bench/bench_cpu.c $ggml -lm
        $CC -std=c99 -Wall -Wextra -Wpedantic -shared -fPIC -O2 -o "$B/qemu_insn.so" \
            bench/qemu_insn.c
        echo "## NEON: $XCC -static (default -march: NEON), counted under qemu-aarch64"
        "$B/bench_cpu_plain" --instr --qemu-aarch64 "$B/qemu_insn.so" "$B/bench_cpu_NEON" \
            --instr-T "$T_QEMU" ${ONLY:+--instr-only "$ONLY"} 2>"$B/instr_NEON.log" |
            tee "$B/instr_NEON.md"
        echo
        BUILT="$BUILT NEON"
    fi
    ;;
aarch64|arm64)
    count plain callgrind "-DKVQ_NO_SIMD"
    count NEON callgrind ""
    ;;
*)
    count plain callgrind ""
    ;;
esac

# The marginal instructions per element, one column per build
# shellcheck disable=SC2086   # build names have no spaces
set -- $BUILT
[ $# -gt 0 ] || exit 0
echo "## Marginal instructions per element, by build"
echo
# shellcheck disable=SC2046   # one file per build, no spaces in B
awk -v names="$*" '
    BEGIN { nb = split(names, build, " ") }
    FNR == 1 { b++ }
    /^\| (attend|quantize|append)/ {
        split($0, c, "|")                       # c[2] method, c[3] n_q, c[7] marginal
        key = c[2] "|" c[3]
        if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        v[key, b] = c[7]
    }
    END {
        printf "| method | n_q |"; for (i = 1; i <= nb; i++) printf " %s |", build[i]; print ""
        printf "|---|---|"; for (i = 1; i <= nb; i++) printf "---|"; print ""
        for (k = 1; k <= n; k++) {
            printf "|%s|", order[k]
            for (i = 1; i <= nb; i++) printf "%s|", ((order[k], i) in v) ? v[order[k], i] : " - "
            print ""
        }
    }' $(for n in "$@"; do echo "$B/instr_$n.md"; done)
