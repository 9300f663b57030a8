# cmake/train.cmake: the trainer's host-side utilities (options and recipes, lr schedules incl. the speedrun's
# and its window schedule, MFU, step log and its header, checkpoints: state files, manifests, the
# all-or-nothing writer, the reader, pruning; ZeRO's state arrays and their re-sharding; stop signals, the
# watchdog; test hooks, samples) and their tests.
# The checkpoint's own files (per-rank state, manifest): a library of their own, so the fuzz targets link
# only these readers.
add_library(llmc_checkpoint_files STATIC llmc/checkpoint/state_file.cpp llmc/checkpoint/manifest.cpp)
target_link_libraries(llmc_checkpoint_files PUBLIC llmc_flags llmc_files PRIVATE nlohmann_json::nlohmann_json)

add_library(llmc_train_utils STATIC llmc/schedule/lr_schedule.cpp llmc/schedule/speedrun_schedule.cpp
  llmc/schedule/modded89_schedule.cpp llmc/train/mfu.cpp llmc/train/log.cpp llmc/train/options.cpp
  llmc/train/debug_hooks.cpp llmc/checkpoint/checkpoint_dir.cpp
  llmc/optim/zero_state.cpp llmc/checkpoint/checkpoint_reader.cpp llmc/checkpoint/checkpoint_writer.cpp llmc/train/stop_signals.cpp
  llmc/train/watchdog.cpp llmc/train/window_schedule.cpp llmc/train/loss_schedule.cpp llmc/train/batch_schedule.cpp
  llmc/train/recipe.cpp llmc/train/train_batches.cpp)
target_link_libraries(llmc_train_utils PUBLIC llmc_flags CLI11::CLI11 llmc_command_line llmc_data llmc_model
                      llmc_tokenizer llmc_checkpoint_files PRIVATE nlohmann_json::nlohmann_json)
# The trainer's samples (--sample-every) run the generation loop of llmc_generate (cmake/generate.cmake).
add_library(llmc_train_samples STATIC llmc/train/samples.cpp)
target_link_libraries(llmc_train_samples PUBLIC llmc_flags llmc_generate llmc_tokenizer)

add_executable(test_train_utils test/train/test_train_utils.cpp)
target_link_libraries(test_train_utils PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_train_utils DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)

add_executable(test_train_state test/train/test_train_state.cpp)
target_link_libraries(test_train_state PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_train_state DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)

add_executable(test_speedrun_schedule test/train/test_speedrun_schedule.cpp)
target_link_libraries(test_speedrun_schedule PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_speedrun_schedule DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)
add_executable(test_modded89_schedule test/train/test_modded89_schedule.cpp)
target_link_libraries(test_modded89_schedule PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_modded89_schedule DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)

add_executable(test_train_batches test/train/test_train_batches.cpp)
target_link_libraries(test_train_batches PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_train_batches DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)

add_executable(test_recipe test/train/test_recipe.cpp)
target_link_libraries(test_recipe PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_recipe DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)

add_executable(test_checkpoint_set test/train/test_checkpoint_set.cpp)
target_link_libraries(test_checkpoint_set PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_checkpoint_set DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)

add_executable(test_stop_watchdog test/train/test_stop_watchdog.cpp)
target_link_libraries(test_stop_watchdog PRIVATE llmc_train_utils GTest::gtest_main)
gtest_discover_tests(test_stop_watchdog DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS train)
