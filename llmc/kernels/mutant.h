// LLMC_MUTANT(name, correct, mutant): a plausible bug that the kernel tests must catch (mutation testing).
// It is `correct` in every build except the emulated kernel tests, kernels_fp32_emu and kernels_bf16_emu
// (LLMC_KERNEL_MUTANTS, cmake/kernels.cmake), where it becomes `mutant` when the environment variable
// LLMC_KERNEL_MUTANT equals `name`; test/kernels/run_kernel_mutants.py then expects the named tests to fail.
#pragma once

#if defined(LLMC_KERNEL_MUTANTS)
#if !defined(LLMC_EMULATION)
#error "kernel mutants exist only in the emulated test build"
#endif
#include <cstdlib>
#include <cstring>

namespace llmc::detail {
inline bool kernel_mutant_active(const char* name) {
  static const char* const selected = std::getenv("LLMC_KERNEL_MUTANT");  // read once, never written
  return selected != nullptr && std::strcmp(selected, name) == 0;
}
}  // namespace llmc::detail

#define LLMC_MUTANT(name, correct, mutant) (::llmc::detail::kernel_mutant_active(name) ? (mutant) : (correct))
#else
#define LLMC_MUTANT(name, correct, mutant) (correct)
#endif
