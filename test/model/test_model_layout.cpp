// Tests of the model configs, the bucketed parameter layout and the GPT-2 initialization: parameter
// counts against llm.c's published figure, bucket/shard/alignment invariants for world sizes 1..8,
// statistical checks of the initializer, and the step's rows of row-sparse tables (TableRows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "llmc/family/table_rows.h"
#include "llmc/model/gpt2/gpt2_layout.h"

using namespace llmc;

namespace {

// GPT-2 parameter count written out from the architecture, independently of param_layout.cpp:
// per layer 2 LayerNorms (4C), qkv (3C*C + 3C), attention projection (C*C + C), MLP (4C*C + 4C + 4C*C + C).
long long gpt2_parameter_formula(long long Vp, long long T, long long L, long long C) {
  const long long per_layer = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
  return Vp * C + T * C + L * per_layer + 2 * C;
}

GPT2Config odd_config() {  // sizes that are not multiples of 8, to exercise the alignment gaps
  GPT2Config c;
  c.num_layers = 3;
  c.num_heads = 5;
  c.channels = 45;
  c.max_seq_len = 7;
  c.vocab_size = 77;
  c.padded_vocab_size = 128;
  return c;
}

}  // namespace

TEST(ModelConfig, PresetsFollowTheDocumentedShapes) {
  const GPT2Config d12 = config_from_name("d12");
  EXPECT_EQ(d12.num_layers, 12);
  EXPECT_EQ(d12.num_heads, 12);
  EXPECT_EQ(d12.channels, 768);
  EXPECT_EQ(d12.max_seq_len, 1024);
  EXPECT_EQ(d12.vocab_size, 50257);
  EXPECT_EQ(d12.padded_vocab_size, 50304);  // llm.c's padded vocabulary
  const GPT2Config d48 = config_from_name("d48");
  EXPECT_EQ(d48.channels, 1600 * 48 / 25);  // 3072: dN uses C = 64 N
  const GPT2Config tiny = config_from_name("tiny");
  EXPECT_EQ(tiny.num_layers, 2);
  EXPECT_EQ(tiny.channels, 32);
  EXPECT_EQ(tiny.padded_vocab_size, 128);
  EXPECT_NO_THROW(validate_config(config_from_name("small")));
  EXPECT_EQ(padded_vocab(128), 128);
  EXPECT_EQ(padded_vocab(129), 256);
}

TEST(ModelConfig, RejectsUnknownNamesAndBadShapes) {
  for (const char* name : {"", "d", "d0", "d65", "dx", "d123", "gpt3", "tiny2"}) {
    try {
      config_from_name(name);
      FAIL() << "accepted '" << name << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(std::string("'") + name + "'"), std::string::npos) << error.what();
    }
  }
  GPT2Config bad = config_from_name("tiny");
  bad.num_heads = 5;  // 32 % 5 != 0
  try {
    validate_config(bad);
    FAIL() << "accepted C % NH != 0";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("multiple of num_heads"), std::string::npos) << error.what();
  }
  bad = config_from_name("tiny");
  bad.padded_vocab_size = 99;
  EXPECT_THROW(validate_config(bad), std::invalid_argument);
  bad = config_from_name("tiny");
  bad.num_layers = 0;
  EXPECT_THROW(make_param_layout(bad, 1), std::invalid_argument);
  EXPECT_THROW(make_param_layout(config_from_name("tiny"), 0), std::invalid_argument);
}

TEST(GPT2Layout, D12CountMatchesLlmcPublishedFigure) {
  const GPT2Layout layout = make_param_layout(config_from_name("d12"), 1);
  EXPECT_EQ(static_cast<long long>(layout.num_parameters), gpt2_parameter_formula(50304, 1024, 12, 768));
  EXPECT_EQ(layout.num_parameters, 124475904u);  // llm.c's printed num_parameters for GPT-2 124M, Vp = 50304
  // One transformer layer is 7,087,872 parameters (12 C^2 + 13 C at C = 768); all d12 sizes are multiples of 32,
  // so with one rank a layer bucket has no padding at all.
  EXPECT_EQ(layout.buckets[1].size, 7087872u);
  EXPECT_EQ(layout.buckets[1].padded_size, 7087872u);
  EXPECT_EQ(layout.total_size, layout.num_parameters);
}

