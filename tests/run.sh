#!/usr/bin/env bash
# Runs every test binary given, sums their "N passed, M failed" lines, and
# ends with one plain total line. Exits non-zero if any binary failed or crashed.
set -u
pass=0; fail=0; bad=0
for t in "$@"; do
    out=$(${VALGRIND:-} "$t" 2>&1); rc=$?    # VALGRIND: an optional runner
    printf '%s\n' "$out" | grep -v '^  ' | tail -n 60
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$t: no result line (exit $rc)"; bad=$((bad + 1)); continue
    fi
    p=$(echo "$line" | sed -E 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/')
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$t: exited $rc with no failed check"; bad=$((bad + 1))
    fi
done
fail=$((fail + bad))
echo "$pass passed, $fail failed"
[ -n "${TOTALS:-}" ] && echo "$pass $fail" >> "$TOTALS"   # for tests/test_all.sh
[ "$fail" -eq 0 ]
