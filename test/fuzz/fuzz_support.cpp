// The fuzz targets' shared helpers (see fuzz_support.h).
#include "test/fuzz/fuzz_support.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/base/file_io.h"

namespace llmc::fuzz {

namespace {
// Where this process's input files go: /dev/shm where there is one, since every round trip's writer
// fsyncs, which costs milliseconds on a disk and nothing on tmpfs (measured: ~150 inputs/s on the disk
// against thousands). Names carry the process id, so parallel fuzzers never share a file; each InputFile
// removes its files, and libFuzzer may end a process without running destructors, so no directory is
// made that could be left behind.
std::string file_prefix() {
  const char* base = std::getenv("TMPDIR");
  const std::string root = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                           : base != nullptr && *base != '\0' ? base
                                                              : "/tmp";
  return root + "/llmc_fuzz_" + std::to_string(::getpid()) + "_";
}
}  // namespace

InputFile::InputFile(const uint8_t* data, size_t size, const std::string& suffix)
    : path_(file_prefix() + "input" + suffix), copy_(file_prefix() + "copy" + suffix) {
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

bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace llmc::fuzz
