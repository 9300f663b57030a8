// The emulator's model of Hopper's warpgroup MMA (wgmma.mma_async m64nNk16 with bf16 operands, m64nNk32 with e4m3
// ones, in shared memory through descriptors; fp32 accumulators, the FP8 ones as llmc/emu/cpu_fp8_gemm.h models the
// FP8 tensor core's; wgmma.fence, commit_group, wait_group) for llmc/cuda/wgmma.cuh.
// The products run late, in issue order, at the wait_group that covers them: accumulators read before that
// wait are stale, and shared memory overwritten before it is what the product reads, as on a GPU, so a
// missing wait fails here. Only what the project's kernels use is modelled; anything else is an error.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/emu/block_runner.h"
#include "llmc/emu/cpu_fp8_gemm.h"
#include "llmc/emu/fp8_convert.h"
#include "llmc/emu/mma_model.h"

namespace llmc::emu {

// The fields of a shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): byte addresses
// and offsets are stored divided by 16.
struct WgmmaDescriptor {
  uint32_t start_address;        // bits 0-13
  uint32_t leading_byte_offset;  // bits 16-29 (unused by K-major swizzled operands)
  uint32_t stride_byte_offset;   // bits 32-45: from one 8-row group to the next
  uint32_t base_offset;          // bits 49-51
  uint32_t swizzle;              // bits 62-63: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
};

inline WgmmaDescriptor decode_wgmma_descriptor(uint64_t bits) {
  return WgmmaDescriptor{static_cast<uint32_t>(bits & 0x3fffu) << 4,
                         static_cast<uint32_t>((bits >> 16) & 0x3fffu) << 4,
                         static_cast<uint32_t>((bits >> 32) & 0x3fffu) << 4,
                         static_cast<uint32_t>((bits >> 49) & 0x7u), static_cast<uint32_t>((bits >> 62) & 0x3u)};
}

// Which dimension of an operand is contiguous in shared memory: K (the instruction's transpose flag 0) or M/N
// (flag 1, "MN-major").
enum class OperandMajor { kK, kMN };

// The operands' type: bf16 (16 per 32-byte k-slice of a row) or e4m3 (32 per k-slice, K-major only).
enum class WgmmaInput { kBf16, kE4M3 };

// A bf16 operand of `rows` (M or N) x 16 (K) in the 128-byte swizzle, by the canonical layouts of the PTX ISA
// ("Shared Memory Matrix Layout"), offsets in bytes:
//   K-major:  (row, k) at start + (row / 8) SBO + (row % 8) 128 + 2 k; the start may step by 32 bytes into a
//             1024-byte row group to pick the k-slice (the leading byte offset is unused);
//   MN-major: (row, k) at start + (row / 64) LBO + 2 (row % 64) + (k / 8) SBO + (k % 8) 128.
// The 16-byte chunk at logical byte address x sits at x ^ (((x >> 7) & 7) << 4), the hardware's pattern on
// address bits, so row groups must start 1024-byte aligned (base offset 0).
class SwizzledOperand {
 public:
  SwizzledOperand(uint64_t bits, int rows, OperandMajor major, const char* which, WgmmaInput input = WgmmaInput::kBf16)
      : descriptor_(decode_wgmma_descriptor(bits)), major_(major), input_(input) {
    const WgmmaDescriptor& d = descriptor_;
    if (input == WgmmaInput::kE4M3 && major != OperandMajor::kK)
      fail_in_kernel(std::string("wgmma: e4m3 operand ") + which + " is MN-major; FP8 wgmma takes only K-major ones");
    if (d.swizzle != 1) {
      fail_in_kernel(std::string("wgmma: operand ") + which + " has swizzle mode " + std::to_string(d.swizzle) +
                     "; the emulation models only the 128-byte swizzle (mode 1)");
    }
    const uint32_t slack = major == OperandMajor::kK ? 128 : 1;
    if (d.base_offset != 0 || d.start_address % 1024 >= slack) {
      fail_in_kernel(std::string("wgmma: operand ") + which + " starts at shared address " +
                     std::to_string(d.start_address) + " with base offset " + std::to_string(d.base_offset) +
                     ": its 128-byte-swizzled row groups must start 1024-byte aligned (a K-major operand may add a "
                     "k-slice of < 128 bytes)");
    }
    first_ = d.start_address & ~1023u;
    const uint32_t extent = major == OperandMajor::kK
                                ? (static_cast<uint32_t>(rows) / 8 - 1) * d.stride_byte_offset + 1024
                                : (static_cast<uint32_t>(rows) / 64 - 1) * d.leading_byte_offset + d.stride_byte_offset + 1024;
    base_ = shared_window_pointer(first_, extent, "wgmma");
  }

