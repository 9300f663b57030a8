// Helpers shared by the C++ unit tests: a GoogleTest fixture that gives each test a fresh temporary
// directory (removed afterwards), a file's bytes read and written whole (to damage files on purpose), a check
// that a call throws a std::runtime_error naming the problem, and a float's bits (to compare results bit for bit).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace llmc::test {

// The one temp-dir fixture: each test gets its own directory <temp>/<prefix>_XXXXXX (dir()), removed
// afterwards; path(name) is a file inside it.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    std::string base = (std::filesystem::temp_directory_path() / (prefix_ + "_XXXXXX")).string();
    ASSERT_NE(::mkdtemp(base.data()), nullptr) << "mkdtemp failed for " << base;
    dir_ = base;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string dir() const { return dir_.string(); }

 private:
  std::string prefix_;
  std::filesystem::path dir_;
};

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Header word `word` (int32, little-endian as written) of a file's bytes set to `value`.
inline void set_int32_word(std::vector<char>& bytes, int word, int32_t value) {
  std::memcpy(bytes.data() + 4 * static_cast<size_t>(word), &value, sizeof value);
}

// `good` changed by edit(bytes), written to `file`: a damaged copy for a reader's error tests. Returns `file`.
template <typename Edit>
std::string write_edited_copy(const std::vector<char>& good, const std::string& file, Edit edit) {
  std::vector<char> bytes = good;
  edit(bytes);
  write_bytes(file, bytes);
  return file;
}

// Expects read(output) to throw a one-line std::runtime_error "<file>: ..." that contains `fragment`, and
// `output` (holding one value) to be left untouched: a reader's contract for a bad file.
template <typename Read>
void expect_file_error(const std::string& file, Read read, const std::string& fragment) {
  std::vector<float> output = {1.0f};
  try {
    read(output);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const std::runtime_error& error) {
    const std::string what = error.what();
    EXPECT_EQ(what.rfind(file + ": ", 0), 0u) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
  }
  EXPECT_EQ(output, std::vector<float>{1.0f}) << "a failed read changed the output";
}

// Expects `call` to throw std::runtime_error whose message contains every fragment.
template <typename Call>
void expect_error(Call call, const std::vector<std::string>& fragments) {
  try {
    call();
    FAIL() << "expected an error mentioning '" << fragments.front() << "'";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    for (const auto& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "message '" << message << "' lacks '" << fragment << "'";
    }
  }
}

}  // namespace llmc::test
