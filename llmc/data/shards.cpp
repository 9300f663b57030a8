// Token shard files: atomic writing, validated reading, globbing. POSIX I/O with 64-bit offsets
// (pread/fstat) so shards over 2 GB work, and every system call checked with the file in the message.
// The format is little-endian on disk; we only support little-endian hosts (x86-64, ARM64).
#include "llmc/data/shards.h"

#include "llmc/atomic_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shard format is little-endian");

namespace llmc {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string errno_text(const char* call) {
  return std::string(call) + " failed: " + std::strerror(errno);
}

// Closes the descriptor on every path out of a function.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int open_for_reading(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) fail(path, "file does not exist");
    fail(path, "cannot open for reading: " + errno_text("open"));
  }
  return fd;
}

// pread until `size` bytes arrived; a single pread may return less (and at most ~2 GB on Linux).
void read_exact(int fd, const std::string& path, void* buffer, int64_t size, int64_t offset) {
  auto* out = static_cast<char*>(buffer);
  int64_t done = 0;
  while (done < size) {
    ssize_t got = ::pread(fd, out + done, static_cast<size_t>(size - done), static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(path, errno_text("pread") + " at byte offset " + std::to_string(offset + done));
    }
    if (got == 0) {
      fail(path, "unexpected end of file at byte offset " + std::to_string(offset + done) +
                     " (file shrank while being read?)");
    }
    done += got;
  }
}

// Validates an already opened shard and returns its token count.
int64_t validate_header(int fd, const std::string& path) {
  struct stat file_status {};
  if (::fstat(fd, &file_status) != 0) fail(path, errno_text("fstat"));
  if (!S_ISREG(file_status.st_mode)) fail(path, "not a regular file");
  const int64_t file_bytes = static_cast<int64_t>(file_status.st_size);
  if (file_bytes < kShardHeaderBytes) {
    fail(path, "file is shorter than the " + std::to_string(kShardHeaderBytes) + "-byte shard header (" +
                   std::to_string(file_bytes) + " bytes)");
  }
  int32_t header[kShardHeaderInts];
  read_exact(fd, path, header, kShardHeaderBytes, 0);
  if (header[0] != kShardMagic) {
    fail(path, "wrong magic number " + std::to_string(header[0]) + " (expected " + std::to_string(kShardMagic) +
                   "); not a token shard");
  }
  if (header[1] != kShardVersion) {
    fail(path, "unsupported shard version " + std::to_string(header[1]) + " (expected " +
                   std::to_string(kShardVersion) + ", uint16 tokens)");
  }
  const int64_t num_tokens = header[2];
  if (num_tokens < 0) fail(path, "negative token count " + std::to_string(num_tokens) + " in header");
  const int64_t expected_bytes = shard_token_byte_offset(num_tokens);
  if (file_bytes < expected_bytes) {
    fail(path, "truncated: header says " + std::to_string(num_tokens) + " tokens (" +
                   std::to_string(expected_bytes) + " bytes) but the file has " + std::to_string(file_bytes) +
                   " bytes");
  }
  if (file_bytes > expected_bytes) {
    fail(path, "token count mismatch: header says " + std::to_string(num_tokens) + " tokens (" +
                   std::to_string(expected_bytes) + " bytes) but the file has " + std::to_string(file_bytes) +
                   " bytes");
  }
  return num_tokens;
}

}  // namespace

void write_shard(const std::string& path, const uint16_t* tokens, int64_t num_tokens) {
  if (num_tokens < 0 || num_tokens > kShardMaxTokens) {
    fail(path, "cannot write " + std::to_string(num_tokens) + " tokens: a shard holds 0.." +
                   std::to_string(kShardMaxTokens) + " tokens (the header count is int32)");
  }
  if (num_tokens > 0 && tokens == nullptr) fail(path, "write_shard given a null token pointer");
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(num_tokens);
  AtomicFileWriter out(path);
  out.write(header, kShardHeaderBytes);
  out.write(tokens, static_cast<size_t>(num_tokens) * sizeof(uint16_t));
  out.commit();
}

ShardInfo read_shard_header(const std::string& path) {
  FileDescriptor fd(open_for_reading(path));
  return ShardInfo{path, validate_header(fd.get(), path)};
}

std::vector<uint16_t> read_shard_tokens(const std::string& path) {
  FileDescriptor fd(open_for_reading(path));
  const int64_t num_tokens = validate_header(fd.get(), path);
  std::vector<uint16_t> tokens(static_cast<size_t>(num_tokens));
  read_exact(fd.get(), path, tokens.data(), num_tokens * int64_t{sizeof(uint16_t)}, kShardHeaderBytes);
  return tokens;
}

std::vector<uint16_t> read_shard_token_range(const std::string& path, int64_t first, int64_t count) {
  FileDescriptor fd(open_for_reading(path));
  const int64_t num_tokens = validate_header(fd.get(), path);
  if (first < 0 || count < 0 || first > num_tokens || count > num_tokens - first) {
    fail(path, "token range of " + std::to_string(count) + " tokens from index " + std::to_string(first) +
                   " is outside the shard's " + std::to_string(num_tokens) + " tokens");
  }
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  read_exact(fd.get(), path, tokens.data(), count * int64_t{sizeof(uint16_t)}, shard_token_byte_offset(first));
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
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) fail(pattern, "no files match this shard pattern");
  if (rc == GLOB_ABORTED) {
    if (glob_errno == ENOENT) fail(pattern, "no files match this shard pattern (directory does not exist)");
    fail(pattern, "glob could not read a directory: " + std::string(std::strerror(glob_errno)));
  }
  if (rc != 0) fail(pattern, "glob failed with code " + std::to_string(rc));
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace llmc
