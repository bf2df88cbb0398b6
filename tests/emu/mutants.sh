#!/usr/bin/env sh
# tests/emu/mutants.sh - planted bugs in kvq_cuda.cu that the emulator must
# catch. Each mutant is kvq_cuda.cu with one exact text replaced (the text
# must occur exactly once, so a mutant cannot silently stop applying), built
# into build/emu-mut/NAME/ with the build named, and run on test_gpu in
# quick mode. It passes when the run FAILS and its output names the
# expected symptom (a failed CHECK, or the emulator's or ASan's report).
# Prints "emu mutants: N passed, M failed". KVQ_MUTANTS="NAME ..." runs only
# the mutants named (each needs its build's test_gpu.o and kvq_emu.o).
set -u
B=${B:-build}
CXX=${EMU_CXX:-g++}
FLAGS=${EMU_FLAGS:--std=c++17 -g -Wno-unknown-pragmas -fno-strict-aliasing -Itests/emu -I. -Itests}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# The mutants' kernels are built at -O0 and without debug info (-g). The
# compile of kvq_cuda.cu is the bulk of a mutant's time (g++ -O1: ~44 s,
# -O0: ~13 s on a 2.5 GHz Zen 1), while a quick run spends most of its
# time in the emulator (kvq_emu.o, built optimized), so the -O0 kernels
# run only ~1.3x slower. Nothing here reads debug info: each verdict is a
# message of test_gpu, the emulator or ASan.
MFLAGS=$(printf ' %s ' "$FLAGS" | sed 's/ -g / /g')
mkdir -p "$B/emu-mut"
names=""
only=${KVQ_MUTANTS:-}
# at most JOBS mutants at once (each compile holds ~0.4 GB)
JOBS=${MUTANT_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
started=0
rm -f "$B/emu-mut/"*.ok

# mutant NAME BUILD[/GROUPS] EXPECT OLD NEW: starts one mutant in the
# background; its report goes to build/emu-mut/NAME.out and its verdict
# (1 caught, 0 not) to NAME.ok
#   BUILD: plain, asan (ASan + UBSan) or race (-fsanitize=thread hooks);
#          banks: race with the bank model on, then the bank gate
#          (tests/emu/bank_gate.sh) on its report
#   GROUPS: test_gpu's groups to run (KVQ_TEST_ONLY), those whose checks
#           cover the mutated code; every group when left out
#   EXPECT: an extended regex the failing run's output must match
mutant() {
    if [ -n "$only" ]; then case " $only " in *" $1 "*) ;; *) return 0 ;; esac; fi
    names="$names $1"
    while [ $((started - $(ls "$B/emu-mut" | grep -c '\.ok$'))) -ge "$JOBS" ]; do sleep 1; done
    started=$((started + 1))
    ( pass=0; fail=0; mutant_job "$@"; echo "$pass" > "$B/emu-mut/$1.ok.part"
      mv "$B/emu-mut/$1.ok.part" "$B/emu-mut/$1.ok" ) > "$B/emu-mut/$1.out" 2>&1 &
}
mutant_job() {
    name=$1 build=${2%%/*} expect=$3 old=$4 new=$5
    groups=""; case $2 in */*) groups=${2#*/} ;; esac
    dir=$B/emu-mut/$name
    mkdir -p "$dir"
    if ! OLD=$old NEW=$new python3 - kvq_cuda.cu "$dir/kvq_cuda.cu" <<'EOF'
import os, sys
src = open(sys.argv[1]).read()
old, new = os.environ["OLD"], os.environ["NEW"]
n = src.count(old)
if n != 1:
    sys.exit("the text to replace occurs %d times (must be once): %r" % (n, old))
open(sys.argv[2], "w").write(src.replace(old, new))
EOF
    then echo "FAIL mutant $name: does not apply"; fail=$((fail + 1)); return; fi
    case $build in
        asan) bf="-O0 $SAN"; lf="$SAN"; tu="" ;;
        race|banks) bf="-O0"; lf=""; tu="-fsanitize=thread" ;;
        *)    bf="-O0"; lf=""; tu="" ;;
    esac
    # the mutant's kernels, linked with the unmutated test and runtime of
    # the same build (test_gpu.cu declares kvq_cuda.cu's API only)
    ref=$B/emu-$build; [ "$build" = plain ] && ref=$B/emu; [ "$build" = banks ] && ref=$B/emu-race
    # banks: with debug info, by which the bank report names the kernels
    mf=$MFLAGS; [ "$build" = banks ] && mf=$FLAGS
    if ! $CXX $mf $bf $tu -x c++ -c "$dir/kvq_cuda.cu" -o "$dir/kvq_cuda.o" 2>"$dir/build.log" ||
       ! $CXX $lf -o "$dir/test_gpu" "$ref/test_gpu.o" "$dir/kvq_cuda.o" "$ref/kvq_emu.o" -lm 2>>"$dir/build.log"; then
        echo "FAIL mutant $name: does not build"; tail -n 5 "$dir/build.log"; fail=$((fail + 1)); return
    fi
    # quick sizes, the mutant's groups only, stopped at the first failed
    # check (one symptom is the verdict; the emulator's and ASan's reports
    # stop the run by themselves)
    # banks: the bank model on (the groups must be the v5 groups the bank
    # gate's known ratios were measured on), then the bank gate
    rm -f "$dir/banks.txt"
    bank_env=""; [ "$build" = banks ] && bank_env="KVQ_EMU_BANKS=$dir/banks.txt"
    if [ -n "$groups" ]; then
        env $bank_env KVQ_TEST_ONLY=$groups KVQ_TEST_QUICK=1 KVQ_TEST_FAIL_FAST=1 "$dir/test_gpu" --kernels > "$dir/run.log" 2>&1; rc=$?
    else
        env $bank_env KVQ_TEST_QUICK=1 KVQ_TEST_FAIL_FAST=1 "$dir/test_gpu" --kernels > "$dir/run.log" 2>&1; rc=$?
    fi
    if [ "$build" = banks ] && [ "$rc" -eq 0 ]; then
        sh tests/emu/bank_gate.sh "$dir/banks.txt" >> "$dir/run.log" 2>&1; rc=$?
    fi
    if [ "$rc" -eq 0 ]; then
        echo "FAIL mutant $name ($build): test_gpu passed with the bug planted"; fail=$((fail + 1))
    elif ! grep -Eq "$expect" "$dir/run.log"; then
        echo "FAIL mutant $name ($build): failed (exit $rc), but not with /$expect/:"
        grep -E 'FAIL|kvq_emu|ERROR' "$dir/run.log" | head -n 3; fail=$((fail + 1))
    else
        printf 'caught  %-26s %-6s %s\n' "$name" "$build" \
            "$(grep -Em1 "$expect" "$dir/run.log" | cut -c1-150)"
        pass=$((pass + 1))
    fi
}

