#!/usr/bin/env bash
# The second half of `make cuda-gates` (the Makefile compiles the cubins and
# ptxas logs into $B/gates first): the SASS of the sm_90 cubins, then
# bench/cuda_gates.py over all of it. Its output is also kept in
# $B/gates/gates.txt. Exit status: bench/cuda_gates.py's (1: a resource gate
# failed), or 2 when an input is missing.
#   needs: python3; for the SASS count, nvdisasm (found, with cuobjdump, or
#   fetched from PyPI by bench/sass_tools.sh; without them that part is
#   skipped with a message, and the resource gates still run)
set -euo pipefail
cd "$(dirname "$0")/.."
G=${B:-build}/gates
for f in "$G/ptxas.sm_80.log" "$G/ptxas.sm_90.log" "$G/kvq_cuda.sm_90.cubin"; do
    [ -f "$f" ] || { echo "cuda_gates.sh: $f is missing: run make cuda-gates" >&2; exit 2; }
done
# anything nvcc or ptxas said besides the resource lines (warnings)
for a in 80 90; do
    if grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$G/ptxas.sm_$a.log" | grep -q .; then
        echo "nvcc/ptxas sm_$a said:"; grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$G/ptxas.sm_$a.log"
    fi
done
args=(--source kvq_cuda.cu --known bench/cuda_gates_known.txt
      --ptxas "sm_80=$G/ptxas.sm_80.log" --ptxas "sm_90=$G/ptxas.sm_90.log")
sass_ok=0
if tools=$(bash bench/sass_tools.sh); then
    sass_ok=1
    for c in kvq_cuda mma_probe sass_probe; do   # -gi: source lines, inlining included
        [ -f "$G/$c.sm_90.cubin" ] || { echo "cuda_gates.sh: $G/$c.sm_90.cubin is missing: run make cuda-gates" >&2; exit 2; }
        "$tools/nvdisasm" -gi -c "$G/$c.sm_90.cubin" > "$G/$c.sm_90.sass" ||
            { echo "cuda_gates.sh: nvdisasm failed on $G/$c.sm_90.cubin"; sass_ok=0; }
    done
fi
if [ "$sass_ok" = 1 ]; then
    args+=(--sass "$G/kvq_cuda.sm_90.sass" --probe "$G/mma_probe.sm_90.sass"
           --cuda-core "$G/sass_probe.sm_90.sass")
else
    echo "cuda_gates.sh: SKIP the SASS count (no working nvdisasm; see above); the resource gates still run"
fi
python3 bench/cuda_gates.py "${args[@]}" | tee "$G/gates.txt"
