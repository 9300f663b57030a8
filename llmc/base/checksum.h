// Checksums of the files a run writes and must trust when it reads them back (model files, optimizer
// state): XXH3-64 from libxxhash (header-only use: nothing to link or ship), streamed over the bytes as
// they are written or read, so that a flipped bit or a damaged tail is caught when the file is loaded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace llmc {

class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(Checksum&&) noexcept;
  Checksum& operator=(Checksum&&) noexcept;

  void update(const void* data, size_t bytes);
  uint64_t digest() const;  // of every byte passed to update() so far

 private:
  struct State;  // libxxhash's XXH3 state, kept out of this header
  std::unique_ptr<State> state_;
};

// 16 lower-case hex digits, as manifests and error messages print a checksum.
std::string checksum_hex(uint64_t checksum);

// A file's size and checksum, as a checkpoint's manifest records them.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

// The checksum of every byte of the file, streamed. Throws FileError naming the file (a `what`, e.g. "model
// file") when it cannot be read.
FileDigest whole_file_digest(const std::string& path, const std::string& what);

}  // namespace llmc
