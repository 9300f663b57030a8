# cmake/trainer.cmake: the train_gpt2 program -- ./train_gpt2 (nvcc, when present) and ./train_gpt2_emu
# (g++ + the CUDA emulation, always) -- plus an fp32 emulated build for tight reference checks, and the
# tests of the optimizer and of the program. Included after the kernels and comm components.

# The commit the binaries are built from, for the log header ("-dirty" with uncommitted changes).
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE LLMC_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE git_status)
if(NOT git_status EQUAL 0 OR LLMC_GIT_COMMIT STREQUAL "")
  set(LLMC_GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} RESULT_VARIABLE git_dirty)
  if(NOT git_dirty EQUAL 0)
    string(APPEND LLMC_GIT_COMMIT "-dirty")
  endif()
endif()
# In one generated source (rewritten only when the commit changes): a commit recompiles that file alone.
configure_file(cmake/build_commit.cpp.in ${CMAKE_BINARY_DIR}/generated/build_commit.cpp @ONLY)
add_library(llmc_build_commit STATIC ${CMAKE_BINARY_DIR}/generated/build_commit.cpp)
target_include_directories(llmc_build_commit PRIVATE ${CMAKE_SOURCE_DIR})

# The device models (gpt2, speedrun_model, device arena, run info, the trainer's model families) and the
# optimizer (zero) are compiled once per target and precision, as static libraries shared by the programs
# and the tests: nvcc compiles for two architectures and these sources include every kernel, so compiling
# them once each keeps the build short.
# The KV-cache decoder (llmc/generate/) reads the same parameters, so it lives here too: the trainer's
# samples and ./generate_gpt2 both use it.
set(LLMC_MODEL_CORE_SOURCES llmc/model/gpt2/gpt2.cu llmc/model/gpt2/gpt2_family.cu llmc/model/gpt2/gpt2_decoder.cu
    llmc/model/modded44/speedrun_model.cu llmc/model/modded44/speedrun_family.cu llmc/model/modded89/modded89_model.cu
    llmc/model/modded89/modded89_family.cu llmc/model/modded89/modded89_decoder.cu
    llmc/model/modded89/modded89_fp8_mlp.cu llmc/cuda/device_arena.cu llmc/family/loss_means.cu
    llmc/family/row_sparse_zeroing.cu llmc/cuda/int_list_upload.cu
    llmc/train/run_info.cu llmc/model/registry.cpp)
# The optimizer library also holds the training step that drives model and optimizer (train_step.cu). The
# speedrun optimizer uses Polar Express and NorMuon (llmc_optim_math_<precision>_emu/_cuda, cmake/optim.cmake).
set(LLMC_OPTIMIZER_SOURCES llmc/optim/zero.cu llmc/optim/speedrun_optimizer.cu llmc/train/train_step.cu
  llmc/train/step_graphs.cu)
set(LLMC_TRAINER_LIBS llmc_train_utils llmc_train_samples llmc_model llmc_data CLI11::CLI11 nlohmann_json::nlohmann_json)
foreach(precision IN ITEMS bf16 fp32)
  llmc_emu_wrap_sources(core_sources llmc_model_core_${precision}_emu ${LLMC_MODEL_CORE_SOURCES})
  add_library(llmc_model_core_${precision}_emu STATIC ${core_sources})
  target_link_libraries(llmc_model_core_${precision}_emu PUBLIC llmc_emu llmc_model llmc_train_utils)
  llmc_emu_wrap_sources(optimizer_sources llmc_optimizer_${precision}_emu ${LLMC_OPTIMIZER_SOURCES})
  add_library(llmc_optimizer_${precision}_emu STATIC ${optimizer_sources})
  target_link_libraries(llmc_optimizer_${precision}_emu PUBLIC llmc_model_core_${precision}_emu llmc_comm_emu
                        llmc_trace_emu llmc_data llmc_optim_math_${precision}_emu llmc_speedrun_state)
  set(core_targets llmc_model_core_${precision}_emu llmc_optimizer_${precision}_emu)
  if(LLMC_HAVE_CUDA AND (precision STREQUAL "bf16" OR (LLMC_BUILD_CUDA_TESTS AND LLMC_CUDA_FP32_TESTS)))
    add_library(llmc_model_core_${precision}_cuda STATIC ${LLMC_MODEL_CORE_SOURCES})
    target_link_libraries(llmc_model_core_${precision}_cuda PUBLIC llmc_flags llmc_model llmc_train_utils CUDA::cudart
                          CUDA::cublasLt)
    add_library(llmc_optimizer_${precision}_cuda STATIC ${LLMC_OPTIMIZER_SOURCES})
    target_link_libraries(llmc_optimizer_${precision}_cuda PUBLIC llmc_model_core_${precision}_cuda llmc_comm llmc_trace
                          llmc_data llmc_optim_math_${precision}_cuda llmc_speedrun_state)
    set_target_properties(llmc_model_core_${precision}_cuda llmc_optimizer_${precision}_cuda
                          PROPERTIES CUDA_ARCHITECTURES "${LLMC_CUDA_ARCHITECTURES}")
    list(APPEND core_targets llmc_model_core_${precision}_cuda llmc_optimizer_${precision}_cuda)
  endif()
  foreach(core_target IN LISTS core_targets)
    target_link_libraries(${core_target} PUBLIC llmc_build_commit)
    if(precision STREQUAL "fp32")
      target_compile_definitions(${core_target} PUBLIC LLMC_FP32)  # users of the fp32 core build as fp32 too
    endif()
  endforeach()
