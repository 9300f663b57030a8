// Speedrun model files, mapped to and from the bucketed layout (see speedrun_model_file.h).
#include "llmc/model/modded44/speedrun_model_file.h"

#include <cstdio>
#include <stdexcept>

#include "llmc/base/atomic_file.h"
#include "llmc/base/file_io.h"
#include "llmc/family/header_mismatch.h"
#include "llmc/family/tensor_file.h"

namespace llmc {

namespace {

constexpr int kHeaderInts = 256;
// The words of the header that are used (the rest are zero).
enum HeaderField {
  kMagic,
  kVersion,
  kArchitecture,
  kDtype,
  kVocab,
  kBlocks,
  kHeads,
  kHeadDim,
  kMaxSeqLen,
  kWindowBlock,
  kNumScalars,
  kNumTensors,
};

bool reference_dtypes(SpeedrunFileDtype dtype) { return dtype == SpeedrunFileDtype::kReference; }

std::string config_mismatch(const SpeedrunConfig& file, const SpeedrunConfig& expected) {
  HeaderMismatch fields;
  fields.check("V", file.vocab_size, expected.vocab_size);
  fields.check("L", file.num_blocks, expected.num_blocks);
  fields.check("H", file.num_heads, expected.num_heads);
  fields.check("D", file.head_dim, expected.head_dim);
  fields.check("T", file.max_seq_len, expected.max_seq_len);
  fields.check("window_block", file.window_block, expected.window_block);
  return fields.text();
}

}  // namespace

SpeedrunModelFileInfo read_speedrun_model_header(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "model file");
  int32_t header[kHeaderInts];
  if (std::fread(header, sizeof(int32_t), kHeaderInts, in.get()) != kHeaderInts)
    throw FileError(path, "truncated model file: shorter than its 1024-byte header");
  if (header[kMagic] != kSpeedrunModelMagic)
    throw FileError(path, "not a speedrun model file: magic is " + std::to_string(header[kMagic]) + ", expected " +
                              std::to_string(kSpeedrunModelMagic));
  if (header[kVersion] != kSpeedrunModelVersion)
    throw FileError(path, "unsupported speedrun model file version " + std::to_string(header[kVersion]) +
                              " (supported: " + std::to_string(kSpeedrunModelVersion) + ")");
  if (header[kArchitecture] != kSpeedrunArchitectureRecord20251031)
    throw FileError(path, "unknown speedrun architecture " + std::to_string(header[kArchitecture]) +
                              " (supported: 1 = the 2025-10-31 record's structure)");
  if (header[kDtype] != static_cast<int32_t>(SpeedrunFileDtype::kFp32) &&
      header[kDtype] != static_cast<int32_t>(SpeedrunFileDtype::kReference))
    throw FileError(path,
                    "unknown dtype field " + std::to_string(header[kDtype]) + " (0 = fp32, 1 = reference dtypes)");
  SpeedrunModelFileInfo info;
  info.dtype = static_cast<SpeedrunFileDtype>(header[kDtype]);
  info.config.vocab_size = header[kVocab];
  info.config.num_blocks = header[kBlocks];
  info.config.num_heads = header[kHeads];
  info.config.head_dim = header[kHeadDim];
  info.config.max_seq_len = header[kMaxSeqLen];
  info.config.window_block = header[kWindowBlock];
  SpeedrunLayout layout;
  try {
    layout = make_speedrun_layout(info.config, 1);
  } catch (const std::invalid_argument& error) {
    throw FileError(path, error.what());
  }
  if (header[kNumScalars] != static_cast<int32_t>(layout.tensor(SpeedrunTensor::kScalars).numel) ||
      header[kNumTensors] != static_cast<int32_t>(layout.tensors.size()))
    throw FileError(path, "header promises " + std::to_string(header[kNumTensors]) + " tensors and " +
                              std::to_string(header[kNumScalars]) + " scalars, the structure of " +
                              describe_speedrun_config(info.config) + " has " + std::to_string(layout.tensors.size()) +
                              " and " + std::to_string(layout.tensor(SpeedrunTensor::kScalars).numel));
  info.num_parameters = static_cast<int64_t>(layout.num_parameters);
  info.data_bytes = tensor_payload_bytes(layout, reference_dtypes(info.dtype));
  check_model_file_size(path, int64_t{kHeaderInts} * 4, info.data_bytes, describe_speedrun_config(info.config));
  return info;
}

void read_speedrun_model(const std::string& path, const SpeedrunLayout& layout, std::vector<float>& params) {
  const SpeedrunModelFileInfo info = read_speedrun_model_header(path);
  const std::string mismatch = config_mismatch(info.config, layout.config);
  if (!mismatch.empty()) throw FileError(path, "model file does not match the model: " + mismatch);
  const FileHandle in = open_file(path, "rb", "model file");
  if (std::fseek(in.get(), long{kHeaderInts} * 4, SEEK_SET) != 0)
    throw_errno_file_error(path, "cannot seek past the header");
  std::vector<float> loaded(layout.total_size, 0.0f);
  read_tensor_payload(in.get(), path, layout, speedrun_file_order(layout), reference_dtypes(info.dtype),
                      loaded.data());
  params.swap(loaded);
}

std::vector<float> load_speedrun_model(const std::string& path, int world_size, SpeedrunLayout* layout_out) {
  const SpeedrunModelFileInfo info = read_speedrun_model_header(path);
  SpeedrunLayout layout = make_speedrun_layout(info.config, world_size);
  std::vector<float> params;
  read_speedrun_model(path, layout, params);
  if (layout_out != nullptr) *layout_out = std::move(layout);
  return params;
}

WrittenFile write_speedrun_model(const std::string& path, const SpeedrunLayout& layout, const float* params,
                                 SpeedrunFileDtype dtype) {
  int32_t header[kHeaderInts] = {};
  const SpeedrunConfig& c = layout.config;
  header[kMagic] = kSpeedrunModelMagic;
  header[kVersion] = kSpeedrunModelVersion;
  header[kArchitecture] = kSpeedrunArchitectureRecord20251031;
  header[kDtype] = static_cast<int32_t>(dtype);
  header[kVocab] = c.vocab_size;
  header[kBlocks] = c.num_blocks;
  header[kHeads] = c.num_heads;
  header[kHeadDim] = c.head_dim;
  header[kMaxSeqLen] = c.max_seq_len;
  header[kWindowBlock] = c.window_block;
  header[kNumScalars] = static_cast<int32_t>(layout.tensor(SpeedrunTensor::kScalars).numel);
  header[kNumTensors] = static_cast<int32_t>(layout.tensors.size());
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  write_tensor_payload(out, layout, speedrun_file_order(layout), params, reference_dtypes(dtype));
  return out.commit();
}

}  // namespace llmc