  // (row, k): k counts elements, 2 bytes each for bf16, 1 for e4m3 (K-major: (row, k) at ... + k bytes).
  float element(int row, int k) const {
    const auto r = static_cast<uint32_t>(row), kk = static_cast<uint32_t>(k);
    const WgmmaDescriptor& d = descriptor_;
    const uint32_t element_bytes = input_ == WgmmaInput::kE4M3 ? 1 : 2;
    const uint32_t logical = major_ == OperandMajor::kK
                                 ? d.start_address + (r / 8) * d.stride_byte_offset + (r % 8) * 128 + kk * element_bytes
                                 : d.start_address + (r / 64) * d.leading_byte_offset + (r % 64) * 2 +
                                       (kk / 8) * d.stride_byte_offset + (kk % 8) * 128;
    const uint32_t physical = logical ^ (((logical >> 7) & 7u) << 4);
    if (input_ == WgmmaInput::kE4M3) return fp8_decode_table(Fp8Format::kE4M3).value[base_[physical - first_]];
    uint16_t bits;
    std::memcpy(&bits, base_ + (physical - first_), sizeof bits);
    return bf16_bits_to_float(bits);
  }

 private:
  WgmmaDescriptor descriptor_;
  OperandMajor major_;
  WgmmaInput input_;
  const unsigned char* base_ = nullptr;
  uint32_t first_ = 0;
};

// Where the calling thread sits in its warpgroup; fails unless the block holds the whole warpgroup.
struct WarpgroupPlace {
  int warp_in_group;  // 0..3
  int lane;
};

inline WarpgroupPlace current_warpgroup_place() {
  const BlockPlace place = current_block_place();
  const unsigned warp = place.linear / 32;
  if ((warp / 4 + 1) * 128 > place.threads) {
    fail_in_kernel("wgmma: warp " + std::to_string(warp) + " is in a warpgroup the block of " +
                   std::to_string(place.threads) + " threads does not complete (a warpgroup is 4 whole warps)");
  }
  return WarpgroupPlace{static_cast<int>(warp % 4), static_cast<int>(place.linear % 32)};
}

// The per-thread state of wgmma: products issued and not yet waited for, by commit group.
class WgmmaQueue {
 public:
  WgmmaQueue() = default;
  WgmmaQueue(const WgmmaQueue&) = delete;
  WgmmaQueue& operator=(const WgmmaQueue&) = delete;
  ~WgmmaQueue() {
    if (!pending_.empty()) {
      fail_in_kernel("thread exits with " + std::to_string(pending_.size()) +
                     " wgmma.mma_async never covered by a wgmma.wait_group");
    }
  }

  // wgmma.fence.sync.aligned: the accumulators' earlier register accesses are ordered before the next
  // wgmma.mma_async.
  void fence() { fenced_ = true; }

  // wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 from shared memory, A K-major, B K- or N-major:
  // d = A B^T (+ d when `accumulate`), A 64 x 16 and B N x 16; with e4m3 inputs m64nNk32.f32.e4m3.e4m3, both
  // K-major, A 64 x 32 and B N x 32.
  void issue(float* d, int n, uint64_t a, uint64_t b, OperandMajor b_major, bool accumulate,
             WgmmaInput input = WgmmaInput::kBf16) {
    const WarpgroupPlace place = current_warpgroup_place();
    if (!fenced_) {
      fail_in_kernel("wgmma.mma_async issued without a wgmma.fence since the thread last had its accumulators "
                     "(kernel start or a wgmma.wait_group)");
    }
    check_warp_issues_the_same(a, b, accumulate);
    (void)SwizzledOperand(a, 64, OperandMajor::kK, "A", input);  // checked at issue, as a GPU faults; read at the wait
    (void)SwizzledOperand(b, n, b_major, "B", input);
    pending_.push_back(Product{d, n, a, b, b_major, accumulate, input, committed_groups_, place});
  }