endforeach()

# The trainer (llmc/train/trainer.h: the run's wiring and its loop): host code that depends on the precision,
# compiled with g++ for each target (HOST_ONLY, as the programs), once per precision and shared by
# train_gpt2 and the step benchmark.
set(LLMC_TRAINER_SOURCES llmc/train/training_run.cu llmc/train/trainer.cu)
foreach(precision IN ITEMS bf16 fp32)
  llmc_emu_wrap_sources(trainer_sources llmc_trainer_${precision}_emu ${LLMC_TRAINER_SOURCES})
  add_library(llmc_trainer_${precision}_emu STATIC ${trainer_sources})
  target_link_libraries(llmc_trainer_${precision}_emu PUBLIC llmc_optimizer_${precision}_emu ${LLMC_TRAINER_LIBS})
endforeach()
if(LLMC_HAVE_CUDA)
  llmc_wrap_cu_for_gxx(trainer_cuda_sources llmc_trainer_bf16_cuda "for the GPU build (host-only code)"
                       ${LLMC_TRAINER_SOURCES})
  add_library(llmc_trainer_bf16_cuda STATIC ${trainer_cuda_sources})
  target_link_libraries(llmc_trainer_bf16_cuda PUBLIC llmc_flags CUDA::cudart llmc_optimizer_bf16_cuda
                        ${LLMC_TRAINER_LIBS})
endif()

llmc_add_cu_executable(NAME train_gpt2 USER_BINARY HOST_ONLY SOURCES train_gpt2.cu LIBS ${LLMC_TRAINER_LIBS}
  EMU_LIBS llmc_trainer_bf16_emu CUDA_LIBS llmc_trainer_bf16_cuda)

# fp32 emulated trainer (build tree only): the same code with floatX = float, for the reference checks.
llmc_emu_wrap_sources(train_gpt2_fp32_emu_sources train_gpt2_fp32_emu train_gpt2.cu)
add_executable(train_gpt2_fp32_emu ${train_gpt2_fp32_emu_sources})
target_link_libraries(train_gpt2_fp32_emu PRIVATE llmc_trainer_fp32_emu ${LLMC_TRAINER_LIBS})

# The device models (GPT-2, speedrun, the 2026-07-17 model's forward) against their references (loss and every gradient, accumulation,
# determinism).
# (The fp32 GPU twins of this and the next test exist only with -DLLMC_CUDA_FP32_TESTS=ON.)
foreach(precision IN ITEMS bf16 fp32)
  set(emu_only "")
  if(precision STREQUAL "fp32" AND NOT LLMC_CUDA_FP32_TESTS)
    set(emu_only EMU_ONLY)
  endif()
  llmc_add_cu_test(NAME gpt2_${precision} LABELS model TIMEOUT 300 ${emu_only} ALSO_SCHEDULES drift
    SOURCES test/model/test_gpt2.cu LIBS llmc_reference llmc_model
    EMU_LIBS llmc_model_core_${precision}_emu CUDA_LIBS llmc_model_core_${precision}_cuda)
  llmc_add_cu_test(NAME speedrun_model_${precision} LABELS model TIMEOUT 300 ${emu_only} ALSO_SCHEDULES drift
    SOURCES test/model/test_speedrun_model.cu LIBS llmc_reference llmc_model
    EMU_LIBS llmc_model_core_${precision}_emu CUDA_LIBS llmc_model_core_${precision}_cuda)
  llmc_add_cu_test(NAME modded89_model_${precision} LABELS model TIMEOUT 300 ${emu_only}
    SOURCES test/model/test_modded89_model.cu test/model/test_modded89_fp8_mlp.cu test/model/test_row_sparse_zeroing.cu
    LIBS llmc_reference llmc_model
    EMU_LIBS llmc_model_core_${precision}_emu CUDA_LIBS llmc_model_core_${precision}_cuda)
  foreach(variant IN ITEMS emu cuda)  # the GPT-2 BPE files of the prefix table (LLMC_SHARED_DIR overrides)
    if(TARGET modded89_model_${precision}_${variant})
      target_compile_definitions(modded89_model_${precision}_${variant} PRIVATE LLMC_SHARED_DIR="${LLMC_SHARED_DIR}")
    endif()
  endforeach()
  llmc_add_cu_test(NAME train_steps_${precision} LABELS trainer TIMEOUT 300 ${emu_only} ALSO_SCHEDULES drift
    SOURCES test/optim/test_train_steps.cu LIBS llmc_reference llmc_model
    EMU_LIBS llmc_optimizer_${precision}_emu CUDA_LIBS llmc_optimizer_${precision}_cuda)
