# cmake/tokenizer.cmake: the GPT-2 tokenizer library (llmc_tokenizer), the ./tokenize_gpt2 tool,
# and their tests (label "tokenizer"): GoogleTest unit tests, tiktoken comparisons, an end-to-end
# run of tokenize_gpt2. The whole set runs in well under a minute on two cores.
add_library(llmc_tokenizer STATIC
  llmc/tokenizer/utf8.cpp llmc/tokenizer/bpe_vocab.cpp llmc/tokenizer/pretokenizer.cpp llmc/tokenizer/piece_cache.cpp llmc/tokenizer/tokenizer.cpp
  llmc/tokenizer/parallel_encode.cpp llmc/tokenizer/utf8_stream.cpp llmc/tokenizer/document_reader.cpp
  llmc/tokenizer/token_prefixes.cpp)
target_link_libraries(llmc_tokenizer
  PUBLIC llmc_flags Threads::Threads
  PRIVATE llmc_files PkgConfig::PCRE2 nlohmann_json::nlohmann_json)

add_executable(tokenize_gpt2 data/tokenize_gpt2.cpp)
target_link_libraries(tokenize_gpt2 PRIVATE llmc_tokenizer llmc_shards CLI11::CLI11 nlohmann_json::nlohmann_json)
llmc_user_binary(tokenize_gpt2)

# Helper the Python tests and scripts/bench_tokenizer.py drive (stays in the build directory).
add_executable(tokenizer_probe test/tokenizer/tokenizer_probe.cpp)
target_link_libraries(tokenizer_probe PRIVATE llmc_tokenizer nlohmann_json::nlohmann_json)

add_executable(test_tokenizer test/tokenizer/test_tokenizer.cpp test/tokenizer/test_utf8_stream.cpp
  test/tokenizer/test_token_prefixes.cpp)
target_link_libraries(test_tokenizer PRIVATE llmc_tokenizer llmc_shards GTest::gtest_main)
target_compile_definitions(test_tokenizer PRIVATE LLMC_SHARED_DIR="${LLMC_SHARED_DIR}")
gtest_discover_tests(test_tokenizer DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS tokenizer)

add_test(NAME tokenizer_vs_tiktoken
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/tokenizer/test_tokenizer_tiktoken.py
          --probe $<TARGET_FILE:tokenizer_probe> --shared ${LLMC_SHARED_DIR})
add_test(NAME tokenize_gpt2_end_to_end
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/tokenizer/test_tokenize_gpt2.py
          --tool $<TARGET_FILE:tokenize_gpt2> --shared ${LLMC_SHARED_DIR})
add_test(NAME token_prefixes_vs_tiktoken
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/tokenizer/test_token_prefixes_tiktoken.py
          --probe $<TARGET_FILE:tokenizer_probe> --shared ${LLMC_SHARED_DIR})
set_tests_properties(tokenizer_vs_tiktoken tokenize_gpt2_end_to_end token_prefixes_vs_tiktoken PROPERTIES LABELS tokenizer)
