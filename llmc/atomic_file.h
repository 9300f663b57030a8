// Writing a file so that readers never see half of it: bytes go to `path.tmp`, which is flushed,
// fsynced and renamed over `path` only by commit(). Destroying an uncommitted writer removes the temp.
#pragma once
#include <cstddef>
#include <string>

#include "llmc/file_io.h"

namespace llmc {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // throws FileError
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);  // throws FileError
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();                                // flush, fsync, rename into place
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  FileHandle file_;
  bool committed_ = false;
};

}  // namespace llmc
