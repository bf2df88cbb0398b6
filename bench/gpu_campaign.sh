#!/usr/bin/env bash
# bench/gpu_campaign.sh - everything kvq needs a GPU for, in one command of
# at most ~9 minutes (issue 27), from binaries built beforehand on a machine
# without a GPU:
#
#   here:        make gpu-campaign-build     (build/campaign/: test_gpu,
#                                             bench_gpu, mma_selftest for
#                                             sm_90, and BUILD_INFO)
#   GPU machine: bash bench/gpu_campaign.sh  (with build/campaign carried:
#                the device tool's run(command=..., carry=["build/campaign"],
#                timeout_s=600); results come back in $OUT)
#
# Steps, in this order (the most wanted first, so that a run cut short
# still returns them), each under its own time budget (seconds):
#   info       15  date, host, GPU, driver, clocks (nvidia-smi), the build
#   copy       20  device-to-device copy bandwidth (bench_gpu --copy)
#   selftest   20  which emulator MMA model the tensor cores match:
#                  fragment maps, subnormal inputs, accumulation rounding
#                  (bench/mma_selftest.cu)
#   test      120  test_gpu: every kernel against kvq.h, today's and v5
#   bench     120  v5 variants (integer MMA: the default, whose page
#                  parameters are staged a page ahead and whose splits
#                  fill whole waves; it with the parameters read at the
#                  page start (nopf); with about two waves of splits (2w);
#                  built for 5 CTAs per SM (occ5); f16 MMA: the magic
#                  decode, and it built for 5 CTAs)
#                  against today's kernel (fused) and copy:
#                  T = 32K, G 32/128, GQA 1/4/8, S 64/256, B 2/4
#                  (bench_gpu --kernels; CAMPAIGN_KERNELS), each shape
#                  labelled with kvq_cuda_mma_route's pick, then the clocks
#   quantize   40  the quantizers (bench_gpu --quantize): fp16 rows to codes
#                  and scales, validated and trusted, and straight into
#                  fragment-order pages; GB/s and % of copy, each checked
#                  byte for byte against kvq.h first
#   formats    25  decode attention over kvq.h Sec. 4.1's formats: every
#                  kvq_config_engine preset (fp8, nvfp4, turboquant, q8_0,
#                  q4_0, int8/int4 per token-head), D = 128, T = 32K,
#                  S = 64, GQA 1 and 4, each checked against kvq_attend;
#                  GB/s, % of copy, and x the fp16 kernel (bench_gpu
#                  --formats)
#   sdpa       50  PyTorch fp16 SDPA at the same T, S, GQA (skipped, not
#                  failed, where python3 has no torch)
#   memcheck   60  compute-sanitizer memcheck, test_gpu quick (KVQ_TEST_QUICK=1)
#   racecheck  80  compute-sanitizer racecheck, the same
# 550 s in all, under CAMPAIGN_LIMIT (default 550 s): a step that would end
# past the limit gets what is left, or is skipped with a line saying so.
# Missing binaries are built first when nvcc is here (make
# gpu-campaign-build, budget 240 s, taken from the same limit).
#
# Results go to DIR (--out DIR, default $OUT, else ./gpu_out) as each step
# ends, never at the end only:
#   campaign.md        per step: date, device, commit, budget, time, exit
#                      status, and its result lines
#   campaign_full.log  every step's whole output
#   bench_kernels.csv  bench_gpu's rows (--long-csv), one per shape and
#                      kernel, with the route's pick (v5 or fused)
#   sdpa.csv           the SDPA rows
#   gpu_quantize.csv   the quantize step's rows (and an empty gpu_attention.csv)
#   gpu_formats.csv    the formats step's rows
# (seven files: the device tool returns at most eight.)
#
#   bash bench/gpu_campaign.sh [--dry-run] [--out DIR] [--steps a,b,...] [--bin DIR]
# Environment: CAMPAIGN_LIMIT (s), CAMPAIGN_KERNELS (bench_gpu --kernels),
# CAMPAIGN_SHAPES ("B,G,GQA,S,T ..." instead of the grid), CAMPAIGN_BIN.
# --dry-run needs no GPU: it checks that each binary and script a step
# calls exists or would be built, prints the plan with each step's budget,
# and exits 0 (1 when something is missing and cannot be built). CI runs it.
# Exit status of a real run: 0 when every step ran (sdpa: where torch is)
# and exited 0; 1 when a step failed, timed out or was skipped (its line
# in campaign.md says which).
set -u
cd "$(dirname "$0")/.." || exit 2

