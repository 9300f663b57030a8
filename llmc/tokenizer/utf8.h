// Strict UTF-8 validation (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
// The tokenizer validates each text once up front so that the regex engine can skip its own check,
// and so that a bad input is reported with the byte offset of its first invalid byte.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace llmc {

// Value returned by first_invalid_utf8_byte when the text is valid.
constexpr size_t kValidUtf8 = static_cast<size_t>(-1);

// Byte offset of the first byte that does not start or continue a valid UTF-8 sequence
// (for a truncated sequence: the offset of its lead byte), or kValidUtf8.
size_t first_invalid_utf8_byte(std::string_view text);

// Thrown by the tokenizer on invalid UTF-8; callers add the file (and line) to the message.
class InvalidUtf8Error : public std::runtime_error {
 public:
  explicit InvalidUtf8Error(size_t byte_offset)
      : std::runtime_error("invalid UTF-8 at byte offset " + std::to_string(byte_offset)),
        byte_offset_(byte_offset) {}
  size_t byte_offset() const { return byte_offset_; }

 private:
  size_t byte_offset_;
};

}  // namespace llmc
