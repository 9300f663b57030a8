// The shared file-system helpers (see file_io.h).
#include "llmc/base/file_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace llmc {

void throw_errno_file_error(const std::string& path, const std::string& problem) {
  throw FileError(path, problem + ": " + std::strerror(errno));
}

FileHandle open_file(const std::string& path, const char* mode, const std::string& what) {
  FileHandle file(std::fopen(path.c_str(), mode));
  if (file != nullptr) return file;
  switch (mode[0]) {
    case 'r':
      if (errno == ENOENT) throw FileError(path, "cannot open " + what + ": file does not exist");
      throw_errno_file_error(path, "cannot open " + what);
    case 'w': throw_errno_file_error(path, "cannot create " + what);
    default: throw_errno_file_error(path, "cannot open " + what + " for appending");
  }
}

void make_directories(const std::string& dir, const std::string& what) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw FileError(dir, "cannot create " + what + ": " + error.message());
  if (!std::filesystem::is_directory(dir, error)) throw FileError(dir, "cannot create " + what + ": not a directory");
}

bool is_regular_file(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace llmc