# 1. an index off by one: each lane reads its neighbour's key word
mutant index-off-by-one plain/attend 'rows over tolerance' \
    'x[c] = kw[(c0 + c) * 32 + lane];' \
    'x[c] = kw[(c0 + c) * 32 + (lane + 1) % 32];'
# 2. the barrier between writing the queries to shared memory and reading them
mutant no-syncthreads race/attend 'no thread of the block has written|race on shared' \
    '    __syncthreads();
    float qf[NH][CPL];' \
    '    float qf[NH][CPL];'
# 3. the staged tile read before its cp.async has landed
mutant no-cp-async-wait race/attend 'still in flight' \
    '            kvq_dev_cp_wait<1>();          /* this item has landed      */' \
    ''
# 4. a shuffle that reads the wrong lane in the warp sum
mutant wrong-shuffle-lane plain/attend 'rows over tolerance' \
    'for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);' \
    'for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m ^ 1);'
# 5. the launch asks for 16 bytes less dynamic shared memory than it stages
mutant dynamic-smem-overrun asan/attend 'outside the block.s shared memory|heap-buffer-overflow' \
    'KVQ_CUDA_LAUNCH(fn, grid, KVQ_CUDA_WARPS * 32, stage_bytes, stream)' \
    'KVQ_CUDA_LAUNCH(fn, grid, KVQ_CUDA_WARPS * 32, stage_bytes - 16, stream)'
