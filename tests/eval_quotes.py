"""tests/eval_quotes.py - rewrite the walkthrough's quotes of `make eval`
from a full run's printout (make eval-docs runs it; issue 48).

usage: python3 tests/eval_quotes.py FULL.txt FILE.md ...

A quote is a fenced block whose first line is "$ make eval ..." or
"$ build/llm eval ...". Each of its lines (other than "..." and blank lines)
is replaced by the line of FULL.txt with the same shape: the line with every
number that stands alone replaced by # (not the 2 of
kivi2), the verdict words (PASS / FINDING / n/a; shown /
reversed / unresolved) by one placeholder each, and blanks collapsed. So a
table row is matched by its method and claim, a claim line by its source and
text, whatever the numbers and verdicts became. A table line (the header
"method  bits ...", or a row, both flush left) whose shape has changed
because the table gained or lost a column is matched by its first word,
the method, among the table's lines. A quoted line with no such line in
FULL.txt, or with several, stops the script: edit it by hand.
Prose outside the blocks is not touched: read `git diff walkthrough/` after.
"""
import re
import sys

NUM = re.compile(r"(?<![A-Za-z0-9_.-])[-+]?\d+(?:\.\d+)?")   # not the 2 of kivi2
FENCE = re.compile(r"^[ \t]*```")
QUOTE = re.compile(r"^\$ (make eval|build/llm eval)( |$)")


def shape(line):
    s = NUM.sub("#", line)
    s = re.sub(r"\b(PASS|FINDING)\b|\bn/a\b", "V", s)
    s = re.sub(r"\b(shown|reversed|unresolved)\b", "W", s)
    return " ".join(s.split())


def main():
    full = [l.rstrip() for l in open(sys.argv[1], encoding="utf-8")]
    by_shape = {}
    for l in full:
        by_shape.setdefault(shape(l), []).append(l)
    by_method = {}          # the table: its header to the line before "bits:"
    intable = False
    for l in full:
        if l.startswith("method "):
            intable = True
        elif l.startswith("bits: "):
            intable = False
        if intable and l and not l[0].isspace():
            by_method.setdefault(l.split()[0], []).append(l)
    bad = changed = 0
    for md in sys.argv[2:]:
        lines = open(md, encoding="utf-8").read().split("\n")
        infence = on = False
        first = False
        for i, l in enumerate(lines):
            if FENCE.match(l):
                infence = not infence
                first, on = infence, False
                continue
            if not infence:
                continue
            if first:
                first = False
                on = bool(QUOTE.match(l.strip()))
                continue
            t = l.rstrip()
            if not on or t == "" or t == "...":
                continue
            cands = by_shape.get(shape(t), [])
            if not cands and t and not t[0].isspace():
                cands = by_method.get(t.split()[0], [])
            if len(set(cands)) != 1:
                print("%s:%d: %s line of the full run has this shape; edit by hand:\n    %s"
                      % (md, i + 1, "no" if not cands else "more than one", t))
                bad += 1
                continue
            if cands[0] != t:
                lines[i] = cands[0]
                changed += 1
        open(md, "w", encoding="utf-8").write("\n".join(lines))
    print("eval-docs: %d quoted lines rewritten from %s" % (changed, sys.argv[1]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
