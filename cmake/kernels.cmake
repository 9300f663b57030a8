# cmake/kernels.cmake: tests of the GPT-2 kernels and the GEMM wrapper (llmc/kernels/*.cuh, header-only)
# against the double-precision reference. Each test source is built for fp32 and bf16, emulated with g++
# (runs everywhere) and with nvcc (runs on a GPU, "skipped: no GPU" otherwise; the fp32 GPU twin only
# with -DLLMC_CUDA_FP32_TESTS=ON).

# The speedrun model's kernels (docs/speedrun_model.md); also built as the mutant binary below.
set(LLMC_SPEEDRUN_KERNEL_TEST_SOURCES
  test/kernels/test_rmsnorm.cu
  test/kernels/test_qk_norm_rope.cu
  test/kernels/test_softcap_cross_entropy.cu
  test/kernels/test_relu_squared.cu
  test/kernels/test_wgmma_gemm.cu
  test/kernels/test_smear_gate.cu
  test/kernels/test_attention_gate.cu
  test/kernels/test_residual_mix.cu
  test/kernels/test_scalar_vector.cu
  test/kernels/test_embedding.cu
  test/kernels/test_simple_window_attention.cu)
# The 2026-07-17 record's kernels (docs/kernels.md); also built as the mutant binary below.
set(LLMC_MODDED89_KERNEL_TEST_SOURCES
  test/kernels/test_mtp_cross_entropy.cu
  test/kernels/test_qk_norm_pair_rope.cu
  test/kernels/test_xsa.cu
  test/kernels/test_head_gate.cu
  test/kernels/test_bigram_sign.cu
  test/kernels/test_token_mix.cu
  test/kernels/test_residual_norm.cu
  test/kernels/test_value_embed_gate.cu
  test/kernels/test_dc_attention.cu
  test/kernels/test_gate_mlp_output.cu
  test/kernels/test_tied_transpose.cu
  test/kernels/test_sparse_rows.cu
  test/kernels/test_wgmma_fp8_gemm.cu)
set(LLMC_KERNEL_TEST_SOURCES
  test/kernels/test_encoder.cu
  test/kernels/test_layernorm.cu
  test/kernels/test_bias_grad.cu
  test/kernels/test_residual.cu
  test/kernels/test_gelu.cu
  test/kernels/test_matmul.cu
  test/kernels/test_attention.cu
  test/kernels/test_classifier.cu
  test/kernels/test_global_norm.cu
  test/kernels/test_adamw.cu
  test/kernels/test_flash_attention.cu
  test/kernels/test_window_attention.cu
  test/kernels/test_kv_cache.cu
  test/kernels/test_convert.cu
  ${LLMC_MODDED89_KERNEL_TEST_SOURCES}
  ${LLMC_SPEEDRUN_KERNEL_TEST_SOURCES})

# Emulated, each runs twice: lockstep warps in order, and the drift schedule (docs/emulation.md).
llmc_add_cu_test(NAME kernels_bf16 LABELS kernels TIMEOUT 300 ALSO_SCHEDULES drift
                 SOURCES ${LLMC_KERNEL_TEST_SOURCES} LIBS llmc_reference)
if(LLMC_CUDA_FP32_TESTS)
  llmc_add_cu_test(NAME kernels_fp32 LABELS kernels TIMEOUT 300 ALSO_SCHEDULES drift
                   SOURCES ${LLMC_KERNEL_TEST_SOURCES} LIBS llmc_reference)
else()
  llmc_add_cu_test(NAME kernels_fp32 LABELS kernels TIMEOUT 300 ALSO_SCHEDULES drift
                   SOURCES ${LLMC_KERNEL_TEST_SOURCES} LIBS llmc_reference EMU_ONLY)
endif()
foreach(target IN ITEMS kernels_fp32_emu kernels_fp32_cuda)
  if(TARGET ${target})
    target_compile_definitions(${target} PRIVATE LLMC_FP32)
  endif()
endforeach()
# The mutation tests' binaries (below): the fp32 kernel tests, and the bf16 ones for the head-128 window attention.
foreach(target IN ITEMS kernels_fp32_emu kernels_bf16_emu)
  if(TARGET ${target})
    target_compile_definitions(${target} PRIVATE LLMC_KERNEL_MUTANTS)
  endif()
endforeach()
# The emulated kernel tests share their heaviest headers (GoogleTest, the emulated CUDA runtime through the
# test helpers): parsed once per binary instead of once per test file (docs/testing.md#budget).
foreach(target IN ITEMS kernels_bf16_emu kernels_fp32_emu)
  target_precompile_headers(${target} PRIVATE <gtest/gtest.h> "${CMAKE_SOURCE_DIR}/test/support/gpu_test.h"
                            "${CMAKE_SOURCE_DIR}/test/support/kernel_test_utils.h")
endforeach()

# Mutation tests (emulated only): copies of real kernels with one planted bug each must fail, the faithful
# copies must pass (test/kernels/mutants/). In the TSan build the races among them fail as races.
llmc_add_cu_test(NAME kernel_mutants LABELS mutants EMU_ONLY TIMEOUT 300
  SOURCES test/kernels/mutants/test_mutants.cu LIBS llmc_reference)

