# Front door over CMake. `make` builds everything, `make test` builds and runs the whole suite,
# `make run` trains (GPU build when a GPU is present, the emulated CPU build otherwise).
# Each target first installs what is missing (scripts/install_deps.sh, silent when all is there).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Where no GPU is, the nvcc build is a compile check and what the GPU kit packs for an H200: the programs
# for sm_90a alone (not also sm_80). The GPU test binaries and benchmarks are built everywhere nvcc is:
# without a GPU their tests report "skipped: no GPU", and the GPU kit's dry run packs and checks them
# (CUDA_TESTS=OFF leaves them out). Where a GPU is: both architectures (docs/testing.md#budget).
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo ON || echo OFF)
CUDA_TESTS ?= ON
CUDA_ARCHS ?= $(if $(filter ON,$(HAVE_GPU)),90a;80,90a)

.PHONY: all deps configure test test-asan test-tsan test-fma fuzz run clean

all: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

deps:
	@bash scripts/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DLLMC_CUDA_TESTS=$(CUDA_TESTS) \
	  "-DLLMC_CUDA_ARCHITECTURES=$(CUDA_ARCHS)" $(CMAKE_FLAGS) >/dev/null

# Sanitizer builds compile only the emulated test binaries they run (docs/emulation.md). make test runs
# the emulation's tests (planted races included) and the kernel mutants under ThreadSanitizer (the race
# detector); make test-tsan every emulated kernel, model and train-step test, make test-asan everything
# under AddressSanitizer. The subset is what fits CI's 15 minutes on 2 cores (docs/testing.md#budget).
TSAN_TESTS := emu_tests kernel_mutants
TSAN_ALL_TESTS := emu_tests kernels_bf16 kernels_fp32 kernel_mutants gpt2_bf16 gpt2_fp32 train_steps_bf16 train_steps_fp32 fp8
FMA_TESTS := kernels_bf16 kernels_fp32 gpt2_bf16 gpt2_fp32 train_steps_bf16 train_steps_fp32 fp8
empty :=
space := $(empty) $(empty)
# ctest -R pattern selecting the default-schedule tests of the given emulated binaries.
tests_regex = '^($(subst $(space),|,$(strip $(1))))_emu[.]'
# $(call sanitizer_run,build dir,cmake flags,test binaries)
define sanitizer_run
	@cmake -S . -B $(1) $(2) -DLLMC_CUDA=OFF >/dev/null
	cmake --build $(1) -j $(JOBS) --target $(addsuffix _emu,$(3))
	cd $(1) && ctest --output-on-failure -j $(JOBS) -R $(call tests_regex,$(3))
endef

# The whole suite (every fuzz target's seed corpus and regression inputs replayed included), then the TSan
# run above. Fuzzing itself explores at random, so it is `make fuzz`, not part of the test command.
test: all
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	$(call sanitizer_run,build-tsan,-DCMAKE_BUILD_TYPE=Release -DLLMC_TSAN=ON,$(TSAN_TESTS))

# The file readers under libFuzzer with ASan + UBSan (clang): each fuzz target for FUZZ_SECONDS from the
# committed seed corpus (docs/robustness.md#fuzzing).
FUZZ_SECONDS ?= 60
fuzz: deps
	@cmake -S . -B build-fuzz -DLLMC_FUZZ=ON -DLLMC_FUZZ_SECONDS=$(FUZZ_SECONDS) -DLLMC_CUDA=OFF \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzz_targets
	cd build-fuzz && ctest --output-on-failure -j $(JOBS) -L fuzz

# Everything emulated under AddressSanitizer, and the whole suite there (slower; not part of make test).
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLLMC_ASAN=ON -DLLMC_CUDA=OFF >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS)

# Every emulated kernel, model and train-step test under ThreadSanitizer (slower; not part of make test).
test-tsan: deps
	$(call sanitizer_run,build-tsan,-DCMAKE_BUILD_TYPE=Release -DLLMC_TSAN=ON,$(TSAN_ALL_TESTS))

# The kernel, model and train-step tests with FMA contraction as nvcc compiles (-mfma -ffp-contract=fast):
# their tolerances must hold for either rounding.
test-fma: deps
	$(call sanitizer_run,build-fma,-DCMAKE_BUILD_TYPE=Release -DLLMC_EMU_FMA=ON,$(FMA_TESTS))

# `make run`: the README's main job, into $(RUN_DIR) (emptied first). Builds only what it needs, makes
# tiny-shakespeare token shards if they are missing, then trains. With a GPU (`nvidia-smi -L` works and
# the CUDA build succeeds): GPT-2 d12 (124M) with RUN_GPU_ARGS, ~5M tokens, a few minutes. Without one:
# the emulated CPU build trains a 1-layer model with RUN_CPU_ARGS, 50 steps in ~2-3 minutes, and the
# loss falls from ~10.8 (ln 50257) by a few nats. Override either, e.g. `make run RUN_CPU_ARGS="..."`.
RUN_DIR ?= runs/make_run
RUN_DATA := data/cache/tinyshakespeare/tinyshakespeare
RUN_GPU_ARGS ?= --model d12 -b 16 -t 1024 --steps 300 --lr 6e-4 --warmup-steps 30 --final-lr-frac 0.1 \
	--weight-decay 0.1 --grad-clip 1.0 --val-every 50 --val-tokens 16384
RUN_CPU_ARGS ?= --model d1 -b 8 -t 64 --steps 50 --lr 6e-3 --warmup-steps 5 --final-lr-frac 0.1 \
	--weight-decay 0.1 --grad-clip 1.0 --val-every 25 --val-tokens 2048

run: configure
	@set -e; \
	if nvidia-smi -L >/dev/null 2>&1 && cmake --build $(BUILD_DIR) -j $(JOBS) --target train_gpt2 tokenize_gpt2; then \
	  trainer=./train_gpt2; args="$(RUN_GPU_ARGS)"; \
	  echo "make run: GPU found: GPT-2 d12 on tiny-shakespeare with ./train_gpt2"; \
	else \
	  cmake --build $(BUILD_DIR) -j $(JOBS) --target train_gpt2_emu tokenize_gpt2; \
	  trainer=./train_gpt2_emu; args="$(RUN_CPU_ARGS)"; \
	  echo "make run: no GPU (or no CUDA build): a 1-layer model on tiny-shakespeare with the emulated ./train_gpt2_emu"; \
	fi; \
	ls $(RUN_DATA)_train_*.bin >/dev/null 2>&1 || python3 data/tinyshakespeare.py; \
	rm -rf $(RUN_DIR); \
	$$trainer --train-data '$(RUN_DATA)_train_*.bin' --val-data '$(RUN_DATA)_val_*.bin' $$args -o $(RUN_DIR); \
	echo "make run: log and final checkpoint in $(RUN_DIR)/"

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan build-fma build-fuzz
