# cmake/generate.cmake: text generation -- the host side (sampler, generation loop, --model resolution,
# options: llmc_generate), ./generate_gpt2 (nvcc) and ./generate_gpt2_emu (emulated, bf16), an fp32
# emulated build for the tight comparisons, and the tests (label "generate"). The KV-cache decoder itself
# is part of the model core libraries (cmake/trainer.cmake); its kernels' tests are in cmake/kernels.cmake.

add_library(llmc_generate STATIC llmc/generate/sampler.cpp llmc/generate/generation.cpp
            llmc/generate/model_source.cpp llmc/generate/generate_options.cpp)
target_link_libraries(llmc_generate PUBLIC llmc_flags llmc_model llmc_train_utils llmc_tokenizer CLI11::CLI11
                      llmc_command_line)

set(LLMC_GENERATE_SOURCES generate_gpt2.cu llmc/generate/load_decoder.cu)
set(LLMC_GENERATE_LIBS llmc_generate llmc_tokenizer nlohmann_json::nlohmann_json)
llmc_add_cu_executable(NAME generate_gpt2 USER_BINARY HOST_ONLY SOURCES ${LLMC_GENERATE_SOURCES} LIBS ${LLMC_GENERATE_LIBS}
  EMU_LIBS llmc_model_core_bf16_emu CUDA_LIBS llmc_model_core_bf16_cuda)

# fp32 emulated generator (build tree only): the same code with floatX = float, for the oracle checks.
llmc_emu_wrap_sources(generate_gpt2_fp32_emu_sources generate_gpt2_fp32_emu ${LLMC_GENERATE_SOURCES})
add_executable(generate_gpt2_fp32_emu ${generate_gpt2_fp32_emu_sources})
target_link_libraries(generate_gpt2_fp32_emu PRIVATE llmc_model_core_fp32_emu ${LLMC_GENERATE_LIBS})

# ---- tests (label "generate") --------------------------------------------------------------------
# The decoder against the double reference recomputing every step (fp32: tight; bf16; and their GPU twins,
# the fp32 one only with -DLLMC_CUDA_FP32_TESTS=ON).
foreach(precision IN ITEMS bf16 fp32)
  set(emu_only "")
  if(precision STREQUAL "fp32" AND NOT LLMC_CUDA_FP32_TESTS)
    set(emu_only EMU_ONLY)
  endif()
  llmc_add_cu_test(NAME gpt2_decoder_${precision} LABELS generate TIMEOUT 300 ${emu_only} ALSO_SCHEDULES drift
    SOURCES test/generate/test_gpt2_decoder.cu LIBS llmc_reference llmc_model
    EMU_LIBS llmc_model_core_${precision}_emu CUDA_LIBS llmc_model_core_${precision}_cuda)
endforeach()

# The sampler (plain C++): greedy, seeds, and the drawn frequencies against the exact distributions.
add_executable(test_sampler test/generate/test_sampler.cpp)
target_link_libraries(test_sampler PRIVATE llmc_generate GTest::gtest_main)
gtest_discover_tests(test_sampler DISCOVERY_TIMEOUT ${LLMC_TEST_DISCOVERY_TIMEOUT} PROPERTIES LABELS generate)

# The Hugging Face oracle: transformers' GPT-2 (PyTorch when installed, else Flax on JAX; exit 77 =
# skipped without transformers) against a model imported with scripts/import_hf.py and one of our trained
# checkpoints exported with scripts/export_hf.py: logits and loss of both our forwards (forward_probe, fp32
# emulated), and 20 greedy tokens of generate_gpt2 (fp32 emulated).
llmc_emu_wrap_sources(forward_probe_sources forward_probe_fp32_emu test/generate/forward_probe.cu)
add_executable(forward_probe_fp32_emu ${forward_probe_sources})
target_link_libraries(forward_probe_fp32_emu PRIVATE llmc_model_core_fp32_emu llmc_command_line nlohmann_json::nlohmann_json)
add_test(NAME hf_transformers_oracle
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/generate/check_hf_transformers.py
          --generator $<TARGET_FILE:generate_gpt2_fp32_emu> --probe $<TARGET_FILE:forward_probe_fp32_emu>
          --trainer $<TARGET_FILE:train_gpt2_fp32_emu>)
set_tests_properties(hf_transformers_oracle PROPERTIES LABELS "generate;reference" SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "LLMC_SHARED_DIR=${LLMC_SHARED_DIR}")

# export_hf.py / import_hf.py without transformers: exact round trips, the folder's layout, every refusal.
add_test(NAME hf_scripts COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/generate/test_hf_scripts.py)
set_tests_properties(hf_scripts PROPERTIES LABELS generate SKIP_RETURN_CODE 77 TIMEOUT 120
                     ENVIRONMENT "LLMC_SHARED_DIR=${LLMC_SHARED_DIR}")

# The program as a user runs it (small model files written by the test, seconds): seeds, greedy, stdin,
# stopping, UTF-8 streaming against Python's decoder, --model forms, errors, --help against the README.
add_test(NAME generate_program_emu
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/generate/test_generate_program.py
          --generator $<TARGET_FILE:generate_gpt2_emu>)
set_tests_properties(generate_program_emu PROPERTIES LABELS generate TIMEOUT 180
                     ENVIRONMENT "LLMC_SHARED_DIR=${LLMC_SHARED_DIR}")
if(LLMC_HAVE_CUDA)
  # The same tests of the GPU build; "skipped: no GPU" (exit 77) without one.
  add_test(NAME generate_program_cuda
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/generate/test_generate_program.py
            --generator $<TARGET_FILE:generate_gpt2> --require-gpu)
  set_tests_properties(generate_program_cuda PROPERTIES LABELS "generate;cuda" TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "LLMC_SHARED_DIR=${LLMC_SHARED_DIR}")
endif()

# Generation benchmark (bench_generate on a GPU; the emulated build prints the per-token accounting and is
# smoke-tested running the decoder at d1 so that the benchmark cannot rot).
llmc_add_cu_executable(NAME bench_generate BENCHMARK SOURCES test/generate/bench_generate.cu LIBS llmc_generate llmc_command_line
  EMU_LIBS llmc_model_core_bf16_emu CUDA_LIBS llmc_model_core_bf16_cuda)
add_test(NAME generate_bench_smoke_emu
  COMMAND bench_generate_emu --model d1 --prompt-tokens 5 --new-tokens 3 --contexts 8 --run)
set_tests_properties(generate_bench_smoke_emu PROPERTIES LABELS generate TIMEOUT 120)
add_test(NAME generate_bench_modded89_smoke_emu
  COMMAND bench_generate_emu --model modded89-tiny --contexts 1,8,64 --prompt-tokens 5 --new-tokens 20 --run)
set_tests_properties(generate_bench_modded89_smoke_emu PROPERTIES LABELS generate TIMEOUT 120)
