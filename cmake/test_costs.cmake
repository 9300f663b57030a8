# cmake/test_costs.cmake: the order in which CTest starts the long tests. A fresh clone has no timing history
# (Testing/Temporary/CTestCostData.txt), so CTest would start tests in the order they are defined and a long one
# defined late would run alone at the end while the other core idles; COST makes it start the longest first.
# Seconds from a `ctest -j2` run of the whole suite on the 2-core VM (2026-12-06; the three parts of
# train_program_emu alone); only their order matters. Included after every test is defined.
set(llmc_long_tests
  train_program_emu.speedrun 145  train_program_emu.replay 105  train_program_emu.program 60
  bench_recipes_smoke 55  multirank.Modded89Optimizer 53  multirank.CudaGraphs 46  hf_transformers_oracle 32
  scripts_gpu_kit_dry_run 30  modded89_optimizer_emu_np2 28  modded89_reference_vs_jax 28
  multirank.SpeedrunOptimizer 25  hf_scripts 21  scripts_gpu_report 20  multirank.StopSignals 20
  speedrun_optimizer_emu_np1 20  speedrun_optimizer_emu_np2 20  modded89_optimizer_emu_np4 19
  multirank.BosLoader 17  multirank.Equivalence 16  speedrun_optimizer_emu_np4 12  multirank.Watchdog 10
  kernels_mutants_emu 10  modded89_optimizer_emu_np1 9  multirank.TraceOrder 9  speedrun_reference_vs_jax 9
  multirank.MissingWait 8)
list(LENGTH llmc_long_tests llmc_long_tests_length)
math(EXPR llmc_last_pair "${llmc_long_tests_length} - 2")
foreach(index RANGE 0 ${llmc_last_pair} 2)
  math(EXPR cost_index "${index} + 1")
  list(GET llmc_long_tests ${index} test_name)
  list(GET llmc_long_tests ${cost_index} test_cost)
  # Some tests exist only where their tools do (PyTorch, JAX, MPI): a missing one has nothing to order.
  if(TEST ${test_name})
    set_tests_properties(${test_name} PROPERTIES COST ${test_cost})
  endif()
endforeach()
