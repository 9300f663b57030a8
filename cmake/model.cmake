# cmake/model.cmake: GPT-2 configs, parameter buckets, initialization and checkpoint files, the speedrun
# model's config/structure and RoPE/YaRN state (llmc_model, plain C++), and the double-precision CPU
# references of GPT-2 and of the speedrun model used as test oracles (llmc_reference).

add_library(llmc_model STATIC
  llmc/model/gpt2/gpt2_config.cpp
  llmc/family/param_layout.cpp
  llmc/family/table_rows.cpp
  llmc/family/tensor_file.cpp
  llmc/model/gpt2/gpt2_layout.cpp
  llmc/model/gpt2/gpt2_init.cpp
  llmc/model/gpt2/gpt2_model_file.cpp
  llmc/model/modded44/speedrun_config.cpp
  llmc/model/modded44/speedrun_layout.cpp
  llmc/model/modded89/modded89_config.cpp
  llmc/model/modded89/modded89_layout.cpp
  llmc/model/modded89/modded89_init.cpp
  llmc/model/modded89/modded89_model_file.cpp
  llmc/model/modded44/speedrun_init.cpp
  llmc/model/modded44/speedrun_model_file.cpp
  llmc/model/modded44/yarn.cpp
  llmc/model/presets.cpp)
target_link_libraries(llmc_model PUBLIC llmc_flags llmc_files)

add_library(llmc_reference STATIC
  test/reference/reference_ops.cpp
  test/reference/reference_gpt2.cpp
  test/reference/window_attention_reference.cpp
  test/reference/reference_speedrun_ops.cpp
  test/reference/reference_speedrun.cpp
  test/reference/reference_mtp_loss.cpp
  test/reference/reference_modded89_ops.cpp
  test/reference/reference_tape_ops.cpp
  test/reference/reference_tape_attention.cpp
  test/reference/reference_modded89.cpp)
target_link_libraries(llmc_reference PUBLIC llmc_model)

# ---- tests -------------------------------------------------------------------------------------
foreach(test_source IN ITEMS test/model/test_model_layout.cpp test/model/test_checkpoint.cpp
                           test/model/test_speedrun_config.cpp test/model/test_speedrun_layout.cpp
                           test/model/test_modded89_layout.cpp
                           test/model/test_speedrun_model_file.cpp
                           test/model/test_modded89_model_file.cpp
                           test/reference/test_reference.cpp
                           test/reference/test_reference_speedrun.cpp
                           test/reference/test_reference_mtp_loss.cpp
                           test/reference/test_reference_modded89.cpp)
  get_filename_component(test_name ${test_source} NAME_WE)
  add_executable(${test_name} ${test_source})
  target_link_libraries(${test_name} PRIVATE llmc_reference GTest::gtest_main)
endforeach()
# cuda_bf16.h compiles under g++; where it exists it is the independent oracle for our bf16 rounding.
if(EXISTS "${LLMC_CUDA_INCLUDE_DIR}/cuda_bf16.h")
  target_include_directories(test_checkpoint PRIVATE ${LLMC_CUDA_INCLUDE_DIR})
  target_compile_definitions(test_checkpoint PRIVATE LLMC_TEST_HAVE_CUDA_BF16=1)
endif()
# The checksum test calls libxxhash itself, as the independent check of the stored value.
target_include_directories(test_checkpoint SYSTEM PRIVATE ${LLMC_XXHASH_INCLUDE_DIR})
gtest_discover_tests(test_model_layout DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
gtest_discover_tests(test_checkpoint DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
gtest_discover_tests(test_speedrun_config DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
gtest_discover_tests(test_speedrun_layout DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
gtest_discover_tests(test_modded89_layout DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
gtest_discover_tests(test_speedrun_model_file DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
gtest_discover_tests(test_modded89_model_file DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS model)
# gtest_discover_tests flattens a list-valued LABELS, so the second label is added by a CTest include
# file that runs after discovery, over the discovered names (TEST_LIST).
gtest_discover_tests(test_reference DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} TEST_LIST llmc_reference_gtests)
gtest_discover_tests(test_reference_speedrun DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT}
                     TEST_LIST llmc_reference_speedrun_gtests)
gtest_discover_tests(test_reference_mtp_loss DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT}
                     TEST_LIST llmc_reference_mtp_gtests)
gtest_discover_tests(test_reference_modded89 DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT}
                     TEST_LIST llmc_reference_modded89_gtests)
file(WRITE ${CMAKE_BINARY_DIR}/model_reference_labels.cmake
  "foreach(name IN LISTS llmc_reference_gtests llmc_reference_speedrun_gtests llmc_reference_mtp_gtests\n"
  "                      llmc_reference_modded89_gtests)\n"
  "  set_tests_properties(\"\${name}\" PROPERTIES LABELS \"model;reference\")\n"
  "endforeach()\n")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_BINARY_DIR}/model_reference_labels.cmake)

# Cross-check of the reference model against an independent JAX GPT-2 (skips, visibly, without JAX).
add_executable(reference_dump test/reference/reference_dump.cpp)
target_link_libraries(reference_dump PRIVATE llmc_reference CLI11::CLI11)
add_test(NAME reference_vs_jax
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/reference/check_reference_jax.py
          --dump $<TARGET_FILE:reference_dump>)
set_tests_properties(reference_vs_jax PROPERTIES LABELS "model;reference" SKIP_RETURN_CODE 77 TIMEOUT 120)

# Cross-check of the reference speedrun model against an independent JAX model written from the spec.
add_executable(speedrun_dump test/reference/speedrun_dump.cpp)
target_link_libraries(speedrun_dump PRIVATE llmc_reference CLI11::CLI11 nlohmann_json::nlohmann_json)
add_test(NAME speedrun_reference_vs_jax
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/reference/check_speedrun_jax.py
          --dump $<TARGET_FILE:speedrun_dump>)
set_tests_properties(speedrun_reference_vs_jax PROPERTIES LABELS "model;reference" SKIP_RETURN_CODE 77 TIMEOUT 300)

# Cross-check of the double-precision 2026-07-17 model against an independent JAX model written from the recipe.
add_executable(modded89_dump test/reference/modded89_dump.cpp)
target_link_libraries(modded89_dump PRIVATE llmc_reference CLI11::CLI11 nlohmann_json::nlohmann_json)
add_test(NAME modded89_reference_vs_jax
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/reference/check_modded89_jax.py
          --dump $<TARGET_FILE:modded89_dump>)
set_tests_properties(modded89_reference_vs_jax PROPERTIES LABELS "model;reference" SKIP_RETURN_CODE 77 TIMEOUT 300)
