# cmake/jax_oracles.cmake: how the JAX oracles run under CTest. Their tensors are tiny, so most of their time is
# XLA compiling each operation it dispatches (modded89_reference_vs_jax: 544 compiles, 25 of its 39 s), and LLVM's
# optimisation passes are most of a compile. Without them the oracles' float64 sums only change their order
# (modded89_reference_vs_jax's differences move at 1e-16 of the scale; its tolerances are 1e-8 and 1e-10).
# Included after every test is defined; the GPU-only test may be absent.
set(LLMC_JAX_ORACLE_TESTS reference_vs_jax speedrun_reference_vs_jax modded89_reference_vs_jax window_attention_vs_jax
    hf_transformers_oracle reference_check_fp32_emu reference_check_bf16_emu reference_check_bf16_cuda)
foreach(test IN LISTS LLMC_JAX_ORACLE_TESTS)
  if(TEST ${test})
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT "XLA_FLAGS=--xla_backend_optimization_level=0")
  elseif(NOT test MATCHES "_cuda$")
    message(FATAL_ERROR "cmake/jax_oracles.cmake: no test named ${test}")
  endif()
endforeach()
