// File-system helpers every module shares, so that a file problem always reads "<path>: <problem>":
// the error type (with errno's text where a system call failed), an owned FILE handle, directory
// creation (mkdir -p) and the regular-file test.
#pragma once

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace llmc {

// "<path>: <problem>". Thrown by every reader and writer of the project's files.
class FileError : public std::runtime_error {
 public:
  FileError(const std::string& path, const std::string& problem) : std::runtime_error(path + ": " + problem) {}
};

// Throws FileError(path, problem + ": " + strerror(errno)): for a failed system call.
[[noreturn]] void throw_errno_file_error(const std::string& path, const std::string& problem);

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
// Closed on every path out of its scope. Writers that must see a failed close use AtomicFileWriter.
using FileHandle = std::unique_ptr<std::FILE, FileCloser>;

// fopen; throws FileError "<path>: cannot open <what>" (mode r; "...: file does not exist" when it is
// missing), "cannot create <what>" (mode w) or "cannot open <what> for appending" (mode a), followed by
// errno's text.
FileHandle open_file(const std::string& path, const char* mode, const std::string& what);

// Creates `dir` and its missing parents; throws FileError "<dir>: cannot create <what>: ...".
void make_directories(const std::string& dir, const std::string& what);

bool is_regular_file(const std::string& path);

}  // namespace llmc
