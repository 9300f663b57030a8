// Model files of the 2026-07-17 family, mapped to and from Modded89Layout (see modded89_model_file.h).
#include "llmc/model/modded89/modded89_model_file.h"

#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "llmc/base/file_io.h"

namespace llmc {

namespace {

constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = int64_t{kHeaderInts} * 4;
// The words of the header that are used (the rest are zero); the config's follow kDtype.
enum HeaderField { kMagic, kVersion, kArchitecture, kDtype, kFirstConfigField };

// The config's fields in header order (words kFirstConfigField..), then the tensor count.
struct ConfigField {
  const char* name;
  int Modded89Config::*member;
};
constexpr ConfigField kConfigFields[] = {
    {"V", &Modded89Config::vocab_size},
    {"H", &Modded89Config::num_heads},
    {"D", &Modded89Config::head_dim},
    {"T", &Modded89Config::max_seq_len},
    {"window_block", &Modded89Config::window_block},
    {"bigram_rows", &Modded89Config::bigram_rows},
    {"mudd_hidden", &Modded89Config::mudd_hidden},
    {"dc_window", &Modded89Config::dc_window},
};
constexpr int kNumConfigFields = static_cast<int>(sizeof kConfigFields / sizeof kConfigFields[0]);
constexpr int kNumTensors = kFirstConfigField + kNumConfigFields;

bool reference_dtypes(TensorFileDtype dtype) {
  return dtype == TensorFileDtype::kReference;
}

std::vector<int> layout_order(const Modded89Layout& layout) {
  std::vector<int> order(layout.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::string config_mismatch(const Modded89Config& file, const Modded89Config& expected) {
  std::string fields;
  for (const ConfigField& field : kConfigFields) {
    const int in_file = file.*field.member, wanted = expected.*field.member;
    if (in_file != wanted)
      fields += std::string(fields.empty() ? "" : ", ") + field.name + " is " + std::to_string(in_file) +
                " (expected " + std::to_string(wanted) + ")";
  }
  return fields;
}

void check_format_words(const std::string& path, const int32_t* header) {
  if (header[kMagic] != kModded89ModelMagic)
    throw FileError(path, "not a 2026-07-17 model file: magic is " + std::to_string(header[kMagic]) + ", expected " +
                              std::to_string(kModded89ModelMagic));
  if (header[kVersion] != kModded89ModelVersion)
    throw FileError(path, "unsupported 2026-07-17 model file version " + std::to_string(header[kVersion]) +
                              " (supported: " + std::to_string(kModded89ModelVersion) + ")");
  if (header[kArchitecture] != kModded89ArchitectureRecord20260717)
    throw FileError(path, "unknown 2026-07-17 model architecture " + std::to_string(header[kArchitecture]) +
                              " (supported: 1 = the 2026-07-17 record's structure)");
  if (header[kDtype] != static_cast<int32_t>(TensorFileDtype::kFp32) &&
      header[kDtype] != static_cast<int32_t>(TensorFileDtype::kReference))
    throw FileError(path,
                    "unknown dtype field " + std::to_string(header[kDtype]) + " (0 = fp32, 1 = reference dtypes)");
}

}  // namespace

Modded89ModelFileInfo read_modded89_model_header(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "model file");
  int32_t header[kHeaderInts];
  if (std::fread(header, sizeof(int32_t), kHeaderInts, in.get()) != kHeaderInts)
    throw FileError(path, "truncated model file: shorter than its 1024-byte header");
  check_format_words(path, header);
  Modded89ModelFileInfo info;
  info.dtype = static_cast<TensorFileDtype>(header[kDtype]);
  for (int f = 0; f < kNumConfigFields; f++) info.config.*kConfigFields[f].member = header[kFirstConfigField + f];
  Modded89Layout layout;
  try {
    layout = make_modded89_layout(info.config, 1);
  } catch (const std::invalid_argument& error) {
    throw FileError(path, error.what());
  }
  const std::string what = describe_modded89_config(info.config);
  if (header[kNumTensors] != static_cast<int32_t>(layout.tensors.size()))
    throw FileError(path, "header promises " + std::to_string(header[kNumTensors]) + " tensors, the structure of " +
                              what + " has " + std::to_string(layout.tensors.size()));
  info.num_parameters = static_cast<int64_t>(layout.num_parameters);
  info.data_bytes = tensor_payload_bytes(layout, reference_dtypes(info.dtype));
  check_model_file_size(path, kHeaderBytes, info.data_bytes, what);
  return info;
}

void read_modded89_model(const std::string& path, const Modded89Layout& layout, std::vector<float>& params) {
  const Modded89ModelFileInfo info = read_modded89_model_header(path);
  const std::string mismatch = config_mismatch(info.config, layout.config);
  if (!mismatch.empty()) throw FileError(path, "model file does not match the model: " + mismatch);
  const FileHandle in = open_file(path, "rb", "model file");
  if (std::fseek(in.get(), long{kHeaderBytes}, SEEK_SET) != 0)
    throw_errno_file_error(path, "cannot seek past the header");
  std::vector<float> loaded(layout.total_size, 0.0f);
  read_tensor_payload(in.get(), path, layout, layout_order(layout), reference_dtypes(info.dtype), loaded.data());
  params.swap(loaded);
}

std::vector<float> load_modded89_model(const std::string& path, int world_size, Modded89Layout* layout_out) {
  const Modded89ModelFileInfo info = read_modded89_model_header(path);
  Modded89Layout layout = make_modded89_layout(info.config, world_size);
  std::vector<float> params;
  read_modded89_model(path, layout, params);
  if (layout_out != nullptr) *layout_out = std::move(layout);
  return params;
}

WrittenFile write_modded89_model(const std::string& path, const Modded89Layout& layout, const float* params,
                                 TensorFileDtype dtype) {
  int32_t header[kHeaderInts] = {};
  header[kMagic] = kModded89ModelMagic;
  header[kVersion] = kModded89ModelVersion;
  header[kArchitecture] = kModded89ArchitectureRecord20260717;
  header[kDtype] = static_cast<int32_t>(dtype);
  for (int f = 0; f < kNumConfigFields; f++) header[kFirstConfigField + f] = layout.config.*kConfigFields[f].member;
  header[kNumTensors] = static_cast<int32_t>(layout.tensors.size());
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  write_tensor_payload(out, layout, layout_order(layout), params, reference_dtypes(dtype));
  return out.commit();
}

}  // namespace llmc
