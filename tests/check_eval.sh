#!/bin/sh
# tests/check_eval.sh - the eval the walkthrough quotes is the eval the code
# prints (issue 48).
#
# The files it holds the code and the docs to, all written by one command,
# `make eval-docs` (tests/eval_docs.sh), and committed:
#   walkthrough/10_eval/full.txt           stdout of the full run, every row
#                                          (build/llm eval --only all)
#   walkthrough/10_eval/real_model_eval.csv   its table, the doubles as %.17g
#   walkthrough/10_eval/real_model_claims.csv its claims
#   walkthrough/10_eval/short.txt          the golden file: the short eval's
#                                          command ("$ build/llm eval ..."),
#                                          then its stdout
#
# Usage: sh tests/check_eval.sh docs    needs nothing built (check-docs runs it)
#   1. the printout and the CSVs are one run: every table row and every claim
#      line of full.txt is printed again from the CSVs, digit for digit, with
#      the formats of examples/llm/llm.c;
#   2. every line quoted in a walkthrough block whose first line is
#      "$ make eval ..." or "$ build/llm eval ..." is a line of full.txt.
#        sh tests/check_eval.sh short   needs build/llm and the model
#   3. the short eval, run again, prints the golden file's lines exactly
#      (stdout holds no timing and no thread count: the same bits at any -t;
#      gcc and clang alike with the Makefile's -ffp-contract=off; clang's
#      default, which fuses a*b+c, and other architectures print others).
# Any failure names the command that regenerates all of it: make eval-docs.
# KVQ_BUILD=DIR runs DIR/llm instead of build/llm, as check_walkthrough.sh.
set -u
cd "$(dirname "$0")/.." || exit 2
dir=walkthrough/10_eval
fix="regenerate the golden file, the CSVs and the chapters' quotes together with: make eval-docs"
mode=${1:-docs}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

