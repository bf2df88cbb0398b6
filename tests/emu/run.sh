#!/usr/bin/env sh
# tests/emu/run.sh - make test-cuda-emu: kvq_cuda.cu's kernels on the CPU.
# Every run prints "NAME: N passed, M failed"; the last line is the total,
# and the exit status is non-zero if anything failed. TOTALS (optional): a
# file to which "N M" is appended, for tests/test_all.sh.
#   --quick   make test-cuda-emu-quick: one build ($B/emu-quick, the
#             kernels at -O0), test_gpu's kernel cases at quick sizes; no
#             other build, no planted bugs (the full pass has them)
set -u
B=${B:-build}
pass=0; fail=0
quick=0
[ "${1:-}" = "--quick" ] && quick=1

# run LABEL ENV... -- BINARY: one binary under the environment given
run() {
    label=$1; shift
    envs=""
    while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
    shift
    echo "--- $label"
    t=$(date +%s)
    out=$(env $envs "$@" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^  ' | tail -n 25
    echo "    ($(( $(date +%s) - t )) s)"
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/p')
    f=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/p')
    p=${p:-0}; f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$label: exit $rc"; f=1; fi
    pass=$((pass + p)); fail=$((fail + f))
}

t0=$(date +%s)
if [ "$quick" = 1 ]; then
    run "test_gpu on the emulator: every kernel group, quick sizes (kernels at -O0)" \
        KVQ_TEST_QUICK=1 -- "$B/emu-quick/test_gpu" --kernels
    echo "test-cuda-emu-quick: $pass passed, $fail failed ($(( $(date +%s) - t0 )) s)"
    [ -n "${TOTALS:-}" ] && echo "$pass $fail" >> "$TOTALS"
    [ "$fail" -eq 0 ]
    exit
fi
run "the emulator's own checks (gcc -O2)" -- "$B/emu/test_emu"
run "the emulator's own checks, race build, random thread order (seed 1)" \
    KVQ_EMU_SEED=1 -- "$B/emu-race/test_emu"
run "the emulator's own checks, ASan + UBSan" -- "$B/emu-asan/test_emu"
echo "--- watch_warp: one KIVI-2 cache, the kernel against kvq_attend"
if "$B/emu/watch_warp"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
run "test_gpu on the emulator: gcc -O2, every case" -- "$B/emu/test_gpu"
# the other builds run the kernel checks only (the host checks above do not
# depend on the build), at quick sizes (every kernel and variant; the gcc
# build above runs the full sizes)
if [ -x "$B/emu-clang/test_gpu" ]; then
    run "test_gpu on the emulator: clang -O2, every kernel case (quick)" \
        KVQ_TEST_QUICK=1 -- "$B/emu-clang/test_gpu" --kernels
else
    echo "--- clang++ not found: the clang build is skipped (apt-get install clang)"
fi
# the tensor-core key step (bench/mma_probe.cu, kvq_cuda.cu Sec. 7) in each
# accumulation model: every shape must validate; the subnormal decode is
# exact only while fp16 subnormal inputs are kept
probe() {   # probe LABEL WANT ENV...: mma_probe --validate must exit 0 and print WANT
    label=$1 want=$2; shift 2
    echo "--- $label"
    out=$(env "$@" "$B/emu/mma_probe" --validate 2>&1); rc=$?
    printf '%s\n' "$out" | tail -n 2
    if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q "$want"; then pass=$((pass + 1))
    else echo "$label: exit $rc, or no \"$want\""; fail=$((fail + 1)); fi
}
probe "mma_probe --validate: exact MMA, subnormals kept" "subnormal decode: exact" KVQ_EMU_MMA=exact
probe "mma_probe --validate: truncating MMA" "subnormal decode: exact" KVQ_EMU_MMA=trunc
probe "mma_probe --validate: subnormal inputs flushed" "subnormal decode: NOT exact" KVQ_EMU_SUBNORMAL=flush
# bench/mma_selftest.cu, the GPU campaign's MMA self-test, must report the
# model the emulator was told to use, for each accumulation model and
# subnormal rule (its fragment maps are kvq_cuda.cu's). align:16:2:rz:esum
# is the model whose counts the H200 gave (tests/emu/mma_model.h)
H200_MMA=align:16:2:rz:esum
for m in exact trunc $H200_MMA; do
    for s in keep flush; do
        run "mma_selftest: KVQ_EMU_MMA=$m KVQ_EMU_SUBNORMAL=$s reported as such" \
            KVQ_EMU_MMA=$m KVQ_EMU_SUBNORMAL=$s -- "$B/emu/mma_selftest" --expect "$m,$s"
    done
done
# a KVQ_EMU_MMA the family cannot spell is refused at the first launch,
# never run as some other model
for bad in align:5:0:rz align:8:21:rz align:8:0:rq align:8:0:rz:esum:sep align:8 exactly; do
    out=$(KVQ_EMU_MMA=$bad "$B/emu/mma_selftest" 2>&1); rc=$?
    if [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -q "KVQ_EMU_MMA=$bad: use"; then pass=$((pass + 1))
    else echo "KVQ_EMU_MMA=$bad: exit $rc, not refused"; fail=$((fail + 1)); fi
done
# the GPU campaign's benchmark path (bench_gpu --kernels: the pages sealed
# into a copy, kvq_cuda_attend_mma's workspace and call, the float64 check
# before timing) on one small shape: every kernel valid, none refused
echo "--- bench_gpu --kernels on the emulator: today's kernel and ten v5 variants valid"
out=$("$B/emu/bench_gpu" --kernels fused,v5,v5:hi,v5:direct,v5:s3,v5:sub,v5:nopf,v5:2w,v5:nopf+2w,v5:occ5,v5:magic+occ5 \
      --shape 2,32,4,2,512 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 12
if [ "$rc" -eq 0 ] && ! printf '%s\n' "$out" | grep -qE 'INVALID|refused'; then pass=$((pass + 1))
else echo "bench_gpu --kernels: exit $rc, or a kernel INVALID or refused"; fail=$((fail + 1)); fi
# the formats' benchmark path (bench_gpu --formats, the campaign's formats
# step) at its quick size: every kvq_config_engine preset's pool built,
# attended and checked against kvq_attend, none INVALID (the times are the
# emulator's, meaningless)
echo "--- bench_gpu --formats --quick on the emulator: all 13 presets valid at GQA 1 and 4"
t=$(date +%s)
out=$("$B/emu/bench_gpu" --formats --quick 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 3
echo "    ($(( $(date +%s) - t )) s)"
rows=$(printf '%s\n' "$out" | grep -cE '^[a-z0-9_-]+ +[14] +[0-9.]+ \|')
if [ "$rc" -eq 0 ] && [ "$rows" -eq 26 ] && ! printf '%s\n' "$out" | grep -q INVALID; then pass=$((pass + 1))
else echo "bench_gpu --formats: exit $rc, $rows of 26 rows, or a row INVALID"; fail=$((fail + 1)); fi
# the tensor-core kernel's accuracy must not rest on the MMA's rounding or
# on fp16 subnormal inputs: the same checks under the other models (only
# v5, in the groups mma, rotate and compact-pages, runs mma.sync: the
# other groups would rerun the same arithmetic)
V5=mma,rotate,compact-pages
run "test_gpu: truncating MMA accumulation (quick, the v5 groups)" \
    KVQ_TEST_QUICK=1 KVQ_TEST_ONLY=$V5 KVQ_EMU_MMA=trunc -- "$B/emu/test_gpu" --kernels
# every case of the groups that run the tensor-core kernel (v5) under the
# model fitted to the H200 (and the H100): mma, rotate, compact-pages
run "test_gpu: the H200's MMA accumulation, $H200_MMA, every v5 case" \
    KVQ_TEST_ONLY=$V5 KVQ_EMU_MMA=$H200_MMA -- "$B/emu/test_gpu" --kernels
run "test_gpu: fp16 subnormal MMA inputs flushed (quick, the v5 groups)" \
    KVQ_TEST_QUICK=1 KVQ_TEST_ONLY=$V5 KVQ_EMU_SUBNORMAL=flush -- "$B/emu/test_gpu" --kernels
run "test_gpu: ASan + UBSan (quick)" KVQ_TEST_QUICK=1 -- "$B/emu-asan/test_gpu" --kernels
run "test_gpu: shared-memory race check, thread order (quick)" \
    KVQ_TEST_QUICK=1 -- "$B/emu-race/test_gpu" --kernels
# the v5 groups with the bank model on, for the bank gate
# (tests/emu/bank_gate.sh, issue 46; its known ratios are of these groups)
rm -f "$B/emu-race/banks.txt"
run "test_gpu: the v5 groups' shared-memory bank report (race build, quick)" \
    KVQ_TEST_QUICK=1 KVQ_TEST_ONLY=$V5 KVQ_EMU_BANKS=$B/emu-race/banks.txt -- "$B/emu-race/test_gpu" --kernels
echo "--- the bank gate: v5 kernels at most 1.1 wavefronts per request, or a known ratio not grown"
if sh tests/emu/bank_gate.sh "$B/emu-race/banks.txt"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
run "test_gpu: race check, random thread and block order, seed 1 (quick)" \
    KVQ_TEST_QUICK=1 KVQ_EMU_SEED=1 -- "$B/emu-race/test_gpu" --kernels
echo "--- planted mutations of kvq_cuda.cu, each of which must fail"
t=$(date +%s)
out=$(B=$B sh tests/emu/mutants.sh 2>&1); rc=$?
printf '%s\n' "$out"
echo "    ($(( $(date +%s) - t )) s)"
line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
p=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/p')
f=$(printf '%s\n' "$line" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/p')
p=${p:-0}; f=${f:-0}
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
pass=$((pass + p)); fail=$((fail + f))

echo "test-cuda-emu: $pass passed, $fail failed ($(( $(date +%s) - t0 )) s)"
[ -n "${TOTALS:-}" ] && echo "$pass $fail" >> "$TOTALS"
[ "$fail" -eq 0 ]
