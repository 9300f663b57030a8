// The thread-block engine of the CUDA-on-CPU emulation: every thread of a block runs on a Boost.Context
// fiber of the calling OS thread; a small scheduler runs them up to their next synchronisation point
// (barrier, warp operation or atomic), in the order the schedule picks, then releases whatever can
// complete. In the ThreadSanitizer build this file is compiled without instrumentation (the
// scheduler's bookkeeping is not kernel memory) and tells TSan what orders what (tsan_hooks.h).
#include "llmc/emu/block_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <boost/context/stack_context.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <vector>

#include "llmc/emu/kernel_symbols.h"
#include "llmc/emu/tsan_hooks.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define LLMC_EMU_ASAN 1
#else
#define LLMC_EMU_ASAN 0
#endif

namespace llmc::emu {

thread_local const ThreadBuiltins* current_thread_builtins = nullptr;

const char* schedule_mode_name(ScheduleMode mode) {
  switch (mode) {
    case ScheduleMode::kForward: return "forward";
    case ScheduleMode::kReverse: return "reverse";
    case ScheduleMode::kDrift: return "drift";
  }
  return "?";
}

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

// One fiber slot: a fixed-size stack with a PROT_NONE guard page below it (a kernel that overflows
// its stack faults instead of overwriting a neighbour) and, in the TSan build, the TSan fiber that
// the emulated thread running in this slot is to ThreadSanitizer. Slots live as long as the runner:
// mapping a stack per block would dominate the cost of small blocks, and a TSan fiber costs about a
// millisecond to create.
class FiberSlot {
 public:
  FiberSlot(size_t page_bytes, size_t stack_bytes) : page_bytes_(page_bytes), stack_bytes_(stack_bytes) {
    base_ = mmap(nullptr, page_bytes_ + stack_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED) fail_system_call("mmap(fiber stack)");
    if (mprotect(base_, page_bytes_, PROT_NONE) != 0) fail_system_call("mprotect(stack guard)");
    tsan_fiber_ = tsan::create_fiber("emulated GPU thread");
  }
  ~FiberSlot() {
    if (tsan_fiber_ != nullptr) tsan::destroy_fiber(tsan_fiber_);
    munmap(base_, page_bytes_ + stack_bytes_);
  }
  FiberSlot(const FiberSlot&) = delete;
  FiberSlot& operator=(const FiberSlot&) = delete;

  ctx::stack_context stack() const {
    char* bottom = static_cast<char*>(base_) + page_bytes_;
#if LLMC_EMU_ASAN
    // The stack may still carry poison from frames of a fiber that never returned normally.
    ASAN_UNPOISON_MEMORY_REGION(bottom, stack_bytes_);
#endif
    ctx::stack_context stack;
    stack.size = stack_bytes_;
    stack.sp = bottom + stack_bytes_;
    return stack;
  }
  void* tsan_fiber() const { return tsan_fiber_; }

 private:
  size_t page_bytes_;
  size_t stack_bytes_;
  void* base_ = nullptr;
  void* tsan_fiber_ = nullptr;
};

enum class ThreadState { kRunnable, kAtBarrier, kAtWarpOperation, kFinished };

// A fiber on its own slot that runs emulated threads one after another: the scheduler gives a thread an
// idle worker at its first turn and takes the worker back when the thread exits. (A fiber per thread
// cost its creation and two more switches, most of the time of a thread that never waits.)
struct FiberWorker {
  FiberWorker(size_t page_bytes, size_t stack_bytes) : slot(page_bytes, stack_bytes) {}
  FiberSlot slot;
  ctx::fiber idle;  // the worker's continuation while no thread runs on it
  void* stack_bottom = nullptr;
  size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
  // Set when the pool is destroyed: resumed idle, the worker returns instead of running a thread.
  bool stopping = false;
  void* stopper_tsan_fiber = nullptr;
  const void* caller_stack_bottom = nullptr;  // ASan: the stack that resumed the worker
  size_t caller_stack_size = 0;
};

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
  FiberWorker* worker = nullptr;  // from the thread's first turn until it exits
  ctx::fiber fiber;          // its worker's continuation while the thread is suspended
  ctx::fiber scheduler;      // the scheduler's continuation while the thread runs
};

