// The thread-block engine of the CUDA-on-CPU emulation: runs the threads of one block as fibers on
// the calling OS thread, so __syncthreads and warp-synchronous operations (shuffles, ballots, MMA)
// keep their GPU meaning. Also reports barriers that can never complete, naming kernel and block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <vector_types.h>

namespace llmc::emu {

// What a kernel launch is, for running it and for error messages.
struct KernelLaunchInfo {
  const char* kernel_name = "";  // the text the kernel was named by at the launch site
  const char* file = "";         // launch site
  int line = 0;
  const void* kernel_address = nullptr;
  dim3 grid_dim;
  dim3 block_dim;
  size_t dynamic_shared_bytes = 0;
};

// The builtin variables of one emulated GPU thread (threadIdx and friends read these).
struct ThreadBuiltins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// Per OS thread: the builtins of the emulated GPU thread now running there (null outside kernels).
// This is the emulation of CUDA's implicit "current thread"; the fiber scheduler sets it before
// resuming each fiber.
extern thread_local const ThreadBuiltins* current_thread_builtins;

// ---- warp-synchronous operations -------------------------------------------------------------
// A warp operation (shuffle, vote, MMA, ...) is a rendezvous: each lane posts its input and waits;
// once every lane named in the mask has arrived at an operation with the same resolver and mask,
// the resolver computes every lane's output at once.
struct WarpLanePost {
  const void* input = nullptr;  // lane-local data (lives on the waiting fiber's stack)
  void* output = nullptr;
  int arg0 = 0;  // operation-specific (e.g. shuffle source lane / delta)
  int arg1 = 0;  // operation-specific (e.g. shuffle clamp/segment value)
};
struct WarpOperation {
  unsigned mask = 0;                 // the lanes taking part
  const WarpLanePost* lanes[32] = {};  // the posts of the lanes in mask (others null)
  int warp_index = 0;                // within the block
};
using WarpResolver = void (*)(const WarpOperation& operation);

// Called from inside a kernel. `operation_name` is for error messages.
void warp_rendezvous(WarpResolver resolver, const char* operation_name, unsigned mask,
                     const WarpLanePost& post, const char* file, int line);
void block_barrier(const char* file, int line);

// Stops the process with a message naming the kernel, block and thread now running (for errors
// inside kernels that a GPU would report as a fault, or hide).
[[noreturn]] void fail_in_kernel(const std::string& message);

// ---- running blocks --------------------------------------------------------------------------
// Order in which the scheduler runs the fibers of a block between synchronisation points. Kernel
// results must not depend on it; running a test in both orders exposes missing barriers.
enum class ThreadOrder { kForward, kReverse };

// Runs one block: every thread executes `thread_body` (the kernel with its arguments) as a fiber.
// `dynamic_shared` is this block's dynamic shared memory (LLMC_DYNAMIC_SHARED reads it).
class BlockRunner {
 public:
  BlockRunner();
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  void run_block(const KernelLaunchInfo& launch, uint3 block_idx, void* dynamic_shared,
                 const std::function<void()>& thread_body, ThreadOrder order);

 private:
  struct Impl;  // fiber stacks and thread records, reused across blocks and launches
  std::unique_ptr<Impl> impl_;
};

// Dynamic shared memory of the block running on this OS thread (LLMC_DYNAMIC_SHARED).
void* current_dynamic_shared_memory();

}  // namespace llmc::emu
