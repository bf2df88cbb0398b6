#!/bin/sh
# tests/check_walkthrough.sh - the walkthrough's quoted numbers are still true.
#
# Every fenced block in walkthrough/*.md whose first line is
#     $ [VAR=value ...] ./build/examples/NAME [ARGS]   (or ./build/emu/NAME:
#                                                     chapter 9b)
# holds lines copied from that command's output. This script runs each such
# command once (examples are deterministic: fixed seeds) and fails if any
# quoted line is not, verbatim, a line of the output. "..." lines mark
# omissions and are skipped; trailing spaces are ignored on both sides; a
# fence may be indented (inside a list item), and its indentation is removed
# from the lines it holds. Blocks that do not start with "$ ./build/examples/"
# or "$ ./build/emu/"
# (chapter 9 and 10 quote benchmark and evaluation result files) are not
# checked here.
#
# Usage: sh tests/check_walkthrough.sh [FILE.md ...]   (default walkthrough/*.md)
# Needs the examples built (make check-docs builds them first).
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -gt 0 ] || set -- walkthrough/*.md
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

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
    exe=$(printf '%s\n' "$cmd" | tr ' ' '\n' | grep -v = | head -n 1)   # past VAR=value
    if [ ! -x "$exe" ]; then
        echo "check-docs: $exe is not built (run make check-docs)"; exit 2
    fi
    # word splitting of $cmd is intended: the example's arguments
    # shellcheck disable=SC2086
    env $cmd > "$tmp/out.$n" 2>&1
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
