// Loading the GPT-2 vocabulary files, with every malformed line reported as "file: line N: what".
// The checks are strict (exact token count, all 256 bytes present, ids contiguous) because a wrong
// vocabulary would otherwise silently produce wrong token shards.
#include "llmc/tokenizer/bpe_vocab.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "llmc/base/file_io.h"

namespace llmc {
namespace {

std::ifstream open_or_fail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw FileError(path, std::filesystem::exists(path) ? "cannot open for reading" : "file does not exist");
  }
  return in;
}

// Standard base64 (RFC 4648 alphabet, '=' padding), as tiktoken writes token bytes.
bool decode_base64(const std::string& text, std::string& out) {
  out.clear();
  uint32_t accumulator = 0;
  int bits = 0;
  size_t padding = 0;
  for (char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') value = c - 'A';
    else if (c >= 'a' && c <= 'z') value = c - 'a' + 26;
    else if (c >= '0' && c <= '9') value = c - '0' + 52;
    else if (c == '+') value = 62;
    else if (c == '/') value = 63;
    else if (c == '=') { ++padding; continue; }
    else return false;
    if (padding != 0) return false;  // data after padding
    accumulator = (accumulator << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((accumulator >> bits) & 0xFF));
    }
  }
  return (text.size() % 4 == 0) && padding <= 2;
}

// Common checks and the byte table once token_bytes is filled.
void finish_tables(BpeVocab& vocab, const std::string& path) {
  if (static_cast<int32_t>(vocab.token_bytes.size()) != kGpt2OrdinaryTokens) {
    throw FileError(path, "expected " + std::to_string(kGpt2OrdinaryTokens) +
                              " ordinary tokens (GPT-2 r50k_base), found " +
                              std::to_string(vocab.token_bytes.size()));
  }
  vocab.byte_token.fill(-1);
  vocab.token_ids.reserve(vocab.token_bytes.size() * 2);
  for (int32_t id = 0; id < kGpt2OrdinaryTokens; ++id) {
    const std::string& bytes = vocab.token_bytes[id];
    if (bytes.empty()) throw FileError(path, "token id " + std::to_string(id) + " is missing or empty");
    if (!vocab.token_ids.emplace(bytes, id).second) {
      throw FileError(path, "token id " + std::to_string(id) + " repeats the bytes of token " +
                                std::to_string(vocab.token_ids[bytes]));
    }
    if (bytes.size() == 1) vocab.byte_token[static_cast<unsigned char>(bytes[0])] = id;
  }
  for (int b = 0; b < 256; ++b) {
    if (vocab.byte_token[b] < 0) throw FileError(path, "no token for byte " + std::to_string(b));
  }
}

}  // namespace

std::array<uint32_t, 256> gpt2_byte_to_code_point() {
  std::array<uint32_t, 256> table{};
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? b : next_extra++;
  }
  return table;
}

BpeVocab load_bpe_vocab_tiktoken(const std::string& path) {
  std::ifstream in = open_or_fail(path);
  BpeVocab vocab;
  vocab.token_bytes.assign(kGpt2OrdinaryTokens, std::string());
  std::string line, bytes;
  int64_t line_number = 0, tokens_seen = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    const std::string where = "line " + std::to_string(line_number) + ": ";
    const size_t space = line.find(' ');
    if (space == std::string::npos) throw FileError(path, where + "expected `base64 rank`");
    if (!decode_base64(line.substr(0, space), bytes) || bytes.empty()) {
      throw FileError(path, where + "token is not valid base64");
    }
    int64_t rank = -1;
    try {
      size_t used = 0;
      rank = std::stoll(line.substr(space + 1), &used);
      if (used != line.size() - space - 1) rank = -1;
    } catch (const std::exception&) {
      rank = -1;
    }
    if (rank < 0 || rank >= kGpt2OrdinaryTokens) {
      throw FileError(path, where + "rank is not an integer in [0, " + std::to_string(kGpt2OrdinaryTokens) + ")");
    }
    if (!vocab.token_bytes[rank].empty()) throw FileError(path, where + "rank " + std::to_string(rank) + " repeats");
    vocab.token_bytes[rank] = bytes;
    ++tokens_seen;
  }
  if (in.bad()) throw FileError(path, "read error");
  if (tokens_seen != kGpt2OrdinaryTokens) {
    throw FileError(path, "expected " + std::to_string(kGpt2OrdinaryTokens) + " tokens, found " +
                              std::to_string(tokens_seen));
  }
  finish_tables(vocab, path);
  // tiktoken merges any adjacent pair whose concatenation is a token, ranked by that token's id.
  for (int32_t id = 0; id < kGpt2OrdinaryTokens; ++id) {
    const std::string& whole = vocab.token_bytes[id];
    for (size_t split = 1; split < whole.size(); ++split) {
      auto left = vocab.token_ids.find(whole.substr(0, split));
      auto right = vocab.token_ids.find(whole.substr(split));
      if (left != vocab.token_ids.end() && right != vocab.token_ids.end()) {
        vocab.merges.push_back(BpeMerge{left->second, right->second, id, id});
      }
    }
  }
  return vocab;
}