class FiberWorkerPool;

// The block being run on this OS thread.
struct BlockRun {
  const KernelLaunchInfo* launch = nullptr;
  uint3 block_idx{};
  ScheduleMode mode = ScheduleMode::kForward;
  uint64_t seed = 0;
  void* dynamic_shared = nullptr;
  std::vector<EmulatedThread>* threads = nullptr;
  const std::function<void()>* thread_body = nullptr;
  FiberWorkerPool* workers = nullptr;
  size_t worker_set = 0;
  // The scheduler's pass (run_pass): the threads it resumes in turn, the position of the next one, and
  // whether one it ran is still runnable (yielded at an atomic).
  const std::vector<unsigned>* pass_order = nullptr;
  size_t pass_next = 0;
  bool pass_yielded = false;
  EmulatedThread* running = nullptr;
  unsigned finished_count = 0;
  unsigned barrier_count = 0;
  void* scheduler_tsan_fiber = nullptr;
  const void* barrier_sync = nullptr;      // TSan sync object of __syncthreads
  const void* block_start_sync = nullptr;  // released by the scheduler once the block is set up
  const void* launch_done_sync = nullptr;  // released by every thread as it exits
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

// Runs the thread the scheduler resumed the worker for (the block's running thread) up to its exit.
void run_thread_to_its_exit(BlockRun& block, EmulatedThread& self) {
  tsan::acquire(block.block_start_sync);
  try {
    (*block.thread_body)();
  } catch (const std::exception& error) {
    fail_in_kernel(std::string("uncaught exception: ") + error.what());
  }
  tsan::release(block.launch_done_sync);
  self.state = ThreadState::kFinished;
  ++block.finished_count;
}

// The pass's next thread if it has not started yet: a worker whose thread exits runs it at once, as the
// scheduler would next, without two switches. Not in the TSan build, where a worker is one TSan thread.
EmulatedThread* next_unstarted_thread_of_pass(BlockRun& block) {
  if (tsan::kEnabled || block.pass_order == nullptr) return nullptr;
  const std::vector<unsigned>& order = *block.pass_order;
  for (; block.pass_next < order.size(); ++block.pass_next) {
    EmulatedThread& thread = (*block.threads)[order[block.pass_next]];
    if (thread.state != ThreadState::kRunnable) continue;
    if (thread.worker != nullptr) return nullptr;  // suspended on its own worker: the scheduler resumes it
    ++block.pass_next;
    return &thread;
  }
  return nullptr;
}

// A worker's fiber: each time it is resumed idle it runs the block's running thread, and the pass's
// unstarted threads after it, until one suspends or none is left; then it goes back to the scheduler.
ctx::fiber run_worker(FiberWorker& worker, ctx::fiber&& caller) {
  while (true) {
#if LLMC_EMU_ASAN
    __sanitizer_finish_switch_fiber(worker.asan_fake_stack, &worker.caller_stack_bottom, &worker.caller_stack_size);
#endif
    if (worker.stopping) break;
    BlockRun& block = *current_block_run;
    block.scheduler_stack_bottom = worker.caller_stack_bottom;
    block.scheduler_stack_size = worker.caller_stack_size;
    EmulatedThread* self = block.running;
    self->scheduler = std::move(caller);
    while (true) {
      run_thread_to_its_exit(block, *self);
      EmulatedThread* next = next_unstarted_thread_of_pass(block);
      if (next == nullptr) break;
      self->worker = nullptr;
      next->worker = &worker;
      next->scheduler = std::move(self->scheduler);
      block.running = next;
      current_thread_builtins = &next->builtins;
      self = next;
    }
#if LLMC_EMU_ASAN
    __sanitizer_start_switch_fiber(&worker.asan_fake_stack, block.scheduler_stack_bottom, block.scheduler_stack_size);
#endif
    tsan::switch_to_fiber(block.scheduler_tsan_fiber);
    caller = std::move(self->scheduler).resume();
  }
#if LLMC_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, worker.caller_stack_bottom, worker.caller_stack_size);
#endif
  tsan::switch_to_fiber(worker.stopper_tsan_fiber);
  return std::move(caller);
}

// Boost.Context hands the stack back through this when a fiber terminates; the worker's slot keeps it.
struct SlotStackAllocator {
  void deallocate(ctx::stack_context&) noexcept {}
};

// The workers of one BlockRunner, created as blocks need them; they live as long as the runner. In the
// TSan build a worker is one TSan thread (its slot's fiber), so two threads of a block must not share
// one (the second would be ordered after the first), nor may a block take the previous block's (its
// barriers spread each worker's history to all threads): a worker freed in a block is idle again when
// the block ends, in the set of alternate blocks. Blocks two apart share workers and are ordered.
class FiberWorkerPool {
 public:
  FiberWorkerPool() : page_bytes_(page_size()), stack_bytes_(fiber_stack_bytes(page_bytes_)) {}
  FiberWorkerPool(const FiberWorkerPool&) = delete;
  FiberWorkerPool& operator=(const FiberWorkerPool&) = delete;
  ~FiberWorkerPool() {
    for (const std::unique_ptr<FiberWorker>& worker : workers_) stop(*worker);
  }

