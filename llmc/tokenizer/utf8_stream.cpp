// Incremental UTF-8 decoding with replacement (see utf8_stream.h). The well-formed byte sequences are
// those of the Unicode standard's table 3-7, as in utf8.cpp's validator.
#include "llmc/tokenizer/utf8_stream.h"

#include <cstdint>

namespace llmc {

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the sequence a lead byte starts, or 0 when it cannot start one (continuation bytes,
// C0/C1 which could only be overlong, F5..FF beyond U+10FFFF).
int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `byte` may follow at position `index` (1..3) of a sequence led by `lead`: the second byte's
// range excludes overlong forms (E0, F0), surrogates (ED) and code points above U+10FFFF (F4).
bool valid_continuation(uint8_t lead, int index, uint8_t byte) {
  uint8_t low = 0x80, high = 0xBF;
  if (index == 1) {
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  }
  return byte >= low && byte <= high;
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  return decode(/*at_end=*/false);
}

std::string Utf8Stream::finish() { return decode(/*at_end=*/true); }

std::string Utf8Stream::decode(bool at_end) {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const uint8_t lead = static_cast<uint8_t>(pending_[i]);
    const int length = sequence_length(lead);
    if (length == 0) {  // a byte that starts nothing is a maximal subpart by itself
      out += kReplacement;
      i++;
      continue;
    }
    int valid = 1;  // bytes of the sequence seen and valid so far
    while (valid < length && i + valid < pending_.size() &&
           valid_continuation(lead, valid, static_cast<uint8_t>(pending_[i + valid])))
      valid++;
    if (valid == length) {
      out.append(pending_, i, length);
    } else if (i + valid == pending_.size() && !at_end) {
      break;  // incomplete but still possible: wait for the next bytes
    } else {
      out += kReplacement;  // the valid prefix is one maximal subpart; decoding resumes after it
    }
    i += valid;
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace llmc