namespace {

// GPT-2's vocabulary files spell each byte as a printable stand-in code point; this maps them back.
class StandInAlphabet {
 public:
  StandInAlphabet() {
    const std::array<uint32_t, 256> byte_to_cp = gpt2_byte_to_code_point();
    for (int b = 0; b < 256; ++b) cp_to_byte_[byte_to_cp[b]] = static_cast<char>(b);
  }
  // The raw bytes of `text`; false when it is empty or has a code point outside the alphabet.
  bool to_bytes(const std::string& text, std::string& out) const {
    // `text` is valid UTF-8 (nlohmann-json checked it, or it came from vocab.bpe and is checked
    // by the lookup that follows); decode code points and map each back to its byte.
    out.clear();
    for (size_t i = 0; i < text.size();) {
      const unsigned char lead = static_cast<unsigned char>(text[i]);
      uint32_t cp;
      size_t length;
      if (lead < 0x80) cp = lead, length = 1;
      else if ((lead & 0xE0) == 0xC0) cp = lead & 0x1F, length = 2;
      else if ((lead & 0xF0) == 0xE0) cp = lead & 0x0F, length = 3;
      else cp = lead & 0x07, length = 4;
      if (i + length > text.size()) return false;
      for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
      auto found = cp_to_byte_.find(cp);
      if (found == cp_to_byte_.end()) return false;
      out.push_back(found->second);
      i += length;
    }
    return !out.empty();
  }

 private:
  std::unordered_map<uint32_t, char> cp_to_byte_;
};

// encoder.json: {token spelled in stand-ins: id}, plus <|endoftext|>.
void read_encoder_json(const std::string& encoder_path, const StandInAlphabet& alphabet, BpeVocab& vocab) {
  std::ifstream in = open_or_fail(encoder_path);
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(encoder_path, std::string("not valid JSON: ") + e.what());
  }
  if (!encoder.is_object()) throw FileError(encoder_path, "expected a JSON object of token -> id");
  std::string bytes;
  bool saw_end_of_text = false;
  for (const auto& [key, value] : encoder.items()) {
    if (!value.is_number_integer()) throw FileError(encoder_path, "id of \"" + key + "\" is not an integer");
    const int64_t id = value.get<int64_t>();
    if (key == "<|endoftext|>") {
      if (id != kGpt2EndOfText) throw FileError(encoder_path, "<|endoftext|> has id " + std::to_string(id));
      saw_end_of_text = true;
      continue;
    }
    if (id < 0 || id >= kGpt2OrdinaryTokens) {
      throw FileError(encoder_path, "id " + std::to_string(id) + " of \"" + key + "\" is out of range");
    }
    if (!alphabet.to_bytes(key, bytes)) {
      throw FileError(encoder_path, "\"" + key + "\" is not in GPT-2's byte alphabet");
    }
    if (!vocab.token_bytes[id].empty()) throw FileError(encoder_path, "id " + std::to_string(id) + " repeats");
    vocab.token_bytes[id] = bytes;
  }
  if (!saw_end_of_text) throw FileError(encoder_path, "no <|endoftext|> entry");
}

// vocab.bpe: one merge per line, "left right" in stand-ins, in rank order.
void read_bpe_merges(const std::string& bpe_path, const std::string& encoder_path, const StandInAlphabet& alphabet,
                     BpeVocab& vocab) {
  std::ifstream in = open_or_fail(bpe_path);
  std::string line, left_bytes, right_bytes;
  int64_t line_number = 0;
  int32_t rank = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const std::string where = "line " + std::to_string(line_number) + ": ";
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      throw FileError(bpe_path, where + "expected two symbols separated by one space");
    }
    if (!alphabet.to_bytes(line.substr(0, space), left_bytes) ||
        !alphabet.to_bytes(line.substr(space + 1), right_bytes)) {
      throw FileError(bpe_path, where + "symbol is not in GPT-2's byte alphabet");
    }
    auto left = vocab.token_ids.find(left_bytes);
    auto right = vocab.token_ids.find(right_bytes);
    auto merged = vocab.token_ids.find(left_bytes + right_bytes);
    if (left == vocab.token_ids.end() || right == vocab.token_ids.end() ||
        merged == vocab.token_ids.end()) {
      throw FileError(bpe_path, where + "merge uses or makes a symbol that " + encoder_path + " lacks");
    }
    vocab.merges.push_back(BpeMerge{left->second, right->second, merged->second, rank++});
  }
  if (in.bad()) throw FileError(bpe_path, "read error");
  if (rank != kGpt2OrdinaryTokens - 256) {
    throw FileError(bpe_path, "expected " + std::to_string(kGpt2OrdinaryTokens - 256) + " merges, found " +
                                  std::to_string(rank));
  }
}

}  // namespace

BpeVocab load_bpe_vocab_encoder_json(const std::string& encoder_path, const std::string& bpe_path) {
  const StandInAlphabet alphabet;
  BpeVocab vocab;
  vocab.token_bytes.assign(kGpt2OrdinaryTokens, std::string());
  read_encoder_json(encoder_path, alphabet, vocab);
  finish_tables(vocab, encoder_path);
  read_bpe_merges(bpe_path, encoder_path, alphabet, vocab);
  return vocab;
}

BpeVocab load_bpe_vocab_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path base(dir);
  if (!fs::is_directory(base)) {
    throw FileError(dir, "vocabulary directory does not exist (want r50k_base.tiktoken"
                                    " or encoder.json + vocab.bpe; data/download_gpt2_vocab.sh fetches them)");
  }
  if (fs::exists(base / "r50k_base.tiktoken")) {
    return load_bpe_vocab_tiktoken((base / "r50k_base.tiktoken").string());
  }
  if (fs::exists(base / "encoder.json") && fs::exists(base / "vocab.bpe")) {
    return load_bpe_vocab_encoder_json((base / "encoder.json").string(), (base / "vocab.bpe").string());
  }
  throw FileError(dir, "has neither r50k_base.tiktoken nor encoder.json + vocab.bpe"
                                  " (data/download_gpt2_vocab.sh fetches them)");
}

std::string default_vocab_dir() {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error) return "../shared/data/gpt2";
  return (exe.parent_path() / ".." / "shared" / "data" / "gpt2").lexically_normal().string();
}

}  // namespace llmc
