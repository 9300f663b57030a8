// The KV-cache GPT-2 decoder (llmc/model/gpt2/gpt2_decoder.h) against the double-precision reference
// model recomputing the whole sequence for every new token: the logits of each step and the greedy
// tokens; a prefill in one pass, in chunks and token by token agree; reset() starts over bit for bit;
// the trainer's live parameter buffer (any world size) serves as well as a copy; bad input is refused
// without touching the cache. Built for fp32 (tight) and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/model/gpt2/gpt2_decoder.h"
#include "llmc/model/gpt2/gpt2.h"
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "test/reference/reference_gpt2.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc;

constexpr bool kFp32 = std::is_same<floatX, float>::value;
// As for the training forward (test/model/test_gpt2.cu): fp32 kernels round to ~1e-7 relative and sum at
// most a few hundred terms, so 1e-4 of the logits' size leaves two orders of headroom while a real bug is
// O(1); bf16 stores every activation with 8 mantissa bits (0.4% per rounding) through ~20 roundings a layer.
constexpr double kLogitTolerance = kFp32 ? 1e-4 : 6e-2;

// The test config's parameters, larger than the 0.02 init so that attention patterns and GELU curvature
// matter, and rounded to floatX so that the reference computes with exactly the decoder's weights.
std::vector<float> test_params(const GPT2Layout& layout, uint64_t seed) {
  std::vector<float> params = init_gpt2_params(layout, seed);
  for (const TensorView& view : layout.tensors) {
    const TensorKind kind = gpt2_kind(view);
    const bool is_norm_weight = kind == TensorKind::kLn1w || kind == TensorKind::kLn2w || kind == TensorKind::kLnfw;
    for (size_t i = 0; i < view.numel; i++) {
      float& p = params[view.offset + i];
      p = is_norm_weight ? 1.0f + 5.0f * (p - 1.0f) : 5.0f * p;
    }
  }
  for (float& p : params) p = to_float(from_float<floatX>(p));
  return params;
}

std::vector<double> widen(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

class GPT2DecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    layout_ = make_param_layout(config_from_name("tiny"), 1);  // L2 NH4 C32 T16 V100
    params_ = test_params(layout_, 31);
    reference_ = std::make_unique<ref::ReferenceGPT2>(layout_);
    reference_->set_params(params_);
    CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) CUDA_CHECK(cudaStreamDestroy(stream_));
  }
  // The reference's logits after the last token of `tokens` (V of them; the padded columns are dropped).
  std::vector<double> reference_last_logits(const std::vector<int>& tokens) {
    const int T = static_cast<int>(tokens.size()), V = layout_.config.vocab_size, Vp = layout_.config.padded_vocab_size;
    reference_->forward(tokens.data(), nullptr, 1, T);
    const std::vector<double>& logits = reference_->activations().logits;
    const auto last_row = logits.begin() + static_cast<size_t>(T - 1) * Vp;
    return std::vector<double>(last_row, last_row + V);
  }
  std::vector<int> random_tokens(int n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> token(0, layout_.config.vocab_size - 1);
    std::vector<int> tokens(n);
    for (int& t : tokens) t = token(rng);
    return tokens;
  }

  GPT2Layout layout_;
  std::vector<float> params_;
  std::unique_ptr<ref::ReferenceGPT2> reference_;
  cudaStream_t stream_ = nullptr;
};

// Greedy decoding from a 5-token prompt to the full context of 16: every step's logits against the
// reference's full recomputation; the greedy token must be the reference's argmax unless the reference's
// two best logits are closer than the tolerance (a tie that rounding may break either way).
TEST_F(GPT2DecoderTest, CachedDecodingEqualsRecomputingTheWholeSequence) {
  GPT2Decoder decoder(layout_, params_, /*max_chunk=*/8, stream_);
  std::vector<int> sequence = random_tokens(5, 7);
  std::vector<float> logits;
  decoder.forward(sequence.data(), static_cast<int>(sequence.size()), logits);
  int checked_tokens = 0;
  while (true) {
    const std::vector<double> expected = reference_last_logits(sequence);
    ASSERT_TRUE(llmc::test::all_close(widen(logits), expected, kLogitTolerance)) << "after " << sequence.size();
    const int token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<double> sorted = expected;
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted[0] - sorted[1] > 2 * kLogitTolerance * (std::fabs(sorted[0]) + llmc::test::rms(expected))) {
      EXPECT_EQ(expected[token], sorted[0]) << "greedy token after " << sequence.size() << " tokens";
      checked_tokens++;
    }
    if (static_cast<int>(sequence.size()) == layout_.config.max_seq_len) break;
    sequence.push_back(token);
    decoder.forward(&sequence.back(), 1, logits);
    ASSERT_EQ(decoder.position(), static_cast<int>(sequence.size()));
  }
  // fp32: every step's margin is clear; bf16's tolerance is wide against V=100 logits (4 of 12 here).
  EXPECT_GE(checked_tokens, kFp32 ? 12 : 1) << "too few steps had a clear greedy token to compare";
}