STEPS_ALL="info copy selftest test bench quantize formats sdpa memcheck racecheck"
declare -A BUDGET=([info]=15 [copy]=20 [selftest]=20 [test]=120 [bench]=120 [quantize]=40 [formats]=25 [sdpa]=50
                   [memcheck]=60 [racecheck]=80)
LIMIT=${CAMPAIGN_LIMIT:-550}
BUILD_BUDGET=240
KERNELS=${CAMPAIGN_KERNELS:-fused,v5,v5:nopf,v5:2w,v5:occ5,v5:magic,v5:magic+occ5}
T_LIST=32768 S_LIST="64 256" GQA_LIST="1 4 8" B_LIST="2 4" G_LIST="32 128"

usage() {
    echo "usage: bash bench/gpu_campaign.sh [--dry-run] [--out DIR] [--steps LIST] [--bin DIR]"
    echo "  steps (comma-separated, default all): ${STEPS_ALL// /,}"
}
dry=0 out=${OUT:-gpu_out} steps=$STEPS_ALL bin=${CAMPAIGN_BIN:-build/campaign}
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; out=$2; shift ;;
        --bin) [ $# -ge 2 ] || { usage >&2; exit 2; }; bin=$2; shift ;;
        --steps)
            [ $# -ge 2 ] || { usage >&2; exit 2; }
            steps=${2//,/ }
            for s in $steps; do
                case " $STEPS_ALL " in *" $s "*) ;; *) echo "gpu_campaign: unknown step '$s'" >&2; usage >&2; exit 2 ;; esac
            done
            shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_campaign: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
case $LIMIT in ''|*[!0-9]*) echo "gpu_campaign: CAMPAIGN_LIMIT=$LIMIT is not a number of seconds" >&2; exit 2 ;; esac

shapes=()                       # bench_gpu --shape arguments
if [ -n "${CAMPAIGN_SHAPES:-}" ]; then
    for sh in $CAMPAIGN_SHAPES; do shapes+=(--shape "$sh"); done
else
    for b in $B_LIST; do for g in $G_LIST; do for r in $GQA_LIST; do for s in $S_LIST; do for t in $T_LIST; do
        shapes+=(--shape "$b,$g,$r,$s,$t")
    done; done; done; done; done
fi
n_shapes=$((${#shapes[@]} / 2))

# what each step runs (the binaries relative to $bin)
step_cmd() {
    case $1 in
        info)      echo "date, host, nvidia-smi (GPU, driver, clocks, power), versions, BUILD_INFO" ;;
        copy)      echo "$bin/bench_gpu --copy" ;;
        selftest)  echo "$bin/mma_selftest" ;;
        test)      echo "$bin/test_gpu" ;;
        bench)     echo "$bin/bench_gpu --kernels $KERNELS --long-csv $out/bench_kernels.csv, $n_shapes shapes; clocks after" ;;
        quantize)  echo "$bin/bench_gpu --quantize --csv $out (quantize + pack, and + seal: GB/s and % of copy, codes checked against kvq.h)" ;;
        formats)   echo "$bin/bench_gpu --formats --csv $out (13 engine presets, T = 32K, S = 64, GQA 1/4: GB/s, % of copy, x fp16; outputs checked against kvq_attend)" ;;
        sdpa)      echo "python3 bench/sdpa_shapes.py --T ${T_LIST// /,} --S ${S_LIST// /,} --gqa ${GQA_LIST// /,}" ;;
        memcheck)  echo "KVQ_TEST_QUICK=1 compute-sanitizer --tool memcheck --error-exitcode 9 $bin/test_gpu" ;;
        racecheck) echo "KVQ_TEST_QUICK=1 compute-sanitizer --tool racecheck --error-exitcode 9 $bin/test_gpu" ;;
    esac
}
step_needs() {                  # binaries and scripts a step calls
    case $1 in
        copy) echo "$bin/bench_gpu" ;;
        selftest) echo "$bin/mma_selftest" ;;
        test|memcheck|racecheck) echo "$bin/test_gpu" ;;
        bench|quantize|formats) echo "$bin/bench_gpu" ;;
        sdpa) echo "bench/sdpa_shapes.py bench/sdpa_baseline.py" ;;
    esac
}

