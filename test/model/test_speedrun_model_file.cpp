// Tests of the speedrun model file (llmc/model/modded44/speedrun_model_file.h): fp32 round trips exact across world
// sizes, reference-dtype files round exactly the bf16 tensors, the tensor order and dtypes checked against
// a file written by hand from the reference's tensor list, and a one-line error naming the file for
// every kind of bad file.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/model/modded44/speedrun_init.h"
#include "llmc/model/modded44/speedrun_model_file.h"
#include "test/reference/reference_speedrun.h"
#include "test/support/test_helpers.h"

namespace {

using llmc::test::read_bytes;
using llmc::test::set_int32_word;
using llmc::test::write_bytes;

using namespace llmc;

class SpeedrunModelFile : public llmc::test::TempDirTest {
 protected:
  SpeedrunModelFile() : TempDirTest("llmc_test_speedrun_model_file") {}
};

SpeedrunConfig small_config() {  // the scaled 8-block structure keeps the files small
  SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  config.num_blocks = 8;
  return config;
}

void expect_error(const std::string& file, const SpeedrunLayout& layout, const std::string& fragment) {
  llmc::test::expect_file_error(
      file, [&](std::vector<float>& params) { read_speedrun_model(file, layout, params); }, fragment);
}

TEST_F(SpeedrunModelFile, Fp32RoundTripIsExactAcrossWorldSizes) {
  const SpeedrunLayout layout1 = make_speedrun_layout(small_config(), 1);
  const SpeedrunLayout layout3 = make_speedrun_layout(small_config(), 3);
  std::vector<float> params = init_speedrun_params(layout1, 5);
  for (size_t i = 0; i < params.size(); i++) params[i] += 1e-3f * static_cast<float>(i % 7);  // not bf16 values
  write_speedrun_model(path("a.bin"), layout1, params.data(), SpeedrunFileDtype::kFp32);
  SpeedrunLayout loaded_layout;
  const std::vector<float> loaded = load_speedrun_model(path("a.bin"), 3, &loaded_layout);
  EXPECT_EQ(loaded_layout.world_size, 3);
  EXPECT_EQ(loaded_layout.total_size, layout3.total_size);
  for (size_t t = 0; t < layout1.tensors.size(); t++) {
    const TensorView &v1 = layout1.tensors[t], &v3 = layout3.tensors[t];
    for (size_t i = 0; i < v1.numel; i++) ASSERT_EQ(loaded[v3.offset + i], params[v1.offset + i]) << v1.name;
  }
  const SpeedrunModelFileInfo info = read_speedrun_model_header(path("a.bin"));
  EXPECT_EQ(info.num_parameters, static_cast<int64_t>(layout1.num_parameters));
  EXPECT_EQ(static_cast<int64_t>(read_bytes(path("a.bin")).size()), 1024 + 4 * info.num_parameters);
}

TEST_F(SpeedrunModelFile, ReferenceDtypesRoundTheBf16TensorsOnly) {
  const SpeedrunLayout layout = make_speedrun_layout(small_config(), 2);
  std::vector<float> params(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) params[view.offset + i] = 1.0f + 1e-4f * static_cast<float>(i % 101);
  write_speedrun_model(path("b.bin"), layout, params.data(), SpeedrunFileDtype::kReference);
  std::vector<float> loaded;
  read_speedrun_model(path("b.bin"), layout, loaded);
  int64_t bytes = 1024;
  for (const TensorView& view : layout.tensors) {
    const bool bf16 = view.reference_dtype == ParamDtype::kBf16;
    bytes += static_cast<int64_t>(view.numel) * (bf16 ? 2 : 4);
    for (size_t i = 0; i < view.numel; i++) {
      const float value = params[view.offset + i];
      ASSERT_EQ(loaded[view.offset + i], bf16 ? bf16_bits_to_float(float_to_bf16_bits(value)) : value) << view.name;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(read_bytes(path("b.bin")).size()), bytes);
}

// A file written BY HAND from the reference's tensor list (order, shapes, dtypes) and the documented
// header words, independent of speedrun_model_file.cpp.
TEST_F(SpeedrunModelFile, ReadsTheDocumentedOrderWrittenByHand) {
  const SpeedrunConfig config = small_config();
  ref::SpeedrunParams params = ref::zero_speedrun_params(config);
  std::vector<ref::NamedTensor> tensors = ref::named_tensors(params, config);
  std::vector<int32_t> header(256, 0);
  const int32_t words[] = {20251031,
                           1,
                           1,
                           1,
                           config.vocab_size,
                           config.num_blocks,
                           config.num_heads,
                           config.head_dim,
                           config.max_seq_len,
                           config.window_block,
                           48,
                           static_cast<int32_t>(tensors.size())};  // 5L + 2 = 42 scalars, padded to 48
  std::copy(std::begin(words), std::end(words), header.begin());
  std::vector<char> bytes(reinterpret_cast<const char*>(header.data()),
                          reinterpret_cast<const char*>(header.data()) + 1024);
  for (size_t t = 0; t < tensors.size(); t++)
    for (size_t i = 0; i < tensors[t].values->size(); i++) {
      const float value = static_cast<float>(t * 1000 + i % 997);  // distinct per tensor; bf16 ones rounded
      (*tensors[t].values)[i] = tensors[t].bf16 ? bf16_bits_to_float(float_to_bf16_bits(value)) : value;
      if (tensors[t].bf16) {
        const uint16_t bits = float_to_bf16_bits(value);
        bytes.insert(bytes.end(), reinterpret_cast<const char*>(&bits), reinterpret_cast<const char*>(&bits) + 2);
      } else {
        bytes.insert(bytes.end(), reinterpret_cast<const char*>(&value), reinterpret_cast<const char*>(&value) + 4);
      }
    }
  write_bytes(path("hand.bin"), bytes);
  const SpeedrunLayout layout = make_speedrun_layout(config, 1);
  ASSERT_EQ(layout.tensor(SpeedrunTensor::kScalars).numel, 48u);
  std::vector<float> loaded;
  read_speedrun_model(path("hand.bin"), layout, loaded);
  for (const ref::NamedTensor& tensor : tensors) {
    const TensorView& view = layout.find(tensor.name);
    for (size_t i = 0; i < view.numel; i++)
      ASSERT_EQ(static_cast<double>(loaded[view.offset + i]), (*tensor.values)[i]) << tensor.name << "[" << i << "]";
  }
}

TEST_F(SpeedrunModelFile, BadFilesGiveOneLineErrorsNamingTheFile) {
  const SpeedrunLayout layout = make_speedrun_layout(small_config(), 1);
  const std::vector<float> params = init_speedrun_params(layout, 1);
  write_speedrun_model(path("good.bin"), layout, params.data(), SpeedrunFileDtype::kReference);
  const std::vector<char> good = read_bytes(path("good.bin"));
  auto variant = [&](const std::string& name, auto change) {
    return llmc::test::write_edited_copy(good, path(name), change);
  };
  expect_error(path("missing.bin"), layout, "does not exist");
  expect_error(variant("magic.bin", [&](auto& b) { set_int32_word(b, 0, 20240326); }), layout,
               "not a speedrun model file");
  expect_error(variant("version.bin", [&](auto& b) { set_int32_word(b, 1, 7); }), layout,
               "unsupported speedrun model file version 7");
  expect_error(variant("arch.bin", [&](auto& b) { set_int32_word(b, 2, 2); }), layout,
               "unknown speedrun architecture 2");
  expect_error(variant("dtype.bin", [&](auto& b) { set_int32_word(b, 3, 5); }), layout, "unknown dtype field 5");
  expect_error(variant("config.bin", [&](auto& b) { set_int32_word(b, 5, 9); }), layout, "num_blocks must be even");
  expect_error(variant("tensors.bin", [&](auto& b) { set_int32_word(b, 11, 3); }), layout, "header promises 3 tensors");
  expect_error(variant("short.bin", [&](auto& b) { b.resize(b.size() - 2); }), layout, "truncated model file");
  expect_error(variant("header.bin", [&](auto& b) { b.resize(100); }), layout, "shorter than its 1024-byte header");
  expect_error(variant("long.bin", [&](auto& b) { b.push_back(0); }), layout, "1 trailing bytes");
  SpeedrunConfig other = small_config();
  other.vocab_size = 104;
  const SpeedrunLayout other_layout = make_speedrun_layout(other, 1);
  expect_error(path("good.bin"), other_layout, "V is 96 (expected 104)");
}

}  // namespace
