// Helpers shared by the C++ unit tests: a GoogleTest fixture that gives each test a fresh temporary
// directory (removed afterwards), a file's bytes read and written whole (to damage files on purpose), and a
// check that a call throws a std::runtime_error naming the problem.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
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

inline std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
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
