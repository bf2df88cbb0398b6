#!/usr/bin/env sh
# tests/emu/bank_gate.sh FILE - the shared-memory bank gate (issue 46).
# FILE: the emulator's bank report (KVQ_EMU_BANKS=FILE on the race build;
# kvq_emu.cpp Sec. 6 defines requests, wavefronts and the ideal). Every
# tensor-core (v5) kernel with the integer decode (the default, every
# routed call: kvq_attend_mma_kernel's sixth template argument, DEC, 0)
# must stay at or below LIMIT (1.1) wavefronts per request, in units of
# the least its access widths allow (4-byte accesses: wavefronts per
# request), or, when tests/emu/bank_known.txt lists it, at or below its
# listed ratio (a known conflict may not grow; remove its line when it is
# fixed). The f16-decode variants (DEC 1, 2) are printed, not gated.
# Prints "bank gate: PASS|FAIL ..." and exits 1 on FAIL.
f=${1:?usage: bank_gate.sh FILE}
LIMIT=${LIMIT:-1.1}
KNOWN=${KNOWN:-$(dirname "$0")/bank_known.txt}
[ -s "$f" ] || { echo "bank gate: FAIL, no bank report in $f"; exit 1; }
awk -v lim="$LIMIT" -v known="$KNOWN" '
BEGIN {
    while ((getline line < known) > 0) {
        if (line ~ /^#/ || line !~ /\|/) continue
        split(line, a, /[ ]*\|[ ]*/); k = a[1]; sub(/^[ ]+/, "", k); kn[k] = a[2] + 0
    }
}
/^banks .*kvq_attend_mma_kernel</ {
    r = $2 + 0
    k = $0; sub(/.*kvq_attend_mma_kernel</, "", k); sub(/>.*/, "", k)
    split(k, a, /, */)
    if (a[6] + 0 != 0) { m++; if (r > fworst) fworst = r; next }
    n++
    if (r > worst) { worst = r; wk = k }
    cap = (k in kn) ? kn[k] + 0.005 : lim
    if (r > cap) { bad++; printf "  over %s: %.4f <%s>%s\n", (k in kn) ? "its known " kn[k] : lim, r, k, (k in kn) ? " (grew)" : "" }
    else if (r > lim) nk++
    else if (k in kn) { fixed++; printf "  fixed: <%s> %.4f, known %s (remove its line from %s)\n", k, r, kn[k], known }
}
END {
    if (n == 0) { print "bank gate: FAIL, no v5 kernel with the integer decode ran"; exit 1 }
    printf "bank gate: %s, %d v5 kernels (integer decode): worst %.3f wavefronts/ideal (<%s>), limit %s; %d over it as known (not grown); f16-decode variants (not gated): %d, worst %.3f\n", bad ? "FAIL" : "PASS", n, worst, wk, lim, nk, m, fworst
    exit bad ? 1 : 0
}' "$f"
