# cmake/trainer.cmake: the train_gpt2 program -- ./train_gpt2 (nvcc, when present) and ./train_gpt2_emu
# (g++ + the CUDA emulation, always) -- plus an fp32 emulated build for tight reference checks, and the
# tests of the optimizer and of the program. Included after the kernels and comm components.

# The commit the binaries are built from, for the log header ("-dirty" with uncommitted changes).
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE LLMC_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE git_status)
if(NOT git_status EQUAL 0 OR LLMC_GIT_COMMIT STREQUAL "")
  set(LLMC_GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} RESULT_VARIABLE git_dirty)
  if(NOT git_dirty EQUAL 0)
    string(APPEND LLMC_GIT_COMMIT "-dirty")
  endif()
endif()

set(LLMC_TRAINER_SOURCES train_gpt2.cu llmc/gpt2.cu llmc/zero.cu llmc/device_arena.cu llmc/run_info.cu)
set(LLMC_TRAINER_LIBS llmc_train_utils llmc_model llmc_data CLI11::CLI11 nlohmann_json::nlohmann_json)

llmc_add_cu_executable(NAME train_gpt2 USER_BINARY SOURCES ${LLMC_TRAINER_SOURCES} LIBS ${LLMC_TRAINER_LIBS}
  EMU_LIBS llmc_comm_emu llmc_trace_emu CUDA_LIBS llmc_comm llmc_trace)
target_compile_definitions(train_gpt2_emu PRIVATE LLMC_GIT_COMMIT="${LLMC_GIT_COMMIT}")
if(LLMC_HAVE_CUDA)
  target_compile_definitions(train_gpt2 PRIVATE LLMC_GIT_COMMIT="${LLMC_GIT_COMMIT}")
endif()

# fp32 emulated trainer (build tree only): the same code with floatX = float, for the reference checks.
llmc_emu_wrap_sources(train_gpt2_fp32_emu_sources train_gpt2_fp32_emu ${LLMC_TRAINER_SOURCES})
add_executable(train_gpt2_fp32_emu ${train_gpt2_fp32_emu_sources})
target_link_libraries(train_gpt2_fp32_emu PRIVATE llmc_emu llmc_comm_emu llmc_trace_emu ${LLMC_TRAINER_LIBS})
target_compile_definitions(train_gpt2_fp32_emu PRIVATE LLMC_FP32 LLMC_GIT_COMMIT="${LLMC_GIT_COMMIT}")

