// The fuzz targets' shared helpers (see fuzz_support.h).
#include "test/fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "llmc/file_io.h"

namespace llmc::fuzz {

namespace {
// One directory per process, made on first use (libFuzzer runs inputs one at a time in a process). In
// /dev/shm where there is one: every round trip's writer fsyncs, which costs milliseconds on a disk and
// nothing on tmpfs (measured: ~150 inputs/s on the disk against thousands).
const std::string& process_directory() {
  static const std::string directory = [] {
    const char* base = std::getenv("TMPDIR");
    const std::string root = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                             : base != nullptr && *base != '\0' ? base
                                                                : "/tmp";
    std::string pattern = root + "/llmc_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) finding("cannot create a temporary directory from " + pattern);
    return pattern;
  }();
  return directory;
}
}  // namespace

InputFile::InputFile(const uint8_t* data, size_t size, const std::string& suffix)
    : path_(process_directory() + "/input" + suffix), copy_(process_directory() + "/copy" + suffix) {
  const FileHandle out = open_file(path_, "wb", "fuzz input");
  if ((size > 0 && std::fwrite(data, 1, size, out.get()) != size) || std::fflush(out.get()) != 0)
    finding(path_ + ": cannot write the input");
}

InputFile::~InputFile() {
  std::remove(path_.c_str());
  std::remove(copy_.c_str());
}

void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace llmc::fuzz
