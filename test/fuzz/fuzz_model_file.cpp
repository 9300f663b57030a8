// Fuzz target: an llm.c model file (llmc/model/gpt2/gpt2_model_file.h), as --model and --resume read it: the header
// (checked against the file size and, when tagged, the checksum), the parameters, then a write/read round
// trip in the file's precision that must give back the same values. A tagged input is read twice: as it
// is, and with its checksum recomputed, so that mutations also reach what lies behind the checksum check.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/base/checksum.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "test/fuzz/fuzz_support.h"

using namespace llmc;
using llmc::fuzz::finding;
using llmc::fuzz::reads_cleanly;
using llmc::fuzz::same_values;

namespace {
// The input with header words 254, 255 set to the XXH3-64 of the file with them zero (as the writer does).
std::string with_repaired_checksum(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t at = (kGpt2ModelChecksumTagWord + 1) * sizeof(int32_t);
  std::memset(&bytes[at], 0, sizeof(uint64_t));
  Checksum checksum;
  checksum.update(bytes.data(), bytes.size());
  const uint64_t digest = checksum.digest();
  std::memcpy(&bytes[at], &digest, sizeof digest);
  return bytes;
}

void read_and_round_trip(const fuzz::InputFile& input) {
  Gpt2ModelFileInfo info;
  GPT2Layout layout;
  std::vector<float> params;
  const bool loaded = reads_cleanly(
      [&] {
        info = read_gpt2_model_header(input.path());
        params = load_gpt2_model_file(input.path(), /*world_size=*/3, &layout);
      },
      input.path());
  if (!loaded) return;
  write_gpt2_model_file(input.copy(), layout, params.data(), info.dtype);
  std::vector<float> again;
  read_gpt2_model_file(input.copy(), layout, again);
  if (!same_values(params, again)) finding("a model file round trip changed the parameters");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  read_and_round_trip(fuzz::InputFile(data, size, "_model.bin"));
  int32_t tag = 0;
  if (size < kGpt2ModelHeaderInts * sizeof(int32_t)) return 0;
  std::memcpy(&tag, data + kGpt2ModelChecksumTagWord * sizeof(int32_t), sizeof tag);
  if (tag != kGpt2ModelChecksumTag) return 0;
  const std::string repaired = with_repaired_checksum(data, size);
  const auto* repaired_bytes = reinterpret_cast<const uint8_t*>(repaired.data());
  read_and_round_trip(fuzz::InputFile(repaired_bytes, repaired.size(), "_model.bin"));
  return 0;
}