# 6. the last query element is never written to shared memory
mutant uninitialized-shared plain/attend 'rows over tolerance|kvq_cuda_status: a kernel found|status sequence' \
    'for (int i = threadIdx.x; i < NH * D; i += blockDim.x) {' \
    'for (int i = threadIdx.x; i < NH * D - 1; i += blockDim.x) {'
# 7. every thread, not one, clears the flag: a write-write race that the
#    thread order alone never shows (all write the same 0)
mutant shared-race race/attend 'race on shared memory .q_bad' \
    '    if (threadIdx.x == 0) q_bad = 0;' \
    '    q_bad = 0;'
# the tensor-core kernel (Sec. 8):
# 8. a lane reads its neighbour's fragment-order key words
mutant mma-fragment-index plain/mma 'mma.*rows over tolerance' \
    'auto w = [&](int k) { return kwc[kvq_mma_word_at<S::KPL, U, SW>(rt, lane, k)]; };' \
    'auto w = [&](int k) { return kwc[kvq_mma_word_at<S::KPL, U, SW>(rt, lane ^ 1, k)]; };'
# 9. the keys' power-of-two exponent off by one
mutant mma-exponent plain/mma 'mma.*rows over tolerance' \
    'inv = ldexpf(1.0f, -__shfl_sync(0xffffffffu, e, 8 * tig));' \
    'inv = ldexpf(1.0f, 1 - __shfl_sync(0xffffffffu, e, 8 * tig));'
# 10. the score hand-off takes the wrong lane's score
mutant mma-handoff-lane plain/mma 'mma.*rows over tolerance' \
    'w[i] = __shfl_sync(0xffffffffu, pair[q][rt][i >> 1], src);' \
    'w[i] = __shfl_sync(0xffffffffu, pair[q][rt][i >> 1], src ^ 4);'
# 11. the staged chunk read before its cp.async group has landed
mutant mma-no-cp-async-wait race/mma 'still in flight' \
    '        kvq_dev_cp_wait<STAGES - 1>();     /* chunk j has landed          */' \
    ''
# 11b. three stages wait for one group too few: chunk j + 1's group, not
#     chunk j's, is the one left pending (only the 3-stage kernel differs)
mutant mma-stages3-wait-off-by-one race/mma 'still in flight' \
    '        kvq_dev_cp_wait<STAGES - 1>();     /* chunk j has landed          */' \
    '        kvq_dev_cp_wait<STAGES == 3 ? STAGES : STAGES - 1>();'
# the rotation (Sec. 2.1):
# 12. the butterfly stages in the other order (the same H, other roundings)
mutant rotate-stage-order plain/rotate 'differ from kvq_rotate' \
    'for (unsigned h = 1; hadamard && h < D; h *= 2) {' \
    'for (unsigned h = D / 2; hadamard && h >= 1; h /= 2) {'
# 13. the sign vector drawn from splitmix64's outputs one index early
mutant rotate-sign-index plain/rotate 'differ from kvq_rotate' \
    'uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;' \
    'uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;'
