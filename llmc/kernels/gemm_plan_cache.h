// The GEMM wrapper's plan cache (llmc/kernels/matmul.cuh): everything a GEMM call needs beyond its
// pointers -- cuBLASLt descriptors, layouts and the chosen algorithm on a GPU -- is built once per
// distinct (shape, layouts, epilogue, element type, batch and strides, pointer alignment) and reused by
// every later call with the same key. Host code only; the plan type is the back end's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "llmc/kernels/gemm_algo_selection.h"
#include "llmc/kernels/gemm_args.h"
#include "llmc/base/launch_observer.h"

namespace llmc {

enum class GemmEpilogue : uint8_t { kNone, kBias, kGeluAux, kGeluAuxBias };

// Largest power of two (up to 256) dividing the address: which vector widths the GEMM may load with.
inline uint32_t pointer_alignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// Alignment that holds for every matrix of a batch: the base's and the stride's (in bytes).
inline uint32_t batch_alignment(const void* pointer, long long stride_elements) {
  uint32_t alignment = pointer_alignment(pointer);
  if (stride_elements != 0) {
    const uint32_t stride_alignment = pointer_alignment(reinterpret_cast<const void*>(
        static_cast<uintptr_t>(stride_elements * static_cast<long long>(sizeof(floatX)))));
    if (stride_alignment < alignment) alignment = stride_alignment;
  }
  return alignment;
}

// What decides a plan. Two calls with equal keys can share descriptors and algorithm; the pointers
// themselves (and alpha, the value of a nonzero beta) are per call.
struct GemmPlanKey {
  int m = 0, n = 0, k = 0, batch = 1;
  long long stride_a = 0, stride_b = 0, stride_d = 0;
  bool trans_a = false, trans_b = false;
  bool accumulate = false;  // beta != 0: C is read
  bool separate_addend = false;  // C is GemmArgs::c, not D
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  int element_bytes = static_cast<int>(sizeof(floatX));
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0, align_bias = 0, align_aux = 0;

  bool operator==(const GemmPlanKey& o) const {
    return m == o.m && n == o.n && k == o.k && batch == o.batch && stride_a == o.stride_a &&
           stride_b == o.stride_b && stride_d == o.stride_d && trans_a == o.trans_a && trans_b == o.trans_b &&
           accumulate == o.accumulate && separate_addend == o.separate_addend && epilogue == o.epilogue &&
           element_bytes == o.element_bytes && align_a == o.align_a && align_b == o.align_b &&
           align_c == o.align_c && align_d == o.align_d && align_bias == o.align_bias && align_aux == o.align_aux;
  }
};

// The key of a call computed with `epilogue` (a GELU call may fall back to the plain one, into pre_gelu).
inline GemmPlanKey gemm_plan_key(const GemmArgs& g, GemmEpilogue epilogue) {
  GemmPlanKey key;
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.batch = g.batch;
  key.stride_a = g.stride_a;
  key.stride_b = g.stride_b;
  key.stride_d = g.stride_d;
  key.trans_a = g.trans_a;
  key.trans_b = g.trans_b;
  key.accumulate = g.beta != 0.0f;
  key.separate_addend = g.c != nullptr;
  key.epilogue = epilogue;
  key.align_a = batch_alignment(g.a, g.stride_a);
  key.align_b = batch_alignment(g.b, g.stride_b);
  key.align_c = batch_alignment(g.c != nullptr ? g.c : g.d, g.stride_d);
  key.align_d = batch_alignment(g.d, g.stride_d);
  key.align_bias = g.bias != nullptr ? pointer_alignment(g.bias) : 0;
  key.align_aux = g.pre_gelu != nullptr ? pointer_alignment(g.pre_gelu) : 0;
  return key;
}

struct GemmPlanKeyHash {
  size_t operator()(const GemmPlanKey& key) const {
    size_t h = 0;
    auto mix = [&h](long long value) { h ^= std::hash<long long>()(value) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (long long value : {static_cast<long long>(key.m), static_cast<long long>(key.n),
                            static_cast<long long>(key.k), static_cast<long long>(key.batch), key.stride_a,
                            key.stride_b, key.stride_d,
                            static_cast<long long>(key.trans_a) | static_cast<long long>(key.trans_b) << 1 |
                                static_cast<long long>(key.accumulate) << 2 |
                                static_cast<long long>(key.separate_addend) << 3 |
                                static_cast<long long>(key.epilogue) << 4,
                            static_cast<long long>(key.element_bytes),
                            static_cast<long long>(key.align_a) << 32 | key.align_b,
                            static_cast<long long>(key.align_d) << 32 | key.align_bias,
                            static_cast<long long>(key.align_c) << 32 | key.align_aux})
      mix(value);
    return h;
  }
};

// Plans by key; a plan is built (and the thread's LaunchObserver told, llmc/base/launch_observer.h) on the
// first call with its key only. Plans live as long as the cache and never move.
template <class Plan>
class GemmPlanCache {
 public:
  template <class Build>
  Plan& find_or_build(const GemmPlanKey& key, Build&& build) {
    auto found = plans_.find(key);
    if (found != plans_.end()) return *found->second;
    std::unique_ptr<Plan> plan = build(key);
    builds_++;
    notify_gemm_setup();
    return *plans_.emplace(key, std::move(plan)).first->second;
  }
  size_t size() const { return plans_.size(); }
  long builds() const { return builds_; }

 private:
  std::unordered_map<GemmPlanKey, std::unique_ptr<Plan>, GemmPlanKeyHash> plans_;
  long builds_ = 0;
};

}  // namespace llmc
