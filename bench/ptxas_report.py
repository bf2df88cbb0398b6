#!/usr/bin/env python3
"""Registers, spills and register-limited occupancy of every kernel in
kvq_cuda.cu, from the compiler alone (no GPU needed).

    nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -c kvq_cuda.cu -o /dev/null 2> ptxas.log
    python3 bench/ptxas_report.py ptxas.log

The attention kernel runs 128 threads per CTA (KVQ_CUDA_WARPS = 4); an
sm_90 SM has 65,536 registers, allocated per warp in units of 256, so a
CTA of R registers per thread takes 4 * ceil(32 R / 256) * 256 of them.
Shared memory can lower the count further (not included: the dynamic
stage size is chosen at launch)."""
import re
import subprocess
import sys

def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    except OSError:
        return name

def main(path):
    rows, cur, spill = [], None, ""
    for line in open(path):
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = demangle(m.group(1))
            continue
        if "spill stores" in line:
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            spill = f"{m.group(1)}/{m.group(2)}"
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            regs = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            rows.append((cur.split("(")[0], regs, int(smem.group(1)) if smem else 0, spill))
            cur = None
    print(f"{'kernel':58s} {'regs':>4s} {'static smem':>11s} {'spill st/ld':>11s} {'CTAs/SM by regs':>15s}")
    for name, regs, smem, spill in rows:
        per_warp = -(-32 * regs // 256) * 256
        ctas = 65536 // (4 * per_warp) if "attend_kernel" in name else None
        print(f"{name:58s} {regs:4d} {smem:11d} {spill:>11s} {'' if ctas is None else ctas:>15}")

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ptxas_report.py PTXAS_LOG")
    main(sys.argv[1])
