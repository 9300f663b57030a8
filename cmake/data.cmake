# cmake/data.cmake: token shards (llmc_shards), the data loaders (llmc_data: GPT-2 windows, the speedrun's
# BOS-aligned packing and validation chunks), the shared file helpers below them (llmc_files), and their
# tests, with the test of llmc/'s top-level helpers (test/base/). The unit tests write their own tiny files
# into a temporary directory (about a second); the Python check of the BOS loader tokenizes the shared
# texts first (about ten seconds).
# The host helpers of llmc/base/ ("path: problem" errors, file handles, directories), checksums, the atomic
# writer and the seeded normal sampler. XXH3 checksums come from libxxhash's header (inlined: nothing to link).
find_path(LLMC_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
add_library(llmc_files STATIC llmc/base/file_io.cpp llmc/base/atomic_file.cpp llmc/base/checksum.cpp
  llmc/base/normal_sampler.cpp)
target_include_directories(llmc_files SYSTEM PRIVATE ${LLMC_XXHASH_INCLUDE_DIR})
target_link_libraries(llmc_files PUBLIC llmc_flags)

# The benchmarks' and probes' command lines (llmc/base/command_line.h): CLI11 compiled here once.
add_library(llmc_command_line STATIC llmc/base/command_line.cpp)
target_link_libraries(llmc_command_line PUBLIC llmc_flags PRIVATE CLI11::CLI11)

add_executable(test_base_helpers test/base/test_base_helpers.cpp)
target_link_libraries(test_base_helpers PRIVATE llmc_files Threads::Threads GTest::gtest_main)
gtest_discover_tests(test_base_helpers DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS data)

add_library(llmc_shards STATIC llmc/data/shards.cpp)
target_link_libraries(llmc_shards PUBLIC llmc_files)

add_library(llmc_data STATIC llmc/data/dataloader.cpp llmc/data/document_packing.cpp llmc/data/bos_loader.cpp
  llmc/data/packed_val_loader.cpp llmc/data/bigram_hash.cpp)
target_link_libraries(llmc_data PUBLIC llmc_shards Threads::Threads)

add_executable(test_shards test/data/test_shards.cpp)
target_link_libraries(test_shards PRIVATE llmc_shards GTest::gtest_main)
gtest_discover_tests(test_shards DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS data)

add_executable(test_dataloader test/data/test_dataloader.cpp test/data/test_bigram_hash.cpp)
target_link_libraries(test_dataloader PRIVATE llmc_data GTest::gtest_main)
gtest_discover_tests(test_dataloader DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS data)

add_executable(test_bos_loader test/data/test_bos_loader.cpp)
target_link_libraries(test_bos_loader PRIVATE llmc_data GTest::gtest_main)
gtest_discover_tests(test_bos_loader DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS data)

# The dealing rule against an independent Python implementation, on the shared KJV and tiny-shakespeare
# texts split into documents and tokenized by ./tokenize_gpt2 (bos_loader_probe writes what the loaders deal).
add_executable(bos_loader_probe test/data/bos_loader_probe.cpp)
target_link_libraries(bos_loader_probe PRIVATE llmc_data CLI11::CLI11)
add_test(NAME bos_loader_vs_python
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/data/check_bos_loader.py
          --probe $<TARGET_FILE:bos_loader_probe> --tokenizer $<TARGET_FILE:tokenize_gpt2> --shared ${LLMC_SHARED_DIR})
set_tests_properties(bos_loader_vs_python PROPERTIES LABELS data TIMEOUT 300)

# The bigram table's gradient exchange, sparse rows vs a dense reduce-scatter (bytes on the wire per Adam step,
# docs/distributed.md#the-bigram-tables-gradient-exchange), on the shared KJV text tokenized by ./tokenize_gpt2:
# smoke-run so that it cannot rot; the table in the docs comes from the same command.
add_executable(bench_bigram_exchange test/data/bench_bigram_exchange.cpp)
target_link_libraries(bench_bigram_exchange PRIVATE llmc_data CLI11::CLI11)
add_test(NAME bench_bigram_exchange_smoke
  COMMAND sh -c "rm -rf ${CMAKE_CURRENT_BINARY_DIR}/bigram_exchange && $<TARGET_FILE:tokenize_gpt2> --output-dir ${CMAKE_CURRENT_BINARY_DIR}/bigram_exchange --name kjv \
--val-tokens 0 ${LLMC_SHARED_DIR}/data/text/kjv.txt && $<TARGET_FILE:bench_bigram_exchange> \
--shard ${CMAKE_CURRENT_BINARY_DIR}/bigram_exchange/kjv_train_000001.bin")
set_tests_properties(bench_bigram_exchange_smoke PROPERTIES LABELS data TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "\\| 3 \\| 49152 \\| 8 \\| [0-9]+ \\| 507\\.")
