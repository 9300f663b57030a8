// Model files of the 2026-07-17 family, mapped to and from Modded89Layout (see modded89_model_file.h).
#include "llmc/model/modded89/modded89_model_file.h"

#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "llmc/base/file_io.h"
#include "llmc/family/header_mismatch.h"

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
// Version 2's attention state after the tensor count: the windows in tokens, the number of YaRN changes, then
// each change's old and new long window in blocks. Version 1 files have none: the record's first state.
constexpr int kShortWindow = kNumTensors + 1, kLongWindow = kNumTensors + 2, kNumYarnChanges = kNumTensors + 3;
constexpr int kFirstYarnChange = kNumTensors + 4;
constexpr int kMaxYarnChanges = 64;
static_assert(kFirstYarnChange + 2 * kMaxYarnChanges <= kHeaderInts, "the YaRN changes must fit the header");
constexpr int32_t kMaxWindow = 1 << 24;  // tokens, as the config's longest sequence

bool reference_dtypes(TensorFileDtype dtype) {
  return dtype == TensorFileDtype::kReference;
}

// The file's tensor order (docs/model.md): the layout's, except that the bigram table, alone in the first bucket,
// comes after the value embeddings, where the record keeps it.
std::vector<int> file_order(const Modded89Layout& layout) {
  std::vector<int> order;
  const int bigram = layout.index_of("bigram_embed");
  const int after = layout.index_of("value_embeds");
  for (int t = 0; t < static_cast<int>(layout.tensors.size()); t++) {
    if (t != bigram) order.push_back(t);
    if (t == after) order.push_back(bigram);
  }
  return order;
}

std::string config_mismatch(const Modded89Config& file, const Modded89Config& expected) {
  HeaderMismatch fields;
  for (const ConfigField& field : kConfigFields) fields.check(field.name, file.*field.member, expected.*field.member);
  return fields.text();
}

void check_format_words(const std::string& path, const int32_t* header) {
  if (header[kMagic] != kModded89ModelMagic)
    throw FileError(path, "not a 2026-07-17 model file: magic is " + std::to_string(header[kMagic]) + ", expected " +
                              std::to_string(kModded89ModelMagic));
  if (header[kVersion] != 1 && header[kVersion] != kModded89ModelVersion)
    throw FileError(path, "unsupported 2026-07-17 model file version " + std::to_string(header[kVersion]) +
                              " (supported: 1 and " + std::to_string(kModded89ModelVersion) + ")");
  if (header[kArchitecture] != kModded89ArchitectureRecord20260717)
    throw FileError(path, "unknown 2026-07-17 model architecture " + std::to_string(header[kArchitecture]) +
                              " (supported: 1 = the 2026-07-17 record's structure)");
  if (header[kDtype] != static_cast<int32_t>(TensorFileDtype::kFp32) &&
      header[kDtype] != static_cast<int32_t>(TensorFileDtype::kReference))
    throw FileError(path,
                    "unknown dtype field " + std::to_string(header[kDtype]) + " (0 = fp32, 1 = reference dtypes)");
}

Modded89AttentionState read_attention_state(const std::string& path, const int32_t* header,
                                            const Modded89Config& config) {
  if (header[kVersion] == 1) return modded89_first_attention_state(config);
  Modded89AttentionState state;
  state.short_window = header[kShortWindow];
  state.long_window = header[kLongWindow];
  if (state.short_window < 0 || state.long_window < 0 || state.short_window > kMaxWindow ||
      state.long_window > kMaxWindow)
    throw FileError(path, "attention windows " + std::to_string(state.short_window) + " and " +
                              std::to_string(state.long_window) + " tokens outside [0, 2^24]");
  const int32_t changes = header[kNumYarnChanges];
  if (changes < 0 || changes > kMaxYarnChanges)
    throw FileError(path, std::to_string(changes) + " YaRN changes outside [0, " + std::to_string(kMaxYarnChanges) +
                              "]");
  for (int i = 0; i < changes; i++) {
    const YarnChange change{header[kFirstYarnChange + 2 * i], header[kFirstYarnChange + 2 * i + 1]};
    if (change.old_blocks < 1 || change.new_blocks < 1 || change.old_blocks > kMaxWindow ||
        change.new_blocks > kMaxWindow)
      throw FileError(path, "YaRN change " + std::to_string(i) + " from " + std::to_string(change.old_blocks) +
                                " to " + std::to_string(change.new_blocks) + " blocks: windows must be in [1, 2^24]");
    state.yarn_changes.push_back(change);
  }
  return state;
}

void write_attention_state(const Modded89AttentionState& state, int32_t* header) {
  if (state.yarn_changes.size() > static_cast<size_t>(kMaxYarnChanges))
    throw std::invalid_argument("a 2026-07-17 model file holds at most " + std::to_string(kMaxYarnChanges) +
                                " YaRN changes, the model has " + std::to_string(state.yarn_changes.size()));
  header[kShortWindow] = state.short_window;
  header[kLongWindow] = state.long_window;
  header[kNumYarnChanges] = static_cast<int32_t>(state.yarn_changes.size());
  for (size_t i = 0; i < state.yarn_changes.size(); i++) {
    header[kFirstYarnChange + 2 * i] = state.yarn_changes[i].old_blocks;
    header[kFirstYarnChange + 2 * i + 1] = state.yarn_changes[i].new_blocks;
  }
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
  info.attention = read_attention_state(path, header, info.config);
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
  read_tensor_payload(in.get(), path, layout, file_order(layout), reference_dtypes(info.dtype), loaded.data());
  params.swap(loaded);
}

std::vector<float> load_modded89_model(const std::string& path, int world_size, Modded89Layout* layout_out,
                                       Modded89AttentionState* attention_out) {
  const Modded89ModelFileInfo info = read_modded89_model_header(path);
  if (attention_out != nullptr) *attention_out = info.attention;
  Modded89Layout layout = make_modded89_layout(info.config, world_size);
  std::vector<float> params;
  read_modded89_model(path, layout, params);
  if (layout_out != nullptr) *layout_out = std::move(layout);
  return params;
}

WrittenFile write_modded89_model(const std::string& path, const Modded89Layout& layout, const float* params,
                                 TensorFileDtype dtype, const Modded89AttentionState& attention) {
  int32_t header[kHeaderInts] = {};
  header[kMagic] = kModded89ModelMagic;
  header[kVersion] = kModded89ModelVersion;
  header[kArchitecture] = kModded89ArchitectureRecord20260717;
  header[kDtype] = static_cast<int32_t>(dtype);
  for (int f = 0; f < kNumConfigFields; f++) header[kFirstConfigField + f] = layout.config.*kConfigFields[f].member;
  header[kNumTensors] = static_cast<int32_t>(layout.tensors.size());
  write_attention_state(attention, header);
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  write_tensor_payload(out, layout, file_order(layout), params, reference_dtypes(dtype));
  return out.commit();
}

WrittenFile write_modded89_model(const std::string& path, const Modded89Layout& layout, const float* params,
                                 TensorFileDtype dtype) {
  return write_modded89_model(path, layout, params, dtype, modded89_first_attention_state(layout.config));
}

}  // namespace llmc