# ---------------------------------------------------------------- dry run
if [ "$dry" = 1 ]; then
    echo "gpu_campaign --dry-run: the plan (binaries from $bin, results to $out)"
    missing=0 build=0 total=0
    have_nvcc=0; command -v "${NVCC:-nvcc}" >/dev/null 2>&1 && have_nvcc=1
    for s in $steps; do
        total=$((total + BUDGET[$s]))
        printf '  %-9s %4d s  %s\n' "$s" "${BUDGET[$s]}" "$(step_cmd "$s")"
        for f in $(step_needs "$s"); do
            if [ -e "$f" ]; then
                case $f in *.py) python3 -m py_compile "$f" 2>/dev/null || { echo "      $f: does not compile"; missing=1; } ;; esac
                continue
            fi
            case $f in
                "$bin"/*)
                    if [ "$have_nvcc" = 1 ]; then echo "      $f: not built yet; make gpu-campaign-build builds it"; build=1
                    else echo "      $f: MISSING, and no nvcc here to build it"; missing=1; fi ;;
                *) echo "      $f: MISSING"; missing=1 ;;
            esac
        done
    done
    [ "$build" = 1 ] && echo "  (on the GPU machine a missing binary is built first: budget $BUILD_BUDGET s from the same limit)"
    echo "  total $total s of step budgets; limit $LIMIT s (CAMPAIGN_LIMIT)"
    [ "$total" -le "$LIMIT" ] || echo "  note: the budgets exceed the limit: the last steps will be cut"
    # the benchmark's arguments, checked by the binary that would run them
    bg=$bin/bench_gpu; [ -x "$bg" ] || bg=build/bench_gpu
    case " $steps " in *" bench "*)
        if [ -x "$bg" ]; then
            if plan=$("$bg" --dry-run --kernels "$KERNELS" "${shapes[@]}" 2>&1); then
                echo "  $bg accepts --kernels $KERNELS and the $n_shapes shapes; kvq_cuda_mma_route picks:"
                printf '%s\n' "$plan" | grep -o 'route: [a-z0-9]*' | sort | uniq -c |
                    sed 's/^ */    /; s/route: //; s/$/ shape(s)/'
            else
                echo "  $bg REFUSES the benchmark's arguments (built from older sources? make gpu-campaign-build):"
                "$bg" --dry-run --kernels "$KERNELS" "${shapes[@]}" 2>&1 | sed 's/^/    /'
                missing=1
            fi
        else echo "  (no bench_gpu built here to check the benchmark's arguments with)"; fi ;;
    esac
    case " $steps " in *" quantize "*)
        if [ -x "$bg" ] && ! "$bg" --help 2>&1 | grep -q -- '--quantize'; then
            echo "  $bg has no --quantize option (built from older sources? make gpu-campaign-build)"; missing=1
        fi ;;
    esac
    case " $steps " in *" formats "*)
        if [ -x "$bg" ] && ! "$bg" --dry-run --formats >/dev/null 2>&1; then
            echo "  $bg has no --formats option (built from older sources? make gpu-campaign-build)"; missing=1
        fi ;;
    esac
    for t in nvidia-smi compute-sanitizer; do
        command -v "$t" >/dev/null 2>&1 || echo "  $t: not here (the GPU machine has it; steps that need it say so if not)"
    done
    python3 -c "import torch" 2>/dev/null || echo "  torch: not here (the sdpa step needs it on the GPU machine)"
    echo "  the device tool: run(command=\"bash bench/gpu_campaign.sh\", carry=[\"$bin\"], timeout_s=600)"
    if [ "$missing" = 1 ]; then echo "gpu_campaign --dry-run: something is missing (above)"; exit 1; fi
    echo "gpu_campaign --dry-run: ok"
    exit 0
