#!/usr/bin/env bash
# One GPU-machine session: build, test, sanitize, benchmark. Used with the
# device tool; every result lands in $OUT (or ./gpu_out). Steps: any of
#   build test sanitize bench bench-quick sdpa sdpa-quick
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT" build
log() { echo "=== $*"; }
for step in "$@"; do
  case $step in
    build)
      log "build (sm_90)"; t0=$SECONDS
      make -s build/test_gpu build/bench_gpu NVFLAGS="-O3 -std=c++17 -arch=sm_90" > "$OUT/build.log" 2>&1
      echo "rc=$? build: $((SECONDS - t0)) s"; tail -3 "$OUT/build.log" ;;
    test) log "test_gpu"; timeout 240 build/test_gpu > "$OUT/test_gpu.log" 2>&1; echo "rc=$?"; tail -4 "$OUT/test_gpu.log" ;;
    sanitize)
      for tool in memcheck racecheck; do
        log "compute-sanitizer $tool (KVQ_TEST_QUICK)"
        KVQ_TEST_QUICK=1 timeout ${SAN_T:-200} compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu > "$OUT/sanitize_$tool.log" 2>&1
        echo "rc=$?"; tail -3 "$OUT/sanitize_$tool.log"
      done ;;
    bench) log "bench_gpu"; timeout 400 build/bench_gpu --csv "$OUT" > "$OUT/bench_gpu.log" 2>&1; echo "rc=$?"; cat "$OUT/bench_gpu.log" ;;
    bench-quick) log "bench_gpu --quick"; timeout 200 build/bench_gpu --quick > "$OUT/bench_quick.log" 2>&1; echo "rc=$?"; cat "$OUT/bench_quick.log" ;;
    sdpa) log "sdpa"; timeout 300 python3 bench/sdpa_baseline.py --csv "$OUT/gpu_sdpa.csv" > "$OUT/sdpa.log" 2>&1; echo "rc=$?"; cat "$OUT/sdpa.log" ;;
    sdpa-quick) log "sdpa quick"; timeout 120 python3 bench/sdpa_baseline.py --quick 2>&1 | tail -8 ;;
  esac
done