  // wgmma.commit_group.sync.aligned.
  void commit() { ++committed_groups_; }

  // wgmma.wait_group.sync.aligned allowed_pending: the products of all committed groups but the newest
  // `allowed_pending` run now, in issue order.
  void wait(int allowed_pending) {
    const int64_t last_group_to_run = committed_groups_ - 1 - allowed_pending;
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].group <= last_group_to_run) {
        run(pending_[i]);
      } else {
        pending_[kept++] = pending_[i];
      }
    }
    pending_.resize(kept);
    fenced_ = false;
  }

 private:
  struct Product {
    float* d;
    int n;
    uint64_t a, b;
    OperandMajor b_major;
    bool accumulate;
    WgmmaInput input;
    int64_t group;
    WarpgroupPlace place;
  };

  // The thread's fragment of the accumulator (PTX ISA, wgmma .m64nNk16 D layout): warp w holds rows
  // 16w..16w+15; for each 8-column tile i, d[4i..4i+3] = (g, 2p), (g, 2p+1), (g+8, 2p), (g+8, 2p+1) of it,
  // g = lane / 4, p = lane % 4. bf16: summed exactly, rounded once to fp32; e4m3: the 32 (exact) products added
  // to the accumulator by the FP8 tensor core's model (fp8_mma_step).
  static void run(const Product& product) {
    const SwizzledOperand a(product.a, 64, OperandMajor::kK, "A", product.input);
    const SwizzledOperand b(product.b, product.n, product.b_major, "B", product.input);
    const int group = product.place.lane / 4, pair = product.place.lane % 4;
    for (int i = 0; i < product.n / 8; ++i) {
      for (int v = 0; v < 4; ++v) {
        const int row = 16 * product.place.warp_in_group + group + (v >= 2 ? 8 : 0);
        const int column = 8 * i + 2 * pair + v % 2;
        float& d = product.d[4 * i + v];
        if (product.input == WgmmaInput::kE4M3) {
          float products[kFp8MmaDepth];
          for (int k = 0; k < kFp8MmaDepth; ++k) products[k] = a.element(row, k) * b.element(column, k);
          d = fp8_mma_step(product.accumulate ? d : 0.0f, products, kFp8MmaDepth);
          continue;
        }
        double sum = product.accumulate ? d : 0.0;
        for (int k = 0; k < 16; ++k) sum += static_cast<double>(a.element(row, k)) * b.element(column, k);
        d = static_cast<float>(sum);
      }
    }
  }

  struct IssueInputs {
    uint64_t a, b;
    bool accumulate;
  };
  // .sync.aligned: every lane of the warp issues the same instruction with the same operands.
  static void check_warp_issues_the_same(uint64_t a, uint64_t b, bool accumulate) {
    IssueInputs inputs{a, b, accumulate};
    WarpLanePost post;
    post.input = &inputs;
    warp_rendezvous(&resolve_same_issue, "wgmma.mma_async", 0xffffffffu, post, __FILE__, __LINE__);
  }
  static void resolve_same_issue(const WarpOperation& operation) {
    const auto& first = *static_cast<const IssueInputs*>(operation.lanes[0]->input);
    for (int lane = 1; lane < 32; ++lane) {
      const auto& other = *static_cast<const IssueInputs*>(operation.lanes[lane]->input);
      if (other.a != first.a || other.b != first.b || other.accumulate != first.accumulate) {
        fail_in_kernel("wgmma.mma_async: lane " + std::to_string(lane) +
                       " of a warp issues other descriptors or scale-d than lane 0 (.aligned needs the same)");
      }
    }
  }

  std::vector<Product> pending_;
  int64_t committed_groups_ = 0;
  bool fenced_ = false;
};

}  // namespace llmc::emu