# 14. no barrier between two butterfly stages
mutant rotate-no-stage-sync race/rotate 'no thread of the block has written|race on shared' \
    '            __syncthreads();
            for (unsigned p = tid; p < D / 2; p += blockDim.x) {' \
    '            for (unsigned p = tid; p < D / 2; p += blockDim.x) {'
# the pool's basis around attention (Sec. 4, kvq.h Sec. 6.1's kvq_attend):
# 15. the output rotated forward again instead of back
mutant rotate-output-forward plain/rotate,mma 'rotated attend \(pool\).*over tolerance|mma.*rows over tolerance' \
    'return kvq_cuda__rotate_launch(pool->value_rotation, pool->rotation_seed, (size_t)D, 1, d_out,' \
    'return kvq_cuda__rotate_launch(pool->value_rotation, pool->rotation_seed, (size_t)D, 0, d_out,'
# 16. q rotated by the value side's kind instead of the key side's
mutant rotate-query-side plain/rotate,mma 'rotated attend \(pool\).*over tolerance|mma.*rows over tolerance' \
    'return kvq_cuda__rotate_launch(pool->key_rotation, pool->rotation_seed, (size_t)D, 0, d_q,' \
    'return kvq_cuda__rotate_launch(pool->value_rotation, pool->rotation_seed, (size_t)D, 0, d_q,'
# the tensor-core kernel's value weights and softmax:
# 17. 2^-e of a value group off by one (2^e from bits, 2^-e not its inverse)
mutant mma-value-pow2 plain/mma 'mma.*rows over tolerance' \
    '*pow_minus_e = kvq_mma_pow2i(-e);' \
    '*pow_minus_e = kvq_mma_pow2i(1 - e);'
# 18. the running max's rescale skipped when the max moved by less than 1
mutant mma-rescale-skipped plain/mma 'mma.*rows over tolerance' \
    'if (__any_sync(0xffffffffu, m_new != st.m[q])) {' \
    'if (__any_sync(0xffffffffu, m_new > st.m[q] + 1.0f)) {'
# quantizing straight into fragment order (Sec. 8, kvq_cuda_quantize_sealed):
# 19. every page written to its input index instead of its pool page
mutant sealed-quantize-page plain/quantize-sealed,quantize-stream 'sealed (quantize|export).*differ' \
    'const size_t page = pages ? (size_t)pages[i] : i;' \
    'const size_t page = i;'
# 20. the value groups' codes staged one word apart (kvq.h's order broken
#     before the permutation: the scales stay right, the codes do not)
mutant sealed-quantize-value-words plain/quantize-sealed,quantize-stream 'sealed (quantize|export).*differ' \
    'buf + n + g * qv.geom.words_per_group);' \
    'buf + n + (g ^ 1) * qv.geom.words_per_group);'
# compaction of sealed pages (Sec. 5, kvq_cuda_move_pages):
# 21. a page moved without its value scales and zeros
mutant move-pages-part plain/compaction,compact-pages 'compact.*(differ|over tolerance)' \
    '    for (int i = 0; i < 4; i++) {          /* one stream: temp is reused in order */' \
    '    for (int i = 0; i < 3; i++) {'
# each weight made once, by the lane holding its score or half of a page's:
# 22. a value weight handed over from the other row half's score
mutant mma-value-pair-half plain/mma 'mma.*rows over tolerance' \
    'w[i] = __shfl_sync(0xffffffffu, pair[q][rt][i >> 1], src);' \
    'w[i] = __shfl_sync(0xffffffffu, pair[q][rt][(i >> 1) ^ 1], src);'
# 23. the key weights traded with the wrong partner (another tig's rows)
mutant mma-key-pair-partner plain/mma 'mma.*rows over tolerance' \
    '__byte_perm(pair[0], pair[1], theirs), 4);' \
    '__byte_perm(pair[0], pair[1], theirs), 2);'
# the integer decode (v5's default, Sec. 7 and 8):
# 24. a key weight paired with the wrong channel of its 32-wide step
mutant mma-i8-channel plain/mma 'mma.*rows over tolerance' \
    'const int d = 32 * ks + kvq_mma_i8_index(B, 4 * tig + b + 16 * odd);' \
    'const int d = 32 * ks + kvq_mma_i8_index(B, 4 * tig + (b ^ 1) + 16 * odd);'
# 25. the pair trades the digit it keeps instead of the one its partner needs
mutant mma-i8-digit-trade plain/mma 'mma.*rows over tolerance' \
    'got = __shfl_xor_sync(0xffffffffu, odd ? d0 : d1, 4);' \
    'got = __shfl_xor_sync(0xffffffffu, odd ? d1 : d0, 4);'
# 26. a value weight's bytes taken from the next head's lane
mutant mma-i8-value-lane plain/mma 'mma.*rows over tolerance' \
    'src0 = 8 * tig + gid / 2, src1 = src0 + 4;' \
    'src0 = 8 * tig + (gid / 2 + 1) % 4, src1 = src0 + 4;'
# 27. rows 8-15's factor 2^B taken back as 2^(B+1)
mutant mma-i8-row-factor plain/mma 'mma.*rows over tolerance' \
    ': DEC == KVQ_MMA_DEC_INT8 && half ? 1.0f / (float)(1 << B)' \
    ': DEC == KVQ_MMA_DEC_INT8 && half ? 1.0f / (float)(2 << B)'
# v5's default staging: the page's parameters and the dead-slot word read ahead
# 28. the dead-slot word read a chunk ahead never used: dead slots attended
mutant mma-prefetch-dead-dropped plain/mma 'mma.*rows over tolerance' \
    'uint32_t dead_bits = dead_now;' \
    'uint32_t dead_bits = 0u;'
# 29. no barrier between the last warp's reads of its stages and the
#     warps' accumulators written over the same shared memory
mutant mma-accumulators-no-sync race/mma 'no thread of the block has written|race on shared|still in flight' \
    '    __syncthreads();                          /* the stages are free now    */' \
    ''
# 30. the next page's number read from the current page's entry
mutant mma-prefetch-page-current plain/mma 'mma.*rows over tolerance' \
    'next_page = next < wk.n_items ? pages[wk.page_index(next, warp)] : 0;' \
    'next_page = next < wk.n_items ? pages[wk.page_index(j, warp)] : 0;'
# the streaming quantize (Sec. 2, kvq_quantize_stream_kernel):
# 31. a per-token group spread over two or four lanes takes half of them
mutant quantize-stream-lanes plain/quantize-stream 'quantize.*(other codes|status)' \
    'if (LANES > 1) kvq_dev_group_lanes(&lo[0], &hi[0], &ok[0], LANES);' \
    'if (LANES > 1) kvq_dev_group_lanes(&lo[0], &hi[0], &ok[0], LANES / 2);'
# 32. the validation pass of the per-channel layout blind to NaN and Inf
mutant quantize-stream-nonfinite plain/quantize-stream 'quantize.*(status|wrote)' \
    '        if (!WRITE) ok = ok && kvq_dev_finite8(raw[k]);' \
    ''
# 33. a per-channel word's codes one row apart (row k's code at k + 1)
mutant quantize-stream-column-shift plain/quantize-stream 'quantize.*other codes' \
    'word |= kvq_dev_code(f, s, r, z, n_levels, mode) << (k * B);' \
    'word |= kvq_dev_code(f, s, r, z, n_levels, mode) << (((k + 1) % PER) * B);'
# 34. the streaming sealed quantize writes page i to pool page i
mutant sealed-stream-page plain/quantize-sealed,quantize-stream 'sealed (quantize|export).*differ' \
    'const size_t i = blockIdx.x, page = pages ? (size_t)pages[i] : i, lane = threadIdx.x % 32;' \
    'const size_t i = blockIdx.x, page = i, lane = threadIdx.x % 32;'
# the values' integer C kept over runs of chunks (kvq_mma_valc; the
# default kernel at G >= 64):
# 35. the running max moved inside a run: C not flushed at the old max
#     before the softmax rescales
mutant mma-valc-no-flush-before-rescale plain/mma 'mma.*rows over tolerance' \
    '        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);' \
    '        if constexpr (PC && !FRESH) {}'
# 36. that flush converts C but does not clear it: counted twice
mutant mma-valc-flush-keeps-c plain/mma 'mma.*rows over tolerance' \
    '        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);' \
    '        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, false>(vc, st);'
# 37. a later chunk's larger value scales never move the run's exponent
#     (its weights overflow their digits)
mutant mma-valc-no-exponent-switch plain/mma 'mma.*rows over tolerance' \
    '        if (__any_sync(0xffffffffu, amax >= a_lim)) too_big(amax);' \
    '        if (false) too_big(amax);'
# 38. the exponent moved without flushing C at the old one
mutant mma-valc-switch-without-flush plain/mma 'mma.*rows over tolerance' \
    '            kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);
#pragma unroll
            for (int k = 1; k < 32; k <<= 1) amax' \
    '#pragma unroll
            for (int k = 1; k < 32; k <<= 1) amax'
# 39. a run never flushed at its page's last chunk: the next page's
#     first takes a fresh C over it
mutant mma-valc-run-never-ends plain/mma 'mma.*rows over tolerance' \
    '        if (chunk == last) kvq_mma_run_end<D, B, NQ, HILO>(vc, st);' \
    '        if (chunk == last && last < 0) kvq_mma_run_end<D, B, NQ, HILO>(vc, st);'
# 40. two stages rotated wrong: the stage just filled is filled again, with
#     chunk j + 2, while chunk j + 1's copy into it is still in flight (the
#     emulator once landed them in issue order, so the reads were right)
mutant mma-stages2-rotation plain/mma 'still in flight to it' \
    '        fill_at = read_at;' \
    '        fill_at = STAGES == 2 ? next_read : read_at;'
# 41. the warps' sums stored without their swizzle, read with it (the
#     stores' XOR dropped: each head's channels land in another's order)
mutant mma-acc-swizzle plain/mma 'mma.*rows over tolerance' \
    '            red_acc[warp][kvq_dev_acc_at<D, 1>(h, 16 * mt + gid)] = st.acc[qd][mt][0];' \
    '            red_acc[warp][kvq_dev_acc_at<D, 0>(h, 16 * mt + gid)] = st.acc[qd][mt][0];'
# 42. the swizzle dropped from stores and reads alike: the same outputs,
#     4-way bank conflicts at the sums' stores, which only the bank gate
#     sees (a known ratio grown)
mutant mma-acc-no-swizzle banks/mma,rotate,compact-pages 'bank gate: FAIL' \
    '    return h * D + (SWZ ? c ^ (8 * (h & 3)) : c);' \
    '    return h * D + c;'
# the v5 stage's unit-major layout (issue 46): each lane's copies take
#     the first block's words for every block (the keys' second row tile,
#     the 4-bit values' second token block)
mutant mma-stage-units plain/mma 'mma.*rows over tolerance' \
    '        kvq_mma_cp_unit<U>(d + 32 * U * i, s + (i / (W / U)) * 32 * W + (i % (W / U)) * U);' \
    '        kvq_mma_cp_unit<U>(d + 32 * U * i, s + (i % (W / U)) * U);'
# the query rows' XOR dropped from their stores and reads alike: the same
#     outputs, 4-way conflicts at the page's key weights (kvq_mma_q_at),
#     which only the bank gate sees
mutant mma-q-no-swizzle banks/mma,rotate,compact-pages 'bank gate: FAIL' \
    '    return h * D + (d ^ ((h & 1) | (B == 2 ? 16 : 8) * ((h >> 1) & 1)));' \
    '    return h * D + d;'
# the attention calls' status word (issue 46, no memset): the first kernel
# does not zero it, so a word left by an earlier call (or cudaMalloc's
# poison) is read as this call's status
mutant status-no-reset plain/attend,mma 'not a kvq_status|status sequence' \
    'threadIdx.x == 0) *status = 0;' \
    'threadIdx.x == 0) *status = *status;'
# the quantizer's division (issue 46, item 5): the reciprocal's product
# without its fma correction (within 1.5 ulp of IEEE division): some codes
# differ from kvq.h's
mutant div-no-correction plain/quantize,quantize-stream,quantize-sealed 'units with other codes|other codes' \
    '    return fmaf(e, r, q);' \
    '    return q + 0.0f * e;'
# the streaming quantizer's second item in flight: the next item's loads
# not handed over, so a thread's second item is coded from its first's
mutant stream-prefetch-stale plain/quantize,quantize-stream 'units with other codes|other codes' \
    '        for (int i = 0; i < NR; i++) cur[i] = next[i];' \
    '        for (int i = 0; i < NR; i++) cur[i] = cur[i];'
# the fork of kvq_cuda_attend_mma (issue 46, item 1): Sec. 4's kernel on
# the second stream without the join before the combine; the emulator
# runs a created stream's work only when something waits for it, so the
# combine reads splits not yet written
mutant mma-no-join plain/mma 'status sequence|rows over tolerance|NaN' \
    '        KVQ_CUDA_CHECK(cudaStreamWaitEvent(stream, side->join, 0));' \
    '        (void)0;'

# the token layout (kvq.h Sec. 4.1's formats, kvq_dev_token_decode):
# 43. a packed parameter read one bit high (kvq__group_ab's unpack)
mutant fmt-param-unpack plain/attend-format 'attend-format.*over 1e-04' \
    'if (P < 32) word = (word >> (g * P % 32)) & ((1u << P) - 1u);' \
    'if (P < 32) word = (word >> (g * P % 32 + 1)) & ((1u << P) - 1u);'
# 44. the value table read one entry off: value(c + 1)
mutant fmt-value-off-by-one plain/attend-format 'attend-format.*over 1e-04' \
    '__ldg(f.value + kvq_dev_get_bits(' \
    '__ldg(f.value + 1 + kvq_dev_get_bits('
# 45. the keys decoded with the value side's scale (equal for fp8-e4m3's
#     1.0, not for nvfp4's data-driven scales)
mutant fmt-side-scale plain/attend-format 'attend-format.*over 1e-04' \
    'src.k_scale = tok.scales[2 * stream_id];' \
    'src.k_scale = tok.scales[2 * stream_id + 1];'
# 46. B = 3's codes that straddle two words lose their high bits
mutant fmt-straddle plain/attend-format 'attend-format.*over 1e-04' \
    'if (bit % 32 + (uint32_t)bits > 32) v |=' \
    'if (false) v |='
# 47. NVFP4's block scale decoded as E5M2 instead of E4M3
mutant fmt-nvfp4-block-scale plain/attend-format 'attend-format.*over 1e-04' \
    'kvq_dev_grid(0)) * side_scale;   /* E4M3 */' \
    'kvq_dev_grid(1)) * side_scale;   /* E4M3 */'
# 48. the token's parameter words at an even stride: a token of one word
#     (int8 per token-head at G = D, nvfp4 at D = 64) reads its neighbour's
mutant fmt-param-stride plain/attend-format 'attend-format.*over 1e-04' \
    'kvq_dev_group_ab(f, side_scale, mode, sz + at * kvq_cuda__tok_params(f, D), g, &a, &b);' \
    'kvq_dev_group_ab(f, side_scale, mode, sz + at * kvq_cuda__tok_params(f, D) / 2 * 2, g, &a, &b);'

# the FP8 conversion (kvq_cuda.cu Sec. 2.2, test_gpu group fp8-cvt):
# 49. the software rounding's ties away from zero instead of to even
mutant fp8-ties-away plain/fp8-cvt,quantize-format 'fp8-cvt.*differ|other codes' \
    'q += rem > half || (rem == half && (q & 1u));' \
    'q += rem >= half;'
# 50. the instruction's result read from the wrong half (b's code, 0)
mutant fp8-cvt-half plain/fp8-cvt 'fp8-cvt.*differ' \
    'return (uint32_t)kvq_emu::cvt_rn_satfinite_f8x2(x, 0.0f, e5m2) >> 8;' \
    'return (uint32_t)kvq_emu::cvt_rn_satfinite_f8x2(x, 0.0f, e5m2) & 0xFFu;'

wait
pass=0; fail=0
for n in $names; do
    cat "$B/emu-mut/$n.out"
    if [ "$(cat "$B/emu-mut/$n.ok" 2>/dev/null)" = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "emu mutants: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
