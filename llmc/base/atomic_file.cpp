// Temp-file-plus-rename writer shared by shards, checkpoints, optimizer state, manifests, traces and
// dumps (see atomic_file.h).
#include "llmc/base/atomic_file.h"

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
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_.get()) != bytes) throw_errno_file_error(path_, "write failed");
  checksum_.update(data, bytes);
  bytes_written_ += bytes;
}

void AtomicFileWriter::patch(size_t offset, const void* data, size_t bytes) {
  if (offset + bytes > bytes_written_)
    throw FileError(path_, "patch of bytes " + std::to_string(offset) + ".." + std::to_string(offset + bytes) +
                               " beyond the " + std::to_string(bytes_written_) + " written");
  if (std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0 ||
      std::fwrite(data, 1, bytes, file_.get()) != bytes || std::fseek(file_.get(), 0, SEEK_END) != 0)
    throw_errno_file_error(path_, "write failed");
}

WrittenFile AtomicFileWriter::commit() {
  // Buffered bytes reach the disk only here, so a full disk usually shows up in the flush or the fsync.
  if (std::fflush(file_.get()) != 0) throw_errno_file_error(path_, "write failed");
  if (::fsync(fileno(file_.get())) != 0) throw_errno_file_error(path_, "write failed (fsync)");
  // Closed here, not by the handle, because a failed close can lose buffered data.
  if (std::fclose(file_.release()) != 0) throw_errno_file_error(path_, "write failed (close)");
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw_errno_file_error(path_, "cannot rename " + temp_path_ + " into place");
  committed_ = true;
  return WrittenFile{path_, bytes_written_, checksum()};
}

}  // namespace llmc
