// GPT-2 model checkpoint files in llm.c's format, so llm.c's tools can read ours and we can read its:
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
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/gpt2/gpt2_layout.h"

namespace llmc {

constexpr int32_t kCheckpointMagic = 20240326;
constexpr int32_t kCheckpointVersionFp32 = 3;
constexpr int32_t kCheckpointVersionBf16 = 5;
constexpr int kCheckpointHeaderInts = 256;
constexpr int kCheckpointChecksumTagWord = 253;
constexpr int32_t kCheckpointChecksumTag = 0x33485858;  // "XXH3" little-endian

enum class CheckpointDtype { kFp32, kBf16 };

struct CheckpointInfo {
  GPT2Config config;
  CheckpointDtype dtype;
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
CheckpointInfo read_checkpoint_header(const std::string& path);

// Reads the file into `params` (resized to layout.total_size, in layout order, padding 0). The file's
// config must equal layout.config, otherwise std::runtime_error names the file and the mismatched fields.
// bf16 files are widened exactly to float. A file with a checksum is verified: a mismatch throws
// "<path>: checksum mismatch ...", and `params` is left untouched.
void read_checkpoint(const std::string& path, const GPT2Layout& layout, std::vector<float>& params);

// Convenience: reads the header, builds the layout for `world_size` and loads the parameters.
std::vector<float> load_checkpoint(const std::string& path, int world_size, GPT2Layout* layout_out);

// Writes `params` (layout.total_size floats in layout order) to `path` in llm.c order; bf16 rounds to
// nearest even, and the header carries the checksum. Writes `path + ".tmp"` then renames, so a failure
// leaves neither a half-written `path` nor the temp. Throws FileError naming the file and the cause.
WrittenFile write_checkpoint(const std::string& path, const GPT2Layout& layout, const float* params,
                             CheckpointDtype dtype);

}  // namespace llmc
