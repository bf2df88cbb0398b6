#!/usr/bin/env bash
# One GPU-machine session, step by step: build, test, sanitize, benchmark.
# Used with the device tool; every result lands in $OUT (or ./gpu_out).
# (bench/gpu_campaign.sh runs the checks and comparisons in one call of
# ~9 min from binaries built beforehand; this script keeps Nsight Compute
# and the single steps.) Steps: any of
#   build test sanitize selftest mma-probe bench bench-quick sdpa sdpa-quick ptxas sass ncu
# ncu profiles the library's attention kernel at each shape of NCU_SHAPES
# (B,G,GQA,S,T); in bench_gpu --shape it launches as: fp16 x 29 (B = 0, not
# matched), 1 split x 29, fused x 29 (1 validation + 3 warm-up + 25 timed),
# so the fused call's 4th launch is the 33rd of the B-bit kernel. A run
# that fails validation is not timed (1 launch, not 29): then the counts
# are off and the logs say so (check the bench line printed with them).
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT" build
log() { echo "=== $*"; }
for step in "$@"; do
  case $step in
    build)
      log "build (sm_90)"; t0=$SECONDS
      make -s -j4 build/test_gpu build/bench_gpu build/mma_probe build/mma_selftest NVFLAGS="-O3 -std=c++17 -arch=sm_90" > "$OUT/build.log" 2>&1
      echo "rc=$? build: $((SECONDS - t0)) s"; tail -3 "$OUT/build.log" ;;
    selftest) log "mma_selftest: which MMA model the tensor cores match"; timeout 60 build/mma_selftest > "$OUT/mma_selftest.log" 2>&1; echo "rc=$?"; cat "$OUT/mma_selftest.log" ;;
    mma-probe) log "mma_probe: the tensor-core step alone"; timeout 200 build/mma_probe > "$OUT/mma_probe.log" 2>&1; echo "rc=$?"; cat "$OUT/mma_probe.log" ;;
    test) log "test_gpu"; timeout 240 build/test_gpu > "$OUT/test_gpu.log" 2>&1; echo "rc=$?"; tail -4 "$OUT/test_gpu.log" ;;
    sanitize)
      for tool in memcheck racecheck; do
        log "compute-sanitizer $tool (KVQ_TEST_QUICK)"
        KVQ_TEST_QUICK=1 timeout "${SAN_T:-200}" compute-sanitizer --tool "$tool" --error-exitcode 9 build/test_gpu > "$OUT/sanitize_$tool.log" 2>&1
        echo "rc=$?"; tail -3 "$OUT/sanitize_$tool.log"
      done ;;
    bench) log "bench_gpu"; timeout 400 build/bench_gpu --csv "$OUT" > "$OUT/bench_gpu.log" 2>&1; echo "rc=$?"; cat "$OUT/bench_gpu.log" ;;
    bench-quick) log "bench_gpu --quick"; timeout 200 build/bench_gpu --quick > "$OUT/bench_quick.log" 2>&1; echo "rc=$?"; cat "$OUT/bench_quick.log" ;;
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
        log "ncu B=$b G=$g gqa=$r S=$s T=$t"
        timeout 300 ncu --clock-control none --kernel-name-base demangled \
          --kernel-name "regex:kvq_attend_kernel<\\(int\\)128, \\(int\\)$b, " --launch-skip 32 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
          --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
          --section InstructionStats build/bench_gpu --shape "$shape" > "$OUT/ncu_${b}_${g}_${r}_${s}_${t}.log" 2>&1
        echo "rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall" "$OUT/ncu_${b}_${g}_${r}_${s}_${t}.log" | head -24
      done
      # quantize: the fixed-shape kernel (G = 32) and the generic one
      # (G = 128 rows), each past its validation calls and warm-up
      for kq in "0 0" "2 32"; do
        read -r ka kb <<< "$kq"; set -- "$ka" "$kb"; tag=$1_$2
        log "ncu quantize kernel<$kq>"
        timeout 300 ncu --clock-control none --kernel-name-base demangled \
          --kernel-name "regex:kvq_quantize_kernel<\\(int\\)$1, \\(int\\)$2>" --launch-skip 4 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
          --section MemoryWorkloadAnalysis --section InstructionStats build/bench_gpu --quick > "$OUT/ncu_quantize_$tag.log" 2>&1
        echo "rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Issue Slots Busy|Stall" "$OUT/ncu_quantize_$tag.log" | head -16
      done ;;
  esac
done
