// cp.async (4-, 8- and 16-byte global -> shared copies with commit/wait groups) for the emulated build. A copy
// is invisible until the wait_group that covers it: at issue its destination is filled with a poison
// pattern (NaN as bf16, fp16 and fp32) and the data lands only at the matching wait, so a missing or
// too-weak wait reads poison. Waits also complete late by a different number of scheduler passes in
// each warp, so a barrier missing between the wait and the reads of other warps' copies is caught.
// Included through llmc/emu/device_builtins.h; kernels use it through llmc/cuda/async_copies.cuh.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/emu/block_runner.h"
#include "llmc/emu/emulated_device.h"

namespace llmc::emu {

// Two bytes repeated over an in-flight destination: 0xffa5 is a NaN as bf16 and fp16, 0xffa5ffa5 as
// fp32, and distinct from the 0xff fill of fresh device and dynamic shared memory.
inline constexpr unsigned char kCpAsyncPoison[2] = {0xa5, 0xff};
inline constexpr int kCpAsyncMaxBytes = 16;

// The cp.async state of one emulated thread: the copies it issued and not yet waited for, by group.
// Lives in the thread's own AsyncCopies object (llmc/cuda/async_copies.cuh), so it ends with the thread.
class CpAsyncQueue {
 public:
  CpAsyncQueue() = default;
  CpAsyncQueue(const CpAsyncQueue&) = delete;
  CpAsyncQueue& operator=(const CpAsyncQueue&) = delete;
  ~CpAsyncQueue() {
    if (!pending_.empty()) {
      fail_in_kernel("thread exits with " + std::to_string(pending_.size()) +
                     " cp.async copies never covered by a cp.async.wait_group");
    }
  }

  // cp.async.{ca,cg}.shared.global [dst], [src], copy_bytes, src_bytes: copies src_bytes
  // (0..copy_bytes) bytes and zero-fills the rest of the copy_bytes (4, 8 or 16). src is not read
  // when src_bytes is 0.
  void issue(void* shared_destination, const void* global_source, int copy_bytes, int src_bytes) {
    auto* destination = static_cast<unsigned char*>(shared_destination);
    const auto* source = static_cast<const unsigned char*>(global_source);
    check_addresses(destination, source, copy_bytes, src_bytes);
    Copy copy{destination, source, copy_bytes, src_bytes, {}, committed_groups_};
    std::memset(copy.data, 0, sizeof copy.data);
    if (src_bytes > 0) std::memcpy(copy.data, source, static_cast<size_t>(src_bytes));
    for (int i = 0; i < copy_bytes; ++i) destination[i] = kCpAsyncPoison[i % 2];
    pending_.push_back(copy);
  }

  // cp.async.commit_group: every copy issued since the last commit forms the newest group.
  void commit() { ++committed_groups_; }

  // cp.async.wait_group allowed_pending: the copies of all committed groups but the newest
  // `allowed_pending` land. Copies not yet committed stay in flight, as on the GPU.
  void wait(int allowed_pending) {
    complete_late();
    const int64_t last_group_to_land = committed_groups_ - 1 - allowed_pending;
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].group <= last_group_to_land) {
        land(pending_[i]);
      } else {
        pending_[kept++] = pending_[i];
      }
    }
    pending_.resize(kept);
    ++waits_;
  }

 private:
  struct Copy {
    unsigned char* destination;
    const unsigned char* source;
    int copy_bytes;
    int src_bytes;
    unsigned char data[kCpAsyncMaxBytes];  // the source as read at issue
    int64_t group;                      // index of the group the copy belongs to once committed
  };

  void check_addresses(const unsigned char* destination, const unsigned char* source, int copy_bytes,
                       int src_bytes) const {
    if (copy_bytes != 4 && copy_bytes != 8 && copy_bytes != 16) {
      fail_in_kernel("cp.async: copy size " + std::to_string(copy_bytes) + " is not 4, 8 or 16 bytes");
    }
    if (src_bytes < 0 || src_bytes > copy_bytes) {
      fail_in_kernel("cp.async: source size " + std::to_string(src_bytes) + " is outside 0.." +
                     std::to_string(copy_bytes));
    }
    const auto size = static_cast<uintptr_t>(copy_bytes);
    if (reinterpret_cast<uintptr_t>(destination) % size != 0 ||
        (src_bytes > 0 && reinterpret_cast<uintptr_t>(source) % size != 0)) {
      fail_in_kernel("cp.async: " + std::to_string(copy_bytes) + "-byte copy with an address that is not " +
                     std::to_string(copy_bytes) + "-byte aligned (misaligned on a GPU)");
    }
    if (!is_shared_memory(destination, size)) {
      fail_in_kernel("cp.async: the destination is not shared memory (not in the block's __shared__ variables "
                     "or dynamic shared memory)");
    }
    MemoryKind kind;
    if (src_bytes > 0 && (EmulatedDevice::instance().classify(source, static_cast<size_t>(src_bytes), &kind) !=
                              cudaSuccess ||
                          kind != MemoryKind::kDevice)) {
      fail_in_kernel("cp.async: the source is not inside a device allocation (a GPU faults)");
    }
    for (const Copy& other : pending_) {
      if (other.destination < destination + copy_bytes && destination < other.destination + other.copy_bytes) {
        fail_in_kernel("cp.async: a second copy into shared bytes whose earlier copy is still in flight");
      }
    }
  }

  void land(const Copy& copy) const {
    for (int i = 0; i < copy.copy_bytes; ++i) {
      if (copy.destination[i] != kCpAsyncPoison[i % 2]) {
        fail_in_kernel("cp.async: shared memory written while a cp.async copy into it was in flight");
      }
    }
    if (copy.src_bytes > 0 && std::memcmp(copy.data, copy.source, static_cast<size_t>(copy.src_bytes)) != 0) {
      fail_in_kernel("cp.async: the global source changed while a cp.async copy from it was in flight");
    }
    std::memcpy(copy.destination, copy.data, static_cast<size_t>(copy.copy_bytes));
  }

  // The wait returns some scheduler passes late: warp w of n waits w passes on even waits and n-1-w
  // on odd ones, so warps leave the wait out of step (as copies complete at different times on a
  // GPU) and a warp that reads what another warp copied without a barrier in between reads poison.
  void complete_late() const {
    const BlockPlace place = current_block_place();
    const unsigned warps = (place.threads + 31) / 32, warp = place.linear / 32, lane = place.linear % 32;
    const unsigned passes = waits_ % 2 == 0 ? warp : warps - 1 - warp;
    for (unsigned pass = 0; pass < passes; ++pass) {
      warp_rendezvous(&skip_pass, "cp.async.wait_group (completing late)", 1u << lane, WarpLanePost{},
                      __FILE__, __LINE__);
    }
  }
  static void skip_pass(const WarpOperation&) {}

  std::vector<Copy> pending_;
  int64_t committed_groups_ = 0;
  int64_t waits_ = 0;
};

}  // namespace llmc::emu
