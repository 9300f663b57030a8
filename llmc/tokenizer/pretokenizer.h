// GPT-2's pre-tokenization: the regex that cuts text into words, numbers, punctuation runs and
// whitespace runs before BPE, run through PCRE2 with its JIT compiler. The compiled pattern is
// immutable and shared by all threads; each thread brings its own PretokenizerScratch.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace llmc {

// GPT-2's pattern as published, with \s spelled out as Unicode White_Space (what tiktoken's Rust
// regex means by \s). PCRE2 10.42's own \s (UTF+UCP) also matches U+180E MONGOLIAN VOWEL
// SEPARATOR, which stopped being White_Space in Unicode 6.3, so it would split differently.
extern const char* const kGpt2PretokenizePattern;

class PretokenizerScratch;

class Gpt2Pretokenizer {
 public:
  Gpt2Pretokenizer();  // compiles and JIT-compiles the pattern; throws on failure
  ~Gpt2Pretokenizer();
  Gpt2Pretokenizer(Gpt2Pretokenizer&&) noexcept;
  Gpt2Pretokenizer& operator=(Gpt2Pretokenizer&&) noexcept;

  // End offset of the piece that starts at `start` (< text.size()). `text` must be valid UTF-8
  // (the caller validated it) and `start` on a character boundary. Thread-safe given distinct scratch.
  size_t piece_end(PretokenizerScratch& scratch, std::string_view text, size_t start) const;

 private:
  friend class PretokenizerScratch;
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// Per-thread match state (match data and JIT stack). Not shareable between threads.
class PretokenizerScratch {
 public:
  explicit PretokenizerScratch(const Gpt2Pretokenizer& pretokenizer);
  ~PretokenizerScratch();
  PretokenizerScratch(const PretokenizerScratch&) = delete;
  PretokenizerScratch& operator=(const PretokenizerScratch&) = delete;

 private:
  friend class Gpt2Pretokenizer;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace llmc
