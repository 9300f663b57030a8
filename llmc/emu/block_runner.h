// The thread-block engine of the CUDA-on-CPU emulation: runs the threads of one block as fibers on
// the calling OS thread, so __syncthreads and warp-synchronous operations (shuffles, ballots, MMA)
// keep their GPU meaning. The schedule decides which thread runs next (forward, reverse, or warps that
// drift apart in a seeded random order); results must not depend on it. Also reports barriers that can
// never complete, naming kernel and block, and (TSan build) tells ThreadSanitizer what orders what.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <vector_types.h>

namespace llmc::emu {

struct KernelSymbolInfo;

// What a kernel launch is, for running it and for error messages.
struct KernelLaunchInfo {
  const char* kernel_name = "";  // the text the kernel was named by at the launch site
  const char* file = "";         // launch site
  int line = 0;
  const void* kernel_address = nullptr;
  dim3 grid_dim;
  dim3 block_dim;
  size_t dynamic_shared_bytes = 0;
  const KernelSymbolInfo* symbols = nullptr;  // static shared memory, launch bounds (set at launch)
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

// The running thread's place in its block: its linear index (x fastest, as warps are formed) and the block's size.
struct BlockPlace {
  unsigned linear;
  unsigned threads;
};
inline BlockPlace current_block_place() {
  const ThreadBuiltins& thread = *current_thread_builtins;
  return BlockPlace{thread.thread_idx.x + thread.block_dim.x * (thread.thread_idx.y +
                                                                thread.block_dim.y * thread.thread_idx.z),
                    thread.block_dim.x * thread.block_dim.y * thread.block_dim.z};
}

// ---- warp-synchronous operations -------------------------------------------------------------
// A warp operation (shuffle, vote, MMA, ...) is a rendezvous: each lane posts its input and waits;
// once every lane named in the mask has arrived at an operation with the same resolver and mask,
// the resolver computes every lane's output at once. Lanes named in each other's masks that wait at
// different operations (another intrinsic, other qualifiers such as ldmatrix .trans, another mask)
// are an error.
enum WarpOperationFlags : unsigned {
  kWarpOperationOrdersMemory = 1u,  // __syncwarp: memory ordering among the participating lanes
};
struct WarpLanePost {
  const void* input = nullptr;  // lane-local data (lives on the waiting fiber's stack)
  void* output = nullptr;
  int arg0 = 0;  // operation-specific (e.g. shuffle source lane / delta)
  int arg1 = 0;  // operation-specific (e.g. shuffle clamp/segment value)
  unsigned flags = 0;  // WarpOperationFlags
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
// Lets the other threads of the block run before the calling thread continues (atomics call it, so
// that read-modify-write loops really contend).
void yield_thread();

// Stops the process with a message naming the kernel, block and thread now running (for errors
// inside kernels that a GPU would report as a fault, or hide).
[[noreturn]] void fail_in_kernel(const std::string& message);

// Lane index (0..31) of the calling emulated thread.
int current_lane();

// Whether [address, address + bytes) lies in the running block's shared memory (the kernel's static
// __shared__ variables or its dynamic shared memory).
bool is_shared_memory(const void* address, size_t bytes);

// The shared state space's addresses (what __cvta_generic_to_shared gives on a GPU), for instructions
// that take them in descriptors (wgmma). Only dynamic shared memory has them here; it starts at
// kDynamicSharedWindowAddress, 16-byte but deliberately not 1024-byte aligned, because CUDA promises no
// more: a kernel whose swizzled tiles need 1024-byte alignment must align them itself.
inline constexpr uint32_t kDynamicSharedWindowAddress = 0x410;
uint32_t shared_window_address(const void* address);
// The host pointer behind [address, address + bytes) of the window; fails the kernel outside it.
const unsigned char* shared_window_pointer(uint32_t address, size_t bytes, const char* operation_name);

// ---- running blocks --------------------------------------------------------------------------
// Which thread runs next. Lockstep schedules (forward, reverse) run every thread of the block to its
// next synchronisation point in turn, so warps stay together. kDrift runs one warp at a time up to
// its next block barrier while the others wait (warps in a seeded random order each phase, lanes in
// a seeded random order each pass), and the emulated device runs blocks in a seeded random order.
enum class ScheduleMode { kForward, kReverse, kDrift };
struct Schedule {
  ScheduleMode mode = ScheduleMode::kForward;
  uint64_t seed = 1;  // kDrift only
};
// "forward", "reverse", "drift" (for messages and LLMC_EMU_SCHEDULE).
const char* schedule_mode_name(ScheduleMode mode);

// Runs blocks: every thread executes `thread_body` (the kernel with its arguments) as a fiber. One
// BlockRunner per OS thread that runs kernels (it owns that thread's fibers and their stacks).
class BlockRunner {
 public:
  BlockRunner();
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // `dynamic_shared` is this block's dynamic shared memory (LLMC_DYNAMIC_SHARED reads it); it and the
  // kernel's static __shared__ variables are poisoned (0xFF bytes: NaN) before the block starts.
  // `block_seed` seeds the drift schedule's choices for this block.
  void run_block(const KernelLaunchInfo& launch, uint3 block_idx, void* dynamic_shared,
                 const std::function<void()>& thread_body, ScheduleMode mode, uint64_t block_seed);
  // After the last block of a launch: what the kernel wrote is ordered before what the caller does
  // next (for TSan; the blocks themselves are not ordered with each other).
  void finish_launch();

 private:
  struct Impl;  // fiber stacks and thread records, reused across blocks and launches
  std::unique_ptr<Impl> impl_;
};

// Dynamic shared memory of the block running on this OS thread (LLMC_DYNAMIC_SHARED).
void* current_dynamic_shared_memory();

// Fills kernel memory that a GPU leaves undefined (fresh device memory, shared memory) with 0xFF bytes,
// which read as NaN in floating point.
inline constexpr int kUninitializedByte = 0xFF;

}  // namespace llmc::emu