  FiberWorker& take(size_t set) {
    if (idle_[set].empty()) return create();
    FiberWorker* worker = idle_[set].back();
    idle_[set].pop_back();
    return *worker;
  }
  void give_back(FiberWorker& worker, size_t set) {
    if (tsan::kEnabled) {
      freed_.push_back(&worker);
    } else {
      idle_[set].push_back(&worker);
    }
  }
  void end_block(size_t set) {
    idle_[set].insert(idle_[set].end(), freed_.begin(), freed_.end());
    freed_.clear();
  }

 private:
  FiberWorker& create() {
    workers_.push_back(std::make_unique<FiberWorker>(page_bytes_, stack_bytes_));
    FiberWorker* worker = workers_.back().get();
    const ctx::stack_context stack = worker->slot.stack();
    worker->stack_bottom = static_cast<char*>(stack.sp) - stack.size;
    worker->stack_size = stack.size;
    worker->idle = ctx::fiber(std::allocator_arg, ctx::preallocated(stack.sp, stack.size, stack), SlotStackAllocator{},
                              [worker](ctx::fiber&& caller) { return run_worker(*worker, std::move(caller)); });
    return *worker;
  }
  // Lets an idle worker's fiber return, so that nothing is left on its stack when the slot is unmapped.
  static void stop(FiberWorker& worker) {
    if (!worker.idle) return;
    worker.stopping = true;
    worker.stopper_tsan_fiber = tsan::current_fiber();
#if LLMC_EMU_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, worker.stack_bottom, worker.stack_size);
#endif
    tsan::switch_to_fiber(worker.slot.tsan_fiber());
    worker.idle = std::move(worker.idle).resume();
#if LLMC_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  }

  static size_t page_size() {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) fail_system_call("sysconf(_SC_PAGESIZE)");
    return static_cast<size_t>(page);
  }

