# cmake/kernels.cmake: tests of the GPT-2 kernels and the GEMM wrapper (llmc/kernels/*.cuh, header-only)
# against the double-precision reference. Each test source is built for fp32 and bf16, emulated with g++
# (runs everywhere) and with nvcc (runs on a GPU, "skipped: no GPU" otherwise; the fp32 GPU twin only
# with -DLLMC_CUDA_FP32_TESTS=ON).

set(LLMC_KERNEL_TEST_SOURCES
  test/kernels/test_encoder_layernorm.cu
  test/kernels/test_matmul_attention.cu
  test/kernels/test_classifier_optimizer.cu
  test/kernels/test_flash_attention.cu
  test/kernels/test_window_attention.cu)

llmc_add_cu_test(NAME kernels_bf16 LABELS kernels TIMEOUT 300 SOURCES ${LLMC_KERNEL_TEST_SOURCES} LIBS llmc_reference)
if(LLMC_CUDA_FP32_TESTS)
  llmc_add_cu_test(NAME kernels_fp32 LABELS kernels TIMEOUT 300 SOURCES ${LLMC_KERNEL_TEST_SOURCES} LIBS llmc_reference)
else()
  llmc_add_cu_test(NAME kernels_fp32 LABELS kernels TIMEOUT 300 SOURCES ${LLMC_KERNEL_TEST_SOURCES} LIBS llmc_reference
                   EMU_ONLY)
endif()
foreach(target IN ITEMS kernels_fp32_emu kernels_fp32_cuda)
  if(TARGET ${target})
    target_compile_definitions(${target} PRIVATE LLMC_FP32)
  endif()
endforeach()

# Per-kernel timing at a chosen model size (bench_kernels on a GPU, bench_kernels_emu on the CPU).
# The emulated build is smoke-tested at a tiny size so that the benchmark cannot rot.
llmc_add_cu_executable(NAME bench_kernels SOURCES test/kernels/bench_kernels.cu LIBS CLI11::CLI11)
add_test(NAME kernels_bench_smoke_emu
  COMMAND bench_kernels_emu --batch 1 --seq 64 --channels 128 --heads 2 --vocab 200 --params 5000 --repeats 1)
set_tests_properties(kernels_bench_smoke_emu PROPERTIES LABELS kernels TIMEOUT 120)
