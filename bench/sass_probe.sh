#!/usr/bin/env bash
# SASS instructions per loop iteration of bench/sass_probe.cu (one packed
# word through the fast path's inner step), by instruction kind. No GPU
# needed: nvcc, then cuobjdump (which calls nvdisasm) from the CUDA Toolkit.
# Where the toolkit lacks them, the PyPI wheels nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm hold both binaries (put their bin/ on PATH).
set -eu
cd "$(dirname "$0")/.."
out=${OUT:-build}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=${ARCH:-sm_90} -I. -cubin -o "$out/sass_probe.cubin" bench/sass_probe.cu
cuobjdump -sass "$out/sass_probe.cubin" > "$out/sass_probe.sass"
python3 - "$out/sass_probe.sass" <<'PY'
import collections, re, sys
lines = open(sys.argv[1]).read().split("\n")
starts = [i for i, l in enumerate(lines) if "Function : " in l] + [len(lines)]
print(f"{'B':>2} {'heads':>5} {'instructions per word':>22}  by kind")
for a, b in zip(starts, starts[1:]):
    m = re.search(r"sass_probeILi(\d+)ELi(\d+)E", lines[a])
    if not m:
        continue
    code = []
    for l in lines[a:b]:
        x = re.match(r"\s+/\*([0-9a-f]{4})\*/\s+(.*?)\s*;", l)
        if x:
            code.append((int(x.group(1), 16), x.group(2)))
    for addr, text in code:          # the loop: a branch back to an earlier address
        br = re.search(r"BRA (0x[0-9a-f]+)", text)
        if br and int(br.group(1), 16) < addr:
            body = [t for a2, t in code if int(br.group(1), 16) <= a2 <= addr]
            kind = collections.Counter((t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0] for t in body)
            print(f"{m.group(1):>2} {m.group(2):>5} {len(body):>22}  " +
                  " ".join(f"{k} {v}" for k, v in kind.most_common()))
            break
PY