  size_t page_bytes_;
  size_t stack_bytes_;
  std::vector<std::unique_ptr<FiberWorker>> workers_;
  std::vector<FiberWorker*> idle_[2];
  std::vector<FiberWorker*> freed_;
};

// Suspends the running thread and returns to the scheduler; returns when the scheduler resumes it.
void suspend_running_thread(BlockRun& run) {
  EmulatedThread& thread = *run.running;
#if LLMC_EMU_ASAN
  __sanitizer_start_switch_fiber(&thread.worker->asan_fake_stack, run.scheduler_stack_bottom,
                                 run.scheduler_stack_size);
#endif
  tsan::switch_to_fiber(run.scheduler_tsan_fiber);
  thread.scheduler = std::move(thread.scheduler).resume();
#if LLMC_EMU_ASAN
  __sanitizer_finish_switch_fiber(thread.worker->asan_fake_stack, &run.scheduler_stack_bottom,
                                  &run.scheduler_stack_size);
#endif
}

// Runs `thread` up to its next synchronisation point or its exit (its first turn takes an idle worker),
// and on the same worker any unstarted threads of the pass after it. The thread that was last running
// when the worker comes back keeps the worker's continuation, or gives the worker back if it exited.
// Inlined into run_pass's loop: as a call it made every thread's turn at a barrier about 20 ns dearer
// (bench_emu_emu's __syncthreads rows).
inline __attribute__((always_inline)) void resume_thread(BlockRun& run, EmulatedThread& thread) {
  if (thread.worker == nullptr) {
    thread.worker = &run.workers->take(run.worker_set);
    thread.fiber = std::move(thread.worker->idle);
  }
  FiberWorker& worker = *thread.worker;
  run.running = &thread;
  current_thread_builtins = &thread.builtins;
#if LLMC_EMU_ASAN
  __sanitizer_start_switch_fiber(&run.scheduler_fake_stack, worker.stack_bottom, worker.stack_size);
#endif
  tsan::switch_to_fiber(worker.slot.tsan_fiber());
  ctx::fiber continuation = std::move(thread.fiber).resume();
#if LLMC_EMU_ASAN
  __sanitizer_finish_switch_fiber(run.scheduler_fake_stack, nullptr, nullptr);
#endif
  EmulatedThread& last = *run.running;
  run.running = nullptr;
  current_thread_builtins = nullptr;
  if (last.state == ThreadState::kFinished) {
    worker.idle = std::move(continuation);
    run.workers->give_back(worker, run.worker_set);
    last.worker = nullptr;
  } else {
    last.fiber = std::move(continuation);
    run.pass_yielded |= last.state == ThreadState::kRunnable;
  }
}

// TSan: every participant's accesses so far happen before every participant's accesses from now on
// (a barrier). Runs in each participant's TSan context while all of them are stopped, so that none
// can add later accesses to the edge.
void order_all_before_all(BlockRun& run, const std::vector<EmulatedThread*>& participants,
                          const void* sync_object) {
  if (!tsan::kEnabled) return;
  for (EmulatedThread* thread : participants) {
    tsan::switch_to_fiber(thread->worker->slot.tsan_fiber());
    tsan::release(sync_object);
  }
  for (EmulatedThread* thread : participants) {
    tsan::switch_to_fiber(thread->worker->slot.tsan_fiber());
    tsan::acquire(sync_object);
  }
  tsan::switch_to_fiber(run.scheduler_tsan_fiber);
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
  std::string schedule = schedule_mode_name(run.mode);
  if (run.mode == ScheduleMode::kDrift) schedule += " (block seed " + std::to_string(run.seed) + ")";
  std::fprintf(stderr,
               "llmc emu: error in kernel %s (launched at %s:%d, grid %s, block %s), block %s, "
               "schedule %s: %s\n",
               launch.kernel_name, launch.file, launch.line, format_dim(launch.grid_dim).c_str(),
               format_dim(launch.block_dim).c_str(), format_dim(run.block_idx).c_str(),
               schedule.c_str(), message.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string describe_warp_wait(const EmulatedThread& thread) {
  char text[512];
  std::snprintf(text, sizeof text, "%s mask 0x%08x at %s:%d", thread.warp_operation_name, thread.warp_mask,
                thread.wait_file, thread.wait_line);
  return text;
}

// Whether every lane named in `waiter`'s mask waits at the very same operation (then it can complete).
// Lanes that wait at a different operation, or have exited, are errors (a GPU's behaviour is undefined).
bool warp_operation_complete(BlockRun& run, size_t warp_base, unsigned lanes_in_warp,
                             const EmulatedThread& waiter) {
  std::vector<EmulatedThread>& threads = *run.threads;
  const unsigned mask = waiter.warp_mask;
  for (unsigned other = 0; other < 32; ++other) {
    if (!((mask >> other) & 1u)) continue;
    if (other >= lanes_in_warp) {
      fail_block(run, describe_warp_wait(waiter) + " names lane " + std::to_string(other) +
                          ", but this warp has only " + std::to_string(lanes_in_warp) + " threads");
    }
    const EmulatedThread& peer = threads[warp_base + other];
    if (peer.state == ThreadState::kFinished) {
      fail_block(run, describe_warp_wait(waiter) + " (thread " + std::to_string(waiter.linear_id) +
                          ") names lane " + std::to_string(other) + " (thread " +
                          std::to_string(peer.linear_id) + ") in its mask, which has exited");
    }
    if (peer.state != ThreadState::kAtWarpOperation) return false;
  }
  for (unsigned other = 0; other < 32; ++other) {
    if (!((mask >> other) & 1u)) continue;
    const EmulatedThread& peer = threads[warp_base + other];
    if (peer.warp_resolver != waiter.warp_resolver || peer.warp_mask != mask ||
        peer.warp_post.flags != waiter.warp_post.flags) {
      fail_block(run, "lanes of warp " + std::to_string(warp_base / 32) +
                          " wait at different warp operations (undefined on a GPU): thread " +
                          std::to_string(waiter.linear_id) + " at " + describe_warp_wait(waiter) +
                          ", thread " + std::to_string(peer.linear_id) + " at " + describe_warp_wait(peer));
    }
  }
  return true;
}

// Completes `waiter`'s operation: the resolver computes every lane's result; __syncwarp orders memory.
void complete_warp_operation(BlockRun& run, size_t warp_base, EmulatedThread& waiter) {
  std::vector<EmulatedThread>& threads = *run.threads;
  const unsigned mask = waiter.warp_mask;
  WarpOperation operation;
  operation.mask = mask;
  operation.warp_index = static_cast<int>(warp_base / 32);
  for (unsigned other = 0; other < 32; ++other) {
    if ((mask >> other) & 1u) operation.lanes[other] = &threads[warp_base + other].warp_post;
  }
  // The resolver moves register values between lanes: not memory accesses of the kernel, so TSan must
  // not see them. It may report errors; attribute them to the first lane of the operation.
  run.running = &waiter;
  current_thread_builtins = &waiter.builtins;
  {
    tsan::IgnoreAccesses ignore;
    waiter.warp_resolver(operation);
  }
  run.running = nullptr;
  current_thread_builtins = nullptr;
  if (tsan::kEnabled && (waiter.warp_post.flags & kWarpOperationOrdersMemory)) {
    std::vector<EmulatedThread*> participants;
    for (unsigned other = 0; other < 32; ++other) {
      if ((mask >> other) & 1u) participants.push_back(&threads[warp_base + other]);
    }
    const std::unique_ptr<char> sync_object(new char);  // fresh: orders exactly these lanes
    order_all_before_all(run, participants, sync_object.get());
  }
  for (unsigned other = 0; other < 32; ++other) {
    if ((mask >> other) & 1u) threads[warp_base + other].state = ThreadState::kRunnable;
  }
}

// Releases every warp operation of warp `warp` whose lanes have all arrived. Returns whether any was.
bool resolve_warp_operations(BlockRun& run, size_t warp) {
  std::vector<EmulatedThread>& threads = *run.threads;
  const size_t warp_base = warp * 32;
  const unsigned lanes_in_warp = static_cast<unsigned>(std::min<size_t>(32, threads.size() - warp_base));
  bool released = false;
  for (unsigned lane = 0; lane < lanes_in_warp; ++lane) {
    EmulatedThread& waiter = threads[warp_base + lane];
    if (waiter.state != ThreadState::kAtWarpOperation) continue;
    if (!warp_operation_complete(run, warp_base, lanes_in_warp, waiter)) continue;
    complete_warp_operation(run, warp_base, waiter);
    released = true;
  }
  return released;
}

bool resolve_all_warp_operations(BlockRun& run) {
  bool released = false;
  const size_t warps = (run.threads->size() + 31) / 32;
  for (size_t warp = 0; warp < warps; ++warp) released |= resolve_warp_operations(run, warp);
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
               (thread.wait_file != first_waiter->wait_file &&  // one call site: usually one literal
                std::strcmp(thread.wait_file, first_waiter->wait_file) != 0)) {
      fail_block(run, "threads wait at different __syncthreads calls (a barrier in divergent "
                      "code):" + describe_block_state(threads));
    }
  }
  if (run.finished_count > 0) {
    fail_block(run, "__syncthreads not reached by all threads of the block (some exited):" +
                        describe_block_state(threads));
  }
  if (tsan::kEnabled) {
    std::vector<EmulatedThread*> participants;
    for (EmulatedThread& thread : threads) participants.push_back(&thread);
    order_all_before_all(run, participants, run.barrier_sync);
  }
  for (EmulatedThread& thread : threads) thread.state = ThreadState::kRunnable;
  run.barrier_count = 0;
  return true;
}

// Resumes each listed thread that can run, once, in the given order. Returns whether any of them is
// still runnable afterwards (it yielded at an atomic and wants another turn).
bool run_pass(BlockRun& run, const std::vector<unsigned>& order) {
  std::vector<EmulatedThread>& threads = *run.threads;
  run.pass_order = &order;
  run.pass_yielded = false;
  for (size_t next = 0; next < order.size();) {
    EmulatedThread& thread = threads[order[next++]];
    if (thread.state != ThreadState::kRunnable) continue;
    run.pass_next = next;
    resume_thread(run, thread);
    next = run.pass_next;
  }
  run.pass_order = nullptr;
  return run.pass_yielded;
}

[[noreturn]] void fail_deadlock(const BlockRun& run) {
  fail_block(run, "deadlock: no thread of the block can proceed:" + describe_block_state(*run.threads));
}

// Lockstep: every thread runs to its next synchronisation point, then whatever can complete does.
void run_lockstep(BlockRun& run) {
  const unsigned count = static_cast<unsigned>(run.threads->size());
  std::vector<unsigned> order(count);
  std::iota(order.begin(), order.end(), 0u);
  if (run.mode == ScheduleMode::kReverse) std::reverse(order.begin(), order.end());
  while (true) {
    const bool yielded = run_pass(run, order);
    if (run.finished_count == count) return;
    if (yielded || resolve_all_warp_operations(run) || release_block_barrier(run)) continue;
    fail_deadlock(run);
  }
}

// Drift: one warp at a time runs until all its lanes wait at the block barrier (or exit), lanes in a
// fresh random order each pass; warps in a fresh random order each phase between barriers.
void run_drifting(BlockRun& run, std::mt19937_64& random) {
  const unsigned count = static_cast<unsigned>(run.threads->size());
  const unsigned warps = (count + 31) / 32;
  std::vector<unsigned> warp_order(warps);
  std::iota(warp_order.begin(), warp_order.end(), 0u);
  while (true) {
    std::shuffle(warp_order.begin(), warp_order.end(), random);
    for (unsigned warp : warp_order) {
      std::vector<unsigned> lanes(std::min(32u, count - warp * 32));
      std::iota(lanes.begin(), lanes.end(), warp * 32);
      while (true) {
        std::shuffle(lanes.begin(), lanes.end(), random);
        const bool yielded = run_pass(run, lanes);
        if (!yielded && !resolve_warp_operations(run, warp)) break;
      }
    }
    if (run.finished_count == count) return;
    if (release_block_barrier(run)) continue;
    fail_deadlock(run);
  }
}

void poison(void* begin, size_t bytes) {
  tsan::forget_accesses(begin, bytes);  // a GPU gives every block fresh shared memory
  std::memset(begin, kUninitializedByte, bytes);
}

}  // namespace

