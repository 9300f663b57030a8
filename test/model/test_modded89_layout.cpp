// The 2026-07-17 record's model config, layer structure and parameter layout (llmc/model/modded89/): the
// structure's facts as SPEEDRUN89.md lists them, every gate column used exactly once, the record-size
// parameter count against the section 1 tensor list (less the record's bank padding and unused gate slot)
// and its published ~643.5M, the buckets in backward order, and the config's errors.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/model/modded89/modded89_layout.h"

namespace {

using llmc::Modded89Layer;

std::set<int> layers_where(bool (*predicate)(const Modded89Layer&)) {
  std::set<int> out;
  const llmc::Modded89Structure s = llmc::modded89_structure();
  for (int i = 0; i < llmc::kModded89Layers; i++)
    if (predicate(s.layers[static_cast<size_t>(i)])) out.insert(i);
  return out;
}

TEST(Modded89Structure, LayersAsTheRecordBuildsThem) {
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return !l.attention; }), (std::set<int>{6}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.paired_heads; }), (std::set<int>{0, 2, 5, 9}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.key_offset; }), (std::set<int>{3, 10}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.long_window; }), (std::set<int>{3, 10}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.xsa.present(); }), (std::set<int>{1, 3, 4, 7}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.output_gate.present(); }), (std::set<int>{3, 10}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.value_embed >= 0; }), (std::set<int>{1, 2, 8, 9}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.reads_layer7; }), (std::set<int>{8, 9, 10}));
  EXPECT_EQ(layers_where([](const Modded89Layer& l) { return l.dc; }), (std::set<int>{10}));
}

// Each column of G0 (26) and G1 (29 + the 12 DC weights) is read by exactly one gate.
TEST(Modded89Structure, EveryGateColumnIsUsedOnce) {
  const llmc::Modded89Structure s = llmc::modded89_structure();
  std::map<std::pair<int, int>, int> uses;
  auto use = [&uses](const llmc::GateColumn& g, int width) {
    for (int c = 0; g.present() && c < width; c++) uses[{g.gate, g.column + c}]++;
  };
  const int H = 6;
  for (const Modded89Layer& layer : s.layers) {
    use(layer.xsa, H);
    use(layer.output_gate, H);
    use(layer.x0_gate, 1);
    use(layer.bigram_gate, 1);
  }
  use(s.skip_gate, 1);
  for (int c = 29; c < 41; c++) uses[{1, c}]++;  // the DC weights w1, w2
  for (const auto& [where, count] : uses) EXPECT_EQ(count, 1) << "gate " << where.first << " column " << where.second;
  size_t pre = 0, post = 0;
  for (const auto& [where, count] : uses) (where.first == 0 ? pre : post) += 1;
  EXPECT_EQ(pre, 26u);   // 0-5, 6-11, 12-17, 18-25
  EXPECT_EQ(post, 41u);  // 0-28 and 29-40
}

