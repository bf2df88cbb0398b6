#!/usr/bin/env bash
# tests/test_all.sh - the passes of `make test`, each under its own header,
# then one grand total over all of them (the last line, "total: N passed,
# M failed"). Every pass runs even when an earlier one failed, so the total
# is always complete; the exit status is non-zero if anything failed.
#
#   tests/test_all.sh "UNIT..." "SANITIZED..." "FUZZ_REPLAY..." "VALGRIND..."
#
# Each argument is a space-separated list of binaries (built by make).
set -u
unit=$1 san=$2 replay=$3 vg=$4
totals=$(mktemp); trap 'rm -f "$totals"' EXIT
pass() { printf '\n=== pass %s\n' "$*"; }
# after each pass, its seconds (what CI's time limit is spent on)
t_pass=$SECONDS
took() { printf '=== (%d s)\n' $((SECONDS - t_pass)); t_pass=$SECONDS; }

pass "1/5: unit tests (-O2)"
TOTALS=$totals tests/run.sh $unit

took
pass "2/5: the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (QUICK sizes)"
TOTALS=$totals tests/run.sh $san

took
pass "3/5: fuzz/corpus replayed through every fuzz target (gcc, ASan + UBSan)"
for f in $replay; do
    out=$("$f" "fuzz/corpus/${f##*/}" 2>&1); rc=$?
    printf '%s\n' "$out" | tail -n 5
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/p')
    n=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/p')
    if [ -z "$p" ] || [ "$rc" -ne 0 ]; then p=${p:-0}; n=$(( ${n:-0} + 1 )); echo "$f: exit $rc"; fi
    echo "$p $n" >> "$totals"
done

took
pass "4/5: valgrind memcheck over the QUICK builds (no sanitizer)"
if command -v valgrind >/dev/null 2>&1; then
    VALGRIND="${VALGRIND_CMD:-valgrind --quiet --error-exitcode=99 --leak-check=full}" \
        TOTALS=$totals tests/run.sh $vg
else
    echo "valgrind not found: pass skipped (apt-get install valgrind)"
fi

took
pass "5/5: kvq_cuda.cu's own kernels on the CPU emulator (make test-cuda-emu)"
TOTALS=$totals sh tests/emu/run.sh

took
read -r P F <<<"$(awk '{ p += $1; f += $2 } END { print p + 0, f + 0 }' "$totals")"
printf '\n=== make test: compile checks and check-docs passed before the passes above\n'
echo "total: $P passed, $F failed"
[ "$F" -eq 0 ]
