# cmake/train.cmake: the trainer's host-side utilities (options, lr schedule, MFU, step log) and their tests.
add_library(llmc_train_utils STATIC llmc/lr_schedule.cpp llmc/mfu.cpp llmc/train_log.cpp llmc/train_options.cpp llmc/train_state.cpp)
target_link_libraries(llmc_train_utils PUBLIC llmc_flags CLI11::CLI11 llmc_data)

add_executable(test_train_utils test/test_train_utils.cpp)
target_link_libraries(test_train_utils PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_train_utils PROPERTIES LABELS train)

add_executable(test_train_state test/test_train_state.cpp)
target_link_libraries(test_train_state PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_train_state PROPERTIES LABELS train)

# ---- the device model (llmc/gpt2.cu) and its tests against the reference ----------------------
set(LLMC_MODEL_CU_SOURCES llmc/gpt2.cu llmc/device_arena.cu)
foreach(precision IN ITEMS bf16 fp32)
  llmc_add_cu_test(NAME gpt2_${precision} LABELS model_cuda TIMEOUT 300
    SOURCES test/model/test_gpt2.cu ${LLMC_MODEL_CU_SOURCES}
    LIBS llmc_reference llmc_model)
  if(precision STREQUAL "fp32")
    target_compile_definitions(gpt2_fp32_emu PRIVATE LLMC_FP32)
    if(LLMC_HAVE_CUDA)
      target_compile_definitions(gpt2_fp32_cuda PRIVATE LLMC_FP32)
    endif()
  endif()
endforeach()
