# cmake/fp8.cmake: the FP8 head's building blocks (docs/fp8.md) -- the FP8 formats
# (llmc/cuda/fp8.h, the emulation's model llmc/emu/fp8_convert.h), the FP8 GEMM (llmc/kernels/fp8_matmul.cuh, its CPU
# emulation llmc/emu/cpu_fp8_gemm.h), the cast kernels and the head -- and their tests: the formats against
# ml_dtypes (test/emu/fp8_reference.py), the GEMM and the head against double references.

set(LLMC_FP8_TEST_SOURCES
  test/emu/test_fp8_format.cu
  test/kernels/test_fp8_matmul.cu
  test/kernels/test_fp8_cast.cu
  test/kernels/test_fp8_head.cu
  test/kernels/test_fp8_mlp.cu
  test/kernels/test_fp8_model_check.cu)

# Emulated, each runs twice: lockstep warps in order, and the drift schedule (docs/emulation.md).
llmc_add_cu_test(NAME fp8 LABELS "fp8;kernels" TIMEOUT 300 ALSO_SCHEDULES drift SOURCES ${LLMC_FP8_TEST_SOURCES})
foreach(target IN ITEMS fp8_emu fp8_cuda)
  if(TARGET ${target})
    target_compile_definitions(${target} PRIVATE LLMC_PYTHON_EXECUTABLE="${Python3_EXECUTABLE}"
                                                 LLMC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  endif()
endforeach()
# The FP8 sites among the kernel mutants (test/kernels/run_kernel_mutants.py, cmake/kernels.cmake): off unless
# LLMC_KERNEL_MUTANT names one.
if(TARGET fp8_emu)
  target_compile_definitions(fp8_emu PRIVATE LLMC_KERNEL_MUTANTS)
endif()

