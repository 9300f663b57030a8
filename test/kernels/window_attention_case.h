// One test problem of the window attention (llmc/kernels/window_attention.cuh): packed documents,
// random bf16 q, k, v and dout in a fused [T, 3, heads, 128] or separate (optionally padded) layout,
// the kernels run on it, the double-precision reference, and the comparison with tolerances derived
// from the arithmetic. Shared by the kernel test, the JAX cross-check dump and the mutant tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/window_attention.cuh"
#include "test/reference/window_attention_reference.h"
#include "test/support/kernel_test_utils.h"

#if !defined(LLMC_FP32)
namespace window_attention_test {

using llmc::floatX;
using llmc::test::DeviceBuffer;
constexpr int D = llmc::window_attention::kHeadDim;

struct Case {
  std::string name;
  int T;
  int heads;
  std::vector<int> documents;  // lengths, summing to T
  int window;
  float scale;
  bool fused;       // q, k, v (and dq, dk, dv) as views into one [T, 3, heads, 128] buffer
  int padding = 0;  // separate layout: extra elements at the end of each token row
};

inline void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name << " (T " << c.T << ", heads " << c.heads << ", " << c.documents.size() << " documents, window "
       << c.window << ", scale " << c.scale << (c.fused ? ", fused qkv)" : ", separate q, k, v)");
}

// Random document lengths in 1..max_length summing to T, with a one-token document at a random place.
inline std::vector<int> random_documents(int T, int max_length, std::mt19937& rng) {
  std::vector<int> lengths;
  std::uniform_int_distribution<int> length(1, max_length);
  int total = 0;
  while (total < T) {
    const int next = std::min(length(rng), T - total);
    lengths.push_back(next);
    total += next;
  }
  if (T > 1 && std::find(lengths.begin(), lengths.end(), 1) == lengths.end()) {
    lengths.back() -= 1;  // make room for the one-token document
    if (lengths.back() == 0) lengths.pop_back();
    lengths.insert(lengths.begin() + static_cast<long>(rng() % (lengths.size() + 1)), 1);
  }
  return lengths;
}

// cu_seqlens of the lengths, padded with T by `extra` entries (the loader's fixed-length array).
inline std::vector<int> cu_seqlens_of(const std::vector<int>& lengths, int extra) {
  std::vector<int> cu{0};
  for (int length : lengths) cu.push_back(cu.back() + length);
  cu.insert(cu.end(), static_cast<size_t>(extra), cu.back());
  return cu;
}

// Host data [T, heads, 128] per tensor, the double reference, and device buffers in the case's layout.
struct Problem {
  Case c;
  std::vector<int> cu;
  int64_t row_stride;  // elements between token rows of q, k, v (and dq, dk, dv)
  std::vector<double> q, k, v, dout;

  explicit Problem(Case test_case, uint32_t seed) : c(std::move(test_case)), cu(cu_seqlens_of(c.documents, 3)) {
    row_stride = c.fused ? 3LL * c.heads * D : static_cast<int64_t>(c.heads) * D + c.padding;
    std::mt19937 rng(seed);
    const size_t n = static_cast<size_t>(c.T) * c.heads * D;
    q = llmc::test::random_values(n, rng, -1.5, 1.5);
    k = llmc::test::random_values(n, rng, -1.5, 1.5);
    v = llmc::test::random_values(n, rng);
    dout = llmc::test::random_values(n, rng);
  }
  ref::PackedDocuments documents() const { return ref::PackedDocuments{cu, c.window}; }
  // Most keys one query attends: the bound on the length of its softmax and P @ V sums.
  int max_keys() const {
    const int longest = *std::max_element(c.documents.begin(), c.documents.end());
    return std::min(longest, c.window + 1);
  }
  llmc::window_attention::Problem device_problem(const int* d_cu) const {
    return llmc::window_attention::Problem{c.T, c.heads, d_cu, static_cast<int>(cu.size()) - 1, c.window, c.scale};
  }
  // The case's layout: `slice` (0 = q, 1 = k, 2 = v) of a [T, heads, 128] tensor placed in `buffer`.
  size_t slice_offset(int slice) const { return c.fused ? static_cast<size_t>(slice) * c.heads * D : 0; }
  size_t layout_elements() const { return static_cast<size_t>(c.T) * row_stride; }
  std::vector<double> to_layout(const std::vector<double>& tensor, std::vector<double> buffer, int slice) const {
    for (int t = 0; t < c.T; t++)
      for (int i = 0; i < c.heads * D; i++)
        buffer[static_cast<size_t>(t) * row_stride + slice_offset(slice) + i] =
            tensor[static_cast<size_t>(t) * c.heads * D + i];
    return buffer;
  }
  std::vector<double> from_layout(const std::vector<double>& buffer, int slice) const {
    std::vector<double> tensor(static_cast<size_t>(c.T) * c.heads * D);
    for (int t = 0; t < c.T; t++)
      for (int i = 0; i < c.heads * D; i++)
        tensor[static_cast<size_t>(t) * c.heads * D + i] =
            buffer[static_cast<size_t>(t) * row_stride + slice_offset(slice) + i];
    return tensor;
  }
};

