// Speedrun kernel tests of llmc/kernels/embedding.cuh: the four embedding gathers and their deterministic
// scatter-add backward on Zipf-distributed tokens (hot tokens spanning many chunks, runs meeting chunk
// boundaries exactly), against the double-precision reference. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/embedding.cuh"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/captured_graph.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// Token k with probability ~ 1 / (k + 1)^1.1 (text-like: the top token takes ~15% of the positions).
std::vector<int> zipf_tokens(int T, int V, std::mt19937& rng) {
  std::vector<double> weights(V);
  for (int k = 0; k < V; k++) weights[k] = 1.0 / std::pow(k + 1.0, 1.1);
  std::discrete_distribution<int> distribution(weights.begin(), weights.end());
  std::vector<int> tokens(T);
  for (int& token : tokens) token = distribution(rng);
  return tokens;
}

struct EmbeddingData {
  static constexpr int T = 4096, V = 700, C = 64, kTables = 4;
  std::mt19937 rng{444};
  std::vector<int> tokens = zipf_tokens(T, V, rng);
  std::vector<std::vector<double>> tables, douts, prefills;
  EmbeddingData() {
    for (int k = 0; k < kTables; k++) {
      tables.push_back(random_values(static_cast<size_t>(V) * C, rng));
      douts.push_back(random_values(static_cast<size_t>(T) * C, rng));
      prefills.push_back(random_values(static_cast<size_t>(V) * C, rng));
    }
  }
  int max_count() const {
    std::vector<int> counts(V, 0);
    for (int token : tokens) counts[token]++;
    return *std::max_element(counts.begin(), counts.end());
  }
};

TEST(EmbeddingKernel, FourGathersCopyTheTokenRows) {
  LLMC_REQUIRE_GPU();
  EmbeddingData data;
  const int T = data.T, C = data.C;
  DeviceBuffer<int> d_tokens(T);
  d_tokens.upload(std::vector<double>(data.tokens.begin(), data.tokens.end()));
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> tables, outputs;
  llmc::EmbeddingGather<floatX> gather;
  gather.count = data.kTables;
  for (int k = 0; k < data.kTables; k++) {
    tables.push_back(std::make_unique<DeviceBuffer<floatX>>(data.tables[k].size()));
    outputs.push_back(std::make_unique<DeviceBuffer<floatX>>(static_cast<size_t>(T) * C));
    tables[k]->upload(data.tables[k]);
    gather.tables[k] = tables[k]->get();
    gather.outputs[k] = outputs[k]->get();
  }
  llmc::embedding_forward(gather, d_tokens.get(), T, C, nullptr);
  for (int k = 0; k < data.kTables; k++) {
    std::vector<double> expected(static_cast<size_t>(T) * C);
    ref::embedding_forward(expected.data(), data.tokens.data(), data.tables[k].data(), T, C);
    EXPECT_TRUE(all_close(outputs[k]->download(), expected, 0.0)) << "table " << k;  // a copy: exact
  }
}

TEST(EmbeddingKernel, ScatterAddOnZipfTokensMatchesReferenceAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  EmbeddingData data;
  const int T = data.T, V = data.V, C = data.C;
  llmc::EmbeddingBackwardPlan plan(T, V, C);
  plan.prepare(data.tokens.data(), T, nullptr);
  // The hottest token spans many chunks, so the partial sums of crossing runs are exercised.
  EXPECT_GT(data.max_count(), 10 * llmc::kEmbeddingChunk);
  EXPECT_GT(plan.crossing_runs(), 5);
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> grads, douts;
  llmc::EmbeddingScatter<floatX> scatter;
  scatter.count = data.kTables;
  for (int k = 0; k < data.kTables; k++) {
    grads.push_back(std::make_unique<DeviceBuffer<floatX>>(static_cast<size_t>(V) * C));
    douts.push_back(std::make_unique<DeviceBuffer<floatX>>(static_cast<size_t>(T) * C));
    douts[k]->upload(data.douts[k]);
    scatter.table_grads[k] = grads[k]->get();
    scatter.douts[k] = douts[k]->get();
  }
  std::vector<std::vector<floatX>> runs;
  for (int run = 0; run < 2; run++) {
    if (run == 1) plan.prepare(data.tokens.data(), T, nullptr);  // a fresh plan of the same batch
    std::vector<floatX> all;
    for (int k = 0; k < data.kTables; k++) grads[k]->upload(data.prefills[k]);
    llmc::embedding_backward(scatter, plan, C, nullptr);
    for (int k = 0; k < data.kTables; k++) {
      const std::vector<floatX> bits = grads[k]->download_raw();
      all.insert(all.end(), bits.begin(), bits.end());
    }
    runs.push_back(all);
  }
  for (int k = 0; k < data.kTables; k++) {
    std::vector<double> expected = data.prefills[k];
    ref::embedding_backward(expected.data(), data.douts[k].data(), data.tokens.data(), T, C);
    // fp32 sums of up to max_count terms (chunk sums, then partials), the prefill, one rounding. Rows of
    // tokens that never occur keep their prefill exactly (checked by the same comparison).
    EXPECT_TRUE(all_close(grads[k]->download(), expected, tolerance(1, data.max_count() + 1))) << "table " << k;
  }
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "embedding backward is not deterministic";
}

