// Strict UTF-8 validation with an ASCII fast path: English text is mostly 8-byte ASCII words, so
// we check eight bytes at a time and only decode multi-byte sequences one by one.
#include "llmc/tokenizer/utf8.h"

#include <cstdint>
#include <cstring>

namespace llmc {

size_t first_invalid_utf8_byte(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    if (i + 8 <= size) {
      uint64_t word;
      std::memcpy(&word, bytes + i, sizeof(word));
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte (which rules out overlong forms,
    // surrogates U+D800..U+DFFF and code points above U+10FFFF), per RFC 3629's table.
    size_t length = 0;
    unsigned char second_min = 0x80, second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead == 0xE0) {
      length = 3, second_min = 0xA0;
    } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
      length = 3;
    } else if (lead == 0xED) {
      length = 3, second_max = 0x9F;
    } else if (lead == 0xF0) {
      length = 4, second_min = 0x90;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
      length = 4;
    } else if (lead == 0xF4) {
      length = 4, second_max = 0x8F;
    } else {
      return i;  // continuation byte without a lead, or a byte never valid in UTF-8
    }
    if (i + length > size) return i;
    if (bytes[i + 1] < second_min || bytes[i + 1] > second_max) return i;
    for (size_t k = 2; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
    }
    i += length;
  }
  return kValidUtf8;
}

}  // namespace llmc