// What the kernels produced, downloaded (gradients in [T, heads, 128]; raw bits for determinism).
struct Result {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<floatX> raw_gradients[2];  // the dq/dk/dv buffers after two backward runs
  std::vector<int> plan;
};

// Runs plan, forward and (twice) backward on the emulated or real device.
inline Result run_kernels(const Problem& p) {
  namespace wa = llmc::window_attention;
  const int T = p.c.T, H = p.c.heads;
  const size_t tensor = static_cast<size_t>(T) * H * D;
  DeviceBuffer<int> d_cu(p.cu.size());
  d_cu.upload(std::vector<double>(p.cu.begin(), p.cu.end()));
  const wa::Problem problem = p.device_problem(d_cu.get());
  // Separate layout: three buffers; fused: one, with q, k, v at their slice offsets.
  const int buffers = p.c.fused ? 1 : 3;
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> qkv, dqkv;
  const std::vector<double>* inputs[3] = {&p.q, &p.k, &p.v};
  for (int b = 0; b < buffers; b++) {
    qkv.push_back(std::make_unique<DeviceBuffer<floatX>>(p.layout_elements()));
    dqkv.push_back(std::make_unique<DeviceBuffer<floatX>>(p.layout_elements()));
  }
  if (p.c.fused) {
    std::vector<double> host(p.layout_elements(), 0.0);
    for (int s = 0; s < 3; s++) host = p.to_layout(*inputs[s], std::move(host), s);
    qkv[0]->upload(host);
  } else {
    for (int s = 0; s < 3; s++) qkv[s]->upload(p.to_layout(*inputs[s], std::vector<double>(p.layout_elements()), s));
  }
  auto slice = [&](std::vector<std::unique_ptr<DeviceBuffer<floatX>>>& b, int s) {
    return b[p.c.fused ? 0 : s]->get() + p.slice_offset(s);
  };
  DeviceBuffer<floatX> d_out(tensor), d_dout(tensor);
  DeviceBuffer<float> d_lse(static_cast<size_t>(H) * T), d_delta(static_cast<size_t>(H) * T);
  DeviceBuffer<int> d_plan(wa::plan_ints(T));
  d_dout.upload(p.dout);
  wa::plan(d_plan.get(), problem, nullptr);
  wa::forward(d_out.get(), d_lse.get(), slice(qkv, 0), slice(qkv, 1), slice(qkv, 2), p.row_stride, d_plan.get(),
              problem, nullptr);
  Result result;
  for (int run = 0; run < 2; run++) {
    for (auto& b : dqkv) b->fill_nan();
    wa::backward(slice(dqkv, 0), slice(dqkv, 1), slice(dqkv, 2), p.row_stride, d_delta.get(), d_dout.get(),
                 d_out.get(), d_lse.get(), slice(qkv, 0), slice(qkv, 1), slice(qkv, 2), p.row_stride, d_plan.get(),
                 problem, nullptr);
    for (auto& b : dqkv) {
      const std::vector<floatX> bits = b->download_raw();
      result.raw_gradients[run].insert(result.raw_gradients[run].end(), bits.begin(), bits.end());
    }
  }
  result.out = d_out.download();
  result.lse = d_lse.download();
  std::vector<double>* gradients[3] = {&result.dq, &result.dk, &result.dv};
  for (int s = 0; s < 3; s++) *gradients[s] = p.from_layout(dqkv[p.c.fused ? 0 : s]->download(), s);
  for (double value : d_plan.download()) result.plan.push_back(static_cast<int>(value));
  return result;
}

