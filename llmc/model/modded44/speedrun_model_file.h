// Model files of the speedrun family (docs/speedrun_model.md "Model file"): a 256 x int32 header in
// llm.c's style with its own magic and version and an architecture field, then every tensor in the
// reference's order (embed, ve0..2, smear_gate, per block qkvo, attn_gate, fc, proj, head, scalars) in
// either fp32 or the reference's dtypes (bf16 tables, head and gates; fp32 matrices and scalars).
// This file maps between that order and the bucketed SpeedrunLayout. Writing is atomic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/model/modded44/speedrun_layout.h"

namespace llmc {

constexpr int32_t kSpeedrunModelMagic = 20251031;  // the record's date; GPT-2 files have 20240326
constexpr int32_t kSpeedrunModelVersion = 1;
// Architecture field: which block structure the tensors follow. 1 = modded-nanogpt's record of
// 2025-10-31 (speedrun_structure(L)); a later structure gets a new value, not a silent reinterpretation.
constexpr int32_t kSpeedrunArchitectureRecord20251031 = 1;

enum class SpeedrunFileDtype : int32_t {
  kFp32 = 0,       // every tensor fp32
  kReference = 1,  // each tensor in its reference dtype (TensorView::reference_dtype)
};

struct SpeedrunModelFileInfo {
  SpeedrunConfig config;
  SpeedrunFileDtype dtype;
  int64_t num_parameters;  // real parameters stored in the file
  int64_t data_bytes;      // bytes after the header
};

// Reads and checks the header against the file size. Throws FileError("<path>: <problem>") for: an
// unreadable file, a file shorter than the header, wrong magic, unsupported version, architecture or
// dtype, an invalid config, a size that does not match the header (truncated or trailing bytes).
SpeedrunModelFileInfo read_speedrun_model_header(const std::string& path);

// Reads the file into `params` (resized to layout.total_size, in layout order, padding 0); the file's
// config must equal layout.config (FileError naming the mismatched fields otherwise). bf16 values are
// widened exactly. On failure `params` is untouched.
void read_speedrun_model(const std::string& path, const SpeedrunLayout& layout, std::vector<float>& params);

// Reads the header, builds the layout for `world_size` and loads the parameters.
std::vector<float> load_speedrun_model(const std::string& path, int world_size, SpeedrunLayout* layout_out);

// Writes `params` (layout.total_size floats in layout order) to `path` in the file order; bf16 tensors
// round to nearest even. Writes `path + ".tmp"` then renames: a failure leaves no half-written file.
// Returns the file's size and checksum (for a checkpoint's manifest: this format has no checksum field).
WrittenFile write_speedrun_model(const std::string& path, const SpeedrunLayout& layout, const float* params,
                                 SpeedrunFileDtype dtype);

}  // namespace llmc