endforeach()

# The trainer's loss scale against the record's (fp32 emulated: the trainer's GPU library is bf16 only).
llmc_add_cu_test(NAME loss_scale_fp32 LABELS trainer TIMEOUT 300 EMU_ONLY
  SOURCES test/train/test_loss_scale.cu LIBS llmc_reference llmc_model EMU_LIBS llmc_trainer_fp32_emu)

# The speedrun model's training in each build against the double-precision model's gradients, as a table
# (docs/speedrun_model.md "Agreement with the record's arithmetic"); smoke-tested at 4 steps.
foreach(precision IN ITEMS bf16 fp32)
  llmc_emu_wrap_sources(agreement_sources speedrun_agreement_probe_${precision}_emu test/train/speedrun_agreement_probe.cu)
  add_executable(speedrun_agreement_probe_${precision}_emu ${agreement_sources})
  target_link_libraries(speedrun_agreement_probe_${precision}_emu PRIVATE llmc_trainer_${precision}_emu llmc_reference GTest::gtest
                        llmc_command_line)
  add_test(NAME speedrun_agreement_probe_${precision}_smoke COMMAND speedrun_agreement_probe_${precision}_emu --steps 4)
  set_tests_properties(speedrun_agreement_probe_${precision}_smoke PROPERTIES LABELS trainer TIMEOUT 120
                       ENVIRONMENT "${LLMC_MPI_ROOT_ENV}")
endforeach()

# The speedrun optimizer on 1, 2 and 4 emulated ranks against the composition of NorMuonRunner and the
# sharded Adam kernel on one rank, bitwise, and its overlap modes against each other (every rank runs every
# test: test/dist/comm_test_main.cpp). bf16 only: the test's exact mean over ranks relies on bf16 gradients.
llmc_emu_wrap_sources(speedrun_optimizer_emu_sources speedrun_optimizer_emu
  test/optim/test_speedrun_optimizer.cu test/dist/comm_test_main.cpp)
add_executable(speedrun_optimizer_emu ${speedrun_optimizer_emu_sources})
target_link_libraries(speedrun_optimizer_emu PRIVATE llmc_optimizer_bf16_emu llmc_model GTest::gtest)
add_test(NAME speedrun_optimizer_emu_np1 COMMAND speedrun_optimizer_emu)
# 4 ranks run 4 copies of each test: there, the record's and the split owner arrangements and the overlap
# modes (the other arrangements and the back-to-back steps run on 1 and 2 ranks), to fit CI's budget.
set(speedrun_optimizer_np2_filter "*")
set(speedrun_optimizer_np4_filter "*/Record:*/SplitTensors:*OverlapModes*")
foreach(np IN ITEMS 2 4)
  add_test(NAME speedrun_optimizer_emu_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
                   ${MPIEXEC_PREFLAGS} $<TARGET_FILE:speedrun_optimizer_emu> ${MPIEXEC_POSTFLAGS}
                   --gtest_filter=${speedrun_optimizer_np${np}_filter})
endforeach()
set_tests_properties(speedrun_optimizer_emu_np1 speedrun_optimizer_emu_np2 speedrun_optimizer_emu_np4
  PROPERTIES LABELS "optim;multirank" TIMEOUT 300 ENVIRONMENT "${LLMC_MPI_ROOT_ENV}")
# The mutant: the emulation drops the compute stream's waits on the optimizer's streams; the steps enqueued
# back to back must then differ from the steps run one by one (the test fails, so this entry passes).
add_test(NAME speedrun_optimizer_emu_dropped_waits
         COMMAND speedrun_optimizer_emu --gtest_filter=*StepsEnqueuedBackToBack*)