TEST(GPT2Layout, InvariantsForWorldSizes1To8) {
  for (const GPT2Config& config : {config_from_name("tiny"), config_from_name("small"), odd_config(),
                                   config_from_name("d12")}) {
    for (int world_size = 1; world_size <= 8; world_size++) {
      SCOPED_TRACE(describe_config(config) + " world_size=" + std::to_string(world_size));
      const GPT2Layout layout = make_param_layout(config, world_size);
      const int L = config.num_layers;
      ASSERT_EQ(layout.num_buckets(), L + 2);
      ASSERT_EQ(layout.tensors.size(), static_cast<size_t>(4 + 12 * L));
      EXPECT_EQ(static_cast<long long>(layout.num_parameters),
                gpt2_parameter_formula(config.padded_vocab_size, config.max_seq_len, L, config.channels));
      size_t expected_bucket_offset = 0;
      size_t numel_sum = 0;
      for (int b = 0; b < layout.num_buckets(); b++) {
        const ParamBucket& bucket = layout.buckets[b];
        EXPECT_EQ(bucket.offset, expected_bucket_offset) << "bucket " << b << " not contiguous";
        EXPECT_EQ(bucket.offset % 32, 0u);
        EXPECT_GE(bucket.padded_size, bucket.size);
        EXPECT_LT(bucket.padded_size - bucket.size, static_cast<size_t>(world_size) * 32) << "over-padded";
        EXPECT_EQ(bucket.padded_size % (static_cast<size_t>(world_size) * 32), 0u);
        EXPECT_EQ(bucket.shard_size * world_size, bucket.padded_size);
        EXPECT_EQ(bucket.shard_size % 32, 0u);
        expected_bucket_offset += bucket.padded_size;
        // Tensors of the bucket: inside it, 8-aligned, in order without overlap.
        size_t previous_end = bucket.offset;
        for (int i = bucket.first_tensor; i < bucket.first_tensor + bucket.num_tensors; i++) {
          const TensorView& view = layout.tensors[i];
          EXPECT_EQ(view.bucket, b);
          EXPECT_EQ(view.offset % 8, 0u) << view.name;
          EXPECT_GE(view.offset, previous_end) << view.name << " overlaps its predecessor";
          EXPECT_LT(view.offset - previous_end, 8u) << view.name << " gap larger than the alignment";
          previous_end = view.offset + view.numel;
          numel_sum += view.numel;
        }
        EXPECT_EQ(previous_end, bucket.offset + bucket.size);
      }
      EXPECT_EQ(layout.total_size, expected_bucket_offset);
      EXPECT_EQ(numel_sum, layout.num_parameters);
    }
  }
}

