# cmake/multirank.cmake: the data-parallel (ZeRO-1, overlap modes) tests of train_gpt2 under mpirun,
# with emulated ranks: N ranks against 1 rank, the modes against each other, the trace's ordering, a
# mutant run with a missing cross-stream wait (the emulation's LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS),
# a failing rank, and resume. Included last (it uses the fp32 emulated trainer of cmake/trainer.cmake).

set(LLMC_MULTIRANK_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  "LLMC_MPIEXEC=${MPIEXEC_EXECUTABLE}"
  "LLMC_TRAIN_FP32_EMU=$<TARGET_FILE:train_gpt2_fp32_emu>"
  "LLMC_BENCH_SPEEDRUN_COLLECTIVES=$<TARGET_FILE:bench_speedrun_collectives>")
if(LLMC_ASAN)
  list(APPEND LLMC_MULTIRANK_ENV "ASAN_OPTIONS=detect_leaks=0")  # OpenMPI leaks at exit (see comm.cmake)
endif()

# One CTest entry per test class, so that a failure names its area and the classes can run in parallel.
foreach(test_class IN ITEMS Equivalence TraceOrder MissingWait RankFailure Resume Reshard StopSignals Watchdog
                          SpeedrunModel SpeedrunOptimizer Modded89Optimizer BosLoader CudaGraphs)
  add_test(NAME multirank.${test_class}
           COMMAND ${Python3_EXECUTABLE} -m unittest -v test_multirank.${test_class}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/test/train)
  set_tests_properties(multirank.${test_class} PROPERTIES LABELS multirank TIMEOUT 180
                       ENVIRONMENT "${LLMC_MULTIRANK_ENV}")
endforeach()
