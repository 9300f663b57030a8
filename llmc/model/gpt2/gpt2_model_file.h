// GPT-2 model files in llm.c's format, so llm.c's tools can read ours and we can read its:
// a 256 x int32 header (magic 20240326, version 3 = fp32 / 5 = bf16, maxT, V, L, NH, C, Vp) followed by
// the parameters in llm.c's order (wte, wpe, then each per-layer tensor stacked over layers, lnfw, lnfb).
// This file maps between that order and our bucketed GPT2Layout. Writing is atomic (temp + rename).
// Our files also carry an XXH3-64 checksum in header words 253..255, which llm.c never reads (it uses
// words 0..7): word 253 = the tag "XXH3", 254/255 = the low/high half of the checksum of the whole file
// taken with words 254 and 255 zero. Files without the tag (llm.c's own) load without the check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/base/checksum.h"
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/gpt2/gpt2_layout.h"

namespace llmc {

constexpr int32_t kGpt2ModelMagic = 20240326;
constexpr int32_t kGpt2ModelVersionFp32 = 3;
constexpr int32_t kGpt2ModelVersionBf16 = 5;
constexpr int kGpt2ModelHeaderInts = 256;
constexpr int kGpt2ModelChecksumTagWord = 253;
constexpr int32_t kGpt2ModelChecksumTag = 0x33485858;  // "XXH3" little-endian

enum class Gpt2FileDtype { kFp32, kBf16 };

struct Gpt2ModelFileInfo {
  GPT2Config config;
  Gpt2FileDtype dtype;
  int64_t num_parameters;  // real parameters stored in the file (Vp rows of wte included)
  bool has_checksum = false;
  uint64_t checksum = 0;   // as stored in the header (valid when has_checksum)
};

// Real parameters of a config, the count a checkpoint stores (d12: 124,475,904).
int64_t count_parameters(const GPT2Config& config);

// Reads and checks the header against the file size. Throws std::runtime_error("<path>: <problem>")
// for: unreadable file, file shorter than the header, wrong magic, unsupported version, invalid
// config, file size that does not match the config (truncated or trailing bytes), a checksum word
// that is neither absent nor tagged.
Gpt2ModelFileInfo read_gpt2_model_header(const std::string& path);

// Reads the file into `params` (resized to layout.total_size, in layout order, padding 0). The file's
// config must equal layout.config, otherwise std::runtime_error names the file and the mismatched fields.
// bf16 files are widened exactly to float. A file with a checksum is verified: a mismatch throws
// "<path>: checksum mismatch ...", and `params` is left untouched.
void read_gpt2_model_file(const std::string& path, const GPT2Layout& layout, std::vector<float>& params);

// Convenience: reads the header, builds the layout for `world_size` and loads the parameters.
std::vector<float> load_gpt2_model_file(const std::string& path, int world_size, GPT2Layout* layout_out);

// Writes `params` (layout.total_size floats in layout order) to `path` in llm.c order; bf16 rounds to
// nearest even, and the header carries the checksum. Writes `path + ".tmp"` then renames, so a failure
// leaves neither a half-written `path` nor the temp. Throws FileError naming the file and the cause.
WrittenFile write_gpt2_model_file(const std::string& path, const GPT2Layout& layout, const float* params,
                             Gpt2FileDtype dtype);

// The file's size and checksum as a checkpoint's manifest records them: the size its header implies and the
// checksum the header carries (checked against the contents when the model is read). Throws like
// read_gpt2_model_header, and FileError for a file without a checksum (a checkpoint's model file has one).
FileDigest gpt2_model_file_digest(const std::string& path);

}  // namespace llmc