struct Expected {
  std::vector<double> out, lse, dq, dk, dv;
};

inline Expected reference(const Problem& p) {
  const int T = p.c.T, H = p.c.heads;
  const size_t tensor = static_cast<size_t>(T) * H * D;
  Expected e{std::vector<double>(tensor), std::vector<double>(static_cast<size_t>(H) * T), std::vector<double>(tensor),
             std::vector<double>(tensor), std::vector<double>(tensor)};
  ref::window_attention_forward(e.out.data(), e.lse.data(), p.q.data(), p.k.data(), p.v.data(), T, H, D,
                                p.documents(), p.c.scale);
  ref::window_attention_backward(e.dq.data(), e.dk.data(), e.dv.data(), p.dout.data(), p.q.data(), p.k.data(),
                                 p.v.data(), T, H, D, p.documents(), p.c.scale);
  return e;
}

// Tolerances (llmc::test::tolerance(roundings, sum_length): 2 * (roundings * u_bf16 + n * u_fp32)):
// out: scores are fp32 sums of D products, P is rounded to bf16 for P @ V (a sum over at most
// max_keys terms), the output is rounded: 2 roundings, D + max_keys terms. lse: no bf16 rounding of
// its own, but exp2/log2 and the folded scale add a few fp32 ulps: twice the fp32 part. Gradients:
// P and dS rounded to bf16 for their MMAs, the forward's rounded output enters delta, dP sums D
// terms and dQ/dK/dV sum up to max_keys terms each, the result is rounded: 6 roundings, D + 2 max_keys.
inline double out_tolerance(const Problem& p) { return llmc::test::tolerance(2, D + p.max_keys()); }
inline double lse_tolerance(const Problem& p) { return 2 * llmc::test::tolerance(0, D + p.max_keys()); }
inline double gradient_tolerance(const Problem& p) { return llmc::test::tolerance(6, D + 2 * p.max_keys()); }

// dS = P (dP - delta) cancels exactly for a query with one key (and nearly so with few), so dq and
// dk are ~0 in whole rows where the rms understates the size of the terms. delta is computed from
// the bf16-rounded output: an error up to u_bf16 * |dO| |O| sqrt(D) (random signs) in dP - delta,
// which reaches dq (dk) times scale * |k| (|q|). Allowed on top: twice that, with rms magnitudes.
inline double cancellation_allowance(const Problem& p, const Expected& e, const std::vector<double>& other_operand) {
  return 2 * llmc::test::kStorageRoundoff * p.c.scale * llmc::test::rms(p.dout) * llmc::test::rms(e.out) *
         std::sqrt(static_cast<double>(D)) * llmc::test::rms(other_operand);
}

inline ::testing::AssertionResult matches_reference(const Problem& p, const Result& r, const Expected& e) {
  const std::pair<const char*, ::testing::AssertionResult> checks[] = {
      {"out", llmc::test::all_close(r.out, e.out, out_tolerance(p))},
      {"lse", llmc::test::all_close(r.lse, e.lse, lse_tolerance(p))},
      {"dq", llmc::test::all_close(r.dq, e.dq, gradient_tolerance(p), cancellation_allowance(p, e, p.k))},
      {"dk", llmc::test::all_close(r.dk, e.dk, gradient_tolerance(p), cancellation_allowance(p, e, p.q))},
      {"dv", llmc::test::all_close(r.dv, e.dv, gradient_tolerance(p))}};
  for (const auto& [what, check] : checks)
    if (!check) return ::testing::AssertionFailure() << p.c.name << ": " << what << ": " << check.message();
  return ::testing::AssertionSuccess();
}

}  // namespace window_attention_test
#endif  // !LLMC_FP32