fi

# ------------------------------------------------------------------ real run
mkdir -p "$out" || { echo "gpu_campaign: cannot create $out" >&2; exit 2; }
md=$out/campaign.md full=$out/campaign_full.log
t_start=$SECONDS
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_campaign: no GPU here (nvidia-smi -L failed); bash bench/gpu_campaign.sh --dry-run checks the plan without one" >&2
    exit 1
fi
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
commit=$(git describe --always --dirty 2>/dev/null || echo "unknown (no .git here)")

# binaries: built beforehand, or here as a fallback (missing, or built for
# another compute capability than this GPU's)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
arch=sm_${cap//./}
need_build=0 why="$bin is incomplete"
for f in test_gpu bench_gpu mma_selftest; do [ -x "$bin/$f" ] || need_build=1; done
if [ "$need_build" = 0 ] && [ -n "$cap" ] && [ -f "$bin/BUILD_INFO" ] && ! grep -q ", $arch\$" "$bin/BUILD_INFO"; then
    need_build=1 why="$bin was built for another GPU ($(sed 's/.*, //' "$bin/BUILD_INFO"); this one is $arch)"
fi
if [ "$need_build" = 1 ]; then
    echo "=== build: $why; make gpu-campaign-build CAMPAIGN_ARCH=$arch (budget $BUILD_BUDGET s)" | tee -a "$full"
    if command -v nvcc >/dev/null 2>&1; then
        rm -f "$bin/test_gpu" "$bin/bench_gpu" "$bin/mma_selftest" "$bin/kvq_cuda.o"
        timeout "$BUILD_BUDGET" make -j"$(nproc)" gpu-campaign-build CAMPAIGN_DIR="$bin" CAMPAIGN_ARCH="$arch" >> "$full" 2>&1
        rc=$?
        { echo "## build - $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $device"; echo
          echo "make gpu-campaign-build on the GPU machine: exit $rc after $((SECONDS - t_start)) s"; echo; } >> "$md"
    else
        echo "gpu_campaign: $bin lacks binaries and there is no nvcc here to build them" | tee -a "$full" >&2
    fi
fi
build_info=$(cat "$bin/BUILD_INFO" 2>/dev/null || echo "no BUILD_INFO")

{ echo "# GPU campaign, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"; echo
  echo "device: $device; working tree: $commit; binaries: $build_info"; echo
  echo "steps: $steps (limit $LIMIT s)"; echo; } >> "$md"

failed=0
# step NAME CMD...: run under the budget left, log everything, append the
# result lines (filtered by the step's own awk program in $keep) to $md
run_step() {
    local name=$1; shift
    local left=$((LIMIT - (SECONDS - t_start))) budget=${BUDGET[$name]} rc t0 log desc when
    if [ "$left" -lt 5 ]; then
        printf '## %s - skipped: no time left (limit %d s)\n\n' "$name" "$LIMIT" >> "$md"
        echo "=== $name: skipped, no time left"; return
    fi
    [ "$budget" -le "$left" ] || budget=$left
    for f in $(step_needs "$name"); do
        [ -e "$f" ] || { printf '## %s - skipped: %s is missing\n\n' "$name" "$f" >> "$md"
                         echo "=== $name: skipped, $f missing"; failed=1; return; }
    done
    desc=$(step_cmd "$name")
    echo "=== $name (budget $budget s): $desc"
    log=$(mktemp)
    t0=$SECONDS when=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
    timeout --kill-after=10 "$budget" "$@" > "$log" 2>&1
    rc=$?
    { echo "=== $name: exit $rc after $((SECONDS - t0)) s: $desc"; cat "$log"; echo; } >> "$full"
    {
        printf '## %s - started %s, %s, %s\n\n' "$name" "$when" "$device" "$build_info"
        printf 'budget %d s, took %d s, exit %d%s\n\n```\n' "$budget" "$((SECONDS - t0))" "$rc" \
            "$([ "$rc" = 124 ] || [ "$rc" = 137 ] && echo ' (TIMED OUT: the output below is partial)')"
        if [ -n "$keep" ]; then awk "$keep" "$log" | tail -n 80; else tail -n 40 "$log"; fi
        printf '```\n\n'
    } >> "$md"
    tail -n 12 "$log"
    rm -f "$log"
    [ "$rc" = 0 ] || failed=1
}

# shellcheck disable=SC2317  # these three run in a child bash (fns below)
clocks() {
    nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,memory.used,memory.total --format=csv
}
# shellcheck disable=SC2317
campaign_info() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"; echo "host: $(uname -srm), $(nproc) cores"
    echo "working tree: $commit"; echo "binaries: $build_info"
    nvidia-smi -L; clocks
    if command -v nvcc >/dev/null 2>&1; then nvcc --version | tail -n 1; fi
    if command -v compute-sanitizer >/dev/null 2>&1; then compute-sanitizer --version | tail -n 1; fi
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -n 1
}
# shellcheck disable=SC2317
bench() {
    "$bin/bench_gpu" --kernels "$KERNELS" --long-csv "$out/bench_kernels.csv" "${shapes[@]}"
    local rc=$?
    echo "clocks after the benchmark:"; clocks
    return "$rc"
}
# the functions above, run by timeout in a child bash
fns="$(declare -p shapes); $(declare -f clocks campaign_info bench)"
export bin out commit build_info KERNELS

