// What the emulation learns about a kernel from the program's own symbol table: its static __shared__
// variables (a GPU gives every block fresh ones; the emulation poisons them per block and counts them
// against the shared-memory limits) and its __launch_bounds__ (which the emulated macro turns into an
// ABI tag of the kernel's mangled name).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace llmc::emu {

struct StaticSharedVariable {
  void* address = nullptr;
  size_t bytes = 0;
  std::string symbol;  // mangled, for messages
};

struct KernelSymbolInfo {
  bool found = false;        // the kernel's address is in the program's symbol table
  std::string symbol;        // mangled name of the kernel
  std::vector<StaticSharedVariable> static_shared;  // the __shared__ variables declared in its body
  size_t static_shared_bytes = 0;
  // From __launch_bounds__(max, ...): max threads per block, 0 when the kernel declares none.
  int max_threads_per_block = 0;
  // Set when the kernel's launch bounds are not an integer literal (e.g. a named constant, whose value
  // the symbol table does not hold): the argument's text. Such bounds are not checked.
  std::string unreadable_launch_bounds;
};

// Looked up once per kernel and cached; safe from any thread. Kernels whose address is not in the
// symbol table (a stripped binary) get found = false and no static shared memory.
const KernelSymbolInfo& kernel_symbol_info(const void* kernel_address);

// The ABI-tag prefix the emulated __launch_bounds__ uses (device_builtins.h).
inline constexpr const char* kLaunchBoundsTagPrefix = "llmc_launch_bounds_";

}  // namespace llmc::emu
