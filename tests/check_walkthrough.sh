#!/bin/sh
# tests/check_walkthrough.sh - the walkthrough's quotes are still true.
#
# Two kinds of fenced block in walkthrough/*.md are checked:
#
# 1. Output. A block whose first line is
#     $ [VAR=value ...] ./build/examples/NAME [ARGS]   (or ./build/emu/NAME:
#                                                     chapter 9b)
#    holds lines copied from that command's output. This script runs each such
#    command once (examples are deterministic: fixed seeds) and fails if any
#    quoted line is not, verbatim, a line of the output. "..." lines mark
#    omissions and are skipped; trailing spaces are ignored on both sides.
#
# 2. Code. A ```c block whose first line is a marker comment naming a file
#    of the repository,
#     // kvq.h                    or    // kvq.h: what the excerpt shows
#    holds an excerpt of that file. Each run of lines between "..." lines
#    must appear in the file as consecutive lines, and the runs in the order
#    written; lines are compared with leading and trailing blanks removed
#    (the excerpt may re-indent), blank lines included. A line that is only
#    "..." (or "/* ... */", or "// ...") marks an omission of any length.
#    A ```c block without the marker is not checked.
#
# A fence may be indented (inside a list item), and its indentation is
# removed from the lines it holds. Other blocks (chapters 9 and 10 quote
# benchmark result files) are not checked here; the real-model eval's quotes
# (chapters 10, 10a, 12) are held to the committed full run by
# tests/check_eval.sh docs, which this script runs last (default file set).
#
# Usage: sh tests/check_walkthrough.sh [--code] [FILE.md ...]
#        (default walkthrough/*.md; --code checks the code excerpts only,
#        which needs nothing built)
# The output check needs the examples built (make check-docs builds them).
# Quotes always say ./build/...; with KVQ_BUILD=DIR (make check-docs B=DIR
# sets it) the binaries are run from DIR instead, output compared the same.
set -u
build_dir=${KVQ_BUILD:-build}
case $build_dir in /*) ;; *) build_dir=./$build_dir ;; esac
cd "$(dirname "$0")/.." || exit 2
code_only=0
if [ "${1:-}" = "--code" ]; then code_only=1; shift; fi
all=0; [ $# -gt 0 ] || { all=1; set -- walkthrough/*.md; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

# 0. Code excerpts: pull out every marked ```c block as records
#    FILE<TAB>LINE<TAB>SOURCE<TAB>TEXT (TEXT "..." for an omission, a new
#    excerpt starting at each marker), then look each one up in its source.
for md in "$@"; do
    awk -v file="$md" '
        function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t\r]+$/, "", s); return s }
        /^[ \t]*```/ {
            if (!infence) { infence = 1; first = 1; src = ""
                            iscode = ($0 ~ /^[ \t]*```c[ \t]*$/) }
            else infence = 0
            next
        }
        infence && iscode {
            line = trim($0)
            if (first) { first = 0
                         if (match(line, /^\/\/ [A-Za-z0-9_.\/-]+\.(h|c|cu|cpp)(:|$)/)) {
                             src = substr(line, 4); sub(/:.*/, "", src)
                             printf "%s\t%d\t%s\t%s\n", file, NR, src, "@@begin"
                         }
                         next }
            if (src == "") next
            if (line == "..." || line == "/* ... */" || line == "// ...") line = "..."
            printf "%s\t%d\t%s\t%s\n", file, NR, src, line
        }' "$md"
done > "$tmp/code" || exit 2

n_code=0 code_bad=0
if [ -s "$tmp/code" ]; then
    for src in $(cut -f3 "$tmp/code" | sort -u); do
        if [ ! -f "$src" ]; then
            grep -F "	$src	@@begin" "$tmp/code" | while IFS='	' read -r file line s text; do
                printf 'DRIFT %s:%s: %s does not exist\n' "$file" "$line" "$src"; done
            c=$(grep -cF "	$src	@@begin" "$tmp/code")
            n_code=$((n_code + c)); code_bad=$((code_bad + c)); continue
        fi
        # the source, one trimmed line per record, then the excerpts
        awk -F'\t' -v src="$src" '
            function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t\r]+$/, "", s); return s }
            FNR == NR { n++; body[n] = trim($0); next }
            $3 != src { next }
            $4 == "@@begin" { finish(); open_ = 1; where = $1 ":" $2; pos = 1; nrun = 0; bad = ""; next }
            $4 == "..." { run(); next }
            { nrun++; want[nrun] = $4; wline[nrun] = $1 ":" $2 }
            # find the pending run at or after pos; consecutive source lines
            function run(   i, j, ok) {
                if (nrun == 0 || bad != "") { nrun = 0; return }
                for (i = pos; i + nrun - 1 <= n; i++) {
                    ok = 1
                    for (j = 1; j <= nrun; j++) if (body[i + j - 1] != want[j]) { ok = 0; break }
                    if (ok) { pos = i + nrun; nrun = 0; return }
                }
                # not found: name the first line of the run that is nowhere in
                # the source, or else the first line of the run (out of order)
                bad = wline[1]; badtext = want[1] "\n    (each line is in the source, but not as consecutive lines after the previous run)"
                for (j = 1; j <= nrun; j++) {
                    ok = 0
                    for (i = 1; i <= n; i++) if (body[i] == want[j]) { ok = 1; break }
                    if (!ok) { bad = wline[j]; badtext = want[j]; break }
                }
                nrun = 0
            }
            function finish() {
                if (!open_) return
                run(); count++
                if (bad != "") { printf "DRIFT %s (excerpt of %s from %s):\n    %s\n", bad, src, where, badtext; nbad++ }
                open_ = 0
            }
            END { finish(); printf "%d %d\n", count, nbad > "/dev/stderr" }
        ' "$src" "$tmp/code" 2> "$tmp/code.count"
        read -r c b < "$tmp/code.count"
        n_code=$((n_code + c)); code_bad=$((code_bad + b))
    done