// One pass, chunks of 3 (a max_chunk smaller than the prompt) and single tokens give the same logits at
// every position, and reset() replays the cache exactly.
TEST_F(GPT2DecoderTest, PrefillInOnePassInChunksOrTokenByTokenAgrees) {
  const std::vector<int> tokens = random_tokens(12, 8);
  GPT2Decoder one_pass(layout_, params_, 16, stream_), chunked(layout_, params_, 3, stream_);
  std::vector<float> whole, in_chunks, step, replay;
  one_pass.forward(tokens.data(), 12, whole, /*all_positions=*/true);
  chunked.forward(tokens.data(), 12, in_chunks, /*all_positions=*/true);
  const int V = layout_.config.vocab_size;
  ASSERT_EQ(whole.size(), static_cast<size_t>(12) * V);
  EXPECT_TRUE(llmc::test::all_close(widen(in_chunks), widen(whole), kLogitTolerance));
  chunked.reset();
  std::vector<float> token_by_token;
  for (int t = 0; t < 12; t++) {
    chunked.forward(&tokens[t], 1, step);
    token_by_token.insert(token_by_token.end(), step.begin(), step.end());
  }
  EXPECT_TRUE(llmc::test::all_close(widen(token_by_token), widen(whole), kLogitTolerance));
  chunked.reset();
  for (int t = 0; t < 12; t++) chunked.forward(&tokens[t], 1, step);
  EXPECT_TRUE(llmc::test::bitwise_equal(step, std::vector<float>(token_by_token.end() - V, token_by_token.end())));
  const std::vector<double> expected = reference_last_logits(tokens);
  EXPECT_TRUE(llmc::test::all_close(widen(std::vector<float>(whole.end() - V, whole.end())), expected,
                                     kLogitTolerance));
}

// The trainer samples from its model's parameter buffer, laid out for its world size (bucket padding
// differs): the decoder reading it gives bitwise the logits of a decoder with its own copy.
TEST_F(GPT2DecoderTest, ReadsTheTrainersParameterBufferOfAnyWorldSize) {
  const std::vector<int> tokens = random_tokens(9, 9);
  std::vector<float> own_logits, borrowed_logits;
  GPT2Decoder own(layout_, params_, 16, stream_);
  own.forward(tokens.data(), 9, own_logits);
  GPT2 model(layout_.config, /*world_size=*/3, /*batch_size=*/1, /*seq_len=*/16, /*loss_slots=*/1, stream_);
  ASSERT_NE(model.layout().total_size, layout_.total_size);
  std::vector<float> padded(model.layout().total_size, 0.0f);
  for (const TensorView& view : layout_.tensors) {
    const TensorView& target = model.layout().tensor(gpt2_kind(view), view.layer);
    std::copy_n(params_.begin() + view.offset, view.numel, padded.begin() + target.offset);
  }
  model.upload_params(padded);
  GPT2Decoder borrowed(model.layout(), model.params(), 16, stream_);
  borrowed.forward(tokens.data(), 9, borrowed_logits);
  EXPECT_TRUE(llmc::test::bitwise_equal(own_logits, borrowed_logits));
}

TEST_F(GPT2DecoderTest, RefusesTokensPastTheContextOrOutsideTheVocabulary) {
  GPT2Decoder decoder(layout_, params_, 4, stream_);
  const std::vector<int> tokens = random_tokens(10, 10);
  std::vector<float> logits;
  decoder.forward(tokens.data(), 10, logits);
  EXPECT_THROW(decoder.forward(tokens.data(), 7, logits), std::out_of_range);  // 10 + 7 > 16
  const int bad = layout_.config.vocab_size;
  EXPECT_THROW(decoder.forward(&bad, 1, logits), std::out_of_range);
  EXPECT_EQ(decoder.position(), 10);
  decoder.forward(tokens.data(), 6, logits);  // exactly fills the context
  EXPECT_EQ(decoder.position(), 16);
  EXPECT_THROW(GPT2Decoder(layout_, params_, 17, stream_), std::invalid_argument);
}

}  // namespace
