// Fuzz target: a speedrun model file (llmc/model/speedrun_model_file.h), as --model and --resume read it:
// the header (magic, version, architecture, dtype, shape, tensor count, size), the parameters, then a
// write/read round trip in the file's dtype that must give back the same values. (This format has no
// checksum field; a checkpoint's manifest carries its checksum.)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/model/speedrun_model_file.h"
#include "test/fuzz/fuzz_support.h"

using namespace llmc;
using llmc::fuzz::finding;
using llmc::fuzz::reads_cleanly;

namespace {
// Bitwise equal, except that any NaN equals any NaN (bf16 rounding may quiet a signalling NaN).
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile input(data, size, "_speedrun.bin");
  SpeedrunModelFileInfo info;
  SpeedrunLayout layout;
  std::vector<float> params;
  const bool loaded = reads_cleanly(
      [&] {
        info = read_speedrun_model_header(input.path());
        params = load_speedrun_model(input.path(), /*world_size=*/3, &layout);
      },
      input.path());
  if (!loaded) return 0;
  write_speedrun_model(input.copy(), layout, params.data(), info.dtype);
  std::vector<float> again;
  read_speedrun_model(input.copy(), layout, again);
  if (!same_values(params, again)) finding("a speedrun model file round trip changed the parameters");
  return 0;
}
