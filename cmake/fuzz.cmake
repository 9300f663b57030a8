# cmake/fuzz.cmake: fuzz targets for every reader of untrusted input (test/fuzz/, docs/robustness.md):
# token shards, model files (GPT-2's llm.c format and the speedrun format), optimizer-state files,
# checkpoint manifests, tokenize_gpt2's text and JSONL input. Every build links each target with a replay driver and runs it over its committed seed corpus
# and regression inputs (tests fuzz_replay.<target>, about a second in all). With -DLLMC_FUZZ=ON (clang;
# `make fuzz`) they are libFuzzer binaries under ASan + UBSan and
# `ctest -L fuzz` runs each for LLMC_FUZZ_SECONDS from the seeds (new inputs go to build/fuzz_corpus,
# crashing ones to build/fuzz_findings).
set(LLMC_FUZZ_SECONDS 8 CACHE STRING "Seconds each fuzz target runs under ctest in a -DLLMC_FUZZ=ON build")
set(LLMC_FUZZ_VOCAB_DIR "${LLMC_SHARED_DIR}/data/gpt2")

add_library(llmc_fuzz_support STATIC test/fuzz/fuzz_support.cpp)
target_link_libraries(llmc_fuzz_support PUBLIC llmc_files)
add_library(llmc_fuzz_tokenizer STATIC test/fuzz/tokenizer_fixture.cpp)
target_link_libraries(llmc_fuzz_tokenizer PUBLIC llmc_tokenizer)
target_compile_definitions(llmc_fuzz_tokenizer PRIVATE LLMC_FUZZ_VOCAB_DIR="${LLMC_FUZZ_VOCAB_DIR}")

# llmc_add_fuzz_target(NAME LIBS ... [MAX_LEN bytes] [DICT file])
function(llmc_add_fuzz_target name)
  cmake_parse_arguments(ARG "" "MAX_LEN;DICT" "LIBS" ${ARGN})
  set(source test/fuzz/fuzz_${name}.cpp)
  set(inputs ${CMAKE_SOURCE_DIR}/test/fuzz/corpus/${name})
  if(EXISTS ${CMAKE_SOURCE_DIR}/test/fuzz/regressions/${name})
    list(APPEND inputs ${CMAKE_SOURCE_DIR}/test/fuzz/regressions/${name})
  endif()
  if(LLMC_FUZZ)
    add_executable(fuzz_${name} ${source})
    target_link_libraries(fuzz_${name} PRIVATE llmc_fuzz_support ${ARG_LIBS})
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    set(options -max_total_time=${LLMC_FUZZ_SECONDS} -rss_limit_mb=2048 -timeout=20 -print_final_stats=1
                -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz_findings/${name}-)
    if(ARG_MAX_LEN)
      list(APPEND options -max_len=${ARG_MAX_LEN})
    endif()
    if(ARG_DICT)
      list(APPEND options -dict=${CMAKE_SOURCE_DIR}/test/fuzz/${ARG_DICT})
    endif()
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz_corpus/${name} ${CMAKE_BINARY_DIR}/fuzz_findings)
    add_test(NAME fuzz.${name} COMMAND fuzz_${name} ${options} ${CMAKE_BINARY_DIR}/fuzz_corpus/${name} ${inputs})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 300)
    add_dependencies(fuzz_targets fuzz_${name})
  else()
    add_executable(replay_${name} ${source} test/fuzz/replay_main.cpp)
    target_link_libraries(replay_${name} PRIVATE llmc_fuzz_support ${ARG_LIBS})
    add_test(NAME fuzz_replay.${name} COMMAND replay_${name} ${inputs})
    set_tests_properties(fuzz_replay.${name} PROPERTIES LABELS fuzz)
  endif()
endfunction()

if(LLMC_FUZZ)
  add_custom_target(fuzz_targets)
else()
  # Regenerates the seed corpus from the current writers (run by hand: docs/robustness.md).
  add_executable(write_seed_corpus test/fuzz/write_seed_corpus.cpp)
  target_link_libraries(write_seed_corpus PRIVATE llmc_checkpoint_files llmc_shards llmc_model)
endif()

llmc_add_fuzz_target(shard LIBS llmc_data MAX_LEN 4096)
llmc_add_fuzz_target(model_file LIBS llmc_model MAX_LEN 4096)
llmc_add_fuzz_target(speedrun_model_file LIBS llmc_model MAX_LEN 65536)  # the smallest valid file: 48 KB
llmc_add_fuzz_target(state_file LIBS llmc_checkpoint_files MAX_LEN 4096)
llmc_add_fuzz_target(manifest LIBS llmc_checkpoint_files MAX_LEN 2048 DICT json.dict)
llmc_add_fuzz_target(text LIBS llmc_fuzz_tokenizer MAX_LEN 2048)
llmc_add_fuzz_target(jsonl LIBS llmc_fuzz_tokenizer nlohmann_json::nlohmann_json MAX_LEN 8192 DICT json.dict)
