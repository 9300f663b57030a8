// Fuzz target: a checkpoint manifest (llmc/checkpoint/manifest.h), the JSON a resume trusts to say which files
// make a complete checkpoint: read it, and a write/read round trip must give back the same manifest.
#include <cstdint>

#include "llmc/checkpoint/manifest.h"
#include "test/fuzz/fuzz_support.h"

using namespace llmc;
using llmc::fuzz::finding;
using llmc::fuzz::reads_cleanly;

namespace {
bool same_manifest(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.step != b.step || a.world_size != b.world_size || a.files.size() != b.files.size()) return false;
  for (size_t i = 0; i < a.files.size(); i++)
    if (a.files[i].name != b.files[i].name || a.files[i].bytes != b.files[i].bytes ||
        a.files[i].checksum != b.files[i].checksum)
      return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile input(data, size, "_manifest.json");
  CheckpointManifest manifest;
  if (!reads_cleanly([&] { manifest = read_manifest(input.path()); }, input.path())) return 0;
  write_manifest(input.copy(), manifest);
  if (!same_manifest(read_manifest(input.copy()), manifest)) finding("a manifest round trip changed it");
  return 0;
}
