// Writing a file so that readers never see half of it: bytes go to `path.tmp`, which is flushed,
// fsynced and renamed over `path` only by commit(). Destroying an uncommitted writer (a failed write:
// disk full, permission, I/O error) removes the temp, so a failure leaves neither half a file nor a
// temp behind. The writer also checksums what it writes (llmc/base/checksum.h), for formats that store it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "llmc/base/checksum.h"
#include "llmc/base/file_io.h"

namespace llmc {

// What commit() reports: where the file went, its size and the checksum of what write() was given.
struct WrittenFile {
  std::string path;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // throws FileError
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Errors name `path` (not the temp) and errno's cause: "<path>: write failed: No space left on device".
  void write(const void* data, size_t bytes);  // throws FileError
  void write(const std::string& text) { write(text.data(), text.size()); }
  // Overwrites bytes already written at `offset` (a header field that holds the checksum of the
  // whole file); not counted in checksum().
  void patch(size_t offset, const void* data, size_t bytes);
  WrittenFile commit();                         // flush, fsync, rename into place
  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t checksum() const { return checksum_.digest(); }  // of every byte passed to write()

 private:
  std::string path_;
  std::string temp_path_;
  FileHandle file_;
  Checksum checksum_;
  uint64_t bytes_written_ = 0;
  bool committed_ = false;
};

}  // namespace llmc
