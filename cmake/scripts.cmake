# cmake/scripts.cmake: tests of the speedrun workflow's Python and shell tools (label "scripts"):
# compare_runs.py statistics, add_record.py, the 8xH100 projection (project_speedrun.py), the recipe
# comparison's bookkeeping (bench_recipes.py), the FineWeb downloader against a local HTTP server, the
# tokenizing data scripts (through ./tokenize_gpt2), the run scripts' dry runs, that every path the README and
# docs/ name exists, and that llmc/'s includes follow docs/architecture.md's layers. Seconds each.
set(LLMC_SCRIPTS_TEST_DIR ${CMAKE_SOURCE_DIR}/test/scripts)
set(LLMC_SCRIPTS_ENV "LLMC_SHARED_DIR=${LLMC_SHARED_DIR}")
if(TARGET tokenize_gpt2)
  # The downloader test serves shards made by tokenize_gpt2 (numpy-written ones without it).
  list(APPEND LLMC_SCRIPTS_ENV "LLMC_TOKENIZE_GPT2=$<TARGET_FILE:tokenize_gpt2>")
endif()

function(llmc_scripts_test name module)
  add_test(NAME ${name}
    COMMAND ${Python3_EXECUTABLE} -m unittest -v ${module}
    WORKING_DIRECTORY ${LLMC_SCRIPTS_TEST_DIR})
  set_tests_properties(${name} PROPERTIES LABELS scripts ENVIRONMENT "${LLMC_SCRIPTS_ENV}"
                       TIMEOUT 300)
endfunction()

llmc_scripts_test(scripts_compare_runs test_compare_runs)
llmc_scripts_test(scripts_add_record test_add_record)
llmc_scripts_test(scripts_project_speedrun test_project_speedrun)
llmc_scripts_test(scripts_bench_recipes test_bench_recipes)
llmc_scripts_test(scripts_fineweb_download test_fineweb_download)
llmc_scripts_test(scripts_run_scripts test_run_scripts)
llmc_scripts_test(scripts_doc_paths test_doc_paths)
llmc_scripts_test(scripts_layering test_layering)
if(TARGET tokenize_gpt2)
  llmc_scripts_test(scripts_data_tokenize test_data_scripts)
else()
  message(WARNING "scripts: no tokenize_gpt2 target, so the data-script test scripts_data_tokenize "
                  "is not registered")
endif()
