#!/bin/sh
# tests/eval_docs.sh - regenerate, from one run, everything the walkthrough
# quotes of the real-model eval (make eval-docs; issue 48):
#   1. the full run, every row (build/llm eval --only all: make eval's rows
#      and the diagnostics 10a quotes), its stdout to walkthrough/10_eval/
#      full.txt and its CSVs to walkthrough/10_eval/ and plots/csv/;
#   2. the short eval's golden file, walkthrough/10_eval/short.txt: its
#      command, then its stdout (tests/check_eval.sh short runs it again);
#   3. the quotes in walkthrough/*.md and README.md (tests/eval_quotes.py);
#   4. the eval's figures, plots/real_model_ppl.png and real_kivi_axes.png
#      (plots/real_model.py; matplotlib, installed with pip when missing);
#   5. tests/check_eval.sh docs, which must then pass.
# Usage: sh tests/eval_docs.sh LLM MODEL TEXT "SHORT_ARGS"   (the Makefile's)
#        sh tests/eval_docs.sh --quotes    steps 3-5 alone, from the committed
#                                          run (after editing a chapter)
# The prose around the quotes is not rewritten: read git diff walkthrough/.
set -eu
cd "$(dirname "$0")/.."
dir=walkthrough/10_eval
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
if [ "${1:-}" = "--quotes" ]; then
    python3 tests/eval_quotes.py "$dir/full.txt" walkthrough/*.md README.md
    python3 -c "import matplotlib" 2>/dev/null && python3 plots/real_model.py "$dir" "$tmp/no-npy" plots
    exec sh tests/check_eval.sh docs
fi
llm=$1 model=$2 text=$3 short=$4
mkdir -p "$dir" plots/csv

echo "eval-docs: 1. the full run (every row; about 28 CPU-minutes, spread over the cores)"
"$llm" eval --model "$model" --text "$text" --only all --csv "$tmp" > "$tmp/full.txt"
cp "$tmp/full.txt" "$tmp/real_model_eval.csv" "$tmp/real_model_claims.csv" "$dir/"
cp "$tmp/real_model_eval.csv" "$tmp/real_model_claims.csv" plots/csv/

echo "eval-docs: 2. the short eval's golden file"
# the command as check_eval.sh runs it (build/llm: $llm; the default model)
case $model in models/SmolLM2-135M-Instruct.Q4_1.gguf) ;;
    *) echo "eval-docs: the golden file needs the default model (got $model)"; exit 1 ;; esac
args="eval --text $text $short"
# shellcheck disable=SC2086
"$llm" $args > "$tmp/short.out"
{ printf '$ build/llm %s\n' "$args"; cat "$tmp/short.out"; } > "$dir/short.txt"

echo "eval-docs: 3. the chapters' quotes"
python3 tests/eval_quotes.py "$dir/full.txt" walkthrough/*.md README.md

echo "eval-docs: 4. the eval's figures"
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install matplotlib ||
    python3 -m pip install --break-system-packages matplotlib
python3 plots/real_model.py "$dir" "$tmp/no-npy" plots

echo "eval-docs: 5. the check"
sh tests/check_eval.sh docs
echo "eval-docs: done; read git diff walkthrough/ and fix the prose the new numbers contradict"
