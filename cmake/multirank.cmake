# cmake/multirank.cmake: the data-parallel (ZeRO-1, overlap modes) tests of train_gpt2 under mpirun,
# with emulated ranks: N ranks against 1 rank, the modes against each other, the trace's ordering,
# a mutant build with a missing cross-stream wait, a failing rank, and resume. Included last (it
# uses the trainer's libraries and the fp32 emulated trainer from cmake/trainer.cmake).

# The mutant: the fp32 emulated trainer whose forward does not wait for a bucket's all-gather
# (llmc/optim/zero.cu, LLMC_TEST_DROP_PARAM_WAIT). The test must see its results differ.
# Only zero.cu is compiled again; the model core is the fp32 one the correct trainer uses.
llmc_emu_wrap_sources(train_gpt2_fp32_emu_drop_wait_sources train_gpt2_fp32_emu_drop_wait
                      train_gpt2.cu ${LLMC_OPTIMIZER_SOURCES})
add_executable(train_gpt2_fp32_emu_drop_wait ${train_gpt2_fp32_emu_drop_wait_sources})
target_link_libraries(train_gpt2_fp32_emu_drop_wait PRIVATE llmc_model_core_fp32_emu llmc_comm_emu llmc_trace_emu
                      ${LLMC_TRAINER_LIBS})
target_compile_definitions(train_gpt2_fp32_emu_drop_wait PRIVATE LLMC_TEST_DROP_PARAM_WAIT)

set(LLMC_MULTIRANK_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  "LLMC_MPIEXEC=${MPIEXEC_EXECUTABLE}"
  "LLMC_TRAIN_FP32_EMU=$<TARGET_FILE:train_gpt2_fp32_emu>"
  "LLMC_TRAIN_FP32_EMU_DROP_WAIT=$<TARGET_FILE:train_gpt2_fp32_emu_drop_wait>")
if(LLMC_ASAN)
  list(APPEND LLMC_MULTIRANK_ENV "ASAN_OPTIONS=detect_leaks=0")  # OpenMPI leaks at exit (see comm.cmake)
endif()

# One CTest entry per test class, so that a failure names its area and the classes can run in parallel.
foreach(test_class IN ITEMS Equivalence TraceOrder MissingWait RankFailure Resume)
  add_test(NAME multirank.${test_class}
           COMMAND ${Python3_EXECUTABLE} -m unittest -v test_multirank.${test_class}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/test/train)
  set_tests_properties(multirank.${test_class} PROPERTIES LABELS multirank TIMEOUT 180
                       ENVIRONMENT "${LLMC_MULTIRANK_ENV}")
endforeach()
