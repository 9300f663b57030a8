// Incremental UTF-8 for streaming decoded tokens: GPT-2 tokens are bytes, and one character can span
// several tokens, so bytes are held back until their character is complete. Invalid bytes become
// U+FFFD, one per maximal invalid subpart (the Unicode recommendation, what Python's
// bytes.decode("utf-8", "replace") does), so the concatenated output is always valid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace llmc {

class Utf8Stream {
 public:
  // Appends bytes and returns the text that is now complete (possibly empty).
  std::string push(std::string_view bytes);
  // Ends the stream: an incomplete sequence still held back comes out as U+FFFD.
  std::string finish();
  size_t held_back() const { return pending_.size(); }

 private:
  std::string decode(bool at_end);
  std::string pending_;
};

}  // namespace llmc
