// One KV-cache attention problem for the kernel test and its mutant: random qkv for T tokens fed to
// kv_cache_append + cached_attention in chunks (a prefill, then single tokens, ...), against the
// double-precision causal attention of the whole sequence (test/reference/reference_ops.h).
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "llmc/kernels/kv_cache.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/kernel_test_utils.h"

namespace kv_cache_test {

using llmc::test::DeviceBuffer;
using llmc::floatX;

struct Case {
  int max_T, NH, hs;
  std::vector<int> chunks;  // new tokens per call; their sum T <= max_T
  int total() const {
    int sum = 0;
    for (int chunk : chunks) sum += chunk;
    return sum;
  }
};

struct Result {
  std::vector<double> out;    // (T, C): every call's attention output, in token order
  std::vector<double> cache;  // the layer's whole cache after the last call
};

// qkv (T, 3C) exactly representable in floatX. Queries scaled up so the softmax is far from uniform
// (a wrong key weight then shows), keys and values in [-1, 1).
inline std::vector<double> random_qkv(const Case& c, std::mt19937& rng) {
  const int C = c.NH * c.hs;
  std::vector<double> qkv = llmc::test::random_values(static_cast<size_t>(c.total()) * 3 * C, rng);
  for (int t = 0; t < c.total(); t++)
    for (int j = 0; j < C; j++) qkv[static_cast<size_t>(t) * 3 * C + j] *= 4.0;  // powers of two: still exact
  return qkv;
}

inline Result run_kernels(const Case& c, const std::vector<double>& qkv) {
  const int C = c.NH * c.hs, T = c.total();
  DeviceBuffer<floatX> cache(llmc::kv_cache_layer_elements(c.max_T, C));  // NaN: unwritten slots poison
  DeviceBuffer<floatX> all_qkv(qkv.size()), out(static_cast<size_t>(T) * C);
  all_qkv.upload(qkv);
  int pos = 0;
  for (int n : c.chunks) {
    const floatX* chunk_qkv = all_qkv.get() + static_cast<size_t>(pos) * 3 * C;
    llmc::kv_cache_append(cache.get(), chunk_qkv, n, pos, c.max_T, C, c.NH, nullptr);
    floatX* chunk_out = out.get() + static_cast<size_t>(pos) * C;
    llmc::cached_attention(chunk_out, chunk_qkv, cache.get(), n, pos, c.max_T, C, c.NH, nullptr);
    pos += n;
  }
  return Result{out.download(), cache.download()};
}

inline std::vector<double> reference_attention(const Case& c, const std::vector<double>& qkv) {
  const int C = c.NH * c.hs, T = c.total();
  const size_t scores = static_cast<size_t>(c.NH) * T * T;
  std::vector<double> out(static_cast<size_t>(T) * C), preatt(scores), att(scores);
  ref::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), 1, T, C, c.NH);
  return out;
}

// The output went through one rounding to floatX; in fp32 each score sums hs products and the output
// sums up to T weighted values (then a division by the sum of T weights): llmc::test::tolerance.
inline double output_tolerance(const Case& c) { return llmc::test::tolerance(1, c.hs + 2 * c.total()); }

}  // namespace kv_cache_test
