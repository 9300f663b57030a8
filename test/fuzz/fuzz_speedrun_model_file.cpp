// Fuzz target: a speedrun model file (llmc/model/modded44/speedrun_model_file.h), as --model and --resume read it:
// the header (magic, version, architecture, dtype, shape, tensor count, size), the parameters, then a
// write/read round trip in the file's dtype that must give back the same values. (This format has no
// checksum field; a checkpoint's manifest carries its checksum.)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/model/modded44/speedrun_model_file.h"
#include "test/fuzz/fuzz_support.h"

using namespace llmc;
using llmc::fuzz::finding;
using llmc::fuzz::reads_cleanly;
using llmc::fuzz::same_values;

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
