#!/usr/bin/env sh
# tests/emu/bank_gate.sh FILE - the shared-memory bank gate (issue 46).
# FILE: the emulator's bank report (KVQ_EMU_BANKS=FILE on the race build;
# kvq_emu.cpp Sec. 6 defines requests, wavefronts and the ideal). Every
# tensor-core (v5) kernel with the integer decode (the default, every
# routed call: kvq_attend_mma_kernel's sixth template argument, DEC, 0)
# must stay at or below LIMIT (1.1) wavefronts per request, in units of
# the least its access widths allow (4-byte accesses: wavefronts per
# request). The f16-decode variants (DEC 1, 2) are printed, not gated:
# their per-group value (s, z) reads are still 4-way conflicts.
# Prints "bank gate: PASS|FAIL ..." and exits 1 on FAIL.
f=${1:?usage: bank_gate.sh FILE}
LIMIT=${LIMIT:-1.1}
[ -s "$f" ] || { echo "bank gate: FAIL, no bank report in $f"; exit 1; }
awk -v lim="$LIMIT" '
/^banks .*kvq_attend_mma_kernel</ {
    r = $2 + 0
    k = $0; sub(/.*kvq_attend_mma_kernel</, "", k); sub(/>.*/, "", k)
    split(k, a, /, */)
    dec = a[6] + 0
    if (dec == 0) { n++; if (r > worst) { worst = r; wk = k } if (r > lim) { bad++; print "  over " lim ": " r " kvq_attend_mma_kernel<" k ">" } }
    else { m++; if (r > fworst) fworst = r }
}
END {
    if (n == 0) { print "bank gate: FAIL, no v5 kernel with the integer decode ran"; exit 1 }
    printf "bank gate: %s, %d v5 kernels (integer decode): worst %.3f wavefronts/ideal (<%s>), limit %s; f16-decode variants (not gated): %d, worst %.3f\n", bad ? "FAIL" : "PASS", n, worst, wk, lim, m, fworst
    exit bad ? 1 : 0
}' "$f"