fi
if [ "$code_bad" -ne 0 ]; then
    echo "check-docs: $code_bad of $n_code code excerpts no longer match their source file."
    echo "            Copy the lines from the file again (\"...\" marks an omission)."
    exit 1
fi
echo "check-docs: $n_code code excerpts match their source files, line for line"
[ "$code_only" -eq 0 ] || exit 0

# 1. Pull out the quotes: one record per quoted line,
#    FILE<TAB>LINE<TAB>COMMAND<TAB>TEXT, trailing blanks removed.
for md in "$@"; do
    awk -v file="$md" '
        function rstrip(s) { sub(/[ \t\r]+$/, "", s); return s }
        /^[ \t]*```/ {
            if (!infence) { infence = 1; first = 1; cmd = ""
                            match($0, /^[ \t]*/); ind = RLENGTH }
            else infence = 0
            next
        }
        infence {
            line = substr($0, 1, ind) ~ /^[ \t]*$/ ? substr($0, ind + 1) : $0
            line = rstrip(line)
            if (first) { first = 0
                         if (line ~ /^\$ ([A-Z_]+=[^ ]+ )*\.\/build\/(examples|emu)\//) cmd = substr(line, 3)
                         next }
            if (cmd == "" || line == "" || line == "...") next
            printf "%s\t%d\t%s\t%s\n", file, NR, cmd, line
        }' "$md"
done > "$tmp/quotes" || exit 2

# 2. Run each distinct command once.
cut -f3 "$tmp/quotes" | sort -u > "$tmp/cmds"
n=0
while IFS= read -r cmd; do
    n=$((n + 1))
    run=$(printf '%s\n' "$cmd" | sed "s|\./build/emu/|$build_dir/${KVQ_EMU_DIR:-emu}/|; s|\./build/|$build_dir/|")   # the B= build
                                        # (KVQ_EMU_DIR: which emulator build)
    exe=$(printf '%s\n' "$run" | tr ' ' '\n' | grep -v = | head -n 1)   # past VAR=value
    if [ ! -x "$exe" ]; then
        echo "check-docs: $exe is not built (run make check-docs)"; exit 2
    fi
    # word splitting of $run is intended: the example's arguments
    # shellcheck disable=SC2086
    env $run > "$tmp/out.$n" 2>&1
    sed 's/[ \t\r]*$//' "$tmp/out.$n" > "$tmp/out.$n.s"
    printf '%s\t%s\n' "$cmd" "$tmp/out.$n.s" >> "$tmp/map"
done < "$tmp/cmds"

# 3. Every quoted line must be a whole line of its command's output.
stale=0 total=0
while IFS='	' read -r file line cmd text; do
    total=$((total + 1))
    out=$(awk -F'\t' -v c="$cmd" '$1 == c { print $2 }' "$tmp/map")
    if ! grep -Fxq -- "$text" "$out"; then
        stale=$((stale + 1))
        printf 'STALE %s:%s (%s):\n    %s\n' "$file" "$line" "$cmd" "$text"
    fi
done < "$tmp/quotes"

if [ "$stale" -ne 0 ]; then
    echo "check-docs: $stale of $total quoted lines no longer match the examples' output."
    echo "            Re-run the example and copy its lines into the chapter."
    exit 1
fi
echo "check-docs: $total quoted lines from $n example runs match, verbatim"

# 4. The quotes of the real-model eval (blocks "$ make eval ...", "$ build/llm
#    eval ..."): every line must be a line of the committed full run, whose
#    printout and CSVs must be one run (tests/check_eval.sh docs; no model).
[ "$all" -eq 0 ] || sh tests/check_eval.sh docs