struct BlockRunner::Impl {
  std::vector<EmulatedThread> threads;
  uint64_t blocks_run = 0;
  // TSan sync objects (only their addresses matter).
  char barrier_sync = 0;
  char block_start_sync = 0;
  char launch_done_sync = 0;
  FiberWorkerPool workers;  // declared last, destroyed first: it stops the workers while the rest is still there
};

BlockRunner::BlockRunner() : impl_(std::make_unique<Impl>()) {}
BlockRunner::~BlockRunner() = default;

void BlockRunner::run_block(const KernelLaunchInfo& launch, uint3 block_idx, void* dynamic_shared,
                            const std::function<void()>& thread_body, ScheduleMode mode,
                            uint64_t block_seed) {
  const dim3 block_dim = launch.block_dim;
  const size_t thread_count = static_cast<size_t>(block_dim.x) * block_dim.y * block_dim.z;
  std::vector<EmulatedThread>& threads = impl_->threads;
  if (threads.size() != thread_count) threads = std::vector<EmulatedThread>(thread_count);

  // Fresh, poisoned shared memory: what a GPU leaves undefined reads as NaN.
  if (launch.symbols != nullptr) {
    for (const StaticSharedVariable& variable : launch.symbols->static_shared) poison(variable.address, variable.bytes);
  }
  if (launch.dynamic_shared_bytes > 0) poison(dynamic_shared, launch.dynamic_shared_bytes);

  BlockRun run;
  run.launch = &launch;
  run.block_idx = block_idx;
  run.mode = mode;
  run.seed = block_seed;
  run.dynamic_shared = dynamic_shared;
  run.threads = &threads;
  run.scheduler_tsan_fiber = tsan::current_fiber();
  run.barrier_sync = &impl_->barrier_sync;
  run.block_start_sync = &impl_->block_start_sync;
  run.launch_done_sync = &impl_->launch_done_sync;
  BlockRun* const outer_run = current_block_run;
  current_block_run = &run;

  run.thread_body = &thread_body;
  run.workers = &impl_->workers;
  run.worker_set = tsan::kEnabled ? impl_->blocks_run++ % 2 : 0;
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
  }
  tsan::release(run.block_start_sync);  // the set-up above happens before the threads run

  if (mode == ScheduleMode::kDrift) {
    std::mt19937_64 random(block_seed);
    run_drifting(run, random);
  } else {
    run_lockstep(run);
  }
  impl_->workers.end_block(run.worker_set);
  current_block_run = outer_run;
}

