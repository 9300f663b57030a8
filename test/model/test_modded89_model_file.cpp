// Tests of the 2026-07-17 family's model file and initialisation (llmc/model/modded89/): fp32 round trips exact
// across world sizes, reference-dtype files round exactly the bf16 tensors, the layout order read from a file
// written by hand from the documented header words (a version 1 file), the attention state of version 2, a
// one-line error naming the file for every kind of bad file; the init's constants against the double-precision
// reference's init and its random tensors' bounds, statistics and tie.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/model/modded89/modded89_init.h"
#include "llmc/model/modded89/modded89_model_file.h"
#include "test/reference/reference_modded89.h"
#include "test/support/test_helpers.h"
#include "test/support/worst_error.h"

namespace {

using llmc::test::read_bytes;
using llmc::test::set_int32_word;
using llmc::test::write_bytes;

using namespace llmc;

class Modded89ModelFile : public llmc::test::TempDirTest {
 protected:
  Modded89ModelFile() : TempDirTest("llmc_test_modded89_model_file") {}
};

Modded89Config tiny() {
  return modded89_config_from_name("modded89-tiny");
}

float bf16_round(float value) {
  return bf16_bits_to_float(float_to_bf16_bits(value));
}

void expect_error(const std::string& file, const Modded89Layout& layout, const std::string& fragment) {
  llmc::test::expect_file_error(
      file, [&](std::vector<float>& params) { read_modded89_model(file, layout, params); }, fragment);
}

TEST_F(Modded89ModelFile, Fp32RoundTripIsExactAcrossWorldSizes) {
  const Modded89Layout layout1 = make_modded89_layout(tiny(), 1), layout3 = make_modded89_layout(tiny(), 3);
  std::vector<float> params = init_modded89_params(layout1, 5);
  for (size_t i = 0; i < params.size(); i++) params[i] += 1e-3f * static_cast<float>(i % 7);  // not bf16 values
  write_modded89_model(path("a.bin"), layout1, params.data(), TensorFileDtype::kFp32);
  Modded89Layout loaded_layout;
  const std::vector<float> loaded = load_modded89_model(path("a.bin"), 3, &loaded_layout);
  EXPECT_EQ(loaded_layout.world_size, 3);
  ASSERT_EQ(loaded.size(), layout3.total_size);
  std::vector<bool> is_padding(loaded.size(), true);
  for (size_t t = 0; t < layout1.tensors.size(); t++) {
    const TensorView &v1 = layout1.tensors[t], &v3 = layout3.tensors[t];
    for (size_t i = 0; i < v1.numel; i++) {
      ASSERT_EQ(loaded[v3.offset + i], params[v1.offset + i]) << v1.name;
      is_padding[v3.offset + i] = false;
    }
  }
  for (size_t i = 0; i < loaded.size(); i++) {
    if (!is_padding[i]) continue;
    ASSERT_EQ(loaded[i], 0.0f) << "padding element " << i;
  }
  const Modded89ModelFileInfo info = read_modded89_model_header(path("a.bin"));
  EXPECT_EQ(info.num_parameters, static_cast<int64_t>(layout1.num_parameters));
  EXPECT_EQ(static_cast<int64_t>(read_bytes(path("a.bin")).size()), 1024 + 4 * info.num_parameters);
}

TEST_F(Modded89ModelFile, ReferenceDtypesRoundTheBf16TensorsOnly) {
  const Modded89Layout layout = make_modded89_layout(tiny(), 2);
  std::vector<float> params(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) params[view.offset + i] = 1.0f + 1e-4f * static_cast<float>(i % 101);
  write_modded89_model(path("b.bin"), layout, params.data(), TensorFileDtype::kReference);
  std::vector<float> loaded;
  read_modded89_model(path("b.bin"), layout, loaded);
  int64_t bytes = 1024, fp32_tensors = 0;
  for (const TensorView& view : layout.tensors) {
    const bool bf16 = view.reference_dtype == ParamDtype::kBf16;
    fp32_tensors += bf16 ? 0 : 1;
    bytes += static_cast<int64_t>(view.numel) * (bf16 ? 2 : 4);
    for (size_t i = 0; i < view.numel; i++) {
      const float value = params[view.offset + i];
      ASSERT_EQ(loaded[view.offset + i], bf16 ? bf16_round(value) : value) << view.name;
    }
  }
  EXPECT_EQ(fp32_tensors, 4);  // scalars, resid and post lambdas, the gate scale: fp32 in the record
  EXPECT_EQ(static_cast<int64_t>(read_bytes(path("b.bin")).size()), bytes);
}

// A file written BY HAND from the documented header words and the tensor names in the documented order
// (docs/model.md), independent of modded89_model_file.cpp.
TEST_F(Modded89ModelFile, ReadsTheDocumentedOrderWrittenByHand) {
  const Modded89Config c = tiny();
  const size_t V = 96, C = 32, m = 8, H = 2, D = 16;
  ASSERT_EQ(static_cast<size_t>(c.vocab_size), V);
  ASSERT_EQ(static_cast<size_t>(c.channels()), C);
  struct Named {
    std::string name;
    size_t numel;
    bool fp32;
  };
  std::vector<Named> order = {{"embed", V * C, false},         {"value_embeds", 5 * V * C, false},
                              {"bigram_embed", 61 * C, false}, {"smear_gate", 12, false},
                              {"scalars", 24, true},           {"resid_lambdas", 22, true},
                              {"post_lambdas", 22, true},      {"mudd_gate_scale", 1, true},
                              {"gate0.w1", m * C, false},      {"gate0.w2", 41 * m, false},
                              {"gate0.b2", 41, false}};
  for (int i = 0; i < 11; i++) {
    const std::string p = "layers." + std::to_string(i) + ".";
    if (i != 6) order.push_back({p + "qk", H * 2 * D * C, false}), order.push_back({p + "vo", 2 * C * C, false});
    order.push_back({p + "mlp", 2 * 4 * C * C, false});
    if (i == 1 || i == 2 || i == 8 || i == 9) order.push_back({p + "ve_gate", H * 12, false});
    if (i == 4)
      for (const auto& [suffix, numel] : {std::pair<const char*, size_t>{"w1", m * C}, {"w2", 41 * m}, {"b2", 41}})
        order.push_back({std::string("gate1.") + suffix, numel, false});
    if (i == 10)
      for (const auto& [suffix, numel] : {std::pair<const char*, size_t>{"w1", m * C}, {"w2", 14 * m}, {"b2", 14}})
        order.push_back({std::string("mudd0.") + suffix, numel, false});
  }
  order.push_back({"head", C * V, false});
  for (const auto& [suffix, numel] : {std::pair<const char*, size_t>{"w1", m * C}, {"w2", 14 * m}, {"b2", 14}})
    order.push_back({std::string("mudd1.") + suffix, numel, false});

  std::vector<int32_t> header(256, 0);
  const int32_t words[] = {20260717, 1, 1, 1, 96, 2, 16, 64, 8, 61, 8, 12, static_cast<int32_t>(order.size())};
  std::copy(std::begin(words), std::end(words), header.begin());
  std::vector<char> bytes(reinterpret_cast<const char*>(header.data()),
                          reinterpret_cast<const char*>(header.data()) + 1024);
  std::vector<std::vector<float>> values(order.size());
  for (size_t t = 0; t < order.size(); t++)
    for (size_t i = 0; i < order[t].numel; i++) {
      const float value = static_cast<float>(t * 1000 + i % 997) + (order[t].fp32 ? 0.25f : 0.0f);
      values[t].push_back(order[t].fp32 ? value : bf16_round(value));
      if (order[t].fp32) {
        bytes.insert(bytes.end(), reinterpret_cast<const char*>(&value), reinterpret_cast<const char*>(&value) + 4);
      } else {
        const uint16_t bits = float_to_bf16_bits(value);
        bytes.insert(bytes.end(), reinterpret_cast<const char*>(&bits), reinterpret_cast<const char*>(&bits) + 2);
      }
    }
  write_bytes(path("hand.bin"), bytes);
  const Modded89Layout layout = make_modded89_layout(c, 2);
  ASSERT_EQ(layout.tensors.size(), order.size());
  std::vector<float> loaded;
  read_modded89_model(path("hand.bin"), layout, loaded);
  for (size_t t = 0; t < order.size(); t++) {
    const TensorView& view = layout.find(order[t].name);
    ASSERT_EQ(view.numel, order[t].numel) << order[t].name;
    for (size_t i = 0; i < view.numel; i++)
      ASSERT_EQ(loaded[view.offset + i], values[t][i]) << order[t].name << "[" << i << "]";
  }
}

// Version 2's attention state (windows in tokens, then each YaRN change's old and new long window in blocks)
// in the documented header words 13.., read back; a file written without one, and a version 1 file (which has
// none), give the record's first state (short 1 block, long 3 blocks of the tiny model's 8 tokens, no YaRN).
TEST_F(Modded89ModelFile, KeepsTheAttentionStateInTheHeader) {
  const Modded89Layout layout = make_modded89_layout(tiny(), 1);
  const std::vector<float> params = init_modded89_params(layout, 1);
  const Modded89AttentionState trained{40, 160, {{3, 7}, {7, 11}}};
  write_modded89_model(path("trained.bin"), layout, params.data(), TensorFileDtype::kFp32, trained);
  const std::vector<char> bytes = read_bytes(path("trained.bin"));
  std::vector<int32_t> words(256);
  std::memcpy(words.data(), bytes.data(), 1024);
  EXPECT_EQ(words[1], 2);
  EXPECT_EQ(std::vector<int32_t>(words.begin() + 13, words.begin() + 21),
            (std::vector<int32_t>{40, 160, 2, 3, 7, 7, 11, 0}));
  EXPECT_EQ(read_modded89_model_header(path("trained.bin")).attention, trained);
  Modded89AttentionState loaded;
  EXPECT_EQ(load_modded89_model(path("trained.bin"), 2, nullptr, &loaded), load_modded89_model(path("trained.bin"), 2,
                                                                                              nullptr));
  EXPECT_EQ(loaded, trained);

  const Modded89AttentionState first{8, 24, {}};
  write_modded89_model(path("untrained.bin"), layout, params.data(), TensorFileDtype::kFp32);
  EXPECT_EQ(read_modded89_model_header(path("untrained.bin")).attention, first);
  llmc::test::write_edited_copy(bytes, path("version1.bin"), [](auto& b) { set_int32_word(b, 1, 1); });
  EXPECT_EQ(read_modded89_model_header(path("version1.bin")).attention, first);

  Modded89AttentionState too_many = trained;
  too_many.yarn_changes.assign(65, YarnChange{3, 7});
  EXPECT_THROW(write_modded89_model(path("many.bin"), layout, params.data(), TensorFileDtype::kFp32, too_many),
               std::invalid_argument);
}

TEST_F(Modded89ModelFile, BadFilesGiveOneLineErrorsNamingTheFile) {
  const Modded89Layout layout = make_modded89_layout(tiny(), 1);
  const std::vector<float> params = init_modded89_params(layout, 1);
  write_modded89_model(path("good.bin"), layout, params.data(), TensorFileDtype::kReference);
  const std::vector<char> good = read_bytes(path("good.bin"));
  auto variant = [&](const std::string& name, auto change) {
    return llmc::test::write_edited_copy(good, path(name), change);
  };
  expect_error(path("missing.bin"), layout, "does not exist");
  expect_error(variant("magic.bin", [&](auto& b) { set_int32_word(b, 0, 20251031); }), layout,
               "not a 2026-07-17 model file: magic is 20251031");
  expect_error(variant("version.bin", [&](auto& b) { set_int32_word(b, 1, 7); }), layout,
               "unsupported 2026-07-17 model file version 7");
  expect_error(variant("arch.bin", [&](auto& b) { set_int32_word(b, 2, 2); }), layout,
               "unknown 2026-07-17 model architecture 2");
  expect_error(variant("dtype.bin", [&](auto& b) { set_int32_word(b, 3, 5); }), layout, "unknown dtype field 5");
  expect_error(variant("config.bin", [&](auto& b) { set_int32_word(b, 5, 3); }), layout, "even");  // H odd
  expect_error(variant("tensors.bin", [&](auto& b) { set_int32_word(b, 12, 3); }), layout, "header promises 3 tensors");
  expect_error(variant("short.bin", [&](auto& b) { b.resize(b.size() - 2); }), layout, "truncated model file");
  expect_error(variant("header.bin", [&](auto& b) { b.resize(100); }), layout, "shorter than its 1024-byte header");
  expect_error(variant("long.bin", [&](auto& b) { b.push_back(0); }), layout, "1 trailing bytes");
  expect_error(variant("window.bin", [&](auto& b) { set_int32_word(b, 13, -1); }), layout,
               "attention windows -1 and 24 tokens outside [0, 2^24]");
  expect_error(variant("changes.bin", [&](auto& b) { set_int32_word(b, 15, 65); }), layout,
               "65 YaRN changes outside [0, 64]");
  expect_error(variant("change.bin",
                       [&](auto& b) {
                         set_int32_word(b, 15, 1);
                         set_int32_word(b, 17, 7);
                       }),
               layout, "YaRN change 0 from 0 to 7 blocks");
  Modded89Config other = tiny();
  other.vocab_size = 104;
  other.dc_window = 10;
  expect_error(path("good.bin"), make_modded89_layout(other, 1),
               "V is 96 (expected 104), dc_window is 12 (expected 10)");
}

// Every tensor whose init is a constant equals the double-precision reference's init (written separately
// from SPEEDRUN89.md) once rounded to its storage dtype; the random ones are checked by what they are.
// At the record's six heads (the gate columns are laid out for them; at fewer heads some columns are read by
// nothing and the reference sets them as the record does while the init leaves them zero).
TEST(Modded89Init, ConstantsEqualTheReferenceInit) {
  Modded89Config six_heads = tiny();
  six_heads.num_heads = 6;
  six_heads.head_dim = 8;
  const Modded89Layout layout = make_modded89_layout(six_heads, 1);
  const std::vector<float> params = init_modded89_params(layout, 7);
  const std::vector<double> reference = ref::init_modded89_params(layout, 7);
  int constant_tensors = 0;
  for (const TensorView& view : layout.tensors) {
    const bool random_start = view.name == "embed" || view.name == "head" || view.name == "value_embeds" ||
                              view.name.find(".w1") != std::string::npos ||
                              (view.name.rfind("layers.", 0) == 0 && view.name.find("ve_gate") == std::string::npos);
    if (random_start) continue;
    constant_tensors++;
    for (size_t i = 0; i < view.numel; i++) {
      const double expected = reference[view.offset + i];
      const float stored = view.reference_dtype == ParamDtype::kBf16 ? bf16_round(static_cast<float>(expected))
                                                                     : static_cast<float>(expected);
      ASSERT_EQ(params[view.offset + i], stored) << view.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(constant_tensors, 2 + 4 + 4 + 4 + 4);  // bigram, smear; the fp32 tensors; gates, MUDDs: w2, b2; ve gates
  // c_proj, the second half of each MLP bank, starts at zero as in the reference.
  const TensorView& mlp = layout.find("layers.0.mlp");
  for (size_t i = mlp.numel / 2; i < mlp.numel; i++) ASSERT_EQ(params[mlp.offset + i], 0.0f);
}

TEST(Modded89Init, RandomTensorsHaveTheRecordsDistributionsAndTheTie) {
  Modded89Config config = tiny();
  const Modded89Layout layout = make_modded89_layout(config, 1);
  const std::vector<float> params = init_modded89_params(layout, 3);
  const size_t C = 32, V = 96;
  const TensorView &head = layout.find("head"), &embed = layout.find("embed");
  for (size_t v = 0; v < V; v++)
    for (size_t c = 0; c < C; c++) ASSERT_EQ(params[embed.offset + v * C + c], params[head.offset + c * V + v]);
  // Sample standard deviations: relative standard error 1/sqrt(2n); 5 of them allowed.
  auto expect_std = [&](const TensorView& view, size_t count, double sigma) {
    double sum = 0.0, squares = 0.0;
    for (size_t i = 0; i < count; i++) {
      const float value = params[view.offset + i];
      ASSERT_EQ(value, bf16_round(value)) << view.name << " not stored as bf16";
      sum += value;
      squares += static_cast<double>(value) * value;
    }
    const double n = static_cast<double>(count), mean = sum / n, std = std::sqrt(squares / n - mean * mean);
    EXPECT_NEAR(std / sigma, 1.0, 5.0 / std::sqrt(2.0 * n)) << view.name;
    EXPECT_NEAR(mean / sigma, 0.0, 5.0 / std::sqrt(n)) << view.name;
  };
  expect_std(head, head.numel, 0.005);
  expect_std(layout.find("value_embeds"), layout.find("value_embeds").numel, 0.01);
  const double a = std::sqrt(3.0) * 0.5 / std::sqrt(32.0);
  auto expect_uniform = [&](const TensorView& view, size_t count, double bound) {
    double largest = 0.0;
    for (size_t i = 0; i < count; i++) largest = llmc::larger_magnitude(largest, params[view.offset + i]);
    EXPECT_LE(largest, bf16_round(static_cast<float>(bound))) << view.name;
    EXPECT_GT(largest, 0.95 * bound) << view.name;  // P(all of >= 1,000 draws below 0.95 a) < 1e-22
    expect_std(view, count, bound / std::sqrt(3.0));
  };
  expect_uniform(layout.find("layers.0.qk"), layout.find("layers.0.qk").numel, a);
  expect_uniform(layout.find("layers.5.vo"), layout.find("layers.5.vo").numel, a);
  expect_uniform(layout.find("layers.6.mlp"), 4 * C * C, a);
  expect_uniform(layout.find("mudd1.w1"), layout.find("mudd1.w1").numel, 1.0 / std::sqrt(32.0));
  EXPECT_EQ(init_modded89_params(layout, 3), params) << "not deterministic";
  EXPECT_NE(init_modded89_params(layout, 4), params) << "the seed changes nothing";
  const Modded89Layout layout4 = make_modded89_layout(config, 4);
  const std::vector<float> params4 = init_modded89_params(layout4, 3);
  for (size_t t = 0; t < layout.tensors.size(); t++)
    for (size_t i = 0; i < layout.tensors[t].numel; i++)
      ASSERT_EQ(params4[layout4.tensors[t].offset + i], params[layout.tensors[t].offset + i])
          << "world size changes it";
}

// A checkpoint records the config in six words of at most 2^24 (the packed ones at the validated limits too).
TEST(Modded89StateModel, ConfigRoundTripsThroughTheStateWords) {
  Modded89Config largest = modded89_config_from_name("modded89");
  largest.num_heads = 1024;
  largest.head_dim = 1024;
  largest.mudd_hidden = 4096;
  largest.dc_window = 128;
  for (const Modded89Config& config : {tiny(), modded89_config_from_name("modded89"), largest}) {
    const StateModel model = modded89_state_model(config);
    EXPECT_EQ(model.family, ModelFamilyId::kModded89);
    for (int64_t word : model.shape) EXPECT_LE(word, int64_t{1} << 24);
    EXPECT_EQ(describe_modded89_config(modded89_config_of(model)), describe_modded89_config(config));
  }
}

}  // namespace