// Integer-valued gradients sum exactly in fp32: every position must land in its row exactly once, with
// runs meeting chunk boundaries exactly (sizes 32, 64, 1 around the boundaries).
TEST(EmbeddingKernel, ScatterAddIsExactOnIntegersAtChunkBoundaries) {
  LLMC_REQUIRE_GPU();
  const int V = 9, C = 16;
  std::vector<int> tokens;
  for (int count : {32, 64, 1, 31, 33, 7, 96}) {
    const int token = static_cast<int>(tokens.size()) % V;
    for (int i = 0; i < count; i++) tokens.push_back(token);
  }
  std::mt19937 rng(555);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  const int T = static_cast<int>(tokens.size());
  std::vector<double> dout(static_cast<size_t>(T) * C);
  // Values in {-1, 0, 1}: every sum has |sum| <= 160, exact in fp32 and (<= 256) in bf16.
  for (size_t i = 0; i < dout.size(); i++) dout[i] = static_cast<double>(static_cast<int>(i % 3) - 1);
  llmc::EmbeddingBackwardPlan plan(T, V, C);
  plan.prepare(tokens.data(), T, nullptr);
  DeviceBuffer<floatX> d_grad(static_cast<size_t>(V) * C), d_dout(dout.size());
  d_grad.fill_zero();
  d_dout.upload(dout);
  llmc::EmbeddingScatter<floatX> scatter;
  scatter.count = 1;
  scatter.table_grads[0] = d_grad.get();
  scatter.douts[0] = d_dout.get();
  llmc::embedding_backward(scatter, plan, C, nullptr);
  std::vector<double> expected(static_cast<size_t>(V) * C, 0.0);
  ref::embedding_backward(expected.data(), dout.data(), tokens.data(), T, C);
  const std::vector<double> got = d_grad.download();
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], expected[i]) << "element " << i;
}

// The embedding backward's launches depend on the number of positions alone (the crossing runs' count is read on
// the device, the plan's table goes up whole): captured as a CUDA graph with the plan of one batch, it replays
// another batch's plan, prepared after the capture, to that batch's eager result bit for bit, with more or fewer
// crossing runs than the captured one had (the Zipf batch's many, a shuffled one's few, one token's all).
TEST(EmbeddingKernel, CapturedBackwardReplaysAnotherBatchsPlan) {
  LLMC_REQUIRE_GPU();
  EmbeddingData data;
  const int T = data.T, V = data.V, C = data.C;
  std::vector<int> shuffled = data.tokens, single(static_cast<size_t>(T), 3);
  std::mt19937 rng(556);
  for (int& token : shuffled) token = static_cast<int>(rng() % V);
  llmc::EmbeddingBackwardPlan plan(T, V, C);
  DeviceBuffer<floatX> grad(static_cast<size_t>(V) * C), dout(static_cast<size_t>(T) * C);
  dout.upload(data.douts[0]);
  llmc::EmbeddingScatter<floatX> scatter;
  scatter.count = 1;
  scatter.table_grads[0] = grad.get();
  scatter.douts[0] = dout.get();
  std::vector<std::vector<floatX>> eager;
  std::vector<int> crossing;
  for (const std::vector<int>* tokens : {&data.tokens, &shuffled, &single}) {
    plan.prepare(tokens->data(), T, nullptr);
    crossing.push_back(plan.crossing_runs());
    grad.upload(data.prefills[0]);
    llmc::embedding_backward(scatter, plan, C, nullptr);
    eager.push_back(grad.download_raw());
  }
  EXPECT_NE(crossing[0], crossing[1]);
  EXPECT_NE(crossing[1], crossing[2]);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  plan.prepare(shuffled.data(), T, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  {
    const CapturedGraph graph(stream, [&] { llmc::embedding_backward(scatter, plan, C, stream); });
    const std::vector<const std::vector<int>*> batches = {&data.tokens, &shuffled, &single};
    for (size_t i = 0; i < batches.size(); i++) {
      plan.prepare(batches[i]->data(), T, stream);
      grad.upload(data.prefills[0]);
      graph.launch(stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_TRUE(bitwise_equal(grad.download_raw(), eager[i])) << "batch " << i;
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(EmbeddingKernel, PlanRejectsBadBatches) {
  LLMC_REQUIRE_GPU();
  llmc::EmbeddingBackwardPlan plan(8, 10, 16);
  const std::vector<int> bad = {0, 1, 10, 2};
  EXPECT_THROW(plan.prepare(bad.data(), 4, nullptr), std::invalid_argument);
  const std::vector<int> negative = {0, -1};
  EXPECT_THROW(plan.prepare(negative.data(), 2, nullptr), std::invalid_argument);
  const std::vector<int> too_long(9, 0);
  EXPECT_THROW(plan.prepare(too_long.data(), 9, nullptr), std::invalid_argument);
  llmc::EmbeddingScatter<floatX> scatter;
  EXPECT_THROW(llmc::embedding_backward(scatter, plan, 16, nullptr), std::invalid_argument);  // no tables
}

}  // namespace
