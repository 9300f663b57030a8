// Token shard files, the format llm.c and modded-nanogpt use: a 256 x int32 header (magic, version,
// token count) followed by the tokens as uint16. Writing is atomic (temp file + rename); reading
// validates the header against the file size so that a truncated or foreign file is caught early.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = int64_t{kShardHeaderInts} * int64_t{sizeof(int32_t)};
// The header stores the token count as int32, so a shard holds at most this many tokens (~4 GB).
constexpr int64_t kShardMaxTokens = INT32_MAX;

struct ShardInfo {
  std::string path;
  int64_t num_tokens;
};

// Byte offset of token `token_index` inside a shard file. Always 64-bit: shards pass 2 GB.
constexpr int64_t shard_token_byte_offset(int64_t token_index) {
  return kShardHeaderBytes + token_index * int64_t{sizeof(uint16_t)};
}

// Writes header + uint16 tokens to `path + ".tmp"`, fsyncs/closes, then renames to `path`.
// Throws std::runtime_error naming the file on any failure (and removes the temp file).
void write_shard(const std::string& path, const uint16_t* tokens, int64_t num_tokens);
inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard(path, tokens.data(), static_cast<int64_t>(tokens.size()));
}

// Reads and validates the header (magic, version, token count vs file size, 64-bit sizes).
// Throws std::runtime_error("<path>: <what is wrong>") for: missing/unreadable file, file shorter
// than the header, wrong magic, wrong version, count that does not match the file size.
ShardInfo read_shard_header(const std::string& path);

// The whole shard, header validated first.
std::vector<uint16_t> read_shard_tokens(const std::string& path);

// Tokens [first, first + count) of a shard, header validated first; throws if out of range.
std::vector<uint16_t> read_shard_token_range(const std::string& path, int64_t first, int64_t count);

// Paths matching a shell glob pattern, sorted; throws std::runtime_error when nothing matches.
std::vector<std::string> glob_shards(const std::string& pattern);

}  // namespace llmc
