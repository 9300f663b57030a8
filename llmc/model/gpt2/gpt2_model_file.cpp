// llm.c-format checkpoint files, mapped to and from the bucketed parameter layout (see checkpoint.h).
#include "llmc/model/gpt2/gpt2_model_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "llmc/base/atomic_file.h"
#include "llmc/base/bf16_bits.h"
#include "llmc/base/checksum.h"
#include "llmc/base/file_io.h"
#include "llmc/family/header_mismatch.h"

namespace llmc {

namespace {

// The words of llm.c's header that are used (the rest are zero).
enum HeaderField { kMagic, kVersion, kMaxSeqLen, kVocab, kLayers, kHeads, kChannels, kPaddedVocab };
constexpr int kChecksumLowWord = kGpt2ModelChecksumTagWord + 1, kChecksumHighWord = kGpt2ModelChecksumTagWord + 2;

// The header as the checksum covers it: the checksum's own two words zero.
void hash_header(Checksum& checksum, const int32_t* header) {
  int32_t copy[kGpt2ModelHeaderInts];
  std::copy(header, header + kGpt2ModelHeaderInts, copy);
  copy[kChecksumLowWord] = copy[kChecksumHighWord] = 0;
  checksum.update(copy, sizeof copy);
}

size_t element_bytes(Gpt2FileDtype dtype) { return dtype == Gpt2FileDtype::kFp32 ? 4 : 2; }

// Calls visit(view) for every tensor instance in llm.c's file order: each kind in enum order (which
// is llm.c's order), and per-layer kinds for layers 0..L-1, so the layer copies of a kind are adjacent.
template <typename Visit>
void for_each_in_file_order(const GPT2Layout& layout, Visit visit) {
  for (int k = 0; k < kNumTensorKinds; k++) {
    const TensorKind kind = static_cast<TensorKind>(k);
    if (is_layer_tensor(kind)) {
      for (int layer = 0; layer < layout.config.num_layers; layer++) visit(layout.tensor(kind, layer));
    } else {
      visit(layout.tensor(kind));
    }
  }
}

std::string config_mismatch(const GPT2Config& file, const GPT2Config& expected) {
  HeaderMismatch fields;
  fields.check("maxT", file.max_seq_len, expected.max_seq_len);
  fields.check("V", file.vocab_size, expected.vocab_size);
  fields.check("L", file.num_layers, expected.num_layers);
  fields.check("NH", file.num_heads, expected.num_heads);
  fields.check("C", file.channels, expected.channels);
  fields.check("Vp", file.padded_vocab_size, expected.padded_vocab_size);
  return fields.text();
}

}  // namespace

int64_t count_parameters(const GPT2Config& c) {
  const int64_t C = c.channels, L = c.num_layers;
  const int64_t per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
  return int64_t{c.padded_vocab_size} * C + int64_t{c.max_seq_len} * C + L * per_layer + 2 * C;
}

Gpt2ModelFileInfo read_gpt2_model_header(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "checkpoint");
  int32_t header[kGpt2ModelHeaderInts];
  if (std::fread(header, sizeof(int32_t), kGpt2ModelHeaderInts, in.get()) != kGpt2ModelHeaderInts)
    throw FileError(path, "truncated checkpoint: shorter than its 1024-byte header");
  if (header[kMagic] != kGpt2ModelMagic)
    throw FileError(path, "not a GPT-2 checkpoint: magic is " + std::to_string(header[kMagic]) + ", expected " +
                               std::to_string(kGpt2ModelMagic));
  Gpt2ModelFileInfo info;
  if (header[kVersion] == kGpt2ModelVersionFp32) info.dtype = Gpt2FileDtype::kFp32;
  else if (header[kVersion] == kGpt2ModelVersionBf16) info.dtype = Gpt2FileDtype::kBf16;
  else
    throw FileError(path, "unsupported checkpoint version " + std::to_string(header[kVersion]) + " (supported: 3 = fp32, " +
                               "5 = bf16)");
  info.config.max_seq_len = header[kMaxSeqLen];
  info.config.vocab_size = header[kVocab];
  info.config.num_layers = header[kLayers];
  info.config.num_heads = header[kHeads];
  info.config.channels = header[kChannels];
  info.config.padded_vocab_size = header[kPaddedVocab];
  try {
    validate_config(info.config);
  } catch (const std::invalid_argument& error) {
    throw FileError(path, error.what());
  }
  info.num_parameters = count_parameters(info.config);
  if (header[kGpt2ModelChecksumTagWord] == kGpt2ModelChecksumTag) {
    info.has_checksum = true;
    info.checksum = static_cast<uint64_t>(static_cast<uint32_t>(header[kChecksumLowWord])) |
                    static_cast<uint64_t>(static_cast<uint32_t>(header[kChecksumHighWord])) << 32;
  } else if (header[kGpt2ModelChecksumTagWord] != 0) {
    throw FileError(path, "corrupt checkpoint header: word " + std::to_string(kGpt2ModelChecksumTagWord) + " is " +
                              std::to_string(header[kGpt2ModelChecksumTagWord]) + ", neither 0 nor the checksum tag");
  }