void BlockRunner::finish_launch() { tsan::acquire(&impl_->launch_done_sync); }

void block_barrier(const char* file, int line) {
  BlockRun& run = require_block_run("__syncthreads");
  EmulatedThread& thread = *run.running;
  thread.state = ThreadState::kAtBarrier;
  thread.wait_file = file;
  thread.wait_line = line;
  ++run.barrier_count;
  suspend_running_thread(run);
}

void yield_thread() {
  if (current_block_run == nullptr || current_block_run->running == nullptr) return;  // host code
  suspend_running_thread(*current_block_run);
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

int current_lane() {
  return static_cast<int>(require_block_run("lane query").running->linear_id % 32);
}

void* current_dynamic_shared_memory() {
  return require_block_run("LLMC_DYNAMIC_SHARED").dynamic_shared;
}

bool is_shared_memory(const void* address, size_t bytes) {
  const BlockRun& run = require_block_run("shared-memory query");
  const auto inside = [&](const void* begin, size_t size) {
    const auto* first = static_cast<const char*>(begin);
    const auto* probe = static_cast<const char*>(address);
    return probe >= first && probe + bytes <= first + size;
  };
  if (run.launch->dynamic_shared_bytes > 0 && inside(run.dynamic_shared, run.launch->dynamic_shared_bytes)) {
    return true;
  }
  if (run.launch->symbols == nullptr) return false;
  for (const StaticSharedVariable& variable : run.launch->symbols->static_shared) {
    if (inside(variable.address, variable.bytes)) return true;
  }
  return false;
}

uint32_t shared_window_address(const void* address) {
  const BlockRun& run = require_block_run("shared-memory address");
  const auto* base = static_cast<const unsigned char*>(run.dynamic_shared);
  const auto* probe = static_cast<const unsigned char*>(address);
  if (run.launch->dynamic_shared_bytes == 0 || probe < base || probe >= base + run.launch->dynamic_shared_bytes) {
    fail_in_kernel("shared-memory address asked for a pointer outside the block's dynamic shared memory "
                   "(the emulation gives shared-window addresses to dynamic shared memory only)");
  }
  return kDynamicSharedWindowAddress + static_cast<uint32_t>(probe - base);
}

const unsigned char* shared_window_pointer(uint32_t address, size_t bytes, const char* operation_name) {
  const BlockRun& run = require_block_run(operation_name);
  const size_t size = run.launch->dynamic_shared_bytes;
  if (address < kDynamicSharedWindowAddress || address - kDynamicSharedWindowAddress + bytes > size) {
    fail_in_kernel(std::string(operation_name) + ": shared address " + std::to_string(address) + " + " +
                   std::to_string(bytes) + " bytes is outside the block's dynamic shared memory");
  }
  return static_cast<const unsigned char*>(run.dynamic_shared) + (address - kDynamicSharedWindowAddress);
}

}  // namespace llmc::emu
