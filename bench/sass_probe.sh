#!/usr/bin/env bash
# SASS instructions per loop iteration, by instruction kind, from the
# compiler alone (no GPU): nvcc, then cuobjdump (which calls nvdisasm) from
# the CUDA Toolkit, or from the PyPI wheels nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm, which bench/sass_tools.sh fetches when they are
# missing. (make cuda-gates counts the tensor-core kernel itself.)
#   bench/sass_probe.cu  today's fast path: one packed word through
#                        kvq_dev_word_fma (CUDA cores), per query head count
#   bench/mma_probe.cu   the tensor-core key step (one 16-token row tile of
#                        fragment-order keys, decode + MMAs, 4 or 8 heads),
#                        and the whole step of the design (mma_step_count)
set -eu
cd "$(dirname "$0")/.."
out=${OUT:-build}; mkdir -p "$out"
tools=$(bash bench/sass_tools.sh) || exit 1
PATH="$tools:$PATH"
for probe in sass_probe mma_probe; do
    nvcc -O3 -std=c++17 -arch="${ARCH:-sm_90}" -I. -cubin -o "$out/$probe.cubin" "bench/$probe.cu"
    cuobjdump -sass "$out/$probe.cubin" > "$out/$probe.sass"
done
python3 - "$out/sass_probe.sass" "$out/mma_probe.sass" <<'PY'
import collections, re, sys

def loops(path, pattern):
    """(template args, loop body) of each kernel's first backward branch."""
    lines = open(path).read().split("\n")
    starts = [i for i, l in enumerate(lines) if "Function : " in l] + [len(lines)]
    for a, b in zip(starts, starts[1:]):
        m = re.search(pattern, lines[a])
        if not m:
            continue
        code = []
        for l in lines[a:b]:
            x = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", l)
            if x:
                code.append((int(x.group(1), 16), x.group(2)))
        for addr, text in code:
            br = re.search(r"BRA (0x[0-9a-f]+)", text)
            if br and int(br.group(1), 16) < addr:
                yield m.groups(), [t for a2, t in code if int(br.group(1), 16) <= a2 <= addr]
                break

def kinds(body):
    k = collections.Counter((t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0]
                            for t in body)
    return " ".join(f"{n} {v}" for n, v in k.most_common())

print("CUDA cores (kvq_dev_word_fma): one packed word per loop iteration")
print(f"{'B':>2} {'heads':>5} {'instr/word':>10} {'per code per head':>18}  by kind")
for (b, nh), body in sorted(loops(sys.argv[1], r"sass_probeILi(\d+)ELi(\d+)E")):
    codes = 32 // int(b)
    print(f"{b:>2} {nh:>5} {len(body):>10} {len(body) / codes / int(nh):>18.2f}  {kinds(body)}")
print()
print("tensor cores (decode + kvq_mma_16816): one 16-token row tile per loop iteration")
print(f"{'B':>2} {'D':>4} {'heads':>5} {'decode':>9} {'instr/tile':>10} {'codes/tile':>10} {'per code per head':>18}  by kind")
for (b, d, nq, sub), body in sorted(loops(sys.argv[2], r"mma_probe_keysILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")):
    codes, heads = 16 * int(d), 4 * int(nq)        # 16 tokens x D channels, per warp
    dec = "subnormal" if sub == "1" else "magic"
    print(f"{b:>2} {d:>4} {heads:>5} {dec:>9} {len(body):>10} {codes:>10} {len(body) / codes / heads * 32:>18.3f}  {kinds(body)}")
print()
print("the whole step (mma_step_count: keys, softmax, hand-off, values; counted, never run), 4 heads")
print(f"{'B':>2} {'D':>4} {'tokens':>6} {'instr/loop':>10} {'per 16 tokens':>13} {'per KB of codes':>15}  by kind")
for (b, d), body in sorted(loops(sys.argv[2], r"mma_step_countILi(\d+)ELi(\d+)E")):
    tokens = 16 * 4 // int(b)                      # 16 TPW tokens per iteration
    kb = tokens * 2 * int(d) * int(b) / 8 / 1024   # key + value codes
    print(f"{b:>2} {d:>4} {tokens:>6} {len(body):>10} {len(body) * 16 / tokens:>13.1f} {len(body) / kb:>15.1f}  {kinds(body)}")
print("(per code per head: warp instructions x 32 lanes / (codes x heads), the same unit as above,")
print(" where each lane handles its own codes)")
PY
