// The GPT-2 byte-level BPE vocabulary (r50k_base) loaded from either of its published forms:
// OpenAI's `encoder.json` + `vocab.bpe`, or tiktoken's `r50k_base.tiktoken`. Both become the same
// in-memory tables: token bytes by id, and the merge rules (left id, right id) -> (rank, merged id).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmc {

constexpr int32_t kGpt2OrdinaryTokens = 50256;  // ids 0..50255 are byte strings
constexpr int32_t kGpt2EndOfText = 50256;       // the one special token, <|endoftext|>
constexpr int32_t kGpt2VocabSize = 50257;

struct BpeMerge {
  int32_t left;    // token id of the left part
  int32_t right;   // token id of the right part
  int32_t merged;  // token id of left bytes + right bytes
  int32_t rank;    // lower merges first
};

struct BpeVocab {
  std::vector<std::string> token_bytes;               // id -> raw bytes, ordinary tokens only
  std::array<int32_t, 256> byte_token{};               // byte value -> id of its one-byte token
  std::unordered_map<std::string, int32_t> token_ids;  // raw bytes -> id, ordinary tokens only
  std::vector<BpeMerge> merges;
};

// tiktoken format: one `base64(bytes) rank` per line. Ranks are the ids; a pair merges with the
// rank of its concatenation (tiktoken's rule), so merges are derived from every split of a token.
BpeVocab load_bpe_vocab_tiktoken(const std::string& tiktoken_path);

// OpenAI format: encoder.json maps GPT-2's printable stand-in strings to ids; vocab.bpe lists the
// merges in rank order after a `#version` line.
BpeVocab load_bpe_vocab_encoder_json(const std::string& encoder_json_path,
                                     const std::string& vocab_bpe_path);

// r50k_base.tiktoken if the directory has it, else encoder.json + vocab.bpe. Throws
// std::runtime_error naming the directory and the files looked for when neither is there.
BpeVocab load_bpe_vocab_dir(const std::string& dir);

// Where the programs look for the vocabulary by default (their --vocab): ../shared/data/gpt2 next to
// the repository the running binary sits in (user binaries live in the repository root).
std::string default_vocab_dir();

// GPT-2's reversible byte <-> printable code point mapping (bytes that are not printable
// characters get code points 256 and up), as used by encoder.json and vocab.bpe.
std::array<uint32_t, 256> gpt2_byte_to_code_point();

}  // namespace llmc
