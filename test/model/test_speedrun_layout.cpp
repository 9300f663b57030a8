// Tests of the speedrun model's bucketed parameter layout (llmc/model/modded44/speedrun_layout.h) and its
// initialisation: the record's parameter count from docs/recipes.md, bucket order (embeddings, blocks
// 1..L-1, head), the Adam/Muon groups and reference dtypes, the model file's tensor order, shard
// invariants for world sizes 1..8, and the init against the double reference's.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <vector>

#include "llmc/model/modded44/speedrun_init.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "test/reference/reference_speedrun.h"

namespace {

using namespace llmc;

TEST(SpeedrunLayout, RecordCountsMatchTheSpec) {
  const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun"), 8);
  const size_t V = 50304, C = 768, H = 6;
  const size_t tables = 5 * V * C;                              // embed, ve0..2, head: 193.2M
  const size_t matrices = 10 * 4 * C * C + 11 * 2 * C * 4 * C;  // qkvo x10, fc + proj x11: 75.5M
  const size_t gates = 10 * H * 12 + 12, scalars = 64;
  EXPECT_EQ(layout.num_parameters, tables + matrices + gates + scalars);
  EXPECT_EQ(layout.num_parameters, 268665628u);  // docs/recipes.md: ~268.7M
  EXPECT_EQ(layout.group_parameters(ParamGroup::kMuon), matrices + gates);
  EXPECT_EQ(layout.group_parameters(ParamGroup::kAdam), tables + scalars);
  // Embeddings, blocks 1..11 (block 0 has no parameters), head.
  ASSERT_EQ(layout.num_buckets(), 13);
  EXPECT_EQ(layout.block_bucket(0), -1);
  for (int i = 1; i < 12; i++) EXPECT_EQ(layout.block_bucket(i), i) << "block " << i;
  EXPECT_EQ(layout.head_bucket(), 12);
  EXPECT_EQ(layout.tensor(SpeedrunTensor::kHead).bucket, 12);
  EXPECT_EQ(layout.tensor(SpeedrunTensor::kScalars).bucket, 0);
  EXPECT_EQ(layout.tensor(SpeedrunTensor::kSmearGate).bucket, 0);
  EXPECT_EQ(layout.tensor(SpeedrunTensor::kScalars).numel, 64u);
  // Block 7 has an MLP only.
  EXPECT_THROW(layout.tensor(SpeedrunTensor::kQkvo, 7), std::out_of_range);
  EXPECT_THROW(layout.tensor(SpeedrunTensor::kAttnGate, 7), std::out_of_range);
  EXPECT_EQ(layout.tensor(SpeedrunTensor::kFc, 7).bucket, 7);
  EXPECT_THROW(layout.tensor(SpeedrunTensor::kFc, 0), std::out_of_range);
  EXPECT_THROW(layout.tensor(SpeedrunTensor::kFc, 12), std::out_of_range);
}

TEST(SpeedrunLayout, GroupsAndDtypesFollowTheRecord) {
  const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), 1);
  for (const TensorView& view : layout.tensors) {
    SCOPED_TRACE(view.name);
    const SpeedrunTensor kind = speedrun_kind(view);
    const bool adam = kind == SpeedrunTensor::kEmbed || kind == SpeedrunTensor::kValueEmbed ||
                      kind == SpeedrunTensor::kHead || kind == SpeedrunTensor::kScalars;
    EXPECT_EQ(view.group, adam ? ParamGroup::kAdam : ParamGroup::kMuon);
    EXPECT_EQ(view.weight_decay, !adam);
    const bool fp32 = kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kFc || kind == SpeedrunTensor::kProj ||
                      kind == SpeedrunTensor::kScalars;
    EXPECT_EQ(view.reference_dtype, fp32 ? ParamDtype::kFp32 : ParamDtype::kBf16);
  }
}

TEST(SpeedrunLayout, FileOrderIsTheReferenceOrderAndCoversEveryTensorOnce) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunLayout layout = make_speedrun_layout(config, 3);
  ref::SpeedrunParams params = ref::zero_speedrun_params(config);
  const std::vector<ref::NamedTensor> named = ref::named_tensors(params, config);
  const std::vector<int> order = speedrun_file_order(layout);
  ASSERT_EQ(order.size(), named.size());
  ASSERT_EQ(order.size(), layout.tensors.size());
  std::set<int> seen(order.begin(), order.end());
  EXPECT_EQ(seen.size(), order.size());
  for (size_t i = 0; i < order.size(); i++) {
    const TensorView& view = layout.tensors[static_cast<size_t>(order[i])];
    EXPECT_EQ(view.name, named[i].name);
    EXPECT_EQ(view.shape, named[i].shape) << view.name;
    EXPECT_EQ(view.reference_dtype == ParamDtype::kBf16, named[i].bf16) << view.name;
  }
}

TEST(SpeedrunLayout, ShardInvariantsForWorldSizes1To8) {
  for (int world_size = 1; world_size <= 8; world_size++) {
    const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), world_size);
    size_t offset = 0;
    for (const ParamBucket& bucket : layout.buckets) {
      EXPECT_EQ(bucket.offset, offset);
      EXPECT_EQ(bucket.padded_size % (static_cast<size_t>(world_size) * kBucketAlignElements), 0u);
      EXPECT_EQ(bucket.shard_size * world_size, bucket.padded_size);
      EXPECT_GE(bucket.padded_size, bucket.size);
      for (int t = bucket.first_tensor; t < bucket.first_tensor + bucket.num_tensors; t++) {
        const TensorView& view = layout.tensors[static_cast<size_t>(t)];
        EXPECT_EQ(view.offset % kTensorAlignElements, 0u) << view.name;
        EXPECT_LE(view.offset + view.numel, bucket.offset + bucket.size) << view.name;
      }
      offset += bucket.padded_size;
    }
    EXPECT_EQ(layout.total_size, offset);
  }
  EXPECT_THROW(make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), 0), std::invalid_argument);
  SpeedrunConfig odd = speedrun_config_from_name("speedrun-tiny");
  odd.num_blocks = 9;
  EXPECT_THROW(make_speedrun_layout(odd, 1), std::invalid_argument);
}

TEST(SpeedrunInit, EqualsTheReferenceInitAndLeavesPaddingZero) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  for (int world_size : {1, 3}) {
    const SpeedrunLayout layout = make_speedrun_layout(config, world_size);
    const std::vector<float> params = init_speedrun_params(layout, 1234);
    ref::SpeedrunParams want = ref::init_speedrun_params(config, 1234);
    std::vector<bool> inside(layout.total_size, false);
    for (const ref::NamedTensor& tensor : ref::named_tensors(want, config)) {
      const TensorView& view = layout.find(tensor.name);
      ASSERT_EQ(view.numel, tensor.values->size()) << tensor.name;
      for (size_t i = 0; i < view.numel; i++) {
        ASSERT_EQ(static_cast<double>(params[view.offset + i]), (*tensor.values)[i]) << tensor.name << "[" << i << "]";
        inside[view.offset + i] = true;
      }
    }
    for (size_t i = 0; i < layout.total_size; i++) {
      if (!inside[i]) {
        ASSERT_EQ(params[i], 0.0f) << "padding element " << i;
      }
    }
  }
  const SpeedrunLayout layout = make_speedrun_layout(config, 1);
  EXPECT_NE(init_speedrun_params(layout, 1), init_speedrun_params(layout, 2));
}

}  // namespace
