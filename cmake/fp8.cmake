# cmake/fp8.cmake: the FP8 head's building blocks (docs/fp8.md) -- the FP8 formats
# (llmc/cuda/fp8.h, the emulation's model llmc/emu/fp8_convert.h), the FP8 GEMM (llmc/kernels/fp8_matmul.cuh, its CPU
# emulation llmc/emu/cpu_fp8_gemm.h), the cast kernels and the head -- and their tests: the formats against
# ml_dtypes (test/emu/fp8_reference.py), the GEMM and the head against double references.

set(LLMC_FP8_TEST_SOURCES
  test/emu/test_fp8_format.cu
  test/kernels/test_fp8_matmul.cu
  test/kernels/test_fp8_cast.cu
  test/kernels/test_fp8_head.cu
  test/kernels/test_fp8_mlp.cu)

# Emulated, each runs twice: lockstep warps in order, and the drift schedule (docs/emulation.md).
llmc_add_cu_test(NAME fp8 LABELS "fp8;kernels" TIMEOUT 300 ALSO_SCHEDULES drift SOURCES ${LLMC_FP8_TEST_SOURCES})
foreach(target IN ITEMS fp8_emu fp8_cuda)
  if(TARGET ${target})
    target_compile_definitions(${target} PRIVATE LLMC_PYTHON_EXECUTABLE="${Python3_EXECUTABLE}"
                                                 LLMC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  endif()
endforeach()

# Mutants the emulated FP8 head check must catch (test/kernels/test_fp8_mutant.cu, llmc_kernel_mutant of
# cmake/kernels.cmake: a copy of the llmc/kernels/fp8*.cuh headers with one line removed): a missing barrier
# (the transposed copies read codes not yet staged), a wrong scale (dx without w_s) and the gradient scale
# fixed at the record's 1/448 whatever the loss scale (our loss is a mean). fp8_mutant_control
# builds the same check from the faithful headers, where it must pass.
llmc_kernel_mutant(fp8_mutant_transpose_without_barrier test/kernels/test_fp8_mutant.cu "llmc/kernels/fp8*.cuh"
  llmc/kernels/fp8_cast_transpose.cuh
  "__syncthreads();  // transpose: every thread's codes are staged before any thread reads a column")
llmc_kernel_mutant(fp8_mutant_dx_without_weight_scale test/kernels/test_fp8_mutant.cu "llmc/kernels/fp8*.cuh"
  llmc/kernels/fp8_head.cuh "input_grad.b_scale = workspace.weight_scale();")

llmc_kernel_mutant(fp8_mutant_fixed_grad_scale test/kernels/test_fp8_mutant.cu "llmc/kernels/fp8*.cuh"
  llmc/kernels/fp8_head.cuh "workspace.set_grad_scale(fp8_head_grad_scale(dloss), stream);")

# The #89 model's head: its weight gradient's operands not swapped back for the (C, V) weight, and the loss
# kernel's codes never transposed (g8t read unwritten).
llmc_kernel_mutant(fp8_mutant_in_out_weight_grad_unswapped test/kernels/test_fp8_mutant.cu "llmc/kernels/fp8*.cuh"
  llmc/kernels/fp8_head.cuh "std::swap(weight_grad.m, weight_grad.n);")
llmc_kernel_mutant(fp8_mutant_codes_not_transposed test/kernels/test_fp8_mutant.cu "llmc/kernels/fp8*.cuh"
  llmc/kernels/fp8_head.cuh "fp8_transpose(workspace.g8t(), workspace.g8(), tokens, workspace.vocab(), stream);")

# The FP8 MLP's block maximum (abs_max, the ReLU^2 epilogue's amax) without the barrier between the warps'
# maxima and warp 0's read of them.
llmc_kernel_mutant(fp8_mutant_block_max_without_barrier test/kernels/test_fp8_mutant.cu "llmc/kernels/fp8*.cuh"
  llmc/kernels/fp8_mlp.cuh "__syncthreads();  // block max: every warp's maximum is stored before warp 0 reads them")

llmc_emu_wrap_sources(fp8_mutant_control_sources fp8_mutant_control_emu test/kernels/test_fp8_mutant.cu)
add_executable(fp8_mutant_control_emu ${fp8_mutant_control_sources})
target_compile_definitions(fp8_mutant_control_emu PRIVATE LLMC_FP8_MUTANT_CONTROL)
target_link_libraries(fp8_mutant_control_emu PRIVATE llmc_gpu_test_main_emu llmc_emu GTest::gtest)
gtest_discover_tests(fp8_mutant_control_emu DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT}
                     TEST_PREFIX "fp8_mutant_control." DISCOVERY_MODE PRE_TEST
                     PROPERTIES LABELS "fp8;kernels" TIMEOUT 300)
