# cmake/test_optimisation.cmake: the one rule for test code's optimisation. Executables built only from
# test sources (every source under test/, or the g++ wrapper of one: the emulated test binaries, the
# emulated benchmarks, probes, dump tools, fuzz replays, the GPU test binaries and benchmarks) compile their host
# code at -O1 in Release builds. Code generation
# is most of a fresh build (one emulated kernel test source: 20 s of CPU at -O3, 12 s at -O1;
# test_train_utils: 16.5 s at -O3, 8.1 s at -O1), and the tests run a third longer at most (kernels_bf16_emu:
# 3.6 s -> 5.0 s of CPU; nvcc's host half of kernels_bf16_cuda's group_1.cu: 19.7 s -> 12.7 s, its whole compile
# 44 s -> 35 s, the device code unchanged: nvcc's -O is the host compiler's, ptxas optimises at -O3 regardless).
# Results are the same (no fast-math, no contraction under -std=c++17). Libraries (the emulation and the double
# reference included) and the programs stay at -O3, but for the .cu files that the emulated build compiles with
# g++, the production libraries' included (llmc_emu_wrap_sources, emu.cmake). Included last: it walks every target.
get_property(llmc_all_targets DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
foreach(target IN LISTS llmc_all_targets)
  get_target_property(target_type ${target} TYPE)
  if(NOT target_type STREQUAL "EXECUTABLE")
    continue()
  endif()
  get_target_property(target_sources ${target} SOURCES)
  set(only_test_sources TRUE)
  foreach(source IN LISTS target_sources)
    # llmc_wrap_cu_for_gxx (emu.cmake) names a wrapper after its source's path: test/x.cu -> .../test_x_cu.cpp.
    # llmc_group_cu_sources groups only test files: .../cu_groups/<target>/group_N.cu (wrapped for g++:
    # .../emu_wrappers/<target>/cu_groups_<target>_group_N_cu.cpp).
    if(NOT source MATCHES "^(${CMAKE_SOURCE_DIR}/)?test/" AND NOT source MATCHES "/emu_wrappers/[^/]+/test_[^/]*_cu\\.cpp$"
       AND NOT source MATCHES "/cu_groups/[^/]+/group_[0-9]+\\.cu$"
       AND NOT source MATCHES "/emu_wrappers/[^/]+/cu_groups_[^/]*_group_[0-9]+_cu\\.cpp$")
      set(only_test_sources FALSE)
    endif()
  endforeach()
  if(only_test_sources)
    target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
    set_target_properties(${target} PROPERTIES LLMC_TEST_CODE ON)  # nvcc's -O1 (CMakeLists.txt: one -O per command)
  endif()
endforeach()
