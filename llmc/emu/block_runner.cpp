// The thread-block engine of the CUDA-on-CPU emulation: every thread of a block is a Boost.Context
// fiber on the calling OS thread; a small scheduler runs them round-robin up to their next
// synchronisation point (barrier or warp operation), then releases whatever can complete.
#include "llmc/emu/block_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <boost/context/stack_context.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define LLMC_EMU_ASAN 1
#else
#define LLMC_EMU_ASAN 0
#endif

namespace llmc::emu {

thread_local const ThreadBuiltins* current_thread_builtins = nullptr;

namespace {

namespace ctx = boost::context;

// Kernels keep small local arrays on their stacks; AddressSanitizer adds redzones around each.
// LLMC_EMU_STACK_KB overrides (a kernel overflowing its stack hits the guard page: SIGSEGV).
constexpr size_t kDefaultFiberStackBytes = LLMC_EMU_ASAN ? 256 * 1024 : 64 * 1024;

size_t fiber_stack_bytes(size_t page_bytes) {
  size_t bytes = kDefaultFiberStackBytes;
  if (const char* text = std::getenv("LLMC_EMU_STACK_KB")) {
    const long kib = std::strtol(text, nullptr, 10);
    if (kib <= 0) {
      std::fprintf(stderr, "llmc emu: LLMC_EMU_STACK_KB=%s is not a positive number of KiB\n", text);
      std::abort();
    }
    bytes = static_cast<size_t>(kib) * 1024;
  }
  return (bytes + page_bytes - 1) / page_bytes * page_bytes;
}

[[noreturn]] void fail_system_call(const char* call) {
  std::fprintf(stderr, "llmc emu: %s failed: %s (%s:%d)\n", call, std::strerror(errno), __FILE__,
               __LINE__);
  std::abort();
}

// Fixed-size fiber stacks with a PROT_NONE guard page below each, so a kernel that overflows its
// stack faults instead of silently overwriting a neighbour. Stacks are reused, never unmapped
// before the pool dies (mmap per block would dominate the cost of small blocks).
class FiberStackPool {
 public:
  FiberStackPool() {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) fail_system_call("sysconf(_SC_PAGESIZE)");
    page_bytes_ = static_cast<size_t>(page);
    stack_bytes_ = fiber_stack_bytes(page_bytes_);
  }
  ~FiberStackPool() {
    for (void* base : all_) munmap(base, page_bytes_ + stack_bytes_);
  }
  FiberStackPool(const FiberStackPool&) = delete;
  FiberStackPool& operator=(const FiberStackPool&) = delete;

  ctx::stack_context allocate() {
    void* base;
    if (!free_.empty()) {
      base = free_.back();
      free_.pop_back();
    } else {
      base = mmap(nullptr, page_bytes_ + stack_bytes_, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) fail_system_call("mmap(fiber stack)");
      if (mprotect(base, page_bytes_, PROT_NONE) != 0) fail_system_call("mprotect(stack guard)");
      all_.push_back(base);
    }
    char* bottom = static_cast<char*>(base) + page_bytes_;
#if LLMC_EMU_ASAN
    // A reused stack may still carry poison from frames of a fiber that never returned normally.
    ASAN_UNPOISON_MEMORY_REGION(bottom, stack_bytes_);
#endif
    ctx::stack_context stack;
    stack.size = stack_bytes_;
    stack.sp = bottom + stack_bytes_;
    return stack;
  }
  void release(const ctx::stack_context& stack) {
    free_.push_back(static_cast<char*>(stack.sp) - stack.size - page_bytes_);
  }

