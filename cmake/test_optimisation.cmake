# cmake/test_optimisation.cmake: host test programs (every source under test/: gtest binaries, probes,
# dump tools, fuzz replays) compile at -O1 in Release builds, as the emulated test binaries do
# (emu.cmake). At -O3 CLI11, <regex> and gtest made them a quarter of a fresh build's host compile time
# (test_train_utils: 16.5 s of CPU at -O3, 8.1 s at -O1); they run in milliseconds either way. Libraries
# (the double reference included) and the programs stay at -O3. Included last: it walks every target.
get_property(llmc_all_targets DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
foreach(target IN LISTS llmc_all_targets)
  get_target_property(target_type ${target} TYPE)
  if(NOT target_type STREQUAL "EXECUTABLE")
    continue()
  endif()
  get_target_property(target_sources ${target} SOURCES)
  set(only_test_sources TRUE)
  foreach(source IN LISTS target_sources)
    if(NOT source MATCHES "^(${CMAKE_SOURCE_DIR}/)?test/")
      set(only_test_sources FALSE)
    endif()
  endforeach()
  if(only_test_sources)
    target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  endif()
endforeach()
