#!/usr/bin/env python3
"""bench/ncu_stalls.py - where a kernel's warps wait, by SASS opcode.

Input: Nsight Compute's source page of one profiled launch, as CSV:

    ncu --set full -k regex:kvq_attend_mma --launch-skip 3 --launch-count 1 \
        -o rep build/campaign/bench_gpu --shape 4,128,4,256,32768 --kernels v5
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv

(the first line names the kernel, the second is the header, then one row per
SASS instruction with its stall samples per reason).  Output: the opcodes
that hold the most samples, each with its share of all samples, its share of
the executed instructions, and its five largest stall reasons (long_sb: a
global load not yet back; short_sb: shared memory, SHFL or MUFU; wait: a
fixed-latency dependency such as an MMA's result).  An opcode whose share of
samples far exceeds its share of instructions is where latency is exposed.

    python3 bench/ncu_stalls.py src.csv [--top N] [--lines M]

--lines M also prints the M single instructions with the most samples, by
their index in the listing, so they can be found in `cuobjdump -sass`.
Reads .csv or .csv.gz (bench/gpu_logs keeps them gzipped)."""
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass):
    """'@!P0 FMUL.FTZ R8, ...' -> 'FMUL' (predicate and modifiers dropped)."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main(argv):
    args = argv[1:]
    top, lines = 22, 0
    if "--top" in args:
        i = args.index("--top"); top = int(args[i + 1]); del args[i:i + 2]
    if "--lines" in args:
        i = args.index("--lines"); lines = int(args[i + 1]); del args[i:i + 2]
    if len(args) != 1:
        print("usage: python3 bench/ncu_stalls.py SRC.csv[.gz] [--top N] [--lines M]", file=sys.stderr)
        return 2
    opener = gzip.open if args[0].endswith(".gz") else open
    with opener(args[0], "rt", newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3 or SAMPLES not in rows[1] or "Source" not in rows[1]:
        print(f"ncu_stalls: {args[0]} is not ncu's --page source --csv output", file=sys.stderr)
        return 1
    kernel, header, body = rows[0][1:2], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    total = sum(number(r[col[SAMPLES]]) for r in body) or 1.0
    executed = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    for r in body:
        op = opcode(r[col["Source"]])
        executed[op] += number(r[col[EXECUTED]])
        by_op[op]["samples"] += number(r[col[SAMPLES]])
        for reason in reasons:
            by_op[op][reason[len("stall_"):]] += number(r[col[reason]])
    all_executed = sum(executed.values()) or 1.0

    print(f"{kernel[0] if kernel else '?'}")
    print(f"{total:.0f} stall samples, {all_executed:.0f} instructions executed")
    print(f"{'opcode':10s} {'samples':>8s} {'instr':>7s}  largest reasons (% of all samples)")
    for op, c in sorted(by_op.items(), key=lambda kv: -kv[1]["samples"])[:top]:
        largest = [kv for kv in c.most_common() if kv[0] != "samples" and kv[1] > 0][:5]
        why = ", ".join(f"{k} {100 * v / total:.1f}" for k, v in largest)
        print(f"{op:10s} {100 * c['samples'] / total:7.1f}% {100 * executed[op] / all_executed:6.1f}%  {why}")
    if lines:
        print(f"\nthe {lines} single instructions with the most samples (index in the listing):")
        hot = sorted(range(len(body)), key=lambda i: -number(body[i][col[SAMPLES]]))[:lines]
        for i in sorted(hot):
            r = body[i]
            print(f"{i:6d} {100 * number(r[col[SAMPLES]]) / total:5.1f}%  "
                  f"long_sb {number(r[col['stall_long_sb']]):6.0f}  short_sb {number(r[col['stall_short_sb']]):6.0f}  "
                  f"{r[col['Source']].strip()[:72]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
