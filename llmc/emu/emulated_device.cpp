// The emulated CUDA device (see emulated_device.h): memory registry, streams with legacy
// default-stream ordering, and kernel launches that run grid blocks as fibers on a stream worker.
#include "llmc/emu/emulated_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <numeric>
#include <random>
#include <thread>

#include "llmc/emu/kernel_symbols.h"
#include "llmc/emu/tsan_hooks.h"

namespace llmc::emu {

bool is_legacy_handle(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

namespace {

std::string format_dim(dim3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

}  // namespace

EmulatedDevice& EmulatedDevice::instance() {
  // Deliberately never destroyed: stream workers may still be running when static destructors
  // run at exit, and the CUDA runtime likewise lives until the process ends.
  static EmulatedDevice* const device = new EmulatedDevice();
  return *device;
}

// LLMC_EMU_SCHEDULE and LLMC_EMU_SEED (see emulated_device.h).
static Schedule schedule_from_environment() {
  Schedule schedule;
  if (const char* mode = std::getenv("LLMC_EMU_SCHEDULE")) {
    const ScheduleMode modes[] = {ScheduleMode::kForward, ScheduleMode::kReverse, ScheduleMode::kDrift};
    const auto found = std::find_if(std::begin(modes), std::end(modes),
                                    [&](ScheduleMode m) { return std::strcmp(mode, schedule_mode_name(m)) == 0; });
    if (found == std::end(modes)) {
      std::fprintf(stderr, "llmc emu: LLMC_EMU_SCHEDULE=%s: expected forward, reverse or drift\n", mode);
      std::abort();
    }
    schedule.mode = *found;
  }
  if (const char* seed = std::getenv("LLMC_EMU_SEED")) {
    char* end = nullptr;
    schedule.seed = std::strtoull(seed, &end, 10);
    if (end == seed || *end != '\0') {
      std::fprintf(stderr, "llmc emu: LLMC_EMU_SEED=%s is not a non-negative integer\n", seed);
      std::abort();
    }
  }
  return schedule;
}

EmulatedDevice::EmulatedDevice() {
  schedule_ = schedule_from_environment();
  if (const char* drop = std::getenv("LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS")) {
    if (std::strcmp(drop, "1") != 0 && std::strcmp(drop, "0") != 0) {
      std::fprintf(stderr, "llmc emu: LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS=%s: expected 0 or 1\n", drop);
      std::abort();
    }
    drop_waits_on_priority_streams_ = std::strcmp(drop, "1") == 0;
  }
  legacy_stream_.worker = std::make_shared<StreamWorker>("legacy default stream");
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  total_memory_bytes_ = pages > 0 && page_bytes > 0 ? static_cast<size_t>(pages) * page_bytes
                                                    : size_t{16} << 30;

  cudaDeviceProp& p = properties_;
  std::strncpy(p.name, "Emulated CPU device", sizeof(p.name) - 1);
  p.totalGlobalMem = total_memory_bytes_;
  p.sharedMemPerBlock = kDefaultSharedLimit;
  p.sharedMemPerBlockOptin = kMaxSharedOptIn;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.reservedSharedMemPerBlock = 1024;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.memPitch = SIZE_MAX;
  p.maxThreadsPerBlock = kMaxThreadsPerBlock;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 64 * 1024;
  // Compute capability 9.0: the instruction semantics emulated are those of sm_90 (minus the
  // Hopper-only wgmma/TMA paths, which are GPU-only).
  p.major = 9;
  p.minor = 0;
  p.multiProcessorCount = 1;  // blocks run one at a time
  p.maxThreadsPerMultiProcessor = 2048;
  p.maxBlocksPerMultiProcessor = 32;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.memoryBusWidth = 5120;
  p.concurrentKernels = 1;
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.canMapHostMemory = 1;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
}

// ---- memory ------------------------------------------------------------------------------------

cudaError_t EmulatedDevice::allocate(void** pointer, size_t bytes, MemoryKind kind) {
  if (pointer == nullptr) return cudaErrorInvalidValue;
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  // Exactly `bytes`, so AddressSanitizer reports an access one past the end; 256-byte aligned
  // as cudaMalloc guarantees.
  void* memory = nullptr;
  if (posix_memalign(&memory, 256, bytes) != 0) return cudaErrorMemoryAllocation;
  if (kind == MemoryKind::kDevice && fill_new_memory_.load()) std::memset(memory, kUninitializedByte, bytes);
  std::lock_guard<std::mutex> lock(memory_mutex_);
  allocations_[reinterpret_cast<uintptr_t>(memory)] = Allocation{bytes, kind};
  if (kind == MemoryKind::kDevice) device_bytes_in_use_ += bytes;
  *pointer = memory;
  return cudaSuccess;
}

cudaError_t EmulatedDevice::release(void* pointer, MemoryKind kind) {
  if (pointer == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(memory_mutex_);
    auto found = allocations_.find(reinterpret_cast<uintptr_t>(pointer));
    if (found == allocations_.end() || found->second.kind != kind) return cudaErrorInvalidValue;
  }
  // cudaFree/cudaFreeHost synchronise the device: no queued task may still use the memory (refused while a stream
  // captures, as that synchronisation is).
  if (cudaError_t error = synchronize_all(); error != cudaSuccess) return error;
  {
    std::lock_guard<std::mutex> lock(memory_mutex_);
    auto found = allocations_.find(reinterpret_cast<uintptr_t>(pointer));
    if (found == allocations_.end() || found->second.kind != kind) return cudaErrorInvalidValue;
    if (kind == MemoryKind::kDevice) device_bytes_in_use_ -= found->second.bytes;
    allocations_.erase(found);
  }
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::release_in_stream_order(void* pointer) {
  {
    std::lock_guard<std::mutex> lock(memory_mutex_);
    auto found = allocations_.find(reinterpret_cast<uintptr_t>(pointer));
    if (found == allocations_.end() || found->second.kind != MemoryKind::kDevice) return cudaErrorInvalidValue;
    device_bytes_in_use_ -= found->second.bytes;
    allocations_.erase(found);
  }
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::classify(const void* pointer, size_t bytes, MemoryKind* kind) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(memory_mutex_);
  auto after = allocations_.upper_bound(address);
  if (after == allocations_.begin()) {
    *kind = MemoryKind::kPageableHost;
    return cudaSuccess;
  }
  const auto& [start, allocation] = *std::prev(after);
  if (address >= start + allocation.bytes) {
    *kind = MemoryKind::kPageableHost;
    return cudaSuccess;
  }
  *kind = allocation.kind;
  if (address + bytes > start + allocation.bytes) return cudaErrorInvalidValue;
  return cudaSuccess;
}

bool EmulatedDevice::is_pageable_host_memory(const void* pointer) const {
  if (pointer == nullptr) return false;
  MemoryKind kind;
  if (classify(pointer, 0, &kind) != cudaSuccess || kind != MemoryKind::kPageableHost) return false;
  // One past the end of an allocation (an empty range's pointer) is a device pointer too.
  const char* before = static_cast<const char*>(pointer) - 1;
  return classify(before, 1, &kind) != cudaSuccess || kind == MemoryKind::kPageableHost;
}

size_t EmulatedDevice::device_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(memory_mutex_);
  return device_bytes_in_use_;
}

// ---- streams -----------------------------------------------------------------------------------

CUstream_st* EmulatedDevice::resolve(cudaStream_t stream) {
  // The per-thread default stream is treated as the legacy one (the project does not use it).
  return is_legacy_handle(stream) ? &legacy_stream_ : stream;
}

cudaStream_t EmulatedDevice::create_stream(unsigned flags, int priority) {
  auto* stream = new CUstream_st();
  stream->flags = flags;
  stream->priority = priority;
  std::lock_guard<std::mutex> lock(stream_mutex_);
  stream->worker = std::make_shared<StreamWorker>("stream " + std::to_string(++streams_created_));
  streams_.push_back(stream);
  return stream;
}

void EmulatedDevice::destroy_stream(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(stream_mutex_);
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i] == stream) {
        streams_.erase(streams_.begin() + static_cast<long>(i));
        break;
      }
    }
  }
  // CUDA lets queued work finish after cudaStreamDestroy returns; finishing it first is simpler
  // and only slower.
  stream->worker->wait_until_idle();
  delete stream;
}

