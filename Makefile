# Front door over CMake. `make` builds everything, `make test` builds and runs the whole suite,
# `make run` trains (GPU build when a GPU is present, the emulated CPU build otherwise).
# Each target first installs what is missing (scripts/install_deps.sh, silent when all is there).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure test test-asan run clean

all: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

deps:
	@bash scripts/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

test: all
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The emulated build under AddressSanitizer: catches out-of-bounds global and shared memory accesses.
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLLMC_ASAN=ON -DLLMC_CUDA=OFF >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -L emu

clean:
	rm -rf $(BUILD_DIR) build-asan
