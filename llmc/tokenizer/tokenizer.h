// GPT-2 byte-level BPE tokenizer (r50k_base): encode UTF-8 text to token ids and decode back.
// Its output equals tiktoken's `gpt2` encode_ordinary. The Gpt2Tokenizer is immutable after
// construction and safe to share between threads; each thread encodes through its own
// EncodeContext, which holds the regex match state and a cache of piece -> ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/tokenizer/bpe_vocab.h"
#include "llmc/tokenizer/pretokenizer.h"
#include "llmc/tokenizer/utf8.h"

namespace llmc {

class EncodeContext;

class Gpt2Tokenizer {
 public:
  explicit Gpt2Tokenizer(BpeVocab vocab);
  // Loads r50k_base.tiktoken, or encoder.json + vocab.bpe, from `vocab_dir` (see load_bpe_vocab_dir).
  static Gpt2Tokenizer from_directory(const std::string& vocab_dir);
  ~Gpt2Tokenizer();
  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;

  int32_t end_of_text() const { return kGpt2EndOfText; }
  int32_t vocab_size() const { return kGpt2VocabSize; }

  // Appends the ids of `text` to `out`. Special-token text such as "<|endoftext|>" is encoded as
  // ordinary text. Throws InvalidUtf8Error (with the byte offset) if `text` is not valid UTF-8;
  // `out` is then unchanged.
  void encode(EncodeContext& context, std::string_view text, std::vector<int32_t>& out) const;
  std::vector<int32_t> encode(EncodeContext& context, std::string_view text) const;
  // Same, for text the caller already validated as UTF-8 (no second check).
  void encode_valid_utf8(EncodeContext& context, std::string_view text, std::vector<int32_t>& out) const;

  // Raw bytes of the tokens (not necessarily valid UTF-8 when cut mid-character); 50256 decodes
  // to "<|endoftext|>". Throws std::out_of_range naming an id outside [0, 50257).
  std::string decode(const int32_t* ids, size_t count) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }
  std::string decode(const uint16_t* ids, size_t count) const;

 private:
  friend class EncodeContext;
  struct Tables;
  std::unique_ptr<Tables> tables_;
  void encode_piece(EncodeContext& context, std::string_view piece, std::vector<int32_t>& out) const;
};

// Per-thread encoding state: regex scratch, the piece cache and merge scratch buffers.
class EncodeContext {
 public:
  explicit EncodeContext(const Gpt2Tokenizer& tokenizer);
  ~EncodeContext();
  EncodeContext(const EncodeContext&) = delete;
  EncodeContext& operator=(const EncodeContext&) = delete;

 private:
  friend class Gpt2Tokenizer;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace llmc
