// The streaming XXH3-64 checksum (see checksum.h).
#include "llmc/base/checksum.h"

// The whole implementation comes from the header, inlined here: no shared library to link or to ship.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>
#include <vector>

#include "llmc/base/file_io.h"

namespace llmc {

struct Checksum::State {
  XXH3_state_t xxh3;
};

Checksum::Checksum() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->xxh3); }

Checksum::~Checksum() = default;
Checksum::Checksum(Checksum&&) noexcept = default;
Checksum& Checksum::operator=(Checksum&&) noexcept = default;

void Checksum::update(const void* data, size_t bytes) {
  if (bytes > 0) XXH3_64bits_update(&state_->xxh3, data, bytes);
}

uint64_t Checksum::digest() const { return XXH3_64bits_digest(&state_->xxh3); }

std::string checksum_hex(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

FileDigest whole_file_digest(const std::string& path, const std::string& what) {
  const FileHandle in = open_file(path, "rb", what);
  Checksum checksum;
  std::vector<char> chunk(size_t{1} << 20);
  FileDigest digest;
  for (size_t got; (got = std::fread(chunk.data(), 1, chunk.size(), in.get())) > 0; digest.bytes += got)
    checksum.update(chunk.data(), got);
  if (std::ferror(in.get())) throw_errno_file_error(path, "read failed");
  digest.checksum = checksum.digest();
  return digest;
}

}  // namespace llmc
