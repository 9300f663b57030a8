# cmake/kernels.cmake: tests of the GPT-2 kernels and the GEMM wrapper (llmc/kernels/*.cuh, header-only)
# against the double-precision reference. Each test source is built four ways: fp32 and bf16, each
# emulated with g++ (runs everywhere) and with nvcc (runs on a GPU, "skipped: no GPU" otherwise).

set(LLMC_KERNEL_TEST_SOURCES
  test/kernels/test_encoder_layernorm.cu
  test/kernels/test_matmul_attention.cu
  test/kernels/test_classifier_optimizer.cu
  test/kernels/test_flash_attention.cu)

foreach(precision IN ITEMS bf16 fp32)
  llmc_add_cu_test(NAME kernels_${precision} LABELS kernels TIMEOUT 300
    SOURCES ${LLMC_KERNEL_TEST_SOURCES}
    LIBS llmc_reference)
  if(precision STREQUAL "fp32")
    target_compile_definitions(kernels_${precision}_emu PRIVATE LLMC_FP32)
    if(LLMC_HAVE_CUDA)
      target_compile_definitions(kernels_${precision}_cuda PRIVATE LLMC_FP32)
    endif()
  endif()
endforeach()

# Per-kernel timing at a chosen model size (bench_kernels on a GPU, bench_kernels_emu on the CPU).
# The emulated build is smoke-tested at a tiny size so that the benchmark cannot rot.
llmc_add_cu_executable(NAME bench_kernels SOURCES test/kernels/bench_kernels.cu LIBS CLI11::CLI11)
add_test(NAME kernels_bench_smoke_emu
  COMMAND bench_kernels_emu --batch 1 --seq 64 --channels 128 --heads 2 --vocab 200 --params 5000 --repeats 1)
set_tests_properties(kernels_bench_smoke_emu PROPERTIES LABELS kernels TIMEOUT 120)