cudaError_t EmulatedDevice::enqueue(cudaStream_t stream_handle, std::function<void()> task, uint64_t* sequence) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(stream_handle);
  if (sequence != nullptr) *sequence = 0;
  if (stream->capture != nullptr) {
    if (stream->capture->invalidated()) return cudaErrorStreamCaptureInvalidated;
    stream->capture->add(stream, std::move(task));
    return cudaSuccess;
  }
  if (stream == &legacy_stream_ && blocking_stream_captures())
    return refuse_in_capture(nullptr, "work on the legacy default stream", cudaErrorStreamCaptureImplicit);
  if (stream == &legacy_stream_) {
    // Legacy default stream: waits for all earlier work in every blocking stream.
    for (CUstream_st* other : streams_) {
      if (other->flags & cudaStreamNonBlocking) continue;
      const uint64_t tail = other->worker->last_enqueued();
      if (!other->worker->is_complete(tail)) {
        stream->worker->enqueue(wait_task(other->worker, tail));
      } else {
        other->worker->wait_until_complete(tail);  // returns at once; orders the work before the task (TSan)
      }
    }
  } else if (!(stream->flags & cudaStreamNonBlocking)) {
    // Blocking stream: waits for all earlier work in the legacy default stream.
    const uint64_t tail = legacy_stream_.worker->last_enqueued();
    if (!legacy_stream_.worker->is_complete(tail)) {
      stream->worker->enqueue(wait_task(legacy_stream_.worker, tail));
    } else {
      legacy_stream_.worker->wait_until_complete(tail);
    }
  }
  const uint64_t enqueued = stream->worker->enqueue(std::move(task));
  if (sequence != nullptr) *sequence = enqueued;
  return cudaSuccess;
}

