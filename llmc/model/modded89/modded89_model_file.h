// Model files of the 2026-07-17 record's family (docs/model.md#model-files-of-the-2026-07-17-family): a 256 x
// int32 header with its own magic, version and architecture field and the config, then every tensor of
// Modded89Layout in the layout's order (embeddings bucket, layers 0..10, head bucket; world-size independent)
// in fp32 or in the record's dtypes (bf16 tables, matrices and gates; fp32 scalars and lambdas). Version 2 adds the
// model's attention state (windows, YaRN changes). Writing is atomic; every bad file is a one-line FileError naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/family/tensor_file.h"
#include "llmc/model/modded89/modded89_attention_state.h"
#include "llmc/model/modded89/modded89_layout.h"

namespace llmc {

constexpr int32_t kModded89ModelMagic = 20260717;  // the record's date (#44 files: 20251031, GPT-2: 20240326)
// 2: the attention state after the config (version 1 files, which have none, are read with the record's first).
constexpr int32_t kModded89ModelVersion = 2;
// Architecture field: which structure the tensors follow. 1 = modded89_structure(), the record of
// 2026-07-17 at f411b3d3; a later structure gets a new value, not a silent reinterpretation.
constexpr int32_t kModded89ArchitectureRecord20260717 = 1;

struct Modded89ModelFileInfo {
  Modded89Config config;
  TensorFileDtype dtype = TensorFileDtype::kFp32;
  int64_t num_parameters = 0;  // real parameters stored in the file
  int64_t data_bytes = 0;      // bytes after the header
  Modded89AttentionState attention;  // what the model attended with when written
};

// Reads and checks the header against the file size. Throws FileError("<path>: <problem>") for: an
// unreadable file, a file shorter than the header, wrong magic, unsupported version, architecture or dtype,
// an invalid config, a tensor count that does not match the structure, a size that does not match the
// header (truncated or trailing bytes), an attention state out of range (windows, more than 64 YaRN changes).
Modded89ModelFileInfo read_modded89_model_header(const std::string& path);

// Reads the file into `params` (resized to layout.total_size, layout order, padding 0); the file's config
// must equal layout.config (FileError naming the mismatched fields otherwise). On failure `params` is
// untouched.
void read_modded89_model(const std::string& path, const Modded89Layout& layout, std::vector<float>& params);

// Reads the header, builds the layout for `world_size` and loads the parameters (and the attention state).
std::vector<float> load_modded89_model(const std::string& path, int world_size, Modded89Layout* layout_out,
                                       Modded89AttentionState* attention_out = nullptr);

// Writes `params` (layout.total_size floats in layout order) to `path`; bf16 tensors round to nearest even
// with TensorFileDtype::kReference, and the attention state (the record's first without one; more than 64
// YaRN changes: std::invalid_argument). Atomic (path.tmp, then rename). Returns the file's size and checksum.
WrittenFile write_modded89_model(const std::string& path, const Modded89Layout& layout, const float* params,
                                 TensorFileDtype dtype, const Modded89AttentionState& attention);
WrittenFile write_modded89_model(const std::string& path, const Modded89Layout& layout, const float* params,
                                 TensorFileDtype dtype);

}  // namespace llmc