TEST(Modded89Layout, RecordParameterCountIsSectionOnesListWithoutPadding) {
  const llmc::Modded89Layout layout = llmc::make_modded89_layout(llmc::modded89_config_from_name("modded89"), 8);
  const size_t V = 50304, C = 768, m = 64;
  // SPEEDRUN89.md section 1, as stored by the record:
  const size_t record = V * C + C * V + 5 * V * C + 377280 * C +          // embed, lm_head, value_embeds, bigram
                        64 * 256 * 768 + 24 * 768 * 768 +                 // qk_bank, vo_bank
                        12 * 2 * 3072 * 768 +                             // mlp_bank
                        24 + 11 * 2 + 11 * 2 + 12 + 5 * 6 * 12 +          // scalars, resid, post, smear, ve_gate_bank
                        2 * m * C + 2 * 14 * m + 2 * 14 +                 // mudd_w1, w2, b2
                        2 * m * C + 2 * 41 * m + 2 * 41 + 1;              // mudd_gate_w1, w2, b2, scale
  const size_t padding = 4 * 256 * 768 + 4 * 768 * 768 + 2 * 3072 * 768;  // qk 60..63, vo 20..23, mlp layer 11
  const size_t unused_ve_slot = 6 * 12;                                   // ve_gate_bank[4]
  EXPECT_EQ(layout.num_parameters, record - padding - unused_ve_slot);
  // The published parts: "~643.5M stored parameters (289.8M bigram, 193.2M VE, 2 x 38.6M embed/head, 83.4M banks)".
  auto numel = [&layout](const std::string& name) { return static_cast<double>(layout.find(name).numel); };
  EXPECT_NEAR(numel("bigram_embed"), 289.8e6, 0.05e6);
  EXPECT_NEAR(numel("value_embeds"), 193.2e6, 0.05e6);
  EXPECT_NEAR(numel("embed"), 38.6e6, 0.05e6);
  EXPECT_NEAR(numel("head"), 38.6e6, 0.05e6);
  const double banks = static_cast<double>(layout.group_parameters(llmc::ParamGroup::kMuon) + padding);
  EXPECT_NEAR(banks, 83.4e6, 0.05e6);
  EXPECT_NEAR(numel("bigram_embed") + numel("value_embeds") + numel("embed") + numel("head") + banks, 643.5e6, 0.1e6);
  // Muon: the banks alone.
  EXPECT_EQ(layout.group_parameters(llmc::ParamGroup::kMuon), 60u * 256 * 768 + 20u * 768 * 768 + 11u * 2 * 3072 * 768);
}

TEST(Modded89Layout, BucketsFollowTheBackward) {
  const llmc::Modded89Layout layout = llmc::make_modded89_layout(llmc::modded89_config_from_name("modded89-tiny"), 2);
  ASSERT_EQ(layout.num_buckets(), 3 + llmc::kModded89Layers);
  auto bucket_of = [&layout](const std::string& name) { return layout.find(name).bucket; };
  EXPECT_EQ(bucket_of("bigram_embed"), llmc::Modded89Layout::bigram_bucket());  // alone: its exchange is sparse
  EXPECT_EQ(layout.buckets[0].num_tensors, 1);
  EXPECT_EQ(bucket_of("embed"), llmc::Modded89Layout::embeddings_bucket());
  EXPECT_EQ(bucket_of("gate0.w1"), 1);  // the pre gate reads x0: final with the embeddings
  EXPECT_EQ(bucket_of("gate1.w1"), llmc::Modded89Layout::layer_bucket(4));  // the post gate before layer 4
  EXPECT_EQ(bucket_of("mudd0.w2"), llmc::Modded89Layout::layer_bucket(10));
  EXPECT_EQ(bucket_of("mudd1.b2"), layout.head_bucket());  // after the loop: final first
  EXPECT_EQ(bucket_of("head"), layout.head_bucket());
  EXPECT_THROW(layout.find("layers.6.qk"), std::out_of_range);  // layer 6 has no attention
  EXPECT_EQ(layout.find("layers.6.mlp").shape, (std::vector<size_t>{2, 128, 32}));
  EXPECT_EQ(layout.find("layers.3.qk").shape, (std::vector<size_t>{2, 32, 32}));  // H x [2D, C]
  EXPECT_EQ(layout.find("head").shape, (std::vector<size_t>{32, 96}));            // stored (in, out)
}

TEST(Modded89Config, ErrorsNameTheProblem) {
  llmc::Modded89Config config = llmc::modded89_config_from_name("modded89-tiny");
  config.num_heads = 3;
  try {
    llmc::validate_modded89_config(config);
    FAIL() << "odd head count accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("num_heads must be even"), std::string::npos) << e.what();
  }
  EXPECT_THROW(llmc::modded89_config_from_name("modded90"), std::invalid_argument);
}

}  // namespace