cudaError_t EmulatedDevice::synchronize_stream(cudaStream_t stream) {
  if (cudaError_t error = check_not_capturing(stream, "synchronizing a capturing stream"); error != cudaSuccess)
    return error;
  resolve(stream)->worker->wait_until_idle();
  return cudaSuccess;
}

cudaError_t EmulatedDevice::synchronize_all() {
  std::vector<std::shared_ptr<StreamWorker>> workers{legacy_stream_.worker};
  {
    std::lock_guard<std::mutex> lock(stream_mutex_);
    for (CUstream_st* stream : streams_)
      if (stream->capture != nullptr)
        return refuse_in_capture(stream, "synchronizing the device", cudaErrorStreamCaptureUnsupported);
    for (CUstream_st* stream : streams_) workers.push_back(stream->worker);
  }
  for (const auto& worker : workers) worker->wait_until_idle();
  return cudaSuccess;
}

// ---- kernels ----------------------------------------------------------------------------------

void EmulatedDevice::set_schedule(Schedule schedule) {
  std::lock_guard<std::mutex> lock(schedule_mutex_);
  schedule_ = schedule;
}

Schedule EmulatedDevice::schedule() const {
  std::lock_guard<std::mutex> lock(schedule_mutex_);
  return schedule_;
}

cudaError_t EmulatedDevice::set_max_dynamic_shared(const void* kernel_address, int bytes) {
  const size_t static_bytes = kernel_symbol_info(kernel_address).static_shared_bytes;
  if (bytes < 0 || static_bytes + static_cast<size_t>(bytes) > kMaxSharedOptIn) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(kernel_attribute_mutex_);
  dynamic_shared_limit_[kernel_address] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

namespace {

cudaError_t check_shape(const KernelLaunchInfo& launch, std::string* error_detail) {
  const dim3 block = launch.block_dim;
  const dim3 grid = launch.grid_dim;
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 ||
      block.z > 64 || threads > static_cast<unsigned long long>(kMaxThreadsPerBlock)) {
    *error_detail = "block " + format_dim(block) + " is not a valid block shape (at most 1024 "
                    "threads, 1024 x 1024 x 64)";
    return cudaErrorInvalidConfiguration;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535) {
    *error_detail = "grid " + format_dim(grid) + " is not a valid grid shape";
    return cudaErrorInvalidConfiguration;
  }
  // Launch bounds given as an integer literal (or a macro) are checked; a named constant's value does
  // not reach the symbol table, so those bounds cannot be (docs/emulation.md).
  const KernelSymbolInfo& symbols = *launch.symbols;
  if (symbols.max_threads_per_block > 0 && threads > static_cast<unsigned long long>(symbols.max_threads_per_block)) {
    *error_detail = "block " + format_dim(block) + " has " + std::to_string(threads) +
                    " threads, more than the kernel's __launch_bounds__(" +
                    std::to_string(symbols.max_threads_per_block) + ")";
    return cudaErrorLaunchOutOfResources;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t EmulatedDevice::check_launch(const KernelLaunchInfo& launch,
                                         const std::vector<const void*>& pointer_arguments,
                                         std::string* error_detail) {
  if (cudaError_t error = check_shape(launch, error_detail); error != cudaSuccess) return error;
  const size_t static_bytes = launch.symbols->static_shared_bytes;
  if (static_bytes > kDefaultSharedLimit) {
    *error_detail = std::to_string(static_bytes) + " bytes of static __shared__ memory exceed the 48 KiB "
                    "a kernel may declare (larger buffers must be dynamic shared memory)";
    return cudaErrorInvalidValue;
  }
  std::optional<size_t> opted_in;
  {
    std::lock_guard<std::mutex> lock(kernel_attribute_mutex_);
    auto found = dynamic_shared_limit_.find(launch.kernel_address);
    if (found != dynamic_shared_limit_.end()) opted_in = found->second;
  }
  const size_t dynamic_bytes = launch.dynamic_shared_bytes;
  // cudaFuncSetAttribute already checked that static + opted-in dynamic fits in 227 KiB.
  const bool fits = opted_in ? dynamic_bytes <= *opted_in : static_bytes + dynamic_bytes <= kDefaultSharedLimit;
  if (!fits) {
    *error_detail = std::to_string(static_bytes) + " bytes of static and " + std::to_string(dynamic_bytes) +
                    " bytes of dynamic shared memory exceed the kernel's limit (above 48 KiB in all needs "
                    "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), at most 227 KiB)";
    return cudaErrorInvalidValue;
  }
  for (size_t i = 0; i < pointer_arguments.size(); ++i) {
    if (is_pageable_host_memory(pointer_arguments[i])) {
      *error_detail = "a pointer argument (" + std::to_string(i + 1) + " of the pointer arguments) points "
                      "to pageable host memory, which a GPU cannot access: use cudaMalloc or cudaMallocHost";
      return cudaErrorInvalidValue;
    }
  }
  return cudaSuccess;
}

cudaError_t EmulatedDevice::launch(KernelLaunchInfo launch, std::function<void()> thread_body,
                                   const std::vector<const void*>& pointer_arguments, cudaStream_t stream,
                                   std::string* error_detail) {
  launch.symbols = &kernel_symbol_info(launch.kernel_address);
  if (cudaError_t error = check_launch(launch, pointer_arguments, error_detail); error != cudaSuccess) {
    return error;
  }
  Schedule schedule;
  uint64_t launch_sequence;
  {
    std::lock_guard<std::mutex> lock(schedule_mutex_);
    schedule = schedule_;
    launch_sequence = ++launches_;
  }
  return enqueue(stream, [this, launch, body = std::move(thread_body), schedule, launch_sequence] {
    run_grid(launch, body, schedule, launch_sequence);
  });
}

namespace {

// The order blocks run in: x fastest (forward), the reverse, or a seeded random permutation (drift).
std::vector<uint3> block_order(dim3 grid, Schedule schedule, std::mt19937_64& random) {
  std::vector<uint3> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(uint3{x, y, z});
  if (schedule.mode == ScheduleMode::kReverse) std::reverse(blocks.begin(), blocks.end());
  if (schedule.mode == ScheduleMode::kDrift) std::shuffle(blocks.begin(), blocks.end(), random);
  return blocks;
}

// The emulated SM of the calling stream worker: its fibers run only this worker's kernels.
BlockRunner& this_workers_block_runner() {
  thread_local BlockRunner runner;
  return runner;
}

}  // namespace

void EmulatedDevice::run_grid(const KernelLaunchInfo& launch, const std::function<void()>& thread_body,
                              Schedule schedule, uint64_t launch_sequence) {
  // Exactly the requested size, so AddressSanitizer catches accesses past the end.
  std::unique_ptr<unsigned char[]> dynamic_shared(new unsigned char[launch.dynamic_shared_bytes]);
  std::mt19937_64 random(schedule.seed * 0x9E3779B97F4A7C15ull + launch_sequence);
  BlockRunner& runner = this_workers_block_runner();
  for (const uint3 block : block_order(launch.grid_dim, schedule, random)) {
    // The device-wide lock orders nothing for TSan: blocks of different streams are not ordered on a GPU.
    tsan::ignore_sync_begin();
    std::unique_lock<std::mutex> lock(block_mutex_);
    tsan::ignore_sync_end();
    runner.run_block(launch, block, dynamic_shared.get(), thread_body, schedule.mode, random());
    tsan::ignore_sync_begin();
    lock.unlock();
    tsan::ignore_sync_end();
  }
  runner.finish_launch();
}

}  // namespace llmc::emu