set_tests_properties(speedrun_optimizer_emu_dropped_waits PROPERTIES LABELS optim TIMEOUT 300 WILL_FAIL TRUE
  ENVIRONMENT "${LLMC_MPI_ROOT_ENV};LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS=1")

# The same optimizer under the 2026-07-17 recipe (banks with mantissas, the table's Adam, the tie and the untie)
# against its composition on one rank, bitwise, and its overlap modes against each other.
llmc_emu_wrap_sources(modded89_optimizer_emu_sources modded89_optimizer_emu
  test/optim/test_modded89_optimizer.cu test/dist/comm_test_main.cpp)
add_executable(modded89_optimizer_emu ${modded89_optimizer_emu_sources})
target_link_libraries(modded89_optimizer_emu PRIVATE llmc_optimizer_bf16_emu llmc_model GTest::gtest)
# 1 rank: all owned (the same as the default there); 2 ranks: everything; 4: the default owners (CI's budget).
add_test(NAME modded89_optimizer_emu_np1 COMMAND modded89_optimizer_emu --gtest_filter=*/AllOwned)
set(modded89_optimizer_np2_filter "*")
set(modded89_optimizer_np4_filter "*/Default")
foreach(np IN ITEMS 2 4)
  add_test(NAME modded89_optimizer_emu_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
                   ${MPIEXEC_PREFLAGS} $<TARGET_FILE:modded89_optimizer_emu> ${MPIEXEC_POSTFLAGS}
                   --gtest_filter=${modded89_optimizer_np${np}_filter})
endforeach()
set_tests_properties(modded89_optimizer_emu_np1 modded89_optimizer_emu_np2 modded89_optimizer_emu_np4
  PROPERTIES LABELS "optim;multirank" TIMEOUT 300 ENVIRONMENT "${LLMC_MPI_ROOT_ENV}")

