// The streaming XXH3-64 checksum (see checksum.h).
#include "llmc/base/checksum.h"

// The whole implementation comes from the header, inlined here: no shared library to link or to ship.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

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

}  // namespace llmc
