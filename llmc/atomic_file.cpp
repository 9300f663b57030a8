// Temp-file-plus-rename writer shared by shards, checkpoints, optimizer state, traces and dumps (see
// atomic_file.h).
#include "llmc/atomic_file.h"

#include <unistd.h>

#include <cstdio>

namespace llmc {

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp"), file_(open_file(temp_path_, "wb", "file")) {}

AtomicFileWriter::~AtomicFileWriter() {
  file_.reset();
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_.get()) != bytes)
    throw_errno_file_error(temp_path_, "write failed");
}

void AtomicFileWriter::commit() {
  if (std::fflush(file_.get()) != 0) throw_errno_file_error(temp_path_, "flush failed");
  if (::fsync(fileno(file_.get())) != 0) throw_errno_file_error(temp_path_, "fsync failed");
  // Closed here, not by the handle, because a failed close can lose buffered data.
  if (std::fclose(file_.release()) != 0) throw_errno_file_error(temp_path_, "close failed");
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw_errno_file_error(path_, "cannot rename " + temp_path_ + " into place");
  committed_ = true;
}

}  // namespace llmc