case $mode in
docs)
    for f in full.txt real_model_eval.csv real_model_claims.csv; do
        [ -f "$dir/$f" ] || { echo "check-eval: $dir/$f is missing; $fix"; exit 1; }
    done
    # 1. the printout from the CSVs. csv(): split a line into F[1..n] (quoted
    #    fields may hold commas; the runner writes no quote inside a field)
    awk '
        function csv(s,   n, f, c, q, i) {
            n = 0; f = ""; q = 0
            for (i = 1; i <= length(s); i++) {
                c = substr(s, i, 1)
                if (c == "\"") q = !q
                else if (c == "," && !q) { F[++n] = f; f = "" }
                else f = f c
            }
            F[++n] = f
            return n
        }
        FILENAME ~ /real_model_eval\.csv$/ {
            if (FNR == 1) next
            csv($0)
            iv = F[16] + 0 ? sprintf("[%+.1f, %+.1f]", F[6], F[7]) : "(too short)"
            want[++nw] = sprintf("%-18s %6.2f %8.3f %+8.3f %+7.1f%% %-17s %8.3f %+7.1f%% %8.5f %7.4f %5.1f%% %5.1f%% %4d  %s",
                                 F[1], F[2], F[3], F[4], F[5], iv, F[8], F[9], F[10], F[11], F[12], F[13], F[14], F[17])
            next
        }
        FILENAME ~ /real_model_claims\.csv$/ {
            if (FNR == 1) next
            csv($0)
            want[++nw] = sprintf("  %-7s %-27s %-46s %s", F[4], F[1], F[2], F[4] == "n/a" ? "(not run)" : F[3])
            next
        }
        # full.txt: the table rows (header to the "bits:" line), the claims
        /^method +bits +ppl/ { intable = 1; next }
        /^bits: / { intable = 0 }
        /^papers. claims/ { inclaims = 1; next }
        /^[0-9]+ FINDING|^every claim/ { inclaims = 0 }
        intable || inclaims { got[++ng] = $0; where[ng] = FNR }
        END {
            bad = 0
            if (ng != nw) { printf "check-eval: full.txt has %d rows and claims, the CSVs %d\n", ng, nw; bad = 1 }
            for (i = 1; i <= ng && i <= nw; i++)
                if (got[i] != want[i]) {
                    printf "check-eval: full.txt:%d is not what the CSVs say:\n    full.txt: %s\n    CSV:      %s\n", where[i], got[i], want[i]
                    bad = 1
                }
            if (!bad) printf "check-eval: full.txt and the CSVs are one run (%d rows and claims, digit for digit)\n", ng
            exit bad
        }' "$dir/real_model_eval.csv" "$dir/real_model_claims.csv" "$dir/full.txt" ||
        { echo "check-eval: $fix"; exit 1; }

    # 2. the chapters' quotes of the full run
    for md in walkthrough/*.md README.md; do
        awk -v file="$md" '
            function rstrip(s) { sub(/[ \t\r]+$/, "", s); return s }
            /^[ \t]*```/ { if (!infence) { infence = 1; first = 1; on = 0 } else infence = 0; next }
            infence {
                line = rstrip($0)
                if (first) { first = 0; on = (line ~ /^\$ (make eval|build\/llm eval)( |$)/); next }
                if (on && line != "" && line != "...") printf "%s\t%d\t%s\n", file, NR, line
            }' "$md"
    done > "$tmp/quotes"
    sed 's/[ \t\r]*$//' "$dir/full.txt" > "$tmp/full"
    stale=0 total=0
    while IFS='	' read -r file line text; do
        total=$((total + 1))
        if ! grep -Fxq -- "$text" "$tmp/full"; then
            stale=$((stale + 1))
            printf 'STALE %s:%s (not a line of %s/full.txt):\n    %s\n' "$file" "$line" "$dir" "$text"
        fi
    done < "$tmp/quotes"
    if [ "$stale" -ne 0 ]; then
        echo "check-eval: $stale of $total lines the walkthrough quotes from make eval are not what the full run printed;"
        echo "            $fix"
        exit 1
    fi
    [ "$total" -gt 0 ] || { echo "check-eval: no quoted eval lines found (the blocks start \"\$ make eval\" or \"\$ build/llm eval\")"; exit 1; }
    echo "check-eval: $total lines the walkthrough quotes from make eval are lines of the full run"
    ;;
short)
    build_dir=${KVQ_BUILD:-build}
    gold=$dir/short.txt
    [ -f "$gold" ] || { echo "check-eval: $gold is missing; $fix"; exit 1; }
    cmd=$(head -n 1 "$gold")
    case $cmd in '$ build/llm eval '*) ;; *) echo "check-eval: $gold: line 1 is not \"\$ build/llm eval ...\""; exit 1 ;; esac
    run=$(printf '%s\n' "$cmd" | sed "s|^\\\$ build/|$build_dir/|")
    exe=${run%% *}
    [ -x "$exe" ] || { echo "check-eval: $exe is not built (make eval-check builds it)"; exit 2; }
    # word splitting of $run is intended: the eval's arguments
    # shellcheck disable=SC2086
    $run > "$tmp/out" 2> "$tmp/err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$tmp/err"; echo "check-eval: the short eval exited $rc: ${run}"; exit 1
    fi
    tail -n +2 "$gold" > "$tmp/gold"
    if ! cmp -s "$tmp/gold" "$tmp/out"; then
        echo "check-eval: the short eval no longer prints $gold (- golden, + now):"
        diff "$tmp/gold" "$tmp/out" | head -n 40
        echo "check-eval: the code's numbers and the docs' have parted."
        echo "            If the change is meant, $fix"
        echo "            (then read the diff of walkthrough/ and fix the prose around the quotes)."
        echo "            The golden file is the x86-64 build the Makefile makes (-mavx2 -mfma"
        echo "            -ffp-contract=off; gcc and clang agree): other flags (clang's default fuses"
        echo "            a*b+c) or another architecture print other last digits without a code change."
        exit 1
    fi
    echo "check-eval: the short eval prints $gold exactly ($(wc -l < "$tmp/out") lines): ${cmd#\$ }"
    ;;
*)
    echo "usage: sh tests/check_eval.sh docs|short"; exit 2 ;;
esac
