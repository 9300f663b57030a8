// The manifest of a checkpoint (PREFIX_manifest.json, see checkpoint_dir.h): written by rank 0 last,
// once every rank's files are complete, so its existence marks the checkpoint complete. It records the
// step, the number of ranks that wrote the checkpoint (what a resume on another number of ranks must
// know) and each file's name, size and XXH3-64 checksum (the one its header also stores), so a resume
// notices a missing, truncated, corrupt or swapped file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"

namespace llmc {

struct ManifestFile {
  std::string name;  // file name in the checkpoint's directory (no directory part)
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

struct CheckpointManifest {
  int64_t step = 0;
  int world_size = 1;
  std::vector<ManifestFile> files;
};

// {"format": "llmc-checkpoint", "version": 1, "step": S, "world_size": N,
//  "files": [{"name": "ckpt_000100_model.bin", "bytes": 123, "xxh3": "0123456789abcdef"}, ...]}
WrittenFile write_manifest(const std::string& path, const CheckpointManifest& manifest);  // atomic

// Throws FileError("<path>: <problem>") for a file that is missing, not JSON, or not a manifest of this
// format (wrong or missing fields, a name with a directory part, a world size outside 1..4096).
CheckpointManifest read_manifest(const std::string& path);

// The entry named `name`; throws FileError("<manifest_path>: does not list <name>").
const ManifestFile& manifest_entry(const CheckpointManifest& manifest, const std::string& manifest_path,
                                   const std::string& name);

}  // namespace llmc