for s in $steps; do
    keep=""
    case $s in
        info)      keep='1'; run_step info bash -c "$fns; campaign_info" ;;
        copy)      run_step copy "$bin/bench_gpu" --copy ;;
        selftest)  keep='!/^    case/'; run_step selftest "$bin/mma_selftest" ;;
        test)      keep='!/^  / || /FAIL|mma/'; run_step test "$bin/test_gpu" ;;
        bench)     keep='1'; run_step bench bash -c "$fns; bench" ;;
        quantize)  keep='1'; run_step quantize "$bin/bench_gpu" --quantize --csv "$out" ;;
        formats)   keep='1'; run_step formats "$bin/bench_gpu" --formats --csv "$out" ;;
        sdpa)
            if python3 -c "import torch" >/dev/null 2>&1; then
                keep='1'; run_step sdpa python3 bench/sdpa_shapes.py --T "${T_LIST// /,}" --S "${S_LIST// /,}" \
                                --gqa "${GQA_LIST// /,}" --csv "$out/sdpa.csv"
            else                           # SDPA is a comparison, when torch is there
                printf '## sdpa - skipped: no torch here\n\n' >> "$md"
                echo "=== sdpa: skipped, no torch here"
            fi ;;
        memcheck|racecheck)
            if command -v compute-sanitizer >/dev/null 2>&1; then
                keep='/ERROR|Hazard|hazard|SUMMARY|passed|failed|Error/'
                run_step "$s" env KVQ_TEST_QUICK=1 compute-sanitizer --tool "$s" --error-exitcode 9 "$bin/test_gpu"
            else
                printf '## %s - skipped: no compute-sanitizer here\n\n' "$s" >> "$md"; failed=1
                echo "=== $s: skipped, no compute-sanitizer here"
            fi ;;
    esac
done
printf 'campaign ended after %d s, %s\n' "$((SECONDS - t_start))" \
    "$([ "$failed" = 0 ] && echo 'every step exited 0' || echo 'SOME STEP FAILED, TIMED OUT OR WAS SKIPPED')" | tee -a "$md"
exit "$failed"