TEST(GPT2Layout, BucketContentsLookupShapesAndDecay) {
  const GPT2Config config = odd_config();
  const GPT2Layout layout = make_param_layout(config, 3);
  const size_t C = 45;
  EXPECT_EQ(layout.tensor(TensorKind::kWte).bucket, 0);
  EXPECT_EQ(layout.tensor(TensorKind::kWpe).bucket, 0);
  EXPECT_EQ(layout.tensor(TensorKind::kLnfw).bucket, 4);
  EXPECT_EQ(layout.tensor(TensorKind::kLnfb).bucket, layout.final_norm_bucket());
  std::set<std::string> names;
  for (int l = 0; l < config.num_layers; l++) {
    for (int k = 0; k < kNumTensorKinds; k++) {
      const TensorKind kind = static_cast<TensorKind>(k);
      if (!is_layer_tensor(kind)) continue;
      const TensorView& view = layout.tensor(kind, l);
      EXPECT_EQ(gpt2_kind(view), kind);
      EXPECT_EQ(view.layer, l);
      EXPECT_EQ(view.bucket, GPT2Layout::layer_bucket(l));
      EXPECT_EQ(view.name, "h" + std::to_string(l) + "." + tensor_kind_name(kind));
      names.insert(view.name);
    }
  }
  EXPECT_EQ(names.size(), 12u * 3);
  // Shapes as llm.c declares them.
  EXPECT_EQ(layout.tensor(TensorKind::kWte).shape, (std::vector<size_t>{128, C}));
  EXPECT_EQ(layout.tensor(TensorKind::kWpe).shape, (std::vector<size_t>{7, C}));
  EXPECT_EQ(layout.tensor(TensorKind::kQkvw, 1).shape, (std::vector<size_t>{3 * C, C}));
  EXPECT_EQ(layout.tensor(TensorKind::kQkvb, 1).shape, (std::vector<size_t>{3 * C}));
  EXPECT_EQ(layout.tensor(TensorKind::kAttprojw, 1).shape, (std::vector<size_t>{C, C}));
  EXPECT_EQ(layout.tensor(TensorKind::kFcw, 2).shape, (std::vector<size_t>{4 * C, C}));
  EXPECT_EQ(layout.tensor(TensorKind::kFcb, 2).shape, (std::vector<size_t>{4 * C}));
  EXPECT_EQ(layout.tensor(TensorKind::kFcprojw, 0).shape, (std::vector<size_t>{C, 4 * C}));
  EXPECT_EQ(layout.tensor(TensorKind::kFcprojb, 0).shape, (std::vector<size_t>{C}));
  // Weight decay exactly on the 2-D tensors (llm.c: wte, wpe, qkvw, attprojw, fcw, fcprojw).
  for (const TensorView& view : layout.tensors) EXPECT_EQ(view.weight_decay, view.shape.size() == 2) << view.name;
  EXPECT_THROW(layout.tensor(TensorKind::kQkvw, 3), std::out_of_range);
  EXPECT_THROW(layout.tensor(TensorKind::kQkvw, -1), std::out_of_range);
}

TEST(GPT2Layout, IndexOfNamesTheTensorsPosition) {
  const GPT2Layout layout = make_param_layout(odd_config(), 2);
  for (size_t t = 0; t < layout.tensors.size(); t++) {
    EXPECT_EQ(layout.index_of(layout.tensors[t].name), static_cast<int>(t));
    EXPECT_EQ(layout.index_of(layout.tensors[t]), static_cast<int>(t));
  }
  EXPECT_THROW(layout.index_of("h99.qkvw"), std::out_of_range);
}

// A step's table rows are its micro-batches' rows merged per table; the first micro-step starts them afresh.
TEST(TableRows, StepHoldsTheUnionOfItsMicroBatchesRows) {
  TableRows rows({3, 7});
  ASSERT_EQ(rows.step().size(), 2u);  // the tables are listed before any batch, with no rows
  EXPECT_EQ(rows.step()[1].tensor, 7);
  EXPECT_TRUE(rows.step()[0].rows.empty() && rows.step()[1].rows.empty());
  rows.set_batch({{3, {1, 4}}, {7, {2}}});
  rows.add_batch_to_step(true);
  rows.set_batch({{3, {0, 4, 9}}, {7, {}}});
  EXPECT_EQ(rows.step()[0].rows, (std::vector<int>{1, 4}));  // the step moves only with a backward
  rows.add_batch_to_step(false);
  EXPECT_EQ(rows.step()[0].rows, (std::vector<int>{0, 1, 4, 9}));
  EXPECT_EQ(rows.step()[1].rows, (std::vector<int>{2}));
  EXPECT_EQ(rows.batch()[0].rows, (std::vector<int>{0, 4, 9}));
  rows.set_batch({{3, {5}}, {7, {6}}});
  rows.add_batch_to_step(true);
  EXPECT_EQ(rows.step()[0].rows, (std::vector<int>{5}));
  EXPECT_EQ(rows.step()[1].rows, (std::vector<int>{6}));
}

TEST(TableRows, RefusesABatchOfOtherTables) {
  TableRows rows({3, 7});
  EXPECT_THROW(rows.set_batch({{3, {1}}}), std::invalid_argument);
  EXPECT_THROW(rows.set_batch({{7, {1}}, {3, {1}}}), std::invalid_argument);
  EXPECT_THROW(rows.set_batch({{3, {1}}, {7, {1}}, {8, {1}}}), std::invalid_argument);
  EXPECT_EQ(rows.batch()[0].rows, std::vector<int>{});  // nothing taken from a refused batch
}

