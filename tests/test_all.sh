#!/usr/bin/env bash
# tests/test_all.sh - the passes of `make test` (MODE=quick) and `make
# test-all` (MODE=all), each under its own header with its seconds, then one
# grand total over all of them (the last line, "total: N passed, M failed").
# Every pass runs even when an earlier one failed, so the total is always
# complete; the exit status is non-zero if anything failed.
#
#   MODE=quick|all UNIT="..." SAN="..." REPLAY="..." VG="..." tests/test_all.sh
#
# Each list is a space-separated list of binaries built by make; an empty
# list skips its pass. quick: unit tests and simd_check, the sanitizer pass
# over the core tests, one emulator build on test_gpu's kernel cases. all:
# the same unit tests, the sanitizer pass over every test, the fuzz corpus
# replayed, valgrind, every emulator build with the planted bugs, and the
# short eval against its golden file (when the model is there).
set -u
MODE=${MODE:-quick}
UNIT=${UNIT:-} SAN=${SAN:-} REPLAY=${REPLAY:-} VG=${VG:-}
totals=$(mktemp); trap 'rm -f "$totals"' EXIT
n_pass=$([ "$MODE" = all ] && echo 6 || echo 3); i_pass=0
pass() { i_pass=$((i_pass + 1)); printf '\n=== pass %d/%d: %s\n' "$i_pass" "$n_pass" "$*"; }
t_pass=$SECONDS
took() { printf '=== (%d s)\n' $((SECONDS - t_pass)); t_pass=$SECONDS; }

pass "unit tests (-O2, kvq.h alone) and simd_check (kvq_simd.h against kvq.h, bit for bit)"
TOTALS=$totals tests/run.sh $UNIT
took

pass "the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (QUICK sizes)"
TOTALS=$totals tests/run.sh $SAN
took

if [ "$MODE" = all ]; then
    pass "fuzz/corpus replayed through every fuzz target (gcc, ASan + UBSan)"
    for f in $REPLAY; do
        out=$("$f" "fuzz/corpus/${f##*/}" 2>&1); rc=$?
        printf '%s\n' "$out" | tail -n 5
        line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
        p=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/p')
        n=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/p')
        if [ -z "$p" ] || [ "$rc" -ne 0 ]; then p=${p:-0}; n=$(( ${n:-0} + 1 )); echo "$f: exit $rc"; fi
        echo "$p $n" >> "$totals"
    done
    took

    pass "valgrind memcheck over the QUICK builds (no sanitizer)"
    if command -v valgrind >/dev/null 2>&1; then
        VALGRIND="${VALGRIND_CMD:-valgrind --quiet --error-exitcode=99 --leak-check=full}" \
            TOTALS=$totals tests/run.sh $VG
    else
        echo "valgrind not found: pass skipped (apt-get install valgrind)"
    fi
    took

    pass "kvq_cuda.cu's own kernels on the CPU emulator: every build, the planted bugs"
    TOTALS=$totals sh tests/emu/run.sh
    took

    pass "the short eval on the real model against its golden file (make eval-check)"
    if [ -n "${EVAL_CHECK:-}" ]; then
        out=$(sh -c "$EVAL_CHECK" 2>&1); rc=$?
        printf '%s\n' "$out" | tail -n 15
        if [ "$rc" -eq 0 ]; then echo "1 0" >> "$totals"; else echo "0 1" >> "$totals"; fi
    else
        echo "no eval check given: pass skipped"
    fi
    took
else
    pass "kvq_cuda.cu's kernels on the CPU emulator: one build, test_gpu's kernel cases"
    TOTALS=$totals sh tests/emu/run.sh --quick
    took
fi

read -r P F <<<"$(awk '{ p += $1; f += $2 } END { print p + 0, f + 0 }' "$totals")"
printf '\n=== make %s: compile checks and check-docs passed before the passes above\n' \
    "$([ "$MODE" = all ] && echo test-all || echo test)"
echo "total: $P passed, $F failed"
[ "$F" -eq 0 ]