# ---- tests of training (label "trainer") ----------------------------------------------------------
set(LLMC_MPI_SINGLETON_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

# The step benchmark (docs/benchmarks.md "Training step"): bench_step on a GPU; bench_step_emu enqueues a
# full-size step without executing it (launches, host waits, bytes, FLOPs, ceilings). Smoke-tested at a
# tiny size, as enqueued only and executed, so that it cannot rot.
llmc_add_cu_executable(NAME bench_step BENCHMARK HOST_ONLY SOURCES test/train/bench_step.cu LIBS ${LLMC_TRAINER_LIBS} llmc_command_line
  EMU_LIBS llmc_trainer_bf16_emu CUDA_LIBS llmc_trainer_bf16_cuda)
add_test(NAME train_bench_step_smoke_emu COMMAND bench_step_emu --model tiny -b 2 -t 16 --steps 2)
add_test(NAME train_bench_step_executed_emu COMMAND bench_step_emu --model tiny -b 2 -t 16 --steps 2 --execute)
# The same wiring as train_gpt2's: the speedrun model with its own optimizer.
add_test(NAME train_bench_step_speedrun_emu COMMAND bench_step_emu --model speedrun-tiny -b 1 -t 64 --steps 2)
# The 2026-07-17 model, executed: every launch it makes is costed (the run fails on a kernel without figures).
add_test(NAME train_bench_step_modded89_emu
         COMMAND bench_step_emu --model modded89-tiny -b 1 -t 64 --steps 1 --execute --require-costs)
# Its steps as CUDA graph launches (train_gpt2 --cuda-graphs), replayed in the observed steps.
add_test(NAME train_bench_step_graphs_emu
         COMMAND bench_step_emu --model modded89-tiny -b 1 -t 64 --steps 1 --warmup 4 --execute --cuda-graphs)
set_tests_properties(train_bench_step_graphs_emu PROPERTIES
                     PASS_REGULAR_EXPRESSION "graph launches per observed step 1.0")
set_tests_properties(train_bench_step_smoke_emu train_bench_step_executed_emu train_bench_step_speedrun_emu
                     train_bench_step_modded89_emu train_bench_step_graphs_emu PROPERTIES LABELS trainer TIMEOUT 120
                     ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")

# (train_steps_*: ten AdamW steps of the device model + ZeRO optimizer vs the reference, above.)

# The program as a user runs it (tiny shards): determinism, resume, NaN stop, errors, log, --help. In three parts
# (the script's PARTS), which CTest runs side by side: in one process it took 309 s alone on the 2-core VM
# (2026-12-06) and up to 340 s in a fresh-clone .ci/run, the last test to finish. 600 s allowed: a loaded machine
# runs it twice as long.
foreach(part IN ITEMS replay speedrun program)
  add_test(NAME train_program_emu.${part}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/train/test_train_program.py
                   --trainer $<TARGET_FILE:train_gpt2_emu> --mpiexec ${MPIEXEC_EXECUTABLE} --part ${part})
  set_tests_properties(train_program_emu.${part} PROPERTIES LABELS "trainer;train" TIMEOUT 600
                       ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")
endforeach()
if(LLMC_HAVE_CUDA)
  # The same tests of the GPU build; "skipped: no GPU" (exit 77) on a machine without one.
  add_test(NAME train_program_cuda
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/train/test_train_program.py
                   --trainer $<TARGET_FILE:train_gpt2> --mpiexec ${MPIEXEC_EXECUTABLE} --require-gpu)
  set_tests_properties(train_program_cuda PROPERTIES LABELS "trainer;train;cuda" TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")
  # The GPU build names a contradictory command line before it looks for MPI or a GPU (here: none), which is what
  # lets the GPU kit's dry run catch a bad command of its stages.
  add_test(NAME train_program_cuda_options_before_the_gpu COMMAND train_gpt2 --val-every 5 --val-tokens 0)
  set_tests_properties(train_program_cuda_options_before_the_gpu PROPERTIES LABELS "trainer;train" TIMEOUT 30
                       PASS_REGULAR_EXPRESSION "rank 0: --val-every needs --val-tokens")
endif()

# The soak benchmark (scripts/bench_soak.py: thousands of steps, stopped and resumed twice) smoke-run at 12
# steps so that it cannot rot; the figures come from the full run (docs/robustness.md#soak).
add_test(NAME bench_soak_smoke
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/bench_soak.py --trainer $<TARGET_FILE:train_gpt2_emu>
                 --steps 12 --checkpoint-every 2 --warmup 0 --sample 0.2)
set_tests_properties(bench_soak_smoke PROPERTIES LABELS "trainer;train" TIMEOUT 180
                     ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")

# The recipe comparison (scripts/bench_recipes.py: the 2026-07-17, 2025-10-31 and llm.c recipes on KJV) smoke-run
# at 4 steps of 64 tokens, toy widths (the 2026-07-17 model at its small preset) and two seeds, so that it cannot
# rot; the tables come from the full run (docs/recipe_comparison.md). Passes only if the script prints its token
# ratios and the seeds' t-tests.
if(TARGET tokenize_gpt2)
  add_test(NAME bench_recipes_smoke
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/bench_recipes.py
                   --trainer $<TARGET_FILE:train_gpt2_emu> --tokenizer $<TARGET_FILE:tokenize_gpt2>
                   --text ${LLMC_SHARED_DIR}/data/text/kjv.txt --work-dir ${CMAKE_CURRENT_BINARY_DIR}/bench_recipes_smoke
                   --steps 4 --val-every 4 --val-tokens 64 --batch 1 --seq-len 64 --speedrun-blocks 8
                   --speedrun-head-dim 16 --window-block 8 --gpt2-model d1 --seeds 1,2)
  set_tests_properties(bench_recipes_smoke PROPERTIES LABELS "trainer;train" TIMEOUT 240
                       PASS_REGULAR_EXPRESSION "relative to modded89: speedrun [0-9.]+x, gpt2 [0-9.]+x[.].*Welch's t = "
                       ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")
endif()

# The independent oracle: JAX's GPT-2 and autodiff against the loss and gradients train_gpt2 dumps
# (fp32 emulated build: tight; bf16 emulated build: bf16 tolerances). Exit 77 = skipped without JAX.
foreach(variant IN ITEMS fp32 bf16)
  if(variant STREQUAL "fp32")
    set(reference_trainer $<TARGET_FILE:train_gpt2_fp32_emu>)
  else()
    set(reference_trainer $<TARGET_FILE:train_gpt2_emu>)
  endif()
  add_test(NAME reference_check_${variant}_emu
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/reference_check.py --run ${reference_trainer})
  set_tests_properties(reference_check_${variant}_emu PROPERTIES LABELS trainer TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")
endforeach()
if(LLMC_HAVE_CUDA)
  # The GPU build (bf16) against the same oracle; "skipped: no GPU" (exit 77) without one.
  add_test(NAME reference_check_bf16_cuda
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/reference_check.py
                   --run $<TARGET_FILE:train_gpt2> --require-gpu)
  set_tests_properties(reference_check_bf16_cuda PROPERTIES LABELS "trainer;cuda" TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${LLMC_MPI_SINGLETON_ENV}")
endif()
