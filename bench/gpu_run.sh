#!/usr/bin/env bash
# One GPU-machine session: build, test, sanitize, benchmark. Used with the
# device tool; every result lands in $OUT (or ./gpu_out). Steps: any of
#   build test sanitize mma-probe bench bench-quick sdpa sdpa-quick ptxas sass ncu sweep
# sweep builds bench_gpu once per SWEEP entry (name:-Dmacro=value,...; the
# compiles run in parallel) and runs each with SWEEP_ARGS (default --quick;
# SWEEP_ARGS= runs the full bench), CSVs in $OUT/sweep_<name>/; add "base:"
# to rebuild the defaults in the same way.
# ncu profiles version 2 (whole pages) and, for G > 32, version 3 (tiles)
# of the fused kernel at each shape of NCU_SHAPES (B,G,GQA,S,T); in
# bench_gpu --shape the attention kernels launch as: fp16 x 29, v1 x 29,
# v2 x 29, v3 x 29, v4 x 29 (1 validation + 3 warm-up + 25 timed), so v2's 4th
# launch is the 33rd of the pages kernel (v1 and v2 share it). A version
# that fails validation is not timed (1 launch, not 29): then the counts
# are off and the logs say so (check the bench line printed with them).
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT" build
log() { echo "=== $*"; }
for step in "$@"; do
  case $step in
    build)
      log "build (sm_90)"; t0=$SECONDS
      make -s -j4 build/test_gpu build/bench_gpu NVFLAGS="-O3 -std=c++17 -arch=sm_90" > "$OUT/build.log" 2>&1
      echo "rc=$? build: $((SECONDS - t0)) s"; tail -3 "$OUT/build.log" ;;
    mma-probe) log "mma_probe: the tensor-core step alone"; timeout 200 build/mma_probe > "$OUT/mma_probe.log" 2>&1; echo "rc=$?"; cat "$OUT/mma_probe.log" ;;
    test) log "test_gpu"; timeout 240 build/test_gpu > "$OUT/test_gpu.log" 2>&1; echo "rc=$?"; tail -4 "$OUT/test_gpu.log" ;;
    sanitize)
      for tool in memcheck racecheck; do
        log "compute-sanitizer $tool (KVQ_TEST_QUICK)"
        KVQ_TEST_QUICK=1 timeout ${SAN_T:-200} compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu > "$OUT/sanitize_$tool.log" 2>&1
        echo "rc=$?"; tail -3 "$OUT/sanitize_$tool.log"
      done ;;
    bench) log "bench_gpu"; timeout 400 build/bench_gpu --csv "$OUT" > "$OUT/bench_gpu.log" 2>&1; echo "rc=$?"; cat "$OUT/bench_gpu.log" ;;
    bench-quick) log "bench_gpu --quick"; timeout 200 build/bench_gpu --quick > "$OUT/bench_quick.log" 2>&1; echo "rc=$?"; cat "$OUT/bench_quick.log" ;;
    sweep)
      log "sweep: ${SWEEP:=base: nh1_4:-DKVQ_CUDA_NH1_MIN_CTAS=4 nh4_3:-DKVQ_CUDA_NH4_MIN_CTAS=3}"; t0=$SECONDS
      for v in $SWEEP; do
        name=${v%%:*}; defs=${v#*:}; d=build/sweep_$name; mkdir -p $d
        ( nvcc -O3 -std=c++17 -arch=sm_90 -I. ${defs//,/ } -c kvq_cuda.cu -o $d/kvq_cuda.o &&
          nvcc -O3 -std=c++17 -arch=sm_90 -I. -Itests -o $d/bench_gpu bench/bench_gpu.cu $d/kvq_cuda.o
        ) > "$d.log" 2>&1 || cat "$d.log" &
      done
      wait; echo "sweep builds: $((SECONDS - t0)) s"
      for v in $SWEEP; do
        name=${v%%:*}; log "sweep $name (${v#*:})"
        mkdir -p "$OUT/sweep_$name"
        timeout 400 build/sweep_$name/bench_gpu ${SWEEP_ARGS---quick} --csv "$OUT/sweep_$name" \
          > "$OUT/sweep_$name/bench.log" 2>&1; echo "rc=$?"
        [ -n "${SWEEP_ARGS---quick}" ] && grep -A40 "fused decode" "$OUT/sweep_$name/bench.log"
      done ;;
    sdpa) log "sdpa"; timeout 300 python3 bench/sdpa_baseline.py --csv "$OUT/gpu_sdpa.csv" > "$OUT/sdpa.log" 2>&1; echo "rc=$?"; cat "$OUT/sdpa.log" ;;
    sdpa-quick) log "sdpa quick"; timeout 120 python3 bench/sdpa_baseline.py --quick 2>&1 | tail -8 ;;
    sass) log "SASS of the fast path's inner step"; bench/sass_probe.sh | tee "$OUT/sass_probe.txt" ;;
    ptxas)
      log "ptxas registers and spills (sm_90)"
      nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -c kvq_cuda.cu -o /dev/null 2> "$OUT/ptxas.log"
      python3 bench/ptxas_report.py "$OUT/ptxas.log" | tee "$OUT/ptxas_report.txt" | grep attend ;;
    ncu)
      for shape in ${NCU_SHAPES:-2,32,1,64,32768 2,128,1,64,32768 2,128,4,64,32768}; do
        IFS=, read -r b g r s t <<< "$shape"
        for v in 2 3; do
          if [ $v = 2 ]; then tg=$g; skip=32; else [ "$g" -gt 32 ] || continue; tg=32; skip=3; fi
          log "ncu v$v B=$b G=$g gqa=$r S=$s T=$t"
          timeout 300 ncu --clock-control none --kernel-name-base demangled \
            --kernel-name "regex:kvq_attend_kernel<\\(int\\)128, \\(int\\)$b, \\(int\\)$g, \\(int\\)$tg, " --launch-skip $skip --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            --section InstructionStats build/bench_gpu --shape "$shape" > "$OUT/ncu_v${v}_${b}_${g}_${r}_${s}_${t}.log" 2>&1
          echo "rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall" "$OUT/ncu_v${v}_${b}_${g}_${r}_${s}_${t}.log" | head -24
        done
      done
      # quantize, bench_gpu's first row (per-channel, B = 2, G = 32): the
      # generic kernel (v1/v2) and the fixed-shape one (v3), each past its
      # validation call and warm-up
      for kq in "0 0" "2 32"; do
        set -- $kq; tag=$1_$2
        log "ncu quantize kernel<$kq>"
        timeout 300 ncu --clock-control none --kernel-name-base demangled \
          --kernel-name "regex:kvq_quantize_kernel<\\(int\\)$1, \\(int\\)$2>" --launch-skip 6 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
          --section MemoryWorkloadAnalysis --section InstructionStats build/bench_gpu --quick > "$OUT/ncu_quantize_$tag.log" 2>&1
        echo "rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Issue Slots Busy|Stall" "$OUT/ncu_quantize_$tag.log" | head -16
      done ;;
  esac
done
