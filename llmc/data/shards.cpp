// Token shard files: atomic writing, validated reading, globbing. 64-bit file offsets (fseeko/fstat)
// so shards over 2 GB work, and every system call checked with the file in the message.
// The format is little-endian on disk; we only support little-endian hosts (x86-64, ARM64).
#include "llmc/data/shards.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "llmc/base/atomic_file.h"
#include "llmc/base/file_io.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shard format is little-endian");

namespace llmc {
namespace {

// The words of the shard header that are used (the rest are zero).
enum HeaderField { kMagic, kVersion, kTokenCount };

// Reads exactly `size` bytes at `offset` (fseeko/fread: 64-bit offsets, and fread loops over short reads).
void read_exact(std::FILE* file, const std::string& path, void* buffer, int64_t size, int64_t offset) {
  if (::fseeko(file, static_cast<off_t>(offset), SEEK_SET) != 0)
    throw_errno_file_error(path, "cannot seek to byte offset " + std::to_string(offset));
  const int64_t got = static_cast<int64_t>(std::fread(buffer, 1, static_cast<size_t>(size), file));
  if (got == size) return;
  const std::string where = "byte offset " + std::to_string(offset + got);
  if (std::ferror(file)) throw_errno_file_error(path, "read failed at " + where);
  throw FileError(path, "unexpected end of file at " + where + " (file shrank while being read?)");
}

// Validates an already opened shard and returns its token count.
int64_t validate_header(std::FILE* file, const std::string& path) {
  struct stat file_status {};
  if (::fstat(fileno(file), &file_status) != 0) throw_errno_file_error(path, "fstat failed");
  if (!S_ISREG(file_status.st_mode)) throw FileError(path, "not a regular file");
  const int64_t file_bytes = static_cast<int64_t>(file_status.st_size);
  if (file_bytes < kShardHeaderBytes) {
    throw FileError(path, "file is shorter than the " + std::to_string(kShardHeaderBytes) + "-byte shard header (" +
                              std::to_string(file_bytes) + " bytes)");
  }
  int32_t header[kShardHeaderInts];
  read_exact(file, path, header, kShardHeaderBytes, 0);
  if (header[kMagic] != kShardMagic) {
    throw FileError(path, "wrong magic number " + std::to_string(header[kMagic]) + " (expected " + std::to_string(kShardMagic) +
                              "); not a token shard");
  }
  if (header[kVersion] != kShardVersion) {
    throw FileError(path, "unsupported shard version " + std::to_string(header[kVersion]) + " (expected " +
                              std::to_string(kShardVersion) + ", uint16 tokens)");
  }
  const int64_t num_tokens = header[kTokenCount];
  if (num_tokens < 0) throw FileError(path, "negative token count " + std::to_string(num_tokens) + " in header");
  const int64_t expected_bytes = shard_token_byte_offset(num_tokens);
  if (file_bytes < expected_bytes) {
    throw FileError(path, "truncated: header says " + std::to_string(num_tokens) + " tokens (" +
                              std::to_string(expected_bytes) + " bytes) but the file has " + std::to_string(file_bytes) +
                              " bytes");
  }
  if (file_bytes > expected_bytes) {
    throw FileError(path, "token count mismatch: header says " + std::to_string(num_tokens) + " tokens (" +
                              std::to_string(expected_bytes) + " bytes) but the file has " + std::to_string(file_bytes) +
                              " bytes");
  }
  return num_tokens;
}

}  // namespace

void write_shard(const std::string& path, const uint16_t* tokens, int64_t num_tokens) {
  if (num_tokens < 0 || num_tokens > kShardMaxTokens) {
    throw FileError(path, "cannot write " + std::to_string(num_tokens) + " tokens: a shard holds 0.." +
                              std::to_string(kShardMaxTokens) + " tokens (the header count is int32)");
  }
  if (num_tokens > 0 && tokens == nullptr) throw FileError(path, "write_shard given a null token pointer");
  int32_t header[kShardHeaderInts] = {};
  header[kMagic] = kShardMagic;
  header[kVersion] = kShardVersion;
  header[kTokenCount] = static_cast<int32_t>(num_tokens);
  AtomicFileWriter out(path);
  out.write(header, kShardHeaderBytes);
  out.write(tokens, static_cast<size_t>(num_tokens) * sizeof(uint16_t));
  out.commit();
}

ShardInfo read_shard_header(const std::string& path) {
  const FileHandle file = open_file(path, "rb", "shard");
  return ShardInfo{path, validate_header(file.get(), path)};
}

std::vector<uint16_t> read_shard_tokens(const std::string& path) {
  const FileHandle file = open_file(path, "rb", "shard");
  const int64_t num_tokens = validate_header(file.get(), path);
  std::vector<uint16_t> tokens(static_cast<size_t>(num_tokens));
  read_exact(file.get(), path, tokens.data(), num_tokens * int64_t{sizeof(uint16_t)}, kShardHeaderBytes);
  return tokens;
}

std::vector<uint16_t> read_shard_token_range(const std::string& path, int64_t first, int64_t count) {
  const FileHandle file = open_file(path, "rb", "shard");
  const int64_t num_tokens = validate_header(file.get(), path);
  if (first < 0 || count < 0 || first > num_tokens || count > num_tokens - first) {
    throw FileError(path, "token range of " + std::to_string(count) + " tokens from index " + std::to_string(first) +
                              " is outside the shard's " + std::to_string(num_tokens) + " tokens");
  }
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  read_exact(file.get(), path, tokens.data(), count * int64_t{sizeof(uint16_t)}, shard_token_byte_offset(first));
  return tokens;
}

std::vector<std::string> glob_shards(const std::string& pattern) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  const int glob_errno = errno;  // globfree below may change errno
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) throw FileError(pattern, "no files match this shard pattern");
  if (rc == GLOB_ABORTED) {
    if (glob_errno == ENOENT) throw FileError(pattern, "no files match this shard pattern (directory does not exist)");
    throw FileError(pattern, "glob could not read a directory: " + std::string(std::strerror(glob_errno)));
  }
  if (rc != 0) throw FileError(pattern, "glob failed with code " + std::to_string(rc));
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace llmc
