# cmake/gpu_kit.cmake: tests of the GPU check kit (scripts/gpu/: pack.sh, check.sh, report.py, bare_env.sh;
# labels "scripts" and "gpukit"). The report is read from the emulated programs' real output; the kit
# itself is packed from this build tree's nvcc binaries (nothing compiled twice) and dry-run with the
# system's MPI, test and CLI libraries hidden. Included last: it names the trainer and NCCL.
add_test(NAME scripts_gpu_report
  COMMAND ${Python3_EXECUTABLE} -m unittest -v test_gpu_report
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/test/scripts)
set_tests_properties(scripts_gpu_report PROPERTIES LABELS "scripts;gpukit" TIMEOUT 180
  ENVIRONMENT "LLMC_TRAIN_GPT2_EMU=$<TARGET_FILE:train_gpt2_emu>;LLMC_BENCH_KERNELS_EMU=$<TARGET_FILE:bench_kernels_emu>;LLMC_BENCH_GENERATE_EMU=$<TARGET_FILE:bench_generate_emu>")

if(LLMC_BUILD_CUDA_TESTS)
  # Exit 77 (skipped) where no private mount namespace can be made.
  add_test(NAME scripts_gpu_kit_dry_run
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/scripts/test_gpu_kit.py)
  set_tests_properties(scripts_gpu_kit_dry_run PROPERTIES LABELS "scripts;gpukit" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "LLMC_BUILD_DIR=${CMAKE_BINARY_DIR};LLMC_NCCL_LIBRARY=${LLMC_NCCL_LIBRARY};LLMC_SHARED_DIR=${LLMC_SHARED_DIR}")
else()
  message(STATUS "gpu_kit: no GPU test binaries, so the GPU kit's dry run (scripts_gpu_kit_dry_run) is not registered")
endif()
