// Temp-file-plus-rename writer shared by shards, checkpoints and optimizer state (see atomic_file.h).
#include "llmc/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace llmc {

namespace {
[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}
}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)), temp_path_(path_ + ".tmp") {
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) fail(temp_path_, "cannot create file");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) fail(temp_path_, "write failed");
}

void AtomicFileWriter::commit() {
  if (std::fflush(file_) != 0) fail(temp_path_, "flush failed");
  if (::fsync(fileno(file_)) != 0) fail(temp_path_, "fsync failed");
  const int close_status = std::fclose(file_);
  file_ = nullptr;
  if (close_status != 0) fail(temp_path_, "close failed");
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) fail(path_, "cannot rename " + temp_path_ + " into place");
  committed_ = true;
}

}  // namespace llmc
