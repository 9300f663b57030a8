// What every fuzz target shares: the input handed to a reader as a file (the readers take paths), and the
// rule each reader must keep -- bad input is a std::runtime_error whose message names the file; any other
// exception, a crash or a sanitizer report is a finding -- plus findings for broken properties (a round
// trip that changes the data). Plain C++: the same targets build with libFuzzer (clang) and with the
// replay driver (any compiler).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc::fuzz {

// The input bytes in a file of this process's temporary directory (removed with the object), with the
// given name suffix; also `copy()`, a second path there for round trips.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size, const std::string& suffix);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  const std::string& path() const { return path_; }
  const std::string& copy() const { return copy_; }

 private:
  std::string path_, copy_;
};

// Prints "fuzz finding: <what>" and aborts, so that libFuzzer saves the input.
[[noreturn]] void finding(const std::string& what);

// Round trips of parameters: bitwise equal, except that any NaN equals any NaN (bf16 rounding may quiet a
// signalling NaN).
bool same_values(const std::vector<float>& a, const std::vector<float>& b);

// Runs `read`; true when it returns. A std::runtime_error whose message does not contain `path` is a
// finding (an error must name the file); one that does is bad input refused cleanly: false.
template <class Read>
bool reads_cleanly(Read&& read, const std::string& path) {
  try {
    read();
    return true;
  } catch (const std::runtime_error& error) {
    if (std::string(error.what()).find(path) == std::string::npos)
      finding(std::string("an error that does not name the file: ") + error.what());
    return false;
  }
}
}  // namespace llmc::fuzz
