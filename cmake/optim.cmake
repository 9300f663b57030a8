# cmake/optim.cmake: the speedrun optimizers' building blocks -- Polar Express and NorMuon on the device
# (llmc_optim_math_<precision>, compiled once per target and precision), the sharded Adam kernels
# (header-only), the Muon owner planner and cost model and the optimizer's per-rank state plan (pure
# C++) -- their tests against the numpy oracle test/optim/optim_reference.py, and the cost table
# benchmark. Included after emu and kernels.

add_library(llmc_muon_plan STATIC llmc/optim/muon_cost.cpp llmc/optim/muon_owners.cpp llmc/optim/normuon_shape.cpp)
target_link_libraries(llmc_muon_plan PUBLIC llmc_flags)

# What each rank of the speedrun optimizer holds, the re-sharding of its checkpoints, its collectives and the
# sparse row exchange's plan (pure C++).
add_library(llmc_speedrun_state STATIC llmc/optim/speedrun_state_plan.cpp llmc/optim/tensor_roles.cpp
  llmc/optim/speedrun_collectives.cpp llmc/optim/sparse_row_exchange.cpp
  llmc/optim/modded89_param_table.cpp)
target_link_libraries(llmc_speedrun_state PUBLIC llmc_muon_plan llmc_model)
add_executable(test_speedrun_state_plan test/optim/test_speedrun_state_plan.cpp test/optim/test_sparse_row_exchange.cpp)
target_link_libraries(test_speedrun_state_plan PRIVATE llmc_speedrun_state GTest::gtest_main)
gtest_discover_tests(test_speedrun_state_plan DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS optim)

# The 2026-07-17 record's per-tensor optimizer table (pure data).
add_executable(test_modded89_param_table test/optim/test_modded89_param_table.cpp)
target_link_libraries(test_modded89_param_table PRIVATE llmc_speedrun_state GTest::gtest_main)
gtest_discover_tests(test_modded89_param_table DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS optim)

add_executable(test_muon_owners test/optim/test_muon_owners.cpp)
target_link_libraries(test_muon_owners PRIVATE llmc_muon_plan GTest::gtest_main)
gtest_discover_tests(test_muon_owners DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS optim)

# Per-rank FLOPs, bytes and time at the H200 ceilings of one Polar Express + NorMuon pass (see
# docs/optimizers.md); the smoke test keeps it from rotting.
add_executable(bench_muon_owners test/optim/bench_muon_owners.cpp)
target_link_libraries(bench_muon_owners PRIVATE llmc_muon_plan CLI11::CLI11)
add_test(NAME optim_bench_smoke COMMAND bench_muon_owners --world 1,2,4,8)
set_tests_properties(optim_bench_smoke PROPERTIES LABELS optim TIMEOUT 60)

set(LLMC_OPTIM_MATH_SOURCES llmc/optim/polar_express.cu llmc/optim/normuon.cu)
foreach(precision IN ITEMS bf16 fp32)
  llmc_emu_wrap_sources(optim_math_sources llmc_optim_math_${precision}_emu ${LLMC_OPTIM_MATH_SOURCES})
  add_library(llmc_optim_math_${precision}_emu STATIC ${optim_math_sources})
  target_link_libraries(llmc_optim_math_${precision}_emu PUBLIC llmc_emu llmc_muon_plan)
  set(math_targets llmc_optim_math_${precision}_emu)
  if(LLMC_HAVE_CUDA AND (precision STREQUAL "bf16" OR (LLMC_BUILD_CUDA_TESTS AND LLMC_CUDA_FP32_TESTS)))
    add_library(llmc_optim_math_${precision}_cuda STATIC ${LLMC_OPTIM_MATH_SOURCES})
    target_link_libraries(llmc_optim_math_${precision}_cuda PUBLIC llmc_flags CUDA::cudart CUDA::cublasLt llmc_muon_plan)
    # Also the GPU optimizer's of its precision (cmake/trainer.cmake builds that under this same condition), so
    # it is compiled once, for the programs' architectures; the tests that link it need only one of them.
    set_target_properties(llmc_optim_math_${precision}_cuda PROPERTIES CUDA_ARCHITECTURES "${LLMC_CUDA_ARCHITECTURES}")
    list(APPEND math_targets llmc_optim_math_${precision}_cuda)
  endif()
  if(precision STREQUAL "fp32")
    foreach(math_target IN LISTS math_targets)
      target_compile_definitions(${math_target} PUBLIC LLMC_FP32)  # users build as fp32 too
    endforeach()
  endif()
endforeach()

# One test binary per precision (the fp32 GPU twin only with -DLLMC_CUDA_FP32_TESTS=ON), run again in the
# drift schedule like every kernel test (docs/emulation.md): it catches a missing barrier in the reduction
# kernels.
set(LLMC_OPTIM_TEST_SOURCES test/optim/test_polar_express.cu test/optim/test_normuon.cu test/optim/test_normuon_bank.cu
    test/optim/test_adam_sharded.cu)
foreach(precision IN ITEMS bf16 fp32)
  set(emu_only "")
  if(precision STREQUAL "fp32" AND NOT LLMC_CUDA_FP32_TESTS)
    set(emu_only EMU_ONLY)
  endif()
  llmc_add_cu_test(NAME optim_math_${precision} LABELS optim TIMEOUT 300 ALSO_SCHEDULES drift ${emu_only}
    SOURCES ${LLMC_OPTIM_TEST_SOURCES}
    EMU_LIBS llmc_optim_math_${precision}_emu CUDA_LIBS llmc_optim_math_${precision}_cuda)
  foreach(target IN ITEMS optim_math_${precision}_emu optim_math_${precision}_cuda)
    if(TARGET ${target})
      target_compile_definitions(${target} PRIVATE LLMC_PYTHON_EXECUTABLE="${Python3_EXECUTABLE}"
                                                   LLMC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
    endif()
  endforeach()
endforeach()

# The speedrun optimizer's collectives per step from its plan at the full model (calls, bytes, time at a bus
# bandwidth); the smoke test keeps it running, multirank.Modded89Optimizer compares its JSON with the trace.
add_executable(bench_speedrun_collectives test/optim/bench_speedrun_collectives.cpp)
target_link_libraries(bench_speedrun_collectives PRIVATE llmc_speedrun_state llmc_train_utils CLI11::CLI11
                      nlohmann_json::nlohmann_json)
add_test(NAME bench_speedrun_collectives_smoke COMMAND bench_speedrun_collectives --model modded89 --world 2,8)
set_tests_properties(bench_speedrun_collectives_smoke PROPERTIES LABELS optim TIMEOUT 60)
