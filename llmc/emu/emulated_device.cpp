// The emulated CUDA device (see emulated_device.h): memory registry, streams with legacy
// default-stream ordering, and kernel launches that run grid blocks as fibers on a stream worker.
#include "llmc/emu/emulated_device.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace llmc::emu {

namespace {

// Freshly allocated device memory and dynamic shared memory are filled with this byte, so reads of
// never-written memory give NaN (floats, bf16) instead of a lucky zero.
constexpr int kUninitializedByte = 0xFF;

bool is_legacy_handle(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

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

EmulatedDevice::EmulatedDevice() {
  if (const char* order = std::getenv("LLMC_EMU_THREAD_ORDER")) {
    if (std::strcmp(order, "reverse") == 0) {
      thread_order_ = ThreadOrder::kReverse;
    } else if (std::strcmp(order, "forward") != 0) {
      std::fprintf(stderr, "llmc emu: LLMC_EMU_THREAD_ORDER=%s: expected forward or reverse\n", order);
      std::abort();
    }
  }
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
  p.sharedMemPerBlock = kDefaultDynamicSharedLimit;
  p.sharedMemPerBlockOptin = kMaxDynamicSharedOptIn;
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
  if (kind == MemoryKind::kDevice) std::memset(memory, kUninitializedByte, bytes);
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
    if (kind == MemoryKind::kDevice) device_bytes_in_use_ -= found->second.bytes;
    allocations_.erase(found);
  }
  // cudaFree/cudaFreeHost synchronise the device: no queued task may still use the memory.
  synchronize_all();
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

uint64_t EmulatedDevice::enqueue(cudaStream_t stream_handle, std::function<void()> task) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(stream_handle);
  const auto wait_for = [](std::shared_ptr<StreamWorker> other, uint64_t sequence) {
    return [other = std::move(other), sequence] { other->wait_until_complete(sequence); };
  };
  if (stream == &legacy_stream_) {
    // Legacy default stream: waits for all earlier work in every blocking stream.
    for (CUstream_st* other : streams_) {
      if (other->flags & cudaStreamNonBlocking) continue;
      const uint64_t tail = other->worker->last_enqueued();
      if (!other->worker->is_complete(tail)) stream->worker->enqueue(wait_for(other->worker, tail));
    }
  } else if (!(stream->flags & cudaStreamNonBlocking)) {
    // Blocking stream: waits for all earlier work in the legacy default stream.
    const uint64_t tail = legacy_stream_.worker->last_enqueued();
    if (!legacy_stream_.worker->is_complete(tail)) {
      stream->worker->enqueue(wait_for(legacy_stream_.worker, tail));
    }
  }
  return stream->worker->enqueue(std::move(task));
}

void EmulatedDevice::synchronize_stream(cudaStream_t stream) { resolve(stream)->worker->wait_until_idle(); }

void EmulatedDevice::synchronize_all() {
  std::vector<std::shared_ptr<StreamWorker>> workers{legacy_stream_.worker};
  {
    std::lock_guard<std::mutex> lock(stream_mutex_);
    for (CUstream_st* stream : streams_) workers.push_back(stream->worker);
  }
  for (const auto& worker : workers) worker->wait_until_idle();
}

// ---- kernels -----------------------------------------------------------------------------------

cudaError_t EmulatedDevice::set_max_dynamic_shared(const void* kernel_address, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > kMaxDynamicSharedOptIn) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(kernel_attribute_mutex_);
  dynamic_shared_limit_[kernel_address] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::launch(const KernelLaunchInfo& launch, std::function<void()> thread_body,
                                   cudaStream_t stream, std::string* error_detail) {
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
  size_t shared_limit = kDefaultDynamicSharedLimit;
  {
    std::lock_guard<std::mutex> lock(kernel_attribute_mutex_);
    auto found = dynamic_shared_limit_.find(launch.kernel_address);
    if (found != dynamic_shared_limit_.end()) shared_limit = std::max(shared_limit, found->second);
  }
  if (launch.dynamic_shared_bytes > shared_limit) {
    *error_detail = std::to_string(launch.dynamic_shared_bytes) +
                    " bytes of dynamic shared memory exceed the limit of " +
                    std::to_string(shared_limit) +
                    " (above 48 KiB needs cudaFuncSetAttribute("
                    "cudaFuncAttributeMaxDynamicSharedMemorySize), at most 227 KiB)";
    return cudaErrorInvalidValue;
  }
  enqueue(stream, [this, launch, body = std::move(thread_body), order = thread_order()] {
    run_grid(launch, body, order);
  });
  return cudaSuccess;
}

void EmulatedDevice::run_grid(const KernelLaunchInfo& launch, const std::function<void()>& thread_body,
                              ThreadOrder order) {
  // Exactly the requested size, so AddressSanitizer catches accesses past the end.
  const size_t shared_bytes = launch.dynamic_shared_bytes;
  std::unique_ptr<unsigned char[]> dynamic_shared(new unsigned char[shared_bytes]);
  const dim3 grid = launch.grid_dim;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        // Uninitialised on a GPU: make a read before write visible (NaN) instead of reading
        // the previous block's data.
        std::memset(dynamic_shared.get(), kUninitializedByte, shared_bytes);
        std::lock_guard<std::mutex> lock(block_mutex_);
        block_runner_.run_block(launch, uint3{x, y, z}, dynamic_shared.get(), thread_body, order);
      }
    }
  }
}

}  // namespace llmc::emu