 private:
  size_t page_bytes_ = 0;
  size_t stack_bytes_ = 0;
  std::vector<void*> free_;
  std::vector<void*> all_;
};

// Boost.Context hands the stack back through this when a fiber terminates.
struct PooledStackAllocator {
  FiberStackPool* pool;
  ctx::stack_context allocate() { return pool->allocate(); }
  void deallocate(ctx::stack_context& stack) noexcept { pool->release(stack); }
};

enum class ThreadState { kRunnable, kAtBarrier, kAtWarpOperation, kFinished };

struct EmulatedThread {
  ThreadBuiltins builtins{};
  unsigned linear_id = 0;
  ThreadState state = ThreadState::kFinished;
  // Where the thread waits (barrier or warp operation), for matching and for error messages.
  const char* wait_file = "";
  int wait_line = 0;
  const char* warp_operation_name = "";
  WarpResolver warp_resolver = nullptr;
  unsigned warp_mask = 0;
  WarpLanePost warp_post;
  ctx::fiber fiber;      // this thread's continuation while it is suspended
  ctx::fiber scheduler;  // the scheduler's continuation while this thread runs
  void* stack_bottom = nullptr;
  size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
};

// The block being run on this OS thread.
struct BlockRun {
  const KernelLaunchInfo* launch = nullptr;
  uint3 block_idx{};
  void* dynamic_shared = nullptr;
  std::vector<EmulatedThread>* threads = nullptr;
  EmulatedThread* running = nullptr;
  unsigned finished_count = 0;
  unsigned barrier_count = 0;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
};

thread_local BlockRun* current_block_run = nullptr;

BlockRun& require_block_run(const char* what) {
  if (current_block_run == nullptr || current_block_run->running == nullptr) {
    std::fprintf(stderr, "llmc emu: %s called outside a kernel\n", what);
    std::abort();
  }
  return *current_block_run;
}

// Suspends the running fiber and returns to the scheduler; returns when the scheduler resumes it.
void suspend_running_thread(BlockRun& run) {
  EmulatedThread& thread = *run.running;
#if LLMC_EMU_ASAN
  __sanitizer_start_switch_fiber(&thread.asan_fake_stack, run.scheduler_stack_bottom,
                                 run.scheduler_stack_size);
#endif
  thread.scheduler = std::move(thread.scheduler).resume();
#if LLMC_EMU_ASAN
  __sanitizer_finish_switch_fiber(thread.asan_fake_stack, &run.scheduler_stack_bottom,
                                  &run.scheduler_stack_size);
#endif
}

void resume_thread(BlockRun& run, EmulatedThread& thread) {
  run.running = &thread;
  current_thread_builtins = &thread.builtins;
#if LLMC_EMU_ASAN
  __sanitizer_start_switch_fiber(&run.scheduler_fake_stack, thread.stack_bottom, thread.stack_size);
#endif
  thread.fiber = std::move(thread.fiber).resume();
#if LLMC_EMU_ASAN
  __sanitizer_finish_switch_fiber(run.scheduler_fake_stack, nullptr, nullptr);
#endif
  run.running = nullptr;
  current_thread_builtins = nullptr;
}

std::string format_dim(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}
std::string format_dim(dim3 v) { return format_dim(uint3{v.x, v.y, v.z}); }

std::string describe_wait(const EmulatedThread& thread) {
  char text[512];
  switch (thread.state) {
    case ThreadState::kRunnable:
      return "runnable";
    case ThreadState::kFinished:
      return "exited";
    case ThreadState::kAtBarrier:
      std::snprintf(text, sizeof text, "waiting at __syncthreads (%s:%d)", thread.wait_file,
                    thread.wait_line);
      return text;
    case ThreadState::kAtWarpOperation:
      std::snprintf(text, sizeof text, "waiting at %s mask 0x%08x (%s:%d)",
                    thread.warp_operation_name, thread.warp_mask, thread.wait_file,
                    thread.wait_line);
      return text;
  }
  return "?";
}

// "threads 0-31: waiting at ...; threads 32-63: exited" (runs of equal state).
std::string describe_block_state(const std::vector<EmulatedThread>& threads) {
  std::string out;
  size_t start = 0;
  while (start < threads.size()) {
    std::string what = describe_wait(threads[start]);
    size_t end = start + 1;
    while (end < threads.size() && describe_wait(threads[end]) == what) ++end;
    out += "\n    threads " + std::to_string(start);
    if (end - start > 1) out += "-" + std::to_string(end - 1);
    out += ": " + what;
    start = end;
  }
  return out;
}

[[noreturn]] void fail_block(const BlockRun& run, const std::string& message) {
  const KernelLaunchInfo& launch = *run.launch;
  std::fprintf(stderr,
               "llmc emu: error in kernel %s (launched at %s:%d, grid %s, block %s), block %s: %s\n",
               launch.kernel_name, launch.file, launch.line, format_dim(launch.grid_dim).c_str(),
               format_dim(launch.block_dim).c_str(), format_dim(run.block_idx).c_str(),
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

// Releases every warp operation whose lanes have all arrived. Returns whether any was released.
bool resolve_warp_operations(BlockRun& run) {
  std::vector<EmulatedThread>& threads = *run.threads;
  const size_t thread_count = threads.size();
  bool released = false;
  for (size_t warp_base = 0; warp_base < thread_count; warp_base += 32) {
    const unsigned lanes_in_warp = static_cast<unsigned>(std::min<size_t>(32, thread_count - warp_base));
    for (unsigned lane = 0; lane < lanes_in_warp; ++lane) {
      EmulatedThread& waiter = threads[warp_base + lane];
      if (waiter.state != ThreadState::kAtWarpOperation) continue;
      const unsigned mask = waiter.warp_mask;
      bool complete = true;
      for (unsigned other = 0; other < 32 && complete; ++other) {
        if (!((mask >> other) & 1u)) continue;
        if (other >= lanes_in_warp) {
          run.running = &waiter;
          fail_block(run, std::string(waiter.warp_operation_name) + " at " + waiter.wait_file +
                              ":" + std::to_string(waiter.wait_line) + " names lane " +
                              std::to_string(other) + " in its mask, but this warp has only " +
                              std::to_string(lanes_in_warp) + " threads");
        }
        const EmulatedThread& peer = threads[warp_base + other];
        if (peer.state == ThreadState::kFinished) {
          fail_block(run, std::string(waiter.warp_operation_name) + " at " + waiter.wait_file +
                              ":" + std::to_string(waiter.wait_line) + " (thread " +
                              std::to_string(waiter.linear_id) + ") names lane " +
                              std::to_string(other) + " (thread " +
                              std::to_string(peer.linear_id) + ") in its mask, which has exited");
        }
        complete = peer.state == ThreadState::kAtWarpOperation &&
                   peer.warp_resolver == waiter.warp_resolver && peer.warp_mask == mask;
      }
      if (!complete) continue;
      WarpOperation operation;
      operation.mask = mask;
      operation.warp_index = static_cast<int>(warp_base / 32);
      for (unsigned other = 0; other < 32; ++other) {
        if ((mask >> other) & 1u) operation.lanes[other] = &threads[warp_base + other].warp_post;
      }
      // The resolver may report errors; attribute them to the first lane of the operation.
      run.running = &waiter;
      current_thread_builtins = &waiter.builtins;
      waiter.warp_resolver(operation);
      run.running = nullptr;
      current_thread_builtins = nullptr;
      for (unsigned other = 0; other < 32; ++other) {
        if ((mask >> other) & 1u) threads[warp_base + other].state = ThreadState::kRunnable;
      }
      released = true;
    }
  }
  return released;
}

// Releases the block barrier when every thread waits at it. Returns whether it did.
bool release_block_barrier(BlockRun& run) {
  std::vector<EmulatedThread>& threads = *run.threads;
  if (run.barrier_count == 0 || run.barrier_count + run.finished_count != threads.size()) {
    return false;
  }
  const EmulatedThread* first_waiter = nullptr;
  for (const EmulatedThread& thread : threads) {
    if (thread.state != ThreadState::kAtBarrier) continue;
    if (first_waiter == nullptr) {
      first_waiter = &thread;
    } else if (thread.wait_line != first_waiter->wait_line ||
               std::strcmp(thread.wait_file, first_waiter->wait_file) != 0) {
      fail_block(run, "threads wait at different __syncthreads calls (a barrier in divergent "
                      "code):" + describe_block_state(threads));
    }
  }
  if (run.finished_count > 0) {
    fail_block(run, "__syncthreads not reached by all threads of the block (some exited):" +
                        describe_block_state(threads));
  }
  for (EmulatedThread& thread : threads) thread.state = ThreadState::kRunnable;
  run.barrier_count = 0;
  return true;
}

}  // namespace

struct BlockRunner::Impl {
  FiberStackPool stacks;
  std::vector<EmulatedThread> threads;
};

BlockRunner::BlockRunner() : impl_(std::make_unique<Impl>()) {}
BlockRunner::~BlockRunner() = default;

void BlockRunner::run_block(const KernelLaunchInfo& launch, uint3 block_idx, void* dynamic_shared,
                            const std::function<void()>& thread_body, ThreadOrder order) {
  const dim3 block_dim = launch.block_dim;
  const size_t thread_count = static_cast<size_t>(block_dim.x) * block_dim.y * block_dim.z;
  std::vector<EmulatedThread>& threads = impl_->threads;
  if (threads.size() != thread_count) threads = std::vector<EmulatedThread>(thread_count);

  BlockRun run;
  run.launch = &launch;
  run.block_idx = block_idx;
  run.dynamic_shared = dynamic_shared;
  run.threads = &threads;
  BlockRun* const outer_run = current_block_run;
  current_block_run = &run;

  for (size_t i = 0; i < thread_count; ++i) {
    EmulatedThread& thread = threads[i];
    const unsigned id = static_cast<unsigned>(i);
    thread.linear_id = id;
    thread.builtins.thread_idx = uint3{id % block_dim.x, (id / block_dim.x) % block_dim.y,
                                       id / (block_dim.x * block_dim.y)};
    thread.builtins.block_idx = block_idx;
    thread.builtins.block_dim = block_dim;
    thread.builtins.grid_dim = launch.grid_dim;
    thread.state = ThreadState::kRunnable;
    ctx::stack_context stack = impl_->stacks.allocate();
    thread.stack_bottom = static_cast<char*>(stack.sp) - stack.size;
    thread.stack_size = stack.size;
    thread.asan_fake_stack = nullptr;
    EmulatedThread* self = &thread;
    BlockRun* block = &run;
    const std::function<void()>* body = &thread_body;
    thread.fiber = ctx::fiber(
        std::allocator_arg, ctx::preallocated(stack.sp, stack.size, stack),
        PooledStackAllocator{&impl_->stacks}, [self, block, body](ctx::fiber&& scheduler) {
#if LLMC_EMU_ASAN
          __sanitizer_finish_switch_fiber(nullptr, &block->scheduler_stack_bottom,
                                          &block->scheduler_stack_size);
#endif
          self->scheduler = std::move(scheduler);
          try {
            (*body)();
          } catch (const std::exception& error) {
            fail_in_kernel(std::string("uncaught exception: ") + error.what());
          }
          self->state = ThreadState::kFinished;
          ++block->finished_count;
#if LLMC_EMU_ASAN
          __sanitizer_start_switch_fiber(nullptr, block->scheduler_stack_bottom,
                                         block->scheduler_stack_size);
#endif
          return std::move(self->scheduler);
        });
  }

  while (true) {
    for (size_t i = 0; i < thread_count; ++i) {
      EmulatedThread& thread = threads[order == ThreadOrder::kForward ? i : thread_count - 1 - i];
      if (thread.state == ThreadState::kRunnable) resume_thread(run, thread);
    }
    if (run.finished_count == thread_count) break;
    if (resolve_warp_operations(run)) continue;
    if (release_block_barrier(run)) continue;
    fail_block(run, "deadlock: no thread of the block can proceed:" + describe_block_state(threads));
  }
  current_block_run = outer_run;
}

void block_barrier(const char* file, int line) {
  BlockRun& run = require_block_run("__syncthreads");
  EmulatedThread& thread = *run.running;
  thread.state = ThreadState::kAtBarrier;
  thread.wait_file = file;
  thread.wait_line = line;
  ++run.barrier_count;
  suspend_running_thread(run);
}

void warp_rendezvous(WarpResolver resolver, const char* operation_name, unsigned mask,
                     const WarpLanePost& post, const char* file, int line) {
  BlockRun& run = require_block_run(operation_name);
  EmulatedThread& thread = *run.running;
  const unsigned lane = thread.linear_id % 32;
  if (!((mask >> lane) & 1u)) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "%s at %s:%d called by lane %u with mask 0x%08x, which does not include it",
                  operation_name, file, line, lane, mask);
    fail_in_kernel(text);
  }
  thread.state = ThreadState::kAtWarpOperation;
  thread.warp_resolver = resolver;
  thread.warp_operation_name = operation_name;
  thread.warp_mask = mask;
  thread.warp_post = post;
  thread.wait_file = file;
  thread.wait_line = line;
  suspend_running_thread(run);
}

void fail_in_kernel(const std::string& message) {
  if (current_block_run == nullptr) {
    std::fprintf(stderr, "llmc emu: error outside a kernel: %s\n", message.c_str());
    std::fflush(stderr);
    std::abort();
  }
  const BlockRun& run = *current_block_run;
  std::string where;
  if (run.running != nullptr) {
    where = "thread " + format_dim(run.running->builtins.thread_idx) + ": ";
  }
  fail_block(run, where + message);
}

void* current_dynamic_shared_memory() {
  return require_block_run("LLMC_DYNAMIC_SHARED").dynamic_shared;
}

}  // namespace llmc::emu