# Mutation tests: the emulated kernel tests are built with LLMC_KERNEL_MUTANTS (above), so that each
# LLMC_MUTANT(...) site in llmc/kernels can be switched to a plausible bug at run time (LLMC_KERNEL_MUTANT=name;
# off otherwise); the driver expects the named tests to fail under each mutant and to pass without one. (A
# separate binary compiled 25 of the same test files again: 72 s of CI's build; until 2026-12-07 ten more small
# binaries each compiled a copy of the FP8, window-attention or KV-cache headers with one line removed.) The FP8
# tests' binary (cmake/fp8.cmake) is built with LLMC_KERNEL_MUTANTS too.
add_test(NAME kernels_mutants_emu
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/kernels/run_kernel_mutants.py
          --binary $<TARGET_FILE:kernels_fp32_emu> --bf16-binary $<TARGET_FILE:kernels_bf16_emu>
          --fp8-binary $<TARGET_FILE:fp8_emu>
          --kernels ${CMAKE_SOURCE_DIR}/llmc/kernels)
set_tests_properties(kernels_mutants_emu PROPERTIES LABELS kernels TIMEOUT 300)

# Per-kernel timing at a chosen model size (bench_kernels on a GPU, bench_kernels_emu on the CPU).
# The emulated build is smoke-tested at a tiny size so that the benchmark cannot rot.
llmc_add_cu_executable(NAME bench_kernels BENCHMARK SOURCES test/kernels/bench_kernels.cu LIBS llmc_command_line llmc_shards)
add_test(NAME kernels_bench_smoke_emu
  COMMAND bench_kernels_emu --batch 1 --seq 64 --channels 128 --heads 2 --vocab 200 --params 5000 --repeats 1)
set_tests_properties(kernels_bench_smoke_emu PROPERTIES LABELS kernels TIMEOUT 120)

# The window attention against an independent float64 JAX attention with an explicit boolean mask (the
# emulated kernels; skips, visibly, without JAX).
add_test(NAME window_attention_vs_jax
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/kernels/check_window_attention_jax.py
          --binary $<TARGET_FILE:kernels_bf16_emu>)
set_tests_properties(window_attention_vs_jax PROPERTIES LABELS "kernels;reference" SKIP_RETURN_CODE 77 TIMEOUT 300)

# Window attention benchmark rows (bench_window_attention on a GPU; the emulated build prints the shapes,
# FLOPs and ceilings, and is smoke-tested running the kernels at a tiny size).
llmc_add_cu_executable(NAME bench_window_attention BENCHMARK SOURCES test/kernels/bench_window_attention.cu
                       LIBS llmc_command_line llmc_data)
add_test(NAME window_attention_bench_smoke_emu
  COMMAND bench_window_attention_emu --tokens 300 --heads 1 --windows 64,1000 --run --repeats 1 --simple)
set_tests_properties(window_attention_bench_smoke_emu PROPERTIES LABELS kernels TIMEOUT 120)

# The speedrun kernels' rows (bytes, FLOPs, time at the H200 ceilings) at the record shapes; measured times
# on a GPU. Smoke-tested emulated at a tiny shape, plus the record-shape rows without running (--dry-run).
llmc_add_cu_executable(NAME bench_speedrun_kernels BENCHMARK SOURCES test/kernels/bench_speedrun_kernels.cu
                       LIBS llmc_command_line)
add_test(NAME kernels_speedrun_bench_smoke_emu
  COMMAND bench_speedrun_kernels_emu --tokens 64 --channels 64 --heads 2 --vocab 256 --repeats 1)
add_test(NAME kernels_speedrun_bench_rows_emu COMMAND bench_speedrun_kernels_emu --dry-run)
set_tests_properties(kernels_speedrun_bench_smoke_emu kernels_speedrun_bench_rows_emu PROPERTIES LABELS kernels
                     TIMEOUT 120)

# ptxas's performance advisories on the wgmma GEMMs (C7510-C7599: a wgmma serialised, warpgroup.arrive or wait
# injected), which no emulated test can see: nvcc compiles test/kernels/wgmma_ptxas_advisories.cu for sm_90a and
# the test fails if ptxas prints one (2026-12-07: kQkvRope's runtime-indexed epilogue had serialised every wgmma of
# the QKV GEMM, the FP8 GEMM's k-tile loop injected five arrives). About 10 s of CPU.
if(LLMC_HAVE_CUDA)
  add_test(NAME wgmma_ptxas_advisories
           COMMAND ${CMAKE_CUDA_COMPILER} -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG -arch=sm_90a
                   -I${CMAKE_SOURCE_DIR} -cubin -o ${CMAKE_CURRENT_BINARY_DIR}/wgmma_ptxas_advisories.cubin
                   ${CMAKE_SOURCE_DIR}/test/kernels/wgmma_ptxas_advisories.cu)
  set_tests_properties(wgmma_ptxas_advisories PROPERTIES LABELS kernels TIMEOUT 300
                       FAIL_REGULAR_EXPRESSION "\\(C75[0-9][0-9]\\)")
endif()
