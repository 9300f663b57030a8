# cmake/dist.cmake: multi-rank communication (llmc/dist/comm.*, llmc/dist/nccl_check.h), NCCL served by MPI
# for the emulated build (llmc/emu/nccl_emu.cpp), the Chrome-trace recorder (llmc/dist/trace.*), and
# their tests. Libraries for train_gpt2 and friends:
#   emulated target (g++ + llmc_emu):  llmc_comm_emu, llmc_trace_emu  (llmc_nccl_emu comes along)
#   GPU target (nvcc, libnccl):        llmc_comm, llmc_trace           (when LLMC_HAVE_CUDA)
# Multi-rank tests run under OpenMPI's mpiexec with --oversubscribe (more ranks than cores) and
# --bind-to none, with the variables OpenMPI needs to run as root.

add_library(llmc_nccl_emu STATIC llmc/emu/nccl_emu.cpp)
target_link_libraries(llmc_nccl_emu PUBLIC llmc_emu MPI::MPI_CXX)

add_library(llmc_comm_emu STATIC llmc/dist/comm.cpp llmc/dist/collective_watch.cpp)
target_link_libraries(llmc_comm_emu PUBLIC llmc_emu llmc_nccl_emu MPI::MPI_CXX)

add_library(llmc_trace_emu STATIC llmc/dist/trace.cpp)
target_link_libraries(llmc_trace_emu PUBLIC llmc_emu llmc_files nlohmann_json::nlohmann_json)

if(LLMC_HAVE_CUDA)
  find_library(LLMC_NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(LLMC_NCCL_INCLUDE_DIR nccl.h HINTS ${LLMC_CUDA_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  # Host code only (CUDA runtime + NCCL calls, no kernels): compiled by the C++ compiler, linked
  # into the nvcc-built programs.
  add_library(llmc_comm STATIC llmc/dist/comm.cpp llmc/dist/collective_watch.cpp)
  target_include_directories(llmc_comm SYSTEM PUBLIC ${LLMC_NCCL_INCLUDE_DIR})
  target_link_libraries(llmc_comm PUBLIC llmc_flags CUDA::cudart ${LLMC_NCCL_LIBRARY} MPI::MPI_CXX)

  add_library(llmc_trace STATIC llmc/dist/trace.cpp)
  target_link_libraries(llmc_trace PUBLIC llmc_flags CUDA::cudart llmc_files nlohmann_json::nlohmann_json)
endif()

# ---- tests ---------------------------------------------------------------------------------------
set(LLMC_MPI_ROOT_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
if(LLMC_ASAN)
  # OpenMPI itself leaks at exit (partly from unloaded plugins, which no suppression can name):
  # leak checking is off for the MPI programs only; address errors are still caught.
  list(APPEND LLMC_MPI_ROOT_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()

# The collective tests: one binary per target; every rank runs every test (see comm_test_main.cpp).
llmc_emu_wrap_sources(comm_collectives_emu_sources comm_collectives_emu
  test/dist/test_collectives.cu test/dist/comm_test_main.cpp)
add_executable(comm_collectives_emu ${comm_collectives_emu_sources})
target_link_libraries(comm_collectives_emu PRIVATE llmc_comm_emu GTest::gtest)
# One rank without mpirun (MPI singleton), then 2 and 4 ranks.
add_test(NAME comm_collectives_emu_np1 COMMAND comm_collectives_emu)
foreach(np IN ITEMS 2 4)
  add_test(NAME comm_collectives_emu_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
                   ${MPIEXEC_PREFLAGS} $<TARGET_FILE:comm_collectives_emu> ${MPIEXEC_POSTFLAGS})
endforeach()
set_tests_properties(comm_collectives_emu_np1 comm_collectives_emu_np2 comm_collectives_emu_np4
  PROPERTIES LABELS comm TIMEOUT 60 ENVIRONMENT "${LLMC_MPI_ROOT_ENV}")

if(LLMC_BUILD_CUDA_TESTS)
  # Real NCCL: one rank (several NCCL ranks cannot share one GPU); "skipped: no GPU" without one.
  add_executable(comm_collectives_cuda test/dist/test_collectives.cu test/dist/comm_test_main.cpp)
  set_target_properties(comm_collectives_cuda PROPERTIES CUDA_ARCHITECTURES "${LLMC_CUDA_TEST_ARCHITECTURES}")
  target_link_libraries(comm_collectives_cuda PRIVATE llmc_comm GTest::gtest)
  add_test(NAME comm_collectives_cuda_np1 COMMAND comm_collectives_cuda)
  # Without a GPU the binary skips every test: CTest reports it as skipped, not passed.
  set_tests_properties(comm_collectives_cuda_np1 PROPERTIES LABELS "comm;cuda" TIMEOUT 120
                       ENVIRONMENT "${LLMC_MPI_ROOT_ENV}" SKIP_REGULAR_EXPRESSION "skipped: no GPU")
endif()

# The tracer and the overlap arithmetic (one process, no MPI).
llmc_add_cu_test(NAME comm_trace LABELS comm TIMEOUT 60
  SOURCES test/dist/test_trace.cu
  EMU_LIBS llmc_trace_emu
  CUDA_LIBS llmc_trace)

# The collective watch of the watchdog's report, enqueued and captured in CUDA graphs (one process, no MPI).
llmc_add_cu_test(NAME comm_watch LABELS comm TIMEOUT 60
  SOURCES test/dist/test_collective_watch.cu
  EMU_LIBS llmc_comm_emu
  CUDA_LIBS llmc_comm)

# One rank failing stops every rank, with the cause printed, within seconds.
add_executable(comm_rank_failure_probe_emu test/dist/rank_failure_probe.cpp)
target_link_libraries(comm_rank_failure_probe_emu PRIVATE llmc_comm_emu)
foreach(np IN ITEMS 2 4)
  add_test(NAME comm_rank_failure_emu_np${np}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/test/dist/run_rank_failure.py
                   ${MPIEXEC_EXECUTABLE} ${np} $<TARGET_FILE:comm_rank_failure_probe_emu> --limit 30)
  set_tests_properties(comm_rank_failure_emu_np${np} PROPERTIES LABELS comm TIMEOUT 60
                       ENVIRONMENT "${LLMC_MPI_ROOT_ENV}")
endforeach()