TEST(ParamInit, NormalSamplerMatchesTheStandardNormal) {
  // Kolmogorov-Smirnov against the normal CDF; 1.95/sqrt(n) is the 0.001 critical value, so an honest
  // sampler fails with probability 0.001 (deterministic seed: it either always passes or never).
  NormalSampler sampler(1234);
  const int n = 50000;
  std::vector<double> samples(n);
  for (double& x : samples) x = sampler.next();
  std::sort(samples.begin(), samples.end());
  double max_gap = 0.0;
  for (int i = 0; i < n; i++) {
    const double cdf = 0.5 * std::erfc(-samples[i] / std::sqrt(2.0));
    max_gap =
        std::max({max_gap, std::abs(cdf - static_cast<double>(i) / n), std::abs(cdf - static_cast<double>(i + 1) / n)});
  }
  EXPECT_LT(max_gap, 1.95 / std::sqrt(static_cast<double>(n)));
}

TEST(ParamInit, DeterministicIndependentOfWorldSizeAndPaddingZero) {
  const GPT2Config config = odd_config();
  const GPT2Layout layout1 = make_param_layout(config, 1);
  const GPT2Layout layout5 = make_param_layout(config, 5);
  const std::vector<float> a = init_gpt2_params(layout1, 42);
  const std::vector<float> b = init_gpt2_params(layout1, 42);
  const std::vector<float> c = init_gpt2_params(layout1, 43);
  const std::vector<float> d = init_gpt2_params(layout5, 42);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<bool> is_real(layout5.total_size, false);
  for (size_t t = 0; t < layout1.tensors.size(); t++) {
    const TensorView& v1 = layout1.tensors[t];
    const TensorView& v5 = layout5.tensors[t];
    ASSERT_EQ(v1.name, v5.name);
    for (size_t i = 0; i < v1.numel; i++) ASSERT_EQ(a[v1.offset + i], d[v5.offset + i]) << v1.name << "[" << i << "]";
    for (size_t i = 0; i < v5.numel; i++) is_real[v5.offset + i] = true;
  }
  for (size_t i = 0; i < layout5.total_size; i++) {
    if (!is_real[i]) {
      ASSERT_EQ(d[i], 0.0f) << "padding element " << i;
    }
  }
}

TEST(ParamInit, ValuesFollowGpt2Init) {
  const GPT2Config config = config_from_name("small");
  const GPT2Layout layout = make_param_layout(config, 2);
  const std::vector<float> params = init_gpt2_params(layout, 7);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.num_layers);
  for (const TensorView& view : layout.tensors) {
    SCOPED_TRACE(view.name);
    const float* p = params.data() + view.offset;
    size_t n = view.numel;
    if (gpt2_kind(view) == TensorKind::kWte) {
      n = static_cast<size_t>(config.vocab_size) * view.shape[1];
      for (size_t i = n; i < view.numel; i++) ASSERT_EQ(p[i], 0.0f) << "padded vocab row element " << i;
    }
    if (view.shape.size() == 1) {
      const bool is_norm_weight =
          gpt2_kind(view) == TensorKind::kLn1w || gpt2_kind(view) == TensorKind::kLn2w || gpt2_kind(view) == TensorKind::kLnfw;
      for (size_t i = 0; i < n; i++) ASSERT_EQ(p[i], is_norm_weight ? 1.0f : 0.0f);
      continue;
    }
    const double want_std =
        (gpt2_kind(view) == TensorKind::kAttprojw || gpt2_kind(view) == TensorKind::kFcprojw) ? residual_std : 0.02;
    double sum = 0.0, sum_sq = 0.0;
    for (size_t i = 0; i < n; i++) {
      sum += p[i];
      sum_sq += static_cast<double>(p[i]) * p[i];
    }
    const double mean = sum / n, std = std::sqrt(sum_sq / n - mean * mean);
    // 5-sigma bounds: the sample mean has std want_std/sqrt(n), the sample std has ~want_std/sqrt(2n).
    EXPECT_LT(std::abs(mean), 5 * want_std / std::sqrt(static_cast<double>(n)));
    EXPECT_LT(std::abs(std - want_std), 5 * want_std / std::sqrt(2.0 * n));
  }
}