  struct stat file_stat;
  if (::stat(path.c_str(), &file_stat) != 0) throw_errno_file_error(path, "cannot stat checkpoint");
  const int64_t expected_bytes = int64_t{kGpt2ModelHeaderInts} * 4 +
                                 info.num_parameters * static_cast<int64_t>(element_bytes(info.dtype));
  const int64_t actual_bytes = static_cast<int64_t>(file_stat.st_size);
  if (actual_bytes < expected_bytes)
    throw FileError(path, "truncated checkpoint: " + std::to_string(actual_bytes) + " bytes, the header (" +
                               describe_config(info.config) + ") needs " + std::to_string(expected_bytes));
  if (actual_bytes > expected_bytes)
    throw FileError(path, "checkpoint has " + std::to_string(actual_bytes - expected_bytes) +
                               " trailing bytes after the parameters of " + describe_config(info.config));
  return info;
}

void read_gpt2_model_file(const std::string& path, const GPT2Layout& layout, std::vector<float>& params) {
  const Gpt2ModelFileInfo info = read_gpt2_model_header(path);
  const std::string mismatch = config_mismatch(info.config, layout.config);
  if (!mismatch.empty()) throw FileError(path, "checkpoint does not match the model: " + mismatch);

  const FileHandle in = open_file(path, "rb", "checkpoint");
  int32_t header[kGpt2ModelHeaderInts];
  if (std::fread(header, sizeof header, 1, in.get()) != 1) throw FileError(path, "read failed in the header");
  Checksum checksum;
  hash_header(checksum, header);
  // Read into a fresh buffer so a failure part-way leaves the caller's params untouched.
  std::vector<float> loaded(layout.total_size, 0.0f);
  std::vector<uint16_t> staging;
  for_each_in_file_order(layout, [&](const TensorView& view) {
    float* dst = loaded.data() + view.offset;
    size_t got;
    if (info.dtype == Gpt2FileDtype::kFp32) {
      got = std::fread(dst, sizeof(float), view.numel, in.get());
      checksum.update(dst, got * sizeof(float));
    } else {
      staging.resize(view.numel);
      got = std::fread(staging.data(), sizeof(uint16_t), view.numel, in.get());
      checksum.update(staging.data(), got * sizeof(uint16_t));
      for (size_t i = 0; i < got; i++) dst[i] = bf16_bits_to_float(staging[i]);
    }
    if (got != view.numel) throw FileError(path, "read failed in tensor " + view.name + " (file changed or I/O error)");
  });
  if (info.has_checksum && checksum.digest() != info.checksum)
    throw FileError(path, "checksum mismatch: the file is corrupt (header says " + checksum_hex(info.checksum) +
                              ", the contents hash to " + checksum_hex(checksum.digest()) + ")");
  params.swap(loaded);
}

std::vector<float> load_gpt2_model_file(const std::string& path, int world_size, GPT2Layout* layout_out) {
  const Gpt2ModelFileInfo info = read_gpt2_model_header(path);
  GPT2Layout layout = make_param_layout(info.config, world_size);
  std::vector<float> params;
  read_gpt2_model_file(path, layout, params);
  if (layout_out != nullptr) *layout_out = std::move(layout);
  return params;
}

WrittenFile write_gpt2_model_file(const std::string& path, const GPT2Layout& layout, const float* params,
                             Gpt2FileDtype dtype) {
  int32_t header[kGpt2ModelHeaderInts] = {};
  header[kMagic] = kGpt2ModelMagic;
  header[kVersion] = dtype == Gpt2FileDtype::kFp32 ? kGpt2ModelVersionFp32 : kGpt2ModelVersionBf16;
  header[kMaxSeqLen] = layout.config.max_seq_len;
  header[kVocab] = layout.config.vocab_size;
  header[kLayers] = layout.config.num_layers;
  header[kHeads] = layout.config.num_heads;
  header[kChannels] = layout.config.channels;
  header[kPaddedVocab] = layout.config.padded_vocab_size;
  header[kGpt2ModelChecksumTagWord] = kGpt2ModelChecksumTag;  // the checksum words stay 0 until the end
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  std::vector<uint16_t> staging;
  for_each_in_file_order(layout, [&](const TensorView& view) {
    const float* src = params + view.offset;
    if (dtype == Gpt2FileDtype::kFp32) {
      out.write(src, view.numel * sizeof(float));
    } else {
      staging.resize(view.numel);
      for (size_t i = 0; i < view.numel; i++) staging[i] = float_to_bf16_bits(src[i]);
      out.write(staging.data(), view.numel * sizeof(uint16_t));
    }
  });
  const uint64_t checksum = out.checksum();
  const int32_t checksum_words[2] = {static_cast<int32_t>(static_cast<uint32_t>(checksum)),
                                     static_cast<int32_t>(static_cast<uint32_t>(checksum >> 32))};
  out.patch(kChecksumLowWord * sizeof(int32_t), checksum_words, sizeof checksum_words);
  return out.commit();
}

FileDigest gpt2_model_file_digest(const std::string& path) {
  const Gpt2ModelFileInfo info = read_gpt2_model_header(path);
  if (!info.has_checksum) throw FileError(path, "has no checksum, but a checkpoint's model file must");
  const int64_t bytes = int64_t{kGpt2ModelHeaderInts} * 4 + info.num_parameters * (info.dtype == Gpt2FileDtype::kFp32 ? 4 : 2);
  return FileDigest{static_cast<uint64_t>(bytes), info.checksum};
}

}  // namespace llmc
