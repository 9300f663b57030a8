// Writing a file so that readers never see half of it: bytes go to `path.tmp`, which is flushed,
// fsynced and renamed over `path` only by commit(). Destroying an uncommitted writer removes the temp.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace llmc {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // throws std::runtime_error naming the file
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);  // throws std::runtime_error naming the file
  void commit();                                // flush, fsync, rename into place
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace llmc
