// Tests of llm.c-format checkpoint files: fp32 round trip exact, bf16 within rounding (and bit-exact
// against CUDA's own __float2bfloat16 where its header exists), llm.c tensor order checked against a
// file written by hand in this test, the checksum in the header's free words (against libxxhash called
// here directly) and a clear error for every kind of bad file, flipped bits included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "test/support/test_helpers.h"

#ifdef LLMC_TEST_HAVE_CUDA_BF16
#include <cuda_bf16.h>
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

using namespace llmc;

namespace {

using llmc::test::read_bytes;
using llmc::test::set_int32_word;
using llmc::test::write_bytes;

class Checkpoint : public llmc::test::TempDirTest {
 protected:
  Checkpoint() : TempDirTest("llmc_test_checkpoint") {}
};

GPT2Config odd_config() {  // C not a multiple of 8: the layout has alignment gaps the file must not have
  GPT2Config c;
  c.num_layers = 3;
  c.num_heads = 3;
  c.channels = 12;
  c.max_seq_len = 5;
  c.vocab_size = 21;
  c.padded_vocab_size = 24;
  return c;
}

// A distinct, exactly representable value for element i of tensor instance (kind, layer).
float marker(int kind, int layer, size_t i) {
  return static_cast<float>(kind * 100000 + (layer + 1) * 10000 + static_cast<int>(i % 9973));
}

// Writes an llm.c v3 file BY HAND from the llm.c tensor list (written out here, independent of
// checkpoint.cpp): wte (Vp,C), wpe (maxT,C), then per-layer tensors stacked over layers, lnfw, lnfb.
void write_llmc_file_by_hand(const std::string& file, const GPT2Config& c) {
  const size_t C = c.channels, L = c.num_layers;
  struct Entry {
    int kind;
    size_t per_layer_numel;
    bool stacked;
  };
  const Entry entries[] = {{0, static_cast<size_t>(c.padded_vocab_size) * C, false},
                           {1, static_cast<size_t>(c.max_seq_len) * C, false},
                           {2, C, true},
                           {3, C, true},
                           {4, 3 * C * C, true},
                           {5, 3 * C, true},
                           {6, C * C, true},
                           {7, C, true},
                           {8, C, true},
                           {9, C, true},
                           {10, 4 * C * C, true},
                           {11, 4 * C, true},
                           {12, 4 * C * C, true},
                           {13, C, true},
                           {14, C, false},
                           {15, C, false}};
  std::vector<int32_t> header(256, 0);
  header[0] = 20240326;
  header[1] = 3;
  header[2] = c.max_seq_len;
  header[3] = c.vocab_size;
  header[4] = c.num_layers;
  header[5] = c.num_heads;
  header[6] = c.channels;
  header[7] = c.padded_vocab_size;
  std::vector<float> body;
  for (const Entry& e : entries) {
    const size_t copies = e.stacked ? L : 1;
    for (size_t layer = 0; layer < copies; layer++)
      for (size_t i = 0; i < e.per_layer_numel; i++)
        body.push_back(marker(e.kind, e.stacked ? static_cast<int>(layer) : -1, i));
  }
  FILE* out = std::fopen(file.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(std::fwrite(header.data(), 4, header.size(), out), header.size());
  ASSERT_EQ(std::fwrite(body.data(), 4, body.size(), out), body.size());
  ASSERT_EQ(std::fclose(out), 0);
}

void expect_error(const std::string& file, const GPT2Layout* layout, const std::string& fragment) {
  std::vector<float> params(3, 7.0f);
  try {
    if (layout != nullptr) read_gpt2_model_file(file, *layout, params);
    else read_gpt2_model_header(file);
    ADD_FAILURE() << "no error for " << file << " (expected '" << fragment << "')";
  } catch (const std::runtime_error& error) {
    const std::string what = error.what();
    EXPECT_EQ(what.rfind(file + ": ", 0), 0u) << "message does not start with the file name: " << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
  EXPECT_EQ(params, std::vector<float>(3, 7.0f)) << "a failed read modified the output";
}

}  // namespace

TEST_F(Checkpoint, Fp32RoundTripIsExactAcrossWorldSizes) {
  const GPT2Layout layout4 = make_param_layout(odd_config(), 4);
  const std::vector<float> params = init_gpt2_params(layout4, 11);
  write_gpt2_model_file(path("model.bin"), layout4, params.data(), Gpt2FileDtype::kFp32);
  const Gpt2ModelFileInfo info = read_gpt2_model_header(path("model.bin"));
  EXPECT_EQ(info.dtype, Gpt2FileDtype::kFp32);
  EXPECT_EQ(info.num_parameters, static_cast<int64_t>(layout4.num_parameters));
  EXPECT_EQ(read_bytes(path("model.bin")).size(), 1024 + 4 * layout4.num_parameters);
  std::vector<float> same;
  read_gpt2_model_file(path("model.bin"), layout4, same);
  EXPECT_EQ(same, params);  // includes the zero padding
  // Loading for another world size places each tensor at that layout's offsets.
  GPT2Layout layout1;
  const std::vector<float> other = load_gpt2_model_file(path("model.bin"), 1, &layout1);
  ASSERT_EQ(layout1.world_size, 1);
  for (size_t t = 0; t < layout4.tensors.size(); t++)
    for (size_t i = 0; i < layout4.tensors[t].numel; i++)
      ASSERT_EQ(other[layout1.tensors[t].offset + i], params[layout4.tensors[t].offset + i]) << layout4.tensors[t].name;
  EXPECT_FALSE(std::ifstream(path("model.bin.tmp")).good()) << "temp file left behind";
}

TEST_F(Checkpoint, Bf16RoundTripWithinRounding) {
  const GPT2Layout layout = make_param_layout(config_from_name("tiny"), 2);
  std::vector<float> params = init_gpt2_params(layout, 5);
  write_gpt2_model_file(path("model_bf16.bin"), layout, params.data(), Gpt2FileDtype::kBf16);
  EXPECT_EQ(read_bytes(path("model_bf16.bin")).size(), 1024 + 2 * layout.num_parameters);
  EXPECT_EQ(read_gpt2_model_header(path("model_bf16.bin")).dtype, Gpt2FileDtype::kBf16);
  std::vector<float> loaded;
  read_gpt2_model_file(path("model_bf16.bin"), layout, loaded);
  ASSERT_EQ(loaded.size(), params.size());
  for (size_t i = 0; i < params.size(); i++) {
    // bf16 keeps 8 significant bits: rounding to nearest errs by at most half an ulp = 2^-8 relative.
    ASSERT_LE(std::abs(loaded[i] - params[i]), std::ldexp(std::abs(params[i]), -8)) << "element " << i;
    // And a bf16 value survives a second round trip unchanged.
    ASSERT_EQ(bf16_bits_to_float(float_to_bf16_bits(loaded[i])), loaded[i]);
  }
}

TEST(Bf16Bits, RoundsToNearestEvenLikeCuda) {
  // Hand-made cases: exact ties go to the even neighbour, just above a tie rounds up.
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(std::ldexp(1.0f, 0) + std::ldexp(1.0f, -8)), 0x3f80);  // tie, 0x3f80 is even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);            // tie, rounds up to even
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  EXPECT_TRUE(std::isinf(bf16_bits_to_float(float_to_bf16_bits(3.4e38f))));  // rounds past the max finite
#ifdef LLMC_TEST_HAVE_CUDA_BF16
  // Bit-exact against CUDA's host-side conversion on a spread of patterns including all tie cases.
  uint32_t state = 12345;
  for (int n = 0; n < 200000; n++) {
    state = state * 1664525u + 1013904223u;
    uint32_t bits = state;
    if (n % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // exact tie
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;      // NaN payloads may differ, checked above
    float value;
    std::memcpy(&value, &bits, 4);
    const __nv_bfloat16 cuda = __float2bfloat16(value);
    uint16_t cuda_bits;
    std::memcpy(&cuda_bits, &cuda, 2);
    ASSERT_EQ(float_to_bf16_bits(value), cuda_bits) << std::hex << "float bits 0x" << bits;
  }
#else
  GTEST_SKIP() << "skipped: cuda_bf16.h not found, hand-made cases only";
#endif
}

TEST_F(Checkpoint, ReadsLlmcOrderWrittenByHand) {
  const GPT2Config config = odd_config();
  write_llmc_file_by_hand(path("llmc.bin"), config);
  const GPT2Layout layout = make_param_layout(config, 3);
  std::vector<float> params;
  read_gpt2_model_file(path("llmc.bin"), layout, params);
  ASSERT_EQ(params.size(), layout.total_size);
  std::vector<bool> is_real(layout.total_size, false);
  for (const TensorView& view : layout.tensors) {
    for (size_t i = 0; i < view.numel; i++) {
      ASSERT_EQ(params[view.offset + i], marker(static_cast<int>(view.kind), view.layer, i)) << view.name << "[" << i << "]";
      is_real[view.offset + i] = true;
    }
  }
  for (size_t i = 0; i < params.size(); i++) {
    if (!is_real[i]) {
      ASSERT_EQ(params[i], 0.0f) << "padding " << i;
    }
  }
  // Writing our buffer back gives the hand-written file byte for byte, but for the checksum words
  // 253..255 (zero in llm.c's files): the tag "XXH3" and the XXH3-64 of the file with words 254, 255 zero.
  write_gpt2_model_file(path("ours.bin"), layout, params.data(), Gpt2FileDtype::kFp32);
  std::vector<char> ours = read_bytes(path("ours.bin")), theirs = read_bytes(path("llmc.bin"));
  ASSERT_EQ(ours.size(), theirs.size());
  int32_t tag = 0;
  uint64_t stored = 0;
  std::memcpy(&tag, &ours[4 * 253], 4);
  std::memcpy(&stored, &ours[4 * 254], 8);
  EXPECT_EQ(tag, 0x33485858);
  std::memset(&ours[4 * 254], 0, 8);
  EXPECT_EQ(stored, XXH3_64bits(ours.data(), ours.size()));
  std::memset(&ours[4 * 253], 0, 4);
  EXPECT_EQ(ours, theirs);
}

TEST_F(Checkpoint, FlippedBitsAreCaughtByTheChecksum) {
  const GPT2Layout layout = make_param_layout(odd_config(), 2);
  std::vector<float> params(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) params[view.offset + i] = 0.001f * static_cast<float>(i % 977) - 0.4f;
  for (Gpt2FileDtype dtype : {Gpt2FileDtype::kFp32, Gpt2FileDtype::kBf16}) {
    write_gpt2_model_file(path("good.bin"), layout, params.data(), dtype);
    const std::vector<char> good = read_bytes(path("good.bin"));
    std::vector<float> loaded;
    read_gpt2_model_file(path("good.bin"), layout, loaded);  // the intact file verifies
    // One bit anywhere the size checks cannot see: a parameter, the last byte, the checksum itself,
    // an unused header word.
    for (size_t byte : {size_t{1024 + 5}, good.size() / 2, good.size() - 1, size_t{4 * 254 + 3}, size_t{4 * 100}}) {
      std::vector<char> bad = good;
      bad[byte] ^= 0x10;
      write_bytes(path("flipped.bin"), bad);
      expect_error(path("flipped.bin"), &layout, "checksum mismatch");
    }
  }
  // A damaged tag is refused rather than read as "no checksum".
  std::vector<char> bad = read_bytes(path("good.bin"));
  bad[4 * 253] ^= 0x01;
  write_bytes(path("bad_tag.bin"), bad);
  expect_error(path("bad_tag.bin"), nullptr, "neither 0 nor the checksum tag");
}

TEST_F(Checkpoint, EachBadFileGivesAClearError) {
  const GPT2Config config = odd_config();
  const GPT2Layout layout = make_param_layout(config, 1);
  write_llmc_file_by_hand(path("good.bin"), config);
  const std::vector<char> good = read_bytes(path("good.bin"));
  auto variant = [&](const std::string& name, auto edit) {
    return llmc::test::write_edited_copy(good, path(name), edit);
  };

  expect_error(path("missing.bin"), &layout, "cannot open");
  expect_error(variant("short_header.bin", [](std::vector<char>& b) { b.resize(100); }), &layout, "truncated");
  expect_error(variant("magic.bin", [&](std::vector<char>& b) { set_int32_word(b, 0, 20240520); }), &layout, "magic");
  expect_error(variant("version.bin", [&](std::vector<char>& b) { set_int32_word(b, 1, 4); }), &layout,
               "unsupported checkpoint version 4");
  expect_error(variant("truncated.bin", [](std::vector<char>& b) { b.resize(b.size() - 4); }), &layout, "truncated");
  expect_error(variant("trailing.bin", [](std::vector<char>& b) { b.push_back(0); }), &layout, "trailing");
  expect_error(variant("heads.bin", [&](std::vector<char>& b) { set_int32_word(b, 5, 5); }), &layout,
               "multiple of num_heads");
  expect_error(variant("huge.bin", [&](std::vector<char>& b) { set_int32_word(b, 4, 1 << 30); }), &layout,
               "implausibly large");
  // bf16 version byte on an fp32-sized body: the size no longer matches.
  expect_error(variant("as_bf16.bin", [&](std::vector<char>& b) { set_int32_word(b, 1, 5); }), &layout, "trailing");
  // A valid file of a different model: named fields in the message.
  GPT2Config other = config;
  other.max_seq_len = 6;
  const GPT2Layout other_layout = make_param_layout(other, 1);
  expect_error(path("good.bin"), &other_layout, "maxT is 5 (expected 6)");
  // Header-only reads report the same problems.
  expect_error(path("magic.bin"), nullptr, "magic");
}

TEST_F(Checkpoint, FailedWriteLeavesNothingBehind) {
  // (A write that fails part-way, disk full: test/train/test_train_state.cpp and the program tests.)
  const GPT2Layout layout = make_param_layout(odd_config(), 1);
  const std::vector<float> params(layout.total_size, 1.0f);
  const std::string target = path("no_such_dir/model.bin");
  try {
    write_gpt2_model_file(target, layout, params.data(), Gpt2FileDtype::kFp32);
    FAIL() << "write into a missing directory succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(target), std::string::npos) << error.what();
  }
  EXPECT_FALSE(std::ifstream(target).good());
}
